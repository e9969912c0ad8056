/*
 * Redlock's topology-independent core: the validity of a grant, the combiners that
 * turn the N per-node outcomes of one call into the one outcome handed back, the fencing
 * token's write-back, and each node's delayed-restart state. Pure functions: no sockets, no
 * clock (the caller passes elapsed and now), so every rule is tested without Redis.
 *
 * How it plugs into the transport seam (transport_internal.h, "Redlock: send every call of
 * the batch to N single-node transports at once; a combiner per call kind turns the N
 * replies of one call into the one reply handed back"): the Redlock transport owns N
 * lk__transport (one per node) and one lk__rl_health per node. For a batch it
 *   0. on every (re)connect to a node, before the node's first call, reads the marker
 *      (GET LK__RL_MARKER_KEY) and feeds lk__rl_health_seen(); when it returns 1, SET NX a
 *      fresh lk_random_id(), GET it back and feed that. A restart always drops the
 *      connection, so a node that lost its data is held out before it is asked anything;
 *   1. skips the nodes lk__rl_health_counts() says do not count (their lk__rl_node has
 *      held_out 1), sends the batch to the others at once, each with its per-node timeout;
 *   2. decodes each node's reply of a call with the call kind's decode (calls.c) into an
 *      lk__rl_node (an error or timeout is its error status: "no answer");
 *   3. calls the combiner of the call's kind with the N outcomes and the elapsed time;
 *   4. does what the combiner's lk__rl_next says: LK__RL_WRITE_BACK runs fence_raise.lua
 *      (KEYS fence, base, recent, lock; ARGV token, owner) on every node that counts, waits
 *      for those that answered step 2 within the per-node timeout (-1 for a held-out or
 *      silent node; a node left behind in step 2 is sent it without waiting) and
 *      ends with lk__rl_combine_raise(); LK__RL_UNDO sends release.lua to all N nodes
 *      (the ones that did not answer too) and answers as told;
 *   5. hands the combined outcome back; decode is then not run again.
 * redlock.c states the argument for the tokens next to the code that makes them.
 * Layer: above util only. Never installed.
 */
#ifndef LOCKLIB_REDLOCK_INTERNAL_H
#define LOCKLIB_REDLOCK_INTERNAL_H

#include <stdint.h>

#include "util_internal.h"

/* antirez's Redlock spec: drift = ttl x 0.01 + 2 ms (CLOCK_DRIFT_FACTOR 0.01 plus 2 ms for
 * the granularity of Redis's expiry). */
#define LK__RL_DRIFT_PERCENT 1
#define LK__RL_DRIFT_FIXED_MS 2
#define LK__RL_MAX_NODES 15

/* 1 when n is a valid Redlock size: odd, 3..LK__RL_MAX_NODES. */
int lk__rl_valid_n(int n);
/* The majority of n nodes, n / 2 + 1. */
int lk__rl_quorum(int n);
/* ttl_ms x 1% (rounded up) + 2 ms. */
int64_t lk__rl_drift_ms(int64_t ttl_ms);
/* ttl_ms - elapsed_ms - drift_ms(ttl_ms): how long a lock taken on a majority is still sure
 * to be held, measured from the time the first node was asked. May be <= 0 (no grant). */
int64_t lk__rl_validity_ms(int64_t ttl_ms, int64_t elapsed_ms);

/* One node's decoded outcome of one call. */
typedef struct lk__rl_node {
    int held_out;       /* 1: delayed restart, the node was not asked; st and res unused */
    lk_status st;       /* the kind's decoded status (ACQUIRED, HELD, RENEWED, NOT_OWNER,
                         * RELEASED, STILL_HELD, OK for a token check), or an error: no answer,
                         * and the call may or may not have run there */
    lk_result res;      /* token, holds, ttl_ms, replayed, floor_raised as decoded */
    int64_t base, last; /* TOKEN_CHECK: the node's issued range (base, last] */
    int recent;         /* TOKEN_CHECK */
    int64_t holders;    /* status: the node's holder count */
} lk__rl_node;

