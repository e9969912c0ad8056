/* locklib: acquire, release, renew, status, tokens, idempotency and validation, against a
 * real redis-server started by the group setup. */
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

static void test_acquire_release_basic(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    lk_lock_info info;
    const char *res = res_name("basic");

    assert_lk(f->c, lk_acquire(f->c, res, "alice", 10000, 0, NULL, &r), LK_ACQUIRED);
    assert_true(r.token >= 1);
    assert_int_equal(r.holds, 1);
    assert_int_equal(r.ttl_ms, 10000);
    assert_lk(f->c, lk_lock_status(f->c, res, &info), LK_OK);
    assert_int_equal(info.locked, 1);
    assert_int_equal(info.token, r.token);
    assert_int_equal(info.holds, 1);
    assert_true(info.ttl_ms > 0 && info.ttl_ms <= 10000);
    assert_int_equal(info.last_token, r.token);

    lk_result held;
    assert_lk(f->c, lk_acquire(f->c, res, "bob", 10000, 0, NULL, &held), LK_HELD);
    assert_true(held.ttl_ms > 0 && held.ttl_ms <= 10000);
    assert_int_equal(held.token, 0);

    assert_lk(f->c, lk_release(f->c, res, "bob", NULL, &r), LK_NOT_OWNER);
    assert_lk(f->c, lk_lock_status(f->c, res, &info), LK_OK);
    assert_int_equal(info.locked, 1);

    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, &r), LK_RELEASED);
    assert_int_equal(r.holds, 0);
    assert_lk(f->c, lk_lock_status(f->c, res, &info), LK_OK);
    assert_int_equal(info.locked, 0);
    assert_true(info.last_token >= 1);
}

static void test_reentrant_same_token(void **state)
{
    lk_fixture *f = *state;
    lk_result r1, r2, r3;
    const char *res = res_name("reentrant");

    assert_lk(f->c, lk_acquire(f->c, res, "alice", 10000, 0, NULL, &r1), LK_ACQUIRED);
    assert_lk(f->c, lk_acquire(f->c, res, "alice", 10000, 0, NULL, &r2), LK_ACQUIRED);
    assert_lk(f->c, lk_acquire(f->c, res, "alice", 10000, 0, NULL, &r3), LK_ACQUIRED);
    assert_int_equal(r2.token, r1.token);
    assert_int_equal(r3.token, r1.token);
    assert_int_equal(r2.holds, 2);
    assert_int_equal(r3.holds, 3);

    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, &r1), LK_STILL_HELD);
    assert_int_equal(r1.holds, 2);
    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, &r1), LK_STILL_HELD);
    assert_int_equal(r1.holds, 1);
    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, &r1), LK_RELEASED);
    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, &r1), LK_NOT_OWNER);
}

static void test_reacquire_after_release_larger_token(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    const char *res = res_name("cycles");
    int64_t last = 0;

    for (int i = 0; i < 1000; i++) {
        const char *owner = (i % 2) ? "alice" : "bob";
        assert_lk(f->c, lk_acquire(f->c, res, owner, 10000, 0, NULL, &r), LK_ACQUIRED);
        assert_true(r.token > last);
        last = r.token;
        assert_lk(f->c, lk_release(f->c, res, owner, NULL, &r), LK_RELEASED);
    }
}

static void test_partial_release_keeps_lease(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    lk_lock_info before, after;
    const char *res = res_name("partial");

    assert_lk(f->c, lk_acquire(f->c, res, "alice", 60000, 0, NULL, &r), LK_ACQUIRED);
    assert_lk(f->c, lk_acquire(f->c, res, "alice", 60000, 0, NULL, &r), LK_ACQUIRED);
    /* Shorten the lease by hand: a partial release must not lengthen it again. */
    char key[256];
    snprintf(key, sizeof key, "fg:{%s}:lock", res);
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "PEXPIRE %s 20000", key), 1);
    assert_lk(f->c, lk_lock_status(f->c, res, &before), LK_OK);
    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, &r), LK_STILL_HELD);
    assert_lk(f->c, lk_lock_status(f->c, res, &after), LK_OK);
    assert_true(after.ttl_ms <= before.ttl_ms);
    assert_true(after.ttl_ms <= 20000);
    assert_int_equal(after.holds, 1);
    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, &r), LK_RELEASED);
}

