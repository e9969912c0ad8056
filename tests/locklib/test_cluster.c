/*
 * locklib on a real Redis Cluster (3 masters, 3 replicas, created with redis-cli --cluster
 * create by the harness):
 *   - slot routing: each resource's keys land on the master that owns its slot;
 *   - every script (each call kind, with and without an idempotency key, the fair queue, the
 *     status reads, waiting) runs on the cluster: a CROSSSLOT or a misrouted call would
 *     come back as EREDIS or EUNAVAILABLE;
 *   - a batch split over the three masters gives each call the answer it gets alone, in
 *     order, including a HELD behind an ACQUIRED of the same batch and a refused call;
 *   - MOVED: a slot migrated behind the handle's back (the handle's map is old): the call
 *     follows it and the keys are on the new owner;
 *   - ASK: during a migration (SETSLOT MIGRATING/IMPORTING) a new resource of the slot goes
 *     to the importing node after ASKING; an existing one meets TRYAGAIN (its keys are
 *     split) and is answered once the keys moved, within the call's timeout;
 *   - hand-offs: a granting release and its waiter's claim run in the resource's slot;
 *   - malformed redis-cluster:// URLs are refused;
 *   - a master is SIGKILLed: the handle follows its replica's promotion by itself,
 *     reports the failover, and the lock it held there is still its own (it was replicated:
 *     WAIT before the kill); another handle, whose first call after the promotion finds
 *     no connection to the killed master, is served by the promoted one in that call;
 *   - last, the promoted master is SIGKILLed too, leaving its slots without a master: each
 *     call there is answered EUNAVAILABLE with a reason of its own, not one that quotes the
 *     previous call's.
 */
#include <stdlib.h>
#include <string.h>

#include "lk_test.h"

#define PASSWORD "cl-pw"

typedef struct cl_fixture {
    th_cluster cl;
    lk_client *c;
    int killed; /* the master test_master_failover killed, -1 before */
} cl_fixture;

static lk_client *open_cluster(const th_cluster *cl, int timeout_ms)
{
    lk_options o;
    lk_client *c = NULL;
    lk_options_init(&o);
    o.connect_timeout_ms = 500;
    o.command_timeout_ms = timeout_ms;
    lk_status st = lk_client_open(&c, cl->url, &o);
    if (c == NULL || st != LK_OK) {
        print_error("lk_client_open(%s): %s %s\n", cl->url, lk_status_name(st),
                    c != NULL ? lk_errstr(c) : "");
        fail();
    }
    return c;
}

static int group_setup(void **state)
{
    cl_fixture *f = calloc(1, sizeof *f);
    f->killed = -1;
    th_cluster_start(&f->cl, 3, 1, PASSWORD);
    f->c = open_cluster(&f->cl, 2000);
    *state = f;
    return 0;
}

static int group_teardown(void **state)
{
    cl_fixture *f = *state;
    lk_client_close(f->c);
    th_cluster_stop(&f->cl);
    free(f);
    return 0;
}

static int slot_of(const char *resource)
{
    char key[128];
    snprintf(key, sizeof key, "{%s}", resource);
    return th_key_slot(key, strlen(key));
}

/* A resource name with prefix whose slot is `slot` (found by trying numbers). */
static void name_in_slot(char *buf, size_t len, const char *prefix, int slot)
{
    for (int n = 0; n < 10000000; n++) {
        snprintf(buf, len, "%s%d", prefix, n);
        if (slot_of(buf) == slot) {
            return;
        }
    }
    fail_msg("no name for slot %d", slot);
}

/* 1 when node i holds fg:{resource}:suffix. */
static int holds_key(const th_cluster *cl, int i, const char *resource, const char *suffix)
{
    return th_redis_cmd(&cl->nodes[i], NULL, 0, "EXISTS fg:{%s}:%s", resource, suffix) == 1;
}

static void test_bad_urls(void **state)
{
    (void)state;
    static const char *const bad[] = {"redis-cluster://", "redis-cluster://h:1/0",
                                      "redis-cluster://h:1,", "redis-cluster://h:0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        lk_client *c = NULL;
        assert_int_equal(lk_client_open(&c, bad[i], NULL), LK_EINVAL);
        assert_null(c);
    }
}

