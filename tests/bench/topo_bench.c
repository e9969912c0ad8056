/*
 * topo_bench: fencegate on a single Redis, on Sentinel (1 master, 1 replica, 3 sentinels),
 * on a Redis Cluster of 3 masters and 3 replicas and on Redlock over 3 and over 5
 * independent masters, one run side by side. One more Redlock row has one of its 3
 * masters further away: behind tests/faults/fg_proxy holding every chunk SLOW_MS ms each
 * way, as a master in another zone or on a slow disk: what a slow minority costs. And one
 * has a master cut off (the proxy forwards nothing, its connections stay open, as in a
 * network partition): what a minority the gateway cannot reach costs while it lasts.
 *
 *   topo_bench [--seconds N] [--conns N] [--only TAG,TAG...] [--contended]
 *              [--fencegate PATH]
 *                                           (tests/bench/run-topo-bench.sh builds it)
 *
 * --contended: every connection locks and unlocks one shared resource, waiting for it
 * (compare_bench's contended workload), instead of a resource of its own: hand-offs, on each
 * topology. --fencegate runs another gateway binary (an older build, to compare).
 * --only keeps the rows whose tag is listed (single, sentinel, sentinelplain, cluster,
 * clusternorep, redlockthree, redlockfive, redlockslow, redlockcut); the single row always
 * runs, as the reference. Two rows take a topology apart, to show where its cost comes from:
 * sentinelplain is the Sentinel set's master (its replica attached) through a plain
 * redis:// URL, so against the Sentinel row it is what the Sentinel client costs and against
 * the single row what the replica costs; clusternorep is a cluster of 3 masters without
 * replicas, so against the 3+3 row it is what the replicas cost and against the single row
 * what sharding costs.
 * For each topology, started by the test harness on free loopback ports (every data node
 * with AOF, appendfsync always, as in the tests): the gateway with --redis on its URL, then
 * the load generator of compare_bench (loadgen.c, cw_gateway_pairs: each connection locks
 * and unlocks its own resource over keep-alive HTTP) for a warm-up and a measured window.
 * Printed per topology: lock+unlock pairs per second, /lock p50 and p99, and the Redis CPU
 * seconds per 1,000 pairs, the sum over every data node (masters and replicas: replication
 * costs CPU too) of used_cpu_user + used_cpu_sys from INFO cpu, read at both ends of the
 * window, and the same over the masters only (a replica replays every write, which a single
 * Redis without replicas does not pay). Sentinels are not counted: they do no per-pair
 * work. The gateway's CPU per pair comes from /proc/PID/stat over the same window. This
 * 2-core machine cannot show a cluster's added capacity (every node shares the same cores);
 * CPU per pair is the figure that scales.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "compare_procs.h"
#include "compare_work.h"
#include "harness.h"
#include "loadgen.h"

typedef struct topo {
    const char *name;
    const char *tag; /* part of the resource names: letters only */
    th_redis *nodes[TH_MAX_NODES]; /* data nodes, for INFO cpu */
    int nnodes;
    const char *url;
    double cpu_start, master_cpu_start, gw_cpu_start;
    double cpu_s;        /* every data node */
    double master_cpu_s; /* the masters only */
    double gw_cpu_s;     /* the gateway */
    long long scripts_start;
    long long scripts;   /* script calls the masters served in the window */
    pid_t gw_pid;
} topo;

/* used_cpu_user + used_cpu_sys of one node, or -1. */
static double node_cpu(const th_redis *r)
{
    static char info[16384];
    double user = 0, sys = 0;
    if (th_redis_cmd(r, info, sizeof info, "INFO cpu") != 0) {
        return -1;
    }
    const char *u = strstr(info, "used_cpu_user:");
    const char *s = strstr(info, "used_cpu_sys:");
    if (u == NULL || s == NULL) {
        return -1;
    }
    user = strtod(u + strlen("used_cpu_user:"), NULL);
    sys = strtod(s + strlen("used_cpu_sys:"), NULL);
    return user + sys;
}

/* 1 when r says role:master in INFO replication. */
static int node_is_master(const th_redis *r)
{
    char info[4096] = "";
    return th_redis_cmd(r, info, sizeof info, "INFO replication") >= 0 &&
           strstr(info, "role:master") != NULL;
}

/* Script calls served by t's masters. */
static long long topo_scripts(const topo *t)
{
    long long sum = 0;
    for (int i = 0; i < t->nnodes; i++) {
        if (t->nodes[i]->pid > 0 && node_is_master(t->nodes[i])) {
            long long n = th_redis_script_calls(t->nodes[i]);
            sum += n > 0 ? n : 0;
        }
    }
    return sum;
}

