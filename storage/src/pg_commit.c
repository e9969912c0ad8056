/*
 * PostgreSQL: token-checked writes and grants, group-committed.
 *
 * The batch. Writes and grants queue together for group commit (group.h); each batch the
 * queue's leader hands over runs as one transaction on one connection in libpq pipeline mode,
 * all statements sent at once: BEGIN, one statement per request, COMMIT, Sync. One round trip
 * and one WAL flush serve the batch.
 *
 * Each request is one statement, so the check and the change are atomic in the database
 * whatever other gateways do:
 *  - a write is INSERT ... ON CONFLICT (resource) DO UPDATE ... WHERE r.highest_token <=
 *    excluded.token RETURNING: the row is written only when no higher token has written it,
 *    and only for a token at or below last_issued (checked by the client, passed as a
 *    boolean); a CTE reads the highest in the same statement for the STALE answer when no
 *    row came back;
 *  - a grant is INSERT ... ON CONFLICT (resource) DO UPDATE SET token = excluded.token
 *    WHERE ledger.token < excluded.token RETURNING: granted only above every recorded token;
 *  - a shared mark raises the resource row's shared_mark, and a write's WHERE also requires
 *    r.shared_mark < excluded.token: both take the resource row's lock, so a write is
 *    checked against every mark committed before it, and a mark waits for a write in flight.
 * Inside the transaction each statement sees the ones before it (READ COMMITTED takes a new
 * snapshot per statement), so two requests for one resource in one batch are ordered like two
 * transactions. The statements are sent sorted by (table, resource, arrival): the order per
 * resource is kept, and two gateways' batches lock rows in the same order, so they do not
 * deadlock each other.
 *
 * Answers come only after COMMIT returned (synchronous_commit is on for every session): the
 * WAL of the batch is flushed, so nothing acknowledged can be lost, and no half-written value
 * is ever visible (a transaction is all or nothing). If anything fails:
 *  - 40001/40P01 (serialization failure, deadlock): the whole batch runs again, up to
 *    MAX_ATTEMPTS times; if it still fails, each request runs alone as below, and one that
 *    still fails after its own MAX_ATTEMPTS answers EIO (never an endless loop);
 *  - one statement fails (the pipeline answers PIPELINE_ABORTED for every later one up to
 *    the Sync, and the transaction rolls back): each request is replayed in a transaction of
 *    its own, so one bad request does not fail its neighbours;
 *  - the connection is lost or the deadline passes (database down, restarting, killed):
 *    every request of the batch answers EIO, the connection is dropped and the next call
 *    connects again. When the COMMIT had been sent and no statement had failed, the batch
 *    may have been made: each request answers IN_DOUBT instead, and the caller must not
 *    take it for a refusal.
 *
 * The STALE answer's highest comes from the statement's snapshot, which may predate a
 * commit of another gateway that the conflict check waited for. Highest tokens only grow, so
 * when it reads below the refused token the answer re-reads it after the commit.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_private.h"

#define MAX_ATTEMPTS 5

/* An op is a write (op->w) or a grant (op->g), each answered in place. */
static const char *op_resource(const store__op *op)
{
    return op->w != NULL ? op->w->resource : op->g->resource;
}

static uint64_t op_token(const store__op *op)
{
    return op->w != NULL ? op->w->token : op->g->token;
}

static const char WRITE_SQL[] =
    "WITH up AS ("
    " INSERT INTO fencegate_resources AS r"
    "  (resource, highest_token, token, value, content_type, version, written_at_ms, deleted)"
    " SELECT $1::text, $2::bigint, $2::bigint, $3::bytea, $4::text, 1, $6::bigint,"
    "  $7::boolean WHERE $5::boolean"
    " ON CONFLICT (resource) DO UPDATE SET highest_token = excluded.token,"
    "  token = excluded.token, value = excluded.value, content_type = excluded.content_type,"
    "  version = r.version + 1, written_at_ms = excluded.written_at_ms,"
    "  deleted = excluded.deleted"
    "  WHERE r.highest_token <= excluded.token AND r.shared_mark < excluded.token"
    " RETURNING r.version, r.highest_token)"
    " SELECT true, version, highest_token, 0::bigint FROM up"
    " UNION ALL SELECT false, 0, coalesce(h.highest_token, 0), coalesce(h.shared_mark, 0)"
    "  FROM (SELECT 1) one LEFT JOIN fencegate_resources h ON h.resource = $1::text"
    "  WHERE NOT EXISTS (SELECT 1 FROM up)";

