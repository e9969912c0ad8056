/*
 * lk_sub: release notifications for many resources on one subscriber connection, for a
 * process that parks its own waiters (the gateway) instead of blocking a thread per waiter
 * in lk_acquire_wait().
 *
 * The connection is driven by the caller's event loop: it polls lk_sub_fd() for input and
 * calls lk_sub_dispatch() when the descriptor is readable. Every call happens on one thread.
 * What happens when things fail:
 *   - The connection drops (Redis restarts, CLIENT KILL, a network fault): lk_sub_dispatch()
 *     or lk_sub_add() returns LK_EUNAVAILABLE and the handle is disconnected. Release
 *     messages sent meanwhile are lost, since pub/sub keeps nothing. The caller reconnects
 *     with lk_sub_reconnect(), subscribes again, and treats each LK_SUB_SUBSCRIBED event as
 *     "anything may have been released while you were not listening: look again".
 *   - Redis is slow: writes block at most the command timeout; reads never block, because
 *     lk_sub_dispatch() reads only what poll() reported as readable.
 *
 * Redlock (redlock://): a release runs on every master, and each master it ran on publishes
 * it. The handle subscribes on every master that counts at (re)connect time, one connection
 * each, behind one epoll descriptor: lk_sub_fd() is that descriptor, readable when any of
 * them is, so the caller's loop is the same. Each release is reported once, at the first
 * master's message, by the hold id its message names (step 6 below), and again only when
 * a later master's message names a larger token for it (step 5); LK_SUB_SUBSCRIBED is
 * reported at the first master's confirmation of the current subscription (step 7).
 * A master whose connection fails is dropped and the others go on; when none is left the
 * handle is disconnected, as with one connection.
 *
 * Redlock, a master that dropped (or could not be reached at (re)connect time) comes back
 * on its own, while the others go on:
 *   1. dropping it arms a timerfd that sits in the same epoll set, so lk_sub_fd() turns
 *      readable when it is time to retry, with no help from the caller's loop;
 *   2. lk_sub_dispatch() then connects to every dropped master (each connect is bounded by
 *      the per-node connect timeout, a write by the per-node command timeout) and sends it
 *      one SUBSCRIBE per resource subscribed; a master that still fails is retried after a
 *      backoff that doubles from RETRY_MIN_MS up to RETRY_MAX_MS;
 *   3. releases published while it was away were missed only if no other master published
 *      them; since that cannot be known, the resubscription re-arms LK_SUB_SUBSCRIBED for
 *      every resource, so the master's confirmation is reported again: the caller's "look
 *      again" (waiters.c wakes one waiter) covers what may have been lost;
 *   4. at master k's first confirmation after its resubscription, its count for the
 *      resource is set to the number of releases reported, so that a release published only
 *      there afterwards is reported, not taken for one it missed. (Not at the first
 *      subscription: there a master that confirms late would report again a release the
 *      others reported meanwhile.)
 *   5. a message's token (lk_sub_event_token) is that master's token of the hold released:
 *      the grant's once its write-back arrived (fence_raise.lua sets "#token"), else the one
 *      that master minted.
 *   6. Counting cannot tell releases apart: a master publishes a release only where the
 *      lock was marked wanted (lua/prelude/wanted.lua), and an acquisition given back on a
 *      minority publishes there alone, so the masters' counts drift apart; then a release
 *      published only by masters behind another's passes no count and is lost to every
 *      listener (its waiters sleep until the lease ends), and some releases are reported
 *      twice. Tokens cannot either: two holds can have the same token on different
 *      masters (a minority's give-back, and the next grant on the others). So every
 *      acquisition carries a hold id drawn by the caller, the same on every master
 *      (acquire.lua ARGV[8], kept in the lock's "#hold"), and the release message names it
 *      ("<token>:<hold id>"). A message with a hold id is reported unless one with the
 *      same id was, among the last SEEN_HOLDS: each release once, whichever masters
 *      published it; again when it names a larger token than was reported for that hold
 *      (the first master's write-back had failed, step 5), so that a listener that saw the
 *      grant's token hears of the release too. One hold can also carry different ids on
 *      different masters (a retry with an idempotency key draws a new id, and a master that
 *      missed the first call mints with it while the others replay): its release is then
 *      reported once per id, one attempt more for a listener. Messages without one (a
 *      release script from before hold ids, a fair queue's cancel) go by the counts, and a
 *      repeat of a release is then reported too when its token is larger than any reported.
 *   7. A resource unsubscribed and subscribed again (its last waiter left, then a new one
 *      came) before a master confirmed the first SUBSCRIBE: that master's confirmation
 *      still arrives, ahead of the UNSUBSCRIBE's and the new SUBSCRIBE's. It is not the new
 *      subscription's, so it is not reported: a listener told "subscribed" then would look
 *      again while the new SUBSCRIBE may not have taken effect on any master, and a release
 *      in between would reach it from no master; the confirmation that did take effect would
 *      then pass for a repeat. Each resource counts, per master, the SUBSCRIBEs not yet
 *      confirmed and, of those, the ones sent before its last UNSUBSCRIBE, and passes over
 *      that many confirmations first.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "sub_internal.h"

/* The backoff between attempts to resubscribe a dropped master (Redlock). */
#define RETRY_MIN_MS 100
#define RETRY_MAX_MS 2000
/* Hold ids a Redlock resource remembers (file head, step 6): more releases than usually
 * happen between the first and the last master's message of one. A master that lags
 * further behind has its messages reported again: one attempt more for a listener each,
 * nothing lost. */
