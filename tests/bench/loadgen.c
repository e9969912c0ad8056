/*
 * loadgen: a single-threaded epoll load generator with one request in flight per keep-alive
 * connection. See loadgen.h for the model; this file is the engine: connecting, writing,
 * framing HTTP/1.1 and RESP answers, timing units, and the percentiles.
 */
#include "loadgen.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define OUT_CAP 2048
#define IN_CAP 16384
#define MAX_RECONNECTS 1000 /* per connection; past this it is left dead */

enum { C_CONNECTING, C_SENDING, C_AWAITING, C_DEAD };

typedef struct lg_conn {
    int fd;
    int id;
    int state;
    int want_out;          /* EPOLLOUT is in the interest set */
    int reconnects;
    int starts_unit;       /* the request in flight begins a unit */
    int64_t unit_start_us; /* when the open unit's first request was sent, 0 if none */
    size_t out_len, out_off;
    size_t in_len;
    redisReader *reader;   /* LG_RESP only */
    void *wstate;          /* the workload's per-connection state */
    char out[OUT_CAP];
    char in[IN_CAP];
    char body[IN_CAP];     /* a chunked body, de-chunked */
} lg_conn;

typedef struct samples {
    uint32_t *v;
    size_t len, cap;
} samples;

typedef struct lg_run_state {
    const lg_workload *w;
    int port;
    int epfd;
    int nconns;
    int alive;
    lg_conn **conns;
    int64_t win_start_us, win_end_us;
    int in_window;
    uint64_t units, failures;
    samples unit_lat, op_lat;
    char *err;
    size_t errlen;
    int failed;            /* a fatal error was recorded */
} lg_run_state;

int64_t lg_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void set_err(lg_run_state *s, const char *fmt, ...)
{
    va_list ap;
    if (s->failed) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(s->err, s->errlen, fmt, ap);
    va_end(ap);
    s->failed = 1;
}

static void samples_add(samples *sm, int64_t us)
{
    if (sm->len == sm->cap) {
        size_t cap = sm->cap == 0 ? 65536 : sm->cap * 2;
        uint32_t *grown = realloc(sm->v, cap * sizeof *grown);
        if (grown == NULL) {
            return; /* a lost sample is better than a lost run */
        }
        sm->v = grown;
        sm->cap = cap;
    }
    sm->v[sm->len++] = us < 0 ? 0 : (us > UINT32_MAX ? UINT32_MAX : (uint32_t)us);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a;
    uint32_t y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile q (0..1) in milliseconds; sorts sm. 0 when there is no sample. */
static double percentile_ms(samples *sm, double q)
{
    if (sm->len == 0) {
        return 0;
    }
    qsort(sm->v, sm->len, sizeof *sm->v, cmp_u32);
    size_t rank = (size_t)(q * (double)sm->len + 0.999999);
    if (rank < 1) {
        rank = 1;
    }
    if (rank > sm->len) {
        rank = sm->len;
    }
    return sm->v[rank - 1] / 1000.0;
}

/* ---- Sockets -------------------------------------------------------------------------- */

static int set_interest(lg_run_state *s, lg_conn *c, int want_out)
{
    struct epoll_event ev = {.events = EPOLLIN | (want_out ? EPOLLOUT : 0), .data.ptr = c};
    if (c->want_out == want_out) {
        return 0;
    }
    c->want_out = want_out;
    return epoll_ctl(s->epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

/* Opens a non-blocking connection; the request is written once it is established.
 * Returns 0, or -1 with errno when the socket cannot even be started. */
static int conn_open(lg_run_state *s, lg_conn *c)
{
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port)};
    int one = 1;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (c->fd < 0) {
        return -1;
    }
    int fl = fcntl(c->fd, F_GETFL, 0);
    if (fl < 0 || fcntl(c->fd, F_SETFL, fl | O_NONBLOCK) != 0) {
        goto fail;
    }
    /* Small requests must leave at once, not wait for Nagle. */
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(c->fd, (struct sockaddr *)&addr, sizeof addr) != 0 && errno != EINPROGRESS) {
        goto fail;
    }
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
    if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
        goto fail;
    }
    c->want_out = 1;
    c->state = C_CONNECTING;
    c->in_len = 0;
    return 0;
