/*
 * POST /lock {"resource", "session": id, ...}: the lock's lease is the session's.
 *
 * Two side-thread steps around the usual attempt (ops/lock.c, fence, pipeline, ledger):
 *   1. before the attempt, the session is looked up (lk_session_info): unknown, ended,
 *      expired or another client's is 404 session_not_found; else its lease becomes the
 *      attempt's ttl_ms;
 *   2. once the attempt answered ACQUIRED, the lock is recorded in the session
 *      (gw__fence_session_join, which a set's /lock uses too) before the client is answered.
 *      If the session ended meanwhile (or is full), a hold this call created is ended and
 *      fenced like the session's other locks and the answer is 404 (409 session_full); a re-entry
 *      or a replay only gives back the hold it added, since the token was answered to its
 *      owner before and that hold is not the session's to end. If Redis could not record
 *      it, the hold is given back and the answer is 503. So no lock answered 200 is
 *      missing from its session.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/session_fence.h"
#include "http/respond.h"
#include "ops/session_lock.h"
#include "ops/sessions.h"
#include "rt/pipe.h"
#include "rt/redis_client.h"

enum { PHASE_LOOKUP, PHASE_ADD };

struct gw_session_lock {
    gw_job job;
    gw_rt *rt;
    const struct gw_lock_call *call;
    int phase;
    int well_formed;
    char id[LK_SESSION_ID_LEN + 1];
    char client[LK_SESSION_CLIENT_MAX + 1];
    int64_t ttl_ms;
    lk_result res;                     /* PHASE_ADD: the attempt's ACQUIRED answer */
    lk_status lk;
    int fenced;                        /* PHASE_ADD: the hold was ended and fenced */
    store_status store;
    char err[256];
};

int gw__session_lock_args(gw_request *req, json_t *root, const char **session,
                          enum MHD_Result *result)
{
    json_t *v = json_object_get(root, "session");
    *session = NULL;
    if (v == NULL) {
        return 0;
    }
    if (!json_is_string(v)) {
        *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request",
                                 json_pack("{s:s}", "field", "session"),
                                 "\"session\" must be a session id (a string)");
        return -1;
    }
    if (json_object_get(root, "ttl_ms") != NULL) {
        *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request",
                                 json_pack("{s:s}", "field", "ttl_ms"),
                                 "\"ttl_ms\" cannot be given with \"session\": the lock's "
                                 "lease is the session's");
        return -1;
    }
    json_t *mode = json_object_get(root, "mode");
    if (json_is_string(mode) && strcmp(json_string_value(mode), "shared") == 0) {
        /* A session's end deletes the lock and burns a token past its own (session_lock.lua):
         * with shared holders outside the session that would free the lock under their
         * running leases, so a shared lock is never a session's. */
        *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request",
                                 json_pack("{s:s}", "field", "session"),
                                 "\"session\" cannot be given with \"mode\": \"shared\": "
                                 "shared locks are not taken in sessions");
        return -1;
    }
    *session = json_string_value(v);
    return 0;
}

enum MHD_Result gw__session_refused(gw_request *req, int adding, lk_status lk,
                                    store_status fence_st, const char *err)
{
    if (adding && fence_st != STORE_OK) {
        return gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "backend_unavailable", NULL,
                              "the session ended as the lock was taken, and storage could not "
                              "record the fence of that hold (%s)", store_status_name(fence_st));
    }
    if (lk == LK_NOT_OWNER) {
        return gw__session_not_found(req);
    }
    if (lk == LK_EINVAL && adding) {
        return gw__send_error(req, MHD_HTTP_CONFLICT, "session_full",
                              json_pack("{s:i}", "max_locks", LK_SESSION_LOCKS_MAX),
                              "the session cannot hold more than %d locks",
                              LK_SESSION_LOCKS_MAX);
    }
    return gw__send_lk_error(req, err != NULL && err[0] != '\0' ? err : NULL, lk);
}

static void session_lock_work(gw_job *job)
{
    struct gw_session_lock *s = job->arg;
    lk_client *c = gw__client(s->rt);
    int64_t remaining = 0;
    size_t n = 0;

    s->err[0] = '\0';
    if (c == NULL) {
        s->lk = LK_ENOMEM;
        return;
    }
    if (s->phase == PHASE_LOOKUP) {
        s->lk = lk_session_info(c, s->id, s->client, &s->ttl_ms, &remaining, NULL, 0, &n);
    } else {
        /* Gone meanwhile (or full): a hold this call created must not outlive the session,
         * and is fenced. A re-entry's or a replay's token was answered before, outside this
         * call: it keeps its hold, less the one this call added (resumed). */
        lk_many one = {.resource = s->call->turn.resource, .status = LK_ACQUIRED,
                       .res = s->res};
        s->lk = gw__fence_session_join(&s->rt->fence, c, s->id, s->client, s->call->owner,
                                       &one, 1, &s->store);
        s->fenced = one.undone;
    }
    gw__note_redis(s->rt, s->lk);
    if (s->lk >= LK_EINVAL) {
        snprintf(s->err, sizeof s->err, "%s", lk_errstr(c));
    }
}

static enum MHD_Result submit(gw_request *req, struct gw_lock_call *call)
{
    struct gw_session_lock *s = call->session;
    call->stage = LOCK_SESSION;
    s->job.work = session_lock_work;
    s->job.arg = s;
    s->job.conn = req->conn;
    s->job.done = NULL;
    MHD_suspend_connection(req->conn);
    gw__pipe_submit(req->rt->side, &s->job);
    return MHD_YES;
}

