/* storage: fenced transactions (store_transact, store_run_many) and fenced deletes, on a
 * real LMDB environment or (argument "pg") a real PostgreSQL: each write checked as a single
 * write is, all committed or none, refusals named per write, and concurrent transactions
 * (on PostgreSQL through two stores sharing the database) never leave one half-visible; a
 * shared mark refuses every write at or below it (NOT_EXCLUSIVE). */
#include <pthread.h>
#include <stdatomic.h>

#include "st_test.h"

#define W(res_, tok_, val_, issued_)                                                       \
    (store_write_req)                                                                      \
    {                                                                                      \
        .resource = (res_), .token = (tok_), .data = (val_), .len = strlen(val_),          \
        .content_type = "text/plain", .last_issued = (issued_)                             \
    }
#define DEL(res_, tok_, issued_)                                                           \
    (store_write_req)                                                                      \
    {                                                                                      \
        .resource = (res_), .token = (tok_), .last_issued = (issued_), .del = 1            \
    }

static store_status put(st_fixture *f, const char *r, uint64_t token, const char *value)
{
    return store_write(f->s, r, token, value, strlen(value), "text/plain", token, NULL);
}

static void assert_value(st_fixture *f, const char *r, const char *want, uint64_t version)
{
    store_value v;
    assert_st(store_read(f->s, r, &v), STORE_OK);
    assert_int_equal(v.len, strlen(want));
    assert_memory_equal(v.data, want, v.len);
    assert_int_equal(v.version, version);
    store_value_free(&v);
}

static store_status transact(st_fixture *f, store_write_req *w, size_t n)
{
    store_write_req *ptrs[STORE_TXN_MAX + 1];
    for (size_t i = 0; i < n; i++) {
        ptrs[i] = &w[i];
    }
    store_txn t = {.writes = ptrs, .n = n};
    store_status st = store_transact(f->s, &t);
    assert_int_equal(st, t.status);
    return st;
}

/* Transacts the two writes of w, of which the second is refused with want: nothing is
 * written, the first says OK. */
static void assert_second_refused(st_fixture *f, store_write_req w[2], store_status want)
{
    assert_st(transact(f, w, 2), want);
    assert_st(w[0].status, STORE_OK);
    assert_st(w[1].status, want);
}

static void test_all_committed(void **state)
{
    st_fixture *f = *state;
    assert_st(put(f, "a", 3, "a-3"), STORE_ACCEPTED);
    assert_st(put(f, "c", 2, "c-2"), STORE_ACCEPTED);
    store_write_req w[3] = {W("a", 5, "a-5", 5), W("b", 9, "b-9", 9), DEL("c", 4, 4)};
    assert_st(transact(f, w, 3), STORE_ACCEPTED);
    for (int i = 0; i < 3; i++) {
        assert_st(w[i].status, STORE_ACCEPTED);
    }
    assert_int_equal(w[0].res.version, 2);
    assert_int_equal(w[1].res.version, 1);
    assert_int_equal(w[2].res.version, 2);
    assert_int_equal(w[2].res.highest_token, 4);
    assert_value(f, "a", "a-5", 2);
    assert_value(f, "b", "b-9", 1);
    store_value v;
    assert_st(store_read(f->s, "c", &v), STORE_NOT_FOUND);
    uint64_t hi = 0;
    assert_st(store_highest(f->s, "c", &hi), STORE_OK);
    assert_int_equal(hi, 4);
}

static void test_one_stale_writes_nothing(void **state)
{
    st_fixture *f = *state;
    assert_st(put(f, "a", 3, "a-3"), STORE_ACCEPTED);
    assert_st(put(f, "b", 7, "b-7"), STORE_ACCEPTED);
    /* The paused client: its token for b was superseded by 7. */
    store_write_req w[3] = {W("a", 4, "a-4", 10), W("b", 6, "b-6", 10), DEL("z", 5, 10)};
    assert_st(transact(f, w, 3), STORE_STALE);
    assert_st(w[0].status, STORE_OK);
    assert_st(w[1].status, STORE_STALE);
    assert_int_equal(w[1].res.highest_token, 7);
    assert_st(w[2].status, STORE_OK);
    assert_value(f, "a", "a-3", 1);
    assert_value(f, "b", "b-7", 1);
    uint64_t hi = 0;
    assert_st(store_highest(f->s, "z", &hi), STORE_OK);
    assert_int_equal(hi, 0); /* the delete that passed left no tombstone either */
}

