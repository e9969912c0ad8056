/*
 * The gateway's counters (metrics.c): atomics, so any thread counts without a lock.
 */
#ifndef GATEWAY_METRICS_H
#define GATEWAY_METRICS_H

#include <stdatomic.h>
#include <stdint.h>

#include "locklib/locklib.h"

#include "base/routes.h"

/* Outcomes by operation. The names are the label values. */
#define GW_ACQUIRE_OUTCOMES(X)                                                            \
    X(acquired) X(reentered) X(replayed) X(locked) X(invalid) X(unavailable)              \
    X(idempotency_conflict) X(error) X(shutting_down) X(abandoned)
#define GW_RELEASE_OUTCOMES(X)                                                            \
    X(released) X(still_held) X(not_owner) X(replayed) X(invalid) X(unavailable)          \
    X(idempotency_conflict) X(error)
#define GW_RENEW_OUTCOMES(X)                                                              \
    X(renewed) X(not_owner) X(replayed) X(invalid) X(unavailable) X(idempotency_conflict)  \
    X(error)
#define GW_WRITE_OUTCOMES(X)                                                              \
    X(accepted) X(stale) X(unknown_token) X(not_exclusive) X(too_large) X(full) X(invalid) \
    X(unavailable) X(error)

#define GW_X_ACQ(name) GW_ACQ_##name,
#define GW_X_REL(name) GW_REL_##name,
#define GW_X_REN(name) GW_REN_##name,
#define GW_X_WR(name) GW_WR_##name,
typedef enum { GW_ACQUIRE_OUTCOMES(GW_X_ACQ) GW_ACQ_COUNT } gw_acquire_outcome;
typedef enum { GW_RELEASE_OUTCOMES(GW_X_REL) GW_REL_COUNT } gw_release_outcome;
typedef enum { GW_RENEW_OUTCOMES(GW_X_REN) GW_REN_COUNT } gw_renew_outcome;
typedef enum { GW_WRITE_OUTCOMES(GW_X_WR) GW_WR_COUNT } gw_write_outcome;
#undef GW_X_ACQ
#undef GW_X_REL
#undef GW_X_REN
#undef GW_X_WR

/* Why a parked waiter was woken (waiters.c). The names are the metric label values. */
#define GW_WAKE_REASONS(X) X(none) X(release) X(expiry) X(deadline) X(disconnect) X(shutdown)
#define GW_X_WAKE(name) GW_WAKE_##name,
typedef enum gw_wake { GW_WAKE_REASONS(GW_X_WAKE) GW_WAKE_COUNT } gw_wake;
#undef GW_X_WAKE
#define GW_WAKE_NONE GW_WAKE_none
#define GW_WAKE_RELEASE GW_WAKE_release
#define GW_WAKE_EXPIRY GW_WAKE_expiry
#define GW_WAKE_DEADLINE GW_WAKE_deadline
#define GW_WAKE_DISCONNECT GW_WAKE_disconnect
#define GW_WAKE_SHUTDOWN GW_WAKE_shutdown

#define GW_LATENCY_BUCKETS 14
/* Status codes counted by fencegate_http_responses_total; anything else is "other". */
#define GW_STATUS_CODES(X)                                                                \
    X(200) X(400) X(401) X(403) X(404) X(405) X(409) X(413) X(422) X(500) X(503) X(507)
#define GW_X_COUNT(code) +1
#define GW_STATUS_COUNT (0 GW_STATUS_CODES(GW_X_COUNT) + 1)

/* Clients counted by name (--clients): the names of the clients files in force since start,
 * the first GW_METRIC_CLIENTS of them; any later one counts as "other". */
#define GW_METRIC_CLIENTS 64
#define GW_METRIC_CLIENT_CLASSES 3 /* 2xx (and 1xx, 3xx), 4xx, 5xx */

