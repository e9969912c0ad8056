/*
 * acquire, fair acquire, release, renew and the token check: argument checks, one script
 * call each, and the decoding of its answer, run singly (lk_acquire() and the rest) or many at once as one
 * pipeline (lk_call_many(), on lk__eval_many() in client.c).
 *
 * Every user value reaches Redis only as a script argument or inside a key name built from
 * a validated name; nothing is ever spliced into script text.
 *
 * A call's work happens in three steps: build() checks its arguments and fills the script
 * call; decode() reads the answer; finish() runs after the whole pipeline has been read,
 * because it may need the connection itself (WAIT for min_replicas, the watchdog, undoing
 * a hold whose watchdog could not start).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "locklib_internal.h"

typedef struct many {
    lk_client *c;
    lk_call *const *calls;
} many;

/* Records a status and, for a status that is not an outcome, the client's reason. */
static void settle(lk_client *c, lk_call *call, lk_status st)
{
    call->status = st;
    if (st >= LK_EINVAL) {
        snprintf(call->err, sizeof call->err, "%s", c->err);
    }
}

static int refuse(lk_client *c, lk_call *call, lk_status st)
{
    settle(c, call, st);
    return -1;
}

static int valid_names(lk_client *c, const lk_call *call)
{
    if (!lk_valid_resource(call->resource) || !lk_valid_owner(call->owner) ||
        !lk__valid_idem(call->idem_key)) {
        lk__fail(c, LK_EINVAL, "invalid resource, owner or idempotency key");
        return 0;
    }
    return 1;
}

/* KEYS lock, fence, idem, base, [queue, qtimeout,] recent; ARGV owner, lease, floor,
 * idem_ttl[, wait]: acquire.lua and fair_acquire.lua. */
static int build_acquire(lk_client *c, lk_call *call, lk__item *it)
{
    int fair = call->kind == LK_CALL_ACQUIRE_FAIR;
    int64_t lease_ms = call->lease_ms;
    lk_status st = lk__acquire_args(c, call->resource, call->owner, &lease_ms, call->floor,
                                    call->idem_key);
    if (st != LK_OK) {
        return refuse(c, call, st);
    }
    if (fair && (call->wait_ms < 0 || call->wait_ms > LK_WAIT_MAX_MS)) {
        return refuse(c, call, lk__fail(c, LK_EINVAL, "wait must be 0..%d ms", LK_WAIT_MAX_MS));
    }
    static const char *const plain[] = {"lock", "fence", "", "base", "recent"};
    static const char *const queued[] = {"lock", "fence", "", "base", "queue", "qtimeout",
                                         "recent"};
    const char *const *suffix = fair ? queued : plain;
    it->script = fair ? LK__FAIR_ACQUIRE : LK__ACQUIRE;
    it->nkeys = fair ? 7 : 5;
    for (int k = 0; k < it->nkeys; k++) {
        if (k != 2) {
            lk__key(it->key[k], call->resource, suffix[k]);
        }
        it->argv[k] = it->key[k];
    }
    lk__idem_args(c, call->resource, call->idem_key, it->key[2], it->num[2]);
    snprintf(it->num[0], sizeof it->num[0], "%" PRId64, lease_ms);
    snprintf(it->num[1], sizeof it->num[1], "%" PRId64, call->floor);
    snprintf(it->num[3], sizeof it->num[3], "%" PRId64, call->wait_ms);
    int a = it->nkeys;
    it->argv[a++] = call->owner;
    it->argv[a++] = it->num[0];
    it->argv[a++] = it->num[1];
    it->argv[a++] = it->num[2];
    if (fair) {
        it->argv[a++] = it->num[3];
    }
    it->argc = a;
    return 0;
}

/* KEYS lock, idem; ARGV owner, idem_ttl, channel (release.lua) or owner, lease, idem_ttl
 * (renew.lua). */
static int build_owner_call(lk_client *c, lk_call *call, lk__item *it)
{
    int renew = call->kind == LK_CALL_RENEW;
    if (!valid_names(c, call)) {
        return refuse(c, call, LK_EINVAL);
    }
    if (renew && !lk__valid_lease(call->lease_ms)) {
        return refuse(c, call, lk__fail(c, LK_EINVAL, "lease must be %d..%d ms",
                                        LK_LEASE_MIN_MS, LK_LEASE_MAX_MS));
    }
    it->script = renew ? LK__RENEW : LK__RELEASE;
    it->nkeys = 2;
    it->argc = 5;
    lk__key(it->key[0], call->resource, "lock");
    lk__idem_args(c, call->resource, call->idem_key, it->key[1], it->num[1]);
    it->argv[0] = it->key[0];
    it->argv[1] = it->key[1];
    it->argv[2] = call->owner;
    if (renew) {
        snprintf(it->num[0], sizeof it->num[0], "%" PRId64, call->lease_ms);
        it->argv[3] = it->num[0];
        it->argv[4] = it->num[1];
    } else {
        lk_channel_name(call->resource, it->key[2], sizeof it->key[2]);
        it->argv[3] = it->num[1];
        it->argv[4] = it->key[2];
        /* A renewal answered NOT_OWNER from here on is this release, not a loss
         * (watchdog.c). */
        lk__watch_releasing(c, call->resource, call->owner, 1);
    }
    return 0;
}

