/*
 * acquire, release, renew, status and the token range: argument checks, then one script each.
 *
 * Every user value reaches Redis only as a script argument or inside a key name built from
 * a validated name; nothing is ever spliced into script text.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "locklib_internal.h"

int lk__valid_idem(const char *idem_key)
{
    return idem_key == NULL || lk_valid_owner(idem_key);
}

void lk__idem_args(const lk_client *c, const char *resource, const char *idem_key, char *key,
                   char *ttl)
{
    if (idem_key != NULL) {
        lk__idem_key(key, resource, idem_key);
        snprintf(ttl, 24, "%" PRId64, c->opts.idempotency_ttl_ms);
    } else {
        /* Unused by the script, but every key a script may touch is declared. */
        lk__key(key, resource, "idem:");
        snprintf(ttl, 24, "0");
    }
}

void lk__result_init(lk_result *res)
{
    memset(res, 0, sizeof *res);
    res->queue_pos = -1;
}

/* Undoes one hold after too few replicas acknowledged it. Returns EREPLICAS when the hold
 * is gone (released, or the lease already ran out), or EUNAVAILABLE when the rollback itself
 * failed: the lock may then still be held until its lease runs out, and the message says
 * that the outcome is unknown. */
static lk_status roll_back(lk_client *c, const char *resource, const char *owner,
                           long long acked)
{
    char why[sizeof c->err];
    lk_result undo;
    lk_status st = lk_release(c, resource, owner, NULL, &undo);

    if (st == LK_RELEASED || st == LK_STILL_HELD || st == LK_NOT_OWNER) {
        return lk__fail(c, LK_EREPLICAS,
                        "only %lld of %d replicas acknowledged the acquisition; rolled back (%s)",
                        acked, c->opts.min_replicas, lk_status_name(st));
    }
    snprintf(why, sizeof why, "%s", c->err);
    return lk__fail(c, LK_EUNAVAILABLE,
                    "only %lld of %d replicas acknowledged the acquisition and the rollback "
                    "failed (%s: %s): whether the lock is still held is unknown",
                    acked, c->opts.min_replicas, lk_status_name(st), why);
}

/* With min_replicas set: WAIT for the replicas. If too few acknowledge, the acquisition is
 * undone (one hold released) so a failover cannot promote a replica that never saw it.
 * Returns OK, EREPLICAS (rolled back) or EUNAVAILABLE (the rollback failed). */
static lk_status check_replicas(lk_client *c, const char *resource, const char *owner)
{
    char n[16];
    char timeout[16];
    snprintf(n, sizeof n, "%d", c->opts.min_replicas);
    snprintf(timeout, sizeof timeout, "%d", c->opts.replica_timeout_ms);
    const char *argv[3] = {"WAIT", n, timeout};
    size_t lens[3] = {4, strlen(n), strlen(timeout)};
    lk__sigpipe guard;

    if (c->ctx == NULL) {
        return lk__fail(c, LK_EUNAVAILABLE, "connection lost before WAIT");
    }
    lk__sigpipe_block(&guard);
    redisReply *reply = redisCommandArgv(c->ctx, 3, argv, lens);
    lk__sigpipe_restore(&guard);
    if (reply == NULL) {
        /* A timeout or I/O error leaves the context in an error state in which hiredis
         * refuses every command, the rollback's included: roll back on a new connection. */
        lk__drop_conn(c);
    }
    long long acked = (reply != NULL && reply->type == REDIS_REPLY_INTEGER) ? reply->integer : 0;
    freeReplyObject(reply);
    if (acked >= c->opts.min_replicas) {
        return LK_OK;
    }
    return roll_back(c, resource, owner, acked);
}

lk_status lk__acquired(lk_client *c, const char *resource, const char *owner, int watchdog,
                       const lk_result *res)
{
    lk_status st;

    if (!res->replayed && c->opts.min_replicas > 0) {
        st = check_replicas(c, resource, owner);
        if (st != LK_OK) {
            return st;
        }
    }
    if (watchdog) {
        st = lk__watch_add(c, resource, owner);
        if (st != LK_OK) {
            /* Without a watchdog the lock would silently expire under its holder. */
            lk_result undo;
            lk_release(c, resource, owner, NULL, &undo);
            return lk__fail(c, st, "cannot start the watchdog");
        }
    }
    return LK_ACQUIRED;
}

lk_status lk__acquire_args(lk_client *c, const char *resource, const char *owner,
                           int64_t *lease_ms, int64_t floor, const char *idem_key)
{
    if (!lk_valid_resource(resource) || !lk_valid_owner(owner) || !lk__valid_idem(idem_key)) {
        return lk__fail(c, LK_EINVAL, "invalid resource, owner or idempotency key");
    }
    if (*lease_ms == LK_LEASE_WATCHDOG) {
        *lease_ms = c->opts.watchdog_lease_ms;
    }
    if (!lk__valid_lease(*lease_ms)) {
        return lk__fail(c, LK_EINVAL, "lease must be %d..%d ms", LK_LEASE_MIN_MS,
                        LK_LEASE_MAX_MS);
    }
    if (floor < 0 || floor >= LK_TOKEN_MAX) {
        return lk__fail(c, LK_EINVAL, "floor must be 0..2^53-2");
    }
    return LK_OK;
}

