/*
 * Parked waiters (waiters.c): a /lock that found the lock held waits here, its connection
 * suspended, until a release, the holder's expiry, its deadline, a hang-up or shutdown wakes
 * it. The state machine and why a wake-up cannot be missed are in waiters.c.
 */
#ifndef GATEWAY_WAITERS_H
#define GATEWAY_WAITERS_H

#include <stdint.h>

#include <microhttpd.h>

#include "rt/waiter.h"

struct gw_rt;

typedef enum gw_park {
    GW_PARKED,                    /* suspended: return MHD_YES without a response */
    GW_PARK_RETRY,                /* a release came during the attempt: attempt again now */
    GW_PARK_SHUTDOWN,             /* shutting down: answer 503 */
    GW_PARK_FULL,                 /* --max-waiters are waiting already: answer 503 */
    GW_PARK_NOMEM                 /* answer 503 */
} gw_park;

/* Starts the waiters' thread and its Redis subscriber (Redis may be down: it reconnects).
 * Sets rt->waitq. Returns 0 or -1 with err. */
int gw__waitq_start(struct gw_rt *rt, char *err, size_t errlen);
/* Wakes every parked waiter with GW_WAKE_SHUTDOWN, and every later park answers
 * GW_PARK_SHUTDOWN. Returns at once. */
void gw__waitq_shutdown(gw_waitq *wq);
/* Stops the thread and frees everything. Only after every request has completed. */
void gw__waitq_stop(gw_waitq *wq);
/* Before each attempt of a waiting /lock: takes a reference on the resource's entry (the
 * first one subscribes to its channel) and records its epoch. Returns 0, or -1 without
 * memory. */
int gw__wait_begin(gw_waitq *wq, gw_waiter *w, const char *resource);
/* An attempt of w leaves for Redis now, after it may have waited for its stripe's turn:
 * on one Redis, Sentinel or Cluster it will see every release published so far, so only
 * messages from here on can say that the holder it finds has gone (gw__wait_park). On
 * Redlock a message comes with the first master's release, and the attempt may still meet
 * that holder on a majority: it parks, and the settling nap ("Settling", waiters.c) looks
 * again soon. Takes w's epoch and message count again. No-op without a reference. */
void gw__wait_sending(gw_waitq *wq, gw_waiter *w);
/* Gives the waiter its place at the end of its resource's queue now, if it has none (a fair
 * waiter's attempt calls it on the pipeline thread right after its HELD answer, while its
 * stripe is still busy, so that its local place follows its place in the Redis queue).
 * No-op without a reference. */
void gw__wait_place(gw_waitq *wq, gw_waiter *w);
/* 1 when waiters of resource other than w (which may hold no reference) are between
 * gw__wait_begin and gw__wait_end, parked or attempting: an attempt for w passes it to
 * locklib (lk_call.others_waiting), so that a grant to w is released with a wake-up for
 * them (locklib/lua/prelude/wanted.lua). */
int gw__wait_others(gw_waitq *wq, const gw_waiter *w, const char *resource);
/* How many waiters of resource this gateway has between gw__wait_begin and gw__wait_end
 * (parked or attempting). Any thread. */
int gw__wait_count(gw_waitq *wq, const char *resource);

/* A hand-off (ops/lock_attempt.c, gw__lock_handoff): claims the first parked waiter of
 * resource that waitd could wake for a release (SUSPENDED, its deadline not due, or the only
 * one), as if that release's message had woken it already: its deadline timer and
 * disconnect watch stop, it keeps its place in the queue, and its epoch is taken now, before
 * the release is sent. The caller then owns its request's state and sends its attempt right
 * behind the release. The release's message, when it comes, is this wake (waiters.c,
 * "Hand-offs"): waitd wakes nobody else for it. NULL when nobody can be claimed, or when
 * shutting down. */
gw_waiter *gw__wait_claim(gw_waitq *wq, const char *resource);
/* After a shared grant of resource whose hand-off claimed nobody: when the first parked
 * waiter there is a set's (never claimed), waitd wakes it as a release message would, so
 * that it attempts its set and, granted, hands on in turn. Returns 1 when it did. */
int gw__wait_kick_set(gw_waitq *wq, const char *resource);
/* The line (waiters.c, "The line"): an attempt of w, a non-fair waiter, joins its stripe's
 * line (joined 1) or leaves it (joined 0), sent to Redis (sent 1) or answered without it
 * (sent 0: a waiter may have parked counting on it, so waitd wakes one, as for a
 * release). */
void gw__wait_lined(gw_waitq *wq, gw_waiter *w, int joined, int sent);
/* Whether an attempt of another non-fair waiter of w's resource waits in its stripe's line
 * (w not fair, and named by no grant since its last attempt): the caller then parks without
 * asking ("The line"), and is counted as parked on the line, so that an attempt of the line
 * that learns nothing passes a wake on. */
