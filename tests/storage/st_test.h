/* Shared setup for the storage tests: a fresh store in a private temp dir (LMDB) or a fresh
 * database on a private PostgreSQL server (when the test program runs with the argument
 * "pg": st_main() then starts the server in the group setup). The same cases run on both. */
#ifndef FG_ST_TEST_H
#define FG_ST_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "storage/storage.h"

typedef struct st_fixture {
    char dir[256];
    store *s;
    store_options opts;
    void *group;          /* the group setup's state (a th_redis in the ledger test), or NULL */
    char db[64];          /* PostgreSQL: this test's database */
    char url[512];        /* PostgreSQL: its URL (with the password) */
} st_fixture;

/* The PostgreSQL server of this test program, or NULL when it runs on LMDB. */
static th_pg *st_pg;
static th_pg st_pg_server;

static inline int st_is_pg(void)
{
    return st_pg != NULL;
}

#define assert_st(got, want)                                                               \
    do {                                                                                   \
        store_status got_ = (got);                                                         \
        if (got_ != (want)) {                                                              \
            print_error("%s:%d: got %s, want %s\n", __FILE__, __LINE__,                    \
                        store_status_name(got_), store_status_name(want));                 \
            fail();                                                                        \
        }                                                                                  \
    } while (0)

static inline void st_open(st_fixture *f)
{
    char err[512];
    store_status st = store_open(&f->s, &f->opts, err, sizeof err);
    if (st != STORE_OK) {
        print_error("store_open(%s): %s: %s\n", f->dir, store_status_name(st), err);
        fail();
    }
}

/* Opens a store with a map of map_bytes (the tests that fill it up) in a fresh temp dir.
 * Close with st_close_tiny(). */
static inline void st_open_tiny(st_fixture *f, const char *tag, size_t map_bytes)
{
    memset(f, 0, sizeof *f);
    th_tempdir(f->dir, sizeof f->dir, tag);
    store_options_init(&f->opts);
    f->opts.dir = f->dir;
    f->opts.map_size = map_bytes;
    st_open(f);
}

static inline void st_close_tiny(st_fixture *f)
{
    store_close(f->s);
    th_rmtree(f->dir);
}

/* PostgreSQL: makes a fresh database for one test and points f->url at it; -1 (with a
 * message) when the server refuses. */
static inline int st_new_db(st_fixture *f)
{
    static int seq;
    char sql[128];
    snprintf(f->db, sizeof f->db, "fg_%d_%d", (int)getpid(), ++seq);
    snprintf(sql, sizeof sql, "CREATE DATABASE %s", f->db);
    if (th_pg_exec(st_pg, sql) != 0) {
        print_error("cannot create database %s\n", f->db);
        return -1;
    }
    th_pg_url(st_pg, f->db, f->url, sizeof f->url);
    return 0;
}

static inline void st_drop_db(st_fixture *f)
{
    char sql[128];
    if (f->db[0] != '\0') {
        snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s WITH (FORCE)", f->db);
        th_pg_exec(st_pg, sql);
    }
}

static inline int st_setup(void **state)
{
    st_fixture *f = calloc(1, sizeof *f);
    f->group = *state; /* cmocka hands each test's setup the group state */
    th_tempdir(f->dir, sizeof f->dir, "store");
    store_options_init(&f->opts);
    f->opts.dir = f->dir;
    f->opts.ledger_step = 1000;
    if (st_is_pg()) {
        if (st_new_db(f) != 0) {
            th_rmtree(f->dir);
            free(f); /* cmocka runs no teardown after a failed setup */
            return -1;
        }
        f->opts.url = f->url;
    }
    st_open(f);
    *state = f;
    return 0;
}

static inline int st_teardown(void **state)
{
    st_fixture *f = *state;
    store_close(f->s);
    if (st_is_pg()) {
        st_drop_db(f);
    }
    th_rmtree(f->dir);
    free(f);
    return 0;
}

static inline int st_pg_group_setup(void **state)
{
    (void)state;
    th_pg_start(&st_pg_server);
    st_pg = &st_pg_server;
    return 0;
}

static inline int st_pg_group_teardown(void **state)
{
    (void)state;
    th_pg_stop(&st_pg_server);
    return 0;
}

/* Runs the cases both backends share (common), then those of the chosen one: argv[1] "pg"
 * (or FENCEGATE_TEST_BACKEND=pg) picks PostgreSQL, started for this program, and pg_only;
 * otherwise LMDB and lmdb_only. */
static inline int st_main(int argc, char **argv, const char *name, const struct CMUnitTest *common,
                          size_t ncommon, const struct CMUnitTest *lmdb_only, size_t nlmdb,
                          const struct CMUnitTest *pg_only, size_t npg)
{
    const char *env = getenv("FENCEGATE_TEST_BACKEND");
    int pg = (argc > 1 && strcmp(argv[1], "pg") == 0) || (env != NULL && strcmp(env, "pg") == 0);
    size_t nextra = pg ? npg : nlmdb;
    struct CMUnitTest *all = calloc(ncommon + nextra + 1, sizeof *all);
    char full[128];

    if (ncommon > 0) {
        memcpy(all, common, ncommon * sizeof *all);
    }
    if (nextra > 0) {
        memcpy(all + ncommon, pg ? pg_only : lmdb_only, nextra * sizeof *all);
    }
    snprintf(full, sizeof full, "%s%s", name, pg ? "_pg" : "");
    int rc = _cmocka_run_group_tests(full, all, ncommon + nextra,
                                     pg ? st_pg_group_setup : NULL,
                                     pg ? st_pg_group_teardown : NULL);
    free(all);
    return rc;
}

#define ST_COUNT(a) (sizeof(a) / sizeof((a)[0]))

#endif
