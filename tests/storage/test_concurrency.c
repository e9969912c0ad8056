/* storage: 16 threads writing interleaved tokens to shared resources through group commit. */
#include <pthread.h>
#include <stdatomic.h>

#include "st_test.h"

#define THREADS 16
#define WRITES 60
#define RESOURCES 4

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
        /* Tokens are handed out in order but arrive interleaved, as from racing clients. */
        uint64_t token = atomic_fetch_add(&sh->next_token[r], 1) + 1;
        snprintf(value, sizeof value, "t%d-%d", a->id, i);
        store_status st = store_write(sh->s, name, token, value, strlen(value), "text/plain",
                                      UINT32_MAX, &res);
        pthread_mutex_lock(&sh->mu);
        if (st == STORE_ACCEPTED) {
            accepted *e = &sh->log[r][sh->n[r]++];
            e->token = token;
            e->version = res.version;
            snprintf(e->value, sizeof e->value, "%s", value);
        } else if (st != STORE_STALE || res.highest_token <= token) {
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
        assert_int_equal(v.token, log[n - 1].token);
        assert_memory_equal(v.data, log[n - 1].value, v.len);
        store_value_free(&v);
    }

    /* Group commit really batched: fewer commits than accepted writes. */
    store_stats stats;
    store_get_stats(f->s, &stats);
    print_message("commits=%llu writes=%llu max_batch=%llu\n",
                  (unsigned long long)stats.commits, (unsigned long long)stats.writes,
                  (unsigned long long)stats.max_batch);
    assert_true(stats.max_batch > 1);
    assert_true(stats.commits < stats.writes);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sixteen_writers, st_setup, st_teardown),
        cmocka_unit_test_setup_teardown(test_lone_writer_commits_alone, st_setup, st_teardown),
    };
    return cmocka_run_group_tests_name("storage_concurrency", tests, NULL, NULL);
}