int gw__wait_line_busy(gw_waitq *wq, const gw_waiter *w);
/* An attempt of w, a non-fair waiter, got no answer from Redis (an error, a timeout): the
 * waiters parked on it may sleep on a free lock, so waitd wakes one, as for a release. */
void gw__wait_pass_wake(gw_waitq *wq, gw_waiter *w);
/* begin 1: whether w, a fair waiter, may send a join now: other requests here wait for its
 * resource, and fewer than WQ_JOINS_MAX joins of it are out; if so the join is counted
 * until gw__wait_join(wq, w, 0) at its answer. */
int gw__wait_join(gw_waitq *wq, gw_waiter *w, int begin);
/* An attempt of w, a fair waiter, was answered that the lock is free but the waiter whose
 * queue element is `first` (lk_result.first: its owner, "#"-prefixed when shared) is first
 * in line: when that waiter is parked here, waitd wakes it, as for a release ("Fair waiters
 * in order"). */
void gw__wait_wake_head(gw_waitq *wq, gw_waiter *w, const char *first);
/* The release a claim went out behind is answered (on the pipeline thread): published is
 * lk_result.published, 0 for anything but RELEASED. When nothing was published no message
 * comes for the claim, so none may be taken for it. */
void gw__wait_handoff_settled(gw_waitq *wq, const char *resource, int published);

/* Known holders (waiters.c, "Known holders"). The waiter w just took the lock for owner with
 * a lease of lease_ms, in an attempt that marked the lock wanted (lk_call.others_waiting):
 * until a release message, an expiry or a resubscription moves its resource's epoch, the
 * lease is over, or the subscriber is down, the gateway knows who holds the lock. Call
 * before gw__wait_end(). */
void gw__wait_note_holder(gw_waitq *wq, const gw_waiter *w, const char *owner,
                          int64_t token, int64_t lease_ms);
/* After gw__wait_begin(): the known holder's remaining lease when the lock is known to be
 * held, marked wanted, by an owner other than `owner`: a waiting attempt may park without
 * asking Redis, since that lock's release publishes a message and its expiry has a timer;
 * its token then goes to *token (the holder token to park with). -1 when nothing is known. */
int64_t gw__wait_known_held(gw_waitq *wq, const gw_waiter *w, const char *owner,
                            int64_t *token);

/* After the attempt that ends the wait (or from request completion): leaves the queue, drops
 * the reference, and passes on a wake the waiter never used. held_ms is how long the lock is
 * held from now as that attempt saw it: the lease this waiter just took, or the time left of
 * the holder it found (its wait over); -1 when unknown. The waiters still parked then wait
 * for that lease, whose end publishes nothing. holder_token is the token of the hold that
 * attempt found held (0 when it took the lock or nothing is known). No-op without a
 * reference. */
void gw__wait_end(gw_waitq *wq, gw_waiter *w, int64_t held_ms, int64_t holder_token);
/* Frees mem, the request's state that holds w, at its completion (after gw__wait_end):
 * at once, or, when w was claimed while waitd may still hold an event of its socket, on
 * waitd's thread once that event is handled. mem must be at least a pointer long. */
void gw__wait_free(gw_waitq *wq, const gw_waiter *w, void *mem);
/* After an attempt answered HELD with time left: parks the waiter and suspends conn (the
 * caller is the access handler of conn). deadline_ms is monotonic; hint_ms is the holder's
 * remaining lease (-1 unknown); holder_token the token of the hold the attempt found
 * (lk_result.holder_token, 0 unknown); queue_pos a fair attempt's 0-based place in the fair
 * queue (lk_result.queue_pos; -1 for none, and for a shared request, which can be granted
 * with those before it). GW_PARK_RETRY when the lock may have been freed
 * since the attempt was sent, for this waiter ("Fair waiters behind the first"). */
gw_park gw__wait_park(gw_waitq *wq, gw_waiter *w, struct MHD_Connection *conn,
                      int64_t deadline_ms, int64_t hint_ms, int64_t holder_token,
                      int64_t queue_pos);
/* What the socket of conn says about its client, without reading anything:
 *   GW_PEER_OPEN  still sending, or quiet (a pipelined request's bytes, or nothing yet);
 *   GW_PEER_EOF   it closed its sending side: a half-close (shutdown(SHUT_WR), which HTTP/1.1
 *                 allows, the client still reads) and a close() look the same until
 *                 something is written to it;
 *   GW_PEER_GONE  the connection is reset or broken: nothing written reaches the client. */
typedef enum gw_peer { GW_PEER_OPEN, GW_PEER_EOF, GW_PEER_GONE } gw_peer;
gw_peer gw__conn_peer(struct MHD_Connection *conn);

#endif
