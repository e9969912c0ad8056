/* Declarations shared between locklib's own files. Never installed. */
#ifndef LOCKLIB_INTERNAL_H
#define LOCKLIB_INTERNAL_H

#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>

#include <hiredis/hiredis.h>

#include "locklib/locklib.h"

/* The embedded scripts (generated from lua/ at build time). */
#include "script_table.h"

typedef struct lk__watchdog lk__watchdog;

struct lk_client {
    char *url;                         /* kept to open the watchdog's own connection */
    char host[256];
    int port;
    char unix_path[108];
    char user[128];
    char password[256];
    int db;
    lk_options opts;
    redisContext *ctx;                 /* commands; NULL while disconnected */
    redisContext *sub;                 /* subscriber for lk_acquire_wait; NULL when unused */
    char sha[LK__SCRIPT_COUNT][41];    /* "" until SCRIPT LOAD on the current connection */
    char id[33];                       /* 128 random bits, hex */
    char err[256];
    /* Started by the first LK_LEASE_WATCHDOG acquire, freed by lk_client_close(). Atomic so
     * that lk_watch_lost() on another thread never sees a half-built watchdog. */
    _Atomic(lk__watchdog *) wd;
};

/* Key names: "fg:{<resource>}:<suffix>". The resource must be valid. */
#define LK__KEY_MAX (LK_RESOURCE_MAX + 16 + LK_OWNER_MAX)
void lk__key(char *buf, const char *resource, const char *suffix);
void lk__idem_key(char *buf, const char *resource, const char *idem_key);

