/*
 * A waiter (gw_waiter), the waiting part of a /lock request, and its states: the types the
 * wait queue's files (waiters.c, waitq.c, waitd.c) and its users (waiters.h) share. Types
 * only.
 */
#ifndef GATEWAY_WAITER_H
#define GATEWAY_WAITER_H

#include <stdint.h>

#include "base/list.h"
#include "rt/metrics.h"
#include "rt/timer_heap.h"

struct MHD_Connection;
typedef struct gw_waitq gw_waitq;
typedef struct gw_wres gw_wres;

typedef enum gw_waiter_state {
    GW_WAITER_IDLE = 0,           /* attempting, or never parked */
    GW_WAITER_PARKING,            /* queued; its thread is suspending the connection */
    GW_WAITER_SUSPENDED,          /* queued and suspended */
    GW_WAITER_WAKE_PENDING,       /* woken while PARKING: its thread resumes it */
    GW_WAITER_WOKEN               /* resumed; its operation runs again */
} gw_waiter_state;

/* The waiting part of a /lock request. Zero-initialised; owned by its request. */
typedef struct gw_waiter {
    gw_dlink link;                /* in its resource's queue */
    gw_wres *res;                 /* the entry it holds a reference on, NULL when none */
    struct MHD_Connection *conn;
    int fd;                       /* watched for hang-ups while suspended, else -1 */
    gw_timer timer;               /* its deadline while parked */
    gw_waiter_state state;
    gw_wake reason;               /* why it was last woken */
    uint64_t epoch;               /* its resource's epoch when the attempt was sent */
    uint64_t msgs;                /* its resource's release messages then (waiters.c) */
    int queued;
    int parked_before;            /* parked at least once in this wait: counted against
                                   * --max-waiters until gw__wait_end */
    int wake_unused;              /* woken by a release/expiry and not yet attempted */
    int fair;                     /* its attempts are fair (set by its owner, read by claims) */
    int claims;                   /* a release may have granted it the lock, which its next
                                   * attempt claims: a resubscription wakes it (its grant's
                                   * message may be lost). Set by its owner before each
                                   * attempt */
    int granted;                  /* a grant's message named it since its attempt was sent:
                                   * it looks again rather than park, also on the line
                                   * (rt/waitq.c, on_grant). Under the queue's mutex */
    const char *owner;            /* its owner (set by its owner; fair waiters are named by
                                   * it in the fair queue) */
    int head_woken;               /* another waiter's answer named it first in line on a
                                   * free lock: waitd wakes it (gw__wait_wake_head). Under mu */
    int set;                      /* a set's waiter (ops/lock_set.c): never claimed, since a
                                   * hand-off sends one resource's attempt */
    int claimed;                  /* claimed once: gw__wait_free() leaves its request to
                                   * waitd until the epoll batch it was claimed in is done */
    uint64_t claim_loop;          /* waitd's loop count when it was claimed */
    char handoff_id[17];          /* its hand-off id (lk_call.handoff_id), "" for none: a
                                   * release that grants it the lock names it in its
                                   * message "g:<token>:<id>" (waitq.c) */
} gw_waiter;

#endif
