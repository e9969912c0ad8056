/*
 * Redlock over N independent Redis masters: the rules that do not depend on sockets
 * (redlock_internal.h says how the Redlock transport calls them; transport_internal.h is the
 * seam). What is here:
 *
 * 1. Validity (antirez's spec). A lock taken on a majority is sure to be held for
 *    validity = ttl - elapsed - drift, elapsed counted from before the first node was asked,
 *    drift = ttl x 0.01 + 2 ms. A grant needs a majority AND validity > 0, and the answer's
 *    ttl_ms is the validity, never the lease asked for.
 *
 * 2. Fencing tokens that never go back, across nodes. Each node keeps its own counter
 *    fg:{R}:fence and mints with acquire.lua (prelude/mint.lua: lift to the floor, INCR). The
 *    grant's token is made in three steps, in this order:
 *      a. mint on every node, the counter first lifted to the ledger floor;
 *      b. T = the largest token of the granting majority (lk__rl_combine_acquire);
 *      c. write T back with fence_raise.lua (set-if-greater of the counter) to every node and
 *         answer only once a majority reports a counter >= T (lk__rl_combine_raise).
 *    This is the read-then-write-back of a quorum register (ABD), and antirez's "read from a
 *    majority, take the max + 1, set-if-greater on a majority" for ids.
 *
 *    The argument. Let G1 be a grant answered with token T1, and W1 the majority that
 *    acknowledged its write-back (each node of W1 had counter >= T1 when it answered). Let
 *    G2 be a grant that starts after G1 answered, granted by the majority M2. Two majorities
 *    of the same N nodes share a node: |W1| + |M2| > N. Take x in W1 and M2 that kept its
 *    data since it acknowledged T1 (see below why one exists). Its counter never decreases
 *    (INCR and set-if-greater only; a lift only raises it), so when G2 minted on x the counter
 *    was >= T1 and x minted t_x > T1. T2 = max over M2 >= t_x > T1. So T2 > T1, for any T1
 *    granted before, which is what the store's check of tokens needs.
 *
 *    Why the write-back is needed: without it ("naive max of the majority") T1 may live on
 *    one node only, the node that minted the largest token. The other nodes of the majority
 *    minted smaller tokens. If that node loses its data, a later majority that does not hold
 *    it (or holds it empty) mints below T1. The test test_redlock.c builds exactly this
 *    schedule and shows the naive tokens go back while the written-back ones do not.
 *
 *    Data loss: which x. Let L be the nodes of W1 that lost their data after acknowledging
 *    T1 (their counters are gone). The argument needs a node of W1 \ L in M2:
 *      (i) while the nodes of L are held out (delayed restart, 3 below), M2 holds none of
 *          them, and |M2| + |W1 \ L| >= q + (q - |L|) = N + 1 - |L| > N - |L|, the number
 *          of nodes outside L: the two share a node, however many nodes lost their data
 *          (as long as a majority is left to grant at all);
 *      (ii) once a lost node's hold-out has ended it counts again with an empty counter,
 *          and then x exists when |W1 \ L| >= q. The write-back goes to every node that
 *          counts, so with all nodes up W1 is all N, and any minority may lose its data.
 *          The transport answers once a majority acknowledged; a node slower than that
 *          majority is sent its write-back without being waited for (redlock_transport.c,
 *          step 2), and applies it on the same connection right after its own mint, long
 *          before any hold-out ends. If that connection fails first, or the node answers
 *          the write-back with an error (-OOM, or NOSCRIPT after a SCRIPT FLUSH: it is not
 *          sent again), W1 is the majority, as when the node was down (the case below);
 *      (iii) a grant of R during the hold-out writes its larger token back to every node
 *          that counts, all outside L, so (ii) holds again for it with W = N \ L >= q.
 *    Not covered: more than |W1| - q nodes of W1 losing their data with no grant of R
 *    during their hold-out (W1 was a bare majority because nodes were down, and one of it
 *    lost its data). A second line of defence covers that case too: every mint lifts the
 *    counter to the ledger floor (the largest token the gateway's durable ledger has seen),
 *    so a node that lost everything still mints above every token the ledger recorded.
 *
 * 3. Delayed restart (antirez's spec, enforced here rather than left to operators). A node
 *    that lost its data also lost the locks it held, so counting it at once could let two
 *    majorities hold the same lock. It must not count before the longest lease that could
 *    still exist has run out. The loss is detected, not guessed from timing: each node
 *    holds a marker key with a random id; a missing marker (or one whose id changed: another
 *    gateway found it missing first and wrote a new one) means the data is gone. The state
 *    machine per node, with the clock passed in:
 *      UNKNOWN  --marker present-->                          OK
 *      UNKNOWN  --marker missing--> (write one, read back)   UNKNOWN, then OK
 *      OK       --marker missing or changed-->               HELD_OUT(until = now + max lease
 *                                                            + its drift); write a new one
 *      HELD_OUT --missing or changed again-->                HELD_OUT, until moved later
 *      HELD_OUT --same marker, now >= until-->               OK
 *    The new marker is written when the loss is found, not when the hold-out ends: a second
 *    gateway that reads it then sees a changed id and holds the node out too, instead of both
 *    writing at the end and each taking the other's marker for a new loss.
 *    A node found without a marker the first time is taken as a new node: what happened
 *    before the gateway first saw it is the operator's delayed restart.
 *
 * Layer: above util only.
 */
