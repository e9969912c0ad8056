/* locklib: what a replayed acquire or renew reports, against a real redis-server started by the group setup. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lk_test.h"

static int group_setup(void **state)
{
    return lk_group_setup_aof(state, 0);
}

/* A resource name unique to one test, so tests never see each other's keys. */
static const char *res_name(const char *tag)
{
    static char buf[64];
    static int n = 0;
    snprintf(buf, sizeof buf, "t%d.%s", ++n, tag);
    return buf;
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replayed_acquire_reports_granted_lease),
        cmocka_unit_test(test_replayed_renew_reports_granted_lease),
        cmocka_unit_test(test_replay_of_record_without_lease),
    };
    return cmocka_run_group_tests_name("locklib_tokens", tests, group_setup, lk_group_teardown);
}
