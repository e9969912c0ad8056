/*
 * The checker's own tests: small hand-written histories, each with one planted violation the
 * checker must flag under the right invariant, and a clean history it must pass. Times are
 * in nanoseconds; the values only need to be ordered.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "check.h"

#define MS 1000000LL

/* Builds a history from lines (NULL-terminated) and checks it with opt (may be NULL); fails
 * on a malformed line. */
static fc_result check_lines_opt(const char *const *lines, const fc_options *opt)
{
    fh_history h = {0};
    fc_result res;
    for (size_t i = 0; lines[i] != NULL; i++) {
        fh_op op;
        if (fh_parse(lines[i], &op) != 0)
            fail_msg("malformed test line %zu: %s", i, lines[i]);
        op.line = i + 1;
        assert_int_equal(fh_append(&h, &op), 0);
    }
    fc_check(&h, opt, stdout, &res);
    fh_free(&h);
    return res;
}

static fc_result check_lines(const char *const *lines)
{
    return check_lines_opt(lines, NULL);
}

/* A clean run: two grants in turn, their writes, a stale and a forged write refused, a
 * renew, reads, a heal mark and the final read. */
static const char *const clean[] = {
    "w0\tlock\tr\t0\t10\t200\t-\t1\t0\tw0-1\t1000\t0\t-\t-",
    "w0\twrite\tr\t20\t30\t200\t-\t1\t1\tw0-1\t0\t0\t-\tw0:1",
    "w0\trenew\tr\t31\t35\t200\t-\t1\t0\tw0-1\t1000\t0\t-\t-",
    "w0\tfenced_read\tr\t36\t38\t200\t-\t1\t1\tw0-1\t0\t0\t-\tw0:1",
    "w0\tunlock\tr\t40\t50\t200\t-\t1\t0\tw0-1\t0\t0\t-\t-",
    "w1\tlock\tr\t60\t70\t200\t-\t2\t0\tw1-1\t1000\t0\t-\t-",
    "w1\twrite\tr\t80\t90\t200\t-\t2\t2\tw1-1\t0\t0\t-\tw1:1",
    "c0\twrite\tr\t100\t110\t409\tstale_token\t1\t0\tstale\t0\t0\tstale\tc0:1",
    "c0\twrite\tr\t100\t110\t403\tunknown_token\t4000000000000000\t0\tforger\t0\t0\tforged\tc0:2",
    "c1\tread\tr\t120\t130\t200\t-\t2\t2\t-\t0\t0\t-\tw1:1",
    "runner\tmark\t-\t140\t140\t0\t-\t0\t0\t-\t0\t0\t-\theal",
    "w1\tunlock\tr\t150\t160\t200\t-\t2\t0\tw1-1\t0\t0\t-\t-",
    "final\tfinal\tr\t200\t210\t200\t-\t2\t2\t-\t0\t0\t-\tw1:1",
    NULL};

static void test_clean_history_passes(void **state)
{
    (void)state;
    fc_result res = check_lines(clean);
    assert_int_equal(res.hard, 0);
    assert_int_equal(res.violations[7], 0);
}

static void test_duplicate_token_to_two_owners(void **state)
{
    (void)state;
    const char *const h[] = {"w0\tlock\tr\t0\t10\t200\t-\t5\t0\tw0-1\t300\t0\t-\t-",
                             "w1\tlock\tr\t5\t15\t200\t-\t5\t0\tw1-1\t300\t0\t-\t-", NULL};
    fc_result res = check_lines(h);
    assert_true(res.violations[1] > 0);
    assert_true(res.hard > 0);
}

static void test_later_grant_smaller_token(void **state)
{
    (void)state;
    const char *const h[] = {"w0\tlock\tr\t0\t10\t200\t-\t7\t0\tw0-1\t300\t0\t-\t-",
                             "w1\tlock\tr\t20\t30\t200\t-\t6\t0\tw1-1\t300\t0\t-\t-", NULL};
    fc_result res = check_lines(h);
    assert_true(res.violations[2] > 0);
}

static void test_decreasing_tokens_by_version(void **state)
{
    (void)state;
    const char *const h[] = {"w0\twrite\tr\t0\t10\t200\t-\t9\t1\tw0-1\t0\t0\t-\ta",
                             "w1\twrite\tr\t0\t12\t200\t-\t8\t2\tw1-1\t0\t0\t-\tb", NULL};
    fc_result res = check_lines(h);
    assert_true(res.violations[3] > 0);
}

static void test_reused_version(void **state)
{
    (void)state;
    const char *const h[] = {"w0\twrite\tr\t0\t10\t200\t-\t3\t4\tw0-1\t0\t0\t-\ta",
                             "w1\twrite\tr\t0\t12\t200\t-\t4\t4\tw1-1\t0\t0\t-\tb", NULL};
    fc_result res = check_lines(h);
    assert_true(res.violations[3] > 0);
}

static void test_stale_write_accepted_after_newer_ack(void **state)
{
    (void)state;
    const char *const h[] = {
        "w1\twrite\tr\t0\t10\t200\t-\t34\t1\tw1-1\t0\t0\t-\ta",
        /* token 33 starts after 34's write was acknowledged: must be 409 */
        "w0\twrite\tr\t20\t30\t200\t-\t33\t2\tw0-1\t0\t0\tafter_pause\tb", NULL};
    fc_result res = check_lines(h);
    assert_true(res.violations[4] > 0);
}

static void test_stale_write_concurrent_is_not_flagged(void **state)
{
    (void)state;
    /* Overlapping in time, the lower token may legitimately land first. */
    const char *const h[] = {"w1\twrite\tr\t0\t30\t200\t-\t34\t2\tw1-1\t0\t0\t-\ta",
                             "w0\twrite\tr\t10\t20\t200\t-\t33\t1\tw0-1\t0\t0\t-\tb", NULL};
    fc_result res = check_lines(h);
    assert_int_equal(res.hard, 0);
}

static void test_lost_lease_renew_not_409(void **state)
{
    (void)state;
    const char *const h[] = {
        "w0\trenew\tr\t0\t10\t200\t-\t3\t0\tw0-1\t500\t0\tafter_steal\t-",
        "w0\tunlock\tr\t20\t30\t409\tnot_owner\t3\t0\tw0-1\t0\t0\tafter_steal\t-", NULL};
    fc_result res = check_lines(h);
    assert_int_equal(res.violations[4], 1);
}