#include <inttypes.h>
#include <string.h>

#include "redlock_internal.h"

int lk__rl_valid_n(int n)
{
    return n >= 3 && n <= LK__RL_MAX_NODES && n % 2 == 1;
}

int lk__rl_quorum(int n)
{
    return n / 2 + 1;
}

int64_t lk__rl_drift_ms(int64_t ttl_ms)
{
    /* antirez's spec: ttl x CLOCK_DRIFT_FACTOR (0.01) + 2 ms. Rounded up: the drift must
     * never be under-estimated. */
    return (ttl_ms * LK__RL_DRIFT_PERCENT + 99) / 100 + LK__RL_DRIFT_FIXED_MS;
}

int64_t lk__rl_validity_ms(int64_t ttl_ms, int64_t elapsed_ms)
{
    return ttl_ms - elapsed_ms - lk__rl_drift_ms(ttl_ms);
}

/* A node that answered: not held out, and an outcome or a refused idempotency key (the
 * script ran and said no). Any other error is "no answer": it may or may not have run. */
static int answered(const lk__rl_node *node)
{
    return !node->held_out && (node->st < LK_EINVAL || node->st == LK_EIDEMPOTENCY);
}

static void out_init(lk__rl_out *out)
{
    memset(out, 0, sizeof *out);
    out->res.queue_pos = -1;
    out->st = LK_EUNAVAILABLE;
}

/* Counts the answering nodes whose status is st. */
static int count_st(int n, const lk__rl_node *nodes, lk_status st)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        k += answered(&nodes[i]) && nodes[i].st == st;
    }
    return k;
}

static int count_answered(int n, const lk__rl_node *nodes)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        k += answered(&nodes[i]);
    }
    return k;
}

/* Counts the nodes whose outcome is known: those that answered, and those held out, which
 * were sent nothing and so took nothing. */
static int count_known(int n, const lk__rl_node *nodes)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        k += answered(&nodes[i]) || nodes[i].held_out;
    }
    return k;
}

/* Over the answering nodes with status st: the largest token and holds, whether any replayed
 * or raised the floor. */
static void merge_res(int n, const lk__rl_node *nodes, lk_status st, lk_result *res)
{
    for (int i = 0; i < n; i++) {
        if (!answered(&nodes[i]) || nodes[i].st != st) {
            continue;
        }
        const lk_result *r = &nodes[i].res;
        res->token = r->token > res->token ? r->token : res->token;
        res->holds = r->holds > res->holds ? r->holds : res->holds;
        res->replayed |= r->replayed;
        res->floor_raised |= r->floor_raised;
        res->shared |= r->shared;
    }
}

