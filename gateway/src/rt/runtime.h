/*
 * The runtime an operation drives (gw_rt): what an operation in ops/ may use to submit work
 * to the pipelines, park and resume a request, pass the fence, and count in the metrics, and
 * nothing else. The HTTP server's own state (its connections, listening socket, TLS, client
 * table, routes, shutdown flag) lives around it in gw_server (rt/gateway.h), out of an
 * operation's reach: an operation sees a request and this, so what it can touch is named
 * here. The runtime's threads (pipe.c, waitd.c) take it too. Types only; no functions.
 */
#ifndef GATEWAY_RT_RUNTIME_H
#define GATEWAY_RT_RUNTIME_H

#include "locklib/locklib.h"
#include "storage/storage.h"

#include "base/config.h"
#include "core/fence.h"
#include "rt/loops.h"
#include "rt/metrics.h"

/* Opaque here, defined where they are implemented (pipe.c, waiters_internal.h). */
typedef struct gw_pipe gw_pipe;
typedef struct gw_waitq gw_waitq;

typedef struct gw_rt {
    const gw_config *cfg;
    store *st;
    char store_desc[600];         /* store_describe(st): for logs and /readyz, no password */
    lk_options lk_opts;           /* every Redis connection's (redis_client.c, pipe.c, waitd.c) */
    gw_metrics metrics;
    gw_loops *loops;              /* the HTTP event loops: waiting places, resumes (loops.c) */
    gw_waitq *waitq;              /* parked waiters (waiters.h) */
    gw_fence fence;               /* the floor stripes, max_token, the ledger (fence.c) */
    gw_pipe *pipe;                /* Redis calls (pipe.c) */
    gw_pipe *writer;              /* token-checked writes (pipe.c) */
    gw_pipe *side;                /* Redis probes and status reads (pipe.c) */
    gw_pipe *reads;               /* value reads from the store (pipe.c) */
    gw_pipe *sets;                /* multi-resource lock attempts (ops/lock_set.c) */
} gw_rt;

#endif
