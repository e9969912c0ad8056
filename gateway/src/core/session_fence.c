/*
 * A session's end fences each of its locks as a forced release does (fence.c, "A forced
 * release"): locklib frees the session's hold of token T and burns a token F above T and the
 * floor (or, when the hold had lapsed and T is still the last token issued, burns F all the
 * same), F is counted in max_token, and store_fence() makes the store refuse every write
 * below F and the ledger cover F, durably, before the end is answered or the session
 * forgotten. A lock found with a later token was superseded already; fencing the store at
 * that token again is harmless and completes an earlier end whose store_fence() failed.
 *
 * The floor is the process's: the ledger floor and the largest token handed out, without a
 * per-resource store read (the burned token only needs to be above T, which Redis's counter
 * is at or above, and above any token this process handed out before a Redis data loss).
 */
#include <stdio.h>
#include <stdlib.h>

#include "core/session_fence.h"

static int64_t process_floor(gw_fence *f)
{
    int64_t floor = (int64_t)store_ledger_floor(f->st);
    int64_t mine = atomic_load(&f->max_token);
    return mine > floor ? mine : floor;
}

/* Counts F in max_token and fences the store at it. */
static store_status fence_at(gw_fence *f, const char *resource, int64_t burned)
{
    long long seen = atomic_load(&f->max_token);
    while (burned > seen && !atomic_compare_exchange_weak(&f->max_token, &seen, burned)) {
    }
    return store_fence(f->st, resource, (uint64_t)burned);
}

void gw__fence_session_end(gw_fence *f, lk_client *c, const char *id, const char *client,
                           gw_session_end *out)
{
    size_t n = 0;
    lk_session_lock *locks = calloc(LK_SESSION_LOCKS_MAX, sizeof *locks);

    out->lk = LK_ENOMEM;
    out->store = STORE_OK;
    out->locks = out->released = 0;
    out->err[0] = '\0';
    if (locks == NULL) {
        return;
    }
    out->lk = lk_session_end(c, id, client, process_floor(f), GW_SESSION_CLAIM_MS, locks,
                             LK_SESSION_LOCKS_MAX, &n);
    if (out->lk >= LK_EINVAL) {
        snprintf(out->err, sizeof out->err, "%s", lk_errstr(c));
    }
    out->locks = n;
    for (size_t i = 0; i < n; i++) {
        const lk_session_lock *l = &locks[i];
        if ((l->status != LK_RELEASED && l->status != LK_NOT_OWNER) || l->fenced_by < 1) {
            continue; /* not reached: the session stays claimed, and is ended again */
        }
        out->released += l->status == LK_RELEASED;
        store_status st = fence_at(f, l->resource, l->fenced_by);
        if (st != STORE_OK) {
            /* The store is failing: stop rather than wait out its timeout once per lock
             * (up to LK_SESSION_LOCKS_MAX of them) on this thread. The session stays
             * claimed, and its next end fences every lock again. */
            out->store = st;
            break;
        }
    }
    free(locks);
    if (out->lk == LK_RELEASED && out->store == STORE_OK) {
        /* Every lock is fenced durably: nothing is left to redo. A failed forget leaves the
         * session claimed; the reaper ends it again (every step repeats harmlessly). */
        (void)lk_session_forget(c, id);
    }
}

store_status gw__fence_session_lock(gw_fence *f, lk_client *c, const char *resource,
                                    int64_t token, lk_status *lk)
{
    lk_session_lock l;
    *lk = lk_session_end_lock(c, resource, token, process_floor(f), &l);
    if ((*lk == LK_RELEASED || *lk == LK_NOT_OWNER) && l.fenced_by > 0) {
        return fence_at(f, resource, l.fenced_by);
    }
    return STORE_OK;
}

lk_status gw__fence_session_join(gw_fence *f, lk_client *c, const char *id, const char *client,
                                 const char *owner, lk_many *items, size_t n,
                                 store_status *fence_st)
{
    lk_status st = lk_session_add_many(c, id, client, items, n, owner, NULL);

    *fence_st = STORE_OK;
    if (st != LK_NOT_OWNER && st != LK_EINVAL) {
        return st;
    }
    for (size_t i = 0; i < n; i++) {
        if (items[i].res.holds != 1 || items[i].res.replayed) {
            continue;
        }
        lk_status ended;
        store_status fenced = gw__fence_session_lock(f, c, items[i].resource,
                                                     items[i].res.token, &ended);
        /* Ended (or gone already): fenced here. A failed end leaves the hold to the
         * caller, which gives it back as it gives back a re-entry. */
        items[i].undone = ended == LK_RELEASED || ended == LK_NOT_OWNER;
        if (fenced != STORE_OK && *fence_st == STORE_OK) {
            *fence_st = fenced;
        }
    }
    return st;
}
