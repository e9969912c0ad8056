/* locklib: fair (FIFO) acquisition with a queue in Redis (lk_acquire_fair, lk_fair_cancel),
 * against a real redis-server started by the group setup. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "lk_test.h"

static int group_setup(void **state)
{
    return lk_group_setup_aof(state, 0);
}

/* Writes the fair queue of res as "a,b,c" into buf ("" when empty). */
static void queue_str(const lk_fixture *f, const char *res, char *buf, size_t len)
{
    redisContext *ctx = connect_plain(f);
    redisReply *r = redisCommand(ctx, "LRANGE fg:{%s}:queue 0 -1", res);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    buf[0] = '\0';
    for (size_t i = 0; i < r->elements; i++) {
        size_t used = strlen(buf);
        snprintf(buf + used, len - used, "%s%s", i ? "," : "", r->element[i]->str);
    }
    freeReplyObject(r);
    redisFree(ctx);
}

/* Enqueues owner behind a held lock and checks its place in line. */
static void enqueue(lk_fixture *f, const char *res, const char *owner, int64_t wait_ms,
                    int want_pos)
{
    lk_result r;
    assert_lk(f->c, lk_acquire_fair(f->c, res, owner, 10000, 0, NULL, wait_ms, &r), LK_HELD);
    assert_int_equal(r.queue_pos, want_pos);
    assert_true(r.ttl_ms >= 1);
    assert_int_equal(r.token, 0);
}

/* FIFO: after each release only the head of the queue gets in, whoever asks first. */
static void test_fifo_order(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    const char *res = res_name("fifo");
    const char *waiters[] = {"B", "C", "D"};
    char order[16] = "";
    char q[256];

    assert_lk(f->c, lk_acquire_fair(f->c, res, "A", 10000, 0, NULL, 10000, &r), LK_ACQUIRED);
    assert_int_equal(r.queue_pos, -1);
    int64_t last_token = r.token;
    const char *holder = "A";
    enqueue(f, res, "B", 10000, 0);
    enqueue(f, res, "C", 10000, 1);
    enqueue(f, res, "D", 10000, 2);
    /* Asking again keeps one's place. */
    enqueue(f, res, "C", 10000, 1);
    queue_str(f, res, q, sizeof q);
    assert_string_equal(q, "B,C,D");

    for (int round = 0; round < 3; round++) {
        assert_lk(f->c, lk_release(f->c, res, holder, NULL, &r), LK_RELEASED);
        /* Everyone still waiting asks, the last in line first: only the head gets in. */
        const char *winner = NULL;
        for (int i = 2; i >= round; i--) {
            lk_status st = lk_acquire_fair(f->c, res, waiters[i], 10000, 0, NULL, 10000, &r);
            if (i == round) {
                assert_lk(f->c, st, LK_ACQUIRED);
                assert_true(r.token > last_token);
                last_token = r.token;
                winner = waiters[i];
            } else {
                assert_lk(f->c, st, LK_HELD);
                assert_int_equal(r.queue_pos, i - round); /* the head has not asked yet */
            }
        }
        strcat(order, winner);
        holder = winner;
    }
    assert_string_equal(order, "BCD");
    assert_lk(f->c, lk_release(f->c, res, holder, NULL, &r), LK_RELEASED);
    /* Everyone left: both queue keys are gone. */
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "EXISTS fg:{%s}:queue", res), 0);
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "EXISTS fg:{%s}:qtimeout", res), 0);
}

/* A waiter that enqueued and vanished is dropped after its deadline; the next one then gets
 * the free lock. Until then the next one is told to come back by that deadline. */
