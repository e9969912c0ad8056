/*
 * The Redlock transport: why and what in redlock_transport_internal.h; the rules it applies
 * (validity, combiners, the token's write-back, delayed restart) are redlock.c's, and the
 * steps 0-5 below are the ones listed at the head of redlock_internal.h.
 *
 * A batch, in this order:
 *   0. Every node is connected when it is not, or when its connection died while idle;
 *      only this step opens a node's connection (tp.owner_opens), and after every new
 *      connection, and before every batch while the node does not count, its marker is read
 *      together with the time left of a hold-out another client left on it
 *      (LK__RL_HOLDOUT_KEY), and fed to its lk__rl_health. A node found to have lost its
 *      data gets the hold-out key (so every other client, even one that meets the node for
 *      the first time, holds it out as long) before its new marker is written.
 *   1. The calls go to every node that counts: each node's pipeline is written before any
 *      reply is read, so the nodes work at the same time; each node has the per-node
 *      timeout (the command timeout / N, at least PER_NODE_MIN_MS), so a silent minority
 *      costs at most its share of the command timeout.
 *   2. The replies are read as they arrive, whichever node first (fan_read()), and each is
 *      decoded by the call's kind (calls.c) into that node's lk__rl_node. Once the nodes
 *      that answered decide every call of the batch (a majority granted with the same
 *      token, renewed, released: decided()), the others get as long again as that took;
 *      a node still slower is left behind: its replies become owed, read and dropped
 *      unread before its next ones (lk__transport_abandon), and it is sent the write-back
 *      without being waited for (step 4). So a slow minority (a far zone, a slow disk, a
 *      paused process) costs a batch at most twice its majority's time instead of its own,
 *      and stays in step: everything sent to it runs there in order. A node that owes
 *      OWED_MAX replies is waited for again, so one that stays slow falls behind by a
 *      bounded amount and then meets its timeout. A node left behind by the last two
 *      batches gets no grace: it is slower than the majority for now, not by chance.
 *   3. The combiner of the call's kind merges the N outcomes.
 *   4. Grants are written back (fence_raise.lua to every node that counts, one pipeline per
 *      node; not waited for on a node left behind) and checked with lk__rl_combine_raise();
 *      calls to undo are released on all N nodes, those that did not answer too.
 *   5. Each call is answered with the combined outcome, written into its lk_call (cmd->out)
 *      and handed back with a NULL reply: run.c does not decode it again.
 * Fair acquisition (and its cancel) is refused with EINVAL before anything is sent: a FIFO
 * queue across independent masters is not built (docs/topologies.md, "Redlock").
 *
 * Release messages: every node the release ran on publishes on fg:{R}:released. open()
 * gives lk_acquire_wait() one connection to a node that counts, which hears every release
 * that ran there; lk_sub subscribes on every node that counts (lk__redlock_open_node()) and
 * reports each release once (sub.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calls_internal.h"
#include "redlock_internal.h"
#include "redlock_transport_internal.h"

/* The shortest per-node timeout: below it a loaded machine times out healthy nodes. */
#define PER_NODE_MIN_MS 100
/* A node that timed out is left alone for a while (lk__rl_health_silent: 1 s, doubling for
 * each silence in a row, at most 8 s), by every handle of the process, since its state is
 * the process's (shared_health). A silent node (a partition, a frozen process) would
 * otherwise cost a batch its per-node timeout every second on every handle (a gateway's
 * pipeline threads each have one), which also eats the validity of every grant: with one
 * master of three cut off, topo_bench's rate halved. A refused connection costs nothing and
 * is retried at once, so a restarted node rejoins at the next call. */
/* The most replies a node may owe (left unread after its majority answered, step 1) before
 * fan-outs wait for it again: a node slower than the others for good falls behind by at
 * most this much, instead of without bound. */
#define OWED_MAX 1024
/* The least time a node behind a majority that decided gets before it is left behind. */
#define LEAVE_MIN_MS 1

/* A master's delayed-restart state, one per address in the process (below). */
typedef struct shared_health {
    char addr[300];             /* "host:port", "" for a free slot */
    int refs;
    lk__rl_health health;
} shared_health;

typedef struct rl_node {
    lk__transport tp;           /* tp.node: the master, with the per-node timeouts */
    shared_health *sh;          /* NULL when the process has too many masters: then the
                                 * node never counts */
    long long checked;          /* tp.connects when the marker was last read, -1 never */
    int late_streak;            /* batches in a row it was left behind in (step 2) */
} rl_node;

