/*
 * The arguments of POST /lock, /unlock and /renew (args.c), read from the parsed body and
 * the headers.
 */
#ifndef GATEWAY_ARGS_H
#define GATEWAY_ARGS_H

#include <stdint.h>

#include <jansson.h>
#include <microhttpd.h>

#include "locklib/locklib.h"

#include "http/request.h"

/* The arguments of POST /lock, /unlock and /renew. The names point into the parsed body or
 * the request's headers, or to owner_buf when the gateway generated the owner. */
typedef struct gw_lock_args {
    const char *resource;
    const char *owner;
    const char *idem_key;        /* NULL when the request has no Idempotency-Key */
    int64_t ttl_ms;
    int64_t wait_ms;
    int fair;
    int shared;                  /* "mode": "shared" (default "exclusive") */
    char owner_buf[LK_OWNER_MAX + 1];
    char idem_buf[LK_OWNER_MAX + 1];
    int owner_generated;
} gw_lock_args;

/* With --clients, owners and Idempotency-Keys are bound to the client that sends them: the
 * owner given to Redis is "CLIENT:OWNER" (an owner that already starts with "CLIENT:", as
 * the /lock answer shows it, is taken as it is), and the key "CLIENT:KEY". Client names have
 * no ':', so the first ':' says whose an owner is, and another client presenting the same
 * owner id names another owner (409 not_owner). Without --clients nothing changes. */
/* Reads and checks the /lock arguments: "resource", optional "owner" (generated when absent,
 * see generate_owner()), "ttl_ms", "wait_ms", "fair", "mode" from root (gw__parse_object's), and the
 * Idempotency-Key header. Returns 0, or -1 after queuing the 400. */
int gw__lock_args(gw_request *req, json_t *root, gw_lock_args *a, enum MHD_Result *result);
/* Reads and checks the /unlock (renew 0) or /renew (renew 1) arguments: "resource" and
 * "owner" (both required), "ttl_ms" when renewing, and the Idempotency-Key header. Returns 0,
 * or -1 after queuing the 400. */
int gw__owner_args(gw_request *req, json_t *root, int renew, gw_lock_args *a,
                   enum MHD_Result *result);

/* "mode" of root: "exclusive" (the default, *shared 0) or "shared" (*shared 1). Returns 0, or
 * -1 after queuing the 400. */
int gw__field_mode(gw_request *req, json_t *root, int *shared, enum MHD_Result *result);

/* The owner steps of gw__lock_args() for arguments read elsewhere (args_set.c): binds the
 * key, generates the owner when a->owner is NULL and generate (derived, with a key, from
 * a->resource), binds the owner. Returns 0, or -1 after queuing the 400. */
int gw__lock_args_owner(gw_request *req, gw_lock_args *a, int generate,
                        enum MHD_Result *result);

#endif
