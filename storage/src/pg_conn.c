/*
 * The PostgreSQL backend's connection layer: the pool, connecting, and round trips bounded
 * by a deadline. It knows no statement of the store; pg.c, pg_commit.c and pg_schema.c
 * build the statements and read their rows.
 *
 * Connections. A pool of up to pool_size connections, each opened lazily, handed to one call
 * at a time. Each session sets synchronous_commit = on (never off: a COMMIT then returns only
 * once its WAL is flushed, so an answer follows durability) and statement_timeout. Every
 * round trip runs in non-blocking mode against a deadline of timeout_ms: a database that is
 * gone, restarting, killed or frozen makes the call answer EIO in bounded time instead of
 * hanging, and the connection is closed. The next call that takes the slot connects again
 * (connect_timeout bounds it), so the store recovers by itself once the database is back.
 *
 * Passwords. Every error text storage returns passes through store__pg_scrub(), which
 * replaces the URL's password wherever libpq may have echoed it.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pg_private.h"

int64_t store__pg_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void store__pg_scrub(const store__pg *p, const char *msg, char *err, size_t errlen)
{
    size_t out = 0;
    const char *pw = p != NULL ? p->password : NULL;
    size_t pwlen = pw != NULL ? strlen(pw) : 0;

    if (err == NULL || errlen == 0) {
        return;
    }
    for (const char *m = msg; *m != '\0' && out + 1 < errlen;) {
        if (pwlen > 0 && strncmp(m, pw, pwlen) == 0) {
            for (const char *r = "***"; *r != '\0' && out + 1 < errlen; r++) {
                err[out++] = *r;
            }
            m += pwlen;
            continue;
        }
        err[out++] = *m == '\n' ? ' ' : *m; /* libpq's messages end in newlines */
        m++;
    }
    while (out > 0 && err[out - 1] == ' ') {
        out--;
    }
    err[out] = '\0';
}

store_status store__pg_sqlstate_status(const char *sqlstate)
{
    if (sqlstate != NULL && strcmp(sqlstate, "53100") == 0) {
        return STORE_FULL; /* disk_full: nothing was written */
    }
    if (sqlstate != NULL && strcmp(sqlstate, "53200") == 0) {
        return STORE_ENOMEM; /* the server's out_of_memory */
    }
    if (sqlstate != NULL && strcmp(sqlstate, "54000") == 0) {
        return STORE_TOO_LARGE;
    }
    return STORE_EIO;
}

/* Waits until conn's socket is ready for events or the deadline. 0 ready, -1 timeout or
 * error. */
static int wait_socket(PGconn *conn, short events, int64_t deadline_ms)
{
    int fd = PQsocket(conn);
    if (fd < 0) {
        return -1;
    }
    for (;;) {
        int64_t left = deadline_ms - store__pg_now_ms();
        if (left <= 0) {
            return -1;
        }
        struct pollfd pfd = {.fd = fd, .events = events};
        int rc = poll(&pfd, 1, (int)(left > 1000 ? 1000 : left));
        if (rc > 0) {
            return 0;
        }
        if (rc < 0 && errno != EINTR) {
            return -1;
        }
    }
}

int store__pg_flush(PGconn *conn, int64_t deadline_ms)
{
    for (;;) {
        int rc = PQflush(conn);
        if (rc == 0) {
            return 0;
        }
        if (rc < 0 || wait_socket(conn, POLLIN | POLLOUT, deadline_ms) != 0) {
            return -1;
        }
        /* The server may be answering while we still send: read, so it never blocks on us. */
        if (!PQconsumeInput(conn)) {
            return -1;
        }
    }
}

PGresult *store__pg_next(PGconn *conn, int64_t deadline_ms, int *lost)
{
    while (PQisBusy(conn)) {
        if (wait_socket(conn, POLLIN, deadline_ms) != 0 || !PQconsumeInput(conn)) {
            *lost = 1;
            return NULL;
        }
    }
    PGresult *res = PQgetResult(conn);
    if (res == NULL && PQstatus(conn) != CONNECTION_OK) {
        *lost = 1;
    }
    return res;
}

/* Runs sql on conn and returns the first failed result, or else the last result. *lost on a
 * timeout or a lost connection (then NULL). */
static PGresult *exec_conn(PGconn *conn, int64_t deadline_ms, const char *sql, int nparams,
                           const char *const *values, const int *lengths, const int *formats,
                           int binary_result, int *lost)
{
    PGresult *keep = NULL;

    if (!PQsendQueryParams(conn, sql, nparams, NULL, values, lengths, formats,
                           binary_result) ||
        store__pg_flush(conn, deadline_ms) != 0) {
        *lost = 1;
        return NULL;
    }
    for (;;) {
        PGresult *res = store__pg_next(conn, deadline_ms, lost);
        if (res == NULL) {
            break;
        }
        ExecStatusType kept = keep != NULL ? PQresultStatus(keep) : PGRES_COMMAND_OK;
        if (kept != PGRES_COMMAND_OK && kept != PGRES_TUPLES_OK) {
            PQclear(res); /* the first failure says why */
        } else {
            PQclear(keep);
            keep = res;
        }
    }
    if (*lost) {
        PQclear(keep);
        return NULL;
    }
    return keep;
}

