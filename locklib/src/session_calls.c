/*
 * The session calls both session.c (the public lk_session_*) and the watchdog (renewing
 * watched sessions on its own connection) run: session.lua on the session's record, and the
 * renewal of a session and its locks (session_internal.h). The replies are kept here rather
 * than decoded into an lk_call, because their answers are lists whose length the fixed
 * lk_call outcome cannot hold.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "session_internal.h"

/* One batch's replies, kept for the caller. */
typedef struct kept {
    lk__transport *t;
    lk_status *st;
    redisReply **reply;
    char (*err)[LK__ERR_LEN];
} kept;

static void keep(void *ctx, size_t i, lk_status st, redisReply *reply)
{
    kept *k = ctx;
    k->st[i] = st;
    k->reply[i] = reply;
    k->err[i][0] = '\0';
    if (reply == NULL && st >= LK_EINVAL) {
        snprintf(k->err[i], LK__ERR_LEN, "%s", k->t->err);
    } else if (reply != NULL && reply->type == REDIS_REPLY_ERROR) {
        k->st[i] = LK_EREDIS;
        snprintf(k->err[i], LK__ERR_LEN, "%s", reply->str);
    } else if (reply != NULL && reply->type != REDIS_REPLY_ARRAY) {
        k->st[i] = LK_EREDIS;
        snprintf(k->err[i], LK__ERR_LEN, "unexpected reply type %d", reply->type);
    }
}

void lk__session_send(lk__transport *t, size_t n, lk__cmd *cmds, lk_status *st,
                      redisReply **reply, char (*err)[LK__ERR_LEN])
{
    const lk__cmd **sent = calloc(n, sizeof *sent);
    if (sent == NULL) {
        for (size_t i = 0; i < n; i++) {
            st[i] = lk__errf(err[i], LK_ENOMEM, "out of memory");
            reply[i] = NULL;
        }
        return;
    }
    for (size_t i = 0; i < n; i++) {
        sent[i] = &cmds[i];
        st[i] = LK_EUNAVAILABLE;
        reply[i] = NULL;
        snprintf(err[i], LK__ERR_LEN, "not answered");
    }
    kept k = {t, st, reply, err};
    lk__transport_run(t, n, sent, keep, &k);
    free(sent);
    for (size_t i = 0; i < n; i++) {
        if (st[i] != LK_OK) {
            freeReplyObject(reply[i]);
            reply[i] = NULL;
        }
    }
}

int64_t lk__session_num(const redisReply *r, size_t i)
{
    if (r == NULL || i >= r->elements) {
        return 0;
    }
    const redisReply *e = r->element[i];
    if (e->type == REDIS_REPLY_INTEGER) {
        return e->integer;
    }
    if (e->type == REDIS_REPLY_STRING) {
        return strtoll(e->str, NULL, 10);
    }
    return 0;
}

const char *lk__session_str(const redisReply *r, size_t i)
{
    if (r == NULL || i >= r->elements || r->element[i]->type != REDIS_REPLY_STRING) {
        return NULL;
    }
    return r->element[i]->str;
}


lk_status lk__session_call(lk__transport *t, char *errbuf, const char *op, const char *id,
                           const char *client, redisReply **reply, const char *a1,
                           const char *a2, const char *a3, const char *a4)
{
    lk__cmd cmd;
    char key[8 + LK_SESSION_ID_LEN + 1];
    char err[1][LK__ERR_LEN];
    lk_status st;

    snprintf(key, sizeof key, "s:%s", id != NULL ? id : "");
    lk__cmd_start(&cmd, LK__SCRIPT_SESSION, LK__SESSION_ROUTE);
    lk__cmd_key(&cmd, key);
    lk__cmd_key(&cmd, "deadline");
    lk__cmd_arg(&cmd, op);
    lk__cmd_arg(&cmd, id != NULL ? id : "");
    lk__cmd_arg(&cmd, client != NULL ? client : "");
    const char *more[4] = {a1, a2, a3, a4};
    for (int i = 0; i < 4 && more[i] != NULL; i++) {
        lk__cmd_arg(&cmd, more[i]);
    }
    lk__session_send(t, 1, &cmd, &st, reply, err);
    if (st != LK_OK) {
        return lk__errf(errbuf, st, "session %s: %s", op, err[0]);
    }
    return LK_OK;
}


