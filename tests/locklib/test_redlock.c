/* locklib: Redlock's topology-independent core (locklib/src/redlock.c).
 *
 * Two parts:
 *  - pure unit tests of the validity, each combiner and the delayed-restart state machine,
 *    with a fake clock (no Redis, no sleeps);
 *  - the fencing tokens across 3 and 5 real, independent redis-servers (th_redis_set_start,
 *    AOF on). A small driver here does what the Redlock transport will do (send to the
 *    nodes at once, decode, combine, write back with fence_raise.lua, undo on failure),
 *    running the generated scripts with EVAL on one hiredis connection per node.
 *
 * The schedule of the token test, on N = 2f + 1 nodes, for two resources side by side: one
 * with the write-back (fence_raise.lua), one with the planted "naive max of the majority"
 * (no write-back):
 *   g1  granted by nodes {0 .. f}, the others partitioned away: every counter there is 1;
 *   g2  granted by node 0 and the f nodes {f+1 .. 2f}: node 0 mints 2, the others 1, so the
 *       token is 2 and, without the write-back, node 0 alone has seen it;
 *   loss  node 0 (and, with 5 nodes, node f+1 too: a minority) is SIGKILLed, its AOF wiped,
 *       and restarted empty; the marker check holds it out (delayed restart);
 *   g3  granted by the nodes that count.
 * With the write-back, g2 raised nodes f+1 .. 2f to 2, and every majority of g3 holds one of
 * them with its data: g3 > g2. Without it every counter g3 meets is 1 (or empty): g3 == g2,
 * a token that went back, which the test asserts happens, so the write-back is necessary.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "lk_test.h"
#include "redlock_internal.h"

/* ---- Pure: validity, combiners, delayed restart ------------------------------------- */

static void test_validity_and_drift(void **state)
{
    (void)state;
    /* antirez's constant: 1% of the TTL plus 2 ms. */
    assert_int_equal(lk__rl_drift_ms(10000), 102);
    assert_int_equal(lk__rl_drift_ms(30000), 302);
    assert_int_equal(lk__rl_drift_ms(150), 4); /* 1.5 rounded up: never under-estimated */
    assert_int_equal(lk__rl_validity_ms(10000, 50), 10000 - 50 - 102);
    assert_true(lk__rl_validity_ms(100, 97) <= 0);
    assert_int_equal(lk__rl_quorum(3), 2);
    assert_int_equal(lk__rl_quorum(5), 3);
    assert_true(lk__rl_valid_n(3) && lk__rl_valid_n(5) && lk__rl_valid_n(15));
    assert_false(lk__rl_valid_n(1) || lk__rl_valid_n(4) || lk__rl_valid_n(17));
}

static lk__rl_node node_st(lk_status st, int64_t token, int64_t ttl_ms)
{
    lk__rl_node n;
    memset(&n, 0, sizeof n);
    n.st = st;
    n.res.token = token;
    n.res.holds = st == LK_ACQUIRED || st == LK_STILL_HELD ? 1 : 0;
    n.res.ttl_ms = ttl_ms;
    n.res.queue_pos = -1;
    return n;
}

static lk__rl_node node_out(void)
{
    lk__rl_node n = node_st(LK_EUNAVAILABLE, 0, 0);
    n.held_out = 1;
    return n;
}

