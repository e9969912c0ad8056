/*
 * The wait queue's resources and wakes (the state machine is in waiters.c): each resource
 * with waiters, its queue, its expiry timer and its ring of release messages, and how waitd
 * wakes a waiter, under mu.
 */
#define _GNU_SOURCE /* EPOLLRDHUP */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "rt/loops.h"
#include "rt/util.h"
#include "rt/waiters_internal.h"

void gw__signal_waitd(gw_waitq *wq)
{
    uint64_t one = 1;
    /* A full counter still wakes epoll; nothing to do on failure. */
    ssize_t n = write(wq->evfd, &one, sizeof one);
    (void)n;
}

/* Arms t at `at`. Returns 0, or -1 when the heap cannot grow (the timer stays off). */
int gw__wq_timer_set(gw_waitq *wq, gw_timer *t, int64_t at)
{
    if (gw__timer_set(&wq->timers, t, at) != 0) {
        return -1;
    }
    if (t->idx == 0) {
        gw__signal_waitd(wq); /* the earliest timer changed: waitd sleeps until it */
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

gw_wres *gw__wres_find(gw_waitq *wq, const char *name)
{
    for (gw_wres *r = wq->buckets[bucket_of(name)]; r != NULL; r = r->hnext) {
        if (strcmp(r->name, name) == 0) {
            return r;
        }
    }
    return NULL;
}

void gw__wq_pending_add(gw_waitq *wq, gw_wres *r)
{
    if (r->in_pending) {
        return;
    }
    r->in_pending = 1;
    gw_dlist_push_front(&wq->pending, &r->pend);
    gw__signal_waitd(wq);
}

void gw__wq_pending_remove(gw_waitq *wq, gw_wres *r)
{
    if (!r->in_pending) {
        return;
    }
    gw_dlist_remove(&wq->pending, &r->pend);
    r->in_pending = 0;
}

gw_wres *gw__wres_get(gw_waitq *wq, const char *name)
{
    gw_wres *r = gw__wres_find(wq, name);
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
    gw__wq_pending_add(wq, r);
    return r;
}

/* Drops one reference; the last one frees the entry and leaves its channel. */
void gw__wres_unref(gw_waitq *wq, gw_wres *r)
{
    if (--r->refs > 0 || !gw_dlist_empty(&r->queue)) {
        return;
    }
    gw_wres **pp = &wq->buckets[bucket_of(r->name)];
    while (*pp != r) {
        pp = &(*pp)->hnext;
    }
    *pp = r->hnext;
    gw__timer_cancel(&wq->timers, &r->expiry);
    gw__wq_pending_remove(wq, r);
    if (r->confirmed) {
        atomic_fetch_sub(&wq->rt->metrics.subscriptions, 1);
    }
    if (r->subscribed) {
        unsub_node *u = malloc(sizeof *u);
        if (u != NULL) { /* without memory the channel stays subscribed: harmless */
            snprintf(u->name, sizeof u->name, "%s", r->name);
            gw_queue_push(&wq->unsub, &u->link);
            gw__signal_waitd(wq);
        }
    }
    free(r);
}

void gw__wq_queue_remove(gw_wres *r, gw_waiter *w)
{
    gw_dlist_remove(&r->queue, &w->link);
    w->queued = 0;
}

void gw__wq_queue_append(gw_wres *r, gw_waiter *w)
{
    if (w->queued) {
        return;
    }
    gw_dlist_push_back(&r->queue, &w->link);
    w->queued = 1;
}

/* Sets r's expiry timer to `at` unless it is set to fire earlier already: an early fire
 * costs one attempt, which sets it again from the answer. */
void gw__wres_expiry_at(gw_waitq *wq, gw_wres *r, int64_t at)
{
    if (r->expiry.idx == GW_TIMER_OFF || at < r->expiry.at) {
        gw__wq_timer_set(wq, &r->expiry, at); /* on failure the waiters' deadlines still hold */
    }
}

/* ---- Waking (waitd, under mu) ------------------------------------------------------- */

/* Whether a release message with a token since message count `since` may have freed a hold
 * of token `token` (0: of an unknown hold): one with that token or a larger one did, and
 * when more came than the ring keeps, or the hold is unknown, any may have. Under mu. */
int gw__wres_released_since(const gw_wres *r, uint64_t since, int64_t token)
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

/* Whether a grant's message since message count `since` named hand-off id `id` (not "");
 * when more came than the ring keeps, any may have. Under mu. */
int gw__wres_granted_since(const gw_wres *r, uint64_t since, const char *id)
{
    if (r->msgs == since || id[0] == '\0') {
        return 0;
    }
    if (r->msgs - since > WQ_RING) {
        return 1;
    }
    for (uint64_t k = since + 1; k <= r->msgs; k++) {
        if (strcmp(r->msg_grant[k % WQ_RING], id) == 0) {
            return 1;
        }
    }
    return 0;
}

/* The nap before r is looked at again, in ms, when an attempt was answered held by the hold
 * of token holder_token and a message of the last command timeout named that token or a
 * larger one ("Settling"); 0 when the answer is to be believed. Never longer than hint_ms
 * + 1, the holder's time left (-1 unknown). Under mu. */
int64_t gw__wres_settle_nap(const gw_waitq *wq, const gw_wres *r, int64_t holder_token,
                            int64_t hint_ms)
{
    int64_t now = gw__now_ms(), window = wq->rt->lk_opts.command_timeout_ms, oldest = -1;

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
            gw__loops_resume(wq->rt->loops, conn);
            return;
        }
        wq->resume = grown;
        wq->resume_cap = cap;
    }
    wq->resume[wq->resume_len++] = conn;
}

