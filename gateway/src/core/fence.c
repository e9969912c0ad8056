/*
 * Fencing: the one place where the two halves of a fencing token meet, Redis minting it
 * (locklib) and storage checking it (the token ledger and each resource's highest token).
 * Nothing here speaks HTTP; it meets a token at three points of its life:
 *   1. gw__fence_enter(): before an acquisition is sent, its turn and its floor;
 *   2. gw__fence_answered(): when its answer is in (on the pipeline thread), make the ledger
 *      cover the token before it leaves the process, count it, and pass the turn on (an
 *      acquisition refused before it was sent leaves with gw__fence_leave());
 *   3. gw__fence_verdict_many(): when a write brings a token back, judge it.
 *
 * The properties, for one resource:
 *   P1  no token is handed out twice;
 *   P2  a later grant gets a larger token (a re-entry or a replay is the same grant and
 *       repeats its token);
 *   P3  the store never accepts a lower token than one it has accepted.
 *
 * Why they hold. Redis mints a token by incrementing the resource's counter, and the acquire
 * script first lifts the counter to the floor it is passed, so a minted token is always
 * greater than the floor (locklib.h). Every acquisition is passed
 *     floor = max(store_ledger_floor()    -- >= every token any earlier process handed out,
 *                 max_token               -- the largest token this process handed out,
 *                 store_highest(resource) -- the highest token that has written it).
 *   - Redis alone: the counter only grows, so its tokens are distinct and increasing.
 *   - Redis loses data (a restart without AOF, a failover to a replica that lagged,
 *     FLUSHALL): the counter reads low or is gone. The floor still lies above every token
 *     handed out: by this process, through max_token; by an earlier process, through the
 *     ledger. A token leaves this process only after store_ledger_cover() made the ledger's
 *     durable ceiling cover it (point 2; if that fails the hold is given back and the client
 *     gets 503), and a store that opens raises the ceiling by a step and reports the old
 *     ceiling as its floor, so the floor of the next process is above every token any
 *     earlier one handed out, also after a crash between minting and answering.
 *   - A resource's token keys expire (--token-key-idle-ttl, lk_options.token_key_idle_ttl_ms:
 *     fence, base and recent get a time to live of at least max(idle, lease) at every
 *     grant and renewal, and at least an idempotency record's retention with a keyed one,
 *     so Redis does not keep every name ever locked). For that resource this is
 *     exactly the data loss above, and the floor covers it the same way: the next mint lifts
 *     the empty counter to the floor, above every token handed out before. The keys never
 *     expire under a live lease, and a mint needs the lock free, so no holder outlives them.
 *   - Concurrent acquisitions: max_token covers a token only once it is counted, so two
 *     acquisitions of one resource could both compute floor f, the first mint f+1, Redis
 *     lose its data, and the second, lifting the empty counter to f, mint f+1 again. The
 *     acquisitions of one stripe of resources therefore run one at a time, from computing
 *     the floor (point 1) until the token is counted (point 2, before the stripe passes on):
 *     the floor of every acquisition covers the token of every earlier one on its stripe.
 * Together: every token minted for a resource is greater than every token handed out for it
 * before, whatever Redis lost, which is P1 and P2, for one gateway (LMDB: one data directory
 * per ledger; the store refuses a second opener).
 *
 * Several gateways sharing one store (PostgreSQL, store_grant_needed() is 1). A floor read
 * from a shared place and a mint in Redis are not atomic with respect to other gateways: two
 * gateways that see different Redis states (one lost data, a failover to a stale replica, two
 * diverged masters in a split brain) can each read the same floor and mint the same token.
 * No floor can fix that, so the shared ledger decides, per resource, after the mint:
 *   - Grant. A token leaves a gateway only after store_grant_as() accepted it: one atomic
 *     statement (INSERT ... ON CONFLICT DO UPDATE ... WHERE) that records it only when it is
 *     strictly larger than every token recorded for the resource by any gateway, committed
 *     (synchronous_commit on) before the answer. Two grants of one resource are serialised by
 *     the row lock, so of two gateways that minted the same token t, at most one records it;
 *     the other is refused (STALE, with the recorded highest).
 *   - P1: a token handed out was recorded, and a recorded token is refused to anyone else
 *     forever after (the ledger only grows), so no token is handed out twice, whatever Redis
 *     says. P2: a grant is recorded only above every earlier grant, so a later grant (one
 *     that starts after an earlier one was answered) gets a larger token. A refused fresh
 *     hold is given back (ops/lock.c) and attempted again with the floor lifted to the recorded
 *     highest, so the next mint lies above it: after Redis lost data the first /lock pays
 *     one extra round, then this gateway's max_token carries the floor. A keyed request
 *     (Idempotency-Key) left a record of the refused token in Redis, which the next attempt
 *     would replay; that attempt passes the refused token as lk_call.supersede, and the
 *     acquire script drops exactly that record (of this owner, with that token) before it
 *     mints, so the request gets a fresh token above the ledger and the record answers the
 *     new one. Nothing else changes: the new token still leaves only once granted.
 *   - The same grant again. A re-entry and an Idempotency-Key replay repeat an earlier token;
 *     in a split brain, gateway B may mint on its diverged master the token A already granted
 *     to another owner, be refused, give the hold back, and then a retry of B's request
 *     would replay that token from B's Redis. The ledger therefore records who holds the
 *     token: a fingerprint, a keyed hash of (resource, owner) under the owner secret that all
 *     gateways share through the store (holder_of). A grant of the recorded token is accepted
 *     again only with the same fingerprint, i.e. for the same owner, which is the same grant
 *     (owners are 128-bit random or derived from the Idempotency-Key under the secret). A
 *     refused re-entry or replay answers 503 and never hands the token out. The fingerprint is
 *     not the owner: the owner is a capability, and the ledger is read by operators.
 *   - Split brain: A and B mint from two counters, but every grant passes the one ledger, so
 *     P1 and P2 hold across them; both may believe they hold the lock at once (that is what
 *     fencing is for), and their tokens are distinct and ordered by the ledger. P3 below is
 *     the store's, which is shared too, so no write with a lower token than an accepted one
 *     is accepted, through any gateway.
 *   - Cost. The grant is a database commit, so it is not run on the Redis pipeline thread:
 *     gw__fence_answered hands the attempt to the storage writer (pipe.c), which commits the
 *     grants of its batch together with the batch's writes in one pipelined transaction
 *     (store_grant_many), and gw__fence_granted resumes the request. The stripe does not
 *     wait for that commit: the token is counted in max_token and the turn passes on once
 *     the grant is queued on the writer, so the next acquisition's floor covers it, as
 *     after an LMDB cover. P1 and P2 here are the ledger's; the stripe only spares
 *     refusals. The writer commits its grants in the order they were queued, so of two
 *     attempts on one stripe the earlier mint commits first; a set's grants go to the
 *     store from its own thread (fence_set.c) and may overtake a queued one, which then
 *     costs that one a refusal (STALE) and an attempt above the ledger, never a repeated
 *     or lower token. Both need the lock freed in Redis while the first grant is queued
 *     (a data loss, a lease run out, a forced release). A grant refused or failed leaves
 *     max_token at a token nobody was handed: later mints skip it. Holding the stripe
 *     through the commit would keep a hot lock's next acquisition (an /unlock's hand-off)
 *     out for a commit per grant. The floor skips store_highest() here: every written token
 *     was granted, so the ledger's refusal already lifts a low mint.
 *   - PostgreSQL unavailable: the grant answers EIO, the hold is given back and the client
 *     gets 503; nothing was handed out.
 *
 * A forced release (gw__fence_force, POST /admin/release) frees a lock whose holder may still
 * be alive, so it must fence that holder, as a new grant would, even if nobody locks again:
 *   - in Redis, one script deletes the hold (token T) and burns a token F > max(T, floor):
 *     minted and handed to nobody, so T is superseded (below the last issued) at once, and
 *     every later mint is above F;
 *   - F is counted in max_token, and store_fence() durably raises the resource's highest
 *     token to F (the store then refuses T as STALE whatever Redis remembers: after a data
 *     loss, T passes the verdict and the store's own check refuses it) and makes the ledger
 *     cover F (LMDB: the ceiling; PostgreSQL: the resource's recorded grant, so every
 *     gateway's next grant is above F). Only then is the release answered.
 *   - F is handed to nobody, so no stripe turn is needed: P1 is about tokens handed out.
 *     A grant minted between the script and the store commit is above F (Redis's counter),
 *     or, after a data loss in that window, above the floor and refused by a shared ledger
 *     once F is recorded: never at or below T, which the ledger covered when it was granted.
 *
 * P3 is storage's: a write is one atomic check-and-write against the resource's highest
 * token, which refuses a lower token (STALE) and a token above the last one Redis issued
 * (UNKNOWN_TOKEN, so a forged huge token cannot lock the real holders out). It also refuses a
 * token at or below the resource's shared mark (NOT_EXCLUSIVE): a shared grant hands out
 * the last exclusive token without minting, and is answered only once the store recorded
 * that (ops/lock_attempt.c), so neither its readers nor that token's exclusive holder,
 * whose lease may have run out before they came, can change what they read. The verdict
 * (point 3) only refuses earlier, never accepts more:
 *   - a token below the last one issued is superseded (409 stale_token with superseded_by):
 *     tokens are minted only while the lock is free, so its lease is over, and its holder is
 *     fenced off as soon as the next holder has locked, not only once that holder has
 *     written. The floor lifts the counter (and base) past other resources' tokens at most
 *     acquisitions, so a superseded token is usually below base: it is known for what it is
 *     when it is one of the resource's last 16 tokens (lk_token_check);
 *   - a token at or below the bottom of the resource's run (base) that is not recent was
 *     never issued for it, or belonged to a holder whose lock was gone before the lift: it is
 *     refused, stale when it is below the highest token that has written (as storage would
 *     say), else unknown. Refusing a token of a lock that is gone is always safe.
 * If Redis lost its counter, or it expired idle, the last issued token reads low (0, base 0,
 * nothing recent) until the next acquisition lifts it above the ledger floor; until then a
 * write with an older token passes the verdict (it is above base 0 and not below last 0) and
 * storage refuses it: stale below the highest written token, else unknown (above last_issued
 * 0). So nothing refused before is accepted: the safe direction. If Redis cannot be asked,
 * the operation refuses the write with 503: without the counter a forged token cannot be
 * told from a real one.
 */
