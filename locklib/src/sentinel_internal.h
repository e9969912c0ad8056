/*
 * Finding the master through Redis Sentinel (sentinel.c).
 *
 * The protocol, on every (re)connect of a Sentinel transport or subscriber, as Redis's
 * "Sentinel clients" guidelines describe it:
 *   1. Ask each sentinel in the URL's order SENTINEL get-master-addr-by-name NAME. A sentinel
 *      that is down, refuses the password, does not know NAME or answers anything but a
 *      host and a port is skipped.
 *   2. Connect to the address it names, with the data nodes' login (AUTH, SELECT).
 *   3. Send ROLE: only "master" is accepted. A sentinel that has not yet seen a failover
 *      names the demoted master, which answers "slave": that sentinel is skipped too and the
 *      next one asked.
 * Why this is enough: a connection only ever goes to a node that said it was master when
 * the connection was made. When it stops being master, either it died (the connection
 * fails) or it was demoted (every write answers -READONLY); both drop the connection
 * (transport.c) and the next call runs the steps again. Neither a sentinel's word nor a
 * +switch-master message is trusted without ROLE. What this cannot prevent is the lost write
 * Sentinel documents ("last failover wins"): an acquisition the old master acknowledged and
 * never replicated. The fencing tokens survive it through the caller's floor, which the
 * gateway passes on every acquisition (README, "Redis topologies").
 * Layer: above conn. Never installed.
 */
#ifndef LOCKLIB_SENTINEL_INTERNAL_H
#define LOCKLIB_SENTINEL_INTERNAL_H

#include "conn_internal.h"

#define LK__SEEDS_MAX 16

/* A host and port from a URL: a sentinel, or (later) a cluster seed node. */
typedef struct lk__seed {
    char host[256];
    int port;
} lk__seed;

/* The sentinels of a redis-sentinel:// URL and the name of the master they watch. */
typedef struct lk__sentinels {
    int n;
    lk__seed seeds[LK__SEEDS_MAX];
    char master_name[128];
} lk__sentinels;

/* Runs the steps above. node gives the login and timeouts (its host and port are ignored)
 * and receives the master's host and port on success. Returns the connection to the master
 * (the caller frees it with redisFree()), or NULL with the reason of the last refusal in
 * err. */
redisContext *lk__sentinel_connect(const lk__sentinels *s, lk__node *node, char *err);

#endif
