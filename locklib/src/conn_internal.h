/*
 * One connection to one Redis server (conn.c): the server and how to log in to it, opening
 * a connection with its timeouts, AUTH and SELECT, one command with the SIGPIPE guard, and
 * whether an idle connection is still usable. The transports (single node, Sentinel) and the
 * subscribers build on it; it knows nothing of scripts or batches.
 * Layer: above util only. Never installed.
 */
#ifndef LOCKLIB_CONN_INTERNAL_H
#define LOCKLIB_CONN_INTERNAL_H

#include <sys/time.h>

#include "util_internal.h"

/* One Redis server and how to log in to it. */
typedef struct lk__node {
    char host[256];
    int port;
    char unix_path[108];
    char user[128];
    char password[256];
    int db;
    int connect_timeout_ms;
    int command_timeout_ms;
} lk__node;

/* ms as a struct timeval. */
struct timeval lk__ms_to_tv(int ms);

/* Runs one command on ctx with the SIGPIPE guard. Returns the reply (the caller frees it
 * with freeReplyObject()) or NULL on an I/O error or timeout (ctx->errstr says which). */
redisReply *lk__command_argv(redisContext *ctx, int argc, const char **argv,
                             const size_t *lens);

/* Opens a new connection to node with its timeouts, AUTH and SELECT. Returns NULL with the
 * reason in err on failure; the caller frees the context with redisFree(). */
redisContext *lk__connect(const lk__node *node, char *err);

/* 1 when an idle connection has no EOF, error or unread bytes. */
int lk__idle_alive(redisContext *ctx);

#endif
