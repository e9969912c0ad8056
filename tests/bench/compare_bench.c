/*
 * compare_bench: the side-by-side figures. fencegate, locklib's scripts straight to
 * the same Redis, and etcd's lock API, driven by one load generator (loadgen.h: one thread,
 * epoll, one request in flight per keep-alive connection) in one run, so every ratio it
 * prints compares figures measured minutes apart at most. A program that prints figures,
 * not a test: nothing here passes or fails the build.
 *
 * It starts, on free loopback ports in a private temp dir, and stops by PID at the end:
 *   1. a trivial libmicrohttpd server (null_server), to measure the load generator's ceiling;
 *   2. etcd from Debian's etcd-server package;
 *   3. per pass, a redis-server with AOF (appendfsync always, then everysec) and the
 *      gateway (default flags but --listen, --redis, --data and --max-connections 1024).
 * Per pass, at 1, 16, 64 and 256 connections, side by side: raw script pairs, fencegate
 * /lock + /unlock pairs and etcd lock + unlock pairs; then contended pairs (16 and 64
 * clients on one name) on fencegate and etcd; then token-checked PUTs at 1, 16 and 64
 * writers. The gateway's CPU time is read around its 64-connection phase and its VmHWM
 * after the 256-connection one; the gateway's and Redis's around the 64-client hot row.
 * Every measurement lasts warm-up + measure time, and every start-up wait has a deadline.
 *
 * Usage: compare_bench [--seconds N] [--warmup-ms N] [--perf-dir DIR] [--fencegate PATH]
 *                      [--hot-only]
 *   --hot-only      per pass, only the rows the hot-lock targets read: raw and fencegate
 *                   pairs at 1 connection (the ceilings), then the hot rows; no etcd.
 *   --perf-dir DIR  also runs `perf record -g -p <gateway>` through each pass's 64-connection
 *                   uncontended phase, into DIR/perf-gateway-64-<aof>.data, and of the gateway
 *                   and Redis through its 64-client hot row, into DIR/perf-hot-64-<aof>.data
 *                   (perturbs them).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compare_procs.h"
#include "compare_work.h"
#include "harness.h"
#include "loadgen.h"

#ifndef FENCEGATE_BIN
#define FENCEGATE_BIN "fencegate"
#endif
#ifndef NULL_SERVER_BIN
#define NULL_SERVER_BIN "bench_null_server"
#endif
#ifndef LOCKLIB_LUA_DIR
#define LOCKLIB_LUA_DIR "build/locklib/generated/lua"
#endif

#define MAX_ROWS 64
#define START_TIMEOUT_MS 20000
#define STOP_TIMEOUT_MS 15000

typedef enum kind { K_NULL, K_RAW, K_GW, K_ETCD, K_GWC, K_ETCDC, K_PUT } kind;

typedef struct row {
    const char *aof; /* the pass: "always", "everysec"; "-" for the trivial server */
    kind k;
    int conns;
    int ok;
    lg_result r;
} row;

typedef struct pass_stats {
    const char *aof;
    int cpu_ok;
    double user_s, sys_s; /* gateway CPU through the 64-connection uncontended window */
    uint64_t cpu_pairs;
    long hwm_kb; /* gateway VmHWM right after the 256-connection uncontended phase */
    int hot_cpu_ok;
    double hot_gw_s, hot_redis_s; /* gateway and Redis CPU through the 64-client hot window */
    int hot_scripts_ok;
    th_script_stats hot_scripts; /* what Redis's scripts did through that window */
    uint64_t hot_pairs;
} pass_stats;

typedef struct bench {
    int measure_ms, warm_ms;
    int hot_only; /* --hot-only */
    const char *fencegate, *perf_dir;
    char dir[256];
    cp_proc null_srv, etcd, gw, perf;
    th_redis redis;
    char sha_acquire[41], sha_release[41];
    row rows[MAX_ROWS];
    int nrows;
    pass_stats passes[2];
    int npasses;
    int seq;
    int etcd_starts;
    double u0, s0; /* CPU at the start of the measured window */
    double ru0, rs0; /* Redis's CPU at the start of the hot window */
    th_script_stats scripts0; /* Redis's script counts at the start of the hot window */
    pass_stats *cur;
} bench;

