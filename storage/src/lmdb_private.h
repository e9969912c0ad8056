/* The LMDB backend's state, shared by lmdb.c and lmdb_commit.c. Never installed. */
#ifndef STORAGE_LMDB_PRIVATE_H
#define STORAGE_LMDB_PRIVATE_H

#include <pthread.h>
#include <stdatomic.h>

#include <lmdb.h>

#include "storage_internal.h"

typedef struct store__wreq store__wreq;
typedef struct store__lmdb store__lmdb;

struct store__lmdb {
    MDB_env *env;
    MDB_dbi resources;          /* resource name -> store__record */
    MDB_dbi meta;               /* "ledger.ceiling" -> u64 */
    store_options opts;
    int lock_fd;                /* DIR/fencegate.lock, flocked until store_close */

    /* Group commit (lmdb_commit.c): writers queue here; one at a time leads a batch. */
    pthread_mutex_t mu;
    pthread_cond_t done_cv;
    store__wreq *queue;
    store__wreq *queue_tail;
    int leading;

    /* Token ledger. */
    pthread_mutex_t ledger_mu;  /* serialises raises of the ceiling */
    _Atomic uint64_t ceiling;   /* durable R */
    uint64_t floor;             /* R_prev, fixed at open */

    /* Calls in flight, so store_close() can wait for them (store__call_begin/end). */
    pthread_mutex_t calls_mu;
    pthread_cond_t calls_cv;
    long calls;

    _Atomic uint64_t commits;
    _Atomic uint64_t writes;
    _Atomic uint64_t max_batch;
};

/* Maps an LMDB error to a status. */
store_status store__mdb_status(int rc);

/* Every public call that uses the environment brackets itself with these, so that
 * store_close() waits for calls in flight before it closes the environment. */
void store__call_begin(store__lmdb *s);
void store__call_end(store__lmdb *s);


#endif
