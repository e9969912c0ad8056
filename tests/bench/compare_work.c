/*
 * The workloads of the comparison benchmark: request builders and answer checks for the
 * gateway, raw Redis scripts, etcd and the trivial HTTP server. See compare_work.h.
 */
#include "compare_work.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

/* Per-connection state of every workload (the engine zeroes it before the first request). */
typedef struct cw_state {
    int step;
    long long token;
    char lease[32];   /* etcd lease ID, decimal */
    char key[256];    /* etcd lock key from the lock answer, base64 */
} cw_state;

/* ---- Helpers -------------------------------------------------------------------------- */

/* Writes an HTTP/1.1 request with a body (may be NULL) and extra header lines (may be "").
 * Returns its length, or -1 when it does not fit in cap. */
static int http_request(char *buf, size_t cap, const char *method, const char *path,
                        const char *headers, const char *body, size_t body_len)
{
    int n = snprintf(buf, cap,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%sContent-Length: %zu\r\n\r\n",
                     method, path, headers, body_len);
    if (n < 0 || (size_t)n + body_len > cap) {
        return -1;
    }
    if (body_len > 0) {
        memcpy(buf + n, body, body_len);
    }
    return n + (int)body_len;
}

static int json_post(char *buf, size_t cap, const char *path, const char *body)
{
    return http_request(buf, cap, "POST", path, "Content-Type: application/json\r\n", body,
                        strlen(body));
}

/* The name connection conn uses: its own, or the phase's one shared name. */
static void name_of(const cw_ctx *ctx, int conn, const char *prefix, char *buf, size_t len)
{
    if (ctx->contended) {
        snprintf(buf, len, "%s-%s-shared", prefix, ctx->tag);
    } else {
        snprintf(buf, len, "%s-%s-%d", prefix, ctx->tag, conn);
    }
}

/* An owner id as long as the gateway's own (32 characters), the same on both sides. */
/* The owner of connection conn: distinct across the runs of one phase (ctx->first_owner),
 * which may share a resource. */
static void owner_of(const cw_ctx *ctx, int conn, char *buf, size_t len)
{
    snprintf(buf, len, "bench-owner-%020d", ctx->first_owner + conn);
}

/* Parses a JSON body and returns the string or integer member `field` as text in out.
 * Returns 0, or -1 when the body or the member is not there. */
static int json_field(const lg_reply *r, const char *field, char *out, size_t len)
{
    json_error_t error;
    json_t *root = json_loadb(r->body, r->body_len, 0, &error);
    json_t *v = root != NULL ? json_object_get(root, field) : NULL;
    int rc = -1;

    if (json_is_string(v) && strlen(json_string_value(v)) < len) {
        snprintf(out, len, "%s", json_string_value(v));
        rc = 0;
    } else if (json_is_integer(v)) {
        snprintf(out, len, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        rc = 0;
    }
    json_decref(root);
    return rc;
}

static void base64(const char *in, char *out, size_t len)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = strlen(in);
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < len; i += 3) {
        unsigned v = (unsigned char)in[i] << 16;
        v |= i + 1 < n ? (unsigned char)in[i + 1] << 8 : 0;
        v |= i + 2 < n ? (unsigned char)in[i + 2] : 0;
        out[o++] = tab[(v >> 18) & 63];
        out[o++] = tab[(v >> 12) & 63];
        out[o++] = i + 1 < n ? tab[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? tab[v & 63] : '=';
    }
    out[o] = '\0';
}

/* ---- The trivial server --------------------------------------------------------------- */

static int null_next(void *ctx, int conn, void *state, char *buf, size_t cap, int *starts_unit)
{
    (void)ctx;
    (void)conn;
    (void)state;
    *starts_unit = 1;
    return http_request(buf, cap, "GET", "/", "", NULL, 0);
}

static lg_verdict null_reply(void *ctx, int conn, void *state, const lg_reply *r)
{
    (void)ctx;
    (void)conn;
    (void)state;
    return r->status == 200 ? LG_UNIT_DONE : LG_FAILED;
}

