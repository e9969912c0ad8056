/*
 * The PostgreSQL backend: opening, reads, listing, deletes, the secret and the ledger's
 * per-store functions. Connections and bounded round trips are pg_conn.c's; each
 * group-commit batch of writes and grants runs in pg_commit.c; the schema is created and
 * migrated in pg_schema.c (its head comment documents the tables).
 *
 * Passwords. The URL may hold one. It is handed only to libpq. The store's description is
 * rebuilt from the parsed URL without it, and every error text storage returns passes
 * through store__pg_scrub(), which replaces the password wherever libpq may have echoed it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_private.h"

#define SECRET_KEY "owner.secret"

/* A u64 of a binary int8 column (big-endian). */
static uint64_t get_be64(const PGresult *res, int row, int col)
{
    const unsigned char *b = (const unsigned char *)PQgetvalue(res, row, col);
    uint64_t v = 0;
    if (PQgetlength(res, row, col) != 8) {
        return 0;
    }
    for (int i = 0; i < 8; i++) {
        v = (v << 8) | b[i];
    }
    return v;
}

/* Runs one read-only or autocommit statement on a pooled connection: the common frame of
 * the calls below. Returns the result (caller PQclear()s) or NULL with *st set. */
static PGresult *run(store__pg *p, const char *sql, int nparams, const char *const *values,
                     const int *lengths, const int *formats, int binary_result,
                     store_status *st)
{
    char sqlstate[6];
    store__pgrc rc = STORE__PG_OK;
    PGresult *res = NULL;

    for (int attempt = 0; attempt < 5; attempt++) {
        store__pgconn *c = store__pg_get(p, NULL, 0);
        if (c == NULL) {
            *st = STORE_EIO;
            return NULL;
        }
        res = store__pg_exec(p, c, sql, nparams, values, lengths, formats, binary_result, &rc,
                             sqlstate);
        store__pg_put(p, c, 0);
        if (rc != STORE__PG_RETRY) {
            break;
        }
    }
    if (res == NULL) {
        *st = rc == STORE__PG_SQL ? store__pg_sqlstate_status(sqlstate) : STORE_EIO;
    }
    return res;
}

static store_status pg_read(void *impl, const char *resource, store_value *v)
{
    store__pg *p = impl;
    store_status st = STORE_OK;
    const char *const vals[] = {resource};

    PGresult *res = run(p,
                        "SELECT value, content_type, token, highest_token, version, "
                        "written_at_ms, deleted FROM fencegate_resources WHERE resource = $1",
                        1, vals, NULL, NULL, 1, &st);
    if (res == NULL) {
        goto out;
    }
    if (PQntuples(res) != 1 || *PQgetvalue(res, 0, 6) != 0) {
        st = STORE_NOT_FOUND; /* never written, or a tombstone */
        goto out;
    }
    size_t len = (size_t)PQgetlength(res, 0, 0);
    size_t ct_len = (size_t)PQgetlength(res, 0, 1);
    if (ct_len > STORE_CONTENT_TYPE_MAX) {
        st = STORE_EIO; /* the schema's CHECK forbids it: never trust it */
        goto out;
    }
    v->data = malloc(len > 0 ? len : 1);
    if (v->data == NULL) {
        st = STORE_ENOMEM;
        goto out;
    }
    memcpy(v->data, PQgetvalue(res, 0, 0), len);
    v->len = len;
    memcpy(v->content_type, PQgetvalue(res, 0, 1), ct_len);
    v->content_type[ct_len] = '\0';
    v->token = get_be64(res, 0, 2);
    v->highest_token = get_be64(res, 0, 3);
    v->version = get_be64(res, 0, 4);
    v->written_at_ms = (int64_t)get_be64(res, 0, 5);
out:
    PQclear(res);
    return st;
}

static store_status pg_highest(void *impl, const char *resource, uint64_t *highest)
{
    store__pg *p = impl;
    store_status st = STORE_OK;
    const char *const vals[] = {resource};

    PGresult *res = run(p, "SELECT highest_token FROM fencegate_resources WHERE resource = $1",
                        1, vals, NULL, NULL, 1, &st);
    if (res != NULL && PQntuples(res) == 1) {
        *highest = get_be64(res, 0, 0);
    }
    PQclear(res);
    return st;
}

