/* storage on PostgreSQL only: what a shared database adds to the contract. Group commit under
 * many threads, two stores (two gateways) on one database, concurrent schema migration, the
 * password kept out of every text, and a database that crashes and comes back while the
 * store stays open. A real PostgreSQL started by the group setup. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>

#include <libpq-fe.h>

#include "st_test.h"

#define THREADS 64
#define PER_THREAD 10

typedef struct many_arg {
    store *s;
    int id;
    int errors;
} many_arg;

static void *many_worker(void *p)
{
    many_arg *a = p;
    char name[32];
    store_write_result res;
    uint64_t hi = 0;

    snprintf(name, sizeof name, "many-%d", a->id);
    for (uint64_t token = 1; token <= PER_THREAD; token++) {
        store_status st = store_write(a->s, name, token, "v", 1, NULL, token, &res);
        a->errors += st != STORE_ACCEPTED;
        st = store_grant(a->s, name, token, &hi);
        a->errors += st != STORE_OK;
    }
    return NULL;
}

/* 64 threads writing and granting at once share transactions: fewer commits than writes. */
static void test_many_threads_share_commits(void **state)
{
    st_fixture *f = *state;
    pthread_t t[THREADS];
    many_arg args[THREADS];
    store_stats stats;

    for (int i = 0; i < THREADS; i++) {
        args[i] = (many_arg){f->s, i, 0};
        pthread_create(&t[i], NULL, many_worker, &args[i]);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(args[i].errors, 0);
    }
    store_get_stats(f->s, &stats);
    print_message("commits=%llu writes=%llu max_batch=%llu\n",
                  (unsigned long long)stats.commits, (unsigned long long)stats.writes,
                  (unsigned long long)stats.max_batch);
    assert_int_equal(stats.writes, THREADS * PER_THREAD);
    assert_true(stats.commits < stats.writes);
    assert_true(stats.max_batch > 1);
}

static void open_url(store **s, const char *url)
{
    char err[512];
    store_options o;
    store_options_init(&o);
    o.url = url;
    store_status st = store_open(s, &o, err, sizeof err);
    if (st != STORE_OK) {
        fail_msg("store_open: %s: %s", store_status_name(st), err);
    }
}

/* Two stores on one database are two gateways: each sees the other's writes, tombstones,
 * grants and secret. */
static void test_two_stores_share_one_database(void **state)
{
    st_fixture *f = *state;
    store *b = NULL;
    store_write_result res;
    store_value v;
    uint64_t hi = 0;
    unsigned char sa[STORE_SECRET_LEN], sb[STORE_SECRET_LEN];

    open_url(&b, f->url);
    assert_st(store_write(f->s, "shared", 10, "from-a", 6, NULL, 10, &res), STORE_ACCEPTED);
    assert_st(store_read(b, "shared", &v), STORE_OK);
    assert_memory_equal(v.data, "from-a", 6);
    store_value_free(&v);
    assert_st(store_write(b, "shared", 9, "late", 4, NULL, 10, &res), STORE_STALE);
    assert_int_equal(res.highest_token, 10);
    assert_st(store_write(b, "shared", 11, "from-b", 6, NULL, 11, &res), STORE_ACCEPTED);
    assert_int_equal(res.version, 2);
    assert_st(store_write(f->s, "shared", 10, "again", 5, NULL, 11, &res), STORE_STALE);
    assert_int_equal(res.highest_token, 11);
    assert_st(store_delete(b, "shared"), STORE_OK);
    assert_st(store_read(f->s, "shared", &v), STORE_NOT_FOUND);

    /* A token one gateway granted can never be granted by the other. */
    assert_st(store_grant(f->s, "lock", 5, &hi), STORE_OK);
    assert_st(store_grant(b, "lock", 5, &hi), STORE_STALE);
    assert_int_equal(hi, 5);
    assert_st(store_grant(b, "lock", 3, &hi), STORE_STALE);
    assert_st(store_grant(b, "lock", 6, &hi), STORE_OK);
    assert_st(store_grant(f->s, "lock", 6, &hi), STORE_STALE);
    assert_int_equal(hi, 6);

    /* The same grant again (a re-entry, a replay) by its holder, on either store, is
     * granted; the same number for another holder, or without one, is not. */
    static const unsigned char holder_a[STORE_HOLDER_LEN] = {1, 2, 3};
    static const unsigned char holder_b[STORE_HOLDER_LEN] = {4, 5, 6};
    assert_st(store_grant_as(f->s, "held", 7, holder_a, &hi), STORE_OK);
    assert_st(store_grant_as(b, "held", 7, holder_a, &hi), STORE_OK);
    assert_st(store_grant_as(b, "held", 7, holder_b, &hi), STORE_STALE);
    assert_int_equal(hi, 7);
    assert_st(store_grant(b, "held", 7, &hi), STORE_STALE);
    assert_st(store_grant_as(b, "held", 8, holder_b, &hi), STORE_OK);
    assert_st(store_grant_as(f->s, "held", 7, holder_a, &hi), STORE_STALE);
    assert_int_equal(hi, 8);
    assert_int_equal(store_grant_needed(b, 8), 1);

    /* Each store reads the last grant either recorded (a fenced read's check); 0 for a
     * resource never granted. */
    uint64_t granted = 1;
    assert_st(store_ledger_granted(f->s, "held", &granted), STORE_OK);
    assert_int_equal(granted, 8);
    assert_st(store_ledger_granted(b, "lock", &granted), STORE_OK);
    assert_int_equal(granted, 6);
    assert_st(store_ledger_granted(b, "never-granted", &granted), STORE_OK);
    assert_int_equal(granted, 0);
    assert_st(store_ledger_granted(b, "a b", &granted), STORE_INVALID);

    assert_st(store_secret(b, sb, NULL, 0), STORE_OK);
    assert_st(store_secret(f->s, sa, NULL, 0), STORE_OK);
    assert_memory_equal(sa, sb, sizeof sa);
    store_close(b);
}

