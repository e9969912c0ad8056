/*
 * Parked waiters: a POST /lock with wait_ms > 0 that found the lock held holds no thread.
 * Its connection is suspended (MHD suspend/resume) and parked here until one of these wakes
 * it, whichever comes first:
 *   - RELEASE: a release message on the resource's channel, from the one subscriber
 *     connection this process keeps (lk_sub). Each message wakes ONE parked waiter of the
 *     resource, so 1,000 waiters cost one acquire attempt per release, not 1,000.
 *   - EXPIRY: the holder's lease runs out (expiry publishes nothing). One timer per resource,
 *     set from the remaining lease the last attempt saw; it too wakes one waiter.
 *   - DEADLINE: the waiter's own wait_ms is over; it makes a last attempt, then answers 409.
 *   - DISCONNECT: its client went away (EPOLLRDHUP on the parked socket): it is dropped.
 *     A client that only half-closed (shutdown(SHUT_WR)) looks the same here; it is
 *     answered 409 instead of waiting (locks.c, lock_woken).
 *   - SHUTDOWN: the gateway is stopping: it answers 503.
 * A woken waiter runs its attempt on an HTTP loop thread (the access handler is called again
 * on resume). If the lock is still held, it parks again. A waiter keeps its place in its
 * resource's queue from its first HELD answer until its wait ends, woken or not, so waking
 * "the first parked waiter" follows arrival order. A fair waiter takes its place while its
 * first attempt's answer is in and its resource's floor stripe is still busy (fence.c), so
 * the local order of fair waiters is their order in the Redis queue.
 *
 * One thread (waitd) runs the subscriber, the timers and the disconnect watch with epoll; a
 * short-lived thread reconnects the subscriber when it is down, so a slow connect never
 * delays a deadline.
 * Loop threads park and unpark under wq->mu. The states of a waiter, and who moves them:
 *     loop thread:  (attempting) -> PARKING -> MHD_suspend_connection -> SUSPENDED
 *     waitd:        SUSPENDED -> WOKEN, then gw__loops_resume (after unlocking)
 *     waitd:        PARKING -> WAKE_PENDING; the parking thread sees it after its suspend and
 *                   resumes the connection itself (WOKEN)
 * Only waitd moves a waiter out of SUSPENDED, and it resumes connections only after it has
 * handled every event of an epoll batch. So a waiter that waitd sees SUSPENDED cannot have
 * been freed: a suspended connection cannot complete. MHD is never called under wq->mu.
 *
 * Missed wake-ups. A release between a waiter's attempt and its parking would wake nobody.
 * Each resource therefore counts the events that may have freed it (its epoch: release
 * messages, subscription confirmations and its expiry timer firing). A waiter records the epoch before its attempt
 * and parks only if it has not moved; otherwise it tries again at once. A new subscription
 * (or a resubscription after the subscriber connection dropped, when messages were lost)
 * wakes one waiter when Redis confirms it. If the subscriber is down, the expiry timer and
 * the deadline still wake waiters: slower, never a hang past wait_ms.
 *
 * Settling (Redlock). A release reaches the masters one by one, and lk_sub reports it once,
 * at its first master's message (its hold id); the other masters' copies wake nobody. The
 * attempt that message wakes can reach a majority before the release does, and be answered
 * held by the very hold reported released: its holder token is at most the token of a
 * recent message. Believed, that answer would leave the resource's waiters parked until
 * the old lease's end or their deadlines, since nothing else will come. So such an answer,
 * when the message is less than the command timeout old, sets the resource's expiry timer
 * to a short nap instead (10 ms, growing with the time since the first such message, up to
 * 100 ms, and never past the holder's time left): each nap wakes the first parked waiter,
 * one attempt, and, as any expiry fire, moves the epoch (an attempt out meanwhile looks
 * again; a known holder is forgotten). The last attempt of a waiter whose wait ends with
 * such an answer does the same for the others (gw__wait_end). Once the messages are older
 * than the command timeout, the release did not reach a majority (its client died
 * half-way, say), and the lease ends the hold, as the answer says. False positives cost
 * naps, never a grant: on Redlock two holds can carry the same token on different masters
 * (a minority grant given back, whose message names the winner's token too), and each such
 * message opens the window again. On one Redis, Sentinel or Cluster tokens only grow and
 * the release and its message are one script on the master the attempts go to, so the case
 * arises only when a failover lost the release.
 *
 * A wake that a waiter could not use (its client was gone) is passed on to the next waiter
 * of the resource, so a vanished waiter never swallows a release.
 *
 * Hand-offs (locks.c, gw__lock_handoff). An /unlock on this gateway claims the first parked
 * waiter of its resource (gw__wait_claim: what wake_one would pick, SUSPENDED only) and
 * sends its attempt right behind the release, in the same Redis batch. The claim is a wake
 * taken before the release: the waiter's epoch is read then, and the resource gets a
 * credit. The release's message, when it comes, uses the credit: it wakes nobody, since the
 * attempt ran after it (in the same pass of Redis, on the same connection), and it is kept
 * in the resource's ring of released tokens like any message (without a token, from an
 * older release script, it moves the epoch instead). A claim whose attempt does not go out
 * with the release (locks.c) gives its credit up at once. Which message uses a credit, and
 * why that is safe:
 *   - Messages of one connection arrive in the order Redis published them, so the first
 *     release message after a claim was published by the hand-off's release or before it
 *     (another gateway's), never after its attempt: the attempt saw that release. On
 *     Redlock lk_sub reports a release at its first master's message (by its hold id), and
 *     again only with a larger token or in rare cases (locklib.h, lk_sub_event_token): a
 *     repeat that takes a later hand-off's credit only makes that hand-off's own message
 *     wake a waiter, one attempt more.
 *   - The release published nothing (it did not free the lock, or nobody had marked it
 *     wanted: lk_result.published): no message comes for it. Its answer cancels the credit
 *     (gw__wait_handoff_settled); if a message used it first, that message may be of a
 *     release after the attempt, so its wake is passed on to the next parked waiter.
 *   - A message lost (the subscriber dropped: every credit goes with the connection, and
 *     the resubscription's confirmation wakes a waiter, as always) or late: a credit is
 *     void WQ_CREDIT_MS after its claim, and a confirmation never uses one.
 * waitd may hold an epoll event of the claimed waiter's socket from an epoll_wait that
 * returned before the claim; handle_event passes over a waiter that is not SUSPENDED, and
 * the request, with the waiter in it, is freed through gw__wait_free(), which leaves it to
 * waitd until that batch is done (claim_loop). Nothing waits for waitd.
 *
 * Known holders (locks.c, park_unasked). When a waiter here takes the lock in an attempt
 * that marked it wanted, its resource remembers the owner and the lease end, with the
 * epoch: while the epoch has not moved, the lease is not over and the subscriber is
 * connected, a new waiting /lock of another owner parks at once (gw__wait_known_held),
 * which is what its attempt would have answered. A release since publishes a message that
 * names its token (or moves the epoch, without one); an expiry is the expiry timer's; a
 * dropped subscriber forgets every holder.
 *
 * The cap. A parked waiter keeps its connection, and connections are limited
 * (--max-connections): 1,024 waiters would take them all, and then /healthz and the
 * holder's own /unlock, which the waiters wait for, could not even connect. So at most
 * --max-waiters (below --max-connections, by default 3/4 of it) wait at once, counted from
 * a waiter's first park to the end of its wait (gw__wait_end), woken and attempting again
 * included; a waiter that would park beyond that is answered 503 too_many_waiters with a
 * Retry-After instead (GW_PARK_FULL). A waiter already counted parks again whatever the
 * count, so the cap never cuts a wait short. Refusing at the cap, rather than at accept
 * time, keeps the answer explicit (the client learns why and when to retry) and leaves the
 * remaining connections to requests that finish quickly.
 */
