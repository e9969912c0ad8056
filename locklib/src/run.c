/*
 * lk__run(): build, send, decode. The one place where the call kinds (calls.c) meet a
 * transport (transport.c), so neither knows the other: a transport for Cluster, Sentinel or
 * Redlock replaces lk__transport_run() without touching a call kind, and a new call kind
 * needs no transport code.
 */
#include <stdio.h>
#include <stdlib.h>

#include "run_internal.h"

typedef struct run_ctx {
    lk__transport *t;
    lk_call *const *calls;
    const size_t *index; /* the call each sent command belongs to */
} run_ctx;

/* One sent command's outcome, from the transport. */
static void done(void *ctx, size_t j, lk_status st, redisReply *reply)
{
    run_ctx *r = ctx;
    lk_call *call = r->calls[r->index[j]];

    if (reply != NULL) {
        st = lk__call_kind_of(call->kind)->decode(call, reply, call->err);
    } else if (st >= LK_EINVAL) {
        snprintf(call->err, sizeof call->err, "%s", r->t->err);
    }
    /* else: an outcome with no reply, decoded by the transport into call (cmd->out). */
    freeReplyObject(reply);
    call->status = st;
    if (st < LK_EINVAL) {
        call->err[0] = '\0'; /* an outcome has no reason */
    }
}

void lk__run(lk__transport *t, const lk_options *opts, lk_call *const *calls, size_t n,
             lk_call_kind last_kind)
{
    /* A single call, the common case, needs no allocation. */
    lk__cmd one_cmd;
    const lk__cmd *one_sent = NULL;
    size_t one_index = 0;
    lk__cmd *cmds = n <= 1 ? &one_cmd : malloc(n * sizeof *cmds);
    const lk__cmd **sent = n <= 1 ? &one_sent : malloc(n * sizeof *sent);
    size_t *index = n <= 1 ? &one_index : malloc(n * sizeof *index);
    size_t m = 0;

    for (size_t i = 0; i < n; i++) {
        lk__call_reset(calls[i]);
    }
    if (cmds == NULL || sent == NULL || index == NULL) {
        for (size_t i = 0; i < n; i++) {
            calls[i]->status = lk__errf(calls[i]->err, LK_ENOMEM, "out of memory");
        }
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        lk_call *call = calls[i];
        const lk__call_kind *kind =
            (unsigned)call->kind <= (unsigned)last_kind ? lk__call_kind_of(call->kind) : NULL;
        lk_status st = kind != NULL ? kind->build(opts, call, &cmds[m], call->err)
                                    : lk__errf(call->err, LK_EINVAL, "unknown call kind %d",
                                               (int)call->kind);
        if (st != LK_OK) {
            call->status = st; /* refused before sending */
            continue;
        }
        cmds[m].out = call;
        sent[m] = &cmds[m];
        index[m] = i;
        m++;
    }
    if (m > 0) {
        run_ctx r = {t, calls, index};
        lk__transport_run(t, m, sent, done, &r);
    }
out:
    if (n > 1) {
        free(cmds);
        free(sent);
        free(index);
    }
}
