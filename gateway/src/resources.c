/*
 * PUT /resources/{resource} and GET /resources/{resource}: token-checked writes and reads.
 *
 * A write carries `Fencing-Token: <decimal>`. Storage checks it, atomically with the write,
 * against two numbers:
 *   - the last token issued for the resource, read from Redis just before: a larger token
 *     was never issued (forged, or from another deployment), 403 unknown_token, and nothing
 *     moves, so a forged huge token can never lock the real holders out;
 *   - the highest token that has written the resource: a lower one is stale, 409.
 * Before storage, a token below the last one issued is refused 409 stale_token too (with
 * superseded_by): its lease ended when the larger one was minted, so its holder is fenced
 * off as soon as the next holder has locked, not only once that holder has written. The
 * floor lifts the counter (and base) past other resources' tokens at most acquisitions, so
 * a superseded token is usually below base: it is known for what it is when it is one of
 * the resource's last 16 tokens (lk_token_check); an older one is answered as below base.
 * Before that, the gateway checks the bottom of the resource's token run: its counter is
 * lifted to a floor now and then (a new resource, a lift past tokens of other resources, a
 * Redis that lost data), and the tokens below the lift (base) were never issued for it, or
 * were issued to holders whose locks were gone before the lift. Such a token is refused:
 * 409 stale_token when it is below the highest token that has written (as it would be
 * anyway), else 403 unknown_token. Refusing a token of a lock that is gone is always safe.
 * If Redis lost its counter, the last issued token reads low until the next acquisition
 * lifts it above the ledger floor; until then a write with an older token is refused: 409
 * stale_token when it is below the highest token that has written (storage checks that
 * first), else 403 unknown_token, which is the safe direction. If Redis is unreachable the
 * write is refused with 503: without the counter we cannot tell a forged token from a real
 * one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_internal.h"

#define DEFAULT_CONTENT_TYPE "application/octet-stream"

static void count_write(gw_server *srv, gw_write_outcome o)
{
    atomic_fetch_add(&srv->metrics.write[o], 1);
}

int gw__parse_token(const char *s, uint64_t *token)
{
    uint64_t v = 0;

    if (s == NULL) {
        return -1;
    }
    while (*s == ' ' || *s == '\t') {
        s++;
    }
    size_t len = strlen(s);
    while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '\t')) {
        len--;
    }
    /* "01" and "007" are refused: one token has one spelling, as in the answers we send. */
    if (len == 0 || s[0] == '0') {
        return -1; /* also "0", which is not positive */
    }
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') {
            return -1;
        }
        v = v * 10 + (uint64_t)(s[i] - '0');
        if (v > (uint64_t)LK_TOKEN_MAX) {
            return -1; /* also stops before v * 10 could overflow */
        }
    }
    *token = v;
    return 0;
}

/* Reads the Fencing-Token and Content-Type headers. Returns 0 or -1 after queuing the 400. */
static int read_write_headers(gw_request *req, uint64_t *token, const char **ctype,
                              enum MHD_Result *result)
{
    const char *value = NULL;
    int n = gw__header_count(req->conn, "Fencing-Token", &value);

    if (n != 1 || gw__parse_token(value, token) != 0) {
        *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                                 n == 0   ? "the Fencing-Token header is required"
                                 : n > 1  ? "the Fencing-Token header is repeated"
                                          : "Fencing-Token must be a positive decimal below "
                                            "2^53 (digits only, no leading zero)");
        return -1;
    }
    n = gw__header_count(req->conn, MHD_HTTP_HEADER_CONTENT_TYPE, &value);
    if (n == 0 || value[0] == '\0') {
        *ctype = DEFAULT_CONTENT_TYPE;
        return 0;
    }
    size_t len = strlen(value);
    int printable = 1;
    for (size_t i = 0; i < len; i++) {
        printable &= value[i] >= 0x20 && value[i] <= 0x7e;
    }
    /* It is sent back on reads, so it must be a sane header value. */
    if (n > 1 || len > STORE_CONTENT_TYPE_MAX || !printable) {
        *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                                 "Content-Type must appear once and be at most %d printable "
                                 "ASCII characters", STORE_CONTENT_TYPE_MAX);
        return -1;
    }
    *ctype = value;
    return 0;
}

