/*
 * The gateway on Redlock (--redis redlock://...), with 3 and with 5 real, independent
 * redis-servers (password-protected) and the real binary:
 *   - /readyz and /metrics name the topology and list every master, never the password;
 *   - lock, write, unlock; tokens grow; a paused holder's late write is a 409 once a newer
 *     holder has locked (its lease ran out meanwhile);
 *   - "fair": true answers 400 fair_unavailable naming the topology, and sessions (their
 *     routes, a /lock of one resource or a set in one) 400 sessions_unavailable;
 *   - a minority SIGKILLed: locks still work and /readyz lists the nodes that do not count;
 *     one more: /lock and /readyz answer 503; the nodes restarted with their data: /readyz
 *     is 200 again by itself, and the next token is above every earlier one;
 *   - a minority restarted without its data: /readyz and /metrics show it held out, with
 *     the time it rejoins; locks keep working with larger tokens;
 *   - a parked waiter (wait_ms) is woken by the release, once, though every master
 *     publishes it; and, when every master's subscriber connection dropped and the release
 *     reached nobody, by the resubscriptions;
 *   - an unlock hands the lock to a parked waiter, and a new waiting /lock parks on that
 *     known holder without a script on any master;
 *   - a waiter woken by the first master's copy of a release, whose attempt still finds the
 *     hold on a majority, naps and looks again, and takes the lock once the release
 *     reaches them.
 * No test asserts timing; every wait is a loop on a condition with a deadline.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gw_test.h"
#include "harness.h"

#define PASSWORD "gw-r3dlock-pw"

typedef struct rl_state {
    th_redis_set set;
    char url[TH_MAX_NODES * 40 + 64];
    char data[256];
    gwt_proc gw;
} rl_state;

static int setup_n(void **state, int n)
{
    rl_state *st = calloc(1, sizeof *st);
    th_redis_set_start(&st->set, n, PASSWORD);
    size_t len = (size_t)snprintf(st->url, sizeof st->url, "redlock://:%s@", PASSWORD);
    for (int i = 0; i < n; i++) {
        len += (size_t)snprintf(st->url + len, sizeof st->url - len, "%s127.0.0.1:%d",
                                i > 0 ? "," : "", st->set.nodes[i].port);
    }
    th_tempdir(st->data, sizeof st->data, "gwredlock");
    gwt_start(&st->gw, st->url, st->data, NULL);
    *state = st;
    return 0;
}

static int setup_3(void **state)
{
    return setup_n(state, 3);
}

static int setup_5(void **state)
{
    return setup_n(state, 5);
}

static int teardown(void **state)
{
    rl_state *st = *state;
    if (st->gw.pid > 0) {
        gwt_stop(&st->gw);
    }
    th_redis_set_stop(&st->set);
    th_rmtree(st->data);
    free(st);
    return 0;
}

/* POST /lock; returns the HTTP status and the token in *token (0 when none). */
static long lock(const gwt_proc *gw, const char *resource, const char *owner, int ttl_ms,
                 long long *token)
{
    char body[256];
    gwt_resp r;
    snprintf(body, sizeof body, "{\"resource\":\"%s\",\"owner\":\"%s\",\"ttl_ms\":%d}",
             resource, owner, ttl_ms);
    gwt_post(gw, "/lock", body, &r);
    long status = r.status;
    *token = status == 200 ? gwt_int(&r, "token") : 0;
    gwt_resp_free(&r);
    return status;
}

/* Locks and unlocks resource; returns the token. */
static long long grant(const rl_state *st, const char *resource)
{
    long long token = 0;
    assert_int_equal(lock(&st->gw, resource, "G", 10000, &token), 200);
    assert_int_equal(gwt_unlock(&st->gw, resource, "G"), 200);
    return token;
}

/* GET /readyz; returns the status, and the number of nodes that count in *counting and
 * held out in *held (from the topology, in the body or in the 503's details). */
