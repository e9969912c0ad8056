/*
 * The PostgreSQL schema, created and migrated by store_open().
 *
 *   fencegate_schema_version          one row per applied migration
 *     version       integer PRIMARY KEY
 *     applied_at    timestamptz NOT NULL DEFAULT now()
 *
 *   fencegate_resources               one row per resource ever written (tombstones kept)
 *     resource      text COLLATE "C" PRIMARY KEY   byte order, like LMDB's keys (store_list)
 *     highest_token bigint NOT NULL    the highest token that has written it
 *     token         bigint NOT NULL    the token of the last accepted write
 *     value         bytea NOT NULL     empty for a tombstone
 *     content_type  text NOT NULL      0..255 bytes
 *     version       bigint NOT NULL    +1 for every accepted write and delete
 *     written_at_ms bigint NOT NULL    wall clock of the writing gateway
 *     deleted       boolean NOT NULL   tombstone: value gone, highest_token kept
 *     shared_mark   bigint NOT NULL    (v3) the largest token granted in shared mode; a
 *                                      write at or below it is NOT_EXCLUSIVE. A mark of a
 *                                      resource never written makes a row of version 0 and
 *                                      highest 0, which store_list() does not show
 *
 *   fencegate_ledger                  store_grant(): the highest token granted per resource
 *     resource      text COLLATE "C" PRIMARY KEY
 *     token         bigint NOT NULL
 *     holder        bytea              (v2) keyed hash of the holding owner, NULL for none
 *
 *   fencegate_meta                    store_secret() and any later per-database setting
 *     key           text PRIMARY KEY   'owner.secret'
 *     value         bytea NOT NULL     16 random bytes
 *
 * Migration. One transaction: take pg_advisory_xact_lock(MIGRATION_LOCK), create the version
 * table if missing, read the highest applied version, apply each later migration and record
 * it, commit. The advisory lock makes gateways that start together migrate one after the
 * other: the second finds every version applied and changes nothing, so opening is
 * idempotent. A crash or error before COMMIT applies nothing (DDL is transactional in
 * PostgreSQL). A database whose version is above what this code knows is refused (INVALID)
 * rather than used by code that does not know its meaning.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_private.h"

/* "fencegat" as a number: the one advisory lock key fencegate takes. */
#define MIGRATION_LOCK "7378424937698517364"

static const char *const migrations[] = {
    /* 1: the three tables. */
    "CREATE TABLE fencegate_resources ("
    " resource text COLLATE \"C\" PRIMARY KEY,"
    " highest_token bigint NOT NULL CHECK (highest_token >= 0),"
    " token bigint NOT NULL,"
    " value bytea NOT NULL,"
    " content_type text NOT NULL CHECK (octet_length(content_type) <= 255),"
    " version bigint NOT NULL,"
    " written_at_ms bigint NOT NULL,"
    " deleted boolean NOT NULL DEFAULT false);"
    "CREATE TABLE fencegate_ledger ("
    " resource text COLLATE \"C\" PRIMARY KEY,"
    " token bigint NOT NULL);"
    "CREATE TABLE fencegate_meta ("
    " key text PRIMARY KEY,"
    " value bytea NOT NULL)",
    /* 2: who holds the recorded grant (store_grant_as), so that a re-entry or a replay of
     * the same grant is told from the same number granted to someone else. */
    "ALTER TABLE fencegate_ledger ADD COLUMN holder bytea",
    /* 3: each resource's shared mark (store_grant_req.shared), checked by every write in the
     * statement that writes, under the row's lock. */
    "ALTER TABLE fencegate_resources ADD COLUMN shared_mark bigint NOT NULL DEFAULT 0",
};

#define SCHEMA_VERSION ((int)(sizeof migrations / sizeof migrations[0]))

/* Runs sql (simple protocol: several statements allowed, no parameters) on c and returns the
 * last result (caller PQclear()s), or NULL with err filled (the connection should then be
 * dropped). */
static PGresult *simple(store__pg *p, store__pgconn *c, const char *sql, const char *what,
                        char *err, size_t errlen)
{
    char msg[1024];
    int lost = 0;
    PGresult *keep = NULL;
    int64_t deadline = store__pg_now_ms() + p->timeout_ms;

    if (!PQsendQuery(c->conn, sql) || store__pg_flush(c->conn, deadline) != 0) {
        lost = 1;
    }
    for (PGresult *res; !lost && (res = store__pg_next(c->conn, deadline, &lost)) != NULL;) {
        ExecStatusType kept = keep != NULL ? PQresultStatus(keep) : PGRES_COMMAND_OK;
        if (kept != PGRES_COMMAND_OK && kept != PGRES_TUPLES_OK) {
            PQclear(res);
        } else {
            PQclear(keep);
            keep = res;
        }
    }
    ExecStatusType es = keep != NULL ? PQresultStatus(keep) : PGRES_FATAL_ERROR;
    if (!lost && (es == PGRES_COMMAND_OK || es == PGRES_TUPLES_OK)) {
        return keep;
    }
    snprintf(msg, sizeof msg, "PostgreSQL schema: %s: %s", what,
             keep != NULL && !lost ? PQresultErrorMessage(keep)
                                   : lost ? "the connection was lost or timed out"
                                          : PQerrorMessage(c->conn));
    store__pg_scrub(p, msg, err, errlen);
    PQclear(keep);
    return NULL;
}

store_status store__pg_migrate(store__pg *p, store__pgconn *c, char *err, size_t errlen)
{
    char sql[256];
    PGresult *res = simple(p, c,
                           "BEGIN; SELECT pg_advisory_xact_lock(" MIGRATION_LOCK ");"
                           "CREATE TABLE IF NOT EXISTS fencegate_schema_version ("
                           " version integer PRIMARY KEY,"
                           " applied_at timestamptz NOT NULL DEFAULT now());"
                           "SELECT coalesce(max(version), 0) FROM fencegate_schema_version",
                           "read the schema version", err, errlen);
    if (res == NULL) {
        return STORE_EIO;
    }
    int have = PQntuples(res) == 1 ? atoi(PQgetvalue(res, 0, 0)) : -1;
    PQclear(res);
    if (have < 0 || have > SCHEMA_VERSION) {
        snprintf(sql, sizeof sql,
                 "PostgreSQL schema version %d is newer than this fencegate knows (%d): "
                 "upgrade fencegate",
                 have, SCHEMA_VERSION);
        store__pg_scrub(p, sql, err, errlen);
        return STORE_INVALID; /* the caller drops the connection, rolling back */
    }
    for (int v = have + 1; v <= SCHEMA_VERSION; v++) {
        res = simple(p, c, migrations[v - 1], "apply a migration", err, errlen);
        if (res == NULL) {
            return STORE_EIO;
        }
        PQclear(res);
        snprintf(sql, sizeof sql, "INSERT INTO fencegate_schema_version (version) VALUES (%d)",
                 v);
        res = simple(p, c, sql, "record the schema version", err, errlen);
        if (res == NULL) {
            return STORE_EIO;
        }
        PQclear(res);
    }
    res = simple(p, c, "COMMIT", "commit the migration", err, errlen);
    if (res == NULL) {
        return STORE_EIO;
    }
    PQclear(res);
    return STORE_OK;
}
