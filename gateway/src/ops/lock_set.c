/*
 * POST /lock with "resources": a set of 2..64 resources, every one or none.
 *
 * The operation, and what resumes it:
 *   start       parse the body (http/args_set.c), then attempt -> WORKING;
 *   WORKING     resumed by the set pipeline when the attempt is done (set_answered):
 *               answer, or park on one held resource while time is left -> PARKED, or
 *               attempt again at once;
 *   PARKED      resumed by waiters.c (set_woken): attempt again, or answer;
 *   completed   end the wait, give back a set whose answer did not reach the client.
 *
 * An attempt runs on a thread of the set pipeline (rt->sets: it blocks on its stripes,
 * Redis and the store, never a loop thread):
 * core/fence_set.c holds the stripes of the set's resources, computes their floors,
 * acquires the whole set in one Redis pipeline (lk_acquire_many) and makes the ledger cover
 * every token before the stripes pass on. A set with one resource held is undone before
 * the attempt returns: a set never holds part of itself.
 *
 * Waiting without hold-and-wait. A set that waits parks as a waiter of one resource it found
 * held, holding nothing, and when a release of that resource wakes it, it attempts the whole
 * set again. The waiter is registered on that resource (gw__wait_begin, which records the
 * resource's epoch) before the attempt that decides to park: a release between that
 * attempt and the park is not missed (gw__wait_park answers RETRY). So the first time a set
 * finds a resource held it registers there and attempts once more at once; it parks only
 * when the resource it is registered on is still among the held ones. Two sets locking
 * [a, b] and [b, a] therefore never wait for each other holding anything: no deadlock. One
 * release wakes one waiter of its resource, set or single, as for any waiter (no herd). A
 * woken set that finds another resource held moves its registration there; its attempt
 * marked the resources it took as wanted when this gateway has other waiters for them, so
 * the undo of such a grant publishes and wakes the next waiter.
 * A set's waiter is never handed a lock by an /unlock (rt/waiters.c, gw__wait_claim): a
 * hand-off sends a single resource's attempt; its release's message wakes the set instead.
 *
 * Fairness for a set ("fair": true): the set never takes a resource ahead of a fair waiter
 * queued for it in Redis (each resource's acquisition is the fair script's, which answers
 * held while another waiter is first in line), but it does not take a place in those queues
 * itself: a place in several queues while waiting would be holding part of the set. Among
 * this gateway's waiters of the resource it parks on it waits in arrival order.
 *
 * Shared sets ("mode": "shared", one mode for the whole set): every member is taken shared,
 * all or none, with its resource's current token, each token's shared mark recorded in the
 * store before the answer (core/fence_set.c). A set that waits tells Redis how much longer
 * (lk_many.wait_ms) in either mode, as a single /lock does: a waiting exclusive set holds
 * new shared requests of its held members back (writers' preference), and a shared set held
 * back so is woken by that writer's release. A shared grant hands on to this gateway's
 * parked waiters of each member it marked wanted, as a single shared grant does
 * (ops/lock_answer.c), so the readers behind it join too.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fence_set.h"
#include "http/args_set.h"
#include "http/offload.h"
#include "http/respond.h"
#include "ops/lock_attempt.h"
#include "ops/lock_set.h"
#include "ops/session_lock.h"
#include "rt/loops.h"
#include "rt/redis_client.h"
#include "rt/util.h"
#include "rt/waiters.h"

typedef enum set_stage { SET_WORKING, SET_PARKED } set_stage;

/* A POST /lock of a set in progress. Freed at request completion (gw__wait_free). */
struct gw_set_call {
    gw_job job;                          /* the attempt on the set pipeline */
    gw_rt *rt;
    size_t n;
    const char *owner;
    const char *idem_key;                /* "" for none */
    int64_t ttl_ms;
    int64_t deadline_ms;                 /* monotonic */
    int target;                          /* the resource the waiter is registered on, -1 */
    unsigned char stage;
    unsigned char wants_wait;
    unsigned char fair;
    unsigned char shared;                /* the whole set in shared mode */
    unsigned char last;                  /* the deadline's wake: one last attempt */
    unsigned char acquired;              /* answered 200 with holds this request added */
    unsigned char looked;                /* its last attempt's outcome was looked at */
    unsigned char eof;                   /* answered 200 to a client that had closed its
                                          * sending side (maybe only half-closed) */
    unsigned char wait_place;            /* holds a waiting place of its address */
    int client_place;                    /* its client's waiting place, -1: none */
    gw_session_set ses;                  /* "session": its steps (ops/session_lock.c) */
    gw_set_acq acq;
    lk_many items[LK_MANY_MAX];
    gw_waiter waiter;
    char text[];                         /* owner, key, then the names, NUL-terminated */
};