static bench g_bench;

static void cleanup(void)
{
    cp_stop_all();
    if (g_bench.redis.pid > 0) {
        th_redis_stop(&g_bench.redis);
    }
    if (g_bench.dir[0] != '\0') {
        th_rmtree(g_bench.dir);
        g_bench.dir[0] = '\0';
    }
}

static void on_signal(int sig)
{
    (void)sig;
    /* Only async-signal-safe calls: kill what we started, leave the temp dir. */
    cp_proc *procs[] = {&g_bench.gw, &g_bench.etcd, &g_bench.null_srv, &g_bench.perf};
    for (size_t i = 0; i < sizeof procs / sizeof *procs; i++) {
        if (procs[i]->pid > 0) {
            kill(procs[i]->pid, SIGKILL);
        }
    }
    if (g_bench.redis.pid > 0) {
        kill(g_bench.redis.pid, SIGKILL);
    }
    _exit(130);
}

static const char *kind_label(kind k)
{
    switch (k) {
    case K_NULL: return "trivial MHD server, GET";
    case K_RAW: return "raw Redis acquire+release";
    case K_GW: return "fencegate /lock+/unlock";
    case K_ETCD: return "etcd lock+unlock";
    case K_GWC: return "fencegate contended";
    case K_ETCDC: return "etcd contended";
    case K_PUT: return "fencegate PUT, token-checked";
    }
    return "?";
}

/* ---- Running one row ------------------------------------------------------------------ */

/* With --perf-dir, starts `perf record -g -p pids` into DIR/perf-<what>-<aof>.data. */
static void perf_begin(bench *b, const char *what, const char *pids)
{
    char file[512], log[300];

    if (b->perf_dir == NULL) {
        return;
    }
    snprintf(file, sizeof file, "%s/perf-%s-%s.data", b->perf_dir, what, b->cur->aof);
    snprintf(log, sizeof log, "%s/perf.log", b->dir);
    char *argv[] = {"perf", "record", "-g", "-o", file, "-p", (char *)pids, NULL};
    cp_spawn(&b->perf, "perf", argv, log);
}

static void cpu_window(void *arg, int begin)
{
    bench *b = arg;
    double u = 0, s = 0;
    char pid[16];

    if (begin) {
        snprintf(pid, sizeof pid, "%d", (int)b->gw.pid);
        perf_begin(b, "gateway-64", pid);
    }
    if (cp_cpu_seconds(b->gw.pid, &u, &s) != 0) {
        b->cur->cpu_ok = 0;
        return;
    }
    if (begin) {
        b->u0 = u;
        b->s0 = s;
        return;
    }
    b->cur->cpu_ok = 1;
    b->cur->user_s = u - b->u0;
    b->cur->sys_s = s - b->s0;
    if (b->perf.pid > 0) {
        cp_stop(&b->perf, SIGINT, 60000);
    }
}

/* The 64-client hot row's window: the gateway's and Redis's CPU per hand-off, what Redis's
 * scripts did per hand-off, and with --perf-dir a profile of both processes. */
static void hot_window(void *arg, int begin)
{
    bench *b = arg;
    pass_stats *ps = b->cur;
    double u = 0, s = 0, ru = 0, rs = 0;
    char pids[40];
    th_script_stats st;

    if (begin) {
        snprintf(pids, sizeof pids, "%d,%d", (int)b->gw.pid, (int)b->redis.pid);
        perf_begin(b, "hot-64", pids);
    }
    int st_ok = th_redis_script_stats(&b->redis, &st) == 0;
    if (begin) {
        ps->hot_scripts_ok = st_ok;
        b->scripts0 = st;
    } else {
        ps->hot_scripts_ok = ps->hot_scripts_ok && st_ok;
        ps->hot_scripts = (th_script_stats){st.calls - b->scripts0.calls,
                                            st.usec - b->scripts0.usec,
                                            st.cmds - b->scripts0.cmds};
    }
    if (cp_cpu_seconds(b->gw.pid, &u, &s) != 0 ||
        cp_cpu_seconds(b->redis.pid, &ru, &rs) != 0) {
        ps->hot_cpu_ok = 0;
        return;
    }
    if (begin) {
        b->u0 = u;
        b->s0 = s;
        b->ru0 = ru;
        b->rs0 = rs;
        return;
    }
    ps->hot_cpu_ok = 1;
    ps->hot_gw_s = u + s - b->u0 - b->s0;
    ps->hot_redis_s = ru + rs - b->ru0 - b->rs0;
    if (b->perf.pid > 0) {
        cp_stop(&b->perf, SIGINT, 60000);
    }
}

