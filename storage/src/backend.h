/*
 * The backend layer: what storage.c (storage.h's public functions) calls in LMDB (lmdb.c,
 * lmdb_commit.c) or PostgreSQL (pg.c, pg_commit.c, pg_schema.c). Never installed.
 *
 * storage.c checks what both backends would check the same way (names, tokens, sizes) and
 * then calls one backend through its table; a backend never sees the public `store`, only
 * its own state (impl). Each backend keeps its own count of calls in flight, so that its
 * close waits for them.
 */
#ifndef STORAGE_BACKEND_H
#define STORAGE_BACKEND_H

#include "storage_internal.h"

typedef struct store__ops {
    const char *name; /* "lmdb" or "postgresql" */
    void (*close)(void *impl);
    /* Every request is valid (store__validate_write) and answered in place. */
    void (*write_many)(void *impl, store_write_req *const *reqs, size_t n);
    store_status (*read)(void *impl, const char *resource, store_value *v);
    store_status (*highest)(void *impl, const char *resource, uint64_t *highest);
    store_status (*list)(void *impl, const char *after, store_entry *entries, size_t max,
                         size_t *n);
    store_status (*del)(void *impl, const char *resource);
    uint64_t (*ledger_floor)(void *impl);
    store_status (*ledger_cover)(void *impl, uint64_t token);
    /* resource and token are valid; *highest is zeroed by the caller. */
    /* holder is NULL or STORE_HOLDER_LEN bytes. */
    store_status (*grant)(void *impl, const char *resource, uint64_t token,
                          const unsigned char *holder, uint64_t *highest);
    int grant_needed; /* store_grant_needed()'s answer */
    /* Valid grants and writes, answered in place; either count may be 0. */
    void (*grant_many)(void *impl, store_grant_req *const *grants, size_t ng,
                       store_write_req *const *writes, size_t nw);
    store_status (*secret)(void *impl, unsigned char out[STORE_SECRET_LEN], char *err,
                           size_t errlen);
    void (*get_stats)(void *impl, store_stats *out);
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
typedef struct store__lmdb store__lmdb;
int store__lmdb_env_flags(store__lmdb *s, unsigned int *flags);

/* LMDB's write_many (lmdb_commit.c). */
void store__lmdb_write_many(void *impl, store_write_req *const *reqs, size_t n);

/* LMDB's grant (lmdb.c) and grant_many (lmdb_commit.c: the writes, then each grant). */
store_status store__lmdb_grant(void *impl, const char *resource, uint64_t token,
                               const unsigned char *holder, uint64_t *highest);
void store__lmdb_grant_many(void *impl, store_grant_req *const *grants, size_t ng,
                            store_write_req *const *writes, size_t nw);

#endif
