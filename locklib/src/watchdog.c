/*
 * The watchdog: keeps LK_LEASE_WATCHDOG locks alive for C embedders, like Redisson's.
 *
 * One thread per handle, started by the first watchdog acquisition, with its own transport
 * (hiredis contexts are not thread-safe) to the handle's server, without a breaker:
 * renewals are few, and must keep trying through a stall. A renewal is an LK_CALL_RENEW run
 * by lk__run(), the code lk_renew() runs, below the public calls (so locks.c may call in
 * here without a circle). Every watched lock is renewed every lease/3.
 * A watch ends when:
 *   - the holder releases the lock to zero, or finds it not held (lk_release removes it);
 *   - the handle is closed (the thread stops; the lease then simply runs out);
 *   - a renewal answers NOT_OWNER, or Redis could not be reached for a whole lease: the
 *     lock is reported lost through on_lost and lk_watch_lost().
 * If the process dies, the thread dies with it, so nothing ever renews the lock of a dead
 * holder: its lease runs out within one watchdog lease.
 *
 * A session (lk_session_watch) is watched the same way, every ttl/3 of its own lease: its
 * watch's owner is "#" and the session's client ('#' is never in an owner id, so no lock's
 * watch is mistaken for one), and its renewal is lk__session_renew(), which renews the
 * session's locks too. A session found ended is reported lost through on_lost with a NULL
 * owner.
 *
 * A release races with the renewals: a renewal that Redis runs just after the release
 * script answers NOT_OWNER before lk_release() has removed the watch. So lk_release() marks
 * the watch `releasing` before it runs its script; no renewal starts while it is set, and a
 * NOT_OWNER that comes back while it is set (or after the removal) is not a loss.
 *
 * lk_watch_lost() may run on any thread: c->wd is an atomic pointer published once the
 * watchdog is ready, and only lk_client_close() frees it.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "run_internal.h"
#include "session_internal.h"
#include "watchdog_internal.h"

typedef struct watch {
    char resource[LK_RESOURCE_MAX + 1];
    char owner[LK_OWNER_MAX + 1];
    int64_t due_ms;        /* next renewal */
    int64_t lease_ms;      /* the lease each renewal grants: the watchdog's, or a session's */
    int64_t renewed_ms;    /* last successful renewal (or the acquisition) */
    int lost;
    int releasing;         /* lk_release() is running its script: not renewed, never lost */
    int removed;           /* freed by the thread at the top of its loop */
    struct watch *next;
} watch;

struct lk__watchdog {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    watch *list;
    lk__transport tp;      /* the thread's own connection */
    char err[LK__ERR_LEN]; /* tp's reasons, read by nobody */
    lk_options opts;       /* the handle's, for building the renewals */
    int64_t lease_ms;
    lk_lost_fn on_lost;
    void *userdata;
};

static void deadline_ts(struct timespec *ts, int64_t due_ms)
{
    /* The condition variable runs on CLOCK_MONOTONIC, like lk__now_ms(). */
    ts->tv_sec = (time_t)(due_ms / 1000);
    ts->tv_nsec = (long)(due_ms % 1000) * 1000000L;
}

static watch *find(lk__watchdog *wd, const char *resource, const char *owner)
{
    for (watch *w = wd->list; w != NULL; w = w->next) {
        if (!w->removed && strcmp(w->resource, resource) == 0 && strcmp(w->owner, owner) == 0) {
            return w;
        }
    }
    return NULL;
}

static void sweep(lk__watchdog *wd)
{
    watch **pp = &wd->list;
    while (*pp != NULL) {
        watch *w = *pp;
        if (w->removed) {
            *pp = w->next;
            free(w);
        } else {
            pp = &w->next;
        }
    }
}