/* KEYS fence, base, recent; ARGV token (token_range.lua). */
static int build_token_check(lk_client *c, lk_call *call, lk__item *it)
{
    if (!lk_valid_resource(call->resource)) {
        return refuse(c, call, lk__fail(c, LK_EINVAL, "invalid resource"));
    }
    if (call->token < 0 || call->token > LK_TOKEN_MAX) {
        return refuse(c, call, lk__fail(c, LK_EINVAL, "token must be 0..2^53-1"));
    }
    static const char *const suffix[] = {"fence", "base", "recent"};
    it->script = LK__TOKEN_RANGE;
    it->nkeys = 3;
    it->argc = 4;
    for (int k = 0; k < 3; k++) {
        lk__key(it->key[k], call->resource, suffix[k]);
        it->argv[k] = it->key[k];
    }
    snprintf(it->num[0], sizeof it->num[0], "%" PRId64, call->token);
    it->argv[3] = it->num[0];
    return 0;
}

static int build(void *ctx, size_t i, lk__item *it)
{
    many *m = ctx;
    lk_call *call = m->calls[i];
    switch (call->kind) {
    case LK_CALL_ACQUIRE:
    case LK_CALL_ACQUIRE_FAIR:
        return build_acquire(m->c, call, it);
    case LK_CALL_RELEASE:
    case LK_CALL_RENEW:
        return build_owner_call(m->c, call, it);
    case LK_CALL_TOKEN_CHECK:
        return build_token_check(m->c, call, it);
    }
    return refuse(m->c, call, lk__fail(m->c, LK_EINVAL, "unknown call kind %d", (int)call->kind));
}

static lk_status decode_acquire(lk_client *c, lk_call *call, const redisReply *reply)
{
    long long code = lk__int_at(reply, 0);
    if (code == 1) {
        return lk__read_acquired(c, reply, &call->res);
    }
    if (code == 0) {
        call->res.ttl_ms = lk__int_at(reply, 1);
        if (call->kind == LK_CALL_ACQUIRE_FAIR) {
            call->res.queue_pos = (int)lk__int_at(reply, 2);
        }
        return LK_HELD;
    }
    return lk__fail(c, LK_EIDEMPOTENCY, "idempotency key was used by another request");
}

static lk_status decode_release(lk_client *c, lk_call *call, const redisReply *reply)
{
    long long code = lk__int_at(reply, 0);
    call->res.holds = lk__int_at(reply, 1);
    call->res.replayed = (int)lk__int_at(reply, 2);
    switch (code) {
    case 1:
        if (call->res.replayed) {
            /* A retry of a release that already happened: the lock may have been taken
             * again since, with a watch of its own, which this must not remove. */
            lk__watch_releasing(c, call->resource, call->owner, 0);
        } else {
            lk__watch_remove(c, call->resource, call->owner);
        }
        return LK_RELEASED;
    case 2:
        lk__watch_releasing(c, call->resource, call->owner, 0);
        return LK_STILL_HELD;
    case 0:
        /* Not held (expired, deleted, or reported lost): nothing is left to renew. */
        lk__watch_remove(c, call->resource, call->owner);
        return LK_NOT_OWNER;
    default:
        lk__watch_releasing(c, call->resource, call->owner, 0);
        return lk__fail(c, LK_EIDEMPOTENCY, "idempotency key was used by another request");
    }
}

static lk_status decode_renew(lk_client *c, lk_call *call, const redisReply *reply)
{
    long long code = lk__int_at(reply, 0);
    call->res.token = lk__int_at(reply, 1);
    call->res.replayed = (int)lk__int_at(reply, 2);
    /* The lease granted: on a replay, the first answer's, whatever this retry asked for. */
    call->res.ttl_ms = lk__int_at(reply, 3);
    if (code == 1) {
        lk_status st = lk__check_token(c, call->res.token, "renew");
        return st == LK_OK ? LK_RENEWED : st;
    }
    if (code == 0) {
        call->res.holds = lk__int_at(reply, 4); /* 1: another owner holds it */
        return LK_NOT_OWNER;
    }
    return lk__fail(c, LK_EIDEMPOTENCY, "idempotency key was used by another request");
}

