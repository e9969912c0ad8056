/* locklib: shared (read) locks against a real redis-server: shared holds coexist and exclude
 * exclusive ones, each with its own lease; the writers' preference; re-entry and a mode
 * mismatch; idempotency; fair queues; status and listing. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lk_test.h"

static int group_setup(void **state)
{
    return lk_group_setup_aof(state, 0);
}

/* One non-fair attempt; wait_ms > 0 says the caller waits when held (writers' preference). */
static lk_status attempt(lk_fixture *f, const char *res, const char *owner, int shared,
                         int64_t lease_ms, int64_t wait_ms, lk_result *r)
{
    lk_call call = {.kind = LK_CALL_ACQUIRE, .resource = res, .owner = owner,
                    .lease_ms = lease_ms, .wait_ms = wait_ms, .shared = shared};
    lk_call *one[1] = {&call};
    lk_call_many(f->c, one, 1);
    *r = call.res;
    return call.status;
}

static lk_status fair(lk_fixture *f, const char *res, const char *owner, int shared,
                      lk_result *r)
{
    lk_call call = {.kind = LK_CALL_ACQUIRE_FAIR, .resource = res, .owner = owner,
                    .lease_ms = 20000, .wait_ms = 20000, .shared = shared};
    lk_call *one[1] = {&call};
    lk_call_many(f->c, one, 1);
    *r = call.res;
    return call.status;
}

/* Redis's count of writes since its last save (INFO persistence). */
static long long redis_changes(lk_fixture *f)
{
    char info[4096];
    assert_true(th_redis_cmd(&f->redis, info, sizeof info, "INFO persistence") != -1);
    const char *p = strstr(info, "rdb_changes_since_last_save:");
    assert_non_null(p);
    return atoll(p + strlen("rdb_changes_since_last_save:"));
}

/* A waiting writer's held retries write nothing while its registered wait covers theirs, even
 * when the caller's remaining wait and Redis's clock have drifted a few ms apart: under
 * appendfsync always each write would be an fsync per held attempt. */
static void test_writer_retry_writes_nothing(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    const char *res = res_name("retry");

    assert_lk(f->c, attempt(f, res, "reader", 1, 20000, 0, &r), LK_ACQUIRED);
    assert_lk(f->c, attempt(f, res, "w", 0, 20000, 5000, &r), LK_HELD);
    long long before = redis_changes(f);
    assert_lk(f->c, attempt(f, res, "w", 0, 20000, 5000, &r), LK_HELD);
    assert_lk(f->c, attempt(f, res, "w", 0, 20000, 5040, &r), LK_HELD);
    assert_int_equal(redis_changes(f), before);
    /* A longer wait is registered. */
    assert_lk(f->c, attempt(f, res, "w", 0, 20000, 9000, &r), LK_HELD);
    assert_true(redis_changes(f) > before);
}

/* A writer held by another writer, with no reader in sight, writes nothing for the writers'
 * preference (the hot path of exclusive locks); it registers at its first retry that meets
 * a waiting reader, which it then keeps out when the lock comes free. */
static void test_writer_behind_writer_registers_for_readers(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    const char *res = res_name("wbehindw");

    assert_lk(f->c, attempt(f, res, "holder", 0, 20000, 0, &r), LK_ACQUIRED);
    assert_lk(f->c, attempt(f, res, "w1", 0, 20000, 5000, &r), LK_HELD); /* marks it wanted */
    long long before = redis_changes(f);
    assert_lk(f->c, attempt(f, res, "w2", 0, 20000, 5000, &r), LK_HELD);
    assert_lk(f->c, attempt(f, res, "w2", 0, 20000, 5000, &r), LK_HELD);
    assert_int_equal(redis_changes(f), before);
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "EXISTS fg:{%s}:rwait", res), 0);
    /* A reader waits: the writer's next retry registers, and the reader stays out once the
     * holder leaves. */
    assert_lk(f->c, attempt(f, res, "reader", 1, 20000, 5000, &r), LK_HELD);
    assert_lk(f->c, attempt(f, res, "w2", 0, 20000, 5000, &r), LK_HELD);
    assert_lk(f->c, lk_release(f->c, res, "holder", NULL, &r), LK_RELEASED);
    assert_lk(f->c, attempt(f, res, "reader", 1, 20000, 5000, &r), LK_HELD);
    assert_lk(f->c, attempt(f, res, "w2", 0, 20000, 5000, &r), LK_ACQUIRED);
}

