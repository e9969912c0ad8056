/*
 * The gateway's shared state (gw_server): the runtime an operation drives (gw_rt, runtime.h)
 * and, around it, the HTTP server's own state. The HTTP server and main.c see all of it; an
 * operation sees only the gw_rt its request points to. Types only; no functions.
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
 * /lock's give-backs and fair-queue exits go through the Redis pipeline (ops/lock_attempt.c).
 * What still runs on a loop thread: the fence's LMDB floor read before an attempt (a read of
 * the memory map; on PostgreSQL the floor reads nothing), and, for a set /lock queued with
 * no set thread free, the start of another (pipe.c, grow()). The token ledger's cover, a small
 * LMDB commit once per block of tokens, runs on the pipeline thread that got the token
 * (gw__fence_answered). The store is shared: storage is thread-safe. Counters in gw_metrics
 * are atomics. The fence's stripes and the pipelines' queues have their own mutexes.
 */
#ifndef GATEWAY_RT_GATEWAY_H
#define GATEWAY_RT_GATEWAY_H

#include <stdatomic.h>

#include <uuid/uuid.h>

#include "rt/clients.h"
#include "rt/runtime.h"

typedef struct gw_tls gw_tls;
/* An endpoint's operation (http/request.h). */
struct gw_op;

typedef struct gw_server {
    /* What operations use (runtime.h): requests carry a pointer to it, never to the server. */
    gw_rt rt;
    /* The clients (--clients, or the --auth-token-file token as one); none installed: no
     * authentication. Swapped on SIGHUP (clients.h). */
    gw_clients_box clients;
    gw_tls *tls;                  /* the listener's TLS (http/tls.h); NULL: plain HTTP */
    uuid_t owner_secret;          /* keys the owner derived from an Idempotency-Key */
    atomic_int shutting_down;     /* set by main when SIGTERM/SIGINT arrives */
    /* A periodic chore (ops/sessions.c's reaper tick), set by main.c before
     * gw__server_start(): run with &rt on the first loop every chore_ms
     * (gw__loops_every); it must not block. NULL: none. */
    void (*chore)(void *rt);
    unsigned int chore_ms;
    atomic_long inflight;         /* requests between their first call and completion */
    int listen_fd;                /* the socket every loop's daemon accepts on; -1 once
                                   * shutdown has closed it */
    /* Each route's operation, in the order of gw_route_id: set by main.c, dispatched to by
     * http/server.c. */
    const struct gw_op *const *ops;
    struct gw_conns *conns;       /* open connections and their request deadlines
                                   * (http/conns.c) */
} gw_server;

#endif
