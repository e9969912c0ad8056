/*
 * storage: the durable, token-checked resource store of fencegate, and the token ledger that
 * keeps fencing tokens from ever being handed out twice.
 *
 * For each resource the store keeps the highest token that has written it, the value
 * (bytes), its content type, a version that increments with every accepted write, and the
 * last-write time. A write is one atomic check-and-write against the highest token.
 * Nothing is acknowledged before it is durable.
 *
 * Two backends sit behind this one header, chosen by store_options.url; the caller never
 * needs to know which one runs:
 *  - LMDB (the default): a data directory on local disk. One store per data directory at a
 *    time; store_open() enforces it with a lock, so one process owns its ledger.
 *  - PostgreSQL (postgres:// or postgresql:// URL): one database shared by any number of
 *    stores in any number of processes (several gateways). Every write and grant is one
 *    atomic statement checked by the database, committed with synchronous_commit on.
 *
 * Threads: one `store` per process, shared by every thread. All calls are thread-safe.
 * Concurrent writers are batched into one transaction (group commit) in both backends.
 * PostgreSQL unreachable, restarting, killed or frozen: calls answer EIO within a bounded
 * time (store_options.timeout_ms per round trip; a reconnect waits libpq's connect_timeout,
 * at least 2 s), and the store reconnects by itself on a later call. EIO is also the answer
 * for "the database is unavailable": the caller maps it to 503 either way. A change whose
 * COMMIT was sent before the connection was lost answers IN_DOUBT instead: the database may
 * have made it. It is not a refusal; read before taking it for one.
 */
#ifndef STORAGE_STORAGE_H
#define STORAGE_STORAGE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STORE_STATUS_MAP(X)                                                              \
    X(OK, "success")                                                                     \
    X(ACCEPTED, "write accepted")                                                        \
    X(STALE, "token is lower than the highest token that has written this resource")     \
    X(UNKNOWN_TOKEN, "token was never issued for this resource")                         \
    X(NOT_EXCLUSIVE, "token was granted in shared mode for this resource: it cannot write")  \
    X(NOT_FOUND, "resource not found")                                                   \
    X(TOO_LARGE, "value is larger than the configured maximum")                          \
    X(FULL, "the store is full (LMDB map size reached, or PostgreSQL's disk full)")     \
    X(INVALID, "invalid argument")                                                       \
    X(BUSY, "the data directory is in use by another store (another process)")           \
    X(EIO, "storage I/O error")                                                          \
    X(IN_DOUBT, "the commit was sent and its answer lost: it may or may not have been made") \
    X(ENOMEM, "out of memory")

typedef enum store_status {
#define STORE_X_ENUM(name, msg) STORE_##name,
    STORE_STATUS_MAP(STORE_X_ENUM)
#undef STORE_X_ENUM
    STORE_STATUS_COUNT
} store_status;

const char *store_status_name(store_status st);
const char *store_status_str(store_status st);

#define STORE_CONTENT_TYPE_MAX 255

typedef struct store store;

typedef struct store_options {
    /* Which backend, and where:
     *   NULL, "" or "lmdb:"     LMDB in dir;
     *   "lmdb:/path"            LMDB in /path (overrides dir);
     *   "postgres://..." or "postgresql://..."
     *                           PostgreSQL, the URI as libpq reads it, e.g.
     *                           postgresql://user:pw@host:5432/db or
     *                           postgresql:///db?host=/path/to/socket/dir.
     * Anything else is INVALID. The string is copied; it may hold a password, which no
     * description or error text of the store ever shows. */
    const char *url;
    const char *dir;          /* LMDB data directory, created if missing (required for LMDB) */
    size_t map_size;          /* LMDB map size in bytes, default 1 GiB */
    size_t max_value_bytes;   /* default 1 MiB */
    int group_commit;         /* 1 (default): batch concurrent writers into one commit */
    uint64_t ledger_step;     /* how far the token ceiling is raised at a time, default 2^20 */
    int timeout_ms;           /* PostgreSQL: bound on connecting and on each call's round
                               * trips (then EIO), default 5000 */
    int pool_size;            /* PostgreSQL: connections kept open, default 8 */
} store_options;

