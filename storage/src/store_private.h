/* The store struct, shared by store.c and commit.c. Never installed. */
#ifndef STORAGE_STORE_PRIVATE_H
#define STORAGE_STORE_PRIVATE_H

#include <pthread.h>
#include <stdatomic.h>

#include <lmdb.h>

#include "storage_internal.h"

typedef struct store__wreq store__wreq;

struct store {
    MDB_env *env;
    MDB_dbi resources;          /* resource name -> store__record */
    MDB_dbi meta;               /* "ledger.ceiling" -> u64 */
    store_options opts;

    /* Group commit (commit.c): writers queue here; one at a time leads a batch. */
    pthread_mutex_t mu;
    pthread_cond_t done_cv;
    store__wreq *queue;
    store__wreq *queue_tail;
    int leading;

    /* Token ledger. */
    pthread_mutex_t ledger_mu;  /* serialises raises of the ceiling */
    _Atomic uint64_t ceiling;   /* durable R */
    uint64_t floor;             /* R_prev, fixed at open */

    _Atomic uint64_t commits;
    _Atomic uint64_t writes;
    _Atomic uint64_t max_batch;
};

/* Maps an LMDB error to a status. */
store_status store__mdb_status(int rc);

/* Wall clock in ms, for written_at_ms. */
int64_t store__wall_ms(void);

#endif
