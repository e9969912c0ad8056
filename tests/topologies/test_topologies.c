/*
 * ctest harness_topologies: the test harness's Sentinel sets, Redis Clusters and Redis sets
 * (tests/common/harness_sentinel.c, harness_cluster.c, harness.c) against the real servers,
 * before locklib's tests rely on them.
 *
 * Three groups, each with its own servers, started in the group setup and stopped by PID in
 * the group teardown:
 *   - sentinel: 1 master, 2 replicas, 3 sentinels, with a password. The master is SIGKILLed,
 *     the sentinels must agree on a new master that takes a write, and the old master must
 *     come back as a replica of it holding that write.
 *   - cluster: 3 masters with 1 replica each, with a password. Every slot is covered, the
 *     harness's key slot equals CLUSTER KEYSLOT, a SET on the wrong master answers MOVED, a
 *     slot held mid-migration answers ASK, and a SIGKILLed master's replica takes over.
 *   - redis set: 3 independent masters; one is killed, wiped and restarted empty.
 *
 * Set-up and failover times are printed ("harness_topologies: ... ms") to size the timeouts
 * of the tests to come; nothing asserts on them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "harness.h"

#define PASSWORD "topo-s3cret"
#define FAILOVER_TIMEOUT_MS 30000
/* Sentinels moving the other replicas to a new master: over 30 s seen on a busy machine. */
#define READY_TIMEOUT_MS 90000

static void report_ms(const char *what, int64_t start_ms)
{
    printf("harness_topologies: %s: %lld ms\n", what, (long long)(th_now_ms() - start_ms));
    fflush(stdout);
}

/* Asserts that cmd on r answers the status or string want, printing the answer if not. */
static void assert_answer(const th_redis *r, const char *want, const char *fmt, ...)
{
    char out[256] = "";
    va_list ap;
    redisContext *ctx = redisConnect("127.0.0.1", r->port);
    redisReply *reply = NULL;

    assert_non_null(ctx);
    assert_int_equal(ctx->err, 0);
    if (r->password[0] != '\0') {
        freeReplyObject(redisCommand(ctx, "AUTH %s", r->password));
    }
    va_start(ap, fmt);
    reply = redisvCommand(ctx, fmt, ap);
    va_end(ap);
    if (reply != NULL && reply->str != NULL) {
        snprintf(out, sizeof out, "%s", reply->str);
    }
    freeReplyObject(reply);
    redisFree(ctx);
    if (strcmp(out, want) != 0) {
        fail_msg("port %d answered \"%s\", wanted \"%s\"", r->port, out, want);
    }
}

/* Waits up to 10 s until GET key on r answers want. */
static void assert_eventually_get(const th_redis *r, const char *key, const char *want)
{
    char out[256] = "";
    int64_t deadline = th_now_ms() + 10000;

    while (th_redis_cmd(r, out, sizeof out, "GET %s", key) != 0 || strcmp(out, want) != 0) {
        if (th_now_ms() > deadline) {
            fail_msg("GET %s on port %d: \"%s\", wanted \"%s\"", key, r->port, out, want);
        }
        th_nap_ms(50);
    }
}

/* Writes r's ROLE (its first element, or why there is none) to out. */
static void role_of(const th_redis *r, char *out, size_t len)
{
    redisContext *ctx = redisConnect("127.0.0.1", r->port);
    redisReply *reply = NULL;

    snprintf(out, len, "no connection");
    if (ctx != NULL && ctx->err == 0) {
        if (r->password[0] != '\0') {
            freeReplyObject(redisCommand(ctx, "AUTH %s", r->password));
        }
        reply = redisCommand(ctx, "ROLE");
        if (reply == NULL) {
            snprintf(out, len, "connection lost: %.64s", ctx->errstr);
        } else if (reply->type == REDIS_REPLY_ARRAY && reply->elements > 0 &&
                   reply->element[0]->type == REDIS_REPLY_STRING) {
            snprintf(out, len, "%s", reply->element[0]->str);
        } else {
            snprintf(out, len, "reply type %d: %s", reply->type,
                     reply->str != NULL ? reply->str : "");
        }
        freeReplyObject(reply);
    }
    if (ctx != NULL) {
        redisFree(ctx);
    }
}

