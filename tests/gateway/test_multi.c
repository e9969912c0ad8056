/*
 * Several gateways sharing one PostgreSQL store and token ledger (--store postgresql://...),
 * end to end with the real binaries, a real PostgreSQL 15 and real redis-servers:
 *   - lock on A, write on B, read on C: the store is shared;
 *   - tokens strictly increase across interleaved grants on A, B and C;
 *   - a stale write via C after a newer grant via B is a 409;
 *   - an Idempotency-Key retry that lands on another gateway replays the first answer (the
 *     owner secret is shared through the store);
 *   - kill -9 of a gateway during writes: every acknowledged write is there afterwards;
 *   - Redis loses its data: a lock via another gateway gets a token above every earlier one,
 *     including one that was granted and never written (the shared ledger, fence.c);
 *   - a split brain: A and B on two Redis instances whose data diverged, sharing the store:
 *     no token is handed out twice for a resource, no lower-token write is accepted; a keyed
 *     /lock the ledger refused is retried above it and its key then replays the new token,
 *     while a replay of a token the ledger has gone past answers 503;
 *   - the disk under PostgreSQL's tables really fills up (a tablespace on a small tmpfs):
 *     the write that does not fit is 507 and invisible, a /lock whose grant does not fit is
 *     503, the acknowledged values read back whole, and both work again once there is space;
 *   - PostgreSQL killed -9 or stopped: locks and writes answer 503 within a bound, /readyz is
 *     503 and names the store, and the gateways recover by themselves when it is back;
 *   - the password of the store URL never appears in --check-config, a log or /readyz.
 * No test asserts timing; every wait is a loop on a condition with a deadline.
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gw_test.h"
#include "harness.h"

#define N_GW 3

/* One PostgreSQL and one Redis for the group; three gateways on them. */
typedef struct multi_state {
    th_pg pg;
    th_redis redis;
    char store[512];
    gwt_proc gw[N_GW];
} multi_state;

static void start_gateway(multi_state *s, gwt_proc *gw, const char *redis_url)
{
    const char *const args[] = {"--store", s->store, NULL};
    gwt_start(gw, redis_url, NULL, args);
}

static int group_setup(void **state)
{
    multi_state *s = calloc(1, sizeof *s);
    if (s == NULL) {
        return -1;
    }
    th_pg_start(&s->pg);
    th_redis_start(&s->redis, 1, NULL);
    th_pg_url(&s->pg, "postgres", s->store, sizeof s->store);
    for (int i = 0; i < N_GW; i++) {
        start_gateway(s, &s->gw[i], s->redis.url);
    }
    *state = s;
    return 0;
}

static int group_teardown(void **state)
{
    multi_state *s = *state;
    for (int i = 0; i < N_GW; i++) {
        if (s->gw[i].pid > 0) {
            gwt_stop(&s->gw[i]);
        } else {
            gwt_cleanup(&s->gw[i]);
        }
    }
    th_redis_stop(&s->redis);
    th_pg_stop(&s->pg);
    free(s);
    return 0;
}

/* POST /lock {resource, owner} (owner may be NULL: generated) with an optional
 * Idempotency-Key; fills r. */
static void lock_req(const gwt_proc *gw, const char *resource, const char *owner,
                     const char *idem_key, gwt_resp *r)
{
    char body[512], key[160];
    const char *headers[3] = {"Content-Type: application/json", NULL, NULL};
    if (owner != NULL) {
        snprintf(body, sizeof body, "{\"resource\":\"%s\",\"owner\":\"%s\"}", resource, owner);
    } else {
        snprintf(body, sizeof body, "{\"resource\":\"%s\"}", resource);
    }
    if (idem_key != NULL) {
        snprintf(key, sizeof key, "Idempotency-Key: %s", idem_key);
        headers[1] = key;
    }
    gwt_http(gw, "POST", "/lock", headers, body, strlen(body), 0, r);
}

