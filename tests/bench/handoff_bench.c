/*
 * handoff_bench: the "Waiting at scale" figures. A program that prints figures,
 * not a test: nothing here passes or fails on timing.
 *
 * It starts its own redis-server (tests/common/harness.h) and the real fencegate binary on
 * free loopback ports, and speaks HTTP/1.1 to the gateway through one single-threaded epoll
 * client over non-blocking sockets, so that it can hold 10,000 parked POST /lock requests
 * without a thread each. It measures:
 *   1. hand-off latency: from sending the holder's POST /unlock to receiving the 200 of the
 *      next parked waiter's POST /lock, with 1 (200 rounds, a fresh waiter parked each
 *      round), 100 and 1,000 waiters parked on one resource;
 *   2. Redis script calls (INFO commandstats, EVALSHA + EVAL) per release over the chain of
 *      1,000 waiters;
 *   3. the gateway's VmRSS with 0 and with 10,000 parked waiters, and that SIGTERM answers
 *      each of them 503 and the gateway exits 0.
 * 1 and 2 run with Redis AOF off, then again with appendfsync always; 3 runs once (AOF off).
 * Every phase gives up with a message after PHASE_LIMIT_MS.
 *
 * Usage: handoff_bench [--fencegate PATH] [--no-aof-run]
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "compare_procs.h"
#include "harness.h"

#ifndef FENCEGATE_BIN
#define FENCEGATE_BIN "fencegate"
#endif
#ifndef HB_BUILD_TYPE
#define HB_BUILD_TYPE "unknown"
#endif

#define PHASE_LIMIT_MS 120000 /* every phase gives up after this */
#define WAITER_WAIT_MS 60000  /* wait_ms of each parked /lock */
#define WAITER_TTL_MS 30000
#define HOLDER_TTL_MS 300000  /* the first holder outlasts the parking of 10,000 waiters */
#define ONE_WAITER_ROUNDS 200
#define MEM_WAITERS 10000
#define MAX_WRITING 256       /* connects and request writes in flight while parking */
#define IN_CAP 2048
#define OUT_CAP 640

/* ---- Errors and time ------------------------------------------------------------------ */

static char g_err[1024];

/* Records why the run stops; returns -1 so that callers can `return fail(...)`. */
static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    return -1;
}

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int64_t phase_deadline(void)
{
    return now_us() + (int64_t)PHASE_LIMIT_MS * 1000;
}

