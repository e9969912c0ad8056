/*
 * Pipelines (pipe.c): the Redis pipeline, the storage writer, the side pipelines and the set
 * pipeline. An operation suspends its connection and submits a job; a pipeline thread runs it
 * in a batch and resumes the connection.
 */
#ifndef GATEWAY_PIPE_H
#define GATEWAY_PIPE_H

#include <microhttpd.h>

#include "locklib/locklib.h"
#include "storage/storage.h"

#include "core/job.h"

struct gw_rt;

/* Redis pipeline threads, each with its own connection and one batch in flight. */
#define GW_PIPE_THREADS 2
/* Threads of each side pipeline (calls that may block): two, so that one call waiting out
 * a timeout does not hold up every other call of its kind. */
#define GW_SIDE_THREADS 2
/* The most threads of the set pipeline (rt->sets: multi-resource /locks, each blocking on
 * its stripes and one Redis round trip): enough for their round trips to share fsyncs. It
 * keeps one thread, starts more while set attempts queue up with none free, and each extra
 * thread stops after GW_PIPE_IDLE_MS without a job, so a gateway that serves no sets keeps
 * neither the threads nor their Redis connections. Those connections, one each opened on
 * first use, fit in the descriptor reserve of main.c's fit_fd_limit (88 with 4 loops on one
 * Redis, 25 measured without these 8). */
#define GW_SET_THREADS 8
#define GW_PIPE_IDLE_MS 5000
#if GW_SET_THREADS < GW_PIPE_THREADS || GW_SET_THREADS < GW_SIDE_THREADS
#error "gw_pipe.slot is sized by GW_SET_THREADS, the most threads of any pipeline"
#endif

typedef struct gw_pipe gw_pipe;

/* Starts the Redis pipeline (rt->pipe; Redis may be down: each batch reconnects), the
 * storage writer (rt->writer), the side pipelines (rt->side, rt->reads) and the set
 * pipeline (rt->sets, one thread until set attempts queue up). Returns 0 or -1 with err,
 * with none of them running. */
int gw__pipes_start(struct gw_rt *rt, char *err, size_t errlen);
/* Stops every pipeline gw__pipes_start() started (gw__pipe_stop() on each). */
void gw__pipes_stop(struct gw_rt *rt);
/* Queues a job. The caller has suspended job->conn first. Never blocks on Redis or disk; on
 * the set pipeline it may start a thread (and join a retired one first: pipe.c, grow()). */
void gw__pipe_submit(gw_pipe *p, gw_job *job);
/* Between these two, the jobs this thread submits to p are held back, then queued together
 * by gw__pipe_flush() so that one batch carries them all, in order, on one connection: an
 * /unlock's release and the attempt of the waiter it hands the lock to (owner_calls.c), so
 * that Redis runs both in one pass of its event loop (one fsync). Not nested; at most
 * GW_PIPE_HOLD_MAX jobs (more are queued as usual). */
#define GW_PIPE_HOLD_MAX 2
void gw__pipe_hold(gw_pipe *p);
void gw__pipe_flush(gw_pipe *p);
/* Runs every queued job, then stops the threads. Only after every request has completed. */
void gw__pipe_stop(gw_pipe *p);

#endif