/* gw_set_acq.sending: what the set waited through for its stripes ran before its call. */
static void set_sending(void *arg)
{
    struct gw_set_call *sc = arg;
    gw__wait_sending(sc->rt->waitq, &sc->waiter);
}

/* The attempt, on a thread of the set pipeline. */
static void set_work(gw_job *job)
{
    struct gw_set_call *sc = job->arg;
    gw_rt *rt = sc->rt;
    lk_client *c = gw__client(rt);

    if (c == NULL) {
        sc->acq.lk = LK_ENOMEM;
        snprintf(sc->acq.err, sizeof sc->acq.err, "out of memory");
        return;
    }
    /* How much longer the set waits if held: a waiting writer holds new readers back, and a
     * reader held back for a writer is woken by the writer's release. */
    int64_t left = sc->wants_wait ? sc->deadline_ms - gw__now_ms() : 0;
    left = left > 0 ? (left < LK_WAIT_MAX_MS ? left : LK_WAIT_MAX_MS) : 0;
    for (size_t i = 0; i < sc->n; i++) {
        sc->items[i].others_waiting =
            gw__wait_others(rt->waitq, &sc->waiter, sc->items[i].resource);
        sc->items[i].wait_ms = left;
    }
    sc->acq.items = sc->items;
    sc->acq.n = sc->n;
    sc->acq.owner = sc->owner;
    sc->acq.idem_key = sc->idem_key[0] != '\0' ? sc->idem_key : NULL;
    sc->acq.fair = sc->fair;
    sc->acq.shared = sc->shared;
    sc->acq.sending = set_sending;
    sc->acq.sending_arg = sc;
    if (gw__session_set_lease(rt, c, &sc->ses, &sc->ttl_ms, &sc->acq.lk, sc->acq.err,
                              sizeof sc->acq.err) != 0) {
        return;
    }
    sc->acq.lease_ms = sc->ttl_ms;
    gw__fence_acquire_set(&rt->fence, c, &sc->acq);
    gw__note_redis(rt, sc->acq.lk);
    atomic_fetch_add(&rt->metrics.floor_corrections, (unsigned)sc->acq.floor_corrections);
    if (sc->acq.lk == LK_ACQUIRED && sc->acq.cover == STORE_OK) {
        gw__session_set_join(rt, c, &sc->ses, sc->owner, sc->idem_key, sc->items, sc->n,
                             sc->acq.err, sizeof sc->acq.err);
    }
}

static enum MHD_Result set_attempt(gw_request *req, struct gw_set_call *sc)
{
    if (sc->target >= 0 &&
        gw__wait_begin(sc->rt->waitq, &sc->waiter, sc->items[sc->target].resource) != 0) {
        sc->target = -1; /* without memory it does not wait: this attempt is its last */
        sc->wants_wait = 0;
    }
    sc->stage = SET_WORKING;
    sc->looked = 0;
    return gw__pipe_offload(req, sc->rt->sets, sc, &sc->job, set_work);
}

/* A give-back of a set whose answer did not reach its client, answered by nobody. */
struct set_errand {
    gw_job job;
    gw_rt *rt;
    size_t n;
    int uncount;                         /* its holds were counted in locks_held */
    const char *owner;
    const char *idem_key;
    lk_many items[LK_MANY_MAX];
    char text[];
};

static void errand_work(gw_job *job)
{
    struct set_errand *e = job->arg;
    lk_client *c = gw__client(e->rt);
    if (c != NULL) {
        lk_undo_many(c, e->items, e->n, e->owner, e->idem_key);
        for (size_t i = 0; i < e->n; i++) {
            if (e->uncount && e->items[i].undone && e->items[i].res.holds == 1 &&
                !e->items[i].res.replayed) {
                atomic_fetch_sub(&e->rt->metrics.locks_held, 1);
            }
        }
    }
}

static int errand_done(gw_job *job)
{
    free(job->arg);
    return 1;
}

/* Sends the give-back of sc's granted set (its items ACQUIRED). Out of memory, the holds
 * end with their leases. */
