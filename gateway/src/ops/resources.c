/*
 * PUT /resources/{resource}, DELETE /resources/{resource} and GET /resources/{resource}:
 * token-checked writes, fenced deletes and reads. A DELETE is a write without a value
 * (store_write_req.del): the same stages, the same checks; the resource keeps its highest
 * token, so a stale holder cannot write it back.
 *
 * A write carries `Fencing-Token: <decimal>`. The operation's stages (write_stage):
 *   start      read the path and the headers, send the token check (LK_CALL_TOKEN_CHECK) to
 *              the Redis pipeline -> CHECKING;
 *   CHECKING   resumed with the check's answer: a token the check shows current goes to
 *              the storage writer -> STORING; any other needs the fence's verdict
 *              (gw__fence_verdict_many, fence.c), which reads the highest token written,
 *              so it runs on the store readers, off the loop -> JUDGING;
 *   JUDGING    resumed with the verdict: refuse the write, or send it on -> STORING;
 *   STORING    resumed with storage's answer, which checked the token again atomically
 *              with the write: answer it;
 *   completed  the call is freed (server.c: the operation has no completed of its own).
 * Why a token is refused, and why refusing is safe: fence.c. If Redis is unreachable the
 * write is refused with 503: without the counter a forged token cannot be told from a real
 * one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fence.h"
#include "http/offload.h"
#include "http/respond.h"
#include "ops/resources.h"
#include "rt/log.h"
#include "rt/pipe.h"
#include "rt/util.h"

#define DEFAULT_CONTENT_TYPE "application/octet-stream"

static void count_write(gw_rt *rt, gw_write_outcome o)
{
    atomic_fetch_add(&rt->metrics.write[o], 1);
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
    gw_rt *rt = req->rt;

    switch (st) {
    case STORE_ACCEPTED: {
        count_write(rt, GW_WR_accepted);
        json_t *body = json_pack("{s:s, s:I, s:I, s:I}", "resource", req->param, "token",
                                 (json_int_t)token, "highest_token",
                                 (json_int_t)wr->highest_token, "version",
                                 (json_int_t)wr->version);
        if (req->route->id == GW_R_RESOURCE_DELETE) {
            json_object_set_new(body, "deleted", json_true());
        }
        return gw__send_json(req, MHD_HTTP_OK, body);
    }
    case STORE_STALE:
        count_write(rt, GW_WR_stale);
        /* highest_token is a later grant's, or the token a forced release burned
         * (store_fence): either way it superseded this one. */
        return gw__send_error(req, MHD_HTTP_CONFLICT, "stale_token",
                              json_pack("{s:s, s:I, s:I, s:I}", "resource", req->param,
                                        "token", (json_int_t)token, "highest_token",
                                        (json_int_t)wr->highest_token, "superseded_by",
                                        (json_int_t)wr->highest_token),
                              "token %llu is lower than %llu, which has already written %s "
                              "(or a forced release fenced it off)",
                              (unsigned long long)token,
                              (unsigned long long)wr->highest_token, req->param);
    case STORE_UNKNOWN_TOKEN:
        count_write(rt, GW_WR_unknown_token);
        return gw__send_error(req, MHD_HTTP_FORBIDDEN, "unknown_token",
                              json_pack("{s:s, s:I}", "resource", req->param, "token",
                                        (json_int_t)token),
                              "token %llu is not one Redis knows was issued for %s (forged, "
                              "or lost with Redis's data); nothing was changed",
                              (unsigned long long)token, req->param);
    case STORE_NOT_EXCLUSIVE:
        count_write(rt, GW_WR_not_exclusive);
        /* The token was granted to shared (read) holders: whoever holds it, a reader or an
         * exclusive holder whose lease ran out before readers came, may not change what
         * they read. */
        return gw__send_error(req, MHD_HTTP_CONFLICT, "not_exclusive",
                              json_pack("{s:s, s:I, s:I}", "resource", req->param, "token",
                                        (json_int_t)token, "shared_mark",
                                        (json_int_t)wr->shared_mark),
                              "token %llu was granted in shared (read) mode for %s: writing "
                              "needs an exclusive lock's newer token; nothing was changed",
                              (unsigned long long)token, req->param);
    case STORE_TOO_LARGE:
        /* Counted with every other 413 of a PUT, in gw__metrics_observe(). */
        return gw__send_error(req, MHD_HTTP_CONTENT_TOO_LARGE, "payload_too_large", NULL,
                              "the value is over %zu bytes", rt->cfg->max_value_bytes);
    case STORE_FULL:
        count_write(rt, GW_WR_full);
        return gw__send_error(req, MHD_HTTP_INSUFFICIENT_STORAGE, "insufficient_storage", NULL,
                              "the store is full; nothing was changed");
    case STORE_INVALID:
        count_write(rt, GW_WR_invalid);
        return gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                              "storage refused the resource name or content type");
    default:
        count_write(rt, GW_WR_error);
        gw__log_event(rt->cfg, "error", "storage write: %s", store_status_str(st));
        if (st == STORE_IN_DOUBT) {
            /* Not a refusal: the value may be there. Writing again with the same token is
             * accepted while its lock is held. */
            return gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "outcome_unknown", NULL,
                                  "the store's connection was lost after the commit was "
                                  "sent: the %s may or may not have been made; read %s "
                                  "before taking it for either",
                                  req->route->id == GW_R_RESOURCE_DELETE ? "delete" : "write",
                                  req->param);
        }
        return gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "backend_unavailable", NULL,
                              "storage could not make the write durable (%s); nothing was "
                              "acknowledged", store_status_name(st));
    }
}

