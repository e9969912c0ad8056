/*
 * The Redlock transport: why and what in redlock_transport_internal.h; the rules it applies
 * (validity, combiners, the token's write-back, delayed restart) are redlock.c's, and the
 * steps 0-5 below are the ones listed at the head of redlock_internal.h.
 *
 * A batch, in this order:
 *   0. Every node is connected when it is not (its single-node transport). After every new
 *      connection, and before every batch while the node does not count, its marker is read
 *      together with the time left of a hold-out another client left on it
 *      (LK__RL_HOLDOUT_KEY), and fed to its lk__rl_health. A node found to have lost its
 *      data gets the hold-out key (so every other client, even one that meets the node for
 *      the first time, holds it out as long) before its new marker is written.
 *   1. The calls go to every node that counts: each node's pipeline is written before any
 *      reply is read, so the nodes work at the same time; each node's socket has the
 *      per-node timeout (the command timeout / N, at least PER_NODE_MIN_MS), so a silent
 *      minority costs at most its share of the command timeout.
 *   2. Each reply is decoded by the call's kind (calls.c) into that node's lk__rl_node.
 *   3. The combiner of the call's kind merges the N outcomes.
 *   4. Grants are written back (fence_raise.lua to every node that counts, one pipeline per
 *      node) and checked with lk__rl_combine_raise(); calls to undo are released on all N
 *      nodes, those that did not answer too.
 *   5. Each call is answered with the combined outcome, written into its lk_call (cmd->out)
 *      and handed back with a NULL reply: run.c does not decode it again.
 * Fair acquisition (and its cancel) is refused with EINVAL before anything is sent: a FIFO
 * queue across independent masters is not built (README, "Redis topologies").
 *
 * Release messages: every node the release ran on publishes on fg:{R}:released, so a
 * subscriber on any node that counts hears it (open()).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calls_internal.h"
#include "redlock_internal.h"
#include "redlock_transport_internal.h"

/* The shortest per-node timeout: below it a loaded machine times out healthy nodes. */
#define PER_NODE_MIN_MS 100

typedef struct rl_node {
    lk__transport tp;           /* tp.node: the master, with the per-node timeouts */
    lk__rl_health health;
    long long checked;          /* tp.connects when the marker was last read, -1 never */
} rl_node;

typedef struct lk__redlock {
    lk__node login;             /* user, password and the client's timeouts */
    int n;
    int64_t watchdog_lease_ms;
    int64_t max_lease_ms;
    rl_node node[LK__RL_MAX_NODES];
} lk__redlock;

static const lk__transport_ops redlock_ops;

/* ---- Step 0: markers ------------------------------------------------------------------ */

/* Runs one command on node nd's connection. Returns the reply (the caller frees it), or
 * NULL when the node did not answer: its connection is then dropped. */
static redisReply *node_cmd(rl_node *nd, int argc, const char **argv)
{
    size_t lens[6];
    for (int i = 0; i < argc; i++) {
        lens[i] = strlen(argv[i]);
    }
    redisReply *r = lk__command_argv(nd->tp.ctx, argc, argv, lens);
    if (r == NULL) {
        lk__transport_drop(&nd->tp);
    }
    return r;
}

/* Reads the marker (into seen, "" when missing) and the hold-out left (*left_ms, <= 0 for
 * none). Returns 0, or -1 when the node gave no reading. */
static int read_marker(rl_node *nd, char *seen, int64_t *left_ms)
{
    const char *get[2] = {"GET", LK__RL_MARKER_KEY};
    const char *pttl[2] = {"PTTL", LK__RL_HOLDOUT_KEY};
    redisReply *r = node_cmd(nd, 2, get);
    int rc = -1;

    if (r != NULL && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_NIL)) {
        snprintf(seen, LK__RL_MARKER_LEN + 1, "%s", r->type == REDIS_REPLY_STRING ? r->str : "");
        rc = 0;
    }
    freeReplyObject(r);
    r = rc == 0 ? node_cmd(nd, 2, pttl) : NULL;
    rc = r != NULL && r->type == REDIS_REPLY_INTEGER ? 0 : -1;
    *left_ms = rc == 0 ? r->integer : 0;
    freeReplyObject(r);
    return rc;
}

