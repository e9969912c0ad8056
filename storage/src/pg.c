/* PostgreSQL backend: not yet (the next commits). */
#include <stdio.h>

#include "backend.h"

store_status store__pg_open(void **out, const char *url, const store_options *opts,
                            char *desc, size_t desclen, char *err, size_t errlen)
{
    (void)url;
    (void)opts;
    (void)desc;
    (void)desclen;
    *out = NULL;
    if (err != NULL) {
        snprintf(err, errlen, "the PostgreSQL backend is not built yet");
    }
    return STORE_INVALID;
}

const store__ops store__pg_ops = {.name = "postgresql"};
