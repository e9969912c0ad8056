/*
 * The bottom layer of locklib: what every other file may use and which uses nothing of
 * locklib's own. Names and key names, error text, the clock, the SIGPIPE guard and reading
 * integers out of a reply. Never installed.
 *
 * The layers of locklib/src, each including only the headers of the layers below it
 * (bash scripts/layers.sh locklib/src checks it, calls included):
 *   util                      this file
 *   breaker, script           the stall breaker; a built script call (lk__cmd)
 *   calls, transport          building and decoding each call kind; sending built calls
 *   run                       calls over a transport: build, send, decode
 *   watchdog                  renews watched locks on its own transport
 *   client                    the handle: URL, options, open and close, ping
 *   locks                     the public calls: lk_acquire ... lk_call_many
 *   wait, sub                 waiting for a release
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

/* Validation shared by the calls. */
int lk__valid_lease(int64_t lease_ms);
int lk__valid_idem(const char *idem_key); /* NULL (no key) or a valid name */

/* Reads integer element i of an array reply, 0 when absent or not an integer. */
long long lk__int_at(const redisReply *r, size_t i);

/* Monotonic milliseconds. */
int64_t lk__now_ms(void);

/* SIGPIPE guard around socket writes: blocks SIGPIPE for this thread and, on restore,
 * swallows one that the writes raised, so a write to a closed socket never kills the process
 * whatever the application's signal disposition is. */
typedef struct lk__sigpipe {
    sigset_t old;
    int was_pending;
} lk__sigpipe;
void lk__sigpipe_block(lk__sigpipe *g);
void lk__sigpipe_restore(lk__sigpipe *g);

#endif