static void give_back(struct gw_set_call *sc, int uncount)
{
    size_t olen = strlen(sc->owner) + 1, ilen = strlen(sc->idem_key) + 1, nlen = 0;
    for (size_t i = 0; i < sc->n; i++) {
        nlen += strlen(sc->items[i].resource) + 1;
    }
    struct set_errand *e = calloc(1, sizeof *e + olen + ilen + nlen);
    if (e == NULL) {
        return;
    }
    char *p = e->text;
    memcpy(p, sc->owner, olen);
    e->owner = p;
    p += olen;
    memcpy(p, sc->idem_key, ilen);
    e->idem_key = ilen > 1 ? p : NULL;
    p += ilen;
    e->rt = sc->rt;
    e->n = sc->n;
    e->uncount = uncount;
    for (size_t i = 0; i < sc->n; i++) {
        size_t l = strlen(sc->items[i].resource) + 1;
        e->items[i] = sc->items[i];
        memcpy(p, sc->items[i].resource, l);
        e->items[i].resource = p;
        p += l;
    }
    e->job.work = errand_work;
    e->job.done = errand_done;
    e->job.arg = e;
    gw__pipe_submit(sc->rt->sets, &e->job);
}

/* 1 when every grant of the set replayed an earlier answer (it took nothing). */
static int all_replayed(const struct gw_set_call *sc)
{
    for (size_t i = 0; i < sc->n; i++) {
        if (!sc->items[i].res.replayed) {
            return 0;
        }
    }
    return 1;
}

static void count(gw_request *req, gw_acquire_outcome o)
{
    atomic_fetch_add(&req->rt->metrics.acquire[o], 1);
}

/* 200 {"owner", "ttl_ms", "mode", "locks": [{"resource", "token", "mode"}, ...]} in the
 * order asked. */
static enum MHD_Result answer_granted(gw_request *req, struct gw_set_call *sc)
{
    json_t *locks = json_array();
    int64_t ttl = sc->ttl_ms;
    int replayed = 1;
    const char *mode = sc->shared ? "shared" : "exclusive";

    for (size_t i = 0; i < sc->n; i++) {
        const lk_result *r = &sc->items[i].res;
        json_array_append_new(locks, json_pack("{s:s, s:I, s:s}", "resource",
                                               sc->items[i].resource, "token",
                                               (json_int_t)r->token, "mode", mode));
        if (r->ttl_ms > 0) {
            ttl = r->ttl_ms; /* a replay reports the lease first granted */
        }
        replayed &= r->replayed;
        if (!r->replayed && r->holds == 1) {
            atomic_fetch_add(&req->rt->metrics.locks_held, 1);
        }
    }
    count(req, replayed ? GW_ACQ_replayed : GW_ACQ_acquired);
    sc->acquired = (unsigned char)!replayed;
    return gw__send_json(req, MHD_HTTP_OK,
                         json_pack("{s:s, s:I, s:s, s:o}", "owner", sc->owner, "ttl_ms",
                                   (json_int_t)ttl, "mode", mode, "locks", locks));
}

/* 409 locked naming the held resources, retry_after_ms the longest of their leases. */
static enum MHD_Result answer_locked(gw_request *req, struct gw_set_call *sc)
{
    json_t *held = json_array();
    int64_t retry_ms = 0;
    char retry[24];

    for (size_t i = 0; i < sc->n; i++) {
        if (sc->items[i].status == LK_HELD) {
            json_array_append_new(held, json_string(sc->items[i].resource));
            if (sc->items[i].res.ttl_ms > retry_ms) {
                retry_ms = sc->items[i].res.ttl_ms;
            }
        }
    }
    count(req, GW_ACQ_locked);
    snprintf(retry, sizeof retry, "%lld", (long long)((retry_ms + 999) / 1000));
    struct MHD_Response *resp = gw__error_response(
        "locked", json_pack("{s:o, s:I}", "resources", held, "retry_after_ms",
                            (json_int_t)retry_ms),
        "%s of the set is held by another owner; nothing of the set was taken",
        json_string_value(json_array_get(held, 0)) != NULL
            ? json_string_value(json_array_get(held, 0)) : "a resource");
    if (resp != NULL) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, retry);
    }
    return gw__queue(req, MHD_HTTP_CONFLICT, resp);
}

