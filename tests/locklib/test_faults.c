/* locklib under Redis faults: script cache flushes, crashes with AOF, total data loss with a
 * floor, timeouts, an unreachable server, and writes to dead sockets. Real redis-server. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lk_test.h"

static int group_setup(void **state)
{
    return lk_group_setup_aof(state, 1);
}

/* Acquire+release once; returns the token. */
static int64_t cycle(lk_fixture *f, const char *res, int64_t floor)
{
    lk_result r;
    assert_lk(f->c, lk_acquire(f->c, res, "alice", 10000, floor, NULL, &r), LK_ACQUIRED);
    int64_t token = r.token;
    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, &r), LK_RELEASED);
    return token;
}

/* The first call after a restart meets the connection Redis closed: it notices before
 * sending anything, reconnects and succeeds, with no EUNAVAILABLE in between. */
static int64_t cycle_after_restart(lk_fixture *f, const char *res, int64_t floor)
{
    lk_result r;
    assert_lk(f->c, lk_acquire(f->c, res, "alice", 10000, floor, NULL, &r), LK_ACQUIRED);
    int64_t token = r.token;
    assert_lk(f->c, lk_release(f->c, res, "alice", NULL, &r), LK_RELEASED);
    return token;
}

static void test_script_flush_survived(void **state)
{
    lk_fixture *f = *state;
    int64_t last = 0;
    for (int i = 0; i < 20; i++) {
        if (i % 3 == 0) {
            char out[64];
            th_redis_cmd(&f->redis, out, sizeof out, "SCRIPT FLUSH");
            assert_string_equal(out, "OK");
        }
        int64_t token = cycle(f, "flush", 0);
        assert_true(token > last);
        last = token;
    }
}

static void test_kill_restart_with_aof_keeps_tokens_increasing(void **state)
{
    lk_fixture *f = *state;
    int64_t last = 0;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 5; i++) {
            int64_t token = cycle_after_restart(f, "crash", 0);
            assert_true(token > last);
            last = token;
        }
        /* appendfsync always: every acknowledged INCR is in the AOF before the reply. */
        th_redis_kill(&f->redis);
        th_redis_restart(&f->redis);
    }
    int64_t token = cycle_after_restart(f, "crash", 0);
    assert_true(token > last);
}

static void test_wiped_redis_with_floor_stays_above(void **state)
{
    lk_fixture *f = *state;
    int64_t last = 0;
    for (int i = 0; i < 10; i++) {
        last = cycle(f, "wipe", 0);
    }
    /* Total loss: the counter is gone. Without a floor tokens would start again at 1. */
    th_redis_kill(&f->redis);
    th_redis_wipe_files(&f->redis);
    th_redis_restart(&f->redis);
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "EXISTS fg:{wipe}:fence"), 0);
    int64_t token = cycle_after_restart(f, "wipe", last);
    assert_true(token > last);
    /* And without a floor the counter really had restarted: the floor is what saved us. */
    th_redis_kill(&f->redis);
    th_redis_wipe_files(&f->redis);
    th_redis_restart(&f->redis);
    assert_int_equal(cycle_after_restart(f, "wipe", 0), 1);
}

/* A listening loopback socket on a free port; *port receives the port. */
static int listen_loopback(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    socklen_t alen = sizeof a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fd, 64), 0);
    getsockname(fd, (struct sockaddr *)&a, &alen);
    *port = ntohs(a.sin_port);
    return fd;
}

static void test_unreachable_redis_returns_unavailable(void **state)
{
    (void)state;
    /* A listening socket that never accepts: connect succeeds through the backlog, then no
     * reply ever comes, like a frozen server. The answer comes within the configured
     * timeouts, plus slack for a loaded machine. */
    int port = 0;
    int fd = listen_loopback(&port);
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);

    lk_options o;
    lk_options_init(&o);
    o.connect_timeout_ms = 300;
    o.command_timeout_ms = 300;
    lk_client *c = NULL;
    lk_client_open(&c, url, &o);
    assert_non_null(c);
    lk_result r;
    int64_t start = th_now_ms();
    assert_lk(c, lk_acquire(c, "x", "alice", 1000, 0, NULL, &r), LK_EUNAVAILABLE);
    int64_t elapsed_ms = th_now_ms() - start;
    if (elapsed_ms >= o.connect_timeout_ms + o.command_timeout_ms + 500) {
        print_error("EUNAVAILABLE after %lld ms\n", (long long)elapsed_ms);
    }
    assert_true(elapsed_ms < o.connect_timeout_ms + o.command_timeout_ms + 500);
    lk_client_close(c);
    close(fd);

    /* Nobody listening at all: refused at once. */
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", th_free_port());
    assert_int_equal(lk_client_open(&c, url, &o), LK_EUNAVAILABLE);
    assert_non_null(c);
    assert_lk(c, lk_acquire(c, "x", "alice", 1000, 0, NULL, &r), LK_EUNAVAILABLE);
    assert_lk(c, lk_ping(c), LK_EUNAVAILABLE);
    assert_non_null(strstr(lk_errstr(c), "connect"));
    lk_client_close(c);
}