static enum MHD_Result answer_write(gw_request *req, store_status st, uint64_t token,
                                    const store_write_result *wr)
{
    gw_server *srv = req->srv;

    switch (st) {
    case STORE_ACCEPTED:
        count_write(srv, GW_WR_accepted);
        return gw__send_json(req, MHD_HTTP_OK,
                             json_pack("{s:s, s:I, s:I, s:I}", "resource", req->param, "token",
                                       (json_int_t)token, "highest_token",
                                       (json_int_t)wr->highest_token, "version",
                                       (json_int_t)wr->version));
    case STORE_STALE:
        count_write(srv, GW_WR_stale);
        return gw__send_error(req, MHD_HTTP_CONFLICT, "stale_token",
                              json_pack("{s:s, s:I, s:I}", "resource", req->param, "token",
                                        (json_int_t)token, "highest_token",
                                        (json_int_t)wr->highest_token),
                              "token %llu is lower than %llu, which has already written %s",
                              (unsigned long long)token,
                              (unsigned long long)wr->highest_token, req->param);
    case STORE_UNKNOWN_TOKEN:
        count_write(srv, GW_WR_unknown_token);
        return gw__send_error(req, MHD_HTTP_FORBIDDEN, "unknown_token",
                              json_pack("{s:s, s:I}", "resource", req->param, "token",
                                        (json_int_t)token),
                              "token %llu is not one Redis knows was issued for %s (forged, "
                              "of another resource, or lost with Redis's data); nothing was "
                              "changed",
                              (unsigned long long)token, req->param);
    case STORE_TOO_LARGE:
        /* Counted with every other 413 of a PUT, in gw__metrics_observe(). */
        return gw__send_error(req, MHD_HTTP_CONTENT_TOO_LARGE, "payload_too_large", NULL,
                              "the value is over %zu bytes", srv->cfg->max_value_bytes);
    case STORE_FULL:
        count_write(srv, GW_WR_full);
        return gw__send_error(req, MHD_HTTP_INSUFFICIENT_STORAGE, "insufficient_storage", NULL,
                              "the store is full; nothing was changed");
    case STORE_INVALID:
        count_write(srv, GW_WR_invalid);
        return gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                              "storage refused the resource name or content type");
    default:
        count_write(srv, GW_WR_error);
        gw__log_event(srv->cfg, "error", "storage write: %s", store_status_str(st));
        return gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "backend_unavailable", NULL,
                              "storage could not make the write durable (%s); nothing was "
                              "acknowledged", store_status_name(st));
    }
}

/* A PUT in the pipelines: the token check goes to the Redis pipeline, then the write to the
 * storage writer (pipe.c), with the connection suspended each time; the handler runs again
 * after each. Freed at request completion. */
struct gw_write_call {
    int stage;                 /* 1: token check out; 2: write out */
    uint64_t token;
    const char *ctype;         /* in libmicrohttpd's connection memory, like req->param */
    lk_call call;
    store_write_req w;
    gw_job job;
};

void gw__write_call_completed(gw_request *req)
{
    free(req->write_call);
    req->write_call = NULL;
}

/* After the token check: refuses the write, or sends it to the storage writer. */
static enum MHD_Result write_checked(gw_request *req, struct gw_write_call *wc)
{
    gw_server *srv = req->srv;
    uint64_t token = wc->token;
    lk_status lst = wc->call.status;
    int64_t base = wc->call.base, last_issued = wc->call.last;
    store_write_result wr;

