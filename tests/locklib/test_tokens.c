/* locklib: what a replayed acquire or renew reports, and the range of tokens issued for a
 * resource (lk_token_range), against a real redis-server started by the group setup. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "lk_test.h"

static int group_setup(void **state)
{
    return lk_group_setup_aof(state, 0);
}

static void assert_range(lk_fixture *f, const char *res, int64_t want_base, int64_t want_last)
{
    int64_t base = -1, last = -1;
    assert_lk(f->c, lk_token_range(f->c, res, &base, &last), LK_OK);
    assert_int_equal(base, want_base);
    assert_int_equal(last, want_last);
}

/* The PTTL of fg:{res}:name in ms (-1: no expiry, -2: no key). */
static long long key_pttl(lk_fixture *f, const char *res, const char *name)
{
    return th_redis_cmd(&f->redis, NULL, 0, "PTTL fg:{%s}:%s", res, name);
}

/* When the key fg:{res}:name expires, in ms since the epoch (PEXPIRETIME); -1 for never,
 * -2 when missing. */
static long long key_expires_at(lk_fixture *f, const char *res, const char *name)
{
    return th_redis_cmd(&f->redis, NULL, 0, "PEXPIRETIME fg:{%s}:%s", res, name);
}

/* A handle whose token keys expire after idle_ms. */
static lk_client *open_idle(lk_fixture *f, int64_t idle_ms)
{
    lk_options o;
    lk_options_init(&o);
    o.connect_timeout_ms = 1000;
    o.command_timeout_ms = 1000;
    o.token_key_idle_ttl_ms = idle_ms;
    return lk_test_open(&f->redis, &o);
}

/* A time to live the scripts set is this fraction longer than needed (prelude/idle.lua). */
#define IDLE_SLACK_DIV 24

/* Asserts that fence, base and recent of res expire within (0, max_ms + the slack]. */
static void assert_keys_expire(lk_fixture *f, const char *res, long long max_ms)
{
    const char *names[] = {"fence", "base", "recent"};
    long long most = max_ms + max_ms / IDLE_SLACK_DIV;
    for (size_t i = 0; i < 3; i++) {
        long long pttl = key_pttl(f, res, names[i]);
        if (pttl <= 0 || pttl > most) {
            print_error("fg:{%s}:%s has PTTL %lld, want 1..%lld\n", res, names[i], pttl,
                        most);
            fail();
        }
    }
}

/* With token_key_idle_ttl_ms, every grant (plain, fair, re-entry) and renewal gives the token
 * keys a time to live of at least max(option, lease), setting it with a slack when it falls
 * short so that the grants right after write nothing (never shortening a longer one); the
 * default, 0, leaves them without one, and a handle with 0 makes expiring keys persistent
 * again. */