typedef struct lk__redlock {
    lk__node login;             /* user, password and the client's timeouts */
    int n;
    int64_t watchdog_lease_ms;
    int64_t max_lease_ms;
    rl_node node[LK__RL_MAX_NODES];
} lk__redlock;

static const lk__transport_ops redlock_ops;

/* ---- The process's view of each master ----------------------------------------------------
 *
 * Every handle of a process (a gateway has one per thread, and the watchdog its own) shares
 * one lk__rl_health per master address. Otherwise a handle that meets a master for the first
 * time after it lost its data, with the new marker another handle of the same process just
 * wrote, would count it at once while the others hold it out. */

#define REGISTRY_SIZE 64

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static shared_health registry[REGISTRY_SIZE];

/* The state of addr, shared (one more reference), or NULL when the table is full. */
static shared_health *health_get(const char *addr)
{
    shared_health *free_slot = NULL;
    shared_health *found = NULL;

    pthread_mutex_lock(&registry_mu);
    for (int i = 0; i < REGISTRY_SIZE && found == NULL; i++) {
        if (registry[i].refs > 0 && strcmp(registry[i].addr, addr) == 0) {
            found = &registry[i];
        } else if (registry[i].refs == 0 && free_slot == NULL) {
            free_slot = &registry[i];
        }
    }
    if (found == NULL && free_slot != NULL) {
        found = free_slot;
        snprintf(found->addr, sizeof found->addr, "%s", addr);
        lk__rl_health_init(&found->health);
    }
    if (found != NULL) {
        found->refs++;
    }
    pthread_mutex_unlock(&registry_mu);
    return found;
}

static void health_put(shared_health *sh)
{
    if (sh == NULL) {
        return;
    }
    pthread_mutex_lock(&registry_mu);
    if (--sh->refs == 0) {
        sh->addr[0] = '\0';
    }
    pthread_mutex_unlock(&registry_mu);
}

/* 1 when the node counts towards a majority now: its state OK, and a connection up on
 * which its marker was read (step 0). */
static int counts(const rl_node *nd)
{
    int ok = 0;
    if (nd->sh != NULL && nd->tp.ctx != NULL && nd->checked == nd->tp.connects) {
        pthread_mutex_lock(&registry_mu);
        ok = lk__rl_health_counts(&nd->sh->health);
        pthread_mutex_unlock(&registry_mu);
    }
    return ok;
}

/* Feeds one marker reading (lk__rl_health_seen) and a hold-out left by another client
 * (left_ms > 0). Returns what lk__rl_health_seen() returns; *until_ms is then the end of
 * the node's hold-out (0 when it is not held out). */
static int health_feed(rl_node *nd, const char *seen, int64_t left_ms, int64_t max_lease_ms,
                       int64_t *until_ms)
{
    int64_t now_ms = lk__now_ms();
    pthread_mutex_lock(&registry_mu);
    if (left_ms > 0) {
        lk__rl_health_hold(&nd->sh->health, now_ms + left_ms);
    }
    int missing = lk__rl_health_seen(&nd->sh->health, seen, now_ms, max_lease_ms);
    *until_ms = lk__rl_held_out_until(&nd->sh->health);
    pthread_mutex_unlock(&registry_mu);
    return missing;
}

/* ---- Step 0: markers ------------------------------------------------------------------ */

/* Runs one command on node nd's connection. Returns the reply (the caller frees it), or
 * NULL when the node did not answer: its connection is then dropped. */
