/*
 * POST /unlock and POST /renew with "resources": one release or renewal per resource of the
 * set, all in one Redis pipeline (lk_release_many, lk_renew_many) on a side thread. These
 * act per resource, not all or none: a resource the owner does not hold (its lease ran out)
 * cannot be undone into being held. So the answer says what happened to each:
 *   200 {"locks": [{"resource", "released", "holds"}]}            /unlock, every one held;
 *   200 {"ttl_ms", "locks": [{"resource", "token"}]}              /renew, every one held;
 *   409 not_owner {"resources": [not held], "locks": [the others, done as above]}.
 * An Idempotency-Key replays each resource's first answer, as for one resource.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/args_set.h"
#include "http/offload.h"
#include "http/respond.h"
#include "ops/lock_set.h"
#include "rt/redis_client.h"

struct gw_owner_set {
    gw_job job;
    gw_server *srv;
    json_t *root;                        /* the body: the names point into it */
    gw_set_args s;
    gw_set_kind kind;
    lk_status st;
    char err[256];
    lk_many items[LK_MANY_MAX];
};

static void owner_set_work(gw_job *job)
{
    struct gw_owner_set *os = job->arg;
    lk_client *c = gw__client(os->srv);

    if (c == NULL) {
        os->st = LK_ENOMEM;
        snprintf(os->err, sizeof os->err, "out of memory");
        return;
    }
    os->st = os->kind == GW_SET_RENEW
                 ? lk_renew_many(c, os->items, os->s.n, os->s.a.owner, os->s.a.ttl_ms,
                                 os->s.a.idem_key)
                 : lk_release_many(c, os->items, os->s.n, os->s.a.owner, os->s.a.idem_key);
    if (os->st != LK_OK) {
        snprintf(os->err, sizeof os->err, "%s", lk_errstr(c));
    }
    gw__note_redis(os->srv, os->st);
}

static enum MHD_Result owner_set_start(gw_request *req, gw_set_kind kind)
{
    struct gw_owner_set *os = calloc(1, sizeof *os);
    enum MHD_Result result = MHD_YES;
    gw_metrics *m = &req->srv->metrics;

    if (os == NULL) {
        return MHD_NO;
    }
    req->op_state = os; /* freed at completion, whatever happens next */
    os->srv = req->srv;
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
    return gw__pipe_offload(req, req->srv->side, os, &os->job, owner_set_work);
}

static enum MHD_Result owner_set_answered(gw_request *req)
{
    struct gw_owner_set *os = req->op_state;
    gw_metrics *m = &req->srv->metrics;
    int renew = os->kind == GW_SET_RENEW;

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
