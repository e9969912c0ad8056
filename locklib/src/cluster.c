/*
 * The Redis Cluster transport: why it exists is in cluster_internal.h.
 *
 * State: the slot map (which master owns each of the 16384 slots, from CLUSTER SHARDS,
 * Redis 7.0) and one single-node transport per master, each with its own connection, script
 * SHAs, NOSCRIPT reloads and breaker use (transport.c).
 *
 * A batch, in rounds until every call is answered or the command timeout has passed:
 *   1. When the map is missing or marked stale, read it again from a known master or a seed.
 *   2. Group the unanswered calls by target: the owner of the slot of the call's route (the
 *      resource, whose {tag} every key of the call carries), or the node an ASK named.
 *   3. Run each group as one pipeline on its node, every node's written before any reply is
 *      read, so the masters work at the same time; ASK groups after, with ASKING before
 *      each call.
 *   4. Sort each answer:
 *        - a script reply, or an error that is the call's own: the call's answer;
 *        - MOVED: the slot moved for good. The whole map is read again (Redis's advice: one
 *          MOVED usually means many), and the call goes again next round;
 *        - ASK: the slot is migrating and this key is already at the importing node. The
 *          call goes again next round to that node after ASKING, once; the map is left
 *          alone (the slot still belongs to the old owner until the migration ends);
 *        - TRYAGAIN (a multi-key call during a migration whose keys are not all on one
 *          side; Redis 7.0 also answers it to an ASKING multi-key call whose keys do not all
 *          exist yet, which is every script on a new resource, so in practice a call on a
 *          migrating slot waits for the migration to end, then meets MOVED) and
 *          CLUSTERDOWN (no master for a slot, during a failover): the call goes again after
 *          a short nap, until the timeout;
 *        - no reply at all (a dead node, a timeout): EUNAVAILABLE, like one node (the call
 *          may have run), and the map is marked stale: a failover may have moved the slots;
 *        - not written at all (no connection to the node: killed, restarted, failed over):
 *          the call did not run. The map is read again and the call goes next round to the
 *          slot's owner then; if the map still names the same node it is answered
 *          EUNAVAILABLE with the connect's reason, without sending it there again (not
 *          after an ASK: the owner would name the same node again).
 * Why resending is safe: MOVED, ASK, TRYAGAIN and CLUSTERDOWN are refusals; the script did
 * not run, exactly like NOSCRIPT. Each call gets one answer, under its own index, so a batch
 * split over nodes answers each call as it would have been answered alone.
 *
 * Failovers: a master killed fails every call sent to it until the cluster promotes its
 * replica; the stale map is read again at the next batch, and a slot with no master yet is
 * retried (as CLUSTERDOWN) until the timeout. A handle that meets the promotion late (its
 * connection to the killed master idle since) loses no call to it: the call is not
 * written, so it follows the map read then. A map naming a master the previous map did
 * not counts one failover (lk_client_topology()).
 *
 * Release messages: the scripts PUBLISH on fg:{R}:released. In a cluster, PUBLISH is
 * forwarded to every node over the cluster bus, so one subscriber connection to any node
 * (open(): the first master that answers) hears every release, and follows a failover by
 * reconnecting to another node. Why not sharded pub/sub (SPUBLISH/SSUBSCRIBE): a subscriber
 * would need one connection per master, and lk_sub hands its caller one descriptor to poll;
 * docs/topologies.md, "Cluster", has the trade-off.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster_internal.h"

#define SLOTS 16384
/* Rounds are bounded by the command timeout; this only stops a MOVED/ASK ping-pong between
 * two nodes that disagree (it cannot last: the migration ends in a SETSLOT NODE). */
#define MAX_ROUNDS 1000

typedef struct cnode {
    lk__transport tp;       /* tp.node.host/port: the node's address */
    unsigned long down_run; /* the batch (lk__cluster.runs) in which a call to it could not
                             * be sent: no connection; 0 for none */
    char down_err[LK__ERR_LEN]; /* why */
} cnode;

