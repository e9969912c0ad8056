/*
 * storage.h's public functions: choosing the backend from the URL, and what both backends do
 * alike, before and around the call through the chosen backend's table (backend.h):
 *  - the checks: both backends answer a bad name, token, size or content type with the same
 *    status in the same order as store_write() documents; what needs the stored state
 *    (STALE, UNKNOWN_TOKEN, FULL, EIO) is the backend's;
 *  - the calls in flight, so that store_close() waits for them;
 *  - group commit (group.h): writes, and grants where the backend batches them, queue here
 *    and the backend runs each batch in one transaction.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

#define LMDB_SCHEME "lmdb:"

struct store {
    const store__ops *ops;
    void *impl;
    size_t max_value_bytes;
    store__group group;
    /* Calls in flight (call_begin/call_end), so that store_close() waits for them. */
    pthread_mutex_t calls_mu;
    pthread_cond_t calls_cv;
    long calls;
    char desc[512]; /* store_describe(): never holds a password */
};

static const char *const status_names[] = {
#define STORE_X_NAME(name, msg) #name,
    STORE_STATUS_MAP(STORE_X_NAME)
#undef STORE_X_NAME
};

static const char *const status_msgs[] = {
#define STORE_X_MSG(name, msg) msg,
    STORE_STATUS_MAP(STORE_X_MSG)
#undef STORE_X_MSG
};

const char *store_status_name(store_status st)
{
    return (unsigned)st < STORE_STATUS_COUNT ? status_names[st] : "UNKNOWN";
}

const char *store_status_str(store_status st)
{
    return (unsigned)st < STORE_STATUS_COUNT ? status_msgs[st] : "unknown status";
}

void store_options_init(store_options *opts)
{
    memset(opts, 0, sizeof *opts);
    opts->map_size = (size_t)1 << 30;
    opts->max_value_bytes = (size_t)1 << 20;
    opts->group_commit = 1;
    opts->ledger_step = (uint64_t)1 << 20;
    opts->timeout_ms = 5000;
    opts->pool_size = 8;
}

/* 1 when url names PostgreSQL: the two URI prefixes libpq accepts. */
static int is_pg_url(const char *url)
{
    return strncmp(url, "postgres://", strlen("postgres://")) == 0 ||
           strncmp(url, "postgresql://", strlen("postgresql://")) == 0;
}

static void set_err(char *err, size_t errlen, const char *msg)
{
    if (err != NULL && errlen > 0) {
        snprintf(err, errlen, "%s", msg);
    }
}

/* Opens the LMDB backend in opts->dir, or in the path of an "lmdb:/path" URL. */
static store_status open_lmdb(store *s, const store_options *opts, char *err, size_t errlen)
{
    store_options o = *opts;
    const char *url = opts->url != NULL ? opts->url : "";

    if (strncmp(url, LMDB_SCHEME, strlen(LMDB_SCHEME)) == 0 &&
        url[strlen(LMDB_SCHEME)] != '\0') {
        o.dir = url + strlen(LMDB_SCHEME);
    }
    s->ops = &store__lmdb_ops;
    snprintf(s->desc, sizeof s->desc, LMDB_SCHEME "%s", o.dir != NULL ? o.dir : "");
    return store__lmdb_open(&s->impl, &o, err, errlen);
}

store_status store_open(store **out, const store_options *opts, char *err, size_t errlen)
{
    store_status st = STORE_OK;
    const char *url = NULL;

    *out = NULL;
    if (opts == NULL) {
        set_err(err, errlen, "invalid store options");
        return STORE_INVALID;
    }
    url = opts->url != NULL ? opts->url : "";
    if (url[0] != '\0' && strncmp(url, LMDB_SCHEME, strlen(LMDB_SCHEME)) != 0 &&
        !is_pg_url(url)) {
        /* Not echoed: a mistyped PostgreSQL URL may still hold a password. */
        set_err(err, errlen, "store URL: unknown scheme (use lmdb:[/dir], postgres:// or "
                             "postgresql://)");
        return STORE_INVALID;
    }
    store *s = calloc(1, sizeof *s);
    if (s == NULL) {
        set_err(err, errlen, "out of memory");
        return STORE_ENOMEM;
    }
    if (is_pg_url(url)) {
        s->ops = &store__pg_ops;
        st = store__pg_open(&s->impl, url, opts, s->desc, sizeof s->desc, err, errlen);
    } else {
        st = open_lmdb(s, opts, err, errlen);
    }
    if (st != STORE_OK) {
        free(s);
        return st;
    }
    s->max_value_bytes = opts->max_value_bytes;
    store__group_init(&s->group, opts->group_commit, s->ops->run_batch, s->impl);
    pthread_mutex_init(&s->calls_mu, NULL);
    pthread_cond_init(&s->calls_cv, NULL);
    *out = s;
    return STORE_OK;
}

