/*
 * The call kinds as data: one {build, decode} pair per kind (calls_internal.h).
 *
 * Every user value reaches Redis only as a script argument or inside a key name built from
 * a validated name; nothing is ever spliced into script text. Every key of a call is
 * fg:{resource}:..., so a call touches one hash slot.
 *
 * What happens around a call (the watchdog's bookkeeping, WAIT for replicas, sending it at
 * all) is not here: locks.c and run.c do it. So a decode may run on a reply that a Redlock
 * combiner chose among several, and a build may be sent to whichever node owns the slot.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "calls_internal.h"

static const char idem_used[] = "idempotency key was used by another request";

/* The resource, owner and idempotency key of a call that names all three. */
static lk_status check_names(const lk_call *call, char *err)
{
    if (!lk_valid_resource(call->resource) || !lk_valid_owner(call->owner) ||
        !lk__valid_idem(call->idem_key)) {
        return lk__errf(err, LK_EINVAL, "invalid resource, owner or idempotency key");
    }
    return LK_OK;
}

/* The idempotency record key and retention ("0" and an unused key without idem_key). */
static void idem_args(const lk_options *opts, const lk_call *call, lk__cmd *cmd, int64_t *ttl)
{
    lk__cmd_idem_key(cmd, call->idem_key);
    *ttl = call->idem_key != NULL ? opts->idempotency_ttl_ms : 0;
}

/* A hand-off id (lk_call.handoff_id): 1..16 lowercase hex digits. */
static int valid_handoff_id(const char *id)
{
    size_t n = strlen(id);
    if (n < 1 || n > 16) {
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f'))) {
            return 0;
        }
    }
    return 1;
}

/* The hand-off keys (lua/prelude/handoff.lua). */
static void handoff_keys(lk__cmd *cmd)
{
    lk__cmd_key(cmd, "hq");
    lk__cmd_key(cmd, "wq");
    lk__cmd_key(cmd, "wqt");
}

/* ---- acquire.lua, fair_acquire.lua ---------------------------------------------------- */

/* KEYS lock, fence, idem, base, [queue, qtimeout,] recent, readers, rwait[, hand-off keys];
 * ARGV owner, lease, floor, idem_ttl[, wait], token_key_idle_ttl[, others_waiting (not
 * fair)], supersede[, hold id (not fair)], will_wait (min_replicas: a replay must write, for
 * the WAIT after it), mode ("s" shared, "x" exclusive)[, wait (not fair: how long the caller
 * waits when held)][, with a hand-off id: the wait (not fair) or the id (fair)][, fair
 * join_only: the id or "", then "1"]. A non-fair call with a hand-off id sends that id as its
 * hold id. */
