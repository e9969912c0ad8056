/*
 * The HTTP server and router: one libmicrohttpd daemon per event loop (loops.c) on one
 * listening socket, the access handler that routes, authenticates, streams and caps
 * request bodies and drives each request through its operation (gw_op, request.h), request
 * deadlines, and graceful shutdown.
 *
 * A request's life cycle, every step here:
 *   1. first call: route it (routes.c), refuse what can be refused before the body (framing,
 *      auth, 404/405, a declared length over the cap); its operation is the route's;
 *   2. while the body streams in: append it, up to the cap (413 past it);
 *   3. the last call (GW_OP_RECEIVING): op->start; the request is now GW_OP_STARTED;
 *   4. every later call (the operation suspended the connection and something resumed it):
 *      op->resumed;
 *   5. completion (NOTIFY_COMPLETED): log line, metrics, then op->completed when the
 *      operation has state.
 *
 * What happens when things go wrong:
 *   - Redis restarts or disappears: each loop thread's lk_client reports EUNAVAILABLE within
 *     its connect/command timeouts (2 s), the request answers 503 backend_unavailable, and
 *     the next call on that thread reconnects. No restart of the gateway is needed.
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
#include <strings.h>
#include <time.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rt/log.h"
#include "rt/pipe.h"
#include "http/respond.h"
#include "http/server.h"
#include "rt/util.h"
#include "rt/waiters.h"

/* ---- Headers and authentication ---------------------------------------------------- */

/* Compares in time that depends only on the lengths, never on where the bytes differ. */
static int token_equal(const char *given, size_t given_len, const char *want, size_t want_len)
{
    volatile unsigned char diff = (unsigned char)(given_len != want_len);
    for (size_t i = 0; i < want_len; i++) {
        unsigned char g = i < given_len ? (unsigned char)given[i] : 0;
        diff |= (unsigned char)(g ^ (unsigned char)want[i]);
    }
    return diff == 0;
}

/* Checks the Authorization header. Returns 0 when the request may go on, or -1 after
 * queuing 400 (repeated header) or 401. /healthz is never checked at all: liveness answers
 * 200 while the process is up, whatever headers a probe sends, and another method on it is
 * a 405, not a 401 (the path is public anyway). */
static int check_auth(gw_request *req, enum MHD_Result *result)
{
    const char *value = NULL;

    /* Before the header is even counted, so a repeated Authorization cannot fail a probe. */
    if (strcmp(req->url, gw__routes[GW_R_HEALTHZ].path) == 0) {
        return 0;
    }
    int n = gw__header_count(req->conn, MHD_HTTP_HEADER_AUTHORIZATION, &value);
    if (n > 1) {
        *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                                 "the Authorization header is repeated");
        return -1;
    }
    if (!req->srv->auth_on) {
        return 0;
    }
    /* Each refusal says what happened (RFC 6750 section 3.1: a token that was sent and is
     * wrong is an invalid_token). */
    const char *why = "this endpoint needs 'Authorization: Bearer <token>'; none was sent";
    const char *challenge = "Bearer";
    if (n == 1 && strncasecmp(value, "Bearer ", 7) == 0) {
        const char *given = value + 7;
        if (token_equal(given, strlen(given), req->srv->auth_token, req->srv->auth_token_len)) {
            return 0;
        }
        why = "the bearer token is wrong (it is not the gateway's --auth-token-file token)";
        challenge = "Bearer error=\"invalid_token\"";
    } else if (n == 1) {
        why = "the Authorization header must be 'Bearer <token>' (another scheme was sent)";
    }
    struct MHD_Response *resp = gw__error_response("unauthorized", NULL, "%s", why);
    if (resp == NULL) {
        *result = MHD_NO;
        return -1;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, challenge);
    *result = gw__queue(req, MHD_HTTP_UNAUTHORIZED, resp);
    return -1;
}

/* ---- Request deadlines ------------------------------------------------------------- */

