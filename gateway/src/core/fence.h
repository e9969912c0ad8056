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

#include "base/list.h"
#include "core/job.h"

#define GW_FLOOR_STRIPES 1024

/* A place in a stripe's line of acquisitions; embedded in the caller's state, which stays
 * alive from gw__fence_enter() until its turn has ended (gw__fence_answered() or
 * gw__fence_leave()) and, on a shared ledger, its grant is done (gw__fence_granted()). */
typedef struct gw_fence_turn {
    gw_qlink link;                       /* in its stripe's line */
    const char *resource;                /* what it acquires */
    const char *owner;                   /* for whom: keys its holder fingerprint */
    int64_t min_floor;                   /* the floor is at least this (0: none): the ledger's
                                          * highest after a refused grant */
    uint64_t granted;                    /* out: on a STALE cover, the ledger's highest */
    store_grant_req grant;               /* the shared ledger's grant of its token */
    unsigned char holder[STORE_HOLDER_LEN]; /* the grant's holder fingerprint */
    unsigned char refused;               /* for the caller: why it was not sent, or 0 */
    struct gw_fence_sync *sync;          /* a blocking holder's (gw__fence_hold), else NULL */
    unsigned char cover;                 /* out (store_status): the ledger's cover (LMDB) or
                                          * grant (shared ledger) of the token an ACQUIRED
                                          * answer brought, STORE_OK when covered or granted
                                          * or when there was no token; STALE: the shared
                                          * ledger holds this token or a larger one for
                                          * another holder */
} gw_fence_turn;

/* What a granted turn may pass locklib, computed while the turn is held. status is
 * STORE_OK, or the storage error that kept the floor from being read: then no acquisition
 * may be sent (its token could not be fenced). */
typedef struct gw_floor {
    int64_t floor;
    store_status status;
} gw_floor;

/* Acquisitions of the resources of one stripe run one at a time, from computing the floor
 * until the token is counted in max_token. The mutex guards only this state. */
typedef struct gw_stripe {
    pthread_mutex_t mu;
    int busy;                            /* an acquisition holds the stripe */
    gw_queue line;                       /* acquisitions waiting for it, in arrival order */
} gw_stripe;

typedef struct gw_fence gw_fence;

/* What the fence calls back in the owner of the turns (ops/lock_attempt.c), set once. */
typedef struct gw_fence_ops {
    /* t holds its stripe with floor: send its attempt to the Redis pipeline as a job with
     * done = gw__fence_answered, arg = t and ctx = the fence, or answer it without Redis
     * and pass the stripe on (gw__fence_leave). */
    void (*send)(gw_fence *f, gw_fence_turn *t, gw_floor floor);
    /* On the pipeline thread: t's attempt was answered HELD, and t still holds its stripe.
     * May be NULL. */
    void (*held)(gw_fence *f, gw_fence_turn *t);
    /* On the pipeline thread: Redis answered t's attempt LK_ACQUIRED (call), before its
     * token is covered or granted, the stripe passes on and the connection resumes. A hold
     * whose cover or grant then fails is given back, and its release publishes when the
     * lock was marked wanted. May be NULL. */
    void (*acquired)(gw_fence *f, gw_fence_turn *t, const lk_call *call);
    /* On the pipeline thread: submit job (its grant filled, done = gw__fence_granted) to the
     * storage writer, which runs done and resumes the connection; t and job may be freed
     * once it is submitted. The stripe passes on right after (gw__fence_answered). */
    void (*grant)(gw_fence *f, gw_job *job);
} gw_fence_ops;

struct gw_fence {
    store *st;                           /* the ledger and each resource's highest token */
    const gw_fence_ops *ops;
    void *owner;                         /* for ops: the runtime (gw_rt) */
    atomic_llong max_token;              /* the largest token this process has handed out */
    const unsigned char *holder_key;     /* 16 bytes (the owner secret) keying the holder
                                          * fingerprints; set by the owner before the first
                                          * acquisition, not by gw__fence_init() */
    gw_stripe stripes[GW_FLOOR_STRIPES];
};

