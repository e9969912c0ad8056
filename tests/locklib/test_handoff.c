/* locklib: hand-offs (lua/prelude/handoff.lua): a release that frees a lock hands it to the
 * next queued waiter in the same script, one grant per release; against a real redis-server
 * started by the group setup. */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "lk_test.h"

static int group_setup(void **state)
{
    return lk_group_setup_aof(state, 0);
}

/* One call through lk_call_many; returns its status. */
static lk_status run(lk_fixture *f, lk_call *call)
{
    lk_call *calls[1] = {call};
    lk_call_many(f->c, calls, 1);
    return call->status;
}

/* A waiting attempt with a hand-off id: non-fair unless fair. */
static lk_status attempt(lk_fixture *f, const char *res, const char *owner, const char *id,
                         int fair, const char *idem, int64_t wait_ms, lk_result *out)
{
    lk_call call = {.kind = fair ? LK_CALL_ACQUIRE_FAIR : LK_CALL_ACQUIRE,
                    .resource = res,
                    .owner = owner,
                    .idem_key = idem,
                    .lease_ms = 10000,
                    .wait_ms = wait_ms,
                    .handoff_id = id};
    lk_status st = run(f, &call);
    *out = call.res;
    return st;
}

/* A release that hands off, with the floor given. */
static lk_status release_handing(lk_fixture *f, const char *res, const char *owner,
                                 int64_t floor, lk_result *out)
{
    lk_call call = {.kind = LK_CALL_RELEASE, .resource = res, .owner = owner, .handoff = 1,
                    .floor = floor};
    lk_status st = run(f, &call);
    *out = call.res;
    return st;
}

static long long fence_of(const lk_fixture *f, const char *res)
{
    char buf[32] = "";
    th_redis_cmd(&f->redis, buf, sizeof buf, "GET fg:{%s}:fence", res);
    return atoll(buf);
}

/* The owner field of the lock hash: its hold count, 0 when the owner holds nothing. */
static long long holds_of(const lk_fixture *f, const char *res, const char *owner)
{
    char buf[32] = "";
    th_redis_cmd(&f->redis, buf, sizeof buf, "HGET fg:{%s}:lock %s", res, owner);
    return atoll(buf);
}

/* A release with one waiter parked grants it in the same script: one token minted, the
 * grant recorded (the waiter holds the lock, its idempotency record answers the token) and
 * published; the waiter's next attempt claims it, and only once. */
static void test_release_grants_waiter(void **state)
{
    lk_fixture *f = *state;
    lk_result r, g;
    const char *res = res_name("grant");
    char channel[256];
    char want[64];

    assert_lk(f->c, lk_channel_name(res, channel, sizeof channel), LK_OK);
    assert_lk(f->c, lk_acquire(f->c, res, "A", 10000, 0, NULL, &r), LK_ACQUIRED);
    int64_t first = r.token;
    assert_lk(f->c, attempt(f, res, "B", "b1", 0, "kb", 60000, &r), LK_HELD);
    assert_int_equal(r.holder_token, first);

    redisContext *sub = connect_plain(f);
    freeReplyObject(redisCommand(sub, "SUBSCRIBE %s", channel));
    assert_lk(f->c, release_handing(f, res, "A", 0, &g), LK_RELEASED);
    assert_int_equal(g.handed_token, first + 1);
    assert_string_equal(g.handed_id, "b1");
    assert_int_equal(g.published, 1);
    assert_int_equal(fence_of(f, res), first + 1); /* one token minted */
    assert_int_equal(holds_of(f, res, "B"), 1);
    assert_int_equal(holds_of(f, res, "A"), 0);
    snprintf(want, sizeof want, "g:%lld:b1", (long long)(first + 1));
    lk_expect_message(sub, channel, want);
    redisFree(sub);

    /* The waiter claims it: the same token, one hold. */
    assert_lk(f->c, attempt(f, res, "B", "b1", 0, "kb", 60000, &r), LK_ACQUIRED);
    assert_int_equal(r.token, first + 1);
    assert_int_equal(r.holds, 1);
    assert_int_equal(r.handed, 1);
    assert_int_equal(fence_of(f, res), first + 1);
    /* A retry of its key replays the grant, minting nothing. */
    assert_lk(f->c, lk_acquire(f->c, res, "B", 10000, 0, "kb", &r), LK_ACQUIRED);
    assert_int_equal(r.token, first + 1);
    assert_int_equal(r.replayed, 1);
    /* A second attempt with the id answers the same grant, as a replay; without the id the
     * owner re-enters. */
    assert_lk(f->c, attempt(f, res, "B", "b1", 0, NULL, 60000, &r), LK_ACQUIRED);
    assert_int_equal(r.token, first + 1);
    assert_int_equal(r.holds, 1);
    assert_int_equal(r.handed, 1);
    assert_lk(f->c, lk_acquire(f->c, res, "B", 10000, 0, NULL, &r), LK_ACQUIRED);
    assert_int_equal(r.holds, 2);
    assert_int_equal(r.handed, 0);
    assert_lk(f->c, lk_release(f->c, res, "B", NULL, &r), LK_STILL_HELD);
    /* Nobody waits: the release hands nothing and publishes nothing. */
    assert_lk(f->c, release_handing(f, res, "B", 0, &g), LK_RELEASED);
    assert_int_equal(g.handed_token, 0);
    assert_string_equal(g.handed_id, "");
    assert_int_equal(g.published, 0);
    assert_int_equal(fence_of(f, res), first + 1);
}

/* K non-fair waiters: each release grants exactly one of them, in arrival order; the others
 * stay queued. */
