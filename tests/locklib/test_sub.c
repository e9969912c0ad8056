/*
 * lk_sub: release notifications for many resources on one connection, against a real
 * redis-server. Subscriptions are confirmed as LK_SUB_SUBSCRIBED events, releases of
 * subscribed resources arrive as LK_SUB_RELEASED and others do not, an unsubscribed
 * resource goes quiet, and a killed connection is reported and recovers after reconnect.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lk_test.h"

typedef struct seen {
    int released[4];   /* by resource index */
    int subscribed[4];
    int64_t token[4];  /* lk_sub_event_token() of the last release reported */
    const lk_sub *sub;
} seen;

static const char *const names[4] = {"sub.a", "sub.b", "sub.c", "sub:d.-_"};

static void record(const char *resource, int event, void *userdata)
{
    seen *s = userdata;
    for (int i = 0; i < 4; i++) {
        if (strcmp(resource, names[i]) == 0) {
            (event == LK_SUB_RELEASED ? s->released : s->subscribed)[i]++;
            if (event == LK_SUB_RELEASED) {
                s->token[i] = lk_sub_event_token(s->sub);
            }
        }
    }
}

/* Dispatches until cond(s) holds or 5 s pass; returns the last dispatch status. */
static lk_status pump_until(lk_sub *sub, seen *s, int (*cond)(const seen *))
{
    int64_t deadline = th_now_ms() + 5000;
    lk_status st = LK_OK;
    while (!cond(s) && st == LK_OK && th_now_ms() < deadline) {
        struct pollfd p = {lk_sub_fd(sub), POLLIN, 0};
        if (poll(&p, 1, 50) > 0) {
            st = lk_sub_dispatch(sub, record, s);
        }
    }
    return st;
}

static int three_subscribed(const seen *s)
{
    return s->subscribed[0] && s->subscribed[1] && s->subscribed[3];
}

static int a_and_d_released(const seen *s)
{
    return s->released[0] && s->released[3];
}

static int d_released_twice(const seen *s)
{
    return s->released[3] >= 2;
}

static int a_subscribed_twice(const seen *s)
{
    return s->subscribed[0] >= 2;
}

/* A release somebody waits for (another owner was answered held), so it is published.
 * Returns the token of the hold released. */
static int64_t release_cycle(lk_client *c, const char *resource)
{
    lk_result r;
    assert_lk(c, lk_acquire(c, resource, "owner", 10000, 0, NULL, &r), LK_ACQUIRED);
    int64_t token = r.token;
    assert_lk(c, lk_acquire(c, resource, "waiter", 10000, 0, NULL, &r), LK_HELD);
    assert_lk(c, lk_release(c, resource, "owner", NULL, &r), LK_RELEASED);
    return token;
}

static void test_events(void **state)
{
    lk_fixture *f = *state;
    lk_sub *sub = NULL;
    seen s;

    memset(&s, 0, sizeof s);
    assert_int_equal(lk_sub_open(&sub, f->redis.url, NULL), LK_OK);
    s.sub = sub;
    assert_true(lk_sub_fd(sub) >= 0);
    assert_int_equal(lk_sub_add(sub, "bad name"), LK_EINVAL);
    assert_int_equal(lk_sub_add(sub, names[0]), LK_OK);
    assert_int_equal(lk_sub_add(sub, names[1]), LK_OK);
    assert_int_equal(lk_sub_add(sub, names[3]), LK_OK);
    assert_int_equal(pump_until(sub, &s, three_subscribed), LK_OK);
    assert_true(three_subscribed(&s));

    /* c is not subscribed: its release is not reported. */
    release_cycle(f->c, names[2]);
    int64_t a_token = release_cycle(f->c, names[0]);
    int64_t d_token = release_cycle(f->c, names[3]);
    assert_int_equal(pump_until(sub, &s, a_and_d_released), LK_OK);
    /* Each release names the hold it ended. */
    assert_int_equal(s.token[0], a_token);
    assert_int_equal(s.token[3], d_token);
    assert_int_equal(lk_sub_event_token(sub), 0); /* outside a callback */
    assert_int_equal(s.released[0], 1);
    assert_int_equal(s.released[1], 0);
    assert_int_equal(s.released[2], 0);
    assert_int_equal(s.released[3], 1);

    /* After unsubscribing a, only d is reported. */
    assert_int_equal(lk_sub_remove(sub, names[0]), LK_OK);
    release_cycle(f->c, names[0]);
    release_cycle(f->c, names[3]);
    assert_int_equal(pump_until(sub, &s, d_released_twice), LK_OK);
    assert_int_equal(s.released[0], 1);

    /* A killed connection is reported, and a reconnect plus a new subscription works. */
    assert_true(th_redis_cmd(&f->redis, NULL, 0, "CLIENT KILL TYPE pubsub") >= 1);
    lk_status st = pump_until(sub, &s, d_released_twice);
    for (int64_t deadline = th_now_ms() + 5000; st == LK_OK && th_now_ms() < deadline;) {
        struct pollfd p = {lk_sub_fd(sub), POLLIN, 0};
        if (poll(&p, 1, 50) > 0) {
            st = lk_sub_dispatch(sub, record, &s);
        }
    }
    assert_int_equal(st, LK_EUNAVAILABLE);
    assert_int_equal(lk_sub_fd(sub), -1);
    assert_int_equal(lk_sub_add(sub, names[0]), LK_EUNAVAILABLE);
    assert_int_equal(lk_sub_reconnect(sub), LK_OK);
    assert_int_equal(lk_sub_add(sub, names[0]), LK_OK);
    assert_int_equal(pump_until(sub, &s, a_subscribed_twice), LK_OK);
    lk_sub_close(sub);
}

static void test_unreachable(void **state)
{
    lk_sub *sub = NULL;
    lk_options o;
    (void)state;

    lk_options_init(&o);
    o.connect_timeout_ms = 300;
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", th_free_port());
    assert_int_equal(lk_sub_open(&sub, url, &o), LK_EUNAVAILABLE);
    assert_non_null(sub);
    assert_int_equal(lk_sub_fd(sub), -1);
    assert_true(strlen(lk_sub_errstr(sub)) > 0);
    assert_int_equal(lk_sub_reconnect(sub), LK_EUNAVAILABLE);
    lk_sub_close(sub);
    assert_int_equal(lk_sub_open(&sub, "nope://x", NULL), LK_EINVAL);
    assert_null(sub);
}

static int setup(void **state)
{
    return lk_group_setup_aof(state, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_events),
        cmocka_unit_test(test_unreachable),
    };
    return cmocka_run_group_tests(tests, setup, lk_group_teardown);
}
