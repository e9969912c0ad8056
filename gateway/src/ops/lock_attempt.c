/*
 * Attempts in the pipeline. An attempt suspends its connection and asks for its resource's
 * turn (gw__fence_enter). When no acquisition of the stripe is out, it gets the turn with its
 * floor and goes to the Redis pipeline at once (stripe_send); else it queues behind, and when
 * the answer of the one before it is in, the fence (gw__fence_answered, on a pipeline thread)
 * covers (or queues the shared ledger's grant of) and counts that token, then grants the
 * next turn with its floor and sends it through gw__lock_fence_ops. Why the turns: fence.c,
 * "Concurrent acquisitions".
 *
 * An attempt that waited for its stripe past its deadline + GW_STRIPE_GRACE_MS is answered
 * 503 without asking Redis: on a slow Redis (calls that take most of the command timeout
 * without timing out, where the breaker does not trip) the attempts on one resource would
 * otherwise queue one round trip each, unbounded. One whose floor cannot be read is answered
 * 503 too. Either way the stripe passes on to the next. Every attempt is answered: its
 * connection is resumed exactly once, and the operation runs again (lock_answered).
 *
 * The Redis call (gw_attempt) exists only from leaving the stripe's queue until the answer:
 * thousands of waiters queued on one resource carry none, and parked waiters none either.
 * Calls are recycled through a free list of at most ATTEMPTS_KEPT, so their churn does not
 * fragment the heap under parked waiters (tests/bench/handoff_bench, memory per waiter).
 */
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/fence.h"
#include "ops/lock_attempt.h"
#include "ops/lock_internal.h"
#include "rt/loops.h"
#include "rt/pipe.h"
#include "rt/util.h"
#include "rt/waiters.h"

static struct gw_lock_call *call_of_turn(gw_fence_turn *t)
{
    return t != NULL ? (struct gw_lock_call *)((char *)t - offsetof(struct gw_lock_call, turn))
                     : NULL;
}

#define ATTEMPTS_KEPT 1024
static pthread_mutex_t attempts_mu = PTHREAD_MUTEX_INITIALIZER;
static gw_qlink *attempts_free; /* a stack through job.link, the latest freed on top */
static size_t attempts_kept;

static gw_attempt *attempt_new(void)
{
    pthread_mutex_lock(&attempts_mu);
    gw_qlink *top = attempts_free;
    if (top != NULL) {
        attempts_free = top->next;
        attempts_kept--;
    }
    pthread_mutex_unlock(&attempts_mu);
    gw_attempt *at = top != NULL ? gw_container_of(top, gw_job, link)->arg : calloc(1, sizeof *at);
    if (at != NULL) {
        memset(at, 0, sizeof *at);
    }
    return at;
}

void gw__lock_attempt_free(gw_attempt *at)
{
    if (at == NULL) {
        return;
    }
    pthread_mutex_lock(&attempts_mu);
    if (attempts_kept < ATTEMPTS_KEPT) {
        at->job.arg = at;
        at->job.link.next = attempts_free;
        attempts_free = &at->job.link;
        attempts_kept++;
        at = NULL;
    }
    pthread_mutex_unlock(&attempts_mu);
    free(at);
}

