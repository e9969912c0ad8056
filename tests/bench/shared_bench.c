/*
 * shared_bench: shared (read) grants against exclusive grants on one contended resource,
 * through the real gateway, side by side in one run. A program that prints figures, not a
 * test.
 *
 * It starts a redis-server (AOF, appendfsync always; tests/common/harness.h), a gateway on
 * it and the do-nothing libmicrohttpd server (bench_null_server: the load generator's
 * ceiling), on free loopback ports, all stopped by PID at the end. Each row drives 64
 * keep-alive connections with the epoll load generator (loadgen.c), one request in flight
 * each, every connection its own owner, all on ONE resource, each unit a POST /lock then
 * POST /unlock:
 *   - shared:    "mode": "shared" (readers: they should not serialise), on the resource
 *                the exclusive row locked, so that each grant carries its last token and
 *                records its shared mark in the store before it is answered, as readers
 *                after writers do;
 *   - exclusive: the default mode with wait_ms (writers: one at a time, hand-offs);
 *   - excl/own:  exclusive, each connection on a resource of its own (uncontended): the
 *                gateway's pace when nothing serialises;
 *   - ceiling:   the same requests to the do-nothing server.
 * Prints pairs/s (grants per second: one grant per pair), lock p50/p99, failures, and each
 * row's ratio to the exclusive row. Asserts nothing.
 *
 * Usage: shared_bench [--seconds N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compare_procs.h"
#include "harness.h"
#include "loadgen.h"

#define CONNS 64
#define WARM_MS 1000
#define LEASE_MS 10000
#define WAIT_MS 30000

typedef struct sb_ctx {
    int shared;
    int own; /* each connection on a resource of its own (uncontended) */
    const char *resource;
} sb_ctx;

typedef struct sb_state {
    int step;
} sb_state;

