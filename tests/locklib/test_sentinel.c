/*
 * locklib on Redis Sentinel, with real processes: 1 master, 1 replica, 3 sentinels.
 *   - the URL is parsed, the master found, its address reported without the password;
 *   - a sentinel that is down, and one that answers wrong (a data node), are skipped;
 *   - malformed sentinel URLs are refused;
 *   - a graceful failover (the old master demoted, not dead) is followed before the next
 *     call meets -READONLY, through the +switch-master hint;
 *   - a replayed acquisition WAITs for min_replicas like a first one;
 *   - a hand-off's claim with min_replicas is answered once a replica holds the grant;
 *   - the master is SIGKILLed after the replica missed the newest INCR: the handle follows the
 *     failover by itself, reports it, the subscriber follows too, and the caller's floor keeps
 *     the promoted replica from minting a token already handed out;
 *   - a session's record of a lock WAITs for min_replicas (EREPLICAS with the replica
 *     paused), and, in a set of its own, a session whose locks were taken with min_replicas
 *     survives the master's SIGKILL: listed, renewed and ended with both its locks.
 * The failover tests run last in their sets: each leaves its set with no replica.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "lk_test.h"

#define MASTER_NAME "fgmaster"
#define PASSWORD "s3ntinel-pw"

typedef struct sn_fixture {
    th_sentinel s;
} sn_fixture;

static int group_setup(void **state)
{
    sn_fixture *f = calloc(1, sizeof *f);
    th_sentinel_start(&f->s, MASTER_NAME, 1, 3, PASSWORD);
    *state = f;
    return 0;
}

static int group_teardown(void **state)
{
    sn_fixture *f = *state;
    th_sentinel_stop(&f->s);
    free(f);
    return 0;
}

/* A handle on url; with min_replicas > 0 it WAITs up to 2 s for that many replicas after
 * each acquisition (a loaded machine's replica acknowledges well within that).
 * watchdog_lease_ms: its watchdog lease, 0 for the default. */
static lk_client *open_url_replicas(const char *url, int min_replicas, int64_t watchdog_lease_ms)
{
    lk_options o;
    lk_client *c = NULL;
    lk_options_init(&o);
    o.connect_timeout_ms = 500;
    o.command_timeout_ms = min_replicas > 0 ? 3000 : 1000;
    o.min_replicas = min_replicas;
    o.replica_timeout_ms = 2000;
    if (watchdog_lease_ms > 0) {
        o.watchdog_lease_ms = watchdog_lease_ms;
    }
    lk_status st = lk_client_open(&c, url, &o);
    if (c == NULL) {
        print_error("lk_client_open(%s): %s\n", url, lk_status_name(st));
        fail();
    }
    return c;
}

static lk_client *open_url(const char *url)
{
    return open_url_replicas(url, 0, 0);
}

static void test_finds_master(void **state)
{
    sn_fixture *f = *state;
    lk_client *c = open_url(f->s.url);
    lk_result res;
    lk_topology topo;
    char want[64];

    assert_lk(c, lk_acquire(c, res_name("find"), "o1", 10000, 0, NULL, &res), LK_ACQUIRED);
    lk_client_topology(c, &topo);
    assert_int_equal(topo.kind, LK_TOPOLOGY_SENTINEL);
    assert_string_equal(lk_topology_name(topo.kind), "sentinel");
    snprintf(want, sizeof want, "127.0.0.1:%d", f->s.redis[th_sentinel_master(&f->s)].port);
    assert_string_equal(topo.master, want);
    assert_int_equal(topo.failovers, 0);
    assert_null(strstr(topo.master, PASSWORD));
    lk_client_close(c);
}

/* A sentinel that is down (a free port) and one that is no sentinel (the replica answers
 * SENTINEL with an error) come first in the URL: both are skipped. */
