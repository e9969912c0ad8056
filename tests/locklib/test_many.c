/*
 * Several resources at once (lk_acquire_many, lk_release_many, lk_renew_many), against a
 * real redis-server and a real 3-master Redis Cluster whose sets span masters:
 *   - a free set is granted whole, one token per resource, and released whole;
 *   - a set with one resource held is granted none: the other grants are undone, and their
 *     tokens burned (the next grant is above them);
 *   - re-entry per resource: an undone set gives back only the hold it added;
 *   - an Idempotency-Key replays every token; after an undone set it acts afresh;
 *   - renewals per resource; duplicate and bad names are refused before Redis;
 *   - a shared set: two owners hold it together, each member with its resource's current
 *     token; an exclusive set is refused while one member is held shared, and a shared set
 *     while one member is held exclusive (nothing of either set is left held); a member the
 *     owner holds in the other mode answers WRONG_MODE for the set, undone.
 */
#include <stdlib.h>
#include <string.h>

#include "lk_test.h"

typedef struct many_fixture {
    th_redis redis;
    th_cluster cl;
    th_redis masters[3];     /* redlock: three independent masters */
    int cluster, redlock;
    lk_client *c;
} many_fixture;

static lk_client *open_url(const char *url)
{
    lk_options o;
    lk_client *c = NULL;
    lk_options_init(&o);
    o.connect_timeout_ms = 1000;
    o.command_timeout_ms = 2000;
    lk_status st = lk_client_open(&c, url, &o);
    if (c == NULL || st != LK_OK) {
        print_error("lk_client_open(%s): %s\n", url, lk_status_name(st));
        fail();
    }
    return c;
}

static int single_setup(void **state)
{
    many_fixture *f = calloc(1, sizeof *f);
    th_redis_start(&f->redis, 1, NULL);
    f->c = open_url(f->redis.url);
    *state = f;
    return 0;
}

static int cluster_setup(void **state)
{
    many_fixture *f = calloc(1, sizeof *f);
    f->cluster = 1;
    th_cluster_start(&f->cl, 3, 0, NULL);
    f->c = open_url(f->cl.url);
    *state = f;
    return 0;
}

static int redlock_setup(void **state)
{
    many_fixture *f = calloc(1, sizeof *f);
    char url[256];
    size_t len = (size_t)snprintf(url, sizeof url, "redlock://");
    f->redlock = 1;
    for (int i = 0; i < 3; i++) {
        th_redis_start(&f->masters[i], 1, NULL);
        len += (size_t)snprintf(url + len, sizeof url - len, "%s127.0.0.1:%d", i ? "," : "",
                                f->masters[i].port);
    }
    f->c = open_url(url);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    many_fixture *f = *state;
    lk_client_close(f->c);
    if (f->redlock) {
        for (int i = 0; i < 3; i++) {
            th_redis_stop(&f->masters[i]);
        }
    } else if (f->cluster) {
        th_cluster_stop(&f->cl);
    } else {
        th_redis_stop(&f->redis);
    }
    free(f);
    return 0;
}

/* n distinct names for one test: "<tag>.<i>", kept in names[i] (64 bytes each). On a
 * Cluster the set must span at least two masters, or the test would prove nothing. */
static void set_names(many_fixture *f, const char *tag, char names[][64], lk_many *items,
                      size_t n)
{
    static int serial;
    int owners[8] = {0};
    int distinct = 0;

    serial++;
    for (size_t i = 0; i < n; i++) {
        snprintf(names[i], 64, "m%d.%s.%zu", serial, tag, i);
        memset(&items[i], 0, sizeof items[i]);
        items[i].resource = names[i];
        if (f->cluster) {
            char key[80];
            int len = snprintf(key, sizeof key, "{%s}", names[i]);
            int owner = th_cluster_slot_owner(&f->cl, 0, th_key_slot(key, (size_t)len));
            assert_true(owner >= 0 && owner < 8);
            distinct += !owners[owner]++;
        }
    }
    if (f->cluster && n > 2) {
        assert_true(distinct >= 2);
    }
}

