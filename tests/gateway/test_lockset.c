/*
 * Multi-resource locks (POST /lock, /unlock and /renew with "resources"), end to end: the
 * real fencegate binary on a real redis-server (LMDB) and on a real 3-master Redis Cluster,
 * whose sets span masters:
 *   - a free set is granted whole, a token per resource, each usable for a fenced write;
 *   - one held resource: 409 locked naming it, with retry_after_ms and Retry-After, and
 *     nothing of the set held;
 *   - re-entry per resource, Idempotency-Key replays of every token;
 *   - bad sets (one name, duplicates, "resource" with "resources", too many) are 400s
 *     naming the problem;
 *   - /unlock and /renew per resource, 409 not_owner naming those not held;
 *   - waiting: a set that waits holds nothing of itself meanwhile, and is granted when the
 *     holder releases; two clients locking [a, b] and [b, a] in loops never deadlock;
 *   - "mode": "shared" for a whole set: two owners hold it together, each member with its
 *     resource's current token; an exclusive set with a member held shared is 409 locked,
 *     or waits (holding new shared sets back) and is granted once both readers left; the
 *     readers' own set in the other mode is 409 mode_mismatch; a write with a shared
 *     member's token is 409 not_exclusive; renew, unlock and Idempotency-Key work;
 *   - the set pipeline keeps one thread while idle, grows while set attempts block, and
 *     shrinks back under a trickle of sets.
 * No test asserts timing; every wait is a loop on a condition with a deadline.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "gw_test.h"
#include "harness.h"

typedef struct set_state {
    th_redis redis;
    th_cluster cl;
    th_pg pg;
    int cluster, shared;
    gwt_proc gw;
    gwt_proc b;          /* shared: a second gateway on the same PostgreSQL and Redis */
} set_state;

static int single_setup(void **state)
{
    set_state *s = calloc(1, sizeof *s);
    th_redis_start(&s->redis, 0, NULL);
    gwt_start(&s->gw, s->redis.url, NULL, NULL);
    *state = s;
    return 0;
}

static int cluster_setup(void **state)
{
    set_state *s = calloc(1, sizeof *s);
    s->cluster = 1;
    th_cluster_start(&s->cl, 3, 0, NULL);
    gwt_start(&s->gw, s->cl.url, NULL, NULL);
    *state = s;
    return 0;
}

/* Two gateways sharing one PostgreSQL store (and its token ledger) and one Redis. */
static int shared_setup(void **state)
{
    set_state *s = calloc(1, sizeof *s);
    char store[512];
    s->shared = 1;
    th_redis_start(&s->redis, 0, NULL);
    th_pg_start(&s->pg);
    th_pg_url(&s->pg, "postgres", store, sizeof store);
    const char *const args[] = {"--store", store, NULL};
    gwt_start(&s->gw, s->redis.url, NULL, args);
    gwt_start(&s->b, s->redis.url, NULL, args);
    *state = s;
    return 0;
}

static int teardown(void **state)
{
    set_state *s = *state;
    int rc = gwt_stop(&s->gw);
    if (s->shared) {
        rc |= gwt_stop(&s->b);
        th_pg_stop(&s->pg);
    }
    if (s->cluster) {
        th_cluster_stop(&s->cl);
    } else {
        th_redis_stop(&s->redis);
    }
    free(s);
    return rc == 0 ? 0 : -1;
}

/* Names unique to one test: "<tag><serial>.<i>". */
static void names_for(const char *tag, char names[][48], int n)
{
    static int serial;
    serial++;
    for (int i = 0; i < n; i++) {
        snprintf(names[i], 48, "%s%d.%d", tag, serial, i);
    }
}

/* POST path {"resources": [names], "owner": owner, <extra>} with optional Idempotency-Key. */
static void post_set(const gwt_proc *gw, const char *path, char names[][48], int n,
                     const char *owner, const char *extra, const char *key, gwt_resp *r)
{
    char body[4096];
    int len = snprintf(body, sizeof body, "{\"resources\":[");
    for (int i = 0; i < n; i++) {
        len += snprintf(body + len, sizeof body - (size_t)len, "%s\"%s\"", i ? "," : "",
                        names[i]);
    }
    len += snprintf(body + len, sizeof body - (size_t)len, "]");
    if (owner != NULL) {
        len += snprintf(body + len, sizeof body - (size_t)len, ",\"owner\":\"%s\"", owner);
    }
    snprintf(body + len, sizeof body - (size_t)len, "%s%s}", extra ? "," : "",
             extra ? extra : "");
    char hdr[128];
    snprintf(hdr, sizeof hdr, "Idempotency-Key: %s", key != NULL ? key : "");
    const char *const headers[] = {"Content-Type: application/json", hdr, NULL};
    const char *const plain[] = {"Content-Type: application/json", NULL};
    gwt_http(gw, "POST", path, key != NULL ? headers : plain, body, strlen(body), 0, r);
}