/* The node lost its data (or is new): leaves the hold-out on it when there is one, then
 * writes a fresh marker unless another client was first, and reads back what won. */
static int write_marker(rl_node *nd, char *seen, int64_t now_ms)
{
    char fresh[LK__RL_MARKER_LEN + 1];
    char px[24];
    int64_t until_ms = lk__rl_held_out_until(&nd->health);

    if (until_ms > now_ms) {
        snprintf(px, sizeof px, "%" PRId64, until_ms - now_ms);
        const char *hold[5] = {"SET", LK__RL_HOLDOUT_KEY, "1", "PX", px};
        freeReplyObject(node_cmd(nd, 5, hold));
    }
    lk_random_id(fresh);
    const char *set[4] = {"SET", LK__RL_MARKER_KEY, fresh, "NX"};
    if (nd->tp.ctx == NULL) {
        return -1;
    }
    freeReplyObject(node_cmd(nd, 4, set));
    int64_t left_ms = 0;
    return nd->tp.ctx != NULL ? read_marker(nd, seen, &left_ms) : -1;
}

/* Step 0 for one node. */
static void check_node(lk__redlock *rl, rl_node *nd)
{
    char seen[LK__RL_MARKER_LEN + 1] = "";
    int64_t left_ms = 0;

    if (lk__transport_connect(&nd->tp) != LK_OK) {
        return; /* unreachable: not a reading; it does not answer this batch either */
    }
    if (nd->checked == nd->tp.connects && lk__rl_health_counts(&nd->health)) {
        return;
    }
    if (read_marker(nd, seen, &left_ms) != 0) {
        return;
    }
    int64_t now_ms = lk__now_ms();
    if (left_ms > 0) {
        lk__rl_health_hold(&nd->health, now_ms + left_ms);
    }
    if (lk__rl_health_seen(&nd->health, seen[0] ? seen : NULL, now_ms, rl->max_lease_ms)) {
        if (write_marker(nd, seen, now_ms) != 0 || seen[0] == '\0') {
            return;
        }
        lk__rl_health_seen(&nd->health, seen, now_ms, rl->max_lease_ms);
    }
    nd->checked = nd->tp.connects;
}

/* Step 0 for every node. Returns how many count. */
static int check_nodes(lk__redlock *rl)
{
    int counting = 0;
    for (int k = 0; k < rl->n; k++) {
        check_node(rl, &rl->node[k]);
        counting += lk__rl_health_counts(&rl->node[k].health) && rl->node[k].tp.ctx != NULL;
    }
    return counting;
}

static int counts(const rl_node *nd)
{
    return lk__rl_health_counts(&nd->health) && nd->tp.ctx != NULL;
}

/* ---- Steps 1 and 2: one fan-out -------------------------------------------------------- */

/* One fan-out of m built calls to a set of nodes: each node's outcome of each call. */
typedef struct fanout {
    lk__redlock *rl;
    const lk__cmd *const *cmds;
    lk__rl_node *out;           /* out[i * n + k]: call i on node k */
    int64_t *counter;           /* fence_raise.lua: out[..] is not used, this is */
} fanout;

typedef struct fan_ctx {
    fanout *f;
    int k;
} fan_ctx;

/* Step 2 for one reply of node k. */
static void fan_done(void *ctx, size_t i, lk_status st, redisReply *reply)
{
    fan_ctx *fc = ctx;
    fanout *f = fc->f;
    size_t at = i * (size_t)f->rl->n + (size_t)fc->k;
    const lk__cmd *cmd = f->cmds[i];

    if (f->counter != NULL) {
        f->counter[at] = st == LK_OK ? lk__int_at(reply, 0) : -1;
    } else if (st == LK_OK && cmd->out != NULL) {
        lk_call scratch = *cmd->out;
        lk__call_reset(&scratch);
        st = lk__call_kind_of(scratch.kind)->decode(&scratch, reply, scratch.err);
        f->out[at].res = scratch.res;
        f->out[at].base = scratch.base;
        f->out[at].last = scratch.last;
        f->out[at].recent = scratch.recent;
    }
    if (f->out != NULL) {
        f->out[at].st = st;
    }
    freeReplyObject(reply);
}

