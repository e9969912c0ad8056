/*
 * LMDB: token-checked writes, one group-commit batch (group.h) per write transaction.
 *
 * The batch's requests run in one LMDB write transaction that commits once (one fsync).
 * Inside it each request is checked against the state left by the requests before it, so two
 * writes to one resource in one batch are ordered like two transactions. A STALE or
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
 * synced, so a reopened store holds either none or all of the batch (see lmdb.c). The
 * callers are woken only after the commit returned (group.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lmdb_private.h"

/* Checks one request against the transaction's current state and, when accepted, puts the
 * new record. Returns the MDB error of the put (0 when nothing failed). */
static int apply(store__lmdb *s, MDB_txn *txn, store_write_req *r)
{
    MDB_val key = {strlen(r->resource), (void *)r->resource};
    MDB_val val;
    store__record rec;
    int rc = mdb_get(txn, s->resources, &key, &val);

    memset(&r->res, 0, sizeof r->res);
    if (rc == MDB_NOTFOUND) {
        memset(&rec, 0, sizeof rec);
    } else if (rc != 0) {
        r->status = store__mdb_status(rc);
        return 0;
    } else if (store__record_decode(val.mv_data, val.mv_size, &rec) != 0) {
        r->status = STORE_EIO; /* never overwrite a record we cannot read */
        return 0;
    }
    r->res.highest_token = rec.highest_token;
    /* Stale first: a token below one that has written is refused as stale whatever the
     * issuer says now. After Redis lost its counter, last_issued reads low and a real old
     * token would otherwise be called never issued (403) where its holder needs to hear
     * that it was fenced off (409). A forged token below the high-water mark is refused
     * just the same; it moves nothing either way. */
    if (r->token < rec.highest_token) {
        r->status = STORE_STALE;
        return 0;
    }
    if (r->token > r->last_issued) {
        /* A forged or mistyped token must not raise the high-water mark and lock out the
         * real holders. */
        r->status = STORE_UNKNOWN_TOKEN;
        return 0;
    }
    rec.highest_token = r->token;
    rec.token = r->token;
    rec.version++;
    rec.written_at_ms = store__wall_ms();
    rec.deleted = 0;
    rec.data = r->data;
    rec.len = r->len;
    snprintf(rec.content_type, sizeof rec.content_type, "%s",
             r->content_type != NULL ? r->content_type : "");
    /* MDB_RESERVE: LMDB hands us the space in the page, we encode straight into it. */
    val.mv_size = store__record_size(&rec);
    rc = mdb_put(txn, s->resources, &key, &val, MDB_RESERVE);
    if (rc != 0) {
        r->status = store__mdb_status(rc);
        return rc;
    }
    store__record_encode(&rec, val.mv_data);
    r->status = STORE_ACCEPTED;
    r->res.highest_token = rec.highest_token;
    r->res.version = rec.version;
    return 0;
}

/* Runs the requests [first, end) of a batch list in one write transaction. Returns the MDB
 * error that ended it, 0 when it committed (or had nothing to commit). */
static int run_txn(store__lmdb *s, store__op *first, store__op *end, store__counts *counts)
{
    MDB_txn *txn = NULL;
    uint64_t count = 0;
    int accepted = 0;
    int rc = mdb_txn_begin(s->env, NULL, 0, &txn);

    for (store__op *o = first; o != end; o = o->next) {
        if (rc != 0) {
            o->w->status = store__mdb_status(rc);
            continue;
        }
        rc = apply(s, txn, o->w);
        count++;
        accepted |= o->w->status == STORE_ACCEPTED;
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
        for (store__op *o = first; o != end; o = o->next) {
            o->w->status = store__mdb_status(rc);
            memset(&o->w->res, 0, sizeof o->w->res);
        }
        return rc;
    }
    store__count_txn(counts, count, 1);
    return 0;
}

/* Runs a whole batch. When it does not fit (MDB_MAP_FULL: the map; MDB_TXN_FULL: too many
 * dirty pages for one transaction), the aborted transaction left the store unchanged, and
 * each request is replayed in a transaction of its own, so only those that really do not fit
 * answer FULL. Any other failure has already been given to every request of the batch. */
void store__lmdb_run_batch(void *impl, store__op *batch, store__counts *counts)
{
    store__lmdb *s = impl;
    int rc = run_txn(s, batch, NULL, counts);
    if (rc != MDB_MAP_FULL && rc != MDB_TXN_FULL) {
        return;
    }
    for (store__op *o = batch; o != NULL; o = o->next) {
        run_txn(s, o, o->next, counts);
    }
}