static void test_combine_acquire(void **state)
{
    lk__rl_out out;
    (void)state;

    /* A majority granted: the largest token, the validity as ttl, and write it back. */
    lk__rl_node a[3] = {node_st(LK_ACQUIRED, 7, 10000), node_st(LK_EUNAVAILABLE, 0, 0),
                        node_st(LK_ACQUIRED, 9, 10000)};
    assert_int_equal(lk__rl_combine_acquire(3, a, 10000, 40, &out), LK__RL_WRITE_BACK);
    assert_int_equal(out.st, LK_ACQUIRED);
    assert_int_equal(out.res.token, 9);
    assert_int_equal(out.res.ttl_ms, 10000 - 40 - 102);

    /* The same majority, too slow: no grant, released everywhere. */
    assert_int_equal(lk__rl_combine_acquire(3, a, 10000, 9900, &out), LK__RL_UNDO);
    assert_int_equal(out.st, LK_EUNAVAILABLE);

    /* A held-out node's ACQUIRED never counts (it was not asked; the status is ignored):
     * one grant and one holder of three is a contended lock, not a grant. */
    lk__rl_node b[3] = {node_st(LK_ACQUIRED, 7, 0), node_out(), node_st(LK_HELD, 0, 500)};
    b[1].st = LK_ACQUIRED;
    assert_int_equal(lk__rl_combine_acquire(3, b, 10000, 5, &out), LK__RL_UNDO);
    assert_int_equal(out.st, LK_HELD);
    assert_int_equal(out.res.ttl_ms, 500);

    /* A majority answered, too few granted: HELD, retry after the shortest holder lease,
     * and the grant on node 0 is undone. */
    lk__rl_node c[3] = {node_st(LK_ACQUIRED, 7, 0), node_st(LK_HELD, 0, 800),
                        node_st(LK_HELD, 0, 300)};
    assert_int_equal(lk__rl_combine_acquire(3, c, 10000, 5, &out), LK__RL_UNDO);
    assert_int_equal(out.st, LK_HELD);
    assert_int_equal(out.res.ttl_ms, 300);

    /* 5 nodes, 2 granted, 3 timed out: unavailable, undone on all. */
    lk__rl_node d[5] = {node_st(LK_ACQUIRED, 3, 0), node_st(LK_ACQUIRED, 4, 0),
                        node_st(LK_EUNAVAILABLE, 0, 0), node_st(LK_EREDIS, 0, 0), node_out()};
    assert_int_equal(lk__rl_combine_acquire(5, d, 10000, 5, &out), LK__RL_UNDO);
    assert_int_equal(out.st, LK_EUNAVAILABLE);
    assert_non_null(strstr(out.err, "2 of 5"));

    /* The key was used by another request on a majority: refused, and undone. */
    lk__rl_node e[3] = {node_st(LK_EIDEMPOTENCY, 0, 0), node_st(LK_EIDEMPOTENCY, 0, 0),
                        node_st(LK_ACQUIRED, 5, 0)};
    assert_int_equal(lk__rl_combine_acquire(3, e, 10000, 5, &out), LK__RL_UNDO);
    assert_int_equal(out.st, LK_EIDEMPOTENCY);

    /* Refused by every node: nothing was taken, so nothing is undone (an undo would release
     * a hold the owner had before the call). */
    lk__rl_node g[3] = {node_st(LK_EIDEMPOTENCY, 0, 0), node_st(LK_EIDEMPOTENCY, 0, 0),
                        node_st(LK_EIDEMPOTENCY, 0, 0)};
    assert_int_equal(lk__rl_combine_acquire(3, g, 10000, 5, &out), LK__RL_ANSWER);
    assert_int_equal(out.st, LK_EIDEMPOTENCY);
    /* The same with a node held out: it was sent nothing, so it took nothing either. */
    lk__rl_node h[3] = {node_st(LK_EIDEMPOTENCY, 0, 0), node_st(LK_EIDEMPOTENCY, 0, 0),
                        node_out()};
    assert_int_equal(lk__rl_combine_acquire(3, h, 10000, 5, &out), LK__RL_ANSWER);
    assert_int_equal(out.st, LK_EIDEMPOTENCY);
}

static void test_combine_raise(void **state)
{
    lk__rl_out out;
    lk__rl_node a[3] = {node_st(LK_ACQUIRED, 5, 0), node_st(LK_ACQUIRED, 9, 0),
                        node_st(LK_EUNAVAILABLE, 0, 0)};
    (void)state;

    assert_int_equal(lk__rl_combine_acquire(3, a, 10000, 10, &out), LK__RL_WRITE_BACK);
    /* Node 0 acknowledged a counter >= 9, node 1 too; node 2 did not answer. */
    int64_t ok[3] = {9, 12, -1};
    assert_int_equal(lk__rl_combine_raise(3, ok, 10000, 30, &out), LK__RL_ANSWER);
    assert_int_equal(out.st, LK_ACQUIRED);
    assert_int_equal(out.res.token, 9);
    assert_int_equal(out.res.ttl_ms, 10000 - 30 - 102); /* the validity at the end */

    /* One acknowledgement only: the grant does not stand. */
    assert_int_equal(lk__rl_combine_acquire(3, a, 10000, 10, &out), LK__RL_WRITE_BACK);
    int64_t few[3] = {9, -1, -1};
    assert_int_equal(lk__rl_combine_raise(3, few, 10000, 30, &out), LK__RL_UNDO);
    assert_int_equal(out.st, LK_EUNAVAILABLE);

    /* The write-back ate the validity. */
    assert_int_equal(lk__rl_combine_acquire(3, a, 10000, 10, &out), LK__RL_WRITE_BACK);
    assert_int_equal(lk__rl_combine_raise(3, ok, 10000, 9990, &out), LK__RL_UNDO);
    assert_int_equal(out.st, LK_EUNAVAILABLE);
}

static void test_combine_renew(void **state)
{
    lk__rl_out out;
    (void)state;

    lk__rl_node a[3] = {node_st(LK_RENEWED, 9, 5000), node_st(LK_RENEWED, 9, 5000),
                        node_st(LK_NOT_OWNER, 0, 0)};
    assert_int_equal(lk__rl_combine_renew(3, a, 5000, 20, &out), LK__RL_ANSWER);
    assert_int_equal(out.st, LK_RENEWED);
    assert_int_equal(out.res.token, 9);
    assert_int_equal(out.res.ttl_ms, 5000 - 20 - 52);

    /* Extended on a majority, but not within the validity: lost, free it everywhere. */
    assert_int_equal(lk__rl_combine_renew(3, a, 5000, 4990, &out), LK__RL_UNDO);
    assert_int_equal(out.st, LK_NOT_OWNER);

    /* Two NOT_OWNER of three: a majority can no longer have it. */
    lk__rl_node b[3] = {node_st(LK_RENEWED, 9, 5000), node_st(LK_NOT_OWNER, 0, 0),
                        node_st(LK_NOT_OWNER, 0, 0)};
    assert_int_equal(lk__rl_combine_renew(3, b, 5000, 20, &out), LK__RL_ANSWER);
    assert_int_equal(out.st, LK_NOT_OWNER);

    /* One renewed, one NOT_OWNER, one silent: cannot tell. */
    lk__rl_node c[3] = {node_st(LK_RENEWED, 9, 5000), node_st(LK_NOT_OWNER, 0, 0),
                        node_st(LK_EUNAVAILABLE, 0, 0)};
    assert_int_equal(lk__rl_combine_renew(3, c, 5000, 20, &out), LK__RL_ANSWER);
    assert_int_equal(out.st, LK_EUNAVAILABLE);
}