static store_status pg_list(void *impl, const char *after, store_entry *entries, size_t max,
                            size_t *n)
{
    store__pg *p = impl;
    store_status st = STORE_OK;
    char limit[24];
    snprintf(limit, sizeof limit, "%zu", max > 100000 ? (size_t)100000 : max);
    const char *const vals[] = {after != NULL ? after : "", limit};

    /* The resource column is COLLATE "C": byte order, like LMDB's keys. */
    PGresult *res = run(p,
                        "SELECT resource, highest_token, version, octet_length(value)::bigint, "
                        "deleted FROM fencegate_resources WHERE resource > $1 "
                        "AND (version > 0 OR highest_token > 0) "
                        "ORDER BY resource LIMIT $2::bigint",
                        2, vals, NULL, NULL, 1, &st);
    for (int i = 0; res != NULL && i < PQntuples(res) && (size_t)i < max; i++) {
        store_entry *e = &entries[*n];
        size_t len = (size_t)PQgetlength(res, i, 0);
        if (len >= sizeof e->resource) {
            st = STORE_EIO;
            break;
        }
        memcpy(e->resource, PQgetvalue(res, i, 0), len);
        e->resource[len] = '\0';
        e->highest_token = get_be64(res, i, 1);
        e->version = get_be64(res, i, 2);
        e->size = (size_t)get_be64(res, i, 3);
        e->deleted = *PQgetvalue(res, i, 4) != 0;
        (*n)++;
    }
    PQclear(res);
    return st;
}

/* One autocommit statement: the tombstone keeps highest_token, so no token below it can
 * ever write again; synchronous_commit makes it durable before the answer. */
static store_status pg_delete(void *impl, const char *resource)
{
    store__pg *p = impl;
    store_status st = STORE_OK;
    char now[24];
    snprintf(now, sizeof now, "%lld", (long long)store__wall_ms());
    const char *const vals[] = {resource, now};

    PGresult *res = run(p,
                        "UPDATE fencegate_resources SET deleted = true, value = ''::bytea, "
                        "version = version + 1, written_at_ms = $2::bigint "
                        "WHERE resource = $1 AND NOT deleted RETURNING version",
                        2, vals, NULL, NULL, 1, &st);
    if (res != NULL && PQntuples(res) != 1) {
        st = STORE_NOT_FOUND;
    }
    PQclear(res);
    return st;
}

/* store_fence(): one autocommit statement raises the resource's highest token (a tombstone
 * row when it has none) and the ledger's recorded grant together, atomically; held by no
 * holder, so no grant of that token is ever accepted again. */
static store_status pg_fence(void *impl, const char *resource, uint64_t token)
{
    store__pg *p = impl;
    store_status st = STORE_OK;
    char tok[24], now[24];
    snprintf(tok, sizeof tok, "%llu", (unsigned long long)token);
    snprintf(now, sizeof now, "%lld", (long long)store__wall_ms());
    const char *const vals[] = {resource, tok, now};

    PGresult *res = run(p,
                        "WITH f AS (INSERT INTO fencegate_resources AS r (resource, "
                        "highest_token, token, value, content_type, version, written_at_ms, "
                        "deleted) VALUES ($1::text, $2::bigint, 0, ''::bytea, '', 0, "
                        "$3::bigint, true) ON CONFLICT (resource) DO UPDATE SET "
                        "highest_token = excluded.highest_token "
                        "WHERE r.highest_token < excluded.highest_token RETURNING 1), "
                        "l AS (INSERT INTO fencegate_ledger AS l (resource, token, holder) "
                        "VALUES ($1::text, $2::bigint, NULL) ON CONFLICT (resource) DO UPDATE "
                        "SET token = excluded.token, holder = NULL "
                        "WHERE l.token < excluded.token RETURNING 1) "
                        "SELECT (SELECT count(*) FROM f), (SELECT count(*) FROM l)",
                        3, vals, NULL, NULL, 0, &st);
    PQclear(res);
    return st;
}

static store_status pg_ledger_granted(void *impl, const char *resource, uint64_t *granted)
{
    store__pg *p = impl;
    store_status st = STORE_OK;
    const char *const vals[] = {resource};

    PGresult *res = run(p, "SELECT token FROM fencegate_ledger WHERE resource = $1", 1, vals,
                        NULL, NULL, 1, &st);
    if (res != NULL && PQntuples(res) == 1) {
        *granted = get_be64(res, 0, 0);
    }
    PQclear(res);
    return st;
}