static void test_free_set_granted_whole(void **state)
{
    many_fixture *f = *state;
    lk_client *c = f->c;
    char names[4][64];
    lk_many it[4];
    lk_lock_info info;

    set_names(f, "free", names, it, 4);
    assert_lk(c, lk_acquire_many(c, it, 4, "alice", 10000, NULL, 0), LK_ACQUIRED);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(it[i].status, LK_ACQUIRED);
        assert_true(it[i].res.token > 0);
        assert_int_equal(it[i].undone, 0);
        assert_lk(c, lk_lock_status(c, names[i], &info), LK_OK);
        assert_int_equal(info.locked, 1);
        assert_int_equal(info.token, it[i].res.token);
    }
    assert_lk(c, lk_release_many(c, it, 4, "alice", NULL), LK_OK);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(it[i].status, LK_RELEASED);
        assert_lk(c, lk_lock_status(c, names[i], &info), LK_OK);
        assert_int_equal(info.locked, 0);
    }
}

static void test_held_member_undoes_the_set(void **state)
{
    many_fixture *f = *state;
    lk_client *c = f->c;
    char names[4][64];
    lk_many it[4];
    lk_result r;
    lk_lock_info info;

    set_names(f, "held", names, it, 4);
    assert_lk(c, lk_acquire(c, names[2], "bob", 10000, 0, NULL, &r), LK_ACQUIRED);
    assert_lk(c, lk_acquire_many(c, it, 4, "alice", 10000, NULL, 0), LK_HELD);
    assert_int_equal(it[2].status, LK_HELD);
    assert_true(it[2].res.ttl_ms > 0);
    int64_t burned[4] = {0};
    for (int i = 0; i < 4; i++) {
        assert_lk(c, lk_lock_status(c, names[i], &info), LK_OK);
        if (i == 2) {
            assert_int_equal(info.locked, 1);
            assert_int_equal(info.token, r.token);
            continue;
        }
        assert_int_equal(it[i].status, LK_ACQUIRED);
        assert_int_equal(it[i].undone, 1);
        assert_int_equal(info.locked, 0); /* nothing of the set is held */
        burned[i] = it[i].res.token;
    }
    /* Once the holder is gone the set is granted, above every burned token. */
    assert_lk(c, lk_release(c, names[2], "bob", NULL, &r), LK_RELEASED);
    assert_lk(c, lk_acquire_many(c, it, 4, "alice", 10000, NULL, 0), LK_ACQUIRED);
    for (int i = 0; i < 4; i++) {
        assert_true(it[i].res.token > burned[i]);
    }
    assert_lk(c, lk_release_many(c, it, 4, "alice", NULL), LK_OK);
}

static void test_reentry_per_resource(void **state)
{
    many_fixture *f = *state;
    lk_client *c = f->c;
    char names[3][64];
    lk_many it[3];
    lk_result r;
    lk_lock_info info;

    set_names(f, "reent", names, it, 3);
    assert_lk(c, lk_acquire(c, names[0], "alice", 10000, 0, NULL, &r), LK_ACQUIRED);
    assert_lk(c, lk_acquire_many(c, it, 2, "alice", 10000, NULL, 0), LK_ACQUIRED);
    assert_int_equal(it[0].res.token, r.token); /* re-entered: the first token */
    assert_int_equal(it[0].res.holds, 2);
    /* [0, 2] with 2 held by another: the re-entry of 0 is given back, the first holds stay. */
    lk_result rb;
    assert_lk(c, lk_acquire(c, names[2], "bob", 10000, 0, NULL, &rb), LK_ACQUIRED);
    lk_many two[2] = {{.resource = names[0]}, {.resource = names[2]}};
    assert_lk(c, lk_acquire_many(c, two, 2, "alice", 10000, NULL, 0), LK_HELD);
    assert_int_equal(two[0].undone, 1);
    assert_lk(c, lk_lock_status(c, names[0], &info), LK_OK);
    assert_int_equal(info.locked, 1);
    assert_int_equal(info.holds, 2);
    assert_int_equal(info.token, r.token);
    assert_lk(c, lk_release_many(c, it, 2, "alice", NULL), LK_OK);
    assert_int_equal(it[0].status, LK_STILL_HELD);
    assert_int_equal(it[1].status, LK_RELEASED);
    assert_lk(c, lk_release(c, names[0], "alice", NULL, &r), LK_RELEASED);
    assert_lk(c, lk_release(c, names[2], "bob", NULL, &r), LK_RELEASED);
}

