/*
 * POST /lock and GET /locks/{resource} (POST /unlock and /renew: owner_calls.c).
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
 * answer is in (on the pipeline thread) the fence makes the ledger cover the token, counts
 * it and passes the turn on. If that cover failed the hold is released again and the client
 * gets 503.
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
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/args.h"
#include "core/fence.h"
#include "ops/locks.h"
#include "rt/log.h"
#include "http/offload.h"
#include "rt/pipe.h"
#include "rt/redis_client.h"
#include "http/respond.h"
#include "rt/util.h"
#include "rt/waiters.h"

/* What resumes a /lock whose connection is suspended. */
typedef enum lock_stage {
    LOCK_ATTEMPTING,     /* its attempt is in the fence's line or the pipeline */
    LOCK_PARKED,         /* parked in waiters.c */
    LOCK_GIVING_BACK     /* a give-back is in the pipeline; then_* says what comes next */
} lock_stage;

/* What a /lock does once its give-back is answered (undo_then). */
enum { THEN_ATTEMPT, THEN_ANSWER_UNCOVERED };

/* A POST /lock in progress: its arguments, copied out of the body (which is freed, since a
 * parked waiter should cost little memory), and its waiter. Freed at request completion. */
struct gw_lock_call {
    /* The resource is turn.resource; it, owner and idem_key point into text[]. */
    const char *owner;
    const char *idem_key;                /* "" for none */
    int64_t ttl_ms;
    int64_t deadline_ms;                 /* monotonic */
    int64_t token;                       /* the token answered 200 (for a give-back at
                                          * completion) */
    int64_t supersede;                   /* a keyed call's token the shared ledger refused,
                                          * whose idempotency record the next attempt drops
                                          * (lk_call.supersede); else 0 */
    /* Flags in bytes, not ints: a parked waiter should stay under 4 KiB in all. */
    unsigned char wants_wait;            /* wait_ms > 0 */
    unsigned char fair;
    unsigned char fair_queued;           /* may have an entry in the fair queue */
    unsigned char acquired;              /* answered 200 with a hold this call added: 1, or
                                          * ACQUIRED_AFTER_EOF when its client had closed its
                                          * side then (a byte, not a flag of its own: a parked
                                          * waiter should stay under 4 KiB) */
    unsigned char counted;               /* 1 + the outcome counted in acquire_total, or 0 */
    unsigned char last;                  /* the deadline's wake: one last attempt, no park */
    unsigned char waiting;               /* this attempt may park when the lock is held */
    unsigned char stage;                 /* lock_stage: what resumes it */
    unsigned char grant_tries;           /* attempts the shared ledger refused (STALE) */
    unsigned char handed_off;            /* its attempt was started by a hand-off, not on
                                          * its own thread (gw__lock_handoff) */
    unsigned char marked;                /* its last attempt marked the lock wanted if it
                                          * took it (lk_call.others_waiting) */
    unsigned char then;                  /* THEN_*: after LOCK_GIVING_BACK */
    unsigned char wait_place;            /* holds a waiting place of its client's address
                                          * (gw__loops_wait_take) */
    unsigned char over_share;            /* wanted to wait, but its address's waiters had
                                          * their share: one attempt, then 503 if held */
    gw_fence_turn turn;                  /* its place in its stripe's line (fence.c); its
                                          * refused says why it was answered without Redis
                                          * (ATTEMPT_*) */
    struct gw_attempt *attempt;          /* the call in the pipeline, NULL when refused */
    gw_waiter waiter;
    char text[];                         /* resource, owner and key, each NUL-terminated */
};

/* gw_lock_call.acquired when the client had closed its sending side as it was answered. */
#define ACQUIRED_AFTER_EOF 2

/* Counts the outcome of a /lock request: exactly one per request. */
static void count_acquire(gw_request *req, gw_acquire_outcome o)
{
    struct gw_lock_call *call = req->op_state;
    atomic_fetch_add(&req->srv->metrics.acquire[o], 1);
    if (call != NULL) {
        call->counted = (unsigned char)(o + 1);
    }
}

static struct gw_lock_call *call_of_turn(gw_fence_turn *t)
{
    return t != NULL ? (struct gw_lock_call *)((char *)t - offsetof(struct gw_lock_call, turn))
                     : NULL;
}

/* Why an attempt was answered without asking Redis (gw_lock_call.turn.refused). */
enum { ATTEMPT_ASKED, ATTEMPT_STORE_FAILED, ATTEMPT_STRIPE_BUSY, ATTEMPT_NOMEM };

