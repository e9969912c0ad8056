/*
 * Helpers for fencectl's end-to-end tests: run the real fencectl binary (its path comes
 * from the build as FENCECTL_BIN) with its output in files, in the foreground or in the
 * background, and wait for it or for files with deadlines. The gateway and Redis come from
 * gw_test.h and harness.h.
 */
#ifndef FG_FC_TEST_H
#define FG_FC_TEST_H

#include <sys/types.h>

typedef struct fct_run {
    pid_t pid;          /* 0 once it was waited for */
    char out[300];      /* the file holding its stdout */
    char err[300];      /* the file holding its stderr */
    int status;         /* its exit status (128+N when signal N ended it) once waited for */
} fct_run;

/* Starts fencectl with argv (NULL-terminated, without argv[0]) in the background. Its
 * stdout and stderr go to new files in dir, its stdin comes from in_path (NULL:
 * /dev/null). Its environment has no FENCEGATE_* variables except FENCEGATE_URL=url (when
 * url is not NULL) and env ("NAME=value", NULL-terminated, may be NULL). */
void fct_start(fct_run *r, const char *dir, const char *url, const char *in_path,
               const char *const *env, const char *const *argv);

/* Waits up to 30 s for it to exit and returns its exit status (128+N for signal N). Fails
 * the test, after killing it, when it does not exit in time. */
int fct_wait(fct_run *r);

/* Asserts that the finished run exited with want, printing its stderr when it did not. */
#define fct_assert_exit(r, want) fct__assert_exit((r), (want), __FILE__, __LINE__)
void fct__assert_exit(const fct_run *r, int want, const char *file, int line);

/* fct_start and fct_wait. */
int fct_exec(fct_run *r, const char *dir, const char *url, const char *in_path,
             const char *const *env, const char *const *argv);

/* The contents of path as a malloc'd NUL-terminated string ("" when it cannot be read);
 * *len gets the byte count when len is not NULL. The caller frees it. */
char *fct_slurp(const char *path, size_t *len);

/* 1 when the file contains needle. */
int fct_contains(const char *path, const char *needle);

/* Waits up to 15 s for path to exist. Fails the test otherwise. */
void fct_wait_file(const char *path);

/* Writes len bytes to path (creating or truncating it). Fails the test on error. */
void fct_write(const char *path, const void *data, size_t len);

#endif