/* CPU seconds of t's data nodes: all of them, or only the masters. */
static double topo_cpu(const topo *t, int masters_only)
{
    double sum = 0;
    for (int i = 0; i < t->nnodes; i++) {
        if (t->nodes[i]->pid > 0 && (!masters_only || node_is_master(t->nodes[i]))) {
            double c = node_cpu(t->nodes[i]);
            sum += c > 0 ? c : 0;
        }
    }
    return sum;
}

static double gateway_cpu(const topo *t)
{
    double user = 0, sys = 0;
    return cp_cpu_seconds(t->gw_pid, &user, &sys) == 0 ? user + sys : 0;
}

static void window(void *arg, int begin)
{
    topo *t = arg;
    if (begin) {
        t->cpu_start = topo_cpu(t, 0);
        t->master_cpu_start = topo_cpu(t, 1);
        t->gw_cpu_start = gateway_cpu(t);
        t->scripts_start = topo_scripts(t);
    } else {
        t->scripts = topo_scripts(t) - t->scripts_start;
        t->gw_cpu_s = gateway_cpu(t) - t->gw_cpu_start;
        t->cpu_s = topo_cpu(t, 0) - t->cpu_start;
        t->master_cpu_s = topo_cpu(t, 1) - t->master_cpu_start;
    }
}

static int g_contended;                      /* --contended */
static const char *g_fencegate = FENCEGATE_BIN; /* --fencegate */

/* Runs the gateway on t->url and the pairs workload. Returns 0 with *res filled. */
static int measure(topo *t, int conns, int warm_ms, int measure_ms, lg_result *res)
{
    cp_proc gw = {0};
    char listen[64], data[256], err[512];
    cw_ctx ctx = {0};
    lg_workload w;

    th_tempdir(data, sizeof data, "topo-bench-gw");
    gw.port = th_free_port();
    snprintf(listen, sizeof listen, "127.0.0.1:%d", gw.port);
    char *argv[] = {(char *)g_fencegate, "--listen", listen, "--redis", (char *)t->url, "--data", data,
                    "--max-connections", "1024", "--max-connections-per-address", "0",
                    NULL}; /* every client is 127.0.0.1 */
    if (cp_spawn(&gw, "fencegate", argv, "/dev/null") != 0 ||
        cp_wait_http(&gw, "/readyz", 20000) != 0) {
        return -1;
    }
    t->gw_pid = gw.pid;
    snprintf(ctx.tag, sizeof ctx.tag, "%s-%d", t->tag, (int)getpid());
    ctx.contended = g_contended;
    cw_gateway_pairs(&w, &ctx);
    int rc = lg_run(&w, gw.port, conns, warm_ms, measure_ms, window, t, res, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "topo_bench: %s: %s\n", t->name, err);
    }
    cp_stop(&gw, SIGTERM, 10000);
    th_rmtree(data);
    return rc;
}

#define TOPOS 9
/* The delay of the slow master's proxy, each way. */
#define SLOW_MS 5

/* fg_proxy in front of 127.0.0.1:target, steered through its stdin (kept open in *ctl),
 * given `command` ("delay 5", "blackhole"). Returns its port, or -1 (printed). */