static void test_no_herd(void **state)
{
    lk_fixture *f = *state;
    lk_result r, g;
    const char *res = res_name("herd");
    const char *owners[] = {"W0", "W1", "W2", "W3", "W4"};
    const char *ids[] = {"a0", "a1", "a2", "a3", "a4"};
    char len[16];

    assert_lk(f->c, lk_acquire(f->c, res, "H", 10000, 0, NULL, &r), LK_ACQUIRED);
    int64_t token = r.token;
    for (int i = 0; i < 5; i++) {
        assert_lk(f->c, attempt(f, res, owners[i], ids[i], 0, NULL, 60000, &r), LK_HELD);
    }
    /* Asking again keeps one's place. */
    assert_lk(f->c, attempt(f, res, owners[2], ids[2], 0, NULL, 60000, &r), LK_HELD);
    const char *holder = "H";
    for (int i = 0; i < 5; i++) {
        assert_lk(f->c, release_handing(f, res, holder, 0, &g), LK_RELEASED);
        assert_int_equal(g.handed_token, token + 1);
        assert_string_equal(g.handed_id, ids[i]);
        assert_int_equal(fence_of(f, res), token + 1);
        for (int j = 0; j < 5; j++) {
            assert_int_equal(holds_of(f, res, owners[j]), j == i);
        }
        assert_int_equal(th_redis_cmd(&f->redis, len, sizeof len, "LLEN fg:{%s}:wq", res),
                         4 - i);
        assert_lk(f->c, attempt(f, res, owners[i], ids[i], 0, NULL, 60000, &r), LK_ACQUIRED);
        assert_int_equal(r.handed, 1);
        assert_int_equal(r.token, token + 1);
        token++;
        holder = owners[i];
    }
    assert_lk(f->c, release_handing(f, res, holder, 0, &g), LK_RELEASED);
    assert_int_equal(g.handed_token, 0);
}

/* Fair waiters are handed the lock in their queue order, and the floor applies to a grant. */
static void test_fair_order_and_floor(void **state)
{
    lk_fixture *f = *state;
    lk_result r, g;
    const char *res = res_name("fair");
    const char *owners[] = {"B", "C", "D"};
    const char *ids[] = {"b", "c", "d"};

    assert_lk(f->c, lk_acquire_fair(f->c, res, "A", 10000, 0, NULL, 10000, &r), LK_ACQUIRED);
    for (int i = 0; i < 3; i++) {
        assert_lk(f->c, attempt(f, res, owners[i], ids[i], 1, NULL, 60000, &r), LK_HELD);
        assert_int_equal(r.queue_pos, i);
    }
    const char *holder = "A";
    int64_t floor = 1000;
    for (int i = 0; i < 3; i++) {
        assert_lk(f->c, release_handing(f, res, holder, floor, &g), LK_RELEASED);
        assert_string_equal(g.handed_id, ids[i]);
        assert_true(g.handed_token > floor);
        /* Another waiter asking now is not first: held, still in line. */
        if (i < 2) {
            assert_lk(f->c, attempt(f, res, owners[2], ids[2], 1, NULL, 60000, &r), LK_HELD);
        }
        assert_lk(f->c, attempt(f, res, owners[i], ids[i], 1, NULL, 60000, &r), LK_ACQUIRED);
        assert_int_equal(r.handed, 1);
        assert_int_equal(r.token, g.handed_token);
        holder = owners[i];
        floor = g.handed_token + 10;
    }
    assert_lk(f->c, release_handing(f, res, holder, 0, &g), LK_RELEASED);
    assert_int_equal(g.handed_token, 0);
}

/* Waiters that have gone: one past its deadline is skipped; one that leaves after its grant
 * learns the token, gives the hold back, which hands the lock on with a larger token, and
 * can no longer claim the grant; the given-back token is superseded for every writer. */
static void test_gone_waiter(void **state)
{
    lk_fixture *f = *state;
    lk_result r, g;
    const char *res = res_name("gone");
    char buf[32];

    assert_lk(f->c, lk_acquire(f->c, res, "A", 10000, 0, NULL, &r), LK_ACQUIRED);
    /* X waits 1 ms only; Y and Z wait long. */
    assert_lk(f->c, attempt(f, res, "X", "e1", 0, NULL, 1, &r), LK_HELD);
    assert_lk(f->c, attempt(f, res, "Y", "e2", 0, NULL, 60000, &r), LK_HELD);
    assert_lk(f->c, attempt(f, res, "Z", "e3", 0, NULL, 60000, &r), LK_HELD);
    /* Until Redis's clock is past X's deadline. */
    th_redis_cmd(&f->redis, buf, sizeof buf, "ZSCORE fg:{%s}:wqt e1", res);
    long long deadline = atoll(buf);
    for (;;) {
        redisContext *ctx = connect_plain(f);
        redisReply *t = redisCommand(ctx, "TIME");
        long long now = atoll(t->element[0]->str) * 1000 + atoll(t->element[1]->str) / 1000;
        freeReplyObject(t);
        redisFree(ctx);
        if (now > deadline) {
            break;
        }
    }
    assert_lk(f->c, release_handing(f, res, "A", 0, &g), LK_RELEASED);
    assert_string_equal(g.handed_id, "e2");
    int64_t given = g.handed_token;
    assert_int_equal(holds_of(f, res, "X"), 0);

    /* Y leaves without claiming: told its grant, it gives it back, and Z gets the lock. */
    lk_call cancel = {.kind = LK_CALL_FAIR_CANCEL, .resource = res, .owner = "Y",
                      .handoff_id = "e2"};
    assert_lk(f->c, run(f, &cancel), LK_OK);
    assert_int_equal(cancel.res.handed_token, given);
    assert_lk(f->c, release_handing(f, res, "Y", 0, &g), LK_RELEASED);
    assert_string_equal(g.handed_id, "e3");
    assert_true(g.handed_token > given);
    /* Y's token is no longer the last issued: a writer holding it is superseded. */
    int64_t base = 0, last = 0;
    assert_lk(f->c, lk_token_range(f->c, res, &base, &last), LK_OK);
    assert_int_equal(last, g.handed_token);
    assert_true(given < last);
    /* Y's id claims nothing now: Z holds the lock. */
    assert_lk(f->c, attempt(f, res, "Y", "e2", 0, NULL, 60000, &r), LK_HELD);
    assert_int_equal(r.holder_token, g.handed_token);
    assert_lk(f->c, attempt(f, res, "Z", "e3", 0, NULL, 60000, &r), LK_ACQUIRED);
    assert_int_equal(r.handed, 1);
    assert_int_equal(r.token, g.handed_token);
}

/* A grant to a waiter whose process died ends with its lease: nobody else can take the
 * lock before, and the next grant's token is larger. */
static void test_grant_expires_with_lease(void **state)
{
    lk_fixture *f = *state;
    lk_result r, g;
    const char *res = res_name("expire");

    assert_lk(f->c, lk_acquire(f->c, res, "A", 10000, 0, NULL, &r), LK_ACQUIRED);
    lk_call call = {.kind = LK_CALL_ACQUIRE, .resource = res, .owner = "dead", .lease_ms = 200,
                    .wait_ms = 60000, .handoff_id = "dd"};
    assert_lk(f->c, run(f, &call), LK_HELD);
    assert_lk(f->c, release_handing(f, res, "A", 0, &g), LK_RELEASED);
    assert_string_equal(g.handed_id, "dd");
    assert_lk(f->c, lk_acquire(f->c, res, "other", 10000, 0, NULL, &r), LK_HELD);
    assert_int_equal(r.holder_token, g.handed_token);
    while (lk_acquire(f->c, res, "other", 10000, 0, NULL, &r) == LK_HELD) {
        assert_true(r.ttl_ms <= 200);
    }
    assert_int_equal(r.token, g.handed_token + 1);
}

