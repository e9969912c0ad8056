/* locklib: batches from an event loop (lk_batch_start ... lk_batch_step), against a real
 * redis-server started by the group setup: when they start, that they answer exactly as
 * lk_call_many() does, and that a Redis that stops answering costs the caller nothing but
 * the command timeout, polled, never a blocking read. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "lk_test.h"

static int group_setup(void **state)
{
    return lk_group_setup_aof(state, 0);
}

/* A handle that has connected but loaded no script: lk_client_open() connects only. */
static lk_client *fresh_client(lk_fixture *f, int command_timeout_ms)
{
    lk_options o;
    lk_options_init(&o);
    o.connect_timeout_ms = 1000;
    o.command_timeout_ms = command_timeout_ms;
    return lk_test_open(&f->redis, &o);
}

/* Drives b the way an event loop does: poll its fd for at most its timeout, step. */
static void drive(lk_batch *b)
{
    for (;;) {
        struct pollfd pfd = {lk_batch_fd(b), POLLIN, 0};
        int readable = 0;
        if (pfd.fd >= 0) {
            int n = poll(&pfd, 1, lk_batch_timeout_ms(b));
            assert_true(n >= 0 || errno == EINTR);
            readable = n > 0;
        }
        if (lk_batch_step(b, readable)) {
            return;
        }
    }
}

static void test_start_needs_a_prepared_handle(void **state)
{
    lk_fixture *f = *state;
    lk_client *c = fresh_client(f, 1000);
    lk_call call = {.kind = LK_CALL_ACQUIRE, .resource = res_name("prep"), .owner = "alice",
                    .lease_ms = 10000};
    lk_call *calls[1] = {&call};
    lk_batch *b = (lk_batch *)&call; /* any non-NULL value: start must clear it */

    call.status = (lk_status)-1;
    /* Connected, but no script loaded: starting would block on SCRIPT LOAD. */
    assert_int_equal(lk_batch_start(c, calls, 1, &b), 0);
    assert_null(b);
    assert_int_equal((int)call.status, -1); /* untouched */

    assert_lk(c, lk_client_prepare(c), LK_OK);
    assert_int_equal(lk_batch_start(c, calls, 1, &b), 1);
    assert_non_null(b);
    drive(b);
    assert_lk(c, call.status, LK_ACQUIRED);
    assert_true(call.res.token >= 1);
    lk_client_close(c);
}

/* The calls of one batch, in order, answered as lk_call_many() answers them. */
static void test_batch_answers_as_call_many_does(void **state)
{
    lk_fixture *f = *state;
    lk_client *c = fresh_client(f, 1000);
    char res[64];
    snprintf(res, sizeof res, "%s", res_name("same"));
    lk_call acq = {.kind = LK_CALL_ACQUIRE, .resource = res, .owner = "alice",
                   .lease_ms = 10000};
    lk_call other = {.kind = LK_CALL_ACQUIRE, .resource = res, .owner = "bob",
                     .lease_ms = 10000};
    lk_call bad = {.kind = LK_CALL_ACQUIRE, .resource = "bad name", .owner = "bob",
                   .lease_ms = 10000};
    lk_call rel = {.kind = LK_CALL_RELEASE, .resource = res, .owner = "alice"};
    lk_call check = {.kind = LK_CALL_TOKEN_CHECK, .resource = res};
    lk_call *calls[5] = {&acq, &other, &bad, &rel, &check};
    lk_batch *b = NULL;

    assert_lk(c, lk_client_prepare(c), LK_OK);
    assert_int_equal(lk_batch_start(c, calls, 5, &b), 1);
    /* One batch in flight per handle: a second one does not start, and touches nothing. */
    lk_call more = {.kind = LK_CALL_RELEASE, .resource = res, .owner = "bob"};
    lk_call *more_calls[1] = {&more};
    lk_batch *b2 = NULL;
    more.status = (lk_status)-1;
    assert_int_equal(lk_batch_start(c, more_calls, 1, &b2), 0);
    assert_null(b2);
    assert_int_equal((int)more.status, -1);
    drive(b);

    assert_lk(c, acq.status, LK_ACQUIRED);
    assert_lk(c, other.status, LK_HELD);
    assert_lk(c, bad.status, LK_EINVAL); /* refused before sending, the rest went on */
    assert_string_not_equal(bad.err, "");
    assert_lk(c, rel.status, LK_RELEASED);
    assert_lk(c, check.status, LK_OK);
    assert_int_equal(check.last, acq.res.token);

    /* The handle is free again, for a batch or a blocking call. */
    lk_result r;
    assert_lk(c, lk_acquire(c, res, "bob", 10000, 0, NULL, &r), LK_ACQUIRED);
    assert_true(r.token > acq.res.token);
    lk_client_close(c);
}

