/*
 * multigw_bench: the figures for several gateways on one PostgreSQL store, in one run.
 * A program that prints figures, not a test.
 *
 * It starts, on free loopback ports in private temp dirs, and stops by PID at the end: a
 * redis-server (AOF, appendfsync always), a PostgreSQL 15 (tests/common/harness.h), one
 * gateway on LMDB (--data) and two gateways on the PostgreSQL store (--store). Then, with
 * the same load generator (loadgen.h) and the cycle workload (compare_work.h: /lock, a PUT
 * of 256 bytes with its token, /unlock, each connection on its own resource):
 *   1. /lock latency (the cycle's first operation) and cycles/s through one gateway, LMDB
 *      against PostgreSQL, at 1 and at --conns connections;
 *   2. cycles/s through one PostgreSQL gateway and through two (half the connections on
 *      each, run at the same time, rates added), at --conns connections;
 *   3. a hot lock (compare_work.h's contended pairs: every connection locks and unlocks one
 *      resource, waiting for it) through the LMDB gateway, one PostgreSQL gateway and both
 *      PostgreSQL gateways (half the connections on each, on the same resource), with the
 *      script calls Redis served per pair, the share of pairs whose /unlock handed the lock
 *      on in its own release script (the gateways' fencegate_lock_handoffs_total) and the
 *      /lock p99 against the wait of a fair chain (--conns / the pairs/s). --hot-only runs
 *      only these rows; --fair makes their /lock fair (FIFO, the queue in Redis).
 * Each row also prints the CPU time the whole stack spent per 1,000 cycles (stack_cpu_s):
 * on a machine shared with other work, cycles/s measure the CPU share the stack got as much
 * as the stack, while CPU per cycle tells whether two gateways cost more work per cycle.
 * Token-checked writes/s with 1 and 64 writers on PostgreSQL and LMDB: storage_bench.
 *
 * Usage: multigw_bench [--seconds N] [--conns N] [--fencegate PATH] [--hot-only] [--fair]
 * --fencegate runs another gateway binary (an older tree's, to compare) under the same load.
 */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "compare_procs.h"
#include "compare_work.h"
#include "harness.h"
#include "loadgen.h"

#ifndef FENCEGATE_BIN
#define FENCEGATE_BIN "fencegate"
#endif

#define START_TIMEOUT_MS 20000

static const char *g_fencegate = FENCEGATE_BIN; /* --fencegate */
static int g_fair;                               /* --fair */
#define WARM_MS 1000

typedef struct mg_run {
    int port;
    int conns;
    int measure_ms;
    char tag[32];
    cw_ctx ctx;
    lg_result res;
    int rc;
    char err[256];
    double cpu_ms_per_kcycle; /* the stack's CPU per 1,000 cycles (all runs of the row) */
    double tx_per_kcycle;     /* PostgreSQL write transactions (commits) per 1,000 cycles */
    int contended;            /* the pair workload, every run on one resource */
    int first_owner;          /* the number of its first connection's owner (cw_ctx) */
} mg_run;

/* The PostgreSQL server's URL, for pg_xid(). */
static char g_store[512];

/* The server's transaction id counter: every transaction that writes takes one id, so the
 * difference of two readings is the number of write transactions (the store's group commits)
 * in between, plus one for the reading itself. Exact, unlike the statistics views, which a
 * backend flushes at most once a second. -1 when it cannot be read. */
static long long pg_xid(void)
{
    long long xid = -1;
    PGconn *conn = PQconnectdb(g_store);
    if (PQstatus(conn) == CONNECTION_OK) {
        PGresult *res = PQexec(conn, "SELECT pg_current_xact_id()::text");
        if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
            xid = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
        }
        PQclear(res);
    }
    PQfinish(conn);
    return xid;
}

/* The processes whose CPU a row costs: the gateways, Redis, the PostgreSQL postmaster (its
 * children are found at each reading) and this process (the load generator). */
static pid_t g_stack[4];
static int g_nstack;
static pid_t g_postmaster;

static double cpu_of(pid_t pid)
{
    double user = 0, sys = 0;
    return cp_cpu_seconds(pid, &user, &sys) == 0 ? user + sys : 0;
}

/* CPU seconds, user and system, spent so far by the stack: g_stack, the postmaster and every
 * child of it alive now (the gateways' pooled backends live through a row; one that exits
 * within a row loses its time, so the figure is a lower bound). The machine's other load is
 * not in it, which is what makes rows comparable on a busy machine. */
