/*
 * locklib over redlock://: the Redlock transport (locklib/src/redlock_transport.c)
 * through the public API, on 3 and on 5 real, independent redis-servers (th_redis_set_start,
 * AOF on with appendfsync always):
 *   - acquire, reentry, renew, release, status and token checks; the answer's ttl_ms is the
 *     validity, below the lease asked; every node's counter holds the grant's token
 *     (written back);
 *   - fair acquisition is refused with EINVAL naming the topology; malformed URLs (an even
 *     number of nodes, too many, a trailing comma) are refused;
 *   - a minority SIGKILLed: locks still work; one more: EUNAVAILABLE (the elapsed time is
 *     printed, not asserted); restarted with their data (AOF), they count again at the next
 *     call;
 *   - a minority restarted without its data: held out (lk_client_topology() says until
 *     when), tokens keep growing meanwhile, a handle opened later holds it out too, and
 *     once the hold-out (redlock_max_lease_ms, short here) has passed it counts again;
 *   - a waiter in lk_acquire_wait() is woken by the holder's release;
 *   - lk_sub subscribes on every master and reports each release once.
 *   - lk_acquire_wait() is woken by a release that only the other masters publish, the
 *     master its subscriber used first being paused (SIGSTOP) or SIGKILLed;
 *   - lk_sub resubscribes a master whose subscriber connection was killed, by itself, and
 *     reports the resubscription and a release published only on that master;
 *   - a minority that is slow but not down (paused within the per-node timeout) is left
 *     behind by the majority, not dropped: once it runs again it applies, in order, the
 *     acquisition, the write-back of the granted token (its counter was behind) and the
 *     release, and it still counts.
 */
#include <signal.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "lk_test.h"

#define LEASE_MS 20000
/* How long a master found silent is left alone first (LK__RL_SILENT_RETRY_MS). */
#define LK__TEST_SILENT_WAIT_MS 1000
/* The hold-out of a node that lost its data: the longest lease the tests grant, short so
 * that the rejoin is seen within the test. */
#define MAX_LEASE_MS 1500

typedef struct rl_fixture {
    th_redis_set set;
    char url[TH_MAX_NODES * 40];
    lk_client *c;
} rl_fixture;

/* Builds redlock://127.0.0.1:p1,127.0.0.1:p2,... from the nodes of the set. */
static void set_url(rl_fixture *f)
{
    size_t len = (size_t)snprintf(f->url, sizeof f->url, "redlock://");
    for (int i = 0; i < f->set.n; i++) {
        len += (size_t)snprintf(f->url + len, sizeof f->url - len, "%s127.0.0.1:%d",
                                i > 0 ? "," : "", f->set.nodes[i].port);
    }
}

static lk_client *open_redlock(const char *url)
{
    lk_options o;
    lk_client *c = NULL;
    lk_options_init(&o);
    o.connect_timeout_ms = 1000;
    o.command_timeout_ms = 1500;
    o.redlock_max_lease_ms = MAX_LEASE_MS;
    lk_status st = lk_client_open(&c, url, &o);
    if (c == NULL || (st != LK_OK && st != LK_EUNAVAILABLE)) {
        print_error("lk_client_open(%s): %s\n", url, lk_status_name(st));
        fail();
    }
    return c;
}

static int group_setup_n(void **state, int n)
{
    rl_fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    th_redis_set_start(&f->set, n, NULL);
    set_url(f);
    f->c = open_redlock(f->url);
    *state = f;
    return 0;
}

static int group_setup_3(void **state)
{
    return group_setup_n(state, 3);
}

static int group_setup_5(void **state)
{
    return group_setup_n(state, 5);
}

static int group_teardown(void **state)
{
    rl_fixture *f = *state;
    lk_client_close(f->c);
    th_redis_set_stop(&f->set);
    free(f);
    return 0;
}

/* The fence counter of resource on node i, 0 when missing. */
static long long fence_on(const rl_fixture *f, int i, const char *resource)
{
    char out[64] = "";
    th_redis_cmd(&f->set.nodes[i], out, sizeof out, "GET fg:{%s}:fence", resource);
    return atoll(out);
}

/* Acquires and releases resource as owner; returns the token. */
static int64_t grant_once(lk_client *c, const char *resource, const char *owner)
{
    lk_result r;
    assert_lk(c, lk_acquire(c, resource, owner, LEASE_MS, 0, NULL, &r), LK_ACQUIRED);
    int64_t token = r.token;
    assert_lk(c, lk_release(c, resource, owner, NULL, &r), LK_RELEASED);
    return token;
}

static int counting(lk_client *c)
{
    lk_topology t;
    int k = 0;
    lk_client_topology(c, &t);
    for (int i = 0; i < t.nnodes; i++) {
        k += t.nodes[i].counts;
    }
    return k;
}

/* Shared locks on Redlock: granted on a majority, the last exclusive token, no write-back of a
 * new token; an exclusive grant waits for every shared holder. */
static void test_shared_cycle(void **state)
{
    rl_fixture *f = *state;
    lk_client *c = f->c;
    lk_result r, x;
    lk_lock_info info;

    assert_lk(c, lk_acquire(c, "rl-shared", "w", LEASE_MS, 0, NULL, &x), LK_ACQUIRED);
    assert_lk(c, lk_release(c, "rl-shared", "w", NULL, &r), LK_RELEASED);
    assert_lk(c, lk_acquire_shared(c, "rl-shared", "a", LEASE_MS, 0, NULL, 0, &r), LK_ACQUIRED);
    assert_int_equal(r.shared, 1);
    assert_int_equal(r.token, x.token);
    assert_lk(c, lk_acquire_shared(c, "rl-shared", "b", LEASE_MS, 0, NULL, 0, &r), LK_ACQUIRED);
    assert_int_equal(r.token, x.token);
    assert_lk(c, lk_lock_status(c, "rl-shared", &info), LK_OK);
    assert_int_equal(info.locked, 1);
    assert_int_equal(info.shared, 1);
    assert_int_equal(info.holders, 2);
    assert_lk(c, lk_acquire(c, "rl-shared", "w", LEASE_MS, 0, NULL, &r), LK_HELD);
    assert_lk(c, lk_release(c, "rl-shared", "a", NULL, &r), LK_RELEASED);
    assert_lk(c, lk_release(c, "rl-shared", "b", NULL, &r), LK_RELEASED);
    assert_lk(c, lk_acquire(c, "rl-shared", "w", LEASE_MS, 0, NULL, &r), LK_ACQUIRED);
    assert_true(r.token > x.token);
    /* Asking again in the other mode is WRONG_MODE and changes nothing: the exclusive hold
     * stays, on every master (an undo would have released it). */
    assert_lk(c, lk_acquire_shared(c, "rl-shared", "w", LEASE_MS, 0, NULL, 0, &x),
              LK_WRONG_MODE);
    assert_lk(c, lk_lock_status(c, "rl-shared", &info), LK_OK);
    assert_int_equal(info.locked, 1);
    assert_int_equal(info.shared, 0);
    assert_lk(c, lk_release(c, "rl-shared", "w", NULL, &r), LK_RELEASED);
}

