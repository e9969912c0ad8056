/*
 * Small helpers every layer of the gateway may use (util.c): the monotonic clock, making
 * client bytes printable, and counting request headers. Bottom layer: includes nothing of
 * the gateway and calls nothing of it.
 */
#ifndef GATEWAY_UTIL_H
#define GATEWAY_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include <microhttpd.h>

/* Monotonic microseconds. */
int64_t gw__now_us(void);
/* Monotonic milliseconds (gw__now_us() / 1000). */
int64_t gw__now_ms(void);
/* Wall-clock milliseconds since the Unix epoch, for times shown to people (a Redlock
 * node's hold-out end); never for measuring durations. */
int64_t gw__wall_ms(void);

/* Copies src into dst (len bytes) as printable ASCII for logs and messages: anything else,
 * and '"' and '\\', becomes '?'; truncated to fit. */
void gw__printable(char *dst, size_t len, const char *src);

/* Counts the request headers named `name` (case-insensitive); *value gets the last one. */
int gw__header_count(struct MHD_Connection *conn, const char *name, const char **value);

#endif
