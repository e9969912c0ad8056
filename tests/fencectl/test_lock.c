/*
 * fencectl lock, end to end: the real fencectl runs a real command under a lock taken from
 * the real fencegate binary, with a real redis-server behind it. The commands are small sh
 * scripts that leave files for the test to see (the token they got, "started", a marker
 * written by a TERM trap) and wait for a "go" file the test creates. Every wait is a loop
 * on a condition with a deadline; the scripts' own loops end after 30 s at the latest.
 * The locks of a command are taken in one session: its end fences their tokens, and a
 * fencectl killed by SIGKILL has its locks released and fenced once the session expires.
 * A second group runs on Redlock, where the gateway has no sessions and fencectl renews
 * the lock itself.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "fc_test.h"
#include "gw_test.h"
#include "harness.h"

/* sh: wait (at most 30 s) until the file %s exists. */
#define SH_WAIT_FOR "i=0; while [ ! -e %s ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done"

typedef struct lock_state {
    th_redis redis;
    th_redis_set *set;   /* the Redlock group's masters, else NULL */
    gwt_proc gw;
    char dir[256];   /* run outputs and the scripts' files */
} lock_state;

static int group_setup(void **state)
{
    lock_state *s = calloc(1, sizeof *s);

    th_redis_start(&s->redis, 0, NULL);
    gwt_start(&s->gw, s->redis.url, NULL, NULL);
    th_tempdir(s->dir, sizeof s->dir, "fencectl-lock");
    *state = s;
    return 0;
}

static int group_teardown(void **state)
{
    lock_state *s = *state;
    int rc = gwt_stop(&s->gw);
    th_redis_stop(&s->redis);
    th_rmtree(s->dir);
    free(s);
    return rc == 0 ? 0 : -1;
}

/* A file name in the test's dir: path(s, "lk.x", "started", buf). */
static const char *path(const lock_state *s, const char *resource, const char *name, char *buf,
                        size_t len)
{
    snprintf(buf, len, "%s/%s.%s", s->dir, resource, name);
    return buf;
}

/* Starts `fencectl lock resource FLAGS... -- sh -c script` in the background. flags is
 * NULL-terminated and may be NULL. */
static void start_lock(const lock_state *s, fct_run *r, const char *resource,
                       const char *const *flags, const char *script)
{
    const char *argv[32];
    int n = 0;

    argv[n++] = "lock";
    argv[n++] = resource;
    for (int i = 0; flags != NULL && flags[i] != NULL; i++) {
        argv[n++] = flags[i];
    }
    argv[n++] = "--";
    argv[n++] = "sh";
    argv[n++] = "-c";
    argv[n++] = script;
    argv[n] = NULL;
    fct_start(r, s->dir, s->gw.url, NULL, NULL, argv);
}

/* GET /locks/resource: returns 1 when locked (the token goes to *token), 0 when free. */
static int locked(const lock_state *s, const char *resource, long long *token)
{
    char p[256];
    gwt_resp r;

    snprintf(p, sizeof p, "/locks/%s", resource);
    gwt_get(&s->gw, p, &r);
    gwt_assert_status(&r, 200, NULL);
    json_t *v = json_object_get(r.json, "locked");
    assert_true(json_is_boolean(v));
    int held = json_is_true(v);
    if (token != NULL) {
        *token = held ? gwt_int(&r, "token") : gwt_int(&r, "last_token");
    }
    gwt_resp_free(&r);
    return held;
}

/* The lock on resource is free, and token, the one its holder had, is fenced: the session
 * that held it ended when the command did, so a write with it is 409 stale_token. */
static void assert_fenced(const lock_state *s, const char *resource, long long token)
{
    long long last = 0;
    gwt_resp w;
    assert_int_equal(locked(s, resource, &last), 0);
    assert_true(last > token);
    gwt_put_fenced(&s->gw, resource, token, "late", &w);
    gwt_assert_status(&w, 409, "stale_token");
    gwt_resp_free(&w);
}