static void test_lock_cycle(void **state)
{
    rl_fixture *f = *state;
    lk_client *c = f->c;
    lk_result r, r2;
    lk_topology t;
    lk_lock_info info;
    int64_t base = 0, last = 0;
    int recent = 0;

    assert_lk(c, lk_acquire(c, "rl-cycle", "alice", LEASE_MS, 0, NULL, &r), LK_ACQUIRED);
    assert_true(r.token > 0);
    /* The validity, never the lease asked for. */
    assert_true(r.ttl_ms > 0 && r.ttl_ms < LEASE_MS);
    for (int i = 0; i < f->set.n; i++) {
        assert_true(fence_on(f, i, "rl-cycle") >= r.token); /* written back everywhere */
    }
    assert_lk(c, lk_acquire(c, "rl-cycle", "bob", LEASE_MS, 0, NULL, &r2), LK_HELD);
    assert_true(r2.ttl_ms > 0);
    /* Reentry: the same token, two holds. */
    assert_lk(c, lk_acquire(c, "rl-cycle", "alice", LEASE_MS, 0, NULL, &r2), LK_ACQUIRED);
    assert_int_equal(r2.token, r.token);
    assert_int_equal(r2.holds, 2);
    assert_lk(c, lk_renew(c, "rl-cycle", "alice", LEASE_MS, NULL, &r2), LK_RENEWED);
    assert_int_equal(r2.token, r.token);
    assert_true(r2.ttl_ms > 0 && r2.ttl_ms < LEASE_MS);
    assert_lk(c, lk_renew(c, "rl-cycle", "bob", LEASE_MS, NULL, &r2), LK_NOT_OWNER);
    assert_lk(c, lk_lock_status(c, "rl-cycle", &info), LK_OK);
    assert_true(info.locked);
    assert_int_equal(info.token, r.token);
    assert_lk(c, lk_token_check(c, "rl-cycle", r.token, &base, &last, &recent), LK_OK);
    assert_true(base < r.token && r.token <= last && recent);
    assert_lk(c, lk_release(c, "rl-cycle", "alice", NULL, &r2), LK_STILL_HELD);
    assert_lk(c, lk_release(c, "rl-cycle", "alice", NULL, &r2), LK_RELEASED);
    assert_lk(c, lk_release(c, "rl-cycle", "alice", NULL, &r2), LK_NOT_OWNER);
    assert_lk(c, lk_lock_status(c, "rl-cycle", &info), LK_OK);
    assert_false(info.locked);
    /* The next holder's token is larger. */
    assert_true(grant_once(c, "rl-cycle", "bob") > r.token);
    /* A watched lock: the watchdog thread gets its own Redlock transport. */
    assert_lk(c, lk_acquire(c, "rl-watched", "carol", LK_LEASE_WATCHDOG, 0, NULL, &r2),
              LK_ACQUIRED);
    assert_true(r2.ttl_ms > 0 && r2.ttl_ms < 30000);
    assert_false(lk_watch_lost(c, "rl-watched", "carol"));
    assert_lk(c, lk_release(c, "rl-watched", "carol", NULL, &r2), LK_RELEASED);

    lk_client_topology(c, &t);
    assert_int_equal(t.kind, LK_TOPOLOGY_REDLOCK);
    assert_string_equal(lk_topology_name(t.kind), "redlock");
    assert_int_equal(t.nnodes, f->set.n);
    assert_int_equal(counting(c), f->set.n);
    assert_non_null(strstr(t.master, "127.0.0.1:"));
}

/* A batch of calls: each answered as alone. */
static void test_batch(void **state)
{
    rl_fixture *f = *state;
    lk_call a = {.kind = LK_CALL_ACQUIRE, .resource = "rl-b1", .owner = "o1",
                 .lease_ms = LEASE_MS};
    lk_call b = {.kind = LK_CALL_ACQUIRE, .resource = "rl-b2", .owner = "o1",
                 .lease_ms = LEASE_MS};
    lk_call d = {.kind = LK_CALL_ACQUIRE, .resource = "rl-b1", .owner = "o2",
                 .lease_ms = LEASE_MS};
    lk_call fair = {.kind = LK_CALL_ACQUIRE_FAIR, .resource = "rl-b3", .owner = "o1",
                    .lease_ms = LEASE_MS};
    lk_call *calls[] = {&a, &b, &d, &fair};

    lk_call_many(f->c, calls, 4);
    assert_int_equal(a.status, LK_ACQUIRED);
    assert_int_equal(b.status, LK_ACQUIRED);
    assert_int_equal(d.status, LK_HELD);
    assert_int_equal(fair.status, LK_EINVAL);
    assert_non_null(strstr(fair.err, "redlock"));
    lk_result r;
    assert_lk(f->c, lk_release(f->c, "rl-b1", "o1", NULL, &r), LK_RELEASED);
    assert_lk(f->c, lk_release(f->c, "rl-b2", "o1", NULL, &r), LK_RELEASED);
}

static void test_fair_refused_and_bad_urls(void **state)
{
    rl_fixture *f = *state;
    lk_client *c = f->c;
    lk_client *bad = NULL;
    lk_result r;

    assert_lk(c, lk_acquire_fair(c, "rl-fair", "alice", LEASE_MS, 0, NULL, 0, &r), LK_EINVAL);
    assert_non_null(strstr(lk_errstr(c), "redlock"));
    static const char *const urls[] = {
        "redlock://127.0.0.1:1,127.0.0.1:2",
        "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3,127.0.0.1:4",
        "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3,",
        "redlock://127.0.0.1:1",
        "redlock://",
        "redlock://1:1,1:2,1:3,1:4,1:5,1:6,1:7,1:8,1:9,1:10,1:11,1:12,1:13,1:14,1:15,1:16,1:17",
    };
    for (size_t i = 0; i < sizeof urls / sizeof urls[0]; i++) {
        assert_int_equal(lk_client_open(&bad, urls[i], NULL), LK_EINVAL);
        assert_null(bad);
    }
    /* Masters without replicas: a WAIT for one would refuse every acquisition. */
    lk_options opts;
    lk_options_init(&opts);
    opts.min_replicas = 1;
    opts.replica_timeout_ms = 500;
    assert_int_equal(lk_client_open(&bad, "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", &opts),
                     LK_EINVAL);
    assert_null(bad);
}

/* Grants resource once, takes the minority of nodes 0 .. n/2 - 1 down (wipe: restarted
 * without their data), grants it again and returns that token, asserted larger. */
