/*
 * Status and the token range (one script each), and the pieces calls.c shares with them:
 * argument checks, replicas, the acquired answer.
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
    st = lk__eval(c, LK__SCRIPT_STATUS, 2, 2, argv, &reply);
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

lk_status lk_token_range(lk_client *c, const char *resource, int64_t *base, int64_t *last)
{
    int recent = 0;
    return lk_token_check(c, resource, 0, base, last, &recent);
}
