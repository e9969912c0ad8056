/*
 * Sessions: POST /sessions, POST /sessions/{id}/renew, GET and DELETE /sessions/{id}, and
 * the reaper that ends expired ones (sessions.c).
 */
#ifndef GATEWAY_SESSIONS_H
#define GATEWAY_SESSIONS_H

#include "http/request.h"

extern const gw_op gw__op_sessions;

/* The client a session of this request is bound to: its name with --clients, else "". */
const char *gw__session_client(const gw_request *req);
/* 404 session_not_found; 400 sessions_unavailable (redlock://). */
enum MHD_Result gw__session_not_found(gw_request *req);
enum MHD_Result gw__session_unavailable(gw_request *req);

/* Sets srv's chore to the reaper's tick (none on redlock://, which has no sessions); call
 * before gw__server_start(), once the store and the fence are open. */
void gw__session_reaper_start(gw_server *srv);
/* Asks it to start no new pass, and a running one to stop after its batch. */
void gw__session_reaper_stop(void);

#endif
