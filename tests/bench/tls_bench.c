/*
 * tls_bench: lock+unlock pairs through the real gateway over plain HTTP and over HTTPS, side
 * by side in one run. A program that prints figures, not a test.
 *
 * It makes a throwaway CA and server certificate with openssl in a private temp dir, starts a
 * redis-server (AOF, appendfsync always; tests/common/harness.h) and two gateways on it, one
 * plain and one with --tls-cert/--tls-key, on free loopback ports, all stopped by PID at the
 * end. For each connection count (1, 16, 64) it runs the plain row, then the TLS row: every
 * client thread keeps one libcurl easy handle, so one keep-alive connection whose handshake
 * is paid once, by its first pair, and sends POST /lock then POST /unlock on a resource of
 * its own (uncontended) for --seconds. A row prints pairs/s (over the whole row, handshakes
 * included), the p50 and p99 of one pair (lock and unlock, from the client; the first pair,
 * which connects, is not sampled), failures, and the TLS row its ratio to the plain row of
 * the same connection count. Asserts nothing.
 *
 * Usage: tls_bench [--seconds N]
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include <curl/curl.h>

#include "compare_procs.h"
#include "harness.h"

#define MAX_CONNS 64
#define MAX_SAMPLES 100000 /* pair latencies kept per thread; later pairs are counted only */

static const int conn_counts[] = {1, 16, 64};
static int64_t row_ms = 5000;
static const char *ca_file;
static FILE *devnull; /* where the answers' bodies go (libcurl's own fwrite) */

typedef struct worker {
    const char *base; /* http(s)://127.0.0.1:PORT */
    const char *tag;  /* resource prefix of the row */
    int id;
    int64_t until_ms;
    long done, failed;
    float *lat_ms; /* MAX_SAMPLES pair latencies */
    long kept;
} worker;

typedef struct row_result {
    double rate, p50_ms, p99_ms;
    long failed;
} row_result;

static long post(CURL *c, const char *url, const char *body)
{
    long status = 0;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    return status;
}

/* One lock+unlock pair on w's resource. Returns 1 when both answered 200. */
static int pair(worker *w, CURL *c, const char *lock_url, const char *unlock_url)
{
    char body[256];
    snprintf(body, sizeof body,
             "{\"resource\":\"tls-bench:%s-%d\",\"owner\":\"bench-%d\",\"ttl_ms\":30000}",
             w->tag, w->id, w->id);
    if (post(c, lock_url, body) != 200)
        return 0;
    snprintf(body, sizeof body, "{\"resource\":\"tls-bench:%s-%d\",\"owner\":\"bench-%d\"}",
             w->tag, w->id, w->id);
    return post(c, unlock_url, body) == 200;
}

static void *run_worker(void *p)
{
    worker *w = p;
    char lock_url[128], unlock_url[128];
    struct curl_slist *json = curl_slist_append(NULL, "Content-Type: application/json");
    CURL *c = curl_easy_init();
    snprintf(lock_url, sizeof lock_url, "%s/lock", w->base);
    snprintf(unlock_url, sizeof unlock_url, "%s/unlock", w->base);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, json);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, devnull);
    curl_easy_setopt(c, CURLOPT_CAINFO, ca_file);
    /* The first pair opens the connection (and does the TLS handshake); it is counted but
     * not sampled, so the latencies are those of a kept-alive connection. */
    if (pair(w, c, lock_url, unlock_url))
        w->done++;
    else
        w->failed++;
    while (th_now_ms() < w->until_ms) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        int ok = pair(w, c, lock_url, unlock_url);
        clock_gettime(CLOCK_MONOTONIC, &b);
        if (!ok) {
            w->failed++;
            continue;
        }
        w->done++;
        if (w->kept < MAX_SAMPLES)
            w->lat_ms[w->kept++] =
                (float)((double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6);
    }
    long connects = 0;
    curl_easy_getinfo(c, CURLINFO_NUM_CONNECTS, &connects);
    if (connects > 0) /* the last request opened a new connection: keep-alive was lost */
        fprintf(stderr, "tls_bench: thread %d reconnected\n", w->id);
    curl_easy_cleanup(c);
    curl_slist_free_all(json);
    return NULL;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* One row: conns threads against base for row_ms. */
