/*
 * POST /lock, POST /unlock, POST /renew and GET /locks/{resource}.
 *
 * Token safety. Every acquisition passes locklib a floor, and the token it mints is always
 * above it:
 *     floor = max(store_ledger_floor()   -- >= every token any earlier process handed out,
 *                 srv->max_token          -- the largest token this process handed out,
 *                 store_highest(resource) -- the highest token that has written it).
 * So a Redis that lost its counter (restart without AOF, failover, FLUSHALL) cannot hand out
 * a token twice, even combined with a gateway restart. Before a freshly minted token leaves
 * this process, store_ledger_cover() makes the ledger's durable ceiling cover it; if that
 * fails the hold is released again and the client gets 503, so no token is ever handed out
 * that a later process could reissue.
 *
 * A 503 does not always mean "not taken": when Redis accepted the acquire script but its
 * answer came too late (a stalled Redis, a dropped connection), the lock may be held by the
 * owner the client sent or the one generated for it. Nobody learned a generated owner, so
 * that hold simply expires with its lease; a client that sent its own owner and retries
 * re-enters it (holds + 1, same token). Sending an Idempotency-Key makes the retry replay the
 * first answer instead.
 *
 * Owners are capabilities: whoever knows one can renew, release or re-enter the lock. They
 * appear only in the /lock answer to the caller who asked, never in a log line, /locks or
 * /metrics.
 */
#include <stdio.h>
#include <string.h>

#include "gw_internal.h"

#define WAIT_SLICE_MS 1000 /* a waiting /lock notices shutdown within this */

typedef struct lock_args {
    const char *resource;
    const char *owner;
    const char *idem_key;
    int64_t ttl_ms;
    int64_t wait_ms;
    char owner_buf[LK_OWNER_MAX + 1];
    int owner_generated;
} lock_args;

static void note_redis(gw_server *srv, lk_status st)
{
    atomic_store(&srv->metrics.redis_up, st == LK_EUNAVAILABLE ? 0 : 1);
}

static void count_acquire(gw_server *srv, gw_acquire_outcome o)
{
    atomic_fetch_add(&srv->metrics.acquire[o], 1);
}

/* The owner for a /lock without one. Without an Idempotency-Key it is 128 fresh random bits.
 * With a key it is derived from (resource, key) under this process's random secret, so a
 * retried request gets the same owner and locklib replays the first answer instead of
 * refusing the key. Nobody without the secret can compute it. A retry that reaches another
 * gateway process (or this one after a restart) gets a different owner and a 422: callers
 * that retry across processes send their own owner. */
static void generate_owner(gw_server *srv, lock_args *a)
{
    if (a->idem_key == NULL) {
        lk_random_id(a->owner_buf);
    } else {
        char name[LK_RESOURCE_MAX + LK_OWNER_MAX + 2];
        uuid_t derived;
        int n = snprintf(name, sizeof name, "%s\n%s", a->resource, a->idem_key);
        uuid_generate_sha1(derived, srv->owner_secret, name, (size_t)n);
        for (int i = 0; i < 16; i++) {
            snprintf(a->owner_buf + 2 * i, 3, "%02x", derived[i]);
        }
    }
    a->owner = a->owner_buf;
    a->owner_generated = 1;
}

/* Reads and checks the /lock body. Returns 0, or -1 after queuing the 400. */
static int read_lock_args(gw_request *req, json_t *root, lock_args *a, enum MHD_Result *result)
{
    memset(a, 0, sizeof *a);
    if (gw__field_name(req, root, "resource", 1, &a->resource, result) != 0 ||
        gw__field_name(req, root, "owner", 0, &a->owner, result) != 0 ||
        gw__field_int(req, root, "ttl_ms", GW_DEFAULT_TTL_MS, LK_LEASE_MIN_MS, LK_LEASE_MAX_MS,
                      &a->ttl_ms, result) != 0 ||
        gw__field_int(req, root, "wait_ms", 0, 0, GW_MAX_WAIT_MS, &a->wait_ms, result) != 0 ||
        gw__idempotency_key(req, &a->idem_key, result) != 0) {
        return -1;
    }
    if (a->owner == NULL) {
        generate_owner(req->srv, a);
    }
    return 0;
}

/* The floor for an acquisition of `resource` (see the file comment). */
static store_status compute_floor(gw_server *srv, const char *resource, int64_t *floor)
{
    uint64_t highest = 0;
    store_status st = store_highest(srv->st, resource, &highest);
    if (st != STORE_OK) {
        return st;
    }
    uint64_t f = store_ledger_floor(srv->st);
    uint64_t mine = (uint64_t)atomic_load(&srv->max_token);
    if (mine > f) {
        f = mine;
    }
    if (highest > f) {
        f = highest;
    }
    *floor = (int64_t)f;
    return STORE_OK;
}

