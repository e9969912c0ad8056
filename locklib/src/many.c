/*
 * Several resources at once: lk_acquire_many, lk_release_many, lk_renew_many.
 *
 * Each is lk_call_many() over the single-resource scripts, one call per resource, so a set
 * costs one pipeline: one round trip, and on one Redis one pass of its event loop (under
 * appendfsync always, one fsync) for the whole set. On a Cluster the transport groups the
 * calls per master and runs the groups at the same time, so the names need no common hash
 * tag; on Redlock every call counts with its own majority. Nothing here knows the topology.
 *
 * All or none. An acquisition of a set is n independent scripts: some may grant while
 * others find their resource held. The grants are then released again (undo) before the
 * caller hears anything, in a second pipeline, so no caller ever holds part of a set while
 * it waits for the rest: two callers that lock [a, b] and [b, a] cannot deadlock. An undo is
 * the release an acquisition's rollback uses (locks.c): with the call's idempotency key it
 * drops the record of the grant too, so a retry with that key acts afresh instead of
 * replaying a grant that no longer stands. Undone grants burn their tokens: the counter only
 * goes up, and nobody was answered those tokens.
 *
 * A shared set (lk_acquire_many_shared) is the same over the shared acquisition: every member
 * is shared, each with its resource's current token; an undo releases the shared hold the
 * call added, as a release of one does.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calls_internal.h"
#include "client_internal.h"

/* Checks the set: 1..LK_MANY_MAX valid, distinct names. Returns OK or EINVAL (c->err says
 * which name). Quadratic, on at most 64 names. */
static lk_status check_set(lk_client *c, const lk_many *items, size_t n)
{
    if (items == NULL || n == 0 || n > LK_MANY_MAX) {
        return lk__fail(c, LK_EINVAL, "a set has 1..%d resources", LK_MANY_MAX);
    }
    for (size_t i = 0; i < n; i++) {
        if (!lk_valid_resource(items[i].resource)) {
            return lk__fail(c, LK_EINVAL, "invalid resource name at %zu", i);
        }
        for (size_t j = 0; j < i; j++) {
            if (strcmp(items[i].resource, items[j].resource) == 0) {
                return lk__fail(c, LK_EINVAL, "duplicate resource %s", items[i].resource);
            }
        }
    }
    return LK_OK;
}

/* Runs n calls as one pipeline and copies each outcome to its item. The calls are built by
 * fill(i, call). Returns OK, or ENOMEM. */
typedef void fill_fn(const lk_many *item, lk_call *call, const void *arg);