static void test_renew(void **state)
{
    lk_fixture *f = *state;
    lk_result r, a;
    lk_lock_info info;
    const char *res = res_name("renew");

    assert_lk(f->c, lk_renew(f->c, res, "alice", 5000, NULL, &r), LK_NOT_OWNER);
    assert_lk(f->c, lk_acquire(f->c, res, "alice", 1000, 0, NULL, &a), LK_ACQUIRED);
    assert_lk(f->c, lk_renew(f->c, res, "alice", 60000, NULL, &r), LK_RENEWED);
    assert_int_equal(r.token, a.token);
    assert_int_equal(r.ttl_ms, 60000);
    assert_lk(f->c, lk_lock_status(f->c, res, &info), LK_OK);
    assert_true(info.ttl_ms > 1000);
    assert_lk(f->c, lk_renew(f->c, res, "bob", 60000, NULL, &r), LK_NOT_OWNER);
    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, &r), LK_RELEASED);
}

static void test_expiry_lets_next_owner_in(void **state)
{
    lk_fixture *f = *state;
    lk_result a, b, r;
    const char *res = res_name("expiry");

    assert_lk(f->c, lk_acquire(f->c, res, "alice", 150, 0, NULL, &a), LK_ACQUIRED);
    /* Wait for the lease to run out: loop on the condition, bounded. */
    int64_t deadline = th_now_ms() + 5000;
    lk_status st;
    while ((st = lk_acquire(f->c, res, "bob", 10000, 0, NULL, &b)) == LK_HELD &&
           th_now_ms() < deadline) {
        th_nap_ms(20);
    }
    assert_lk(f->c, st, LK_ACQUIRED);
    assert_true(b.token > a.token);
    /* Alice's late release and renew are refused and leave Bob's lock intact. */
    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, &r), LK_NOT_OWNER);
    assert_lk(f->c, lk_renew(f->c, res, "alice", 10000, NULL, &r), LK_NOT_OWNER);
    lk_lock_info info;
    assert_lk(f->c, lk_lock_status(f->c, res, &info), LK_OK);
    assert_int_equal(info.locked, 1);
    assert_int_equal(info.token, b.token);
    assert_lk(f->c, lk_release(f->c, res, "bob", NULL, &r), LK_RELEASED);
}

static void test_floor(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    const char *res = res_name("floor");

    assert_lk(f->c, lk_acquire(f->c, res, "alice", 10000, 5000, NULL, &r), LK_ACQUIRED);
    assert_int_equal(r.token, 5001);
    assert_int_equal(r.floor_raised, 1);
    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, &r), LK_RELEASED);
    /* A floor below the counter changes nothing. */
    assert_lk(f->c, lk_acquire(f->c, res, "alice", 10000, 10, NULL, &r), LK_ACQUIRED);
    assert_int_equal(r.token, 5002);
    assert_int_equal(r.floor_raised, 0);
    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, &r), LK_RELEASED);
}

/* lk_force_release: the hold is gone whoever held it, a token above it and the floor is
 * burned, the holder's token reads as superseded, and nothing held changes nothing. */
static void test_force_release(void **state)
{
    lk_fixture *f = *state;
    lk_result r, fr;
    lk_lock_info info;
    int64_t base = 0, last = 0;
    int recent = 0;
    const char *res = res_name("forced");

    assert_lk(f->c, lk_acquire(f->c, res, "alice", 10000, 0, NULL, &r), LK_ACQUIRED);
    assert_lk(f->c, lk_force_release(f->c, res, 0, &fr), LK_RELEASED);
    assert_int_equal(fr.token, r.token);
    assert_true(fr.fenced_by > r.token);
    assert_lk(f->c, lk_lock_status(f->c, res, &info), LK_OK);
    assert_int_equal(info.locked, 0);
    assert_int_equal(info.last_token, fr.fenced_by);
    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, NULL), LK_NOT_OWNER);
    assert_lk(f->c, lk_renew(f->c, res, "alice", 10000, NULL, NULL), LK_NOT_OWNER);
    assert_lk(f->c, lk_token_check(f->c, res, r.token, &base, &last, &recent), LK_OK);
    assert_true(r.token < last); /* superseded */
    assert_lk(f->c, lk_force_release(f->c, res, 0, &r), LK_NOT_OWNER);
    assert_int_equal(r.fenced_by, fr.fenced_by);
    assert_lk(f->c, lk_acquire(f->c, res, "bob", 10000, 0, NULL, &r), LK_ACQUIRED);
    assert_true(r.token > fr.fenced_by);
    /* The floor lifts the burned token. */
    assert_lk(f->c, lk_force_release(f->c, res, 90000, &fr), LK_RELEASED);
    assert_true(fr.fenced_by > 90000);
    assert_lk(f->c, lk_force_release(f->c, res, -1, &fr), LK_EINVAL);
    assert_lk(f->c, lk_force_release(f->c, "a b", 0, &fr), LK_EINVAL);
}

