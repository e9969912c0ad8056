/*
 * waitd, the wait queue's thread (the state machine is in waiters.c): one epoll loop over the
 * Redis subscriber, the parked sockets' hang-ups and the timers, a thread that reconnects the
 * subscriber, and the queue's start and stop.
 *
 * Not a tick of the HTTP loops: the subscriber may block (a SUBSCRIBE write up to the command
 * timeout; on Redlock, lk_sub_dispatch() reconnects a dropped master up to the connect
 * timeout), which would hold up every connection of a loop.
 */
#define _GNU_SOURCE /* EPOLLRDHUP */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "rt/log.h"
#include "rt/loops.h"
#include "rt/util.h"
#include "rt/waiters.h"
#include "rt/waiters_internal.h"

/* ---- Subscriptions (waitd, under mu) ------------------------------------------------- */

static void sub_lost(gw_waitq *wq);

/* A (UN)SUBSCRIBE could not be written: the connection is closed (lk_sub dropped it), so
 * treat it as lost, which schedules the reconnect and the resubscriptions. */
static void sub_write_failed(gw_waitq *wq)
{
    if (lk_sub_fd(wq->sub) < 0 && wq->sub_fd >= 0) {
        gw__log_event(wq->rt->cfg, "warn", "redis subscriber: %s; reconnecting",
                      lk_sub_errstr(wq->sub));
        sub_lost(wq);
    }
}

/* Subscriptions, unsubscriptions and passed-on wakes asked for by loop threads. */
static void run_pending(gw_waitq *wq)
{
    gw_qlink *l;
    while ((l = gw_queue_pop(&wq->unsub)) != NULL) {
        unsub_node *u = gw_container_of(l, unsub_node, link);
        if (wq->sub_fd >= 0 && lk_sub_remove(wq->sub, u->name) != LK_OK) {
            sub_write_failed(wq);
        }
        free(u);
    }
    while (!gw_dlist_empty(&wq->pending)) {
        gw_wres *r = gw_container_of(gw_dlist_first(&wq->pending), gw_wres, pend);
        gw__wq_pending_remove(wq, r);
        if (r->need_sub && wq->sub_fd >= 0) {
            if (lk_sub_add(wq->sub, r->name) == LK_OK) {
                r->need_sub = 0;
                r->subscribed = 1;
            } else {
                sub_write_failed(wq); /* r stays need_sub; every entry is resubscribed */
            }
        }
        for (; r->kicks > 0; r->kicks--) {
            gw__wq_wake_one(wq, r, GW_WAKE_RELEASE);
        }
        for (gw_dlink *n = r->head_wakes > 0 ? gw_dlist_first(&r->queue) : NULL; n != NULL;
             n = gw_dlist_next(n)) {
            gw_waiter *w = gw_container_of(n, gw_waiter, link);
            if (w->head_woken) {
                w->head_woken = 0;
                if (w->state == GW_WAITER_SUSPENDED || w->state == GW_WAITER_PARKING) {
                    gw__wq_wake(wq, w, GW_WAKE_RELEASE);
                }
            }
        }
        r->head_wakes = 0;
    }
}

/* ---- The subscriber connection (waitd) ---------------------------------------------- */