#define SEEN_HOLDS 16
/* The epoll tag of the retry timer: above every master's index. */
#define TIMER_TAG ((uint32_t)LK_REDLOCK_NODES_MAX)

/* Redlock: one subscribed resource, for reporting each release once. */
typedef struct sub_seen {
    char resource[LK_RESOURCE_MAX + 1];
    uint32_t got[LK_REDLOCK_NODES_MAX]; /* messages from each master */
    uint32_t reported;                  /* releases reported */
    int64_t top_token;                  /* the largest token reported (file head, step 5) */
    struct {
        uint64_t id;                    /* hold ids of the last releases reported (step 6) */
        int64_t token;                  /* the largest token reported for it */
    } holds[SEEN_HOLDS];
    unsigned nholds;                    /* hold ids ever put in holds[] */
    uint32_t resync;                    /* bit k: master k was resubscribed (file head) */
    int subscribed;                     /* LK_SUB_SUBSCRIBED reported */
    /* Step 7: SUBSCRIBEs sent to master k whose confirmation has not been read, and how
     * many of those were sent before the last UNSUBSCRIBE (stale). An entry unsubscribed
     * (removed) stays until its stale confirmations are read or their masters dropped. */
    uint16_t unacked[LK_REDLOCK_NODES_MAX];
    uint16_t stale[LK_REDLOCK_NODES_MAX];
    int removed;
} sub_seen;

struct lk_sub {
    lk_client *c;          /* connection settings and the error text; never connected */
    int borrowed;          /* c belongs to the caller (lk__sub_open_client) */
    redisContext *ctx;     /* NULL while disconnected (not Redlock) */
    /* Redlock only (multi 1): */
    int multi;
    int epfd;              /* -1 while disconnected */
    int tfd;               /* the retry timer in epfd; -1 while disconnected */
    int64_t retry_ms;      /* the next backoff; 0 while the timer is not armed */
    int nnodes;
    redisContext *node[LK_REDLOCK_NODES_MAX]; /* NULL: not subscribed on that master */
    sub_seen *seen;
    size_t nseen, capseen;
    int64_t event_token;   /* lk_sub_event_token() inside a callback */
    uint64_t event_hold;   /* the message's hold id, 0 when it names none */
    int64_t event_grant;   /* lk_sub_event_grant(): a hand-off's token, 0 when none */
    char event_grant_id[17]; /* and the id of the waiter it was granted to */
};

