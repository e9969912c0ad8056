/*
 * The arguments of POST /lock, /unlock and /renew: the body's fields and the Idempotency-Key
 * header, checked; for a /lock without an owner, the owner the gateway generates.
 */
#include <stdio.h>
#include <string.h>

#include "http/args.h"
#include "http/respond.h"
#include "rt/gateway.h"

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

/* "CLIENT:" + s into buf, unless s starts with it already and keep_bound. Returns 0, or -1
 * after queuing the 400 when the result is too long. */
static int bind_one(gw_request *req, const char *what, const char *s, int keep_bound,
                    char buf[LK_OWNER_MAX + 1], enum MHD_Result *result)
{
    const char *name = req->client->name;
    size_t nlen = strlen(name);
    char tmp[LK_OWNER_MAX + 1];

    size_t slen = strlen(s);
    if (keep_bound && strncmp(s, name, nlen) == 0 && s[nlen] == ':') {
        memcpy(tmp, s, slen + 1); /* a valid owner: at most LK_OWNER_MAX bytes */
    } else if (nlen + 1 + slen > LK_OWNER_MAX) {
        *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                                 "%s is too long: with the client's name in front ('%s:') it "
                                 "must fit in %d bytes",
                                 what, name, LK_OWNER_MAX);
        return -1;
    } else {
        memcpy(tmp, name, nlen);
        tmp[nlen] = ':';
        memcpy(tmp + nlen + 1, s, slen + 1);
    }
    memcpy(buf, tmp, sizeof tmp);
    return 0;
}

/* Binds the key (before an owner is derived from it) to the request's client, with
 * --clients only (args.h). Returns 0 or -1 after queuing the 400. */
static int bind_key(gw_request *req, lock_args *a, enum MHD_Result *result)
{
    if (req->client == NULL || req->rt->cfg->clients_file[0] == '\0' || a->idem_key == NULL) {
        return 0;
    }
    if (bind_one(req, "Idempotency-Key", a->idem_key, 0, a->idem_buf, result) != 0) {
        return -1;
    }
    a->idem_key = a->idem_buf;
    return 0;
}

/* Binds the owner to the request's client, with --clients only (args.h). */
static int bind_owner(gw_request *req, lock_args *a, enum MHD_Result *result)
{
    if (req->client == NULL || req->rt->cfg->clients_file[0] == '\0') {
        return 0;
    }
    if (bind_one(req, "owner", a->owner, 1, a->owner_buf, result) != 0) {
        return -1;
    }
    a->owner = a->owner_buf;
    return 0;
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
                                          "session", "mode", NULL};

int gw__field_mode(gw_request *req, json_t *root, int *shared, enum MHD_Result *result)
{
    json_t *v = json_object_get(root, "mode");
    *shared = 0;
    if (v == NULL) {
        return 0;
    }
    if (json_is_string(v) && strcmp(json_string_value(v), "exclusive") == 0) {
        return 0;
    }
    if (json_is_string(v) && strcmp(json_string_value(v), "shared") == 0) {
        *shared = 1;
        return 0;
    }
    *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                             "field 'mode' must be \"exclusive\" or \"shared\"");
    return -1;
}

static const char *const unlock_fields[] = {"resource", "owner", NULL};
static const char *const renew_fields[] = {"resource", "owner", "ttl_ms", NULL};

/* ttl_ms when the body has none: GW_DEFAULT_TTL_MS, or --max-ttl when that is shorter. */
static int64_t default_ttl_ms(const gw_request *req)
{
    long long max_ms = req->rt->cfg->max_ttl_ms;
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
                      req->rt->cfg->max_ttl_ms, &a->ttl_ms, result) != 0 ||
        gw__field_int(req, root, "wait_ms", 0, 0, GW_MAX_WAIT_MS, &a->wait_ms, result) != 0 ||
        field_bool(req, root, "fair", &a->fair, result) != 0 ||
        gw__field_mode(req, root, &a->shared, result) != 0 ||
        gw__idempotency_key(req, &a->idem_key, result) != 0 ||
        bind_key(req, a, result) != 0) {
        return -1;
    }
    if (a->owner == NULL) {
        generate_owner(req->srv, a);
    }
    return bind_owner(req, a, result);
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
                                req->rt->cfg->max_ttl_ms, &a->ttl_ms, result) != 0) ||
        gw__idempotency_key(req, &a->idem_key, result) != 0 || bind_key(req, a, result) != 0 ||
        bind_owner(req, a, result) != 0) {
        return -1;
    }
    return 0;
}

int gw__lock_args_owner(gw_request *req, lock_args *a, int generate, enum MHD_Result *result)
{
    if (bind_key(req, a, result) != 0) {
        return -1;
    }
    if (a->owner == NULL && generate) {
        generate_owner(req->srv, a);
    }
    return bind_owner(req, a, result);
}