static int64_t grant_around_minority(rl_fixture *f, const char *resource, int wipe)
{
    int64_t before = grant_once(f->c, resource, "alice");
    for (int i = 0; i < f->set.n / 2; i++) {
        th_redis_kill(&f->set.nodes[i]);
        if (wipe) {
            th_redis_wipe_files(&f->set.nodes[i]);
            th_redis_restart(&f->set.nodes[i]);
        }
    }
    int64_t during = grant_once(f->c, resource, "alice");
    assert_true(during > before);
    assert_int_equal(counting(f->c), f->set.n - f->set.n / 2);
    return during;
}

/* f nodes (a minority) down: still works; f + 1 down: unavailable; back with their data:
 * they count again at once. */
/* 1 when every node of the minority 0 .. n/2 - 1 has counter >= token for resource and no
 * lock for it. */
static int minority_caught_up(const rl_fixture *f, const char *resource, int64_t token)
{
    for (int i = 0; i < f->set.n / 2; i++) {
        if (fence_on(f, i, resource) < token ||
            th_redis_cmd(&f->set.nodes[i], NULL, 0, "EXISTS fg:{%s}:lock", resource) != 0) {
            return 0;
        }
    }
    return 1;
}

/* A slow minority: nodes 0 .. n/2 - 1 are paused (SIGSTOP) while a lock is granted and
 * released, and their counters are behind the majority's. The majority answers both calls;
 * the paused nodes are left behind with their replies owed (redlock_transport.c, step 2),
 * not dropped, so the write-back of the granted token is still queued for them. Once they
 * run again each applies the acquisition, the write-back and the release in order: its
 * counter reaches the token and the lock is gone. Dropping a slow node at its timeout, as
 * the transport did before, leaves its counter behind (the write-back only went to the
 * nodes that counted), and this test fails. */
static void test_slow_minority_left_behind(void **state)
{
    rl_fixture *f = *state;
    lk_client *c = f->c;
    int n = f->set.n, minority = n / 2;
    lk_result r;

    grant_once(c, "rl-slow-warm", "alice");
    assert_int_equal(counting(c), n); /* every node connected before the pause */
    /* The majority's counters ahead of the minority's, as after grants it missed. */
    for (int i = minority; i < n; i++) {
        th_redis_cmd(&f->set.nodes[i], NULL, 0, "SET fg:{rl-slow}:fence 100");
    }
    for (int i = 0; i < minority; i++) {
        assert_int_equal(kill(f->set.nodes[i].pid, SIGSTOP), 0);
    }
    assert_lk(c, lk_acquire(c, "rl-slow", "alice", LEASE_MS, 0, NULL, &r), LK_ACQUIRED);
    int64_t token = r.token;
    assert_true(token > 100);
    assert_lk(c, lk_release(c, "rl-slow", "alice", NULL, &r), LK_RELEASED);
    for (int i = 0; i < minority; i++) {
        assert_int_equal(kill(f->set.nodes[i].pid, SIGCONT), 0);
    }
    int64_t deadline = th_now_ms() + 10000;
    while (!minority_caught_up(f, "rl-slow", token) && th_now_ms() < deadline) {
        th_nap_ms(20);
    }
    assert_true(minority_caught_up(f, "rl-slow", token));
    /* The connections to the slow nodes are in step again: the replies they owed are read
     * and dropped before anything else, so every node still counts and the next grant is
     * larger. */
    assert_lk(c, lk_ping(c), LK_OK);
    assert_int_equal(counting(c), n);
    assert_true(grant_once(c, "rl-slow", "bob") > token);
    for (int i = 0; i < n; i++) {
        assert_true(fence_on(f, i, "rl-slow") > token);
    }
}

/* A master that says nothing (SIGSTOP: its connections stay open, new ones are accepted by
 * the kernel) costs a batch that meets it on a new connection the per-node timeout of its
 * marker read, and then every handle of the process leaves it alone for a while: a handle
 * connected to it before, which would otherwise leave it behind batch after batch and then
 * wait out its timeout, sends it nothing. Seen from the stopped master's side (the kernel's
 * receive queues, since it reads nothing): the new handle's marker read reached it, the old
 * handle's acquisition did not. Before, each handle left it alone on its own, so a gateway's
 * pipeline threads each paid the timeout again every second; with one master of three cut
 * off that halved topo_bench's rate. */
static void test_silent_master_left_alone_by_every_handle(void **state)
{
    rl_fixture *f = *state;
    lk_result r;

    grant_once(f->c, "rl-silent-a", "warm");
    assert_lk(f->c, lk_ping(f->c), LK_OK); /* reads what master 0 still owed, if anything */
    assert_int_equal(counting(f->c), f->set.n);
    int64_t deadline = th_now_ms() + 10000;
    while (th_redis_unread_conns(&f->set.nodes[0]) != 0 && th_now_ms() < deadline) {
        th_nap_ms(5); /* master 0 reads what was sent to it last */
    }
    assert_int_equal(th_redis_unread_conns(&f->set.nodes[0]), 0);

    assert_int_equal(kill(f->set.nodes[0].pid, SIGSTOP), 0);
    lk_client *c2 = open_redlock(f->url);
    assert_lk(c2, lk_acquire(c2, "rl-silent-b", "bob", LEASE_MS, 0, NULL, &r), LK_ACQUIRED);
    int64_t silent_seen = th_now_ms();
    int first = th_redis_unread_conns(&f->set.nodes[0]);
    assert_lk(f->c, lk_acquire(f->c, "rl-silent-a", "alice", LEASE_MS, 0, NULL, &r),
              LK_ACQUIRED);
    int64_t gap_ms = th_now_ms() - silent_seen;
    int second = th_redis_unread_conns(&f->set.nodes[0]);
    assert_int_equal(kill(f->set.nodes[0].pid, SIGCONT), 0);
    print_message("connections with unread bytes at the silent master: %d after the new "
                  "handle's call, %d after the old one's (%lld ms later)\n", first, second,
                  (long long)gap_ms);
    assert_int_equal(first, 1);
    if (second != 1 && gap_ms >= LK__TEST_SILENT_WAIT_MS) {
        /* The old handle came after the first wait (1 s) was over: its try was a new one. */
        print_message("too slow to judge: the old handle's call ended %lld ms after the "
                      "silence was seen\n", (long long)gap_ms);
    } else {
        assert_int_equal(second, 1);
    }

    assert_lk(f->c, lk_release(f->c, "rl-silent-a", "alice", NULL, &r), LK_RELEASED);
    assert_lk(c2, lk_release(c2, "rl-silent-b", "bob", NULL, &r), LK_RELEASED);
    /* Back within the first silence's 1 s, for both handles, before the next test. */
    deadline = th_now_ms() + 20000;
    while ((lk_ping(f->c) != LK_OK || lk_ping(c2) != LK_OK || counting(f->c) < f->set.n ||
            counting(c2) < f->set.n) &&
           th_now_ms() < deadline) {
        th_nap_ms(20);
    }
    assert_int_equal(counting(f->c), f->set.n);
    assert_int_equal(counting(c2), f->set.n);
    lk_client_close(c2);
}