static void test_unknown_and_stale(void **state)
{
    st_fixture *f = *state;
    assert_st(put(f, "a", 3, "a-3"), STORE_ACCEPTED);
    assert_st(put(f, "b", 7, "b-7"), STORE_ACCEPTED);
    /* A forged token above what was issued: unknown, nothing written. */
    store_write_req w1[2] = {W("a", 4, "a-4", 4), W("b", 50, "b-50", 8)};
    assert_st(transact(f, w1, 2), STORE_UNKNOWN_TOKEN);
    assert_st(w1[0].status, STORE_OK);
    assert_st(w1[1].status, STORE_UNKNOWN_TOKEN);
    assert_value(f, "b", "b-7", 1);
    /* Stale outranks unknown, and both refusals are named. */
    store_write_req w2[2] = {W("a", 99, "a-99", 10), W("b", 6, "b-6", 10)};
    assert_st(transact(f, w2, 2), STORE_STALE);
    assert_st(w2[0].status, STORE_UNKNOWN_TOKEN);
    assert_st(w2[1].status, STORE_STALE);
    assert_value(f, "a", "a-3", 1);
    assert_value(f, "b", "b-7", 1);
}

static void test_invalid_transactions(void **state)
{
    st_fixture *f = *state;
    store_write_req w[2] = {W("a", 4, "a-4", 4), W("a", 4, "a-again", 4)};
    assert_st(transact(f, w, 2), STORE_INVALID);
    assert_st(w[0].status, STORE_OK);
    assert_st(w[1].status, STORE_INVALID);
    assert_st(transact(f, w, 0), STORE_INVALID);
    store_write_req many[STORE_TXN_MAX + 1];
    char names[STORE_TXN_MAX + 1][16];
    for (int i = 0; i <= STORE_TXN_MAX; i++) {
        snprintf(names[i], sizeof names[i], "r%d", i);
        many[i] = W(names[i], 1, "x", 1);
    }
    assert_st(transact(f, many, STORE_TXN_MAX + 1), STORE_INVALID);
    assert_st(transact(f, many, STORE_TXN_MAX), STORE_ACCEPTED);
    char *big = calloc(1, f->opts.max_value_bytes + 2);
    memset(big, 'x', f->opts.max_value_bytes + 1);
    store_write_req w2[2] = {W("b", 5, "b-5", 5), W("c", 5, big, 5)};
    assert_st(transact(f, w2, 2), STORE_TOO_LARGE);
    assert_st(w2[1].status, STORE_TOO_LARGE);
    free(big);
    store_value v;
    assert_st(store_read(f->s, "b", &v), STORE_NOT_FOUND);
    assert_st(store_read(f->s, "a", &v), STORE_NOT_FOUND);
}

static void test_delete_fences_stale_holder(void **state)
{
    st_fixture *f = *state;
    assert_st(put(f, "d", 3, "d-3"), STORE_ACCEPTED);
    /* A fenced delete alone, through the plain write path. */
    store_write_req del = DEL("d", 5, 5);
    store_write_req *one[1] = {&del};
    store_write_many(f->s, one, 1);
    assert_st(del.status, STORE_ACCEPTED);
    assert_int_equal(del.res.version, 2);
    /* The holder of 4 wakes up: it cannot write the deleted resource back. */
    store_write_result res;
    assert_st(store_write(f->s, "d", 4, "d-4", 3, NULL, 5, &res), STORE_STALE);
    assert_int_equal(res.highest_token, 5);
    store_value v;
    assert_st(store_read(f->s, "d", &v), STORE_NOT_FOUND);
    /* A stale delete is refused like a stale write. */
    store_write_req late = DEL("d", 4, 5);
    assert_st(transact(f, &late, 1), STORE_STALE);
    /* A resource never written: the delete records its token. */
    store_write_req fresh = DEL("n", 8, 8);
    assert_st(transact(f, &fresh, 1), STORE_ACCEPTED);
    assert_st(store_write(f->s, "n", 7, "n-7", 3, NULL, 8, &res), STORE_STALE);
    /* The holder of the newest token writes it again. */
    assert_st(put(f, "d", 6, "d-6"), STORE_ACCEPTED);
    assert_value(f, "d", "d-6", 3);
}