static void test_skips_bad_sentinels(void **state)
{
    sn_fixture *f = *state;
    char url[1024];
    lk_result res;
    int replica = th_sentinel_master(&f->s) == 0 ? 1 : 0;

    snprintf(url, sizeof url, "redis-sentinel://:%s@127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/%s",
             PASSWORD, th_free_port(), f->s.redis[replica].port, f->s.sentinels[2].port,
             MASTER_NAME);
    lk_client *c = open_url(url);
    assert_lk(c, lk_acquire(c, res_name("skip"), "o1", 10000, 0, NULL, &res), LK_ACQUIRED);
    lk_client_close(c);

    /* Only wrong sentinels: unavailable, with the reason, never a connection elsewhere. */
    snprintf(url, sizeof url, "redis-sentinel://:%s@127.0.0.1:%d/%s", PASSWORD,
             f->s.redis[replica].port, MASTER_NAME);
    c = open_url(url);
    assert_lk(c, lk_acquire(c, res_name("skip"), "o1", 10000, 0, NULL, &res), LK_EUNAVAILABLE);
    assert_non_null(strstr(lk_errstr(c), "sentinel"));
    lk_client_close(c);

    /* An unknown master name. */
    snprintf(url, sizeof url, "redis-sentinel://:%s@127.0.0.1:%d/nosuchmaster", PASSWORD,
             f->s.sentinels[0].port);
    c = open_url(url);
    assert_lk(c, lk_acquire(c, res_name("skip"), "o1", 10000, 0, NULL, &res), LK_EUNAVAILABLE);
    lk_client_close(c);
}

static void test_bad_urls(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "redis-sentinel://127.0.0.1:26379",         /* no master name */
        "redis-sentinel://127.0.0.1:26379/",        /* empty master name */
        "redis-sentinel:///m",                      /* no sentinel */
        "redis-sentinel://127.0.0.1:0/m",           /* bad port */
        "redis-sentinel://127.0.0.1:1,,127.0.0.1:2/m", /* empty host */
        "redis-sentinel://127.0.0.1:1/m/x",         /* bad db */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        lk_client *c = NULL;
        assert_int_equal(lk_client_open(&c, bad[i], NULL), LK_EINVAL);
        assert_null(c);
    }
}

/* A graceful failover (SENTINEL FAILOVER): the old master stays up and is demoted. The
 * handle hears +switch-master on its hint subscription and reconnects before its next
 * call, so that call goes to the new master at the first try instead of meeting -READONLY
 * on the demoted one. The set is whole again afterwards, for the next test. */
static void test_switch_master_hint(void **state)
{
    sn_fixture *f = *state;
    lk_client *c = open_url(f->s.url);
    lk_result res;
    lk_topology topo;
    char out[64];

    assert_lk(c, lk_acquire(c, res_name("hint"), "o1", 10000, 0, NULL, &res), LK_ACQUIRED);
    int old = th_sentinel_master(&f->s);
    assert_true(old >= 0);
    assert_int_equal(th_redis_cmd(&f->s.sentinels[0], out, sizeof out, "SENTINEL FAILOVER %s",
                                  MASTER_NAME), 0);
    int promoted = th_sentinel_wait_failover(&f->s, old, 30000);
    assert_true(promoted >= 0 && promoted != old);
    /* The old master may still say master here (the sentinels reconfigure it seconds
     * later): only the hint takes the handle's next call to the new one. */
    assert_lk(c, lk_acquire(c, res_name("hint"), "o1", 10000, 0, NULL, &res), LK_ACQUIRED);
    lk_client_topology(c, &topo);
    snprintf(out, sizeof out, "127.0.0.1:%d", f->s.redis[promoted].port);
    assert_string_equal(topo.master, out);
    assert_int_equal(topo.failovers, 1);
    lk_client_close(c);
    assert_int_equal(th_sentinel_wait_ready(&f->s, 90000), 0);
}

/* Retries an acquisition until it answers something other than EUNAVAILABLE (a failover
 * takes a few seconds), for at most timeout_ms. */
static lk_status acquire_retry(lk_client *c, const char *resource, const char *owner,
                               int64_t floor, lk_result *res, int timeout_ms)
{
    int64_t deadline = th_now_ms() + timeout_ms;
    lk_status st;
    do {
        st = lk_acquire(c, resource, owner, 30000, floor, NULL, res);
        if (st != LK_EUNAVAILABLE) {
            return st;
        }
        th_nap_ms(50);
    } while (th_now_ms() < deadline);
    return st;
}

/* lk_acquire() of resource by alice with key, through c, while the replica is paused
 * (SIGSTOP: still connected, acknowledging nothing); resumed before anything is asserted,
 * so a failed test never leaves it stopped. The client's error message goes to err. */
