/*
 * POST /lock's inside (lock.c, lock_answer.c, lock_attempt.c): the call's state and what the
 * three files call of each other. Never included outside ops/.
 */
#ifndef GATEWAY_LOCK_INTERNAL_H
#define GATEWAY_LOCK_INTERNAL_H

#include <stdint.h>

#include <microhttpd.h>

#include "locklib/locklib.h"

#include "core/fence.h"
#include "core/job.h"
#include "http/request.h"
#include "rt/metrics.h"
#include "rt/waiters.h"

/* What resumes a /lock whose connection is suspended. */
typedef enum lock_stage {
    LOCK_ATTEMPTING,     /* its attempt is in the fence's line or the pipeline */
    LOCK_PARKED,         /* parked in waiters.c */
    LOCK_GIVING_BACK,    /* a give-back is in the pipeline; then_* says what comes next */
    LOCK_SESSION         /* its session's lookup or record is on a side thread
                          * (ops/session_lock.c) */
} lock_stage;

/* What a /lock does once its give-back is answered (gw__lock_undo_then). */
enum {
    THEN_ATTEMPT,          /* attempt again (above the shared ledger) */
    THEN_ANSWER_UNCOVERED, /* answer 503: the ledger could not cover the token */
    THEN_ABANDON           /* end without an answer: the client hung up */
};

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
    unsigned char shared;                /* "mode": "shared" */
    unsigned char fair_queued;           /* may have an entry in the fair queue */
    unsigned char maybe_granted;        /* a release may have granted it the lock in its
                                          * script, and no answer has shown otherwise yet
                                          * (ops/lock_attempt.c, "Hand-offs"): its attempts
                                          * claim, and its exit gives such a grant back */
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
    unsigned char queue_next;            /* its next attempt queues it in Redis for a
                                          * hand-off if answered held (it was woken to race
                                          * for the lock: ops/lock_attempt.c, "Hand-offs") */
    unsigned char lined;                 /* its attempt waits in its stripe's line, counted
                                          * in its resource's (gw__wait_lined) */
    unsigned char line_sent;             /* its attempt left that line for Redis: a waiter
                                          * may have parked counting on its answer */
    unsigned char marked;                /* its last attempt marked the lock wanted if it
                                          * took it (lk_call.others_waiting) */
    unsigned char then;                  /* THEN_*: after LOCK_GIVING_BACK */
    unsigned char wait_place;            /* holds a waiting place of its client's address
                                          * (gw__loops_wait_take) */
    unsigned char over_share;            /* wanted to wait, but its address's waiters had
                                          * their share: one attempt, then 503 if held */
    unsigned char over_client;           /* the same for its client's waiters (--clients) */
    int client_place;                    /* its client's waiting place, -1: none
                                          * (gw__metrics_client_wait_take) */
    gw_fence_turn turn;                  /* its place in its stripe's line (fence.c); its
                                          * refused says why it was answered without Redis
                                          * (ATTEMPT_*) */
    struct gw_attempt *attempt;          /* the call in the pipeline, NULL when refused */
    struct gw_session_lock *session;     /* "session": its steps (ops/session_lock.c), or
                                          * NULL */
    gw_waiter waiter;
    char text[];                         /* resource, owner and key, each NUL-terminated */
};

/* gw_lock_call.acquired when the client had closed its sending side as it was answered. */
#define ACQUIRED_AFTER_EOF 2

/* Why an attempt was answered without asking Redis (gw_lock_call.turn.refused). */
enum { ATTEMPT_ASKED, ATTEMPT_STORE_FAILED, ATTEMPT_STRIPE_BUSY, ATTEMPT_NOMEM };

/* A call in the Redis pipeline: an attempt or a give-back (lock_attempt.c, "Attempts in the
 * pipeline"). */
typedef struct gw_attempt {
    gw_job job;                          /* job.link links the free list */
    lk_call call;
} gw_attempt;

/* ---- lock_answer.c: answers (their comments are there) ----------------------------- */

void gw__lock_count_acquire(gw_request *req, gw_acquire_outcome o);
void gw__lock_leave_fair_queue(gw_request *req, struct gw_lock_call *call);
enum MHD_Result gw__lock_answer_uncovered(gw_request *req, const struct gw_lock_call *call,
                                          int64_t token);
enum MHD_Result gw__lock_answer_stopped(gw_request *req, struct gw_lock_call *call);
/* The most parked /locks of one client (--clients): all but an eighth of --max-waiters. */
int gw__lock_client_waiters(const gw_rt *rt);
enum MHD_Result gw__lock_answer_too_many_waiters(gw_request *req, struct gw_lock_call *call,
                                                 const lk_result *res);
enum MHD_Result gw__lock_answer_attempt(gw_request *req, struct gw_lock_call *call,
                                        lk_status st, const lk_result *res, const char *why);

/* ---- lock_attempt.c: attempts, give-backs and fair-queue exits (comments there) ----- */

void gw__lock_attempt_free(gw_attempt *at);
int gw__lock_attempt_send(gw_rt *rt, struct gw_lock_call *call, struct MHD_Connection *conn);
void gw__lock_send_errand(gw_rt *rt, const struct gw_lock_call *call, lk_call_kind kind,
                          int64_t token, int uncount_held);
void gw__lock_give_back(gw_rt *rt, const struct gw_lock_call *call, int64_t token,
                        int uncount_held);
enum MHD_Result gw__lock_undo_then(gw_request *req, struct gw_lock_call *call, int64_t token,
                                   int then);

#endif
