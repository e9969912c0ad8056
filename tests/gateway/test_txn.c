/*
 * Fenced transactions (POST /resources) and fenced deletes (DELETE /resources/{r}), end to
 * end: the real fencegate binary on a real redis-server, on LMDB, and two gateways sharing
 * one real PostgreSQL. Locks are taken one resource at a time with POST /lock.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <libpq-fe.h>

#include "gw_test.h"
#include "harness.h"

typedef struct txn_state {
    th_redis redis;
    th_pg pg;
    gwt_proc gw;         /* LMDB, --max-value-bytes 4096 */
    gwt_proc a, b;       /* two gateways on PostgreSQL */
    char store[512];
} txn_state;

static int group_setup(void **state)
{
    txn_state *s = calloc(1, sizeof *s);
    const char *const args[] = {"--max-value-bytes", "4096", NULL};

    th_redis_start(&s->redis, 0, NULL);
    gwt_start(&s->gw, s->redis.url, NULL, args);
    th_pg_start(&s->pg);
    th_pg_url(&s->pg, "postgres", s->store, sizeof s->store);
    const char *const pg_args[] = {"--store", s->store, NULL};
    gwt_start(&s->a, s->redis.url, NULL, pg_args);
    gwt_start(&s->b, s->redis.url, NULL, pg_args);
    *state = s;
    return 0;
}

static int group_teardown(void **state)
{
    txn_state *s = *state;
    int rc = gwt_stop(&s->gw);
    rc |= gwt_stop(&s->a);
    rc |= gwt_stop(&s->b);
    th_pg_stop(&s->pg);
    th_redis_stop(&s->redis);
    free(s);
    return rc == 0 ? 0 : -1;
}

static void txn(const gwt_proc *gw, const char *json, gwt_resp *r)
{
    gwt_post(gw, "/resources", json, r);
}

/* The refused entry for resource in r's "refused", or NULL. */
static json_t *refused_of(const gwt_resp *r, const char *resource)
{
    json_t *list = json_object_get(r->json, "refused");
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) {
        if (strcmp(json_string_value(json_object_get(e, "resource")), resource) == 0) {
            return e;
        }
    }
    return NULL;
}

static void transfer_ok_on(const gwt_proc *gw, const char *x, const char *y)
{
    long long tx = 0, ty = 0;
    char body[512];
    gwt_resp r;
    assert_int_equal(gwt_lock(gw, x, "o1", &tx), 200);
    assert_int_equal(gwt_lock(gw, y, "o1", &ty), 200);
    snprintf(body, sizeof body,
             "{\"writes\":[{\"resource\":\"%s\",\"token\":%lld,\"value\":\"70\"},"
             "{\"resource\":\"%s\",\"token\":%lld,\"value_base64\":\"MzA=\","
             "\"content_type\":\"text/plain\"}]}",
             x, tx, y, ty);
    txn(gw, body, &r);
    gwt_assert_status(&r, 200, NULL);
    json_t *ws = json_object_get(r.json, "writes");
    assert_int_equal(json_array_size(ws), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(ws, 0), "resource")),
                        x);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(ws, 1), "token")), ty);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(ws, 1), "version")), 1);
    gwt_resp_free(&r);
    gwt_assert_value(gw, x, "70");
    gwt_assert_value(gw, y, "30");
    gwt_unlock(gw, x, "o1");
    gwt_unlock(gw, y, "o1");
}

static void test_commit_all(void **state)
{
    txn_state *s = *state;
    transfer_ok_on(&s->gw, "t-a", "t-b");
}

/* The demo's story: the client holding x and y pauses past its lease; another takes x and
 * writes it. The paused client's transaction is refused whole. */
