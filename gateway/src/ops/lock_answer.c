/*
 * POST /lock's answers (the operation is lock.c): every outcome of a /lock is counted and
 * answered here, exactly once per request.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/respond.h"
#include "ops/lock_attempt.h"
#include "ops/lock_internal.h"
#include "rt/log.h"
#include "rt/loops.h"
#include "rt/waiters.h"

/* Counts the outcome of a /lock request: exactly one per request. */
void gw__lock_count_acquire(gw_request *req, gw_acquire_outcome o)
{
    struct gw_lock_call *call = req->op_state;
    atomic_fetch_add(&req->rt->metrics.acquire[o], 1);
    if (call != NULL) {
        call->counted = (unsigned char)(o + 1);
    }
}

/* The ledger could not cover the token (gw__fence_answered): it must not be handed out.
 * The hold just taken was given back (gw__lock_undo_then; a replayed answer took none): 503. */
enum MHD_Result gw__lock_answer_uncovered(gw_request *req, const struct gw_lock_call *call,
                                          int64_t token)
{
    if (call->turn.cover == STORE_STALE) {
        /* Not an error of the store: the shared ledger holds this token, or a larger one,
         * for another holder (see refused_fresh_grant). */
        gw__lock_count_acquire(req, GW_ACQ_unavailable);
        return gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "backend_unavailable", NULL,
                              "the token ledger holds token %llu or a larger one for another "
                              "holder (Redis lost data or disagrees with another gateway's); "
                              "the lock was not taken, retry",
                              (unsigned long long)token);
    }
    gw__log_event(req->rt->cfg, "error", "token ledger: %s",
                  store_status_str((store_status)call->turn.cover));
    atomic_fetch_add(&req->rt->metrics.ledger_uncovered, 1);
    gw__lock_count_acquire(req, GW_ACQ_error);
    return gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "backend_unavailable", NULL,
                          "storage could not record the fencing token; the lock was not "
                          "taken");
}

static enum MHD_Result answer_acquired(gw_request *req, struct gw_lock_call *call,
                                       const lk_result *res)
{
    gw_rt *rt = req->rt;

    if (res->replayed) {
        gw__lock_count_acquire(req, GW_ACQ_replayed);
    } else if (res->holds > 1) {
        gw__lock_count_acquire(req, GW_ACQ_reentered);
    } else {
        gw__lock_count_acquire(req, GW_ACQ_acquired);
        atomic_fetch_add(&rt->metrics.locks_held, 1);
    }
    if (res->floor_raised) {
        atomic_fetch_add(&rt->metrics.floor_corrections, 1);
    }
    call->acquired = (unsigned char)!res->replayed;
    call->token = res->token;
    /* The lease is the one granted: a replay reports the first answer's, not this retry's. */
    return gw__send_json(req, MHD_HTTP_OK,
                         json_pack("{s:s, s:s, s:I, s:I, s:I, s:s}", "resource",
                                   call->turn.resource, "owner", call->owner, "token",
                                   (json_int_t)res->token, "holds", (json_int_t)res->holds,
                                   "ttl_ms",
                                   (json_int_t)(res->ttl_ms > 0 ? res->ttl_ms : call->ttl_ms),
                                   "mode", res->shared ? "shared" : "exclusive"));
}

static enum MHD_Result answer_locked(gw_request *req, const struct gw_lock_call *call,
                                     const lk_result *res)
{
    char retry[24];
    int64_t retry_ms = res->ttl_ms > 0 ? res->ttl_ms : 0;

    gw__lock_count_acquire(req, GW_ACQ_locked);
    snprintf(retry, sizeof retry, "%lld", (long long)((retry_ms + 999) / 1000));
    struct MHD_Response *resp = gw__error_response(
        "locked",
        json_pack("{s:s, s:I}", "resource", call->turn.resource, "retry_after_ms",
                  (json_int_t)retry_ms),
        "%s is held by another owner", call->turn.resource);
    if (resp != NULL) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, retry);
    }
    return gw__queue(req, MHD_HTTP_CONFLICT, resp);
}

/* Leaves the fair queue and the hand-off keys when the wait ends without the lock, so the
 * waiters behind it do not wait for its deadline, and gives back a hand-off grant made to it
 * meanwhile (an errand: see gw__lock_send_errand). A failure (Redis gone) leaves the entry
 * to expire then, and such a grant to end with its lease. */