static void seen_drop_if_done(lk_sub *s, sub_seen *e);

static void node_drop(lk_sub *s, int k)
{
    if (s->node[k] != NULL) {
        redisFree(s->node[k]); /* closing it takes it out of epfd */
        s->node[k] = NULL;
    }
    /* No confirmation comes from the closed connection (step 7). Backwards: dropping an
     * entry moves the last one into its place, which was seen already. */
    for (size_t i = s->nseen; i-- > 0;) {
        sub_seen *e = &s->seen[i];
        e->unacked[k] = 0;
        e->stale[k] = 0;
        if (e->removed) {
            seen_drop_if_done(s, e);
        }
    }
}

static void sub_disconnect(lk_sub *s)
{
    if (s->ctx != NULL) {
        redisFree(s->ctx);
        s->ctx = NULL;
    }
    for (int k = 0; k < s->nnodes; k++) {
        node_drop(s, k);
    }
    if (s->epfd >= 0) {
        close(s->epfd);
        s->epfd = -1;
    }
    if (s->tfd >= 0) {
        close(s->tfd);
        s->tfd = -1;
    }
    s->retry_ms = 0;
}

/* Arms the retry timer to fire once after ms. */
static void timer_arm(lk_sub *s, int64_t ms)
{
    struct itimerspec its;

    memset(&its, 0, sizeof its);
    its.it_value.tv_sec = (time_t)(ms / 1000);
    its.it_value.tv_nsec = (long)(ms % 1000) * 1000000L;
    if (s->tfd >= 0) {
        timerfd_settime(s->tfd, 0, &its, NULL);
    }
}

/* Redlock: drops master k and schedules its resubscription, unless one is pending. */
static void node_lost(lk_sub *s, int k)
{
    node_drop(s, k);
    if (s->retry_ms == 0) {
        s->retry_ms = RETRY_MIN_MS;
        timer_arm(s, RETRY_MIN_MS);
    }
}

/* The number of masters still subscribed on (Redlock). */
static int nodes_up(const lk_sub *s)
{
    int up = 0;
    for (int k = 0; k < s->nnodes; k++) {
        up += s->node[k] != NULL;
    }
    return up;
}

/* Allocates s around c (owned unless borrowed) and connects it. */
static lk_status sub_new(lk_sub **out, lk_client *c, int borrowed)
{
    lk_sub *s = calloc(1, sizeof *s);

    *out = NULL;
    if (s == NULL) {
        if (!borrowed) {
            lk_client_close(c);
        }
        return LK_ENOMEM;
    }
    s->c = c;
    s->borrowed = borrowed;
    s->epfd = -1;
    s->tfd = -1;
    s->multi = lk__redlock_is(&s->c->tp);
    s->nnodes = s->multi ? lk__redlock_size(&s->c->tp) : 0;
    *out = s;
    return lk_sub_reconnect(s);
}

lk_status lk_sub_open(lk_sub **out, const char *url, const lk_options *opts)
{
    lk_client *c = NULL;

    *out = NULL;
    lk_status st = lk__client_new(&c, url, opts);
    if (st != LK_OK) {
        return st;
    }
    return sub_new(out, c, 0);
}

lk_status lk__sub_open_client(lk_sub **out, lk_client *c)
{
    return sub_new(out, c, 1);
}

void lk_sub_close(lk_sub *s)
{
    if (s == NULL) {
        return;
    }
    sub_disconnect(s);
    if (!s->borrowed) {
        lk_client_close(s->c);
    }
    free(s->seen);
    free(s);
}

const char *lk_sub_errstr(const lk_sub *s)
{
    return lk_errstr(s->c);
}

int lk_sub_fd(const lk_sub *s)
{
    if (s->multi) {
        return s->epfd;
    }
    return s->ctx != NULL ? s->ctx->fd : -1;
}