typedef struct lk__cluster {
    lk__node login;                    /* user, password, timeouts */
    int nseeds;
    lk__seed seeds[LK__SEEDS_MAX];
    lk_breaker *breaker;
    int nnodes;
    cnode *nodes[LK__CLUSTER_NODES];
    short owner[SLOTS];                /* index in nodes, -1 for none */
    int have_map;
    int stale;                         /* read the map before the next batch */
    int last;                          /* the node of the last batch's last group, -1 */
    unsigned long runs;                /* batches run so far */
} lk__cluster;

int lk__cluster_slot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);
    if (open != NULL) {
        const char *close = memchr(open + 1, '}', len - (size_t)(open + 1 - key));
        if (close != NULL && close > open + 1) {
            key = open + 1;
            len = (size_t)(close - open - 1);
        }
    }
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((unsigned char)key[i] << 8);
        for (int b = 0; b < 8; b++) {
            crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
        }
    }
    return crc & (SLOTS - 1);
}

static void nap_ms(int ms)
{
    struct timespec ts = {0, (long)ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- Nodes and the map ------------------------------------------------------------------ */

static int find_node(const lk__cluster *cl, const char *host, int port)
{
    for (int k = 0; k < cl->nnodes; k++) {
        if (cl->nodes[k]->tp.node.port == port && strcmp(cl->nodes[k]->tp.node.host, host) == 0) {
            return k;
        }
    }
    return -1;
}

/* Index of the node host:port, added (not connected) when new. -1 when full or out of
 * memory. */
static int add_node(lk__transport *t, const char *host, int port)
{
    lk__cluster *cl = t->impl;
    int k = find_node(cl, host, port);
    if (k >= 0) {
        return k;
    }
    if (cl->nnodes == LK__CLUSTER_NODES || strlen(host) >= sizeof cl->login.host) {
        return -1;
    }
    cnode *n = calloc(1, sizeof *n);
    if (n == NULL) {
        return -1;
    }
    lk__node node = cl->login;
    snprintf(node.host, sizeof node.host, "%s", host);
    node.port = port;
    lk__transport_init(&n->tp, &node, NULL, cl->breaker, t->err);
    memset(node.password, 0, sizeof node.password);
    cl->nodes[cl->nnodes] = n;
    return cl->nnodes++;
}

/* Frees the nodes no slot points to (masters that failed or left), keeping the order. */
static void prune_nodes(lk__cluster *cl)
{
    int used[LK__CLUSTER_NODES] = {0};
    int remap[LK__CLUSTER_NODES];
    int kept = 0;

    for (int s = 0; s < SLOTS; s++) {
        if (cl->owner[s] >= 0) {
            used[cl->owner[s]] = 1;
        }
    }
    for (int k = 0; k < cl->nnodes; k++) {
        if (!used[k]) {
            lk__transport_free(&cl->nodes[k]->tp);
            free(cl->nodes[k]);
            remap[k] = -1;
            continue;
        }
        remap[k] = kept;
        cl->nodes[kept++] = cl->nodes[k];
    }
    cl->nnodes = kept;
    for (int s = 0; s < SLOTS; s++) {
        if (cl->owner[s] >= 0) {
            cl->owner[s] = (short)remap[cl->owner[s]];
        }
    }
}

/* The value of field `name` in a flat key/value array (RESP2 map), or NULL. */
static const redisReply *field(const redisReply *r, const char *name)
{
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        return NULL;
    }
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        const redisReply *k = r->element[i];
        if (k->type == REDIS_REPLY_STRING && strcmp(k->str, name) == 0) {
            return r->element[i + 1];
        }
    }
    return NULL;
}