static void workload_for(kind k, lg_workload *w, cw_ctx *ctx)
{
    switch (k) {
    case K_NULL: cw_null(w, ctx); break;
    case K_RAW: cw_raw_pairs(w, ctx); break;
    case K_GW:
    case K_GWC: cw_gateway_pairs(w, ctx); break;
    case K_ETCD:
    case K_ETCDC: cw_etcd_pairs(w, ctx); break;
    case K_PUT: cw_gateway_writes(w, ctx); break;
    }
}

/* Measures one row and records it. window (may be NULL) is called around the measurement. */
static row *run_row(bench *b, const char *aof, kind k, int conns, lg_window_fn window)
{
    cw_ctx ctx = {.contended = k == K_GWC || k == K_ETCDC};
    lg_workload w;
    char err[512];
    int port = k == K_NULL ? b->null_srv.port
               : k == K_RAW ? b->redis.port
               : (k == K_ETCD || k == K_ETCDC) ? b->etcd.port
                                               : b->gw.port;
    row *r = &b->rows[b->nrows++];

    snprintf(ctx.tag, sizeof ctx.tag, "%d-%d", (int)getpid(), ++b->seq);
    memcpy(ctx.sha_acquire, b->sha_acquire, sizeof ctx.sha_acquire);
    memcpy(ctx.sha_release, b->sha_release, sizeof ctx.sha_release);
    workload_for(k, &w, &ctx);
    *r = (row){.aof = aof, .k = k, .conns = conns};
    if (lg_run(&w, port, conns, b->warm_ms, b->measure_ms, window, b, &r->r, err, sizeof err) !=
        0) {
        fprintf(stderr, "compare_bench: %s: %s\n", kind_label(k), err);
    } else {
        r->ok = 1;
    }
    fprintf(stderr, "  %-8s %-29s %3d conns: %9.0f/s  p50 %7.2f ms  p99 %7.2f ms  errors %llu\n",
            aof, kind_label(k), conns, r->r.rate, r->r.unit_p50_ms, r->r.unit_p99_ms,
            (unsigned long long)r->r.failures);
    return r;
}

/* ---- Processes ------------------------------------------------------------------------ */

static int start_null_server(bench *b)
{
    char port[16], log[300];
    b->null_srv.port = th_free_port();
    snprintf(port, sizeof port, "%d", b->null_srv.port);
    snprintf(log, sizeof log, "%s/null_server.log", b->dir);
    char *argv[] = {NULL_SERVER_BIN, port, NULL};
    if (cp_spawn(&b->null_srv, "null_server", argv, log) != 0) {
        return -1;
    }
    return cp_wait_http(&b->null_srv, "/", START_TIMEOUT_MS);
}

static int start_etcd(bench *b)
{
    char data[300], client[64], peer[64], log[300];
    b->etcd.port = th_free_port();
    snprintf(data, sizeof data, "%s/etcd-%d", b->dir, ++b->etcd_starts);
    snprintf(client, sizeof client, "http://127.0.0.1:%d", b->etcd.port);
    snprintf(peer, sizeof peer, "http://127.0.0.1:%d", th_free_port());
    snprintf(log, sizeof log, "%s/etcd-%d.log", b->dir, b->etcd_starts);
    char *argv[] = {"etcd", "--data-dir", data, "--listen-client-urls", client,
                    "--advertise-client-urls", client, "--listen-peer-urls", peer, NULL};
    if (cp_spawn(&b->etcd, "etcd", argv, log) != 0) {
        return -1;
    }
    if (cp_wait_http(&b->etcd, "/health", START_TIMEOUT_MS) != 0) {
        fprintf(stderr, "compare_bench: is Debian's etcd-server installed? "
                        "(bash scripts/install-deps.sh --bench); log: %s\n", log);
        return -1;
    }
    return 0;
}

