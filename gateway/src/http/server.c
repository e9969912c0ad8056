/*
 * The HTTP server: one libmicrohttpd daemon per event loop (rt/loops.c) on one listening
 * socket, the access handler that streams request bodies in and drives each request through
 * its operation (gw_op, request.h), and graceful shutdown. What a request must pass before
 * its operation starts (framing, route, authentication, the body's cap) is intake.c and
 * auth.c; the open connections and their request deadlines are conns.c.
 *
 * A request's life cycle, every step here:
 *   1. first call: route it (base/routes.c), refuse what can be refused before the body
 *      (framing, auth, 404/405, a declared length over the cap: intake.c); its operation is
 *      the route's (srv->ops, set by main.c);
 *   2. while the body streams in: append it, up to the cap (413 past it);
 *   3. the last call (GW_OP_RECEIVING): op->start; the request is now GW_OP_STARTED;
 *   4. every later call (the operation suspended the connection and something resumed it):
 *      op->resumed;
 *   5. completion (NOTIFY_COMPLETED): log line, metrics, then op->completed when the
 *      operation has state.
 *
 * What happens when things go wrong:
 *   - Redis restarts or disappears: the pipelines' calls fail with EUNAVAILABLE within their
 *     connect/command timeouts (2 s; rt/pipe.c, "Failures"), the request answers 503
 *     backend_unavailable, and the next call reconnects. No restart of the gateway is
 *     needed.
 *   - A client disconnects mid-request: while the body streams in, MHD ends the request and
 *     NOTIFY_COMPLETED frees its state; nothing was done yet. Once the handler runs it runs
 *     to completion (a lock may be taken, a write may be stored) and the answer is lost.
 *     A lost /lock answer leaves a hold nobody knows about: its lease expires by itself.
 *     A lost PUT answer leaves a durable write; a retry with the same token is accepted
 *     again (equal tokens are accepted) and bumps the version.
 *   - The process is killed at any point: no state lives only in this process. Locks live
 *     in Redis with leases, values and the token ledger in storage. Killed after a lock was
 *     taken but before the answer was sent, the client never learns the token and the lease
 *     expires. Killed after store_ledger_cover() but before answering, the token was covered
 *     and is never reissued. The next process starts from the ledger's floor.
 */
#define _DEFAULT_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http/respond.h"
#include "http/server.h"
#include "http/server_internal.h"
#include "http/tls.h"
#include "rt/log.h"
#include "rt/loops.h"
#include "rt/pipe.h"
#include "rt/util.h"
#include "rt/waiters.h"

/* ---- Per-request state and the access handler ------------------------------------- */

static gw_request *request_new(gw_server *srv, struct MHD_Connection *conn, const char *url,
                               const char *method)
{
    gw_request *req = calloc(1, sizeof *req);
    if (req == NULL) {
        return NULL;
    }
    req->srv = srv;
    req->rt = &srv->rt;
    req->conn = conn;
    gw_conn *c = gw__conn_state(conn);
    req->slot = c != NULL ? c->slot : NULL;
    req->start_us = gw__now_us();
    gw__printable(req->method, sizeof req->method, method);
    req->url = url;
    req->param = "";
    atomic_fetch_add(&srv->inflight, 1);
    return req;
}

static void request_free(gw_request *req)
{
    gw__clients_release(req->clients);
    free(req->body);
    free(req);
}

