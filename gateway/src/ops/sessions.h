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

/* The reaper: readies it and returns 1, or 0 on redlock://, which has no sessions. Call it
 * once the store and the fence are open; on 1, run gw__session_reap_tick with the runtime
 * (gw_rt *) as its argument every GW_SESSION_REAP_MS on one loop (main.c makes it the
 * server's chore). The tick never blocks: it hands a pass to a side thread. */
#define GW_SESSION_REAP_MS 100
int gw__session_reaper_start(const gw_rt *rt);
void gw__session_reap_tick(void *rt);
/* Asks it to start no new pass, and a running one to stop after its batch. */
void gw__session_reaper_stop(void);

#endif