lk_status lk__read_acquired(lk_client *c, const redisReply *reply, lk_result *res)
{
    res->token = lk__int_at(reply, 1);
    res->holds = lk__int_at(reply, 2);
    res->ttl_ms = lk__int_at(reply, 3);
    res->floor_raised = (int)lk__int_at(reply, 4);
    res->replayed = (int)lk__int_at(reply, 5);
    return lk__check_token(c, res->token, "acquire") == LK_OK ? LK_ACQUIRED : LK_EREDIS;
}

lk_status lk__check_token(lk_client *c, int64_t token, const char *what)
{
    /* A lock hash without its '#token' field (written by another client, or damaged) ends
     * the script's answer at the nil token: {1}. The hold may have been counted, but a token
     * that was never minted must not reach a writer; the lease ends that hold. */
    if (token < 1 || token > LK_TOKEN_MAX) {
        return lk__fail(c, LK_EREDIS, "the %s script answered without a valid token (%" PRId64
                        "): the lock's hash in Redis holds none", what, token);
    }
    return LK_OK;
}

lk_status lk_acquire(lk_client *c, const char *resource, const char *owner, int64_t lease_ms,
                     int64_t floor, const char *idem_key, lk_result *res)
{
    char lock[LK__KEY_MAX], fence[LK__KEY_MAX], idem[LK__KEY_MAX], base[LK__KEY_MAX];
    char recent[LK__KEY_MAX];
    char lease[24], floor_s[24], idem_ttl[24];
    redisReply *reply = NULL;
    int watchdog = lease_ms == LK_LEASE_WATCHDOG;
    lk_status st;

    lk__result_init(res);
    st = lk__acquire_args(c, resource, owner, &lease_ms, floor, idem_key);
    if (st != LK_OK) {
        return st;
    }
    lk__key(lock, resource, "lock");
    lk__key(fence, resource, "fence");
    lk__key(base, resource, "base");
    lk__key(recent, resource, "recent");
    lk__idem_args(c, resource, idem_key, idem, idem_ttl);
    snprintf(lease, sizeof lease, "%" PRId64, lease_ms);
    snprintf(floor_s, sizeof floor_s, "%" PRId64, floor);

    const char *argv[] = {lock, fence, idem, base, recent, owner, lease, floor_s, idem_ttl};
    st = lk__eval(c, LK__ACQUIRE, 5, 9, argv, &reply);
    if (st != LK_OK) {
        return st;
    }
    long long code = lk__int_at(reply, 0);
    if (code == 1) {
        st = lk__read_acquired(c, reply, res);
    } else if (code == 0) {
        res->ttl_ms = lk__int_at(reply, 1);
        st = LK_HELD;
    } else {
        st = lk__fail(c, LK_EIDEMPOTENCY, "idempotency key was used by another request");
    }
    freeReplyObject(reply);
    if (st == LK_ACQUIRED) {
        st = lk__acquired(c, resource, owner, watchdog, res);
    }
    return st;
}

lk_status lk_release(lk_client *c, const char *resource, const char *owner,
                     const char *idem_key, lk_result *res)
{
    char lock[LK__KEY_MAX], idem[LK__KEY_MAX], channel[LK__KEY_MAX], idem_ttl[24];
    redisReply *reply = NULL;
    lk_status st;

    lk__result_init(res);
    if (!lk_valid_resource(resource) || !lk_valid_owner(owner) || !lk__valid_idem(idem_key)) {
        return lk__fail(c, LK_EINVAL, "invalid resource, owner or idempotency key");
    }
    lk__key(lock, resource, "lock");
    lk_channel_name(resource, channel, sizeof channel);
    lk__idem_args(c, resource, idem_key, idem, idem_ttl);

    const char *argv[] = {lock, idem, owner, idem_ttl, channel};
    /* A renewal answered NOT_OWNER from here on is this release, not a loss (watchdog.c). */
    lk__watch_releasing(c, resource, owner, 1);
    st = lk__eval(c, LK__RELEASE, 2, 5, argv, &reply);
    if (st != LK_OK) {
        lk__watch_releasing(c, resource, owner, 0);
        return st;
    }
    long long code = lk__int_at(reply, 0);
    res->holds = lk__int_at(reply, 1);
    res->replayed = (int)lk__int_at(reply, 2);
    freeReplyObject(reply);
    switch (code) {
    case 1:
        if (res->replayed) {
            /* A retry of a release that already happened: the lock may have been taken
             * again since, with a watch of its own, which this must not remove. */
            lk__watch_releasing(c, resource, owner, 0);
        } else {
            lk__watch_remove(c, resource, owner);
        }
        return LK_RELEASED;
    case 2:
        lk__watch_releasing(c, resource, owner, 0);
        return LK_STILL_HELD;
    case 0:
        /* Not held (expired, deleted, or reported lost): nothing is left to renew. */
        lk__watch_remove(c, resource, owner);
        return LK_NOT_OWNER;
    default:
        lk__watch_releasing(c, resource, owner, 0);
        return lk__fail(c, LK_EIDEMPOTENCY, "idempotency key was used by another request");
    }
}

