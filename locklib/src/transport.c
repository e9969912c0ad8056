/*
 * The single-node transport (transport_internal.h, where the seam and the failure handling
 * are described): one connection, pipelined script calls, NOSCRIPT reloads, reconnects and
 * the breaker around each batch.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport_internal.h"

void lk__transport_init(lk__transport *t, const lk__node *node, const lk__sentinels *sentinels,
                        lk_breaker *breaker, char *err)
{
    memset(t, 0, sizeof *t);
    t->kind = sentinels != NULL ? LK_TOPOLOGY_SENTINEL : LK_TOPOLOGY_SINGLE;
    t->node = *node;
    if (sentinels != NULL) {
        t->sentinels = *sentinels;
    }
    t->breaker = breaker;
    t->err = err;
}

/* Notes where a connect went: a Sentinel connect that finds another master than the last
 * one counts a failover. */
static void note_master(lk__transport *t)
{
    char now[sizeof t->master];

    if (t->node.unix_path[0] != '\0') {
        snprintf(now, sizeof now, "%s", t->node.unix_path);
    } else {
        snprintf(now, sizeof now, "%s:%d", t->node.host, t->node.port);
    }
    if (t->master[0] != '\0' && strcmp(now, t->master) != 0) {
        t->failovers++;
    }
    memcpy(t->master, now, sizeof now);
}

redisContext *lk__transport_open(lk__transport *t)
{
    redisContext *ctx = NULL;

    if (t->ops != NULL) {
        return t->ops->open(t);
    }
    if (t->kind == LK_TOPOLOGY_SENTINEL) {
        ctx = lk__sentinel_connect(&t->sentinels, &t->node, t->err);
    } else {
        ctx = lk__connect(&t->node, t->err);
    }
    if (ctx != NULL) {
        note_master(t);
    }
    return ctx;
}

void lk__transport_drop(lk__transport *t)
{
    if (t->ops != NULL) {
        t->ops->drop(t);
        return;
    }
    if (t->ctx != NULL) {
        redisFree(t->ctx);
        t->ctx = NULL;
    }
    memset(t->sha, 0, sizeof t->sha);
    t->stale = 0;
    t->owed = 0; /* gone with the connection they would have come on */
}

void lk__transport_free(lk__transport *t)
{
    if (t->ops != NULL) {
        t->ops->free(t);
        return;
    }
    lk__transport_drop(t);
    if (t->hint != NULL) {
        redisFree(t->hint);
        t->hint = NULL;
    }
    /* The password is a capability: do not leave it in freed memory. */
    memset(t->node.password, 0, sizeof t->node.password);
}

void lk__transport_drop_dead(lk__transport *t)
{
    /* hiredis refuses every command on a context whose err is set (a timed-out reply, say),
     * so such a context is as dead as a closed socket. With replies owed, bytes are
     * expected: an EOF then shows when they are read. */
    if (t->ops == NULL && t->ctx != NULL &&
        (t->ctx->err != 0 || (t->owed == 0 && !lk__idle_alive(t->ctx)))) {
        lk__transport_drop(t);
    }
}

static lk_status connect_now(lk__transport *t, int may_open)
{
    if (t->ops != NULL) {
        return t->ops->connect(t);
    }
    lk__transport_drop_dead(t);
    if (t->hint != NULL) {
        int switched = lk__sentinel_hint_switched(&t->sentinels, t->hint);
        if (switched < 0) {
            redisFree(t->hint);
            t->hint = NULL;
        } else if (switched) {
            lk__transport_drop(t); /* the next lines ask the sentinels again */
        }
    }
    if (t->ctx == NULL && !may_open) {
        return lk__errf(t->err, LK_EUNAVAILABLE, "%s:%d: not connected (a new connection "
                        "is checked before it is used)", t->node.host, t->node.port);
    }
    if (t->ctx == NULL) {
        t->ctx = lk__transport_open(t);
        if (t->ctx == NULL) {
            return LK_EUNAVAILABLE;
        }
        t->connects++;
        if (t->kind == LK_TOPOLOGY_SENTINEL && t->hint == NULL) {
            char ignored[LK__ERR_LEN];
            /* No hint is no harm: failovers are still followed through the errors. */
            t->hint = lk__sentinel_hint_open(&t->sentinels, &t->node, ignored);
        }
    }
    return LK_OK;
}

