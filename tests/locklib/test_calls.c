/* locklib: lk_call_many(), calls pipelined on one connection, against a real redis-server
 * started by the group setup: each call's answer is the one its single-call function would
 * give, in array order, through a flushed script cache and a stalled Redis. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lk_test.h"

static int group_setup(void **state)
{
    return lk_group_setup_aof(state, 0);
}

static lk_call make(lk_call_kind kind, const char *resource, const char *owner)
{
    lk_call c = {.kind = kind, .resource = resource, .owner = owner, .lease_ms = 10000};
    return c;
}

#define assert_call(call, want)                                                            \
    do {                                                                                   \
        if ((call).status != (want)) {                                                     \
            print_error("%s:%d: %s got %s, want %s (%s)\n", __FILE__, __LINE__,            \
                        (call).resource, lk_status_name((call).status),                    \
                        lk_status_name(want), (call).err);                                 \
            fail();                                                                        \
        }                                                                                  \
    } while (0)

/* One batch that acquires, collides, renews, releases and re-acquires one resource, and
 * touches two others, with an invalid call in the middle: every call gets its own answer,
 * in order, and the invalid one stops nothing. */
static void test_call_many_answers_each_call_in_order(void **state)
{
    lk_fixture *f = *state;
    char a[64], b[64], q[64];
    snprintf(a, sizeof a, "%s", res_name("many-a"));
    snprintf(b, sizeof b, "%s", res_name("many-b"));
    snprintf(q, sizeof q, "%s", res_name("many-q"));
    lk_call calls[] = {
        make(LK_CALL_ACQUIRE, a, "alice"),  make(LK_CALL_ACQUIRE, a, "bob"),
        make(LK_CALL_RENEW, a, "alice"),    make(LK_CALL_ACQUIRE, "bad name", "carol"),
        make(LK_CALL_ACQUIRE, b, "carol"),  make(LK_CALL_RELEASE, a, "alice"),
        make(LK_CALL_ACQUIRE, a, "bob"),    make(LK_CALL_ACQUIRE_FAIR, q, "dave"),
        make(LK_CALL_ACQUIRE_FAIR, q, "erin"),
    };
    size_t n = sizeof calls / sizeof calls[0];
    lk_call *ptrs[sizeof calls / sizeof calls[0]];
    calls[7].wait_ms = calls[8].wait_ms = 5000;
    for (size_t i = 0; i < n; i++) {
        ptrs[i] = &calls[i];
    }
    lk_call_many(f->c, ptrs, n);

    assert_call(calls[0], LK_ACQUIRED);
    assert_call(calls[1], LK_HELD);
    assert_true(calls[1].res.ttl_ms > 0);
    assert_call(calls[2], LK_RENEWED);
    assert_int_equal(calls[2].res.token, calls[0].res.token);
    assert_call(calls[3], LK_EINVAL);
    assert_non_null(strstr(calls[3].err, "invalid resource"));
    assert_call(calls[4], LK_ACQUIRED);
    assert_call(calls[5], LK_RELEASED);
    assert_call(calls[6], LK_ACQUIRED);
    assert_true(calls[6].res.token > calls[0].res.token);
    assert_call(calls[7], LK_ACQUIRED);
    assert_call(calls[8], LK_HELD);
    assert_int_equal(calls[8].res.queue_pos, 0);
    for (size_t i = 0; i < n; i++) {
        if (calls[i].status < LK_EINVAL) {
            assert_string_equal(calls[i].err, "");
        }
    }

    /* What Redis holds agrees with the answers. */
    lk_lock_info info;
    assert_lk(f->c, lk_lock_status(f->c, a, &info), LK_OK);
    assert_int_equal(info.locked, 1);
    assert_int_equal(info.token, calls[6].res.token);
    lk_result r;
    assert_lk(f->c, lk_release(f->c, a, "alice", NULL, &r), LK_NOT_OWNER);
    assert_lk(f->c, lk_release(f->c, a, "bob", NULL, &r), LK_RELEASED);
}

/* After SCRIPT FLUSH every call of a batch answers NOSCRIPT: each is sent again once the
 * scripts are loaded, and each runs exactly once. */
