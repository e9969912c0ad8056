/*
 * fg_workload: the fault suite's clients. Forks 4 workers (lock, write, maybe renew and read,
 * unlock) and 2 contenders (waiting locks left to expire, stale and forged writes, reads) on
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
 *                        lock, waits until the frozen worker's late write, renew and unlock are
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
 *   herd [WAITERS [MS]]  a thundering herd on PREFIX-herd for MS ms (default 8000): one process
 *                        keeps WAITERS (default 200) waiting POST /lock requests in flight with
 *                        libcurl multi, each unlocking at once when granted and asking again;
 *                        another holds the lock for 50 ms, unlocks and locks again. It ends
 *                        with a herd_done mark.
 * In pause, pause_locked and steal the late write must be 409 stale_token and the renew and
 * unlock 409 not_owner (the checker's invariant 4).
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

#include "history.h"

#define RESOURCES 3
#define WORKERS 4
#define CONTENDERS 2
#define CURL_GRACE_MS 6000        /* a request may take wait_ms + 5 s; we give up 1 s later */
#define FORGED_TOKEN 4000000000000000LL
#define LOCKED_HOLD_MS 15000 /* pause_locked: the next holder's lease, past the late ops */
#define LOCKED_LATE_MS 10000 /* pause_locked: how long it waits for them */
#define WD_TTL_MS 1000       /* watchdog: the holder's lease */
#define WD_RENEWS 2          /* watchdog: renewals before the holder is stopped or killed */
#define WD_READY_MS 10000    /* watchdog: how long the parent waits for those */
#define HERD_TTL_MS 1000     /* herd: the lease of a waiter that got the lock */
#define HERD_HOLD_MS 50      /* herd: how long the holder keeps the lock each time */

typedef enum run_mode {
    MODE_NONE,
    MODE_PAUSE,
    MODE_PAUSE_LOCKED,
    MODE_STEAL,
    MODE_WATCHDOG,
    MODE_HERD
} run_mode;

typedef struct conf {
    const char *url;
    const char *prefix;
    long ops;         /* lock attempts per process */
    int64_t deadline; /* CLOCK_MONOTONIC ns */
    run_mode mode;
    int redis_port;
    const char *redis_password;
    long herd_waiters;
    int64_t herd_deadline; /* CLOCK_MONOTONIC ns, set when the run starts */
    char stop_path[512];   /* the run ends early once this file exists */
} conf;

typedef struct client {
    char name[16];
    CURL *curl;
    int fd;
    uint64_t rng;
    long seq;
    long long last_token[RESOURCES]; /* contenders: the last token granted, for stale writes */
} client;

typedef struct reply {
    char body[4096];
    size_t len;
    long long header_token;
    long long etag;
} reply;

static uint64_t next_rand(client *c)
{
    c->rng ^= c->rng << 13;
    c->rng ^= c->rng >> 7;
    c->rng ^= c->rng << 17;
    return c->rng;
}

static long rand_between(client *c, long lo, long hi)
{
    return lo + (long)(next_rand(c) % (uint64_t)(hi - lo + 1));
}

/* True while the run should go on: within its limits and no stop file yet. */
static int running(const conf *cf, long i)
{
    return i < cf->ops && fh_now_ns() < cf->deadline && access(cf->stop_path, F_OK) != 0;
}

/* After an operation that got no answer or a 503, a short pause, so a client does not burn
 * its operation budget against a gateway or Redis that is down. A backoff, not a wait for
 * anything. */
static void back_off(const fh_op *op)
{
    struct timespec nap = {0, 20 * 1000000};
    if (op->status == 0 || op->status == 503)
        nanosleep(&nap, NULL);
}

static void resource_name(const conf *cf, int r, char *buf, size_t len)
{
    snprintf(buf, len, "%s-%d", cf->prefix, r);
}

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
    reply *rp = arg;
    size_t len = size * n;
    size_t room = sizeof rp->body - 1 - rp->len;
    memcpy(rp->body + rp->len, data, len < room ? len : room);
    rp->len += len < room ? len : room;
    rp->body[rp->len] = '\0';
    return len;
}