/* A shared mark: raises the resource's shared_mark to the token under the row's lock (a row
 * of version 0 and highest 0 for a resource never written), so a write of the same row
 * either committed before it or is checked against it. */
static const char MARK_SQL[] =
    "WITH m AS ("
    " INSERT INTO fencegate_resources AS r"
    "  (resource, highest_token, token, value, content_type, version, written_at_ms, deleted,"
    "   shared_mark)"
    " VALUES ($1::text, 0, 0, ''::bytea, '', 0, 0, true, $2::bigint)"
    " ON CONFLICT (resource) DO UPDATE SET shared_mark = excluded.shared_mark"
    "  WHERE r.shared_mark < excluded.shared_mark"
    " RETURNING 1)"
    " SELECT true, count(*) FROM m";

static const char GRANT_SQL[] =
    "WITH g AS ("
    " INSERT INTO fencegate_ledger AS l (resource, token, holder)"
    "  VALUES ($1::text, $2::bigint, $3::bytea)"
    " ON CONFLICT (resource) DO UPDATE SET token = excluded.token, holder = excluded.holder"
    "  WHERE l.token < excluded.token"
    "   OR (l.token = excluded.token AND l.holder = excluded.holder)"
    " RETURNING l.token)"
    " SELECT true, token FROM g"
    " UNION ALL SELECT false, coalesce((SELECT token FROM fencegate_ledger"
    "  WHERE resource = $1::text), 0) WHERE NOT EXISTS (SELECT 1 FROM g)";

/* 1 for an op on fencegate_ledger (a grant), 0 for one on fencegate_resources (a write or a
 * shared mark). */
static int op_table(const store__op *op)
{
    return op->w == NULL && !op->g->shared;
}

/* Sending order: writes and shared marks before grants (by table), then by resource in byte
 * order, then arrival. */
