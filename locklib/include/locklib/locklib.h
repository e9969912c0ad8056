/*
 * locklib: reentrant, fenced distributed locks held in Redis.
 *
 * Every state change is one Lua script run with EVALSHA, so it is atomic on the Redis side.
 * A lock is a Redis hash `fg:{resource}:lock` (field = owner, value = hold count) with a
 * PEXPIRE lease, as in Redisson's RLock. Every first acquisition takes a fencing token from
 * the per-resource counter `fg:{resource}:fence`, which is never deleted (it expires only
 * with lk_options.token_key_idle_ttl_ms).
 * A reentrant acquisition returns the token of the first one (Hazelcast FencedLock
 * semantics). Releasing to zero deletes the lock and PUBLISHes on `fg:{resource}:released`.
 *
 * Threads: one lk_client per thread. A handle is not thread-safe, exactly like the hiredis
 * context inside it. The watchdog thread of a handle uses its own connection.
 *
 * The library never prints or logs. Every call returns an lk_status; the reason for the
 * last error of a handle is kept for lk_errstr().
 */
#ifndef LOCKLIB_LOCKLIB_H
#define LOCKLIB_LOCKLIB_H

#include <stddef.h>
#include <stdint.h>

#include <fencegate/limits.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(LOCKLIB_BUILDING)
#define LK_EXTERN __attribute__((visibility("default")))
#else
#define LK_EXTERN
#endif

/* Outcomes and errors, defined once so the enum, names and messages cannot drift.
 * Outcomes (the call worked and this is the answer) come first, errors after LK_EINVAL. */
#define LK_STATUS_MAP(X)                                                                  \
    X(OK, "success")                                                                      \
    X(ACQUIRED, "lock acquired")                                                          \
    X(HELD, "lock is held by another owner")                                              \
    X(RELEASED, "lock released")                                                          \
    X(STILL_HELD, "the lock is still held by this owner")                                 \
    X(NOT_OWNER, "the lock is not held by this owner")                                    \
    X(RENEWED, "lease renewed")                                                           \
    X(WRONG_MODE, "this owner holds the lock in the other mode (shared or exclusive)")    \
    X(EINVAL, "invalid argument")                                                         \
    X(EUNAVAILABLE, "Redis is unavailable")                                               \
    X(EREDIS, "Redis or script error")                                                    \
    X(EREPLICAS, "replicas did not acknowledge the acquisition; it was rolled back")      \
    X(EIDEMPOTENCY, "idempotency key was already used by another owner or operation")     \
    X(ENOMEM, "out of memory")

typedef enum lk_status {
#define LK_X_ENUM(name, msg) LK_##name,
    LK_STATUS_MAP(LK_X_ENUM)
#undef LK_X_ENUM
    LK_STATUS_COUNT
} lk_status;

/* Static strings: "ACQUIRED", and a sentence for people. Never NULL. */
LK_EXTERN const char *lk_status_name(lk_status st);
LK_EXTERN const char *lk_status_str(lk_status st);

/* The version, "MAJOR.MINOR.PATCH", from the CMake project. */
LK_EXTERN const char *lk_version(void);

/* SIGPIPE. A write to a Redis connection the peer has closed raises SIGPIPE, which kills a
 * process that has not changed its disposition. So by default locklib blocks SIGPIPE for the
 * calling thread around its writes and swallows one they raised: four system calls per batch
 * of calls. A process that ignores SIGPIPE for good (signal(SIGPIPE, SIG_IGN), never undone)
 * may say so, best before its first handle (it takes effect from each thread's next batch),
 * and locklib skips that guard from then on. It cannot be undone: a process that later
 * restores SIG_DFL is killed by the first such write, one with a handler runs it for each,
 * and a thread that blocks SIGPIPE to sigwait() for it receives them. Process-wide;
 * thread-safe. */
LK_EXTERN void lk_sigpipe_ignored(void);

/* Limits checked before Redis sees anything. Names and tokens follow fencegate/limits.h,
 * which storage enforces too. */
#define LK_RESOURCE_MAX FG_RESOURCE_MAX /* bytes of [A-Za-z0-9._:-] */
#define LK_OWNER_MAX FG_OWNER_MAX       /* bytes of the same set, also for idempotency keys */
#define LK_LEASE_MIN_MS 100
#define LK_LEASE_MAX_MS 3600000
#define LK_TOKEN_MAX FG_TOKEN_MAX       /* 2^53 - 1: Lua numbers are doubles */
#define LK_WAIT_MAX_MS 3600000 /* lk_acquire_fair(): the longest wait a queue entry covers */

/* Lease value for lk_acquire(): take the lock with the watchdog lease and keep it renewed. */
#define LK_LEASE_WATCHDOG 0

/* 1 when s is a valid resource name (1..LK_RESOURCE_MAX bytes of [A-Za-z0-9._:-]). */
LK_EXTERN int lk_valid_resource(const char *s);
/* 1 when s is a valid owner id or idempotency key (1..LK_OWNER_MAX bytes, same set). */
LK_EXTERN int lk_valid_owner(const char *s);

typedef struct lk_client lk_client;

/* Called from the watchdog thread when it finds a watched lock gone (renewal answered
 * NOT_OWNER, or Redis could not be reached before the lease ran out), or a watched session
 * (lk_session_watch(): resource is then the session id, and owner NULL). Must not call into
 * the same lk_client: that handle belongs to another thread. */
typedef void (*lk_lost_fn)(const char *resource, const char *owner, void *userdata);

/* A stall breaker, shared by the handles of one process that talk to the same Redis (one
 * handle per thread, say). When a call on any of them takes more than half its timeout,
 * failed or not (Redis stalled or crawling: DEBUG SLEEP, CLIENT PAUSE, a frozen server, a
 * blackholed or slow network), calls through all of them fail at once with
 * LK_EUNAVAILABLE, sending nothing, for open_ms; then one call at a time goes through as a
 * probe until one is answered quickly. So a stall costs each thread about one timeout, not
 * one per queued call. Thread-safe. */
typedef struct lk_breaker lk_breaker;

/* Returns a breaker that fails fast for open_ms after a stall, or NULL (open_ms <= 0, or
 * out of memory). Free it with lk_breaker_free() after every handle using it is closed. */
LK_EXTERN lk_breaker *lk_breaker_new(int open_ms);
LK_EXTERN void lk_breaker_free(lk_breaker *b);

/* How many calls the breaker refused without sending them. 0 for NULL. */
LK_EXTERN long long lk_breaker_fast_fails(const lk_breaker *b);