static void test_token_keys_get_idle_ttl(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    char res[64], res2[64];
    lk_client *c = open_idle(f, 60000);

    snprintf(res, sizeof res, "%s", res_name("idle-ttl"));
    snprintf(res2, sizeof res2, "%s", res_name("idle-ttl-fair"));
    /* A floor, so the lift writes base too. */
    assert_lk(c, lk_acquire(c, res, "alice", 1000, 7, NULL, &r), LK_ACQUIRED);
    assert_keys_expire(f, res, 60000);
    assert_true(key_pttl(f, res, "fence") > 60000);
    assert_lk(c, lk_release(c, res, "alice", NULL, &r), LK_RELEASED);
    /* The slack: the next grant finds the keys long enough and writes no expiry. */
    long long at = key_expires_at(f, res, "fence");
    assert_lk(c, lk_acquire(c, res, "alice", 1000, 7, NULL, &r), LK_ACQUIRED);
    assert_int_equal(key_expires_at(f, res, "fence"), at);
    assert_lk(c, lk_release(c, res, "alice", NULL, &r), LK_RELEASED);
    assert_lk(c, lk_acquire_fair(c, res2, "bob", 1000, 7, NULL, 0, &r), LK_ACQUIRED);
    assert_keys_expire(f, res2, 60000);
    assert_lk(c, lk_release(c, res2, "bob", NULL, &r), LK_RELEASED);

    /* Back to forever: 0 removes the time to live at the next grant. */
    assert_lk(f->c, lk_acquire(f->c, res, "alice", 1000, 0, NULL, &r), LK_ACQUIRED);
    assert_int_equal(key_pttl(f, res, "fence"), -1);
    assert_int_equal(key_pttl(f, res, "base"), -1);
    assert_int_equal(key_pttl(f, res, "recent"), -1);
    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, &r), LK_RELEASED);

    /* A lease longer than the idle time: the keys outlive the lease, re-entry and renewal
     * included. */
    lk_client *shortc = open_idle(f, 1000);
    assert_lk(shortc, lk_acquire(shortc, res, "carol", 30000, 0, NULL, &r), LK_ACQUIRED);
    assert_true(key_pttl(f, res, "fence") > 20000);
    assert_lk(f->c, lk_acquire(f->c, res, "carol", 30000, 0, NULL, &r), LK_ACQUIRED);
    assert_int_equal(key_pttl(f, res, "fence"), -1);
    assert_lk(shortc, lk_acquire(shortc, res, "carol", 30000, 0, NULL, &r), LK_ACQUIRED);
    assert_true(key_pttl(f, res, "recent") > 20000);
    assert_lk(f->c, lk_renew(f->c, res, "carol", 30000, NULL, &r), LK_RENEWED);
    assert_int_equal(key_pttl(f, res, "recent"), -1);
    assert_lk(shortc, lk_renew(shortc, res, "carol", 40000, NULL, &r), LK_RENEWED);
    assert_keys_expire(f, res, 40000);
    assert_true(key_pttl(f, res, "base") > 30000);
    assert_lk(shortc, lk_release(shortc, res, "carol", NULL, &r), LK_STILL_HELD);
    assert_lk(shortc, lk_release(shortc, res, "carol", NULL, &r), LK_STILL_HELD);
    assert_lk(shortc, lk_release(shortc, res, "carol", NULL, &r), LK_RELEASED);
    lk_client_close(shortc);
    lk_client_close(c);
}

/* A grant recorded for an idempotency key keeps the token keys at least as long as the
 * record (10 minutes by default), whatever the idle time, and a later renewal or short grant
 * does not shorten them: a retry may replay the record's token while it lives, so the
 * counter must outlive it. Before, with a 1 s idle time, the counter expired long before
 * the record: a grant whose answer was lost (so the gateway's floor never counted it) could
 * then be minted again for another owner, and the keyed retry replayed the same token. */
static void test_token_keys_outlive_an_idempotency_record(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    char res[64], res2[64], res3[64];
    const char *names[] = {"fence", "base", "recent"};
    lk_client *c = open_idle(f, 1000);

    snprintf(res, sizeof res, "%s", res_name("idle-idem"));
    snprintf(res3, sizeof res3, "%s", res_name("idle-idem-renew"));
    snprintf(res2, sizeof res2, "%s", res_name("idle-idem-fair"));
    assert_lk(c, lk_acquire(c, res, "alice", 1000, 7, "idle-idem-key-01", &r), LK_ACQUIRED);
    assert_lk(c, lk_renew(c, res, "alice", 1000, NULL, &r), LK_RENEWED);
    assert_lk(c, lk_acquire(c, res, "alice", 1000, 7, NULL, &r), LK_ACQUIRED); /* re-entry */
    /* A keyed renewal's record replays the token too: on a lock taken without a key (its
     * keys kept for 1 s only), the renewal keeps them as long as its record. */
    assert_lk(c, lk_acquire(c, res3, "carol", 1000, 7, NULL, &r), LK_ACQUIRED);
    assert_lk(c, lk_renew(c, res3, "carol", 1000, "idle-idem-key-03", &r), LK_RENEWED);
    assert_lk(c, lk_acquire_fair(c, res2, "bob", 1000, 7, "idle-idem-key-02", 0, &r),
              LK_ACQUIRED);
    /* Absolute expiry times (ms since the epoch), so reading one after the other is exact. */
    long long rec = key_expires_at(f, res, "idem:idle-idem-key-01");
    long long rec3 = key_expires_at(f, res3, "idem:idle-idem-key-03");
    long long rec2 = key_expires_at(f, res2, "idem:idle-idem-key-02");
    assert_true(rec > 0 && rec2 > 0);
    assert_true(key_pttl(f, res, "idem:idle-idem-key-01") > 1000);
    assert_true(rec3 > 0);
    for (size_t i = 0; i < 3; i++) {
        assert_true(key_expires_at(f, res, names[i]) >= rec);
        assert_true(key_expires_at(f, res2, names[i]) >= rec2);
        assert_true(key_expires_at(f, res3, names[i]) >= rec3);
    }
    assert_lk(c, lk_release(c, res, "alice", NULL, &r), LK_STILL_HELD);
    assert_lk(c, lk_release(c, res, "alice", NULL, &r), LK_RELEASED);
    assert_lk(c, lk_release(c, res2, "bob", NULL, &r), LK_RELEASED);
    assert_lk(c, lk_release(c, res3, "carol", NULL, &r), LK_RELEASED);
    lk_client_close(c);
}

