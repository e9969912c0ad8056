/*
 * The handle (struct lk_client) and what the files above the transport share about it.
 * Layer: above transport. The watchdog includes it for the handle's fields only; client.c
 * (open, close, errors) sits above the watchdog. Never installed.
 */
#ifndef LOCKLIB_CLIENT_INTERNAL_H
#define LOCKLIB_CLIENT_INTERNAL_H

#include <stdatomic.h>

#include "cluster_internal.h"
#include "redlock_internal.h"
#include "redlock_transport_internal.h"
#include "transport_internal.h"
#include "util_internal.h"

typedef struct lk__watchdog lk__watchdog;

struct lk_client {
    lk_options opts;
    lk__transport tp;                  /* the script calls; its err is `err` below */
    redisContext *sub;                 /* subscriber for lk_acquire_wait; NULL when unused */
    char id[33];                       /* 128 random bits, hex */
    char err[LK__ERR_LEN];
    /* Started by the first LK_LEASE_WATCHDOG acquire, freed by lk_client_close(). Atomic so
     * that lk_watch_lost() on another thread never sees a half-built watchdog. */
    _Atomic(lk__watchdog *) wd;
};

/* Records the reason of an error in c->err and returns st. */
lk_status lk__fail(lk_client *c, lk_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Allocates a handle for url and opts (NULL for the defaults) without connecting: the parts
 * of lk_client_open() before the connection. Returns OK, EINVAL or ENOMEM (then *out is
 * NULL). The caller frees it with lk_client_close(). */
lk_status lk__client_new(lk_client **out, const char *url, const lk_options *opts);

#endif