/* The id of the one session Redis has (the test reads Redis itself: fencectl never shows
 * the id). */
static void only_session(const lock_state *s, char *id, size_t len)
{
    assert_int_equal(th_redis_cmd(&s->redis, NULL, 0, "ZCARD fg:{#sessions}:deadline"), 1);
    th_redis_cmd(&s->redis, id, len, "EVAL %s 1 %s",
                 "return redis.call('ZRANGE', KEYS[1], 0, 0)[1]", "fg:{#sessions}:deadline");
    assert_int_equal(strlen(id), 32);
}

/* Starts `fencectl lock resource FLAGS... -- sh -c SCRIPT` and returns once the command
 * runs. SCRIPT records its pid in R.pid and $FENCING_TOKEN in R.token, creates R.started,
 * and then waits (at most 30 s) for R.go. On SIGTERM it writes "term" to R.marker and exits
 * term_exit, or it ignores SIGTERM when term_exit is negative. */
static void start_waiting(const lock_state *s, fct_run *r, const char *resource,
                          const char *const *flags, int term_exit)
{
    char trap[400], script[2000], marker[300], pid[300], token[300], started[300], go[300];

    path(s, resource, "marker", marker, sizeof marker);
    if (term_exit >= 0) {
        snprintf(trap, sizeof trap, "trap 'echo term > %s; exit %d' TERM", marker, term_exit);
    } else {
        snprintf(trap, sizeof trap, "trap '' TERM");
    }
    path(s, resource, "started", started, sizeof started);
    snprintf(script, sizeof script,
             "%s; echo $$ > %s; printf %%s \"$FENCING_TOKEN\" > %s; : > %s; " SH_WAIT_FOR, trap,
             path(s, resource, "pid", pid, sizeof pid),
             path(s, resource, "token", token, sizeof token), started,
             path(s, resource, "go", go, sizeof go));
    start_lock(s, r, resource, flags, script);
    fct_wait_file(started);
}

/* Lets the command started by start_waiting finish. */
static void let_go(const lock_state *s, const char *resource)
{
    char go[300];
    gwt_write_file(path(s, resource, "go", go, sizeof go), "");
}

static long long token_of(const lock_state *s, const char *resource)
{
    char p[300];
    char *text = fct_slurp(path(s, resource, "token", p, sizeof p), NULL);
    long long token = atoll(text);
    free(text);
    return token;
}

static void test_exit_status_propagated(void **state)
{
    lock_state *s = *state;
    fct_run r;

    const char *const seven[] = {"lock", "lk.exit", "--", "sh", "-c", "exit 7", NULL};
    fct_exec(&r, s->dir, s->gw.url, NULL, NULL, seven);
    fct_assert_exit(&r, 7);
    assert_int_equal(locked(s, "lk.exit", NULL), 0);

    /* Ended by a signal: 128 + the signal, like a shell. */
    const char *const usr1[] = {"lock", "lk.exit", "sh", "-c", "kill -USR1 $$", NULL};
    fct_exec(&r, s->dir, s->gw.url, NULL, NULL, usr1);
    fct_assert_exit(&r, 128 + SIGUSR1);
    assert_int_equal(locked(s, "lk.exit", NULL), 0);

    const char *const ok[] = {"lock", "lk.exit", "--", "true", NULL};
    fct_exec(&r, s->dir, s->gw.url, NULL, NULL, ok);
    fct_assert_exit(&r, 0);
}

static void test_environment(void **state)
{
    lock_state *s = *state;
    char env_file[300], script[600];
    fct_run r;

    path(s, "lk.env", "env", env_file, sizeof env_file);
    snprintf(script, sizeof script,
             "printf '%%s\\n%%s\\n' \"$FENCING_TOKEN\" \"$FENCING_RESOURCE\" > %s", env_file);
    start_lock(s, &r, "lk.env", NULL, script);
    fct_wait(&r);
    fct_assert_exit(&r, 0);

    char *text = fct_slurp(env_file, NULL);
    char resource[64] = "";
    long long token = 0;
    assert_int_equal(sscanf(text, "%lld\n%63s", &token, resource), 2);
    free(text);
    assert_string_equal(resource, "lk.env");
    assert_true(token > 0);
    assert_fenced(s, "lk.env", token);
}