#include <stdio.h>
#include <string.h>

#include <uuid/uuid.h>

#include "core/fence.h"

void gw__fence_init(gw_fence *f, store *st, const gw_fence_ops *ops, void *owner)
{
    f->st = st;
    f->ops = ops;
    f->owner = owner;
    atomic_store(&f->max_token, 0);
    for (int i = 0; i < GW_FLOOR_STRIPES; i++) {
        pthread_mutex_init(&f->stripes[i].mu, NULL);
        f->stripes[i].busy = 0;
        gw_queue_init(&f->stripes[i].line);
    }
}

static gw_stripe *stripe_of(gw_fence *f, const char *resource)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)resource; *p != '\0'; p++) {
        h = (h ^ *p) * 16777619u;
    }
    return &f->stripes[h % GW_FLOOR_STRIPES];
}

/* The floor for an acquisition of `resource` (see the file comment). */
static store_status floor_of(gw_fence *f, const char *resource, int64_t min_floor,
                             int64_t *floor)
{
    uint64_t highest = 0;
    /* A shared ledger refuses every token at or below one it granted, and every written
     * token was granted: the grant retries above the ledger's highest (ops/lock.c), so reading
     * the highest written would only cost a round trip per /lock. */
    if (!store_grant_needed(f->st, 0)) {
        store_status st = store_highest(f->st, resource, &highest);
        if (st != STORE_OK) {
            return st;
        }
    }
    uint64_t fl = store_ledger_floor(f->st);
    if (min_floor > 0 && (uint64_t)min_floor > fl) {
        fl = (uint64_t)min_floor;
    }
    uint64_t mine = (uint64_t)atomic_load(&f->max_token);
    if (mine > fl) {
        fl = mine;
    }
    if (highest > fl) {
        fl = highest;
    }
    *floor = (int64_t)fl;
    return STORE_OK;
}

