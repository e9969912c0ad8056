/*
 * Finding the master through Redis Sentinel: the steps and the argument are in
 * sentinel_internal.h.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sentinel_internal.h"

/* Step 1 on one sentinel: writes the master's address into *out. Returns 0, or -1 with the
 * reason in err. */
static int ask_sentinel(const lk__sentinels *s, int i, const lk__node *login, lk__node *out,
                        char *err)
{
    lk__node sn = *login;
    const char *argv[3] = {"SENTINEL", "get-master-addr-by-name", s->master_name};
    size_t lens[3] = {8, 23, strlen(s->master_name)};
    int rc = -1;

    snprintf(sn.host, sizeof sn.host, "%s", s->seeds[i].host);
    sn.port = s->seeds[i].port;
    sn.unix_path[0] = '\0';
    sn.db = 0; /* a sentinel has no databases: SELECT would fail */
    redisContext *ctx = lk__connect(&sn, err);
    memset(sn.password, 0, sizeof sn.password);
    if (ctx == NULL) {
        return -1;
    }
    redisReply *r = lk__command_argv(ctx, 3, argv, lens);
    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_STRING && r->element[1]->type == REDIS_REPLY_STRING &&
        r->element[0]->len < sizeof out->host) {
        char *end = NULL;
        long port = strtol(r->element[1]->str, &end, 10);
        if (*end == '\0' && port >= 1 && port <= 65535) {
            memcpy(out->host, r->element[0]->str, r->element[0]->len + 1);
            out->port = (int)port;
            rc = 0;
        }
    }
    if (rc != 0) {
        lk__errf(err, LK_EUNAVAILABLE, "sentinel %s:%d does not name master '%s': %s",
                 s->seeds[i].host, s->seeds[i].port, s->master_name,
                 r == NULL ? ctx->errstr : r->type == REDIS_REPLY_ERROR ? r->str : "no address");
    }
    freeReplyObject(r);
    redisFree(ctx);
    return rc;
}

/* Step 3: 1 when ROLE on ctx answers master. */
static int is_master(redisContext *ctx)
{
    const char *argv[1] = {"ROLE"};
    size_t lens[1] = {4};
    redisReply *r = lk__command_argv(ctx, 1, argv, lens);
    int ok = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
             r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "master") == 0;
    freeReplyObject(r);
    return ok;
}

redisContext *lk__sentinel_connect(const lk__sentinels *s, lk__node *node, char *err)
{
    for (int i = 0; i < s->n; i++) {
        lk__node master = *node;
        if (ask_sentinel(s, i, node, &master, err) != 0) {
            continue;
        }
        redisContext *ctx = lk__connect(&master, err);
        if (ctx == NULL) {
            memset(master.password, 0, sizeof master.password);
            continue;
        }
        if (!is_master(ctx)) {
            lk__errf(err, LK_EUNAVAILABLE, "sentinel %s:%d names %s:%d, which is not a master",
                     s->seeds[i].host, s->seeds[i].port, master.host, master.port);
            redisFree(ctx);
            memset(master.password, 0, sizeof master.password);
            continue;
        }
        memcpy(node->host, master.host, sizeof node->host);
        node->port = master.port;
        memset(master.password, 0, sizeof master.password);
        return ctx;
    }
    if (s->n == 0) {
        lk__errf(err, LK_EINVAL, "no sentinel to ask");
    }
    return NULL;
}

redisContext *lk__sentinel_hint_open(const lk__sentinels *s, const lk__node *login, char *err)
{
    const char *argv[2] = {"SUBSCRIBE", "+switch-master"};
    size_t lens[2] = {9, 14};

    for (int i = 0; i < s->n; i++) {
        lk__node sn = *login;
        snprintf(sn.host, sizeof sn.host, "%s", s->seeds[i].host);
        sn.port = s->seeds[i].port;
        sn.unix_path[0] = '\0';
        sn.db = 0;
        redisContext *ctx = lk__connect(&sn, err);
        memset(sn.password, 0, sizeof sn.password);
        if (ctx == NULL) {
            continue;
        }
        redisReply *r = lk__command_argv(ctx, 2, argv, lens);
        int ok = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
                 r->element[0]->type == REDIS_REPLY_STRING &&
                 strcmp(r->element[0]->str, "subscribe") == 0;
        freeReplyObject(r);
        if (ok) {
            return ctx;
        }
        redisFree(ctx);
    }
    return NULL;
}

/* 1 when r is a +switch-master message about master `name`: "<name> <old ip> <old port>
 * <new ip> <new port>". */
static int is_switch(const redisReply *r, const char *name)
{
    size_t len = strlen(name);
    return r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
           r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "message") == 0 &&
           r->element[2]->type == REDIS_REPLY_STRING && r->element[2]->len > len &&
           strncmp(r->element[2]->str, name, len) == 0 && r->element[2]->str[len] == ' ';
}

int lk__sentinel_hint_switched(const lk__sentinels *s, redisContext *hint)
{
    struct pollfd pfd = {hint->fd, POLLIN, 0};
    void *reply = NULL;
    int switched = 0;

    int n = poll(&pfd, 1, 0);
    if (n == 0 || (n < 0 && errno == EINTR)) {
        return 0;
    }
    if (n < 0 || redisBufferRead(hint) != REDIS_OK) {
        return -1; /* EOF or an error: the sentinel went away */
    }
    for (;;) {
        if (redisGetReplyFromReader(hint, &reply) != REDIS_OK) {
            return -1;
        }
        if (reply == NULL) {
            return switched;
        }
        switched = switched || is_switch(reply, s->master_name);
        freeReplyObject(reply);
    }
}