static long readyz(const rl_state *st, int *counting, int *held)
{
    gwt_resp r;
    gwt_get(&st->gw, "/readyz", &r);
    long status = r.status;
    json_t *topo = json_object_get(r.json, "topology");
    if (topo == NULL) {
        topo = json_object_get(json_object_get(r.json, "details"), "topology");
    }
    json_t *nodes = json_object_get(topo, "nodes");
    *counting = *held = 0;
    for (size_t i = 0; i < json_array_size(nodes); i++) {
        json_t *n = json_array_get(nodes, i);
        *counting += json_is_true(json_object_get(n, "counts"));
        if (json_is_true(json_object_get(n, "held_out"))) {
            (*held)++;
            assert_true(json_integer_value(json_object_get(n, "held_out_until")) > 0);
        }
    }
    if (status == 200) {
        assert_string_equal(json_string_value(json_object_get(topo, "kind")), "redlock");
        assert_int_equal((int)json_array_size(nodes), st->set.n);
    }
    assert_null(strstr(r.body, PASSWORD));
    gwt_resp_free(&r);
    return status;
}

/* Waits (with a deadline) until /readyz answers want. Returns the last status. */
static long readyz_until(const rl_state *st, long want, int *counting, int *held)
{
    long status = 0;
    int64_t deadline = th_now_ms() + 30000;
    do {
        status = readyz(st, counting, held);
        if (status != want) {
            th_nap_ms(50);
        }
    } while (status != want && th_now_ms() < deadline);
    return status;
}

/* GET /locks on Redlock lists what a majority holds: a hold written on one master alone (a
 * minority: an acquisition short of its majority, before its undo) is not listed, one on
 * a majority is. A forced release fences the holder on every master. */
static void test_list_majority_view_and_force(void **state)
{
    rl_state *st = *state;
    char list[1024];
    long long token = 0, fenced = 0;

    assert_int_equal(lock(&st->gw, "rl.b", "owner-b", 60000, &token), 200);
    assert_int_equal(lock(&st->gw, "rl.a", "owner-a", 60000, &fenced), 200);
    int last = st->set.n - 1;
    for (int i = 0; i < st->set.n / 2 + 1; i++) { /* rl.m on a majority, rl.x on one */
        th_redis_cmd(&st->set.nodes[i], NULL, 0,
                     "HSET fg:{rl.m}:lock #token 900 someone 1");
        th_redis_cmd(&st->set.nodes[i], NULL, 0, "PEXPIRE fg:{rl.m}:lock 60000");
    }
    th_redis_cmd(&st->set.nodes[last], NULL, 0, "HSET fg:{rl.x}:lock #token 901 someone 1");
    th_redis_cmd(&st->set.nodes[last], NULL, 0, "PEXPIRE fg:{rl.x}:lock 60000");
    assert_int_equal(gwt_list_all(&st->gw, NULL, 1, list, sizeof list), 3);
    assert_string_equal(list, "rl.a,rl.b,rl.m");

    gwt_resp r;
    gwt_post(&st->gw, "/admin/release", "{\"resource\":\"rl.b\",\"reason\":\"stuck\"}",
             &r);
    gwt_assert_status(&r, 200, NULL);
    assert_true(json_is_true(json_object_get(r.json, "released")));
    assert_int_equal(gwt_int(&r, "fenced_token"), token);
    gwt_resp_free(&r);
    assert_int_equal(gwt_unlock(&st->gw, "rl.b", "owner-b"), 409);
    gwt_put_fenced(&st->gw, "rl.b", token, "late", &r);
    gwt_assert_status(&r, 409, "stale_token");
    assert_true(gwt_int(&r, "superseded_by") > token);
    gwt_resp_free(&r);
    long long next = 0;
    assert_int_equal(lock(&st->gw, "rl.b", "owner-c", 60000, &next), 200);
    assert_true(next > token);
    assert_int_equal(gwt_list_all(&st->gw, "rl.", 10, list, sizeof list), 3);
}

