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
 */
#include <stdlib.h>
#include <string.h>

#include "sub_internal.h"

struct lk_sub {
    lk_client *c;          /* connection settings and the error text; never connected */
    redisContext *ctx;     /* NULL while disconnected */
};

static void sub_disconnect(lk_sub *s)
{
    if (s->ctx != NULL) {
        redisFree(s->ctx);
        s->ctx = NULL;
    }
}

lk_status lk_sub_open(lk_sub **out, const char *url, const lk_options *opts)
{
    lk_sub *s = calloc(1, sizeof *s);

    *out = NULL;
    if (s == NULL) {
        return LK_ENOMEM;
    }
    lk_status st = lk__client_new(&s->c, url, opts);
    if (st != LK_OK) {
        free(s);
        return st;
    }
    *out = s;
    return lk_sub_reconnect(s);
}

void lk_sub_close(lk_sub *s)
{
    if (s == NULL) {
        return;
    }
    sub_disconnect(s);
    lk_client_close(s->c);
    free(s);
}

const char *lk_sub_errstr(const lk_sub *s)
{
    return lk_errstr(s->c);
}

int lk_sub_fd(const lk_sub *s)
{
    return s->ctx != NULL ? s->ctx->fd : -1;
}

lk_status lk_sub_reconnect(lk_sub *s)
{
    if (s->ctx != NULL) {
        return LK_OK;
    }
    s->ctx = lk__transport_open(&s->c->tp);
    return s->ctx != NULL ? LK_OK : LK_EUNAVAILABLE;
}

/* Sends one (UN)SUBSCRIBE for resource's channel. The confirmation arrives later through
 * lk_sub_dispatch(). */
static lk_status send_command(lk_sub *s, const char *cmd, const char *resource)
{
    char channel[LK__KEY_MAX];
    lk__sigpipe guard;
    int done = 0;
    int rc = REDIS_OK;

    if (lk_channel_name(resource, channel, sizeof channel) != LK_OK) {
        return lk__fail(s->c, LK_EINVAL, "invalid resource");
    }
    if (s->ctx == NULL) {
        return lk__fail(s->c, LK_EUNAVAILABLE, "the subscriber is not connected");
    }
    const char *argv[2] = {cmd, channel};
    size_t lens[2] = {strlen(cmd), strlen(channel)};
    if (redisAppendCommandArgv(s->ctx, 2, argv, lens) != REDIS_OK) {
        goto fail;
    }
    lk__sigpipe_block(&guard);
    while (!done && rc == REDIS_OK) {
        rc = redisBufferWrite(s->ctx, &done);
    }
    lk__sigpipe_restore(&guard);
    if (rc == REDIS_OK) {
        return LK_OK;
    }
fail:
    lk__fail(s->c, LK_EUNAVAILABLE, "subscriber connection failed: %s", s->ctx->errstr);
    sub_disconnect(s);
    return LK_EUNAVAILABLE;
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

void lk__sub_report(const redisReply *r, lk_sub_fn fn, void *userdata)
{
    char resource[LK_RESOURCE_MAX + 1];

    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING) {
        return;
    }
    const char *kind = r->element[0]->str;
    int event = strcmp(kind, "message") == 0     ? LK_SUB_RELEASED
                : strcmp(kind, "subscribe") == 0 ? LK_SUB_SUBSCRIBED
                                                 : -1;
    if (event >= 0 && channel_resource(r->element[1], resource) != NULL) {
        fn(resource, event, userdata);
    }
}

lk_status lk_sub_dispatch(lk_sub *s, lk_sub_fn fn, void *userdata)
{
    void *reply = NULL;

    if (s->ctx == NULL) {
        return lk__fail(s->c, LK_EUNAVAILABLE, "the subscriber is not connected");
    }
    /* One read(): the caller polled the descriptor, so it does not block. EOF is an error. */
    if (redisBufferRead(s->ctx) != REDIS_OK) {
        goto fail;
    }
    for (;;) {
        if (redisGetReplyFromReader(s->ctx, &reply) != REDIS_OK) {
            goto fail;
        }
        if (reply == NULL) {
            return LK_OK;
        }
        lk__sub_report(reply, fn, userdata);
        freeReplyObject(reply);
        reply = NULL;
    }
fail:
    lk__fail(s->c, LK_EUNAVAILABLE, "subscriber connection failed: %s",
             s->ctx->errstr[0] != '\0' ? s->ctx->errstr : "protocol error");
    sub_disconnect(s);
    return LK_EUNAVAILABLE;
}
