/*
 * Shared between the harness files (harness.c, harness_sentinel.c, harness_cluster.c), not
 * used by tests. Replies returned here are hiredis replies the caller frees with
 * freeReplyObject().
 */
#ifndef FG_TEST_HARNESS_INTERNAL_H
#define FG_TEST_HARNESS_INTERNAL_H

#include <stddef.h>

#include <hiredis/hiredis.h>

/* Declared, not included: harness.h is the layer above, the one tests see (a repeated
 * typedef is valid C11). Every file that includes this one includes harness.h first. */
typedef struct th_redis th_redis;

/* Room for a node's whole command line: the fixed options, the password and r->args
 * (TH_NODE_ARGS comes from harness.h). */
#define TH_ARGV_MAX (32 + TH_NODE_ARGS)

/* A free port whose cluster bus port (port + 10000) is free too, both below the ephemeral
 * range. -1 when none was found. */
int th__free_cluster_port(void);

/* Clears r and gives it a fresh temp dir named after tag; no process yet. The caller may add
 * command-line arguments with th__node_arg() (and set r->sentinel) before th__node_spawn(). */
void th__node_init(th_redis *r, const char *tag, int appendonly, const char *password);

/* Appends one argument to r's command line (kept for restarts). Exits when full. */
void th__node_arg(th_redis *r, const char *arg);

/* Starts r on a free port (cluster_bus: one whose bus port is free too), retrying on a port
 * taken in the meantime, and waits until it answers PING. Exits the process on failure. */
void th__node_spawn(th_redis *r, int cluster_bus);

/* One command on a fresh connection (AUTH first when r has a password). Returns the reply,
 * which the caller frees, or NULL when r is not running or did not answer in 5 s. */
redisReply *th__node_command(const th_redis *r, const char *fmt, ...);
redisReply *th__node_command_argv(const th_redis *r, int argc, const char **argv);

/* Copies the value of "field:value" from an INFO or CLUSTER INFO text into out. Returns 0,
 * or -1 (out empty) when the field is missing. */
int th__info_field(const char *info, const char *field, char *out, size_t outlen);

/* Looks key up in a RESP2 flat key/value array (SENTINEL MASTER, CLUSTER SHARDS entries).
 * The returned pointers live as long as map. Missing: NULL, -1 and "". */
const redisReply *th__map_get(const redisReply *map, const char *key);
long long th__map_int(const redisReply *map, const char *key);
const char *th__map_str(const redisReply *map, const char *key);

/* 1 when r answers ROLE with role first ("master", "slave", "sentinel"). */
int th__role_is(const th_redis *r, const char *role);

/* Appends to a NUL-terminated buffer of len bytes; exits when it does not fit. */
void th__append(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