/*
 * Attempts in the pipeline. An attempt suspends its connection and asks for its resource's
 * turn (gw__fence_enter). When no acquisition of the stripe is out, it gets the turn with its
 * floor and goes to the Redis pipeline at once (stripe_send); else it queues behind, and when
 * the answer of the one before it is in, the fence (gw__fence_answered, on a pipeline thread)
 * covers and counts that token, then grants the next turn with its floor and sends it through
 * gw__lock_fence_ops. Why the turns: fence.c, "Concurrent acquisitions".
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
typedef struct gw_attempt {
    gw_job job;                          /* job.next links the free list */
    lk_call call;
} gw_attempt;

#define ATTEMPTS_KEPT 1024
static pthread_mutex_t attempts_mu = PTHREAD_MUTEX_INITIALIZER;
static gw_job *attempts_free;
static size_t attempts_kept;

static gw_attempt *attempt_new(void)
{
    pthread_mutex_lock(&attempts_mu);
    gw_job *job = attempts_free;
    if (job != NULL) {
        attempts_free = job->next;
        attempts_kept--;
    }
    pthread_mutex_unlock(&attempts_mu);
    gw_attempt *at = job != NULL ? job->arg : calloc(1, sizeof *at);
    if (at != NULL) {
        memset(at, 0, sizeof *at);
    }
    return at;
}

static void attempt_free(gw_attempt *at)
{
    if (at == NULL) {
        return;
    }
    pthread_mutex_lock(&attempts_mu);
    if (attempts_kept < ATTEMPTS_KEPT) {
        at->job.arg = at;
        at->job.next = attempts_free;
        attempts_free = &at->job;
        attempts_kept++;
        at = NULL;
    }
    pthread_mutex_unlock(&attempts_mu);
    free(at);
}

/* Sends the attempt of t, which holds its stripe with floor, to the pipeline; or answers it
 * without Redis and passes the stripe on, until one is sent or the stripe is free. Returns
 * 1 when t's own attempt went to the pipeline (read before anything is resumed: an answered
 * one may be freed by then). */
static int stripe_send_first(gw_fence *f, gw_fence_turn *t, gw_floor floor)
{
    gw_server *srv = f->owner;
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
            at->call.kind = lc->fair ? LK_CALL_ACQUIRE_FAIR : LK_CALL_ACQUIRE;
            at->call.resource = lc->turn.resource;
            at->call.owner = lc->owner;
            at->call.idem_key = lc->idem_key[0] != '\0' ? lc->idem_key : NULL;
            at->call.lease_ms = lc->ttl_ms;
            at->call.floor = floor.floor;
            /* A grant while others of this gateway wait marks the lock, so that its
             * release wakes them (locklib/lua/prelude/wanted.lua): the one waiter a
             * release wakes may be the one that takes the lock. */
            at->call.others_waiting =
                !lc->fair && (lc->handed_off ||
                              gw__wait_others(srv->waitq, &lc->waiter, lc->turn.resource));
            at->call.supersede = lc->supersede;
            if (lc->fair) {
                int64_t left = lc->deadline_ms - now_ms;
                at->call.wait_ms = left > 0 ? left : 0;
                lc->fair_queued = 1;
            }
            at->job.call = &at->call;
            at->job.conn = lc->waiter.conn;
            at->job.done = gw__fence_answered;
            at->job.arg = &lc->turn;
            at->job.ctx = f;
            lc->attempt = at;
            gw__pipe_submit(srv->pipe, &at->job);
            return first;
        }
        struct MHD_Connection *conn = lc->waiter.conn;
        struct gw_lock_call *next =
            call_of_turn(gw__fence_leave(f, &lc->turn, 0, &floor));
        gw__loops_resume(srv->loops, conn); /* lc may be freed from here on */
        lc = next;
        first = 0;
    }
    return 0;
}

/* gw__lock_fence_ops.send: stripe_send_first() for the fence. */
static void stripe_send(gw_fence *f, gw_fence_turn *t, gw_floor floor)
{
    stripe_send_first(f, t, floor);
}

/* gw__lock_fence_ops.held, on the pipeline thread: a fair waiter was queued in Redis just
 * now; it takes its local place while attempts on this resource are still serialised by
 * the stripe, so both orders agree. */
static void attempt_held(gw_fence *f, gw_fence_turn *t)
{
    gw_server *srv = f->owner;
    struct gw_lock_call *lc = call_of_turn(t);

    if (lc->fair) {
        gw__wait_place(srv->waitq, &lc->waiter);
    }
}

/* gw__lock_fence_ops.grant, on the pipeline thread: the shared ledger's grant of an
 * answered attempt's token goes to the storage writer, which resumes the connection. */
static void attempt_grant(gw_fence *f, gw_job *job)
{
    gw_server *srv = f->owner;
    gw__pipe_submit(srv->writer, job);
}