typedef struct race_arg {
    store *s;
    _Atomic uint64_t *next_token;
    _Atomic uint64_t *next_grant;
    int errors;
} race_arg;

/* Two stores race on the same few resources: every answer is ACCEPTED or STALE (never an
 * error from a deadlock between their batches), and every grant is unique. */
static void *race_worker(void *p)
{
    race_arg *a = p;
    char name[16];
    store_write_result res;
    uint64_t hi = 0;

    for (int i = 0; i < 40; i++) {
        int r = i % 4;
        snprintf(name, sizeof name, "race-%d", r);
        uint64_t token = atomic_fetch_add(&a->next_token[r], 1) + 1;
        store_status st = store_write(a->s, name, token, "x", 1, NULL, 1000000, &res);
        if (st != STORE_ACCEPTED && (st != STORE_STALE || res.highest_token <= token)) {
            print_error("write %s %llu: %s\n", name, (unsigned long long)token,
                        store_status_name(st));
            a->errors++;
        }
        uint64_t g = atomic_fetch_add(&a->next_grant[r], 1) + 1;
        st = store_grant(a->s, name, g, &hi);
        if (st != STORE_OK && (st != STORE_STALE || hi < g)) {
            print_error("grant %s %llu: %s\n", name, (unsigned long long)g,
                        store_status_name(st));
            a->errors++;
        }
    }
    return NULL;
}

static void test_two_stores_race(void **state)
{
    st_fixture *f = *state;
    store *b = NULL;
    _Atomic uint64_t next_token[4] = {0}, next_grant[4] = {0};
    pthread_t t[16];
    race_arg args[16];

    open_url(&b, f->url);
    for (int i = 0; i < 16; i++) {
        args[i] = (race_arg){i % 2 ? b : f->s, next_token, next_grant, 0};
        pthread_create(&t[i], NULL, race_worker, &args[i]);
    }
    for (int i = 0; i < 16; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(args[i].errors, 0);
    }
    for (int r = 0; r < 4; r++) {
        char name[16];
        uint64_t hi = 0;
        snprintf(name, sizeof name, "race-%d", r);
        assert_st(store_grant(b, name, atomic_load(&next_grant[r]), &hi), STORE_STALE);
        assert_int_equal(hi, atomic_load(&next_grant[r]));
    }
    store_close(b);
}

/* Unix socket URL, as libpq reads it. */
static void test_socket_url(void **state)
{
    st_fixture *f = *state;
    char url[600], want[600], d[600];
    store *s = NULL;
    store_write_result res;

    snprintf(url, sizeof url, "postgres:///%s?host=%s&port=%d&user=postgres", f->db,
             st_pg->dir, st_pg->port);
    open_url(&s, url);
    snprintf(want, sizeof want, "postgresql://postgres@/%s?host=%s&port=%d", f->db, st_pg->dir,
             st_pg->port);
    assert_string_equal(store_describe(s, d, sizeof d), want);
    assert_st(store_write(s, "sock", 1, "x", 1, NULL, 1, &res), STORE_ACCEPTED);
    store_close(s);
}

