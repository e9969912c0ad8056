/*
 * The fencegate command line: --help, --version, --routes, --check-config, and the exit
 * status and message for bad flags, values and environment variables. Runs the real binary.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "gw_test.h"
#include "harness.h"

typedef struct run {
    int status;
    char *out;
    char *err;
} run;

static void run_it(run *r, const char *const *argv, const char *const *env)
{
    r->status = gwt_run(argv, env, &r->out, &r->err);
}

static void run_free(run *r)
{
    free(r->out);
    free(r->err);
}

/* Exit 2 and a message on stderr that names `needle`. */
static void expect_usage_error(const char *const *argv, const char *const *env,
                               const char *needle)
{
    run r;
    run_it(&r, argv, env);
    if (r.status != 2 || strstr(r.err, needle) == NULL) {
        fail_msg("expected exit 2 naming '%s'; got %d, stderr: %s", needle, r.status, r.err);
    }
    run_free(&r);
}

static void test_help_lists_every_flag_and_variable(void **state)
{
    static const char *const names[] = {
        "--listen", "FENCEGATE_LISTEN", "--redis", "FENCEGATE_REDIS", "--data",
        "FENCEGATE_DATA", "--auth-token-file", "FENCEGATE_AUTH_TOKEN_FILE",
        "--max-value-bytes", "FENCEGATE_MAX_VALUE_BYTES", "--map-size", "FENCEGATE_MAP_SIZE",
        "--threads", "FENCEGATE_THREADS",
        "--max-connections", "FENCEGATE_MAX_CONNECTIONS", "--max-waiters",
        "FENCEGATE_MAX_WAITERS", "--max-connections-per-address",
        "FENCEGATE_MAX_CONNECTIONS_PER_ADDRESS", "--token-key-idle-ttl",
        "FENCEGATE_TOKEN_KEY_IDLE_TTL", "--log-format",
        "FENCEGATE_LOG_FORMAT", "--help", "--version", "--routes", "--check-config", NULL};
    const char *const argv[] = {"--help", NULL};
    run r;
    (void)state;

    run_it(&r, argv, NULL);
    assert_int_equal(r.status, 0);
    for (int i = 0; names[i] != NULL; i++) {
        if (strstr(r.out, names[i]) == NULL) {
            fail_msg("--help does not mention %s:\n%s", names[i], r.out);
        }
    }
    run_free(&r);
}

static void test_version(void **state)
{
    const char *const argv[] = {"--version", NULL};
    run r;
    (void)state;

    run_it(&r, argv, NULL);
    assert_int_equal(r.status, 0);
    assert_true(strncmp(r.out, "fencegate ", 10) == 0);
    assert_true(r.out[10] >= '0' && r.out[10] <= '9');
    run_free(&r);
}

static void test_routes(void **state)
{
    static const char *const want[] = {
        "POST /lock lock body\n",   "POST /unlock lock body\n", "POST /renew lock body\n",
        "GET /locks/{resource} read path\n", "GET /resources/{resource} read path\n",
        "PUT /resources/{resource} write path\n", "GET /healthz public none\n", "GET /readyz metrics none\n",
        "GET /metrics metrics none\n", "HEAD /locks/{resource} read path\n",
        "HEAD /resources/{resource} read path\n", "HEAD /healthz public none\n", "HEAD /readyz metrics none\n",
        "HEAD /metrics metrics none\n", "GET /livez public none\n", "HEAD /livez public none\n",
        "GET /locks read none\n", "HEAD /locks read none\n", "POST /admin/release admin body\n",
        "GET /ui/ public none\n", "HEAD /ui/ public none\n", "GET /ui/{file} public none\n",
        "HEAD /ui/{file} public none\n", "POST /resources write body\n",
        "DELETE /resources/{resource} write path\n", "POST /sessions lock none\n",
        "POST /sessions/{session}/renew lock none\n", "GET /sessions/{session} lock none\n",
        "HEAD /sessions/{session} lock none\n", "DELETE /sessions/{session} lock none\n", NULL};
    const char *const argv[] = {"--routes", NULL};
    run r;
    int lines = 0;
    (void)state;

    run_it(&r, argv, NULL);
    assert_int_equal(r.status, 0);
    for (int i = 0; want[i] != NULL; i++) {
        if (strstr(r.out, want[i]) == NULL) {
            fail_msg("--routes lacks %s:\n%s", want[i], r.out);
        }
    }
    for (const char *p = r.out; *p != '\0'; p++) {
        lines += *p == '\n';
    }
    assert_int_equal(lines, 30);
    run_free(&r);
}