/* Over the nodes that answered HELD: the shortest remaining lease (when to try again) and
 * the smallest holder's token (0 when one did not know it). A listener compares a release
 * message's token with it (lk_sub_event_token). A master's message names its "#token" for
 * the hold: the one it minted, or the grant's T once the write-back arrived, and a master
 * of the granting majority minted at most T. So each held answer's token is at most what
 * that master publishes, and lk_sub reports a release again when a later master names a
 * larger token for it. Not guaranteed: a master left behind by the granting majority may
 * have minted above T, and the write-back lowers it to T; when every held answer came from
 * such masters (5 masters: held on 2 of them, granted to the caller on a third), a listener
 * hears of the release when the lease ends instead. */
static void holder_hint(int n, const lk__rl_node *nodes, lk_result *res)
{
    int seen = 0;
    for (int i = 0; i < n; i++) {
        if (!answered(&nodes[i]) || nodes[i].st != LK_HELD) {
            continue;
        }
        const lk_result *r = &nodes[i].res;
        if (!seen || r->ttl_ms < res->ttl_ms) {
            res->ttl_ms = r->ttl_ms;
        }
        if (!seen || r->holder_token < res->holder_token) {
            res->holder_token = r->holder_token;
        }
        seen = 1;
    }
}

/* Step b of the token construction (file head): the largest token of the granting majority.
 * Not the answer yet: the caller writes it back first (LK__RL_WRITE_BACK). */
lk__rl_next lk__rl_combine_acquire(int n, const lk__rl_node *nodes, int64_t ttl_ms,
                                   int64_t elapsed_ms, lk__rl_out *out)
{
    int q = lk__rl_quorum(n);
    int granted = count_st(n, nodes, LK_ACQUIRED);
    int refused = count_st(n, nodes, LK_EIDEMPOTENCY);
    int held = count_st(n, nodes, LK_HELD);
    int wrong_mode = count_st(n, nodes, LK_WRONG_MODE);
    int64_t validity_ms = lk__rl_validity_ms(ttl_ms, elapsed_ms);

    out_init(out);
    if (granted >= q && validity_ms > 0) {
        out->st = LK_ACQUIRED;
        merge_res(n, nodes, LK_ACQUIRED, &out->res);
        out->res.ttl_ms = validity_ms;
        return LK__RL_WRITE_BACK;
    }
    if (wrong_mode > 0) {
        /* This owner holds the lock in the other mode: the undo below would release that
         * hold (release.lua frees any hold of the owner), so nothing is undone. A node that
         * granted the asked mode anyway (a minority that lost the other hold) keeps it
         * until its lease ends, as any minority hold. */
        out->st = lk__errf(out->err, LK_WRONG_MODE,
                           "this owner holds the lock in the other mode (%d of %d nodes)",
                           wrong_mode, n);
        return LK__RL_ANSWER;
    }
    if (refused >= q && granted == 0 && count_known(n, nodes) == n) {
        /* Every node refused the key or was held out: none took a hold, and the undo (a
         * release of any hold of this owner) would free a hold the owner had before, taken
         * with that key in the other mode, say. */
        out->st = lk__errf(out->err, LK_EIDEMPOTENCY,
                           "idempotency key was used by another request");
        return LK__RL_ANSWER;
    }
    /* Not granted. Every node that may hold it for us is freed, those that did not answer
     * too: they may have run the acquisition and lost the reply. */
    if (granted >= q) {
        lk__errf(out->err, LK_EUNAVAILABLE,
                 "the majority took %" PRId64 " ms, longer than the lease's validity",
                 elapsed_ms);
    } else if (refused >= q) {
        out->st = lk__errf(out->err, LK_EIDEMPOTENCY,
                           "idempotency key was used by another request");
    } else if (granted + held >= q) {
        /* Held elsewhere, or split between contenders: try again later. */
        out->st = LK_HELD;
        holder_hint(n, nodes, &out->res);
    } else {
        lk__errf(out->err, LK_EUNAVAILABLE, "%d of %d Redis nodes answered, no majority agreed",
                 count_answered(n, nodes), n);
    }
    return LK__RL_UNDO;
}

