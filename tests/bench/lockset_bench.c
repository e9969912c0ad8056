/*
 * lockset_bench: multi-resource lock pairs (a set of 2 resources locked and unlocked
 * together) against single pairs (one resource), on one Redis and on a 3-master Redis
 * Cluster, in one run. A program that prints figures, not a test.
 *
 * It starts a redis-server and a 3-master Cluster (both AOF, appendfsync always: tests/common
 * /harness.h) and a gateway on each, on free loopback ports in private temp dirs, stopped by
 * PID at the end. Rows, each for --seconds, every thread on resources of its own (no
 * contention):
 *   locklib 1 / N threads   single: lk_acquire + lk_release of one resource;
 *                           set-2:  lk_acquire_many + lk_release_many of two;
 *   gateway N threads       single: POST /lock + POST /unlock of one resource;
 *                           set-2:  the same with "resources" of two (one keep-alive
 *                           connection per thread, libcurl).
 * Each set-2 row prints pairs/s and the cost of one set pair in single pairs of the same
 * topology and row (single pairs/s divided by set pairs/s: 1.0 costs the same, 2.0 as much as
 * locking each resource alone). Asserts nothing.
 *
 * Usage: lockset_bench [--seconds N] [--threads N] [--fencegate PATH]
 * (--fencegate: the gateway binary to run, for interleaved runs of two builds)
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "compare_procs.h"
#include "harness.h"
#include "locklib/locklib.h"

static int64_t row_ms = 3000;
static int threads = 16;
static const char *fencegate_bin = FENCEGATE_BIN;

typedef struct worker {
    const char *url;       /* the Redis URL (locklib rows) or http://127.0.0.1:PORT */
    int id, set, gateway;
    const char *tag;
    int64_t until_ms;
    long done, failed;
} worker;

static void lk_pairs(worker *w)
{
    lk_options o;
    lk_client *c = NULL;
    char a[64], b[64], owner[40];
    lk_result r;

    lk_options_init(&o);
    if (lk_client_open(&c, w->url, &o) != LK_OK) {
        w->failed++;
        lk_client_close(c);
        return;
    }
    snprintf(a, sizeof a, "%s.%d.a", w->tag, w->id);
    snprintf(b, sizeof b, "%s.%d.b", w->tag, w->id);
    snprintf(owner, sizeof owner, "bench-%d", w->id);
    while (th_now_ms() < w->until_ms) {
        int ok;
        if (w->set) {
            lk_many it[2] = {{.resource = a}, {.resource = b}};
            ok = lk_acquire_many(c, it, 2, owner, 10000, NULL, 0) == LK_ACQUIRED &&
                 lk_release_many(c, it, 2, owner, NULL) == LK_OK &&
                 it[0].status == LK_RELEASED && it[1].status == LK_RELEASED;
        } else {
            ok = lk_acquire(c, a, owner, 10000, 0, NULL, &r) == LK_ACQUIRED &&
                 lk_release(c, a, owner, NULL, &r) == LK_RELEASED;
        }
        if (ok) {
            w->done++;
        } else {
            w->failed++;
        }
    }
    lk_client_close(c);
}

static size_t sink(char *data, size_t size, size_t n, void *arg)
{
    (void)data;
    (void)arg;
    return size * n;
}

static long post(CURL *c, const char *url, const char *body, struct curl_slist *headers)
{
    long status = 0;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink);
    if (curl_easy_perform(c) == CURLE_OK) {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    }
    return status;
}

static void gw_pairs(worker *w)
{
    CURL *c = curl_easy_init();
    struct curl_slist *json = curl_slist_append(NULL, "Content-Type: application/json");
    char lock_url[128], unlock_url[128], names[160], body[320];

    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
    snprintf(lock_url, sizeof lock_url, "%s/lock", w->url);
    snprintf(unlock_url, sizeof unlock_url, "%s/unlock", w->url);
    if (w->set) {
        snprintf(names, sizeof names, "\"resources\":[\"%s.%d.a\",\"%s.%d.b\"]", w->tag, w->id,
                 w->tag, w->id);
    } else {
        snprintf(names, sizeof names, "\"resource\":\"%s.%d.a\"", w->tag, w->id);
    }
    snprintf(body, sizeof body, "{%s,\"owner\":\"bench-%d\",\"ttl_ms\":10000}", names, w->id);
    while (th_now_ms() < w->until_ms) {
        if (post(c, lock_url, body, json) == 200) {
            char unlock[320];
            snprintf(unlock, sizeof unlock, "{%s,\"owner\":\"bench-%d\"}", names, w->id);
            if (post(c, unlock_url, unlock, json) == 200) {
                w->done++;
                continue;
            }
        }
        w->failed++;
    }
    curl_slist_free_all(json);
    curl_easy_cleanup(c);
}

static void *run_worker(void *p)
{
    worker *w = p;
    if (w->gateway) {
        gw_pairs(w);
    } else {
        lk_pairs(w);
    }
    return NULL;
}