static void test_run_many_mixes_kinds(void **state)
{
    st_fixture *f = *state;
    store_write_req single = W("s", 2, "s-2", 2);
    store_write_req a = W("a", 3, "a-3", 3), b = W("b", 3, "b-3", 3);
    store_write_req c = W("c", 3, "c-3", 3), d = W("s", 1, "s-1", 3);
    store_write_req *ta[2] = {&a, &b}, *tb[2] = {&c, &d}, *singles[1] = {&single};
    store_txn t1 = {.writes = ta, .n = 2}, t2 = {.writes = tb, .n = 2};
    store_txn *txns[2] = {&t1, &t2};
    store_run_many(f->s, NULL, 0, singles, 1, txns, 2);
    assert_st(single.status, STORE_ACCEPTED);
    assert_st(t1.status, STORE_ACCEPTED);
    /* t2's write to s with token 1 is stale after the single write with 2. */
    assert_st(t2.status, STORE_STALE);
    assert_st(d.status, STORE_STALE);
    store_value v;
    assert_st(store_read(f->s, "c", &v), STORE_NOT_FOUND);
    assert_value(f, "a", "a-3", 1);
    assert_value(f, "s", "s-2", 1);
}

/* Concurrent transactions, each writing one value to all of PAIR_SET resources with a fresh
 * token; many lose to a larger token and are refused. Afterwards (and whatever the
 * interleaving) every resource holds the value of one and the same transaction. */
#define PAIR_SET 4
#define TXN_THREADS 4
#define TXN_EACH 60

typedef struct txn_thread {
    store *s;
    _Atomic uint64_t *next_token;
    int accepted;
} txn_thread;

static void *txn_worker(void *p)
{
    txn_thread *t = p;
    for (int i = 0; i < TXN_EACH; i++) {
        uint64_t token = atomic_fetch_add(t->next_token, 1);
        char value[32], names[PAIR_SET][8];
        store_write_req w[PAIR_SET];
        store_write_req *ptrs[PAIR_SET];
        snprintf(value, sizeof value, "v%llu", (unsigned long long)token);
        for (int k = 0; k < PAIR_SET; k++) {
            /* Each thread names them in another order. */
            snprintf(names[k], sizeof names[k], "p%d", (k + i) % PAIR_SET);
            w[k] = (store_write_req){.resource = names[k], .token = token, .data = value,
                                     .len = strlen(value), .last_issued = token + 1000};
            ptrs[k] = &w[k];
        }
        store_txn txn = {.writes = ptrs, .n = PAIR_SET};
        store_status st = store_transact(t->s, &txn);
        if (st != STORE_ACCEPTED && st != STORE_STALE) {
            fprintf(stderr, "transaction: %s\n", store_status_name(st));
            abort();
        }
        t->accepted += st == STORE_ACCEPTED;
    }
    return NULL;
}

static void test_concurrent_all_or_nothing(void **state)
{
    st_fixture *f = *state;
    store *second = NULL;
    _Atomic uint64_t next_token = 1;
    pthread_t th[TXN_THREADS];
    txn_thread t[TXN_THREADS];

    if (st_is_pg()) {
        /* A second gateway on the same database: its transactions run concurrently. */
        char err[256];
        assert_st(store_open(&second, &f->opts, err, sizeof err), STORE_OK);
    }
    for (int i = 0; i < TXN_THREADS; i++) {
        t[i] = (txn_thread){.s = second != NULL && i % 2 ? second : f->s,
                            .next_token = &next_token};
        assert_int_equal(pthread_create(&th[i], NULL, txn_worker, &t[i]), 0);
    }
    int accepted = 0;
    for (int i = 0; i < TXN_THREADS; i++) {
        pthread_join(th[i], NULL);
        accepted += t[i].accepted;
    }
    assert_true(accepted > 0);
    store_value first;
    assert_st(store_read(f->s, "p0", &first), STORE_OK);
    for (int k = 1; k < PAIR_SET; k++) {
        char name[8];
        snprintf(name, sizeof name, "p%d", k);
        store_value v;
        assert_st(store_read(f->s, name, &v), STORE_OK);
        assert_int_equal(v.token, first.token);
        assert_int_equal(v.len, first.len);
        assert_memory_equal(v.data, first.data, v.len);
        assert_int_equal(v.version, (uint64_t)accepted);
        store_value_free(&v);
    }
    assert_int_equal(first.version, (uint64_t)accepted);
    store_value_free(&first);
    store_close(second);
}

/* PostgreSQL: a write whose token is below a grant the shared ledger recorded since is
 * refused whole, even before the new holder writes: the new holder may already have read the
 * old values, and would write over the transaction with its larger token. */
