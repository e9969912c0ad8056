/*
 * fencectl lock A B C -- COMMAND: what a set of resources changes in fc_lock.c. The lock,
 * its renewals and its release name "resources" instead of "resource" (one request each,
 * every resource or none for the lock), and COMMAND gets every token:
 *   FENCING_TOKEN_<name>  one per resource, the name with every byte outside [A-Za-z0-9_]
 *                         as '_' (fc__env_name; two names that map to one variable are
 *                         refused before anything is locked);
 *   FENCING_TOKENS        all of them as one JSON object, {"orders.eu": 5, "stock": 9};
 *   FENCING_RESOURCES     the names, comma-separated, in the order given.
 * FENCING_TOKEN and FENCING_RESOURCE are those of a single resource only: with a set they
 * are removed, so a stale value inherited from a caller cannot be mistaken for one.
 */
#include "fc_internal.h"
#include "fc_lockset.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fc__set_names(json_t *body, const fc_options *o)
{
    if (body == NULL) {
        return -1;
    }
    if (o->nresources <= 1) {
        return json_object_set_new(body, "resource", json_string(o->resource));
    }
    json_t *list = json_array();
    for (int i = 0; i < o->nresources; i++) {
        json_array_append_new(list, json_string(o->resources[i]));
    }
    return json_object_set_new(body, "resources", list);
}

int fc__set_tokens(const fc_options *o, const fc_response *r, int64_t *tokens)
{
    if (o->nresources <= 1) {
        tokens[0] = fc__json_int(r, "token");
        return tokens[0] > 0 ? 0 : -1;
    }
    json_t *locks = json_object_get(r->json, "locks");
    for (int i = 0; i < o->nresources; i++) {
        tokens[i] = 0;
        size_t k;
        json_t *e;
        json_array_foreach(locks, k, e) {
            const char *name = json_string_value(json_object_get(e, "resource"));
            if (name != NULL && strcmp(name, o->resources[i]) == 0) {
                tokens[i] = json_integer_value(json_object_get(e, "token"));
            }
        }
        if (tokens[i] <= 0) {
            return -1;
        }
    }
    return 0;
}

int fc__set_export(const fc_options *o, const int64_t *tokens)
{
    char value[32];

    if (o->nresources <= 1) {
        snprintf(value, sizeof value, "%lld", (long long)tokens[0]);
        return setenv("FENCING_TOKEN", value, 1) != 0 ||
                       setenv("FENCING_RESOURCE", o->resource, 1) != 0
                   ? -1 : 0;
    }
    json_t *all = json_object();
    char names[FC_SET_MAX * 202];
    size_t len = 0;
    int rc = unsetenv("FENCING_TOKEN") | unsetenv("FENCING_RESOURCE");
    for (int i = 0; i < o->nresources && rc == 0; i++) {
        char var[FC_ENV_NAME_MAX];
        fc__env_name(o->resources[i], var);
        snprintf(value, sizeof value, "%lld", (long long)tokens[i]);
        rc = setenv(var, value, 1);
        json_object_set_new(all, o->resources[i], json_integer(tokens[i]));
        len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", i ? "," : "",
                                o->resources[i]);
    }
    char *text = json_dumps(all, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(all);
    if (rc == 0 && text != NULL) {
        rc = setenv("FENCING_TOKENS", text, 1) | setenv("FENCING_RESOURCES", names, 1);
    }
    free(text);
    return rc == 0 && text != NULL ? 0 : -1;
}

const char *fc__set_held(const fc_response *r)
{
    json_t *held = json_object_get(r->json, "resources");
    const char *first = json_string_value(json_array_get(held, 0));
    return first != NULL ? first : "";
}