/* lk_list_locks: held locks in name order, paged, by prefix, never a free one. */
static void test_list_locks(void **state)
{
    lk_fixture *f = *state;
    lk_lock_entry e[4];
    size_t n = 0;
    char next[LK_RESOURCE_MAX + 1];
    char names[3][LK_RESOURCE_MAX + 1];
    char prefix[LK_RESOURCE_MAX + 1];

    snprintf(prefix, sizeof prefix, "%.100s.", res_name("listed")); /* one name per call */
    for (int i = 0; i < 3; i++) {
        snprintf(names[i], sizeof names[i], "%.100s%c", prefix, 'c' - i);
        assert_lk(f->c, lk_acquire(f->c, names[i], "alice", 10000, 0, NULL, NULL),
                  LK_ACQUIRED);
    }
    assert_lk(f->c, lk_list_locks(f->c, prefix, NULL, 2, e, &n, next), LK_OK);
    assert_int_equal(n, 2);
    assert_string_equal(e[0].resource, names[2]); /* ...a */
    assert_string_equal(e[1].resource, names[1]);
    assert_int_equal(e[0].holds, 1);
    assert_true(e[0].ttl_ms > 0 && e[0].token > 0);
    assert_string_equal(next, names[1]);
    assert_lk(f->c, lk_list_locks(f->c, prefix, next, 2, e, &n, next), LK_OK);
    assert_int_equal(n, 1);
    assert_string_equal(e[0].resource, names[0]);
    assert_string_equal(next, "");
    assert_lk(f->c, lk_release(f->c, names[1], "alice", NULL, NULL), LK_RELEASED);
    assert_lk(f->c, lk_list_locks(f->c, prefix, NULL, 4, e, &n, next), LK_OK);
    assert_int_equal(n, 2);
    assert_lk(f->c, lk_list_locks(f->c, prefix, NULL, 0, e, &n, next), LK_EINVAL);
    assert_lk(f->c, lk_list_locks(f->c, prefix, NULL, LK_LIST_MAX + 1, e, &n, next),
              LK_EINVAL);
    assert_lk(f->c, lk_list_locks(f->c, "a b", NULL, 4, e, &n, next), LK_EINVAL);
    assert_lk(f->c, lk_list_locks(f->c, NULL, "a*", 4, e, &n, next), LK_EINVAL);
}

static void test_token_space_limit(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    const char *res = res_name("limit");

    /* The largest floor gives the largest token, 2^53 - 1, exactly. */
    assert_lk(f->c, lk_acquire(f->c, res, "alice", 10000, LK_TOKEN_MAX - 1, NULL, &r),
              LK_ACQUIRED);
    assert_int_equal(r.token, LK_TOKEN_MAX);
    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, &r), LK_RELEASED);
    /* The next one would not fit in a double: an error, never a wrapped token. */
    assert_lk(f->c, lk_acquire(f->c, res, "alice", 10000, 0, NULL, &r), LK_EREDIS);
    assert_non_null(strstr(lk_errstr(f->c), "exhausted"));
    assert_lk(f->c, lk_acquire(f->c, res, "alice", 10000, LK_TOKEN_MAX, NULL, &r), LK_EINVAL);
}

static void test_fence_key_never_expires(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    const char *res = res_name("fence");
    char key[256];

    assert_lk(f->c, lk_acquire(f->c, res, "alice", 200, 0, NULL, &r), LK_ACQUIRED);
    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, &r), LK_RELEASED);
    snprintf(key, sizeof key, "fg:{%s}:fence", res);
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "PTTL %s", key), -1);
    snprintf(key, sizeof key, "fg:{%s}:lock", res);
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "EXISTS %s", key), 0);
}

/* A release publishes on the resource's channel only when somebody was answered held while
 * the lock was held (lua/prelude/wanted.lua), and only for the release to zero. A probe
 * published after each step shows, by arriving next, that nothing was published before it. */