/* Renews one due watch with the mutex released around the Redis call. Called locked. */
static void renew_one(lk__watchdog *wd, watch *w, int64_t now)
{
    char resource[LK_RESOURCE_MAX + 1];
    char owner[LK_OWNER_MAX + 1];
    int64_t lease_ms = w->lease_ms;
    lk_status st;

    memcpy(resource, w->resource, sizeof resource);
    memcpy(owner, w->owner, sizeof owner);
    /* Not removed while unlocked: only this thread frees watches (in sweep). */
    pthread_mutex_unlock(&wd->mu);
    if (owner[0] == '#') {
        st = lk__session_renew(&wd->tp, &wd->opts, wd->err, resource, owner + 1, NULL);
    } else {
        lk_call call = {.kind = LK_CALL_RENEW, .resource = resource, .owner = owner,
                        .lease_ms = lease_ms};
        lk_call *one[1] = {&call};
        lk__run(&wd->tp, &wd->opts, one, 1, LK_CALL_RENEW);
        st = call.status;
    }
    pthread_mutex_lock(&wd->mu);
    now = lk__now_ms();
    if (w->removed || w->releasing) {
        return; /* Released meanwhile: a NOT_OWNER now is the release, not a loss. */
    }
    if (st == LK_RENEWED) {
        w->renewed_ms = now;
        w->due_ms = now + lease_ms / 3;
        return;
    }
    if (st != LK_NOT_OWNER && now - w->renewed_ms < lease_ms) {
        /* Redis unreachable: the lease still runs, so try again soon. */
        int64_t retry = lease_ms / 10 < 1000 ? lease_ms / 10 : 1000;
        w->due_ms = now + retry;
        return;
    }
    w->lost = 1;
    if (wd->on_lost != NULL) {
        pthread_mutex_unlock(&wd->mu);
        wd->on_lost(resource, owner[0] == '#' ? NULL : owner, wd->userdata);
        pthread_mutex_lock(&wd->mu);
    }
}

static void *run(void *arg)
{
    lk__watchdog *wd = arg;

    pthread_mutex_lock(&wd->mu);
    while (!wd->stop) {
        sweep(wd);
        int64_t now = lk__now_ms();
        watch *due = NULL;
        int64_t next = INT64_MAX;
        for (watch *w = wd->list; w != NULL; w = w->next) {
            if (w->lost || w->releasing) {
                continue;
            }
            if (w->due_ms <= now) {
                due = w;
                break;
            }
            if (w->due_ms < next) {
                next = w->due_ms;
            }
        }
        if (due != NULL) {
            renew_one(wd, due, now);
        } else if (next == INT64_MAX) {
            pthread_cond_wait(&wd->cv, &wd->mu);
        } else {
            struct timespec ts;
            deadline_ts(&ts, next);
            pthread_cond_timedwait(&wd->cv, &wd->mu, &ts);
        }
    }
    pthread_mutex_unlock(&wd->mu);
    return NULL;
}

static lk_status start(lk_client *c)
{
    lk__watchdog *wd = calloc(1, sizeof *wd);
    pthread_condattr_t attr;

    if (wd == NULL) {
        return LK_ENOMEM;
    }
    lk_status st = lk__redlock_is(&c->tp) ? lk__redlock_init_like(&wd->tp, &c->tp, wd->err)
                                          : lk__transport_init_like(&wd->tp, &c->tp, NULL,
                                                                    wd->err);
    if (st != LK_OK) {
        free(wd);
        return LK_ENOMEM;
    }
    /* Connected now, as the handle's own connection is; a failure is retried by the
     * renewals. */
    (void)lk__transport_connect(&wd->tp);
    wd->opts = c->opts;
    wd->lease_ms = c->opts.watchdog_lease_ms;
    wd->on_lost = c->opts.on_lost;
    wd->userdata = c->opts.on_lost_userdata;
    pthread_mutex_init(&wd->mu, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&wd->cv, &attr);
    pthread_condattr_destroy(&attr);
    if (pthread_create(&wd->thread, NULL, run, wd) != 0) {
        lk__transport_free(&wd->tp);
        pthread_cond_destroy(&wd->cv);
        pthread_mutex_destroy(&wd->mu);
        free(wd);
        return LK_ENOMEM;
    }
    /* Published last, with release order: a thread that loads it sees it initialised. */
    atomic_store_explicit(&c->wd, wd, memory_order_release);
    return LK_OK;
}