const gw_fence_ops gw__lock_fence_ops = {stripe_send, attempt_held, attempt_grant};

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
 * its new one released by a give-back that arrives late. undo_then() suspends the request
 * for it (LOCK_GIVING_BACK). Once the request has ended, or its client is gone, nothing comes
 * after: send_errand() sends the call on its own, with copies of its names, and it frees
 * itself when answered. Leaving the fair queue is always sent so: at worst a late one takes
 * a same-owner waiter that queued again out of line, and it queues again at its next attempt.
 */
struct gw_errand {
    gw_job job;
    lk_call call;
    gw_server *srv;
    unsigned char uncount_held;          /* a RELEASED answer ends a counted hold */
    char text[];                         /* resource, owner and key, each NUL-terminated */
};

/* gw_job.done of an errand, on the pipeline thread. */
static int errand_done(gw_job *job)
{
    struct gw_errand *e = job->arg;
    if (e->uncount_held && e->call.status == LK_RELEASED) {
        atomic_fetch_sub(&e->srv->metrics.locks_held, 1);
    }
    free(e);
    return 1;
}

/* Sends a give-back of token (kind LK_CALL_RELEASE) or a fair-queue exit
 * (LK_CALL_FAIR_CANCEL) for call's resource and owner, answered by nobody. Out of memory, it
 * is not sent: the hold ends with its lease, the queue entry at its deadline. */
static void send_errand(gw_server *srv, const struct gw_lock_call *call, lk_call_kind kind,
                        int64_t token, int uncount_held)
{
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
    e->srv = srv;
    e->uncount_held = (unsigned char)uncount_held;
    e->call.kind = kind;
    e->call.resource = e->text;
    e->call.owner = e->text + rlen;
    e->call.idem_key = idem[0] != '\0' ? e->text + rlen + olen : NULL;
    e->call.supersede = kind == LK_CALL_RELEASE ? token : 0;
    e->job.call = &e->call;
    e->job.done = errand_done;
    e->job.arg = e;
    gw__pipe_submit(srv->pipe, &e->job);
}

/* A give-back of a hold whose client is gone or whose request has ended. */
static void give_back(gw_server *srv, const struct gw_lock_call *call, int64_t token,
                      int uncount_held)
{
    send_errand(srv, call, LK_CALL_RELEASE, token, uncount_held);
}

/* Gives back the hold of token, taken by this request's last attempt, through the Redis
 * pipeline, with the connection suspended; lock_resumed() then goes on as `then` says. */
static enum MHD_Result undo_then(gw_request *req, struct gw_lock_call *call, int64_t token,
                                 int then)
{
    gw_attempt *at = attempt_new();
    if (at == NULL) {
        return MHD_NO; /* the hold ends with its lease; MHD closes the connection */
    }
    at->call.kind = LK_CALL_RELEASE;
    at->call.resource = call->turn.resource;
    at->call.owner = call->owner;
    at->call.idem_key = call->idem_key[0] != '\0' ? call->idem_key : NULL;
    at->call.supersede = token;
    at->job.call = &at->call;
    at->job.conn = req->conn;
    call->attempt = at;
    call->token = token;
    call->then = (unsigned char)then;
    call->stage = LOCK_GIVING_BACK;
    MHD_suspend_connection(req->conn);
    gw__pipe_submit(req->srv->pipe, &at->job);
    return MHD_YES;
}

/* The ledger could not cover the token (gw__fence_answered): it must not be handed out.
 * The hold just taken was given back (undo_then; a replayed answer took none): 503. */
static enum MHD_Result answer_uncovered(gw_request *req, const struct gw_lock_call *call,
                                        int64_t token)
{
    if (call->turn.cover == STORE_STALE) {
        /* Not an error of the store: the shared ledger holds this token, or a larger one,
         * for another holder (see refused_fresh_grant). */
        count_acquire(req, GW_ACQ_unavailable);
        return gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "backend_unavailable", NULL,
                              "the token ledger holds token %llu or a larger one for another "
                              "holder (Redis lost data or disagrees with another gateway's); "
                              "the lock was not taken, retry",
                              (unsigned long long)token);
    }
    gw__log_event(req->srv->cfg, "error", "token ledger: %s",
                  store_status_str((store_status)call->turn.cover));
    count_acquire(req, GW_ACQ_error);
    return gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "backend_unavailable", NULL,
                          "storage could not record the fencing token; the lock was not "
                          "taken");
}