typedef struct lk_options {
    int connect_timeout_ms;       /* default 2000 */
    int command_timeout_ms;       /* default 2000; a reply later than this is EUNAVAILABLE */
    int64_t watchdog_lease_ms;    /* lease of LK_LEASE_WATCHDOG locks, default 30000 */
    int64_t idempotency_ttl_ms;   /* how long a first answer is replayed, default 600000 */
    /* How long a resource's token keys (fg:{R}:fence, :base, :recent) stay after its last
     * grant or renewal, in ms; 0 (the default) keeps them forever. Every grant and renewal
     * sets their time to live to at least max(this, the lease), so they never expire under a
     * lease (one it finds short it sets a 24th longer, so the grants that follow within
     * that slack write no expiry);
     * one with an idempotency key keeps them at least until its record expires (read with
     * PEXPIRETIME: Redis 7.0 or later when both are set). Once they have expired the
     * counter starts again from the floor of the next acquisition: only set this when
     * every acquisition passes a floor above every token ever handed out for the resource
     * (a durable ledger, as the gateway keeps), or tokens repeat. Also, token_range then
     * reports 0/0, so an old token reads as never issued. */
    int64_t token_key_idle_ttl_ms;
    int min_replicas;             /* 0: off. >0: WAIT for this many replicas after acquire */
    int replica_timeout_ms;       /* WAIT timeout, default 1000; with min_replicas > 0 it
                                   * must be > 0 and < command_timeout_ms (else EINVAL) */
    lk_lost_fn on_lost;           /* optional */
    void *on_lost_userdata;
    lk_breaker *breaker;          /* optional, shared; see lk_breaker_new(). Not used by the
                                   * watchdog's own connection. */
    /* redlock:// only: the longest lease any client of the same nodes grants, in ms. A node
     * that lost its data is held out (does not count towards a majority) this long plus its
     * drift after the loss is seen. 0 (the default): LK_LEASE_MAX_MS. */
    int64_t redlock_max_lease_ms;
} lk_options;

/* Fills *opts with the defaults above. */
LK_EXTERN void lk_options_init(lk_options *opts);

/* Opens a handle for `url`: redis://[[user]:password@]host[:port][/db], unix:///path, or
 * redis-sentinel://[[user]:password@]host[:port][,host[:port]...]/MASTERNAME[/db] (the
 * sentinels, default port 26379, asked in this order for the master; the password logs in
 * to the sentinels and the data nodes alike), or
 * redis-cluster://[[user]:password@]host[:port][,host[:port]...] (seed nodes of a Redis
 * Cluster, 7.0 or later: each call goes to the master owning its resource's slot), or
 * redlock://[[user]:password@]host[:port],host[:port],host[:port][,...] (Redlock over an odd
 * number, 3..LK_REDLOCK_NODES_MAX, of independent masters, default port 6379: each call
 * goes to all of them and counts with a majority; fair acquisition is refused with EINVAL).
 * opts may be NULL for the defaults. It connects at once, but a failed connection is not
 * fatal: it returns LK_EUNAVAILABLE with a valid *out, and every later call tries again.
 * On LK_EINVAL (bad URL or options) and LK_ENOMEM, *out is NULL.
 * The caller frees the handle with lk_client_close(). */
LK_EXTERN lk_status lk_client_open(lk_client **out, const char *url, const lk_options *opts);

/* Stops the watchdog (watched locks are no longer renewed and simply expire), closes the
 * connections and frees the handle. NULL is a no-op. */
LK_EXTERN void lk_client_close(lk_client *c);

/* The reason for the last non-outcome status of this handle. Valid until the next call. */
LK_EXTERN const char *lk_errstr(const lk_client *c);

/* Writes "<128-bit random hex id of this handle>:<thread number>" into buf, which must hold
 * LK_OWNER_ID_LEN + 1 bytes. The id comes from the kernel CSPRNG. Returns buf. */
#define LK_OWNER_ID_LEN 53
LK_EXTERN char *lk_owner_id(const lk_client *c, char *buf);

/* Writes a fresh random owner id (32 hex digits, 128 bits of the kernel CSPRNG: getrandom,
 * else /dev/urandom) into buf (33 bytes). With neither it aborts the process rather than
 * return a guessable id. */
LK_EXTERN char *lk_random_id(char *buf);

typedef struct lk_result {
    int64_t token;       /* ACQUIRED, RENEWED: the fencing token of this hold */
    int64_t holds;       /* ACQUIRED, STILL_HELD: the hold count after the call;
                          * NOT_OWNER (release, renew): 1 when another owner holds the lock,
                          * 0 when nobody does */
    int64_t ttl_ms;      /* HELD: the holder's remaining lease (lk_acquire_fair: when to retry);
                          * ACQUIRED, RENEWED: the lease granted, which on a replay is the
                          * first answer's lease, not the retry's */
    int replayed;        /* 1 when an idempotency key replayed the first answer */
    int floor_raised;    /* ACQUIRED: the counter was below the floor and was raised to it */
    int queue_pos;       /* lk_acquire_fair HELD: 0-based place in the fair queue; else -1 */
    int64_t holder_token; /* HELD: the token of the hold found, 0 when unknown (a free
                           * lock whose fair queue has another waiter first). Redlock: the
                           * smallest of the masters that answered held (a master whose
                           * write-back of the grant's token failed keeps its own) */
    int published;       /* RELEASED: how many Redis nodes published the release message
                          * (only a lock others were known to wait for publishes one): 0 or
                          * 1, on Redlock up to the number of masters; 0 on a replay */
    int shared;          /* ACQUIRED: 1 for a shared hold (lk_acquire_shared()), whose token
                          * is the resource's current token, 0 when none was minted yet */
    int64_t fenced_by;   /* lk_force_release() RELEASED: the token burned above the released
                          * hold's (res.token); every later mint is above it. NOT_OWNER: the
                          * counter, the last token issued (0 if none). Else 0 */
    int handed;          /* ACQUIRED with a hand-off id: 1 when this claims the grant a
                          * release made to that id (lk_call.handoff_id), else 0 */
    int64_t handed_token; /* RELEASED with lk_call.handoff: the token minted for the waiter
                           * the lock was handed to, 0 when none. FAIR_CANCEL with a
                           * hand-off id: the token of a grant made to that waiter that it
                           * still holds (a waiter that leaves answered nobody with it: the
                           * caller gives that hold back), else 0 */
    char handed_id[17];  /* RELEASED with a hand-off: that waiter's id, else "" */
    int handed_direct;   /* RELEASED with lk_call.handoff_to: 1 when the lock went to that
                          * waiter with its own lease, so that this answer holds all its
                          * claim would (lk_call.claim_from), else 0 */
    int may_take;        /* HELD of a lk_call.join_only: 1 when nothing was queued because
                          * the owner may take the lock now (or holds it), else 0 */
    char first[LK_OWNER_MAX + 2]; /* HELD of ACQUIRE_FAIR, the lock free: the owner of
                          * the live waiter first in the fair queue, who is to take it (its
                          * process may wake it), "#" and its owner for a shared waiter; ""
                          * when the lock is held */
} lk_result;

