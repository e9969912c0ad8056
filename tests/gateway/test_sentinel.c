/*
 * The gateway on Redis Sentinel, with real processes (1 master, 1 replica, 3 sentinels):
 *   - /readyz and /metrics name the topology and the master, never the password;
 *   - --redis-min-replicas 1 grants while the replica acknowledges (also a set in a session,
 *     whose record WAITs too), and answers 503 (the hold undone) once it does not;
 *   - the master is SIGKILLed right after a grant the replica missed (it was detached with
 *     REPLICAOF NO ONE, so the miss is certain, not a race): the sentinels promote it, the
 *     gateway follows by itself, the new holder's token is above the lost grant's (the
 *     gateway's floor), and the older holder's write is refused as soon as the newer holder
 *     has locked, before the newer holder writes anything.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gw_test.h"
#include "harness.h"

#define MASTER_NAME "fgmaster"
#define PASSWORD "gw-s3ntinel-pw"

typedef struct sn_state {
    th_sentinel s;
    gwt_proc gw;
    char data[256];
} sn_state;

static int setup(void **state)
{
    sn_state *st = calloc(1, sizeof *st);
    th_sentinel_start(&st->s, MASTER_NAME, 1, 3, PASSWORD);
    th_tempdir(st->data, sizeof st->data, "gwsentinel");
    *state = st;
    return 0;
}

static int teardown(void **state)
{
    sn_state *st = *state;
    if (st->gw.pid > 0) {
        gwt_stop(&st->gw);
    }
    th_sentinel_stop(&st->s);
    th_rmtree(st->data);
    free(st);
    return 0;
}

/* Checks /readyz names the sentinel topology, master node `master` and `failovers`. */
static void assert_ready_on(const sn_state *st, int master, long long failovers)
{
    gwt_resp r;
    char want[64];
    gwt_get(&st->gw, "/readyz", &r);
    gwt_assert_status(&r, 200, NULL);
    json_t *topo = json_object_get(r.json, "topology");
    assert_non_null(topo);
    assert_string_equal(json_string_value(json_object_get(topo, "kind")), "sentinel");
    snprintf(want, sizeof want, "127.0.0.1:%d", st->s.redis[master].port);
    assert_string_equal(json_string_value(json_object_get(topo, "master")), want);
    assert_int_equal(json_integer_value(json_object_get(topo, "failovers")), failovers);
    const char *url = json_string_value(json_object_get(topo, "url"));
    assert_non_null(strstr(url, "redis-sentinel://"));
    assert_non_null(strstr(url, MASTER_NAME));
    assert_null(strstr(r.body, PASSWORD));
    gwt_resp_free(&r);
    gwt_get(&st->gw, "/metrics", &r);
    assert_non_null(strstr(r.body, "fencegate_redis_topology{kind=\"sentinel\"} 1\n"));
    snprintf(want, sizeof want, "fencegate_redis_failovers_total %lld\n", failovers);
    assert_non_null(strstr(r.body, want));
    assert_null(strstr(r.body, PASSWORD));
    gwt_resp_free(&r);
}

static void test_sentinel_failover(void **state)
{
    sn_state *st = *state;
    const char *const min_replicas[] = {"--redis-min-replicas", "1", NULL};
    long long token = 0;

    int old = th_sentinel_master(&st->s);
    int replica = old == 0 ? 1 : 0;
    assert_true(old >= 0);

    /* 1. --redis-min-replicas 1: granted while the replica acknowledges. */
    gwt_start(&st->gw, st->s.url, st->data, min_replicas);
    assert_ready_on(st, old, 0);
    assert_int_equal(gwt_lock(&st->gw, "gw.warm", "A", &token), 200);
    assert_true(token > 0);
    /* A lock in a session: its record in the session WAITs for the replica too. */
    gwt_resp r;
    char body[160], path[64];
    gwt_post(&st->gw, "/sessions", "{\"ttl_ms\": 30000}", &r);
    gwt_assert_status(&r, 201, NULL);
    snprintf(path, sizeof path, "/sessions/%s", gwt_str(&r, "session"));
    snprintf(body, sizeof body, "{\"resources\": [\"gw.ses1\", \"gw.ses2\"], \"session\": \"%s\"}",
             gwt_str(&r, "session"));
    gwt_resp_free(&r);
    gwt_post(&st->gw, "/lock", body, &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
    gwt_http(&st->gw, "DELETE", path, NULL, NULL, 0, 0, &r);
    gwt_assert_status(&r, 200, NULL);
    assert_int_equal(gwt_int(&r, "released"), 2);
    gwt_resp_free(&r);
    /* The replica detaches: it keeps its data and misses every write from here on. */
    assert_int_equal(th_redis_cmd(&st->s.redis[replica], NULL, 0, "REPLICAOF NO ONE"), 0);
    assert_int_equal(gwt_lock(&st->gw, "gw.warm2", "A", &token), 503);
    assert_int_equal(gwt_stop(&st->gw), 0);

    /* 2. Without it (same data dir, so the same ledger), B's grant reaches the master only. */
    gwt_start(&st->gw, st->s.url, st->data, NULL);
    long long token_b = 0;
    assert_int_equal(gwt_lock(&st->gw, "gw.failover", "B", &token_b), 200);

    /* 3. The master dies; the sentinels promote the replica that missed B's grant. */
    int64_t start = th_now_ms();
    assert_int_equal(th_sentinel_kill_master(&st->s), old);
    long long token_c = 0;
    long status = 0;
    while (th_now_ms() - start < 30000) {
        status = gwt_lock(&st->gw, "gw.failover", "C", &token_c);
        if (status != 503) {
            break;
        }
        th_nap_ms(50);
    }
    print_message("gateway on sentinel: /lock answered 200 again %lld ms after the kill\n",
                  (long long)(th_now_ms() - start));
    /* C gets the lock B thinks it holds (the grant was lost), with a larger token. */
    assert_int_equal(status, 200);
    assert_true(token_c > token_b);
    assert_int_equal(th_sentinel_wait_failover(&st->s, old, 30000), replica);

    /* 4. B's write is refused now that C has locked, before C wrote anything. */
    status = gwt_put_fenced(&st->gw, "gw.failover", token_b, "from B", NULL);
    assert_true(status == 409 || status == 403);
    assert_int_equal(gwt_put_fenced(&st->gw, "gw.failover", token_c, "from C", NULL), 200);
    assert_ready_on(st, replica, 1);
}

/* GET /locks through the sentinels: the master's locks, in name order, paged, and after a
 * failover the new master's (the listing asks the sentinels again, as every call does). */
static void test_list_on_sentinel(void **state)
{
    sn_state *st = *state;
    char list[1024];
    long long token = 0;

    gwt_start(&st->gw, st->s.url, st->data, NULL);
    static const char *const names[] = {"sn.c", "sn.a", "sn.b", "other"};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(gwt_lock(&st->gw, names[i], "sn-owner", &token), 200);
    }
    assert_int_equal(gwt_list_all(&st->gw, NULL, 2, list, sizeof list), 4);
    assert_string_equal(list, "other,sn.a,sn.b,sn.c");
    assert_int_equal(gwt_list_all(&st->gw, "sn.", 1, list, sizeof list), 3);
    assert_string_equal(list, "sn.a,sn.b,sn.c");
    assert_int_equal(gwt_unlock(&st->gw, "sn.b", "sn-owner"), 200);
    assert_int_equal(gwt_list_all(&st->gw, "sn.", 10, list, sizeof list), 2);
    assert_string_equal(list, "sn.a,sn.c");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sentinel_failover, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list_on_sentinel, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