/* Step c: the grant stands only once a majority holds a counter >= T (file head). */
lk__rl_next lk__rl_combine_raise(int n, const int64_t *counter, int64_t ttl_ms,
                                 int64_t elapsed_ms, lk__rl_out *out)
{
    int acked = 0;
    int64_t validity_ms = lk__rl_validity_ms(ttl_ms, elapsed_ms);

    for (int i = 0; i < n; i++) {
        acked += counter[i] >= 0 && counter[i] >= out->res.token;
    }
    if (acked < lk__rl_quorum(n)) {
        out->st = lk__errf(out->err, LK_EUNAVAILABLE,
                           "the token was written back to %d of %d Redis nodes", acked, n);
        return LK__RL_UNDO;
    }
    if (validity_ms <= 0) {
        out->st = lk__errf(out->err, LK_EUNAVAILABLE,
                           "the grant took %" PRId64 " ms, longer than the lease's validity",
                           elapsed_ms);
        return LK__RL_UNDO;
    }
    out->res.ttl_ms = validity_ms;
    return LK__RL_ANSWER;
}

lk__rl_next lk__rl_combine_renew(int n, const lk__rl_node *nodes, int64_t ttl_ms,
                                 int64_t elapsed_ms, lk__rl_out *out)
{
    int q = lk__rl_quorum(n);
    int renewed = count_st(n, nodes, LK_RENEWED);
    int64_t validity_ms = lk__rl_validity_ms(ttl_ms, elapsed_ms);

    out_init(out);
    if (renewed >= q && validity_ms > 0) {
        out->st = LK_RENEWED;
        merge_res(n, nodes, LK_RENEWED, &out->res);
        out->res.ttl_ms = validity_ms;
        return LK__RL_ANSWER;
    }
    if (renewed >= q) {
        /* Extended, but not within the validity: the old lease may have run out on a
         * majority meanwhile, so the seed's rule applies: the lock is lost. */
        out->st = lk__errf(out->err, LK_NOT_OWNER, "the renewal took %" PRId64 " ms",
                           elapsed_ms);
        return LK__RL_UNDO;
    }
    if (count_st(n, nodes, LK_NOT_OWNER) > n - q) {
        out->st = LK_NOT_OWNER;
        return LK__RL_ANSWER;
    }
    if (count_st(n, nodes, LK_EIDEMPOTENCY) >= q) {
        out->st = lk__errf(out->err, LK_EIDEMPOTENCY,
                           "idempotency key was used by another request");
        return LK__RL_ANSWER;
    }
    lk__errf(out->err, LK_EUNAVAILABLE, "only %d of %d Redis nodes renewed", renewed, n);
    return LK__RL_ANSWER;
}

lk__rl_next lk__rl_combine_release(int n, const lk__rl_node *nodes, lk__rl_out *out)
{
    int q = lk__rl_quorum(n);
    int released = count_st(n, nodes, LK_RELEASED);
    int not_owner = count_st(n, nodes, LK_NOT_OWNER);
    int still = count_st(n, nodes, LK_STILL_HELD);
    int published = 0;

    for (int i = 0; i < n; i++) {
        if (answered(&nodes[i]) && nodes[i].st == LK_RELEASED) {
            published += nodes[i].res.published; /* whatever the majority says */
        }
    }
    out_init(out);
    out->res.published = published;
    if (released + not_owner >= q && released > 0) {
        out->st = LK_RELEASED;
        merge_res(n, nodes, LK_RELEASED, &out->res);
        out->res.holds = 0;
    } else if (not_owner >= q) {
        out->st = LK_NOT_OWNER;
    } else if (released + not_owner + still >= q && still > 0) {
        out->st = LK_STILL_HELD;
        merge_res(n, nodes, LK_STILL_HELD, &out->res);
    } else if (count_st(n, nodes, LK_EIDEMPOTENCY) >= q) {
        out->st = lk__errf(out->err, LK_EIDEMPOTENCY,
                           "idempotency key was used by another request");
    } else {
        lk__errf(out->err, LK_EUNAVAILABLE, "only %d of %d Redis nodes answered",
                 count_answered(n, nodes), n);
    }
    return LK__RL_ANSWER;
}