static int start_proxy(int target, const char *command, pid_t *pid, FILE **ctl)
{
    int in[2], out[2];
    char line[128], target_s[16];
    int port = -1;

    snprintf(target_s, sizeof target_s, "%d", target);
    if (pipe(in) != 0 || pipe(out) != 0) {
        perror("topo_bench: pipe");
        return -1;
    }
    *pid = fork();
    if (*pid == 0) {
        dup2(in[0], STDIN_FILENO);
        dup2(out[1], STDOUT_FILENO);
        close(in[1]);
        close(out[0]);
        execl(FG_PROXY_BIN, "fg_proxy", target_s, (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    *ctl = fdopen(in[1], "w");
    FILE *answers = fdopen(out[0], "r");
    if (*pid < 0 || *ctl == NULL || answers == NULL) {
        fprintf(stderr, "topo_bench: cannot start %s\n", FG_PROXY_BIN);
        return -1;
    }
    setvbuf(*ctl, NULL, _IONBF, 0);
    /* Each read waits for the proxy's answer: it prints its port once it listens, and
     * answers each command once it is in force. */
    if (fgets(line, sizeof line, answers) == NULL || sscanf(line, "port %d", &port) != 1) {
        fprintf(stderr, "topo_bench: fg_proxy did not start\n");
        port = -1;
    } else if (fprintf(*ctl, "%s\n", command) < 0 ||
               fgets(line, sizeof line, answers) == NULL || strncmp(line, "ok ", 3) != 0) {
        fprintf(stderr, "topo_bench: fg_proxy refused '%s'\n", command);
        port = -1;
    }
    fclose(answers);
    return port;
}

/* 1 when the row tagged tag runs: no --only, or tag in its comma-separated list. */
static int wanted(const char *only, const char *tag)
{
    if (only == NULL || strcmp(tag, "single") == 0) {
        return 1;
    }
    size_t len = strlen(tag);
    for (const char *p = strstr(only, tag); p != NULL; p = strstr(p + 1, tag)) {
        if ((p == only || p[-1] == ',') && (p[len] == ',' || p[len] == '\0')) {
            return 1;
        }
    }
    return 0;
}

/* Starts n independent masters into set and the row of Redlock over them into t (its URL
 * in url, len bytes). */
static void start_redlock(th_redis_set *set, int n, topo *t, char *url, size_t len,
                          const char *name, const char *tag)
{
    th_redis_set_start(set, n, NULL);
    size_t at = (size_t)snprintf(url, len, "redlock://");
    *t = (topo){.name = name, .tag = tag, .nnodes = n, .url = url};
    for (int i = 0; i < n; i++) {
        at += (size_t)snprintf(url + at, len - at, "%s127.0.0.1:%d", i > 0 ? "," : "",
                               set->nodes[i].port);
        t->nodes[i] = &set->nodes[i];
    }
}

/* Puts set's last master behind an fg_proxy given `command`, in url (len bytes) too.
 * Returns 1, or 0 when the proxy could not be started (printed): the row does not run. */
static int behind_proxy(th_redis_set *set, char *url, size_t len, const char *command,
                        pid_t *pid, FILE **ctl)
{
    int port = start_proxy(set->nodes[set->n - 1].port, command, pid, ctl);
    char *last = strrchr(url, ':');
    if (port < 0 || last == NULL) {
        return 0;
    }
    snprintf(last + 1, len - (size_t)(last + 1 - url), "%d", port);
    return 1;
}

int main(int argc, char **argv)
{
    int seconds = 5, conns = 32;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--contended") == 0) {
            g_contended = 1;
        } else if (v != NULL && strcmp(argv[i], "--seconds") == 0) {
            seconds = atoi(v);
            i++;
        } else if (v != NULL && strcmp(argv[i], "--conns") == 0) {
            conns = atoi(v);
            i++;
        } else if (v != NULL && strcmp(argv[i], "--only") == 0) {
            only = v;
            i++;
        } else if (v != NULL && strcmp(argv[i], "--fencegate") == 0) {
            g_fencegate = v;
            i++;
        }
    }
    static th_redis single;
    static th_sentinel sentinel;
    static th_cluster cluster, cluster_norep;
    static th_redis_set three, five, slow, cut;
    static char url3[256], url5[256], url_slow[256], url_cut[256];
    pid_t proxy_pid[2] = {-1, -1};
    FILE *proxy_ctl[2] = {NULL, NULL};
    topo topos[TOPOS];
    lg_result res[TOPOS];
    int ok[TOPOS] = {0}, run[TOPOS] = {0};

    memset(topos, 0, sizeof topos);
    th_redis_start(&single, 1, NULL);
    topos[0] = (topo){.name = "single", .tag = "single", .nodes = {&single}, .nnodes = 1, .url = single.url};
    run[0] = 1;
    if ((run[1] = wanted(only, "sentinel"))) {
        th_sentinel_start(&sentinel, "benchmaster", 1, 3, NULL);
        topos[1] = (topo){.name = "sentinel", .tag = "sentinel", .nnodes = sentinel.nredis, .url = sentinel.url};
        for (int i = 0; i < sentinel.nredis; i++) {
            topos[1].nodes[i] = &sentinel.redis[i];
        }
    }
    if ((run[2] = wanted(only, "cluster"))) {
        th_cluster_start(&cluster, 3, 1, NULL);
        topos[2] = (topo){.name = "cluster 3+3", .tag = "cluster", .nnodes = cluster.nnodes, .url = cluster.url};
        for (int i = 0; i < cluster.nnodes; i++) {
            topos[2].nodes[i] = &cluster.nodes[i];
        }
    }
    if ((run[6] = wanted(only, "sentinelplain"))) {
        if (!run[1]) {
            th_sentinel_start(&sentinel, "benchmaster", 1, 3, NULL);
        }
        topos[6] = (topo){.name = "sentinel's master, redis://", .tag = "sentinelplain",
                          .nnodes = sentinel.nredis, .url = sentinel.redis[0].url};
        for (int i = 0; i < sentinel.nredis; i++) {
            topos[6].nodes[i] = &sentinel.redis[i];
        }
    }
    if ((run[7] = wanted(only, "clusternorep"))) {
        th_cluster_start(&cluster_norep, 3, 0, NULL);
        topos[7] = (topo){.name = "cluster 3+0", .tag = "clusternorep",
                          .nnodes = cluster_norep.nnodes, .url = cluster_norep.url};
        for (int i = 0; i < cluster_norep.nnodes; i++) {
            topos[7].nodes[i] = &cluster_norep.nodes[i];
        }
    }
    if ((run[3] = wanted(only, "redlockthree"))) {
        start_redlock(&three, 3, &topos[3], url3, sizeof url3, "redlock 3", "redlockthree");
    }
    if ((run[4] = wanted(only, "redlockfive"))) {
        start_redlock(&five, 5, &topos[4], url5, sizeof url5, "redlock 5", "redlockfive");
    }
    if ((run[5] = wanted(only, "redlockslow"))) {
        static char name[64];
        snprintf(name, sizeof name, "redlock 3, one +%d ms each way", SLOW_MS);
        start_redlock(&slow, 3, &topos[5], url_slow, sizeof url_slow, name, "redlockslow");
        char delay[32];
        snprintf(delay, sizeof delay, "delay %d", SLOW_MS);
        run[5] = behind_proxy(&slow, url_slow, sizeof url_slow, delay, &proxy_pid[0],
                              &proxy_ctl[0]);
    }
    if ((run[8] = wanted(only, "redlockcut"))) {
        start_redlock(&cut, 3, &topos[8], url_cut, sizeof url_cut, "redlock 3, one cut off",
                      "redlockcut");
        run[8] = behind_proxy(&cut, url_cut, sizeof url_cut, "blackhole", &proxy_pid[1],
                              &proxy_ctl[1]);
    }
    /* Measured and printed with each decomposition row next to the topology it explains. */
    static const int order[TOPOS] = {0, 1, 6, 2, 7, 3, 4, 5, 8};
    for (int o = 0; o < TOPOS; o++) {
        int k = order[o];
        if (!run[k]) {
            continue;
        }
        fprintf(stderr, "topo_bench: %s, %d conns, %d s\n", topos[k].name, conns, seconds);
        ok[k] = measure(&topos[k], conns, 1000, seconds * 1000, &res[k]) == 0;
    }
    printf("%s, %d connections\n\n",
           g_contended ? "contended: every connection on one resource, waiting" :
                         "uncontended: a resource per connection", conns);
    printf("| Redis topology | pairs/s | vs single | /lock p50 ms | /lock p99 ms | "
           "Redis CPU s per 1,000 pairs (all nodes / masters) | gateway CPU µs per pair | "
           "script calls per pair (masters) | errors |\n");
    printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    int all_ok = 1;
    for (int o = 0; o < TOPOS; o++) {
        int k = order[o];
        if (!run[k]) {
            continue;
        }
        all_ok = all_ok && ok[k];
        if (!ok[k]) {
            printf("| %s | failed | | | | | | | |\n", topos[k].name);
            continue;
        }
        double pairs = res[k].units > 0 ? (double)res[k].units : 1;
        printf("| %s | %.0f | %.2fx | %.2f | %.2f | %.3f / %.3f | %.1f | %.2f | %llu |\n",
               topos[k].name, res[k].rate,
               ok[0] && res[0].rate > 0 ? res[k].rate / res[0].rate : 0, res[k].op_p50_ms,
               res[k].op_p99_ms, topos[k].cpu_s * 1000.0 / pairs,
               topos[k].master_cpu_s * 1000.0 / pairs, topos[k].gw_cpu_s * 1e6 / pairs,
               (double)topos[k].scripts / pairs, (unsigned long long)res[k].failures);
    }
    for (int i = 0; i < 2; i++) {
        if (proxy_pid[i] > 0) {
            kill(proxy_pid[i], SIGTERM);
            waitpid(proxy_pid[i], NULL, 0);
        }
        if (proxy_ctl[i] != NULL) {
            fclose(proxy_ctl[i]);
        }
    }
    if (run[8]) {
        th_redis_set_stop(&cut);
    }
    if (run[5]) {
        th_redis_set_stop(&slow);
    }
    if (run[4]) {
        th_redis_set_stop(&five);
    }
    if (run[3]) {
        th_redis_set_stop(&three);
    }
    if (run[7]) {
        th_cluster_stop(&cluster_norep);
    }
    if (run[2]) {
        th_cluster_stop(&cluster);
    }
    if (run[1] || run[6]) {
        th_sentinel_stop(&sentinel);
    }
    th_redis_stop(&single);
    cp_stop_all();
    return all_ok ? 0 : 1;
}