static int set_nonblocking(int fd)
{
    int fl = fcntl(fd, F_GETFL, 0);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* ---- The epoll HTTP/1.1 client ------------------------------------------------------- */

enum { HC_CONNECTING, HC_SENDING, HC_AWAITING, HC_IDLE, HC_CLOSED };

typedef struct hconn {
    int fd;
    int state;
    int queued;          /* on the client's done list */
    int status;          /* status of the response not yet taken, 0 if none, -1 garbage */
    int last_status;     /* of the last response ever, kept after it is taken */
    int64_t answered_us; /* when the last response was complete */
    size_t out_len, out_off;
    size_t in_len;
    char owner[64];
    char out[OUT_CAP];
    char in[IN_CAP];
} hconn;

typedef struct hclient {
    int epfd;
    int port;
    size_t writing;      /* connections still connecting or writing their request */
    hconn **done;        /* answered or closed since the phase last looked */
    size_t done_len, done_cap;
} hclient;

static int hc_init(hclient *c, int port)
{
    memset(c, 0, sizeof *c);
    c->port = port;
    c->epfd = epoll_create1(0);
    return c->epfd < 0 ? fail("epoll_create1: %s", strerror(errno)) : 0;
}

static void hc_push_done(hclient *c, hconn *h)
{
    if (h->queued) {
        return;
    }
    if (c->done_len == c->done_cap) {
        size_t cap = c->done_cap == 0 ? 1024 : c->done_cap * 2;
        hconn **grown = realloc(c->done, cap * sizeof *grown);
        if (grown == NULL) {
            fprintf(stderr, "handoff_bench: out of memory\n");
            exit(1);
        }
        c->done = grown;
        c->done_cap = cap;
    }
    h->queued = 1;
    c->done[c->done_len++] = h;
}

/* Takes one answered or closed connection off the done list, or NULL. */
static hconn *hc_take(hclient *c)
{
    if (c->done_len == 0) {
        return NULL;
    }
    hconn *h = c->done[--c->done_len];
    h->queued = 0;
    return h;
}

static void hc_mark_closed(hclient *c, hconn *h)
{
    if (h->state == HC_CONNECTING || h->state == HC_SENDING) {
        c->writing--;
    }
    if (h->fd >= 0) {
        epoll_ctl(c->epfd, EPOLL_CTL_DEL, h->fd, NULL);
        close(h->fd);
        h->fd = -1;
    }
    h->state = HC_CLOSED;
    hc_push_done(c, h);
}

/* Closes (if still open) and frees h. h must not be on the done list. */
static void hc_free_conn(hclient *c, hconn *h)
{
    if (h == NULL) {
        return;
    }
    if (h->state == HC_CONNECTING || h->state == HC_SENDING) {
        c->writing--;
    }
    if (h->fd >= 0) {
        epoll_ctl(c->epfd, EPOLL_CTL_DEL, h->fd, NULL);
        close(h->fd);
    }
    free(h);
}

static void hc_destroy(hclient *c)
{
    if (c->epfd >= 0) {
        close(c->epfd);
    }
    free(c->done);
    memset(c, 0, sizeof *c);
    c->epfd = -1;
}

/* Returns 1 when buf holds one complete response (status and its total length set), 0 when
 * more bytes are needed, -1 when it is not HTTP. */
static int parse_response(const char *buf, size_t len, int *status, size_t *total)
{
    size_t head = 0;
    long long clen = 0;

    for (size_t i = 0; i + 3 < len; i++) {
        if (memcmp(buf + i, "\r\n\r\n", 4) == 0) {
            head = i + 4;
            break;
        }
    }
    if (head == 0) {
        return 0;
    }
    if (sscanf(buf, "HTTP/1.%*d %d", status) != 1) {
        return -1;
    }
    for (const char *p = strstr(buf, "\r\n"); p != NULL && p < buf + head;
         p = strstr(p + 2, "\r\n")) {
        if (strncasecmp(p + 2, "Content-Length:", 15) == 0) {
            clen = strtoll(p + 2 + 15, NULL, 10);
        }
    }
    if (clen < 0 || len < head + (size_t)clen) {
        return 0;
    }
    *total = head + (size_t)clen;
    return 1;
}

static void hc_on_writable(hclient *c, hconn *h)
{
    if (h->state == HC_CONNECTING) {
        int err = 0;
        socklen_t elen = sizeof err;
        if (getsockopt(h->fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0 || err != 0) {
            h->status = -1;
            hc_mark_closed(c, h);
            return;
        }
        h->state = HC_SENDING;
    }
    while (h->state == HC_SENDING && h->out_off < h->out_len) {
        ssize_t n = write(h->fd, h->out + h->out_off, h->out_len - h->out_off);
        if (n > 0) {
            h->out_off += (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return;
        } else {
            h->status = -1;
            hc_mark_closed(c, h);
            return;
        }
    }
    if (h->state == HC_SENDING) {
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = h};
        h->state = HC_AWAITING;
        c->writing--;
        epoll_ctl(c->epfd, EPOLL_CTL_MOD, h->fd, &ev);
    }
}

static void hc_on_readable(hclient *c, hconn *h)
{
    int eof = 0;
    for (;;) {
        if (h->in_len + 1 >= IN_CAP) {
            eof = 1; /* a response this large is not one of ours */
            break;
        }
        ssize_t n = read(h->fd, h->in + h->in_len, IN_CAP - 1 - h->in_len);
        if (n > 0) {
            h->in_len += (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            break;
        } else {
            eof = 1;
            break;
        }
    }
    h->in[h->in_len] = '\0';
    int status = 0;
    size_t total = 0;
    int rc = parse_response(h->in, h->in_len, &status, &total);
    if (rc == 1) {
        h->status = status;
        h->last_status = status;
        h->answered_us = now_us();
        /* One request in flight per connection: nothing should follow the response. */
        h->in_len = 0;
        if (h->state == HC_AWAITING) {
            h->state = HC_IDLE;
        }
        hc_push_done(c, h);
    } else if (rc < 0) {
        h->status = -1;
        eof = 1;
    }
    if (eof) {
        hc_mark_closed(c, h);
    }
}

/* Waits up to timeout_ms for socket events and handles them all. Returns 0 or -1. */
static int hc_pump(hclient *c, int timeout_ms)
{
    struct epoll_event evs[256];
    int n = epoll_wait(c->epfd, evs, 256, timeout_ms);
    if (n < 0) {
        return errno == EINTR ? 0 : fail("epoll_wait: %s", strerror(errno));
    }
    for (int i = 0; i < n; i++) {
        hconn *h = evs[i].data.ptr;
        if (h->state == HC_CLOSED) {
            continue;
        }
        if ((evs[i].events & EPOLLOUT) != 0) {
            hc_on_writable(c, h);
        }
        if (h->state != HC_CLOSED &&
            (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) {
            hc_on_readable(c, h);
        }
    }
    return 0;
}

/* A POST of the JSON body, or a GET when body is NULL. */
static void format_request(hconn *h, const char *path, const char *body)
{
    int n = body == NULL
                ? snprintf(h->out, sizeof h->out, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                           path)
                : snprintf(h->out, sizeof h->out,
                           "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                           "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                           path, strlen(body), body);
    h->out_len = n > 0 && (size_t)n < sizeof h->out ? (size_t)n : 0;
    h->out_off = 0;
}

/* Opens a keep-alive connection and queues a POST of body (a GET when NULL) on it; it is
 * written once connected. Returns the connection (freed by hc_free_conn) or NULL with g_err
 * set. */
static hconn *hc_open(hclient *c, const char *owner, const char *path, const char *body)
{
    struct sockaddr_in a;
    struct epoll_event ev;
    hconn *h = calloc(1, sizeof *h);

    if (h == NULL) {
        fail("out of memory");
        return NULL;
    }
    snprintf(h->owner, sizeof h->owner, "%s", owner);
    format_request(h, path, body);
    h->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (h->fd < 0 || set_nonblocking(h->fd) != 0) {
        fail("socket: %s", strerror(errno));
        goto err;
    }
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)c->port);
    if (connect(h->fd, (struct sockaddr *)&a, sizeof a) != 0 && errno != EINPROGRESS) {
        fail("connect 127.0.0.1:%d: %s", c->port, strerror(errno));
        goto err;
    }
    ev.events = EPOLLOUT | EPOLLIN | EPOLLRDHUP;
    ev.data.ptr = h;
    if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, h->fd, &ev) != 0) {
        fail("epoll_ctl: %s", strerror(errno));
        goto err;
    }
    h->state = HC_CONNECTING;
    c->writing++;
    return h;
err:
    if (h->fd >= 0) {
        close(h->fd);
    }
    free(h);
    return NULL;
}