static void test_slow_redis_times_out_then_recovers(void **state)
{
    lk_fixture *f = *state;
    lk_options o;
    lk_options_init(&o);
    o.command_timeout_ms = 200;
    lk_client *c = lk_test_open(&f->redis, &o);
    lk_result r;
    assert_lk(c, lk_ping(c), LK_OK);

    /* DEBUG SLEEP blocks Redis for 1 s on another connection; ours times out. */
    pid_t pid = lk_test_debug_sleep(&f->redis);
    int64_t deadline = th_now_ms() + 5000;
    lk_status st;
    while ((st = lk_acquire(c, "slow", "alice", 10000, 0, NULL, &r)) != LK_EUNAVAILABLE &&
           th_now_ms() < deadline) {
        if (st == LK_ACQUIRED) {
            lk_release(c, "slow", "alice", NULL, &r);
        }
    }
    assert_lk(c, st, LK_EUNAVAILABLE);
    lk_test_reap(pid);
    /* Redis is responsive again: the next calls reconnect. The timed-out acquire may or may
     * not have run, which is why retries carry idempotency keys. */
    deadline = th_now_ms() + 5000;
    while ((st = lk_ping(c)) != LK_OK && th_now_ms() < deadline) {
        th_nap_ms(20);
    }
    assert_lk(c, st, LK_OK);
    lk_status_name(lk_release(c, "slow", "alice", NULL, &r));
    lk_client_close(c);
}

/* Two handles share a breaker: once one waits out its timeout on a stalled Redis, the other
 * fails fast without sending (its error says so, and the breaker counts it) instead of
 * waiting out a timeout of its own; once Redis answers, a probe closes the breaker. */
static void test_breaker_fails_fast_after_a_stall(void **state)
{
    lk_fixture *f = *state;
    lk_options o;
    lk_options_init(&o);
    o.command_timeout_ms = 200;
    o.breaker = lk_breaker_new(3000);
    assert_non_null(o.breaker);
    lk_client *a = lk_test_open(&f->redis, &o);
    lk_client *b = lk_test_open(&f->redis, &o);
    lk_result r;
    assert_lk(a, lk_ping(a), LK_OK);
    assert_lk(b, lk_ping(b), LK_OK);

    pid_t pid = lk_test_debug_sleep(&f->redis);
    int64_t deadline = th_now_ms() + 5000;
    lk_status st;
    /* PING until one waits out the timeout: the first failure is that stall (the breaker was
     * closed), never a fast one. */
    while ((st = lk_ping(a)) == LK_OK && th_now_ms() < deadline) {
    }
    assert_lk(a, st, LK_EUNAVAILABLE);
    assert_int_equal(lk_breaker_fast_fails(o.breaker), 0);

    assert_lk(b, lk_acquire(b, "breaker", "bob", 10000, 0, NULL, &r), LK_EUNAVAILABLE);
    assert_non_null(strstr(lk_errstr(b), "failing fast"));
    assert_int_equal(lk_breaker_fast_fails(o.breaker), 1);

    lk_test_reap(pid);
    deadline = th_now_ms() + 10000;
    while ((st = lk_ping(b)) != LK_OK && th_now_ms() < deadline) {
        th_nap_ms(20);
    }
    assert_lk(b, st, LK_OK);
    /* Closed again: the other handle goes straight through. */
    assert_lk(a, lk_ping(a), LK_OK);
    long long fails = lk_breaker_fast_fails(o.breaker);
    assert_lk(a, lk_acquire(a, "breaker.after", "alice", 10000, 0, NULL, &r), LK_ACQUIRED);
    assert_lk(a, lk_release(a, "breaker.after", "alice", NULL, &r), LK_RELEASED);
    assert_int_equal(lk_breaker_fast_fails(o.breaker), fails);
    lk_client_close(a);
    lk_client_close(b);
    lk_breaker_free(o.breaker);
}