/* The healthy master of one CLUSTER SHARDS shard: its node index (added when new), or -1. */
static int shard_master(lk__transport *t, const redisReply *shard)
{
    const redisReply *nodes = field(shard, "nodes");
    for (size_t i = 0; nodes != NULL && i < nodes->elements; i++) {
        const redisReply *role = field(nodes->element[i], "role");
        const redisReply *health = field(nodes->element[i], "health");
        const redisReply *ip = field(nodes->element[i], "ip");
        const redisReply *port = field(nodes->element[i], "port");
        if (role == NULL || role->type != REDIS_REPLY_STRING || strcmp(role->str, "master") != 0 ||
            health == NULL || health->type != REDIS_REPLY_STRING ||
            strcmp(health->str, "online") != 0 || ip == NULL || ip->type != REDIS_REPLY_STRING ||
            port == NULL || port->type != REDIS_REPLY_INTEGER) {
            continue;
        }
        return add_node(t, ip->str, (int)port->integer);
    }
    return -1;
}

/* Writes "host:port,host:port,..." of the masters into t->master and counts a failover when
 * a new master appeared since the last map. */
static void note_masters(lk__transport *t)
{
    lk__cluster *cl = t->impl;
    char now[sizeof t->master] = "";
    size_t len = 0;

    for (int k = 0; k < cl->nnodes; k++) {
        int n = snprintf(now + len, sizeof now - len, "%s%s:%d", k > 0 ? "," : "",
                         cl->nodes[k]->tp.node.host, cl->nodes[k]->tp.node.port);
        if (n < 0 || (size_t)n >= sizeof now - len) {
            break;
        }
        len += (size_t)n;
    }
    /* A failover shows as a master that was not one before (a promoted replica); a master
     * that merely fails, or a slot that moves between masters, is not counted. */
    for (int k = 0; t->master[0] != '\0' && k < cl->nnodes; k++) {
        char addr[300];
        char padded[sizeof t->master + 2];
        snprintf(addr, sizeof addr, ",%s:%d,", cl->nodes[k]->tp.node.host,
                 cl->nodes[k]->tp.node.port);
        snprintf(padded, sizeof padded, ",%s,", t->master);
        if (strstr(padded, addr) == NULL) {
            t->failovers++;
            break;
        }
    }
    if (now[0] != '\0') {
        memcpy(t->master, now, sizeof now);
    }
}

/* Reads CLUSTER SHARDS into the map. Returns 0, or -1 when the reply is not a map. */
static int apply_shards(lk__transport *t, const redisReply *r)
{
    lk__cluster *cl = t->impl;

    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements == 0) {
        return -1;
    }
    for (int s = 0; s < SLOTS; s++) {
        cl->owner[s] = -1;
    }
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *slots = field(r->element[i], "slots");
        if (slots == NULL || slots->type != REDIS_REPLY_ARRAY || slots->elements == 0) {
            continue;
        }
        int k = shard_master(t, r->element[i]);
        for (size_t j = 0; k >= 0 && j + 1 < slots->elements; j += 2) {
            long long lo = slots->element[j]->integer;
            long long hi = slots->element[j + 1]->integer;
            for (long long s = lo; s >= 0 && s <= hi && s < SLOTS; s++) {
                cl->owner[s] = (short)k;
            }
        }
    }
    prune_nodes(cl);
    note_masters(t);
    return 0;
}

/* Asks one node at addr for the map. Returns 0, or -1 with the reason in t->err. */
static int map_from(lk__transport *t, const char *host, int port)
{
    lk__cluster *cl = t->impl;
    lk__node node = cl->login;
    const char *argv[2] = {"CLUSTER", "SHARDS"};
    size_t lens[2] = {7, 6};
    int rc = -1;

    snprintf(node.host, sizeof node.host, "%s", host);
    node.port = port;
    redisContext *ctx = lk__connect(&node, t->err);
    memset(node.password, 0, sizeof node.password);
    if (ctx == NULL) {
        return -1;
    }
    redisReply *r = lk__command_argv(ctx, 2, argv, lens);
    if (apply_shards(t, r) == 0) {
        rc = 0;
    } else {
        lk__errf(t->err, LK_EUNAVAILABLE, "CLUSTER SHARDS on %s:%d failed: %s", host, port,
                 r == NULL ? ctx->errstr : r->type == REDIS_REPLY_ERROR ? r->str : "no map");
    }
    freeReplyObject(r);
    redisFree(ctx);
    return rc;
}

