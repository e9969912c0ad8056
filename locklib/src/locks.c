/*
 * The public calls: lk_acquire, lk_acquire_fair, lk_release, lk_renew, lk_token_check and
 * the rest, all of them lk_call_many() with n = 1, and lk_call_many() itself.
 *
 * A call's work happens in four steps: its kind builds the script call (calls.c); the
 * transport carries it (transport.c); its kind decodes the reply; then this file does what
 * needs the handle itself, after the whole batch has been read: the watchdog's bookkeeping
 * around a release, and after an acquisition WAIT for min_replicas (undone on failure) and
 * the watchdog (undone when it cannot start).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "run_internal.h"
#include "watchdog_internal.h"

/* Records a status and, for a status that is not an outcome, the client's reason. */
static void settle(lk_client *c, lk_call *call, lk_status st)
{
    call->status = st;
    if (st >= LK_EINVAL) {
        snprintf(call->err, sizeof call->err, "%s", c->err);
    }
}

static lk_status call_one(lk_client *c, lk_call *call, lk_result *res);

/* Releases the hold the acquisition acq took, and drops its idempotency record, so that a
 * retry with its key acts afresh instead of replaying a grant that no longer stands
 * (release.lua, ARGV[4]). */
static lk_status undo_acquisition(lk_client *c, const lk_call *acq)
{
    lk_call undo = {.kind = LK_CALL_RELEASE, .resource = acq->resource, .owner = acq->owner,
                    .idem_key = acq->idem_key, .supersede = acq->res.token};
    return call_one(c, &undo, NULL);
}

/* Undoes one hold after too few replicas acknowledged it. Returns EREPLICAS when the hold
 * is gone (released, or the lease already ran out), or EUNAVAILABLE when the rollback itself
 * failed: the lock may then still be held until its lease runs out, and the message says
 * that the outcome is unknown. */
