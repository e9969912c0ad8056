/*
 * The text locklib writes into every script call, checked on its own (no server): the key
 * names (lk__key, lk__idem_key), the release channel (lk_channel_name) and the decimal
 * numbers (lk__decimal). Each is built without snprintf on the thread that sends the calls,
 * so each is checked here against what snprintf writes, at the edges too: the longest names,
 * a channel buffer one byte short, and the 64-bit extremes.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "lk_test.h"
#include "decimal_internal.h"
#include "util_internal.h"

static void fill(char *buf, char ch, size_t n)
{
    memset(buf, ch, n);
    buf[n] = '\0';
}

static void test_keys(void **state)
{
    (void)state;
    char key[LK__KEY_MAX];
    char want[LK__KEY_MAX + 64];

    lk__key(key, "orders", "lock");
    assert_string_equal(key, "fg:{orders}:lock");
    lk__idem_key(key, "orders", "retry-1");
    assert_string_equal(key, "fg:{orders}:idem:retry-1");

    /* The longest names still fit whole. */
    char resource[LK_RESOURCE_MAX + 1], idem[LK_OWNER_MAX + 1];
    fill(resource, 'r', LK_RESOURCE_MAX);
    fill(idem, 'i', LK_OWNER_MAX);
    lk__idem_key(key, resource, idem);
    snprintf(want, sizeof want, "fg:{%s}:idem:%s", resource, idem);
    assert_string_equal(key, want);
    lk__key(key, resource, "released");
    snprintf(want, sizeof want, "fg:{%s}:released", resource);
    assert_string_equal(key, want);
}

static void test_channel_name(void **state)
{
    (void)state;
    char buf[LK_RESOURCE_MAX + 32];
    const char *want = "fg:{orders}:released";
    size_t n = strlen(want);

    assert_int_equal(lk_channel_name("orders", buf, sizeof buf), LK_OK);
    assert_string_equal(buf, want);
    /* Exactly enough room, then a byte short: refused, and what was written ends inside the
     * buffer, as snprintf would leave it. */
    memset(buf, 'x', sizeof buf);
    assert_int_equal(lk_channel_name("orders", buf, n + 1), LK_OK);
    assert_string_equal(buf, want);
    for (size_t len = 1; len <= n; len++) {
        char cut[sizeof buf];
        memset(buf, 'x', sizeof buf);
        memcpy(cut, want, len - 1); /* what snprintf(cut, len, ...) keeps */
        cut[len - 1] = '\0';
        assert_int_equal(lk_channel_name("orders", buf, len), LK_EINVAL);
        assert_string_equal(buf, cut);
        assert_int_equal(buf[len], 'x'); /* nothing past the given length */
    }
    assert_int_equal(lk_channel_name("orders", buf, 0), LK_EINVAL);
    assert_int_equal(lk_channel_name("ord{ers}", buf, sizeof buf), LK_EINVAL);
    assert_int_equal(lk_channel_name("orders", NULL, sizeof buf), LK_EINVAL);
}

static void check_decimal(int64_t v)
{
    char got[LK__DECIMAL_MAX], want[32];
    snprintf(want, sizeof want, "%" PRId64, v);
    size_t len = lk__decimal(got, v);
    if (strcmp(got, want) != 0 || len != strlen(want)) {
        fail_msg("lk__decimal(%s) wrote \"%s\" (length %zu)", want, got, len);
    }
}

static void test_decimal(void **state)
{
    (void)state;
    check_decimal(0);
    check_decimal(INT64_MAX);
    check_decimal(INT64_MIN); /* the longest text, and no magnitude to negate in int64_t */
    check_decimal(INT64_MIN + 1);
    check_decimal(1000000000000000000 - 1); /* 18 digits to 19, the last change of length */
    check_decimal(1000000000000000000);
    check_decimal(1000000000000000000 + 1);
    check_decimal(-1000000000000000000);
    /* Every power of ten and its neighbours, both signs: where the digit count changes. */
    for (int64_t p = 1; p <= INT64_MAX / 10; p *= 10) {
        for (int64_t d = -1; d <= 1; d++) {
            check_decimal(p + d);
            check_decimal(-(p + d));
        }
    }
    /* And a spread of values of every length (xorshift64, a fixed seed). */
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (int i = 0; i < 100000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        check_decimal((int64_t)(x >> (unsigned)(i % 64)) * (i % 2 ? -1 : 1));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_channel_name),
        cmocka_unit_test(test_decimal),
    };
    return cmocka_run_group_tests_name("locklib_names", tests, NULL, NULL);
}
