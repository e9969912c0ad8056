/*
 * Sessions (locklib.h "Sessions"): session.lua keeps a session and its list of locks under
 * the tag {#sessions}; session_lock.lua reads or ends one lock of it on the lock's own slot;
 * each lock's renewal is an ordinary renew.lua call (LK_CALL_RENEW) for its owner.
 *
 * The session's calls are sent straight through the handle's transport (session_calls.c),
 * with their replies kept, because their answers are lists whose length the fixed lk_call
 * outcome cannot hold. So they are refused on Redlock, whose transport merges the N
 * masters' replies per call kind and has no merge for these.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "session_internal.h"
#include "watchdog_internal.h"

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
        st = lk__session_call(&c->tp, c->err, "create", id, client, &reply, ttl, NULL, NULL, NULL);
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
    lk_status st = check(c, id, client);
    if (st != LK_OK) {
        if (out != NULL) {
            memset(out, 0, sizeof *out);
        }
        return st;
    }
    return lk__session_renew(&c->tp, &c->opts, c->err, id, client, out);
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
    st = lk__session_call(&c->tp, c->err, "get", id, client, &reply, NULL, NULL, NULL, NULL);
    if (st != LK_OK) {
        return st;
    }
    if (lk__int_at(reply, 0) != 1) {
        freeReplyObject(reply);
        return lk__fail(c, LK_NOT_OWNER, "no such session");
    }
    *ttl_ms = lk__session_num(reply, 1);
    *remaining_ms = lk__session_num(reply, 2);
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
        lock_cmd(&b.cmds[i], "ttl", lk__session_str(reply, 3 + 2 * i),
                 lk__session_num(reply, 4 + 2 * i), 0);
    }
    lk__session_send(&c->tp, m, b.cmds, b.st, b.reply, b.err);
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
        snprintf(l->resource, sizeof l->resource, "%s", lk__session_str(reply, 3 + 2 * i));
        l->token = lk__session_num(reply, 4 + 2 * i);
        l->ttl_ms = lk__session_num(b.reply[i], 1);
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

/* With min_replicas: WAITs for the replicas after a record of locks in a session, as an
 * acquisition does (locks.c), on the connection that carried it (so the session's creation,
 * sent before on it, is covered too). Too few acknowledgements: EREPLICAS, since a failover
 * could promote a replica whose session does not list the locks, and the session's renewals
 * and end would miss them; the caller ends those locks (the record stays on this master,
 * where the session's end finds them given back). */
static lk_status replicated(lk_client *c)
{
    long long acked = 0;

    if (c->opts.min_replicas <= 0) {
        return LK_OK;
    }
    lk_status st = lk__transport_wait(&c->tp, c->opts.min_replicas, c->opts.replica_timeout_ms,
                                      &acked);
    if (st != LK_OK) {
        return st; /* its reason is in c->err (the transport's) */
    }
    if (acked < c->opts.min_replicas) {
        return lk__fail(c, LK_EREPLICAS, "only %lld of %d replicas acknowledged the session's "
                        "record of the lock", acked, c->opts.min_replicas);
    }
    return LK_OK;
}

