/*
 * POST /unlock and POST /renew with "resources": one release or renewal per resource of the
 * set, all queued on the Redis pipeline back to back (so usually one batch, one round trip,
 * as lk_release_many and lk_renew_many send them), waiting on no thread. These
 * act per resource, not all or none: a resource the owner does not hold (its lease ran out)
 * cannot be undone into being held. So the answer says what happened to each:
 *   200 {"locks": [{"resource", "released", "holds"}]}            /unlock, every one held;
 *   200 {"ttl_ms", "locks": [{"resource", "token"}]}              /renew, every one held;
 *   409 not_owner {"resources": [not held], "locks": [the others, done as above]}.
 * An Idempotency-Key replays each resource's first answer, as for one resource.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/args_set.h"
#include "http/respond.h"
#include "ops/lock_set.h"
#include "rt/pipe.h"

/* A call of the set in the Redis pipeline. */
typedef struct set_job {
    gw_job job;
    lk_call call;
} set_job;

struct gw_owner_set {
    gw_rt *rt;
    json_t *root;                        /* the body: the names point into it */
    gw_set_args s;
    gw_set_kind kind;
    atomic_int pending;                  /* calls not answered yet */
    lk_status st;
    char err[256];
    lk_many items[LK_MANY_MAX];
    set_job *jobs;                       /* s.n of them */
};

/* gw_job.done of each call, on the pipeline thread: the last one answered resumes the
 * request (the others return 0: nothing to resume yet). */
static int set_job_done(gw_job *job)
{
    struct gw_owner_set *os = job->arg;
    return atomic_fetch_sub(&os->pending, 1) == 1;
}

/* Every call of the set, in one batch of the Redis pipeline, the connection suspended. */
static enum MHD_Result send_set(gw_request *req, struct gw_owner_set *os)
{
    os->jobs = calloc(os->s.n, sizeof *os->jobs);
    if (os->jobs == NULL) {
        return MHD_NO;
    }
    atomic_store(&os->pending, (int)os->s.n);
    for (size_t i = 0; i < os->s.n; i++) {
        set_job *j = &os->jobs[i];
        j->call.kind = os->kind == GW_SET_RENEW ? LK_CALL_RENEW : LK_CALL_RELEASE;
        j->call.resource = os->s.names[i];
        j->call.owner = os->s.a.owner;
        j->call.idem_key = os->s.a.idem_key;
        j->call.lease_ms = os->s.a.ttl_ms;
        j->job.call = &j->call;
        j->job.conn = req->conn;
        j->job.done = set_job_done;
        j->job.arg = os;
    }
    MHD_suspend_connection(req->conn);
    /* Queued back to back: the pipeline takes what is queued as one batch. */
    for (size_t i = 0; i < os->s.n; i++) {
        gw__pipe_submit(req->rt->pipe, &os->jobs[i].job);
    }
    return MHD_YES;
}

/* The calls' outcomes into the items; st the first error, as lk_release_many answers. */
static void collect(struct gw_owner_set *os)
{
    os->st = LK_OK;
    for (size_t i = 0; i < os->s.n; i++) {
        const lk_call *call = &os->jobs[i].call;
        os->items[i].status = call->status;
        os->items[i].res = call->res;
        if (call->status >= LK_EINVAL && os->st == LK_OK) {
            os->st = call->status;
            snprintf(os->err, sizeof os->err, "%.40s: %.200s", call->resource, call->err);
        }
    }
    gw__note_redis(os->rt, os->st);
}

static enum MHD_Result owner_set_start(gw_request *req, gw_set_kind kind)
{
    struct gw_owner_set *os = calloc(1, sizeof *os);
    enum MHD_Result result = MHD_YES;
    gw_metrics *m = &req->rt->metrics;

