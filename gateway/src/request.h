/*
 * The state every layer above the bottom one sees: the server (gw_server), a request
 * (gw_request) and the operation that serves it (gw_op). Types only; no functions.
 *
 * Threads: the HTTP event loops (loops.c, --threads of them) each run a libmicrohttpd
 * daemon that parses requests and answers them. Locks, unlocks, renewals and token checks
 * go to the Redis pipeline and token-checked writes to the storage writer (pipe.c): the
 * request is suspended meanwhile, so loop threads do not wait for those Redis calls or
 * commits. The other calls that may block (/metrics, /readyz, GET /locks, GET /resources:
 * a Redis PING or status read, a PostgreSQL read) go to the side pipelines' threads the
 * same way (on LMDB too, where a read costs microseconds and the hop is the larger part).
 * A write whose token the check does not show current is judged on the store readers, since
 * the refusal names the highest token written (a PostgreSQL query on a shared store). A
 * /lock's give-backs and fair-queue exits go through the Redis pipeline (locks.c). What
 * still runs on a loop thread: the fence's LMDB floor read before an attempt (a read of the
 * memory map; on PostgreSQL the floor reads nothing). The token ledger's cover, a small LMDB
 * commit once per block of tokens, runs on the pipeline thread that got the token
 * (gw__fence_answered). The store is shared: storage is thread-safe. Counters in gw_metrics are atomics. The fence's
 * stripes and the pipelines' queues have their own mutexes.
 */
#ifndef GATEWAY_REQUEST_H
#define GATEWAY_REQUEST_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <microhttpd.h>
#include <uuid/uuid.h>

#include "locklib/locklib.h"
#include "storage/storage.h"
#include "token_file.h"

#include "config.h"
#include "fence.h"
#include "loops.h"
#include "metrics.h"
#include "routes.h"

/* Opaque here, defined by the layer that owns them (pipe.h, waiters.h). */
typedef struct gw_pipe gw_pipe;
typedef struct gw_waitq gw_waitq;

typedef struct gw_server {
    const gw_config *cfg;
    store *st;
    char store_desc[600];         /* store_describe(st): for logs and /readyz, no password */
    lk_options lk_opts;
    char auth_token[FG_AUTH_TOKEN_MAX + 1];
    size_t auth_token_len;
    int auth_on;
    uuid_t owner_secret;          /* keys the owner derived from an Idempotency-Key */
    atomic_int shutting_down;     /* set by main when SIGTERM/SIGINT arrives */
    atomic_long inflight;         /* requests between their first call and completion */
    gw_metrics metrics;
    gw_loops *loops;              /* the HTTP event loops and their daemons (loops.c) */
    int listen_fd;                /* the socket every loop's daemon accepts on; -1 once
                                   * shutdown has closed it */
    gw_waitq *waitq;
    gw_fence fence;               /* the floor stripes, max_token, the ledger (fence.c) */
    gw_pipe *pipe;                /* Redis calls (pipe.c) */
    gw_pipe *writer;              /* token-checked writes (pipe.c) */
    gw_pipe *side;                /* Redis probes and status reads (pipe.c) */
    gw_pipe *reads;               /* value reads from the store (pipe.c) */
    struct gw_conns *conns;       /* open connections and their request deadlines (server.c) */
} gw_server;

typedef struct gw_request gw_request;

/*
 * An endpoint's operation. server.c drives every request through one, the way libuv drives
 * a uv_req_t through its callbacks, so no operation has to guess why it runs:
 *   start      the request is in (routed, authenticated, its body received under its cap):
 *              called once. It answers, or suspends the connection (a pipeline job, a park)
 *              and returns MHD_YES without an answer;
 *   resumed    a connection it suspended was resumed: called once per resume. An operation
 *              that suspends at more than one point keeps its own stage in its state;
 *   completed  the request ended, answered or not (toe says how): called once when the
 *              operation has state (req->op_state != NULL). It frees that state.
 * An operation that never suspends has no resumed; one without state, or whose state is one
 * block that free() releases with nothing else to do at the end, no completed (server.c
 * then frees op_state).
 */
typedef struct gw_op {
    enum MHD_Result (*start)(gw_request *req);
    enum MHD_Result (*resumed)(gw_request *req);
    void (*completed)(gw_request *req, enum MHD_RequestTerminationCode toe);
} gw_op;

/* Where a request is in its operation's life cycle; moved by server.c only. */
typedef enum gw_op_stage {
    GW_OP_RECEIVING = 0,          /* routed; its body is streaming in */
    GW_OP_STARTED,                /* start has run: every later call is a resume */
} gw_op_stage;

/* Per-request state, created on the first call of the access handler and freed in the
 * NOTIFY_COMPLETED callback. */
struct gw_request {
    gw_server *srv;
    struct MHD_Connection *conn;
    const gw_route *route;        /* NULL when no route matched */
    const gw_op *op;              /* the route's operation, NULL when no route matched */
    gw_op_stage stage;
    gw_addr_slot *slot;           /* its address's connection count (loops.c), NULL: none */
    void *op_state;               /* the operation's own state, freed by op->completed */
    char method[16];
    /* The raw request path and its {resource} part point into libmicrohttpd's connection
     * memory, valid until the request completes (also while it is suspended). Print them
     * through gw__printable(): they are client bytes. */
    const char *url;
    const char *param;            /* "" when the route has no {resource} */
    int param_too_long;           /* longer than any valid name: invalid */
    int64_t start_us;
    char *body;                   /* malloc'd, NUL-terminated */
    size_t body_len;
    size_t body_cap;
    size_t body_max;
    int body_too_large;           /* over body_max: the rest is discarded, the answer 413 */
    size_t body_dropped;          /* bytes discarded so far, at most GW_DRAIN_MAX */
    int answered;                 /* a response was queued */
    int status;                   /* the status of that response, for log and metrics */
};

#endif
