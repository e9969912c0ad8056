/*
 * Fair (FIFO) acquisition, like RedissonFairLock: one attempt per call, queue in Redis.
 *
 * The queue lives next to the lock, with the same hash tag: fg:{R}:queue lists waiting
 * owners in arrival order and fg:{R}:qtimeout holds each one's deadline. fair_acquire.lua
 * explains the rules; this file checks arguments and reads the answers. Waiting itself is
 * the caller's business (the gateway parks its waiters), so nothing here blocks.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "locklib_internal.h"

lk_status lk_acquire_fair(lk_client *c, const char *resource, const char *owner,
                          int64_t lease_ms, int64_t floor, const char *idem_key,
                          int64_t wait_ms, lk_result *res)
{
    char lock[LK__KEY_MAX], fence[LK__KEY_MAX], idem[LK__KEY_MAX], base[LK__KEY_MAX];
    char queue[LK__KEY_MAX], qtimeout[LK__KEY_MAX], recent[LK__KEY_MAX];
    char lease[24], floor_s[24], idem_ttl[24], wait[24];
    redisReply *reply = NULL;
    int watchdog = lease_ms == LK_LEASE_WATCHDOG;
    lk_status st;

    lk__result_init(res);
    st = lk__acquire_args(c, resource, owner, &lease_ms, floor, idem_key);
    if (st != LK_OK) {
        return st;
    }
    if (wait_ms < 0 || wait_ms > LK_WAIT_MAX_MS) {
        return lk__fail(c, LK_EINVAL, "wait must be 0..%d ms", LK_WAIT_MAX_MS);
    }
    lk__key(lock, resource, "lock");
    lk__key(fence, resource, "fence");
    lk__key(base, resource, "base");
    lk__key(queue, resource, "queue");
    lk__key(qtimeout, resource, "qtimeout");
    lk__key(recent, resource, "recent");
    lk__idem_args(c, resource, idem_key, idem, idem_ttl);
    snprintf(lease, sizeof lease, "%" PRId64, lease_ms);
    snprintf(floor_s, sizeof floor_s, "%" PRId64, floor);
    snprintf(wait, sizeof wait, "%" PRId64, wait_ms);

    const char *argv[] = {lock,  fence, idem,    base,     queue, qtimeout, recent,
                          owner, lease, floor_s, idem_ttl, wait};
    st = lk__eval(c, LK__FAIR_ACQUIRE, 7, 12, argv, &reply);
    if (st != LK_OK) {
        return st;
    }
    long long code = lk__int_at(reply, 0);
    if (code == 1) {
        st = lk__read_acquired(c, reply, res);
    } else if (code == 0) {
        res->ttl_ms = lk__int_at(reply, 1);
        res->queue_pos = (int)lk__int_at(reply, 2);
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

lk_status lk_fair_cancel(lk_client *c, const char *resource, const char *owner)
{
    char lock[LK__KEY_MAX], queue[LK__KEY_MAX], qtimeout[LK__KEY_MAX], channel[LK__KEY_MAX];
    redisReply *reply = NULL;
    lk_status st;

    if (!lk_valid_resource(resource) || !lk_valid_owner(owner)) {
        return lk__fail(c, LK_EINVAL, "invalid resource or owner");
    }
    lk__key(lock, resource, "lock");
    lk__key(queue, resource, "queue");
    lk__key(qtimeout, resource, "qtimeout");
    lk_channel_name(resource, channel, sizeof channel);

    const char *argv[] = {lock, queue, qtimeout, owner, channel};
    st = lk__eval(c, LK__FAIR_CANCEL, 3, 5, argv, &reply);
    if (st != LK_OK) {
        return st;
    }
    /* {1} or {0}: whether it was queued does not change what the caller does next. */
    freeReplyObject(reply);
    return LK_OK;
}
