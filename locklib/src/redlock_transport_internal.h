/*
 * The Redlock transport (redlock_transport.c): N independent Redis masters behind
 * lk__transport_run(), one single-node transport per master, every call sent to all of them
 * and the N replies merged by redlock.c's combiners (redlock_internal.h lists the steps).
 * Layer: above transport, calls and redlock. Never installed.
 */
#ifndef LOCKLIB_REDLOCK_TRANSPORT_INTERNAL_H
#define LOCKLIB_REDLOCK_TRANSPORT_INTERNAL_H

#include "transport_internal.h"

/* Sets t up as a Redlock transport over the n masters (copied; n valid for
 * lk__rl_valid_n()), logging in as login (its host and port are not used; copied), without
 * connecting. watchdog_lease_ms is the lease of LK_LEASE_WATCHDOG acquisitions; max_lease_ms
 * the hold-out of a node that lost its data (redlock.c, 3). Returns OK, EINVAL (bad n) or
 * ENOMEM (then t holds nothing to free). lk__transport_free() frees it. */
lk_status lk__redlock_init(lk__transport *t, const lk__node *login, const lk__seed *nodes,
                           int n, int64_t watchdog_lease_ms, int64_t max_lease_ms,
                           char *err);

/* 1 when t is a Redlock transport. */
int lk__redlock_is(const lk__transport *t);

/* Sets dst up as another Redlock transport over the same nodes as src (a Redlock
 * transport), without connecting. Returns OK or ENOMEM. */
lk_status lk__redlock_init_like(lk__transport *dst, const lk__transport *src, char *err);

/* The number of masters of t. */
int lk__redlock_size(const lk__transport *t);

/* Opens a new connection, not t's own, to master k when it counts now (reachable and not
 * held out), for a subscriber. Returns NULL otherwise, with the reason in t->err. The
 * caller frees it with redisFree(). */
redisContext *lk__redlock_open_node(lk__transport *t, int k);

/* Fills out->nnodes and out->nodes with each master's address and state as t last saw it
 * (no password). */
void lk__redlock_nodes(const lk__transport *t, lk_topology *out);

/* Copies into out[0..max) each master not held out after a data loss, for a caller that
 * visits them on connections of its own (a listing). Returns how many. */
int lk__redlock_masters(const lk__transport *t, lk__node *out, int max);

#endif