static void test_pg_ledger_grant_supersedes(void **state)
{
    st_fixture *f = *state;
    uint64_t hi = 0;
    assert_st(store_grant_as(f->s, "a", 5, NULL, &hi), STORE_OK);
    assert_st(store_grant_as(f->s, "b", 5, NULL, &hi), STORE_OK);
    assert_st(put(f, "a", 5, "a-5"), STORE_ACCEPTED);
    assert_st(store_grant_as(f->s, "b", 6, NULL, &hi), STORE_OK); /* b's next holder */
    store_write_req w[2] = {W("a", 5, "a-new", 10), W("b", 5, "b-new", 10)};
    assert_second_refused(f, w, STORE_STALE);
    assert_int_equal(w[1].res.highest_token, 6);
    assert_value(f, "a", "a-5", 1);
    store_value v;
    assert_st(store_read(f->s, "b", &v), STORE_NOT_FOUND);
    /* The new holder's own transaction passes. */
    store_write_req w2[1] = {W("b", 6, "b-6", 10)};
    assert_st(transact(f, w2, 1), STORE_ACCEPTED);
}

/* Records token as granted in shared mode for r (store_grant_req.shared). */
static store_status mark(st_fixture *f, const char *r, uint64_t token)
{
    store_grant_req g = {.resource = r, .token = token, .shared = 1};
    store_grant_req *one[1] = {&g};
    store_grant_many(f->s, one, 1, NULL, 0);
    return g.status;
}

/* A shared mark: every write (and delete, and transaction write) with a token at or below
 * it is NOT_EXCLUSIVE naming the mark, after the stale and unknown checks; the mark only
 * grows; a larger token writes as usual; a transaction with one such write is refused
 * whole; a mark queued with writes in one call is ordered with them. */
static void test_shared_mark_refuses_writes(void **state)
{
    st_fixture *f = *state;
    store_write_result res;
    assert_st(put(f, "a", 5, "a-5"), STORE_ACCEPTED);
    assert_st(put(f, "b", 5, "b-5"), STORE_ACCEPTED);
    assert_st(mark(f, "a", 5), STORE_OK);
    assert_st(mark(f, "a", 5), STORE_OK); /* idempotent */
    assert_st(mark(f, "a", 3), STORE_OK); /* never lowers it */
    assert_st(mark(f, "a", 0), STORE_INVALID);
    assert_st(store_write(f->s, "a", 5, "x", 1, NULL, 9, &res), STORE_NOT_EXCLUSIVE);
    assert_int_equal(res.shared_mark, 5);
    assert_int_equal(res.highest_token, 5);
    /* Stale and unknown first. */
    assert_st(store_write(f->s, "a", 4, "x", 1, NULL, 9, &res), STORE_STALE);
    assert_st(store_write(f->s, "a", 5, "x", 1, NULL, 4, &res), STORE_UNKNOWN_TOKEN);
    store_write_req d = DEL("a", 5, 9);
    store_write_req *dp[1] = {&d};
    store_write_many(f->s, dp, 1);
    assert_st(d.status, STORE_NOT_EXCLUSIVE);
    assert_value(f, "a", "a-5", 1);
    /* A transaction with one such write is refused whole. */
    store_write_req w[2] = {W("b", 6, "b-6", 9), W("a", 5, "a-x", 9)};
    assert_second_refused(f, w, STORE_NOT_EXCLUSIVE);
    assert_int_equal(w[1].res.shared_mark, 5);
    assert_value(f, "b", "b-5", 1);
    /* A stale write outranks it. */
    store_write_req w2[2] = {W("b", 4, "b-4", 9), W("a", 5, "a-x", 9)};
    assert_st(transact(f, w2, 2), STORE_STALE);
    /* A mark of a resource never written, then its writes. */
    assert_st(mark(f, "n", 7), STORE_OK);
    assert_st(store_write(f->s, "n", 7, "x", 1, NULL, 9, &res), STORE_NOT_EXCLUSIVE);
    store_value v;
    assert_st(store_read(f->s, "n", &v), STORE_NOT_FOUND);
    store_entry e[4];
    size_t n = 0;
    assert_st(store_list(f->s, "m", e, 4, &n), STORE_OK);
    assert_int_equal(n, 0); /* a mark alone lists nothing */
    assert_st(store_write(f->s, "n", 8, "n-8", 3, NULL, 9, &res), STORE_ACCEPTED);
    assert_int_equal(res.version, 1);
    /* The next exclusive token writes. */
    assert_st(put(f, "a", 6, "a-6"), STORE_ACCEPTED);
    assert_value(f, "a", "a-6", 2);
    /* Queued with writes in one call, in arrival order: the write before it passes. */
    store_write_req w3[1] = {W("b", 7, "b-7", 9)};
    store_write_req *w3p[1] = {&w3[0]};
    store_grant_req g = {.resource = "b", .token = 7, .shared = 1};
    store_grant_req *gp[1] = {&g};
    store_grant_many(f->s, gp, 1, w3p, 1);
    assert_st(g.status, STORE_OK);
    assert_st(w3[0].status, STORE_ACCEPTED);
    assert_st(store_write(f->s, "b", 7, "x", 1, NULL, 9, &res), STORE_NOT_EXCLUSIVE);
}