static void test_lock_write_and_observability(void **state)
{
    rl_state *st = *state;
    long long a = 0, b = 0;
    int counting = 0, held = 0;
    gwt_resp r;

    assert_int_equal(readyz(st, &counting, &held), 200);
    assert_int_equal(counting, st->set.n);
    gwt_get(&st->gw, "/metrics", &r);
    assert_non_null(strstr(r.body, "fencegate_redis_topology{kind=\"redlock\"} 1\n"));
    assert_non_null(strstr(r.body, "fencegate_redlock_node_counts{addr=\"127.0.0.1:"));
    assert_non_null(strstr(r.body, "fencegate_redlock_node_held_out_until_seconds{addr="));
    assert_null(strstr(r.body, PASSWORD));
    gwt_resp_free(&r);

    /* A holds with a short lease and "pauses"; once it ran out B locks, and A's late write
     * is refused: the token, not the lock, keeps the data safe. */
    assert_int_equal(lock(&st->gw, "rl.doc", "A", 300, &a), 200);
    int64_t deadline = th_now_ms() + 20000;
    while (lock(&st->gw, "rl.doc", "B", 10000, &b) == 409 && th_now_ms() < deadline) {
        th_nap_ms(50);
    }
    assert_true(b > a);
    assert_int_equal(gwt_put_fenced(&st->gw, "rl.doc", a, "late from A", NULL), 409);
    assert_int_equal(gwt_put_fenced(&st->gw, "rl.doc", b, "from B", NULL), 200);
    assert_int_equal(gwt_unlock(&st->gw, "rl.doc", "B"), 200);

    gwt_post(&st->gw, "/lock", "{\"resource\":\"rl.fair\",\"owner\":\"A\",\"fair\":true}", &r);
    gwt_assert_status(&r, 400, "fair_unavailable");
    assert_non_null(strstr(r.body, "redlock"));
    gwt_resp_free(&r);
    /* Sessions are not built on Redlock: their routes and a /lock in a session, of one
     * resource or a set, are 400 sessions_unavailable. */
    const char *const no_sessions[][2] = {
        {"/sessions", "{\"ttl_ms\":1000}"},
        {"/lock", "{\"resource\":\"rl.s\",\"session\":\"0123456789abcdef0123456789abcdef\"}"},
        {"/lock", "{\"resources\":[\"rl.s1\",\"rl.s2\"],"
                  "\"session\":\"0123456789abcdef0123456789abcdef\"}"},
    };
    for (size_t i = 0; i < sizeof no_sessions / sizeof no_sessions[0]; i++) {
        gwt_post(&st->gw, no_sessions[i][0], no_sessions[i][1], &r);
        gwt_assert_status(&r, 400, "sessions_unavailable");
        assert_non_null(strstr(r.body, "redlock"));
        gwt_resp_free(&r);
    }
    assert_false(gwt_log_contains(&st->gw, PASSWORD));
}

static void test_minority_then_majority_down(void **state)
{
    rl_state *st = *state;
    int n = st->set.n, minority = n / 2, counting = 0, held = 0;
    long long token = 0;

    long long before = grant(st, "rl.down");
    for (int i = 0; i < minority; i++) {
        th_redis_kill(&st->set.nodes[i]);
    }
    long long during = grant(st, "rl.down");
    assert_true(during > before);
    assert_int_equal(readyz(st, &counting, &held), 200);
    assert_int_equal(counting, n - minority);

    th_redis_kill(&st->set.nodes[minority]);
    assert_int_equal(lock(&st->gw, "rl.down", "G", 10000, &token), 503);
    assert_int_equal(readyz(st, &counting, &held), 503);
    assert_int_equal(counting, n - minority - 1);

    for (int i = 0; i <= minority; i++) {
        th_redis_restart(&st->set.nodes[i]);
    }
    assert_int_equal(readyz_until(st, 200, &counting, &held), 200);
    assert_true(grant(st, "rl.down") > during);
    assert_int_equal(held, 0);
}

static void test_minority_loses_data(void **state)
{
    rl_state *st = *state;
    int n = st->set.n, minority = n / 2, counting = 0, held = 0;
    gwt_resp r;

    long long before = grant(st, "rl.loss");
    for (int i = 0; i < minority; i++) {
        th_redis_kill(&st->set.nodes[i]);
        th_redis_wipe_files(&st->set.nodes[i]);
        th_redis_restart(&st->set.nodes[i]);
    }
    long long after = grant(st, "rl.loss");
    assert_true(after > before);
    assert_int_equal(readyz(st, &counting, &held), 200);
    assert_int_equal(held, minority);
    assert_int_equal(counting, n - minority);
    gwt_get(&st->gw, "/metrics", &r);
    assert_non_null(strstr(r.body, "fencegate_redlock_node_counts{addr=\"127.0.0.1:"));
    assert_null(strstr(r.body, PASSWORD));
    gwt_resp_free(&r);
    assert_true(grant(st, "rl.loss") > after);
}

typedef struct waiter {
    const gwt_proc *gw;
    long status;
    long long token;
    const char *resource; /* NULL: rl.wait */
    const char *owner;    /* NULL: W */
    int unlock_after;     /* release the lock as soon as it is granted */
    long unlocked;        /* the status of that /unlock */
} waiter;

