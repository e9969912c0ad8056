/*
 * fg_workload's sessions mode (wl_sessions.c): locks held in sessions, ended by DELETE, by
 * expiry, and with their holder killed, for the checker's invariant 14.
 */
#ifndef FG_FAULTS_WL_SESSIONS_H
#define FG_FAULTS_WL_SESSIONS_H

#include <stdint.h>

#include "wl_client.h"

/* Runs the session clients until the run is over, appending to the history descriptor fd.
 * Returns 0, or 1 when a client failed. */
int wl_sessions_run(const conf *cf, int fd, uint64_t seed);

#endif
