/*
 * Fencing tokens (fence.c): the floor of an acquisition, what happens when a token is minted,
 * and the verdict on a write's token. Goes through storage.h and locklib.h only: no HTTP, no
 * libmicrohttpd, no thread of its own. The argument for why tokens are safe is in fence.c.
 */
#ifndef GATEWAY_FENCE_H
#define GATEWAY_FENCE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "locklib/locklib.h"
#include "storage/storage.h"

#define GW_FLOOR_STRIPES 1024

/* A place in a stripe's line of acquisitions; embedded in the caller's state, which stays
 * alive while it is queued. */
typedef struct gw_fence_turn {
    struct gw_fence_turn *next;
} gw_fence_turn;

/* Acquisitions of the resources of one stripe run one at a time, from computing the floor
 * until the token is counted in max_token. The mutex guards only this state. */
typedef struct gw_stripe {
    pthread_mutex_t mu;
    int busy;                            /* an acquisition holds the stripe */
    gw_fence_turn *first, *last;         /* acquisitions waiting for it, in arrival order */
} gw_stripe;

typedef struct gw_fence {
    store *st;                           /* the ledger and each resource's highest token */
    atomic_llong max_token;              /* the largest token this process has handed out */
    gw_stripe stripes[GW_FLOOR_STRIPES];
} gw_fence;

/* Sets up f over the open store st (not owned). */
void gw__fence_init(gw_fence *f, store *st);

/* Asks for the stripe of `resource` for an acquisition. Returns 1 when the caller holds it
 * now, or 0 when t was queued: gw__fence_leave() of the acquisition before it returns t,
 * which then holds it. Never blocks beyond the stripe's mutex. */
int gw__fence_enter(gw_fence *f, const char *resource, gw_fence_turn *t);

/* The floor to pass locklib for an acquisition of `resource`, computed by the caller while
 * it holds the stripe. Returns STORE_OK, or the storage error (then no acquisition may be
 * sent: the token could not be fenced). */
store_status gw__fence_floor(gw_fence *f, const char *resource, int64_t *floor);

/* Ends the stripe's acquisition: counts minted (the token of an ACQUIRED answer, 0 when
 * none) in max_token, then passes the stripe on. Returns the next turn, which holds the
 * stripe now, or NULL when the stripe is free. */
gw_fence_turn *gw__fence_leave(gw_fence *f, const char *resource, int64_t minted);

/* Before a token leaves this process (also a replayed one): makes the ledger's durable
 * ceiling cover it. STORE_OK, or an error: then the token must not be handed out. */
store_status gw__fence_cover(gw_fence *f, int64_t token);

/* The verdict on a write's token, before storage sees it. */
typedef enum gw_verdict {
    GW_VERDICT_WRITE,        /* go on: storage checks it again, atomically with the write */
    GW_VERDICT_STALE,        /* below the highest token that has written the resource */
    GW_VERDICT_UNKNOWN,      /* never issued for the resource (or long superseded) */
    GW_VERDICT_SUPERSEDED,   /* a larger token was minted since: its lease is over */
    GW_VERDICT_STORE_FAILED  /* storage could not be read */
} gw_verdict;

/* Judges `token` for a write of `resource` from check, an LK_CALL_TOKEN_CHECK for it that
 * answered LK_OK (its base, last and recent). *highest gets the highest token that has
 * written the resource when the verdict needed it (it is left alone for WRITE); *st the
 * storage error for STORE_FAILED. For WRITE, the write goes to storage with last_issued =
 * check->last. */
gw_verdict gw__fence_verdict(gw_fence *f, const char *resource, uint64_t token,
                             const lk_call *check, uint64_t *highest, store_status *st);

#endif
