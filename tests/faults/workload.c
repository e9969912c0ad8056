/*
 * fg_workload: the fault suite's clients. Forks 4 workers (lock, write, maybe renew, read and
 * read with the token, unlock) and 2 contenders (waiting locks left to expire, stale and
 * forged writes, reads, reads with an old token) on
 * 3 resources, each a separate process with its own libcurl handle talking HTTP to the real
 * gateway, and appends one history line (history.h) per operation to one file.
 *
 *   fg_workload run URL HISTORY PREFIX OPS SECONDS SEED [MODE]
 *   fg_workload final URL HISTORY PREFIX     reads the 3 resources once more ("final")
 *   fg_workload mark HISTORY EVENT           appends a mark (EVENT "heal": the fault is over)
 *   fg_workload now                          prints CLOCK_MONOTONIC in ms
 *
 * The run also ends as soon as the file HISTORY.stop exists (the scenario runner's signal that
 * its faults are done).
 * OPS bounds the lock attempts of all clients together, SECONDS the run. MODE adds a fault of
 * the clients' own to the run:
 *   pause [REDIS_PORT]   worker 0 stops itself with SIGSTOP right after some grants; this
 *                        parent then takes the same lock (waiting for the lease to run out),
 *                        writes with its newer token and unlocks, and only then sends SIGCONT,
 *                        so the frozen worker writes, renews and unlocks late.
 *   pause_locked [REDIS_PORT]  the same on a resource only worker 0 and the parent use
 *                        (PREFIX-pl), but the parent sends SIGCONT as soon as it holds the
 *                        lock, waits until the frozen worker's late write, fenced read, renew and unlock are
 *                        done (the worker tells it through a pipe), and only then writes and
 *                        unlocks: the late write meets a lock whose next holder has not
 *                        written yet.
 *   steal REDIS_PORT [PASSWORD]  like pause, but the parent deletes fg:{R}:lock (DEL or
 *                        PEXPIRE 1, alternately) in Redis under the frozen worker before
 *                        taking the lock.
 *   watchdog             rounds on a resource of their own (PREFIX-wd): a child process takes
 *                        the lock with a 1 s lease, writes, and a watchdog thread in it renews
 *                        the lease every ttl/3; after two renewals the parent kills the child
 *                        with SIGKILL (even rounds), or freezes it with SIGSTOP (odd rounds) and
 *                        kills it once the next lock is answered. After a holder_killed or
 *                        holder_frozen mark, the parent waits for the lock (wait_ms = ttl +
 *                        3 s), writes and unlocks; the checker wants it granted, with a larger
 *                        token and after the dead holder's lease (check.h).
 *   shared               half of the workers' locks are shared ("mode": "shared", flag shared),
 *                        a third of those a shared set of two resources (one lock line per
 *                        member): a shared holder reads with its token (fenced read), may try to write
 *                        with it (its token is the last exclusive one: 409 not_exclusive), may
 *                        renew, and unlocks. The checker's invariant 13 wants no exclusive
 *                        grant inside a shared lease and no shared grant inside an exclusive
 *                        one, and 15 no write accepted with a token granted shared.
 *   transfers [N]        instead of the usual clients, transfers between N accounts (default
 *                        8) in fenced transactions, with paused clients (wl_transfers.c).
 *   herd [WAITERS [MS]]  a thundering herd on PREFIX-herd for MS ms (default 8000): one process
 *                        keeps WAITERS (default 200) waiting POST /lock requests in flight with
 *                        libcurl multi, each unlocking at once when granted and asking again;
 *                        another holds the lock for 50 ms, unlocks and locks again. It ends
 *                        with a herd_done mark.
 *   sessions             instead of the usual clients, clients holding their locks in
 *                        sessions, ending them, leaving them to expire, and a killed holder
 *                        (wl_sessions.c).
 * In pause, pause_locked and steal the late write must be 409 stale_token and the renew and
 * unlock 409 not_owner (the checker's invariant 4).
 * This file holds the clients' behaviour; their requests and history lines are wl_client.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <hiredis/hiredis.h>
#include <jansson.h>

#include "wl_client.h"
#include "wl_sessions.h"
#include "wl_transfers.h"

#define WORKERS 4
#define CONTENDERS 2
#define FORGED_TOKEN 4000000000000000LL
#define LOCKED_HOLD_MS 15000 /* pause_locked: the next holder's lease, past the late ops */
#define LOCKED_LATE_MS 10000 /* pause_locked: how long it waits for them */
#define WD_TTL_MS 1000       /* watchdog: the holder's lease */
#define WD_RENEWS 2          /* watchdog: renewals before the holder is stopped or killed */
#define WD_READY_MS 10000    /* watchdog: how long the parent waits for those */
#define HERD_TTL_MS 1000     /* herd: the lease of a waiter that got the lock */
#define HERD_HOLD_MS 50      /* herd: how long the holder keeps the lock each time */