static void raise_max_token(gw_server *srv, int64_t token)
{
    long long seen = atomic_load(&srv->max_token);
    while (token > seen && !atomic_compare_exchange_weak(&srv->max_token, &seen, token)) {
    }
}

/* Acquires, waiting up to a->wait_ms in slices so that a shutdown is noticed within a
 * slice. Each slice recomputes the floor, since another holder may have written meanwhile.
 * *stopped is set when the wait was cut short by shutdown; *store_failed when the floor
 * could not be read (then the return value is meaningless). */
static lk_status acquire_waiting(gw_request *req, lk_client *c, const lock_args *a,
                                 lk_result *res, int *stopped, int *store_failed)
{
    int64_t deadline = gw__now_us() / 1000 + a->wait_ms;
    lk_status st;

    *stopped = 0;
    *store_failed = 0;
    for (;;) {
        int64_t floor = 0;
        if (compute_floor(req->srv, a->resource, &floor) != STORE_OK) {
            *store_failed = 1;
            return LK_EREDIS;
        }
        int64_t left = deadline - gw__now_us() / 1000;
        int64_t slice = left < WAIT_SLICE_MS ? left : WAIT_SLICE_MS;
        /* lk_acquire_wait blocks this pool thread while it waits: the other connections of
         * this thread wait too. Moving waits to MHD suspend/resume is a later issue. */
        st = lk_acquire_wait(c, a->resource, a->owner, a->ttl_ms, floor, a->idem_key,
                             slice > 0 ? slice : 0, res);
        if (st != LK_HELD || deadline - gw__now_us() / 1000 <= 0) {
            return st;
        }
        if (atomic_load(&req->srv->shutting_down)) {
            *stopped = 1;
            return st;
        }
    }
}

/* Makes the ledger cover a freshly minted token before it is handed out. On failure the
 * hold just taken is given back and 503 is queued; returns -1. */
static int cover_token(gw_request *req, lk_client *c, const lock_args *a, const lk_result *res,
                       enum MHD_Result *result)
{
    if (res->replayed) {
        return 0; /* covered when it was first handed out */
    }
    store_status st = store_ledger_cover(req->srv->st, (uint64_t)res->token);
    if (st == STORE_OK) {
        return 0;
    }
    lk_result ignored;
    /* If this release fails too (Redis gone), the hold expires with its lease. */
    lk_release(c, a->resource, a->owner, NULL, &ignored);
    gw__log_event(req->srv->cfg, "error", "token ledger: %s", store_status_str(st));
    count_acquire(req->srv, GW_ACQ_error);
    *result = gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "backend_unavailable", NULL,
                             "storage could not record the fencing token; the lock was not "
                             "taken");
    return -1;
}

static enum MHD_Result answer_acquired(gw_request *req, const lock_args *a, const lk_result *res)
{
    gw_server *srv = req->srv;

    if (res->replayed) {
        count_acquire(srv, GW_ACQ_replayed);
    } else if (res->holds > 1) {
        count_acquire(srv, GW_ACQ_reentered);
    } else {
        count_acquire(srv, GW_ACQ_acquired);
        atomic_fetch_add(&srv->metrics.locks_held, 1);
    }
    if (res->floor_raised) {
        atomic_fetch_add(&srv->metrics.floor_corrections, 1);
    }
    raise_max_token(srv, res->token);
    return gw__send_json(req, MHD_HTTP_OK,
                         json_pack("{s:s, s:s, s:I, s:I, s:I}", "resource", a->resource,
                                   "owner", a->owner, "token", (json_int_t)res->token, "holds",
                                   (json_int_t)res->holds, "ttl_ms", (json_int_t)a->ttl_ms));
}

static enum MHD_Result answer_locked(gw_request *req, const lock_args *a, const lk_result *res)
{
    char retry[24];
    int64_t retry_ms = res->ttl_ms > 0 ? res->ttl_ms : 0;

    count_acquire(req->srv, GW_ACQ_locked);
    snprintf(retry, sizeof retry, "%lld", (long long)((retry_ms + 999) / 1000));
    struct MHD_Response *resp = gw__error_response(
        "locked",
        json_pack("{s:s, s:I}", "resource", a->resource, "retry_after_ms", (json_int_t)retry_ms),
        "%s is held by another owner", a->resource);
    if (resp != NULL) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, retry);
    }
    return gw__queue(req, MHD_HTTP_CONFLICT, resp);
}