#define _GNU_SOURCE /* EPOLLRDHUP */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <netinet/in.h>
#include <netinet/tcp.h>

#include "rt/gateway.h"
#include "rt/log.h"
#include "rt/timer_heap.h"
#include "rt/util.h"
#include "rt/waiters.h"

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

enum { TIMER_WAITER, TIMER_EXPIRY };

/* A resource with parked or attempting waiters. Freed when its last reference goes. */
struct gw_wres {
    char name[LK_RESOURCE_MAX + 1];
    struct gw_wres *hnext;             /* hash chain */
    gw_waiter *head, *tail;            /* parked waiters, in arrival order */
    int refs;                          /* waiters between gw__wait_begin and their end */
    uint64_t epoch;                    /* events that may have freed it without saying which
                                        * hold ended: confirmations, expiry timer, messages
                                        * without a token ("Missed wake-ups") */
    uint64_t msgs;                     /* release messages with a token, ever */
    int64_t msg_token[WQ_RING];        /* the token of message k at [k % WQ_RING] */
    int64_t msg_at[WQ_RING];           /* when waitd read it, monotonic ms ("Settling") */
    gw_timer expiry;                   /* when the holder's lease runs out, if known */
    int subscribed;                    /* SUBSCRIBE sent on the current connection */
    int need_sub;                      /* waitd must (re)subscribe */
    int kicks;                         /* wakes to pass on to the next waiter */
    int credits;                       /* release messages due for hand-offs (below) */
    int64_t credit_until;              /* monotonic ms; credits are void after it */
    /* The known holder ("Known holders"), valid while epoch == known_epoch and the
     * monotonic clock is below known_until (0: none). */
    uint64_t known_epoch;
    uint64_t known_msgs;
    int64_t known_token;
    int64_t known_until;
    char known_owner[LK_OWNER_MAX + 1];
    struct gw_wres *pend_prev, *pend_next;
    int in_pending;
};

typedef struct unsub_node {
    struct unsub_node *next;
    char name[LK_RESOURCE_MAX + 1];
} unsub_node;

struct gw_waitq {
    gw_server *srv;
    pthread_mutex_t mu;
    gw_wres *buckets[WQ_BUCKETS];
    gw_timer_heap timers;              /* waiters' deadlines, resources' expiries */
    gw_wres *pending_head;                /* resources waitd must subscribe or kick */
    unsub_node *unsub;                 /* channels to leave */
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
    struct grave *graves;              /* requests to free after waitd's batch (gw__wait_free) */
};

/* The memory of a request whose waiter was claimed, laid over its first bytes until waitd
 * frees it. */
struct grave {
    struct grave *next;
};

static void signal_waitd(gw_waitq *wq)
{
    uint64_t one = 1;
    /* A full counter still wakes epoll; nothing to do on failure. */
    ssize_t n = write(wq->evfd, &one, sizeof one);
    (void)n;
}

/* Arms t at `at`. Returns 0, or -1 when the heap cannot grow (the timer stays off). */
static int timer_set(gw_waitq *wq, gw_timer *t, int64_t at)
{
    if (gw__timer_set(&wq->timers, t, at) != 0) {
        return -1;
    }
    if (t->idx == 0) {
        signal_waitd(wq); /* the earliest timer changed: waitd sleeps until it */
    }
    return 0;
}

/* ---- Resources ---------------------------------------------------------------------- */

static size_t bucket_of(const char *name)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)name; *p != '\0'; p++) {
        h = (h ^ *p) * 1099511628211ULL;
    }
    return (size_t)(h % WQ_BUCKETS);
}

static gw_wres *wres_find(gw_waitq *wq, const char *name)
{
    for (gw_wres *r = wq->buckets[bucket_of(name)]; r != NULL; r = r->hnext) {
        if (strcmp(r->name, name) == 0) {
            return r;
        }
    }
    return NULL;
}

