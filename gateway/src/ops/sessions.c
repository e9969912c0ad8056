/*
 * Sessions: one lease for many locks (locklib's lk_session_*).
 *   POST   /sessions {"ttl_ms"}      201 {"session", "ttl_ms"}
 *   POST   /sessions/{id}/renew {}   200 {"ttl_ms", "locks", "renewed", "lost", "failed"}
 *   GET    /sessions/{id}            200 {"ttl_ms", "remaining_ms", "locks": [{"resource",
 *                                    "ttl_ms"}]}: never a token or an owner
 *   DELETE /sessions/{id}            200 {"locks", "released"} once every lock of it is
 *                                    released and fenced durably (core/session_fence.c)
 * A lock joins a session through POST /lock {"session"} (ops/session_lock.c).
 *
 * The session id is a capability, like an owner id: 128 random bits (lk_random_id, the
 * owners' generator), in no log line (the access log prints the route's template, not the
 * path), metric or listing. With --clients a session is bound to the client that created it:
 * to any other it is unknown (404 session_not_found, as for an id that never existed, so
 * that an id's existence is not revealed). Every call is a Redis call (and DELETE a store
 * commit), so each runs on a side thread (pipe.c), never a loop thread.
 *
 * The reaper: a tick of the first HTTP loop hands a pass to a side thread every
 * GW_SESSION_REAP_MS (one at a time), which asks Redis for sessions whose deadline passed
 * (lk_session_reap, which claims each for GW_SESSION_CLAIM_MS, so two gateways never end
 * one at once and a gateway killed while ending one is taken over once its claim runs out),
 * and ends each like DELETE does. Any gateway of the Redis reaps, so a session outlives the
 * gateway that created it by at most its lease plus one period plus the end's round trips.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/session_fence.h"
#include "http/offload.h"
#include "http/respond.h"
#include "ops/sessions.h"
#include "rt/log.h"
#include "rt/pipe.h"
#include "rt/redis_client.h"

#define GW_REAP_BATCH 16

/* One session call on the side pipeline. Freed at completion. */
struct gw_session_op {
    gw_job job;
    gw_rt *rt;
    gw_route_id route;
    char id[LK_SESSION_ID_LEN + 1];
    char client[LK_SESSION_CLIENT_MAX + 1];
    int64_t ttl_ms, remaining_ms;
    lk_status lk;
    char err[256];
    lk_session_renewal renewal;
    lk_session_lock *locks;                  /* GET: LK_SESSION_LOCKS_MAX entries */
    size_t n;
    gw_session_end end;                      /* DELETE */
};

const char *gw__session_client(const gw_request *req)
{
    return req->client != NULL && req->rt->cfg->clients_file[0] != '\0' ? req->client->name
                                                                         : "";
}

enum MHD_Result gw__session_not_found(gw_request *req)
{
    return gw__send_error(req, MHD_HTTP_NOT_FOUND, "session_not_found", NULL,
                          "no such session (it ended, expired, or was never created)");
}

enum MHD_Result gw__session_unavailable(gw_request *req)
{
    return gw__send_error(req, MHD_HTTP_BAD_REQUEST, "sessions_unavailable",
                          json_pack("{s:s}", "topology", "redlock"),
                          "sessions are not available on the redlock topology");
}

static int on_redlock(const gw_rt *rt)
{
    return strncmp(rt->cfg->redis_url, "redlock://", 10) == 0;
}

static void session_work(gw_job *job)
{
    struct gw_session_op *op = job->arg;
    lk_client *c = gw__client(op->rt);

    if (c == NULL) {
        op->lk = LK_ENOMEM;
        return;
    }
    switch (op->route) {
    case GW_R_SESSION_CREATE:
        op->lk = lk_session_create(c, op->ttl_ms, op->client, op->id);
        break;
    case GW_R_SESSION_RENEW:
        op->lk = lk_session_renew(c, op->id, op->client, &op->renewal);
        break;
    case GW_R_SESSION_GET:
        op->locks = calloc(LK_SESSION_LOCKS_MAX, sizeof *op->locks);
        op->lk = op->locks == NULL
                     ? LK_ENOMEM
                     : lk_session_info(c, op->id, op->client, &op->ttl_ms, &op->remaining_ms,
                                       op->locks, LK_SESSION_LOCKS_MAX, &op->n);
        break;
    default:
        gw__fence_session_end(&op->rt->fence, c, op->id, op->client, &op->end);
        op->lk = op->end.lk;
        snprintf(op->err, sizeof op->err, "%s", op->end.err);
        return;
    }
    gw__note_redis(op->rt, op->lk);
    if (op->lk >= LK_EINVAL) {
        snprintf(op->err, sizeof op->err, "%s", lk_errstr(c));
    }
}

