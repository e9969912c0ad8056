/*
 * txn_bench: fenced transactions (POST /resources) of 2 and 8 writes per second, against
 * single PUTs, through the real gateway, on LMDB and on PostgreSQL, and on LMDB with a Redis
 * Cluster, in one run. A program that prints figures, not a test.
 *
 * It starts a redis-server (AOF, appendfsync always), a PostgreSQL 15 (tests/common/harness.h)
 * and two gateways, one on LMDB (--data) and one on the PostgreSQL store (--store), then a
 * 3-master Redis Cluster with a third gateway on LMDB, on free loopback ports in private
 * temp dirs, stopped by PID at the end. Each of THREADS client
 * threads locks 8 resources of its own once (their tokens stay current: the leases are long
 * and nobody else locks them), then for --seconds per row sends, over one keep-alive
 * connection of its own (libcurl easy handle), one kind of request after the other:
 *   put      PUT /resources/{r} of 64 bytes with its token;
 *   txn-2    POST /resources with 2 writes of 64 bytes;
 *   txn-8    POST /resources with 8 writes of 64 bytes.
 * Each row prints requests/s and the resource writes/s they carried, and the ratio of its
 * requests/s to the put row's of the same store. Asserts nothing.
 *
 * Usage: txn_bench [--seconds N] [--threads N]
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "compare_procs.h"
#include "harness.h"

#define RESOURCES 8
#define VALUE "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

typedef enum kind { K_PUT, K_TXN2, K_TXN8, K_COUNT } kind;
static const char *const kind_names[K_COUNT] = {"put", "txn-2", "txn-8"};
static const int kind_writes[K_COUNT] = {1, 2, 8};

static int64_t row_ms = 3000;
static int threads = 16;

typedef struct worker {
    const char *base;      /* http://127.0.0.1:PORT */
    int id;
    const char *prefix;
    long long tokens[RESOURCES];
    kind k;
    int64_t until_ms;
    long done, failed;
} worker;

static size_t sink(char *data, size_t size, size_t n, void *arg)
{
    (void)data;
    (void)arg;
    return size * n;
}

static size_t keep(char *data, size_t size, size_t n, void *arg)
{
    char *buf = arg;
    size_t have = strlen(buf), add = size * n;
    if (have + add < 512) {
        memcpy(buf + have, data, add);
        buf[have + add] = '\0';
    }
    return size * n;
}

/* One request on w's handle; the answer's status, body into out (512 bytes) if not NULL. */
static long request(CURL *c, const char *method, const char *url, const char *body,
                    struct curl_slist *headers, char *out)
{
    long status = 0;
    if (out != NULL)
        out[0] = '\0';
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body != NULL ? body : "");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, out != NULL ? keep : sink);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    return status;
}

static void *run_worker(void *p)
{
    worker *w = p;
    CURL *c = curl_easy_init();
    char url[256], body[4096], out[512], hdr[64];
    struct curl_slist *json = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
    for (int r = 0; r < RESOURCES && w->tokens[RESOURCES - 1] == 0; r++) {
        snprintf(url, sizeof url, "%s/lock", w->base);
        snprintf(body, sizeof body,
                 "{\"resource\":\"%s-%d-%d\",\"owner\":\"bench-%d\",\"ttl_ms\":3600000}",
                 w->prefix, w->id, r, w->id);
        if (request(c, "POST", url, body, json, out) != 200) {
            w->failed++;
            break;
        }
        json_t *root = json_loads(out, 0, NULL);
        w->tokens[r] = json_integer_value(json_object_get(root, "token"));
        json_decref(root);
    }
    while (w->tokens[RESOURCES - 1] != 0 && th_now_ms() < w->until_ms) {
        long st;
        if (w->k == K_PUT) {
            struct curl_slist *h = curl_slist_append(NULL, "Content-Type: text/plain");
            snprintf(hdr, sizeof hdr, "Fencing-Token: %lld", w->tokens[0]);
            h = curl_slist_append(h, hdr);
            snprintf(url, sizeof url, "%s/resources/%s-%d-0", w->base, w->prefix, w->id);
            st = request(c, "PUT", url, VALUE, h, NULL);
            curl_slist_free_all(h);
        } else {
            size_t used = (size_t)snprintf(body, sizeof body, "{\"writes\":[");
            for (int r = 0; r < kind_writes[w->k]; r++)
                used += (size_t)snprintf(body + used, sizeof body - used,
                                         "%s{\"resource\":\"%s-%d-%d\",\"token\":%lld,"
                                         "\"value\":\"" VALUE "\"}",
                                         r > 0 ? "," : "", w->prefix, w->id, r, w->tokens[r]);
            snprintf(body + used, sizeof body - used, "]}");
            snprintf(url, sizeof url, "%s/resources", w->base);
            st = request(c, "POST", url, body, json, NULL);
        }
        if (st == 200)
            w->done++;
        else
            w->failed++;
    }
    curl_slist_free_all(json);
    curl_easy_cleanup(c);
    return NULL;
}

