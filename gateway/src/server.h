/*
 * The HTTP server and router (server.c): the top of the gateway. main.c starts and stops it.
 */
#ifndef GATEWAY_SERVER_H
#define GATEWAY_SERVER_H

#include <stddef.h>

#include "request.h"

/* The HTTP worker threads the daemon runs: --threads, raised so that no worker holds more
 * than 120 of --max-connections (libmicrohttpd splits the limit evenly), and never above
 * 1,024, past which (122,880 connections) a worker may hold more (server.c). */
unsigned int gw__server_workers(const gw_config *cfg);
/* Starts the daemon on cfg->listen. Returns 0 or -1 with err. */
int gw__server_start(gw_server *srv, char *err, size_t errlen);
/* Stops accepting, waits up to drain_ms for in-flight requests, stops the daemon.
 * Returns 0 when everything finished, -1 when requests were still running at the deadline
 * (the daemon is then left running: the caller exits). */
int gw__server_stop(gw_server *srv, int drain_ms);

#endif