/* Sends the m calls to every node with send[k] set, all written before any reply is read,
 * and records the outcomes. */
static void fan_out(fanout *f, size_t m, const int *send)
{
    lk__redlock *rl = f->rl;
    lk__inflight fl[LK__RL_MAX_NODES];
    fan_ctx fc[LK__RL_MAX_NODES];

    for (int k = 0; k < rl->n; k++) {
        fc[k] = (fan_ctx){f, k};
        if (send[k]) {
            lk__transport_start(&rl->node[k].tp, &fl[k], m, f->cmds, fan_done, &fc[k]);
        }
    }
    for (int k = 0; k < rl->n; k++) {
        if (send[k]) {
            lk__transport_finish(&rl->node[k].tp, &fl[k]);
        }
    }
}

/* ---- Steps 3 to 5 ----------------------------------------------------------------------- */

static int64_t lease_of(const lk__redlock *rl, const lk_call *call)
{
    return call->lease_ms == LK_LEASE_WATCHDOG ? rl->watchdog_lease_ms : call->lease_ms;
}

/* Step 3 for call i: the combiner of its kind. */
static lk__rl_next combine(const lk__redlock *rl, const lk_call *call, const lk__rl_node *nodes,
                           int64_t elapsed_ms, lk__rl_out *out)
{
    switch ((int)call->kind) {
    case LK_CALL_ACQUIRE:
        return lk__rl_combine_acquire(rl->n, nodes, lease_of(rl, call), elapsed_ms, out);
    case LK_CALL_RENEW:
        return lk__rl_combine_renew(rl->n, nodes, lease_of(rl, call), elapsed_ms, out);
    case LK_CALL_RELEASE:
        return lk__rl_combine_release(rl->n, nodes, out);
    case LK_CALL_TOKEN_CHECK:
        return lk__rl_combine_token_check(rl->n, nodes, out);
    case LK__CALL_STATUS:
        return lk__rl_combine_status(rl->n, nodes, out);
    default: /* fair calls never get here (redlock_run) */
        memset(out, 0, sizeof *out);
        out->st = lk__errf(out->err, LK_EINVAL, "call kind %d is not available on the "
                                                "redlock topology", (int)call->kind);
        return LK__RL_ANSWER;
    }
}

/* Step 4, write-back: fence_raise.lua with each granted token on every node that counts. */
static void write_back(lk__redlock *rl, size_t n, const lk__cmd *const *cmds, lk__rl_out *outs,
                       lk__rl_next *next, int64_t start_ms, const int *send)
{
    lk__cmd *raise = calloc(n, sizeof *raise);
    const lk__cmd **sent = calloc(n, sizeof *sent);
    size_t *index = calloc(n, sizeof *index);
    int64_t *counter = calloc(n * (size_t)rl->n, sizeof *counter);
    size_t m = 0;

    if (raise == NULL || sent == NULL || index == NULL || counter == NULL) {
        for (size_t i = 0; i < n; i++) {
            if (next[i] == LK__RL_WRITE_BACK) {
                outs[i].st = lk__errf(outs[i].err, LK_ENOMEM, "out of memory");
                next[i] = LK__RL_UNDO;
            }
        }
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (next[i] != LK__RL_WRITE_BACK) {
            continue;
        }
        lk__cmd_start(&raise[m], LK__SCRIPT_FENCE_RAISE, cmds[i]->route);
        lk__cmd_key(&raise[m], "fence");
        lk__cmd_key(&raise[m], "base");
        lk__cmd_key(&raise[m], "recent");
        lk__cmd_key(&raise[m], "lock");
        lk__cmd_num(&raise[m], outs[i].res.token);
        lk__cmd_arg(&raise[m], cmds[i]->out->owner);
        sent[m] = &raise[m];
        index[m++] = i;
    }
    for (size_t j = 0; j < m * (size_t)rl->n; j++) {
        counter[j] = -1; /* a node not asked acknowledged nothing */
    }
    if (m > 0) {
        fanout f = {rl, sent, NULL, counter};
        fan_out(&f, m, send);
    }
    int64_t elapsed_ms = lk__now_ms() - start_ms;
    for (size_t j = 0; j < m; j++) {
        size_t i = index[j];
        next[i] = lk__rl_combine_raise(rl->n, counter + j * (size_t)rl->n,
                                       lease_of(rl, cmds[i]->out), elapsed_ms, &outs[i]);
    }
out:
    free(raise);
    free(sent);
    free(index);
    free(counter);
}

