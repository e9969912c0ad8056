/*
 * POST /lock {"session"}: a lock whose lease is its session's (session_lock.c), the hooks
 * ops/lock.c calls.
 */
#ifndef GATEWAY_SESSION_LOCK_H
#define GATEWAY_SESSION_LOCK_H

#include <jansson.h>

#include "ops/lock_internal.h"

/* Reads the optional "session" of a /lock body into *session (NULL when absent). Returns 0,
 * or -1 after queuing the 400 (not a string; "ttl_ms" with it: the lease is the session's). */
int gw__session_lock_args(gw_request *req, json_t *root, const char **session,
                          enum MHD_Result *result);

/* Looks the session up on a side thread (its lease, and that it is this client's): suspends
 * the connection, call->stage LOCK_SESSION. */
enum MHD_Result gw__session_lock_begin(gw_request *req, struct gw_lock_call *call,
                                       const char *session);

/* An attempt of a session's /lock answered ACQUIRED with *res: records the lock in the
 * session on a side thread before it is answered (stage LOCK_SESSION again). */
enum MHD_Result gw__session_lock_add(gw_request *req, struct gw_lock_call *call,
                                     const lk_result *res);

/* LOCK_SESSION, resumed. Returns 1 with *result when the request was answered; 0 when the
 * session was looked up and call->ttl_ms is its lease: the caller attempts the lock. */
int gw__session_lock_resumed(gw_request *req, struct gw_lock_call *call,
                             enum MHD_Result *result);

/* Frees call->session; a hold whose recording in the session was never answered (the client
 * went away meanwhile) is given back first. */
void gw__session_lock_free(struct gw_lock_call *call);

#endif
