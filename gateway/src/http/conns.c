/*
 * Request deadlines.
 *
 * libmicrohttpd's idle timeout restarts with every byte received, and the access handler is
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
 * The first HTTP loop sweeps the list every GW_REAP_MS (gw__conns_sweep, a tick of the
 * loops) and shuts down (shutdown(2), never close) the socket of each connection past its
 * deadline: libmicrohttpd then reads end of file and closes the connection in its own
 * thread, as if the client had gone. The list is guarded
 * by one mutex that the CLOSED notification takes too, and libmicrohttpd closes the socket
 * only after that notification, so the sweep never shuts down a reused descriptor.
 */
#define _DEFAULT_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "http/server_internal.h"
#include "http/tls.h"
#include "rt/log.h"
#include "rt/loops.h"
#include "rt/util.h"

gw_conn *gw__conn_state(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci != NULL ? ci->socket_context : NULL;
}

void gw__conn_deadline(struct MHD_Connection *conn, int64_t after_s)
{
    gw_conn *c = gw__conn_state(conn);
    if (c != NULL) {
        atomic_store(&c->deadline_us, after_s > 0 ? gw__now_us() + after_s * 1000000 : 0);
    }
}

/* MHD_OPTION_NOTIFY_CONNECTION: tracks every open connection. Without memory for its
 * entry a connection simply has no deadline beyond libmicrohttpd's idle timeout. */
void gw__conn_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
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
        c->client_place = -1;
        c->slot = gw__loops_opened(cs->srv->rt.loops);
        atomic_store(&c->deadline_us, gw__now_us() + (int64_t)GW_REQUEST_DEADLINE_S * 1000000);
        pthread_mutex_lock(&cs->mu);
        gw_dlist_push_front(&cs->open, &c->link);
        pthread_mutex_unlock(&cs->mu);
        atomic_fetch_add(&cs->srv->rt.metrics.connections, 1);
        *socket_context = c;
        return;
    }
    if (c == NULL) {
        return;
    }
    pthread_mutex_lock(&cs->mu);
    gw_dlist_remove(&cs->open, &c->link);
    pthread_mutex_unlock(&cs->mu);
    gw__loops_closed(cs->srv->rt.loops, c->slot);
    atomic_fetch_sub(&cs->srv->rt.metrics.connections, 1);
    gw__metrics_client_conn_give(&cs->srv->rt.metrics, c->client_place);
    free(c);
    *socket_context = NULL;
}

/* MHD_OPTION_URI_LOG_CALLBACK: a request line has arrived. Returns NULL, which stays the
 * first *req_cls the access handler sees. */
void *gw__conn_request_line(void *cls, const char *uri, struct MHD_Connection *conn)
{
    gw_conn *c = gw__conn_state(conn);
    (void)cls;
    if (c != NULL) {
        c->uri_strlen = strlen(uri); /* stops at a NUL inside the target: see gw__request_framing */
    }
    if (c != NULL && c->served > 0) {
        atomic_store(&c->deadline_us, gw__now_us() + (int64_t)GW_REQUEST_DEADLINE_S * 1000000);
    }
    return NULL;
}

void gw__conns_sweep(void *arg)
{
    struct gw_conns *cs = arg;
    int64_t now = gw__now_us();
    unsigned closed = 0;

    if (cs->srv->tls != NULL) {
        gw__tls_expiry_check(cs->srv->rt.cfg, cs->srv->tls); /* a time() and two compares */
    }
    pthread_mutex_lock(&cs->mu);
    for (gw_dlink *n = gw_dlist_first(&cs->open); n != NULL; n = gw_dlist_next(n)) {
        gw_conn *c = gw_container_of(n, gw_conn, link);
        int64_t at = atomic_load(&c->deadline_us);
        if (at != 0 && now > at) {
            shutdown(c->fd, SHUT_RDWR);
            atomic_store(&c->deadline_us, 0);
            closed++;
        }
    }
    pthread_mutex_unlock(&cs->mu);
    if (closed > 0) {
        atomic_fetch_add(&cs->srv->rt.metrics.deadline_closed, closed);
        /* One line per sweep, so a flood cannot turn into a flood of log lines. */
        gw__log_event(cs->srv->rt.cfg, "warn",
                      "closed %u connection(s) whose request was not received within %d s",
                      closed, GW_REQUEST_DEADLINE_S);
    }
}

/* Frees the list, which is empty once the loops' daemons have stopped (the loops, and so the
 * sweep, first). */
void gw__conns_free(gw_server *srv)
{
    struct gw_conns *cs = srv->conns;
    if (cs == NULL) {
        return;
    }
    if (srv->rt.loops == NULL) {
        pthread_mutex_destroy(&cs->mu);
        free(cs);
        srv->conns = NULL;
    }
}
