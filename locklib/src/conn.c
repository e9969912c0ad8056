/*
 * One connection to one Redis server (conn_internal.h).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "conn_internal.h"

struct timeval lk__ms_to_tv(int ms)
{
    struct timeval tv = {ms / 1000, (long)(ms % 1000) * 1000};
    return tv;
}

/* Runs one command on ctx with the SIGPIPE guard. Returns the reply or NULL. */
redisReply *lk__command_argv(redisContext *ctx, int argc, const char **argv,
                                const size_t *lens)
{
    lk__sigpipe guard;
    lk__sigpipe_block(&guard);
    redisReply *reply = redisCommandArgv(ctx, argc, argv, lens);
    lk__sigpipe_restore(&guard);
    return reply;
}

redisContext *lk__connect(const lk__node *node, char *err)
{
    struct timeval connect_tv = lk__ms_to_tv(node->connect_timeout_ms);
    redisContext *ctx = NULL;
    redisReply *reply = NULL;

    if (node->unix_path[0] != '\0') {
        ctx = redisConnectUnixWithTimeout(node->unix_path, connect_tv);
    } else {
        ctx = redisConnectWithTimeout(node->host, node->port, connect_tv);
    }
    if (ctx == NULL) {
        lk__errf(err, LK_ENOMEM, "cannot allocate a Redis context");
        return NULL;
    }
    if (ctx->err) {
        lk__errf(err, LK_EUNAVAILABLE, "cannot connect to Redis: %s", ctx->errstr);
        goto fail;
    }
    redisSetTimeout(ctx, lk__ms_to_tv(node->command_timeout_ms));
    if (node->unix_path[0] == '\0') {
        redisEnableKeepAlive(ctx);
    }
    if (node->password[0] != '\0') {
        const char *argv[3] = {"AUTH", node->user, node->password};
        size_t lens[3] = {4, strlen(node->user), strlen(node->password)};
        int argc = 3;
        if (node->user[0] == '\0') {
            argv[1] = node->password;
            lens[1] = lens[2];
            argc = 2;
        }
        reply = lk__command_argv(ctx, argc, argv, lens);
        if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
            /* The password itself is never copied into the message. */
            lk__errf(err, LK_EUNAVAILABLE, "Redis AUTH failed: %s",
                     reply != NULL ? reply->str : ctx->errstr);
            goto fail;
        }
        freeReplyObject(reply);
        reply = NULL;
    }
    if (node->db != 0) {
        char db[16];
        snprintf(db, sizeof db, "%d", node->db);
        const char *argv[2] = {"SELECT", db};
        size_t lens[2] = {6, strlen(db)};
        reply = lk__command_argv(ctx, 2, argv, lens);
        if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
            lk__errf(err, LK_EUNAVAILABLE, "Redis SELECT failed: %s",
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