/* Redlock: connects to master k and watches it in epfd. Returns 0, or -1 (not connected). */
static int node_open(lk_sub *s, int k)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)k};

    s->node[k] = lk__redlock_open_node(&s->c->tp, k);
    if (s->node[k] != NULL && epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->node[k]->fd, &ev) != 0) {
        node_drop(s, k);
    }
    return s->node[k] != NULL ? 0 : -1;
}

/* Redlock: connects to every master that counts, each watched by a new epfd, with the retry
 * timer for those that do not answer. */
static lk_status reconnect_nodes(lk_sub *s)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = TIMER_TAG};

    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    s->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (s->epfd < 0 || s->tfd < 0 || epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->tfd, &ev) != 0) {
        sub_disconnect(s);
        return lk__fail(s->c, LK_EUNAVAILABLE, "epoll or timerfd failed");
    }
    for (int k = 0; k < s->nnodes; k++) {
        if (node_open(s, k) != 0) {
            node_lost(s, k);
        }
    }
    /* Every subscription is gone with the connections. */
    s->nseen = 0;
    if (nodes_up(s) == 0) {
        sub_disconnect(s);
        return LK_EUNAVAILABLE;
    }
    return LK_OK;
}

lk_status lk_sub_reconnect(lk_sub *s)
{
    if (s->multi) {
        return s->epfd >= 0 ? LK_OK : reconnect_nodes(s);
    }
    if (s->ctx != NULL) {
        return LK_OK;
    }
    s->ctx = lk__transport_open(&s->c->tp);
    return s->ctx != NULL ? LK_OK : LK_EUNAVAILABLE;
}

/* Writes cmd channel on ctx. Returns 0, or -1 with the reason in s's error text. */
/* Appends cmd channel to ctx's output buffer. */
static int append_command(redisContext *ctx, const char *cmd, const char *channel)
{
    const char *argv[2] = {cmd, channel};
    size_t lens[2] = {strlen(cmd), strlen(channel)};
    return redisAppendCommandArgv(ctx, 2, argv, lens);
}

/* Writes all of ctx's output buffer, SIGPIPE blocked. Returns REDIS_OK or REDIS_ERR. */
static int flush_commands(redisContext *ctx)
{
    lk__sigpipe guard;
    int done = 0;
    int rc = REDIS_OK;

    lk__sigpipe_block(&guard);
    while (!done && rc == REDIS_OK) {
        rc = redisBufferWrite(ctx, &done);
    }
    lk__sigpipe_restore(&guard);
    return rc;
}

static int write_command(lk_sub *s, redisContext *ctx, const char *cmd, const char *channel)
{
    int rc = append_command(ctx, cmd, channel);
    if (rc == REDIS_OK) {
        rc = flush_commands(ctx);
    }
    if (rc != REDIS_OK) {
        lk__fail(s->c, LK_EUNAVAILABLE, "subscriber connection failed: %s", ctx->errstr);
        return -1;
    }
    return 0;
}

/* Redlock: the de-duplication entry of resource, or NULL. */
static sub_seen *seen_find(lk_sub *s, const char *resource)
{
    for (size_t i = 0; i < s->nseen; i++) {
        if (strcmp(s->seen[i].resource, resource) == 0) {
            return &s->seen[i];
        }
    }
    return NULL;
}

/* Redlock: forgets e unless confirmations of its SUBSCRIBEs are still due (step 7). */
static void seen_drop_if_done(lk_sub *s, sub_seen *e)
{
    for (int k = 0; k < s->nnodes; k++) {
        if (e->unacked[k] > 0) {
            return;
        }
    }
    *e = s->seen[--s->nseen];
}

/* Redlock: e's resource was unsubscribed: the confirmations still due are stale. */
static void seen_unsubscribed(lk_sub *s, sub_seen *e)
{
    e->removed = 1;
    memcpy(e->stale, e->unacked, sizeof e->stale);
    seen_drop_if_done(s, e);
}