/* The next holder (p, token 6) has locked but not written when the frozen client's late write
 * with token 5 arrives: it must still be refused 409 stale_token (superseded). */
static const char *const superseded_prefix[] = {
    "w0\tlock\tr\t0\t10\t200\t-\t5\t0\tw0-1\t300\t0\t-\t-",
    "p\tlock\tr\t20\t400\t200\t-\t6\t0\tp-1\t10000\t3300\t-\t-", NULL};

static void test_superseded_late_write_accepted(void **state)
{
    (void)state;
    const char *const h[] = {
        superseded_prefix[0], superseded_prefix[1],
        "w0\twrite\tr\t500\t510\t200\t-\t5\t1\tw0-1\t0\t0\tafter_pause\tw0:5", NULL};
    fc_result res = check_lines(h);
    assert_int_equal(res.violations[4], 1);
    assert_int_equal(res.fenced, 0);
}

static void test_superseded_late_write_refused_wrongly(void **state)
{
    (void)state;
    /* 403 is not the answer for a token that was issued: it must be 409 stale_token. */
    const char *const h[] = {
        superseded_prefix[0], superseded_prefix[1],
        "w0\twrite\tr\t500\t510\t403\tunknown_token\t5\t0\tw0-1\t0\t0\tafter_pause\tw0:5",
        NULL};
    fc_result res = check_lines(h);
    assert_int_equal(res.violations[4], 1);
}

static void test_superseded_late_write_fenced(void **state)
{
    (void)state;
    const char *const h[] = {
        superseded_prefix[0], superseded_prefix[1],
        "w0\twrite\tr\t500\t510\t409\tstale_token\t5\t0\tw0-1\t0\t0\tafter_pause\tw0:5",
        "w0\trenew\tr\t520\t530\t409\tnot_owner\t5\t0\tw0-1\t300\t0\tafter_pause\t-",
        "w0\tunlock\tr\t540\t550\t409\tnot_owner\t5\t0\tw0-1\t0\t0\tafter_pause\t-",
        "p\twrite\tr\t560\t570\t200\t-\t6\t1\tp-1\t0\t0\t-\tp:6",
        "p\tunlock\tr\t580\t590\t200\t-\t6\t0\tp-1\t0\t0\t-\t-", NULL};
    fc_result res = check_lines(h);
    assert_int_equal(res.hard, 0);
    assert_int_equal(res.fenced, 1);
    assert_int_equal(res.superseded, 1);
}

static void test_superseded_needs_a_finished_grant(void **state)
{
    (void)state;
    /* The newer grant had not finished when the late write started: either order is legal. */
    const char *const h[] = {
        superseded_prefix[0],
        "p\tlock\tr\t20\t600\t200\t-\t6\t0\tp-1\t10000\t3300\t-\t-",
        "w0\twrite\tr\t500\t510\t200\t-\t5\t1\tw0-1\t0\t0\tafter_pause\tw0:5", NULL};
    fc_result res = check_lines(h);
    assert_int_equal(res.hard, 0);
}

/* Invariant 12: the newer grant (token 6) was answered at 400, before the late fenced read
 * with token 5 started: its 200 is a violation. */
static void test_fenced_read_after_newer_grant(void **state)
{
    (void)state;
    const char *const h[] = {
        superseded_prefix[0], superseded_prefix[1],
        "w0\tfenced_read\tr\t500\t510\t200\t-\t5\t0\tw0-1\t0\t0\tafter_pause\t-", NULL};
    fc_result res = check_lines(h);
    assert_int_equal(res.violations[12], 1);
    assert_int_equal(res.hard, 1);
    assert_int_equal(res.fenced_reads, 0);
}

/* The same history where Redis may lose grants and the store is LMDB (--lost-grants): the
 * read is counted but only reported, as docs/api.md promises nothing more there; strict
 * leases do not change that. */
static void test_fenced_read_after_lost_grant_is_reported(void **state)
{
    (void)state;
    const char *const h[] = {
        superseded_prefix[0], superseded_prefix[1],
        "w0\tfenced_read\tr\t500\t510\t200\t-\t5\t0\tw0-1\t0\t0\tafter_pause\t-", NULL};
    fc_options lost = {.lost_grants = 1};
    fc_result res = check_lines_opt(h, &lost);
    assert_int_equal(res.violations[12], 1);
    assert_int_equal(res.hard, 0);
}

/* Refused 409 stale_token it counts as fenced off; a fenced read that started before the newer
 * grant was answered may be answered either way; so may one whose answer is unknown. */
static void test_fenced_read_refused_or_concurrent(void **state)
{
    (void)state;
    const char *const h[] = {
        superseded_prefix[0], superseded_prefix[1],
        "w0\tfenced_read\tr\t300\t410\t200\t-\t5\t0\tw0-1\t0\t0\t-\t-",
        "w0\tfenced_read\tr\t500\t510\t409\tstale_token\t5\t0\tw0-1\t0\t0\tafter_pause\t-",
        "c0\tfenced_read\tr\t520\t530\t0\tcurl28\t5\t0\t-\t0\t0\tstale\t-",
        "p\tfenced_read\tr\t540\t550\t200\t-\t6\t0\tp-1\t0\t0\t-\t-", NULL};
    fc_result res = check_lines(h);
    assert_int_equal(res.violations[12], 0);
    assert_int_equal(res.fenced_reads, 1);
}

/* Invariant 13: two shared holders share a token and overlap (no violation of 1, 2 or 7);
 * an exclusive grant answered while one of their leases surely ran is a violation, and so
 * is a shared grant inside an exclusive lease; an exclusive grant after the last shared
 * holder's unlock started is not. */