struct grant_seen {
    lk_sub *sub;
    int events;
    int64_t token;
    int64_t released;
    char id[17];
};

static void on_grant(const char *resource, int event, void *userdata)
{
    struct grant_seen *g = userdata;
    (void)resource;
    if (event == LK_SUB_RELEASED) {
        g->events++;
        g->token = lk_sub_event_grant(g->sub, g->id);
        g->released = lk_sub_event_token(g->sub);
    }
}

/* A subscriber reports a hand-off with the grant's token and the waiter's id. */
static void test_sub_reports_grant(void **state)
{
    lk_fixture *f = *state;
    lk_result r, g;
    const char *res = res_name("subgrant");
    struct grant_seen seen;
    lk_sub *sub = NULL;

    memset(&seen, 0, sizeof seen);
    assert_int_equal(lk_sub_open(&sub, f->redis.url, NULL), LK_OK);
    seen.sub = sub;
    assert_int_equal(lk_sub_add(sub, res), LK_OK);
    assert_lk(f->c, lk_acquire(f->c, res, "A", 10000, 0, NULL, &r), LK_ACQUIRED);
    assert_lk(f->c, attempt(f, res, "B", "0bad", 0, NULL, 60000, &r), LK_HELD);
    /* Subscribed (the confirmation is read) before the release. */
    for (int got = 0; !got;) {
        struct pollfd p = {lk_sub_fd(sub), POLLIN, 0};
        assert_true(poll(&p, 1, 5000) > 0);
        assert_int_equal(lk_sub_dispatch(sub, on_grant, &seen), LK_OK);
        got = lk_sub_fd(sub) >= 0;
    }
    assert_lk(f->c, release_handing(f, res, "A", 0, &g), LK_RELEASED);
    while (seen.events == 0) {
        struct pollfd p = {lk_sub_fd(sub), POLLIN, 0};
        assert_true(poll(&p, 1, 5000) > 0);
        assert_int_equal(lk_sub_dispatch(sub, on_grant, &seen), LK_OK);
    }
    assert_int_equal(seen.token, g.handed_token);
    assert_string_equal(seen.id, "0bad");
    assert_int_equal(seen.released, 0);
    lk_sub_close(sub);
}

/* A waiter answered by a replay of its Idempotency-Key leaves the hand-off keys: no later
 * release grants a hold to a request that was answered already. */
static void test_replay_leaves_the_queue(void **state)
{
    lk_fixture *f = *state;
    lk_result r, g;
    const char *res = res_name("replay");
    char len[16];

    assert_lk(f->c, lk_acquire(f->c, res, "B", 10000, 0, "kr", &r), LK_ACQUIRED);
    int64_t token = r.token;
    assert_lk(f->c, lk_release(f->c, res, "B", NULL, &r), LK_RELEASED);
    assert_lk(f->c, lk_acquire(f->c, res, "A", 10000, 0, NULL, &r), LK_ACQUIRED);
    assert_lk(f->c, attempt(f, res, "B", "b9", 0, NULL, 60000, &r), LK_HELD);
    assert_int_equal(th_redis_cmd(&f->redis, len, sizeof len, "LLEN fg:{%s}:wq", res), 1);
    assert_lk(f->c, attempt(f, res, "B", "b9", 0, "kr", 60000, &r), LK_ACQUIRED);
    assert_int_equal(r.replayed, 1);
    assert_int_equal(r.token, token);
    assert_int_equal(th_redis_cmd(&f->redis, len, sizeof len, "LLEN fg:{%s}:wq", res), 0);
    assert_lk(f->c, release_handing(f, res, "A", 0, &g), LK_RELEASED);
    assert_int_equal(g.handed_token, 0);
}

/* A claim writes nothing, so it waits for no fsync; a caller that WAITs for replicas
 * (min_replicas) makes it write, so that its WAIT covers the grant, and with too few
 * replicas (the fixture has none) the claimed hold is undone as any acquisition's. */
static void test_claim_writes_only_before_a_wait(void **state)
{
    lk_fixture *f = *state;
    lk_result r, g;
    lk_lock_info info;
    const char *res = res_name("claimwait");

    assert_lk(f->c, lk_acquire(f->c, res, "A", 10000, 0, NULL, &r), LK_ACQUIRED);
    assert_lk(f->c, attempt(f, res, "B", "cc", 0, NULL, 60000, &r), LK_HELD);
    assert_lk(f->c, release_handing(f, res, "A", 0, &g), LK_RELEASED);
    long long before = hset_calls(&f->redis);
    assert_lk(f->c, attempt(f, res, "B", "cc", 0, NULL, 60000, &r), LK_ACQUIRED);
    assert_int_equal(r.handed, 1);
    assert_int_equal(hset_calls(&f->redis), before);

    lk_client *c = open_with_replicas(f);
    lk_call call = {.kind = LK_CALL_ACQUIRE, .resource = res, .owner = "B", .lease_ms = 10000,
                    .wait_ms = 60000, .handoff_id = "cc"};
    lk_call *calls[1] = {&call};
    lk_call_many(c, calls, 1);
    assert_lk(c, call.status, LK_EREPLICAS);
    assert_true(hset_calls(&f->redis) > before);
    assert_lk(f->c, lk_lock_status(f->c, res, &info), LK_OK);
    assert_int_equal(info.locked, 0);
    lk_client_close(c);
}

/* A release with the caller's waiter (handoff_to): nobody queued, so the freed lock is
 * granted to it in the same script, above the floor, published only when the lock was
 * marked wanted; that waiter's attempt claims it (holds 1), marking the grant wanted when
 * others wait in the caller. A queued waiter comes first. */