lk_status lk__transport_connect(lk__transport *t)
{
    return connect_now(t, !t->owner_opens);
}

lk_status lk__transport_reopen(lk__transport *t)
{
    return connect_now(t, 1);
}

/* Error replies that describe the server's state rather than our request: the command did
 * not run, and a later retry can succeed. */
static int transient_error(const char *msg)
{
    static const char *const prefixes[] = {"LOADING", "BUSY", "OOM", "MASTERDOWN", "READONLY",
                                           "NOREPLICAS", "TRYAGAIN", "CLUSTERDOWN", "NOAUTH",
                                           "NOPERM", "MISCONF"};
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        if (strncmp(msg, prefixes[i], strlen(prefixes[i])) == 0) {
            return 1;
        }
    }
    return 0;
}

/* A reply that is NULL (I/O error or timeout) leaves the connection unusable. */
static lk_status io_failure(lk__transport *t)
{
    lk_status st = lk__errf(t->err, LK_EUNAVAILABLE, "Redis connection failed: %s",
                            t->ctx->errstr[0] ? t->ctx->errstr : "no reply");
    lk__transport_drop(t);
    return st;
}

/* One owed reply (lk__transport_settle), dropped. A NOSCRIPT says the script cache was
 * flushed: every SHA is loaded again before it is used (which script it was is not known
 * here). */
static void drop_owed(lk__transport *t, redisReply *reply)
{
    if (reply->type == REDIS_REPLY_ERROR && strncmp(reply->str, "NOSCRIPT", 8) == 0) {
        memset(t->sha, 0, sizeof t->sha);
    }
    freeReplyObject(reply);
    t->owed--;
}

lk_status lk__transport_settle(lk__transport *t)
{
    /* The command timeout bounds the whole catch-up, not each reply: a node that owes many
     * replies and sends each late is dropped, not waited for reply by reply. */
    int64_t deadline_ms = lk__now_ms() + t->node.command_timeout_ms;
    while (t->ctx != NULL && t->owed > 0) {
        redisReply *reply = NULL;
        if (lk__now_ms() > deadline_ms) {
            lk__errf(t->err, LK_EUNAVAILABLE, "Redis node %s:%d is too far behind",
                     t->node.host, t->node.port);
            lk__transport_drop(t);
            break;
        }
        if (redisGetReply(t->ctx, (void **)&reply) != REDIS_OK || reply == NULL) {
            return io_failure(t);
        }
        drop_owed(t, reply);
    }
    return t->ctx != NULL ? LK_OK : lk__errf(t->err, LK_EUNAVAILABLE, "not connected");
}

/* Loads the scripts marked in want[] that the connection lacks, with every SCRIPT LOAD
 * written before the first reply is read: one round trip however many are missing (after a
 * reconnect a batch may need several, and each round trip to a slow Redis counts against
 * the request). Every reply is read, so a script that fails to load leaves the connection
 * in step. Returns OK, the first failure (EREDIS, or EUNAVAILABLE for a transient error),
 * or EUNAVAILABLE with the connection dropped when a reply is missing. */
static lk_status load_scripts(lk__transport *t, const unsigned char *want)
{
    lk_status st = lk__transport_settle(t);
    int queued[LK__SCRIPT_COUNT] = {0};

    for (int s = 0; st == LK_OK && s < LK__SCRIPT_COUNT; s++) {
        if (want[s] && t->sha[s][0] == '\0') {
            const char *argv[3] = {"SCRIPT", "LOAD", lk__scripts[s].text};
            size_t lens[3] = {6, 4, lk__scripts[s].len};
            if (redisAppendCommandArgv(t->ctx, 3, argv, lens) != REDIS_OK) {
                return io_failure(t); /* out of memory: what was queued is not in step */
            }
            queued[s] = 1;
        }
    }
    lk__sigpipe guard; /* the first read writes what was queued */
    lk__sigpipe_block(&guard);
    for (int s = 0; s < LK__SCRIPT_COUNT; s++) {
        redisReply *reply = NULL;
        if (!queued[s]) {
            continue;
        }
        if (redisGetReply(t->ctx, (void **)&reply) != REDIS_OK || reply == NULL) {
            lk__sigpipe_restore(&guard);
            return io_failure(t);
        }
        if (reply->type == REDIS_REPLY_STRING && reply->len == 40) {
            memcpy(t->sha[s], reply->str, 41);
        } else if (st == LK_OK) {
            st = lk__errf(t->err, transient_error(reply->str ? reply->str : "") ?
                                      LK_EUNAVAILABLE : LK_EREDIS,
                          "SCRIPT LOAD %s failed: %s", lk__scripts[s].name,
                          reply->str ? reply->str : "?");
        }
        freeReplyObject(reply);
    }
    lk__sigpipe_restore(&guard);
    return st;
}

