/*
 * Sessions (locklib.h "Sessions"): session.lua keeps a session and its list of locks under
 * the tag {#sessions}; session_lock.lua reads or ends one lock of it on the lock's own slot;
 * each lock's renewal is an ordinary renew.lua call (LK_CALL_RENEW) for its owner.
 *
 * The session's calls are sent straight through the handle's transport (lk__transport_run)
 * with their replies kept here, because their answers are lists whose length the fixed
 * lk_call outcome cannot hold. So they are refused on Redlock, whose transport merges the
 * N masters' replies per call kind and has no merge for these.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"

#define ROUTE "#sessions"

/* One batch's replies, kept for the caller, which frees them with drop(). */
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

/* Sends n built calls as one batch; st[i], reply[i] (NULL unless st[i] is OK) and err[i]
 * are each call's outcome. */
static void send_batch(lk_client *c, size_t n, lk__cmd *cmds, lk_status *st,
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
    kept k = {&c->tp, st, reply, err};
    lk__transport_run(&c->tp, n, sent, keep, &k);
    free(sent);
    for (size_t i = 0; i < n; i++) {
        if (st[i] != LK_OK) {
            freeReplyObject(reply[i]);
            reply[i] = NULL;
        }
    }
}

/* A batch of session_lock.lua calls, one per lock, with their outcomes. */
typedef struct lock_batch {
    size_t m;
    lk__cmd *cmds;
    lk_status *st;
    redisReply **reply;
    char (*err)[LK__ERR_LEN];
} lock_batch;

static int batch_new(lock_batch *b, size_t m)
{
    b->m = m;
    b->cmds = calloc(m, sizeof *b->cmds);
    b->st = calloc(m, sizeof *b->st);
    b->reply = calloc(m, sizeof *b->reply);
    b->err = calloc(m, sizeof *b->err);
    return b->cmds != NULL && b->st != NULL && b->reply != NULL && b->err != NULL;
}

static void batch_free(lock_batch *b)
{
    for (size_t i = 0; b->reply != NULL && i < b->m; i++) {
        freeReplyObject(b->reply[i]);
    }
    free(b->cmds);
    free(b->st);
    free(b->reply);
    free(b->err);
}

/* Integer or decimal-string element i of an array reply, 0 when absent. */
static int64_t num_at(const redisReply *r, size_t i)
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

static const char *str_at(const redisReply *r, size_t i)
{
    if (r == NULL || i >= r->elements || r->element[i]->type != REDIS_REPLY_STRING) {
        return NULL;
    }
    return r->element[i]->str;
}

static int valid_client(const char *client)
{
    return client == NULL || strlen(client) <= LK_SESSION_CLIENT_MAX;
}

int lk_valid_session(const char *s)
{
    if (s == NULL || strlen(s) != LK_SESSION_ID_LEN) {
        return 0;
    }
    for (const char *p = s; *p != '\0'; p++) {
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) {
            return 0;
        }
    }
    return 1;
}

/* EINVAL unless sessions can run on c's topology and the id and client are well formed
 * (id NULL: not checked). */
static lk_status check(lk_client *c, const char *id, const char *client)
{
    if (c->tp.kind == LK_TOPOLOGY_REDLOCK) {
        return lk__fail(c, LK_EINVAL, "sessions are not supported on redlock://");
    }
    if (id != NULL && !lk_valid_session(id)) {
        return lk__fail(c, LK_EINVAL, "invalid session id");
    }
    if (!valid_client(client)) {
        return lk__fail(c, LK_EINVAL, "invalid client");
    }
    return LK_OK;
}

/* A session.lua call of op on session id (NULL for reap) with up to four more arguments
 * (NULL ends them). The reply is the caller's to free. */
static lk_status session_call(lk_client *c, const char *op, const char *id, const char *client,
                              redisReply **reply, const char *a1, const char *a2,
                              const char *a3, const char *a4)
{
    lk__cmd cmd;
    char key[8 + LK_SESSION_ID_LEN + 1];
    char err[1][LK__ERR_LEN];
    lk_status st;

    snprintf(key, sizeof key, "s:%s", id != NULL ? id : "");
    lk__cmd_start(&cmd, LK__SCRIPT_SESSION, ROUTE);
    lk__cmd_key(&cmd, key);
    lk__cmd_key(&cmd, "deadline");
    lk__cmd_arg(&cmd, op);
    lk__cmd_arg(&cmd, id != NULL ? id : "");
    lk__cmd_arg(&cmd, client != NULL ? client : "");
    const char *more[4] = {a1, a2, a3, a4};
    for (int i = 0; i < 4 && more[i] != NULL; i++) {
        lk__cmd_arg(&cmd, more[i]);
    }
    send_batch(c, 1, &cmd, &st, reply, err);
    if (st != LK_OK) {
        return lk__fail(c, st, "session %s: %s", op, err[0]);
    }
    return LK_OK;
}