/* Fills the lock call of lc's attempt at (floor: the turn's, 0 for a shared attempt). */
static void fill_attempt(gw_rt *rt, struct gw_lock_call *lc, gw_attempt *at, int64_t floor,
                         int64_t now_ms)
{
    at->call.kind = lc->fair ? LK_CALL_ACQUIRE_FAIR : LK_CALL_ACQUIRE;
    at->call.resource = lc->turn.resource;
    at->call.owner = lc->owner;
    at->call.idem_key = lc->idem_key[0] != '\0' ? lc->idem_key : NULL;
    at->call.lease_ms = lc->ttl_ms;
    at->call.floor = floor;
    /* A grant while others of this gateway wait marks the lock, so that its
     * release wakes them (locklib/lua/prelude/wanted.lua): the one waiter a
     * release wakes may be the one that takes the lock. */
    at->call.others_waiting =
        !lc->fair && (lc->handed_off ||
                      gw__wait_others(rt->waitq, &lc->waiter, lc->turn.resource));
    at->call.supersede = lc->supersede;
    at->call.shared = lc->shared;
    /* How much longer it waits if held: a waiting exclusive request holds new shared
     * ones back (writers' preference, locklib/lua/prelude/shared.lua). */
    int64_t wait_left = lc->waiting ? lc->deadline_ms - now_ms : 0;
    at->call.wait_ms = wait_left > 0 ? (wait_left < LK_WAIT_MAX_MS ? wait_left
                                                                   : LK_WAIT_MAX_MS)
                                     : 0;
    if (lc->fair) {
        /* Over its address's share of waiters it may take a free lock but not
         * queue: an entry with no time left is dropped by the script. */
        int64_t left = lc->over_share ? 0 : lc->deadline_ms - now_ms;
        at->call.wait_ms = left > 0 ? left : 0;
        lc->fair_queued = !lc->over_share;
        if (lc->waiter.handoff_id[0] != '\0') {
            /* Queued with its id, it may be granted the lock by any release that frees it
             * while it is first in line, on any gateway (release_hands_on): every attempt
             * claims such a grant, and its exit gives it back. */
            at->call.handoff_id = lc->waiter.handoff_id;
            lc->maybe_granted = lc->fair_queued;
        }
    } else if (lc->queue_next && lc->waiting && lc->waiter.handoff_id[0] != '\0' &&
               at->call.wait_ms > 0) {
        /* Woken to race for the lock: answered held, it is queued in Redis, and the next
         * release that frees the lock, on any gateway, grants it first ("Hand-offs"). */
        lc->queue_next = 0;
        lc->maybe_granted = 1;
        at->call.handoff_id = lc->waiter.handoff_id;
    } else if (lc->maybe_granted) {
        /* A release may have granted it the lock (release_hands_on): the attempt carries its
         * hand-off id and claims that grant, never re-entering it; held, it queues nothing
         * in Redis (it waits here, or is queued there already). */
        at->call.handoff_id = lc->waiter.handoff_id;
        at->call.handoff_claim = 1;
    }
    lc->waiter.claims = lc->maybe_granted;
}

/* The done of a shared attempt's mark job, on the storage writer: its outcome goes where the
 * answer looks for a cover's (a failure gives the hold back and answers 503), and the writer
 * resumes the connection. */
static int shared_marked(gw_job *job)
{
    struct gw_lock_call *lc = job->arg;
    lc->turn.cover = (unsigned char)lc->turn.grant.status;
    return 1;
}

/* The done of a shared attempt's job (no stripe held), on the pipeline thread. A granted
 * token (the last exclusive one) is marked shared in the store before the grant is
 * answered, so that no write with it is accepted from now on (store_grant_req.shared): the
 * mark is a commit, so it goes to the storage writer, which resumes the connection. A token
 * of 0 (nothing exclusive yet) cannot write anyway. Otherwise the pipeline resumes it. */
static int shared_answered(gw_job *job)
{
    struct gw_lock_call *lc = job->arg;
    gw_rt *rt = job->ctx;
    const lk_call *call = job->call;

    if (call->status != LK_ACQUIRED || !call->res.shared || call->res.token <= 0) {
        return 1;
    }
    lc->turn.grant = (store_grant_req){.resource = lc->turn.resource,
                                       .token = (uint64_t)call->res.token, .shared = 1};
    job->grant = &lc->turn.grant;
    job->write = NULL;
    job->done = shared_marked;
    gw__pipe_submit(rt->writer, job); /* job and lc may be gone from here on */
    return 0;
}