static void test_exclusive_inside_shared_lease(void **state)
{
    (void)state;
    const char *const ok[] = {
        "r0\tlock\tr\t0\t10\t200\t-\t3\t0\tr0-1\t1000\t0\tshared\t-",
        "r1\tlock\tr\t5\t15\t200\t-\t3\t0\tr1-1\t1000\t0\tshared\t-",
        "r0\tunlock\tr\t20\t30\t200\t-\t3\t0\tr0-1\t0\t0\tshared\t-",
        "r1\tunlock\tr\t40\t50\t200\t-\t3\t0\tr1-1\t0\t0\tshared\t-",
        "w0\tlock\tr\t45\t60\t200\t-\t4\t0\tw0-1\t1000\t0\t-\t-",
        "w0\tunlock\tr\t70\t80\t200\t-\t4\t0\tw0-1\t0\t0\t-\t-",
        "r2\tlock\tr\t75\t90\t200\t-\t4\t0\tr2-1\t1000\t0\tshared\t-", NULL};
    fc_options strict = {1};
    fc_result res = check_lines_opt(ok, &strict);
    assert_int_equal(res.hard, 0);

    const char *const bad[] = {
        "r0\tlock\tr\t0\t10\t200\t-\t3\t0\tr0-1\t1000\t0\tshared\t-",
        "w0\tlock\tr\t20\t30\t200\t-\t4\t0\tw0-1\t1000\t0\t-\t-",
        "r1\tlock\tr\t40\t50\t200\t-\t4\t0\tr1-1\t1000\t0\tshared\t-", NULL};
    res = check_lines(bad);
    assert_int_equal(res.violations[13], 2);
    assert_int_equal(res.hard, 2);
}

/* Invariant 15: a write with a token granted in shared mode answered 200 is a violation;
 * answered 409 not_exclusive it is not, nor is a write that started before the shared grant
 * was answered, nor one with the next exclusive token. */
static void test_write_with_shared_token(void **state)
{
    (void)state;
    const char *const ok[] = {
        "w0	lock	r	0	10	200	-	3	0	w0-1	1000	0	-	-",
        "w0	write	r	20	30	200	-	3	1	w0-1	0	0	-	w0:1",
        "w0	unlock	r	40	50	200	-	3	0	w0-1	0	0	-	-",
        "r0	lock	r	60	70	200	-	3	0	r0-1	1000	0	shared	-",
        "r0	write	r	80	90	409	not_exclusive	3	0	r0-1	0	0	shared	r0:1",
        "r0	unlock	r	100	110	200	-	3	0	r0-1	0	0	shared	-",
        "w1	lock	r	120	130	200	-	4	0	w1-1	1000	0	-	-",
        "w1	write	r	140	150	200	-	4	2	w1-1	0	0	-	w1:1", NULL};
    fc_result res = check_lines(ok);
    assert_int_equal(res.violations[15], 0);
    assert_int_equal(res.hard, 0);

    const char *const bad[] = {
        "w0	lock	r	0	10	200	-	3	0	w0-1	300	0	-	-",
        "r0	lock	r	400	410	200	-	3	0	r0-1	1000	0	shared	-",
        "w0	write	r	420	430	200	-	3	1	w0-1	0	0	-	w0:1", NULL};
    res = check_lines(bad);
    assert_int_equal(res.violations[15], 1);
    assert_true(res.hard >= 1);
}

/* A request in flight while the gateway was frozen for 4 s may take that much longer, and
 * may end without an answer; one outside the window may not; nothing but latency is excused. */
static void test_freeze_window_excuses_latency_only(void **state)
{
    (void)state;
    const char *const h[] = {
        "runner\tmark\t-\t1000000000\t1000000000\t0\t-\t0\t0\t-\t0\t0\t-\tfreeze",
        "runner\tmark\t-\t5000000000\t5000000000\t0\t-\t0\t0\t-\t0\t0\t-\tthaw",
        /* 8.5 s for wait_ms 0, overlapping the freeze: excused (limit 5 s + 4 s) */
        "w0\tlock\tr\t500000000\t9000000000\t200\t-\t1\t0\tw0-1\t300\t0\t-\t-",
        /* no answer after 6 s, its client gave up during the freeze: excused */
        "w1\tlock\tq\t900000000\t6900000000\t0\tcurl28\t0\t0\tw1-1\t300\t0\t-\t-",
        /* 5.5 s, after the thaw: not excused */
        "w2\tlock\tr2\t6000000000\t11500000000\t200\t-\t1\t0\tw2-1\t300\t0\t-\t-",
        /* 9.5 s across the freeze: more than 5 s + 4 s */
        "w3\tlock\tr3\t500000000\t10000000000\t200\t-\t1\t0\tw3-1\t300\t0\t-\t-",
        /* a 500 during the freeze is never excused */
        "w4\tlock\tr4\t2000000000\t2000000010\t500\tinternal\t0\t0\tw4-1\t300\t0\t-\t-",
        NULL};
    fc_result res = check_lines(h);
    assert_int_equal(res.violations[8], 3);
}

static void test_freeze_window_keeps_safety(void **state)
{
    (void)state;
    const char *const h[] = {
        "runner\tmark\t-\t0\t0\t0\t-\t0\t0\t-\t0\t0\t-\tfreeze",
        "w1\twrite\tr\t10\t20\t200\t-\t34\t1\tw1-1\t0\t0\t-\ta",
        "w0\twrite\tr\t30\t40\t200\t-\t33\t2\tw0-1\t0\t0\t-\tb",
        "w2\tlock\tr\t50\t60\t200\t-\t7\t0\tw2-1\t300\t0\t-\t-",
        "w3\tlock\tr\t50\t60\t200\t-\t7\t0\tw3-1\t300\t0\t-\t-",
        "runner\tmark\t-\t100\t100\t0\t-\t0\t0\t-\t0\t0\t-\tthaw", NULL};
    fc_result res = check_lines(h);
    assert_true(res.violations[4] > 0);
    assert_true(res.violations[1] > 0);
}

/* wd-1 held r with a 1 s lease (renewed by its watchdog) and was killed at 2 s; p waits 4 s
 * from 2.001 s, past the lease. */
#define HOLDER_LINES                                                                    \
    "wd\tlock\tr\t0\t10\t200\t-\t3\t0\twd-1\t1000\t5000\twatchdog\t-",               \
        "wd\trenew\tr\t1000000000\t1000000010\t200\t-\t3\t0\twd-1\t1000\t0\twatchdog\t-", \
        "p\tmark\tr\t2000000000\t2000000000\t0\t-\t0\t0\twd-1\t1000\t0\t-\tholder_killed"