void cw_null(lg_workload *w, cw_ctx *ctx)
{
    *w = (lg_workload){.name = "null-server", .proto = LG_HTTP, .ctx = ctx,
                       .state_size = sizeof(cw_state), .next = null_next,
                       .on_reply = null_reply};
}

/* ---- fencegate lock + unlock ---------------------------------------------------------- */

static int gw_pair_next(void *vctx, int conn, void *vstate, char *buf, size_t cap,
                        int *starts_unit)
{
    const cw_ctx *ctx = vctx;
    cw_state *st = vstate;
    char resource[96], owner[40], body[256];

    name_of(ctx, conn, "u", resource, sizeof resource);
    owner_of(ctx, conn, owner, sizeof owner);
    if (st->step == 0) {
        *starts_unit = 1;
        if (ctx->contended) {
            snprintf(body, sizeof body,
                     "{\"resource\":\"%s\",\"owner\":\"%s\",\"ttl_ms\":%d,\"wait_ms\":%d%s}",
                     resource, owner, CW_LEASE_MS, CW_WAIT_MS,
                     ctx->fair ? ",\"fair\":true" : "");
        } else {
            snprintf(body, sizeof body, "{\"resource\":\"%s\",\"owner\":\"%s\",\"ttl_ms\":%d}",
                     resource, owner, CW_LEASE_MS);
        }
        return json_post(buf, cap, "/lock", body);
    }
    snprintf(body, sizeof body, "{\"resource\":\"%s\",\"owner\":\"%s\"}", resource, owner);
    return json_post(buf, cap, "/unlock", body);
}

static lg_verdict gw_pair_reply(void *ctx, int conn, void *vstate, const lg_reply *r)
{
    cw_state *st = vstate;
    (void)ctx;
    (void)conn;
    if (r->status != 200) {
        st->step = 0; /* a failed /unlock leaves the lock to its lease; lock again */
        return LG_FAILED;
    }
    st->step = !st->step;
    return st->step == 1 ? LG_OP_DONE : LG_UNIT_DONE;
}

void cw_gateway_pairs(lg_workload *w, cw_ctx *ctx)
{
    *w = (lg_workload){.name = "fencegate-pairs", .proto = LG_HTTP, .ctx = ctx,
                       .state_size = sizeof(cw_state), .next = gw_pair_next,
                       .on_reply = gw_pair_reply};
}

/* ---- fencegate token-checked writes --------------------------------------------------- */

static int gw_write_next(void *vctx, int conn, void *vstate, char *buf, size_t cap,
                         int *starts_unit)
{
    const cw_ctx *ctx = vctx;
    cw_state *st = vstate;
    char resource[96], owner[40], body[256], path[128], headers[160];
    char value[CW_VALUE_BYTES];

    name_of(ctx, conn, "w", resource, sizeof resource);
    if (st->step == 0) {
        owner_of(ctx, conn, owner, sizeof owner);
        snprintf(body, sizeof body, "{\"resource\":\"%s\",\"owner\":\"%s\",\"ttl_ms\":%d}",
                 resource, owner, CW_WRITER_TTL_MS);
        return json_post(buf, cap, "/lock", body);
    }
    *starts_unit = 1;
    memset(value, 'a' + conn % 26, sizeof value);
    snprintf(path, sizeof path, "/resources/%s", resource);
    snprintf(headers, sizeof headers,
             "Content-Type: application/octet-stream\r\nFencing-Token: %lld\r\n", st->token);
    return http_request(buf, cap, "PUT", path, headers, value, sizeof value);
}

static lg_verdict gw_write_reply(void *ctx, int conn, void *vstate, const lg_reply *r)
{
    cw_state *st = vstate;
    char token[32];
    (void)ctx;
    (void)conn;
    if (r->status != 200) {
        return LG_FAILED;
    }
    if (st->step == 0) {
        if (json_field(r, "token", token, sizeof token) != 0) {
            return LG_FAILED;
        }
        st->token = atoll(token);
        st->step = 1;
        return LG_NEXT;
    }
    return LG_UNIT_DONE;
}