static void test_paused_client_refused_whole(void **state)
{
    txn_state *s = *state;
    long long t1x = 0, t1y = 0, t2x = 0;
    char body[512];
    gwt_resp r;

    assert_int_equal(gwt_lock(&s->gw, "p-x", "c1", &t1x), 200);
    assert_int_equal(gwt_lock(&s->gw, "p-y", "c1", &t1y), 200);
    assert_int_equal(gwt_put_fenced(&s->gw, "p-x", t1x, "50", NULL), 200);
    assert_int_equal(gwt_put_fenced(&s->gw, "p-y", t1y, "50", NULL), 200);
    /* c1's lease on x ends (released here, as the expiry would), c2 takes x. */
    gwt_unlock(&s->gw, "p-x", "c1");
    assert_int_equal(gwt_lock(&s->gw, "p-x", "c2", &t2x), 200);
    snprintf(body, sizeof body,
             "{\"writes\":[{\"resource\":\"p-x\",\"token\":%lld,\"value\":\"0\"},"
             "{\"resource\":\"p-y\",\"token\":%lld,\"value\":\"100\"}]}",
             t1x, t1y);
    txn(&s->gw, body, &r);
    gwt_assert_status(&r, 409, "stale_token");
    assert_int_equal(json_array_size(json_object_get(r.json, "refused")), 1);
    json_t *e = refused_of(&r, "p-x");
    assert_non_null(e);
    assert_string_equal(json_string_value(json_object_get(e, "error")), "stale_token");
    assert_int_equal(json_integer_value(json_object_get(e, "superseded_by")), t2x);
    gwt_resp_free(&r);
    gwt_assert_value(&s->gw, "p-x", "50");
    gwt_assert_value(&s->gw, "p-y", "50");
    /* Storage's own check refuses it too, once x was written with the newer token. */
    assert_int_equal(gwt_put_fenced(&s->gw, "p-x", t2x, "60", NULL), 200);
    txn(&s->gw, body, &r);
    gwt_assert_status(&r, 409, "stale_token");
    e = refused_of(&r, "p-x");
    assert_int_equal(json_integer_value(json_object_get(e, "highest_token")), t2x);
    gwt_resp_free(&r);
    gwt_assert_value(&s->gw, "p-y", "50");
}

static void test_unknown_token_refused(void **state)
{
    txn_state *s = *state;
    long long t = 0;
    char body[512];
    gwt_resp r;
    assert_int_equal(gwt_lock(&s->gw, "u-a", "c1", &t), 200);
    snprintf(body, sizeof body,
             "{\"writes\":[{\"resource\":\"u-a\",\"token\":%lld,\"value\":\"1\"},"
             "{\"resource\":\"u-b\",\"token\":%lld,\"value\":\"2\"}]}",
             t, t + 100000);
    txn(&s->gw, body, &r);
    gwt_assert_status(&r, 403, "unknown_token");
    assert_non_null(refused_of(&r, "u-b"));
    assert_null(refused_of(&r, "u-a"));
    gwt_resp_free(&r);
    gwt_get(&s->gw, "/resources/u-a", &r);
    gwt_assert_status(&r, 404, "not_found");
    gwt_resp_free(&r);
}

static void test_delete_in_transaction_and_alone(void **state)
{
    txn_state *s = *state;
    long long t1 = 0, t2 = 0, t3 = 0;
    char body[512];
    gwt_resp r;

    assert_int_equal(gwt_lock(&s->gw, "d-a", "c1", &t1), 200);
    assert_int_equal(gwt_put_fenced(&s->gw, "d-a", t1, "old", NULL), 200);
    assert_int_equal(gwt_lock(&s->gw, "d-b", "c1", &t2), 200);
    snprintf(body, sizeof body,
             "{\"writes\":[{\"resource\":\"d-a\",\"token\":%lld,\"delete\":true},"
             "{\"resource\":\"d-b\",\"token\":%lld,\"value\":\"new\"}]}",
             t1, t2);
    txn(&s->gw, body, &r);
    gwt_assert_status(&r, 200, NULL);
    assert_true(json_is_true(
        json_object_get(json_array_get(json_object_get(r.json, "writes"), 0), "deleted")));
    gwt_resp_free(&r);
    gwt_get(&s->gw, "/resources/d-a", &r);
    gwt_assert_status(&r, 404, "not_found");
    gwt_resp_free(&r);
    gwt_unlock(&s->gw, "d-a", "c1");
    /* DELETE alone, with the token of the next holder; the old holder cannot write back. */
    assert_int_equal(gwt_lock(&s->gw, "d-a", "c2", &t3), 200);
    assert_int_equal(gwt_put_fenced(&s->gw, "d-a", t3, "again", NULL), 200);
    char tok[64];
    snprintf(tok, sizeof tok, "Fencing-Token: %lld", t3);
    const char *const h[] = {tok, NULL};
    gwt_http(&s->gw, "DELETE", "/resources/d-a", h, NULL, 0, 0, &r);
    gwt_assert_status(&r, 200, NULL);
    assert_true(json_is_true(json_object_get(r.json, "deleted")));
    assert_int_equal(gwt_int(&r, "highest_token"), t3);
    gwt_resp_free(&r);
    assert_int_equal(gwt_put_fenced(&s->gw, "d-a", t1, "late", NULL), 409);
    snprintf(tok, sizeof tok, "Fencing-Token: %lld", t1);
    gwt_http(&s->gw, "DELETE", "/resources/d-a", h, NULL, 0, 0, &r);
    gwt_assert_status(&r, 409, "stale_token");
    gwt_resp_free(&r);
    gwt_http(&s->gw, "DELETE", "/resources/d-a", NULL, NULL, 0, 0, &r);
    gwt_assert_status(&r, 400, "invalid_request");
    gwt_resp_free(&r);
}