/* True while the run should go on: within its limits and no stop file yet. */
static int running(const conf *cf, long i)
{
    return i < cf->ops && fh_now_ns() < cf->deadline && access(cf->stop_path, F_OK) != 0;
}

static void resource_name(const conf *cf, int r, char *buf, size_t len)
{
    snprintf(buf, len, "%s-%d", cf->prefix, r);
}

/* Worker 0 in pause mode: tells the parent what it holds, then freezes itself. */
static void freeze(int report_fd, const fh_op *grant)
{
    char msg[256];
    int n = snprintf(msg, sizeof msg, "%s %lld %ld\n", grant->resource, grant->token,
                     grant->ttl_ms);
    if (write(report_fd, msg, (size_t)n) != n)
        _exit(3);
    raise(SIGSTOP);
}

/* A reader holding grant (shared): reads with its token, maybe tries to write with it
 * (refused), maybe renews, and leaves. */
static void reader(client *c, const conf *cf, const fh_op *g)
{
    wl_fenced_read(c, cf, g->resource, g->token, FH_F_SHARED);
    if (g->token > 0 && wl_rand_between(c, 0, 2) == 0)
        wl_write(c, cf, g->resource, g->token, g->owner, FH_F_SHARED);
    if (wl_rand_between(c, 0, 2) == 0)
        wl_owner_call(c, cf, FH_RENEW, g, FH_F_SHARED);
    wl_owner_call(c, cf, FH_UNLOCK, g, FH_F_SHARED);
}

/* A shared set of two of the resources, in one /lock: each member's holder then reads as a
 * single reader does, member after member. */
static void shared_set(client *c, const conf *cf)
{
    char a[128], b[128];
    int x = (int)wl_rand_between(c, 0, RESOURCES - 1);
    int y = (x + (int)wl_rand_between(c, 1, RESOURCES - 1)) % RESOURCES;
    resource_name(cf, x, a, sizeof a);
    resource_name(cf, y, b, sizeof b);
    const char *const names[] = {a, b};
    fh_op g[2];
    wl_lock_set(c, cf, names, 2, wl_rand_between(c, 300, 2000), wl_rand_between(c, 0, 1500),
                FH_F_SHARED, NULL, g);
    if (g[0].status != 200) {
        wl_back_off(&g[0]);
        return;
    }
    reader(c, cf, &g[0]);
    reader(c, cf, &g[1]);
}

/* Lock, write, maybe renew and read, unlock. Worker 0 of the pause modes is given report_fd
 * (it freezes on it after some grants) and, in pause_locked, done_fd: one byte there tells
 * the parent its late write, fenced read, renew and unlock are over. In pause_locked, worker 0 freezes on
 * every fourth attempt, on a resource of its own (PREFIX-pl) that only it and the parent
 * use, so the parent is always the next holder and nobody writes in between. */