/* Measures a contended etcd row, then replaces etcd with a fresh one. Closing the
 * connections of ~60 clients still waiting in /v3/lock/lock deadlocks etcd 3.4's lock
 * service for every later lock that has to wait (etcd-io/etcd#13336): without a fresh etcd,
 * the next contended row would measure 0 pairs/s. */
static int etcd_contended_row(bench *b, const char *aof, int conns)
{
    run_row(b, aof, K_ETCDC, conns, NULL);
    cp_stop(&b->etcd, SIGTERM, STOP_TIMEOUT_MS);
    return start_etcd(b);
}

/* The gateway's request log goes to /dev/null: a log file on the disk that Redis's AOF and
 * LMDB fsync would put the log's writeback into every fsync, which is not the gateway. */
static int start_gateway(bench *b, const char *aof)
{
    char listen[64], data[300];
    const char *log = getenv("FENCEGATE_BENCH_GATEWAY_LOG");
    b->gw.port = th_free_port();
    snprintf(listen, sizeof listen, "127.0.0.1:%d", b->gw.port);
    snprintf(data, sizeof data, "%s/gateway-%s", b->dir, aof);
    char *argv[] = {(char *)b->fencegate, "--listen", listen, "--redis", b->redis.url,
                    "--data", data, "--max-connections", "1024",
                    /* every client is this process, one address */
                    "--max-connections-per-address", "0", NULL};
    if (cp_spawn(&b->gw, "fencegate", argv, log != NULL ? log : "/dev/null") != 0) {
        return -1;
    }
    if (cp_wait_http(&b->gw, "/readyz", START_TIMEOUT_MS) != 0) {
        fprintf(stderr, "compare_bench: set FENCEGATE_BENCH_GATEWAY_LOG=FILE to keep the "
                        "gateway's messages\n");
        return -1;
    }
    return 0;
}