static void test_minority_down_then_majority_down(void **state)
{
    rl_fixture *f = *state;
    lk_client *c = f->c;
    int n = f->set.n, minority = n / 2;
    lk_result r;

    int64_t during = grant_around_minority(f, "rl-down", 0);

    th_redis_kill(&f->set.nodes[minority]);
    int64_t start = th_now_ms();
    assert_lk(c, lk_acquire(c, "rl-down", "alice", LEASE_MS, 0, NULL, &r), LK_EUNAVAILABLE);
    print_message("majority down: EUNAVAILABLE after %lld ms (command timeout 1500 ms): %s\n",
                  (long long)(th_now_ms() - start), lk_errstr(c));
    assert_lk(c, lk_ping(c), LK_EUNAVAILABLE);

    for (int i = 0; i <= minority; i++) {
        th_redis_restart(&f->set.nodes[i]); /* AOF: with its data and its marker */
    }
    int64_t after = grant_once(c, "rl-down", "alice");
    assert_true(after > during);
    assert_int_equal(counting(c), n); /* a clean restart is no hold-out */
}

static void test_data_loss_held_out(void **state)
{
    rl_fixture *f = *state;
    lk_client *c = f->c;
    int n = f->set.n, minority = n / 2;
    lk_topology t;

    /* A minority loses its data between two grants: the second token is still larger. */
    int64_t during = grant_around_minority(f, "rl-loss", 1);
    lk_client_topology(c, &t);
    for (int i = 0; i < minority; i++) {
        assert_false(t.nodes[i].counts);
        assert_true(t.nodes[i].held_out_ms > 0 && t.nodes[i].held_out_ms <= MAX_LEASE_MS + 100);
        print_message("node %s held out for %lld ms more\n", t.nodes[i].addr,
                      (long long)t.nodes[i].held_out_ms);
    }
    /* A handle that meets the nodes only now holds them out too (the hold-out key). */
    lk_client *late = open_redlock(f->url);
    assert_true(grant_once(late, "rl-loss", "bob") > during);
    lk_client_topology(late, &t);
    for (int i = 0; i < minority; i++) {
        assert_false(t.nodes[i].counts);
        assert_true(t.nodes[i].held_out_ms > 0);
    }
    lk_client_close(late);
    /* After the hold-out the nodes count again by themselves; tokens keep growing. */
    int64_t last = during;
    int64_t deadline = th_now_ms() + 30000;
    while (counting(c) < n && th_now_ms() < deadline) {
        int64_t token = grant_once(c, "rl-loss", "alice");
        assert_true(token > last);
        last = token;
        th_nap_ms(50);
    }
    assert_int_equal(counting(c), n);
    assert_true(grant_once(c, "rl-loss", "alice") > last);
}

/* The masters that count, asked again (lk_ping) until all n do or 20 s have passed. */
static void wait_all_counting(lk_client *c, int n)
{
    int64_t deadline = th_now_ms() + 20000;
    while ((lk_ping(c) != LK_OK || counting(c) < n) && th_now_ms() < deadline) {
        th_nap_ms(20);
    }
    assert_int_equal(counting(c), n);
}

/* A master that lost its data while a handle's connection to it sat idle must not count
 * before its marker is read, even in the batch that first finds the connection dead. alice
 * is granted while the last n/2 masters are down, so only the first n/2 + 1 hold her lock;
 * the others come back with their data. Master 0 then loses its data, the handle idle. If
 * the batch replaced the dead connection without reading the marker (as the transport did:
 * step 0 took a connected node as checked, and step 1's connect reopened it), bob would
 * get the empty master 0 and the n/2 masters alice missed, a majority: two holders at
 * once (redlock_multi_gateway saw it as overlapping leases). Held out, master 0 gives bob
 * nothing and he is refused. */
static void test_master_wiped_under_idle_connection_held_out(void **state)
{
    rl_fixture *f = *state;
    lk_client *c = f->c;
    int n = f->set.n, minority = n / 2;
    lk_result r;

    wait_all_counting(c, n);
    for (int i = n - minority; i < n; i++) {
        th_redis_kill(&f->set.nodes[i]);
    }
    assert_lk(c, lk_acquire(c, "rl-idle-wipe", "alice", LEASE_MS, 0, NULL, &r), LK_ACQUIRED);
    for (int i = n - minority; i < n; i++) {
        th_redis_restart(&f->set.nodes[i]); /* AOF: with its data, without alice's lock */
    }
    wait_all_counting(c, n);
    th_redis_kill(&f->set.nodes[0]);
    th_redis_wipe_files(&f->set.nodes[0]);
    th_redis_restart(&f->set.nodes[0]);

    lk_status st = lk_acquire(c, "rl-idle-wipe", "bob", LEASE_MS, 0, NULL, &r);
    print_message("bob, with master 0 wiped under an idle connection: %s\n",
                  lk_status_name(st));
    assert_lk(c, st, LK_HELD);
    lk_topology t;
    lk_client_topology(c, &t);
    assert_false(t.nodes[0].counts);
    assert_true(t.nodes[0].held_out_ms > 0);
    assert_lk(c, lk_release(c, "rl-idle-wipe", "alice", NULL, &r), LK_RELEASED);
    wait_all_counting(c, n); /* the hold-out (MAX_LEASE_MS) over, before the next test */
}

/* How many masters keep an idempotency record of key for resource. */
static int records_left(const rl_fixture *f, const char *resource, const char *key)
{
    int k = 0;
    for (int i = 0; i < f->set.n; i++) {
        k += th_redis_cmd(&f->set.nodes[i], NULL, 0, "EXISTS fg:{%s}:idem:%s", resource,
                          key) != 0;
    }
    return k;
}

/* Waits (10 s at most) until no master keeps a record of key for resource. */
static void assert_records_gone(const rl_fixture *f, const char *resource, const char *key)
{
    int64_t deadline = th_now_ms() + 10000;
    while (records_left(f, resource, key) > 0 && th_now_ms() < deadline) {
        th_nap_ms(20);
    }
    assert_int_equal(records_left(f, resource, key), 0);
}

/* An acquisition that won only a minority is undone on every master, and its idempotency
 * record with it. Before, the record stayed where the master had granted, and a retry of
 * the key replayed ACQUIRED there even after another owner took the lock: with the masters
 * the other owner's grant missed, a majority, and two holders at once. The schedule: bob
 * holds the lock on all but the first n/2 masters (down during his grant); alice's keyed
 * attempt wins only those n/2 and is undone; bob releases; carol is granted while master
 * n/2 is down, so she holds all the others; alice retries with her key. */
