/*
 * Pipelines: the Redis pipeline and the storage writer. A request's operation suspends its
 * connection and submits a job; a pipeline thread takes whatever jobs are queued, runs them
 * as one batch, runs each job's completion, and resumes each connection; the request's
 * operation then runs again and answers.
 *
 * The Redis pipeline runs the acquires, releases, renewals and token checks that the HTTP
 * loops do not send themselves (below, "The Redis calls of a loop's own": on a single
 * Redis or Sentinel a loop sends its own once its connection is ready): GW_PIPE_THREADS
 * threads, each with its own connection, send each batch as one pipeline (lk_call_many()). Under appendfsync always Redis fsyncs once per pass of its
 * event loop, so its throughput comes from commands in flight; server threads that each
 * waited for one reply kept at most one command each in flight. Here a batch carries every
 * request waiting, no server thread sleeps on Redis, and with two threads one batch is sent
 * while the other waits for its fsync.
 *
 * The storage writer runs every token-checked write: one thread hands each batch to
 * store_write_many(), which commits it with one fsync. Server threads that each waited in
 * store_write() filled a group commit with at most one write each. On a shared store it also
 * runs the ledger's grants of fresh tokens (fence.c hands an answered acquisition on to it),
 * committed with the batch's writes in one transaction (store_grant_many).
 *
 * Two side pipelines run the calls that may block and are neither of those: srv->side the
 * Redis calls (a /readyz or /metrics PING, a GET /locks status read), srv->reads the store
 * reads (a GET /resources value, /readyz's probe read: a network round trip on PostgreSQL;
 * /readyz goes to one, then the other). Each job's work runs on a side thread, with that
 * thread's own lk_client. On a server thread such a call held every connection of the
 * thread until Redis or PostgreSQL answered or timed out (2 s for Redis, 5 s for
 * PostgreSQL): a client polling /metrics during a Redis stall could hold up the lock
 * traffic of every connection sharing its thread. Now a stall delays only the calls queued
 * behind it on its own side pipeline: a stalled Redis does not delay value reads, nor a
 * stalled store Redis probes. What still runs on a server thread is listed in request.h.
 *
 * Failures: a Redis batch whose connection fails answers each job EUNAVAILABLE
 * (lk_call_many: the outcome of each is unknown) and the next batch reconnects; while the
 * breaker (lk_breaker, shared with the server threads' clients) is open, every job fails
 * fast. A failed commit answers every write of it with the error, and nothing of it is
 * acknowledged (storage.h). A job is always completed, so no connection stays suspended: at
 * shutdown the threads drain their queue before they exit, and the server stops them only
 * after every request has completed.
 */
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "pipe.h"
#include "request.h"
#include "respond.h"
#include "util.h"

/* The most jobs in one batch: bounds a batch's memory and the wait of its last job. */
#define GW_PIPE_BATCH 256

/* A queue of jobs: a pipeline's (under its lock) or a loop's own (pipe_loop). */
typedef struct job_queue {
    gw_job *head, *tail;
} job_queue;

/* A kind of pipeline: what each thread keeps, and how it runs a batch. */
typedef struct pipe_kind {
    int metric;                          /* index in gw_metrics.pipe_batches */
    size_t max_batch;                    /* the most jobs a thread takes at once */
    void *(*open)(gw_server *srv);
    void (*close)(void *state);
    void (*run)(gw_server *srv, void *state, gw_job **jobs, size_t n);
} pipe_kind;

struct gw_pipe {
    gw_server *srv;
    const pipe_kind *kind;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job_queue q;
    int stopping;
    int started;
    pthread_t threads[GW_PIPE_THREADS > GW_SIDE_THREADS ? GW_PIPE_THREADS : GW_SIDE_THREADS];
};

/* Jobs this thread holds back for one pipeline (gw__pipe_hold). */
static _Thread_local struct {
    gw_pipe *p;
    size_t n;
    gw_job *jobs[GW_PIPE_HOLD_MAX];
} held;

