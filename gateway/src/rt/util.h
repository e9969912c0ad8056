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

/* Reads the whole regular file path (at most max bytes, no NUL in it) into *out, malloc'd and
 * NUL-terminated, and its length into *len (may be NULL). Returns 0, or -1 with a message
 * that starts "WHAT PATH: " in err: unreadable, not a regular file (a directory), too long,
 * a NUL byte, or changed while being read. */
int gw__read_file(const char *path, size_t max, char **out, size_t *len, char *err,
                  size_t errlen, const char *what);

#endif