typedef struct open_arg {
    const char *url;
    store_status st;
    char err[512];
} open_arg;

static void *open_worker(void *p)
{
    open_arg *a = p;
    store *s = NULL;
    store_options o;
    store_options_init(&o);
    o.url = a->url;
    a->st = store_open(&s, &o, a->err, sizeof a->err);
    store_close(s);
    return NULL;
}

/* Gateways starting together on an empty database: the schema is made once. */
static void test_concurrent_migration(void **state)
{
    (void)state;
    st_fixture g;
    pthread_t t[6];
    open_arg args[6];

    memset(&g, 0, sizeof g);
    assert_int_equal(st_new_db(&g), 0);
    for (int i = 0; i < 6; i++) {
        args[i].url = g.url;
        pthread_create(&t[i], NULL, open_worker, &args[i]);
    }
    for (int i = 0; i < 6; i++) {
        pthread_join(t[i], NULL);
        if (args[i].st != STORE_OK) {
            fail_msg("open %d: %s: %s", i, store_status_name(args[i].st), args[i].err);
        }
    }
    PGconn *conn = PQconnectdb(g.url);
    assert_int_equal(PQstatus(conn), CONNECTION_OK);
    PGresult *res = PQexec(conn, "SELECT count(*), max(version) FROM fencegate_schema_version");
    assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
    /* v1 tables, v2 ledger holder, v3 shared marks */
    assert_string_equal(PQgetvalue(res, 0, 0), "3");
    assert_string_equal(PQgetvalue(res, 0, 1), "3");
    PQclear(res);
    /* A database made before the shared marks (version 2, a resource written) gets them at
     * the next open, and they refuse writes. */
    PQclear(PQexec(conn, "ALTER TABLE fencegate_resources DROP COLUMN shared_mark;"
                         "DELETE FROM fencegate_schema_version WHERE version = 3;"
                         "INSERT INTO fencegate_resources VALUES ('old', 4, 4, 'v', '', 1, 0,"
                         " false)"));
    store *s = NULL;
    store_options o;
    char err[512];
    store_options_init(&o);
    o.url = g.url;
    assert_st(store_open(&s, &o, err, sizeof err), STORE_OK);
    store_grant_req gr = {.resource = "old", .token = 4, .shared = 1};
    store_grant_req *one[1] = {&gr};
    store_grant_many(s, one, 1, NULL, 0);
    assert_st(gr.status, STORE_OK);
    store_write_result wres;
    assert_st(store_write(s, "old", 4, "x", 1, NULL, 4, &wres), STORE_NOT_EXCLUSIVE);
    assert_int_equal(wres.shared_mark, 4);
    store_close(s);
    /* A schema newer than this code is refused, not used. */
    PQclear(PQexec(conn, "INSERT INTO fencegate_schema_version (version) VALUES (99)"));
    PQfinish(conn);
    open_worker(&args[0]);
    assert_st(args[0].st, STORE_INVALID);
    assert_non_null(strstr(args[0].err, "newer"));
    st_drop_db(&g);
}

/* err must not hold the password, nor the wrong one a URL tried. */
static void assert_no_password(const char *text, const char *wrong)
{
    if (strstr(text, st_pg->password) != NULL || (wrong != NULL && strstr(text, wrong))) {
        fail_msg("a password shows in: %s", text);
    }
}

static void test_password_never_shown(void **state)
{
    st_fixture *f = *state;
    char url[600], err[512], d[512];
    store *s = NULL;
    store_options o;
    unsigned char sec[STORE_SECRET_LEN];

    store_describe(f->s, d, sizeof d);
    assert_no_password(d, NULL);
    store_options_init(&o);
    o.timeout_ms = 2000;
    o.url = url;
    /* Wrong password: the server refuses. */
    snprintf(url, sizeof url, "postgresql://postgres:Wr0ngSecret@127.0.0.1:%d/%s", st_pg->port,
             f->db);
    assert_st(store_open(&s, &o, err, sizeof err), STORE_EIO);
    print_message("wrong password: %s\n", err);
    assert_non_null(strstr(err, "password authentication failed"));
    assert_no_password(err, "Wr0ngSecret");
    /* Nobody listening. */
    snprintf(url, sizeof url, "postgresql://postgres:%s@127.0.0.1:%d/%s", st_pg->password,
             th_free_port(), f->db);
    assert_st(store_open(&s, &o, err, sizeof err), STORE_EIO);
    assert_no_password(err, NULL);
    /* A database that does not exist: the server's message names it, not the password. */
    snprintf(url, sizeof url, "postgresql://postgres:%s@127.0.0.1:%d/nodb_here",
             st_pg->password, st_pg->port);
    assert_st(store_open(&s, &o, err, sizeof err), STORE_EIO);
    assert_no_password(err, NULL);
    /* A URL libpq cannot parse is not echoed. */
    snprintf(url, sizeof url, "postgresql://postgres:%s@127.0.0.1:%d/db?nosuchoption=1",
             st_pg->password, st_pg->port);
    assert_st(store_open(&s, &o, err, sizeof err), STORE_INVALID);
    assert_no_password(err, NULL);
    /* A password that is also a word of libpq's messages is still scrubbed. */
    assert_st(store_secret(f->s, sec, err, sizeof err), STORE_OK);
    assert_null(s);
}