/* What resumes a PUT whose connection is suspended. */
typedef enum write_stage {
    WRITE_CHECKING,            /* the token check is in the Redis pipeline */
    WRITE_JUDGING,             /* the fence's verdict is on a store reader */
    WRITE_STORING              /* the write is in the storage writer */
} write_stage;

/* A PUT in the pipelines: the token check goes to the Redis pipeline, then the write to the
 * storage writer (pipe.c), with the connection suspended each time; the operation is
 * resumed after each. Freed at request completion. */
struct gw_write_call {
    write_stage stage;
    uint64_t token;
    gw_verdict_req verdict;    /* JUDGING: the fence's verdict, on a store reader */
    const char *ctype;         /* in libmicrohttpd's connection memory, like req->param */
    lk_call call;
    store_write_req w;
    gw_job job;
};

/* The verdict is in: refuses the write, or sends it to the storage writer. */
static enum MHD_Result write_judged(gw_request *req, struct gw_write_call *wc)
{
    gw_rt *rt = req->rt;
    uint64_t token = wc->token;
    int64_t last_issued = wc->call.last;
    store_write_result wr;

    memset(&wr, 0, sizeof wr);
    wr.highest_token = wc->verdict.highest;
    switch (wc->verdict.verdict) {
    case GW_VERDICT_STORE_FAILED:
        return answer_write(req, wc->verdict.st, token, &wr);
    case GW_VERDICT_STALE:
        return answer_write(req, STORE_STALE, token, &wr);
    case GW_VERDICT_UNKNOWN:
        return answer_write(req, STORE_UNKNOWN_TOKEN, token, &wr);
    case GW_VERDICT_SUPERSEDED:
        count_write(rt, GW_WR_stale);
        return gw__send_error(req, MHD_HTTP_CONFLICT, "stale_token",
                              json_pack("{s:s, s:I, s:I, s:I}", "resource", req->param, "token",
                                        (json_int_t)token, "highest_token",
                                        (json_int_t)wr.highest_token, "superseded_by",
                                        (json_int_t)last_issued),
                              "token %llu was superseded by token %llu, issued after its "
                              "lease ended; nothing was changed",
                              (unsigned long long)token, (unsigned long long)last_issued);
    case GW_VERDICT_WRITE:
        break;
    }
    wc->w.resource = req->param;
    wc->w.token = token;
    wc->w.data = req->body != NULL ? req->body : "";
    wc->w.len = req->body_len;
    wc->w.content_type = wc->ctype;
    wc->w.last_issued = (uint64_t)last_issued;
    wc->w.del = req->route->id == GW_R_RESOURCE_DELETE;
    wc->job.call = NULL;
    wc->job.verdict = NULL;
    wc->job.write = &wc->w;
    wc->stage = WRITE_STORING;
    MHD_suspend_connection(req->conn);
    gw__pipe_submit(rt->writer, &wc->job);
    return MHD_YES;
}