static int by_lock_order(const void *x, const void *y)
{
    const store__op *a = *(store__op *const *)x, *b = *(store__op *const *)y;
    if (op_table(a) != op_table(b)) {
        return op_table(a) - op_table(b);
    }
    int c = strcmp(op_resource(a), op_resource(b));
    if (c != 0) {
        return c;
    }
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* Sets the answer of op to st (a failure: nothing of it happened). */
static void fail_op(store__op *op, store_status st)
{
    if (op->w != NULL) {
        op->w->status = st;
        memset(&op->w->res, 0, sizeof op->w->res);
    } else {
        op->g->status = st;
        op->g->highest = 0;
    }
}

/* Queues op's statement in the pipeline (prepared once per session: parsing and planning
 * the statements cost more than running them). 0, or -1 when libpq refused it. */
static int send_op(PGconn *conn, store__op *op)
{
    char token[24], now[24];
    snprintf(token, sizeof token, "%llu", (unsigned long long)op_token(op));
    if (op->w == NULL && op->g->shared) {
        const char *const vals[] = {op->g->resource, token};
        return PQsendQueryPrepared(conn, "fg_mark", 2, vals, NULL, NULL, 0) ? 0 : -1;
    }
    if (op->w == NULL) {
        /* No holder is SQL NULL, which equals nothing: only a larger token is granted. */
        const char *const vals[] = {op->g->resource, token, (const char *)op->g->holder};
        const int lens[] = {0, 0, STORE_HOLDER_LEN};
        const int fmts[] = {0, 0, 1};
        return PQsendQueryPrepared(conn, "fg_grant", 3, vals, lens, fmts, 0) ? 0 : -1;
    }
    const store_write_req *w = op->w;
    snprintf(now, sizeof now, "%lld", (long long)store__wall_ms());
    /* User bytes only ever travel as parameters; the value as binary bytea. A delete is a
     * write of an empty value marked deleted: the same statement, so the same check. */
    const char *const vals[] = {w->resource, token,
                                !w->del && w->data != NULL ? w->data : "",
                                !w->del && w->content_type != NULL ? w->content_type : "",
                                w->token <= w->last_issued ? "t" : "f", now,
                                w->del ? "t" : "f"};
    const int lens[] = {0, 0, w->del ? 0 : (int)w->len, 0, 0, 0, 0};
    const int fmts[] = {0, 0, 1, 0, 0, 0, 0};
    return PQsendQueryPrepared(conn, "fg_write", 7, vals, lens, fmts, 0) ? 0 : -1;
}

/* Reads op's answer from its result row (not yet final: the commit decides). */
static void take_row(store__op *op, const PGresult *res)
{
    if (op->w == NULL && op->g->shared) {
        op->g->status = STORE_OK; /* raised, or at or above the token already */
        return;
    }
    int hit = PQntuples(res) == 1 && PQgetvalue(res, 0, 0)[0] == 't';
    if (op->w == NULL) {
        uint64_t recorded = PQntuples(res) == 1 ? strtoull(PQgetvalue(res, 0, 1), NULL, 10) : 0;
        op->g->status = hit ? STORE_OK : STORE_STALE;
        op->g->highest = hit ? 0 : recorded;
        return;
    }
    store_write_req *w = op->w;
    uint64_t version = PQntuples(res) == 1 ? strtoull(PQgetvalue(res, 0, 1), NULL, 10) : 0;
    uint64_t highest = PQntuples(res) == 1 ? strtoull(PQgetvalue(res, 0, 2), NULL, 10) : 0;
    uint64_t mark = PQntuples(res) == 1 ? strtoull(PQgetvalue(res, 0, 3), NULL, 10) : 0;
    memset(&w->res, 0, sizeof w->res);
    w->res.highest_token = highest;
    if (hit) {
        w->status = STORE_ACCEPTED;
        w->res.version = version;
    } else if (w->token >= highest && w->token <= w->last_issued && w->token <= mark) {
        w->status = STORE_NOT_EXCLUSIVE;
        w->res.shared_mark = mark;
    } else if (w->token <= w->last_issued || w->token < highest) {
        /* Fenced by the WHERE, or below the highest although never issued: stale first. */
        w->status = STORE_STALE;
    } else {
        w->status = STORE_UNKNOWN_TOKEN;
    }
}

/* The results of one pipelined query: the first non-NULL result (caller PQclear()s) up to
 * the NULL that ends it. NULL with *lost set on a lost connection or timeout. */
static PGresult *query_result(PGconn *conn, int64_t deadline, int *lost)
{
    PGresult *first = NULL;
    for (;;) {
        PGresult *res = store__pg_next(conn, deadline, lost);
        if (res == NULL) {
            break;
        }
        if (first == NULL) {
            first = res;
        } else {
            PQclear(res);
        }
    }
    if (*lost) {
        PQclear(first);
        return NULL;
    }
    return first;
}

/* Records the SQLSTATE of a failed result into sqlstate (the first failure wins) and
 * returns the matching round-trip code. */
static store__pgrc failed(const PGresult *res, char *sqlstate)
{
    const char *state = res != NULL ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    if (sqlstate[0] == '\0') {
        snprintf(sqlstate, 6, "%s", state != NULL ? state : "XX000");
    }
    return strcmp(sqlstate, "40001") == 0 || strcmp(sqlstate, "40P01") == 0 ? STORE__PG_RETRY
                                                                             : STORE__PG_SQL;
}

/* A transaction's last statement: the tokens the shared ledger has granted for its
 * resources, their rows locked (in name order, as every batch locks them) until the commit,
 * so that no grant of a larger token can be recorded, handed out and followed by a read of
 * the old values between this check and the commit. 0, or -1 when libpq refused it. */
static int send_ledger_read(PGconn *conn, store__op **ops, size_t n)
{
    /* Names are [A-Za-z0-9._:-]: an array literal needs no quoting for them. */
    char names[STORE_TXN_MAX * (FG_RESOURCE_MAX + 1) + 3];
    size_t used = 0;
    names[used++] = '{';
    for (size_t i = 0; i < n; i++) {
        used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", i > 0 ? "," : "",
                                 ops[i]->w->resource);
    }
    snprintf(names + used, sizeof names - used, "}");
    const char *const vals[] = {names};
    return PQsendQueryParams(conn,
                             "SELECT resource, token FROM fencegate_ledger WHERE resource ="
                             " ANY($1::text[]) ORDER BY resource FOR SHARE",
                             1, NULL, vals, NULL, NULL, 0)
               ? 0
               : -1;
}

