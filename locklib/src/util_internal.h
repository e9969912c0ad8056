/*
 * The bottom layer of locklib: what every other file may use and which uses nothing of
 * locklib's own. Names and key names, error text, the clock, the SIGPIPE guard and reading
 * integers out of a reply. Never installed.
 *
 * The layers of locklib/src, bottom first. A file includes the headers of its own layer's
 * module and of layers below, and calls only into those (bash scripts/layers.sh
 * locklib/src checks both):
 *   util        this file                  decimal   a 64-bit integer's decimal text
 *   breaker     the stall breaker          script    a built script call (lk__cmd) and the
 *                                                    generated table of scripts
 *   conn        one connection to one server: connect, AUTH, SELECT, one command
 *   sentinel    finding the master through the sentinels, then ROLE (above conn)
 *   calls       each call kind's {build, decode}, knowing no connection
 *   transport   sending built calls to Redis and handing back one reply each (the seam for
 *               Cluster, Sentinel and Redlock, described in transport_internal.h)
 *   cluster     Redis Cluster: slot map, one transport per master (its ops)
 *   run         calls over a transport: build, send, decode
 *   watchdog    renews watched locks through run, on its own transport
 *   client      the handle: URL, options, open and close, errors, ping
 *   locks       the public calls, lk_acquire ... lk_call_many: run, then the watchdog's
 *               bookkeeping and WAIT for replicas
 *   sub         release notifications for event loops
 *   wait        lk_acquire_wait(): locks and a subscriber connection
 */
#ifndef LOCKLIB_UTIL_INTERNAL_H
#define LOCKLIB_UTIL_INTERNAL_H

#include <signal.h>
#include <stdarg.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "locklib/locklib.h"

/* The size of every error text buffer: lk_client's, a transport's, lk_call's err. */
#define LK__ERR_LEN 256

/* Writes the reason (printf-style) into err, which holds LK__ERR_LEN bytes, and returns st.
 * err may be NULL: then only st is returned. */
lk_status lk__errf(char *err, lk_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
lk_status lk__verrf(char *err, lk_status st, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* Key names: "fg:{<resource>}:<suffix>". The resource must be valid. All keys of one
 * resource share the hash tag {resource}, so a script on them touches one Cluster slot. */
#define LK__KEY_MAX (LK_RESOURCE_MAX + 16 + LK_OWNER_MAX)
void lk__key(char *buf, const char *resource, const char *suffix);
void lk__idem_key(char *buf, const char *resource, const char *idem_key);

/* A hold id: 16 lowercase hex digits and a NUL into buf (17 bytes), unique in this process
 * and random across processes. An acquisition passes one (acquire.lua ARGV[8]); every
 * master of a Redlock call gets the same, so their release messages name the same hold
 * (sub.c). Thread-safe. */
#define LK__HOLD_ID_LEN 16
void lk__hold_id(char *buf);

/* Validation shared by the calls. */
int lk__valid_lease(int64_t lease_ms);
int lk__valid_idem(const char *idem_key); /* NULL (no key) or a valid name */

/* Reads integer element i of an array reply, 0 when absent or not an integer. */
long long lk__int_at(const redisReply *r, size_t i);

/* Monotonic milliseconds. */
int64_t lk__now_ms(void);

/* SIGPIPE guard around socket writes: blocks SIGPIPE for this thread and, on restore,
 * swallows one that the writes raised, so a write to a closed socket never kills the process
 * whatever the application's signal disposition is. Does nothing once the application said
 * it ignores SIGPIPE (lk_sigpipe_ignored). */
typedef struct lk__sigpipe {
    sigset_t old;
    int was_pending;
    int skipped;
} lk__sigpipe;
void lk__sigpipe_block(lk__sigpipe *g);
void lk__sigpipe_restore(lk__sigpipe *g);

#endif
