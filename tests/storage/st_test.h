/* Shared setup for the storage tests: a fresh LMDB store in a private temp dir. */
#ifndef FG_ST_TEST_H
#define FG_ST_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"
#include "storage/storage.h"

typedef struct st_fixture {
    char dir[256];
    store *s;
    store_options opts;
    void *group;          /* the group setup's state (a th_redis in the ledger test), or NULL */
} st_fixture;

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

static inline int st_setup(void **state)
{
    st_fixture *f = calloc(1, sizeof *f);
    f->group = *state; /* cmocka hands each test's setup the group state */
    th_tempdir(f->dir, sizeof f->dir, "store");
    store_options_init(&f->opts);
    f->opts.dir = f->dir;
    f->opts.ledger_step = 1000;
    st_open(f);
    *state = f;
    return 0;
}

static inline int st_teardown(void **state)
{
    st_fixture *f = *state;
    store_close(f->s);
    th_rmtree(f->dir);
    free(f);
    return 0;
}

#endif
