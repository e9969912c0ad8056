/* Release notifications (sub.c). Layer: above client. Never installed. */
#ifndef LOCKLIB_SUB_INTERNAL_H
#define LOCKLIB_SUB_INTERNAL_H

#include "client_internal.h"

/* Reports one reply pushed to a subscriber connection: ["message", channel, payload] calls
 * fn with LK_SUB_RELEASED and ["subscribe", channel, n] with LK_SUB_SUBSCRIBED, for a
 * channel "fg:{<valid resource>}:released". Anything else ("unsubscribe" confirmations,
 * other channels, malformed replies) is not an event and calls nothing. */
void lk__sub_report(const redisReply *r, lk_sub_fn fn, void *userdata);

#endif