static enum MHD_Result access_handler(void *cls, struct MHD_Connection *conn, const char *url,
                                      const char *method, const char *version,
                                      const char *upload_data, size_t *upload_data_size,
                                      void **req_cls)
{
    gw_server *srv = cls;
    gw_request *req = *req_cls;
    enum MHD_Result result = MHD_YES;

    if (req == NULL) {
        req = request_new(srv, conn, url, method);
        if (req == NULL) {
            return MHD_NO; /* out of memory: MHD closes the connection */
        }
        *req_cls = req;
        if (gw__request_framing(req, url, version, &result) != 0 ||
            gw__request_start(req, url, method, &result) != 0) {
            return result;
        }
        return MHD_YES;
    }
    if (*upload_data_size == 0) {
        gw__conn_deadline(conn, 0); /* received in full: the request deadline is met */
    }
    if (req->answered) {
        *upload_data_size = 0; /* the body of an already refused request is dropped */
        return MHD_YES;
    }
    if (*upload_data_size != 0) {
        if (gw__body_append(req, upload_data, *upload_data_size) != 0) {
            return MHD_NO;
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (req->body_too_large) {
        return gw__send_error(req, MHD_HTTP_CONTENT_TOO_LARGE, "payload_too_large", NULL,
                              "the request body is over %zu bytes", req->body_max);
    }
    if (req->stage == GW_OP_RECEIVING) {
        req->stage = GW_OP_STARTED;
        return req->op->start(req);
    }
    /* Only a connection its operation suspended is called again once its body is in. */
    return req->op->resumed(req);
}

static void request_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                              enum MHD_RequestTerminationCode toe)
{
    gw_server *srv = cls;
    gw_request *req = *req_cls;
    gw_conn *c = gw__conn_state(conn);

    if (c != NULL) {
        c->served++;
        gw__conn_deadline(conn, GW_CONN_TIMEOUT_S); /* the next request line, if any */
    }
    if (req == NULL) {
        return;
    }
    int64_t micros = gw__now_us() - req->start_us;
    gw__log_request(srv->rt.cfg, req->method, gw__route_log_path(req->url), req->status, micros,
                    toe, req->client != NULL ? req->client->name : NULL);
    gw__metrics_observe(&srv->rt.metrics, req->route != NULL ? (int)req->route->id : GW_R_NONE,
                        req->status, micros);
    if (req->client != NULL) {
        gw__metrics_client(&srv->rt.metrics, req->client->name, req->status);
    }
    if (req->op_state != NULL && req->op->completed != NULL) {
        req->op->completed(req, toe);
    } else {
        free(req->op_state); /* one block and nothing else (request.h, gw_op) */
    }
    request_free(req);
    *req_cls = NULL;
    atomic_fetch_sub(&srv->inflight, 1);
}

/* Leaves the request path exactly as it arrived. Valid names never need percent-encoding,
 * so "/resources/a%00b" reaches the router raw and fails name validation with a 400: it can
 * never decode into a NUL and become a write to "a". */
static size_t no_unescape(void *cls, struct MHD_Connection *conn, char *s)
{
    (void)cls;
    (void)conn;
    return strlen(s);
}

/* The waiters' thread, then the pipelines' (a waiter's attempt may be in one). */
static void stop_threads(gw_server *srv)
{
    gw__waitq_stop(srv->rt.waitq);
    srv->rt.waitq = NULL;
    gw__pipes_stop(&srv->rt);
}

unsigned int gw__server_loops(const gw_config *cfg)
{
    /* No more loops than connections: a daemon needs a share of at least one. */
    int n = cfg->threads < cfg->max_connections ? cfg->threads : cfg->max_connections;
    return n > 0 ? (unsigned int)n : 1;
}

static void log_limited(const gw_config *cfg, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    gw__log_mhd((void *)cfg, fmt, ap);
    va_end(ap);
}

/* A connection refused for its address's limit (loops.c): logged the way libmicrohttpd
 * logged its own per-IP refusals, through the same rate limit (log.h, GW_MHD_LOG_PER_S). */
static void address_refused(void *arg, unsigned int limit)
{
    log_limited(arg, "Server reached connection limit for one address (%u). Closing inbound "
                     "connection.\n",
                limit);
}

/* The listening socket every loop's daemon shares: non-blocking, since every loop accepts
 * on it and all but one get EAGAIN. Returns it, or -1 with err. */
static int listen_socket(const gw_config *cfg, const struct sockaddr_storage *addr, char *err,
                         size_t errlen)
{
    int one = 1;
    int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "cannot create a socket: %s", strerror(errno));
        return -1;
    }
    /* What libmicrohttpd set on a socket it made itself: address reuse, and IPv6 only. */
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        (addr->ss_family == AF_INET6 &&
         setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) != 0)) {
        snprintf(err, errlen, "cannot set up a socket: %s", strerror(errno));
        close(fd);
        return -1;
    }
    socklen_t len = addr->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                : sizeof(struct sockaddr_in);
    if (bind(fd, (const struct sockaddr *)addr, len) != 0 || listen(fd, SOMAXCONN) != 0) {
        snprintf(err, errlen, "cannot serve on %s (address in use or not permitted?)",
                 cfg->listen);
        close(fd);
        return -1;
    }
    return fd;
}

