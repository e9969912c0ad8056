/* The PostgreSQL backend's state and its connection layer (pg_conn.c), shared by pg.c,
 * pg_commit.c and pg_schema.c. Never installed. */
#ifndef STORAGE_PG_PRIVATE_H
#define STORAGE_PG_PRIVATE_H

#include <pthread.h>
#include <stdatomic.h>

#include <libpq-fe.h>

#include "backend.h"

/* One pooled connection slot; conn is NULL until (re)connected. */
typedef struct store__pgconn {
    PGconn *conn;
    int prepared;              /* pg_commit.c's statements are prepared on conn */
    struct store__pgconn *next;
} store__pgconn;

typedef struct store__pg {
    char *url;                 /* as given (may hold a password): only ever passed to libpq */
    char *password;            /* the URL's password, to scrub from error texts, or NULL */
    int timeout_ms;

    /* Connection pool: at most max_conns open, idle ones on a list. */
    pthread_mutex_t pool_mu;
    pthread_cond_t pool_cv;
    store__pgconn *idle;
    int conns;
    int max_conns;
} store__pg;

/* What a round trip ended with. */
typedef enum store__pgrc {
    STORE__PG_OK,       /* every statement succeeded */
    STORE__PG_SQL,      /* a statement failed; the connection is usable (sqlstate says why) */
    STORE__PG_RETRY,    /* serialization failure (40001) or deadlock (40P01): run it again */
    STORE__PG_LOST,     /* connection lost or timed out: the slot was reset */
    STORE__PG_IN_DOUBT, /* LOST after a COMMIT was sent that no failure had doomed: it may
                           or may not have been made */
} store__pgrc;

/* Takes a connection slot with a live connection, connecting (bounded by timeout_ms) when
 * the slot has none or its connection broke. NULL when the database cannot be reached (err,
 * if not NULL, says why, without the password). Give it back with store__pg_put(). */
store__pgconn *store__pg_get(store__pg *p, char *err, size_t errlen);

/* Gives a slot back. broken: close its connection; the next user reconnects. */
void store__pg_put(store__pg *p, store__pgconn *c, int broken);

/* Monotonic milliseconds, for deadlines. */
int64_t store__pg_now_ms(void);

/* Sends what libpq has buffered, waiting at most until deadline_ms. 0, or -1 on a
 * timeout or a lost connection. */
int store__pg_flush(PGconn *conn, int64_t deadline_ms);

/* The next result, waiting at most until deadline_ms. Sets *lost (and returns NULL) on a
 * timeout or a lost connection; otherwise returns what PQgetResult returns. */
PGresult *store__pg_next(PGconn *conn, int64_t deadline_ms, int *lost);

/* Runs one statement (text parameters, except those with formats[i] = 1) outside pipeline
 * mode and returns its result (caller PQclear()s), or NULL with *rc set. *rc is OK, SQL
 * (sqlstate filled, 6 bytes), RETRY or LOST (the slot's connection then closed). */
PGresult *store__pg_exec(store__pg *p, store__pgconn *c, const char *sql, int nparams,
                         const char *const *values, const int *lengths, const int *formats,
                         int binary_result, store__pgrc *rc, char *sqlstate);

/* Maps a failed statement's SQLSTATE to a status: 53100 (disk full) FULL, 53200 (out of
 * memory) ENOMEM, 54000 (too large) TOO_LARGE, anything else EIO. */
store_status store__pg_sqlstate_status(const char *sqlstate);

/* Copies msg into err (errlen bytes) with every occurrence of the password replaced by ***. */
void store__pg_scrub(const store__pg *p, const char *msg, char *err, size_t errlen);

/* Creates or migrates the schema on c (pg_schema.c). OK, INVALID for a database whose schema
 * is newer than this code, or EIO; err says why. */
store_status store__pg_migrate(store__pg *p, store__pgconn *c, char *err, size_t errlen);

/* Runs one group-commit batch of writes and grants (pg_commit.c): the backend's run_batch. */
void store__pg_run_batch(void *impl, store__op *batch, store__counts *counts);

#endif
