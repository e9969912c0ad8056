/*
 * Shared (read) locks through the gateway on the topologies other than one redis-server, with
 * real processes: Redis Sentinel (1 master, 1 replica, 3 sentinels), a 3-master Redis
 * Cluster and Redlock over 3 independent masters. Two gateways share each one. On each:
 *   - a shared grant, and a second shared holder through the other gateway, both with the
 *     resource's current token; GET /locks/{r} and GET /locks show the mode and holders;
 *   - an exclusive request parked on one gateway holds a new reader back (writers'
 *     preference), is still waiting after the first reader left, and is granted once the
 *     second one released through the other gateway (the release's message wakes it),
 *     with a token above the readers';
 *   - the same with sets: two owners hold a set shared (on the Cluster its members live
 *     on different masters), an exclusive set waits and is granted when both left.
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

#define PASSWORD "gw-sh4red-pw"

typedef enum topo { TOPO_SENTINEL, TOPO_CLUSTER, TOPO_REDLOCK } topo;

typedef struct topo_state {
    topo kind;
    th_sentinel sn;
    th_cluster cl;
    th_redis_set set;
    char url[TH_MAX_NODES * 40 + 64];
    gwt_proc gw[2];
} topo_state;

static void start_gateways(topo_state *st, const char *url)
{
    gwt_start(&st->gw[0], url, NULL, NULL);
    gwt_start(&st->gw[1], url, NULL, NULL);
}

static int sentinel_setup(void **state)
{
    topo_state *st = calloc(1, sizeof *st);
    st->kind = TOPO_SENTINEL;
    th_sentinel_start(&st->sn, "fgshared", 1, 3, PASSWORD);
    start_gateways(st, st->sn.url);
    *state = st;
    return 0;
}

static int cluster_setup(void **state)
{
    topo_state *st = calloc(1, sizeof *st);
    st->kind = TOPO_CLUSTER;
    th_cluster_start(&st->cl, 3, 0, PASSWORD);
    start_gateways(st, st->cl.url);
    *state = st;
    return 0;
}

static int redlock_setup(void **state)
{
    topo_state *st = calloc(1, sizeof *st);
    st->kind = TOPO_REDLOCK;
    th_redis_set_start(&st->set, 3, PASSWORD);
    size_t len = (size_t)snprintf(st->url, sizeof st->url, "redlock://:%s@", PASSWORD);
    for (int i = 0; i < 3; i++) {
        len += (size_t)snprintf(st->url + len, sizeof st->url - len, "%s127.0.0.1:%d",
                                i > 0 ? "," : "", st->set.nodes[i].port);
    }
    start_gateways(st, st->url);
    *state = st;
    return 0;
}

static int teardown(void **state)
{
    topo_state *st = *state;
    int rc = gwt_stop(&st->gw[0]) | gwt_stop(&st->gw[1]);
    if (st->kind == TOPO_SENTINEL) {
        th_sentinel_stop(&st->sn);
    } else if (st->kind == TOPO_CLUSTER) {
        th_cluster_stop(&st->cl);
    } else {
        th_redis_set_stop(&st->set);
    }
    free(st);
    return rc == 0 ? 0 : -1;
}

/* A POST /lock of one resource, or of a set (names[0..n), n >= 2), on its own thread. */
typedef struct bg_lock {
    const gwt_proc *gw;
    const char *names[3];
    int n;
    const char *owner;
    const char *mode;
    long wait_ms;
    long status;               /* 0 until answered */
    long long token;           /* of names[0] */
    pthread_t thread;
} bg_lock;

static void lock_body(const bg_lock *b, char *body, size_t len)
{
    int off;
    if (b->n == 1) {
        off = snprintf(body, len, "{\"resource\":\"%s\"", b->names[0]);
    } else {
        off = snprintf(body, len, "{\"resources\":[");
        for (int i = 0; i < b->n; i++) {
            off += snprintf(body + off, len - (size_t)off, "%s\"%s\"", i ? "," : "",
                            b->names[i]);
        }
        off += snprintf(body + off, len - (size_t)off, "]");
    }
    snprintf(body + off, len - (size_t)off,
             ",\"owner\":\"%s\",\"mode\":\"%s\",\"ttl_ms\":20000,\"wait_ms\":%ld}", b->owner,
             b->mode, b->wait_ms);
}

/* The token of names[0] in a /lock answer (a set's "locks" or a single lock's "token"). */
static long long first_token(const gwt_resp *r, int n)
{
    if (n == 1) {
        return gwt_int(r, "token");
    }
    json_t *e = json_array_get(json_object_get(r->json, "locks"), 0);
    return (long long)json_integer_value(json_object_get(e, "token"));
}

static void lock_now(bg_lock *b, gwt_resp *r)
{
    char body[512];
    lock_body(b, body, sizeof body);
    gwt_post(b->gw, "/lock", body, r);
    b->token = r->status == 200 ? first_token(r, b->n) : 0;
}

static void *bg_lock_run(void *p)
{
    bg_lock *b = p;
    gwt_resp r;
    lock_now(b, &r);
    long status = r.status;
    gwt_resp_free(&r);
    __atomic_store_n(&b->status, status, __ATOMIC_SEQ_CST);
    return NULL;
}