/* Acquires `resource` for `owner`. lease_ms is LK_LEASE_MIN_MS..LK_LEASE_MAX_MS, or
 * LK_LEASE_WATCHDOG for the watchdog lease kept alive by a background thread until
 * lk_release() takes the hold count to zero, the handle is closed, or the lock is found gone.
 * The token is always > floor. idem_key (NULL for none) makes a retry replay the first
 * ACQUIRED answer without adding a hold or minting a token.
 * Returns ACQUIRED (token, holds, ttl_ms) or HELD (ttl_ms), WRONG_MODE when owner holds
 * the lock shared (lk_acquire_mode), or an error. With min_replicas,
 * too few acknowledgements give EREPLICAS once the hold is undone, or EUNAVAILABLE when the
 * undo failed too: the lock may then still be held until its lease runs out. A replay
 * waits for the replicas as well (the first call may have died before its WAIT); when too
 * few acknowledge, its record is dropped and the hold it replayed is released, unless the
 * owner holds the lock under a later token by then (that hold is left alone). */
LK_EXTERN lk_status lk_acquire(lk_client *c, const char *resource, const char *owner,
                               int64_t lease_ms, int64_t floor, const char *idem_key,
                               lk_result *res);

/* Like lk_acquire(), but while another owner holds the lock it waits up to wait_ms for the
 * release message on the resource's channel, or for the holder's lease to run out, and tries
 * again. It subscribes before each attempt, so a release between attempt and wait is never
 * missed. On Redlock it subscribes on every master that counts (through an lk_sub opened
 * for the call), so a release published by any of them wakes it. Returns HELD (with the
 * holder's remaining lease) when wait_ms passes. */
LK_EXTERN lk_status lk_acquire_wait(lk_client *c, const char *resource, const char *owner,
                                    int64_t lease_ms, int64_t floor, const char *idem_key,
                                    int64_t wait_ms, lk_result *res);

/* Shared (read) locks. A shared hold coexists with other shared holds of the resource and
 * excludes exclusive ones (every other acquisition is exclusive): an exclusive acquisition
 * is answered HELD until every shared holder has left, and a shared one is answered HELD
 * while an exclusive holder holds. Each shared holder has its own lease, renewed
 * (lk_renew()) and released (lk_release()) by its owner as an exclusive hold is; the lock
 * stays while any shared lease runs. A shared grant mints no token: it answers the
 * resource's current token (the last one minted, 0 if none), the same for every shared
 * holder of one shared period, with res->shared = 1. Writers' preference: while an
 * exclusive acquisition waits (lk_acquire_wait(), or a caller whose lk_call says it waits:
 * lk_call.wait_ms, or a fair waiter) a new shared acquisition is answered HELD, so readers
 * cannot starve a writer; a writer that vanished holds readers back until its wait would
 * have ended. Re-entry in the same mode adds a hold; in the other mode it answers
 * WRONG_MODE, changing nothing. Keys: fg:{R}:readers (the shared leases) and fg:{R}:rwait
 * (the waiting writers), in the resource's slot.
 * lk_acquire_shared() acquires in shared mode, waiting up to wait_ms as lk_acquire_wait()
 * does (0: one attempt). floor is checked but unused (nothing is minted). LK_LEASE_WATCHDOG
 * is allowed. Returns ACQUIRED, HELD, WRONG_MODE or an error. */
LK_EXTERN lk_status lk_acquire_shared(lk_client *c, const char *resource, const char *owner,
                                      int64_t lease_ms, int64_t floor, const char *idem_key,
                                      int64_t wait_ms, lk_result *res);

/* One attempt at a fair (FIFO) acquisition, like RedissonFairLock: waiters get the lock in
 * the order they first asked, across processes, through a queue in Redis
 * (fg:{resource}:queue, with deadlines in fg:{resource}:qtimeout). It never blocks: a caller
 * that gets HELD waits for a release message on lk_channel_name() or for res->ttl_ms,
 * whichever comes first, and calls again with the same owner and its remaining wait.
 * Arguments are those of lk_acquire(); wait_ms (0..LK_WAIT_MAX_MS) is how much longer this
 * waiter will keep trying: its queue entry is dropped once that has passed without a new
 * call, so a waiter that vanished never blocks the queue for longer than its own wait.
 * A waiter that gives up early should call lk_fair_cancel().
 * Returns ACQUIRED (token, holds, ttl_ms, as lk_acquire(); the owner left the queue) or
 * HELD (ttl_ms: when to retry at the latest; queue_pos: the owner's 0-based place in line),
 * WRONG_MODE when owner holds the lock shared, or an error. The holder re-enters at once,
 * whatever the queue. Non-fair lk_acquire() and
 * lk_acquire_wait() ignore the queue and may take a free lock ahead of queued fair waiters
 * (like tryLock() on a fair java.util.concurrent ReentrantLock). */
LK_EXTERN lk_status lk_acquire_fair(lk_client *c, const char *resource, const char *owner,
                                    int64_t lease_ms, int64_t floor, const char *idem_key,
                                    int64_t wait_ms, lk_result *res);

/* Takes `owner` out of the fair queue of `resource` (a waiter that gives up or whose client
 * went away), queued shared or exclusive. When it was first in line and the lock is free, a release message is
 * published so that the next waiter comes at once. Returns OK whether or not the owner was
 * queued, or an error. */
LK_EXTERN lk_status lk_fair_cancel(lk_client *c, const char *resource, const char *owner);

/* Releases one hold. Returns RELEASED (lock deleted, release message published),
 * STILL_HELD (holds; the remaining lease is kept, not extended) or NOT_OWNER (nothing
 * changed). idem_key (NULL for none) makes a retry replay the first answer. */
LK_EXTERN lk_status lk_release(lk_client *c, const char *resource, const char *owner,
                               const char *idem_key, lk_result *res);

/* Resets the lease of a lock this owner holds to lease_ms. Returns RENEWED (token, ttl_ms)
 * or NOT_OWNER. idem_key as above. */
LK_EXTERN lk_status lk_renew(lk_client *c, const char *resource, const char *owner,
                             int64_t lease_ms, const char *idem_key, lk_result *res);

