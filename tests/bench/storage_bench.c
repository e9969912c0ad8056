/*
 * storage_bench: durable token-checked writes per second at 1, 16 and 64 concurrent
 * writers, with and without group commit, on LMDB and on PostgreSQL side by side in one run,
 * beside the raw write+fdatasync rate of the same disk measured in the same run, before and
 * after the rows (the disk drifts; compare the ratios only when the two raw figures agree).
 * Prints a table; asserts nothing.
 *
 *   build/tests/storage/storage_bench [seconds-per-row, default 2] [dir, default $TMPDIR]
 *
 * PostgreSQL: a private server started for the run (like the tests), on the same disk as
 * $TMPDIR, or the database of FENCEGATE_BENCH_PG_URL when set (the table never prints it).
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "storage/storage.h"

static int64_t row_ms = 2000;

static double raw_fdatasync_rate(const char *dir)
{
    char path[512];
    char buf[256];
    memset(buf, 'x', sizeof buf);
    snprintf(path, sizeof path, "%s/raw.dat", dir);
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0600);
    if (fd < 0) {
        return 0;
    }
    long n = 0;
    int64_t start = th_now_ms(), end = start + row_ms;
    while (th_now_ms() < end) {
        if (write(fd, buf, sizeof buf) != sizeof buf || fdatasync(fd) != 0) {
            break;
        }
        n++;
    }
    double secs = (double)(th_now_ms() - start) / 1000.0;
    close(fd);
    unlink(path);
    return n / secs;
}

typedef struct run {
    store *s;
    const char *prefix;
    int id;
    int64_t end_ms;
    _Atomic long *count;
} run;

static void *writer(void *p)
{
    run *r = p;
    char name[64];
    char value[256];
    store_write_result res;
    memset(value, 'v', sizeof value);
    snprintf(name, sizeof name, "%s-%d", r->prefix, r->id);
    for (uint64_t token = 1; th_now_ms() < r->end_ms; token++) {
        if (store_write(r->s, name, token, value, sizeof value, "application/octet-stream",
                        token, &res) == STORE_ACCEPTED) {
            atomic_fetch_add(r->count, 1);
        }
    }
    return NULL;
}

/* Writes per second with `writers` threads for one row. url NULL: LMDB in a fresh sub
 * directory of dir; otherwise that PostgreSQL database, with resource names of this row
 * only, so rows never see each other's tokens. */
static double store_rate(const char *dir, const char *url, int writers, int group_commit,
                         double *batch)
{
    char sub[512], prefix[64];
    snprintf(sub, sizeof sub, "%s/gc%d-w%d", dir, group_commit, writers);
    snprintf(prefix, sizeof prefix, "bench-%d-gc%d-w%d", (int)getpid(), group_commit, writers);
    store_options o;
    store_options_init(&o);
    o.url = url;
    o.dir = sub;
    o.group_commit = group_commit;
    store *s = NULL;
    char err[512];
    if (store_open(&s, &o, err, sizeof err) != STORE_OK) {
        fprintf(stderr, "storage_bench: store_open: %s\n", err);
        return 0;
    }
    _Atomic long count = 0;
    pthread_t t[64];
    run r[64];
    int64_t start = th_now_ms();
    for (int i = 0; i < writers; i++) {
        r[i] = (run){s, prefix, i, start + row_ms, &count};
        pthread_create(&t[i], NULL, writer, &r[i]);
    }
    for (int i = 0; i < writers; i++) {
        pthread_join(t[i], NULL);
    }
    double secs = (double)(th_now_ms() - start) / 1000.0;
    store_stats st;
    store_get_stats(s, &st);
    *batch = st.commits ? (double)st.writes / (double)st.commits : 0;
    store_close(s);
    if (url == NULL) {
        th_rmtree(sub);
    }
    return atomic_load(&count) / secs;
}

int main(int argc, char **argv)
{
    char dir[256];
    if (argc > 1) {
        row_ms = (int64_t)(atof(argv[1]) * 1000);
    }
    if (argc > 2) {
        snprintf(dir, sizeof dir, "%s/fg-bench-XXXXXX", argv[2]);
        if (mkdtemp(dir) == NULL) {
            perror("mkdtemp");
            return 1;
        }
    } else {
        th_tempdir(dir, sizeof dir, "bench");
    }
    printf("storage_bench: %lld ms per row, data in %s, 256-byte values\n", (long long)row_ms,
           dir);
    double raw = raw_fdatasync_rate(dir);
    printf("%-34s %12.0f /s\n", "raw write+fdatasync (same disk)", raw);
    th_pg pg;
    char url[512];
    const char *given = getenv("FENCEGATE_BENCH_PG_URL");
    if (given != NULL && given[0] != '\0') {
        snprintf(url, sizeof url, "%s", given);
        pg.pid = 0;
    } else {
        th_pg_start(&pg);
        th_pg_url(&pg, "postgres", url, sizeof url);
    }
    printf("%-11s %-13s %-8s %12s %10s %14s\n", "backend", "group commit", "writers",
           "writes/s", "per-commit", "vs raw fsync");
    int counts[] = {1, 16, 64};
    double pg_rate[2][3] = {{0}};
    for (int gc = 0; gc <= 1; gc++) {
        for (int i = 0; i < 3; i++) {
            for (int b = 0; b <= 1; b++) { /* the two backends side by side, row by row */
                double batch = 0;
                double rate = store_rate(dir, b ? url : NULL, counts[i], gc, &batch);
                if (b) {
                    pg_rate[gc][i] = rate;
                }
                printf("%-11s %-13s %-8d %12.0f %10.1f %13.2fx\n", b ? "postgresql" : "lmdb",
                       gc ? "on" : "off", counts[i], rate, batch, raw > 0 ? rate / raw : 0);
            }
        }
    }
    printf("postgresql, group commit on: 64 writers / 1 writer = %.1fx (target >= 5x)\n",
           pg_rate[1][0] > 0 ? pg_rate[1][2] / pg_rate[1][0] : 0);
    if (pg.pid > 0) {
        th_pg_stop(&pg);
    }
    printf("%-34s %12.0f /s\n", "raw write+fdatasync, after the rows", raw_fdatasync_rate(dir));
    th_rmtree(dir);
    return 0;
}
