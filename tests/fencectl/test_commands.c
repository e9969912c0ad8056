/*
 * fencectl's one-request commands (write, read, status, unlock, renew, ls, release --force),
 * its auth, --url,
 * --help, --version and usage errors, end to end against the real fencegate binary and a
 * real redis-server. Locks for the owner-based commands are taken over HTTP by the test
 * itself, so the owner is known.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fc_test.h"
#include "gw_test.h"
#include "harness.h"

#define SECRET "s3cr3t-fencectl-token"

typedef struct cmd_state {
    th_redis redis;
    gwt_proc gw;
    char dir[256];
} cmd_state;

static int group_setup(void **state)
{
    cmd_state *s = calloc(1, sizeof *s);

    th_redis_start(&s->redis, 0, NULL);
    gwt_start(&s->gw, s->redis.url, NULL, NULL);
    th_tempdir(s->dir, sizeof s->dir, "fencectl-cmd");
    *state = s;
    return 0;
}

static int group_teardown(void **state)
{
    cmd_state *s = *state;
    int rc = gwt_stop(&s->gw);
    th_redis_stop(&s->redis);
    th_rmtree(s->dir);
    free(s);
    return rc == 0 ? 0 : -1;
}

/* POST /lock for owner, asserting 200; returns the token. */
static long long take(const gwt_proc *gw, const char *resource, const char *owner)
{
    char body[256];
    gwt_resp r;

    snprintf(body, sizeof body, "{\"resource\":\"%s\",\"owner\":\"%s\"}", resource, owner);
    gwt_post(gw, "/lock", body, &r);
    gwt_assert_status(&r, 200, NULL);
    long long token = gwt_int(&r, "token");
    gwt_resp_free(&r);
    assert_true(token > 0);
    return token;
}

/* Runs fencectl with argv against gw (NULL: no FENCEGATE_URL), stdin from in_path. */
static int run(const cmd_state *s, fct_run *r, const gwt_proc *gw, const char *in_path,
               const char *const *argv)
{
    return fct_exec(r, s->dir, gw != NULL ? gw->url : NULL, in_path, NULL, argv);
}

/* The run's stdout parsed as a JSON object. The caller decrefs it. */
static json_t *stdout_json(const fct_run *r)
{
    char *text = fct_slurp(r->out, NULL);
    json_t *root = json_loads(text, 0, NULL);
    if (!json_is_object(root)) {
        fail_msg("stdout is not a JSON object: %s", text);
    }
    free(text);
    return root;
}

static long long json_int_of(json_t *root, const char *field)
{
    json_t *v = json_object_get(root, field);
    assert_true(json_is_integer(v));
    return (long long)json_integer_value(v);
}

static void test_round_trip(void **state)
{
    cmd_state *s = *state;
    static const char value[] = "binary\0value\n\xff";
    char in[300], token_text[32];
    fct_run r;

    long long token = take(&s->gw, "cmd.trip", "alice");
    snprintf(token_text, sizeof token_text, "%lld", token);
    snprintf(in, sizeof in, "%s/trip.in", s->dir);
    fct_write(in, value, sizeof value - 1);

    const char *const write[] = {"write", "cmd.trip", "--token", token_text,
                                 "--content-type", "text/x-test", NULL};
    run(s, &r, &s->gw, in, write);
    fct_assert_exit(&r, 0);
    json_t *answer = stdout_json(&r);
    assert_int_equal(json_int_of(answer, "token"), token);
    assert_int_equal(json_int_of(answer, "version"), 1);
    json_decref(answer);

    const char *const read[] = {"read", "cmd.trip", NULL};
    run(s, &r, &s->gw, NULL, read);
    fct_assert_exit(&r, 0);
    size_t len = 0;
    char *got = fct_slurp(r.out, &len);
    assert_int_equal(len, sizeof value - 1);
    assert_memory_equal(got, value, len);
    free(got);
    gwt_resp resp;
    gwt_get(&s->gw, "/resources/cmd.trip", &resp);
    assert_string_equal(resp.content_type, "text/x-test");
    gwt_resp_free(&resp);

    const char *const status[] = {"status", "cmd.trip", NULL};
    run(s, &r, &s->gw, NULL, status);
    fct_assert_exit(&r, 0);
    answer = stdout_json(&r);
    assert_true(json_is_true(json_object_get(answer, "locked")));
    assert_int_equal(json_int_of(answer, "token"), token);
    assert_null(json_object_get(answer, "owner"));
    json_decref(answer);

    const char *const renew[] = {"renew", "cmd.trip", "--owner", "alice", "--ttl", "5s", NULL};
    run(s, &r, &s->gw, NULL, renew);
    fct_assert_exit(&r, 0);
    answer = stdout_json(&r);
    assert_int_equal(json_int_of(answer, "token"), token);
    assert_int_equal(json_int_of(answer, "ttl_ms"), 5000);
    json_decref(answer);

    const char *const unlock[] = {"unlock", "cmd.trip", "--owner", "alice", NULL};
    run(s, &r, &s->gw, NULL, unlock);
    fct_assert_exit(&r, 0);
    answer = stdout_json(&r);
    assert_true(json_is_true(json_object_get(answer, "released")));
    json_decref(answer);

    run(s, &r, &s->gw, NULL, status);
    fct_assert_exit(&r, 0);
    answer = stdout_json(&r);
    assert_true(json_is_false(json_object_get(answer, "locked")));
    json_decref(answer);
}