static void test_shared_coexist_exclusive_waits(void **state)
{
    lk_fixture *f = *state;
    lk_result a, b, r;
    lk_lock_info info;
    const char *res = res_name("coexist");

    /* Before any exclusive grant the current token is 0. */
    assert_lk(f->c, lk_acquire_shared(f->c, res, "ra", 20000, 0, NULL, 0, &a), LK_ACQUIRED);
    assert_int_equal(a.shared, 1);
    assert_int_equal(a.token, 0);
    assert_lk(f->c, lk_acquire_shared(f->c, res, "rb", 20000, 0, NULL, 0, &b), LK_ACQUIRED);
    assert_int_equal(b.token, 0);
    assert_int_equal(b.holds, 1);
    assert_lk(f->c, lk_lock_status(f->c, res, &info), LK_OK);
    assert_int_equal(info.locked, 1);
    assert_int_equal(info.shared, 1);
    assert_int_equal(info.holders, 2);
    assert_int_equal(info.last_token, 0);

    assert_lk(f->c, lk_acquire(f->c, res, "wx", 20000, 0, NULL, &r), LK_HELD);
    assert_lk(f->c, lk_release(f->c, res, "ra", NULL, &r), LK_RELEASED);
    assert_lk(f->c, lk_acquire(f->c, res, "wx", 20000, 0, NULL, &r), LK_HELD);
    assert_lk(f->c, lk_release(f->c, res, "rb", NULL, &r), LK_RELEASED);

    /* The last shared holder left: the exclusive grant mints a token. */
    lk_result x;
    assert_lk(f->c, lk_acquire(f->c, res, "wx", 20000, 0, NULL, &x), LK_ACQUIRED);
    assert_int_equal(x.shared, 0);
    assert_int_equal(x.token, 1);
    assert_lk(f->c, lk_lock_status(f->c, res, &info), LK_OK);
    assert_int_equal(info.shared, 0);
    assert_int_equal(info.holders, 1);
    assert_lk(f->c, lk_acquire_shared(f->c, res, "rc", 20000, 0, NULL, 0, &r), LK_HELD);
    assert_int_equal(r.holder_token, x.token);
    assert_lk(f->c, lk_release(f->c, res, "wx", NULL, &r), LK_RELEASED);

    /* A shared grant answers the last exclusive token and mints nothing. */
    assert_lk(f->c, lk_acquire_shared(f->c, res, "rc", 20000, 0, NULL, 0, &r), LK_ACQUIRED);
    assert_int_equal(r.token, x.token);
    assert_lk(f->c, lk_lock_status(f->c, res, &info), LK_OK);
    assert_int_equal(info.last_token, x.token);
    assert_lk(f->c, lk_release(f->c, res, "rc", NULL, &r), LK_RELEASED);
    assert_lk(f->c, lk_lock_status(f->c, res, &info), LK_OK);
    assert_int_equal(info.locked, 0);
}

static void test_each_shared_holder_has_its_lease(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    lk_lock_info info;
    const char *res = res_name("leases");

    assert_lk(f->c, lk_acquire_shared(f->c, res, "short", 150, 0, NULL, 0, &r), LK_ACQUIRED);
    assert_lk(f->c, lk_acquire_shared(f->c, res, "long", 20000, 0, NULL, 0, &r), LK_ACQUIRED);
    /* The lock lives with the latest lease. */
    assert_lk(f->c, lk_lock_status(f->c, res, &info), LK_OK);
    assert_true(info.ttl_ms > 10000);
    /* The short lease ends on its own (nobody renews it): its renewal is refused then,
     * the other one's is not. */
    int64_t deadline = th_now_ms() + 10000;
    for (;;) {
        assert_lk(f->c, lk_lock_status(f->c, res, &info), LK_OK);
        if (info.holders == 1 || th_now_ms() > deadline) {
            break;
        }
        th_nap_ms(20);
    }
    assert_int_equal(info.holders, 1);
    assert_lk(f->c, lk_renew(f->c, res, "short", 1000, NULL, &r), LK_NOT_OWNER);
    assert_int_equal(r.holds, 1); /* another owner holds it */
    assert_lk(f->c, lk_renew(f->c, res, "long", 30000, NULL, &r), LK_RENEWED);
    assert_int_equal(r.token, 0);
    assert_lk(f->c, lk_release(f->c, res, "short", NULL, &r), LK_NOT_OWNER);
    assert_lk(f->c, lk_release(f->c, res, "long", NULL, &r), LK_RELEASED);
    assert_lk(f->c, lk_acquire(f->c, res, "w", 20000, 0, NULL, &r), LK_ACQUIRED);
    assert_lk(f->c, lk_release(f->c, res, "w", NULL, &r), LK_RELEASED);
}

