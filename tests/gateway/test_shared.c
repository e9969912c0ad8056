/*
 * Shared (read) locks through the gateway, end to end with the real binary and a real
 * redis-server: POST /lock "mode": "shared" grants alongside other shared holders with the
 * resource's current token and mints nothing; an exclusive request waits for every shared
 * holder; writers' preference (a waiting exclusive request holds new shared ones back, on
 * any gateway); each shared holder renews and releases its own hold; a mode mismatch on
 * re-entry is 409 mode_mismatch; Idempotency-Key replays; GET /locks/{r} and GET /locks
 * show the mode and the number of holders, never an owner; a write (PUT, DELETE, a
 * transaction's) with a token granted in shared mode is 409 not_exclusive, also from an
 * exclusive holder of that token whose lease ran out before readers were granted it. Two
 * gateways share the Redis.
 * No test asserts timing; waits loop on a condition with a deadline.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gw_test.h"
#include "harness.h"

typedef struct shared_state {
    th_redis redis;
    gwt_proc gw[2];
} shared_state;

static int group_setup(void **state)
{
    shared_state *s = calloc(1, sizeof *s);
    if (s == NULL) {
        return -1;
    }
    th_redis_start(&s->redis, 0, NULL);
    gwt_start(&s->gw[0], s->redis.url, NULL, NULL);
    gwt_start(&s->gw[1], s->redis.url, NULL, NULL);
    *state = s;
    return 0;
}

static int group_teardown(void **state)
{
    shared_state *s = *state;
    gwt_stop(&s->gw[0]);
    gwt_stop(&s->gw[1]);
    th_redis_stop(&s->redis);
    free(s);
    return 0;
}

/* POST /lock with mode ("shared"/"exclusive"), owner and wait_ms; fills r. */
static void lock_mode(const gwt_proc *gw, const char *res, const char *owner, const char *mode,
                      long wait_ms, gwt_resp *r)
{
    char body[512];
    snprintf(body, sizeof body,
             "{\"resource\":\"%s\",\"owner\":\"%s\",\"mode\":\"%s\",\"ttl_ms\":20000,"
             "\"wait_ms\":%ld}",
             res, owner, mode, wait_ms);
    gwt_post(gw, "/lock", body, r);
}

static void test_shared_grants_coexist(void **state)
{
    shared_state *s = *state;
    gwt_resp r;
    long long x = 0;

    assert_int_equal(gwt_lock(&s->gw[0], "sh.co", "w0", &x), 200);
    assert_int_equal(gwt_unlock(&s->gw[0], "sh.co", "w0"), 200);

    lock_mode(&s->gw[0], "sh.co", "ra", "shared", 0, &r);
    gwt_assert_status(&r, 200, NULL);
    assert_int_equal(gwt_int(&r, "token"), x); /* the last exclusive token, nothing minted */
    assert_string_equal(gwt_str(&r, "mode"), "shared");
    gwt_resp_free(&r);
    lock_mode(&s->gw[1], "sh.co", "rb", "shared", 0, &r);
    gwt_assert_status(&r, 200, NULL);
    assert_int_equal(gwt_int(&r, "token"), x);
    gwt_resp_free(&r);

    gwt_get(&s->gw[0], "/locks/sh.co", &r);
    gwt_assert_status(&r, 200, NULL);
    assert_string_equal(gwt_str(&r, "mode"), "shared");
    assert_int_equal(gwt_int(&r, "holders"), 2);
    assert_int_equal(gwt_int(&r, "last_token"), x);
    assert_null(json_object_get(r.json, "owner"));
    gwt_resp_free(&r);

    /* Listed with its mode and holders, never an owner. */
    gwt_get(&s->gw[1], "/locks?prefix=sh.co", &r);
    gwt_assert_status(&r, 200, NULL);
    json_t *e = json_array_get(json_object_get(r.json, "locks"), 0);
    assert_non_null(e);
    assert_string_equal(json_string_value(json_object_get(e, "mode")), "shared");
    assert_int_equal(json_integer_value(json_object_get(e, "holders")), 2);
    assert_null(json_object_get(e, "owner"));
    gwt_resp_free(&r);

    /* An exclusive request is held until both shared holders left. */
    lock_mode(&s->gw[0], "sh.co", "wx", "exclusive", 0, &r);
    gwt_assert_status(&r, 409, "locked");
    gwt_resp_free(&r);
    assert_int_equal(gwt_unlock(&s->gw[1], "sh.co", "ra"), 200);
    lock_mode(&s->gw[0], "sh.co", "wx", "exclusive", 0, &r);
    gwt_assert_status(&r, 409, "locked");
    gwt_resp_free(&r);
    assert_int_equal(gwt_unlock(&s->gw[0], "sh.co", "rb"), 200);
    lock_mode(&s->gw[0], "sh.co", "wx", "exclusive", 0, &r);
    gwt_assert_status(&r, 200, NULL);
    assert_true(gwt_int(&r, "token") > x);
    assert_string_equal(gwt_str(&r, "mode"), "exclusive");
    gwt_resp_free(&r);
    gwt_get(&s->gw[0], "/locks/sh.co", &r);
    assert_string_equal(gwt_str(&r, "mode"), "exclusive");
    assert_int_equal(gwt_int(&r, "holders"), 1);
    gwt_resp_free(&r);
    assert_int_equal(gwt_unlock(&s->gw[0], "sh.co", "wx"), 200);
}

