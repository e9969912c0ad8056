/*
 * The HTTP contract, end to end: every endpoint and every status code, spoken to
 * the real fencegate binary over HTTP, with a real redis-server behind it.
 *
 * The group setup starts one redis-server and one gateway (--max-value-bytes 4096, so the
 * 413 case is cheap). Each test uses its own resource names, so tests do not interfere.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "gw_test.h"
#include "harness.h"

#define MAX_VALUE 4096
#define GW_JSON_MAX_TEST (17 * 1024) /* over the gateway's 16 KiB cap on JSON bodies */

typedef struct api_state {
    th_redis redis;
    gwt_proc gw;
    gwt_proc aux;        /* a second gateway some tests start; the group teardown kills it */
} api_state;

static int group_setup(void **state)
{
    api_state *s = calloc(1, sizeof *s);
    const char *const args[] = {"--max-value-bytes", "4096", NULL};

    th_redis_start(&s->redis, 0, NULL);
    gwt_start(&s->gw, s->redis.url, NULL, args);
    *state = s;
    return 0;
}

static int group_teardown(void **state)
{
    api_state *s = *state;
    gwt_cleanup(&s->aux);
    int rc = gwt_stop(&s->gw);
    th_redis_stop(&s->redis);
    free(s);
    /* A non-zero exit (a sanitizer report, a failed shutdown) fails the group. */
    return rc == 0 ? 0 : -1;
}

/* POST /lock for resource with owner (NULL: none) and extra JSON members (may be ""),
 * asserting 200. Returns the token; the owner is copied into owner_out when given. */
static long long lock_ok(const gwt_proc *gw, const char *resource, const char *owner,
                         const char *extra, char *owner_out, size_t owner_len)
{
    char body[512];
    gwt_resp r;

    if (owner != NULL) {
        snprintf(body, sizeof body, "{\"resource\":\"%s\",\"owner\":\"%s\"%s}", resource, owner,
                 extra);
    } else {
        snprintf(body, sizeof body, "{\"resource\":\"%s\"%s}", resource, extra);
    }
    gwt_post(gw, "/lock", body, &r);
    gwt_assert_status(&r, 200, NULL);
    long long token = gwt_int(&r, "token");
    assert_true(token > 0);
    assert_string_equal(gwt_str(&r, "resource"), resource);
    if (owner_out != NULL) {
        snprintf(owner_out, owner_len, "%s", gwt_str(&r, "owner"));
    }
    gwt_resp_free(&r);
    return token;
}

static void post_expect(const gwt_proc *gw, const char *path, const char *body, long status,
                        const char *code)
{
    gwt_resp r;
    gwt_post(gw, path, body, &r);
    gwt_assert_status(&r, status, code);
    gwt_resp_free(&r);
}

static void put_value(const gwt_proc *gw, const char *resource, const char *token_header,
                      const char *value, gwt_resp *r)
{
    char path[300], fence[80];
    snprintf(path, sizeof path, "/resources/%s", resource);
    snprintf(fence, sizeof fence, "Fencing-Token: %s", token_header);
    const char *const headers[] = {fence, "Content-Type: text/plain", NULL};
    gwt_http(gw, "PUT", path, headers, value, strlen(value), 0, r);
}