/* One request of a batch fails in the server (here a constraint only the server checks,
 * the one way a real server can be made to fail one statement): the pipeline aborts the
 * transaction, and the others are replayed alone, each answered as if it had been alone. */
static void test_one_failing_statement_spares_the_batch(void **state)
{
    st_fixture *f = *state;
    PGconn *conn = PQconnectdb(f->url);
    assert_int_equal(PQstatus(conn), CONNECTION_OK);
    PGresult *res = PQexec(conn, "ALTER TABLE fencegate_resources ADD CONSTRAINT fg_poison "
                                 "CHECK (resource <> 'poison')");
    assert_int_equal(PQresultStatus(res), PGRES_COMMAND_OK);
    PQclear(res);
    PQfinish(conn);

    store_write_req w[] = {
        {.resource = "ok-a", .token = 1, .data = "a1", .len = 2, .last_issued = 5},
        {.resource = "poison", .token = 1, .data = "p", .len = 1, .last_issued = 5},
        {.resource = "ok-b", .token = 2, .data = "b", .len = 1, .last_issued = 5},
        {.resource = "ok-a", .token = 2, .data = "a2", .len = 2, .last_issued = 5},
        {.resource = "ok-b", .token = 1, .data = "b1", .len = 2, .last_issued = 5},
    };
    store_write_req *reqs[5];
    for (int i = 0; i < 5; i++) {
        reqs[i] = &w[i];
    }
    store_write_many(f->s, reqs, 5);
    assert_st(w[0].status, STORE_ACCEPTED);
    assert_int_equal(w[0].res.version, 1);
    assert_st(w[1].status, STORE_EIO);
    assert_st(w[2].status, STORE_ACCEPTED);
    assert_st(w[3].status, STORE_ACCEPTED);
    assert_int_equal(w[3].res.version, 2);
    assert_st(w[4].status, STORE_STALE);
    assert_int_equal(w[4].res.highest_token, 2);
    uint64_t hi = 9;
    assert_st(store_highest(f->s, "poison", &hi), STORE_OK);
    assert_int_equal(hi, 0);
    store_value v;
    assert_st(store_read(f->s, "ok-a", &v), STORE_OK);
    assert_memory_equal(v.data, "a2", 2);
    store_value_free(&v);
}

/* Writes until ACCEPTED or the deadline: the database is coming back. */
static store_status write_until_back(store *s, const char *name, uint64_t token)
{
    store_write_result res;
    store_status st = STORE_EIO;
    int64_t deadline = th_now_ms() + 30000;
    while (th_now_ms() < deadline) {
        st = store_write(s, name, token, "back", 4, NULL, token, &res);
        if (st != STORE_EIO && st != STORE_IN_DOUBT) {
            break;
        }
        th_nap_ms(50);
    }
    return st;
}

/* A frozen server (every process stopped, its sockets still open: nothing ever answers and
 * TCP does not notice) makes calls answer within about timeout_ms, not hang. The write's
 * COMMIT went out before the freeze was noticed: it answers IN_DOUBT, and it is made once
 * the server runs again (it reads what the socket holds before its end). The grant, on a
 * connection that cannot be opened, never reached the server: EIO. */
