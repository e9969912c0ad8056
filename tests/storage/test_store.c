/* storage: every branch of the token-checked write, reads, limits, listing, tombstones and
 * grants, on a real LMDB environment in a temp dir, or (argument "pg") on a real PostgreSQL:
 * the same cases, and the ones only one backend has. */
#include <sys/wait.h>
#include <unistd.h>

#include <lmdb.h>

#include "st_test.h"
#include "storage_internal.h"

static store_status put(st_fixture *f, const char *r, uint64_t token, const char *value,
                        uint64_t last_issued, store_write_result *res)
{
    return store_write(f->s, r, token, value, strlen(value), "text/plain", last_issued, res);
}

static void assert_value(st_fixture *f, const char *r, const char *want, uint64_t token,
                         uint64_t version)
{
    store_value v;
    assert_st(store_read(f->s, r, &v), STORE_OK);
    assert_int_equal(v.len, strlen(want));
    assert_memory_equal(v.data, want, v.len);
    assert_int_equal(v.token, token);
    assert_int_equal(v.version, version);
    store_value_free(&v);
}

static void test_accept_equal_higher_and_stale(void **state)
{
    st_fixture *f = *state;
    store_write_result res;

    assert_st(put(f, "k", 33, "from-33", 34, &res), STORE_ACCEPTED);
    assert_int_equal(res.highest_token, 33);
    assert_int_equal(res.version, 1);
    /* The same holder writes again with the same token. */
    assert_st(put(f, "k", 33, "again-33", 34, &res), STORE_ACCEPTED);
    assert_int_equal(res.version, 2);
    assert_st(put(f, "k", 34, "from-34", 34, &res), STORE_ACCEPTED);
    assert_int_equal(res.highest_token, 34);
    assert_int_equal(res.version, 3);
    /* Kleppmann's paused client with token 33 comes back. */
    assert_st(put(f, "k", 33, "late-33", 34, &res), STORE_STALE);
    assert_int_equal(res.highest_token, 34);
    assert_value(f, "k", "from-34", 34, 3);

    store_value v;
    assert_st(store_read(f->s, "k", &v), STORE_OK);
    assert_string_equal(v.content_type, "text/plain");
    assert_int_equal(v.highest_token, 34);
    assert_true(v.written_at_ms > 1600000000000LL);
    store_value_free(&v);
    uint64_t hi = 0;
    assert_st(store_highest(f->s, "k", &hi), STORE_OK);
    assert_int_equal(hi, 34);
}

static void test_forged_token_changes_nothing(void **state)
{
    st_fixture *f = *state;
    store_write_result res;
    uint64_t hi = 0;

    assert_st(put(f, "forged", 5, "real", 5, &res), STORE_ACCEPTED);
    /* A huge token that was never issued must not raise the high-water mark. */
    assert_st(put(f, "forged", 1000000, "evil", 5, &res), STORE_UNKNOWN_TOKEN);
    assert_st(store_highest(f->s, "forged", &hi), STORE_OK);
    assert_int_equal(hi, 5);
    assert_value(f, "forged", "real", 5, 1);
    /* The real holders still write. */
    assert_st(put(f, "forged", 6, "next", 6, &res), STORE_ACCEPTED);
    /* On a never-written resource, too. */
    assert_st(put(f, "fresh", 2, "x", 1, &res), STORE_UNKNOWN_TOKEN);
    store_value v;
    assert_st(store_read(f->s, "fresh", &v), STORE_NOT_FOUND);
}

/* After Redis lost its counter, last_issued reads low (here 3) while 40 has written: the old
 * holder of 33 must hear stale (409), not never issued (403), and nothing moves. */