static void unlock(const gwt_proc *gw, const bg_lock *b)
{
    char body[512];
    gwt_resp r;
    bg_lock u = *b;
    lock_body(&u, body, sizeof body);
    /* The same names and owner; /unlock knows no mode, ttl_ms or wait_ms. */
    char *cut = strstr(body, ",\"mode\"");
    snprintf(cut, sizeof body - (size_t)(cut - body), "}");
    gwt_post(gw, "/unlock", body, &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
}

/* Readers ra (gateway 0) and rb (gateway 1) hold names shared; the writer wx parks on
 * gateway 0; a new reader rc is held back; wx is granted once both readers left. */
static void readers_then_writer(topo_state *st, const char *const *names, int n,
                                long long current)
{
    gwt_resp r;
    bg_lock ra = {.gw = &st->gw[0], .n = n, .owner = "ra", .mode = "shared"};
    for (int k = 0; k < n; k++) {
        ra.names[k] = names[k];
    }
    bg_lock rb = ra, rc = ra, wx = ra;
    rb.gw = &st->gw[1];
    rb.owner = "rb";
    rc.gw = &st->gw[1];
    rc.owner = "rc";
    wx.owner = "wx";
    wx.mode = "exclusive";
    wx.wait_ms = 30000;

    lock_now(&ra, &r);
    gwt_assert_status(&r, 200, NULL);
    assert_string_equal(gwt_str(&r, "mode"), "shared");
    assert_int_equal(ra.token, current);
    gwt_resp_free(&r);
    lock_now(&rb, &r);
    gwt_assert_status(&r, 200, NULL);
    assert_int_equal(rb.token, current);
    gwt_resp_free(&r);
    for (int i = 0; i < n; i++) {
        gwt_assert_lock_mode(&st->gw[i % 2], names[i], "shared", 2);
    }
    gwt_get(&st->gw[1], "/locks?prefix=sht", &r);
    gwt_assert_status(&r, 200, NULL);
    size_t i;
    json_t *e;
    int listed = 0;
    json_array_foreach(json_object_get(r.json, "locks"), i, e) {
        if (strcmp(json_string_value(json_object_get(e, "resource")), names[0]) == 0) {
            assert_string_equal(json_string_value(json_object_get(e, "mode")), "shared");
            assert_int_equal(json_integer_value(json_object_get(e, "holders")), 2);
            listed = 1;
        }
    }
    assert_true(listed);
    gwt_resp_free(&r);

    long long parked = gwt_metric(&st->gw[0], "fencegate_waiters");
    assert_int_equal(pthread_create(&wx.thread, NULL, bg_lock_run, &wx), 0);
    gwt_await_metric(&st->gw[0], "fencegate_waiters", parked + 1);
    lock_now(&rc, &r);
    gwt_assert_status(&r, 409, "locked"); /* the waiting writer goes first */
    gwt_resp_free(&r);
    unlock(&st->gw[1], &ra);
    gwt_assert_lock_mode(&st->gw[0], names[n - 1], "shared", 1);
    assert_int_equal(__atomic_load_n(&wx.status, __ATOMIC_SEQ_CST), 0); /* rb holds */
    unlock(&st->gw[0], &rb);
    pthread_join(wx.thread, NULL);
    assert_int_equal(wx.status, 200);
    assert_true(wx.token > current);
    for (int k = 0; k < n; k++) {
        gwt_assert_lock_mode(&st->gw[1], names[k], "exclusive", 1);
    }
    unlock(&st->gw[1], &wx);
}

static void test_shared_single(void **state)
{
    topo_state *st = *state;
    long long t = 0;
    const char *const names[] = {"sht.one"};

    assert_int_equal(gwt_lock(&st->gw[0], names[0], "w0", &t), 200);
    assert_int_equal(gwt_unlock(&st->gw[0], names[0], "w0"), 200);
    readers_then_writer(st, names, 1, t);
}

static void test_shared_set(void **state)
{
    topo_state *st = *state;
    /* On the Cluster "sht.set.a" .. "sht.set.c" hash to slots of more than one master. */
    const char *const names[] = {"sht.set.a", "sht.set.b", "sht.set.c"};
    if (st->kind == TOPO_CLUSTER) {
        int owners[3];
        for (int i = 0; i < 3; i++) {
            char key[64];
            int len = snprintf(key, sizeof key, "{%s}", names[i]);
            owners[i] = th_cluster_slot_owner(&st->cl, 0, th_key_slot(key, (size_t)len));
        }
        assert_true(owners[0] != owners[1] || owners[1] != owners[2]);
    }
    /* names[0] was locked exclusively once: its shared token is that grant's. */
    long long t = 0;
    assert_int_equal(gwt_lock(&st->gw[1], names[0], "w0", &t), 200);
    assert_int_equal(gwt_unlock(&st->gw[1], names[0], "w0"), 200);
    readers_then_writer(st, names, 3, t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_single),
        cmocka_unit_test(test_shared_set),
    };
    int failed = cmocka_run_group_tests_name("shared_sentinel", tests, sentinel_setup,
                                             teardown);
    failed += cmocka_run_group_tests_name("shared_cluster", tests, cluster_setup, teardown);
    failed += cmocka_run_group_tests_name("shared_redlock", tests, redlock_setup, teardown);
    return failed;
}
