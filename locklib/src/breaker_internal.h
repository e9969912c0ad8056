/* The stall breaker (breaker.c) around one call that talks to Redis, used by the transport.
 * Layer: above util only. Never installed. */
#ifndef LOCKLIB_BREAKER_INTERNAL_H
#define LOCKLIB_BREAKER_INTERNAL_H

#include "util_internal.h"

/* enter: 0 to go ahead (*probe set when this call is the breaker's probe), -1 when the call
 * must fail fast (the reason is in err, LK__ERR_LEN bytes). b may be NULL (no breaker). */
int lk__breaker_enter(lk_breaker *b, int *probe, char *err);
/* Whether a call that took elapsed_ms counts as slow with these timeouts (always 0 without
 * a breaker). */
int lk__breaker_slow(const lk_breaker *b, int connect_timeout_ms, int command_timeout_ms,
                     int64_t elapsed_ms);
/* What the call returned and whether Redis was slow. */
void lk__breaker_leave(lk_breaker *b, int probe, lk_status st, int slow);

#endif
