/*
 * Logging on stderr (log.c): one line per request and a few lines about the process. Takes
 * plain values, not a request, so every layer may log.
 */
#ifndef GATEWAY_LOG_H
#define GATEWAY_LOG_H

#include <stdint.h>

#include <microhttpd.h>

#include "config.h"

/* One line per request on stderr: method, path, status, microseconds. Never owners,
 * headers or bodies. method is printable already; url is the raw request path (client
 * bytes, made printable here). */
void gw__log_request(const gw_config *cfg, const char *method, const char *url, int status,
                     int64_t micros, enum MHD_RequestTerminationCode toe);
/* A line about the process itself (start, shutdown, dependency trouble). */
void gw__log_event(const gw_config *cfg, const char *level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