/* What the transport does after a combiner, before it answers. */
typedef enum lk__rl_next {
    LK__RL_ANSWER,     /* hand the combined outcome back as it is */
    LK__RL_WRITE_BACK, /* run fence_raise.lua with out->res.token on every node that
                        * counts, then
                        * lk__rl_combine_raise() gives the answer */
    LK__RL_UNDO        /* send release.lua to all N nodes, then hand the outcome back */
} lk__rl_next;

/* The combined outcome of one call: what the call's single-node decode would have given. */
typedef struct lk__rl_out {
    lk_status st;
    lk_result res;
    int64_t base, last; /* TOKEN_CHECK */
    int recent;         /* TOKEN_CHECK */
    int64_t holders;    /* status */
    char err[LK__ERR_LEN];
} lk__rl_out;

/* Acquire (and fair acquire) over n nodes, asked with lease ttl_ms, elapsed_ms after the
 * first node was asked. Granted when a majority answered ACQUIRED and the validity is > 0:
 * out ACQUIRED with token = the largest granting token, holds = the largest, ttl_ms = the
 * validity, and the return is LK__RL_WRITE_BACK. Otherwise LK__RL_UNDO with out HELD (a
 * majority answered but too few granted; ttl_ms the shortest holder's lease), EIDEMPOTENCY
 * (a majority refused the key) or EUNAVAILABLE (too few answers, or the validity ran out). */
lk__rl_next lk__rl_combine_acquire(int n, const lk__rl_node *nodes, int64_t ttl_ms,
                                   int64_t elapsed_ms, lk__rl_out *out);

/* After LK__RL_WRITE_BACK: counter[i] is node i's fence after fence_raise.lua, or -1 when it
 * did not answer. ttl_ms and elapsed_ms (now, the write-back included) as above; *out is the
 * acquire combiner's. The grant stands when a majority reports counter >= out->res.token and
 * the validity is still > 0: returns LK__RL_ANSWER with ttl_ms the new validity. Else
 * LK__RL_UNDO with out EUNAVAILABLE and the reason. */
lk__rl_next lk__rl_combine_raise(int n, const int64_t *counter, int64_t ttl_ms,
                                 int64_t elapsed_ms, lk__rl_out *out);

/* Renew: RENEWED when a majority renewed within the validity (ttl_ms the validity, token
 * the largest reported). NOT_OWNER when too many nodes answered NOT_OWNER for a majority
 * to be possible, or when a majority renewed too late (then LK__RL_UNDO: the holder must
 * take the lock as lost and free it everywhere). Else EUNAVAILABLE. */
lk__rl_next lk__rl_combine_renew(int n, const lk__rl_node *nodes, int64_t ttl_ms,
                                 int64_t elapsed_ms, lk__rl_out *out);

/* Release (sent to all N): RELEASED when the lock is gone on a majority (RELEASED or
 * NOT_OWNER) and at least one node released it; NOT_OWNER when a majority answered
 * NOT_OWNER and none released; STILL_HELD (holds the largest) when a majority answered
 * but the lock is not gone on a majority; else EUNAVAILABLE. Always LK__RL_ANSWER. */
lk__rl_next lk__rl_combine_release(int n, const lk__rl_node *nodes, lk__rl_out *out);

/* Forced release (sent to all N): RELEASED when a majority answered (RELEASED or NOT_OWNER)
 * and at least one master released, with the largest token of the masters that released,
 * their published summed, and the largest fenced_by of every master that answered;
 * NOT_OWNER when a majority answered NOT_OWNER and none released; else EUNAVAILABLE. Always LK__RL_ANSWER. */
lk__rl_next lk__rl_combine_force_release(int n, const lk__rl_node *nodes, lk__rl_out *out);

/* Token check: with a majority answering, OK with base the smallest and last the largest of
 * the answering nodes' ranges (every token written back is <= some answering node's last),
 * recent 1 when any node knows the token; else EUNAVAILABLE. Always LK__RL_ANSWER. */
lk__rl_next lk__rl_combine_token_check(int n, const lk__rl_node *nodes, lk__rl_out *out);

/* Lock status (LK__CALL_STATUS: res token, holds, ttl_ms of the holder, last, recent = 1
 * when locked): with a majority answering, OK; locked (recent 1) only when the lock is held
 * on a majority, then token and holds the largest and ttl_ms the shortest of the holding
 * nodes; last the largest of every answering node. Else EUNAVAILABLE. Always
 * LK__RL_ANSWER. */