static void test_unknown_flag_and_bad_values(void **state)
{
    (void)state;
    expect_usage_error((const char *const[]){"--bogus", NULL}, NULL, "--bogus");
    expect_usage_error((const char *const[]){"--threads", "0", NULL}, NULL, "--threads");
    expect_usage_error((const char *const[]){"--threads=abc", NULL}, NULL, "--threads");
    expect_usage_error((const char *const[]){"--max-value-bytes", "-1", NULL}, NULL,
                       "--max-value-bytes");
    expect_usage_error((const char *const[]){"--max-connections", "1x", NULL}, NULL,
                       "--max-connections");
    expect_usage_error((const char *const[]){"--log-format", "xml", NULL}, NULL,
                       "--log-format");
    expect_usage_error((const char *const[]){"--max-waiters", "0", NULL}, NULL,
                       "--max-waiters");
    /* Waiters must leave connections for everything else. */
    expect_usage_error((const char *const[]){"--max-connections", "10", "--max-waiters", "10",
                                             NULL},
                       NULL, "--max-waiters");
    /* Durations: digits and one unit of ms, s, m, h, d; nothing else, nothing past 10 years. */
    static const char *const bad_ttls[] = {"", "-1s", "1x", "1.5s", "s", "1 s", "3651d",
                                           "99999999999999999999", "1sm", NULL};
    for (int i = 0; bad_ttls[i] != NULL; i++) {
        expect_usage_error((const char *const[]){"--token-key-idle-ttl", bad_ttls[i], NULL},
                           NULL, "--token-key-idle-ttl");
    }
    expect_usage_error((const char *const[]){"--check-config", NULL},
                       (const char *const[]){"FENCEGATE_TOKEN_KEY_IDLE_TTL=2w", NULL},
                       "FENCEGATE_TOKEN_KEY_IDLE_TTL");
    expect_usage_error((const char *const[]){"--map-size", "lots", NULL}, NULL, "--map-size");
    expect_usage_error((const char *const[]){"--map-size=0", NULL}, NULL, "--map-size");
    expect_usage_error((const char *const[]){"--map-size", "1048575", NULL}, NULL,
                       "--map-size"); /* below 1 MiB */
    expect_usage_error((const char *const[]){"--map-size", "1G", NULL}, NULL, "--map-size");
    expect_usage_error((const char *const[]){"--map-size", "99999999999999999999", NULL}, NULL,
                       "--map-size");
    expect_usage_error((const char *const[]){"--listen", NULL}, NULL, "--listen");
    expect_usage_error((const char *const[]){"--check-config", "--listen", "nowhere", NULL},
                       NULL, "--listen");
    expect_usage_error((const char *const[]){"--check-config", "--listen", "127.0.0.1:70000",
                                             NULL},
                       NULL, "--listen");
    expect_usage_error((const char *const[]){"--check-config", "--redis", "ftp://x", NULL},
                       NULL, "--redis");
    expect_usage_error((const char *const[]){"--check-config", "--auth-token-file",
                                             "/nonexistent/token", NULL},
                       NULL, "--auth-token-file");
    /* Quoted input stays one printable line: a newline or an escape sequence in a value is
     * shown as '?' (found by the cli fuzz target). */
    expect_usage_error((const char *const[]){"--threads", "4\n\x1b[2J", NULL}, NULL,
                       "'4??[2J' is not a whole number");
}

static void test_bad_environment_is_named(void **state)
{
    (void)state;
    expect_usage_error(NULL, (const char *const[]){"FENCEGATE_THREADS=abc", NULL},
                       "FENCEGATE_THREADS");
    expect_usage_error(NULL, (const char *const[]){"FENCEGATE_LOG_FORMAT=yaml", NULL},
                       "FENCEGATE_LOG_FORMAT");
    expect_usage_error(NULL, (const char *const[]){"FENCEGATE_MAX_VALUE_BYTES=0", NULL},
                       "FENCEGATE_MAX_VALUE_BYTES");
    expect_usage_error(NULL, (const char *const[]){"FENCEGATE_MAP_SIZE=-1", NULL},
                       "FENCEGATE_MAP_SIZE");
}