static lk_status roll_back(lk_client *c, const lk_call *acq, long long acked)
{
    char why[sizeof c->err];
    lk_status st = undo_acquisition(c, acq);

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
 * Returns OK, EREPLICAS (rolled back) or EUNAVAILABLE (the rollback failed, or the
 * connection was gone before WAIT). */
static lk_status check_replicas(lk_client *c, const lk_call *acq)
{
    long long acked = 0;
    lk_status st = lk__transport_wait(&c->tp, c->opts.min_replicas, c->opts.replica_timeout_ms,
                                      &acked);
    if (st != LK_OK) {
        return st;
    }
    if (acked >= c->opts.min_replicas) {
        return LK_OK;
    }
    return roll_back(c, acq, acked);
}

/* What follows a successful acquisition script (acq): WAIT for min_replicas (rolled back
 * on failure) and the watchdog for a watchdog lease. Returns ACQUIRED or the error.
 *
 * A replayed acquisition WAITs too: its first call may never have had its WAIT (the
 * client died after the script, the connection broke before WAIT, or the WAIT failed and
 * so did the rollback, which leaves the record), and ACQUIRED with min_replicas means that
 * many replicas have the grant. The replay's script wrote to the record again
 * (acquire_replay in lua/prelude/mint.lua), so this connection's WAIT covers the first
 * call's writes; too few acknowledgements undo the hold as for a first call, and drop the
 * record, so the key's next retry acts afresh. */
static lk_status acquired(lk_client *c, const lk_call *acq)
{
    lk_status st;

    if (c->opts.min_replicas > 0) {
        st = check_replicas(c, acq);
        if (st != LK_OK) {
            return st;
        }
    }
    if (acq->lease_ms == LK_LEASE_WATCHDOG) {
        st = lk__watch_add(c, acq->resource, acq->owner);
        if (st != LK_OK) {
            /* Without a watchdog the lock would silently expire under its holder. */
            undo_acquisition(c, acq);
            return lk__fail(c, st, "cannot start the watchdog");
        }
    }
    return LK_ACQUIRED;
}

/* A release whose watch, if any, the watchdog must know about: one with valid names. */
static int watched_release(const lk_call *call)
{
    return call->kind == LK_CALL_RELEASE && lk_valid_resource(call->resource) &&
           lk_valid_owner(call->owner);
}

/* After a release: the watch ends when the lock is gone, else renewals resume. */
static void release_settled(lk_client *c, const lk_call *call)
{
    /* Released for real, or not held (expired, deleted, or reported lost): nothing is left
     * to renew. A replayed release already happened: the lock may have been taken again
     * since, with a watch of its own, which this must not remove. */
    if ((call->status == LK_RELEASED && !call->res.replayed) ||
        call->status == LK_NOT_OWNER) {
        lk__watch_remove(c, call->resource, call->owner);
    } else {
        lk__watch_releasing(c, call->resource, call->owner, 0);
    }
}

/*
 * Claims answered by their release (lk_call.claim_from). A release that hands the lock to
 * the caller's own waiter (handoff_to) mints that waiter's token, records its hold with its
 * lease and, with others_waiting, marks it wanted: all the waiter's claim would do, or
 * answer, is in the release's reply. So the claim is held back until the batch is
 * answered, and sent only when the release did not grant its waiter directly (it freed
 * nothing, granted a waiter queued in Redis, was replayed, or was refused): then after the
 * batch, in a second round, where it finds whatever the release left. A hand-off costs one
 * script instead of two. With min_replicas the claim's WAIT is what covers the grant (a
 * release WAITs for nothing), so it is sent as any call.
 */

/* Whether calls[i] is a claim to hold back: its release is earlier in the batch and the
 * two agree on the resource, the waiter and its lease. */
static int held_back(const lk_client *c, lk_call *const *calls, size_t i)
{
    const lk_call *call = calls[i];
    const lk_call *rel = call->claim_from;
    size_t k = 0;

    if (rel == NULL || c->opts.min_replicas > 0 ||
        (call->kind != LK_CALL_ACQUIRE && call->kind != LK_CALL_ACQUIRE_FAIR) ||
        call->shared || call->join_only || call->idem_key != NULL || call->handoff_id == NULL) {
        return 0;
    }
    while (k < i && calls[k] != rel) {
        k++;
    }
    /* A fair waiter only as the first queued: granted past the queue, it would stay in
     * the fair queue, which only its own call leaves. */
    return k < i && rel->kind == LK_CALL_RELEASE && rel->handoff && rel->handoff_to != NULL &&
           (call->kind != LK_CALL_ACQUIRE_FAIR || rel->handoff_first) &&
           rel->handoff_id != NULL && call->resource != NULL && rel->resource != NULL &&
           call->owner != NULL && strcmp(rel->resource, call->resource) == 0 &&
           strcmp(rel->handoff_to, call->owner) == 0 &&
           strcmp(rel->handoff_id, call->handoff_id) == 0 && rel->lease_ms == call->lease_ms;
}

/* Answers a held-back claim from its release, answered by now. Returns 0 when the claim
 * must be sent instead. */
static int answer_from_release(lk_call *call)
{
    const lk_call *rel = call->claim_from;

    lk__call_reset(call);
    if (rel->status == LK_RELEASED && rel->res.handed_direct && !rel->res.replayed &&
        strcmp(rel->res.handed_id, call->handoff_id) == 0 &&
        lk__check_token(call->err, rel->res.handed_token, "release") == LK_OK) {
        call->status = LK_ACQUIRED;
        call->res.token = rel->res.handed_token;
        call->res.holds = 1;
        call->res.ttl_ms = rel->lease_ms;
        call->res.handed = 1;
        return 1;
    }
    if (rel->status == LK_EUNAVAILABLE) {
        /* The connection failed under the release, or Redis refused it for now (LOADING,
         * BUSY, a read-only replica...): no second round now (the next batch reconnects),
         * and whether the grant was made is as unknown as if the claim had gone in the
         * same batch, which Redis would have refused alike. */
        call->status = LK_EUNAVAILABLE;
        snprintf(call->err, sizeof call->err, "%s", rel->err);
        return 1;
    }
    return 0;
}

/* lk__run() of calls[0..n) with nheld of them held back for their releases: the others
 * first, then those not answered by their release. That second round is one more round
 * trip for the whole batch, taken only when a release did not grant its named waiter (it
 * granted a waiter queued in Redis, freed nothing, or was refused): rare on a hot lock,
 * whose releases grant the waiter they name. Out of memory, all together, in order:
 * each claim then finds its grant in Redis. */
static void run_with_claims(lk_client *c, lk_call *const *calls, size_t n, size_t nheld,
                            lk_call_kind last_kind)
{
    lk_call **first = malloc(n * sizeof *first);
    lk_call **held = malloc(nheld * sizeof *held);
    size_t nfirst = 0, nsend = 0, h = 0;

    if (first == NULL || held == NULL) {
        free(first);
        free(held);
        lk__run(&c->tp, &c->opts, calls, n, last_kind);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (h < nheld && held_back(c, calls, i)) {
            held[h++] = calls[i];
        } else {
            first[nfirst++] = calls[i];
        }
    }
    lk__run(&c->tp, &c->opts, first, nfirst, last_kind);
    for (size_t i = 0; i < h; i++) {
        if (!answer_from_release(held[i])) {
            held[nsend++] = held[i];
        }
    }
    if (nsend > 0) {
        lk__run(&c->tp, &c->opts, held, nsend, last_kind);
    }
    free(first);
    free(held);
}

/* lk_call_many() for kinds up to last_kind. */
static void call_many(lk_client *c, lk_call *const *calls, size_t n, lk_call_kind last_kind)
{
    if (c->opts.min_replicas > 0 && n > 1) {
        /* Each acquisition's WAIT must run on the connection that carried it, before any
         * later call of the batch can drop it, and a rollback's reconnect must not give a
         * later call a WAIT with nothing to wait for: with replicas, one call at a time. */
        for (size_t i = 0; i < n; i++) {
            call_many(c, &calls[i], 1, last_kind);
        }
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (watched_release(calls[i])) {
            /* A renewal answered NOT_OWNER from here on is this release, not a loss. */
            lk__watch_releasing(c, calls[i]->resource, calls[i]->owner, 1);
        }
    }
    size_t nheld = 0;
    for (size_t i = 0; i < n; i++) {
        nheld += held_back(c, calls, i);
    }
    if (nheld > 0) {
        run_with_claims(c, calls, n, nheld, last_kind);
    } else {
        lk__run(&c->tp, &c->opts, calls, n, last_kind);
    }
    for (size_t i = 0; i < n; i++) {
        lk_call *call = calls[i];
        if (call->status >= LK_EINVAL) {
            snprintf(c->err, sizeof c->err, "%s", call->err);
        }
        if (watched_release(call)) {
            release_settled(c, call);
        }
        if (call->status == LK_ACQUIRED) {
            settle(c, call, acquired(c, call));
        }
    }
}

void lk_call_many(lk_client *c, lk_call *const *calls, size_t n)
{
    call_many(c, calls, n, LK_CALL_FORCE_RELEASE);
}

/* One call of any kind: the status, with its reason left in c->err for lk_errstr(). */
static lk_status call_one(lk_client *c, lk_call *call, lk_result *res)
{
    lk_call *one[1] = {call};
    call_many(c, one, 1, LK__CALL_STATUS);
    if (res != NULL) {
        *res = call->res;
    }
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

/* The fair queue lives next to the lock, with the same hash tag: fg:{R}:queue lists waiting
 * owners in arrival order and fg:{R}:qtimeout holds each one's deadline. fair_acquire.lua
 * explains the rules. Waiting itself is the caller's business (the gateway parks its
 * waiters), so nothing here blocks. */
lk_status lk_fair_cancel(lk_client *c, const char *resource, const char *owner)
{
    lk_call call = {.kind = LK_CALL_FAIR_CANCEL, .resource = resource, .owner = owner};
    return call_one(c, &call, NULL);
}

lk_status lk_release(lk_client *c, const char *resource, const char *owner,
                     const char *idem_key, lk_result *res)
{
    lk_call call = {.kind = LK_CALL_RELEASE, .resource = resource, .owner = owner,
                    .idem_key = idem_key};
    return call_one(c, &call, res);
}

lk_status lk_force_release(lk_client *c, const char *resource, int64_t floor, lk_result *res)
{
    lk_call call = {.kind = LK_CALL_FORCE_RELEASE, .resource = resource, .floor = floor};
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
    lk_status st = call_one(c, &call, NULL);
    *base = call.base;
    *last = call.last;
    *recent = call.recent;
    return st;
}

lk_status lk_token_range(lk_client *c, const char *resource, int64_t *base, int64_t *last)
{
    int recent = 0;
    return lk_token_check(c, resource, 0, base, last, &recent);
}

lk_status lk_lock_status(lk_client *c, const char *resource, lk_lock_info *info)
{
    lk_call call = {.kind = LK__CALL_STATUS, .resource = resource};
    lk_status st = call_one(c, &call, NULL);

    memset(info, 0, sizeof *info);
    if (st != LK_OK) {
        return st;
    }
    info->locked = call.recent;
    info->token = call.res.token;
    info->holds = call.res.holds;
    info->ttl_ms = call.res.ttl_ms;
    info->last_token = call.last;
    info->shared = call.res.shared;
    info->holders = call.holders;
    return LK_OK;
}

lk_status lk_last_token(lk_client *c, const char *resource, int64_t *token)
{
    lk_lock_info info;
    lk_status st = lk_lock_status(c, resource, &info);
    *token = st == LK_OK ? info.last_token : 0;
    return st;
}
