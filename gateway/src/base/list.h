/*
 * Intrusive lists: the link lives inside its owner, found again with gw_container_of().
 * One header because every list of the gateway needs the same few operations, written once:
 *   gw_dlist, doubly linked: push at either end, remove any member in O(1);
 *   gw_queue, singly linked, first in first out: push at the tail, pop at the head.
 * A zeroed list is empty and a zeroed link is in no list. Not thread-safe: the lock of the
 * list's owner guards it.
 */
#ifndef GATEWAY_LIST_H
#define GATEWAY_LIST_H

#include <stddef.h>

/* The struct of type `type` whose member `member` is at ptr. */
#define gw_container_of(ptr, type, member) \
    ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

/* ---- gw_dlist ------------------------------------------------------------------------ */

typedef struct gw_dlink {
    struct gw_dlink *prev, *next;
} gw_dlink;

typedef struct gw_dlist {
    gw_dlink *first, *last;
} gw_dlist;

static inline void gw_dlist_init(gw_dlist *l)
{
    l->first = l->last = NULL;
}

static inline int gw_dlist_empty(const gw_dlist *l)
{
    return l->first == NULL;
}

/* The first member, or NULL. */
static inline gw_dlink *gw_dlist_first(const gw_dlist *l)
{
    return l->first;
}

/* The member after n, or NULL. */
static inline gw_dlink *gw_dlist_next(const gw_dlink *n)
{
    return n->next;
}

static inline void gw_dlist_push_back(gw_dlist *l, gw_dlink *n)
{
    n->next = NULL;
    n->prev = l->last;
    if (l->last != NULL) {
        l->last->next = n;
    } else {
        l->first = n;
    }
    l->last = n;
}

static inline void gw_dlist_push_front(gw_dlist *l, gw_dlink *n)
{
    n->prev = NULL;
    n->next = l->first;
    if (l->first != NULL) {
        l->first->prev = n;
    } else {
        l->last = n;
    }
    l->first = n;
}

/* Takes n, a member of l, out of it. */
static inline void gw_dlist_remove(gw_dlist *l, gw_dlink *n)
{
    if (n->prev != NULL) {
        n->prev->next = n->next;
    } else {
        l->first = n->next;
    }
    if (n->next != NULL) {
        n->next->prev = n->prev;
    } else {
        l->last = n->prev;
    }
    n->prev = n->next = NULL;
}

/* ---- gw_queue ------------------------------------------------------------------------ */

typedef struct gw_qlink {
    struct gw_qlink *next;
} gw_qlink;

typedef struct gw_queue {
    gw_qlink *head, *tail;
} gw_queue;

static inline void gw_queue_init(gw_queue *q)
{
    q->head = q->tail = NULL;
}

static inline int gw_queue_empty(const gw_queue *q)
{
    return q->head == NULL;
}

/* The oldest member, left in the queue, or NULL. */
static inline gw_qlink *gw_queue_first(const gw_queue *q)
{
    return q->head;
}

static inline void gw_queue_push(gw_queue *q, gw_qlink *n)
{
    n->next = NULL;
    if (q->tail != NULL) {
        q->tail->next = n;
    } else {
        q->head = n;
    }
    q->tail = n;
}

/* Takes the oldest member out, or returns NULL when empty. */
static inline gw_qlink *gw_queue_pop(gw_queue *q)
{
    gw_qlink *n = q->head;
    if (n != NULL) {
        q->head = n->next;
        if (q->head == NULL) {
            q->tail = NULL;
        }
        n->next = NULL;
    }
    return n;
}

#endif