/* The next byte on fd within ms, or 0. */
static char read_byte(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    char b = 0;
    if (poll(&p, 1, ms) != 1 || read(fd, &b, 1) != 1) {
        return 0;
    }
    return b;
}

/* A process paused while Redis answered (SIGSTOP here; a frozen VM or container alike) sees
 * a call that took long, but Redis was never slow: the breaker must not trip. A child loops
 * on PING with a 200 ms timeout and reports each call that took over 100 ms ("slow-looking")
 * and whether its breaker refused anything; the parent stops it for 300 ms at a time (the
 * pause is the fault's length) until one call spanned a pause. */
static void test_breaker_ignores_a_paused_process(void **state)
{
    lk_fixture *f = *state;
    int to_parent[2];
    assert_int_equal(pipe(to_parent), 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(to_parent[0]);
        lk_options o;
        lk_options_init(&o);
        o.command_timeout_ms = 200;
        o.breaker = lk_breaker_new(60000);
        lk_client *c = lk_test_open(&f->redis, &o);
        int64_t stop_at = th_now_ms() + 30000;
        while (th_now_ms() < stop_at) {
            int64_t t0 = th_now_ms();
            lk_status st = lk_ping(c);
            int64_t took = th_now_ms() - t0;
            /* 'F': refused or failed; 'S': a slow-looking call that was answered. */
            if (st != LK_OK || lk_breaker_fast_fails(o.breaker) > 0) {
                if (write(to_parent[1], "F", 1) != 1) {
                    _exit(2);
                }
                _exit(1);
            }
            if (took > 100 && write(to_parent[1], "S", 1) != 1) {
                _exit(2);
            }
        }
        _exit(0);
    }
    close(to_parent[1]);
    char got = 0;
    int64_t deadline = th_now_ms() + 20000;
    while (got != 'S' && got != 'F' && th_now_ms() < deadline) {
        kill(pid, SIGSTOP);
        th_nap_ms(300); /* the length of the pause, not a wait for anything */
        kill(pid, SIGCONT);
        got = read_byte(to_parent[0], 200);
    }
    /* One more look: a refusal right after the slow-looking call. */
    if (got == 'S' && read_byte(to_parent[0], 300) == 'F') {
        got = 'F';
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(to_parent[0]);
    assert_int_equal(got, 'S');
}

static void test_redis_busy_script_is_unavailable(void **state)
{
    lk_fixture *f = *state;
    lk_options o;
    lk_options_init(&o);
    o.command_timeout_ms = 2000;
    lk_client *c = lk_test_open(&f->redis, &o);
    lk_result r;

    /* Fill memory past maxmemory with noeviction: writes answer -OOM, which must be
     * EUNAVAILABLE (the script did not run), never a success. */
    th_redis_cmd(&f->redis, NULL, 0, "CONFIG SET maxmemory-policy noeviction");
    th_redis_cmd(&f->redis, NULL, 0, "CONFIG SET maxmemory 1");
    lk_status st = lk_acquire(c, "oom", "alice", 10000, 0, NULL, &r);
    th_redis_cmd(&f->redis, NULL, 0, "CONFIG SET maxmemory 0");
    assert_lk(c, st, LK_EUNAVAILABLE);
    assert_non_null(strstr(lk_errstr(c), "OOM"));
    assert_lk(c, lk_acquire(c, "oom", "alice", 10000, 0, NULL, &r), LK_ACQUIRED);
    assert_lk(c, lk_release(c, "oom", "alice", NULL, &r), LK_RELEASED);
    lk_client_close(c);
}

/* A server that accepts each connection and closes it at once (with an RST on TCP), so the
 * client's writes meet a dead socket. */
static void *closing_server(void *p)
{
    int lfd = *(int *)p;
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) {
            return NULL;
        }
        struct linger lg = {1, 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        close(fd);
    }
}

/* 200 acquisitions against url that must all be EUNAVAILABLE. Runs in a child process:
 * returns the exit status for _exit(). */