lk__rl_next lk__rl_combine_force_release(int n, const lk__rl_node *nodes, lk__rl_out *out)
{
    int released = count_st(n, nodes, LK_RELEASED);
    int not_owner = count_st(n, nodes, LK_NOT_OWNER);

    out_init(out);
    if (released + not_owner < lk__rl_quorum(n)) {
        lk__errf(out->err, LK_EUNAVAILABLE, "only %d of %d Redis nodes answered",
                 count_answered(n, nodes), n);
        return LK__RL_ANSWER;
    }
    out->st = released > 0 ? LK_RELEASED : LK_NOT_OWNER;
    for (int i = 0; i < n; i++) {
        const lk_result *r = &nodes[i].res;
        if (!answered(&nodes[i]) ||
            (nodes[i].st != LK_RELEASED && nodes[i].st != LK_NOT_OWNER)) {
            continue;
        }
        out->res.fenced_by = r->fenced_by > out->res.fenced_by ? r->fenced_by
                                                                : out->res.fenced_by;
        if (nodes[i].st == LK_RELEASED) {
            out->res.published += r->published;
            out->res.token = r->token > out->res.token ? r->token : out->res.token;
        }
    }
    out->last = out->res.fenced_by;
    return LK__RL_ANSWER;
}

/* Starts *out for a read (token check, status): 1 when a majority answered OK, else 0 with
 * out EUNAVAILABLE and the reason. */
static int majority_ok(int n, const lk__rl_node *nodes, lk__rl_out *out)
{
    int ok = count_st(n, nodes, LK_OK);

    out_init(out);
    if (ok < lk__rl_quorum(n)) {
        lk__errf(out->err, LK_EUNAVAILABLE, "only %d of %d Redis nodes answered", ok, n);
        return 0;
    }
    return 1;
}

/* A majority of answers is needed: then at least one answering node acknowledged the
 * write-back of the latest grant's token (file head), so `last` covers every token granted. */
lk__rl_next lk__rl_combine_token_check(int n, const lk__rl_node *nodes, lk__rl_out *out)
{
    int first = 1;

    if (!majority_ok(n, nodes, out)) {
        return LK__RL_ANSWER;
    }
    for (int i = 0; i < n; i++) {
        if (!answered(&nodes[i]) || nodes[i].st != LK_OK) {
            continue;
        }
        if (first || nodes[i].base < out->base) {
            out->base = nodes[i].base;
        }
        if (first || nodes[i].last > out->last) {
            out->last = nodes[i].last;
        }
        out->recent |= nodes[i].recent;
        first = 0;
    }
    out->st = LK_OK;
    return LK__RL_ANSWER;
}

lk__rl_next lk__rl_combine_status(int n, const lk__rl_node *nodes, lk__rl_out *out)
{
    int locked = 0;

    if (!majority_ok(n, nodes, out)) {
        return LK__RL_ANSWER;
    }
    for (int i = 0; i < n; i++) {
        if (answered(&nodes[i]) && nodes[i].st == LK_OK) {
            locked += nodes[i].recent;
            out->last = nodes[i].last > out->last ? nodes[i].last : out->last;
        }
    }
    out->st = LK_OK;
    if (locked < lk__rl_quorum(n)) {
        return LK__RL_ANSWER; /* free, or held by a minority only: nobody holds it */
    }
    out->recent = 1;
    out->res.ttl_ms = -1;
    for (int i = 0; i < n; i++) {
        const lk_result *r = &nodes[i].res;
        if (!answered(&nodes[i]) || nodes[i].st != LK_OK || !nodes[i].recent) {
            continue;
        }
        out->res.token = r->token > out->res.token ? r->token : out->res.token;
        out->res.holds = r->holds > out->res.holds ? r->holds : out->res.holds;
        out->res.shared |= r->shared;
        out->holders = nodes[i].holders > out->holders ? nodes[i].holders : out->holders;
        if (out->res.ttl_ms < 0 || r->ttl_ms < out->res.ttl_ms) {
            out->res.ttl_ms = r->ttl_ms;
        }
    }
    return LK__RL_ANSWER;
}