static void test_combine_release(void **state)
{
    lk__rl_out out;
    (void)state;

    /* Released on one, gone on another (expired there): released. */
    lk__rl_node a[3] = {node_st(LK_RELEASED, 0, 0), node_st(LK_NOT_OWNER, 0, 0),
                        node_st(LK_EUNAVAILABLE, 0, 0)};
    lk__rl_combine_release(3, a, &out);
    assert_int_equal(out.st, LK_RELEASED);

    lk__rl_node b[3] = {node_st(LK_NOT_OWNER, 0, 0), node_st(LK_NOT_OWNER, 0, 0),
                        node_st(LK_RELEASED, 0, 0)};
    lk__rl_combine_release(3, b, &out);
    assert_int_equal(out.st, LK_RELEASED);

    lk__rl_node c[3] = {node_st(LK_NOT_OWNER, 0, 0), node_st(LK_NOT_OWNER, 0, 0), node_out()};
    lk__rl_combine_release(3, c, &out);
    assert_int_equal(out.st, LK_NOT_OWNER);

    lk__rl_node d[3] = {node_st(LK_STILL_HELD, 0, 0), node_st(LK_STILL_HELD, 0, 0),
                        node_st(LK_EUNAVAILABLE, 0, 0)};
    d[1].res.holds = 2;
    lk__rl_combine_release(3, d, &out);
    assert_int_equal(out.st, LK_STILL_HELD);
    assert_int_equal(out.res.holds, 2);

    lk__rl_node e[3] = {node_st(LK_RELEASED, 0, 0), node_st(LK_EUNAVAILABLE, 0, 0),
                        node_st(LK_EUNAVAILABLE, 0, 0)};
    lk__rl_combine_release(3, e, &out);
    assert_int_equal(out.st, LK_EUNAVAILABLE);
}

/* A forced release: released where any master of an answering majority held it, with the
 * largest token held and the largest burned or last token of all that answered. */
static void test_combine_force_release(void **state)
{
    lk__rl_out out;
    (void)state;

    lk__rl_node a[3] = {node_st(LK_RELEASED, 7, 0), node_st(LK_RELEASED, 8, 0),
                        node_st(LK_NOT_OWNER, 0, 0)};
    a[0].res.fenced_by = 9;
    a[1].res.fenced_by = 10;
    a[2].res.fenced_by = 12; /* its counter: a later mint there, never written back */
    a[0].res.published = 1;
    lk__rl_combine_force_release(3, a, &out);
    assert_int_equal(out.st, LK_RELEASED);
    assert_int_equal(out.res.token, 8);
    assert_int_equal(out.res.fenced_by, 12);
    assert_int_equal(out.res.published, 1);

    lk__rl_node b[3] = {node_st(LK_NOT_OWNER, 0, 0), node_st(LK_NOT_OWNER, 0, 0), node_out()};
    b[1].res.fenced_by = 4;
    lk__rl_combine_force_release(3, b, &out);
    assert_int_equal(out.st, LK_NOT_OWNER);
    assert_int_equal(out.res.fenced_by, 4);
    assert_int_equal(out.res.token, 0);

    lk__rl_node c[3] = {node_st(LK_RELEASED, 7, 0), node_st(LK_EUNAVAILABLE, 0, 0),
                        node_out()};
    lk__rl_combine_force_release(3, c, &out);
    assert_int_equal(out.st, LK_EUNAVAILABLE);
}

static void test_combine_token_check(void **state)
{
    lk__rl_out out;
    (void)state;

    lk__rl_node a[3] = {node_st(LK_OK, 0, 0), node_st(LK_OK, 0, 0),
                        node_st(LK_EUNAVAILABLE, 0, 0)};
    a[0].base = 0;
    a[0].last = 12;
    a[1].base = 5; /* a node that lost its data and was lifted to the floor 5 */
    a[1].last = 7;
    a[1].recent = 1;
    lk__rl_combine_token_check(3, a, &out);
    assert_int_equal(out.st, LK_OK);
    assert_int_equal(out.base, 0);
    assert_int_equal(out.last, 12);
    assert_int_equal(out.recent, 1);

    a[1].st = LK_EUNAVAILABLE;
    lk__rl_combine_token_check(3, a, &out);
    assert_int_equal(out.st, LK_EUNAVAILABLE);
}

/* The delayed-restart state machine with a fake clock. */
/* A silent node is left alone 1 s after its first silence in a row, then 2, 4 and 8 s, never
 * longer; a silence of an attempt that started before the last news is older news (another
 * handle's batch); the first try after a wait is claimed for the node's timeout; the wait
 * does not grow while the node is needed for a majority; an answer ends the run. */
