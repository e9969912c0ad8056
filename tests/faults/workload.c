/*
 * fg_workload: the fault suite's clients. Forks 4 workers (lock, write, maybe renew and read,
 * unlock) and 2 contenders (waiting locks left to expire, stale and forged writes, reads) on
 * 3 resources, each a separate process with its own libcurl handle talking HTTP to the real
 * gateway, and appends one history line (history.h) per operation to one file.
 *
 *   fg_workload run URL HISTORY PREFIX OPS SECONDS SEED [pause|steal REDIS_PORT [PASSWORD]]
 *   fg_workload final URL HISTORY PREFIX     reads the 3 resources once more ("final")
 *   fg_workload mark HISTORY EVENT           appends a mark (EVENT "heal": the fault is over)
 *   fg_workload now                          prints CLOCK_MONOTONIC in ms
 *
 * The run also ends as soon as the file HISTORY.stop exists (the scenario runner's signal that
 * its faults are done).
 * OPS bounds the lock attempts of all clients together, SECONDS the run. With pause, worker 0
 * stops itself with SIGSTOP right after some grants; this parent then takes the same lock
 * (waiting for the lease to run out), writes with its newer token and unlocks, and only then
 * sends SIGCONT, so the frozen worker writes, renews and unlocks late. With steal, the parent
 * instead deletes fg:{R}:lock (DEL or PEXPIRE 1, alternately) in Redis under the frozen
 * worker before taking the lock. Either way the late write must be 409 stale_token and the
 * renew and unlock 409 not_owner (the checker's invariant 4).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
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

typedef enum pause_mode { PAUSE_NONE, PAUSE_EXPIRE, PAUSE_STEAL } pause_mode;

typedef struct conf {
    const char *url;
    const char *prefix;
    long ops;         /* lock attempts per process */
    int64_t deadline; /* CLOCK_MONOTONIC ns */
    pause_mode pause;
    int redis_port;
    const char *redis_password;
    char stop_path[512]; /* the run ends early once this file exists */
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

/* One HTTP request; fills op's times, status and error, and the reply. */
static void http(client *c, const conf *cf, fh_op *op, const char *method, const char *path,
                 const char *body, long long token, reply *rp)
{
    char url[512], hdr[64];
    struct curl_slist *headers = NULL;

    memset(rp, 0, sizeof *rp);
    snprintf(url, sizeof url, "%s%s", cf->url, path);
    curl_easy_reset(c->curl);
    curl_easy_setopt(c->curl, CURLOPT_URL, url);
    curl_easy_setopt(c->curl, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c->curl, CURLOPT_CONNECTTIMEOUT_MS, 2000L);
    curl_easy_setopt(c->curl, CURLOPT_TIMEOUT_MS, op->wait_ms + CURL_GRACE_MS);
    curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, rp);
    curl_easy_setopt(c->curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c->curl, CURLOPT_HEADERDATA, rp);
    if (body != NULL) {
        headers = curl_slist_append(headers, token > 0 ? "Content-Type: text/plain"
                                                       : "Content-Type: application/json");
        curl_easy_setopt(c->curl, CURLOPT_POSTFIELDS, body);
    }
    if (token > 0) {
        snprintf(hdr, sizeof hdr, "Fencing-Token: %lld", token);
        headers = curl_slist_append(headers, hdr);
    }
    curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, headers);
    op->start_ns = fh_now_ns();
    CURLcode rc = curl_easy_perform(c->curl);
    op->end_ns = fh_now_ns();
    curl_slist_free_all(headers);
    if (rc != CURLE_OK) {
        op->status = 0;
        snprintf(op->error, sizeof op->error, "curl%d", (int)rc);
        return;
    }
    long status = 0;
    curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &status);
    op->status = (int)status;
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