/* Redlock: starts or ends counting resource's messages (add 1 or 0). Returns 0, or -1 when
 * out of memory. */
static int seen_track(lk_sub *s, const char *resource, int add)
{
    sub_seen *e = seen_find(s, resource);

    if (!add) {
        if (e != NULL && !e->removed) {
            seen_unsubscribed(s, e);
        }
        return 0;
    }
    if (e != NULL && e->removed) {
        /* Subscribed anew while old confirmations are still due (step 7): counted afresh,
         * as a new entry would be, and the stale confirmations still passed over. */
        uint16_t unacked[LK_REDLOCK_NODES_MAX], stale[LK_REDLOCK_NODES_MAX];
        memcpy(unacked, e->unacked, sizeof unacked);
        memcpy(stale, e->stale, sizeof stale);
        memset(e, 0, sizeof *e);
        snprintf(e->resource, sizeof e->resource, "%s", resource);
        memcpy(e->unacked, unacked, sizeof unacked);
        memcpy(e->stale, stale, sizeof stale);
        return 0;
    }
    if (e != NULL) {
        return 0; /* subscribed again: the counts go on */
    }
    if (s->nseen == s->capseen) {
        size_t cap = s->capseen > 0 ? s->capseen * 2 : 16;
        sub_seen *grown = realloc(s->seen, cap * sizeof *grown);
        if (grown == NULL) {
            return -1;
        }
        s->seen = grown;
        s->capseen = cap;
    }
    e = &s->seen[s->nseen++];
    memset(e, 0, sizeof *e);
    snprintf(e->resource, sizeof e->resource, "%s", resource);
    return 0;
}

/* Sends one (UN)SUBSCRIBE for resource's channel. The confirmation arrives later through
 * lk_sub_dispatch(). Redlock: on every master still connected; one that fails is dropped. */
static lk_status send_command(lk_sub *s, const char *cmd, const char *resource)
{
    char channel[LK__KEY_MAX];

    if (lk_channel_name(resource, channel, sizeof channel) != LK_OK) {
        return lk__fail(s->c, LK_EINVAL, "invalid resource");
    }
    if (lk_sub_fd(s) < 0) {
        return lk__fail(s->c, LK_EUNAVAILABLE, "the subscriber is not connected");
    }
    if (!s->multi) {
        if (write_command(s, s->ctx, cmd, channel) == 0) {
            return LK_OK;
        }
        sub_disconnect(s);
        return LK_EUNAVAILABLE;
    }
    if (seen_track(s, resource, cmd[0] == 'S') != 0) {
        return lk__fail(s->c, LK_ENOMEM, "out of memory");
    }
    sub_seen *e = cmd[0] == 'S' ? seen_find(s, resource) : NULL;
    uint32_t failed = 0;
    for (int k = 0; k < s->nnodes; k++) {
        if (s->node[k] != NULL && write_command(s, s->node[k], cmd, channel) != 0) {
            failed |= 1u << k;
        } else if (s->node[k] != NULL && e != NULL && e->unacked[k] < UINT16_MAX) {
            e->unacked[k]++;
        }
    }
    /* Only now: dropping a master may drop entries, which moves e's. */
    for (int k = 0; k < s->nnodes; k++) {
        if (failed & (1u << k)) {
            node_lost(s, k);
        }
    }
    if (nodes_up(s) == 0) {
        sub_disconnect(s);
        return LK_EUNAVAILABLE;
    }
    return LK_OK;
}

lk_status lk_sub_add(lk_sub *s, const char *resource)
{
    return send_command(s, "SUBSCRIBE", resource);
}

lk_status lk_sub_remove(lk_sub *s, const char *resource)
{
    return send_command(s, "UNSUBSCRIBE", resource);
}