enum MHD_Result gw__session_lock_begin(gw_request *req, struct gw_lock_call *call,
                                       const char *session)
{
    if (strncmp(req->rt->cfg->redis_url, "redlock://", 10) == 0) {
        gw__lock_count_acquire(req, GW_ACQ_invalid);
        return gw__session_unavailable(req);
    }
    struct gw_session_lock *s = calloc(1, sizeof *s);
    if (s == NULL) {
        return MHD_NO;
    }
    call->session = s;
    s->rt = req->rt;
    s->call = call;
    s->phase = PHASE_LOOKUP;
    s->well_formed = lk_valid_session(session);
    snprintf(s->id, sizeof s->id, "%s", s->well_formed ? session : "");
    snprintf(s->client, sizeof s->client, "%s", gw__session_client(req));
    if (!s->well_formed) {
        gw__lock_count_acquire(req, GW_ACQ_invalid);
        return gw__session_not_found(req);
    }
    return submit(req, call);
}

enum MHD_Result gw__session_lock_add(gw_request *req, struct gw_lock_call *call,
                                     const lk_result *res)
{
    struct gw_session_lock *s = call->session;
    memset(&s->job, 0, sizeof s->job);
    s->phase = PHASE_ADD;
    s->res = *res;
    return submit(req, call);
}

int gw__session_lock_resumed(gw_request *req, struct gw_lock_call *call,
                             enum MHD_Result *result)
{
    struct gw_session_lock *s = call->session;

    call->stage = LOCK_ATTEMPTING;
    if (s->phase == PHASE_LOOKUP && s->lk == LK_OK) {
        call->ttl_ms = s->ttl_ms;
        return 0;
    }
    if (s->phase == PHASE_ADD && s->lk == LK_OK) {
        *result = gw__lock_answer_attempt(req, call, LK_ACQUIRED, &s->res, "");
        return 1;
    }
    gw__lock_count_acquire(req, s->lk == LK_NOT_OWNER ? GW_ACQ_invalid : GW_ACQ_error);
    if (s->phase == PHASE_ADD && !s->fenced) {
        /* Not recorded, so not ended with the session: give back the hold it added. */
        gw__lock_give_back(req->rt, call, s->res.token, 0);
    }
    *result = gw__session_refused(req, s->phase == PHASE_ADD, s->lk, s->store, s->err);
    return 1;
}

void gw__session_lock_free(struct gw_lock_call *call)
{
    struct gw_session_lock *s = call->session;
    if (s != NULL && call->stage == LOCK_SESSION && s->phase == PHASE_ADD && !s->fenced &&
        !s->res.replayed) {
        /* The client went away while the hold was being recorded: libmicrohttpd ended the
         * request without resuming it, so nobody answered the hold. Give it back rather
         * than leave it held, renewed with the session, for an owner that may be gone. */
        gw__lock_give_back(s->rt, call, s->res.token, 0);
    }
    free(call->session);
    call->session = NULL;
}

/* ---- A set's /lock in a session (ops/lock_set.c) ------------------------------------- */

int gw__session_set_begin(gw_request *req, json_t *root, gw_session_set *ss,
                          enum MHD_Result *result)
{
    const char *session = NULL;

    memset(ss, 0, sizeof *ss);
    ss->lk = LK_OK;
    if (gw__session_lock_args(req, root, &session, result) != 0) {
        return -1;
    }
    if (session == NULL) {
        return 0;
    }
    if (strncmp(req->rt->cfg->redis_url, "redlock://", 10) == 0) {
        *result = gw__session_unavailable(req);
        return -1;
    }
    if (!lk_valid_session(session)) {
        *result = gw__session_not_found(req);
        return -1;
    }
    ss->in = 1;
    snprintf(ss->id, sizeof ss->id, "%s", session);
    snprintf(ss->client, sizeof ss->client, "%s", gw__session_client(req));
    return 0;
}

int gw__session_set_lease(gw_rt *rt, lk_client *c, gw_session_set *ss, int64_t *ttl_ms,
                          lk_status *lk, char *err, size_t errlen)
{
    int64_t remaining = 0;
    size_t n = 0;

    if (!ss->in || ss->lease_known) {
        return 0;
    }
    ss->lk = lk_session_info(c, ss->id, ss->client, ttl_ms, &remaining, NULL, 0, &n);
    gw__note_redis(rt, ss->lk);
    if (ss->lk != LK_OK) {
        *lk = ss->lk;
        snprintf(err, errlen, "%s", lk_errstr(c));
        return -1;
    }
    ss->lease_known = 1;
    return 0;
}

void gw__session_set_join(gw_rt *rt, lk_client *c, gw_session_set *ss, const char *owner,
                          const char *idem_key, lk_many *items, size_t n, char *err,
                          size_t errlen)
{
    lk_many back[LK_MANY_MAX];
    size_t m = 0;

    if (!ss->in) {
        return;
    }
    ss->lk = gw__fence_session_join(&rt->fence, c, ss->id, ss->client, owner, items, n,
                                    &ss->store);
    gw__note_redis(rt, ss->lk);
    if (ss->lk == LK_OK) {
        return;
    }
    snprintf(err, errlen, "%s", lk_errstr(c));
    /* Not recorded, so not ended with the session: each hold the grant added that was not
     * ended and fenced is given back (a replay added none). */
    for (size_t i = 0; i < n && m < LK_MANY_MAX; i++) {
        if (!items[i].undone && !items[i].res.replayed) {
            back[m++] = items[i];
        }
    }
    if (m > 0) {
        lk_undo_many(c, back, m, owner, idem_key != NULL && idem_key[0] != '\0' ? idem_key
                                                                                 : NULL);
    }
}