/* The same property to the millisecond, over many grants: a plain and a fair keyed grant
 * and a keyed renewal each leave every token key expiring no earlier than the record, as
 * absolute times (PEXPIREAT/PEXPIRETIME), whatever the server's clock did during the script.
 * One grant rarely straddles a millisecond tick; 100 rounds of three make a slip of the
 * keys' expiry behind the record's (relative times taken at different instants within one
 * script) show in nearly every run. */
static void test_token_keys_outlive_the_record_to_the_ms(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    const char *names[] = {"fence", "base", "recent"};
    lk_client *c = open_idle(f, 1000);

    for (int round = 0; round < 100; round++) {
        char res[3][64], key[3][48];
        for (int k = 0; k < 3; k++) {
            snprintf(res[k], sizeof res[k], "%s", res_name("idem-ms"));
            snprintf(key[k], sizeof key[k], "idem-ms-%d-%d", round, k);
        }
        assert_lk(c, lk_acquire(c, res[0], "alice", 1000, 7, key[0], &r), LK_ACQUIRED);
        assert_lk(c, lk_acquire_fair(c, res[1], "bob", 1000, 7, key[1], 0, &r), LK_ACQUIRED);
        assert_lk(c, lk_acquire(c, res[2], "carol", 1000, 7, NULL, &r), LK_ACQUIRED);
        assert_lk(c, lk_renew(c, res[2], "carol", 1000, key[2], &r), LK_RENEWED);
        for (int k = 0; k < 3; k++) {
            char idem[64];
            snprintf(idem, sizeof idem, "idem:idem-ms-%d-%d", round, k);
            long long rec = key_expires_at(f, res[k], idem);
            assert_true(rec > 0);
            for (size_t i = 0; i < 3; i++) {
                long long at = key_expires_at(f, res[k], names[i]);
                if (at < rec) {
                    print_error("round %d: fg:{%s}:%s expires at %lld, its record at %lld\n",
                                round, res[k], names[i], at, rec);
                    fail();
                }
            }
        }
        assert_lk(c, lk_release(c, res[0], "alice", NULL, &r), LK_RELEASED);
        assert_lk(c, lk_release(c, res[1], "bob", NULL, &r), LK_RELEASED);
        assert_lk(c, lk_release(c, res[2], "carol", NULL, &r), LK_RELEASED);
    }
    lk_client_close(c);
}

/* Once the token keys expired, the next acquisition mints above its floor, as after a data
 * loss; without a floor the counter starts again, which is why the option is off by default
 * (locklib.h). A negative option is refused. */
