/*
 * POST /lock (GET /locks/{resource}: lock_status.c; POST /unlock and /renew: owner_calls.c).
 *
 * The operation, and what resumes it (each stage is lock_stage, in the call's state):
 *   start       parse the body, copy what the wait needs, start an attempt -> ATTEMPTING;
 *   ATTEMPTING  resumed by the pipeline when the attempt is answered (lock_answered):
 *               answer, park while the lock is held and time is left -> PARKED, or try
 *               again at once;
 *   PARKED      resumed by waiters.c (lock_woken): act on why it was woken, usually by
 *               attempting again -> ATTEMPTING;
 *   completed   end the wait, give back a hold whose answer did not reach the client.
 *
 * Fencing is fence.c's: an attempt takes its resource's turn and floor there, and when its
 * answer is in (on the pipeline thread) the fence makes the ledger cover the token (a shared
 * ledger's grant commits later, on the storage writer), counts it and passes the turn on.
 * If the cover or grant failed the hold is released again and the client gets 503.
 *
 * A 503 does not always mean "not taken": when Redis accepted the acquire script but its
 * answer came too late (a stalled Redis, a dropped connection), the lock may be held by the
 * owner the client sent or the one generated for it. Nobody learned a generated owner, so
 * that hold simply expires with its lease; a client that sent its own owner and retries
 * re-enters it (holds + 1, same token). Sending an Idempotency-Key makes the retry replay the
 * first answer instead.
 *
 * The floor is computed again before every attempt, and the attempts of one stripe of
 * resources run one at a time until the new token is counted (fence.c, "Concurrent
 * acquisitions").
 *
 * Waiting (wait_ms > 0). An attempt that finds the lock held parks the request in
 * waiters.c: the connection is suspended and no thread is held. A release message, the
 * holder's lease running out, the waiter's deadline, its client hanging up or shutdown
 * resume it, and the operation runs again (lock_woken): it attempts again and parks again
 * (keeping its place in the queue), or answers. The deadline's wake makes one last attempt,
 * then 409.
 * "fair": true uses the FIFO queue in Redis (lk_acquire_fair); a fair waiter that gives up,
 * hangs up or is stopped leaves the queue (lk_fair_cancel), and one that vanished without
 * leaving (a killed gateway) is dropped from it by Redis at its deadline. Non-fair requests
 * may barge past the fair queue, as Java's tryLock does on a fair lock.
 *
 * A client that hangs up never keeps a lock: a parked waiter is dropped when its socket
 * reports the hang-up; a woken one looks at its socket before its attempt, and every
 * attempt looks again when its answer is in (it was suspended meanwhile) and gives a fresh
 * hold back if the client is gone; and if the answer cannot be delivered
 * (MHD reports an error at completion), lock_completed() gives the hold back. A client
 * that closes after the answer was written got its lock, as one that crashed after reading
 * it: the lease ends it. A client that closed its sending side (end of file) may have only
 * half-closed and still read (HTTP/1.1 allows it): it is answered, and if the answer drew
 * a reset (it had closed for good) the hold is given back at completion; a parked one
 * cannot wait (its end of file cannot be told from a hang-up) and is answered 409.
 *
 * Owners are capabilities: whoever knows one can renew, release or re-enter the lock. They
 * appear only in the /lock answer to the caller who asked, never in a log line, /locks or
 * /metrics.
 */
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/args.h"
#include "http/respond.h"
#include "ops/lock.h"
#include "ops/lock_internal.h"
#include "ops/lock_set.h"
#include "ops/session_lock.h"
#include "rt/loops.h"
#include "rt/util.h"
#include "rt/waiters.h"

