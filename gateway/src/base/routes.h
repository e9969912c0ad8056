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
    GW_R_COUNT
} gw_route_id;

/* Label used for requests that matched no route (404/405). */
#define GW_R_NONE GW_R_COUNT

typedef struct gw_route {
    const char *method;
    const char *path;        /* template, e.g. "/resources/{resource}" */
    gw_route_id id;
} gw_route;

/* The served routes, GW_R_COUNT entries, in the order of gw_route_id. */
extern const gw_route gw__routes[GW_R_COUNT];

/* Matches a raw request path. Returns 200 with *route and *param (the raw text after the
 * route's prefix, "" when the template has no {resource}), 404 when no route has this path,
 * or 405 with the allowed methods ("GET, HEAD, PUT") written into allow. HEAD matches the GET
 * routes. */
int gw__route_match(const char *method, const char *path, const gw_route **route,
                   const char **param, char *allow, size_t allowlen);

#endif