/* SCRIPT LOADs the generated NAME.lua (preludes + body) into b->redis; the SHA1 goes to sha (41 bytes). */
static int load_script(bench *b, const char *name, char *sha)
{
    char path[512], out[128];
    static char text[65536];
    snprintf(path, sizeof path, "%s/%s.lua", LOCKLIB_LUA_DIR, name);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        fprintf(stderr, "compare_bench: %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t len = fread(text, 1, sizeof text, f);
    fclose(f);
    th_redis_cmd(&b->redis, out, sizeof out, "SCRIPT LOAD %b", text, len);
    if (strlen(out) != 40) {
        fprintf(stderr, "compare_bench: SCRIPT LOAD %s: %s\n", path, out);
        return -1;
    }
    memcpy(sha, out, 41);
    return 0;
}

static int start_redis(bench *b, const char *aof)
{
    char out[128];
    th_redis_start(&b->redis, 1, NULL); /* AOF on, appendfsync always; exits on failure */
    if (strcmp(aof, "always") != 0) {
        th_redis_cmd(&b->redis, out, sizeof out, "CONFIG SET appendfsync %s", aof);
        if (strcmp(out, "OK") != 0) {
            fprintf(stderr, "compare_bench: CONFIG SET appendfsync %s: %s\n", aof, out);
            return -1;
        }
    }
    if (load_script(b, "acquire", b->sha_acquire) != 0 ||
        load_script(b, "release", b->sha_release) != 0) {
        return -1;
    }
    return 0;
}

/* ---- Passes --------------------------------------------------------------------------- */

static int run_pass(bench *b, const char *aof)
{
    static const int conns[] = {1, 16, 64, 256};
    pass_stats *ps = &b->passes[b->npasses++];

    *ps = (pass_stats){.aof = aof, .hwm_kb = -1};
    b->cur = ps;
    fprintf(stderr, "compare_bench: pass with appendfsync %s\n", aof);
    if (start_redis(b, aof) != 0 || start_gateway(b, aof) != 0) {
        return -1;
    }
    /* Interleaved per concurrency, so the ratios compare figures seconds apart. */
    for (size_t i = 0; i < sizeof conns / sizeof *conns && !(b->hot_only && i > 0); i++) {
        run_row(b, aof, K_RAW, conns[i], NULL);
        row *gw = run_row(b, aof, K_GW, conns[i], conns[i] == 64 ? cpu_window : NULL);
        if (conns[i] == 64) {
            ps->cpu_pairs = gw->r.units;
        }
        if (conns[i] == 256) {
            ps->hwm_kb = cp_status_kb(b->gw.pid, "VmHWM");
        }
        if (!b->hot_only) {
            run_row(b, aof, K_ETCD, conns[i], NULL);
        }
    }
    run_row(b, aof, K_GWC, 16, NULL);
    if (!b->hot_only && etcd_contended_row(b, aof, 16) != 0) {
        return -1;
    }
    ps->hot_pairs = run_row(b, aof, K_GWC, 64, hot_window)->r.units;
    if (!b->hot_only && etcd_contended_row(b, aof, 64) != 0) {
        return -1;
    }
    for (int writers = 1; writers <= 64 && !b->hot_only; writers *= writers == 1 ? 16 : 4) {
        run_row(b, aof, K_PUT, writers, NULL);
    }
    int st = cp_stop(&b->gw, SIGTERM, STOP_TIMEOUT_MS);
    if (st != 0) {
        fprintf(stderr, "compare_bench: the gateway did not exit 0 on SIGTERM (%d)\n", st);
    }
    th_redis_stop(&b->redis);
    return 0;
}

/* ---- Reporting ------------------------------------------------------------------------ */

static const row *find(const bench *b, const char *aof, kind k, int conns)
{
    for (int i = 0; i < b->nrows; i++) {
        const row *r = &b->rows[i];
        if (r->ok && r->k == k && r->conns == conns && strcmp(r->aof, aof) == 0) {
            return r;
        }
    }
    return NULL;
}

static void ratio(char *buf, size_t len, const row *num, const row *den)
{
    if (num == NULL || den == NULL || den->r.rate <= 0) {
        snprintf(buf, len, "-");
    } else {
        snprintf(buf, len, "%.2fx", num->r.rate / den->r.rate);
    }
}

static void print_row(const bench *b, const row *r)
{
    char lock50[16] = "-", lock99[16] = "-", xraw[16] = "-", xetcd[16] = "-";
    const char *unit = r->k == K_NULL ? "req/s" : r->k == K_PUT ? "writes/s" : "pairs/s";

    if (r->r.op_samples > 0) {
        snprintf(lock50, sizeof lock50, "%.2f", r->r.op_p50_ms);
        snprintf(lock99, sizeof lock99, "%.2f", r->r.op_p99_ms);
    }
    if (r->k == K_GW) {
        ratio(xraw, sizeof xraw, r, find(b, r->aof, K_RAW, r->conns));
        ratio(xetcd, sizeof xetcd, r, find(b, r->aof, K_ETCD, r->conns));
    } else if (r->k == K_GWC) {
        ratio(xetcd, sizeof xetcd, r, find(b, r->aof, K_ETCDC, r->conns));
    }
    printf("| %-8s | %-29s | %5d | %8.0f %-8s | %7.2f | %7.2f | %8s | %8s | %7s | %7s | %4llu |\n",
           r->aof, kind_label(r->k), r->conns, r->r.rate, unit, r->r.unit_p50_ms,
           r->r.unit_p99_ms, lock50, lock99, xraw, xetcd, (unsigned long long)r->r.failures);
}

static void target(const char *what, int known, const char *shown, int met)
{
    printf("  %-58s %-24s %s\n", what, shown, !known ? "no figure" : met ? "met" : "missed");
}

/* A row a target may use: measured, with no failed request. A row whose requests failed
 * (a broken script call, say) gives "no figure", never a ratio that reads as met. */
static const row *clean(const row *r)
{
    return r != NULL && r->r.failures == 0 && r->r.rate > 0 ? r : NULL;
}

static void print_targets(const bench *b, const pass_stats *ps)
{
    const char *aof = ps->aof;
    const row *gw = clean(find(b, aof, K_GW, 64)), *raw = clean(find(b, aof, K_RAW, 64));
    const row *etcd = clean(find(b, aof, K_ETCD, 64)), *gwc = clean(find(b, aof, K_GWC, 64));
    const row *etcdc = clean(find(b, aof, K_ETCDC, 64)), *w1 = clean(find(b, aof, K_PUT, 1));
    const row *w64 = clean(find(b, aof, K_PUT, 64));
    char shown[64];
    double x;

    printf("\ntargets, appendfsync %s:\n", aof);
    x = gw && raw && raw->r.rate > 0 ? gw->r.rate / raw->r.rate : 0;
    snprintf(shown, sizeof shown, "%.2fx (need >= 0.5x)", x);
    target("uncontended pairs at 64 conns vs raw Redis, same AOF", gw && raw, shown, x >= 0.5);
    x = gw && etcd && etcd->r.rate > 0 ? gw->r.rate / etcd->r.rate : 0;
    snprintf(shown, sizeof shown, "%.2fx (need >= 5x)", x);
    target("uncontended pairs at 64 conns vs etcd", gw && etcd, shown, x >= 5);
    x = gw && raw && raw->r.op_p99_ms > 0 ? gw->r.op_p99_ms / raw->r.op_p99_ms : 0;
    snprintf(shown, sizeof shown, "%.2fx (need <= 2x)", x);
    target("/lock p99 at 64 conns vs raw acquire script p99", gw && raw, shown, x <= 2);
    x = w64 && w1 && w1->r.rate > 0 ? w64->r.rate / w1->r.rate : 0;
    snprintf(shown, sizeof shown, "%.2fx (need >= 5x)", x);
    target("token-checked writes at 64 writers vs 1 writer", w64 && w1, shown, x >= 5);
    x = gwc && etcdc && etcdc->r.rate > 0 ? gwc->r.rate / etcdc->r.rate : 0;
    snprintf(shown, sizeof shown, "%.2fx (need >= 4x)", x);
    target("contended pairs at 64 clients vs etcd contended", gwc && etcdc, shown, x >= 4);
    /* What any gateway could reach against these two etcd targets, from this run's own
     * rows. Uncontended: no gateway in front of Redis beats locklib's scripts sent straight
     * to it. Contended: hand-offs on one resource form a chain, each waiting for the one
     * before, and each needs at least one durable Redis write (a grant that Redis may forget
     * can be granted again). The raw row at 1 connection is that chain with two fsync'd
     * scripts per pair and no HTTP, so a gateway granting inside the release script (one
     * script per hand-off) could at most double it. */
    const row *raw1 = clean(find(b, aof, K_RAW, 1));
    if (raw && etcd)
        printf("  %-62s %.2fx etcd\n", "ceiling, uncontended: raw Redis scripts at 64 conns",
               raw->r.rate / etcd->r.rate);
    if (raw1 && etcdc)
        printf("  %-62s %.0f/s = %.2fx etcd\n",
               "ceiling, contended: 2 x raw pairs at 1 conn (1 script/hand-off)",
               2 * raw1->r.rate, 2 * raw1->r.rate / etcdc->r.rate);
    x = ps->hwm_kb / 1024.0;
    snprintf(shown, sizeof shown, "%.1f MB (need < 50 MB)", x);
    target("gateway peak RSS (VmHWM) after 256 conns", ps->hwm_kb > 0, shown, x < 50);
    if (ps->cpu_ok && ps->cpu_pairs > 0) {
        double k = (double)ps->cpu_pairs / 1000.0;
        printf("  %-62s %.4f s (user %.4f + sys %.4f)\n",
               "gateway CPU seconds per 1,000 pairs at 64 conns", (ps->user_s + ps->sys_s) / k,
               ps->user_s / k, ps->sys_s / k);
    }

    /* The targets for the uncontended and contended rows, from the same rows. */
    int always = strcmp(aof, "always") == 0;
    printf("\ntargets, appendfsync %s:\n", aof);
    x = ps->cpu_ok && ps->cpu_pairs > 0 ? (ps->user_s + ps->sys_s) * 1e6 / (double)ps->cpu_pairs
                                        : 0;
    snprintf(shown, sizeof shown, "%.1f us (need <= 20 us)", x);
    target("1. gateway CPU per pair at 64 conns, uncontended", ps->cpu_ok && ps->cpu_pairs > 0,
           shown, x <= 20);
    x = gw && raw && raw->r.rate > 0 ? gw->r.rate / raw->r.rate : 0;
    snprintf(shown, sizeof shown, "%.2fx (need >= %.2fx)", x, always ? 0.85 : 0.75);
    target("2. uncontended pairs at 64 conns vs raw Redis scripts", gw && raw, shown,
           x >= (always ? 0.85 : 0.75));
    x = gwc && raw1 ? gwc->r.rate / (2 * raw1->r.rate) : 0;
    snprintf(shown, sizeof shown, "%.0f%% (need >= 70%%)", 100 * x);
    target("3. contended pairs at 64 clients vs the contended ceiling", gwc && raw1, shown,
           x >= 0.7);
    x = gw && raw && raw->r.op_p99_ms > 0 ? gw->r.op_p99_ms / raw->r.op_p99_ms : 0;
    snprintf(shown, sizeof shown, "%.2fx (need <= 1.5x)", x);
    target("4. /lock p99 at 64 conns vs raw acquire script p99 (one run)", gw && raw, shown,
           x <= 1.5);
}

/* The hot-lock targets of one pass, and what the hot rows cost. */
static void print_hot_targets(const bench *b, const pass_stats *ps)
{
    const char *aof = ps->aof;
    const row *gwc = clean(find(b, aof, K_GWC, 64)), *raw1 = clean(find(b, aof, K_RAW, 1));
    int always = strcmp(aof, "always") == 0;
    char shown[64];
    double x;

    /* Hot locks: the contended rows against the ceiling (etcd's ratio is above), and the
     * tail against the queue. With N clients in FIFO order on one lock a waiter waits about N hand-offs, so
     * N / the hand-off rate (pairs/s of the same row) is the wait a fair chain would give. */
    const row *gwc16 = clean(find(b, aof, K_GWC, 16));
    printf("\ntargets for hot locks, appendfsync %s:\n", aof);
    const row *hot[2] = {gwc16, gwc};
    for (int i = 0; i < 2; i++) {
        int n = i == 0 ? 16 : 64;
        char what[96];
        x = hot[i] && raw1 ? hot[i]->r.rate / (2 * raw1->r.rate) : 0;
        snprintf(shown, sizeof shown, "%.0f%% (need >= 60%%)", 100 * x);
        snprintf(what, sizeof what, "contended pairs at %d clients vs the contended ceiling", n);
        target(what, hot[i] && raw1, shown, x >= 0.6);
        double queue_ms = hot[i] ? 1000.0 * n / hot[i]->r.rate : 0;
        x = hot[i] && queue_ms > 0 ? hot[i]->r.op_p99_ms / queue_ms : 0;
        snprintf(shown, sizeof shown, "%.1f / %.1f ms = %.2fx (need <= 2x)",
                 hot[i] ? hot[i]->r.op_p99_ms : 0, queue_ms, x);
        snprintf(what, sizeof what, "/lock p99 at %d clients vs %d / hand-off rate", n, n);
        target(what, hot[i] != NULL, shown, x <= 2);
    }
    /* The contended ceiling leaves out what every hand-off through a gateway also carries:
     * the new holder's /unlock, an HTTP request through the gateway's threads. One client
     * alone on the gateway measures that chain (each request one Redis pass, nothing else
     * running); reading the hot rows against it tells the hand-off's own cost apart from the
     * gateway's serial latency. Not under appendfsync always: there the lone client leaves
     * the cores idle through every fsync, and waking them costs it more than a busy chain
     * pays (the hot rows come out above it). */
    if (ps->hot_cpu_ok && ps->hot_pairs > 0) {
        printf("  %-62s gateway %.1f us, Redis %.1f us\n", "CPU per hand-off at 64 clients",
               ps->hot_gw_s * 1e6 / (double)ps->hot_pairs,
               ps->hot_redis_s * 1e6 / (double)ps->hot_pairs);
    }
    /* Redis's own count: the script calls, the commands they ran, and its time in them (no
     * fsync; it grows when Redis is descheduled). */
    if (ps->hot_scripts_ok && ps->hot_pairs > 0) {
        double n = (double)ps->hot_pairs;
        printf("  %-62s %.2f calls, %.1f commands, %.1f us in scripts\n",
               "Redis scripts per hand-off at 64 clients", (double)ps->hot_scripts.calls / n,
               (double)ps->hot_scripts.cmds / n, (double)ps->hot_scripts.usec / n);
    }
    const row *gw1 = clean(find(b, aof, K_GW, 1));
    if (!always && gw1 != NULL && gw1->r.rate > 0) {
        printf("  %-62s %.0f/s; hot rows at %.0f%% and %.0f%% of it\n",
               "for reference: 2 x fencegate pairs at 1 conn (1 request/hand-off)",
               2 * gw1->r.rate, gwc16 ? 100 * gwc16->r.rate / (2 * gw1->r.rate) : 0,
               gwc ? 100 * gwc->r.rate / (2 * gw1->r.rate) : 0);
    }
}

static void print_report(const bench *b)
{
    printf("\nfencegate vs raw Redis scripts vs etcd %s, one run: %d ms per row after %d ms "
           "warm-up, %ld cores,\n"
           "one load generator (single-threaded epoll, one request in flight per keep-alive "
           "connection)\n\n",
           "3.4", b->measure_ms, b->warm_ms, sysconf(_SC_NPROCESSORS_ONLN));
    printf("| AOF      | workload                      | conns | throughput        |  p50 ms "
           "|  p99 ms | lock p50 | lock p99 | fg/raw  | fg/etcd | errs |\n");
    printf("|----------|-------------------------------|-------|-------------------|---------"
           "|---------|----------|----------|---------|---------|------|\n");
    for (int i = 0; i < b->nrows; i++) {
        print_row(b, &b->rows[i]);
    }
    printf("\np50/p99: per pair (lock+unlock, acquire+release) or per request (GET, PUT); "
           "lock p50/p99: the /lock, acquire script or etcd lock alone.\n");
    const row *ceiling = find(b, "-", K_NULL, 64);
    if (ceiling != NULL) {
        printf("load generator ceiling at 64 conns: %.0f req/s against a do-nothing MHD "
               "server = %.0f pairs/s of two requests.\n",
               ceiling->r.rate, ceiling->r.rate / 2);
    }
    for (int i = 0; i < b->npasses; i++) {
        if (!b->hot_only) {
            print_targets(b, &b->passes[i]);
        }
        print_hot_targets(b, &b->passes[i]);
    }
}

static int parse_args(bench *b, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--seconds") == 0 && v != NULL) {
            b->measure_ms = atoi(v) * 1000;
        } else if (strcmp(argv[i], "--warmup-ms") == 0 && v != NULL) {
            b->warm_ms = atoi(v);
        } else if (strcmp(argv[i], "--perf-dir") == 0 && v != NULL) {
            b->perf_dir = v;
        } else if (strcmp(argv[i], "--fencegate") == 0 && v != NULL) {
            b->fencegate = v;
        } else if (strcmp(argv[i], "--hot-only") == 0) {
            b->hot_only = 1;
            continue;
        } else {
            fprintf(stderr, "usage: compare_bench [--seconds N] [--warmup-ms N] "
                            "[--perf-dir DIR] [--fencegate PATH] [--hot-only]\n");
            return -1;
        }
        i++;
    }
    if (b->measure_ms <= 0 || b->warm_ms < 0) {
        fprintf(stderr, "compare_bench: --seconds must be > 0 and --warmup-ms >= 0\n");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    bench *b = &g_bench;
    struct sigaction sa = {.sa_handler = on_signal};

    b->measure_ms = 5000;
    b->warm_ms = 1000;
    b->fencegate = FENCEGATE_BIN;
    if (parse_args(b, argc, argv) != 0) {
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    atexit(cleanup);
    th_tempdir(b->dir, sizeof b->dir, "compare");
    if (start_null_server(b) != 0 || (!b->hot_only && start_etcd(b) != 0)) {
        return 1;
    }
    fprintf(stderr, "compare_bench: load generator ceiling (trivial MHD server)\n");
    for (int c = 1; c <= 256 && !b->hot_only; c *= c == 1 ? 16 : 4) {
        run_row(b, "-", K_NULL, c, NULL);
    }
    if (run_pass(b, "always") != 0 || run_pass(b, "everysec") != 0) {
        return 1;
    }
    cp_stop(&b->etcd, SIGTERM, STOP_TIMEOUT_MS);
    cp_stop(&b->null_srv, SIGTERM, STOP_TIMEOUT_MS);
    print_report(b);
    return 0;
}
