/* storage: 16 threads writing interleaved tokens to shared resources through group commit, on
 * LMDB or (argument "pg") PostgreSQL. */
#include <pthread.h>
#include <stdatomic.h>

#include "st_test.h"

#define THREADS 16
#define WRITES 60
#define RESOURCES 4
#define LAST_ISSUED ((uint64_t)UINT32_MAX)

typedef struct accepted {
    uint64_t token;
    uint64_t version;
    char value[32];
} accepted;

typedef struct shared {
    store *s;
    _Atomic uint64_t next_token[RESOURCES];
    pthread_mutex_t mu;
    accepted log[RESOURCES][THREADS * WRITES];
    size_t n[RESOURCES];
    int errors;
    int forged;
} shared;

typedef struct worker_arg {
    shared *sh;
    int id;
} worker_arg;

static void *worker(void *p)
{
    worker_arg *a = p;
    shared *sh = a->sh;
    char name[16], value[32];
    store_write_result res;

    for (int i = 0; i < WRITES; i++) {
        int r = (a->id + i) % RESOURCES;
        snprintf(name, sizeof name, "res-%d", r);
        if ((a->id + i) % 7 == 0) {
            /* A forged token rides in the same batches: refused, and nobody else is. */
            store_status st = store_write(sh->s, name, LAST_ISSUED + 1 + (uint64_t)i, "evil", 4,
                                          NULL, LAST_ISSUED, &res);
            pthread_mutex_lock(&sh->mu);
            sh->forged++;
            if (st != STORE_UNKNOWN_TOKEN) {
                print_error("forged token on %s: %s\n", name, store_status_name(st));
                sh->errors++;
            }
            pthread_mutex_unlock(&sh->mu);
        }
        /* Tokens are handed out in order but arrive interleaved, as from racing clients. */
        uint64_t token = atomic_fetch_add(&sh->next_token[r], 1) + 1;
        snprintf(value, sizeof value, "t%d-%d", a->id, i);
        store_status st = store_write(sh->s, name, token, value, strlen(value), "text/plain",
                                      LAST_ISSUED, &res);
        pthread_mutex_lock(&sh->mu);
        if (st == STORE_ACCEPTED) {
            accepted *e = &sh->log[r][sh->n[r]++];
            e->token = token;
            e->version = res.version;
            snprintf(e->value, sizeof e->value, "%s", value);
        } else if (st != STORE_STALE || res.highest_token <= token) {
            print_error("token %llu on %s: %s (highest %llu)\n", (unsigned long long)token,
                        name, store_status_name(st), (unsigned long long)res.highest_token);
            sh->errors++;
        }
        pthread_mutex_unlock(&sh->mu);
    }
    return NULL;
}

static int by_version(const void *x, const void *y)
{
    const accepted *a = x, *b = y;
    return a->version < b->version ? -1 : a->version > b->version;
}

static void test_sixteen_writers(void **state)
{
    st_fixture *f = *state;
    shared *sh = calloc(1, sizeof *sh);
    pthread_t t[THREADS];
    worker_arg args[THREADS];

    sh->s = f->s;
    pthread_mutex_init(&sh->mu, NULL);
    for (int i = 0; i < THREADS; i++) {
        args[i].sh = sh;
        args[i].id = i;
        pthread_create(&t[i], NULL, worker, &args[i]);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
    }
    assert_int_equal(sh->errors, 0);
    assert_true(sh->forged > 0);

    /* Group commit really batched: fewer commits than accepted writes. (Read before the
     * reopen below, which starts the counters again.) */
    store_stats stats;
    store_get_stats(f->s, &stats);
    print_message("commits=%llu writes=%llu max_batch=%llu\n",
                  (unsigned long long)stats.commits, (unsigned long long)stats.writes,
                  (unsigned long long)stats.max_batch);
    assert_true(stats.max_batch > 1);
    assert_true(stats.commits < stats.writes);

    /* Check against what is on disk, not what this environment still has in memory. */
    store_close(f->s);
    st_open(f);

    for (int r = 0; r < RESOURCES; r++) {
        accepted *log = sh->log[r];
        size_t n = sh->n[r];
        assert_true(n > 0);
        qsort(log, n, sizeof *log, by_version);
        for (size_t i = 1; i < n; i++) {
            assert_true(log[i].version > log[i - 1].version); /* never reused */
            assert_true(log[i].token >= log[i - 1].token);    /* never goes down */
        }
        /* The acknowledged write with the newest version is what a read returns. */
        char name[16];
        snprintf(name, sizeof name, "res-%d", r);
        store_value v;
        assert_st(store_read(f->s, name, &v), STORE_OK);
        assert_int_equal(v.version, log[n - 1].version);
        /* Versions are unique and end at n: each of the n acknowledged writes is counted. */
        assert_int_equal(v.version, n);
        assert_int_equal(v.token, log[n - 1].token);
        assert_memory_equal(v.data, log[n - 1].value, v.len);
        /* No forged token raised the high-water mark. */
        uint64_t max_token = 0;
        for (size_t i = 0; i < n; i++) {
            max_token = log[i].token > max_token ? log[i].token : max_token;
        }
        assert_int_equal(v.highest_token, max_token);
        store_value_free(&v);
    }
    pthread_mutex_destroy(&sh->mu);
    free(sh);
}

static void test_lone_writer_commits_alone(void **state)
{
    st_fixture *f = *state;
    store_write_result res;
    store_stats before, after;

    store_get_stats(f->s, &before);
    for (uint64_t t = 1; t <= 5; t++) {
        assert_st(store_write(f->s, "alone", t, "x", 1, NULL, t, &res), STORE_ACCEPTED);
    }
    store_get_stats(f->s, &after);
    /* Each write was its own durable commit: nobody waited for company. */
    assert_int_equal(after.commits - before.commits, 5);
    /* Refusals commit nothing. */
    assert_st(store_write(f->s, "alone", 1, "x", 1, NULL, 5, &res), STORE_STALE);
    store_get_stats(f->s, &before);
    assert_int_equal(before.commits, after.commits);
}