/* The command writes with the token fencectl lock gave it: the way the tool is meant to
 * be used. */
static void test_lock_then_write_with_token(void **state)
{
    cmd_state *s = *state;
    char in[300], script[800];
    fct_run r;

    snprintf(in, sizeof in, "%s/nested.in", s->dir);
    fct_write(in, "from the command", 16);
    snprintf(script, sizeof script,
             "%s write cmd.nested --token \"$FENCING_TOKEN\" < %s > /dev/null", FENCECTL_BIN,
             in);
    const char *const lock[] = {"lock", "cmd.nested", "--", "sh", "-c", script, NULL};
    run(s, &r, &s->gw, NULL, lock);
    fct_assert_exit(&r, 0);

    gwt_resp resp;
    gwt_get(&s->gw, "/resources/cmd.nested", &resp);
    gwt_assert_status(&resp, 200, NULL);
    assert_int_equal(resp.len, 16);
    assert_memory_equal(resp.body, "from the command", 16);
    gwt_resp_free(&resp);
}

static void test_stale_and_unknown_tokens(void **state)
{
    cmd_state *s = *state;
    char in[300], old_text[32], new_text[32], forged_text[32];
    fct_run r;

    snprintf(in, sizeof in, "%s/stale.in", s->dir);
    fct_write(in, "x", 1);
    long long old_token = take(&s->gw, "cmd.stale", "first");
    const char *const unlock[] = {"unlock", "cmd.stale", "--owner", "first", NULL};
    run(s, &r, &s->gw, NULL, unlock);
    fct_assert_exit(&r, 0);
    long long new_token = take(&s->gw, "cmd.stale", "second");
    snprintf(old_text, sizeof old_text, "%lld", old_token);
    snprintf(new_text, sizeof new_text, "%lld", new_token);
    snprintf(forged_text, sizeof forged_text, "%lld", new_token + 1000);

    const char *const write_new[] = {"write", "cmd.stale", "--token", new_text, NULL};
    run(s, &r, &s->gw, in, write_new);
    fct_assert_exit(&r, 0);

    const char *const write_old[] = {"write", "cmd.stale", "--token", old_text, NULL};
    run(s, &r, &s->gw, in, write_old);
    fct_assert_exit(&r, 1);
    char expected[160];
    snprintf(expected, sizeof expected,
             "fencectl: write cmd.stale: stale token %lld: token %lld has already written it\n",
             old_token, new_token);
    char *err = fct_slurp(r.err, NULL);
    assert_string_equal(err, expected);
    free(err);

    const char *const write_forged[] = {"write", "cmd.stale", "--token", forged_text, NULL};
    run(s, &r, &s->gw, in, write_forged);
    fct_assert_exit(&r, 4);
    assert_true(fct_contains(r.err, "(403 unknown_token)"));
}