/* The token of resource in r's "locks" list, or -1. */
static long long token_of(const gwt_resp *r, const char *resource)
{
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(r->json, "locks"), i, e) {
        if (strcmp(json_string_value(json_object_get(e, "resource")), resource) == 0) {
            return (long long)json_integer_value(json_object_get(e, "token"));
        }
    }
    return -1;
}

/* Whether the list field of r names resource. */
static int names_in(const gwt_resp *r, const char *field, const char *resource)
{
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(r->json, field), i, e) {
        if (json_is_string(e) && strcmp(json_string_value(e), resource) == 0) {
            return 1;
        }
    }
    return 0;
}

static int is_locked(const gwt_proc *gw, const char *resource)
{
    char path[300];
    gwt_resp r;
    snprintf(path, sizeof path, "/locks/%s", resource);
    gwt_get(gw, path, &r);
    int locked = r.status == 200 && json_is_true(json_object_get(r.json, "locked"));
    gwt_resp_free(&r);
    return locked;
}

static void test_free_set_granted(void **state)
{
    set_state *s = *state;
    char n[3][48];
    gwt_resp r;

    names_for("free", n, 3);
    post_set(&s->gw, "/lock", n, 3, "o1", "\"ttl_ms\":30000", NULL, &r);
    gwt_assert_status(&r, 200, NULL);
    assert_string_equal(gwt_str(&r, "owner"), "o1");
    assert_int_equal(gwt_int(&r, "ttl_ms"), 30000);
    assert_int_equal(json_array_size(json_object_get(r.json, "locks")), 3);
    for (int i = 0; i < 3; i++) {
        /* In the order asked. */
        json_t *e = json_array_get(json_object_get(r.json, "locks"), (size_t)i);
        assert_string_equal(json_string_value(json_object_get(e, "resource")), n[i]);
        long long tok = token_of(&r, n[i]);
        assert_true(tok > 0);
        assert_true(is_locked(&s->gw, n[i]));
        assert_int_equal(gwt_put_fenced(&s->gw, n[i], tok, "v", NULL), 200);
    }
    gwt_resp_free(&r);
    post_set(&s->gw, "/unlock", n, 3, "o1", NULL, NULL, &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
    for (int i = 0; i < 3; i++) {
        assert_false(is_locked(&s->gw, n[i]));
    }
}

static void test_held_member_is_409_and_nothing_held(void **state)
{
    set_state *s = *state;
    char n[3][48];
    long long tok = 0;
    gwt_resp r;

    names_for("held", n, 3);
    assert_int_equal(gwt_lock(&s->gw, n[1], "other", &tok), 200);
    post_set(&s->gw, "/lock", n, 3, "o1", NULL, NULL, &r);
    gwt_assert_status(&r, 409, "locked");
    assert_true(names_in(&r, "resources", n[1]));
    assert_false(names_in(&r, "resources", n[0]));
    assert_true(gwt_int(&r, "retry_after_ms") > 0);
    assert_true(r.retry_after[0] != '\0');
    gwt_resp_free(&r);
    assert_false(is_locked(&s->gw, n[0]));
    assert_false(is_locked(&s->gw, n[2]));
    assert_int_equal(gwt_unlock(&s->gw, n[1], "other"), 200);
}

static void test_reentry_and_idempotency(void **state)
{
    set_state *s = *state;
    char n[2][48];
    gwt_resp r1, r2, r3;

    names_for("idem", n, 2);
    post_set(&s->gw, "/lock", n, 2, NULL, NULL, "set-key-0123456789abcdef", &r1);
    gwt_assert_status(&r1, 200, NULL);
    post_set(&s->gw, "/lock", n, 2, NULL, NULL, "set-key-0123456789abcdef", &r2);
    gwt_assert_status(&r2, 200, NULL);
    assert_string_equal(gwt_str(&r1, "owner"), gwt_str(&r2, "owner"));
    for (int i = 0; i < 2; i++) {
        assert_int_equal(token_of(&r1, n[i]), token_of(&r2, n[i]));
    }
    /* Re-entry by the owner: the same tokens, a second hold each. */
    post_set(&s->gw, "/lock", n, 2, gwt_str(&r1, "owner"), NULL, NULL, &r3);
    gwt_assert_status(&r3, 200, NULL);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(token_of(&r3, n[i]), token_of(&r1, n[i]));
    }
    gwt_resp_free(&r3);
    post_set(&s->gw, "/unlock", n, 2, gwt_str(&r1, "owner"), NULL, NULL, &r3);
    gwt_assert_status(&r3, 200, NULL);
    assert_int_equal(json_integer_value(json_object_get(
                         json_array_get(json_object_get(r3.json, "locks"), 0), "holds")),
                     1);
    gwt_resp_free(&r3);
    post_set(&s->gw, "/unlock", n, 2, gwt_str(&r1, "owner"), NULL, NULL, &r3);
    gwt_assert_status(&r3, 200, NULL);
    gwt_resp_free(&r3);
    gwt_resp_free(&r1);
    gwt_resp_free(&r2);
}