static void test_expired_token_keys_restart_from_floor(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    lk_client *c = NULL;
    lk_options o;
    const char *res = res_name("idle-expired");

    lk_options_init(&o);
    o.token_key_idle_ttl_ms = -1;
    assert_int_equal(lk_client_open(&c, f->redis.url, &o), LK_EINVAL);
    lk_client_close(c);
    c = open_idle(f, 1000);
    assert_lk(c, lk_acquire(c, res, "alice", 1000, 40, NULL, &r), LK_ACQUIRED);
    assert_int_equal(r.token, 41);
    assert_lk(c, lk_release(c, res, "alice", NULL, &r), LK_RELEASED);
    /* Expiring them by hand stands in for the idle time passing. */
    th_redis_cmd(&f->redis, NULL, 0, "DEL fg:{%s}:fence fg:{%s}:base fg:{%s}:recent", res, res,
                 res);
    assert_lk(c, lk_acquire(c, res, "bob", 1000, 41, NULL, &r), LK_ACQUIRED);
    assert_int_equal(r.token, 42);
    assert_range(f, res, 41, 42);
    assert_lk(c, lk_release(c, res, "bob", NULL, &r), LK_RELEASED);
    lk_client_close(c);
}

/* A retry with the same idempotency key but another lease reports the lease granted by the
 * first answer, and changes nothing. */
static void test_replayed_acquire_reports_granted_lease(void **state)
{
    lk_fixture *f = *state;
    lk_result r1, r2;
    lk_lock_info info;
    const char *res = res_name("replay-lease");

    assert_lk(f->c, lk_acquire(f->c, res, "alice", 10000, 0, "acq-1", &r1), LK_ACQUIRED);
    assert_int_equal(r1.ttl_ms, 10000);
    assert_int_equal(r1.replayed, 0);
    assert_int_equal(r1.queue_pos, -1);
    assert_lk(f->c, lk_acquire(f->c, res, "alice", 60000, 0, "acq-1", &r2), LK_ACQUIRED);
    assert_int_equal(r2.replayed, 1);
    assert_int_equal(r2.token, r1.token);
    assert_int_equal(r2.holds, 1);
    assert_int_equal(r2.ttl_ms, 10000);
    assert_lk(f->c, lk_lock_status(f->c, res, &info), LK_OK);
    assert_true(info.ttl_ms <= 10000);
    assert_int_equal(info.holds, 1);
    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, &r1), LK_RELEASED);
}

static void test_replayed_renew_reports_granted_lease(void **state)
{
    lk_fixture *f = *state;
    lk_result a, r1, r2;
    lk_lock_info info;
    const char *res = res_name("replay-renew");

    assert_lk(f->c, lk_acquire(f->c, res, "alice", 5000, 0, NULL, &a), LK_ACQUIRED);
    assert_lk(f->c, lk_renew(f->c, res, "alice", 30000, "ren-1", &r1), LK_RENEWED);
    assert_int_equal(r1.ttl_ms, 30000);
    assert_int_equal(r1.replayed, 0);
    assert_lk(f->c, lk_renew(f->c, res, "alice", 1000, "ren-1", &r2), LK_RENEWED);
    assert_int_equal(r2.replayed, 1);
    assert_int_equal(r2.token, a.token);
    assert_int_equal(r2.ttl_ms, 30000);
    /* The replay did not shorten the lease to the retry's 1000 ms. */
    assert_lk(f->c, lk_lock_status(f->c, res, &info), LK_OK);
    assert_true(info.ttl_ms > 5000);
    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, &a), LK_RELEASED);
}

/* Records written before the lease was stored still replay, with the retry's lease. */
static void test_replay_of_record_without_lease(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    const char *res = res_name("old-record");
    char key[256];

    snprintf(key, sizeof key, "fg:{%s}:idem:old-1", res);
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0,
                                  "HSET %s op acquire owner alice token 7 holds 1", key), 4);
    assert_lk(f->c, lk_acquire(f->c, res, "alice", 4000, 0, "old-1", &r), LK_ACQUIRED);
    assert_int_equal(r.replayed, 1);
    assert_int_equal(r.token, 7);
    assert_int_equal(r.ttl_ms, 4000);
}

