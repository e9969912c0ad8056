/*
 * Authentication: the Authorization header against the gateway's bearer token.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "http/respond.h"
#include "http/server_internal.h"
#include "http/tls.h"
#include "rt/util.h"

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

/* Mutual TLS: the connection's client certificate, verified once per connection. Returns 0,
 * or -1 after queuing 401. */
static int check_client_cert(gw_request *req, enum MHD_Result *result)
{
    gw_conn *c = gw__conn_state(req->conn);
    char why[300] = "";
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
    if (why[0] == '\0') {
        snprintf(why, sizeof why, "the client certificate of this connection was refused");
    }
    struct MHD_Response *resp = gw__error_response("unauthorized", NULL, "%s", why);
    if (resp == NULL) {
        *result = MHD_NO;
        return -1;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    *result = gw__queue(req, MHD_HTTP_UNAUTHORIZED, resp);
    return -1;
}

/* Checks the Authorization header. Returns 0 when the request may go on, or -1 after
 * queuing 400 (repeated header) or 401. A public route's path (/healthz) is never checked at
 * all: liveness answers 200 while the process is up, whatever headers a probe sends, and
 * another method on it is a 405, not a 401 (the path is public anyway). */
int gw__check_auth(gw_request *req, enum MHD_Result *result)
{
    const char *value = NULL;

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
        check_client_cert(req, result) != 0) {
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