static void test_vanished_waiter_is_dropped(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    const char *res = res_name("vanished");
    char q[256];

    assert_lk(f->c, lk_acquire_fair(f->c, res, "A", 10000, 0, NULL, 0, &r), LK_ACQUIRED);
    enqueue(f, res, "ghost", 300, 0);
    enqueue(f, res, "W", 10000, 1);
    int64_t released_at = th_now_ms();
    assert_lk(f->c, lk_release(f->c, res, "A", NULL, &r), LK_RELEASED);

    assert_lk(f->c, lk_acquire_fair(f->c, res, "W", 10000, 0, NULL, 10000, &r), LK_HELD);
    assert_int_equal(r.queue_pos, 1);
    assert_true(r.ttl_ms >= 1 && r.ttl_ms <= 300);
    int64_t deadline = th_now_ms() + 5000;
    lk_status st;
    while ((st = lk_acquire_fair(f->c, res, "W", 10000, 0, NULL, 10000, &r)) == LK_HELD &&
           th_now_ms() < deadline) {
        assert_true(r.ttl_ms >= 1 && r.ttl_ms <= 300);
        th_nap_ms((int)r.ttl_ms);
    }
    assert_lk(f->c, st, LK_ACQUIRED);
    /* Not before the ghost's wait ran out (TIME and our clock may differ by a few ms). */
    assert_true(th_now_ms() - released_at >= 250);
    queue_str(f, res, q, sizeof q);
    assert_string_equal(q, "");
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "ZCARD fg:{%s}:qtimeout", res), 0);
    assert_lk(f->c, lk_release(f->c, res, "W", NULL, &r), LK_RELEASED);
}

/* The queue keys expire just after the last deadline, so a crowd of vanished waiters leaves
 * nothing behind. */
static void test_queue_keys_expire(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    const char *res = res_name("expire");

    assert_lk(f->c, lk_acquire(f->c, res, "A", 10000, 0, NULL, &r), LK_ACQUIRED);
    enqueue(f, res, "B", 200, 0);
    enqueue(f, res, "C", 400, 1);
    long long pttl = th_redis_cmd(&f->redis, NULL, 0, "PTTL fg:{%s}:queue", res);
    assert_true(pttl > 300 && pttl <= 401);
    pttl = th_redis_cmd(&f->redis, NULL, 0, "PTTL fg:{%s}:qtimeout", res);
    assert_true(pttl > 300 && pttl <= 401);
    int64_t deadline = th_now_ms() + 5000;
    while (th_redis_cmd(&f->redis, NULL, 0, "EXISTS fg:{%s}:queue fg:{%s}:qtimeout", res,
                        res) != 0 &&
           th_now_ms() < deadline) {
        th_nap_ms(20);
    }
    assert_int_equal(
        th_redis_cmd(&f->redis, NULL, 0, "EXISTS fg:{%s}:queue fg:{%s}:qtimeout", res, res), 0);
    assert_lk(f->c, lk_release(f->c, res, "A", NULL, &r), LK_RELEASED);
}

/* The head giving up while the lock is free publishes, and lets the next one in at once. */
static void test_cancel_of_head_publishes(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    const char *res = res_name("cancel");
    char channel[256];
    char q[256];

    assert_lk(f->c, lk_channel_name(res, channel, sizeof channel), LK_OK);
    assert_lk(f->c, lk_acquire(f->c, res, "A", 10000, 0, NULL, &r), LK_ACQUIRED);
    enqueue(f, res, "B", 60000, 0);
    enqueue(f, res, "C", 60000, 1);
    enqueue(f, res, "D", 60000, 2);
    assert_lk(f->c, lk_release(f->c, res, "A", NULL, &r), LK_RELEASED);

    redisContext *sub = connect_plain(f);
    freeReplyObject(redisCommand(sub, "SUBSCRIBE %s", channel));
    assert_lk(f->c, lk_acquire_fair(f->c, res, "C", 10000, 0, NULL, 60000, &r), LK_HELD);
    assert_true(r.ttl_ms >= 1 && r.ttl_ms <= 1000);
    /* Cancelling someone not first in line, or not queued at all, publishes nothing. */
    assert_lk(f->c, lk_fair_cancel(f->c, res, "D"), LK_OK);
    assert_lk(f->c, lk_fair_cancel(f->c, res, "nobody"), LK_OK);
    queue_str(f, res, q, sizeof q);
    assert_string_equal(q, "B,C");
    assert_lk(f->c, lk_fair_cancel(f->c, res, "B"), LK_OK);
    lk_expect_message(sub, channel, "released");
    assert_lk(f->c, lk_acquire_fair(f->c, res, "C", 10000, 0, NULL, 60000, &r), LK_ACQUIRED);
    char c_token[24];
    snprintf(c_token, sizeof c_token, "%lld", (long long)r.token);
    /* The next message is our probe: nothing else was published. */
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "PUBLISH %s probe", channel), 1);
    lk_expect_message(sub, channel, "probe");
    /* The head cancelling while the lock is held publishes nothing either. */
    enqueue(f, res, "E", 60000, 0);
    assert_lk(f->c, lk_fair_cancel(f->c, res, "E"), LK_OK);
    assert_lk(f->c, lk_release(f->c, res, "C", NULL, &r), LK_RELEASED);
    lk_expect_message(sub, channel, c_token); /* a release publishes the token it ended */
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "PUBLISH %s probe", channel), 1);
    lk_expect_message(sub, channel, "probe");
    redisFree(sub);
}