fail:
    close(c->fd);
    c->fd = -1;
    return -1;
}

static void conn_close(lg_run_state *s, lg_conn *c)
{
    if (c->fd >= 0) {
        epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
        c->fd = -1;
    }
}

/* Asks the workload for the connection's next request and starts writing it. */
static int conn_next(lg_run_state *s, lg_conn *c);

/* Tells the workload its request got no answer, then reconnects (a bounded number of
 * times) to carry on. */
static void conn_drop(lg_run_state *s, lg_conn *c)
{
    lg_reply none = {.status = -1};
    conn_close(s, c);
    s->w->on_reply(s->w->ctx, c->id, c->wstate, &none);
    s->failures++;
    c->unit_start_us = 0;
    if (c->reader != NULL) {
        redisReaderFree(c->reader);
        c->reader = redisReaderCreate();
    }
    if (++c->reconnects > MAX_RECONNECTS || conn_open(s, c) != 0) {
        c->state = C_DEAD;
        s->alive--;
        return;
    }
    c->out_len = 0; /* conn_next writes a fresh request once connected */
}

static void conn_write(lg_run_state *s, lg_conn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (n > 0) {
            c->out_off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            set_interest(s, c, 1);
            return;
        }
        conn_drop(s, c);
        return;
    }
    c->state = C_AWAITING;
    set_interest(s, c, 0);
}

static int conn_next(lg_run_state *s, lg_conn *c)
{
    int starts = 0;
    int n = s->w->next(s->w->ctx, c->id, c->wstate, c->out, OUT_CAP, &starts);
    if (n <= 0 || n > OUT_CAP) {
        set_err(s, "%s: connection %d: cannot build its next request", s->w->name, c->id);
        return -1;
    }
    c->out_len = (size_t)n;
    c->out_off = 0;
    c->starts_unit = starts;
    if (starts) {
        c->unit_start_us = lg_now_us();
    }
    c->state = C_SENDING;
    conn_write(s, c);
    return 0;
}

/* ---- Framing -------------------------------------------------------------------------- */

static const char *find_crlf2(const char *buf, size_t len)
{
    for (size_t i = 0; i + 3 < len; i++) {
        if (buf[i] == '\r' && buf[i + 1] == '\n' && buf[i + 2] == '\r' && buf[i + 3] == '\n') {
            return buf + i;
        }
    }
    return NULL;
}

static const char *find_crlf(const char *buf, size_t len)
{
    for (size_t i = 0; i + 1 < len; i++) {
        if (buf[i] == '\r' && buf[i + 1] == '\n') {
            return buf + i;
        }
    }
    return NULL;
}

/* De-chunks the body starting at p into c->body. Returns 1 with *end set past the final
 * CRLF, 0 when incomplete, -1 when malformed. Trailers are not expected and not allowed. */
static int dechunk(lg_conn *c, const char *p, const char *limit, size_t *body_len,
                   const char **end)
{
    size_t out = 0;
    for (;;) {
        const char *eol = find_crlf(p, (size_t)(limit - p));
        if (eol == NULL) {
            return 0;
        }
        char *hex_end = NULL;
        unsigned long size = strtoul(p, &hex_end, 16);
        if (hex_end == p) {
            return -1;
        }
        p = eol + 2;
        if ((size_t)(limit - p) < size + 2) {
            return 0;
        }
        if (size == 0) {
            *body_len = out;
            *end = p + 2;
            return 1;
        }
        if (out + size > sizeof c->body) {
            return -1;
        }
        memcpy(c->body + out, p, size);
        out += size;
        p += size + 2;
    }
}

/* Frames one HTTP/1.1 response at the start of c->in. Returns 1 with *reply and *used set,
 * 0 when more bytes are needed, -1 when it is not a response we can read. */
