/*
 * The route table and the path router. The table is in the order of gw_route_id; main.c
 * maps each route to its operation, rt/metrics.c labels by it.
 */
#include <stdio.h>
#include <string.h>

#include "base/routes.h"

const gw_route gw__routes[GW_R_COUNT] = {
    {"POST", "/lock", GW_R_LOCK, GW_SCOPE_LOCK, GW_RES_BODY},
    {"POST", "/unlock", GW_R_UNLOCK, GW_SCOPE_LOCK, GW_RES_BODY},
    {"POST", "/renew", GW_R_RENEW, GW_SCOPE_LOCK, GW_RES_BODY},
    {"GET", "/locks/{resource}", GW_R_LOCK_STATUS, GW_SCOPE_READ, GW_RES_PATH},
    {"GET", "/resources/{resource}", GW_R_RESOURCE_GET, GW_SCOPE_READ, GW_RES_PATH},
    {"PUT", "/resources/{resource}", GW_R_RESOURCE_PUT, GW_SCOPE_WRITE, GW_RES_PATH},
    {"GET", "/healthz", GW_R_HEALTHZ, GW_SCOPE_PUBLIC, GW_RES_NONE},
    {"GET", "/readyz", GW_R_READYZ, GW_SCOPE_METRICS, GW_RES_NONE},
    {"GET", "/metrics", GW_R_METRICS, GW_SCOPE_METRICS, GW_RES_NONE},
    {"GET", "/livez", GW_R_LIVEZ, GW_SCOPE_PUBLIC, GW_RES_NONE},
    /* The listing answers only the locks under the client's read prefixes (locks_list.c). */
    {"GET", "/locks", GW_R_LOCKS_LIST, GW_SCOPE_READ, GW_RES_NONE},
    {"POST", "/admin/release", GW_R_ADMIN_RELEASE, GW_SCOPE_ADMIN, GW_RES_BODY},
    {"GET", "/ui/", GW_R_UI, GW_SCOPE_PUBLIC, GW_RES_NONE},
    {"GET", "/ui/{file}", GW_R_UI_FILE, GW_SCOPE_PUBLIC, GW_RES_NONE},
    {"POST", "/resources", GW_R_TRANSACTION, GW_SCOPE_WRITE, GW_RES_BODY},
    {"DELETE", "/resources/{resource}", GW_R_RESOURCE_DELETE, GW_SCOPE_WRITE, GW_RES_PATH},
    {"POST", "/sessions", GW_R_SESSION_CREATE, GW_SCOPE_LOCK, GW_RES_NONE},
    {"POST", "/sessions/{session}/renew", GW_R_SESSION_RENEW, GW_SCOPE_LOCK, GW_RES_NONE},
    {"GET", "/sessions/{session}", GW_R_SESSION_GET, GW_SCOPE_LOCK, GW_RES_NONE},
    {"DELETE", "/sessions/{session}", GW_R_SESSION_DELETE, GW_SCOPE_LOCK, GW_RES_NONE},
};

static const char *const scope_names[GW_SCOPE_COUNT] = {
    "unset", "public", "lock", "write", "read", "admin", "metrics",
};

const char *gw__scope_name(gw_scope s)
{
    return s > GW_SCOPE_UNSET && s < GW_SCOPE_COUNT ? scope_names[s] : scope_names[0];
}

const char *gw__route_resource_name(gw_route_resource r)
{
    return r == GW_RES_PATH ? "path" : r == GW_RES_BODY ? "body" : "none";
}

gw_scope gw__scope_parse(const char *name)
{
    for (int s = GW_SCOPE_LOCK; s < GW_SCOPE_COUNT; s++) {
        if (strcmp(name, scope_names[s]) == 0) {
            return (gw_scope)s;
        }
    }
    return GW_SCOPE_UNSET;
}

/* Matches path against a template. A template's "{name}" matches a non-empty run of bytes
 * after its prefix, up to the template's text after the brace, which must end the path;
 * *param points at that run and what follows it (the operation cuts the text after it). */
static int path_matches(const char *tmpl, const char *path, const char **param)
{
    const char *brace = strchr(tmpl, '{');

    if (brace == NULL) {
        *param = "";
        return strcmp(tmpl, path) == 0;
    }
    size_t prefix = (size_t)(brace - tmpl);
    const char *after = strchr(brace, '}') + 1;
    size_t tail = strlen(after), plen = strlen(path);
    if (strncmp(tmpl, path, prefix) != 0 || plen <= prefix + tail ||
        strcmp(path + plen - tail, after) != 0) {
        return 0;
    }
    *param = path + prefix;
    return 1;
}

int gw__route_public_path(const char *path)
{
    for (int i = 0; i < GW_R_COUNT; i++) {
        const char *p = NULL;
        if (gw__routes[i].scope == GW_SCOPE_PUBLIC && path_matches(gw__routes[i].path, path, &p)) {
            return 1;
        }
    }
    return 0;
}

int gw__route_match(const char *method, const char *path, const gw_route **route,
                    const char **param, char *allow, size_t allowlen)
{
    size_t used = 0;
    int path_known = 0;
    /* HEAD is served on every GET route: the GET's status and headers, and libmicrohttpd
     * leaves the body out. */
    const char *as = strcmp(method, "HEAD") == 0 ? "GET" : method;

    *route = NULL;
    *param = "";
    if (allowlen > 0) {
        allow[0] = '\0';
    }
    for (int i = 0; i < GW_R_COUNT; i++) {
        const char *p = NULL;
        if (!path_matches(gw__routes[i].path, path, &p)) {
            continue;
        }
        if (strcmp(gw__routes[i].method, as) == 0) {
            *route = &gw__routes[i];
            *param = p;
            return 200;
        }
        path_known = 1;
        int is_get = strcmp(gw__routes[i].method, "GET") == 0;
        int n = snprintf(allow + used, allowlen - used, "%s%s%s", used > 0 ? ", " : "",
                         gw__routes[i].method, is_get ? ", HEAD" : "");
        if (n > 0 && (size_t)n < allowlen - used) {
            used += (size_t)n;
        }
    }
    return path_known ? 405 : 404;
}

const char *gw__route_log_path(const char *url)
{
    static const char prefix[] = "/sessions/", renew[] = "/renew";
    if (strncmp(url, prefix, sizeof prefix - 1) != 0) {
        return url;
    }
    size_t len = strlen(url);
    return len > sizeof renew - 1 && strcmp(url + len - (sizeof renew - 1), renew) == 0
               ? gw__routes[GW_R_SESSION_RENEW].path
               : gw__routes[GW_R_SESSION_GET].path;
}