    atomic_store(&srv->metrics.redis_up, lst == LK_EUNAVAILABLE ? 0 : 1);
    if (lst != LK_OK) {
        count_write(srv, lst == LK_EUNAVAILABLE ? GW_WR_unavailable : GW_WR_error);
        return gw__send_lk_error(req, wc->call.err, lst);
    }
    memset(&wr, 0, sizeof wr);
    if (token <= (uint64_t)base && !wc->call.recent) {
        /* Below the run and not among the resource's last 16 tokens: refused either way;
         * say stale when it is (highest only grows, so a concurrent write can only make
         * this answer more true). A recent token below the run was issued for this
         * resource before a lift, and is answered as superseded below. */
        store_status hst = store_highest(srv->st, req->param, &wr.highest_token);
        if (hst != STORE_OK && hst != STORE_NOT_FOUND) {
            return answer_write(req, hst, token, &wr);
        }
        return answer_write(req, token < wr.highest_token ? STORE_STALE : STORE_UNKNOWN_TOKEN,
                            token, &wr);
    }
    if (token < (uint64_t)last_issued) {
        /* Superseded: a larger token was minted since, and tokens are minted only when the
         * lock is free, so this token's lease is over (released, expired or removed). Its
         * holder is fenced off now, before the next holder's first write, not only after
         * it. The next holder reads the counter too, so it is never refused by this. */
        store_status hst = store_highest(srv->st, req->param, &wr.highest_token);
        if (hst != STORE_OK && hst != STORE_NOT_FOUND) {
            return answer_write(req, hst, token, &wr);
        }
        count_write(srv, GW_WR_stale);
        return gw__send_error(req, MHD_HTTP_CONFLICT, "stale_token",
                              json_pack("{s:s, s:I, s:I, s:I}", "resource", req->param, "token",
                                        (json_int_t)token, "highest_token",
                                        (json_int_t)wr.highest_token, "superseded_by",
                                        (json_int_t)last_issued),
                              "token %llu was superseded by token %llu, issued after its "
                              "lease ended; nothing was changed",
                              (unsigned long long)token, (unsigned long long)last_issued);
    }
    wc->w.resource = req->param;
    wc->w.token = token;
    wc->w.data = req->body != NULL ? req->body : "";
    wc->w.len = req->body_len;
    wc->w.content_type = wc->ctype;
    wc->w.last_issued = (uint64_t)last_issued;
    wc->job.call = NULL;
    wc->job.write = &wc->w;
    wc->stage = 2;
    MHD_suspend_connection(req->conn);
    gw__pipe_submit(srv->writer, &wc->job);
    return MHD_YES;
}

enum MHD_Result gw__handle_resource_put(gw_request *req)
{
    gw_server *srv = req->srv;
    struct gw_write_call *wc = req->write_call;
    enum MHD_Result result = MHD_YES;

    if (wc != NULL && wc->stage == 1) {
        return write_checked(req, wc);
    }
    if (wc != NULL) {
        return answer_write(req, wc->w.status, wc->token, &wc->w.res);
    }
    wc = calloc(1, sizeof *wc);
    if (wc == NULL) {
        return MHD_NO; /* MHD closes the connection */
    }
    req->write_call = wc;
    if (gw__path_resource(req, &result) != 0 ||
        read_write_headers(req, &wc->token, &wc->ctype, &result) != 0) {
        count_write(srv, GW_WR_invalid);
        return result;
    }
    wc->call.kind = LK_CALL_TOKEN_CHECK;
    wc->call.resource = req->param;
    wc->call.token = (int64_t)wc->token;
    wc->job.call = &wc->call;
    wc->job.conn = req->conn;
    wc->stage = 1;
    MHD_suspend_connection(req->conn);
    gw__pipe_submit(srv->pipe, &wc->job);
    return MHD_YES;
}

enum MHD_Result gw__handle_resource_get(gw_request *req)
{
    enum MHD_Result result = MHD_YES;
    store_value v;
    char token[24], etag[48];

    if (gw__path_resource(req, &result) != 0) {
        return result;
    }
    memset(&v, 0, sizeof v);
    store_status st = store_read(req->srv->st, req->param, &v);
    if (st == STORE_NOT_FOUND) {
        return gw__send_error(req, MHD_HTTP_NOT_FOUND, "not_found", NULL,
                              "%s has never been written", req->param);
    }
    if (st != STORE_OK) {
        gw__log_event(req->srv->cfg, "error", "storage read: %s", store_status_str(st));
        return gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "backend_unavailable", NULL,
                              "storage could not be read (%s)", store_status_name(st));
    }
    /* An empty value has no buffer to copy. */
    struct MHD_Response *resp =
        v.len > 0 ? MHD_create_response_from_buffer(v.len, v.data, MHD_RESPMEM_MUST_COPY)
                  : MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (resp != NULL) {
        snprintf(token, sizeof token, "%llu", (unsigned long long)v.token);
        /* The version changes with every accepted write, so it identifies the bytes. */
        snprintf(etag, sizeof etag, "\"%llu\"", (unsigned long long)v.version);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                                v.content_type[0] != '\0' ? v.content_type
                                                          : DEFAULT_CONTENT_TYPE);
        MHD_add_response_header(resp, "Fencing-Token", token);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, etag);
    }
    store_value_free(&v);
    return gw__queue(req, MHD_HTTP_OK, resp);
}
