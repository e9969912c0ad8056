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
    st = lk__eval(c, LK__SCRIPT_FAIR_CANCEL, 3, 5, argv, &reply);
    if (st != LK_OK) {
        return st;
    }
    /* {1} or {0}: whether it was queued does not change what the caller does next. */
    freeReplyObject(reply);
    return LK_OK;
}
