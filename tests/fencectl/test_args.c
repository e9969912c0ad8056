/*
 * fencectl's command-line parser alone (fc_args.c): durations, flags, subcommands and the
 * checks for required arguments. No gateway is needed: the parser does no I/O.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "fc_args.h"

static void test_durations(void **state)
{
    int64_t ms = -1;
    (void)state;

    assert_int_equal(fc__parse_duration("500ms", &ms), 0);
    assert_int_equal(ms, 500);
    assert_int_equal(fc__parse_duration("30s", &ms), 0);
    assert_int_equal(ms, 30000);
    assert_int_equal(fc__parse_duration("2m", &ms), 0);
    assert_int_equal(ms, 120000);
    assert_int_equal(fc__parse_duration("0s", &ms), 0);
    assert_int_equal(ms, 0);
    assert_int_equal(fc__parse_duration("1440m", &ms), 0);
    assert_int_equal(ms, 86400000);

    static const char *const bad[] = {"", "5", "s", "-1s", "+1s", "1.5s", "5h", "5 s", "5sec",
                                      "1441m", "86400001ms", "99999999999999999999999ms",
                                      "5ms ", NULL};
    for (int i = 0; bad[i] != NULL; i++) {
        ms = 7;
        assert_int_equal(fc__parse_duration(bad[i], &ms), -1);
        assert_int_equal(ms, 7);
    }
}

static void test_names(void **state)
{
    char long_name[202];
    (void)state;

    assert_true(fg_valid_name("orders.eu-1:a_b", 200));
    assert_false(fg_valid_name("", 200));
    assert_false(fg_valid_name("a/b", 200));
    assert_false(fg_valid_name("a b", 200));
    memset(long_name, 'a', 201);
    long_name[201] = '\0';
    assert_false(fg_valid_name(long_name, 200));
    long_name[200] = '\0';
    assert_true(fg_valid_name(long_name, 200));
}

/* Parses a NULL-terminated argv (without the program name). The argv array is static
 * because o->command points into it. */
static int parse(const char *const *args, fc_options *o, char *err, size_t errlen)
{
    static char *argv[32];
    int argc = 0;

    argv[argc++] = "fencectl";
    for (int i = 0; args[i] != NULL; i++) {
        argv[argc++] = (char *)args[i];
    }
    argv[argc] = NULL;
    return fc__parse_args(argc, argv, o, err, errlen);
}

static void test_lock_line(void **state)
{
    fc_options o;
    char err[256];
    (void)state;

    const char *const full[] = {"--url", "http://h:1", "lock", "orders", "--ttl=600ms",
                                "--wait", "2m", "--kill-grace", "1s", "--conflict-exit-code",
                                "9", "-v", "--", "sh", "-c", "exit 7", NULL};
    assert_int_equal(parse(full, &o, err, sizeof err), 0);
    assert_int_equal(o.cmd, FC_CMD_LOCK);
    assert_string_equal(o.url, "http://h:1");
    assert_string_equal(o.resource, "orders");
    assert_int_equal(o.ttl_ms, 600);
    assert_int_equal(o.wait_ms, 120000);
    assert_int_equal(o.kill_grace_ms, 1000);
    assert_int_equal(o.conflict_exit_code, 9);
    assert_int_equal(o.verbose, 1);
    assert_string_equal(o.command[0], "sh");
    assert_string_equal(o.command[2], "exit 7");
    assert_null(o.command[3]);

    /* Defaults, and COMMAND without "--": its own flags stay its own. */
    const char *const bare[] = {"lock", "orders", "ls", "--ttl", "1s", NULL};
    assert_int_equal(parse(bare, &o, err, sizeof err), 0);
    assert_int_equal(o.ttl_ms, FC_DEFAULT_TTL_MS);
    assert_int_equal(o.wait_ms, 0);
    assert_int_equal(o.kill_grace_ms, FC_DEFAULT_KILL_GRACE_MS);
    assert_int_equal(o.conflict_exit_code, FC_EXIT_CONFLICT);
    assert_string_equal(o.command[1], "--ttl");
}