static void sub_lost(gw_waitq *wq)
{
    /* lk_sub has closed the socket already, which took it out of epfd; its number may even
     * belong to another connection now, so it is not touched. */
    wq->sub_fd = -1;
    atomic_store(&wq->rt->metrics.subscriber_up, 0);
    wq->reconnect_at_ms = gw__now_ms() + wq->reconnect_backoff_ms;
    /* Every subscription is gone with the connection; renew them all on reconnect. */
    for (size_t b = 0; b < WQ_BUCKETS; b++) {
        for (gw_wres *r = wq->buckets[b]; r != NULL; r = r->hnext) {
            r->subscribed = 0;
            if (r->confirmed) {
                r->confirmed = 0;
                atomic_fetch_sub(&wq->rt->metrics.subscriptions, 1);
            }
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
    lk_status st;

    prctl(PR_SET_NAME, "fg-resubscribe", 0, 0, 0);
    st = lk_sub_reconnect(wq->sub);

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
        atomic_store(&wq->rt->metrics.subscriber_up, 1);
        for (size_t b = 0; b < WQ_BUCKETS; b++) {
            for (gw_wres *r = wq->buckets[b]; r != NULL; r = r->hnext) {
                gw__wq_pending_add(wq, r); /* need_sub is set for every entry */
            }
        }
    }
    wq->reconnecting = 0;
    gw__signal_waitd(wq);
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
            gw__wq_wake_all(wq, GW_WAKE_SHUTDOWN);
        }
        return;
    }
    if (ev->data.ptr == wq) { /* the subscriber */
        if (lk_sub_dispatch(wq->sub, gw__wq_on_sub_event, wq) != LK_OK) {
            gw__log_event(wq->rt->cfg, "warn", "redis subscriber: %s; reconnecting",
                          lk_sub_errstr(wq->sub));
            sub_lost(wq);
        }
        return;
    }
    gw_waiter *w = ev->data.ptr; /* a parked client hung up */
    if (w->state == GW_WAITER_SUSPENDED) {
        gw__wq_wake(wq, w, GW_WAKE_DISCONNECT);
    }
}

static void *waitd_main(void *arg)
{
    gw_waitq *wq = arg;
    struct epoll_event evs[WQ_EVENTS];

    prctl(PR_SET_NAME, "fg-waitd", 0, 0, 0);

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
            gw__wq_wake_all(wq, GW_WAKE_SHUTDOWN);
        }
        run_pending(wq);
        gw__wq_fire_timers(wq);
        /* Every event of this batch is handled: a waiter claimed before now can no longer
         * be reached through one (gw__wait_end). */
        wq->loops++;
        gw_queue graves = wq->graves;
        gw_queue_init(&wq->graves);
        size_t len = wq->resume_len;
        wq->resume_len = 0;
        /* Resume outside mu. The array is only touched by this thread. */
        pthread_mutex_unlock(&wq->mu);
        while (!gw_queue_empty(&graves)) {
            free(gw_queue_pop(&graves));
        }
        for (size_t i = 0; i < len; i++) {
            gw__loops_resume(wq->rt->loops, wq->resume[i]);
        }
    }
}

/* ---- Start and stop ------------------------------------------------------------------ */

int gw__waitq_start(gw_rt *rt, char *err, size_t errlen)
{
    gw_waitq *wq = calloc(1, sizeof *wq);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};

    if (wq == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    wq->rt = rt;
    wq->max_waiters = rt->cfg->max_waiters;
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
    lk_status st = lk_sub_open(&wq->sub, rt->cfg->redis_url, &rt->lk_opts);
    if (wq->sub == NULL) {
        snprintf(err, errlen, "cannot create the Redis subscriber: %s", lk_status_str(st));
        goto fail;
    }
    if (st == LK_OK) {
        struct epoll_event sev = {.events = EPOLLIN, .data.ptr = wq};
        wq->sub_fd = lk_sub_fd(wq->sub);
        epoll_ctl(wq->epfd, EPOLL_CTL_ADD, wq->sub_fd, &sev);
        atomic_store(&rt->metrics.subscriber_up, 1);
    }
    if (pthread_create(&wq->thread, NULL, waitd_main, wq) != 0) {
        snprintf(err, errlen, "cannot start the waiters' thread");
        goto fail;
    }
    rt->waitq = wq;
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
    gw__signal_waitd(wq);
    pthread_mutex_unlock(&wq->mu);
}

void gw__waitq_stop(gw_waitq *wq)
{
    if (wq == NULL) {
        return;
    }
    pthread_mutex_lock(&wq->mu);
    wq->stop = 1;
    gw__signal_waitd(wq);
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
    gw_qlink *l;
    while ((l = gw_queue_pop(&wq->unsub)) != NULL) {
        free(gw_container_of(l, unsub_node, link));
    }
    while ((l = gw_queue_pop(&wq->graves)) != NULL) {
        free(l);
    }
    lk_sub_close(wq->sub);
    close(wq->epfd);
    close(wq->evfd);
    gw__timer_heap_free(&wq->timers);
    free(wq->resume);
    pthread_mutex_destroy(&wq->mu);
    free(wq);
}
