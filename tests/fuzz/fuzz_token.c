/*
 * Fuzz target: the Fencing-Token header of PUT /resources/{resource} (gw__parse_token).
 *
 * Invariants: a value is accepted exactly when, after spaces and tabs are trimmed from both
 * ends, it is a decimal without a leading zero whose value is 1..2^53-1; the token returned
 * is in that range, and printing it gives back the trimmed text (one token, one spelling).
 * A refused value leaves the output alone.
 *
 * Input: the header value, as a C string.
 */
#include <inttypes.h>
#include <string.h>

#include "fuzz.h"
#include "ops/resources.h"

#define TOKEN_MAX 9007199254740991ULL /* 2^53 - 1 */

/* The oracle, from the spec alone: 1 when text[0, len) is a canonical token. */
static int canonical_token(const char *text, size_t len)
{
    static const char max_text[] = "9007199254740991";

    if (len == 0 || len > sizeof max_text - 1 || text[0] < '1' || text[0] > '9') {
        return 0;
    }
    for (size_t i = 1; i < len; i++) {
        if (text[i] < '0' || text[i] > '9') {
            return 0;
        }
    }
    /* Same number of digits: compare as text. */
    return len < sizeof max_text - 1 || memcmp(text, max_text, len) <= 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = fuzz_cstr(data, size);
    const uint64_t untouched = 0xdeadbeefULL;
    uint64_t token = untouched;
    char printed[32];

    const char *start = s;
    while (*start == ' ' || *start == '\t') {
        start++;
    }
    size_t len = strlen(start);
    while (len > 0 && (start[len - 1] == ' ' || start[len - 1] == '\t')) {
        len--;
    }
    int want = canonical_token(start, len);
    int rc = gw__parse_token(s, &token);

    fuzz_check(rc == 0 || rc == -1, "returns 0 or -1");
    fuzz_check((rc == 0) == want, "accepts exactly [1-9][0-9]* in 1..2^53-1, OWS-trimmed");
    if (rc == 0) {
        fuzz_check(token >= 1 && token <= TOKEN_MAX, "token in 1..2^53-1");
        snprintf(printed, sizeof printed, "%" PRIu64, token);
        fuzz_check(strlen(printed) == len && memcmp(printed, start, len) == 0,
                   "the token re-prints to its input");
    } else {
        fuzz_check(token == untouched, "a refused value leaves *token alone");
    }
    fuzz_check(gw__parse_token(NULL, &token) == -1, "NULL (no header) is refused");
    free(s);
    return 0;
}
