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

/* Answers a /lock in a session refused by its session step: 503 when a hold ended with the
 * session could not be fenced in storage (fence_st), 404 session_not_found (NOT_OWNER), 409
 * session_full (EINVAL while adding, the locks recorded), or lk's error. For one resource
 * and for a set (ops/lock_set.c) alike. */
enum MHD_Result gw__session_refused(gw_request *req, int adding, lk_status lk,
                                    store_status fence_st, const char *err);

/* A set's /lock in a session (ops/lock_set.c): the same two steps, run within the set's
 * attempt on its pipeline thread. */
typedef struct gw_session_set {
    unsigned char in;                    /* "session" was given */
    unsigned char lease_known;           /* the session was looked up: the set's lease is its */
    lk_status lk;                        /* the last step's outcome (OK until one refused) */
    store_status store;                  /* a fence of a refused join that storage refused */
    char id[LK_SESSION_ID_LEN + 1];
    char client[LK_SESSION_CLIENT_MAX + 1];
} gw_session_set;

/* Reads the optional "session" of a set's body into *ss. Returns 0, or -1 after queuing the
 * refusal: 400 as gw__session_lock_args, 400 sessions_unavailable on Redlock, 404 for an id
 * that cannot be one. */
int gw__session_set_begin(gw_request *req, json_t *root, gw_session_set *ss,
                          enum MHD_Result *result);

/* Before the set's first attempt: looks the session up and puts its lease in *ttl_ms.
 * Returns 0 (also when the set is in no session), or -1 with the refusal in ss->lk, *lk and
 * err. Blocking. */
int gw__session_set_lease(gw_rt *rt, lk_client *c, gw_session_set *ss, int64_t *ttl_ms,
                          lk_status *lk, char *err, size_t errlen);

/* Once the set was granted (items ACQUIRED): records every lock of it in the session, all or
 * none (gw__fence_session_join). Refused (ss->lk not OK), the holds the grant created were
 * ended and fenced, and the others it added are given back here. Nothing when the set is in
 * no session. Blocking. */
void gw__session_set_join(gw_rt *rt, lk_client *c, gw_session_set *ss, const char *owner,
                          const char *idem_key, lk_many *items, size_t n, char *err,
                          size_t errlen);

/* Frees call->session; a hold whose recording in the session was never answered (the client
 * went away meanwhile) is given back first. */
void gw__session_lock_free(struct gw_lock_call *call);

#endif