static void test_held_while_running(void **state)
{
    lock_state *s = *state;
    fct_run r;
    long long token = 0;

    start_waiting(s, &r, "lk.held", NULL, 0);
    assert_int_equal(locked(s, "lk.held", &token), 1);
    assert_int_equal(token, token_of(s, "lk.held"));
    let_go(s, "lk.held");
    fct_wait(&r);
    fct_assert_exit(&r, 0);
    assert_fenced(s, "lk.held", token);
}

/* Runs a command for three leases of 600 ms under `fencectl lock resource FLAGS... --ttl
 * 600ms`: it keeps the lock with the same token throughout, exits 0, and the lock is then
 * free. The finished run is in *r. */
static void keeps_lock_for_three_leases(const lock_state *s, const char *resource,
                                        const char *const *flags, fct_run *r)
{
    start_waiting(s, r, resource, flags, 0);
    long long token = token_of(s, resource);
    /* Without renewals the lock would be gone after the first lease. */
    int64_t until = th_now_ms() + 1800;
    while (th_now_ms() < until) {
        long long now_token = 0;
        assert_int_equal(locked(s, resource, &now_token), 1);
        assert_int_equal(now_token, token);
        th_nap_ms(50);
    }
    let_go(s, resource);
    fct_wait(r);
    fct_assert_exit(r, 0);
    assert_int_equal(locked(s, resource, NULL), 0);
}

/* A command that runs for several leases keeps the lock, with the same token. */
static void test_renewal_keeps_lock(void **state)
{
    const char *const flags[] = {"--ttl", "600ms", NULL};
    fct_run r;
    keeps_lock_for_three_leases(*state, "lk.renew", flags, &r);
}

/* Expires the lock by force (DEL in Redis) once the command has started. */
static void expire_by_force(const lock_state *s, const char *resource)
{
    char key[256];

    snprintf(key, sizeof key, "fg:{%s}:lock", resource);
    assert_int_equal(th_redis_cmd(&s->redis, NULL, 0, "DEL %s", key), 1);
}

static void test_lock_loss_terminates(void **state)
{
    lock_state *s = *state;
    const char *const flags[] = {"--ttl", "600ms", NULL};
    char marker[300];
    fct_run r;

    start_waiting(s, &r, "lk.lost", flags, 0);
    expire_by_force(s, "lk.lost");
    fct_wait(&r);
    /* The command exited 0 from its trap, but the lock was lost: fencectl says so. */
    fct_assert_exit(&r, 3);
    assert_true(fct_contains(path(s, "lk.lost", "marker", marker, sizeof marker), "term"));
    assert_true(fct_contains(r.err, "lost the lock"));
}

static void test_lock_loss_kills_stubborn_command(void **state)
{
    lock_state *s = *state;
    const char *const flags[] = {"--ttl", "600ms", "--kill-grace", "300ms", NULL};
    char pid_file[300];
    fct_run r;

    start_waiting(s, &r, "lk.kill", flags, -1);
    char *text = fct_slurp(path(s, "lk.kill", "pid", pid_file, sizeof pid_file), NULL);
    pid_t pid = (pid_t)atol(text);
    free(text);
    assert_true(pid > 0);
    expire_by_force(s, "lk.kill");
    fct_wait(&r);
    fct_assert_exit(&r, 3);
    assert_true(fct_contains(r.err, "SIGKILL"));
    /* fencectl killed and reaped it: the process is gone. */
    assert_int_equal(kill(pid, 0), -1);
    assert_int_equal(errno, ESRCH);
}