/* Marks and writes at once (on PostgreSQL through two stores, as two gateways): a write that
 * starts after a mark of its token was answered is never accepted, and nothing fails (no
 * deadlock between a batch's marks, writes and grants). */
#define MARKS 150
typedef struct mark_writer {
    store *s;
    _Atomic uint64_t *marked; /* the largest token whose mark was answered */
    atomic_int *done;
    int accepted, refused;
    char bad[160];
} mark_writer;

static void *mark_writer_run(void *p)
{
    mark_writer *m = p;
    for (uint64_t i = 0; !atomic_load(m->done); i++) {
        uint64_t before = atomic_load(m->marked);
        uint64_t token = before + (i % 2); /* the marked token, or the next one */
        store_write_result res;
        store_status st =
            token == 0 ? STORE_NOT_EXCLUSIVE
                       : store_write(m->s, "mk", token, "v", 1, NULL, STORE_TXN_MAX * 1000, &res);
        if (st == STORE_ACCEPTED) {
            m->accepted++;
            if (token <= before && m->bad[0] == '\0') {
                snprintf(m->bad, sizeof m->bad, "token %llu written after its mark",
                         (unsigned long long)token);
            }
        } else if (st == STORE_NOT_EXCLUSIVE || st == STORE_STALE) {
            m->refused++;
        } else if (m->bad[0] == '\0') {
            snprintf(m->bad, sizeof m->bad, "write answered %s", store_status_name(st));
        }
    }
    return NULL;
}

static void test_shared_marks_concurrent(void **state)
{
    st_fixture *f = *state;
    store *second = NULL;
    _Atomic uint64_t marked = 0;
    atomic_int done = 0;
    pthread_t th[2];
    mark_writer w[2];

    if (st_is_pg()) {
        char err[256];
        assert_st(store_open(&second, &f->opts, err, sizeof err), STORE_OK);
    }
    for (int i = 0; i < 2; i++) {
        w[i] = (mark_writer){.s = second != NULL ? second : f->s, .marked = &marked,
                             .done = &done};
        assert_int_equal(pthread_create(&th[i], NULL, mark_writer_run, &w[i]), 0);
    }
    for (uint64_t t = 1; t <= MARKS; t++) {
        assert_st(mark(f, "mk", t), STORE_OK);
        atomic_store(&marked, t);
    }
    atomic_store(&done, 1);
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        if (w[i].bad[0] != '\0') {
            fail_msg("%s", w[i].bad);
        }
        assert_true(w[i].accepted + w[i].refused > 0);
    }
    store_write_result res;
    assert_st(store_write(f->s, "mk", MARKS, "v", 1, NULL, MARKS, &res), STORE_NOT_EXCLUSIVE);
    assert_int_equal(res.shared_mark, MARKS);
    store_close(second);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest common[] = {
        cmocka_unit_test_setup_teardown(test_all_committed, st_setup, st_teardown),
        cmocka_unit_test_setup_teardown(test_one_stale_writes_nothing, st_setup, st_teardown),
        cmocka_unit_test_setup_teardown(test_unknown_and_stale, st_setup, st_teardown),
        cmocka_unit_test_setup_teardown(test_invalid_transactions, st_setup, st_teardown),
        cmocka_unit_test_setup_teardown(test_delete_fences_stale_holder, st_setup,
                                        st_teardown),
        cmocka_unit_test_setup_teardown(test_run_many_mixes_kinds, st_setup, st_teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_all_or_nothing, st_setup,
                                        st_teardown),
        cmocka_unit_test_setup_teardown(test_shared_mark_refuses_writes, st_setup,
                                        st_teardown),
        cmocka_unit_test_setup_teardown(test_shared_marks_concurrent, st_setup, st_teardown),
    };
    const struct CMUnitTest pg_only[] = {
        cmocka_unit_test_setup_teardown(test_pg_ledger_grant_supersedes, st_setup, st_teardown),
    };
    return st_main(argc, argv, "storage_txn", common, ST_COUNT(common), NULL, 0, pg_only,
                   ST_COUNT(pg_only));
}