static int sigpipe_client(const char *url)
{
    lk_client *c = NULL;
    lk_result r;

    lk_client_open(&c, url, NULL);
    if (c == NULL) {
        return 2;
    }
    for (int i = 0; i < 200; i++) {
        lk_status st = lk_acquire(c, "pipe", "alice", 1000, 0, NULL, &r);
        if (st != LK_EUNAVAILABLE) {
            fprintf(stderr, "acquire %d: %s (%s)\n", i, lk_status_name(st), lk_errstr(c));
            lk_client_close(c);
            return 3;
        }
    }
    lk_client_close(c);
    return 0;
}

static volatile sig_atomic_t sigpipes; /* in the child: SIGPIPEs its handler saw */

static void count_sigpipe(int sig)
{
    (void)sig;
    sigpipes++;
}

/* How the child of run_sigpipe_client() treats SIGPIPE. */
enum { PIPE_DEFAULT, PIPE_COUNTED, PIPE_COUNTED_UNGUARDED };

/* Runs sigpipe_client(url) in a child, with closing_server answering on lfd, which it
 * closes. Returns the wait status. The child's SIGPIPE:
 *   PIPE_DEFAULT: the default disposition, which kills;
 *   PIPE_COUNTED: a counting handler; the guard must swallow every SIGPIPE (exit 4 if not);
 *   PIPE_COUNTED_UNGUARDED: the same handler, and lk_sigpipe_ignored() (which a process
 *     with a handler would never call: here it shows the guard is skipped): the writes'
 *     SIGPIPEs must reach the handler (exit 5 if none did). */
static int run_sigpipe_client(int lfd, const char *url, int mode)
{
    pthread_t t;
    int status = 0;

    /* Fork first: the child has no server thread, only the client. */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = mode == PIPE_DEFAULT ? SIG_DFL : count_sigpipe;
        sa.sa_flags = SA_RESTART;
        sigaction(SIGPIPE, &sa, NULL);
        if (mode == PIPE_COUNTED_UNGUARDED) {
            lk_sigpipe_ignored();
        }
        int rc = sigpipe_client(url);
        if (rc == 0 && mode == PIPE_COUNTED && sigpipes != 0) {
            fprintf(stderr, "%d SIGPIPEs got past the guard\n", (int)sigpipes);
            rc = 4;
        }
        if (rc == 0 && mode == PIPE_COUNTED_UNGUARDED && sigpipes == 0) {
            fprintf(stderr, "no SIGPIPE reached the handler: the guard still ran\n");
            rc = 5;
        }
        _exit(rc);
    }
    pthread_create(&t, NULL, closing_server, &lfd);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    shutdown(lfd, SHUT_RDWR);
    close(lfd);
    pthread_join(t, NULL);
    return status;
}

/* A listening unix socket in a new temp dir (dir[80]: short enough for sun_path); its URL
 * goes to url. */
static int listen_unix(char *dir, char *url, size_t url_len)
{
    struct sockaddr_un a;

    th_tempdir(dir, 80, "sigpipe");
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    snprintf(a.sun_path, sizeof a.sun_path, "%s/closing.sock", dir);
    int lfd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(lfd >= 0);
    assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(lfd, 64), 0);
    snprintf(url, url_len, "unix://%s", a.sun_path);
    return lfd;
}

