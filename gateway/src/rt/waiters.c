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
 *     answered 409 instead of waiting (ops/lock.c, lock_woken).
 *   - SHUTDOWN: the gateway is stopping: it answers 503.
 * A woken waiter runs its attempt on an HTTP loop thread (the access handler is called again
 * on resume). If the lock is still held, it parks again. A waiter keeps its place in its
 * resource's queue from its first HELD answer until its wait ends, woken or not, so waking
 * "the first parked waiter" follows arrival order. A fair waiter takes its place when its
 * first call's answer is in; for an attempt its resource's floor stripe is still busy then
 * (fence.c), but joins are answered beside it, so the local order of fair waiters is close
 * to their order in the Redis queue, not always the same ("Fair waiters in order").
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
 * messages, subscription confirmations and its expiry timer firing). A waiter records the
 * epoch before its attempt and parks only if it has not moved; otherwise it tries again at
 * once. A new subscription
 * (or a resubscription after the subscriber connection dropped, when messages were lost)
 * wakes one waiter when Redis confirms it. If the subscriber is down, the expiry timer and
 * the deadline still wake waiters: slower, never a hang past wait_ms.
 *
 * Fair waiters behind the first. A fair attempt (or join, ops/lock_attempt.c) answered held
 * learns its place in the fair queue: k waiters ahead of it, and a holder or not. The lock
 * reaches it only after the holder's release and then one release per waiter ahead, each
 * of which hands it to the next in line (a grant in its script, or the next one's own
 * attempt). So a waiter behind the first parks though release messages came while its
 * attempt was out, as long as they were fewer than those turns; a message without a token,
 * an expiry or a confirmation (the epoch) still sends it back to Redis at once. Should a
 * waiter ahead be gone (its wait over, its gateway killed) the count runs ahead of the
 * queue, so such a waiter parks with its resource's expiry timer at most WQ_BEHIND_CHECK_MS
 * away, the fair queue's own poll of a free lock. On a hot fair lock every new request's
 * join is answered after releases went by: asking again would cost an attempt under the
 * stripe's turn, which the next /unlock needs free to hand on in its release
 * (ops/lock_attempt.c, "Hand-offs").
 *
 * Fair waiters in order. A release message wakes the first fair waiter parked here, which
 * is the first in line among them when their local order is the queue's. Joins take no turn
 * of the stripe and are answered on two Redis connections, so a later joiner may be placed
 * here before an earlier one, and the first in line can sleep on a free lock while another
 * waiter is woken. So an answer that finds the lock free with another waiter first names
 * that waiter's owner (locklib's lk_result.first), and if it is parked here, waitd wakes it
 * (gw__wait_wake_head). The queue's poll of a free lock (at most 1 s) wakes a waiter whose
 * answer then does this, so the order costs a wait of at most that poll, never the first
 * waiter's whole wait. A grant named for a waiter not yet placed here (its answer still on
 * the way) is kept in the message ring, and its park sees it (gw__wres_granted_since).
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
 * Hand-offs (ops/lock_attempt.c, gw__lock_handoff). An /unlock on this gateway claims the
 * first parked waiter of its resource (gw__wait_claim: what gw__wq_wake_one would pick,
 * SUSPENDED only) and sends its attempt right behind the release, in the same Redis batch.
 * The claim is a wake taken before the release: the waiter's epoch is read then, and the
 * resource gets a credit. The release's message, when it comes, uses the credit: it wakes
 * nobody, since the attempt ran after it (in the same pass of Redis, on the same
 * connection), and it is kept in the resource's ring of released tokens like any message
 * (without a token, from an older release script, it moves the epoch instead). A claim
 * whose attempt does not go out with the release (ops/lock_attempt.c) gives its credit up at
 * once. Which message uses a credit, and why that is safe:
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
 * returned before the claim; handle_event (waitd.c) passes over a waiter that is not
 * SUSPENDED, and the request, with the waiter in it, is freed through gw__wait_free(), which
 * leaves it to waitd until that batch is done (claim_loop). Nothing waits for waitd.
 *
 * Known holders (ops/lock.c, park_unasked). When a waiter here takes the lock in an attempt
 * that marked it wanted, its resource remembers the owner and the lease end, with the
 * epoch: while the epoch has not moved, the lease is not over and the subscriber is
 * connected, a new waiting /lock of another owner parks at once (gw__wait_known_held),
 * which is what its attempt would have answered. A release since publishes a message that
 * names its token (or moves the epoch, without one); an expiry is the expiry timer's; a
 * dropped subscriber forgets every holder.
 *
 * The line. Attempts on one stripe go to Redis one at a time (core/fence.c), so on a hot
 * lock several waiters' attempts queue behind it. An attempt answered held by a hold that
 * a release message has ended since would try again, at the end of that line; when the lock
 * changes hands faster than an attempt's round trip, every answer is such, nobody parks,
 * no /unlock finds a parked waiter to hand the lock to, and the line never empties: a
 * convoy of attempts that find the lock taken. So a non-fair waiter so answered parks when
 * an attempt of another non-fair waiter of its resource is still in the line (lined): that
 * attempt reaches Redis after the release, and either takes the lock, marked wanted (the
 * parked waiter counts as another waiter), or is answered held, which marks the lock
 * wanted; either way the next release publishes, and its message wakes a parked waiter. An
 * attempt that leaves the line without reaching Redis (answered 503 at its stripe) passes
 * a wake on instead. A fair waiter always looks again: its turn is its place in Redis's
 * queue, and an attempt of a waiter behind it cannot take the lock. Nor does a waiter that a
 * grant's message named since its attempt was sent (granted): the attempt in the line would
 * find the lock held by that very grant, and only this waiter's own attempt claims it.
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
#include <sys/socket.h>