    if (os == NULL) {
        return MHD_NO;
    }
    req->op_state = os; /* freed at completion, whatever happens next */
    os->rt = req->rt;
    os->kind = kind;
    if (gw__parse_object(req, &os->root, &result) != 0 ||
        gw__set_args(req, os->root, kind, &os->s, &result) != 0) {
        if (kind == GW_SET_RENEW) {
            atomic_fetch_add(&m->renew[GW_REN_invalid], 1);
        } else {
            atomic_fetch_add(&m->release[GW_REL_invalid], 1);
        }
        return result;
    }
    for (size_t i = 0; i < os->s.n; i++) {
        os->items[i].resource = os->s.names[i];
    }
    return send_set(req, os);
}

static enum MHD_Result owner_set_answered(gw_request *req)
{
    struct gw_owner_set *os = req->op_state;
    gw_metrics *m = &req->rt->metrics;
    int renew = os->kind == GW_SET_RENEW;

    collect(os);
    if (os->st != LK_OK) {
        if (renew) {
            atomic_fetch_add(&m->renew[os->st == LK_EUNAVAILABLE ? GW_REN_unavailable
                                                                 : GW_REN_error], 1);
        } else {
            atomic_fetch_add(&m->release[os->st == LK_EUNAVAILABLE ? GW_REL_unavailable
                                                                   : GW_REL_error], 1);
        }
        return gw__send_lk_error(req, os->err, os->st);
    }
    json_t *locks = json_array(), *not_held = json_array();
    int64_t ttl = 0;
    for (size_t i = 0; i < os->s.n; i++) {
        const lk_many *it = &os->items[i];
        if (it->status == LK_NOT_OWNER) {
            json_array_append_new(not_held, json_string(it->resource));
        } else if (renew) {
            json_array_append_new(locks, json_pack("{s:s, s:I}", "resource", it->resource,
                                                   "token", (json_int_t)it->res.token));
            ttl = it->res.ttl_ms > 0 ? it->res.ttl_ms : os->s.a.ttl_ms;
        } else {
            int released = it->status == LK_RELEASED;
            if (released && !it->res.replayed) {
                atomic_fetch_sub(&m->locks_held, 1);
            }
            json_array_append_new(locks, json_pack("{s:s, s:b, s:I}", "resource", it->resource,
                                                   "released", released, "holds",
                                                   (json_int_t)(released ? 0 : it->res.holds)));
        }
    }
    size_t missing = json_array_size(not_held);
    if (renew) {
        atomic_fetch_add(&m->renew[missing ? GW_REN_not_owner : GW_REN_renewed], 1);
    } else {
        atomic_fetch_add(&m->release[missing ? GW_REL_not_owner : GW_REL_released], 1);
    }
    if (missing > 0) {
        const char *first = json_string_value(json_array_get(not_held, 0));
        return gw__send_error(req, MHD_HTTP_CONFLICT, "not_owner",
                              json_pack("{s:o, s:o}", "resources", not_held, "locks", locks),
                              "this owner does not hold %s%s (its lease ran out, or it was "
                              "released or never taken); the others of the set were %s",
                              first, missing > 1 ? " and others" : "",
                              renew ? "renewed" : "released");
    }
    json_decref(not_held);
    if (renew) {
        return gw__send_json(req, MHD_HTTP_OK,
                             json_pack("{s:I, s:o}", "ttl_ms", (json_int_t)ttl, "locks", locks));
    }
    return gw__send_json(req, MHD_HTTP_OK, json_pack("{s:o}", "locks", locks));
}

static void owner_set_completed(gw_request *req, enum MHD_RequestTerminationCode toe)
{
    struct gw_owner_set *os = req->op_state;
    (void)toe;
    json_decref(os->root);
    free(os->jobs);
    free(os);
    req->op_state = NULL;
}

static enum MHD_Result unlock_set_start(gw_request *req)
{
    return owner_set_start(req, GW_SET_UNLOCK);
}

static enum MHD_Result renew_set_start(gw_request *req)
{
    return owner_set_start(req, GW_SET_RENEW);
}

const gw_op gw__op_unlock_set = {unlock_set_start, owner_set_answered, owner_set_completed};
const gw_op gw__op_renew_set = {renew_set_start, owner_set_answered, owner_set_completed};