static void test_bad_requests(void **state)
{
    txn_state *s = *state;
    static const struct {
        const char *body;
        long status;
        const char *needle;
    } cases[] = {
        {"{}", 400, "writes"},
        {"{\"writes\":[]}", 400, "1 to 64"},
        {"{\"writes\":[{\"resource\":\"a\",\"token\":1,\"value\":\"x\"}],\"x\":1}", 400, "'x'"},
        {"{\"writes\":[{\"resource\":\"a\",\"token\":1,\"value\":\"x\",\"y\":1}]}", 400,
         "writes[0]: unknown field 'y'"},
        {"{\"writes\":[{\"resource\":\"a\",\"token\":1,\"value\":\"x\"},"
         "{\"resource\":\"a\",\"token\":2,\"value\":\"y\"}]}",
         400, "both name a"},
        {"{\"writes\":[{\"resource\":\"a b\",\"token\":1,\"value\":\"x\"}]}", 400,
         "writes[0].resource"},
        {"{\"writes\":[{\"resource\":\"a\",\"token\":0,\"value\":\"x\"}]}", 400,
         "writes[0].token"},
        {"{\"writes\":[{\"resource\":\"a\",\"token\":1}]}", 400, "exactly one of"},
        {"{\"writes\":[{\"resource\":\"a\",\"token\":1,\"value\":\"x\",\"delete\":true}]}",
         400, "exactly one of"},
        {"{\"writes\":[{\"resource\":\"a\",\"token\":1,\"value_base64\":\"!!\"}]}", 400,
         "base64"},
        {"{\"writes\":[{\"resource\":\"a\",\"token\":1,\"delete\":true,"
         "\"content_type\":\"x\"}]}",
         400, "no content_type"},
    };
    gwt_resp r;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        txn(&s->gw, cases[i].body, &r);
        if (r.status != cases[i].status || strstr(r.body, cases[i].needle) == NULL) {
            fail_msg("case %zu: %ld %s", i, r.status, r.body);
        }
        gwt_resp_free(&r);
    }
    /* 65 writes. */
    char *big = malloc(65 * 64 + 64);
    size_t used = (size_t)sprintf(big, "{\"writes\":[");
    for (int i = 0; i < 65; i++) {
        used += (size_t)sprintf(big + used, "%s{\"resource\":\"m%d\",\"token\":1,\"value\":\"\"}",
                                i > 0 ? "," : "", i);
    }
    sprintf(big + used, "]}");
    txn(&s->gw, big, &r);
    gwt_assert_status(&r, 400, "invalid_request");
    gwt_resp_free(&r);
    free(big);
    /* A value over --max-value-bytes names the write and the limit. */
    char *val = malloc(5000 + 128);
    used = (size_t)sprintf(val, "{\"writes\":[{\"resource\":\"big\",\"token\":1,\"value\":\"");
    memset(val + used, 'x', 4097);
    sprintf(val + used + 4097, "\"}]}");
    txn(&s->gw, val, &r);
    gwt_assert_status(&r, 413, "payload_too_large");
    assert_non_null(strstr(r.body, "--max-value-bytes (4096)"));
    gwt_resp_free(&r);
    free(val);
    /* JSON only. */
    const char *const h[] = {"Content-Type: text/plain", NULL};
    gwt_http(&s->gw, "POST", "/resources", h, "{}", 2, 0, &r);
    gwt_assert_status(&r, 415, "unsupported_media_type");
    gwt_resp_free(&r);
}

/* Two gateways on one PostgreSQL: a transaction through one is refused because of a write
 * through the other, and a committed one is seen whole through both. */