/* Grants are checked per resource (store_grant): no floor fixed at open could cover what
 * other processes hand out later. */
static uint64_t pg_ledger_floor(void *impl)
{
    (void)impl;
    return 0;
}

/* Every token is covered: store_grant() makes each grant durable instead. */
static uint64_t pg_ledger_ceiling(void *impl)
{
    (void)impl;
    return STORE__TOKEN_MAX;
}

/* Never called: pg_ledger_ceiling covers every valid token. */
static store_status pg_ledger_cover(void *impl, uint64_t token)
{
    (void)impl;
    (void)token;
    return STORE_OK;
}

/* Made once under concurrency: every caller offers random bytes with INSERT ... ON CONFLICT
 * DO NOTHING (autocommit, durable before it returns), then everyone reads the one row that
 * won. */
static store_status pg_secret(void *impl, unsigned char out[STORE_SECRET_LEN], char *err,
                              size_t errlen)
{
    store__pg *p = impl;
    unsigned char made[STORE_SECRET_LEN];
    store_status st = STORE_OK;
    PGresult *res = NULL;
    const char *msg = NULL;

    if (store__secret_make(made) != 0) {
        msg = "cannot get random bytes for the owner secret";
        st = STORE_EIO;
        goto out;
    }
    const char *const vals[] = {(const char *)made};
    const int lens[] = {STORE_SECRET_LEN};
    const int fmts[] = {1};
    res = run(p,
              "INSERT INTO fencegate_meta (key, value) VALUES ('" SECRET_KEY "', $1::bytea) "
              "ON CONFLICT (key) DO NOTHING",
              1, vals, lens, fmts, 1, &st);
    if (res == NULL) {
        msg = "cannot store the owner secret in PostgreSQL";
        goto out;
    }
    PQclear(res);
    res = run(p, "SELECT value FROM fencegate_meta WHERE key = '" SECRET_KEY "'", 0, NULL, NULL,
              NULL, 1, &st);
    if (res == NULL) {
        msg = "cannot read the owner secret from PostgreSQL";
        goto out;
    }
    if (PQntuples(res) != 1 || !store__secret_valid((const unsigned char *)PQgetvalue(res, 0, 0),
                                                     (size_t)PQgetlength(res, 0, 0))) {
        msg = "the store's owner secret is malformed";
        st = STORE_INVALID;
        goto out;
    }
    memcpy(out, PQgetvalue(res, 0, 0), STORE_SECRET_LEN);
out:
    if (msg != NULL) {
        store__pg_scrub(p, msg, err, errlen);
    }
    PQclear(res);
    return st;
}

static void free_pg(store__pg *p)
{
    while (p->idle != NULL) {
        store__pgconn *c = p->idle;
        p->idle = c->next;
        if (c->conn != NULL) {
            PQfinish(c->conn);
        }
        free(c);
    }
    if (p->password != NULL) {
        memset(p->password, 0, strlen(p->password));
    }
    if (p->url != NULL) {
        memset(p->url, 0, strlen(p->url));
    }
    free(p->password);
    free(p->url);
    pthread_mutex_destroy(&p->pool_mu);
    pthread_cond_destroy(&p->pool_cv);
    free(p);
}

static void pg_close(void *impl)
{
    free_pg(impl);
}

/* The value of keyword in libpq's parsed options, or NULL when unset or empty. */
static const char *opt(const PQconninfoOption *o, const char *keyword)
{
    for (; o != NULL && o->keyword != NULL; o++) {
        if (strcmp(o->keyword, keyword) == 0) {
            return o->val != NULL && o->val[0] != '\0' ? o->val : NULL;
        }
    }
    return NULL;
}

/* postgresql://user@host:port/db, or postgresql://user@/db?host=/dir for a socket. */
static void describe(const PQconninfoOption *o, char *desc, size_t desclen)
{
    const char *user = opt(o, "user"), *host = opt(o, "host"), *port = opt(o, "port");
    const char *db = opt(o, "dbname");
    int socket_dir = host != NULL && host[0] == '/';

    snprintf(desc, desclen, "postgresql://%s%s%s%s%s/%s%s%s%s%s", user != NULL ? user : "",
             user != NULL ? "@" : "", host != NULL && !socket_dir ? host : "",
             port != NULL && !socket_dir ? ":" : "", port != NULL && !socket_dir ? port : "",
             db != NULL ? db : "", socket_dir ? "?host=" : "", socket_dir ? host : "",
             socket_dir && port != NULL ? "&port=" : "",
             socket_dir && port != NULL ? port : "");
}