static row_result row(const char *base, const char *tag, int conns, worker *ws, float *all)
{
    pthread_t th[MAX_CONNS];
    row_result r = {0};
    int64_t start = th_now_ms();
    for (int i = 0; i < conns; i++) {
        float *lat = ws[i].lat_ms;
        ws[i] = (worker){.base = base, .tag = tag, .id = i, .until_ms = start + row_ms,
                         .lat_ms = lat};
        pthread_create(&th[i], NULL, run_worker, &ws[i]);
    }
    long done = 0, kept = 0;
    for (int i = 0; i < conns; i++) {
        pthread_join(th[i], NULL);
        done += ws[i].done;
        r.failed += ws[i].failed;
        memcpy(all + kept, ws[i].lat_ms, (size_t)ws[i].kept * sizeof *all);
        kept += ws[i].kept;
    }
    /* Over the whole row, so each connection's handshake is in the rate. */
    r.rate = (double)done * 1000.0 / (double)(th_now_ms() - start);
    if (kept > 0) {
        qsort(all, (size_t)kept, sizeof *all, cmp_float);
        r.p50_ms = all[(kept - 1) / 2];
        r.p99_ms = all[(long)((double)(kept - 1) * 0.99)];
    }
    return r;
}

/* The throwaway CA and server certificate (127.0.0.1 and localhost), as
 * tests/security/sec_common.sh makes them. Returns 0 or -1 (printed). */
static int make_certs(const char *dir)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && (set -e; "
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
             "-days 2 -subj /CN=fencegate-bench-ca -keyout ca.key -out ca.pem; "
             "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
             "-subj /CN=localhost -keyout server.key -out server.csr; "
             "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' >san.ext; "
             "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
             "-days 2 -out server.pem -extfile san.ext) >openssl.log 2>&1",
             dir);
    int st = system(cmd);
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "tls_bench: making the test certificate with openssl failed; "
                        "see %s/openssl.log\n", dir);
        return -1;
    }
    return 0;
}

/* Waits up to 20 s for GET /healthz on base to answer 200 (over TLS when base is https). */
static int wait_healthz(cp_proc *gw, const char *base)
{
    char url[128];
    int64_t deadline = th_now_ms() + 20000;
    snprintf(url, sizeof url, "%s/healthz", base);
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 1000L);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, devnull);
    curl_easy_setopt(c, CURLOPT_CAINFO, ca_file);
    for (;;) {
        long status = 0;
        int wstatus;
        if (curl_easy_perform(c) == CURLE_OK)
            curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        if (status == 200)
            break;
        if (waitpid(gw->pid, &wstatus, WNOHANG) == gw->pid || th_now_ms() > deadline) {
            fprintf(stderr, "tls_bench: gateway %s did not answer GET %s\n", gw->name, url);
            curl_easy_cleanup(c);
            return -1;
        }
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    curl_easy_cleanup(c);
    return 0;
}

static int start_gateway(cp_proc *gw, const char *redis_url, const char *dir, int tls,
                         char *base, size_t base_len)
{
    char listen[64], data[300], log[320], cert[300], key[300];
    gw->port = th_free_port();
    snprintf(listen, sizeof listen, "127.0.0.1:%d", gw->port);
    snprintf(data, sizeof data, "%s/%s", dir, gw->name);
    snprintf(log, sizeof log, "%s/%s.log", dir, gw->name);
    snprintf(cert, sizeof cert, "%s/server.pem", dir);
    snprintf(key, sizeof key, "%s/server.key", dir);
    snprintf(base, base_len, "%s://127.0.0.1:%d", tls ? "https" : "http", gw->port);
    char *argv[] = {(char *)FENCEGATE_BIN, "--listen", listen, "--redis", (char *)redis_url,
                    "--data", data,
                    tls ? "--tls-cert" : NULL, cert, "--tls-key", key, NULL};
    if (cp_spawn(gw, gw->name, argv, log) != 0)
        return -1;
    return wait_healthz(gw, base);
}