/* A new resource given floor 9 issues token 10: only 10 was issued for it. */
static void test_range_of_new_resource_with_floor(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    lk_lock_info info;
    const char *res = res_name("range-new");
    char key[256];

    assert_range(f, res, 0, 0);
    assert_lk(f->c, lk_acquire(f->c, res, "alice", 10000, 9, NULL, &r), LK_ACQUIRED);
    assert_int_equal(r.token, 10);
    assert_int_equal(r.floor_raised, 1);
    assert_range(f, res, 9, 10);
    /* lk_last_token and lk_lock_status are unchanged by the base key. */
    int64_t last = 0;
    assert_lk(f->c, lk_last_token(f->c, res, &last), LK_OK);
    assert_int_equal(last, 10);
    assert_lk(f->c, lk_lock_status(f->c, res, &info), LK_OK);
    assert_int_equal(info.locked, 1);
    assert_int_equal(info.token, 10);
    assert_int_equal(info.last_token, 10);
    /* Like the fence counter, the base never expires. */
    snprintf(key, sizeof key, "fg:{%s}:base", res);
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "PTTL %s", key), -1);
    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, &r), LK_RELEASED);
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "PTTL %s", key), -1);
}

/* Without a lift, the base stays and the last token grows. */
static void test_range_grows_without_lift(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    const char *res = res_name("range-grow");

    assert_lk(f->c, lk_acquire(f->c, res, "alice", 10000, 9, NULL, &r), LK_ACQUIRED);
    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, &r), LK_RELEASED);
    for (int i = 0; i < 3; i++) {
        assert_lk(f->c, lk_acquire(f->c, res, "bob", 10000, 9, NULL, &r), LK_ACQUIRED);
        assert_int_equal(r.floor_raised, 0);
        assert_lk(f->c, lk_release(f->c, res, "bob", NULL, &r), LK_RELEASED);
    }
    assert_range(f, res, 9, 13);
    /* A resource that never had a floor has no base: every token from 1 was issued. */
    const char *plain = res_name("range-plain");
    assert_lk(f->c, lk_acquire(f->c, plain, "alice", 10000, 0, NULL, &r), LK_ACQUIRED);
    assert_int_equal(r.token, 1);
    assert_range(f, plain, 0, 1);
    assert_lk(f->c, lk_release(f->c, plain, "alice", NULL, &r), LK_RELEASED);
}

/* A floor that moved up while nobody holds the lock lifts the base with the counter; a
 * floor cannot lift anything while the lock is held. */
static void test_range_moves_with_a_later_lift(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    const char *res = res_name("range-lift");

    assert_lk(f->c, lk_acquire(f->c, res, "alice", 10000, 0, NULL, &r), LK_ACQUIRED);
    assert_int_equal(r.token, 1);
    assert_lk(f->c, lk_acquire(f->c, res, "bob", 10000, 500, NULL, &r), LK_HELD);
    assert_range(f, res, 0, 1);
    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, &r), LK_RELEASED);
    assert_lk(f->c, lk_acquire(f->c, res, "bob", 10000, 500, NULL, &r), LK_ACQUIRED);
    assert_int_equal(r.token, 501);
    assert_range(f, res, 500, 501);
    assert_lk(f->c, lk_release(f->c, res, "bob", NULL, &r), LK_RELEASED);
}

/* lk_token_check knows the resource's last 16 tokens, also those a later lift put below the
 * base (superseded holders), and no token of another resource or older than those 16. */
