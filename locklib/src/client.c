/*
 * The client handle: URL parsing, connections, and running the embedded scripts.
 *
 * Failure handling, in order of how often it happens:
 *  - Redis restarted or the connection dropped between calls: before sending, a dead socket
 *    (EOF or stray bytes) is noticed with a zero-timeout poll, and the call reconnects first.
 *    Nothing was sent, so nothing is ambiguous.
 *  - The connection dies, or the reply is later than command_timeout_ms, after a command was
 *    sent: the call returns LK_EUNAVAILABLE and drops the connection; the next call
 *    reconnects. The script may or may not have run. Callers that retry pass the same
 *    idempotency key, so a retry replays the first answer instead of acting twice.
 *  - A restarted Redis has an empty script cache: EVALSHA answers NOSCRIPT (which means the
 *    script did not run), and the script is loaded again and re-run once.
 *  - Redis busy, loading, out of memory (noeviction), read-only replica: LK_EUNAVAILABLE,
 *    nothing changed.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "locklib_internal.h"

static const char *script_text(enum lk__script s, size_t *len)
{
    *len = lk__scripts[s].len;
    return lk__scripts[s].text;
}

int64_t lk__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

lk_status lk__fail(lk_client *c, lk_status st, const char *fmt, ...)
{
    va_list ap;
    if (c != NULL) {
        va_start(ap, fmt);
        vsnprintf(c->err, sizeof c->err, fmt, ap);
        va_end(ap);
    }
    return st;
}

void lk__sigpipe_block(lk__sigpipe *g)
{
    sigset_t pipe_set;
    sigset_t pending;

    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &g->old);
    sigpending(&pending);
    g->was_pending = sigismember(&pending, SIGPIPE);
}

void lk__sigpipe_restore(lk__sigpipe *g)
{
    sigset_t pipe_set;
    sigset_t pending;
    struct timespec zero = {0, 0};

    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    /* Swallow only a SIGPIPE that our own writes raised; one that was already pending
     * belongs to the application. */
    if (!g->was_pending) {
        sigpending(&pending);
        if (sigismember(&pending, SIGPIPE)) {
            while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR) {
            }
        }
    }
    pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

/* Parses redis://[[user]:password@]host[:port][/db] or unix:///path into c. */
static int parse_url(lk_client *c, const char *url)
{
    const char *p = NULL;
    const char *at = NULL;
    const char *hostend = NULL;
    char hostport[300];

    c->port = 6379;
    if (strncmp(url, "unix://", 7) == 0) {
        p = url + 7;
        if (p[0] != '/' || strlen(p) >= sizeof c->unix_path) {
            return -1;
        }
        snprintf(c->unix_path, sizeof c->unix_path, "%s", p);
        return 0;
    }
    if (strncmp(url, "redis://", 8) != 0) {
        return -1;
    }
    p = url + 8;
    at = strrchr(p, '@');
    if (at != NULL) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        if (colon == NULL || (size_t)(colon - p) >= sizeof c->user ||
            (size_t)(at - colon - 1) >= sizeof c->password) {
            return -1;
        }
        memcpy(c->user, p, (size_t)(colon - p));
        memcpy(c->password, colon + 1, (size_t)(at - colon - 1));
        p = at + 1;
    }
    hostend = strchr(p, '/');
    if (hostend == NULL) {
        hostend = p + strlen(p);
    } else {
        char *end = NULL;
        long db = strtol(hostend + 1, &end, 10);
        if (hostend[1] != '\0' && (*end != '\0' || db < 0 || db > 1000000)) {
            return -1;
        }
        c->db = (int)db;
    }
    if ((size_t)(hostend - p) >= sizeof hostport || hostend == p) {
        return -1;
    }
    memcpy(hostport, p, (size_t)(hostend - p));
    hostport[hostend - p] = '\0';
    char *colon = strrchr(hostport, ':');
    if (colon != NULL) {
        char *end = NULL;
        long port = strtol(colon + 1, &end, 10);
        if (*end != '\0' || port < 1 || port > 65535) {
            return -1;
        }
        c->port = (int)port;
        *colon = '\0';
    }
    size_t hostlen = strlen(hostport);
    if (hostlen == 0 || hostlen >= sizeof c->host) {
        return -1;
    }
    memcpy(c->host, hostport, hostlen + 1);
    return 0;
}