/* Sets up f over the open store st (not owned), calling back ops with owner. */
void gw__fence_init(gw_fence *f, store *st, const gw_fence_ops *ops, void *owner);

/* Asks for the turn of t->resource's stripe for an acquisition. Returns 1 when t holds it
 * now, with its floor in *floor; or 0 when t was queued: the gw__fence_leave() of the turn
 * before it returns t, which then holds it, with its floor. Never blocks beyond the
 * stripe's mutex and the floor's storage read. */
int gw__fence_enter(gw_fence *f, gw_fence_turn *t, gw_floor *floor);

/* Ends t's turn: counts minted (the token of an ACQUIRED answer, 0 when none) in max_token,
 * then passes the stripe on. Returns the next turn, which holds the stripe now, with its
 * floor in *next_floor; or NULL when the stripe is free. */
gw_fence_turn *gw__fence_leave(gw_fence *f, gw_fence_turn *t, int64_t minted,
                               gw_floor *next_floor);

/* Counts a token minted under a turn that t's own answer does not bring: a release that
 * handed the lock to a waiter in its script, with the floor of the turn of the attempt sent
 * right behind it (ops/lock_attempt.c, "Hand-offs"). Called on the pipeline thread before
 * that attempt's answer ends the turn, so the next floor on the stripe covers it whoever the
 * waiter was. */
void gw__fence_count(gw_fence *f, int64_t minted);

/* The done of an attempt's job, on the pipeline thread (job->arg the turn, job->ctx the
 * fence): an ACQUIRED answer's token (also a replayed one) is covered by the ledger's
 * durable ceiling, the outcome in turn->cover (not STORE_OK: the token must not be handed
 * out), and counted; a HELD answer calls ops->held; then the stripe passes on, and the next
 * turn is sent (ops->send). Returns 1: the pipeline resumes the attempt's connection.
 * On a shared ledger (store_grant_needed) an ACQUIRED answer's token is granted instead:
 * it is counted, the job goes on to the storage writer (ops->grant) with done =
 * gw__fence_granted, then the stripe passes on and the next turn is sent, and this returns 0
 * (the writer resumes the connection). */
int gw__fence_answered(gw_job *job);

/* The done of a grant job, on the storage writer: the grant's outcome in turn->cover (and
 * turn->granted). Returns 1. */
int gw__fence_granted(gw_job *job);

/* Holding stripes from a side thread (fence_set.c), for an acquisition of several
 * resources at once. gw__fence_hold blocks until t (t->sync set, t->resource its name) holds
 * its stripe: at once when free, else when the turn before it leaves; unlike an attempt's
 * turn it is never sent (ops->send) and computes its floors itself (gw__fence_floor). Taken
 * in ascending stripe order (gw__fence_stripe) by every such holder, and never held by an
 * attempt while it waits for another, so stripes never wait in a cycle. gw__fence_unhold
 * counts minted and passes the stripe on as gw__fence_leave does, sending the next turn. */
typedef struct gw_fence_sync {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int granted;
} gw_fence_sync;
int gw__fence_stripe(const gw_fence *f, const char *resource);
void gw__fence_hold(gw_fence *f, gw_fence_turn *t);
void gw__fence_unhold(gw_fence *f, gw_fence_turn *t, int64_t minted);
/* The floor of an acquisition of resource (its stripe held), and the holder fingerprint a
 * shared ledger records for (resource, owner): what an attempt's turn gets (fence.c). */
store_status gw__fence_floor(gw_fence *f, const char *resource, int64_t min_floor,
                             int64_t *floor);
void gw__fence_holder(const gw_fence *f, const char *resource, const char *owner,
                      unsigned char out[STORE_HOLDER_LEN]);

/* What a forced release did (gw__fence_force). */
typedef struct gw_forced {
    lk_status lk;                        /* lk_force_release(): RELEASED, NOT_OWNER or error */
    store_status store;                  /* the floor read and store_fence(): STORE_OK, or
                                          * the error (then the fence is not durable) */
    int64_t token;                       /* RELEASED: the released hold's token */
    int64_t fenced_by;                   /* RELEASED: the burned token above it */
    int published;                       /* RELEASED: a release message went out */
} gw_forced;