static void test_conflict_exit_code(void **state)
{
    lock_state *s = *state;
    char ran[300], script[400];
    gwt_resp resp;
    fct_run r;

    gwt_post(&s->gw, "/lock", "{\"resource\":\"lk.busy\",\"owner\":\"someone-else\"}", &resp);
    gwt_assert_status(&resp, 200, NULL);
    gwt_resp_free(&resp);
    path(s, "lk.busy", "ran", ran, sizeof ran);
    snprintf(script, sizeof script, ": > %s", ran);

    const char *const flags[] = {"--wait", "200ms", "--conflict-exit-code", "42", NULL};
    start_lock(s, &r, "lk.busy", flags, script);
    fct_wait(&r);
    fct_assert_exit(&r, 42);
    assert_true(fct_contains(r.err, "fencectl: lock lk.busy: locked by another owner, "
                                    "retry after "));
    assert_int_not_equal(access(ran, F_OK), 0);

    /* The default conflict code is 1, like flock -E. */
    start_lock(s, &r, "lk.busy", NULL, script);
    fct_wait(&r);
    fct_assert_exit(&r, 1);
    assert_int_not_equal(access(ran, F_OK), 0);
}

/* SIGTERM sent to fencectl reaches the command; fencectl then exits with its status and
 * releases the lock. */
static void test_signal_forwarded(void **state)
{
    lock_state *s = *state;
    char marker[300];
    fct_run r;

    start_waiting(s, &r, "lk.sig", NULL, 5);
    assert_int_equal(locked(s, "lk.sig", NULL), 1);
    assert_int_equal(kill(r.pid, SIGTERM), 0);
    fct_wait(&r);
    fct_assert_exit(&r, 5);
    assert_true(fct_contains(path(s, "lk.sig", "marker", marker, sizeof marker), "term"));
    assert_int_equal(locked(s, "lk.sig", NULL), 0);
}

static void test_command_not_found(void **state)
{
    lock_state *s = *state;
    fct_run r;
    const char *const argv[] = {"lock", "lk.nocmd", "--", "/nonexistent/fencectl-test", NULL};

    fct_exec(&r, s->dir, s->gw.url, NULL, NULL, argv);
    fct_assert_exit(&r, 127);
    assert_true(fct_contains(r.err, "cannot run '/nonexistent/fencectl-test'"));
    assert_int_equal(locked(s, "lk.nocmd", NULL), 0);
}

static void test_gateway_unreachable(void **state)
{
    lock_state *s = *state;
    char url[64];
    fct_run r;

    snprintf(url, sizeof url, "http://127.0.0.1:%d", th_free_port());
    const char *const argv[] = {"lock", "lk.nogw", "--url", url, "--", "true", NULL};
    fct_exec(&r, s->dir, s->gw.url, NULL, NULL, argv);
    fct_assert_exit(&r, 5);
    assert_true(fct_contains(r.err, "fencectl: lock lk.nogw: no answer from"));
}

/* fencectl lock A B C -- COMMAND: one lock of the set; each token in
 * FENCING_TOKEN_<name with every byte outside [A-Za-z0-9_] as '_'>, all of them in
 * FENCING_TOKENS as JSON, the names in FENCING_RESOURCES; all held while COMMAND runs, all
 * released after. */
static void test_set_environment(void **state)
{
    lock_state *s = *state;
    char env_file[300], script[900];
    fct_run r;

    path(s, "ls.set", "env", env_file, sizeof env_file);
    snprintf(script, sizeof script,
             "printf '%%s\n%%s\n%%s\n%%s\n%%s\n' \"$FENCING_TOKEN_ls_a\" "
             "\"$FENCING_TOKEN_ls_b\" \"$FENCING_TOKEN_ls_c\" \"$FENCING_RESOURCES\" "
             "\"$FENCING_TOKENS\" > %s",
             env_file);
    const char *const argv[] = {"lock", "ls.a", "ls:b", "ls-c", "--", "sh", "-c", script, NULL};
    fct_exec(&r, s->dir, s->gw.url, NULL, NULL, argv);
    fct_assert_exit(&r, 0);

    char *text = fct_slurp(env_file, NULL);
    long long ta = 0, tb = 0, tc = 0;
    char names[128] = "", tokens[256] = "";
    assert_int_equal(sscanf(text, "%lld\n%lld\n%lld\n%127s\n%255[^\n]", &ta, &tb, &tc, names,
                            tokens),
                     5);
    free(text);
    assert_string_equal(names, "ls.a,ls:b,ls-c");
    assert_fenced(s, "ls.a", ta);
    assert_fenced(s, "ls:b", tb);
    assert_fenced(s, "ls-c", tc);
    json_t *j = json_loads(tokens, 0, NULL);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "ls.a")), ta);
    assert_int_equal(json_integer_value(json_object_get(j, "ls:b")), tb);
    assert_int_equal(json_integer_value(json_object_get(j, "ls-c")), tc);
    json_decref(j);
}