static void fmt(char *buf, size_t len, int64_t n)
{
    snprintf(buf, len, "%" PRId64, n);
}

lk_status lk_session_create(lk_client *c, int64_t ttl_ms, const char *client, char *id)
{
    char ttl[24];
    redisReply *reply = NULL;
    lk_status st = check(c, NULL, client);

    if (st != LK_OK) {
        return st;
    }
    if (!lk__valid_lease(ttl_ms)) {
        return lk__fail(c, LK_EINVAL, "ttl must be %d..%d ms", LK_LEASE_MIN_MS,
                        LK_LEASE_MAX_MS);
    }
    fmt(ttl, sizeof ttl, ttl_ms);
    for (int tries = 0; tries < 3; tries++) {
        lk_random_id(id);
        st = session_call(c, "create", id, client, &reply, ttl, NULL, NULL, NULL);
        if (st != LK_OK) {
            id[0] = '\0';
            return st;
        }
        long long code = lk__int_at(reply, 0);
        freeReplyObject(reply);
        if (code == 1) {
            return LK_OK;
        }
    }
    id[0] = '\0';
    return lk__fail(c, LK_EREDIS, "no fresh session id in three draws");
}

/* Builds a session_lock.lua call of op on resource for token into *cmd; num[] holds the
 * numbers (kept by pointer). */
static void lock_cmd(lk__cmd *cmd, const char *op, const char *resource, int64_t token,
                     int64_t floor)
{
    lk__cmd_start(cmd, LK__SCRIPT_SESSION_LOCK, resource);
    lk__cmd_key(cmd, "lock");
    lk__cmd_key(cmd, "fence");
    lk__cmd_key(cmd, "base");
    lk__cmd_key(cmd, "recent");
    lk__cmd_arg(cmd, op);
    lk__cmd_num(cmd, token);
    lk__cmd_num(cmd, floor);
    lk__cmd_channel(cmd);
}