/* t holds its stripe now: its floor, computed under the turn. */
static void granted(gw_fence *f, const gw_fence_turn *t, gw_floor *floor)
{
    floor->floor = 0;
    floor->status = floor_of(f, t->resource, t->min_floor, &floor->floor);
}

/* Takes t's stripe when it is free (1), else queues t behind its line (0). */
static int take_or_queue(gw_fence *f, gw_fence_turn *t)
{
    gw_stripe *s = stripe_of(f, t->resource);
    int taken = 0;

    pthread_mutex_lock(&s->mu);
    if (s->busy) {
        gw_queue_push(&s->line, &t->link);
    } else {
        s->busy = taken = 1;
    }
    pthread_mutex_unlock(&s->mu);
    return taken;
}

int gw__fence_enter(gw_fence *f, gw_fence_turn *t, gw_floor *floor)
{
    if (!take_or_queue(f, t)) {
        return 0;
    }
    granted(f, t, floor);
    return 1;
}

/* Counts minted in max_token: every floor computed after this covers it. */
static void count(gw_fence *f, int64_t minted)
{
    long long seen = atomic_load(&f->max_token);
    while (minted > seen && !atomic_compare_exchange_weak(&f->max_token, &seen, minted)) {
    }
}

void gw__fence_count(gw_fence *f, int64_t minted)
{
    count(f, minted);
}