static enum MHD_Result answer_acquired(gw_request *req, struct gw_lock_call *call,
                                       const lk_result *res)
{
    gw_server *srv = req->srv;

    if (res->replayed) {
        count_acquire(req, GW_ACQ_replayed);
    } else if (res->holds > 1) {
        count_acquire(req, GW_ACQ_reentered);
    } else {
        count_acquire(req, GW_ACQ_acquired);
        atomic_fetch_add(&srv->metrics.locks_held, 1);
    }
    if (res->floor_raised) {
        atomic_fetch_add(&srv->metrics.floor_corrections, 1);
    }
    call->acquired = (unsigned char)!res->replayed;
    call->token = res->token;
    /* The lease is the one granted: a replay reports the first answer's, not this retry's. */
    return gw__send_json(req, MHD_HTTP_OK,
                         json_pack("{s:s, s:s, s:I, s:I, s:I}", "resource", call->turn.resource,
                                   "owner", call->owner, "token", (json_int_t)res->token,
                                   "holds", (json_int_t)res->holds, "ttl_ms",
                                   (json_int_t)(res->ttl_ms > 0 ? res->ttl_ms : call->ttl_ms)));
}

static enum MHD_Result answer_locked(gw_request *req, const struct gw_lock_call *call,
                                     const lk_result *res)
{
    char retry[24];
    int64_t retry_ms = res->ttl_ms > 0 ? res->ttl_ms : 0;

    count_acquire(req, GW_ACQ_locked);
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

/* Leaves the fair queue when the wait ends without the lock, so the waiters behind it do
 * not wait for its deadline (an errand: see send_errand). A failure (Redis gone) leaves the
 * entry to expire then. */
static void leave_fair_queue(gw_request *req, struct gw_lock_call *call)
{
    if (!call->fair_queued) {
        return;
    }
    call->fair_queued = 0;
    send_errand(req->srv, call, LK_CALL_FAIR_CANCEL, 0, 0);
}

static enum MHD_Result answer_stopped(gw_request *req, struct gw_lock_call *call)
{
    gw__wait_end(req->srv->waitq, &call->waiter, -1, 0);
    leave_fair_queue(req, call);
    count_acquire(req, GW_ACQ_shutting_down);
    return gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "shutting_down", NULL,
                          "the gateway is shutting down; retry on another instance");
}

/* The attempt found the lock held and --max-waiters are waiting already (waiters.c, "The
 * cap"), or this client address's waiters have their share of its connections
 * (over_share): 503 with a Retry-After of the holder's remaining lease (at least 1 s), when
 * the lock may be free and the waiters fewer. Over its share the connection is closed after
 * the answer, so that the address's connection is free for requests that do not wait. */
static enum MHD_Result answer_too_many_waiters(gw_request *req, struct gw_lock_call *call,
                                               const lk_result *res)
{
    char retry[24];
    int64_t retry_ms = res->ttl_ms > 1000 ? res->ttl_ms : 1000;
    struct MHD_Response *resp = NULL;

    gw__wait_end(req->srv->waitq, &call->waiter, -1, 0);
    leave_fair_queue(req, call);
    count_acquire(req, GW_ACQ_unavailable);
    snprintf(retry, sizeof retry, "%lld", (long long)((retry_ms + 999) / 1000));
    if (call->over_share) {
        unsigned int share = gw__loops_waiter_share(req->srv->loops);
        resp = gw__error_response(
            "too_many_waiters",
            json_pack("{s:s, s:I, s:I}", "resource", call->turn.resource, "retry_after_ms",
                      (json_int_t)retry_ms, "max_waiters_per_address", (json_int_t)share),
            "%s is held by another owner, and %u requests of this client address are waiting "
            "already (7/8 of --max-connections-per-address)",
            call->turn.resource, share);
    } else {
        resp = gw__error_response(
            "too_many_waiters",
            json_pack("{s:s, s:I, s:i}", "resource", call->turn.resource, "retry_after_ms",
                      (json_int_t)retry_ms, "max_waiters", req->srv->cfg->max_waiters),
            "%s is held by another owner, and %d requests are waiting already (--max-waiters)",
            call->turn.resource, req->srv->cfg->max_waiters);
    }
    if (resp != NULL) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, retry);
        if (call->over_share) {
            MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
        }
    }
    return gw__queue(req, MHD_HTTP_SERVICE_UNAVAILABLE, resp);
}

