/* The watchdog (watchdog.c): keeps LK_LEASE_WATCHDOG locks renewed. Layer: above run and
 * client_internal.h; client.c and locks.c use it. Never installed. */
#ifndef LOCKLIB_WATCHDOG_INTERNAL_H
#define LOCKLIB_WATCHDOG_INTERNAL_H

#include "client_internal.h"

/* Watches (resource, owner) of c, starting the watchdog on first use. Returns OK or ENOMEM
 * (the thread or the watch could not be made). */
lk_status lk__watch_add(lk_client *c, const char *resource, const char *owner);
/* lk__watch_add() with the lease each renewal grants. A session's watch is (id, "#" and its
 * client), renewed with lk__session_renew() every lease_ms/3. */
lk_status lk__watch_add_lease(lk_client *c, const char *resource, const char *owner,
                              int64_t lease_ms);
/* Marks (1) or unmarks (0) a watch as being released: lk_release() sets it before its script
 * runs, so a renewal's NOT_OWNER in between is not reported as a loss. */
void lk__watch_releasing(lk_client *c, const char *resource, const char *owner, int releasing);
void lk__watch_remove(lk_client *c, const char *resource, const char *owner);
/* Stops the thread and frees every watch; the leases then simply run out. */
void lk__watchdog_stop(lk_client *c);

#endif