static void test_writers_preference(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    const char *res = res_name("prefer");

    assert_lk(f->c, attempt(f, res, "r1", 1, 20000, 0, &r), LK_ACQUIRED);
    /* A writer that does not wait holds nobody back. */
    assert_lk(f->c, attempt(f, res, "w", 0, 20000, 0, &r), LK_HELD);
    assert_lk(f->c, attempt(f, res, "r2", 1, 20000, 0, &r), LK_ACQUIRED);
    /* A writer that waits does: new readers wait behind it, a holder re-enters. */
    assert_lk(f->c, attempt(f, res, "w", 0, 20000, 5000, &r), LK_HELD);
    assert_lk(f->c, attempt(f, res, "r3", 1, 20000, 5000, &r), LK_HELD);
    assert_true(r.ttl_ms > 0);
    assert_lk(f->c, attempt(f, res, "r1", 1, 20000, 0, &r), LK_ACQUIRED);
    assert_int_equal(r.holds, 2);
    assert_lk(f->c, lk_release(f->c, res, "r1", NULL, &r), LK_STILL_HELD);
    assert_lk(f->c, lk_release(f->c, res, "r1", NULL, &r), LK_RELEASED);
    assert_int_equal(r.published, 0); /* r2 still holds */
    assert_lk(f->c, lk_release(f->c, res, "r2", NULL, &r), LK_RELEASED);
    assert_int_equal(r.published, 1); /* the writer waits for this one */
    /* Free, but the writer waits first: the reader is still held back. */
    assert_lk(f->c, attempt(f, res, "r3", 1, 20000, 5000, &r), LK_HELD);
    assert_true(r.ttl_ms >= 1 && r.ttl_ms <= 1000);
    lk_result x;
    assert_lk(f->c, attempt(f, res, "w", 0, 20000, 5000, &x), LK_ACQUIRED);
    assert_lk(f->c, attempt(f, res, "r3", 1, 20000, 5000, &r), LK_HELD);
    /* The writer's release wakes the readers it held back, which all get in. */
    assert_lk(f->c, lk_release(f->c, res, "w", NULL, &r), LK_RELEASED);
    assert_int_equal(r.published, 1);
    assert_lk(f->c, attempt(f, res, "r3", 1, 20000, 0, &r), LK_ACQUIRED);
    assert_int_equal(r.token, x.token);
    assert_lk(f->c, attempt(f, res, "r4", 1, 20000, 0, &r), LK_ACQUIRED);
    assert_int_equal(r.token, x.token);
    assert_lk(f->c, lk_release(f->c, res, "r3", NULL, &r), LK_RELEASED);
    assert_lk(f->c, lk_release(f->c, res, "r4", NULL, &r), LK_RELEASED);
}

static void test_mode_mismatch(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    lk_lock_info info;
    const char *res = res_name("mismatch");

    assert_lk(f->c, lk_acquire_shared(f->c, res, "a", 20000, 0, NULL, 0, &r), LK_ACQUIRED);
    assert_lk(f->c, lk_acquire(f->c, res, "a", 20000, 0, NULL, &r), LK_WRONG_MODE);
    assert_lk(f->c, lk_lock_status(f->c, res, &info), LK_OK);
    assert_int_equal(info.shared, 1);
    assert_int_equal(info.holders, 1);
    assert_lk(f->c, lk_release(f->c, res, "a", NULL, &r), LK_RELEASED);
    assert_lk(f->c, lk_acquire(f->c, res, "a", 20000, 0, NULL, &r), LK_ACQUIRED);
    assert_lk(f->c, lk_acquire_shared(f->c, res, "a", 20000, 0, NULL, 0, &r), LK_WRONG_MODE);
    assert_lk(f->c, lk_release(f->c, res, "a", NULL, &r), LK_RELEASED);
    assert_lk(f->c, lk_lock_status(f->c, res, &info), LK_OK);
    assert_int_equal(info.locked, 0);
}