static lk_status acquire_replica_paused(sn_fixture *f, lk_client *c, const char *resource,
                                        const char *key, lk_result *res, char *err,
                                        size_t errlen)
{
    int master = th_sentinel_master(&f->s);
    assert_true(master >= 0);
    pid_t replica = f->s.redis[master == 0 ? 1 : 0].pid;
    assert_int_equal(kill(replica, SIGSTOP), 0);
    lk_status st = lk_acquire(c, resource, "alice", 30000, 0, key, res);
    snprintf(err, errlen, "%s", lk_errstr(c));
    assert_int_equal(kill(replica, SIGCONT), 0);
    return st;
}

/* A keyed acquisition whose client died between its script and its WAIT (here: a handle
 * without min_replicas took it) is retried by a handle that wants one replica. The replay
 * WAITs: with the replica running it is ACQUIRED with the first token; with the replica
 * paused (SIGSTOP: still connected, acknowledging nothing) it is EREPLICAS, the hold undone
 * and the record dropped. Each retry runs on a fresh connection, as a gateway's retry
 * would. Before, a replay skipped the WAIT and answered ACQUIRED for a grant no replica had
 * acknowledged. (The replay's write to its record, which makes the WAIT cover the grant on
 * later Redis versions, is not needed on Debian's 7.0, which records a connection's offset
 * after any command: removing it does not fail this test here; locklib_calls
 * test_replay_writes_only_before_a_wait checks that the write is made.) */
static void test_replayed_acquisition_waits_for_replicas(void **state)
{
    sn_fixture *f = *state;
    lk_client *c = open_url(f->s.url);
    lk_result res;
    lk_lock_info info;
    char resource[64];

    snprintf(resource, sizeof resource, "%s", res_name("replay-wait"));
    int master = th_sentinel_master(&f->s);
    assert_true(master >= 0);
    assert_lk(c, lk_acquire(c, resource, "alice", 30000, 0, "key-1", &res), LK_ACQUIRED);
    int64_t token = res.token;

    lk_client *r1 = open_url_replicas(f->s.url, 1, 0);
    assert_lk(r1, lk_acquire(r1, resource, "alice", 30000, 0, "key-1", &res), LK_ACQUIRED);
    assert_int_equal(res.replayed, 1);
    assert_int_equal(res.token, token);
    lk_client_close(r1);

    lk_client *r2 = open_url_replicas(f->s.url, 1, 0);
    char err[256];
    lk_status st = acquire_replica_paused(f, r2, resource, "key-1", &res, err, sizeof err);
    print_message("replay with the replica paused: %s (%s)\n", lk_status_name(st), err);
    assert_int_equal(st, LK_EREPLICAS);
    assert_non_null(strstr(err, "rolled back"));
    assert_lk(c, lk_lock_status(c, resource, &info), LK_OK);
    assert_int_equal(info.locked, 0);
    assert_int_equal(th_redis_cmd(&f->s.redis[master], NULL, 0, "EXISTS fg:{%s}:idem:key-1",
                                  resource),
                     0);
    lk_client_close(r2);
    lk_client_close(c);
    /* The failover test that follows needs the replica linked and healthy again. */
    assert_int_equal(th_sentinel_wait_ready(&f->s, 30000), 0);
}

/* A hand-off on Sentinel: the release grants on the master, and the waiter's claim by a
 * handle that wants one replica is ACQUIRED only once a replica acknowledged: the replicas
 * hold the grant (the lock hash with the waiter's hold and its token) when it is answered. */
