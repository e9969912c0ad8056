/*
 * lk_random_id()'s sources of randomness, each made to fail in turn: the test links the
 * static library with getrandom and open wrapped (-Wl,--wrap), so it sees which source an id
 * came from without a kernel or a seccomp filter that refuses them. No server is needed.
 *   - getrandom answers: the id is its bytes, and /dev/urandom is not opened.
 *   - getrandom answers in pieces, or is interrupted: the id is still whole.
 *   - getrandom is refused: /dev/urandom is read, and every one of the 128 bits still varies.
 *   - both are refused: the process aborts instead of returning an id.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/random.h>
#include <sys/types.h>
#include <sys/wait.h>

#include "lk_test.h"

enum { REAL, SHORT, INTERRUPTED, REFUSED };

static int getrandom_mode = REAL;
static int getrandom_calls;
static int urandom_refused;
static int urandom_opens;

ssize_t __real_getrandom(void *buf, size_t len, unsigned int flags);
ssize_t __wrap_getrandom(void *buf, size_t len, unsigned int flags);
int __real_open(const char *path, int flags, ...);
int __wrap_open(const char *path, int flags, ...);
int __real_open64(const char *path, int flags, ...);
int __wrap_open64(const char *path, int flags, ...);

ssize_t __wrap_getrandom(void *buf, size_t len, unsigned int flags)
{
    getrandom_calls++;
    switch (getrandom_mode) {
    case SHORT:
        return __real_getrandom(buf, len > 3 ? 3 : len, flags);
    case INTERRUPTED:
        if (getrandom_calls % 2 == 1) {
            errno = EINTR;
            return -1;
        }
        return __real_getrandom(buf, len, flags);
    case REFUSED:
        errno = EPERM; /* as a seccomp filter answers */
        return -1;
    default:
        return __real_getrandom(buf, len, flags);
    }
}

/* Whether an open of path is refused (-1 with EACCES); counts the opens of /dev/urandom. */
static int refuse_open(const char *path)
{
    if (strcmp(path, "/dev/urandom") != 0) {
        return 0;
    }
    urandom_opens++;
    if (urandom_refused) {
        errno = EACCES;
        return 1;
    }
    return 0;
}

/* Anything else linked in may open files too: a mode follows the flags with O_CREAT. */
#define PASS_OPEN(real, path, flags)                                                        \
    do {                                                                                   \
        if (refuse_open(path)) {                                                           \
            return -1;                                                                     \
        }                                                                                  \
        mode_t mode = 0;                                                                   \
        if ((flags) & O_CREAT) {                                                           \
            va_list ap;                                                                    \
            va_start(ap, flags);                                                           \
            mode = (mode_t)va_arg(ap, int);                                                \
            va_end(ap);                                                                    \
        }                                                                                  \
        return real(path, flags, mode);                                                    \
    } while (0)

/* Which of the two names an object calls depends on its large-file setting: both are
 * wrapped. */
int __wrap_open(const char *path, int flags, ...)
{
    PASS_OPEN(__real_open, path, flags);
}

int __wrap_open64(const char *path, int flags, ...)
{
    PASS_OPEN(__real_open64, path, flags);
}

static int setup(void **state)
{
    (void)state;
    getrandom_mode = REAL;
    getrandom_calls = 0;
    urandom_refused = 0;
    urandom_opens = 0;
    return 0;
}

/* 64 ids, each 32 hex digits and every bit seen both ways (a fixed bit fails this; a random
 * one with probability 2^-63). */
static void assert_ids_random(void)
{
    unsigned char seen[2][16] = {{0}};
    char id[33];

    for (int i = 0; i < 64; i++) {
        assert_ptr_equal(lk_random_id(id), id);
        assert_int_equal(strlen(id), 32);
        assert_int_equal(strspn(id, "0123456789abcdef"), 32);
        for (int k = 0; k < 16; k++) {
            unsigned int byte = 0;
            assert_int_equal(sscanf(id + 2 * k, "%2x", &byte), 1);
            seen[0][k] |= (unsigned char)~byte;
            seen[1][k] |= (unsigned char)byte;
        }
    }
    for (int k = 0; k < 16; k++) {
        assert_int_equal(seen[0][k], 0xff);
        assert_int_equal(seen[1][k], 0xff);
    }
}

static void test_getrandom_is_the_source(void **state)
{
    (void)state;
    assert_ids_random();
    assert_int_equal(getrandom_calls, 64); /* one call per id */
    assert_int_equal(urandom_opens, 0);
}

static void test_short_and_interrupted_answers_are_completed(void **state)
{
    (void)state;
    getrandom_mode = SHORT;
    assert_ids_random();
    assert_int_equal(getrandom_calls, 64 * 6); /* 16 bytes, 3 at a time */
    getrandom_mode = INTERRUPTED;
    getrandom_calls = 0;
    assert_ids_random();
    assert_int_equal(getrandom_calls, 64 * 2);
    assert_int_equal(urandom_opens, 0);
}

static void test_urandom_when_getrandom_is_refused(void **state)
{
    (void)state;
    getrandom_mode = REFUSED;
    assert_ids_random();
    assert_int_equal(urandom_opens, 64);
}

static void test_no_source_aborts(void **state)
{
    (void)state;
    getrandom_mode = REFUSED;
    urandom_refused = 1;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char id[33];
        lk_random_id(id);
        _exit(0); /* an id was made: the parent fails */
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGABRT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_getrandom_is_the_source, setup),
        cmocka_unit_test_setup(test_short_and_interrupted_answers_are_completed, setup),
        cmocka_unit_test_setup(test_urandom_when_getrandom_is_refused, setup),
        cmocka_unit_test_setup(test_no_source_aborts, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
