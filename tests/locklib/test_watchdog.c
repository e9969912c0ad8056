/* locklib: the watchdog and the waiting acquire, against a real redis-server. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "lk_test.h"

static int group_setup(void **state)
{
    return lk_group_setup_aof(state, 0);
}

static lk_client *open_with_lease(const th_redis *r, int64_t lease_ms, lk_lost_fn fn,
                                  void *ud)
{
    lk_options o;
    lk_options_init(&o);
    o.watchdog_lease_ms = lease_ms;
    o.on_lost = fn;
    o.on_lost_userdata = ud;
    return lk_test_open(r, &o);
}

static long long evalsha_calls(const th_redis *r)
{
    char info[8192];
    th_redis_cmd(r, info, sizeof info, "INFO commandstats");
    const char *p = strstr(info, "cmdstat_evalsha:calls=");
    return p != NULL ? atoll(p + strlen("cmdstat_evalsha:calls=")) : 0;
}

static void test_watchdog_keeps_short_lease_alive(void **state)
{
    lk_fixture *f = *state;
    lk_client *c = open_with_lease(&f->redis, 300, NULL, NULL);
    lk_result r;
    lk_lock_info info;

    assert_lk(c, lk_acquire(c, "wd", "alice", LK_LEASE_WATCHDOG, 0, NULL, &r), LK_ACQUIRED);
    assert_int_equal(r.ttl_ms, 300);
    /* For 2 s, more than six leases, the lock never lapses and nobody else gets in. */
    int64_t end = th_now_ms() + 2000;
    while (th_now_ms() < end) {
        assert_lk(f->c, lk_lock_status(f->c, "wd", &info), LK_OK);
        assert_int_equal(info.locked, 1);
        assert_int_equal(info.token, r.token);
        assert_int_equal(lk_watch_lost(c, "wd", "alice"), 0);
        th_nap_ms(50);
    }
    assert_lk(c, lk_release(c, "wd", "alice", NULL, &r), LK_RELEASED);

    /* After the release the watchdog stops: no renewal script runs for several leases. */
    long long before = evalsha_calls(&f->redis);
    assert_true(before > 0); /* the counter is readable, so "unchanged" means something */
    end = th_now_ms() + 700;
    while (th_now_ms() < end) {
        th_nap_ms(50);
    }
    assert_int_equal(evalsha_calls(&f->redis), before);
    assert_int_equal(lk_watch_lost(c, "wd", "alice"), 0);
    lk_client_close(c);
}

/* A retried release (same idempotency key) replays its first answer. If the owner took the
 * lock again meanwhile, the replay must not stop the watchdog of that new hold. */
static void test_replayed_release_keeps_new_watch(void **state)
{
    lk_fixture *f = *state;
    lk_client *c = open_with_lease(&f->redis, 300, NULL, NULL);
    lk_result r;
    lk_lock_info info;

    assert_lk(c, lk_acquire(c, "wd-replay", "alice", LK_LEASE_WATCHDOG, 0, NULL, &r),
              LK_ACQUIRED);
    assert_lk(c, lk_release(c, "wd-replay", "alice", "rel-1", &r), LK_RELEASED);
    assert_lk(c, lk_acquire(c, "wd-replay", "alice", LK_LEASE_WATCHDOG, 0, NULL, &r),
              LK_ACQUIRED);
    assert_lk(c, lk_release(c, "wd-replay", "alice", "rel-1", &r), LK_RELEASED);
    assert_int_equal(r.replayed, 1);
    /* Several leases later the new hold is still there, renewed. */
    int64_t end = th_now_ms() + 1200;
    while (th_now_ms() < end) {
        assert_lk(f->c, lk_lock_status(f->c, "wd-replay", &info), LK_OK);
        assert_int_equal(info.locked, 1);
        th_nap_ms(50);
    }
    assert_lk(c, lk_release(c, "wd-replay", "alice", NULL, &r), LK_RELEASED);
    lk_client_close(c);
}