/* A transaction's write whose token is below one the ledger has granted since is refused
 * as stale (its lease is over: the token was superseded), with the granted token as its
 * highest; res holds the rows of send_ledger_read. */
static void fence_by_ledger(store__op **ops, size_t n, const PGresult *res)
{
    for (int row = 0; row < PQntuples(res); row++) {
        uint64_t granted = strtoull(PQgetvalue(res, row, 1), NULL, 10);
        for (size_t i = 0; i < n; i++) {
            store_write_req *w = ops[i]->w;
            if (strcmp(w->resource, PQgetvalue(res, row, 0)) == 0 && granted > w->token) {
                w->status = STORE_STALE;
                w->res.version = 0;
                w->res.highest_token = granted;
            }
        }
    }
}

/* What became of a pipeline's COMMIT, as far as the store knows. */
typedef enum commit_fate {
    COMMIT_NONE, /* none sent, or it cannot have made anything (refused, or doomed by a
                    failed statement) */
    COMMIT_SENT, /* it may have reached the database, and no answer came: in doubt */
    COMMIT_MADE  /* answered OK */
} commit_fate;

/* Step 1 of run_pipeline: sends the three statements' Parse when this session has not yet
 * (prepares 3), BEGIN, every statement, COMMIT (unless commit is 0: a transaction whose
 * commit waits for its rows) and a Sync. 0, or -1 when the connection failed. The
 * statements are flushed before the COMMIT is queued, so a deadline that passes while they
 * are still queued here leaves nothing in doubt; from the COMMIT on, *fate is SENT. */
static int send_pipeline(PGconn *conn, store__op **ops, size_t n, size_t prepares,
                         int commit, int64_t deadline, commit_fate *fate)
{
    if (!PQenterPipelineMode(conn)) {
        return -1;
    }
    if (prepares > 0 && (!PQsendPrepare(conn, "fg_write", WRITE_SQL, 7, NULL) ||
                         !PQsendPrepare(conn, "fg_grant", GRANT_SQL, 3, NULL) ||
                         !PQsendPrepare(conn, "fg_mark", MARK_SQL, 2, NULL))) {
        return -1;
    }
    if (!PQsendQueryParams(conn, "BEGIN", 0, NULL, NULL, NULL, NULL, 0)) {
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (send_op(conn, ops[i]) != 0) {
            return -1;
        }
    }
    if (!commit && send_ledger_read(conn, ops, n) != 0) {
        return -1;
    }
    if (commit) {
        if (store__pg_flush(conn, deadline) != 0 ||
            !PQsendQueryParams(conn, "COMMIT", 0, NULL, NULL, NULL, NULL, 0)) {
            return -1;
        }
        *fate = COMMIT_SENT;
    }
    if (!PQpipelineSync(conn) || store__pg_flush(conn, deadline) != 0) {
        return -1;
    }
    return 0;
}

/* Step 2: reads the `count` query results in order; the one at index i in [first, first + n)
 * is ops[i - first]'s row. The first failure sets rc (and sqlstate); queries after it answer
 * PIPELINE_ABORTED. Sets *lost on a lost connection or timeout. */
static store__pgrc read_results(PGconn *conn, store__op **ops, size_t n, size_t first,
                                size_t count, int64_t deadline, char *sqlstate,
                                store__pgrc rc, int *lost)
{
    for (size_t i = 0; i < count && !*lost; i++) {
        PGresult *res = query_result(conn, deadline, lost);
        if (res == NULL) {
            break;
        }
        ExecStatusType es = PQresultStatus(res);
        if (es == PGRES_FATAL_ERROR) {
            rc = rc == STORE__PG_OK ? failed(res, sqlstate) : rc;
        } else if (es == PGRES_PIPELINE_ABORTED) {
            rc = rc == STORE__PG_OK ? STORE__PG_SQL : rc;
        } else if (i >= first && i < first + n && es == PGRES_TUPLES_OK) {
            take_row(ops[i - first], res);
        }
        PQclear(res);
    }
    return rc;
}