/* 409 mode_mismatch naming the resources this owner holds in the other mode. */
static enum MHD_Result answer_wrong_mode(gw_request *req, struct gw_set_call *sc)
{
    json_t *other = json_array();

    for (size_t i = 0; i < sc->n; i++) {
        if (sc->items[i].status == LK_WRONG_MODE) {
            json_array_append_new(other, json_string(sc->items[i].resource));
        }
    }
    count(req, GW_ACQ_invalid);
    const char *first = json_string_value(json_array_get(other, 0));
    return gw__send_error(req, MHD_HTTP_CONFLICT, "mode_mismatch",
                          json_pack("{s:o, s:s}", "resources", other, "mode",
                                    sc->shared ? "shared" : "exclusive"),
                          "this owner holds %s in the other mode; release it first; nothing "
                          "of the set was taken",
                          first != NULL ? first : "a resource of the set");
}

/* A shared set just granted: this gateway's parked waiters of each member it marked wanted
 * may join now, as after a single shared grant (gw__lock_hand_on). */
static void hand_on(struct gw_set_call *sc)
{
    for (size_t i = 0; i < sc->n; i++) {
        const lk_many *it = &sc->items[i];
        if (it->others_waiting && !it->res.replayed) {
            gw__lock_hand_on(sc->rt, it->resource);
        }
    }
}

/* The wait is over: answer what the last attempt found. */
static enum MHD_Result answer(gw_request *req, struct gw_set_call *sc)
{
    gw_set_acq *a = &sc->acq;

    gw__wait_end(sc->rt->waitq, &sc->waiter, -1, 0);
    if (sc->ses.lk != LK_OK) {
        count(req, sc->ses.lk == LK_NOT_OWNER ? GW_ACQ_invalid : GW_ACQ_error);
        return gw__session_refused(req, sc->ses.lease_known, sc->ses.lk, sc->ses.store,
                                   a->err);
    }
    if (a->lk == LK_ACQUIRED && a->cover == STORE_OK) {
        gw_peer peer = all_replayed(sc) ? GW_PEER_OPEN : gw__conn_peer(req->conn);
        if (peer == GW_PEER_GONE) {
            give_back(sc, 0); /* the client hung up while the set was taken */
            count(req, GW_ACQ_abandoned);
            return MHD_NO;
        }
        /* A half-closed client still reads: answered; completion looks again. */
        sc->eof = (unsigned char)(peer == GW_PEER_EOF);
        if (sc->shared) {
            hand_on(sc);
        }
        return answer_granted(req, sc);
    }
    if (a->lk == LK_ACQUIRED && sc->shared) {
        atomic_fetch_add(&sc->rt->metrics.ledger_uncovered, 1);
        count(req, GW_ACQ_error);
        return gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "backend_unavailable", NULL,
                              "storage could not record the shared mark of token %lld of "
                              "the set; nothing of the set was taken, retry",
                              (long long)a->uncovered);
    }
    if (a->lk == LK_ACQUIRED) {
        count(req, GW_ACQ_unavailable);
        return gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "backend_unavailable", NULL,
                              "the token ledger did not cover token %lld of the set (Redis "
                              "lost data or disagrees with another gateway's); nothing of "
                              "the set was taken, retry",
                              (long long)a->uncovered);
    }
    if (a->cover != STORE_OK) {
        count(req, GW_ACQ_unavailable);
        return gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "backend_unavailable", NULL,
                              "storage could not be read to fence the tokens");
    }
    if (a->lk == LK_HELD) {
        return answer_locked(req, sc);
    }
    if (a->lk == LK_WRONG_MODE) {
        return answer_wrong_mode(req, sc);
    }
    count(req, a->lk == LK_EUNAVAILABLE     ? GW_ACQ_unavailable
               : a->lk == LK_EIDEMPOTENCY ? GW_ACQ_idempotency_conflict
               : a->lk == LK_EINVAL       ? GW_ACQ_invalid
                                          : GW_ACQ_error);
    return gw__send_lk_error(req, a->err, a->lk);
}

/* The held resource to wait on: the one registered on when still held, else the first. */
static int held_target(const struct gw_set_call *sc)
{
    if (sc->target >= 0 && sc->items[sc->target].status == LK_HELD) {
        return sc->target;
    }
    for (size_t i = 0; i < sc->n; i++) {
        if (sc->items[i].status == LK_HELD) {
            return (int)i;
        }
    }
    return -1;
}