static int role_is(const th_redis *r, const char *role)
{
    char out[128];
    role_of(r, out, sizeof out);
    return strcmp(out, role) == 0;
}

/* Asserts that r answers ROLE with role, naming what it answered and which master the
 * sentinels name if not. */
static void assert_role(const th_sentinel *s, const th_redis *r, const char *role)
{
    char out[128];
    int m = 0;

    role_of(r, out, sizeof out);
    if (strcmp(out, role) != 0) {
        m = th_sentinel_master(s);
        fail_msg("port %d: ROLE \"%s\", wanted \"%s\"; the sentinels name %s %d", r->port,
                 out, role, m < 0 ? "no master, index" : "master port",
                 m < 0 ? m : s->redis[m].port);
    }
}

/* Asserts that r runs with the persistence of th_redis_start(r, 1, ...): AOF, fsync always. */
static void assert_persistence_as_single_redis(const th_redis *r)
{
    redisContext *ctx = redisConnect("127.0.0.1", r->port);
    redisReply *reply = NULL;

    assert_true(ctx != NULL && ctx->err == 0);
    if (r->password[0] != '\0') {
        freeReplyObject(redisCommand(ctx, "AUTH %s", r->password));
    }
    reply = redisCommand(ctx, "CONFIG GET app*");
    assert_true(reply != NULL && reply->type == REDIS_REPLY_ARRAY);
    for (size_t i = 0; i + 1 < reply->elements; i += 2) {
        if (strcmp(reply->element[i]->str, "appendonly") == 0) {
            assert_string_equal(reply->element[i + 1]->str, "yes");
        } else if (strcmp(reply->element[i]->str, "appendfsync") == 0) {
            assert_string_equal(reply->element[i + 1]->str, "always");
        }
    }
    assert_true(reply->elements >= 4);
    freeReplyObject(reply);
    redisFree(ctx);
}

/* ---- Sentinel ------------------------------------------------------------------------------ */

static int sentinel_setup(void **state)
{
    th_sentinel *s = calloc(1, sizeof *s);
    int64_t t0 = th_now_ms();

    th_sentinel_start(s, "fgmaster", 2, 3, PASSWORD);
    report_ms("sentinel set-up (1 master, 2 replicas, 3 sentinels, all known)", t0);
    *state = s;
    return 0;
}

static int sentinel_teardown(void **state)
{
    th_sentinel_stop(*state);
    free(*state);
    return 0;
}

static void test_sentinel_url(void **state)
{
    th_sentinel *s = *state;
    char want[512];

    snprintf(want, sizeof want, "redis-sentinel://:%s@127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/%s",
             PASSWORD, s->sentinels[0].port, s->sentinels[1].port, s->sentinels[2].port,
             "fgmaster");
    assert_string_equal(s->url, want);
    assert_int_equal(s->quorum, 2);
    assert_int_equal(th_sentinel_master(s), 0);
    assert_role(s, &s->redis[0], "master");
    assert_role(s, &s->redis[1], "slave");
    assert_role(s, &s->redis[2], "slave");
    for (int i = 0; i < s->nredis; i++) {
        assert_persistence_as_single_redis(&s->redis[i]);
    }
}