/* Turns "fg:{<resource>}:released" back into the resource; NULL for any other channel. */
static const char *channel_resource(const redisReply *ch, char *buf)
{
    static const char prefix[] = "fg:{";
    static const char suffix[] = "}:released";
    size_t plen = sizeof prefix - 1, slen = sizeof suffix - 1;

    if (ch->type != REDIS_REPLY_STRING || ch->len <= plen + slen ||
        ch->len - plen - slen > LK_RESOURCE_MAX || memcmp(ch->str, prefix, plen) != 0 ||
        memcmp(ch->str + ch->len - slen, suffix, slen) != 0) {
        return NULL;
    }
    size_t n = ch->len - plen - slen;
    memcpy(buf, ch->str + plen, n);
    buf[n] = '\0';
    /* strlen: a NUL inside the channel would otherwise name a shorter, other resource. */
    return strlen(buf) == n && lk_valid_resource(buf) ? buf : NULL;
}

/* The event a pushed reply is (resource written into resource), or -1 for none. */
static int sub_event(const redisReply *r, char *resource)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING) {
        return -1;
    }
    const char *kind = r->element[0]->str;
    int event = strcmp(kind, "message") == 0     ? LK_SUB_RELEASED
                : strcmp(kind, "subscribe") == 0 ? LK_SUB_SUBSCRIBED
                                                 : -1;
    return event >= 0 && channel_resource(r->element[1], resource) != NULL ? event : -1;
}

/* A hand-off message's "<token>:<id>" (after "g:", release.lua): the grant's token and
 * the waiter's id into s->event_grant and s->event_grant_id, unless malformed. */
static void grant_ids(lk_sub *s, const char *p, size_t len)
{
    int64_t t = 0;
    size_t i = 0;

    for (; i < len && i < 16 && p[i] >= '0' && p[i] <= '9'; i++) {
        t = t * 10 + (p[i] - '0');
    }
    size_t n = len - i - 1;
    if (i == 0 || i >= len || p[i] != ':' || n < 1 || n > 16 || t > LK_TOKEN_MAX) {
        return;
    }
    for (size_t j = 0; j < n; j++) {
        char c = p[i + 1 + j];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
            return;
        }
        s->event_grant_id[j] = c;
    }
    s->event_grant_id[n] = '\0';
    s->event_grant = t;
}

/* A release message "<token>" or "<token>:<hold id>" (release.lua): its token into
 * s->event_token and its hold id into s->event_hold, each 0 when the message has none (or
 * is not a release message). */
static void message_ids(lk_sub *s, const redisReply *r)
{
    const redisReply *p = r->type == REDIS_REPLY_ARRAY && r->elements == 3 ? r->element[2]
                                                                            : NULL;
    int64_t t = 0;
    uint64_t h = 0;
    size_t i = 0;

    s->event_token = 0;
    s->event_hold = 0;
    s->event_grant = 0;
    s->event_grant_id[0] = '\0';
    if (p == NULL || p->type != REDIS_REPLY_STRING) {
        return;
    }
    if (p->len > 2 && p->str[0] == 'g' && p->str[1] == ':') {
        grant_ids(s, p->str + 2, p->len - 2);
        return;
    }
    for (; i < p->len && i < 16 && p->str[i] >= '0' && p->str[i] <= '9'; i++) {
        t = t * 10 + (p->str[i] - '0');
    }
    if (i == 0 || (i < p->len && p->str[i] != ':')) {
        return; /* no token: "released" (an older script, a fair cancel) */
    }
    if (i < p->len) {
        size_t n = p->len - i - 1;
        if (n < 1 || n > LK__HOLD_ID_LEN) {
            return;
        }
        for (i++; i < p->len; i++) {
            char c = p->str[i];
            if (c >= '0' && c <= '9') {
                h = h << 4 | (uint64_t)(c - '0');
            } else if (c >= 'a' && c <= 'f') {
                h = h << 4 | (uint64_t)(c - 'a' + 10);
            } else {
                return;
            }
        }
    }
    s->event_token = t;
    s->event_hold = h;
}

int64_t lk_sub_event_token(const lk_sub *s)
{
    return s->event_token;
}