void gw__lock_leave_fair_queue(gw_request *req, struct gw_lock_call *call)
{
    if (!call->fair_queued && !call->maybe_granted) {
        return;
    }
    gw__lock_send_errand(req->rt, call, LK_CALL_FAIR_CANCEL, 0, 0);
    call->fair_queued = 0;
    call->maybe_granted = 0;
}

enum MHD_Result gw__lock_answer_stopped(gw_request *req, struct gw_lock_call *call)
{
    gw__wait_end(req->rt->waitq, &call->waiter, -1, 0);
    gw__lock_leave_fair_queue(req, call);
    gw__lock_count_acquire(req, GW_ACQ_shutting_down);
    return gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "shutting_down", NULL,
                          "the gateway is shutting down; retry on another instance");
}

/* The attempt found the lock held and --max-waiters are waiting already (waiters.c, "The
 * cap"), or this client address's waiters have their share of its connections
 * (over_share): 503 with a Retry-After of the holder's remaining lease (at least 1 s), when
 * the lock may be free and the waiters fewer. The connection stays open: a client's pool
 * sends its next request, one that does not wait, on it. */
int gw__lock_client_waiters(const gw_rt *rt)
{
    /* An eighth of --max-waiters stays for the other clients (at least one waiter each). */
    int n = rt->cfg->max_waiters;
    return n - n / 8 > 0 ? n - n / 8 : 1;
}

enum MHD_Result gw__lock_answer_too_many_waiters(gw_request *req, struct gw_lock_call *call,
                                                 const lk_result *res)
{
    char retry[24];
    int64_t retry_ms = res->ttl_ms > 1000 ? res->ttl_ms : 1000;
    struct MHD_Response *resp = NULL;

    /* The waiters parked here wait for the lease this answer saw (it may be the answer they
     * parked counting on: rt/waiters.c, "The line"). */
    gw__wait_end(req->rt->waitq, &call->waiter, res->ttl_ms >= 0 ? res->ttl_ms : -1,
                 res->holder_token);
    gw__lock_leave_fair_queue(req, call);
    gw__lock_count_acquire(req, GW_ACQ_unavailable);
    snprintf(retry, sizeof retry, "%lld", (long long)((retry_ms + 999) / 1000));
    if (call->over_client) {
        int share = gw__lock_client_waiters(req->rt);
        resp = gw__error_response(
            "too_many_waiters",
            json_pack("{s:s, s:I, s:i}", "resource", call->turn.resource, "retry_after_ms",
                      (json_int_t)retry_ms, "max_waiters_per_client", share),
            "%s is held by another owner, and %d requests of client '%s' are waiting already "
            "(a client's share of --max-waiters)",
            call->turn.resource, share, req->client != NULL ? req->client->name : "");
    } else if (call->over_share) {
        unsigned int share = gw__loops_waiter_share(req->rt->loops);
        resp = gw__error_response(
            "too_many_waiters",
            json_pack("{s:s, s:I, s:I}", "resource", call->turn.resource, "retry_after_ms",
                      (json_int_t)retry_ms, "max_waiters_per_address", (json_int_t)share),
            "%s is held by another owner, and %u requests of this client address are waiting "
            "already (its share of --max-connections-per-address)",
            call->turn.resource, share);
    } else {
        resp = gw__error_response(
            "too_many_waiters",
            json_pack("{s:s, s:I, s:i}", "resource", call->turn.resource, "retry_after_ms",
                      (json_int_t)retry_ms, "max_waiters", req->rt->cfg->max_waiters),
            "%s is held by another owner, and %d requests are waiting already (--max-waiters)",
            call->turn.resource, req->rt->cfg->max_waiters);
    }
    if (resp != NULL) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, retry);
    }
    return gw__queue(req, MHD_HTTP_SERVICE_UNAVAILABLE, resp);
}

