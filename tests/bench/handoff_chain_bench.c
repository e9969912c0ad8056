/*
 * handoff_chain_bench: what one hand-off of a contended lock costs at locklib's level, with
 * no gateway: N owners on one resource pass the lock along in FIFO order, on one
 * connection, one hand-off at a time (a chain: each waits for the one before). A program that
 * prints figures, not a test.
 *
 * Five shapes of a hand-off, side by side in one run, under appendfsync always and then
 * everysec (one redis-server of its own, on a free loopback port, stopped by PID):
 *   two passes  the release, its answer, then the next owner's acquire: two scripts, two
 *               Redis passes, and under always two fsyncs in series (a waiter woken by the
 *               release message);
 *   one batch   the release and the next owner's acquire in one pipeline (lk_call_many):
 *               one Redis pass, one fsync (what a gateway's /unlock does for a waiter parked
 *               on it);
 *   grant       the release hands the lock to the next queued owner in its own script
 *               (lk_call.handoff), then that owner's attempt claims the grant (a read: no
 *               fsync): one fsync, whoever the waiter is and wherever it waits;
 *   grant + claim  the same with the claim pipelined behind the release (a waiter that the
 *               releasing process knows is first);
 *   named       the release grants the waiter its caller names (lk_call.handoff_to), whose
 *               claim names the release (lk_call.claim_from) and is answered from its reply:
 *               one script (the gateway's /unlock for a waiter parked on it, alone on its
 *               ledger).
 * Each shape first queues every other owner as a waiter (a HELD answer; for the two "grant"
 * shapes with a hand-off id, so that it is queued in Redis), then passes the lock for the
 * measuring time.
 *
 * Each row also prints the script calls per hand-off, the commands they called and Redis's
 * microseconds in them (INFO commandstats: a script's time includes every command it
 * calls), the released owner's re-queueing included: what a change to the scripts saves,
 * apart from the machine's noise in the rates.
 *
 * Usage: handoff_chain_bench [--seconds N] [--owners N]
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "locklib/locklib.h"

#define MAX_OWNERS 256

typedef enum shape { TWO_PASSES, ONE_BATCH, GRANT, GRANT_BATCH, NAMED } shape;

static const char *shape_name(shape s)
{
    return s == TWO_PASSES  ? "two passes (release, then acquire)"
           : s == ONE_BATCH ? "one batch (release + acquire pipelined)"
           : s == GRANT     ? "grant in release, then a read-only claim"
           : s == GRANT_BATCH ? "grant in release + claim pipelined"
                              : "grant to the named waiter, claim answered from the release";
}

/* Whether the waiters of shape s queue in Redis with their hand-off ids. */
static int queued_with_ids(shape s)
{
    return s == GRANT || s == GRANT_BATCH;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what, lk_client *c, lk_status st)
{
    fprintf(stderr, "handoff_chain_bench: %s: %s (%s)\n", what, lk_status_name(st),
            c != NULL ? lk_errstr(c) : "");
    exit(1);
}

static lk_call acquire_call(const char *res, const char *owner, const char *id)
{
    lk_call call = {.kind = LK_CALL_ACQUIRE, .resource = res, .owner = owner,
                    .lease_ms = 30000, .wait_ms = 600000, .handoff_id = id};
    return call;
}

static void run1(lk_client *c, lk_call *call)
{
    lk_call *calls[1] = {call};
    lk_call_many(c, calls, 1);
}

/* Passes the lock of res along the owners for `seconds`; returns hand-offs per second of
 * hand-off time (from the release sent to the next owner's ACQUIRED, without the released
 * owner's re-queueing, which a waiter on a connection of its own does meanwhile) and writes
 * the p99 of one hand-off, in ms, to *p99_ms, and the script calls and Redis's microseconds
 * in scripts per hand-off, the re-queueing included, to *calls_per and *usec_per, and the
 * commands those scripts called per hand-off to *cmds_per. */