/* Locks resource as owner; returns the token (fails the test unless 200). */
static long long lock_ok(const gwt_proc *gw, const char *resource, const char *owner)
{
    gwt_resp r;
    lock_req(gw, resource, owner, NULL, &r);
    gwt_assert_status(&r, 200, NULL);
    long long token = gwt_int(&r, "token");
    gwt_resp_free(&r);
    assert_true(token > 0);
    return token;
}

static void unlock_ok(const gwt_proc *gw, const char *resource, const char *owner)
{
    char body[512];
    gwt_resp r;
    snprintf(body, sizeof body, "{\"resource\":\"%s\",\"owner\":\"%s\"}", resource, owner);
    gwt_post(gw, "/unlock", body, &r);
    gwt_assert_status(&r, 200, NULL);
    gwt_resp_free(&r);
}

/* fencegate_token_floor_corrections_total of gw. */
static long long floor_corrections(const gwt_proc *gw)
{
    gwt_resp r;
    gwt_get(gw, "/metrics", &r);
    gwt_assert_status(&r, 200, NULL);
    const char *line = strstr(r.body, "\nfencegate_token_floor_corrections_total ");
    assert_non_null(line);
    long long n = strtoll(line + strlen("\nfencegate_token_floor_corrections_total "), NULL, 10);
    gwt_resp_free(&r);
    return n;
}

static void test_lock_a_write_b_read_c(void **state)
{
    multi_state *s = *state;
    long long token = lock_ok(&s->gw[0], "multi.abc", "owner-abc");
    assert_int_equal(gwt_put_fenced(&s->gw[1], "multi.abc", token, "written via B", NULL), 200);
    gwt_assert_value(&s->gw[2], "multi.abc", "written via B");
    gwt_assert_value(&s->gw[0], "multi.abc", "written via B");
    unlock_ok(&s->gw[1], "multi.abc", "owner-abc"); /* unlocked via yet another gateway */
}

static void test_tokens_increase_across_gateways(void **state)
{
    multi_state *s = *state;
    long long last = 0;
    for (int i = 0; i < 30; i++) {
        const gwt_proc *gw = &s->gw[(i * 7 + i / 3) % N_GW];
        long long token = lock_ok(gw, "multi.inc", "owner-inc");
        if (token <= last) {
            fail_msg("grant %d via %s: token %lld after %lld", i, gw->url, token, last);
        }
        last = token;
        unlock_ok(&s->gw[(i + 1) % N_GW], "multi.inc", "owner-inc");
    }
}

static void test_stale_write_via_c_is_409(void **state)
{
    multi_state *s = *state;
    gwt_resp r;
    long long old = lock_ok(&s->gw[0], "multi.stale", "owner-old");
    unlock_ok(&s->gw[0], "multi.stale", "owner-old");
    long long newer = lock_ok(&s->gw[1], "multi.stale", "owner-new");
    assert_true(newer > old);
    assert_int_equal(gwt_put_fenced(&s->gw[2], "multi.stale", old, "old holder", &r), 409);
    gwt_assert_status(&r, 409, "stale_token");
    gwt_resp_free(&r);
    assert_int_equal(gwt_put_fenced(&s->gw[1], "multi.stale", newer, "new holder", NULL), 200);
    assert_int_equal(gwt_put_fenced(&s->gw[2], "multi.stale", old, "old holder", NULL), 409);
    gwt_assert_value(&s->gw[0], "multi.stale", "new holder");
    unlock_ok(&s->gw[2], "multi.stale", "owner-new");
}

static void test_idempotent_retry_on_another_gateway(void **state)
{
    multi_state *s = *state;
    gwt_resp first, again;
    lock_req(&s->gw[0], "multi.idem", NULL, "retry-key-1-5b0e4f7a9c21", &first);
    gwt_assert_status(&first, 200, NULL);
    lock_req(&s->gw[2], "multi.idem", NULL, "retry-key-1-5b0e4f7a9c21", &again);
    gwt_assert_status(&again, 200, NULL);
    assert_int_equal(gwt_int(&again, "token"), gwt_int(&first, "token"));
    assert_string_equal(gwt_str(&again, "owner"), gwt_str(&first, "owner"));
    assert_int_equal(gwt_int(&again, "holds"), 1);
    /* A re-entry on the third gateway repeats the token: the same grant, by its holder. */
    assert_int_equal(lock_ok(&s->gw[1], "multi.idem", gwt_str(&first, "owner")),
                     gwt_int(&first, "token"));
    unlock_ok(&s->gw[1], "multi.idem", gwt_str(&first, "owner"));
    unlock_ok(&s->gw[1], "multi.idem", gwt_str(&first, "owner"));
    gwt_resp_free(&first);
    gwt_resp_free(&again);
}