/* Makes release, an /unlock's lk_call in the held pipeline batch right before lc's attempt
 * (gw__lock_handoff), grant the lock in its own script, with the floor of lc's turn, when
 * lc has a hand-off id (none on Redlock, nor with an idempotency key): to the first waiter
 * queued in Redis for a hand-off, whichever gateway it waits on (the head of the fair
 * queue when it asked for hand-offs, else the first non-fair waiter queued after losing a
 * race: fill_attempt), whose claim then takes it (another waiter woken by the grant's
 * message, rt/waitq.c, on_grant: lc's attempt then finds the lock held and parks again),
 * or lc itself. The release names lc (lk_call.handoff_to): when lc is that first waiter,
 * its grant has lc's own lease, and its attempt is answered from the release's reply
 * (stripe_send_first). With nobody queued and lc non-fair, the lock goes to lc too, behind
 * the one gateway of its ledger. Not past the queue for a fair lc (handoff_first), nor on
 * a shared ledger: there other gateways' waiters wait for the same lock too, and a grant
 * to the waiter parked here at every release kept the lock with this gateway's clients
 * (docs/architecture.md, "Hand-offs in one script"). There lc is named only when it is
 * queued in Redis: else the release cannot grant it, and its attempt, named, would be held
 * back for a second round after the batch (locklib, lk_call.claim_from).
 * The minted token is counted before lc's turn ends (owner_calls.c), as an acquisition's. */
static void release_hands_on(gw_rt *rt, lk_call *release, struct gw_lock_call *lc,
                             int64_t floor)
{
    if (lc->waiter.handoff_id[0] == '\0' || lc->idem_key[0] != '\0' ||
        !lk_valid_owner(lc->owner) || strcmp(lc->owner, release->owner) == 0) {
        return;
    }
    release->handoff = 1;
    release->floor = floor;
    int first_only = lc->fair || store_grant_needed(rt->fence.st, 0);
    if (first_only && !(lc->fair ? lc->fair_queued : lc->maybe_granted)) {
        /* Not queued in Redis, so not grantable: its attempt goes in the release's pass as
         * an ordinary one (named, it would wait for a second round). */
        return;
    }
    release->handoff_to = lc->owner;
    release->handoff_id = lc->waiter.handoff_id;
    release->lease_ms = lc->ttl_ms;
    release->handoff_first = first_only;
    /* Until it holds the lock or its wait ends: a held answer does not show that no grant
     * is coming (a release sent again after NOSCRIPT runs after the claim). */
    lc->maybe_granted = 1;
}

/* lc's attempt leaves its stripe's line (rt/waiters.c, "The line"): sent to Redis, or not. */
static void leave_line(gw_rt *rt, struct gw_lock_call *lc, int sent)
{
    if (lc->lined) {
        lc->lined = 0;
        lc->line_sent = (unsigned char)sent; /* a waiter may have parked counting on it */
        gw__wait_lined(rt->waitq, &lc->waiter, 0, sent);
    }
}

/* Sends the attempt of t, which holds its stripe with floor, to the pipeline; or answers it
 * without Redis and passes the stripe on, until one is sent or the stripe is free. Returns
 * 1 when t's own attempt went to the pipeline (read before anything is resumed: an answered
 * one may be freed by then). release, when not NULL, is the /unlock t's attempt is sent
 * behind (gw__lock_handoff): it hands the lock on when t's attempt goes out. */
static int stripe_send_first(gw_fence *f, gw_fence_turn *t, gw_floor floor, lk_call *release)
{
    gw_rt *rt = f->owner;
    struct gw_lock_call *lc = call_of_turn(t);
    int first = 1;

    while (lc != NULL) {
        int64_t now_ms = gw__now_ms();
        gw_attempt *at = NULL;
        if (now_ms > lc->deadline_ms + GW_STRIPE_GRACE_MS) {
            lc->turn.refused = ATTEMPT_STRIPE_BUSY;
        } else if (floor.status != STORE_OK) {
            lc->turn.refused = ATTEMPT_STORE_FAILED;
        } else if ((at = attempt_new()) == NULL) {
            lc->turn.refused = ATTEMPT_NOMEM;
        } else {
            if (first && release != NULL) {
                release_hands_on(rt, release, lc, floor.floor);
            }
            leave_line(rt, lc, 1);
            fill_attempt(rt, lc, at, floor.floor, now_ms);
            if (first && release != NULL && release->handoff_to != NULL) {
                /* The release's grant to lc is its answer (locklib, lk_call.claim_from):
                 * marked wanted as the attempt's grant would be, and no claim is sent. */
                release->others_waiting = at->call.others_waiting;
                at->call.claim_from = release;
            }
            gw__wait_sending(rt->waitq, &lc->waiter);
            at->job.call = &at->call;
            at->job.conn = lc->waiter.conn;
            at->job.done = gw__fence_answered;
            at->job.arg = &lc->turn;
            at->job.ctx = f;
            lc->attempt = at;
            gw__pipe_submit(rt->pipe, &at->job);
            return first;
        }
        leave_line(rt, lc, 0);
        struct MHD_Connection *conn = lc->waiter.conn;
        struct gw_lock_call *next =
            call_of_turn(gw__fence_leave(f, &lc->turn, 0, &floor));
        gw__loops_resume(rt->loops, conn); /* lc may be freed from here on */
        lc = next;
        first = 0;
    }
    return 0;
}

