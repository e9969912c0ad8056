/* storage: the on-disk record codec, and what the store does with a corrupt record or a
 * corrupt ledger found in a real LMDB environment (EIO, never a crash, never a guess). */
#include <lmdb.h>

#include "st_test.h"
#include "storage_internal.h"

static size_t encode_sample(unsigned char *buf, size_t cap, const char *value, int deleted)
{
    store__record rec;
    memset(&rec, 0, sizeof rec);
    rec.highest_token = 42;
    rec.token = 41;
    rec.version = 7;
    rec.written_at_ms = 1700000000123LL;
    rec.deleted = deleted;
    snprintf(rec.content_type, sizeof rec.content_type, "text/plain");
    rec.data = value;
    rec.len = deleted ? 0 : strlen(value);
    size_t n = store__record_size(&rec);
    assert_true(n <= cap);
    store__record_encode(&rec, buf);
    return n;
}

static void test_roundtrip(void **state)
{
    (void)state;
    unsigned char buf[256];
    store__record rec;
    size_t n = encode_sample(buf, sizeof buf, "hello", 0);

    assert_int_equal(store__record_decode(buf, n, &rec), 0);
    assert_int_equal(rec.highest_token, 42);
    assert_int_equal(rec.token, 41);
    assert_int_equal(rec.version, 7);
    assert_int_equal(rec.written_at_ms, 1700000000123LL);
    assert_int_equal(rec.deleted, 0);
    assert_string_equal(rec.content_type, "text/plain");
    assert_int_equal(rec.len, 5);
    assert_memory_equal(rec.data, "hello", 5);

    n = encode_sample(buf, sizeof buf, "", 1);
    assert_int_equal(store__record_decode(buf, n, &rec), 0);
    assert_int_equal(rec.deleted, 1);
    assert_int_equal(rec.len, 0);
}

/* Every truncation and extension is refused; every single-byte change either is refused or
 * decodes to a record whose value lies inside the buffer (ASan checks the reads). */
static void test_malformed_never_trusted(void **state)
{
    (void)state;
    unsigned char buf[256];
    unsigned char copy[257];
    store__record rec;
    size_t n = encode_sample(buf, sizeof buf, "some value bytes", 0);

    assert_int_equal(store__record_decode(NULL, 0, &rec), -1);
    for (size_t len = 0; len < n; len++) {
        memcpy(copy, buf, len);
        assert_int_equal(store__record_decode(copy, len, &rec), -1);
    }
    memcpy(copy, buf, n);
    copy[n] = 0;
    assert_int_equal(store__record_decode(copy, n + 1, &rec), -1);

    for (size_t i = 0; i < n; i++) {
        for (int bit = 0; bit < 8; bit++) {
            memcpy(copy, buf, n);
            copy[i] ^= (unsigned char)(1u << bit);
            if (store__record_decode(copy, n, &rec) == 0) {
                const unsigned char *p = rec.data;
                assert_true(p >= copy && p + rec.len <= copy + n);
                assert_true(rec.token <= rec.highest_token);
                assert_true(strlen(rec.content_type) <= STORE_CONTENT_TYPE_MAX);
            }
        }
    }
    /* A format this build does not know is refused, not guessed at. */
    memcpy(copy, buf, n);
    copy[0] = 2;
    assert_int_equal(store__record_decode(copy, n, &rec), -1);
}

/* A NUL inside the content type is corrupt, not a shorter content type: found by the fuzz
 * target record (tests/fuzz/corpus/record/ct_nul), where it decoded to "text" and encoded
 * back to other bytes than it came from. */
static void test_content_type_with_nul_refused(void **state)
{
    (void)state;
    unsigned char buf[256];
    store__record rec;
    size_t n = encode_sample(buf, sizeof buf, "v", 0);

    assert_int_equal(store__record_decode(buf, n, &rec), 0);
    buf[40 + 4] = '\0'; /* "text/plain" -> "text\0plain": same length, same value */
    assert_int_equal(store__record_decode(buf, n, &rec), -1);
}

/* Writes key -> bytes straight into one of the store's LMDB databases, as a disk that
 * flipped bits would leave it. */
static void plant(const char *dir, const char *db, const char *key, const void *bytes,
                  size_t len)
{
    MDB_env *env = NULL;
    MDB_txn *txn = NULL;
    MDB_dbi dbi;
    assert_int_equal(mdb_env_create(&env), 0);
    assert_int_equal(mdb_env_set_maxdbs(env, 4), 0);
    assert_int_equal(mdb_env_open(env, dir, 0, 0600), 0);
    assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, db, 0, &dbi), 0);
    MDB_val k = {strlen(key), (void *)key};
    MDB_val v = {len, (void *)bytes};
    assert_int_equal(mdb_put(txn, dbi, &k, &v, 0), 0);
    assert_int_equal(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
}

static void test_corrupt_record_is_eio(void **state)
{
    st_fixture *f = *state;
    store_write_result res;
    store_value v;
    store_entry e[4];
    size_t n = 0;
    uint64_t hi = 0;

    assert_st(store_write(f->s, "bad", 5, "v", 1, NULL, 5, &res), STORE_ACCEPTED);
    assert_st(store_write(f->s, "good", 5, "v", 1, NULL, 5, &res), STORE_ACCEPTED);
    store_close(f->s);
    plant(f->dir, "resources", "bad", "\x01garbage", 8);
    st_open(f);

    assert_st(store_read(f->s, "bad", &v), STORE_EIO);
    assert_st(store_highest(f->s, "bad", &hi), STORE_EIO);
    assert_st(store_delete(f->s, "bad"), STORE_EIO);
    assert_st(store_list(f->s, NULL, e, 4, &n), STORE_EIO);
    /* A write never overwrites a record it cannot read: the old high-water mark is unknown. */
    assert_st(store_write(f->s, "bad", 6, "w", 1, NULL, 6, &res), STORE_EIO);
    /* The rest of the store works, even beside the corrupt record in one batch. */
    assert_st(store_write(f->s, "good", 6, "w", 1, NULL, 6, &res), STORE_ACCEPTED);
    assert_st(store_read(f->s, "good", &v), STORE_OK);
    assert_int_equal(v.version, 2);
    store_value_free(&v);
    assert_st(store_list(f->s, "bad", e, 4, &n), STORE_OK);
    assert_int_equal(n, 1);
    assert_string_equal(e[0].resource, "good");
}

static void test_corrupt_ledger_refuses_to_open(void **state)
{
    st_fixture *f = *state;
    char err[512];
    store_close(f->s);
    f->s = NULL;
    plant(f->dir, "meta", "ledger.ceiling", "\x05\x00\x00", 3);
    /* Guessing a ceiling could hand out a token twice: refuse, and say why. */
    assert_st(store_open(&f->s, &f->opts, err, sizeof err), STORE_EIO);
    assert_null(f->s);
    assert_non_null(strstr(err, "ledger"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_malformed_never_trusted),
        cmocka_unit_test(test_content_type_with_nul_refused),
        cmocka_unit_test_setup_teardown(test_corrupt_record_is_eio, st_setup, st_teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_ledger_refuses_to_open, st_setup,
                                        st_teardown),
    };
    return cmocka_run_group_tests_name("storage_record", tests, NULL, NULL);
}
