/*
 * POST /resources: a fenced transaction.
 *
 *   {"writes": [{"resource": "a", "token": 5, "value": "text"},
 *               {"resource": "b", "token": 9, "value_base64": "...", "content_type": "..."},
 *               {"resource": "c", "token": 3, "delete": true}]}
 *
 * Each write is judged exactly as a PUT's (resources.c, fence.c) and all are committed in one
 * storage transaction (store_txn), or none. The operation's stages (txn_stage):
 *   start      parse and check the body, send one token check per write (LK_CALL_TOKEN_CHECK)
 *              to the Redis pipeline -> CHECKING;
 *   CHECKING   resumed once every check is in (each job's done counts down; the last one
 *              resumes): tokens the checks show current go on; any other needs the fence's
 *              verdict, read on the store readers, off the loop -> JUDGING (or STORING when
 *              none does);
 *   JUDGING    resumed once every verdict is in: any refusal refuses the whole transaction
 *              (nothing was sent to storage); else -> STORING;
 *   STORING    the transaction is in the storage writer, which checks every token again
 *              atomically with the commit (store_run_many): answer it.
 * A refusal names every refused write: 409 stale_token when one is stale (below a token that
 * has written it, or superseded by a later grant), else 403 unknown_token.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fence.h"
#include "http/respond.h"
#include "ops/transaction.h"
#include "rt/log.h"
#include "rt/pipe.h"
#include "rt/util.h"

#define TEXT_TYPE "text/plain; charset=utf-8"
#define BYTES_TYPE "application/octet-stream"

typedef enum txn_stage {
    TXN_CHECKING,
    TXN_JUDGING,
    TXN_STORING
} txn_stage;

typedef struct txn_call txn_call;

/* One write of the transaction: its token check, its verdict and its storage request. */
typedef struct txn_write {
    txn_call *owner;
    uint64_t token;
    lk_call call;
    gw_verdict_req verdict;
    gw_job job;
    store_write_req w;
    unsigned char *decoded;     /* value_base64's bytes, malloc'd */
} txn_write;

struct txn_call {
    txn_stage stage;
    json_t *root;               /* the parsed body: names and values point into it */
    size_t n;
    txn_write *writes;
    store_write_req *ptrs[GW_TXN_WRITES_MAX];
    store_txn txn;
    gw_job job;                 /* the transaction's job for the storage writer */
    atomic_size_t pending;      /* jobs of the current stage not yet done */
};

/* The done of each check or verdict job: only the last one of the stage resumes. */
static int part_done(gw_job *job)
{
    txn_write *tw = job->arg;
    return atomic_fetch_sub(&tw->owner->pending, 1) == 1;
}

/* Decodes standard base64 (with padding) of len chars into out (len / 4 * 3 bytes of room).
 * Returns the byte count, or -1 for anything else. */
static long decode_base64(const char *s, size_t len, unsigned char *out)
{
    size_t n = 0;
    if (len % 4 != 0) {
        return -1;
    }
    for (size_t i = 0; i < len; i += 4) {
        unsigned v = 0;
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            char c = s[i + k];
            unsigned d = 0;
            if (c >= 'A' && c <= 'Z') {
                d = (unsigned)(c - 'A');
            } else if (c >= 'a' && c <= 'z') {
                d = (unsigned)(c - 'a' + 26);
            } else if (c >= '0' && c <= '9') {
                d = (unsigned)(c - '0' + 52);
            } else if (c == '+' || c == '/') {
                d = c == '+' ? 62 : 63;
            } else if (c == '=' && i + 4 == len && k >= 2 && (k == 3 || s[i + 3] == '=')) {
                pad++;
            } else {
                return -1;
            }
            if (pad > 0 && c != '=') {
                return -1;
            }
            v = v << 6 | d;
        }
        out[n++] = (unsigned char)(v >> 16);
        if (pad < 2) {
            out[n++] = (unsigned char)(v >> 8);
        }
        if (pad < 1) {
            out[n++] = (unsigned char)v;
        }
    }
    return (long)n;
}

