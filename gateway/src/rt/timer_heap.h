/*
 * Timers in a min-heap on their time (timer_heap.c), like libuv's src/heap-inl.h. Intrusive:
 * a timer lives in its owner's struct and knows its place in the heap, so arming, moving
 * and cancelling one cost O(log n) and allocate nothing but the heap's array. Not
 * thread-safe: the owner of the heap guards it.
 */
#ifndef GATEWAY_TIMER_HEAP_H
#define GATEWAY_TIMER_HEAP_H

#include <stddef.h>
#include <stdint.h>

#define GW_TIMER_OFF ((size_t)-1)
typedef struct gw_timer {
    int64_t at;                   /* monotonic ms */
    size_t idx;                   /* position in the heap, GW_TIMER_OFF when not armed */
    int kind;                     /* for the owner: which of its timers this is */
} gw_timer;

/* Zero-initialised: empty. */
typedef struct gw_timer_heap {
    gw_timer **heap;              /* min-heap on ->at */
    size_t len, cap;
} gw_timer_heap;

/* Takes t out of the heap; no-op when it is not armed. */
void gw__timer_cancel(gw_timer_heap *h, gw_timer *t);
/* Arms t at `at` (cancelled first if armed). Returns 0, or -1 when the heap cannot grow (the
 * timer stays off). t->idx is then 0 when t is the earliest timer. */
int gw__timer_set(gw_timer_heap *h, gw_timer *t, int64_t at);
/* The earliest armed timer, NULL when none is. */
gw_timer *gw__timer_first(const gw_timer_heap *h);
/* Frees the heap's array; the timers are the owners'. */
void gw__timer_heap_free(gw_timer_heap *h);

#endif