static void test_takeover_refused(void **state)
{
    (void)state;
    const char *const h[] = {
        HOLDER_LINES,
        "p\tlock\tr\t2001000000\t6001000000\t409\tlocked\t0\t0\tp-1\t2000\t4000\t-\t-",
        NULL};
    fc_result res = check_lines(h);
    assert_int_equal(res.violations[8], 1);
    assert_int_equal(res.takeovers, 0);
}

static void test_takeover_granted(void **state)
{
    (void)state;
    const char *const h[] = {
        HOLDER_LINES,
        "p\tlock\tr\t2001000000\t3100000000\t200\t-\t4\t0\tp-1\t2000\t4000\t-\t-", NULL};
    fc_options strict = {1};
    fc_result res = check_lines_opt(h, &strict);
    assert_int_equal(res.hard, 0);
    assert_int_equal(res.takeovers, 1);
}

static void test_takeover_inside_renewed_lease(void **state)
{
    (void)state;
    /* Granted at 1.5 s, while the lease renewed at 1 s ran to 2 s: an overlap, hard when
     * strict; and its token is not above the holder's. */
    const char *const h[] = {
        HOLDER_LINES,
        "p\tlock\tr\t1100000000\t1500000000\t200\t-\t3\t0\tp-1\t2000\t4000\t-\t-", NULL};
    fc_options strict = {1};
    fc_result res = check_lines_opt(h, &strict);
    assert_int_equal(res.violations[7], 1);
    assert_true(res.violations[1] > 0);
    assert_true(res.hard >= 2);
}

static void test_takeover_wait_too_short_is_not_judged(void **state)
{
    (void)state;
    const char *const h[] = {
        HOLDER_LINES,
        "p\tlock\tr\t2001000000\t2501000000\t409\tlocked\t0\t0\tp-1\t2000\t500\t-\t-",
        NULL};
    fc_result res = check_lines(h);
    assert_int_equal(res.hard, 0);
    assert_int_equal(res.takeovers, 0);
}

static void test_strict_leases_overlap_is_hard(void **state)
{
    (void)state;
    const char *const h[] = {"w0\tlock\tr\t0\t10\t200\t-\t1\t0\tw0-1\t1000\t0\t-\t-",
                             "w1\tlock\tr\t20\t30\t200\t-\t2\t0\tw1-1\t1000\t0\t-\t-", NULL};
    fc_options strict = {1};
    fc_result res = check_lines_opt(h, &strict);
    assert_int_equal(res.violations[7], 1);
    assert_int_equal(res.hard, 1);
}

/* c1's lock was granted while its process was frozen (redis_timeout stops the whole
 * workload) and answered 3.1 s after it asked, past its 1 s lease: from c1's view it never held
 * the lock, so w2's grant in between overlaps nothing, even when strict (CI saw this history
 * flagged before empty windows were skipped). */
static void test_grant_answered_past_its_lease_is_no_window(void **state)
{
    (void)state;
    const char *const h[] = {"c1\tlock\tr\t0\t3100000000\t200\t-\t1\t0\tc1-1\t1000\t3000\t-\t-",
                             "w2\tlock\tr\t3000000000\t3050000000\t200\t-\t2\t0\tw2-1\t1000\t0"
                             "\t-\t-",
                             NULL};
    fc_options strict = {1};
    fc_result res = check_lines_opt(h, &strict);
    assert_int_equal(res.violations[7], 0);
    assert_int_equal(res.hard, 0);
}

/* w0 holds r for 1 s; w1's grant at 0.1 s (a 1 ms lease) and w2's at 0.2 s both overlap it.
 * In start order w2's neighbour is w1, whose lease had ended: only a comparison with every
 * earlier window finds the second overlap. */
static void test_overlap_with_a_window_before_the_previous(void **state)
{
    (void)state;
    const char *const h[] = {"w0\tlock\tr\t0\t10\t200\t-\t1\t0\tw0-1\t1000\t0\t-\t-",
                             "w1\tlock\tr\t100000000\t100000010\t200\t-\t2\t0\tw1-1\t1\t0"
                             "\t-\t-",
                             "w2\tlock\tr\t200000000\t200000010\t200\t-\t3\t0\tw2-1\t1000\t0"
                             "\t-\t-",
                             NULL};
    fc_options strict = {1};
    fc_result res = check_lines_opt(h, &strict);
    assert_int_equal(res.violations[7], 2);
    assert_int_equal(res.hard, 2);
}

/* An unlock answered 503 (Redis died after running it) may have released the lock: a grant
 * to another owner after it started is no overlap, even when strict (a grant before it is,
 * test_strict_leases_overlap_is_hard). */
static void test_unlock_503_ends_the_window(void **state)
{
    (void)state;
    const char *const h[] = {"w0\tlock\tr\t0\t10\t200\t-\t1\t0\tw0-1\t1000\t0\t-\t-",
                             "w0\tunlock\tr\t20\t40\t503\tbackend_unavailable\t1\t0\tw0-1\t0"
                             "\t0\t-\t-",
                             "w1\tlock\tr\t30\t50\t200\t-\t2\t0\tw1-1\t1000\t0\t-\t-", NULL};
    fc_options strict = {1};
    fc_result res = check_lines_opt(h, &strict);
    assert_int_equal(res.violations[7], 0);
    assert_int_equal(res.hard, 0);
}

static void test_final_read_older_than_last_ack(void **state)
{
    (void)state;
    const char *const h[] = {"w0\twrite\tr\t0\t10\t200\t-\t1\t1\tw0-1\t0\t0\t-\ta",
                             "w1\twrite\tr\t20\t30\t200\t-\t2\t2\tw1-1\t0\t0\t-\tb",
                             "final\tfinal\tr\t40\t50\t200\t-\t1\t1\t-\t0\t0\t-\ta", NULL};
    fc_result res = check_lines(h);
    assert_true(res.violations[5] > 0);
}