static void test_sentinel_failover(void **state)
{
    th_sentinel *s = *state;
    int64_t t0 = 0;
    int old = 0;
    int now = 0;

    assert_answer(&s->redis[0], "OK", "SET before-failover 1");
    /* Replicated to both replicas before the kill, so either may be promoted. */
    assert_eventually_get(&s->redis[1], "before-failover", "1");
    assert_eventually_get(&s->redis[2], "before-failover", "1");

    old = th_sentinel_kill_master(s);
    assert_int_equal(old, 0);
    t0 = th_now_ms();
    now = th_sentinel_wait_failover(s, old, FAILOVER_TIMEOUT_MS);
    report_ms("sentinel failover after SIGKILL of the master (sentinels agree, ROLE master)",
              t0);
    assert_true(now == 1 || now == 2);
    assert_int_equal(th_sentinel_master(s), now);
    assert_answer(&s->redis[now], "OK", "SET after-failover 2");
    assert_eventually_get(&s->redis[now], "before-failover", "1");

    /* The other replica follows the new master, and the sentinels see it there. */
    t0 = th_now_ms();
    assert_int_equal(th_sentinel_wait_ready(s, READY_TIMEOUT_MS), 0);
    report_ms("sentinel ready again after the failover (other replica moved)", t0);
    assert_int_equal(th_sentinel_master(s), now);
    assert_role(s, &s->redis[3 - now], "slave");
    assert_eventually_get(&s->redis[3 - now], "after-failover", "2");

    /* The old master comes back as a replica of the new one and gets the new write. */
    t0 = th_now_ms();
    assert_int_equal(th_sentinel_restart_replica(s, old, READY_TIMEOUT_MS), 0);
    report_ms("sentinel restart of the old master as a replica (all known again)", t0);
    assert_role(s, &s->redis[old], "slave");
    assert_eventually_get(&s->redis[old], "after-failover", "2");
    assert_int_equal(th_sentinel_master(s), now);
}

/* ---- Cluster ------------------------------------------------------------------------------- */

static int cluster_setup(void **state)
{
    th_cluster *c = calloc(1, sizeof *c);
    int64_t t0 = th_now_ms();

    th_cluster_start(c, 3, 1, PASSWORD);
    report_ms("cluster create (3 masters, 3 replicas, state ok everywhere)", t0);
    *state = c;
    return 0;
}

static int cluster_teardown(void **state)
{
    th_cluster_stop(*state);
    free(*state);
    return 0;
}

/* CLUSTER SLOTS (not the harness's CLUSTER SHARDS) covers every slot exactly once, and for
 * the first slot of each range the harness names the same master. */
static void test_cluster_covers_every_slot(void **state)
{
    th_cluster *c = *state;
    static unsigned char seen[TH_CLUSTER_SLOTS];
    redisContext *ctx = redisConnect("127.0.0.1", c->nodes[0].port);
    redisReply *reply = NULL;
    int covered = 0;

    memset(seen, 0, sizeof seen);
    assert_true(ctx != NULL && ctx->err == 0);
    freeReplyObject(redisCommand(ctx, "AUTH %s", PASSWORD));
    reply = redisCommand(ctx, "CLUSTER SLOTS");
    assert_non_null(reply);
    assert_int_equal(reply->type, REDIS_REPLY_ARRAY);
    for (size_t i = 0; i < reply->elements; i++) {
        const redisReply *range = reply->element[i];
        int lo = (int)range->element[0]->integer;
        int hi = (int)range->element[1]->integer;
        int port = (int)range->element[2]->element[1]->integer;
        for (int slot = lo; slot <= hi; slot++) {
            assert_int_equal(seen[slot], 0);
            seen[slot] = 1;
            covered++;
        }
        assert_int_equal(c->nodes[th_cluster_slot_owner(c, 0, lo)].port, port);
        assert_int_equal(c->nodes[th_cluster_slot_owner(c, 0, hi)].port, port);
    }
    freeReplyObject(reply);
    redisFree(ctx);
    assert_int_equal(covered, TH_CLUSTER_SLOTS);
    for (int i = 0; i < c->nnodes; i++) {
        assert_persistence_as_single_redis(&c->nodes[i]);
    }

    char want[32];
    snprintf(want, sizeof want, "redis-cluster://:%s@", PASSWORD);
    assert_memory_equal(c->url, want, strlen(want));
    for (int i = 0; i < c->nnodes; i++) {
        char node[32];
        snprintf(node, sizeof node, "127.0.0.1:%d", c->nodes[i].port);
        assert_non_null(strstr(c->url, node));
    }
}

static void assert_slot_matches(const th_cluster *c, const char *key)
{
    long long slot = th_redis_cmd(&c->nodes[0], NULL, 0, "CLUSTER KEYSLOT %b", key, strlen(key));
    if (slot != th_key_slot(key, strlen(key))) {
        fail_msg("key \"%s\": CLUSTER KEYSLOT %lld, harness %d", key, slot,
                 th_key_slot(key, strlen(key)));
    }
}