/* The session id of the path: req->param, less "/renew" on the renew route. 0 when it is a
 * well-formed id (copied into id). */
static int path_session(const gw_request *req, char *id)
{
    size_t len = strcspn(req->param, "/");
    if (len != LK_SESSION_ID_LEN ||
        strcmp(req->param + len, req->route->id == GW_R_SESSION_RENEW ? "/renew" : "") != 0) {
        return -1;
    }
    memcpy(id, req->param, len);
    id[len] = '\0';
    return lk_valid_session(id) ? 0 : -1;
}

static enum MHD_Result session_start(gw_request *req)
{
    static const char *const create_fields[] = {"ttl_ms", NULL};
    static const char *const no_fields[] = {NULL};
    gw_route_id route = req->route->id;
    enum MHD_Result result = MHD_YES;
    json_t *root = NULL;
    int64_t ttl = -1;

    if (route == GW_R_SESSION_CREATE || route == GW_R_SESSION_RENEW) {
        if (gw__parse_object(req, &root, &result) != 0) {
            return result;
        }
        int bad = gw__fields_known(req, root, route == GW_R_SESSION_CREATE ? create_fields
                                                                            : no_fields,
                                   &result) != 0 ||
                  (route == GW_R_SESSION_CREATE &&
                   gw__field_int(req, root, "ttl_ms", -1, LK_LEASE_MIN_MS,
                                 req->rt->cfg->max_ttl_ms, &ttl, &result) != 0);
        json_decref(root);
        if (bad) {
            return result;
        }
        if (route == GW_R_SESSION_CREATE && ttl < 0) {
            return gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request",
                                  json_pack("{s:s}", "field", "ttl_ms"),
                                  "\"ttl_ms\" is required: the session's lease in ms");
        }
    }
    if (on_redlock(req->rt)) {
        return gw__session_unavailable(req);
    }
    struct gw_session_op *op = calloc(1, sizeof *op);
    if (op != NULL) {
        op->rt = req->rt;
        op->route = route;
        op->ttl_ms = ttl;
        snprintf(op->client, sizeof op->client, "%s", gw__session_client(req));
        if (route != GW_R_SESSION_CREATE && path_session(req, op->id) != 0) {
            free(op);
            return gw__session_not_found(req);
        }
    }
    return gw__pipe_offload(req, req->rt->side, op, op != NULL ? &op->job : NULL,
                            session_work);
}

static json_t *locks_json(const struct gw_session_op *op)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr != NULL && i < op->n; i++) {
        json_array_append_new(arr, json_pack("{s:s, s:I}", "resource", op->locks[i].resource,
                                             "ttl_ms", (json_int_t)op->locks[i].ttl_ms));
    }
    return arr;
}

static enum MHD_Result session_resumed(gw_request *req)
{
    struct gw_session_op *op = req->op_state;

    if (op->lk == LK_NOT_OWNER) {
        return gw__session_not_found(req);
    }
    switch (op->route) {
    case GW_R_SESSION_CREATE:
        if (op->lk != LK_OK) {
            break;
        }
        return gw__send_json(req, MHD_HTTP_CREATED, json_pack("{s:s, s:I}", "session", op->id,
                                                              "ttl_ms",
                                                              (json_int_t)op->ttl_ms));
    case GW_R_SESSION_RENEW:
        if (op->lk != LK_RENEWED) {
            break;
        }
        return gw__send_json(req, MHD_HTTP_OK,
                             json_pack("{s:I, s:I, s:I, s:I, s:I}", "ttl_ms",
                                       (json_int_t)op->renewal.ttl_ms, "locks",
                                       (json_int_t)op->renewal.locks, "renewed",
                                       (json_int_t)op->renewal.renewed, "lost",
                                       (json_int_t)op->renewal.lost, "failed",
                                       (json_int_t)op->renewal.failed));
    case GW_R_SESSION_GET:
        if (op->lk != LK_OK) {
            break;
        }
        return gw__send_json(req, MHD_HTTP_OK,
                             json_pack("{s:I, s:I, s:o}", "ttl_ms", (json_int_t)op->ttl_ms,
                                       "remaining_ms", (json_int_t)op->remaining_ms, "locks",
                                       locks_json(op)));
    default:
        if (op->lk == LK_RELEASED && op->end.store == STORE_OK) {
            atomic_fetch_add(&req->rt->metrics.sessions_ended[0], 1);
            return gw__send_json(req, MHD_HTTP_OK,
                                 json_pack("{s:I, s:I}", "locks", (json_int_t)op->end.locks,
                                           "released", (json_int_t)op->end.released));
        }
        if (op->lk == LK_RELEASED || (op->lk == LK_EUNAVAILABLE && op->end.locks > 0)) {
            /* Begun (the end script answered with the session's locks): the session takes
             * no renewal or lock any more; a retry of DELETE, or the reaper once the claim
             * ran out, finishes the fence. An EUNAVAILABLE with no lock listed is the end
             * script itself unanswered: whether it ran is unknown, so the plain 503 below
             * asks for the DELETE again, promising nothing. */
            return gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "backend_unavailable",
                                  json_pack("{s:b}", "ending", 1),
                                  "the session's end began, but %s; send DELETE again (or "
                                  "its end completes within %d ms on its own)",
                                  op->end.store != STORE_OK
                                      ? "storage could not record a fence"
                                      : "not every lock's Redis node answered",
                                  GW_SESSION_CLAIM_MS);
        }
        break;
    }
    return gw__send_lk_error(req, op->err[0] != '\0' ? op->err : NULL, op->lk);
}

