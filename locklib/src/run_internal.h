/* Running calls over a transport: each call built by its kind, the batch sent, each reply
 * decoded by its kind (run.c). Layer: above calls and transport. Never installed. */
#ifndef LOCKLIB_RUN_INTERNAL_H
#define LOCKLIB_RUN_INTERNAL_H

#include "calls_internal.h"
#include "transport_internal.h"

/* Runs n calls as one batch on t. Each call's status, outcome and reason (err) are set
 * exactly as its kind's build() and decode() and the transport decide: a call its build()
 * refuses is not sent. Kinds above last_kind are refused as unknown (lk_call_many() passes
 * LK_CALL_TOKEN_CHECK, so the LK__CALL_* kinds stay internal). Nothing else happens: no
 * watchdog, no WAIT (locks.c does those). */
void lk__run(lk__transport *t, const lk_options *opts, lk_call *const *calls, size_t n,
             lk_call_kind last_kind);

/* lk__run() in steps, for a caller that carries the batch itself (lk_batch_start() in
 * locks.c): lk__run_build() builds every call (a call its build() refuses gets its status
 * now) and leaves the commands to send in r->sent[0..r->m), whose outcomes go to
 * lk__run_done with r as its ctx; lk__run_free() frees them once every one is answered. On
 * ENOMEM every call is answered and r->m is 0. calls must outlive r. */
typedef struct lk__runner {
    lk__transport *t;
    lk_call *const *calls;
    size_t m;                  /* commands to send */
    const lk__cmd **sent;
    size_t *index;             /* the call each sent command belongs to */
    lk__cmd *cmds;
    size_t n;
    lk__cmd one_cmd;           /* n <= 1, the common case: no allocation */
    const lk__cmd *one_sent;
    size_t one_index;
} lk__runner;

void lk__run_build(lk__runner *r, lk__transport *t, const lk_options *opts,
                   lk_call *const *calls, size_t n, lk_call_kind last_kind);
void lk__run_done(void *ctx, size_t j, lk_status st, redisReply *reply);
void lk__run_free(lk__runner *r);

#endif