store_status store_describe_options(const store_options *opts, char *buf, size_t len,
                                    char *err, size_t errlen)
{
    const char *url = opts->url != NULL ? opts->url : "";

    if (is_pg_url(url)) {
        return store__pg_describe_url(url, buf, len, err, errlen);
    }
    if (url[0] != '\0' && strncmp(url, LMDB_SCHEME, strlen(LMDB_SCHEME)) != 0) {
        set_err(err, errlen, "store URL: unknown scheme (use lmdb:[/dir], postgres:// or "
                             "postgresql://)");
        return STORE_INVALID;
    }
    const char *dir = url[0] != '\0' && url[strlen(LMDB_SCHEME)] != '\0'
                          ? url + strlen(LMDB_SCHEME)
                          : opts->dir;
    snprintf(buf, len, LMDB_SCHEME "%s", dir != NULL ? dir : "");
    return STORE_OK;
}

static void call_begin(store *s)
{
    pthread_mutex_lock(&s->calls_mu);
    s->calls++;
    pthread_mutex_unlock(&s->calls_mu);
}

static void call_end(store *s)
{
    /* The count and the wake-up are under one mutex, so store_close() cannot free the store
     * between them. */
    pthread_mutex_lock(&s->calls_mu);
    if (--s->calls == 0) {
        pthread_cond_broadcast(&s->calls_cv);
    }
    pthread_mutex_unlock(&s->calls_mu);
}

void store_close(store *s)
{
    if (s == NULL) {
        return;
    }
    /* Let calls in flight finish: each write is then durable and answered. */
    pthread_mutex_lock(&s->calls_mu);
    while (s->calls > 0) {
        pthread_cond_wait(&s->calls_cv, &s->calls_mu);
    }
    pthread_mutex_unlock(&s->calls_mu);
    s->ops->close(s->impl);
    store__group_destroy(&s->group);
    pthread_mutex_destroy(&s->calls_mu);
    pthread_cond_destroy(&s->calls_cv);
    free(s);
}

const char *store_describe(store *s, char *buf, size_t len)
{
    if (buf != NULL && len > 0) {
        snprintf(buf, len, "%s", s->desc);
    }
    return buf;
}

void store_write_many(store *s, store_write_req *const *reqs, size_t n)
{
    store_grant_many(s, NULL, 0, reqs, n);
}

store_status store_write(store *s, const char *resource, uint64_t token, const void *data,
                         size_t len, const char *content_type, uint64_t last_issued,
                         store_write_result *res)
{
    store_write_req r = {.resource = resource, .token = token, .data = data, .len = len,
                         .content_type = content_type, .last_issued = last_issued};
    store_write_req *one[1] = {&r};

    store_write_many(s, one, 1);
    if (res != NULL) {
        *res = r.res;
    }
    return r.status;
}

/* Appends op to the chain *first..*last. */
static void chain(store__op *op, store__op **first, store__op **last)
{
    if (*last != NULL) {
        (*last)->next = op;
    } else {
        *first = op;
    }
    *last = op;
}

store_status store_read(store *s, const char *resource, store_value *v)
{
    memset(v, 0, sizeof *v);
    if (!store__valid_name(resource)) {
        return STORE_INVALID;
    }
    call_begin(s);
    store_status st = s->ops->read(s->impl, resource, v);
    call_end(s);
    return st;
}

