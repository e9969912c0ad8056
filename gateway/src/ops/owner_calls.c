/*
 * POST /unlock and POST /renew: the same input ({"resource", "owner"}, ttl_ms when renewing,
 * the Idempotency-Key header), the same errors. The operation has one stage: start parses
 * the body and sends the call to the Redis pipeline (pipe.c) with the connection suspended;
 * resumed answers; completed frees the call.
 *
 * A 503 means the outcome is unknown (Redis did not answer in time, or the connection
 * dropped after the script was sent): the hold may or may not have been released or renewed.
 * A retry with the same Idempotency-Key replays the first answer instead of acting twice.
 */
#include <stdlib.h>
#include <string.h>

#include "http/args.h"
#include "http/respond.h"
#include "ops/lock_attempt.h"
#include "ops/lock_set.h"
#include "ops/owner_calls.h"
#include "rt/pipe.h"
#include "rt/waiters.h"

/* An /unlock or /renew in the pipeline: its parsed body (the names point into it) and its
 * call. Freed at request completion. */
struct gw_owner_call {
    json_t *root;
    gw_lock_args a;
    int renew;
    lk_call call;
    gw_job job;
};

static void owner_call_completed(gw_request *req, enum MHD_RequestTerminationCode toe)
{
    struct gw_owner_call *oc = req->op_state;
    (void)toe;
    json_decref(oc->root);
    free(oc);
    req->op_state = NULL;
}

/* The release of a hand-off is answered, on the pipeline thread (waiters.c, "Hand-offs"),
 * before the attempt sent behind it: a token it minted for a waiter is counted while that
 * attempt still holds the stripe (gw__lock_handoff). */
static int handoff_release_done(gw_job *job)
{
    const struct gw_owner_call *oc = job->arg;
    gw_rt *rt = job->ctx;
    if (oc->call.status == LK_RELEASED && oc->call.res.handed_token > 0) {
        gw__fence_count(&rt->fence, oc->call.res.handed_token);
    }
    gw__wait_handoff_settled(rt->waitq, oc->a.resource,
                             oc->call.status == LK_RELEASED ? oc->call.res.published : 0);
    return 1;
}

/* Reads {"resource", "owner"} (both required), ttl_ms when renewing, and the
 * Idempotency-Key, then sends lk_renew (renew) or lk_release to the pipeline with the
 * connection suspended. Returns 0, or -1 after queuing the 400 (or, without memory, with
 * *result MHD_NO). */
static int send_owner_call(gw_request *req, int renew, enum MHD_Result *result)
{
    struct gw_owner_call *oc = calloc(1, sizeof *oc);
    if (oc == NULL) {
        *result = MHD_NO; /* MHD closes the connection */
        return -1;
    }
    req->op_state = oc; /* freed at completion, whatever happens next */
    oc->renew = renew;
    if (gw__parse_object(req, &oc->root, result) != 0 ||
        gw__owner_args(req, oc->root, renew, &oc->a, result) != 0) {
        return -1;
    }
    oc->call.kind = renew ? LK_CALL_RENEW : LK_CALL_RELEASE;
    oc->call.resource = oc->a.resource;
    oc->call.owner = oc->a.owner;
    oc->call.idem_key = oc->a.idem_key;
    oc->call.lease_ms = oc->a.ttl_ms;
    oc->job.call = &oc->call;
    oc->job.conn = req->conn;
    MHD_suspend_connection(req->conn);
    if (renew) {
        gw__pipe_submit(req->rt->pipe, &oc->job);
    } else {
        /* A waiter parked here is handed the lock in the same batch, and the release grants
         * it in its script (lock_attempt.c, "Hand-offs"). */
        gw__pipe_hold(req->rt->pipe);
        gw__pipe_submit(req->rt->pipe, &oc->job);
        if (gw__lock_handoff(req->rt, oc->a.resource, &oc->call)) {
            oc->job.done = handoff_release_done;
            oc->job.arg = oc;
            oc->job.ctx = req->rt;
        }
        gw__pipe_flush(req->rt->pipe);
    }
    *result = MHD_YES;
    return 0;
}

/* 409 not_owner, saying what the gateway can know: whether someone else holds the lock now
 * (other_holds, from the script) or nobody does. */
static enum MHD_Result not_owner(gw_request *req, const char *resource, int other_holds)
{
    return gw__send_error(req, MHD_HTTP_CONFLICT, "not_owner",
                          json_pack("{s:s}", "resource", resource),
                          other_holds ? "this owner does not hold %s: another owner holds it "
                                        "now (this owner's lease ran out or it was released)"
                                      : "this owner does not hold %s: nobody holds it (it was "
                                        "already released, perhaps by an earlier unlock, or "
                                        "its lease ran out)",
                          resource);
}