/* What an attempt answered, when the wait is over. */
enum MHD_Result gw__lock_answer_attempt(gw_request *req, struct gw_lock_call *call,
                                        lk_status st, const lk_result *res, const char *why)
{
    gw_rt *rt = req->rt;

    int64_t held_ms = -1, holder_token = 0;
    if (st == LK_ACQUIRED) {
        held_ms = res->ttl_ms > 0 ? res->ttl_ms : call->ttl_ms;
    } else if (st == LK_HELD && call->turn.refused == ATTEMPT_ASKED) {
        /* The holder Redis found, its time left (on Redlock the shortest of the majority's;
         * for a fair attempt at most the queue's retry hint, when the lock is free but
         * another waiter is first): a timer that fires early costs one attempt. */
        held_ms = res->ttl_ms;
        holder_token = res->holder_token;
    }
    gw__wait_end(rt->waitq, &call->waiter, held_ms, holder_token);
    if (st != LK_ACQUIRED) {
        gw__lock_leave_fair_queue(req, call);
    }
    if (call->turn.refused == ATTEMPT_STORE_FAILED) {
        gw__lock_count_acquire(req, GW_ACQ_unavailable);
        return gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "backend_unavailable", NULL,
                              "storage could not be read to fence the token");
    }
    if (call->turn.refused == ATTEMPT_NOMEM) {
        gw__lock_count_acquire(req, GW_ACQ_error);
        return gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "backend_unavailable", NULL,
                              "the gateway is out of memory; the lock was not taken");
    }
    if (call->turn.refused == ATTEMPT_STRIPE_BUSY) {
        gw__lock_count_acquire(req, GW_ACQ_unavailable);
        return gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "backend_unavailable", NULL,
                              "the lock service (Redis) is answering slowly and earlier "
                              "attempts on this resource are still running; try again");
    }
    if (st == LK_ACQUIRED) {
        if (call->turn.cover != STORE_OK) {
            return res->replayed ? gw__lock_answer_uncovered(req, call, res->token)
                                 : gw__lock_undo_then(req, call, res->token, THEN_ANSWER_UNCOVERED);
        }
        /* Every attempt is suspended while it waits for its stripe and for Redis, and MHD
         * does not watch a suspended connection: its client may have hung up meanwhile. An
         * answer written to a closed socket may still complete "OK", so look now. An end of
         * file may be a half-close, whose client still reads: it is answered, and
         * lock_completed() looks again once the answer is written. */
        gw_peer peer = res->replayed ? GW_PEER_OPEN : gw__conn_peer(req->conn);
        if (peer == GW_PEER_GONE) {
            /* The client hung up while the lock was taken: nobody will use this hold. The
             * connection closes once it is given back, so a retry of the client's meets
             * no late release. */
            gw__lock_count_acquire(req, GW_ACQ_abandoned);
            return gw__lock_undo_then(req, call, res->token, THEN_ABANDON);
        }
        if (res->shared && call->marked && !res->replayed) {
            /* Others wait here: a parked shared request may join now. The first parked
             * waiter is handed an attempt (lock_attempt.c, "Hand-offs") with no release
             * behind it, or woken when it is a set's; a shared one granted so hands on
             * again, so the shared requests a release woke come in one after another, and
             * the chain stops at the first waiter that is not granted (an exclusive one,
             * which parks again). */
            gw__lock_hand_on(rt, call->turn.resource);
        }
        enum MHD_Result answered = answer_acquired(req, call, res);
        if (call->acquired && peer == GW_PEER_EOF) {
            call->acquired = ACQUIRED_AFTER_EOF;
        }
        return answered;
    }
    if (st == LK_WRONG_MODE) {
        gw__lock_count_acquire(req, GW_ACQ_invalid);
        return gw__send_error(req, MHD_HTTP_CONFLICT, "mode_mismatch",
                              json_pack("{s:s, s:s}", "resource", call->turn.resource, "mode",
                                        call->shared ? "shared" : "exclusive"),
                              "this owner holds %s in the other mode; release it first",
                              call->turn.resource);
    }
    if (st == LK_HELD) {
        return call->over_share ? gw__lock_answer_too_many_waiters(req, call, res)
                                : answer_locked(req, call, res);
    }
    gw__lock_count_acquire(req, st == LK_EUNAVAILABLE     ? GW_ACQ_unavailable
                       : st == LK_EIDEMPOTENCY   ? GW_ACQ_idempotency_conflict
                       : st == LK_EINVAL         ? GW_ACQ_invalid
                                                 : GW_ACQ_error);
    return gw__send_lk_error(req, why, st);
}