void store_value_free(store_value *v)
{
    if (v != NULL) {
        free(v->data);
        v->data = NULL;
        v->len = 0;
    }
}

store_status store_highest(store *s, const char *resource, uint64_t *highest)
{
    *highest = 0;
    if (!store__valid_name(resource)) {
        return STORE_INVALID;
    }
    call_begin(s);
    store_status st = s->ops->highest(s->impl, resource, highest);
    call_end(s);
    return st;
}

store_status store_list(store *s, const char *after, store_entry *entries, size_t max,
                        size_t *n)
{
    *n = 0;
    if (after != NULL && after[0] != '\0' && !store__valid_name(after)) {
        return STORE_INVALID;
    }
    if (max == 0) {
        return STORE_OK;
    }
    call_begin(s);
    store_status st = s->ops->list(s->impl, after, entries, max, n);
    call_end(s);
    return st;
}

store_status store_delete(store *s, const char *resource)
{
    if (!store__valid_name(resource)) {
        return STORE_INVALID;
    }
    call_begin(s);
    store_status st = s->ops->del(s->impl, resource);
    call_end(s);
    return st;
}

store_status store_fence(store *s, const char *resource, uint64_t token)
{
    if (!store__valid_name(resource) || token == 0 || token > STORE__TOKEN_MAX) {
        return STORE_INVALID;
    }
    call_begin(s);
    store_status st = s->ops->fence(s->impl, resource, token);
    call_end(s);
    /* LMDB's ledger is one ceiling for every resource; PostgreSQL's was raised above. */
    return st == STORE_OK ? store_ledger_cover(s, token) : st;
}

store_status store_ledger_granted(store *s, const char *resource, uint64_t *granted)
{
    *granted = 0;
    if (!store__valid_name(resource)) {
        return STORE_INVALID;
    }
    if (s->ops->ledger_granted == NULL) {
        return STORE_OK;
    }
    call_begin(s);
    store_status st = s->ops->ledger_granted(s->impl, resource, granted);
    call_end(s);
    return st;
}

uint64_t store_ledger_floor(store *s)
{
    return s->ops->ledger_floor(s->impl);
}

store_status store_ledger_cover(store *s, uint64_t token)
{
    if (token > STORE__TOKEN_MAX) {
        return STORE_INVALID;
    }
    /* Every /lock covers its token: one that is covered already takes no mutex. */
    if (token <= s->ops->ledger_ceiling(s->impl)) {
        return STORE_OK;
    }
    call_begin(s);
    store_status st = s->ops->ledger_cover(s->impl, token);
    call_end(s);
    return st;
}

store_status store_grant(store *s, const char *resource, uint64_t token, uint64_t *highest)
{
    return store_grant_as(s, resource, token, NULL, highest);
}

store_status store_grant_as(store *s, const char *resource, uint64_t token,
                            const unsigned char *holder, uint64_t *highest)
{
    store_grant_req g = {.resource = resource, .token = token, .holder = holder};
    store_grant_req *one[1] = {&g};

    store_grant_many(s, one, 1, NULL, 0);
    *highest = g.highest;
    return g.status;
}

void store_grant_many(store *s, store_grant_req *const *grants, size_t ng,
                      store_write_req *const *writes, size_t nw)
{
    store_run_many(s, grants, ng, writes, nw, NULL, 0);
}

store_status store_transact(store *s, store_txn *t)
{
    store_txn *one[1] = {t};
    store_run_many(s, NULL, 0, NULL, 0, one, 1);
    return t->status;
}

/* Checks a transaction's writes as store_write() checks one, and that no resource is named
 * twice. OK, or the status of the transaction with each write answered (store_txn). */