static void on_lost(const char *resource, const char *owner, void *ud)
{
    int *count = ud;
    if (strcmp(resource, "wd-lost") == 0 && strcmp(owner, "alice") == 0) {
        __atomic_add_fetch(count, 1, __ATOMIC_SEQ_CST);
    }
}

static void test_watchdog_reports_lost_lock(void **state)
{
    lk_fixture *f = *state;
    int lost_calls = 0;
    lk_client *c = open_with_lease(&f->redis, 300, on_lost, &lost_calls);
    lk_result r;

    assert_lk(c, lk_acquire(c, "wd-lost", "alice", LK_LEASE_WATCHDOG, 0, NULL, &r),
              LK_ACQUIRED);
    /* Someone deletes the lock under its holder (an operator, a data loss). */
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "DEL fg:{wd-lost}:lock"), 1);
    int64_t deadline = th_now_ms() + 5000;
    while (!lk_watch_lost(c, "wd-lost", "alice") && th_now_ms() < deadline) {
        th_nap_ms(10);
    }
    assert_int_equal(lk_watch_lost(c, "wd-lost", "alice"), 1);
    assert_int_equal(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST), 1);
    /* Re-acquiring clears the flag. */
    assert_lk(c, lk_acquire(c, "wd-lost", "alice", LK_LEASE_WATCHDOG, 0, NULL, &r),
              LK_ACQUIRED);
    assert_int_equal(lk_watch_lost(c, "wd-lost", "alice"), 0);
    assert_lk(c, lk_release(c, "wd-lost", "alice", NULL, &r), LK_RELEASED);
    lk_client_close(c);
}

/* Releasing a lock the watchdog found lost answers NOT_OWNER and ends the watch: the flag
 * does not stay up until the handle is closed. */
static void test_release_of_lost_lock_ends_watch(void **state)
{
    lk_fixture *f = *state;
    int lost_calls = 0;
    lk_client *c = open_with_lease(&f->redis, 300, on_lost, &lost_calls);
    lk_result r;

    assert_lk(c, lk_acquire(c, "wd-lost", "alice", LK_LEASE_WATCHDOG, 0, NULL, &r),
              LK_ACQUIRED);
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "DEL fg:{wd-lost}:lock"), 1);
    int64_t deadline = th_now_ms() + 5000;
    while (!lk_watch_lost(c, "wd-lost", "alice") && th_now_ms() < deadline) {
        th_nap_ms(10);
    }
    assert_int_equal(lk_watch_lost(c, "wd-lost", "alice"), 1);
    assert_lk(c, lk_release(c, "wd-lost", "alice", NULL, &r), LK_NOT_OWNER);
    assert_int_equal(lk_watch_lost(c, "wd-lost", "alice"), 0);
    lk_client_close(c);
    assert_int_equal(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST), 1);
}

static void count_lost(const char *resource, const char *owner, void *ud)
{
    (void)resource;
    (void)owner;
    __atomic_add_fetch((int *)ud, 1, __ATOMIC_SEQ_CST);
}

/* A renewal that Redis runs just after the release script answers NOT_OWNER. That is the
 * release, not a loss: no callback, however the two threads interleave. */