/* Records the reason of an error in c->err and returns st. */
lk_status lk__fail(lk_client *c, lk_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Allocates a handle for url and opts (NULL for the defaults) without connecting: the parts
 * of lk_client_open() before the connection. Returns OK, EINVAL or ENOMEM (then *out is
 * NULL). The caller frees it with lk_client_close(). */
lk_status lk__client_new(lk_client **out, const char *url, const lk_options *opts);

/* Opens a redis connection to the handle's server with its timeouts, AUTH and SELECT.
 * Returns NULL with c->err set on failure. */
redisContext *lk__connect(lk_client *c);

/* Frees the command connection (the next call reconnects) and forgets the loaded scripts. */
void lk__drop_conn(lk_client *c);

/* Runs an embedded script with EVALSHA (loading it first, and again on NOSCRIPT). argv holds
 * nkeys keys followed by the arguments. On OK, *out is an array reply the caller frees with
 * freeReplyObject(). Connection failures return EUNAVAILABLE and drop the connection so the
 * next call reconnects. */
lk_status lk__eval(lk_client *c, enum lk__script script, int nkeys, int argc, const char **argv,
                   redisReply **out);

/* One script call of a pipeline: the script, its key count and its arguments (keys first),
 * which may point into key[] and num[] (storage for the builder) or anywhere that outlives
 * the lk__eval_many() call. */
#define LK__ARGV_MAX 13
typedef struct lk__item {
    enum lk__script script;
    int nkeys, argc;
    const char *argv[LK__ARGV_MAX];
    char key[7][LK__KEY_MAX];
    char num[4][24];
} lk__item;
/* Fills item i. Returns 0, or -1 when it must not be sent: it has then been answered
 * (done() is not called for it). Called again for an item sent a second time. */
typedef int (*lk__build_fn)(void *ctx, size_t i, lk__item *it);
/* Item i's outcome, exactly once per item not refused by build(): LK_OK with the script's
 * array reply (the callee frees it), or an error status with reply NULL and the reason in
 * c->err. */
typedef void (*lk__reply_fn)(void *ctx, size_t i, lk_status st, redisReply *reply);
/* Runs n script calls as one pipeline (client.c, "Pipelines"), with the breaker, the SIGPIPE
 * guard, reconnection and NOSCRIPT handling of a single call. `scripts` has a bit (1 << s)
 * for every script the items use: they are loaded before anything is sent. */
void lk__eval_many(lk_client *c, size_t n, unsigned scripts, lk__build_fn build,
                   lk__reply_fn done, void *ctx);

/* Reads integer element i of an array reply, 0 when absent or not an integer. */
long long lk__int_at(const redisReply *r, size_t i);

/* SIGPIPE guard around socket writes: blocks SIGPIPE for this thread and, on restore,
 * swallows one that the writes raised, so a write to a closed socket never kills the process
 * whatever the application's signal disposition is. */
typedef struct lk__sigpipe {
    sigset_t old;
    int was_pending;
} lk__sigpipe;
void lk__sigpipe_block(lk__sigpipe *g);
void lk__sigpipe_restore(lk__sigpipe *g);

/* 1 when an idle connection has no EOF, error or unread bytes (client.c). */
int lk__idle_alive(redisContext *ctx);

/* Validation shared by the calls. */
int lk__valid_lease(int64_t lease_ms);
int lk__valid_idem(const char *idem_key); /* NULL (no key) or a valid name */

/* Shared by the acquire calls (locks.c). */
/* Zeroes *res, with queue_pos -1 (not queued). */
void lk__result_init(lk_result *res);
/* The idempotency record key and retention ("0" and an unused key when idem_key is NULL);
 * key holds LK__KEY_MAX bytes and ttl 24. */
void lk__idem_args(const lk_client *c, const char *resource, const char *idem_key, char *key,
                   char *ttl);
/* Checks the arguments of an acquisition and turns LK_LEASE_WATCHDOG into the watchdog
 * lease. Returns OK, or EINVAL with the reason in c->err. */
lk_status lk__acquire_args(lk_client *c, const char *resource, const char *owner,
                           int64_t *lease_ms, int64_t floor, const char *idem_key);
/* Reads {1, token, holds, lease_ms, floor_raised, replayed, ...} into *res. Returns ACQUIRED,
 * or EREDIS with the reason in c->err when the token is not in 1..LK_TOKEN_MAX. */
lk_status lk__read_acquired(lk_client *c, const redisReply *reply, lk_result *res);
/* OK when token is a token the scripts can mint (1..LK_TOKEN_MAX), else EREDIS with the
 * reason (naming the `what` script) in c->err. */
lk_status lk__check_token(lk_client *c, int64_t token, const char *what);
/* What follows a successful acquisition script: WAIT for min_replicas (rolled back on
 * failure) and the watchdog when `watchdog`. Returns ACQUIRED or the error. */
lk_status lk__acquired(lk_client *c, const char *resource, const char *owner, int watchdog,
                       const lk_result *res);

/* Reports one reply pushed to a subscriber connection (sub.c): ["message", channel, payload]
 * calls fn with LK_SUB_RELEASED and ["subscribe", channel, n] with LK_SUB_SUBSCRIBED, for a
 * channel "fg:{<valid resource>}:released". Anything else ("unsubscribe" confirmations,
 * other channels, malformed replies) is not an event and calls nothing. */
void lk__sub_report(const redisReply *r, lk_sub_fn fn, void *userdata);

/* Watchdog (watchdog.c). */
lk_status lk__watch_add(lk_client *c, const char *resource, const char *owner);
/* Marks (1) or unmarks (0) a watch as being released: lk_release() sets it before its script
 * runs, so a renewal's NOT_OWNER in between is not reported as a loss. */
void lk__watch_releasing(lk_client *c, const char *resource, const char *owner, int releasing);
void lk__watch_remove(lk_client *c, const char *resource, const char *owner);
void lk__watchdog_stop(lk_client *c);

/* Monotonic milliseconds. */
int64_t lk__now_ms(void);

/* The stall breaker (breaker.c) around one call that talks to Redis. enter: 0 to go ahead
 * (*probe set when this call is the breaker's probe), -1 when the call must fail fast (the
 * reason is in c->err). slow: whether a call that took elapsed_ms counts as slow (always 0
 * without a breaker). leave: what the call returned and whether Redis was slow. */
int lk__breaker_enter(lk_client *c, int *probe);
int lk__breaker_slow(const lk_client *c, int64_t elapsed_ms);
void lk__breaker_leave(lk_client *c, int probe, lk_status st, int slow);

#endif