static void test_idempotency_key_replays_the_set(void **state)
{
    many_fixture *f = *state;
    lk_client *c = f->c;
    char names[3][64];
    lk_many it[3], again[3];
    lk_result r;

    set_names(f, "idem", names, it, 3);
    memcpy(again, it, sizeof again);
    assert_lk(c, lk_acquire_many(c, it, 3, "alice", 10000, "k1", 0), LK_ACQUIRED);
    assert_lk(c, lk_acquire_many(c, again, 3, "alice", 10000, "k1", 0), LK_ACQUIRED);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(again[i].res.token, it[i].res.token);
        assert_int_equal(again[i].res.replayed, 1);
        assert_int_equal(again[i].res.holds, 1);
    }
    assert_lk(c, lk_release_many(c, it, 3, "alice", NULL), LK_OK);

    /* An undone set leaves no record: the key's retry, once the set is free, mints anew. */
    lk_many k2[3];
    set_names(f, "idem2", names, k2, 3);
    assert_lk(c, lk_acquire(c, names[1], "bob", 10000, 0, NULL, &r), LK_ACQUIRED);
    assert_lk(c, lk_acquire_many(c, k2, 3, "alice", 10000, "k2", 0), LK_HELD);
    int64_t first = k2[0].res.token;
    assert_lk(c, lk_release(c, names[1], "bob", NULL, &r), LK_RELEASED);
    assert_lk(c, lk_acquire_many(c, k2, 3, "alice", 10000, "k2", 0), LK_ACQUIRED);
    assert_int_equal(k2[0].res.replayed, 0);
    assert_true(k2[0].res.token > first);
    assert_lk(c, lk_release_many(c, k2, 3, "alice", NULL), LK_OK);
}

static void test_renew_per_resource(void **state)
{
    many_fixture *f = *state;
    lk_client *c = f->c;
    char names[3][64];
    lk_many it[3];

    set_names(f, "renew", names, it, 3);
    assert_lk(c, lk_acquire_many(c, it, 2, "alice", 10000, NULL, 0), LK_ACQUIRED);
    int64_t tok0 = it[0].res.token;
    assert_lk(c, lk_renew_many(c, it, 3, "alice", 20000, NULL), LK_OK);
    assert_int_equal(it[0].status, LK_RENEWED);
    assert_int_equal(it[0].res.token, tok0);
    assert_true(it[0].res.ttl_ms > 10000);
    assert_int_equal(it[1].status, LK_RENEWED);
    assert_int_equal(it[2].status, LK_NOT_OWNER); /* never locked */
    assert_lk(c, lk_release_many(c, it, 2, "alice", NULL), LK_OK);
}

static void test_bad_sets_refused(void **state)
{
    many_fixture *f = *state;
    lk_client *c = f->c;
    lk_many dup[2] = {{.resource = "same"}, {.resource = "same"}};
    lk_many bad[2] = {{.resource = "ok"}, {.resource = "no space"}};
    lk_many big[LK_MANY_MAX + 1];

    assert_lk(c, lk_acquire_many(c, dup, 2, "alice", 10000, NULL, 0), LK_EINVAL);
    assert_non_null(strstr(lk_errstr(c), "duplicate resource same"));
    assert_lk(c, lk_release_many(c, dup, 2, "alice", NULL), LK_EINVAL);
    assert_lk(c, lk_acquire_many(c, bad, 2, "alice", 10000, NULL, 0), LK_EINVAL);
    assert_lk(c, lk_acquire_many(c, dup, 0, "alice", 10000, NULL, 0), LK_EINVAL);
    memset(big, 0, sizeof big);
    assert_lk(c, lk_acquire_many(c, big, LK_MANY_MAX + 1, "alice", 10000, NULL, 0), LK_EINVAL);
    lk_lock_info info;
    assert_lk(c, lk_lock_status(c, "ok", &info), LK_OK);
    assert_int_equal(info.last_token, 0); /* nothing was sent */
}

/* Redlock: a member held on one master only (a minority) is granted by the majority; held
 * on two masters, the set is refused and undone on every master. */