/* Sends a POST of body (a GET when NULL) on an idle connection, writing what the socket
 * takes now. Returns 0 or -1. */
static int hc_send(hclient *c, hconn *h, const char *path, const char *body)
{
    if (h->state != HC_IDLE) {
        return fail("connection of %s is not idle (closed by the gateway?)", h->owner);
    }
    format_request(h, path, body);
    h->last_status = 0; /* the answer to this request is still to come */
    h->state = HC_SENDING;
    c->writing++;
    hc_on_writable(c, h);
    if (h->state == HC_SENDING) {
        struct epoll_event ev = {.events = EPOLLOUT | EPOLLIN | EPOLLRDHUP, .data.ptr = h};
        epoll_ctl(c->epfd, EPOLL_CTL_MOD, h->fd, &ev);
    }
    return 0;
}

/* ---- One-shot blocking requests (/readyz) -------------------------------------------- */

/* GET path on a fresh blocking connection with 2 s timeouts, "Connection: close", read to
 * EOF. Returns the status (the whole response, NUL-terminated, in resp) or -1. */
static int http_get_once(int port, const char *path, char *resp, size_t resplen)
{
    struct sockaddr_in a;
    struct timeval tv = {2, 0};
    char req[256];
    size_t len = 0;
    int status = -1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    resp[0] = '\0';
    if (fd < 0) {
        return -1;
    }
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    int n = snprintf(req, sizeof req,
                     "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", path);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 || write(fd, req, (size_t)n) != n) {
        goto out;
    }
    for (;;) {
        ssize_t got = read(fd, resp + len, resplen - 1 - len);
        if (got > 0) {
            len += (size_t)got;
            if (len + 1 < resplen) {
                continue;
            }
        } else if (got < 0 && errno == EINTR) {
            continue;
        }
        break;
    }
    resp[len] = '\0';
    if (sscanf(resp, "HTTP/1.%*d %d", &status) != 1) {
        status = -1;
    }
out:
    close(fd);
    return status;
}

/* ---- The gateway process -------------------------------------------------------------- */

typedef struct gateway {
    pid_t pid;             /* 0 when not running */
    int port;
    char dir[256];
    char log[320];
    int exit_code;         /* after gw_stop: its exit status, or 128+signal */
    int64_t stop_ms;       /* how long it took to exit after SIGTERM */
} gateway;

/* Prints the end of the gateway's log, to explain a failure. */
static void print_log_tail(const char *path)
{
    char buf[2049];
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, size > 2048 ? size - 2048 : 0, SEEK_SET);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    fprintf(stderr, "---- end of %s ----\n%s\n----\n", path, buf);
}

/* Reaps the gateway if it has exited. Returns 1 when it has, 0 while it runs. */
static int gw_reaped(gateway *g)
{
    int st = 0;
    if (g->pid <= 0) {
        return 1;
    }
    if (waitpid(g->pid, &st, WNOHANG) != g->pid) {
        return 0;
    }
    g->exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    g->pid = 0;
    return 1;
}

/* Starts bin on a free loopback port with a temp --data dir, its output in DIR/gateway.log,
 * and waits (bounded) until /readyz answers 200. Returns 0 or -1. */
static int gw_start(gateway *g, const char *bin, const char *redis_url)
{
    char data[300], listen_addr[64], resp[4096];

    memset(g, 0, sizeof *g);
    th_tempdir(g->dir, sizeof g->dir, "hb-gw");
    snprintf(data, sizeof data, "%s/data", g->dir);
    snprintf(g->log, sizeof g->log, "%s/gateway.log", g->dir);
    g->port = th_free_port();
    snprintf(listen_addr, sizeof listen_addr, "127.0.0.1:%d", g->port);
    pid_t pid = fork();
    if (pid < 0) {
        return fail("fork: %s", strerror(errno));
    }
    if (pid == 0) {
        int fd = open(g->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        unsetenv("FENCEGATE_AUTH_TOKEN_FILE");
        execl(bin, bin, "--listen", listen_addr, "--redis", redis_url, "--data", data,
              "--max-connections", "20000", "--max-connections-per-address", "0",
              (char *)NULL); /* every waiter is 127.0.0.1 */
        fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
        _exit(127);
    }
    g->pid = pid;
    int64_t deadline = now_us() + 15 * 1000000LL;
    while (http_get_once(g->port, "/readyz", resp, sizeof resp) != 200) {
        if (gw_reaped(g)) {
            print_log_tail(g->log);
            return fail("fencegate (%s) exited with %d before it was ready", bin, g->exit_code);
        }
        if (now_us() > deadline) {
            print_log_tail(g->log);
            return fail("fencegate did not answer /readyz 200 within 15 s");
        }
        th_nap_ms(20);
    }
    return 0;
}

/* Sends SIGTERM (if not sent yet), waits up to timeout_ms, then SIGKILL. Removes the temp
 * dir. Safe to call on a gateway that was never started. */
static void gw_stop(gateway *g, int timeout_ms, int term_sent)
{
    if (g->pid > 0) {
        int64_t start = now_us(), deadline = start + (int64_t)timeout_ms * 1000;
        if (!term_sent) {
            kill(g->pid, SIGTERM);
        }
        while (!gw_reaped(g) && now_us() < deadline) {
            th_nap_ms(10);
        }
        if (g->pid > 0) {
            fprintf(stderr, "handoff_bench: fencegate did not exit within %d ms; SIGKILL\n",
                    timeout_ms);
            kill(g->pid, SIGKILL);
            waitpid(g->pid, NULL, 0);
            g->pid = 0;
            g->exit_code = 128 + SIGKILL;
        }
        g->stop_ms = (now_us() - start) / 1000;
    }
    if (g->dir[0] != '\0') {
        th_rmtree(g->dir);
        g->dir[0] = '\0';
    }
}

/* VmRSS of pid in KiB, or -1. */
static long long read_rss_kib(pid_t pid)
{
    char path[64], line[256];
    long long kib = -1;
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return -1;
    }
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "VmRSS:", 6) == 0) {
            kib = strtoll(line + 6, NULL, 10);
        }
    }
    fclose(f);
    return kib;
}