/*
 * Known holders. In a queue of waiters on one lock, every holder's release is followed by
 * attempts: the one waiter it wakes or hands the lock to, and each new waiting /lock (the
 * holder that just released often asks again at once). Asking Redis whether the lock is
 * held is a script call that holds the resource's stripe (core/fence.c) for a round trip,
 * so the hand-off behind the next release would queue behind it and go out alone. So when
 * this gateway just granted the lock to another owner in an attempt that marked it wanted
 * (so its release publishes a message naming its token), and since then no message
 * released that token or a later one, and no expiry timer or resubscription moved the
 * resource's epoch (rt/waiters.c), a new waiting /lock parks at once, as if its attempt had
 * answered HELD with that lease: what it would have been answered.
 * What may differ, and why it is safe:
 *   - The holder released through another gateway, or its hold was given back (also a
 *     grant the ledger could not cover or refused: the holder is known from Redis's
 *     answer, before the ledger's): the release publishes (the lock was marked wanted) and
 *     its message voids what is known; a request parked before it came is woken by it, or
 *     retried at once (gw__wait_park).
 *   - The lease ran out, or Redis lost the lock (a failover, a restart): nothing publishes;
 *     the expiry timer, set from the lease, wakes a waiter then, as it does for waiters
 *     parked on a HELD answer. A new request parks until then instead of taking the freed
 *     lock at once: at most one lease, only after Redis lost data (or, on Redlock, when a
 *     release was published only by masters whose write-back of the grant's token failed,
 *     so its message names a smaller one), and only while others wait.
 *   - The subscriber is down: nothing is known (messages may be lost); every request asks.
 *   - The request's owner is the known holder (a re-entry), or it carries an
 *     Idempotency-Key (a replay), or it is fair (it must join the queue in Redis): it asks.
 */
static int park_unasked(gw_request *req, struct gw_lock_call *call, int64_t held_ms,
                        int64_t token, enum MHD_Result *result)
{
    gw_rt *rt = req->rt;
    lk_result res = {.ttl_ms = held_ms, .queue_pos = -1};

    call->stage = LOCK_PARKED;
    /* As if Redis had answered HELD with the known holder's token: a release message of an
     * older hold since this request began (a hand-off's, say) does not send it to Redis. */
    switch (gw__wait_park(rt->waitq, &call->waiter, req->conn, call->deadline_ms, held_ms,
                          token, -1)) {
    case GW_PARKED:
        atomic_fetch_add(&rt->metrics.parked_unasked, 1);
        *result = MHD_YES;
        return 1;
    case GW_PARK_SHUTDOWN:
        *result = gw__lock_answer_stopped(req, call);
        return 1;
    case GW_PARK_FULL:
        *result = gw__lock_answer_too_many_waiters(req, call, &res);
        return 1;
    case GW_PARK_RETRY:
    case GW_PARK_NOMEM:
        break;
    }
    call->stage = LOCK_ATTEMPTING;
    return 0; /* ask Redis after all */
}

/* A hand-off id (16 hex digits) for a new wait, unique in this process: splitmix64, a
 * bijection, of a counter offset by a random seed drawn once, so two processes' ids differ
 * too. Not a secret: it names the grant's hold in a published message, next to its owner,
 * which alone is the capability, so it needs no system call of its own (lk_random_id's
 * getrandom) on a loop thread for every waiting /lock. */
static void new_handoff_id(char out[17])
{
    static atomic_uint_fast64_t counter;
    static atomic_uint_fast64_t seed;
    uint64_t s = atomic_load(&seed);
    if (s == 0) {
        char rnd[33];
        lk_random_id(rnd);
        s = strtoull(rnd + 16, NULL, 16) | 1u;
        uint_fast64_t none = 0;
        if (!atomic_compare_exchange_strong(&seed, &none, s)) {
            s = none;
        }
    }
    uint64_t z = s + atomic_fetch_add(&counter, 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    snprintf(out, 17, "%016llx", (unsigned long long)z);
}

/* Starts an attempt of the lock through the pipeline: suspends the connection and returns;
 * lock_answered() goes on when the answer is in. Called on the first pass, on every wake,
 * and again when a release came during an attempt. */
static enum MHD_Result lock_attempt(gw_request *req, struct gw_lock_call *call)
{
    gw_rt *rt = req->rt;

    call->waiting = (unsigned char)(call->wants_wait && !call->last);
    call->waiter.fair = call->fair;
    call->waiter.owner = call->owner;
    if (call->waiting && gw__wait_begin(rt->waitq, &call->waiter, call->turn.resource) != 0) {
        call->waiting = 0;
    }
    /* Not for a shared request: a known holder may be a shared one it would join. */
    if (call->waiting && !call->fair && !call->shared && call->idem_key[0] == '\0' &&
        call->supersede == 0) {
        int64_t token = 0;
        int64_t held_ms = gw__wait_known_held(rt->waitq, &call->waiter, call->owner, &token);
        if (held_ms > 0 && call->deadline_ms > gw__now_ms()) {
            enum MHD_Result parked = 0;
            if (park_unasked(req, call, held_ms, token, &parked)) {
                return parked;
            }
        } else if (call->deadline_ms > gw__now_ms() &&
                   gw__wait_line_busy(rt->waitq, &call->waiter)) {
            /* Another waiter's attempt waits in the stripe's line: it asks Redis after this
             * request came, and what it is answered wakes a parked waiter (rt/waiters.c,
             * "The line"). Asking too would only lengthen the line. */
            enum MHD_Result parked = 0;
            if (park_unasked(req, call, -1, 0, &parked)) {
                return parked;
            }
        }
    }
    MHD_suspend_connection(req->conn);
    (void)gw__lock_attempt_send(rt, call, req->conn);
    return MHD_YES;
}

/* A request that waited restarts MHD's idle timer: the wait counted as idle time. */
static void restart_idle_timer(struct MHD_Connection *conn)
{
    MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT,
                              (unsigned int)GW_CONN_TIMEOUT_S);
}