/* Fills *opts with the defaults (url and dir stay NULL). */
void store_options_init(store_options *opts);

/* Opens the store opts->url selects (see store_options).
 * LMDB: opens (creating if needed) the data directory and raises the token ledger's ceiling
 * durably (see store_ledger_floor). BUSY when another store, in this process or another,
 * has the directory open: two stores would each raise their own ledger floor and could hand
 * out a token twice. Close with store_close(), which releases the directory.
 * PostgreSQL: connects, and creates or migrates the schema (versioned, in one transaction
 * under an advisory lock, so gateways starting together migrate once). EIO when the
 * database cannot be reached, INVALID for a malformed URL or a schema newer than this code.
 * On error *out is NULL and err (errlen bytes, may be NULL) says why, never with the
 * password. */
store_status store_open(store **out, const store_options *opts, char *err, size_t errlen);

/* Waits for in-flight calls (writes, reads, deletes, ledger raises), closes the environment
 * (or the database connections) and frees the store. No call may start once store_close()
 * has been called. NULL is a no-op. */
void store_close(store *s);

/* Writes a printable description of the backend into buf (len bytes, always
 * NUL-terminated, truncated if needed), for /readyz and logs: "lmdb:/data/dir" or
 * "postgresql://user@host:port/db" (a Unix socket as "postgresql://user@/db?host=/dir").
 * Never the password. Returns buf. */
const char *store_describe(store *s, char *buf, size_t len);

/* What store_describe() would say for a store opened with opts, without opening anything
 * (no directory created, no connection): for checking a configuration. OK, or INVALID for
 * an unknown scheme or a URL libpq cannot parse (err says why, never with the password). */
store_status store_describe_options(const store_options *opts, char *buf, size_t len,
                                    char *err, size_t errlen);

typedef struct store_write_result {
    uint64_t highest_token;   /* after the call: the highest token that has written */
    uint64_t version;         /* ACCEPTED: the new version */
    uint64_t shared_mark;     /* NOT_EXCLUSIVE: the resource's shared mark (store_grant_req
                               * .shared), at or above the refused token */
} store_write_result;

/* One atomic check-and-write, acknowledged only after it is durable, checked in this order:
 *   token < highest              -> STALE, res->highest_token names the highest (also when
 *                                   token > last_issued: a low last_issued after Redis lost
 *                                   its counter must not hide that a token was fenced off);
 *   token > last_issued          -> UNKNOWN_TOKEN, nothing changes;
 *   token <= the shared mark     -> NOT_EXCLUSIVE, res->shared_mark names the mark: the
 *                                   token was granted in shared mode (store_grant_req
 *                                   .shared), so its holder, and an exclusive holder of it
 *                                   whose lease ended before readers were granted it, may
 *                                   not change what the readers rely on; nothing changes;
 *   otherwise                    -> ACCEPTED, value, type, highest and version updated.
 * len > max_value_bytes is TOO_LARGE, a full map is FULL, a bad name is INVALID; every
 * error leaves the store unchanged. content_type may be NULL (stored as empty). res may be
 * NULL; otherwise it is zeroed on every answer but ACCEPTED, STALE and UNKNOWN_TOKEN. If the
 * commit fails, every write of that group commit answers EIO (or FULL, ENOMEM), and none was
 * made; IN_DOUBT (PostgreSQL) when the connection was lost after the COMMIT was sent: each
 * may or may not have been made. */
store_status store_write(store *s, const char *resource, uint64_t token, const void *data,
                         size_t len, const char *content_type, uint64_t last_issued,
                         store_write_result *res);

/* One write of store_write_many(): store_write()'s arguments, and its answer. */
typedef struct store_write_req {
    const char *resource;
    uint64_t token;
    const void *data;
    size_t len;
    const char *content_type;
    uint64_t last_issued;
    int del;                  /* 1: a fenced delete instead of a write: checked exactly as a
                               * write, then the value is removed and the token kept as the
                               * resource's highest (a tombstone, also for a resource that
                               * had no value), so no lower token can write it again; data,
                               * len and content_type are not used */
    store_status status;      /* out: what store_write() would have returned */
    store_write_result res;   /* out */
} store_write_req;

