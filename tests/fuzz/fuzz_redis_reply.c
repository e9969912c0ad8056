/*
 * Fuzz target: how locklib decodes what Redis answers. The input is a RESP byte stream, turned
 * into redisReply trees by hiredis's own redisReader, two ways:
 *
 *   1. Each reply goes straight to the decoding helpers: lk__int_at() (every index, in and
 *      out of range), lk__read_acquired(), and lk__sub_report() (pub/sub pushes).
 *   2. The whole stream is the answer of a real call (lk_acquire, lk_release, lk_renew,
 *      lk_lock_status, lk_token_range, lk_acquire_fair, lk_fair_cancel, lk_ping) on a handle
 *      whose connection's reader was fed the stream: SCRIPT LOAD answers, NOSCRIPT retries,
 *      error replies, wrong types and short or nested arrays all go through the code the
 *      library runs against a real Redis. The socket under it is one end of a socketpair
 *      that never answers, so a call that wants more than the stream reads EAGAIN at once
 *      and fails as a dropped connection would; the reconnect that follows goes to a unix
 *      socket that does not exist and fails at once too.
 *
 * Invariants: no read outside a reply, no leak, no crash; lk__int_at() returns the integer
 * at i of an array and 0 for anything else; lk__sub_report() reports at most one event, for
 * exactly the resource named by a "fg:{resource}:released" channel; every call returns one
 * of its documented statuses, an error comes with its reason in lk_errstr(), and the tokens
 * a call reports are tokens (ACQUIRED and RENEWED: 1..2^53-1).
 *
 * Input: one byte (bits 0-2: the call; bit 3: the script is already loaded; bit 4: pass an
 * idempotency key; bit 5: floor 41 instead of 0), then the RESP stream.
 */
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz.h"
#include "calls_internal.h"
#include "sub_internal.h"

#define MAX_REPLIES 64
#define MAX_MULTIBULK 4096

typedef struct report_seen {
    int calls;
    int event;
    char resource[LK_RESOURCE_MAX + 1];
} report_seen;

static void on_report(const char *resource, int event, void *userdata)
{
    report_seen *seen = userdata;
    seen->calls++;
    seen->event = event;
    snprintf(seen->resource, sizeof seen->resource, "%s", resource);
}

/* hiredis 0.14 allocates a multi-bulk's element array from the count it reads, before any
 * element arrives ("*2000000000\r\n" asks for 16 GB): a limit of the reader, not of locklib.
 * Inputs with a count over MAX_MULTIBULK after any '*' are skipped. */
static int multibulk_too_large(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '*') {
            continue;
        }
        unsigned long long count = 0;
        for (size_t j = i + 1; j < n && p[j] >= '0' && p[j] <= '9'; j++) {
            count = count * 10 + (p[j] - '0');
            if (count > MAX_MULTIBULK) {
                return 1;
            }
        }
    }
    return 0;
}

static void check_int_at(lk_client *c, const redisReply *r)
{
    size_t n = r->type == REDIS_REPLY_ARRAY ? r->elements : 0;
    for (size_t i = 0; i < n + 2; i++) {
        long long want = (r->type == REDIS_REPLY_ARRAY && i < r->elements &&
                          r->element[i]->type == REDIS_REPLY_INTEGER)
                             ? r->element[i]->integer
                             : 0;
        fuzz_check(lk__int_at(r, i) == want, "lk__int_at is the integer at i, else 0");
    }
    fuzz_check(lk__int_at(NULL, 0) == 0, "lk__int_at(NULL) is 0");

    lk_result res;
    lk__result_init(&res);
    lk_status st = lk__read_acquired(c->err, r, &res);
    fuzz_check(res.token == lk__int_at(r, 1) && res.holds == lk__int_at(r, 2) &&
                   res.ttl_ms == lk__int_at(r, 3) && res.queue_pos == -1,
               "lk__read_acquired reads {1, token, holds, ttl_ms, ...}");
    /* A shared hold (slot 7 is 1) may have token 0: nothing exclusive was minted yet. */
    int shared = lk__int_at(r, 7) == 1;
    fuzz_check(res.shared == shared, "lk__read_acquired reads the shared flag at 7");
    fuzz_check(st == (((res.token >= 1 && res.token <= LK_TOKEN_MAX) ||
                       (shared && res.token == 0))
                          ? LK_ACQUIRED
                          : LK_EREDIS),
               "lk__read_acquired accepts exactly the tokens 1..2^53-1, and 0 when shared");
}