/* Step 1: reads the map from the known masters, then the seeds. Returns OK or
 * EUNAVAILABLE with the reason. */
static lk_status refresh(lk__transport *t)
{
    lk__cluster *cl = t->impl;
    char host[256];

    for (int k = 0; k < cl->nnodes; k++) {
        int port = cl->nodes[k]->tp.node.port;
        snprintf(host, sizeof host, "%s", cl->nodes[k]->tp.node.host);
        if (map_from(t, host, port) == 0) {
            goto ok;
        }
    }
    for (int i = 0; i < cl->nseeds; i++) {
        if (map_from(t, cl->seeds[i].host, cl->seeds[i].port) == 0) {
            goto ok;
        }
    }
    return LK_EUNAVAILABLE;
ok:
    cl->have_map = 1;
    cl->stale = 0;
    return LK_OK;
}

static lk_status ensure_map(lk__transport *t)
{
    lk__cluster *cl = t->impl;
    return cl->have_map && !cl->stale ? LK_OK : refresh(t);
}

/* ---- Batches ------------------------------------------------------------------------------ */

enum { C_DONE = 0, C_PENDING };

typedef struct cbatch {
    lk__transport *t;
    const lk__cmd *const *cmds;
    unsigned char *state;
    short *ask;                        /* node an ASK named for this call, -1 */
    const lk__cmd **sub;               /* one group's calls */
    size_t *subidx;                    /* their indexes in cmds */
    lk__reply_fn done;
    void *ctx;
    int retry;                         /* a TRYAGAIN, CLUSTERDOWN or a slot without master */
    /* This batch's latest refusal (a MOVED, ASK, TRYAGAIN or CLUSTERDOWN reply, or a slot
     * without a master), "" for none: the reason given when the rounds run out. Kept apart
     * from t->err, which may still hold an earlier batch's reason (a round that sends
     * nothing writes none), so the reason never quotes an earlier one. */
    char last[LK__ERR_LEN];
} cbatch;

static int error_is(const char *err, const char *what)
{
    static const char prefix[] = "Redis error: ";
    return strncmp(err, prefix, sizeof prefix - 1) == 0 &&
           strncmp(err + sizeof prefix - 1, what, strlen(what)) == 0;
}

/* The node an "ASK <slot> <host>:<port>" in err names, added when new; -1 if unreadable. */
static int ask_target(lk__transport *t, const char *err)
{
    const char *addr = strchr(err + strlen("Redis error: ASK "), ' ');
    const char *colon = addr != NULL ? strrchr(addr, ':') : NULL;
    char host[256];

    if (colon == NULL || (size_t)(colon - addr - 1) >= sizeof host) {
        return -1;
    }
    memcpy(host, addr + 1, (size_t)(colon - addr - 1));
    host[colon - addr - 1] = '\0';
    return add_node(t, host, atoi(colon + 1));
}

/* One group of a round: its calls are b->sub[off..] and b->subidx[off..]. */
typedef struct cgroup {
    cbatch *b;
    size_t off;
    cnode *node;
} cgroup;

/* Step 4, for one call of a group. */
static void group_done(void *ctx, size_t j, lk_status st, redisReply *reply)
{
    cgroup *g = ctx;
    cbatch *b = g->b;
    lk__cluster *cl = b->t->impl;
    size_t i = b->subidx[g->off + j];
    const char *err = b->t->err;

    if (st != LK_OK && (error_is(err, "MOVED ") || error_is(err, "ASK ") ||
                        error_is(err, "TRYAGAIN") || error_is(err, "CLUSTERDOWN"))) {
        snprintf(b->last, sizeof b->last, "%s", err);
    }
    if (st != LK_OK && error_is(err, "MOVED ")) {
        cl->stale = 1;
        return;
    }
    if (st != LK_OK && error_is(err, "ASK ")) {
        int k = ask_target(b->t, err);
        if (k >= 0) {
            b->ask[i] = (short)k;
            return;
        }
    }
    if (st != LK_OK && (error_is(err, "TRYAGAIN") || error_is(err, "CLUSTERDOWN"))) {
        cl->stale = cl->stale || error_is(err, "CLUSTERDOWN");
        b->retry = 1;
        return;
    }
    if (st == LK_EUNAVAILABLE && g->node->tp.unsent && !g->node->tp.asking) {
        /* Never written: the node has no connection (killed, restarted, failed over), so
         * the call did not run. The map is read again next round, and the call goes to
         * the slot's owner then, unless that is this node still (run_round). A failover
         * another handle has already seen then costs no error here. Not after an ASK: the
         * slot's owner would name the same unreachable node again. */
        g->node->down_run = cl->runs;
        snprintf(g->node->down_err, sizeof g->node->down_err, "%s", err);
        cl->stale = 1;
        return;
    }
    if (st == LK_EUNAVAILABLE) {
        cl->stale = 1; /* a node that does not answer may have been failed over */
    }
    b->state[i] = C_DONE;
    b->done(b->ctx, i, st, reply);
}