/* store_write() for n writes at once: each is checked and answered exactly as store_write()
 * would, in array order (a later write to a resource sees an earlier one), and all that are
 * accepted commit together with one fsync, with whatever other writers are queued. For a
 * caller that collects writes itself (the gateway's writer thread), so that one thread
 * fills a group commit. */
void store_write_many(store *s, store_write_req *const *reqs, size_t n);

typedef struct store_value {
    void *data;               /* malloc'd; free with store_value_free() */
    size_t len;
    char content_type[STORE_CONTENT_TYPE_MAX + 1];
    uint64_t token;           /* the token of the last accepted write */
    uint64_t highest_token;
    uint64_t version;
    int64_t written_at_ms;    /* wall clock (CLOCK_REALTIME) of the last accepted write */
} store_value;

/* Reads the value and its metadata. NOT_FOUND when the resource was never written or its
 * value was deleted. On OK the caller owns v->data and frees it with store_value_free(). */
store_status store_read(store *s, const char *resource, store_value *v);
void store_value_free(store_value *v);

/* The highest token that has written the resource (0 if none). A read-only transaction:
 * never waits for a writer. */
store_status store_highest(store *s, const char *resource, uint64_t *highest);

typedef struct store_entry {
    char resource[201];
    uint64_t highest_token;
    uint64_t version;
    size_t size;              /* value bytes; 0 for a tombstone */
    int deleted;              /* 1: the value was deleted, the high-water mark is kept */
} store_entry;

/* Lists up to `max` resources in name order, starting after `after` (NULL or "" for the
 * first page). *n is the number written. */
store_status store_list(store *s, const char *after, store_entry *entries, size_t max,
                        size_t *n);

/* Deletes the value but keeps the highest token as a tombstone, so no older token can
 * write again. NOT_FOUND when there is nothing to delete. Durable before it returns. */
store_status store_delete(store *s, const char *resource);

/* Fences the resource off below token, for a forced release whose burned token it is:
 * durably raises the highest token that has written it to token (keeping its value; a
 * tombstone when it has none), so every later write with a lower token is STALE with
 * highest_token = token, whatever Redis remembers; and makes the ledger cover token as a
 * grant's is (LMDB: the ceiling; PostgreSQL: the resource's recorded grant, with no holder,
 * so no grant at or below it is accepted again, through any store sharing the database).
 * OK (also when it was fenced at or above token already), INVALID for a bad name or a token
 * of 0 or >= 2^53, EIO (or FULL) when it could not be made durable. */
store_status store_fence(store *s, const char *resource, uint64_t token);

/* The token ledger. LMDB: at open the store durably raised its ceiling R to R_prev + step;
 * the floor is R_prev, which is >= every token any earlier process handed out. The gateway
 * passes acquisitions a floor of max(store_ledger_floor, the largest token this process has
 * handed out, store_highest(resource)).
 * PostgreSQL: always 0. Several processes share the database, so no floor fixed at open
 * could cover the tokens the others hand out later; store_grant() checks each grant per
 * resource against every process's instead. */
uint64_t store_ledger_floor(store *s);

/* Makes sure the durable ceiling is >= token before the caller hands the token out,
 * raising it by the step (one fsync) when needed. OK, or EIO when it could not be made
 * durable (I/O error, disk full, full map): then the token must not be handed out.
 * INVALID for a token >= 2^53. The ceiling stops at 2^53 - 1, the largest token.
 * PostgreSQL: a no-op answering OK (INVALID for a token >= 2^53): store_grant() makes each
 * grant durable instead. */
store_status store_ledger_cover(store *s, uint64_t token);