/* The shared ledger refused the token of a fresh hold (STALE: another gateway granted this
 * token or a larger one, after its Redis lost data or in a split brain; fence.c). Gives the
 * hold back and returns 1 when the request should attempt again above the ledger's highest
 * (at most GRANT_TRIES times, each counted as a floor correction); 0 to answer 503. A
 * re-entry or a replay repeats the refused token whatever the floor: those are answered 503.
 * The caller gives the hold back before the next attempt (gw__lock_undo_then). A keyed request's
 * fresh hold left an idempotency record of the refused token, which the next attempt would
 * replay. The give-back drops it with the hold; should that release fail
 * (Redis gone), the next attempt supersedes it (lk_call.supersede drops exactly that record
 * in the acquire script), so it mints afresh above the ledger and records the new answer,
 * which a retry of the key then replays. A record that already answers another token (a
 * concurrent call of the key superseded it first) is replayed as usual. */
#define GRANT_TRIES 3
static int refused_fresh_grant(gw_request *req, struct gw_lock_call *call, const lk_result *res)
{
    if (call->turn.cover != STORE_STALE || res->replayed || res->holds > 1 ||
        call->grant_tries >= GRANT_TRIES) {
        return 0;
    }
    call->grant_tries++;
    call->turn.min_floor = (int64_t)call->turn.granted;
    call->supersede = call->idem_key[0] != '\0' ? res->token : 0;
    atomic_fetch_add(&req->rt->metrics.floor_corrections, 1);
    return 1;
}

/* ATTEMPTING, resumed once the attempt is answered: answer it, or park the request while the
 * lock is held and wait time is left (see waiters.c). */
static enum MHD_Result lock_answered(gw_request *req, struct gw_lock_call *call)
{
    gw_rt *rt = req->rt;
    gw_attempt *at = call->attempt;
    lk_result res;
    lk_status st;
    char why[sizeof at->call.err];