static void worker(client *c, const conf *cf, int report_fd, int done_fd)
{
    char resource[128];
    long grants = 0;
    for (long i = 0; running(cf, i); i++) {
        int own = report_fd >= 0 && cf->mode == MODE_PAUSE_LOCKED && i % 4 == 1;
        resource_name(cf, (int)wl_rand_between(c, 0, RESOURCES - 1), resource, sizeof resource);
        if (own)
            snprintf(resource, sizeof resource, "%s-pl", cf->prefix);
        unsigned mode = cf->mode == MODE_SHARED && wl_rand_between(c, 0, 1) == 0 ? FH_F_SHARED
                                                                                  : 0;
        if (mode != 0 && !own && wl_rand_between(c, 0, 2) == 0) {
            shared_set(c, cf);
            continue;
        }
        fh_op g = wl_lock(c, cf, resource, wl_rand_between(c, 300, 2000), wl_rand_between(c, 0, 1500),
                          mode);
        if (g.status != 200) {
            wl_back_off(&g);
            continue;
        }
        if (mode != 0) {
            reader(c, cf, &g);
            continue;
        }
        unsigned flags = 0;
        if (report_fd >= 0 && (cf->mode == MODE_PAUSE_LOCKED ? own : ++grants % 4 == 2)) {
            freeze(report_fd, &g);
            flags = cf->mode == MODE_STEAL ? FH_F_AFTER_STEAL : FH_F_AFTER_PAUSE;
        }
        fh_op w = wl_write(c, cf, resource, g.token, g.owner, flags);
        wl_back_off(&w);
        if (flags != 0 || wl_rand_between(c, 0, 2) == 0)
            wl_owner_call(c, cf, FH_RENEW, &g, flags);
        if (wl_rand_between(c, 0, 3) == 0)
            wl_read(c, cf, resource, FH_READ);
        if (flags != 0 || wl_rand_between(c, 0, 3) == 0)
            wl_fenced_read(c, cf, resource, g.token, flags);
        wl_owner_call(c, cf, FH_UNLOCK, &g, flags);
        if (flags != 0 && done_fd >= 0 && write(done_fd, "d", 1) != 1)
            _exit(3);
    }
}

static void contender(client *c, const conf *cf)
{
    char resource[128];
    for (long i = 0; running(cf, i); i++) {
        int r = (int)wl_rand_between(c, 0, RESOURCES - 1);
        long action = wl_rand_between(c, 0, 99);
        resource_name(cf, r, resource, sizeof resource);
        if (action < 50) {
            fh_op g = wl_lock(c, cf, resource, wl_rand_between(c, 300, 2000),
                              wl_rand_between(c, 0, 1500), 0);
            wl_back_off(&g);
            if (g.status == 200) {
                c->last_token[r] = g.token;
                if (wl_rand_between(c, 0, 1) == 0) /* else its lease runs out */
                    wl_owner_call(c, cf, FH_UNLOCK, &g, 0);
            }
        } else if (action < 65) {
            wl_write(c, cf, resource, FORGED_TOKEN + wl_rand_between(c, 0, 1000000), "forger",
                     FH_F_FORGED);
        } else if (action < 80 && c->last_token[r] > 0) {
            wl_write(c, cf, resource, c->last_token[r], "stale", FH_F_STALE);
        } else if (action < 88 && c->last_token[r] > 0) {
            wl_fenced_read(c, cf, resource, c->last_token[r], FH_F_STALE);
        } else {
            wl_read(c, cf, resource, FH_READ);
        }
    }
}

static void steal(const conf *cf, const char *resource, int use_del)
{
    redisContext *rc = redisConnect("127.0.0.1", cf->redis_port);
    redisReply *r = NULL;
    if (rc == NULL || rc->err != 0) {
        fprintf(stderr, "fg_workload: redis connect: %s\n", rc != NULL ? rc->errstr : "oom");
        goto out;
    }
    if (cf->redis_password != NULL) {
        r = redisCommand(rc, "AUTH %s", cf->redis_password);
        freeReplyObject(r);
    }
    r = use_del ? redisCommand(rc, "DEL fg:{%s}:lock", resource)
                : redisCommand(rc, "PEXPIRE fg:{%s}:lock 1", resource);
    if (r == NULL || r->type != REDIS_REPLY_INTEGER || r->integer != 1)
        fprintf(stderr, "fg_workload: removing the lease of %s did not remove a key\n", resource);
    freeReplyObject(r);
out:
    if (rc != NULL)
        redisFree(rc);
}

/* Reads what fd has (up to len - 1 bytes, then a NUL) within timeout_ms. Returns the count,
 * 0 at end of file, or -1 on timeout or error. */
static ssize_t read_within(int fd, char *buf, size_t len, int timeout_ms)
{
    struct pollfd pfd = {fd, POLLIN, 0};
    int rc = poll(&pfd, 1, timeout_ms);
    if (rc <= 0)
        return -1;
    ssize_t n = read(fd, buf, len - 1);
    buf[n > 0 ? n : 0] = '\0';
    return n;
}

/* The pipes between worker 0 and the parent in the pause modes. */
typedef struct pause_pipes {
    int report[2]; /* worker 0 -> parent: what it holds, before it freezes */
    int done[2];   /* worker 0 -> parent: its late operations are over (pause_locked) */
} pause_pipes;