/* store_write_many: every write answered as store_write() would, in array order (a later
 * write of one resource sees an earlier one), and the accepted ones in one commit. */
static void test_write_many_is_one_commit_in_order(void **state)
{
    st_fixture *f = *state;
    store_stats before, after;
    store_write_req w[] = {
        {.resource = "many-a", .token = 5, .data = "a5", .len = 2, .last_issued = 9},
        {.resource = "many-a", .token = 4, .data = "a4", .len = 2, .last_issued = 9},
        {.resource = "many-b", .token = 3, .data = "b3", .len = 2, .last_issued = 9},
        {.resource = "many-c", .token = 10, .data = "c", .len = 1, .last_issued = 9},
        {.resource = "bad name", .token = 1, .data = "x", .len = 1, .last_issued = 9},
        {.resource = "many-a", .token = 7, .data = "a7", .len = 2, .last_issued = 9},
    };
    store_write_req *reqs[6];
    for (int i = 0; i < 6; i++) {
        reqs[i] = &w[i];
    }
    store_get_stats(f->s, &before);
    store_write_many(f->s, reqs, 6);
    store_get_stats(f->s, &after);

    assert_st(w[0].status, STORE_ACCEPTED);
    assert_int_equal(w[0].res.version, 1);
    assert_st(w[1].status, STORE_STALE); /* below 5, written just before in this batch */
    assert_int_equal(w[1].res.highest_token, 5);
    assert_st(w[2].status, STORE_ACCEPTED);
    assert_st(w[3].status, STORE_UNKNOWN_TOKEN); /* above the last issued: moves nothing */
    assert_st(w[4].status, STORE_INVALID);
    assert_st(w[5].status, STORE_ACCEPTED);
    assert_int_equal(w[5].res.version, 2);
    assert_int_equal(after.commits - before.commits, 1);
    assert_int_equal(after.writes - before.writes, 5); /* the invalid one never got in */

    store_value v;
    assert_st(store_read(f->s, "many-a", &v), STORE_OK);
    assert_int_equal(v.token, 7);
    assert_memory_equal(v.data, "a7", 2);
    store_value_free(&v);
    assert_st(store_read(f->s, "many-c", &v), STORE_NOT_FOUND);
    store_write_many(f->s, reqs, 0); /* an empty batch is a no-op */
}

#define BIG_BYTES (300 * 1024) /* more than the whole map below: never fits */

typedef struct full_arg {
    store *s;
    int id;
    int errors;
    uint64_t last_version;
} full_arg;

/* Even ids write small values, odd ids values that cannot fit, all at once. */
static void *full_worker(void *p)
{
    full_arg *a = p;
    char name[16];
    store_write_result res;
    int big = a->id % 2;
    void *value = calloc(1, BIG_BYTES);

    snprintf(name, sizeof name, "full-%d", a->id);
    for (uint64_t token = 1; token <= 20; token++) {
        store_status st = store_write(a->s, name, token, value, big ? BIG_BYTES : 16, NULL,
                                      token, &res);
        if (st != (big ? STORE_FULL : STORE_ACCEPTED)) {
            print_error("full-%d token %llu: %s\n", a->id, (unsigned long long)token,
                        store_status_name(st));
            a->errors++;
        }
        a->last_version = res.version;
    }
    free(value);
    return NULL;
}

/* MDB_MAP_FULL in a batch: only the writes that really do not fit answer FULL, the others in
 * the same batches are accepted, and the store stays usable. */
static void test_full_map_under_concurrency(void **state)
{
    (void)state;
    st_fixture g;
    st_open_tiny(&g, "store-full-mt", 256 * 1024);

    pthread_t t[THREADS];
    full_arg args[THREADS];
    for (int i = 0; i < THREADS; i++) {
        args[i] = (full_arg){g.s, i, 0, 0};
        pthread_create(&t[i], NULL, full_worker, &args[i]);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
    }
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(args[i].errors, 0);
        char name[16];
        snprintf(name, sizeof name, "full-%d", i);
        store_value v;
        uint64_t hi = 0;
        if (i % 2) {
            assert_st(store_read(g.s, name, &v), STORE_NOT_FOUND);
            assert_st(store_highest(g.s, name, &hi), STORE_OK);
            assert_int_equal(hi, 0); /* a FULL write left nothing behind */
        } else {
            assert_st(store_read(g.s, name, &v), STORE_OK);
            assert_int_equal(v.version, 20);
            assert_int_equal(args[i].last_version, 20);
            store_value_free(&v);
        }
    }
    store_write_result res;
    assert_st(store_write(g.s, "after-full", 1, "x", 1, NULL, 1, &res), STORE_ACCEPTED);
    st_close_tiny(&g);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest common[] = {
        cmocka_unit_test_setup_teardown(test_sixteen_writers, st_setup, st_teardown),
        cmocka_unit_test_setup_teardown(test_lone_writer_commits_alone, st_setup, st_teardown),
        cmocka_unit_test_setup_teardown(test_write_many_is_one_commit_in_order, st_setup,
                                        st_teardown),
    };
    const struct CMUnitTest lmdb_only[] = {
        cmocka_unit_test(test_full_map_under_concurrency), /* the LMDB map size */
    };
    return st_main(argc, argv, "storage_concurrency", common, ST_COUNT(common), lmdb_only,
                   ST_COUNT(lmdb_only), NULL, 0);
}
