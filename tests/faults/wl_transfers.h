/*
 * fg_workload's transfers mode (wl_transfers.c): clients moving money between accounts in
 * fenced transactions (POST /resources), for the checker's invariant 11.
 */
#ifndef FG_FAULTS_WL_TRANSFERS_H
#define FG_FAULTS_WL_TRANSFERS_H

#include <stdint.h>

#include "wl_client.h"

/* Opens cf->accounts accounts, runs the transfer clients until the run is over, then reads
 * every account, all into the history at path. Returns 0, or 1 when something failed. */
int wl_transfers_run(const conf *cf, const char *history, uint64_t seed);

#endif