static void test_stale_wins_over_unknown_when_counter_is_low(void **state)
{
    st_fixture *f = *state;
    store_write_result res;

    assert_st(put(f, "lost", 40, "from-40", 40, &res), STORE_ACCEPTED);
    memset(&res, 0, sizeof res);
    assert_st(put(f, "lost", 33, "late-33", 3, &res), STORE_STALE);
    assert_int_equal(res.highest_token, 40);
    assert_value(f, "lost", "from-40", 40, 1);
    /* Above the high-water mark but above what was issued: still unknown. */
    assert_st(put(f, "lost", 41, "forged", 3, &res), STORE_UNKNOWN_TOKEN);
    assert_value(f, "lost", "from-40", 40, 1);
}

static void test_limits_and_invalid(void **state)
{
    st_fixture *f = *state;
    store_write_result res;
    size_t big = f->opts.max_value_bytes + 1;
    char *buf = calloc(1, big);

    assert_st(store_write(f->s, "big", 1, buf, big, NULL, 1, &res), STORE_TOO_LARGE);
    assert_st(store_write(f->s, "big", 1, buf, big - 1, NULL, 1, &res), STORE_ACCEPTED);
    store_value v;
    assert_st(store_read(f->s, "big", &v), STORE_OK);
    assert_int_equal(v.len, big - 1);
    assert_string_equal(v.content_type, "");
    store_value_free(&v);
    free(buf);

    assert_st(put(f, "", 1, "x", 1, &res), STORE_INVALID);
    assert_st(put(f, "a/b", 1, "x", 1, &res), STORE_INVALID);
    assert_st(put(f, "a\nb", 1, "x", 1, &res), STORE_INVALID);
    assert_st(put(f, "ok", 0, "x", 1, &res), STORE_INVALID);
    assert_st(put(f, "ok", 9007199254740992ULL, "x", 9007199254740992ULL, &res), STORE_INVALID);
    assert_st(store_write(f->s, "ok", 1, "x", 1, "text/\x01", 1, &res), STORE_INVALID);
    char ct[300];
    memset(ct, 'a', sizeof ct - 1);
    ct[sizeof ct - 1] = '\0';
    assert_st(store_write(f->s, "ok", 1, "x", 1, ct, 1, &res), STORE_INVALID);
    assert_st(store_read(f->s, "ok", &v), STORE_NOT_FOUND);
    uint64_t hi = 1;
    assert_st(store_highest(f->s, "a/b", &hi), STORE_INVALID);
    assert_st(store_highest(f->s, "never", &hi), STORE_OK);
    assert_int_equal(hi, 0);
    /* Empty values are values. */
    assert_st(store_write(f->s, "empty", 1, NULL, 0, "x/y", 1, &res), STORE_ACCEPTED);
    assert_st(store_read(f->s, "empty", &v), STORE_OK);
    assert_int_equal(v.len, 0);
    store_value_free(&v);
}

static void test_delete_keeps_tombstone(void **state)
{
    st_fixture *f = *state;
    store_write_result res;
    store_value v;
    uint64_t hi = 0;

    assert_st(store_delete(f->s, "gone"), STORE_NOT_FOUND);
    assert_st(put(f, "gone", 10, "v10", 10, &res), STORE_ACCEPTED);
    assert_st(store_delete(f->s, "gone"), STORE_OK);
    assert_st(store_read(f->s, "gone", &v), STORE_NOT_FOUND);
    assert_st(store_delete(f->s, "gone"), STORE_NOT_FOUND);
    assert_st(store_highest(f->s, "gone", &hi), STORE_OK);
    assert_int_equal(hi, 10);
    /* Deleting data never lets an old token write again. */
    assert_st(put(f, "gone", 9, "v9", 12, &res), STORE_STALE);
    assert_st(store_read(f->s, "gone", &v), STORE_NOT_FOUND);
    /* The current holder may write again; the version keeps counting. */
    assert_st(put(f, "gone", 10, "back", 12, &res), STORE_ACCEPTED);
    assert_int_equal(res.version, 3);
    assert_value(f, "gone", "back", 10, 3);
}

/* store_fence: a forced release's burned token fences the resource off below it, durably,
 * keeping the value (a tombstone when there is none), and the ledger covers it. */