static void expect_400(const gwt_proc *gw, const char *body, const char *needle)
{
    gwt_resp r;
    gwt_post(gw, "/lock", body, &r);
    gwt_assert_status(&r, 400, "invalid_request");
    if (strstr(gwt_str(&r, "message"), needle) == NULL) {
        print_error("message '%s' lacks '%s'\n", gwt_str(&r, "message"), needle);
        fail();
    }
    gwt_resp_free(&r);
}

static void test_bad_sets_are_400(void **state)
{
    set_state *s = *state;
    char big[8192];
    int len = snprintf(big, sizeof big, "{\"resources\":[");
    for (int i = 0; i < 65; i++) {
        len += snprintf(big + len, sizeof big - (size_t)len, "%s\"big%d\"", i ? "," : "", i);
    }
    snprintf(big + len, sizeof big - (size_t)len, "]}");

    expect_400(&s->gw, "{\"resources\":[\"dup1\",\"dup2\",\"dup1\"]}", "dup1");
    expect_400(&s->gw, "{\"resource\":\"x\",\"resources\":[\"a1\",\"b1\"]}", "resources");
    expect_400(&s->gw, "{\"resources\":[\"only\"]}", "2");
    expect_400(&s->gw, big, "64");
    expect_400(&s->gw, "{\"resources\":[\"a2\",\"bad name\"]}", "resources");
    expect_400(&s->gw, "{\"resources\":[\"a3\",7]}", "resources");
    expect_400(&s->gw, "{\"resources\":\"a4\"}", "resources");
    expect_400(&s->gw, "{\"resources\":[\"a5\",\"b5\"],\"tll_ms\":5}", "tll_ms");
    assert_false(is_locked(&s->gw, "dup2"));
    assert_false(is_locked(&s->gw, "a1"));
}

/* A resource or owner named "resources" is a single lock's, not a set's. */
static void test_name_resources_is_a_single_lock(void **state)
{
    set_state *s = *state;
    long long token = 0;
    assert_int_equal(gwt_lock(&s->gw, "resources", "o1", &token), 200);
    assert_int_equal(gwt_unlock(&s->gw, "resources", "o1"), 200);
    assert_int_equal(gwt_lock(&s->gw, "r1", "resources", &token), 200);
    assert_int_equal(gwt_unlock(&s->gw, "r1", "resources"), 200);
}

static void test_unlock_and_renew_per_resource(void **state)
{
    set_state *s = *state;
    char n[3][48];
    gwt_resp r;

    names_for("own", n, 3);
    post_set(&s->gw, "/lock", n, 2, "o1", NULL, NULL, &r);
    gwt_assert_status(&r, 200, NULL);
    long long t0 = token_of(&r, n[0]);
    gwt_resp_free(&r);
    post_set(&s->gw, "/renew", n, 2, "o1", "\"ttl_ms\":45000", NULL, &r);
    gwt_assert_status(&r, 200, NULL);
    assert_int_equal(gwt_int(&r, "ttl_ms"), 45000);
    assert_int_equal(token_of(&r, n[0]), t0);
    gwt_resp_free(&r);
    /* n[2] was never locked: named as not held; the others were renewed all the same. */
    post_set(&s->gw, "/renew", n, 3, "o1", NULL, NULL, &r);
    gwt_assert_status(&r, 409, "not_owner");
    assert_true(names_in(&r, "resources", n[2]));
    assert_false(names_in(&r, "resources", n[0]));
    assert_int_equal(token_of(&r, n[0]), t0);
    gwt_resp_free(&r);
    post_set(&s->gw, "/unlock", n, 3, "o1", NULL, NULL, &r);
    gwt_assert_status(&r, 409, "not_owner");
    assert_true(names_in(&r, "resources", n[2]));
    gwt_resp_free(&r);
    assert_false(is_locked(&s->gw, n[0]));
    assert_false(is_locked(&s->gw, n[1]));
    expect_400(&s->gw, "{\"resources\":[\"u1\",\"u1\"],\"owner\":\"o\"}", "u1");
}

typedef struct setter {
    const gwt_proc *gw;
    char names[2][48];
    const char *owner;
    int rounds;
    int ok;
    long status;
    pthread_t thread;
} setter;

/* Locks its set with wait_ms, writes nothing, unlocks it; rounds times. */
static void *setter_main(void *arg)
{
    setter *st = arg;
    for (int i = 0; i < st->rounds; i++) {
        gwt_resp r;
        post_set(st->gw, "/lock", st->names, 2, st->owner,
                 "\"wait_ms\":20000,\"ttl_ms\":10000", NULL, &r);
        st->status = r.status;
        gwt_resp_free(&r);
        if (st->status != 200) {
            return NULL;
        }
        post_set(st->gw, "/unlock", st->names, 2, st->owner, NULL, NULL, &r);
        st->status = r.status;
        gwt_resp_free(&r);
        if (st->status != 200) {
            return NULL;
        }
        st->ok++;
    }
    return NULL;
}