static void test_check_knows_recent_tokens_below_a_lift(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    int64_t base = -1, last = -1;
    int recent = -1;
    char res[64], other[64]; /* res_name() reuses one buffer */
    snprintf(res, sizeof res, "%s", res_name("check-recent"));
    snprintf(other, sizeof other, "%s", res_name("check-other"));

    assert_lk(f->c, lk_acquire(f->c, res, "alice", 10000, 0, NULL, &r), LK_ACQUIRED);
    int64_t first = r.token;
    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, &r), LK_RELEASED);
    assert_lk(f->c, lk_acquire(f->c, other, "carol", 10000, 50, NULL, &r), LK_ACQUIRED);
    int64_t foreign = r.token; /* 51: between the two tokens of res, as with the gateway */
    assert_lk(f->c, lk_release(f->c, other, "carol", NULL, &r), LK_RELEASED);
    /* The next holder's floor lifts the counter past the first token. */
    assert_lk(f->c, lk_acquire(f->c, res, "bob", 10000, 100, NULL, &r), LK_ACQUIRED);
    int64_t second = r.token;
    assert_int_equal(second, 101);

    assert_lk(f->c, lk_token_check(f->c, res, first, &base, &last, &recent), LK_OK);
    assert_int_equal(base, 100);
    assert_int_equal(last, second);
    assert_int_equal(recent, 1); /* below the base, yet issued here: superseded */
    assert_lk(f->c, lk_token_check(f->c, res, second, &base, &last, &recent), LK_OK);
    assert_int_equal(recent, 1);
    assert_lk(f->c, lk_token_check(f->c, res, foreign, &base, &last, &recent), LK_OK);
    assert_int_equal(recent, 0); /* issued, but for another resource */
    assert_lk(f->c, lk_token_check(f->c, res, 0, &base, &last, &recent), LK_OK);
    assert_int_equal(recent, 0);
    assert_lk(f->c, lk_release(f->c, res, "bob", NULL, &r), LK_RELEASED);

    /* Only the last 16 are kept: after 16 more grants the first is forgotten. */
    for (int i = 0; i < 16; i++) {
        assert_lk(f->c, lk_acquire(f->c, res, "dave", 10000, 0, NULL, &r), LK_ACQUIRED);
        assert_lk(f->c, lk_release(f->c, res, "dave", NULL, &r), LK_RELEASED);
    }
    assert_lk(f->c, lk_token_check(f->c, res, second, &base, &last, &recent), LK_OK);
    assert_int_equal(recent, 0);
    assert_lk(f->c, lk_token_check(f->c, res, last, &base, &last, &recent), LK_OK);
    assert_int_equal(recent, 1);
    assert_lk(f->c, lk_token_check(f->c, res, LK_TOKEN_MAX + 1, &base, &last, &recent),
              LK_EINVAL);
    assert_lk(f->c, lk_token_check(f->c, res, -1, &base, &last, &recent), LK_EINVAL);
}

/* A counter lost on its own (the base survived) is lifted to the base, so the range never
 * turns upside down and no token below the base is issued again. */
static void test_counter_lost_alone_is_lifted_to_base(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    const char *res = res_name("range-lost");
    char key[256];

    assert_lk(f->c, lk_acquire(f->c, res, "alice", 10000, 40, NULL, &r), LK_ACQUIRED);
    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, &r), LK_RELEASED);
    snprintf(key, sizeof key, "fg:{%s}:fence", res);
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "DEL %s", key), 1);
    assert_lk(f->c, lk_acquire(f->c, res, "alice", 10000, 0, NULL, &r), LK_ACQUIRED);
    assert_int_equal(r.token, 41);
    assert_range(f, res, 40, 41);
    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, &r), LK_RELEASED);
}

/* After Redis loses everything, the caller's floor (from durable storage) lifts the counter
 * and the base moves up with it: the old tokens are outside the new range. */
static void test_range_after_flushall(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    const char *res = res_name("range-flush");

    assert_lk(f->c, lk_acquire(f->c, res, "alice", 10000, 9, NULL, &r), LK_ACQUIRED);
    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, &r), LK_RELEASED);
    assert_lk(f->c, lk_acquire(f->c, res, "alice", 10000, 9, NULL, &r), LK_ACQUIRED);
    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, &r), LK_RELEASED);
    assert_range(f, res, 9, 11);

    char out[64];
    th_redis_cmd(&f->redis, out, sizeof out, "FLUSHALL");
    assert_string_equal(out, "OK");
    assert_range(f, res, 0, 0);
    assert_lk(f->c, lk_acquire(f->c, res, "bob", 10000, 11, NULL, &r), LK_ACQUIRED);
    assert_int_equal(r.token, 12);
    assert_int_equal(r.floor_raised, 1);
    assert_range(f, res, 11, 12);
    assert_lk(f->c, lk_release(f->c, res, "bob", NULL, &r), LK_RELEASED);
}