int main(int argc, char **argv)
{
    th_redis redis;
    cp_proc gws[2] = {{.name = "plain"}, {.name = "tls"}};
    char dir[256], ca[300], bases[2][64];

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
            row_ms = atol(argv[++i]) * 1000;
        } else {
            row_ms = 0;
            break;
        }
    }
    if (row_ms <= 0) {
        fprintf(stderr, "usage: tls_bench [--seconds N]\n");
        return 2;
    }
    devnull = fopen("/dev/null", "w");
    if (devnull == NULL) {
        perror("tls_bench: /dev/null");
        return 1;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    th_tempdir(dir, sizeof dir, "tls-bench");
    snprintf(ca, sizeof ca, "%s/ca.pem", dir);
    ca_file = ca;
    if (make_certs(dir) != 0)
        return 1;
    th_redis_start(&redis, 1, NULL);
    if (start_gateway(&gws[0], redis.url, dir, 0, bases[0], sizeof bases[0]) != 0 ||
        start_gateway(&gws[1], redis.url, dir, 1, bases[1], sizeof bases[1]) != 0) {
        cp_stop_all();
        th_redis_stop(&redis);
        return 1;
    }
    worker *ws = calloc(MAX_CONNS, sizeof *ws);
    float *all = malloc((size_t)MAX_CONNS * MAX_SAMPLES * sizeof *all);
    for (int i = 0; i < MAX_CONNS; i++)
        ws[i].lat_ms = malloc(MAX_SAMPLES * sizeof(float));
    printf("tls_bench: POST /lock + POST /unlock pairs, uncontended (one resource per "
           "connection), one keep-alive libcurl connection per client thread, %lld s per row, "
           "Redis appendfsync always\n\n",
           (long long)(row_ms / 1000));
    printf("| %-5s | %5s | %9s | %9s | %9s | %6s | %8s |\n", "", "conns", "pairs/s",
           "p50 ms", "p99 ms", "failed", "vs plain");
    printf("|-------|-------|-----------|-----------|-----------|--------|----------|\n");
    for (size_t n = 0; n < sizeof conn_counts / sizeof conn_counts[0]; n++) {
        row_result plain = {0};
        for (int g = 0; g < 2; g++) {
            char tag[32];
            snprintf(tag, sizeof tag, "%s-%d", gws[g].name, conn_counts[n]);
            fprintf(stderr, "tls_bench: %s, %d connections\n", gws[g].name, conn_counts[n]);
            row_result r = row(bases[g], tag, conn_counts[n], ws, all);
            char ratio[16] = "";
            if (g == 0)
                plain = r;
            else if (plain.rate > 0)
                snprintf(ratio, sizeof ratio, "%.2fx", r.rate / plain.rate);
            printf("| %-5s | %5d | %9.0f | %9.2f | %9.2f | %6ld | %8s |\n", gws[g].name,
                   conn_counts[n], r.rate, r.p50_ms, r.p99_ms, r.failed, ratio);
            fflush(stdout);
        }
    }
    for (int i = 0; i < MAX_CONNS; i++)
        free(ws[i].lat_ms);
    free(ws);
    free(all);
    int rc = 0;
    for (int g = 0; g < 2; g++) {
        int st = cp_stop(&gws[g], SIGTERM, 10000);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "tls_bench: gateway %s did not exit 0 on SIGTERM (%d)\n",
                    gws[g].name, st);
            rc = 1;
        }
    }
    th_redis_stop(&redis);
    th_rmtree(dir);
    curl_global_cleanup();
    fclose(devnull);
    return rc;
}