static void test_silent_node_backoff(void **state)
{
    lk__rl_health h;
    (void)state;

    lk__rl_health_init(&h);
    assert_true(lk__rl_health_try(&h, 0, 500));
    assert_true(lk__rl_health_try(&h, 0, 500)); /* no silence: nothing to claim */
    lk__rl_health_silent(&h, 9500, 10000, 0);
    assert_false(lk__rl_health_try(&h, 10999, 500));
    lk__rl_health_silent(&h, 9800, 10600, 0); /* sent before the silence: the same one */
    assert_true(lk__rl_health_try(&h, 11000, 500)); /* claimed until 11500 */
    assert_false(lk__rl_health_try(&h, 11499, 500));

    int64_t now = 11000;
    static const int64_t waits[] = {2000, 4000, 8000, 8000, 8000};
    for (size_t i = 0; i < sizeof waits / sizeof *waits; i++) {
        lk__rl_health_silent(&h, now, now + 500, 0); /* the claimed try fails */
        now += 500;
        assert_false(lk__rl_health_try(&h, now + waits[i] - 1, 500));
        assert_true(lk__rl_health_try(&h, now + waits[i], 500));
        now += waits[i];
    }

    /* Needed for a majority: tried again after the first wait, whatever the run. */
    lk__rl_health_silent(&h, now, now + 500, 1);
    now += 500;
    assert_true(lk__rl_health_try(&h, now + LK__RL_SILENT_RETRY_MS, 500));
    now += LK__RL_SILENT_RETRY_MS;

    lk__rl_health_answered(&h, now + 10);
    lk__rl_health_silent(&h, now, now + 20, 0); /* started before the answer: older news */
    assert_true(lk__rl_health_try(&h, now + 20, 500));
    lk__rl_health_silent(&h, now + 20, now + 520, 0);
    assert_false(lk__rl_health_try(&h, now + 520 + LK__RL_SILENT_RETRY_MS - 1, 500));
    assert_true(lk__rl_health_try(&h, now + 520 + LK__RL_SILENT_RETRY_MS, 500));
}

static void test_health_state_machine(void **state)
{
    const int64_t lease_ms = 30000, hold_ms = 30000 + 302;
    lk__rl_health h;
    (void)state;

    lk__rl_health_init(&h);
    assert_false(lk__rl_health_counts(&h)); /* UNKNOWN does not count */
    assert_int_equal(lk__rl_held_out_until(&h), 0);

    /* First sight without a marker: a new node. Write one, read it back: OK. */
    assert_int_equal(lk__rl_health_seen(&h, NULL, 1000, lease_ms), 1);
    assert_false(lk__rl_health_counts(&h));
    assert_int_equal(lk__rl_health_seen(&h, "aaaa", 1001, lease_ms), 0);
    assert_true(lk__rl_health_counts(&h));
    assert_int_equal(lk__rl_health_seen(&h, "aaaa", 2000, lease_ms), 0);
    assert_true(lk__rl_health_counts(&h));

    /* The marker is gone: held out for the longest lease and its drift. */
    assert_int_equal(lk__rl_health_seen(&h, NULL, 5000, lease_ms), 1);
    assert_false(lk__rl_health_counts(&h));
    assert_int_equal(lk__rl_held_out_until(&h), 5000 + hold_ms);
    assert_int_equal(lk__rl_health_seen(&h, "bbbb", 5001, lease_ms), 0);
    assert_false(lk__rl_health_counts(&h));
    assert_int_equal(lk__rl_health_seen(&h, "bbbb", 5000 + hold_ms - 1, lease_ms), 0);
    assert_false(lk__rl_health_counts(&h));
    /* Time's up and the marker is still ours: it counts again. */
    assert_int_equal(lk__rl_health_seen(&h, "bbbb", 5000 + hold_ms, lease_ms), 0);
    assert_true(lk__rl_health_counts(&h));
    assert_int_equal(lk__rl_held_out_until(&h), 0);

    /* Another gateway found the loss first and wrote "cccc": a changed id is a loss too. */
    assert_int_equal(lk__rl_health_seen(&h, "cccc", 90000, lease_ms), 0);
    assert_false(lk__rl_health_counts(&h));
    assert_int_equal(lk__rl_held_out_until(&h), 90000 + hold_ms);
    /* A second loss during the hold-out moves the end later, never earlier. */
    assert_int_equal(lk__rl_health_seen(&h, NULL, 95000, lease_ms), 1);
    assert_int_equal(lk__rl_held_out_until(&h), 95000 + hold_ms);
    assert_int_equal(lk__rl_health_seen(&h, "dddd", 95001, lease_ms), 0);
    assert_int_equal(lk__rl_health_seen(&h, "dddd", 90000 + hold_ms, lease_ms), 0);
    assert_false(lk__rl_health_counts(&h));
    assert_int_equal(lk__rl_health_seen(&h, "dddd", 95000 + hold_ms, lease_ms), 0);
    assert_true(lk__rl_health_counts(&h));
}

/* ---- The driver over real nodes ---------------------------------------------------------- */

#define LEASE_MS 10000
#define MAX_LEASE_MS 30000

