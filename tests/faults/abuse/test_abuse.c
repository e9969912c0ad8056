/*
 * Abusive HTTP: malformed and hostile requests against the real fencegate binary
 * and a real redis-server. Every case holds a real lock on resource "a" and carries its real
 * token where a token goes, so a request that slipped through would be a write to "a".
 * Each must get its exact status; afterwards "a" was never written and the gateway is alive.
 *
 * What libmicrohttpd 0.9.75 does by itself, and what the gateway adds on top:
 *   - a repeated Content-Length: MHD reads the first one and goes on; the gateway answers 400;
 *   - Content-Length with Transfer-Encoding: chunked: MHD uses the chunks and ignores the
 *     length; the gateway answers 400;
 *   - a NUL in the request target: MHD passes the path on cut at the NUL; the gateway
 *     answers 400 (before that fix, "PUT /resources/a<NUL>b" was a write to "a");
 *   - request line and headers over the connection's 3 KiB pool: MHD answers 431 itself.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <sys/types.h>

#include <cmocka.h>

#include "abuse_sock.h"
#include "gw_test.h"
#include "harness.h"

typedef struct abuse_state {
    th_redis redis;
    gwt_proc gw;
    long long token;        /* the token of the lock held on "a" */
    char owner[160];
} abuse_state;

static abuse_state g_state;

static int group_setup(void **state)
{
    gwt_resp r;
    abuse_state *s = &g_state;

    th_redis_start(&s->redis, 0, NULL);
    gwt_start(&s->gw, s->redis.url, NULL, NULL);
    gwt_post(&s->gw, "/lock", "{\"resource\":\"a\",\"ttl_ms\":600000}", &r);
    gwt_assert_status(&r, 200, NULL);
    s->token = gwt_int(&r, "token");
    snprintf(s->owner, sizeof s->owner, "%s", gwt_str(&r, "owner"));
    gwt_resp_free(&r);
    *state = s;
    return 0;
}

static int group_teardown(void **state)
{
    abuse_state *s = *state;
    /* A sanitizer report or a crash makes the exit status non-zero: that fails the group. */
    int rc = gwt_stop(&s->gw);
    th_redis_stop(&s->redis);
    return rc == 0 ? 0 : -1;
}

/* Sends a raw request and asserts its status, printing the request and the answer. */
static void expect_raw(abuse_state *s, const char *what, const char *req, size_t len, long want)
{
    char body[512];
    long got = ab_raw(s->gw.port, req, len, 10000, body, sizeof body);
    if (got != want) {
        print_error("%s: expected %ld, got %ld with body: %s\n", what, want, got, body);
        fail();
    }
}

/* A PUT of "x" to path (path_len raw bytes, NULs included) carrying token_text. */
static void expect_put(abuse_state *s, const char *what, const char *path, size_t path_len,
                       const char *token_text, long want)
{
    char raw[4096];
    char tail[512];
    int n = snprintf(tail, sizeof tail, " HTTP/1.1\r\nHost: t\r\nFencing-Token: %s\r\n"
                     "Content-Length: 1\r\nConnection: close\r\n\r\nx", token_text);
    assert_true(n > 0 && (size_t)n < sizeof tail && 4 + path_len + (size_t)n <= sizeof raw);
    memcpy(raw, "PUT ", 4);
    memcpy(raw + 4, path, path_len);
    memcpy(raw + 4 + path_len, tail, (size_t)n);
    expect_raw(s, what, raw, 4 + path_len + (size_t)n, want);
}

