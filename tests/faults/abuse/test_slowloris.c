/*
 * "Slowloris and floods": at scale and bounded (about 15 s): the real
 * fencegate (--max-connections 600) against a real redis-server, while
 *   - 400 connections trickle a request that never ends, one byte every 500 ms each;
 *   - 300 more connections open and stay silent, 101 more than the limit leaves room for
 *     (they wait in the kernel's accept queue until the deadline frees slots);
 *   - a legitimate client does /lock + /unlock pairs on a kept-alive connection it opened
 *     before the flood.
 * Asserted: the legitimate client succeeds at least 99% of the time; every trickling or
 * silent connection is closed by the gateway's request deadline (GW_REQUEST_DEADLINE_S,
 * 10 s) plus 2 s of slack (twice the deadline for those queued past the limit), never later (libmicrohttpd's idle timeout alone would never close
 * a trickle); the gateway's descriptors stay under the limit plus its own, and return to
 * their baseline (about 25 s in all). The legitimate client's p99 is printed, not asserted (STYLE.md: speed is
 * measured, not asserted). Fresh connections while all 600 slots are taken are refused by
 * libmicrohttpd's limit by design; they are not what this measures.
 */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "abuse_sock.h"
#include "gw_test.h"
#include "harness.h"

#define MAX_CONNECTIONS 600
#define TRICKLERS 400
#define IDLERS 300
#define TRICKLE_EVERY_MS 500
#define DEADLINE_MS 10000          /* GW_REQUEST_DEADLINE_S */
#define SLACK_MS 2000
/* The connections beyond the limit wait in the kernel's accept queue (libmicrohttpd stops
 * accepting at the limit) until the deadline frees slots; then their own deadline starts. */
#define FLOOD_MS (2 * DEADLINE_MS + SLACK_MS + 1000)
#define MAX_PAIRS 100000

typedef struct flood_state {
    th_redis redis;
    gwt_proc gw;
} flood_state;

typedef struct legit {
    const gwt_proc *gw;
    atomic_int stop;
    int pairs;
    int ok;
    int64_t *pair_us;              /* MAX_PAIRS latencies of successful pairs */
} legit;

static int group_setup(void **state)
{
    static flood_state s;
    /* Every connection is 127.0.0.1's: the per-address limit would refuse the flood at
     * accept, which scenarios/idle_flood.sh tests; here the deadline is the point. */
    static const char *const args[] = {"--max-connections", "600", "--threads", "2",
                                       "--max-connections-per-address", "0", NULL};
    th_redis_start(&s.redis, 0, NULL);
    gwt_start(&s.gw, s.redis.url, NULL, args);
    *state = &s;
    return 0;
}

static int group_teardown(void **state)
{
    flood_state *s = *state;
    /* A sanitizer report or a crash makes the exit status non-zero: that fails the group. */
    int rc = gwt_stop(&s->gw);
    th_redis_stop(&s->redis);
    return rc == 0 ? 0 : -1;
}

static size_t discard(char *p, size_t size, size_t n, void *u)
{
    (void)p;
    (void)u;
    return size * n;
}

/* One POST on the kept-alive handle; returns the status, 0 on a transport failure. */
static long post(CURL *c, const char *url, const char *body)
{
    long status = 0;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    if (curl_easy_perform(c) == CURLE_OK) {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    }
    return status;
}