static void assert_client_exited_0(int status, const char *url)
{
    if (WIFSIGNALED(status)) {
        print_error("client on %s killed by signal %d (SIGPIPE is %d)\n", url, WTERMSIG(status),
                    SIGPIPE);
    }
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_sigpipe_never_kills(void **state)
{
    (void)state;
    char dir[80], url[300];
    int port = 0;

    /* A unix socket whose peer closed makes write() raise SIGPIPE at once, so a client
     * without the guard dies here with 141 (128 + SIGPIPE). */
    int lfd = listen_unix(dir, url, sizeof url);
    int status = run_sigpipe_client(lfd, url, PIPE_DEFAULT);
    th_rmtree(dir);
    assert_client_exited_0(status, url);

    /* And over TCP, where the server resets every connection. */
    lfd = listen_loopback(&port);
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    assert_client_exited_0(run_sigpipe_client(lfd, url, PIPE_DEFAULT), url);
}

/* lk_sigpipe_ignored() (fencegate calls it: it ignores SIGPIPE for good) skips the guard:
 * with a counting handler, the writes' SIGPIPEs reach it once the call is made, and none
 * does without it (the guard swallows them). Both clients still get EUNAVAILABLE, every
 * time, and live. */
static void test_sigpipe_ignored_skips_the_guard(void **state)
{
    (void)state;
    char dir[80], url[300];

    int lfd = listen_unix(dir, url, sizeof url);
    int status = run_sigpipe_client(lfd, url, PIPE_COUNTED);
    th_rmtree(dir);
    assert_client_exited_0(status, url);
    lfd = listen_unix(dir, url, sizeof url);
    status = run_sigpipe_client(lfd, url, PIPE_COUNTED_UNGUARDED);
    th_rmtree(dir);
    assert_client_exited_0(status, url);
}

static void test_auth_and_db_url(void **state)
{
    (void)state;
    th_redis r;
    th_redis_start(&r, 0, "s3cret-pw");
    lk_client *c = NULL;
    lk_result res;
    char url[200];

    snprintf(url, sizeof url, "redis://:s3cret-pw@127.0.0.1:%d/3", r.port);
    assert_int_equal(lk_client_open(&c, url, NULL), LK_OK);
    assert_lk(c, lk_acquire(c, "authed", "alice", 10000, 0, NULL, &res), LK_ACQUIRED);
    /* It went to db 3, not db 0. */
    assert_int_equal(th_redis_cmd(&r, NULL, 0, "EXISTS fg:{authed}:lock"), 0);
    assert_int_equal(th_redis_cmd(&r, NULL, 0,
                                  "EVAL %s 1 fg:{authed}:lock",
                                  "redis.call('SELECT', 3) return redis.call('EXISTS', KEYS[1])"),
                     1);
    lk_client_close(c);

    snprintf(url, sizeof url, "redis://:wrong@127.0.0.1:%d", r.port);
    assert_int_equal(lk_client_open(&c, url, NULL), LK_EUNAVAILABLE);
    assert_null(strstr(lk_errstr(c), "wrong")); /* the password is never echoed */
    lk_client_close(c);
    th_redis_stop(&r);
}

/* A lock hash without its "#token" field (written by another client, or a damaged key) makes
 * the scripts' answer stop at the nil token: {1}. Found by the fuzz target redis_reply
 * (tests/fuzz/corpus/redis_reply/acquire_short): that read as a hold with token 0. It must be
 * an error, never a success carrying a token that was not minted. */
static void test_lock_without_token_is_an_error(void **state)
{
    lk_fixture *f = *state;
    lk_result r;

    th_redis_cmd(&f->redis, NULL, 0, "HSET fg:{notoken}:lock alice 1");
    th_redis_cmd(&f->redis, NULL, 0, "PEXPIRE fg:{notoken}:lock 10000");
    assert_lk(f->c, lk_acquire(f->c, "notoken", "alice", 10000, 0, NULL, &r), LK_EREDIS);
    assert_non_null(strstr(lk_errstr(f->c), "token"));
    assert_lk(f->c, lk_acquire_fair(f->c, "notoken", "alice", 10000, 0, NULL, 0, &r),
              LK_EREDIS);
    assert_lk(f->c, lk_renew(f->c, "notoken", "alice", 10000, NULL, &r), LK_EREDIS);
    assert_non_null(strstr(lk_errstr(f->c), "token"));
    th_redis_cmd(&f->redis, NULL, 0, "DEL fg:{notoken}:lock");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_script_flush_survived),
        cmocka_unit_test(test_kill_restart_with_aof_keeps_tokens_increasing),
        cmocka_unit_test(test_wiped_redis_with_floor_stays_above),
        cmocka_unit_test(test_unreachable_redis_returns_unavailable),
        cmocka_unit_test(test_slow_redis_times_out_then_recovers),
        cmocka_unit_test(test_breaker_fails_fast_after_a_stall),
        cmocka_unit_test(test_breaker_ignores_a_paused_process),
        cmocka_unit_test(test_redis_busy_script_is_unavailable),
        cmocka_unit_test(test_sigpipe_never_kills),
        cmocka_unit_test(test_sigpipe_ignored_skips_the_guard),
        cmocka_unit_test(test_auth_and_db_url),
        cmocka_unit_test(test_lock_without_token_is_an_error),
    };
    return cmocka_run_group_tests_name("locklib_faults", tests, group_setup, lk_group_teardown);
}