int64_t lk_sub_event_grant(const lk_sub *s, char *id)
{
    if (id != NULL) {
        memcpy(id, s->event_grant_id, sizeof s->event_grant_id);
    }
    return s->event_grant;
}

void lk__sub_report(const redisReply *r, lk_sub_fn fn, void *userdata)
{
    char resource[LK_RESOURCE_MAX + 1];
    int event = sub_event(r, resource);

    if (event >= 0) {
        fn(resource, event, userdata);
    }
}

/* Redlock: reports a reply from master k unless another master reported the same event
 * (file head, steps 4-6). */
static void report_once(lk_sub *s, int k, const redisReply *r, lk_sub_fn fn, void *userdata)
{
    char resource[LK_RESOURCE_MAX + 1];
    int event = sub_event(r, resource);
    sub_seen *e = event >= 0 ? seen_find(s, resource) : NULL;

    if (e == NULL) {
        return; /* not an event, or a resource no longer subscribed */
    }
    if (event == LK_SUB_SUBSCRIBED && e->unacked[k] > 0) {
        e->unacked[k]--;
        if (e->stale[k] > 0) {
            e->stale[k]--; /* an earlier subscription's (step 7) */
            if (e->removed) {
                seen_drop_if_done(s, e);
            }
            return;
        }
    }
    if (e->removed) {
        return; /* unsubscribed: its messages still on the way */
    }
    if (event == LK_SUB_SUBSCRIBED) {
        if (e->resync & (1u << k)) {
            /* From here on master k hears what the others hear (file head, step 4). */
            e->got[k] = e->reported;
            e->resync &= ~(1u << k);
        }
        if (!e->subscribed) {
            e->subscribed = 1;
            fn(resource, event, userdata);
        }
        return;
    }
    if (s->event_hold != 0) {
        /* Every master names the same hold id for one release (step 6). */
        for (unsigned i = 0; i < SEEN_HOLDS; i++) {
            if (e->holds[i].id == s->event_hold) {
                if (s->event_token <= e->holds[i].token) {
                    return;
                }
                e->holds[i].token = s->event_token; /* step 5: a failed write-back */
                fn(resource, event, userdata);
                return;
            }
        }
        unsigned i = e->nholds++ % SEEN_HOLDS;
        e->holds[i].id = s->event_hold;
        e->holds[i].token = s->event_token;
        fn(resource, event, userdata);
        return;
    }
    int64_t token = s->event_token;
    if (++e->got[k] > e->reported) {
        e->reported = e->got[k];
    } else if (token <= e->top_token) {
        return; /* a release another master reported, and no larger token (step 5) */
    }
    if (token > e->top_token) {
        e->top_token = token;
    }
    fn(resource, event, userdata);
}

/* Reads what arrived on ctx (one read()) and reports each reply: through report_once() for
 * master k, or directly when k < 0. Returns 0, or -1 when the connection failed. */
static int read_replies(lk_sub *s, redisContext *ctx, int k, lk_sub_fn fn, void *userdata)
{
    void *reply = NULL;

    if (redisBufferRead(ctx) != REDIS_OK) {
        goto fail;
    }
    for (;;) {
        if (redisGetReplyFromReader(ctx, &reply) != REDIS_OK) {
            goto fail;
        }
        if (reply == NULL) {
            return 0;
        }
        if (k >= 0 && ((redisReply *)reply)->type == REDIS_REPLY_ERROR) {
            /* A SUBSCRIBE refused (an ACL, say): its subscription is not there, and no
             * confirmation will count it. The master is dropped and resubscribed later. */
            lk__fail(s->c, LK_EUNAVAILABLE, "subscriber command refused: %s",
                     ((redisReply *)reply)->str);
            freeReplyObject(reply);
            return -1;
        }
        message_ids(s, reply);
        if (k < 0) {
            lk__sub_report(reply, fn, userdata);
        } else {
            report_once(s, k, reply, fn, userdata);
        }
        s->event_token = 0;
        s->event_hold = 0;
        s->event_grant = 0;
        s->event_grant_id[0] = '\0';
        freeReplyObject(reply);
        reply = NULL;
    }
fail:
    lk__fail(s->c, LK_EUNAVAILABLE, "subscriber connection failed: %s",
             ctx->errstr[0] != '\0' ? ctx->errstr : "protocol error");
    return -1;
}