/* Appends jobs[0..n) in order, each but the last glued to the next. */
static void queue_push(job_queue *q, gw_job *const *jobs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        gw_job *job = jobs[i];
        job->next = NULL;
        job->glued = i + 1 < n;
        if (q->tail != NULL) {
            q->tail->next = job;
        } else {
            q->head = job;
        }
        q->tail = job;
    }
}

/* Appends the jobs of from, glue as it was, and empties from. */
static void queue_move(job_queue *q, job_queue *from)
{
    if (from->head == NULL) {
        return;
    }
    if (q->tail != NULL) {
        q->tail->next = from->head;
    } else {
        q->head = from->head;
    }
    q->tail = from->tail;
    from->head = from->tail = NULL;
}

/* Takes up to max jobs, never parting a job from the one glued to it (a glued pair that
 * does not fit waits for the next batch, unless it would be alone). */
static size_t queue_take(job_queue *q, gw_job **batch, size_t max)
{
    size_t n = 0;
    while (q->head != NULL && n < max) {
        size_t span = 1;
        for (const gw_job *j = q->head; j->glued && j->next != NULL; j = j->next) {
            span++;
        }
        if (n > 0 && n + span > max) {
            break;
        }
        batch[n++] = q->head;
        q->head = q->head->next;
    }
    if (q->head == NULL) {
        q->tail = NULL;
    }
    return n;
}