static void test_fence(void **state)
{
    st_fixture *f = *state;
    store_write_result res;
    store_value v;
    uint64_t hi = 0;
    uint64_t floor = store_ledger_floor(f->s);

    assert_st(store_fence(f->s, "bad/name", 5), STORE_INVALID);
    assert_st(store_fence(f->s, "f", 0), STORE_INVALID);
    assert_st(store_fence(f->s, "f", 9007199254740992ULL), STORE_INVALID);
    assert_st(put(f, "f", floor + 10, "v10", floor + 10, &res), STORE_ACCEPTED);
    assert_st(store_fence(f->s, "f", floor + 12), STORE_OK);
    assert_st(store_highest(f->s, "f", &hi), STORE_OK);
    assert_int_equal(hi, floor + 12);
    assert_value(f, "f", "v10", floor + 10, 1); /* the value stays */
    /* The holder's token writes no more, even with last_issued still at it. */
    assert_st(put(f, "f", floor + 10, "late", floor + 10, &res), STORE_STALE);
    assert_int_equal(res.highest_token, floor + 12);
    /* Lower fences change nothing; the next holder above writes. */
    assert_st(store_fence(f->s, "f", floor + 11), STORE_OK);
    assert_st(store_highest(f->s, "f", &hi), STORE_OK);
    assert_int_equal(hi, floor + 12);
    assert_st(put(f, "f", floor + 13, "v13", floor + 13, &res), STORE_ACCEPTED);

    /* Never written: a tombstone, which reads as absent and refuses lower tokens. */
    assert_st(store_fence(f->s, "never", floor + 7), STORE_OK);
    assert_st(store_read(f->s, "never", &v), STORE_NOT_FOUND);
    assert_st(put(f, "never", floor + 6, "x", floor + 6, &res), STORE_STALE);

    /* Durable, and the ledger covers it: no grant at or below it any more. */
    store_close(f->s);
    st_open(f);
    assert_st(store_highest(f->s, "never", &hi), STORE_OK);
    assert_int_equal(hi, floor + 7);
    assert_st(store_grant(f->s, "never", floor + 7, &hi), STORE_STALE);
    if (st_is_pg()) {
        assert_int_equal(hi, 7);
        assert_st(store_grant(f->s, "never", 8, &hi), STORE_OK);
    } else {
        assert_true(store_ledger_floor(f->s) >= floor + 13);
    }
}

static void test_list_paged(void **state)
{
    st_fixture *f = *state;
    store_write_result res;
    char name[32];
    store_entry e[4];
    size_t n = 0;

    for (int i = 0; i < 10; i++) {
        snprintf(name, sizeof name, "list-%02d", i);
        assert_st(put(f, name, (uint64_t)i + 1, "v", 100, &res), STORE_ACCEPTED);
    }
    assert_st(store_delete(f->s, "list-03"), STORE_OK);
    const char *after = "list-";
    int seen = 0;
    char cursor[201];
    snprintf(cursor, sizeof cursor, "%s", after);
    for (;;) {
        assert_st(store_list(f->s, cursor, e, 4, &n), STORE_OK);
        for (size_t i = 0; i < n && strncmp(e[i].resource, "list-", 5) == 0; i++) {
            snprintf(name, sizeof name, "list-%02d", seen);
            assert_string_equal(e[i].resource, name);
            assert_int_equal(e[i].highest_token, (uint64_t)seen + 1);
            assert_int_equal(e[i].deleted, seen == 3);
            assert_int_equal(e[i].size, seen == 3 ? 0 : 1);
            seen++;
        }
        if (n < 4) {
            break;
        }
        snprintf(cursor, sizeof cursor, "%s", e[n - 1].resource);
    }
    assert_int_equal(seen, 10);
    assert_st(store_list(f->s, "bad/name", e, 4, &n), STORE_INVALID);
}

