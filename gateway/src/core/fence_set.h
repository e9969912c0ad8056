/*
 * Fencing an acquisition of several resources at once (fence_set.c): the stripes, floors and
 * ledger of fence.c for a set, on a side thread. Goes through locklib.h and storage.h only.
 */
#ifndef GATEWAY_FENCE_SET_H
#define GATEWAY_FENCE_SET_H

#include <stddef.h>
#include <stdint.h>

#include "locklib/locklib.h"
#include "storage/storage.h"

#include "core/fence.h"

/* A set acquisition: in, the items (names, others_waiting) and the call's arguments; out,
 * the outcome. */
typedef struct gw_set_acq {
    lk_many *items;
    size_t n;
    const char *owner;
    const char *idem_key;                /* NULL for none */
    int64_t lease_ms;
    int fair;
    int shared;                          /* the whole set in shared mode */
    void (*sending)(void *arg);          /* NULL, or called with sending_arg once the set
                                          * holds its stripes, before its Redis call */
    void *sending_arg;
    lk_status lk;                        /* out: lk_acquire_many()'s; ACQUIRED with cover
                                          * STORE_OK is the only grant that may be answered */
    store_status cover;                  /* out: STORE_OK, or why a floor could not be read
                                          * (lk is then EUNAVAILABLE, nothing was sent) or a
                                          * token could not be covered (lk ACQUIRED, every
                                          * grant undone) */
    int64_t uncovered;                   /* out: the token the ledger refused (a shared set:
                                          * whose shared mark was not recorded), or 0 */
    int floor_corrections;               /* out: attempts made again above the ledger */
    char err[256];                       /* out: lk's reason when it is an error */
} gw_set_acq;

/* Acquires the set through c, blocking (a side thread, never a loop thread): holds the
 * stripes of its resources in ascending order, computes each floor, lk_acquire_many(), then
 * makes the ledger cover every token (LMDB) or grants each (a shared ledger, with the holder
 * fingerprint), counts them and passes the stripes on. A refused fresh grant is undone and
 * attempted again above the ledger's highest, as an attempt is (ops/lock.c), at most 3
 * times; any other cover failure undoes the set (lk ACQUIRED, cover not OK).
 * A shared set mints nothing, so it holds no stripe and reads no floor: it is acquired
 * (lk_acquire_many_shared) and the shared mark of every member's token is recorded in the
 * store (store_grant_req.shared) before it is answered, as for one shared grant; a mark that
 * was not recorded undoes the set (lk ACQUIRED, cover not OK, uncovered its token). */
void gw__fence_acquire_set(gw_fence *f, lk_client *c, gw_set_acq *a);

#endif