void cw_gateway_writes(lg_workload *w, cw_ctx *ctx)
{
    *w = (lg_workload){.name = "fencegate-writes", .proto = LG_HTTP, .ctx = ctx,
                       .state_size = sizeof(cw_state), .next = gw_write_next,
                       .on_reply = gw_write_reply};
}

/* ---- fencegate lock + write + unlock cycles ------------------------------------------- */

static int gw_cycle_next(void *vctx, int conn, void *vstate, char *buf, size_t cap,
                         int *starts_unit)
{
    const cw_ctx *ctx = vctx;
    cw_state *st = vstate;
    char resource[96], owner[40], body[256], path[128], headers[160];
    char value[CW_VALUE_BYTES];

    name_of(ctx, conn, "c", resource, sizeof resource);
    owner_of(ctx, conn, owner, sizeof owner);
    if (st->step == 0) {
        *starts_unit = 1;
        snprintf(body, sizeof body, "{\"resource\":\"%s\",\"owner\":\"%s\",\"ttl_ms\":%d}",
                 resource, owner, CW_LEASE_MS);
        return json_post(buf, cap, "/lock", body);
    }
    if (st->step == 1) {
        memset(value, 'a' + conn % 26, sizeof value);
        snprintf(path, sizeof path, "/resources/%s", resource);
        snprintf(headers, sizeof headers,
                 "Content-Type: application/octet-stream\r\nFencing-Token: %lld\r\n",
                 st->token);
        return http_request(buf, cap, "PUT", path, headers, value, sizeof value);
    }
    snprintf(body, sizeof body, "{\"resource\":\"%s\",\"owner\":\"%s\"}", resource, owner);
    return json_post(buf, cap, "/unlock", body);
}

static lg_verdict gw_cycle_reply(void *ctx, int conn, void *vstate, const lg_reply *r)
{
    cw_state *st = vstate;
    char token[32];
    (void)ctx;
    (void)conn;
    if (r->status != 200 || (st->step == 0 && json_field(r, "token", token, sizeof token) != 0)) {
        /* A failed write or unlock leaves the lock held by this owner: locking again
         * re-enters it, and the next unlock ends one hold. Good enough for a benchmark. */
        st->step = 0;
        return LG_FAILED;
    }
    if (st->step == 0) {
        st->token = atoll(token);
        st->step = 1;
        return LG_OP_DONE;
    }
    if (st->step == 1) {
        st->step = 2;
        return LG_NEXT;
    }
    st->step = 0;
    return LG_UNIT_DONE;
}

void cw_gateway_cycles(lg_workload *w, cw_ctx *ctx)
{
    *w = (lg_workload){.name = "fencegate-cycles", .proto = LG_HTTP, .ctx = ctx,
                       .state_size = sizeof(cw_state), .next = gw_cycle_next,
                       .on_reply = gw_cycle_reply};
}

/* ---- Raw Redis scripts ---------------------------------------------------------------- */

/* Formats argv as one RESP command into buf. Returns its length or -1. */
static int resp_command(char *buf, size_t cap, int argc, const char **argv)
{
    char *cmd = NULL;
    int n = redisFormatCommandArgv(&cmd, argc, argv, NULL);
    if (n < 0 || (size_t)n > cap) {
        redisFreeCommand(cmd);
        return -1;
    }
    memcpy(buf, cmd, (size_t)n);
    redisFreeCommand(cmd);
    return n;
}