static void test_call_many_survives_a_flushed_script_cache(void **state)
{
    lk_fixture *f = *state;
    char names[4][64];
    lk_call calls[4];
    lk_call *ptrs[4];
    for (int i = 0; i < 4; i++) {
        snprintf(names[i], sizeof names[i], "%s", res_name("flushed"));
        calls[i] = make(LK_CALL_ACQUIRE, names[i], "alice");
        ptrs[i] = &calls[i];
    }
    th_redis_cmd(&f->redis, NULL, 0, "SCRIPT FLUSH");
    lk_call_many(f->c, ptrs, 4);
    for (int i = 0; i < 4; i++) {
        assert_call(calls[i], LK_ACQUIRED);
        assert_int_equal(calls[i].res.holds, 1); /* ran once, not twice */
        calls[i].kind = LK_CALL_RELEASE;
    }
    th_redis_cmd(&f->redis, NULL, 0, "SCRIPT FLUSH");
    lk_call_many(f->c, ptrs, 4);
    for (int i = 0; i < 4; i++) {
        assert_call(calls[i], LK_RELEASED);
    }
}

/* Redis stalls (CLIENT PAUSE) past the command timeout with a batch in flight: every call
 * gets EUNAVAILABLE (each may have run), the connection is replaced, and retries with the
 * same idempotency keys act once. */
static void test_call_many_stall_is_unavailable_and_retry_replays(void **state)
{
    lk_fixture *f = *state;
    char names[3][64], keys[3][32];
    lk_call calls[3];
    lk_call *ptrs[3];
    for (int i = 0; i < 3; i++) {
        snprintf(names[i], sizeof names[i], "%s", res_name("stalled"));
        snprintf(keys[i], sizeof keys[i], "key-%d", i);
        calls[i] = make(LK_CALL_ACQUIRE, names[i], "alice");
        calls[i].idem_key = keys[i];
        ptrs[i] = &calls[i];
    }
    /* Pauses every client but this command's own connection for 2 s; the timeout is 1 s. */
    th_redis_cmd(&f->redis, NULL, 0, "CLIENT PAUSE 2000 ALL");
    lk_call_many(f->c, ptrs, 3);
    for (int i = 0; i < 3; i++) {
        assert_call(calls[i], LK_EUNAVAILABLE);
        assert_true(calls[i].err[0] != '\0');
    }
    th_redis_cmd(&f->redis, NULL, 0, "CLIENT UNPAUSE");

    /* Whether the paused scripts ran depends on when Redis noticed the dropped connection;
     * either way a retry on a new connection acts once: one hold each. */
    int64_t deadline = th_now_ms() + 10000;
    do {
        lk_call_many(f->c, ptrs, 3);
    } while (calls[0].status == LK_EUNAVAILABLE && th_now_ms() < deadline &&
             (th_nap_ms(20), 1));
    for (int i = 0; i < 3; i++) {
        assert_call(calls[i], LK_ACQUIRED);
        assert_int_equal(calls[i].res.holds, 1);
    }
}

/* supersede, for both acquire kinds: a keyed record answering exactly the superseded token is
 * dropped, so the call mints afresh (a larger token, with the floor above the old one) and a
 * plain retry of the key then replays the new answer; a record answering another token is
 * replayed as usual; a superseding call that finds the lock held leaves the key unrecorded. */
static void test_call_supersedes_a_refused_idempotency_record(void **state)
{
    lk_fixture *f = *state;
    lk_call_kind kinds[2] = {LK_CALL_ACQUIRE, LK_CALL_ACQUIRE_FAIR};

    for (int k = 0; k < 2; k++) {
        char r[64], idem[160];
        snprintf(r, sizeof r, "%s", res_name(k == 0 ? "supersede" : "supersede-fair"));
        snprintf(idem, sizeof idem, "fg:{%s}:idem:key-supersede-0001", r);
        lk_call c = make(kinds[k], r, "alice");
        lk_call *p = &c;
        c.idem_key = "key-supersede-0001";
        c.wait_ms = 1000;
        lk_call_many(f->c, &p, 1);
        assert_call(c, LK_ACQUIRED);
        int64_t refused = c.res.token;
        lk_result ignored;
        assert_lk(f->c, lk_release(f->c, r, "alice", NULL, &ignored), LK_RELEASED);

        c.supersede = refused + 7; /* another token: the record is replayed */
        lk_call_many(f->c, &p, 1);
        assert_call(c, LK_ACQUIRED);
        assert_int_equal(c.res.token, refused);
        assert_int_equal(c.res.replayed, 1);

        /* Held by another owner: the superseded record is dropped, nothing recorded. */
        lk_result held;
        assert_lk(f->c, lk_acquire(f->c, r, "bob", 10000, 0, NULL, &held), LK_ACQUIRED);
        c.supersede = refused;
        lk_call_many(f->c, &p, 1);
        assert_call(c, LK_HELD);
        assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "EXISTS %s", idem), 0);
        assert_lk(f->c, lk_release(f->c, r, "bob", NULL, &ignored), LK_RELEASED);
        if (kinds[k] == LK_CALL_ACQUIRE_FAIR) {
            assert_lk(f->c, lk_fair_cancel(f->c, r, "alice"), LK_OK);
        }

        c.floor = held.token + 100; /* the caller lifts the floor above the refused token */
        lk_call_many(f->c, &p, 1);
        assert_call(c, LK_ACQUIRED);
        assert_int_equal(c.res.replayed, 0);
        int64_t fresh = c.res.token;
        assert_true(fresh > held.token + 100);

        c.supersede = 0; /* a plain retry replays the new answer */
        lk_call_many(f->c, &p, 1);
        assert_call(c, LK_ACQUIRED);
        assert_int_equal(c.res.token, fresh);
        assert_int_equal(c.res.replayed, 1);
        c.supersede = -1;
        lk_call_many(f->c, &p, 1);
        assert_call(c, LK_EINVAL);
    }
}

