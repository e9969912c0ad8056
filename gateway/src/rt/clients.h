/*
 * Clients and their scopes (clients.c): the --clients file (or the --auth-token-file token as
 * one client with every operation), looked up by bearer token or by name, and the table the
 * loop threads read while the main thread swaps in a new one on SIGHUP.
 *
 * Swapping without a lock on the hot path: a request takes a reference on the current table
 * (gw__clients_acquire) and gives it back when it completes; the table is freed by whoever
 * gives back its last reference. The only section that must not overlap the swap is the
 * load of the pointer and the increment of its count: readers do it inside one of two epoch
 * counters, and the swap waits (on the main thread) for the old epoch's readers, a few
 * instructions each, before it drops the table's own reference.
 */
#ifndef GATEWAY_CLIENTS_H
#define GATEWAY_CLIENTS_H

#include <stdatomic.h>
#include <stddef.h>

#include "base/routes.h"

#define GW_CLIENT_NAME_MAX 64       /* bytes of [A-Za-z0-9._-] */
#define GW_CLIENTS_FILE_MAX (4 * 1024 * 1024)

typedef struct gw_allow {
    char *prefix;                   /* a resource name's beginning; "" for every resource */
    size_t prefix_len;
    unsigned ops;                   /* bit 1 << gw_scope for each operation allowed */
} gw_allow;

typedef struct gw_client {
    char name[GW_CLIENT_NAME_MAX + 1];
    unsigned char token_sha256[32];
    gw_allow *allow;
    size_t n_allow;
    unsigned any_ops;               /* the union of its allow entries' ops */
} gw_client;

typedef struct gw_clients {
    atomic_long refs;               /* the box's own, plus one per request holding it */
    gw_client *c;
    size_t n;
} gw_clients;

typedef struct gw_clients_box {
    _Atomic(gw_clients *) cur;      /* NULL: no authentication */
    atomic_uint epoch;
    atomic_long readers[2];
} gw_clients_box;

/* Reads and checks a clients file: JSON {"clients": [{"name", "token_sha256", "allow":
 * [{"prefix", "ops"}]}]}. Returns a table with one reference, or NULL with a message naming
 * the file and the problem (its place in the file, a duplicate name or hash, an unknown
 * operation or field) in err. */
gw_clients *gw__clients_load(const char *path, char *err, size_t errlen);
/* The --auth-token-file token as one client, "default", with every operation on every
 * resource. NULL when out of memory. */
gw_clients *gw__clients_single(const char *token, size_t len);

/* The client whose token this is, comparing the token's SHA-256 with every client's in time
 * that does not depend on where they differ; NULL for none. */
const gw_client *gw__clients_by_token(const gw_clients *t, const char *token, size_t len);
/* The client of this name; NULL for none. */
const gw_client *gw__clients_by_name(const gw_clients *t, const char *name);
/* 1 when c may do op on resource (NULL: on some resource, so that a request whose resource
 * is in its body is refused early when the client may not do op anywhere). */
int gw__client_allows(const gw_client *c, gw_scope op, const char *resource);

/* Installs t (its reference passes to the box) and drops the previous table's. Only one
 * thread (main) swaps; any number acquire meanwhile. */
void gw__clients_swap(gw_clients_box *box, gw_clients *t);
/* A reference on the current table (NULL: none installed). Any thread; never waits. */
gw_clients *gw__clients_acquire(gw_clients_box *box);
void gw__clients_release(gw_clients *t);

#endif