/* libmicrohttpd's idle timeout restarts with every byte received, and the access handler is
 * not called before the headers are complete, so neither stops a client that trickles a
 * request a byte at a time and holds its connection (and a connection slot) for as long as
 * it likes. Every connection therefore carries the time by which its current request must
 * have been received in full, moved at these points, each in the connection's own thread:
 *   1. accepted: now + GW_REQUEST_DEADLINE_S, for the first request;
 *   2. the request fully received (the handler's last call): none, the handler owns it
 *      (a parked /lock has its own wait deadline);
 *   3. the request completed: now + GW_CONN_TIMEOUT_S for the next request line, which is
 *      what the idle timeout gives an idle kept-alive connection anyway;
 *   4. a later request's line received (the URI log callback): now + GW_REQUEST_DEADLINE_S.
 * A reaper thread looks every GW_REAP_MS and shuts down (shutdown(2), never close) the
 * socket of each connection past its deadline: libmicrohttpd then reads end of file and
 * closes the connection in its own thread, as if the client had gone. The list is guarded
 * by one mutex that the CLOSED notification takes too, and libmicrohttpd closes the socket
 * only after that notification, so the reaper never shuts down a reused descriptor. */
#define GW_REAP_MS 100

typedef struct gw_conn {
    struct gw_conn *prev, *next;
    gw_addr_slot *slot;           /* its place in its address's count (loops.c) */
    int fd;
    int served;                   /* requests completed; only its own thread touches it */
    size_t uri_strlen;            /* strlen() of the raw request target, before any parsing */
    atomic_llong deadline_us;     /* monotonic; 0 when no request is being received */
} gw_conn;

struct gw_conns {
    pthread_mutex_t mu;
    gw_conn *head;
    gw_server *srv;
    atomic_int stop;
    pthread_t reaper;
    int reaper_started;
};

static gw_conn *conn_state(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci != NULL ? ci->socket_context : NULL;
}

static void conn_deadline(struct MHD_Connection *conn, int64_t after_s)
{
    gw_conn *c = conn_state(conn);
    if (c != NULL) {
        atomic_store(&c->deadline_us, after_s > 0 ? gw__now_us() + after_s * 1000000 : 0);
    }
}

/* MHD_OPTION_NOTIFY_CONNECTION: tracks every open connection. Without memory for its
 * entry a connection simply has no deadline beyond libmicrohttpd's idle timeout. */
static void conn_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                        enum MHD_ConnectionNotificationCode code)
{
    struct gw_conns *cs = cls;
    gw_conn *c = *socket_context;

    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        c = ci != NULL ? calloc(1, sizeof *c) : NULL;
        if (c == NULL) {
            return; /* untracked: the place its accept took is given back (loops.c) */
        }
        c->fd = ci->connect_fd;
        c->slot = gw__loops_opened(cs->srv->loops);
        atomic_store(&c->deadline_us, gw__now_us() + (int64_t)GW_REQUEST_DEADLINE_S * 1000000);
        pthread_mutex_lock(&cs->mu);
        c->next = cs->head;
        if (cs->head != NULL) {
            cs->head->prev = c;
        }
        cs->head = c;
        pthread_mutex_unlock(&cs->mu);
        *socket_context = c;
        return;
    }
    if (c == NULL) {
        return;
    }
    pthread_mutex_lock(&cs->mu);
    if (c->prev != NULL) {
        c->prev->next = c->next;
    } else {
        cs->head = c->next;
    }
    if (c->next != NULL) {
        c->next->prev = c->prev;
    }
    pthread_mutex_unlock(&cs->mu);
    gw__loops_closed(cs->srv->loops, c->slot);
    free(c);
    *socket_context = NULL;
}

/* MHD_OPTION_URI_LOG_CALLBACK: a request line has arrived. Returns NULL, which stays the
 * first *req_cls the access handler sees. */
static void *conn_request_line(void *cls, const char *uri, struct MHD_Connection *conn)
{
    gw_conn *c = conn_state(conn);
    (void)cls;
    if (c != NULL) {
        c->uri_strlen = strlen(uri); /* stops at a NUL inside the target: see request_framing */
    }
    if (c != NULL && c->served > 0) {
        atomic_store(&c->deadline_us, gw__now_us() + (int64_t)GW_REQUEST_DEADLINE_S * 1000000);
    }
    return NULL;
}