/* Reads the content type of write i (default def). 0, or -1 after queuing the 400. */
static int read_ctype(gw_request *req, size_t i, json_t *o, const char *def, const char **out,
                      enum MHD_Result *result)
{
    json_t *v = json_object_get(o, "content_type");
    *out = def;
    if (v == NULL) {
        return 0;
    }
    const char *s = json_is_string(v) ? json_string_value(v) : NULL;
    size_t len = s != NULL ? json_string_length(v) : 0;
    int ok = s != NULL && len > 0 && len <= STORE_CONTENT_TYPE_MAX && strlen(s) == len;
    for (size_t k = 0; ok && k < len; k++) {
        ok = s[k] >= 0x20 && s[k] <= 0x7e;
    }
    if (!ok) {
        *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                                 "writes[%zu].content_type must be 1 to %d printable ASCII "
                                 "characters", i, STORE_CONTENT_TYPE_MAX);
        return -1;
    }
    *out = s;
    return 0;
}

/* Reads the value of write i: "value" (text), "value_base64" (bytes) or "delete": true,
 * exactly one of them. 0, or -1 after queuing the 400 or 413. */
static int read_value(gw_request *req, size_t i, json_t *o, txn_write *tw,
                      enum MHD_Result *result)
{
    json_t *text = json_object_get(o, "value");
    json_t *b64 = json_object_get(o, "value_base64");
    json_t *del = json_object_get(o, "delete");
    size_t max = req->rt->cfg->max_value_bytes;
    const char *def = TEXT_TYPE;

    if ((text != NULL) + (b64 != NULL) + (del != NULL) != 1 ||
        (del != NULL && !json_is_true(del))) {
        *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                                 "writes[%zu] needs exactly one of 'value' (a string), "
                                 "'value_base64' (a string) or 'delete' (true)", i);
        return -1;
    }
    if (del != NULL) {
        if (json_object_get(o, "content_type") != NULL) {
            *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                                     "writes[%zu]: a delete takes no content_type", i);
            return -1;
        }
        tw->w.del = 1;
        return 0;
    }
    json_t *v = text != NULL ? text : b64;
    if (!json_is_string(v)) {
        *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                                 "writes[%zu].%s must be a string", i,
                                 text != NULL ? "value" : "value_base64");
        return -1;
    }
    size_t len = json_string_length(v);
    if (text != NULL) {
        tw->w.data = json_string_value(v);
        tw->w.len = len;
    } else {
        def = BYTES_TYPE;
        tw->decoded = malloc(len / 4 * 3 + 1);
        long got = tw->decoded != NULL
                       ? decode_base64(json_string_value(v), len, tw->decoded)
                       : -1;
        if (got < 0) {
            *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                                     "writes[%zu].value_base64 is not standard base64 (RFC "
                                     "4648, with padding)", i);
            return -1;
        }
        tw->w.data = tw->decoded;
        tw->w.len = (size_t)got;
    }
    if (tw->w.len > max) {
        *result = gw__send_error(req, MHD_HTTP_CONTENT_TOO_LARGE, "payload_too_large", NULL,
                                 "writes[%zu]: the value of %s is %zu bytes, over "
                                 "--max-value-bytes (%zu)", i, tw->w.resource, tw->w.len, max);
        return -1;
    }
    return read_ctype(req, i, o, def, &tw->w.content_type, result);
}

/* Reads write i of the body into tw. 0, or -1 after queuing the error. */
static int read_write(gw_request *req, size_t i, json_t *o, txn_write *tw,
                      enum MHD_Result *result)
{
    static const char *const known[] = {"resource", "token",  "value", "value_base64",
                                        "content_type", "delete", NULL};
    if (!json_is_object(o)) {
        *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                                 "writes[%zu] must be an object", i);
        return -1;
    }
    const char *key;
    json_t *val;
    json_object_foreach(o, key, val) {
        size_t k = 0;
        while (known[k] != NULL && strcmp(known[k], key) != 0) {
            k++;
        }
        if (known[k] == NULL) {
            char shown[64];
            gw__printable(shown, sizeof shown, key);
            *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                                     "writes[%zu]: unknown field '%s'", i, shown);
            return -1;
        }
    }
    json_t *r = json_object_get(o, "resource");
    json_t *t = json_object_get(o, "token");
    const char *name = json_is_string(r) ? json_string_value(r) : NULL;
    if (name == NULL || strlen(name) != json_string_length(r) || !lk_valid_resource(name)) {
        *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                                 "writes[%zu].resource must be 1 to %d characters of "
                                 "[A-Za-z0-9._:-]", i, LK_RESOURCE_MAX);
        return -1;
    }
    if (!json_is_integer(t) || json_integer_value(t) < 1 ||
        json_integer_value(t) > LK_TOKEN_MAX) {
        *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                                 "writes[%zu].token must be an integer from 1 to %lld", i,
                                 (long long)LK_TOKEN_MAX);
        return -1;
    }
    tw->w.resource = name;
    tw->token = (uint64_t)json_integer_value(t);
    tw->w.token = tw->token;
    return read_value(req, i, o, tw, result);
}