/* A forced release of resource through c (blocking: a Redis call and a store commit; on a
 * side thread, never a loop thread): with the floor an acquisition would get, locklib frees
 * the lock and burns a token F above its holder's token T and the floor
 * (lk_force_release()); F is counted in max_token, then store_fence() makes the store refuse
 * every write below F and the ledger cover F, durably, before the caller answers. So T is
 * refused whatever Redis loses later, through any gateway of a shared store, and the next
 * grant is above F. When nothing is held, the store is fenced below the last token issued
 * (already superseded), which completes an earlier release whose store_fence() failed.
 * Fills *out. */
void gw__fence_force(gw_fence *f, lk_client *c, const char *resource, gw_forced *out);

/* The verdict on a write's token, before storage sees it. */
typedef enum gw_verdict {
    GW_VERDICT_WRITE,        /* go on: storage checks it again, atomically with the write */
    GW_VERDICT_STALE,        /* below the highest token that has written the resource */
    GW_VERDICT_UNKNOWN,      /* never issued for the resource (or long superseded) */
    GW_VERDICT_SUPERSEDED,   /* a larger token was minted since: its lease is over */
    GW_VERDICT_STORE_FAILED  /* storage could not be read */
} gw_verdict;

/* A write's token is judged from check, an LK_CALL_TOKEN_CHECK for its resource that
 * answered LK_OK (its base, last and recent). A token the check shows current is WRITE at
 * once: the write goes to storage with last_issued = check->last. Any other is refused, and
 * the refusal reads the highest token that has written the resource. */
/* 1 when the verdict reads storage (a refusal, which names the highest token): it must then
 * run off the loop threads, on a store reader (gw__fence_verdict_many). 0 when the verdict
 * is WRITE without reading anything. */
int gw__fence_verdict_reads(uint64_t token, const lk_call *check);

/* One verdict for gw__fence_verdict_many(): in resource, token and check; out the verdict,
 * the highest token written (read for it) and st, the storage status of that read (the
 * error for STORE_FAILED). */
typedef struct gw_verdict_req {
    const char *resource;
    uint64_t token;
    const lk_call *check;
    gw_verdict verdict;
    uint64_t highest;
    store_status st;
} gw_verdict_req;

/* The verdict of each of reqs[0..n), reading the highest token written once per
 * distinct resource: a paused client's stale writes come in floods on one resource, and
 * each read may be a PostgreSQL round trip. A read shared by later requests of the batch is
 * as fresh as their own would be (it was made after they arrived), and the highest token
 * only grows. On a store reader thread, never a loop thread. */
void gw__fence_verdict_many(gw_fence *f, gw_verdict_req *const *reqs, size_t n);

/* A fenced read's verdict (gw__fence_read_verdict): in resource, token and check (its
 * LK_CALL_TOKEN_CHECK, answered LK_OK); out the newest token minted as far as Redis's counter
 * and the ledger know (superseded_by), the highest token written when a refusal read it, and
 * st, the storage status of the reads (the error for STORE_FAILED). */
typedef struct gw_read_verdict {
    const char *resource;
    uint64_t token;
    const lk_call *check;
    uint64_t newest;
    uint64_t highest;
    store_status st;
} gw_read_verdict;

/* The verdict on a fenced read's token: WRITE (the value may be answered) only when no token
 * above it was minted for the resource, SUPERSEDED (or STALE, as for a write) when one was,
 * UNKNOWN for a token never issued. Every token is minted in Redis, and on a shared store
 * recorded in the ledger, before its grant is answered: a read whose check was sent after a
 * newer grant was answered sees it in the counter, or in the ledger (store_ledger_granted)
 * when Redis lost it. Reads storage (the ledger; the highest token written for a refusal),
 * so it runs on a store reader, never a loop thread. */
gw_verdict gw__fence_read_verdict(gw_fence *f, gw_read_verdict *r);

#endif
