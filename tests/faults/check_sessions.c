/*
 * Invariant 14 (check.h): once a session's end (DELETE /sessions/{id}, a session_end line)
 * was answered 200, the gateway had released every lock of the session and fenced each of
 * them durably, so no write with the token of one of its locks that starts after that answer
 * may be accepted, whoever sends it.
 *
 * A session is named by its workload LABEL: lock grants in it carry body "session:LABEL".
 * Each end costs one pass over the history for its grants and one for the writes, so the
 * cost is the number of ends times the history's length.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* The label of the session a grant was taken in, or NULL. */
static const char *session_of(const fh_op *op)
{
    if (op->kind != FH_LOCK || op->status != 200 || strncmp(op->body, "session:", 8) != 0) {
        return NULL;
    }
    return op->body + 8;
}

void fc_check_sessions(const fh_history *h, fc_report bad, void *arg)
{
    for (size_t i = 0; i < h->n; i++) {
        const fh_op *end = &h->ops[i];
        if (end->kind != FH_SESSION_END || end->status != 200) {
            continue;
        }
        for (size_t j = 0; j < h->n; j++) {
            const fh_op *grant = &h->ops[j];
            const char *label = session_of(grant);
            if (label == NULL || strcmp(label, end->owner) != 0) {
                continue;
            }
            for (size_t k = 0; k < h->n; k++) {
                const fh_op *w = &h->ops[k];
                if (w->kind == FH_WRITE && w->status == 200 && w->token == grant->token &&
                    w->start_ns > end->end_ns && strcmp(w->resource, grant->resource) == 0) {
                    bad(arg, "a write with the token of a session's lock was accepted after "
                             "the session's end was answered", end, w);
                }
            }
        }
    }
}