static void test_release_publishes(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    const char *res = res_name("publish");
    char channel[256];
    struct timeval tv = {5, 0};

    assert_lk(f->c, lk_channel_name(res, channel, sizeof channel), LK_OK);
    redisContext *sub = redisConnectWithTimeout("127.0.0.1", f->redis.port, tv);
    assert_non_null(sub);
    assert_int_equal(sub->err, 0);
    redisSetTimeout(sub, tv);
    freeReplyObject(redisCommand(sub, "SUBSCRIBE %s", channel));

    /* Nobody waited: the release publishes nothing. */
    assert_lk(f->c, lk_acquire(f->c, res, "alice", 10000, 0, NULL, &r), LK_ACQUIRED);
    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, &r), LK_RELEASED);
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "PUBLISH %s probe1", channel), 1);
    lk_expect_message(sub, channel, "probe1");

    /* bob was answered held: the release to zero publishes, the partial one does not. */
    assert_lk(f->c, lk_acquire(f->c, res, "alice", 10000, 0, NULL, &r), LK_ACQUIRED);
    char alice_token[24];
    snprintf(alice_token, sizeof alice_token, "%lld", (long long)r.token);
    int64_t held_by = r.token;
    assert_lk(f->c, lk_acquire(f->c, res, "alice", 10000, 0, NULL, &r), LK_ACQUIRED);
    assert_lk(f->c, lk_acquire(f->c, res, "bob", 10000, 0, NULL, &r), LK_HELD);
    assert_int_equal(r.holder_token, held_by); /* the held answer names the hold it found */
    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, &r), LK_STILL_HELD);
    assert_int_equal(r.published, 0);
    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, &r), LK_RELEASED);
    assert_int_equal(r.published, 1);
    lk_expect_release(sub, channel, alice_token); /* the token of the hold released */
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "PUBLISH %s probe2", channel), 1);
    lk_expect_message(sub, channel, "probe2");

    /* The mark goes with the lock: bob's next grant starts unmarked. */
    assert_lk(f->c, lk_acquire(f->c, res, "bob", 10000, 0, NULL, &r), LK_ACQUIRED);
    assert_lk(f->c, lk_release(f->c, res, "bob", NULL, &r), LK_RELEASED);
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "PUBLISH %s probe3", channel), 1);
    lk_expect_message(sub, channel, "probe3");

    /* A grant whose caller knows of other waiters is marked at once. */
    lk_call call = {.kind = LK_CALL_ACQUIRE, .resource = res, .owner = "carol",
                    .lease_ms = 10000, .others_waiting = 1};
    lk_call *calls[] = {&call};
    lk_call_many(f->c, calls, 1);
    assert_lk(f->c, call.status, LK_ACQUIRED);
    char carol_token[24];
    snprintf(carol_token, sizeof carol_token, "%lld", (long long)call.res.token);
    assert_lk(f->c, lk_release(f->c, res, "carol", NULL, &r), LK_RELEASED);
    lk_expect_release(sub, channel, carol_token);
    redisFree(sub);
}

static void test_idempotent_release(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    const char *res = res_name("idem-release");

    for (int i = 0; i < 3; i++) {
        assert_lk(f->c, lk_acquire(f->c, res, "alice", 10000, 0, NULL, &r), LK_ACQUIRED);
    }
    assert_lk(f->c, lk_release(f->c, res, "alice", "rel-1", &r), LK_STILL_HELD);
    assert_int_equal(r.holds, 2);
    assert_int_equal(r.replayed, 0);
    /* The retry replays the first answer and decrements nothing. */
    assert_lk(f->c, lk_release(f->c, res, "alice", "rel-1", &r), LK_STILL_HELD);
    assert_int_equal(r.holds, 2);
    assert_int_equal(r.replayed, 1);
    lk_lock_info info;
    assert_lk(f->c, lk_lock_status(f->c, res, &info), LK_OK);
    assert_int_equal(info.holds, 2);
    /* Another owner cannot replay or reuse Alice's key. */
    assert_lk(f->c, lk_release(f->c, res, "bob", "rel-1", &r), LK_EIDEMPOTENCY);
    assert_lk(f->c, lk_release(f->c, res, "alice", "rel-2", &r), LK_STILL_HELD);
    assert_lk(f->c, lk_release(f->c, res, "alice", "rel-3", &r), LK_RELEASED);
    assert_lk(f->c, lk_release(f->c, res, "alice", "rel-3", &r), LK_RELEASED);
    assert_int_equal(r.replayed, 1);
    /* The key is per resource and kept for the retention window. */
    char key[256];
    snprintf(key, sizeof key, "fg:{%s}:idem:rel-3", res);
    long long pttl = th_redis_cmd(&f->redis, NULL, 0, "PTTL %s", key);
    assert_true(pttl > 590000 && pttl <= 600000);
}

