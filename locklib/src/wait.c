/*
 * lk_acquire_wait: wait for a held lock without polling Redis.
 *
 * The handle keeps a second connection, subscribed to the resource's release channel for
 * the duration of the call. The order matters:
 *   1. SUBSCRIBE to fg:{resource}:released;
 *   2. try to acquire;
 *   3. if HELD, wait for a message, or for the holder's remaining lease (expiry publishes
 *      nothing), or for the deadline, whichever comes first; then go to 2.
 * Because the subscription exists before each attempt, a release that happens between a
 * failed attempt and the wait still wakes us. If the subscriber connection fails, the wait
 * falls back to short naps bounded by the lease and the deadline: slower, never a hang.
 *
 * Redlock (redlock://): a release publishes on every master it ran on, so one subscriber
 * connection would hear nothing while its master is down, paused or held out. The wait then
 * subscribes through an lk_sub on every master that counts (sub.c), opened for the call on
 * the handle's transport: step 1 sends SUBSCRIBE to each master and waits for the first
 * confirmation (the others' were written before the attempt is sent), and step 3 wakes at
 * the first release reported by any master, de-duplicated, or at a resubscription (a master
 * that came back: a release may have been missed, so look again). Failed attempts are
 * answered held, which marks the lock wanted on every master they reach
 * (lua/prelude/wanted.lua), so each of those masters publishes the release.
 * A release reaches the masters one by one, and lk_sub reports it once, at the first
 * master's message: a retry woken by it can reach a majority before the release does, and
 * be answered held by the very hold reported released. No other copy of the message will
 * wake it, so such an answer (its holder token at most the largest reported released) is
 * looked at again after a short nap, doubling from 10 ms to 100 ms, for at most the command
 * timeout after the first such answer, by which time the release has reached every master
 * it will reach. Then, or for any other hold, the wait goes on as in step 3.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <time.h>

#include "sub_internal.h"

static void sub_drop(lk_client *c)
{
    if (c->sub != NULL) {
        redisFree(c->sub);
        c->sub = NULL;
    }
}

static int is_kind(const redisReply *r, const char *kind)
{
    return r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
           r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, kind) == 0;
}

/* Subscribes the subscriber connection to channel. Returns 0 on success. */
static int sub_subscribe(lk_client *c, const char *channel)
{
    const char *argv[2] = {"SUBSCRIBE", channel};
    size_t lens[2] = {9, strlen(channel)};
    lk__sigpipe guard;

    if (c->sub != NULL && !lk__idle_alive(c->sub)) {
        sub_drop(c);
    }
    if (c->sub == NULL) {
        c->sub = lk__transport_open(&c->tp);
        if (c->sub == NULL) {
            return -1;
        }
    }
    lk__sigpipe_block(&guard);
    redisReply *reply = redisCommandArgv(c->sub, 2, argv, lens);
    lk__sigpipe_restore(&guard);
    int ok = is_kind(reply, "subscribe");
    freeReplyObject(reply);
    if (!ok) {
        sub_drop(c);
        return -1;
    }
    return 0;
}

/* Leaves the channel and reads until the confirmation, discarding messages that arrived
 * meanwhile, so the idle connection carries no unread bytes. Drops it on any trouble. */
static void sub_unsubscribe(lk_client *c)
{
    const char *argv[1] = {"UNSUBSCRIBE"};
    size_t lens[1] = {11};
    lk__sigpipe guard;
    redisReply *reply = NULL;

    if (c->sub == NULL) {
        return;
    }
    lk__sigpipe_block(&guard);
    reply = redisCommandArgv(c->sub, 1, argv, lens);
    for (int i = 0; i < 64 && reply != NULL && !is_kind(reply, "unsubscribe"); i++) {
        freeReplyObject(reply);
        reply = NULL;
        if (redisGetReply(c->sub, (void **)&reply) != REDIS_OK) {
            reply = NULL;
        }
    }
    lk__sigpipe_restore(&guard);
    int ok = is_kind(reply, "unsubscribe");
    freeReplyObject(reply);
    if (!ok) {
        sub_drop(c);
    }
}