static void test_frozen_database_is_bounded(void **state)
{
    st_fixture *f = *state;
    store *s = NULL;
    store_options o;
    store_write_result res;
    char err[512];
    uint64_t hi = 0;

    store_options_init(&o);
    o.url = f->url;
    o.timeout_ms = 1000;
    assert_st(store_open(&s, &o, err, sizeof err), STORE_OK);
    assert_st(store_write(s, "frozen", 1, "x", 1, NULL, 1, &res), STORE_ACCEPTED);
    th_pg_signal(st_pg, SIGSTOP);
    int64_t start = th_now_ms();
    store_status w = store_write(s, "frozen", 2, "y", 1, NULL, 2, &res);
    int64_t t_write = th_now_ms() - start;
    start = th_now_ms();
    store_status g = store_grant(s, "frozen", 2, &hi);
    int64_t t_grant = th_now_ms() - start;
    th_pg_signal(st_pg, SIGCONT);
    print_message("frozen: write %s in %lld ms, grant %s in %lld ms\n", store_status_name(w),
                  (long long)t_write, store_status_name(g), (long long)t_grant);
    assert_st(w, STORE_IN_DOUBT);
    assert_st(g, STORE_EIO);
    /* 1 s for the round trip; a reconnect waits for libpq's connect_timeout (2 s at least). */
    assert_true(t_write < 4000);
    assert_true(t_grant < 4000);
    int64_t deadline = th_now_ms() + 30000;
    store_value v = {0};
    while (store_read(s, "frozen", &v) != STORE_OK || v.token != 2) {
        store_value_free(&v);
        if (th_now_ms() > deadline) {
            fail_msg("the write answered IN_DOUBT was never made");
        }
        th_nap_ms(20);
    }
    assert_memory_equal(v.data, "y", 1);
    store_value_free(&v);
    assert_st(write_until_back(s, "frozen", 3), STORE_ACCEPTED);
    store_close(s);
}

/* Every call answers EIO within a bound while the database is down. */
static void assert_down(st_fixture *f)
{
    store_write_result res;
    store_value v;
    uint64_t hi = 0;
    size_t n = 0;
    store_entry e[2];
    unsigned char sec[STORE_SECRET_LEN];
    char err[512] = "";

    int64_t start = th_now_ms();
    assert_st(store_write(f->s, "crash", 50, "x", 1, NULL, 50, &res), STORE_EIO);
    assert_st(store_grant(f->s, "crash", 50, &hi), STORE_EIO);
    assert_st(store_read(f->s, "crash", &v), STORE_EIO);
    assert_st(store_highest(f->s, "crash", &hi), STORE_EIO);
    assert_st(store_list(f->s, NULL, e, 2, &n), STORE_EIO);
    assert_st(store_delete(f->s, "crash"), STORE_EIO);
    assert_st(store_secret(f->s, sec, err, sizeof err), STORE_EIO);
    assert_no_password(err, NULL);
    int64_t took = th_now_ms() - start;
    print_message("7 calls against a stopped database took %lld ms\n", (long long)took);
    assert_true(took < 7 * (f->opts.timeout_ms + 2000));
}

/* PostgreSQL stopped (immediate) and killed -9: calls fail with EIO in bounded time, then the
 * same store works again once the database is back, and nothing acknowledged is lost. */
static void test_restart_and_crash(void **state)
{
    st_fixture *f = *state;
    store_write_result res;
    store_value v;

    assert_st(store_write(f->s, "crash", 1, "one", 3, NULL, 1, &res), STORE_ACCEPTED);
    th_pg_stop_immediate(st_pg);
    assert_down(f);
    th_pg_restart(st_pg);
    assert_st(write_until_back(f->s, "crash", 2), STORE_ACCEPTED);
    assert_st(store_read(f->s, "crash", &v), STORE_OK);
    assert_int_equal(v.version, 2);
    store_value_free(&v);

    th_pg_kill(st_pg);
    assert_down(f);
    th_pg_restart(st_pg);
    assert_st(write_until_back(f->s, "crash", 3), STORE_ACCEPTED);
    assert_st(store_read(f->s, "crash", &v), STORE_OK);
    assert_int_equal(v.version, 3);
    assert_memory_equal(v.data, "back", 4);
    store_value_free(&v);
    uint64_t hi = 0;
    assert_st(store_grant(f->s, "crash", 1, &hi), STORE_OK);
}

/* A restart with no call in between: the pooled sessions the old server closed are seen
 * closed and replaced before use, so the first calls after it succeed (none is sent into a
 * closed socket, which would fail it, or leave a write in doubt). */
static void test_first_calls_after_restart_succeed(void **state)
{
    st_fixture *f = *state;
    store_write_result res;
    store_value v;

    assert_st(store_write(f->s, "restart", 1, "one", 3, NULL, 1, &res), STORE_ACCEPTED);
    th_pg_stop_immediate(st_pg);
    th_pg_restart(st_pg);
    assert_st(store_write(f->s, "restart", 2, "two", 3, NULL, 2, &res), STORE_ACCEPTED);
    assert_st(store_read(f->s, "restart", &v), STORE_OK);
    assert_memory_equal(v.data, "two", 3);
    store_value_free(&v);
}

