/*
 * The calls on a session's own record (session.lua, under the tag {#sessions}) and a
 * session's renewal, on any transport (session_calls.c): what the public lk_session_* of
 * session.c and the watchdog's session renewals share. Layer: above run. Never installed.
 */
#ifndef LOCKLIB_SESSION_INTERNAL_H
#define LOCKLIB_SESSION_INTERNAL_H

#include "run_internal.h"

/* The hash tag of every session key: '#' is never in a resource name. */
#define LK__SESSION_ROUTE "#sessions"

/* Sends n built calls as one batch on t; st[i], reply[i] (NULL unless st[i] is OK, an array
 * reply the caller frees) and err[i] are each call's outcome. */
void lk__session_send(lk__transport *t, size_t n, lk__cmd *cmds, lk_status *st,
                      redisReply **reply, char (*err)[LK__ERR_LEN]);

/* Element i of an array reply: an integer or decimal string (0 when absent), or a string
 * (NULL when absent). */
int64_t lk__session_num(const redisReply *r, size_t i);
const char *lk__session_str(const redisReply *r, size_t i);

/* A session.lua call of op on session id (NULL for reap) with up to four more arguments
 * (NULL ends them). OK with *reply (the caller frees it), or an error with the reason in
 * err (LK__ERR_LEN bytes). */
lk_status lk__session_call(lk__transport *t, char *err, const char *op, const char *id,
                           const char *client, redisReply **reply, const char *a1,
                           const char *a2, const char *a3, const char *a4);

/* lk_session_renew() on t with opts (the id and client checked by the caller): the session's
 * deadline moved, then each of its locks renewed (LK_CALL_RENEW, one batch). RENEWED,
 * NOT_OWNER or an error with the reason in err. */
lk_status lk__session_renew(lk__transport *t, const lk_options *opts, char *err,
                            const char *id, const char *client, lk_session_renewal *out);

/* Whether lk_session_reap() has anything to claim, read without a script (so a gateway's
 * reaper costs an idle Redis no script call): the earliest deadline and Redis's TIME, on
 * t's one connection. Cluster and Redlock transports have no one connection: *due is then
 * always 1 and the claim script decides. OK, or an error (the connection dropped). */
lk_status lk__session_due(lk__transport *t, char *err, int *due);

#endif