static void test_mode_mismatch_and_renew(void **state)
{
    shared_state *s = *state;
    gwt_resp r;

    lock_mode(&s->gw[0], "sh.mm", "a", "shared", 0, &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
    lock_mode(&s->gw[0], "sh.mm", "a", "exclusive", 0, &r);
    gwt_assert_status(&r, 409, "mode_mismatch");
    gwt_resp_free(&r);
    /* Re-entry in the same mode adds a hold. */
    lock_mode(&s->gw[1], "sh.mm", "a", "shared", 0, &r);
    gwt_assert_status(&r, 200, NULL);
    assert_int_equal(gwt_int(&r, "holds"), 2);
    gwt_resp_free(&r);
    gwt_post(&s->gw[1], "/renew", "{\"resource\":\"sh.mm\",\"owner\":\"a\",\"ttl_ms\":30000}", &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
    gwt_post(&s->gw[0], "/lock", "{\"resource\":\"sh.mm\",\"mode\":\"reader\"}", &r);
    gwt_assert_status(&r, 400, "invalid_request");
    gwt_resp_free(&r);
    assert_int_equal(gwt_unlock(&s->gw[0], "sh.mm", "a"), 200);
    assert_int_equal(gwt_unlock(&s->gw[0], "sh.mm", "a"), 200);
    gwt_get(&s->gw[0], "/locks/sh.mm", &r);
    assert_int_equal(json_is_false(json_object_get(r.json, "locked")), 1);
    gwt_resp_free(&r);
}

static void test_idempotent_shared(void **state)
{
    shared_state *s = *state;
    gwt_resp r;
    const char *const key[] = {"Idempotency-Key: 5e1f3c0a-shared-idem-0001", "Content-Type: application/json",
                               NULL};
    const char *body = "{\"resource\":\"sh.idem\",\"owner\":\"a\",\"mode\":\"shared\"}";

    gwt_http(&s->gw[0], "POST", "/lock", key, body, strlen(body), 0, &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
    gwt_http(&s->gw[1], "POST", "/lock", key, body, strlen(body), 0, &r);
    gwt_assert_status(&r, 200, NULL);
    assert_int_equal(gwt_int(&r, "holds"), 1);
    assert_string_equal(gwt_str(&r, "mode"), "shared");
    gwt_resp_free(&r);
    assert_int_equal(gwt_unlock(&s->gw[0], "sh.idem", "a"), 200);
}

typedef struct bg_lock {
    const gwt_proc *gw;
    const char *res, *owner, *mode;
    long wait_ms;
    long status;
    long long token;
} bg_lock;

static void *bg_lock_run(void *p)
{
    bg_lock *b = p;
    gwt_resp r;
    lock_mode(b->gw, b->res, b->owner, b->mode, b->wait_ms, &r);
    b->status = r.status;
    b->token = gwt_int(&r, "token");
    gwt_resp_free(&r);
    return NULL;
}

/* Writers' preference: an exclusive request waiting on one gateway holds back new shared
 * requests on the other; when the readers leave, the writer gets in first, then the
 * waiting readers, all of them. */
static void test_writers_preference(void **state)
{
    shared_state *s = *state;
    gwt_resp r;

    lock_mode(&s->gw[0], "sh.wp", "r1", "shared", 0, &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);

    bg_lock w = {&s->gw[0], "sh.wp", "w", "exclusive", 15000, 0, 0};
    pthread_t tw;
    pthread_create(&tw, NULL, bg_lock_run, &w);
    gwt_await_metric(&s->gw[0], "fencegate_waiters", 1);

    /* A new reader without a wait is refused while the writer waits. */
    lock_mode(&s->gw[1], "sh.wp", "r2", "shared", 0, &r);
    gwt_assert_status(&r, 409, "locked");
    gwt_resp_free(&r);
    /* Readers that wait, on both gateways, wait behind the writer. */
    bg_lock rd[3] = {{&s->gw[1], "sh.wp", "r2", "shared", 15000, 0, 0},
                     {&s->gw[1], "sh.wp", "r3", "shared", 15000, 0, 0},
                     {&s->gw[0], "sh.wp", "r4", "shared", 15000, 0, 0}};
    pthread_t tr[3];
    for (int i = 0; i < 3; i++) {
        pthread_create(&tr[i], NULL, bg_lock_run, &rd[i]);
    }
    gwt_await_metric(&s->gw[1], "fencegate_waiters", 2);
    gwt_await_metric(&s->gw[0], "fencegate_waiters", 2);
    assert_int_equal(w.status, 0);

    assert_int_equal(gwt_unlock(&s->gw[0], "sh.wp", "r1"), 200);
    pthread_join(tw, NULL);
    assert_int_equal(w.status, 200);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(rd[i].status, 0); /* still waiting: the writer holds */
    }
    assert_int_equal(gwt_unlock(&s->gw[0], "sh.wp", "w"), 200);
    for (int i = 0; i < 3; i++) {
        pthread_join(tr[i], NULL);
        assert_int_equal(rd[i].status, 200);
        assert_int_equal(rd[i].token, w.token);
    }
    gwt_get(&s->gw[0], "/locks/sh.wp", &r);
    assert_int_equal(gwt_int(&r, "holders"), 3);
    gwt_resp_free(&r);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(gwt_unlock(&s->gw[i % 2], "sh.wp", rd[i].owner), 200);
    }
}

/* An exclusive grant of resource for owner, written once with its token; then released.
 * Returns the token. */
static long long written_then_released(const gwt_proc *gw, const char *res, const char *value)
{
    long long t = 0;
    assert_int_equal(gwt_lock(gw, res, "w0", &t), 200);
    assert_int_equal(gwt_put_fenced(gw, res, t, value, NULL), 200);
    assert_int_equal(gwt_unlock(gw, res, "w0"), 200);
    return t;
}

/* PUT or DELETE of res with token; asserts 409 not_exclusive naming the shared mark. */
static void assert_not_exclusive(const gwt_proc *gw, const char *method, const char *res,
                                 long long token)
{
    char path[256], hdr[64];
    gwt_resp r;
    snprintf(path, sizeof path, "/resources/%s", res);
    snprintf(hdr, sizeof hdr, "Fencing-Token: %lld", token);
    const char *const h[] = {hdr, "Content-Type: text/plain", NULL};
    int put = strcmp(method, "PUT") == 0;
    gwt_http(gw, method, path, h, put ? "new" : NULL, put ? 3 : 0, 0, &r);
    gwt_assert_status(&r, 409, "not_exclusive");
    assert_string_equal(gwt_str(&r, "resource"), res);
    assert_int_equal(gwt_int(&r, "token"), token);
    assert_true(gwt_int(&r, "shared_mark") >= token);
    gwt_resp_free(&r);
}

/* A shared holder cannot write with its token; once an exclusive grant mints a larger
 * token, that one writes as usual. Each gateway has a data directory of its own: the
 * writes go to the one that granted the shared lock (on a shared PostgreSQL every gateway
 * sees the mark: tests/storage/test_txn.c). */
static void test_shared_token_cannot_write(void **state)
{
    shared_state *s = *state;
    gwt_resp r;
    long long t = written_then_released(&s->gw[0], "sh.w", "old");

    lock_mode(&s->gw[0], "sh.w", "ra", "shared", 0, &r);
    gwt_assert_status(&r, 200, NULL);
    assert_int_equal(gwt_int(&r, "token"), t);
    gwt_resp_free(&r);
    assert_not_exclusive(&s->gw[0], "PUT", "sh.w", t);
    assert_not_exclusive(&s->gw[0], "DELETE", "sh.w", t);
    gwt_assert_value(&s->gw[0], "sh.w", "old");
    assert_int_equal(gwt_unlock(&s->gw[1], "sh.w", "ra"), 200);

    long long t2 = 0;
    assert_int_equal(gwt_lock(&s->gw[1], "sh.w", "wx", &t2), 200);
    assert_true(t2 > t);
    assert_int_equal(gwt_put_fenced(&s->gw[0], "sh.w", t2, "new", NULL), 200);
    gwt_assert_value(&s->gw[0], "sh.w", "new");
    assert_int_equal(gwt_unlock(&s->gw[1], "sh.w", "wx"), 200);
}

/* An exclusive holder whose lease ran out, waking after readers were granted its token,
 * cannot change what they read. */
static void test_expired_writer_after_readers(void **state)
{
    shared_state *s = *state;
    gwt_resp r;

    gwt_post(&s->gw[0], "/lock",
             "{\"resource\":\"sh.late\",\"owner\":\"slow\",\"ttl_ms\":300}", &r);
    gwt_assert_status(&r, 200, NULL);
    long long t = gwt_int(&r, "token");
    gwt_resp_free(&r);
    assert_int_equal(gwt_put_fenced(&s->gw[0], "sh.late", t, "before", NULL), 200);
    /* Waits for the lease to run out: granted the same token, nothing minted. */
    lock_mode(&s->gw[0], "sh.late", "reader", "shared", 15000, &r);
    gwt_assert_status(&r, 200, NULL);
    assert_int_equal(gwt_int(&r, "token"), t);
    gwt_resp_free(&r);
    assert_not_exclusive(&s->gw[0], "PUT", "sh.late", t);
    gwt_assert_value(&s->gw[0], "sh.late", "before");
    assert_int_equal(gwt_unlock(&s->gw[1], "sh.late", "reader"), 200);
    /* Also once the readers left: the token was handed to readers. */
    assert_not_exclusive(&s->gw[0], "PUT", "sh.late", t);
}

/* A transaction with one write carrying a shared token is refused whole. */
static void test_txn_with_shared_token(void **state)
{
    shared_state *s = *state;
    gwt_resp r;
    char body[512];
    long long ts = written_then_released(&s->gw[0], "sh.tb", "b0"), ta = 0;

    assert_int_equal(gwt_lock(&s->gw[1], "sh.ta", "wa", &ta), 200);
    assert_int_equal(gwt_put_fenced(&s->gw[0], "sh.ta", ta, "a0", NULL), 200);
    lock_mode(&s->gw[0], "sh.tb", "rb", "shared", 0, &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
    snprintf(body, sizeof body,
             "{\"writes\":[{\"resource\":\"sh.ta\",\"token\":%lld,\"value\":\"a1\"},"
             "{\"resource\":\"sh.tb\",\"token\":%lld,\"value\":\"b1\"}]}",
             ta, ts);
    gwt_post(&s->gw[0], "/resources", body, &r);
    gwt_assert_status(&r, 409, "not_exclusive");
    json_t *refused = json_object_get(r.json, "refused");
    assert_int_equal(json_array_size(refused), 1);
    json_t *o = json_array_get(refused, 0);
    assert_string_equal(json_string_value(json_object_get(o, "resource")), "sh.tb");
    assert_string_equal(json_string_value(json_object_get(o, "error")), "not_exclusive");
    assert_true(json_integer_value(json_object_get(o, "shared_mark")) >= ts);
    gwt_resp_free(&r);
    gwt_assert_value(&s->gw[0], "sh.ta", "a0");
    gwt_assert_value(&s->gw[0], "sh.tb", "b0");
    assert_int_equal(gwt_unlock(&s->gw[0], "sh.ta", "wa"), 200);
    assert_int_equal(gwt_unlock(&s->gw[1], "sh.tb", "rb"), 200);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_grants_coexist),
        cmocka_unit_test(test_mode_mismatch_and_renew),
        cmocka_unit_test(test_idempotent_shared),
        cmocka_unit_test(test_writers_preference),
        cmocka_unit_test(test_shared_token_cannot_write),
        cmocka_unit_test(test_expired_writer_after_readers),
        cmocka_unit_test(test_txn_with_shared_token),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