lk_status lk__transport_load_all(lk__transport *t)
{
    unsigned char want[LK__SCRIPT_COUNT];
    memset(want, 1, sizeof want);
    return load_scripts(t, want);
}

/* Was Redis slow, or was this process paused while Redis answered? A call that got its reply
 * after more than half the timeout is confirmed with a PING allowed a tenth of the timeout
 * (at least 50 ms): a quick PONG means the time went elsewhere (SIGSTOP, a frozen VM, CPU
 * starvation) and the breaker must not trip. A PING that does not answer in time leaves the
 * connection with a reply pending, so it is dropped; the next call reconnects. */
static int redis_slow(lk__transport *t, lk_status st, int64_t elapsed_ms)
{
    if (!lk__breaker_slow(t->breaker, t->node.connect_timeout_ms, t->node.command_timeout_ms,
                          elapsed_ms)) {
        return 0;
    }
    if (st == LK_EUNAVAILABLE || t->ctx == NULL) {
        return 1; /* it failed after waiting: nothing answered */
    }
    int timeout_ms = t->node.command_timeout_ms;
    int quick_ms = timeout_ms / 10 > 50 ? timeout_ms / 10 : 50;
    const char *argv[1] = {"PING"};
    size_t lens[1] = {4};
    redisSetTimeout(t->ctx, lk__ms_to_tv(quick_ms));
    redisReply *reply = lk__command_argv(t->ctx, 1, argv, lens);
    int slow = reply == NULL;
    freeReplyObject(reply);
    if (slow) {
        lk__transport_drop(t);
    } else {
        redisSetTimeout(t->ctx, lk__ms_to_tv(timeout_ms));
    }
    return slow;
}

/* ---- Pipelines ------------------------------------------------------------------------
 *
 * lk__transport_run() writes every script call of a batch before it reads the first reply,
 * so Redis runs the whole batch in one pass of its event loop and, under appendfsync always,
 * one fsync covers all of it. Every single call goes through it too (n = 1).
 *
 * Failures, per call, in the order the replies are read:
 *  - an array reply: the script ran; the call gets it.
 *  - NOSCRIPT (the cache was flushed or Redis restarted since the SHA was loaded): the script
 *    did not run. It is loaded again and the call sent again in a second round.
 *  - another error reply (-BUSY, -OOM, -LOADING, ...): the script did not run; transient
 *    errors give EUNAVAILABLE, the rest EREDIS.
 *  - no reply (timeout, reset, EOF): this call and every later one of the batch get
 *    EUNAVAILABLE: each may or may not have run. The connection is dropped, so a late reply
 *    can never be read as the answer to a later call.
 * The breaker sees the batch as one call. */

enum { ITEM_DONE = 0, ITEM_SENT, ITEM_RESEND };

/* One batch on its way: the calls, where each stands, and whom to tell. */
typedef lk__inflight batch;

/* Answers call i, which has not been answered yet. */
static void answer(batch *b, size_t i, lk_status st, redisReply *reply)
{
    b->state[i] = ITEM_DONE;
    b->done(b->ctx, i, st, reply);
}

/* EVALSHA's count of keys, as text: a table, since a call holds at most LK__ARGV_MAX and
 * a snprintf for each call costs more than the rest of building it. */
static const char *const nkeys_text[] = {
    "0",  "1",  "2",  "3",  "4",  "5",  "6",  "7",  "8",  "9",  "10", "11", "12", "13", "14",
    "15", "16", "17", "18", "19", "20", "21", "22", "23", "24", "25", "26", "27", "28"};
