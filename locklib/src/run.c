/*
 * lk__run(): build, send, decode. The one place where the call kinds (calls.c) meet a
 * transport (transport.c), so neither knows the other: a transport for Cluster, Sentinel or
 * Redlock replaces lk__transport_run() without touching a call kind, and a new call kind
 * needs no transport code.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run_internal.h"

/* One sent command's outcome, from the transport. */
void lk__run_done(void *ctx, size_t j, lk_status st, redisReply *reply)
{
    lk__runner *r = ctx;
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

void lk__run_build(lk__runner *r, lk__transport *t, const lk_options *opts,
                   lk_call *const *calls, size_t n, lk_call_kind last_kind)
{
    memset(r, 0, sizeof *r);
    r->t = t;
    r->calls = calls;
    r->n = n;
    r->cmds = n <= 1 ? &r->one_cmd : malloc(n * sizeof *r->cmds);
    r->sent = n <= 1 ? &r->one_sent : malloc(n * sizeof *r->sent);
    r->index = n <= 1 ? &r->one_index : malloc(n * sizeof *r->index);
    for (size_t i = 0; i < n; i++) {
        lk__call_reset(calls[i]);
    }
    if (r->cmds == NULL || r->sent == NULL || r->index == NULL) {
        for (size_t i = 0; i < n; i++) {
            calls[i]->status = lk__errf(calls[i]->err, LK_ENOMEM, "out of memory");
        }
        return;
    }
    for (size_t i = 0; i < n; i++) {
        lk_call *call = calls[i];
        const lk__call_kind *kind =
            (unsigned)call->kind <= (unsigned)last_kind ? lk__call_kind_of(call->kind) : NULL;
        lk_status st = kind != NULL ? kind->build(opts, call, &r->cmds[r->m], call->err)
                                    : lk__errf(call->err, LK_EINVAL, "unknown call kind %d",
                                               (int)call->kind);
        if (st != LK_OK) {
            call->status = st; /* refused before sending */
            continue;
        }
        r->cmds[r->m].out = call;
        r->sent[r->m] = &r->cmds[r->m];
        r->index[r->m] = i;
        r->m++;
    }
}

void lk__run_free(lk__runner *r)
{
    if (r->n > 1) {
        free(r->cmds);
        free(r->sent);
        free(r->index);
    }
    r->cmds = NULL;
    r->sent = NULL;
    r->index = NULL;
    r->m = 0;
}

void lk__run(lk__transport *t, const lk_options *opts, lk_call *const *calls, size_t n,
             lk_call_kind last_kind)
{
    lk__runner r;

    lk__run_build(&r, t, opts, calls, n, last_kind);
    if (r.m > 0) {
        lk__transport_run(t, r.m, r.sent, lk__run_done, &r);
    }
    lk__run_free(&r);
}