/* Passes stripe s, held by a turn that has ended, to the next turn in its line, or frees it
 * (see gw__fence_leave). */
static gw_fence_turn *pass_stripe(gw_fence *f, gw_stripe *s, gw_floor *next_floor)
{
    pthread_mutex_lock(&s->mu);
    gw_qlink *n = gw_queue_pop(&s->line);
    gw_fence_turn *next = n != NULL ? gw_container_of(n, gw_fence_turn, link) : NULL;
    if (next == NULL) {
        s->busy = 0;
    }
    pthread_mutex_unlock(&s->mu);
    if (next != NULL && next->sync != NULL) {
        /* A blocking holder (gw__fence_hold) has the stripe now; it sends nothing. */
        pthread_mutex_lock(&next->sync->mu);
        next->sync->granted = 1;
        pthread_cond_signal(&next->sync->cv);
        pthread_mutex_unlock(&next->sync->mu);
        return NULL;
    }
    if (next != NULL) {
        granted(f, next, next_floor);
    }
    return next;
}

gw_fence_turn *gw__fence_leave(gw_fence *f, gw_fence_turn *t, int64_t minted,
                               gw_floor *next_floor)
{
    gw_stripe *s = stripe_of(f, t->resource);

    count(f, minted); /* before the stripe passes on: the next floor must cover this token */
    return pass_stripe(f, s, next_floor);
}

int gw__fence_stripe(const gw_fence *f, const char *resource)
{
    return (int)(stripe_of((gw_fence *)f, resource) - f->stripes);
}

void gw__fence_hold(gw_fence *f, gw_fence_turn *t)
{
    t->sync->granted = 0;
    if (take_or_queue(f, t)) {
        return;
    }
    pthread_mutex_lock(&t->sync->mu);
    while (!t->sync->granted) {
        pthread_cond_wait(&t->sync->cv, &t->sync->mu);
    }
    pthread_mutex_unlock(&t->sync->mu);
}

store_status gw__fence_floor(gw_fence *f, const char *resource, int64_t min_floor,
                             int64_t *floor)
{
    return floor_of(f, resource, min_floor, floor);
}

/* The holder fingerprint of (resource, owner): a keyed hash under the owner secret, which
 * every gateway sharing the store shares (store_secret). Equal for the same holder on any
 * gateway; it tells nobody the owner, which is a capability (releases, renews, re-enters). */
static void holder_of(const gw_fence *f, const gw_fence_turn *t,
                      unsigned char out[STORE_HOLDER_LEN])
{
    char name[LK_RESOURCE_MAX + LK_OWNER_MAX + 32];
    uuid_t h;
    int n = snprintf(name, sizeof name, "fencegate holder\n%s\n%s", t->resource,
                     t->owner != NULL ? t->owner : "");
    uuid_generate_sha1(h, f->holder_key, name, (size_t)n);
    memcpy(out, h, STORE_HOLDER_LEN);
}

