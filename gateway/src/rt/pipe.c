/*
 * Pipelines. A request's operation suspends its connection and submits a job; a pipeline
 * thread takes whatever jobs are queued, runs them as one batch, runs each job's
 * completion, and resumes each connection; the request's operation then runs again and
 * answers. No loop thread waits on a backend.
 *
 * The Redis pipeline runs every acquire, release, renew and token check of every loop:
 * GW_PIPE_THREADS threads, each with its own connection, send each batch as one pipeline
 * (lk_call_many()). Under appendfsync always Redis fsyncs once per pass of its event loop,
 * so throughput comes from commands in flight: a batch carries every request waiting, and
 * with two threads one batch is sent while the other waits for its fsync.
 *
 * The storage writer runs every token-checked write: one thread hands each batch to
 * store_run_many(), which commits it with one fsync, with the fenced transactions
 * (POST /resources) and, on a shared store, the ledger's grants of fresh tokens (fence.c
 * hands an answered acquisition on to it) in the same group commit.
 *
 * Two side pipelines run the calls that may block and are neither of those: rt->side the
 * Redis calls (a /readyz or /metrics PING, a GET /locks status read), rt->reads the store
 * reads (a GET /resources value, the /readyz or /metrics probe read: a network round trip
 * on PostgreSQL; a probe goes to one, then the other). Each job's work runs on a side
 * thread, with that thread's own lk_client (rt/redis_client.c). A stall delays only the
 * calls queued behind it on its own side pipeline: a stalled Redis does not delay value
 * reads, nor a stalled store Redis probes, and neither holds up a loop (a Redis stall
 * lasts up to 2 s, a PostgreSQL one 5 s). The set pipeline (rt->sets) runs multi-resource
 * /locks the same way, one blocking attempt per thread: it keeps one thread and starts
 * more, up to GW_SET_THREADS, while attempts queue up (grow(), wait_idle()).
 *
 * Failures: a Redis batch whose connection fails answers each job EUNAVAILABLE
 * (lk_call_many: the outcome of each is unknown) and the next batch reconnects; while the
 * breaker (lk_breaker, shared with the side threads' clients) is open, every job fails
 * fast. A failed commit answers every write of it with the error, and nothing of it is
 * acknowledged (storage.h). A job is always completed, so no connection stays suspended: at
 * shutdown the threads drain their queue before they exit, and the server stops them only
 * after every request has completed.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sys/prctl.h>

#include "rt/log.h"
#include "rt/pipe.h"
#include "rt/runtime.h"
#include "rt/util.h"

/* The most jobs in one batch: bounds a batch's memory and the wait of its last job. */
#define GW_PIPE_BATCH 256

/* A kind of pipeline: what each thread keeps, and how it runs a batch. */
typedef struct pipe_kind {
    const char *name;                    /* its threads' name (ps -L, /proc/PID/task) */
    int metric;                          /* index in gw_metrics.pipe_batches */
    size_t max_batch;                    /* the most jobs a thread takes at once */
    size_t max_work;                     /* of them, the most with a work (0: no limit) */
    void *(*open)(gw_rt *rt);
    void (*close)(void *state);
    void (*run)(gw_rt *rt, void *state, gw_job **jobs, size_t n);
} pipe_kind;

/* A thread's place in a pipeline: free, a thread running in it, or a thread that retired
 * and has not been joined yet. */
enum { SLOT_FREE, SLOT_RUNNING, SLOT_RETIRED };

typedef struct pipe_slot {
    struct gw_pipe *p;
    int i;                               /* its index in p->slot */
    unsigned char state;                 /* SLOT_* */
    unsigned char stacked;               /* on p->idle_stack, waiting to be woken */
    pthread_t thread;
    pthread_cond_t cv;                   /* its own wake-up (enqueue) */
} pipe_slot;

/* Idle threads wait on a stack, each on its own condition variable, and a new job wakes the
 * one that went idle last: jobs that never come two at a time keep one thread busy while
 * the others stay idle long enough to retire (wait_idle). One shared condition variable
 * would wake them in turn, and none would ever be idle that long. */
