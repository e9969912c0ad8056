/*
 * Each side-pipeline thread's own locklib handle (redis_client.c), for the rare, slow Redis
 * calls that do not go through the Redis pipelines: a hiredis context is not thread-safe.
 */
#ifndef GATEWAY_REDIS_CLIENT_H
#define GATEWAY_REDIS_CLIENT_H

#include "locklib/locklib.h"

#include "rt/runtime.h"

/* This thread's locklib handle, opened on first use; NULL on allocation failure or a bad
 * URL. Closed by a thread-exit destructor. */
lk_client *gw__client(gw_rt *rt);

#endif