/* Nothing was written to "a" (or anywhere a trick could lead) and the gateway answers. */
static void assert_untouched(abuse_state *s)
{
    gwt_resp r;
    gwt_get(&s->gw, "/resources/a", &r);
    gwt_assert_status(&r, 404, "not_found");
    gwt_resp_free(&r);
    gwt_get(&s->gw, "/healthz", &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
    assert_int_equal(kill(s->gw.pid, 0), 0);
}

static void test_paths(void **state)
{
    abuse_state *s = *state;
    char token[32];
    char long_path[400];
    static const char nul_path[] = "/resources/a\0b";

    snprintf(token, sizeof token, "%lld", s->token);
    expect_put(s, "raw NUL", nul_path, sizeof nul_path - 1, token, 400);
    expect_put(s, "NUL at the end", nul_path, sizeof nul_path - 2, token, 400);
    static const char *const tricks[] = {
        "/resources/a%00b", "/resources/a%00",     "/resources/%2e%2e",
        "/resources/..%2Fa", "/resources/a%2Fb",   "/resources/%2Fa",
        "/resources/%c0%ae%c0%ae", "/resources/\xc0\xae\xc0\xae", "/resources/a/../a",
        "/resources/./a",  "/resources/%61",       "/resources/a%20",
        NULL};
    for (int i = 0; tricks[i] != NULL; i++) {
        expect_put(s, tricks[i], tricks[i], strlen(tricks[i]), token, 400);
    }
    /* 300 bytes of valid characters: longer than any resource name (200). */
    int n = snprintf(long_path, sizeof long_path, "/resources/");
    memset(long_path + n, 'a', 300);
    long_path[n + 300] = '\0';
    expect_put(s, "300-byte name", long_path, strlen(long_path), token, 400);
    /* The same tricks on a read are refused too, never mapped onto "a". */
    static const char get_nul[] = "GET /resources/a\0b HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    expect_raw(s, "GET with NUL", get_nul, sizeof get_nul - 1, 400);
    assert_untouched(s);
}

static void test_framing(void **state)
{
    abuse_state *s = *state;
    char req[1024];
    int n;

    n = snprintf(req, sizeof req, "PUT /resources/a HTTP/1.1\r\nHost: t\r\nFencing-Token: %lld\r\n"
                 "Content-Length: 1\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx", s->token);
    expect_raw(s, "duplicate Content-Length, equal", req, (size_t)n, 400);
    n = snprintf(req, sizeof req, "PUT /resources/a HTTP/1.1\r\nHost: t\r\nFencing-Token: %lld\r\n"
                 "Content-Length: 1\r\nContent-Length: 5\r\nConnection: close\r\n\r\nxyzzy", s->token);
    expect_raw(s, "duplicate Content-Length, different", req, (size_t)n, 400);
    n = snprintf(req, sizeof req, "PUT /resources/a HTTP/1.1\r\nHost: t\r\nFencing-Token: %lld\r\n"
                 "Content-Length: 3\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                 "1\r\nx\r\n0\r\n\r\n", s->token);
    expect_raw(s, "Content-Length + chunked", req, (size_t)n, 400);
    n = snprintf(req, sizeof req, "PUT /resources/a HTTP/1.1\r\nHost: t\r\nFencing-Token: %lld\r\n"
                 "Transfer-Encoding: chunked\r\nContent-Length: 3\r\nConnection: close\r\n\r\n"
                 "1\r\nx\r\n0\r\n\r\n", s->token);
    expect_raw(s, "chunked + Content-Length", req, (size_t)n, 400);
    n = snprintf(req, sizeof req, "PUT /resources/a HTTP/1.1\r\nHost: t\r\nFencing-Token: %lld\r\n"
                 "Fencing-Token: %lld\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx",
                 s->token, s->token);
    expect_raw(s, "duplicate Fencing-Token", req, (size_t)n, 400);
    n = snprintf(req, sizeof req, "PUT /resources/a HTTP/1.1\r\nHost: t\r\nFencing-Token: %lld\r\n"
                 "Authorization: Bearer x\r\nAuthorization: Bearer y\r\nContent-Length: 1\r\n"
                 "Connection: close\r\n\r\nx", s->token);
    expect_raw(s, "duplicate Authorization", req, (size_t)n, 400);
    n = snprintf(req, sizeof req, "PUT /resources/a HTTP/1.1\r\nHost: t\r\nFencing-Token: %lld\r\n"
                 "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n"
                 "Connection: close\r\n\r\n1\r\nx\r\n0\r\n\r\n", s->token);
    expect_raw(s, "duplicate Transfer-Encoding", req, (size_t)n, 400);
    n = snprintf(req, sizeof req, "PUT /resources/a HTTP/1.1\r\nHost: t\r\nFencing-Token: %lld\r\n"
                 "Transfer-Encoding: gzip\r\nConnection: close\r\n\r\nxx", s->token);
    expect_raw(s, "Transfer-Encoding: gzip", req, (size_t)n, 501);
    n = snprintf(req, sizeof req, "PUT /resources/a HTTP/1.1\r\nHost: t\r\nFencing-Token: %lld\r\n"
                 "Transfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n"
                 "1\r\nx\r\n0\r\n\r\n", s->token);
    expect_raw(s, "Transfer-Encoding: gzip, chunked", req, (size_t)n, 501);
    /* Chunk sizes. libmicrohttpd 0.9.75 parses them itself and tells the
     * gateway nothing of them: a size past 64 bits (17 hex digits) is its own 413 at once.
     * A 16-digit one (ffffffffffffffff) it accepts and passes on only the bytes that follow,
     * and it cannot queue an answer until the body has ended, so the gateway drops what
     * passes --max-value-bytes and closes the connection GW_DRAIN_MAX (8 MiB) past it, or
     * cuts it at the 10 s request deadline when the client stops sending
     * (docs/reliability.md, "What is not guaranteed": the framing edge libmicrohttpd
     * leaves). */
    n = snprintf(req, sizeof req, "PUT /resources/a HTTP/1.1\r\nHost: t\r\nFencing-Token: %lld\r\n"
                 "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                 "10000000000000000\r\nx", s->token);
    expect_raw(s, "chunk size of 17 hex digits", req, (size_t)n, 413);
    /* Neither Content-Length nor Transfer-Encoding: no body by HTTP's rules, not an empty
     * value to store. */
    n = snprintf(req, sizeof req, "PUT /resources/a HTTP/1.1\r\nHost: t\r\nFencing-Token: %lld\r\n"
                 "Connection: close\r\n\r\n", s->token);
    expect_raw(s, "PUT without a length", req, (size_t)n, 411);
    /* Headers over libmicrohttpd's 3 KiB connection pool: its own 431. */
    char big[5000];
    n = snprintf(big, sizeof big, "PUT /resources/a HTTP/1.1\r\nHost: t\r\nFencing-Token: %lld\r\n"
                 "X-Pad: %04000d\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx", s->token, 0);
    expect_raw(s, "4 KB header", big, (size_t)n, 431);
    assert_untouched(s);
}

/* A JSON body of len bytes: depth '[' then as many ']' as fit, under POST /lock. */
static void post_lock_body(abuse_state *s, const char *what, const char *body, size_t len,
                           int chunked, long want)
{
    static const char *const headers[] = {"Content-Type: application/json", NULL};
    gwt_resp r;
    gwt_http(&s->gw, "POST", "/lock", headers, body, len, chunked, &r);
    if (r.status != want) {
        print_error("%s: expected %ld, got %ld with body: %.300s\n", what, want, r.status,
                    r.body);
        fail();
    }
    gwt_resp_free(&r);
}

static void test_json(void **state)
{
    abuse_state *s = *state;
    size_t deep = 100000;
    char *body = malloc(deep + 1);

    assert_non_null(body);
    memset(body, '[', deep);
    post_lock_body(s, "100,000 '[' (over the 16 KiB cap)", body, deep, 0, 413);
    post_lock_body(s, "100,000 '[' chunked", body, deep, 1, 413);
    /* Nesting deep enough to hurt a recursive parser, but under the cap: jansson's depth
     * limit refuses it. */
    post_lock_body(s, "16,000 '['", body, 16000, 0, 400);
    /* A valid object over 16 KiB. */
    size_t huge = 17 * 1024;
    char *obj = malloc(huge + 64);
    assert_non_null(obj);
    int n = snprintf(obj, huge + 64, "{\"resource\":\"a\",\"owner\":\"");
    memset(obj + n, 'o', huge - (size_t)n);
    snprintf(obj + huge, 64, "\"}");
    post_lock_body(s, "17 KiB JSON", obj, strlen(obj), 0, 413);
    post_lock_body(s, "17 KiB JSON chunked", obj, strlen(obj), 1, 413);
    free(obj);
    free(body);
    assert_untouched(s);
}

/* Like such a client: writes all of req (len bytes) on a fresh connection, and only then
 * reads the answer until the gateway closes or 10 s pass. A failed write (EPIPE, a reset)
 * is where those clients stop: returns -1 then, else the status (0 when none came). */
static long send_all_then_read(int port, const char *req, size_t len, char *body,
                               size_t bodylen)
{
    int fd = ab_connect(port);
    int sndbuf = 16 * 1024; /* the body cannot sit in our own buffer: the gateway must read */

    assert_true(fd >= 0);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    while (len > 0) {
        ssize_t n = send(fd, req, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            close(fd);
            return -1;
        }
        req += n;
        len -= (size_t)n;
    }
    return ab_read_answer(fd, 10000, body, bodylen);
}

static void expect_sent_first(abuse_state *s, const char *what, const char *req, size_t len,
                              long want)
{
    char body[512];
    long got = send_all_then_read(s->gw.port, req, len, body, sizeof body);
    if (got != want) {
        print_error("%s: expected %ld, got %ld (-1: the write failed) with body: %s\n", what,
                    want, got, body);
        fail();
    }
}

/* A client that writes its whole request before it reads (Python's http.client, requests,
 * Java's HttpURLConnection) must read the 413 of a body over the cap, not a reset: the
 * gateway reads and drops such a body (up to a bound) before it answers and closes. 2 MiB
 * of JSON to /lock (cap 16 KiB) and 2 MiB to a PUT (cap 1 MiB), each sent in full first. */
static void test_big_body_sent_before_reading(void **state)
{
    abuse_state *s = *state;
    size_t big = 2u << 20;
    char head[512];
    char *req = malloc(big + sizeof head);

    assert_non_null(req);
    int n = snprintf(head, sizeof head, "POST /lock HTTP/1.1\r\nHost: t\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n", big);
    memcpy(req, head, (size_t)n);
    memset(req + n, ' ', big);
    req[n] = '{';
    req[(size_t)n + big - 1] = '}';
    expect_sent_first(s, "2 MiB JSON to /lock, sent before reading", req, (size_t)n + big, 413);
    n = snprintf(head, sizeof head, "PUT /resources/a HTTP/1.1\r\nHost: t\r\n"
                 "Fencing-Token: %lld\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", s->token,
                 big);
    memcpy(req, head, (size_t)n);
    memset(req + n, 'v', big);
    expect_sent_first(s, "2 MiB PUT, sent before reading", req, (size_t)n + big, 413);
    free(req);
    assert_untouched(s);
}

/* HEAD on a GET route answers as the GET would, without a body. */
static void test_head(void **state)
{
    abuse_state *s = *state;
    char body[512];
    static const char head_health[] = "HEAD /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    static const char head_lock[] = "HEAD /locks/a HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    static const char head_value[] =
        "HEAD /resources/a HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";

    assert_int_equal(ab_raw(s->gw.port, head_health, sizeof head_health - 1, 10000, body,
                            sizeof body), 200);
    assert_string_equal(body, "");
    assert_int_equal(ab_raw(s->gw.port, head_lock, sizeof head_lock - 1, 10000, body,
                            sizeof body), 200);
    assert_string_equal(body, "");
    assert_int_equal(ab_raw(s->gw.port, head_value, sizeof head_value - 1, 10000, body,
                            sizeof body), 404);
    assert_string_equal(body, "");
}

static void test_token_spellings(void **state)
{
    abuse_state *s = *state;
    char zero_padded[40];
    static const char path[] = "/resources/a";

    snprintf(zero_padded, sizeof zero_padded, "0%lld", s->token);
    const char *const bad[] = {
        "",     "0",    "-1",   zero_padded, "01",   "1e3",  "0x10",
        "9007199254740992" /* 2^53 */,       "18446744073709551616",
        " ",    "1 2",  "+1",   "1.0",       "1,2",  "\xd9\xa1" /* ARABIC-INDIC ONE */,
        "\xef\xbc\x91" /* FULLWIDTH ONE */,  "\xc2\xb9" /* SUPERSCRIPT ONE */, NULL};
    for (int i = 0; bad[i] != NULL; i++) {
        char what[64];
        snprintf(what, sizeof what, "Fencing-Token '%s'", bad[i]);
        expect_put(s, what, path, sizeof path - 1, bad[i], 400);
    }
    assert_untouched(s);
}

/* Last: the same lock and token do write, so the refusals above were about the requests. */
static void test_real_write_still_works(void **state)
{
    abuse_state *s = *state;
    char token[32];
    static const char path[] = "/resources/a";

    snprintf(token, sizeof token, "%lld", s->token);
    expect_put(s, "the real write", path, sizeof path - 1, token, 200);
    gwt_resp r;
    gwt_get(&s->gw, "/resources/a", &r);
    gwt_assert_status(&r, 200, NULL);
    assert_int_equal(r.len, 1);
    gwt_resp_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paths),
        cmocka_unit_test(test_framing),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_head),
        cmocka_unit_test(test_big_body_sent_before_reading),
        cmocka_unit_test(test_token_spellings),
        cmocka_unit_test(test_real_write_still_works),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