/* CHECKING: the token check is in. A current token goes on to the storage writer; any other
 * is judged on a store reader first (a refusal reads the store: never on a loop thread). */
static enum MHD_Result write_checked(gw_request *req, struct gw_write_call *wc)
{
    gw_rt *rt = req->rt;
    lk_status lst = wc->call.status;

    gw__note_redis(rt, lst);
    if (lst != LK_OK) {
        count_write(rt, lst == LK_EUNAVAILABLE ? GW_WR_unavailable : GW_WR_error);
        return gw__send_lk_error(req, wc->call.err, lst);
    }
    if (!gw__fence_verdict_reads(wc->token, &wc->call)) {
        wc->verdict.verdict = GW_VERDICT_WRITE;
        return write_judged(req, wc);
    }
    wc->verdict.resource = req->param;
    wc->verdict.token = wc->token;
    wc->verdict.check = &wc->call;
    wc->job.call = NULL;
    wc->job.verdict = &wc->verdict;
    wc->stage = WRITE_JUDGING;
    MHD_suspend_connection(req->conn);
    gw__pipe_submit(rt->reads, &wc->job);
    return MHD_YES;
}

/* GW_OP_STARTED: a pipeline answered. */
static enum MHD_Result write_resumed(gw_request *req)
{
    struct gw_write_call *wc = req->op_state;

    if (wc->stage == WRITE_CHECKING) {
        return write_checked(req, wc);
    }
    if (wc->stage == WRITE_JUDGING) {
        return write_judged(req, wc);
    }
    return answer_write(req, wc->w.status, wc->token, &wc->w.res);
}

/* The body is in: check the path and headers, and send the token check. */
static enum MHD_Result write_start(gw_request *req)
{
    gw_rt *rt = req->rt;
    struct gw_write_call *wc = NULL;
    enum MHD_Result result = MHD_YES;

    wc = calloc(1, sizeof *wc);
    if (wc == NULL) {
        return MHD_NO; /* MHD closes the connection */
    }
    req->op_state = wc;
    if (gw__path_resource(req, &result) != 0 ||
        read_write_headers(req, &wc->token, &wc->ctype, &result) != 0) {
        count_write(rt, GW_WR_invalid);
        return result;
    }
    if (req->route->id == GW_R_RESOURCE_DELETE && req->body_len > 0) {
        count_write(rt, GW_WR_invalid);
        return gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                              "a DELETE takes no body");
    }
    wc->call.kind = LK_CALL_TOKEN_CHECK;
    wc->call.resource = req->param;
    wc->call.token = (int64_t)wc->token;
    wc->job.call = &wc->call;
    wc->job.conn = req->conn;
    wc->stage = WRITE_CHECKING;
    MHD_suspend_connection(req->conn);
    gw__pipe_submit(rt->pipe, &wc->job);
    return MHD_YES;
}

/* A GET /resources/{resource} on the reads pipeline (pipe.c): the read runs on a side thread,
 * since on PostgreSQL it is a network round trip that a stalled server would make a server
 * thread wait for. A fenced read (a Fencing-Token header) first sends the token check to the
 * Redis pipeline (CHECKING), then judges the token and reads the value on a store reader.
 * Freed at completion, with the value read. */