static void test_undone_acquisition_is_not_replayed(void **state)
{
    rl_fixture *f = *state;
    lk_client *c = f->c;
    int n = f->set.n, minority = n / 2;
    const char *res = "rl-undo-key";
    lk_result r;

    wait_all_counting(c, n);
    for (int i = 0; i < minority; i++) {
        th_redis_kill(&f->set.nodes[i]);
    }
    assert_lk(c, lk_acquire(c, res, "bob", LEASE_MS, 0, NULL, &r), LK_ACQUIRED);
    for (int i = 0; i < minority; i++) {
        th_redis_restart(&f->set.nodes[i]); /* AOF: with their data, without bob's lock */
    }
    wait_all_counting(c, n);
    assert_lk(c, lk_acquire(c, res, "alice", LEASE_MS, 0, "alice-key", &r), LK_HELD);
    /* The undo is waited for, except on a master left behind (it runs there in order). */
    assert_records_gone(f, res, "alice-key");
    assert_lk(c, lk_release(c, res, "bob", NULL, &r), LK_RELEASED);
    th_redis_kill(&f->set.nodes[minority]);
    assert_lk(c, lk_acquire(c, res, "carol", LEASE_MS, 0, NULL, &r), LK_ACQUIRED);
    th_redis_restart(&f->set.nodes[minority]);
    wait_all_counting(c, n);

    lk_status st = lk_acquire(c, res, "alice", LEASE_MS, 0, "alice-key", &r);
    print_message("alice's retry with her key while carol holds the lock: %s (replayed %d)\n",
                  lk_status_name(st), r.replayed);
    assert_lk(c, st, LK_HELD);
    assert_lk(c, lk_renew(c, res, "carol", LEASE_MS, NULL, &r), LK_RENEWED);
    assert_lk(c, lk_release(c, res, "carol", NULL, &r), LK_RELEASED);
}

/* A grant given back by its caller (the gateway's give-back: a release with the grant's key
 * and token, lk_call.supersede) drops the key's record on every master, also where the
 * master minted a smaller token than the grant's: the minority's counters are behind here,
 * so it records its own token while the grant answers the majority's. */
static void test_given_back_grant_drops_every_record(void **state)
{
    rl_fixture *f = *state;
    lk_client *c = f->c;
    int n = f->set.n, minority = n / 2;
    const char *res = "rl-give-back";
    lk_result r;

    wait_all_counting(c, n);
    for (int i = minority; i < n; i++) {
        th_redis_cmd(&f->set.nodes[i], NULL, 0, "SET fg:{%s}:fence 100", res);
    }
    assert_lk(c, lk_acquire(c, res, "alice", LEASE_MS, 0, "give-back-key", &r), LK_ACQUIRED);
    assert_true(r.token > 100);
    lk_call back = {.kind = LK_CALL_RELEASE, .resource = res, .owner = "alice",
                    .idem_key = "give-back-key", .supersede = r.token};
    lk_call *one[1] = {&back};
    lk_call_many(c, one, 1);
    assert_lk(c, back.status, LK_RELEASED);
    assert_records_gone(f, res, "give-back-key");
    /* The retry acts afresh: a new grant, with a larger token. */
    int64_t given_back = r.token;
    assert_lk(c, lk_acquire(c, res, "alice", LEASE_MS, 0, "give-back-key", &r), LK_ACQUIRED);
    assert_false(r.replayed);
    assert_true(r.token > given_back);
    assert_lk(c, lk_release(c, res, "alice", NULL, &r), LK_RELEASED);
}

typedef struct waiter {
    const char *url;
    const char *resource;
    int64_t wait_ms;
    _Atomic int done;
    lk_status st;
    lk_result res;
} waiter;

static long long numsub(rl_fixture *f, int k, const char *resource)
{
    char script[160];
    snprintf(script, sizeof script,
             "return redis.call('PUBSUB','NUMSUB','fg:{%s}:released')[2]", resource);
    return th_redis_cmd(&f->set.nodes[k], NULL, 0, "EVAL %s 0", script);
}

static void *wait_thread(void *arg)
{
    waiter *w = arg;
    lk_client *c = open_redlock(w->url);
    /* The holder's lease (60 s) outlasts the wait: only a release lets it in. */
    w->st = lk_acquire_wait(c, w->resource, "waiter", LEASE_MS, 0, NULL, w->wait_ms, &w->res);
    if (w->st == LK_ACQUIRED) {
        lk_result r;
        lk_release(c, w->resource, "waiter", NULL, &r);
    }
    lk_client_close(c);
    w->done = 1;
    return NULL;
}

/* The holder takes w's resource for 60 s and w's thread starts waiting for it. Returns the
 * holder's token. */
static int64_t hold_and_wait(rl_fixture *f, waiter *w, pthread_t *th)
{
    lk_result r;

    assert_lk(f->c, lk_acquire(f->c, w->resource, "holder", 60000, 0, NULL, &r), LK_ACQUIRED);
    assert_int_equal(pthread_create(th, NULL, wait_thread, w), 0);
    return r.token;
}

static void test_waiter_woken_by_release(void **state)
{
    rl_fixture *f = *state;
    lk_client *c = f->c;
    lk_result r;
    waiter w = {.url = f->url, .resource = "rl-wait", .wait_ms = 30000};
    pthread_t th;

    int64_t token = hold_and_wait(f, &w, &th);
    /* Release once the waiter found the lock held: its subscriber is then on some node. */
    int64_t deadline = th_now_ms() + 20000;
    long long subs = 0;
    while (subs < 1 && th_now_ms() < deadline) {
        subs = 0;
        for (int i = 0; i < f->set.n; i++) {
            long long k = numsub(f, i, "rl-wait");
            subs += k > 0 ? k : 0;
        }
        if (subs < 1) {
            th_nap_ms(20);
        }
    }
    assert_true(subs >= 1);
    assert_lk(c, lk_release(c, "rl-wait", "holder", NULL, &r), LK_RELEASED);
    pthread_join(th, NULL);
    assert_int_equal(w.st, LK_ACQUIRED);
    assert_true(w.res.token > token);
}

/* After a release that should wake w: waits up to 10 s for it to finish, then has
 * "blocker" take the lock, so that a waiter the release did not wake (it would only look
 * again at its deadline) finds the lock held and ends HELD. */
static void await_or_block(lk_client *c, const waiter *w)
{
    lk_result r;
    int64_t deadline = th_now_ms() + 10000;
    while (!w->done && th_now_ms() < deadline) {
        th_nap_ms(20);
    }
    if (!w->done) {
        lk_acquire(c, w->resource, "blocker", 60000, 0, NULL, &r);
    }
}

