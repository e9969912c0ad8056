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
#include <poll.h>
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
 * on failure) and the watchdog for a watchdog lease. Returns ACQUIRED or the error. */
static lk_status acquired(lk_client *c, const lk_call *acq)
{
    lk_status st;

    if (!acq->res.replayed && c->opts.min_replicas > 0) {
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

/* Before a batch is sent: a renewal answered NOT_OWNER from here on is the batch's release,
 * not a loss. */
static void before_run(lk_client *c, lk_call *const *calls, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (watched_release(calls[i])) {
            lk__watch_releasing(c, calls[i]->resource, calls[i]->owner, 1);
        }
    }
}

/* After every call of a batch is answered: the reasons, the watches, and what follows each
 * acquisition (acquired()). */
static void after_run(lk_client *c, lk_call *const *calls, size_t n)
{
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
    before_run(c, calls, n);
    lk__run(&c->tp, &c->opts, calls, n, last_kind);
    after_run(c, calls, n);
}

void lk_call_many(lk_client *c, lk_call *const *calls, size_t n)
{
    call_many(c, calls, n, LK_CALL_TOKEN_CHECK);
}

/* ---- lk_batch: lk_call_many() in steps (locklib.h) ----------------------------------------
 * The same three steps as call_many(): before_run(), the run (lk__run() cut at the
 * transport's two halves: lk__run_build(), lk__transport_start(), the replies read as they
 * arrive, lk__transport_finish()), after_run(). What can block is kept out by refusing to
 * start: no connection to open (lk__transport_ready()), no script to load, no WAIT
 * (min_replicas), no watchdog to start for an acquisition. What happens on failure is the
 * transport's, as for a blocking batch: a dead connection found before sending means no
 * start (nothing sent, the caller runs the calls elsewhere, whose connect step reconnects);
 * a connection that fails or goes silent after sending answers the calls still waiting
 * EUNAVAILABLE and is dropped, and the breaker sees the batch as one call. */

struct lk_batch {
    lk_client *c;
    lk_call *const *calls;
    size_t n;
    lk__runner run;
    lk__inflight fl;           /* the transport's half-done batch; state NULL when answered */
    int64_t deadline;          /* lk__now_ms() after which nothing more is awaited */
};

lk_status lk_client_prepare(lk_client *c)
{
    int probe = 0;
    int64_t start = lk__now_ms();
    lk_status st;

    if (c->tp.ops != NULL || c->opts.min_replicas > 0) {
        return lk__fail(c, LK_EINVAL, "batches from an event loop need a single node or "
                                      "Sentinel, without min_replicas");
    }
    if (lk__transport_ready(&c->tp)) {
        return LK_OK; /* nothing to send: not a call, so not the breaker's */
    }
    if (lk__breaker_enter(c->tp.breaker, &probe, c->err) != 0) {
        return LK_EUNAVAILABLE;
    }
    st = lk__transport_connect(&c->tp);
    if (st == LK_OK) {
        st = lk__transport_load_all(&c->tp);
    }
    /* Slow only when it failed: a connect or load that hung. One that succeeded slowly
     * proves Redis answers (a starved thread looks slow too; a batch confirms with a PING,
     * transport.c's redis_slow). */
    lk__breaker_leave(c->tp.breaker, probe, st,
                      st != LK_OK && lk__breaker_slow(c->tp.breaker, c->opts.connect_timeout_ms,
                                                      c->opts.command_timeout_ms,
                                                      lk__now_ms() - start));
    return st;
}

/* A call that would start the watchdog when it acquires. */
static int wants_watchdog(const lk_call *call)
{
    return (call->kind == LK_CALL_ACQUIRE || call->kind == LK_CALL_ACQUIRE_FAIR) &&
           call->lease_ms == LK_LEASE_WATCHDOG;
}

int lk_batch_start(lk_client *c, lk_call *const *calls, size_t n, lk_batch **out)
{
    *out = NULL;
    if (c->in_batch || c->opts.min_replicas > 0 || !lk__transport_ready(&c->tp)) {
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (wants_watchdog(calls[i])) {
            return 0;
        }
    }
    lk_batch *b = calloc(1, sizeof *b);
    if (b == NULL) {
        return 0;
    }
    b->c = c;
    b->calls = calls;
    b->n = n;
    c->in_batch = 1;
    before_run(c, calls, n);
    lk__run_build(&b->run, &c->tp, &c->opts, calls, n, LK_CALL_TOKEN_CHECK);
    if (b->run.m > 0) {
        /* lk__transport_ready() has just checked the connection: start() must not check
         * it again (a connection that died in between would be reopened here, blocking).
         * One that died is met by the write or the read: EUNAVAILABLE, as for any batch. */
        c->tp.checked = 1;
        lk__transport_start(&c->tp, &b->fl, b->run.m, b->run.sent, lk__run_done, &b->run);
        c->tp.checked = 0;
    }
    b->deadline = lk__now_ms() + c->opts.command_timeout_ms;
    *out = b;
    return 1;
}

int lk_batch_fd(const lk_batch *b)
{
    const lk__transport *t = &b->c->tp;
    return lk__transport_waiting(t, &b->fl) ? t->ctx->fd : -1;
}

int lk_batch_timeout_ms(const lk_batch *b)
{
    int64_t left = b->deadline - lk__now_ms();
    return lk_batch_fd(b) < 0 || left <= 0 ? 0 : (int)left;
}

int lk_batch_step(lk_batch *b, int readable)
{
    lk_client *c = b->c;
    lk__transport *t = &c->tp;

    if (readable) {
        lk__transport_read_ready(t, &b->fl);
    }
    if (lk__transport_waiting(t, &b->fl)) {
        if (lk__now_ms() < b->deadline) {
            return 0;
        }
        /* The time is up, but the caller may have been busy since its poll: what has
         * arrived counts before the rest is given up on. */
        struct pollfd pfd = {t->ctx->fd, POLLIN, 0};
        if (!readable && poll(&pfd, 1, 0) > 0) {
            lk__transport_read_ready(t, &b->fl);
        }
        lk__transport_expire(t, &b->fl, c->opts.command_timeout_ms);
    }
    lk__transport_finish(t, &b->fl); /* nothing left to read; a NOSCRIPT resend blocks */
    lk__run_free(&b->run);
    after_run(c, b->calls, b->n);
    c->in_batch = 0;
    free(b);
    return 1;
}

/* One call of any kind: the status, with its reason left in c->err for lk_errstr(). */
static lk_status call_one(lk_client *c, lk_call *call, lk_result *res)
{
    lk_call *one[1] = {call};
    call_many(c, one, 1, LK__CALL_FAIR_CANCEL);
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
    lk_call call = {.kind = LK__CALL_FAIR_CANCEL, .resource = resource, .owner = owner};
    return call_one(c, &call, NULL);
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
    return LK_OK;
}

lk_status lk_last_token(lk_client *c, const char *resource, int64_t *token)
{
    lk_lock_info info;
    lk_status st = lk_lock_status(c, resource, &info);
    *token = st == LK_OK ? info.last_token : 0;
    return st;
}