static void test_not_owner_and_missing(void **state)
{
    cmd_state *s = *state;
    fct_run r;

    take(&s->gw, "cmd.owned", "holder");
    const char *const unlock[] = {"unlock", "cmd.owned", "--owner", "intruder", NULL};
    run(s, &r, &s->gw, NULL, unlock);
    fct_assert_exit(&r, 1);
    assert_true(fct_contains(r.err, "fencectl: unlock cmd.owned: this owner does not hold "
                                    "cmd.owned: another owner holds it now"));
    assert_false(fct_contains(r.err, "intruder"));

    const char *const renew[] = {"renew", "cmd.owned", "--owner", "intruder", NULL};
    run(s, &r, &s->gw, NULL, renew);
    fct_assert_exit(&r, 1);

    const char *const read[] = {"read", "cmd.never-written", NULL};
    run(s, &r, &s->gw, NULL, read);
    fct_assert_exit(&r, 4);
    assert_true(fct_contains(r.err, "(404 "));
}

/* GET /resources/{resource}: asserts the status and, for 200, the stored bytes. */
static void assert_stored(const cmd_state *s, const char *resource, int status,
                          const char *value)
{
    char path[256];
    gwt_resp resp;

    snprintf(path, sizeof path, "/resources/%s", resource);
    gwt_get(&s->gw, path, &resp);
    gwt_assert_status(&resp, status, NULL);
    if (status == 200) {
        assert_int_equal(resp.len, strlen(value));
        assert_memory_equal(resp.body, value, resp.len);
    }
    gwt_resp_free(&resp);
}

/* An empty stdin is what `producer | fencectl write` sees when the producer fails before
 * printing: it is refused (exit 2, nothing sent, the last good value kept) unless
 * --allow-empty asks for an empty value. */
static void test_write_refuses_empty(void **state)
{
    cmd_state *s = *state;
    char in[300], token_text[32], script[1024];
    fct_run r;

    long long token = take(&s->gw, "cmd.empty", "erin");
    snprintf(token_text, sizeof token_text, "%lld", token);
    snprintf(in, sizeof in, "%s/empty.in", s->dir);
    fct_write(in, "good", 4);
    const char *const write[] = {"write", "cmd.empty", "--token", token_text, NULL};
    run(s, &r, &s->gw, in, write);
    fct_assert_exit(&r, 0);
    assert_stored(s, "cmd.empty", 200, "good");

    /* stdin is /dev/null. */
    run(s, &r, &s->gw, NULL, write);
    fct_assert_exit(&r, 2);
    char *err = fct_slurp(r.err, NULL);
    assert_string_equal(err, "fencectl: write cmd.empty: stdin is empty; nothing was written "
                             "(pass --allow-empty to store an empty value)\n");
    free(err);
    assert_stored(s, "cmd.empty", 200, "good");

    /* The trap docs/operations.md ("fencectl") warns of: a producer that fails in a
     * pipeline. The pipeline's status is fencectl's, so it must not be 0. */
    snprintf(script, sizeof script, "false | %s write cmd.empty --token %s", FENCECTL_BIN,
             token_text);
    const char *const piped[] = {"lock", "cmd.empty.pipe", "--", "sh", "-c", script, NULL};
    run(s, &r, &s->gw, NULL, piped);
    fct_assert_exit(&r, 2);
    assert_stored(s, "cmd.empty", 200, "good");

    const char *const allowed[] = {"write", "cmd.empty", "--token", token_text, "--allow-empty",
                                   NULL};
    run(s, &r, &s->gw, NULL, allowed);
    fct_assert_exit(&r, 0);
    assert_stored(s, "cmd.empty", 200, "");
}

/* Neither stream of the run mentions the secret. */
static void assert_secret_hidden(const fct_run *r)
{
    assert_false(fct_contains(r->out, SECRET));
    assert_false(fct_contains(r->err, SECRET));
}