/* Starts one daemon per loop on the shared socket and the loops' threads. */
static int loops_start(gw_server *srv, int ipv6, char *err, size_t errlen)
{
    /* Suspend/resume parks waiting /lock requests without holding a loop thread. No
     * internal thread: loops.c runs each daemon (MHD_run). */
    unsigned int flags = MHD_USE_EPOLL | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME |
                         (ipv6 ? MHD_USE_IPv6 : 0) | (srv->tls != NULL ? MHD_USE_TLS : 0);
    /* Every loop's daemon serves the same listener: each gets the TLS options. */
    struct MHD_OptionItem tls_opts[6] = {{MHD_OPTION_END, 0, NULL}};
    if (srv->tls != NULL) {
        gw__tls_options(srv->tls, tls_opts);
    }
    unsigned int n = gw__server_loops(srv->rt.cfg);
    /* Each daemon its share of the limit, the remainder to the first ones, as
     * libmicrohttpd's pool split it. */
    unsigned int share = (unsigned int)srv->rt.cfg->max_connections / n;
    unsigned int extra = (unsigned int)srv->rt.cfg->max_connections % n;

    srv->rt.loops = gw__loops_new(n, (unsigned int)srv->rt.cfg->max_connections_per_address,
                               address_refused, (void *)srv->rt.cfg, err, errlen);
    if (srv->rt.loops == NULL) {
        return -1;
    }
    for (unsigned int i = 0; i < n; i++) {
        struct MHD_Daemon *d = MHD_start_daemon(
            flags, 0, gw__loops_accept, srv->rt.loops, access_handler, srv,
            /* First, so that libmicrohttpd's messages about the options below are ours. */
            MHD_OPTION_EXTERNAL_LOGGER, gw__log_mhd, (void *)srv->rt.cfg,
            MHD_OPTION_LISTEN_SOCKET, srv->listen_fd,
            MHD_OPTION_CONNECTION_LIMIT, share + (i < extra ? 1 : 0),
            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)GW_CONN_TIMEOUT_S,
            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)GW_CONN_MEMORY,
            MHD_OPTION_NOTIFY_COMPLETED, request_completed, srv, MHD_OPTION_UNESCAPE_CALLBACK,
            no_unescape, NULL, MHD_OPTION_NOTIFY_CONNECTION, gw__conn_notify, srv->conns,
            MHD_OPTION_URI_LOG_CALLBACK, gw__conn_request_line, NULL, MHD_OPTION_ARRAY,
            tls_opts, MHD_OPTION_END);
        if (d == NULL) {
            snprintf(err, errlen, "cannot start HTTP loop %u on %s", i, srv->rt.cfg->listen);
            return -1;
        }
        if (gw__loops_set(srv->rt.loops, i, d, err, errlen) != 0) {
            return -1;
        }
    }
    gw__loops_every(srv->rt.loops, GW_REAP_MS, gw__conns_sweep, srv->conns);
    if (srv->chore != NULL) {
        gw__loops_every(srv->rt.loops, srv->chore_ms, srv->chore, &srv->rt);
    }
    return gw__loops_start(srv->rt.loops, err, errlen);
}

/* Undoes what gw__server_start() did, in reverse; each step only when it was done. */
static void server_unwind(gw_server *srv)
{
    /* The loops stop first, so nothing submits to a pipeline any more; then waitd and the
     * pipelines, which may still be resuming connections of the last batch (the loops'
     * memory stays until then); then the daemons. */
    gw__loops_join(srv->rt.loops);
    stop_threads(srv);
    gw__loops_free(srv->rt.loops); /* the sweep with them; their closing notifications need
                                    * the list, freed next */
    srv->rt.loops = NULL;
    gw__conns_free(srv);
    if (srv->listen_fd >= 0) {
        close(srv->listen_fd);
        srv->listen_fd = -1;
    }
}

int gw__server_start(gw_server *srv, char *err, size_t errlen)
{
    struct sockaddr_storage addr;

    srv->listen_fd = -1;
    srv->rt.loops = NULL;
    if (gw__config_listen_addr(srv->rt.cfg->listen, &addr, err, errlen) != 0) {
        return -1;
    }
    if (gw__pipes_start(&srv->rt, err, errlen) != 0) {
        return -1;
    }
    if (gw__waitq_start(&srv->rt, err, errlen) != 0) {
        gw__pipes_stop(&srv->rt);
        return -1;
    }
    srv->conns = calloc(1, sizeof *srv->conns);
    if (srv->conns == NULL) {
        snprintf(err, errlen, "out of memory");
        stop_threads(srv);
        return -1;
    }
    pthread_mutex_init(&srv->conns->mu, NULL);
    srv->conns->srv = srv;
    srv->listen_fd = listen_socket(srv->rt.cfg, &addr, err, errlen);
    if (srv->listen_fd < 0 || loops_start(srv, addr.ss_family == AF_INET6, err, errlen) != 0) {
        server_unwind(srv);
        return -1;
    }
    return 0;
}

/* Shutdown, in this order:
 *   1. stop accepting: every loop quiesces its daemon, then the listening socket is closed
 *      (a new connection is refused, not left in the backlog);
 *   2. every answer from now on carries "Connection: close" (see gw__queue), and every parked
 *      /lock is woken and answers 503 shutting_down, as does any that tries to park;
 *   3. wait until no request is in flight, up to drain_ms;
 *   4. the loop threads stop (their exit closes their lk_clients, and ends the request
 *      deadline sweep); then the waiters' thread and the pipelines, which may still be
 *      resuming connections of their last batch; then MHD_stop_daemon() closes each
 *      daemon's idle keep-alive connections. No connection is suspended by then (MHD
 *      forbids stopping with one). */
int gw__server_stop(gw_server *srv, int drain_ms)
{
    atomic_store(&srv->shutting_down, 1);
    gw__loops_quiesce(srv->rt.loops);
    close(srv->listen_fd); /* no loop has it any more: new connections are refused */
    srv->listen_fd = -1;
    gw__waitq_shutdown(srv->rt.waitq);
    int64_t deadline = gw__now_us() + (int64_t)drain_ms * 1000;
    while (atomic_load(&srv->inflight) > 0) {
        if (gw__now_us() > deadline) {
            return -1;
        }
        struct timespec nap = {0, 10 * 1000000L};
        nanosleep(&nap, NULL);
    }
    server_unwind(srv);
    return 0;
}