/* gw__lock_fence_ops.send: stripe_send_first() for the fence. */
static void stripe_send(gw_fence *f, gw_fence_turn *t, gw_floor floor)
{
    stripe_send_first(f, t, floor, NULL);
}

/* gw__lock_fence_ops.held, on the pipeline thread: a fair waiter was queued in Redis just
 * now; it takes its local place while attempts on this resource are still serialised by
 * the stripe, so the orders of attempts agree (joins go beside them: rt/waiters.c, "Fair
 * waiters in order"). */
static void attempt_held(gw_fence *f, gw_fence_turn *t)
{
    gw_rt *rt = f->owner;
    struct gw_lock_call *lc = call_of_turn(t);

    if (lc->fair) {
        gw__wait_place(rt->waitq, &lc->waiter);
    }
}

/* gw__lock_fence_ops.acquired: a waiting request took the lock in Redis in an attempt that
 * marked it wanted, so its holder is known (ops/lock.c, "Known holders") from here, before
 * the ledger covers or grants its token and before its connection resumes. The owner that
 * released the lock to it in a hand-off is answered after this (rt/pipe.c: a glued group
 * resumes together; a shared ledger's grant commits later, on the storage writer) and often
 * asks again at once; knowing the holder, that request parks without an attempt, which
 * would find the lock held and keep the stripe busy when the next release comes, so that
 * release would go out without its hand-off. A hold the ledger refuses is given back, and
 * the give-back's release message voids what is known. */
static void attempt_acquired(gw_fence *f, gw_fence_turn *t, const lk_call *call)
{
    gw_rt *rt = f->owner;
    struct gw_lock_call *lc = call_of_turn(t);
    const lk_result *res = &call->res;

    if (call->others_waiting && !res->replayed && res->holds == 1 && !res->shared) {
        gw__wait_note_holder(rt->waitq, &lc->waiter, lc->owner, res->token,
                             res->ttl_ms > 0 ? res->ttl_ms : lc->ttl_ms);
    }
}

/* gw__lock_fence_ops.grant, on the pipeline thread: the shared ledger's grant of an
 * answered attempt's token goes to the storage writer, which resumes the connection. */
static void attempt_grant(gw_fence *f, gw_job *job)
{
    gw_rt *rt = f->owner;
    gw__pipe_submit(rt->writer, job);
}

const gw_fence_ops gw__lock_fence_ops = {stripe_send, attempt_held, attempt_acquired,
                                         attempt_grant};

/*
 * Redis calls a /lock makes besides its attempts: giving back a hold nobody will use, and
 * leaving the fair queue. Both go through the Redis pipeline like an attempt, never on a loop
 * thread.
 *
 * A give-back carries the idempotency record of the acquisition that answered token: a
 * retry with its key then acts afresh, where it would have replayed a 200 for a hold that is
 * gone (lk_call.supersede of a release). If the release fails (Redis gone), the hold ends
 * with its lease and the record stays: a retry within the lease then replays the grant,
 * which the fencing token still guards.
 *
 * When the request goes on after the call (an answer, another attempt), the call must run
 * first: a client that retries on a 503 must not find its old hold still there, nor have
 * its new one released by a give-back that arrives late. gw__lock_undo_then() suspends the request
 * for it (LOCK_GIVING_BACK). Once the request has ended, or its client is gone, nothing comes
 * after: gw__lock_send_errand() sends the call on its own, with copies of its names, and it frees
 * itself when answered. Leaving the fair queue is always sent so, and may reach Redis after
 * the client's next request with the same owner: that request then either finds its old
 * entry (and keeps its place, which was its own) or has its fresh entry taken out (and
 * queues again, last, at its next attempt). Neither changes a token or who holds the lock.
 * A give-back after the request has ended may likewise reach Redis after a retry with the
 * same Idempotency-Key, whose replayed grant it then ends: the client's token is refused as
 * soon as the next holder locks, and the retry's client had not been answered the first
 * grant.
 */
