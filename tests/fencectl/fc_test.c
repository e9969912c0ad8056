#include "fc_test.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"

#ifndef FENCECTL_BIN
#error "FENCECTL_BIN must name the fencectl binary under test"
#endif

#define RUN_LIMIT_MS 30000
#define FILE_LIMIT_MS 15000

static const char *const fg_env_vars[] = {"FENCEGATE_URL", "FENCEGATE_AUTH_TOKEN_FILE", NULL};

/* In the child: stdin, stdout and stderr from files, then the environment. */
static void child_setup(const fct_run *r, const char *url, const char *in_path,
                        const char *const *env)
{
    int in = open(in_path != NULL ? in_path : "/dev/null", O_RDONLY);
    int out = open(r->out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = open(r->err, O_WRONLY | O_CREAT | O_TRUNC, 0644);

    if (in < 0 || out < 0 || err < 0) {
        _exit(126);
    }
    dup2(in, STDIN_FILENO);
    dup2(out, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    for (int i = 0; fg_env_vars[i] != NULL; i++) {
        unsetenv(fg_env_vars[i]);
    }
    if (url != NULL) {
        setenv("FENCEGATE_URL", url, 1);
    }
    for (int i = 0; env != NULL && env[i] != NULL; i++) {
        const char *eq = strchr(env[i], '=');
        if (eq != NULL) {
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)(eq - env[i]), env[i]);
            setenv(name, eq + 1, 1);
        }
    }
}

void fct_start(fct_run *r, const char *dir, const char *url, const char *in_path,
               const char *const *env, const char *const *argv)
{
    static int runs = 0;
    const char *args[64];
    int n = 0;

    memset(r, 0, sizeof *r);
    runs++;
    snprintf(r->out, sizeof r->out, "%s/run%d.out", dir, runs);
    snprintf(r->err, sizeof r->err, "%s/run%d.err", dir, runs);
    args[n++] = FENCECTL_BIN;
    for (int i = 0; argv[i] != NULL && n < 63; i++) {
        args[n++] = argv[i];
    }
    args[n] = NULL;
    r->pid = fork();
    assert_true(r->pid >= 0);
    if (r->pid == 0) {
        /* If the test program dies, fencectl goes with it instead of holding a lock. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        child_setup(r, url, in_path, env);
        execv(FENCECTL_BIN, (char *const *)args);
        fprintf(stderr, "exec %s: %s\n", FENCECTL_BIN, strerror(errno));
        _exit(127);
    }
}

int fct_wait(fct_run *r)
{
    int status = 0;
    int64_t deadline = th_now_ms() + RUN_LIMIT_MS;

    assert_true(r->pid > 0);
    for (;;) {
        pid_t got = waitpid(r->pid, &status, WNOHANG);
        if (got == r->pid) {
            break;
        }
        if (th_now_ms() > deadline) {
            kill(r->pid, SIGKILL);
            waitpid(r->pid, NULL, 0);
            r->pid = 0;
            fail_msg("fencectl did not exit within %d ms", RUN_LIMIT_MS);
        }
        th_nap_ms(10);
    }
    r->pid = 0;
    r->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return r->status;
}

void fct__assert_exit(const fct_run *r, int want, const char *file, int line)
{
    if (r->status != want) {
        char *err = fct_slurp(r->err, NULL);
        print_error("%s:%d: fencectl exited %d, expected %d; its stderr:\n%s\n", file, line,
                    r->status, want, err);
        free(err);
        _fail(file, line);
    }
}

int fct_exec(fct_run *r, const char *dir, const char *url, const char *in_path,
             const char *const *env, const char *const *argv)
{
    fct_start(r, dir, url, in_path, env, argv);
    return fct_wait(r);
}

char *fct_slurp(const char *path, size_t *len)
{
    char *buf = NULL;
    size_t size = 0;
    FILE *f = fopen(path, "rb");
    struct stat st;

    if (f != NULL && fstat(fileno(f), &st) == 0) {
        buf = malloc((size_t)st.st_size + 1);
        size = buf != NULL ? fread(buf, 1, (size_t)st.st_size, f) : 0;
    }
    if (f != NULL) {
        fclose(f);
    }
    if (buf == NULL) {
        buf = calloc(1, 1);
        size = 0;
    }
    assert_non_null(buf);
    buf[size] = '\0';
    if (len != NULL) {
        *len = size;
    }
    return buf;
}

int fct_contains(const char *path, const char *needle)
{
    char *text = fct_slurp(path, NULL);
    int found = strstr(text, needle) != NULL;
    free(text);
    return found;
}

void fct_wait_file(const char *path)
{
    int64_t deadline = th_now_ms() + FILE_LIMIT_MS;

    while (access(path, F_OK) != 0) {
        if (th_now_ms() > deadline) {
            fail_msg("%s did not appear within %d ms", path, FILE_LIMIT_MS);
        }
        th_nap_ms(10);
    }
}

void fct_write(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}