/* Steps 2 and 3 for every node: asking 1 for the ASK redirections. Every node's group is
 * written before any reply is read, so the masters run their groups at the same time. */
static void run_groups(cbatch *b, size_t n, int asking, const short *target)
{
    lk__cluster *cl = b->t->impl;
    lk__inflight fl[LK__CLUSTER_NODES];
    cgroup groups[LK__CLUSTER_NODES];
    size_t m[LK__CLUSTER_NODES] = {0};
    int nodes = cl->nnodes; /* an ASK answer may add a node meanwhile: not in this round */
    size_t off = 0;

    for (int k = 0; k < nodes; k++) {
        groups[k] = (cgroup){b, off, cl->nodes[k]};
        for (size_t i = 0; i < n; i++) {
            /* An ASK answered in this round's first pass goes out in its second. */
            int to = asking ? b->ask[i] : b->ask[i] < 0 ? target[i] : -1;
            if (b->state[i] == C_PENDING && to == k) {
                b->sub[off + m[k]] = b->cmds[i];
                b->subidx[off + m[k]++] = i;
            }
        }
        for (size_t j = 0; j < m[k]; j++) {
            b->ask[b->subidx[off + j]] = -1; /* an ASK is followed once */
        }
        off += m[k];
    }
    for (int k = 0; k < nodes; k++) {
        if (m[k] > 0) {
            cl->nodes[k]->tp.asking = asking;
            lk__transport_start(&cl->nodes[k]->tp, &fl[k], m[k], b->sub + groups[k].off,
                                group_done, &groups[k]);
        }
    }
    for (int k = 0; k < nodes; k++) {
        if (m[k] > 0) {
            lk__transport_finish(&cl->nodes[k]->tp, &fl[k]);
            cl->nodes[k]->tp.asking = 0;
            cl->last = k;
        }
    }
}

/* Answers pending call i EUNAVAILABLE, as its first try was, when its node k could not be
 * reached in this batch (group_done: no connection) and the map, read since, still names
 * it: trying again would only wait for the same connect. Returns 1 if it answered. */
static int answer_if_down(cbatch *b, size_t i, int k)
{
    lk__cluster *cl = b->t->impl;
    if (k < 0 || k >= cl->nnodes || cl->nodes[k]->down_run != cl->runs) {
        return 0;
    }
    b->state[i] = C_DONE;
    b->done(b->ctx, i, lk__errf(b->t->err, LK_EUNAVAILABLE, "%s", cl->nodes[k]->down_err),
            NULL);
    return 1;
}

/* Answers, without a map, every pending call whose node could not be reached in this batch
 * (the map could not be read again: the old one names its node still). Returns the number
 * of calls left pending. */
static size_t answer_down(cbatch *b, size_t n)
{
    lk__cluster *cl = b->t->impl;
    size_t left = 0;
    for (size_t i = 0; i < n; i++) {
        if (b->state[i] != C_PENDING) {
            continue;
        }
        const char *route = b->cmds[i]->route;
        int k = b->ask[i] >= 0 ? b->ask[i] : cl->owner[lk__cluster_slot(route, strlen(route))];
        left += !answer_if_down(b, i, k);
    }
    return left;
}