typedef struct rl_fixture {
    th_redis_set set;
    lk__rl_health health[TH_MAX_NODES];
    char *acquire_lua, *release_lua, *raise_lua, *renew_lua, *range_lua;
    int64_t clock_ms; /* the fake monotonic clock the hold-outs run on */
} rl_fixture;

static char *read_script(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.lua", LOCKLIB_LUA_DIR, name);
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) {
        print_error("cannot open %s: build the locklib_lua target first\n", path);
        fail();
    }
    char *text = calloc(1, 65536);
    assert_non_null(text);
    size_t n = fread(text, 1, 65535, fp);
    fclose(fp);
    assert_true(n > 0);
    return text;
}

/* EVAL script on node i with the given keys of resource and arguments. Returns the reply
 * (the caller frees it), or NULL when the node is down. */
static redisReply *eval_on(const rl_fixture *f, int i, const char *script, const char *res,
                           int nkeys, const char *const *suffixes, int nargs,
                           const char *const *args)
{
    char keys[8][256], nkeys_s[8];
    const char *argv[16];
    size_t lens[16];
    struct timeval tv = {2, 0};
    int argc = 0;

    if (f->set.nodes[i].pid == 0) {
        return NULL;
    }
    redisContext *ctx = redisConnectWithTimeout("127.0.0.1", f->set.nodes[i].port, tv);
    if (ctx == NULL || ctx->err) {
        redisFree(ctx);
        return NULL;
    }
    redisSetTimeout(ctx, tv);
    snprintf(nkeys_s, sizeof nkeys_s, "%d", nkeys);
    argv[argc++] = "EVAL";
    argv[argc++] = script;
    argv[argc++] = nkeys_s;
    for (int k = 0; k < nkeys; k++) {
        snprintf(keys[k], sizeof keys[k], "fg:{%s}:%s", res, suffixes[k]);
        argv[argc++] = keys[k];
    }
    for (int k = 0; k < nargs; k++) {
        argv[argc++] = args[k];
    }
    for (int k = 0; k < argc; k++) {
        lens[k] = strlen(argv[k]);
    }
    redisReply *reply = redisCommandArgv(ctx, argc, argv, lens);
    redisFree(ctx);
    return reply;
}

/* Decodes acquire.lua's reply as calls.c does. */
static lk__rl_node decode_acquire(const redisReply *r)
{
    lk__rl_node n = node_st(LK_EUNAVAILABLE, 0, 0);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        n.st = r == NULL ? LK_EUNAVAILABLE : LK_EREDIS;
        return n;
    }
    if (lk__int_at(r, 0) == 1) {
        n = node_st(LK_ACQUIRED, lk__int_at(r, 1), lk__int_at(r, 3));
        n.res.holds = lk__int_at(r, 2);
        n.res.floor_raised = (int)lk__int_at(r, 4);
    } else if (lk__int_at(r, 0) == 0) {
        n = node_st(LK_HELD, 0, lk__int_at(r, 1));
    } else {
        n.st = LK_EIDEMPOTENCY;
    }
    return n;
}

/* Reads node i's marker and feeds its state machine, writing a marker when missing. */
static void check_marker(rl_fixture *f, int i)
{
    char seen[64] = "", fresh[33];

    if (f->set.nodes[i].pid == 0) {
        return; /* unreachable: no reading */
    }
    th_redis_cmd(&f->set.nodes[i], seen, sizeof seen, "GET %s", LK__RL_MARKER_KEY);
    if (lk__rl_health_seen(&f->health[i], seen[0] ? seen : NULL, f->clock_ms, MAX_LEASE_MS)) {
        lk_random_id(fresh);
        th_redis_cmd(&f->set.nodes[i], NULL, 0, "SET %s %s NX", LK__RL_MARKER_KEY, fresh);
        th_redis_cmd(&f->set.nodes[i], seen, sizeof seen, "GET %s", LK__RL_MARKER_KEY);
        assert_int_equal(lk__rl_health_seen(&f->health[i], seen, f->clock_ms, MAX_LEASE_MS), 0);
    }
}

/* Releases owner's lock on every node that is up (the undo, and the end of each grant). */
static void release_all(const rl_fixture *f, const char *res, const char *owner)
{
    static const char *const sfx[] = {"lock", "idem:"};
    char channel[256];
    snprintf(channel, sizeof channel, "fg:{%s}:released", res);
    const char *args[] = {owner, "0", channel};
    for (int i = 0; i < f->set.n; i++) {
        redisReply *r = eval_on(f, i, f->release_lua, res, 2, sfx, 3, args);
        if (r != NULL) {
            freeReplyObject(r);
        }
    }
}

/* One Redlock acquisition by owner as the transport will run it, into *out. reach[i] is 0
 * for a node the schedule partitions away (not asked at all); held-out nodes are not asked
 * either. write_back 0 is the planted naive variant. Asserts a grant. */