/* The parent's part when worker 0 (pid) froze itself: become the next holder and write. In
 * pause and steal it writes and unlocks before it lets the frozen worker go on; in
 * pause_locked it lets the worker go on as soon as it holds the lock, and writes only once
 * the worker's late write, fenced read, renew and unlock are over. */
static int next_holder(client *p, const conf *cf, const pause_pipes *pp, pid_t pid,
                       long *steals)
{
    char msg[256] = "", resource[160];
    long long token = 0;
    long ttl_ms = 0;
    ssize_t n = read(pp->report[0], msg, sizeof msg - 1);
    if (n <= 0 || sscanf(msg, "%159s %lld %ld", resource, &token, &ttl_ms) != 3) {
        fprintf(stderr, "fg_workload: no report from the frozen worker\n");
        return -1;
    }
    if (cf->mode == MODE_STEAL)
        steal(cf, resource, (*steals)++ % 2 == 0);
    int locked = cf->mode == MODE_PAUSE_LOCKED;
    fh_op g = wl_lock(p, cf, resource, locked ? LOCKED_HOLD_MS : 5000,
                      cf->mode == MODE_STEAL ? 3000 : ttl_ms + 3000, 0);
    int rc = 0;
    if (locked) {
        kill(pid, SIGCONT);
        if (read_within(pp->done[0], msg, sizeof msg, LOCKED_LATE_MS) != 1) {
            fprintf(stderr, "fg_workload: the frozen worker did not finish its late operations "
                            "within %d ms\n", LOCKED_LATE_MS);
            rc = -1;
        }
    }
    if (g.status != 200)
        return rc;
    wl_write(p, cf, resource, g.token, g.owner, 0);
    wl_owner_call(p, cf, FH_UNLOCK, &g, 0);
    return rc;
}

/* --- watchdog mode ----------------------------------------------------------------------- */

typedef struct watchdog_arg {
    client c; /* the watchdog's own, with its own curl handle */
    const conf *cf;
    fh_op grant;
    int ready_fd;
} watchdog_arg;

/* The watchdog thread: renews the grant every ttl/3, like Redisson's lock watchdog, and tells
 * the parent (one line on ready_fd: "OWNER TOKEN") after WD_RENEWS successful renewals. It
 * runs until its process is killed. */
static void *watchdog(void *arg)
{
    watchdog_arg *a = arg;
    struct timespec period = {0, a->grant.ttl_ms / 3 * 1000000L};
    char msg[256];
    long renewed = 0;
    for (;;) {
        nanosleep(&period, NULL); /* the watchdog's schedule, not a wait for anything */
        fh_op r = wl_owner_call(&a->c, a->cf, FH_RENEW, &a->grant, FH_F_WATCHDOG);
        if (r.status != 200 || ++renewed != WD_RENEWS)
            continue;
        int n = snprintf(msg, sizeof msg, "%s %lld\n", a->grant.owner, a->grant.token);
        if (write(a->ready_fd, msg, (size_t)n) != n)
            _exit(3);
    }
    return NULL;
}

/* The child of a watchdog round: locks resource, writes, starts its watchdog and keeps the
 * lock until it is killed (30 s at most, a bound should nobody kill it). Never returns. */
static void watchdog_holder(const conf *cf, int fd, const char *resource, int ready_fd,
                            uint64_t seed)
{
    static watchdog_arg a; /* the thread's; this process ends by being killed */
    client c;
    pthread_t thread;
    struct timespec bound = {30, 0};

    if (wl_client_init(&c, "wd", fd, seed) != 0 || wl_client_init(&a.c, "wd", fd, seed + 1) != 0)
        _exit(1);
    a.cf = cf;
    a.ready_fd = ready_fd;
    a.grant = wl_lock(&c, cf, resource, WD_TTL_MS, 5000, FH_F_WATCHDOG);
    if (a.grant.status != 200)
        _exit(4);
    wl_write(&c, cf, resource, a.grant.token, a.grant.owner, FH_F_WATCHDOG);
    if (pthread_create(&thread, NULL, watchdog, &a) != 0)
        _exit(1);
    nanosleep(&bound, NULL);
    _exit(5);
}