/* ---- Delayed restart (file head, 3) ------------------------------------------------------ */

void lk__rl_health_init(lk__rl_health *h)
{
    memset(h, 0, sizeof *h);
    h->state = LK__RL_UNKNOWN;
}

/* Holds the node out from now on, for the longest lease and its drift; a hold-out already
 * running only ever gets longer. */
static void hold_out(lk__rl_health *h, int64_t now_ms, int64_t max_lease_ms)
{
    int64_t until_ms = now_ms + max_lease_ms + lk__rl_drift_ms(max_lease_ms);
    if (h->state != LK__RL_HELD_OUT || until_ms > h->until_ms) {
        h->until_ms = until_ms;
    }
    h->state = LK__RL_HELD_OUT;
}

static void remember(lk__rl_health *h, const char *seen)
{
    strncpy(h->marker, seen, LK__RL_MARKER_LEN);
    h->marker[LK__RL_MARKER_LEN] = '\0';
}

int lk__rl_health_seen(lk__rl_health *h, const char *seen, int64_t now_ms,
                       int64_t max_lease_ms)
{
    if (seen == NULL) {
        /* The marker is gone: the node lost its data (unless we never saw it). */
        if (h->state != LK__RL_UNKNOWN) {
            hold_out(h, now_ms, max_lease_ms);
        }
        h->marker[0] = '\0';
        return 1;
    }
    if (h->marker[0] == '\0') {
        /* The first value known since the start or since a loss: the one to compare with. */
        remember(h, seen);
        if (h->state == LK__RL_UNKNOWN) {
            h->state = LK__RL_OK;
        }
    } else if (strncmp(h->marker, seen, LK__RL_MARKER_LEN) != 0) {
        /* Another gateway found it missing first and wrote a new id. */
        hold_out(h, now_ms, max_lease_ms);
        remember(h, seen);
    }
    if (h->state == LK__RL_HELD_OUT && now_ms >= h->until_ms) {
        h->state = LK__RL_OK;
        h->until_ms = 0;
    }
    return 0;
}

void lk__rl_health_hold(lk__rl_health *h, int64_t until_ms)
{
    if (h->state != LK__RL_HELD_OUT || until_ms > h->until_ms) {
        h->until_ms = until_ms;
    }
    h->state = LK__RL_HELD_OUT;
}

int lk__rl_health_counts(const lk__rl_health *h)
{
    return h->state == LK__RL_OK;
}

void lk__rl_health_silent(lk__rl_health *h, int64_t started_ms, int64_t now_ms, int needed)
{
    if (started_ms < h->news_ms) {
        return; /* every try since the last news was claimed (lk__rl_health_try) */
    }
    int64_t wait_ms = LK__RL_SILENT_RETRY_MS;
    for (int i = 0; !needed && i < h->silences && wait_ms < LK__RL_SILENT_RETRY_MAX_MS; i++) {
        wait_ms *= 2;
    }
    h->retry_ms = now_ms + (wait_ms < LK__RL_SILENT_RETRY_MAX_MS ? wait_ms
                                                                  : LK__RL_SILENT_RETRY_MAX_MS);
    h->silences += !needed;
    h->news_ms = now_ms;
}

int lk__rl_health_try(lk__rl_health *h, int64_t now_ms, int64_t hold_ms)
{
    if (now_ms < h->retry_ms) {
        return 0;
    }
    if (h->retry_ms > 0) {
        h->retry_ms = now_ms + hold_ms; /* this try is the one: the others wait for it */
    }
    return 1;
}

void lk__rl_health_answered(lk__rl_health *h, int64_t now_ms)
{
    h->silences = 0;
    h->retry_ms = 0;
    h->news_ms = now_ms;
}

int64_t lk__rl_held_out_until(const lk__rl_health *h)
{
    return h->state == LK__RL_HELD_OUT ? h->until_ms : 0;
}