lk_status lk_session_renew(lk_client *c, const char *id, const char *client,
                           lk_session_renewal *out)
{
    lk_session_renewal local;
    redisReply *reply = NULL;
    lk_status st = check(c, id, client);

    if (out == NULL) {
        out = &local;
    }
    memset(out, 0, sizeof *out);
    if (st != LK_OK) {
        return st;
    }
    st = session_call(c, "renew", id, client, &reply, NULL, NULL, NULL, NULL);
    if (st != LK_OK) {
        return st;
    }
    if (lk__int_at(reply, 0) != 1) {
        freeReplyObject(reply);
        return lk__fail(c, LK_NOT_OWNER, "no such session");
    }
    out->ttl_ms = num_at(reply, 1);
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
        return lk__fail(c, LK_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        calls[i].kind = LK_CALL_RENEW;
        calls[i].resource = str_at(reply, 2 + 2 * i);
        calls[i].owner = str_at(reply, 3 + 2 * i);
        calls[i].lease_ms = out->ttl_ms;
        ptrs[i] = &calls[i];
    }
    lk_call_many(c, ptrs, n);
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

lk_status lk_session_info(lk_client *c, const char *id, const char *client, int64_t *ttl_ms,
                          int64_t *remaining_ms, lk_session_lock *locks, size_t max, size_t *n)
{
    redisReply *reply = NULL;
    lk_status st = check(c, id, client);

    *n = 0;
    *ttl_ms = *remaining_ms = 0;
    if (st != LK_OK) {
        return st;
    }
    st = session_call(c, "get", id, client, &reply, NULL, NULL, NULL, NULL);
    if (st != LK_OK) {
        return st;
    }
    if (lk__int_at(reply, 0) != 1) {
        freeReplyObject(reply);
        return lk__fail(c, LK_NOT_OWNER, "no such session");
    }
    *ttl_ms = num_at(reply, 1);
    *remaining_ms = num_at(reply, 2);
    size_t m = (reply->elements - 3) / 2;
    if (m == 0 || max == 0) {
        freeReplyObject(reply);
        return LK_OK;
    }
    lock_batch b;
    if (!batch_new(&b, m)) {
        st = lk__fail(c, LK_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < m; i++) {
        lock_cmd(&b.cmds[i], "ttl", str_at(reply, 3 + 2 * i), num_at(reply, 4 + 2 * i), 0);
    }
    send_batch(c, m, b.cmds, b.st, b.reply, b.err);
    for (size_t i = 0; i < m; i++) {
        if (b.st[i] != LK_OK) {
            st = lk__fail(c, b.st[i], "%s", b.err[i]);
            break;
        }
        if (lk__int_at(b.reply[i], 0) != 1 || *n >= max) {
            continue; /* no longer held by the session */
        }
        lk_session_lock *l = &locks[(*n)++];
        memset(l, 0, sizeof *l);
        snprintf(l->resource, sizeof l->resource, "%s", str_at(reply, 3 + 2 * i));
        l->token = num_at(reply, 4 + 2 * i);
        l->ttl_ms = num_at(b.reply[i], 1);
        l->status = LK_OK;
    }
out:
    batch_free(&b);
    freeReplyObject(reply);
    if (st != LK_OK) {
        *n = 0;
    }
    return st;
}

lk_status lk_session_add(lk_client *c, const char *id, const char *client,
                         const char *resource, const char *owner, int64_t token,
                         int64_t *remaining_ms)
{
    char tok[24], max[24];
    redisReply *reply = NULL;
    lk_status st = check(c, id, client);

    if (st != LK_OK) {
        return st;
    }
    if (!lk_valid_resource(resource) || !lk_valid_owner(owner) || token < 1 ||
        token > LK_TOKEN_MAX) {
        return lk__fail(c, LK_EINVAL, "invalid resource, owner or token");
    }
    fmt(tok, sizeof tok, token);
    fmt(max, sizeof max, LK_SESSION_LOCKS_MAX);
    st = session_call(c, "add", id, client, &reply, resource, tok, owner, max);
    if (st != LK_OK) {
        return st;
    }
    long long code = lk__int_at(reply, 0);
    if (remaining_ms != NULL) {
        *remaining_ms = code == 1 ? num_at(reply, 1) : 0;
    }
    freeReplyObject(reply);
    if (code == -2) {
        return lk__fail(c, LK_EINVAL, "the session holds %d locks already",
                        LK_SESSION_LOCKS_MAX);
    }
    return code == 1 ? LK_OK : lk__fail(c, LK_NOT_OWNER, "no such session");
}

/* Reads one session_lock.lua "end" reply into *l. */
static void ended_lock(lk_session_lock *l, lk_status st, const redisReply *reply,
                       const char *err, lk_client *c)
{
    if (st != LK_OK) {
        l->status = lk__fail(c, st, "%s: %s", l->resource, err);
        return;
    }
    long long code = lk__int_at(reply, 0);
    l->fenced_by = lk__int_at(reply, 2);
    l->published = (int)lk__int_at(reply, 3);
    l->status = code == 0 ? LK_NOT_OWNER : LK_RELEASED;
}

lk_status lk_session_end_lock(lk_client *c, const char *resource, int64_t token,
                              int64_t floor, lk_session_lock *out)
{
    lk__cmd cmd;
    lk_status st;
    redisReply *reply = NULL;
    char err[1][LK__ERR_LEN];

    memset(out, 0, sizeof *out);
    if (!lk_valid_resource(resource) || token < 1 || token > LK_TOKEN_MAX || floor < 0 ||
        floor >= LK_TOKEN_MAX) {
        return out->status = lk__fail(c, LK_EINVAL, "invalid resource, token or floor");
    }
    snprintf(out->resource, sizeof out->resource, "%s", resource);
    out->token = token;
    lock_cmd(&cmd, "end", resource, token, floor);
    send_batch(c, 1, &cmd, &st, &reply, err);
    ended_lock(out, st, reply, err[0], c);
    freeReplyObject(reply);
    return out->status;
}

lk_status lk_session_acquire(lk_client *c, const char *id, const char *client,
                             const char *resource, const char *owner, int64_t floor,
                             const char *idem_key, lk_result *res)
{
    int64_t ttl = 0, remaining = 0;
    size_t n = 0;
    lk_result local;
    lk_status st = lk_session_info(c, id, client, &ttl, &remaining, NULL, 0, &n);

    if (res == NULL) {
        res = &local;
    }
    memset(res, 0, sizeof *res);
    if (st != LK_OK) {
        return st;
    }
    st = lk_acquire(c, resource, owner, ttl, floor, idem_key, res);
    if (st != LK_ACQUIRED) {
        return st;
    }
    lk_status added = lk_session_add(c, id, client, resource, owner, res->token, NULL);
    if (added == LK_OK) {
        return LK_ACQUIRED;
    }
    /* The session ended meanwhile (or cannot take more): the hold must not outlive it. */
    char why[LK__ERR_LEN];
    snprintf(why, sizeof why, "%s", c->err);
    lk_session_lock l;
    lk_session_end_lock(c, resource, res->token, floor, &l);
    return lk__fail(c, added, "%s", why);
}

lk_status lk_session_end(lk_client *c, const char *id, const char *client, int64_t floor,
                         int64_t claim_ms, lk_session_lock *locks, size_t max, size_t *n)
{
    char claim[24];
    redisReply *reply = NULL;
    lk_status st = check(c, id, NULL);

    *n = 0;
    if (st != LK_OK) {
        return st;
    }
    if (floor < 0 || floor >= LK_TOKEN_MAX || claim_ms < 1 || !valid_client(client)) {
        return lk__fail(c, LK_EINVAL, "invalid floor, claim or client");
    }
    fmt(claim, sizeof claim, claim_ms);
    st = session_call(c, "end", id, client, &reply, claim, client == NULL ? "1" : "0", NULL,
                      NULL);
    if (st != LK_OK) {
        return st;
    }
    if (lk__int_at(reply, 0) != 1) {
        freeReplyObject(reply);
        return lk__fail(c, LK_NOT_OWNER, "no such session");
    }
    size_t m = (reply->elements - 1) / 2;
    if (m > max) {
        freeReplyObject(reply);
        return lk__fail(c, LK_EINVAL, "the session holds %zu locks, more than %zu", m, max);
    }
    if (m == 0) {
        freeReplyObject(reply);
        return LK_RELEASED;
    }
    lock_batch b;
    st = LK_RELEASED;
    if (!batch_new(&b, m)) {
        st = lk__fail(c, LK_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < m; i++) {
        lk_session_lock *l = &locks[i];
        memset(l, 0, sizeof *l);
        snprintf(l->resource, sizeof l->resource, "%s", str_at(reply, 1 + 2 * i));
        l->token = num_at(reply, 2 + 2 * i);
        if (!lk_valid_resource(l->resource) || l->token < 1 || l->token > LK_TOKEN_MAX) {
            freeReplyObject(reply);
            reply = NULL;
            st = lk__fail(c, LK_EREDIS, "the session's list of locks is damaged");
            goto out;
        }
        lock_cmd(&b.cmds[i], "end", l->resource, l->token, floor);
    }
    send_batch(c, m, b.cmds, b.st, b.reply, b.err);
    for (size_t i = 0; i < m; i++) {
        ended_lock(&locks[i], b.st[i], b.reply[i], b.err[i], c);
        if (locks[i].status >= LK_EINVAL) {
            st = LK_EUNAVAILABLE;
        }
    }
    *n = m;
out:
    batch_free(&b);
    freeReplyObject(reply);
    return st;
}

lk_status lk_session_forget(lk_client *c, const char *id)
{
    redisReply *reply = NULL;
    lk_status st = check(c, id, NULL);

    if (st == LK_OK) {
        st = session_call(c, "forget", id, NULL, &reply, NULL, NULL, NULL, NULL);
        freeReplyObject(reply);
    }
    return st;
}

lk_status lk_session_reap(lk_client *c, int64_t claim_ms, char (*ids)[LK_SESSION_ID_LEN + 1],
                          size_t max, size_t *n)
{
    char claim[24], most[24];
    redisReply *reply = NULL;
    lk_status st = check(c, NULL, NULL);

    *n = 0;
    if (st != LK_OK) {
        return st;
    }
    if (claim_ms < 1 || max < 1) {
        return lk__fail(c, LK_EINVAL, "invalid claim or max");
    }
    fmt(claim, sizeof claim, claim_ms);
    fmt(most, sizeof most, (int64_t)max);
    st = session_call(c, "reap", NULL, NULL, &reply, claim, most, NULL, NULL);
    if (st != LK_OK) {
        return st;
    }
    for (size_t i = 0; i < reply->elements && *n < max; i++) {
        const char *id = str_at(reply, i);
        if (id != NULL && lk_valid_session(id)) {
            snprintf(ids[(*n)++], LK_SESSION_ID_LEN + 1, "%s", id);
        }
    }
    freeReplyObject(reply);
    return LK_OK;
}