static void test_cluster_key_slot(void **state)
{
    th_cluster *c = *state;
    /* The cluster spec's examples, then generated keys with and without hash tags. */
    static const char *const spec_keys[] = {"{user1000}.following", "{user1000}.followers",
                                            "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}",
                                            "{}", "{", "}", "", "a{b", "{a}}", NULL};
    char key[64];

    /* The CRC16/XMODEM check value. */
    assert_int_equal(th_crc16("123456789", 9), 0x31C3);
    /* The spec: foo{{bar}}zap hashes "{bar", foo{bar}{zap} hashes "bar", foo{}{bar} all. */
    assert_int_equal(th_key_slot("foo{{bar}}zap", 13), th_crc16("{bar", 4) & 16383);
    assert_int_equal(th_key_slot("foo{bar}{zap}", 13), th_key_slot("bar", 3));
    assert_int_equal(th_key_slot("foo{}{bar}", 10), th_crc16("foo{}{bar}", 10) & 16383);
    assert_int_equal(th_key_slot("{user1000}.following", 20), th_key_slot("user1000", 8));

    for (int i = 0; spec_keys[i] != NULL; i++) {
        assert_slot_matches(c, spec_keys[i]);
    }
    for (int i = 0; i < 400; i++) {
        switch (i % 4) {
            case 0: snprintf(key, sizeof key, "lock:res-%d", i); break;
            case 1: snprintf(key, sizeof key, "{user%d}.following", i); break;
            case 2: snprintf(key, sizeof key, "fg:{r%d}:token", i); break;
            default: snprintf(key, sizeof key, "x{}%d{y}", i); break;
        }
        assert_slot_matches(c, key);
    }
}

/* Another running master than `not`. */
static int other_master(const th_cluster *c, int not)
{
    for (int i = 0; i < c->nnodes; i++) {
        if (i != not && c->nodes[i].pid > 0 && role_is(&c->nodes[i], "master")) {
            return i;
        }
    }
    return -1;
}

static void test_cluster_moved(void **state)
{
    th_cluster *c = *state;
    const char *key = "{moved}lock";
    int slot = th_key_slot(key, strlen(key));
    int owner = th_cluster_slot_owner(c, 0, slot);
    int wrong = other_master(c, owner);
    char want[64];

    assert_true(owner >= 0 && wrong >= 0);
    snprintf(want, sizeof want, "MOVED %d 127.0.0.1:%d", slot, c->nodes[owner].port);
    assert_answer(&c->nodes[wrong], want, "SET %s 1", key);
    assert_answer(&c->nodes[owner], "OK", "SET %s 1", key);
}

static void test_cluster_ask(void **state)
{
    th_cluster *c = *state;
    const char *held = "{asked}held";
    const char *fresh = "{asked}fresh";
    int slot = th_key_slot(held, strlen(held));
    int src = th_cluster_slot_owner(c, 0, slot);
    int dst = other_master(c, src);
    char ask[64];
    char moved[64];

    assert_true(src >= 0 && dst >= 0);
    assert_answer(&c->nodes[src], "OK", "SET %s v1", held);
    assert_int_equal(th_cluster_migrate_begin(c, slot, src, dst), 0);

    /* Mid-migration: the source still serves the key it holds and sends a key it does not
     * hold to the target with ASK; the target wants ASKING first, else MOVED back. */
    snprintf(ask, sizeof ask, "ASK %d 127.0.0.1:%d", slot, c->nodes[dst].port);
    snprintf(moved, sizeof moved, "MOVED %d 127.0.0.1:%d", slot, c->nodes[src].port);
    assert_answer(&c->nodes[src], "v1", "GET %s", held);
    assert_answer(&c->nodes[src], ask, "SET %s v2", fresh);
    assert_answer(&c->nodes[dst], moved, "SET %s v2", fresh);

    assert_int_equal(th_cluster_migrate_keys(c, slot, src, dst), 1);
    assert_answer(&c->nodes[src], ask, "GET %s", held);

    /* ASKING and the command on one connection: the target serves the key. */
    redisContext *ctx = redisConnect("127.0.0.1", c->nodes[dst].port);
    assert_true(ctx != NULL && ctx->err == 0);
    freeReplyObject(redisCommand(ctx, "AUTH %s", PASSWORD));
    freeReplyObject(redisCommand(ctx, "ASKING"));
    redisReply *reply = redisCommand(ctx, "GET %s", held);
    assert_true(reply != NULL && reply->type == REDIS_REPLY_STRING);
    assert_string_equal(reply->str, "v1");
    freeReplyObject(reply);
    redisFree(ctx);

    assert_int_equal(th_cluster_migrate_finish(c, slot, src, dst), 0);
    snprintf(moved, sizeof moved, "MOVED %d 127.0.0.1:%d", slot, c->nodes[dst].port);
    assert_answer(&c->nodes[src], moved, "GET %s", held);
    assert_answer(&c->nodes[dst], "v1", "GET %s", held);
    assert_int_equal(th_cluster_slot_owner(c, src, slot), dst);
    assert_int_equal(th_cluster_slot_owner(c, dst, slot), dst);
}