/* What an attempt answered, when the wait is over. */
static enum MHD_Result answer_attempt(gw_request *req, struct gw_lock_call *call,
                                      lk_status st, const lk_result *res, const char *why)
{
    gw_server *srv = req->srv;

    int64_t held_ms = -1, holder_token = 0;
    if (st == LK_ACQUIRED) {
        held_ms = res->ttl_ms > 0 ? res->ttl_ms : call->ttl_ms;
        if (call->marked && !res->replayed && res->holds == 1 &&
            call->turn.refused == ATTEMPT_ASKED && call->turn.cover == STORE_OK) {
            gw__wait_note_holder(srv->waitq, &call->waiter, call->owner, res->token, held_ms);
        }
    } else if (st == LK_HELD && call->turn.refused == ATTEMPT_ASKED) {
        /* The holder Redis found, its time left (on Redlock the shortest of the majority's;
         * for a fair attempt at most the queue's retry hint, when the lock is free but
         * another waiter is first): a timer that fires early costs one attempt. */
        held_ms = res->ttl_ms;
        holder_token = res->holder_token;
    }
    gw__wait_end(srv->waitq, &call->waiter, held_ms, holder_token);
    if (st != LK_ACQUIRED) {
        leave_fair_queue(req, call);
    }
    if (call->turn.refused == ATTEMPT_STORE_FAILED) {
        count_acquire(req, GW_ACQ_unavailable);
        return gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "backend_unavailable", NULL,
                              "storage could not be read to fence the token");
    }
    if (call->turn.refused == ATTEMPT_NOMEM) {
        count_acquire(req, GW_ACQ_error);
        return gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "backend_unavailable", NULL,
                              "the gateway is out of memory; the lock was not taken");
    }
    if (call->turn.refused == ATTEMPT_STRIPE_BUSY) {
        count_acquire(req, GW_ACQ_unavailable);
        return gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "backend_unavailable", NULL,
                              "the lock service (Redis) is answering slowly and earlier "
                              "attempts on this resource are still running; try again");
    }
    if (st == LK_ACQUIRED) {
        if (call->turn.cover != STORE_OK) {
            return res->replayed ? answer_uncovered(req, call, res->token)
                                 : undo_then(req, call, res->token, THEN_ANSWER_UNCOVERED);
        }
        /* Every attempt is suspended while it waits for its stripe and for Redis, and MHD
         * does not watch a suspended connection: its client may have hung up meanwhile. An
         * answer written to a closed socket may still complete "OK", so look now. An end of
         * file may be a half-close, whose client still reads: it is answered, and
         * lock_completed() looks again once the answer is written. */
        gw_peer peer = res->replayed ? GW_PEER_OPEN : gw__conn_peer(req->conn);
        if (peer == GW_PEER_GONE) {
            /* The client hung up while the lock was taken: nobody will use this hold. */
            give_back(srv, call, res->token, 0);
            count_acquire(req, GW_ACQ_abandoned);
            return MHD_NO;
        }
        enum MHD_Result answered = answer_acquired(req, call, res);
        if (call->acquired && peer == GW_PEER_EOF) {
            call->acquired = ACQUIRED_AFTER_EOF;
        }
        return answered;
    }
    if (st == LK_HELD) {
        return call->over_share ? answer_too_many_waiters(req, call, res)
                                : answer_locked(req, call, res);
    }
    count_acquire(req, st == LK_EUNAVAILABLE     ? GW_ACQ_unavailable
                       : st == LK_EIDEMPOTENCY   ? GW_ACQ_idempotency_conflict
                       : st == LK_EINVAL         ? GW_ACQ_invalid
                                                 : GW_ACQ_error);
    return gw__send_lk_error(req, why, st);
}

/* Sends an attempt whose connection conn is suspended: its stripe's turn, then the
 * pipeline (see "Attempts in the pipeline"). Returns 1 when it went to the pipeline now; 0
 * when it waits for its stripe, or was answered without Redis (then it may be resumed, and
 * even freed, already). */
static int attempt_send(gw_server *srv, struct gw_lock_call *call, struct MHD_Connection *conn)
{
    call->turn.refused = ATTEMPT_ASKED;
    call->turn.cover = STORE_OK;
    call->attempt = NULL;
    call->waiter.conn = conn; /* the same connection it parks, if it does */
    call->stage = LOCK_ATTEMPTING;
    gw_floor floor;
    if (gw__fence_enter(&srv->fence, &call->turn, &floor)) {
        return stripe_send_first(&srv->fence, &call->turn, floor);
    }
    return 0; /* the fence sends it in turn */
}

