/*
 * Handing an operation's one blocking call to a side pipeline (offload.c): the request side
 * of the pipelines (rt/pipe.h), which know nothing of requests.
 */
#ifndef GATEWAY_OFFLOAD_H
#define GATEWAY_OFFLOAD_H

#include <microhttpd.h>

#include "core/job.h"
#include "http/request.h"
#include "rt/pipe.h"

/* Starts an operation whose one call may block, on side pipeline p (rt->side or
 * rt->reads). state is the operation's state, calloc'd by the caller, with job inside it;
 * NULL when that failed (the answer is then 500 and MHD_NO or MHD_YES as gw__send_error
 * says). Otherwise state becomes req->op_state (the operation's completed frees it), the
 * connection is suspended, and work(job) runs on a side thread with job->arg = state before
 * the connection is resumed and the operation's resumed answers. */
enum MHD_Result gw__pipe_offload(gw_request *req, gw_pipe *p, void *state, gw_job *job,
                                 void (*work)(gw_job *job));

#endif