static void test_slot_routing(void **state)
{
    cl_fixture *f = *state;
    lk_result res;
    lk_topology topo;
    int seen[TH_MAX_NODES] = {0};

    for (int i = 0; i < 30; i++) {
        char resource[32];
        snprintf(resource, sizeof resource, "route.%d", i);
        assert_lk(f->c, lk_acquire(f->c, resource, "o", 30000, 0, NULL, &res), LK_ACQUIRED);
        int owner = th_cluster_slot_owner(&f->cl, 0, slot_of(resource));
        assert_true(owner >= 0);
        assert_true(holds_key(&f->cl, owner, resource, "lock"));
        seen[owner] = 1;
    }
    int masters_used = 0;
    for (int k = 0; k < f->cl.nnodes; k++) {
        masters_used += seen[k];
    }
    assert_int_equal(masters_used, 3);
    lk_client_topology(f->c, &topo);
    assert_int_equal(topo.kind, LK_TOPOLOGY_CLUSTER);
    assert_string_equal(lk_topology_name(topo.kind), "cluster");
    assert_int_equal(topo.failovers, 0);
}

/* Every script, on resources spread over the masters. */
/* Shared locks on a Cluster: their keys (readers, rwait) stay in the resource's slot. */
static void test_shared_on_cluster(void **state)
{
    cl_fixture *f = *state;
    lk_result res, x;
    lk_lock_info info;
    for (int i = 0; i < 8; i++) {
        char r[32];
        snprintf(r, sizeof r, "cl-shared-%d", i);
        assert_lk(f->c, lk_acquire(f->c, r, "W", 30000, 0, NULL, &x), LK_ACQUIRED);
        assert_lk(f->c, lk_release(f->c, r, "W", NULL, &res), LK_RELEASED);
        assert_lk(f->c, lk_acquire_shared(f->c, r, "A", 30000, 0, NULL, 0, &res), LK_ACQUIRED);
        assert_int_equal(res.token, x.token);
        assert_lk(f->c, lk_acquire_shared(f->c, r, "B", 30000, 0, "idem-s", 0, &res),
                  LK_ACQUIRED);
        assert_lk(f->c, lk_renew(f->c, r, "B", 20000, NULL, &res), LK_RENEWED);
        assert_lk(f->c, lk_lock_status(f->c, r, &info), LK_OK);
        assert_int_equal(info.shared, 1);
        assert_int_equal(info.holders, 2);
        assert_lk(f->c, lk_acquire_fair(f->c, r, "W", 30000, 0, NULL, 5000, &res), LK_HELD);
        assert_lk(f->c, lk_acquire_shared(f->c, r, "C", 30000, 0, NULL, 0, &res), LK_HELD);
        assert_lk(f->c, lk_release(f->c, r, "A", NULL, &res), LK_RELEASED);
        assert_lk(f->c, lk_release(f->c, r, "B", NULL, &res), LK_RELEASED);
        assert_lk(f->c, lk_acquire_fair(f->c, r, "W", 30000, 0, NULL, 5000, &res),
                  LK_ACQUIRED);
        assert_true(res.token > x.token);
        assert_lk(f->c, lk_release(f->c, r, "W", NULL, &res), LK_RELEASED);
    }
}