static size_t on_header(char *data, size_t size, size_t n, void *arg)
{
    reply *rp = arg;
    size_t len = size * n;
    char line[256];
    snprintf(line, sizeof line, "%.*s", (int)(len < 255 ? len : 255), data);
    if (strncasecmp(line, "Fencing-Token:", 14) == 0)
        rp->header_token = strtoll(line + 14, NULL, 10);
    else if (strncasecmp(line, "ETag:", 5) == 0)
        rp->etag = strtoll(line + 5 + strspn(line + 5, " \""), NULL, 10);
    return len;
}

static void append_line(int fd, const fh_op *op)
{
    char line[2048];
    int n = fh_format(op, line, sizeof line);
    if (n > 0 && write(fd, line, (size_t)n) != n)
        perror("fg_workload: history write");
}

/* Sets curl up for one request of op (its time limit is op's wait_ms + CURL_GRACE_MS) into
 * rp. body, if not NULL, must stay valid until the transfer is over. Returns the header
 * list, which the caller frees with curl_slist_free_all() after the transfer. */
static struct curl_slist *http_setup(CURL *curl, const conf *cf, const fh_op *op,
                                     const char *method, const char *path, const char *body,
                                     long long token, reply *rp)
{
    char url[512], hdr[64];
    struct curl_slist *headers = NULL;

    memset(rp, 0, sizeof *rp);
    snprintf(url, sizeof url, "%s%s", cf->url, path);
    curl_easy_reset(curl);
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, 2000L);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, op->wait_ms + CURL_GRACE_MS);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, rp);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, rp);
    if (body != NULL) {
        headers = curl_slist_append(headers, token > 0 ? "Content-Type: text/plain"
                                                       : "Content-Type: application/json");
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
    }
    if (token > 0) {
        snprintf(hdr, sizeof hdr, "Fencing-Token: %lld", token);
        headers = curl_slist_append(headers, hdr);
    }
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    return headers;
}

/* Fills op's status and error from the outcome rc of its transfer on curl. */
static void http_result(CURL *curl, CURLcode rc, fh_op *op)
{
    if (rc != CURLE_OK) {
        op->status = 0;
        snprintf(op->error, sizeof op->error, "curl%d", (int)rc);
        return;
    }
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    op->status = (int)status;
}

/* One HTTP request; fills op's times, status and error, and the reply. */
static void http(client *c, const conf *cf, fh_op *op, const char *method, const char *path,
                 const char *body, long long token, reply *rp)
{
    struct curl_slist *headers = http_setup(c->curl, cf, op, method, path, body, token, rp);
    op->start_ns = fh_now_ns();
    CURLcode rc = curl_easy_perform(c->curl);
    op->end_ns = fh_now_ns();
    curl_slist_free_all(headers);
    http_result(c->curl, rc, op);
}

/* Reads error, token and version out of a JSON answer into op. */
static void parse_json(const reply *rp, fh_op *op, int keep_token)
{
    json_error_t err;
    json_t *root = json_loadb(rp->body, rp->len, 0, &err);
    if (root == NULL)
        return;
    json_t *v = json_object_get(root, "error");
    if (json_is_string(v))
        snprintf(op->error, sizeof op->error, "%s", json_string_value(v));
    v = json_object_get(root, "token");
    if (json_is_integer(v) && !keep_token)
        op->token = json_integer_value(v);
    v = json_object_get(root, "version");
    if (json_is_integer(v))
        op->version = json_integer_value(v);
    json_decref(root);
}

static void op_init(fh_op *op, client *c, fh_kind kind, const char *resource, unsigned flags)
{
    memset(op, 0, sizeof *op);
    snprintf(op->client, sizeof op->client, "%s", c->name);
    snprintf(op->resource, sizeof op->resource, "%s", resource);
    op->kind = kind;
    op->flags = flags;
}

/* Fills op for a POST /lock of resource by a new owner of c's, and its JSON body. */
static void lock_op(fh_op *op, client *c, const char *resource, long ttl_ms, long wait_ms,
                    unsigned flags, char *body, size_t len)
{
    op_init(op, c, FH_LOCK, resource, flags);
    snprintf(op->owner, sizeof op->owner, "%s-%d-%ld", c->name, (int)getpid(), ++c->seq);
    op->ttl_ms = ttl_ms;
    op->wait_ms = wait_ms;
    snprintf(body, len, "{\"resource\":\"%s\",\"owner\":\"%s\",\"ttl_ms\":%ld,\"wait_ms\":%ld}",
             resource, op->owner, ttl_ms, wait_ms);
}