static struct timeval ms_to_tv(int ms)
{
    struct timeval tv = {ms / 1000, (long)(ms % 1000) * 1000};
    return tv;
}

/* Runs one command on ctx with the SIGPIPE guard. Returns the reply or NULL. */
static redisReply *command_argv(redisContext *ctx, int argc, const char **argv,
                                const size_t *lens)
{
    lk__sigpipe guard;
    lk__sigpipe_block(&guard);
    redisReply *reply = redisCommandArgv(ctx, argc, argv, lens);
    lk__sigpipe_restore(&guard);
    return reply;
}

redisContext *lk__connect(lk_client *c)
{
    struct timeval connect_tv = ms_to_tv(c->opts.connect_timeout_ms);
    redisContext *ctx = NULL;
    redisReply *reply = NULL;

    if (c->unix_path[0] != '\0') {
        ctx = redisConnectUnixWithTimeout(c->unix_path, connect_tv);
    } else {
        ctx = redisConnectWithTimeout(c->host, c->port, connect_tv);
    }
    if (ctx == NULL) {
        lk__fail(c, LK_ENOMEM, "cannot allocate a Redis context");
        return NULL;
    }
    if (ctx->err) {
        lk__fail(c, LK_EUNAVAILABLE, "cannot connect to Redis: %s", ctx->errstr);
        goto fail;
    }
    redisSetTimeout(ctx, ms_to_tv(c->opts.command_timeout_ms));
    if (c->unix_path[0] == '\0') {
        redisEnableKeepAlive(ctx);
    }
    if (c->password[0] != '\0') {
        const char *argv[3] = {"AUTH", c->user, c->password};
        size_t lens[3] = {4, strlen(c->user), strlen(c->password)};
        int argc = 3;
        if (c->user[0] == '\0') {
            argv[1] = c->password;
            lens[1] = lens[2];
            argc = 2;
        }
        reply = command_argv(ctx, argc, argv, lens);
        if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
            /* The password itself is never copied into the message. */
            lk__fail(c, LK_EUNAVAILABLE, "Redis AUTH failed: %s",
                     reply != NULL ? reply->str : ctx->errstr);
            goto fail;
        }
        freeReplyObject(reply);
        reply = NULL;
    }
    if (c->db != 0) {
        char db[16];
        snprintf(db, sizeof db, "%d", c->db);
        const char *argv[2] = {"SELECT", db};
        size_t lens[2] = {6, strlen(db)};
        reply = command_argv(ctx, 2, argv, lens);
        if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
            lk__fail(c, LK_EUNAVAILABLE, "Redis SELECT failed: %s",
                     reply != NULL ? reply->str : ctx->errstr);
            goto fail;
        }
        freeReplyObject(reply);
    }
    return ctx;
fail:
    freeReplyObject(reply);
    redisFree(ctx);
    return NULL;
}

/* 1 when the idle connection is still usable: no EOF, no error, no unread bytes. A Redis
 * that restarted since the last call shows up here as EOF, before anything is sent. */