static lk_status build_acquire(const lk_options *opts, const lk_call *call, lk__cmd *cmd,
                               char *err)
{
    int fair = call->kind == LK_CALL_ACQUIRE_FAIR;
    int64_t lease_ms = call->lease_ms == LK_LEASE_WATCHDOG ? opts->watchdog_lease_ms
                                                           : call->lease_ms;
    int64_t idem_ttl = 0;
    lk_status st = check_names(call, err);

    if (st != LK_OK) {
        return st;
    }
    if (!lk__valid_lease(lease_ms)) {
        return lk__errf(err, LK_EINVAL, "lease must be %d..%d ms", LK_LEASE_MIN_MS,
                        LK_LEASE_MAX_MS);
    }
    if (call->floor < 0 || call->floor >= LK_TOKEN_MAX) {
        return lk__errf(err, LK_EINVAL, "floor must be 0..2^53-2");
    }
    if (call->supersede < 0 || call->supersede >= LK_TOKEN_MAX) {
        return lk__errf(err, LK_EINVAL, "supersede must be 0..2^53-2");
    }
    if (call->wait_ms < 0 || call->wait_ms > LK_WAIT_MAX_MS) {
        return lk__errf(err, LK_EINVAL, "wait must be 0..%d ms", LK_WAIT_MAX_MS);
    }
    const char *hid = call->handoff_id;
    if (hid != NULL && !valid_handoff_id(hid)) {
        return lk__errf(err, LK_EINVAL, "hand-off id must be 1..16 lowercase hex digits");
    }
    if (hid != NULL && call->shared) {
        return lk__errf(err, LK_EINVAL, "a shared acquisition takes no hand-off id");
    }
    if (hid != NULL && !fair && !call->handoff_claim &&
        (call->wait_ms < 1 || call->wait_ms > LK_WAIT_MAX_MS)) {
        return lk__errf(err, LK_EINVAL, "wait must be 1..%d ms with a hand-off id",
                        LK_WAIT_MAX_MS);
    }
    if (call->join_only && (!fair || call->shared || call->idem_key != NULL ||
                            call->handoff_claim)) {
        return lk__errf(err, LK_EINVAL,
                        "join_only is for an exclusive fair call without idempotency key");
    }
    lk__cmd_start(cmd, fair ? LK__SCRIPT_FAIR_ACQUIRE : LK__SCRIPT_ACQUIRE, call->resource);
    lk__cmd_key(cmd, "lock");
    lk__cmd_key(cmd, "fence");
    idem_args(opts, call, cmd, &idem_ttl);
    lk__cmd_key(cmd, "base");
    if (fair) {
        lk__cmd_key(cmd, "queue");
        lk__cmd_key(cmd, "qtimeout");
    }
    lk__cmd_key(cmd, "recent");
    lk__cmd_key(cmd, "readers");
    lk__cmd_key(cmd, "rwait");
    if (hid != NULL) {
        if (fair) {
            lk__cmd_key(cmd, "hq");
        } else {
            handoff_keys(cmd);
        }
    }
    lk__cmd_arg(cmd, call->owner);
    lk__cmd_num(cmd, lease_ms);
    lk__cmd_num(cmd, call->floor);
    lk__cmd_num(cmd, idem_ttl);
    if (fair) {
        lk__cmd_num(cmd, call->wait_ms);
    }
    lk__cmd_num(cmd, opts->token_key_idle_ttl_ms);
    if (!fair) {
        lk__cmd_num(cmd, call->others_waiting != 0);
    }
    lk__cmd_num(cmd, call->idem_key != NULL ? call->supersede : 0);
    if (!fair && hid != NULL) {
        lk__cmd_arg(cmd, hid);
    } else if (!fair) {
        lk__cmd_hold_id(cmd); /* built once, so every Redlock master gets the same */
    }
    lk__cmd_num(cmd, opts->min_replicas > 0);
    lk__cmd_arg(cmd, call->shared ? "s" : "x");
    if (!fair) {
        lk__cmd_num(cmd, call->wait_ms);
    }
    if (hid != NULL) {
        if (fair) {
            lk__cmd_arg(cmd, hid);
        } else {
            lk__cmd_num(cmd, call->handoff_claim ? 1 : call->wait_ms); /* 1: claim only */
        }
    }
    if (call->join_only) {
        if (hid == NULL) {
            lk__cmd_arg(cmd, "");
        }
        lk__cmd_arg(cmd, "1");
    }
    return LK_OK;
}

