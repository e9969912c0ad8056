/*
 * The transport: which connection a built call (lk__cmd) is sent on, and how its reply
 * comes back. Building a call and decoding its reply (calls.c) know nothing of it; a
 * transport knows nothing of what a call means.
 *
 * The seam is lk__transport_run(): a batch of built calls in, exactly one outcome per call
 * out (done(): the script's array reply, or an error status with the reason in t->err at
 * the time of the callback). Whatever happens on the wire, every call is answered once, and
 * a call answered EUNAVAILABLE may or may not have run. Each call carries its routing key
 * (cmd->route, the resource whose hash tag {route} every key shares), so the other
 * topologies' implementations fit behind the same function:
 *   - Redis Cluster: group the batch by the slot of route (CRC16 of the tag), run each group
 *     as one pipeline on the node that owns the slot (the single-node code below, per node),
 *     hand each reply back under its call's index. MOVED/ASK is, like NOSCRIPT, "did not
 *     run": refresh the slot map and send that call again in the next round.
 *   - Sentinel: the single-node transport whose connect step first asks the sentinels for
 *     the current master; -READONLY (a demoted master) drops the connection so the next
 *     round resolves the master again.
 *   - Redlock: send every call of the batch to N single-node transports at once; a combiner
 *     per call kind turns the N replies of one call into the one reply handed back (a
 *     majority of acquisitions, the largest token), so decode still sees one reply.
 * Sentinel is the `kind` LK_TOPOLOGY_SENTINEL of the struct below: the same single-node
 * code, whose connect step is lk__sentinel_connect() (sentinel_internal.h: ask, connect,
 * ROLE) instead of lk__connect(), and whose node's host and port are the master found by the
 * last connect. A -READONLY reply drops the connection once the batch is read, so the next
 * batch asks the sentinels again.
 * Cluster (cluster.c) is a transport with `ops`: every lk__transport_* function below hands
 * the call to t->ops when it is set, so this file never names cluster.c and cluster.c, which
 * drives one single-node transport per master, sits above it. Redlock
 * (redlock_transport.c) is the same: it owns one single-node transport per master.
 *
 * Failure handling of the single node, in order of how often it happens:
 *  - Redis restarted or the connection dropped between calls: before sending, a dead socket
 *    (EOF or stray bytes) is noticed with a zero-timeout poll, and the batch reconnects
 *    first. Nothing was sent, so nothing is ambiguous.
 *  - The connection dies, or a reply is later than command_timeout_ms, after a command was
 *    sent: that call and every later one of the batch get LK_EUNAVAILABLE and the
 *    connection is dropped; the next batch reconnects. Callers that retry pass the same
 *    idempotency key, so a retry replays the first answer instead of acting twice.
 *  - A restarted Redis has an empty script cache: EVALSHA answers NOSCRIPT (the script did
 *    not run), and the script is loaded again and the call re-sent once.
 *  - Redis busy, loading, out of memory (noeviction), read-only replica: LK_EUNAVAILABLE,
 *    nothing changed.
 *  - Redis stalls: the breaker (breaker.c) makes the following batches fail fast.
 * Layer: above util, breaker and script. Never installed.
 */
#ifndef LOCKLIB_TRANSPORT_INTERNAL_H
#define LOCKLIB_TRANSPORT_INTERNAL_H

#include "breaker_internal.h"
#include "conn_internal.h"
#include "script_internal.h"
#include "sentinel_internal.h"
#include "util_internal.h"

typedef struct lk__transport lk__transport;

/* One call's outcome, exactly once per call: LK_OK with the script's array reply (the
 * callee frees it with freeReplyObject()), or an error status with reply NULL and the
 * reason in the transport's err. A transport that decodes by itself (Redlock) answers an
 * outcome status (below LK_EINVAL, LK_OK included) with reply NULL: the outcome is then
 * already in the call's cmd->out, and the callee must not decode. */
typedef void (*lk__reply_fn)(void *ctx, size_t i, lk_status st, redisReply *reply);

