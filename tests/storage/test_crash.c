/* storage: a writer killed with SIGKILL at random moments, 20 times. Every write it reported
 * as acknowledged must be there after reopening, and no highest token may go down. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "st_test.h"

#define ROUNDS 20
#define RESOURCES 4

typedef struct ack {
    uint32_t resource;
    uint64_t token;
    uint64_t version;
} ack;

/* The child: writes forever, reporting each acknowledged write over the pipe. */
static void child_writer(const char *dir, int fd)
{
    store *s = NULL;
    store_options o;
    store_options_init(&o);
    o.dir = dir;
    if (store_open(&s, &o, NULL, 0) != STORE_OK) {
        _exit(2);
    }
    uint64_t token[RESOURCES];
    char name[16];
    for (int r = 0; r < RESOURCES; r++) {
        snprintf(name, sizeof name, "crash-%d", r);
        store_highest(s, name, &token[r]);
    }
    for (uint32_t i = 0;; i++) {
        uint32_t r = i % RESOURCES;
        snprintf(name, sizeof name, "crash-%u", r);
        token[r]++;
        char value[64];
        int len = snprintf(value, sizeof value, "value-%llu", (unsigned long long)token[r]);
        store_write_result res;
        if (store_write(s, name, token[r], value, (size_t)len, "text/plain", token[r], &res) !=
            STORE_ACCEPTED) {
            _exit(3);
        }
        ack a = {r, token[r], res.version};
        if (write(fd, &a, sizeof a) != sizeof a) {
            _exit(4);
        }
    }
}

static void test_sigkill_at_random_moments(void **state)
{
    (void)state;
    char dir[256];
    th_tempdir(dir, sizeof dir, "store-crash");
    uint64_t acked_token[RESOURCES] = {0};
    uint64_t acked_version[RESOURCES] = {0};
    uint64_t prev_highest[RESOURCES] = {0};
    srand((unsigned)getpid());

    for (int round = 0; round < ROUNDS; round++) {
        int p[2];
        assert_int_equal(pipe(p), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(p[0]);
            child_writer(dir, p[1]);
        }
        close(p[1]);
        /* Let it acknowledge a random number of writes, then kill it mid-flight. */
        int want = 1 + rand() % 60;
        ack a;
        for (int got = 0; got < want && read(p[0], &a, sizeof a) == sizeof a; got++) {
            acked_token[a.resource] = a.token;
            acked_version[a.resource] = a.version;
        }
        kill(pid, SIGKILL);
        int status = 0;
        waitpid(pid, &status, 0);
        assert_true(WIFSIGNALED(status)); /* it was still writing, not failing */
        /* Everything in the pipe was acknowledged before the kill. */
        while (read(p[0], &a, sizeof a) == sizeof a) {
            acked_token[a.resource] = a.token;
            acked_version[a.resource] = a.version;
        }
        close(p[0]);

        st_fixture f;
        memset(&f, 0, sizeof f);
        snprintf(f.dir, sizeof f.dir, "%s", dir);
        store_options_init(&f.opts);
        f.opts.dir = dir;
        st_open(&f); /* opens without any repair step */
        for (int r = 0; r < RESOURCES; r++) {
            char name[16];
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