static lk_status decode_acquire(lk_call *call, const redisReply *reply, char *err)
{
    long long code = lk__int_at(reply, 0);
    if (code == 1 && call->join_only) {
        return lk__errf(err, LK_EREDIS, "a join was answered with a grant");
    }
    if (code == 1) {
        call->res.handed = (int)lk__int_at(reply, call->kind == LK_CALL_ACQUIRE_FAIR ? 8 : 6);
        return lk__read_acquired(err, reply, &call->res);
    }
    if (code == -2) {
        return LK_WRONG_MODE;
    }
    if (code == 0) {
        call->res.ttl_ms = lk__int_at(reply, 1);
        if (call->kind == LK_CALL_ACQUIRE_FAIR) {
            call->res.queue_pos = (int)lk__int_at(reply, 2);
            call->res.holder_token = lk__int_at(reply, 3);
            call->res.may_take = call->join_only && lk__int_at(reply, 4) == 1;
            const redisReply *h = reply->type == REDIS_REPLY_ARRAY && reply->elements > 5
                                      ? reply->element[5]
                                      : NULL;
            if (h != NULL && h->type == REDIS_REPLY_STRING && h->len > 0 &&
                h->len < sizeof call->res.first) {
                memcpy(call->res.first, h->str, h->len);
                call->res.first[h->len] = '\0';
            }
        } else {
            call->res.holder_token = lk__int_at(reply, 2);
        }
        return LK_HELD;
    }
    return lk__errf(err, LK_EIDEMPOTENCY, "%s", idem_used);
}

/* ---- release.lua, renew.lua ----------------------------------------------------------- */

/* KEYS lock, idem, readers[, fence, base, recent, queue, qtimeout, hand-off keys, rwait];
 * ARGV owner, idem_ttl, channel, undo[, hand off, floor[, to, its id, lease, idle]]
 * (release.lua) or KEYS lock, idem,
 * fence, base, recent, readers; ARGV owner, lease, idem_ttl, token_key_idle_ttl (renew.lua).
 * A release with supersede set undoes an acquisition: idem is that acquisition's key, and
 * the release itself keeps no record (idem_ttl 0). A release with handoff hands the lock
 * on. */
static lk_status build_owner_call(const lk_options *opts, const lk_call *call, lk__cmd *cmd,
                                  char *err)
{
    int renew = call->kind == LK_CALL_RENEW;
    int64_t idem_ttl = 0;
    lk_status st = check_names(call, err);

    if (st != LK_OK) {
        return st;
    }
    if (renew && !lk__valid_lease(call->lease_ms)) {
        return lk__errf(err, LK_EINVAL, "lease must be %d..%d ms", LK_LEASE_MIN_MS,
                        LK_LEASE_MAX_MS);
    }
    int64_t undo = !renew ? call->supersede : 0;
    if (undo < -1 || undo >= LK_TOKEN_MAX) {
        return lk__errf(err, LK_EINVAL, "supersede must be -1..2^53-2");
    }
    int hand = !renew && call->handoff;
    if (hand && (call->floor < 0 || call->floor >= LK_TOKEN_MAX)) {
        return lk__errf(err, LK_EINVAL, "floor must be 0..2^53-2");
    }
    const char *to = hand ? call->handoff_to : NULL;
    if (!renew && call->handoff_to != NULL &&
        (!hand || !lk_valid_owner(to) || call->handoff_id == NULL ||
         !valid_handoff_id(call->handoff_id) || !lk__valid_lease(call->lease_ms))) {
        return lk__errf(err, LK_EINVAL,
                        "a hand-off to a waiter needs handoff, a valid owner, a hand-off id "
                        "and a lease of %d..%d ms", LK_LEASE_MIN_MS, LK_LEASE_MAX_MS);
    }
    lk__cmd_start(cmd, renew ? LK__SCRIPT_RENEW : LK__SCRIPT_RELEASE, call->resource);
    lk__cmd_key(cmd, "lock");
    idem_args(opts, call, cmd, &idem_ttl);
    if (renew) {
        lk__cmd_key(cmd, "fence");
        lk__cmd_key(cmd, "base");
        lk__cmd_key(cmd, "recent");
    }
    lk__cmd_key(cmd, "readers");
    if (hand) {
        lk__cmd_key(cmd, "fence");
        lk__cmd_key(cmd, "base");
        lk__cmd_key(cmd, "recent");
        lk__cmd_key(cmd, "queue");
        lk__cmd_key(cmd, "qtimeout");
        handoff_keys(cmd);
        lk__cmd_key(cmd, "rwait");
    }
    lk__cmd_arg(cmd, call->owner);
    if (renew) {
        lk__cmd_num(cmd, call->lease_ms);
        lk__cmd_num(cmd, idem_ttl);
        lk__cmd_num(cmd, opts->token_key_idle_ttl_ms);
    } else {
        lk__cmd_num(cmd, undo != 0 ? 0 : idem_ttl);
        lk__cmd_channel(cmd);
        lk__cmd_num(cmd, undo);
        if (hand) {
            lk__cmd_num(cmd, 1);
            lk__cmd_num(cmd, call->floor);
        }
        if (to != NULL) {
            lk__cmd_arg(cmd, to);
            lk__cmd_arg(cmd, call->handoff_id);
            lk__cmd_num(cmd, call->lease_ms);
            lk__cmd_num(cmd, opts->token_key_idle_ttl_ms);
            lk__cmd_num(cmd, call->others_waiting != 0);
            lk__cmd_num(cmd, call->handoff_first != 0);
        }
    }
    return LK_OK;
}

