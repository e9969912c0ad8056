/*
 * The call kinds: for each, how a call's arguments become a script call (build) and how the
 * script's reply becomes the call's outcome (decode). Both are pure: they see the lk_call,
 * the options and the reply, never a connection, so any transport can carry the built call
 * (one node, the node owning the slot, or N nodes whose replies a combiner merges first).
 * Layer: above util and script. Never installed.
 */
#ifndef LOCKLIB_CALLS_INTERNAL_H
#define LOCKLIB_CALLS_INTERNAL_H

#include "script_internal.h"
#include "util_internal.h"

/* A kind the public enum lk_call_kind does not have, for lk_lock_status(); lk_call_many()
 * refuses it. A STATUS call reads the lock's state into res.token, res.holds, res.ttl_ms
 * (the holder's), `last` (the last token issued), `recent` (1 when the lock is held) and
 * res.queue_pos (the length of its fair queue). */
#define LK__CALL_STATUS ((lk_call_kind)(LK_CALL_FORCE_RELEASE + 1))
#define LK__CALL_KINDS (LK_CALL_FORCE_RELEASE + 2)

typedef struct lk__call_kind {
    /* Checks the call's arguments and fills *cmd. Returns OK, or an error status (EINVAL)
     * with the reason in err (LK__ERR_LEN bytes): then nothing is to be sent. opts gives the
     * watchdog lease (LK_LEASE_WATCHDOG) and the idempotency retention. */
    lk_status (*build)(const lk_options *opts, const lk_call *call, lk__cmd *cmd, char *err);
    /* Reads the script's array reply into call->res (and base/last/recent) and returns the
     * status the call's function returns, with the reason in err when it is an error. */
    lk_status (*decode)(lk_call *call, const redisReply *reply, char *err);
} lk__call_kind;

/* The pair of a kind, public or LK__CALL_*; NULL for any other value. */
const lk__call_kind *lk__call_kind_of(lk_call_kind kind);

/* Zeroes a call's outcome: status EREDIS, res as lk__result_init(), no reason. */
void lk__call_reset(lk_call *call);

/* Zeroes *res, with queue_pos -1 (not queued). */
void lk__result_init(lk_result *res);

/* Reads {1, token, holds, lease_ms, floor_raised, replayed, ...} into *res. Returns ACQUIRED,
 * or EREDIS with the reason in err when the token is not in 1..LK_TOKEN_MAX. */
lk_status lk__read_acquired(char *err, const redisReply *reply, lk_result *res);

/* OK when token is a token the scripts can mint (1..LK_TOKEN_MAX), else EREDIS with the
 * reason (naming the `what` script) in err. */
lk_status lk__check_token(char *err, int64_t token, const char *what);

#endif