/* The holder re-enters at once whatever the queue, with the same token. */
static void test_reentrant(void **state)
{
    lk_fixture *f = *state;
    lk_result r1, r2, r;
    const char *res = res_name("reentrant");

    assert_lk(f->c, lk_acquire_fair(f->c, res, "A", 10000, 0, NULL, 1000, &r1), LK_ACQUIRED);
    assert_int_equal(r1.holds, 1);
    enqueue(f, res, "B", 10000, 0);
    assert_lk(f->c, lk_acquire_fair(f->c, res, "A", 20000, 0, NULL, 1000, &r2), LK_ACQUIRED);
    assert_int_equal(r2.token, r1.token);
    assert_int_equal(r2.holds, 2);
    assert_int_equal(r2.ttl_ms, 20000);
    assert_lk(f->c, lk_acquire(f->c, res, "A", 20000, 0, NULL, &r2), LK_ACQUIRED);
    assert_int_equal(r2.holds, 3);
    assert_lk(f->c, lk_release(f->c, res, "A", NULL, &r), LK_STILL_HELD);
    assert_lk(f->c, lk_release(f->c, res, "A", NULL, &r), LK_STILL_HELD);
    /* While A still holds, B waits, told the holder's remaining lease. */
    assert_lk(f->c, lk_acquire_fair(f->c, res, "B", 10000, 0, NULL, 10000, &r), LK_HELD);
    assert_true(r.ttl_ms > 10000 && r.ttl_ms <= 20000);
    assert_int_equal(r.queue_pos, 0);
    assert_lk(f->c, lk_release(f->c, res, "A", NULL, &r), LK_RELEASED);
    assert_lk(f->c, lk_acquire_fair(f->c, res, "B", 10000, 0, NULL, 10000, &r), LK_ACQUIRED);
    assert_true(r.token > r1.token);
    assert_lk(f->c, lk_release(f->c, res, "B", NULL, &r), LK_RELEASED);
}

/* An idempotent retry replays the first ACQUIRED answer (token, holds, lease); HELD is not
 * recorded, so the same key may acquire later. */
static void test_idempotent_retry(void **state)
{
    lk_fixture *f = *state;
    lk_result r1, r2, r;
    lk_lock_info info;
    const char *res = res_name("idem");

    assert_lk(f->c, lk_acquire(f->c, res, "A", 10000, 0, NULL, &r), LK_ACQUIRED);
    assert_lk(f->c, lk_acquire_fair(f->c, res, "B", 10000, 0, "k-1", 10000, &r1), LK_HELD);
    assert_lk(f->c, lk_release(f->c, res, "A", NULL, &r), LK_RELEASED);
    assert_lk(f->c, lk_acquire_fair(f->c, res, "B", 10000, 0, "k-1", 10000, &r1), LK_ACQUIRED);
    assert_int_equal(r1.replayed, 0);
    assert_lk(f->c, lk_acquire_fair(f->c, res, "B", 30000, 0, "k-1", 10000, &r2), LK_ACQUIRED);
    assert_int_equal(r2.replayed, 1);
    assert_int_equal(r2.token, r1.token);
    assert_int_equal(r2.holds, 1);
    assert_int_equal(r2.ttl_ms, 10000);
    assert_lk(f->c, lk_lock_status(f->c, res, &info), LK_OK);
    assert_int_equal(info.holds, 1);
    assert_int_equal(info.last_token, r1.token);
    /* The key belongs to B's acquisition. */
    assert_lk(f->c, lk_acquire_fair(f->c, res, "C", 10000, 0, "k-1", 10000, &r), LK_EIDEMPOTENCY);
    assert_lk(f->c, lk_release(f->c, res, "B", "k-1", &r), LK_EIDEMPOTENCY);
    assert_lk(f->c, lk_release(f->c, res, "B", NULL, &r), LK_RELEASED);
}