static void test_two_gateways_on_postgres(void **state)
{
    txn_state *s = *state;
    long long tx = 0, ty = 0, t2 = 0;
    char body[512];
    gwt_resp r;

    transfer_ok_on(&s->a, "g-x", "g-y");
    gwt_assert_value(&s->b, "g-x", "70");
    gwt_assert_value(&s->b, "g-y", "30");
    assert_int_equal(gwt_lock(&s->a, "g-x", "c1", &tx), 200);
    assert_int_equal(gwt_lock(&s->a, "g-y", "c1", &ty), 200);
    gwt_unlock(&s->a, "g-y", "c1");
    assert_int_equal(gwt_lock(&s->b, "g-y", "c2", &t2), 200);
    assert_int_equal(gwt_put_fenced(&s->b, "g-y", t2, "31", NULL), 200);
    snprintf(body, sizeof body,
             "{\"writes\":[{\"resource\":\"g-x\",\"token\":%lld,\"value\":\"0\"},"
             "{\"resource\":\"g-y\",\"token\":%lld,\"value\":\"100\"}]}",
             tx, ty);
    txn(&s->a, body, &r);
    gwt_assert_status(&r, 409, "stale_token");
    assert_non_null(refused_of(&r, "g-y"));
    gwt_resp_free(&r);
    gwt_assert_value(&s->b, "g-x", "70");
    gwt_assert_value(&s->a, "g-y", "31");
}

/* Waits until GET /resources/resource through gw answers value; fails after 30 s. */
static void await_value(const gwt_proc *gw, const char *resource, const char *value)
{
    char path[128];
    int64_t deadline = th_now_ms() + 30000;
    snprintf(path, sizeof path, "/resources/%s", resource);
    for (;;) {
        gwt_resp r;
        gwt_get(gw, path, &r);
        int done = r.status == 200 && r.body != NULL && strcmp(r.body, value) == 0;
        gwt_resp_free(&r);
        if (done) {
            return;
        }
        if (th_now_ms() > deadline) {
            fail_msg("%s never became %s: the write answered outcome_unknown was not made",
                     resource, value);
        }
        th_nap_ms(20);
    }
}

/* PostgreSQL: a commit whose answer is lost is answered 503 outcome_unknown, not
 * backend_unavailable, for a PUT and for a transaction; once the commit goes on, the
 * change is there. A deferred trigger holds the commit on the test's advisory lock past the
 * store's deadline (5 s). */
static void test_lost_commit_answer_is_outcome_unknown(void **state)
{
    txn_state *s = *state;
    PGconn *t = PQconnectdb(s->store);
    long long ta = 0, tb = 0;
    char body[512];
    gwt_resp r;

    assert_int_equal(PQstatus(t), CONNECTION_OK);
    assert_int_equal(th_pg_hold_commits(t, "doubt-", 4243), 0);
    assert_int_equal(gwt_lock(&s->a, "doubt-a", "d1", &ta), 200);
    assert_int_equal(gwt_lock(&s->a, "doubt-b", "d1", &tb), 200);

    assert_int_equal(th_pq_exec(t, "SELECT pg_advisory_lock(4243)"), 0);
    assert_int_equal(gwt_put_fenced(&s->a, "doubt-a", ta, "one", &r), 503);
    gwt_assert_status(&r, 503, "outcome_unknown");
    gwt_resp_free(&r);
    assert_int_equal(th_pq_exec(t, "SELECT pg_advisory_unlock(4243)"), 0);
    await_value(&s->b, "doubt-a", "one");

    assert_int_equal(th_pq_exec(t, "SELECT pg_advisory_lock(4243)"), 0);
    snprintf(body, sizeof body,
             "{\"writes\":[{\"resource\":\"doubt-a\",\"token\":%lld,\"value\":\"two\"},"
             "{\"resource\":\"doubt-b\",\"token\":%lld,\"value\":\"two\"}]}",
             ta, tb);
    txn(&s->a, body, &r);
    gwt_assert_status(&r, 503, "outcome_unknown");
    gwt_resp_free(&r);
    assert_int_equal(th_pq_exec(t, "SELECT pg_advisory_unlock(4243)"), 0);
    await_value(&s->b, "doubt-a", "two");
    gwt_assert_value(&s->b, "doubt-b", "two");

    assert_int_equal(th_pq_exec(t, "DROP TRIGGER fg_test_hold ON fencegate_resources"), 0);
    assert_int_equal(th_pq_exec(t, "DROP FUNCTION fg_test_hold()"), 0);
    PQfinish(t);
    gwt_unlock(&s->a, "doubt-a", "d1");
    gwt_unlock(&s->a, "doubt-b", "d1");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commit_all),
        cmocka_unit_test(test_paused_client_refused_whole),
        cmocka_unit_test(test_unknown_token_refused),
        cmocka_unit_test(test_delete_in_transaction_and_alone),
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_two_gateways_on_postgres),
        cmocka_unit_test(test_lost_commit_answer_is_outcome_unknown),
    };
    return cmocka_run_group_tests_name("gateway_txn", tests, group_setup, group_teardown);
}
