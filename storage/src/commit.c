/*
 * Token-checked writes and group commit.
 *
 * Writers queue a request and wait. Whoever finds no batch in progress becomes the leader:
 * it takes every queued request, runs them in one LMDB write transaction, commits once (one
 * fsync), and wakes them all. Requests that arrive meanwhile form the next batch. A writer
 * alone leads a batch of one at once: nobody waits for company, there is no timer.
 *
 * Inside a batch each request is checked against the state left by the requests before it,
 * so two writes to one resource in one batch are ordered like two transactions. A STALE or
 * UNKNOWN_TOKEN answer changes nothing and does not disturb the others. If the map fills up
 * (MDB_MAP_FULL), the batch is aborted and its requests are replayed one transaction each,
 * so only the writes that really do not fit answer FULL. If the commit fails for any other
 * reason (EIO, disk full: the write or fdatasync of the data pages or of the meta page
 * failed), LMDB has aborted the transaction, the previous meta page still names the previous
 * state, and every request of the batch answers EIO: nothing is acknowledged that is not on
 * disk.
 *
 * Crash at any instruction: before mdb_txn_commit returns nothing of the batch is
 * acknowledged, and LMDB's copy-on-write leaves the old meta page valid until the new one is
 * synced, so a reopened store holds either none or all of the batch (see store.c). A
 * follower is woken only after the leader's commit returned.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_private.h"

struct store__wreq {
    const char *resource;
    uint64_t token;
    const void *data;
    size_t len;
    const char *content_type;
    uint64_t last_issued;
    store_status st;
    store_write_result res;
    int done;
    store__wreq *next;
};

/* Checks one request against the transaction's current state and, when accepted, puts the
 * new record. Returns the MDB error of the put (0 when nothing failed). */
static int apply(store *s, MDB_txn *txn, store__wreq *w)
{
    MDB_val key = {strlen(w->resource), (void *)w->resource};
    MDB_val val;
    store__record rec;
    int rc = mdb_get(txn, s->resources, &key, &val);

    memset(&w->res, 0, sizeof w->res);
    if (rc == MDB_NOTFOUND) {
        memset(&rec, 0, sizeof rec);
    } else if (rc != 0) {
        w->st = store__mdb_status(rc);
        return 0;
    } else if (store__record_decode(val.mv_data, val.mv_size, &rec) != 0) {
        w->st = STORE_EIO; /* never overwrite a record we cannot read */
        return 0;
    }
    w->res.highest_token = rec.highest_token;
    /* Stale first: a token below one that has written is refused as stale whatever the
     * issuer says now. After Redis lost its counter, last_issued reads low and a real old
     * token would otherwise be called never issued (403) where its holder needs to hear
     * that it was fenced off (409). A forged token below the high-water mark is refused
     * just the same; it moves nothing either way. */
    if (w->token < rec.highest_token) {
        w->st = STORE_STALE;
        return 0;
    }
    if (w->token > w->last_issued) {
        /* A forged or mistyped token must not raise the high-water mark and lock out the
         * real holders. */
        w->st = STORE_UNKNOWN_TOKEN;
        return 0;
    }
    rec.highest_token = w->token;
    rec.token = w->token;
    rec.version++;
    rec.written_at_ms = store__wall_ms();
    rec.deleted = 0;
    rec.data = w->data;
    rec.len = w->len;
    snprintf(rec.content_type, sizeof rec.content_type, "%s",
             w->content_type != NULL ? w->content_type : "");
    /* MDB_RESERVE: LMDB hands us the space in the page, we encode straight into it. */
    val.mv_size = store__record_size(&rec);
    rc = mdb_put(txn, s->resources, &key, &val, MDB_RESERVE);
    if (rc != 0) {
        w->st = store__mdb_status(rc);
        return rc;
    }
    store__record_encode(&rec, val.mv_data);
    w->st = STORE_ACCEPTED;
    w->res.highest_token = rec.highest_token;
    w->res.version = rec.version;
    return 0;
}

/* Runs the requests [first, end) of a batch list in one write transaction. Returns the MDB
 * error that ended it, 0 when it committed (or had nothing to commit). */