/* Two names that map to one variable are refused before anything is locked; so is a name
 * twice. One held resource: the conflict exit code, and nothing of the set held. */
static void test_set_refusals(void **state)
{
    lock_state *s = *state;
    fct_run r;
    gwt_resp resp;

    const char *const clash[] = {"lock", "lc.x", "lc:x", "--", "true", NULL};
    fct_exec(&r, s->dir, s->gw.url, NULL, NULL, clash);
    fct_assert_exit(&r, 2);
    assert_true(fct_contains(r.err, "FENCING_TOKEN_lc_x"));
    assert_false(locked(s, "lc.x", NULL));

    const char *const twice[] = {"lock", "lc.y", "lc.y", "--", "true", NULL};
    fct_exec(&r, s->dir, s->gw.url, NULL, NULL, twice);
    fct_assert_exit(&r, 2);
    assert_true(fct_contains(r.err, "lc.y"));

    gwt_post(&s->gw, "/lock", "{\"resource\":\"lc.held\",\"owner\":\"someone-else\"}", &resp);
    gwt_assert_status(&resp, 200, NULL);
    gwt_resp_free(&resp);
    const char *const held[] = {"lock", "lc.free", "lc.held", "--", "true", NULL};
    fct_exec(&r, s->dir, s->gw.url, NULL, NULL, held);
    fct_assert_exit(&r, 1);
    assert_true(fct_contains(r.err, "lc.held"));
    assert_false(locked(s, "lc.free", NULL));
}

/* The locks of one command share one session: while COMMAND runs, the gateway lists them
 * in it, each with the session's lease, and the id is nowhere in COMMAND's environment or in
 * fencectl's output; when COMMAND exits the session ends, and every token is fenced. */
static void test_set_shares_one_session(void **state)
{
    lock_state *s = *state;
    char env_file[300], started[300], go[300], script[2000], id[64], p[128];
    fct_run r;
    gwt_resp resp;

    path(s, "ss", "env", env_file, sizeof env_file);
    path(s, "ss", "started", started, sizeof started);
    path(s, "ss", "go", go, sizeof go);
    snprintf(script, sizeof script,
             "env > %s; printf '%%s' \"$FENCING_TOKENS\" > %s.tokens; : > %s; " SH_WAIT_FOR,
             env_file, env_file, started, go);
    const char *const argv[] = {"-v", "lock", "ss.a", "ss.b", "--ttl", "2s", "--", "sh",
                                "-c", script, NULL};
    fct_start(&r, s->dir, s->gw.url, NULL, NULL, argv);
    fct_wait_file(started);

    only_session(s, id, sizeof id);
    snprintf(p, sizeof p, "/sessions/%s", id);
    gwt_get(&s->gw, p, &resp);
    gwt_assert_status(&resp, 200, NULL);
    assert_int_equal(gwt_int(&resp, "ttl_ms"), 2000);
    json_t *locks = json_object_get(resp.json, "locks");
    assert_int_equal(json_array_size(locks), 2);
    for (size_t i = 0; i < 2; i++) {
        const char *name = json_string_value(json_object_get(json_array_get(locks, i),
                                                             "resource"));
        assert_true(strcmp(name, "ss.a") == 0 || strcmp(name, "ss.b") == 0);
    }
    gwt_resp_free(&resp);
    assert_false(fct_contains(env_file, id));

    char tokens_file[320];
    snprintf(tokens_file, sizeof tokens_file, "%s.tokens", env_file);
    char *text = fct_slurp(tokens_file, NULL);
    json_t *tokens = json_loads(text, 0, NULL);
    free(text);
    assert_non_null(tokens);
    gwt_write_file(go, "");
    fct_wait(&r);
    fct_assert_exit(&r, 0);
    assert_false(fct_contains(r.err, id));
    assert_false(fct_contains(r.out, id));
    gwt_get(&s->gw, p, &resp);
    gwt_assert_status(&resp, 404, "session_not_found");
    gwt_resp_free(&resp);
    assert_fenced(s, "ss.a", json_integer_value(json_object_get(tokens, "ss.a")));
    assert_fenced(s, "ss.b", json_integer_value(json_object_get(tokens, "ss.b")));
    json_decref(tokens);
}