_Static_assert(sizeof nkeys_text / sizeof *nkeys_text == LK__ARGV_MAX + 1,
               "one entry per possible count of keys");

/* Appends a call to the connection's output buffer (nothing is written yet). */
static int append_cmd(lk__transport *t, const lk__cmd *cmd)
{
    const char *argv[LK__ARGV_MAX + 3];
    size_t lens[LK__ARGV_MAX + 3];

    if (t->asking) {
        /* A Cluster ASK redirection: this node takes the call for a slot it is importing
         * only right after ASKING on the same connection. Its +OK is read by read_reply. */
        const char *asking[1] = {"ASKING"};
        size_t asking_len[1] = {6};
        if (redisAppendCommandArgv(t->ctx, 1, asking, asking_len) != REDIS_OK) {
            return REDIS_ERR;
        }
    }
    argv[0] = "EVALSHA";
    argv[1] = t->sha[cmd->script];
    argv[2] = nkeys_text[cmd->nkeys];
    for (int k = 0; k < cmd->argc; k++) {
        argv[3 + k] = cmd->argv[k];
    }
    for (int k = 0; k < cmd->argc + 3; k++) {
        lens[k] = strlen(argv[k]);
    }
    return redisAppendCommandArgv(t->ctx, cmd->argc + 3, argv, lens);
}

/* Loads every script the unanswered calls use that this connection lacks. */
static lk_status load_missing(lk__transport *t, const batch *b)
{
    unsigned char want[LK__SCRIPT_COUNT] = {0};
    int any = 0;

    for (size_t i = 0; i < b->n; i++) {
        enum lk__script s = b->cmds[i]->script;
        if (b->state[i] != ITEM_DONE && t->sha[s][0] == '\0') {
            want[s] = 1;
            any = 1;
        }
    }
    return any ? load_scripts(t, want) : LK_OK;
}

/* Handles the reply of call i (freed here). Returns EUNAVAILABLE for a transient error
 * reply (the connection stays), else OK. */
static lk_status handle_reply(lk__transport *t, batch *b, size_t i, redisReply *reply)
{
    if (reply->type == REDIS_REPLY_ARRAY) {
        answer(b, i, LK_OK, reply);
        return LK_OK;
    }
    if (reply->type == REDIS_REPLY_ERROR && strncmp(reply->str, "NOSCRIPT", 8) == 0) {
        freeReplyObject(reply);
        t->sha[b->cmds[i]->script][0] = '\0';
        b->state[i] = ITEM_RESEND;
        return LK_OK;
    }
    lk_status st;
    if (reply->type == REDIS_REPLY_ERROR && strncmp(reply->str, "READONLY", 8) == 0) {
        /* A demoted master (after a failover): the next batch must find the new one. */
        t->stale = 1;
    }
    if (reply->type == REDIS_REPLY_ERROR) {
        st = lk__errf(t->err, transient_error(reply->str) ? LK_EUNAVAILABLE : LK_EREDIS,
                      "Redis error: %s", reply->str);
    } else {
        st = lk__errf(t->err, LK_EREDIS, "unexpected reply type %d from script", reply->type);
    }
    freeReplyObject(reply);
    answer(b, i, st, NULL);
    return st == LK_EUNAVAILABLE ? st : LK_OK;
}

/* Reads the reply of call i, which was sent, after any owed ones. Returns EUNAVAILABLE when
 * there is none: the connection is then dropped. */
static lk_status read_reply(lk__transport *t, batch *b, size_t i)
{
    redisReply *reply = NULL;

    if (t->ctx != NULL && t->owed > 0 && lk__transport_settle(t) != LK_OK) {
        return LK_EUNAVAILABLE; /* dropped; t->err says why */
    }
    if (t->asking && t->ctx != NULL && redisGetReply(t->ctx, (void **)&reply) == REDIS_OK) {
        freeReplyObject(reply); /* ASKING's +OK; an error shows in the call's own reply */
        reply = NULL;
    }
    if (t->ctx == NULL || redisGetReply(t->ctx, (void **)&reply) != REDIS_OK || reply == NULL) {
        lk__errf(t->err, LK_EUNAVAILABLE, "Redis connection failed: %s",
                 t->ctx != NULL && t->ctx->errstr[0] ? t->ctx->errstr : "no reply");
        lk__transport_drop(t);
        return LK_EUNAVAILABLE;
    }
    return handle_reply(t, b, i, reply);
}