    call->attempt = NULL;
    if (call->handed_off) {
        call->handed_off = 0;
        call->waiter.state = GW_WAITER_IDLE;
        restart_idle_timer(req->conn); /* as lock_woken() does, on this thread */
    }
    memset(&res, 0, sizeof res);
    why[0] = '\0';
    if (at != NULL) {
        st = at->call.status;
        if (st == LK_ACQUIRED) {
            call->fair_queued = 0; /* the script took it off the queue */
            call->maybe_granted = 0; /* it holds the lock: a grant, if any, is this hold */
        }
        res = at->call.res;
        call->marked = (unsigned char)at->call.others_waiting;
        snprintf(why, sizeof why, "%s", at->call.err);
        gw__lock_attempt_free(at);
        gw__note_redis(rt, st);
    } else {
        st = call->turn.refused == ATTEMPT_STRIPE_BUSY ? LK_EUNAVAILABLE : LK_EREDIS;
    }
    if (call->line_sent && st != LK_ACQUIRED && st != LK_HELD) {
        gw__wait_pass_wake(rt->waitq, &call->waiter); /* "The line": nothing was learned */
    }
    call->line_sent = 0;
    if (st == LK_HELD && res.may_take) {
        return lock_attempt(req, call); /* a join found the lock the owner's to take */
    }
    if (st == LK_HELD && call->fair && res.holder_token == 0) {
        gw__wait_wake_head(rt->waitq, &call->waiter, res.first); /* "Fair waiters in order" */
    }
    if (st == LK_ACQUIRED && refused_fresh_grant(req, call, &res)) {
        return gw__lock_undo_then(req, call, res.token, THEN_ATTEMPT);
    }
    if (st == LK_ACQUIRED && call->session != NULL) {
        return gw__session_lock_add(req, call, &res); /* recorded in it, then answered */
    }
    int64_t left = call->deadline_ms - gw__now_ms();
    if (st != LK_HELD || !call->waiting || left <= 0) {
        return gw__lock_answer_attempt(req, call, st, &res, why);
    }
    call->stage = LOCK_PARKED; /* what resumes it now, unless it is answered below */
    switch (gw__wait_park(rt->waitq, &call->waiter, req->conn, call->deadline_ms,
                          res.ttl_ms >= 0 ? res.ttl_ms : -1, res.holder_token,
                          call->shared ? -1 : res.queue_pos)) {
    case GW_PARKED:
        return MHD_YES;
    case GW_PARK_RETRY:
        return lock_attempt(req, call);
    case GW_PARK_SHUTDOWN:
        return gw__lock_answer_stopped(req, call);
    case GW_PARK_FULL:
        return gw__lock_answer_too_many_waiters(req, call, &res);
    case GW_PARK_NOMEM:
        break;
    }
    return gw__lock_answer_attempt(req, call, st, &res, why);
}

/* PARKED, resumed by waiters.c: act on why it was woken. */
static enum MHD_Result lock_woken(gw_request *req, struct gw_lock_call *call)
{
    gw_waiter *w = &call->waiter;
    gw_wake reason = w->reason;

    w->state = GW_WAITER_IDLE;
    restart_idle_timer(req->conn);
    if (reason == GW_WAKE_SHUTDOWN) {
        return gw__lock_answer_stopped(req, call);
    }
    gw_peer peer = gw__conn_peer(req->conn);
    if (reason == GW_WAKE_DISCONNECT || peer != GW_PEER_OPEN) {
        /* Gone, or closed its side: a lock taken now might be for nobody, so end without
         * acting. A release it was woken for is passed on to the next waiter
         * (gw__wait_end). A client that only half-closed still reads: tell it why. */
        gw__wait_end(req->rt->waitq, w, -1, 0);
        gw__lock_leave_fair_queue(req, call);
        gw__lock_count_acquire(req, GW_ACQ_abandoned);
        if (peer != GW_PEER_EOF) {
            return MHD_NO;
        }
        return gw__send_error(req, MHD_HTTP_CONFLICT, "locked",
                              json_pack("{s:s}", "resource", call->turn.resource),
                              "%s is held by another owner, and a request whose client "
                              "closed its sending side cannot wait for it",
                              call->turn.resource);
    }
    call->last = (unsigned char)(reason == GW_WAKE_DEADLINE);
    /* Woken by a release or an expiry, it races whoever else comes for the lock: if it
     * loses, it queues in Redis for a hand-off (ops/lock_attempt.c, "Hand-offs"). */
    call->queue_next = (unsigned char)(reason == GW_WAKE_RELEASE || reason == GW_WAKE_EXPIRY);
    return lock_attempt(req, call);
}

/* GIVING_BACK, resumed by the pipeline once the give-back is answered: whatever it
 * answered (a failed one leaves the hold to its lease), go on. */
static enum MHD_Result lock_given_back(gw_request *req, struct gw_lock_call *call)
{
    gw__lock_attempt_free(call->attempt);
    call->attempt = NULL;
    if (call->then == THEN_ATTEMPT) {
        return lock_attempt(req, call);
    }
    if (call->then == THEN_ABANDON) {
        return MHD_NO;
    }
    return gw__lock_answer_uncovered(req, call, call->token);
}