struct gw_value_read {
    gw_job job;
    gw_rt *rt;
    const char *resource;       /* req->param: valid while the request lives */
    int fenced;                 /* a Fencing-Token came with the read */
    int checking;               /* fenced: the token check is in the Redis pipeline */
    uint64_t token;             /* fenced: the token in hand */
    lk_call call;               /* fenced: the token check */
    gw_read_verdict judged;     /* fenced: the verdict's inputs and findings */
    gw_verdict verdict;         /* fenced: WRITE lets the value be read */
    store_status status;
    store_value v;
};

static void value_read_work(gw_job *job)
{
    struct gw_value_read *vr = job->arg;

    if (vr->fenced) {
        vr->judged = (gw_read_verdict){.resource = vr->resource, .token = vr->token,
                                       .check = &vr->call};
        vr->verdict = gw__fence_read_verdict(&vr->rt->fence, &vr->judged);
        if (vr->verdict != GW_VERDICT_WRITE) {
            vr->status = vr->judged.st;
            return; /* refused: nothing is read */
        }
    }
    vr->status = store_read(vr->rt->st, vr->resource, &vr->v);
    if (vr->fenced && vr->status == STORE_OK && vr->v.highest_token > vr->token) {
        /* A larger token wrote after the verdict: its grant came after it too. */
        vr->verdict = GW_VERDICT_STALE;
        vr->judged.highest = vr->v.highest_token;
        store_value_free(&vr->v);
    }
}

/* Reads the optional Fencing-Token of a read into vr. Returns 0, or -1 after queuing the
 * 400 (the same rule as a write's). */
static int read_read_header(gw_request *req, struct gw_value_read *vr, enum MHD_Result *result)
{
    const char *value = NULL;
    int n = gw__header_count(req->conn, "Fencing-Token", &value);

    if (n == 0) {
        return 0;
    }
    if (n > 1 || gw__parse_token(value, &vr->token) != 0) {
        *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                                 n > 1 ? "the Fencing-Token header is repeated"
                                       : "Fencing-Token must be a positive decimal below "
                                         "2^53 (digits only, no leading zero)");
        return -1;
    }
    vr->fenced = 1;
    return 0;
}

static enum MHD_Result resource_get_start(gw_request *req)
{
    enum MHD_Result result = MHD_YES;

    if (gw__path_resource(req, &result) != 0) {
        return result;
    }
    struct gw_value_read *vr = calloc(1, sizeof *vr);
    if (vr == NULL) {
        return gw__pipe_offload(req, req->rt->reads, NULL, NULL, value_read_work);
    }
    vr->rt = req->rt;
    vr->resource = req->param;
    req->op_state = vr; /* freed by resource_get_completed */
    if (read_read_header(req, vr, &result) != 0) {
        return result;
    }
    if (!vr->fenced) {
        return gw__pipe_offload(req, req->rt->reads, vr, &vr->job, value_read_work);
    }
    vr->call.kind = LK_CALL_TOKEN_CHECK;
    vr->call.resource = req->param;
    vr->call.token = (int64_t)vr->token;
    vr->job.call = &vr->call;
    vr->job.conn = req->conn;
    vr->checking = 1;
    MHD_suspend_connection(req->conn);
    gw__pipe_submit(req->rt->pipe, &vr->job);
    return MHD_YES;
}

/* A fenced read's token was refused: the answer a write with it would get, naming why. */
static enum MHD_Result answer_refused_read(gw_request *req, const struct gw_value_read *vr)
{
    unsigned long long token = (unsigned long long)vr->token;

