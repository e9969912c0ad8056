/*
 * fencectl lock RESOURCE -- COMMAND: run COMMAND while holding the lock.
 *
 * The steps, in this order:
 *   0. Open a session with the lease --ttl (fc_session.c): the lock (or every lock of a set)
 *      is taken in it, so one renewal keeps them all, and if fencectl dies the gateway ends
 *      the session when its lease runs out, releasing every lock and fencing its token. A
 *      gateway without sessions (Redlock: 400 sessions_unavailable; older: 404) gets the
 *      locks' own leases instead, renewed with /renew.
 *   1. Take the lock with a fresh random owner and an Idempotency-Key per attempt, waiting
 *      up to --wait in slices of at most the gateway's 60 s (with a session, at most ttl/3,
 *      renewing the session between them when due, so it outlives the wait). A 409 after
 *      the wait is the conflict exit code.
 *   2. Fork and exec COMMAND (no shell) with FENCING_TOKEN and FENCING_RESOURCE set.
 *   3. Renew every ttl/3 while it runs: the session, or else the lock. The lease is counted
 *      from the moment the last successful renewal (or the session's creation, or the /lock
 *      without a session) was sent, which is never later than the gateway's own count, so
 *      "the lease ran out" here is never after it ran out there.
 *   4. On a lost lock (the session ended or lost a lock, renew answers not_owner, or
 *      renewals failed until the lease ran out) send SIGTERM, then SIGKILL after
 *      --kill-grace, and exit FC_EXIT_LOCK_LOST.
 *   5. When COMMAND exits, end the session (which releases every lock and fences its
 *      token: a process COMMAND left behind cannot write with it), or else release the
 *      lock, and exit with COMMAND's status.
 *
 * Signals: SIGINT, SIGTERM and SIGHUP sent to fencectl alone are passed on to COMMAND. Those
 * from the terminal (Ctrl-C) are not, because the terminal already sent them to the whole
 * foreground process group, COMMAND included. SIGCHLD and these signals wake the loop
 * through a self-pipe.
 */
#include "fc_internal.h"
#include "fc_lockset.h"
#include "fc_session.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define GATEWAY_WAIT_MAX_MS 60000
#define RENEW_RETRY_MAX_MS 1000

enum { LOST_NO = 0, LOST_NOT_OWNER, LOST_EXPIRED };

/* Shared with the signal handlers. */
static volatile sig_atomic_t sig_child_pid;  /* COMMAND while it can be signalled, else 0 */
static volatile sig_atomic_t sig_received;   /* the last SIGINT/SIGTERM/SIGHUP, or 0 */
static int wake_pipe[2] = {-1, -1};

typedef struct runner {
    fc_client *c;
    const fc_options *o;
    char owner[FC_ID_LEN + 1];
    char what_lock[256];         /* "lock orders", "renew orders", "unlock orders" */
    char what_renew[256];
    char what_unlock[256];
    int64_t token;               /* tokens[0] */
    int64_t tokens[FC_SET_MAX];  /* one per resource of the set (fc_lockset.c) */
    fc_session ses;              /* the locks' session; ses.on 0: none (renew the locks) */
    pid_t pid;
    int64_t lease_until_ms;      /* the lease surely lasts until then */
    int64_t next_renew_ms;
    int renew_failures;          /* in a row */
    int lost;                    /* LOST_* */
    int64_t kill_at_ms;          /* when SIGKILL is due; 0 before SIGTERM was sent */
    int killed;
    int status;                  /* COMMAND's wait status */
} runner;

static void wake(void)
{
    char byte = 0;
    if (wake_pipe[1] >= 0) {
        ssize_t n = write(wake_pipe[1], &byte, 1);
        (void)n; /* a full pipe already wakes the loop */
    }
}

