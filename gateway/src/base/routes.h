/*
 * The route table and the path router (routes.c). Bottom layer: the router (http/intake.c)
 * and the metrics' labels (rt/metrics.c) both read the table.
 */
#ifndef GATEWAY_ROUTES_H
#define GATEWAY_ROUTES_H

#include <stddef.h>

typedef enum gw_route_id {
    GW_R_LOCK,
    GW_R_UNLOCK,
    GW_R_RENEW,
    GW_R_LOCK_STATUS,
    GW_R_RESOURCE_GET,
    GW_R_RESOURCE_PUT,
    GW_R_HEALTHZ,
    GW_R_READYZ,
    GW_R_METRICS,
    GW_R_LIVEZ,
    GW_R_LOCKS_LIST,
    GW_R_ADMIN_RELEASE,
    GW_R_UI,
    GW_R_UI_FILE,
    GW_R_TRANSACTION,
    GW_R_RESOURCE_DELETE,
    GW_R_SESSION_CREATE,
    GW_R_SESSION_RENEW,
    GW_R_SESSION_GET,
    GW_R_SESSION_DELETE,
    GW_R_COUNT
} gw_route_id;

/* Label used for requests that matched no route (404/405). */
#define GW_R_NONE GW_R_COUNT

/* What a route needs of the client that calls it (--clients): every route names one, and
 * `fencegate --routes` prints it beside the route. GW_SCOPE_UNSET is no rule at all: the
 * auth step refuses such a route to everyone (403), and the scope test over --routes fails
 * on it, so a new route cannot slip in without saying what it needs. */
typedef enum gw_scope {
    GW_SCOPE_UNSET = 0,
    GW_SCOPE_PUBLIC,         /* nothing: liveness, answered to anyone */
    GW_SCOPE_LOCK,           /* lock, unlock, renew */
    GW_SCOPE_WRITE,          /* writes of resource values */
    GW_SCOPE_READ,           /* reads of locks and resources */
    GW_SCOPE_ADMIN,          /* forced release and the status page's actions */
    GW_SCOPE_METRICS,        /* /metrics, /readyz */
    GW_SCOPE_COUNT
} gw_scope;

/* Where a route's resource name is: the auth step checks the client's prefixes against it. */
typedef enum gw_route_resource {
    GW_RES_NONE = 0,         /* the route is about no one resource: every prefix counts */
    GW_RES_PATH,             /* its {resource}: checked before the body is read */
    GW_RES_BODY,             /* the body's "resource": checked once it is parsed (http/args.c) */
} gw_route_resource;

typedef struct gw_route {
    const char *method;
    const char *path;        /* template, e.g. "/resources/{resource}": at most one {name},
                              * matching one or more bytes; text after it must follow it
                              * exactly ("/sessions/{session}/renew") */
    gw_route_id id;
    gw_scope scope;          /* the operation a client needs on it */
    gw_route_resource resource;
} gw_route;

/* The scope's name as clients files and --routes spell it ("lock", "public"); "unset" for
 * GW_SCOPE_UNSET. */
const char *gw__scope_name(gw_scope s);
/* Where a route's resource is, as --routes prints it: "path", "body" or "none". */
const char *gw__route_resource_name(gw_route_resource r);
/* The scope named name (one of lock, write, read, admin, metrics), or GW_SCOPE_UNSET. */
gw_scope gw__scope_parse(const char *name);
/* 1 when path is a route whose scope is public (whatever the method), so a probe is never
 * asked for a token, not even to learn that its method is wrong. */
int gw__route_public_path(const char *path);

/* The served routes, GW_R_COUNT entries, in the order of gw_route_id. */
extern const gw_route gw__routes[GW_R_COUNT];

/* Matches a raw request path. Returns 200 with *route and *param (the raw text after the
 * route's prefix, "" when the template has no {resource}), 404 when no route has this path,
 * or 405 with the allowed methods ("GET, HEAD, PUT") written into allow. HEAD matches the GET
 * routes. */
int gw__route_match(const char *method, const char *path, const gw_route **route,
                   const char **param, char *allow, size_t allowlen);

/* The path as the access log shows it: url, except that a path under /sessions/ names a
 * session id, a capability, which is never logged: it is shown as its route's template
 * ("/sessions/{session}" or "/sessions/{session}/renew"), whatever the request was. */
const char *gw__route_log_path(const char *url);

#endif
