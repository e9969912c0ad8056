/*
 * The operator's routes, end to end with the real binary, a real redis-server and the real
 * stores (LMDB, and PostgreSQL 15 shared by two gateways):
 *   - GET /livez answers 200 without a dependency and without auth, beside /readyz;
 *   - GET /locks pages the held locks in name order, never an owner, filters by prefix, and
 *     refuses bad prefix, after, limit and unknown or repeated query parameters (400 naming
 *     them);
 *   - POST /admin/release frees a held lock and fences its holder: the holder's /unlock and
 *     /renew are 409 not_owner, its write with its token is 409 stale_token with superseded_by
 *     even though nobody locked since, also after Redis FLUSHALL and a gateway restart, and
 *     the next /lock gets a larger token; a parked waiter is woken; the call needs the token
 *     when auth is on, and is logged and counted;
 *   - on a shared PostgreSQL store, the release through one gateway fences the holder's
 *     writes through another, after a FLUSHALL too, and the next grant is above it.
 * No test asserts timing; every wait is a loop on a condition with a deadline.
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

typedef struct ops_state {
    th_redis redis;
    char data[256];
    gwt_proc gw;
} ops_state;

static int setup(void **state)
{
    ops_state *st = calloc(1, sizeof *st);
    th_redis_start(&st->redis, 1, NULL);
    th_tempdir(st->data, sizeof st->data, "gwops");
    gwt_start(&st->gw, st->redis.url, st->data, NULL);
    *state = st;
    return 0;
}

static int teardown(void **state)
{
    ops_state *st = *state;
    int rc = 0;
    if (st->gw.pid > 0) {
        rc = gwt_stop(&st->gw); /* a sanitizer report makes the exit status non-zero */
    }
    th_redis_stop(&st->redis);
    th_rmtree(st->data);
    free(st);
    return rc == 0 ? 0 : -1;
}

/* POST /admin/release; returns the HTTP status, *fenced the fenced_token (0 when none). */
static long force(const gwt_proc *gw, const char *resource, long long *fenced, int *released)
{
    char body[512];
    gwt_resp r;
    snprintf(body, sizeof body, "{\"resource\":\"%s\",\"reason\":\"job 42 is stuck\"}",
             resource);
    gwt_post(gw, "/admin/release", body, &r);
    long status = r.status;
    *fenced = status == 200 ? gwt_int(&r, "fenced_token") : 0;
    *released = status == 200 && json_is_true(json_object_get(r.json, "released"));
    assert_null(strstr(r.body, "owner"));
    gwt_resp_free(&r);
    return status;
}

/* POST /renew for owner; returns the HTTP status and, on an error, the code in code. */
static long renew(const gwt_proc *gw, const char *resource, const char *owner, char *code,
                  size_t len)
{
    char body[512];
    gwt_resp r;
    snprintf(body, sizeof body, "{\"resource\":\"%s\",\"owner\":\"%s\"}", resource, owner);
    gwt_post(gw, "/renew", body, &r);
    long status = r.status;
    snprintf(code, len, "%s", gwt_str(&r, "error"));
    gwt_resp_free(&r);
    return status;
}

/* A write with token that must be refused as superseded: 409 stale_token, superseded_by
 * above token. Returns superseded_by. */
static long long assert_superseded(const gwt_proc *gw, const char *resource, long long token)
{
    gwt_resp r;
    long status = gwt_put_fenced(gw, resource, token, "late write", &r);
    gwt_assert_status(&r, 409, "stale_token");
    (void)status;
    long long by = gwt_int(&r, "superseded_by");
    assert_true(by > token);
    gwt_resp_free(&r);
    return by;
}

/* ---- /livez ----------------------------------------------------------------------------- */