static void *wait_main(void *arg)
{
    waiter *w = arg;
    const char *resource = w->resource != NULL ? w->resource : "rl.wait";
    const char *owner = w->owner != NULL ? w->owner : "W";
    char body[256];
    gwt_resp r;
    snprintf(body, sizeof body,
             "{\"resource\":\"%s\",\"owner\":\"%s\",\"ttl_ms\":10000,\"wait_ms\":20000}",
             resource, owner);
    gwt_post(w->gw, "/lock", body, &r);
    w->status = r.status;
    w->token = r.status == 200 ? gwt_int(&r, "token") : 0;
    gwt_resp_free(&r);
    if (w->status == 200 && w->unlock_after) {
        w->unlocked = gwt_unlock(w->gw, resource, owner);
    }
    return NULL;
}

/* H locks rl.wait with a lease (60 s) that outlasts W's wait (20 s), and W's /lock is
 * parked in the gateway. Returns H's token. */
static long long park_waiter(const rl_state *st, waiter *w, pthread_t *th)
{
    long long held = 0;
    assert_int_equal(lock(&st->gw, "rl.wait", "H", 60000, &held), 200);
    assert_int_equal(pthread_create(th, NULL, wait_main, w), 0);
    gwt_await_metric(&st->gw, "fencegate_waiters", 1);
    return held;
}

static void numsub_until(const rl_state *st, const char *resource, long long want);

/* A parked waiter is woken by the release, once, though every master publishes it. The
 * subscription's own confirmation is a wake too when it reaches the gateway after the
 * waiter parked (a release may have been missed before it: waiters.c on_sub_event), so the
 * wakes are counted from when every master has the subscription and the waiter is parked
 * again; only the release's wakes are compared. */
static void test_waiter_woken_once(void **state)
{
    rl_state *st = *state;
    waiter w = {.gw = &st->gw};
    pthread_t th;
    long long held = park_waiter(st, &w, &th);

    numsub_until(st, "rl.wait", 1);
    gwt_await_metric(&st->gw, "fencegate_redis_subscriptions", 1); /* and the gateway saw it */
    gwt_await_metric(&st->gw, "fencegate_waiters", 1);
    long long before = gwt_metric(&st->gw, "fencegate_waiter_wakes_total{reason=\"release\"}");
    assert_int_equal(gwt_unlock(&st->gw, "rl.wait", "H"), 200);
    pthread_join(th, NULL);
    assert_int_equal(w.status, 200);
    assert_true(w.token > held);
    assert_int_equal(
        gwt_metric(&st->gw, "fencegate_waiter_wakes_total{reason=\"release\"}") - before, 1);
    assert_int_equal(gwt_unlock(&st->gw, "rl.wait", "W"), 200);
}

static long long numsub(const rl_state *st, int k, const char *resource)
{
    char script[160];
    snprintf(script, sizeof script,
             "return redis.call('PUBSUB','NUMSUB','fg:{%s}:released')[2]", resource);
    return th_redis_cmd(&st->set.nodes[k], NULL, 0, "EVAL %s 0", script);
}

/* Waits (with a deadline) until every master has want subscribers of resource's channel. */
static void numsub_until(const rl_state *st, const char *resource, long long want)
{
    int64_t deadline = th_now_ms() + 20000;
    for (int k = 0; k < st->set.n; k++) {
        while (numsub(st, k, resource) != want) {
            if (th_now_ms() > deadline) {
                fail_msg("master %d: subscribers of %s never became %lld", k, resource, want);
            }
            th_nap_ms(20);
        }
    }
}

/* Every master's subscriber connection is killed, and resubscribing is refused (an ACL
 * takes SUBSCRIBE away) while the holder releases: the release's message reaches nobody.
 * Once SUBSCRIBE is allowed again, each master is resubscribed by itself, and the gateway
 * takes the repeated confirmation for a release it may have missed: the parked waiter
 * looks again and is granted, long before its own deadline (20 s) or the holder's lease
 * (60 s). Without that it waits out its 20 s (checked: a deadline wake, then granted by
 * its last look). */
