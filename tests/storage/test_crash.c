/* storage: a writer process killed with SIGKILL at random moments, 20 times. Its threads
 * write concurrently, so kills land inside group commits. Every write it reported as
 * acknowledged must be there after reopening, no highest token may go down, and the ledger's
 * floor must cover every token it covered before handing it to a write. */
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "st_test.h"

#define ROUNDS 20
#define WRITER_THREADS 4
#define PER_THREAD 2
#define RESOURCES (WRITER_THREADS * PER_THREAD)
#define LEDGER_STEP 16 /* small, so the ledger is raised often while the kills land */

typedef struct ack {
    uint32_t resource;
    uint64_t token;
    uint64_t version;
} ack;

typedef struct child_thread {
    store *s;
    int fd;
    int id;
} child_thread;

static void open_crash_store(store **s, const char *dir)
{
    store_options o;
    store_options_init(&o);
    o.dir = dir;
    o.ledger_step = LEDGER_STEP;
    if (store_open(s, &o, NULL, 0) != STORE_OK) {
        _exit(2);
    }
}

/* One writer thread of the child: its own resources, tokens going up, each covered by the
 * ledger and then written, and each acknowledged write reported over the pipe. An ack is
 * smaller than PIPE_BUF, so the threads' reports never interleave. */
static void *child_writer(void *p)
{
    child_thread *c = p;
    uint64_t token[PER_THREAD];
    char name[32];

    for (int k = 0; k < PER_THREAD; k++) {
        snprintf(name, sizeof name, "crash-%d", c->id * PER_THREAD + k);
        if (store_highest(c->s, name, &token[k]) != STORE_OK) {
            _exit(3);
        }
    }
    for (uint32_t i = 0;; i++) {
        int k = (int)(i % PER_THREAD);
        uint32_t r = (uint32_t)(c->id * PER_THREAD + k);
        snprintf(name, sizeof name, "crash-%u", r);
        token[k]++;
        char value[64];
        int len = snprintf(value, sizeof value, "value-%llu", (unsigned long long)token[k]);
        store_write_result res;
        if (store_ledger_cover(c->s, token[k]) != STORE_OK ||
            store_write(c->s, name, token[k], value, (size_t)len, "text/plain", token[k],
                        &res) != STORE_ACCEPTED) {
            _exit(3);
        }
        ack a = {r, token[k], res.version};
        if (write(c->fd, &a, sizeof a) != sizeof a) {
            _exit(4);
        }
    }
    return NULL;
}

static void child_main(const char *dir, int fd)
{
    store *s = NULL;
    pthread_t t[WRITER_THREADS];
    child_thread c[WRITER_THREADS];

    open_crash_store(&s, dir);
    for (int i = 0; i < WRITER_THREADS; i++) {
        c[i] = (child_thread){s, fd, i};
        if (pthread_create(&t[i], NULL, child_writer, &c[i]) != 0) {
            _exit(5);
        }
    }
    for (int i = 0; i < WRITER_THREADS; i++) {
        pthread_join(t[i], NULL); /* never returns: the parent kills us */
    }
    _exit(6);
}

static void record_ack(const ack *a, uint64_t *acked_token, uint64_t *acked_version)
{
    assert_true(a->resource < RESOURCES);
    acked_token[a->resource] = a->token;
    acked_version[a->resource] = a->version;
}

static void test_sigkill_at_random_moments(void **state)
{
    (void)state;
    char dir[256];
    th_tempdir(dir, sizeof dir, "store-crash");
    uint64_t acked_token[RESOURCES] = {0};
    uint64_t acked_version[RESOURCES] = {0};
    uint64_t prev_highest[RESOURCES] = {0};
    uint64_t prev_floor = 0;
    srand((unsigned)getpid());

    for (int round = 0; round < ROUNDS; round++) {
        int p[2];
        assert_int_equal(pipe(p), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(p[0]);
            child_main(dir, p[1]);
        }
        close(p[1]);
        /* Let it acknowledge a random number of writes, then kill it mid-flight. */
        int want = 1 + rand() % 150;
        ack a;
        for (int got = 0; got < want && read(p[0], &a, sizeof a) == sizeof a; got++) {
            record_ack(&a, acked_token, acked_version);
        }
        kill(pid, SIGKILL);
        int status = 0;
        waitpid(pid, &status, 0);
        assert_true(WIFSIGNALED(status)); /* it was still writing, not failing */
        /* Everything in the pipe was acknowledged before the kill. */
        while (read(p[0], &a, sizeof a) == sizeof a) {
            record_ack(&a, acked_token, acked_version);
        }
        close(p[0]);

        st_fixture f;
        memset(&f, 0, sizeof f);
        snprintf(f.dir, sizeof f.dir, "%s", dir);
        store_options_init(&f.opts);
        f.opts.dir = dir;
        f.opts.ledger_step = LEDGER_STEP;
        st_open(&f); /* opens without any repair step */
        /* The ledger only grows, and covers every token the child covered. */
        uint64_t floor = store_ledger_floor(f.s);
        assert_true(floor > prev_floor);
        prev_floor = floor;
        for (int r = 0; r < RESOURCES; r++) {
            assert_true(floor >= acked_token[r]);
        }
        for (int r = 0; r < RESOURCES; r++) {
            char name[32];
            snprintf(name, sizeof name, "crash-%d", r);
            store_value v;
            if (acked_token[r] == 0) {
                continue;
            }
            assert_st(store_read(f.s, name, &v), STORE_OK);
            assert_true(v.token >= acked_token[r]);
            assert_true(v.version >= acked_version[r]);
            assert_true(v.highest_token >= prev_highest[r]);
            char want_value[64];
            snprintf(want_value, sizeof want_value, "value-%llu", (unsigned long long)v.token);
            assert_int_equal(v.len, strlen(want_value));
            assert_memory_equal(v.data, want_value, v.len);
            prev_highest[r] = v.highest_token;
            store_value_free(&v);
        }
        store_close(f.s);
    }
    th_rmtree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigkill_at_random_moments),
    };
    return cmocka_run_group_tests_name("storage_crash", tests, NULL, NULL);
}