static void test_read_of_refused_write(void **state)
{
    (void)state;
    const char *const h[] = {"w0\twrite\tr\t0\t10\t409\tstale_token\t1\t0\tw0-1\t0\t0\t-\ta",
                             "final\tfinal\tr\t40\t50\t200\t-\t1\t1\t-\t0\t0\t-\ta", NULL};
    fc_result res = check_lines(h);
    assert_true(res.violations[5] > 0);
}

static void test_read_of_unknown_outcome_write_passes(void **state)
{
    (void)state;
    const char *const h[] = {"w0\twrite\tr\t0\t10\t200\t-\t1\t1\tw0-1\t0\t0\t-\ta",
                             "w1\twrite\tr\t20\t30\t0\tcurl7\t2\t0\tw1-1\t0\t0\t-\tb",
                             "final\tfinal\tr\t40\t50\t200\t-\t2\t2\t-\t0\t0\t-\tb", NULL};
    fc_result res = check_lines(h);
    assert_int_equal(res.hard, 0);
}

/* A 503 outcome_unknown write is unacknowledged, not refused: its commit reached the store
 * and the answer was lost, so its bytes may be what a later read finds. */
static void test_read_of_outcome_unknown_write_passes(void **state)
{
    (void)state;
    const char *const h[] = {
        "w0\twrite\tr\t0\t10\t200\t-\t1\t1\tw0-1\t0\t0\t-\ta",
        "w1\twrite\tr\t20\t30\t503\toutcome_unknown\t2\t0\tw1-1\t0\t0\t-\tb",
        "final\tfinal\tr\t40\t50\t200\t-\t2\t2\t-\t0\t0\t-\tb", NULL};
    fc_result res = check_lines(h);
    assert_int_equal(res.hard, 0);
}

/* A 503 backend_unavailable write changed nothing: its bytes must never be read. */
static void test_read_of_backend_unavailable_write(void **state)
{
    (void)state;
    const char *const h[] = {
        "w0\twrite\tr\t0\t10\t200\t-\t1\t1\tw0-1\t0\t0\t-\ta",
        "w1\twrite\tr\t20\t30\t503\tbackend_unavailable\t2\t0\tw1-1\t0\t0\t-\tb",
        "final\tfinal\tr\t40\t50\t200\t-\t2\t2\t-\t0\t0\t-\tb", NULL};
    fc_result res = check_lines(h);
    assert_true(res.violations[5] > 0);
}

static void test_forged_token_accepted(void **state)
{
    (void)state;
    const char *const h[] = {
        "c0\twrite\tr\t0\t10\t200\t-\t4000000000000000\t1\tforger\t0\t0\tforged\tx", NULL};
    fc_result res = check_lines(h);
    assert_true(res.violations[6] > 0);
}

static void test_forged_write_visible(void **state)
{
    (void)state;
    const char *const h[] = {
        "c0\twrite\tr\t0\t10\t403\tunknown_token\t4000000000000000\t0\tforger\t0\t0\tforged\tx",
        "c1\tread\tr\t20\t30\t200\t-\t4000000000000000\t1\t-\t0\t0\t-\tx", NULL};
    fc_result res = check_lines(h);
    assert_true(res.violations[6] > 0);
}

static void test_status_500(void **state)
{
    (void)state;
    const char *const h[] = {"w0\tlock\tr\t0\t10\t500\tinternal\t0\t0\tw0-1\t300\t0\t-\t-",
                             NULL};
    fc_result res = check_lines(h);
    assert_true(res.violations[8] > 0);
}

static void test_request_over_wait_plus_5s(void **state)
{
    (void)state;
    const char *const h[] = {"w0\tlock\tr\t0\t6600000000\t409\tlocked\t0\t0\tw0-1\t300\t1500\t-\t-",
                             NULL};
    fc_result res = check_lines(h);
    assert_true(res.violations[8] > 0);
}

static void test_no_success_after_heal(void **state)
{
    (void)state;
    const char *const h[] = {"runner\tmark\t-\t0\t0\t0\t-\t0\t0\t-\t0\t0\t-\theal",
                             "w0\tlock\tr\t10\t20\t503\tbackend_unavailable\t0\t0\tw0-1\t300\t0\t-\t-",
                             "w0\tlock\tr\t6000000000\t6000000010\t200\t-\t1\t0\tw0-2\t300\t0\t-\t-",
                             NULL};
    fc_result res = check_lines(h);
    assert_true(res.violations[8] > 0);
}

static void test_overlap_is_reported_not_failed(void **state)
{
    (void)state;
    const char *const h[] = {"w0\tlock\tr\t0\t10\t200\t-\t1\t0\tw0-1\t1000\t0\t-\t-",
                             "w1\tlock\tr\t20\t30\t200\t-\t2\t0\tw1-1\t1000\t0\t-\t-", NULL};
    fc_result res = check_lines(h);
    assert_int_equal(res.violations[7], 1);
    assert_int_equal(res.hard, 0);
}

/* A forced release of w0's token 1 (the force line's token) at 40..50, then w1's grant: the
 * holder's late write, renew and unlock are refused, and its lease window ends at the force,
 * so strict leases see no overlap with w1's. */
static const char *const forced_clean[] = {
    "w0\tlock\tr\t0\t10\t200\t-\t1\t0\tw0-1\t1000\t0\t-\t-",
    "w0\twrite\tr\t20\t30\t200\t-\t1\t1\tw0-1\t0\t0\t-\tw0:1",
    "op\tforce\tr\t40\t50\t200\t-\t1\t0\t-\t0\t0\t-\t-",
    "w1\tlock\tr\t60\t70\t200\t-\t3\t0\tw1-1\t1000\t0\t-\t-",
    "w0\twrite\tr\t80\t90\t409\tstale_token\t1\t0\tw0-1\t0\t0\t-\tw0:2",
    "w0\trenew\tr\t91\t95\t409\tnot_owner\t0\t0\tw0-1\t1000\t0\t-\t-",
    "w0\tunlock\tr\t96\t99\t409\tnot_owner\t0\t0\tw0-1\t0\t0\t-\t-",
    "w1\twrite\tr\t100\t110\t200\t-\t3\t2\tw1-1\t0\t0\t-\tw1:1",
    "w1\tunlock\tr\t150\t160\t200\t-\t3\t0\tw1-1\t0\t0\t-\t-",
    "final\tfinal\tr\t200\t210\t200\t-\t3\t2\t-\t0\t0\t-\tw1:1",
    NULL};