static void test_handoff_claim_waits_for_replicas(void **state)
{
    sn_fixture *f = *state;
    lk_client *c = open_url(f->s.url);
    lk_client *r1 = open_url_replicas(f->s.url, 1, 0);
    lk_result res;
    char resource[64];
    char buf[32];

    snprintf(resource, sizeof resource, "%s", res_name("handoff-wait"));
    int master = th_sentinel_master(&f->s);
    assert_true(master >= 0);
    assert_lk(c, lk_acquire(c, resource, "alice", 30000, 0, NULL, &res), LK_ACQUIRED);
    lk_call wait = {.kind = LK_CALL_ACQUIRE, .resource = resource, .owner = "bob",
                    .lease_ms = 30000, .wait_ms = 20000, .handoff_id = "b0b"};
    lk_call *calls[1] = {&wait};
    lk_call_many(c, calls, 1);
    assert_lk(c, wait.status, LK_HELD);
    lk_call rel = {.kind = LK_CALL_RELEASE, .resource = resource, .owner = "alice",
                   .handoff = 1};
    calls[0] = &rel;
    lk_call_many(c, calls, 1);
    assert_lk(c, rel.status, LK_RELEASED);
    assert_string_equal(rel.res.handed_id, "b0b");

    calls[0] = &wait;
    lk_call_many(r1, calls, 1);
    assert_lk(r1, wait.status, LK_ACQUIRED);
    assert_int_equal(wait.res.handed, 1);
    assert_int_equal(wait.res.token, rel.res.handed_token);
    for (int i = 0; i < f->s.nredis; i++) {
        if (i == master) {
            continue;
        }
        buf[0] = '\0';
        th_redis_cmd(&f->s.redis[i], buf, sizeof buf, "HGET fg:{%s}:lock #token", resource);
        if (atoll(buf) == rel.res.handed_token) {
            lk_client_close(r1);
            lk_client_close(c);
            return; /* one replica acknowledged: it holds the grant */
        }
    }
    fail_msg("no replica holds the grant of token %lld", (long long)rel.res.handed_token);
}

/* A stale record: alice's keyed hold ended, and she took the lock again with a watchdog
 * lease (a larger token). A late retry of the old key replays the old grant while the
 * replica is paused: its WAIT fails and the undo keeps the later hold (release.lua ARGV[4]),
 * answered still held, so the watchdog goes on renewing it: several leases later it is
 * still alice's. Answered "not the owner", the undo stopped the watch and the hold lapsed
 * after one lease while alice believed she held it. */
static void test_undone_replay_keeps_the_later_watchdog_hold(void **state)
{
    sn_fixture *f = *state;
    lk_client *c = open_url_replicas(f->s.url, 1, 1500);
    lk_result res;
    lk_lock_info info;
    char resource[64];

    snprintf(resource, sizeof resource, "%s", res_name("replay-watch"));
    assert_lk(c, lk_acquire(c, resource, "alice", 30000, 0, "key-old", &res), LK_ACQUIRED);
    int64_t first = res.token;
    assert_lk(c, lk_release(c, resource, "alice", NULL, &res), LK_RELEASED);
    assert_lk(c, lk_acquire(c, resource, "alice", LK_LEASE_WATCHDOG, 0, NULL, &res),
              LK_ACQUIRED);
    int64_t later = res.token;
    assert_true(later > first);

    char err[256];
    lk_status st = acquire_replica_paused(f, c, resource, "key-old", &res, err, sizeof err);
    if (st != LK_EREPLICAS) {
        print_error("replay with the replica paused: %s (%s)\n", lk_status_name(st), err);
    }
    assert_int_equal(st, LK_EREPLICAS);
    /* Four leases: renewed all along, never lapsed, never reported lost. */
    int64_t end = th_now_ms() + 6000;
    while (th_now_ms() < end) {
        assert_lk(c, lk_lock_status(c, resource, &info), LK_OK);
        assert_int_equal(info.locked, 1);
        assert_int_equal(info.token, later);
        assert_int_equal(lk_watch_lost(c, resource, "alice"), 0);
        th_nap_ms(50);
    }
    assert_lk(c, lk_release(c, resource, "alice", NULL, &res), LK_RELEASED);
    lk_client_close(c);
    assert_int_equal(th_sentinel_wait_ready(&f->s, 30000), 0);
}

/* A lock recorded in a session by a handle with min_replicas: the record WAITs for the
 * replicas like an acquisition. With the replica paused (SIGSTOP) the record is EREPLICAS:
 * a failover now could promote a replica whose session does not list the lock, so that the
 * session's renewals and its end would miss it; the caller ends the lock instead. */