static void test_full_map_is_recoverable(void **state)
{
    (void)state;
    st_fixture g;
    st_open_tiny(&g, "store-full", 256 * 1024);

    char *value = calloc(1, 40000);
    store_write_result res;
    store_status st = STORE_ACCEPTED;
    char name[32];
    int written = 0;
    for (int i = 0; i < 100 && st == STORE_ACCEPTED; i++) {
        snprintf(name, sizeof name, "fill-%d", i);
        st = store_write(g.s, name, 1, value, 40000, NULL, 1, &res);
        written += st == STORE_ACCEPTED;
    }
    assert_st(st, STORE_FULL);
    assert_true(written >= 1);
    /* The refused write left nothing behind. */
    store_value v;
    assert_st(store_read(g.s, name, &v), STORE_NOT_FOUND);
    /* Small writes and reads still work; deleting makes room for big ones again. */
    assert_st(store_write(g.s, "small", 1, "x", 1, NULL, 1, &res), STORE_ACCEPTED);
    assert_st(store_read(g.s, "fill-0", &v), STORE_OK);
    store_value_free(&v);
    for (int i = 0; i < written; i++) {
        snprintf(name, sizeof name, "fill-%d", i);
        assert_st(store_delete(g.s, name), STORE_OK);
    }
    assert_st(store_write(g.s, "fill-again", 1, value, 40000, NULL, 1, &res), STORE_ACCEPTED);
    free(value);
    st_close_tiny(&g);
}

static void test_reopen_keeps_everything(void **state)
{
    st_fixture *f = *state;
    store_write_result res;

    assert_st(put(f, "durable", 7, "seven", 7, &res), STORE_ACCEPTED);
    store_close(f->s);
    st_open(f);
    assert_value(f, "durable", "seven", 7, 1);
    assert_st(put(f, "durable", 6, "six", 7, &res), STORE_STALE);
}

/* A lost fsync cannot be seen by reading data back in the same boot, so check the cause:
 * none of the LMDB flags that skip or defer the sync of a commit is set. */
/* The secret is made once, durable, and the same after a reopen; another store has its own. */
static void test_secret_survives_reopen(void **state)
{
    st_fixture *f = *state;
    st_fixture g;
    unsigned char a[STORE_SECRET_LEN], b[STORE_SECRET_LEN], c[STORE_SECRET_LEN];
    unsigned char zero[STORE_SECRET_LEN] = {0};
    char err[256];

    assert_st(store_secret(f->s, a, err, sizeof err), STORE_OK);
    assert_memory_not_equal(a, zero, sizeof a);
    assert_st(store_secret(f->s, b, err, sizeof err), STORE_OK);
    assert_memory_equal(a, b, sizeof a);
    store_close(f->s);
    st_open(f);
    memset(b, 0, sizeof b);
    assert_st(store_secret(f->s, b, NULL, 0), STORE_OK);
    assert_memory_equal(a, b, sizeof a);

    st_open_tiny(&g, "stsecret", (size_t)1 << 20);
    assert_st(store_secret(g.s, c, err, sizeof err), STORE_OK);
    assert_memory_not_equal(a, c, sizeof a);
    st_close_tiny(&g);
}

/* Writes n bytes of content into DIR/owner-secret, the file the secret lived in before. */
static void put_legacy_secret(const char *dir, const void *content, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, STORE_LEGACY_SECRET_FILE);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(content, 1, n, fp), n);
    assert_int_equal(fclose(fp), 0);
}

/* A data directory from before the secret moved into the store keeps its secret: the file is
 * imported once, and then the store's copy wins even if the file changes. A malformed file
 * is refused, naming the file, and nothing is stored. */
