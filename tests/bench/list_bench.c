/*
 * list_bench: what one page of GET /locks costs (lk_list_locks(), which the gateway runs on a
 * side thread), on a Redis that holds 1,000,000 idle token keys (what Redis keeps for every
 * name ever locked) and 1,000 held locks. Printed side by side, in one run:
 *   - a page of 1,000 (all held locks), and a page with a prefix matching 10;
 *   - the ceiling of any SCAN-based listing: one bare SCAN pass (same MATCH and COUNT, no
 *     status reads), with its longest single step: how long one step holds Redis;
 *   - what the listing avoids: KEYS fg:{*}:lock, one call that holds Redis for all of it.
 * Usage: list_bench [IDLE_KEYS]  (default 1000000). Not a test: it asserts nothing about time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "bench_time.h"
#include "harness.h"
#include "locklib/locklib.h"

#define HELD 1000
#define RUNS 5


/* SET fg:{idle.N}:fence N for n keys, pipelined in chunks. */
static void load_idle(redisContext *ctx, long n)
{
    const long chunk = 10000;
    for (long i = 0; i < n; i += chunk) {
        long m = n - i < chunk ? n - i : chunk;
        for (long k = 0; k < m; k++) {
            redisAppendCommand(ctx, "SET fg:{idle.%ld}:fence %ld", i + k, i + k + 1);
        }
        for (long k = 0; k < m; k++) {
            redisReply *r = NULL;
            if (redisGetReply(ctx, (void **)&r) != REDIS_OK) {
                fprintf(stderr, "list_bench: loading failed: %s\n", ctx->errstr);
                exit(1);
            }
            freeReplyObject(r);
        }
    }
}

/* One lk_list_locks() page; returns ms, checks the count. */
static double page(lk_client *c, const char *prefix, size_t limit, size_t want,
                   lk_lock_entry *out)
{
    size_t n = 0;
    char next[LK_RESOURCE_MAX + 1];
    double t0 = bench_now_ms();
    lk_status st = lk_list_locks(c, prefix, NULL, limit, out, &n, next);
    double t = bench_now_ms() - t0;
    if (st != LK_OK || n != want) {
        fprintf(stderr, "list_bench: listing answered %s with %zu entries, want %zu: %s\n",
                lk_status_name(st), n, want, lk_errstr(c));
        exit(1);
    }
    return t;
}

/* One bare SCAN pass; returns ms, the longest step in *step_ms, the steps in *steps. */
static double scan_pass(redisContext *ctx, double *step_ms, long *steps)
{
    char cursor[32] = "0";
    double t0 = bench_now_ms();
    *step_ms = 0;
    *steps = 0;
    do {
        double s0 = bench_now_ms();
        redisReply *r = redisCommand(ctx, "SCAN %s MATCH fg:{*}:lock COUNT 2000", cursor);
        double s = bench_now_ms() - s0;
        if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
            fprintf(stderr, "list_bench: SCAN failed\n");
            exit(1);
        }
        *step_ms = s > *step_ms ? s : *step_ms;
        (*steps)++;
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    return bench_now_ms() - t0;
}

static void report(const char *what, double *ms, int n, const char *note)
{
    qsort(ms, (size_t)n, sizeof *ms, bench_by_double);
    printf("%-46s %9.1f %9.1f  %s\n", what, ms[0], ms[n / 2], note);
}

int main(int argc, char **argv)
{
    long idle = argc > 1 ? strtol(argv[1], NULL, 10) : 1000000;
    th_redis redis;
    lk_client *c = NULL;
    lk_lock_entry *out = calloc(LK_LIST_MAX, sizeof *out);
    double a[RUNS], b[RUNS], s[RUNS], k[RUNS], worst_step = 0;
    long steps = 0;

    th_redis_start(&redis, 0, NULL);
    redisContext *ctx = redisConnect("127.0.0.1", redis.port);
    if (ctx == NULL || ctx->err || out == NULL) {
        fprintf(stderr, "list_bench: cannot connect to the redis-server it started\n");
        return 1;
    }
    load_idle(ctx, idle);
    if (lk_client_open(&c, redis.url, NULL) != LK_OK) {
        fprintf(stderr, "list_bench: lk_client_open failed\n");
        return 1;
    }
    for (int i = 0; i < HELD; i++) {
        char name[32];
        lk_result res;
        snprintf(name, sizeof name, "held.%04d", i);
        if (lk_acquire(c, name, "bench-owner", 600000, 0, NULL, &res) != LK_ACQUIRED) {
            fprintf(stderr, "list_bench: acquire failed: %s\n", lk_errstr(c));
            return 1;
        }
    }
    redisReply *dbsize = redisCommand(ctx, "DBSIZE");
    printf("list_bench: %lld keys in Redis (%ld idle token keys, %d held locks with their "
           "token keys); %d runs each, ms\n\n", dbsize != NULL ? dbsize->integer : -1, idle,
           HELD, RUNS);
    freeReplyObject(dbsize);
    for (int i = 0; i < RUNS; i++) {
        a[i] = page(c, NULL, LK_LIST_MAX, HELD, out);
        b[i] = page(c, "held.001", LK_LIST_MAX, 10, out);
        double step = 0;
        s[i] = scan_pass(ctx, &step, &steps);
        worst_step = step > worst_step ? step : worst_step;
        double t0 = bench_now_ms();
        redisReply *r = redisCommand(ctx, "KEYS fg:{*}:lock");
        k[i] = bench_now_ms() - t0;
        freeReplyObject(r);
    }
    printf("%-46s %9s %9s\n", "", "min", "median");
    report("lk_list_locks, a page of 1,000 held locks", a, RUNS, "");
    report("lk_list_locks, prefix held.001 (10 locks)", b, RUNS, "");
    char note[96];
    snprintf(note, sizeof note, "ceiling: %ld steps, longest %.2f ms", steps, worst_step);
    report("bare SCAN pass, MATCH, COUNT 2000", s, RUNS, note);
    report("KEYS fg:{*}:lock (not used)", k, RUNS, "one call: Redis blocked all of it");
    lk_client_close(c);
    redisFree(ctx);
    th_redis_stop(&redis);
    free(out);
    return 0;
}
