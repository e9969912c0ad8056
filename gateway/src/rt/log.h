/*
 * Logging on stderr (log.c): one line per request and a few lines about the process. Takes
 * plain values, not a request, so every layer may log.
 */
#ifndef GATEWAY_LOG_H
#define GATEWAY_LOG_H

#include <stdarg.h>
#include <stdint.h>

#include <microhttpd.h>

#include "base/config.h"

/* libmicrohttpd logs a line for each connection it refuses at accept ("Server reached
 * connection limit"), and loops.c one for each it refuses for its address's limit (through
 * gw__log_mhd too): a flood of connections over the limits would
 * otherwise write thousands of lines a second. */
#define GW_MHD_LOG_PER_S 10

/* Lines are buffered and written by a flusher thread from gw__log_start() (0, or -1 when
 * the thread could not start: lines are then written directly) until gw__log_stop(), which
 * writes what is left. Before and after, each line is written at once. */
int gw__log_start(void);
void gw__log_stop(void);
/* Lines dropped because the buffer was full (stderr not keeping up). */
unsigned long long gw__log_dropped(void);

/* One line per request on stderr: method, path, status, microseconds, and the client's name
 * (NULL without authentication). Never tokens, owners, headers or bodies. method is
 * printable already; url is the raw request path (client bytes, made printable here). */
void gw__log_request(const gw_config *cfg, const char *method, const char *url, int status,
                     int64_t micros, enum MHD_RequestTerminationCode toe, const char *client);
/* A line about the process itself (start, shutdown, dependency trouble). */
void gw__log_event(const gw_config *cfg, const char *level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* MHD_OPTION_EXTERNAL_LOGGER (cls: the gw_config): libmicrohttpd's own messages as event
 * lines, at most GW_MHD_LOG_PER_S a second. Past that they are counted, and the count is
 * logged with the next line that is written. */
void gw__log_mhd(void *cls, const char *fmt, va_list ap);

#endif