static void test_clean_release_never_reports_loss(void **state)
{
    lk_fixture *f = *state;
    int lost_calls = 0;
    lk_result r;
    char out[64];

    /* Lined up: CLIENT PAUSE holds back the release and the renewal due 100 ms after the
     * acquisition, and lets them run back to back, the release first (it came first), with
     * both replies sent at once. */
    lk_client *c = open_with_lease(&f->redis, 300, count_lost, &lost_calls);
    for (int i = 0; i < 15; i++) {
        assert_lk(c, lk_acquire(c, "wd-cycle", "alice", LK_LEASE_WATCHDOG, 0, NULL, &r),
                  LK_ACQUIRED);
        th_redis_cmd(&f->redis, out, sizeof out, "CLIENT PAUSE 180 ALL");
        assert_string_equal(out, "OK");
        assert_lk(c, lk_release(c, "wd-cycle", "alice", NULL, &r), LK_RELEASED);
    }
    lk_client_close(c); /* joins the watchdog: every renewal in flight has been answered */
    assert_int_equal(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST), 0);

    /* Unaligned: many quick cycles with a 150 ms lease; every 25th lock is held for about
     * the renewal interval (50 ms), so that some renewals meet releases. */
    c = open_with_lease(&f->redis, 150, count_lost, &lost_calls);
    for (int i = 0; i < 1000; i++) {
        assert_lk(c, lk_acquire(c, "wd-cycle", "alice", LK_LEASE_WATCHDOG, 0, NULL, &r),
                  LK_ACQUIRED);
        int64_t until = th_now_ms() + (i % 25 == 0 ? 47 + i % 7 : 0);
        while (th_now_ms() < until) {
            th_nap_ms(1);
        }
        assert_lk(c, lk_release(c, "wd-cycle", "alice", NULL, &r), LK_RELEASED);
    }
    lk_client_close(c);
    assert_int_equal(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST), 0);
}

typedef struct lost_poller {
    lk_client *c;
    int stop;
    long polls;
    int saw_lost;
} lost_poller;

static void *poll_lost(void *p)
{
    lost_poller *a = p;
    while (!__atomic_load_n(&a->stop, __ATOMIC_SEQ_CST)) {
        if (lk_watch_lost(a->c, "wd-tsafe", "alice") != 0) {
            __atomic_store_n(&a->saw_lost, 1, __ATOMIC_SEQ_CST);
            break;
        }
        __atomic_add_fetch(&a->polls, 1, __ATOMIC_SEQ_CST);
    }
    return NULL;
}

/* lk_watch_lost() is documented thread-safe: another thread may poll it while the owner's
 * thread starts the watchdog (the first watchdog acquisition) and releases. Under
 * ThreadSanitizer an unsynchronised read of the handle's watchdog pointer shows up here. */
static void test_watch_lost_from_another_thread(void **state)
{
    lk_fixture *f = *state;
    lk_client *c = open_with_lease(&f->redis, 300, NULL, NULL);
    lost_poller a = {c, 0, 0, 0};
    pthread_t t;
    lk_result r;

    lk_status acquired[20], released[20];

    pthread_create(&t, NULL, poll_lost, &a);
    /* The poller must be running before the owner's thread starts, or on a busy machine the
     * 20 rounds can end before it is first scheduled and nothing runs concurrently. */
    int64_t deadline = th_now_ms() + 5000;
    while (__atomic_load_n(&a.polls, __ATOMIC_SEQ_CST) == 0 &&
           !__atomic_load_n(&a.saw_lost, __ATOMIC_SEQ_CST) && th_now_ms() < deadline) {
        th_nap_ms(1);
    }
    for (int i = 0; i < 20; i++) {
        acquired[i] = lk_acquire(c, "wd-tsafe", "alice", LK_LEASE_WATCHDOG, 0, NULL, &r);
        released[i] = lk_release(c, "wd-tsafe", "alice", NULL, &r);
    }
    __atomic_store_n(&a.stop, 1, __ATOMIC_SEQ_CST);
    pthread_join(t, NULL); /* before any assertion, so a failure leaves no thread behind */
    for (int i = 0; i < 20; i++) {
        assert_lk(c, acquired[i], LK_ACQUIRED);
        assert_lk(c, released[i], LK_RELEASED);
    }
    assert_true(a.polls > 0);
    assert_false(a.saw_lost); /* a lock released by its owner is never reported lost */
    lk_client_close(c);
}

