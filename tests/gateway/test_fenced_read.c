/*
 * Fenced reads, end to end with the real binary, a real redis-server and a real
 * PostgreSQL 15: GET /resources/{r} (and HEAD) with a Fencing-Token header.
 *   - the holder's token reads the value (200) while no newer token was granted;
 *   - once another owner's grant was answered (after an unlock, or after the lease
 *     expired), the old token's read is 409 stale_token with superseded_by naming the new
 *     token, and the new token reads;
 *   - a token never issued for the resource is 403 unknown_token;
 *   - a malformed or repeated header is 400; without the header the read is as before;
 *   - Redis loses the last step of its counter (set back to the old token): on PostgreSQL
 *     the ledger still knows the newer grant (409 superseded_by it); on LMDB a newer token
 *     that has written is still seen (409 stale_token).
 * Each test runs on an LMDB gateway and on two gateways sharing one PostgreSQL store (the
 * grant on one, the read on the other). No test asserts timing; waits loop on a condition
 * with a deadline.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "gw_test.h"
#include "harness.h"

/* gw[0] on LMDB; gw[1] and gw[2] share the PostgreSQL store. */
typedef struct read_state {
    th_pg pg;
    th_redis redis;
    char store[512];
    gwt_proc gw[3];
} read_state;

static int group_setup(void **state)
{
    read_state *s = calloc(1, sizeof *s);
    if (s == NULL) {
        return -1;
    }
    th_pg_start(&s->pg);
    th_redis_start(&s->redis, 1, NULL);
    th_pg_url(&s->pg, "postgres", s->store, sizeof s->store);
    gwt_start(&s->gw[0], s->redis.url, NULL, NULL);
    const char *const args[] = {"--store", s->store, NULL};
    gwt_start(&s->gw[1], s->redis.url, NULL, args);
    gwt_start(&s->gw[2], s->redis.url, NULL, args);
    *state = s;
    return 0;
}

static int group_teardown(void **state)
{
    read_state *s = *state;
    for (int i = 0; i < 3; i++) {
        gwt_stop(&s->gw[i]);
    }
    th_redis_stop(&s->redis);
    th_pg_stop(&s->pg);
    free(s);
    return 0;
}

/* GET (or HEAD) /resources/resource with the given header lines (NULL-terminated, may be
 * NULL); fills r. */
static void read_with(const gwt_proc *gw, const char *method, const char *resource,
                      const char *const *headers, gwt_resp *r)
{
    char path[256];
    snprintf(path, sizeof path, "/resources/%s", resource);
    gwt_http(gw, method, path, headers, NULL, 0, 0, r);
}

/* A fenced GET with token; fills r. */
static void fenced_read(const gwt_proc *gw, const char *method, const char *resource,
                        long long token, gwt_resp *r)
{
    char fence[64];
    snprintf(fence, sizeof fence, "Fencing-Token: %lld", token);
    const char *const headers[] = {fence, NULL};
    read_with(gw, method, resource, headers, r);
}