/* One watchdog round (round numbers from 0): a child holds PREFIX-wd with a watchdog; once it
 * renewed WD_RENEWS times it is killed (even round) or frozen (odd round) and a mark says so;
 * then this parent waits for the lock past the lease, writes and unlocks. The frozen child is
 * killed once the lock was answered, never continued. Returns 0, or -1 when the holder could
 * not get going. */
static int watchdog_round(client *p, const conf *cf, long round, uint64_t seed)
{
    char resource[128], msg[256] = "", owner[FH_FIELD_MAX];
    long long token = 0;
    int ready[2], st = 0, frozen = round % 2 == 1;

    snprintf(resource, sizeof resource, "%s-wd", cf->prefix);
    if (pipe(ready) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(ready[0]);
        watchdog_holder(cf, p->fd, resource, ready[1], seed);
    }
    close(ready[1]);
    ssize_t n = pid > 0 ? read_within(ready[0], msg, sizeof msg, WD_READY_MS) : -1;
    close(ready[0]);
    if (n <= 0 || sscanf(msg, "%159s %lld", owner, &token) != 2) {
        fprintf(stderr, "fg_workload: watchdog round %ld: the holder did not renew %d times "
                        "within %d ms\n", round, WD_RENEWS, WD_READY_MS);
        if (pid > 0) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
        }
        return -1;
    }
    kill(pid, frozen ? SIGSTOP : SIGKILL);
    if (waitpid(pid, &st, frozen ? WUNTRACED : 0) != pid ||
        (frozen ? !WIFSTOPPED(st) : !WIFSIGNALED(st))) {
        fprintf(stderr, "fg_workload: watchdog round %ld: the holder was not %s\n", round,
                frozen ? "stopped" : "killed");
        return -1;
    }
    wl_holder_mark(p->fd, resource, owner, WD_TTL_MS, frozen ? "holder_frozen" : "holder_killed");
    fh_op g = wl_lock(p, cf, resource, 2000, WD_TTL_MS + 3000, 0);
    if (frozen) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
    }
    if (g.status == 200) {
        wl_write(p, cf, resource, g.token, g.owner, 0);
        wl_owner_call(p, cf, FH_UNLOCK, &g, 0);
    }
    return 0;
}

/* --- herd mode --------------------------------------------------------------------------- */

/* One waiter of the herd: a lock request in flight, or the unlock of the lock it got. */
typedef struct herd_slot {
    client c; /* its easy handle and owner names; one history fd for all */
    struct curl_slist *headers;
    reply rp;
    fh_op op;    /* the request in flight */
    fh_op grant; /* the lock it holds while its unlock is in flight */
    char body[512];
} herd_slot;

typedef struct herd_counts {
    long grants, refused, unavailable, unanswered;
} herd_counts;

static int herd_going(const conf *cf)
{
    return fh_now_ns() < cf->herd_deadline && access(cf->stop_path, F_OK) != 0;
}

/* Starts the slot's next request on m: the unlock of what it was just granted, or a new lock
 * (wait_ms from 1 to 4 s) while the herd is going. Returns 1 if a request was started. */
static int herd_next(CURLM *m, herd_slot *s, const conf *cf)
{
    char resource[128];
    if (s->op.kind == FH_LOCK && s->op.status == 200) {
        s->grant = s->op;
        wl_owner_op(&s->op, &s->c, FH_UNLOCK, &s->grant, FH_F_HERD, s->body, sizeof s->body);
    } else if (herd_going(cf)) {
        snprintf(resource, sizeof resource, "%s-herd", cf->prefix);
        wl_lock_op(&s->op, &s->c, resource, HERD_TTL_MS, wl_rand_between(&s->c, 1000, 4000), FH_F_HERD,
                s->body, sizeof s->body);
    } else {
        return 0;
    }
    const char *path = s->op.kind == FH_LOCK ? "/lock" : wl_owner_path(s->op.kind);
    s->headers = wl_http_setup(s->c.curl, cf, &s->op, "POST", path, s->body, 0, &s->rp);
    curl_easy_setopt(s->c.curl, CURLOPT_PRIVATE, s);
    s->op.start_ns = fh_now_ns();
    return curl_multi_add_handle(m, s->c.curl) == CURLM_OK;
}