static void test_forced_release_fences_the_holder(void **state)
{
    (void)state;
    fc_options strict = {1};
    fc_result res = check_lines_opt(forced_clean, &strict);
    assert_int_equal(res.hard, 0);
    assert_int_equal(res.violations[7], 0);
    assert_int_equal(res.violations[10], 0);
}

/* The same with the holder's late write accepted after the force's answer, though nobody
 * wrote or locked since (a release that only deleted the lock), and its renew answered. */
static void test_forced_token_accepted_after_the_release(void **state)
{
    (void)state;
    static const char *const lines[] = {
        "w0\tlock\tr\t0\t10\t200\t-\t1\t0\tw0-1\t1000\t0\t-\t-",
        "op\tforce\tr\t40\t50\t200\t-\t1\t0\t-\t0\t0\t-\t-",
        "w0\twrite\tr\t60\t70\t200\t-\t1\t1\tw0-1\t0\t0\t-\tw0:1",
        "w0\trenew\tr\t71\t75\t200\t-\t1\t0\tw0-1\t1000\t0\t-\t-",
        "w0\tunlock\tr\t76\t79\t200\t-\t1\t0\tw0-1\t0\t0\t-\t-",
        "final\tfinal\tr\t200\t210\t200\t-\t1\t1\t-\t0\t0\t-\tw0:1",
        NULL};
    fc_result res = check_lines(lines);
    assert_int_equal(res.violations[10], 3);
    assert_true(res.hard >= 3);
}

/* A write with the token that overlaps the force (started before its answer) may have been
 * accepted before the release took effect: not judged. Nor is the holder's unlock after it
 * took the lock again. */
static void test_forced_release_judges_only_after_its_answer(void **state)
{
    (void)state;
    static const char *const lines[] = {
        "w0\tlock\tr\t0\t10\t200\t-\t1\t0\tw0-1\t1000\t0\t-\t-",
        "w0\twrite\tr\t45\t55\t200\t-\t1\t1\tw0-1\t0\t0\t-\tw0:1",
        "op\tforce\tr\t40\t50\t200\t-\t1\t0\t-\t0\t0\t-\t-",
        "w0\tlock\tr\t60\t70\t200\t-\t3\t0\tw0-1\t1000\t0\t-\t-",
        "w0\tunlock\tr\t80\t90\t200\t-\t3\t0\tw0-1\t0\t0\t-\t-",
        "final\tfinal\tr\t200\t210\t200\t-\t1\t1\t-\t0\t0\t-\tw0:1",
        NULL};
    fc_result res = check_lines(lines);
    assert_int_equal(res.violations[10], 0);
    assert_int_equal(res.hard, 0);
}

/* Transfers between accounts x, y, z (100 each): invariant 11. */
#define TXN_TOTAL "runner\tmark\t-\t1\t1\t0\t-\t300\t0\t-\t0\t0\t-\ttotal"
#define TXN2 "c1\ttxn\ty,z\t30\t40\t200\t-\t0\t0\tc1-1\t0\t0\t-\tc0-1:110>100@2;init:100>110@1"
#define BAL(acct, value) "final\tbalance\t" acct "\t50\t60\t200\t-\t0\t0\t-\t0\t0\t-\t" value

static void test_transfers_clean(void **state)
{
    (void)state;
    const char *const lines[] = {
        TXN_TOTAL, "c0\ttxn\tx,y\t10\t20\t200\t-\t0\t0\tc0-1\t0\t0\t-\tinit:100>90@1;init:100>110@1",
        TXN2,
        /* A paused client's transfer, refused whole. */
        "c2\ttxn\tx,z\t41\t45\t409\tstale_token\t0\t0\tc2-1\t0\t0\tafter_pause\tinit:100>50@1;init:100>150@1",
        /* An answer lost: committed whole (the next one read it) or not at all. */
        "c3\ttxn\tx,z\t46\t47\t503\toutcome_unknown\t0\t0\tc3-1\t0\t0\t-\tc0-1:90>80@2;c1-1:110>120@2",
        BAL("x", "80 c3-1"), BAL("y", "100 c1-1"), BAL("z", "120 c3-1"), NULL};
    fc_result res = check_lines(lines);
    assert_int_equal(res.hard, 0);
}

static void test_transfer_half_visible(void **state)
{
    (void)state;
    const char *const lines[] = {
        TXN_TOTAL, "c0\ttxn\tx,y\t10\t20\t503\t-\t0\t0\tc0-1\t0\t0\t-\tinit:100>90@1;init:100>110@1",
        BAL("x", "90 c0-1"), BAL("y", "100 init"), BAL("z", "100 init"), NULL};
    fc_result res = check_lines(lines);
    assert_true(res.violations[11] >= 2); /* half visible, and the sum is 290 */
}

static void test_transfer_lost_update(void **state)
{
    (void)state;
    /* A stale writer, which read the opening balances, was accepted after T1. */
    const char *const lines[] = {
        TXN_TOTAL, "c0\ttxn\tx,y\t10\t20\t200\t-\t0\t0\tc0-1\t0\t0\t-\tinit:100>90@1;init:100>110@1",
        "c2\ttxn\tx,y\t21\t25\t200\t-\t0\t0\tc2-1\t0\t0\tafter_pause\tinit:100>80@1;init:100>120@1",
        BAL("x", "80 c2-1"), BAL("y", "120 c2-1"), BAL("z", "100 init"), NULL};
    fc_result res = check_lines(lines);
    assert_true(res.violations[11] >= 1);
    assert_true(res.hard >= 1);
}

/* T1's lease ran out while its request was in flight; c1, granted y during it, read y's
 * older value and wrote over T1's: excused (reported), not a violation. The same with c1's
 * grant before T1's request started is a lost update (the check should have refused T1). */
