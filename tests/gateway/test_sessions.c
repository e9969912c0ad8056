/*
 * Sessions, end to end with the real binary and a real redis-server: one lease for many
 * locks (POST /sessions, POST /sessions/{id}/renew, DELETE and GET /sessions/{id}, and
 * POST /lock with "session").
 *   - a session is created with its lease; bad bodies are 400 naming the field;
 *   - a lock taken in a session has the session's lease, and GET /sessions/{id} lists it
 *     with its remaining lease, never a token or an owner;
 *   - renewing the session renews every lock in it, past the lease they were granted;
 *   - DELETE releases every lock and fences it: the holder's PUT is 409 stale_token at once,
 *     with nobody locking again; the session is then 404 (with a JSON body) everywhere;
 *   - an unknown or malformed session is 404 for every route and for POST /lock;
 *   - a set (POST /lock {"resources", "session"}) joins the session all or none: each member
 *     has its lease, the session's renewal renews each, the set's unlock releases them, and
 *     DELETE or expiry releases and fences each; a session without room takes no member;
 *   - a session that expires is ended by a gateway: its holder's PUT becomes 409 without any
 *     request naming the session, even when the gateway that created it was killed
 *     (SIGKILL) and another gateway of the same Redis does the reaping;
 *   - the session id never appears in the access log or the metrics;
 *   - an idle gateway's reaper costs Redis no script call;
 *   - on a 3-master Redis Cluster (the session's locks on several masters): renewal, DELETE
 *     and expiry as above.
 * No test asserts timing; waits loop on a condition with a deadline.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "gw_test.h"
#include "harness.h"

typedef struct ses_state {
    th_redis redis;
    th_cluster cl;
    int cluster;
    gwt_proc gw[2];
} ses_state;

static int group_setup(void **state)
{
    ses_state *s = calloc(1, sizeof *s);
    th_redis_start(&s->redis, 1, NULL);
    gwt_start(&s->gw[0], s->redis.url, NULL, NULL);
    gwt_start(&s->gw[1], s->redis.url, NULL, NULL);
    *state = s;
    return 0;
}

/* Two gateways on a 3-master Redis Cluster: a session's locks on several masters. */
static int cluster_setup(void **state)
{
    ses_state *s = calloc(1, sizeof *s);
    s->cluster = 1;
    th_cluster_start(&s->cl, 3, 0, NULL);
    gwt_start(&s->gw[0], s->cl.url, NULL, NULL);
    gwt_start(&s->gw[1], s->cl.url, NULL, NULL);
    *state = s;
    return 0;
}

