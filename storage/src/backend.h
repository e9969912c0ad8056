/*
 * The backend layer: what storage.c (storage.h's public functions) calls in LMDB (lmdb.c,
 * lmdb_commit.c) or PostgreSQL (pg.c, pg_commit.c, pg_schema.c). Never installed.
 *
 * storage.c does what both backends do alike: it checks every request (names, tokens, sizes,
 * content types), counts the calls in flight so that close waits for them, and queues writes
 * (and grants, where the backend batches them) for group commit (group.h). A backend sees only
 * valid requests and its own state (impl), never the public `store`, and holds only what is
 * its own: the transaction that carries a batch, the reads, the ledger and the secret.
 */
#ifndef STORAGE_BACKEND_H
#define STORAGE_BACKEND_H

#include "group.h"
#include "storage_internal.h"

typedef struct store__ops {
    const char *name; /* "lmdb" or "postgresql" */
    /* No call is in flight. */
    void (*close)(void *impl);
    /* One group-commit batch of valid writes, and of valid grants when grant is NULL. */
    store__run_fn run_batch;
    store_status (*read)(void *impl, const char *resource, store_value *v);
    store_status (*highest)(void *impl, const char *resource, uint64_t *highest);
    store_status (*list)(void *impl, const char *after, store_entry *entries, size_t max,
                         size_t *n);
    store_status (*del)(void *impl, const char *resource);
    /* store_fence() of a valid name and token; the ledger's part too where it is per
     * resource (PostgreSQL). */
    store_status (*fence)(void *impl, const char *resource, uint64_t token);
    uint64_t (*ledger_floor)(void *impl);
    /* Every token at or below it is covered already: store_ledger_cover() answers OK at
     * once, without counting a call. */
    uint64_t (*ledger_ceiling)(void *impl);
    /* A valid token above ledger_ceiling. */
    store_status (*ledger_cover)(void *impl, uint64_t token);
    /* One valid grant, answered at once; *highest is zeroed by the caller. holder is NULL or
     * STORE_HOLDER_LEN bytes. NULL: grants queue for group commit and run_batch answers
     * them with the writes. */
    store_status (*grant)(void *impl, const char *resource, uint64_t token,
                          const unsigned char *holder, uint64_t *highest);
    /* The last grant recorded for a valid resource, *granted zeroed by the caller. NULL:
     * nothing is recorded per resource (store_ledger_granted answers 0). */
    store_status (*ledger_granted)(void *impl, const char *resource, uint64_t *granted);
    int grant_needed; /* store_grant_needed()'s answer */
    store_status (*secret)(void *impl, unsigned char out[STORE_SECRET_LEN], char *err,
                           size_t errlen);
} store__ops;

extern const store__ops store__lmdb_ops;
extern const store__ops store__pg_ops;

/* Opens LMDB in opts->dir (the URL already resolved). As store_open(). */
store_status store__lmdb_open(void **out, const store_options *opts, char *err,
                              size_t errlen);

/* Opens PostgreSQL at url. As store_open(); desc (desclen bytes) receives the description
 * without the password. */
store_status store__pg_open(void **out, const char *url, const store_options *opts,
                            char *desc, size_t desclen, char *err, size_t errlen);

/* Parses url and writes its description (as store__pg_open's desc). INVALID when libpq
 * cannot parse it. */
store_status store__pg_describe_url(const char *url, char *desc, size_t desclen, char *err,
                                    size_t errlen);

/* The LMDB environment flags of an LMDB store's state (see store__env_flags). */
int store__lmdb_env_flags(void *impl, unsigned int *flags);

#endif