static int post(char *buf, size_t cap, const char *path, const char *body)
{
    size_t len = strlen(body);
    int n = snprintf(buf, cap,
                     "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     path, len, body);
    return n < 0 || (size_t)n >= cap ? -1 : n;
}

static int sb_next(void *vctx, int conn, void *vstate, char *buf, size_t cap, int *starts_unit)
{
    const sb_ctx *ctx = vctx;
    sb_state *st = vstate;
    char body[256], name[96];

    snprintf(name, sizeof name, "%s%s%d", ctx->resource, ctx->own ? "-" : "",
             ctx->own ? conn : 0);
    if (!ctx->own) {
        snprintf(name, sizeof name, "%s", ctx->resource);
    }
    if (st->step == 0) {
        *starts_unit = 1;
        snprintf(body, sizeof body,
                 "{\"resource\":\"%s\",\"owner\":\"bench-owner-%020d\",\"ttl_ms\":%d,"
                 "\"wait_ms\":%d,\"mode\":\"%s\"}",
                 name, conn, LEASE_MS, WAIT_MS, ctx->shared ? "shared" : "exclusive");
        return post(buf, cap, "/lock", body);
    }
    snprintf(body, sizeof body, "{\"resource\":\"%s\",\"owner\":\"bench-owner-%020d\"}",
             name, conn);
    return post(buf, cap, "/unlock", body);
}

static lg_verdict sb_reply(void *ctx, int conn, void *vstate, const lg_reply *r)
{
    sb_state *st = vstate;
    (void)ctx;
    (void)conn;
    if (r->status != 200) {
        st->step = 0;
        return LG_FAILED;
    }
    st->step = !st->step;
    return st->step == 1 ? LG_OP_DONE : LG_UNIT_DONE;
}

static int row(const char *name, int port, int shared, int own, const char *resource,
               int measure_ms, lg_result *res)
{
    sb_ctx ctx = {shared, own, resource};
    lg_workload w = {.name = name, .proto = LG_HTTP, .ctx = &ctx,
                     .state_size = sizeof(sb_state), .next = sb_next, .on_reply = sb_reply};
    char err[256];
    fprintf(stderr, "shared_bench: %s\n", name);
    if (lg_run(&w, port, CONNS, WARM_MS, measure_ms, NULL, NULL, res, err, sizeof err) != 0) {
        fprintf(stderr, "shared_bench: %s: %s\n", name, err);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    int measure_ms = 5000;
    th_redis redis;
    cp_proc gw = {.name = "fencegate"}, null = {.name = "null-server"};
    char dir[256], listen[64], data[300], log[320], nport[16], nlog[320];

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
            measure_ms = atoi(argv[++i]) * 1000;
        } else {
            measure_ms = 0;
            break;
        }
    }
    if (measure_ms <= 0) {
        fprintf(stderr, "usage: shared_bench [--seconds N]\n");
        return 2;
    }
    th_tempdir(dir, sizeof dir, "shared-bench");
    th_redis_start(&redis, 1, NULL);
    gw.port = th_free_port();
    snprintf(listen, sizeof listen, "127.0.0.1:%d", gw.port);
    snprintf(data, sizeof data, "%s/data", dir);
    snprintf(log, sizeof log, "%s/gateway.log", dir);
    char *gargv[] = {(char *)FENCEGATE_BIN, "--listen", listen, "--redis", redis.url, "--data",
                     data, NULL};
    null.port = th_free_port();
    snprintf(nport, sizeof nport, "%d", null.port);
    snprintf(nlog, sizeof nlog, "%s/null.log", dir);
    char *nargv[] = {(char *)NULL_SERVER_BIN, nport, NULL};
    if (cp_spawn(&gw, gw.name, gargv, log) != 0 || cp_wait_http(&gw, "/healthz", 15000) != 0 ||
        cp_spawn(&null, null.name, nargv, nlog) != 0 ||
        cp_wait_http(&null, "/healthz", 15000) != 0) {
        cp_stop_all();
        th_redis_stop(&redis);
        return 1;
    }
    static const struct {
        const char *name;
        int shared, null, own;
        const char *resource;
    } rows[] = {{"exclusive", 0, 0, 0, "sb-one-x"},
                {"shared", 1, 0, 0, "sb-one-x"},
                {"excl/own", 0, 0, 1, "sb-own"},
                {"ceiling", 1, 1, 0, "sb-one-n"}};
    enum { ROWS = sizeof rows / sizeof rows[0] };
    lg_result res[ROWS];
    memset(res, 0, sizeof res);
    for (size_t i = 0; i < ROWS; i++) {
        if (row(rows[i].name, rows[i].null ? null.port : gw.port, rows[i].shared, rows[i].own,
                rows[i].resource, measure_ms, &res[i]) != 0) {
            cp_stop_all();
            th_redis_stop(&redis);
            return 1;
        }
    }
    printf("shared_bench: %d connections, each its own owner, all on one resource; each unit "
           "POST /lock (wait_ms %d) + POST /unlock; %d s per row; Redis appendfsync always\n\n",
           CONNS, WAIT_MS, measure_ms / 1000);
    printf("| %-9s | %10s | %11s | %11s | %7s | %12s |\n", "mode", "grants/s", "lock p50 ms",
           "lock p99 ms", "failed", "vs exclusive");
    printf("|-----------|------------|-------------|-------------|---------|--------------|\n");
    for (size_t i = 0; i < ROWS; i++) {
        char ratio[16] = "";
        if (res[0].rate > 0)
            snprintf(ratio, sizeof ratio, "%.1fx", res[i].rate / res[0].rate);
        printf("| %-9s | %10.0f | %11.2f | %11.2f | %7llu | %12s |\n", rows[i].name, res[i].rate,
               res[i].op_p50_ms, res[i].op_p99_ms, (unsigned long long)res[i].failures, ratio);
    }
    printf("\n(excl/own: exclusive, each connection on a resource of its own, uncontended: what "
           "readers that do not serialise could approach; ceiling: the same requests to a "
           "do-nothing libmicrohttpd server, the load generator's own limit)\n");
    cp_stop(&gw, 15, 10000);
    cp_stop(&null, 15, 5000);
    th_redis_stop(&redis);
    return 0;
}