/* A waiter is woken by a release although master 0, the one a single subscriber connection
 * uses first, is down when the holder releases: only the other masters publish. sig says
 * how: SIGSTOP pauses it (its connections stay open and say nothing), SIGKILL kills it (it
 * is restarted with its data afterwards). The holder's lease (60 s) outlasts the wait
 * (20 s); the outcome tells whether the release woke it: if the waiter is not done 10 s after
 * the release, another holder takes the lock, so that a waiter that would only have looked
 * again at its deadline finds it held and ends HELD. Before lk_acquire_wait() subscribed
 * through lk_sub, it waited on master 0 alone and ended HELD with SIGSTOP; with SIGKILL the
 * closed connection sent it to 100 ms naps and a new subscriber on another master, so that
 * case passed before too and guards the new path (a master dropped while the others go on). */
static void wait_with_master0_down(rl_fixture *f, const char *resource, int sig)
{
    lk_client *c = f->c;
    lk_result r;
    waiter w = {.url = f->url, .resource = resource, .wait_ms = 20000};
    pthread_t th;

    hold_and_wait(f, &w, &th);
    /* Until the waiter listens on master 0 (and, whichever way, on the others). */
    int64_t deadline = th_now_ms() + 20000;
    while (numsub(f, 0, resource) < 1 && th_now_ms() < deadline) {
        th_nap_ms(20);
    }
    assert_true(numsub(f, 0, resource) >= 1);
    if (sig == SIGKILL) {
        th_redis_kill(&f->set.nodes[0]);
    } else {
        assert_int_equal(kill(f->set.nodes[0].pid, SIGSTOP), 0);
    }
    assert_lk(c, lk_release(c, resource, "holder", NULL, &r), LK_RELEASED);
    await_or_block(c, &w);
    pthread_join(th, NULL);
    if (sig == SIGKILL) {
        th_redis_restart(&f->set.nodes[0]); /* AOF: with its data and its marker */
    } else {
        assert_int_equal(kill(f->set.nodes[0].pid, SIGCONT), 0);
    }
    if (w.st != LK_ACQUIRED) {
        lk_release(c, resource, "blocker", NULL, &r);
    }
    assert_int_equal(w.st, LK_ACQUIRED);
    /* Master 0 counts again for the handle before the next test counts on it. */
    deadline = th_now_ms() + 20000;
    while ((lk_ping(c) != LK_OK || counting(c) < f->set.n) && th_now_ms() < deadline) {
        th_nap_ms(20);
    }
    assert_int_equal(counting(c), f->set.n);
}

/* The EVALSHA calls master k has run so far. */
static long long evalsha_calls(rl_fixture *f, int k)
{
    char info[8192] = "";
    th_redis_cmd(&f->set.nodes[k], info, sizeof info, "INFO commandstats");
    const char *p = strstr(info, "cmdstat_evalsha:calls=");
    return p != NULL ? strtoll(p + strlen("cmdstat_evalsha:calls="), NULL, 10) : 0;
}

/* Waits until master k has run at least n EVALSHA calls. */
static void await_evalsha(rl_fixture *f, int k, long long n)
{
    int64_t deadline = th_now_ms() + 20000;
    while (evalsha_calls(f, k) < n && th_now_ms() < deadline) {
        th_nap_ms(5);
    }
    assert_true(evalsha_calls(f, k) >= n);
}

/* A release reaches the masters one by one and lk_sub reports it once, at the first
 * master's message, so the waiter's attempt it wakes can find a majority still held by
 * that very hold, and no other master's copy of the message wakes it again: it has to look
 * again on its own (wait.c, the file head). Here master 0's message comes first by hand
 * (the release message of the lock it holds, published without releasing), the attempt it
 * wakes is seen on master 1 (answered held: the lock is held everywhere), and only then
 * does the holder release on every master. Without the second look the waiter slept until
 * its deadline, and then found the blocker's lock: HELD. */
static void test_waiter_woken_before_the_release_reaches_a_majority(void **state)
{
    rl_fixture *f = *state;
    lk_client *c = f->c;
    lk_result r;
    waiter w = {.url = f->url, .resource = "rl-wait4", .wait_ms = 20000};
    pthread_t th;

    hold_and_wait(f, &w, &th);
    /* The waiter's first attempt ran on master 1 (answered held, it marked the lock wanted
     * there: the holder's own grant did not), and the waiter listens on every master. */
    int64_t deadline = th_now_ms() + 20000;
    while (th_redis_cmd(&f->set.nodes[1], NULL, 0, "HEXISTS fg:{rl-wait4}:lock #wait") != 1 &&
           th_now_ms() < deadline) {
        th_nap_ms(5);
    }
    assert_int_equal(th_redis_cmd(&f->set.nodes[1], NULL, 0, "HEXISTS fg:{rl-wait4}:lock #wait"),
                     1);
    for (int k = 0; k < f->set.n; k++) {
        deadline = th_now_ms() + 20000;
        while (numsub(f, k, "rl-wait4") < 1 && th_now_ms() < deadline) {
            th_nap_ms(20);
        }
        assert_true(numsub(f, k, "rl-wait4") >= 1);
    }
    long long before = evalsha_calls(f, 1);
    assert_int_equal(th_redis_cmd(&f->set.nodes[0], NULL, 0,
                                  "EVAL %s 2 fg:{rl-wait4}:lock fg:{rl-wait4}:released",
                                  "local ids = redis.call('HMGET', KEYS[1], '#token', '#hold') "
                                  "return redis.call('PUBLISH', KEYS[2], ids[1] .. ':' .. ids[2])"),
                     1);
    await_evalsha(f, 1, before + 1); /* the attempt it woke: still held */
    assert_lk(c, lk_release(c, "rl-wait4", "holder", NULL, &r), LK_RELEASED);
    await_or_block(c, &w);
    pthread_join(th, NULL);
    if (w.st != LK_ACQUIRED) {
        lk_release(c, "rl-wait4", "blocker", NULL, &r);
    }
    assert_int_equal(w.st, LK_ACQUIRED);
}

static void test_waiter_woken_master_paused(void **state)
{
    wait_with_master0_down(*state, "rl-wait2", SIGSTOP);
}

static void test_waiter_woken_master_killed(void **state)
{
    wait_with_master0_down(*state, "rl-wait3", SIGKILL);
}

/* Counts the events of lk_sub per resource: [0] the watched one, [1 + k] mark k. */
typedef struct sub_count {
    int released[1 + TH_MAX_NODES];
    int subscribed[1 + TH_MAX_NODES];
    lk_sub *s;
    int64_t token[12]; /* the tokens of the watched resource's first releases */
} sub_count;

