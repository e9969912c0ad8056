/*
 * fencegate/limits.h: the limits of fencegate's contract that more than one component
 * enforces, defined once. locklib checks them before Redis sees a call, storage before a
 * write reaches the disk, fencectl before a request leaves, and the gateway answers 400 with
 * the same words. A name one part accepts and another refuses would be a lock that can be
 * taken but never written; a token one part mints and another refuses would be a grant whose
 * writes all fail. api/openapi.yaml states the same limits for HTTP clients.
 *
 * Header-only, with no dependency, so that locklib and storage can both include it without
 * depending on each other. Installed beside locklib.h, which includes it.
 */
#ifndef FENCEGATE_LIMITS_H
#define FENCEGATE_LIMITS_H

#include <stddef.h>

/* The largest fencing token, 2^53 - 1: the Redis scripts count in Lua numbers, which are
 * doubles, and JSON clients read numbers as doubles too. Tokens are 1..FG_TOKEN_MAX. */
#define FG_TOKEN_MAX 9007199254740991LL

/* Names (resources, owners, idempotency keys) are 1..max bytes of FG_NAME_CHARS. The set
 * needs no escaping in a Redis key, a URL path, a JSON string, a log line or a SQL literal. */
#define FG_NAME_CHARS "[A-Za-z0-9._:-]"
#define FG_RESOURCE_MAX 200
#define FG_OWNER_MAX 128 /* owners and idempotency keys */

/* 1 when ch may appear in a name. */
static inline int fg_name_char(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '.' || ch == '_' || ch == ':' || ch == '-';
}

/* 1 when s is a name of 1..max bytes of FG_NAME_CHARS; 0 otherwise, and for NULL. Reads at
 * most max + 1 bytes of s. */
static inline int fg_valid_name(const char *s, size_t max)
{
    size_t n = 0;

    if (s == NULL) {
        return 0;
    }
    for (; s[n] != '\0'; n++) {
        if (n >= max || !fg_name_char((unsigned char)s[n])) {
            return 0;
        }
    }
    return n >= 1;
}

#endif
