/*
 * A request (gw_request) and the operation that serves it (gw_op): the types the HTTP server
 * and every operation see. Types only; no functions. An operation reaches the gateway only
 * through req->rt, the runtime (rt/runtime.h); the server the request belongs to, and which
 * threads run what, is rt/gateway.h, which this header leaves out so that no operation can
 * reach into it.
 */
#ifndef GATEWAY_REQUEST_H
#define GATEWAY_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include <microhttpd.h>

#include "base/routes.h"
#include "rt/clients.h"
#include "rt/loops.h"
#include "rt/runtime.h"

typedef struct gw_request gw_request;
/* The HTTP server's state (rt/gateway.h): for the http layer only. */
struct gw_server;

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
    struct gw_server *srv;        /* the server it came in on: for the http layer */
    gw_rt *rt;                    /* &srv->rt: all an operation uses of the gateway */
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
    /* Who sent it (http/auth.c): the client, in its table, on which the request holds a
     * reference until it completes; both NULL without authentication. */
    gw_clients *clients;
    const gw_client *client;
};

#endif