/* Frees `resource` whoever holds it (an operator's forced release), and fences the holder:
 * in the same atomic step the counter is lifted to at least the hold's token and floor and
 * one token above them is burned (minted and handed to nobody), so the holder's token is
 * superseded at once, even if nobody locks again, and every later token is larger. The
 * release publishes as lk_release() does, so waiters wake in their usual order; a fair queue
 * is kept. No owner is needed or reported. floor is 0..2^53-2 (the caller's durable floor).
 * Returns RELEASED (res->token: the released hold's token; res->fenced_by: the burned token;
 * res->published) or NOT_OWNER (nothing was held; nothing changed; res->fenced_by: the last
 * token issued), or an error.
 * Redlock: RELEASED when a majority answered and at least one master held the lock, with
 * the largest token and burned token of the masters. */
LK_EXTERN lk_status lk_force_release(lk_client *c, const char *resource, int64_t floor,
                                     lk_result *res);

/* ---- Pipelined calls ------------------------------------------------------------------ */

typedef enum lk_call_kind {
    LK_CALL_ACQUIRE,       /* lk_acquire() */
    LK_CALL_ACQUIRE_FAIR,  /* lk_acquire_fair() */
    LK_CALL_RELEASE,       /* lk_release() */
    LK_CALL_RENEW,         /* lk_renew() */
    LK_CALL_TOKEN_CHECK,   /* lk_token_check() */
    LK_CALL_FAIR_CANCEL,   /* lk_fair_cancel(): resource and owner; no outcome but status */
    LK_CALL_FORCE_RELEASE  /* lk_force_release(): resource and floor */
} lk_call_kind;

/* One call of lk_call_many(): the arguments of the function its kind names (owner and
 * idem_key unused by TOKEN_CHECK), and its outcome. */
typedef struct lk_call {
    lk_call_kind kind;
    const char *resource;
    const char *owner;
    const char *idem_key;  /* NULL for none */
    int64_t lease_ms;      /* ACQUIRE, ACQUIRE_FAIR (LK_LEASE_WATCHDOG allowed), RENEW */
    int64_t floor;         /* ACQUIRE, ACQUIRE_FAIR */
    int64_t wait_ms;       /* ACQUIRE_FAIR; ACQUIRE: how much longer the caller waits when
                            * answered HELD (0: it does not), so that a waiting exclusive
                            * request holds new shared ones back (writers' preference) */
    int shared;            /* ACQUIRE, ACQUIRE_FAIR: 1 for a shared hold (lk_acquire_shared) */
    int others_waiting;    /* ACQUIRE: 1 when the caller knows of other waiters for the
                            * resource (the gateway's parked waiters). A held answer always
                            * marks the lock so that its release publishes; a grant does so
                            * only when this is 1 (lua/prelude/wanted.lua). RELEASE with
                            * handoff_to: the same for the grant to that waiter */
    int64_t token;         /* TOKEN_CHECK: the token in hand */
    int64_t supersede;     /* ACQUIRE, ACQUIRE_FAIR with idem_key: 0, or a token this owner
                            * must not be handed again (a token ledger refused it and its
                            * hold was given back): an idempotency record of idem_key and
                            * owner answering exactly this token is dropped instead of
                            * replayed, so the call acts afresh (a new token, recorded in its
                            * place when ACQUIRED). A record with another token is replayed.
                            * RELEASE: 0 for a plain release; else the release undoes an
                            * acquisition whose ACQUIRED never reached its caller or did not
                            * stand (rolled back, given back): idem_key, when set, is then
                            * that acquisition's key, and its record for this owner answering
                            * this token or a smaller one (-1: any token) is deleted with the
                            * hold, so a retry of the acquisition acts afresh instead of
                            * replaying a grant whose hold is gone. A hold with a larger token
                            * (the owner took the lock again since) is kept, except with -1:
                            * the release answers STILL_HELD. The release itself is not
                            * recorded. */
    /* Hand-offs (lua/prelude/handoff.lua): a release that frees the lock grants it to the
     * next waiter in the same script, one grant per release. Not on Redlock (EINVAL).
     * ACQUIRE, ACQUIRE_FAIR, FAIR_CANCEL: NULL, or this waiter's hand-off id, 1 to 16
     * lowercase hex digits, the same on every attempt of one wait. An attempt answered
     * HELD queues the waiter for a hand-off until wait_ms from now (ACQUIRE too: wait_ms
     * 1..LK_WAIT_MAX_MS, unless handoff_claim; a fair waiter keeps its place in the fair
     * queue); an attempt that
     * finds the lock handed to this id claims it (ACQUIRED, holds 1, res.handed 1; the
     * grant wrote the idempotency record of its key); the grant's hold id is the id.
     * A claim writes nothing (with min_replicas it writes, for the WAIT; with
     * others_waiting it marks the grant wanted once), so the release's fsync is usually
     * the hand-off's only one. FAIR_CANCEL takes the waiter out, and reports a
     * grant made to it that it still holds (res.handed_token), whose hold the caller, which
     * answered nobody with it, gives back with a RELEASE. */
    const char *handoff_id;
    int handoff_claim;     /* ACQUIRE with handoff_id: 1 to claim a grant made to the id
                            * without queuing the waiter when answered HELD (wait_ms keeps
                            * its meaning for writers' preference, and may be 0) */
    int join_only;         /* ACQUIRE_FAIR, exclusive, without idem_key or handoff_claim: 1
                            * to only join the fair queue. Nothing is taken (no token
                            * minted, no re-entry, no grant claimed), so floor is unused and
                            * the call may run beside acquisitions of the resource. Answered
                            * HELD, queued as an attempt's HELD is, or, when it finds the
                            * owner's turn (a free lock, the owner first in line) or a hold
                            * of the owner's (a grant to handoff_id included), HELD with
                            * res.may_take = 1 and nothing queued: the caller attempts again
                            * without join_only. */
    int handoff;           /* RELEASE: 1 to hand a freed lock to the next queued waiter,
                            * its token minted above `floor` (res.handed_token,
                            * res.handed_id); 0 for a plain release */
    const char *handoff_to; /* RELEASE with handoff: NULL, or the owner of a waiter the
                            * caller knows of (exclusive, no idempotency key; its hand-off id
                            * in handoff_id, its lease in lease_ms). When that waiter is the
                            * first queued for a hand-off (a fair queue's head, or a non-fair
                            * waiter that queued after losing a race), it is granted with
                            * lease_ms, not a grant cut to its wait; when nobody is queued,
                            * it is granted too, unless handoff_first. Its attempt with that
                            * id (with handoff_claim, it queues nothing), sent right behind
                            * the release, claims the grant, or is answered from the
                            * release's reply (claim_from), so one Redis pass hands the lock
                            * on. "g:<token>:<id>" is published only when the lock was marked
                            * wanted. Equal to owner: nothing is granted. */
    int handoff_first;     /* RELEASE with handoff_to: 1 to grant that waiter only when it
                            * is the first queued (a fair waiter, which may not pass the
                            * queue), 0 also when nobody is queued */
    const struct lk_call *claim_from; /* ACQUIRE or ACQUIRE_FAIR with handoff_id,
                            * exclusive, without idem_key or join_only: NULL, or a RELEASE
                            * with handoff_to this call's owner and handoff_id its id
                            * (and handoff_first for ACQUIRE_FAIR), earlier in the same
                            * lk_call_many() batch, whose lease_ms is this call's. This
                            * call is then held back until the batch is
                            * answered: when the release granted its waiter directly
                            * (res.handed_direct), it is answered from the release without
                            * being sent (ACQUIRED, the token handed, holds 1, ttl_ms the
                            * release's lease_ms, res.handed 1), so one script hands the lock
                            * on; when the release failed EUNAVAILABLE, with that status
                            * (nothing of this call was sent); otherwise it is sent after the
                            * batch, as any call, and the whole batch waits for that round
                            * trip. With min_replicas it is sent as any call, in order: its
                            * WAIT covers the grant. */
    lk_status status;      /* out: what the function would have returned */
    lk_result res;         /* out */
    int64_t base, last;    /* out, TOKEN_CHECK: as lk_token_check() */
    int recent;            /* out, TOKEN_CHECK */
    int64_t holders;       /* out, status and listing: how many hold the lock (shared: the
                            * shared holders whose lease runs; exclusive: 1) */
    char err[256];         /* out: the reason, when status is not an outcome, else "" */
} lk_call;