static void *reaper_main(void *arg)
{
    struct gw_conns *cs = arg;

    while (!atomic_load(&cs->stop)) {
        struct timespec nap = {0, GW_REAP_MS * 1000000L};
        nanosleep(&nap, NULL);
        int64_t now = gw__now_us();
        unsigned closed = 0;
        pthread_mutex_lock(&cs->mu);
        for (gw_conn *c = cs->head; c != NULL; c = c->next) {
            int64_t at = atomic_load(&c->deadline_us);
            if (at != 0 && now > at) {
                shutdown(c->fd, SHUT_RDWR);
                atomic_store(&c->deadline_us, 0);
                closed++;
            }
        }
        pthread_mutex_unlock(&cs->mu);
        if (closed > 0) {
            atomic_fetch_add(&cs->srv->metrics.deadline_closed, closed);
            /* One line per sweep, so a flood cannot turn into a flood of log lines. */
            gw__log_event(cs->srv->cfg, "warn",
                          "closed %u connection(s) whose request was not received within %d s",
                          closed, GW_REQUEST_DEADLINE_S);
        }
    }
    return NULL;
}

/* Stops the reaper (when it runs) and frees the list, which is empty once the loops'
 * daemons have stopped. */
static void conns_free(gw_server *srv)
{
    struct gw_conns *cs = srv->conns;
    if (cs == NULL) {
        return;
    }
    if (cs->reaper_started) {
        atomic_store(&cs->stop, 1);
        pthread_join(cs->reaper, NULL);
        cs->reaper_started = 0;
    }
    if (srv->loops == NULL) {
        pthread_mutex_destroy(&cs->mu);
        free(cs);
        srv->conns = NULL;
    }
}

/* ---- Per-request state and the access handler ------------------------------------- */

static gw_request *request_new(gw_server *srv, struct MHD_Connection *conn, const char *url,
                               const char *method)
{
    gw_request *req = calloc(1, sizeof *req);
    if (req == NULL) {
        return NULL;
    }
    req->srv = srv;
    req->conn = conn;
    gw_conn *c = conn_state(conn);
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
    free(req->body);
    free(req);
}

/* Appends a chunk of the body. Over the cap, the request is marked too large and the rest is
 * read and dropped, so the answer is a clean 413 rather than a truncated value, and a client
 * that writes everything before it reads gets to read it. Returns -1 (the connection is
 * closed without an answer: libmicrohttpd 0.9.75 cannot queue one mid-body) once more than
 * GW_DRAIN_MAX bytes were dropped, or without memory. */
static int body_append(gw_request *req, const char *data, size_t len)
{
    if (!req->body_too_large && len > req->body_max - req->body_len) {
        req->body_too_large = 1;
        free(req->body);
        req->body = NULL;
        req->body_len = 0;
        req->body_cap = 0;
    }
    if (req->body_too_large) {
        req->body_dropped += len;
        return req->body_dropped > GW_DRAIN_MAX ? -1 : 0;
    }
    if (req->body_len + len + 1 > req->body_cap) {
        size_t cap = req->body_cap == 0 ? 4096 : req->body_cap;
        while (cap < req->body_len + len + 1) {
            cap *= 2;
        }
        if (cap > req->body_max + 1) {
            cap = req->body_max + 1;
        }
        char *grown = realloc(req->body, cap);
        if (grown == NULL) {
            return -1;
        }
        req->body = grown;
        req->body_cap = cap;
    }
    memcpy(req->body + req->body_len, data, len);
    req->body_len += len;
    req->body[req->body_len] = '\0';
    return 0;
}

/* Refuses requests whose bytes libmicrohttpd 0.9.75 would read in a way the client may not
 * have meant, before anything else is looked at. Returns 0, or -1 after queuing a 400 that
 * closes the connection (the end of such a request is ambiguous, so nothing after it on the
 * connection can be trusted):
 *   - a NUL byte in the request target: libmicrohttpd hands the path on as a C string, so
 *     "PUT /resources/a<NUL>b" would reach the router as a write to "a". The target runs
 *     from url to the space before version (one buffer, libmicrohttpd's request line);
 *     the URI log callback saw its strlen() before any parsing;
 *   - Content-Length repeated: libmicrohttpd reads the first one, a proxy may read another;
 *   - Transfer-Encoding repeated: the same, for the encoding;
 *   - Content-Length with Transfer-Encoding: libmicrohttpd silently prefers the encoding
 *     (RFC 9112 section 6.1 says such a message "ought to be handled as an error");
 *   - a Transfer-Encoding other than chunked (gzip, "gzip, chunked"): libmicrohttpd cannot
 *     decode it and would wait for a body it never finds the end of; answered 501 (RFC 9112
 *     section 6.1). */
