/* The token ledger: tokens are never handed out twice, even when Redis loses its data, the
 * process restarts, or both. Real LMDB on disk and a real redis-server without persistence. */
#include "locklib/locklib.h"
#include "st_test.h"

static void test_floor_covers_every_earlier_token(void **state)
{
    st_fixture *f = *state;
    uint64_t floor0 = store_ledger_floor(f->s);
    /* Within the ceiling: no I/O needed, and reopening still covers it. */
    assert_st(store_ledger_cover(f->s, floor0 + 10), STORE_OK);
    store_close(f->s);
    st_open(f);
    uint64_t floor1 = store_ledger_floor(f->s);
    assert_true(floor1 >= floor0 + 10);
    /* Past the ceiling: raised durably before cover returns. */
    uint64_t far = floor1 + 5 * f->opts.ledger_step;
    assert_st(store_ledger_cover(f->s, far), STORE_OK);
    store_close(f->s);
    st_open(f);
    assert_true(store_ledger_floor(f->s) >= far);
    assert_st(store_ledger_cover(f->s, 9007199254740992ULL), STORE_INVALID);
}

/* Covering the largest token (2^53 - 1) must not store a ceiling at or above 2^53: the next
 * open would read it as corrupt and refuse to open, forever. */
static void test_largest_token_keeps_the_store_openable(void **state)
{
    st_fixture *f = *state;
    const uint64_t token_max = 9007199254740991ULL;

    assert_st(store_ledger_cover(f->s, token_max), STORE_OK);
    assert_st(store_ledger_cover(f->s, token_max + 1), STORE_INVALID);
    store_close(f->s);
    st_open(f);
    assert_int_equal(store_ledger_floor(f->s), token_max);
    /* Opening again raises from the largest token: still openable, still the same floor. */
    store_close(f->s);
    st_open(f);
    assert_int_equal(store_ledger_floor(f->s), token_max);
    assert_st(store_ledger_cover(f->s, token_max), STORE_OK);
    assert_st(store_ledger_cover(f->s, UINT64_MAX), STORE_INVALID);
}

/* What the gateway does for every acquisition. */
typedef struct gateway_like {
    store *s;
    lk_client *c;
    int64_t max_handed; /* the largest token this "process" handed out */
} gateway_like;

static int64_t acquire_and_hand_out(gateway_like *g, const char *resource, const char *owner)
{
    uint64_t highest = 0;
    assert_st(store_highest(g->s, resource, &highest), STORE_OK);
    int64_t floor = (int64_t)store_ledger_floor(g->s);
    if (g->max_handed > floor) {
        floor = g->max_handed;
    }
    if ((int64_t)highest > floor) {
        floor = (int64_t)highest;
    }
    lk_result r;
    lk_status st;
    int64_t deadline = th_now_ms() + 5000;
    while ((st = lk_acquire(g->c, resource, owner, 10000, floor, NULL, &r)) == LK_EUNAVAILABLE &&
           th_now_ms() < deadline) {
        th_nap_ms(20); /* Redis restarting */
    }
    assert_int_equal(st, LK_ACQUIRED);
    assert_st(store_ledger_cover(g->s, (uint64_t)r.token), STORE_OK);
    int64_t token = r.token;
    if (token > g->max_handed) {
        g->max_handed = token;
    }
    assert_int_equal(lk_release(g->c, resource, owner, NULL, &r), LK_RELEASED);
    return token;
}

static void lose_redis(th_redis *redis)
{
    th_redis_kill(redis);
    th_redis_wipe_files(redis);
    th_redis_restart(redis);
}

static void test_redis_loss_and_restart_never_repeat_a_token(void **state)
{
    st_fixture *f = *state;
    th_redis *redis = f->group;
    gateway_like g = {f->s, NULL, 0};
    lk_client_open(&g.c, redis->url, NULL);
    assert_non_null(g.c);
    int64_t every_max = 0;

    /* Tokens handed out, some written, some never written: the largest (i == 4) is never
     * written, so after the loss below only "the largest token this process handed out"
     * stands above it (the ledger floor is still 0, the highest written is lower). */
    for (int i = 0; i < 5; i++) {
        int64_t token = acquire_and_hand_out(&g, "ledger", "alice");
        assert_true(token > every_max);
        every_max = token;
        if (i % 2 == 1) {
            store_write_result res;
            assert_st(store_write(f->s, "ledger", (uint64_t)token, "v", 1, NULL,
                                  (uint64_t)token, &res),
                      STORE_ACCEPTED);
        }
    }
    /* 1. Redis loses its data; the process lives on. */
    lose_redis(redis);
    int64_t token = acquire_and_hand_out(&g, "ledger", "bob");
    assert_true(token > every_max);
    every_max = token;

    /* 1b. Another issuer ran the counter ahead and its holder wrote with a token this process
     * never handed out; then Redis loses its data again. Only "the highest token written for
     * the resource" stands above it: the ledger floor is still 0 and this process never saw
     * the token. */
    char out[64];
    int64_t foreign = every_max + 100;
    th_redis_cmd(redis, out, sizeof out, "SET fg:{ledger}:fence %lld", (long long)foreign);
    store_write_result res;
    assert_st(store_write(f->s, "ledger", (uint64_t)foreign, "w", 1, NULL, (uint64_t)foreign,
                          &res),
              STORE_ACCEPTED);
    lose_redis(redis);
    token = acquire_and_hand_out(&g, "ledger", "frank");
    assert_true(token > foreign);
    every_max = token;

    /* 2. The process restarts (its in-memory maximum is gone) and Redis loses its data too. */
    store_close(f->s);
    st_open(f);
    g.s = f->s;
    g.max_handed = 0;
    lose_redis(redis);
    token = acquire_and_hand_out(&g, "ledger", "carol");
    assert_true(token > every_max);
    every_max = token;

    /* 3. A token far past the ceiling (a counter that ran ahead) is covered before it is
     * handed out, so a restart plus a loss still stays above it. */
    g.max_handed = 0;
    int64_t ahead = (int64_t)store_ledger_floor(f->s) + 10 * (int64_t)f->opts.ledger_step;
    th_redis_cmd(redis, out, sizeof out, "SET fg:{ledger}:fence %lld", (long long)ahead);
    token = acquire_and_hand_out(&g, "ledger", "dave");
    assert_true(token > ahead);
    store_close(f->s);
    st_open(f);
    g.s = f->s;
    g.max_handed = 0;
    lose_redis(redis);
    assert_true(acquire_and_hand_out(&g, "ledger", "erin") > token);

    lk_client_close(g.c);
}

/* The group's redis-server, without persistence so that a restart loses everything. Started
 * here and stopped in the group teardown, so a failed assertion never leaves it running
 * (holding ctest's output pipe open). */
static int group_setup(void **state)
{
    th_redis *redis = calloc(1, sizeof *redis);
    if (redis == NULL) {
        return -1;
    }
    th_redis_start(redis, 0, NULL);
    *state = redis;
    return 0;
}

static int group_teardown(void **state)
{
    th_redis *redis = *state;
    th_redis_stop(redis);
    free(redis);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_floor_covers_every_earlier_token, st_setup,
                                        st_teardown),
        cmocka_unit_test_setup_teardown(test_largest_token_keeps_the_store_openable, st_setup,
                                        st_teardown),
        cmocka_unit_test_setup_teardown(test_redis_loss_and_restart_never_repeat_a_token,
                                        st_setup, st_teardown),
    };
    return cmocka_run_group_tests_name("storage_ledger", tests, group_setup, group_teardown);
}