static void test_every_script(void **state)
{
    cl_fixture *f = *state;
    lk_result res;
    lk_lock_info info;
    int64_t token = 0, last = 0, base = 0;
    int recent = 0;

    for (int i = 0; i < 6; i++) {
        char r[32];
        snprintf(r, sizeof r, "every.%d", i);
        assert_lk(f->c, lk_acquire(f->c, r, "A", 30000, 5, "idem-a", &res), LK_ACQUIRED);
        token = res.token;
        assert_true(token > 5);
        /* The idempotency record: the same answer replayed. */
        assert_lk(f->c, lk_acquire(f->c, r, "A", 30000, 5, "idem-a", &res), LK_ACQUIRED);
        assert_int_equal(res.token, token);
        assert_lk(f->c, lk_acquire(f->c, r, "B", 30000, 0, NULL, &res), LK_HELD);
        assert_lk(f->c, lk_renew(f->c, r, "A", 20000, "idem-r", &res), LK_RENEWED);
        assert_lk(f->c, lk_lock_status(f->c, r, &info), LK_OK);
        assert_lk(f->c, lk_last_token(f->c, r, &last), LK_OK);
        assert_int_equal(last, token);
        assert_lk(f->c, lk_token_range(f->c, r, &base, &last), LK_OK);
        assert_lk(f->c, lk_token_check(f->c, r, token, &base, &last, &recent), LK_OK);
        assert_lk(f->c, lk_acquire_fair(f->c, r, "B", 30000, 0, NULL, 5000, &res), LK_HELD);
        assert_lk(f->c, lk_fair_cancel(f->c, r, "B"), LK_OK);
        assert_lk(f->c, lk_release(f->c, r, "A", "idem-u", &res), LK_RELEASED);
        assert_lk(f->c, lk_acquire_fair(f->c, r, "B", 30000, 0, NULL, 5000, &res), LK_ACQUIRED);
        assert_lk(f->c, lk_release(f->c, r, "B", NULL, &res), LK_RELEASED);
        /* Watchdog leases: the watchdog's own transport is a cluster transport too. */
        assert_lk(f->c, lk_acquire(f->c, r, "W", LK_LEASE_WATCHDOG, 0, NULL, &res),
                  LK_ACQUIRED);
        assert_lk(f->c, lk_release(f->c, r, "W", NULL, &res), LK_RELEASED);
    }
}

/* One call through lk_call_many. */
static lk_status run1(lk_client *c, lk_call *call)
{
    lk_call *calls[1] = {call};
    lk_call_many(c, calls, 1);
    return call->status;
}

/* Hand-offs on every master: the hand-off keys and the waiter's idempotency record are in
 * the resource's slot, so a granting release runs on its master without a CROSSSLOT, and
 * the fair head and the non-fair list each get their grant, claimed and replayed. */
static void test_handoff_in_the_slot(void **state)
{
    cl_fixture *f = *state;
    lk_result res;

    for (int i = 0; i < 6; i++) {
        char r[32];
        snprintf(r, sizeof r, "handoff.%d", i);
        assert_lk(f->c, lk_acquire(f->c, r, "A", 30000, 0, NULL, &res), LK_ACQUIRED);
        lk_call wait = {.kind = i % 2 ? LK_CALL_ACQUIRE_FAIR : LK_CALL_ACQUIRE,
                        .resource = r, .owner = "B", .idem_key = "idem-h", .lease_ms = 30000,
                        .wait_ms = 20000, .handoff_id = "b1"};
        assert_lk(f->c, run1(f->c, &wait), LK_HELD);
        lk_call rel = {.kind = LK_CALL_RELEASE, .resource = r, .owner = "A", .handoff = 1,
                       .floor = 100};
        assert_lk(f->c, run1(f->c, &rel), LK_RELEASED);
        assert_string_equal(rel.res.handed_id, "b1");
        assert_true(rel.res.handed_token > 100);
        wait.res.handed = 0;
        assert_lk(f->c, run1(f->c, &wait), LK_ACQUIRED);
        assert_int_equal(wait.res.handed, 1);
        assert_int_equal(wait.res.token, rel.res.handed_token);
        /* The grant wrote the waiter's record: its key replays it. */
        assert_lk(f->c, lk_acquire(f->c, r, "B", 30000, 0, "idem-h", &res), LK_ACQUIRED);
        assert_int_equal(res.replayed, 1);
        assert_int_equal(res.token, rel.res.handed_token);
        assert_lk(f->c, lk_release(f->c, r, "B", NULL, &res), LK_RELEASED);
    }
}

/* lk_acquire_wait: the release is published on the resource's owner and heard by the
 * waiter's subscriber, whichever node it is connected to. */