static lk_status decode_release(lk_call *call, const redisReply *reply, char *err)
{
    long long code = lk__int_at(reply, 0);
    call->res.holds = lk__int_at(reply, 1);
    call->res.replayed = (int)lk__int_at(reply, 2);
    call->res.published = (int)lk__int_at(reply, 3);
    call->res.handed_token = lk__int_at(reply, 4);
    const redisReply *id = reply->type == REDIS_REPLY_ARRAY && reply->elements > 5
                               ? reply->element[5]
                               : NULL;
    if (id != NULL && id->type == REDIS_REPLY_STRING && id->len < sizeof call->res.handed_id) {
        memcpy(call->res.handed_id, id->str, id->len);
        call->res.handed_id[id->len] = '\0';
    }
    call->res.handed_direct = call->res.handed_token > 0 && lk__int_at(reply, 6) == 1;
    switch (code) {
    case 1:
        return LK_RELEASED;
    case 2:
        return LK_STILL_HELD;
    case 0:
        return LK_NOT_OWNER;
    default:
        return lk__errf(err, LK_EIDEMPOTENCY, "%s", idem_used);
    }
}

static lk_status decode_renew(lk_call *call, const redisReply *reply, char *err)
{
    long long code = lk__int_at(reply, 0);
    call->res.token = lk__int_at(reply, 1);
    call->res.replayed = (int)lk__int_at(reply, 2);
    /* The lease granted: on a replay, the first answer's, whatever this retry asked for. */
    call->res.ttl_ms = lk__int_at(reply, 3);
    if (code == 1) {
        if (call->res.token == 0 && lk__int_at(reply, 4) == 1) {
            return LK_RENEWED; /* a shared hold before any token was minted */
        }
        lk_status st = lk__check_token(err, call->res.token, "renew");
        return st == LK_OK ? LK_RENEWED : st;
    }
    if (code == 0) {
        call->res.holds = lk__int_at(reply, 4); /* 1: another owner holds it */
        return LK_NOT_OWNER;
    }
    return lk__errf(err, LK_EIDEMPOTENCY, "%s", idem_used);
}

/* ---- token_range.lua, status.lua, fair_cancel.lua ------------------------------------- */

/* Starts cmd on script with the keys fg:{resource}:<suffix> of the NULL-terminated list,
 * once the resource (and, with_owner, the owner) is found valid. */
static lk_status start_with_keys(const lk_call *call, int with_owner, lk__cmd *cmd, char *err,
                                 enum lk__script script, const char *const *suffix)
{
    if (!lk_valid_resource(call->resource) || (with_owner && !lk_valid_owner(call->owner))) {
        return lk__errf(err, LK_EINVAL, "%s",
                        with_owner ? "invalid resource or owner" : "invalid resource");
    }
    lk__cmd_start(cmd, script, call->resource);
    for (; *suffix != NULL; suffix++) {
        lk__cmd_key(cmd, *suffix);
    }
    return LK_OK;
}