/* What would block never starts: a watchdog lease (the watchdog's first start connects),
 * min_replicas (WAIT after each acquisition). */
static void test_what_would_block_never_starts(void **state)
{
    lk_fixture *f = *state;
    lk_client *c = fresh_client(f, 1000);
    lk_call call = {.kind = LK_CALL_ACQUIRE, .resource = res_name("wd"), .owner = "alice",
                    .lease_ms = LK_LEASE_WATCHDOG};
    lk_call *calls[1] = {&call};
    lk_batch *b = NULL;

    assert_lk(c, lk_client_prepare(c), LK_OK);
    assert_int_equal(lk_batch_start(c, calls, 1, &b), 0);
    assert_null(b);
    lk_client_close(c);

    lk_options o;
    lk_options_init(&o);
    o.min_replicas = 1;
    o.replica_timeout_ms = 100;
    c = lk_test_open(&f->redis, &o);
    assert_lk(c, lk_client_prepare(c), LK_EINVAL);
    call.lease_ms = 10000;
    assert_int_equal(lk_batch_start(c, calls, 1, &b), 0);
    assert_null(b);
    lk_client_close(c);
}

/* A Redis that stops answering after the batch was written (SIGSTOP: a frozen host): the
 * batch gives up at the command timeout, each call EUNAVAILABLE with the reason, and the
 * connection is dropped, so the next batch does not start until lk_client_prepare()
 * connects again, which works once Redis is back. */
static void test_a_silent_redis_times_the_batch_out(void **state)
{
    lk_fixture *f = *state;
    lk_client *c = fresh_client(f, 300);
    lk_call call = {.kind = LK_CALL_ACQUIRE, .resource = res_name("silent"), .owner = "alice",
                    .lease_ms = 10000};
    lk_call *calls[1] = {&call};
    lk_batch *b = NULL;
    int status = 0;

    assert_lk(c, lk_client_prepare(c), LK_OK);
    assert_int_equal(kill(f->redis.pid, SIGSTOP), 0);
    assert_int_equal(waitpid(f->redis.pid, &status, WUNTRACED), f->redis.pid);
    assert_true(WIFSTOPPED(status));
    assert_int_equal(lk_batch_start(c, calls, 1, &b), 1);
    assert_true(lk_batch_fd(b) >= 0); /* written, awaited */
    drive(b);
    assert_int_equal(kill(f->redis.pid, SIGCONT), 0);

    assert_lk(c, call.status, LK_EUNAVAILABLE);
    assert_non_null(strstr(call.err, "no reply within 300 ms"));
    assert_int_equal(lk_batch_start(c, calls, 1, &b), 0); /* the connection is gone */
    assert_null(b);
    /* The breaker is not shared here; prepare reconnects and loads the scripts again. */
    assert_lk(c, lk_client_prepare(c), LK_OK);
    assert_int_equal(lk_batch_start(c, calls, 1, &b), 1);
    drive(b);
    /* The first attempt ran once Redis woke up, or not: either way the lock is alice's. */
    assert_lk(c, call.status, LK_ACQUIRED);
    lk_client_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_start_needs_a_prepared_handle),
        cmocka_unit_test(test_batch_answers_as_call_many_does),
        cmocka_unit_test(test_what_would_block_never_starts),
        cmocka_unit_test(test_a_silent_redis_times_the_batch_out),
    };
    return cmocka_run_group_tests(tests, group_setup, lk_group_teardown);
}