/* Step 3: reads the Sync, leaves pipeline mode and ends a transaction left open: an error
 * left it aborted until ROLLBACK; a transaction's rows are in and commit says what to do
 * with them, in a round trip of its own (timeout_ms). 0, or -1 when the connection failed.
 * Updates *fate for the COMMIT it sends; one the database refuses (a serialization failure
 * at commit, say) sets *rc from its error, and the connection is kept. */
static int finish_pipeline(PGconn *conn, int commit, int64_t deadline, int timeout_ms,
                           commit_fate *fate, store__pgrc *rc, char *sqlstate)
{
    int lost = 0;
    PGresult *res = store__pg_next(conn, deadline, &lost);
    int ok = res != NULL && PQresultStatus(res) == PGRES_PIPELINE_SYNC;
    PQclear(res);
    if (!ok || !PQexitPipelineMode(conn)) {
        return -1;
    }
    if (PQtransactionStatus(conn) == PQTRANS_IDLE) {
        return 0;
    }
    commit = commit && PQtransactionStatus(conn) == PQTRANS_INTRANS;
    if (!PQsendQuery(conn, commit ? "COMMIT" : "ROLLBACK")) {
        return -1;
    }
    *fate = commit ? COMMIT_SENT : *fate;
    deadline = store__pg_now_ms() + timeout_ms;
    if (store__pg_flush(conn, deadline) != 0) {
        return -1;
    }
    while ((res = store__pg_next(conn, deadline, &lost)) != NULL) {
        ExecStatusType es = PQresultStatus(res);
        if (es == PGRES_COMMAND_OK) {
            *fate = commit ? COMMIT_MADE : *fate;
        } else if (commit && es == PGRES_FATAL_ERROR && PQstatus(conn) == CONNECTION_OK) {
            *fate = COMMIT_NONE; /* refused: rolled back */
            *rc = failed(res, sqlstate);
        } else {
            ok = 0;
        }
        PQclear(res);
    }
    return ok && !lost ? 0 : -1;
}

/*
 * Runs ops[0..n) as one pipelined transaction on c, in the three steps above. Every op first
 * gets EIO, replaced by its row's answer, so none is left unanswered. Returns OK only when
 * COMMIT succeeded (the connection may be gone after it: c->conn is then NULL); otherwise
 * RETRY/SQL (sqlstate set), or LOST or IN_DOUBT (drop the connection): IN_DOUBT when a
 * COMMIT may have reached the database and no answer said what became of it.
 * t: ops are t's writes, and COMMIT is sent only once their rows show that every write
 * passed (store__txn_verdict); otherwise the transaction rolls back, and OK means the
 * refusal is t's answer.
 */
static store__pgrc run_pipeline(store__pg *p, store__pgconn *c, store__op **ops, size_t n,
                                store_txn *t, char *sqlstate)
{
    int64_t deadline = store__pg_now_ms() + p->timeout_ms;
    size_t prepares = c->prepared ? 0 : 3;
    int lost = 0;
    commit_fate fate = COMMIT_NONE;

    sqlstate[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        fail_op(ops[i], STORE_EIO);
    }
    if (send_pipeline(c->conn, ops, n, prepares, t == NULL, deadline, &fate) != 0) {
        return fate == COMMIT_SENT ? STORE__PG_IN_DOUBT : STORE__PG_LOST;
    }
    store__pgrc rc = read_results(c->conn, ops, 0, 0, prepares, deadline, sqlstate,
                                  STORE__PG_OK, &lost);
    /* Named statements outlive a rolled-back transaction: once parsed, never again. */
    c->prepared = c->prepared || (!lost && rc == STORE__PG_OK);
    /* BEGIN, the n statements (indexes 1..n), then COMMIT, or for t the ledger's rows. */
    rc = read_results(c->conn, ops, n, 1, n + (t == NULL ? 2 : 1), deadline, sqlstate, rc,
                      &lost);
    if (fate == COMMIT_SENT && (rc != STORE__PG_OK || !lost)) {
        /* A failed statement doomed the COMMIT; else every answer was read, its too. */
        fate = rc == STORE__PG_OK ? COMMIT_MADE : COMMIT_NONE;
    }
    if (t != NULL && !lost) {
        PGresult *res = query_result(c->conn, deadline, &lost);
        if (res != NULL && PQresultStatus(res) == PGRES_TUPLES_OK) {
            fence_by_ledger(ops, n, res);
        } else if (res != NULL && rc == STORE__PG_OK) {
            rc = PQresultStatus(res) == PGRES_FATAL_ERROR ? failed(res, sqlstate)
                                                          : STORE__PG_SQL;
        }
        PQclear(res);
    }
    int commit = t != NULL && !lost && rc == STORE__PG_OK &&
                 store__txn_verdict(t) == STORE_ACCEPTED;
    if (!lost &&
        finish_pipeline(c->conn, commit, deadline, p->timeout_ms, &fate, &rc, sqlstate) == 0) {
        return rc;
    }
    if (fate == COMMIT_MADE) {
        /* Made, and then the connection failed: the answers stand, the session goes. */
        PQfinish(c->conn);
        c->conn = NULL;
        return rc;
    }
    return fate == COMMIT_SENT ? STORE__PG_IN_DOUBT : STORE__PG_LOST;
}