/* WORKING, resumed: answer, or wait. */
static enum MHD_Result set_answered(gw_request *req, struct gw_set_call *sc)
{
    int64_t left = sc->deadline_ms - gw__now_ms();
    int t = sc->acq.lk == LK_HELD ? held_target(sc) : -1;

    if (!sc->wants_wait || sc->last || left <= 0 || t < 0) {
        return answer(req, sc);
    }
    if (t != sc->target) {
        /* Register on the held resource first, then attempt again: a park must follow an
         * attempt made after its registration, or a release in between would be missed. */
        if (sc->target >= 0) {
            gw__wait_end(sc->rt->waitq, &sc->waiter, -1, 0);
        }
        sc->target = t;
        return set_attempt(req, sc);
    }
    const lk_result *r = &sc->items[t].res;
    sc->stage = SET_PARKED;
    switch (gw__wait_park(sc->rt->waitq, &sc->waiter, req->conn, sc->deadline_ms,
                          r->ttl_ms >= 0 ? r->ttl_ms : -1, r->holder_token, -1)) {
    case GW_PARKED:
        return MHD_YES;
    case GW_PARK_RETRY:
        return set_attempt(req, sc);
    case GW_PARK_SHUTDOWN:
        gw__wait_end(sc->rt->waitq, &sc->waiter, -1, 0);
        count(req, GW_ACQ_shutting_down);
        return gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "shutting_down", NULL,
                              "the gateway is shutting down; retry on another instance");
    case GW_PARK_FULL:
        gw__wait_end(sc->rt->waitq, &sc->waiter, -1, 0);
        count(req, GW_ACQ_unavailable);
        return gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "too_many_waiters",
                              json_pack("{s:i}", "max_waiters", sc->rt->cfg->max_waiters),
                              "%d requests are waiting already (--max-waiters)",
                              sc->rt->cfg->max_waiters);
    case GW_PARK_NOMEM:
        break;
    }
    return answer(req, sc);
}

/* PARKED, resumed by waiters.c. */
static enum MHD_Result set_woken(gw_request *req, struct gw_set_call *sc)
{
    gw_wake reason = sc->waiter.reason;

    sc->waiter.state = GW_WAITER_IDLE;
    MHD_set_connection_option(req->conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    MHD_set_connection_option(req->conn, MHD_CONNECTION_OPTION_TIMEOUT,
                              (unsigned int)GW_CONN_TIMEOUT_S);
    if (reason == GW_WAKE_SHUTDOWN) {
        gw__wait_end(sc->rt->waitq, &sc->waiter, -1, 0);
        count(req, GW_ACQ_shutting_down);
        return gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "shutting_down", NULL,
                              "the gateway is shutting down; retry on another instance");
    }
    if (reason == GW_WAKE_DISCONNECT || gw__conn_peer(req->conn) != GW_PEER_OPEN) {
        gw__wait_end(sc->rt->waitq, &sc->waiter, -1, 0);
        count(req, GW_ACQ_abandoned);
        return MHD_NO;
    }
    sc->last = (unsigned char)(reason == GW_WAKE_DEADLINE);
    return set_attempt(req, sc);
}

static enum MHD_Result set_resumed(gw_request *req)
{
    struct gw_set_call *sc = req->op_state;
    if (sc->stage == SET_PARKED) {
        return set_woken(req, sc);
    }
    sc->looked = 1;
    return set_answered(req, sc);
}

/* Takes the waiting places a waiting set needs, as a single /lock does (ops/lock.c). */
static void take_places(gw_request *req, struct gw_set_call *sc)
{
    sc->client_place = -1;
    if (!sc->wants_wait) {
        return;
    }
    sc->wait_place = (unsigned char)gw__loops_wait_take(req->rt->loops, req->slot);
    sc->wants_wait = sc->wait_place;
    if (sc->wants_wait && req->client != NULL && req->rt->cfg->clients_file[0] != '\0') {
        int n = req->rt->cfg->max_waiters;
        sc->client_place = gw__metrics_client_wait_take(&req->rt->metrics, req->client->name,
                                                        n - n / 8 > 0 ? n - n / 8 : 1);
        sc->wants_wait = sc->client_place >= 0;
    }
}

static enum MHD_Result set_lock_start(gw_request *req)
{
    json_t *root = NULL;
    gw_set_args s;
    enum MHD_Result result = MHD_YES;