static void pending_add(gw_waitq *wq, gw_wres *r)
{
    if (r->in_pending) {
        return;
    }
    r->in_pending = 1;
    r->pend_prev = NULL;
    r->pend_next = wq->pending_head;
    if (wq->pending_head != NULL) {
        wq->pending_head->pend_prev = r;
    }
    wq->pending_head = r;
    signal_waitd(wq);
}

static void pending_remove(gw_waitq *wq, gw_wres *r)
{
    if (!r->in_pending) {
        return;
    }
    if (r->pend_prev != NULL) {
        r->pend_prev->pend_next = r->pend_next;
    } else {
        wq->pending_head = r->pend_next;
    }
    if (r->pend_next != NULL) {
        r->pend_next->pend_prev = r->pend_prev;
    }
    r->in_pending = 0;
}

static gw_wres *wres_get(gw_waitq *wq, const char *name)
{
    gw_wres *r = wres_find(wq, name);
    if (r != NULL) {
        return r;
    }
    r = calloc(1, sizeof *r);
    if (r == NULL) {
        return NULL;
    }
    snprintf(r->name, sizeof r->name, "%s", name);
    r->expiry.idx = GW_TIMER_OFF;
    r->expiry.kind = TIMER_EXPIRY;
    size_t b = bucket_of(name);
    r->hnext = wq->buckets[b];
    wq->buckets[b] = r;
    r->need_sub = 1;
    pending_add(wq, r);
    return r;
}

/* Drops one reference; the last one frees the entry and leaves its channel. */
static void wres_unref(gw_waitq *wq, gw_wres *r)
{
    if (--r->refs > 0 || r->head != NULL) {
        return;
    }
    gw_wres **pp = &wq->buckets[bucket_of(r->name)];
    while (*pp != r) {
        pp = &(*pp)->hnext;
    }
    *pp = r->hnext;
    gw__timer_cancel(&wq->timers, &r->expiry);
    pending_remove(wq, r);
    if (r->subscribed) {
        unsub_node *u = malloc(sizeof *u);
        if (u != NULL) { /* without memory the channel stays subscribed: harmless */
            snprintf(u->name, sizeof u->name, "%s", r->name);
            u->next = wq->unsub;
            wq->unsub = u;
            signal_waitd(wq);
        }
    }
    free(r);
}

static void queue_remove(gw_wres *r, gw_waiter *w)
{
    if (w->prev != NULL) {
        w->prev->next = w->next;
    } else {
        r->head = w->next;
    }
    if (w->next != NULL) {
        w->next->prev = w->prev;
    } else {
        r->tail = w->prev;
    }
    w->prev = w->next = NULL;
    w->queued = 0;
}

static void queue_append(gw_wres *r, gw_waiter *w)
{
    if (w->queued) {
        return;
    }
    w->next = NULL;
    w->prev = r->tail;
    if (r->tail != NULL) {
        r->tail->next = w;
    } else {
        r->head = w;
    }
    r->tail = w;
    w->queued = 1;
}

/* Sets r's expiry timer to `at` unless it is set to fire earlier already: an early fire
 * costs one attempt, which sets it again from the answer. */
static void expiry_at(gw_waitq *wq, gw_wres *r, int64_t at)
{
    if (r->expiry.idx == GW_TIMER_OFF || at < r->expiry.at) {
        timer_set(wq, &r->expiry, at); /* on failure the waiters' deadlines still hold */
    }
}

/* ---- Waking (waitd, under mu) ------------------------------------------------------- */

/* Whether a release message with a token since message count `since` may have freed a hold
 * of token `token` (0: of an unknown hold): one with that token or a larger one did, and
 * when more came than the ring keeps, or the hold is unknown, any may have. Under mu. */
static int released_since(const gw_wres *r, uint64_t since, int64_t token)
{
    if (r->msgs == since) {
        return 0;
    }
    if (token <= 0 || r->msgs - since > WQ_RING) {
        return 1;
    }
    for (uint64_t k = since + 1; k <= r->msgs; k++) {
        if (r->msg_token[k % WQ_RING] >= token) {
            return 1;
        }
    }
    return 0;
}

/* The nap before r is looked at again, in ms, when an attempt was answered held by the hold
 * of token holder_token and a message of the last command timeout named that token or a
 * larger one ("Settling"); 0 when the answer is to be believed. Never longer than hint_ms
 * + 1, the holder's time left (-1 unknown). Under mu. */
static int64_t settle_nap(const gw_waitq *wq, const gw_wres *r, int64_t holder_token,
                          int64_t hint_ms)
{
    int64_t now = gw__now_ms(), window = wq->srv->lk_opts.command_timeout_ms, oldest = -1;

    if (holder_token <= 0) {
        return 0;
    }
    for (uint64_t k = r->msgs; k > 0 && r->msgs - k < WQ_RING; k--) {
        int64_t age = now - r->msg_at[k % WQ_RING];
        if (r->msg_token[k % WQ_RING] >= holder_token && age < window && age > oldest) {
            oldest = age;
        }
    }
    if (oldest < 0) {
        return 0; /* none, or the release did not reach a majority: the lease ends it */
    }
    /* About the time since the first such message, so the naps double up to 100 ms. */
    int64_t nap = oldest < WQ_SETTLE_MIN_MS   ? WQ_SETTLE_MIN_MS
                  : oldest > WQ_SETTLE_MAX_MS ? WQ_SETTLE_MAX_MS
                                              : oldest;
    return hint_ms >= 0 && hint_ms + 1 < nap ? hint_ms + 1 : nap;
}