static void test_redlock_majority_per_resource(void **state)
{
    many_fixture *f = *state;
    lk_client *c = f->c;
    char names[2][64];
    lk_many it[2];

    if (!f->redlock) {
        skip();
    }
    set_names(f, "rl", names, it, 2);
    /* bob's hold of names[1] on master 0 only. */
    assert_int_equal(th_redis_cmd(&f->masters[0], NULL, 0,
                                  "HSET fg:{%s}:lock bob 1", names[1]), 1);
    assert_int_equal(th_redis_cmd(&f->masters[0], NULL, 0, "PEXPIRE fg:{%s}:lock 10000",
                                  names[1]), 1);
    assert_lk(c, lk_acquire_many(c, it, 2, "alice", 10000, NULL, 0), LK_ACQUIRED);
    assert_lk(c, lk_release_many(c, it, 2, "alice", NULL), LK_OK);
    /* And on master 1 too: a majority holds it for bob. */
    assert_int_equal(th_redis_cmd(&f->masters[1], NULL, 0,
                                  "HSET fg:{%s}:lock bob 1", names[1]), 1);
    assert_int_equal(th_redis_cmd(&f->masters[1], NULL, 0, "PEXPIRE fg:{%s}:lock 10000",
                                  names[1]), 1);
    assert_lk(c, lk_acquire_many(c, it, 2, "alice", 10000, NULL, 0), LK_HELD);
    assert_int_equal(it[0].undone, 1);
    for (int m = 0; m < 3; m++) {
        assert_int_equal(th_redis_cmd(&f->masters[m], NULL, 0, "EXISTS fg:{%s}:lock",
                                      names[0]), 0);
    }
}

/* Two owners hold one set shared together, each member with its resource's current token
 * (the last exclusive one, 0 if none); an exclusive set with a member held shared is refused
 * whole, and so is a shared set with a member held exclusive. */
static void test_shared_set(void **state)
{
    many_fixture *f = *state;
    lk_client *c = f->c;
    char names[3][64];
    lk_many a[3], b[3], x[3];
    lk_result r;
    lk_lock_info info;

    set_names(f, "shared", names, a, 3);
    memcpy(b, a, sizeof b);
    memcpy(x, a, sizeof x);
    /* names[1] was locked exclusively once: its shared token is that grant's. */
    assert_lk(c, lk_acquire(c, names[1], "w", 10000, 0, NULL, &r), LK_ACQUIRED);
    int64_t last = r.token;
    assert_lk(c, lk_release(c, names[1], "w", NULL, &r), LK_RELEASED);

    assert_lk(c, lk_acquire_many_shared(c, a, 3, "ra", 10000, NULL, 0), LK_ACQUIRED);
    assert_lk(c, lk_acquire_many_shared(c, b, 3, "rb", 10000, NULL, 0), LK_ACQUIRED);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(a[i].res.shared, 1);
        assert_int_equal(b[i].res.shared, 1);
        assert_int_equal(a[i].res.token, i == 1 ? last : 0);
        assert_int_equal(b[i].res.token, a[i].res.token);
        assert_lk(c, lk_lock_status(c, names[i], &info), LK_OK);
        assert_int_equal(info.locked, 1);
        assert_int_equal(info.shared, 1);
        assert_int_equal(info.holders, 2);
    }
    /* An exclusive set overlapping one member is refused whole and leaves nothing held. */
    lk_many xo[2];
    char other[1][64];
    set_names(f, "shared.x", other, xo, 1);
    xo[1] = (lk_many){.resource = names[2]};
    assert_lk(c, lk_acquire_many(c, xo, 2, "wx", 10000, NULL, 0), LK_HELD);
    assert_int_equal(xo[1].status, LK_HELD);
    assert_int_equal(xo[0].undone, 1);
    assert_lk(c, lk_lock_status(c, other[0], &info), LK_OK);
    assert_int_equal(info.locked, 0);
    /* The set's owner cannot take it exclusively either: the other mode. */
    assert_lk(c, lk_acquire_many(c, x, 3, "ra", 10000, NULL, 0), LK_WRONG_MODE);
    /* Both readers leave, set by set: the exclusive set gets it, above the shared token. */
    assert_lk(c, lk_release_many(c, a, 3, "ra", NULL), LK_OK);
    assert_lk(c, lk_acquire_many(c, xo, 2, "wx", 10000, NULL, 0), LK_HELD);
    assert_lk(c, lk_release_many(c, b, 3, "rb", NULL), LK_OK);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(b[i].status, LK_RELEASED);
    }
    assert_lk(c, lk_acquire_many(c, xo, 2, "wx", 10000, NULL, 0), LK_ACQUIRED);
    assert_true(xo[1].res.token > 0);
    assert_int_equal(xo[1].res.shared, 0);
    /* Now a shared set with names[2] in it is refused whole. */
    memcpy(a, x, sizeof a);
    assert_lk(c, lk_acquire_many_shared(c, a, 3, "ra", 10000, NULL, 0), LK_HELD);
    assert_int_equal(a[2].status, LK_HELD);
    assert_int_equal(a[0].undone, 1);
    assert_lk(c, lk_lock_status(c, names[0], &info), LK_OK);
    assert_int_equal(info.locked, 0);
    assert_lk(c, lk_release_many(c, xo, 2, "wx", NULL), LK_OK);
}