/* KEYS fence, base, recent; ARGV token. */
static lk_status build_token_check(const lk_options *opts, const lk_call *call, lk__cmd *cmd,
                                   char *err)
{
    static const char *const keys[] = {"fence", "base", "recent", NULL};
    lk_status st = start_with_keys(call, 0, cmd, err, LK__SCRIPT_TOKEN_RANGE, keys);

    (void)opts;
    if (st != LK_OK) {
        return st;
    }
    if (call->token < 0 || call->token > LK_TOKEN_MAX) {
        return lk__errf(err, LK_EINVAL, "token must be 0..2^53-1");
    }
    lk__cmd_num(cmd, call->token);
    return LK_OK;
}

static lk_status decode_token_check(lk_call *call, const redisReply *reply, char *err)
{
    (void)err;
    call->base = lk__int_at(reply, 0);
    call->last = lk__int_at(reply, 1);
    call->recent = call->token > 0 && lk__int_at(reply, 2) == 1;
    return LK_OK;
}

/* KEYS lock, fence, queue, readers. */
static lk_status build_status(const lk_options *opts, const lk_call *call, lk__cmd *cmd,
                              char *err)
{
    static const char *const keys[] = {"lock", "fence", "queue", "readers", NULL};
    (void)opts;
    return start_with_keys(call, 0, cmd, err, LK__SCRIPT_STATUS, keys);
}

/* {locked, token, holds, pttl_ms, last_token, queued, shared, holders}; queued goes to
 * res.queue_pos, shared to res.shared. */
static lk_status decode_status(lk_call *call, const redisReply *reply, char *err)
{
    (void)err;
    call->recent = (int)lk__int_at(reply, 0);
    call->res.token = lk__int_at(reply, 1);
    call->res.holds = lk__int_at(reply, 2);
    call->res.ttl_ms = lk__int_at(reply, 3);
    call->last = lk__int_at(reply, 4);
    call->res.queue_pos = (int)lk__int_at(reply, 5);
    call->res.shared = (int)lk__int_at(reply, 6);
    call->holders = lk__int_at(reply, 7);
    return LK_OK;
}

/* KEYS lock, queue, qtimeout, rwait[, hand-off keys]; ARGV owner, channel[, hand-off id]. */
static lk_status build_fair_cancel(const lk_options *opts, const lk_call *call, lk__cmd *cmd,
                                   char *err)
{
    static const char *const keys[] = {"lock", "queue", "qtimeout", "rwait", NULL};
    lk_status st = start_with_keys(call, 1, cmd, err, LK__SCRIPT_FAIR_CANCEL, keys);

    (void)opts;
    if (st != LK_OK) {
        return st;
    }
    if (call->handoff_id != NULL && !valid_handoff_id(call->handoff_id)) {
        return lk__errf(err, LK_EINVAL, "hand-off id must be 1..16 lowercase hex digits");
    }
    if (call->handoff_id != NULL) {
        handoff_keys(cmd);
    }
    lk__cmd_arg(cmd, call->owner);
    lk__cmd_channel(cmd);
    if (call->handoff_id != NULL) {
        lk__cmd_arg(cmd, call->handoff_id);
    }
    return LK_OK;
}

/* {1} or {0}: whether it was queued does not change what the caller does next; {2, token}:
 * a grant to the waiter was never claimed, and the caller gives its hold back. */
static lk_status decode_fair_cancel(lk_call *call, const redisReply *reply, char *err)
{
    (void)err;
    if (lk__int_at(reply, 0) == 2) {
        call->res.handed_token = lk__int_at(reply, 1);
    }
    return LK_OK;
}

/* ---- force_release.lua ---------------------------------------------------------------- */

