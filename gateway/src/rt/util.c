/*
 * Small helpers every layer uses: the monotonic clock, printable copies of client bytes, and
 * counting request headers.
 */
#define _DEFAULT_SOURCE
#include <string.h>
#include <strings.h>
#include <time.h>

#include "rt/util.h"

int64_t gw__now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t gw__now_ms(void)
{
    return gw__now_us() / 1000;
}

int64_t gw__wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void gw__printable(char *dst, size_t len, const char *src)
{
    size_t i = 0;
    for (; src[i] != '\0' && i + 1 < len; i++) {
        unsigned char ch = (unsigned char)src[i];
        dst[i] = (ch >= 0x21 && ch <= 0x7e && ch != '"' && ch != '\\') ? (char)ch : '?';
    }
    dst[i] = '\0';
}

typedef struct header_count {
    const char *name;
    const char *value;
    int n;
} header_count;

static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                    const char *value)
{
    header_count *hc = cls;
    (void)kind;
    if (key != NULL && strcasecmp(key, hc->name) == 0) {
        hc->n++;
        hc->value = value;
    }
    return MHD_YES;
}

int gw__header_count(struct MHD_Connection *conn, const char *name, const char **value)
{
    header_count hc = {name, NULL, 0};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, count_header, &hc);
    if (value != NULL) {
        *value = hc.value;
    }
    return hc.n;
}