/* Ends t's turn with minted counted, and sends the next turn of its stripe, if any. */
static void pass_on(gw_fence *f, gw_fence_turn *t, int64_t minted)
{
    gw_floor floor;
    gw_fence_turn *next = gw__fence_leave(f, t, minted, &floor);
    if (next != NULL) {
        f->ops->send(f, next, floor);
    }
}

void gw__fence_unhold(gw_fence *f, gw_fence_turn *t, int64_t minted)
{
    pass_on(f, t, minted);
}

void gw__fence_holder(const gw_fence *f, const char *resource, const char *owner,
                      unsigned char out[STORE_HOLDER_LEN])
{
    gw_fence_turn t = {.resource = resource, .owner = owner};
    holder_of(f, &t, out);
}

int gw__fence_answered(gw_job *job)
{
    gw_fence_turn *t = job->arg;
    gw_fence *f = job->ctx;
    const lk_call *call = job->call;
    int64_t minted = 0;

    t->cover = STORE_OK;
    t->granted = 0;
    if (call->status == LK_ACQUIRED) {
        /* Also a replayed answer: the first answer's cover may have failed (that hold was
         * given back, but its idempotency record stayed). */
        /* A shared grant mints nothing: its token is the last exclusive one, covered (or
         * granted to its holder) when it was minted. */
        minted = call->res.shared ? 0 : call->res.token;
        /* Redis holds it for this turn's owner now, whatever the cover or grant below
         * decides: a hold they refuse is given back, and its release message undoes what
         * this tells (ops->acquired). Told before the grant's commit, which comes after the
         * pipeline resumed the rest of the batch. */
        if (f->ops->acquired != NULL) {
            f->ops->acquired(f, t, call);
        }
        if (minted > 0 && store_grant_needed(f->st, (uint64_t)minted)) {
            /* A shared ledger: the grant is a database commit, so it goes to the storage
             * writer, which batches it with other grants and writes (one transaction),
             * instead of a round trip here that every answer of this batch would wait for. */
            holder_of(f, t, t->holder);
            t->grant = (store_grant_req){.resource = t->resource, .token = (uint64_t)minted,
                                         .holder = t->holder};
            job->grant = &t->grant;
            job->write = NULL;
            job->done = gw__fence_granted;
            /* The stripe passes on now, the token counted, not after the commit (see
             * "Cost" above); it stays held until the grant is queued on the writer. */
            gw_stripe *s = stripe_of(f, t->resource);
            count(f, minted);
            f->ops->grant(f, job); /* job and t may be gone from here on */
            gw_floor floor;
            gw_fence_turn *next = pass_stripe(f, s, &floor);
            if (next != NULL) {
                f->ops->send(f, next, floor);
            }
            return 0;
        }
        /* LMDB: costs nothing when the token is under the durable ceiling already; raising
         * it is one small commit per block of tokens, on this thread, before the stripe
         * passes on. */
        if (minted > 0) {
            t->cover = (unsigned char)store_ledger_cover(f->st, (uint64_t)minted);
        }
    } else if (call->status == LK_HELD && f->ops->held != NULL) {
        f->ops->held(f, t);
    }
    pass_on(f, t, minted);
    return 1;
}

int gw__fence_granted(gw_job *job)
{
    gw_fence_turn *t = job->arg;

    t->cover = (unsigned char)t->grant.status;
    t->granted = t->grant.status == STORE_STALE ? t->grant.highest : 0;
    return 1;
}

void gw__fence_force(gw_fence *f, lk_client *c, const char *resource, gw_forced *out)
{
    int64_t floor = 0;
    lk_result res = {0};

    memset(out, 0, sizeof *out);
    out->lk = LK_EUNAVAILABLE;
    out->store = floor_of(f, resource, 0, &floor);
    if (out->store != STORE_OK) {
        return; /* without the floor the burned token could be below one handed out */
    }
    out->lk = lk_force_release(c, resource, floor, &res);
    if (out->lk == LK_NOT_OWNER && res.fenced_by > 0) {
        /* Nothing held: every token below the last issued is superseded already (tokens are
         * minted only for a free lock). Recording that is harmless, and completes the fence
         * of an earlier forced release whose store_fence() failed. */
        out->store = store_fence(f->st, resource, (uint64_t)res.fenced_by);
        return;
    }
    if (out->lk != LK_RELEASED) {
        return;
    }
    out->token = res.token;
    out->fenced_by = res.fenced_by;
    out->published = res.published;
    long long seen = atomic_load(&f->max_token);
    while (res.fenced_by > seen &&
           !atomic_compare_exchange_weak(&f->max_token, &seen, res.fenced_by)) {
    }
    out->store = store_fence(f->st, resource, (uint64_t)res.fenced_by);
}