/* Floors, the base and tokens behave as with lk_acquire. */
static void test_tokens_and_floor(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    const char *res = res_name("tokens");
    int64_t base = 0, last = 0, prev = 0;

    assert_lk(f->c, lk_acquire_fair(f->c, res, "A", 10000, 9, NULL, 0, &r), LK_ACQUIRED);
    assert_int_equal(r.token, 10);
    assert_int_equal(r.floor_raised, 1);
    assert_lk(f->c, lk_token_range(f->c, res, &base, &last), LK_OK);
    assert_int_equal(base, 9);
    assert_int_equal(last, 10);
    prev = r.token;
    assert_lk(f->c, lk_release(f->c, res, "A", NULL, &r), LK_RELEASED);
    for (int i = 0; i < 200; i++) {
        const char *owner = (i % 3 == 0) ? "A" : (i % 3 == 1) ? "B" : "C";
        assert_lk(f->c, lk_acquire_fair(f->c, res, owner, 10000, 9, NULL, 0, &r), LK_ACQUIRED);
        assert_true(r.token > prev);
        prev = r.token;
        assert_lk(f->c, lk_release(f->c, res, owner, NULL, &r), LK_RELEASED);
    }
    assert_lk(f->c, lk_token_range(f->c, res, &base, &last), LK_OK);
    assert_int_equal(base, 9);
    assert_int_equal(last, prev);
}

/* The holder's lease running out (which publishes nothing) lets the head in. */
static void test_expiry_hands_off_to_head(void **state)
{
    lk_fixture *f = *state;
    lk_result r, a;
    const char *res = res_name("expiry");

    assert_lk(f->c, lk_acquire_fair(f->c, res, "A", 200, 0, NULL, 0, &a), LK_ACQUIRED);
    enqueue(f, res, "B", 10000, 0);
    enqueue(f, res, "C", 10000, 1);
    int64_t deadline = th_now_ms() + 5000;
    lk_status st;
    while ((st = lk_acquire_fair(f->c, res, "C", 10000, 0, NULL, 10000, &r)) == LK_HELD &&
           (st = lk_acquire_fair(f->c, res, "B", 10000, 0, NULL, 10000, &r)) == LK_HELD &&
           th_now_ms() < deadline) {
        assert_true(r.ttl_ms <= 200);
        th_nap_ms((int)r.ttl_ms);
    }
    assert_lk(f->c, st, LK_ACQUIRED);
    assert_true(r.token > a.token);
    lk_lock_info info;
    assert_lk(f->c, lk_lock_status(f->c, res, &info), LK_OK);
    assert_int_equal(info.token, r.token);
    assert_lk(f->c, lk_release(f->c, res, "A", NULL, &a), LK_NOT_OWNER);
    assert_lk(f->c, lk_release(f->c, res, "B", NULL, &r), LK_RELEASED);
    assert_lk(f->c, lk_acquire_fair(f->c, res, "C", 10000, 0, NULL, 10000, &r), LK_ACQUIRED);
    assert_lk(f->c, lk_release(f->c, res, "C", NULL, &r), LK_RELEASED);
}

/* Non-fair acquisitions ignore the queue and may barge in (documented). */
static void test_non_fair_barges(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    const char *res = res_name("barge");
    char q[256];

    assert_lk(f->c, lk_acquire(f->c, res, "A", 10000, 0, NULL, &r), LK_ACQUIRED);
    enqueue(f, res, "B", 10000, 0);
    assert_lk(f->c, lk_release(f->c, res, "A", NULL, &r), LK_RELEASED);
    assert_lk(f->c, lk_acquire(f->c, res, "X", 10000, 0, NULL, &r), LK_ACQUIRED);
    queue_str(f, res, q, sizeof q);
    assert_string_equal(q, "B");
    assert_lk(f->c, lk_release(f->c, res, "X", NULL, &r), LK_RELEASED);
    assert_lk(f->c, lk_acquire_fair(f->c, res, "B", 10000, 0, NULL, 10000, &r), LK_ACQUIRED);
    assert_lk(f->c, lk_release(f->c, res, "B", NULL, &r), LK_RELEASED);
}

/* Runs a generated script (build/locklib/generated/lua: preludes + body) through EVAL,
 * bypassing the C checks, the way an operator with redis-cli could. Returns the reply (caller frees). */