static redisReply *node_cmd(rl_node *nd, int argc, const char **argv)
{
    size_t lens[6];
    for (int i = 0; i < argc; i++) {
        lens[i] = strlen(argv[i]);
    }
    if (lk__transport_settle(&nd->tp) != LK_OK) {
        return NULL; /* dropped */
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

/* Leaves the hold-out on the node, hold_ms from now, for every other client. */
static void write_holdout(rl_node *nd, int64_t hold_ms)
{
    char px[24];
    snprintf(px, sizeof px, "%" PRId64, hold_ms);
    const char *hold[5] = {"SET", LK__RL_HOLDOUT_KEY, "1", "PX", px};
    freeReplyObject(node_cmd(nd, 5, hold));
}

/* The node lost its data (or is new): writes a fresh marker unless another client was
 * first, and reads back what won, with the hold-out left on the node (*left_ms): a client
 * that found the loss first writes its hold-out before its marker, so one that meets the
 * node for the first time and reads back that client's marker holds it out too. This
 * narrows, not closes, the window of a process that never saw the node before: if its
 * whole check runs between the other client's reading of the loss and its writes, it takes
 * the node as new (docs/topologies.md, "Redlock", its "Not guaranteed": a master first met
 * without its marker). */
static int write_marker(rl_node *nd, char *seen, int64_t *left_ms)
{
    char fresh[LK__RL_MARKER_LEN + 1];

    lk_random_id(fresh);
    const char *set[4] = {"SET", LK__RL_MARKER_KEY, fresh, "NX"};
    if (nd->tp.ctx == NULL) {
        return -1;
    }
    freeReplyObject(node_cmd(nd, 4, set));
    return nd->tp.ctx != NULL ? read_marker(nd, seen, left_ms) : -1;
}

/* Leaves node k that failed alone for a while (lk__rl_health_silent), in every handle of
 * the process, when the attempt that started at start_ms took at least half its timeout
 * (it is silent, not refusing). */
static void note_failure(lk__redlock *rl, int k, int64_t start_ms)
{
    rl_node *nd = &rl->node[k];
    int64_t now_ms = lk__now_ms();
    if (nd->sh != NULL && nd->tp.ctx == NULL &&
        (now_ms - start_ms) * 2 >= nd->tp.node.command_timeout_ms) {
        int others = 0;
        for (int j = 0; j < rl->n; j++) {
            others += j != k && counts(&rl->node[j]);
        }
        pthread_mutex_lock(&registry_mu);
        lk__rl_health_silent(&nd->sh->health, start_ms, now_ms,
                             others < lk__rl_quorum(rl->n));
        pthread_mutex_unlock(&registry_mu);
    }
}

/* 1 when nd may be tried now: it has its shared state, and is not left alone for a
 * silence (by this handle or another); the first try after a silence is this handle's. */
static int may_try(rl_node *nd, int64_t now_ms)
{
    int ok = 0;
    if (nd->sh != NULL) {
        pthread_mutex_lock(&registry_mu);
        ok = lk__rl_health_try(&nd->sh->health, now_ms, nd->tp.node.command_timeout_ms);
        pthread_mutex_unlock(&registry_mu);
    }
    return ok;
}

/* 1 when nd is left alone for a silence now (without claiming a try). */
static int left_alone(const rl_node *nd, int64_t now_ms)
{
    int alone = 0;
    if (nd->sh != NULL) {
        pthread_mutex_lock(&registry_mu);
        alone = now_ms < nd->sh->health.retry_ms;
        pthread_mutex_unlock(&registry_mu);
    }
    return alone;
}

/* Step 0 for one node. The order of the writes matters: the hold-out key goes on the node
 * before a new marker, so a client that reads the new marker also finds the hold-out. */
static void check_node(lk__redlock *rl, int k)
{
    rl_node *nd = &rl->node[k];
    char seen[LK__RL_MARKER_LEN + 1] = "";
    int64_t left_ms = 0;
    int64_t until_ms = 0;
    int64_t start_ms = lk__now_ms();

    if (left_alone(nd, start_ms)) {
        lk__transport_drop(&nd->tp); /* silent (seen by any handle): it does not count */
        return;
    }
    /* A connection that died while idle (the master restarted, maybe without its data) is
     * dropped here, so that the new one below reads the marker before this batch counts
     * the node. Nothing else opens a node's connection (tp.owner_opens): a batch that
     * reopened the dead connection in step 1 would count the node unchecked, and a master
     * restarted empty would grant at once (test_redlock_client.c,
     * test_master_wiped_under_idle_connection_held_out). */
    lk__transport_drop_dead(&nd->tp);
    if (counts(nd)) {
        return; /* connected and checked, and nobody found it silent since */
    }
    if (!may_try(nd, start_ms)) {
        lk__transport_drop(&nd->tp); /* another handle just claimed the try */
        return;
    }
    if (lk__transport_reopen(&nd->tp) != LK_OK) {
        note_failure(rl, k, start_ms);
        return; /* unreachable: not a reading; it does not answer this batch either */
    }
    if (read_marker(nd, seen, &left_ms) != 0) {
        note_failure(rl, k, start_ms);
        return;
    }
    int missing = health_feed(nd, seen[0] ? seen : NULL, left_ms, rl->max_lease_ms, &until_ms);
    int64_t hold_ms = until_ms - lk__now_ms();
    if (hold_ms > left_ms + 100) {
        write_holdout(nd, hold_ms); /* this client found the loss (or knows it longer) */
    }
    if (missing) {
        if (nd->tp.ctx == NULL || write_marker(nd, seen, &left_ms) != 0 || seen[0] == '\0') {
            return;
        }
        health_feed(nd, seen, left_ms, rl->max_lease_ms, &until_ms);
    }
    /* Every script now, while nothing is owed: a node left behind (step 2) is then sent
     * its write-back and later calls without waiting for it first. */
    if (lk__transport_load_all(&nd->tp) != LK_OK) {
        note_failure(rl, k, start_ms);
        return;
    }
    nd->checked = nd->tp.connects;
    nd->late_streak = 0; /* a new connection owes nothing: it was not left behind yet */
    pthread_mutex_lock(&registry_mu);
    lk__rl_health_answered(&nd->sh->health, lk__now_ms());
    pthread_mutex_unlock(&registry_mu);
}

/* Step 0 for every node. Returns how many count. */
static int check_nodes(lk__redlock *rl)
{
    int counting = 0;
    for (int k = 0; k < rl->n; k++) {
        check_node(rl, k);
        counting += counts(&rl->node[k]);
    }
    return counting;
}


/* ---- Steps 1 and 2: one fan-out -------------------------------------------------------- */

/* One fan-out of m built calls to a set of nodes: each node's outcome of each call. */
typedef struct fanout {
    lk__redlock *rl;
    const lk__cmd *const *cmds;
    lk__rl_node *out;           /* out[i * n + k]: call i on node k */
    int64_t *counter;           /* fence_raise.lua: out[..] is not used, this is */
    const unsigned char *skip;  /* skip[i * n + k] 1: call i is not sent to node k; or NULL */
    const int *forget;          /* forget[k] 1: node k's replies are not waited for (they
                                 * are owed); or NULL */
    int64_t start_ms;           /* when the batch began: the validity counts from it */
    int64_t sent_ms;            /* when this fan-out was written to every node: each
                                 * node's timeout counts from it (set by fan_out()) */
    int at_majority;            /* 1: stop waiting once the nodes that answered decide every
                                 * call (decided()); the others are then late */
    int late[LK__RL_MAX_NODES]; /* out: 1 for a node left behind that way */
} fanout;

static lk__rl_next combine(const lk__redlock *rl, const lk_call *call, const lk__rl_node *nodes,
                           int64_t elapsed_ms, lk__rl_out *out);

typedef struct fan_ctx {
    fanout *f;
    int k;
    const size_t *index;        /* the call (in f->cmds) of each call sent to node k */
} fan_ctx;

/* Step 2 for one reply of node k. */
static void fan_done(void *ctx, size_t j, lk_status st, redisReply *reply)
{
    fan_ctx *fc = ctx;
    fanout *f = fc->f;
    size_t i = fc->index[j];
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
        f->out[at].holders = scratch.holders;
    }
    if (f->out != NULL) {
        f->out[at].st = st;
    }
    freeReplyObject(reply);
}

/* 1 when node o minted token t itself, or a larger one: its counter is >= t already. */
static int minted(const lk__rl_node *o, int64_t t)
{
    return !o->held_out && o->st == LK_ACQUIRED && o->res.token >= t;
}

/* 1 when the nodes that answered so far decide each of the m calls, whatever the others
 * answer: a grant whose token a majority minted itself (so it needs no write-back to be
 * acknowledged by a majority), a renewal, a release. Anything else (a refusal, an error, a
 * token check or status read, which merge every answer) waits for every node. */
static int decided(const fanout *f, size_t m)
{
    size_t n = (size_t)f->rl->n;
    int64_t elapsed_ms = lk__now_ms() - f->start_ms;

    for (size_t i = 0; i < m; i++) {
        const lk__rl_node *nodes = f->out + i * n;
        const lk_call *call = f->cmds[i]->out;
        lk__rl_out out;
        lk__rl_next next = combine(f->rl, call, nodes, elapsed_ms, &out);
        int have = 0;
        if (call->kind == LK_CALL_ACQUIRE && next == LK__RL_WRITE_BACK) {
            int q = 0;
            for (size_t k = 0; k < n; k++) {
                q += minted(&nodes[k], out.res.token);
            }
            have = q >= lk__rl_quorum(f->rl->n);
        } else if (call->kind == LK_CALL_RENEW) {
            have = out.st == LK_RENEWED;
        } else if (call->kind == LK_CALL_RELEASE) {
            have = out.st == LK_RELEASED;
        }
        if (!have) {
            return 0;
        }
    }
    return 1;
}

/* Ends node k's part of the fan-out: its NOSCRIPT resends, its answers. */
static void finish_node(fanout *f, lk__inflight *fl, int k)
{
    lk__transport_finish(&f->rl->node[k].tp, fl);
    note_failure(f->rl, k, f->sent_ms);
    if (f->at_majority) {
        f->rl->node[k].late_streak = 0; /* it kept up (or failed, and starts afresh) */
    }
}

/* Step 2: reads the replies of every node with wait[k] set as they arrive, whichever node
 * first, until each has answered or failed. With f->at_majority it stops as soon as the
 * nodes that answered decide every call (decided()): the others are late, their replies
 * owed and dropped unread later (lk__transport_abandon), so a batch takes as long as its
 * majority, not its slowest node. A node is left behind only while it owes fewer than
 * OWED_MAX replies, so one that stays slow is waited for again (and then dropped at its
 * timeout). A node that has not answered within its per-node timeout is
 * dropped: no answer, and its late replies can never be read as another call's. Timed from
 * f->sent_ms. */
static void fan_read(fanout *f, size_t m, lk__inflight *fl, int *wait)
{
    int sent[LK__RL_MAX_NODES];
    for (int k = 0; k < f->rl->n; k++) {
        sent[k] = wait[k];
    }
    lk__redlock *rl = f->rl;
    int64_t leave_ms = -1; /* once decided: when the others are left behind */
    int looked = 0;        /* the last look before leaving them was taken */

    for (;;) {
        struct pollfd pfd[LK__RL_MAX_NODES];
        int at[LK__RL_MAX_NODES];
        int may_leave = f->at_majority;
        int behind = 1; /* every node waited for was left behind by the last two batches */
        nfds_t np = 0;
        for (int k = 0; k < rl->n; k++) {
            lk__transport *tp = &rl->node[k].tp;
            if (wait[k] && !lk__transport_waiting(tp, &fl[k])) {
                finish_node(f, &fl[k], k); /* answered in full, failed, or never sent */
                wait[k] = 0;
            }
            if (wait[k]) {
                may_leave = may_leave && tp->owed < OWED_MAX;
                behind = behind && rl->node[k].late_streak >= 2;
                pfd[np] = (struct pollfd){tp->ctx->fd, POLLIN, 0};
                at[np++] = k;
            }
        }
        if (np == 0) {
            return;
        }
        int64_t now_ms = lk__now_ms();
        /* Fewer than a majority done: nothing can be decided yet (decided() is skipped). */
        int done = 0;
        for (int k = 0; k < rl->n; k++) {
            done += sent[k] && !wait[k];
        }
        if (may_leave && leave_ms < 0 && done >= lk__rl_quorum(rl->n) && decided(f, m)) {
            /* The others get as long again as the majority took (at least LEAVE_MIN_MS):
             * nodes that are merely a little behind are read as before, which costs
             * nothing more; only a node really slower than the majority is left behind,
             * and then it costs its write-back (write_back()) and a batch at most twice
             * the majority's time. Nodes left behind by the last two batches are left at
             * once: they are slower than the majority for now, not by chance. */
            int64_t took_ms = now_ms - f->sent_ms;
            leave_ms = behind ? now_ms
                              : now_ms + (took_ms > LEAVE_MIN_MS ? took_ms : LEAVE_MIN_MS);
        }
        if (may_leave && leave_ms >= 0 && now_ms >= leave_ms && !looked) {
            /* One look without waiting before leaving them: replies already here are read
             * (the next pass finishes the nodes they complete) rather than left owed, so a
             * node that has in fact answered is not sent a write-back for nothing. */
            looked = 1;
            if (poll(pfd, np, 0) > 0) {
                for (nfds_t j = 0; j < np; j++) {
                    if (pfd[j].revents != 0) {
                        lk__transport_read_ready(&rl->node[at[j]].tp, &fl[at[j]]);
                    }
                }
            }
            continue;
        }
        if (may_leave && leave_ms >= 0 && now_ms >= leave_ms) {
            for (nfds_t j = 0; j < np; j++) {
                lk__transport_abandon(&rl->node[at[j]].tp, &fl[at[j]]);
                f->late[at[j]] = 1;
                rl->node[at[j]].late_streak++;
            }
            return;
        }
        /* Every node has the same per-node timeout (lk__redlock_init). */
        int64_t deadline_ms = f->sent_ms + rl->node[at[0]].tp.node.command_timeout_ms;
        int64_t until_ms = may_leave && leave_ms >= 0 && leave_ms < deadline_ms ? leave_ms
                                                                                 : deadline_ms;
        /* Past the time, poll() still looks without waiting: replies that arrived while
         * this thread was elsewhere (descheduled, paused, a NOSCRIPT resend on another
         * node) are read, not taken for silence. */
        int ready = poll(pfd, np, until_ms > now_ms ? (int)(until_ms - now_ms) : 0);
        if (ready < 0 && errno == EINTR) {
            continue;
        }
        if (ready < 0 || (ready == 0 && lk__now_ms() >= deadline_ms)) {
            /* The time is up (or poll() failed): every node still waited for did not
             * answer. The next pass answers their calls EUNAVAILABLE. */
            for (nfds_t j = 0; j < np; j++) {
                lk__transport_drop(&rl->node[at[j]].tp);
            }
            continue;
        }
        for (nfds_t j = 0; j < np; j++) {
            if (pfd[j].revents != 0) {
                lk__transport_read_ready(&rl->node[at[j]].tp, &fl[at[j]]);
            }
        }
    }
}

/* Sends the m calls to every node with send[k] set (but not the calls f->skip names), all
 * written before any reply is read, and records the outcomes (step 2, fan_read()). Returns
 * 0, or -1 when out of memory: then nothing was sent. */
static int fan_out(fanout *f, size_t m, const int *send)
{
    lk__redlock *rl = f->rl;
    size_t n = (size_t)rl->n;
    lk__inflight fl[LK__RL_MAX_NODES];
    fan_ctx fc[LK__RL_MAX_NODES];
    size_t count[LK__RL_MAX_NODES] = {0};
    int wait[LK__RL_MAX_NODES];
    const lk__cmd **sub = calloc(m * n + 1, sizeof *sub);
    size_t *index = calloc(m * n + 1, sizeof *index);

    if (sub == NULL || index == NULL) {
        free(sub);
        free(index);
        return -1;
    }
    for (size_t k = 0; k < n; k++) {
        fc[k] = (fan_ctx){f, (int)k, index + k * m};
        for (size_t i = 0; send[k] && i < m; i++) {
            if (f->skip == NULL || !f->skip[i * n + k]) {
                sub[k * m + count[k]] = f->cmds[i];
                index[k * m + count[k]++] = i;
            }
        }
        if (count[k] > 0 && !f->at_majority && left_alone(&rl->node[k], lk__now_ms())) {
            /* A write-back or an undo to a node found silent in step 2: reconnecting would
             * cost the batch its timeout, and a silent node would not get it anyway. What
             * it may hold runs out with its lease; what it minted is below a majority's. */
            count[k] = 0;
        }
        if (rl->node[k].tp.ctx == NULL) {
            /* Dropped in step 2 (a write-back or an undo): only step 0 connects it again
             * (undo() does so first). Left out, it acknowledges nothing. */
            count[k] = 0;
        }
        if (count[k] > 0) {
            lk__transport_start(&rl->node[k].tp, &fl[k], count[k], sub + k * m, fan_done, &fc[k]);
        }
        wait[k] = count[k] > 0;
        if (wait[k] && f->forget != NULL && f->forget[k]) {
            lk__transport_abandon(&rl->node[k].tp, &fl[k]);
            wait[k] = 0;
        }
    }
    /* From here: a node whose start() took long (a slow SCRIPT LOAD) does not eat the
     * others' timeout. */
    f->sent_ms = lk__now_ms();
    fan_read(f, m, fl, wait);
    free(sub);
    free(index);
    return 0;
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
    case LK_CALL_FORCE_RELEASE:
        return lk__rl_combine_force_release(rl->n, nodes, out);
    default: /* fair calls never get here (redlock_run) */
        memset(out, 0, sizeof *out);
        out->st = lk__errf(out->err, LK_EINVAL, "call kind %d is not available on the "
                                                "redlock topology", (int)call->kind);
        return LK__RL_ANSWER;
    }
}