int gw__fence_verdict_reads(uint64_t token, const lk_call *check)
{
    return (token <= (uint64_t)check->base && !check->recent) || token < (uint64_t)check->last;
}

/* The verdict on token from check, given the highest token written (read with status st)
 * when the verdict needs it. */
static gw_verdict judge(uint64_t token, const lk_call *check, uint64_t highest, store_status st)
{
    uint64_t base = (uint64_t)check->base, last_issued = (uint64_t)check->last;

    if (token <= base && !check->recent) {
        /* Below the run and not among the resource's last 16 tokens: refused either way;
         * say stale when it is (highest only grows, so a concurrent write can only make
         * this answer more true). A recent token below the run was issued for this
         * resource before a lift, and is judged superseded below. */
        if (st != STORE_OK && st != STORE_NOT_FOUND) {
            return GW_VERDICT_STORE_FAILED;
        }
        return token < highest ? GW_VERDICT_STALE : GW_VERDICT_UNKNOWN;
    }
    if (token < last_issued) {
        /* Superseded: a larger token was minted since, and tokens are minted only when the
         * lock is free, so this token's lease is over (released, expired or removed). The
         * next holder reads the counter too, so it is never refused by this. */
        if (st != STORE_OK && st != STORE_NOT_FOUND) {
            return GW_VERDICT_STORE_FAILED;
        }
        return GW_VERDICT_SUPERSEDED;
    }
    return GW_VERDICT_WRITE;
}

void gw__fence_verdict_many(gw_fence *f, gw_verdict_req *const *reqs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        gw_verdict_req *r = reqs[i];
        const gw_verdict_req *same = NULL;
        for (size_t j = 0; j < i && same == NULL; j++) {
            if (strcmp(reqs[j]->resource, r->resource) == 0) {
                same = reqs[j];
            }
        }
        if (same != NULL) {
            r->highest = same->highest;
            r->st = same->st;
        } else {
            r->highest = 0;
            r->st = store_highest(f->st, r->resource, &r->highest);
        }
        r->verdict = judge(r->token, r->check, r->highest, r->st);
    }
}

gw_verdict gw__fence_read_verdict(gw_fence *f, gw_read_verdict *r)
{
    uint64_t last = (uint64_t)r->check->last;

    r->highest = 0;
    r->newest = last;
    /* The shared ledger records every grant before it is answered, and survives Redis
     * losing the counter's last steps; LMDB records nothing per resource (granted 0). */
    uint64_t granted = 0;
    r->st = store_ledger_granted(f->st, r->resource, &granted);
    if (r->st != STORE_OK) {
        return GW_VERDICT_STORE_FAILED;
    }
    if (granted > r->newest) {
        r->newest = granted;
    }
    if (r->token < granted) {
        r->st = store_highest(f->st, r->resource, &r->highest);
        return r->st == STORE_OK || r->st == STORE_NOT_FOUND ? GW_VERDICT_SUPERSEDED
                                                            : GW_VERDICT_STORE_FAILED;
    }
    if (r->token > last && r->token > granted) {
        /* Above every token minted for the resource: never issued (a write would be refused
         * UNKNOWN_TOKEN by storage; a read has no storage check after this one). */
        return GW_VERDICT_UNKNOWN;
    }
    if (r->token > last) {
        return GW_VERDICT_WRITE; /* the ledger's last grant, which Redis lost */
    }
    if (!gw__fence_verdict_reads(r->token, r->check)) {
        return GW_VERDICT_WRITE; /* the last token minted: nothing newer exists */
    }
    r->st = store_highest(f->st, r->resource, &r->highest);
    return judge(r->token, r->check, r->highest, r->st);
}
