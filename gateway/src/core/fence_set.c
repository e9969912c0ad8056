/*
 * Fencing an acquisition of several resources at once: fence.c's argument, for a set.
 *
 * A single /lock holds its resource's stripe from computing the floor until its token is
 * counted (fence.c, "Concurrent acquisitions"). A set does the same for every resource of
 * it: it holds each of their stripes (once per distinct stripe) across the floors, the one
 * pipelined acquisition of the set, the ledger's cover or grant of every token and the
 * count, so every floor of a later acquisition of any of its resources covers its tokens.
 * It holds them from a side thread, blocking (gw__fence_hold), in ascending stripe order:
 * two sets never wait for each other's stripes in a cycle, and a single attempt holds one
 * stripe and never waits for another, so nothing waits in a cycle.
 *
 * The ledger decides per token, as for one resource: a shared ledger's refusal of a fresh
 * grant (STALE) undoes the whole set and attempts it again with that resource's floor at the
 * ledger's highest (a keyed set's undo drops its idempotency records, so the retry mints
 * afresh); a refused replay or re-entry, or any other failure, undoes the set and answers
 * 503. Undone grants burn their tokens; they are counted all the same (the count only
 * lifts later floors).
 *
 * A shared set mints nothing: like one shared attempt (ops/lock_attempt.c) it needs no floor
 * and no stripe. Each member's token (its resource's last exclusive one) is marked shared in
 * the store, all of them in one group commit, before the set is answered, so that no write
 * with it is accepted from then on. A token of 0 (nothing exclusive yet) cannot write anyway.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fence_set.h"

#define SET_GRANT_TRIES 3

/* Makes the ledger cover or grant every token of the set (all ACQUIRED). Returns STORE_OK,
 * or the first failure, with a->uncovered; *retry 1 when that failure is a fresh grant the
 * shared ledger refused, whose floor then goes to min_floor. *minted gets the largest
 * token. */
static store_status cover_set(gw_fence *f, gw_set_acq *a, int64_t *min_floor, int *retry,
                              int64_t *minted)
{
    store_status first = STORE_OK;

    *retry = 0;
    for (size_t i = 0; i < a->n; i++) {
        if (a->items[i].res.token > *minted) {
            *minted = a->items[i].res.token;
        }
    }
    for (size_t i = 0; i < a->n; i++) {
        const lk_many *it = &a->items[i];
        uint64_t tok = (uint64_t)it->res.token;
        store_status st;
        if (store_grant_needed(f->st, tok)) {
            unsigned char holder[STORE_HOLDER_LEN];
            uint64_t highest = 0;
            gw__fence_holder(f, it->resource, a->owner, holder);
            st = store_grant_as(f->st, it->resource, tok, holder, &highest);
            if (st == STORE_STALE && first == STORE_OK && !it->res.replayed &&
                it->res.holds == 1) {
                min_floor[i] = (int64_t)highest;
                *retry = 1;
            }
        } else {
            st = store_ledger_cover(f->st, tok);
        }
        if (st != STORE_OK && first == STORE_OK) {
            first = st;
            a->uncovered = it->res.token;
        }
        if (st != STORE_OK && st != STORE_STALE) {
            break; /* the store is failing: the set is undone; no timeout per member */
        }
    }
    if (first != STORE_OK && first != STORE_STALE) {
        *retry = 0;
    }
    return first;
}

/* Sorts idx by stripe (insertion sort: at most LK_MANY_MAX). */
static void by_stripe(const int *stripe, size_t *idx, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        idx[i] = i;
    }
    for (size_t i = 1; i < n; i++) {
        size_t v = idx[i], j = i;
        for (; j > 0 && stripe[idx[j - 1]] > stripe[v]; j--) {
            idx[j] = idx[j - 1];
        }
        idx[j] = v;
    }
}

/* One try: floors, the acquisition, the cover. Returns 1 to try again (a refused fresh
 * grant, undone). */
static int try_set(gw_fence *f, lk_client *c, gw_set_acq *a, int64_t *min_floor,
                   int64_t *minted)
{
    for (size_t i = 0; i < a->n; i++) {
        store_status st = gw__fence_floor(f, a->items[i].resource, min_floor[i],
                                          &a->items[i].floor);
        if (st != STORE_OK) {
            a->cover = st;
            a->lk = LK_EUNAVAILABLE;
            snprintf(a->err, sizeof a->err, "storage could not be read to fence the tokens");
            return 0;
        }
    }
    a->lk = lk_acquire_many(c, a->items, a->n, a->owner, a->lease_ms, a->idem_key, a->fair);
    if (a->lk >= LK_EINVAL) {
        snprintf(a->err, sizeof a->err, "%s", lk_errstr(c));
    }
    for (size_t i = 0; i < a->n; i++) {
        /* Grants undone because another was held are counted too: their tokens were
         * minted. */
        if (a->items[i].status == LK_ACQUIRED && a->items[i].res.token > *minted) {
            *minted = a->items[i].res.token;
        }
    }
    if (a->lk != LK_ACQUIRED) {
        return 0;
    }
    int retry = 0;
    a->cover = cover_set(f, a, min_floor, &retry, minted);
    if (a->cover == STORE_OK) {
        return 0;
    }
    lk_undo_many(c, a->items, a->n, a->owner, a->idem_key);
    return retry;
}