/* 1 when node r is listed by CLUSTER REPLICAS of master id (asked of node `asked`). */
static int is_replica_of(const th_redis *asked, const char *id, const th_redis *r)
{
    redisContext *ctx = redisConnect("127.0.0.1", asked->port);
    redisReply *reply = NULL;
    char needle[32];
    int found = 0;

    snprintf(needle, sizeof needle, ":%d@", r->port);
    if (ctx != NULL && ctx->err == 0) {
        freeReplyObject(redisCommand(ctx, "AUTH %s", PASSWORD));
        reply = redisCommand(ctx, "CLUSTER REPLICAS %s", id);
        for (size_t i = 0; reply != NULL && reply->type == REDIS_REPLY_ARRAY &&
                           i < reply->elements;
             i++) {
            found |= strstr(reply->element[i]->str, needle) != NULL;
        }
        freeReplyObject(reply);
    }
    if (ctx != NULL) {
        redisFree(ctx);
    }
    return found;
}

static void test_cluster_failover(void **state)
{
    th_cluster *c = *state;
    const char *key = "{failover}lock";
    int slot = th_key_slot(key, strlen(key));
    int killed = th_cluster_slot_owner(c, 0, slot);
    int replicas[TH_MAX_NODES];
    int64_t t0 = 0;
    int now = 0;

    assert_true(killed >= 0);
    /* Who replicated the master before the kill, by the master's own cluster view: the one
     * to take over is among them. That view is gossip, and may not list a replica yet
     * whose replication link is up (the cluster was just resharded by the tests before),
     * so it is read again until it lists one. */
    int64_t listed_by = th_now_ms() + 10000;
    int nlisted = 0;
    while (nlisted == 0 && th_now_ms() < listed_by) {
        for (int i = 0; i < c->nnodes; i++) {
            replicas[i] = is_replica_of(&c->nodes[killed], c->ids[killed], &c->nodes[i]);
            nlisted += replicas[i];
        }
        if (nlisted == 0) {
            th_nap_ms(50);
        }
    }
    assert_true(nlisted > 0);
    assert_answer(&c->nodes[killed], "OK", "SET %s 1", key);
    /* WAIT: the write reached the replica before the kill (replication is asynchronous). */
    assert_int_equal(th_redis_cmd(&c->nodes[killed], NULL, 0, "WAIT 1 5000"), 1);

    th_cluster_kill(c, killed);
    t0 = th_now_ms();
    now = th_cluster_wait_failover(c, killed, FAILOVER_TIMEOUT_MS);
    report_ms("cluster master failover after SIGKILL (state ok everywhere, replica master)", t0);
    assert_true(now >= 0 && now != killed);
    if (!replicas[now]) {
        char nodes[4096] = "";
        th_redis_cmd(&c->nodes[now], nodes, sizeof nodes, "CLUSTER NODES");
        fail_msg("node %d (port %d) took over from node %d (port %d), which listed it as no "
                 "replica of its own; CLUSTER NODES on it now:\n%s",
                 now, c->nodes[now].port, killed, c->nodes[killed].port, nodes);
    }
    for (int i = 0; i < c->nnodes; i++) {
        if (c->nodes[i].pid > 0) {
            assert_int_equal(th_cluster_slot_owner(c, i, slot), now);
        }
    }
    assert_answer(&c->nodes[now], "1", "GET %s", key);
    assert_answer(&c->nodes[now], "OK", "SET %s 2", key);
    assert_int_equal(th_cluster_wait_ok(c, FAILOVER_TIMEOUT_MS), 0);

    t0 = th_now_ms();
    assert_int_equal(th_cluster_restart(c, killed, FAILOVER_TIMEOUT_MS), 0);
    report_ms("cluster restart of the old master (rejoined as a replica)", t0);
    assert_true(role_is(&c->nodes[killed], "slave"));
    assert_int_equal(th_cluster_slot_owner(c, killed, slot), now);
}

