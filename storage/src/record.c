/*
 * The on-disk record of one resource. Little-endian, fixed header, then the content type
 * and the value:
 *
 *   u8  format (1)     u8 flags (bit 0: deleted)   u8 content-type length   u8 reserved
 *   u64 highest_token  u64 token   u64 version   i64 written_at_ms   u32 value length
 *   content type bytes, then value bytes
 *
 * Also the checks of values that both backends make alike: names, content types, writes and
 * the owner secret.
 */
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "storage_internal.h"

#define FORMAT_V1 1
#define HEADER_BYTES (4 + 8 * 4 + 4)

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        p[i] = (unsigned char)(v >> (8 * i));
    }
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) {
        v = (v << 8) | p[i];
    }
    return v;
}

size_t store__record_size(const store__record *rec)
{
    return HEADER_BYTES + strlen(rec->content_type) + rec->len;
}

void store__record_encode(const store__record *rec, unsigned char *buf)
{
    size_t ct_len = strlen(rec->content_type);

    buf[0] = FORMAT_V1;
    buf[1] = rec->deleted ? 1 : 0;
    buf[2] = (unsigned char)ct_len;
    buf[3] = 0;
    put_u64(buf + 4, rec->highest_token);
    put_u64(buf + 12, rec->token);
    put_u64(buf + 20, rec->version);
    put_u64(buf + 28, (uint64_t)rec->written_at_ms);
    for (int i = 0; i < 4; i++) {
        buf[36 + i] = (unsigned char)((uint32_t)rec->len >> (8 * i));
    }
    memcpy(buf + HEADER_BYTES, rec->content_type, ct_len);
    if (rec->len > 0) {
        memcpy(buf + HEADER_BYTES + ct_len, rec->data, rec->len);
    }
}

int store__record_decode(const unsigned char *buf, size_t len, store__record *rec)
{
    memset(rec, 0, sizeof *rec);
    if (buf == NULL || len < HEADER_BYTES || buf[0] != FORMAT_V1 || (buf[1] & ~1u) != 0 ||
        buf[3] != 0) {
        return -1;
    }
    size_t ct_len = buf[2];
    uint32_t value_len = 0;
    for (int i = 3; i >= 0; i--) {
        value_len = (value_len << 8) | buf[36 + i];
    }
    if ((size_t)HEADER_BYTES + ct_len + value_len != len) {
        return -1;
    }
    rec->deleted = buf[1] & 1;
    rec->highest_token = get_u64(buf + 4);
    rec->token = get_u64(buf + 12);
    rec->version = get_u64(buf + 20);
    rec->written_at_ms = (int64_t)get_u64(buf + 28);
    memcpy(rec->content_type, buf + HEADER_BYTES, ct_len);
    rec->content_type[ct_len] = '\0';
    /* A NUL inside the content type would hide its tail: the record would decode to less
     * than its bytes say, and encode back to different ones. */
    if (strlen(rec->content_type) != ct_len || !store__valid_content_type(rec->content_type) ||
        rec->token > rec->highest_token ||
        rec->highest_token >= STORE__TOKEN_LIMIT || (rec->deleted && value_len != 0)) {
        return -1;
    }
    rec->data = buf + HEADER_BYTES + ct_len;
    rec->len = value_len;
    return 0;
}

int store__valid_content_type(const char *s)
{
    size_t n = 0;
    if (s == NULL) {
        return 1;
    }
    for (; s[n] != '\0'; n++) {
        unsigned char ch = (unsigned char)s[n];
        if (ch < 0x20 || ch > 0x7e || n >= STORE_CONTENT_TYPE_MAX) {
            return 0;
        }
    }
    return 1;
}

store_status store__validate_write(const store_write_req *r, size_t max_value_bytes)
{
    if (!store__valid_name(r->resource) || r->token == 0 || r->token >= STORE__TOKEN_LIMIT) {
        return STORE_INVALID;
    }
    if (r->del) {
        return STORE_OK; /* a delete carries no value: data, len and type are not read */
    }
    if ((r->data == NULL && r->len > 0) || !store__valid_content_type(r->content_type)) {
        return STORE_INVALID;
    }
    if (r->len > max_value_bytes) {
        return STORE_TOO_LARGE;
    }
    return STORE_OK;
}

int store__secret_valid(const unsigned char *b, size_t n)
{
    unsigned char any = 0;
    for (size_t i = 0; i < n; i++) {
        any |= b[i];
    }
    return n == STORE_SECRET_LEN && any != 0;
}

int store__secret_make(unsigned char out[STORE_SECRET_LEN])
{
    if (getrandom(out, STORE_SECRET_LEN, 0) != (ssize_t)STORE_SECRET_LEN) {
        return -1;
    }
    return store__secret_valid(out, STORE_SECRET_LEN) ? 0 : -1;
}

int64_t store__wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