/* Copies redis_version from INFO server into buf ("?" when unknown). */
static void redis_version(const th_redis *r, char *buf, size_t len)
{
    static char info[16 * 1024];
    const char *key = "redis_version:";

    snprintf(buf, len, "?");
    if (th_redis_cmd(r, info, sizeof info, "INFO server") != 0) {
        return;
    }
    const char *p = strstr(info, key);
    if (p != NULL) {
        p += strlen(key);
        snprintf(buf, len, "%.*s", (int)strcspn(p, "\r\n"), p);
    }
}

/* ---- Samples -------------------------------------------------------------------------- */

typedef struct samples {
    double *ms;
    size_t len, cap;
} samples;

static void samples_add(samples *s, double ms)
{
    if (s->len == s->cap) {
        size_t cap = s->cap == 0 ? 256 : s->cap * 2;
        double *grown = realloc(s->ms, cap * sizeof *grown);
        if (grown == NULL) {
            fprintf(stderr, "handoff_bench: out of memory\n");
            exit(1);
        }
        s->ms = grown;
        s->cap = cap;
    }
    s->ms[s->len++] = ms;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile (pct in 1..100) of the samples; sorts them. 0 when empty. */
static double percentile(samples *s, int pct)
{
    if (s->len == 0) {
        return 0;
    }
    qsort(s->ms, s->len, sizeof *s->ms, cmp_double);
    size_t rank = ((size_t)pct * s->len + 99) / 100;
    return s->ms[rank > 0 ? rank - 1 : 0];
}

/* ---- The bench ------------------------------------------------------------------------ */

typedef struct chain_result {
    int waiters;
    samples handoff;       /* send unlock -> next waiter's 200 */
    samples unlock;        /* send unlock -> its own 200 (a reference) */
    long long calls;       /* script calls over the chain, -1 when not measured */
    long long releases;
} chain_result;

typedef struct config_result {
    int ran;
    chain_result chain[3]; /* 1, 100 and 1,000 waiters */
} config_result;

typedef struct mem_result {
    int ran;
    int reuse;             /* each waiter on a connection that served a request first */
    long long rss0_kib, rss1_kib;
    int waiters;
    int answered_503, answered_other, closed_unanswered;
    int exit_code;
    int64_t stop_ms;
} mem_result;

typedef struct bench {
    const char *bin;
    th_redis redis;        /* pid 0 when not running */
    gateway gw;
    hclient client;
    unsigned long seq;     /* makes resource and owner names unique */
    char redis_version[32];
} bench;

static void lock_body(char *buf, size_t len, const char *resource, const char *owner,
                      int ttl_ms, int wait_ms)
{
    snprintf(buf, len, "{\"resource\":\"%s\",\"owner\":\"%s\",\"ttl_ms\":%d,\"wait_ms\":%d}",
             resource, owner, ttl_ms, wait_ms);
}

static void unlock_body(char *buf, size_t len, const char *resource, const char *owner)
{
    snprintf(buf, len, "{\"resource\":\"%s\",\"owner\":\"%s\"}", resource, owner);
}

/* Waits until conn has an answer (or closes), bounded by deadline. Returns 0 or -1. */
static int await_answer(bench *b, hconn *h, int64_t deadline, const char *what)
{
    while (!h->queued) {
        if (now_us() > deadline) {
            return fail("%s: no answer within %d s", what, PHASE_LIMIT_MS / 1000);
        }
        if (hc_pump(&b->client, 10) != 0) {
            return -1;
        }
    }
    /* Nothing else is in flight while this is used: empty the done list. */
    while (hc_take(&b->client) != NULL) {
    }
    return 0;
}

/* Takes the lock on resource without waiting; returns the holder's connection or NULL. */
static hconn *take_lock(bench *b, const char *resource, int64_t deadline)
{
    char owner[64], body[512];
    snprintf(owner, sizeof owner, "hb-%d-holder-%lu", (int)getpid(), b->seq++);
    lock_body(body, sizeof body, resource, owner, HOLDER_TTL_MS, 0);
    hconn *h = hc_open(&b->client, owner, "/lock", body);
    if (h == NULL || await_answer(b, h, deadline, "the first POST /lock") != 0) {
        hc_free_conn(&b->client, h);
        return NULL;
    }
    if (h->status != 200) {
        fail("the first POST /lock answered %d: %s", h->status, h->in);
        hc_free_conn(&b->client, h);
        return NULL;
    }
    h->status = 0;
    return h;
}

/* Pumps the client until fewer than MAX_WRITING connections are connecting or writing. */
static int throttle(bench *b, int64_t deadline, const char *what)
{
    while (b->client.writing >= MAX_WRITING) {
        if (now_us() > deadline) {
            return fail("%s: connections still not written after %d s", what,
                        PHASE_LIMIT_MS / 1000);
        }
        if (hc_pump(&b->client, 5) != 0) {
            return -1;
        }
    }
    return 0;
}

/* Opens n keep-alive connections into out[] and completes one GET /healthz on each, so that
 * each has served a request before it carries a waiter. Returns 0 or -1. */
static int warm_connections(bench *b, int n, hconn **out, int64_t deadline)
{
    int answered = 0;
    for (int i = 0; i < n; i++) {
        if (throttle(b, deadline, "opening connections") != 0) {
            return -1;
        }
        out[i] = hc_open(&b->client, "healthz", "/healthz", NULL);
        if (out[i] == NULL) {
            return -1;
        }
    }
    while (answered < n) {
        if (now_us() > deadline) {
            return fail("GET /healthz: %d of %d answered after %d s", answered, n,
                        PHASE_LIMIT_MS / 1000);
        }
        if (hc_pump(&b->client, 10) != 0) {
            return -1;
        }
        for (hconn *h = hc_take(&b->client); h != NULL; h = hc_take(&b->client)) {
            if (h->status != 200 || h->state == HC_CLOSED) {
                return fail("GET /healthz answered %d%s", h->status,
                            h->state == HC_CLOSED ? " and closed" : "");
            }
            h->status = 0;
            answered++;
        }
    }
    return 0;
}

/* Sends n waiting POST /lock requests on resource, at most MAX_WRITING connecting at once:
 * on out[i] when it is an idle connection already, else on a new one stored there.
 * Returns 0 or -1. */
static int park_waiters(bench *b, const char *resource, int n, hconn **out, int64_t deadline)
{
    char owner[64], body[512];
    for (int i = 0; i < n; i++) {
        if (out[i] != NULL) {
            snprintf(out[i]->owner, sizeof out[i]->owner, "hb-%d-w-%lu", (int)getpid(),
                     b->seq++);
            lock_body(body, sizeof body, resource, out[i]->owner, WAITER_TTL_MS,
                      WAITER_WAIT_MS);
            if (hc_send(&b->client, out[i], "/lock", body) != 0) {
                return -1;
            }
            continue;
        }
        if (throttle(b, deadline, "parking waiters") != 0) {
            return -1;
        }
        snprintf(owner, sizeof owner, "hb-%d-w-%lu", (int)getpid(), b->seq++);
        lock_body(body, sizeof body, resource, owner, WAITER_TTL_MS, WAITER_WAIT_MS);
        out[i] = hc_open(&b->client, owner, "/lock", body);
        if (out[i] == NULL) {
            return -1;
        }
    }
    return 0;
}

/* Polls /metrics until the fencegate_waiters gauge equals want, pumping the client between
 * polls. A parked waiter answered meanwhile is a failure. Returns 0 or -1. */
static int await_gauge(bench *b, long long want, int64_t deadline)
{
    long long seen = -1;
    for (;;) {
        if (hc_pump(&b->client, 0) != 0) {
            return -1;
        }
        hconn *h = hc_take(&b->client);
        if (h != NULL) {
            return fail("waiter %s answered %d (%s) before any release", h->owner,
                        h->status, h->state == HC_CLOSED ? "closed" : h->in);
        }
        seen = cp_metric(b->gw.port, "fencegate_waiters");
        if (seen == want) {
            return 0;
        }
        if (now_us() > deadline) {
            return fail("fencegate_waiters is %lld, not %lld, after %d s", seen, want,
                        PHASE_LIMIT_MS / 1000);
        }
        if (hc_pump(&b->client, 5) != 0) {
            return -1;
        }
    }
}

/* One hand-off. In order:
 *   1. the holder sends POST /unlock (the clock starts);
 *   2. its 200 and one parked waiter's 200 arrive, in either order;
 *   3. the sample is the time to the waiter's 200 (the caller frees the old holder).
 * *next is the new holder, or stays NULL when expect_waiter is 0. Returns 0 or -1. */
static int hand_off(bench *b, hconn *holder, const char *resource, int expect_waiter,
                    hconn **next, chain_result *r, int64_t deadline)
{
    char body[512];
    hconn *got = NULL;
    int unlocked = 0;

    unlock_body(body, sizeof body, resource, holder->owner);
    int64_t t0 = now_us();
    if (hc_send(&b->client, holder, "/unlock", body) != 0) {
        return -1;
    }
    while (!unlocked || (expect_waiter && got == NULL)) {
        if (now_us() > deadline) {
            return fail("hand-off: no %s within %d s", unlocked ? "waiter got the lock" :
                        "answer to POST /unlock", PHASE_LIMIT_MS / 1000);
        }
        if (hc_pump(&b->client, 10) != 0) {
            return -1;
        }
        for (hconn *h = hc_take(&b->client); h != NULL; h = hc_take(&b->client)) {
            if (h == holder && h->status == 200) {
                unlocked = 1;
                samples_add(&r->unlock, (double)(h->answered_us - t0) / 1000.0);
            } else if (h == holder) {
                return fail("POST /unlock answered %d: %s", h->status, h->in);
            } else if (h->status == 200 && got == NULL && expect_waiter) {
                got = h;
            } else {
                return fail("waiter %s answered %d (%s)", h->owner, h->status,
                            h->state == HC_CLOSED ? "closed" : h->in);
            }
            h->status = 0;
        }
    }
    if (got != NULL) {
        samples_add(&r->handoff, (double)(got->answered_us - t0) / 1000.0);
    }
    r->releases++;
    *next = got;
    return 0;
}

/* Parks `waiters` waiters on a fresh resource behind one holder and hands the lock down the
 * chain until each has had it, `rounds` times (each round parks fresh waiters behind the
 * last holder). With one round, counts Redis script calls from the first POST /unlock to
 * the answer of the last. Returns 0 or -1. */
static int run_chain(bench *b, int waiters, int rounds, chain_result *r)
{
    char resource[64];
    hconn **parked = calloc((size_t)waiters, sizeof *parked);
    hconn *holder = NULL;
    int64_t deadline = phase_deadline();
    long long before = -1, after = -1;
    int rc = -1;

    r->waiters = waiters;
    r->calls = -1;
    snprintf(resource, sizeof resource, "hb-%d-chain-%lu", (int)getpid(), b->seq++);
    if (parked == NULL) {
        fail("out of memory");
        goto out;
    }
    holder = take_lock(b, resource, deadline);
    if (holder == NULL) {
        goto out;
    }
    for (int round = 0; round < rounds; round++) {
        if (await_gauge(b, 0, deadline) != 0 ||
            park_waiters(b, resource, waiters, parked, deadline) != 0 ||
            await_gauge(b, waiters, deadline) != 0) {
            goto out;
        }
        before = round == 0 ? th_redis_script_calls(&b->redis) : before;
        for (int i = 0; i < waiters; i++) {
            hconn *next = NULL;
            if (hand_off(b, holder, resource, 1, &next, r, deadline) != 0) {
                goto out;
            }
            hc_free_conn(&b->client, holder);
            holder = next;
            for (int j = 0; j < waiters; j++) {
                parked[j] = parked[j] == next ? NULL : parked[j];
            }
        }
    }
    hconn *none = NULL;
    if (hand_off(b, holder, resource, 0, &none, r, deadline) != 0) {
        goto out;
    }
    after = th_redis_script_calls(&b->redis);
    if (rounds == 1 && before >= 0 && after >= 0) {
        r->calls = after - before;
    }
    rc = 0;
out:
    if (rc != 0) {
        fprintf(stderr, "handoff_bench: chain of %d waiters: %s\n", waiters, g_err);
    }
    hc_free_conn(&b->client, holder);
    for (int j = 0; parked != NULL && j < waiters; j++) {
        hc_free_conn(&b->client, parked[j]);
    }
    b->client.done_len = 0;
    free(parked);
    return rc;
}

/* After SIGTERM: counts how the parked waiters are answered until every one is answered or
 * closed and the gateway has exited, bounded by deadline. Returns 0 or -1. */
static int collect_shutdown(bench *b, hconn **parked, int n, mem_result *m, int64_t deadline)
{
    int finished = 0;
    while (finished < n || !gw_reaped(&b->gw)) {
        if (now_us() > deadline) {
            return fail("after SIGTERM: %d of %d waiters answered or closed, gateway %s, "
                        "after %d s", finished, n, b->gw.pid > 0 ? "running" : "exited",
                        PHASE_LIMIT_MS / 1000);
        }
        if (hc_pump(&b->client, 10) != 0) {
            return -1;
        }
        finished = 0;
        for (hconn *h = hc_take(&b->client); h != NULL; h = hc_take(&b->client)) {
            h->status = 0;
        }
        m->answered_503 = m->answered_other = m->closed_unanswered = 0;
        for (int i = 0; i < n; i++) {
            int last = parked[i]->last_status;
            int done = last != 0 || parked[i]->state == HC_CLOSED;
            finished += done;
            m->answered_503 += last == 503;
            m->answered_other += last != 0 && last != 503;
            m->closed_unanswered += last == 0 && parked[i]->state == HC_CLOSED;
        }
    }
    return 0;
}

/* The gateway's RSS with 0 waiters (after a warm-up chain of 100) and with MEM_WAITERS
 * parked, then SIGTERM with them parked. Each waiter comes on a new connection, or with
 * reuse on a keep-alive connection that has served one GET /healthz first. Uses its own
 * gateway. Returns 0 or -1. */
static int run_memory(bench *b, int reuse, mem_result *m)
{
    chain_result warm;
    char resource[64];
    hconn **parked = calloc(MEM_WAITERS, sizeof *parked);
    hconn *holder = NULL;
    int rc = -1;

    memset(&warm, 0, sizeof warm);
    m->waiters = MEM_WAITERS;
    m->reuse = reuse;
    if (parked == NULL) {
        fail("out of memory");
        goto out;
    }
    if (run_chain(b, 100, 1, &warm) != 0) {
        goto out;
    }
    int64_t deadline = phase_deadline();
    if (await_gauge(b, 0, deadline) != 0) {
        goto out;
    }
    th_nap_ms(500); /* let the loop threads settle before the baseline */
    m->rss0_kib = read_rss_kib(b->gw.pid);
    snprintf(resource, sizeof resource, "hb-%d-mem-%lu", (int)getpid(), b->seq++);
    holder = take_lock(b, resource, deadline);
    if (holder == NULL || (reuse && warm_connections(b, MEM_WAITERS, parked, deadline) != 0) ||
        park_waiters(b, resource, MEM_WAITERS, parked, deadline) != 0 ||
        await_gauge(b, MEM_WAITERS, deadline) != 0) {
        goto out;
    }
    th_nap_ms(500);
    m->rss1_kib = read_rss_kib(b->gw.pid);
    printf("  %d parked: gateway VmRSS %lld KiB (was %lld KiB with 0); SIGTERM\n",
           MEM_WAITERS, m->rss1_kib, m->rss0_kib);
    fflush(stdout);
    int64_t t0 = now_us();
    kill(b->gw.pid, SIGTERM);
    if (collect_shutdown(b, parked, MEM_WAITERS, m, phase_deadline()) != 0) {
        goto out;
    }
    m->stop_ms = (now_us() - t0) / 1000;
    m->exit_code = b->gw.exit_code;
    m->ran = 1;
    rc = 0;
out:
    if (rc != 0) {
        fprintf(stderr, "handoff_bench: memory phase: %s\n", g_err);
    }
    hc_free_conn(&b->client, holder);
    for (int j = 0; parked != NULL && j < MEM_WAITERS; j++) {
        hc_free_conn(&b->client, parked[j]);
    }
    b->client.done_len = 0;
    free(parked);
    free(warm.handoff.ms);
    free(warm.unlock.ms);
    return rc;
}

/* Starts a gateway on the running Redis with a fresh client. Returns 0 or -1. */
static int bench_gateway_up(bench *b)
{
    if (gw_start(&b->gw, b->bin, b->redis.url) != 0) {
        return -1;
    }
    return hc_init(&b->client, b->gw.port);
}

static void bench_gateway_down(bench *b)
{
    hc_destroy(&b->client);
    gw_stop(&b->gw, 20000, 0);
}

static void print_chain(const char *label, chain_result *r)
{
    printf("  %s, %4d waiters: %zu hand-offs, p50 %.2f ms, p99 %.2f ms, max %.2f ms", label,
           r->waiters, r->handoff.len, percentile(&r->handoff, 50),
           percentile(&r->handoff, 99), percentile(&r->handoff, 100));
    if (r->calls >= 0) {
        printf(", %lld script calls / %lld releases", r->calls, r->releases);
    }
    printf("\n");
    fflush(stdout);
}

/* Latency chains with 1, 100 and 1,000 waiters against a fresh Redis (aof: appendfsync
 * always) and gateway; then, when mem is not NULL, the memory phase twice (new connections
 * into mem[0], reused ones into mem[1]), each on a gateway of its own. */
static int run_config(bench *b, int aof, config_result *res, mem_result *mem)
{
    const char *label = aof ? "appendfsync always" : "AOF off";
    const int waiters[3] = {1, 100, 1000};
    const int rounds[3] = {ONE_WAITER_ROUNDS, 1, 1};
    int rc = -1;

    th_redis_start(&b->redis, aof, NULL);
    redis_version(&b->redis, b->redis_version, sizeof b->redis_version);
    if (bench_gateway_up(b) != 0) {
        goto out;
    }
    printf("Redis %s on port %d, fencegate pid %d on port %d\n", label, b->redis.port,
           (int)b->gw.pid, b->gw.port);
    for (int i = 0; i < 3; i++) {
        if (run_chain(b, waiters[i], rounds[i], &res->chain[i]) != 0) {
            goto out;
        }
        print_chain(label, &res->chain[i]);
    }
    res->ran = 1;
    bench_gateway_down(b);
    for (int reuse = 0; mem != NULL && reuse < 2; reuse++) {
        if (bench_gateway_up(b) != 0) {
            goto out;
        }
        printf("memory: fencegate pid %d on port %d, %d waiters on %s connections\n",
               (int)b->gw.pid, b->gw.port, MEM_WAITERS, reuse ? "reused" : "new");
        if (run_memory(b, reuse, &mem[reuse]) != 0) {
            goto out;
        }
        bench_gateway_down(b);
    }
    rc = 0;
out:
    if (rc != 0 && b->gw.pid > 0) {
        print_log_tail(b->gw.log);
    }
    bench_gateway_down(b);
    th_redis_stop(&b->redis);
    b->redis.pid = 0;
    return rc;
}

/* ---- The table ---------------------------------------------------------------------- */

static void chain_cell(char *buf, size_t len, config_result *c, int i)
{
    chain_result *r = &c->chain[i];
    if (!c->ran) {
        snprintf(buf, len, "not run");
        return;
    }
    snprintf(buf, len, "%.2f / %.2f / %.2f", percentile(&r->handoff, 50),
             percentile(&r->handoff, 99), percentile(&r->handoff, 100));
}

static void calls_cell(char *buf, size_t len, const config_result *c, double *per)
{
    const chain_result *r = &c->chain[2];
    *per = -1;
    if (!c->ran || r->calls < 0 || r->releases == 0) {
        snprintf(buf, len, "not run");
        return;
    }
    *per = (double)r->calls / (double)r->releases;
    snprintf(buf, len, "%.2f (%lld / %lld)", *per, r->calls, r->releases);
}

static const char *verdict(int ran, int met)
{
    return !ran ? "not run" : met ? "met" : "missed";
}

/* The memory rows of one run of run_memory (AOF off only). */
static void print_memory_rows(const mem_result *m)
{
    const char *conns = m->reuse ? "each on a keep-alive connection that served a GET first"
                                 : "each on a new connection";
    if (!m->ran) {
        printf("| gateway memory per parked waiter, %s | not run | | < 4 KiB | not run |\n",
               conns);
        return;
    }
    double per_kib = (double)(m->rss1_kib - m->rss0_kib) / m->waiters;
    printf("| gateway VmRSS, 0 -> %d parked, %s | %lld -> %lld KiB (+%.1f MiB) | | | |\n",
           m->waiters, conns, m->rss0_kib, m->rss1_kib,
           (double)(m->rss1_kib - m->rss0_kib) / 1024);
    printf("| gateway memory per parked waiter, %s | %.2f KiB | | < 4 KiB | %s |\n", conns,
           per_kib, verdict(1, per_kib < 4.0));
    printf("| SIGTERM with %d parked, %s | %d x 503, %d other, %d closed unanswered; exit %d "
           "in %lld ms | | each 503, exit 0 | %s |\n",
           m->waiters, conns, m->answered_503, m->answered_other, m->closed_unanswered,
           m->exit_code, (long long)m->stop_ms,
           verdict(1, m->answered_503 == m->waiters && m->exit_code == 0));
}

static void print_table(const bench *b, config_result cfg[2], const mem_result m[2])
{
    char a[96], o[96];
    const char *rows[3] = {"hand-off p50/p99/max ms, 1 waiter x200",
                           "hand-off p50/p99/max ms, 100 waiters",
                           "hand-off p50/p99/max ms, 1,000 waiters"};
    long nproc = sysconf(_SC_NPROCESSORS_ONLN);

    printf("\nfencegate hand-off benchmark: nproc %ld, fencegate build type %s, Redis %s "
           "(fresh Redis and gateway per column, all on 127.0.0.1)\n",
           nproc, HB_BUILD_TYPE, b->redis_version);
    printf("| figure | AOF off | appendfsync always | target | result (off / always) |\n");
    printf("|---|---|---|---|---|\n");
    for (int i = 0; i < 3; i++) {
        chain_cell(o, sizeof o, &cfg[0], i);
        chain_cell(a, sizeof a, &cfg[1], i);
        if (i < 2) {
            printf("| %s | %s | %s | | |\n", rows[i], o, a);
            continue;
        }
        double p_off = percentile(&cfg[0].chain[2].handoff, 99);
        double p_alw = percentile(&cfg[1].chain[2].handoff, 99);
        printf("| %s | %s | %s | p99 < 5 ms | %s / %s |\n", rows[i], o, a,
               verdict(cfg[0].ran, p_off < 5.0), verdict(cfg[1].ran, p_alw < 5.0));
    }
    double per_off, per_alw;
    calls_cell(o, sizeof o, &cfg[0], &per_off);
    calls_cell(a, sizeof a, &cfg[1], &per_alw);
    printf("| script calls per release, 1,000 waiters (calls / releases) | %s | %s | <= 3 | "
           "%s / %s |\n", o, a, verdict(per_off >= 0, per_off <= 3.0),
           verdict(per_alw >= 0, per_alw <= 3.0));
    print_memory_rows(&m[0]);
    print_memory_rows(&m[1]);
    chain_result *one = &cfg[0].chain[0];
    printf("(reference, AOF off, 1 waiter: POST /unlock answered p50 %.2f ms, p99 %.2f ms)\n",
           percentile(&one->unlock, 50), percentile(&one->unlock, 99));
}

/* ---- main --------------------------------------------------------------------------- */

/* Raises RLIMIT_NOFILE's soft limit to the hard one (the gateway inherits it). */
static int raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        return fail("getrlimit: %s", strerror(errno));
    }
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
        return fail("setrlimit: %s", strerror(errno));
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < MEM_WAITERS + 1024) {
        return fail("RLIMIT_NOFILE hard limit %llu is below %d: raise it (ulimit -Hn)",
                    (unsigned long long)rl.rlim_cur, MEM_WAITERS + 1024);
    }
    return 0;
}