/* Records the shared mark of every member token of a granted shared set in one call.
 * Returns STORE_OK or the first failure, with a->uncovered. */
static store_status mark_set(gw_fence *f, gw_set_acq *a)
{
    store_grant_req reqs[LK_MANY_MAX];
    store_grant_req *ptrs[LK_MANY_MAX];
    size_t m = 0;

    for (size_t i = 0; i < a->n; i++) {
        if (a->items[i].res.token > 0) {
            reqs[m] = (store_grant_req){.resource = a->items[i].resource,
                                        .token = (uint64_t)a->items[i].res.token,
                                        .shared = 1};
            ptrs[m] = &reqs[m];
            m++;
        }
    }
    if (m == 0) {
        return STORE_OK;
    }
    store_grant_many(f->st, ptrs, m, NULL, 0);
    for (size_t k = 0; k < m; k++) {
        if (reqs[k].status != STORE_OK) {
            a->uncovered = (int64_t)reqs[k].token;
            return reqs[k].status;
        }
    }
    return STORE_OK;
}

static void acquire_shared_set(gw_fence *f, lk_client *c, gw_set_acq *a)
{
    a->lk = lk_acquire_many_shared(c, a->items, a->n, a->owner, a->lease_ms, a->idem_key,
                                   a->fair);
    if (a->lk >= LK_EINVAL) {
        snprintf(a->err, sizeof a->err, "%s", lk_errstr(c));
    }
    if (a->lk != LK_ACQUIRED) {
        return;
    }
    a->cover = mark_set(f, a);
    if (a->cover != STORE_OK) {
        lk_undo_many(c, a->items, a->n, a->owner, a->idem_key);
    }
}

void gw__fence_acquire_set(gw_fence *f, lk_client *c, gw_set_acq *a)
{
    if (a->shared) {
        a->cover = STORE_OK;
        a->uncovered = 0;
        a->floor_corrections = 0;
        a->err[0] = '\0';
        if (a->sending != NULL) {
            a->sending(a->sending_arg);
        }
        acquire_shared_set(f, c, a);
        return;
    }

    size_t n = a->n;
    gw_fence_turn *turns = calloc(n, sizeof *turns);
    gw_fence_sync *syncs = calloc(n, sizeof *syncs);
    int *stripe = calloc(n, sizeof *stripe);
    size_t *idx = calloc(n, sizeof *idx);
    int64_t *min_floor = calloc(n, sizeof *min_floor);
    int64_t minted = 0;

    a->lk = LK_ENOMEM;
    a->cover = STORE_OK;
    a->uncovered = 0;
    a->floor_corrections = 0;
    a->err[0] = '\0';
    if (turns == NULL || syncs == NULL || stripe == NULL || idx == NULL || min_floor == NULL) {
        snprintf(a->err, sizeof a->err, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        stripe[i] = gw__fence_stripe(f, a->items[i].resource);
    }
    by_stripe(stripe, idx, n);
    for (size_t k = 0; k < n; k++) {
        size_t i = idx[k];
        if (k > 0 && stripe[idx[k - 1]] == stripe[i]) {
            continue; /* that stripe is held already */
        }
        pthread_mutex_init(&syncs[i].mu, NULL);
        pthread_cond_init(&syncs[i].cv, NULL);
        turns[i].resource = a->items[i].resource;
        turns[i].owner = a->owner;
        turns[i].sync = &syncs[i];
        gw__fence_hold(f, &turns[i]);
    }
    if (a->sending != NULL) {
        a->sending(a->sending_arg);
    }
    for (int tries = 0; try_set(f, c, a, min_floor, &minted); tries++) {
        if (tries + 1 >= SET_GRANT_TRIES) {
            break; /* lk ACQUIRED, cover STALE: answered 503, the set undone */
        }
        a->floor_corrections++;
    }
    for (size_t k = n; k-- > 0;) {
        size_t i = idx[k];
        if (turns[i].sync != NULL) {
            gw__fence_unhold(f, &turns[i], minted);
            pthread_cond_destroy(&syncs[i].cv);
            pthread_mutex_destroy(&syncs[i].mu);
        }
    }
out:
    free(turns);
    free(syncs);
    free(stripe);
    free(idx);
    free(min_floor);
}