/* After the commit: a STALE answer whose highest, read from the statement's snapshot, is not
 * above the refused token re-reads the highest, which can only have grown since (and, for a
 * write, the shared mark, which may be what refused it). */
static void fix_stale_highest(store__pg *p, store__pgconn *c, store__op *op)
{
    char sqlstate[6];
    store__pgrc rc = STORE__PG_OK;
    int grant = op->w == NULL;
    uint64_t *highest = grant ? &op->g->highest : &op->w->res.highest_token;
    store_status st = grant ? op->g->status : op->w->status;

    /* A refused write needs highest > token, a refused grant highest >= token. */
    if (st != STORE_STALE || *highest > op_token(op) - (grant ? 1 : 0)) {
        return;
    }
    if (c->conn == NULL) {
        fail_op(op, STORE_EIO); /* an earlier re-read lost the connection */
        return;
    }
    const char *const vals[] = {op_resource(op)};
    PGresult *res = store__pg_exec(
        p, c,
        grant ? "SELECT token FROM fencegate_ledger WHERE resource = $1"
              : "SELECT highest_token, shared_mark FROM fencegate_resources WHERE resource = $1",
        1, vals, NULL, NULL, 0, &rc, sqlstate);
    if (res != NULL && PQntuples(res) == 1) {
        *highest = strtoull(PQgetvalue(res, 0, 0), NULL, 10);
        uint64_t mark = grant ? 0 : strtoull(PQgetvalue(res, 0, 1), NULL, 10);
        if (!grant && *highest <= op->w->token && mark >= op->w->token) {
            /* Refused by a shared mark committed after the statement's snapshot. */
            op->w->status = STORE_NOT_EXCLUSIVE;
            op->w->res.shared_mark = mark;
        }
    } else {
        fail_op(op, STORE_EIO); /* the refusal stands, but its highest is unknown */
    }
    PQclear(res);
}

static void count_commit(store__counts *counts, store__op **ops, size_t n)
{
    uint64_t writes = 0;
    int accepted = 0;
    for (size_t i = 0; i < n; i++) {
        if (ops[i]->w != NULL) {
            writes++;
            accepted |= ops[i]->w->status == STORE_ACCEPTED;
        }
    }
    store__count_txn(counts, writes, accepted);
}

/* The answer of a batch or transaction that did not commit: a failed statement's status,
 * IN_DOUBT, or EIO. */
static store_status final_status(store__pgrc rc, const char *sqlstate)
{
    return rc == STORE__PG_SQL        ? store__pg_sqlstate_status(sqlstate)
           : rc == STORE__PG_IN_DOUBT ? STORE_IN_DOUBT
                                      : STORE_EIO;
}

/* Runs ops[0..n) (already in lock order) and answers every one of them. */
static void run_ops(store__pg *p, store__op **ops, size_t n, store__counts *counts)
{
    char sqlstate[6] = "";
    store__pgrc rc = STORE__PG_LOST;

    for (int attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
        store__pgconn *c = store__pg_get(p, NULL, 0);
        if (c == NULL) {
            rc = STORE__PG_LOST;
            break;
        }
        rc = run_pipeline(p, c, ops, n, NULL, sqlstate);
        if (rc == STORE__PG_OK) {
            for (size_t i = 0; i < n; i++) {
                fix_stale_highest(p, c, ops[i]);
            }
            store__pg_put(p, c, 0);
            count_commit(counts, ops, n);
            return;
        }
        store__pg_put(p, c, rc == STORE__PG_LOST || rc == STORE__PG_IN_DOUBT);
        if (rc != STORE__PG_RETRY) {
            break;
        }
    }
    if ((rc == STORE__PG_SQL || rc == STORE__PG_RETRY) && n > 1) {
        /* One request failed and took the transaction with it, or the batch kept meeting
         * serialization failures or deadlocks (one request's may never go away, say a
         * trigger's): each runs alone, with retries of its own, so only the one that really
         * fails answers an error. */
        for (size_t i = 0; i < n; i++) {
            run_ops(p, &ops[i], 1, counts);
        }
        return;
    }
    for (size_t i = 0; i < n; i++) {
        fail_op(ops[i], final_status(rc, sqlstate));
    }
}