static void check_sub_report(const redisReply *r)
{
    report_seen seen = {0, -1, ""};
    lk__sub_report(r, on_report, &seen);
    fuzz_check(seen.calls <= 1, "one reply, at most one event");
    if (seen.calls == 0) {
        return;
    }
    fuzz_check(r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
                   r->element[0]->type == REDIS_REPLY_STRING,
               "an event comes from a 3-element push");
    const char *kind = r->element[0]->str;
    fuzz_check(seen.event == (strcmp(kind, "message") == 0 ? LK_SUB_RELEASED
                              : strcmp(kind, "subscribe") == 0 ? LK_SUB_SUBSCRIBED
                                                               : -1),
               "the event matches the push kind");
    const redisReply *ch = r->element[1];
    size_t rlen = strlen(seen.resource);
    fuzz_check(lk_valid_resource(seen.resource), "the reported resource is valid");
    fuzz_check(ch->type == REDIS_REPLY_STRING && (size_t)ch->len == rlen + 14 &&
                   memcmp(ch->str, "fg:{", 4) == 0 &&
                   memcmp(ch->str + 4, seen.resource, rlen) == 0 &&
                   memcmp(ch->str + 4 + rlen, "}:released", 10) == 0,
               "the reported resource is the one the channel names, byte for byte");
}

/* Part 1: every reply of the stream through the decoding helpers. */
static void decode_replies(lk_client *c, const uint8_t *p, size_t n)
{
    redisReader *reader = redisReaderCreate();
    void *reply = NULL;

    fuzz_check(reader != NULL, "redisReaderCreate");
    if (redisReaderFeed(reader, (const char *)p, n) == REDIS_OK) {
        for (int i = 0; i < MAX_REPLIES; i++) {
            if (redisReaderGetReply(reader, &reply) != REDIS_OK || reply == NULL) {
                break;
            }
            check_int_at(c, reply);
            check_sub_report(reply);
            freeReplyObject(reply);
            reply = NULL;
        }
    }
    redisReaderFree(reader);
}

/* 1 when st is one of the n statuses that follow. */
static int one_of(lk_status st, int n, ...)
{
    va_list ap;
    int found = 0;
    va_start(ap, n);
    for (int i = 0; i < n; i++) {
        found |= st == va_arg(ap, lk_status);
    }
    va_end(ap);
    return found;
}

static int is_error(lk_status st)
{
    return st == LK_EUNAVAILABLE || st == LK_EREDIS || st == LK_EIDEMPOTENCY;
}