static void test_secret_imports_the_legacy_file(void **state)
{
    st_fixture *f = *state;
    st_fixture g;
    const unsigned char old[STORE_SECRET_LEN] = "0123456789abcdef";
    unsigned char got[STORE_SECRET_LEN];
    char err[512];

    put_legacy_secret(f->dir, old, sizeof old);
    assert_st(store_secret(f->s, got, err, sizeof err), STORE_OK);
    assert_memory_equal(got, old, sizeof old);
    put_legacy_secret(f->dir, "fedcba9876543210", STORE_SECRET_LEN);
    assert_st(store_secret(f->s, got, err, sizeof err), STORE_OK);
    assert_memory_equal(got, old, sizeof old);

    st_open_tiny(&g, "stsecretbad", (size_t)1 << 20);
    put_legacy_secret(g.dir, "short", 5);
    assert_st(store_secret(g.s, got, err, sizeof err), STORE_INVALID);
    assert_non_null(strstr(err, STORE_LEGACY_SECRET_FILE));
    assert_non_null(strstr(err, "malformed"));
    put_legacy_secret(g.dir, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", STORE_SECRET_LEN);
    assert_st(store_secret(g.s, got, err, sizeof err), STORE_INVALID);
    st_close_tiny(&g);
}

static void test_commits_sync_to_disk(void **state)
{
    st_fixture *f = *state;
    unsigned int flags = 0;

    assert_int_equal(store__env_flags(f->s, &flags), 0);
    if ((flags & (MDB_NOSYNC | MDB_NOMETASYNC | MDB_WRITEMAP | MDB_MAPASYNC)) != 0) {
        fail_msg("LMDB env flags 0x%x skip or defer a sync (NOSYNC 0x%x, NOMETASYNC 0x%x, "
                 "WRITEMAP 0x%x, MAPASYNC 0x%x)",
                 flags, MDB_NOSYNC, MDB_NOMETASYNC, MDB_WRITEMAP, MDB_MAPASYNC);
    }
}

/* Runs store_open on f's directory in a forked child and returns what it answered (as the
 * child's exit status), so the open really comes from another process. On OK the child
 * closes its store again; on BUSY it checks that the message names the directory. */
static int open_in_child(st_fixture *f)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        store *s = NULL;
        char err[512] = "";
        store_status st = store_open(&s, &f->opts, err, sizeof err);
        if (st == STORE_BUSY && strstr(err, f->dir) == NULL) {
            _exit(100); /* the message must say which directory is taken */
        }
        store_close(s);
        _exit((int)st);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

/* One store per data dir: a second one would raise its own ledger floor and could hand out
 * a token twice after Redis loses its counter. */
static void test_second_process_cannot_open(void **state)
{
    st_fixture *f = *state;
    char err[512] = "";
    store *twice = NULL;

    assert_int_equal(open_in_child(f), STORE_BUSY);
    /* Not in this process either. */
    assert_st(store_open(&twice, &f->opts, err, sizeof err), STORE_BUSY);
    assert_null(twice);
    assert_non_null(strstr(err, "another process"));
    assert_string_equal(store_status_name(STORE_BUSY), "BUSY");
    /* Once closed, the directory is free again; the fixture reopens it for the teardown. */
    store_close(f->s);
    f->s = NULL;
    assert_int_equal(open_in_child(f), STORE_OK);
    st_open(f);
    store_write_result res;
    assert_st(put(f, "after-busy", 1, "x", 1, &res), STORE_ACCEPTED);
}

static void test_status_strings(void **state)
{
    (void)state;
    assert_string_equal(store_status_name(STORE_STALE), "STALE");
    assert_string_equal(store_status_name((store_status)99), "UNKNOWN");
    char err[256];
    store *s = NULL;
    store_options o;
    store_options_init(&o);
    assert_st(store_open(&s, &o, err, sizeof err), STORE_INVALID); /* no dir */
    assert_null(s);
    o.dir = "/proc/no-such-place/fg";
    assert_st(store_open(&s, &o, err, sizeof err), STORE_EIO);
    assert_non_null(strstr(err, "/proc/no-such-place/fg"));
}

/* store_grant: both backends refuse a token at or below what they must stay above, and
 * answer the highest to mint above. PostgreSQL keeps it per resource; LMDB has one floor. */
static void test_grant(void **state)
{
    st_fixture *f = *state;
    uint64_t hi = 99;

    assert_st(store_grant(f->s, "bad/name", 5, &hi), STORE_INVALID);
    assert_int_equal(hi, 0);
    assert_st(store_grant(f->s, "g", 0, &hi), STORE_INVALID);
    assert_st(store_grant(f->s, "g", 9007199254740992ULL, &hi), STORE_INVALID);
    uint64_t floor = store_ledger_floor(f->s);
    assert_st(store_grant(f->s, "g", floor + 5, &hi), STORE_OK);
    assert_int_equal(hi, 0);
    assert_st(store_grant(f->s, "g", floor + 6, &hi), STORE_OK);
    if (st_is_pg()) {
        assert_int_equal(floor, 0);
        assert_st(store_ledger_cover(f->s, 12345), STORE_OK);
        assert_st(store_ledger_cover(f->s, 9007199254740992ULL), STORE_INVALID);
        /* Per resource: at or below the recorded highest is refused, whoever asks. */
        assert_st(store_grant(f->s, "g", 6, &hi), STORE_STALE);
        assert_int_equal(hi, 6);
        assert_st(store_grant(f->s, "g", 2, &hi), STORE_STALE);
        assert_int_equal(hi, 6);
        assert_st(store_grant(f->s, "g", 7, &hi), STORE_OK);
        assert_st(store_grant(f->s, "other", 1, &hi), STORE_OK);
        /* Durable: a reopened store still refuses it. */
        store_close(f->s);
        st_open(f);
        assert_st(store_grant(f->s, "g", 7, &hi), STORE_STALE);
        assert_int_equal(hi, 7);
    } else {
        /* One floor for every resource: tokens above it are the gateway's to keep unique. */
        assert_st(store_grant(f->s, "g", floor + 5, &hi), STORE_OK);
        uint64_t granted = 1;
        assert_st(store_ledger_granted(f->s, "g", &granted), STORE_OK);
        assert_int_equal(granted, 0); /* nothing is recorded per resource */
        if (floor > 0) {
            assert_st(store_grant(f->s, "g", floor, &hi), STORE_STALE);
            assert_int_equal(hi, floor);
        }
        /* The ceiling covers what was granted: a reopened store's floor is above it. */
        assert_st(store_grant(f->s, "g", floor + 5000, &hi), STORE_OK);
        store_close(f->s);
        st_open(f);
        uint64_t floor2 = store_ledger_floor(f->s);
        assert_true(floor2 >= floor + 5000);
        assert_st(store_grant(f->s, "x", floor2, &hi), STORE_STALE);
        assert_int_equal(hi, floor2);
    }
}

/* store_grant_many: grants and writes in one call, each answered as alone; a bad grant
 * spares its neighbours. */
static void test_grant_many(void **state)
{
    st_fixture *f = *state;
    uint64_t floor = store_ledger_floor(f->s);
    store_grant_req g1 = {.resource = "gm", .token = floor + 10};
    store_grant_req bad = {.resource = "bad/name", .token = floor + 10};
    store_grant_req g2 = {.resource = "gm2", .token = floor + 11};
    store_write_req w = {.resource = "gm", .token = floor + 10, .data = "v", .len = 1,
                         .last_issued = floor + 10};
    store_grant_req *grants[] = {&g1, &bad, &g2};
    store_write_req *writes[] = {&w};
    store_value v;

    store_grant_many(f->s, grants, 3, writes, 1);
    assert_st(g1.status, STORE_OK);
    assert_st(bad.status, STORE_INVALID);
    assert_st(g2.status, STORE_OK);
    assert_st(w.status, STORE_ACCEPTED);
    assert_st(store_read(f->s, "gm", &v), STORE_OK);
    assert_int_equal(v.token, floor + 10);
    store_value_free(&v);
    assert_int_equal(store_grant_needed(f->s, floor + 10), st_is_pg() ? 1 : 0);
    if (st_is_pg()) {
        store_grant_req again = {.resource = "gm", .token = floor + 10};
        store_grant_req *one[] = {&again};
        store_grant_many(f->s, one, 1, NULL, 0);
        assert_st(again.status, STORE_STALE);
        assert_int_equal(again.highest, floor + 10);
    }
}

/* store_describe names the backend and where it is, never the password. */
static void test_describe(void **state)
{
    st_fixture *f = *state;
    char d[512], small[12];

    store_describe(f->s, d, sizeof d);
    if (st_is_pg()) {
        char want[300];
        snprintf(want, sizeof want, "postgresql://postgres@127.0.0.1:%d/%s", st_pg->port, f->db);
        assert_string_equal(d, want);
        assert_null(strstr(d, st_pg->password));
    } else {
        char want[300];
        snprintf(want, sizeof want, "lmdb:%s", f->dir);
        assert_string_equal(d, want);
    }
    assert_ptr_equal(store_describe(f->s, small, sizeof small), small);
    assert_int_equal(strlen(small), sizeof small - 1);
}

/* The URL picks the backend: "lmdb:/path" overrides dir, an unknown scheme is refused
 * without being repeated. */
static void test_url_selects_lmdb(void **state)
{
    (void)state;
    char dir[256], url[300], d[300], err[256];
    store *s = NULL;
    store_options o;

    th_tempdir(dir, sizeof dir, "sturl");
    store_options_init(&o);
    o.dir = "/proc/not-this-one";
    snprintf(url, sizeof url, "lmdb:%s", dir);
    o.url = url;
    assert_st(store_open(&s, &o, err, sizeof err), STORE_OK);
    assert_string_equal(store_describe(s, d, sizeof d), url);
    store_close(s);
    o.url = "lmdb:";
    o.dir = dir;
    assert_st(store_open(&s, &o, err, sizeof err), STORE_OK);
    assert_string_equal(store_describe(s, d, sizeof d), url);
    store_close(s);
    o.url = "mysql://root:hunter2@db/x";
    assert_st(store_open(&s, &o, err, sizeof err), STORE_INVALID);
    assert_null(s);
    assert_null(strstr(err, "hunter2"));
    th_rmtree(dir);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest common[] = {
        cmocka_unit_test_setup_teardown(test_accept_equal_higher_and_stale, st_setup,
                                        st_teardown),
        cmocka_unit_test_setup_teardown(test_stale_wins_over_unknown_when_counter_is_low,
                                        st_setup, st_teardown),
        cmocka_unit_test_setup_teardown(test_forged_token_changes_nothing, st_setup,
                                        st_teardown),
        cmocka_unit_test_setup_teardown(test_limits_and_invalid, st_setup, st_teardown),
        cmocka_unit_test_setup_teardown(test_delete_keeps_tombstone, st_setup, st_teardown),
        cmocka_unit_test_setup_teardown(test_fence, st_setup, st_teardown),
        cmocka_unit_test_setup_teardown(test_list_paged, st_setup, st_teardown),
        cmocka_unit_test_setup_teardown(test_reopen_keeps_everything, st_setup, st_teardown),
        cmocka_unit_test_setup_teardown(test_grant, st_setup, st_teardown),
        cmocka_unit_test_setup_teardown(test_grant_many, st_setup, st_teardown),
        cmocka_unit_test_setup_teardown(test_describe, st_setup, st_teardown),
        cmocka_unit_test(test_url_selects_lmdb),
        cmocka_unit_test(test_status_strings),
    };
    /* Map size, env flags, the data dir's lock and its legacy secret file are LMDB's. */
    const struct CMUnitTest lmdb_only[] = {
        cmocka_unit_test(test_full_map_is_recoverable),
        cmocka_unit_test_setup_teardown(test_secret_survives_reopen, st_setup, st_teardown),
        cmocka_unit_test_setup_teardown(test_secret_imports_the_legacy_file, st_setup,
                                        st_teardown),
        cmocka_unit_test_setup_teardown(test_commits_sync_to_disk, st_setup, st_teardown),
        cmocka_unit_test_setup_teardown(test_second_process_cannot_open, st_setup, st_teardown),
    };
    return st_main(argc, argv, "storage_store", common, ST_COUNT(common), lmdb_only,
                   ST_COUNT(lmdb_only), NULL, 0);
}