/* GW_OP_STARTED: the suspended connection was resumed, by the pipeline (an attempt or a
 * give-back was answered) or by waiters.c (a parked request was woken). */
static enum MHD_Result lock_resumed(gw_request *req)
{
    struct gw_lock_call *call = req->op_state;
    switch ((lock_stage)call->stage) {
    case LOCK_ATTEMPTING:
        return lock_answered(req, call);
    case LOCK_GIVING_BACK:
        return lock_given_back(req, call);
    case LOCK_SESSION: {
        enum MHD_Result answered = MHD_YES;
        return gw__session_lock_resumed(req, call, &answered) ? answered
                                                               : lock_attempt(req, call);
    }
    case LOCK_PARKED:
        break;
    }
    return lock_woken(req, call);
}

/* The body is in: parse it, keep what the wait needs, and start the first attempt. */
static enum MHD_Result lock_start(gw_request *req)
{
    json_t *root = NULL;
    gw_lock_args a;
    const char *session = NULL;
    enum MHD_Result result = MHD_YES;

    if (gw__set_body(req)) {
        return gw__set_start(req, GW_SET_LOCK); /* "resources": ops/lock_set.c */
    }
    if (gw__parse_object(req, &root, &result) != 0 || gw__lock_args(req, root, &a, &result) != 0 ||
        gw__session_lock_args(req, root, &session, &result) != 0) {
        gw__lock_count_acquire(req, GW_ACQ_invalid);
        json_decref(root);
        return result;
    }
    if (a.fair && strncmp(req->rt->cfg->redis_url, "redlock://", 10) == 0) {
        /* A FIFO queue across independent masters is not built: say so instead of giving
         * a lock that is not fair (docs/topologies.md, "Redlock"). */
        gw__lock_count_acquire(req, GW_ACQ_invalid);
        json_decref(root);
        return gw__send_error(req, MHD_HTTP_BAD_REQUEST, "fair_unavailable",
                              json_pack("{s:s}", "topology", "redlock"),
                              "fair locks are not available on the redlock topology");
    }
    /* Exactly as much as the names need: a parked waiter should cost little memory. */
    const char *idem = a.idem_key != NULL ? a.idem_key : "";
    size_t rlen = strlen(a.resource) + 1, olen = strlen(a.owner) + 1, ilen = strlen(idem) + 1;
    struct gw_lock_call *call = calloc(1, sizeof *call + rlen + olen + ilen);
    if (call == NULL) {
        json_decref(root);
        return MHD_NO;
    }
    memcpy(call->text, a.resource, rlen);
    memcpy(call->text + rlen, a.owner, olen);
    memcpy(call->text + rlen + olen, idem, ilen);
    call->owner = call->text + rlen;
    call->idem_key = call->text + rlen + olen;
    call->turn.resource = call->text;
    call->turn.owner = call->owner;
    call->ttl_ms = a.ttl_ms;
    call->wants_wait = (unsigned char)(a.wait_ms > 0);
    if (call->wants_wait) {
        /* Past its address's share of waiters it may still take a free lock, but not wait. */
        call->wait_place = (unsigned char)gw__loops_wait_take(req->rt->loops, req->slot);
        call->over_share = (unsigned char)!call->wait_place;
        call->wants_wait = call->wait_place;
    }
    call->client_place = -1;
    if (call->wants_wait && req->client != NULL && req->rt->cfg->clients_file[0] != '\0') {
        /* And past its client's share, so one client cannot take every waiter. */
        call->client_place = gw__metrics_client_wait_take(&req->rt->metrics, req->client->name,
                                                          gw__lock_client_waiters(req->rt));
        call->over_client = (unsigned char)(call->client_place < 0);
        call->over_share = call->over_client;
        call->wants_wait = !call->over_client;
    }
    call->fair = (unsigned char)a.fair;
    call->shared = (unsigned char)a.shared;
    if (call->wants_wait && !call->shared && session == NULL && call->idem_key[0] == '\0' &&
        strncmp(req->rt->cfg->redis_url, "redlock://", 10) != 0) {
        /* Its hand-off id: a release that hands the lock to it grants it in the release
         * script, under this id, which its attempt then claims (ops/lock_attempt.c,
         * "Hand-offs"). */
        new_handoff_id(call->waiter.handoff_id);
    }
    call->deadline_ms = gw__now_ms() + a.wait_ms;
    call->waiter.fd = -1;
    call->waiter.timer.idx = GW_TIMER_OFF;
    req->op_state = call;
    char sid[LK_SESSION_ID_LEN + 1] = ""; /* "" when not an id's length: not found */
    if (session != NULL && strlen(session) == LK_SESSION_ID_LEN) {
        memcpy(sid, session, sizeof sid);
    }
    json_decref(root);
    free(req->body); /* a parked waiter keeps only what it needs */
    req->body = NULL;
    req->body_len = req->body_cap = 0;
    if (session != NULL) {
        return gw__session_lock_begin(req, call, sid);
    }
    return lock_attempt(req, call);
}