/* ---- Redis set (Redlock) -------------------------------------------------------------------- */

static int set_setup(void **state)
{
    th_redis_set *s = calloc(1, sizeof *s);
    th_redis_set_start(s, 3, PASSWORD);
    *state = s;
    return 0;
}

static int set_teardown(void **state)
{
    th_redis_set_stop(*state);
    free(*state);
    return 0;
}

static void test_redis_set(void **state)
{
    th_redis_set *s = *state;
    char want[sizeof s->urls];
    char out[64];

    snprintf(want, sizeof want, "%s,%s,%s", s->nodes[0].url, s->nodes[1].url, s->nodes[2].url);
    assert_string_equal(s->urls, want);
    for (int i = 0; i < 3; i++) {
        assert_true(role_is(&s->nodes[i], "master"));
        assert_persistence_as_single_redis(&s->nodes[i]);
        assert_answer(&s->nodes[i], "OK", "SET lock:x %d", i);
    }
    /* Independent: each node keeps its own value. */
    for (int i = 0; i < 3; i++) {
        char v[8];
        snprintf(v, sizeof v, "%d", i);
        assert_answer(&s->nodes[i], v, "GET lock:x");
    }
    /* AOF with appendfsync always: a SIGKILL loses nothing. */
    th_redis_kill(&s->nodes[1]);
    th_redis_restart(&s->nodes[1]);
    assert_answer(&s->nodes[1], "1", "GET lock:x");
    /* Wiped: it comes back empty, the others untouched. */
    th_redis_kill(&s->nodes[1]);
    th_redis_wipe_files(&s->nodes[1]);
    th_redis_restart(&s->nodes[1]);
    assert_int_equal(th_redis_cmd(&s->nodes[1], out, sizeof out, "EXISTS lock:x"), 0);
    assert_answer(&s->nodes[0], "0", "GET lock:x");
    assert_answer(&s->nodes[2], "2", "GET lock:x");
}

int main(void)
{
    const struct CMUnitTest sentinel[] = {
        cmocka_unit_test(test_sentinel_url),
        cmocka_unit_test(test_sentinel_failover),
    };
    const struct CMUnitTest cluster[] = {
        cmocka_unit_test(test_cluster_covers_every_slot),
        cmocka_unit_test(test_cluster_key_slot),
        cmocka_unit_test(test_cluster_moved),
        cmocka_unit_test(test_cluster_ask),
        cmocka_unit_test(test_cluster_failover),
    };
    const struct CMUnitTest set[] = {
        cmocka_unit_test(test_redis_set),
    };
    int failed = 0;

    failed += cmocka_run_group_tests_name("harness_sentinel", sentinel, sentinel_setup,
                                          sentinel_teardown);
    failed += cmocka_run_group_tests_name("harness_cluster", cluster, cluster_setup,
                                          cluster_teardown);
    failed += cmocka_run_group_tests_name("harness_redis_set", set, set_setup, set_teardown);
    return failed == 0 ? 0 : 1;
}