static void test_auth_token_file(void **state)
{
    cmd_state *s = *state;
    char token_file[300], env_var[400];
    gwt_proc gw;
    fct_run r;

    snprintf(token_file, sizeof token_file, "%s/auth-token", s->dir);
    gwt_write_file(token_file, SECRET "\n");
    const char *const args[] = {"--auth-token-file", token_file, NULL};
    gwt_start(&gw, s->redis.url, NULL, args);

    const char *const bare[] = {"status", "cmd.auth", NULL};
    run(s, &r, &gw, NULL, bare);
    fct_assert_exit(&r, 4);
    assert_true(fct_contains(r.err, "401 unauthorized"));
    assert_true(fct_contains(r.err, "check --auth-token-file"));

    const char *const flag[] = {"status", "cmd.auth", "--auth-token-file", token_file, NULL};
    run(s, &r, &gw, NULL, flag);
    fct_assert_exit(&r, 0);
    assert_secret_hidden(&r);

    /* From the environment, through a whole lock cycle (lock, renew, unlock), verbose. */
    snprintf(env_var, sizeof env_var, "FENCEGATE_AUTH_TOKEN_FILE=%s", token_file);
    const char *const env[] = {env_var, NULL};
    const char *const lock[] = {"lock", "cmd.auth", "--verbose", "--ttl", "300ms", "--",
                                "sh", "-c", "sleep 0.4", NULL};
    fct_exec(&r, s->dir, gw.url, NULL, env, lock);
    fct_assert_exit(&r, 0);
    assert_true(fct_contains(r.err, "released"));
    assert_secret_hidden(&r);

    /* The token is the file without the white space around it, as fencegate reads its own
     * (gateway/common/token_file.h); a second line is refused, not ignored. */
    gwt_write_file(token_file, " \t" SECRET " \t\r\n\n");
    run(s, &r, &gw, NULL, flag);
    fct_assert_exit(&r, 0);
    assert_secret_hidden(&r);
    gwt_write_file(token_file, SECRET "\nnot part of the token\n");
    run(s, &r, &gw, NULL, flag);
    fct_assert_exit(&r, 2);
    assert_true(fct_contains(r.err, "another line"));
    assert_secret_hidden(&r);

    /* A file too long to read whole is refused, not cut into another token. */
    char long_line[4200];
    memset(long_line, 'a', sizeof long_line - 2);
    long_line[sizeof long_line - 2] = '\n';
    long_line[sizeof long_line - 1] = '\0';
    gwt_write_file(token_file, long_line);
    run(s, &r, &gw, NULL, flag);
    fct_assert_exit(&r, 2);
    assert_true(fct_contains(r.err, "the file is longer than 4096 bytes"));

    gwt_write_file(token_file, "wrong-token\n");
    fct_exec(&r, s->dir, gw.url, NULL, env, lock);
    fct_assert_exit(&r, 4);
    assert_true(fct_contains(r.err, "401 unauthorized"));
    assert_int_equal(gwt_stop(&gw), 0);

    const char *const missing[] = {"status", "cmd.auth", "--auth-token-file",
                                   "/nonexistent/token", NULL};
    run(s, &r, &s->gw, NULL, missing);
    fct_assert_exit(&r, 2);
}

/* --url wins over FENCEGATE_URL; without either, the default URL is used. */
static void test_url_flag(void **state)
{
    cmd_state *s = *state;
    char unused[64];
    fct_run r;

    snprintf(unused, sizeof unused, "http://127.0.0.1:%d", th_free_port());
    const char *const status[] = {"status", "cmd.url", "--url", s->gw.url, NULL};
    fct_exec(&r, s->dir, unused, NULL, NULL, status);
    fct_assert_exit(&r, 0);

    const char *const bad[] = {"--url", "ftp://example", "status", "cmd.url", NULL};
    run(s, &r, &s->gw, NULL, bad);
    fct_assert_exit(&r, 2);
    assert_true(fct_contains(r.err, "--url must start with http://"));
}