static gw_release_outcome release_outcome(lk_status st, const lk_result *res)
{
    if ((st == LK_RELEASED || st == LK_STILL_HELD) && res->replayed) {
        return GW_REL_replayed;
    }
    switch (st) {
    case LK_RELEASED: return GW_REL_released;
    case LK_STILL_HELD: return GW_REL_still_held;
    case LK_NOT_OWNER: return GW_REL_not_owner;
    case LK_EUNAVAILABLE: return GW_REL_unavailable;
    case LK_EIDEMPOTENCY: return GW_REL_idempotency_conflict;
    case LK_EINVAL: return GW_REL_invalid;
    default: return GW_REL_error;
    }
}

static gw_renew_outcome renew_outcome(lk_status st, const lk_result *res)
{
    switch (st) {
    case LK_RENEWED: return res->replayed ? GW_REN_replayed : GW_REN_renewed;
    case LK_NOT_OWNER: return GW_REN_not_owner;
    case LK_EUNAVAILABLE: return GW_REN_unavailable;
    case LK_EIDEMPOTENCY: return GW_REN_idempotency_conflict;
    case LK_EINVAL: return GW_REN_invalid;
    default: return GW_REN_error;
    }
}

/* The 200 answers: {"resource", "released", "holds"} for /unlock and
 * {"resource", "token", "ttl_ms"} for /renew. */
static enum MHD_Result answer_owner_call(gw_request *req, const gw_lock_args *a, int renew,
                                         lk_status st, const lk_result *res)
{
    if (renew) {
        return gw__send_json(req, MHD_HTTP_OK,
                             json_pack("{s:s, s:I, s:I}", "resource", a->resource, "token",
                                       (json_int_t)res->token, "ttl_ms",
                                       /* a replay reports the lease first granted */
                                       (json_int_t)(res->ttl_ms > 0 ? res->ttl_ms : a->ttl_ms)));
    }
    int released = st == LK_RELEASED;
    if (released && !res->replayed) {
        atomic_fetch_sub(&req->rt->metrics.locks_held, 1);
    }
    return gw__send_json(req, MHD_HTTP_OK,
                         json_pack("{s:s, s:b, s:I}", "resource", a->resource, "released",
                                   released, "holds", (json_int_t)(released ? 0 : res->holds)));
}

/* start: parses and sends the call. Counts a refused one as invalid. */
static enum MHD_Result owner_call_begin(gw_request *req, int renew)
{
    gw_metrics *m = &req->rt->metrics;
    enum MHD_Result result = MHD_YES;

    if (send_owner_call(req, renew, &result) != 0) {
        if (renew) {
            atomic_fetch_add(&m->renew[GW_REN_invalid], 1);
        } else {
            atomic_fetch_add(&m->release[GW_REL_invalid], 1);
        }
    }
    return result;
}

/* resumed: the pipeline answered the call. */
static enum MHD_Result owner_call_answered(gw_request *req)
{
    gw_metrics *m = &req->rt->metrics;
    struct gw_owner_call *oc = req->op_state;
    int renew = oc->renew;
    lk_status st = oc->call.status;
    const lk_result *res = &oc->call.res;

    gw__note_redis(req->rt, st);
    if (renew) {
        atomic_fetch_add(&m->renew[renew_outcome(st, res)], 1);
    } else {
        atomic_fetch_add(&m->release[release_outcome(st, res)], 1);
    }
    if (st == LK_RENEWED || st == LK_RELEASED || st == LK_STILL_HELD) {
        return answer_owner_call(req, &oc->a, renew, st, res);
    }
    if (st == LK_NOT_OWNER) {
        return not_owner(req, oc->a.resource, res->holds > 0);
    }
    return gw__send_lk_error(req, oc->call.err, st);
}

static enum MHD_Result unlock_start(gw_request *req)
{
    /* "resources": ops/owner_set.c */
    return gw__set_body(req) ? gw__set_start(req, GW_SET_UNLOCK) : owner_call_begin(req, 0);
}

static enum MHD_Result renew_start(gw_request *req)
{
    return gw__set_body(req) ? gw__set_start(req, GW_SET_RENEW) : owner_call_begin(req, 1);
}

const gw_op gw__op_unlock = {unlock_start, owner_call_answered, owner_call_completed};
const gw_op gw__op_renew = {renew_start, owner_call_answered, owner_call_completed};