static int group_teardown(void **state)
{
    ses_state *s = *state;
    for (int i = 0; i < 2; i++) {
        if (s->gw[i].pid > 0) {
            gwt_stop(&s->gw[i]);
        } else {
            gwt_cleanup(&s->gw[i]);
        }
    }
    if (s->cluster) {
        th_cluster_stop(&s->cl);
    } else {
        th_redis_stop(&s->redis);
    }
    free(s);
    return 0;
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* POST /sessions {"ttl_ms": ttl}: the id into id (33 bytes). */
static void create(const gwt_proc *gw, long long ttl, char *id)
{
    char body[64];
    gwt_resp r;
    snprintf(body, sizeof body, "{\"ttl_ms\": %lld}", ttl);
    gwt_post(gw, "/sessions", body, &r);
    gwt_assert_status(&r, 201, NULL);
    assert_int_equal(gwt_int(&r, "ttl_ms"), ttl);
    const char *got = gwt_str(&r, "session");
    assert_int_equal(strlen(got), 32);
    assert_int_equal(strspn(got, "0123456789abcdef"), 32);
    snprintf(id, 33, "%s", got);
    gwt_resp_free(&r);
}

/* POST /lock {resource, session}: the token. */
static long long lock_in(const gwt_proc *gw, const char *id, const char *resource,
                         long long ttl)
{
    char body[256];
    gwt_resp r;
    snprintf(body, sizeof body, "{\"resource\": \"%s\", \"session\": \"%s\"}", resource, id);
    gwt_post(gw, "/lock", body, &r);
    gwt_assert_status(&r, 200, NULL);
    assert_int_equal(gwt_int(&r, "ttl_ms"), ttl);
    long long token = gwt_int(&r, "token");
    assert_true(token > 0);
    gwt_resp_free(&r);
    return token;
}

/* POST /lock {resources: names[0..n), session}: the tokens, in order, and the owner (33
 * bytes). */
static void lock_set_in(const gwt_proc *gw, const char *id, const char *const *names, int n,
                        long long ttl, long long *tokens, char *owner)
{
    char body[512];
    int len = snprintf(body, sizeof body, "{\"resources\": [");
    for (int i = 0; i < n; i++) {
        len += snprintf(body + len, sizeof body - (size_t)len, "%s\"%s\"", i ? ", " : "",
                        names[i]);
    }
    snprintf(body + len, sizeof body - (size_t)len, "], \"session\": \"%s\"}", id);
    gwt_resp r;
    gwt_post(gw, "/lock", body, &r);
    gwt_assert_status(&r, 200, NULL);
    assert_int_equal(gwt_int(&r, "ttl_ms"), ttl);
    snprintf(owner, 33, "%s", gwt_str(&r, "owner"));
    json_t *locks = json_object_get(r.json, "locks");
    assert_int_equal(json_array_size(locks), n);
    for (int i = 0; i < n; i++) {
        json_t *l = json_array_get(locks, (size_t)i);
        assert_string_equal(json_string_value(json_object_get(l, "resource")), names[i]);
        tokens[i] = json_integer_value(json_object_get(l, "token"));
        assert_true(tokens[i] > 0);
    }
    gwt_resp_free(&r);
}

/* GET /locks/resource: 1 when held with token, 0 when free. */
static int held_with(const gwt_proc *gw, const char *resource, long long token)
{
    char path[128];
    gwt_resp r;
    snprintf(path, sizeof path, "/locks/%s", resource);
    gwt_get(gw, path, &r);
    gwt_assert_status(&r, 200, NULL);
    int held = json_is_true(json_object_get(r.json, "locked"));
    if (held) {
        assert_int_equal(gwt_int(&r, "token"), token);
    }
    gwt_resp_free(&r);
    return held;
}

static void session_call(const gwt_proc *gw, const char *method, const char *id,
                         const char *tail, gwt_resp *r)
{
    char path[128];
    snprintf(path, sizeof path, "/sessions/%s%s", id, tail);
    if (strcmp(method, "POST") == 0) {
        gwt_post(gw, path, "{}", r);
    } else {
        gwt_http(gw, method, path, NULL, NULL, 0, 0, r);
    }
}

static void assert_gone(const gwt_proc *gw, const char *id)
{
    gwt_resp r;
    session_call(gw, "GET", id, "", &r);
    gwt_assert_status(&r, 404, "session_not_found");
    gwt_resp_free(&r);
    session_call(gw, "POST", id, "/renew", &r);
    gwt_assert_status(&r, 404, "session_not_found");
    gwt_resp_free(&r);
    char body[256];
    snprintf(body, sizeof body, "{\"resource\": \"ses.gone\", \"session\": \"%s\"}", id);
    gwt_post(gw, "/lock", body, &r);
    gwt_assert_status(&r, 404, "session_not_found");
    gwt_resp_free(&r);
    snprintf(body, sizeof body,
             "{\"resources\": [\"ses.gone1\", \"ses.gone2\"], \"session\": \"%s\"}", id);
    gwt_post(gw, "/lock", body, &r);
    gwt_assert_status(&r, 404, "session_not_found");
    gwt_resp_free(&r);
    assert_int_equal(held_with(gw, "ses.gone1", 0), 0);
}

/* DELETE /sessions/{id}, answered 200. */
static void end_session(const gwt_proc *gw, const char *id)
{
    gwt_resp r;
    session_call(gw, "DELETE", id, "", &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
}

/* Gives the session n entries that are not locks in Redis: room for LK_SESSION_LOCKS_MAX
 * (1000) - n locks. */
static void fill_session(const ses_state *s, const char *id, int n)
{
    char key[80], out[64];
    snprintf(key, sizeof key, "fg:{#sessions}:s:%s", id);
    th_redis_cmd(&s->redis, out, sizeof out, "EVAL %s 1 %s %d",
                 "for i = 1, tonumber(ARGV[1]) do redis.call('HSET', KEYS[1], 'x' .. i, '1') "
                 "end return 1",
                 key, n);
}

/* Calls of one command Redis has served (INFO commandstats), 0 when none. */
static long long redis_calls(const th_redis *redis, const char *cmd)
{
    char info[16384], needle[64];
    snprintf(needle, sizeof needle, "cmdstat_%s:calls=", cmd);
    th_redis_cmd(redis, info, sizeof info, "INFO commandstats");
    const char *p = strstr(info, needle);
    return p != NULL ? strtoll(p + strlen(needle), NULL, 10) : 0;
}

/* First, while no session exists: the reapers poll (ZRANGE of the deadlines) without a
 * script call, so an idle Redis serves no EVALSHA for them. */
static void test_idle_reaper_runs_no_script(void **state)
{
    ses_state *s = *state;
    long long scripts = redis_calls(&s->redis, "evalsha");
    long long polls = redis_calls(&s->redis, "zrange");
    long long end = now_ms() + 10000;
    while (redis_calls(&s->redis, "zrange") < polls + 4) {
        assert_true(now_ms() < end);
        th_nap_ms(20);
    }
    assert_int_equal(redis_calls(&s->redis, "evalsha"), scripts);
}

static void test_create_refuses_bad_bodies(void **state)
{
    ses_state *s = *state;
    const char *bad[] = {"{}", "{\"ttl_ms\": 5}", "{\"ttl_ms\": \"x\"}",
                         "{\"ttl_ms\": 1000, \"extra\": 1}", "{\"ttl_ms\": 99999999}", NULL};
    for (int i = 0; bad[i] != NULL; i++) {
        gwt_resp r;
        gwt_post(&s->gw[0], "/sessions", bad[i], &r);
        gwt_assert_status(&r, 400, "invalid_request");
        gwt_resp_free(&r);
    }
    gwt_resp r;
    char body[256];
    snprintf(body, sizeof body, "{\"resource\": \"ses.x\", \"session\": \"%032d\", "
                                "\"ttl_ms\": 1000}", 0);
    gwt_post(&s->gw[0], "/lock", body, &r);
    gwt_assert_status(&r, 400, "invalid_request");
    gwt_resp_free(&r);
    /* A shared lock is never a session's: its end would free the lock under other readers. */
    char id[33];
    create(&s->gw[0], 60000, id);
    snprintf(body, sizeof body, "{\"resource\": \"ses.x\", \"session\": \"%s\", "
                                "\"mode\": \"shared\"}", id);
    gwt_post(&s->gw[0], "/lock", body, &r);
    gwt_assert_status(&r, 400, "invalid_request");
    gwt_resp_free(&r);
}

static void test_unknown_session_is_404(void **state)
{
    ses_state *s = *state;
    assert_gone(&s->gw[0], "0123456789abcdef0123456789abcdef");
    assert_gone(&s->gw[0], "not-a-session");
    gwt_resp r;
    session_call(&s->gw[0], "DELETE", "0123456789abcdef0123456789abcdef", "", &r);
    gwt_assert_status(&r, 404, "session_not_found");
    gwt_resp_free(&r);
}

/* Renews session id (a 1000 ms lease holding the n locks names[] with tokens[]) through
 * either gateway for three leases: every lock stays held with its token, past the lease it
 * was granted, and each token still writes. */
static void renew_for_three_leases(const ses_state *s, const char *id, const char *const *names,
                                   const long long *tokens, int n)
{
    long long end = now_ms() + 3000;
    for (int k = 0; now_ms() < end; k++) {
        gwt_resp r;
        session_call(&s->gw[k % 2], "POST", id, "/renew", &r); /* any gateway renews */
        gwt_assert_status(&r, 200, NULL);
        assert_int_equal(gwt_int(&r, "ttl_ms"), 1000);
        assert_int_equal(gwt_int(&r, "locks"), n);
        assert_int_equal(gwt_int(&r, "renewed"), n);
        gwt_resp_free(&r);
        for (int i = 0; i < n; i++) {
            assert_int_equal(held_with(&s->gw[(k + 1) % 2], names[i], tokens[i]), 1);
        }
        th_nap_ms(100);
    }
    for (int i = 0; i < n; i++) {
        assert_int_equal(gwt_put_fenced(&s->gw[0], names[i], tokens[i], "v", NULL), 200);
    }
}

static void test_renew_keeps_every_lock(void **state)
{
    ses_state *s = *state;
    char id[33];
    const char *names[] = {"ses.r1", "ses.r2", "ses.r3"};
    long long tokens[3];

    create(&s->gw[0], 1000, id);
    for (int i = 0; i < 3; i++) {
        tokens[i] = lock_in(&s->gw[0], id, names[i], 1000);
    }
    renew_for_three_leases(s, id, names, tokens, 3);
    gwt_resp r;
    session_call(&s->gw[0], "GET", id, "", &r);
    gwt_assert_status(&r, 200, NULL);
    json_t *locks = json_object_get(r.json, "locks");
    assert_int_equal(json_array_size(locks), 3);
    for (size_t i = 0; i < 3; i++) {
        json_t *l = json_array_get(locks, i);
        assert_true(json_is_string(json_object_get(l, "resource")));
        long long left = json_integer_value(json_object_get(l, "ttl_ms"));
        assert_true(left > 0 && left <= 1000);
        assert_null(json_object_get(l, "token"));
        assert_null(json_object_get(l, "owner"));
    }
    assert_null(strstr(r.body, "owner"));
    gwt_resp_free(&r);
    end_session(&s->gw[0], id);
}

static void test_delete_releases_and_fences(void **state)
{
    ses_state *s = *state;
    char id[33];
    const char *names[] = {"ses.d1", "ses.d2"};
    long long tokens[2];

    create(&s->gw[0], 60000, id);
    for (int i = 0; i < 2; i++) {
        tokens[i] = lock_in(&s->gw[0], id, names[i], 60000);
        assert_int_equal(gwt_put_fenced(&s->gw[0], names[i], tokens[i], "before", NULL), 200);
    }
    gwt_resp r;
    session_call(&s->gw[1], "DELETE", id, "", &r);
    gwt_assert_status(&r, 200, NULL);
    assert_int_equal(gwt_int(&r, "released"), 2);
    gwt_resp_free(&r);
    for (int i = 0; i < 2; i++) {
        gwt_resp w;
        gwt_put_fenced(&s->gw[0], names[i], tokens[i], "after", &w);
        gwt_assert_status(&w, 409, "stale_token");
        gwt_resp_free(&w);
        gwt_assert_value(&s->gw[0], names[i], "before");
        long long next = 0;
        assert_int_equal(gwt_lock(&s->gw[1], names[i], "next-owner", &next), 200);
        assert_true(next > tokens[i]);
        assert_int_equal(gwt_unlock(&s->gw[1], names[i], "next-owner"), 200);
    }
    assert_gone(&s->gw[0], id);
    assert_gone(&s->gw[1], id);
    assert_int_equal(gwt_log_contains(&s->gw[0], id), 0);
    assert_int_equal(gwt_log_contains(&s->gw[1], id), 0);
}

/* Waits until a PUT with token is refused 409 stale_token (the session's end fenced it). */
static void await_fenced(const gwt_proc *gw, const char *resource, long long token)
{
    long long end = now_ms() + 15000;
    for (;;) {
        gwt_resp w;
        long st = gwt_put_fenced(gw, resource, token, "late", &w);
        int stale = st == 409 && strcmp(gwt_str(&w, "error"), "stale_token") == 0;
        gwt_resp_free(&w);
        if (stale) {
            return;
        }
        assert_int_equal(st, 200);
        assert_true(now_ms() < end);
        th_nap_ms(50);
    }
}

/* A set locked in a session: every lock has the session's lease, renewing the session
 * renews every one of them past that lease, and the set's unlock with its owner releases them
 * (the session's renewal then counts them lost). */
static void test_set_in_session_renews_and_unlocks(void **state)
{
    ses_state *s = *state;
    char id[33], owner[33], body[256];
    const char *names[] = {"ses.set.r1", "ses.set.r2", "ses.set.r3"};
    long long tokens[3];

    create(&s->gw[0], 1000, id);
    lock_set_in(&s->gw[0], id, names, 3, 1000, tokens, owner);
    renew_for_three_leases(s, id, names, tokens, 3);
    gwt_resp r;
    session_call(&s->gw[0], "GET", id, "", &r);
    gwt_assert_status(&r, 200, NULL);
    assert_int_equal(json_array_size(json_object_get(r.json, "locks")), 3);
    gwt_resp_free(&r);
    snprintf(body, sizeof body,
             "{\"resources\": [\"%s\", \"%s\", \"%s\"], \"owner\": \"%s\"}", names[0],
             names[1], names[2], owner);
    gwt_post(&s->gw[1], "/unlock", body, &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(held_with(&s->gw[0], names[i], 0), 0);
    }
    session_call(&s->gw[0], "POST", id, "/renew", &r);
    gwt_assert_status(&r, 200, NULL);
    assert_int_equal(gwt_int(&r, "lost"), 3);
    assert_int_equal(gwt_int(&r, "renewed"), 0);
    gwt_resp_free(&r);
    end_session(&s->gw[0], id);
}

/* DELETE of a session holding a set releases and fences every member: a write with a
 * member's token is 409 stale_token at once, with nobody locking again. */
static void test_set_in_session_delete_fences_every_member(void **state)
{
    ses_state *s = *state;
    char id[33], owner[33];
    const char *names[] = {"ses.setd.1", "ses.setd.2", "ses.setd.3"};
    long long tokens[3];

    create(&s->gw[0], 60000, id);
    lock_in(&s->gw[0], id, "ses.setd.single", 60000);
    lock_set_in(&s->gw[0], id, names, 3, 60000, tokens, owner);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(gwt_put_fenced(&s->gw[0], names[i], tokens[i], "before", NULL), 200);
    }
    gwt_resp r;
    session_call(&s->gw[1], "DELETE", id, "", &r);
    gwt_assert_status(&r, 200, NULL);
    assert_int_equal(gwt_int(&r, "locks"), 4);
    assert_int_equal(gwt_int(&r, "released"), 4);
    gwt_resp_free(&r);
    for (int i = 0; i < 3; i++) {
        gwt_resp w;
        gwt_put_fenced(&s->gw[1], names[i], tokens[i], "after", &w);
        gwt_assert_status(&w, 409, "stale_token");
        gwt_resp_free(&w);
        gwt_assert_value(&s->gw[0], names[i], "before");
        assert_int_equal(held_with(&s->gw[0], names[i], 0), 0);
    }
    assert_gone(&s->gw[0], id);
}

/* A set in a session is refused as one lock is: ttl_ms with it (400), an unknown or malformed
 * session (404), and a session that cannot hold the whole set (409 session_full): then no
 * member is held, and none is in the session. */
static void test_set_in_session_refusals(void **state)
{
    ses_state *s = *state;
    char id[33], body[256];
    gwt_resp r;

    create(&s->gw[0], 60000, id);
    snprintf(body, sizeof body,
             "{\"resources\": [\"ses.setx.1\", \"ses.setx.2\"], \"session\": \"%s\", "
             "\"ttl_ms\": 1000}", id);
    gwt_post(&s->gw[0], "/lock", body, &r);
    gwt_assert_status(&r, 400, "invalid_request");
    gwt_resp_free(&r);
    gwt_post(&s->gw[0], "/lock",
             "{\"resources\": [\"ses.setx.1\", \"ses.setx.2\"], \"session\": 5}", &r);
    gwt_assert_status(&r, 400, "invalid_request");
    gwt_resp_free(&r);
    gwt_post(&s->gw[0], "/lock",
             "{\"resources\": [\"ses.setx.1\", \"ses.setx.2\"], \"session\": \"nope\"}", &r);
    gwt_assert_status(&r, 404, "session_not_found");
    gwt_resp_free(&r);
    /* Room for one more lock: neither of two is taken. */
    fill_session(s, id, 999);
    snprintf(body, sizeof body,
             "{\"resources\": [\"ses.setx.1\", \"ses.setx.2\"], \"session\": \"%s\"}", id);
    gwt_post(&s->gw[0], "/lock", body, &r);
    gwt_assert_status(&r, 409, "session_full");
    gwt_resp_free(&r);
    assert_int_equal(held_with(&s->gw[0], "ses.setx.1", 0), 0);
    assert_int_equal(held_with(&s->gw[0], "ses.setx.2", 0), 0);
    session_call(&s->gw[0], "GET", id, "", &r);
    gwt_assert_status(&r, 200, NULL);
    assert_int_equal(json_array_size(json_object_get(r.json, "locks")), 0);
    gwt_resp_free(&r);
    end_session(&s->gw[0], id);
}

/* A set whose session expires is ended by the reaper: every member's write is refused. */
static void test_set_in_expired_session_is_fenced(void **state)
{
    ses_state *s = *state;
    char id[33], owner[33];
    const char *names[] = {"ses.sete.1", "ses.sete.2"};
    long long tokens[2];

    create(&s->gw[0], 300, id);
    lock_set_in(&s->gw[0], id, names, 2, 300, tokens, owner);
    for (int i = 0; i < 2; i++) {
        await_fenced(&s->gw[1], names[i], tokens[i]);
    }
    assert_gone(&s->gw[0], id);
}

static void test_expired_session_is_fenced(void **state)
{
    ses_state *s = *state;
    char id[33];

    create(&s->gw[0], 300, id);
    long long token = lock_in(&s->gw[0], id, "ses.e1", 300);
    await_fenced(&s->gw[0], "ses.e1", token);
    assert_gone(&s->gw[0], id);
}

/* A lock its owner already holds, taken again with a session that cannot record it (full:
 * filled here to its limit in Redis): 409 session_full, and the owner keeps its first hold,
 * whose token it was answered before (ending it would fence a token answered outside the
 * session). */
static void test_reentry_refused_by_a_full_session_keeps_the_hold(void **state)
{
    ses_state *s = *state;
    char id[33], body[256];

    create(&s->gw[0], 60000, id);
    fill_session(s, id, 1000);
    long long token = 0;
    assert_int_equal(gwt_lock(&s->gw[0], "ses.keep", "alice", &token), 200);
    gwt_resp r;
    snprintf(body, sizeof body,
             "{\"resource\": \"ses.keep\", \"owner\": \"alice\", \"session\": \"%s\"}", id);
    gwt_post(&s->gw[0], "/lock", body, &r);
    gwt_assert_status(&r, 409, "session_full");
    gwt_resp_free(&r);
    gwt_post(&s->gw[0], "/renew", "{\"resource\": \"ses.keep\", \"owner\": \"alice\"}", &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
    assert_int_equal(gwt_put_fenced(&s->gw[0], "ses.keep", token, "mine", NULL), 200);
    assert_int_equal(gwt_unlock(&s->gw[0], "ses.keep", "alice"), 200);
}

/* DELETE while Redis is down: 503 without "ending" (the end was never begun, so nothing
 * promises the reapers will finish it); once Redis is back the session is alive, and a
 * DELETE ends it. */
static void test_delete_with_redis_down_promises_nothing(void **state)
{
    ses_state *s = *state;
    char id[33];

    create(&s->gw[0], 60000, id);
    lock_in(&s->gw[0], id, "ses.down", 60000);
    th_redis_kill(&s->redis);
    gwt_resp r;
    session_call(&s->gw[0], "DELETE", id, "", &r);
    gwt_assert_status(&r, 503, NULL);
    assert_null(json_object_get(r.json, "ending"));
    gwt_resp_free(&r);
    th_redis_restart(&s->redis);
    long long end = now_ms() + 10000;
    for (;;) { /* until the gateway reconnects (its breaker may hold calls back briefly) */
        session_call(&s->gw[0], "POST", id, "/renew", &r);
        long st = r.status;
        gwt_resp_free(&r);
        if (st == 200) {
            break;
        }
        assert_int_equal(st, 503);
        assert_true(now_ms() < end);
        th_nap_ms(50);
    }
    end_session(&s->gw[0], id);
}

/* Last: it kills gw[0]. */
static void test_expiry_after_its_gateway_died(void **state)
{
    ses_state *s = *state;
    char id[33];

    create(&s->gw[0], 500, id);
    long long token = lock_in(&s->gw[0], id, "ses.k1", 500);
    gwt_signal_wait(&s->gw[0], SIGKILL);
    s->gw[0].pid = 0;
    await_fenced(&s->gw[1], "ses.k1", token);
    assert_gone(&s->gw[1], id);
    /* Counted once the end is complete, which may be just after the fence was seen. */
    const char *expired = "fencegate_sessions_ended_total{outcome=\"expired\"}";
    long long end = now_ms() + 10000;
    while (gwt_metric(&s->gw[1], expired) < 1) {
        assert_true(now_ms() < end);
        th_nap_ms(20);
    }
}

/* After the test above, which left gw[0] dead: a gateway that starts while an expired
 * session waits to be ended ends it, with no other gateway alive (its reaper starts once
 * its store and fence are open; started before them, its first pass crashed the gateway). */
static void test_gateway_starting_with_an_expired_session(void **state)
{
    ses_state *s = *state;
    char id[33];

    create(&s->gw[1], 300, id);
    long long token = lock_in(&s->gw[1], id, "ses.s1", 300);
    long long deadline = now_ms() + 300;
    gwt_signal_wait(&s->gw[1], SIGKILL);
    s->gw[1].pid = 0;
    while (now_ms() <= deadline + 100) { /* the session's lease runs out unrenewed */
        th_nap_ms(20);
    }
    gwt_cleanup(&s->gw[0]);
    gwt_start(&s->gw[0], s->redis.url, NULL, NULL);
    await_fenced(&s->gw[0], "ses.s1", token);
    assert_gone(&s->gw[0], id);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idle_reaper_runs_no_script),
        cmocka_unit_test(test_create_refuses_bad_bodies),
        cmocka_unit_test(test_unknown_session_is_404),
        cmocka_unit_test(test_renew_keeps_every_lock),
        cmocka_unit_test(test_delete_releases_and_fences),
        cmocka_unit_test(test_expired_session_is_fenced),
        cmocka_unit_test(test_set_in_session_renews_and_unlocks),
        cmocka_unit_test(test_set_in_session_delete_fences_every_member),
        cmocka_unit_test(test_set_in_session_refusals),
        cmocka_unit_test(test_set_in_expired_session_is_fenced),
        cmocka_unit_test(test_reentry_refused_by_a_full_session_keeps_the_hold),
        cmocka_unit_test(test_delete_with_redis_down_promises_nothing),
        cmocka_unit_test(test_expiry_after_its_gateway_died),
        cmocka_unit_test(test_gateway_starting_with_an_expired_session),
    };
    const struct CMUnitTest cluster[] = {
        cmocka_unit_test(test_renew_keeps_every_lock),
        cmocka_unit_test(test_delete_releases_and_fences),
        cmocka_unit_test(test_expired_session_is_fenced),
        cmocka_unit_test(test_set_in_session_renews_and_unlocks),
        cmocka_unit_test(test_set_in_session_delete_fences_every_member),
        cmocka_unit_test(test_set_in_expired_session_is_fenced),
    };
    int failed = cmocka_run_group_tests_name("single", tests, group_setup, group_teardown);
    failed += cmocka_run_group_tests_name("cluster", cluster, cluster_setup, group_teardown);
    return failed;
}