struct gw_errand {
    gw_job job;
    lk_call call;
    gw_rt *rt;
    unsigned char uncount_held;          /* a RELEASED answer ends a counted hold */
    char id[17];                         /* a FAIR_CANCEL's hand-off id, "" for none */
    char text[];                         /* resource, owner and key, each NUL-terminated */
};

/* The supersede of a give-back of the hold answered token: the token, or -1 (any token) for
 * a shared hold of token 0 (nothing minted yet), whose supersede of 0 would make the
 * give-back a plain release, refused by the key's record of the acquisition. */
static int64_t give_back_supersede(int64_t token)
{
    return token > 0 ? token : -1;
}

/* gw_job.done of an errand, on the pipeline thread. A waiter's exit that finds a hand-off
 * grant made to it, which its request never answered, turns into the give-back of that hold
 * (supersede: a later hold of the same owner, with a larger token, is left alone). */
static int errand_done(gw_job *job)
{
    struct gw_errand *e = job->arg;
    if (e->call.kind == LK_CALL_FAIR_CANCEL && e->call.status == LK_OK &&
        e->call.res.handed_token > 0) {
        int64_t token = e->call.res.handed_token;
        memset(&e->call.res, 0, sizeof e->call.res);
        e->call.kind = LK_CALL_RELEASE;
        e->call.handoff_id = NULL;
        e->call.supersede = give_back_supersede(token);
        gw__pipe_submit(e->rt->pipe, &e->job);
        return 0;
    }
    if (e->uncount_held && e->call.status == LK_RELEASED) {
        atomic_fetch_sub(&e->rt->metrics.locks_held, 1);
    }
    free(e);
    return 1;
}

/* Sends a give-back of token (kind LK_CALL_RELEASE) or a fair-queue exit
 * (LK_CALL_FAIR_CANCEL) for call's resource and owner, answered by nobody. Out of memory, it
 * is not sent: the hold ends with its lease, the queue entry at its deadline. */
void gw__lock_send_errand(gw_rt *rt, const struct gw_lock_call *call, lk_call_kind kind,
                          int64_t token, int uncount_held)
{
    int handoff_exit = kind == LK_CALL_FAIR_CANCEL && call->maybe_granted &&
                       call->waiter.handoff_id[0] != '\0';
    const char *idem = kind == LK_CALL_RELEASE ? call->idem_key : "";
    size_t rlen = strlen(call->turn.resource) + 1, olen = strlen(call->owner) + 1;
    size_t ilen = strlen(idem) + 1;
    struct gw_errand *e = calloc(1, sizeof *e + rlen + olen + ilen);
    if (e == NULL) {
        return;
    }
    memcpy(e->text, call->turn.resource, rlen);
    memcpy(e->text + rlen, call->owner, olen);
    memcpy(e->text + rlen + olen, idem, ilen);
    e->rt = rt;
    e->uncount_held = (unsigned char)uncount_held;
    e->call.kind = kind;
    e->call.resource = e->text;
    e->call.owner = e->text + rlen;
    e->call.idem_key = idem[0] != '\0' ? e->text + rlen + olen : NULL;
    e->call.supersede = kind == LK_CALL_RELEASE ? give_back_supersede(token) : 0;
    if (handoff_exit) {
        memcpy(e->id, call->waiter.handoff_id, sizeof e->id);
        e->call.handoff_id = e->id;
    }
    e->job.call = &e->call;
    e->job.done = errand_done;
    e->job.arg = e;
    gw__pipe_submit(rt->pipe, &e->job);
}

/* A give-back of a hold whose client is gone or whose request has ended. */
void gw__lock_give_back(gw_rt *rt, const struct gw_lock_call *call, int64_t token,
                        int uncount_held)
{
    gw__lock_send_errand(rt, call, LK_CALL_RELEASE, token, uncount_held);
}

