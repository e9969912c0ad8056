/*
 * The timer heap: a binary min-heap of pointers to timers, each timer keeping its index.
 */
#include <stdlib.h>

#include "rt/timer_heap.h"

static void heap_swap(gw_timer_heap *h, size_t a, size_t b)
{
    gw_timer *t = h->heap[a];
    h->heap[a] = h->heap[b];
    h->heap[b] = t;
    h->heap[a]->idx = a;
    h->heap[b]->idx = b;
}

static void heap_up(gw_timer_heap *h, size_t i)
{
    while (i > 0 && h->heap[(i - 1) / 2]->at > h->heap[i]->at) {
        heap_swap(h, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

static void heap_down(gw_timer_heap *h, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->len && h->heap[l]->at < h->heap[m]->at) {
            m = l;
        }
        if (r < h->len && h->heap[r]->at < h->heap[m]->at) {
            m = r;
        }
        if (m == i) {
            return;
        }
        heap_swap(h, i, m);
        i = m;
    }
}

void gw__timer_cancel(gw_timer_heap *h, gw_timer *t)
{
    if (t->idx == GW_TIMER_OFF) {
        return;
    }
    size_t i = t->idx;
    h->len--;
    if (i != h->len) {
        h->heap[i] = h->heap[h->len];
        h->heap[i]->idx = i;
        heap_down(h, i);
        heap_up(h, i);
    }
    t->idx = GW_TIMER_OFF;
}

int gw__timer_set(gw_timer_heap *h, gw_timer *t, int64_t at)
{
    gw__timer_cancel(h, t);
    if (h->len == h->cap) {
        size_t cap = h->cap == 0 ? 256 : h->cap * 2;
        gw_timer **grown = realloc(h->heap, cap * sizeof *grown);
        if (grown == NULL) {
            return -1;
        }
        h->heap = grown;
        h->cap = cap;
    }
    t->at = at;
    t->idx = h->len;
    h->heap[h->len++] = t;
    heap_up(h, t->idx);
    return 0;
}

gw_timer *gw__timer_first(const gw_timer_heap *h)
{
    return h->len > 0 ? h->heap[0] : NULL;
}

void gw__timer_heap_free(gw_timer_heap *h)
{
    free(h->heap);
    h->heap = NULL;
    h->len = h->cap = 0;
}