static void test_check_config(void **state)
{
    char dir[256], token[300];
    run r;
    (void)state;

    th_tempdir(dir, sizeof dir, "gwcli");
    snprintf(token, sizeof token, "%s/token", dir);
    gwt_write_file(token, "s3cret\n");
    const char *const argv[] = {"--check-config", "--auth-token-file", token, "--listen",
                                "127.0.0.1:1", "--redis", "redis://127.0.0.1:1", NULL};
    run_it(&r, argv, NULL);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "ok"));
    run_free(&r);

    /* A flag overrides the variable; the bad variable is then never used. */
    const char *const argv2[] = {"--check-config", "--threads", "2", "--token-key-idle-ttl",
                                 "0", NULL};
    run_it(&r, argv2, (const char *const[]){"FENCEGATE_THREADS=abc",
                                            "FENCEGATE_LOG_FORMAT=json", NULL});
    assert_int_equal(r.status, 0);
    run_free(&r);
    static const char *const good_ttls[] = {"1500", "500ms", "30s", "2m", "12h", "3650d", NULL};
    for (int i = 0; good_ttls[i] != NULL; i++) {
        const char *const argv3[] = {"--check-config", "--token-key-idle-ttl", good_ttls[i], NULL};
        run_it(&r, argv3, NULL);
        if (r.status != 0) {
            fail_msg("--token-key-idle-ttl %s refused: %s", good_ttls[i], r.err);
        }
        run_free(&r);
    }

    /* An empty token file is refused. */
    gwt_write_file(token, "");
    expect_usage_error((const char *const[]){"--check-config", "--auth-token-file", token,
                                             NULL},
                       NULL, "empty");

    /* The token file rule fencectl reads by too (gateway/common/token_file.h): white space
     * around the token is not part of it, a second line is refused, not ignored. */
    gwt_write_file(token, " \t s3cret \r\n");
    run_it(&r, argv, NULL);
    if (r.status != 0) {
        fail_msg("a token with white space around it was refused: %s", r.err);
    }
    run_free(&r);
    gwt_write_file(token, "s3cret\nsecond line\n");
    expect_usage_error((const char *const[]){"--check-config", "--auth-token-file", token,
                                             NULL},
                       NULL, "another line");
    gwt_write_file(token, " \r\n\t\n");
    expect_usage_error((const char *const[]){"--check-config", "--auth-token-file", token,
                                             NULL},
                       NULL, "only white space");
    th_rmtree(dir);

    /* Redlock's masters have no replicas to wait for. */
    expect_usage_error((const char *const[]){"--check-config", "--redis",
                                             "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3",
                                             "--redis-min-replicas", "1", NULL},
                       NULL, "--redis-min-replicas does not apply");
}

/* --check-config applies the open-file limit as start-up does: under a hard limit of 100
 * it names the lowered --max-connections (12: the reserve is 88 with 4 loops on one Redis,
 * main.c fit_fd_limit) and exits 0; under 60, which leaves no room for two connections, it
 * exits 1 naming the limit, as start-up would. Before, it said "ok" to both. */
static void test_check_config_applies_the_open_file_limit(void **state)
{
    run r;
    (void)state;
    const char *const argv[] = {"--check-config", "--threads", "4", NULL};

    gwt_child_nofile = 100;
    run_it(&r, argv, NULL);
    if (r.status != 0 || strstr(r.out, "connections 12 ") == NULL ||
        strstr(r.err, "lowered from 1024 to 12") == NULL) {
        fail_msg("limit 100: exit %d, stdout: %s, stderr: %s", r.status, r.out, r.err);
    }
    run_free(&r);
    gwt_child_nofile = 60;
    run_it(&r, argv, NULL);
    if (r.status != 1 || strstr(r.err, "open-file limit 60") == NULL) {
        fail_msg("limit 60: exit %d, stdout: %s, stderr: %s", r.status, r.out, r.err);
    }
    run_free(&r);
}

/* A malformed owner secret in the data directory stops the start with exit 1 and a message
 * naming the file; the gateway never serves with a secret other than the one it had. */
static void test_malformed_owner_secret(void **state)
{
    static const struct {
        const char *content;
        size_t len;
    } bad[] = {{"short", 5}, {"seventeen bytes!!", 17}, {"\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 16}};
    char dir[256], data[300], secret[400], listen[64];
    (void)state;

    th_tempdir(dir, sizeof dir, "gwsecret");
    snprintf(data, sizeof data, "%s/data", dir);
    snprintf(secret, sizeof secret, "%s/owner-secret", data);
    snprintf(listen, sizeof listen, "127.0.0.1:%d", th_free_port());
    assert_int_equal(mkdir(data, 0700), 0);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        FILE *f = fopen(secret, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(bad[i].content, 1, bad[i].len, f), bad[i].len);
        assert_int_equal(fclose(f), 0);
        const char *const argv[] = {"--listen", listen, "--redis", "redis://127.0.0.1:1",
                                    "--data", data, NULL};
        run r;
        run_it(&r, argv, NULL);
        if (r.status != 1 || strstr(r.err, "owner-secret") == NULL ||
            strstr(r.err, "malformed") == NULL) {
            fail_msg("secret of %zu bytes: expected exit 1 naming owner-secret; got %d: %s",
                     bad[i].len, r.status, r.err);
        }
        run_free(&r);
    }
    th_rmtree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help_lists_every_flag_and_variable),
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_routes),
        cmocka_unit_test(test_unknown_flag_and_bad_values),
        cmocka_unit_test(test_bad_environment_is_named),
        cmocka_unit_test(test_check_config),
        cmocka_unit_test(test_check_config_applies_the_open_file_limit),
        cmocka_unit_test(test_malformed_owner_secret),
    };
    return cmocka_run_group_tests_name("gateway_cli", tests, NULL, NULL);
}