/* Gives back the hold of token, taken by this request's last attempt, through the Redis
 * pipeline, with the connection suspended; lock_resumed() then goes on as `then` says. */
enum MHD_Result gw__lock_undo_then(gw_request *req, struct gw_lock_call *call, int64_t token,
                                   int then)
{
    gw_attempt *at = attempt_new();
    if (at == NULL) {
        /* Out of memory: the give-back goes on its own, and the connection is closed
         * rather than answered before it. */
        gw__lock_give_back(req->rt, call, token, 0);
        return MHD_NO;
    }
    at->call.kind = LK_CALL_RELEASE;
    at->call.resource = call->turn.resource;
    at->call.owner = call->owner;
    at->call.idem_key = call->idem_key[0] != '\0' ? call->idem_key : NULL;
    at->call.supersede = give_back_supersede(token);
    at->job.call = &at->call;
    at->job.conn = req->conn;
    call->attempt = at;
    call->token = token;
    call->then = (unsigned char)then;
    call->stage = LOCK_GIVING_BACK;
    MHD_suspend_connection(req->conn);
    gw__pipe_submit(req->rt->pipe, &at->job);
    return MHD_YES;
}

/* Fair joins. A new fair request must take its place in the fair queue in Redis, and on
 * a hot lock its first attempt only does that: the lock is held, or another waiter is
 * first. Sent as an attempt, it would hold its stripe's turn for a round trip, and an
 * /unlock meanwhile could not hand the lock on in its release ("Hand-offs": the waiter's
 * attempt behind the release needs the turn at once): the lock would go on by a plain
 * release, a message and a second pass. So while other requests of this gateway wait for
 * the resource (and fewer than WQ_JOINS_MAX joins of it are out: rt/waiters_internal.h),
 * a new fair request's first call is a join (lk_call.join_only): it queues
 * the owner and takes nothing, so it needs no floor and no turn (fence.c: the turns are for
 * tokens minted), and goes to Redis beside the acquisitions. Answered HELD, the request
 * parks as after an attempt, also when releases went by meanwhile, as long as they went to
 * the waiters ahead of it (rt/waiters.c, "Fair waiters behind the first"); answered that
 * the lock is the owner's to take (a free lock with nobody ahead, or a hold of the owner's
 * own), it attempts at once, in turn. Joins are answered out of the queue's order at times
 * (rt/waiters.c, "Fair waiters in order"). A request with an Idempotency-Key (its first
 * answer is recorded), a shared one (readers are granted together, whatever their place)
 * or one past its address's share of waiters (it does not queue) attempts. */
static int join_first(gw_rt *rt, struct gw_lock_call *call, const lk_call *release)
{
    return call->fair && !call->shared && call->waiting && !call->fair_queued &&
           !call->over_share && call->idem_key[0] == '\0' && release == NULL &&
           gw__wait_join(rt->waitq, &call->waiter, 1);
}

/* The done of a join's job, on the pipeline thread (no stripe held): queued in Redis just
 * now, the waiter takes its local place, as attempt_held() places one queued by an
 * attempt. The pipeline resumes the connection. */
static int joined(gw_job *job)
{
    struct gw_lock_call *lc = job->arg;
    gw_rt *rt = job->ctx;

    if (job->call->status == LK_HELD && !job->call->res.may_take) {
        gw__wait_place(rt->waitq, &lc->waiter);
    }
    gw__wait_join(rt->waitq, &lc->waiter, 0);
    return 1;
}

/* Sends an attempt whose connection conn is suspended: its stripe's turn, then the
 * pipeline (see "Attempts in the pipeline"). Returns 1 when it went to the pipeline now; 0
 * when it waits for its stripe, or was answered without Redis (then it may be resumed, and
 * even freed, already). */