/* Waits up to timeout_ms for anything on the subscriber connection. Returns 1 when a
 * message arrived, 0 on timeout, -1 when the connection failed. */
static int sub_wait(lk_client *c, int64_t timeout_ms)
{
    void *reply = NULL;

    if (redisReaderGetReply(c->sub->reader, &reply) != REDIS_OK) {
        return -1;
    }
    if (reply != NULL) {
        freeReplyObject(reply);
        return 1;
    }
    struct pollfd pfd = {c->sub->fd, POLLIN, 0};
    int n = poll(&pfd, 1, (int)timeout_ms);
    if (n == 0 || (n < 0 && errno == EINTR)) {
        return 0;
    }
    if (n < 0 || redisBufferRead(c->sub) != REDIS_OK) {
        return -1;
    }
    if (redisReaderGetReply(c->sub->reader, &reply) != REDIS_OK) {
        return -1;
    }
    freeReplyObject(reply);
    return 1;
}

static void nap_ms(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* What lk_sub_dispatch() reported to multi_wait(). */
typedef struct wake {
    lk_sub *s;
    int woken;
    int64_t *released;     /* the largest token reported released */
} wake;

static void on_event(const char *resource, int event, void *userdata)
{
    wake *k = userdata;
    (void)resource;
    k->woken = 1; /* a release, or a (re)subscription: either way, look again */
    if (event == LK_SUB_RELEASED && lk_sub_event_token(k->s) > *k->released) {
        *k->released = lk_sub_event_token(k->s);
    }
}

/* Redlock: waits up to timeout_ms for an event of s, raising *released to the token of each
 * release reported. Returns 1 when one came, 0 on timeout, -1 when s is disconnected. */
static int multi_wait(lk_sub *s, int64_t timeout_ms, int64_t *released)
{
    int64_t end = lk__now_ms() + timeout_ms;
    wake k = {s, 0, released};

    for (;;) {
        int64_t left = end - lk__now_ms();
        if (left <= 0) {
            return 0;
        }
        struct pollfd pfd = {lk_sub_fd(s), POLLIN, 0};
        int n = poll(&pfd, 1, (int)left);
        if (n < 0 && errno != EINTR) {
            return -1;
        }
        /* Readable without an event: another master's copy, or the retry timer. */
        if (n > 0 && lk_sub_dispatch(s, on_event, &k) != LK_OK) {
            return -1;
        }
        if (k.woken) {
            return 1;
        }
    }
}

/* The subscriber of one call: the handle's connection, or an lk_sub on Redlock. */
typedef struct waitsub {
    lk_client *c;
    int multi; /* Redlock */
    lk_sub *s; /* Redlock: NULL until the first subscription, and after ENOMEM */
    const char *resource;
    const char *channel;
    int64_t released;  /* Redlock: the largest token reported released, 0 for none */
} waitsub;

/* Step 1 of the file head. Returns 1 when subscribed, 0 when not (fall back to naps).
 * Redlock: each time a new lk_sub, so that a retry never inherits a half-done subscription
 * whose confirmation was already consumed; it waits for the first master's confirmation up
 * to the command timeout (or the deadline). */
static int ws_subscribe(waitsub *w, int64_t deadline)
{
    if (!w->multi) {
        return sub_subscribe(w->c, w->channel) == 0;
    }
    lk_sub_close(w->s);
    w->s = NULL;
    if (lk__sub_open_client(&w->s, w->c) != LK_OK || lk_sub_add(w->s, w->resource) != LK_OK) {
        return 0;
    }
    int64_t left = deadline - lk__now_ms();
    int64_t cap = w->c->opts.command_timeout_ms;
    return multi_wait(w->s, left < cap ? left : cap, &w->released) == 1;
}

/* Step 3 of the file head. Returns 1 or 0 as sub_wait(), -1 when the subscriber failed. */
static int ws_wait(waitsub *w, int64_t timeout_ms)
{
    if (!w->multi) {
        int r = sub_wait(w->c, timeout_ms);
        if (r < 0) {
            sub_drop(w->c);
        }
        return r;
    }
    return multi_wait(w->s, timeout_ms, &w->released);
}

static void ws_end(waitsub *w, int subscribed)
{
    if (w->multi) {
        lk_sub_close(w->s); /* the connections go with it; the handle stays */
    } else if (subscribed) {
        sub_unsubscribe(w->c);
    }
}

/* One attempt of acquire_wait(): wait_ms is how much longer the caller waits if held. */
static lk_status attempt(lk_client *c, const char *resource, const char *owner,
                         int64_t lease_ms, int64_t floor, const char *idem_key, int shared,
                         int64_t wait_ms, lk_result *res)
{
    lk_call call = {.kind = LK_CALL_ACQUIRE, .resource = resource, .owner = owner,
                    .idem_key = idem_key, .lease_ms = lease_ms, .floor = floor,
                    .wait_ms = wait_ms <= 0 ? 0 : wait_ms < LK_WAIT_MAX_MS ? wait_ms
                                                                           : LK_WAIT_MAX_MS,
                    .shared = shared};
    lk_call *one[1] = {&call};
    lk_call_many(c, one, 1);
    *res = call.res;
    return call.status;
}

static lk_status acquire_wait(lk_client *c, const char *resource, const char *owner,
                              int64_t lease_ms, int64_t floor, const char *idem_key,
                              int64_t wait_ms, int shared, lk_result *res)
{
    char channel[LK__KEY_MAX];
    lk_status st;
    waitsub w = {c, lk__redlock_is(&c->tp), NULL, resource, channel, 0};
    int64_t settle_until = 0, nap = 10; /* a release on its way (the file head) */

    if (wait_ms <= 0) {
        return attempt(c, resource, owner, lease_ms, floor, idem_key, shared, 0, res);
    }
    if (lk_channel_name(resource, channel, sizeof channel) != LK_OK) {
        memset(res, 0, sizeof *res);
        return lk__fail(c, LK_EINVAL, "invalid resource");
    }
    int64_t deadline = lk__now_ms() + wait_ms;
    int subscribed = ws_subscribe(&w, deadline);
    for (;;) {
        st = attempt(c, resource, owner, lease_ms, floor, idem_key, shared,
                     deadline - lk__now_ms(), res);
        if (st != LK_HELD) {
            break;
        }
        int64_t left = deadline - lk__now_ms();
        if (left <= 0) {
            break;
        }
        if (w.multi && res->holder_token > 0 && res->holder_token <= w.released) {
            int64_t now = lk__now_ms();
            if (settle_until == 0) {
                settle_until = now + c->opts.command_timeout_ms;
            }
            if (now < settle_until) {
                nap_ms(nap < left ? nap : left);
                nap = nap * 2 < 100 ? nap * 2 : 100;
                continue;
            }
        }
        settle_until = 0;
        nap = 10;
        int64_t wait = left;
        if (res->ttl_ms > 0 && res->ttl_ms < wait) {
            wait = res->ttl_ms;
        }
        if (subscribed && ws_wait(&w, wait) < 0) {
            subscribed = 0;
        } else if (!subscribed) {
            /* Subscriber unavailable (Redis down or restarting): nap briefly, then retry. */
            nap_ms(wait < 100 ? wait : 100);
            subscribed = ws_subscribe(&w, deadline);
        }
    }
    ws_end(&w, subscribed);
    return st;
}

lk_status lk_acquire_wait(lk_client *c, const char *resource, const char *owner,
                          int64_t lease_ms, int64_t floor, const char *idem_key,
                          int64_t wait_ms, lk_result *res)
{
    return acquire_wait(c, resource, owner, lease_ms, floor, idem_key, wait_ms, 0, res);
}

lk_status lk_acquire_shared(lk_client *c, const char *resource, const char *owner,
                            int64_t lease_ms, int64_t floor, const char *idem_key,
                            int64_t wait_ms, lk_result *res)
{
    return acquire_wait(c, resource, owner, lease_ms, floor, idem_key, wait_ms, 1, res);
}