static void test_waiter_woken_after_missed_release(void **state)
{
    rl_state *st = *state;
    waiter w = {.gw = &st->gw};
    pthread_t th;
    long long held = park_waiter(st, &w, &th);

    numsub_until(st, "rl.wait", 1);
    for (int k = 0; k < st->set.n; k++) {
        assert_int_equal(th_redis_cmd(&st->set.nodes[k], NULL, 0,
                                      "ACL SETUSER default -subscribe"), 0);
        assert_true(th_redis_cmd(&st->set.nodes[k], NULL, 0, "CLIENT KILL TYPE pubsub") >= 1);
    }
    numsub_until(st, "rl.wait", 0);
    assert_int_equal(gwt_unlock(&st->gw, "rl.wait", "H"), 200); /* published to nobody */
    for (int k = 0; k < st->set.n; k++) {
        assert_int_equal(th_redis_cmd(&st->set.nodes[k], NULL, 0,
                                      "ACL SETUSER default +subscribe"), 0);
    }
    pthread_join(th, NULL);
    assert_int_equal(w.status, 200);
    assert_true(w.token > held);
    /* Woken as by a release, not granted by the last look at its own deadline. */
    assert_true(gwt_metric(&st->gw, "fencegate_waiter_wakes_total{reason=\"release\"}") >= 1);
    assert_int_equal(gwt_metric(&st->gw, "fencegate_waiter_wakes_total{reason=\"deadline\"}"), 0);
    assert_int_equal(gwt_unlock(&st->gw, "rl.wait", "W"), 200);
}

/* EVALSHA calls served, summed over every master (INFO commandstats). */
static long long evalsha_calls(const rl_state *st)
{
    long long sum = 0;
    for (int k = 0; k < st->set.n; k++) {
        char info[8192] = "";
        th_redis_cmd(&st->set.nodes[k], info, sizeof info, "INFO commandstats");
        const char *p = strstr(info, "cmdstat_evalsha:calls=");
        sum += p != NULL ? strtoll(p + strlen("cmdstat_evalsha:calls="), NULL, 10) : 0;
    }
    return sum;
}

/* Known holders and hand-offs on Redlock (gateway/src/rt/waiters.c): every master's release
 * message names the grant's token, as on one Redis. H's unlock hands the lock to A, the
 * first parked waiter, in the same batch; A's hand-off grant is then the known holder, so
 * C's waiting /lock parks without a script on any master, and A's unlock hands the lock to
 * B, whose unlock hands it to C. Before the messages had a token, the hand-off's message
 * moved the resource's epoch, which forgot the holder, and C asked every master. */
static void test_waiting_request_parks_on_a_known_holder(void **state)
{
    rl_state *st = *state;
    waiter a = {.gw = &st->gw, .resource = "rl.known", .owner = "A"};
    waiter b = {.gw = &st->gw, .resource = "rl.known", .owner = "B", .unlock_after = 1};
    waiter c = {.gw = &st->gw, .resource = "rl.known", .owner = "C", .unlock_after = 1};
    pthread_t ta, tb, tc;
    long long held = 0;

    assert_int_equal(lock(&st->gw, "rl.known", "H", 60000, &held), 200);
    assert_int_equal(pthread_create(&ta, NULL, wait_main, &a), 0);
    gwt_await_metric(&st->gw, "fencegate_waiters", 1);
    numsub_until(st, "rl.known", 1);
    /* The confirmation forgets a known holder (a release may have been missed before it):
     * it must come before A's grant. */
    gwt_await_metric(&st->gw, "fencegate_redis_subscriptions", 1);
    gwt_await_metric(&st->gw, "fencegate_waiters", 1); /* A parked again after its wake */
    assert_int_equal(pthread_create(&tb, NULL, wait_main, &b), 0);
    gwt_await_metric(&st->gw, "fencegate_waiters", 2);
    long long handoffs = gwt_metric(&st->gw, "fencegate_lock_handoffs_total");
    assert_int_equal(gwt_unlock(&st->gw, "rl.known", "H"), 200); /* to A */
    pthread_join(ta, NULL);
    assert_int_equal(a.status, 200);
    assert_true(a.token > held);
    assert_int_equal(gwt_metric(&st->gw, "fencegate_lock_handoffs_total"), handoffs + 1);

    long long before = evalsha_calls(st);
    assert_int_equal(pthread_create(&tc, NULL, wait_main, &c), 0);
    gwt_await_metric(&st->gw, "fencegate_waiters_parked_unasked_total", 1);
    assert_int_equal(evalsha_calls(st), before);
    gwt_await_metric(&st->gw, "fencegate_waiters", 2);

    assert_int_equal(gwt_unlock(&st->gw, "rl.known", "A"), 200); /* B, then C */
    pthread_join(tb, NULL);
    pthread_join(tc, NULL);
    assert_int_equal(b.status, 200);
    assert_int_equal(c.status, 200);
    assert_int_equal(b.unlocked, 200);
    assert_int_equal(c.unlocked, 200);
    assert_true(a.token < b.token && b.token < c.token);
    assert_int_equal(gwt_metric(&st->gw, "fencegate_waiter_wakes_total{reason=\"deadline\"}"), 0);
}