/* The writer of test_kill_during_writes: lock, write, unlock through one gateway until it
 * fails, recording each acknowledged write's value. */
typedef struct kill_writer {
    const gwt_proc *gw;
    int acked;           /* writes answered 200: multi.kill.0 .. acked-1 */
} kill_writer;

static void *kill_writer_run(void *arg)
{
    kill_writer *w = arg;
    for (int i = 0; i < 100000; i++) {
        char res[64], value[64];
        gwt_resp r;
        snprintf(res, sizeof res, "multi.kill.%d", i);
        snprintf(value, sizeof value, "value %d", i);
        lock_req(w->gw, res, "owner-kill", NULL, &r);
        long long token = r.status == 200 ? gwt_int(&r, "token") : -1;
        gwt_resp_free(&r);
        if (token <= 0 || gwt_put_fenced(w->gw, res, token, value, NULL) != 200) {
            break;
        }
        __atomic_store_n(&w->acked, i + 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

static void test_kill_during_writes(void **state)
{
    multi_state *s = *state;
    kill_writer w = {.gw = &s->gw[0]};
    pthread_t th;

    assert_int_equal(pthread_create(&th, NULL, kill_writer_run, &w), 0);
    int64_t deadline = th_now_ms() + 20000;
    while (__atomic_load_n(&w.acked, __ATOMIC_ACQUIRE) < 20 && th_now_ms() < deadline) {
        th_nap_ms(5);
    }
    assert_int_equal(gwt_signal_wait(&s->gw[0], SIGKILL), -1);
    pthread_join(th, NULL);
    assert_true(w.acked >= 20);
    for (int i = 0; i < w.acked; i++) {
        char res[64], value[64];
        snprintf(res, sizeof res, "multi.kill.%d", i);
        snprintf(value, sizeof value, "value %d", i);
        gwt_assert_value(&s->gw[1 + i % 2], res, value);
    }
    gwt_cleanup(&s->gw[0]);
    start_gateway(s, &s->gw[0], s->redis.url); /* for the tests after this one */
}

static void test_redis_data_loss(void **state)
{
    multi_state *s = *state;
    long long written = lock_ok(&s->gw[0], "multi.loss", "owner-w");
    assert_int_equal(gwt_put_fenced(&s->gw[0], "multi.loss", written, "before the loss", NULL), 200);
    unlock_ok(&s->gw[0], "multi.loss", "owner-w");
    /* Granted via B and never written: only the ledger knows it. */
    long long unwritten = lock_ok(&s->gw[1], "multi.loss", "owner-u");
    unlock_ok(&s->gw[1], "multi.loss", "owner-u");
    assert_true(unwritten > written);

    /* C restarts as well (its in-process floor is gone): only the shared ledger knows. */
    assert_int_equal(th_redis_cmd(&s->redis, NULL, 0, "FLUSHALL"), 0);
    assert_int_equal(gwt_stop(&s->gw[2]), 0);
    start_gateway(s, &s->gw[2], s->redis.url);
    long long after = lock_ok(&s->gw[2], "multi.loss", "owner-after");
    if (after <= unwritten) {
        fail_msg("after the loss C granted %lld, not above %lld (granted via B)", after,
                 unwritten);
    }
    assert_int_equal(gwt_put_fenced(&s->gw[2], "multi.loss", after, "after the loss", NULL), 200);
    assert_int_equal(gwt_put_fenced(&s->gw[0], "multi.loss", written, "old", NULL), 409);
    gwt_assert_value(&s->gw[1], "multi.loss", "after the loss");
    unlock_ok(&s->gw[2], "multi.loss", "owner-after");
    /* C minted at the highest written token first, the ledger refused it, and C minted
     * again above the ledger's highest. */
    assert_true(floor_corrections(&s->gw[2]) > 0);
}

/* Two Redis instances whose data diverged (a split brain), gateway A on one and B on the
 * other, one store. Both mint from their own counters; the shared ledger must still hand
 * out every token once, and the store accept only increasing tokens. */
static void test_split_brain(void **state)
{
    multi_state *s = *state;
    th_redis other;
    gwt_proc b;
    long long tokens[40];
    long long accepted = 0;
    int n = 0;

    th_redis_start(&other, 1, NULL);
    start_gateway(s, &b, other.url);
    const gwt_proc *gws[2] = {&s->gw[0], &b};
    for (int i = 0; i < 20; i++) {
        for (int g = 0; g < 2; g++) {
            char owner[32], value[32];
            snprintf(owner, sizeof owner, "split-%d-%d", g, i);
            snprintf(value, sizeof value, "via %d round %d", g, i);
            gwt_resp r;
            lock_req(gws[g], "multi.split", owner, NULL, &r);
            if (r.status != 200) {
                /* Both sides "hold" the lock at once in a split brain; a 503 (the ledger
                 * refused three times) is allowed, a duplicate token is not. */
                gwt_assert_status(&r, 503, "backend_unavailable");
                gwt_resp_free(&r);
                continue;
            }
            long long token = gwt_int(&r, "token");
            gwt_resp_free(&r);
            for (int k = 0; k < n; k++) {
                if (tokens[k] == token) {
                    fail_msg("token %lld handed out twice (split brain)", token);
                }
            }
            tokens[n++] = token;
            /* Most grants are never written: then the store's highest token does not
             * lift the other side's floor, and only the ledger keeps the tokens apart. */
            long st = i % 4 == 3 ? gwt_put_fenced(gws[g], "multi.split", token, value, NULL) : 0;
            if (st == 0) {
                /* not written */
            } else if (st == 200) {
                if (token <= accepted) {
                    fail_msg("write with token %lld accepted after %lld", token, accepted);
                }
                accepted = token;
            } else {
                assert_int_equal(st, 409); /* refused: safe whatever the reason */
            }
            unlock_ok(gws[g], "multi.split", owner);
        }
    }
    assert_true(n >= 20);
    assert_true(floor_corrections(&s->gw[0]) + floor_corrections(&b) > 0);
    gwt_stop(&b);
    th_redis_stop(&other);
}

/* A split brain with an Idempotency-Key: B's diverged Redis mints the token A granted to
 * another owner, and the ledger refuses it (another holder). B gives the hold back and
 * attempts again above the ledger's highest, superseding the key's idempotency record of
 * the refused token (which would otherwise be replayed, and refused, until it expired): the
 * keyed /lock succeeds with a larger token, and a retry of the key replays that new token.
 * A re-entry by A's own holder before that repeats A's token (the same grant). A replay of
 * the key after a later grant to someone else is refused: it never hands out a token the
 * ledger has gone past. Fresh gateways and Redis instances, so both counters and both
 * in-process floors start at zero and B mints A's token. */
static void test_split_brain_keyed_lock_retried(void **state)
{
    multi_state *s = *state;
    const char *key = "split-key-9d3c1a7e5f20";
    th_redis ra, rb;
    gwt_proc a, b;
    gwt_resp r;

    th_redis_start(&ra, 1, NULL);
    th_redis_start(&rb, 1, NULL);
    start_gateway(s, &a, ra.url);
    start_gateway(s, &b, rb.url);
    long long granted = lock_ok(&a, "multi.replay", "owner-a");
    assert_int_equal(lock_ok(&a, "multi.replay", "owner-a"), granted); /* re-entry */
    unlock_ok(&a, "multi.replay", "owner-a");
    unlock_ok(&a, "multi.replay", "owner-a"); /* both holds */
    long long corrections = floor_corrections(&b);

    lock_req(&b, "multi.replay", NULL, key, &r); /* B's Redis mints A's token first */
    gwt_assert_status(&r, 200, NULL);
    long long keyed = gwt_int(&r, "token");
    char owner[160];
    snprintf(owner, sizeof owner, "%s", gwt_str(&r, "owner"));
    gwt_resp_free(&r);
    assert_true(keyed > granted);
    assert_true(floor_corrections(&b) > corrections); /* it was refused once, not lucky */

    lock_req(&b, "multi.replay", NULL, key, &r); /* a plain retry: the new answer replayed */
    gwt_assert_status(&r, 200, NULL);
    assert_int_equal(gwt_int(&r, "token"), keyed);
    assert_int_equal(gwt_int(&r, "holds"), 1);
    assert_string_equal(gwt_str(&r, "owner"), owner);
    gwt_resp_free(&r);

    assert_int_equal(gwt_put_fenced(&b, "multi.replay", keyed, "via B", NULL), 200);
    assert_int_equal(gwt_put_fenced(&a, "multi.replay", granted, "via A", NULL), 409);
    unlock_ok(&b, "multi.replay", owner);

    /* A grants a later token to another owner (its Redis mints low, the ledger lifts it);
     * B's replay of the key's answer is then below the ledger: refused, not handed out. */
    long long later = lock_ok(&a, "multi.replay", "owner-a2");
    assert_true(later > keyed);
    lock_req(&b, "multi.replay", NULL, key, &r);
    gwt_assert_status(&r, 503, "backend_unavailable");
    assert_non_null(strstr(r.body, "holder"));
    gwt_resp_free(&r);
    gwt_stop(&a);
    gwt_stop(&b);
    th_redis_stop(&ra);
    th_redis_stop(&rb);
}

/* GET /readyz until it answers `status`; fails the test after 30 s. Returns the answer. */
static void wait_ready(const gwt_proc *gw, long status, gwt_resp *r)
{
    int64_t deadline = th_now_ms() + 30000;
    for (;;) {
        gwt_get(gw, "/readyz", r);
        if (r->status == status) {
            return;
        }
        if (th_now_ms() > deadline) {
            fail_msg("/readyz still answers %ld, not %ld: %s", r->status, status, r->body);
        }
        gwt_resp_free(r);
        th_nap_ms(50);
    }
}

/* One request while the database is down: 503 backend_unavailable within a bound. */
static void expect_503_soon(const gwt_proc *gw, const char *method, const char *resource,
                            long long token)
{
    gwt_resp r;
    int64_t t0 = th_now_ms();
    if (strcmp(method, "PUT") == 0) {
        gwt_put_fenced(gw, resource, token, "while down", &r);
    } else {
        lock_req(gw, resource, "owner-down", NULL, &r);
    }
    int64_t took = th_now_ms() - t0;
    gwt_assert_status(&r, 503, "backend_unavailable");
    gwt_resp_free(&r);
    /* The store's bound: a round trip 5 s, a reconnect libpq's connect_timeout. */
    if (took > 15000) {
        fail_msg("%s %s took %lld ms with the database down", method, resource, (long long)took);
    }
}

/* PostgreSQL killed -9, then stopped, then restarted: locks and writes answer 503 within a
 * bound, /readyz is 503 and names the store, and every gateway recovers by itself. */
static void test_postgres_down_and_back(void **state)
{
    multi_state *s = *state;
    gwt_resp r;
    long long token = lock_ok(&s->gw[0], "multi.pgdown", "owner-pg");
    assert_int_equal(gwt_put_fenced(&s->gw[0], "multi.pgdown", token, "before", NULL), 200);
    unlock_ok(&s->gw[0], "multi.pgdown", "owner-pg");

    for (int round = 0; round < 2; round++) {
        if (round == 0) {
            th_pg_kill(&s->pg);
        } else {
            th_pg_stop_immediate(&s->pg);
        }
        expect_503_soon(&s->gw[1], "POST", "multi.pgdown", 0);
        expect_503_soon(&s->gw[2], "PUT", "multi.pgdown", token);
        wait_ready(&s->gw[0], 503, &r);
        gwt_assert_status(&r, 503, "backend_unavailable");
        assert_string_equal(gwt_str(&r, "storage"), "down");
        assert_non_null(strstr(gwt_str(&r, "store"), "postgresql://"));
        gwt_resp_free(&r);

        th_pg_restart(&s->pg);
        for (int i = 0; i < N_GW; i++) {
            wait_ready(&s->gw[i], 200, &r);
            gwt_resp_free(&r);
        }
        long long again = lock_ok(&s->gw[1 + round], "multi.pgdown", "owner-pg");
        assert_true(again > token);
        assert_int_equal(gwt_put_fenced(&s->gw[2 - round], "multi.pgdown", again, "after", NULL), 200);
        gwt_assert_value(&s->gw[0], "multi.pgdown", "after");
        unlock_ok(&s->gw[0], "multi.pgdown", "owner-pg");
        token = again;
    }
}

/* PUT /resources/resource with token and len bytes of value (any bytes). Returns the status. */
static long put_bytes(const gwt_proc *gw, const char *resource, long long token,
                      const unsigned char *value, size_t len)
{
    char path[256], fence[64];
    gwt_resp r;
    snprintf(path, sizeof path, "/resources/%s", resource);
    snprintf(fence, sizeof fence, "Fencing-Token: %lld", token);
    const char *const headers[] = {fence, "Content-Type: application/octet-stream", NULL};
    gwt_http(gw, "PUT", path, headers, value, len, 0, &r);
    long status = r.status;
    if (status == 507) {
        gwt_assert_status(&r, 507, "insufficient_storage");
    }
    gwt_resp_free(&r);
    return status;
}

/* GET /resources/resource: asserts 200 with exactly value[0..len). */
static void bytes_are(const gwt_proc *gw, const char *resource, const unsigned char *value,
                      size_t len)
{
    char path[256];
    gwt_resp r;
    snprintf(path, sizeof path, "/resources/%s", resource);
    gwt_get(gw, path, &r);
    gwt_assert_status(&r, 200, NULL);
    assert_int_equal(r.len, len);
    assert_memory_equal(r.body, value, len);
    gwt_resp_free(&r);
}

#define FULL_VALUE_BYTES 65536
#define FULL_MAX_PUTS 200   /* 12.5 MiB: far more than the small disk holds */
#define FULL_MAX_LOCKS 5000 /* far more ledger rows than a page holds */

/* What test_postgres_disk_full filled, and where the full disk first refused. */
typedef struct full_run {
    unsigned char values[FULL_MAX_PUTS + 1][FULL_VALUE_BYTES];
    long long tokens[FULL_MAX_PUTS];
    int written;     /* multi.full.0 .. written-1 hold values[i], each still locked */
    int put_refused; /* the index of the write answered 507, or -1 */
    int lock_refused; /* 1 once a /lock was answered 503 because its grant did not fit */
} full_run;

static void full_name(char *buf, size_t len, int i)
{
    snprintf(buf, len, "multi.full.%d", i);
}

/* A /lock whose grant the full disk refused: 503, and the hold was not handed out. */
static int lock_refused_for_space(gwt_resp *r)
{
    if (r->status != 503) {
        return 0;
    }
    gwt_assert_status(r, 503, "backend_unavailable");
    assert_non_null(strstr(r->body, "could not record the fencing token"));
    return 1;
}

/* Locks a new resource and writes an incompressible 64 KiB value to it, again and again,
 * until the full disk refuses the write (507) or the lock's grant (503). */
static void fill_values(const gwt_proc *gw, full_run *f)
{
    uint32_t x = 2463534242u; /* xorshift32: incompressible, so TOAST cannot shrink it */

    f->written = 0;
    f->put_refused = -1;
    f->lock_refused = 0;
    for (int i = 0; i <= FULL_MAX_PUTS; i++) {
        for (size_t k = 0; k < FULL_VALUE_BYTES; k++) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            f->values[i][k] = (unsigned char)x;
        }
    }
    for (int i = 0; i < FULL_MAX_PUTS; i++) {
        char name[64];
        gwt_resp r;
        full_name(name, sizeof name, i); /* a new row each: no space reused */
        lock_req(gw, name, "owner-full", NULL, &r);
        f->lock_refused = lock_refused_for_space(&r);
        if (!f->lock_refused) {
            gwt_assert_status(&r, 200, NULL);
            f->tokens[i] = gwt_int(&r, "token");
        }
        gwt_resp_free(&r);
        if (f->lock_refused) {
            return;
        }
        long st = put_bytes(gw, name, f->tokens[i], f->values[i], FULL_VALUE_BYTES);
        if (st == 507) {
            f->put_refused = i; /* keeps its lock for the write after the space is back */
            return;
        }
        assert_int_equal(st, 200);
        f->written = i + 1;
    }
    fail_msg("the disk never filled after %d writes of %d bytes", FULL_MAX_PUTS,
             FULL_VALUE_BYTES);
}

/* The other half of a full disk: the write refused when a grant was refused first (a new
 * value for the last resource written, kept locked), or the grant refused when a write was
 * (/lock on new resources until the ledger's last page is full). */
static void fill_the_rest(const gwt_proc *gw, full_run *f)
{
    if (f->put_refused < 0) {
        assert_true(f->written > 0);
        int last = f->written - 1;
        char name[64];
        full_name(name, sizeof name, last);
        /* Less than one page was left for the ledger, far less than this value needs. */
        assert_int_equal(put_bytes(gw, name, f->tokens[last], f->values[f->written],
                                   FULL_VALUE_BYTES),
                         507);
        f->put_refused = last;
        return;
    }
    for (int i = 0; i < FULL_MAX_LOCKS && !f->lock_refused; i++) {
        char name[64];
        gwt_resp r;
        snprintf(name, sizeof name, "multi.full.lock.%d", i);
        lock_req(gw, name, "owner-full", NULL, &r);
        f->lock_refused = lock_refused_for_space(&r);
        if (!f->lock_refused) {
            gwt_assert_status(&r, 200, NULL);
            gwt_resp_free(&r);
            unlock_ok(gw, name, "owner-full");
        } else {
            gwt_resp_free(&r);
        }
    }
    if (!f->lock_refused) {
        fail_msg("no /lock refused after %d grants on the full disk", FULL_MAX_LOCKS);
    }
}

/* Both tables of the store on the tablespace fg_small, or back on pg_default. */
static void store_tables_on(const th_pg *pg, const char *tablespace)
{
    char sql[160];
    snprintf(sql, sizeof sql, "ALTER TABLE fencegate_resources SET TABLESPACE %s", tablespace);
    assert_int_equal(th_pg_exec(pg, sql), 0);
    snprintf(sql, sizeof sql, "ALTER TABLE fencegate_ledger SET TABLESPACE %s", tablespace);
    assert_int_equal(th_pg_exec(pg, sql), 0);
}

/* The disk under the store really fills up: the values' and the ledger's tables are moved to a
 * tablespace on a 4 MiB tmpfs (th_pg_small_disk), and incompressible 64 KiB values are written
 * through gateway A until PostgreSQL cannot extend a table (ENOSPC, SQLSTATE 53100). A write
 * that does not fit is answered 507 insufficient_storage and nothing of it is visible; a
 * /lock whose grant does not fit is answered 503 and hands no token out; every acknowledged
 * value reads back whole, through another gateway. When space is back (the tables moved back
 * to the default tablespace), the refused write is accepted and /lock works, without
 * restarting anything. */
static void test_postgres_disk_full(void **state)
{
    multi_state *s = *state;
    static full_run f;
    char dir[256], sql[512], name[64], path[96];
    gwt_resp r;

    th_pg_small_disk(&s->pg, 4u << 20, dir, sizeof dir);
    snprintf(sql, sizeof sql, "CREATE TABLESPACE fg_small LOCATION '%s'", dir);
    assert_int_equal(th_pg_exec(&s->pg, sql), 0);
    store_tables_on(&s->pg, "fg_small");
    fill_values(&s->gw[0], &f);
    fill_the_rest(&s->gw[2], &f);
    print_message("disk full after %d writes of %d bytes\n", f.written, FULL_VALUE_BYTES);
    /* The server's own words: the disk was full, not anything else answered as 507. */
    assert_true(th_pg_log_count(&s->pg, "No space left on device") > 0);

    int refused = f.put_refused;
    full_name(name, sizeof name, refused);
    snprintf(path, sizeof path, "/resources/%s", name);
    if (refused < f.written) {
        bytes_are(&s->gw[1], name, f.values[refused], FULL_VALUE_BYTES); /* the old value */
    } else {
        gwt_get(&s->gw[1], path, &r); /* nothing of the refused write */
        gwt_assert_status(&r, 404, NULL);
        gwt_resp_free(&r);
    }
    for (int i = 0; i < f.written; i++) {
        char done[64];
        full_name(done, sizeof done, i);
        bytes_are(&s->gw[1], done, f.values[i], FULL_VALUE_BYTES);
    }

    store_tables_on(&s->pg, "pg_default");
    const unsigned char *now = f.values[refused < f.written ? f.written : refused];
    assert_int_equal(put_bytes(&s->gw[0], name, f.tokens[refused], now, FULL_VALUE_BYTES), 200);
    bytes_are(&s->gw[2], name, now, FULL_VALUE_BYTES);
    lock_ok(&s->gw[2], "multi.full.after", "owner-full");
    unlock_ok(&s->gw[2], "multi.full.after", "owner-full");
    for (int i = 0; i <= refused && i < FULL_MAX_PUTS; i++) {
        full_name(name, sizeof name, i);
        unlock_ok(&s->gw[0], name, "owner-full");
    }
    /* Leave the server as it was: a crash recovery of a later test must not replay the
     * filling of the small disk (which would fill it again, and fail the recovery). */
    assert_int_equal(th_pg_exec(&s->pg, "CHECKPOINT"), 0);
    assert_int_equal(th_pg_exec(&s->pg, "DROP TABLESPACE fg_small"), 0);
}

/* --store with a password: not in --check-config's output, the log, /readyz. */
static void test_password_never_shown(void **state)
{
    multi_state *s = *state;
    char *out = NULL, *err = NULL;
    gwt_resp r;

    assert_non_null(strstr(s->store, s->pg.password));
    const char *const argv[] = {"--store", s->store, "--check-config", NULL};
    int rc = gwt_run(argv, NULL, &out, &err);
    if (rc != 0 || strstr(out, "postgresql://") == NULL) {
        fail_msg("--check-config: %d\n%s\n%s", rc, out, err);
    }
    assert_null(strstr(out, s->pg.password));
    assert_null(strstr(err, s->pg.password));
    free(out);
    free(err);
    char var[600];
    snprintf(var, sizeof var, "FENCEGATE_STORE=%s", s->store);
    const char *const envs[] = {var, NULL};
    const char *const argv2[] = {"--check-config", NULL};
    rc = gwt_run(argv2, envs, &out, &err);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "postgresql://"));
    assert_null(strstr(out, s->pg.password));
    free(out);
    free(err);

    gwt_get(&s->gw[1], "/readyz", &r);
    gwt_assert_status(&r, 200, NULL);
    assert_non_null(strstr(gwt_str(&r, "store"), "postgresql://"));
    assert_null(strstr(r.body, s->pg.password));
    gwt_resp_free(&r);
    for (int i = 0; i < N_GW; i++) {
        assert_true(gwt_log_wait(&s->gw[i], "store: postgresql://"));
        assert_false(gwt_log_contains(&s->gw[i], s->pg.password));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lock_a_write_b_read_c),
        cmocka_unit_test(test_tokens_increase_across_gateways),
        cmocka_unit_test(test_stale_write_via_c_is_409),
        cmocka_unit_test(test_idempotent_retry_on_another_gateway),
        cmocka_unit_test(test_kill_during_writes),
        cmocka_unit_test(test_redis_data_loss),
        cmocka_unit_test(test_split_brain),
        cmocka_unit_test(test_split_brain_keyed_lock_retried),
        cmocka_unit_test(test_postgres_disk_full),
        cmocka_unit_test(test_postgres_down_and_back),
        cmocka_unit_test(test_password_never_shown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