static void test_help_version_usage(void **state)
{
    cmd_state *s = *state;
    fct_run r;

    const char *const version[] = {"--version", NULL};
    run(s, &r, NULL, NULL, version);
    fct_assert_exit(&r, 0);
    assert_true(fct_contains(r.out, "fencectl " FENCEGATE_VERSION "\n"));

    const char *const lock_help[] = {"lock", "--help", NULL};
    run(s, &r, NULL, NULL, lock_help);
    fct_assert_exit(&r, 0);
    assert_true(fct_contains(r.out, "--kill-grace"));
    assert_true(fct_contains(r.out, "--conflict-exit-code"));
    assert_true(fct_contains(r.out, "3    the lock was lost"));

    static const char *const commands[] = {"unlock", "renew", "write", "read", "status", NULL};
    for (int i = 0; commands[i] != NULL; i++) {
        const char *const help[] = {commands[i], "--help", NULL};
        run(s, &r, NULL, NULL, help);
        fct_assert_exit(&r, 0);
        assert_true(fct_contains(r.out, "Exit codes:"));
    }

    const char *const bad_ttl[] = {"lock", "cmd.usage", "--ttl", "5h", "--", "true", NULL};
    run(s, &r, &s->gw, NULL, bad_ttl);
    fct_assert_exit(&r, 2);
    char *err = fct_slurp(r.err, NULL);
    assert_string_equal(err, "fencectl: --ttl: '5h' is not a duration (use a number with ms, "
                             "s or m, like 500ms, 30s or 2m)\n");
    free(err);

    const char *const unknown[] = {"frobnicate", "x", NULL};
    run(s, &r, &s->gw, NULL, unknown);
    fct_assert_exit(&r, 2);
}

/* ls [PREFIX] prints the held locks one JSON line each, in name order, never an owner;
 * release --force frees one and fences its holder, and needs --force and --reason. */
static void test_ls_and_forced_release(void **state)
{
    cmd_state *s = *state;
    fct_run r;

    long long token = take(&s->gw, "cmd.ls.b", "ls-owner");
    take(&s->gw, "cmd.ls.a", "ls-owner");
    take(&s->gw, "cmd.other", "ls-owner");
    const char *const ls[] = {"ls", "cmd.ls.", NULL};
    run(s, &r, &s->gw, NULL, ls);
    fct_assert_exit(&r, 0);
    char *out = fct_slurp(r.out, NULL);
    assert_non_null(strstr(out, "{\"resource\":\"cmd.ls.a\""));
    assert_true(strstr(out, "cmd.ls.a") < strstr(out, "cmd.ls.b"));
    assert_null(strstr(out, "cmd.other"));
    assert_null(strstr(out, "owner"));
    free(out);

    const char *const no_force[] = {"release", "cmd.ls.b", "--reason", "stuck", NULL};
    run(s, &r, &s->gw, NULL, no_force);
    fct_assert_exit(&r, 2);
    assert_true(fct_contains(r.err, "--force"));
    const char *const no_reason[] = {"release", "--force", "cmd.ls.b", NULL};
    run(s, &r, &s->gw, NULL, no_reason);
    fct_assert_exit(&r, 2);
    assert_true(fct_contains(r.err, "--reason"));

    const char *const release[] = {"release", "--force", "cmd.ls.b", "--reason", "stuck job",
                                   NULL};
    run(s, &r, &s->gw, NULL, release);
    fct_assert_exit(&r, 0);
    json_t *answer = stdout_json(&r);
    assert_true(json_is_true(json_object_get(answer, "released")));
    assert_int_equal(json_int_of(answer, "fenced_token"), token);
    json_decref(answer);
    assert_int_equal(gwt_put_fenced(&s->gw, "cmd.ls.b", token, "late", NULL), 409);
    run(s, &r, &s->gw, NULL, ls);
    fct_assert_exit(&r, 0);
    assert_false(fct_contains(r.out, "cmd.ls.b"));
    run(s, &r, &s->gw, NULL, release);
    fct_assert_exit(&r, 0);
    answer = stdout_json(&r);
    assert_true(json_is_false(json_object_get(answer, "released")));
    json_decref(answer);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_lock_then_write_with_token),
        cmocka_unit_test(test_stale_and_unknown_tokens),
        cmocka_unit_test(test_not_owner_and_missing),
        cmocka_unit_test(test_write_refuses_empty),
        cmocka_unit_test(test_auth_token_file),
        cmocka_unit_test(test_url_flag),
        cmocka_unit_test(test_help_version_usage),
        cmocka_unit_test(test_ls_and_forced_release),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