static int http_frame(lg_conn *c, lg_reply *reply, size_t *used)
{
    const char *buf = c->in;
    const char *head_end = find_crlf2(buf, c->in_len);
    long long clen = -1;
    int chunked = 0;

    if (head_end == NULL) {
        return c->in_len >= IN_CAP ? -1 : 0;
    }
    if (c->in_len < 12 || strncmp(buf, "HTTP/1.", 7) != 0) {
        return -1;
    }
    reply->status = atoi(buf + 9);
    for (const char *line = find_crlf(buf, (size_t)(head_end + 2 - buf)) + 2; line < head_end;) {
        const char *eol = find_crlf(line, (size_t)(head_end + 2 - line));
        if (strncasecmp(line, "Content-Length:", 15) == 0) {
            clen = atoll(line + 15);
        } else if (strncasecmp(line, "Transfer-Encoding:", 18) == 0) {
            chunked = 1; /* chunked is the only coding a server may send us */
        }
        line = eol + 2;
    }
    const char *body = head_end + 4;
    const char *limit = buf + c->in_len;
    if (chunked) {
        const char *end = NULL;
        int rc = dechunk(c, body, limit, &reply->body_len, &end);
        if (rc <= 0) {
            return rc < 0 || c->in_len >= IN_CAP ? -1 : 0;
        }
        reply->body = c->body;
        *used = (size_t)(end - buf);
        return 1;
    }
    if (clen < 0) {
        clen = 0; /* only 1xx, 204 and 304 come without either; we send nothing that gets them */
    }
    if ((size_t)(body - buf) + (size_t)clen > IN_CAP) {
        return -1;
    }
    if ((size_t)(limit - body) < (size_t)clen) {
        return 0;
    }
    reply->body = body;
    reply->body_len = (size_t)clen;
    *used = (size_t)(body - buf) + (size_t)clen;
    return 1;
}

/* Hands one complete answer to the workload, records the timings, sends the next request. */
static void conn_answered(lg_run_state *s, lg_conn *c, const lg_reply *reply)
{
    int64_t now = lg_now_us();
    int counted = now >= s->win_start_us && now < s->win_end_us;
    lg_verdict v = s->w->on_reply(s->w->ctx, c->id, c->wstate, reply);

    switch (v) {
    case LG_OP_DONE:
        if (counted && c->unit_start_us != 0) {
            samples_add(&s->op_lat, now - c->unit_start_us);
        }
        break;
    case LG_UNIT_DONE:
        if (counted && c->unit_start_us != 0) {
            samples_add(&s->unit_lat, now - c->unit_start_us);
            s->units++;
        }
        c->unit_start_us = 0;
        break;
    case LG_FAILED:
        s->failures++;
        c->unit_start_us = 0;
        break;
    case LG_NEXT:
        break;
    }
    conn_next(s, c);
}

static void conn_read_http(lg_run_state *s, lg_conn *c)
{
    for (;;) {
        ssize_t n = recv(c->fd, c->in + c->in_len, IN_CAP - c->in_len, 0);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return;
        }
        if (n <= 0) {
            conn_drop(s, c);
            return;
        }
        c->in_len += (size_t)n;
        lg_reply reply = {0};
        size_t used = 0;
        int rc = http_frame(c, &reply, &used);
        if (rc < 0) {
            conn_drop(s, c);
            return;
        }
        if (rc == 0) {
            continue;
        }
        c->in_len = 0; /* one request in flight: nothing can follow the answer */
        conn_answered(s, c, &reply);
        return;
    }
}

static void conn_read_resp(lg_run_state *s, lg_conn *c)
{
    char buf[4096];
    for (;;) {
        ssize_t n = recv(c->fd, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return;
        }
        if (n <= 0 || redisReaderFeed(c->reader, buf, (size_t)n) != REDIS_OK) {
            conn_drop(s, c);
            return;
        }
        void *r = NULL;
        if (redisReaderGetReply(c->reader, &r) != REDIS_OK) {
            conn_drop(s, c);
            return;
        }
        if (r == NULL) {
            continue;
        }
        lg_reply reply = {.resp = r};
        conn_answered(s, c, &reply);
        freeReplyObject(r);
        return;
    }
}

static void conn_event(lg_run_state *s, lg_conn *c, uint32_t events)
{
    if (c->state == C_DEAD) {
        return;
    }
    if (c->state == C_CONNECTING) {
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
            return;
        }
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr != 0) {
            conn_drop(s, c);
            return;
        }
        conn_next(s, c);
        return;
    }
    if (c->state == C_SENDING && (events & (EPOLLOUT | EPOLLERR))) {
        conn_write(s, c);
    }
    if (c->state == C_AWAITING && (events & (EPOLLIN | EPOLLERR | EPOLLHUP))) {
        if (s->w->proto == LG_HTTP) {
            conn_read_http(s, c);
        } else {
            conn_read_resp(s, c);
        }
    }
}

