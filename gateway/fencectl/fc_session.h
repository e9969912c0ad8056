/*
 * fencectl lock's session (fc_session.c): POST /sessions, its renewals and its end, for the
 * locks of one command.
 */
#ifndef FC_SESSION_H
#define FC_SESSION_H

#include <stdint.h>

#include "fc_args.h"
#include "fc_internal.h"

typedef struct fc_session {
    int on;                      /* a session is open; 0: none (the gateway has none) */
    char id[FC_ID_LEN + 1];      /* a credential: never printed */
    int64_t sent_ms;             /* when its creation or last good renewal was sent: its
                                  * lease surely lasts until then + ttl */
} fc_session;

typedef enum fc_session_renewal {
    FC_SESSION_RENEWED,          /* the session and every one of its locks */
    FC_SESSION_LOST,             /* the session ended, or a lock of it is no longer held */
    FC_SESSION_FAILED            /* no answer, an error, or a lock not reached */
} fc_session_renewal;

/* POST /sessions with o->ttl_ms. Returns FC_EXIT_OK with s->on 1, or with s->on 0 when the
 * gateway has no sessions (400 sessions_unavailable on Redlock, or 404 not_found from a
 * gateway older than sessions: the caller renews its locks itself, and says so with
 * --verbose); else the exit code after printing why. */
int fc__session_open(fc_client *c, const fc_options *o, fc_session *s);

/* POST /sessions/{id}/renew, expecting nlocks locks all renewed; its answer in *r (the
 * caller frees it and reports a failure). On success s->sent_ms moves to when it was sent.
 * FAILED with a 200 in *r: some locks were not reached (a Cluster master did not answer):
 * they keep their old leases. */
fc_session_renewal fc__session_renew(fc_client *c, fc_session *s, int nlocks,
                                     int64_t timeout_ms, fc_response *r);

/* DELETE /sessions/{id}: releases every lock of it and fences its token. A failure is only
 * reported (the gateway ends the session when its lease runs out); an already ended session
 * is not, unless held says the locks should still have been held. Forgets the id. No-op
 * without a session. */
void fc__session_end(fc_client *c, fc_session *s, int held);

#endif