static void on_event(const char *resource, int event, void *userdata)
{
    sub_count *n = userdata;
    int i = strcmp(resource, "rl-sub") == 0 ? 0 : 1 + atoi(resource + strlen("rl-mark-"));
    if (event == LK_SUB_RELEASED) {
        if (i == 0 && n->s != NULL && n->released[0] < 12) {
            n->token[n->released[0]] = lk_sub_event_token(n->s);
        }
        n->released[i]++;
    } else {
        n->subscribed[i]++;
    }
}

/* Dispatches s's events until done(n) holds or 20 s passed. */
static void dispatch_until(lk_sub *s, sub_count *n, int (*done)(const sub_count *, int),
                           int arg)
{
    int64_t deadline = th_now_ms() + 20000;
    while (!done(n, arg) && th_now_ms() < deadline) {
        struct pollfd p = {.fd = lk_sub_fd(s), .events = POLLIN};
        if (poll(&p, 1, 100) > 0) {
            assert_int_equal(lk_sub_dispatch(s, on_event, n), LK_OK);
        }
    }
    assert_true(done(n, arg));
}

static int all_subscribed(const sub_count *n, int nodes)
{
    for (int i = 0; i <= nodes; i++) {
        if (n->subscribed[i] < 1) {
            return 0;
        }
    }
    return 1;
}

static int released_at_least(const sub_count *n, int want)
{
    return n->released[0] >= want;
}

static int marks_seen(const sub_count *n, int nodes)
{
    for (int k = 0; k < nodes; k++) {
        if (n->released[1 + k] < 1) {
            return 0;
        }
    }
    return 1;
}

/* lk_sub on Redlock subscribes on every master and reports each release once, though every
 * master publishes it (each was asked by a waiter while the lock was held), with the grant's
 * token, which the waiter's held answer named too. Releases are told apart by the hold id
 * every master's message names (locklib/src/sub.c, step 6), so two holds with the same
 * token are two releases (a minority's give-back on one master, the next grant's release on
 * the others: here published by hand), and a repeat is reported again only with a larger
 * token (the first master's write-back of the grant's token had failed). Messages without
 * a hold id go by counts and tokens (older scripts). To know that every master's messages
 * were read, mark k is published on master k alone after the releases: a connection
 * delivers in order, so once every mark is reported, every release message before it was
 * read too. */
static void test_sub_every_master_once(void **state)
{
    rl_fixture *f = *state;
    lk_sub *s = NULL;
    sub_count n;
    lk_result r;
    char mark[32];
    int64_t granted[2];

    memset(&n, 0, sizeof n);
    assert_int_equal(lk_sub_open(&s, f->url, NULL), LK_OK);
    n.s = s;
    assert_int_equal(lk_sub_add(s, "rl-sub"), LK_OK);
    for (int k = 0; k < f->set.n; k++) {
        snprintf(mark, sizeof mark, "rl-mark-%d", k);
        assert_int_equal(lk_sub_add(s, mark), LK_OK);
    }
    dispatch_until(s, &n, all_subscribed, f->set.n);
    assert_int_equal(n.subscribed[0], 1); /* once, not once per master */
    for (int k = 0; k < f->set.n; k++) {
        assert_int_equal(numsub(f, k, "rl-sub"), 1); /* subscribed on every master */
    }
    for (int round = 1; round <= 2; round++) {
        assert_lk(f->c, lk_acquire(f->c, "rl-sub", "alice", LEASE_MS, 0, NULL, &r), LK_ACQUIRED);
        granted[round - 1] = r.token;
        /* bob is answered held on every master, so every master's release publishes
         * (locklib/lua/prelude/wanted.lua). */
        assert_lk(f->c, lk_acquire(f->c, "rl-sub", "bob", LEASE_MS, 0, NULL, &r), LK_HELD);
        assert_int_equal(r.holder_token, granted[round - 1]);
        assert_lk(f->c, lk_release(f->c, "rl-sub", "alice", NULL, &r), LK_RELEASED);
        dispatch_until(s, &n, released_at_least, round);
        assert_int_equal(n.token[round - 1], granted[round - 1]);
    }
    /* A third release message, from master 0 alone and with a small token: reported, as
     * a release the other masters have not published yet. */
    th_redis_cmd(&f->set.nodes[0], NULL, 0, "PUBLISH fg:{rl-sub}:released 1");
    dispatch_until(s, &n, released_at_least, 3);
    /* The same release from the others, with the grant's larger token: reported once. */
    for (int k = 1; k < f->set.n; k++) {
        th_redis_cmd(&f->set.nodes[k], NULL, 0, "PUBLISH fg:{rl-sub}:released %lld",
                     (long long)granted[1] + 100);
    }
    for (int k = 0; k < f->set.n; k++) {
        th_redis_cmd(&f->set.nodes[k], NULL, 0, "PUBLISH fg:{rl-mark-%d}:released released", k);
    }
    dispatch_until(s, &n, marks_seen, f->set.n);
    /* two releases, each published by every master, then the third twice */
    assert_int_equal(n.released[0], 4);
    assert_int_equal(n.token[2], 1);
    assert_int_equal(n.token[3], granted[1] + 100);

    /* Hold ids. Hold aa given back on master 0 alone, with token T. */
    long long t = (long long)granted[1] + 200;
    th_redis_cmd(&f->set.nodes[0], NULL, 0, "PUBLISH fg:{rl-sub}:released %lld:00000000000000aa",
                 t);
    dispatch_until(s, &n, released_at_least, 5);
    /* Hold bb, with the same token T, released on the others: another release. */
    for (int k = 1; k < f->set.n; k++) {
        th_redis_cmd(&f->set.nodes[k], NULL, 0,
                     "PUBLISH fg:{rl-sub}:released %lld:00000000000000bb", t);
    }
    dispatch_until(s, &n, released_at_least, 6);
    /* Hold bb again from master 0 with a larger token: reported again, with it. */
    th_redis_cmd(&f->set.nodes[0], NULL, 0, "PUBLISH fg:{rl-sub}:released %lld:00000000000000bb",
                 t + 1);
    dispatch_until(s, &n, released_at_least, 7);
    /* Hold aa again, from every master, with no larger token: nothing. */
    for (int k = 0; k < f->set.n; k++) {
        th_redis_cmd(&f->set.nodes[k], NULL, 0,
                     "PUBLISH fg:{rl-sub}:released %lld:00000000000000aa", t);
        th_redis_cmd(&f->set.nodes[k], NULL, 0, "PUBLISH fg:{rl-mark-%d}:released again", k);
    }
    memset(n.released + 1, 0, sizeof n.released - sizeof n.released[0]);
    dispatch_until(s, &n, marks_seen, f->set.n);
    assert_int_equal(n.released[0], 7);
    assert_int_equal(n.token[4], t);
    assert_int_equal(n.token[5], t);
    assert_int_equal(n.token[6], t + 1);
    lk_sub_close(s);
}