static int request_framing(gw_request *req, const char *url, const char *version,
                           enum MHD_Result *result)
{
    const char *why = NULL;
    const char *te = NULL;
    unsigned int status = MHD_HTTP_BAD_REQUEST;
    gw_conn *c = conn_state(req->conn);
    int n_length = gw__header_count(req->conn, MHD_HTTP_HEADER_CONTENT_LENGTH, NULL);
    int n_te = gw__header_count(req->conn, MHD_HTTP_HEADER_TRANSFER_ENCODING, &te);

    if (c != NULL && version[0] != '\0' && (size_t)(version - 1 - url) != c->uri_strlen) {
        why = "the request target contains a NUL byte";
    } else if (n_length > 1) {
        why = "the Content-Length header is repeated";
    } else if (n_te > 1) {
        why = "the Transfer-Encoding header is repeated";
    } else if (n_length == 1 && n_te > 0) {
        why = "Content-Length and Transfer-Encoding cannot both be sent";
    } else if (n_te == 1 && strcasecmp(te, "chunked") != 0) {
        status = MHD_HTTP_NOT_IMPLEMENTED;
        why = "the only Transfer-Encoding served is chunked";
    }
    if (why == NULL) {
        return 0;
    }
    struct MHD_Response *resp = gw__error_response(
        status == MHD_HTTP_NOT_IMPLEMENTED ? "not_implemented" : "invalid_request", NULL, "%s",
        why);
    if (resp == NULL) {
        *result = MHD_NO;
        return -1;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    *result = gw__queue(req, status, resp);
    return -1;
}

/* 1 when a Content-Type value is JSON: "application/json", optionally with "charset=utf-8"
 * (either case, optionally quoted), and blanks around the ';' and '='. */
static int is_json_type(const char *v)
{
    static const char json[] = "application/json";

    while (*v == ' ' || *v == '\t') {
        v++;
    }
    if (strncasecmp(v, json, sizeof json - 1) != 0) {
        return 0;
    }
    v += sizeof json - 1;
    while (*v == ' ' || *v == '\t') {
        v++;
    }
    if (*v == '\0') {
        return 1;
    }
    if (*v++ != ';') {
        return 0;
    }
    while (*v == ' ' || *v == '\t') {
        v++;
    }
    if (strncasecmp(v, "charset", 7) != 0) {
        return 0;
    }
    v += 7;
    while (*v == ' ' || *v == '\t') {
        v++;
    }
    if (*v++ != '=') {
        return 0;
    }
    while (*v == ' ' || *v == '\t') {
        v++;
    }
    int quoted = *v == '"';
    v += quoted;
    if (strncasecmp(v, "utf-8", 5) != 0) {
        return 0;
    }
    v += 5;
    if (quoted && *v++ != '"') {
        return 0;
    }
    while (*v == ' ' || *v == '\t') {
        v++;
    }
    return *v == '\0';
}

/* The first call for a request: route it, authenticate it and refuse what can be refused
 * before its body is read. Returns 0 when the request goes on to its handler, or -1 after a
 * response was queued. */
static int request_start(gw_request *req, const char *url, const char *method,
                         enum MHD_Result *result)
{
    char allow[64];
    const char *param = NULL;
    int match = gw__route_match(method, url, &req->route, &param, allow, sizeof allow);

