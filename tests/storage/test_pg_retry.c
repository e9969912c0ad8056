/* storage on PostgreSQL: the retries of pg_commit.c, provoked in a real PostgreSQL 15 by a
 * second libpq connection of the test, never faked:
 *   - a deadlock (40P01): the test holds one row of a two-row batch and then asks for the
 *     other, which the store's transaction holds; PostgreSQL aborts the store's transaction
 *     (the test's session waits 60 s before it looks for deadlocks, the store's 1 s), and the
 *     batch runs again and commits both writes;
 *   - a serialization failure (40001): on a SERIALIZABLE database (the default isolation of
 *     CockroachDB, YugabyteDB), the test updates the row the store's transaction waits for
 *     and commits; the store's snapshot is then too old, and the retry commits;
 *   - a failure that never goes away (a trigger that raises 40001 for one resource every
 *     time): the retries stop, that write is reported (EIO), and its neighbour in the batch
 *     is committed all the same.
 *   - a serialization failure raised by the COMMIT itself: refused, not lost, so retried;
 *   - a COMMIT that reaches the server and whose answer is lost: a deferred trigger holds
 *     the commit on the test's advisory lock past the store's deadline (catching the
 *     statement_timeout), so the store answers IN_DOUBT; once the test lets go, the server
 *     makes the change all the same: IN_DOUBT is not a refusal.
 * That the failure really happened is read from the server's own log. The test's connection
 * is the superuser's (deadlock_timeout is a superuser setting). No timing is asserted; every
 * wait is a loop on a condition with a deadline. */
#include <pthread.h>

#include <libpq-fe.h>

#include "st_test.h"

static PGconn *connect_ok(const st_fixture *f)
{
    PGconn *conn = PQconnectdb(f->url);
    if (PQstatus(conn) != CONNECTION_OK) {
        fail_msg("connect: %s", PQerrorMessage(conn));
    }
    return conn;
}

/* Runs sql on conn, which must succeed. */
static void exec_ok(PGconn *conn, const char *sql)
{
    PGresult *res = PQexec(conn, sql);
    ExecStatusType st = PQresultStatus(res);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        fail_msg("%s: %s", sql, PQresultErrorMessage(res));
    }
    PQclear(res);
}

/* The first column of the first row of sql's answer, as a number. */
static long long query_int(PGconn *conn, const char *sql)
{
    PGresult *res = PQexec(conn, sql);
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        fail_msg("%s: %s", sql, PQresultErrorMessage(res));
    }
    long long n = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return n;
}

/* Waits until a session of this test's database waits for a row lock (the store's batch is
 * blocked where the test wants it); fails the test after 30 s. watcher is a connection of its
 * own in autocommit, so every query sees the current activity. */
