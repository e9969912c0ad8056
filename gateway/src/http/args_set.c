/*
 * The arguments of a set of resources (args_set.h): "resources" instead of "resource", the
 * rest as for one resource (args.c).
 */
#include <stdio.h>
#include <string.h>

#include <uuid/uuid.h>

#include "base/config.h"
#include "http/args_set.h"
#include "http/respond.h"
#include "rt/gateway.h"

static const char *const lock_fields[] = {"resources", "owner", "ttl_ms", "wait_ms", "fair",
                                          "mode", "session", NULL};
static const char *const unlock_fields[] = {"resources", "owner", NULL};
static const char *const renew_fields[] = {"resources", "owner", "ttl_ms", NULL};

int gw__set_body(const gw_request *req)
{
    /* The text first, so that a one-resource body is parsed once (by the single path); then
     * the parse, so that a resource or owner named "resources" is not taken for the field.
     * A body that does not parse goes the single way, which names its error. */
    if (req->body == NULL || strstr(req->body, "\"resources\"") == NULL) {
        return 0;
    }
    json_t *root = json_loadb(req->body, req->body_len, 0, NULL);
    int set = json_is_object(root) && json_object_get(root, "resources") != NULL;
    json_decref(root);
    return set;
}

static int bad(gw_request *req, enum MHD_Result *result, const char *msg, const char *name)
{
    *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request",
                             name != NULL ? json_pack("{s:s}", "resource", name) : NULL,
                             msg, name != NULL ? name : "");
    return -1;
}

/* "resources": 2..LK_MANY_MAX distinct valid names, each authorized. */
static int read_names(gw_request *req, json_t *root, gw_set_args *s, enum MHD_Result *result)
{
    json_t *list = json_object_get(root, "resources");
    size_t i;
    json_t *v;

    if (!json_is_array(list)) {
        return bad(req, result, "field 'resources' must be an array of resource names%s",
                   NULL);
    }
    if (json_array_size(list) < GW_SET_MIN || json_array_size(list) > LK_MANY_MAX) {
        *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                                 "field 'resources' must name %d to %d resources (one "
                                 "resource: use 'resource')",
                                 GW_SET_MIN, LK_MANY_MAX);
        return -1;
    }
    json_array_foreach(list, i, v) {
        const char *name = json_string_value(v);
        if (name == NULL || strlen(name) != json_string_length(v) ||
            !lk_valid_resource(name)) {
            *result = gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", NULL,
                                     "field 'resources': entry %zu must be a resource name "
                                     "of 1 to %d bytes of " FG_NAME_CHARS,
                                     i, LK_RESOURCE_MAX);
            return -1;
        }
        for (size_t j = 0; j < i; j++) {
            if (strcmp(s->names[j], name) == 0) {
                return bad(req, result, "field 'resources' names %s twice", name);
            }
        }
        s->names[i] = name;
    }
    s->n = json_array_size(list);
    for (i = 0; i < s->n; i++) {
        if (gw__authorize(req, s->names[i], result) != 0) {
            return -1;
        }
    }
    return 0;
}

/* The name a generated owner is derived from with a key: the set's names, in order, under
 * the owner secret, so a retry of the same set with the same key gets the same owner. */
static void set_name(gw_server *srv, gw_set_args *s)
{
    char joined[LK_MANY_MAX * (LK_RESOURCE_MAX + 1) + 8];
    size_t len = 0;
    uuid_t h;

    for (size_t i = 0; i < s->n; i++) {
        size_t l = strlen(s->names[i]);
        memcpy(joined + len, s->names[i], l);
        len += l;
        joined[len++] = '\n';
    }
    uuid_generate_sha1(h, srv->owner_secret, joined, len);
    int off = snprintf(s->set_name, sizeof s->set_name, "set:");
    for (int i = 0; i < 16; i++) {
        off += snprintf(s->set_name + off, sizeof s->set_name - (size_t)off, "%02x", h[i]);
    }
}

int gw__set_args(gw_request *req, json_t *root, gw_set_kind kind, gw_set_args *s,
                 enum MHD_Result *result)
{
    gw_lock_args *a = &s->a;
    long long max_ms = req->rt->cfg->max_ttl_ms;
    int64_t def_ttl = max_ms < GW_DEFAULT_TTL_MS ? max_ms : GW_DEFAULT_TTL_MS;

    memset(s, 0, sizeof *s);
    if (json_object_get(root, "resource") != NULL) {
        return bad(req, result, "use 'resource' for one resource or 'resources' for a set, "
                   "not both%s", NULL);
    }
    if (gw__fields_known(req, root,
                         kind == GW_SET_LOCK     ? lock_fields
                         : kind == GW_SET_RENEW ? renew_fields
                                                : unlock_fields,
                         result) != 0 ||
        read_names(req, root, s, result) != 0 ||
        gw__field_name(req, root, "owner", kind != GW_SET_LOCK, &a->owner, result) != 0 ||
        (kind != GW_SET_UNLOCK &&
         gw__field_int(req, root, "ttl_ms", def_ttl, LK_LEASE_MIN_MS, max_ms, &a->ttl_ms,
                       result) != 0) ||
        (kind == GW_SET_LOCK &&
         gw__field_int(req, root, "wait_ms", 0, 0, GW_MAX_WAIT_MS, &a->wait_ms, result) != 0)) {
        return -1;
    }
    if (kind == GW_SET_LOCK) {
        json_t *fair = json_object_get(root, "fair");
        if (fair != NULL && !json_is_boolean(fair)) {
            return bad(req, result, "field 'fair' must be true or false%s", NULL);
        }
        a->fair = json_is_true(fair);
        if (gw__field_mode(req, root, &a->shared, result) != 0) {
            return -1; /* one mode for the whole set */
        }
    }
    if (gw__idempotency_key(req, &a->idem_key, result) != 0) {
        return -1;
    }
    set_name(req->srv, s);
    a->resource = s->set_name;
    return gw__lock_args_owner(req, a, kind == GW_SET_LOCK, result);
}