static void test_wait_across_nodes(void **state)
{
    cl_fixture *f = *state;
    lk_result res;

    for (int i = 0; i < 3; i++) {
        char r[32];
        snprintf(r, sizeof r, "wait.%d", i);
        assert_lk(f->c, lk_acquire(f->c, r, "A", 30000, 0, NULL, &res), LK_ACQUIRED);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            lk_client *c2 = open_cluster(&f->cl, 2000);
            th_nap_ms(300);
            lk_status st = lk_release(c2, r, "A", NULL, &res);
            lk_client_close(c2);
            _exit(st == LK_RELEASED ? 0 : 1);
        }
        int64_t t0 = th_now_ms();
        assert_lk(f->c, lk_acquire_wait(f->c, r, "B", 30000, 0, NULL, 20000, &res), LK_ACQUIRED);
        assert_true(th_now_ms() - t0 < 10000); /* the release, not A's 30 s lease */
        int status = 0;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_int_equal(WEXITSTATUS(status), 0);
        assert_lk(f->c, lk_release(f->c, r, "B", NULL, &res), LK_RELEASED);
    }
}

/* One batch over every master: each call gets what it would get alone, in order. */
static void test_batch_split(void **state)
{
    cl_fixture *f = *state;
    enum { N = 24 };
    lk_call calls[N];
    lk_call *ptrs[N];
    char names[N][32];

    memset(calls, 0, sizeof calls);
    for (int i = 0; i < N; i++) {
        /* Pairs on one resource: the second of a pair is HELD behind the first. */
        snprintf(names[i], sizeof names[i], "split.%d", i / 2);
        calls[i].kind = LK_CALL_ACQUIRE;
        calls[i].resource = names[i];
        calls[i].owner = i % 2 == 0 ? "first" : "second";
        calls[i].lease_ms = 30000;
        ptrs[i] = &calls[i];
    }
    calls[7].lease_ms = -5; /* refused before sending */
    lk_call_many(f->c, ptrs, N);
    for (int i = 0; i < N; i++) {
        /* Call 7 is refused, so call 6's partner is missing and 6 stands alone. */
        lk_status want = i == 7 ? LK_EINVAL : i % 2 == 0 ? LK_ACQUIRED : LK_HELD;
        if (calls[i].status != want) {
            fail_msg("call %d (%s, %s): %s, want %s (%s)", i, names[i], calls[i].owner,
                     lk_status_name(calls[i].status), lk_status_name(want), calls[i].err);
        }
    }
    /* The same calls alone now answer as the owner of each lock dictates: the batch's
     * ACQUIRED answers hold. */
    for (int i = 0; i < N; i += 2) {
        lk_result res;
        if (i == 6) {
            continue;
        }
        assert_lk(f->c, lk_acquire(f->c, names[i], "second", 30000, 0, NULL, &res), LK_HELD);
    }
}

/* Takes slot from its owner to another master, completely, behind the handle's back. */
static void move_slot(cl_fixture *f, int slot, int *src_out, int *dst_out)
{
    int src = th_cluster_slot_owner(&f->cl, 0, slot);
    int dst = -1;
    assert_true(src >= 0);
    for (int k = 0; k < f->cl.nnodes && dst < 0; k++) {
        int s = th_cluster_slot_owner(&f->cl, 0, k == 0 ? 0 : k * (TH_CLUSTER_SLOTS / 6));
        if (s >= 0 && s != src) {
            dst = s;
        }
    }
    assert_true(dst >= 0);
    *src_out = src;
    *dst_out = dst;
}

static void test_moved(void **state)
{
    cl_fixture *f = *state;
    lk_result res;
    char r[32];
    int src = -1, dst = -1;

    snprintf(r, sizeof r, "moved.x");
    int slot = slot_of(r);
    assert_lk(f->c, lk_acquire(f->c, r, "A", 30000, 0, NULL, &res), LK_ACQUIRED); /* map read */
    move_slot(f, slot, &src, &dst);
    assert_int_equal(th_cluster_migrate_begin(&f->cl, slot, src, dst), 0);
    assert_true(th_cluster_migrate_keys(&f->cl, slot, src, dst) >= 1);
    assert_int_equal(th_cluster_migrate_finish(&f->cl, slot, src, dst), 0);
    /* The handle still sends the slot to src, which answers MOVED. */
    assert_lk(f->c, lk_release(f->c, r, "A", NULL, &res), LK_RELEASED);
    assert_lk(f->c, lk_acquire(f->c, r, "B", 30000, 0, NULL, &res), LK_ACQUIRED);
    assert_true(holds_key(&f->cl, dst, r, "lock"));
    assert_false(holds_key(&f->cl, src, r, "lock"));
}