/*
 * Known holders. In a queue of waiters on one lock, every holder's release is followed by
 * attempts: the one waiter it wakes or hands the lock to, and each new waiting /lock (the
 * holder that just released often asks again at once). A new waiting request that found
 * the lock held used to learn it from Redis: a script call that holds the resource's
 * stripe (fence.c) for a round trip, so the hand-off behind the next release queued behind
 * it and went out alone. Now, when this gateway just granted the lock to another owner in
 * an attempt that marked it wanted (so its release publishes a message naming its token),
 * and since then no message released that token or a later one, and no expiry timer or
 * resubscription moved the resource's epoch (waiters.c), a new waiting /lock parks at once,
 * as if its attempt had answered HELD with that lease: what it would have been answered.
 * What may differ, and why it is safe:
 *   - The holder released through another gateway, or its hold was given back: the release
 *     publishes (the lock was marked wanted) and its message voids what is known; a request
 *     parked before it came is woken by it, or retried at once (gw__wait_park).
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
    gw_server *srv = req->srv;
    lk_result res = {.ttl_ms = held_ms, .queue_pos = -1};

    call->stage = LOCK_PARKED;
    /* As if Redis had answered HELD with the known holder's token: a release message of an
     * older hold since this request began (a hand-off's, say) does not send it to Redis. */
    switch (gw__wait_park(srv->waitq, &call->waiter, req->conn, call->deadline_ms, held_ms,
                          token)) {
    case GW_PARKED:
        atomic_fetch_add(&srv->metrics.parked_unasked, 1);
        *result = MHD_YES;
        return 1;
    case GW_PARK_SHUTDOWN:
        *result = answer_stopped(req, call);
        return 1;
    case GW_PARK_FULL:
        *result = answer_too_many_waiters(req, call, &res);
        return 1;
    case GW_PARK_RETRY:
    case GW_PARK_NOMEM:
        break;
    }
    call->stage = LOCK_ATTEMPTING;
    return 0; /* ask Redis after all */
}

/* Starts an attempt of the lock through the pipeline: suspends the connection and returns;
 * lock_answered() goes on when the answer is in. Called on the first pass, on every wake,
 * and again when a release came during an attempt. */
static enum MHD_Result lock_attempt(gw_request *req, struct gw_lock_call *call)
{
    gw_server *srv = req->srv;

    call->waiting = (unsigned char)(call->wants_wait && !call->last);
    call->waiter.fair = call->fair;
    if (call->waiting && gw__wait_begin(srv->waitq, &call->waiter, call->turn.resource) != 0) {
        call->waiting = 0;
    }
    if (call->waiting && !call->fair && call->idem_key[0] == '\0' && call->supersede == 0) {
        int64_t token = 0;
        int64_t held_ms = gw__wait_known_held(srv->waitq, &call->waiter, call->owner, &token);
        if (held_ms > 0 && call->deadline_ms > gw__now_ms()) {
            enum MHD_Result parked = 0;
            if (park_unasked(req, call, held_ms, token, &parked)) {
                return parked;
            }
        }
    }
    MHD_suspend_connection(req->conn);
    (void)attempt_send(srv, call, req->conn);
    return MHD_YES;
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
 * Nothing about the attempt changes: it is the one the waiter would have made when woken,
 * with its own stripe turn and floor (fence.c), answered by lock_answered() on its own
 * thread. It is only sent early, on the releasing request's thread, while the waiter's
 * connection stays suspended (a claimed waiter is this code's alone: waitd no longer
 * touches it). What may differ:
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
 *     before the attempt; on a cluster both go to the resource's slot owner, in order.
 *   - A request may park unasked (below, "Known holders") between the claim and the
 *     answer, on a holder that the release ends: a non-fair hand-off attempt is therefore
 *     always sent as marking the lock wanted if it takes it (lk_call.others_waiting), so
 *     that the grant's release publishes and wakes it; a fair one forgets the holder.
 *   - The gateway is killed after the release is sent: the attempt may or may not have
 *     run; its hold, if granted, was never answered to anybody and ends with its lease, as
 *     any answer lost to a crash. The waiter's client sees its connection close.
 *   - The waiter's client hung up while parked: it is no longer watched once claimed, so
 *     the attempt may take the lock for nobody; its answer finds the socket gone and gives
 *     the hold back (lock_answered, as for any attempt), which wakes the next waiter.
 *   - The hand-off waiter's own deadline is due: claimed only when no other parked waiter
 *     has time left, as a wake would choose (rt/waitq.c, gw__wq_wake_one).
 */
int gw__lock_handoff(gw_server *srv, const char *resource)
{
    /* Most unlocks have nobody parked anywhere: no lock to take, no lookup. A waiter that
     * parks meanwhile is woken by the release's message, as without hand-offs. */
    if (atomic_load(&srv->metrics.waiters_parked) <= 0) {
        return 0;
    }
    gw_waiter *w = gw__wait_claim(srv->waitq, resource);
    if (w == NULL) {
        return 0;
    }
    struct gw_lock_call *call =
        (struct gw_lock_call *)((char *)w - offsetof(struct gw_lock_call, waiter));
    call->last = 0;
    call->waiting = 1; /* it parked, so it waits, and its reference is held */
    call->handed_off = 1;
    if (!attempt_send(srv, call, w->conn)) {
        gw__wait_handoff_settled(srv->waitq, resource, 0); /* call may be gone: not read */
        return 0;
    }
    atomic_fetch_add(&srv->metrics.handoffs, 1);
    return 1;
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
 * The caller gives the hold back before the next attempt (undo_then). A keyed request's
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
    atomic_fetch_add(&req->srv->metrics.floor_corrections, 1);
    return 1;
}

/* ATTEMPTING, resumed once the attempt is answered: answer it, or park the request while the
 * lock is held and wait time is left (see waiters.c). */
static enum MHD_Result lock_answered(gw_request *req, struct gw_lock_call *call)
{
    gw_server *srv = req->srv;
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
        }
        res = at->call.res;
        call->marked = (unsigned char)at->call.others_waiting;
        snprintf(why, sizeof why, "%s", at->call.err);
        attempt_free(at);
        gw__note_redis(srv, st);
    } else {
        st = call->turn.refused == ATTEMPT_STRIPE_BUSY ? LK_EUNAVAILABLE : LK_EREDIS;
    }
    if (st == LK_ACQUIRED && refused_fresh_grant(req, call, &res)) {
        return undo_then(req, call, res.token, THEN_ATTEMPT);
    }
    int64_t left = call->deadline_ms - gw__now_ms();
    if (st != LK_HELD || !call->waiting || left <= 0) {
        return answer_attempt(req, call, st, &res, why);
    }
    call->stage = LOCK_PARKED; /* what resumes it now, unless it is answered below */
    switch (gw__wait_park(srv->waitq, &call->waiter, req->conn, call->deadline_ms,
                          res.ttl_ms >= 0 ? res.ttl_ms : -1, res.holder_token)) {
    case GW_PARKED:
        return MHD_YES;
    case GW_PARK_RETRY:
        return lock_attempt(req, call);
    case GW_PARK_SHUTDOWN:
        return answer_stopped(req, call);
    case GW_PARK_FULL:
        return answer_too_many_waiters(req, call, &res);
    case GW_PARK_NOMEM:
        break;
    }
    return answer_attempt(req, call, st, &res, why);
}