static void test_waiting_set_holds_nothing_meanwhile(void **state)
{
    set_state *s = *state;
    setter w = {.gw = &s->gw, .owner = "waiter", .rounds = 1};
    long long tok = 0;

    names_for("wait", w.names, 2);
    assert_int_equal(gwt_lock(&s->gw, w.names[1], "holder", &tok), 200);
    assert_int_equal(pthread_create(&w.thread, NULL, setter_main, &w), 0);
    gwt_await_metric(&s->gw, "fencegate_waiters", 1);
    /* Parked: nothing of its set is held while it waits. */
    assert_false(is_locked(&s->gw, w.names[0]));
    assert_int_equal(gwt_unlock(&s->gw, w.names[1], "holder"), 200);
    pthread_join(w.thread, NULL);
    assert_int_equal(w.ok, 1);
}

static void test_opposite_orders_never_deadlock(void **state)
{
    set_state *s = *state;
    setter a = {.gw = &s->gw, .owner = "ab", .rounds = 40};
    setter b = {.gw = &s->gw, .owner = "ba", .rounds = 40};

    names_for("dl", a.names, 2);
    memcpy(b.names[0], a.names[1], 48);
    memcpy(b.names[1], a.names[0], 48);
    assert_int_equal(pthread_create(&a.thread, NULL, setter_main, &a), 0);
    assert_int_equal(pthread_create(&b.thread, NULL, setter_main, &b), 0);
    pthread_join(a.thread, NULL);
    pthread_join(b.thread, NULL);
    assert_int_equal(a.ok, 40);
    assert_int_equal(b.ok, 40);
}

/* Threads of the gateway named name (their /proc/PID/task/TID/comm). */
static int threads_named(const gwt_proc *gw, const char *name)
{
    char path[64], comm[32];
    int n = 0;
    snprintf(path, sizeof path, "/proc/%d/task", (int)gw->pid);
    DIR *d = opendir(path);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') {
            continue;
        }
        char file[sizeof path + sizeof e->d_name + 8];
        snprintf(file, sizeof file, "%s/%s/comm", path, e->d_name);
        FILE *f = fopen(file, "r");
        if (f != NULL && fgets(comm, sizeof comm, f) != NULL &&
            strncmp(comm, name, strlen(name)) == 0 && comm[strlen(name)] == '\n') {
            n++;
        }
        if (f != NULL) {
            fclose(f);
        }
    }
    closedir(d);
    return n;
}

/* One try of blocked_burst(). */
static int blocked_burst_once(set_state *s)
{
    enum { N = 4 };
    static const char *const owners[N] = {"g0", "g1", "g2", "g3"};
    setter w[N];
    char out[64];
    int most = 0;

    th_redis_cmd(&s->redis, out, sizeof out, "CLIENT PAUSE 1000 ALL");
    for (int i = 0; i < N; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].gw = &s->gw;
        w[i].owner = owners[i];
        w[i].rounds = 1;
        names_for("grow", w[i].names, 2);
        assert_int_equal(pthread_create(&w[i].thread, NULL, setter_main, &w[i]), 0);
    }
    for (int64_t until = th_now_ms() + 10000; most < N && th_now_ms() < until;) {
        int n = threads_named(&s->gw, "fg-sets");
        most = n > most ? n : most;
        th_nap_ms(5); /* a poll's interval */
    }
    for (int i = 0; i < N; i++) {
        pthread_join(w[i].thread, NULL);
        assert_int_equal(w[i].ok, 1);
    }
    return most;
}

/* N set /locks at once while Redis holds every command for 1 s (less than the gateway's
 * 2 s command timeout), so each blocks its thread in its round trip: returns the most
 * fg-sets threads seen meanwhile. Every lock is granted. On a loaded machine a request may
 * reach the gateway only after the pause: up to three bursts are tried. */
static int blocked_burst(set_state *s)
{
    int most = 0;
    for (int k = 0; k < 3 && most < 4; k++) {
        most = blocked_burst_once(s);
    }
    return most;
}

/* The set pipeline keeps one thread while idle and starts more while set attempts block at
 * the same time. Under a trickle of sets, never two at once, the extra threads retire
 * (each after 5 s without a job: the last thread to wait takes the next job, so the others
 * stay idle); a burst then starts them again in the places they left. A gateway serving
 * few sets so keeps neither the threads nor their Redis connections. */
static void test_set_threads_grow_and_retire(void **state)
{
    set_state *s = *state;
    setter one = {.gw = &s->gw, .owner = "trickle", .rounds = 1};

    /* A thread takes its name once it runs: under load it may not have run yet. */
    int now = 0;
    for (int64_t until = th_now_ms() + 10000; now != 1 && th_now_ms() < until;) {
        now = threads_named(&s->gw, "fg-sets");
        th_nap_ms(now != 1 ? 20 : 0);
    }
    assert_int_equal(now, 1);
    assert_int_equal(blocked_burst(s), 4);
    names_for("trickle", one.names, 2);
    now = 4;
    for (int64_t until = th_now_ms() + 30000; now > 1 && th_now_ms() < until;) {
        one.ok = 0;
        setter_main(&one);
        assert_int_equal(one.ok, 1);
        th_nap_ms(100); /* the trickle's pace */
        now = threads_named(&s->gw, "fg-sets");
    }
    assert_int_equal(now, 1);
    assert_int_equal(blocked_burst(s), 4);
}