static void wait_for_lock_waiter(PGconn *watcher)
{
    int64_t deadline = th_now_ms() + 30000;
    while (query_int(watcher, "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                              "current_database() AND wait_event_type = 'Lock'") < 1) {
        if (th_now_ms() > deadline) {
            fail_msg("the store's transaction never waited for the test's row lock");
        }
        th_nap_ms(10);
    }
}

/* A batch written by a thread of its own, since it blocks on the test's locks. */
typedef struct batch_arg {
    store *s;
    store_write_req *reqs[2];
    size_t n;
} batch_arg;

static void *batch_run(void *p)
{
    batch_arg *a = p;
    store_write_many(a->s, a->reqs, a->n);
    return NULL;
}

static store_write_req req(const char *resource, uint64_t token, const char *data)
{
    store_write_req w = {.resource = resource, .token = token, .data = data,
                         .len = strlen(data), .last_issued = token};
    return w;
}

static void write_ok(store *s, const char *resource, uint64_t token)
{
    store_write_result res;
    assert_st(store_write(s, resource, token, "v1", 2, NULL, token, &res), STORE_ACCEPTED);
}

/* Two-row batch in a deadlock with the test's transaction: retried, both writes commit. */
static void test_deadlock_is_retried(void **state)
{
    st_fixture *f = *state;
    write_ok(f->s, "dl-a", 1);
    write_ok(f->s, "dl-b", 1);
    int deadlocks = th_pg_log_count(st_pg, "deadlock detected");
    PGconn *t = connect_ok(f), *watcher = connect_ok(f);

    exec_ok(t, "BEGIN");
    exec_ok(t, "SET LOCAL deadlock_timeout = '60s'"); /* the store's session is the victim */
    exec_ok(t, "SELECT 1 FROM fencegate_resources WHERE resource = 'dl-b' FOR UPDATE");
    /* The batch is sent in resource order: it takes dl-a, then waits for dl-b. */
    store_write_req w[2] = {req("dl-a", 2, "a2"), req("dl-b", 2, "b2")};
    batch_arg a = {f->s, {&w[0], &w[1]}, 2};
    pthread_t th;
    pthread_create(&th, NULL, batch_run, &a);
    wait_for_lock_waiter(watcher);
    /* Now the cycle: the test waits for dl-a, which the store holds. Our session waits
     * until PostgreSQL has aborted the store's transaction, which frees dl-a. */
    exec_ok(t, "SELECT 1 FROM fencegate_resources WHERE resource = 'dl-a' FOR UPDATE");
    exec_ok(t, "COMMIT"); /* the retry, waiting for dl-a now, goes on */
    pthread_join(th, NULL);

    assert_st(w[0].status, STORE_ACCEPTED);
    assert_st(w[1].status, STORE_ACCEPTED);
    assert_int_equal(w[0].res.version, 2);
    assert_int_equal(w[1].res.version, 2);
    assert_true(th_pg_log_count(st_pg, "deadlock detected") > deadlocks);
    store_value v;
    assert_st(store_read(f->s, "dl-b", &v), STORE_OK);
    assert_memory_equal(v.data, "b2", 2);
    store_value_free(&v);
    PQfinish(t);
    PQfinish(watcher);
}

/* On a SERIALIZABLE database, a write whose row another transaction updated and committed
 * while it waited fails with 40001 and is retried on a fresh snapshot. */
static void test_serialization_failure_is_retried(void **state)
{
    st_fixture *f = *state;
    char sql[256];
    PGconn *t = connect_ok(f), *watcher = connect_ok(f);

    snprintf(sql, sizeof sql,
             "ALTER DATABASE %s SET default_transaction_isolation = 'serializable'", f->db);
    exec_ok(t, sql);
    store_close(f->s); /* new sessions take the database's new default */
    st_open(f);
    write_ok(f->s, "ser-a", 1);
    int failures = th_pg_log_count(st_pg, "could not serialize access");

    exec_ok(t, "BEGIN");
    exec_ok(t, "UPDATE fencegate_resources SET highest_token = highest_token "
               "WHERE resource = 'ser-a'");
    store_write_req w[1] = {req("ser-a", 2, "a2")};
    batch_arg a = {f->s, {&w[0]}, 1};
    pthread_t th;
    pthread_create(&th, NULL, batch_run, &a);
    wait_for_lock_waiter(watcher);
    exec_ok(t, "COMMIT");
    pthread_join(th, NULL);

    assert_st(w[0].status, STORE_ACCEPTED);
    assert_int_equal(w[0].res.version, 2);
    assert_true(th_pg_log_count(st_pg, "could not serialize access") > failures);
    PQfinish(t);
    PQfinish(watcher);
}

/* A 40001 that never goes away: the write is reported after a bounded number of attempts
 * (counted by a sequence, which a rollback does not undo), and its neighbour is committed. */
static void test_permanent_failure_is_reported(void **state)
{
    st_fixture *f = *state;
    PGconn *t = connect_ok(f);

    exec_ok(t, "CREATE SEQUENCE fg_test_attempts");
    exec_ok(t, "CREATE FUNCTION fg_test_conflict() RETURNS trigger LANGUAGE plpgsql AS $$ "
               "BEGIN IF NEW.resource = 'perm-bad' THEN "
               "PERFORM nextval('fg_test_attempts'); "
               "RAISE EXCEPTION 'test: always a serialization failure' USING ERRCODE = '40001'; "
               "END IF; RETURN NEW; END $$");
    exec_ok(t, "CREATE TRIGGER fg_test_conflict BEFORE INSERT OR UPDATE ON fencegate_resources "
               "FOR EACH ROW EXECUTE FUNCTION fg_test_conflict()");

    store_write_req w[2] = {req("perm-bad", 1, "bad"), req("perm-ok", 1, "ok")};
    store_write_req *reqs[2] = {&w[0], &w[1]};
    store_write_many(f->s, reqs, 2);
    assert_st(w[0].status, STORE_EIO);
    assert_st(w[1].status, STORE_ACCEPTED);
    long long attempts = query_int(t, "SELECT last_value FROM fg_test_attempts");
    print_message("attempts of the failing write: %lld\n", attempts);
    assert_true(attempts > 1);   /* retried */
    assert_true(attempts <= 10); /* not looped: the batch's tries, then its own */

    store_value v;
    assert_st(store_read(f->s, "perm-ok", &v), STORE_OK);
    assert_memory_equal(v.data, "ok", 2);
    store_value_free(&v);
    assert_st(store_read(f->s, "perm-bad", &v), STORE_NOT_FOUND);
    PQfinish(t);
}

/* A serialization failure raised by the COMMIT itself (a deferred trigger, on the first
 * commit of each resource): the COMMIT is refused, not lost, so it is retried like any other,
 * for a write (its COMMIT pipelined with it) and for a transaction (its COMMIT sent once its
 * rows are in), on the same connection. */
static void test_failure_at_commit_is_retried(void **state)
{
    st_fixture *f = *state;
    PGconn *t = connect_ok(f);

    /* Sequences, since a refused commit rolls back everything else the trigger did. */
    exec_ok(t, "CREATE SEQUENCE fg_test_refuse_w");
    exec_ok(t, "CREATE SEQUENCE fg_test_refuse_a");
    exec_ok(t, "CREATE FUNCTION fg_test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ "
               "BEGIN IF (NEW.resource = 'refuse-w' AND nextval('fg_test_refuse_w') = 1) OR "
               "(NEW.resource = 'refuse-a' AND nextval('fg_test_refuse_a') = 1) THEN "
               "RAISE EXCEPTION 'test: refused at commit' USING ERRCODE = '40001'; "
               "END IF; RETURN NULL; END $$");
    exec_ok(t, "CREATE CONSTRAINT TRIGGER fg_test_refuse AFTER INSERT OR UPDATE ON "
               "fencegate_resources DEFERRABLE INITIALLY DEFERRED FOR EACH ROW "
               "EXECUTE FUNCTION fg_test_refuse()");
    int failures = th_pg_log_count(st_pg, "test: refused at commit");

    store_write_result res;
    assert_st(store_write(f->s, "refuse-w", 1, "w1", 2, NULL, 1, &res), STORE_ACCEPTED);
    store_write_req w[2] = {req("refuse-a", 1, "a1"), req("refuse-b", 1, "b1")};
    store_write_req *ptrs[2] = {&w[0], &w[1]};
    store_txn txn = {.writes = ptrs, .n = 2};
    assert_st(store_transact(f->s, &txn), STORE_ACCEPTED);

    int64_t deadline = th_now_ms() + 30000; /* the server's log is written asynchronously */
    while (th_pg_log_count(st_pg, "test: refused at commit") < failures + 2) {
        if (th_now_ms() > deadline) {
            fail_msg("the server never refused the two commits");
        }
        th_nap_ms(20);
    }
    store_value v;
    assert_st(store_read(f->s, "refuse-b", &v), STORE_OK);
    assert_memory_equal(v.data, "b1", 2);
    store_value_free(&v);
    PQfinish(t);
}

/* A thread's store_transact(), since it blocks on the test's advisory lock. */
typedef struct txn_arg {
    store *s;
    store_txn *t;
} txn_arg;

static void *txn_run(void *p)
{
    txn_arg *a = p;
    store_transact(a->s, a->t);
    return NULL;
}

/* Waits until the value of resource has token; fails the test after 30 s. */
static void wait_for_value(store *s, const char *resource, uint64_t token, const char *data)
{
    int64_t deadline = th_now_ms() + 30000;
    store_value v = {0};
    while (store_read(s, resource, &v) != STORE_OK || v.token != token) {
        store_value_free(&v);
        if (th_now_ms() > deadline) {
            fail_msg("%s: the change answered IN_DOUBT was never made", resource);
        }
        th_nap_ms(20);
    }
    assert_memory_equal(v.data, data, strlen(data));
    store_value_free(&v);
}

/* A write and a transaction whose COMMIT waits past the store's deadline: each answers
 * IN_DOUBT, and each is made once the commit goes on. */
static void test_lost_commit_answer_is_in_doubt(void **state)
{
    st_fixture *f = *state;
    PGconn *t = connect_ok(f), *watcher = connect_ok(f);

    store_close(f->s);
    f->opts.timeout_ms = 1000;
    st_open(f);
    assert_int_equal(th_pg_hold_commits(t, "doubt-", 4242), 0);

    for (int round = 0; round < 2; round++) {
        exec_ok(t, "SELECT pg_advisory_lock(4242)");
        store_write_req w[2] = {req("doubt-a", 5, "a5"), req("doubt-b", 5, "b5")};
        store_write_req *ptrs[2] = {&w[0], &w[1]};
        store_txn txn = {.writes = ptrs, .n = 2};
        batch_arg ba = {f->s, {&w[0]}, 1};
        txn_arg ta = {f->s, &txn};
        pthread_t th;
        /* Round 0: one write (its COMMIT pipelined with it); 1: a transaction (its COMMIT
         * sent once its rows are in). */
        pthread_create(&th, NULL, round == 0 ? batch_run : txn_run,
                       round == 0 ? (void *)&ba : (void *)&ta);
        wait_for_lock_waiter(watcher);
        pthread_join(th, NULL); /* the store's deadline passed */
        if (round == 0) {
            assert_st(w[0].status, STORE_IN_DOUBT);
        } else {
            assert_st(txn.status, STORE_IN_DOUBT);
            assert_st(w[0].status, STORE_IN_DOUBT);
            assert_st(w[1].status, STORE_IN_DOUBT);
        }
        exec_ok(t, "SELECT pg_advisory_unlock(4242)");
        wait_for_value(f->s, "doubt-a", 5, "a5");
        if (round == 1) {
            wait_for_value(f->s, "doubt-b", 5, "b5");
        }
        exec_ok(t, "DELETE FROM fencegate_resources WHERE resource LIKE 'doubt-%'");
    }
    PQfinish(t);
    PQfinish(watcher);
}

int main(int argc, char **argv)
{
    (void)argc;
    const struct CMUnitTest pg_only[] = {
        cmocka_unit_test_setup_teardown(test_deadlock_is_retried, st_setup, st_teardown),
        cmocka_unit_test_setup_teardown(test_serialization_failure_is_retried, st_setup,
                                        st_teardown),
        cmocka_unit_test_setup_teardown(test_permanent_failure_is_reported, st_setup,
                                        st_teardown),
        cmocka_unit_test_setup_teardown(test_failure_at_commit_is_retried, st_setup,
                                        st_teardown),
        cmocka_unit_test_setup_teardown(test_lost_commit_answer_is_in_doubt, st_setup,
                                        st_teardown),
    };
    char *pg_argv[] = {argv[0], "pg", NULL};
    return st_main(2, pg_argv, "storage", NULL, 0, NULL, 0, pg_only, ST_COUNT(pg_only));
}