static void resume_later(gw_waitq *wq, struct MHD_Connection *conn)
{
    if (wq->resume_len == wq->resume_cap) {
        size_t cap = wq->resume_cap == 0 ? 64 : wq->resume_cap * 2;
        struct MHD_Connection **grown = realloc(wq->resume, cap * sizeof *grown);
        if (grown == NULL) {
            /* Cannot happen in practice; the waiter's deadline still cannot fire twice, so
             * resume at once rather than lose it (MHD is then called under mu, which is
             * safe here: waitd holds no MHD lock). */
            gw__loops_resume(wq->srv->loops, conn);
            return;
        }
        wq->resume = grown;
        wq->resume_cap = cap;
    }
    wq->resume[wq->resume_len++] = conn;
}

/* Wakes w for `reason`. It keeps its place in the queue. */
static void wake(gw_waitq *wq, gw_waiter *w, gw_wake reason)
{
    gw_metrics *m = &wq->srv->metrics;

    gw__timer_cancel(&wq->timers, &w->timer);
    w->reason = reason;
    w->wake_unused = reason == GW_WAKE_RELEASE || reason == GW_WAKE_EXPIRY;
    atomic_fetch_sub(&m->waiters_parked, 1);
    atomic_fetch_add(&m->waiter_wakes[reason], 1);
    if (w->state == GW_WAITER_PARKING) {
        w->state = GW_WAITER_WAKE_PENDING; /* its own thread resumes it after suspending */
        return;
    }
    if (w->fd >= 0) {
        epoll_ctl(wq->epfd, EPOLL_CTL_DEL, w->fd, NULL);
    }
    w->state = GW_WAITER_WOKEN;
    resume_later(wq, w->conn);
}

/* Wakes the first parked waiter of r that is not already being woken, passing over one
 * whose own deadline is due (its deadline wakes it in this round of waitd or the next) while
 * another parked waiter has time left. A waiter past its deadline makes only a last attempt
 * and then answers; if that attempt cannot take the lock (Redis dropped it from the fair
 * queue at its deadline, or it is refused), the release or expiry it was woken for ends
 * with it, and the others, parked with no timer but their deadlines, sleep on a free lock.
 * That happens when timers fire late together: a gateway stopped (SIGSTOP) across a
 * holder's lease and a short waiter's deadline fires both at once on SIGCONT.
 * Returns 1 if one was woken. */
static int wake_one(gw_waitq *wq, gw_wres *r, gw_wake reason)
{
    int64_t now = gw__now_ms();
    gw_waiter *due = NULL;

    for (gw_waiter *w = r->head; w != NULL; w = w->next) {
        if (w->state == GW_WAITER_SUSPENDED || w->state == GW_WAITER_PARKING) {
            if (w->timer.idx != GW_TIMER_OFF && w->timer.at <= now) {
                if (due == NULL) {
                    due = w;
                }
                continue;
            }
            wake(wq, w, reason);
            return 1;
        }
    }
    if (due != NULL) {
        wake(wq, due, reason); /* nobody with time left: it may still take the lock */
        return 1;
    }
    return 0;
}

static void wake_all(gw_waitq *wq, gw_wake reason)
{
    for (size_t b = 0; b < WQ_BUCKETS; b++) {
        for (gw_wres *r = wq->buckets[b]; r != NULL; r = r->hnext) {
            while (wake_one(wq, r, reason)) {
            }
        }
    }
}

/* lk_sub_dispatch callback: a release or a (re)subscription of `resource`. */
static void on_sub_event(const char *resource, int event, void *userdata)
{
    gw_waitq *wq = userdata;
    gw_wres *r = wres_find(wq, resource);

    if (r == NULL) {
        return; /* nobody waits here any more (or a late confirmation) */
    }
    int64_t token = event == LK_SUB_RELEASED ? lk_sub_event_token(wq->sub) : 0;
    if (token > 0) {
        r->msgs++;
        r->msg_token[r->msgs % WQ_RING] = token;
        r->msg_at[r->msgs % WQ_RING] = gw__now_ms();
    }
    if (event == LK_SUB_RELEASED && r->credits > 0 && gw__now_ms() > r->credit_until) {
        r->credits = 0; /* their messages are lost or very late: wake as usual */
    }
    if (event == LK_SUB_RELEASED && r->credits > 0) {
        /* The release of a hand-off, or one before it: its attempt ran after it, so this
         * message wakes nobody ("Hand-offs"). Without a token nothing tells an attempt
         * of another waiter that ran before the release that it did: the epoch moves, so
         * that one tries again rather than park. */
        r->credits--;
        if (token <= 0) {
            r->epoch++;
        }
        return;
    }
    if (token <= 0) {
        r->epoch++;
    }
    wake_one(wq, r, GW_WAKE_RELEASE);
}

static void fire_timers(gw_waitq *wq)
{
    int64_t now = gw__now_ms();
    for (gw_timer *t = gw__timer_first(&wq->timers); t != NULL && t->at <= now;
         t = gw__timer_first(&wq->timers)) {
        gw__timer_cancel(&wq->timers, t);
        if (t->kind == TIMER_EXPIRY) {
            gw_wres *r = (gw_wres *)((char *)t - offsetof(gw_wres, expiry));
            /* A lease running out may free the lock as a release does: a waiter whose
             * attempt is out now (not parked, so wake_one passes it by) must look again
             * rather than park on a hint that is already over. */
            r->epoch++;
            wake_one(wq, r, GW_WAKE_EXPIRY);
        } else {
            gw_waiter *w = (gw_waiter *)((char *)t - offsetof(gw_waiter, timer));
            wake(wq, w, GW_WAKE_DEADLINE);
        }
    }
}

static void sub_lost(gw_waitq *wq);

/* A (UN)SUBSCRIBE could not be written: the connection is closed (lk_sub dropped it), so
 * treat it as lost, which schedules the reconnect and the resubscriptions. */
static void sub_write_failed(gw_waitq *wq)
{
    if (lk_sub_fd(wq->sub) < 0 && wq->sub_fd >= 0) {
        gw__log_event(wq->srv->cfg, "warn", "redis subscriber: %s; reconnecting",
                      lk_sub_errstr(wq->sub));
        sub_lost(wq);
    }
}