/* Reads and checks the whole body into tc. 0, or -1 after queuing the error. */
static int read_body(gw_request *req, txn_call *tc, enum MHD_Result *result)
{
    static const char *const known[] = {"writes", NULL};
    if (gw__parse_object(req, &tc->root, result) != 0 ||
        gw__fields_known(req, tc->root, known, result) != 0) {
        return -1;
    }
    json_t *ws = json_object_get(tc->root, "writes");
    if (!json_is_array(ws) || json_array_size(ws) == 0 ||
        json_array_size(ws) > GW_TXN_WRITES_MAX) {
        *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                                 "field 'writes' must be an array of 1 to %d writes",
                                 GW_TXN_WRITES_MAX);
        return -1;
    }
    tc->n = json_array_size(ws);
    tc->writes = calloc(tc->n, sizeof *tc->writes);
    if (tc->writes == NULL) {
        *result = gw__send_error(req, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error", NULL,
                                 "out of memory");
        return -1;
    }
    for (size_t i = 0; i < tc->n; i++) {
        txn_write *tw = &tc->writes[i];
        tw->owner = tc;
        if (read_write(req, i, json_array_get(ws, i), tw, result) != 0) {
            return -1;
        }
        if (gw__authorize(req, tw->w.resource, result) != 0) {
            return -1;
        }
        for (size_t j = 0; j < i; j++) {
            if (strcmp(tc->writes[j].w.resource, tw->w.resource) == 0) {
                *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                                         "writes[%zu] and writes[%zu] both name %s: each "
                                         "resource at most once", j, i, tw->w.resource);
                return -1;
            }
        }
        tc->ptrs[i] = &tw->w;
    }
    return 0;
}

/* Adds the refusal of tw (why: its verdict, or its storage answer) to refused. Returns 1
 * when it is stale (superseded included). */
static int add_refusal(json_t *refused, const txn_write *tw, gw_verdict verdict,
                       store_status st, uint64_t highest)
{
    int stale = verdict == GW_VERDICT_STALE || verdict == GW_VERDICT_SUPERSEDED ||
                (verdict == GW_VERDICT_WRITE && st == STORE_STALE);
    int shared = verdict == GW_VERDICT_WRITE && st == STORE_NOT_EXCLUSIVE;
    json_t *o = json_pack("{s:s, s:I, s:s}", "resource", tw->w.resource, "token",
                          (json_int_t)tw->token, "error",
                          stale ? "stale_token" : shared ? "not_exclusive" : "unknown_token");
    if (shared) {
        json_object_set_new(o, "shared_mark", json_integer((json_int_t)tw->w.res.shared_mark));
    }
    if (stale) {
        json_object_set_new(o, "highest_token", json_integer((json_int_t)highest));
    }
    if (verdict == GW_VERDICT_SUPERSEDED) {
        json_object_set_new(o, "superseded_by", json_integer((json_int_t)tw->call.last));
    }
    json_array_append_new(refused, o);
    return stale;
}

/* Answers a refused transaction: 409 when a write is stale, else 403; nothing was written. */
static enum MHD_Result answer_refused(gw_request *req, json_t *refused, int stale)
{
    size_t n = json_array_size(refused);
    json_t *extra = json_pack("{s:o}", "refused", refused);
    if (stale) {
        return gw__send_error(req, MHD_HTTP_CONFLICT, "stale_token", extra,
                              "%zu write%s of the transaction %s a stale token; nothing was "
                              "written", n, n == 1 ? "" : "s", n == 1 ? "has" : "have");
    }
    return gw__send_error(req, MHD_HTTP_FORBIDDEN, "unknown_token", extra,
                          "%zu write%s of the transaction %s a token Redis does not know was "
                          "issued for its resource; nothing was written", n, n == 1 ? "" : "s",
                          n == 1 ? "has" : "have");
}