static void *legit_main(void *arg)
{
    legit *l = arg;
    char lock_url[128], unlock_url[128];
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    CURL *c = curl_easy_init();

    snprintf(lock_url, sizeof lock_url, "%s/lock", l->gw->url);
    snprintf(unlock_url, sizeof unlock_url, "%s/unlock", l->gw->url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 5000L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    while (!atomic_load(&l->stop) && l->pairs < MAX_PAIRS) {
        int64_t t0 = th_now_ms() * 1000;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        t0 = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
        long a = post(c, lock_url, "{\"resource\":\"legit\",\"owner\":\"me\",\"ttl_ms\":5000}");
        long b = post(c, unlock_url, "{\"resource\":\"legit\",\"owner\":\"me\"}");
        clock_gettime(CLOCK_MONOTONIC, &ts);
        if (a == 200 && b == 200) {
            l->pair_us[l->ok++] = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000 - t0;
        }
        l->pairs++;
        th_nap_ms(5); /* about 150 pairs a second: a client, not a benchmark */
    }
    curl_easy_cleanup(c);
    curl_slist_free_all(h);
    return NULL;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

typedef struct attacker {
    int fd;
    int64_t opened_ms;
    int64_t closed_ms;             /* 0 while open */
    size_t sent;
} attacker;

/* Notes which attackers the gateway has closed (end of file or reset). */
static int reap_closed(attacker *a, int n)
{
    int open_left = 0;
    for (int i = 0; i < n; i++) {
        if (a[i].closed_ms != 0) {
            continue;
        }
        char buf[256];
        ssize_t got = recv(a[i].fd, buf, sizeof buf, MSG_DONTWAIT);
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
            a[i].closed_ms = th_now_ms();
        } else {
            open_left++;
        }
    }
    return open_left;
}

static void test_flood(void **state)
{
    flood_state *s = *state;
    static attacker att[TRICKLERS + IDLERS];
    static const char trickle[] = "GET /healthz HTTP/1.1\r\nHost: t\r\nX-Slow: "
                                  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    legit l = {.gw = &s->gw};
    pthread_t thread;

    int baseline_fds = ab_fd_count(s->gw.pid);
    assert_true(baseline_fds > 0);
    l.pair_us = calloc(MAX_PAIRS, sizeof *l.pair_us);
    assert_non_null(l.pair_us);
    assert_int_equal(pthread_create(&thread, NULL, legit_main, &l), 0);
    th_nap_ms(200); /* let it open its kept-alive connection first; nothing waits on this */

    int64_t start = th_now_ms();
    for (int i = 0; i < TRICKLERS + IDLERS; i++) {
        att[i].fd = ab_connect(s->gw.port);
        assert_true(att[i].fd >= 0);
        att[i].opened_ms = th_now_ms();
    }
    int max_fds = 0;
    int64_t next_byte = th_now_ms();
    while (th_now_ms() - start < FLOOD_MS) {
        if (th_now_ms() >= next_byte) {
            for (int i = 0; i < TRICKLERS; i++) {
                if (att[i].closed_ms == 0 && att[i].sent < sizeof trickle - 1) {
                    if (send(att[i].fd, trickle + att[i].sent, 1, MSG_NOSIGNAL) == 1) {
                        att[i].sent++;
                    }
                }
            }
            next_byte += TRICKLE_EVERY_MS;
        }
        int open_left = reap_closed(att, TRICKLERS + IDLERS);
        int fds = ab_fd_count(s->gw.pid);
        max_fds = fds > max_fds ? fds : max_fds;
        if (open_left == 0) {
            break;
        }
        th_nap_ms(20);
    }
    atomic_store(&l.stop, 1);
    pthread_join(thread, NULL);

    int late = 0, still_open = 0, over_limit = 0;
    int64_t slowest = 0;
    for (int i = 0; i < TRICKLERS + IDLERS; i++) {
        if (att[i].closed_ms == 0) {
            still_open++;
        } else {
            int64_t held = att[i].closed_ms - att[i].opened_ms;
            slowest = held > slowest ? held : slowest;
            /* The legitimate client holds one of the slots. */
            int queued = i >= MAX_CONNECTIONS - 1;
            late += held > (queued ? 2 * DEADLINE_MS : DEADLINE_MS) + SLACK_MS;
            over_limit += queued;
        }
        close(att[i].fd);
    }
    qsort(l.pair_us, (size_t)l.ok, sizeof *l.pair_us, cmp_i64);
    int64_t p50 = l.ok > 0 ? l.pair_us[l.ok / 2] : -1;
    int64_t p99 = l.ok > 0 ? l.pair_us[(size_t)l.ok * 99 / 100] : -1;
    printf("flood: %d trickling + %d silent connections, limit %d; %d queued past it, "
           "slowest close %lld ms, %d late, %d never closed\n",
           TRICKLERS, IDLERS, MAX_CONNECTIONS, over_limit, (long long)slowest, late, still_open);
    printf("legitimate client: %d/%d lock+unlock pairs ok (%.2f%%), p50 %.1f ms, "
           "p99 %.1f ms\n", l.ok, l.pairs, l.pairs > 0 ? 100.0 * l.ok / l.pairs : 0.0,
           p50 / 1000.0, p99 / 1000.0);
    printf("gateway fds: baseline %d, max %d during the flood\n", baseline_fds, max_fds);
    free(l.pair_us);

    assert_int_equal(still_open, 0);
    assert_int_equal(late, 0);
    assert_true(l.pairs >= 100);
    assert_true(l.ok * 100 >= l.pairs * 99);
    /* Its own descriptors (listeners, epoll, Redis, LMDB, log) plus at most the limit. */
    assert_true(max_fds <= baseline_fds + MAX_CONNECTIONS + 8);
    /* And back to the baseline once the flood has gone (the legitimate client's
     * connection closed with its handle). Each of the gateway's 2 loop threads opens its
     * Redis connection the first time it serves a lock call, which may be during the
     * flood: those 2 may stay, nothing else. */
    int64_t deadline = th_now_ms() + 5000;
    int fds = ab_fd_count(s->gw.pid);
    while (fds > baseline_fds + 2 + 1 && th_now_ms() < deadline) {
        th_nap_ms(20);
        fds = ab_fd_count(s->gw.pid);
    }
    printf("gateway fds after: %d\n", fds);
    assert_true(fds <= baseline_fds + 2 + 1);
    /* Still serving fresh connections, and the closures are counted. */
    gwt_resp r;
    gwt_get(&s->gw, "/healthz", &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
    gwt_get(&s->gw, "/metrics", &r);
    gwt_assert_status(&r, 200, NULL);
    const char *m = strstr(r.body, "\nfencegate_request_deadline_closed_total ");
    assert_non_null(m);
    long long closed = strtoll(m + strlen("\nfencegate_request_deadline_closed_total "), NULL, 10);
    printf("connections closed at their request deadline: %lld\n", closed);
    assert_true(closed >= 400);
    gwt_resp_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_flood)};
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