/* A command that waits (--wait) for a lock held by another owner keeps its session alive
 * while it waits, through several of its short leases, and then takes the lock in it. */
static void test_wait_keeps_its_session(void **state)
{
    lock_state *s = *state;
    char id[64] = "", score[64] = "", last[64] = "";
    fct_run r;
    gwt_resp resp;

    gwt_post(&s->gw, "/lock",
             "{\"resource\":\"lk.wait\",\"owner\":\"other-owner\",\"ttl_ms\":60000}", &resp);
    gwt_assert_status(&resp, 200, NULL);
    gwt_resp_free(&resp);
    const char *const argv[] = {"lock", "lk.wait", "--ttl", "300ms", "--wait", "30s", "--",
                                "true", NULL};
    fct_start(&r, s->dir, s->gw.url, NULL, NULL, argv);
    int64_t deadline = th_now_ms() + 15000;
    while (th_redis_cmd(&s->redis, NULL, 0, "ZCARD fg:{#sessions}:deadline") < 1) {
        assert_true(th_now_ms() < deadline);
        th_nap_ms(20);
    }
    only_session(s, id, sizeof id);
    /* Its deadline moves with each renewal: four of them span more than three leases. */
    for (int moves = 0; moves < 4;) {
        th_redis_cmd(&s->redis, score, sizeof score, "ZSCORE fg:{#sessions}:deadline %s", id);
        assert_true(score[0] != '\0');
        if (strcmp(score, last) != 0) {
            moves += last[0] != '\0';
            snprintf(last, sizeof last, "%s", score);
        }
        assert_true(th_now_ms() < deadline);
        th_nap_ms(20);
    }
    assert_int_equal(gwt_unlock(&s->gw, "lk.wait", "other-owner"), 200);
    fct_wait(&r);
    fct_assert_exit(&r, 0);
}

/* The session ended by somebody else (DELETE with its id, read here from Redis) while
 * COMMAND runs: the next renewal hears 404 session_not_found, and fencectl treats the lock
 * as lost at once (not as a failing gateway): COMMAND is terminated, exit 3. */
static void test_session_ended_elsewhere_loses_the_lock(void **state)
{
    lock_state *s = *state;
    const char *const flags[] = {"--ttl", "3s", NULL};
    char id[64], p[128], marker[300];
    fct_run r;
    gwt_resp resp;

    start_waiting(s, &r, "lk.ended", flags, 0);
    only_session(s, id, sizeof id);
    snprintf(p, sizeof p, "/sessions/%s", id);
    gwt_http(&s->gw, "DELETE", p, NULL, NULL, 0, 0, &resp);
    gwt_assert_status(&resp, 200, NULL);
    gwt_resp_free(&resp);
    fct_wait(&r);
    fct_assert_exit(&r, 3);
    assert_true(fct_contains(path(s, "lk.ended", "marker", marker, sizeof marker), "term"));
    assert_true(fct_contains(r.err, "no longer holds it"));
}