/* From request completion: ends the wait and undoes an acquisition whose answer did not
 * reach the client. Frees the call. */
static void lock_completed(gw_request *req, enum MHD_RequestTerminationCode toe)
{
    struct gw_lock_call *call = req->op_state;

    gw_attempt *at = call->attempt;

    if (at != NULL && at->call.status == LK_ACQUIRED) {
        call->fair_queued = 0; /* the script took it off the queue */
        call->maybe_granted = 0;
    }
    if (at != NULL && call->line_sent && at->call.kind != LK_CALL_RELEASE &&
        at->call.status != LK_ACQUIRED && at->call.status != LK_HELD) {
        gw__wait_pass_wake(req->rt->waitq, &call->waiter); /* as in lock_answered */
    }
    /* A held answer nobody looked at: the waiters parked behind it wait for that lease. */
    int held = at != NULL && at->call.kind != LK_CALL_RELEASE && at->call.status == LK_HELD;
    gw__wait_end(req->rt->waitq, &call->waiter, held ? at->call.res.ttl_ms : -1,
                 held ? at->call.res.holder_token : 0);
    gw__lock_leave_fair_queue(req, call);
    if (at != NULL) {
        /* The answer came in, but when the pipeline resumed the connection libmicrohttpd
         * found the client gone and ended the request without resuming the operation
         * (lock_answered), so nobody looked at the answer. A hold it took would stay for
         * its whole lease: give it back (if that release fails, Redis gone, the lease ends
         * it). A replayed answer took nothing. */
        if (at->call.kind != LK_CALL_RELEASE && at->call.status == LK_ACQUIRED &&
            !at->call.res.replayed) {
            gw__lock_give_back(req->rt, call, at->call.res.token, 0);
        }
        call->attempt = NULL;
        gw__lock_attempt_free(at);
    }
    /* A client that had closed its side was answered in case it only half-closed; if it had
     * closed for good, the answer drew a reset (at once over loopback, a round trip later
     * over a network, when the lease ends the hold instead). */
    int reset = call->acquired == ACQUIRED_AFTER_EOF && gw__conn_peer(req->conn) == GW_PEER_GONE;
    if (call->acquired && (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK || reset)) {
        /* The answer never reached the client (it disconnected as the lock was taken):
         * give the hold back, so no lock stays held for a client that is gone. */
        gw__lock_give_back(req->rt, call, call->token, 1);
        /* Its outcome is that of a client gone as the lock was taken, as when that is seen
         * before answering. */
        atomic_fetch_sub(&req->rt->metrics.acquire[call->counted - 1], 1);
        gw__lock_count_acquire(req, GW_ACQ_abandoned);
    }
    if (!call->counted) {
        /* Ended without an answer: MHD found the client gone when it resumed the waiter. */
        gw__lock_count_acquire(req, GW_ACQ_abandoned);
    }
    if (call->wait_place) {
        gw__loops_wait_give(req->rt->loops, req->slot);
    }
    gw__metrics_client_wait_give(&req->rt->metrics, call->client_place);
    gw__session_lock_free(call);
    gw__wait_free(req->rt->waitq, &call->waiter, call);
    req->op_state = NULL;
}

const gw_op gw__op_lock = {lock_start, lock_resumed, lock_completed};