store_status store__pg_describe_url(const char *url, char *desc, size_t desclen, char *err,
                                    size_t errlen)
{
    char *parse_err = NULL;
    PQconninfoOption *o = PQconninfoParse(url, &parse_err);
    if (o == NULL) {
        PQfreemem(parse_err); /* may quote the URL, password included */
        store__pg_scrub(NULL, "cannot parse the PostgreSQL URL (it is not repeated here, as it "
                        "may hold a password)", err, errlen);
        return STORE_INVALID;
    }
    describe(o, desc, desclen);
    PQconninfoFree(o);
    return STORE_OK;
}

/* Allocates p from opts and the parsed URL. NULL on out of memory. */
static store__pg *new_pg(const char *url, const store_options *opts,
                         const PQconninfoOption *o)
{
    store__pg *p = calloc(1, sizeof *p);
    if (p == NULL) {
        return NULL;
    }
    p->url = strdup(url);
    p->password = opt(o, "password") != NULL ? strdup(opt(o, "password")) : NULL;
    p->timeout_ms = opts->timeout_ms > 0 ? opts->timeout_ms : 5000;
    p->max_conns = opts->pool_size > 0 ? opts->pool_size : 8;
    pthread_mutex_init(&p->pool_mu, NULL);
    pthread_cond_init(&p->pool_cv, NULL);
    if (p->url == NULL || (opt(o, "password") != NULL && p->password == NULL)) {
        free_pg(p);
        return NULL;
    }
    return p;
}

/*
 * Opens the PostgreSQL backend. In this order:
 *  1. Check the options and parse the URL (never echoed: it may hold a password).
 *  2. Describe the backend from the parsed URL, without the password.
 *  3. Connect (bounded by timeout_ms).
 *  4. Create or migrate the schema (pg_schema.c), on that connection.
 * On error everything is released and err says why, scrubbed of the password.
 */
store_status store__pg_open(void **out, const char *url, const store_options *opts,
                            char *desc, size_t desclen, char *err, size_t errlen)
{
    char *parse_err = NULL;
    PQconninfoOption *o = NULL;
    store__pg *p = NULL;
    store__pgconn *c = NULL;
    store_status st = STORE_OK;

    *out = NULL;
    if (opts->max_value_bytes == 0 || opts->max_value_bytes > (size_t)1 << 30) {
        store__pg_scrub(NULL, "invalid store options (max_value_bytes: 1 byte to 1 GiB)", err,
                        errlen);
        return STORE_INVALID;
    }
    o = PQconninfoParse(url, &parse_err);
    if (o == NULL) {
        /* libpq's message may quote the URL, password included: not passed on. */
        PQfreemem(parse_err);
        store__pg_scrub(NULL, "cannot parse the PostgreSQL URL (it is not repeated here, as it "
                        "may hold a password)", err, errlen);
        return STORE_INVALID;
    }
    describe(o, desc, desclen);
    p = new_pg(url, opts, o);
    PQconninfoFree(o);
    if (p == NULL) {
        store__pg_scrub(NULL, "out of memory", err, errlen);
        return STORE_ENOMEM;
    }
    c = store__pg_get(p, err, errlen);
    if (c == NULL) {
        free_pg(p);
        return STORE_EIO;
    }
    st = store__pg_migrate(p, c, err, errlen);
    store__pg_put(p, c, st != STORE_OK);
    if (st != STORE_OK) {
        free_pg(p);
        return st;
    }
    *out = p;
    return STORE_OK;
}

const store__ops store__pg_ops = {
    .name = "postgresql",
    .close = pg_close,
    .run_batch = store__pg_run_batch,
    .read = pg_read,
    .highest = pg_highest,
    .list = pg_list,
    .del = pg_delete,
    .fence = pg_fence,
    .ledger_floor = pg_ledger_floor,
    .ledger_ceiling = pg_ledger_ceiling,
    .ledger_cover = pg_ledger_cover,
    .ledger_granted = pg_ledger_granted,
    .grant = NULL, /* grants queue with the writes: one transaction carries both */
    .grant_needed = 1,
    .secret = pg_secret,
};
