/*
 * The gateway when things go wrong, end to end with the real binary and a real redis-server:
 *   - it starts while Redis is down, says so on /readyz, answers 503 on lock calls, and
 *     works again when Redis comes back, without a restart; also when Redis dies under it,
 *     or stalls (then the stall breaker answers 503 without waiting on Redis);
 *   - SIGTERM and SIGINT end a waiting request and exit 0;
 *   - tokens never go backwards when Redis loses its data, with or without a gateway
 *     restart in between (the storage ledger).
 * No test asserts timing; every wait is a loop on a condition with a deadline.
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "gw_test.h"
#include "harness.h"

/* Everything a test starts, so the teardown can stop it even when an assertion failed. */
typedef struct res_state {
    th_redis redis;
    gwt_proc gw;
    char data[256];
} res_state;

static int setup(void **state)
{
    *state = calloc(1, sizeof(res_state));
    return *state != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    res_state *s = *state;
    gwt_cleanup(&s->gw);
    if (s->redis.dir[0] != '\0') {
        th_redis_stop(&s->redis);
    }
    th_rmtree(s->data);
    free(s);
    return 0;
}

static void expect(const gwt_proc *gw, const char *method, const char *path, const char *body,
                   long status, const char *code)
{
    static const char *const headers[] = {"Content-Type: application/json",
                                          "Fencing-Token: 1", NULL};
    gwt_resp r;
    gwt_http(gw, method, path, headers, body, body != NULL ? strlen(body) : 0, 0, &r);
    gwt_assert_status(&r, status, code);
    gwt_resp_free(&r);
}

/* Waits until GET path answers `status`. Fails the test after 15 s. */
static void wait_status(const gwt_proc *gw, const char *path, long status)
{
    int64_t deadline = th_now_ms() + 15000;
    long got = 0;
    while (th_now_ms() < deadline) {
        gwt_resp r;
        gwt_get(gw, path, &r);
        got = r.status;
        gwt_resp_free(&r);
        if (got == status) {
            return;
        }
        th_nap_ms(20);
    }
    fail_msg("GET %s still answers %ld, not %ld, after 15 s", path, got, status);
}

