/*
 * The fault suite's checker: verifies the invariants over a history (history.h).
 *
 *   1. a token goes to one owner per resource;
 *   2. a grant that starts after another grant finished gets a larger token;
 *   3. accepted writes ordered by version have non-decreasing tokens; no version is reused;
 *   4. a write with a token below an acknowledged write that finished before it started is
 *      409 stale_token, never 200; so is a late write of a client frozen or robbed of its
 *      lease (flag after_pause or after_steal) once a grant with a larger token finished
 *      before it started, even if that grant's holder has not written yet; and such a
 *      client's renew and unlock are 409 not_owner;
 *   5. a read (during the run or final) returns the last write acknowledged before it started
 *      or a later one, whose outcome was acknowledged or unknown, never a refused write's
 *      bytes; its token never goes below an acknowledged one;
 *   6. a forged token gets 403 and moves nothing;
 *   7. lease windows of different owners do not overlap, from the clients' view: a window
 *      runs from the end of a grant to its start + ttl_ms, extended by successful renews and
 *      cut at the start of its unlock, whatever the answer (an unlock answered 503 may have
 *      run in Redis, and its client gave the lease up); a lock taken in a session is also
 *      extended by the session's successful renewals and cut at the start of its end. Reported only, unless fc_options says
 *      strict_leases (for scenarios in which Redis loses no data);
 *   8. every request ends within wait_ms + 5 s with an answer that is not a 5xx other than
 *      503 (no answer at all counts only when the client timed out); after a "heal" mark the
 *      first success comes within 5 s; and a lost holder's lock is taken over (below);
 *  10. a forced release fences its holder: once a force answered 200 with fenced_token T,
 *      no write with T on that resource that starts after the answer is accepted, no renew
 *      of T succeeds, and T's holder's unlock is 409 unless it was granted the lock again
 *      since. Its lease window (invariant 7) ends at the start of the force;
 *  11. fenced transactions between accounts (txn and balance lines, check_txn.c): none is
 *      half visible, none acknowledged is lost, none refused is written, each wrote the sum
 *      it read, and the final balances add up to the total;
 *  13. no exclusive holder while a shared lease runs, nor a shared holder while an exclusive
 *      lease runs: no grant of one mode to one owner is answered with its whole request
 *      inside a lease window (as in 7) of the other mode of another owner. Shared grants
 *      (flag shared) share a token and overlap each other: invariants 1, 2 and 7 look at the
 *      exclusive grants only;
 *  14. no write with a token granted in shared mode is accepted: a write answered 200 after
 *      a shared grant of its resource with a token at or above its own was answered before
 *      it started is a violation (the store refuses it 409 not_exclusive);
 *  12. a fenced read (a read with a Fencing-Token) is never answered 200 once a grant of a
 *      larger token for its resource had been answered before the read started: that token's
 *      lease was over, and the value may have changed under it;
 *  14. no write by a session's lock is accepted after the session's end was answered: once a
 *      session_end answered 200, a write with the token of any lock granted in that session
 *      (body "session:LABEL") on that lock's resource that starts after the answer is never
 *      200 (check_sessions.c).
 *
 * Marks the checker reads (kind mark, the event in the body):
 *   heal            the fault is over: the first success must come within 5 s.
 *   freeze, thaw    the gateway was frozen (SIGSTOP) between a freeze mark and the next thaw
 *                   mark (or the end of the history if none follows). A request overlapping
 *                   such a window may take wait_ms + 5 s plus the window's length, and may
 *                   end without an answer because its client timed out: only invariant 8's
 *                   latency bound is relaxed, never 1-7 or the 5xx rule.
 *   holder_killed,  a lock holder (the mark's owner, on the mark's resource, with a lease of
 *   holder_frozen   the mark's ttl_ms) was killed with SIGKILL, or frozen with SIGSTOP (and
 *                   killed later), before the mark was written. The first lock request of
 *                   another owner on that resource that starts after the mark, if its
 *                   wait_ms reaches 1 s past the mark + ttl_ms (the dead holder's lease can
 *                   last no longer, whatever its watchdog renewed before), must be granted
 *                   (invariant 8; 503 and no answer excepted). Each grant counts as a
 *                   takeover in fc_result.
 */
#ifndef FG_FAULTS_CHECK_H
#define FG_FAULTS_CHECK_H

#include <stdio.h>

#include "history.h"

#define FC_INVARIANTS 16 /* index 1..8 and 10..15 used (9 is the runner's RSS bound) */

typedef struct fc_options {
    int strict_leases; /* invariant 7 is a hard violation, not only reported */
    int lost_grants;   /* Redis may lose a grant and the store keeps no grant per resource
                        * (LMDB): invariant 12 is only reported (docs/api.md, "Fenced
                        * reads") */
} fc_options;

typedef struct fc_result {
    long violations[FC_INVARIANTS]; /* per invariant; 0 (notes) and, unless strict, 7 are soft */
    long hard;                      /* all but the soft ones */
    long fenced;     /* after_pause/after_steal writes (and paused clients' transactions)
                        answered 409 stale_token */
    long txns;       /* transactions acknowledged (200) */
    long superseded; /* of those, the ones refused only because a newer grant had finished,
                        with no acknowledged write of a larger token before them */
    long takeovers;  /* locks of killed or frozen holders granted to the next owner */
    long fenced_reads; /* fenced reads of frozen or robbed clients answered 409 stale_token
                          after a larger token's grant had finished */
    long ops;
} fc_result;

/* A write or transaction that may have been made though it was not acknowledged: no answer,
 * or 503 outcome_unknown (its commit reached the store and the answer was lost). Any other
 * answer but 200 means it was not made (check.c). */
int fc_maybe_made(const fh_op *op);

/* A violation found by a part of the checker, with the operations involved (may be NULL). */
typedef void (*fc_report)(void *arg, const char *why, const fh_op *a, const fh_op *b);

/* Invariant 11 over h's txn, balance and "total" lines (check_txn.c): calls bad for each
 * violation, note for each excused race (reported only). */
void fc_check_txn(const fh_history *h, fc_report bad, void *arg, fc_report note);

/* Invariant 14 over h's session_end lines and the locks and writes of their sessions
 * (check_sessions.c): calls bad for each violation. */
void fc_check_sessions(const fh_history *h, fc_report bad, void *arg);

/* Checks h (its operations are reordered) and prints each violation to out (may be NULL),
 * naming the operations by client, kind and line. opt may be NULL (every option off). Fills
 * res. Returns res->hard. */
long fc_check(fh_history *h, const fc_options *opt, FILE *out, fc_result *res);

#endif