/* Redlock: connects to master k again and subscribes it to every resource subscribed, in
 * one write. Returns 0, or -1 when it is still unreachable (then it is dropped). */
static int node_resubscribe(lk_sub *s, int k)
{
    char channel[LK__KEY_MAX];
    int rc = REDIS_OK;

    if (node_open(s, k) != 0) {
        return -1;
    }
    for (size_t i = 0; i < s->nseen && rc == REDIS_OK; i++) {
        if (s->seen[i].removed) {
            continue; /* unsubscribed, only its other masters' confirmations due */
        }
        lk_channel_name(s->seen[i].resource, channel, sizeof channel);
        rc = append_command(s->node[k], "SUBSCRIBE", channel);
        s->seen[i].unacked[k]++;
    }
    if (rc == REDIS_OK) {
        rc = flush_commands(s->node[k]);
    }
    if (rc != REDIS_OK) {
        node_drop(s, k);
        return -1;
    }
    return 0;
}

/* Redlock: the retry timer fired: resubscribes every dropped master (file head, steps 2-3)
 * and re-arms the timer, with a longer backoff, for those still unreachable. */
static void retry_nodes(lk_sub *s)
{
    uint64_t expirations = 0;
    int missing = 0;

    if (read(s->tfd, &expirations, sizeof expirations) < 0) {
        return; /* not fired yet (EAGAIN) */
    }
    for (int k = 0; k < s->nnodes; k++) {
        if (s->node[k] == NULL && node_resubscribe(s, k) == 0) {
            for (size_t i = 0; i < s->nseen; i++) {
                s->seen[i].subscribed = 0; /* the confirmation is reported again */
                s->seen[i].resync |= 1u << k;
            }
        } else if (s->node[k] == NULL) {
            missing++;
        }
    }
    if (missing == 0) {
        s->retry_ms = 0;
        return;
    }
    s->retry_ms = s->retry_ms * 2 < RETRY_MAX_MS ? s->retry_ms * 2 : RETRY_MAX_MS;
    timer_arm(s, s->retry_ms);
}

/* Redlock: reads every master epfd reports readable, and retries dropped ones when the
 * timer fired. */
static lk_status dispatch_nodes(lk_sub *s, lk_sub_fn fn, void *userdata)
{
    struct epoll_event evs[LK_REDLOCK_NODES_MAX + 1];
    int n = epoll_wait(s->epfd, evs, LK_REDLOCK_NODES_MAX + 1, 0);

    for (int i = 0; i < n; i++) {
        int k = (int)evs[i].data.u32;
        if (evs[i].data.u32 == TIMER_TAG) {
            retry_nodes(s);
        } else if (k < s->nnodes && s->node[k] != NULL &&
                   read_replies(s, s->node[k], k, fn, userdata) != 0) {
            node_lost(s, k); /* the others go on */
        }
    }
    if (nodes_up(s) == 0) {
        sub_disconnect(s);
        return LK_EUNAVAILABLE;
    }
    return LK_OK;
}

lk_status lk_sub_dispatch(lk_sub *s, lk_sub_fn fn, void *userdata)
{
    if (lk_sub_fd(s) < 0) {
        return lk__fail(s->c, LK_EUNAVAILABLE, "the subscriber is not connected");
    }
    if (s->multi) {
        return dispatch_nodes(s, fn, userdata);
    }
    /* One read(): the caller polled the descriptor, so it does not block. EOF is an error. */
    if (read_replies(s, s->ctx, -1, fn, userdata) != 0) {
        sub_disconnect(s);
        return LK_EUNAVAILABLE;
    }
    return LK_OK;
}
