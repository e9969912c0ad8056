/*
 * GET /locks/{resource}: the lock's status, never its owner.
 */
#include <stdio.h>
#include <stdlib.h>

#include "http/offload.h"
#include "http/respond.h"
#include "ops/lock_status.h"
#include "rt/redis_client.h"

/* A GET /locks/{resource} on the side pipeline (pipe.c): the status read runs on a side
 * thread, so a slow Redis delays this answer and no server thread. Freed at completion. */
struct gw_status_read {
    gw_job job;
    gw_rt *rt;
    const char *resource;       /* req->param: valid while the request lives */
    lk_status st;
    lk_lock_info info;
    char err[256];              /* lk_errstr() of the side thread's handle, "" for none */
};

static void status_work(gw_job *job)
{
    struct gw_status_read *sr = job->arg;
    lk_client *c = gw__client(sr->rt);

    sr->st = c != NULL ? lk_lock_status(c, sr->resource, &sr->info) : LK_ENOMEM;
    gw__note_redis(sr->rt, sr->st);
    if (sr->st != LK_OK && c != NULL) {
        snprintf(sr->err, sizeof sr->err, "%s", lk_errstr(c));
    }
}

static enum MHD_Result status_start(gw_request *req)
{
    enum MHD_Result result = MHD_YES;

    if (gw__path_resource(req, &result) != 0) {
        return result;
    }
    struct gw_status_read *sr = calloc(1, sizeof *sr);
    if (sr != NULL) {
        sr->rt = req->rt;
        sr->resource = req->param;
    }
    return gw__pipe_offload(req, req->rt->side, sr, sr != NULL ? &sr->job : NULL, status_work);
}

static enum MHD_Result status_resumed(gw_request *req)
{
    const struct gw_status_read *sr = req->op_state;
    const lk_lock_info *info = &sr->info;

    if (sr->st != LK_OK) {
        return gw__send_lk_error(req, sr->err[0] != '\0' ? sr->err : NULL, sr->st);
    }
    if (!info->locked) {
        return gw__send_json(req, MHD_HTTP_OK,
                             json_pack("{s:s, s:b, s:I}", "resource", req->param, "locked", 0,
                                       "last_token", (json_int_t)info->last_token));
    }
    /* Never the owner: it is the capability to release the lock. */
    return gw__send_json(req, MHD_HTTP_OK,
                         json_pack("{s:s, s:b, s:I, s:I, s:I, s:I, s:s, s:I}", "resource",
                                   req->param, "locked", 1, "token", (json_int_t)info->token,
                                   "holds", (json_int_t)info->holds, "ttl_ms",
                                   (json_int_t)info->ttl_ms, "last_token",
                                   (json_int_t)info->last_token, "mode",
                                   info->shared ? "shared" : "exclusive", "holders",
                                   (json_int_t)info->holders));
}

const gw_op gw__op_lock_status = {status_start, status_resumed, NULL};