/* Step 4, undo: release.lua for each call to undo, on all N nodes. */
static void undo(lk__redlock *rl, size_t n, const lk__cmd *const *cmds,
                 const lk__rl_next *next)
{
    lk__cmd *rel = calloc(n, sizeof *rel);
    const lk__cmd **sent = calloc(n, sizeof *sent);
    lk_options opts;
    char err[LK__ERR_LEN];
    int all[LK__RL_MAX_NODES];
    size_t m = 0;

    /* A release without an idempotency key reads no option. */
    memset(&opts, 0, sizeof opts);
    for (int k = 0; k < rl->n; k++) {
        all[k] = 1;
    }
    for (size_t i = 0; rel != NULL && sent != NULL && i < n; i++) {
        const lk_call *call = cmds[i]->out;
        lk_call release = {.kind = LK_CALL_RELEASE, .resource = call->resource,
                           .owner = call->owner};
        if (next[i] == LK__RL_UNDO &&
            lk__call_kind_of(LK_CALL_RELEASE)->build(&opts, &release, &rel[m], err) == LK_OK) {
            sent[m] = &rel[m];
            m++;
        }
    }
    if (m > 0) {
        /* The release's own outcome is not needed: a node that keeps the hold after all
         * lets it run out with its lease, which the grant never reported. */
        fanout f = {rl, sent, NULL, NULL};
        fan_out(&f, m, all);
    }
    free(rel);
    free(sent);
}

/* Step 5 for call i. */
static void answer(lk__transport *t, size_t i, const lk__cmd *cmd, const lk__rl_out *out,
                   lk__reply_fn done, void *ctx)
{
    if (out->st >= LK_EINVAL) {
        snprintf(t->err, LK__ERR_LEN, "%s", out->err[0] ? out->err : lk_status_name(out->st));
    } else {
        cmd->out->res = out->res;
        cmd->out->base = out->base;
        cmd->out->last = out->last;
        cmd->out->recent = out->recent;
    }
    done(ctx, i, out->st, NULL);
}

static int is_fair(const lk__cmd *cmd)
{
    return cmd->out->kind == LK_CALL_ACQUIRE_FAIR || cmd->out->kind == LK__CALL_FAIR_CANCEL;
}

/* Steps 0 to 5 for the m calls of cmds, none fair; call j is the caller's index[j]. */
static void run_calls(lk__transport *t, size_t m, const lk__cmd *const *cmds,
                      const size_t *index, lk__reply_fn done, void *ctx)
{
    lk__redlock *rl = t->impl;
    lk__rl_node *nodes = calloc(m * (size_t)rl->n, sizeof *nodes);
    lk__rl_out *outs = calloc(m, sizeof *outs);
    lk__rl_next *next = calloc(m, sizeof *next);
    int send[LK__RL_MAX_NODES];
    int undos = 0;

    if (nodes == NULL || outs == NULL || next == NULL) {
        lk_status st = lk__errf(t->err, LK_ENOMEM, "out of memory");
        for (size_t j = 0; j < m; j++) {
            done(ctx, index[j], st, NULL);
        }
        goto out;
    }
    lk__sigpipe guard;
    lk__sigpipe_block(&guard);
    check_nodes(rl);
    lk__sigpipe_restore(&guard);
    for (int k = 0; k < rl->n; k++) {
        send[k] = counts(&rl->node[k]);
        for (size_t j = 0; j < m; j++) {
            lk__rl_node *o = &nodes[j * (size_t)rl->n + (size_t)k];
            o->held_out = !send[k];
            o->st = LK_EUNAVAILABLE;
            o->res.queue_pos = -1;
        }
    }
    /* The validity counts from before the first node is asked. */
    int64_t start_ms = lk__now_ms();
    fanout f = {rl, cmds, nodes, NULL};
    fan_out(&f, m, send);
    int64_t elapsed_ms = lk__now_ms() - start_ms;
    for (size_t j = 0; j < m; j++) {
        next[j] = combine(rl, cmds[j]->out, nodes + j * (size_t)rl->n, elapsed_ms, &outs[j]);
    }
    write_back(rl, m, cmds, outs, next, start_ms, send);
    for (size_t j = 0; j < m; j++) {
        undos += next[j] == LK__RL_UNDO;
    }
    if (undos > 0) {
        undo(rl, m, cmds, next);
    }
    for (size_t j = 0; j < m; j++) {
        answer(t, index[j], cmds[j], &outs[j], done, ctx);
    }
out:
    free(nodes);
    free(outs);
    free(next);
}