/* Subscriptions, unsubscriptions and passed-on wakes asked for by loop threads. */
static void run_pending(gw_waitq *wq)
{
    while (wq->unsub != NULL) {
        unsub_node *u = wq->unsub;
        wq->unsub = u->next;
        if (wq->sub_fd >= 0 && lk_sub_remove(wq->sub, u->name) != LK_OK) {
            sub_write_failed(wq);
        }
        free(u);
    }
    while (wq->pending_head != NULL) {
        gw_wres *r = wq->pending_head;
        pending_remove(wq, r);
        if (r->need_sub && wq->sub_fd >= 0) {
            if (lk_sub_add(wq->sub, r->name) == LK_OK) {
                r->need_sub = 0;
                r->subscribed = 1;
            } else {
                sub_write_failed(wq); /* r stays need_sub; every entry is resubscribed */
            }
        }
        for (; r->kicks > 0; r->kicks--) {
            wake_one(wq, r, GW_WAKE_RELEASE);
        }
    }
}

/* ---- The subscriber connection (waitd) ---------------------------------------------- */

static void sub_lost(gw_waitq *wq)
{
    /* lk_sub has closed the socket already, which took it out of epfd; its number may even
     * belong to another connection now, so it is not touched. */
    wq->sub_fd = -1;
    atomic_store(&wq->srv->metrics.subscriber_up, 0);
    wq->reconnect_at_ms = gw__now_ms() + wq->reconnect_backoff_ms;
    /* Every subscription is gone with the connection; renew them all on reconnect. */
    for (size_t b = 0; b < WQ_BUCKETS; b++) {
        for (gw_wres *r = wq->buckets[b]; r != NULL; r = r->hnext) {
            r->subscribed = 0;
            r->need_sub = 1;
            r->credits = 0; /* the messages they waited for are lost; the resubscription's
                             * confirmation wakes a waiter instead */
            r->known_until = 0; /* a release may go unseen now */
        }
    }
}

/* Connects the subscriber, on a thread of its own: connecting may take the connect timeout
 * (a Redis that drops packets), and waitd must go on firing deadlines, noticing hang-ups
 * and answering shutdown meanwhile. While it runs, waitd does not touch wq->sub (sub_fd is
 * -1); it is published under mu once connected. */
static void *reconnect_main(void *arg)
{
    gw_waitq *wq = arg;
    lk_status st = lk_sub_reconnect(wq->sub);

    pthread_mutex_lock(&wq->mu);
    if (st != LK_OK) {
        wq->reconnect_backoff_ms *= 2;
        if (wq->reconnect_backoff_ms > WQ_RECONNECT_MAX_MS) {
            wq->reconnect_backoff_ms = WQ_RECONNECT_MAX_MS;
        }
        wq->reconnect_at_ms = gw__now_ms() + wq->reconnect_backoff_ms;
    } else {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = wq};
        wq->sub_fd = lk_sub_fd(wq->sub);
        epoll_ctl(wq->epfd, EPOLL_CTL_ADD, wq->sub_fd, &ev);
        wq->reconnect_backoff_ms = WQ_RECONNECT_MIN_MS;
        atomic_store(&wq->srv->metrics.subscriber_up, 1);
        for (size_t b = 0; b < WQ_BUCKETS; b++) {
            for (gw_wres *r = wq->buckets[b]; r != NULL; r = r->hnext) {
                pending_add(wq, r); /* need_sub is set for every entry */
            }
        }
    }
    wq->reconnecting = 0;
    signal_waitd(wq);
    pthread_mutex_unlock(&wq->mu);
    return NULL;
}

/* Starts a reconnect when the subscriber is down and its back-off has passed. Under mu. */
static void sub_reconnect(gw_waitq *wq)
{
    if (wq->sub_fd >= 0 || wq->reconnecting || wq->stop || gw__now_ms() < wq->reconnect_at_ms) {
        return;
    }
    if (wq->reconnect_joinable) {
        pthread_join(wq->reconnect_thread, NULL); /* finished: reconnecting is 0 */
        wq->reconnect_joinable = 0;
    }
    if (pthread_create(&wq->reconnect_thread, NULL, reconnect_main, wq) != 0) {
        wq->reconnect_at_ms = gw__now_ms() + WQ_RECONNECT_MAX_MS; /* try again later */
        return;
    }
    wq->reconnecting = 1;
    wq->reconnect_joinable = 1;
}

static int next_timeout_ms(gw_waitq *wq)
{
    int64_t now = gw__now_ms();
    const gw_timer *first = gw__timer_first(&wq->timers);
    int64_t at = first != NULL ? first->at : now + 60000;
    if (wq->sub_fd < 0 && !wq->reconnecting && wq->reconnect_at_ms < at) {
        at = wq->reconnect_at_ms;
    }
    int64_t left = at - now;
    return left < 0 ? 0 : left > 60000 ? 60000 : (int)left;
}

static void handle_event(gw_waitq *wq, const struct epoll_event *ev)
{
    if (ev->data.ptr == NULL) { /* the eventfd */
        uint64_t n;
        ssize_t got = read(wq->evfd, &n, sizeof n);
        (void)got;
        if (wq->shutting_down) {
            wake_all(wq, GW_WAKE_SHUTDOWN);
        }
        return;
    }
    if (ev->data.ptr == wq) { /* the subscriber */
        if (lk_sub_dispatch(wq->sub, on_sub_event, wq) != LK_OK) {
            gw__log_event(wq->srv->cfg, "warn", "redis subscriber: %s; reconnecting",
                          lk_sub_errstr(wq->sub));
            sub_lost(wq);
        }
        return;
    }
    gw_waiter *w = ev->data.ptr; /* a parked client hung up */
    if (w->state == GW_WAITER_SUSPENDED) {
        wake(wq, w, GW_WAKE_DISCONNECT);
    }
}