PGresult *store__pg_exec(store__pg *p, store__pgconn *c, const char *sql, int nparams,
                         const char *const *values, const int *lengths, const int *formats,
                         int binary_result, store__pgrc *rc, char *sqlstate)
{
    int lost = 0;
    int64_t deadline = store__pg_now_ms() + p->timeout_ms;
    PGresult *res = exec_conn(c->conn, deadline, sql, nparams, values, lengths, formats,
                              binary_result, &lost);

    sqlstate[0] = '\0';
    if (res == NULL) {
        *rc = STORE__PG_LOST;
        PQfinish(c->conn);
        c->conn = NULL;
        return NULL;
    }
    ExecStatusType es = PQresultStatus(res);
    if (es == PGRES_COMMAND_OK || es == PGRES_TUPLES_OK) {
        *rc = STORE__PG_OK;
        return res;
    }
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    snprintf(sqlstate, 6, "%s", state != NULL ? state : "");
    *rc = strcmp(sqlstate, "40001") == 0 || strcmp(sqlstate, "40P01") == 0 ? STORE__PG_RETRY
                                                                             : STORE__PG_SQL;
    if (PQstatus(c->conn) != CONNECTION_OK) {
        *rc = STORE__PG_LOST;
        PQfinish(c->conn);
        c->conn = NULL;
    }
    PQclear(res);
    return NULL;
}

static void ignore_notice(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

/* Opens a connection to p->url, bounded by timeout_ms, and prepares its session. NULL with
 * err (scrubbed) on failure. */
static PGconn *connect_db(store__pg *p, char *err, size_t errlen)
{
    char connect_s[16], user_timeout_ms[16], statement[96];
    int timeout_s = (p->timeout_ms + 999) / 1000;
    snprintf(connect_s, sizeof connect_s, "%d", timeout_s < 2 ? 2 : timeout_s);
    snprintf(user_timeout_ms, sizeof user_timeout_ms, "%d", p->timeout_ms);
    /* Defaults first: the URL, expanded at dbname's place, overrides any of them. */
    const char *const keys[] = {"connect_timeout", "keepalives", "keepalives_idle",
                                "keepalives_interval", "keepalives_count", "tcp_user_timeout",
                                "application_name", "dbname", NULL};
    const char *const vals[] = {connect_s, "1", "5", "2", "3", user_timeout_ms, "fencegate",
                                p->url, NULL};
    PGconn *conn = PQconnectdbParams(keys, vals, 1);
    const char *what = NULL;

    if (conn == NULL) {
        store__pg_scrub(p, "cannot connect to PostgreSQL: out of memory", err, errlen);
        return NULL;
    }
    if (PQstatus(conn) != CONNECTION_OK) {
        what = "cannot connect to PostgreSQL";
        goto fail;
    }
    /* The library never prints: libpq's default would write NOTICEs to stderr. */
    PQsetNoticeProcessor(conn, ignore_notice, NULL);
    if (PQsetnonblocking(conn, 1) != 0) {
        what = "cannot make the connection non-blocking";
        goto fail;
    }
    /* Per session, explicitly: a server or role default of off would acknowledge writes
     * before their WAL is flushed. */
    snprintf(statement, sizeof statement,
             "SET synchronous_commit = on; SET statement_timeout = %d", p->timeout_ms);
    int lost = 0;
    int64_t deadline = store__pg_now_ms() + p->timeout_ms;
    if (!PQsendQuery(conn, statement) || store__pg_flush(conn, deadline) != 0) {
        what = "cannot set up the session";
        goto fail;
    }
    for (PGresult *res; (res = store__pg_next(conn, deadline, &lost)) != NULL;) {
        if (PQresultStatus(res) != PGRES_COMMAND_OK) {
            what = "cannot set up the session";
        }
        PQclear(res);
    }
    if (lost || what != NULL) {
        what = "cannot set up the session";
        goto fail;
    }
    return conn;
fail:
    if (err != NULL) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s: %s", what, PQerrorMessage(conn));
        store__pg_scrub(p, msg, err, errlen);
    }
    PQfinish(conn);
    return NULL;
}

/* An idle session expects nothing from the server. Anything readable (the end of the stream
 * after a restart or an administrator's kill, or the FATAL error sent before it) means the
 * server has closed it or is closing it: connect again rather than send a COMMIT into it,
 * whose lost answer would leave the change in doubt. */
static int idle_usable(PGconn *conn)
{
    struct pollfd pfd = {.fd = PQsocket(conn), .events = POLLIN};
    return PQstatus(conn) == CONNECTION_OK && pfd.fd >= 0 && poll(&pfd, 1, 0) == 0;
}

store__pgconn *store__pg_get(store__pg *p, char *err, size_t errlen)
{
    store__pgconn *c = NULL;

    pthread_mutex_lock(&p->pool_mu);
    while (p->idle == NULL && p->conns >= p->max_conns) {
        pthread_cond_wait(&p->pool_cv, &p->pool_mu);
    }
    if (p->idle != NULL) {
        c = p->idle;
        p->idle = c->next;
    } else {
        c = calloc(1, sizeof *c);
        if (c != NULL) {
            p->conns++;
        }
    }
    pthread_mutex_unlock(&p->pool_mu);
    if (c == NULL) {
        store__pg_scrub(p, "out of memory", err, errlen);
        return NULL;
    }
    if (c->conn != NULL && !idle_usable(c->conn)) {
        PQfinish(c->conn);
        c->conn = NULL;
    }
    if (c->conn == NULL) {
        c->prepared = 0; /* prepared statements live and die with their session */
        c->conn = connect_db(p, err, errlen);
        if (c->conn == NULL) {
            store__pg_put(p, c, 1);
            return NULL;
        }
    }
    return c;
}

void store__pg_put(store__pg *p, store__pgconn *c, int broken)
{
    if (broken && c->conn != NULL) {
        PQfinish(c->conn);
        c->conn = NULL;
    }
    pthread_mutex_lock(&p->pool_mu);
    c->next = p->idle;
    p->idle = c;
    pthread_cond_signal(&p->pool_cv);
    pthread_mutex_unlock(&p->pool_mu);
}

