/*
 * An operation whose one call may block (a Redis probe or status read, a store read) runs
 * that call on a side pipeline (rt/pipe.c) and answers when it is resumed.
 */
#include "http/offload.h"
#include "http/respond.h"

enum MHD_Result gw__pipe_offload(gw_request *req, gw_pipe *p, void *state, gw_job *job,
                                 void (*work)(gw_job *job))
{
    if (state == NULL) {
        return gw__send_error(req, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error", NULL,
                              "out of memory");
    }
    req->op_state = state; /* freed when the request completes (request.h, gw_op) */
    job->work = work;
    job->arg = state;
    job->conn = req->conn;
    MHD_suspend_connection(req->conn);
    gw__pipe_submit(p, job);
    return MHD_YES;
}