static void test_closed_handle_stops_renewing(void **state)
{
    lk_fixture *f = *state;
    lk_client *c = open_with_lease(&f->redis, 300, NULL, NULL);
    lk_result r;
    lk_lock_info info;

    assert_lk(c, lk_acquire(c, "wd-close", "alice", LK_LEASE_WATCHDOG, 0, NULL, &r),
              LK_ACQUIRED);
    lk_client_close(c); /* like a holder that died: nothing renews any more */
    int64_t deadline = th_now_ms() + 5000;
    do {
        assert_lk(f->c, lk_lock_status(f->c, "wd-close", &info), LK_OK);
    } while (info.locked && th_now_ms() < deadline && (th_nap_ms(20), 1));
    assert_int_equal(info.locked, 0);
}

typedef struct waiter_arg {
    const char *url;
    lk_status st;
    lk_result res;
} waiter_arg;

static void *waiter(void *p)
{
    waiter_arg *a = p;
    lk_client *c = NULL;
    lk_client_open(&c, a->url, NULL);
    a->st = lk_acquire_wait(c, "waited", "bob", 10000, 0, NULL, 20000, &a->res);
    if (a->st == LK_ACQUIRED) {
        lk_result r;
        lk_release(c, "waited", "bob", NULL, &r);
    }
    lk_client_close(c);
    return NULL;
}

static void test_wait_woken_by_release(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    waiter_arg a = {f->redis.url, LK_OK, {0}};
    pthread_t t;

    /* A 60 s lease: only the release message can let the waiter in within its 20 s. */
    assert_lk(f->c, lk_acquire(f->c, "waited", "alice", 60000, 0, NULL, &r), LK_ACQUIRED);
    int64_t first = r.token;
    pthread_create(&t, NULL, waiter, &a);
    /* Release once the waiter is parked: it shows up as a subscriber of the channel. */
    int64_t deadline = th_now_ms() + 5000;
    while (th_redis_cmd(&f->redis, NULL, 0, "EVAL %s 0",
                        "return redis.call('PUBSUB','NUMSUB','fg:{waited}:released')[2]") < 1 &&
           th_now_ms() < deadline) {
        th_nap_ms(10);
    }
    assert_lk(f->c, lk_release(f->c, "waited", "alice", NULL, &r), LK_RELEASED);
    pthread_join(t, NULL);
    assert_lk(f->c, a.st, LK_ACQUIRED);
    assert_true(a.res.token > first);
}

static void test_wait_woken_by_expiry_and_times_out(void **state)
{
    lk_fixture *f = *state;
    lk_client *c = lk_test_open(&f->redis, NULL);
    lk_result r, w;

    /* Expiry publishes nothing: the waiter must wake on the holder's lease. */
    assert_lk(f->c, lk_acquire(f->c, "expiring", "alice", 300, 0, NULL, &r), LK_ACQUIRED);
    assert_lk(c, lk_acquire_wait(c, "expiring", "bob", 10000, 0, NULL, 10000, &w), LK_ACQUIRED);
    assert_true(w.token > r.token);

    /* A holder that stays past wait_ms: HELD with its remaining lease. */
    assert_lk(f->c, lk_acquire_wait(f->c, "expiring", "alice", 10000, 0, NULL, 200, &r),
              LK_HELD);
    assert_true(r.ttl_ms > 0);
    assert_lk(c, lk_release(c, "expiring", "bob", NULL, &r), LK_RELEASED);
    /* The subscriber connection was left clean: the handle keeps working. */
    assert_lk(c, lk_acquire_wait(c, "expiring", "bob", 10000, 0, NULL, 200, &r), LK_ACQUIRED);
    assert_lk(c, lk_release(c, "expiring", "bob", NULL, &r), LK_RELEASED);
    lk_client_close(c);
}