static void test_transfer_in_flight_expiry(void **state)
{
    (void)state;
    const char *const lines[] = {
        TXN_TOTAL, "c0\ttxn\tx,y\t10\t20\t200\t-\t0\t0\tc0-1\t0\t0\t-\tinit:100>90@1;init:100>110@1",
        "c1\tlock\ty\t12\t15\t200\t-\t2\t0\tc1-o\t1000\t0\t-\t-",
        "c1\ttxn\ty,z\t30\t40\t200\t-\t0\t0\tc1-1\t0\t0\t-\tinit:100>95@2;init:100>105@1",
        BAL("x", "90 c0-1"), BAL("y", "95 c1-1"), BAL("z", "105 c1-1"), NULL};
    fc_result res = check_lines(lines);
    assert_int_equal(res.hard, 0);
    assert_int_equal(res.violations[0], 1);
    const char *const late[] = {
        TXN_TOTAL, "c0\ttxn\tx,y\t10\t20\t200\t-\t0\t0\tc0-1\t0\t0\t-\tinit:100>90@1;init:100>110@1",
        "c1\tlock\ty\t5\t8\t200\t-\t2\t0\tc1-o\t1000\t0\t-\t-",
        "c1\ttxn\ty,z\t30\t40\t200\t-\t0\t0\tc1-1\t0\t0\t-\tinit:100>95@2;init:100>105@1",
        BAL("x", "90 c0-1"), BAL("y", "95 c1-1"), BAL("z", "105 c1-1"), NULL};
    res = check_lines(late);
    assert_true(res.violations[11] >= 1);
}

static void test_transfer_refused_but_written(void **state)
{
    (void)state;
    const char *const lines[] = {
        TXN_TOTAL, "c0\ttxn\tx,y\t10\t20\t409\tstale_token\t0\t0\tc0-1\t0\t0\t-\tinit:100>90@1;init:100>110@1",
        BAL("x", "90 c0-1"), BAL("y", "110 c0-1"), BAL("z", "100 init"), NULL};
    fc_result res = check_lines(lines);
    assert_int_equal(res.violations[11], 1);
}

/* 503 backend_unavailable changed nothing; 503 outcome_unknown may have committed. */
static void test_transfer_503_written(void **state)
{
    (void)state;
    const char *const failed[] = {
        TXN_TOTAL,
        "c0\ttxn\tx,y\t10\t20\t503\tbackend_unavailable\t0\t0\tc0-1\t0\t0\t-\t"
        "init:100>90@1;init:100>110@1",
        BAL("x", "90 c0-1"), BAL("y", "110 c0-1"), BAL("z", "100 init"), NULL};
    fc_result res = check_lines(failed);
    assert_int_equal(res.violations[11], 1);
    const char *const unknown[] = {
        TXN_TOTAL,
        "c0\ttxn\tx,y\t10\t20\t503\toutcome_unknown\t0\t0\tc0-1\t0\t0\t-\t"
        "init:100>90@1;init:100>110@1",
        BAL("x", "90 c0-1"), BAL("y", "110 c0-1"), BAL("z", "100 init"), NULL};
    res = check_lines(unknown);
    assert_int_equal(res.hard, 0);
}

static void test_transfer_not_conserved(void **state)
{
    (void)state;
    const char *const lines[] = {
        TXN_TOTAL, "c0\ttxn\tx,y\t10\t20\t200\t-\t0\t0\tc0-1\t0\t0\t-\tinit:100>90@1;init:100>115@1",
        BAL("x", "90 c0-1"), BAL("y", "115 c0-1"), BAL("z", "100 init"), NULL};
    fc_result res = check_lines(lines);
    assert_int_equal(res.violations[11], 2); /* its own sum, and the final total */
}

static void test_transfer_acked_then_lost(void **state)
{
    (void)state;
    const char *const lines[] = {
        TXN_TOTAL, "c0\ttxn\tx,y\t10\t20\t200\t-\t0\t0\tc0-1\t0\t0\t-\tinit:100>90@1;init:100>110@1",
        BAL("x", "100 init"), BAL("y", "100 init"), BAL("z", "100 init"), NULL};
    fc_result res = check_lines(lines);
    assert_int_equal(res.violations[11], 1);
}

static void test_format_parse_round_trip(void **state)
{
    (void)state;
    fh_op op = {0}, back;
    char line[2048];
    snprintf(op.client, sizeof op.client, "w3");
    op.kind = FH_WRITE;
    snprintf(op.resource, sizeof op.resource, "res-1");
    op.start_ns = 5 * MS;
    op.end_ns = 9 * MS;
    op.status = 409;
    snprintf(op.error, sizeof op.error, "stale_token");
    op.token = 42;
    op.flags = FH_F_AFTER_PAUSE | FH_F_STALE | FH_F_WATCHDOG | FH_F_HERD;
    snprintf(op.body, sizeof op.body, "with\ttab");
    assert_true(fh_format(&op, line, sizeof line) > 0);
    assert_int_equal(fh_parse(line, &back), 0);
    assert_string_equal(back.body, "with tab");
    assert_int_equal(back.flags, op.flags);
    assert_int_equal(back.token, 42);
    assert_int_equal(back.end_ns, 9 * MS);
    assert_int_equal(fh_parse("w0\tlock\tr\t0", &back), -1);
}

/* Invariant 14: the session's end was answered at 110; a write with its lock's token 5 that
 * started at 200 was accepted. */
static void test_write_after_session_end(void **state)
{
    (void)state;
    const char *const h[] = {
        "w0\tlock\tr\t0\t10\t200\t-\t5\t0\tw0-1\t1000\t0\t-\tsession:s1",
        "w0\twrite\tr\t20\t30\t200\t-\t5\t1\tw0-1\t0\t0\t-\tw0:1",
        "w0\tsession_end\t-\t100\t110\t200\t-\t0\t0\ts1\t0\t0\t-\t-",
        "w0\twrite\tr\t200\t210\t200\t-\t5\t2\tw0-1\t0\t0\tafter_pause\tw0:2", NULL};
    fc_result res = check_lines(h);
    assert_int_equal(res.violations[14], 1);
    assert_int_equal(res.hard, 1);
}

/* Refused after the end, accepted before its answer (started at 105, as the end ran), or the
 * end not answered 200 (its outcome unknown), or another session's lock: all pass. */