struct gw_pipe {
    gw_rt *rt;
    const pipe_kind *kind;
    pthread_mutex_t mu;
    gw_queue jobs;
    int stopping;
    size_t queued;                       /* jobs in the queue */
    int idle;                            /* threads waiting for a job, woken ones too */
    int running;                         /* threads started and not retired */
    int min_threads, max_threads;        /* equal unless the pipeline grows on demand */
    int nstacked;
    int idle_stack[GW_SET_THREADS];      /* slots waiting to be woken, the last idle on top */
    /* Each thread's place; the most threads of any pipeline (pipe.h). */
    pipe_slot slot[GW_SET_THREADS];
};

/* Jobs this thread holds back for one pipeline (gw__pipe_hold). */
static _Thread_local struct {
    gw_pipe *p;
    size_t n;
    gw_job *jobs[GW_PIPE_HOLD_MAX];
} held;

static void *pipe_main(void *arg);

static gw_job *job_of(const gw_qlink *l)
{
    return gw_container_of(l, gw_job, link);
}

/* Starts one more thread in a free place (p->mu held, or before p is shared). Returns 0, or
 * -1 when no place is free or the thread could not be started (logged): the threads
 * running take the job in turn. A free place is used first; a retired thread's place is
 * joined before it is used again: that thread has left pipe_main, and all it has left to
 * do is close its Redis connection (rt/redis_client.c), a close() that waits on no
 * backend, so a loop thread submitting a job never waits on Redis here. */
static int grow(gw_pipe *p)
{
    int i = -1;
    for (int k = 0; k < p->max_threads && i < 0; k++) {
        i = p->slot[k].state == SLOT_FREE ? k : -1;
    }
    for (int k = 0; k < p->max_threads && i < 0; k++) {
        i = p->slot[k].state == SLOT_RETIRED ? k : -1;
    }
    if (i < 0) {
        return -1;
    }
    pipe_slot *sl = &p->slot[i];
    if (sl->state == SLOT_RETIRED) {
        pthread_join(sl->thread, NULL);
        sl->state = SLOT_FREE;
    }
    int rc = pthread_create(&sl->thread, NULL, pipe_main, sl);
    if (rc != 0) {
        gw__log_event(p->rt->cfg, "error", "cannot start a %s thread: %s", p->kind->name,
                      strerror(rc));
        return -1;
    }
    sl->state = SLOT_RUNNING;
    p->running++;
    return 0;
}

/* Wakes the thread that went idle last (p->mu held); none when none waits. */
static void wake_one(gw_pipe *p)
{
    if (p->nstacked > 0) {
        pipe_slot *sl = &p->slot[p->idle_stack[--p->nstacked]];
        sl->stacked = 0;
        pthread_cond_signal(&sl->cv);
    }
}

/* Queues jobs[0..n) in order, under one lock; each but the last glued to the next. */
static void enqueue(gw_pipe *p, gw_job *const *jobs, size_t n)
{
    pthread_mutex_lock(&p->mu);
    for (size_t i = 0; i < n; i++) {
        gw_job *job = jobs[i];
        job->glued = i + 1 < n;
        gw_queue_push(&p->jobs, &job->link);
    }
    p->queued += n;
    /* A thread takes one job at a time where a batch holds one, else as many as queued. */
    for (size_t i = 0; i < (p->kind->max_batch == 1 ? n : 1); i++) {
        wake_one(p);
    }
    if (p->queued > (size_t)p->idle && p->running < p->max_threads && !p->stopping) {
        grow(p); /* more jobs queued than threads waiting for one */
    }
    pthread_mutex_unlock(&p->mu);
}