static void test_livez(void **state)
{
    ops_state *st = *state;
    gwt_resp r;

    gwt_get(&st->gw, "/livez", &r);
    gwt_assert_status(&r, 200, NULL);
    assert_string_equal(gwt_str(&r, "status"), "ok");
    gwt_resp_free(&r);
    /* No dependency: Redis gone, /readyz says so, /livez still 200. */
    th_redis_kill(&st->redis);
    gwt_get(&st->gw, "/livez", &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
    gwt_get(&st->gw, "/readyz", &r);
    assert_int_equal(r.status, 503);
    gwt_resp_free(&r);
    gwt_post(&st->gw, "/livez", "{}", &r);
    assert_int_equal(r.status, 405);
    gwt_resp_free(&r);
    th_redis_restart(&st->redis);
}

/* ---- GET /locks --------------------------------------------------------------------------- */

static void test_list_pages_in_name_order(void **state)
{
    ops_state *st = *state;
    /* Locked out of order; two free ones and one released must not show. */
    static const char *const held[] = {"job.b", "job.a", "zeta", "job.c2", "job.c1", "alpha",
                                       "job:x", "job-y", "job_z", "job.d"};
    static const char *const want_all =
        "alpha,job-y,job.a,job.b,job.c1,job.c2,job.d,job:x,job_z,zeta";
    char list[4096];
    long long token = 0;

    for (size_t i = 0; i < sizeof held / sizeof held[0]; i++) {
        assert_int_equal(gwt_lock(&st->gw, held[i], "owner-list", &token), 200);
    }
    assert_int_equal(gwt_lock(&st->gw, "job.gone", "owner-list", &token), 200);
    assert_int_equal(gwt_unlock(&st->gw, "job.gone", "owner-list"), 200);
    /* Idle token keys beside them, as Redis keeps them for every name ever locked. */
    th_redis_cmd(&st->redis, NULL, 0, "SET fg:{job.idle}:fence 7");

    for (int limit = 1; limit <= 11; limit += 3) {
        assert_int_equal(gwt_list_all(&st->gw, NULL, limit, list, sizeof list), 10);
        assert_string_equal(list, want_all);
    }
    assert_int_equal(gwt_list_all(&st->gw, "job.", 2, list, sizeof list), 5);
    assert_string_equal(list, "job.a,job.b,job.c1,job.c2,job.d");
    assert_int_equal(gwt_list_all(&st->gw, "job.c", 100, list, sizeof list), 2);
    assert_int_equal(gwt_list_all(&st->gw, "nothing", 100, list, sizeof list), 0);

    /* Default limit, the entry's fields, and after as the cursor by hand. */
    gwt_resp r;
    gwt_get(&st->gw, "/locks?after=job.c2&prefix=job", &r);
    gwt_assert_status(&r, 200, NULL);
    json_t *locks = json_object_get(r.json, "locks");
    assert_int_equal((int)json_array_size(locks), 3); /* job.d, job:x, job_z */
    json_t *first = json_array_get(locks, 0);
    assert_string_equal(json_string_value(json_object_get(first, "resource")), "job.d");
    assert_int_equal(json_integer_value(json_object_get(first, "holds")), 1);
    assert_true(json_integer_value(json_object_get(first, "ttl_ms")) > 0);
    assert_int_equal(json_integer_value(json_object_get(first, "waiters")), 0);
    assert_true(json_is_null(json_object_get(r.json, "next")));
    gwt_resp_free(&r);

    /* Query values percent-encoded, as a browser's URLSearchParams sends "job:" (job%3A). */
    gwt_get(&st->gw, "/locks?prefix=job%3A", &r);
    gwt_assert_status(&r, 200, NULL);
    locks = json_object_get(r.json, "locks");
    assert_int_equal((int)json_array_size(locks), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(locks, 0), "resource")),
                        "job:x");
    gwt_resp_free(&r);
}

static void assert_bad_query(const ops_state *st, const char *query, const char *param)
{
    char path[600];
    gwt_resp r;
    snprintf(path, sizeof path, "/locks?%s", query);
    gwt_get(&st->gw, path, &r);
    gwt_assert_status(&r, 400, "invalid_request");
    if (strcmp(gwt_str(&r, "parameter"), param) != 0) {
        fail_msg("GET %s: parameter '%s', want '%s': %s", path, gwt_str(&r, "parameter"), param,
                 r.body);
    }
    assert_non_null(strstr(r.body, param));
    gwt_resp_free(&r);
}