/* Fills op for a POST /renew or /unlock (kind) of grant's lock, and its JSON body. */
static void owner_op(fh_op *op, client *c, fh_kind kind, const fh_op *grant, unsigned flags,
                     char *body, size_t len)
{
    op_init(op, c, kind, grant->resource, flags);
    snprintf(op->owner, sizeof op->owner, "%s", grant->owner);
    op->token = grant->token;
    op->ttl_ms = kind == FH_RENEW ? grant->ttl_ms : 0;
    if (kind == FH_RENEW)
        snprintf(body, len, "{\"resource\":\"%s\",\"owner\":\"%s\",\"ttl_ms\":%ld}",
                 grant->resource, grant->owner, grant->ttl_ms);
    else
        snprintf(body, len, "{\"resource\":\"%s\",\"owner\":\"%s\"}", grant->resource,
                 grant->owner);
}

static const char *owner_path(fh_kind kind)
{
    return kind == FH_RENEW ? "/renew" : "/unlock";
}

static fh_op do_lock(client *c, const conf *cf, const char *resource, long ttl_ms,
                     long wait_ms, unsigned flags)
{
    fh_op op;
    reply rp;
    char body[512];
    lock_op(&op, c, resource, ttl_ms, wait_ms, flags, body, sizeof body);
    http(c, cf, &op, "POST", "/lock", body, 0, &rp);
    parse_json(&rp, &op, 0);
    append_line(c->fd, &op);
    return op;
}

static fh_op do_owner_call(client *c, const conf *cf, fh_kind kind, const fh_op *grant,
                           unsigned flags)
{
    fh_op op;
    reply rp;
    char body[512];
    owner_op(&op, c, kind, grant, flags, body, sizeof body);
    http(c, cf, &op, "POST", owner_path(kind), body, 0, &rp);
    parse_json(&rp, &op, kind != FH_RENEW);
    append_line(c->fd, &op);
    return op;
}

static fh_op do_write(client *c, const conf *cf, const char *resource, long long token,
                      const char *owner, unsigned flags)
{
    fh_op op;
    reply rp;
    char path[256];
    op_init(&op, c, FH_WRITE, resource, flags);
    snprintf(op.owner, sizeof op.owner, "%s", owner);
    op.token = token;
    snprintf(op.body, sizeof op.body, "%s:%d:%ld:%lld", c->name, (int)getpid(), ++c->seq, token);
    snprintf(path, sizeof path, "/resources/%s", resource);
    http(c, cf, &op, "PUT", path, op.body, token, &rp);
    parse_json(&rp, &op, 1);
    append_line(c->fd, &op);
    return op;
}