static lk_status run_set(lk_client *c, lk_many *items, size_t n, fill_fn *fill,
                         const void *arg)
{
    lk_call *calls = calloc(n, sizeof *calls);
    lk_call **ptrs = calloc(n, sizeof *ptrs);

    if (calls == NULL || ptrs == NULL) {
        free(calls);
        free(ptrs);
        return lk__fail(c, LK_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        fill(&items[i], &calls[i], arg);
        ptrs[i] = &calls[i];
    }
    lk_call_many(c, ptrs, n);
    int failed = 0;
    for (size_t i = 0; i < n; i++) {
        items[i].status = calls[i].status;
        items[i].res = calls[i].res;
        if (calls[i].status >= LK_EINVAL && !failed++) {
            /* The first failure's reason, naming its resource. */
            snprintf(c->err, sizeof c->err, "%s: %.200s", items[i].resource, calls[i].err);
        }
    }
    free(calls);
    free(ptrs);
    return LK_OK;
}

typedef struct set_args {
    const char *owner;
    const char *idem_key;
    int64_t lease_ms;
    int fair;
    int shared;
    lk_call_kind kind;
} set_args;

static void fill_acquire(const lk_many *item, lk_call *call, const void *arg)
{
    const set_args *a = arg;
    *call = (lk_call){.kind = a->fair ? LK_CALL_ACQUIRE_FAIR : LK_CALL_ACQUIRE,
                      .resource = item->resource, .owner = a->owner, .idem_key = a->idem_key,
                      .lease_ms = a->lease_ms, .floor = item->floor,
                      .wait_ms = a->fair ? 0 : item->wait_ms, .shared = a->shared,
                      .others_waiting = !a->fair && item->others_waiting};
}

/* An undo: the release of the hold this call's acquisition added, with its record. A shared
 * grant of token 0 (nothing minted yet) undoes with -1, any token: a supersede of 0 would be
 * a plain release, refused by the key's record of the acquisition. */
static void fill_undo(const lk_many *item, lk_call *call, const void *arg)
{
    const set_args *a = arg;
    *call = (lk_call){.kind = LK_CALL_RELEASE, .resource = item->resource, .owner = a->owner,
                      .idem_key = a->idem_key,
                      .supersede = item->res.token > 0 ? item->res.token : -1};
}

static void fill_owner_call(const lk_many *item, lk_call *call, const void *arg)
{
    const set_args *a = arg;
    *call = (lk_call){.kind = a->kind, .resource = item->resource, .owner = a->owner,
                      .idem_key = a->idem_key, .lease_ms = a->lease_ms};
}

/* Releases the grants of items (those ACQUIRED) in one pipeline; marks each undone whose
 * release worked (RELEASED, STILL_HELD: a re-entry's hold given back; NOT_OWNER: the lease
 * ran out meanwhile, nothing is left either). The acquisition's outcome stays in status. */
static void undo_grants(lk_client *c, lk_many *items, size_t n, const set_args *a)
{
    lk_many *undo = calloc(n, sizeof *undo);
    size_t *from = calloc(n, sizeof *from);
    size_t m = 0;
    char why[sizeof c->err];

    snprintf(why, sizeof why, "%s", c->err);
    if (undo == NULL || from == NULL) {
        free(undo);
        free(from);
        return; /* the holds end with their leases; undone stays 0 */
    }
    for (size_t i = 0; i < n; i++) {
        if (items[i].status == LK_ACQUIRED) {
            undo[m] = items[i];
            from[m++] = i;
        }
    }
    if (m > 0 && run_set(c, undo, m, fill_undo, a) == LK_OK) {
        for (size_t k = 0; k < m; k++) {
            lk_status st = undo[k].status;
            items[from[k]].undone = st == LK_RELEASED || st == LK_STILL_HELD ||
                                    st == LK_NOT_OWNER;
        }
    }
    snprintf(c->err, sizeof c->err, "%s", why); /* the reason is the acquisition's */
    free(undo);
    free(from);
}

static lk_status acquire_set(lk_client *c, lk_many *items, size_t n, const set_args *a)
{
    lk_status st = check_set(c, items, n);

    if (st != LK_OK) {
        return st;
    }
    for (size_t i = 0; i < n; i++) {
        items[i].undone = 0;
        items[i].status = LK_EREDIS;
        lk__result_init(&items[i].res);
    }
    st = run_set(c, items, n, fill_acquire, a);
    if (st != LK_OK) {
        return st;
    }
    /* The worst outcome: an error, else a member held in the other mode by this owner
     * (waiting would not help), else a member held by another. */
    lk_status worst = LK_ACQUIRED;
    for (size_t i = 0; i < n; i++) {
        lk_status s = items[i].status;
        if (s >= LK_EINVAL) {
            if (worst < LK_EINVAL) {
                worst = s;
            }
        } else if (s == LK_WRONG_MODE && worst < LK_EINVAL) {
            worst = LK_WRONG_MODE;
        } else if (s != LK_ACQUIRED && worst == LK_ACQUIRED) {
            worst = LK_HELD;
        }
    }
    if (worst != LK_ACQUIRED) {
        undo_grants(c, items, n, a);
    }
    return worst;
}

lk_status lk_acquire_many(lk_client *c, lk_many *items, size_t n, const char *owner,
                          int64_t lease_ms, const char *idem_key, int fair)
{
    set_args a = {.owner = owner, .idem_key = idem_key, .lease_ms = lease_ms, .fair = fair};
    return acquire_set(c, items, n, &a);
}

lk_status lk_acquire_many_shared(lk_client *c, lk_many *items, size_t n, const char *owner,
                                 int64_t lease_ms, const char *idem_key, int fair)
{
    set_args a = {.owner = owner, .idem_key = idem_key, .lease_ms = lease_ms, .fair = fair,
                  .shared = 1};
    return acquire_set(c, items, n, &a);
}

/* An owner call over the set: OK when every item has an outcome, else the first error. */
static lk_status owner_set(lk_client *c, lk_many *items, size_t n, const set_args *a)
{
    lk_status st = check_set(c, items, n);

    if (st != LK_OK) {
        return st;
    }
    st = run_set(c, items, n, fill_owner_call, a);
    if (st != LK_OK) {
        return st;
    }
    for (size_t i = 0; i < n; i++) {
        if (items[i].status >= LK_EINVAL) {
            return items[i].status; /* its reason is in c->err (run_set) */
        }
    }
    return LK_OK;
}

lk_status lk_release_many(lk_client *c, lk_many *items, size_t n, const char *owner,
                          const char *idem_key)
{
    set_args a = {.owner = owner, .idem_key = idem_key, .kind = LK_CALL_RELEASE};
    return owner_set(c, items, n, &a);
}

lk_status lk_renew_many(lk_client *c, lk_many *items, size_t n, const char *owner,
                        int64_t lease_ms, const char *idem_key)
{
    set_args a = {.owner = owner, .idem_key = idem_key, .lease_ms = lease_ms,
                  .kind = LK_CALL_RENEW};
    return owner_set(c, items, n, &a);
}

void lk_undo_many(lk_client *c, lk_many *items, size_t n, const char *owner,
                  const char *idem_key)
{
    set_args a = {.owner = owner, .idem_key = idem_key};
    if (check_set(c, items, n) == LK_OK) {
        undo_grants(c, items, n, &a);
    }
}