static void session_completed(gw_request *req, enum MHD_RequestTerminationCode toe)
{
    struct gw_session_op *op = req->op_state;
    (void)toe;
    free(op->locks);
    free(op);
    req->op_state = NULL;
}

const gw_op gw__op_sessions = {session_start, session_resumed, session_completed};

/* ---- The reaper ---------------------------------------------------------------------- */

/* One reaper per process: a tick on the first HTTP loop (gw__loops_every, through the
 * server's chore) hands a pass to a side thread unless the last one is still running. */
static struct {
    gw_job job;
    atomic_int busy; /* a pass is queued or running */
    atomic_int stop;
} reaper;

/* One pass: claims the expired sessions and ends each. Returns how many it claimed. */
static size_t reap_once(gw_rt *rt)
{
    char ids[GW_REAP_BATCH][LK_SESSION_ID_LEN + 1];
    size_t n = 0;
    lk_client *c = gw__client(rt);

    if (c == NULL || lk_session_reap(c, GW_SESSION_CLAIM_MS, ids, GW_REAP_BATCH, &n) != LK_OK) {
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        gw_session_end end;
        gw__fence_session_end(&rt->fence, c, ids[i], NULL, &end);
        if (end.lk == LK_RELEASED && end.store == STORE_OK) {
            atomic_fetch_add(&rt->metrics.sessions_ended[1], 1);
        } else if (end.lk != LK_NOT_OWNER) {
            /* Never the id: it is a capability. */
            gw__log_event(rt->cfg, "warn",
                          "an expired session's end is incomplete (%s%s%s); it is retried "
                          "in %d ms", lk_status_name(end.lk),
                          end.store != STORE_OK ? ", store: " : "",
                          end.store != STORE_OK ? store_status_name(end.store) : "",
                          GW_SESSION_CLAIM_MS);
        }
    }
    return n;
}

/* On a side thread: passes until fewer than a batch were due (or the gateway stops). */
static void reap_work(gw_job *job)
{
    gw_rt *rt = job->arg;
    while (reap_once(rt) == GW_REAP_BATCH && !atomic_load(&reaper.stop)) {
    }
}

static int reap_done(gw_job *job)
{
    (void)job;
    atomic_store(&reaper.busy, 0);
    return 0; /* no connection to resume */
}

/* On the first loop, every GW_SESSION_REAP_MS: never waits on Redis itself. */
void gw__session_reap_tick(void *arg)
{
    gw_rt *rt = arg;
    if (atomic_load(&reaper.stop) || atomic_exchange(&reaper.busy, 1)) {
        return;
    }
    memset(&reaper.job, 0, sizeof reaper.job);
    reaper.job.work = reap_work;
    reaper.job.done = reap_done;
    reaper.job.arg = rt;
    gw__pipe_submit(rt->side, &reaper.job);
}

int gw__session_reaper_start(const gw_rt *rt)
{
    if (on_redlock(rt)) {
        return 0; /* no sessions there */
    }
    atomic_store(&reaper.stop, 0);
    atomic_store(&reaper.busy, 0);
    return 1;
}

void gw__session_reaper_stop(void)
{
    atomic_store(&reaper.stop, 1);
}