/* A fence counter already at 2^53 - 1 refuses the next token before touching anything: the
 * counter is not incremented, so status never reports a token that was never issued. */
static void test_exhausted_counter_is_left_unchanged(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    lk_lock_info info;
    char key[256], out[64];
    const char *res = res_name("exhausted");

    snprintf(key, sizeof key, "fg:{%s}:fence", res);
    th_redis_cmd(&f->redis, out, sizeof out, "SET %s 9007199254740991", key);
    assert_string_equal(out, "OK");
    for (int i = 0; i < 3; i++) {
        assert_lk(f->c, lk_acquire(f->c, res, "alice", 10000, 0, NULL, &r), LK_EREDIS);
        assert_non_null(strstr(lk_errstr(f->c), "exhausted"));
        assert_lk(f->c, lk_acquire_fair(f->c, res, "alice", 10000, 0, NULL, 1000, &r),
                  LK_EREDIS);
        assert_non_null(strstr(lk_errstr(f->c), "exhausted"));
        /* A floor below the counter cannot help either. */
        assert_lk(f->c, lk_acquire(f->c, res, "alice", 10000, 17, NULL, &r), LK_EREDIS);
    }
    th_redis_cmd(&f->redis, out, sizeof out, "GET %s", key);
    assert_string_equal(out, "9007199254740991");
    assert_lk(f->c, lk_lock_status(f->c, res, &info), LK_OK);
    assert_int_equal(info.locked, 0);
    assert_int_equal(info.last_token, LK_TOKEN_MAX);
    assert_range(f, res, 0, LK_TOKEN_MAX);
}

/* Runs a generated script (preludes + body) with EVAL on a plain hiredis connection, as an
 * operator with redis-cli could, bypassing the C checks. argv holds the keys, then the
 * arguments. Returns the reply; the caller frees it. */
static redisReply *eval_file(lk_fixture *f, const char *name, int nkeys, int argc,
                             const char **argv)
{
    char path[512], nkeys_s[8];
    const char *cmd[16];
    size_t lens[16];
    struct timeval tv = {5, 0};

    snprintf(path, sizeof path, "%s/%s.lua", LOCKLIB_LUA_DIR, name);
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    char *text = calloc(1, 65536);
    assert_non_null(text);
    size_t n = fread(text, 1, 65535, fp);
    fclose(fp);
    assert_true(n > 0);
    redisContext *ctx = redisConnectWithTimeout("127.0.0.1", f->redis.port, tv);
    assert_non_null(ctx);
    assert_int_equal(ctx->err, 0);
    redisSetTimeout(ctx, tv);
    snprintf(nkeys_s, sizeof nkeys_s, "%d", nkeys);
    cmd[0] = "EVAL";
    cmd[1] = text;
    cmd[2] = nkeys_s;
    assert_true(argc + 3 <= 16);
    for (int i = 0; i < argc; i++) {
        cmd[3 + i] = argv[i];
    }
    for (int i = 0; i < argc + 3; i++) {
        lens[i] = strlen(cmd[i]);
    }
    redisReply *reply = redisCommandArgv(ctx, argc + 3, cmd, lens);
    assert_non_null(reply);
    redisFree(ctx);
    free(text);
    return reply;
}

/* A floor that is not an integer is refused by the scripts themselves, before anything is
 * stored: the counter and the base are only ever integers. */