/* KEYS lock, fence, base, recent; ARGV floor, channel. */
static lk_status build_force_release(const lk_options *opts, const lk_call *call, lk__cmd *cmd,
                                     char *err)
{
    static const char *const keys[] = {"lock", "fence", "base", "recent", NULL};
    lk_status st = start_with_keys(call, 0, cmd, err, LK__SCRIPT_FORCE_RELEASE, keys);

    (void)opts;
    if (st != LK_OK) {
        return st;
    }
    if (call->floor < 0 || call->floor >= LK_TOKEN_MAX) {
        return lk__errf(err, LK_EINVAL, "floor must be 0..2^53-2");
    }
    lk__cmd_num(cmd, call->floor);
    lk__cmd_channel(cmd);
    return LK_OK;
}

/* {1, token, burned, published} or {0, 0, last, 0}. */
static lk_status decode_force_release(lk_call *call, const redisReply *reply, char *err)
{
    if (lk__int_at(reply, 0) != 1) {
        call->last = call->res.fenced_by = lk__int_at(reply, 2);
        return LK_NOT_OWNER;
    }
    call->res.token = lk__int_at(reply, 1);
    call->res.fenced_by = lk__int_at(reply, 2);
    call->res.published = (int)lk__int_at(reply, 3);
    call->last = call->res.fenced_by;
    lk_status st = lk__check_token(err, call->res.fenced_by, "force_release");
    return st == LK_OK ? LK_RELEASED : st;
}

static const lk__call_kind kinds[LK__CALL_KINDS] = {
    [LK_CALL_ACQUIRE] = {build_acquire, decode_acquire},
    [LK_CALL_ACQUIRE_FAIR] = {build_acquire, decode_acquire},
    [LK_CALL_RELEASE] = {build_owner_call, decode_release},
    [LK_CALL_RENEW] = {build_owner_call, decode_renew},
    [LK_CALL_TOKEN_CHECK] = {build_token_check, decode_token_check},
    [LK__CALL_STATUS] = {build_status, decode_status},
    [LK_CALL_FAIR_CANCEL] = {build_fair_cancel, decode_fair_cancel},
    [LK_CALL_FORCE_RELEASE] = {build_force_release, decode_force_release},
};

const lk__call_kind *lk__call_kind_of(lk_call_kind kind)
{
    return (unsigned)kind < LK__CALL_KINDS ? &kinds[kind] : NULL;
}

void lk__result_init(lk_result *res)
{
    memset(res, 0, sizeof *res);
    res->queue_pos = -1;
}

void lk__call_reset(lk_call *call)
{
    lk__result_init(&call->res);
    call->status = LK_EREDIS;
    call->err[0] = '\0';
    call->base = call->last = 0;
    call->recent = 0;
    call->holders = 0;
}

lk_status lk__read_acquired(char *err, const redisReply *reply, lk_result *res)
{
    res->token = lk__int_at(reply, 1);
    res->holds = lk__int_at(reply, 2);
    res->ttl_ms = lk__int_at(reply, 3);
    res->floor_raised = (int)lk__int_at(reply, 4);
    res->replayed = (int)lk__int_at(reply, 5);
    res->shared = lk__int_at(reply, 7) == 1;
    if (res->shared && res->token == 0) {
        return LK_ACQUIRED; /* shared before any token was minted: the current token is 0 */
    }
    return lk__check_token(err, res->token, "acquire") == LK_OK ? LK_ACQUIRED : LK_EREDIS;
}

lk_status lk__check_token(char *err, int64_t token, const char *what)
{
    /* A lock hash without its '#token' field (written by another client, or damaged) ends
     * the script's answer at the nil token: {1}. The hold may have been counted, but a token
     * that was never minted must not reach a writer; the lease ends that hold. */
    if (token < 1 || token > LK_TOKEN_MAX) {
        return lk__errf(err, LK_EREDIS, "the %s script answered without a valid token (%" PRId64
                        "): the lock's hash in Redis holds none", what, token);
    }
    return LK_OK;
}