static void test_idempotent_acquire(void **state)
{
    lk_fixture *f = *state;
    lk_result r1, r2, r;
    const char *res = res_name("idem-acquire");

    assert_lk(f->c, lk_acquire(f->c, res, "alice", 10000, 0, "acq-1", &r1), LK_ACQUIRED);
    assert_lk(f->c, lk_acquire(f->c, res, "alice", 10000, 0, "acq-1", &r2), LK_ACQUIRED);
    assert_int_equal(r2.token, r1.token);
    assert_int_equal(r2.holds, 1);
    assert_int_equal(r2.replayed, 1);
    lk_lock_info info;
    assert_lk(f->c, lk_lock_status(f->c, res, &info), LK_OK);
    assert_int_equal(info.holds, 1);
    assert_int_equal(info.last_token, r1.token);
    /* A key used for acquire cannot be replayed as a release. */
    assert_lk(f->c, lk_release(f->c, res, "alice", "acq-1", &r), LK_EIDEMPOTENCY);
    /* HELD is not recorded: a retry after the release may still acquire. */
    assert_lk(f->c, lk_acquire(f->c, res, "bob", 10000, 0, "acq-b", &r), LK_HELD);
    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, &r), LK_RELEASED);
    assert_lk(f->c, lk_acquire(f->c, res, "bob", 10000, 0, "acq-b", &r), LK_ACQUIRED);
    assert_true(r.token > r1.token);
    assert_lk(f->c, lk_release(f->c, res, "bob", NULL, &r), LK_RELEASED);
}

static void test_validation(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    lk_lock_info info;
    char long_res[LK_RESOURCE_MAX + 2];
    char long_owner[LK_OWNER_MAX + 2];

    memset(long_res, 'a', sizeof long_res - 1);
    long_res[sizeof long_res - 1] = '\0';
    memset(long_owner, 'o', sizeof long_owner - 1);
    long_owner[sizeof long_owner - 1] = '\0';

    assert_lk(f->c, lk_acquire(f->c, "", "alice", 1000, 0, NULL, &r), LK_EINVAL);
    assert_lk(f->c, lk_acquire(f->c, long_res, "alice", 1000, 0, NULL, &r), LK_EINVAL);
    long_res[LK_RESOURCE_MAX] = '\0';
    assert_lk(f->c, lk_acquire(f->c, long_res, "alice", 1000, 0, NULL, &r), LK_ACQUIRED);
    assert_lk(f->c, lk_release(f->c, long_res, "alice", NULL, &r), LK_RELEASED);
    assert_lk(f->c, lk_acquire(f->c, "a b", "alice", 1000, 0, NULL, &r), LK_EINVAL);
    assert_lk(f->c, lk_acquire(f->c, "a{b}", "alice", 1000, 0, NULL, &r), LK_EINVAL);
    assert_lk(f->c, lk_acquire(f->c, "x", long_owner, 1000, 0, NULL, &r), LK_EINVAL);
    assert_lk(f->c, lk_acquire(f->c, "x", "", 1000, 0, NULL, &r), LK_EINVAL);
    assert_lk(f->c, lk_acquire(f->c, "x", "al\xc3\xa9", 1000, 0, NULL, &r), LK_EINVAL);
    assert_lk(f->c, lk_acquire(f->c, "x", "alice", 99, 0, NULL, &r), LK_EINVAL);
    assert_lk(f->c, lk_acquire(f->c, "x", "alice", 3600001, 0, NULL, &r), LK_EINVAL);
    assert_lk(f->c, lk_acquire(f->c, "x", "alice", 1000, -1, NULL, &r), LK_EINVAL);
    assert_lk(f->c, lk_acquire(f->c, "x", "alice", 1000, 0, "bad key", &r), LK_EINVAL);
    assert_lk(f->c, lk_release(f->c, "x", "#token", NULL, &r), LK_EINVAL);
    assert_lk(f->c, lk_renew(f->c, "x", "alice", 50, NULL, &r), LK_EINVAL);
    assert_lk(f->c, lk_lock_status(f->c, "x/y", &info), LK_EINVAL);
    /* Nothing reached Redis. */
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "EXISTS fg:{x}:lock"), 0);
}

/* Runs a generated script (build/locklib/generated/lua: preludes + body) through EVAL,
 * bypassing the C checks, the way an operator with redis-cli could. */
static void eval_script_file(lk_fixture *f, const char *name, char *out, size_t outlen,
                             const char *fmt_args, const char *a1, const char *a2,
                             const char *a3, const char *a4, const char *a5, const char *a6,
                             const char *a7)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.lua", LOCKLIB_LUA_DIR, name);
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    char *text = calloc(1, 65536);
    size_t n = fread(text, 1, 65535, fp);
    fclose(fp);
    assert_true(n > 0);
    (void)fmt_args;
    th_redis_cmd(&f->redis, out, outlen, "EVAL %s 3 %s %s %s %s %s %s %s", text, a1, a2, a3, a4,
                 a5, a6, a7);
    free(text);
}