lk_status lk__session_renew(lk__transport *t, const lk_options *opts, char *err,
                            const char *id, const char *client, lk_session_renewal *out)
{
    lk_session_renewal local;
    redisReply *reply = NULL;

    if (out == NULL) {
        out = &local;
    }
    memset(out, 0, sizeof *out);
    lk_status st = lk__session_call(t, err, "renew", id, client, &reply, NULL, NULL, NULL, NULL);
    if (st != LK_OK) {
        return st;
    }
    if (lk__int_at(reply, 0) != 1) {
        freeReplyObject(reply);
        return lk__errf(err, LK_NOT_OWNER, "no such session");
    }
    /* {1, ttl, R1, T1, R2, T2, ...}: at most LK_SESSION_LOCKS_MAX pairs */
    if (reply->elements < 2 || reply->elements % 2 != 0 ||
        (reply->elements - 2) / 2 > LK_SESSION_LOCKS_MAX) {
        freeReplyObject(reply);
        return lk__errf(err, LK_EREDIS, "unexpected reply to a session renewal");
    }
    out->ttl_ms = lk__session_num(reply, 1);
    size_t n = (reply->elements - 2) / 2;
    out->locks = n;
    if (n == 0) {
        freeReplyObject(reply);
        return LK_RENEWED;
    }
    lk_call *calls = calloc(n, sizeof *calls);
    lk_call **ptrs = calloc(n, sizeof *ptrs);
    if (calls == NULL || ptrs == NULL) {
        free(calls);
        free(ptrs);
        freeReplyObject(reply);
        out->failed = n;
        return lk__errf(err, LK_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        calls[i].kind = LK_CALL_RENEW;
        calls[i].resource = lk__session_str(reply, 2 + 2 * i);
        calls[i].owner = lk__session_str(reply, 3 + 2 * i);
        calls[i].lease_ms = out->ttl_ms;
        ptrs[i] = &calls[i];
    }
    lk__run(t, opts, ptrs, n, LK_CALL_RENEW);
    for (size_t i = 0; i < n; i++) {
        if (calls[i].status == LK_RENEWED) {
            out->renewed++;
        } else if (calls[i].status == LK_NOT_OWNER) {
            out->lost++;
        } else {
            out->failed++;
        }
    }
    free(calls);
    free(ptrs);
    freeReplyObject(reply);
    return LK_RENEWED;
}


lk_status lk__session_due(lk__transport *t, char *err, int *due)
{
    char key[LK__KEY_MAX];
    redisReply *first = NULL, *now = NULL;

    *due = 1;
    if (t->ops != NULL || t->kind == LK_TOPOLOGY_REDLOCK) {
        return LK_OK; /* no one connection to ask: the claim script decides */
    }
    lk_status st = lk__transport_connect(t);
    if (st != LK_OK) {
        return st;
    }
    lk__key(key, LK__SESSION_ROUTE, "deadline");
    if (redisAppendCommand(t->ctx, "ZRANGE %s 0 0 WITHSCORES", key) != REDIS_OK ||
        redisAppendCommand(t->ctx, "TIME") != REDIS_OK ||
        redisGetReply(t->ctx, (void **)&first) != REDIS_OK ||
        redisGetReply(t->ctx, (void **)&now) != REDIS_OK || first == NULL || now == NULL ||
        first->type != REDIS_REPLY_ARRAY || now->type != REDIS_REPLY_ARRAY ||
        now->elements != 2) {
        st = lk__errf(err, LK_EUNAVAILABLE, "the session deadlines could not be read: %s",
                      t->ctx != NULL && t->ctx->err != 0 ? t->ctx->errstr : "a bad reply");
        freeReplyObject(first);
        freeReplyObject(now);
        lk__transport_drop(t); /* its replies are out of step now */
        return st;
    }
    int64_t ms = lk__session_num(now, 0) * 1000 + lk__session_num(now, 1) / 1000;
    /* The score is a double; a deadline is a whole number of ms, well below 2^53. */
    *due = first->elements == 2 && first->element[1]->type == REDIS_REPLY_STRING &&
           strtod(first->element[1]->str, NULL) <= (double)ms;
    freeReplyObject(first);
    freeReplyObject(now);
    return LK_OK;
}