static void *waitd_main(void *arg)
{
    gw_waitq *wq = arg;
    struct epoll_event evs[WQ_EVENTS];

    for (;;) {
        pthread_mutex_lock(&wq->mu);
        sub_reconnect(wq);
        int stop = wq->stop;
        int timeout = next_timeout_ms(wq);
        pthread_mutex_unlock(&wq->mu);
        if (stop) {
            return NULL;
        }
        int n = epoll_wait(wq->epfd, evs, WQ_EVENTS, timeout);
        pthread_mutex_lock(&wq->mu);
        for (int i = 0; i < n; i++) {
            handle_event(wq, &evs[i]);
        }
        if (wq->shutting_down) {
            wake_all(wq, GW_WAKE_SHUTDOWN);
        }
        run_pending(wq);
        fire_timers(wq);
        /* Every event of this batch is handled: a waiter claimed before now can no longer
         * be reached through one (gw__wait_end). */
        wq->loops++;
        struct grave *graves = wq->graves;
        wq->graves = NULL;
        size_t len = wq->resume_len;
        wq->resume_len = 0;
        /* Resume outside mu. The array is only touched by this thread. */
        pthread_mutex_unlock(&wq->mu);
        while (graves != NULL) {
            struct grave *g = graves;
            graves = g->next;
            free(g);
        }
        for (size_t i = 0; i < len; i++) {
            gw__loops_resume(wq->srv->loops, wq->resume[i]);
        }
    }
}

/* ---- Start and stop ------------------------------------------------------------------ */

int gw__waitq_start(gw_server *srv, char *err, size_t errlen)
{
    gw_waitq *wq = calloc(1, sizeof *wq);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};

    if (wq == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    wq->srv = srv;
    wq->max_waiters = srv->cfg->max_waiters;
    wq->sub_fd = -1;
    wq->reconnect_backoff_ms = WQ_RECONNECT_MIN_MS;
    pthread_mutex_init(&wq->mu, NULL);
    wq->epfd = epoll_create1(EPOLL_CLOEXEC);
    wq->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wq->epfd < 0 || wq->evfd < 0 || epoll_ctl(wq->epfd, EPOLL_CTL_ADD, wq->evfd, &ev) != 0) {
        snprintf(err, errlen, "cannot create the waiters' event loop: %s", strerror(errno));
        goto fail;
    }
    /* Redis being down now is not fatal: waitd reconnects. */
    lk_status st = lk_sub_open(&wq->sub, srv->cfg->redis_url, &srv->lk_opts);
    if (wq->sub == NULL) {
        snprintf(err, errlen, "cannot create the Redis subscriber: %s", lk_status_str(st));
        goto fail;
    }
    if (st == LK_OK) {
        struct epoll_event sev = {.events = EPOLLIN, .data.ptr = wq};
        wq->sub_fd = lk_sub_fd(wq->sub);
        epoll_ctl(wq->epfd, EPOLL_CTL_ADD, wq->sub_fd, &sev);
        atomic_store(&srv->metrics.subscriber_up, 1);
    }
    if (pthread_create(&wq->thread, NULL, waitd_main, wq) != 0) {
        snprintf(err, errlen, "cannot start the waiters' thread");
        goto fail;
    }
    srv->waitq = wq;
    return 0;
fail:
    lk_sub_close(wq->sub);
    if (wq->epfd >= 0) {
        close(wq->epfd);
    }
    if (wq->evfd >= 0) {
        close(wq->evfd);
    }
    pthread_mutex_destroy(&wq->mu);
    free(wq);
    return -1;
}

void gw__waitq_shutdown(gw_waitq *wq)
{
    pthread_mutex_lock(&wq->mu);
    wq->shutting_down = 1;
    signal_waitd(wq);
    pthread_mutex_unlock(&wq->mu);
}

void gw__waitq_stop(gw_waitq *wq)
{
    if (wq == NULL) {
        return;
    }
    pthread_mutex_lock(&wq->mu);
    wq->stop = 1;
    signal_waitd(wq);
    pthread_mutex_unlock(&wq->mu);
    pthread_join(wq->thread, NULL);
    if (wq->reconnect_joinable) {
        pthread_join(wq->reconnect_thread, NULL); /* at most one connect timeout */
    }
    /* Every request is complete by now, so every entry is gone; free what is left anyway. */
    for (size_t b = 0; b < WQ_BUCKETS; b++) {
        while (wq->buckets[b] != NULL) {
            gw_wres *r = wq->buckets[b];
            wq->buckets[b] = r->hnext;
            free(r);
        }
    }
    while (wq->unsub != NULL) {
        unsub_node *u = wq->unsub;
        wq->unsub = u->next;
        free(u);
    }
    while (wq->graves != NULL) {
        struct grave *g = wq->graves;
        wq->graves = g->next;
        free(g);
    }
    lk_sub_close(wq->sub);
    close(wq->epfd);
    close(wq->evfd);
    gw__timer_heap_free(&wq->timers);
    free(wq->resume);
    pthread_mutex_destroy(&wq->mu);
    free(wq);
}

/* ---- The loop threads' side ---------------------------------------------------------- */

int gw__wait_begin(gw_waitq *wq, gw_waiter *w, const char *resource)
{
    pthread_mutex_lock(&wq->mu);
    if (w->res == NULL) {
        gw_wres *r = wres_get(wq, resource);
        if (r == NULL) {
            pthread_mutex_unlock(&wq->mu);
            return -1;
        }
        r->refs++;
        w->res = r;
        w->fd = -1;
        w->timer.idx = GW_TIMER_OFF;
        w->timer.kind = TIMER_WAITER;
    }
    w->epoch = w->res->epoch;
    w->msgs = w->res->msgs;
    w->wake_unused = 0; /* this attempt uses the wake */
    pthread_mutex_unlock(&wq->mu);
    return 0;
}

