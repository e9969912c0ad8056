/*
 * session_bench: what keeping 50 locks alive costs a REST client, with one session against
 * without one, printed side by side in one run against the real fencegate binary and a real
 * redis-server (appendfsync always, as the gateway's tests run it):
 *   - one POST /sessions/{id}/renew of a session holding 50 locks;
 *   - 50 POST /renew, one per lock, one after another on one keep-alive connection (what a
 *     client without sessions does each lease);
 *   - the same 50 /renew with 8 in flight at once (8 keep-alive connections): a client that
 *     parallelises its renewals;
 * and, below the gateway, locklib straight to Redis: lk_session_renew() of the 50 against
 * lk_call_many() of 50 LK_CALL_RENEW in one pipeline (the ceiling of any renewal of 50).
 * Each figure is the median and p99 of ROUNDS rounds, rounds of the kinds interleaved.
 * Usage: session_bench [ROUNDS]  (default 200). Not a test: it asserts nothing about time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>
#include <jansson.h>

#include "gw_test.h"
#include "bench_time.h"
#include "harness.h"
#include "locklib/locklib.h"

#define LOCKS 50
#define PARALLEL 8


static size_t sink(char *p, size_t s, size_t n, void *arg)
{
    (void)p;
    (void)arg;
    return s * n;
}

/* Sets up a POST of body to url on h (kept alive between requests). */
static struct curl_slist *post_setup(CURL *h, const char *url, const char *body)
{
    struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink);
    return hd;
}

static void post_ok(CURL *h, const char *url, const char *body)
{
    struct curl_slist *hd = post_setup(h, url, body);
    long code = 0;
    if (curl_easy_perform(h) != CURLE_OK ||
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code) != CURLE_OK || code != 200) {
        fprintf(stderr, "session_bench: POST %s answered %ld\n", url, code);
        exit(1);
    }
    curl_slist_free_all(hd);
}

/* 50 /renew, PARALLEL at a time, over the multi handle's PARALLEL connections. */
static void renew_parallel(CURLM *m, CURL **hs, const char *url, char (*bodies)[256])
{
    struct curl_slist *hd[LOCKS];
    int next = 0, running = 0, done = 0;
    for (int i = 0; i < PARALLEL; i++, next++) {
        hd[next] = post_setup(hs[i], url, bodies[next]);
        curl_easy_setopt(hs[i], CURLOPT_PRIVATE, (char *)NULL + next);
        curl_multi_add_handle(m, hs[i]);
    }
    while (done < LOCKS) {
        curl_multi_perform(m, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left)) != NULL) {
            CURL *h = msg->easy_handle;
            char *which = NULL;
            curl_easy_getinfo(h, CURLINFO_PRIVATE, &which);
            curl_slist_free_all(hd[which - (char *)NULL]);
            curl_multi_remove_handle(m, h);
            done++;
            if (next < LOCKS) {
                hd[next] = post_setup(h, url, bodies[next]);
                curl_easy_setopt(h, CURLOPT_PRIVATE, (char *)NULL + next);
                curl_multi_add_handle(m, h);
                next++;
            }
        }
        if (done < LOCKS) {
            curl_multi_poll(m, NULL, 0, 100, NULL);
        }
    }
}