static void test_idempotent_shared(void **state)
{
    lk_fixture *f = *state;
    lk_result r1, r2, r;
    lk_lock_info info;
    const char *res = res_name("idem");

    assert_lk(f->c, lk_acquire(f->c, res, "w", 20000, 0, NULL, &r), LK_ACQUIRED);
    assert_lk(f->c, lk_release(f->c, res, "w", NULL, &r), LK_RELEASED);
    assert_lk(f->c, lk_acquire_shared(f->c, res, "a", 20000, 0, "k1", 0, &r1), LK_ACQUIRED);
    assert_lk(f->c, lk_acquire_shared(f->c, res, "a", 20000, 0, "k1", 0, &r2), LK_ACQUIRED);
    assert_int_equal(r2.replayed, 1);
    assert_int_equal(r2.shared, 1);
    assert_int_equal(r2.token, r1.token);
    assert_int_equal(r2.holds, 1);
    assert_lk(f->c, lk_lock_status(f->c, res, &info), LK_OK);
    assert_int_equal(info.holders, 1);
    /* The same key for the other mode is another request. */
    assert_lk(f->c, lk_acquire(f->c, res, "a", 20000, 0, "k1", &r), LK_EIDEMPOTENCY);
    assert_lk(f->c, lk_release(f->c, res, "a", NULL, &r), LK_RELEASED);
}

/* A fair writer that leaves the queue (lk_fair_cancel) stops holding new readers back at
 * once, not when its wait would have ended. */
static void test_cancelled_fair_writer_lets_readers_in(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    const char *res = res_name("fcancel");

    assert_lk(f->c, fair(f, res, "r1", 1, &r), LK_ACQUIRED);
    assert_lk(f->c, fair(f, res, "w", 0, &r), LK_HELD);
    assert_lk(f->c, attempt(f, res, "r2", 1, 20000, 0, &r), LK_HELD); /* the writer waits */
    assert_lk(f->c, lk_fair_cancel(f->c, res, "w"), LK_OK);
    assert_lk(f->c, attempt(f, res, "r2", 1, 20000, 0, &r), LK_ACQUIRED);
    assert_lk(f->c, fair(f, res, "r3", 1, &r), LK_ACQUIRED);
}

static void test_fair_shared(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    const char *res = res_name("fair");

    /* Readers in line together; a writer queued before a reader keeps it out. */
    assert_lk(f->c, fair(f, res, "r1", 1, &r), LK_ACQUIRED);
    assert_lk(f->c, fair(f, res, "r2", 1, &r), LK_ACQUIRED);
    assert_lk(f->c, fair(f, res, "w", 0, &r), LK_HELD);
    assert_int_equal(r.queue_pos, 0);
    assert_lk(f->c, fair(f, res, "r3", 1, &r), LK_HELD);
    assert_int_equal(r.queue_pos, 1);
    assert_lk(f->c, lk_release(f->c, res, "r1", NULL, &r), LK_RELEASED);
    assert_lk(f->c, lk_release(f->c, res, "r2", NULL, &r), LK_RELEASED);
    assert_int_equal(r.published, 1);
    assert_lk(f->c, fair(f, res, "r3", 1, &r), LK_HELD);
    lk_result x;
    assert_lk(f->c, fair(f, res, "w", 0, &x), LK_ACQUIRED);
    /* A writer arriving behind the waiting reader waits for it: no deadlock. */
    assert_lk(f->c, fair(f, res, "w2", 0, &r), LK_HELD);
    assert_lk(f->c, lk_release(f->c, res, "w", NULL, &r), LK_RELEASED);
    assert_lk(f->c, fair(f, res, "w2", 0, &r), LK_HELD);
    assert_lk(f->c, fair(f, res, "r3", 1, &r), LK_ACQUIRED);
    assert_int_equal(r.token, x.token);
    assert_int_equal(r.shared, 1);
    /* Now the writer is first: a new reader waits behind it. */
    assert_lk(f->c, fair(f, res, "w2", 0, &r), LK_HELD);
    assert_lk(f->c, fair(f, res, "r4", 1, &r), LK_HELD);
    assert_lk(f->c, lk_release(f->c, res, "r3", NULL, &r), LK_RELEASED);
    assert_lk(f->c, fair(f, res, "w2", 0, &r), LK_ACQUIRED);
    assert_true(r.token > x.token);
    assert_lk(f->c, lk_release(f->c, res, "w2", NULL, &r), LK_RELEASED);
    assert_lk(f->c, fair(f, res, "r4", 1, &r), LK_ACQUIRED);
    assert_lk(f->c, lk_release(f->c, res, "r4", NULL, &r), LK_RELEASED);
}

/* A queued fair reader that gives up leaves the queue (lk_fair_cancel), so the writer
 * behind it takes the freed lock at once instead of waiting out the reader's deadline. */