static void test_release_grants_the_callers_waiter(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    const char *res = res_name("direct");

    assert_lk(f->c, lk_acquire(f->c, res, "A", 10000, 0, NULL, &r), LK_ACQUIRED);
    int64_t first = r.token;
    lk_call rel = {.kind = LK_CALL_RELEASE, .resource = res, .owner = "A", .handoff = 1,
                   .floor = first + 10, .handoff_to = "B", .handoff_id = "b7",
                   .lease_ms = 5000};
    assert_lk(f->c, run(f, &rel), LK_RELEASED);
    assert_int_equal(rel.res.handed_token, first + 11); /* above the floor */
    assert_string_equal(rel.res.handed_id, "b7");
    assert_int_equal(rel.res.published, 0); /* nobody had asked */
    assert_int_equal(holds_of(f, res, "B"), 1);
    lk_call claim = {.kind = LK_CALL_ACQUIRE, .resource = res, .owner = "B",
                     .lease_ms = 5000, .wait_ms = 1000, .handoff_id = "b7",
                     .others_waiting = 1};
    assert_lk(f->c, run(f, &claim), LK_ACQUIRED);
    assert_int_equal(claim.res.token, first + 11);
    assert_int_equal(claim.res.holds, 1);
    assert_int_equal(claim.res.handed, 1);
    assert_true(claim.res.ttl_ms > 0 && claim.res.ttl_ms <= 5000);
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "HEXISTS fg:{%s}:lock #wait", res), 1);

    /* A claim that finds no grant (wait 1 ms) queues nothing. */
    lk_call d = {.kind = LK_CALL_ACQUIRE, .resource = res, .owner = "D", .lease_ms = 5000,
                 .wait_ms = 1, .handoff_id = "d7"};
    assert_lk(f->c, run(f, &d), LK_HELD);
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "EXISTS fg:{%s}:hq", res), 0);
    /* C is queued with its id, and the lock marked wanted: the release grants C, the first
     * queued waiter, before the caller's D (a waiter queued in Redis is not passed over by
     * another's batched hand-off), and publishes; D's claim finds the lock held. */
    assert_lk(f->c, attempt(f, res, "C", "c7", 0, NULL, 60000, &r), LK_HELD);
    rel = (lk_call){.kind = LK_CALL_RELEASE, .resource = res, .owner = "B", .handoff = 1,
                    .handoff_to = "D", .handoff_id = "d7", .lease_ms = 5000};
    assert_lk(f->c, run(f, &rel), LK_RELEASED);
    assert_string_equal(rel.res.handed_id, "c7");
    assert_int_equal(rel.res.published, 1);
    assert_int_equal(holds_of(f, res, "C"), 1);
    assert_int_equal(holds_of(f, res, "D"), 0);
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "LLEN fg:{%s}:wq", res), 0);
    assert_lk(f->c, run(f, &d), LK_HELD);
    assert_lk(f->c, attempt(f, res, "C", "c7", 0, NULL, 60000, &r), LK_ACQUIRED);
    assert_int_equal(r.handed, 1);
    /* Nobody queued: the caller's D is granted. */
    rel = (lk_call){.kind = LK_CALL_RELEASE, .resource = res, .owner = "C", .handoff = 1,
                    .handoff_to = "D", .handoff_id = "d7", .lease_ms = 5000};
    assert_lk(f->c, run(f, &rel), LK_RELEASED);
    assert_string_equal(rel.res.handed_id, "d7");
    assert_int_equal(holds_of(f, res, "D"), 1);
    assert_lk(f->c, run(f, &d), LK_ACQUIRED);
    assert_int_equal(d.res.handed, 1);

    /* Handing to the releasing owner itself grants nothing; bad targets are refused. */
    rel = (lk_call){.kind = LK_CALL_RELEASE, .resource = res, .owner = "D", .handoff = 1,
                    .handoff_to = "D", .handoff_id = "d8", .lease_ms = 5000};
    lk_call bad = rel;
    bad.handoff = 0;
    assert_lk(f->c, run(f, &bad), LK_EINVAL);
    bad = rel;
    bad.handoff_id = "XY";
    assert_lk(f->c, run(f, &bad), LK_EINVAL);
    bad = rel;
    bad.lease_ms = 0;
    assert_lk(f->c, run(f, &bad), LK_EINVAL);
    assert_lk(f->c, run(f, &rel), LK_RELEASED);
    assert_int_equal(rel.res.handed_token, 0);
}

/* Runs a release and its waiter's claim (claim_from) as one lk_call_many() batch; returns
 * how many scripts Redis ran for the two. */
static long long run_release_and_claim(lk_fixture *f, lk_call *rel, lk_call *claim)
{
    lk_call *calls[2] = {rel, claim};
    long long before = th_redis_script_calls(&f->redis);
    lk_call_many(f->c, calls, 2);
    return th_redis_script_calls(&f->redis) - before;
}

/* A claim sent in the batch of the release that grants its waiter directly is answered
 * from the release: one script hands the lock on, and the answer is the claim's (the
 * token handed, holds 1, the lease), the grant marked wanted when the release says others
 * wait. When the release grants a waiter queued in Redis instead, or frees nothing, the
 * claim is sent after it and finds what the release left. */