/* Reads the replies of the calls marked ITEM_SENT, in the order they were appended. */
static lk_status read_replies(lk__transport *t, batch *b)
{
    lk_status worst = LK_OK;

    for (size_t i = 0; i < b->n; i++) {
        if (b->state[i] != ITEM_SENT) {
            continue;
        }
        lk_status st = read_reply(t, b, i);
        if (st == LK_EUNAVAILABLE && t->ctx == NULL) {
            /* No reply: every call still waiting may or may not have run. */
            for (size_t j = i; j < b->n; j++) {
                if (b->state[j] == ITEM_SENT) {
                    answer(b, j, LK_EUNAVAILABLE, NULL);
                }
            }
            return st;
        }
        worst = st != LK_OK ? st : worst;
    }
    return worst;
}

/* One round: appends the calls marked ITEM_RESEND, then reads their replies. */
/* Appends the calls marked ITEM_RESEND (nothing is written yet). Returns OK with *sent the
 * number appended, or ENOMEM (every call of the round answered, the connection dropped). */
static lk_status append_round(lk__transport *t, batch *b, size_t *out_sent)
{
    size_t sent = 0;

    for (size_t i = 0; i < b->n; i++) {
        const lk__cmd *cmd = b->cmds[i];
        if (b->state[i] != ITEM_RESEND) {
            continue;
        }
        if (t->sha[cmd->script][0] == '\0') {
            /* Cannot happen (load_missing() loaded it); nothing of this call is queued. */
            answer(b, i, lk__errf(t->err, LK_EREDIS, "script %s was not loaded",
                                  lk__scripts[cmd->script].name), NULL);
            continue;
        }
        if (append_cmd(t, cmd) != REDIS_OK) {
            /* Out of memory in hiredis's buffer, which leaves the context in error: nothing
             * appended has been written yet, so nothing of this round ran. Every call of the
             * round is answered ENOMEM and the connection dropped. */
            lk_status st = lk__errf(t->err, LK_ENOMEM, "out of memory queuing a command; "
                                                       "nothing of the batch was sent");
            for (size_t j = 0; j < b->n; j++) {
                if (b->state[j] == ITEM_SENT || (j >= i && b->state[j] == ITEM_RESEND)) {
                    answer(b, j, st, NULL);
                }
            }
            lk__transport_drop(t);
            return st;
        }
        b->state[i] = ITEM_SENT;
        sent++;
    }
    *out_sent = sent;
    return LK_OK;
}

/* One round: appends the calls marked ITEM_RESEND, then reads their replies. */
static lk_status run_round(lk__transport *t, batch *b)
{
    size_t sent = 0;
    lk_status st = append_round(t, b, &sent);
    if (st != LK_OK || sent == 0) {
        return st;
    }
    return read_replies(t, b);
}

/* Writes what append_round() queued. A failed write leaves the context in error: the
 * replies are then missing and read_replies() answers EUNAVAILABLE (a call may have been
 * written, so it may have run). */
static void flush_round(lk__transport *t)
{
    int done = 0;
    while (t->ctx != NULL && !done && redisBufferWrite(t->ctx, &done) == REDIS_OK) {
    }
}