static void test_non_integer_floor_refused_by_scripts(void **state)
{
    lk_fixture *f = *state;
    const char *bad[] = {"5.5", "0.25", "nan", "-nan", "inf", "1e300", "9007199254740990.5"};
    const char *res = res_name("float-floor");
    char lock[256], fence[256], idem[256], base[256], queue[256], qtimeout[256], recent[256];
    lk_result r;

    snprintf(lock, sizeof lock, "fg:{%s}:lock", res);
    snprintf(fence, sizeof fence, "fg:{%s}:fence", res);
    snprintf(idem, sizeof idem, "fg:{%s}:idem:", res);
    snprintf(base, sizeof base, "fg:{%s}:base", res);
    snprintf(queue, sizeof queue, "fg:{%s}:queue", res);
    snprintf(qtimeout, sizeof qtimeout, "fg:{%s}:qtimeout", res);
    snprintf(recent, sizeof recent, "fg:{%s}:recent", res);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *plain[] = {lock,    fence,   idem,   base, recent,
                               "alice", "10000", bad[i], "0",  "0"};
        redisReply *reply = eval_file(f, "acquire", 5, 10, plain);
        if (reply->type != REDIS_REPLY_ERROR) {
            print_error("acquire.lua took floor %s\n", bad[i]);
        }
        assert_int_equal(reply->type, REDIS_REPLY_ERROR);
        assert_non_null(strstr(reply->str, "invalid argument"));
        freeReplyObject(reply);

        const char *fair[] = {lock,    fence,   idem,   base, queue, qtimeout, recent,
                              "alice", "10000", bad[i], "0",  "1000", "0"};
        reply = eval_file(f, "fair_acquire", 7, 13, fair);
        if (reply->type != REDIS_REPLY_ERROR) {
            print_error("fair_acquire.lua took floor %s\n", bad[i]);
        }
        assert_int_equal(reply->type, REDIS_REPLY_ERROR);
        assert_non_null(strstr(reply->str, "invalid argument"));
        freeReplyObject(reply);
        assert_int_equal(
            th_redis_cmd(&f->redis, NULL, 0, "EXISTS %s %s %s %s", lock, fence, base, recent), 0);
    }
    /* An integer floor through the same path still works, and INCR keeps working after. */
    const char *good[] = {lock, fence, idem, base, recent, "alice", "10000", "5", "0", "0"};
    redisReply *reply = eval_file(f, "acquire", 5, 10, good);
    assert_int_equal(reply->type, REDIS_REPLY_ARRAY);
    assert_int_equal(reply->element[1]->integer, 6);
    freeReplyObject(reply);
    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, &r), LK_RELEASED);
    assert_lk(f->c, lk_acquire(f->c, res, "alice", 10000, 0, NULL, &r), LK_ACQUIRED);
    assert_int_equal(r.token, 7);
    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, &r), LK_RELEASED);
}

static void test_range_validation(void **state)
{
    lk_fixture *f = *state;
    int64_t base = 5, last = 5;

    assert_lk(f->c, lk_token_range(f->c, "a b", &base, &last), LK_EINVAL);
    assert_int_equal(base, 0);
    assert_int_equal(last, 0);
    assert_lk(f->c, lk_token_range(f->c, "", &base, &last), LK_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replayed_acquire_reports_granted_lease),
        cmocka_unit_test(test_replayed_renew_reports_granted_lease),
        cmocka_unit_test(test_replay_of_record_without_lease),
        cmocka_unit_test(test_range_of_new_resource_with_floor),
        cmocka_unit_test(test_range_grows_without_lift),
        cmocka_unit_test(test_range_moves_with_a_later_lift),
        cmocka_unit_test(test_check_knows_recent_tokens_below_a_lift),
        cmocka_unit_test(test_counter_lost_alone_is_lifted_to_base),
        cmocka_unit_test(test_range_after_flushall),
        cmocka_unit_test(test_range_validation),
        cmocka_unit_test(test_exhausted_counter_is_left_unchanged),
        cmocka_unit_test(test_non_integer_floor_refused_by_scripts),
        cmocka_unit_test(test_token_keys_get_idle_ttl),
        cmocka_unit_test(test_token_keys_outlive_an_idempotency_record),
        cmocka_unit_test(test_token_keys_outlive_the_record_to_the_ms),
        cmocka_unit_test(test_expired_token_keys_restart_from_floor),
    };
    return cmocka_run_group_tests_name("locklib_tokens", tests, group_setup, lk_group_teardown);
}
