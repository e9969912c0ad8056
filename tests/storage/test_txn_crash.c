/* storage: a process running fenced transactions, killed with SIGKILL at random moments,
 * ROUNDS times, on LMDB or (argument "pg") PostgreSQL. Two of its threads commit
 * transactions over the same resources (each writes one token's value to four of them and
 * deletes or writes a fifth), a third single writes, so kills land before, inside and after
 * commits and group commits. After each kill the store is opened again: every resource shows
 * the same transaction (all of its writes, the fifth deleted or not as that transaction
 * said), and that transaction is at or after the last one acknowledged. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>

#include "st_test.h"

#define ROUNDS 12
#define TXN_SET 4 /* t0..t3 get the value; t4 is deleted (odd token) or written (even) */
#define TXN_THREADS 2

typedef struct crash_child {
    store *s;
    int fd;
    _Atomic uint64_t *next_token;
    uint64_t first_token;
} crash_child;

static void *txn_loop(void *p)
{
    crash_child *c = p;
    for (;;) {
        uint64_t token = atomic_fetch_add(c->next_token, 1);
        char value[32], names[TXN_SET + 1][8];
        store_write_req w[TXN_SET + 1];
        store_write_req *ptrs[TXN_SET + 1];
        int len = snprintf(value, sizeof value, "v%llu", (unsigned long long)token);
        for (int k = 0; k <= TXN_SET; k++) {
            snprintf(names[k], sizeof names[k], "t%d", k);
            w[k] = (store_write_req){.resource = names[k], .token = token, .data = value,
                                     .len = (size_t)len, .content_type = "text/plain",
                                     .last_issued = token, .del = k == TXN_SET && token % 2};
            ptrs[k] = &w[k];
        }
        store_txn t = {.writes = ptrs, .n = TXN_SET + 1};
        store_status st = store_transact(c->s, &t);
        if (st == STORE_ACCEPTED) {
            if (write(c->fd, &token, sizeof token) != sizeof token) {
                _exit(4);
            }
        } else if (st != STORE_STALE) {
            _exit(3); /* a transaction of a lower token lost to one of a larger: fine */
        }
    }
    return NULL;
}

static void *single_loop(void *p)
{
    crash_child *c = p;
    for (uint64_t token = c->first_token;; token++) {
        if (store_write(c->s, "solo", token, "s", 1, NULL, token, NULL) != STORE_ACCEPTED) {
            _exit(5);
        }
    }
    return NULL;
}

static void child_main(const store_options *opts, int fd, uint64_t first_token)
{
    store *s = NULL;
    _Atomic uint64_t next = first_token;
    pthread_t th[TXN_THREADS + 1];
    crash_child c;

    if (store_open(&s, opts, NULL, 0) != STORE_OK) {
        _exit(2);
    }
    c = (crash_child){s, fd, &next, first_token};
    for (int i = 0; i < TXN_THREADS; i++) {
        if (pthread_create(&th[i], NULL, txn_loop, &c) != 0) {
            _exit(6);
        }
    }
    if (pthread_create(&th[TXN_THREADS], NULL, single_loop, &c) != 0) {
        _exit(6);
    }
    for (;;) {
        pause(); /* until the parent kills us */
    }
}

/* The transaction every resource shows, asserted to be one and the same. 0: none yet. */
static uint64_t shown_transaction(store *s)
{
    store_value v;
    uint64_t token = 0;
    store_status st = store_read(s, "t0", &v);
    if (st == STORE_NOT_FOUND) {
        for (int k = 1; k <= TXN_SET; k++) {
            char name[8];
            uint64_t hi = 1;
            snprintf(name, sizeof name, "t%d", k);
            assert_st(store_highest(s, name, &hi), STORE_OK);
            assert_int_equal(hi, 0);
        }
        return 0;
    }
    assert_st(st, STORE_OK);
    token = v.token;
    char want[32];
    snprintf(want, sizeof want, "v%llu", (unsigned long long)token);
    assert_int_equal(v.len, strlen(want));
    assert_memory_equal(v.data, want, v.len);
    uint64_t version = v.version;
    store_value_free(&v);
    for (int k = 1; k <= TXN_SET; k++) {
        char name[8];
        snprintf(name, sizeof name, "t%d", k);
        st = store_read(s, name, &v);
        if (k == TXN_SET && token % 2) {
            uint64_t hi = 0;
            assert_st(st, STORE_NOT_FOUND); /* that transaction deleted it */
            assert_st(store_highest(s, name, &hi), STORE_OK);
            assert_int_equal(hi, token);
            continue;
        }
        assert_st(st, STORE_OK);
        assert_int_equal(v.token, token);
        assert_int_equal(v.version, version);
        assert_int_equal(v.len, strlen(want));
        assert_memory_equal(v.data, want, v.len);
        store_value_free(&v);
    }
    return token;
}

static void test_kill_during_transactions(void **state)
{
    st_fixture *f = *state;
    uint64_t acked = 0, next_first = 1;
    srand((unsigned)getpid());

    store_close(f->s); /* the children own the store while they run */
    f->s = NULL;
    for (int round = 0; round < ROUNDS; round++) {
        int p[2];
        assert_int_equal(pipe(p), 0);
        fflush(NULL);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(p[0]);
            child_main(&f->opts, p[1], next_first);
        }
        close(p[1]);
        int want = 1 + rand() % 60;
        uint64_t token;
        for (int got = 0; got < want && read(p[0], &token, sizeof token) == sizeof token;
             got++) {
            acked = token > acked ? token : acked;
        }
        kill(pid, SIGKILL);
        int status = 0;
        waitpid(pid, &status, 0);
        assert_true(WIFSIGNALED(status)); /* still committing, not failing */
        while (read(p[0], &token, sizeof token) == sizeof token) {
            acked = token > acked ? token : acked;
        }
        close(p[0]);

        st_open(f);
        uint64_t shown = shown_transaction(f->s);
        assert_true(shown >= acked);
        /* The next child's tokens start above anything this one may have committed. */
        next_first = shown + 1000000000;
        store_close(f->s);
        f->s = NULL;
    }
    st_open(f); /* for the teardown */
}

int main(int argc, char **argv)
{
    const struct CMUnitTest common[] = {
        cmocka_unit_test_setup_teardown(test_kill_during_transactions, st_setup, st_teardown),
    };
    return st_main(argc, argv, "storage_txn_crash", common, ST_COUNT(common), NULL, 0, NULL,
                   0);
}