static int subscribed_again(const sub_count *n, int want)
{
    return n->subscribed[0] >= want;
}

/* Waits up to 20 s until every master has one subscriber of resource's channel. */
static void subscribed_everywhere(rl_fixture *f, const char *resource)
{
    int64_t deadline = th_now_ms() + 20000;
    for (int k = 0; k < f->set.n; k++) {
        while (numsub(f, k, resource) < 1 && th_now_ms() < deadline) {
            th_nap_ms(20);
        }
        assert_int_equal(numsub(f, k, resource), 1);
    }
}

/* lk_sub on Redlock: master 0's subscriber connection is killed (CLIENT KILL TYPE pubsub)
 * while the others stay. The handle resubscribes it by itself, reports LK_SUB_SUBSCRIBED
 * again (the caller's cue that a release may have been missed), and a release published on
 * master 0 alone is then reported. Before the retry timer, master 0 stayed unsubscribed
 * until every master had dropped. */
static void test_sub_resubscribes_dropped_master(void **state)
{
    rl_fixture *f = *state;
    lk_sub *s = NULL;
    sub_count n;

    memset(&n, 0, sizeof n);
    assert_int_equal(lk_sub_open(&s, f->url, NULL), LK_OK);
    assert_int_equal(lk_sub_add(s, "rl-sub"), LK_OK);
    dispatch_until(s, &n, subscribed_again, 1);
    subscribed_everywhere(f, "rl-sub");
    assert_true(th_redis_cmd(&f->set.nodes[0], NULL, 0, "CLIENT KILL TYPE pubsub") >= 1);
    int64_t deadline = th_now_ms() + 20000;
    while ((numsub(f, 0, "rl-sub") < 1 || n.subscribed[0] < 2) && th_now_ms() < deadline) {
        struct pollfd p = {.fd = lk_sub_fd(s), .events = POLLIN};
        if (poll(&p, 1, 100) > 0) {
            assert_int_equal(lk_sub_dispatch(s, on_event, &n), LK_OK);
        }
    }
    assert_int_equal(numsub(f, 0, "rl-sub"), 1);
    assert_int_equal(n.subscribed[0], 2); /* reported again once, for master 0 */
    for (int k = 1; k < f->set.n; k++) {
        assert_int_equal(numsub(f, k, "rl-sub"), 1);
    }
    th_redis_cmd(&f->set.nodes[0], NULL, 0, "PUBLISH fg:{rl-sub}:released released");
    dispatch_until(s, &n, released_at_least, 1);
    assert_int_equal(n.released[0], 1);
    lk_sub_close(s);
}

/* lk_sub on Redlock: a resource unsubscribed and subscribed again before the first
 * SUBSCRIBE's confirmation was read. That confirmation is not the new subscription's: were
 * it reported, a waiter would look again while the new SUBSCRIBE is still on its way, and a
 * release in between would reach nobody, with the real confirmation then taken for a repeat
 * and never reported. The masters are paused (CLIENT PAUSE) with the old confirmations
 * sent and the new commands queued behind the pause: reading the old ones may report
 * nothing, and the new subscription's confirmation must be reported, once. */
static void test_sub_stale_confirmation_not_reported(void **state)
{
    rl_fixture *f = *state;
    lk_sub *s = NULL;
    sub_count n;

    memset(&n, 0, sizeof n);
    assert_int_equal(lk_sub_open(&s, f->url, NULL), LK_OK);
    assert_int_equal(lk_sub_add(s, "rl-sub"), LK_OK);
    subscribed_everywhere(f, "rl-sub"); /* each confirmation now waits in its socket */
    int64_t paused_at = th_now_ms(); /* each pause starts after this, and lasts 4 s */
    for (int k = 0; k < f->set.n; k++) {
        assert_int_equal(th_redis_cmd(&f->set.nodes[k], NULL, 0, "CLIENT PAUSE 4000 ALL"), 0);
    }
    assert_int_equal(lk_sub_remove(s, "rl-sub"), LK_OK);
    assert_int_equal(lk_sub_add(s, "rl-sub"), LK_OK);
    struct pollfd p = {.fd = lk_sub_fd(s), .events = POLLIN};
    int reads = 0;
    while (poll(&p, 1, 0) > 0) { /* every old confirmation; the masters send nothing new */
        assert_int_equal(lk_sub_dispatch(s, on_event, &n), LK_OK);
        reads++;
    }
    assert_true(reads > 0);
    assert_true(th_now_ms() - paused_at < 4000); /* still paused: the check means something */
    assert_int_equal(n.subscribed[0], 0);
    dispatch_until(s, &n, subscribed_again, 1); /* the pause over: the new confirmations */
    for (int k = 0; k < f->set.n; k++) {
        assert_int_equal(numsub(f, k, "rl-sub"), 1);
    }
    assert_int_equal(n.subscribed[0], 1);
    th_redis_cmd(&f->set.nodes[1], NULL, 0, "PUBLISH fg:{rl-sub}:released released");
    dispatch_until(s, &n, released_at_least, 1);
    assert_int_equal(n.subscribed[0], 1); /* still once */
    lk_sub_close(s);
}

#define GROUP(n)                                                                           \
    {                                                                                      \
        cmocka_unit_test(test_lock_cycle), cmocka_unit_test(test_batch),                   \
            cmocka_unit_test(test_shared_cycle),                                           \
            cmocka_unit_test(test_fair_refused_and_bad_urls),                              \
            cmocka_unit_test(test_waiter_woken_by_release),                                \
            cmocka_unit_test(test_sub_every_master_once),                                  \
            cmocka_unit_test(test_waiter_woken_master_paused),                             \
            cmocka_unit_test(test_waiter_woken_master_killed),                             \
            cmocka_unit_test(test_waiter_woken_before_the_release_reaches_a_majority),     \
            cmocka_unit_test(test_sub_resubscribes_dropped_master),                        \
            cmocka_unit_test(test_sub_stale_confirmation_not_reported),                    \
            cmocka_unit_test(test_slow_minority_left_behind),                              \
            cmocka_unit_test(test_silent_master_left_alone_by_every_handle),               \
            cmocka_unit_test(test_minority_down_then_majority_down),                       \
            cmocka_unit_test(test_data_loss_held_out),                                     \
            cmocka_unit_test(test_master_wiped_under_idle_connection_held_out),            \
            cmocka_unit_test(test_undone_acquisition_is_not_replayed),                     \
            cmocka_unit_test(test_given_back_grant_drops_every_record),                    \
    }

int main(void)
{
    const struct CMUnitTest tests[] = GROUP(3);
    int failed = cmocka_run_group_tests_name("redlock_client_3", tests, group_setup_3,
                                             group_teardown);
    failed += cmocka_run_group_tests_name("redlock_client_5", tests, group_setup_5,
                                          group_teardown);
    return failed;
}
