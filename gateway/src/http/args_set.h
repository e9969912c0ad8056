/*
 * The arguments of POST /lock, /unlock and /renew for a set of resources ("resources")
 * (args_set.c).
 */
#ifndef GATEWAY_ARGS_SET_H
#define GATEWAY_ARGS_SET_H

#include <stddef.h>

#include <jansson.h>
#include <microhttpd.h>

#include "locklib/locklib.h"

#include "http/args.h"
#include "http/request.h"

#define GW_SET_MIN 2

typedef enum gw_set_kind { GW_SET_LOCK, GW_SET_UNLOCK, GW_SET_RENEW } gw_set_kind;

/* The set's arguments: a as for one resource (a.resource is the set's name for a derived
 * owner: "set:" and a keyed hash of its names), and the names, pointing into the body. */
typedef struct gw_set_args {
    gw_lock_args a;
    size_t n;
    const char *names[LK_MANY_MAX];
    char set_name[48];
} gw_set_args;

/* 1 when the body asks for a set: it names a "resources" member. A prefilter on the raw
 * bytes: no valid name, owner or key can hold that quoted word, so it is a member name; the
 * parse (gw__set_args) checks the rest. */
int gw__set_body(const gw_request *req);

/* Reads and checks a set's arguments: "resources", 2..LK_MANY_MAX distinct resource names
 * (each authorized for the client, --clients), never with "resource"; "owner" (required for
 * unlock and renew; generated for a lock without one); ttl_ms (lock, renew), wait_ms, fair
 * and mode (lock: one mode for every resource of the set); the Idempotency-Key header. Returns 0, or -1 after queuing the 400 (or 403)
 * naming the problem. */
int gw__set_args(gw_request *req, json_t *root, gw_set_kind kind, gw_set_args *s,
                 enum MHD_Result *result);

#endif