/* Runs n calls on c's one connection as a pipeline: every script call is written before the
 * first reply is read, so Redis runs them all in one pass of its event loop and, under
 * appendfsync always, one fsync covers the lot. Each call gets exactly the status and
 * result the single-call function would have given (lk_acquire() etc. are this with n = 1).
 * Calls are sent in array order, except that a call answered NOSCRIPT (the script cache was
 * flushed) is sent again after the others: a caller that needs two calls on one resource
 * in order sends them in two batches. A claim naming its release (claim_from) is held back
 * until the release is answered, then answered from it or sent in a second round. When
 * the connection fails mid-batch every call whose reply had not been read gets
 * EUNAVAILABLE: it may or may not have run, as with a single call. With min_replicas the
 * calls run one at a time (each acquisition's WAIT on its own connection). Each call's
 * reason is in its err; lk_errstr(c) afterwards is the last reason set by any of them. */
LK_EXTERN void lk_call_many(lk_client *c, lk_call *const *calls, size_t n);

/* ---- Several resources at once (many.c) ----------------------------------------------- */

#define LK_MANY_MAX 64 /* most resources of one multi-resource call */

/* One resource of a multi-resource call: its name and floor in, its own outcome out. */
typedef struct lk_many {
    const char *resource;  /* in */
    int64_t floor;         /* in, lk_acquire_many(): as lk_acquire()'s */
    int others_waiting;    /* in, lk_acquire_many(): as lk_call.others_waiting */
    int64_t wait_ms;       /* in, lk_acquire_many(): as lk_call.wait_ms of ACQUIRE (how much
                            * longer the caller waits for the set when answered HELD; 0: it
                            * does not); unused by a fair set, which joins no queue */
    lk_status status;      /* out: what the single-resource call answered for it (an
                            * acquisition that was undone keeps ACQUIRED here, with
                            * undone set) */
    int undone;            /* out, lk_acquire_many(): its grant was released again because
                            * another resource of the set was not granted */
    lk_result res;         /* out */
} lk_many;

/* Acquires every resource of items[0..n) for owner, or none: each resource through the
 * acquisition script of lk_acquire() (lk_acquire_fair() with wait 0 when fair: a resource
 * whose fair queue has a waiter first counts as held, and the set joins no queue), all of
 * them in one pipeline (on a Cluster, one per master, the masters at the same time; on
 * Redlock each resource counts with its own majority). When one is not granted, every
 * grant of the call is released again before this returns (an undone re-entry gives back
 * only the hold this call added), with its idempotency record, so a retry with idem_key acts
 * afresh; the tokens of undone grants are burned. Names are 1..LK_MANY_MAX distinct valid
 * resources; idem_key is shared by the set (each resource keeps its own record), so a retry
 * replays every token. Tokens are per resource, as with lk_acquire().
 * Returns ACQUIRED (every item ACQUIRED), HELD (at least one item HELD with its holder's
 * ttl_ms, none failed; the grants undone), WRONG_MODE (a member this owner holds shared,
 * none failed; the grants undone), or an error (EINVAL for bad or duplicate names:
 * nothing was sent; otherwise the grants undone; an undo that failed leaves that hold to its
 * lease, and the item's undone is then 0 with status ACQUIRED: the caller knows it may still
 * be held). */
LK_EXTERN lk_status lk_acquire_many(lk_client *c, lk_many *items, size_t n, const char *owner,
                                    int64_t lease_ms, const char *idem_key, int fair);

/* lk_acquire_many() in shared mode: every resource of the set is acquired shared, through the
 * acquisition of lk_acquire_shared() (one mode for the whole set), all or none. Each item's
 * res.token is its resource's current token (0 if none was minted) with res.shared = 1; a
 * member held exclusive by another owner, or passed by a waiting writer, is HELD, and the
 * set is undone. A member this owner holds in the other mode makes the set WRONG_MODE
 * (lk_acquire_many() likewise for a member it holds shared), undone. */
LK_EXTERN lk_status lk_acquire_many_shared(lk_client *c, lk_many *items, size_t n,
                                           const char *owner, int64_t lease_ms,
                                           const char *idem_key, int fair);

/* Undoes the grants of a set lk_acquire_many() answered ACQUIRED (every item whose status
 * is ACQUIRED), exactly as it undoes a partial grant: for a caller that cannot use the set
 * after all (a token ledger refused a token, its client is gone). Sets each item's undone. */
LK_EXTERN void lk_undo_many(lk_client *c, lk_many *items, size_t n, const char *owner,
                            const char *idem_key);

/* Releases one hold of each resource of items[0..n) (lk_release() for each, one pipeline).
 * Returns OK when each item has its outcome (RELEASED, STILL_HELD or NOT_OWNER in its
 * status), else the first item's error. EINVAL as for lk_acquire_many(). */
LK_EXTERN lk_status lk_release_many(lk_client *c, lk_many *items, size_t n, const char *owner,
                                    const char *idem_key);

/* Renews the lease of each resource of items[0..n) (lk_renew() for each, one pipeline).
 * Returns OK when each item has its outcome (RENEWED or NOT_OWNER), else the first item's
 * error. A renewal is not undone: a NOT_OWNER item leaves the others renewed. */