static void test_health_and_ready(void **state)
{
    api_state *s = *state;
    gwt_resp r;

    gwt_get(&s->gw, "/healthz", &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
    /* Liveness answers 200 whatever headers a probe sends, a repeated Authorization too. */
    const char *const twice[] = {"Authorization: Bearer a", "Authorization: Bearer b", NULL};
    gwt_http(&s->gw, "GET", "/healthz", twice, NULL, 0, 0, &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
    gwt_get(&s->gw, "/readyz", &r);
    gwt_assert_status(&r, 200, NULL);
    assert_string_equal(gwt_str(&r, "redis"), "up");
    assert_string_equal(gwt_str(&r, "storage"), "up");
    gwt_resp_free(&r);
}

static void test_lock_generates_owner_and_status_hides_it(void **state)
{
    api_state *s = *state;
    char owner[200];
    gwt_resp r;

    long long token = lock_ok(&s->gw, "api.gen", NULL, "", owner, sizeof owner);
    assert_int_equal(strlen(owner), 32);

    gwt_post(&s->gw, "/lock", "{\"resource\":\"api.gen2\",\"ttl_ms\":1000}", &r);
    gwt_assert_status(&r, 200, NULL);
    assert_int_equal(gwt_int(&r, "holds"), 1);
    assert_int_equal(gwt_int(&r, "ttl_ms"), 1000);
    gwt_resp_free(&r);

    gwt_get(&s->gw, "/locks/api.gen", &r);
    gwt_assert_status(&r, 200, NULL);
    assert_true(json_is_true(json_object_get(r.json, "locked")));
    assert_int_equal(gwt_int(&r, "token"), token);
    assert_int_equal(gwt_int(&r, "holds"), 1);
    assert_int_equal(gwt_int(&r, "last_token"), token);
    assert_true(gwt_int(&r, "ttl_ms") > 0 && gwt_int(&r, "ttl_ms") <= 30000);
    assert_null(json_object_get(r.json, "owner"));
    assert_null(strstr(r.body, owner));
    gwt_resp_free(&r);

    gwt_get(&s->gw, "/locks/api.never", &r);
    gwt_assert_status(&r, 200, NULL);
    assert_true(json_is_false(json_object_get(r.json, "locked")));
    assert_int_equal(gwt_int(&r, "last_token"), 0);
    gwt_resp_free(&r);
}

static void test_reentrant_lock_and_unlock(void **state)
{
    api_state *s = *state;
    const char *body = "{\"resource\":\"api.re\",\"owner\":\"owner-re\"}";
    gwt_resp r;

    long long token = lock_ok(&s->gw, "api.re", "owner-re", "", NULL, 0);
    gwt_post(&s->gw, "/lock", body, &r);
    gwt_assert_status(&r, 200, NULL);
    assert_int_equal(gwt_int(&r, "token"), token);
    assert_int_equal(gwt_int(&r, "holds"), 2);
    gwt_resp_free(&r);

    gwt_post(&s->gw, "/unlock", body, &r);
    gwt_assert_status(&r, 200, NULL);
    assert_true(json_is_false(json_object_get(r.json, "released")));
    assert_int_equal(gwt_int(&r, "holds"), 1);
    gwt_resp_free(&r);
    gwt_post(&s->gw, "/unlock", body, &r);
    gwt_assert_status(&r, 200, NULL);
    assert_true(json_is_true(json_object_get(r.json, "released")));
    assert_int_equal(gwt_int(&r, "holds"), 0);
    gwt_resp_free(&r);

    /* Released: a further unlock is not the owner's to make, and says that nobody holds the
     * lock (not "it expired or belongs to someone else"); a new lock is fresher. */
    gwt_post(&s->gw, "/unlock", body, &r);
    gwt_assert_status(&r, 409, "not_owner");
    assert_non_null(strstr(gwt_str(&r, "message"), "nobody holds it"));
    gwt_resp_free(&r);
    assert_true(lock_ok(&s->gw, "api.re", "owner-re", "", NULL, 0) > token);
}

static void test_locked_answers_409_with_retry_after(void **state)
{
    api_state *s = *state;
    gwt_resp r;

    lock_ok(&s->gw, "api.busy", "holder-a", ",\"ttl_ms\":20000", NULL, 0);
    gwt_post(&s->gw, "/lock", "{\"resource\":\"api.busy\",\"owner\":\"holder-b\"}", &r);
    gwt_assert_status(&r, 409, "locked");
    assert_string_equal(gwt_str(&r, "resource"), "api.busy");
    long long retry_ms = gwt_int(&r, "retry_after_ms");
    assert_true(retry_ms > 0 && retry_ms <= 20000);
    assert_int_equal(atoll(r.retry_after), (retry_ms + 999) / 1000);
    gwt_resp_free(&r);

    /* The other owner can neither renew nor release it, and is told someone else holds it. */
    gwt_post(&s->gw, "/renew", "{\"resource\":\"api.busy\",\"owner\":\"holder-b\"}", &r);
    gwt_assert_status(&r, 409, "not_owner");
    assert_non_null(strstr(gwt_str(&r, "message"), "another owner holds it"));
    gwt_resp_free(&r);
    gwt_post(&s->gw, "/unlock", "{\"resource\":\"api.busy\",\"owner\":\"holder-b\"}", &r);
    gwt_assert_status(&r, 409, "not_owner");
    assert_non_null(strstr(gwt_str(&r, "message"), "another owner holds it"));
    gwt_resp_free(&r);
}

static void test_renew(void **state)
{
    api_state *s = *state;
    gwt_resp r;

    long long token = lock_ok(&s->gw, "api.renew", "renewer", ",\"ttl_ms\":500", NULL, 0);
    gwt_post(&s->gw, "/renew", "{\"resource\":\"api.renew\",\"owner\":\"renewer\",\"ttl_ms\":60000}",
             &r);
    gwt_assert_status(&r, 200, NULL);
    assert_int_equal(gwt_int(&r, "token"), token);
    assert_int_equal(gwt_int(&r, "ttl_ms"), 60000);
    gwt_resp_free(&r);
    gwt_get(&s->gw, "/locks/api.renew", &r);
    assert_true(gwt_int(&r, "ttl_ms") > 500);
    gwt_resp_free(&r);
}

static void send_with_key(const gwt_proc *gw, const char *path, const char *body,
                          const char *key, gwt_resp *r)
{
    char header[200];
    snprintf(header, sizeof header, "Idempotency-Key: %s", key);
    const char *const headers[] = {"Content-Type: application/json", header, NULL};
    gwt_http(gw, "POST", path, headers, body, strlen(body), 0, r);
}

static void test_idempotent_retries(void **state)
{
    api_state *s = *state;
    const char *body = "{\"resource\":\"api.idem\",\"owner\":\"idem-owner\"}";
    gwt_resp r;

    /* A retried /lock replays: same token, no second hold. */
    send_with_key(&s->gw, "/lock", body, "lock-key-0000001", &r);
    gwt_assert_status(&r, 200, NULL);
    long long token = gwt_int(&r, "token");
    gwt_resp_free(&r);
    send_with_key(&s->gw, "/lock", body, "lock-key-0000001", &r);
    gwt_assert_status(&r, 200, NULL);
    assert_int_equal(gwt_int(&r, "token"), token);
    assert_int_equal(gwt_int(&r, "holds"), 1);
    gwt_resp_free(&r);

    /* A second real hold, then a retried /unlock decrements once. */
    lock_ok(&s->gw, "api.idem", "idem-owner", "", NULL, 0);
    send_with_key(&s->gw, "/unlock", body, "unlock-key-000001", &r);
    gwt_assert_status(&r, 200, NULL);
    assert_int_equal(gwt_int(&r, "holds"), 1);
    gwt_resp_free(&r);
    send_with_key(&s->gw, "/unlock", body, "unlock-key-000001", &r);
    gwt_assert_status(&r, 200, NULL);
    assert_int_equal(gwt_int(&r, "holds"), 1);
    gwt_resp_free(&r);
    gwt_get(&s->gw, "/locks/api.idem", &r);
    assert_int_equal(gwt_int(&r, "holds"), 1);
    gwt_resp_free(&r);

    /* The same key for another operation or owner is refused, and a bad key is a 400. */
    send_with_key(&s->gw, "/renew", body, "lock-key-0000001", &r);
    gwt_assert_status(&r, 422, "idempotency_key_reused");
    gwt_resp_free(&r);
    send_with_key(&s->gw, "/lock", body, "bad key!", &r);
    gwt_assert_status(&r, 400, "invalid_request");
    gwt_resp_free(&r);
    /* A key is a credential (the same key replays the first answer, owner included): a
     * short, guessable one is refused, on every endpoint, before anything is done. */
    send_with_key(&s->gw, "/lock", body, "k1", &r);
    gwt_assert_status(&r, 400, "invalid_request");
    assert_non_null(strstr(gwt_str(&r, "message"), "at least 16 characters"));
    gwt_resp_free(&r);
    send_with_key(&s->gw, "/unlock", body, "fifteen-chars-0", &r);
    gwt_assert_status(&r, 400, "invalid_request");
    gwt_resp_free(&r);
    send_with_key(&s->gw, "/renew", body, "abc", &r);
    gwt_assert_status(&r, 400, "invalid_request");
    gwt_resp_free(&r);
    gwt_get(&s->gw, "/locks/api.idem", &r);
    assert_int_equal(gwt_int(&r, "holds"), 1);
    gwt_resp_free(&r);

    /* Without an owner, a retried /lock still replays (the owner is derived from the key). */
    send_with_key(&s->gw, "/lock", "{\"resource\":\"api.idem2\"}", "anon-key-0000001", &r);
    gwt_assert_status(&r, 200, NULL);
    char owner[64];
    snprintf(owner, sizeof owner, "%s", gwt_str(&r, "owner"));
    token = gwt_int(&r, "token");
    gwt_resp_free(&r);
    send_with_key(&s->gw, "/lock", "{\"resource\":\"api.idem2\"}", "anon-key-0000001", &r);
    gwt_assert_status(&r, 200, NULL);
    assert_string_equal(gwt_str(&r, "owner"), owner);
    assert_int_equal(gwt_int(&r, "token"), token);
    assert_int_equal(gwt_int(&r, "holds"), 1);
    gwt_resp_free(&r);
    /* Keys are kept per resource (as the OpenAPI says): on another resource the same key is
     * a new key, with its own owner and token. */
    send_with_key(&s->gw, "/lock", "{\"resource\":\"api.idem3\"}", "anon-key-0000001", &r);
    gwt_assert_status(&r, 200, NULL);
    assert_string_not_equal(gwt_str(&r, "owner"), owner);
    assert_true(gwt_int(&r, "token") > token);
    gwt_resp_free(&r);
}

/* The lease of `resource` in ms as GET /locks shows it, -1 when it is not locked. */
static long long lease_left(const gwt_proc *gw, const char *resource)
{
    char path[300];
    gwt_resp r;

    snprintf(path, sizeof path, "/locks/%s", resource);
    gwt_get(gw, path, &r);
    gwt_assert_status(&r, 200, NULL);
    long long ttl_ms = json_is_true(json_object_get(r.json, "locked")) ? gwt_int(&r, "ttl_ms") : -1;
    gwt_resp_free(&r);
    return ttl_ms;
}

/* A retried /renew replays its first answer byte for byte and does not extend the lease a
 * second time. */
static void test_renew_replay(void **state)
{
    api_state *s = *state;
    const char *body = "{\"resource\":\"api.renew-idem\",\"owner\":\"ren-owner\",\"ttl_ms\":3000}";
    gwt_resp first, again;

    long long token = lock_ok(&s->gw, "api.renew-idem", "ren-owner", ",\"ttl_ms\":60000", NULL, 0);
    send_with_key(&s->gw, "/renew", body, "renew-key-000001", &first);
    gwt_assert_status(&first, 200, NULL);
    assert_int_equal(gwt_int(&first, "token"), token);
    assert_int_equal(gwt_int(&first, "ttl_ms"), 3000);
    long long left = lease_left(&s->gw, "api.renew-idem");
    assert_true(left > 0 && left <= 3000);

    /* Let the lease run down visibly, so a second extension would show. */
    int64_t deadline = th_now_ms() + 10000;
    while ((left = lease_left(&s->gw, "api.renew-idem")) > 2500 && th_now_ms() < deadline) {
        th_nap_ms(20);
    }
    assert_true(left > 0 && left <= 2500);

    send_with_key(&s->gw, "/renew", body, "renew-key-000001", &again);
    gwt_assert_status(&again, 200, NULL);
    assert_string_equal(again.body, first.body);
    long long after = lease_left(&s->gw, "api.renew-idem");
    if (after <= 0 || after > left) {
        fail_msg("the replayed /renew extended the lease again: %lld ms left before, %lld after",
                 left, after);
    }
    gwt_resp_free(&first);
    gwt_resp_free(&again);

    /* A new key renews for real. */
    send_with_key(&s->gw, "/renew", body, "renew-key-000002", &again);
    gwt_assert_status(&again, 200, NULL);
    gwt_resp_free(&again);
    assert_true(lease_left(&s->gw, "api.renew-idem") > after);
}

static void expect_message(const gwt_proc *gw, const char *path, const char *body,
                           const char *const *needles);

static void test_bad_json_bodies(void **state)
{
    api_state *s = *state;
    static const char *const bodies[] = {
        "",                                                   /* empty */
        "not json",                                           /* not JSON */
        "[\"api.x\"]",                                        /* not an object */
        "\"api.x\"",                                          /* not an object */
        "{\"resource\":\"api.x\"} trailing",                  /* trailing bytes */
        "{\"resource\":\"api.x\",\"resource\":\"api.y\"}",    /* duplicate key */
        "{}",                                                 /* resource missing */
        "{\"resource\":42}",                                  /* wrong type */
        "{\"resource\":\"api.x\",\"owner\":[1]}",             /* wrong type */
        "{\"resource\":\"api.x\",\"ttl_ms\":\"30000\"}",      /* wrong type */
        "{\"resource\":\"api.x\",\"ttl_ms\":1e400}",          /* out of range */
        "{\"resource\":\"api.x\",\"ttl_ms\":99}",             /* below the minimum */
        "{\"resource\":\"api.x\",\"ttl_ms\":3600001}",        /* above the maximum */
        "{\"resource\":\"api.x\",\"ttl_ms\":-5}",             /* negative */
        "{\"resource\":\"api.x\",\"ttl_ms\":1000.5}",         /* not an integer */
        "{\"resource\":\"api.x\",\"ttl_ms\":99999999999999999999}", /* beyond int64 */
        "{\"resource\":\"api.x\",\"wait_ms\":60001}",         /* above the maximum */
        "{\"resource\":\"\"}",                                /* empty name */
        "{\"resource\":\"a b\"}",                             /* bad byte */
        "{\"resource\":\"a/b\"}",                             /* bad byte */
        "{\"resource\":\"caf\\u00e9\"}",                      /* non-ASCII name */
        "{\"resource\":\"a\\u0000b\"}",                       /* NUL */
        "{\"resource\":\"api.x\",\"owner\":\"\"}",            /* empty owner */
        "{\"resource\":\"api.x\",\"owner\":\"o w\"}",         /* bad owner */
        "{\"resource\":\"\xff\xfe\"}",                        /* not UTF-8 */
        NULL};
    char long_name[260], body[400];
    (void)state;

    for (int i = 0; bodies[i] != NULL; i++) {
        gwt_resp r;
        gwt_post(&s->gw, "/lock", bodies[i], &r);
        if (r.status != 400 || strcmp(gwt_str(&r, "error"), "invalid_request") != 0) {
            fail_msg("body %d (%s): expected 400 invalid_request, got %ld %s", i, bodies[i],
                     r.status, r.body);
        }
        gwt_resp_free(&r);
    }
    memset(long_name, 'r', 201);
    long_name[201] = '\0';
    snprintf(body, sizeof body, "{\"resource\":\"%s\"}", long_name);
    post_expect(&s->gw, "/lock", body, 400, "invalid_request");
    long_name[129] = '\0';
    snprintf(body, sizeof body, "{\"resource\":\"api.x\",\"owner\":\"%s\"}", long_name);
    post_expect(&s->gw, "/lock", body, 400, "invalid_request");
    post_expect(&s->gw, "/unlock", "{\"resource\":\"api.x\"}", 400, "invalid_request");
    post_expect(&s->gw, "/renew", "{\"owner\":\"o\"}", 400, "invalid_request");

    /* The message names the field. */
    gwt_resp r;
    gwt_post(&s->gw, "/lock", "{\"resource\":\"api.x\",\"wait_ms\":true}", &r);
    gwt_assert_status(&r, 400, "invalid_request");
    assert_non_null(strstr(gwt_str(&r, "message"), "wait_ms"));
    gwt_resp_free(&r);

    /* An unknown field is refused by name: a typo would otherwise silently take a default
     * (here the 30 s lease), and a newer client's field would be silently ignored. */
    static const char *const typo[] = {"field 'tll_ms' is not known", "ttl_ms", NULL};
    static const char *const colour[] = {"field 'colour' is not known", NULL};
    static const char *const ttl[] = {"field 'ttl_ms' is not known", NULL};
    static const char *const fair[] = {"field 'fair' is not known", NULL};
    expect_message(&s->gw, "/lock", "{\"resource\":\"api.unknown\",\"tll_ms\":100}", typo);
    expect_message(&s->gw, "/lock", "{\"resource\":\"api.unknown\",\"colour\":\"blue\"}",
                   colour);
    expect_message(&s->gw, "/unlock",
                   "{\"resource\":\"api.unknown\",\"owner\":\"o\",\"ttl_ms\":1000}", ttl);
    expect_message(&s->gw, "/renew",
                   "{\"resource\":\"api.unknown\",\"owner\":\"o\",\"fair\":true}", fair);
    gwt_get(&s->gw, "/locks/api.unknown", &r);
    assert_true(json_is_false(json_object_get(r.json, "locked")));
    gwt_resp_free(&r);
}

/* Posts body to path and asserts 400 invalid_request with every needle in the message. */
static void expect_message(const gwt_proc *gw, const char *path, const char *body,
                           const char *const *needles)
{
    gwt_resp r;
    gwt_post(gw, path, body, &r);
    gwt_assert_status(&r, 400, "invalid_request");
    for (int i = 0; needles[i] != NULL; i++) {
        if (strstr(gwt_str(&r, "message"), needles[i]) == NULL) {
            fail_msg("%s %s: the message lacks \"%s\": %s", path, body, needles[i], r.body);
        }
    }
    gwt_resp_free(&r);
}

/* A known field set to null is a wrong type, not an absent field: 400 naming it, in the
 * words every field error uses ("field 'ttl_ms' ..."). */
static void test_null_fields_are_refused(void **state)
{
    api_state *s = *state;
    static const struct {
        const char *path, *body, *field;
    } cases[] = {
        {"/lock", "{\"resource\":\"api.null\",\"owner\":null}", "owner"},
        {"/lock", "{\"resource\":null}", "resource"},
        {"/lock", "{\"resource\":\"api.null\",\"ttl_ms\":null}", "ttl_ms"},
        {"/lock", "{\"resource\":\"api.null\",\"wait_ms\":null}", "wait_ms"},
        {"/unlock", "{\"resource\":\"api.null\",\"owner\":null}", "owner"},
        {"/renew", "{\"resource\":\"api.null\",\"owner\":\"o\",\"ttl_ms\":null}", "ttl_ms"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char field[64];
        snprintf(field, sizeof field, "field '%s' must be", cases[i].field);
        const char *const needles[] = {field, "null", NULL};
        expect_message(&s->gw, cases[i].path, cases[i].body, needles);
    }
    /* A missing field and a bad value are worded the same way. */
    expect_message(&s->gw, "/unlock", "{\"resource\":\"api.null\"}",
                   (const char *const[]){"field 'owner' is required", NULL});
    expect_message(&s->gw, "/lock", "{\"resource\":\"api.null\",\"ttl_ms\":5}",
                   (const char *const[]){"field 'ttl_ms' must be an integer from 100", NULL});
    expect_message(&s->gw, "/lock", "{\"resource\":\"a b\"}",
                   (const char *const[]){"field 'resource' must be 1 to 200", NULL});
    /* Nothing was locked by the refused requests. */
    gwt_resp r;
    gwt_get(&s->gw, "/locks/api.null", &r);
    gwt_assert_status(&r, 200, NULL);
    assert_true(json_is_false(json_object_get(r.json, "locked")));
    gwt_resp_free(&r);
}

/* jansson's parse errors name a token ("near '1e400'"); the answer names the field too. */
static void test_parse_errors_name_the_field(void **state)
{
    api_state *s = *state;
    gwt_resp r;

    expect_message(&s->gw, "/lock", "{\"resource\":\"api.pe\",\"ttl_ms\":1e400}",
                   (const char *const[]){"field 'ttl_ms'", "overflow", NULL});
    expect_message(&s->gw, "/lock", "{\"resource\":\"api.pe\",\"owner\":\"ab\xff\"}",
                   (const char *const[]){"field 'owner'", "0xff", NULL});
    expect_message(&s->gw, "/lock", "{\"resource\":\"\xfe\"}",
                   (const char *const[]){"field 'resource'", NULL});
    /* The value of an earlier key has closed; the error is in a later one. */
    expect_message(&s->gw, "/renew",
                   "{\"resource\":\"api.pe\",\"meta\":{\"a\":[1,\"x:y\"]},\"owner\":\"o\","
                   "\"ttl_ms\":99999999999999999999}",
                   (const char *const[]){"field 'ttl_ms'", NULL});
    /* Inside an array value, the key that holds the array. */
    expect_message(&s->gw, "/lock", "{\"resource\":\"api.pe\",\"tags\":[{\"k\":1}, 1e999]}",
                   (const char *const[]){"field 'tags'", NULL});

    /* No member holds the error: the generic message, without a field. */
    static const char *const generic[] = {"{\"resource\":\"api.pe\"} trailing",
                                          "{\"resource\":\"api.pe\",}", "not json",
                                          "{\"resource\" \"api.pe\"}", ":::\"", "\":", NULL};
    for (int i = 0; generic[i] != NULL; i++) {
        gwt_post(&s->gw, "/lock", generic[i], &r);
        gwt_assert_status(&r, 400, "invalid_request");
        if (strstr(gwt_str(&r, "message"), "field '") != NULL) {
            fail_msg("%s: no field holds the error, yet: %s", generic[i], r.body);
        }
        gwt_resp_free(&r);
    }
}

static void test_paths_404_405_and_encoded_names(void **state)
{
    api_state *s = *state;
    gwt_resp r;

    gwt_get(&s->gw, "/nope", &r);
    gwt_assert_status(&r, 404, "not_found");
    gwt_resp_free(&r);
    gwt_get(&s->gw, "/resources/api.never-written", &r);
    gwt_assert_status(&r, 404, "not_found");
    gwt_resp_free(&r);

    gwt_http(&s->gw, "GET", "/lock", NULL, NULL, 0, 0, &r);
    gwt_assert_status(&r, 405, "method_not_allowed");
    assert_string_equal(r.allow, "POST");
    gwt_resp_free(&r);
    gwt_http(&s->gw, "PATCH", "/resources/api.x", NULL, NULL, 0, 0, &r);
    gwt_assert_status(&r, 405, "method_not_allowed");
    assert_string_equal(r.allow, "GET, HEAD, PUT, DELETE");
    gwt_resp_free(&r);

    /* A token that exists for "api.enc", so a decoded write to it would be accepted. */
    long long token = lock_ok(&s->gw, "api.enc", NULL, "", NULL, 0);
    char t[32];
    snprintf(t, sizeof t, "%lld", token);
    put_value(&s->gw, "api.enc%00b", t, "evil", &r);
    gwt_assert_status(&r, 400, "invalid_request");
    gwt_resp_free(&r);
    put_value(&s->gw, "api%2Eenc", t, "evil", &r);
    gwt_assert_status(&r, 400, "invalid_request");
    gwt_resp_free(&r);
    gwt_get(&s->gw, "/resources/api.enc", &r);
    gwt_assert_status(&r, 404, "not_found"); /* nothing was written to the decoded name */
    gwt_resp_free(&r);
    gwt_get(&s->gw, "/locks/api.enc%00b", &r);
    gwt_assert_status(&r, 400, "invalid_request");
    gwt_resp_free(&r);
    gwt_get(&s->gw, "/locks/a/b", &r);
    gwt_assert_status(&r, 400, "invalid_request");
    gwt_resp_free(&r);
}

static void test_fencing_token_header(void **state)
{
    api_state *s = *state;
    static const char *const bad[] = {"0", "-1", "+1", "abc", "1.5", "0x10", "9007199254740992",
                                      "99999999999999999999999", "1 2", "01", "00", "0 1",
                                      "\t", NULL};
    gwt_resp r;

    long long token = lock_ok(&s->gw, "api.ft", NULL, "", NULL, 0);
    for (int i = 0; bad[i] != NULL; i++) {
        put_value(&s->gw, "api.ft", bad[i], "v", &r);
        if (r.status != 400) {
            fail_msg("Fencing-Token '%s': expected 400, got %ld %s", bad[i], r.status, r.body);
        }
        gwt_resp_free(&r);
    }
    /* HTTP allows spaces and tabs around a field value: both sides alike, all accepted. */
    static const char *const spaced[] = {" %lld", "%lld ", "\t%lld\t", "  %lld \t", NULL};
    for (int i = 0; spaced[i] != NULL; i++) {
        char t[48];
        snprintf(t, sizeof t, spaced[i], token);
        put_value(&s->gw, "api.ft", t, "v", &r);
        if (r.status != 200 || gwt_int(&r, "token") != token || gwt_int(&r, "version") != i + 1) {
            fail_msg("Fencing-Token '%s': expected 200 with token %lld, version %d; got %ld %s",
                     t, token, i + 1, r.status, r.body);
        }
        gwt_resp_free(&r);
    }
    /* A leading zero stays refused with spaces around it. */
    char padded[48];
    snprintf(padded, sizeof padded, " 0%lld ", token);
    put_value(&s->gw, "api.ft", padded, "v", &r);
    gwt_assert_status(&r, 400, "invalid_request");
    gwt_resp_free(&r);

    const char *const missing[] = {"Content-Type: text/plain", NULL};
    gwt_http(&s->gw, "PUT", "/resources/api.ft", missing, "v", 1, 0, &r);
    gwt_assert_status(&r, 400, "invalid_request");
    gwt_resp_free(&r);
    const char *const twice[] = {"Fencing-Token: 1", "Fencing-Token: 1", NULL};
    gwt_http(&s->gw, "PUT", "/resources/api.ft", twice, "v", 1, 0, &r);
    gwt_assert_status(&r, 400, "invalid_request");
    gwt_resp_free(&r);
}

/* The next holder has locked but not yet written: the old token is already fenced off
 * (superseded_by), the new holder's write still goes through, and nothing of the old one's
 * lands. */
static void test_superseded_token_is_refused_before_next_write(void **state)
{
    api_state *s = *state;
    char t1[32], t2[32];
    gwt_resp r;

    long long token1 = lock_ok(&s->gw, "api.sup", "client-1", "", NULL, 0);
    gwt_post(&s->gw, "/unlock", "{\"resource\":\"api.sup\",\"owner\":\"client-1\"}", &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
    long long token2 = lock_ok(&s->gw, "api.sup", "client-2", "", NULL, 0);
    assert_true(token2 > token1);
    snprintf(t1, sizeof t1, "%lld", token1);
    snprintf(t2, sizeof t2, "%lld", token2);

    put_value(&s->gw, "api.sup", t1, "late write of client 1", &r);
    gwt_assert_status(&r, 409, "stale_token");
    assert_int_equal(gwt_int(&r, "token"), token1);
    assert_int_equal(gwt_int(&r, "superseded_by"), token2);
    assert_int_equal(gwt_int(&r, "highest_token"), 0);
    gwt_resp_free(&r);
    gwt_get(&s->gw, "/resources/api.sup", &r);
    gwt_assert_status(&r, 404, "not_found");
    gwt_resp_free(&r);

    put_value(&s->gw, "api.sup", t2, "written by client 2", &r);
    gwt_assert_status(&r, 200, NULL);
    assert_int_equal(gwt_int(&r, "version"), 1);
    gwt_resp_free(&r);
    gwt_get(&s->gw, "/resources/api.sup", &r);
    assert_string_equal(r.body, "written by client 2");
    gwt_resp_free(&r);
    gwt_post(&s->gw, "/unlock", "{\"resource\":\"api.sup\",\"owner\":\"client-2\"}", &r);
    gwt_resp_free(&r);

    /* Other resources take tokens in between, so the next grant's floor lifts the counter
     * (and its base) past token3: still 409 superseded, not 403 never issued. */
    long long token3 = lock_ok(&s->gw, "api.sup", "client-3", "", NULL, 0);
    gwt_post(&s->gw, "/unlock", "{\"resource\":\"api.sup\",\"owner\":\"client-3\"}", &r);
    gwt_resp_free(&r);
    long long other = lock_ok(&s->gw, "api.sup-other", "client-9", "", NULL, 0);
    long long token4 = lock_ok(&s->gw, "api.sup", "client-4", "", NULL, 0);
    assert_true(token4 > other && other > token3);
    char t3[32], t9[32];
    snprintf(t3, sizeof t3, "%lld", token3);
    snprintf(t9, sizeof t9, "%lld", other);
    put_value(&s->gw, "api.sup", t3, "late write of client 3", &r);
    gwt_assert_status(&r, 409, "stale_token");
    assert_int_equal(gwt_int(&r, "superseded_by"), token4);
    gwt_resp_free(&r);
    /* A token of the other resource in between lies below this one's run: never issued. */
    put_value(&s->gw, "api.sup", t9, "wrong resource", &r);
    gwt_assert_status(&r, 403, "unknown_token");
    gwt_resp_free(&r);
}

/* Kleppmann's figure: client 1's lease runs out while it is paused; client 2 locks with a
 * larger token and writes; client 1's late write with the old token is refused. */
static void test_stale_token_is_refused(void **state)
{
    api_state *s = *state;
    char t1[32], t2[32];
    gwt_resp r;

    long long token1 = lock_ok(&s->gw, "api.kl", "client-1", ",\"ttl_ms\":150", NULL, 0);
    int64_t deadline = th_now_ms() + 10000;
    int locked = 1;
    while (locked && th_now_ms() < deadline) {
        gwt_get(&s->gw, "/locks/api.kl", &r);
        locked = json_is_true(json_object_get(r.json, "locked"));
        gwt_resp_free(&r);
        if (locked) {
            th_nap_ms(20);
        }
    }
    assert_false(locked);
    long long token2 = lock_ok(&s->gw, "api.kl", "client-2", "", NULL, 0);
    assert_true(token2 > token1);
    snprintf(t1, sizeof t1, "%lld", token1);
    snprintf(t2, sizeof t2, "%lld", token2);

    put_value(&s->gw, "api.kl", t2, "written by client 2", &r);
    gwt_assert_status(&r, 200, NULL);
    assert_int_equal(gwt_int(&r, "token"), token2);
    assert_int_equal(gwt_int(&r, "highest_token"), token2);
    assert_int_equal(gwt_int(&r, "version"), 1);
    gwt_resp_free(&r);

    put_value(&s->gw, "api.kl", t1, "written by client 1", &r);
    gwt_assert_status(&r, 409, "stale_token");
    assert_int_equal(gwt_int(&r, "token"), token1);
    assert_int_equal(gwt_int(&r, "highest_token"), token2);
    gwt_resp_free(&r);

    gwt_get(&s->gw, "/resources/api.kl", &r);
    gwt_assert_status(&r, 200, NULL);
    assert_string_equal(r.body, "written by client 2");
    assert_string_equal(r.content_type, "text/plain");
    assert_string_equal(r.fencing_token, t2);
    assert_true(r.etag[0] != '\0');
    gwt_resp_free(&r);

    /* The same token may write again; the version moves on. */
    put_value(&s->gw, "api.kl", t2, "again", &r);
    gwt_assert_status(&r, 200, NULL);
    assert_int_equal(gwt_int(&r, "version"), 2);
    gwt_resp_free(&r);
}

static void test_forged_token_moves_nothing(void **state)
{
    api_state *s = *state;
    char t[32], forged[32];
    gwt_resp r;

    long long token = lock_ok(&s->gw, "api.forge", NULL, "", NULL, 0);
    snprintf(t, sizeof t, "%lld", token);
    snprintf(forged, sizeof forged, "%lld", token + 1000);
    put_value(&s->gw, "api.forge", forged, "forged", &r);
    gwt_assert_status(&r, 403, "unknown_token");
    gwt_resp_free(&r);
    gwt_get(&s->gw, "/resources/api.forge", &r);
    gwt_assert_status(&r, 404, "not_found");
    gwt_resp_free(&r);
    /* The high-water mark did not move, so the real holder still writes. */
    put_value(&s->gw, "api.forge", t, "real", &r);
    gwt_assert_status(&r, 200, NULL);
    assert_int_equal(gwt_int(&r, "highest_token"), token);
    gwt_resp_free(&r);
    /* A token never issued for a resource at all. */
    put_value(&s->gw, "api.forge-unused", "1", "forged", &r);
    gwt_assert_status(&r, 403, "unknown_token");
    gwt_resp_free(&r);
}

/* Tokens below the bottom of a resource's token run were never issued for it (the counter
 * was lifted past them to the floor), even though they are below its last token: such a
 * token, here one issued earlier for another resource, is refused. Once a higher token has
 * written, an old token below the run is stale, as it would be anyway. (A token of another
 * resource that equals this resource's current one is accepted: tokens are per resource,
 * test_concurrency.c, test_tokens_are_per_resource.) */
static void test_token_below_the_run_is_refused(void **state)
{
    api_state *s = *state;
    char t[32];
    gwt_resp r;

    /* Tokens of one resource push the process-wide floor up... */
    long long other = 0;
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "api.run-other%d", i);
        other = lock_ok(&s->gw, name, NULL, "", NULL, 0);
    }
    /* ...so the next resource's first token starts above them. */
    char owner[64];
    long long first = lock_ok(&s->gw, "api.run", NULL, "", owner, sizeof owner);
    assert_true(first > other);
    snprintf(t, sizeof t, "%lld", other);
    put_value(&s->gw, "api.run", t, "borrowed token", &r);
    gwt_assert_status(&r, 403, "unknown_token");
    gwt_resp_free(&r);
    gwt_get(&s->gw, "/resources/api.run", &r);
    gwt_assert_status(&r, 404, "not_found");
    gwt_resp_free(&r);
    snprintf(t, sizeof t, "%lld", first);
    put_value(&s->gw, "api.run", t, "real", &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
    snprintf(t, sizeof t, "%lld", other);
    put_value(&s->gw, "api.run", t, "borrowed token", &r);
    gwt_assert_status(&r, 409, "stale_token");
    assert_int_equal(gwt_int(&r, "highest_token"), first);
    gwt_resp_free(&r);
}

/* Request headers share a small per-connection pool with the answer's (so a parked waiter
 * costs little): about 2 KiB of headers are served, and far more is refused with 431. */
/* POST with a body of content type ctype (NULL: no Content-Type header). */
static void post_typed(const gwt_proc *gw, const char *path, const char *ctype,
                       const char *body, gwt_resp *r)
{
    char header[160];
    snprintf(header, sizeof header, "Content-Type: %s", ctype != NULL ? ctype : "");
    const char *const headers[] = {ctype != NULL ? header : NULL, NULL};
    gwt_http(gw, "POST", path, headers, body, strlen(body), 0, r);
}

/* The JSON endpoints take application/json only: the types a web page may send to any
 * origin without a CORS preflight (text/plain, forms) are a 415, so a page cannot take or
 * release locks on a gateway on localhost. A stored value is served with nosniff and a
 * sandboxing Content-Security-Policy, so a text/html value cannot run script. */
static void test_content_types(void **state)
{
    api_state *s = *state;
    gwt_resp r;
    static const char *const refused[] = {
        "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
        "application/jsonx", "application/json; charset=latin1", "", NULL};
    static const char *const accepted[] = {"application/json", "application/json; charset=utf-8",
                                           "Application/JSON;charset=\"UTF-8\"", NULL};
    const char *body = "{\"resource\":\"api.ctype\",\"owner\":\"o1\"}";

    for (int i = 0; refused[i] != NULL; i++) {
        post_typed(&s->gw, "/lock", refused[i], body, &r);
        gwt_assert_status(&r, 415, "unsupported_media_type");
        gwt_resp_free(&r);
    }
    post_typed(&s->gw, "/lock", NULL, body, &r); /* libcurl sends a form type by default */
    gwt_assert_status(&r, 415, "unsupported_media_type");
    gwt_resp_free(&r);
    post_typed(&s->gw, "/unlock", "text/plain", body, &r);
    gwt_assert_status(&r, 415, "unsupported_media_type");
    gwt_resp_free(&r);
    post_typed(&s->gw, "/renew", "text/plain", body, &r);
    gwt_assert_status(&r, 415, "unsupported_media_type");
    gwt_resp_free(&r);
    gwt_get(&s->gw, "/locks/api.ctype", &r);
    assert_true(json_is_false(json_object_get(r.json, "locked")));
    gwt_resp_free(&r);
    for (int i = 0; accepted[i] != NULL; i++) {
        post_typed(&s->gw, "/lock", accepted[i], body, &r);
        gwt_assert_status(&r, 200, NULL);
        gwt_resp_free(&r);
    }

    char fence[64];
    long long token = lock_ok(&s->gw, "api.html", NULL, "", NULL, 0);
    snprintf(fence, sizeof fence, "Fencing-Token: %lld", token);
    const char *const headers[] = {fence, "Content-Type: text/html", NULL};
    const char *html = "<script>alert(1)</script>";
    gwt_http(&s->gw, "PUT", "/resources/api.html", headers, html, strlen(html), 0, &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
    gwt_get(&s->gw, "/resources/api.html", &r);
    gwt_assert_status(&r, 200, NULL);
    assert_string_equal(r.content_type, "text/html");
    assert_string_equal(r.content_type_options, "nosniff");
    assert_string_equal(r.content_security_policy, "default-src 'none'; sandbox");
    gwt_resp_free(&r);
}

static void test_header_limit(void **state)
{
    api_state *s = *state;
    char header[4200];
    const char *headers[] = {header, NULL};
    gwt_resp r;

    snprintf(header, sizeof header, "X-Padding: %0*d", 2000, 0);
    gwt_http(&s->gw, "GET", "/locks/api.headers", headers, NULL, 0, 0, &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
    snprintf(header, sizeof header, "X-Padding: %0*d", 4000, 0);
    gwt_http(&s->gw, "GET", "/locks/api.headers", headers, NULL, 0, 0, &r);
    assert_int_equal(r.status, 431);
    gwt_resp_free(&r);
}

static void test_payload_too_large(void **state)
{
    api_state *s = *state;
    size_t big = 17 * 1024;
    char *json = malloc(big + 64);
    char *value = malloc(MAX_VALUE + 2);
    char t[32];
    gwt_resp r;

    /* A JSON body over 16 KiB, declared with Content-Length and streamed chunked. */
    int n = snprintf(json, big + 64, "{\"resource\":\"api.big\",\"pad\":\"");
    memset(json + n, 'x', big);
    strcpy(json + n + big, "\"}");
    post_expect(&s->gw, "/lock", json, 413, "payload_too_large");
    const char *const hdr[] = {"Content-Type: application/json", NULL};
    gwt_http(&s->gw, "POST", "/lock", hdr, json, strlen(json), 1, &r);
    gwt_assert_status(&r, 413, "payload_too_large");
    gwt_resp_free(&r);

    long long token = lock_ok(&s->gw, "api.big", NULL, "", NULL, 0);
    snprintf(t, sizeof t, "%lld", token);
    char fence[64];
    snprintf(fence, sizeof fence, "Fencing-Token: %s", t);
    const char *const headers[] = {fence, NULL};
    memset(value, 'v', MAX_VALUE + 1);
    gwt_http(&s->gw, "PUT", "/resources/api.big", headers, value, MAX_VALUE + 1, 0, &r);
    gwt_assert_status(&r, 413, "payload_too_large");
    gwt_resp_free(&r);
    gwt_http(&s->gw, "PUT", "/resources/api.big", headers, value, MAX_VALUE + 1, 1, &r);
    gwt_assert_status(&r, 413, "payload_too_large");
    gwt_resp_free(&r);
    gwt_get(&s->gw, "/resources/api.big", &r);
    gwt_assert_status(&r, 404, "not_found"); /* never truncated and stored */
    gwt_resp_free(&r);

    /* Exactly the maximum is fine, streamed or not, and comes back byte for byte. */
    gwt_http(&s->gw, "PUT", "/resources/api.big", headers, value, MAX_VALUE, 1, &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
    gwt_get(&s->gw, "/resources/api.big", &r);
    gwt_assert_status(&r, 200, NULL);
    assert_int_equal(r.len, MAX_VALUE);
    assert_memory_equal(r.body, value, MAX_VALUE);
    assert_string_equal(r.content_type, "application/octet-stream");
    gwt_resp_free(&r);
    free(json);
    free(value);
}

/* The value of the sample `series` (name and labels, exactly as rendered) in /metrics, or -1
 * when it is absent. */
static long long metric(const gwt_proc *gw, const char *series)
{
    char needle[256];
    gwt_resp r;
    long long value = -1;

    snprintf(needle, sizeof needle, "\n%s ", series);
    gwt_get(gw, "/metrics", &r);
    gwt_assert_status(&r, 200, NULL);
    const char *at = strstr(r.body, needle);
    if (at != NULL) {
        value = atoll(at + strlen(needle));
    }
    gwt_resp_free(&r);
    return value;
}

/* Waits up to 10 s for a counter to reach want: requests are counted when MHD completes
 * them, which may be just after the client has read the answer. Returns the last value. */
static long long metric_wait(const gwt_proc *gw, const char *series, long long want)
{
    int64_t deadline = th_now_ms() + 10000;
    long long value = metric(gw, series);
    while (value < want && th_now_ms() < deadline) {
        th_nap_ms(10);
        value = metric(gw, series);
    }
    return value;
}

/* A PUT refused with 413 before its handler runs (declared length, streamed body) is a write
 * outcome "too_large"; a 413 of another route is not a write at all. */
static void test_too_large_writes_are_counted(void **state)
{
    api_state *s = *state;
    const char *too_large = "fencegate_write_total{outcome=\"too_large\"}";
    const char *answered_413 = "fencegate_http_responses_total{code=\"413\"}";
    char *value = malloc(MAX_VALUE + 1);
    char *json = malloc(GW_JSON_MAX_TEST + 64);
    char fence[64];
    gwt_resp r;

    long long token = lock_ok(&s->gw, "api.toolarge", NULL, "", NULL, 0);
    long long before = metric(&s->gw, too_large);
    long long before_413 = metric(&s->gw, answered_413);
    assert_true(before >= 0 && before_413 >= 0);

    int n = snprintf(json, GW_JSON_MAX_TEST + 64, "{\"resource\":\"api.toolarge\",\"pad\":\"");
    memset(json + n, 'x', GW_JSON_MAX_TEST);
    strcpy(json + n + GW_JSON_MAX_TEST, "\"}");
    post_expect(&s->gw, "/lock", json, 413, "payload_too_large");

    snprintf(fence, sizeof fence, "Fencing-Token: %lld", token);
    const char *const headers[] = {fence, NULL};
    memset(value, 'v', MAX_VALUE + 1);
    for (int chunked = 0; chunked <= 1; chunked++) {
        gwt_http(&s->gw, "PUT", "/resources/api.toolarge", headers, value, MAX_VALUE + 1,
                 chunked, &r);
        gwt_assert_status(&r, 413, "payload_too_large");
        gwt_resp_free(&r);
    }
    /* All three 413s completed, and only the two PUTs are writes. */
    assert_int_equal(metric_wait(&s->gw, answered_413, before_413 + 3), before_413 + 3);
    assert_int_equal(metric(&s->gw, too_large), before + 2);
    free(value);
    free(json);
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
    gwt_post(w->gw, "/lock",
             "{\"resource\":\"api.wait\",\"owner\":\"waiter\",\"wait_ms\":30000}", &w->r);
    return NULL;
}

/* The holder's lease (60 s) is longer than the waiter's wait (30 s): only the release
 * message can let the waiter in. */
static void test_waiter_is_woken_by_release(void **state)
{
    api_state *s = *state;
    waiter w = {&s->gw, {0}};
    pthread_t t;

    long long token = lock_ok(&s->gw, "api.wait", "holder", ",\"ttl_ms\":60000", NULL, 0);
    assert_int_equal(pthread_create(&t, NULL, wait_for_lock, &w), 0);
    int64_t deadline = th_now_ms() + 10000;
    while (subscribers(&s->redis, "fg:{api.wait}:released") < 1 && th_now_ms() < deadline) {
        th_nap_ms(10);
    }
    assert_true(subscribers(&s->redis, "fg:{api.wait}:released") >= 1);
    post_expect(&s->gw, "/unlock", "{\"resource\":\"api.wait\",\"owner\":\"holder\"}", 200, NULL);
    pthread_join(t, NULL);
    gwt_assert_status(&w.r, 200, NULL);
    assert_true(gwt_int(&w.r, "token") > token);
    gwt_resp_free(&w.r);
}

static void test_metrics_never_carry_owners_or_names(void **state)
{
    api_state *s = *state;
    char owner[64];
    gwt_resp r;

    lock_ok(&s->gw, "api.metrics-secret-name", "metrics-secret-owner", "", NULL, 0);
    lock_ok(&s->gw, "api.metrics2", NULL, "", owner, sizeof owner);
    gwt_get(&s->gw, "/metrics", &r);
    gwt_assert_status(&r, 200, NULL);
    assert_non_null(strstr(r.content_type, "text/plain"));
    static const char *const want[] = {
        "fencegate_acquire_total{outcome=\"acquired\"}", "fencegate_acquire_total{outcome=\"locked\"}",
        "fencegate_release_total{outcome=\"released\"}", "fencegate_renew_total{outcome=\"renewed\"}",
        "fencegate_write_total{outcome=\"accepted\"}", "fencegate_write_total{outcome=\"stale\"}",
        "fencegate_locks_held ", "fencegate_redis_up 1", "fencegate_token_floor_corrections_total ",
        "fencegate_redis_fast_fails_total 0",
        "fencegate_http_request_duration_seconds_bucket{method=\"POST\",route=\"/lock\",le=\"+Inf\"}",
        NULL};
    for (int i = 0; want[i] != NULL; i++) {
        if (strstr(r.body, want[i]) == NULL) {
            fail_msg("/metrics lacks %s:\n%s", want[i], r.body);
        }
    }
    assert_null(strstr(r.body, "metrics-secret"));
    assert_null(strstr(r.body, owner));
    gwt_resp_free(&r);

    /* Nor does the log. */
    assert_true(gwt_log_wait(&s->gw, "GET /metrics 200"));
    assert_false(gwt_log_contains(&s->gw, "metrics-secret-owner"));
    assert_false(gwt_log_contains(&s->gw, owner));
}

/* What the alert rules (deploy/prometheus/alerts.yml) compute "near the limit" and "store
 * down" from: the limits in force, the open connections, the store probe, the storage
 * writer's commit latency, and the ledger's failures. */
static void test_metrics_export_limits_store_and_commits(void **state)
{
    api_state *s = *state;
    gwt_proc *gw = &s->aux;
    char fence[64];
    gwt_resp r;

    const char *const args[] = {"--max-connections", "40", "--max-waiters", "10", NULL};
    gwt_start(gw, s->redis.url, NULL, args);
    assert_int_equal(metric(gw, "fencegate_max_connections"), 40);
    assert_int_equal(metric(gw, "fencegate_max_waiters"), 10);
    assert_int_equal(metric(gw, "fencegate_store_up"), 1);
    assert_int_equal(metric(gw, "fencegate_ledger_uncovered_total"), 0);
    long long open = metric(gw, "fencegate_connections"); /* the scrape's own, at least */
    assert_true(open >= 1 && open <= 40);
    assert_int_equal(metric(gw, "fencegate_store_commit_duration_seconds_count"), 0);

    snprintf(fence, sizeof fence, "Fencing-Token: %lld",
             lock_ok(gw, "api.commit", NULL, "", NULL, 0));
    const char *const headers[] = {fence, NULL};
    gwt_http(gw, "PUT", "/resources/api.commit", headers, "v", 1, 0, &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
    assert_int_equal(metric_wait(gw, "fencegate_store_commit_duration_seconds_count", 1), 1);
    assert_int_equal(metric(gw, "fencegate_store_commit_duration_seconds_bucket{le=\"+Inf\"}"),
                     1);
    assert_int_equal(gwt_stop(gw), 0);
}

/* An owner-less /lock with an Idempotency-Key derives its owner from a secret kept in the
 * data directory, so a retry after a gateway restart (same data, same Redis) replays the
 * first answer: same owner, same token, no second hold. */
static void test_idempotent_lock_survives_restart(void **state)
{
    api_state *s = *state;
    gwt_proc *gw = &s->aux;
    const char *body = "{\"resource\":\"api.restart-idem\",\"ttl_ms\":60000}";
    char data[256], secret[300], owner[64];
    struct stat sb;
    gwt_resp r;

    th_tempdir(data, sizeof data, "gwsecret");
    gwt_start(gw, s->redis.url, data, NULL);
    send_with_key(gw, "/lock", body, "restart-key-0001", &r);
    gwt_assert_status(&r, 200, NULL);
    snprintf(owner, sizeof owner, "%s", gwt_str(&r, "owner"));
    long long token = gwt_int(&r, "token");
    assert_int_equal(gwt_int(&r, "holds"), 1);
    gwt_resp_free(&r);
    assert_int_equal(gwt_stop(gw), 0);

    /* The secret lives in the store (store_secret(), tests/storage test_secret_*), whose
     * files are private: no separate secret file is written. */
    snprintf(secret, sizeof secret, "%s/owner-secret", data);
    assert_int_equal(stat(secret, &sb), -1);
    snprintf(secret, sizeof secret, "%s/data.mdb", data);
    assert_int_equal(stat(secret, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);

    gwt_start(gw, s->redis.url, data, NULL);
    send_with_key(gw, "/lock", body, "restart-key-0001", &r);
    gwt_assert_status(&r, 200, NULL);
    assert_string_equal(gwt_str(&r, "owner"), owner);
    assert_int_equal(gwt_int(&r, "token"), token);
    assert_int_equal(gwt_int(&r, "holds"), 1);
    gwt_resp_free(&r);
    gwt_get(gw, "/locks/api.restart-idem", &r);
    assert_int_equal(gwt_int(&r, "holds"), 1); /* replayed, not re-entered */
    gwt_resp_free(&r);
    assert_int_equal(metric(gw, "fencegate_acquire_total{outcome=\"replayed\"}"), 1);
    assert_int_equal(gwt_stop(gw), 0);
    th_rmtree(data);
}

/* --map-size reaches the storage: a 1 MiB map holds only a few 200 KiB values, then writes
 * answer 507 and change nothing. */
static void test_map_size_limits_the_store(void **state)
{
    api_state *s = *state;
    gwt_proc *gw = &s->aux;
    const size_t value_len = 200 * 1024;
    char *value = malloc(value_len);
    int accepted = 0, full_at = -1;
    gwt_resp r;

    const char *const args[] = {"--map-size", "1048576", "--max-value-bytes", "262144", NULL};
    gwt_start(gw, s->redis.url, NULL, args);
    memset(value, 'm', value_len);
    for (int i = 0; i < 12 && full_at < 0; i++) {
        char resource[32], path[64], fence[64];
        snprintf(resource, sizeof resource, "api.map%d", i);
        snprintf(path, sizeof path, "/resources/%s", resource);
        snprintf(fence, sizeof fence, "Fencing-Token: %lld",
                 lock_ok(gw, resource, NULL, "", NULL, 0));
        const char *const headers[] = {fence, NULL};
        gwt_http(gw, "PUT", path, headers, value, value_len, 0, &r);
        if (r.status == 507) {
            gwt_assert_status(&r, 507, "insufficient_storage");
            full_at = i;
        } else {
            gwt_assert_status(&r, 200, NULL);
            accepted++;
        }
        gwt_resp_free(&r);
    }
    if (accepted == 0 || full_at < 0) {
        fail_msg("a 1 MiB map took %d writes of 200 KiB and never answered 507", accepted);
    }
    char path[64];
    snprintf(path, sizeof path, "/resources/api.map%d", full_at);
    gwt_get(gw, path, &r);
    gwt_assert_status(&r, 404, "not_found"); /* the refused write left nothing */
    gwt_resp_free(&r);
    assert_int_equal(gwt_stop(gw), 0);
    free(value);
}

static void test_auth(void **state)
{
    api_state *s = *state;
    gwt_proc *gw = &s->aux;
    char token_file[300];
    gwt_resp r;

    char dir[256];
    th_tempdir(dir, sizeof dir, "gwauth");
    snprintf(token_file, sizeof token_file, "%s/token", dir);
    gwt_write_file(token_file, "correct-horse\n");
    const char *const args[] = {"--auth-token-file", token_file, "--log-format", "json", NULL};
    gwt_start(gw, s->redis.url, NULL, args);

    gwt_get(gw, "/healthz", &r); /* liveness needs no token */
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
    /* Nor does it look at the header at all: a repeated one, right or wrong, is still 200,
     * while every other path refuses it. */
    const char *const twice_wrong[] = {"Authorization: Bearer nope", "Authorization: Bearer x",
                                       NULL};
    gwt_http(gw, "GET", "/healthz", twice_wrong, NULL, 0, 0, &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
    gwt_http(gw, "GET", "/readyz", twice_wrong, NULL, 0, 0, &r);
    gwt_assert_status(&r, 400, "invalid_request");
    gwt_resp_free(&r);
    /* Another method on the public path is a 405, as without auth, not a 401. */
    gwt_http(gw, "POST", "/healthz", NULL, "", 0, 0, &r);
    gwt_assert_status(&r, 405, "method_not_allowed");
    gwt_resp_free(&r);
    gwt_get(gw, "/readyz", &r);
    gwt_assert_status(&r, 401, "unauthorized");
    assert_string_equal(r.www_authenticate, "Bearer");
    assert_non_null(strstr(gwt_str(&r, "message"), "none was sent"));
    gwt_resp_free(&r);
    gwt_get(gw, "/nope", &r); /* paths are not revealed either */
    gwt_assert_status(&r, 401, "unauthorized");
    gwt_resp_free(&r);
    /* A wrong token and a missing one say which happened. */
    const char *const wrong[] = {"Authorization: Bearer correct-horsf", NULL};
    gwt_http(gw, "GET", "/metrics", wrong, NULL, 0, 0, &r);
    gwt_assert_status(&r, 401, "unauthorized");
    assert_non_null(strstr(gwt_str(&r, "message"), "the bearer token is wrong"));
    assert_string_equal(r.www_authenticate, "Bearer error=\"invalid_token\"");
    gwt_resp_free(&r);
    const char *const basic[] = {"Authorization: Basic Y29ycmVjdC1ob3JzZQ==", NULL};
    gwt_http(gw, "GET", "/metrics", basic, NULL, 0, 0, &r);
    gwt_assert_status(&r, 401, "unauthorized");
    assert_non_null(strstr(gwt_str(&r, "message"), "another scheme"));
    gwt_resp_free(&r);
    const char *const prefix[] = {"Authorization: Bearer correct", NULL};
    gwt_http(gw, "GET", "/metrics", prefix, NULL, 0, 0, &r);
    gwt_assert_status(&r, 401, "unauthorized");
    gwt_resp_free(&r);
    const char *const twice[] = {"Authorization: Bearer correct-horse",
                                 "Authorization: Bearer correct-horse", NULL};
    gwt_http(gw, "GET", "/metrics", twice, NULL, 0, 0, &r);
    gwt_assert_status(&r, 400, "invalid_request");
    gwt_resp_free(&r);
    const char *const good[] = {"Authorization: Bearer correct-horse",
                                "Content-Type: application/json", NULL};
    gwt_http(gw, "GET", "/readyz", good, NULL, 0, 0, &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
    const char *body = "{\"resource\":\"api.auth\"}";
    gwt_http(gw, "POST", "/lock", good, body, strlen(body), 0, &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);

    assert_true(gwt_log_wait(gw, "\"method\":\"POST\",\"path\":\"/lock\",\"status\":200"));
    assert_false(gwt_log_contains(gw, "correct-horse"));
    assert_int_equal(gwt_stop(gw), 0);
    th_rmtree(dir);
}

/* Milliseconds since the epoch of a log line's "ts" ("YYYY-MM-DDTHH:MM:SS.mmmZ", UTC), or -1
 * when it is not exactly that. The days come from the civil date (Howard Hinnant's
 * days_from_civil), since timegm is not POSIX. */
static int64_t log_ts_ms(const char *ts)
{
    int y, mo, d, h, mi, sec, ms, n = 0;
    if (sscanf(ts, "%4d-%2d-%2dT%2d:%2d:%2d.%3d%n", &y, &mo, &d, &h, &mi, &sec, &ms, &n) != 7 ||
        n != 23 || ts[23] != 'Z' || ts[24] != '"' || mo < 1 || mo > 12 || d < 1 || d > 31 ||
        h > 23 || mi > 59 || sec > 60 || ms < 0 || ms > 999) {
        return -1;
    }
    y -= mo <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t days = era * 146097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719468;
    return ((days * 24 + h) * 60 + mi) * 60000 + (int64_t)sec * 1000 + ms;
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The "ts" of the log line that contains needle, in ms since the epoch (-1: none such). */
static int64_t logged_at(const gwt_proc *gw, const char *needle)
{
    FILE *f = fopen(gw->log, "r");
    char line[1024];
    int64_t at = -1;
    assert_non_null(f);
    while (at < 0 && fgets(line, sizeof line, f) != NULL) {
        const char *ts = strstr(line, "\"ts\":\"");
        if (strstr(line, needle) != NULL && ts != NULL) {
            at = log_ts_ms(ts + 6);
            if (at < 0) {
                fail_msg("a malformed timestamp: %s", line);
            }
        }
    }
    fclose(f);
    return at;
}

/* A request line's timestamp is the wall clock to the millisecond, in UTC, and moves on with
 * it: two requests a second apart or more are logged with their own times, not the first
 * one's second. One HTTP loop, so both lines come from the thread whose start-up probes
 * (/healthz) already formatted a second. */
static void test_log_timestamps(void **state)
{
    api_state *s = *state;
    gwt_proc *gw = &s->aux;
    gwt_resp r;
    const char *const args[] = {"--log-format", "json", "--threads", "1", NULL};
    gwt_start(gw, s->redis.url, NULL, args);

    int64_t before = wall_ms();
    gwt_get(gw, "/locks/api.logts1", &r);
    int64_t after = wall_ms();
    gwt_resp_free(&r);
    assert_true(gwt_log_wait(gw, "\"path\":\"/locks/api.logts1\""));
    int64_t first = logged_at(gw, "\"path\":\"/locks/api.logts1\"");
    /* Logged when the request completed: after it was sent, and at most a moment after its
     * answer arrived (libmicrohttpd reports completion once the answer is written). */
    assert_in_range(first, before, after + 500);

    /* The wall clock past the next whole second (a condition, with a deadline). */
    int64_t next_second = (after / 1000 + 1) * 1000 + 1;
    int64_t deadline = after + 5000;
    while (wall_ms() < next_second && wall_ms() < deadline) {
        nanosleep(&(struct timespec){0, 5 * 1000 * 1000}, NULL);
    }
    before = wall_ms();
    assert_true(before >= next_second);
    gwt_get(gw, "/locks/api.logts2", &r);
    after = wall_ms();
    gwt_resp_free(&r);
    assert_true(gwt_log_wait(gw, "\"path\":\"/locks/api.logts2\""));
    int64_t second = logged_at(gw, "\"path\":\"/locks/api.logts2\"");
    assert_in_range(second, before, after + 500);
    assert_int_equal(gwt_stop(gw), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_health_and_ready),
        cmocka_unit_test(test_lock_generates_owner_and_status_hides_it),
        cmocka_unit_test(test_reentrant_lock_and_unlock),
        cmocka_unit_test(test_locked_answers_409_with_retry_after),
        cmocka_unit_test(test_renew),
        cmocka_unit_test(test_idempotent_retries),
        cmocka_unit_test(test_renew_replay),
        cmocka_unit_test(test_bad_json_bodies),
        cmocka_unit_test(test_null_fields_are_refused),
        cmocka_unit_test(test_parse_errors_name_the_field),
        cmocka_unit_test(test_paths_404_405_and_encoded_names),
        cmocka_unit_test(test_fencing_token_header),
        cmocka_unit_test(test_stale_token_is_refused),
        cmocka_unit_test(test_superseded_token_is_refused_before_next_write),
        cmocka_unit_test(test_forged_token_moves_nothing),
        cmocka_unit_test(test_token_below_the_run_is_refused),
        cmocka_unit_test(test_content_types),
        cmocka_unit_test(test_header_limit),
        cmocka_unit_test(test_payload_too_large),
        cmocka_unit_test(test_too_large_writes_are_counted),
        cmocka_unit_test(test_waiter_is_woken_by_release),
        cmocka_unit_test(test_metrics_never_carry_owners_or_names),
        cmocka_unit_test(test_metrics_export_limits_store_and_commits),
        cmocka_unit_test(test_idempotent_lock_survives_restart),
        cmocka_unit_test(test_map_size_limits_the_store),
        cmocka_unit_test(test_auth),
        cmocka_unit_test(test_log_timestamps),
    };
    return cmocka_run_group_tests_name("gateway_api", tests, group_setup, group_teardown);
}