static double stack_cpu_s(void)
{
    double sum = cpu_of(getpid()) + cpu_of(g_postmaster);
    for (int i = 0; i < g_nstack; i++) {
        sum += cpu_of(g_stack[i]);
    }
    DIR *d = opendir("/proc");
    struct dirent *e = NULL;
    while (d != NULL && (e = readdir(d)) != NULL) {
        pid_t pid = (pid_t)atoi(e->d_name);
        if (pid > 0 && cp_parent_pid(pid) == g_postmaster) {
            sum += cpu_of(pid);
        }
    }
    if (d != NULL) {
        closedir(d);
    }
    return sum;
}

static void *run_thread(void *arg)
{
    mg_run *r = arg;
    lg_workload w;
    memset(&r->ctx, 0, sizeof r->ctx);
    snprintf(r->ctx.tag, sizeof r->ctx.tag, "%s", r->tag);
    r->ctx.contended = r->contended;
    r->ctx.fair = g_fair;
    r->ctx.first_owner = r->first_owner;
    if (r->contended) {
        cw_gateway_pairs(&w, &r->ctx);
    } else {
        cw_gateway_cycles(&w, &r->ctx);
    }
    r->rc = lg_run(&w, r->port, r->conns, WARM_MS, r->measure_ms, NULL, NULL, &r->res, r->err,
                   sizeof r->err);
    return NULL;
}

/* Runs on n gateways (ports) at once, conns connections each: the cycle workload, or with
 * contended the pair workload, all on one resource. */
static int run_on(const int *ports, int n, int conns, int measure_ms, const char *tag,
                  mg_run *runs, int contended)
{
    pthread_t th[2];
    double cpu0 = stack_cpu_s();
    long long xid0 = pg_xid();
    for (int i = 0; i < n; i++) {
        runs[i] = (mg_run){.port = ports[i], .conns = conns, .measure_ms = measure_ms,
                           .contended = contended, .first_owner = i * conns};
        /* Contended runs share their tag, and with it the resource. */
        snprintf(runs[i].tag, sizeof runs[i].tag, "%s-%d", tag, contended ? 0 : i);
        pthread_create(&th[i], NULL, run_thread, &runs[i]);
    }
    int rc = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        if (runs[i].rc != 0) {
            fprintf(stderr, "multigw_bench: %s: %s\n", tag, runs[i].err);
            rc = -1;
        }
    }
    /* Warm-up included: its rate is taken to be the measured one. */
    double cycles = 0;
    for (int i = 0; i < n; i++) {
        cycles += runs[i].res.rate * (WARM_MS + measure_ms) / 1000.0;
    }
    double per_k = cycles > 0 ? (stack_cpu_s() - cpu0) * 1e6 / cycles : 0;
    long long xid1 = pg_xid();
    double tx_k = cycles > 0 && xid0 >= 0 && xid1 > xid0 ? (xid1 - xid0 - 1) * 1e3 / cycles : 0;
    for (int i = 0; i < n; i++) {
        runs[i].cpu_ms_per_kcycle = per_k;
        runs[i].tx_per_kcycle = tx_k;
    }
    return rc;
}

/* Runs the cycle workload on n gateways (ports) at once, conns connections each. */
static int run_cycles(const int *ports, int n, int conns, int measure_ms, const char *tag,
                      mg_run *runs)
{
    return run_on(ports, n, conns, measure_ms, tag, runs, 0);
}

static int start_gateway(cp_proc *p, const char *name, const char *redis_url, const char *data,
                         const char *store)
{
    char listen[64];
    p->port = th_free_port();
    snprintf(listen, sizeof listen, "127.0.0.1:%d", p->port);
    char *argv[] = {(char *)g_fencegate, "--listen", listen, "--redis", (char *)redis_url, "--data",
                    (char *)data, "--max-connections", "1024",
                    "--max-connections-per-address", "0", /* every client is 127.0.0.1 */
                    store != NULL ? "--store" : NULL, (char *)store, NULL};
    if (cp_spawn(p, name, argv, "/dev/null") != 0) {
        return -1;
    }
    return cp_wait_http(p, "/readyz", START_TIMEOUT_MS);
}

static void print_latency(const char *what, int conns, const mg_run *r)
{
    printf("| %-28s | %5d | %10.0f | %8.2f | %8.2f | %9.0f | %7.0f | %6llu |\n", what, conns,
           r->res.rate, r->res.op_p50_ms, r->res.op_p99_ms, r->cpu_ms_per_kcycle,
           r->tx_per_kcycle, (unsigned long long)r->res.failures);
}