static fh_op do_lock(client *c, const conf *cf, const char *resource, long ttl_ms,
                     long wait_ms)
{
    fh_op op;
    reply rp;
    char body[512];
    op_init(&op, c, FH_LOCK, resource, 0);
    snprintf(op.owner, sizeof op.owner, "%s-%d-%ld", c->name, (int)getpid(), ++c->seq);
    op.ttl_ms = ttl_ms;
    op.wait_ms = wait_ms;
    snprintf(body, sizeof body, "{\"resource\":\"%s\",\"owner\":\"%s\",\"ttl_ms\":%ld,\"wait_ms\":%ld}",
             resource, op.owner, ttl_ms, wait_ms);
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
    op_init(&op, c, kind, grant->resource, flags);
    snprintf(op.owner, sizeof op.owner, "%s", grant->owner);
    op.token = grant->token;
    op.ttl_ms = kind == FH_RENEW ? grant->ttl_ms : 0;
    if (kind == FH_RENEW)
        snprintf(body, sizeof body, "{\"resource\":\"%s\",\"owner\":\"%s\",\"ttl_ms\":%ld}",
                 grant->resource, grant->owner, grant->ttl_ms);
    else
        snprintf(body, sizeof body, "{\"resource\":\"%s\",\"owner\":\"%s\"}", grant->resource,
                 grant->owner);
    http(c, cf, &op, "POST", kind == FH_RENEW ? "/renew" : "/unlock", body, 0, &rp);
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

static void worker(client *c, const conf *cf, int report_fd)
{
    char resource[128];
    long grants = 0;
    for (long i = 0; running(cf, i); i++) {
        resource_name(cf, (int)rand_between(c, 0, RESOURCES - 1), resource, sizeof resource);
        fh_op g = do_lock(c, cf, resource, rand_between(c, 300, 2000), rand_between(c, 0, 1500));
        if (g.status != 200) {
            back_off(&g);
            continue;
        }
        unsigned flags = 0;
        if (report_fd >= 0 && ++grants % 4 == 2) {
            freeze(report_fd, &g);
            flags = cf->pause == PAUSE_STEAL ? FH_F_AFTER_STEAL : FH_F_AFTER_PAUSE;
        }
        fh_op w = do_write(c, cf, resource, g.token, g.owner, flags);
        back_off(&w);
        if (flags != 0 || rand_between(c, 0, 2) == 0)
            do_owner_call(c, cf, FH_RENEW, &g, flags);
        if (rand_between(c, 0, 3) == 0)
            do_read(c, cf, resource, FH_READ);
        do_owner_call(c, cf, FH_UNLOCK, &g, flags);
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
                              rand_between(c, 0, 1500));
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

/* The parent's part when worker 0 froze itself: become the next holder and write. */
static void next_holder(client *p, const conf *cf, int report_fd, long *steals)
{
    char msg[256] = "", resource[160];
    long long token = 0;
    long ttl_ms = 0;
    ssize_t n = read(report_fd, msg, sizeof msg - 1);
    if (n <= 0 || sscanf(msg, "%159s %lld %ld", resource, &token, &ttl_ms) != 3) {
        fprintf(stderr, "fg_workload: no report from the frozen worker\n");
        return;
    }
    if (cf->pause == PAUSE_STEAL)
        steal(cf, resource, (*steals)++ % 2 == 0);
    fh_op g = do_lock(p, cf, resource, 5000, cf->pause == PAUSE_STEAL ? 3000 : ttl_ms + 3000);
    if (g.status != 200)
        return;
    do_write(p, cf, resource, g.token, g.owner, 0);
    do_owner_call(p, cf, FH_UNLOCK, &g, 0);
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

static int run(const conf *cf, const char *history, uint64_t seed)
{
    pid_t pids[WORKERS + CONTENDERS];
    int report[2] = {-1, -1};
    int fd = open_history(history);
    long steals = 0, stops = 0;
    client p;

    if (fd < 0)
        return 1;
    if (cf->pause != PAUSE_NONE && pipe(report) != 0)
        return 1;
    for (int i = 0; i < WORKERS + CONTENDERS; i++) {
        pids[i] = fork();
        if (pids[i] < 0) {
            perror("fork");
            return 1;
        }
        if (pids[i] > 0)
            continue;
        client c;
        char name[16];
        snprintf(name, sizeof name, i < WORKERS ? "w%d" : "c%d", i < WORKERS ? i : i - WORKERS);
        if (client_init(&c, name, fd, seed + (uint64_t)i + 1) != 0)
            _exit(1);
        if (i < WORKERS)
            worker(&c, cf, i == 0 ? report[1] : -1);
        else
            contender(&c, cf);
        curl_easy_cleanup(c.curl);
        _exit(0);
    }
    if (client_init(&p, "p", fd, seed) != 0)
        return 1;
    int left = WORKERS + CONTENDERS, failed = 0;
    int64_t kill_at = cf->deadline + 30 * 1000000000LL;
    while (left > 0) {
        int st = 0;
        pid_t pid = waitpid(-1, &st, WUNTRACED | WNOHANG);
        if (pid == 0) {
            if (fh_now_ns() > kill_at) {
                fprintf(stderr, "fg_workload: clients still running 30 s after the limit\n");
                for (int i = 0; i < WORKERS + CONTENDERS; i++)
                    kill(pids[i], SIGKILL);
                kill_at = INT64_MAX;
                failed = 1;
            }
            struct timespec nap = {0, 10 * 1000000};
            nanosleep(&nap, NULL); /* polling for children, bounded by kill_at */
            continue;
        }
        if (pid < 0)
            break;
        if (WIFSTOPPED(st)) {
            stops++;
            next_holder(&p, cf, report[0], &steals);
            kill(pid, SIGCONT);
            continue;
        }
        left--;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            failed = 1;
    }
    curl_easy_cleanup(p.curl);
    close(fd);
    fprintf(stderr, "fg_workload: clients done (%ld freezes)\n", stops);
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
    fprintf(stderr, "usage: fg_workload run URL HISTORY PREFIX OPS SECONDS SEED "
                    "[pause|steal REDIS_PORT [PASSWORD]]\n"
                    "       fg_workload final URL HISTORY PREFIX\n"
                    "       fg_workload mark HISTORY EVENT\n"
                    "       fg_workload now\n");
    return 2;
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
        if (argc >= 10) {
            cf.pause = strcmp(argv[8], "steal") == 0 ? PAUSE_STEAL : PAUSE_EXPIRE;
            cf.redis_port = (int)strtol(argv[9], NULL, 10);
            cf.redis_password = argc >= 11 ? argv[10] : NULL;
        }
        rc = run(&cf, argv[3], strtoull(argv[7], NULL, 10));
    } else {
        rc = usage();
    }
    curl_global_cleanup();
    return rc;
}