/* During a migration (SETSLOT MIGRATING on src, IMPORTING on dst, nothing moved yet):
 *   - a new resource of the slot: src has none of its keys and answers ASK; the handle
 *     sends ASKING and the call to dst, which answers TRYAGAIN (a script's keys do not all
 *     exist there yet);
 *   - an existing resource: src holds some of its keys and answers TRYAGAIN.
 * Both are retried within the call's timeout until a child has moved the keys and ended the
 * migration; then MOVED takes them to dst. */
static void test_ask_and_tryagain(void **state)
{
    cl_fixture *f = *state;
    lk_result res;
    char old_res[32];
    char new_res[32];
    char stats[8192];
    int src = -1, dst = -1;

    snprintf(old_res, sizeof old_res, "ask.old");
    int slot = slot_of(old_res);
    name_in_slot(new_res, sizeof new_res, "ask.new.", slot);
    assert_lk(f->c, lk_acquire(f->c, old_res, "A", 30000, 0, NULL, &res), LK_ACQUIRED);
    move_slot(f, slot, &src, &dst);
    assert_true(th_redis_cmd(&f->cl.nodes[dst], NULL, 0, "CONFIG RESETSTAT") >= 0);
    assert_int_equal(th_cluster_migrate_begin(&f->cl, slot, src, dst), 0);

    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        th_nap_ms(500);
        int moved = th_cluster_migrate_keys(&f->cl, slot, src, dst);
        _exit(moved >= 1 && th_cluster_migrate_finish(&f->cl, slot, src, dst) == 0 ? 0 : 1);
    }
    lk_client *slow = open_cluster(&f->cl, 5000);
    int64_t t0 = th_now_ms();
    assert_lk(slow, lk_acquire(slow, new_res, "N", 30000, 0, NULL, &res), LK_ACQUIRED);
    assert_true(th_now_ms() - t0 >= 300); /* it waited for the migration */
    assert_lk(slow, lk_release(slow, old_res, "A", NULL, &res), LK_RELEASED);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_true(holds_key(&f->cl, dst, new_res, "lock"));
    assert_false(holds_key(&f->cl, src, new_res, "lock"));
    /* The ASK was followed: dst saw ASKING. */
    assert_int_equal(th_redis_cmd(&f->cl.nodes[dst], stats, sizeof stats, "INFO commandstats"),
                     0);
    assert_non_null(strstr(stats, "cmdstat_asking:calls="));
    /* The first handle's map is old: MOVED, then dst. */
    assert_lk(f->c, lk_acquire(f->c, old_res, "B", 30000, 0, NULL, &res), LK_ACQUIRED);
    assert_true(holds_key(&f->cl, dst, old_res, "lock"));
    lk_client_close(slow);
}

static void test_master_failover(void **state)
{
    cl_fixture *f = *state;
    lk_result res;
    lk_topology topo;
    const char *r = "failover.x";
    int owner = th_cluster_slot_owner(&f->cl, 0, slot_of(r));

    assert_lk(f->c, lk_acquire(f->c, r, "A", 60000, 0, NULL, &res), LK_ACQUIRED);
    int64_t token = res.token;
    /* A second handle, connected to the master about to be killed. */
    lk_client *late = open_cluster(&f->cl, 2000);
    assert_lk(late, lk_acquire(late, r, "B", 60000, 0, NULL, &res), LK_HELD);
    assert_int_equal(th_redis_cmd(&f->cl.nodes[owner], NULL, 0, "WAIT 1 2000"), 1);
    th_cluster_kill(&f->cl, owner);
    f->killed = owner;
    int64_t start = th_now_ms();
    lk_status st = LK_EUNAVAILABLE;
    while (st == LK_EUNAVAILABLE && th_now_ms() - start < 30000) {
        st = lk_acquire(f->c, r, "A", 60000, 0, NULL, &res); /* a re-entry */
        if (st == LK_EUNAVAILABLE) {
            th_nap_ms(50);
        }
    }
    print_message("cluster failover: the handle was served again after %lld ms\n",
                  (long long)(th_now_ms() - start));
    assert_lk(f->c, st, LK_ACQUIRED);
    assert_int_equal(res.token, token);
    assert_int_equal(res.holds, 2);
    assert_lk(f->c, lk_acquire(f->c, r, "B", 60000, 0, NULL, &res), LK_HELD);
    lk_client_topology(f->c, &topo);
    print_message("masters %s, failovers %lld\n", topo.master, topo.failovers);
    assert_int_equal(topo.failovers, 1);

    /* The second handle has not met the failover: its first call finds no connection to
     * the killed master, so it was not sent; the map read again names the promoted
     * replica, which answers it. No error for a failover that is over. */
    assert_lk(late, lk_acquire(late, r, "B", 60000, 0, NULL, &res), LK_HELD);
    lk_client_close(late);
}