void gw__pipe_submit(gw_pipe *p, gw_job *job)
{
    if (held.p == p && held.n < GW_PIPE_HOLD_MAX) {
        held.jobs[held.n++] = job;
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
    if (n > 0) {
        enqueue(p, held.jobs, n);
    }
}

/* Takes sl off the idle stack, wherever it is (p->mu held): it woke without wake_one(). */
static void unstack(gw_pipe *p, pipe_slot *sl)
{
    int k = 0;
    while (k < p->nstacked && p->idle_stack[k] != sl->i) {
        k++;
    }
    for (; k + 1 < p->nstacked; k++) {
        p->idle_stack[k] = p->idle_stack[k + 1];
    }
    p->nstacked--;
    sl->stacked = 0;
}

/* Waits on the idle stack until woken, or, above the minimum, at most GW_PIPE_IDLE_MS
 * (p->mu held). Returns 1 when the thread is to retire: its time ran out with no job. */
static int wait_idle(gw_pipe *p, pipe_slot *sl)
{
    int rc = 0;

    p->idle++;
    sl->stacked = 1;
    p->idle_stack[p->nstacked++] = sl->i;
    if (p->running <= p->min_threads) {
        pthread_cond_wait(&sl->cv, &p->mu);
    } else {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += GW_PIPE_IDLE_MS / 1000;
        until.tv_nsec += (long)(GW_PIPE_IDLE_MS % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        rc = pthread_cond_timedwait(&sl->cv, &p->mu, &until);
    }
    p->idle--;
    if (sl->stacked) {
        unstack(p, sl); /* timed out, stopping, or a spurious wake-up */
    }
    if (rc == ETIMEDOUT && gw_queue_empty(&p->jobs) && !p->stopping &&
        p->running > p->min_threads) {
        p->running--; /* idle past GW_PIPE_IDLE_MS above the minimum: retire */
        return 1;
    }
    return 0;
}

/* Takes up to the kind's max_batch jobs, never parting a job from the one glued to it (a
 * glued pair that does not fit waits for the next batch, unless it would be alone); 0 when
 * stopping and nothing is left, or when the thread retires. */
static size_t take_batch(pipe_slot *sl, gw_job **batch)
{
    gw_pipe *p = sl->p;
    size_t n = 0, works = 0;

    pthread_mutex_lock(&p->mu);
    while (gw_queue_empty(&p->jobs) && !p->stopping) {
        if (wait_idle(p, sl)) {
            pthread_mutex_unlock(&p->mu);
            return 0;
        }
    }
    while (!gw_queue_empty(&p->jobs) && n < p->kind->max_batch) {
        gw_job *head = job_of(gw_queue_first(&p->jobs));
        size_t span = 1;
        for (const gw_qlink *l = &head->link; job_of(l)->glued && l->next != NULL; l = l->next) {
            span++;
        }
        if (n > 0 && n + span > p->kind->max_batch) {
            break;
        }
        if (head->work != NULL && p->kind->max_work > 0 && works == p->kind->max_work) {
            break;
        }
        works += head->work != NULL;
        batch[n++] = job_of(gw_queue_pop(&p->jobs));
    }
    p->queued -= n;
    pthread_mutex_unlock(&p->mu);
    return n;
}

static void *pipe_main(void *arg)
{
    pipe_slot *sl = arg;
    gw_pipe *p = sl->p;
    gw_job *batch[GW_PIPE_BATCH];
    struct MHD_Connection *resume_conns[GW_PIPE_BATCH];
    void *state = p->kind->open(p->rt);
    size_t n;

    prctl(PR_SET_NAME, p->kind->name, 0, 0, 0);

    while ((n = take_batch(sl, batch)) > 0) {
        if (state == NULL) {
            state = p->kind->open(p->rt); /* out of memory last time: try again */
        }
        atomic_fetch_add(&p->rt->metrics.pipe_batches[p->kind->metric], 1);
        atomic_fetch_add(&p->rt->metrics.pipe_jobs[p->kind->metric], n);
        p->kind->run(p->rt, state, batch, n);
        /* Jobs glued together (gw__pipe_hold) resume their connections only once every
         * completion of the group ran: a release and the hand-off attempt sent behind it
         * (ops/lock_attempt.c, "Hand-offs") are one group, and its new holder is known
         * (ops/lock.c, "Known holders", noted by the attempt's completion) before the
         * owner that released it is answered and can ask again. A group resumes last job
         * first, so that the loop of the attempt's connection is woken first: that is the
         * new holder, whose next request (its /unlock) is the next hand-off of a hot lock,
         * while the released owner's answer only lets it park again. Any other job resumes
         * as soon as its completion ran. */
        size_t nresume = 0;
        for (size_t i = 0; i < n; i++) {
            /* Read before done(): once handed on, the request may complete and free the
             * job. */
            struct MHD_Connection *conn = batch[i]->conn;
            int glued = batch[i]->glued && i + 1 < n;
            int resume = batch[i]->done != NULL ? batch[i]->done(batch[i]) : 1;
            if (resume && conn != NULL) {
                resume_conns[nresume++] = conn;
            }
            if (!glued) {
                for (size_t k = nresume; k-- > 0;) {
                    gw__loops_resume(p->rt->loops, resume_conns[k]);
                }
                nresume = 0;
            }
        }
    }
    p->kind->close(state);
    /* Stopped, or retired (take_batch): its place is joined by grow() or gw__pipe_stop(). */
    pthread_mutex_lock(&p->mu);
    sl->state = SLOT_RETIRED;
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* ---- The Redis pipeline ------------------------------------------------------------- */

static void *redis_open(gw_rt *rt)
{
    lk_client *c = NULL;
    /* EUNAVAILABLE still gives a handle: every batch tries to connect again. */
    lk_client_open(&c, rt->cfg->redis_url, &rt->lk_opts);
    return c;
}

static void redis_close(void *state)
{
    lk_client_close(state);
}

static void redis_run(gw_rt *rt, void *state, gw_job **jobs, size_t n)
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
        gw__metrics_note_topology(&rt->metrics, &topo);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        calls[i]->status = LK_ENOMEM;
        snprintf(calls[i]->err, sizeof calls[i]->err, "cannot create a Redis client");
    }
}

static const pipe_kind redis_kind = {"fg-redis", 0, GW_PIPE_BATCH, 0, redis_open, redis_close,
                                     redis_run};

/* ---- The storage writer ------------------------------------------------------------- */

static void *store_open_state(gw_rt *rt)
{
    (void)rt;
    return NULL;
}

static void store_close_state(void *state)
{
    (void)state;
}

static void store_run(gw_rt *rt, void *state, gw_job **jobs, size_t n)
{
    store_write_req *writes[GW_PIPE_BATCH];
    store_grant_req *grants[GW_PIPE_BATCH];
    store_txn *txns[GW_PIPE_BATCH];
    size_t nw = 0, ng = 0, nt = 0;
    (void)state;
    for (size_t i = 0; i < n; i++) {
        if (jobs[i]->grant != NULL) {
            grants[ng++] = jobs[i]->grant;
        } else if (jobs[i]->txn != NULL) {
            txns[nt++] = jobs[i]->txn;
        } else {
            writes[nw++] = jobs[i]->write;
        }
    }
    /* Grants (a shared ledger's, fence.c) and transactions commit with the writes of the
     * batch (store_run_many). */
    int64_t start = gw__now_us();
    store_run_many(rt->st, grants, ng, writes, nw, txns, nt);
    gw__metrics_observe_commit(&rt->metrics, gw__now_us() - start);
}

static const pipe_kind store_kind = {"fg-writer", 1, GW_PIPE_BATCH, 0, store_open_state,
                                     store_close_state, store_run};

/* ---- The side pipeline: calls that may block ----------------------------------------- */

static void side_run(gw_rt *rt, void *state, gw_job **jobs, size_t n)
{
    (void)rt;
    (void)state;
    for (size_t i = 0; i < n; i++) {
        jobs[i]->work(jobs[i]);
    }
}

/* The store readers: the fence's verdicts on stale tokens, all of a batch together (one
 * read of the highest token per resource: gw__fence_verdict_many), then the batch's one
 * value read. */
static void reads_run(gw_rt *rt, void *state, gw_job **jobs, size_t n)
{
    struct gw_verdict_req *verdicts[GW_PIPE_BATCH];
    size_t nv = 0;
    (void)state;
    for (size_t i = 0; i < n; i++) {
        if (jobs[i]->verdict != NULL) {
            verdicts[nv++] = jobs[i]->verdict;
        }
    }
    if (nv > 0) {
        gw__fence_verdict_many(&rt->fence, verdicts, nv);
    }
    for (size_t i = 0; i < n; i++) {
        if (jobs[i]->verdict == NULL) {
            jobs[i]->work(jobs[i]);
        }
    }
}

/* No state: a job's work takes this thread's lk_client from gw__client() when it needs one.
 * One job with a work per batch: each blocks on its own, and a job must not wait behind
 * another taken in the same batch while the other thread is free. */
static const pipe_kind side_kind = {"fg-side", 2, 1, 1, store_open_state, store_close_state,
                                    side_run};
static const pipe_kind reads_kind = {"fg-reads", 3, GW_PIPE_BATCH, 1, store_open_state,
                                     store_close_state, reads_run};
/* The set pipeline runs as the side pipeline does, counted with it in the metrics. */
static const pipe_kind sets_kind = {"fg-sets", 2, 1, 1, store_open_state, store_close_state,
                                    side_run};

/* ---- Start and stop ------------------------------------------------------------------- */

/* Starts a pipeline with min_threads threads, growing to max_threads while jobs queue up
 * with no thread free (enqueue) and shrinking back after GW_PIPE_IDLE_MS idle (take_batch). */
static gw_pipe *pipe_start(gw_rt *rt, const pipe_kind *kind, int min_threads,
                           int max_threads, char *err, size_t errlen)
{
    gw_pipe *p = calloc(1, sizeof *p);
    pthread_condattr_t ca;
    if (p == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    p->rt = rt;
    p->kind = kind;
    p->min_threads = min_threads;
    p->max_threads = max_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* wait_idle's deadline */
    for (int i = 0; i < max_threads; i++) {
        p->slot[i].p = p;
        p->slot[i].i = i;
        pthread_cond_init(&p->slot[i].cv, &ca);
    }
    pthread_condattr_destroy(&ca);
    pthread_mutex_lock(&p->mu);
    int ok = 1;
    for (int i = 0; i < min_threads && ok; i++) {
        ok = grow(p) == 0;
    }
    pthread_mutex_unlock(&p->mu);
    if (!ok) {
        snprintf(err, errlen, "cannot start the pipeline threads");
        gw__pipe_stop(p);
        return NULL;
    }
    return p;
}

int gw__pipes_start(gw_rt *rt, char *err, size_t errlen)
{
    rt->pipe = pipe_start(rt, &redis_kind, GW_PIPE_THREADS, GW_PIPE_THREADS, err, errlen);
    if (rt->pipe == NULL) {
        return -1;
    }
    rt->writer = pipe_start(rt, &store_kind, 1, 1, err, errlen);
    if (rt->writer != NULL) {
        rt->side = pipe_start(rt, &side_kind, GW_SIDE_THREADS, GW_SIDE_THREADS, err, errlen);
    }
    if (rt->side != NULL) {
        rt->reads = pipe_start(rt, &reads_kind, GW_SIDE_THREADS, GW_SIDE_THREADS, err, errlen);
    }
    if (rt->reads != NULL) {
        rt->sets = pipe_start(rt, &sets_kind, 1, GW_SET_THREADS, err, errlen);
    }
    if (rt->sets == NULL) {
        gw__pipes_stop(rt);
        return -1;
    }
    return 0;
}

/* In this order: the side pipeline hands /readyz jobs on to the reads pipeline, so it
 * drains first. */
void gw__pipes_stop(gw_rt *rt)
{
    gw__pipe_stop(rt->pipe);
    gw__pipe_stop(rt->writer);
    gw__pipe_stop(rt->side);
    gw__pipe_stop(rt->reads);
    gw__pipe_stop(rt->sets);
    rt->pipe = rt->writer = rt->side = rt->reads = rt->sets = NULL;
}

void gw__pipe_stop(gw_pipe *p)
{
    if (p == NULL) {
        return;
    }
    unsigned char started[GW_SET_THREADS];
    pthread_mutex_lock(&p->mu);
    p->stopping = 1; /* no thread starts from now on (enqueue) */
    for (int i = 0; i < p->max_threads; i++) {
        started[i] = p->slot[i].state != SLOT_FREE;
        pthread_cond_signal(&p->slot[i].cv);
    }
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->max_threads; i++) {
        if (started[i]) {
            pthread_join(p->slot[i].thread, NULL);
        }
        pthread_cond_destroy(&p->slot[i].cv);
    }
    pthread_mutex_destroy(&p->mu);
    free(p);
}
