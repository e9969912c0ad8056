/* Release notifications (sub.c). Layer: above client. Never installed. */
#ifndef LOCKLIB_SUB_INTERNAL_H
#define LOCKLIB_SUB_INTERNAL_H

#include "client_internal.h"

/* Reports one reply pushed to a subscriber connection: ["message", channel, payload] calls
 * fn with LK_SUB_RELEASED and ["subscribe", channel, n] with LK_SUB_SUBSCRIBED, for a
 * channel "fg:{<valid resource>}:released". Anything else ("unsubscribe" confirmations,
 * other channels, malformed replies) is not an event and calls nothing. */
void lk__sub_report(const redisReply *r, lk_sub_fn fn, void *userdata);

/* Opens a subscriber (as lk_sub_open()) on the settings and transport of c, which it
 * borrows: c must outlive it, is used on the same thread only, and its error text is
 * overwritten by the subscriber's failures. lk_sub_close() frees the subscriber, never c.
 * Returns what lk_sub_open() returns; *out is NULL only on ENOMEM. */
lk_status lk__sub_open_client(lk_sub **out, lk_client *c);

#endif
