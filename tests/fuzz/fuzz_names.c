/*
 * Fuzz target: resource, owner and idempotency-key names. The rule is defined once, in
 * fencegate/limits.h (fg_valid_name); locklib, storage, fencectl and the gateway all call it.
 * This target checks that one definition against the rule written out independently here
 * ([A-Za-z0-9._:-]{1,200} for resources, {1,128} for owners and Idempotency-Keys), that each
 * component's entry point still is that definition, and that the release channel name is
 * made exactly for valid resources.
 *
 * Input: the name, as a C string (an embedded NUL ends it, as in the APIs).
 */
#include <string.h>

#include "fencegate/limits.h"
#include "fuzz.h"
#include "locklib/locklib.h"
#include "storage_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = fuzz_cstr(data, size);
    int resource = fuzz_valid_name(s, 200);
    int owner = fuzz_valid_name(s, 128);

    fuzz_check(!!fg_valid_name(s, FG_RESOURCE_MAX) == resource,
               "fg_valid_name(FG_RESOURCE_MAX) != [A-Za-z0-9._:-]{1,200}");
    fuzz_check(!!fg_valid_name(s, FG_OWNER_MAX) == owner,
               "fg_valid_name(FG_OWNER_MAX) != [A-Za-z0-9._:-]{1,128}");
    fuzz_check(!!lk_valid_resource(s) == resource, "lk_valid_resource != resource rule");
    fuzz_check(!!lk_valid_owner(s) == owner, "lk_valid_owner != owner rule");
    fuzz_check(!!store__valid_name(s) == resource, "store__valid_name != resource rule");

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