static void test_fair_shared_cancel(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    const char *res = res_name("fair-cancel");

    assert_lk(f->c, fair(f, res, "x", 0, &r), LK_ACQUIRED);
    assert_lk(f->c, fair(f, res, "rd", 1, &r), LK_HELD);
    assert_lk(f->c, fair(f, res, "wr", 0, &r), LK_HELD);
    assert_int_equal(r.queue_pos, 1);
    assert_lk(f->c, lk_fair_cancel(f->c, res, "rd"), LK_OK);
    assert_lk(f->c, lk_release(f->c, res, "x", NULL, &r), LK_RELEASED);
    assert_lk(f->c, fair(f, res, "wr", 0, &r), LK_ACQUIRED);
    assert_lk(f->c, lk_release(f->c, res, "wr", NULL, &r), LK_RELEASED);
}

typedef struct waiter_arg {
    const char *res;
    lk_status st;
    lk_result r;
    const char *url;
} waiter_arg;

static void *shared_waiter(void *p)
{
    waiter_arg *a = p;
    lk_client *c = NULL;
    lk_options o;
    lk_options_init(&o);
    if (lk_client_open(&c, a->url, &o) != LK_OK) {
        a->st = LK_EUNAVAILABLE;
        lk_client_close(c);
        return NULL;
    }
    a->st = lk_acquire_shared(c, a->res, "waiting-reader", 20000, 0, NULL, 15000, &a->r);
    lk_client_close(c);
    return NULL;
}

static void test_shared_wait_wakes_on_release(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    lk_lock_info info;
    char res[64];
    snprintf(res, sizeof res, "%s", res_name("wake"));

    assert_lk(f->c, lk_acquire(f->c, res, "w", 20000, 0, NULL, &r), LK_ACQUIRED);
    waiter_arg a = {.res = res, .st = LK_EREDIS, .url = f->redis.url};
    pthread_t t;
    pthread_create(&t, NULL, shared_waiter, &a);
    /* The waiter marks the lock wanted when it is answered held. */
    int64_t deadline = th_now_ms() + 10000;
    char key[128];
    snprintf(key, sizeof key, "fg:{%s}:lock", res);
    while (th_redis_cmd(&f->redis, NULL, 0, "HEXISTS %s #wait", key) != 1 &&
           th_now_ms() < deadline) {
        th_nap_ms(10);
    }
    assert_lk(f->c, lk_release(f->c, res, "w", NULL, &r), LK_RELEASED);
    assert_int_equal(r.published, 1);
    pthread_join(t, NULL);
    assert_int_equal(a.st, LK_ACQUIRED);
    assert_int_equal(a.r.shared, 1);
    assert_lk(f->c, lk_lock_status(f->c, res, &info), LK_OK);
    assert_int_equal(info.shared, 1);
}

static void test_list_shows_mode(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    lk_lock_entry e[4];
    size_t n = 0;
    char next[LK_RESOURCE_MAX + 1];

    assert_lk(f->c, lk_acquire_shared(f->c, "list.s", "a", 20000, 0, NULL, 0, &r), LK_ACQUIRED);
    assert_lk(f->c, lk_acquire_shared(f->c, "list.s", "b", 20000, 0, NULL, 0, &r), LK_ACQUIRED);
    assert_lk(f->c, lk_acquire(f->c, "list.x", "c", 20000, 0, NULL, &r), LK_ACQUIRED);
    assert_lk(f->c, lk_list_locks(f->c, "list.", NULL, 4, e, &n, next), LK_OK);
    assert_int_equal(n, 2);
    assert_string_equal(e[0].resource, "list.s");
    assert_int_equal(e[0].shared, 1);
    assert_int_equal(e[0].holders, 2);
    assert_string_equal(e[1].resource, "list.x");
    assert_int_equal(e[1].shared, 0);
    assert_int_equal(e[1].holders, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_coexist_exclusive_waits),
        cmocka_unit_test(test_writer_retry_writes_nothing),
        cmocka_unit_test(test_writer_behind_writer_registers_for_readers),
        cmocka_unit_test(test_each_shared_holder_has_its_lease),
        cmocka_unit_test(test_writers_preference),
        cmocka_unit_test(test_mode_mismatch),
        cmocka_unit_test(test_fair_shared_cancel),
        cmocka_unit_test(test_idempotent_shared),
        cmocka_unit_test(test_fair_shared),
        cmocka_unit_test(test_cancelled_fair_writer_lets_readers_in),
        cmocka_unit_test(test_shared_wait_wakes_on_release),
        cmocka_unit_test(test_list_shows_mode),
    };
    return cmocka_run_group_tests_name("locklib_shared", tests, group_setup, lk_group_teardown);
}