lk_status lk_session_add_many(lk_client *c, const char *id, const char *client,
                              const lk_many *items, size_t n, const char *owner,
                              int64_t *remaining_ms)
{
    char max[24];
    redisReply *reply = NULL;
    lk_status st = check(c, id, client);

    if (remaining_ms != NULL) {
        *remaining_ms = 0;
    }
    if (st != LK_OK) {
        return st;
    }
    if (items == NULL || n == 0 || n > LK_MANY_MAX || !lk_valid_owner(owner)) {
        return lk__fail(c, LK_EINVAL, "a session records 1..%d locks of a valid owner at once",
                        LK_MANY_MAX);
    }
    for (size_t i = 0; i < n; i++) {
        int64_t tok = items[i].res.token;
        if (!lk_valid_resource(items[i].resource) || tok < 1 || tok > LK_TOKEN_MAX) {
            return lk__fail(c, LK_EINVAL, "invalid resource or token at %zu", i);
        }
        for (size_t j = 0; j < i; j++) {
            if (strcmp(items[i].resource, items[j].resource) == 0) {
                return lk__fail(c, LK_EINVAL, "duplicate resource %s", items[i].resource);
            }
        }
    }
    /* "r1 t1 r2 t2 ...": names hold no space (FG_NAME_CHARS), so one argument carries the
     * set, however large, and one script records it all or none. */
    size_t cap = n * (LK_RESOURCE_MAX + 24), len = 0;
    char *list = malloc(cap);
    if (list == NULL) {
        return lk__fail(c, LK_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        len += (size_t)snprintf(list + len, cap - len, "%s%s %" PRId64, i ? " " : "",
                                items[i].resource, items[i].res.token);
    }
    fmt(max, sizeof max, LK_SESSION_LOCKS_MAX);
    st = lk__session_call(&c->tp, c->err, "add", id, client, &reply, max, owner, list, NULL);
    free(list);
    if (st != LK_OK) {
        return st;
    }
    long long code = lk__int_at(reply, 0);
    if (remaining_ms != NULL && code == 1) {
        *remaining_ms = lk__session_num(reply, 1);
    }
    freeReplyObject(reply);
    if (code == -2) {
        return lk__fail(c, LK_EINVAL, "the session cannot hold more than %d locks",
                        LK_SESSION_LOCKS_MAX);
    }
    if (code != 1) {
        return lk__fail(c, LK_NOT_OWNER, "no such session");
    }
    return replicated(c);
}

lk_status lk_session_add(lk_client *c, const char *id, const char *client,
                         const char *resource, const char *owner, int64_t token,
                         int64_t *remaining_ms)
{
    lk_many one = {.resource = resource};
    one.res.token = token;
    return lk_session_add_many(c, id, client, &one, 1, owner, remaining_ms);
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
    lk__session_send(&c->tp, 1, &cmd, &st, &reply, err);
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
    /* The session ended meanwhile (or cannot take more): a hold this call created must not
     * outlive it. A re-entry or a replay only gives back the hold it added: its token was
     * answered before, outside this session, and is not the session's to fence. */
    char why[LK__ERR_LEN];
    snprintf(why, sizeof why, "%s", c->err);
    if (res->holds == 1 && !res->replayed) {
        lk_session_lock l;
        lk_session_end_lock(c, resource, res->token, floor, &l);
    } else {
        lk_result given;
        lk_release(c, resource, owner, NULL, &given);
    }
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
    if (client != NULL) {
        lk_session_unwatch(c, id, client); /* its end is no loss */
    }
    st = lk__session_call(&c->tp, c->err, "end", id, client, &reply, claim,
                          client == NULL ? "1" : "0", NULL, NULL);
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
        snprintf(l->resource, sizeof l->resource, "%s", lk__session_str(reply, 1 + 2 * i));
        l->token = lk__session_num(reply, 2 + 2 * i);
        if (!lk_valid_resource(l->resource) || l->token < 1 || l->token > LK_TOKEN_MAX) {
            freeReplyObject(reply);
            reply = NULL;
            st = lk__fail(c, LK_EREDIS, "the session's list of locks is damaged");
            goto out;
        }
        lock_cmd(&b.cmds[i], "end", l->resource, l->token, floor);
    }
    lk__session_send(&c->tp, m, b.cmds, b.st, b.reply, b.err);
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
        st = lk__session_call(&c->tp, c->err, "forget", id, NULL, &reply, NULL, NULL, NULL, NULL);
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
    int due = 1;
    st = lk__session_due(&c->tp, c->err, &due);
    if (st != LK_OK || !due) {
        return st;
    }
    fmt(claim, sizeof claim, claim_ms);
    fmt(most, sizeof most, (int64_t)max);
    st = lk__session_call(&c->tp, c->err, "reap", NULL, NULL, &reply, claim, most, NULL, NULL);
    if (st != LK_OK) {
        return st;
    }
    for (size_t i = 0; i < reply->elements && *n < max; i++) {
        const char *id = lk__session_str(reply, i);
        if (id != NULL && lk_valid_session(id)) {
            snprintf(ids[(*n)++], LK_SESSION_ID_LEN + 1, "%s", id);
        }
    }
    freeReplyObject(reply);
    return LK_OK;
}

/* The watchdog's key of a session: (id, "#" and its client). */
static void watch_owner(char *buf, size_t len, const char *client)
{
    snprintf(buf, len, "#%s", client != NULL ? client : "");
}

lk_status lk_session_watch(lk_client *c, const char *id, const char *client)
{
    int64_t ttl = 0, remaining = 0;
    size_t n = 0;
    char owner[LK_SESSION_CLIENT_MAX + 2];
    lk_status st = lk_session_info(c, id, client, &ttl, &remaining, NULL, 0, &n);

    if (st != LK_OK) {
        return st;
    }
    watch_owner(owner, sizeof owner, client);
    st = lk__watch_add_lease(c, id, owner, ttl);
    return st == LK_OK ? LK_OK : lk__fail(c, st, "the watchdog could not start");
}

void lk_session_unwatch(lk_client *c, const char *id, const char *client)
{
    char owner[LK_SESSION_CLIENT_MAX + 2];
    if (lk_valid_session(id) && valid_client(client)) {
        watch_owner(owner, sizeof owner, client);
        lk__watch_remove(c, id, owner);
    }
}

int lk_session_watch_lost(lk_client *c, const char *id, const char *client)
{
    char owner[LK_SESSION_CLIENT_MAX + 2];
    if (!lk_valid_session(id) || !valid_client(client)) {
        return 0;
    }
    watch_owner(owner, sizeof owner, client);
    return lk_watch_lost(c, id, owner);
}