static enum MHD_Result lock_with_args(gw_request *req, const lock_args *a)
{
    gw_server *srv = req->srv;
    lk_client *c = gw__client(srv);
    lk_result res;
    int stopped = 0, store_failed = 0;
    enum MHD_Result result = MHD_YES;

    if (c == NULL) {
        count_acquire(srv, GW_ACQ_error);
        return gw__send_error(req, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error", NULL,
                              "cannot create a Redis client");
    }
    lk_status st = acquire_waiting(req, c, a, &res, &stopped, &store_failed);
    if (store_failed) {
        count_acquire(srv, GW_ACQ_unavailable);
        return gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "backend_unavailable", NULL,
                              "storage could not be read to fence the token");
    }
    note_redis(srv, st);
    if (a->wait_ms > 0) {
        /* The wait counted as idle time for MHD's connection timeout: restart the timer. */
        MHD_set_connection_option(req->conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
        MHD_set_connection_option(req->conn, MHD_CONNECTION_OPTION_TIMEOUT,
                                  (unsigned int)GW_CONN_TIMEOUT_S);
    }
    if (st == LK_ACQUIRED) {
        if (cover_token(req, c, a, &res, &result) != 0) {
            return result;
        }
        return answer_acquired(req, a, &res);
    }
    if (st == LK_HELD && stopped) {
        count_acquire(srv, GW_ACQ_shutting_down);
        return gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "shutting_down", NULL,
                              "the gateway is shutting down; retry on another instance");
    }
    if (st == LK_HELD) {
        return answer_locked(req, a, &res);
    }
    count_acquire(srv, st == LK_EUNAVAILABLE     ? GW_ACQ_unavailable
                       : st == LK_EIDEMPOTENCY   ? GW_ACQ_idempotency_conflict
                       : st == LK_EINVAL         ? GW_ACQ_invalid
                                                 : GW_ACQ_error);
    return gw__send_lk_error(req, c, st);
}

enum MHD_Result gw__handle_lock(gw_request *req)
{
    json_t *root = NULL;
    lock_args a;
    enum MHD_Result result = MHD_YES;

    if (gw__parse_object(req, &root, &result) != 0 || read_lock_args(req, root, &a, &result) != 0) {
        count_acquire(req->srv, GW_ACQ_invalid);
        json_decref(root);
        return result;
    }
    result = lock_with_args(req, &a);
    json_decref(root);
    return result;
}

/* Reads {"resource", "owner"} (both required), ttl_ms when renewing, and the
 * Idempotency-Key, then runs lk_renew (renew) or lk_release on this thread's client.
 * Returns 0 with *st and *res, or -1 after queuing the 400. *root is the caller's to free. */
static int owner_call(gw_request *req, json_t **root, lock_args *a, int renew, lk_client **c,
                      lk_status *st, lk_result *res, enum MHD_Result *result)
{
    memset(a, 0, sizeof *a);
    memset(res, 0, sizeof *res);
    if (gw__parse_object(req, root, result) != 0 ||
        gw__field_name(req, *root, "resource", 1, &a->resource, result) != 0 ||
        gw__field_name(req, *root, "owner", 1, &a->owner, result) != 0 ||
        (renew && gw__field_int(req, *root, "ttl_ms", GW_DEFAULT_TTL_MS, LK_LEASE_MIN_MS,
                                LK_LEASE_MAX_MS, &a->ttl_ms, result) != 0) ||
        gw__idempotency_key(req, &a->idem_key, result) != 0) {
        return -1;
    }
    *c = gw__client(req->srv);
    if (*c == NULL) {
        *st = LK_ENOMEM;
    } else if (renew) {
        *st = lk_renew(*c, a->resource, a->owner, a->ttl_ms, a->idem_key, res);
    } else {
        *st = lk_release(*c, a->resource, a->owner, a->idem_key, res);
    }
    note_redis(req->srv, *st);
    return 0;
}

static enum MHD_Result not_owner(gw_request *req, const char *resource)
{
    return gw__send_error(req, MHD_HTTP_CONFLICT, "not_owner",
                          json_pack("{s:s}", "resource", resource),
                          "this owner does not hold %s (it expired or belongs to someone else)",
                          resource);
}

