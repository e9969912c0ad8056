/*
 * Fuzz target: the storage record codec (storage/src/record.c), which turns LMDB bytes back
 * into a resource's token state. Corrupt bytes must be refused, never trusted.
 *
 * Invariants:
 *   - decoding arbitrary bytes never reads outside them; an accepted record has its value
 *     inside the buffer, token <= highest_token < 2^53, a valid content type, no value when
 *     deleted, and encoding it again gives back exactly the same bytes (one record, one
 *     encoding: nothing in the input was ignored);
 *   - any valid record built from the input encodes into store__record_size() bytes and
 *     decodes back to the same fields and value.
 *
 * Input: the bytes to decode; the same bytes also seed the fields of the record that is
 * encoded and decoded.
 */
#include <string.h>

#include "fuzz.h"
#include "storage_internal.h"

static uint64_t take_u64(const uint8_t **p, size_t *left)
{
    uint64_t v = 0;
    for (int i = 0; i < 8 && *left > 0; i++, (*p)++, (*left)--) {
        v |= (uint64_t)**p << (8 * i);
    }
    return v;
}

static void check_decode(const uint8_t *data, size_t size)
{
    unsigned char *buf = malloc(size > 0 ? size : 1); /* exact size: ASan sees overreads */
    store__record rec;
    fuzz_check(buf != NULL, "malloc");
    memcpy(buf, data, size);

    if (store__record_decode(buf, size, &rec) == 0) {
        const unsigned char *v = rec.data;
        fuzz_check(v >= buf && rec.len <= size && v + rec.len == buf + size,
                   "the value is the end of the buffer");
        fuzz_check(rec.token <= rec.highest_token, "token <= highest_token");
        fuzz_check(rec.highest_token < STORE__TOKEN_LIMIT, "highest_token < 2^53");
        fuzz_check(store__valid_content_type(rec.content_type), "content type is valid");
        fuzz_check(!rec.deleted || rec.len == 0, "a deleted record has no value");
        size_t n = store__record_size(&rec);
        fuzz_check(n == size, "re-encoding has the decoded size");
        unsigned char *again = malloc(n);
        fuzz_check(again != NULL, "malloc");
        store__record_encode(&rec, again);
        fuzz_check(memcmp(again, buf, n) == 0, "decode then encode gives back the same bytes");
        free(again);
    }
    free(buf);
}

static void check_roundtrip(const uint8_t *p, size_t left)
{
    store__record rec, out;
    memset(&rec, 0, sizeof rec);

    rec.highest_token = take_u64(&p, &left) % STORE__TOKEN_LIMIT;
    rec.token = take_u64(&p, &left) % (rec.highest_token + 1);
    rec.version = take_u64(&p, &left);
    rec.written_at_ms = (int64_t)take_u64(&p, &left);
    uint64_t shape = take_u64(&p, &left);
    rec.deleted = (int)(shape & 1);
    size_t ct_len = (size_t)(shape >> 8) % (STORE_CONTENT_TYPE_MAX + 1);
    for (size_t i = 0; i < ct_len; i++) {
        /* printable ASCII only, from whatever bytes are left (or spaces) */
        unsigned char ch = left > 0 ? *p : 0;
        rec.content_type[i] = (char)(0x20 + ch % (0x7f - 0x20));
        if (left > 0) {
            p++;
            left--;
        }
    }
    rec.content_type[ct_len] = '\0';
    rec.data = rec.deleted ? NULL : p;
    rec.len = rec.deleted ? 0 : left;

    size_t n = store__record_size(&rec);
    unsigned char *buf = malloc(n);
    fuzz_check(buf != NULL, "malloc");
    store__record_encode(&rec, buf);
    fuzz_check(store__record_decode(buf, n, &out) == 0, "a valid record decodes");
    fuzz_check(out.highest_token == rec.highest_token && out.token == rec.token &&
                   out.version == rec.version && out.written_at_ms == rec.written_at_ms &&
                   out.deleted == rec.deleted &&
                   strcmp(out.content_type, rec.content_type) == 0 && out.len == rec.len,
               "decode(encode(record)) has the record's fields");
    fuzz_check(out.len == 0 || memcmp(out.data, rec.data, out.len) == 0,
               "decode(encode(record)) has the record's value");
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_decode(data, size);
    check_roundtrip(data, size);
    return 0;
}