/* --allow-empty is write's only: off unless given, and refused by the other commands. */
static void test_allow_empty(void **state)
{
    fc_options o;
    char err[256];
    (void)state;

    const char *const plain[] = {"write", "r", "--token", "3", NULL};
    assert_int_equal(parse(plain, &o, err, sizeof err), 0);
    assert_int_equal(o.allow_empty, 0);

    const char *const allowed[] = {"write", "r", "--allow-empty", "--token", "3", NULL};
    assert_int_equal(parse(allowed, &o, err, sizeof err), 0);
    assert_int_equal(o.cmd, FC_CMD_WRITE);
    assert_int_equal(o.allow_empty, 1);
    assert_int_equal(o.token, 3);

    const char *const valued[] = {"write", "r", "--token", "3", "--allow-empty=1", NULL};
    assert_int_equal(parse(valued, &o, err, sizeof err), -1);
    assert_string_equal(err, "--allow-empty takes no value");

    const char *const on_read[] = {"read", "r", "--allow-empty", NULL};
    assert_int_equal(parse(on_read, &o, err, sizeof err), -1);
    assert_string_equal(err, "--allow-empty is not an option of read");

    assert_non_null(strstr(fc__help(FC_CMD_WRITE), "--allow-empty"));
    assert_non_null(strstr(fc__help(FC_CMD_NONE), "--allow-empty"));
}

/* Each bad line fails with a reason containing the given words. */
static void test_bad_lines(void **state)
{
    static const struct {
        const char *args[8];
        const char *reason;
    } cases[] = {
        {{NULL}, "missing command"},
        {{"frob", NULL}, "unknown command 'frob'"},
        {{"lock", NULL}, "lock needs a RESOURCE"},
        {{"lock", "r", NULL}, "lock needs a COMMAND"},
        {{"lock", "r", "--", NULL}, "lock needs a COMMAND"},
        {{"lock", "a/b", "--", "true", NULL}, "resource 'a/b' must be"},
        {{"lock", "r", "--ttl", NULL}, "--ttl needs a value"},
        {{"lock", "r", "--ttl", "50ms", "--", "true", NULL}, "--ttl must be from 100ms"},
        {{"lock", "r", "--wait", "61m", "--", "true", NULL}, "--wait must be from"},
        {{"lock", "r", "--conflict-exit-code", "256", "--", "true", NULL}, "from 0 to 255"},
        {{"lock", "r", "--token", "1", "--", "true", NULL}, "--token is not an option of lock"},
        {{"lock", "r", "--bogus", NULL}, "unknown option '--bogus'"},
        {{"lock", "r", "--verbose=1", NULL}, "--verbose takes no value"},
        {{"unlock", "r", NULL}, "unlock needs --owner"},
        {{"renew", "r", "--owner", "bad owner", NULL}, "--owner must be"},
        {{"write", "r", NULL}, "write needs --token"},
        {{"write", "r", "--token", "0", NULL}, "--token must be a positive integer"},
        {{"write", "r", "--token", "9007199254740992", NULL}, "below 2^53"},
        {{"read", "r", "extra", NULL}, "unexpected argument 'extra'"},
        {{"--", "lock", NULL}, "'--' only comes after"},
        {{"--ttl", "1s", "lock", NULL}, "--ttl is not an option of fencectl without"},
        /* Quoted input stays one printable line (found by the cli fuzz target). */
        {{"lock", "r", "--wait=2m\n", "--", "true", NULL}, "--wait: '2m?' is not a duration"},
        {{"fr\x1b[2Job", NULL}, "unknown command 'fr?[2Job'"},
    };
    fc_options o;
    char err[256];
    (void)state;

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(parse(cases[i].args, &o, err, sizeof err), -1);
        if (strstr(err, cases[i].reason) == NULL) {
            fail_msg("case %zu: '%s' does not contain '%s'", i, err, cases[i].reason);
        }
        assert_null(strchr(err, '\n'));
    }
}

static void test_help_and_version(void **state)
{
    fc_options o;
    char err[256];
    (void)state;

    const char *const lock_help[] = {"lock", "--help", NULL};
    assert_int_equal(parse(lock_help, &o, err, sizeof err), 0);
    assert_int_equal(o.help, 1);
    assert_int_equal(o.cmd, FC_CMD_LOCK);
    assert_non_null(strstr(fc__help(o.cmd), "--kill-grace"));

    const char *const version[] = {"--version", NULL};
    assert_int_equal(parse(version, &o, err, sizeof err), 0);
    assert_int_equal(o.version, 1);
    assert_non_null(strstr(fc__help(FC_CMD_NONE), "Exit codes:"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_durations),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_lock_line),
        cmocka_unit_test(test_bad_lines),
        cmocka_unit_test(test_allow_empty),
        cmocka_unit_test(test_help_and_version),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