static void do_read(client *c, const conf *cf, const char *resource, fh_kind kind)
{
    fh_op op;
    reply rp;
    char path[256];
    op_init(&op, c, kind, resource, 0);
    snprintf(path, sizeof path, "/resources/%s", resource);
    http(c, cf, &op, "GET", path, NULL, 0, &rp);
    if (op.status == 200) {
        op.token = rp.header_token;
        op.version = rp.etag;
        snprintf(op.body, sizeof op.body, "%.*s", (int)sizeof op.body - 1, rp.body);
    } else {
        parse_json(&rp, &op, 0);
    }
    append_line(c->fd, &op);
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

/* Lock, write, maybe renew and read, unlock. Worker 0 of the pause modes is given report_fd
 * (it freezes on it after some grants) and, in pause_locked, done_fd: one byte there tells
 * the parent its late write, renew and unlock are over. In pause_locked, worker 0 freezes on
 * every fourth attempt, on a resource of its own (PREFIX-pl) that only it and the parent
 * use, so the parent is always the next holder and nobody writes in between. */
static void worker(client *c, const conf *cf, int report_fd, int done_fd)
{
    char resource[128];
    long grants = 0;
    for (long i = 0; running(cf, i); i++) {
        int own = report_fd >= 0 && cf->mode == MODE_PAUSE_LOCKED && i % 4 == 1;
        resource_name(cf, (int)rand_between(c, 0, RESOURCES - 1), resource, sizeof resource);
        if (own)
            snprintf(resource, sizeof resource, "%s-pl", cf->prefix);
        fh_op g = do_lock(c, cf, resource, rand_between(c, 300, 2000), rand_between(c, 0, 1500),
                          0);
        if (g.status != 200) {
            back_off(&g);
            continue;
        }
        unsigned flags = 0;
        if (report_fd >= 0 && (cf->mode == MODE_PAUSE_LOCKED ? own : ++grants % 4 == 2)) {
            freeze(report_fd, &g);
            flags = cf->mode == MODE_STEAL ? FH_F_AFTER_STEAL : FH_F_AFTER_PAUSE;
        }
        fh_op w = do_write(c, cf, resource, g.token, g.owner, flags);
        back_off(&w);
        if (flags != 0 || rand_between(c, 0, 2) == 0)
            do_owner_call(c, cf, FH_RENEW, &g, flags);
        if (rand_between(c, 0, 3) == 0)
            do_read(c, cf, resource, FH_READ);
        do_owner_call(c, cf, FH_UNLOCK, &g, flags);
        if (flags != 0 && done_fd >= 0 && write(done_fd, "d", 1) != 1)
            _exit(3);
    }
}

static void contender(client *c, const conf *cf)
{
    char resource[128];
    for (long i = 0; running(cf, i); i++) {
        int r = (int)rand_between(c, 0, RESOURCES - 1);
        long action = rand_between(c, 0, 99);
        resource_name(cf, r, resource, sizeof resource);
        if (action < 50) {
            fh_op g = do_lock(c, cf, resource, rand_between(c, 300, 2000),
                              rand_between(c, 0, 1500), 0);
            back_off(&g);
            if (g.status == 200) {
                c->last_token[r] = g.token;
                if (rand_between(c, 0, 1) == 0) /* else its lease runs out */
                    do_owner_call(c, cf, FH_UNLOCK, &g, 0);
            }
        } else if (action < 65) {
            do_write(c, cf, resource, FORGED_TOKEN + rand_between(c, 0, 1000000), "forger",
                     FH_F_FORGED);
        } else if (action < 80 && c->last_token[r] > 0) {
            do_write(c, cf, resource, c->last_token[r], "stale", FH_F_STALE);
        } else {
            do_read(c, cf, resource, FH_READ);
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
 * the worker's late write, renew and unlock are over. */
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
    fh_op g = do_lock(p, cf, resource, locked ? LOCKED_HOLD_MS : 5000,
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
    do_write(p, cf, resource, g.token, g.owner, 0);
    do_owner_call(p, cf, FH_UNLOCK, &g, 0);
    return rc;
}

static int open_history(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        fprintf(stderr, "fg_workload: %s: %s\n", path, strerror(errno));
    return fd;
}

static int client_init(client *c, const char *name, int fd, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    c->fd = fd;
    c->rng = seed * 2654435761u + 88172645463325252ull;
    c->curl = curl_easy_init();
    return c->curl != NULL ? 0 : -1;
}

/* Appends a mark (event) that names a resource, an owner and its ttl_ms to fd. */
static void holder_mark(int fd, const char *resource, const char *owner, long ttl_ms,
                        const char *event)
{
    fh_op op = {0};
    snprintf(op.client, sizeof op.client, "p");
    op.kind = FH_MARK;
    snprintf(op.resource, sizeof op.resource, "%s", resource);
    snprintf(op.owner, sizeof op.owner, "%s", owner);
    op.ttl_ms = ttl_ms;
    op.start_ns = op.end_ns = fh_now_ns();
    snprintf(op.body, sizeof op.body, "%s", event);
    append_line(fd, &op);
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
        fh_op r = do_owner_call(&a->c, a->cf, FH_RENEW, &a->grant, FH_F_WATCHDOG);
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

    if (client_init(&c, "wd", fd, seed) != 0 || client_init(&a.c, "wd", fd, seed + 1) != 0)
        _exit(1);
    a.cf = cf;
    a.ready_fd = ready_fd;
    a.grant = do_lock(&c, cf, resource, WD_TTL_MS, 5000, FH_F_WATCHDOG);
    if (a.grant.status != 200)
        _exit(4);
    do_write(&c, cf, resource, a.grant.token, a.grant.owner, FH_F_WATCHDOG);
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
    holder_mark(p->fd, resource, owner, WD_TTL_MS, frozen ? "holder_frozen" : "holder_killed");
    fh_op g = do_lock(p, cf, resource, 2000, WD_TTL_MS + 3000, 0);
    if (frozen) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
    }
    if (g.status == 200) {
        do_write(p, cf, resource, g.token, g.owner, 0);
        do_owner_call(p, cf, FH_UNLOCK, &g, 0);
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
        owner_op(&s->op, &s->c, FH_UNLOCK, &s->grant, FH_F_HERD, s->body, sizeof s->body);
    } else if (herd_going(cf)) {
        snprintf(resource, sizeof resource, "%s-herd", cf->prefix);
        lock_op(&s->op, &s->c, resource, HERD_TTL_MS, rand_between(&s->c, 1000, 4000), FH_F_HERD,
                s->body, sizeof s->body);
    } else {
        return 0;
    }
    const char *path = s->op.kind == FH_LOCK ? "/lock" : owner_path(s->op.kind);
    s->headers = http_setup(s->c.curl, cf, &s->op, "POST", path, s->body, 0, &s->rp);
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
    http_result(s->c.curl, rc, &s->op);
    parse_json(&s->rp, &s->op, s->op.kind != FH_LOCK);
    append_line(s->c.fd, &s->op);
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
        if (client_init(&slots[i].c, name, fd, seed + (uint64_t)i) != 0)
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
    holder_mark(fd, "-", "-", 0, "herd_done");
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
        fh_op g = do_lock(c, cf, resource, 2000, 5000, FH_F_HERD);
        back_off(&g);
        if (g.status != 200)
            continue;
        nanosleep(&hold, NULL); /* what the holder does with its lock: keep it 50 ms */
        do_owner_call(c, cf, FH_UNLOCK, &g, FH_F_HERD);
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
    if (client_init(&c, name, fd, seed + (uint64_t)i + 1) != 0)
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
    int fd = open_history(history);
    int pausing = cf->mode == MODE_PAUSE || cf->mode == MODE_PAUSE_LOCKED || cf->mode == MODE_STEAL;
    int clients = WORKERS + CONTENDERS + (cf->mode == MODE_HERD ? 2 : 0);
    long steals = 0, stops = 0, rounds = 0;
    client p;

    if (fd < 0)
        return 1;
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
    if (client_init(&p, "p", fd, seed) != 0)
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
    int fd = open_history(history);
    if (fd < 0 || client_init(&c, "final", fd, 1) != 0)
        return 1;
    for (int r = 0; r < RESOURCES; r++) {
        resource_name(cf, r, resource, sizeof resource);
        do_read(&c, cf, resource, FH_FINAL);
    }
    curl_easy_cleanup(c.curl);
    close(fd);
    return 0;
}

static int mark(const char *history, const char *event)
{
    fh_op op = {0};
    int fd = open_history(history);
    if (fd < 0)
        return 1;
    snprintf(op.client, sizeof op.client, "runner");
    op.kind = FH_MARK;
    op.start_ns = op.end_ns = fh_now_ns();
    snprintf(op.body, sizeof op.body, "%s", event);
    append_line(fd, &op);
    close(fd);
    return 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: fg_workload run URL HISTORY PREFIX OPS SECONDS SEED [MODE]\n"
                    "         MODE: pause [REDIS_PORT] | pause_locked [REDIS_PORT] |\n"
                    "               steal REDIS_PORT [PASSWORD] | watchdog | herd [WAITERS [MS]]\n"
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
                 {"herd", MODE_HERD, 0, 2}};
    long herd_ms = 8000;
    if (n == 0)
        return 0;
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        if (strcmp(args[0], modes[i].name) != 0)
            continue;
        if (n - 1 < modes[i].min_args || n - 1 > modes[i].max_args)
            return -1;
        cf->mode = modes[i].mode;
        if (cf->mode == MODE_HERD) {
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