static gw_release_outcome release_outcome(lk_status st, const lk_result *res)
{
    if ((st == LK_RELEASED || st == LK_STILL_HELD) && res->replayed) {
        return GW_REL_replayed;
    }
    switch (st) {
    case LK_RELEASED: return GW_REL_released;
    case LK_STILL_HELD: return GW_REL_still_held;
    case LK_NOT_OWNER: return GW_REL_not_owner;
    case LK_EUNAVAILABLE: return GW_REL_unavailable;
    case LK_EIDEMPOTENCY: return GW_REL_idempotency_conflict;
    case LK_EINVAL: return GW_REL_invalid;
    default: return GW_REL_error;
    }
}

static gw_renew_outcome renew_outcome(lk_status st, const lk_result *res)
{
    switch (st) {
    case LK_RENEWED: return res->replayed ? GW_REN_replayed : GW_REN_renewed;
    case LK_NOT_OWNER: return GW_REN_not_owner;
    case LK_EUNAVAILABLE: return GW_REN_unavailable;
    case LK_EIDEMPOTENCY: return GW_REN_idempotency_conflict;
    case LK_EINVAL: return GW_REN_invalid;
    default: return GW_REN_error;
    }
}

/* The 200 answers: {"resource", "released", "holds"} for /unlock and
 * {"resource", "token", "ttl_ms"} for /renew. */
static enum MHD_Result answer_owner_call(gw_request *req, const lock_args *a, int renew,
                                         lk_status st, const lk_result *res)
{
    if (renew) {
        return gw__send_json(req, MHD_HTTP_OK,
                             json_pack("{s:s, s:I, s:I}", "resource", a->resource, "token",
                                       (json_int_t)res->token, "ttl_ms", (json_int_t)a->ttl_ms));
    }
    int released = st == LK_RELEASED;
    if (released && !res->replayed) {
        atomic_fetch_sub(&req->srv->metrics.locks_held, 1);
    }
    return gw__send_json(req, MHD_HTTP_OK,
                         json_pack("{s:s, s:b, s:I}", "resource", a->resource, "released",
                                   released, "holds", (json_int_t)(released ? 0 : res->holds)));
}

/* POST /unlock (renew 0) and POST /renew (renew 1): the same input, the same errors. */
static enum MHD_Result handle_owner_call(gw_request *req, int renew)
{
    gw_metrics *m = &req->srv->metrics;
    json_t *root = NULL;
    lock_args a;
    lk_result res;
    lk_client *c = NULL;
    lk_status st = LK_EINVAL;
    enum MHD_Result result = MHD_YES;

    int parsed = owner_call(req, &root, &a, renew, &c, &st, &res, &result) == 0;
    if (renew) {
        atomic_fetch_add(&m->renew[parsed ? renew_outcome(st, &res) : GW_REN_invalid], 1);
    } else {
        atomic_fetch_add(&m->release[parsed ? release_outcome(st, &res) : GW_REL_invalid], 1);
    }
    if (!parsed) {
        /* the 400 is queued */
    } else if (st == LK_RENEWED || st == LK_RELEASED || st == LK_STILL_HELD) {
        result = answer_owner_call(req, &a, renew, st, &res);
    } else if (st == LK_NOT_OWNER) {
        result = not_owner(req, a.resource);
    } else {
        result = gw__send_lk_error(req, c, st);
    }
    json_decref(root);
    return result;
}

enum MHD_Result gw__handle_unlock(gw_request *req)
{
    return handle_owner_call(req, 0);
}

enum MHD_Result gw__handle_renew(gw_request *req)
{
    return handle_owner_call(req, 1);
}

enum MHD_Result gw__handle_lock_status(gw_request *req)
{
    lk_lock_info info;
    enum MHD_Result result = MHD_YES;

    if (gw__path_resource(req, &result) != 0) {
        return result;
    }
    lk_client *c = gw__client(req->srv);
    lk_status st = c != NULL ? lk_lock_status(c, req->param, &info) : LK_ENOMEM;
    note_redis(req->srv, st);
    if (st != LK_OK) {
        return gw__send_lk_error(req, c, st);
    }
    if (!info.locked) {
        return gw__send_json(req, MHD_HTTP_OK,
                             json_pack("{s:s, s:b, s:I}", "resource", req->param, "locked", 0,
                                       "last_token", (json_int_t)info.last_token));
    }
    /* Never the owner: it is the capability to release the lock. */
    return gw__send_json(req, MHD_HTTP_OK,
                         json_pack("{s:s, s:b, s:I, s:I, s:I, s:I}", "resource", req->param,
                                   "locked", 1, "token", (json_int_t)info.token, "holds",
                                   (json_int_t)info.holds, "ttl_ms", (json_int_t)info.ttl_ms,
                                   "last_token", (json_int_t)info.last_token));
}