typedef struct gw_metrics {
    atomic_ullong acquire[GW_ACQ_COUNT];
    atomic_ullong release[GW_REL_COUNT];
    atomic_ullong renew[GW_REN_COUNT];
    atomic_ullong write[GW_WR_COUNT];
    atomic_ullong admin_release[2];       /* POST /admin/release: [0] released, [1] not held */
    atomic_ullong sessions_ended[2];      /* sessions ended and fenced: [0] by DELETE, [1] by
                                           * this gateway's reaper after they expired */
    atomic_llong locks_held;              /* first acquisitions - releases to zero, here */
    const lk_breaker *breaker;            /* the Redis stall breaker, for its counter */
    atomic_int redis_up;                  /* last observed state */
    atomic_ullong floor_corrections;      /* acquisitions whose counter was raised */
    atomic_ullong responses[GW_STATUS_COUNT];
    atomic_llong waiters_parked;          /* /lock requests parked, waiting for a release */
    atomic_ullong waiter_wakes[GW_WAKE_COUNT];
    atomic_ullong parked_unasked;         /* waiting /locks parked on a known holder
                                           * without asking Redis (ops/lock.c) */
    atomic_ullong handoffs;               /* waiters whose attempt went out behind an
                                           * /unlock's release (ops/lock_attempt.c) */
    atomic_int subscriber_up;             /* the release subscriber is connected */
    atomic_llong subscriptions;           /* resources whose release channel Redis has
                                           * confirmed on the subscriber's connection */
    atomic_llong redis_failovers;         /* the most master changes one handle saw */
    atomic_ullong deadline_closed;        /* connections closed for missing their request
                                           * deadline (http/conns.c) */
    /* The pipelines (pipe.c), [0] Redis, [1] storage, [2] side, [3] reads: batches, jobs. */
    atomic_ullong pipe_batches[4];
    atomic_ullong pipe_jobs[4];
    /* Latency histogram per route (+1 for unmatched), cumulative at output time. */
    atomic_ullong latency_bucket[GW_R_COUNT + 1][GW_LATENCY_BUCKETS + 1];
    atomic_ullong latency_sum_us[GW_R_COUNT + 1];
    /* The storage writer's commits (pipe.c store_run), the same buckets. */
    atomic_ullong commit_bucket[GW_LATENCY_BUCKETS + 1];
    atomic_ullong commit_sum_us;
    atomic_int store_up;                  /* the last /readyz or /metrics store probe */
    atomic_llong connections;             /* HTTP connections open now (http/conns.c) */
    atomic_ullong ledger_uncovered;       /* tokens the ledger failed to record durably:
                                           * not handed out, answered 503 (ops/lock_answer.c) */
    /* The limits in force (after start-up fitted them to the open-file limit), exported so
     * that "near the limit" can be computed from the scrape alone. Set once at start. */
    int max_connections;
    int max_waiters;
    /* Requests by client (+1: "other") and status class. A name is written once, before
     * client_count covers it, under client_lock (taken only to add a name). */
    char client_names[GW_METRIC_CLIENTS][65];
    atomic_int client_count;
    atomic_int client_lock;
    atomic_ullong client_requests[GW_METRIC_CLIENTS + 1][GW_METRIC_CLIENT_CLASSES];
    atomic_int client_waiting[GW_METRIC_CLIENTS + 1]; /* parked /locks by client */
    atomic_int client_conns[GW_METRIC_CLIENTS + 1];   /* connections by client */
} gw_metrics;

void gw__metrics_observe(gw_metrics *m, int route, int status, int64_t micros);
/* One commit of the storage writer, which took micros. */
void gw__metrics_observe_commit(gw_metrics *m, int64_t micros);
/* Counts a request of the client named name (at most 64 bytes) answered with status. */
void gw__metrics_client(gw_metrics *m, const char *name, int status);
/* A /lock of the client named name that may wait takes one of the client's waiting places:
 * at most limit, so that one client cannot take every waiter of --max-waiters. Returns the
 * place (give it back with gw__metrics_client_wait_give), or -1 when the client has its
 * limit. Counted by name, so a SIGHUP reload neither resets nor doubles it. Any thread. */
int gw__metrics_client_wait_take(gw_metrics *m, const char *name, int limit);
void gw__metrics_client_wait_give(gw_metrics *m, int place);
/* The same for a connection: counted under the client of its first authenticated request,
 * until it closes. */
int gw__metrics_client_conn_take(gw_metrics *m, const char *name, int limit);
void gw__metrics_client_conn_give(gw_metrics *m, int place);
/* Records what handle c saw of the Redis topology: redis_failovers becomes the largest
 * count any handle reported (each handle counts the master changes it met itself). */
void gw__metrics_note_topology(gw_metrics *m, const lk_topology *topo);
/* Writes the Prometheus text exposition into a malloc'd string (*len bytes), with the
 * topology as topo (the scraping thread's handle) shows it. NULL on allocation failure.
 * The caller frees it. */
char *gw__metrics_render(gw_metrics *m, const lk_topology *topo, size_t *len);

#endif