static void test_claim_answered_by_its_release(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    const char *res = res_name("claimfrom");

    assert_lk(f->c, lk_acquire(f->c, res, "A", 10000, 0, NULL, &r), LK_ACQUIRED);
    lk_call rel = {.kind = LK_CALL_RELEASE, .resource = res, .owner = "A", .handoff = 1,
                   .floor = r.token, .handoff_to = "B", .handoff_id = "b7",
                   .lease_ms = 5000, .others_waiting = 1};
    lk_call claim = {.kind = LK_CALL_ACQUIRE, .resource = res, .owner = "B", .lease_ms = 5000,
                     .handoff_id = "b7", .handoff_claim = 1, .others_waiting = 1,
                     .claim_from = &rel};
    assert_int_equal(run_release_and_claim(f, &rel, &claim), 1);
    assert_int_equal(rel.status, LK_RELEASED);
    assert_int_equal(rel.res.handed_direct, 1);
    assert_int_equal(claim.status, LK_ACQUIRED);
    assert_int_equal(claim.res.token, rel.res.handed_token);
    assert_int_equal(claim.res.token, fence_of(f, res));
    assert_int_equal(claim.res.holds, 1);
    assert_int_equal(claim.res.handed, 1);
    assert_int_equal(claim.res.ttl_ms, 5000);
    assert_int_equal(holds_of(f, res, "B"), 1);
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "HEXISTS fg:{%s}:lock #wait", res), 1);
    int64_t b_token = claim.res.token;

    /* C queued in Redis comes first: the release grants C, and D's claim, sent after the
     * batch, finds the lock held by C. */
    assert_lk(f->c, attempt(f, res, "C", "c7", 0, NULL, 60000, &r), LK_HELD);
    rel = (lk_call){.kind = LK_CALL_RELEASE, .resource = res, .owner = "B", .handoff = 1,
                    .floor = b_token, .handoff_to = "D", .handoff_id = "d7",
                    .lease_ms = 5000, .others_waiting = 1};
    claim = (lk_call){.kind = LK_CALL_ACQUIRE, .resource = res, .owner = "D", .lease_ms = 5000,
                      .handoff_id = "d7", .handoff_claim = 1, .claim_from = &rel};
    assert_int_equal(run_release_and_claim(f, &rel, &claim), 2);
    assert_int_equal(rel.status, LK_RELEASED);
    assert_string_equal(rel.res.handed_id, "c7");
    assert_int_equal(rel.res.handed_direct, 0);
    assert_int_equal(claim.status, LK_HELD);
    assert_int_equal(holds_of(f, res, "C"), 1);
    assert_int_equal(holds_of(f, res, "D"), 0);

    /* C holds twice: its release frees nothing, and D's claim is sent and finds it held. */
    assert_lk(f->c, attempt(f, res, "C", "c7", 0, NULL, 60000, &r), LK_ACQUIRED);
    assert_lk(f->c, lk_acquire(f->c, res, "C", 10000, 0, NULL, &r), LK_ACQUIRED);
    assert_int_equal(r.holds, 2);
    rel = (lk_call){.kind = LK_CALL_RELEASE, .resource = res, .owner = "C", .handoff = 1,
                    .floor = r.token, .handoff_to = "D", .handoff_id = "d7", .lease_ms = 5000};
    claim.status = LK_OK;
    assert_int_equal(run_release_and_claim(f, &rel, &claim), 2);
    assert_int_equal(rel.status, LK_STILL_HELD);
    assert_int_equal(claim.status, LK_HELD);

    /* A claim whose release is not in its batch is sent as any call: it finds no grant. */
    lk_call alone = claim;
    assert_lk(f->c, run(f, &alone), LK_HELD);
    /* Nor is one held back whose release names another lease: the release grants D, and
     * the claim, sent after it, claims that grant in Redis. */
    rel = (lk_call){.kind = LK_CALL_RELEASE, .resource = res, .owner = "C", .handoff = 1,
                    .floor = r.token, .handoff_to = "D", .handoff_id = "d7", .lease_ms = 6000};
    claim.claim_from = &rel;
    assert_int_equal(run_release_and_claim(f, &rel, &claim), 2);
    assert_int_equal(rel.res.handed_direct, 1);
    assert_int_equal(claim.status, LK_ACQUIRED);
    assert_int_equal(claim.res.token, rel.res.handed_token);
    assert_true(claim.res.ttl_ms > 0 && claim.res.ttl_ms <= 6000);

    /* The caller's waiter queued in Redis itself (it lost a race) is granted as named, with
     * the release's lease, not one cut to its wait (2 s + 1 s, as a queued waiter's would
     * be), and answered from it. */
    assert_lk(f->c, attempt(f, res, "E", "e7", 0, NULL, 2000, &r), LK_HELD);
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "LLEN fg:{%s}:wq", res), 1);
    rel = (lk_call){.kind = LK_CALL_RELEASE, .resource = res, .owner = "D", .handoff = 1,
                    .floor = claim.res.token, .handoff_to = "E", .handoff_id = "e7",
                    .lease_ms = 5000, .others_waiting = 1};
    claim = (lk_call){.kind = LK_CALL_ACQUIRE, .resource = res, .owner = "E", .lease_ms = 5000,
                      .handoff_id = "e7", .handoff_claim = 1, .claim_from = &rel};
    assert_int_equal(run_release_and_claim(f, &rel, &claim), 1);
    assert_int_equal(rel.res.handed_direct, 1);
    assert_int_equal(claim.status, LK_ACQUIRED);
    assert_int_equal(claim.res.token, fence_of(f, res));
    assert_int_equal(holds_of(f, res, "E"), 1);
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "LLEN fg:{%s}:wq", res), 0);
    long long pttl = th_redis_cmd(&f->redis, NULL, 0, "PTTL fg:{%s}:lock", res);
    assert_true(pttl > 4000 && pttl <= 5000);
}

/* The grant to a named waiter is marked wanted only when somebody else waits: the caller
 * says so (others_waiting), or the lock was marked by a request the caller does not know
 * of (another process's, answered held). Unmarked, the new holder's release publishes
 * nothing, and nobody is woken for a lock nobody waits for. */
static void test_named_grant_marked_only_when_others_wait(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    const char *res = res_name("namedmark");

    assert_lk(f->c, lk_acquire(f->c, res, "A", 10000, 0, NULL, &r), LK_ACQUIRED);
    lk_call rel = {.kind = LK_CALL_RELEASE, .resource = res, .owner = "A", .handoff = 1,
                   .floor = r.token, .handoff_to = "B", .handoff_id = "b7",
                   .lease_ms = 5000};
    assert_lk(f->c, run(f, &rel), LK_RELEASED);
    assert_int_equal(rel.res.handed_direct, 1);
    assert_int_equal(rel.res.published, 0);
    assert_int_equal(holds_of(f, res, "B"), 1);
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "HEXISTS fg:{%s}:lock #wait", res), 0);

    /* C, unknown to the caller, is answered held while B holds, and marks the lock: the
     * grant to D keeps the mark, and the release that made it published. */
    assert_lk(f->c, attempt(f, res, "C", NULL, 0, NULL, 60000, &r), LK_HELD);
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "HEXISTS fg:{%s}:lock #wait", res), 1);
    rel = (lk_call){.kind = LK_CALL_RELEASE, .resource = res, .owner = "B", .handoff = 1,
                    .floor = rel.res.handed_token, .handoff_to = "D", .handoff_id = "d7",
                    .lease_ms = 5000};
    assert_lk(f->c, run(f, &rel), LK_RELEASED);
    assert_int_equal(rel.res.handed_direct, 1);
    assert_int_equal(rel.res.published, 1);
    assert_int_equal(holds_of(f, res, "D"), 1);
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "HEXISTS fg:{%s}:lock #wait", res), 1);
}

/* Redis full under noeviction refuses a release at its first write, before anything
 * changed: the last hold stays, and the waiter it names is granted nothing, as every
 * acquisition is refused then (a script that has written may go on writing, so a release
 * that wrote first with a command Redis allows when full would hand the lock on). The
 * waiter's claim held back for that release is refused with it. */