LK_EXTERN lk_status lk_renew_many(lk_client *c, lk_many *items, size_t n, const char *owner,
                                  int64_t lease_ms, const char *idem_key);

typedef struct lk_lock_info {
    int locked;
    int64_t token;       /* locked: the holder's token */
    int64_t holds;       /* locked: the hold count */
    int64_t ttl_ms;      /* locked: the remaining lease */
    int64_t last_token;  /* the last token ever issued for the resource, 0 if none */
    int shared;          /* locked: 1 when held in shared mode */
    int64_t holders;     /* locked: the number of holders (shared holders; 1 when
                          * exclusive) */
} lk_lock_info;

/* Reports the state of a lock. Never reports the owner. Returns OK or an error. */
LK_EXTERN lk_status lk_lock_status(lk_client *c, const char *resource, lk_lock_info *info);

/* One held lock of a listing (lk_list_locks()). Never the owner. */
typedef struct lk_lock_entry {
    char resource[LK_RESOURCE_MAX + 1];
    int64_t token;       /* the holder's token */
    int64_t holds;       /* the hold count */
    int64_t ttl_ms;      /* the remaining lease */
    int64_t queued;      /* fair waiters queued in Redis (fg:{resource}:queue) */
    int shared;          /* 1 when held in shared mode */
    int64_t holders;     /* the number of holders (shared holders; 1 when exclusive) */
} lk_lock_entry;

#define LK_LIST_MAX 1000 /* most entries one lk_list_locks() call returns */

/* Lists held locks in resource name order: those whose name starts with prefix (NULL or ""
 * for any) and sorts after `after` (NULL or "" for the first page), at most max
 * (1..LK_LIST_MAX) of them, into out[]; *n is the number written. next (LK_RESOURCE_MAX + 1
 * bytes, which may be the buffer `after` points to) receives where the next page starts
 * (its `after`), "" when this page is the last.
 * It SCANs the keyspace of every node that holds locks (every master of a Cluster, every
 * Redlock master not held out after a data loss) in steps of a bounded COUNT, never KEYS, on
 * connections of its own, so no step holds Redis for long; its cost is one pass over the
 * whole keyspace (MATCH filters server-side), then one status read per entry kept. A name
 * seen on a node is listed only when its status read says it is held (Redlock: held on a
 * majority; a hold on a minority of the masters is not listed). prefix and after follow the
 * resource name rules (prefix may be empty). Returns OK, EINVAL, or an error. */
LK_EXTERN lk_status lk_list_locks(lk_client *c, const char *prefix, const char *after,
                                  size_t max, lk_lock_entry *out, size_t *n, char *next);

/* The last token issued for the resource (0 if none). Returns OK or an error.
 * To check that a token was issued for the resource at all, use lk_token_range(). */
LK_EXTERN lk_status lk_last_token(lk_client *c, const char *resource, int64_t *token);

/* The tokens issued for `resource` in its current run, in one round trip: a token t was
 * issued for it iff *base < t <= *last. *last is the fence counter (0 if none). *base is the
 * point the counter was last lifted to (0 if never): an acquisition lifts the counter to
 * the caller's floor when it is below it (a new resource, Redis data loss, or a floor taken
 * from a process-wide maximum), and the tokens below the lift were never issued for this
 * resource. A lift only happens while nobody holds the lock, so a token <= *base was either
 * never issued for the resource or belonged to a holder whose lock was gone before the
 * lift: refusing it is safe. Both are 0 on error. Returns OK or an error. */
LK_EXTERN lk_status lk_token_range(lk_client *c, const char *resource, int64_t *base,
                                   int64_t *last);

/* lk_token_range() for a token in hand, in the same round trip: *recent is 1 when `token` is
 * one of the last 16 tokens minted for the resource. A recent token at or below *base was
 * issued for this resource before a lift (the gateway's floor lifts the counter past other
 * resources' tokens at most acquisitions), so its holder was superseded, not a forger.
 * token is 0..2^53-1 (0: *recent is 0). All three are 0 on error. Returns OK or an error. */
LK_EXTERN lk_status lk_token_check(lk_client *c, const char *resource, int64_t token,
                                   int64_t *base, int64_t *last, int *recent);

/* 1 when the watchdog found this watched lock lost; it stays 1 until the owner releases or
 * re-acquires it. 0 otherwise, also for locks that are not watched. Thread-safe: any thread
 * may call it while the handle's own thread uses the handle, but not during or after
 * lk_client_close(). */
LK_EXTERN int lk_watch_lost(lk_client *c, const char *resource, const char *owner);

/* PING. Returns OK or EUNAVAILABLE. */
LK_EXTERN lk_status lk_ping(lk_client *c);

/* The kind of Redis deployment a URL names. */
typedef enum lk_topology_kind {
    LK_TOPOLOGY_SINGLE = 0,   /* redis:// or unix:// */
    LK_TOPOLOGY_SENTINEL,     /* redis-sentinel:// */
    LK_TOPOLOGY_CLUSTER,      /* redis-cluster:// */
    LK_TOPOLOGY_REDLOCK       /* redlock:// */
} lk_topology_kind;

/* Most nodes a redlock:// URL names. */
#define LK_REDLOCK_NODES_MAX 15

/* One master of a Redlock topology, as the handle last saw it. */
typedef struct lk_topology_node {
    char addr[280];          /* "host:port" */
    int counts;              /* 1: counts towards a majority (reachable, not held out) */
    int64_t held_out_ms;     /* > 0: lost its data and is held out for this many ms more */
} lk_topology_node;

/* Where a handle's calls go. No password appears in it. */
typedef struct lk_topology {
    lk_topology_kind kind;
    char master[300];        /* "host:port" (or the socket path) of the node the last
                              * connection went to; for a cluster the masters of the slot
                              * map, comma-separated; "" before the first */
    long long failovers;     /* times a new connection found another master than the one
                              * before (Sentinel), or the slot map another set of masters
                              * (Cluster) */
    int nnodes;              /* Redlock: the N masters in nodes[]; 0 for other kinds */
    lk_topology_node nodes[LK_REDLOCK_NODES_MAX];
} lk_topology;

/* Fills *out for handle c (on the handle's own thread). */
LK_EXTERN void lk_client_topology(const lk_client *c, lk_topology *out);

/* "single", "sentinel", "cluster" or "redlock". */
LK_EXTERN const char *lk_topology_name(lk_topology_kind kind);

/* Writes the release channel of `resource` ("fg:{resource}:released") into buf of len
 * bytes. Returns OK, or EINVAL for a bad name or a short buffer. */