static redisReply *eval_file(const lk_fixture *f, const char *name, int argc, const char **args)
{
    char path[512];
    const char *argv[16];
    size_t lens[16];

    snprintf(path, sizeof path, "%s/%s.lua", LOCKLIB_LUA_DIR, name);
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    char *text = calloc(1, 65536);
    size_t n = fread(text, 1, 65535, fp);
    fclose(fp);
    assert_true(n > 0 && argc + 2 <= 16);
    argv[0] = "EVAL";
    argv[1] = text;
    for (int i = 0; i < argc; i++) {
        argv[2 + i] = args[i];
    }
    for (int i = 0; i < argc + 2; i++) {
        lens[i] = strlen(argv[i]);
    }
    redisContext *ctx = connect_plain(f);
    redisReply *reply = redisCommandArgv(ctx, argc + 2, argv, lens);
    redisFree(ctx);
    free(text);
    assert_non_null(reply);
    return reply;
}

/* An owner spelled like an internal field is refused by the C checks and by the scripts. */
static void test_forged_owner(void **state)
{
    lk_fixture *f = *state;
    lk_result r, a;
    lk_lock_info info;
    const char *res = res_name("forged");
    char lock[256], fence[256], idem[256], base[256], queue[256], qtimeout[256], ch[256];
    char q[256];

    snprintf(lock, sizeof lock, "fg:{%s}:lock", res);
    snprintf(fence, sizeof fence, "fg:{%s}:fence", res);
    snprintf(idem, sizeof idem, "fg:{%s}:idem:", res);
    snprintf(base, sizeof base, "fg:{%s}:base", res);
    snprintf(queue, sizeof queue, "fg:{%s}:queue", res);
    snprintf(qtimeout, sizeof qtimeout, "fg:{%s}:qtimeout", res);
    snprintf(ch, sizeof ch, "fg:{%s}:released", res);
    assert_lk(f->c, lk_acquire_fair(f->c, res, "A", 10000, 0, NULL, 1000, &a), LK_ACQUIRED);
    enqueue(f, res, "B", 10000, 0);

    assert_lk(f->c, lk_acquire_fair(f->c, res, "#token", 10000, 0, NULL, 1000, &r), LK_EINVAL);
    assert_lk(f->c, lk_fair_cancel(f->c, res, "#token"), LK_EINVAL);
    const char *acq[] = {"6",    lock,     fence,   idem, base, queue, qtimeout,
                         "#token", "10000", "0",   "0",  "1000"};
    redisReply *reply = eval_file(f, "fair_acquire", 12, acq);
    assert_int_equal(reply->type, REDIS_REPLY_ERROR);
    assert_non_null(strstr(reply->str, "invalid owner"));
    freeReplyObject(reply);
    const char *cancel[] = {"3", lock, queue, qtimeout, "#token", ch};
    reply = eval_file(f, "fair_cancel", 6, cancel);
    assert_int_equal(reply->type, REDIS_REPLY_ERROR);
    assert_non_null(strstr(reply->str, "invalid owner"));
    freeReplyObject(reply);
    /* Straight to the script, a bad wait is refused too. */
    const char *bad_wait[] = {"6", lock, fence, idem, base, queue, qtimeout,
                              "C", "10000", "0", "0", "3600001"};
    reply = eval_file(f, "fair_acquire", 12, bad_wait);
    assert_int_equal(reply->type, REDIS_REPLY_ERROR);
    assert_non_null(strstr(reply->str, "invalid argument"));
    freeReplyObject(reply);

    assert_lk(f->c, lk_lock_status(f->c, res, &info), LK_OK);
    assert_int_equal(info.locked, 1);
    assert_int_equal(info.token, a.token);
    assert_int_equal(info.holds, 1);
    queue_str(f, res, q, sizeof q);
    assert_string_equal(q, "B");
    assert_lk(f->c, lk_release(f->c, res, "A", NULL, &r), LK_RELEASED);
    assert_lk(f->c, lk_acquire_fair(f->c, res, "B", 10000, 0, NULL, 1000, &r), LK_ACQUIRED);
    assert_lk(f->c, lk_release(f->c, res, "B", NULL, &r), LK_RELEASED);
}

