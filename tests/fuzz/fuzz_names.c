/*
 * Fuzz target: resource, owner and idempotency-key validation. Four copies of the same rule
 * live in the tree (locklib, storage, fencectl, and the gateway through locklib), and each
 * must accept exactly [A-Za-z0-9._:-]{1,200} for resources and {1,128} for owners and
 * Idempotency-Keys: a name one part accepts and another refuses would be a lock that can be
 * taken but never written, or a write the CLI cannot express.
 *
 * Input: the name, as a C string (an embedded NUL ends it, as in the APIs).
 */
#include <string.h>

#include "fc_args.h"
#include "fuzz.h"
#include "locklib/locklib.h"
#include "storage_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = fuzz_cstr(data, size);
    int resource = fuzz_valid_name(s, 200);
    int owner = fuzz_valid_name(s, 128);

    fuzz_check(!!lk_valid_resource(s) == resource, "lk_valid_resource != [A-Za-z0-9._:-]{1,200}");
    fuzz_check(!!lk_valid_owner(s) == owner, "lk_valid_owner != [A-Za-z0-9._:-]{1,128}");
    fuzz_check(!!store__valid_name(s) == resource, "store__valid_name != lk_valid_resource");
    fuzz_check(!!fc__valid_name(s, 200) == resource, "fc__valid_name(200) != resource rule");
    fuzz_check(!!fc__valid_name(s, 128) == owner, "fc__valid_name(128) != owner rule");

    /* The release channel exists exactly for valid names, and needs its exact size. */
    char channel[LK_RESOURCE_MAX + 32];
    size_t want = strlen(s) + strlen("fg:{}:released") + 1;
    lk_status st = lk_channel_name(s, channel, sizeof channel);
    fuzz_check((st == LK_OK) == resource, "lk_channel_name accepts exactly valid resources");
    if (resource) {
        fuzz_check(strlen(channel) + 1 == want && strncmp(channel, "fg:{", 4) == 0 &&
                       strncmp(channel + 4, s, strlen(s)) == 0,
                   "channel is fg:{resource}:released");
        char *exact = malloc(want);
        fuzz_check(exact != NULL, "malloc");
        fuzz_check(lk_channel_name(s, exact, want) == LK_OK, "channel fits its exact size");
        fuzz_check(lk_channel_name(s, exact, want - 1) == LK_EINVAL, "short buffer is EINVAL");
        free(exact);
    }
    free(s);
    return 0;
}
