/*
 * Group commit, one queue for either backend. Never installed.
 *
 * Callers queue their requests (writes, and on PostgreSQL grants) and wait. Whoever finds no
 * batch in progress leads: it takes the whole queue and hands it to the backend's run
 * function, which carries it in one transaction with one durable commit and answers every
 * request in place; then the leader wakes the callers. Requests that arrive meanwhile form the
 * next batch. A caller alone leads a batch of one at once: nobody waits for company, there is
 * no timer. A caller is woken only after the batch holding its requests has run, so no answer
 * comes before its commit returned.
 */
#ifndef STORAGE_GROUP_H
#define STORAGE_GROUP_H

#include <pthread.h>
#include <stdatomic.h>

#include "storage_internal.h"

/* One request in the queue: a write, a grant or a transaction, answered in place by the
 * backend. */
typedef struct store__op {
    store_write_req *w;        /* a write, or NULL */
    store_grant_req *g;        /* a grant, when w and t are NULL */
    store_txn *t;              /* a transaction (valid writes, distinct resources), or NULL */
    size_t seq;                /* the backend's to use: arrival order within a batch */
    int done;                  /* set once the batch holding it has run */
    struct store__op *next;
} store__op;

/* The counters of store_stats. */
typedef struct store__counts {
    _Atomic uint64_t commits;
    _Atomic uint64_t writes;
    _Atomic uint64_t max_batch;
} store__counts;

/* Counts one transaction that carried `writes` write requests; `committed`: it made
 * accepted writes durable. */
void store__count_txn(store__counts *c, uint64_t writes, int committed);

/* A backend's batch: answers every op of the list (linked through next, in arrival order),
 * nothing before it is durable, and counts its transactions in counts. */
typedef void (*store__run_fn)(void *impl, store__op *batch, store__counts *counts);

typedef struct store__group {
    pthread_mutex_t mu;
    pthread_cond_t done_cv;
    store__op *queue;
    store__op *queue_tail;
    int leading;               /* a batch is running */
    int grouped;               /* store_options.group_commit */
    store__run_fn run;
    void *impl;
    store__counts counts;
} store__group;

/* grouped 0: each caller's requests run as a batch of their own, one batch at a time (the
 * benchmark's baseline without group commit). */
void store__group_init(store__group *g, int grouped, store__run_fn run, void *impl);
void store__group_destroy(store__group *g);

/* Queues the chain first..last (linked through next) and returns once a batch holding all of
 * it has run: the batch of another leader, or one this thread leads. The chain is queued in
 * one piece and a leader takes the whole queue, so it all runs in one batch. */
void store__group_run(store__group *g, store__op *first, store__op *last);

void store__group_stats(store__group *g, store_stats *out);

#endif