/* PARKED, resumed by waiters.c: act on why it was woken. */
static enum MHD_Result lock_woken(gw_request *req, struct gw_lock_call *call)
{
    gw_waiter *w = &call->waiter;
    gw_wake reason = w->reason;

    w->state = GW_WAITER_IDLE;
    restart_idle_timer(req->conn);
    if (reason == GW_WAKE_SHUTDOWN) {
        return answer_stopped(req, call);
    }
    gw_peer peer = gw__conn_peer(req->conn);
    if (reason == GW_WAKE_DISCONNECT || peer != GW_PEER_OPEN) {
        /* Gone, or closed its side: a lock taken now might be for nobody, so end without
         * acting. A release it was woken for is passed on to the next waiter
         * (gw__wait_end). A client that only half-closed still reads: tell it why. */
        gw__wait_end(req->srv->waitq, w, -1, 0);
        leave_fair_queue(req, call);
        count_acquire(req, GW_ACQ_abandoned);
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
    return lock_attempt(req, call);
}

/* GIVING_BACK, resumed by the pipeline once the give-back is answered: whatever it
 * answered (a failed one leaves the hold to its lease), go on. */
static enum MHD_Result lock_given_back(gw_request *req, struct gw_lock_call *call)
{
    attempt_free(call->attempt);
    call->attempt = NULL;
    if (call->then == THEN_ATTEMPT) {
        return lock_attempt(req, call);
    }
    return answer_uncovered(req, call, call->token);
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
    enum MHD_Result result = MHD_YES;

