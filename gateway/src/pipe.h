/*
 * Pipelines (pipe.c): the Redis pipeline and the storage writer. An operation suspends its
 * connection and submits a job; a pipeline thread runs it in a batch and resumes the
 * connection.
 */
#ifndef GATEWAY_PIPE_H
#define GATEWAY_PIPE_H

#include <microhttpd.h>

#include "locklib/locklib.h"
#include "storage/storage.h"

#include "job.h"

struct gw_server;

/* Redis pipeline threads, each with its own connection and one batch in flight. */
#define GW_PIPE_THREADS 2

typedef struct gw_pipe gw_pipe;

/* Starts the Redis pipeline (srv->pipe; Redis may be down: each batch reconnects) and the
 * storage writer (srv->writer). Returns 0 or -1 with err. */
int gw__pipes_start(struct gw_server *srv, char *err, size_t errlen);
/* Queues a job. The caller has suspended job->conn first. Never blocks on Redis or disk. */
void gw__pipe_submit(gw_pipe *p, gw_job *job);
/* Runs every queued job, then stops the threads. Only after every request has completed. */
void gw__pipe_stop(gw_pipe *p);

#endif