/* STORING is over: answer storage's verdict on the whole transaction. */
static enum MHD_Result answer_stored(gw_request *req, txn_call *tc)
{
    store_status st = tc->txn.status;

    if (st == STORE_ACCEPTED) {
        json_t *ws = json_array();
        for (size_t i = 0; i < tc->n; i++) {
            const txn_write *tw = &tc->writes[i];
            json_t *o = json_pack("{s:s, s:I, s:I}", "resource", tw->w.resource, "token",
                                  (json_int_t)tw->token, "version",
                                  (json_int_t)tw->w.res.version);
            if (tw->w.del) {
                json_object_set_new(o, "deleted", json_true());
            }
            json_array_append_new(ws, o);
        }
        return gw__send_json(req, MHD_HTTP_OK, json_pack("{s:o}", "writes", ws));
    }
    if (st == STORE_STALE || st == STORE_UNKNOWN_TOKEN || st == STORE_NOT_EXCLUSIVE) {
        json_t *refused = json_array();
        int stale = 0;
        for (size_t i = 0; i < tc->n; i++) {
            const txn_write *tw = &tc->writes[i];
            if (tw->w.status == STORE_STALE || tw->w.status == STORE_UNKNOWN_TOKEN ||
                tw->w.status == STORE_NOT_EXCLUSIVE) {
                stale |= add_refusal(refused, tw, GW_VERDICT_WRITE, tw->w.status,
                                     tw->w.res.highest_token);
            }
        }
        if (st == STORE_NOT_EXCLUSIVE) {
            size_t n = json_array_size(refused);
            return gw__send_error(req, MHD_HTTP_CONFLICT, "not_exclusive",
                                  json_pack("{s:o}", "refused", refused),
                                  "%zu write%s of the transaction %s a token granted in "
                                  "shared (read) mode; nothing was written",
                                  n, n == 1 ? "" : "s", n == 1 ? "has" : "have");
        }
        return answer_refused(req, refused, stale);
    }
    if (st == STORE_FULL) {
        return gw__send_error(req, MHD_HTTP_INSUFFICIENT_STORAGE, "insufficient_storage", NULL,
                              "the store is full; nothing was written");
    }
    if (st == STORE_INVALID || st == STORE_TOO_LARGE) {
        return gw__send_error(req, st == STORE_INVALID ? MHD_HTTP_BAD_REQUEST
                                                       : MHD_HTTP_CONTENT_TOO_LARGE,
                              st == STORE_INVALID ? "invalid_request" : "payload_too_large",
                              NULL, "storage refused the transaction (%s); nothing was written",
                              store_status_str(st));
    }
    gw__log_event(req->rt->cfg, "error", "storage transaction: %s", store_status_str(st));
    if (st == STORE_IN_DOUBT) {
        return gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "outcome_unknown", NULL,
                              "the store's connection was lost after the commit was sent: "
                              "all of the transaction or none of it was written; read a "
                              "value before taking it for either");
    }
    return gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "backend_unavailable", NULL,
                          "storage could not make the transaction durable (%s); nothing was "
                          "acknowledged", store_status_name(st));
}

/* Every verdict is WRITE: the transaction goes to the storage writer. */
static enum MHD_Result send_to_store(gw_request *req, txn_call *tc)
{
    for (size_t i = 0; i < tc->n; i++) {
        tc->writes[i].w.last_issued = (uint64_t)tc->writes[i].call.last;
    }
    tc->txn = (store_txn){.writes = tc->ptrs, .n = tc->n};
    tc->job = (gw_job){.txn = &tc->txn, .conn = req->conn};
    tc->stage = TXN_STORING;
    MHD_suspend_connection(req->conn);
    gw__pipe_submit(req->rt->writer, &tc->job);
    return MHD_YES;
}

/* JUDGING is over (or was not needed): refuse the transaction, or store it. */
static enum MHD_Result judged(gw_request *req, txn_call *tc)
{
    json_t *refused = NULL;
    int stale = 0;