static void on_stop_signal(int sig, siginfo_t *info, void *ctx)
{
    int saved = errno;
    (void)ctx;
    sig_received = sig;
    /* si_code <= 0: sent by a process (kill, sigqueue). The terminal's signals carry
     * SI_KERNEL and already reached COMMAND. */
    if (sig_child_pid > 0 && info != NULL && info->si_code <= 0) {
        kill((pid_t)sig_child_pid, sig);
    }
    wake();
    errno = saved;
}

static void on_child(int sig)
{
    int saved = errno;
    (void)sig;
    wake();
    errno = saved;
}

static int set_flags(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    int fdfl = fcntl(fd, F_GETFD);
    if (fl < 0 || fdfl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0 ||
        fcntl(fd, F_SETFD, fdfl | FD_CLOEXEC) != 0) {
        return -1;
    }
    return 0;
}

/* Installs the handlers and the self-pipe. Returns 0 or -1 (errno). */
static int install_signals(void)
{
    struct sigaction sa;
    static const int stop_signals[] = {SIGINT, SIGTERM, SIGHUP};

    if (pipe(wake_pipe) != 0 || set_flags(wake_pipe[0]) != 0 || set_flags(wake_pipe[1]) != 0) {
        return -1;
    }
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_sigaction = on_stop_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    for (size_t i = 0; i < sizeof stop_signals / sizeof stop_signals[0]; i++) {
        if (sigaction(stop_signals[i], &sa, NULL) != 0) {
            return -1;
        }
    }
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_child;
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    if (sigaction(SIGCHLD, &sa, NULL) != 0) {
        return -1;
    }
    /* A gateway closing the connection must be an error, not the end of fencectl. */
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

/* Waits up to ms for a signal or SIGCHLD, then empties the self-pipe. */
static void wait_for_event(int64_t ms)
{
    struct pollfd pfd = {wake_pipe[0], POLLIN, 0};
    char buf[64];

    if (ms < 0) {
        ms = 0;
    }
    poll(&pfd, 1, ms > INT_MAX ? INT_MAX : (int)ms);
    while (read(wake_pipe[0], buf, sizeof buf) > 0) {
    }
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* Step 1 with a session: renews it (holding no lock yet) between two slices of the wait.
 * Returns 0 (renewed, or a failure already reported: the next slice tries again), or -1
 * after printing that the session ended. */
static int keep_session(runner *rn)
{
    fc_response r;
    rn->c->what = rn->what_renew;
    fc_session_renewal got = fc__session_renew(rn->c, &rn->ses, 0, FC_REQUEST_TIMEOUT_MS, &r);
    if (got == FC_SESSION_FAILED) {
        fc__report(rn->c, &r);
    } else if (got == FC_SESSION_LOST) {
        fprintf(stderr, "fencectl: %s: the session ended while waiting for the lock\n",
                rn->what_lock);
    }
    fc__response_free(&r);
    return got == FC_SESSION_LOST ? -1 : 0;
}

/* Step 1. Returns FC_EXIT_OK with rn->token and the lease set, or the exit code after
 * printing why. */
static int acquire(runner *rn)
{
    fc_client *c = rn->c;
    const fc_options *o = rn->o;
    int64_t wait_until = fc__now_ms() + o->wait_ms;

    for (;;) {
        char key[FC_ID_LEN + 1];
        fc_response r;
        int64_t sent = fc__now_ms();
        int64_t slice = min64(wait_until > sent ? wait_until - sent : 0, GATEWAY_WAIT_MAX_MS);
        if (rn->ses.on && (slice = min64(slice, o->ttl_ms / 3)) > 0 &&
            sent >= rn->ses.sent_ms + o->ttl_ms / 3 && keep_session(rn) != 0) {
            return FC_EXIT_UNAVAILABLE;
        }
        c->what = rn->what_lock;
        json_t *body = rn->ses.on ? json_pack("{s:s, s:s, s:I}", "owner", rn->owner, "session",
                                              rn->ses.id, "wait_ms", (json_int_t)slice)
                                  : json_pack("{s:s, s:I, s:I}", "owner", rn->owner, "ttl_ms",
                                              (json_int_t)o->ttl_ms, "wait_ms",
                                              (json_int_t)slice);
        if (fc__set_names(body, o) != 0 || fc__random_id(key) != 0) {
            json_decref(body);
            fprintf(stderr, "fencectl: %s: cannot build the request\n", c->what);
            return FC_EXIT_INTERNAL;
        }
        /* A new key per attempt: a 409 is final for its key. Retries of one attempt (a lost
         * answer, a 503) reuse it, so they replay a lock that was taken instead of taking it
         * twice. */
        c->abort_flag = &sig_received;
        fc__post_json(c, "/lock", body, key, slice + FC_REQUEST_TIMEOUT_MS,
                      sent + (slice > FC_RETRY_BUDGET_MS ? slice : FC_RETRY_BUDGET_MS), &r);
        c->abort_flag = NULL;
        if (r.status == 200 && fc__set_tokens(o, &r, rn->tokens) == 0) {
            rn->token = rn->tokens[0];
            rn->lease_until_ms = (rn->ses.on ? rn->ses.sent_ms : sent) + o->ttl_ms;
            fc__response_free(&r);
            return FC_EXIT_OK;
        }
        int locked = r.status == 409 && strcmp(fc__error_code(&r), "locked") == 0;
        if (sig_received != 0) {
            fc__response_free(&r);
            return 128 + sig_received;
        }
        if (locked && fc__now_ms() < wait_until) {
            fc__response_free(&r);
            continue;
        }
        if (locked && o->nresources > 1) {
            fprintf(stderr, "fencectl: %s: %s is locked by another owner (nothing of the set "
                    "was taken), retry after %lld ms\n", c->what, fc__set_held(&r),
                    (long long)fc__json_int(&r, "retry_after_ms"));
            fc__response_free(&r);
            return o->conflict_exit_code;
        }
        int rc = r.status == 200 ? FC_EXIT_UNAVAILABLE : fc__report(c, &r);
        if (r.status == 200) {
            fprintf(stderr, "fencectl: %s: the answer carries no token\n", c->what);
        }
        fc__response_free(&r);
        return locked ? o->conflict_exit_code : rc;
    }
}

/* Step 5 (and the clean-up after step 1 failed, held 0): DELETE the session, else POST
 * /unlock. A failure is only reported: the lease ends the hold anyway. When the lock may
 * never have been taken (held 0), not_owner (or an ended session) is the expected answer
 * and is not reported. */
static void release(runner *rn, int held)
{
    char key[FC_ID_LEN + 1];
    fc_response r;

    rn->c->what = rn->what_unlock;
    if (rn->ses.on) {
        fc__session_end(rn->c, &rn->ses, held);
        return;
    }
    json_t *body = json_pack("{s:s}", "owner", rn->owner);
    if (fc__set_names(body, rn->o) != 0 || fc__random_id(key) != 0) {
        json_decref(body);
        fprintf(stderr, "fencectl: %s: cannot build the request; the lock ends with its "
                "lease\n", rn->c->what);
        return;
    }
    fc__post_json(rn->c, "/unlock", body, key, FC_REQUEST_TIMEOUT_MS,
                  fc__now_ms() + FC_RETRY_BUDGET_MS, &r);
    int not_owner = r.status == 409 && strcmp(fc__error_code(&r), "not_owner") == 0;
    if (r.status != 200 && (held || !not_owner)) {
        fc__report(rn->c, &r);
    } else if (rn->c->verbose) {
        fprintf(stderr, "fencectl: %s: released\n", rn->c->what);
    }
    fc__response_free(&r);
}

/* In the child after fork: default signal handling, the caller's mask, exec. On failure
 * the errno goes up err_fd and the child exits 127 (not found) or 126. */
static void exec_child(char *const *argv, int err_fd, const sigset_t *mask)
{
    static const int reset[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE};

    for (size_t i = 0; i < sizeof reset / sizeof reset[0]; i++) {
        signal(reset[i], SIG_DFL); /* an ignored SIGPIPE would survive exec */
    }
    sigprocmask(SIG_SETMASK, mask, NULL);
    execvp(argv[0], argv);
    int e = errno;
    ssize_t n = write(err_fd, &e, sizeof e);
    (void)n;
    _exit(e == ENOENT ? FC_EXIT_NOT_FOUND : FC_EXIT_CANNOT_RUN);
}

/* Reads the child's exec errno from fd: 0 when exec succeeded (the pipe closed empty). */
static int exec_errno(int fd)
{
    int e = 0;
    ssize_t n;

    do {
        n = read(fd, &e, sizeof e);
    } while (n < 0 && errno == EINTR);
    return n == (ssize_t)sizeof e ? e : 0;
}

/* Puts FENCING_TOKEN and FENCING_RESOURCE into fencectl's own environment before fork, so
 * the child only calls execvp, and opens the pipe that reports a failed exec (its write end
 * closes on exec). Returns 0, or -1 after printing why. */
static int prepare_exec(const runner *rn, int err_pipe[2])
{
    if (fc__set_export(rn->o, rn->tokens) != 0 || pipe(err_pipe) != 0) {
        fprintf(stderr, "fencectl: %s: cannot prepare COMMAND: %s\n", rn->what_lock,
                strerror(errno));
        return -1;
    }
    fcntl(err_pipe[1], F_SETFD, FD_CLOEXEC);
    return 0;
}

/* Step 2. Returns 0 with rn->pid; -2 when a stop signal came first (nothing started); or
 * -1 after printing why (rn->pid is 0 when no child exists, or the child to reap when exec
 * failed). */
static int start_command(runner *rn)
{
    int err_pipe[2];
    sigset_t block, old;

    if (prepare_exec(rn, err_pipe) != 0) {
        return -1;
    }
    /* Blocked until sig_child_pid is set, so no signal is lost between fork and then. */
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGHUP);
    sigprocmask(SIG_BLOCK, &block, &old);
    if (sig_received != 0) {
        /* Asked to stop after the lock was granted: do not start COMMAND at all. */
        sigprocmask(SIG_SETMASK, &old, NULL);
        close(err_pipe[0]);
        close(err_pipe[1]);
        return -2;
    }
    rn->pid = fork();
    if (rn->pid == 0) {
        close(err_pipe[0]);
        exec_child(rn->o->command, err_pipe[1], &old);
    }
    int fork_errno = errno;
    sig_child_pid = rn->pid > 0 ? rn->pid : 0;
    sigprocmask(SIG_SETMASK, &old, NULL);
    close(err_pipe[1]);
    int e = rn->pid > 0 ? exec_errno(err_pipe[0]) : fork_errno;
    close(err_pipe[0]);
    if (rn->pid < 0) {
        rn->pid = 0;
    }
    if (e != 0) {
        fprintf(stderr, "fencectl: %s: cannot run '%s': %s\n", rn->what_lock,
                rn->o->command[0], strerror(e));
        return -1;
    }
    return 0;
}

/* Step 4: SIGTERM now, SIGKILL at kill_at_ms (see supervise). */
static void lose(runner *rn, int why)
{
    rn->lost = why;
    rn->kill_at_ms = fc__now_ms() + rn->o->kill_grace_ms;
    fprintf(stderr, "fencectl: %s: lost the lock (%s); sending SIGTERM to COMMAND, SIGKILL "
            "in %lld ms\n", rn->what_lock,
            why == LOST_NOT_OWNER ? "the gateway says this owner no longer holds it"
                                  : "renewals failed until the lease ran out",
            (long long)rn->o->kill_grace_ms);
    kill(rn->pid, SIGTERM);
}

enum { RENEW_OK, RENEW_LOST, RENEW_FAILED };

/* Step 3 without a session: POST /renew of the lock(s), answered in *r. */
static int renew_locks(runner *rn, int64_t sent, fc_response *r)
{
    json_t *body = json_pack("{s:s, s:I}", "owner", rn->owner, "ttl_ms",
                             (json_int_t)rn->o->ttl_ms);
    fc__set_names(body, rn->o);
    fc__post_json(rn->c, "/renew", body, NULL,
                  min64(FC_REQUEST_TIMEOUT_MS, rn->lease_until_ms - sent), 0, r);
    int64_t now_tokens[FC_SET_MAX];
    if (r->status == 200 && fc__set_tokens(rn->o, r, now_tokens) == 0 &&
        memcmp(now_tokens, rn->tokens, (size_t)rn->o->nresources * sizeof *now_tokens) == 0) {
        rn->lease_until_ms = sent + rn->o->ttl_ms;
        return RENEW_OK;
    }
    /* not_owner, or another token: the lock was taken anew and FENCING_TOKEN is stale. */
    if ((r->status == 409 && strcmp(fc__error_code(r), "not_owner") == 0) || r->status == 200) {
        return RENEW_LOST;
    }
    return RENEW_FAILED;
}

/* Step 3 with a session: POST /sessions/{id}/renew, answered in *r. */
static int renew_session(runner *rn, int64_t sent, fc_response *r)
{
    switch (fc__session_renew(rn->c, &rn->ses, rn->o->nresources,
                              min64(FC_REQUEST_TIMEOUT_MS, rn->lease_until_ms - sent), r)) {
    case FC_SESSION_RENEWED:
        rn->lease_until_ms = rn->ses.sent_ms + rn->o->ttl_ms;
        return RENEW_OK;
    case FC_SESSION_LOST:
        return RENEW_LOST;
    default:
        return RENEW_FAILED;
    }
}

/* Step 3: one renewal, bounded by what is left of the lease. */
static void renew_once(runner *rn)
{
    fc_client *c = rn->c;
    int64_t sent = fc__now_ms();
    int64_t ttl_ms = rn->o->ttl_ms;
    fc_response r;

    if (sent >= rn->lease_until_ms) {
        lose(rn, LOST_EXPIRED);
        return;
    }
    c->what = rn->what_renew;
    int got = rn->ses.on ? renew_session(rn, sent, &r) : renew_locks(rn, sent, &r);
    if (got == RENEW_OK) {
        rn->next_renew_ms = rn->lease_until_ms - ttl_ms + ttl_ms / 3;
        rn->renew_failures = 0;
    } else if (got == RENEW_LOST) {
        lose(rn, LOST_NOT_OWNER);
    } else {
        if (rn->renew_failures++ == 0 || c->verbose) {
            /* The first of a row, so a long outage is not a flood. */
            if (r.status == 200) {
                fprintf(stderr, "fencectl: %s: %lld of %d locks not renewed (their Redis node "
                        "did not answer)\n", c->what, (long long)fc__json_int(&r, "failed"),
                        rn->o->nresources);
            } else {
                fc__report(c, &r);
            }
        }
        int64_t now = fc__now_ms();
        rn->next_renew_ms = now + min64(RENEW_RETRY_MAX_MS, ttl_ms / 10);
        if (now >= rn->lease_until_ms) {
            lose(rn, LOST_EXPIRED);
        }
    }
    fc__response_free(&r);
}

/* 1 when COMMAND has exited (its status in rn->status, reaped). It is first seen without
 * being reaped, so the handler never signals a pid that was reaped and reused. */
static int reap(runner *rn)
{
    siginfo_t info;

    memset(&info, 0, sizeof info);
    if (waitid(P_PID, (id_t)rn->pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
        info.si_pid != rn->pid) {
        return 0;
    }
    sig_child_pid = 0;
    while (waitpid(rn->pid, &rn->status, 0) < 0 && errno == EINTR) {
    }
    return 1;
}

/* Steps 3 and 4 until COMMAND exits. */
static void supervise(runner *rn)
{
    for (;;) {
        if (reap(rn)) {
            return;
        }
        int64_t now = fc__now_ms();
        if (rn->lost == LOST_NO && now >= rn->next_renew_ms) {
            renew_once(rn);
            continue;
        }
        if (rn->lost != LOST_NO && !rn->killed && now >= rn->kill_at_ms) {
            fprintf(stderr, "fencectl: %s: COMMAND outlived --kill-grace; sending SIGKILL\n",
                    rn->what_lock);
            kill(rn->pid, SIGKILL);
            rn->killed = 1;
        }
        int64_t next = rn->lost == LOST_NO ? rn->next_renew_ms
                       : rn->killed         ? now + 1000
                                            : rn->kill_at_ms;
        wait_for_event(next - now);
    }
}

/* COMMAND's status the way a shell reports it. */
static int shell_status(int status)
{
    if (WIFEXITED(status)) {
        return WEXITSTATUS(status);
    }
    if (WIFSIGNALED(status)) {
        return 128 + WTERMSIG(status);
    }
    return FC_EXIT_INTERNAL;
}

/* Steps 2 to 5 once the lock is held. */
static int run_locked(runner *rn)
{
    if (rn->c->verbose) {
        fprintf(stderr, "fencectl: %s: acquired with token %lld\n", rn->what_lock,
                (long long)rn->token);
    }
    rn->next_renew_ms = rn->lease_until_ms - rn->o->ttl_ms + rn->o->ttl_ms / 3;
    int started = start_command(rn);
    if (started == -2) {
        release(rn, 1);
        return 128 + sig_received;
    }
    if (started != 0) {
        int rc = FC_EXIT_INTERNAL;
        if (rn->pid > 0) {
            while (waitpid(rn->pid, &rn->status, 0) < 0 && errno == EINTR) {
            }
            rc = shell_status(rn->status);
        }
        release(rn, 1);
        return rc;
    }
    supervise(rn);
    if (rn->lost != LOST_NOT_OWNER || rn->ses.on) {
        /* After LOST_EXPIRED too: the gateway may be back, and it is harmless. A session
         * that lost one lock may still hold the others of the set: it is ended. */
        release(rn, rn->lost == LOST_NO);
    }
    return rn->lost != LOST_NO ? FC_EXIT_LOCK_LOST : shell_status(rn->status);
}

int fc__cmd_lock(fc_client *c, const fc_options *o)
{
    runner rn;

    memset(&rn, 0, sizeof rn);
    rn.c = c;
    rn.o = o;
    char names[200] = "";
    size_t len = 0;
    for (int i = 0; i < o->nresources && len < sizeof names; i++) {
        len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", i ? "," : "",
                                o->resources[i]);
    }
    snprintf(rn.what_lock, sizeof rn.what_lock, "lock %s", names);
    snprintf(rn.what_renew, sizeof rn.what_renew, "renew %s", names);
    snprintf(rn.what_unlock, sizeof rn.what_unlock, "unlock %s", names);
    if (fc__random_id(rn.owner) != 0 || install_signals() != 0) {
        fprintf(stderr, "fencectl: %s: cannot set up: %s\n", rn.what_lock, strerror(errno));
        return FC_EXIT_INTERNAL;
    }
    c->what = rn.what_lock;
    int rc = fc__session_open(c, o, &rn.ses);
    if (rc == FC_EXIT_OK) {
        rc = acquire(&rn);
    }
    if (rc != FC_EXIT_OK) {
        if (sig_received != 0 || rn.ses.on) {
            /* Stopped while waiting: a retry may have taken the lock already. The gateway
             * may also still be waiting on our behalf and take it after this release; that
             * hold ends with its lease (--ttl), or with the session. A session is ended in
             * any case: nothing else would use it. */
            release(&rn, 0);
        }
        return rc;
    }
    return run_locked(&rn);
}