lk_status lk__watch_add(lk_client *c, const char *resource, const char *owner)
{
    return lk__watch_add_lease(c, resource, owner, c->opts.watchdog_lease_ms);
}

lk_status lk__watch_add_lease(lk_client *c, const char *resource, const char *owner,
                              int64_t lease_ms)
{
    if (c->wd == NULL) {
        lk_status st = start(c);
        if (st != LK_OK) {
            return st;
        }
    }
    lk__watchdog *wd = c->wd;
    int64_t now = lk__now_ms();
    pthread_mutex_lock(&wd->mu);
    watch *w = find(wd, resource, owner);
    if (w == NULL) {
        w = calloc(1, sizeof *w);
        if (w == NULL) {
            pthread_mutex_unlock(&wd->mu);
            return LK_ENOMEM;
        }
        strcpy(w->resource, resource);
        strcpy(w->owner, owner);
        w->next = wd->list;
        wd->list = w;
    }
    /* A (re-)acquisition just set a full lease. */
    w->lost = 0;
    w->lease_ms = lease_ms;
    w->renewed_ms = now;
    w->due_ms = now + lease_ms / 3;
    pthread_cond_signal(&wd->cv);
    pthread_mutex_unlock(&wd->mu);
    return LK_OK;
}

enum { MARK_SETTLED, MARK_RELEASING, MARK_REMOVED };

/* Marks the watch of (resource, owner), if any, and wakes the thread: a watch no longer
 * releasing may have been skipped and must be looked at again. */
static void mark(lk_client *c, const char *resource, const char *owner, int how)
{
    lk__watchdog *wd = c->wd;
    if (wd == NULL) {
        return;
    }
    pthread_mutex_lock(&wd->mu);
    watch *w = find(wd, resource, owner);
    if (w != NULL && how == MARK_REMOVED) {
        w->removed = 1;
    } else if (w != NULL) {
        w->releasing = how == MARK_RELEASING;
    }
    pthread_cond_signal(&wd->cv);
    pthread_mutex_unlock(&wd->mu);
}

void lk__watch_releasing(lk_client *c, const char *resource, const char *owner, int releasing)
{
    mark(c, resource, owner, releasing ? MARK_RELEASING : MARK_SETTLED);
}

void lk__watch_remove(lk_client *c, const char *resource, const char *owner)
{
    mark(c, resource, owner, MARK_REMOVED);
}

int lk_watch_lost(lk_client *c, const char *resource, const char *owner)
{
    /* May run on any thread while the owner's thread starts the watchdog. */
    lk__watchdog *wd = c != NULL ? atomic_load_explicit(&c->wd, memory_order_acquire) : NULL;
    int lost = 0;
    if (wd == NULL || resource == NULL || owner == NULL) {
        return 0;
    }
    pthread_mutex_lock(&wd->mu);
    watch *w = find(wd, resource, owner);
    lost = w != NULL && w->lost;
    pthread_mutex_unlock(&wd->mu);
    return lost;
}

void lk__watchdog_stop(lk_client *c)
{
    lk__watchdog *wd = c->wd;
    if (wd == NULL) {
        return;
    }
    pthread_mutex_lock(&wd->mu);
    wd->stop = 1;
    pthread_cond_signal(&wd->cv);
    pthread_mutex_unlock(&wd->mu);
    pthread_join(wd->thread, NULL);
    for (watch *w = wd->list; w != NULL;) {
        watch *next = w->next;
        free(w);
        w = next;
    }
    lk__transport_free(&wd->tp);
    pthread_cond_destroy(&wd->cv);
    pthread_mutex_destroy(&wd->mu);
    free(wd);
    c->wd = NULL;
}
