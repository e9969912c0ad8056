/*
 * LMDB: token-checked writes, one group-commit batch (group.h) per write transaction.
 *
 * The batch's requests (writes, fenced deletes, transactions of several, and shared marks,
 * store_grant_req.shared, kept per resource in the "shared" database) run in one LMDB
 * write transaction that commits once (one fsync).
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

/* Reads resource's shared mark into *mark (0 when none). Returns an MDB error, or 0. */
static int read_mark(store__lmdb *s, MDB_txn *txn, const char *resource, uint64_t *mark)
{
    MDB_val key = {strlen(resource), (void *)resource};
    MDB_val val;
    int rc = mdb_get(txn, s->shared, &key, &val);

    *mark = 0;
    if (rc == MDB_NOTFOUND) {
        return 0;
    }
    if (rc != 0) {
        return rc;
    }
    if (val.mv_size != 8) {
        return MDB_CORRUPTED; /* never guess a mark: a low one would let a reader's token write */
    }
    const unsigned char *p = val.mv_data;
    for (int i = 7; i >= 0; i--) {
        *mark = (*mark << 8) | p[i];
    }
    return 0;
}

/* Raises g's resource's shared mark to g's token (no change when it is there already).
 * Returns the MDB error of the put (0 when nothing failed); *changed: something to commit. */
static int apply_mark(store__lmdb *s, MDB_txn *txn, store_grant_req *g, int *changed)
{
    uint64_t mark = 0;
    int rc = read_mark(s, txn, g->resource, &mark);

    *changed = 0;
    if (rc == 0 && mark < g->token) {
        unsigned char buf[8];
        MDB_val key = {strlen(g->resource), (void *)g->resource};
        MDB_val val = {sizeof buf, buf};
        for (int i = 0; i < 8; i++) {
            buf[i] = (unsigned char)(g->token >> (8 * i));
        }
        rc = mdb_put(txn, s->shared, &key, &val, 0);
        *changed = rc == 0;
    }
    g->status = rc == 0 ? STORE_OK : store__mdb_status(rc);
    return rc;
}

/* Reads r's record into *rec and checks r's token against it and the shared mark
 * (store__check_token): r->status is ACCEPTED when r may be written (nothing written yet),
 * else the refusal or the read's error. rec's value is not kept: put() replaces it. */
static void check(store__lmdb *s, MDB_txn *txn, store_write_req *r, store__record *rec)
{
    MDB_val key = {strlen(r->resource), (void *)r->resource};
    MDB_val val;
    int rc = mdb_get(txn, s->resources, &key, &val);

    memset(&r->res, 0, sizeof r->res);
    if (rc == MDB_NOTFOUND) {
        memset(rec, 0, sizeof *rec);
    } else if (rc != 0) {
        r->status = store__mdb_status(rc);
        return;
    } else if (store__record_decode(val.mv_data, val.mv_size, rec) != 0) {
        r->status = STORE_EIO; /* never overwrite a record we cannot read */
        return;
    }
    uint64_t mark = 0;
    rc = read_mark(s, txn, r->resource, &mark);
    if (rc != 0) {
        r->status = store__mdb_status(rc);
        return;
    }
    r->res.highest_token = rec->highest_token;
    r->status = store__check_token(r->token, rec->highest_token, r->last_issued, mark);
    if (r->status == STORE_NOT_EXCLUSIVE) {
        r->res.shared_mark = mark;
    }
}

/* Puts r's new record over rec (checked ACCEPTED): its value, or a tombstone that keeps the
 * token as the highest. Returns the MDB error of the put (0 when it went in). */
static int put(store__lmdb *s, MDB_txn *txn, store_write_req *r, store__record *rec)
{
    MDB_val key = {strlen(r->resource), (void *)r->resource};
    MDB_val val;

    r->res.shared_mark = 0;
    rec->highest_token = r->token;
    rec->token = r->token;
    rec->version++;
    rec->written_at_ms = store__wall_ms();
    rec->deleted = r->del != 0;
    rec->data = r->del ? NULL : r->data;
    rec->len = r->del ? 0 : r->len;
    snprintf(rec->content_type, sizeof rec->content_type, "%s",
             !r->del && r->content_type != NULL ? r->content_type : "");
    /* MDB_RESERVE: LMDB hands us the space in the page, we encode straight into it. */
    val.mv_size = store__record_size(rec);
    int rc = mdb_put(txn, s->resources, &key, &val, MDB_RESERVE);
    if (rc != 0) {
        r->status = store__mdb_status(rc);
        return rc;
    }
    store__record_encode(rec, val.mv_data);
    r->status = STORE_ACCEPTED;
    r->res.highest_token = rec->highest_token;
    r->res.version = rec->version;
    return 0;
}

/* Checks one write against the transaction's current state and, when accepted, puts it.
 * Returns the MDB error of the put (0 when nothing failed). */
static int apply(store__lmdb *s, MDB_txn *txn, store_write_req *r)
{
    store__record rec;
    check(s, txn, r, &rec);
    return r->status == STORE_ACCEPTED ? put(s, txn, r, &rec) : 0;
}

/* A transaction: every write checked first, against the state the requests before it left;
 * only when all pass are they all put. Nothing else runs in between (LMDB has one writer),
 * so the check holds for the puts. A refusal changes nothing: the refused writes keep their
 * answer, those that passed say OK. Returns the MDB error of a put (0 when none failed):
 * the caller then aborts the LMDB transaction, so none of it happened. */
static int apply_txn(store__lmdb *s, MDB_txn *txn, store_txn *t)
{
    store__record recs[STORE_TXN_MAX];

    for (size_t i = 0; i < t->n; i++) {
        check(s, txn, t->writes[i], &recs[i]);
    }
    if (store__txn_verdict(t) != STORE_ACCEPTED) {
        return 0;
    }
    for (size_t i = 0; i < t->n; i++) {
        int rc = put(s, txn, t->writes[i], &recs[i]);
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}

/* Answers every write of op with st (nothing of it happened). */
static void fail_op(store__op *o, store_status st)
{
    if (o->g != NULL) {
        o->g->status = st;
        return;
    }
    if (o->t == NULL) {
        o->w->status = st;
        memset(&o->w->res, 0, sizeof o->w->res);
        return;
    }
    o->t->status = st;
    for (size_t i = 0; i < o->t->n; i++) {
        o->t->writes[i]->status = st;
        memset(&o->t->writes[i]->res, 0, sizeof o->t->writes[i]->res);
    }
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
            fail_op(o, store__mdb_status(rc));
            continue;
        }
        if (o->g != NULL) {
            int changed = 0;
            rc = apply_mark(s, txn, o->g, &changed); /* only shared marks queue here */
            accepted |= changed;
        } else if (o->t != NULL) {
            rc = apply_txn(s, txn, o->t);
            count += o->t->n;
            accepted |= o->t->status == STORE_ACCEPTED;
        } else {
            rc = apply(s, txn, o->w);
            count++;
            accepted |= o->w->status == STORE_ACCEPTED;
        }
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
            fail_op(o, store__mdb_status(rc));
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
