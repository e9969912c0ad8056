/* Declarations shared between storage's own files. Never installed. */
#ifndef STORAGE_INTERNAL_H
#define STORAGE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <fencegate/limits.h>

#include "storage/storage.h"

/* One resource's record as it is kept in LMDB (record.c encodes and decodes it). */
typedef struct store__record {
    uint64_t highest_token;
    uint64_t token;            /* of the last accepted write */
    uint64_t version;
    int64_t written_at_ms;
    int deleted;
    char content_type[STORE_CONTENT_TYPE_MAX + 1];
    const void *data;          /* borrowed: points into the encoded buffer */
    size_t len;
} store__record;

/* Bytes store__record_encode() needs for rec. */
size_t store__record_size(const store__record *rec);

/* Encodes rec into buf (store__record_size(rec) bytes). */
void store__record_encode(const store__record *rec, unsigned char *buf);

/* Decodes len bytes of buf into rec; rec->data then points into buf. Returns 0, or -1 for
 * anything malformed (wrong format version, lengths that do not add up, bad content type):
 * corrupt bytes are reported, never trusted. */
int store__record_decode(const unsigned char *buf, size_t len, store__record *rec);

/* 1 when s is a valid resource name (fencegate/limits.h: 1..200 bytes of [A-Za-z0-9._:-]). */
static inline int store__valid_name(const char *s)
{
    return fg_valid_name(s, FG_RESOURCE_MAX);
}

/* 1 when s is NULL or 0..255 bytes of printable ASCII. */
int store__valid_content_type(const char *s);

/* The checks every write passes before any backend sees it, in store_write()'s order after
 * the token comparisons it cannot make alone: INVALID for a bad name, a token of 0 or >= 2^53,
 * NULL data with a length, or a bad content type; TOO_LARGE over max_value_bytes; else OK. */
store_status store__validate_write(const store_write_req *r, size_t max_value_bytes);

/* The token rule of every write, given the highest token that has written the resource
 * and its shared mark: STALE for a token below the highest (first: after Redis lost its
 * counter, last_issued reads low, and a real old token must be told it was fenced off, not
 * that it was never issued); UNKNOWN_TOKEN for a token above last_issued (a forged or
 * mistyped token must not raise the high-water mark and lock the real holders out);
 * NOT_EXCLUSIVE for a token at or below the shared mark (it was granted to readers);
 * otherwise ACCEPTED (it may write). */
static inline store_status store__check_token(uint64_t token, uint64_t highest,
                                              uint64_t last_issued, uint64_t shared_mark)
{
    if (token < highest) {
        return STORE_STALE;
    }
    if (token > last_issued) {
        return STORE_UNKNOWN_TOKEN;
    }
    return token <= shared_mark ? STORE_NOT_EXCLUSIVE : STORE_ACCEPTED;
}

/* How a transaction's answer ranks a write's (store__txn_verdict): the higher wins. */
static inline int refusal_rank(store_status st)
{
    switch (st) {
    case STORE_ACCEPTED:
    case STORE_OK:
        return 0;
    case STORE_NOT_EXCLUSIVE:
        return 1;
    case STORE_UNKNOWN_TOKEN:
        return 2;
    case STORE_STALE:
        return 3;
    default:
        return 4; /* a failure */
    }
}

/* A transaction's verdict from its writes' answers (each ACCEPTED when its check passed):
 * ACCEPTED when every write passed; otherwise a failed write's error, else STALE, else
 * UNKNOWN_TOKEN, else NOT_EXCLUSIVE, and each write that passed then says OK (it was not
 * written). Sets and returns t->status; made again on those answers, it says the same.
 * Both backends decide with it whether to commit. */
static inline store_status store__txn_verdict(store_txn *t)
{
    store_status v = STORE_ACCEPTED;
    for (size_t i = 0; i < t->n; i++) {
        store_status st = t->writes[i]->status;
        if (st == STORE_ACCEPTED || st == STORE_OK) {
            continue; /* OK: passed, in a verdict made before */
        }
        /* A failure outranks a refusal, a stale token an unknown one, and an unknown
         * token one that is not exclusive. */
        if (v == STORE_ACCEPTED || refusal_rank(st) > refusal_rank(v)) {
            v = st;
        }
    }
    for (size_t i = 0; v != STORE_ACCEPTED && i < t->n; i++) {
        if (t->writes[i]->status == STORE_ACCEPTED) {
            t->writes[i]->status = STORE_OK;
        }
    }
    t->status = v;
    return v;
}

/* 1 when the n bytes of b are a well-formed owner secret: STORE_SECRET_LEN bytes, not all
 * zero (a zeroed block is what a torn write leaves). */
int store__secret_valid(const unsigned char *b, size_t n);

/* Fills out with a new secret from the kernel's random bytes. 0, or -1 when there were none
 * to be had (never use a partly random key). */
int store__secret_make(unsigned char out[STORE_SECRET_LEN]);

/* Wall clock (CLOCK_REALTIME) in ms, for written_at_ms. */
int64_t store__wall_ms(void);

/* The LMDB environment flags of an open store (mdb_env_get_flags), so a test can check that
 * no flag weakens the synchronous commit. Returns 0 or an LMDB error code. */
int store__env_flags(store *s, unsigned int *flags);

#define STORE__TOKEN_MAX ((uint64_t)FG_TOKEN_MAX)      /* the largest token */
#define STORE__TOKEN_LIMIT (STORE__TOKEN_MAX + 1)       /* 2^53: tokens are below it */

#endif