#define CRASH_WRITERS 8

typedef struct crash_arg {
    store *s;
    int id;
    _Atomic int *stop;
    uint64_t acked_token;     /* the last token answered ACCEPTED */
    uint64_t acked_version;
    int bad;                  /* answers other than ACCEPTED, EIO or IN_DOUBT */
} crash_arg;

static void *crash_writer(void *p)
{
    crash_arg *a = p;
    char name[32];
    store_write_result res;
    snprintf(name, sizeof name, "kill9-%d", a->id);
    for (uint64_t token = 1; !atomic_load(a->stop); token++) {
        store_status st = store_write(a->s, name, token, "v", 1, NULL, token, &res);
        if (st == STORE_ACCEPTED) {
            a->acked_token = token;
            a->acked_version = res.version;
        } else if (st != STORE_EIO && st != STORE_IN_DOUBT) {
            a->bad++;
        }
    }
    return NULL;
}

/* kill -9 of the server while 8 threads write: every write answered ACCEPTED is there after
 * the restart (the answer came only after its COMMIT's WAL flush). */
static void test_kill9_loses_no_acknowledged_write(void **state)
{
    st_fixture *f = *state;
    pthread_t t[CRASH_WRITERS];
    crash_arg args[CRASH_WRITERS];
    _Atomic int stop = 0;

    for (int i = 0; i < CRASH_WRITERS; i++) {
        args[i] = (crash_arg){.s = f->s, .id = i, .stop = &stop};
        pthread_create(&t[i], NULL, crash_writer, &args[i]);
    }
    th_nap_ms(300); /* a window of writes to land the kill in, not a synchronisation */
    /* The whole server at once, backends too: what a backend had not yet written to the
     * WAL is gone. (The kernel's page cache survives any process crash; a power loss is
     * beyond a test, and synchronous_commit is what covers it.) */
    th_pg_kill(st_pg);
    atomic_store(&stop, 1);
    for (int i = 0; i < CRASH_WRITERS; i++) {
        pthread_join(t[i], NULL);
    }
    th_pg_restart(st_pg);
    assert_st(write_until_back(f->s, "kill9-probe", 1), STORE_ACCEPTED);
    for (int i = 0; i < CRASH_WRITERS; i++) {
        char name[32];
        store_value v;
        snprintf(name, sizeof name, "kill9-%d", i);
        assert_int_equal(args[i].bad, 0);
        assert_true(args[i].acked_token > 0);
        assert_st(store_read(f->s, name, &v), STORE_OK);
        /* An unacknowledged write may have committed too: at least, never less. */
        assert_true(v.highest_token >= args[i].acked_token);
        assert_true(v.version >= args[i].acked_version);
        store_value_free(&v);
    }
}

int main(int argc, char **argv)
{
    (void)argc;
    const struct CMUnitTest pg_only[] = {
        cmocka_unit_test_setup_teardown(test_many_threads_share_commits, st_setup, st_teardown),
        cmocka_unit_test_setup_teardown(test_two_stores_share_one_database, st_setup,
                                        st_teardown),
        cmocka_unit_test_setup_teardown(test_two_stores_race, st_setup, st_teardown),
        cmocka_unit_test_setup_teardown(test_socket_url, st_setup, st_teardown),
        cmocka_unit_test(test_concurrent_migration),
        cmocka_unit_test_setup_teardown(test_password_never_shown, st_setup, st_teardown),
        cmocka_unit_test_setup_teardown(test_one_failing_statement_spares_the_batch, st_setup,
                                        st_teardown),
        cmocka_unit_test_setup_teardown(test_frozen_database_is_bounded, st_setup, st_teardown),
        /* Last: these stop the server the others share. */
        cmocka_unit_test_setup_teardown(test_restart_and_crash, st_setup, st_teardown),
        cmocka_unit_test_setup_teardown(test_first_calls_after_restart_succeed, st_setup,
                                        st_teardown),
        cmocka_unit_test_setup_teardown(test_kill9_loses_no_acknowledged_write, st_setup,
                                        st_teardown),
    };
    char *pg_argv[] = {argv[0], "pg", NULL};
    return st_main(2, pg_argv, "storage", NULL, 0, NULL, 0, pg_only, ST_COUNT(pg_only));
}