/* How many times needle occurs in hay. */
static int occurrences(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle)) {
        n++;
    }
    return n;
}

/* After test_master_failover: the promoted master (no replica left) is SIGKILLed as well, so
 * once the others flag it failed, its slots have no master. A call there is retried until its
 * timeout, then answered EUNAVAILABLE "cluster still redirecting after N rounds, last: ...".
 * The "last" part is this call's own latest refusal: a message that quoted the handle's
 * previous reason grew by one level per call (the second call's quoting the first's, and so
 * on) until it filled the buffer, hiding the actual cause. */
static void test_masterless_slot_reason_does_not_nest(void **state)
{
    cl_fixture *f = *state;
    lk_result res;
    const char *r = "failover.x";
    const char *what = "cluster still redirecting";

    assert_true(f->killed >= 0);
    /* The promoted replica, once every live node agrees on it: a node that has not yet heard
     * of the promotion still names the killed master. */
    int owner = -1;
    int64_t agreed_by = th_now_ms() + 20000;
    for (int agree = 0; !agree && th_now_ms() < agreed_by;) {
        agree = 1;
        owner = -1;
        for (int i = 0; i < f->cl.nnodes && agree; i++) {
            if (i == f->killed) {
                continue;
            }
            int o = th_cluster_slot_owner(&f->cl, i, slot_of(r));
            agree = o >= 0 && o != f->killed && (owner < 0 || o == owner);
            owner = o;
        }
        if (!agree) {
            th_nap_ms(50);
        }
    }
    assert_true(owner >= 0 && owner != f->killed);
    th_cluster_kill(&f->cl, owner);
    lk_client *c = open_cluster(&f->cl, 300);
    /* Until the other nodes flag it failed, calls still go to the dead node and fail to
     * connect; then the slot has no master in the map. */
    int64_t start = th_now_ms();
    lk_status st = LK_OK;
    while (th_now_ms() - start < 20000) {
        st = lk_acquire(c, r, "C", 60000, 0, NULL, &res);
        if (st == LK_EUNAVAILABLE && strstr(lk_errstr(c), what) != NULL) {
            break;
        }
    }
    assert_lk(c, st, LK_EUNAVAILABLE);
    for (int i = 0; i < 4; i++) {
        st = lk_acquire(c, r, "C", 60000, 0, NULL, &res);
        assert_lk(c, st, LK_EUNAVAILABLE);
        const char *why = lk_errstr(c);
        print_message("call %d: %s\n", i, why);
        assert_int_equal(occurrences(why, what), 1);
        assert_null(strstr(why, "last: cluster"));
        assert_true(strlen(why) < 160);
    }
    lk_client_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_urls),
        cmocka_unit_test(test_slot_routing),
        cmocka_unit_test(test_every_script),
        cmocka_unit_test(test_shared_on_cluster),
        cmocka_unit_test(test_handoff_in_the_slot),
        cmocka_unit_test(test_wait_across_nodes),
        cmocka_unit_test(test_batch_split),
        cmocka_unit_test(test_moved),
        cmocka_unit_test(test_ask_and_tryagain),
        cmocka_unit_test(test_master_failover),
        cmocka_unit_test(test_masterless_slot_reason_does_not_nest),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
