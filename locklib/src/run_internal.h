/* Running calls over a transport: each call built by its kind, the batch sent, each reply
 * decoded by its kind (run.c). Layer: above calls and transport. Never installed. */
#ifndef LOCKLIB_RUN_INTERNAL_H
#define LOCKLIB_RUN_INTERNAL_H

#include "calls_internal.h"
#include "transport_internal.h"

/* Runs n calls as one batch on t. Each call's status, outcome and reason (err) are set
 * exactly as its kind's build() and decode() and the transport decide: a call its build()
 * refuses is not sent. Kinds above last_kind are refused as unknown (lk_call_many() passes
 * LK_CALL_FORCE_RELEASE, so LK__CALL_STATUS stays internal). Nothing else happens: no
 * watchdog, no WAIT (locks.c does those). */
void lk__run(lk__transport *t, const lk_options *opts, lk_call *const *calls, size_t n,
             lk_call_kind last_kind);

#endif