/* A transport implemented elsewhere (Cluster): the functions below, each with their
 * contract. */
typedef struct lk__transport_ops {
    lk_status (*connect)(lk__transport *t);
    void (*run)(lk__transport *t, size_t n, const lk__cmd *const *cmds, lk__reply_fn done,
                void *ctx);
    lk_status (*wait)(lk__transport *t, int replicas, int timeout_ms, long long *acked);
    lk_status (*ping)(lk__transport *t);
    redisContext *(*open)(lk__transport *t);
    void (*drop)(lk__transport *t);
    void (*free)(lk__transport *t);
} lk__transport_ops;

/* The single-node transport: one connection, the SHA of each script loaded on it. With
 * kind LK_TOPOLOGY_SENTINEL, the node is the master found through `sentinels`; with `ops`
 * set, another implementation whose state is `impl`. */
struct lk__transport {
    const lk__transport_ops *ops;      /* NULL: this file's single node */
    void *impl;                        /* the ops' state */
    lk_topology_kind kind;
    lk__node node;                     /* SENTINEL: login and timeouts; host and port are
                                        * the master of the last connect */
    lk__sentinels sentinels;           /* SENTINEL only */
    redisContext *hint;                /* SENTINEL: subscribed to +switch-master, or NULL */
    char master[300];                  /* "host:port" of the last connect, "" before */
    long long failovers;               /* times a connect found another master than the
                                        * one before */
    long long connects;                /* connections opened, so a layer above notices a
                                        * reconnect (Redlock) */
    int owner_opens;                   /* 1: batches, PING and lk__transport_connect()
                                        * never open a connection (they drop a dead one and
                                        * answer EUNAVAILABLE); only lk__transport_reopen()
                                        * does. A Redlock node: its marker is read on each
                                        * new connection before anything sent there counts */
    int stale;                         /* a reply said READONLY: drop after this batch */
    size_t owed;                       /* replies of earlier batches still to come on ctx,
                                        * read and dropped before any later reply (a
                                        * Redlock node left behind by its majority:
                                        * lk__transport_abandon) */
    int asking;                        /* send ASKING before each call (a Cluster ASK
                                        * redirection) */
    int unsent;                        /* 1 while a batch answers the calls it never wrote
                                        * (no connection, a script that would not load):
                                        * they did not run. A Cluster sends such a call to
                                        * its slot's owner in a map read afresh (cluster.c) */
    lk_breaker *breaker;               /* NULL for none */
    redisContext *ctx;                 /* NULL while disconnected */
    char sha[LK__SCRIPT_COUNT][41];    /* "" until SCRIPT LOAD on the current connection */
    char *err;                         /* the reason of the last error, LK__ERR_LEN bytes;
                                        * the owner's buffer */
};

/* Sets up t for node (copied) without connecting; err is where reasons go. sentinels is
 * NULL for a single node, else copied, and the node's master is found through them. */
void lk__transport_init(lk__transport *t, const lk__node *node, const lk__sentinels *sentinels,
                        lk_breaker *breaker, char *err);

/* Opens a new connection, not t's own, to the node t would connect to now (for Sentinel,
 * asking the sentinels again), for a subscriber. Returns NULL with the reason in t->err.
 * The caller frees it with redisFree(). */
redisContext *lk__transport_open(lk__transport *t);

/* Connects now if not connected (drops a connection found dead first). Returns OK or
 * EUNAVAILABLE/ENOMEM with the reason. With owner_opens set it opens nothing: EUNAVAILABLE
 * when there is no live connection. */
lk_status lk__transport_connect(lk__transport *t);

/* lk__transport_connect() that opens a connection even with owner_opens set. */
lk_status lk__transport_reopen(lk__transport *t);

/* The first step of lk__transport_connect() alone: drops a single node's connection when
 * it is dead (an error on it, or EOF or stray bytes while it owes no reply). Writes no
 * reason. */
void lk__transport_drop_dead(lk__transport *t);

