/* Group commit (group.h), for either backend. */
#include "group.h"

void store__count_txn(store__counts *c, uint64_t writes, int committed)
{
    atomic_fetch_add(&c->writes, writes);
    if (committed) {
        atomic_fetch_add(&c->commits, 1);
    }
    uint64_t max = atomic_load(&c->max_batch);
    while (writes > max && !atomic_compare_exchange_weak(&c->max_batch, &max, writes)) {
    }
}

void store__group_init(store__group *g, int grouped, store__run_fn run, void *impl)
{
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->done_cv, NULL);
    g->queue = NULL;
    g->queue_tail = NULL;
    g->leading = 0;
    g->grouped = grouped;
    g->run = run;
    g->impl = impl;
    atomic_init(&g->counts.commits, 0);
    atomic_init(&g->counts.writes, 0);
    atomic_init(&g->counts.max_batch, 0);
}

void store__group_destroy(store__group *g)
{
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->done_cv);
}

static void run_grouped(store__group *g, store__op *first, store__op *last)
{
    pthread_mutex_lock(&g->mu);
    if (g->queue_tail != NULL) {
        g->queue_tail->next = first;
    } else {
        g->queue = first;
    }
    g->queue_tail = last;
    /* Not done and nobody leading means the chain is still queued: the batch of the last
     * leader was taken before it arrived. */
    while (!last->done) {
        if (g->leading) {
            pthread_cond_wait(&g->done_cv, &g->mu);
            continue;
        }
        /* Lead: take the whole queue (ours included) and run it as one. */
        store__op *batch = g->queue;
        g->queue = NULL;
        g->queue_tail = NULL;
        g->leading = 1;
        pthread_mutex_unlock(&g->mu);
        g->run(g->impl, batch, &g->counts);
        pthread_mutex_lock(&g->mu);
        for (store__op *b = batch; b != NULL;) {
            store__op *next = b->next; /* b may return and vanish once done is set */
            b->done = 1;
            b = next;
        }
        g->leading = 0;
        pthread_cond_broadcast(&g->done_cv);
    }
    pthread_mutex_unlock(&g->mu);
}

static void run_alone(store__group *g, store__op *first)
{
    pthread_mutex_lock(&g->mu);
    while (g->leading) {
        pthread_cond_wait(&g->done_cv, &g->mu);
    }
    g->leading = 1;
    pthread_mutex_unlock(&g->mu);
    g->run(g->impl, first, &g->counts);
    pthread_mutex_lock(&g->mu);
    g->leading = 0;
    pthread_cond_broadcast(&g->done_cv);
    pthread_mutex_unlock(&g->mu);
}

void store__group_run(store__group *g, store__op *first, store__op *last)
{
    if (g->grouped) {
        run_grouped(g, first, last);
    } else {
        run_alone(g, first);
    }
}

void store__group_stats(store__group *g, store_stats *out)
{
    out->commits = atomic_load(&g->counts.commits);
    out->writes = atomic_load(&g->counts.writes);
    out->max_batch = atomic_load(&g->counts.max_batch);
}