static void rl_acquire(rl_fixture *f, const char *res, const char *owner, const int *reach,
                       int write_back, lk__rl_out *out)
{
    static const char *const acq_sfx[] = {"lock", "fence", "idem:", "base", "recent"};
    static const char *const raise_sfx[] = {"fence", "base", "recent", "lock"};
    const char *acq_args[] = {owner, "10000", "0", "0", "0"};
    lk__rl_node nodes[TH_MAX_NODES];
    int64_t counter[TH_MAX_NODES];
    char token_s[24];
    int n = f->set.n;
    int64_t start_ms = th_now_ms();

    for (int i = 0; i < n; i++) {
        check_marker(f, i);
        if (!lk__rl_health_counts(&f->health[i]) || !reach[i]) {
            nodes[i] = node_out();
            continue;
        }
        redisReply *r = eval_on(f, i, f->acquire_lua, res, 5, acq_sfx, 5, acq_args);
        nodes[i] = decode_acquire(r);
        if (r != NULL) {
            freeReplyObject(r);
        }
    }
    lk__rl_next next = lk__rl_combine_acquire(n, nodes, LEASE_MS, th_now_ms() - start_ms, out);
    if (next != LK__RL_WRITE_BACK) {
        print_error("acquire not granted: %s (%s)\n", lk_status_name(out->st), out->err);
        fail();
    }
    if (write_back) {
        snprintf(token_s, sizeof token_s, "%lld", (long long)out->res.token);
        const char *raise_args[] = {token_s, owner};
        for (int i = 0; i < n; i++) {
            counter[i] = -1;
            if (!reach[i] || !lk__rl_health_counts(&f->health[i])) {
                continue;
            }
            redisReply *r = eval_on(f, i, f->raise_lua, res, 4, raise_sfx, 2, raise_args);
            if (r != NULL && r->type == REDIS_REPLY_ARRAY) {
                counter[i] = lk__int_at(r, 0);
            }
            if (r != NULL) {
                freeReplyObject(r);
            }
        }
        next = lk__rl_combine_raise(n, counter, LEASE_MS, th_now_ms() - start_ms, out);
        assert_int_equal(next, LK__RL_ANSWER);
    }
    assert_int_equal(out->st, LK_ACQUIRED);
    assert_true(out->res.ttl_ms > 0 && out->res.ttl_ms < LEASE_MS);
}

/* A grant of the schedule: rl_acquire(), then the lock is released on every node so the
 * next grant can take it. Returns the granted token. */
static int64_t rl_grant(rl_fixture *f, const char *res, const int *reach, int write_back)
{
    lk__rl_out out;
    rl_acquire(f, res, "rl-owner", reach, write_back, &out);
    release_all(f, res, "rl-owner");
    return out.res.token;
}

/* Asks the nodes with reach[i] (and counting) one owner call: RENEW (renew.lua), RELEASE
 * (release.lua) or TOKEN_CHECK (token_range.lua for token), decoded as calls.c does, into
 * nodes[]. The others are held out. */
static void rl_ask(rl_fixture *f, lk_call_kind kind, const char *res, const char *owner,
                   int64_t token, const int *reach, lk__rl_node *nodes)
{
    static const char *const owner_sfx[] = {"lock", "idem:"};
    static const char *const renew_sfx[] = {"lock", "idem:", "fence", "base", "recent"};
    static const char *const range_sfx[] = {"fence", "base", "recent"};
    char channel[256], token_s[24];
    snprintf(channel, sizeof channel, "fg:{%s}:released", res);
    snprintf(token_s, sizeof token_s, "%lld", (long long)token);
    const char *renew_args[] = {owner, "10000", "0", "0"};
    const char *release_args[] = {owner, "0", channel};
    const char *range_args[] = {token_s};

    for (int i = 0; i < f->set.n; i++) {
        redisReply *r = NULL;
        nodes[i] = node_out();
        if (!reach[i] || !lk__rl_health_counts(&f->health[i])) {
            continue;
        }
        if (kind == LK_CALL_RENEW) {
            r = eval_on(f, i, f->renew_lua, res, 5, renew_sfx, 4, renew_args);
        } else if (kind == LK_CALL_RELEASE) {
            r = eval_on(f, i, f->release_lua, res, 2, owner_sfx, 3, release_args);
        } else {
            r = eval_on(f, i, f->range_lua, res, 3, range_sfx, 1, range_args);
        }
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        long long code = lk__int_at(r, 0);
        if (kind == LK_CALL_RENEW) {
            nodes[i] = node_st(code == 1 ? LK_RENEWED : LK_NOT_OWNER, lk__int_at(r, 1),
                               lk__int_at(r, 3));
        } else if (kind == LK_CALL_RELEASE) {
            nodes[i] = node_st(code == 1 ? LK_RELEASED : code == 2 ? LK_STILL_HELD
                                                                    : LK_NOT_OWNER, 0, 0);
            nodes[i].res.holds = lk__int_at(r, 1);
        } else {
            nodes[i] = node_st(LK_OK, 0, 0);
            nodes[i].base = lk__int_at(r, 0);
            nodes[i].last = lk__int_at(r, 1);
            nodes[i].recent = token > 0 && lk__int_at(r, 2) == 1;
        }
        freeReplyObject(r);
    }
}

static int group_setup_n(void **state, int n)
{
    rl_fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    th_redis_set_start(&f->set, n, NULL);
    for (int i = 0; i < n; i++) {
        lk__rl_health_init(&f->health[i]);
    }
    f->acquire_lua = read_script("acquire");
    f->release_lua = read_script("release");
    f->raise_lua = read_script("fence_raise");
    f->renew_lua = read_script("renew");
    f->range_lua = read_script("token_range");
    f->clock_ms = 1000;
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
    th_redis_set_stop(&f->set);
    free(f->acquire_lua);
    free(f->release_lua);
    free(f->raise_lua);
    free(f->renew_lua);
    free(f->range_lua);
    free(f);
    return 0;
}