static void test_validation(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    const char *res = res_name("valid");

    assert_lk(f->c, lk_acquire_fair(f->c, res, "A", 10000, 0, NULL, -1, &r), LK_EINVAL);
    assert_lk(f->c, lk_acquire_fair(f->c, res, "A", 10000, 0, NULL, LK_WAIT_MAX_MS + 1, &r),
              LK_EINVAL);
    assert_lk(f->c, lk_acquire_fair(f->c, res, "A", 99, 0, NULL, 0, &r), LK_EINVAL);
    assert_lk(f->c, lk_acquire_fair(f->c, res, "A", 10000, -1, NULL, 0, &r), LK_EINVAL);
    assert_lk(f->c, lk_acquire_fair(f->c, res, "A", 10000, 0, "bad key", 0, &r), LK_EINVAL);
    assert_lk(f->c, lk_acquire_fair(f->c, "a b", "A", 10000, 0, NULL, 0, &r), LK_EINVAL);
    assert_lk(f->c, lk_acquire_fair(f->c, res, "", 10000, 0, NULL, 0, &r), LK_EINVAL);
    assert_lk(f->c, lk_fair_cancel(f->c, "a{b}", "A"), LK_EINVAL);
    /* Nothing reached Redis. */
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "EXISTS fg:{%s}:queue", res), 0);
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "EXISTS fg:{%s}:fence", res), 0);
    /* The limits themselves are accepted. */
    assert_lk(f->c, lk_acquire_fair(f->c, res, "A", 10000, 0, NULL, LK_WAIT_MAX_MS, &r),
              LK_ACQUIRED);
    assert_lk(f->c, lk_release(f->c, res, "A", NULL, &r), LK_RELEASED);
}

/* One join_only call of owner on res (lk_call_many), its status returned, *r its result. */
static lk_status join(lk_fixture *f, const char *res, const char *owner, const char *hid,
                      lk_result *r)
{
    lk_call call = {.kind = LK_CALL_ACQUIRE_FAIR, .resource = res, .owner = owner,
                    .lease_ms = 10000, .wait_ms = 10000, .handoff_id = hid, .join_only = 1};
    lk_call *calls[] = {&call};
    lk_call_many(f->c, calls, 1);
    *r = call.res;
    return call.status;
}

/* A join only queues: behind a holder it is answered HELD with its place, as an attempt
 * is; on the owner's turn (a free lock, the owner first in line) or on a hold of the
 * owner's own it takes nothing (may_take) and queues nothing, and no token is minted. An
 * answer on a free lock names the owner first in line (first). */
static void test_join_only(void **state)
{
    lk_fixture *f = *state;
    lk_result r;
    char q[256];
    const char *res = res_name("join");

    assert_lk(f->c, join(f, res, "A", NULL, &r), LK_HELD); /* free, nobody in line */
    assert_int_equal(r.may_take, 1);
    assert_int_equal(r.queue_pos, -1);
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "EXISTS fg:{%s}:fence", res), 0);
    assert_lk(f->c, lk_acquire_fair(f->c, res, "A", 10000, 0, NULL, 10000, &r), LK_ACQUIRED);
    int64_t a_token = r.token;

    assert_lk(f->c, join(f, res, "B", "b1", &r), LK_HELD); /* behind A: queued */
    assert_int_equal(r.may_take, 0);
    assert_int_equal(r.queue_pos, 0);
    assert_int_equal(r.holder_token, a_token);
    assert_lk(f->c, join(f, res, "C", "c1", &r), LK_HELD);
    assert_int_equal(r.may_take, 0);
    assert_int_equal(r.queue_pos, 1);
    assert_string_equal(r.first, ""); /* held: nobody is to take it now */
    assert_lk(f->c, join(f, res, "A", NULL, &r), LK_HELD); /* the holder: its own hold */
    assert_int_equal(r.may_take, 1);
    queue_str(f, res, q, sizeof q);
    assert_string_equal(q, "B,C");

    /* Freed: B is first, so C's join queues it where it was and B's finds its turn. */
    assert_lk(f->c, lk_release(f->c, res, "A", NULL, &r), LK_RELEASED);
    assert_lk(f->c, join(f, res, "C", "c1", &r), LK_HELD);
    assert_int_equal(r.may_take, 0);
    assert_int_equal(r.queue_pos, 1);
    assert_int_equal(r.holder_token, 0);
    assert_string_equal(r.first, "B"); /* the one to take the free lock */
    assert_lk(f->c, join(f, res, "B", "b1", &r), LK_HELD);
    assert_int_equal(r.may_take, 1);
    queue_str(f, res, q, sizeof q);
    assert_string_equal(q, "B,C");
    assert_lk(f->c, lk_acquire_fair(f->c, res, "B", 10000, 0, NULL, 10000, &r), LK_ACQUIRED);
    assert_int_equal(r.token, a_token + 1); /* nothing was minted in between */
    assert_lk(f->c, lk_release(f->c, res, "B", NULL, &r), LK_RELEASED);
    assert_lk(f->c, lk_fair_cancel(f->c, res, "C"), LK_OK);

    /* Only an exclusive fair call without an idempotency key joins. */
    lk_call bad[] = {
        {.kind = LK_CALL_ACQUIRE, .resource = res, .owner = "D", .lease_ms = 10000,
         .join_only = 1},
        {.kind = LK_CALL_ACQUIRE_FAIR, .resource = res, .owner = "D", .lease_ms = 10000,
         .shared = 1, .join_only = 1},
        {.kind = LK_CALL_ACQUIRE_FAIR, .resource = res, .owner = "D", .lease_ms = 10000,
         .idem_key = "k1", .join_only = 1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        lk_call *calls[] = {&bad[i]};
        lk_call_many(f->c, calls, 1);
        assert_lk(f->c, bad[i].status, LK_EINVAL);
    }
}

