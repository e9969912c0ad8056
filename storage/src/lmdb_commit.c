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
 * synced, so a reopened store holds either none or all of the batch (see lmdb.c). A
 * follower is woken only after the leader's commit returned.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "lmdb_private.h"

/* A write in the group-commit queue: the caller's request, answered in place. */
struct store__wreq {
    store_write_req *r;
    int done;
    store__wreq *next;
};

/* Checks one request against the transaction's current state and, when accepted, puts the
 * new record. Returns the MDB error of the put (0 when nothing failed). */
static int apply(store__lmdb *s, MDB_txn *txn, store__wreq *w)
{
    MDB_val key = {strlen(w->r->resource), (void *)w->r->resource};
    MDB_val val;
    store__record rec;
    int rc = mdb_get(txn, s->resources, &key, &val);

    memset(&w->r->res, 0, sizeof w->r->res);
    if (rc == MDB_NOTFOUND) {
        memset(&rec, 0, sizeof rec);
    } else if (rc != 0) {
        w->r->status = store__mdb_status(rc);
        return 0;
    } else if (store__record_decode(val.mv_data, val.mv_size, &rec) != 0) {
        w->r->status = STORE_EIO; /* never overwrite a record we cannot read */
        return 0;
    }
    w->r->res.highest_token = rec.highest_token;
    /* Stale first: a token below one that has written is refused as stale whatever the
     * issuer says now. After Redis lost its counter, last_issued reads low and a real old
     * token would otherwise be called never issued (403) where its holder needs to hear
     * that it was fenced off (409). A forged token below the high-water mark is refused
     * just the same; it moves nothing either way. */
    if (w->r->token < rec.highest_token) {
        w->r->status = STORE_STALE;
        return 0;
    }
    if (w->r->token > w->r->last_issued) {
        /* A forged or mistyped token must not raise the high-water mark and lock out the
         * real holders. */
        w->r->status = STORE_UNKNOWN_TOKEN;
        return 0;
    }
    rec.highest_token = w->r->token;
    rec.token = w->r->token;
    rec.version++;
    rec.written_at_ms = store__wall_ms();
    rec.deleted = 0;
    rec.data = w->r->data;
    rec.len = w->r->len;
    snprintf(rec.content_type, sizeof rec.content_type, "%s",
             w->r->content_type != NULL ? w->r->content_type : "");
    /* MDB_RESERVE: LMDB hands us the space in the page, we encode straight into it. */
    val.mv_size = store__record_size(&rec);
    rc = mdb_put(txn, s->resources, &key, &val, MDB_RESERVE);
    if (rc != 0) {
        w->r->status = store__mdb_status(rc);
        return rc;
    }
    store__record_encode(&rec, val.mv_data);
    w->r->status = STORE_ACCEPTED;
    w->r->res.highest_token = rec.highest_token;
    w->r->res.version = rec.version;
    return 0;
}

/* Runs the requests [first, end) of a batch list in one write transaction. Returns the MDB
 * error that ended it, 0 when it committed (or had nothing to commit). */
static int run_txn(store__lmdb *s, store__wreq *first, store__wreq *end)
{
    MDB_txn *txn = NULL;
    uint64_t count = 0;
    int accepted = 0;
    int rc = mdb_txn_begin(s->env, NULL, 0, &txn);

    for (store__wreq *w = first; w != end; w = w->next) {
        if (rc != 0) {
            w->r->status = store__mdb_status(rc);
            continue;
        }
        rc = apply(s, txn, w);
        count++;
        accepted |= w->r->status == STORE_ACCEPTED;
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
            w->r->status = store__mdb_status(rc);
            memset(&w->r->res, 0, sizeof w->r->res);
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
static void run_batch(store__lmdb *s, store__wreq *batch)
{
    int rc = run_txn(s, batch, NULL);
    if (rc != MDB_MAP_FULL && rc != MDB_TXN_FULL) {
        return;
    }
    for (store__wreq *w = batch; w != NULL; w = w->next) {
        run_txn(s, w, w->next);
    }
}

/* Queues the chain first..last (linked through next) and waits until a batch holding it has
 * run: either the batch of another leader, or the one this thread leads. The chain is
 * queued in one piece and a leader takes the whole queue, so it all runs in one batch. */
static void write_grouped(store__lmdb *s, store__wreq *first, store__wreq *last)
{
    pthread_mutex_lock(&s->mu);
    if (s->queue_tail != NULL) {
        s->queue_tail->next = first;
    } else {
        s->queue = first;
    }
    s->queue_tail = last;
    /* Not done and nobody leading means the chain is still queued: the batch of the last
     * leader was taken before it arrived. */
    while (!last->done) {
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

/* One transaction per call, serialised: the benchmark's baseline without group commit. */
static void write_alone(store__lmdb *s, store__wreq *first)
{
    pthread_mutex_lock(&s->mu);
    while (s->leading) {
        pthread_cond_wait(&s->done_cv, &s->mu);
    }
    s->leading = 1;
    pthread_mutex_unlock(&s->mu);
    run_batch(s, first);
    pthread_mutex_lock(&s->mu);
    s->leading = 0;
    pthread_cond_broadcast(&s->done_cv);
    pthread_mutex_unlock(&s->mu);
}

void store__lmdb_write_many(void *impl, store_write_req *const *reqs, size_t n)
{
    store__lmdb *s = impl;
    store__wreq *w = calloc(n > 0 ? n : 1, sizeof *w);
    store__wreq *first = NULL, *last = NULL;

    for (size_t i = 0; i < n; i++) {
        store_write_req *r = reqs[i];
        memset(&r->res, 0, sizeof r->res);
        r->status = w == NULL ? STORE_ENOMEM
                              : store__validate_write(r, s->opts.max_value_bytes);
        if (r->status != STORE_OK) {
            continue;
        }
        w[i].r = r;
        if (last != NULL) {
            last->next = &w[i];
        } else {
            first = &w[i];
        }
        last = &w[i];
    }
    if (first != NULL) { /* each queued write is answered in its own store_write_req */
        store__call_begin(s);
        if (s->opts.group_commit) {
            write_grouped(s, first, last);
        } else {
            write_alone(s, first);
        }
        store__call_end(s);
    }
    free(w);
}

void store__lmdb_grant_many(void *impl, store_grant_req *const *grants, size_t ng,
                            store_write_req *const *writes, size_t nw)
{
    if (nw > 0) {
        store__lmdb_write_many(impl, writes, nw);
    }
    /* No fsync per grant: one only when the ledger's ceiling must move (lmdb.c). */
    for (size_t i = 0; i < ng; i++) {
        grants[i]->status = store__lmdb_grant(impl, grants[i]->resource, grants[i]->token,
                                              grants[i]->holder, &grants[i]->highest);
    }
}