/* One row: n threads for row_ms. Returns pairs/s. */
static double row(const char *url, const char *tag, int n, int set, int gateway, long *failed)
{
    static worker ws[256];
    pthread_t th[256];
    int64_t start = th_now_ms();

    for (int i = 0; i < n; i++) {
        ws[i] = (worker){.url = url, .id = i, .set = set, .gateway = gateway, .tag = tag,
                         .until_ms = start + row_ms};
        pthread_create(&th[i], NULL, run_worker, &ws[i]);
    }
    long done = 0;
    *failed = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        done += ws[i].done;
        *failed += ws[i].failed;
    }
    return (double)done * 1000.0 / (double)(th_now_ms() - start);
}

static int start_gateway(cp_proc *gw, const char *name, const char *redis_url, const char *dir)
{
    char listen[64], data[300], log[320];
    gw->port = th_free_port();
    snprintf(listen, sizeof listen, "127.0.0.1:%d", gw->port);
    snprintf(data, sizeof data, "%s/%s", dir, name);
    snprintf(log, sizeof log, "%s/%s.log", dir, name);
    char *argv[] = {(char *)fencegate_bin, "--listen", listen, "--redis", (char *)redis_url,
                    "--data", data, NULL};
    if (cp_spawn(gw, name, argv, log) != 0) {
        return -1;
    }
    return cp_wait_http(gw, "/healthz", 20000);
}

/* The rows of one topology: single and set-2, side by side. */
static void topology(const char *name, const char *redis_url, const char *base)
{
    static const struct {
        const char *what;
        int gateway, many;
    } kinds[] = {{"locklib, 1 thread", 0, 0}, {"locklib, N threads", 0, 1},
                 {"gateway, N threads", 1, 1}};
    static int serial;

    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        int n = kinds[k].many ? threads : 1;
        char tag[32];
        long f1 = 0, f2 = 0;
        snprintf(tag, sizeof tag, "r%d", ++serial);
        double single = row(kinds[k].gateway ? base : redis_url, tag, n, 0, kinds[k].gateway, &f1);
        snprintf(tag, sizeof tag, "r%d", ++serial);
        double set = row(kinds[k].gateway ? base : redis_url, tag, n, 1, kinds[k].gateway, &f2);
        char what[64];
        snprintf(what, sizeof what, "%s", kinds[k].what);
        if (kinds[k].many) {
            snprintf(what, sizeof what, "%s, %d threads", kinds[k].gateway ? "gateway" : "locklib",
                     n);
        }
        printf("%-10s %-24s %12.0f %12.0f %10.2f %8ld\n", name, what, single, set,
               set > 0 ? single / set : 0.0, f1 + f2);
        fflush(stdout);
    }
}

int main(int argc, char **argv)
{
    th_redis redis;
    th_cluster cl;
    cp_proc gws[2] = {{.name = "single"}, {.name = "cluster"}};
    char dir[256], base[2][64];

    if (argc % 2 == 0) {
        row_ms = 0; /* a flag without its value: the usage below */
    }
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--seconds") == 0) {
            row_ms = atol(argv[i + 1]) * 1000;
        } else if (strcmp(argv[i], "--threads") == 0) {
            threads = atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--fencegate") == 0) {
            fencegate_bin = argv[i + 1]; /* another build, for interleaved runs */
        } else {
            row_ms = 0; /* unknown: the usage below */
        }
    }
    if (row_ms <= 0 || threads < 1 || threads > 256) {
        fprintf(stderr, "usage: lockset_bench [--seconds N] [--threads 1..256] "
                        "[--fencegate PATH]\n");
        return 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    th_tempdir(dir, sizeof dir, "lockset-bench");
    th_redis_start(&redis, 1, NULL);
    th_cluster_start(&cl, 3, 0, NULL);
    if (start_gateway(&gws[0], "single", redis.url, dir) != 0 ||
        start_gateway(&gws[1], "cluster", cl.url, dir) != 0) {
        fprintf(stderr, "lockset_bench: a gateway did not start (logs in %s)\n", dir);
        cp_stop_all();
        th_cluster_stop(&cl);
        th_redis_stop(&redis);
        return 1;
    }
    printf("lock+unlock pairs/s, %lld s a row, uncontended; Redis appendfsync always\n",
           (long long)(row_ms / 1000));
    printf("%-10s %-24s %12s %12s %10s %8s\n", "topology", "client", "single", "set-2",
           "set cost", "failed");
    for (int t = 0; t < 2; t++) {
        snprintf(base[t], sizeof base[t], "http://127.0.0.1:%d", gws[t].port);
    }
    topology("redis", redis.url, base[0]);
    topology("cluster", cl.url, base[1]);
    printf("set cost: single pairs/s / set-2 pairs/s (1.00: a set pair costs one single pair; "
           "2.00: two)\n");
    for (int t = 0; t < 2; t++) {
        cp_stop(&gws[t], SIGTERM, 10000);
    }
    th_cluster_stop(&cl);
    th_redis_stop(&redis);
    th_rmtree(dir);
    curl_global_cleanup();
    return 0;
}