/* Waiters on their own connections (as in separate processes), each polling at its own
 * pace, are served in the order they queued. */
typedef struct fifo_arg {
    const char *url;
    const char *resource;
    char owner[16];
    int *order;          /* shared: acquisition order, by waiter index */
    int *next;
    int index;
    int failed;
    pthread_mutex_t *mu;
} fifo_arg;

static void *fifo_worker(void *p)
{
    fifo_arg *a = p;
    lk_client *c = NULL;
    lk_result r;
    lk_status st = LK_EUNAVAILABLE;

    lk_client_open(&c, a->url, NULL);
    int64_t deadline = th_now_ms() + 20000;
    while (th_now_ms() < deadline) {
        st = lk_acquire_fair(c, a->resource, a->owner, 10000, 0, NULL, 20000, &r);
        if (st != LK_HELD) {
            break;
        }
        /* Come back within the hint, a little at random, so waiters race each other. */
        th_nap_ms(1 + (int)(r.ttl_ms < 5 ? r.ttl_ms : 5) * (a->index % 3));
    }
    if (st == LK_ACQUIRED) {
        pthread_mutex_lock(a->mu);
        a->order[(*a->next)++] = a->index;
        pthread_mutex_unlock(a->mu);
        th_nap_ms(10);
        a->failed = lk_release(c, a->resource, a->owner, NULL, &r) != LK_RELEASED;
    } else {
        a->failed = 1;
    }
    lk_client_close(c);
    return NULL;
}

static void test_fifo_across_connections(void **state)
{
    enum { N = 6 };
    lk_fixture *f = *state;
    lk_result r;
    const char *res = res_name("threads");
    pthread_t t[N];
    fifo_arg args[N];
    int order[N];
    int next = 0;
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

    assert_lk(f->c, lk_acquire(f->c, res, "holder", 10000, 0, NULL, &r), LK_ACQUIRED);
    for (int i = 0; i < N; i++) {
        memset(&args[i], 0, sizeof args[i]);
        args[i].url = f->redis.url;
        args[i].resource = res;
        snprintf(args[i].owner, sizeof args[i].owner, "w%d", i);
        args[i].order = order;
        args[i].next = &next;
        args[i].index = i;
        args[i].mu = &mu;
        /* Queue them in index order before they start racing. */
        enqueue(f, res, args[i].owner, 20000, i);
    }
    for (int i = 0; i < N; i++) {
        pthread_create(&t[i], NULL, fifo_worker, &args[i]);
    }
    th_nap_ms(20);
    assert_lk(f->c, lk_release(f->c, res, "holder", NULL, &r), LK_RELEASED);
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
    }
    assert_int_equal(next, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(args[i].failed, 0);
        assert_int_equal(order[i], i);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fifo_order),
        cmocka_unit_test(test_vanished_waiter_is_dropped),
        cmocka_unit_test(test_queue_keys_expire),
        cmocka_unit_test(test_cancel_of_head_publishes),
        cmocka_unit_test(test_reentrant),
        cmocka_unit_test(test_idempotent_retry),
        cmocka_unit_test(test_tokens_and_floor),
        cmocka_unit_test(test_expiry_hands_off_to_head),
        cmocka_unit_test(test_non_fair_barges),
        cmocka_unit_test(test_forged_owner),
        cmocka_unit_test(test_validation),
        cmocka_unit_test(test_join_only),
        cmocka_unit_test(test_fifo_across_connections),
    };
    return cmocka_run_group_tests_name("locklib_fair", tests, group_setup, lk_group_teardown);
}