static int attempt_send(gw_rt *rt, struct gw_lock_call *call, struct MHD_Connection *conn,
                        lk_call *release)
{
    call->turn.refused = ATTEMPT_ASKED;
    call->turn.cover = STORE_OK;
    call->attempt = NULL;
    call->waiter.conn = conn; /* the same connection it parks, if it does */
    call->stage = LOCK_ATTEMPTING;
    int join = join_first(rt, call, release);
    if (call->shared || join) {
        /* A shared attempt mints nothing, nor does a join ("Fair joins"): it needs no floor
         * and no turn of its stripe, whose line makes the acquisitions of one resource go
         * one round trip at a time until each new token is counted. Readers of one resource
         * go to Redis together. */
        gw_attempt *at = attempt_new();
        if (at == NULL) {
            if (join) {
                gw__wait_join(rt->waitq, &call->waiter, 0);
            }
            call->turn.refused = ATTEMPT_NOMEM;
            gw__loops_resume(rt->loops, conn);
            return 0;
        }
        fill_attempt(rt, call, at, 0, gw__now_ms());
        at->call.join_only = join;
        if (join) {
            gw__wait_sending(rt->waitq, &call->waiter);
        }
        at->job.call = &at->call;
        at->job.conn = conn;
        at->job.done = join ? joined : shared_answered;
        at->job.arg = call;
        at->job.ctx = rt;
        call->attempt = at;
        gw__pipe_submit(rt->pipe, &at->job);
        return 1;
    }
    gw_floor floor;
    /* Counted before it may be sent (a fence answering the turn ahead passes the stripe to
     * it at once, on another thread), and taken back if it goes now. */
    call->line_sent = 0;
    if (call->waiting && !call->fair) {
        call->lined = 1;
        gw__wait_lined(rt->waitq, &call->waiter, 1, 0);
    }
    if (gw__fence_enter(&rt->fence, &call->turn, &floor)) {
        return stripe_send_first(&rt->fence, &call->turn, floor, release);
    }
    return 0; /* the fence sends it in turn */
}

int gw__lock_attempt_send(gw_rt *rt, struct gw_lock_call *call, struct MHD_Connection *conn)
{
    return attempt_send(rt, call, conn, NULL);
}