/* Part 2: the stream as Redis's answers to one call. */
static void call_with_answers(lk_client *c, uint8_t op, const uint8_t *p, size_t n)
{
    int sv[2];
    lk_result res;
    lk_lock_info info;
    int64_t base = -1, last = -1;
    int64_t floor = (op & 0x20) ? 41 : 0;
    const char *idem = (op & 0x10) ? "retry-1" : NULL;
    lk_status st = LK_OK;

    fuzz_check(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
    /* Non-blocking under a blocking hiredis context: a read that finds nothing fails at
     * once (EAGAIN is an error in blocking mode) instead of waiting for a server. */
    fuzz_check(fcntl(sv[0], F_SETFL, O_NONBLOCK) == 0, "fcntl");
    redisContext *ctx = redisConnectFd(sv[0]);
    fuzz_check(ctx != NULL && ctx->err == 0, "redisConnectFd");
    fuzz_check(redisReaderFeed(ctx->reader, (const char *)p, n) == REDIS_OK, "feed");
    c->tp.ctx = ctx;
    for (int s = 0; s < LK__SCRIPT_COUNT; s++) {
        snprintf(c->tp.sha[s], sizeof c->tp.sha[s], "%s",
                 (op & 0x08) ? "0123456789abcdef0123456789abcdef01234567" : "");
    }
    c->err[0] = '\0';

    switch (op & 7) {
    case 0:
        st = lk_acquire(c, "orders", "owner-1", 10000, floor, idem, &res);
        fuzz_check(one_of(st, 6, LK_ACQUIRED, LK_HELD, LK_WRONG_MODE, LK_EIDEMPOTENCY,
                          LK_EUNAVAILABLE, LK_EREDIS),
                   "lk_acquire status");
        break;
    case 1:
        st = lk_release(c, "orders", "owner-1", idem, &res);
        fuzz_check(one_of(st, 6, LK_RELEASED, LK_STILL_HELD, LK_NOT_OWNER, LK_EIDEMPOTENCY,
                          LK_EUNAVAILABLE, LK_EREDIS),
                   "lk_release status");
        break;
    case 2:
        st = lk_renew(c, "orders", "owner-1", 10000, idem, &res);
        fuzz_check(one_of(st, 5, LK_RENEWED, LK_NOT_OWNER, LK_EIDEMPOTENCY, LK_EUNAVAILABLE,
                          LK_EREDIS),
                   "lk_renew status");
        break;
    case 3:
        st = lk_lock_status(c, "orders", &info);
        fuzz_check(one_of(st, 3, LK_OK, LK_EUNAVAILABLE, LK_EREDIS), "lk_lock_status status");
        break;
    case 4:
        st = lk_token_range(c, "orders", &base, &last);
        fuzz_check(one_of(st, 3, LK_OK, LK_EUNAVAILABLE, LK_EREDIS), "lk_token_range status");
        fuzz_check(st == LK_OK || (base == 0 && last == 0), "an error leaves the range 0");
        break;
    case 5:
        st = lk_acquire_fair(c, "orders", "owner-1", 10000, floor, idem, 5000, &res);
        fuzz_check(one_of(st, 6, LK_ACQUIRED, LK_HELD, LK_WRONG_MODE, LK_EIDEMPOTENCY,
                          LK_EUNAVAILABLE, LK_EREDIS),
                   "lk_acquire_fair status");
        break;
    case 6:
        st = lk_fair_cancel(c, "orders", "owner-1");
        fuzz_check(one_of(st, 3, LK_OK, LK_EUNAVAILABLE, LK_EREDIS), "lk_fair_cancel status");
        break;
    default:
        st = lk_ping(c);
        fuzz_check(one_of(st, 3, LK_OK, LK_EUNAVAILABLE, LK_EREDIS), "lk_ping status");
        break;
    }
    fuzz_check(!is_error(st) || lk_errstr(c)[0] != '\0', "an error has its reason");
    /* Not token > floor: a re-entry or a replay rightly returns the first token, which a
     * later floor (the gateway's largest token handed out) may have reached. */
    if (st == LK_ACQUIRED) {
        fuzz_check(res.token >= 1 && res.token <= LK_TOKEN_MAX, "ACQUIRED: token in 1..2^53-1");
    }
    if (st == LK_RENEWED) {
        fuzz_check(res.token >= 1 && res.token <= LK_TOKEN_MAX, "RENEWED: token in 1..2^53-1");
    }
    if (c->tp.ctx != NULL) {
        redisFree(c->tp.ctx); /* closes sv[0] */
        c->tp.ctx = NULL;
    }
    close(sv[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static lk_client *c = NULL;

    if (size < 1 || multibulk_too_large(data + 1, size - 1)) {
        return 0;
    }
    if (c == NULL) {
        /* Writes to a socket whose peer is gone must not kill the fuzzer. */
        signal(SIGPIPE, SIG_IGN);
        fuzz_check(lk__client_new(&c, "unix:///nonexistent/fencegate-fuzz/redis.sock", NULL) ==
                       LK_OK,
                   "lk__client_new");
    }
    decode_replies(c, data + 1, size - 1);
    call_with_answers(c, data[0], data + 1, size - 1);
    return 0;
}