static int run_txn(store *s, store__wreq *first, store__wreq *end)
{
    MDB_txn *txn = NULL;
    uint64_t count = 0;
    int accepted = 0;
    int rc = mdb_txn_begin(s->env, NULL, 0, &txn);

    for (store__wreq *w = first; w != end; w = w->next) {
        if (rc != 0) {
            w->st = store__mdb_status(rc);
            continue;
        }
        rc = apply(s, txn, w);
        count++;
        accepted |= w->st == STORE_ACCEPTED;
    }
    if (txn == NULL) {
        return rc;
    }
    if (rc == 0 && !accepted) {
        mdb_txn_abort(txn); /* only refusals: nothing to make durable */
        return 0;
    }
    if (rc == 0) {
        rc = mdb_txn_commit(txn);
    } else {
        mdb_txn_abort(txn); /* a failed put: nothing of this transaction happened */
    }
    if (rc != 0) {
        /* Every request of the batch gets the error, refusals too: a STALE answer may name
         * a highest token that an earlier request of this very transaction put, and that
         * is now not on disk. */
        for (store__wreq *w = first; w != end; w = w->next) {
            w->st = store__mdb_status(rc);
            memset(&w->res, 0, sizeof w->res);
        }
        return rc;
    }
    atomic_fetch_add(&s->commits, 1);
    atomic_fetch_add(&s->writes, count);
    uint64_t max = atomic_load(&s->max_batch);
    while (count > max && !atomic_compare_exchange_weak(&s->max_batch, &max, count)) {
    }
    return 0;
}

/* Runs a whole batch. When it does not fit (MDB_MAP_FULL: the map; MDB_TXN_FULL: too many
 * dirty pages for one transaction), the aborted transaction left the store unchanged, and
 * each request is replayed in a transaction of its own, so only those that really do not fit
 * answer FULL. Any other failure has already been given to every request of the batch. */
static void run_batch(store *s, store__wreq *batch)
{
    int rc = run_txn(s, batch, NULL);
    if (rc != MDB_MAP_FULL && rc != MDB_TXN_FULL) {
        return;
    }
    for (store__wreq *w = batch; w != NULL; w = w->next) {
        run_txn(s, w, w->next);
    }
}

static store_status validate(store *s, const char *resource, uint64_t token, const void *data,
                             size_t len, const char *content_type)
{
    if (!store__valid_name(resource) || token == 0 || token >= STORE__TOKEN_LIMIT ||
        (data == NULL && len > 0) || !store__valid_content_type(content_type)) {
        return STORE_INVALID;
    }
    if (len > s->opts.max_value_bytes) {
        return STORE_TOO_LARGE;
    }
    return STORE_OK;
}

/* Queues w and waits until a batch holding it has run: either the batch of another leader,
 * or the one this thread leads. */
static void write_grouped(store *s, store__wreq *w)
{
    pthread_mutex_lock(&s->mu);
    if (s->queue_tail != NULL) {
        s->queue_tail->next = w;
    } else {
        s->queue = w;
    }
    s->queue_tail = w;
    /* Not done and nobody leading means w is still queued: the batch of the last leader
     * was taken before w arrived. */
    while (!w->done) {
        if (s->leading) {
            pthread_cond_wait(&s->done_cv, &s->mu);
            continue;
        }
        /* Lead: take the whole queue (ours included) and commit it as one. */
        store__wreq *batch = s->queue;
        s->queue = NULL;
        s->queue_tail = NULL;
        s->leading = 1;
        pthread_mutex_unlock(&s->mu);
        run_batch(s, batch);
        pthread_mutex_lock(&s->mu);
        for (store__wreq *b = batch; b != NULL;) {
            store__wreq *next = b->next; /* b may return and vanish once done is set */
            b->done = 1;
            b = next;
        }
        s->leading = 0;
        pthread_cond_broadcast(&s->done_cv);
    }
    pthread_mutex_unlock(&s->mu);
}

/* One transaction per write, serialised: the benchmark's baseline without group commit. */
static void write_alone(store *s, store__wreq *w)
{
    pthread_mutex_lock(&s->mu);
    while (s->leading) {
        pthread_cond_wait(&s->done_cv, &s->mu);
    }
    s->leading = 1;
    pthread_mutex_unlock(&s->mu);
    run_batch(s, w);
    pthread_mutex_lock(&s->mu);
    s->leading = 0;
    pthread_cond_broadcast(&s->done_cv);
    pthread_mutex_unlock(&s->mu);
}

store_status store_write(store *s, const char *resource, uint64_t token, const void *data,
                         size_t len, const char *content_type, uint64_t last_issued,
                         store_write_result *res)
{
    store__wreq w;

    if (res != NULL) {
        memset(res, 0, sizeof *res);
    }
    store_status st = validate(s, resource, token, data, len, content_type);
    if (st != STORE_OK) {
        return st;
    }
    memset(&w, 0, sizeof w);
    w.resource = resource;
    w.token = token;
    w.data = data;
    w.len = len;
    w.content_type = content_type;
    w.last_issued = last_issued;

    store__call_begin(s);
    if (s->opts.group_commit) {
        write_grouped(s, &w);
    } else {
        write_alone(s, &w);
    }
    store__call_end(s);
    if (res != NULL) {
        *res = w.res;
    }
    return w.st;
}