/* Locks and unlocks resource; returns the token. */
static long long lock_token(const gwt_proc *gw, const char *resource)
{
    char body[256];
    gwt_resp r;
    snprintf(body, sizeof body, "{\"resource\":\"%s\",\"owner\":\"lock-token\"}", resource);
    gwt_post(gw, "/lock", body, &r);
    gwt_assert_status(&r, 200, NULL);
    long long token = gwt_int(&r, "token");
    gwt_resp_free(&r);
    gwt_post(gw, "/unlock", body, &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
    return token;
}

static void test_starts_without_redis_and_recovers(void **state)
{
    res_state *st = *state;
    th_redis *redis = &st->redis;
    gwt_proc *gw = &st->gw;
    gwt_resp r;

    th_redis_start(redis, 1, NULL);
    th_redis_kill(redis); /* a known port with nothing behind it */
    gwt_start(gw, redis->url, NULL, NULL);

    gwt_get(gw, "/readyz", &r);
    gwt_assert_status(&r, 503, "backend_unavailable");
    assert_non_null(strstr(gwt_str(&r, "message"), "redis"));
    assert_string_equal(gwt_str(&r, "redis"), "down");
    assert_string_equal(gwt_str(&r, "storage"), "up");
    gwt_resp_free(&r);
    expect(gw, "POST", "/lock", "{\"resource\":\"res.down\"}", 503, "backend_unavailable");
    expect(gw, "POST", "/unlock", "{\"resource\":\"res.down\",\"owner\":\"o\"}", 503,
           "backend_unavailable");
    expect(gw, "POST", "/renew", "{\"resource\":\"res.down\",\"owner\":\"o\"}", 503,
           "backend_unavailable");
    expect(gw, "GET", "/locks/res.down", NULL, 503, "backend_unavailable");
    expect(gw, "PUT", "/resources/res.down", "v", 503, "backend_unavailable");
    gwt_get(gw, "/metrics", &r);
    gwt_assert_status(&r, 200, NULL);
    assert_non_null(strstr(r.body, "fencegate_redis_up 0"));
    gwt_resp_free(&r);

    /* Redis comes back: the same process serves again. */
    th_redis_restart(redis);
    wait_status(gw, "/readyz", 200);
    assert_true(lock_token(gw, "res.down") > 0);

    /* A Redis that accepts but never answers (stopped) gives 503 too, never a hang. */
    kill(redis->pid, SIGSTOP);
    expect(gw, "POST", "/lock", "{\"resource\":\"res.stopped\",\"ttl_ms\":1000}", 503,
           "backend_unavailable");
    /* That call waited out the command timeout and tripped the stall breaker: the next
     * ones fail fast for a moment (a call after the window probes, and trips it again). */
    int64_t deadline = th_now_ms() + 15000;
    int fast = 0;
    while (!fast && th_now_ms() < deadline) {
        expect(gw, "POST", "/lock", "{\"resource\":\"res.stopped\",\"ttl_ms\":1000}", 503,
               "backend_unavailable");
        gwt_get(gw, "/metrics", &r);
        fast = strstr(r.body, "fencegate_redis_fast_fails_total 0\n") == NULL;
        gwt_resp_free(&r);
    }
    assert_true(fast);
    kill(redis->pid, SIGCONT);
    wait_status(gw, "/readyz", 200);

    /* Redis dies under a connected gateway, and comes back again. */
    th_redis_kill(redis);
    expect(gw, "POST", "/lock", "{\"resource\":\"res.down2\"}", 503, "backend_unavailable");
    wait_status(gw, "/readyz", 503);
    th_redis_restart(redis);
    wait_status(gw, "/readyz", 200);
    assert_true(lock_token(gw, "res.down2") > 0);

    assert_int_equal(gwt_stop(gw), 0);
}

static long long subscribers(const th_redis *redis, const char *channel)
{
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", redis->port, tv);
    long long n = -1;
    if (c != NULL && !c->err) {
        redisReply *reply = redisCommand(c, "PUBSUB NUMSUB %s", channel);
        if (reply != NULL && reply->type == REDIS_REPLY_ARRAY && reply->elements == 2) {
            n = reply->element[1]->integer;
        }
        freeReplyObject(reply);
    }
    if (c != NULL) {
        redisFree(c);
    }
    return n;
}

typedef struct waiter {
    const gwt_proc *gw;
    gwt_resp r;
} waiter;

static void *wait_for_lock(void *arg)
{
    waiter *w = arg;
    gwt_post(w->gw, "/lock", "{\"resource\":\"res.term\",\"owner\":\"waiter\",\"wait_ms\":60000}",
             &w->r);
    return NULL;
}

static void test_sigterm_ends_waiting_request_and_exits_zero(void **state)
{
    res_state *st = *state;
    th_redis *redis = &st->redis;
    gwt_proc *gw = &st->gw;
    waiter w;
    pthread_t t;

    th_redis_start(redis, 0, NULL);
    gwt_start(gw, redis->url, NULL, NULL);
    expect(gw, "POST", "/lock", "{\"resource\":\"res.term\",\"owner\":\"holder\",\"ttl_ms\":120000}",
           200, NULL);
    memset(&w, 0, sizeof w);
    w.gw = gw;
    assert_int_equal(pthread_create(&t, NULL, wait_for_lock, &w), 0);
    int64_t deadline = th_now_ms() + 10000;
    while (subscribers(redis, "fg:{res.term}:released") < 1 && th_now_ms() < deadline) {
        th_nap_ms(10);
    }
    assert_true(subscribers(redis, "fg:{res.term}:released") >= 1);

    /* The in-flight request is answered (not cut off), and the process exits 0. */
    assert_int_equal(gwt_signal_wait(gw, SIGTERM), 0);
    pthread_join(t, NULL);
    gwt_assert_status(&w.r, 503, "shutting_down");
    gwt_resp_free(&w.r);
    assert_true(gwt_log_contains(gw, "stopped"));
    gwt_cleanup(gw);

    gwt_start(gw, redis->url, NULL, NULL);
    expect(gw, "GET", "/healthz", NULL, 200, NULL);
    assert_int_equal(gwt_signal_wait(gw, SIGINT), 0);
    gwt_cleanup(gw);
}

/* A GET sent from a thread of its own; done is set once its answer is in. */
typedef struct bg_get {
    const gwt_proc *gw;
    const char *path;
    gwt_resp r;
    atomic_int done;
    pthread_t thread;
} bg_get;

static void *bg_get_main(void *arg)
{
    bg_get *g = arg;
    gwt_get(g->gw, g->path, &g->r);
    atomic_store(&g->done, 1);
    return NULL;
}

/* With one server thread and Redis stopped, a /readyz and a GET /locks wait for Redis on the
 * side pipeline's two threads, not on the server thread: a /healthz and a GET /resources
 * (another pipeline) on other connections are answered while both are still waiting. Before,
 * the server thread made the PING itself and served nothing else on its connections until
 * Redis answered or timed out; the GET /locks then waited behind it, so the two calls never
 * reached Redis together. */
static void test_stalled_redis_call_holds_up_no_server_thread(void **state)
{
    res_state *st = *state;
    th_redis *redis = &st->redis;
    gwt_proc *gw = &st->gw;
    /* One HTTP loop: every connection shares its thread. */
    static const char *const args[] = {"--threads", "1", "--max-connections", "120", NULL};
    bg_get probe = {.gw = gw, .path = "/readyz"};
    bg_get status = {.gw = gw, .path = "/locks/res.stall"};
    long long token = 0;

    th_redis_start(redis, 0, NULL);
    gwt_start(gw, redis->url, NULL, args);
    assert_int_equal(gwt_lock(gw, "res.stall", "stall-holder", &token), 200);
    assert_int_equal(gwt_put_fenced(gw, "res.stall", token, "kept", NULL), 200);
    assert_int_equal(gwt_unlock(gw, "res.stall", "stall-holder"), 200);

    assert_int_equal(kill(redis->pid, SIGSTOP), 0);
    assert_int_equal(pthread_create(&probe.thread, NULL, bg_get_main, &probe), 0);
    assert_int_equal(pthread_create(&status.thread, NULL, bg_get_main, &status), 0);
    /* Both calls have reached the stopped Redis: two connections with bytes it has not read. */
    int64_t deadline = th_now_ms() + 10000;
    int unread = 0;
    while ((unread = th_redis_unread_conns(redis)) < 2 && !atomic_load(&probe.done) &&
           !atomic_load(&status.done) && th_now_ms() < deadline) {
        th_nap_ms(5);
    }
    int both_sent = unread >= 2;
    gwt_resp health;
    gwt_get(gw, "/healthz", &health);
    int waiting_at_health = !atomic_load(&probe.done) && !atomic_load(&status.done);
    gwt_assert_value(gw, "res.stall", "kept");
    int waiting_at_read = !atomic_load(&probe.done) && !atomic_load(&status.done);
    kill(redis->pid, SIGCONT);
    pthread_join(probe.thread, NULL);
    pthread_join(status.thread, NULL);
    print_message("connections with unread bytes at the stopped Redis: %d; the two calls "
                  "still waiting at /healthz's answer: %d, at GET /resources's: %d\n",
                  unread, waiting_at_health, waiting_at_read);
    gwt_assert_status(&health, 200, NULL);
    gwt_resp_free(&health);
    assert_true(both_sent);
    assert_true(waiting_at_health);
    assert_true(waiting_at_read);
    /* Each is answered in the end: 503 when its call timed out, 200 when Redis came back
     * within the timeout. */
    assert_true(probe.r.status == 200 || probe.r.status == 503);
    assert_true(status.r.status == 200 || status.r.status == 503);
    gwt_resp_free(&probe.r);
    gwt_resp_free(&status.r);
    assert_int_equal(gwt_stop(gw), 0);
}

/* Takes a few tokens on several resources, writes with one of them, and returns the
 * largest token handed out. Most of these tokens are never written. */
static long long hand_out_tokens(const gwt_proc *gw, const char *tag)
{
    long long max = 0;
    char resource[64];
    for (int i = 0; i < 3; i++) {
        snprintf(resource, sizeof resource, "res.ledger%d", i);
        for (int k = 0; k < 3; k++) {
            char body[200];
            gwt_resp r;
            snprintf(body, sizeof body, "{\"resource\":\"%s\",\"owner\":\"%s\"}", resource, tag);
            gwt_post(gw, "/lock", body, &r);
            gwt_assert_status(&r, 200, NULL);
            long long token = gwt_int(&r, "token");
            gwt_resp_free(&r);
            max = token > max ? token : max;
            gwt_post(gw, "/unlock", body, &r);
            gwt_assert_status(&r, 200, NULL);
            gwt_resp_free(&r);
        }
    }
    char fence[64];
    gwt_resp r;
    snprintf(fence, sizeof fence, "Fencing-Token: %lld", max);
    const char *const headers[] = {fence, NULL};
    gwt_http(gw, "PUT", "/resources/res.ledger2", headers, tag, strlen(tag), 0, &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
    return max;
}

static void assert_fresh_tokens_above(const gwt_proc *gw, long long max)
{
    static const char *const resources[] = {"res.ledger0", "res.ledger1", "res.ledger2",
                                            "res.ledger-new", NULL};
    for (int i = 0; resources[i] != NULL; i++) {
        long long token = lock_token(gw, resources[i]);
        if (token <= max) {
            fail_msg("%s got token %lld, not above %lld handed out before", resources[i], token,
                     max);
        }
    }
}

/* The access log is buffered (gateway/src/rt/log.c): a clean stop still writes every line. The
 * requests end just before SIGTERM, so their lines are still in the buffer when it comes. */
static void test_sigterm_loses_no_log_line(void **state)
{
    res_state *st = *state;
    gwt_proc *gw = &st->gw;
    enum { N = 300 };
    char path[64];
    gwt_resp r;

    th_redis_start(&st->redis, 0, NULL);
    gwt_start(gw, st->redis.url, NULL, NULL);
    for (int i = 0; i < N; i++) {
        snprintf(path, sizeof path, "/resources/log-line-%d", i);
        gwt_get(gw, path, &r);
        assert_int_equal(r.status, 404);
        gwt_resp_free(&r);
    }
    assert_int_equal(gwt_signal_wait(gw, SIGTERM), 0);
    for (int i = 0; i < N; i++) {
        snprintf(path, sizeof path, "/resources/log-line-%d ", i);
        if (!gwt_log_contains(gw, path)) {
            fail_msg("the log lacks GET %s after SIGTERM", path);
        }
    }
    assert_true(gwt_log_contains(gw, "stopped"));
    gwt_cleanup(gw);
}

static void test_tokens_never_repeat_after_redis_loss(void **state)
{
    res_state *st = *state;
    th_redis *redis = &st->redis;
    gwt_proc *gw = &st->gw;
    gwt_resp r;

    th_redis_start(redis, 1, NULL);
    th_tempdir(st->data, sizeof st->data, "gwledger");

    /* 1. Redis loses everything while the gateway keeps running. */
    gwt_start(gw, redis->url, st->data, NULL);
    long long max = hand_out_tokens(gw, "first");
    assert_true(th_redis_cmd(redis, NULL, 0, "FLUSHALL") >= 0);
    assert_fresh_tokens_above(gw, max);
    gwt_get(gw, "/metrics", &r);
    assert_null(strstr(r.body, "fencegate_token_floor_corrections_total 0\n"));
    gwt_resp_free(&r);
    max = hand_out_tokens(gw, "second");
    assert_int_equal(gwt_stop(gw), 0);

    /* 2. The gateway restarts and Redis is killed and wiped meanwhile. */
    th_redis_kill(redis);
    th_redis_wipe_files(redis);
    th_redis_restart(redis);
    gwt_start(gw, redis->url, st->data, NULL);
    assert_fresh_tokens_above(gw, max);

    /* The value written before is still there, and its old token stays refused. */
    gwt_get(gw, "/resources/res.ledger2", &r);
    gwt_assert_status(&r, 200, NULL);
    assert_string_equal(r.body, "second");
    gwt_resp_free(&r);
    assert_int_equal(gwt_stop(gw), 0);
    
}

/* A PUT of value to resource with token; asserts the answer. */
static void put_with(const gwt_proc *gw, const char *resource, long long token, long status,
                     const char *code)
{
    char fence[64], path[128];
    gwt_resp r;
    snprintf(fence, sizeof fence, "Fencing-Token: %lld", token);
    snprintf(path, sizeof path, "/resources/%s", resource);
    const char *const headers[] = {fence, NULL};
    gwt_http(gw, "PUT", path, headers, "v", 1, 0, &r);
    gwt_assert_status(&r, status, code);
    gwt_resp_free(&r);
}

/* Locks resource for 100 ms of lease (so its token keys expire after the idle time, not the
 * lease), unlocks it, and returns the token. */
static long long short_lock(const gwt_proc *gw, const char *resource)
{
    char body[256];
    gwt_resp r;
    snprintf(body, sizeof body, "{\"resource\":\"%s\",\"owner\":\"idle-owner\",\"ttl_ms\":100}",
             resource);
    gwt_post(gw, "/lock", body, &r);
    gwt_assert_status(&r, 200, NULL);
    long long token = gwt_int(&r, "token");
    gwt_resp_free(&r);
    return token;
}

static void unlock_idle(const gwt_proc *gw, const char *resource)
{
    char body[256];
    gwt_resp r;
    snprintf(body, sizeof body, "{\"resource\":\"%s\",\"owner\":\"idle-owner\"}", resource);
    gwt_post(gw, "/unlock", body, &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
}

/* With --token-key-idle-ttl 1s the resource's token keys leave Redis once
 * it is idle; old tokens are refused after that (409 below the highest written, 403 above:
 * nothing that was refused before is accepted), and the next token is still larger than every
 * earlier one, also from a restarted gateway, whose only memory is the ledger floor. */
static void test_idle_token_keys_expire_and_tokens_still_grow(void **state)
{
    res_state *st = *state;
    th_redis *redis = &st->redis;
    gwt_proc *gw = &st->gw;
    static const char *const args[] = {"--token-key-idle-ttl", "1s", NULL};
    const char *res = "res.idle";

    th_redis_start(redis, 0, NULL);
    th_tempdir(st->data, sizeof st->data, "gwidle");
    gwt_start(gw, redis->url, st->data, args);
    long long first = short_lock(gw, res);
    unlock_idle(gw, res);
    long long written = short_lock(gw, res);
    put_with(gw, res, written, 200, NULL);
    unlock_idle(gw, res);
    long long last = short_lock(gw, res);
    assert_true(last > written);
    unlock_idle(gw, res);
    long long pttl = th_redis_cmd(redis, NULL, 0, "PTTL fg:{%s}:fence", res);
    assert_true(pttl > 0 && pttl <= 1000 + 1000 / 24); /* the idle time and its slack */

    int64_t deadline = th_now_ms() + 15000;
    long long left = -1;
    while (th_now_ms() < deadline) {
        left = th_redis_cmd(redis, NULL, 0, "EXISTS fg:{%s}:fence fg:{%s}:base fg:{%s}:recent",
                            res, res, res);
        if (left == 0) {
            break;
        }
        th_nap_ms(50);
    }
    if (left != 0) {
        fail_msg("%lld token keys of %s still in Redis 15 s after a 1 s idle expiry", left, res);
    }

    /* The counter is gone: the old tokens are refused, never accepted. */
    put_with(gw, res, first, 409, "stale_token");
    put_with(gw, res, written, 403, "unknown_token");
    put_with(gw, res, last, 403, "unknown_token");

    /* The next token is larger, from this gateway and from a restarted one. */
    long long next = short_lock(gw, res);
    assert_true(next > last);
    unlock_idle(gw, res);
    assert_int_equal(gwt_stop(gw), 0);
    assert_true(th_redis_cmd(redis, NULL, 0, "DEL fg:{%s}:fence fg:{%s}:base fg:{%s}:recent",
                             res, res, res) >= 0);
    gwt_start(gw, redis->url, st->data, args);
    long long after_restart = short_lock(gw, res);
    if (after_restart <= next) {
        fail_msg("token %lld after the keys expired is not above %lld", after_restart, next);
    }
    put_with(gw, res, after_restart, 200, NULL);
    unlock_idle(gw, res);
    assert_int_equal(gwt_stop(gw), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_starts_without_redis_and_recovers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sigterm_ends_waiting_request_and_exits_zero, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stalled_redis_call_holds_up_no_server_thread, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_sigterm_loses_no_log_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tokens_never_repeat_after_redis_loss, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idle_token_keys_expire_and_tokens_still_grow, setup,
                                        teardown),
    };
    return cmocka_run_group_tests_name("gateway_resilience", tests, NULL, NULL);
}
