/*
 * The fault suite's checker: verifies issue 7's invariants over a history (history.h).
 *
 *   1. a token goes to one owner per resource;
 *   2. a grant that starts after another grant finished gets a larger token;
 *   3. accepted writes ordered by version have non-decreasing tokens; no version is reused;
 *   4. a write with a token below an acknowledged write that finished before it started is
 *      409 stale_token, never 200; a client frozen or robbed of its lease is not the owner;
 *   5. a read (during the run or final) returns the last write acknowledged before it started
 *      or a later one, whose outcome was acknowledged or unknown, never a refused write's
 *      bytes; its token never goes below an acknowledged one;
 *   6. a forged token gets 403 and moves nothing;
 *   7. lease windows of different owners do not overlap (reported only, never a failure);
 *   8. every request ends within wait_ms + 5 s with an answer that is not a 5xx other than
 *      503 (no answer at all counts only when the client timed out); after a "heal" mark the
 *      first success comes within 5 s.
 */
#ifndef FG_FAULTS_CHECK_H
#define FG_FAULTS_CHECK_H

#include <stdio.h>

#include "history.h"

#define FC_INVARIANTS 9 /* index 1..8 used */

typedef struct fc_result {
    long violations[FC_INVARIANTS]; /* per invariant; 7 and 0 (notes) are soft */
    long hard;                      /* all but 7 */
    long fenced;                    /* after_pause/after_steal writes answered 409 stale_token */
    long ops;
} fc_result;

/* Checks h (its operations are reordered) and prints each violation to out (may be NULL),
 * naming the operations by client, kind and line. Fills res. Returns res->hard. */
long fc_check(fh_history *h, FILE *out, fc_result *res);

#endif