/* Loses node i's data: SIGKILL, AOF and RDB wiped, restarted empty. */
static void lose_data(rl_fixture *f, int i)
{
    th_redis_kill(&f->set.nodes[i]);
    th_redis_wipe_files(&f->set.nodes[i]);
    th_redis_restart(&f->set.nodes[i]);
}

/* The schedule of the file head: a minority loses its data between two grants. */
static void test_minority_data_loss_token_still_grows(void **state)
{
    rl_fixture *f = *state;
    int n = f->set.n, fmax = n / 2;
    int reach1[TH_MAX_NODES] = {0}, reach2[TH_MAX_NODES] = {0}, all[TH_MAX_NODES];
    char fenced[64], naive[64];
    int64_t t1, t2, t3, n1, n2, n3;

    snprintf(fenced, sizeof fenced, "%s", res_name("fenced"));
    snprintf(naive, sizeof naive, "%s", res_name("naive"));
    for (int i = 0; i < n; i++) {
        reach1[i] = i <= fmax;           /* g1: nodes 0 .. f */
        reach2[i] = i == 0 || i > fmax;  /* g2: node 0 and nodes f+1 .. 2f */
        all[i] = 1;
    }
    t1 = rl_grant(f, fenced, reach1, 1);
    n1 = rl_grant(f, naive, reach1, 0);
    t2 = rl_grant(f, fenced, reach2, 1);
    n2 = rl_grant(f, naive, reach2, 0);
    assert_true(t2 > t1);
    assert_true(n2 > n1);

    /* A minority loses its data: node 0 (3 nodes), nodes 0 and f+1 (5 nodes). */
    lose_data(f, 0);
    if (fmax >= 2) {
        lose_data(f, fmax + 1);
    }
    f->clock_ms += 10;
    t3 = rl_grant(f, fenced, all, 1);
    n3 = rl_grant(f, naive, all, 0);
    /* The lost nodes were found by their markers and held out. */
    assert_false(lk__rl_health_counts(&f->health[0]));
    assert_int_equal(lk__rl_held_out_until(&f->health[0]), f->clock_ms + MAX_LEASE_MS + 302);

    print_message("N=%d fenced: %lld %lld %lld; naive: %lld %lld %lld\n", n, (long long)t1,
                  (long long)t2, (long long)t3, (long long)n1, (long long)n2, (long long)n3);
    /* With the write-back the token still grows. */
    assert_true(t3 > t2);
    /* The planted naive variant: the token went back (did not grow) in this schedule, so
     * the write-back is what makes the difference. */
    assert_true(n3 <= n2);

    /* After the hold-out the lost nodes count again, with the written-back counters
     * minted above again: the next grant still grows. */
    f->clock_ms += MAX_LEASE_MS + 302;
    int64_t t4 = rl_grant(f, fenced, all, 1);
    assert_true(lk__rl_health_counts(&f->health[0]));
    assert_true(t4 > t3);
}

/* One node minted far more in the past than the others: the grant's token is its token,
 * and after the write-back every call of the holder reports that token, from any majority:
 * a reentrant acquisition, a renewal, a token check; then two releases free it. */
static void test_holder_calls_report_the_grant_token(void **state)
{
    rl_fixture *f = *state;
    int n = f->set.n, q = lk__rl_quorum(n);
    int all[TH_MAX_NODES], tail[TH_MAX_NODES];
    const char *res = res_name("holder");
    char fence[128];
    lk__rl_node nodes[TH_MAX_NODES];
    lk__rl_out out, again;

    for (int i = 0; i < n; i++) {
        all[i] = 1;
        tail[i] = i >= n - q; /* the last q nodes: a majority without node 0 */
    }
    snprintf(fence, sizeof fence, "fg:{%s}:fence", res);
    th_redis_cmd(&f->set.nodes[0], NULL, 0, "SET %s 40", fence);
    rl_acquire(f, res, "holder", all, 1, &out);
    assert_int_equal(out.res.token, 41);

    /* Reentry from a majority that lacks node 0, the only node that minted 41. */
    rl_acquire(f, res, "holder", tail, 1, &again);
    assert_int_equal(again.res.token, 41);
    assert_int_equal(again.res.holds, 2);

    rl_ask(f, LK_CALL_RENEW, res, "holder", 0, tail, nodes);
    assert_int_equal(lk__rl_combine_renew(n, nodes, LEASE_MS, 1, &out), LK__RL_ANSWER);
    assert_int_equal(out.st, LK_RENEWED);
    assert_int_equal(out.res.token, 41);

    rl_ask(f, LK_CALL_TOKEN_CHECK, res, NULL, 41, tail, nodes);
    lk__rl_combine_token_check(n, nodes, &out);
    assert_int_equal(out.st, LK_OK);
    assert_true(out.base < 41 && out.last >= 41);
    assert_int_equal(out.recent, 1);

    /* Another owner is refused on every node: HELD, and its grants (none) undone. */
    static const char *const acq_sfx[] = {"lock", "fence", "idem:", "base", "recent"};
    const char *other[] = {"other", "10000", "0", "0", "0"};
    for (int i = 0; i < n; i++) {
        redisReply *r = eval_on(f, i, f->acquire_lua, res, 5, acq_sfx, 5, other);
        nodes[i] = decode_acquire(r);
        freeReplyObject(r);
    }
    assert_int_equal(lk__rl_combine_acquire(n, nodes, LEASE_MS, 1, &out), LK__RL_UNDO);
    assert_int_equal(out.st, LK_HELD);
    assert_true(out.res.ttl_ms > 0);

    rl_ask(f, LK_CALL_RELEASE, res, "holder", 0, all, nodes);
    lk__rl_combine_release(n, nodes, &out);
    assert_int_equal(out.st, LK_STILL_HELD);
    rl_ask(f, LK_CALL_RELEASE, res, "holder", 0, all, nodes);
    lk__rl_combine_release(n, nodes, &out);
    assert_int_equal(out.st, LK_RELEASED);
}