/* ---- The run -------------------------------------------------------------------------- */

static int open_all(lg_run_state *s)
{
    s->conns = calloc((size_t)s->nconns, sizeof *s->conns);
    if (s->conns == NULL) {
        set_err(s, "out of memory");
        return -1;
    }
    for (int i = 0; i < s->nconns; i++) {
        lg_conn *c = calloc(1, sizeof *c);
        void *st = calloc(1, s->w->state_size > 0 ? s->w->state_size : 1);
        if (c == NULL || st == NULL) {
            free(c);
            free(st);
            set_err(s, "out of memory");
            return -1;
        }
        c->id = i;
        c->wstate = st;
        c->fd = -1;
        s->conns[i] = c;
        if (s->w->proto == LG_RESP) {
            c->reader = redisReaderCreate();
        }
        if (conn_open(s, c) != 0) {
            set_err(s, "%s: connect to 127.0.0.1:%d: %s", s->w->name, s->port, strerror(errno));
            return -1;
        }
        s->alive++;
    }
    return 0;
}

static void close_all(lg_run_state *s)
{
    for (int i = 0; s->conns != NULL && i < s->nconns; i++) {
        lg_conn *c = s->conns[i];
        if (c == NULL) {
            continue;
        }
        conn_close(s, c);
        if (c->reader != NULL) {
            redisReaderFree(c->reader);
        }
        free(c->wstate);
        free(c);
    }
    free(s->conns);
    s->conns = NULL;
}

static void event_loop(lg_run_state *s, lg_window_fn window, void *arg)
{
    struct epoll_event evs[256];
    for (;;) {
        int64_t now = lg_now_us();
        if (!s->in_window && now >= s->win_start_us) {
            s->in_window = 1;
            if (window != NULL) {
                window(arg, 1);
            }
        }
        if (now >= s->win_end_us || s->failed) {
            break;
        }
        if (s->alive == 0) {
            set_err(s, "%s: every connection to port %d was lost", s->w->name, s->port);
            break;
        }
        int64_t next = s->in_window ? s->win_end_us : s->win_start_us;
        int timeout_ms = (int)((next - now) / 1000) + 1;
        int n = epoll_wait(s->epfd, evs, 256, timeout_ms > 50 ? 50 : timeout_ms);
        for (int i = 0; i < n; i++) {
            conn_event(s, evs[i].data.ptr, evs[i].events);
        }
    }
    if (s->in_window && window != NULL) {
        window(arg, 0);
    }
}

int lg_run(const lg_workload *w, int port, int nconns, int warm_ms, int measure_ms,
           lg_window_fn window, void *arg, lg_result *res, char *err, size_t errlen)
{
    lg_run_state s = {.w = w, .port = port, .nconns = nconns, .err = err, .errlen = errlen};

    memset(res, 0, sizeof *res);
    s.epfd = epoll_create1(0);
    if (s.epfd < 0) {
        snprintf(err, errlen, "epoll_create1: %s", strerror(errno));
        return -1;
    }
    int64_t start = lg_now_us();
    s.win_start_us = start + (int64_t)warm_ms * 1000;
    s.win_end_us = s.win_start_us + (int64_t)measure_ms * 1000;
    if (open_all(&s) == 0) {
        event_loop(&s, window, arg);
    }
    close_all(&s);
    close(s.epfd);

    res->seconds = measure_ms / 1000.0;
    res->units = s.units;
    res->failures = s.failures;
    res->rate = (double)s.units / res->seconds;
    res->unit_p50_ms = percentile_ms(&s.unit_lat, 0.50);
    res->unit_p99_ms = percentile_ms(&s.unit_lat, 0.99);
    res->op_p50_ms = percentile_ms(&s.op_lat, 0.50);
    res->op_p99_ms = percentile_ms(&s.op_lat, 0.99);
    res->op_samples = s.op_lat.len;
    free(s.unit_lat.v);
    free(s.op_lat.v);
    return s.failed ? -1 : 0;
}