/* Fair calls are answered at once (file head); the others go to run_calls(). */
static void redlock_run(lk__transport *t, size_t n, const lk__cmd *const *cmds,
                        lk__reply_fn done, void *ctx)
{
    const lk__cmd **live = calloc(n + 1, sizeof *live);
    size_t *index = calloc(n + 1, sizeof *index);
    size_t m = 0;

    for (size_t i = 0; i < n; i++) {
        if (live == NULL || index == NULL) {
            done(ctx, i, lk__errf(t->err, LK_ENOMEM, "out of memory"), NULL);
        } else if (is_fair(cmds[i])) {
            done(ctx, i, lk__errf(t->err, LK_EINVAL, "fair acquisition is not available on "
                                                     "the redlock topology"), NULL);
        } else {
            live[m] = cmds[i];
            index[m++] = i;
        }
    }
    if (m > 0) {
        run_calls(t, m, live, index, done, ctx);
    }
    free(live);
    free(index);
}

/* ---- The other operations ---------------------------------------------------------------- */

/* OK when a majority counts, else EUNAVAILABLE with the reason. */
static lk_status majority(lk__transport *t, int counting)
{
    lk__redlock *rl = t->impl;
    if (counting >= lk__rl_quorum(rl->n)) {
        return LK_OK;
    }
    return lk__errf(t->err, LK_EUNAVAILABLE,
                    "%d of %d Redis nodes count (reachable and not held out), %d needed",
                    counting, rl->n, lk__rl_quorum(rl->n));
}

static lk_status redlock_connect(lk__transport *t)
{
    return majority(t, check_nodes(t->impl));
}

static lk_status redlock_wait(lk__transport *t, int replicas, int timeout_ms, long long *acked)
{
    (void)replicas;
    (void)timeout_ms;
    *acked = 0;
    return lk__errf(t->err, LK_EUNAVAILABLE, "min_replicas is not used with redlock: each "
                                             "master is its own copy");
}

static lk_status redlock_ping(lk__transport *t)
{
    lk__redlock *rl = t->impl;
    int pong = 0;

    check_nodes(rl);
    for (int k = 0; k < rl->n; k++) {
        pong += counts(&rl->node[k]) && lk__transport_ping(&rl->node[k].tp) == LK_OK;
    }
    return majority(t, pong);
}

static redisContext *redlock_open(lk__transport *t)
{
    lk__redlock *rl = t->impl;

    check_nodes(rl);
    for (int k = 0; k < rl->n; k++) {
        if (counts(&rl->node[k])) {
            redisContext *ctx = lk__connect(&rl->node[k].tp.node, t->err);
            if (ctx != NULL) {
                return ctx;
            }
        }
    }
    lk__errf(t->err, LK_EUNAVAILABLE, "no Redis node that counts answered");
    return NULL;
}

static void redlock_drop(lk__transport *t)
{
    lk__redlock *rl = t->impl;
    for (int k = 0; k < rl->n; k++) {
        lk__transport_drop(&rl->node[k].tp);
    }
}

static void redlock_free(lk__transport *t)
{
    lk__redlock *rl = t->impl;
    for (int k = 0; k < rl->n; k++) {
        lk__transport_free(&rl->node[k].tp);
    }
    /* The password is a capability: do not leave it in freed memory. */
    memset(rl->login.password, 0, sizeof rl->login.password);
    free(rl);
    t->impl = NULL;
}

