/*
 * The HTTP server (server.c): the HTTP event loops' daemons and what runs each request's
 * operation. main.c starts and stops it.
 */
#ifndef GATEWAY_SERVER_H
#define GATEWAY_SERVER_H

#include <stddef.h>

#include "http/request.h"
#include "rt/gateway.h"

/* The HTTP event loops the server runs (loops.c): --threads, each with its own daemon and
 * any number of connections, but no more than --max-connections. */
unsigned int gw__server_loops(const gw_config *cfg);
/* Starts the loops and their daemons on cfg->listen. Returns 0 or -1 with err. */
int gw__server_start(gw_server *srv, char *err, size_t errlen);
/* Stops accepting, waits up to drain_ms for in-flight requests, stops the loops and their
 * daemons. Returns 0 when everything finished, -1 when requests were still running at the
 * deadline (the loops are then left running: the caller exits). */
int gw__server_stop(gw_server *srv, int drain_ms);

#endif