/* Records the slot's finished request (outcome rc) and counts it. */
static void herd_done(herd_slot *s, CURLcode rc, herd_counts *n)
{
    s->op.end_ns = fh_now_ns();
    curl_slist_free_all(s->headers);
    s->headers = NULL;
    wl_http_result(s->c.curl, rc, &s->op);
    wl_parse_json(&s->rp, &s->op, s->op.kind != FH_LOCK);
    wl_append_line(s->c.fd, &s->op);
    if (s->op.kind != FH_LOCK)
        return;
    if (s->op.status == 200)
        n->grants++;
    else if (s->op.status == 409)
        n->refused++;
    else if (s->op.status == 503)
        n->unavailable++;
    else if (s->op.status == 0)
        n->unanswered++;
}

/* Makes sure this process may open a descriptor for each waiter and some more. */
static int herd_fds(long waiters)
{
    struct rlimit rl;
    rlim_t need = (rlim_t)waiters + 64;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return -1;
    if (rl.rlim_cur < need && rl.rlim_max >= need) {
        rl.rlim_cur = need;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur >= need)
        return 0;
    fprintf(stderr, "fg_workload: herd: %ld waiters need %lu descriptors, the limit is %lu\n",
            waiters, (unsigned long)need, (unsigned long)rl.rlim_cur);
    return -1;
}

/* The herd process: cf->herd_waiters requests in flight on PREFIX-herd with libcurl multi
 * until the herd's deadline, every answer recorded; then a herd_done mark. Returns 0, or 1
 * when it could not run. */
static int herd(const conf *cf, int fd, uint64_t seed)
{
    herd_counts n = {0, 0, 0, 0};
    int active = 0, still = 0, left = 0, rc = 1;
    CURLM *m = NULL;
    CURLMsg *msg = NULL;
    herd_slot *slots = calloc((size_t)cf->herd_waiters, sizeof *slots);

    if (slots == NULL || herd_fds(cf->herd_waiters) != 0)
        goto out;
    m = curl_multi_init();
    if (m == NULL)
        goto out;
    for (long i = 0; i < cf->herd_waiters; i++) {
        char name[16];
        snprintf(name, sizeof name, "hw%d", (int)(i % 100000));
        if (wl_client_init(&slots[i].c, name, fd, seed + (uint64_t)i) != 0)
            goto out;
        active += herd_next(m, &slots[i], cf);
    }
    while (active > 0) {
        curl_multi_perform(m, &still);
        while ((msg = curl_multi_info_read(m, &left)) != NULL) {
            herd_slot *s = NULL;
            if (msg->msg != CURLMSG_DONE)
                continue;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&s);
            CURLcode done = msg->data.result;
            curl_multi_remove_handle(m, s->c.curl);
            herd_done(s, done, &n);
            active += herd_next(m, s, cf) - 1;
        }
        curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    fprintf(stderr, "fg_workload: herd of %ld: %ld grants, %ld refused (409), %ld 503, %ld "
                    "unanswered\n", cf->herd_waiters, n.grants, n.refused, n.unavailable,
            n.unanswered);
    wl_holder_mark(fd, "-", "-", 0, "herd_done");
    rc = 0;
out:
    for (long i = 0; slots != NULL && i < cf->herd_waiters; i++)
        if (slots[i].c.curl != NULL)
            curl_easy_cleanup(slots[i].c.curl);
    if (m != NULL)
        curl_multi_cleanup(m);
    free(slots);
    return rc;
}

/* The holder the herd waits on: lock (waiting up to 5 s), hold HERD_HOLD_MS, unlock, again,
 * until the herd's deadline. */
static void herd_holder(client *c, const conf *cf)
{
    char resource[128];
    struct timespec hold = {0, HERD_HOLD_MS * 1000000L};
    snprintf(resource, sizeof resource, "%s-herd", cf->prefix);
    while (herd_going(cf)) {
        fh_op g = wl_lock(c, cf, resource, 2000, 5000, FH_F_HERD);
        wl_back_off(&g);
        if (g.status != 200)
            continue;
        nanosleep(&hold, NULL); /* what the holder does with its lock: keep it 50 ms */
        wl_owner_call(c, cf, FH_UNLOCK, &g, FH_F_HERD);
    }
}

/* --- the run ----------------------------------------------------------------------------- */

/* Forked client number i: a worker, a contender, or in herd mode the herd's holder and the
 * herd. Never returns. */