lk_status lk_renew(lk_client *c, const char *resource, const char *owner, int64_t lease_ms,
                   const char *idem_key, lk_result *res)
{
    char lock[LK__KEY_MAX], idem[LK__KEY_MAX], lease[24], idem_ttl[24];
    redisReply *reply = NULL;
    lk_status st;

    lk__result_init(res);
    if (!lk_valid_resource(resource) || !lk_valid_owner(owner) || !lk__valid_idem(idem_key)) {
        return lk__fail(c, LK_EINVAL, "invalid resource, owner or idempotency key");
    }
    if (!lk__valid_lease(lease_ms)) {
        return lk__fail(c, LK_EINVAL, "lease must be %d..%d ms", LK_LEASE_MIN_MS,
                        LK_LEASE_MAX_MS);
    }
    lk__key(lock, resource, "lock");
    lk__idem_args(c, resource, idem_key, idem, idem_ttl);
    snprintf(lease, sizeof lease, "%" PRId64, lease_ms);

    const char *argv[] = {lock, idem, owner, lease, idem_ttl};
    st = lk__eval(c, LK__RENEW, 2, 5, argv, &reply);
    if (st != LK_OK) {
        return st;
    }
    long long code = lk__int_at(reply, 0);
    res->token = lk__int_at(reply, 1);
    res->replayed = (int)lk__int_at(reply, 2);
    /* The lease granted: on a replay, the first answer's, whatever this retry asked for. */
    res->ttl_ms = lk__int_at(reply, 3);
    freeReplyObject(reply);
    if (code == 1) {
        st = lk__check_token(c, res->token, "renew");
        return st == LK_OK ? LK_RENEWED : st;
    }
    if (code == 0) {
        return LK_NOT_OWNER;
    }
    return lk__fail(c, LK_EIDEMPOTENCY, "idempotency key was used by another request");
}

lk_status lk_lock_status(lk_client *c, const char *resource, lk_lock_info *info)
{
    char lock[LK__KEY_MAX], fence[LK__KEY_MAX];
    redisReply *reply = NULL;
    lk_status st;

    memset(info, 0, sizeof *info);
    if (!lk_valid_resource(resource)) {
        return lk__fail(c, LK_EINVAL, "invalid resource");
    }
    lk__key(lock, resource, "lock");
    lk__key(fence, resource, "fence");
    const char *argv[] = {lock, fence};
    st = lk__eval(c, LK__STATUS, 2, 2, argv, &reply);
    if (st != LK_OK) {
        return st;
    }
    info->locked = (int)lk__int_at(reply, 0);
    info->token = lk__int_at(reply, 1);
    info->holds = lk__int_at(reply, 2);
    info->ttl_ms = lk__int_at(reply, 3);
    info->last_token = lk__int_at(reply, 4);
    freeReplyObject(reply);
    return LK_OK;
}

lk_status lk_last_token(lk_client *c, const char *resource, int64_t *token)
{
    lk_lock_info info;
    lk_status st = lk_lock_status(c, resource, &info);
    *token = st == LK_OK ? info.last_token : 0;
    return st;
}

lk_status lk_token_check(lk_client *c, const char *resource, int64_t token, int64_t *base,
                         int64_t *last, int *recent)
{
    char fence[LK__KEY_MAX], base_key[LK__KEY_MAX], recent_key[LK__KEY_MAX], token_s[24];
    redisReply *reply = NULL;
    lk_status st;

    *base = 0;
    *last = 0;
    *recent = 0;
    if (!lk_valid_resource(resource)) {
        return lk__fail(c, LK_EINVAL, "invalid resource");
    }
    if (token < 0 || token > LK_TOKEN_MAX) {
        return lk__fail(c, LK_EINVAL, "token must be 0..2^53-1");
    }
    lk__key(fence, resource, "fence");
    lk__key(base_key, resource, "base");
    lk__key(recent_key, resource, "recent");
    snprintf(token_s, sizeof token_s, "%" PRId64, token);
    const char *argv[] = {fence, base_key, recent_key, token_s};
    st = lk__eval(c, LK__TOKEN_RANGE, 3, 4, argv, &reply);
    if (st != LK_OK) {
        return st;
    }
    *base = lk__int_at(reply, 0);
    *last = lk__int_at(reply, 1);
    *recent = token > 0 && lk__int_at(reply, 2) == 1;
    freeReplyObject(reply);
    return LK_OK;
}

lk_status lk_token_range(lk_client *c, const char *resource, int64_t *base, int64_t *last)
{
    int recent = 0;
    return lk_token_check(c, resource, 0, base, last, &recent);
}