void lk__transport_start(lk__transport *t, lk__inflight *b, size_t n,
                         const lk__cmd *const *cmds, lk__reply_fn done, void *ctx)
{
    lk_status st;

    memset(b, 0, sizeof *b);
    b->n = n;
    b->cmds = cmds;
    b->done = done;
    b->ctx = ctx;
    b->state = calloc(n > 0 ? n : 1, 1);
    if (b->state == NULL) {
        st = lk__errf(t->err, LK_ENOMEM, "out of memory");
        for (size_t i = 0; i < n; i++) {
            done(ctx, i, st, NULL);
        }
        return;
    }
    if (lk__breaker_enter(t->breaker, &b->probe, t->err) != 0) {
        for (size_t i = 0; i < n; i++) {
            done(ctx, i, LK_EUNAVAILABLE, NULL);
        }
        free(b->state);
        b->state = NULL;
        return;
    }
    memset(b->state, ITEM_RESEND, n); /* round one sends everything */
    b->start = lk__now_ms();
    lk__sigpipe guard;
    lk__sigpipe_block(&guard);
    st = lk__transport_connect(t);
    if (st == LK_OK) {
        /* A failed load leaves st: the calls not yet answered get it in finish(). */
        st = load_missing(t, b);
    }
    size_t sent = 0;
    if (st == LK_OK) {
        st = append_round(t, b, &sent);
    }
    if (st == LK_OK && sent > 0) {
        flush_round(t);
    }
    lk__sigpipe_restore(&guard);
    b->st = st;
    b->worst = st;
    if (st != LK_OK) {
        snprintf(b->why, sizeof b->why, "%s", t->err);
    }
}

void lk__transport_finish(lk__transport *t, lk__inflight *b)
{
    lk_status st = b->st;
    lk_status worst = b->worst;

    if (b->state == NULL) {
        return; /* answered by start() */
    }
    lk__sigpipe guard;
    lk__sigpipe_block(&guard);
    if (st == LK_OK) {
        /* Round one's replies; a call answered NOSCRIPT is sent again in round two. */
        lk_status r = read_replies(t, b);
        worst = r != LK_OK ? r : worst;
        st = t->ctx != NULL ? LK_OK : r;
    }
    if (st == LK_OK) {
        st = load_missing(t, b);
        if (st == LK_OK) {
            lk_status r = run_round(t, b);
            worst = r != LK_OK ? r : worst;
            st = t->ctx != NULL ? LK_OK : r;
        }
        worst = st != LK_OK ? st : worst;
    }
    lk__sigpipe_restore(&guard);
    if (b->st != LK_OK && st == b->st) {
        snprintf(t->err, LK__ERR_LEN, "%s", b->why); /* start()'s reason, not a later one */
    }
    t->unsent = 1;
    for (size_t i = 0; i < b->n; i++) {
        if (b->state[i] != ITEM_DONE) {
            /* Not sent (no connection, a script that would not load), or answered NOSCRIPT
             * twice: it did not run. */
            answer(b, i, st != LK_OK ? st : lk__errf(t->err, LK_EREDIS, "script cache keeps "
                                                     "losing the script (NOSCRIPT twice)"),
                   NULL);
        }
    }
    t->unsent = 0;
    lk__breaker_leave(t->breaker, b->probe, worst,
                      redis_slow(t, worst, lk__now_ms() - b->start));
    if (t->stale) {
        lk__transport_drop(t);
    }
    free(b->state);
    b->state = NULL;
}

/* ---- Reading several nodes at once (transport_internal.h) ------------------------------ */

/* The first call of b still waiting for its reply, or b->n. */
static size_t first_sent(const batch *b)
{
    size_t i = 0;
    while (i < b->n && b->state[i] != ITEM_SENT) {
        i++;
    }
    return i;
}

int lk__transport_waiting(const lk__transport *t, const lk__inflight *b)
{
    return t->ctx != NULL && b->state != NULL && b->st == LK_OK && first_sent(b) < b->n;
}

/* The connection failed with calls of b waiting: as read_replies() without a reply. */
static void fail_waiting(lk__transport *t, batch *b)
{
    b->st = lk__errf(t->err, LK_EUNAVAILABLE, "Redis connection failed: %s",
                     t->ctx != NULL && t->ctx->errstr[0] ? t->ctx->errstr : "no reply");
    b->worst = b->st;
    lk__transport_drop(t);
    for (size_t j = first_sent(b); j < b->n; j++) {
        if (b->state[j] == ITEM_SENT) {
            answer(b, j, LK_EUNAVAILABLE, NULL);
        }
    }
}

