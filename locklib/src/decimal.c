/* The decimal text of a 64-bit integer: why it is written here is in decimal_internal.h. */
#include "decimal_internal.h"

size_t lk__decimal(char *buf, int64_t n)
{
    char rev[LK__DECIMAL_MAX];
    /* The magnitude in unsigned arithmetic, so INT64_MIN is no overflow. */
    uint64_t u = n < 0 ? 0 - (uint64_t)n : (uint64_t)n;
    size_t k = 0, len = 0;

    do {
        rev[k++] = (char)('0' + u % 10);
        u /= 10;
    } while (u > 0);
    if (n < 0) {
        buf[len++] = '-';
    }
    while (k > 0) {
        buf[len++] = rev[--k];
    }
    buf[len] = '\0';
    return len;
}