static store_status validate_txn(store *s, store_txn *t)
{
    store_status worst = STORE_OK;

    if (t->n == 0 || t->n > STORE_TXN_MAX || t->writes == NULL) {
        for (size_t i = 0; t->writes != NULL && i < t->n; i++) {
            t->writes[i]->status = STORE_INVALID;
            memset(&t->writes[i]->res, 0, sizeof t->writes[i]->res);
        }
        return STORE_INVALID;
    }
    for (size_t i = 0; i < t->n; i++) {
        store_write_req *r = t->writes[i];
        memset(&r->res, 0, sizeof r->res);
        r->status = store__validate_write(r, s->max_value_bytes);
        for (size_t j = 0; r->status == STORE_OK && j < i; j++) {
            if (strcmp(t->writes[j]->resource, r->resource) == 0) {
                r->status = STORE_INVALID;
            }
        }
        /* INVALID names the request's mistake before TOO_LARGE does. */
        if (r->status != STORE_OK && worst != STORE_INVALID) {
            worst = r->status;
        }
    }
    return worst;
}

/* Writes, then grants, then transactions, all checked first. Every valid write and
 * transaction, and every valid grant when the backend batches grants (grant NULL), goes into
 * one chain for group commit; the backend answers them in place. A backend with a grant of
 * its own answers each grant after the batch. */
void store_run_many(store *s, store_grant_req *const *grants, size_t ng,
                    store_write_req *const *writes, size_t nw, store_txn *const *txns,
                    size_t nt)
{
    store__op one[1];
    size_t nops = ng + nw + nt;
    store__op *ops = nops <= 1 ? one : malloc(nops * sizeof *ops);
    store__op *first = NULL, *last = NULL;
    int queue_grants = s->ops->grant == NULL;
    size_t direct = 0; /* valid grants the backend answers itself */

    for (size_t i = 0; i < nw; i++) {
        store_write_req *r = writes[i];
        memset(&r->res, 0, sizeof r->res);
        r->status = ops == NULL ? STORE_ENOMEM : store__validate_write(r, s->max_value_bytes);
        if (r->status == STORE_OK) {
            ops[i] = (store__op){.w = r};
            chain(&ops[i], &first, &last);
        }
    }
    for (size_t i = 0; i < ng; i++) {
        store_grant_req *g = grants[i];
        g->highest = 0;
        if (ops == NULL) {
            g->status = STORE_ENOMEM;
        } else if (!store__valid_name(g->resource) || g->token == 0 ||
                   g->token > STORE__TOKEN_MAX) {
            g->status = STORE_INVALID;
        } else {
            g->status = STORE_OK;
            /* A shared mark is checked by the writes of the batch: it always queues. */
            if (queue_grants || g->shared) {
                ops[nw + i] = (store__op){.g = g};
                chain(&ops[nw + i], &first, &last);
            } else {
                direct++;
            }
        }
    }
    for (size_t i = 0; i < nt; i++) {
        store_txn *t = txns[i];
        t->status = ops == NULL ? STORE_ENOMEM : validate_txn(s, t);
        if (t->status == STORE_OK) {
            ops[nw + ng + i] = (store__op){.t = t};
            chain(&ops[nw + ng + i], &first, &last);
        } else {
            for (size_t j = 0; ops == NULL && j < t->n; j++) {
                t->writes[j]->status = STORE_ENOMEM;
            }
        }
    }
    if (first != NULL || direct > 0) {
        call_begin(s);
        if (first != NULL) {
            store__group_run(&s->group, first, last);
        }
        for (size_t i = 0; direct > 0 && i < ng; i++) {
            store_grant_req *g = grants[i];
            if (g->status == STORE_OK && !g->shared) {
                g->status = s->ops->grant(s->impl, g->resource, g->token, g->holder,
                                          &g->highest);
            }
        }
        call_end(s);
    }
    if (ops != one) {
        free(ops);
    }
}

int store_grant_needed(store *s, uint64_t token)
{
    (void)token;
    return s->ops->grant_needed;
}

store_status store_secret(store *s, unsigned char out[STORE_SECRET_LEN], char *err,
                          size_t errlen)
{
    call_begin(s);
    store_status st = s->ops->secret(s->impl, out, err, errlen);
    call_end(s);
    return st;
}

void store_get_stats(store *s, store_stats *out)
{
    store__group_stats(&s->group, out);
}

int store__env_flags(store *s, unsigned int *flags)
{
    if (s->ops != &store__lmdb_ops) {
        return -1;
    }
    return store__lmdb_env_flags(s->impl, flags);
}