    /* Authentication comes first, so an anonymous client learns nothing about paths. */
    if (check_auth(req, result) != 0) {
        return -1;
    }
    if (match == 404) {
        *result = gw__send_error(req, MHD_HTTP_NOT_FOUND, "not_found", NULL,
                                 "no such endpoint: %s %s", req->method, req->url);
        return -1;
    }
    if (match == 405) {
        struct MHD_Response *resp =
            gw__error_response("method_not_allowed", json_pack("{s:s}", "allow", allow),
                           "%s does not accept %s; allowed: %s", req->url, req->method, allow);
        if (resp == NULL) {
            *result = MHD_NO;
            return -1;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
        *result = gw__queue(req, MHD_HTTP_METHOD_NOT_ALLOWED, resp);
        return -1;
    }
    size_t plen = strlen(param);
    req->param_too_long = plen > LK_RESOURCE_MAX;
    req->param = param;
    req->op = req->srv->ops[req->route->id];
    req->body_max = req->route->id == GW_R_RESOURCE_PUT ? req->srv->cfg->max_value_bytes
                                                          : GW_JSON_BODY_MAX;

    /* The JSON endpoints take JSON only. A web page can send text/plain, form bodies and
     * multipart to any origin without a CORS preflight, and without auth (the default) a
     * page a developer visits could otherwise take and release locks on a gateway on
     * localhost; application/json needs the preflight, which the gateway never grants. */
    if (req->route->id == GW_R_LOCK || req->route->id == GW_R_UNLOCK ||
        req->route->id == GW_R_RENEW) {
        const char *ctype = NULL;
        int n = gw__header_count(req->conn, MHD_HTTP_HEADER_CONTENT_TYPE, &ctype);
        if (n != 1 || !is_json_type(ctype)) {
            *result = gw__send_error(req, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE,
                                     "unsupported_media_type", NULL,
                                     "the body must be sent as 'Content-Type: "
                                     "application/json' (optionally '; charset=utf-8')");
            return -1;
        }
    }
    /* A write without Content-Length or Transfer-Encoding has no body by HTTP's rules; it is
     * refused rather than stored as an empty value the client did not mean. */
    if (req->route->id == GW_R_RESOURCE_PUT &&
        gw__header_count(req->conn, MHD_HTTP_HEADER_CONTENT_LENGTH, NULL) == 0 &&
        gw__header_count(req->conn, MHD_HTTP_HEADER_TRANSFER_ENCODING, NULL) == 0) {
        *result = gw__send_error(req, MHD_HTTP_LENGTH_REQUIRED, "length_required", NULL,
                                 "a write needs Content-Length (or Transfer-Encoding: "
                                 "chunked), also for an empty value");
        return -1;
    }
    /* A declared length over the cap: the body is read and dropped, then 413 (RFC 9112
     * section 9.6: a client that writes the whole request before it reads would otherwise
     * hit a reset, not the answer). It is refused before a byte of it is read when the
     * client waits for "100 Continue" (it sends nothing then), or when it is more than
     * GW_DRAIN_MAX over the cap (such a client may see the reset). */
    const char *clen = NULL;
    if (gw__header_count(req->conn, MHD_HTTP_HEADER_CONTENT_LENGTH, &clen) == 1) {
        char *end = NULL;
        unsigned long long declared = strtoull(clen, &end, 10);
        if (end != clen && *end == '\0' && declared > req->body_max) {
            const char *expect = NULL;
            gw__header_count(req->conn, MHD_HTTP_HEADER_EXPECT, &expect);
            if (expect == NULL && declared - req->body_max <= GW_DRAIN_MAX) {
                req->body_too_large = 1;
                return 0;
            }
            *result = gw__send_error(req, MHD_HTTP_CONTENT_TOO_LARGE, "payload_too_large",
                                     NULL, "the request body is over %zu bytes", req->body_max);
            return -1;
        }
    }
    return 0;
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
        if (request_framing(req, url, version, &result) != 0 ||
            request_start(req, url, method, &result) != 0) {
            return result;
        }
        return MHD_YES;
    }
    if (*upload_data_size == 0) {
        conn_deadline(conn, 0); /* received in full: the request deadline is met */
    }
    if (req->answered) {
        *upload_data_size = 0; /* the body of an already refused request is dropped */
        return MHD_YES;
    }
    if (*upload_data_size != 0) {
        if (body_append(req, upload_data, *upload_data_size) != 0) {
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
    gw_conn *c = conn_state(conn);

    if (c != NULL) {
        c->served++;
        conn_deadline(conn, GW_CONN_TIMEOUT_S); /* the next request line, if any */
    }
    if (req == NULL) {
        return;
    }
    int64_t micros = gw__now_us() - req->start_us;
    gw__log_request(srv->cfg, req->method, req->url, req->status, micros, toe);
    gw__metrics_observe(&srv->metrics, req->route != NULL ? (int)req->route->id : GW_R_NONE,
                        req->status, micros);
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
    gw__waitq_stop(srv->waitq);
    srv->waitq = NULL;
    gw__pipes_stop(srv);
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
                         (ipv6 ? MHD_USE_IPv6 : 0);
    unsigned int n = gw__server_loops(srv->cfg);
    /* Each daemon its share of the limit, the remainder to the first ones, as
     * libmicrohttpd's pool split it. */
    unsigned int share = (unsigned int)srv->cfg->max_connections / n;
    unsigned int extra = (unsigned int)srv->cfg->max_connections % n;

    srv->loops = gw__loops_new(n, (unsigned int)srv->cfg->max_connections_per_address,
                               address_refused, (void *)srv->cfg, err, errlen);
    if (srv->loops == NULL) {
        return -1;
    }
    for (unsigned int i = 0; i < n; i++) {
        struct MHD_Daemon *d = MHD_start_daemon(
            flags, 0, gw__loops_accept, srv->loops, access_handler, srv,
            /* First, so that libmicrohttpd's messages about the options below are ours. */
            MHD_OPTION_EXTERNAL_LOGGER, gw__log_mhd, (void *)srv->cfg,
            MHD_OPTION_LISTEN_SOCKET, srv->listen_fd,
            MHD_OPTION_CONNECTION_LIMIT, share + (i < extra ? 1 : 0),
            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)GW_CONN_TIMEOUT_S,
            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)GW_CONN_MEMORY,
            MHD_OPTION_NOTIFY_COMPLETED, request_completed, srv, MHD_OPTION_UNESCAPE_CALLBACK,
            no_unescape, NULL, MHD_OPTION_NOTIFY_CONNECTION, conn_notify, srv->conns,
            MHD_OPTION_URI_LOG_CALLBACK, conn_request_line, NULL, MHD_OPTION_END);
        if (d == NULL) {
            snprintf(err, errlen, "cannot start HTTP loop %u on %s", i, srv->cfg->listen);
            return -1;
        }
        if (gw__loops_set(srv->loops, i, d, err, errlen) != 0) {
            return -1;
        }
    }
    return gw__loops_start(srv->loops, err, errlen);
}

/* Undoes what gw__server_start() did, in reverse; each step only when it was done. */
static void server_unwind(gw_server *srv)
{
    conns_free(srv); /* the reaper first: the daemons' closing notifications need the list */
    gw__loops_free(srv->loops);
    srv->loops = NULL;
    conns_free(srv);
    if (srv->listen_fd >= 0) {
        close(srv->listen_fd);
        srv->listen_fd = -1;
    }
    stop_threads(srv);
}

int gw__server_start(gw_server *srv, char *err, size_t errlen)
{
    struct sockaddr_storage addr;

    srv->listen_fd = -1;
    srv->loops = NULL;
    if (gw__config_listen_addr(srv->cfg->listen, &addr, err, errlen) != 0) {
        return -1;
    }
    if (gw__pipes_start(srv, err, errlen) != 0) {
        return -1;
    }
    if (gw__waitq_start(srv, err, errlen) != 0) {
        gw__pipes_stop(srv);
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
    srv->listen_fd = listen_socket(srv->cfg, &addr, err, errlen);
    if (srv->listen_fd < 0 || loops_start(srv, addr.ss_family == AF_INET6, err, errlen) != 0) {
        server_unwind(srv);
        return -1;
    }
    if (pthread_create(&srv->conns->reaper, NULL, reaper_main, srv->conns) != 0) {
        snprintf(err, errlen, "cannot start the request deadline thread");
        server_unwind(srv);
        return -1;
    }
    srv->conns->reaper_started = 1;
    return 0;
}

/* Shutdown, in this order:
 *   1. stop accepting: every loop quiesces its daemon, then the listening socket is closed
 *      (a new connection is refused, not left in the backlog);
 *   2. every answer from now on carries "Connection: close" (see gw__queue), and every parked
 *      /lock is woken and answers 503 shutting_down, as does any that tries to park;
 *   3. wait until no request is in flight, up to drain_ms;
 *   4. the request deadline reaper stops; the loop threads stop (their exit closes their
 *      lk_clients) and MHD_stop_daemon() closes each daemon's idle keep-alive connections;
 *      then the waiters' thread stops, then the Redis pipeline's. No connection is
 *      suspended by then (MHD forbids stopping with one). */
int gw__server_stop(gw_server *srv, int drain_ms)
{
    atomic_store(&srv->shutting_down, 1);
    gw__loops_quiesce(srv->loops);
    close(srv->listen_fd); /* no loop has it any more: new connections are refused */
    srv->listen_fd = -1;
    gw__waitq_shutdown(srv->waitq);
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