static void test_session_record_waits_for_replicas(void **state)
{
    sn_fixture *f = *state;
    lk_client *c = open_url_replicas(f->s.url, 1, 0);
    char id[LK_SESSION_ID_LEN + 1], resource[64];
    lk_session_lock ended[LK_SESSION_LOCKS_MAX];
    lk_result res;
    size_t n = 0;

    snprintf(resource, sizeof resource, "%s", res_name("session-wait"));
    assert_lk(c, lk_session_create(c, 30000, NULL, id), LK_OK);
    assert_lk(c, lk_acquire(c, resource, "alice", 30000, 0, NULL, &res), LK_ACQUIRED);
    int master = th_sentinel_master(&f->s);
    assert_true(master >= 0);
    pid_t replica = f->s.redis[master == 0 ? 1 : 0].pid;
    assert_int_equal(kill(replica, SIGSTOP), 0);
    lk_status st = lk_session_add(c, id, NULL, resource, "alice", res.token, NULL);
    assert_int_equal(kill(replica, SIGCONT), 0);
    print_message("session record with the replica paused: %s (%s)\n", lk_status_name(st),
                  lk_errstr(c));
    assert_int_equal(st, LK_EREPLICAS);
    assert_lk(c, lk_session_end(c, id, NULL, 0, 5000, ended, LK_SESSION_LOCKS_MAX, &n),
              LK_RELEASED);
    assert_lk(c, lk_session_forget(c, id), LK_OK);
    lk_client_close(c);
    assert_int_equal(th_sentinel_wait_ready(&f->s, 30000), 0);
}

/* The replica stops replicating (REPLICAOF NO ONE keeps its data), so it misses owner B's
 * acquisition and its INCR. The master is then SIGKILLed and the sentinels promote the
 * replica. Owner C acquires through the same handle with the floor the caller knows (B's
 * token, as the gateway's ledger would): the counter on the new master is below it, is
 * lifted, and C's token is above B's. Without the floor the promoted replica would have
 * handed out B's token again. */
static void test_failover_floor(void **state)
{
    sn_fixture *f = *state;
    lk_client *c = open_url(f->s.url);
    lk_client *w = open_url(f->s.url);
    lk_result res;
    lk_topology topo;
    char resource[64];
    char channel[128];
    char out[64];

    snprintf(resource, sizeof resource, "%s", res_name("failover"));
    int old = th_sentinel_master(&f->s);
    int replica = old == 0 ? 1 : 0;
    assert_true(old >= 0);
    assert_lk(c, lk_acquire(c, resource, "A", 30000, 0, NULL, &res), LK_ACQUIRED);
    int64_t token_a = res.token;
    assert_lk(c, lk_release(c, resource, "A", NULL, &res), LK_RELEASED);
    /* Replicated before the replica detaches: WAIT 1 answers 1. */
    assert_int_equal(th_redis_cmd(&f->s.redis[old], NULL, 0, "WAIT 1 2000"), 1);
    assert_int_equal(th_redis_cmd(&f->s.redis[replica], out, sizeof out, "REPLICAOF NO ONE"),
                     0);
    assert_string_equal(out, "OK");
    assert_lk(c, lk_acquire(c, resource, "B", 30000, 0, NULL, &res), LK_ACQUIRED);
    int64_t token_b = res.token;
    assert_true(token_b > token_a);
    /* The replica missed it: its counter is still A's. */
    snprintf(channel, sizeof channel, "fg:{%s}:fence", resource);
    char counter[32];
    char want_counter[32];
    assert_int_equal(th_redis_cmd(&f->s.redis[replica], counter, sizeof counter, "GET %s",
                                  channel), 0);
    snprintf(want_counter, sizeof want_counter, "%lld", (long long)token_a);
    assert_string_equal(counter, want_counter);

    int64_t start = th_now_ms();
    assert_int_equal(th_sentinel_kill_master(&f->s), old);
    int promoted = th_sentinel_wait_failover(&f->s, old, 30000);
    assert_int_equal(promoted, replica);
    assert_lk(c, acquire_retry(c, resource, "C", token_b, &res, 30000), LK_ACQUIRED);
    print_message("sentinel failover: locks served again after %lld ms\n",
                  (long long)(th_now_ms() - start));
    assert_true(res.token > token_b);
    assert_int_equal(res.floor_raised, 1);
    lk_client_topology(c, &topo);
    assert_int_equal(topo.failovers, 1);
    snprintf(out, sizeof out, "127.0.0.1:%d", f->s.redis[promoted].port);
    assert_string_equal(topo.master, out);

    /* The waiter's subscriber follows the master too: C's release wakes it. */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        th_nap_ms(300);
        lk_result r2;
        lk_client *c2 = NULL;
        lk_client_open(&c2, f->s.url, NULL);
        lk_status st = lk_release(c2, resource, "C", NULL, &r2);
        _exit(st == LK_RELEASED ? 0 : 1);
    }
    int64_t t0 = th_now_ms();
    assert_lk(w, lk_acquire_wait(w, resource, "D", 30000, token_b, NULL, 20000, &res),
              LK_ACQUIRED);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_int_equal(WEXITSTATUS(status), 0);
    /* Woken by the release, long before C's 30 s lease would have run out. */
    assert_true(th_now_ms() - t0 < 10000);
    lk_client_close(w);
    lk_client_close(c);
}