/* fencectl killed (SIGKILL) while COMMAND runs: nobody renews its session, which expires,
 * and the gateway's reaper releases the lock and fences its token, with nobody locking the
 * resource again. */
static void test_killed_fencectl_is_fenced(void **state)
{
    lock_state *s = *state;
    const char *const flags[] = {"--ttl", "600ms", NULL};
    fct_run r;

    start_waiting(s, &r, "lk.sigkill", flags, 0);
    long long token = token_of(s, "lk.sigkill");
    assert_int_equal(kill(r.pid, SIGKILL), 0);
    assert_int_equal(fct_wait(&r), 128 + SIGKILL);
    let_go(s, "lk.sigkill"); /* the orphaned command ends on its own */
    int64_t deadline = th_now_ms() + 15000;
    for (;;) {
        gwt_resp w;
        long st = gwt_put_fenced(&s->gw, "lk.sigkill", token, "late", &w);
        int stale = st == 409 && strcmp(gwt_str(&w, "error"), "stale_token") == 0;
        gwt_resp_free(&w);
        if (stale) {
            break;
        }
        assert_int_equal(st, 200);
        assert_true(th_now_ms() < deadline);
        th_nap_ms(50);
    }
    assert_int_equal(locked(s, "lk.sigkill", NULL), 0);
}

/* On Redlock, where the gateway has no sessions (400 sessions_unavailable), fencectl renews
 * the lock itself, as --help says: the lock outlives three leases while COMMAND runs, and
 * is released when it exits. */
static int redlock_setup(void **state)
{
    lock_state *s = calloc(1, sizeof *s);
    th_redis_set *set = calloc(1, sizeof *set);
    char url[256];

    th_redis_set_start(set, 3, NULL);
    snprintf(url, sizeof url, "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d",
             set->nodes[0].port, set->nodes[1].port, set->nodes[2].port);
    gwt_start(&s->gw, url, NULL, NULL);
    th_tempdir(s->dir, sizeof s->dir, "fencectl-redlock");
    s->set = set;
    *state = s;
    return 0;
}

static int redlock_teardown(void **state)
{
    lock_state *s = *state;
    int rc = gwt_stop(&s->gw);
    th_redis_set_stop(s->set);
    free(s->set);
    th_rmtree(s->dir);
    free(s);
    return rc == 0 ? 0 : -1;
}

static void test_redlock_falls_back_to_lock_renewal(void **state)
{
    const char *const flags[] = {"-v", "--ttl", "600ms", NULL};
    fct_run r;
    keeps_lock_for_three_leases(*state, "rl.fallback", flags, &r);
    assert_true(fct_contains(r.err, "sessions are not available"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exit_status_propagated),
        cmocka_unit_test(test_environment),
        cmocka_unit_test(test_held_while_running),
        cmocka_unit_test(test_renewal_keeps_lock),
        cmocka_unit_test(test_lock_loss_terminates),
        cmocka_unit_test(test_lock_loss_kills_stubborn_command),
        cmocka_unit_test(test_conflict_exit_code),
        cmocka_unit_test(test_signal_forwarded),
        cmocka_unit_test(test_command_not_found),
        cmocka_unit_test(test_gateway_unreachable),
        cmocka_unit_test(test_set_environment),
        cmocka_unit_test(test_set_refusals),
        cmocka_unit_test(test_set_shares_one_session),
        cmocka_unit_test(test_wait_keeps_its_session),
        cmocka_unit_test(test_session_ended_elsewhere_loses_the_lock),
        cmocka_unit_test(test_killed_fencectl_is_fenced),
    };
    const struct CMUnitTest redlock[] = {
        cmocka_unit_test(test_redlock_falls_back_to_lock_renewal),
    };
    int failed = cmocka_run_group_tests_name("redis", tests, group_setup, group_teardown);
    failed += cmocka_run_group_tests_name("redlock", redlock, redlock_setup, redlock_teardown);
    return failed;
}
