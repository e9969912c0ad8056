/*
 * Authentication and authorisation: the connection's client certificate (mutual TLS), the
 * Authorization header's bearer token against the clients (rt/clients.h; --clients, or the
 * --auth-token-file token as one client with every operation), and the route's scope
 * (base/routes.h) against what that client may do.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "http/respond.h"
#include "http/server_internal.h"
#include "http/tls.h"
#include "rt/util.h"
#include "token_file.h"

/* Queues 401 with a challenge and why. Returns -1. */
static int unauthorized(gw_request *req, const char *challenge, const char *why,
                        enum MHD_Result *result)
{
    struct MHD_Response *resp = gw__error_response("unauthorized", NULL, "%s", why);
    if (resp == NULL) {
        *result = MHD_NO;
        return -1;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, challenge);
    *result = gw__queue(req, MHD_HTTP_UNAUTHORIZED, resp);
    return -1;
}

/* Mutual TLS: the connection's client certificate, verified once per connection. Returns 0,
 * or -1 after queuing 401. */
static int check_client_cert(gw_request *req, gw_conn *c, enum MHD_Result *result)
{
    char why[300] = "the client certificate of this connection was refused";
    char cn[GW_CERT_CN_MAX + 1];

    if (c != NULL && c->cert_checked > 0) {
        return 0;
    }
    if (c == NULL || c->cert_checked == 0) {
        int ok = gw__tls_client_ok(req->conn, cn, why, sizeof why);
        if (c != NULL) {
            c->cert_checked = ok ? 1 : -1;
            memcpy(c->cert_cn, cn, sizeof c->cert_cn);
        }
        if (ok) {
            return 0;
        }
    }
    return unauthorized(req, "Bearer", why, result);
}

/* A connection counts under the client of its first authenticated request: one client may
 * hold half of --max-connections (at least one), so the others always find some. Returns 0,
 * or -1 after queuing 503 too_many_connections, which closes the connection. */
static int take_connection(gw_request *req, gw_conn *c, enum MHD_Result *result)
{
    int n = req->rt->cfg->max_connections;
    int limit = n / 2 > 0 ? n / 2 : 1;
    /* --auth-token-file's one client is everyone who has the token: no per-client limit. */
    if (c == NULL || c->client_place >= 0 || req->rt->cfg->clients_file[0] == '\0') {
        return 0;
    }
    c->client_place = gw__metrics_client_conn_take(&req->rt->metrics, req->client->name, limit);
    if (c->client_place >= 0) {
        return 0;
    }
    struct MHD_Response *resp = gw__error_response(
        "too_many_connections", json_pack("{s:i}", "max_connections_per_client", limit),
        "client '%s' holds %d connections already (half of --max-connections); close one",
        req->client->name, limit);
    if (resp == NULL) {
        *result = MHD_NO;
        return -1;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    *result = gw__queue(req, MHD_HTTP_SERVICE_UNAVAILABLE, resp);
    return -1;
}

int gw__authorize(gw_request *req, const char *resource, enum MHD_Result *result)
{
    const gw_route *r = req->route;
    if (req->client == NULL || r == NULL || r->scope == GW_SCOPE_PUBLIC ||
        gw__client_allows(req->client, r->scope, resource)) {
        return 0;
    }
    char shown[LK_RESOURCE_MAX + 1];
    gw__printable(shown, sizeof shown, resource != NULL ? resource : "");
    if (resource == NULL) {
        *result = gw__send_error(req, MHD_HTTP_FORBIDDEN, "forbidden",
                                 json_pack("{s:s}", "operation", gw__scope_name(r->scope)),
                                 "client '%s' may not '%s' on any resource (%s %s)",
                                 req->client->name, gw__scope_name(r->scope), r->method,
                                 r->path);
    } else {
        *result = gw__send_error(req, MHD_HTTP_FORBIDDEN, "forbidden",
                                 json_pack("{s:s,s:s}", "operation", gw__scope_name(r->scope),
                                           "resource", shown),
                                 "client '%s' may not '%s' on resource '%s'",
                                 req->client->name, gw__scope_name(r->scope), shown);
    }
    return -1;
}

/* Checks the client certificate and the Authorization header, and names the request's
 * client (req->client, holding a reference on its table until the request completes).
 * Returns 0 when the request may go on, or -1 after queuing 400 (repeated header) or 401. A
 * public route's path (/healthz) is never checked at all: liveness answers 200 while the
 * process is up, whatever headers a probe sends, and another method on it is a 405, not a
 * 401 (the path is public anyway). */
int gw__check_auth(gw_request *req, enum MHD_Result *result)
{
    const char *value = NULL;
    gw_conn *c = gw__conn_state(req->conn);

    /* Before the header is even counted, so a repeated Authorization cannot fail a probe. */
    if (gw__route_public_path(req->url)) {
        return 0;
    }
    int n = gw__header_count(req->conn, MHD_HTTP_HEADER_AUTHORIZATION, &value);
    if (n > 1) {
        *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                                 "the Authorization header is repeated");
        return -1;
    }
    if (req->srv->tls != NULL && req->srv->tls->ca_pem != NULL &&
        check_client_cert(req, c, result) != 0) {
        return -1;
    }
    const gw_config *cfg = req->rt->cfg;
    if (cfg->clients_file[0] == '\0' && cfg->auth_token_file[0] == '\0') {
        return 0; /* no --clients, no --auth-token-file: open, as documented */
    }
    req->clients = gw__clients_acquire(&req->srv->clients);
    if (req->clients == NULL) {
        return 0; /* not reached: start-up installs the clients before serving */
    }
    /* Each refusal says what happened (RFC 6750 section 3.1: a token that was sent and is
     * wrong is an invalid_token). The token itself is never shown. */
    if (n == 1 && strncasecmp(value, "Bearer ", 7) == 0) {
        const char *given = value + 7;
        size_t len = strlen(given);
        if (len > 0 && len <= FG_AUTH_TOKEN_MAX) {
            req->client = gw__clients_by_token(req->clients, given, len);
        }
        if (req->client != NULL) {
            return take_connection(req, c, result);
        }
        return unauthorized(req, "Bearer error=\"invalid_token\"",
                            len == 0 ? "the bearer token is empty"
                            : len > FG_AUTH_TOKEN_MAX
                                ? "the bearer token is longer than any token (511 bytes)"
                                : "the bearer token is wrong (no client of the gateway has it)",
                            result);
    }
    if (n == 1) {
        return unauthorized(req, "Bearer",
                            "the Authorization header must be 'Bearer <token>' (another "
                            "scheme, or no token, was sent)",
                            result);
    }
    /* No token: a verified client certificate may name the client. */
    if (c != NULL && c->cert_checked > 0 && c->cert_cn[0] != '\0') {
        req->client = gw__clients_by_name(req->clients, c->cert_cn);
        if (req->client != NULL) {
            return take_connection(req, c, result);
        }
    }
    return unauthorized(req, "Bearer",
                        "this endpoint needs 'Authorization: Bearer <token>'; none was sent",
                        result);
}