/* One row: every thread sends kind k to base for row_ms. Returns requests/s. */
static double row(const char *base, const char *prefix, worker *ws, kind k, long *failed)
{
    pthread_t th[256];
    int64_t start = th_now_ms();
    for (int i = 0; i < threads; i++) {
        ws[i].base = base;
        ws[i].prefix = prefix;
        ws[i].id = i;
        ws[i].k = k;
        ws[i].done = ws[i].failed = 0;
        ws[i].until_ms = start + row_ms;
        pthread_create(&th[i], NULL, run_worker, &ws[i]);
    }
    long done = 0;
    *failed = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        done += ws[i].done;
        *failed += ws[i].failed;
    }
    return (double)done * 1000.0 / (double)(th_now_ms() - start);
}

static int start_gateway(cp_proc *gw, const char *name, const char *redis_url,
                         const char *dir, const char *store)
{
    char port[16], listen[64], data[300], log[320];
    gw->port = th_free_port();
    snprintf(port, sizeof port, "%d", gw->port);
    snprintf(listen, sizeof listen, "127.0.0.1:%d", gw->port);
    snprintf(data, sizeof data, "%s/%s", dir, name);
    snprintf(log, sizeof log, "%s/%s.log", dir, name);
    char *argv[] = {(char *)FENCEGATE_BIN, "--listen", listen, "--redis", (char *)redis_url,
                    "--data", data, store != NULL ? "--store" : NULL, (char *)store, NULL};
    if (cp_spawn(gw, name, argv, log) != 0)
        return -1;
    return cp_wait_http(gw, "/healthz", 20000);
}

int main(int argc, char **argv)
{
    th_redis redis;
    th_pg pg;
    th_cluster cl;
    /* The third: LMDB on a 3-master Redis Cluster, whose grants and token checks of one
     * transaction's resources go to several masters. */
    cp_proc gws[3] = {{.name = "lmdb"}, {.name = "postgresql"}, {.name = "lmdb-cluster"}};
    char dir[256], store[512], base[64];

    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--seconds") == 0)
            row_ms = atol(argv[i + 1]) * 1000;
        else if (strcmp(argv[i], "--threads") == 0)
            threads = atoi(argv[i + 1]);
    }
    if (row_ms <= 0 || threads < 1 || threads > 256) {
        fprintf(stderr, "usage: txn_bench [--seconds N] [--threads 1..256]\n");
        return 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    th_tempdir(dir, sizeof dir, "txn-bench");
    th_redis_start(&redis, 1, NULL);
    th_pg_start(&pg);
    th_pg_url(&pg, "postgres", store, sizeof store);
    if (start_gateway(&gws[0], "lmdb", redis.url, dir, NULL) != 0 ||
        start_gateway(&gws[1], "postgresql", redis.url, dir, store) != 0) {
        cp_stop_all();
        return 1;
    }
    th_cluster_start(&cl, 3, 0, NULL);
    if (start_gateway(&gws[2], "lmdb-cluster", cl.url, dir, NULL) != 0) {
        cp_stop_all();
        return 1;
    }
    worker *ws = calloc((size_t)threads, sizeof *ws);
    printf("txn_bench: %d client threads, one keep-alive connection each, %lld s per row, "
           "64-byte values\n\n", threads, (long long)(row_ms / 1000));
    printf("%-13s %-6s %12s %12s %14s %8s\n", "store", "kind", "requests/s", "writes/s",
           "vs put (req)", "failed");
    for (int g = 0; g < 3; g++) {
        double put = 0;
        snprintf(base, sizeof base, "http://127.0.0.1:%d", gws[g].port);
        memset(ws, 0, (size_t)threads * sizeof *ws); /* fresh locks per store */
        for (int k = 0; k < K_COUNT; k++) {
            long failed = 0;
            double rate = row(base, gws[g].name, ws, (kind)k, &failed);
            if (k == K_PUT)
                put = rate;
            printf("%-13s %-6s %12.0f %12.0f %13.2fx %8ld\n", gws[g].name, kind_names[k], rate,
                   rate * kind_writes[k], put > 0 ? rate / put : 0, failed);
        }
    }
    free(ws);
    cp_stop_all();
    th_pg_stop(&pg);
    th_cluster_stop(&cl);
    th_redis_stop(&redis);
    th_rmtree(dir);
    curl_global_cleanup();
    return 0;
}