static void test_replica_safety(void **state)
{
    lk_fixture *f = *state;
    lk_options o;
    lk_result r;
    lk_lock_info info;

    lk_options_init(&o);
    o.min_replicas = 1;
    o.replica_timeout_ms = 200;
    lk_client *c = lk_test_open(&f->redis, &o);
    /* No replica: the acquisition is rolled back and reported. */
    assert_lk(c, lk_acquire(c, "replicated", "alice", 10000, 0, NULL, &r), LK_EREPLICAS);
    assert_lk(f->c, lk_lock_status(f->c, "replicated", &info), LK_OK);
    assert_int_equal(info.locked, 0);

    /* With a real replica attached, it succeeds. */
    th_redis replica;
    th_redis_start(&replica, 0, NULL);
    char cmd_out[64];
    th_redis_cmd(&replica, cmd_out, sizeof cmd_out, "REPLICAOF 127.0.0.1 %d", f->redis.port);
    int64_t deadline = th_now_ms() + 10000;
    lk_status st;
    while ((st = lk_acquire(c, "replicated", "alice", 10000, 0, NULL, &r)) == LK_EREPLICAS &&
           th_now_ms() < deadline) {
        th_nap_ms(50);
    }
    assert_lk(c, st, LK_ACQUIRED);
    assert_lk(c, lk_release(c, "replicated", "alice", NULL, &r), LK_RELEASED);
    lk_client_close(c);
    th_redis_stop(&replica);
}

/* The replica options are checked when the handle is opened: WAIT 0 blocks forever, and a
 * WAIT timeout at or past the command timeout turns every missing replica into a dropped
 * connection. */
static void test_replica_options_validated(void **state)
{
    lk_fixture *f = *state;
    lk_options o;
    lk_client *c = NULL;

    lk_options_init(&o);
    o.min_replicas = 1;
    o.replica_timeout_ms = 0;
    assert_int_equal(lk_client_open(&c, f->redis.url, &o), LK_EINVAL);
    assert_null(c);
    o.replica_timeout_ms = -1;
    assert_int_equal(lk_client_open(&c, f->redis.url, &o), LK_EINVAL);
    o.replica_timeout_ms = o.command_timeout_ms;
    assert_int_equal(lk_client_open(&c, f->redis.url, &o), LK_EINVAL);
    assert_null(c);
    o.replica_timeout_ms = o.command_timeout_ms - 1;
    assert_int_equal(lk_client_open(&c, f->redis.url, &o), LK_OK);
    lk_client_close(c);
    /* Without min_replicas the WAIT timeout is unused and not held against a short command
     * timeout. */
    lk_options_init(&o);
    o.command_timeout_ms = 300;
    assert_int_equal(lk_client_open(&c, f->redis.url, &o), LK_OK);
    lk_client_close(c);
}

typedef struct sleeper_arg {
    int port;
    const char *lock_key;
    const char *sleep_s; /* DEBUG SLEEP argument, seconds */
    int slept;
} sleeper_arg;

/* Waits for the lock key to appear, then blocks the whole server with DEBUG SLEEP. It runs
 * while the acquiring client sits in WAIT (replica_timeout_ms), so the WAIT reply comes
 * after the client's command timeout: the reply is NULL and the connection is unusable. */
static void *sleeper(void *p)
{
    sleeper_arg *a = p;
    struct timeval tv = {10, 0};
    redisContext *ctx = redisConnectWithTimeout("127.0.0.1", a->port, tv);
    int64_t deadline = th_now_ms() + 5000;

    if (ctx == NULL || ctx->err) {
        redisFree(ctx);
        return NULL;
    }
    redisSetTimeout(ctx, tv);
    while (th_now_ms() < deadline) {
        redisReply *r = redisCommand(ctx, "EXISTS %s", a->lock_key);
        int exists = r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
        freeReplyObject(r);
        if (exists) {
            freeReplyObject(redisCommand(ctx, "DEBUG SLEEP %s", a->sleep_s));
            a->slept = 1;
            break;
        }
    }
    redisFree(ctx);
    return NULL;
}

/* Acquires `resource` with min_replicas 1 on a Redis without replicas while the sleeper
 * freezes the server for sleep_s seconds during the WAIT. */