static int raw_next(void *vctx, int conn, void *vstate, char *buf, size_t cap,
                    int *starts_unit)
{
    const cw_ctx *ctx = vctx;
    cw_state *st = vstate;
    char resource[96], owner[40], lock[128], fence[128], idem[128], base[128], recent[128];
    char channel[128], lease[16];

    /* The keys of lk__key()/lk_channel_name() and the arguments of lk_acquire/lk_release
     * without an idempotency key: the idem key is declared but unused, its TTL "0". */
    name_of(ctx, conn, "r", resource, sizeof resource);
    owner_of(ctx, conn, owner, sizeof owner);
    snprintf(lock, sizeof lock, "fg:{%s}:lock", resource);
    snprintf(idem, sizeof idem, "fg:{%s}:idem:", resource);
    if (st->step == 0) {
        *starts_unit = 1;
        snprintf(fence, sizeof fence, "fg:{%s}:fence", resource);
        snprintf(base, sizeof base, "fg:{%s}:base", resource);
        snprintf(recent, sizeof recent, "fg:{%s}:recent", resource);
        snprintf(lease, sizeof lease, "%d", CW_LEASE_MS);
        const char *argv[] = {"EVALSHA", ctx->sha_acquire, "5", lock, fence, idem, base,
                              recent, owner, lease, "0", "0", "0"};
        return resp_command(buf, cap, 13, argv);
    }
    snprintf(channel, sizeof channel, "fg:{%s}:released", resource);
    const char *argv[] = {"EVALSHA", ctx->sha_release, "2", lock, idem, owner, "0", channel};
    return resp_command(buf, cap, 8, argv);
}

static lg_verdict raw_reply(void *ctx, int conn, void *vstate, const lg_reply *r)
{
    cw_state *st = vstate;
    const redisReply *rr = r->resp;
    (void)ctx;
    (void)conn;
    if (rr == NULL || rr->type != REDIS_REPLY_ARRAY || rr->elements < 1 ||
        rr->element[0]->type != REDIS_REPLY_INTEGER || rr->element[0]->integer != 1) {
        st->step = 0;
        return LG_FAILED;
    }
    st->step = !st->step;
    return st->step == 1 ? LG_OP_DONE : LG_UNIT_DONE;
}

void cw_raw_pairs(lg_workload *w, cw_ctx *ctx)
{
    *w = (lg_workload){.name = "raw-redis-pairs", .proto = LG_RESP, .ctx = ctx,
                       .state_size = sizeof(cw_state), .next = raw_next,
                       .on_reply = raw_reply};
}

/* ---- etcd ----------------------------------------------------------------------------- */

static int etcd_next(void *vctx, int conn, void *vstate, char *buf, size_t cap,
                     int *starts_unit)
{
    const cw_ctx *ctx = vctx;
    cw_state *st = vstate;
    char name[96], b64[160], body[512];

    switch (st->step) {
    case 0:
        snprintf(body, sizeof body, "{\"TTL\":%d}", CW_ETCD_LEASE_S);
        return json_post(buf, cap, "/v3/lease/grant", body);
    case 1:
        *starts_unit = 1;
        name_of(ctx, conn, "e", name, sizeof name);
        base64(name, b64, sizeof b64);
        snprintf(body, sizeof body, "{\"name\":\"%s\",\"lease\":\"%s\"}", b64, st->lease);
        return json_post(buf, cap, "/v3/lock/lock", body);
    default:
        snprintf(body, sizeof body, "{\"key\":\"%s\"}", st->key);
        return json_post(buf, cap, "/v3/lock/unlock", body);
    }
}

static lg_verdict etcd_reply(void *ctx, int conn, void *vstate, const lg_reply *r)
{
    cw_state *st = vstate;
    (void)ctx;
    (void)conn;
    if (r->status != 200) {
        st->step = st->step == 0 ? 0 : 1;
        return LG_FAILED;
    }
    switch (st->step) {
    case 0:
        if (json_field(r, "ID", st->lease, sizeof st->lease) != 0) {
            return LG_FAILED;
        }
        st->step = 1;
        return LG_NEXT;
    case 1:
        if (json_field(r, "key", st->key, sizeof st->key) != 0) {
            return LG_FAILED;
        }
        st->step = 2;
        return LG_OP_DONE;
    default:
        st->step = 1;
        return LG_UNIT_DONE;
    }
}

void cw_etcd_pairs(lg_workload *w, cw_ctx *ctx)
{
    *w = (lg_workload){.name = "etcd-pairs", .proto = LG_HTTP, .ctx = ctx,
                       .state_size = sizeof(cw_state), .next = etcd_next,
                       .on_reply = etcd_reply};
}
