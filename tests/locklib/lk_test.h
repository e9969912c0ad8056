/* Shared setup for the locklib test programs: one real redis-server per group. */
#ifndef FG_LK_TEST_H
#define FG_LK_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "harness.h"
#include "locklib/locklib.h"

typedef struct lk_fixture {
    th_redis redis;
    lk_client *c;
} lk_fixture;

/* Asserts a locklib status and prints the handle's own reason when it differs. */
#define assert_lk(c, got, want)                                                            \
    do {                                                                                   \
        lk_status got_ = (got);                                                            \
        if (got_ != (want)) {                                                              \
            print_error("%s:%d: got %s, want %s (%s)\n", __FILE__, __LINE__,               \
                        lk_status_name(got_), lk_status_name(want), lk_errstr(c));         \
            fail();                                                                        \
        }                                                                                  \
    } while (0)

/* Opens a fresh handle on the fixture's Redis with short timeouts. */
static inline lk_client *lk_test_open(const th_redis *r, lk_options *opts)
{
    lk_options o;
    lk_client *c = NULL;
    if (opts == NULL) {
        lk_options_init(&o);
        o.connect_timeout_ms = 1000;
        o.command_timeout_ms = 1000;
        opts = &o;
    }
    lk_status st = lk_client_open(&c, r->url, opts);
    if (c == NULL || (st != LK_OK && st != LK_EUNAVAILABLE)) {
        print_error("lk_client_open(%s): %s\n", r->url, lk_status_name(st));
        fail();
    }
    return c;
}

/* A resource name unique to one test of this program, so tests never see each other's keys.
 * The buffer is static: use the name before the next call. */
static inline const char *res_name(const char *tag)
{
    static char buf[64];
    static int n = 0;
    snprintf(buf, sizeof buf, "t%d.%s", ++n, tag);
    return buf;
}

/* Blocks the fixture's Redis for 1 s with DEBUG SLEEP 1, sent from a forked child over a
 * connection of its own, so the caller's calls meet a stalled server meanwhile. Returns the
 * child's PID; the caller reaps it with lk_test_reap() once it is done with the stall. */
static inline pid_t lk_test_debug_sleep(const th_redis *r)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        th_redis_cmd(r, NULL, 0, "DEBUG SLEEP 1");
        _exit(0);
    }
    return pid;
}

/* Waits for the child pid of lk_test_debug_sleep(): Redis answers again once it has ended. */
static inline void lk_test_reap(pid_t pid)
{
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
}

/* A plain hiredis connection to the fixture's Redis (5 s timeouts), for inspection and
 * subscriptions; the caller frees it. */
static inline redisContext *connect_plain(const lk_fixture *f)
{
    struct timeval tv = {5, 0};
    redisContext *ctx = redisConnectWithTimeout("127.0.0.1", f->redis.port, tv);
    assert_non_null(ctx);
    assert_int_equal(ctx->err, 0);
    redisSetTimeout(ctx, tv);
    return ctx;
}

/* A client that wants one replica's acknowledgement (the fixture's Redis has none). */
static inline lk_client *open_with_replicas(lk_fixture *f)
{
    lk_options o;
    lk_options_init(&o);
    o.min_replicas = 1;
    o.replica_timeout_ms = 50;
    o.connect_timeout_ms = 1000;
    o.command_timeout_ms = 1000;
    return lk_test_open(&f->redis, &o);
}

/* The calls of HSET Redis has counted (INFO commandstats counts a script's calls too). */
static inline long long hset_calls(const th_redis *r)
{
    char info[16384];
    assert_int_equal(th_redis_cmd(r, info, sizeof info, "INFO commandstats"), 0);
    const char *at = strstr(info, "cmdstat_hset:calls=");
    return at != NULL ? atoll(at + strlen("cmdstat_hset:calls=")) : 0;
}

/* Reads one pub/sub message from sub and checks its channel and payload. */
/* The next message on sub, on channel; the caller frees it. */
static inline redisReply *lk_next_message(redisContext *sub, const char *channel)
{
    redisReply *msg = NULL;
    assert_int_equal(redisGetReply(sub, (void **)&msg), REDIS_OK);
    assert_int_equal(msg->type, REDIS_REPLY_ARRAY);
    assert_string_equal(msg->element[0]->str, "message");
    assert_string_equal(msg->element[1]->str, channel);
    return msg;
}

static inline void lk_expect_message(redisContext *sub, const char *channel, const char *payload)
{
    redisReply *msg = lk_next_message(sub, channel);
    assert_string_equal(msg->element[2]->str, payload);
    freeReplyObject(msg);
}

/* The next message on sub is a release of the hold with token `token`, naming a hold id
 * ("<token>:<16 hex digits>", release.lua). */
static inline void lk_expect_release(redisContext *sub, const char *channel, const char *token)
{
    redisReply *msg = lk_next_message(sub, channel);
    const char *p = msg->element[2]->str;
    size_t n = strlen(token);
    assert_int_equal(strncmp(p, token, n), 0);
    assert_int_equal(p[n], ':');
    assert_int_equal(strspn(p + n + 1, "0123456789abcdef"), 16);
    assert_int_equal(strlen(p + n + 1), 16);
    freeReplyObject(msg);
}

static inline int lk_group_setup_aof(void **state, int appendonly)
{
    lk_fixture *f = calloc(1, sizeof *f);
    th_redis_start(&f->redis, appendonly, NULL);
    f->c = lk_test_open(&f->redis, NULL);
    *state = f;
    return 0;
}

static inline int lk_group_teardown(void **state)
{
    lk_fixture *f = *state;
    lk_client_close(f->c);
    th_redis_stop(&f->redis);
    free(f);
    return 0;
}

#endif