static void done(void *ctx, size_t i, lk_status st, redisReply *reply)
{
    many *m = ctx;
    lk_call *call = m->calls[i];

    if (st == LK_OK) {
        switch (call->kind) {
        case LK_CALL_ACQUIRE:
        case LK_CALL_ACQUIRE_FAIR:
            st = decode_acquire(m->c, call, reply);
            break;
        case LK_CALL_RELEASE:
            st = decode_release(m->c, call, reply);
            break;
        case LK_CALL_RENEW:
            st = decode_renew(m->c, call, reply);
            break;
        case LK_CALL_TOKEN_CHECK:
            call->base = lk__int_at(reply, 0);
            call->last = lk__int_at(reply, 1);
            call->recent = call->token > 0 && lk__int_at(reply, 2) == 1;
            break;
        }
    } else if (call->kind == LK_CALL_RELEASE) {
        lk__watch_releasing(m->c, call->resource, call->owner, 0);
    }
    freeReplyObject(reply);
    settle(m->c, call, st);
}

void lk_call_many(lk_client *c, lk_call *const *calls, size_t n)
{
    many m = {c, calls};

    if (c->opts.min_replicas > 0 && n > 1) {
        /* Each acquisition's WAIT must run on the connection that carried it, before any
         * later call of the batch can drop it, and a rollback's reconnect must not give a
         * later call a WAIT with nothing to wait for: with replicas, one call at a time. */
        for (size_t i = 0; i < n; i++) {
            lk_call_many(c, &calls[i], 1);
        }
        return;
    }

    for (size_t i = 0; i < n; i++) {
        lk__result_init(&calls[i]->res);
        calls[i]->status = LK_EREDIS;
        calls[i]->err[0] = '\0';
        calls[i]->base = calls[i]->last = 0;
        calls[i]->recent = 0;
    }
    unsigned scripts = 0;
    for (size_t i = 0; i < n; i++) {
        static const enum lk__script script_of[] = {LK__ACQUIRE, LK__FAIR_ACQUIRE, LK__RELEASE,
                                                    LK__RENEW, LK__TOKEN_RANGE};
        if ((unsigned)calls[i]->kind < sizeof script_of / sizeof script_of[0]) {
            scripts |= 1u << script_of[calls[i]->kind];
        }
    }
    lk__eval_many(c, n, scripts, build, done, &m);
    for (size_t i = 0; i < n; i++) {
        lk_call *call = calls[i];
        if (call->status == LK_ACQUIRED) {
            settle(c, call, lk__acquired(c, call->resource, call->owner,
                                         call->lease_ms == LK_LEASE_WATCHDOG, &call->res));
        }
    }
}

/* One call: the status, with its reason left in c->err for lk_errstr(). */
static lk_status call_one(lk_client *c, lk_call *call, lk_result *res)
{
    lk_call *one[1] = {call};
    lk_call_many(c, one, 1);
    *res = call->res;
    if (call->status >= LK_EINVAL) {
        snprintf(c->err, sizeof c->err, "%s", call->err);
    }
    return call->status;
}

lk_status lk_acquire(lk_client *c, const char *resource, const char *owner, int64_t lease_ms,
                     int64_t floor, const char *idem_key, lk_result *res)
{
    lk_call call = {.kind = LK_CALL_ACQUIRE, .resource = resource, .owner = owner,
                    .idem_key = idem_key, .lease_ms = lease_ms, .floor = floor};
    return call_one(c, &call, res);
}

lk_status lk_acquire_fair(lk_client *c, const char *resource, const char *owner,
                          int64_t lease_ms, int64_t floor, const char *idem_key,
                          int64_t wait_ms, lk_result *res)
{
    lk_call call = {.kind = LK_CALL_ACQUIRE_FAIR, .resource = resource, .owner = owner,
                    .idem_key = idem_key, .lease_ms = lease_ms, .floor = floor,
                    .wait_ms = wait_ms};
    return call_one(c, &call, res);
}

lk_status lk_release(lk_client *c, const char *resource, const char *owner,
                     const char *idem_key, lk_result *res)
{
    lk_call call = {.kind = LK_CALL_RELEASE, .resource = resource, .owner = owner,
                    .idem_key = idem_key};
    return call_one(c, &call, res);
}

lk_status lk_renew(lk_client *c, const char *resource, const char *owner, int64_t lease_ms,
                   const char *idem_key, lk_result *res)
{
    lk_call call = {.kind = LK_CALL_RENEW, .resource = resource, .owner = owner,
                    .idem_key = idem_key, .lease_ms = lease_ms};
    return call_one(c, &call, res);
}

lk_status lk_token_check(lk_client *c, const char *resource, int64_t token, int64_t *base,
                         int64_t *last, int *recent)
{
    lk_call call = {.kind = LK_CALL_TOKEN_CHECK, .resource = resource, .token = token};
    lk_result ignored;
    lk_status st = call_one(c, &call, &ignored);
    *base = call.base;
    *last = call.last;
    *recent = call.recent;
    return st;
}
