/*
 * The gateway on a Redis Cluster, with real processes (3 masters, 1 replica each, made by
 * redis-cli --cluster create):
 *   - /readyz and /metrics name the cluster topology, never the password; lock, token-checked
 *     write, read and unlock work for resources whose slots live on each of the masters;
 *   - a grant the promoted replica never saw: the replica is SIGKILLed, B is granted on the
 *     master alone, the master is SIGKILLed and the replica restarted from its own AOF, so
 *     it is promoted without B's INCR (a certain miss, not a race). C's token is above B's
 *     (the gateway's floor lifts the counter), and B's write is refused as soon as C has
 *     locked, before C writes anything.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gw_test.h"
#include "harness.h"

#define PASSWORD "gw-c1uster-pw"
#define RECOVERY_MS 60000

typedef struct cl_state {
    th_cluster c;
    gwt_proc gw;
    char data[256];
} cl_state;

static int setup(void **state)
{
    cl_state *st = calloc(1, sizeof *st);
    th_cluster_start(&st->c, 3, 1, PASSWORD);
    th_tempdir(st->data, sizeof st->data, "gwcluster");
    gwt_start(&st->gw, st->c.url, st->data, NULL);
    *state = st;
    return 0;
}

static int teardown(void **state)
{
    cl_state *st = *state;
    if (st->gw.pid > 0) {
        gwt_stop(&st->gw);
    }
    th_cluster_stop(&st->c);
    th_rmtree(st->data);
    free(st);
    return 0;
}

/* The master (index in c->nodes) serving resource's keys, as node `from` sees it. */
static int owner_of(const cl_state *st, int from, const char *resource)
{
    char key[128];
    snprintf(key, sizeof key, "{%s}", resource);
    return th_cluster_slot_owner(&st->c, from, th_key_slot(key, strlen(key)));
}

static void test_topology_and_every_master(void **state)
{
    cl_state *st = *state;
    int seen[TH_MAX_NODES] = {0};
    int masters = 0;
    gwt_resp r;

    gwt_get(&st->gw, "/readyz", &r);
    gwt_assert_status(&r, 200, NULL);
    json_t *topo = json_object_get(r.json, "topology");
    assert_non_null(topo);
    assert_string_equal(json_string_value(json_object_get(topo, "kind")), "cluster");
    assert_non_null(strstr(json_string_value(json_object_get(topo, "url")),
                           "redis-cluster://"));
    assert_null(strstr(r.body, PASSWORD));
    gwt_resp_free(&r);
    gwt_get(&st->gw, "/metrics", &r);
    assert_non_null(strstr(r.body, "fencegate_redis_topology{kind=\"cluster\"} 1\n"));
    assert_null(strstr(r.body, PASSWORD));
    gwt_resp_free(&r);

    /* Resources until every master owns one: each is locked, written, read and unlocked. */
    for (int n = 0; masters < st->c.masters && n < 1000; n++) {
        char resource[64];
        char value[64];
        long long token = 0;
        snprintf(resource, sizeof resource, "cl.every.%d", n);
        int owner = owner_of(st, 0, resource);
        assert_true(owner >= 0);
        if (seen[owner]) {
            continue;
        }
        seen[owner] = 1;
        masters++;
        assert_int_equal(gwt_lock(&st->gw, resource, "A", &token), 200);
        assert_true(token > 0);
        snprintf(value, sizeof value, "value %d", n);
        assert_int_equal(gwt_put_fenced(&st->gw, resource, token, value, NULL), 200);
        gwt_assert_value(&st->gw, resource, value);
        assert_int_equal(gwt_unlock(&st->gw, resource, "A"), 200);
    }
    assert_int_equal(masters, st->c.masters);
}

/* GET /locks on a cluster: the locks of every master, merged in name order and paged. */
static void test_list_every_master(void **state)
{
    cl_state *st = *state;
    int seen[TH_MAX_NODES] = {0};
    int masters = 0;
    char list[4096], want[4096] = "";
    size_t used = 0;
    long long token = 0;

    /* cl.list.00 .. cl.list.29 sort as numbered; locked in reverse. */
    for (int n = 29; n >= 0; n--) {
        char resource[64];
        snprintf(resource, sizeof resource, "cl.list.%02d", n);
        int owner = owner_of(st, 0, resource);
        assert_true(owner >= 0);
        masters += !seen[owner];
        seen[owner] = 1;
        assert_int_equal(gwt_lock(&st->gw, resource, "L", &token), 200);
    }
    assert_true(masters >= 2); /* names on several masters */
    for (int n = 0; n < 30; n++) {
        used += (size_t)snprintf(want + used, sizeof want - used, "%scl.list.%02d",
                                 n > 0 ? "," : "", n);
    }
    assert_int_equal(gwt_list_all(&st->gw, "cl.list.", 7, list, sizeof list), 30);
    assert_string_equal(list, want);
    assert_int_equal(gwt_list_all(&st->gw, "cl.list.1", 100, list, sizeof list), 10);
    for (int n = 0; n < 30; n++) {
        char resource[64];
        snprintf(resource, sizeof resource, "cl.list.%02d", n);
        assert_int_equal(gwt_unlock(&st->gw, resource, "L"), 200);
    }
    assert_int_equal(gwt_list_all(&st->gw, "cl.list.", 7, list, sizeof list), 0);
}