static void client_main(const conf *cf, int i, int fd, const pause_pipes *pp, uint64_t seed)
{
    client c;
    char name[16];
    int rc = 0;
    if (i < WORKERS)
        snprintf(name, sizeof name, "w%d", i);
    else if (i < WORKERS + CONTENDERS)
        snprintf(name, sizeof name, "c%d", i - WORKERS);
    else
        snprintf(name, sizeof name, "hh");
    if (wl_client_init(&c, name, fd, seed + (uint64_t)i + 1) != 0)
        _exit(1);
    if (i < WORKERS)
        worker(&c, cf, i == 0 ? pp->report[1] : -1, i == 0 ? pp->done[1] : -1);
    else if (i < WORKERS + CONTENDERS)
        contender(&c, cf);
    else if (i == WORKERS + CONTENDERS)
        herd_holder(&c, cf);
    else
        rc = herd(cf, fd, seed * 7919 + 1);
    curl_easy_cleanup(c.curl);
    _exit(rc);
}

static int run(const conf *cf, const char *history, uint64_t seed)
{
    pid_t pids[WORKERS + CONTENDERS + 2];
    pause_pipes pp = {{-1, -1}, {-1, -1}};
    int fd = wl_open_history(history);
    int pausing = cf->mode == MODE_PAUSE || cf->mode == MODE_PAUSE_LOCKED || cf->mode == MODE_STEAL;
    int clients = WORKERS + CONTENDERS + (cf->mode == MODE_HERD ? 2 : 0);
    long steals = 0, stops = 0, rounds = 0;
    client p;

    if (cf->mode == MODE_TRANSFERS) {
        if (fd >= 0)
            close(fd); /* the transfers open their own */
        return wl_transfers_run(cf, history, seed);
    }
    if (fd < 0)
        return 1;
    if (cf->mode == MODE_SESSIONS) {
        int rc = wl_sessions_run(cf, fd, seed);
        close(fd);
        return rc;
    }
    if (pausing && (pipe(pp.report) != 0 || pipe(pp.done) != 0))
        return 1;
    for (int i = 0; i < clients; i++) {
        pids[i] = fork();
        if (pids[i] < 0) {
            perror("fork");
            return 1;
        }
        if (pids[i] == 0)
            client_main(cf, i, fd, &pp, seed);
    }
    if (wl_client_init(&p, "p", fd, seed) != 0)
        return 1;
    int left = clients, failed = 0;
    int64_t kill_at = cf->deadline + 30 * 1000000000LL;
    while (left > 0) {
        int st = 0;
        pid_t pid = waitpid(-1, &st, WUNTRACED | WNOHANG);
        if (pid == 0) {
            if (fh_now_ns() > kill_at) {
                fprintf(stderr, "fg_workload: clients still running 30 s after the limit\n");
                for (int i = 0; i < clients; i++)
                    kill(pids[i], SIGKILL);
                kill_at = INT64_MAX;
                failed = 1;
            }
            if (cf->mode == MODE_WATCHDOG && !failed && running(cf, rounds)) {
                if (watchdog_round(&p, cf, rounds, seed + 1000 + (uint64_t)rounds) != 0)
                    failed = 1;
                rounds++;
                continue;
            }
            struct timespec nap = {0, 10 * 1000000};
            nanosleep(&nap, NULL); /* polling for children, bounded by kill_at */
            continue;
        }
        if (pid < 0)
            break;
        if (WIFSTOPPED(st)) {
            stops++;
            if (next_holder(&p, cf, &pp, pid, &steals) != 0)
                failed = 1;
            kill(pid, SIGCONT);
            continue;
        }
        left--;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            failed = 1;
    }
    curl_easy_cleanup(p.curl);
    close(fd);
    fprintf(stderr, "fg_workload: clients done (%ld freezes, %ld watchdog rounds)\n", stops,
            rounds);
    return failed;
}

static int final_reads(const conf *cf, const char *history)
{
    client c;
    char resource[128];
    int fd = wl_open_history(history);
    if (fd < 0 || wl_client_init(&c, "final", fd, 1) != 0)
        return 1;
    for (int r = 0; r < RESOURCES; r++) {
        resource_name(cf, r, resource, sizeof resource);
        wl_read(&c, cf, resource, FH_FINAL);
    }
    curl_easy_cleanup(c.curl);
    close(fd);
    return 0;
}

