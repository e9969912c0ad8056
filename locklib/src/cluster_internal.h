/*
 * The Redis Cluster transport (cluster.c): slot routing, MOVED, ASK, TRYAGAIN and CLUSTERDOWN
 * behind lk__transport_run(), one single-node transport per master.
 *
 * Why locklib routes by itself: hiredis 0.14 (Debian 12's) has no cluster support,
 * hiredis-cluster needs hiredis 1.x, and Debian 12 packages no C cluster client. Every call
 * locklib sends touches the keys of one resource, fg:{R}:..., one hash slot, so the routing
 * a lock library needs is small: which master owns the slot of {R}.
 * Layer: above transport. Never installed.
 */
#ifndef LOCKLIB_CLUSTER_INTERNAL_H
#define LOCKLIB_CLUSTER_INTERNAL_H

#include "transport_internal.h"

/* Most masters (and ASK targets) one cluster transport keeps a connection to. */
#define LK__CLUSTER_NODES 32

/* Sets t up as a Cluster transport over the seed nodes (copied, at least one), logging in
 * as login (its host and port are not used; copied), without connecting. Returns OK, or
 * ENOMEM (then t holds nothing to free). lk__transport_free() frees it. */
lk_status lk__cluster_init(lk__transport *t, const lk__node *login, const lk__seed *seeds,
                           int nseeds, lk_breaker *breaker, char *err);

/* Sets dst up for another connection to what src talks to, whatever its kind (the
 * watchdog's own transport), without connecting. Returns OK or ENOMEM. */
lk_status lk__transport_init_like(lk__transport *dst, const lk__transport *src,
                                  lk_breaker *breaker, char *err);

/* Copies into out[0..max) the masters of the slot map (reading it first when needed), for
 * a caller that visits every master (a listing). Returns how many, or -1 with the reason in
 * t->err when the map cannot be read. */
int lk__cluster_masters(lk__transport *t, lk__node *out, int max);

/* The hash slot of a key: CRC16/XMODEM of its hash tag (the bytes between the first '{'
 * and the next '}', when not empty) or of the whole key, mod 16384. */
int lk__cluster_slot(const char *key, size_t len);

#endif