/*
 * Hand-offs. A release that frees a lock others wait for publishes a message; the waiter it
 * wakes then makes its attempt: two Redis passes per hand-off (under appendfsync always, two
 * fsyncs in a row), with the subscriber, waitd and a server thread in between. When the
 * waiter is parked here, the /unlock that releases the lock sends that waiter's attempt
 * itself, right behind the release in the same Redis pipeline batch (gw__pipe_hold): Redis
 * reads both at once, runs the release and then the attempt in one pass, and one fsync
 * covers both. The release's message, when it comes, is that waiter's wake (waiters.c,
 * gw__wait_claim), so a release still costs one attempt, not two.
 *
 * The release grants. When that attempt gets its stripe's turn at once (nothing else of the
 * stripe is out), the release is made to hand the lock on in its own script
 * (release_hands_on; locklib's lk_call.handoff), with the floor of the waiter's turn: to the
 * first waiter queued in Redis for a hand-off, on any gateway (a fair queue's head, or a
 * non-fair waiter queued after it lost a race: fill_attempt), else, behind a gateway alone
 * on its ledger, to the non-fair waiter behind it (lk_call.handoff_to). The grant mints the
 * waiter's token, records the hold under the waiter's hand-off id (a random id per wait,
 * new_handoff_id() in lock.c) and, when somebody had marked the lock wanted, publishes
 * "g:<token>:<id>" instead of a release message. The waiter's next attempt carries that id
 * and claims the grant: a read (unless the grant's lease was cut to the waiter's wait), so
 * under appendfsync always the release's fsync is the hand-off's only one; and a listener
 * hears that the lock changed hands, not that it is free, so it wakes nobody but the waiter
 * named (waitq.c, on_grant). The attempt behind a release that names its waiter
 * (handoff_to) names that release (lk_call.claim_from): when the release granted it, locklib
 * answers the attempt from the release's reply and sends no claim, so that hand-off is one
 * script. The release's done counts the minted token (gw__fence_count)
 * before the attempt's answer ends the turn, whichever waiter it went to; that waiter's
 * claim is answered through gw__fence_answered() like any grant (the ledger covers, or on a
 * shared ledger grants, its token first). A waiter with an Idempotency-Key (its record is
 * written by its own attempt) or on Redlock (no hand-offs across masters) has no id; with
 * nobody to grant, the release is plain. A waiter that may have been granted carries its id
 * on every attempt until it holds the lock (maybe_granted): a held answer does not prove
 * that no grant comes, since a release sent again after NOSCRIPT (locklib's transport) runs
 * after the claim. If its wait ends first, its exit (gw__lock_leave_fair_queue) gives such a
 * grant back.
 *
 * The attempt is otherwise the one the waiter would have made when woken, with its own
 * stripe turn and floor (fence.c), answered by lock_answered() on its own thread (a claim
 * carries the id and queues nothing). It is only sent early, on the releasing request's
 * thread, while the waiter's connection stays suspended (a claimed waiter is this code's
 * alone: waitd no longer touches it). What may differ:
 *   - The release did not free the lock (the owner still holds it, reentered; it was not
 *     the owner; the lock had expired and someone else holds it): the attempt finds it held
 *     and the waiter parks again, as after any wake that lost the race. One attempt more
 *     than a plain /unlock costs, and only while someone waits.
 *   - The attempt does not go out with the release: its stripe is busy (another acquisition
 *     of the same stripe is out), or it is answered without Redis (its deadline passed, the
 *     floor could not be read). It then waits its turn or is answered as any attempt, and
 *     may even reach Redis before the release (another batch, another connection), so the
 *     claim gives up its credit at once (gw__wait_handoff_settled with nothing published):
 *     the release's message wakes a parked waiter as usual.
 *   - On Redlock the batch goes to every master in order, so each master runs the release
 *     before the attempt; on a cluster both go to the resource's slot owner, in order
 *     (except a script Redis no longer knows, sent again after the batch: above).
 *   - A request may park unasked (below, "Known holders") between the claim and the
 *     answer, on a holder that the release ends: a non-fair hand-off attempt is therefore
 *     always sent as marking the lock wanted if it takes it (lk_call.others_waiting), so
 *     that the grant's release publishes and wakes it; a fair one forgets the holder.
 *   - The gateway is killed after the release is sent: the grant and the attempt may or may
 *     not have run; the hold, if granted, was never answered to anybody and ends with the
 *     waiter's lease, as any answer lost to a crash, and the next grant's token is larger
 *     (tests/faults/scenarios/handoff_kill.sh). The waiter's client sees its connection
 *     close.
 *   - The waiter's client hung up while parked: it is no longer watched once claimed, so
 *     the attempt may take the lock for nobody; its answer finds the socket gone and gives
 *     the hold back (lock_answered, as for any attempt), which wakes the next waiter.
 *   - The hand-off waiter's own deadline is due: claimed only when no other parked waiter
 *     has time left, as a wake would choose (rt/waitq.c, gw__wq_wake_one).
 */
int gw__lock_handoff(gw_rt *rt, const char *resource, lk_call *release)
{
    /* Most unlocks have nobody parked anywhere: no lock to take, no lookup. A waiter that
     * parks meanwhile is woken by the release's message, as without hand-offs. */
    if (atomic_load(&rt->metrics.waiters_parked) <= 0) {
        return 0;
    }
    gw_waiter *w = gw__wait_claim(rt->waitq, resource);
    if (w == NULL) {
        return 0;
    }
    struct gw_lock_call *call =
        (struct gw_lock_call *)((char *)w - offsetof(struct gw_lock_call, waiter));
    call->last = 0;
    call->waiting = 1; /* it parked, so it waits, and its reference is held */
    call->handed_off = 1;
    if (!attempt_send(rt, call, w->conn, release)) {
        gw__wait_handoff_settled(rt->waitq, resource, 0); /* call may be gone: not read */
        return 0;
    }
    atomic_fetch_add(&rt->metrics.handoffs, 1);
    return 1;
}

void gw__lock_hand_on(gw_rt *rt, const char *resource)
{
    if (atomic_load(&rt->metrics.waiters_parked) <= 0) {
        return;
    }
    if (gw__lock_handoff(rt, resource, NULL)) {
        gw__wait_handoff_settled(rt->waitq, resource, 0);
    } else {
        gw__wait_kick_set(rt->waitq, resource);
    }
}