static void test_internal_field_name_cannot_corrupt(void **state)
{
    lk_fixture *f = *state;
    lk_result r, r2;
    lk_lock_info info;
    char out[256];
    const char *res = res_name("internal");
    char lock[256], fence[256], idem[256];

    snprintf(lock, sizeof lock, "fg:{%s}:lock", res);
    snprintf(fence, sizeof fence, "fg:{%s}:fence", res);
    snprintf(idem, sizeof idem, "fg:{%s}:idem:", res);
    assert_lk(f->c, lk_acquire(f->c, res, "alice", 10000, 0, NULL, &r), LK_ACQUIRED);
    /* Through the API: refused before Redis. */
    assert_lk(f->c, lk_acquire(f->c, res, "#token", 10000, 0, NULL, &r2), LK_EINVAL);
    assert_lk(f->c, lk_release(f->c, res, "#token", NULL, &r2), LK_EINVAL);
    /* Straight to the scripts: refused by the script itself. */
    eval_script_file(f, "acquire", out, sizeof out, "", lock, fence, idem, "#token", "10000",
                     "0", "0");
    assert_non_null(strstr(out, "invalid owner"));
    eval_script_file(f, "release", out, sizeof out, "", lock, idem, fence, "#token", "0", "ch",
                     "x");
    assert_non_null(strstr(out, "invalid owner"));
    assert_lk(f->c, lk_lock_status(f->c, res, &info), LK_OK);
    assert_int_equal(info.locked, 1);
    assert_int_equal(info.token, r.token);
    assert_int_equal(info.holds, 1);
    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, &r), LK_RELEASED);
}

typedef struct race_arg {
    const char *url;
    const char *resource;
    char owner[16];
    int *shared_inside;   /* how many threads believe they hold the lock */
    int *violations;
    int acquired;         /* this thread's successful acquisitions */
    pthread_mutex_t *mu;
} race_arg;

static void *race_worker(void *p)
{
    race_arg *a = p;
    lk_client *c = NULL;
    lk_result r;
    lk_client_open(&c, a->url, NULL);
    for (int i = 0; i < 300; i++) {
        if (lk_acquire(c, a->resource, a->owner, 10000, 0, NULL, &r) != LK_ACQUIRED) {
            continue;
        }
        a->acquired++;
        pthread_mutex_lock(a->mu);
        if (++*a->shared_inside != 1) {
            ++*a->violations;
        }
        pthread_mutex_unlock(a->mu);
        /* While we believe we hold it, Redis must agree: our token, one hold. */
        lk_lock_info info;
        if (lk_lock_status(c, a->resource, &info) != LK_OK || !info.locked ||
            info.token != r.token || info.holds != 1) {
            pthread_mutex_lock(a->mu);
            ++*a->violations;
            pthread_mutex_unlock(a->mu);
        }
        pthread_mutex_lock(a->mu);
        --*a->shared_inside;
        pthread_mutex_unlock(a->mu);
        lk_release(c, a->resource, a->owner, NULL, &r);
    }
    lk_client_close(c);
    return NULL;
}

static void test_two_threads_never_both_hold(void **state)
{
    lk_fixture *f = *state;
    pthread_t t[2];
    race_arg args[2];
    int inside = 0, violations = 0;
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    const char *res = res_name("race");

    for (int i = 0; i < 2; i++) {
        memset(&args[i], 0, sizeof args[i]);
        args[i].url = f->redis.url;
        args[i].resource = res;
        snprintf(args[i].owner, sizeof args[i].owner, "owner-%d", i);
        args[i].shared_inside = &inside;
        args[i].violations = &violations;
        args[i].mu = &mu;
        pthread_create(&t[i], NULL, race_worker, &args[i]);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
    }
    assert_int_equal(violations, 0);
    /* Both really competed: the test means nothing if one thread never got in. */
    assert_true(args[0].acquired > 0);
    assert_true(args[1].acquired > 0);
}

static void test_owner_ids(void **state)
{
    lk_fixture *f = *state;
    char a[LK_OWNER_ID_LEN + 1], b[LK_OWNER_ID_LEN + 1], x[33], y[33];

    lk_owner_id(f->c, a);
    lk_owner_id(f->c, b);
    assert_string_equal(a, b); /* same handle, same thread */
    assert_true(lk_valid_owner(a));
    assert_non_null(strchr(a, ':'));
    assert_int_equal(strchr(a, ':') - a, 32);
    lk_random_id(x);
    lk_random_id(y);
    assert_int_equal(strlen(x), 32);
    assert_string_not_equal(x, y);
    assert_true(lk_valid_owner(x));

    lk_client *other = lk_test_open(&f->redis, NULL);
    lk_owner_id(other, b);
    assert_string_not_equal(a, b); /* another handle, another random id */
    lk_client_close(other);
}