static double measure(lk_client *c, const th_redis *r, shape s, const char *res, int n,
                      double seconds, double *p99_ms, double *calls_per, double *usec_per,
                      double *cmds_per)
{
    char owners[MAX_OWNERS][16], ids[MAX_OWNERS][17];
    static double lat[2000000];
    size_t nlat = 0;

    for (int i = 0; i < n; i++) {
        snprintf(owners[i], sizeof owners[i], "o%d", i);
        snprintf(ids[i], sizeof ids[i], "%x", 0x100 + i);
    }
    /* Owner 0 holds; the others queue, in order. */
    for (int i = 0; i < n; i++) {
        lk_call call = acquire_call(res, owners[i], queued_with_ids(s) ? ids[i] : NULL);
        run1(c, &call);
        if (call.status != (i == 0 ? LK_ACQUIRED : LK_HELD)) {
            die("queueing", c, call.status);
        }
    }
    int holder = 0;
    uint64_t handoffs = 0;
    double busy = 0;
    th_script_stats st0, st1;
    if (th_redis_script_stats(r, &st0) != 0) {
        fprintf(stderr, "handoff_chain_bench: INFO commandstats failed\n");
        exit(1);
    }
    double start = now_s(), end = start + seconds;
    for (double t = start; t < end; t = now_s()) {
        int next = (holder + 1) % n;
        lk_call rel = {.kind = LK_CALL_RELEASE, .resource = res, .owner = owners[holder],
                       .handoff = s >= GRANT};
        lk_call acq = acquire_call(res, owners[next], s >= GRANT ? ids[next] : NULL);
        if (s == NAMED) {
            rel.handoff_to = owners[next];
            rel.handoff_id = ids[next];
            rel.lease_ms = acq.lease_ms;
            acq.handoff_claim = 1;
            acq.claim_from = &rel;
        }
        if (s == ONE_BATCH || s >= GRANT_BATCH) {
            lk_call *calls[2] = {&rel, &acq};
            lk_call_many(c, calls, 2);
        } else {
            run1(c, &rel);
            run1(c, &acq);
        }
        double took = now_s() - t;
        if (rel.status != LK_RELEASED || acq.status != LK_ACQUIRED ||
            (s >= GRANT && (acq.res.handed != 1 || rel.res.handed_token != acq.res.token)) ||
            (s == NAMED && !rel.res.handed_direct)) {
            die("hand-off", c, rel.status != LK_RELEASED ? rel.status : acq.status);
        }
        /* The owner just released asks again at once: it queues behind the others. */
        lk_call again =
            acquire_call(res, owners[holder], queued_with_ids(s) ? ids[holder] : NULL);
        run1(c, &again);
        if (again.status != LK_HELD) {
            die("queueing again", c, again.status);
        }
        if (nlat < sizeof lat / sizeof lat[0]) {
            lat[nlat++] = took;
        }
        holder = next;
        handoffs++;
        busy += took;
    }
    if (th_redis_script_stats(r, &st1) != 0) {
        fprintf(stderr, "handoff_chain_bench: INFO commandstats failed\n");
        exit(1);
    }
    *calls_per = handoffs > 0 ? (double)(st1.calls - st0.calls) / (double)handoffs : 0;
    *cmds_per = handoffs > 0 ? (double)(st1.cmds - st0.cmds) / (double)handoffs : 0;
    *usec_per = handoffs > 0 ? (double)(st1.usec - st0.usec) / (double)handoffs : 0;
    /* p99 by a partial selection sort of the top 1%. */
    size_t k = nlat / 100;
    for (size_t i = 0; i <= k && i < nlat; i++) {
        size_t m = i;
        for (size_t j = i + 1; j < nlat; j++) {
            if (lat[j] > lat[m]) {
                m = j;
            }
        }
        double tmp = lat[i];
        lat[i] = lat[m];
        lat[m] = tmp;
    }
    *p99_ms = nlat > 0 ? lat[k < nlat ? k : nlat - 1] * 1000.0 : 0;
    return busy > 0 ? (double)handoffs / busy : 0;
}

int main(int argc, char **argv)
{
    double seconds = 3;
    int owners = 16;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--seconds") == 0) {
            seconds = atof(argv[i + 1]);
        } else if (strcmp(argv[i], "--owners") == 0) {
            owners = atoi(argv[i + 1]);
        }
    }
    if (seconds <= 0 || owners < 2 || owners > MAX_OWNERS) {
        fprintf(stderr, "usage: handoff_chain_bench [--seconds N>0] [--owners 2..%d]\n",
                MAX_OWNERS);
        return 2;
    }
    th_redis r;
    th_redis_start(&r, 1, NULL);
    lk_client *c = NULL;
    lk_options o;
    lk_options_init(&o);
    o.token_key_idle_ttl_ms = 7LL * 24 * 3600 * 1000; /* the gateway's default */
    lk_status st = lk_client_open(&c, r.url, &o);
    if (c == NULL || st != LK_OK) {
        die("open", c, st);
    }
    printf("hand-offs in a chain on one connection, %d owners on one lock, %.0f s per row\n\n",
           owners, seconds);
    printf("| appendfsync | hand-off | hand-offs/s | hand-off p99 ms | script calls | commands "
           "in them | Redis us in scripts |\n");
    printf("|---|---|---|---|---|---|---|\n");
    const char *modes[] = {"always", "everysec"};
    int row = 0;
    for (int m = 0; m < 2; m++) {
        th_redis_cmd(&r, NULL, 0, "CONFIG SET appendfsync %s", modes[m]);
        for (shape s = TWO_PASSES; s <= NAMED; s++) {
            char res[32];
            snprintf(res, sizeof res, "chain%d", row++);
            double p99 = 0, calls = 0, usec = 0, cmds = 0;
            double rate = measure(c, &r, s, res, owners, seconds, &p99, &calls, &usec, &cmds);
            printf("| %s | %s | %.0f | %.2f | %.2f | %.1f | %.1f |\n", modes[m],
                   shape_name(s), rate, p99, calls, cmds, usec);
            fflush(stdout);
        }
    }
    lk_client_close(c);
    th_redis_stop(&r);
    return 0;
}