    switch (vr->verdict) {
    case GW_VERDICT_SUPERSEDED:
        return gw__send_error(req, MHD_HTTP_CONFLICT, "stale_token",
                              json_pack("{s:s, s:I, s:I, s:I}", "resource", req->param, "token",
                                        (json_int_t)vr->token, "highest_token",
                                        (json_int_t)vr->judged.highest, "superseded_by",
                                        (json_int_t)vr->judged.newest),
                              "token %llu was superseded by token %llu: its lease is over, "
                              "and the value may have changed since", token,
                              (unsigned long long)vr->judged.newest);
    case GW_VERDICT_STALE:
        return gw__send_error(req, MHD_HTTP_CONFLICT, "stale_token",
                              json_pack("{s:s, s:I, s:I}", "resource", req->param, "token",
                                        (json_int_t)vr->token, "highest_token",
                                        (json_int_t)vr->judged.highest),
                              "token %llu is lower than %llu, which has already written %s",
                              token, (unsigned long long)vr->judged.highest, req->param);
    case GW_VERDICT_UNKNOWN:
        return gw__send_error(req, MHD_HTTP_FORBIDDEN, "unknown_token",
                              json_pack("{s:s, s:I}", "resource", req->param, "token",
                                        (json_int_t)vr->token),
                              "token %llu is not one Redis knows was issued for %s (forged, "
                              "or lost with Redis's data)", token, req->param);
    default:
        gw__log_event(req->rt->cfg, "error", "storage read: %s", store_status_str(vr->status));
        return gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "backend_unavailable", NULL,
                              "storage could not be read (%s)", store_status_name(vr->status));
    }
}

/* A fenced read's token check is in: the verdict and the read go to a store reader. */
static enum MHD_Result fenced_read_checked(gw_request *req, struct gw_value_read *vr)
{
    lk_status lst = vr->call.status;

    vr->checking = 0;
    vr->status = STORE_EIO; /* until the read runs: nothing to free at completion */
    gw__note_redis(req->rt, lst);
    if (lst != LK_OK) {
        return gw__send_lk_error(req, vr->call.err, lst);
    }
    vr->job.call = NULL;
    return gw__pipe_offload(req, req->rt->reads, vr, &vr->job, value_read_work);
}

static enum MHD_Result resource_get_resumed(gw_request *req)
{
    struct gw_value_read *vr = req->op_state;

    if (vr->checking) {
        return fenced_read_checked(req, vr);
    }
    if (vr->fenced && vr->verdict != GW_VERDICT_WRITE) {
        return answer_refused_read(req, vr);
    }
    const store_value v = vr->v; /* freed below, once MHD has copied the bytes */
    store_status st = vr->status;
    char token[24], etag[48];

    if (st == STORE_NOT_FOUND) {
        return gw__send_error(req, MHD_HTTP_NOT_FOUND, "not_found", NULL,
                              "%s has never been written", req->param);
    }
    if (st != STORE_OK) {
        gw__log_event(req->rt->cfg, "error", "storage read: %s", store_status_str(st));
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
        /* The stored Content-Type is the writer's: a text/html or image/svg+xml value
         * opened in a browser must not run script with the gateway's origin, nor be
         * sniffed into something runnable. */
        MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
        MHD_add_response_header(resp, "Content-Security-Policy", "default-src 'none'; sandbox");
    }
    store_value_free(&vr->v); /* a large value is not held twice while the answer is sent */
    return gw__queue(req, MHD_HTTP_OK, resp);
}

static void resource_get_completed(gw_request *req, enum MHD_RequestTerminationCode toe)
{
    struct gw_value_read *vr = req->op_state;
    (void)toe;
    if (vr == NULL) {
        return;
    }
    if (vr->status == STORE_OK) {
        store_value_free(&vr->v); /* a no-op once resumed has freed it */
    }
    free(vr);
    req->op_state = NULL;
}

const gw_op gw__op_resource_put = {write_start, write_resumed, NULL};
const gw_op gw__op_resource_delete = {write_start, write_resumed, NULL};
const gw_op gw__op_resource_get = {resource_get_start, resource_get_resumed,
                                   resource_get_completed};