static void report(const char *what, double *ms, int n, double ref)
{
    qsort(ms, (size_t)n, sizeof *ms, bench_by_double);
    double med = ms[n / 2], p99 = ms[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1];
    printf("  %-58s %8.2f ms  %8.2f ms  %6.1fx\n", what, med, p99, med / ref);
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 200;
    th_redis redis;
    gwt_proc gw;
    char url[160], renew_url[160], sid[33];
    char bodies[LOCKS][256];

    if (rounds < 10) {
        fprintf(stderr, "usage: session_bench [ROUNDS >= 10]\n");
        return 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    th_redis_start(&redis, 1, NULL);
    gwt_start(&gw, redis.url, NULL, NULL);
    CURL *h = curl_easy_init();

    /* 50 locks in a session, and 50 plain locks. */
    gwt_resp r;
    gwt_post(&gw, "/sessions", "{\"ttl_ms\": 600000}", &r);
    snprintf(sid, sizeof sid, "%s", gwt_str(&r, "session"));
    gwt_resp_free(&r);
    for (int i = 0; i < LOCKS; i++) {
        char body[256];
        snprintf(url, sizeof url, "%s/lock", gw.url);
        snprintf(body, sizeof body, "{\"resource\":\"bench.s%d\",\"session\":\"%s\"}", i, sid);
        post_ok(h, url, body);
        snprintf(body, sizeof body,
                 "{\"resource\":\"bench.p%d\",\"owner\":\"bench-owner\",\"ttl_ms\":600000}", i);
        post_ok(h, url, body);
        snprintf(bodies[i], sizeof bodies[i],
                 "{\"resource\":\"bench.p%d\",\"owner\":\"bench-owner\",\"ttl_ms\":600000}", i);
    }
    snprintf(url, sizeof url, "%s/sessions/%s/renew", gw.url, sid);
    snprintf(renew_url, sizeof renew_url, "%s/renew", gw.url);

    CURLM *m = curl_multi_init();
    CURL *hs[PARALLEL];
    for (int i = 0; i < PARALLEL; i++) {
        hs[i] = curl_easy_init();
    }
    /* locklib straight to Redis, for the ceiling. */
    lk_client *c = NULL;
    char lsid[LK_SESSION_ID_LEN + 1], owner[33];
    lk_random_id(owner);
    if (lk_client_open(&c, redis.url, NULL) != LK_OK ||
        lk_session_create(c, 600000, NULL, lsid) != LK_OK) {
        fprintf(stderr, "session_bench: locklib: %s\n", c != NULL ? lk_errstr(c) : "");
        return 1;
    }
    char names[LOCKS][32];
    lk_call calls[LOCKS];
    lk_call *ptrs[LOCKS];
    for (int i = 0; i < LOCKS; i++) {
        lk_result res;
        snprintf(names[i], sizeof names[i], "bench.l%d", i);
        if (lk_session_acquire(c, lsid, NULL, names[i], owner, 0, NULL, &res) != LK_ACQUIRED) {
            fprintf(stderr, "session_bench: lk_session_acquire: %s\n", lk_errstr(c));
            return 1;
        }
        snprintf(names[i], sizeof names[i], "bench.m%d", i);
        lk_acquire(c, names[i], owner, 600000, 0, NULL, &res);
        calls[i] = (lk_call){.kind = LK_CALL_RENEW, .resource = names[i], .owner = owner,
                             .lease_ms = 600000};
        ptrs[i] = &calls[i];
    }

    double *t[5];
    for (int k = 0; k < 5; k++) {
        t[k] = calloc((size_t)rounds, sizeof *t[k]);
    }
    for (int i = 0; i < rounds; i++) {
        double s = bench_now_ms();
        post_ok(h, url, "{}");
        t[0][i] = bench_now_ms() - s;
        s = bench_now_ms();
        for (int j = 0; j < LOCKS; j++) {
            post_ok(h, renew_url, bodies[j]);
        }
        t[1][i] = bench_now_ms() - s;
        s = bench_now_ms();
        renew_parallel(m, hs, renew_url, bodies);
        t[2][i] = bench_now_ms() - s;
        s = bench_now_ms();
        lk_session_renewal rn;
        if (lk_session_renew(c, lsid, NULL, &rn) != LK_RENEWED || rn.renewed != LOCKS) {
            fprintf(stderr, "session_bench: lk_session_renew: %s\n", lk_errstr(c));
            return 1;
        }
        t[3][i] = bench_now_ms() - s;
        s = bench_now_ms();
        lk_call_many(c, ptrs, LOCKS);
        t[4][i] = bench_now_ms() - s;
    }
    printf("session_bench: keeping %d locks alive, %d rounds (interleaved), fencegate on one "
           "redis-server (appendfsync always)\n", LOCKS, rounds);
    printf("  %-58s %11s  %11s  %7s\n", "", "median", "p99", "vs 1st");
    double ref = 0;
    {
        double *copy = calloc((size_t)rounds, sizeof *copy);
        memcpy(copy, t[0], (size_t)rounds * sizeof *copy);
        qsort(copy, (size_t)rounds, sizeof *copy, bench_by_double);
        ref = copy[rounds / 2];
        free(copy);
    }
    report("HTTP: one POST /sessions/{id}/renew (50 locks)", t[0], rounds, ref);
    report("HTTP: 50 POST /renew, one at a time, one connection", t[1], rounds, ref);
    report("HTTP: 50 POST /renew, 8 in flight on 8 connections", t[2], rounds, ref);
    report("locklib: lk_session_renew (50 locks)", t[3], rounds, ref);
    report("locklib: 50 LK_CALL_RENEW in one pipeline (ceiling)", t[4], rounds, ref);

    for (int k = 0; k < 5; k++) {
        free(t[k]);
    }
    lk_client_close(c);
    for (int i = 0; i < PARALLEL; i++) {
        curl_easy_cleanup(hs[i]);
    }
    curl_multi_cleanup(m);
    curl_easy_cleanup(h);
    gwt_stop(&gw);
    th_redis_stop(&redis);
    curl_global_cleanup();
    return 0;
}