/* A node restarted with its data (AOF) keeps its marker and counts again at once. */
static void test_clean_restart_not_held_out(void **state)
{
    rl_fixture *f = *state;
    int all[TH_MAX_NODES];
    const char *res = res_name("clean");
    int last = f->set.n - 1;

    for (int i = 0; i < f->set.n; i++) {
        all[i] = 1;
    }
    int64_t t1 = rl_grant(f, res, all, 1);
    assert_true(lk__rl_health_counts(&f->health[last]));
    th_redis_kill(&f->set.nodes[last]);
    th_redis_restart(&f->set.nodes[last]);
    int64_t t2 = rl_grant(f, res, all, 1);
    assert_true(lk__rl_health_counts(&f->health[last]));
    assert_true(t2 > t1);
}

/* fence_raise.lua on one node: set-if-greater, base kept, recent and #token updated. */
static void test_fence_raise_script(void **state)
{
    static const char *const sfx[] = {"fence", "base", "recent", "lock"};
    rl_fixture *f = *state;
    const char *res = res_name("raise");
    const th_redis *node = &f->set.nodes[1];
    char key[128], out[64];

    snprintf(key, sizeof key, "fg:{%s}:fence", res);
    th_redis_cmd(node, NULL, 0, "SET %s 10", key);
    snprintf(key, sizeof key, "fg:{%s}:base", res);
    th_redis_cmd(node, NULL, 0, "SET %s 4", key);
    snprintf(key, sizeof key, "fg:{%s}:lock", res);
    th_redis_cmd(node, NULL, 0, "HSET %s #token 10 alice 1", key);

    const char *up[] = {"17", "alice"};
    redisReply *r = eval_on(f, 1, f->raise_lua, res, 4, sfx, 2, up);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(lk__int_at(r, 0), 17);
    freeReplyObject(r);
    th_redis_cmd(node, out, sizeof out, "HGET %s #token", key);
    assert_string_equal(out, "17");

    /* Lower: the counter never goes down, the answer still acknowledges >= T. */
    const char *down[] = {"12", ""};
    r = eval_on(f, 1, f->raise_lua, res, 4, sfx, 2, down);
    assert_int_equal(lk__int_at(r, 0), 17);
    freeReplyObject(r);
    snprintf(key, sizeof key, "fg:{%s}:base", res);
    th_redis_cmd(node, out, sizeof out, "GET %s", key);
    assert_string_equal(out, "4");
    snprintf(key, sizeof key, "fg:{%s}:recent", res);
    th_redis_cmd(node, out, sizeof out, "LINDEX %s 0", key);
    assert_string_equal(out, "12");

    const char *bad[] = {"1.5", ""};
    r = eval_on(f, 1, f->raise_lua, res, 4, sfx, 2, bad);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_non_null(strstr(r->str, "invalid argument"));
    freeReplyObject(r);
}

int main(void)
{
    const struct CMUnitTest pure[] = {
        cmocka_unit_test(test_validity_and_drift),
        cmocka_unit_test(test_combine_acquire),
        cmocka_unit_test(test_combine_raise),
        cmocka_unit_test(test_combine_renew),
        cmocka_unit_test(test_combine_release),
        cmocka_unit_test(test_combine_force_release),
        cmocka_unit_test(test_combine_token_check),
        cmocka_unit_test(test_health_state_machine),
    };
    const struct CMUnitTest nodes[] = {
        cmocka_unit_test(test_fence_raise_script),
        cmocka_unit_test(test_minority_data_loss_token_still_grows),
        cmocka_unit_test(test_holder_calls_report_the_grant_token),
        cmocka_unit_test(test_clean_restart_not_held_out),
        cmocka_unit_test(test_silent_node_backoff),
    };
    int failed = cmocka_run_group_tests_name("redlock_pure", pure, NULL, NULL);
    failed += cmocka_run_group_tests_name("redlock_3_nodes", nodes, group_setup_3,
                                          group_teardown);
    failed += cmocka_run_group_tests_name("redlock_5_nodes", nodes, group_setup_5,
                                          group_teardown);
    return failed;
}
