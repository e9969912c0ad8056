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
 *     no token is handed out twice for a resource, no lower-token write is accepted; an
 *     Idempotency-Key replay of a token the ledger holds for another owner answers 503;
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
 * another owner; the ledger refuses it (another holder), B answers 503 and gives the hold
 * back, and the key's retry, which B's Redis replays with the same token, is refused again:
 * the token never leaves B. A re-entry by A's own holder repeats A's token (the same grant),
 * and a new request on B gets a token above the ledger. Fresh gateways and Redis instances,
 * so both counters and both in-process floors start at zero and B mints A's token. */
static void test_split_brain_replay_refused(void **state)
{
    multi_state *s = *state;
    th_redis ra, rb;
    gwt_proc a, b;
    gwt_resp r;

    th_redis_start(&ra, 1, NULL);
    th_redis_start(&rb, 1, NULL);
    start_gateway(s, &a, ra.url);
    start_gateway(s, &b, rb.url);
    long long granted = lock_ok(&a, "multi.replay", "owner-a");

    lock_req(&b, "multi.replay", NULL, "split-key-9d3c1a7e5f20", &r);
    gwt_assert_status(&r, 503, "backend_unavailable");
    gwt_resp_free(&r);
    lock_req(&b, "multi.replay", NULL, "split-key-9d3c1a7e5f20", &r); /* replayed by B's Redis */
    gwt_assert_status(&r, 503, "backend_unavailable");
    assert_non_null(strstr(r.body, "holder"));
    gwt_resp_free(&r);

    assert_int_equal(lock_ok(&a, "multi.replay", "owner-a"), granted); /* re-entry */
    long long later = lock_ok(&b, "multi.replay", "owner-b");
    assert_true(later > granted);
    assert_int_equal(gwt_put_fenced(&b, "multi.replay", later, "via B", NULL), 200);
    assert_int_equal(gwt_put_fenced(&a, "multi.replay", granted, "via A", NULL), 409);
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
        cmocka_unit_test(test_split_brain_replay_refused),
        cmocka_unit_test(test_postgres_down_and_back),
        cmocka_unit_test(test_password_never_shown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