static void test_wait_deadline_is_409(void **state)
{
    set_state *s = *state;
    char n[2][48];
    long long tok = 0;
    gwt_resp r;

    names_for("dead", n, 2);
    assert_int_equal(gwt_lock(&s->gw, n[0], "holder", &tok), 200);
    post_set(&s->gw, "/lock", n, 2, "o1", "\"wait_ms\":300", NULL, &r);
    gwt_assert_status(&r, 409, "locked");
    assert_true(names_in(&r, "resources", n[0]));
    gwt_resp_free(&r);
    assert_false(is_locked(&s->gw, n[1]));
    assert_int_equal(gwt_unlock(&s->gw, n[0], "holder"), 200);
}

/* The shared ledger: Redis loses its data between a set granted through A and one through
 * B, which knows no token yet: B's mints repeat A's tokens, the ledger refuses them, and
 * B's set is undone and granted again above the ledger, above every token A handed out. */
static void test_shared_ledger_lifts_a_set(void **state)
{
    set_state *s = *state;
    char n[2][48];
    gwt_resp r;
    long long first[2];

    names_for("led", n, 2);
    for (int round = 0; round < 3; round++) {
        post_set(&s->gw, "/lock", n, 2, "o1", NULL, NULL, &r);
        gwt_assert_status(&r, 200, NULL);
        first[0] = token_of(&r, n[0]);
        first[1] = token_of(&r, n[1]);
        gwt_resp_free(&r);
        post_set(&s->gw, "/unlock", n, 2, "o1", NULL, NULL, &r);
        gwt_assert_status(&r, 200, NULL);
        gwt_resp_free(&r);
    }
    assert_int_equal(th_redis_cmd(&s->redis, NULL, 0, "FLUSHALL"), 0);
    long long corrections = gwt_metric(&s->b, "fencegate_token_floor_corrections_total");
    post_set(&s->b, "/lock", n, 2, "o2", NULL, NULL, &r);
    gwt_assert_status(&r, 200, NULL);
    assert_true(token_of(&r, n[0]) > first[0]);
    assert_true(token_of(&r, n[1]) > first[1]);
    /* It took the ledger's refusal and a second attempt. */
    assert_true(gwt_metric(&s->b, "fencegate_token_floor_corrections_total") > corrections);
    /* The tokens are the resources' current ones: a fenced write with each passes. */
    assert_int_equal(gwt_put_fenced(&s->b, n[0], token_of(&r, n[0]), "v", NULL), 200);
    assert_int_equal(gwt_put_fenced(&s->gw, n[1], token_of(&r, n[1]), "v", NULL), 200);
    gwt_resp_free(&r);
}

/* A client that hangs up while its set is being taken keeps none of it: Redis is paused
 * (CLIENT PAUSE) so the hang-up surely comes first, and the 60 s lease would otherwise keep
 * the set for the whole test. */
static void test_hang_up_during_set_keeps_nothing(void **state)
{
    set_state *s = *state;
    char n[2][48], body[256], req[512];
    struct sockaddr_in addr;

    if (s->cluster) {
        skip(); /* CLIENT PAUSE of one node would not pause the others */
    }
    names_for("hang", n, 2);
    snprintf(body, sizeof body, "{\"resources\":[\"%s\",\"%s\"],\"owner\":\"gone\","
             "\"ttl_ms\":60000}", n[0], n[1]);
    int len = snprintf(req, sizeof req,
                       "POST /lock HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                       "application/json\r\nContent-Length: %zu\r\n\r\n%s",
                       strlen(body), body);
    th_redis_cmd(&s->redis, NULL, 0, "CLIENT PAUSE 700 WRITE");
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)s->gw.port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&addr, sizeof addr), 0);
    assert_int_equal(send(fd, req, (size_t)len, 0), len);
    close(fd);
    /* Taken once Redis runs again, then given back: wait until it was taken (the counter
     * moved) and is free again. */
    int64_t deadline = th_now_ms() + 10000;
    long long last = 0;
    for (;;) {
        char path[96];
        gwt_resp r;
        snprintf(path, sizeof path, "/locks/%s", n[0]);
        gwt_get(&s->gw, path, &r);
        last = gwt_int(&r, "last_token");
        int held = json_is_true(json_object_get(r.json, "locked"));
        gwt_resp_free(&r);
        if ((last > 0 && !held && !is_locked(&s->gw, n[1])) || th_now_ms() > deadline) {
            break;
        }
        th_nap_ms(20);
    }
    assert_true(last > 0);
    assert_false(is_locked(&s->gw, n[0]));
    assert_false(is_locked(&s->gw, n[1]));
}

/* "fair": true: a set never takes a free resource ahead of a fair waiter queued for it
 * (here one queued straight in Redis, with a deadline far off); without it, it may. */