/* One round of steps 2 and 3. Returns the number of calls still unanswered before it. */
static size_t run_round(cbatch *b, size_t n, short *target)
{
    lk__cluster *cl = b->t->impl;
    size_t pending = 0;

    for (size_t i = 0; i < n; i++) {
        if (b->state[i] != C_PENDING) {
            continue;
        }
        pending++;
        const char *route = b->cmds[i]->route;
        int slot = lk__cluster_slot(route, strlen(route));
        target[i] = b->ask[i] >= 0 ? b->ask[i] : cl->owner[slot];
        if (target[i] < 0) {
            b->retry = 1; /* no master for the slot: a failover in progress */
            cl->stale = 1;
            snprintf(b->last, sizeof b->last, "no master for slot %d", slot);
        } else if (answer_if_down(b, i, target[i])) {
            pending--;
        }
    }
    for (int asking = 0; asking <= 1; asking++) {
        run_groups(b, n, asking, target);
    }
    return pending;
}

static void answer_pending(cbatch *b, size_t n, lk_status st)
{
    for (size_t i = 0; i < n; i++) {
        if (b->state[i] == C_PENDING) {
            b->state[i] = C_DONE;
            b->done(b->ctx, i, st, NULL);
        }
    }
}

static void cluster_run(lk__transport *t, size_t n, const lk__cmd *const *cmds,
                        lk__reply_fn done, void *ctx)
{
    lk__cluster *cl = t->impl;
    cbatch b = {t, cmds, calloc(n + 1, 1), calloc(n + 1, sizeof(short)),
                calloc(n + 1, sizeof(lk__cmd *)), calloc(n + 1, sizeof(size_t)), done, ctx, 0,
                ""};
    short *target = calloc(n + 1, sizeof(short));
    int64_t deadline = lk__now_ms() + cl->login.command_timeout_ms;

    if (b.state == NULL || b.ask == NULL || b.sub == NULL || b.subidx == NULL || target == NULL) {
        lk_status st = lk__errf(t->err, LK_ENOMEM, "out of memory");
        for (size_t i = 0; i < n; i++) {
            done(ctx, i, st, NULL);
        }
        goto out;
    }
    memset(b.state, C_PENDING, n);
    for (size_t i = 0; i < n; i++) {
        b.ask[i] = -1;
    }
    cl->last = -1;
    cl->runs++;
    for (int round = 0;; round++) {
        if (!cl->have_map || cl->stale) {
            /* A new map renumbers the nodes: an ASK not yet followed goes to the owner
             * again, which answers ASK again if it still must. */
            for (size_t i = 0; i < n; i++) {
                b.ask[i] = -1;
            }
        }
        if (ensure_map(t) != LK_OK) {
            if (answer_down(&b, n) == 0) {
                break;
            }
            if (lk__now_ms() >= deadline) {
                answer_pending(&b, n, LK_EUNAVAILABLE);
                break;
            }
            nap_ms(50);
            continue;
        }
        b.retry = 0;
        if (run_round(&b, n, target) == 0) {
            break;
        }
        if (round + 1 >= MAX_ROUNDS || lk__now_ms() >= deadline) {
            /* A call whose node could not be reached gets that reason, not the rounds'. */
            if (answer_down(&b, n) > 0) {
                /* b.last is bounded (LK__ERR_LEN) and lk__errf truncates to the same size. */
                answer_pending(&b, n, lk__errf(t->err, LK_EUNAVAILABLE,
                                               "cluster still redirecting after %d rounds, "
                                               "last: %s", round + 1,
                                               b.last[0] != '\0' ? b.last : "no refusal"));
            }
            break;
        }
        if (b.retry) {
            nap_ms(20);
        }
    }
out:
    free(b.state);
    free(b.ask);
    free(b.sub);
    free(b.subidx);
    free(target);
}

/* ---- The other operations ------------------------------------------------------------------ */

static lk_status cluster_connect(lk__transport *t)
{
    return ensure_map(t);
}