/* Answers every write of t with st: nothing of it happened (IN_DOUBT: all of it or none). */
static void fail_txn(store_txn *t, store_status st)
{
    t->status = st;
    for (size_t i = 0; i < t->n; i++) {
        t->writes[i]->status = st;
        memset(&t->writes[i]->res, 0, sizeof t->writes[i]->res);
    }
}

/* Runs transaction t in a database transaction of its own: its write statements (the same
 * check as every write) in lock order, then COMMIT when every write passed, else ROLLBACK
 * (run_pipeline). The rows its writes changed stay locked until then, so no other
 * gateway's write slips in between the check and the commit. A serialization failure or
 * deadlock runs it again, up to MAX_ATTEMPTS times; any other failure answers every write
 * with the error, and nothing of it happened (or IN_DOUBT, for a COMMIT whose answer was
 * lost: all of it may have). */
static void run_txn(store__pg *p, store_txn *t, store__counts *counts)
{
    store__op ops[STORE_TXN_MAX];
    store__op *sorted[STORE_TXN_MAX];
    char sqlstate[6] = "";
    store__pgrc rc = STORE__PG_LOST;

    for (size_t i = 0; i < t->n; i++) {
        ops[i] = (store__op){.w = t->writes[i], .seq = i};
        sorted[i] = &ops[i];
    }
    qsort(sorted, t->n, sizeof *sorted, by_lock_order);
    for (int attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
        store__pgconn *c = store__pg_get(p, NULL, 0);
        if (c == NULL) {
            rc = STORE__PG_LOST;
            break;
        }
        rc = run_pipeline(p, c, sorted, t->n, t, sqlstate);
        if (rc == STORE__PG_OK) {
            for (size_t i = 0; i < t->n; i++) {
                fix_stale_highest(p, c, sorted[i]);
            }
            store__pg_put(p, c, 0);
            if (t->status == STORE_ACCEPTED) {
                store__count_txn(counts, t->n, 1);
            } else {
                /* A re-read that failed turned a refusal into EIO: say so for it all. */
                store__txn_verdict(t);
            }
            return;
        }
        store__pg_put(p, c, rc == STORE__PG_LOST || rc == STORE__PG_IN_DOUBT);
        if (rc != STORE__PG_RETRY) {
            break;
        }
    }
    fail_txn(t, final_status(rc, sqlstate));
}

/* Runs a batch list: its writes and grants sorted into lock order, then one transaction;
 * then each transaction in one of its own. */
void store__pg_run_batch(void *impl, store__op *batch, store__counts *counts)
{
    store__pg *p = impl;
    size_t n = 0;
    for (store__op *o = batch; o != NULL; o = o->next) {
        o->seq = n++;
    }
    store__op **ops = malloc((n > 0 ? n : 1) * sizeof *ops);
    if (ops == NULL) {
        for (store__op *o = batch; o != NULL; o = o->next) {
            if (o->t != NULL) {
                fail_txn(o->t, STORE_ENOMEM);
            } else {
                fail_op(o, STORE_ENOMEM);
            }
        }
        return;
    }
    n = 0;
    for (store__op *o = batch; o != NULL; o = o->next) {
        if (o->t == NULL) {
            ops[n++] = o;
        }
    }
    if (n > 0) {
        qsort(ops, n, sizeof *ops, by_lock_order);
        run_ops(p, ops, n, counts);
    }
    free(ops);
    for (store__op *o = batch; o != NULL; o = o->next) {
        if (o->t != NULL) {
            run_txn(p, o->t, counts);
        }
    }
}