static void *owner_id_thread(void *p)
{
    void **args = p;
    lk_owner_id((const lk_client *)args[0], (char *)args[1]);
    return NULL;
}

/* Two threads of one handle get different owner ids: same handle id, other thread number. */
static void test_owner_ids_differ_between_threads(void **state)
{
    lk_fixture *f = *state;
    char mine[LK_OWNER_ID_LEN + 1], theirs[2][LK_OWNER_ID_LEN + 1];
    pthread_t t[2];
    void *args[2][2] = {{f->c, theirs[0]}, {f->c, theirs[1]}};

    lk_owner_id(f->c, mine);
    for (int i = 0; i < 2; i++) {
        pthread_create(&t[i], NULL, owner_id_thread, args[i]);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
    }
    assert_string_not_equal(mine, theirs[0]);
    assert_string_not_equal(mine, theirs[1]);
    assert_string_not_equal(theirs[0], theirs[1]);
    for (int i = 0; i < 2; i++) {
        assert_true(lk_valid_owner(theirs[i]));
        assert_memory_equal(mine, theirs[i], 33); /* "<handle id>:" */
    }
}

/* The watchdog lease is 30 s unless configured, as in Redisson. */
static void test_default_watchdog_lease(void **state)
{
    lk_fixture *f = *state;
    lk_options o;
    lk_client *c = NULL;
    lk_lock_info info;
    lk_result r;
    const char *res = res_name("default-lease");

    lk_options_init(&o);
    assert_int_equal(o.watchdog_lease_ms, 30000);
    assert_int_equal(lk_client_open(&c, f->redis.url, NULL), LK_OK);
    assert_lk(c, lk_acquire(c, res, "alice", LK_LEASE_WATCHDOG, 0, NULL, &r), LK_ACQUIRED);
    assert_int_equal(r.ttl_ms, 30000);
    assert_lk(f->c, lk_lock_status(f->c, res, &info), LK_OK);
    assert_true(info.ttl_ms > 20000 && info.ttl_ms <= 30000);
    assert_lk(c, lk_release(c, res, "alice", NULL, &r), LK_RELEASED);
    lk_client_close(c);
}

/* An acquire's idempotency key replayed by another owner is refused, held or not, and
 * neither adds a hold nor mints a token. */
static void test_idempotent_acquire_other_owner(void **state)
{
    lk_fixture *f = *state;
    lk_result r1, r;
    lk_lock_info info;
    const char *res = res_name("idem-other");

    assert_lk(f->c, lk_acquire(f->c, res, "alice", 10000, 0, "acq-x", &r1), LK_ACQUIRED);
    assert_lk(f->c, lk_acquire(f->c, res, "bob", 10000, 0, "acq-x", &r), LK_EIDEMPOTENCY);
    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, &r), LK_RELEASED);
    /* Free now, and still Alice's key. */
    assert_lk(f->c, lk_acquire(f->c, res, "bob", 10000, 0, "acq-x", &r), LK_EIDEMPOTENCY);
    assert_lk(f->c, lk_acquire_fair(f->c, res, "bob", 10000, 0, "acq-x", 1000, &r),
              LK_EIDEMPOTENCY);
    assert_lk(f->c, lk_lock_status(f->c, res, &info), LK_OK);
    assert_int_equal(info.locked, 0);
    assert_int_equal(info.last_token, r1.token);
}

/* The limits are inclusive: a 100 ms and a one-hour lease and a 128-byte owner are taken;
 * one past each is refused before Redis sees it. */