/* A fair waiter "first-in-line" queued for resource (its wait never ends). */
static void queue_first_in_line(set_state *s, const char *resource)
{
    assert_int_equal(
        th_redis_cmd(&s->redis, NULL, 0, "RPUSH fg:{%s}:queue first-in-line", resource), 1);
    assert_int_equal(th_redis_cmd(&s->redis, NULL, 0,
                                  "ZADD fg:{%s}:qtimeout 99999999999999 first-in-line",
                                  resource),
                     1);
}

/* A fair set (extra: its fields) of n[0] and n[1], whose queue has a waiter first: 409
 * locked naming n[1], and n[0] is not held. */
static void refused_behind_the_queue(set_state *s, char n[][48], const char *extra)
{
    gwt_resp r;
    post_set(&s->gw, "/lock", n, 2, "o1", extra, NULL, &r);
    gwt_assert_status(&r, 409, "locked");
    assert_true(names_in(&r, "resources", n[1]));
    gwt_resp_free(&r);
    assert_false(is_locked(&s->gw, n[0]));
}

static void test_fair_set_does_not_barge(void **state)
{
    set_state *s = *state;
    char n[2][48];
    gwt_resp r;

    if (s->cluster) {
        skip(); /* the queue is written on one node here */
    }
    names_for("fair", n, 2);
    queue_first_in_line(s, n[1]);
    refused_behind_the_queue(s, n, "\"fair\":true");
    post_set(&s->gw, "/lock", n, 2, "o1", NULL, NULL, &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
    post_set(&s->gw, "/unlock", n, 2, "o1", NULL, NULL, &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
}

/* A fair shared set does not barge either, and two fair shared sets hold together. */
static void test_fair_shared_set(void **state)
{
    set_state *s = *state;
    char n[2][48];
    gwt_resp r;

    if (s->cluster) {
        skip(); /* the queue is written on one node here */
    }
    names_for("fairsh", n, 2);
    queue_first_in_line(s, n[1]);
    /* An exclusive waiter: in the queue and among the waiting writers. */
    assert_int_equal(th_redis_cmd(&s->redis, NULL, 0,
                                  "ZADD fg:{%s}:rwait 99999999999999 first-in-line", n[1]),
                     1);
    refused_behind_the_queue(s, n, "\"fair\":true,\"mode\":\"shared\"");
    assert_int_equal(th_redis_cmd(&s->redis, NULL, 0,
                                  "DEL fg:{%s}:queue fg:{%s}:qtimeout fg:{%s}:rwait", n[1], n[1],
                                  n[1]),
                     3);
    post_set(&s->gw, "/lock", n, 2, "o1", "\"fair\":true,\"mode\":\"shared\"", NULL, &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
    post_set(&s->gw, "/lock", n, 2, "o2", "\"fair\":true,\"mode\":\"shared\"", NULL, &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
    gwt_assert_lock_mode(&s->gw, n[1], "shared", 2);
    for (int i = 1; i <= 2; i++) {
        post_set(&s->gw, "/unlock", n, 2, i == 1 ? "o1" : "o2", NULL, NULL, &r);
        gwt_assert_status(&r, 200, NULL);
        gwt_resp_free(&r);
    }
}

/* The member mode of r's "locks" entry for resource, or "". */
static const char *mode_of(const gwt_resp *r, const char *resource)
{
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(r->json, "locks"), i, e) {
        if (strcmp(json_string_value(json_object_get(e, "resource")), resource) == 0) {
            const char *m = json_string_value(json_object_get(e, "mode"));
            return m != NULL ? m : "";
        }
    }
    return "";
}

#define SHARED "\"mode\":\"shared\""

/* Two owners hold one set shared together; an exclusive set with one of its members is
 * refused, or waits, holding new shared sets back, and is granted once both readers left. */
static void test_shared_set_held_together(void **state)
{
    set_state *s = *state;
    const gwt_proc *other = s->shared ? &s->b : &s->gw;
    char n[3][48], x[2][48], y[2][48];
    long long t = 0;
    gwt_resp r;

    names_for("shs", n, 3);
    names_for("shx", x, 2);
    names_for("shy", y, 2);
    memcpy(x[1], n[2], 48);
    memcpy(y[1], n[2], 48);
    /* n[1] had an exclusive holder: the shared token of n[1] is that holder's. */
    assert_int_equal(gwt_lock(&s->gw, n[1], "w0", &t), 200);
    assert_int_equal(gwt_unlock(&s->gw, n[1], "w0"), 200);
    post_set(&s->gw, "/lock", n, 3, "ra", SHARED, NULL, &r);
    gwt_assert_status(&r, 200, NULL);
    assert_string_equal(gwt_str(&r, "mode"), "shared");
    assert_string_equal(mode_of(&r, n[0]), "shared");
    assert_int_equal(token_of(&r, n[0]), 0); /* nothing was ever minted for it */
    assert_int_equal(token_of(&r, n[1]), t);
    gwt_resp_free(&r);
    post_set(other, "/lock", n, 3, "rb", SHARED, NULL, &r);
    gwt_assert_status(&r, 200, NULL);
    assert_int_equal(token_of(&r, n[1]), t);
    gwt_resp_free(&r);
    for (int i = 0; i < 3; i++) {
        gwt_assert_lock_mode(&s->gw, n[i], "shared", 2);
    }
    /* An exclusive set with one of them: 409 locked naming it, nothing of it held. */
    post_set(&s->gw, "/lock", x, 2, "wx", NULL, NULL, &r);
    gwt_assert_status(&r, 409, "locked");
    assert_true(names_in(&r, "resources", n[2]));
    gwt_resp_free(&r);
    assert_false(is_locked(&s->gw, x[0]));
    /* A reader's set in the other mode: 409 mode_mismatch, nothing changed. */
    post_set(&s->gw, "/lock", n, 3, "ra", NULL, NULL, &r);
    gwt_assert_status(&r, 409, "mode_mismatch");
    gwt_resp_free(&r);
    gwt_assert_lock_mode(&s->gw, n[0], "shared", 2);

    /* The exclusive set waits; meanwhile a new shared set with that member is held back. */
    setter w = {.gw = &s->gw, .owner = "wx", .rounds = 1};
    memcpy(w.names, x, sizeof w.names);
    assert_int_equal(pthread_create(&w.thread, NULL, setter_main, &w), 0);
    gwt_await_metric(&s->gw, "fencegate_waiters", 1);
    post_set(other, "/lock", y, 2, "rc", SHARED, NULL, &r);
    gwt_assert_status(&r, 409, "locked");
    assert_true(names_in(&r, "resources", n[2]));
    gwt_resp_free(&r);
    assert_false(is_locked(&s->gw, y[0]));
    post_set(&s->gw, "/unlock", n, 3, "ra", NULL, NULL, &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
    gwt_assert_lock_mode(&s->gw, n[2], "shared", 1);
    post_set(other, "/unlock", n, 3, "rb", NULL, NULL, &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
    pthread_join(w.thread, NULL);
    assert_int_equal(w.ok, 1);
    /* The exclusive grant minted n[2]'s first token: a shared set now answers it. */
    post_set(other, "/lock", y, 2, "rc", SHARED, NULL, &r);
    gwt_assert_status(&r, 200, NULL);
    assert_true(token_of(&r, n[2]) > 0);
    gwt_resp_free(&r);
    post_set(other, "/unlock", y, 2, "rc", NULL, NULL, &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
}

/* A shared set member's token cannot write (409 not_exclusive); the set renews, re-enters,
 * replays its Idempotency-Key and unlocks; a bad mode is a 400. */
static void test_shared_set_cannot_write(void **state)
{
    set_state *s = *state;
    char n[2][48];
    long long t = 0;
    gwt_resp r, again;

    names_for("shw", n, 2);
    assert_int_equal(gwt_lock(&s->gw, n[0], "w0", &t), 200);
    assert_int_equal(gwt_put_fenced(&s->gw, n[0], t, "old", NULL), 200);
    assert_int_equal(gwt_unlock(&s->gw, n[0], "w0"), 200);
    post_set(&s->gw, "/lock", n, 2, NULL, SHARED, "shared-set-key-0123456789", &r);
    gwt_assert_status(&r, 200, NULL);
    assert_int_equal(token_of(&r, n[0]), t);
    const char *owner = gwt_str(&r, "owner");

    char hdr[64];
    snprintf(hdr, sizeof hdr, "Fencing-Token: %lld", t);
    const char *const h[] = {hdr, "Content-Type: text/plain", NULL};
    char path[128];
    snprintf(path, sizeof path, "/resources/%s", n[0]);
    gwt_resp w;
    gwt_http(&s->gw, "PUT", path, h, "new", 3, 0, &w);
    gwt_assert_status(&w, 409, "not_exclusive");
    assert_true(gwt_int(&w, "shared_mark") >= t);
    gwt_resp_free(&w);
    gwt_assert_value(&s->gw, n[0], "old");

    /* The key replays the shared set; the key in the exclusive mode is refused. */
    post_set(&s->gw, "/lock", n, 2, NULL, SHARED, "shared-set-key-0123456789", &again);
    gwt_assert_status(&again, 200, NULL);
    assert_string_equal(gwt_str(&again, "owner"), owner);
    assert_int_equal(token_of(&again, n[0]), t);
    assert_string_equal(gwt_str(&again, "mode"), "shared");
    gwt_resp_free(&again);
    post_set(&s->gw, "/lock", n, 2, NULL, NULL, "shared-set-key-0123456789", &again);
    gwt_assert_status(&again, 422, "idempotency_key_reused");
    gwt_resp_free(&again);
    gwt_assert_lock_mode(&s->gw, n[1], "shared", 1);

    post_set(&s->gw, "/renew", n, 2, owner, "\"ttl_ms\":45000", NULL, &again);
    gwt_assert_status(&again, 200, NULL);
    assert_int_equal(token_of(&again, n[0]), t);
    gwt_resp_free(&again);
    post_set(&s->gw, "/unlock", n, 2, owner, NULL, NULL, &again);
    gwt_assert_status(&again, 200, NULL);
    gwt_resp_free(&again);
    assert_false(is_locked(&s->gw, n[0]));
    assert_false(is_locked(&s->gw, n[1]));
    gwt_resp_free(&r);
    expect_400(&s->gw, "{\"resources\":[\"m1\",\"m2\"],\"mode\":\"reader\"}", "mode");
}

/* A POST /lock of body on its own thread. */
typedef struct bg_post {
    const gwt_proc *gw;
    char body[256];
    long status;
    pthread_t thread;
} bg_post;

static void *bg_post_main(void *arg)
{
    bg_post *b = arg;
    gwt_resp r;
    gwt_post(b->gw, "/lock", b->body, &r);
    b->status = r.status;
    gwt_resp_free(&r);
    return NULL;
}

#define DEADLINE_WAKES "fencegate_waiter_wakes_total{reason=\"deadline\"}"

/* A shared set parked behind a single shared request, both behind an exclusive holder: the
 * holder's release wakes the single request first, and its grant hands on to the set, which
 * joins the readers, rather than waiting out the holder's lease or its own wait. */
static void test_shared_set_joins_the_readers(void **state)
{
    set_state *s = *state;
    char n[2][48];
    long long t = 0;
    gwt_resp r;

    names_for("chain", n, 2);
    assert_int_equal(gwt_lock(&s->gw, n[0], "w", &t), 200); /* a 60 s lease */
    long long parked = gwt_metric(&s->gw, "fencegate_waiters");
    long long deadlines = gwt_metric(&s->gw, DEADLINE_WAKES);
    bg_post one = {.gw = &s->gw}, set = {.gw = &s->gw};
    snprintf(one.body, sizeof one.body,
             "{\"resource\":\"%s\",\"owner\":\"r1\",\"mode\":\"shared\",\"wait_ms\":20000}",
             n[0]);
    snprintf(set.body, sizeof set.body,
             "{\"resources\":[\"%s\",\"%s\"],\"owner\":\"rs\",\"mode\":\"shared\","
             "\"wait_ms\":20000}",
             n[0], n[1]);
    assert_int_equal(pthread_create(&one.thread, NULL, bg_post_main, &one), 0);
    gwt_await_metric(&s->gw, "fencegate_waiters", parked + 1);
    assert_int_equal(pthread_create(&set.thread, NULL, bg_post_main, &set), 0);
    gwt_await_metric(&s->gw, "fencegate_waiters", parked + 2);
    assert_int_equal(gwt_unlock(&s->gw, n[0], "w"), 200);
    pthread_join(one.thread, NULL);
    pthread_join(set.thread, NULL);
    assert_int_equal(one.status, 200);
    assert_int_equal(set.status, 200);
    /* Handed on: neither was granted at the last attempt its deadline makes. */
    assert_int_equal(gwt_metric(&s->gw, DEADLINE_WAKES), deadlines);
    gwt_assert_lock_mode(&s->gw, n[0], "shared", 2);
    assert_int_equal(gwt_unlock(&s->gw, n[0], "r1"), 200);
    post_set(&s->gw, "/unlock", n, 2, "rs", NULL, NULL, &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_free_set_granted),
        cmocka_unit_test(test_held_member_is_409_and_nothing_held),
        cmocka_unit_test(test_reentry_and_idempotency),
        cmocka_unit_test(test_bad_sets_are_400),
        cmocka_unit_test(test_name_resources_is_a_single_lock),
        cmocka_unit_test(test_unlock_and_renew_per_resource),
        cmocka_unit_test(test_waiting_set_holds_nothing_meanwhile),
        cmocka_unit_test(test_opposite_orders_never_deadlock),
        cmocka_unit_test(test_wait_deadline_is_409),
        cmocka_unit_test(test_hang_up_during_set_keeps_nothing),
        cmocka_unit_test(test_fair_set_does_not_barge),
        cmocka_unit_test(test_shared_set_held_together),
        cmocka_unit_test(test_shared_set_cannot_write),
        cmocka_unit_test(test_shared_set_joins_the_readers),
        cmocka_unit_test(test_fair_shared_set),
    };
    int failed = cmocka_run_group_tests_name("lockset_single_redis", tests, single_setup,
                                             teardown);
    failed += cmocka_run_group_tests_name("lockset_cluster", tests, cluster_setup, teardown);
    const struct CMUnitTest threads[] = {
        cmocka_unit_test(test_set_threads_grow_and_retire),
    };
    failed += cmocka_run_group_tests_name("lockset_threads", threads, single_setup, teardown);
    const struct CMUnitTest shared[] = {
        cmocka_unit_test(test_shared_ledger_lifts_a_set),
        cmocka_unit_test(test_shared_set_held_together),
        cmocka_unit_test(test_shared_set_cannot_write),
    };
    failed += cmocka_run_group_tests_name("lockset_shared_ledger", shared, shared_setup,
                                          teardown);
    return failed;
}