/* One hot-lock row: conns connections on one resource, split over the n gateways of ports. */
static int hot_row(const th_redis *redis, const char *what, const int *ports, int n, int conns,
                   int ms, const char *tag)
{
    mg_run runs[2];
    conns = conns / n * n; /* what runs: conns / n on each */
    long long handoffs = 0;
    for (int i = 0; i < n; i++) {
        handoffs -= cp_metric(ports[i], "fencegate_lock_handoffs_total");
    }
    long long before = th_redis_script_calls(redis);
    int rc = run_on(ports, n, conns / n, ms, tag, runs, 1);
    long long after = th_redis_script_calls(redis);
    long long calls = before >= 0 && after >= before ? after - before : 0;
    for (int i = 0; i < n; i++) {
        handoffs += cp_metric(ports[i], "fencegate_lock_handoffs_total");
    }
    double rate = 0, p99 = 0, p50 = 0;
    unsigned long long errors = 0;
    for (int i = 0; i < n; i++) {
        rate += runs[i].res.rate;
        p50 += runs[i].res.op_p50_ms / n; /* the mean of the gateways' p50s */
        p99 = runs[i].res.op_p99_ms > p99 ? runs[i].res.op_p99_ms : p99;
        errors += runs[i].res.failures;
    }
    /* Warm-up included, as for the CPU figures: its rate is taken to be the measured one. */
    double pairs = rate * (WARM_MS + ms) / 1000.0;
    double chain_ms = rate > 0 ? 1000.0 * conns / rate : 0;
    /* Each gateway's own pairs/s: a hot lock that stays with one gateway's clients shows
     * here, where the p99 would not (a request still waiting at the end is not counted). */
    char split[32] = "-";
    if (n == 2) {
        snprintf(split, sizeof split, "%.0f / %.0f", runs[0].res.rate, runs[1].res.rate);
    }
    printf("| %-30s | %5d | %8.0f | %11s | %8.2f | %8.2f | %6.2fx | %10.2f | %9.0f%% | %6llu |\n",
           what, conns, rate, split, p50, p99, chain_ms > 0 ? p99 / chain_ms : 0,
           pairs > 0 ? calls / pairs : 0, pairs > 0 ? 100.0 * handoffs / pairs : 0, errors);
    fflush(stdout);
    return rc;
}

/* A hot lock through the LMDB gateway, one PostgreSQL gateway, and both of those. */
static int hot_rows(const th_redis *redis, int lmdb_port, const int *pg_ports, int conns, int ms)
{
    int rc = 0;
    printf("\nhot lock%s: every connection locks and unlocks one resource, waiting for it; "
           "/chain: the /lock p99 against %d / pairs/s, the wait of a fair chain; in release: the "
           "pairs whose /unlock handed the lock on in its own release script, a parked "
           "waiter's attempt right behind it (fencegate_lock_handoffs_total)\n\n",
           g_fair ? " (fair /lock)" : "", conns);
    printf("| %-30s | %5s | %8s | %11s | %8s | %8s | %7s | %10s | %10s | %6s |\n",
           "gateways, ledger", "conns", "pairs/s", "per gateway", "lock p50", "lock p99",
           "/chain", "calls/pair", "in release", "errors");
    printf("|--------------------------------|-------|----------|-------------|----------|"
           "----------|---------|------------|------------|--------|\n");
    rc |= hot_row(redis, "1, LMDB", &lmdb_port, 1, conns, ms, "hot-lmdb");
    rc |= hot_row(redis, "1, PostgreSQL", pg_ports, 1, conns, ms, "hot-pg-1");
    rc |= hot_row(redis, "2, PostgreSQL (sum, worse p99)", pg_ports, 2, conns, ms, "hot-pg-2");
    return rc;
}