static void test_full_redis_refuses_the_release_and_its_grant(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    const char *res = res_name("fullrel");

    assert_lk(f->c, lk_acquire(f->c, res, "A", 10000, 0, NULL, &r), LK_ACQUIRED);
    long long fence = fence_of(f, res);
    lk_call rel = {.kind = LK_CALL_RELEASE, .resource = res, .owner = "A", .handoff = 1,
                   .floor = r.token, .handoff_to = "B", .handoff_id = "b7",
                   .lease_ms = 5000, .others_waiting = 1};
    lk_call claim = {.kind = LK_CALL_ACQUIRE, .resource = res, .owner = "B", .lease_ms = 5000,
                     .handoff_id = "b7", .handoff_claim = 1, .claim_from = &rel};
    th_redis_cmd(&f->redis, NULL, 0, "CONFIG SET maxmemory-policy noeviction");
    th_redis_cmd(&f->redis, NULL, 0, "CONFIG SET maxmemory 1");
    long long scripts = run_release_and_claim(f, &rel, &claim);
    th_redis_cmd(&f->redis, NULL, 0, "CONFIG SET maxmemory 0");
    assert_lk(f->c, rel.status, LK_EUNAVAILABLE);
    assert_non_null(strstr(rel.err, "OOM"));
    /* The claim held back for that release is refused with it, and never sent: whether
     * the grant was made is as unknown to it as to the release. */
    assert_int_equal(scripts, 1);
    assert_int_equal(claim.status, LK_EUNAVAILABLE);
    assert_string_equal(claim.err, rel.err);
    assert_int_equal(holds_of(f, res, "A"), 1);
    assert_int_equal(holds_of(f, res, "B"), 0);
    assert_int_equal(fence_of(f, res), fence);
    /* With room again, the same release hands the lock on, and answers the claim. */
    rel.status = LK_OK;
    claim.status = LK_OK;
    assert_int_equal(run_release_and_claim(f, &rel, &claim), 1);
    assert_int_equal(rel.status, LK_RELEASED);
    assert_int_equal(rel.res.handed_direct, 1);
    assert_int_equal(claim.status, LK_ACQUIRED);
    assert_int_equal(claim.res.token, fence_of(f, res));
    assert_int_equal(holds_of(f, res, "B"), 1);
}

/* A fair waiter named by the release (handoff_first: never past the queue) is granted only
 * as the head of the fair queue, with the release's lease instead of a grant cut to its
 * wait, and its fair claim is answered from the release. Behind another head, the head is
 * granted and the named waiter's claim, sent after the batch, finds the lock held; with
 * nobody queued, nothing is granted. */
static void test_fair_head_answered_by_its_release(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    const char *res = res_name("fairfrom");

    assert_lk(f->c, lk_acquire(f->c, res, "A", 10000, 0, NULL, &r), LK_ACQUIRED);
    assert_lk(f->c, attempt(f, res, "B", "b7", 1, NULL, 2000, &r), LK_HELD);
    assert_lk(f->c, attempt(f, res, "C", "c7", 1, NULL, 60000, &r), LK_HELD);
    lk_call rel = {.kind = LK_CALL_RELEASE, .resource = res, .owner = "A", .handoff = 1,
                   .floor = r.holder_token, .handoff_to = "B", .handoff_id = "b7",
                   .lease_ms = 5000, .handoff_first = 1};
    lk_call claim = {.kind = LK_CALL_ACQUIRE_FAIR, .resource = res, .owner = "B",
                     .lease_ms = 5000, .wait_ms = 2000, .handoff_id = "b7",
                     .claim_from = &rel};
    assert_int_equal(run_release_and_claim(f, &rel, &claim), 1);
    assert_int_equal(rel.res.handed_direct, 1);
    assert_int_equal(claim.status, LK_ACQUIRED);
    assert_int_equal(claim.res.token, fence_of(f, res));
    assert_int_equal(claim.res.handed, 1);
    long long pttl = th_redis_cmd(&f->redis, NULL, 0, "PTTL fg:{%s}:lock", res);
    assert_true(pttl > 4000 && pttl <= 5000); /* not cut to B's 2 s wait + 1 s */
    /* C is still queued: the grant is marked wanted, so B's release hands on. */
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "HEXISTS fg:{%s}:lock #wait", res), 1);

    /* D, named, is behind C: C is granted, and D's claim, sent after the batch, finds the
     * lock held. */
    assert_lk(f->c, attempt(f, res, "D", "d7", 1, NULL, 60000, &r), LK_HELD);
    rel = (lk_call){.kind = LK_CALL_RELEASE, .resource = res, .owner = "B", .handoff = 1,
                    .floor = claim.res.token, .handoff_to = "D", .handoff_id = "d7",
                    .lease_ms = 5000, .handoff_first = 1};
    claim = (lk_call){.kind = LK_CALL_ACQUIRE_FAIR, .resource = res, .owner = "D",
                      .lease_ms = 5000, .wait_ms = 60000, .handoff_id = "d7",
                      .claim_from = &rel};
    assert_int_equal(run_release_and_claim(f, &rel, &claim), 2);
    assert_string_equal(rel.res.handed_id, "c7");
    assert_int_equal(rel.res.handed_direct, 0);
    assert_int_equal(claim.status, LK_HELD);
    assert_int_equal(holds_of(f, res, "C"), 1);

    /* Nobody queued once C claims and D leaves: C's release, naming E (not queued) with
     * handoff_first, grants nothing. */
    assert_lk(f->c, attempt(f, res, "C", "c7", 1, NULL, 60000, &r), LK_ACQUIRED);
    lk_call cancel = {.kind = LK_CALL_FAIR_CANCEL, .resource = res, .owner = "D",
                      .handoff_id = "d7"};
    assert_lk(f->c, run(f, &cancel), LK_OK);
    rel = (lk_call){.kind = LK_CALL_RELEASE, .resource = res, .owner = "C", .handoff = 1,
                    .floor = r.token, .handoff_to = "E", .handoff_id = "e7", .lease_ms = 5000,
                    .handoff_first = 1};
    assert_lk(f->c, run(f, &rel), LK_RELEASED);
    assert_int_equal(rel.res.handed_token, 0);
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "EXISTS fg:{%s}:lock", res), 0);

    /* A fair claim whose release lacks handoff_first is not held back: it is sent, and
     * claims the grant in Redis. */
    assert_lk(f->c, lk_acquire(f->c, res, "P", 10000, 0, NULL, &r), LK_ACQUIRED);
    assert_lk(f->c, attempt(f, res, "Q", "f7", 1, NULL, 60000, &r), LK_HELD);
    rel = (lk_call){.kind = LK_CALL_RELEASE, .resource = res, .owner = "P", .handoff = 1,
                    .floor = r.holder_token, .handoff_to = "Q", .handoff_id = "f7",
                    .lease_ms = 5000};
    claim = (lk_call){.kind = LK_CALL_ACQUIRE_FAIR, .resource = res, .owner = "Q",
                      .lease_ms = 5000, .wait_ms = 60000, .handoff_id = "f7",
                      .claim_from = &rel};
    assert_int_equal(run_release_and_claim(f, &rel, &claim), 2);
    assert_int_equal(claim.status, LK_ACQUIRED);
    assert_int_equal(claim.res.handed, 1);
    assert_int_equal(claim.res.token, rel.res.handed_token);
}