gw_waiter *gw__wait_claim(gw_waitq *wq, const char *resource)
{
    int64_t now = gw__now_ms();
    gw_waiter *claimed = NULL, *due = NULL;

    pthread_mutex_lock(&wq->mu);
    gw_wres *r = wq->shutting_down ? NULL : wres_find(wq, resource);
    /* The waiter wake_one() would choose, if it is SUSPENDED: a PARKING one's thread is still
     * suspending its connection, and only that thread may start its attempt then; nobody
     * else is claimed in its place (for fair waiters it may be the head of the queue). */
    for (gw_waiter *w = r != NULL ? r->head : NULL; w != NULL; w = w->next) {
        if (w->state != GW_WAITER_SUSPENDED && w->state != GW_WAITER_PARKING) {
            continue;
        }
        if (w->timer.idx != GW_TIMER_OFF && w->timer.at <= now) {
            if (due == NULL) {
                due = w;
            }
            continue;
        }
        claimed = w;
        break;
    }
    if (claimed == NULL) {
        claimed = due;
    }
    if (claimed != NULL && claimed->state != GW_WAITER_SUSPENDED) {
        claimed = NULL;
    }
    if (claimed != NULL) {
        gw_metrics *m = &wq->srv->metrics;
        gw__timer_cancel(&wq->timers, &claimed->timer);
        /* Off the disconnect watch: a hang-up now is found when its attempt is answered.
         * waitd may hold an event of this socket from an epoll_wait that returned before
         * this; it passes over a waiter that is not SUSPENDED, and gw__wait_free() keeps
         * the request alive until waitd has finished that batch (claim_loop). */
        if (claimed->fd >= 0) {
            epoll_ctl(wq->epfd, EPOLL_CTL_DEL, claimed->fd, NULL);
            claimed->fd = -1;
        }
        claimed->state = GW_WAITER_IDLE;
        claimed->reason = GW_WAKE_RELEASE;
        claimed->wake_unused = 0; /* its attempt goes out now */
        claimed->epoch = r->epoch;
        claimed->msgs = r->msgs;
        claimed->claimed = 1;
        claimed->claim_loop = wq->loops;
        atomic_fetch_sub(&m->waiters_parked, 1);
        atomic_fetch_add(&m->waiter_wakes[GW_WAKE_RELEASE], 1);
        r->credits++;
        if (claimed->fair) {
            /* A fair grant is marked wanted only while others are in line in Redis: a
             * request parked unasked on the holder this release ends could miss the
             * release of the grant (locks.c, "Hand-offs"). */
            r->known_until = 0;
        }
        r->credit_until = now + WQ_CREDIT_MS;
    }
    pthread_mutex_unlock(&wq->mu);
    return claimed;
}

void gw__wait_handoff_settled(gw_waitq *wq, const char *resource, int published)
{
    if (published > 0) {
        return; /* its message comes (or came): it takes the credit */
    }
    pthread_mutex_lock(&wq->mu);
    gw_wres *r = wres_find(wq, resource);
    if (r != NULL) {
        if (r->credits > 0) {
            r->credits--;
        } else {
            /* A message took this claim's credit already, though the release published
             * none: it came from another release, maybe one after the attempt. Its wake is
             * passed on, as the message would have done. */
            r->kicks++;
            pending_add(wq, r);
        }
    }
    pthread_mutex_unlock(&wq->mu);
}

void gw__wait_place(gw_waitq *wq, gw_waiter *w)
{
    if (w->res == NULL) {
        return;
    }
    pthread_mutex_lock(&wq->mu);
    queue_append(w->res, w);
    pthread_mutex_unlock(&wq->mu);
}

int gw__wait_others(gw_waitq *wq, const gw_waiter *w, const char *resource)
{
    int others = 0;

    pthread_mutex_lock(&wq->mu);
    const gw_wres *r = w->res != NULL ? w->res : wres_find(wq, resource);
    if (r != NULL) {
        others = r->refs - (w->res == r) > 0;
    }
    pthread_mutex_unlock(&wq->mu);
    return others;
}

void gw__wait_note_holder(gw_waitq *wq, const gw_waiter *w, const char *owner,
                          int64_t token, int64_t lease_ms)
{
    gw_wres *r = w->res;
    if (r == NULL || lease_ms <= 0 || token <= 0) {
        return;
    }
    pthread_mutex_lock(&wq->mu);
    /* The epoch must not have moved since the attempt began: a release message seen since
     * may have come after the grant (another gateway's hand-off of a lease that ran out,
     * say), and then nothing says who holds the lock now. */
    if (r->epoch == w->epoch && !released_since(r, w->msgs, token) && wq->sub_fd >= 0) {
        r->known_epoch = r->epoch;
        r->known_msgs = r->msgs;
        r->known_token = token;
        r->known_until = gw__now_ms() + lease_ms;
        snprintf(r->known_owner, sizeof r->known_owner, "%s", owner);
    }
    pthread_mutex_unlock(&wq->mu);
}

int64_t gw__wait_known_held(gw_waitq *wq, const gw_waiter *w, const char *owner,
                            int64_t *token)
{
    gw_wres *r = w->res;
    int64_t left = -1;
    if (r == NULL) {
        return -1;
    }
    pthread_mutex_lock(&wq->mu);
    int64_t now = gw__now_ms();
    if (r->known_until > now && r->known_epoch == r->epoch && r->epoch == w->epoch &&
        !released_since(r, r->known_msgs, r->known_token) && wq->sub_fd >= 0 &&
        strcmp(r->known_owner, owner) != 0) {
        left = r->known_until - now;
        *token = r->known_token;
    }
    pthread_mutex_unlock(&wq->mu);
    return left;
}