static lk_status cluster_wait(lk__transport *t, int replicas, int timeout_ms, long long *acked)
{
    lk__cluster *cl = t->impl;
    *acked = 0;
    if (cl->last < 0 || cl->last >= cl->nnodes) {
        return lk__errf(t->err, LK_EUNAVAILABLE, "connection lost before WAIT");
    }
    return lk__transport_wait(&cl->nodes[cl->last]->tp, replicas, timeout_ms, acked);
}

static lk_status cluster_ping(lk__transport *t)
{
    lk__cluster *cl = t->impl;
    lk_status st = ensure_map(t);
    for (int k = 0; st == LK_OK && k < cl->nnodes; k++) {
        st = lk__transport_ping(&cl->nodes[k]->tp);
        if (st != LK_OK) {
            cl->stale = 1;
        }
    }
    return st;
}

static redisContext *cluster_open(lk__transport *t)
{
    lk__cluster *cl = t->impl;
    if (ensure_map(t) != LK_OK) {
        return NULL;
    }
    for (int k = 0; k < cl->nnodes; k++) {
        redisContext *ctx = lk__connect(&cl->nodes[k]->tp.node, t->err);
        if (ctx != NULL) {
            return ctx;
        }
    }
    cl->stale = 1;
    return NULL;
}

static void cluster_drop(lk__transport *t)
{
    lk__cluster *cl = t->impl;
    for (int k = 0; k < cl->nnodes; k++) {
        lk__transport_drop(&cl->nodes[k]->tp);
    }
}

static void cluster_free(lk__transport *t)
{
    lk__cluster *cl = t->impl;
    for (int k = 0; k < cl->nnodes; k++) {
        lk__transport_free(&cl->nodes[k]->tp);
        free(cl->nodes[k]);
    }
    /* The password is a capability: do not leave it in freed memory. */
    memset(cl->login.password, 0, sizeof cl->login.password);
    free(cl);
    t->impl = NULL;
}

int lk__cluster_masters(lk__transport *t, lk__node *out, int max)
{
    lk__cluster *cl = t->impl;
    if (ensure_map(t) != LK_OK) {
        return -1;
    }
    int n = 0;
    for (int k = 0; k < cl->nnodes && n < max; k++) {
        out[n++] = cl->nodes[k]->tp.node;
    }
    return n;
}

static const lk__transport_ops cluster_ops = {cluster_connect, cluster_run, cluster_wait,
                                              cluster_ping, cluster_open, cluster_drop,
                                              cluster_free};

lk_status lk__cluster_init(lk__transport *t, const lk__node *login, const lk__seed *seeds,
                           int nseeds, lk_breaker *breaker, char *err)
{
    lk__cluster *cl = calloc(1, sizeof *cl);

    memset(t, 0, sizeof *t);
    if (cl == NULL) {
        return LK_ENOMEM;
    }
    cl->login = *login;
    cl->nseeds = nseeds < LK__SEEDS_MAX ? nseeds : LK__SEEDS_MAX;
    memcpy(cl->seeds, seeds, (size_t)cl->nseeds * sizeof *seeds);
    cl->breaker = breaker;
    cl->last = -1;
    t->ops = &cluster_ops;
    t->impl = cl;
    t->kind = LK_TOPOLOGY_CLUSTER;
    t->node.connect_timeout_ms = login->connect_timeout_ms;
    t->node.command_timeout_ms = login->command_timeout_ms;
    t->breaker = breaker;
    t->err = err;
    return LK_OK;
}

lk_status lk__transport_init_like(lk__transport *dst, const lk__transport *src,
                                  lk_breaker *breaker, char *err)
{
    if (src->ops == &cluster_ops) {
        const lk__cluster *cl = src->impl;
        return lk__cluster_init(dst, &cl->login, cl->seeds, cl->nseeds, breaker, err);
    }
    lk__transport_init(dst, &src->node,
                       src->kind == LK_TOPOLOGY_SENTINEL ? &src->sentinels : NULL, breaker, err);
    return LK_OK;
}