/* Records, before the caller hands it out, that `token` is granted for `resource`.
 * PostgreSQL: durably and atomically (one statement, group-committed with other grants and
 * writes), OK only when token is strictly larger than every token recorded for that
 * resource before, by any process sharing the database; otherwise STALE with *highest = the
 * recorded highest (mint again above it), and nothing changes.
 * LMDB (one process per data directory): no per-resource state. OK when token >
 * store_ledger_floor(s), after making the durable ceiling cover it (store_ledger_cover; one
 * fsync only when the ceiling moves, not one per grant); STALE with *highest = the floor
 * otherwise. The gateway's own in-process floor keeps its tokens unique above that.
 * Both: INVALID for a bad name or a token of 0 or >= 2^53; EIO (or FULL) when the grant
 * could not be made durable, IN_DOUBT (PostgreSQL) when it may have been: either way the
 * token must not be handed out. *highest is 0 except on STALE. */
store_status store_grant(store *s, const char *resource, uint64_t token, uint64_t *highest);

/* The last token granted for resource as the ledger recorded it (*granted, 0 when none), for
 * a fenced read: every grant is recorded before it is handed out, so one answered before
 * this call started is seen. PostgreSQL: one query (a network round trip, never on a
 * thread that must not wait). LMDB: OK with 0, always: its ledger is one ceiling for every
 * resource, and the caller asks Redis's counter instead. INVALID for a bad name. */
store_status store_ledger_granted(store *s, const char *resource, uint64_t *granted);

/* store_grant() that also knows a grant again: holder (NULL, or STORE_HOLDER_LEN bytes) is a
 * fingerprint of who holds the token, recorded with it. PostgreSQL: OK when token is
 * strictly larger than every token recorded for the resource, or equal to the recorded one
 * with the same holder (a re-entry or an idempotent replay of the grant that recorded it);
 * STALE otherwise, also for an equal token with another holder or with a NULL one. The
 * fingerprint must not let anyone act as the holder: the gateway passes a keyed hash of the
 * owner, never the owner. LMDB: the holder is ignored (one process, whose in-process floor
 * keeps its tokens unique), as store_grant(). */
#define STORE_HOLDER_LEN 16
store_status store_grant_as(store *s, const char *resource, uint64_t token,
                            const unsigned char *holder, uint64_t *highest);

/* A fenced transaction: writes (and fenced deletes, del = 1) to 1..STORE_TXN_MAX distinct
 * resources, each checked against its own token exactly as store_write() checks one (the
 * same order: STALE, then UNKNOWN_TOKEN), and committed all together or not at all: one
 * LMDB write transaction, one PostgreSQL transaction (so every store sharing the database
 * sees all of it or none). status, and each write's status and res:
 *   ACCEPTED       every write committed; each write ACCEPTED with its new version;
 *   STALE          refused, nothing written: each refused write says STALE (res names the
 *                  highest token) or UNKNOWN_TOKEN, each write that passed says OK.
 *                  PostgreSQL also refuses as STALE a write whose token is below one the
 *                  shared ledger has granted for its resource since (store_grant_as; res
 *                  names that token): its lease is over, and the new holder may already
 *                  have read the values the transaction would change. The ledger's rows
 *                  stay locked until the commit, so no such grant slips in between;
 *   UNKNOWN_TOKEN  as STALE, when no write was stale but one had an unknown token;
 *   NOT_EXCLUSIVE  as STALE, when no write was stale or unknown but one's token is at or
 *                  below its resource's shared mark (res names the mark);
 *   INVALID        a bad write (as store_write(), or a resource named twice: the later one),
 *                  or n of 0 or over STORE_TXN_MAX; TOO_LARGE a value over max_value_bytes:
 *                  that write says so, the others OK; nothing reached the backend;
 *   EIO, FULL, ENOMEM  the commit failed: every write says so, and nothing of it happened;
 *   IN_DOUBT       (PostgreSQL) the connection was lost after the COMMIT was sent: every
 *                  write says so, and all of the transaction was made or none of it.
 * A crash at any instruction leaves all of the transaction durable or none of it. */
#define STORE_TXN_MAX 64
typedef struct store_txn {
    store_write_req *const *writes;
    size_t n;
    store_status status;      /* out */
} store_txn;

/* Runs one transaction alone (see store_txn). Returns t->status. */
store_status store_transact(store *s, store_txn *t);

