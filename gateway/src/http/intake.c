/*
 * What a request must pass before its operation starts, on the access handler's first calls:
 * its framing, its route, its authentication, its content type and the cap on its body.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http/respond.h"
#include "http/server_internal.h"
#include "rt/util.h"

/* Appends a chunk of the body. Over the cap, the request is marked too large and the rest is
 * read and dropped, so the answer is a clean 413 rather than a truncated value, and a client
 * that writes everything before it reads gets to read it. Returns -1 (the connection is
 * closed without an answer: libmicrohttpd 0.9.75 cannot queue one mid-body) once more than
 * GW_DRAIN_MAX bytes were dropped, or without memory. */
int gw__body_append(gw_request *req, const char *data, size_t len)
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
int gw__request_framing(gw_request *req, const char *url, const char *version,
                        enum MHD_Result *result)
{
    const char *why = NULL;
    const char *te = NULL;
    unsigned int status = MHD_HTTP_BAD_REQUEST;
    gw_conn *c = gw__conn_state(req->conn);
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
int gw__request_start(gw_request *req, const char *url, const char *method,
                      enum MHD_Result *result)
{
    char allow[64];
    const char *param = NULL;
    int match = gw__route_match(method, url, &req->route, &param, allow, sizeof allow);

    /* Authentication comes first, so an anonymous client learns nothing about paths. */
    if (gw__check_auth(req, result) != 0) {
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
    /* A route that names no scope is served to nobody (routes.h, GW_SCOPE_UNSET). */
    if (req->route->scope == GW_SCOPE_UNSET) {
        *result = gw__send_error(req, MHD_HTTP_FORBIDDEN, "forbidden", NULL,
                                 "%s %s has no scope rule; it is served to no client",
                                 req->route->method, req->route->path);
        return -1;
    }
    /* The scope: a path's resource now, a body's once it is parsed (http/args.c), and a
     * client that may not do this operation anywhere is refused before its body. */
    if (gw__authorize(req, req->route->resource == GW_RES_PATH ? param : NULL, result) != 0) {
        return -1;
    }
    size_t plen = strlen(param);
    req->param_too_long = plen > LK_RESOURCE_MAX;
    req->param = param;
    req->op = req->srv->ops[req->route->id];
    req->body_max = req->route->id == GW_R_RESOURCE_PUT ? req->rt->cfg->max_value_bytes
                    : req->route->id == GW_R_TRANSACTION ? gw__config_txn_body_max(req->rt->cfg)
                                                         : GW_JSON_BODY_MAX;

    /* The JSON endpoints take JSON only. A web page can send text/plain, form bodies and
     * multipart to any origin without a CORS preflight, and without auth (the default) a
     * page a developer visits could otherwise take and release locks on a gateway on
     * localhost; application/json needs the preflight, which the gateway never grants. */
    if (req->route->id == GW_R_LOCK || req->route->id == GW_R_UNLOCK ||
        req->route->id == GW_R_RENEW || req->route->id == GW_R_TRANSACTION) {
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
