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

/* Starts the reaper thread (none on redlock://, which has no sessions). Returns 0, or -1
 * when the thread could not be created. */
int gw__session_reaper_start(gw_server *srv);
/* Stops it (waits for its pass in progress). No-op when not started. */
void gw__session_reaper_stop(void);

#endif