void gw__wait_end(gw_waitq *wq, gw_waiter *w, int64_t held_ms, int64_t holder_token)
{
    if (w->res == NULL) {
        return;
    }
    pthread_mutex_lock(&wq->mu);
    if (w->queued) {
        queue_remove(w->res, w);
    }
    if (w->state == GW_WAITER_PARKING || w->state == GW_WAITER_SUSPENDED) {
        /* cannot happen on the normal paths; keep the entry consistent */
        gw__timer_cancel(&wq->timers, &w->timer);
        atomic_fetch_sub(&wq->srv->metrics.waiters_parked, 1);
    }
    if (held_ms >= 0 && w->res->head != NULL) {
        /* This waiter took the lock, or its last attempt (woken by a release or an expiry,
         * its deadline passing meanwhile) found a new holder: the others now wait for that
         * lease, which none of them has seen (no attempt of theirs since), and whose end
         * publishes nothing. Without this they would sleep on a lock freed by that expiry
         * until their own deadlines. (+1: PTTL rounds down.) A last attempt answered held
         * by a hold reported released used the wake of that release: the others nap
         * instead ("Settling"). */
        int64_t nap = settle_nap(wq, w->res, holder_token, held_ms);
        expiry_at(wq, w->res, gw__now_ms() + (nap > 0 ? nap : held_ms + 1));
    }
    if (w->parked_before) {
        w->parked_before = 0;
        wq->waiting--;
    }
    if (w->wake_unused) {
        /* Woken by a release or an expiry it never acted on: the next waiter gets it. */
        w->res->kicks++;
        pending_add(wq, w->res);
        w->wake_unused = 0;
    }
    wres_unref(wq, w->res);
    w->res = NULL;
    pthread_mutex_unlock(&wq->mu);
}

void gw__wait_free(gw_waitq *wq, const gw_waiter *w, void *mem)
{
    if (w->claimed) {
        pthread_mutex_lock(&wq->mu);
        if (wq->loops == w->claim_loop && !wq->stop) {
            /* waitd may still hold an event of its socket from before the claim: it frees
             * mem once that batch is done (gw__wait_claim). */
            struct grave *g = mem;
            g->next = wq->graves;
            wq->graves = g;
            signal_waitd(wq);
            mem = NULL;
        }
        pthread_mutex_unlock(&wq->mu);
    }
    free(mem);
}

gw_park gw__wait_park(gw_waitq *wq, gw_waiter *w, struct MHD_Connection *conn,
                      int64_t deadline_ms, int64_t hint_ms, int64_t holder_token)
{
    gw_wres *r = w->res;

    pthread_mutex_lock(&wq->mu);
    if (wq->shutting_down) {
        pthread_mutex_unlock(&wq->mu);
        return GW_PARK_SHUTDOWN;
    }
    if (r->epoch != w->epoch || released_since(r, w->msgs, holder_token)) {
        /* Released (or resubscribed) since the attempt began: look again now. */
        w->epoch = r->epoch;
        w->msgs = r->msgs;
        pthread_mutex_unlock(&wq->mu);
        return GW_PARK_RETRY;
    }
    if (!w->parked_before && wq->waiting >= wq->max_waiters) {
        pthread_mutex_unlock(&wq->mu);
        return GW_PARK_FULL;
    }
    if (timer_set(wq, &w->timer, deadline_ms) != 0) {
        pthread_mutex_unlock(&wq->mu);
        return GW_PARK_NOMEM;
    }
    int64_t nap = settle_nap(wq, r, holder_token, hint_ms);
    if (nap > 0) {
        expiry_at(wq, r, gw__now_ms() + nap);
    } else if (hint_ms >= 0) {
        /* +1: PTTL rounds down, and a lock with 0.4 ms left reports 0. */
        expiry_at(wq, r, gw__now_ms() + hint_ms + 1);
    }
    w->conn = conn;
    w->state = GW_WAITER_PARKING;
    w->reason = GW_WAKE_NONE;
    if (!w->parked_before) {
        w->parked_before = 1;
        wq->waiting++;
    }
    queue_append(r, w);
    atomic_fetch_add(&wq->srv->metrics.waiters_parked, 1);
    pthread_mutex_unlock(&wq->mu);

    MHD_suspend_connection(conn);

    pthread_mutex_lock(&wq->mu);
    int resume_now = w->state == GW_WAITER_WAKE_PENDING;
    if (resume_now) {
        w->state = GW_WAITER_WOKEN;
    } else {
        const union MHD_ConnectionInfo *info =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        w->state = GW_WAITER_SUSPENDED;
        w->fd = info != NULL ? info->connect_fd : -1;
        struct epoll_event ev = {.events = EPOLLRDHUP, .data.ptr = w};
        if (w->fd >= 0 && epoll_ctl(wq->epfd, EPOLL_CTL_ADD, w->fd, &ev) != 0) {
            w->fd = -1; /* no disconnect watch: it is found when the waiter wakes */
        }
    }
    pthread_mutex_unlock(&wq->mu);
    if (resume_now) {
        gw__loops_resume(wq->srv->loops, conn);
    }
    return GW_PARKED;
}

gw_peer gw__conn_peer(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    char byte;

    if (info == NULL) {
        return GW_PEER_OPEN;
    }
    ssize_t n = recv(info->connect_fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))) {
        return GW_PEER_OPEN;
    }
    if (n < 0) {
        return GW_PEER_GONE;
    }
    /* Once the client's FIN is in, recv() reports end of file even after a reset, so ask
     * TCP: a reset ends the connection (TCP_CLOSE), a FIN alone leaves it in CLOSE_WAIT. */
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    memset(&ti, 0, sizeof ti);
    if (getsockopt(info->connect_fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 &&
        ti.tcpi_state == TCP_CLOSE) {
        return GW_PEER_GONE;
    }
    return GW_PEER_EOF;
}