static void test_session_end_fences_its_locks_only(void **state)
{
    (void)state;
    const char *const h[] = {
        "w0\tlock\tr\t0\t10\t200\t-\t5\t0\tw0-1\t1000\t0\t-\tsession:s1",
        "w1\tlock\tq\t0\t10\t200\t-\t6\t0\tw1-1\t1000\t0\t-\tsession:s2",
        "w2\tlock\tp\t0\t10\t200\t-\t7\t0\tw2-1\t1000\t0\t-\tsession:s3",
        "w0\tsession_end\t-\t100\t110\t200\t-\t0\t0\ts1\t0\t0\t-\t-",
        "w2\tsession_end\t-\t100\t110\t503\tbackend_unavailable\t0\t0\ts3\t0\t0\t-\t-",
        "w0\twrite\tr\t105\t115\t200\t-\t5\t1\tw0-1\t0\t0\t-\tw0:1",
        "w0\twrite\tr\t200\t210\t409\tstale_token\t5\t0\tw0-1\t0\t0\t-\tw0:2",
        "w1\twrite\tq\t200\t210\t200\t-\t6\t1\tw1-1\t0\t0\t-\tw1:1",
        "w2\twrite\tp\t200\t210\t200\t-\t7\t1\tw2-1\t0\t0\t-\tw2:1", NULL};
    fc_result res = check_lines(h);
    assert_int_equal(res.violations[14], 0);
    assert_int_equal(res.hard, 0);
}

/* Invariant 7 with sessions (times in ms): a session's renewal at 100 ms extends its lock's
 * window from 100 to 400 ms, so another owner's grant at 300 ms overlaps it; without the
 * renewal, or once the session's end started (at 250 ms), the same grant does not. */
static void test_session_renewal_and_end_move_windows(void **state)
{
    (void)state;
    const fc_options strict = {.strict_leases = 1};
    const char *lock =
        "w0\tlock\tr\t0\t10000000\t200\t-\t5\t0\tw0-1\t100\t0\t-\tsession:s1";
    const char *renew =
        "w0\tsession_renew\t-\t100000000\t110000000\t200\t-\t0\t0\ts1\t300\t0\t-\t-";
    const char *end =
        "w0\tsession_end\t-\t250000000\t260000000\t200\t-\t0\t0\ts1\t0\t0\t-\t-";
    const char *next =
        "w1\tlock\tr\t290000000\t300000000\t200\t-\t6\t0\tw1-1\t1000\t0\t-\t-";
    const char *const renewed[] = {lock, renew, next, NULL};
    const char *const plain[] = {lock, next, NULL};
    const char *const ended[] = {lock, renew, end, next, NULL};
    assert_int_equal(check_lines_opt(renewed, &strict).violations[7], 1);
    assert_int_equal(check_lines_opt(plain, &strict).violations[7], 0);
    fc_result res = check_lines_opt(ended, &strict);
    assert_int_equal(res.violations[7], 0);
    assert_int_equal(res.hard, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clean_history_passes),
        cmocka_unit_test(test_forced_release_fences_the_holder),
        cmocka_unit_test(test_forced_token_accepted_after_the_release),
        cmocka_unit_test(test_forced_release_judges_only_after_its_answer),
        cmocka_unit_test(test_transfers_clean),
        cmocka_unit_test(test_transfer_half_visible),
        cmocka_unit_test(test_transfer_lost_update),
        cmocka_unit_test(test_transfer_refused_but_written),
        cmocka_unit_test(test_transfer_503_written),
        cmocka_unit_test(test_transfer_in_flight_expiry),
        cmocka_unit_test(test_transfer_not_conserved),
        cmocka_unit_test(test_transfer_acked_then_lost),
        cmocka_unit_test(test_duplicate_token_to_two_owners),
        cmocka_unit_test(test_later_grant_smaller_token),
        cmocka_unit_test(test_decreasing_tokens_by_version),
        cmocka_unit_test(test_reused_version),
        cmocka_unit_test(test_stale_write_accepted_after_newer_ack),
        cmocka_unit_test(test_stale_write_concurrent_is_not_flagged),
        cmocka_unit_test(test_lost_lease_renew_not_409),
        cmocka_unit_test(test_superseded_late_write_accepted),
        cmocka_unit_test(test_superseded_late_write_refused_wrongly),
        cmocka_unit_test(test_superseded_late_write_fenced),
        cmocka_unit_test(test_superseded_needs_a_finished_grant),
        cmocka_unit_test(test_fenced_read_after_newer_grant),
        cmocka_unit_test(test_exclusive_inside_shared_lease),
        cmocka_unit_test(test_write_with_shared_token),
        cmocka_unit_test(test_fenced_read_refused_or_concurrent),
        cmocka_unit_test(test_freeze_window_excuses_latency_only),
        cmocka_unit_test(test_freeze_window_keeps_safety),
        cmocka_unit_test(test_takeover_refused),
        cmocka_unit_test(test_takeover_granted),
        cmocka_unit_test(test_takeover_inside_renewed_lease),
        cmocka_unit_test(test_takeover_wait_too_short_is_not_judged),
        cmocka_unit_test(test_strict_leases_overlap_is_hard),
        cmocka_unit_test(test_fenced_read_after_lost_grant_is_reported),
        cmocka_unit_test(test_grant_answered_past_its_lease_is_no_window),
        cmocka_unit_test(test_overlap_with_a_window_before_the_previous),
        cmocka_unit_test(test_unlock_503_ends_the_window),
        cmocka_unit_test(test_final_read_older_than_last_ack),
        cmocka_unit_test(test_read_of_refused_write),
        cmocka_unit_test(test_read_of_outcome_unknown_write_passes),
        cmocka_unit_test(test_read_of_backend_unavailable_write),
        cmocka_unit_test(test_read_of_unknown_outcome_write_passes),
        cmocka_unit_test(test_forged_token_accepted),
        cmocka_unit_test(test_forged_write_visible),
        cmocka_unit_test(test_status_500),
        cmocka_unit_test(test_request_over_wait_plus_5s),
        cmocka_unit_test(test_no_success_after_heal),
        cmocka_unit_test(test_overlap_is_reported_not_failed),
        cmocka_unit_test(test_format_parse_round_trip),
        cmocka_unit_test(test_write_after_session_end),
        cmocka_unit_test(test_session_end_fences_its_locks_only),
        cmocka_unit_test(test_session_renewal_and_end_move_windows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