int main(int argc, char **argv)
{
    static bench b;
    static config_result cfg[2];
    static mem_result mem[2];
    int aof_run = 1;

    b.bin = FENCEGATE_BIN;
    b.client.epfd = -1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--fencegate") == 0 && i + 1 < argc) {
            b.bin = argv[++i];
        } else if (strcmp(argv[i], "--no-aof-run") == 0) {
            aof_run = 0;
        } else {
            fprintf(stderr, "usage: %s [--fencegate PATH] [--no-aof-run]\n", argv[0]);
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    if (raise_nofile() != 0) {
        fprintf(stderr, "handoff_bench: %s\n", g_err);
        return 1;
    }
    if (access(b.bin, X_OK) != 0) {
        fprintf(stderr, "handoff_bench: %s is not executable: %s\n", b.bin, strerror(errno));
        return 1;
    }
    int rc = run_config(&b, 0, &cfg[0], mem);
    if (rc == 0 && aof_run) {
        rc = run_config(&b, 1, &cfg[1], NULL);
    }
    if (rc != 0) {
        fprintf(stderr, "handoff_bench: stopped: %s\n", g_err);
    }
    print_table(&b, cfg, mem);
    for (int c = 0; c < 2; c++) {
        for (int i = 0; i < 3; i++) {
            free(cfg[c].chain[i].handoff.ms);
            free(cfg[c].chain[i].unlock.ms);
        }
    }
    return rc == 0 ? 0 : 1;
}