LK_EXTERN lk_status lk_channel_name(const char *resource, char *buf, size_t len);

/* ---- Release notifications for many resources (for event loops) --------------------- */

/* One subscriber connection that reports releases of any number of resources, for a process
 * that parks its own waiters instead of blocking a thread in lk_acquire_wait(). It is driven
 * by the caller's event loop: poll lk_sub_fd() for input and call lk_sub_dispatch() when it
 * is readable. One thread uses a handle. */
typedef struct lk_sub lk_sub;

/* Events reported by lk_sub_dispatch(). */
#define LK_SUB_RELEASED 1   /* the resource's lock was released (expiry publishes nothing) */
#define LK_SUB_SUBSCRIBED 2 /* a subscription became active: releases before it were not
                             * reported, so look at the lock again */

typedef void (*lk_sub_fn)(const char *resource, int event, void *userdata);

/* Inside fn, for LK_SUB_RELEASED: the token of the hold released (the message's payload), or
 * 0 when unknown (a message of an older release script). A release of token t tells a
 * listener that saw a holder with a larger token since that the lock did not become free
 * for it. Redlock: a release is reported at the first master's message, with that master's
 * token (the grant's, unless its write-back failed: then a smaller one), and again when a
 * later master's message names a larger token; rarely more often (a master far behind, a
 * hold that carries different ids on different masters, a message of an older script):
 * a repeat never names a smaller token than the first report. */
LK_EXTERN int64_t lk_sub_event_token(const lk_sub *s);

/* Inside fn, for LK_SUB_RELEASED: when the release handed the lock to a queued waiter
 * (lk_call.handoff; the message "g:<token>:<id>"), the token minted for it, with the
 * waiter's hand-off id written to id (17 bytes, NULL to skip); else 0. The token of the
 * hold released is then unknown (lk_sub_event_token() is 0). */
LK_EXTERN int64_t lk_sub_event_grant(const lk_sub *s, char *id);

/* Opens a subscriber for url (as lk_client_open()). A failed connection is not fatal: it
 * returns LK_EUNAVAILABLE with a valid *out; call lk_sub_reconnect() later. On EINVAL and
 * ENOMEM *out is NULL. The caller frees the handle with lk_sub_close(). */
LK_EXTERN lk_status lk_sub_open(lk_sub **out, const char *url, const lk_options *opts);
/* Closes the connection and frees the handle. NULL is a no-op. */
LK_EXTERN void lk_sub_close(lk_sub *s);
/* The reason for the last error. Valid until the next call. */
LK_EXTERN const char *lk_sub_errstr(const lk_sub *s);
/* The descriptor to poll for input, or -1 while disconnected. It changes on reconnect. */
LK_EXTERN int lk_sub_fd(const lk_sub *s);
/* Connects when disconnected (subscriptions are not restored: add them again). Returns OK
 * or EUNAVAILABLE within the connect timeout. */
LK_EXTERN lk_status lk_sub_reconnect(lk_sub *s);
/* Subscribes to / unsubscribes from the release channel of resource. Returns OK once the
 * command is sent (a LK_SUB_SUBSCRIBED event follows when it takes effect), EINVAL for a bad
 * name, or EUNAVAILABLE when the connection failed (the handle is then disconnected). On
 * Redlock a confirmation of a SUBSCRIBE sent before a remove is never reported for a later
 * add of the same resource: that add's own confirmation is. */
LK_EXTERN lk_status lk_sub_add(lk_sub *s, const char *resource);
LK_EXTERN lk_status lk_sub_remove(lk_sub *s, const char *resource);
/* Reads what has arrived (one read(), so call it only when lk_sub_fd() is readable) and
 * calls fn for each event, on this thread. Returns OK, or EUNAVAILABLE when the connection
 * was closed or failed: the handle is then disconnected and nothing more is reported until
 * lk_sub_reconnect() and new subscriptions.
 * Redlock: one connection per master behind lk_sub_fd(). A master whose connection fails is
 * retried by the handle itself (backoff 100 ms doubling to 2 s, driven by a timer behind the
 * same descriptor, so it may be readable with no event), and once resubscribed each resource
 * is reported LK_SUB_SUBSCRIBED again; EUNAVAILABLE only when every master dropped. */
LK_EXTERN lk_status lk_sub_dispatch(lk_sub *s, lk_sub_fn fn, void *userdata);

/* ---- Sessions: one lease for many locks ------------------------------------------------ */

/* A session (like an etcd lease or a Consul session) is a lease that locks taken in it
 * share: renewing the session renews each of its locks, and ending it (lk_session_end(), or
 * its deadline passing and somebody running lk_session_reap()) releases each of them and
 * fences its holder as lk_force_release() does, but only the session's own hold (a lock
 * found with another token is left alone). A session id is a capability, like an owner id:
 * 32 random hex digits from the kernel CSPRNG. The session and its list of locks live under
 * the hash tag {#sessions}: on a Cluster, on the one master owning that slot, while its
 * locks live on their own masters. Sessions are refused on redlock:// (EINVAL).
 * `client` binds a session to a caller: "" (or NULL at create) for none; every call but
 * the reaper's (client NULL in lk_session_end()) must name the same client, else the
 * session reads as unknown (NOT_OWNER). */
#define LK_SESSION_ID_LEN 32
#define LK_SESSION_LOCKS_MAX 1000  /* most locks one session holds */
#define LK_SESSION_CLIENT_MAX 64   /* bytes of a binding */

/* 1 when s is a well-formed session id (32 lowercase hex digits). */
LK_EXTERN int lk_valid_session(const char *s);

/* One lock of a session. Never the owner. */
typedef struct lk_session_lock {
    char resource[LK_RESOURCE_MAX + 1];
    int64_t token;      /* the token the session recorded for its hold */
    int64_t ttl_ms;     /* lk_session_info(): the hold's remaining lease */
    lk_status status;   /* lk_session_end(): RELEASED (the hold was freed, or had lapsed
                         * with T still the last token: fenced_by burned either way),
                         * NOT_OWNER (a later token was issued already: fenced_by is it),
                         * or the error of that lock's call */
    int64_t fenced_by;  /* lk_session_end(): a token above `token`, for the caller's store */
    int published;      /* lk_session_end() RELEASED: a release message went out */
} lk_session_lock;

/* What one lk_session_renew() did. */
typedef struct lk_session_renewal {
    int64_t ttl_ms;     /* the session's lease, from now */
    size_t locks;       /* locks the session lists */
    size_t renewed;     /* of them, renewed for ttl_ms */
    size_t lost;        /* no longer held by the session (released, lapsed, or taken) */
    size_t failed;      /* not reached (their master did not answer): their leases run on
                         * as before and lapse unless a later renewal reaches them */
} lk_session_renewal;