int lk__idle_alive(redisContext *ctx)
{
    struct pollfd pfd = {ctx->fd, POLLIN, 0};
    char byte;
    int n = poll(&pfd, 1, 0);

    if (n == 0) {
        return 1;
    }
    if (n < 0) {
        return errno == EINTR;
    }
    if (pfd.revents & (POLLERR | POLLHUP | POLLNVAL)) {
        return 0;
    }
    /* Readable while idle: either EOF (0) or bytes we never asked for; both mean the
     * stream cannot be trusted. */
    (void)recv(ctx->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return 0;
}

void lk__drop_conn(lk_client *c)
{
    if (c->ctx != NULL) {
        redisFree(c->ctx);
        c->ctx = NULL;
    }
    memset(c->sha, 0, sizeof c->sha);
}

static lk_status ensure_conn(lk_client *c)
{
    /* hiredis refuses every command on a context whose err is set (a timed-out reply, say),
     * so such a context is as dead as a closed socket. */
    if (c->ctx != NULL && (c->ctx->err != 0 || !lk__idle_alive(c->ctx))) {
        lk__drop_conn(c);
    }
    if (c->ctx == NULL) {
        c->ctx = lk__connect(c);
        if (c->ctx == NULL) {
            return LK_EUNAVAILABLE;
        }
    }
    return LK_OK;
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
static lk_status io_failure(lk_client *c)
{
    lk_status st = lk__fail(c, LK_EUNAVAILABLE, "Redis connection failed: %s",
                            c->ctx->errstr[0] ? c->ctx->errstr : "no reply");
    lk__drop_conn(c);
    return st;
}

static lk_status load_script(lk_client *c, enum lk__script s)
{
    size_t len = 0;
    const char *text = script_text(s, &len);
    const char *argv[3] = {"SCRIPT", "LOAD", text};
    size_t lens[3] = {6, 4, len};
    redisReply *reply = command_argv(c->ctx, 3, argv, lens);

    if (reply == NULL) {
        return io_failure(c);
    }
    if (reply->type != REDIS_REPLY_STRING || reply->len != 40) {
        lk_status st = lk__fail(c, transient_error(reply->str ? reply->str : "") ?
                                       LK_EUNAVAILABLE : LK_EREDIS,
                                "SCRIPT LOAD failed: %s", reply->str ? reply->str : "?");
        freeReplyObject(reply);
        return st;
    }
    memcpy(c->sha[s], reply->str, 41);
    freeReplyObject(reply);
    return LK_OK;
}

/* Was Redis slow, or was this process paused while Redis answered? A call that got its reply
 * after more than half the timeout is confirmed with a PING allowed a tenth of the timeout
 * (at least 50 ms): a quick PONG means the time went elsewhere (SIGSTOP, a frozen VM, CPU
 * starvation) and the breaker must not trip. A PING that does not answer in time leaves the
 * connection with a reply pending, so it is dropped; the next call reconnects. */
static int redis_slow(lk_client *c, lk_status st, int64_t elapsed_ms)
{
    if (!lk__breaker_slow(c, elapsed_ms)) {
        return 0;
    }
    if (st == LK_EUNAVAILABLE || c->ctx == NULL) {
        return 1; /* it failed after waiting: nothing answered */
    }
    int quick_ms = c->opts.command_timeout_ms / 10 > 50 ? c->opts.command_timeout_ms / 10 : 50;
    const char *argv[1] = {"PING"};
    size_t lens[1] = {4};
    redisSetTimeout(c->ctx, ms_to_tv(quick_ms));
    redisReply *reply = command_argv(c->ctx, 1, argv, lens);
    int slow = reply == NULL;
    freeReplyObject(reply);
    if (slow) {
        lk__drop_conn(c);
    } else {
        redisSetTimeout(c->ctx, ms_to_tv(c->opts.command_timeout_ms));
    }
    return slow;
}

/* ---- Pipelines ------------------------------------------------------------------------
 *
 * lk__eval_many() writes every script call of a batch before it reads the first reply, so
 * Redis runs the whole batch in one pass of its event loop and, under appendfsync always,
 * one fsync covers all of it. Every single-call function goes through it too (n = 1).
 *
 * Failures, per item, in the order the replies are read:
 *  - an array reply: the script ran; the item gets it.
 *  - NOSCRIPT (the cache was flushed or Redis restarted since the SHA was loaded): the script
 *    did not run. It is loaded again and the item sent again in a second round.
 *  - another error reply (-BUSY, -OOM, -LOADING, ...): the script did not run; transient
 *    errors give EUNAVAILABLE, the rest EREDIS.
 *  - no reply (timeout, reset, EOF): this item and every later one of the batch get
 *    EUNAVAILABLE: each may or may not have run. The connection is dropped, so a late reply
 *    can never be read as the answer to a later call.
 * The breaker sees the batch as one call. */

enum { ITEM_DONE = 0, ITEM_SENT, ITEM_RESEND };

/* Appends an item to the connection's output buffer (nothing is written yet). */
static int append_item(lk_client *c, const lk__item *it)
{
    const char *cmd[LK__ARGV_MAX + 3];
    size_t lens[LK__ARGV_MAX + 3];
    char nkeys_str[8];

    snprintf(nkeys_str, sizeof nkeys_str, "%d", it->nkeys);
    cmd[0] = "EVALSHA";
    cmd[1] = c->sha[it->script];
    cmd[2] = nkeys_str;
    for (int k = 0; k < it->argc; k++) {
        cmd[3 + k] = it->argv[k];
    }
    for (int k = 0; k < it->argc + 3; k++) {
        lens[k] = strlen(cmd[k]);
    }
    return redisAppendCommandArgv(c->ctx, it->argc + 3, cmd, lens);
}

/* Loads every script of `scripts` (a bit per enum lk__script) this connection lacks. */
static lk_status load_missing(lk_client *c, unsigned scripts)
{
    for (int s = 0; s < LK__SCRIPT_COUNT; s++) {
        if ((scripts & (1u << s)) && c->sha[s][0] == '\0') {
            lk_status st = load_script(c, (enum lk__script)s);
            if (st != LK_OK) {
                return st;
            }
        }
    }
    return LK_OK;
}

/* Reads the replies of the items marked ITEM_SENT, in the order they were appended. */
static lk_status read_replies(lk_client *c, size_t n, unsigned char *state,
                              unsigned char *script, lk__reply_fn done, void *ctx)
{
    lk_status worst = LK_OK;

    for (size_t i = 0; i < n; i++) {
        redisReply *reply = NULL;
        if (state[i] != ITEM_SENT) {
            continue;
        }
        if (c->ctx == NULL || redisGetReply(c->ctx, (void **)&reply) != REDIS_OK ||
            reply == NULL) {
            /* Every item still waiting may or may not have run. */
            worst = lk__fail(c, LK_EUNAVAILABLE, "Redis connection failed: %s",
                             c->ctx != NULL && c->ctx->errstr[0] ? c->ctx->errstr : "no reply");
            lk__drop_conn(c);
            for (size_t j = i; j < n; j++) {
                if (state[j] == ITEM_SENT) {
                    state[j] = ITEM_DONE;
                    done(ctx, j, LK_EUNAVAILABLE, NULL);
                }
            }
            return worst;
        }
        if (reply->type == REDIS_REPLY_ARRAY) {
            state[i] = ITEM_DONE;
            done(ctx, i, LK_OK, reply);
            continue;
        }
        if (reply->type == REDIS_REPLY_ERROR && strncmp(reply->str, "NOSCRIPT", 8) == 0) {
            freeReplyObject(reply);
            c->sha[script[i]][0] = '\0';
            state[i] = ITEM_RESEND;
            continue;
        }
        lk_status st;
        if (reply->type == REDIS_REPLY_ERROR) {
            st = lk__fail(c, transient_error(reply->str) ? LK_EUNAVAILABLE : LK_EREDIS,
                          "Redis error: %s", reply->str);
        } else {
            st = lk__fail(c, LK_EREDIS, "unexpected reply type %d from script", reply->type);
        }
        freeReplyObject(reply);
        if (st == LK_EUNAVAILABLE) {
            worst = st;
        }
        state[i] = ITEM_DONE;
        done(ctx, i, st, NULL);
    }
    return worst;
}

/* One round: appends the items in `want` state, then reads their replies. */
static lk_status run_round(lk_client *c, size_t n, unsigned char *state, unsigned char *script,
                           unsigned char want, lk__build_fn build, lk__reply_fn done,
                           void *ctx)
{
    size_t sent = 0;

    for (size_t i = 0; i < n; i++) {
        lk__item it;
        if (state[i] != want) {
            continue;
        }
        if (build(ctx, i, &it) != 0) {
            state[i] = ITEM_DONE; /* refused before sending; build() answered it */
            continue;
        }
        script[i] = (unsigned char)it.script;
        if (c->sha[it.script][0] == '\0') {
            /* A script the caller did not declare: nothing of this item is queued. */
            state[i] = ITEM_DONE;
            done(ctx, i, lk__fail(c, LK_EREDIS, "script %d was not loaded", it.script), NULL);
            continue;
        }
        if (append_item(c, &it) != REDIS_OK) {
            /* Out of memory in hiredis's buffer, which leaves the context in error: nothing
             * appended has been written yet, so nothing of this round ran. Every item of the
             * round is answered ENOMEM and the connection dropped. */
            lk_status st = lk__fail(c, LK_ENOMEM, "out of memory queuing a command; nothing "
                                                  "of the batch was sent");
            for (size_t j = 0; j < n; j++) {
                if (state[j] == ITEM_SENT || (j >= i && state[j] == want)) {
                    state[j] = ITEM_DONE;
                    done(ctx, j, st, NULL);
                }
            }
            lk__drop_conn(c);
            return st;
        }
        state[i] = ITEM_SENT;
        sent++;
    }
    if (sent == 0) {
        return LK_OK;
    }
    return read_replies(c, n, state, script, done, ctx);
}

void lk__eval_many(lk_client *c, size_t n, unsigned scripts, lk__build_fn build,
                   lk__reply_fn done, void *ctx)
{
    unsigned char *state = calloc(n > 0 ? n : 1, 2);
    unsigned char *script = state + (n > 0 ? n : 1);
    int probe = 0;
    lk_status st;

    if (state == NULL || lk__breaker_enter(c, &probe) != 0) {
        st = state == NULL ? lk__fail(c, LK_ENOMEM, "out of memory") : LK_EUNAVAILABLE;
        for (size_t i = 0; i < n; i++) {
            done(ctx, i, st, NULL);
        }
        free(state);
        return;
    }
    memset(state, ITEM_RESEND, n); /* round one sends everything */
    int64_t start = lk__now_ms();
    lk__sigpipe guard;
    lk__sigpipe_block(&guard);
    st = ensure_conn(c);
    lk_status worst = st;
    for (int round = 0; round < 2 && st == LK_OK; round++) {
        /* A failed load leaves st: the items not yet answered get it below. */
        st = load_missing(c, scripts);
        if (st == LK_OK) {
            lk_status r = run_round(c, n, state, script, ITEM_RESEND, build, done, ctx);
            worst = r != LK_OK ? r : worst;
            st = c->ctx != NULL ? LK_OK : r;
        }
        worst = st != LK_OK ? st : worst;
    }
    lk__sigpipe_restore(&guard);
    for (size_t i = 0; i < n; i++) {
        if (state[i] != ITEM_DONE) {
            /* Not sent (no connection, a script that would not load), or answered NOSCRIPT
             * twice: it did not run. */
            done(ctx, i, st != LK_OK ? st : lk__fail(c, LK_EREDIS, "script cache keeps losing "
                                                     "the script (NOSCRIPT twice)"),
                 NULL);
        }
    }
    lk__breaker_leave(c, probe, worst, redis_slow(c, worst, lk__now_ms() - start));
    free(state);
}

/* lk__eval()'s single item. */
typedef struct one_eval {
    lk__item item;
    lk_status st;
    redisReply *reply;
} one_eval;

static int one_build(void *ctx, size_t i, lk__item *it)
{
    (void)i;
    *it = ((one_eval *)ctx)->item;
    return 0;
}

static void one_done(void *ctx, size_t i, lk_status st, redisReply *reply)
{
    one_eval *e = ctx;
    (void)i;
    e->st = st;
    e->reply = reply;
}

lk_status lk__eval(lk_client *c, enum lk__script script, int nkeys, int argc, const char **argv,
                   redisReply **out)
{
    one_eval e = {.item = {.script = script, .nkeys = nkeys, .argc = argc}, .st = LK_EREDIS};

    *out = NULL;
    if (argc > LK__ARGV_MAX) {
        return lk__fail(c, LK_EINVAL, "too many script arguments");
    }
    for (int k = 0; k < argc; k++) {
        e.item.argv[k] = argv[k];
    }
    lk__eval_many(c, 1, 1u << script, one_build, one_done, &e);
    *out = e.reply;
    return e.st;
}

long long lk__int_at(const redisReply *r, size_t i)
{
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || i >= r->elements ||
        r->element[i]->type != REDIS_REPLY_INTEGER) {
        return 0;
    }
    return r->element[i]->integer;
}

void lk_options_init(lk_options *opts)
{
    memset(opts, 0, sizeof *opts);
    opts->connect_timeout_ms = 2000;
    opts->command_timeout_ms = 2000;
    opts->watchdog_lease_ms = 30000;
    opts->idempotency_ttl_ms = 600000;
    opts->replica_timeout_ms = 1000;
}

static int options_valid(const lk_options *o)
{
    /* With replicas to wait for, WAIT must answer before the command timeout: WAIT 0 blocks
     * forever, and a later answer would leave the connection unusable for the rollback. */
    int replicas_ok = o->min_replicas == 0 ||
                      (o->replica_timeout_ms > 0 && o->replica_timeout_ms < o->command_timeout_ms);
    return o->connect_timeout_ms > 0 && o->command_timeout_ms > 0 &&
           lk__valid_lease(o->watchdog_lease_ms) && o->idempotency_ttl_ms >= 1000 &&
           o->min_replicas >= 0 && o->replica_timeout_ms >= 0 && replicas_ok;
}

lk_status lk__client_new(lk_client **out, const char *url, const lk_options *opts)
{
    lk_client *c = NULL;

    *out = NULL;
    if (url == NULL || (opts != NULL && !options_valid(opts))) {
        return LK_EINVAL;
    }
    c = calloc(1, sizeof *c);
    if (c == NULL) {
        return LK_ENOMEM;
    }
    if (opts != NULL) {
        c->opts = *opts;
    } else {
        lk_options_init(&c->opts);
    }
    if (parse_url(c, url) != 0) {
        free(c);
        return LK_EINVAL;
    }
    c->url = strdup(url);
    if (c->url == NULL) {
        free(c);
        return LK_ENOMEM;
    }
    lk_random_id(c->id);
    *out = c;
    return LK_OK;
}

lk_status lk_client_open(lk_client **out, const char *url, const lk_options *opts)
{
    lk_status st = lk__client_new(out, url, opts);
    if (st != LK_OK) {
        return st;
    }
    (*out)->ctx = lk__connect(*out);
    return (*out)->ctx != NULL ? LK_OK : LK_EUNAVAILABLE;
}

void lk_client_close(lk_client *c)
{
    if (c == NULL) {
        return;
    }
    lk__watchdog_stop(c);
    lk__drop_conn(c);
    if (c->sub != NULL) {
        redisFree(c->sub);
    }
    /* The password and id are capabilities: do not leave them in freed memory. */
    memset(c->password, 0, sizeof c->password);
    memset(c->id, 0, sizeof c->id);
    free(c->url);
    free(c);
}

const char *lk_errstr(const lk_client *c)
{
    return c != NULL ? c->err : "no client";
}

char *lk_owner_id(const lk_client *c, char *buf)
{
    static _Atomic unsigned long next_thread_no = 1;
    static _Thread_local unsigned long thread_no = 0;

    if (thread_no == 0) {
        thread_no = next_thread_no++;
    }
    snprintf(buf, LK_OWNER_ID_LEN + 1, "%s:%lu", c->id, thread_no);
    return buf;
}

static lk_status ping(lk_client *c);

lk_status lk_ping(lk_client *c)
{
    int probe = 0;

    if (lk__breaker_enter(c, &probe) != 0) {
        return LK_EUNAVAILABLE;
    }
    int64_t start = lk__now_ms();
    lk_status st = ping(c);
    lk__breaker_leave(c, probe, st, redis_slow(c, st, lk__now_ms() - start));
    return st;
}

static lk_status ping(lk_client *c)
{
    const char *argv[1] = {"PING"};
    size_t lens[1] = {4};
    lk_status st = ensure_conn(c);
    redisReply *reply = NULL;

    if (st != LK_OK) {
        return st;
    }
    reply = command_argv(c->ctx, 1, argv, lens);
    if (reply == NULL) {
        return io_failure(c);
    }
    if (reply->type == REDIS_REPLY_STATUS && strcmp(reply->str, "PONG") == 0) {
        st = LK_OK;
    } else {
        st = lk__fail(c, LK_EUNAVAILABLE, "PING answered %s",
                      reply->str != NULL ? reply->str : "?");
    }
    freeReplyObject(reply);
    return st;
}