/* Settling (gateway/src/rt/waiters.c): a release reaches the masters one by one and is
 * reported once, at its first master's message, so the attempt that message wakes can find
 * a majority still held by that very hold. Once W is parked behind H (60 s lease), master
 * 0's release message is published by hand, as if master 0 had released first; the attempt
 * it wakes is answered held (nothing was released), and must nap and look again: an expiry
 * wake, which nothing else gives before H's lease ends. Then the release reaches every
 * master (the lock deleted by hand, which publishes nothing more, as the other masters'
 * copies of a message reported already wake nobody), and W takes the lock. Without the
 * naps the expiry wake never comes (W parks for H's lease; checked). */
static void test_waiter_woken_before_the_release_reaches_a_majority(void **state)
{
    rl_state *st = *state;
    waiter w = {.gw = &st->gw, .resource = "rl.settle"};
    pthread_t th;
    long long held = 0;

    assert_int_equal(lock(&st->gw, "rl.settle", "H", 60000, &held), 200);
    assert_int_equal(pthread_create(&th, NULL, wait_main, &w), 0);
    gwt_await_metric(&st->gw, "fencegate_waiters", 1);
    numsub_until(st, "rl.settle", 1);
    gwt_await_metric(&st->gw, "fencegate_redis_subscriptions", 1); /* its wake came */
    assert_int_equal(gwt_metric(&st->gw, "fencegate_waiter_wakes_total{reason=\"expiry\"}"), 0);
    assert_int_equal(th_redis_cmd(&st->set.nodes[0], NULL, 0,
                                  "EVAL %s 2 fg:{rl.settle}:lock fg:{rl.settle}:released",
                                  "local ids = redis.call('HMGET', KEYS[1], '#token', '#hold') "
                                  "return redis.call('PUBLISH', KEYS[2], ids[1] .. ':' .. ids[2])"),
                     1);
    int64_t deadline = th_now_ms() + 20000;
    while (gwt_metric(&st->gw, "fencegate_waiter_wakes_total{reason=\"expiry\"}") < 1 &&
           th_now_ms() < deadline) {
        th_nap_ms(2);
    }
    long long naps = gwt_metric(&st->gw, "fencegate_waiter_wakes_total{reason=\"expiry\"}");
    for (int k = 0; k < st->set.n; k++) {
        assert_int_equal(th_redis_cmd(&st->set.nodes[k], NULL, 0, "DEL fg:{rl.settle}:lock"), 1);
    }
    pthread_join(th, NULL);
    assert_true(naps >= 1);
    assert_int_equal(w.status, 200);
    assert_true(w.token > held);
    assert_int_equal(gwt_unlock(&st->gw, "rl.settle", "W"), 200);
}

#define TESTS(setup)                                                                       \
    {                                                                                      \
        cmocka_unit_test_setup_teardown(test_lock_write_and_observability, setup, teardown), \
            cmocka_unit_test_setup_teardown(test_list_majority_view_and_force, setup,      \
                                            teardown),                                     \
            cmocka_unit_test_setup_teardown(test_minority_then_majority_down, setup,       \
                                            teardown),                                     \
            cmocka_unit_test_setup_teardown(test_minority_loses_data, setup, teardown),    \
            cmocka_unit_test_setup_teardown(test_waiter_woken_once, setup, teardown),      \
            cmocka_unit_test_setup_teardown(test_waiter_woken_after_missed_release, setup, \
                                            teardown),                                     \
            cmocka_unit_test_setup_teardown(test_waiting_request_parks_on_a_known_holder,  \
                                            setup, teardown),                              \
            cmocka_unit_test_setup_teardown(                                               \
                test_waiter_woken_before_the_release_reaches_a_majority, setup, teardown), \
    }

int main(void)
{
    const struct CMUnitTest three[] = TESTS(setup_3);
    const struct CMUnitTest five[] = TESTS(setup_5);
    int failed = cmocka_run_group_tests_name("gateway_redlock_3", three, NULL, NULL);
    failed += cmocka_run_group_tests_name("gateway_redlock_5", five, NULL, NULL);
    return failed;
}
