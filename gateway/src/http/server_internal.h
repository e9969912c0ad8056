/*
 * The HTTP server's inside (server.c, conns.c, intake.c, auth.c): the connections it tracks
 * and what its files call of each other. Never included outside http/. Each function's
 * comment is at its definition.
 */
#ifndef GATEWAY_SERVER_INTERNAL_H
#define GATEWAY_SERVER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <microhttpd.h>

#include "base/list.h"
#include "http/request.h"
#include "rt/gateway.h"
#include "rt/loops.h"

typedef struct gw_conn {
    gw_dlink link;                /* in gw_conns.open */
    gw_addr_slot *slot;           /* its place in its address's count (loops.c) */
    int fd;
    int served;                   /* requests completed; only its own thread touches it */
    size_t uri_strlen;            /* strlen() of the raw request target, before any parsing */
    atomic_llong deadline_us;     /* monotonic; 0 when no request is being received */
    int cert_checked;             /* mutual TLS: 1 verified, -1 refused, 0 not yet (auth.c) */
    char cert_cn[65];             /* a verified client certificate's subject CN, or "" */
    int client_place;             /* its place in its client's connections, -1: none yet
                                   * (auth.c; given back when it closes, conns.c) */
} gw_conn;

struct gw_conns {
    pthread_mutex_t mu;
    gw_dlist open;                /* every tracked connection */
    gw_server *srv;
};

/* How often the request deadlines are looked at (gw__conns_sweep). */
#define GW_REAP_MS 100

/* ---- conns.c: connections and their request deadlines ------------------------------ */

gw_conn *gw__conn_state(struct MHD_Connection *conn);
void gw__conn_deadline(struct MHD_Connection *conn, int64_t after_s);
void gw__conn_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                     enum MHD_ConnectionNotificationCode code);
void *gw__conn_request_line(void *cls, const char *uri, struct MHD_Connection *conn);
void gw__conns_sweep(void *arg);
void gw__conns_free(gw_server *srv);

/* ---- intake.c and auth.c: before the operation starts ------------------------------ */

int gw__body_append(gw_request *req, const char *data, size_t len);
int gw__request_framing(gw_request *req, const char *url, const char *version,
                        enum MHD_Result *result);
int gw__request_start(gw_request *req, const char *url, const char *method,
                      enum MHD_Result *result);
int gw__check_auth(gw_request *req, enum MHD_Result *result);

#endif
