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
 * (transport.c) and the next call runs the steps again. A +switch-master message (one
 * subscription per transport, read without blocking before each batch) only makes that
 * happen sooner, before a call meets the demoted master: it is a hint, never trusted
 * without the steps and ROLE. What this cannot prevent is the lost write
 * Sentinel documents ("last failover wins"): an acquisition the old master acknowledged and
 * never replicated. The fencing tokens survive it through the caller's floor, which the
 * gateway passes on every acquisition (docs/topologies.md, "What a failover does to locks
 * and tokens").
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

/* The +switch-master hint: a connection to the first sentinel that answers, subscribed to
 * +switch-master. Returns NULL (no hint; the steps above still follow every failover) when
 * none answers. The caller frees it with redisFree(). */
redisContext *lk__sentinel_hint_open(const lk__sentinels *s, const lk__node *login, char *err);

/* Reads, without blocking, what the hint connection has received. Returns 1 when a
 * +switch-master for s->master_name arrived (the caller drops its data connection, so the
 * next call runs the steps above), 0 when not, -1 when the connection failed (the caller
 * frees it). */
int lk__sentinel_hint_switched(const lk__sentinels *s, redisContext *hint);

/* Runs the steps above. node gives the login and timeouts (its host and port are ignored)
 * and receives the master's host and port on success. Returns the connection to the master
 * (the caller frees it with redisFree()), or NULL with the reason of the last refusal in
 * err. */
redisContext *lk__sentinel_connect(const lk__sentinels *s, lk__node *node, char *err);

#endif