static void test_limits_are_inclusive(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    lk_lock_info info;
    char owner[LK_OWNER_MAX + 2];
    const char *res = res_name("limits");

    assert_lk(f->c, lk_acquire(f->c, res, "alice", LK_LEASE_MAX_MS, 0, NULL, &r), LK_ACQUIRED);
    assert_int_equal(r.ttl_ms, 3600000);
    assert_lk(f->c, lk_lock_status(f->c, res, &info), LK_OK);
    assert_true(info.ttl_ms > 3500000);
    assert_lk(f->c, lk_renew(f->c, res, "alice", 3600001, NULL, &r), LK_EINVAL);
    assert_lk(f->c, lk_renew(f->c, res, "alice", 99, NULL, &r), LK_EINVAL);
    assert_lk(f->c, lk_renew(f->c, res, "alice", LK_LEASE_MAX_MS, NULL, &r), LK_RENEWED);
    assert_int_equal(r.ttl_ms, 3600000);
    /* Renewed down to 100 ms, the lease then really runs out. */
    assert_lk(f->c, lk_renew(f->c, res, "alice", LK_LEASE_MIN_MS, NULL, &r), LK_RENEWED);
    assert_int_equal(r.ttl_ms, 100);
    int64_t deadline = th_now_ms() + 5000;
    do {
        assert_lk(f->c, lk_lock_status(f->c, res, &info), LK_OK);
    } while (info.locked && th_now_ms() < deadline && (th_nap_ms(10), 1));
    assert_int_equal(info.locked, 0);
    assert_lk(f->c, lk_acquire(f->c, res, "alice", LK_LEASE_MIN_MS, 0, NULL, &r), LK_ACQUIRED);
    assert_int_equal(r.ttl_ms, 100);
    deadline = th_now_ms() + 5000;
    do {
        assert_lk(f->c, lk_lock_status(f->c, res, &info), LK_OK);
    } while (info.locked && th_now_ms() < deadline && (th_nap_ms(10), 1));
    assert_int_equal(info.locked, 0);
    assert_lk(f->c, lk_acquire(f->c, res, "alice", 99, 0, NULL, &r), LK_EINVAL);
    assert_lk(f->c, lk_acquire(f->c, res, "alice", 3600001, 0, NULL, &r), LK_EINVAL);

    memset(owner, 'o', LK_OWNER_MAX);
    owner[LK_OWNER_MAX] = '\0';
    assert_int_equal(strlen(owner), 128);
    assert_lk(f->c, lk_acquire(f->c, res, owner, 10000, 0, owner, &r), LK_ACQUIRED);
    assert_lk(f->c, lk_renew(f->c, res, owner, 10000, NULL, &r), LK_RENEWED);
    assert_lk(f->c, lk_release(f->c, res, owner, NULL, &r), LK_RELEASED);
    owner[LK_OWNER_MAX] = 'o';
    owner[LK_OWNER_MAX + 1] = '\0';
    assert_int_equal(strlen(owner), 129);
    assert_lk(f->c, lk_acquire(f->c, res, owner, 10000, 0, NULL, &r), LK_EINVAL);
    assert_lk(f->c, lk_acquire(f->c, res, "alice", 10000, 0, owner, &r), LK_EINVAL);
    assert_lk(f->c, lk_release(f->c, res, owner, NULL, &r), LK_EINVAL);
    assert_lk(f->c, lk_lock_status(f->c, res, &info), LK_OK);
    assert_int_equal(info.locked, 0);
}

static void test_status_names(void **state)
{
    (void)state;
    assert_string_equal(lk_status_name(LK_ACQUIRED), "ACQUIRED");
    assert_string_equal(lk_status_name(LK_EUNAVAILABLE), "EUNAVAILABLE");
    assert_string_equal(lk_status_name((lk_status)999), "UNKNOWN");
    for (int i = 0; i < LK_STATUS_COUNT; i++) {
        assert_true(strlen(lk_status_str((lk_status)i)) > 0);
    }
    assert_string_equal(lk_version(), FENCEGATE_VERSION);
}

static void test_bad_urls(void **state)
{
    (void)state;
    lk_client *c = NULL;
    const char *bad[] = {"http://x", "redis://", "redis://host:0", "redis://host:99999",
                         "redis://host/db", "unix://relative", "redis://user@host"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(lk_client_open(&c, bad[i], NULL), LK_EINVAL);
        assert_null(c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_acquire_release_basic),
        cmocka_unit_test(test_reentrant_same_token),
        cmocka_unit_test(test_reacquire_after_release_larger_token),
        cmocka_unit_test(test_partial_release_keeps_lease),
        cmocka_unit_test(test_renew),
        cmocka_unit_test(test_expiry_lets_next_owner_in),
        cmocka_unit_test(test_floor),
        cmocka_unit_test(test_token_space_limit),
        cmocka_unit_test(test_fence_key_never_expires),
        cmocka_unit_test(test_release_publishes),
        cmocka_unit_test(test_idempotent_release),
        cmocka_unit_test(test_idempotent_acquire),
        cmocka_unit_test(test_validation),
        cmocka_unit_test(test_internal_field_name_cannot_corrupt),
        cmocka_unit_test(test_two_threads_never_both_hold),
        cmocka_unit_test(test_owner_ids),
        cmocka_unit_test(test_owner_ids_differ_between_threads),
        cmocka_unit_test(test_default_watchdog_lease),
        cmocka_unit_test(test_idempotent_acquire_other_owner),
        cmocka_unit_test(test_limits_are_inclusive),
        cmocka_unit_test(test_status_names),
        cmocka_unit_test(test_force_release),
        cmocka_unit_test(test_list_locks),
        cmocka_unit_test(test_bad_urls),
    };
    return cmocka_run_group_tests_name("locklib_locks", tests, group_setup, lk_group_teardown);
}