void lk__transport_read_ready(lk__transport *t, lk__inflight *b)
{
    if (!lk__transport_waiting(t, b)) {
        return;
    }
    /* One read(): poll() said it does not block. Only reads here: no SIGPIPE to guard. */
    if (redisBufferRead(t->ctx) != REDIS_OK) {
        fail_waiting(t, b);
    }
    for (size_t i = first_sent(b); t->ctx != NULL && i < b->n; i = first_sent(b)) {
        redisReply *reply = NULL;
        if (redisGetReplyFromReader(t->ctx, (void **)&reply) != REDIS_OK) {
            fail_waiting(t, b); /* a protocol error */
            break;
        }
        if (reply == NULL) {
            break; /* the rest has not arrived yet */
        }
        if (t->owed > 0) {
            drop_owed(t, reply);
        } else if (handle_reply(t, b, i, reply) != LK_OK) {
            b->worst = LK_EUNAVAILABLE;
        }
    }
}

void lk__transport_abandon(lk__transport *t, lk__inflight *b)
{
    if (b->state == NULL) {
        return; /* answered by start() */
    }
    for (size_t i = 0; i < b->n; i++) {
        if (b->state[i] == ITEM_SENT && t->ctx != NULL) {
            t->owed++;
        }
        if (b->state[i] != ITEM_DONE) {
            /* Waiting: it may run, unseen. To resend (NOSCRIPT): it did not run. */
            answer(b, i, LK_EUNAVAILABLE, NULL);
        }
    }
    lk__breaker_leave(t->breaker, b->probe, b->worst, 0);
    if (t->stale) {
        lk__transport_drop(t);
    }
    free(b->state);
    b->state = NULL;
}

void lk__transport_run(lk__transport *t, size_t n, const lk__cmd *const *cmds,
                       lk__reply_fn done, void *ctx)
{
    lk__inflight b;

    if (t->ops != NULL) {
        t->ops->run(t, n, cmds, done, ctx);
        return;
    }
    lk__transport_start(t, &b, n, cmds, done, ctx);
    lk__transport_finish(t, &b);
}

lk_status lk__transport_wait(lk__transport *t, int replicas, int timeout_ms, long long *acked)
{
    if (t->ops != NULL) {
        return t->ops->wait(t, replicas, timeout_ms, acked);
    }
    char n[16];
    char timeout[16];
    snprintf(n, sizeof n, "%d", replicas);
    snprintf(timeout, sizeof timeout, "%d", timeout_ms);
    const char *argv[3] = {"WAIT", n, timeout};
    size_t lens[3] = {4, strlen(n), strlen(timeout)};

    *acked = 0;
    if (t->ctx == NULL) {
        return lk__errf(t->err, LK_EUNAVAILABLE, "connection lost before WAIT");
    }
    redisReply *reply = lk__command_argv(t->ctx, 3, argv, lens);
    if (reply == NULL) {
        /* A timeout or I/O error leaves the context in an error state in which hiredis
         * refuses every command, the rollback's included: roll back on a new connection. */
        lk__transport_drop(t);
    }
    if (reply != NULL && reply->type == REDIS_REPLY_INTEGER) {
        *acked = reply->integer;
    }
    freeReplyObject(reply);
    return LK_OK;
}

static lk_status ping(lk__transport *t)
{
    const char *argv[1] = {"PING"};
    size_t lens[1] = {4};
    lk_status st = lk__transport_connect(t);
    redisReply *reply = NULL;

    if (st == LK_OK) {
        st = lk__transport_settle(t);
    }
    if (st != LK_OK) {
        return st;
    }
    reply = lk__command_argv(t->ctx, 1, argv, lens);
    if (reply == NULL) {
        return io_failure(t);
    }
    if (reply->type == REDIS_REPLY_STATUS && strcmp(reply->str, "PONG") == 0) {
        st = LK_OK;
    } else {
        st = lk__errf(t->err, LK_EUNAVAILABLE, "PING answered %s",
                      reply->str != NULL ? reply->str : "?");
    }
    freeReplyObject(reply);
    return st;
}

lk_status lk__transport_ping(lk__transport *t)
{
    if (t->ops != NULL) {
        return t->ops->ping(t);
    }
    int probe = 0;

    if (lk__breaker_enter(t->breaker, &probe, t->err) != 0) {
        return LK_EUNAVAILABLE;
    }
    int64_t start = lk__now_ms();
    lk_status st = ping(t);
    lk__breaker_leave(t->breaker, probe, st, redis_slow(t, st, lk__now_ms() - start));
    return st;
}