/* Queues jobs[0..n) in order, under one lock; each but the last glued to the next. */
static void enqueue(gw_pipe *p, gw_job *const *jobs, size_t n)
{
    pthread_mutex_lock(&p->mu);
    queue_push(&p->q, jobs, n);
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

/* Queues the jobs of from, glue as it was. */
static void enqueue_queue(gw_pipe *p, job_queue *from)
{
    pthread_mutex_lock(&p->mu);
    queue_move(&p->q, from);
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

static int loop_takes(const gw_pipe *p);
static void loop_queue(gw_job *const *jobs, size_t n);

void gw__pipe_submit(gw_pipe *p, gw_job *job)
{
    if (held.p == p && held.n < GW_PIPE_HOLD_MAX) {
        held.jobs[held.n++] = job;
        return;
    }
    if (loop_takes(p)) {
        loop_queue(&job, 1);
        return;
    }
    enqueue(p, &job, 1);
}

void gw__pipe_hold(gw_pipe *p)
{
    held.p = p;
    held.n = 0;
}

void gw__pipe_flush(gw_pipe *p)
{
    size_t n = held.n;
    held.p = NULL;
    held.n = 0;
    if (n > 0 && loop_takes(p)) {
        loop_queue(held.jobs, n);
    } else if (n > 0) {
        enqueue(p, held.jobs, n);
    }
}

/* Takes up to the kind's max_batch jobs (queue_take); 0 when stopping and nothing is
 * left. */
static size_t take_batch(gw_pipe *p, gw_job **batch)
{
    pthread_mutex_lock(&p->mu);
    while (p->q.head == NULL && !p->stopping) {
        pthread_cond_wait(&p->cv, &p->mu);
    }
    size_t n = queue_take(&p->q, batch, p->kind->max_batch);
    pthread_mutex_unlock(&p->mu);
    return n;
}

/* After a batch: each job's done(), then the resume of its connection. */
static void complete_jobs(gw_server *srv, gw_job *const *jobs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        /* Read before done(): once resumed, or handed on, the request may complete and free
         * the job. */
        struct MHD_Connection *conn = jobs[i]->conn;
        int resume = jobs[i]->done != NULL ? jobs[i]->done(jobs[i]) : 1;
        if (resume && conn != NULL) {
            gw__loops_resume(srv->loops, conn);
        }
    }
}

static void *pipe_main(void *arg)
{
    gw_pipe *p = arg;
    gw_job *batch[GW_PIPE_BATCH];
    void *state = p->kind->open(p->srv);
    size_t n;

    while ((n = take_batch(p, batch)) > 0) {
        if (state == NULL) {
            state = p->kind->open(p->srv); /* out of memory last time: try again */
        }
        atomic_fetch_add(&p->srv->metrics.pipe_batches[p->kind->metric], 1);
        atomic_fetch_add(&p->srv->metrics.pipe_jobs[p->kind->metric], n);
        p->kind->run(p->srv, state, batch, n);
        complete_jobs(p->srv, batch, n);
    }
    p->kind->close(state);
    return NULL;
}

/* ---- The Redis pipeline ------------------------------------------------------------- */

static void *redis_open(gw_server *srv)
{
    lk_client *c = NULL;
    /* EUNAVAILABLE still gives a handle: every batch tries to connect again. */
    lk_client_open(&c, srv->cfg->redis_url, &srv->lk_opts);
    return c;
}

static void redis_close(void *state)
{
    lk_client_close(state);
}

static void redis_run(gw_server *srv, void *state, gw_job **jobs, size_t n)
{
    lk_call *calls[GW_PIPE_BATCH];
    for (size_t i = 0; i < n; i++) {
        calls[i] = jobs[i]->call;
    }
    if (state != NULL) {
        lk_topology topo;
        lk_call_many(state, calls, n);
        /* This handle carries the lock traffic: it is the first to meet a failover. */
        lk_client_topology(state, &topo);
        gw__metrics_note_topology(&srv->metrics, &topo);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        calls[i]->status = LK_ENOMEM;
        snprintf(calls[i]->err, sizeof calls[i]->err, "cannot create a Redis client");
    }
}

static const pipe_kind redis_kind = {0, GW_PIPE_BATCH, redis_open, redis_close, redis_run};

/* ---- The Redis calls of a loop's own ----------------------------------------------------
 * The Redis pipeline above costs each batch two thread crossings: a loop thread suspends
 * its requests and wakes a pipeline thread (a futex), which sends the batch, sleeps in the
 * read, and resumes the requests, waking the loop again (its eventfd). Here a loop sends the
 * calls its own requests submitted, on a connection of its own, and polls that connection
 * with its daemon (loops.h, gw_loop_hook): the requests of one round go out as one pipeline
 * at the end of the round (after()), and the replies are read, the jobs completed and their
 * connections resumed on the loop's thread, with no other thread woken. One batch is in
 * flight per loop; what its requests submit meanwhile goes out when it is answered, as on a
 * pipeline thread.
 *
 * Only where nothing blocks the loop (lk_batch_start() in locklib.h): a single Redis or
 * Sentinel, without --redis-min-replicas, whose connection is open with every script
 * loaded. Otherwise the round's jobs go to the Redis pipeline exactly as before, so
 * behaviour never depends on which path a call took:
 *   - at start, and whenever the connection is gone (Redis restarted, a reply timed out, a
 *     failover made it read-only): a warm-up job on the side pipeline (it may block)
 *     connects and loads the scripts (lk_client_prepare) while the pipeline carries the
 *     loop's calls; a failed warm-up is tried again GW_LOOP_WARM_RETRY_MS later, through
 *     the breaker, so a Redis that is down costs the side pipeline one connect attempt per
 *     loop per retry;
 *   - Cluster and Redlock (lk_client_prepare says EINVAL): never; their fan-out blocks.
 * Failures of a batch in flight are the transport's, as on a pipeline thread: a connection
 * that fails or gives no reply within the command timeout answers the calls still waiting
 * EUNAVAILABLE (each may or may not have run; a retry with the same idempotency key replays
 * its first answer) and is dropped. Nothing is lost at shutdown: a loop stops only once no
 * request is in flight, and its close() still finishes a batch and hands leftover jobs to
 * the pipeline, which drains before it stops. */

/* After a failed warm-up, the next one waits this long. */
#define GW_LOOP_WARM_RETRY_MS 250
/* The most calls in one of a loop's batches. The connection is blocking, and a batch is
 * written only once the one before is answered, so the socket buffers are empty: 64 script
 * calls (under 32 KiB) fit in them, and the write never waits, even on a stalled Redis. */
#define GW_LOOP_BATCH 64

typedef struct pipe_loop {
    gw_server *srv;
    job_queue q;                       /* submitted on this loop, not yet sent */
    lk_client *lk;                     /* the loop's connection; owned by the warm-up job
                                        * while warming is set */
    lk_batch *inflight;                /* NULL: none */
    size_t n;                          /* jobs of the batch in flight */
    gw_job *jobs[GW_LOOP_BATCH];
    lk_call *calls[GW_LOOP_BATCH];
    atomic_int warming;                /* the warm-up job is queued or running */
    atomic_int off;                    /* the topology has no batches (Cluster, Redlock) */
    int64_t next_warm_us;              /* no warm-up before (after a failure) */
    gw_job warm;                       /* the warm-up, on the side pipeline */
    pthread_mutex_t mu;                /* closing, against the warm-up's end */
    int closing;                       /* the loop stopped while warming: the warm-up frees */
} pipe_loop;

static _Thread_local pipe_loop *this_loop;

static int loop_takes(const gw_pipe *p)
{
    return this_loop != NULL && !atomic_load(&this_loop->off) && p == this_loop->srv->pipe;
}

static void loop_queue(gw_job *const *jobs, size_t n)
{
    queue_push(&this_loop->q, jobs, n);
}

static void loop_free(pipe_loop *l)
{
    lk_client_close(l->lk);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

/* The warm-up, on a side thread: l->lk belongs to it until loop_warmed() clears warming. */
static void loop_warm(gw_job *job)
{
    pipe_loop *l = job->arg;
    lk_status st = LK_ENOMEM;

    if (l->lk == NULL) {
        lk_client_open(&l->lk, l->srv->cfg->redis_url, &l->srv->lk_opts);
    }
    if (l->lk != NULL) {
        st = lk_client_prepare(l->lk);
    }
    if (st == LK_EINVAL) {
        lk_client_close(l->lk); /* Cluster, Redlock: its connections would sit unused */
        l->lk = NULL;
    }
    atomic_store(&l->off, st == LK_EINVAL);
    l->next_warm_us = st == LK_OK ? 0 : gw__now_us() + GW_LOOP_WARM_RETRY_MS * 1000LL;
}

/* The warm-up's done(), after loop_warm() on the same side thread: hands l->lk back to the
 * loop, or frees l when the loop has stopped meanwhile. Returns 0: nothing to resume, and
 * the job (inside l) may be gone. */
static int loop_warmed(gw_job *job)
{
    pipe_loop *l = job->arg;
    pthread_mutex_lock(&l->mu);
    int orphan = l->closing;
    atomic_store(&l->warming, 0);
    pthread_mutex_unlock(&l->mu);
    if (orphan) {
        loop_free(l);
    }
    return 0;
}

static void warm_up(pipe_loop *l)
{
    if (atomic_load(&l->off) || atomic_load(&l->warming) || gw__now_us() < l->next_warm_us) {
        return;
    }
    atomic_store(&l->warming, 1);
    memset(&l->warm, 0, sizeof l->warm);
    l->warm.work = loop_warm;
    l->warm.done = loop_warmed;
    l->warm.arg = l;
    gw__pipe_submit(l->srv->side, &l->warm);
}

static void *loop_open(void *arg)
{
    pipe_loop *l = calloc(1, sizeof *l);
    if (l == NULL) {
        return NULL; /* this loop's calls go to the pipeline */
    }
    l->srv = arg;
    pthread_mutex_init(&l->mu, NULL);
    this_loop = l;
    warm_up(l); /* so that the first requests find the connection ready */
    return l;
}

/* The batch in flight is answered: its jobs complete on this thread. */
static void loop_answered(pipe_loop *l)
{
    lk_topology topo;
    size_t n = l->n;
    l->inflight = NULL;
    l->n = 0;
    lk_client_topology(l->lk, &topo);
    gw__metrics_note_topology(&l->srv->metrics, &topo);
    complete_jobs(l->srv, l->jobs, n);
}

/* Sends what this loop's requests submitted, when no batch is in flight: as one batch on
 * the loop's connection, or, when that cannot start, to the Redis pipeline. */
static void loop_send(pipe_loop *l)
{
    while (l->inflight == NULL && l->q.head != NULL) {
        /* warming first: its clearing is what makes the warm-up's l->lk visible here. */
        if (atomic_load(&l->warming) || l->lk == NULL) {
            enqueue_queue(l->srv->pipe, &l->q);
            warm_up(l);
            return;
        }
        size_t n = queue_take(&l->q, l->jobs, GW_LOOP_BATCH);
        for (size_t i = 0; i < n; i++) {
            l->calls[i] = l->jobs[i]->call;
        }
        if (!lk_batch_start(l->lk, l->calls, n, &l->inflight)) {
            /* Back in front of the rest, glue as it was, and all of it to the pipeline. */
            job_queue batch = {NULL, NULL};
            for (size_t i = 0; i < n; i++) {
                l->jobs[i]->next = i + 1 < n ? l->jobs[i + 1] : NULL;
            }
            batch.head = l->jobs[0];
            batch.tail = l->jobs[n - 1];
            queue_move(&batch, &l->q);
            enqueue_queue(l->srv->pipe, &batch);
            warm_up(l);
            return;
        }
        l->n = n;
        atomic_fetch_add(&l->srv->metrics.pipe_batches[GW_PIPE_LOOPS_METRIC], 1);
        atomic_fetch_add(&l->srv->metrics.pipe_jobs[GW_PIPE_LOOPS_METRIC], n);
        if (lk_batch_fd(l->inflight) < 0 && lk_batch_step(l->inflight, 0)) {
            loop_answered(l); /* answered without a reply (the breaker, a refused call) */
        }
    }
}

static int loop_fd(void *state, int *timeout_ms)
{
    pipe_loop *l = state;
    if (l->inflight == NULL) {
        *timeout_ms = -1;
        return -1;
    }
    *timeout_ms = lk_batch_timeout_ms(l->inflight);
    return lk_batch_fd(l->inflight);
}

static void loop_after(void *state, int readable)
{
    pipe_loop *l = state;
    if (l->inflight != NULL &&
        (readable || lk_batch_fd(l->inflight) < 0 || lk_batch_timeout_ms(l->inflight) == 0) &&
        lk_batch_step(l->inflight, readable)) {
        loop_answered(l);
    }
    loop_send(l);
}

static void loop_close(void *state)
{
    pipe_loop *l = state;
    /* No request is in flight by now (loops.h), so neither is a batch; should one be, it
     * is finished here rather than left suspended. */
    while (l->inflight != NULL) {
        struct pollfd pfd = {lk_batch_fd(l->inflight), POLLIN, 0};
        int readable = pfd.fd >= 0 && poll(&pfd, 1, lk_batch_timeout_ms(l->inflight)) > 0;
        if (lk_batch_step(l->inflight, readable)) {
            loop_answered(l);
        }
    }
    this_loop = NULL;
    if (l->q.head != NULL) {
        enqueue_queue(l->srv->pipe, &l->q);
    }
    pthread_mutex_lock(&l->mu);
    int orphan = atomic_load(&l->warming); /* then loop_warmed() frees l, maybe at once */
    l->closing = orphan;
    pthread_mutex_unlock(&l->mu);
    if (!orphan) {
        loop_free(l);
    }
}

static const gw_loop_hook loop_hook = {loop_open, loop_fd, loop_after, loop_close};

const gw_loop_hook *gw__pipe_loop_hook(void)
{
    return &loop_hook;
}

/* ---- The storage writer ------------------------------------------------------------- */

static void *store_open_state(gw_server *srv)
{
    (void)srv;
    return NULL;
}

static void store_close_state(void *state)
{
    (void)state;
}

static void store_run(gw_server *srv, void *state, gw_job **jobs, size_t n)
{
    store_write_req *writes[GW_PIPE_BATCH];
    store_grant_req *grants[GW_PIPE_BATCH];
    size_t nw = 0, ng = 0;
    (void)state;
    for (size_t i = 0; i < n; i++) {
        if (jobs[i]->grant != NULL) {
            grants[ng++] = jobs[i]->grant;
        } else {
            writes[nw++] = jobs[i]->write;
        }
    }
    /* Grants (a shared ledger's, fence.c) commit with the writes of the batch. */
    if (ng > 0) {
        store_grant_many(srv->st, grants, ng, writes, nw);
    } else {
        store_write_many(srv->st, writes, nw);
    }
}

static const pipe_kind store_kind = {1, GW_PIPE_BATCH, store_open_state, store_close_state,
                                     store_run};

/* ---- The side pipeline: calls that may block ----------------------------------------- */

static void side_run(gw_server *srv, void *state, gw_job **jobs, size_t n)
{
    (void)srv;
    (void)state;
    for (size_t i = 0; i < n; i++) {
        jobs[i]->work(jobs[i]);
    }
}

/* No state: a job's work takes this thread's lk_client from gw__client() when it needs one.
 * One job at a time: each blocks on its own, and a job must not wait behind another taken
 * in the same batch while the other side thread is free. */
static const pipe_kind side_kind = {2, 1, store_open_state, store_close_state, side_run};
static const pipe_kind reads_kind = {3, 1, store_open_state, store_close_state, side_run};

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

/* ---- Start and stop ------------------------------------------------------------------- */

static gw_pipe *pipe_start(gw_server *srv, const pipe_kind *kind, int threads, char *err,
                           size_t errlen)
{
    gw_pipe *p = calloc(1, sizeof *p);
    if (p == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    p->srv = srv;
    p->kind = kind;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    for (int i = 0; i < threads; i++) {
        if (pthread_create(&p->threads[i], NULL, pipe_main, p) != 0) {
            snprintf(err, errlen, "cannot start the pipeline threads");
            gw__pipe_stop(p);
            return NULL;
        }
        p->started++;
    }
    return p;
}

int gw__pipes_start(gw_server *srv, char *err, size_t errlen)
{
    srv->pipe = pipe_start(srv, &redis_kind, GW_PIPE_THREADS, err, errlen);
    if (srv->pipe == NULL) {
        return -1;
    }
    srv->writer = pipe_start(srv, &store_kind, 1, err, errlen);
    if (srv->writer != NULL) {
        srv->side = pipe_start(srv, &side_kind, GW_SIDE_THREADS, err, errlen);
    }
    if (srv->side != NULL) {
        srv->reads = pipe_start(srv, &reads_kind, GW_SIDE_THREADS, err, errlen);
    }
    if (srv->reads == NULL) {
        gw__pipes_stop(srv);
        return -1;
    }
    return 0;
}

/* In this order: the side pipeline hands /readyz jobs on to the reads pipeline, so it
 * drains first. */
void gw__pipes_stop(gw_server *srv)
{
    gw__pipe_stop(srv->pipe);
    gw__pipe_stop(srv->writer);
    gw__pipe_stop(srv->side);
    gw__pipe_stop(srv->reads);
    srv->pipe = srv->writer = srv->side = srv->reads = NULL;
}

void gw__pipe_stop(gw_pipe *p)
{
    if (p == NULL) {
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->started; i++) {
        pthread_join(p->threads[i], NULL);
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
}