/* The index of master m's replica (the node whose INFO names m's port as its master), or -1. */
static int replica_of(const cl_state *st, int m)
{
    char want[32];
    snprintf(want, sizeof want, "master_port:%d\r", st->c.nodes[m].port);
    for (int i = 0; i < st->c.nnodes; i++) {
        char info[4096] = "";
        if (i != m && st->c.nodes[i].pid > 0 &&
            th_redis_cmd(&st->c.nodes[i], info, sizeof info, "INFO replication") >= 0 &&
            strstr(info, want) != NULL) {
            return i;
        }
    }
    return -1;
}

/* PUT with token until the answer is not 503, or RECOVERY_MS after start: its status. */
static long put_until_answered(cl_state *st, const char *resource, long long token,
                               const char *value, int64_t start)
{
    long status = gwt_put_fenced(&st->gw, resource, token, value, NULL);
    while (status == 503 && th_now_ms() - start < RECOVERY_MS) {
        th_nap_ms(50);
        status = gwt_put_fenced(&st->gw, resource, token, value, NULL);
    }
    return status;
}

static void test_promoted_replica_missed_a_grant(void **state)
{
    cl_state *st = *state;
    const char *resource = "cl.lost";
    long long token_a = 0;
    long long token_b = 0;
    long long token_c = 0;
    long status = 0;

    int master = owner_of(st, 0, resource);
    assert_true(master >= 0);
    int replica = replica_of(st, master);
    assert_true(replica >= 0);

    /* A's grant and release reach both: the replica's AOF holds the counter at token_a and
     * no lock (WAIT covers every write before it on the master). */
    assert_int_equal(gwt_lock(&st->gw, resource, "A", &token_a), 200);
    assert_int_equal(gwt_unlock(&st->gw, resource, "A"), 200);
    assert_int_equal(th_redis_cmd(&st->c.nodes[master], NULL, 0, "WAIT 1 5000"), 1);

    /* The replica dies; B's grant reaches the master only; then the master dies. */
    th_cluster_kill(&st->c, replica);
    assert_int_equal(gwt_lock(&st->gw, resource, "B", &token_b), 200);
    assert_true(token_b > token_a);
    th_cluster_kill(&st->c, master);

    /* The replica comes back from its own files, without B's INCR, and is promoted. */
    th_redis_restart(&st->c.nodes[replica]);
    int64_t start = th_now_ms();
    assert_int_equal(th_cluster_wait_failover(&st->c, master, RECOVERY_MS), replica);
    char fence[64] = "";
    th_redis_cmd(&st->c.nodes[replica], fence, sizeof fence, "GET fg:{%s}:fence", resource);
    print_message("gateway on cluster: the promoted replica's counter is %s (B had %lld)\n",
                  fence, token_b);
    assert_true(atoll(fence) < token_b);

    /* C gets the lock B thinks it holds (the grant was lost), with a larger token. */
    while (th_now_ms() - start < RECOVERY_MS) {
        status = gwt_lock(&st->gw, resource, "C", &token_c);
        if (status != 503) {
            break;
        }
        th_nap_ms(50);
    }
    print_message("gateway on cluster: /lock answered %ld %lld ms after the replica restarted\n",
                  status, (long long)(th_now_ms() - start));
    assert_int_equal(status, 200);
    assert_true(token_c > token_b);

    /* B's write is refused now that C has locked, before C wrote anything. Each Redis
     * pipeline of the gateway has its own connections and slot map: a call on one that has
     * not met the failover yet is sent to the promoted master when the dead one takes no
     * connection, but may answer 503 when a connection to it still looked alive and the
     * call was written (it may have run); so a 503 is retried, as a client would. */
    status = put_until_answered(st, resource, token_b, "from B", start);
    print_message("gateway on cluster: B's write with token %lld answered %ld\n", token_b,
                  status);
    assert_true(status == 409 || status == 403);
    assert_int_equal(put_until_answered(st, resource, token_c, "from C", start), 200);
    gwt_assert_value(&st->gw, resource, "from C");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_topology_and_every_master),
        cmocka_unit_test(test_list_every_master),
        cmocka_unit_test(test_promoted_replica_missed_a_grant),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
