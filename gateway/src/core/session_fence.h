/*
 * Ending a session and fencing its locks (session_fence.c): the blocking half of
 * DELETE /sessions/{id}, of the session reaper and of a /lock whose session ended as it was
 * taken, run on side threads (never a loop thread).
 */
#ifndef GATEWAY_SESSION_FENCE_H
#define GATEWAY_SESSION_FENCE_H

#include <stddef.h>

#include "core/fence.h"

/* How long an ender owns a session it began to end: a gateway killed meanwhile is taken
 * over by another's reaper once this has passed (lk_session_end's claim). */
#define GW_SESSION_CLAIM_MS 10000

typedef struct gw_session_end {
    lk_status lk;        /* lk_session_end(): RELEASED, NOT_OWNER (unknown, ended, another
                          * client's) or an error (EUNAVAILABLE: some lock was not reached;
                          * the session stays claimed, and a retry or the reaper ends it) */
    store_status store;  /* STORE_OK, or the first store_fence() failure (then the session is
                          * not forgotten: the reaper ends it again once the claim runs out) */
    size_t locks;        /* locks the session listed */
    size_t released;     /* of them, freed or fenced now (not already superseded) */
    char err[256];       /* lk_errstr() when lk is an error */
} gw_session_end;

/* Ends session id of client (NULL: the reaper, any client's) through c: every lock of it is
 * released in Redis with a token burned above it and the process's floor, each burned token
 * is counted in max_token and made durable in the store and the ledger (store_fence), and
 * only when all of that succeeded is the session forgotten. Blocking. Fills *out. */
void gw__fence_session_end(gw_fence *f, lk_client *c, const char *id, const char *client,
                           gw_session_end *out);

/* Ends one hold of token on resource as a session's end does (a lock taken in a session
 * that ended meanwhile), fencing it durably. Returns the store's status (STORE_OK when
 * nothing needed fencing) and the lock's in *lk. Blocking. */
store_status gw__fence_session_lock(gw_fence *f, lk_client *c, const char *resource,
                                    int64_t token, lk_status *lk);

/* Records the holds of items[0..n) (granted to owner: status ACQUIRED, res filled) in session
 * id of client, all or none (lk_session_add_many). When the session is gone (NOT_OWNER) or
 * full (EINVAL), each hold the grant created (holds 1, not replayed) is ended and fenced as
 * the session's end does (gw__fence_session_lock) and, once ended, marked undone (one whose
 * end failed is left to the caller to give back); a re-entry's or a replay's hold is left to
 * the caller (its token was answered before, outside the session,
 * and is not the session's to fence). Returns lk_session_add_many()'s status; *fence_st the
 * first fence storage could not record, else STORE_OK. Blocking. */
lk_status gw__fence_session_join(gw_fence *f, lk_client *c, const char *id, const char *client,
                                 const char *owner, lk_many *items, size_t n,
                                 store_status *fence_st);

#endif
