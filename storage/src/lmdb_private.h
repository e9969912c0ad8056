/* The LMDB backend's state, shared by lmdb.c and lmdb_commit.c. Never installed. */
#ifndef STORAGE_LMDB_PRIVATE_H
#define STORAGE_LMDB_PRIVATE_H

#include <pthread.h>
#include <stdatomic.h>

#include <lmdb.h>

#include "group.h"
#include "storage_internal.h"

typedef struct store__lmdb {
    MDB_env *env;
    MDB_dbi resources;          /* resource name -> store__record */
    MDB_dbi meta;               /* "ledger.ceiling" -> u64 */
    MDB_dbi shared;             /* resource name -> u64 shared mark (little-endian): the
                                 * largest token granted in shared mode for it */
    store_options opts;
    int lock_fd;                /* DIR/fencegate.lock, flocked until store_close */

    /* Token ledger. */
    pthread_mutex_t ledger_mu;  /* serialises raises of the ceiling */
    _Atomic uint64_t ceiling;   /* durable R */
    uint64_t floor;             /* R_prev, fixed at open */
} store__lmdb;

/* Maps an LMDB error to a status. */
store_status store__mdb_status(int rc);

/* Runs one group-commit batch of writes (lmdb_commit.c): the backend's run_batch. */
void store__lmdb_run_batch(void *impl, store__op *batch, store__counts *counts);

#endif