/* A give-back without an idempotency key (the gateway's, of a grant its waiter never
 * claimed) undoes only a hold with that token or a smaller one: a later hold of the same
 * owner stays. */
static void test_give_back_without_key_spares_a_later_hold(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    const char *res = res_name("giveback");

    assert_lk(f->c, lk_acquire(f->c, res, "A", 10000, 0, NULL, &r), LK_ACQUIRED);
    int64_t first = r.token;
    assert_lk(f->c, lk_release(f->c, res, "A", NULL, &r), LK_RELEASED);
    assert_lk(f->c, lk_acquire(f->c, res, "A", 10000, 0, NULL, &r), LK_ACQUIRED);
    assert_true(r.token > first);
    lk_call back = {.kind = LK_CALL_RELEASE, .resource = res, .owner = "A",
                    .supersede = first};
    assert_lk(f->c, run(f, &back), LK_STILL_HELD);
    assert_int_equal(holds_of(f, res, "A"), 1);
    back.supersede = r.token;
    assert_lk(f->c, run(f, &back), LK_RELEASED);
    assert_int_equal(holds_of(f, res, "A"), 0);
}

/* Bad hand-off arguments are refused before anything is sent. */
static void test_bad_arguments(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    const char *res = res_name("bad");

    assert_lk(f->c, attempt(f, res, "A", "XYZ", 0, NULL, 1000, &r), LK_EINVAL);
    assert_lk(f->c, attempt(f, res, "A", "0123456789abcdef0", 0, NULL, 1000, &r), LK_EINVAL);
    assert_lk(f->c, attempt(f, res, "A", "ab", 0, NULL, 0, &r), LK_EINVAL);
    lk_call call = {.kind = LK_CALL_RELEASE, .resource = res, .owner = "A", .handoff = 1,
                    .floor = -1};
    assert_lk(f->c, run(f, &call), LK_EINVAL);
}

/* Redis's clock in ms. */
static long long redis_now_ms(const lk_fixture *f)
{
    redisContext *ctx = redisConnect("127.0.0.1", f->redis.port);
    assert_true(ctx != NULL && ctx->err == 0);
    redisReply *t = redisCommand(ctx, "TIME");
    assert_true(t != NULL && t->type == REDIS_REPLY_ARRAY && t->elements == 2);
    long long ms = atoll(t->element[0]->str) * 1000 + atoll(t->element[1]->str) / 1000;
    freeReplyObject(t);
    redisFree(ctx);
    return ms;
}

/* A claim answers what is left of the grant's lease, not the lease it asks for. */
static void test_claim_reports_the_lease_left(void **state)
{
    lk_fixture *f = *state;
    lk_result r, g;
    const char *res = res_name("leaseleft");

    assert_lk(f->c, lk_acquire(f->c, res, "A", 10000, 0, NULL, &r), LK_ACQUIRED);
    assert_lk(f->c, attempt(f, res, "B", "b2", 0, NULL, 60000, &r), LK_HELD);
    assert_lk(f->c, release_handing(f, res, "A", 0, &g), LK_RELEASED);
    assert_true(g.handed_token > 0);
    th_redis_cmd(&f->redis, NULL, 0, "PEXPIRE fg:{%s}:lock 4000", res);
    assert_lk(f->c, attempt(f, res, "B", "b2", 0, NULL, 60000, &r), LK_ACQUIRED);
    assert_int_equal(r.handed, 1);
    assert_true(r.ttl_ms > 0 && r.ttl_ms <= 4000);
}

/* A queued waiter whose wait ends before its lease is granted only until shortly after its
 * wait (a vanished waiter's grant then ends about when its place in line would have); its
 * claim gives the hold its own lease. One that waits longer than its lease gets the lease. */
static void test_grant_lasts_the_wait_until_claimed(void **state)
{
    lk_fixture *f = *state;
    lk_result r, g;
    const char *res = res_name("waitlease");

    assert_lk(f->c, lk_acquire(f->c, res, "A", 10000, 0, NULL, &r), LK_ACQUIRED);
    assert_lk(f->c, attempt(f, res, "B", "b3", 1, NULL, 1500, &r), LK_HELD);
    assert_lk(f->c, release_handing(f, res, "A", 0, &g), LK_RELEASED);
    assert_string_equal(g.handed_id, "b3");
    long long pttl = th_redis_cmd(&f->redis, NULL, 0, "PTTL fg:{%s}:lock", res);
    assert_true(pttl > 0 && pttl <= 2500); /* 1,500 ms of wait + 1,000 */
    assert_lk(f->c, attempt(f, res, "B", "b3", 1, NULL, 1500, &r), LK_ACQUIRED);
    assert_int_equal(r.handed, 1);
    assert_true(r.ttl_ms > 9000 && r.ttl_ms <= 10000); /* its own lease from the claim */
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "HEXISTS fg:{%s}:lock #glease", res), 0);

    /* Waiting longer than its lease: the grant has the lease, and the claim writes
     * nothing. */
    assert_lk(f->c, attempt(f, res, "C", "c3", 1, NULL, 60000, &r), LK_HELD);
    assert_lk(f->c, release_handing(f, res, "B", 0, &g), LK_RELEASED);
    assert_true(th_redis_cmd(&f->redis, NULL, 0, "PTTL fg:{%s}:lock", res) > 9000);
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "HEXISTS fg:{%s}:lock #glease", res), 0);
}

/* A fair waiter's hand-off entry from an earlier wait, whose deadline passed, is not used
 * when the same owner waits again without a hand-off id: the release hands nothing and
 * publishes, so the owner comes for the lock itself and never gets a hold it did not ask
 * for. */