lk__rl_next lk__rl_combine_status(int n, const lk__rl_node *nodes, lk__rl_out *out);

/* ---- Delayed restart -------------------------------------------------------------------- */

/* The marker key on every node and the length of its value (a random hex id). */
#define LK__RL_MARKER_KEY "fg:redlock:marker"
#define LK__RL_MARKER_LEN 32
/* The key whose remaining time to live is what is left of a node's hold-out. */
#define LK__RL_HOLDOUT_KEY "fg:redlock:holdout"

typedef enum lk__rl_state {
    LK__RL_UNKNOWN,  /* not yet checked: does not count */
    LK__RL_OK,       /* counts towards a majority */
    LK__RL_HELD_OUT  /* lost its data: does not count before until_ms */
} lk__rl_state;

typedef struct lk__rl_health {
    lk__rl_state state;
    int64_t until_ms;                     /* HELD_OUT: the monotonic time it may count again */
    char marker[LK__RL_MARKER_LEN + 1];   /* the marker value this gateway knows, "" none */
    int64_t retry_ms;                     /* silent: not tried again before this monotonic
                                           * time (0: try now) */
    int silences;                         /* silences in a row (lk__rl_health_silent) */
    int64_t news_ms;                      /* when the last silence or answer was noted */
} lk__rl_health;

/* How long a silent node (one that did not answer within its timeout: a partition, a frozen
 * process) is left alone after its first silence in a row, and the most it is left alone. */
#define LK__RL_SILENT_RETRY_MS 1000
#define LK__RL_SILENT_RETRY_MAX_MS 8000

/* Sets *h to UNKNOWN. */
void lk__rl_health_init(lk__rl_health *h);

/* Feeds one reading of the node's marker: seen is the value of LK__RL_MARKER_KEY, NULL when
 * the key is missing (an unreachable node is not a reading: do not call). now_ms is the
 * monotonic clock; max_lease_ms the longest lease any gateway grants. Returns 1 when the
 * marker is missing: the caller writes a fresh random id with SET NX, reads the key back and
 * calls again with what it read (another gateway may have written first). */
int lk__rl_health_seen(lk__rl_health *h, const char *seen, int64_t now_ms,
                       int64_t max_lease_ms);

/* Holds the node out until until_ms at least: another client found the loss first and
 * left the hold-out's end on the node (redlock_transport.c, LK__RL_HOLDOUT_KEY), so a
 * client that meets the node later, even for the first time, holds it out too. */
void lk__rl_health_hold(lk__rl_health *h, int64_t until_ms);

/* 1 when the node counts towards a majority (OK). */
int lk__rl_health_counts(const lk__rl_health *h);

/* An attempt started at started_ms found the node silent at now_ms (no answer within its
 * timeout): it is not tried again for LK__RL_SILENT_RETRY_MS, doubled for each silence in
 * a row up to LK__RL_SILENT_RETRY_MAX_MS. Trying a silent node costs the batch that tries
 * it the node's whole timeout, so a node cut off for long is tried less and less often,
 * and is back within LK__RL_SILENT_RETRY_MAX_MS of answering again. With `needed` (fewer
 * than a majority count without it) the wait does not grow: nothing is granted without it,
 * so it is tried again after LK__RL_SILENT_RETRY_MS. An attempt that started before the
 * last silence or answer noted is older news (another handle's batch, sent before): it
 * adds nothing. */
void lk__rl_health_silent(lk__rl_health *h, int64_t started_ms, int64_t now_ms, int needed);

/* Whether the node may be tried at now_ms: 1 unless it is left alone for a silence. The
 * first caller after a silence's wait claims the try: the others wait hold_ms more (its
 * timeout), so the handles of a process do not all pay for the same try. */
int lk__rl_health_try(lk__rl_health *h, int64_t now_ms, int64_t hold_ms);

/* The node answered a check on a new connection at now_ms: its silences in a row are
 * over. */
void lk__rl_health_answered(lk__rl_health *h, int64_t now_ms);

/* For /readyz and /metrics: the monotonic time until which the node is held out, or 0 when
 * it is not held out. */
int64_t lk__rl_held_out_until(const lk__rl_health *h);

#endif