/* Frees the connection (the next batch reconnects) and forgets the loaded scripts. */
void lk__transport_drop(lk__transport *t);

/* Drops the connection and wipes the password: t is unusable until initialised again. */
void lk__transport_free(lk__transport *t);

/* A batch of one single-node transport between its two halves (below). */
typedef struct lk__inflight {
    size_t n;
    const lk__cmd *const *cmds;
    unsigned char *state;              /* per call; NULL once every call is answered */
    lk__reply_fn done;
    void *ctx;
    int probe;                         /* the breaker's */
    int64_t start;
    lk_status st, worst;
    char why[LK__ERR_LEN];             /* start()'s reason when it failed: the err buffer may
                                        * be another node's by finish() (a Cluster) */
} lk__inflight;

/* lk__transport_run() of a single node in two halves, so that a cluster writes every node's
 * group before it reads any reply (the nodes then work at the same time): start() checks
 * the breaker, connects, loads missing scripts, and writes every call; finish() reads the
 * replies, resends after NOSCRIPT, answers what is left and frees. Every start() must be
 * followed by finish() on the same b, on the same thread; done() may be called by either. */
void lk__transport_start(lk__transport *t, lk__inflight *b, size_t n,
                         const lk__cmd *const *cmds, lk__reply_fn done, void *ctx);
void lk__transport_finish(lk__transport *t, lk__inflight *b);

/* For a caller that polls several nodes at once (redlock_transport.c), between start() and
 * finish():
 *  - waiting() is 1 while some call of b waits for its reply on a live connection;
 *  - read_ready(), when poll() says t's connection is readable, reads what has arrived
 *    without waiting for more and handles each complete reply as finish() would (the
 *    replies owed by earlier batches come first and are dropped). A connection that fails
 *    is dropped and the calls still waiting are answered EUNAVAILABLE. finish() then reads
 *    nothing more: it only resends calls answered NOSCRIPT, and answers and frees;
 *  - abandon() ends b instead of finish(): the calls still waiting are answered
 *    EUNAVAILABLE now, as if the node had not answered, and their replies become owed:
 *    read and dropped by whatever reads the connection next. Nothing waits for them.
 * Not for a batch that sends ASKING (a Cluster ASK redirection). */
int lk__transport_waiting(const lk__transport *t, const lk__inflight *b);
void lk__transport_read_ready(lk__transport *t, lk__inflight *b);
void lk__transport_abandon(lk__transport *t, lk__inflight *b);

/* Loads every script t's connection lacks now, so that no later batch needs to (a batch
 * on a connection that owes replies would first wait for them: lk__transport_settle).
 * Returns OK, or the failure (EUNAVAILABLE with the connection dropped, or EREDIS). */
lk_status lk__transport_load_all(lk__transport *t);

/* Reads and drops the replies t owes (above), waiting for them with the command timeout,
 * before a command whose reply is read at once. Returns OK, or EUNAVAILABLE with the
 * connection dropped. */
lk_status lk__transport_settle(lk__transport *t);

/* Runs the n built calls of cmds (none NULL) as one batch, with the breaker, the SIGPIPE
 * guard, reconnection and NOSCRIPT handling, and calls done() once for each, in an order
 * that is the order of cmds except that a call sent again after NOSCRIPT comes later. */
void lk__transport_run(lk__transport *t, size_t n, const lk__cmd *const *cmds,
                       lk__reply_fn done, void *ctx);

/* WAIT for `replicas` replicas, at most timeout_ms, on the connection that carried the last
 * batch. Returns EUNAVAILABLE (with the reason) when that connection is gone, else OK with
 * *acked the number that acknowledged: 0 when WAIT failed, and the connection is then
 * dropped (a late answer would be read as the next call's). */
lk_status lk__transport_wait(lk__transport *t, int replicas, int timeout_ms, long long *acked);

/* PING through the breaker. Returns OK or EUNAVAILABLE with the reason. */
lk_status lk__transport_ping(lk__transport *t);

#endif