    if (gw__parse_object(req, &root, &result) != 0 || gw__lock_args(req, root, &a, &result) != 0) {
        count_acquire(req, GW_ACQ_invalid);
        json_decref(root);
        return result;
    }
    if (a.fair && strncmp(req->srv->cfg->redis_url, "redlock://", 10) == 0) {
        /* A FIFO queue across independent masters is not built: say so instead of giving
         * a lock that is not fair (README, "Redis topologies"). */
        count_acquire(req, GW_ACQ_invalid);
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
        call->wait_place = (unsigned char)gw__loops_wait_take(req->srv->loops, req->slot);
        call->over_share = (unsigned char)!call->wait_place;
        call->wants_wait = call->wait_place;
    }
    call->fair = (unsigned char)a.fair;
    call->deadline_ms = gw__now_ms() + a.wait_ms;
    call->waiter.fd = -1;
    call->waiter.timer.idx = GW_TIMER_OFF;
    req->op_state = call;
    json_decref(root);
    free(req->body); /* a parked waiter keeps only what it needs */
    req->body = NULL;
    req->body_len = req->body_cap = 0;
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
    }
    gw__wait_end(req->srv->waitq, &call->waiter, -1, 0);
    leave_fair_queue(req, call);
    if (at != NULL) {
        /* The answer came in, but when the pipeline resumed the connection libmicrohttpd
         * found the client gone and ended the request without resuming the operation
         * (lock_answered), so nobody looked at the answer. A hold it took would stay for
         * its whole lease: give it back (if that release fails, Redis gone, the lease ends
         * it). A replayed answer took nothing. */
        if (at->call.kind != LK_CALL_RELEASE && at->call.status == LK_ACQUIRED &&
            !at->call.res.replayed) {
            give_back(req->srv, call, at->call.res.token, 0);
        }
        call->attempt = NULL;
        attempt_free(at);
    }
    /* A client that had closed its side was answered in case it only half-closed; if it had
     * closed for good, the answer drew a reset (at once over loopback, a round trip later
     * over a network, when the lease ends the hold instead). */
    int reset = call->acquired == ACQUIRED_AFTER_EOF && gw__conn_peer(req->conn) == GW_PEER_GONE;
    if (call->acquired && (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK || reset)) {
        /* The answer never reached the client (it disconnected as the lock was taken):
         * give the hold back, so no lock stays held for a client that is gone. */
        give_back(req->srv, call, call->token, 1);
        /* Its outcome is that of a client gone as the lock was taken, as when that is seen
         * before answering. */
        atomic_fetch_sub(&req->srv->metrics.acquire[call->counted - 1], 1);
        count_acquire(req, GW_ACQ_abandoned);
    }
    if (!call->counted) {
        /* Ended without an answer: MHD found the client gone when it resumed the waiter. */
        count_acquire(req, GW_ACQ_abandoned);
    }
    if (call->wait_place) {
        gw__loops_wait_give(req->srv->loops, req->slot);
    }
    gw__wait_free(req->srv->waitq, &call->waiter, call);
    req->op_state = NULL;
}

const gw_op gw__op_lock = {lock_start, lock_resumed, lock_completed};

/* A GET /locks/{resource} on the side pipeline (pipe.c): the status read runs on a side
 * thread, so a slow Redis delays this answer and no server thread. Freed at completion. */
struct gw_status_read {
    gw_job job;
    gw_server *srv;
    const char *resource;       /* req->param: valid while the request lives */
    lk_status st;
    lk_lock_info info;
    char err[256];              /* lk_errstr() of the side thread's handle, "" for none */
};

static void status_work(gw_job *job)
{
    struct gw_status_read *sr = job->arg;
    lk_client *c = gw__client(sr->srv);

    sr->st = c != NULL ? lk_lock_status(c, sr->resource, &sr->info) : LK_ENOMEM;
    gw__note_redis(sr->srv, sr->st);
    if (sr->st != LK_OK && c != NULL) {
        snprintf(sr->err, sizeof sr->err, "%s", lk_errstr(c));
    }
}

static enum MHD_Result status_start(gw_request *req)
{
    enum MHD_Result result = MHD_YES;

    if (gw__path_resource(req, &result) != 0) {
        return result;
    }
    struct gw_status_read *sr = calloc(1, sizeof *sr);
    if (sr != NULL) {
        sr->srv = req->srv;
        sr->resource = req->param;
    }
    return gw__pipe_offload(req, req->srv->side, sr, sr != NULL ? &sr->job : NULL, status_work);
}

static enum MHD_Result status_resumed(gw_request *req)
{
    const struct gw_status_read *sr = req->op_state;
    const lk_lock_info *info = &sr->info;

    if (sr->st != LK_OK) {
        return gw__send_lk_error(req, sr->err[0] != '\0' ? sr->err : NULL, sr->st);
    }
    if (!info->locked) {
        return gw__send_json(req, MHD_HTTP_OK,
                             json_pack("{s:s, s:b, s:I}", "resource", req->param, "locked", 0,
                                       "last_token", (json_int_t)info->last_token));
    }
    /* Never the owner: it is the capability to release the lock. */
    return gw__send_json(req, MHD_HTTP_OK,
                         json_pack("{s:s, s:b, s:I, s:I, s:I, s:I}", "resource", req->param,
                                   "locked", 1, "token", (json_int_t)info->token, "holds",
                                   (json_int_t)info->holds, "ttl_ms", (json_int_t)info->ttl_ms,
                                   "last_token", (json_int_t)info->last_token));
}

const gw_op gw__op_lock_status = {status_start, status_resumed, NULL};