#include <netinet/in.h>
#include <netinet/tcp.h>

#include "rt/loops.h"
#include "rt/util.h"
#include "rt/waiters.h"
#include "rt/waiters_internal.h"

/* ---- The loop threads' side ---------------------------------------------------------- */

int gw__wait_begin(gw_waitq *wq, gw_waiter *w, const char *resource)
{
    pthread_mutex_lock(&wq->mu);
    if (w->res == NULL) {
        gw_wres *r = gw__wres_get(wq, resource);
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

void gw__wait_sending(gw_waitq *wq, gw_waiter *w)
{
    if (w->res == NULL) {
        return;
    }
    pthread_mutex_lock(&wq->mu);
    w->epoch = w->res->epoch;
    w->msgs = w->res->msgs;
    w->granted = 0; /* this attempt claims a grant made so far */
    pthread_mutex_unlock(&wq->mu);
}

/* The parked waiter of r gw__wq_wake_one() would choose (SUSPENDED or PARKING), or NULL.
 * Under mu. */
static gw_waiter *first_parked(gw_wres *r, int64_t now)
{
    gw_waiter *due = NULL;

    if (r == NULL) {
        return NULL;
    }
    for (gw_dlink *n = gw_dlist_first(&r->queue); n != NULL; n = gw_dlist_next(n)) {
        gw_waiter *w = gw_container_of(n, gw_waiter, link);
        if (w->state != GW_WAITER_SUSPENDED && w->state != GW_WAITER_PARKING) {
            continue;
        }
        if (w->timer.idx != GW_TIMER_OFF && w->timer.at <= now) {
            if (due == NULL) {
                due = w;
            }
            continue;
        }
        return w;
    }
    return due;
}

gw_waiter *gw__wait_claim(gw_waitq *wq, const char *resource)
{
    int64_t now = gw__now_ms();

    pthread_mutex_lock(&wq->mu);
    gw_wres *r = wq->shutting_down ? NULL : gw__wres_find(wq, resource);
    /* The waiter gw__wq_wake_one() would choose, if it is SUSPENDED: a PARKING one's thread
     * is still suspending its connection, and only that thread may start its attempt then;
     * nobody else is claimed in its place (for fair waiters it may be the head of the
     * queue). */
    gw_waiter *claimed = first_parked(r, now);
    if (claimed != NULL && (claimed->state != GW_WAITER_SUSPENDED || claimed->set)) {
        claimed = NULL;
    }
    if (claimed != NULL) {
        gw_metrics *m = &wq->rt->metrics;
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
             * release of the grant (ops/lock_attempt.c, "Hand-offs"). */
            r->known_until = 0;
        }
        r->credit_until = now + WQ_CREDIT_MS;
    }
    pthread_mutex_unlock(&wq->mu);
    return claimed;
}

int gw__wait_kick_set(gw_waitq *wq, const char *resource)
{
    int kicked = 0;

    pthread_mutex_lock(&wq->mu);
    gw_wres *r = wq->shutting_down ? NULL : gw__wres_find(wq, resource);
    gw_waiter *w = first_parked(r, gw__now_ms());
    if (w != NULL && w->set) {
        /* waitd wakes the first parked waiter, as for a release message. */
        r->kicks++;
        gw__wq_pending_add(wq, r);
        kicked = 1;
    }
    pthread_mutex_unlock(&wq->mu);
    return kicked;
}

void gw__wait_handoff_settled(gw_waitq *wq, const char *resource, int published)
{
    if (published > 0) {
        return; /* its message comes (or came): it takes the credit */
    }
    pthread_mutex_lock(&wq->mu);
    gw_wres *r = gw__wres_find(wq, resource);
    if (r != NULL) {
        if (r->credits > 0) {
            r->credits--;
        } else {
            /* A message took this claim's credit already, though the release published
             * none: it came from another release, maybe one after the attempt. Its wake is
             * passed on, as the message would have done. */
            r->kicks++;
            gw__wq_pending_add(wq, r);
        }
    }
    pthread_mutex_unlock(&wq->mu);
}

/* Passes a wake on for an attempt of the line that learned nothing, when a waiter parked on
 * the line may count on it; once, so that failures in a row (Redis down) do not wake every
 * parked waiter in turn. Under mu. */
static void line_pass_wake(gw_waitq *wq, gw_wres *r)
{
    if (r->line_parked) {
        r->line_parked = 0;
        r->kicks++;
        gw__wq_pending_add(wq, r);
    }
}

void gw__wait_lined(gw_waitq *wq, gw_waiter *w, int joined, int sent)
{
    if (w->res == NULL) {
        return;
    }
    pthread_mutex_lock(&wq->mu);
    gw_wres *r = w->res;
    if (joined) {
        r->lined++;
    } else {
        r->lined--;
        if (!sent) {
            line_pass_wake(wq, r);
        }
    }
    pthread_mutex_unlock(&wq->mu);
}

int gw__wait_line_busy(gw_waitq *wq, const gw_waiter *w)
{
    int busy = 0;
    if (w->res != NULL && !w->fair) {
        pthread_mutex_lock(&wq->mu);
        busy = w->res->lined > 0 && !w->granted;
        if (busy) {
            w->res->line_parked = 1; /* its caller parks on it */
        }
        pthread_mutex_unlock(&wq->mu);
    }
    return busy;
}

void gw__wait_pass_wake(gw_waitq *wq, gw_waiter *w)
{
    if (w->res == NULL) {
        return;
    }
    pthread_mutex_lock(&wq->mu);
    line_pass_wake(wq, w->res);
    pthread_mutex_unlock(&wq->mu);
}

int gw__wait_join(gw_waitq *wq, gw_waiter *w, int begin)
{
    int ok = 0;

    if (w->res == NULL) {
        return 0;
    }
    pthread_mutex_lock(&wq->mu);
    gw_wres *r = w->res;
    if (!begin) {
        r->joins--;
    } else if (r->refs > 1 && r->joins < WQ_JOINS_MAX) {
        r->joins++;
        ok = 1;
    }
    pthread_mutex_unlock(&wq->mu);
    return ok;
}

void gw__wait_wake_head(gw_waitq *wq, gw_waiter *w, const char *first)
{
    if (first[0] == '#') {
        first++; /* a shared waiter's queue element */
    }
    if (w->res == NULL || first[0] == '\0') {
        return;
    }
    pthread_mutex_lock(&wq->mu);
    for (gw_dlink *n = gw_dlist_first(&w->res->queue); n != NULL; n = gw_dlist_next(n)) {
        gw_waiter *x = gw_container_of(n, gw_waiter, link);
        if (x != w && x->fair && x->owner != NULL && strcmp(x->owner, first) == 0) {
            if (x->state == GW_WAITER_SUSPENDED || x->state == GW_WAITER_PARKING) {
                x->head_woken = 1;
                w->res->head_wakes++;
                gw__wq_pending_add(wq, w->res);
            }
            break;
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
    gw__wq_queue_append(w->res, w);
    pthread_mutex_unlock(&wq->mu);
}

int gw__wait_others(gw_waitq *wq, const gw_waiter *w, const char *resource)
{
    int others = 0;

    pthread_mutex_lock(&wq->mu);
    const gw_wres *r = w->res != NULL ? w->res : gw__wres_find(wq, resource);
    if (r != NULL) {
        others = r->refs - (w->res == r) > 0;
    }
    pthread_mutex_unlock(&wq->mu);
    return others;
}

int gw__wait_count(gw_waitq *wq, const char *resource)
{
    int n = 0;

    pthread_mutex_lock(&wq->mu);
    const gw_wres *r = gw__wres_find(wq, resource);
    if (r != NULL) {
        n = r->refs;
    }
    pthread_mutex_unlock(&wq->mu);
    return n;
}

void gw__wait_note_holder(gw_waitq *wq, const gw_waiter *w, const char *owner,
                          int64_t token, int64_t lease_ms)
{
    gw_wres *r = w->res;
    if (r == NULL || lease_ms <= 0 || token <= 0) {
        return;
    }
    pthread_mutex_lock(&wq->mu);
    /* The epoch must not have moved since the attempt was sent: a release message seen since
     * may have come after the grant (another gateway's hand-off of a lease that ran out,
     * say), and then nothing says who holds the lock now. */
    if (r->epoch == w->epoch && !gw__wres_released_since(r, w->msgs, token) &&
        wq->sub_fd >= 0) {
        r->known_epoch = r->epoch;
        r->known_msgs = r->msgs;
        r->known_token = token;
        r->known_until = gw__now_ms() + lease_ms;
        snprintf(r->known_owner, sizeof r->known_owner, "%s", owner);
    }
    /* Waiters parked on the line ("The line") know no lease: if this hold is never
     * released, its end wakes one of them. */
    if (!gw_dlist_empty(&r->queue)) {
        gw__wres_expiry_at(wq, r, gw__now_ms() + lease_ms + 1);
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
        !gw__wres_released_since(r, r->known_msgs, r->known_token) && wq->sub_fd >= 0 &&
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
        gw__wq_queue_remove(w->res, w);
    }
    if (w->state == GW_WAITER_PARKING || w->state == GW_WAITER_SUSPENDED) {
        /* cannot happen on the normal paths; keep the entry consistent */
        gw__timer_cancel(&wq->timers, &w->timer);
        atomic_fetch_sub(&wq->rt->metrics.waiters_parked, 1);
    }
    if (held_ms >= 0 && !gw_dlist_empty(&w->res->queue)) {
        /* This waiter took the lock, or its last attempt (woken by a release or an expiry,
         * its deadline passing meanwhile) found a new holder: the others now wait for that
         * lease, which none of them has seen (no attempt of theirs since), and whose end
         * publishes nothing. Without this they would sleep on a lock freed by that expiry
         * until their own deadlines. (+1: PTTL rounds down.) A last attempt answered held
         * by a hold reported released used the wake of that release: the others nap
         * instead ("Settling"). */
        int64_t nap = gw__wres_settle_nap(wq, w->res, holder_token, held_ms);
        gw__wres_expiry_at(wq, w->res, gw__now_ms() + (nap > 0 ? nap : held_ms + 1));
    }
    if (w->parked_before) {
        w->parked_before = 0;
        wq->waiting--;
    }
    if (w->wake_unused) {
        /* Woken by a release or an expiry it never acted on: the next waiter gets it. */
        w->res->kicks++;
        gw__wq_pending_add(wq, w->res);
        w->wake_unused = 0;
    }
    gw__wres_unref(wq, w->res);
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
            gw_queue_push(&wq->graves, mem);
            gw__signal_waitd(wq);
            mem = NULL;
        }
        pthread_mutex_unlock(&wq->mu);
    }
    free(mem);
}

gw_park gw__wait_park(gw_waitq *wq, gw_waiter *w, struct MHD_Connection *conn,
                      int64_t deadline_ms, int64_t hint_ms, int64_t holder_token,
                      int64_t queue_pos)
{
    gw_wres *r = w->res;

    pthread_mutex_lock(&wq->mu);
    if (wq->shutting_down) {
        pthread_mutex_unlock(&wq->mu);
        return GW_PARK_SHUTDOWN;
    }
    /* Behind the first in line: the next `turns` releases since its attempt (the holder's,
     * then those of the waiters ahead of it) hand the lock to others ("Fair waiters behind
     * the first"). */
    int behind = w->fair && queue_pos > 0;
    uint64_t turns = (uint64_t)queue_pos + (holder_token > 0), since = r->msgs - w->msgs;
    int moved = r->epoch != w->epoch ||
                (behind ? since >= turns || gw__wres_granted_since(r, w->msgs, w->handoff_id)
                        : gw__wres_released_since(r, w->msgs, holder_token));
    if (w->granted || (moved && (w->fair || r->lined <= 0))) {
        /* Released (or resubscribed) since the attempt was sent: look again now, unless
         * another waiter's attempt queued behind the stripe will ("The line"). */
        w->epoch = r->epoch;
        w->msgs = r->msgs;
        w->granted = 0;
        pthread_mutex_unlock(&wq->mu);
        return GW_PARK_RETRY;
    }
    if (moved) {
        r->line_parked = 1; /* it parks on the line */
    }
    if (!w->parked_before && wq->waiting >= wq->max_waiters) {
        pthread_mutex_unlock(&wq->mu);
        return GW_PARK_FULL;
    }
    if (gw__wq_timer_set(wq, &w->timer, deadline_ms) != 0) {
        pthread_mutex_unlock(&wq->mu);
        return GW_PARK_NOMEM;
    }
    int passed = behind && since > 0;
    if (passed && (hint_ms < 0 || hint_ms > WQ_BEHIND_CHECK_MS)) {
        hint_ms = WQ_BEHIND_CHECK_MS; /* the lock went to the first in line, or is free */
    }
    /* A release this attempt saw coming is no sign that its answer is stale ("Settling"). */
    int64_t nap = passed ? 0 : gw__wres_settle_nap(wq, r, holder_token, hint_ms);
    if (nap > 0) {
        gw__wres_expiry_at(wq, r, gw__now_ms() + nap);
    } else if (hint_ms >= 0) {
        /* +1: PTTL rounds down, and a lock with 0.4 ms left reports 0. */
        gw__wres_expiry_at(wq, r, gw__now_ms() + hint_ms + 1);
    }
    w->conn = conn;
    w->state = GW_WAITER_PARKING;
    w->reason = GW_WAKE_NONE;
    if (!w->parked_before) {
        w->parked_before = 1;
        wq->waiting++;
    }
    gw__wq_queue_append(r, w);
    atomic_fetch_add(&wq->rt->metrics.waiters_parked, 1);
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
        gw__loops_resume(wq->rt->loops, conn);
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