static void assert_reads(const gwt_proc *gw, const char *resource, long long token,
                         const char *value)
{
    gwt_resp r;
    fenced_read(gw, "GET", resource, token, &r);
    gwt_assert_status(&r, 200, NULL);
    assert_string_equal(r.body, value);
    gwt_resp_free(&r);
    fenced_read(gw, "HEAD", resource, token, &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
}

static void assert_superseded(const gwt_proc *gw, const char *resource, long long token,
                              long long by)
{
    gwt_resp r;
    fenced_read(gw, "GET", resource, token, &r);
    gwt_assert_status(&r, 409, "stale_token");
    assert_int_equal(gwt_int(&r, "token"), token);
    assert_int_equal(gwt_int(&r, "superseded_by"), by);
    assert_string_equal(gwt_str(&r, "resource"), resource);
    assert_null(strstr(r.body, "'s value")); /* the refusal never carries the value */
    gwt_resp_free(&r);
    fenced_read(gw, "HEAD", resource, token, &r);
    assert_int_equal(r.status, 409);
    gwt_resp_free(&r);
}

/* Lock on `locker` (token 1), write, read with 1; unlock, another owner locks (token 2):
 * 1 is superseded by 2, 2 reads. The reads go to `reader`. */
static void superseded_after_unlock(const gwt_proc *locker, const gwt_proc *reader,
                                    const char *resource)
{
    long long t1 = 0, t2 = 0;

    assert_int_equal(gwt_lock(locker, resource, "reader-one", &t1), 200);
    assert_int_equal(gwt_put_fenced(locker, resource, t1, "one's value", NULL), 200);
    assert_reads(reader, resource, t1, "one's value");
    assert_int_equal(gwt_unlock(locker, resource, "reader-one"), 200);
    /* Released but not superseded: nothing newer was minted, so the value is still the
     * one this token last saw. */
    assert_reads(reader, resource, t1, "one's value");

    assert_int_equal(gwt_lock(locker, resource, "reader-two", &t2), 200);
    assert_true(t2 > t1);
    assert_superseded(reader, resource, t1, t2);
    assert_reads(reader, resource, t2, "one's value");
    /* A write by the new holder does not revive the old token. */
    assert_int_equal(gwt_put_fenced(locker, resource, t2, "two's value", NULL), 200);
    assert_reads(reader, resource, t2, "two's value");
    assert_superseded(reader, resource, t1, t2);
    assert_int_equal(gwt_unlock(locker, resource, "reader-two"), 200);
}

static void test_superseded_after_unlock(void **state)
{
    read_state *s = *state;
    superseded_after_unlock(&s->gw[0], &s->gw[0], "fr.unlock");
    superseded_after_unlock(&s->gw[1], &s->gw[2], "fr.unlock.pg");
}

/* The first holder's lease runs out without an unlock; the second grant supersedes it. */
static void superseded_after_expiry(const gwt_proc *locker, const gwt_proc *reader,
                                    const char *resource)
{
    char body[256];
    gwt_resp r;

    snprintf(body, sizeof body, "{\"resource\":\"%s\",\"owner\":\"short\",\"ttl_ms\":200}",
             resource);
    gwt_post(locker, "/lock", body, &r);
    gwt_assert_status(&r, 200, NULL);
    long long t1 = gwt_int(&r, "token");
    gwt_resp_free(&r);
    assert_int_equal(gwt_put_fenced(locker, resource, t1, "short's value", NULL), 200);
    assert_reads(reader, resource, t1, "short's value");

    /* Waits for the lease to end: the next owner is answered 409 until it has. */
    long long t2 = 0;
    time_t deadline = time(NULL) + 15;
    while (gwt_lock(locker, resource, "after", &t2) != 200) {
        assert_true(time(NULL) < deadline);
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    assert_true(t2 > t1);
    assert_superseded(reader, resource, t1, t2);
    assert_reads(reader, resource, t2, "short's value");
    assert_int_equal(gwt_unlock(locker, resource, "after"), 200);
}

static void test_superseded_after_expiry(void **state)
{
    read_state *s = *state;
    superseded_after_expiry(&s->gw[0], &s->gw[0], "fr.expiry");
    superseded_after_expiry(&s->gw[2], &s->gw[1], "fr.expiry.pg");
}

/* A token never issued for the resource: 403, as for a write; also a real token of another
 * resource. */
static void unknown_token(const gwt_proc *gw, const char *resource)
{
    long long mine = 0, other = 0;
    char other_resource[128];
    gwt_resp r;

    snprintf(other_resource, sizeof other_resource, "%s.other", resource);
    assert_int_equal(gwt_lock(gw, resource, "holder", &mine), 200);
    assert_int_equal(gwt_put_fenced(gw, resource, mine, "v", NULL), 200);
    assert_int_equal(gwt_lock(gw, other_resource, "holder", &other), 200);
    assert_true(other > mine);

    const long long tokens[] = {mine + 1000000, other};
    for (size_t i = 0; i < sizeof tokens / sizeof tokens[0]; i++) {
        fenced_read(gw, "GET", resource, tokens[i], &r);
        gwt_assert_status(&r, 403, "unknown_token");
        assert_int_equal(gwt_int(&r, "token"), tokens[i]);
        gwt_resp_free(&r);
    }
    /* A resource nobody ever locked. */
    fenced_read(gw, "GET", "fr.never-locked", mine, &r);
    gwt_assert_status(&r, 403, "unknown_token");
    gwt_resp_free(&r);
    assert_int_equal(gwt_unlock(gw, resource, "holder"), 200);
    assert_int_equal(gwt_unlock(gw, other_resource, "holder"), 200);
}

static void test_unknown_token(void **state)
{
    read_state *s = *state;
    unknown_token(&s->gw[0], "fr.unknown");
    unknown_token(&s->gw[1], "fr.unknown.pg");
}

/* The header's rule is the write's: one positive decimal, once. Without it, as before. */
static void bad_header(const gwt_proc *gw, const char *resource)
{
    long long t = 0;
    gwt_resp r;

    assert_int_equal(gwt_lock(gw, resource, "holder", &t), 200);
    assert_int_equal(gwt_put_fenced(gw, resource, t, "plain", NULL), 200);
    static const char *const bad[] = {"Fencing-Token;" /* empty */, "Fencing-Token: 0",
                                      "Fencing-Token: 01",  "Fencing-Token: -3",
                                      "Fencing-Token: 1x",  "Fencing-Token: 9007199254740992",
                                      NULL};
    for (int i = 0; bad[i] != NULL; i++) {
        const char *const headers[] = {bad[i], NULL};
        read_with(gw, "GET", resource, headers, &r);
        if (r.status != 400) {
            fail_msg("'%s': expected 400, got %ld %s", bad[i], r.status, r.body);
        }
        gwt_assert_status(&r, 400, "invalid_request");
        gwt_resp_free(&r);
    }
    char once[64];
    snprintf(once, sizeof once, "Fencing-Token: %lld", t);
    const char *const twice[] = {once, once, NULL};
    read_with(gw, "GET", resource, twice, &r);
    gwt_assert_status(&r, 400, "invalid_request");
    assert_non_null(strstr(r.body, "repeated"));
    gwt_resp_free(&r);

    read_with(gw, "GET", resource, NULL, &r);
    gwt_assert_status(&r, 200, NULL);
    assert_string_equal(r.body, "plain");
    gwt_resp_free(&r);
    /* Never written: 404 with a current token, as without one. */
    long long n = 0;
    assert_int_equal(gwt_lock(gw, "fr.unwritten", "holder", &n), 200);
    fenced_read(gw, "GET", "fr.unwritten", n, &r);
    gwt_assert_status(&r, 404, "not_found");
    gwt_resp_free(&r);
    assert_int_equal(gwt_unlock(gw, "fr.unwritten", "holder"), 200);
    assert_int_equal(gwt_unlock(gw, resource, "holder"), 200);
}

static void test_bad_header(void **state)
{
    read_state *s = *state;
    bad_header(&s->gw[0], "fr.bad");
    bad_header(&s->gw[1], "fr.bad.pg");
}

/* Sets r's fence counter in Redis back to token: Redis lost the grants after it. */
static void roll_back_counter(const read_state *s, const char *resource, long long token)
{
    char out[64] = "", want[32];
    th_redis_cmd(&s->redis, NULL, 0, "SET fg:{%s}:fence %lld", resource, token);
    th_redis_cmd(&s->redis, out, sizeof out, "GET fg:{%s}:fence", resource);
    snprintf(want, sizeof want, "%lld", token);
    assert_string_equal(out, want);
}

static void test_redis_loses_the_newer_grant(void **state)
{
    read_state *s = *state;
    long long t1 = 0, t2 = 0;
    gwt_resp r;

    /* PostgreSQL: the newer grant, never written, is in the shared ledger. */
    assert_int_equal(gwt_lock(&s->gw[1], "fr.lost.pg", "one", &t1), 200);
    assert_int_equal(gwt_put_fenced(&s->gw[1], "fr.lost.pg", t1, "one's value", NULL), 200);
    assert_int_equal(gwt_unlock(&s->gw[1], "fr.lost.pg", "one"), 200);
    assert_int_equal(gwt_lock(&s->gw[1], "fr.lost.pg", "two", &t2), 200);
    roll_back_counter(s, "fr.lost.pg", t1);
    assert_superseded(&s->gw[2], "fr.lost.pg", t1, t2);
    /* The ledger's last grant still reads, though Redis no longer counts it. */
    assert_reads(&s->gw[2], "fr.lost.pg", t2, "one's value");

    /* LMDB: no ledger per resource, but the newer token has written. */
    assert_int_equal(gwt_lock(&s->gw[0], "fr.lost", "one", &t1), 200);
    assert_int_equal(gwt_unlock(&s->gw[0], "fr.lost", "one"), 200);
    assert_int_equal(gwt_lock(&s->gw[0], "fr.lost", "two", &t2), 200);
    assert_int_equal(gwt_put_fenced(&s->gw[0], "fr.lost", t2, "two's value", NULL), 200);
    roll_back_counter(s, "fr.lost", t1);
    fenced_read(&s->gw[0], "GET", "fr.lost", t1, &r);
    gwt_assert_status(&r, 409, "stale_token");
    assert_int_equal(gwt_int(&r, "highest_token"), t2);
    assert_null(strstr(r.body, "two's value"));
    gwt_resp_free(&r);
}

/* Shared locks on a shared PostgreSQL store: a reader's token, granted on one gateway, is
 * refused 409 not_exclusive on the other; with the store down, a shared grant whose mark
 * cannot be recorded is given back and answered 503. Last: it kills the database (and
 * starts it again). */
static void test_shared_mark_on_postgres(void **state)
{
    read_state *s = *state;
    long long t = 0;
    gwt_resp r;
    const char *lock_body =
        "{\"resource\":\"fr.sh\",\"owner\":\"reader\",\"mode\":\"shared\",\"ttl_ms\":20000}";

    assert_int_equal(gwt_lock(&s->gw[1], "fr.sh", "w", &t), 200);
    assert_int_equal(gwt_put_fenced(&s->gw[1], "fr.sh", t, "v", NULL), 200);
    assert_int_equal(gwt_unlock(&s->gw[1], "fr.sh", "w"), 200);
    gwt_post(&s->gw[1], "/lock", lock_body, &r);
    gwt_assert_status(&r, 200, NULL);
    assert_int_equal(gwt_int(&r, "token"), t);
    gwt_resp_free(&r);
    gwt_put_fenced(&s->gw[2], "fr.sh", t, "w2", &r);
    gwt_assert_status(&r, 409, "not_exclusive");
    assert_int_equal(gwt_int(&r, "shared_mark"), t);
    gwt_resp_free(&r);
    assert_int_equal(gwt_unlock(&s->gw[1], "fr.sh", "reader"), 200);

    /* A new exclusive token, so that the next shared grant needs a new mark. */
    assert_int_equal(gwt_lock(&s->gw[2], "fr.sh", "w", &t), 200);
    assert_int_equal(gwt_unlock(&s->gw[2], "fr.sh", "w"), 200);
    th_pg_kill(&s->pg);
    gwt_post(&s->gw[2], "/lock", lock_body, &r);
    gwt_assert_status(&r, 503, "backend_unavailable");
    gwt_resp_free(&r);
    /* Given back: the resource is free in Redis. */
    gwt_get(&s->gw[2], "/locks/fr.sh", &r);
    gwt_assert_status(&r, 200, NULL);
    assert_true(json_is_false(json_object_get(r.json, "locked")));
    gwt_resp_free(&r);
    th_pg_restart(&s->pg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_superseded_after_unlock),
        cmocka_unit_test(test_superseded_after_expiry),
        cmocka_unit_test(test_unknown_token),
        cmocka_unit_test(test_bad_header),
        cmocka_unit_test(test_redis_loses_the_newer_grant),
        cmocka_unit_test(test_shared_mark_on_postgres),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