/* Every call refused before sending (bad names, a bad lease, an unknown kind) is answered
 * EINVAL with a reason, and nothing reaches Redis. */
static void test_call_many_refuses_bad_calls(void **state)
{
    lk_fixture *f = *state;
    lk_call calls[] = {
        make(LK_CALL_ACQUIRE, "ok-name", "bad owner"),
        make(LK_CALL_RENEW, "ok-name", "alice"),
        make(LK_CALL_RELEASE, "", "alice"),
        make((lk_call_kind)99, "ok-name", "alice"),
    };
    lk_call *ptrs[4];
    calls[1].lease_ms = 0;
    for (int i = 0; i < 4; i++) {
        ptrs[i] = &calls[i];
    }
    lk_call_many(f->c, ptrs, 4);
    for (int i = 0; i < 4; i++) {
        assert_call(calls[i], LK_EINVAL);
        assert_true(calls[i].err[0] != '\0');
    }
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "EXISTS fg:{ok-name}:lock"), 0);
    lk_call_many(f->c, ptrs, 0); /* an empty batch is a no-op */
}

/* With min_replicas and no replica, each acquisition of a batch is answered as lk_acquire()
 * would: EREPLICAS, and rolled back, every one (each WAIT on its own live connection). */
static void test_call_many_with_replicas_rolls_each_back(void **state)
{
    lk_fixture *f = *state;
    lk_client *c = open_with_replicas(f);
    char names[3][64];
    lk_call calls[3];
    lk_call *ptrs[3];
    for (int i = 0; i < 3; i++) {
        snprintf(names[i], sizeof names[i], "%s", res_name("replicas"));
        calls[i] = make(LK_CALL_ACQUIRE, names[i], "alice");
        ptrs[i] = &calls[i];
    }
    lk_call_many(c, ptrs, 3);
    for (int i = 0; i < 3; i++) {
        lk_lock_info info;
        assert_call(calls[i], LK_EREPLICAS);
        assert_non_null(strstr(calls[i].err, "rolled back"));
        assert_lk(f->c, lk_lock_status(f->c, names[i], &info), LK_OK);
        assert_int_equal(info.locked, 0);
    }
    lk_client_close(c);
}

/* A keyed acquisition rolled back for want of replicas leaves no idempotency record: its
 * retry acts afresh (rolled back again here), where it replayed ACQUIRED before, skipping
 * the WAIT, for a lock nobody held (the rollback had released it). (An acquisition undone
 * because the watchdog cannot start goes through the same undo_acquisition(); no test makes
 * the watchdog fail to start.) */
static void test_rolled_back_acquisition_is_not_replayed(void **state)
{
    lk_fixture *f = *state;
    lk_client *c = open_with_replicas(f);
    char name[64];
    snprintf(name, sizeof name, "%s", res_name("rollback-key"));
    lk_result r;
    lk_lock_info info;

    for (int attempt = 0; attempt < 2; attempt++) {
        lk_status st = lk_acquire(c, name, "alice", 10000, 0, "key-1", &r);
        print_message("attempt %d with the key: %s (replayed %d)\n", attempt,
                      lk_status_name(st), r.replayed);
        assert_lk(c, st, LK_EREPLICAS);
        assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "EXISTS fg:{%s}:idem:key-1", name), 0);
        assert_lk(f->c, lk_lock_status(f->c, name, &info), LK_OK);
        assert_int_equal(info.locked, 0);
    }
    /* Another owner takes the lock: the key's retry must not report alice as its holder. */
    assert_lk(f->c, lk_acquire(f->c, name, "bob", 10000, 0, NULL, &r), LK_ACQUIRED);
    assert_lk(c, lk_acquire(c, name, "alice", 10000, 0, "key-1", &r), LK_HELD);
    lk_client_close(c);
}