    for (size_t i = 0; i < tc->n; i++) {
        const txn_write *tw = &tc->writes[i];
        if (tw->verdict.verdict == GW_VERDICT_STORE_FAILED) {
            json_decref(refused);
            return gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "backend_unavailable",
                                  NULL, "storage could not be read (%s); nothing was written",
                                  store_status_name(tw->verdict.st));
        }
    }
    for (size_t i = 0; i < tc->n; i++) {
        const txn_write *tw = &tc->writes[i];
        if (tw->verdict.verdict == GW_VERDICT_WRITE) {
            continue;
        }
        refused = refused != NULL ? refused : json_array();
        stale |= add_refusal(refused, tw, tw->verdict.verdict, STORE_OK, tw->verdict.highest);
    }
    if (refused != NULL) {
        return answer_refused(req, refused, stale);
    }
    return send_to_store(req, tc);
}

/* CHECKING is over: every check answered. */
static enum MHD_Result checked(gw_request *req, txn_call *tc)
{
    size_t reads = 0;

    for (size_t i = 0; i < tc->n; i++) {
        txn_write *tw = &tc->writes[i];
        gw__note_redis(req->rt, tw->call.status);
        if (tw->call.status != LK_OK) {
            return gw__send_lk_error(req, tw->call.err, tw->call.status);
        }
        tw->verdict.verdict = GW_VERDICT_WRITE;
        reads += gw__fence_verdict_reads(tw->token, &tw->call);
    }
    if (reads == 0) {
        return send_to_store(req, tc);
    }
    atomic_store(&tc->pending, reads);
    tc->stage = TXN_JUDGING;
    MHD_suspend_connection(req->conn);
    /* tc is not read once the last job is in: it may answer at once. */
    for (size_t i = 0, sent = 0; sent < reads; i++) {
        txn_write *tw = &tc->writes[i];
        if (!gw__fence_verdict_reads(tw->token, &tw->call)) {
            continue;
        }
        sent++;
        tw->verdict.resource = tw->w.resource;
        tw->verdict.token = tw->token;
        tw->verdict.check = &tw->call;
        tw->job = (gw_job){.verdict = &tw->verdict, .conn = req->conn, .done = part_done,
                           .arg = tw};
        gw__pipe_submit(req->rt->reads, &tw->job);
    }
    return MHD_YES;
}

static enum MHD_Result txn_resumed(gw_request *req)
{
    txn_call *tc = req->op_state;
    switch (tc->stage) {
    case TXN_CHECKING:
        return checked(req, tc);
    case TXN_JUDGING:
        return judged(req, tc);
    case TXN_STORING:
        break;
    }
    return answer_stored(req, tc);
}

static enum MHD_Result txn_start(gw_request *req)
{
    enum MHD_Result result = MHD_YES;
    txn_call *tc = calloc(1, sizeof *tc);

    if (tc == NULL) {
        return MHD_NO; /* MHD closes the connection */
    }
    req->op_state = tc;
    if (read_body(req, tc, &result) != 0) {
        return result;
    }
    size_t n = tc->n; /* tc is not read once the last job is in: it may answer at once */
    atomic_store(&tc->pending, n);
    tc->stage = TXN_CHECKING;
    MHD_suspend_connection(req->conn);
    for (size_t i = 0; i < n; i++) {
        txn_write *tw = &tc->writes[i];
        tw->call.kind = LK_CALL_TOKEN_CHECK;
        tw->call.resource = tw->w.resource;
        tw->call.token = (int64_t)tw->token;
        tw->job = (gw_job){.call = &tw->call, .conn = req->conn, .done = part_done, .arg = tw};
        gw__pipe_submit(req->rt->pipe, &tw->job);
    }
    return MHD_YES;
}

static void txn_completed(gw_request *req, enum MHD_RequestTerminationCode toe)
{
    txn_call *tc = req->op_state;
    (void)toe;
    for (size_t i = 0; tc->writes != NULL && i < tc->n; i++) {
        free(tc->writes[i].decoded);
    }
    free(tc->writes);
    json_decref(tc->root);
    free(tc);
    req->op_state = NULL;
}

const gw_op gw__op_transaction = {txn_start, txn_resumed, txn_completed};