/* Wakes w for `reason`. It keeps its place in the queue. */
void gw__wq_wake(gw_waitq *wq, gw_waiter *w, gw_wake reason)
{
    gw_metrics *m = &wq->rt->metrics;

    gw__timer_cancel(&wq->timers, &w->timer);
    w->reason = reason;
    w->head_woken = 0;
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
int gw__wq_wake_one(gw_waitq *wq, gw_wres *r, gw_wake reason)
{
    int64_t now = gw__now_ms();
    gw_waiter *due = NULL;

    for (gw_dlink *n = gw_dlist_first(&r->queue); n != NULL; n = gw_dlist_next(n)) {
        gw_waiter *w = gw_container_of(n, gw_waiter, link);
        if (w->state == GW_WAITER_SUSPENDED || w->state == GW_WAITER_PARKING) {
            if (w->timer.idx != GW_TIMER_OFF && w->timer.at <= now) {
                if (due == NULL) {
                    due = w;
                }
                continue;
            }
            gw__wq_wake(wq, w, reason);
            return 1;
        }
    }
    if (due != NULL) {
        gw__wq_wake(wq, due, reason); /* nobody with time left: it may still take the lock */
        return 1;
    }
    return 0;
}

void gw__wq_wake_all(gw_waitq *wq, gw_wake reason)
{
    for (size_t b = 0; b < WQ_BUCKETS; b++) {
        for (gw_wres *r = wq->buckets[b]; r != NULL; r = r->hnext) {
            while (gw__wq_wake_one(wq, r, reason)) {
            }
        }
    }
}

/* A release handed r's lock to the waiter with hand-off id `id` and minted `token` for it
 * (locklib's hand-offs; ops/lock_attempt.c, "Hand-offs"). The lock is held again, by that
 * waiter, so nobody else is woken: only that waiter, when it is parked here, so that its
 * attempt claims the grant. The hold released had a token below `token`: recorded as
 * token - 1, it tells an attempt that saw an older holder that the lock changed hands since
 * (it tries again: it may be the waiter named, whose attempt ran just before the grant),
 * and one that saw the grant that nothing did. The message takes a hand-off's credit like a
 * release message: the /unlock that sent it holds one. */
static void on_grant(gw_waitq *wq, gw_wres *r, int64_t token, const char *id)
{
    r->msgs++;
    r->msg_token[r->msgs % WQ_RING] = token - 1;
    r->msg_at[r->msgs % WQ_RING] = gw__now_ms();
    snprintf(r->msg_grant[r->msgs % WQ_RING], sizeof r->msg_grant[0], "%s", id);
    if (r->credits > 0 && gw__now_ms() > r->credit_until) {
        r->credits = 0;
    }
    int ours = r->credits > 0; /* this gateway's /unlock, whose claim is out behind it */
    if (ours) {
        r->credits--;
    }
    for (gw_dlink *n = gw_dlist_first(&r->queue); n != NULL; n = gw_dlist_next(n)) {
        gw_waiter *w = gw_container_of(n, gw_waiter, link);
        if (strcmp(w->handoff_id, id) != 0) {
            continue;
        }
        w->granted = 1; /* an attempt of it out now looks again rather than park */
        if (w->state == GW_WAITER_SUSPENDED || w->state == GW_WAITER_PARKING) {
            gw__wq_wake(wq, w, GW_WAKE_RELEASE);
        }
        break;
    }
    /* The waiter granted is elsewhere (another gateway), or attempting here. Should it
     * never claim (its gateway killed), the grant ends with its wait, silently: the waiters
     * here look at the lock again soon, one attempt, which sets the timer from the grant's
     * lease when it is still held. Not for this gateway's own hand-off, whose claim is
     * out. */
    if (!ours) {
        gw__wres_expiry_at(wq, r, gw__now_ms() + WQ_GRANT_CHECK_MS);
    }
}

/* A (re)subscription of r: messages may have been lost meanwhile, a grant's among them, so
 * every waiter parked here that a release may have granted the lock looks again (its
 * claims): every one queued in Redis for a hand-off, fair or not. Only the head of the fair
 * queue is granted, but the local order of fair waiters may differ from the queue's
 * (rt/waiters.c, "Fair waiters in order"). */
static void wake_claimers(gw_waitq *wq, gw_wres *r)
{
    gw_dlink *n = gw_dlist_first(&r->queue);
    while (n != NULL) {
        gw_waiter *w = gw_container_of(n, gw_waiter, link);
        n = gw_dlist_next(n);
        if (w->claims && (w->state == GW_WAITER_SUSPENDED || w->state == GW_WAITER_PARKING)) {
            gw__wq_wake(wq, w, GW_WAKE_RELEASE);
        }
    }
}

/* lk_sub_dispatch callback: a release or a (re)subscription of `resource`. */
void gw__wq_on_sub_event(const char *resource, int event, void *userdata)
{
    gw_waitq *wq = userdata;
    gw_wres *r = gw__wres_find(wq, resource);

    if (r == NULL) {
        return; /* nobody waits here any more (or a late confirmation) */
    }
    char grant_id[17];
    int64_t granted = event == LK_SUB_RELEASED ? lk_sub_event_grant(wq->sub, grant_id) : 0;
    if (granted > 0) {
        on_grant(wq, r, granted, grant_id);
        return;
    }
    int64_t token = event == LK_SUB_RELEASED ? lk_sub_event_token(wq->sub) : 0;
    if (token > 0) {
        r->msgs++;
        r->msg_token[r->msgs % WQ_RING] = token;
        r->msg_at[r->msgs % WQ_RING] = gw__now_ms();
        r->msg_grant[r->msgs % WQ_RING][0] = '\0';
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
    if (event != LK_SUB_RELEASED) {
        wake_claimers(wq, r);
    }
    gw__wq_wake_one(wq, r, GW_WAKE_RELEASE);
    if (event == LK_SUB_SUBSCRIBED && r->subscribed && !r->confirmed) {
        /* Counted after its wakes, so whoever sees the count sees them too. On Redlock,
         * at its first master's confirmation. */
        r->confirmed = 1;
        atomic_fetch_add(&wq->rt->metrics.subscriptions, 1);
    }
}

void gw__wq_fire_timers(gw_waitq *wq)
{
    int64_t now = gw__now_ms();
    for (gw_timer *t = gw__timer_first(&wq->timers); t != NULL && t->at <= now;
         t = gw__timer_first(&wq->timers)) {
        gw__timer_cancel(&wq->timers, t);
        if (t->kind == TIMER_EXPIRY) {
            gw_wres *r = (gw_wres *)((char *)t - offsetof(gw_wres, expiry));
            /* A lease running out may free the lock as a release does: a waiter whose
             * attempt is out now (not parked, so gw__wq_wake_one passes it by) must look again
             * rather than park on a hint that is already over. */
            r->epoch++;
            gw__wq_wake_one(wq, r, GW_WAKE_EXPIRY);
        } else {
            gw_waiter *w = (gw_waiter *)((char *)t - offsetof(gw_waiter, timer));
            gw__wq_wake(wq, w, GW_WAKE_DEADLINE);
        }
    }
}