static lk_status acquire_with_frozen_wait(lk_fixture *f, lk_client *c, const char *resource,
                                          const char *sleep_s)
{
    char lock_key[128];
    sleeper_arg a = {f->redis.port, lock_key, sleep_s, 0};
    pthread_t t;
    lk_result r;

    snprintf(lock_key, sizeof lock_key, "fg:{%s}:lock", resource);
    pthread_create(&t, NULL, sleeper, &a);
    lk_status st = lk_acquire(c, resource, "alice", 10000, 0, NULL, &r);
    pthread_join(t, NULL);
    assert_int_equal(a.slept, 1);
    return st;
}

static lk_client *open_replicated(const th_redis *redis)
{
    lk_options o;
    lk_options_init(&o);
    o.min_replicas = 1;
    o.replica_timeout_ms = 200;
    o.connect_timeout_ms = 1000;
    o.command_timeout_ms = 1000;
    return lk_test_open(redis, &o);
}

/* WAIT answers later than the command timeout: the connection is dropped and a fresh one
 * rolls the acquisition back, so EREPLICAS really means the lock is not held. */
static void test_replica_wait_timeout_still_rolls_back(void **state)
{
    lk_fixture *f = *state;
    lk_client *c = open_replicated(&f->redis);
    lk_lock_info info;

    /* Frozen 1.5 s: WAIT times out at 1 s, the rollback's reply comes within its own 1 s. */
    assert_lk(c, acquire_with_frozen_wait(f, c, "replica-null", "1.5"), LK_EREPLICAS);
    assert_non_null(strstr(lk_errstr(c), "rolled back"));
    assert_lk(f->c, lk_lock_status(f->c, "replica-null", &info), LK_OK);
    assert_int_equal(info.locked, 0);
    lk_client_close(c);
}

/* When the rollback cannot reach Redis either, nobody knows whether the lock is held: the
 * answer is EUNAVAILABLE and says so, never "rolled back". */
static void test_replica_rollback_failure_is_unavailable(void **state)
{
    lk_fixture *f = *state;
    lk_client *c = open_replicated(&f->redis);
    lk_lock_info info;
    lk_result r;

    /* Frozen 3.5 s: WAIT times out at 1 s and the rollback at 2 s. */
    assert_lk(c, acquire_with_frozen_wait(f, c, "replica-unknown", "3.5"), LK_EUNAVAILABLE);
    assert_non_null(strstr(lk_errstr(c), "unknown"));
    assert_null(strstr(lk_errstr(c), "rolled back"));
    /* And indeed the lock was left behind (until its lease runs out). */
    int64_t deadline = th_now_ms() + 10000;
    lk_status st;
    while ((st = lk_lock_status(f->c, "replica-unknown", &info)) != LK_OK &&
           th_now_ms() < deadline) {
        th_nap_ms(20);
    }
    assert_lk(f->c, st, LK_OK);
    assert_int_equal(info.locked, 1);
    assert_lk(f->c, lk_release(f->c, "replica-unknown", "alice", NULL, &r), LK_RELEASED);
    lk_client_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_watchdog_keeps_short_lease_alive),
        cmocka_unit_test(test_replayed_release_keeps_new_watch),
        cmocka_unit_test(test_watchdog_reports_lost_lock),
        cmocka_unit_test(test_release_of_lost_lock_ends_watch),
        cmocka_unit_test(test_clean_release_never_reports_loss),
        cmocka_unit_test(test_watch_lost_from_another_thread),
        cmocka_unit_test(test_closed_handle_stops_renewing),
        cmocka_unit_test(test_wait_woken_by_release),
        cmocka_unit_test(test_wait_woken_by_expiry_and_times_out),
        cmocka_unit_test(test_replica_safety),
        cmocka_unit_test(test_replica_options_validated),
        cmocka_unit_test(test_replica_wait_timeout_still_rolls_back),
        cmocka_unit_test(test_replica_rollback_failure_is_unavailable),
    };
    return cmocka_run_group_tests_name("locklib_watchdog", tests, group_setup,
                                       lk_group_teardown);
}