int main(int argc, char **argv)
{
    int seconds = 5, conns = 64, hot_only = 0;
    th_redis redis;
    th_pg pg;
    cp_proc lmdb_gw = {0}, pg_gw[2] = {{0}, {0}};
    char dir[256], data[3][320], store[512];
    mg_run runs[2], lat[4];

    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--hot-only") == 0) {
            hot_only = 1;
            continue;
        }
        if (strcmp(argv[i], "--fair") == 0) {
            g_fair = 1;
            continue;
        }
        if (v != NULL && strcmp(argv[i], "--seconds") == 0) {
            seconds = atoi(v);
        } else if (v != NULL && strcmp(argv[i], "--conns") == 0) {
            conns = atoi(v);
        } else if (v != NULL && strcmp(argv[i], "--fencegate") == 0) {
            g_fencegate = v;
        } else {
            fprintf(stderr, "usage: multigw_bench [--seconds N] [--conns N] [--fencegate PATH] "
                            "[--hot-only] [--fair]\n");
            return 2;
        }
        i++;
    }
    if (seconds <= 0 || conns < 2) {
        fprintf(stderr, "multigw_bench: --seconds must be > 0 and --conns >= 2\n");
        return 2;
    }
    int ms = seconds * 1000;
    th_tempdir(dir, sizeof dir, "multigw-bench");
    th_redis_start(&redis, 1, NULL);
    th_pg_start(&pg);
    th_pg_url(&pg, "postgres", store, sizeof store);
    snprintf(g_store, sizeof g_store, "%s", store);
    for (int i = 0; i < 3; i++) {
        snprintf(data[i], sizeof data[i], "%s/gw%d", dir, i);
    }
    if (start_gateway(&lmdb_gw, "fencegate-lmdb", redis.url, data[0], NULL) != 0 ||
        start_gateway(&pg_gw[0], "fencegate-pg-1", redis.url, data[1], store) != 0 ||
        start_gateway(&pg_gw[1], "fencegate-pg-2", redis.url, data[2], store) != 0) {
        cp_stop_all();
        th_redis_stop(&redis);
        th_pg_stop(&pg);
        return 1;
    }
    g_stack[g_nstack++] = redis.pid;
    g_stack[g_nstack++] = lmdb_gw.pid;
    g_stack[g_nstack++] = pg_gw[0].pid;
    g_stack[g_nstack++] = pg_gw[1].pid;
    g_postmaster = pg.pid;
    fprintf(stderr, "multigw_bench: %d s per row, %d connections\n", seconds, conns);
    int pg_ports[2] = {pg_gw[0].port, pg_gw[1].port};
    int rc = 0;
    rc |= hot_rows(&redis, lmdb_gw.port, pg_ports, conns, ms);
    if (hot_only) {
        cp_stop_all();
        th_redis_stop(&redis);
        th_pg_stop(&pg);
        th_rmtree(dir);
        return rc != 0;
    }
    rc |= run_cycles(&lmdb_gw.port, 1, 1, ms, "lat-lmdb-1", &lat[0]);
    rc |= run_cycles(&pg_ports[0], 1, 1, ms, "lat-pg-1", &lat[1]);
    rc |= run_cycles(&lmdb_gw.port, 1, conns, ms, "lat-lmdb-n", &lat[2]);
    rc |= run_cycles(&pg_ports[0], 1, conns, ms, "lat-pg-n", &lat[3]);
    mg_run one;
    rc |= run_cycles(&pg_ports[1], 1, conns, ms, "one-pg", &one);
    rc |= run_cycles(pg_ports, 2, conns / 2, ms, "two-pg", runs);

    printf("\nlock + write (256 B) + unlock cycles; /lock latency is the cycle's first "
           "request\n\n");
    printf("| %-28s | %5s | %10s | %8s | %8s | %9s | %7s | %6s |\n", "gateways, ledger",
           "conns", "cycles/s", "lock p50", "lock p99", "CPU ms/1k", "tx/1k", "errors");
    printf("|------------------------------|-------|------------|----------|----------|"
           "-----------|---------|--------|\n");
    print_latency("1, LMDB", 1, &lat[0]);
    print_latency("1, PostgreSQL", 1, &lat[1]);
    print_latency("1, LMDB", conns, &lat[2]);
    print_latency("1, PostgreSQL", conns, &lat[3]);
    print_latency("1, PostgreSQL (other gw)", conns, &one);
    double two = runs[0].res.rate + runs[1].res.rate;
    printf("| %-28s | %5d | %10.0f | %8.2f | %8.2f | %9.0f | %7.0f | %6llu |\n",
           "2, PostgreSQL (sum)", conns, two, (runs[0].res.op_p50_ms + runs[1].res.op_p50_ms) / 2,
           runs[0].res.op_p99_ms > runs[1].res.op_p99_ms ? runs[0].res.op_p99_ms
                                                         : runs[1].res.op_p99_ms,
           runs[0].cpu_ms_per_kcycle, runs[0].tx_per_kcycle,
           (unsigned long long)(runs[0].res.failures + runs[1].res.failures));
    printf("\nCPU ms/1k: CPU seconds of the whole stack (gateways, Redis, PostgreSQL, the load "
           "generator) per 1,000 cycles of the row; the machine's other load is not in it.\n"
           "tx/1k: PostgreSQL write transactions (group commits) per 1,000 cycles; a cycle "
           "has a grant and a write, so 2,000 means no sharing.\n"
           "two gateways / one: %.2fx the CPU per cycle\n",
           one.cpu_ms_per_kcycle > 0 ? runs[0].cpu_ms_per_kcycle / one.cpu_ms_per_kcycle : 0);
    printf("targets: two gateways / one = %.2fx (>= 0.9); /lock p99 PostgreSQL / LMDB = "
           "%.2fx at 1 connection, %.2fx at %d (<= 2)\n",
           one.res.rate > 0 ? two / one.res.rate : 0,
           lat[0].res.op_p99_ms > 0 ? lat[1].res.op_p99_ms / lat[0].res.op_p99_ms : 0,
           lat[2].res.op_p99_ms > 0 ? lat[3].res.op_p99_ms / lat[2].res.op_p99_ms : 0, conns);

    cp_stop_all();
    th_redis_stop(&redis);
    th_pg_stop(&pg);
    th_rmtree(dir);
    return rc != 0;
}