static void test_list_refuses_bad_input(void **state)
{
    ops_state *st = *state;
    char big[260];

    static const char *const bad[][2] = {
        {"limit=0", "limit"},         {"limit=1001", "limit"},     {"limit=ten", "limit"},
        {"limit=-5", "limit"},        {"limit=5x", "limit"},       {"limit=", "limit"},
        {"prefix=a%2Fb", "prefix"},   {"prefix=a*", "prefix"},     {"after=a%20b", "after"},
        {"after=%7B", "after"},       {"owner=x", "owner"},        {"Limit=3", "Limit"},
        {"limit=3&limit=4", "limit"}, {"prefix=job%00x", "prefix"}, {"prefix=%zz", "prefix"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_bad_query(st, bad[i][0], bad[i][1]);
    }
    memset(big, 'a', 201);
    big[201] = '\0';
    static const char *const named[] = {"prefix", "after"};
    for (int i = 0; i < 2; i++) {
        char q[300];
        snprintf(q, sizeof q, "%s=%s", named[i], big);
        assert_bad_query(st, q, named[i]);
    }
    /* The bounds themselves are fine. */
    gwt_resp r;
    gwt_get(&st->gw, "/locks?limit=1000&prefix=&after=", &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
    gwt_get(&st->gw, "/locks?limit=1", &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
}

/* ---- POST /admin/release ------------------------------------------------------------------ */

static void test_force_release_fences_the_holder(void **state)
{
    ops_state *st = *state;
    long long token = 0, fenced = 0, next = 0;
    int released = 0;
    char code[64];

    assert_int_equal(gwt_lock(&st->gw, "stuck", "old-holder", &token), 200);
    assert_int_equal(gwt_put_fenced(&st->gw, "stuck", token, "before", NULL), 200);
    assert_int_equal(force(&st->gw, "stuck", &fenced, &released), 200);
    assert_true(released);
    assert_int_equal(fenced, token);

    /* Nobody has locked since: the holder is fenced all the same. */
    assert_int_equal(gwt_unlock(&st->gw, "stuck", "old-holder"), 409);
    assert_int_equal(renew(&st->gw, "stuck", "old-holder", code, sizeof code), 409);
    assert_string_equal(code, "not_owner");
    long long by = assert_superseded(&st->gw, "stuck", token);
    gwt_assert_value(&st->gw, "stuck", "before");
    char list[256];
    assert_int_equal(gwt_list_all(&st->gw, "stuck", 10, list, sizeof list), 0);
    gwt_await_metric(&st->gw, "fencegate_admin_release_total{outcome=\"released\"}", 1);
    assert_true(gwt_log_wait(&st->gw, "forced release of stuck"));
    assert_true(gwt_log_contains(&st->gw, "job 42 is stuck"));
    assert_false(gwt_log_contains(&st->gw, "old-holder"));

    /* Redis loses everything: the store still refuses the token, through a restart too. */
    assert_int_equal(th_redis_cmd(&st->redis, NULL, 0, "FLUSHALL"), 0);
    assert_superseded(&st->gw, "stuck", token);
    assert_int_equal(gwt_stop(&st->gw), 0);
    assert_int_equal(th_redis_cmd(&st->redis, NULL, 0, "FLUSHALL"), 0);
    gwt_start(&st->gw, st->redis.url, st->data, NULL);
    assert_true(assert_superseded(&st->gw, "stuck", token) >= by);
    gwt_assert_value(&st->gw, "stuck", "before");

    /* The next holder gets a larger token and writes. */
    assert_int_equal(gwt_lock(&st->gw, "stuck", "new-holder", &next), 200);
    assert_true(next > by);
    assert_int_equal(gwt_put_fenced(&st->gw, "stuck", next, "after", NULL), 200);
    assert_superseded(&st->gw, "stuck", token);

    /* A free lock: released false, nothing fenced. */
    assert_int_equal(gwt_unlock(&st->gw, "stuck", "new-holder"), 200);
    assert_int_equal(force(&st->gw, "stuck", &fenced, &released), 200);
    assert_false(released);
    assert_int_equal(force(&st->gw, "never.locked", &fenced, &released), 200);
    assert_false(released);

    gwt_await_metric(&st->gw, "fencegate_admin_release_total{outcome=\"not_held\"}", 2);
}

static void test_force_release_refuses_bad_input(void **state)
{
    ops_state *st = *state;
    static const char *const bodies[][2] = {
        {"{\"resource\":\"r\"}", "reason"},
        {"{\"resource\":\"r\",\"reason\":\"\"}", "reason"},
        {"{\"resource\":\"r\",\"reason\":7}", "reason"},
        {"{\"reason\":\"why\"}", "resource"},
        {"{\"resource\":\"a b\",\"reason\":\"why\"}", "resource"},
        {"{\"resource\":\"r\",\"reason\":\"why\",\"owner\":\"o\"}", "owner"},
        {"[1]", "object"},
    };
    long long token = 0;

    assert_int_equal(gwt_lock(&st->gw, "r", "keeps-it", &token), 200);
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        gwt_resp r;
        gwt_post(&st->gw, "/admin/release", bodies[i][0], &r);
        gwt_assert_status(&r, 400, NULL);
        if (strstr(r.body, bodies[i][1]) == NULL) {
            fail_msg("%s: the answer does not name %s: %s", bodies[i][0], bodies[i][1], r.body);
        }
        gwt_resp_free(&r);
    }
    /* Nothing was released by any of them. */
    assert_int_equal(gwt_put_fenced(&st->gw, "r", token, "still mine", NULL), 200);
    gwt_resp r;
    gwt_get(&st->gw, "/admin/release", &r);
    assert_int_equal(r.status, 405);
    gwt_resp_free(&r);
}

typedef struct waiter {
    const gwt_proc *gw;
    const char *resource;
    const char *owner;
    int fair;
    pthread_t thread;
    long status;
    long long token;
} waiter;

static void *waiter_main(void *arg)
{
    waiter *w = arg;
    char body[256];
    gwt_resp r;
    snprintf(body, sizeof body,
             "{\"resource\":\"%s\",\"owner\":\"%s\",\"wait_ms\":20000,\"ttl_ms\":60000,"
             "\"fair\":%s}",
             w->resource, w->owner, w->fair ? "true" : "false");
    gwt_post(w->gw, "/lock", body, &r);
    w->token = r.status == 200 ? gwt_int(&r, "token") : 0;
    w->status = r.status;
    gwt_resp_free(&r);
    return NULL;
}

static void test_force_release_wakes_a_parked_waiter(void **state)
{
    ops_state *st = *state;
    long long token = 0, fenced = 0;
    int released = 0;
    waiter w = {.gw = &st->gw, .resource = "queue", .owner = "next-in-line"};

    assert_int_equal(gwt_lock(&st->gw, "queue", "stuck-holder", &token), 200);
    assert_int_equal(pthread_create(&w.thread, NULL, waiter_main, &w), 0);
    gwt_await_metric(&st->gw, "fencegate_waiters", 1);
    /* The listing counts it. */
    gwt_resp r;
    gwt_get(&st->gw, "/locks?prefix=queue", &r);
    gwt_assert_status(&r, 200, NULL);
    json_t *e = json_array_get(json_object_get(r.json, "locks"), 0);
    assert_int_equal(json_integer_value(json_object_get(e, "waiters")), 1);
    gwt_resp_free(&r);

    assert_int_equal(force(&st->gw, "queue", &fenced, &released), 200);
    assert_true(released);
    pthread_join(w.thread, NULL);
    assert_int_equal(w.status, 200);
    assert_true(w.token > token);
    assert_superseded(&st->gw, "queue", token);
    assert_int_equal(gwt_put_fenced(&st->gw, "queue", w.token, "woken", NULL), 200);
}

/* Fair waiters queued in Redis keep their order: the forced release wakes the first, the
 * second waits for the first's unlock. */
static void test_force_release_keeps_the_fair_order(void **state)
{
    ops_state *st = *state;
    long long token = 0, fenced = 0;
    int released = 0;
    waiter first = {.gw = &st->gw, .resource = "fairq", .owner = "first", .fair = 1};
    waiter second = {.gw = &st->gw, .resource = "fairq", .owner = "second", .fair = 1};

    assert_int_equal(gwt_lock(&st->gw, "fairq", "stuck-holder", &token), 200);
    assert_int_equal(pthread_create(&first.thread, NULL, waiter_main, &first), 0);
    gwt_await_metric(&st->gw, "fencegate_waiters", 1);
    assert_int_equal(pthread_create(&second.thread, NULL, waiter_main, &second), 0);
    gwt_await_metric(&st->gw, "fencegate_waiters", 2);
    assert_int_equal(force(&st->gw, "fairq", &fenced, &released), 200);
    assert_true(released);
    pthread_join(first.thread, NULL);
    assert_int_equal(first.status, 200);
    assert_true(first.token > token);
    /* The second still waits behind the first's hold (a 60 s lease). */
    gwt_await_metric(&st->gw, "fencegate_waiters", 1);
    assert_int_equal(second.status, 0);
    assert_int_equal(gwt_unlock(&st->gw, "fairq", "first"), 200);
    pthread_join(second.thread, NULL);
    assert_int_equal(second.status, 200);
    assert_true(second.token > first.token);
}

static void test_force_release_needs_the_token(void **state)
{
    ops_state *st = *state;
    char file[400];
    long long token = 0;

    assert_int_equal(gwt_stop(&st->gw), 0);
    snprintf(file, sizeof file, "%s/admin-token", st->data);
    gwt_write_file(file, "s3cret-admin-token\n");
    const char *const args[] = {"--auth-token-file", file, NULL};
    gwt_start(&st->gw, st->redis.url, st->data, args);

    const char *const bearer[] = {"Authorization: Bearer s3cret-admin-token",
                                  "Content-Type: application/json", NULL};
    const char *const wrong[] = {"Authorization: Bearer nope", "Content-Type: application/json",
                                 NULL};
    static const char body[] = "{\"resource\":\"guarded\",\"reason\":\"test\"}";
    gwt_resp r;
    gwt_post(&st->gw, "/admin/release", body, &r);
    gwt_assert_status(&r, 401, "unauthorized");
    gwt_resp_free(&r);
    gwt_http(&st->gw, "POST", "/admin/release", wrong, body, strlen(body), 0, &r);
    gwt_assert_status(&r, 401, "unauthorized");
    gwt_resp_free(&r);
    gwt_get(&st->gw, "/locks", &r);
    gwt_assert_status(&r, 401, "unauthorized");
    gwt_resp_free(&r);
    gwt_get(&st->gw, "/livez", &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);

    static const char lock_body[] = "{\"resource\":\"guarded\",\"owner\":\"o\"}";
    gwt_http(&st->gw, "POST", "/lock", bearer, lock_body, strlen(lock_body), 0, &r);
    gwt_assert_status(&r, 200, NULL);
    token = gwt_int(&r, "token");
    gwt_resp_free(&r);
    gwt_http(&st->gw, "POST", "/admin/release", bearer, body, strlen(body), 0, &r);
    gwt_assert_status(&r, 200, NULL);
    assert_true(json_is_true(json_object_get(r.json, "released")));
    assert_int_equal(gwt_int(&r, "fenced_token"), token);
    gwt_resp_free(&r);
}

/* ---- A shared PostgreSQL store -------------------------------------------------------------- */

static void test_force_release_on_a_shared_store(void **state)
{
    (void)state;
    th_pg pg;
    th_redis redis;
    char store[512];
    gwt_proc a, b;
    long long token = 0, fenced = 0, next = 0;
    int released = 0;

    th_pg_start(&pg);
    th_redis_start(&redis, 1, NULL);
    th_pg_url(&pg, "postgres", store, sizeof store);
    const char *const args[] = {"--store", store, NULL};
    gwt_start(&a, redis.url, NULL, args);
    gwt_start(&b, redis.url, NULL, args);

    assert_int_equal(gwt_lock(&a, "shared", "holder-on-a", &token), 200);
    assert_int_equal(gwt_put_fenced(&a, "shared", token, "v1", NULL), 200);
    assert_int_equal(force(&b, "shared", &fenced, &released), 200);
    assert_true(released);
    assert_int_equal(fenced, token);
    assert_int_equal(gwt_unlock(&a, "shared", "holder-on-a"), 409);
    long long by = assert_superseded(&a, "shared", token);
    assert_superseded(&b, "shared", token);

    /* Redis loses its data: both gateways still refuse the token (the store says so). */
    assert_int_equal(th_redis_cmd(&redis, NULL, 0, "FLUSHALL"), 0);
    assert_true(assert_superseded(&a, "shared", token) >= by);
    assert_superseded(&b, "shared", token);
    /* A gateway that never saw the release hands out a token above it (the ledger). */
    assert_int_equal(gwt_lock(&a, "shared", "next-holder", &next), 200);
    assert_true(next > by);
    assert_int_equal(gwt_put_fenced(&b, "shared", next, "v2", NULL), 200);
    gwt_assert_value(&a, "shared", "v2");

    assert_int_equal(gwt_stop(&a), 0);
    assert_int_equal(gwt_stop(&b), 0);
    th_redis_stop(&redis);
    th_pg_stop(&pg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_livez, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list_pages_in_name_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list_refuses_bad_input, setup, teardown),
        cmocka_unit_test_setup_teardown(test_force_release_fences_the_holder, setup, teardown),
        cmocka_unit_test_setup_teardown(test_force_release_refuses_bad_input, setup, teardown),
        cmocka_unit_test_setup_teardown(test_force_release_wakes_a_parked_waiter, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_force_release_keeps_the_fair_order, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_force_release_needs_the_token, setup, teardown),
        cmocka_unit_test(test_force_release_on_a_shared_store),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