    gw_session_set ses;
    if (gw__parse_object(req, &root, &result) != 0 ||
        gw__set_args(req, root, GW_SET_LOCK, &s, &result) != 0 ||
        gw__session_set_begin(req, root, &ses, &result) != 0) {
        count(req, GW_ACQ_invalid);
        json_decref(root);
        return result;
    }
    if (s.a.fair && strncmp(req->rt->cfg->redis_url, "redlock://", 10) == 0) {
        count(req, GW_ACQ_invalid);
        json_decref(root);
        return gw__send_error(req, MHD_HTTP_BAD_REQUEST, "fair_unavailable",
                              json_pack("{s:s}", "topology", "redlock"),
                              "fair locks are not available on the redlock topology");
    }
    const char *idem = s.a.idem_key != NULL ? s.a.idem_key : "";
    size_t olen = strlen(s.a.owner) + 1, ilen = strlen(idem) + 1, nlen = 0;
    for (size_t i = 0; i < s.n; i++) {
        nlen += strlen(s.names[i]) + 1;
    }
    struct gw_set_call *sc = calloc(1, sizeof *sc + olen + ilen + nlen);
    if (sc == NULL) {
        json_decref(root);
        return MHD_NO;
    }
    char *p = sc->text;
    memcpy(p, s.a.owner, olen);
    sc->owner = p;
    p += olen;
    memcpy(p, idem, ilen);
    sc->idem_key = p;
    p += ilen;
    for (size_t i = 0; i < s.n; i++) {
        size_t l = strlen(s.names[i]) + 1;
        memcpy(p, s.names[i], l);
        sc->items[i].resource = p;
        p += l;
    }
    sc->ses = ses;
    json_decref(root);
    sc->rt = req->rt;
    sc->n = s.n;
    sc->ttl_ms = s.a.ttl_ms;
    sc->fair = (unsigned char)s.a.fair;
    sc->shared = (unsigned char)s.a.shared;
    sc->wants_wait = (unsigned char)(s.a.wait_ms > 0);
    sc->deadline_ms = gw__now_ms() + s.a.wait_ms;
    sc->target = -1;
    sc->waiter.fd = -1;
    sc->waiter.timer.idx = GW_TIMER_OFF;
    sc->waiter.fair = sc->fair;
    sc->waiter.set = 1;
    take_places(req, sc);
    req->op_state = sc;
    return set_attempt(req, sc);
}

static void set_lock_completed(gw_request *req, enum MHD_RequestTerminationCode toe)
{
    struct gw_set_call *sc = req->op_state;

    gw__wait_end(req->rt->waitq, &sc->waiter, -1, 0);
    /* A client that had closed its side and was answered: if it had closed for good, the
     * answer drew a reset (at once over loopback). */
    int reset = sc->eof && gw__conn_peer(req->conn) == GW_PEER_GONE;
    if (sc->acquired && (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK || reset)) {
        /* The answer never reached the client: nobody will use these holds. */
        give_back(sc, 1);
        atomic_fetch_sub(&req->rt->metrics.acquire[GW_ACQ_acquired], 1);
        count(req, GW_ACQ_abandoned);
    } else if (!sc->looked && sc->stage == SET_WORKING && sc->acq.lk == LK_ACQUIRED &&
               sc->acq.cover == STORE_OK && sc->ses.lk == LK_OK && !all_replayed(sc)) {
        /* The attempt was answered, but libmicrohttpd found the client gone when it was
         * resumed and ended the request without resuming the operation: nobody looked at
         * the grant. Give it back, as lock.c does for one resource. */
        give_back(sc, 0);
        count(req, GW_ACQ_abandoned);
    }
    if (sc->wait_place) {
        gw__loops_wait_give(req->rt->loops, req->slot);
    }
    gw__metrics_client_wait_give(&req->rt->metrics, sc->client_place);
    gw__wait_free(req->rt->waitq, &sc->waiter, sc);
    req->op_state = NULL;
}

const gw_op gw__op_lock_set = {set_lock_start, set_resumed, set_lock_completed};

enum MHD_Result gw__set_start(gw_request *req, gw_set_kind kind)
{
    req->op = kind == GW_SET_LOCK     ? &gw__op_lock_set
              : kind == GW_SET_RENEW ? &gw__op_renew_set
                                     : &gw__op_unlock_set;
    return req->op->start(req);
}