static int mark(const char *history, const char *event)
{
    fh_op op = {0};
    int fd = wl_open_history(history);
    if (fd < 0)
        return 1;
    snprintf(op.client, sizeof op.client, "runner");
    op.kind = FH_MARK;
    op.start_ns = op.end_ns = fh_now_ns();
    snprintf(op.body, sizeof op.body, "%s", event);
    wl_append_line(fd, &op);
    close(fd);
    return 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: fg_workload run URL HISTORY PREFIX OPS SECONDS SEED [MODE]\n"
                    "         MODE: pause [REDIS_PORT] | pause_locked [REDIS_PORT] |\n"
                    "               steal REDIS_PORT [PASSWORD] | watchdog | herd [WAITERS [MS]] |\n"
                    "               transfers [N] | sessions\n"
                    "       fg_workload final URL HISTORY PREFIX\n"
                    "       fg_workload mark HISTORY EVENT\n"
                    "       fg_workload now\n");
    return 2;
}

/* Reads MODE and its arguments (args[0..n-1]) into cf. Returns 0, or -1 on bad usage. */
static int parse_mode(conf *cf, char **args, int n)
{
    static const struct {
        const char *name;
        run_mode mode;
        int min_args, max_args;
    } modes[] = {{"pause", MODE_PAUSE, 0, 1},        {"pause_locked", MODE_PAUSE_LOCKED, 0, 1},
                 {"steal", MODE_STEAL, 1, 2},        {"watchdog", MODE_WATCHDOG, 0, 0},
                 {"herd", MODE_HERD, 0, 2},          {"transfers", MODE_TRANSFERS, 0, 1},
                 {"sessions", MODE_SESSIONS, 0, 0},
                 {"shared", MODE_SHARED, 0, 0}};
    long herd_ms = 8000;
    if (n == 0)
        return 0;
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        if (strcmp(args[0], modes[i].name) != 0)
            continue;
        if (n - 1 < modes[i].min_args || n - 1 > modes[i].max_args)
            return -1;
        cf->mode = modes[i].mode;
        if (cf->mode == MODE_TRANSFERS) {
            cf->accounts = n > 1 ? (int)strtol(args[1], NULL, 10) : 8;
            if (cf->accounts < 2 || cf->accounts > 99)
                return -1;
        } else if (cf->mode == MODE_HERD) {
            cf->herd_waiters = n > 1 ? strtol(args[1], NULL, 10) : 200;
            herd_ms = n > 2 ? strtol(args[2], NULL, 10) : herd_ms;
            if (cf->herd_waiters < 1 || cf->herd_waiters > 10000 || herd_ms < 1)
                return -1;
        } else if (n > 1) {
            cf->redis_port = (int)strtol(args[1], NULL, 10);
            cf->redis_password = n > 2 ? args[2] : NULL;
        }
        cf->herd_deadline = fh_now_ns() + herd_ms * 1000000LL;
        if (cf->herd_deadline > cf->deadline)
            cf->herd_deadline = cf->deadline;
        return 0;
    }
    return -1;
}

int main(int argc, char **argv)
{
    conf cf = {0};
    int rc;

    if (argc >= 2 && strcmp(argv[1], "now") == 0) {
        printf("%lld\n", (long long)(fh_now_ns() / 1000000));
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "mark") == 0)
        return mark(argv[2], argv[3]);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (argc == 5 && strcmp(argv[1], "final") == 0) {
        cf.url = argv[2];
        cf.prefix = argv[4];
        rc = final_reads(&cf, argv[3]);
    } else if (argc >= 8 && strcmp(argv[1], "run") == 0) {
        cf.url = argv[2];
        cf.prefix = argv[4];
        cf.ops = strtol(argv[5], NULL, 10) / (WORKERS + CONTENDERS) + 1;
        cf.deadline = fh_now_ns() + strtoll(argv[6], NULL, 10) * 1000000000LL;
        snprintf(cf.stop_path, sizeof cf.stop_path, "%s.stop", argv[3]);
        rc = parse_mode(&cf, argv + 8, argc - 8) != 0
                 ? usage()
                 : run(&cf, argv[3], strtoull(argv[7], NULL, 10));
    } else {
        rc = usage();
    }
    curl_global_cleanup();
    return rc;
}