static void test_stale_fair_entry_is_not_granted(void **state)
{
    lk_fixture *f = *state;
    lk_result r, g;
    const char *res = res_name("stalefair");

    assert_lk(f->c, lk_acquire(f->c, res, "A", 10000, 0, NULL, &r), LK_ACQUIRED);
    assert_lk(f->c, attempt(f, res, "X", "0a", 1, NULL, 50, &r), LK_HELD);
    /* A non-fair waiter keeps the hand-off keys alive past X's wait. */
    assert_lk(f->c, attempt(f, res, "Z", "0c", 0, NULL, 60000, &r), LK_HELD);
    long long asked = redis_now_ms(f);
    while (redis_now_ms(f) <= asked + 50) { /* until X's 50 ms wait is over in Redis */
        poll(NULL, 0, 5);
    }
    assert_lk(f->c, attempt(f, res, "X", NULL, 1, NULL, 60000, &r), LK_HELD);
    assert_lk(f->c, release_handing(f, res, "A", 0, &g), LK_RELEASED);
    assert_int_equal(g.handed_token, 0);
    assert_int_equal(g.published, 1);
    assert_int_equal(holds_of(f, res, "X"), 0);
}

/* A shared hold of one attempt (no hand-off id: readers take none). */
static lk_status share(lk_fixture *f, const char *res, const char *owner, int64_t wait_ms,
                       lk_result *out)
{
    lk_call call = {.kind = LK_CALL_ACQUIRE, .resource = res, .owner = owner,
                    .lease_ms = 10000, .wait_ms = wait_ms, .shared = 1};
    lk_status st = run(f, &call);
    *out = call.res;
    return st;
}

/* The last shared holder's release hands the lock to the writer queued behind the readers,
 * which leaves the writers' waiting set with its grant: once it releases, new readers get in
 * at once, not when its wait would have ended. A release while other readers still hold
 * hands nothing. */
static void test_last_reader_hands_to_writer(void **state)
{
    lk_fixture *f = *state;
    lk_result r, g;
    const char *res = res_name("readers");

    assert_lk(f->c, lk_acquire(f->c, res, "W0", 10000, 0, NULL, &r), LK_ACQUIRED);
    assert_lk(f->c, lk_release(f->c, res, "W0", NULL, &r), LK_RELEASED);
    assert_lk(f->c, share(f, res, "R1", 0, &r), LK_ACQUIRED);
    assert_lk(f->c, share(f, res, "R2", 0, &r), LK_ACQUIRED);
    int64_t read_token = r.token;
    assert_lk(f->c, attempt(f, res, "W", "0f", 0, NULL, 60000, &r), LK_HELD);
    /* A reader arriving now waits behind the writer. */
    assert_lk(f->c, share(f, res, "R3", 60000, &r), LK_HELD);
    assert_lk(f->c, release_handing(f, res, "R1", 0, &g), LK_RELEASED);
    assert_int_equal(g.handed_token, 0);
    assert_lk(f->c, release_handing(f, res, "R2", 0, &g), LK_RELEASED);
    assert_int_equal(g.handed_token, read_token + 1);
    assert_string_equal(g.handed_id, "0f");
    assert_lk(f->c, attempt(f, res, "W", "0f", 0, NULL, 60000, &r), LK_ACQUIRED);
    assert_int_equal(r.handed, 1);
    assert_int_equal(r.shared, 0);
    assert_lk(f->c, share(f, res, "R3", 60000, &r), LK_HELD); /* the writer holds */
    assert_lk(f->c, release_handing(f, res, "W", 0, &g), LK_RELEASED);
    assert_int_equal(g.handed_token, 0); /* readers are never handed a lock */
    assert_lk(f->c, share(f, res, "R3", 60000, &r), LK_ACQUIRED);
    assert_int_equal(r.token, read_token + 1);
}

/* A fair queue whose head is a shared waiter hands nothing: the release publishes as
 * before and the readers come for the lock themselves; a shared call with a hand-off id is
 * refused before it reaches Redis. */
static void test_shared_head_is_not_handed(void **state)
{
    lk_fixture *f = *state;
    lk_result r, g;
    const char *res = res_name("sharedhead");

    assert_lk(f->c, lk_acquire(f->c, res, "W0", 10000, 0, NULL, &r), LK_ACQUIRED);
    lk_call rd = {.kind = LK_CALL_ACQUIRE_FAIR, .resource = res, .owner = "R",
                  .lease_ms = 10000, .wait_ms = 60000, .shared = 1};
    assert_lk(f->c, run(f, &rd), LK_HELD);
    assert_lk(f->c, attempt(f, res, "W", "1e", 1, NULL, 60000, &r), LK_HELD);
    assert_lk(f->c, release_handing(f, res, "W0", 0, &g), LK_RELEASED);
    assert_int_equal(g.handed_token, 0);
    assert_int_equal(g.published, 1);
    assert_lk(f->c, run(f, &rd), LK_ACQUIRED);
    assert_int_equal(rd.res.shared, 1);

    lk_call bad = {.kind = LK_CALL_ACQUIRE, .resource = res, .owner = "R2", .lease_ms = 10000,
                   .wait_ms = 1000, .shared = 1, .handoff_id = "ab"};
    assert_lk(f->c, run(f, &bad), LK_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_release_grants_waiter),
        cmocka_unit_test(test_no_herd),
        cmocka_unit_test(test_fair_order_and_floor),
        cmocka_unit_test(test_gone_waiter),
        cmocka_unit_test(test_grant_expires_with_lease),
        cmocka_unit_test(test_sub_reports_grant),
        cmocka_unit_test(test_replay_leaves_the_queue),
        cmocka_unit_test(test_claim_writes_only_before_a_wait),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_release_grants_the_callers_waiter),
        cmocka_unit_test(test_claim_answered_by_its_release),
        cmocka_unit_test(test_named_grant_marked_only_when_others_wait),
        cmocka_unit_test(test_full_redis_refuses_the_release_and_its_grant),
        cmocka_unit_test(test_fair_head_answered_by_its_release),
        cmocka_unit_test(test_give_back_without_key_spares_a_later_hold),
        cmocka_unit_test(test_last_reader_hands_to_writer),
        cmocka_unit_test(test_shared_head_is_not_handed),
        cmocka_unit_test(test_claim_reports_the_lease_left),
        cmocka_unit_test(test_grant_lasts_the_wait_until_claimed),
        cmocka_unit_test(test_stale_fair_entry_is_not_granted),
    };
    return cmocka_run_group_tests(tests, group_setup, lk_group_teardown);
}