/* Its own set (the failover leaves no replica): a session whose locks were taken with
 * min_replicas survives the master's SIGKILL. On the promoted replica it still lists both
 * locks, its renewal renews both, and its end releases and fences both. */
static void test_session_survives_failover(void **state)
{
    sn_fixture *f = *state;
    lk_client *c = open_url_replicas(f->s.url, 1, 0);
    char id[LK_SESSION_ID_LEN + 1], names[2][64], owner[LK_SESSION_ID_LEN + 1];
    lk_session_lock ended[LK_SESSION_LOCKS_MAX];
    int64_t tokens[2], ttl = 0, left = 0;
    lk_session_renewal rn;
    lk_result res;
    size_t n = 0;

    lk_random_id(owner);
    assert_lk(c, lk_session_create(c, 30000, NULL, id), LK_OK);
    for (int i = 0; i < 2; i++) {
        snprintf(names[i], sizeof names[i], "%.50s.%d", res_name("session-failover"), i);
        assert_lk(c, lk_session_acquire(c, id, NULL, names[i], owner, 0, NULL, &res),
                  LK_ACQUIRED);
        tokens[i] = res.token;
    }
    int old = th_sentinel_master(&f->s);
    assert_int_equal(th_sentinel_kill_master(&f->s), old);
    assert_true(th_sentinel_wait_failover(&f->s, old, 30000) >= 0);
    int64_t deadline = th_now_ms() + 30000;
    lk_status st;
    while ((st = lk_session_info(c, id, NULL, &ttl, &left, ended, 2, &n)) ==
               LK_EUNAVAILABLE &&
           th_now_ms() < deadline) {
        th_nap_ms(50);
    }
    assert_lk(c, st, LK_OK);
    assert_int_equal(n, 2);
    assert_lk(c, lk_session_renew(c, id, NULL, &rn), LK_RENEWED);
    assert_int_equal(rn.renewed, 2);
    assert_lk(c, lk_session_end(c, id, NULL, 0, 5000, ended, LK_SESSION_LOCKS_MAX, &n),
              LK_RELEASED);
    assert_int_equal(n, 2);
    for (size_t i = 0; i < n; i++) {
        int j = strcmp(ended[i].resource, names[0]) == 0 ? 0 : 1;
        assert_int_equal(ended[i].status, LK_RELEASED);
        assert_int_equal(ended[i].token, tokens[j]);
        assert_true(ended[i].fenced_by > tokens[j]);
    }
    assert_lk(c, lk_session_forget(c, id), LK_OK);
    lk_client_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_urls),
        cmocka_unit_test(test_finds_master),
        cmocka_unit_test(test_skips_bad_sentinels),
        cmocka_unit_test(test_switch_master_hint),
        cmocka_unit_test(test_replayed_acquisition_waits_for_replicas),
        cmocka_unit_test(test_undone_replay_keeps_the_later_watchdog_hold),
        cmocka_unit_test(test_handoff_claim_waits_for_replicas),
        cmocka_unit_test(test_session_record_waits_for_replicas),
        cmocka_unit_test(test_failover_floor),
    };
    const struct CMUnitTest sessions[] = {
        cmocka_unit_test(test_session_survives_failover),
    };
    int failed = cmocka_run_group_tests_name("sentinel", tests, group_setup, group_teardown);
    failed += cmocka_run_group_tests_name("session failover", sessions, group_setup,
                                          group_teardown);
    return failed;
}