/* One grant of store_grant_many(): store_grant_as()'s arguments, and its answer. */
typedef struct store_grant_req {
    const char *resource;
    uint64_t token;
    const unsigned char *holder;  /* NULL or STORE_HOLDER_LEN bytes */
    int shared;               /* 1: not a grant of a new token but a shared mark: records,
                               * durably and before the caller answers a shared (read) lock
                               * of token, that token was granted in shared mode for
                               * resource. The resource's shared mark becomes the largest
                               * such token, and every write with a token at or below it is
                               * NOT_EXCLUSIVE (store_write). The ledger is not checked nor
                               * changed; holder is not used. OK (also when the mark was at
                               * or above token already), INVALID, or EIO (or FULL, or
                               * IN_DOUBT) when it could not be made durable: then the shared
                               * lock must not be handed out. Group-committed with the
                               * writes on both backends, atomically with their checks. */
    store_status status;      /* out: what store_grant_as() would have returned */
    uint64_t highest;         /* out: on STALE, the recorded highest; else 0 */
} store_grant_req;

/* store_grant_as() for ng grants and store_write() for nw writes (either may be 0) at once,
 * each checked and answered exactly as alone, for a caller that collects both itself (the
 * gateway's storage writer). PostgreSQL: one pipelined transaction and one commit carry
 * them all, with whatever other calls are queued (writes sent before grants; per resource
 * in array order). LMDB: the writes as store_write_many(), then each grant (no fsync unless
 * the ceiling moves). */
void store_grant_many(store *s, store_grant_req *const *grants, size_t ng,
                      store_write_req *const *writes, size_t nw);

/* store_grant_many() with nt transactions as well, for the gateway's storage writer, which
 * collects all three: each transaction answered as by store_transact(), all committed in the
 * same group commit as the writes and grants where the backend can (LMDB: one write
 * transaction and one fsync; PostgreSQL: each transaction in a database transaction of its
 * own, after the batch of writes and grants). */
void store_run_many(store *s, store_grant_req *const *grants, size_t ng,
                    store_write_req *const *writes, size_t nw, store_txn *const *txns,
                    size_t nt);

/* 1 when a token must pass store_grant_as() before it is handed out, 0 when
 * store_ledger_cover() is enough (it is then a no-op unless the ceiling must move).
 * LMDB: 0 (one process per ledger). PostgreSQL: 1 (the ledger is shared per resource). */
int store_grant_needed(store *s, uint64_t token);

/* The store's secret: STORE_SECRET_LEN random bytes from the kernel, made on the first call
 * for a store and durable before they are returned; every later call, in this process or
 * after any restart, returns the same bytes. The gateway keys the owners it derives from an
 * Idempotency-Key with it, so that a retry after a restart derives the same owner. It lives
 * in the store because the store owns the data directory.
 * A data directory written before the secret moved into the store holds it in the file
 * STORE_LEGACY_SECRET_FILE; while the store has none, that file is imported (and then no
 * longer read). It must be a regular file of exactly STORE_SECRET_LEN bytes, not all zero
 * (a zeroed block is what a torn write leaves): otherwise INVALID, with err naming the file
 * and what to do. PostgreSQL: one row shared by every store on the database, made once even
 * when several gateways ask at the same moment; there is no file to import.
 * EIO when the secret cannot be made durable, INVALID for a malformed stored one (never
 * replaced: a new secret would silently change every derived owner). err may be NULL. */
#define STORE_SECRET_LEN 16
#define STORE_LEGACY_SECRET_FILE "owner-secret"
store_status store_secret(store *s, unsigned char out[STORE_SECRET_LEN], char *err,
                          size_t errlen);

typedef struct store_stats {
    uint64_t commits;         /* durable write transactions of accepted writes */
    uint64_t writes;          /* write requests that reached a transaction */
    uint64_t max_batch;       /* the most write requests one transaction carried */
} store_stats;

/* Counters since open, for metrics and to show that group commit batches. */
void store_get_stats(store *s, store_stats *out);

#ifdef __cplusplus
}
#endif
#endif
