/*
 * The wait queue's inside (waiters.c, waitq.c, waitd.c): its resources, its state and what
 * its files call of each other. Never included outside rt/. The state machine and why a
 * wake-up cannot be missed are in waiters.c.
 */
#ifndef GATEWAY_WAITERS_INTERNAL_H
#define GATEWAY_WAITERS_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "locklib/locklib.h"

#include "base/list.h"
#include "rt/runtime.h"
#include "rt/timer_heap.h"
#include "rt/waiter.h"

#define WQ_BUCKETS 4096
#define WQ_EVENTS 64
#define WQ_RECONNECT_MIN_MS 100
#define WQ_RECONNECT_MAX_MS 2000
/* Release messages with a token a resource remembers ("Missed wake-ups"). */
#define WQ_RING 8
/* How long a hand-off's credit waits for its release message (see "Hand-offs"): far more
 * than a message takes, far less than a lease. */
#define WQ_CREDIT_MS 1000
/* The naps of a waiter whose held answer names a hold reported released ("Settling"). */
#define WQ_SETTLE_MIN_MS 10
#define WQ_SETTLE_MAX_MS 100
/* The most joins of one resource's fair waiters out at once: a join carries a Redis call
 * from the moment it is sent, where an attempt waiting for its stripe's turn carries none,
 * so a crowd arriving at once would otherwise hold a call each. Past it new requests
 * attempt, in turn (ops/lock_attempt.c, "Fair joins"). */
#define WQ_JOINS_MAX 32
/* A fair waiter behind the first in line that parked past releases looks again at the
 * latest this long after ("Fair waiters behind the first"): the fair queue's own poll of a
 * free lock (locklib's fair_acquire.lua, HEAD_POLL_MS). */
#define WQ_BEHIND_CHECK_MS 1000
/* A grant to a waiter not parked here (rt/waitq.c, on_grant): the waiters here look at the
 * lock again this long after, in case it is never claimed. */
#define WQ_GRANT_CHECK_MS 1000

enum { TIMER_WAITER, TIMER_EXPIRY };

/* A resource with parked or attempting waiters. Freed when its last reference goes. */
struct gw_wres {
    char name[LK_RESOURCE_MAX + 1];
    struct gw_wres *hnext;             /* hash chain */
    gw_dlist queue;                    /* parked waiters, in arrival order */
    int refs;                          /* waiters between gw__wait_begin and their end */
    uint64_t epoch;                    /* events that may have freed it without saying which
                                        * hold ended: confirmations, expiry timer, messages
                                        * without a token ("Missed wake-ups") */
    uint64_t msgs;                     /* release messages with a token, ever */
    int64_t msg_token[WQ_RING];        /* the token of message k at [k % WQ_RING] */
    int64_t msg_at[WQ_RING];           /* when waitd read it, monotonic ms ("Settling") */
    char msg_grant[WQ_RING][17];       /* the hand-off id a grant's message named, else "" */
    gw_timer expiry;                   /* when the holder's lease runs out, if known */
    int subscribed;                    /* SUBSCRIBE sent on the current connection */
    int confirmed;                     /* and Redis confirmed it (counted in the metrics) */
    int need_sub;                      /* waitd must (re)subscribe */
    int kicks;                         /* wakes to pass on to the next waiter */
    int joins;                         /* joins of its fair waiters out (gw__wait_join) */
    int head_wakes;                    /* waiters marked head_woken ("Fair waiters in
                                        * order") */
    int lined;                         /* attempts of its non-fair waiters queued behind
                                        * their stripe, not sent yet ("The line") */
    int line_parked;                   /* a waiter parked on the line since a wake was last
                                        * passed on for it ("The line") */
    int credits;                       /* release messages due for hand-offs (below) */
    int64_t credit_until;              /* monotonic ms; credits are void after it */
    /* The known holder ("Known holders"), valid while epoch == known_epoch and the
     * monotonic clock is below known_until (0: none). */
    uint64_t known_epoch;
    uint64_t known_msgs;
    int64_t known_token;
    int64_t known_until;
    char known_owner[LK_OWNER_MAX + 1];
    gw_dlink pend;                     /* in gw_waitq.pending while in_pending */
    int in_pending;
};

typedef struct unsub_node {
    gw_qlink link;                     /* in gw_waitq.unsub */
    char name[LK_RESOURCE_MAX + 1];
} unsub_node;

struct gw_waitq {
    gw_rt *rt;
    pthread_mutex_t mu;
    gw_wres *buckets[WQ_BUCKETS];
    gw_timer_heap timers;              /* waiters' deadlines, resources' expiries */
    gw_dlist pending;                  /* resources waitd must subscribe or kick */
    gw_queue unsub;                    /* channels to leave (unsub_node) */
    struct MHD_Connection **resume;    /* collected under mu, resumed after unlocking */
    size_t resume_len, resume_cap;
    int epfd;
    int evfd;
    lk_sub *sub;                       /* used by waitd only */
    int sub_fd;                        /* registered in epfd, -1 while disconnected */
    int64_t reconnect_at_ms;
    int64_t reconnect_backoff_ms;
    int reconnecting;                  /* a reconnect thread is running */
    int reconnect_joinable;            /* reconnect_thread must be joined */
    pthread_t reconnect_thread;
    int shutting_down;
    int stop;
    pthread_t thread;
    int waiting;                       /* waiters counted against max_waiters */
    int max_waiters;                   /* --max-waiters */
    uint64_t loops;                    /* epoll batches waitd has finished */
    gw_queue graves;                   /* requests to free after waitd's batch (gw__wait_free),
                                        * each link laid over the first bytes of the request's
                                        * memory */
};

/* ---- waitq.c: resources and wakes, called under mu (their comments are in waitq.c) ---- */

/* Wakes waitd from its epoll_wait. */
void gw__signal_waitd(gw_waitq *wq);
/* Arms a waiter's or a resource's timer; waitd then sleeps until the earliest. */
int gw__wq_timer_set(gw_waitq *wq, gw_timer *t, int64_t at);

/* Resources: found, made and dropped by name; their queue of waiters. */
gw_wres *gw__wres_find(gw_waitq *wq, const char *name);
gw_wres *gw__wres_get(gw_waitq *wq, const char *name);
void gw__wres_unref(gw_waitq *wq, gw_wres *r);
int gw__wres_granted_since(const gw_wres *r, uint64_t since, const char *id);
void gw__wq_pending_add(gw_waitq *wq, gw_wres *r);
void gw__wq_pending_remove(gw_waitq *wq, gw_wres *r);
void gw__wq_queue_remove(gw_wres *r, gw_waiter *w);
void gw__wq_queue_append(gw_wres *r, gw_waiter *w);
void gw__wres_expiry_at(gw_waitq *wq, gw_wres *r, int64_t at);
int gw__wres_released_since(const gw_wres *r, uint64_t since, int64_t token);
int64_t gw__wres_settle_nap(const gw_waitq *wq, const gw_wres *r, int64_t holder_token,
                            int64_t hint_ms);

/* Waking (waitd's side). */
void gw__wq_wake(gw_waitq *wq, gw_waiter *w, gw_wake reason);
int gw__wq_wake_one(gw_waitq *wq, gw_wres *r, gw_wake reason);
void gw__wq_wake_all(gw_waitq *wq, gw_wake reason);
void gw__wq_on_sub_event(const char *resource, int event, void *userdata);
void gw__wq_fire_timers(gw_waitq *wq);

#endif