/* Creates a session of ttl_ms (LK_LEASE_MIN_MS..LK_LEASE_MAX_MS) bound to client (NULL or
 * "" for none), and writes its id into id (LK_SESSION_ID_LEN + 1 bytes). Returns OK. */
LK_EXTERN lk_status lk_session_create(lk_client *c, int64_t ttl_ms, const char *client,
                                      char *id);

/* Moves the session's deadline to now + its lease and renews each of its locks for that
 * lease (one pipeline; on a Cluster, one per master). Returns RENEWED (with *out filled,
 * out may be NULL) or NOT_OWNER (unknown, ended, expired or another client's), or an
 * error. A partial renewal (out->failed > 0) still answers RENEWED: the session lives on,
 * and the locks not reached keep their old leases. */
LK_EXTERN lk_status lk_session_renew(lk_client *c, const char *id, const char *client,
                                     lk_session_renewal *out);

/* The session's lease and remaining time and the locks it still holds (at most max, into
 * locks[]; *n written). Returns OK or NOT_OWNER, or an error. */
LK_EXTERN lk_status lk_session_info(lk_client *c, const char *id, const char *client,
                                    int64_t *ttl_ms, int64_t *remaining_ms,
                                    lk_session_lock *locks, size_t max, size_t *n);

/* Records a lock the caller took for owner with token, with the session's lease, as one of
 * the session's (the gateway's POST /lock takes it through its own pipeline first). Returns
 * OK (*remaining_ms: the session's remaining time, may be NULL), NOT_OWNER (the session is
 * gone: the caller must end that lock with lk_session_end_lock()), EINVAL (the session has
 * LK_SESSION_LOCKS_MAX locks already), or an error. With min_replicas the record WAITs for
 * the replicas as an acquisition does: too few acknowledgements answer EREPLICAS (a failover
 * could lose the record, and the session's renewals and end would miss the lock): the caller
 * ends the lock as for any error. */
LK_EXTERN lk_status lk_session_add(lk_client *c, const char *id, const char *client,
                                   const char *resource, const char *owner, int64_t token,
                                   int64_t *remaining_ms);

/* lk_session_add() for the n locks of a set the caller took for owner (lk_acquire_many():
 * items[i].resource with items[i].res.token), 1..LK_MANY_MAX distinct names, recorded in one
 * script: all of them or none. Returns OK, NOT_OWNER (the session is gone: the caller must end
 * each lock it created with lk_session_end_lock()), EINVAL (the session would hold more than
 * LK_SESSION_LOCKS_MAX locks: none recorded; or bad arguments), EREPLICAS (min_replicas,
 * as lk_session_add()), or an error. */
LK_EXTERN lk_status lk_session_add_many(lk_client *c, const char *id, const char *client,
                                        const lk_many *items, size_t n, const char *owner,
                                        int64_t *remaining_ms);

/* lk_acquire() inside a session: the lease is the session's (read first), and an ACQUIRED
 * lock is recorded in the session. floor and idem_key as lk_acquire(). Returns ACQUIRED,
 * HELD, NOT_OWNER (the session is unknown or ended; a lock taken meanwhile was ended and
 * fenced again), or an error. */
LK_EXTERN lk_status lk_session_acquire(lk_client *c, const char *id, const char *client,
                                       const char *resource, const char *owner,
                                       int64_t floor, const char *idem_key, lk_result *res);

/* Ends one hold of `token` on resource as a session's end does (lk_session_lock.status and
 * fenced_by in *out). Returns that status. */
LK_EXTERN lk_status lk_session_end_lock(lk_client *c, const char *resource, int64_t token,
                                        int64_t floor, lk_session_lock *out);

/* Begins the session's end: from now on it is unknown to every call but this one and
 * lk_session_forget(); then ends each of its locks (lk_session_end_lock(), one pipeline)
 * with a burned token above floor. locks[] (max entries, at least LK_SESSION_LOCKS_MAX to
 * see them all) receives each lock's outcome; the caller makes each fenced_by durable in
 * its store, then calls lk_session_forget(). A caller that dies before forgetting leaves
 * the session claimed for claim_ms: then lk_session_reap() hands it to another caller,
 * which ends it again (every step repeats harmlessly). client NULL: the reaper, which ends
 * a session whatever its binding. Returns RELEASED (every lock's call was answered; see
 * each status), EUNAVAILABLE (some were not: call again), NOT_OWNER, or an error. *n is
 * the number of locks the begun end listed: an EUNAVAILABLE with *n 0 means the end itself
 * was not answered, so whether it began is unknown (a session with no locks that began
 * ending returns RELEASED). */
LK_EXTERN lk_status lk_session_end(lk_client *c, const char *id, const char *client,
                                   int64_t floor, int64_t claim_ms, lk_session_lock *locks,
                                   size_t max, size_t *n);

/* Keeps the session renewed by the handle's watchdog thread (every third of its lease, on
 * the watchdog's own connection), like an LK_LEASE_WATCHDOG lock, until lk_session_unwatch(),
 * lk_session_end() on this handle, or the handle is closed; or until a renewal finds it
 * ended, or Redis cannot be reached for a whole lease: it is then lost (on_lost is called
 * with the session id as resource and a NULL owner, and lk_session_watch_lost() says 1).
 * Reads the lease first (on this thread). Returns OK, NOT_OWNER, or an error. */
LK_EXTERN lk_status lk_session_watch(lk_client *c, const char *id, const char *client);
LK_EXTERN void lk_session_unwatch(lk_client *c, const char *id, const char *client);
/* 1 when the watchdog found this watched session lost; else 0. Thread-safe as
 * lk_watch_lost(). */
LK_EXTERN int lk_session_watch_lost(lk_client *c, const char *id, const char *client);

/* Deletes what is left of the session. Returns OK or an error. */
LK_EXTERN lk_status lk_session_forget(lk_client *c, const char *id);

/* Claims for claim_ms at most max sessions whose deadline passed (or whose ender's claim
 * ran out), writing their ids into ids; *n written. The caller ends each with
 * lk_session_end(client NULL) and forgets it. On a single Redis or Sentinel a call with
 * nothing due is two plain reads (the earliest deadline and TIME) and runs no script, so a
 * poller costs an idle Redis little; on a Cluster every call runs the claim script.
 * Returns OK or an error. */
LK_EXTERN lk_status lk_session_reap(lk_client *c, int64_t claim_ms,
                                    char (*ids)[LK_SESSION_ID_LEN + 1], size_t max, size_t *n);

#ifdef __cplusplus
}
#endif
#endif
