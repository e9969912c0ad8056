/*
 * A job for a pipeline (pipe.c): one call, who resumes what when it is answered. Types only,
 * so that the layers that make jobs and the one that answers them (fence.c's
 * gw__fence_answered) need not include each other.
 */
#ifndef GATEWAY_JOB_H
#define GATEWAY_JOB_H

#include "locklib/locklib.h"
#include "storage/storage.h"

#include "base/list.h"

/* The connection a job resumes (libmicrohttpd's; the fence never looks inside). */
struct MHD_Connection;

typedef struct gw_job gw_job;

/* One call for a pipeline: `call` for the Redis pipeline, `write` for the storage writer,
 * `work` for the side pipeline, all owned by the submitter, which keeps the job alive until
 * done has run (conn's request owns it: a suspended request cannot complete). */
struct gw_job {
    gw_qlink link;                  /* in the pipeline's queue */
    int glued;                      /* the next job in the queue goes in the same batch,
                                     * right after this one (gw__pipe_hold) */
    lk_call *call;                  /* in: the call; out: status, result and reason */
    store_write_req *write;         /* in: the write; out: its answer */
    store_grant_req *grant;         /* for the storage writer instead of write: a grant
                                     * (fence.c), answered in place */
    store_txn *txn;                 /* for the storage writer instead of write: a fenced
                                     * transaction (ops/transaction.c), answered in place */
    struct gw_verdict_req *verdict; /* for the store readers instead of work: the fence's
                                     * verdict on a write's token, answered in place */
    struct MHD_Connection *conn;    /* resumed after done, unless done returns 0 */
    /* On the pipeline thread, before the resume; may be NULL. Returns 1; 0 would mean it
     * handed the request on to someone who resumes it (then the job may be gone). */
    int (*done)(gw_job *job);
    /* For the side pipeline (gw__pipe_offload): a call that may block on Redis or the store,
     * made on a side thread (its own lk_client through gw__client()) and never on a server
     * thread. It leaves its outcome in its state (arg) for the operation's resumed. */
    void (*work)(gw_job *job);
    void *arg;                      /* for done and work */
    void *ctx;                      /* for done */
};

#endif