/* alice's acquisition of name with the key "key-w", fair or not. */
static lk_status acquire_key(lk_client *c, int fair, const char *name, lk_result *r)
{
    return fair ? lk_acquire_fair(c, name, "alice", 10000, 0, "key-w", 0, r)
                : lk_acquire(c, name, "alice", 10000, 0, "key-w", r);
}

/* A replay writes (its record's op field, unchanged) only for a caller that WAITs after
 * it, so that the WAIT covers the first answer's writes (acquire_replay in
 * lua/prelude/mint.lua); a replay for a caller without min_replicas stays a read. Both
 * kinds of acquisition, plain and fair. */
static void test_replay_writes_only_before_a_wait(void **state)
{
    lk_fixture *f = *state;
    lk_client *c = open_with_replicas(f);
    for (int fair = 0; fair < 2; fair++) {
        char name[64];
        snprintf(name, sizeof name, "%s", res_name("replay-write"));
        lk_result r;

        assert_lk(f->c, acquire_key(f->c, fair, name, &r), LK_ACQUIRED);
        long long before = hset_calls(&f->redis);
        assert_lk(f->c, acquire_key(f->c, fair, name, &r), LK_ACQUIRED);
        assert_int_equal(r.replayed, 1);
        assert_int_equal(hset_calls(&f->redis), before);
        /* The fixture's Redis has no replica: the replay's WAIT fails and it is undone. */
        assert_lk(c, acquire_key(c, fair, name, &r), LK_EREPLICAS);
        assert_true(hset_calls(&f->redis) > before);
    }
    lk_client_close(c);
}

/* A stale record: alice's keyed hold ended, and she took the lock again afresh (a larger
 * token). A retry of the old key replays the old grant, and its WAIT fails: undoing it
 * drops the record but leaves the later hold alone (release.lua ARGV[4]). Before, the undo
 * released whatever hold alice had, and the lock went to the next caller while she worked. */
static void test_undone_replay_leaves_a_later_hold(void **state)
{
    lk_fixture *f = *state;
    lk_client *c = open_with_replicas(f);
    char name[64];
    snprintf(name, sizeof name, "%s", res_name("stale-replay"));
    lk_result r;
    lk_lock_info info;

    assert_lk(f->c, lk_acquire(f->c, name, "alice", 10000, 0, "key-old", &r), LK_ACQUIRED);
    int64_t first = r.token;
    assert_lk(f->c, lk_release(f->c, name, "alice", NULL, &r), LK_RELEASED);
    assert_lk(f->c, lk_acquire(f->c, name, "alice", 10000, 0, NULL, &r), LK_ACQUIRED);
    int64_t later = r.token;
    assert_true(later > first);

    assert_lk(c, lk_acquire(c, name, "alice", 10000, 0, "key-old", &r), LK_EREPLICAS);
    assert_lk(f->c, lk_lock_status(f->c, name, &info), LK_OK);
    assert_int_equal(info.locked, 1);
    assert_int_equal(info.token, later);
    assert_int_equal(info.holds, 1);
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "EXISTS fg:{%s}:idem:key-old", name), 0);
    lk_client_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_call_many_answers_each_call_in_order),
        cmocka_unit_test(test_call_many_survives_a_flushed_script_cache),
        cmocka_unit_test(test_call_many_stall_is_unavailable_and_retry_replays),
        cmocka_unit_test(test_call_many_refuses_bad_calls),
        cmocka_unit_test(test_call_supersedes_a_refused_idempotency_record),
        cmocka_unit_test(test_call_many_with_replicas_rolls_each_back),
        cmocka_unit_test(test_rolled_back_acquisition_is_not_replayed),
        cmocka_unit_test(test_replay_writes_only_before_a_wait),
        cmocka_unit_test(test_undone_replay_leaves_a_later_hold),
    };
    return cmocka_run_group_tests(tests, group_setup, lk_group_teardown);
}