/* Step 4, write-back: fence_raise.lua with each granted token T on every node that counts,
 * except the nodes that granted with T itself: their counter already is T (the mint's INCR
 * answered it), their lock's token is T and T heads their recent list, which is all the
 * script would do. When the counters agree, as they do while no node lost data or missed a
 * grant, nothing is waited for: the write-back costs a round trip only after a divergence.
 * A late node (left behind by its majority in step 2: late[k]) is sent the write-back too,
 * since what it minted is not known, but not waited for: the majority that minted T
 * acknowledged it already, and the late node's copy is what keeps W1 all N for redlock.c's
 * argument (ii) once it is applied, in order, after its acquisition on the same connection.
 * If its connection fails first, W1 is that majority, as for a node that was down. */
static void write_back(lk__redlock *rl, size_t n, const lk__cmd *const *cmds,
                       const lk__rl_node *nodes, lk__rl_out *outs, lk__rl_next *next,
                       int64_t start_ms, const int *send, const int *late)
{
    size_t nn = (size_t)rl->n;
    lk__cmd *raise = calloc(n, sizeof *raise);
    const lk__cmd **sent = calloc(n, sizeof *sent);
    size_t *index = calloc(n, sizeof *index);
    int64_t *counter = calloc(n * nn, sizeof *counter);
    unsigned char *skip = calloc(n * nn, 1);
    size_t m = 0;

    if (raise == NULL || sent == NULL || index == NULL || counter == NULL || skip == NULL) {
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
    for (size_t j = 0; j < m; j++) {
        for (size_t k = 0; k < nn; k++) {
            const lk__rl_node *o = &nodes[index[j] * nn + k];
            int minted_t = minted(o, outs[index[j]].res.token);
            counter[j * nn + k] = minted_t ? o->res.token : -1; /* -1: not acknowledged */
            skip[j * nn + k] = (unsigned char)minted_t;
        }
    }
    fanout f = {.rl = rl, .cmds = sent, .counter = counter, .skip = skip, .forget = late,
                .start_ms = start_ms};
    if (m > 0 && fan_out(&f, m, send) != 0) {
        memset(counter, 0xff, m * nn * sizeof *counter); /* -1: nothing acknowledged */
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
    free(skip);
}

/* Step 4, undo: release.lua for each call to undo, on all N nodes; not waited for on a
 * node left behind in step 2 (late[k]): it runs there after the acquisition, in order. A
 * node whose connection failed in step 2 is connected again first, through step 0 (its
 * marker read), like every new connection. Not sent to a node left alone for a silence
 * (fan_out()): it would not get it, and the batch would wait for its timeout; a hold it
 * took there runs out with its lease. */
static void undo(lk__redlock *rl, size_t n, const lk__cmd *const *cmds,
                 const lk__rl_next *next, const int *late)
{
    lk__cmd *rel = calloc(n, sizeof *rel);
    const lk__cmd **sent = calloc(n, sizeof *sent);
    lk_options opts;
    char err[LK__ERR_LEN];
    int all[LK__RL_MAX_NODES];
    size_t m = 0;

    /* A release that undoes reads no option: it keeps no record of its own. */
    memset(&opts, 0, sizeof opts);
    for (int k = 0; k < rl->n; k++) {
        all[k] = 1;
    }
    for (size_t i = 0; rel != NULL && sent != NULL && i < n; i++) {
        const lk_call *call = cmds[i]->out;
        /* With its idempotency record: a retry of the call must act afresh, not replay a
         * node's ACQUIRED that made no majority (release.lua, ARGV[4]; each node minted its
         * own token, so any token of this owner's record). */
        int acq = call->kind == LK_CALL_ACQUIRE;
        lk_call release = {.kind = LK_CALL_RELEASE, .resource = call->resource,
                           .owner = call->owner, .idem_key = acq ? call->idem_key : NULL,
                           .supersede = acq ? -1 : 0};
        if (next[i] == LK__RL_UNDO &&
            lk__call_kind_of(LK_CALL_RELEASE)->build(&opts, &release, &rel[m], err) == LK_OK) {
            sent[m] = &rel[m];
            m++;
        }
    }
    if (m > 0) {
        lk__sigpipe guard;
        lk__sigpipe_block(&guard);
        for (int k = 0; k < rl->n; k++) {
            if (rl->node[k].tp.ctx == NULL) {
                check_node(rl, k);
            }
        }
        lk__sigpipe_restore(&guard);
        /* The release's own outcome is not needed: a node that keeps the hold after all
         * lets it run out with its lease, which the grant never reported. */
        fanout f = {.rl = rl, .cmds = sent, .forget = late, .start_ms = lk__now_ms()};
        (void)fan_out(&f, m, all);
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
        cmd->out->holders = out->holders;
    }
    done(ctx, i, out->st, NULL);
}

static int is_fair(const lk__cmd *cmd)
{
    return cmd->out->kind == LK_CALL_ACQUIRE_FAIR || cmd->out->kind == LK_CALL_FAIR_CANCEL;
}

/* A hand-off (lk_call.handoff_id, .handoff): each master would queue and grant on its own,
 * minting its own token for whichever waiter it found first, and no majority would combine
 * those grants. Refused, as fair calls are. */
static int is_handoff(const lk__cmd *cmd)
{
    return cmd->out->handoff_id != NULL ||
           (cmd->out->kind == LK_CALL_RELEASE && cmd->out->handoff);
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
    fanout f = {.rl = rl, .cmds = cmds, .out = nodes, .start_ms = start_ms, .at_majority = 1};
    (void)fan_out(&f, m, send); /* out of memory: every node stays "no answer" */
    int64_t elapsed_ms = lk__now_ms() - start_ms;
    for (size_t j = 0; j < m; j++) {
        next[j] = combine(rl, cmds[j]->out, nodes + j * (size_t)rl->n, elapsed_ms, &outs[j]);
    }
    write_back(rl, m, cmds, nodes, outs, next, start_ms, send, f.late);
    for (size_t j = 0; j < m; j++) {
        undos += next[j] == LK__RL_UNDO;
    }
    if (undos > 0) {
        undo(rl, m, cmds, next, f.late);
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
        } else if (is_handoff(cmds[i])) {
            done(ctx, i, lk__errf(t->err, LK_EINVAL, "hand-offs are not available on the "
                                                     "redlock topology"), NULL);
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

int lk__redlock_size(const lk__transport *t)
{
    const lk__redlock *rl = t->impl;
    return rl->n;
}

redisContext *lk__redlock_open_node(lk__transport *t, int k)
{
    lk__redlock *rl = t->impl;

    check_node(rl, k);
    if (!counts(&rl->node[k])) {
        lk__errf(t->err, LK_EUNAVAILABLE, "Redis node %s:%d does not count",
                 rl->node[k].tp.node.host, rl->node[k].tp.node.port);
        return NULL;
    }
    return lk__connect(&rl->node[k].tp.node, t->err);
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
        health_put(rl->node[k].sh);
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
        rl->node[k].tp.owner_opens = 1; /* only check_node() connects (step 0) */
        memset(node.password, 0, sizeof node.password);
        char addr[300];
        snprintf(addr, sizeof addr, "%s:%d", nodes[k].host, nodes[k].port);
        rl->node[k].sh = health_get(addr);
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

/* Until when (monotonic ms) nd is held out after a data loss; 0 when it is not. */
static int64_t held_out_until(const rl_node *nd)
{
    int64_t until_ms = 0;
    if (nd->sh != NULL) {
        pthread_mutex_lock(&registry_mu);
        until_ms = lk__rl_held_out_until(&nd->sh->health);
        pthread_mutex_unlock(&registry_mu);
    }
    return until_ms;
}

int lk__redlock_masters(const lk__transport *t, lk__node *out, int max)
{
    const lk__redlock *rl = t->impl;
    int64_t now_ms = lk__now_ms();
    int n = 0;

    for (int k = 0; k < rl->n && n < max; k++) {
        const rl_node *nd = &rl->node[k];
        int64_t until_ms = held_out_until(nd);
        if (until_ms <= now_ms) {
            out[n++] = nd->tp.node;
        }
    }
    return n;
}

void lk__redlock_nodes(const lk__transport *t, lk_topology *out)
{
    const lk__redlock *rl = t->impl;
    int64_t now_ms = lk__now_ms();

    out->nnodes = rl->n;
    for (int k = 0; k < rl->n && k < LK_REDLOCK_NODES_MAX; k++) {
        const rl_node *nd = &rl->node[k];
        int64_t until_ms = held_out_until(nd);
        snprintf(out->nodes[k].addr, sizeof out->nodes[k].addr, "%s:%d", nd->tp.node.host,
                 nd->tp.node.port);
        out->nodes[k].counts = counts(nd);
        out->nodes[k].held_out_ms = until_ms > now_ms ? until_ms - now_ms : 0;
    }
}