static const lk__transport_ops redlock_ops = {redlock_connect, redlock_run, redlock_wait,
                                              redlock_ping, redlock_open, redlock_drop,
                                              redlock_free};

lk_status lk__redlock_init(lk__transport *t, const lk__node *login, const lk__seed *nodes,
                           int n, int64_t watchdog_lease_ms, int64_t max_lease_ms,
                           char *err)
{
    memset(t, 0, sizeof *t);
    if (!lk__rl_valid_n(n)) {
        return lk__errf(err, LK_EINVAL, "redlock needs an odd number of nodes, 3 to %d",
                        LK__RL_MAX_NODES);
    }
    lk__redlock *rl = calloc(1, sizeof *rl);
    if (rl == NULL) {
        return LK_ENOMEM;
    }
    rl->login = *login;
    rl->n = n;
    rl->watchdog_lease_ms = watchdog_lease_ms;
    rl->max_lease_ms = max_lease_ms > 0 ? max_lease_ms : LK_LEASE_MAX_MS;
    /* Each node gets its share of the timeouts: a silent minority then costs at most the
     * command timeout, and the nodes that answer are read meanwhile. */
    int per_node_ms = login->command_timeout_ms / n;
    per_node_ms = per_node_ms < PER_NODE_MIN_MS ? PER_NODE_MIN_MS : per_node_ms;
    size_t len = 0;
    for (int k = 0; k < n; k++) {
        lk__node node = *login;
        snprintf(node.host, sizeof node.host, "%s", nodes[k].host);
        node.port = nodes[k].port;
        node.command_timeout_ms = per_node_ms;
        node.connect_timeout_ms = per_node_ms < login->connect_timeout_ms
                                      ? per_node_ms : login->connect_timeout_ms;
        /* No breaker per node: one slow node is a minority that does not answer, not a
         * reason to fail the calls of the others. */
        lk__transport_init(&rl->node[k].tp, &node, NULL, NULL, err);
        memset(node.password, 0, sizeof node.password);
        lk__rl_health_init(&rl->node[k].health);
        rl->node[k].checked = -1;
        int w = snprintf(t->master + len, sizeof t->master - len, "%s%s:%d", k > 0 ? "," : "",
                         nodes[k].host, nodes[k].port);
        len = w > 0 && (size_t)w < sizeof t->master - len ? len + (size_t)w : len;
    }
    t->ops = &redlock_ops;
    t->impl = rl;
    t->kind = LK_TOPOLOGY_REDLOCK;
    t->node.connect_timeout_ms = login->connect_timeout_ms;
    t->node.command_timeout_ms = login->command_timeout_ms;
    t->err = err;
    return LK_OK;
}

int lk__redlock_is(const lk__transport *t)
{
    return t->ops == &redlock_ops;
}

lk_status lk__redlock_init_like(lk__transport *dst, const lk__transport *src, char *err)
{
    const lk__redlock *rl = src->impl;
    lk__seed nodes[LK__RL_MAX_NODES];

    for (int k = 0; k < rl->n; k++) {
        memcpy(nodes[k].host, rl->node[k].tp.node.host, sizeof nodes[k].host);
        nodes[k].port = rl->node[k].tp.node.port;
    }
    return lk__redlock_init(dst, &rl->login, nodes, rl->n, rl->watchdog_lease_ms,
                            rl->max_lease_ms, err);
}

void lk__redlock_nodes(const lk__transport *t, lk_topology *out)
{
    const lk__redlock *rl = t->impl;
    int64_t now_ms = lk__now_ms();

    out->nnodes = rl->n;
    for (int k = 0; k < rl->n && k < LK_REDLOCK_NODES_MAX; k++) {
        const rl_node *nd = &rl->node[k];
        int64_t until_ms = lk__rl_held_out_until(&nd->health);
        snprintf(out->nodes[k].addr, sizeof out->nodes[k].addr, "%s:%d", nd->tp.node.host,
                 nd->tp.node.port);
        out->nodes[k].counts = counts(nd);
        out->nodes[k].held_out_ms = until_ms > now_ms ? until_ms - now_ms : 0;
    }
}
