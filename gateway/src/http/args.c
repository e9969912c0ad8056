/*
 * The arguments of POST /lock, /unlock and /renew: the body's fields and the Idempotency-Key
 * header, checked; for a /lock without an owner, the owner the gateway generates.
 */
#include <stdio.h>
#include <string.h>

#include "http/args.h"
#include "http/respond.h"

typedef gw_lock_args lock_args; /* see args.h */

/* The owner for a /lock without one. Without an Idempotency-Key it is 128 fresh random bits.
 * With a key it is derived from (resource, key) under the gateway's random secret (kept in
 * the data directory, so it survives restarts), so a retried request gets the same owner
 * and locklib replays the first answer instead of refusing the key. Nobody without the
 * secret can compute it. */
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

/* Reads an optional boolean field (false when absent). Returns 0, or -1 after queuing the
 * 400. */
static int field_bool(gw_request *req, json_t *root, const char *field, int *out,
                      enum MHD_Result *result)
{
    json_t *v = json_object_get(root, field);
    *out = 0;
    if (v == NULL) {
        return 0;
    }
    if (!json_is_boolean(v)) {
        *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                                 "field '%s' must be true or false", field);
        return -1;
    }
    *out = json_is_true(v);
    return 0;
}

static const char *const lock_fields[] = {"resource", "owner", "ttl_ms", "wait_ms", "fair",
                                          NULL};
static const char *const unlock_fields[] = {"resource", "owner", NULL};
static const char *const renew_fields[] = {"resource", "owner", "ttl_ms", NULL};

/* ttl_ms when the body has none: GW_DEFAULT_TTL_MS, or --max-ttl when that is shorter. */
static int64_t default_ttl_ms(const gw_request *req)
{
    long long max_ms = req->srv->cfg->max_ttl_ms;
    return max_ms < GW_DEFAULT_TTL_MS ? max_ms : GW_DEFAULT_TTL_MS;
}

int gw__lock_args(gw_request *req, json_t *root, lock_args *a, enum MHD_Result *result)
{
    memset(a, 0, sizeof *a);
    if (gw__fields_known(req, root, lock_fields, result) != 0 ||
        gw__field_name(req, root, "resource", 1, &a->resource, result) != 0 ||
        gw__authorize(req, a->resource, result) != 0 ||
        gw__field_name(req, root, "owner", 0, &a->owner, result) != 0 ||
        gw__field_int(req, root, "ttl_ms", default_ttl_ms(req), LK_LEASE_MIN_MS,
                      req->srv->cfg->max_ttl_ms, &a->ttl_ms, result) != 0 ||
        gw__field_int(req, root, "wait_ms", 0, 0, GW_MAX_WAIT_MS, &a->wait_ms, result) != 0 ||
        field_bool(req, root, "fair", &a->fair, result) != 0 ||
        gw__idempotency_key(req, &a->idem_key, result) != 0) {
        return -1;
    }
    if (a->owner == NULL) {
        generate_owner(req->srv, a);
    }
    return 0;
}

int gw__owner_args(gw_request *req, json_t *root, int renew, lock_args *a,
                   enum MHD_Result *result)
{
    memset(a, 0, sizeof *a);
    if (gw__fields_known(req, root, renew ? renew_fields : unlock_fields, result) != 0 ||
        gw__field_name(req, root, "resource", 1, &a->resource, result) != 0 ||
        gw__authorize(req, a->resource, result) != 0 ||
        gw__field_name(req, root, "owner", 1, &a->owner, result) != 0 ||
        (renew && gw__field_int(req, root, "ttl_ms", default_ttl_ms(req), LK_LEASE_MIN_MS,
                                req->srv->cfg->max_ttl_ms, &a->ttl_ms, result) != 0) ||
        gw__idempotency_key(req, &a->idem_key, result) != 0) {
        return -1;
    }
    return 0;
}