/* A shared set's members renew and re-enter per member, and an Idempotency-Key replays the
 * shared set; the key's retry in the exclusive mode is refused. */
static void test_shared_set_renew_reenter_replay(void **state)
{
    many_fixture *f = *state;
    lk_client *c = f->c;
    char names[2][64];
    lk_many it[2], again[2];
    lk_lock_info info;

    set_names(f, "shrenew", names, it, 2);
    memcpy(again, it, sizeof again);
    assert_lk(c, lk_acquire_many_shared(c, it, 2, "ra", 10000, "k", 0), LK_ACQUIRED);
    assert_lk(c, lk_acquire_many_shared(c, again, 2, "ra", 10000, "k", 0), LK_ACQUIRED);
    assert_int_equal(again[0].res.replayed, 1);
    assert_int_equal(again[0].res.shared, 1);
    /* The key's retry in the other mode is refused, changing nothing (on Redlock too: no
     * undo releases the shared holds). */
    assert_lk(c, lk_acquire_many(c, again, 2, "ra", 10000, "k", 0), LK_EIDEMPOTENCY);
    assert_lk(c, lk_lock_status(c, names[1], &info), LK_OK);
    assert_int_equal(info.locked, 1);
    assert_lk(c, lk_acquire_many_shared(c, again, 2, "ra", 10000, NULL, 0), LK_ACQUIRED);
    assert_int_equal(again[1].res.holds, 2); /* a re-entry */
    assert_lk(c, lk_renew_many(c, it, 2, "ra", 30000, NULL), LK_OK);
    assert_int_equal(it[0].status, LK_RENEWED);
    assert_true(it[0].res.ttl_ms > 10000);
    assert_lk(c, lk_release_many(c, it, 2, "ra", NULL), LK_OK);
    assert_int_equal(it[0].status, LK_STILL_HELD);
    assert_lk(c, lk_release_many(c, it, 2, "ra", NULL), LK_OK);
    assert_int_equal(it[1].status, LK_RELEASED);
    assert_lk(c, lk_lock_status(c, names[1], &info), LK_OK);
    assert_int_equal(info.locked, 0);

    /* A keyed shared set with a member held: the grant of token 0 (nothing minted yet) is
     * undone too, with its record, so the key's retry acts afresh once the set is free. */
    lk_result r;
    set_names(f, "shkey", names, it, 2);
    assert_lk(c, lk_acquire(c, names[1], "bob", 10000, 0, NULL, &r), LK_ACQUIRED);
    assert_lk(c, lk_acquire_many_shared(c, it, 2, "rk", 10000, "k0", 0), LK_HELD);
    assert_int_equal(it[0].res.token, 0);
    assert_int_equal(it[0].undone, 1);
    assert_lk(c, lk_lock_status(c, names[0], &info), LK_OK);
    assert_int_equal(info.locked, 0);
    assert_lk(c, lk_release(c, names[1], "bob", NULL, &r), LK_RELEASED);
    assert_lk(c, lk_acquire_many_shared(c, it, 2, "rk", 10000, "k0", 0), LK_ACQUIRED);
    assert_int_equal(it[0].res.replayed, 0);
    assert_lk(c, lk_release_many(c, it, 2, "rk", NULL), LK_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_free_set_granted_whole),
        cmocka_unit_test(test_held_member_undoes_the_set),
        cmocka_unit_test(test_reentry_per_resource),
        cmocka_unit_test(test_idempotency_key_replays_the_set),
        cmocka_unit_test(test_renew_per_resource),
        cmocka_unit_test(test_bad_sets_refused),
        cmocka_unit_test(test_redlock_majority_per_resource),
        cmocka_unit_test(test_shared_set),
        cmocka_unit_test(test_shared_set_renew_reenter_replay),
    };
    int failed = cmocka_run_group_tests_name("many_single_redis", tests, single_setup, teardown);
    failed += cmocka_run_group_tests_name("many_cluster", tests, cluster_setup, teardown);
    failed += cmocka_run_group_tests_name("many_redlock", tests, redlock_setup, teardown);
    return failed;
}
