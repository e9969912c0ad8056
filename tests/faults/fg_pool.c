/*
 * fg_pool: an HTTP/1.1 client with a pool of keep-alive connections from one client address,
 * as an application server's HTTP pool has: a request takes an idle connection of the pool,
 * or opens one while the pool has fewer than its cap, or else waits for one. Used by the
 * fault scenarios that load the gateway from one address (scenarios/slow_store_stale.sh,
 * slow_redis_fair_waiters.sh, waiters_one_address.sh). Plain sockets and poll(), no libcurl:
 * every figure is the time from the moment a request got its connection (for a new one,
 * before its connect) to its answer's last byte read.
 *
 *   fg_pool repeat SRC PORT CONNS SECONDS METHOD PATH CONTENT_TYPE BODY [HEADER]
 *       CONNS connections from SRC each send the request again as soon as it is answered,
 *       for SECONDS s (then the ones in flight are waited for, at most 15 s). HEADER is one
 *       more header line ("Fencing-Token: 3"). Prints one line:
 *         "repeat sent N answered N dropped N s200 N s409 N stale N other N p50 X p99 X max X"
 *       (dropped: a connection closed without an answer; stale: 409 stale_token answers;
 *       latencies in ms) and, on stderr, the first few answers that were not 409.
 *
 *   fg_pool burst SRC PORT N METHOD PATH CONTENT_TYPE BODY
 *       N requests at once, each on a connection of its own from SRC; every "%d" in BODY
 *       becomes the request's index (0 to N-1). Waits for every answer (at most 30 s) and
 *       prints one line per request, "INDEX STATUS MS BODY" (status 0: dropped or not
 *       answered), in the order they were answered.
 *
 *   fg_pool waiters SRC PORT RESOURCE N POOL WAIT_MS HOLDER HOLDER_TOKEN SETTLE_S BOUND_MS OBS
 *       The waiters of one address on one held resource (scenarios/waiters_one_address.sh):
 *       1. N POST /lock {"fair": true, "wait_ms": WAIT_MS} on RESOURCE, owners fgw-0..N-1,
 *          through a pool of at most POOL connections from SRC;
 *       2. settles: within SETTLE_S s every request was sent (none left waiting for a pool
 *          connection) and every one not answered is parked (the gateway's fencegate_waiters,
 *          read from OBS, an address of its own, is at least the requests in flight);
 *       3. through the same pool: GET /healthz and POST /unlock of HOLDER, each answered
 *          within BOUND_MS;
 *       4. the unlock wakes the first fair waiter: a 200 with a token above HOLDER_TOKEN
 *          within 2 x BOUND_MS of it;
 *       5. every granted waiter is unlocked at once (through the pool), which wakes the next,
 *          until each of the N requests has its answer (at most WAIT_MS + 15 s in all).
 *       Every request must get an HTTP answer (none dropped): 200 (granted, after step 3
 *       only) or 503 too_many_waiters with a Retry-After header; at least one such 503; the
 *       503s answered within 5 x BOUND_MS (p99: long before WAIT_MS, but they come in one
 *       burst, up to 1.7 s on a loaded machine with the share emulated). Prints the
 *       figures, a line "FAIL: ..." for each assertion that did not hold, and exits 1 if
 *       any did not.
 *
 * RLIMIT_NOFILE is raised to what POOL needs (up to the hard limit). Exits 2 on a setup error.
 * Responses must carry Content-Length (libmicrohttpd's buffer responses do); a chunked one is
 * counted as dropped.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_POOL 4096
#define MAX_REQS 100000
#define ROUND_MS 20

enum kind { K_REPEAT, K_WAIT, K_HEALTH, K_UNLOCK_HOLDER, K_UNLOCK_WAITER };

typedef struct req {
    enum kind kind;
    int idx;       /* waiter index (K_WAIT, K_UNLOCK_WAITER) */
    char *text;
    size_t len;
    int64_t sent_us, answered_us;
    int status;    /* 0: no answer yet */
    int dropped;   /* its connection closed without an answer */
    int retry_after;
    int too_many;  /* the body names too_many_waiters */
    int stale;     /* the body names stale_token */
    long long token;
    char body[256]; /* the answer's start, for messages */
} req;

enum cstate { C_FREE, C_BUSY, C_IDLE };

typedef struct conn {
    int fd;
    enum cstate state;
    req *r;
    size_t woff;
    char *buf;
    size_t blen, bcap;
} conn;

static volatile sig_atomic_t stop;
static struct sockaddr_in src_addr, dst_addr;
static conn pool[MAX_POOL];
static int pool_cap, pool_open;
/* Two FIFO queues of requests waiting for a connection: probes and unlocks go first. */
static req *queue_hi[MAX_REQS], *queue_lo[MAX_REQS];
static size_t hi_head, hi_tail, lo_head, lo_tail;
static long long dropped_total, refused_open;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (p == NULL) {
        fprintf(stderr, "fg_pool: out of memory\n");
        exit(2);
    }
    return p;
}

static req *new_req(enum kind k, int idx, const char *method, const char *path,
                    const char *ctype, const char *body, const char *header)
{
    req *r = xmalloc(sizeof *r);
    memset(r, 0, sizeof *r);
    r->kind = k;
    r->idx = idx;
    r->token = -1;
    size_t blen = body != NULL ? strlen(body) : 0;
    size_t cap = strlen(path) + blen + (header != NULL ? strlen(header) : 0) + 256;
    r->text = xmalloc(cap);
    int n;
    if (body != NULL) {
        n = snprintf(r->text, cap,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: %s\r\n"
                     "Content-Length: %zu\r\n%s%s\r\n%s",
                     method, path, ctype, blen, header != NULL ? header : "",
                     header != NULL ? "\r\n" : "", body);
    } else {
        n = snprintf(r->text, cap, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s%s\r\n", method,
                     path, header != NULL ? header : "", header != NULL ? "\r\n" : "");
    }
    r->len = (size_t)n;
    return r;
}

static void push(int hi, req *r)
{
    if (hi) {
        queue_hi[hi_tail++ % MAX_REQS] = r;
    } else {
        queue_lo[lo_tail++ % MAX_REQS] = r;
    }
}

static size_t queued(void)
{
    return (hi_tail - hi_head) + (lo_tail - lo_head);
}

static req *pop(void)
{
    if (hi_head < hi_tail) {
        return queue_hi[hi_head++ % MAX_REQS];
    }
    if (lo_head < lo_tail) {
        return queue_lo[lo_head++ % MAX_REQS];
    }
    return NULL;
}

static void conn_close(conn *c)
{
    if (c->fd >= 0) {
        close(c->fd);
    }
    c->fd = -1;
    c->state = C_FREE;
    c->r = NULL;
    c->blen = 0;
    pool_open--;
}

/* Opens a non-blocking connection from SRC; -1 when the socket or connect fails at once. */
static int open_fd(const struct sockaddr_in *src)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (bind(fd, (const struct sockaddr *)src, sizeof *src) != 0 ||
        (connect(fd, (const struct sockaddr *)&dst_addr, sizeof dst_addr) != 0 &&
         errno != EINPROGRESS)) {
        close(fd);
        return -1;
    }
    return fd;
}

static void start_on(conn *c, req *r)
{
    c->r = r;
    c->woff = 0;
    c->state = C_BUSY;
    r->sent_us = now_us();
}

/* Hands queued requests to idle connections, then to new ones while the pool has room. */
static void dispatch(void)
{
    for (int i = 0; i < pool_cap && queued() > 0; i++) {
        if (pool[i].state == C_IDLE) {
            start_on(&pool[i], pop());
        }
    }
    for (int i = 0; i < pool_cap && queued() > 0 && pool_open < pool_cap; i++) {
        if (pool[i].state != C_FREE) {
            continue;
        }
        int fd = open_fd(&src_addr);
        if (fd < 0) {
            refused_open++;
            return; /* tried again next round */
        }
        pool[i].fd = fd;
        pool[i].blen = 0;
        pool_open++;
        start_on(&pool[i], pop());
    }
}

static int header_value(const char *hdrs, size_t hlen, const char *name, char *out, size_t outlen)
{
    size_t nlen = strlen(name);
    const char *p = hdrs, *end = hdrs + hlen;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (eol == NULL) {
            eol = end;
        }
        if ((size_t)(eol - p) > nlen && strncasecmp(p, name, nlen) == 0 && p[nlen] == ':') {
            const char *v = p + nlen + 1;
            while (v < eol && (*v == ' ' || *v == '\t')) {
                v++;
            }
            size_t n = (size_t)(eol - v);
            while (n > 0 && (v[n - 1] == '\r' || v[n - 1] == ' ')) {
                n--;
            }
            if (n >= outlen) {
                n = outlen - 1;
            }
            memcpy(out, v, n);
            out[n] = '\0';
            return 1;
        }
        p = eol + 1;
    }
    return 0;
}

typedef void (*on_answer_fn)(conn *c, req *r);
static on_answer_fn on_answer;

/* Parses what c has read; when a whole answer is in, records it in c->r, calls on_answer and
 * makes c idle (or closes it on "Connection: close"). Returns -1 on a malformed answer. */
static int parse(conn *c)
{
    if (c->blen == 0) {
        return 0;
    }
    c->buf[c->blen] = '\0';
    char *hend = strstr(c->buf, "\r\n\r\n");
    if (hend == NULL) {
        return 0;
    }
    size_t hlen = (size_t)(hend - c->buf) + 4;
    char v[64];
    if (strncmp(c->buf, "HTTP/1.", 7) != 0 || c->r == NULL) {
        return -1;
    }
    if (header_value(c->buf, hlen, "Transfer-Encoding", v, sizeof v)) {
        return -1;
    }
    size_t clen = 0;
    if (header_value(c->buf, hlen, "Content-Length", v, sizeof v)) {
        clen = (size_t)strtoull(v, NULL, 10);
    }
    if (c->blen < hlen + clen) {
        return 0;
    }
    req *r = c->r;
    r->answered_us = now_us();
    r->status = atoi(c->buf + 9);
    r->retry_after = header_value(c->buf, hlen, "Retry-After", v, sizeof v);
    int closing = header_value(c->buf, hlen, "Connection", v, sizeof v) &&
                  strcasecmp(v, "close") == 0;
    char *body = c->buf + hlen;
    char saved = body[clen];
    body[clen] = '\0';
    r->too_many = strstr(body, "too_many_waiters") != NULL;
    r->stale = strstr(body, "stale_token") != NULL;
    const char *t = strstr(body, "\"token\"");
    if (t != NULL) {
        t = strchr(t, ':');
        if (t != NULL) {
            r->token = strtoll(t + 1, NULL, 10);
        }
    }
    snprintf(r->body, sizeof r->body, "%s", body);
    body[clen] = saved;
    memmove(c->buf, c->buf + hlen + clen, c->blen - hlen - clen);
    c->blen -= hlen + clen;
    c->r = NULL;
    c->state = C_IDLE;
    if (closing) {
        conn_close(c);
    }
    on_answer(c, r);
    return 0;
}

static void drop(conn *c)
{
    if (c->r != NULL) {
        c->r->dropped = 1;
        c->r->answered_us = now_us();
        dropped_total++;
        req *r = c->r;
        conn_close(c);
        on_answer(c, r);
    } else {
        conn_close(c);
    }
}

/* One round: poll every open connection, write, read, parse. */
static void round_once(int timeout_ms)
{
    static struct pollfd pfd[MAX_POOL];
    static int which[MAX_POOL];
    nfds_t n = 0;
    dispatch();
    for (int i = 0; i < pool_cap; i++) {
        conn *c = &pool[i];
        if (c->state == C_FREE) {
            continue;
        }
        pfd[n].fd = c->fd;
        pfd[n].events = (c->state == C_BUSY && c->woff < c->r->len) ? POLLOUT : POLLIN;
        pfd[n].revents = 0;
        which[n++] = i;
    }
    if (poll(pfd, n, timeout_ms) < 0 && errno != EINTR) {
        perror("fg_pool: poll");
        exit(2);
    }
    for (nfds_t k = 0; k < n; k++) {
        conn *c = &pool[which[k]];
        short ev = pfd[k].revents;
        if (ev == 0 || c->state == C_FREE) {
            continue;
        }
        if (c->state == C_BUSY && c->woff < c->r->len) {
            if ((ev & (POLLERR | POLLHUP)) != 0) {
                drop(c);
                continue;
            }
            ssize_t w = send(c->fd, c->r->text + c->woff, c->r->len - c->woff, MSG_NOSIGNAL);
            if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                drop(c);
            } else if (w > 0) {
                c->woff += (size_t)w;
            }
            continue;
        }
        if (c->bcap - c->blen < 4097) {
            c->bcap = c->bcap * 2 + 8192;
            char *nb = realloc(c->buf, c->bcap);
            if (nb == NULL) {
                fprintf(stderr, "fg_pool: out of memory\n");
                exit(2);
            }
            c->buf = nb;
        }
        ssize_t got = recv(c->fd, c->buf + c->blen, c->bcap - c->blen - 1, 0);
        if (got > 0) {
            c->blen += (size_t)got;
            if (c->state == C_IDLE) {
                conn_close(c); /* bytes nobody asked for */
            } else if (parse(c) != 0) {
                drop(c);
            }
        } else if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            drop(c); /* an idle connection closed by the gateway is no request dropped */
        }
    }
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Sorts v and gives the p-th percentile (nearest rank) in ms. */
static double pct_ms(int64_t *v, size_t n, double p)
{
    if (n == 0) {
        return 0;
    }
    qsort(v, n, sizeof *v, cmp_i64);
    size_t k = (size_t)(p * (double)n + 0.999);
    if (k < 1) {
        k = 1;
    }
    if (k > n) {
        k = n;
    }
    return (double)v[k - 1] / 1000.0;
}

static void raise_nofile(int want)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)want) {
        rl.rlim_cur = rl.rlim_max < (rlim_t)want ? rl.rlim_max : (rlim_t)want;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < (rlim_t)want) {
        fprintf(stderr, "fg_pool: RLIMIT_NOFILE is below the %d descriptors the pool needs\n",
                want);
        exit(2);
    }
}

static void setup(const char *src, const char *port, int cap)
{
    int p = atoi(port);
    memset(&src_addr, 0, sizeof src_addr);
    memset(&dst_addr, 0, sizeof dst_addr);
    src_addr.sin_family = dst_addr.sin_family = AF_INET;
    dst_addr.sin_port = htons((uint16_t)p);
    inet_pton(AF_INET, "127.0.0.1", &dst_addr.sin_addr);
    if (inet_pton(AF_INET, src, &src_addr.sin_addr) != 1 || p <= 0 || p > 65535 || cap <= 0 ||
        cap > MAX_POOL) {
        fprintf(stderr, "fg_pool: bad arguments\n");
        exit(2);
    }
    raise_nofile(cap + 64);
    pool_cap = cap;
    for (int i = 0; i < MAX_POOL; i++) {
        pool[i].fd = -1;
    }
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    signal(SIGPIPE, SIG_IGN);
}

static void close_all(void)
{
    for (int i = 0; i < pool_cap; i++) {
        if (pool[i].state != C_FREE) {
            conn_close(&pool[i]);
        }
    }
}

/* ---- repeat --------------------------------------------------------------------------- */

static int64_t *lat;
static size_t nlat;
static long long sent, answered, s200, s409, nstale, other;
static int shown;

static void repeat_answer(conn *c, req *r)
{
    (void)c;
    if (r->dropped) {
        free(r->text);
        free(r);
        return;
    }
    answered++;
    lat[nlat++] = r->answered_us - r->sent_us;
    if (r->status == 200) {
        s200++;
    } else if (r->status == 409) {
        s409++;
        nstale += r->stale;
    } else {
        other++;
    }
    if (r->status != 409 && shown < 5) {
        shown++;
        fprintf(stderr, "fg_pool: answer %d: %.200s\n", r->status, r->body);
    }
    free(r->text);
    free(r);
}

static int run_repeat(int argc, char **argv)
{
    if (argc != 10 && argc != 11) {
        fprintf(stderr, "usage: fg_pool repeat SRC PORT CONNS SECONDS METHOD PATH CONTENT_TYPE "
                        "BODY [HEADER]\n");
        return 2;
    }
    int conns = atoi(argv[4]);
    int secs = atoi(argv[5]);
    setup(argv[2], argv[3], conns);
    lat = xmalloc(sizeof *lat * 4000000);
    on_answer = repeat_answer;
    int64_t end = now_us() + (int64_t)secs * 1000000, give_up = end + 15 * 1000000LL;
    for (;;) {
        int64_t t = now_us();
        if (stop || t >= give_up) {
            break;
        }
        if (t < end) {
            /* One request per connection: each idle or closed one gets the next. */
            int busy = 0;
            for (int i = 0; i < conns; i++) {
                busy += pool[i].state == C_BUSY;
            }
            while (busy + (int)queued() < conns && sent < 3900000) {
                push(0, new_req(K_REPEAT, 0, argv[6], argv[7], argv[8], argv[9],
                                argc == 11 ? argv[10] : NULL));
                sent++;
            }
        } else {
            int busy = 0;
            for (int i = 0; i < conns; i++) {
                busy += pool[i].state == C_BUSY;
            }
            if (busy == 0) {
                break;
            }
        }
        round_once(ROUND_MS);
    }
    long long inflight = sent - answered - dropped_total;
    close_all();
    printf("repeat sent %lld answered %lld dropped %lld inflight %lld s200 %lld s409 %lld "
           "stale %lld other %lld p50 %.1f p99 %.1f max %.1f\n",
           sent, answered, dropped_total, inflight, s200, s409, nstale, other,
           pct_ms(lat, nlat, 0.50), pct_ms(lat, nlat, 0.99), pct_ms(lat, nlat, 1.0));
    return 0;
}

/* ---- burst ---------------------------------------------------------------------------- */

static int burst_left;

static void burst_answer(conn *c, req *r)
{
    (void)c;
    burst_left--;
    for (char *p = r->body; *p != '\0'; p++) {
        if (*p == '\n' || *p == '\r') {
            *p = ' ';
        }
    }
    printf("%d %d %.1f %s\n", r->idx, r->dropped ? 0 : r->status,
           (double)(r->answered_us - r->sent_us) / 1000.0, r->body);
}

static int run_burst(int argc, char **argv)
{
    if (argc != 9) {
        fprintf(stderr, "usage: fg_pool burst SRC PORT N METHOD PATH CONTENT_TYPE BODY\n");
        return 2;
    }
    int n = atoi(argv[4]);
    if (n <= 0 || n > MAX_POOL) {
        fprintf(stderr, "fg_pool: bad N\n");
        return 2;
    }
    setup(argv[2], argv[3], n);
    on_answer = burst_answer;
    req **all = xmalloc(sizeof *all * (size_t)n);
    for (int i = 0; i < n; i++) {
        /* The template with each %d replaced by i. */
        const char *t = argv[8];
        size_t cap = strlen(t) * 2 + 64, o = 0;
        char *body = xmalloc(cap);
        for (; *t != '\0' && o + 16 < cap; t++) {
            if (t[0] == '%' && t[1] == 'd') {
                o += (size_t)snprintf(body + o, cap - o, "%d", i);
                t++;
            } else {
                body[o++] = *t;
            }
        }
        body[o] = '\0';
        all[i] = new_req(K_REPEAT, i, argv[5], argv[6], argv[7], body, NULL);
        free(body);
    }
    /* Every connection opened before the first request is written: all at once. */
    for (int i = 0; i < n; i++) {
        push(0, all[i]);
    }
    burst_left = n;
    int64_t give_up = now_us() + 30 * 1000000LL;
    while (!stop && burst_left > 0 && now_us() < give_up) {
        round_once(ROUND_MS);
    }
    for (int i = 0; i < n; i++) {
        if (all[i]->status == 0 && !all[i]->dropped) {
            printf("%d 0 %.1f not answered within 30 s\n", i,
                   (double)(now_us() - all[i]->sent_us) / 1000.0);
        }
    }
    close_all();
    for (int i = 0; i < n; i++) {
        free(all[i]->text);
        free(all[i]);
    }
    free(all);
    return 0;
}

/* ---- waiters -------------------------------------------------------------------------- */

static req **waiters_v;
static int n_waiters, granted_before_unlock, unlock_sent, grants, unlocks_ok, unlocks_bad;
static int answered_waiters, bad_answers, too_many, too_many_no_retry;
static req *health_r, *unlock_r, *first_grant;
static const char *resource;

static void waiter_answer(conn *c, req *r)
{
    (void)c;
    char body[512];
    switch (r->kind) {
    case K_WAIT:
        answered_waiters++;
        if (r->dropped) {
            bad_answers++;
            break;
        }
        if (r->status == 503 && r->too_many) {
            too_many++;
            too_many_no_retry += !r->retry_after;
        } else if (r->status == 200) {
            grants++;
            if (!unlock_sent) {
                granted_before_unlock++;
            }
            if (first_grant == NULL) {
                first_grant = r;
            }
            snprintf(body, sizeof body, "{\"resource\":\"%s\",\"owner\":\"fgw-%d\"}", resource,
                     r->idx);
            push(1, new_req(K_UNLOCK_WAITER, r->idx, "POST", "/unlock", "application/json",
                            body, NULL));
        } else {
            bad_answers++;
            if (bad_answers <= 5) {
                printf("waiter %d answered %d: %.200s\n", r->idx, r->status, r->body);
            }
        }
        break;
    case K_UNLOCK_WAITER:
        if (!r->dropped && r->status == 200) {
            unlocks_ok++;
        } else {
            unlocks_bad++;
            if (unlocks_bad <= 5) {
                printf("unlock of fgw-%d answered %d: %.200s\n", r->idx, r->status, r->body);
            }
        }
        break;
    default:
        break;
    }
}

static long long metric_waiters(const char *obs)
{
    struct sockaddr_in o = src_addr;
    if (inet_pton(AF_INET, obs, &o.sin_addr) != 1) {
        return -1;
    }
    int fd = open_fd(&o);
    if (fd < 0) {
        return -1;
    }
    const char *q = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    size_t off = 0, len = strlen(q), blen = 0, cap = 1 << 20;
    char *buf = xmalloc(cap);
    int64_t deadline = now_us() + 2000000;
    long long v = -1;
    for (;;) {
        int64_t left = (deadline - now_us()) / 1000;
        if (left <= 0) {
            break;
        }
        struct pollfd p = {fd, off < len ? POLLOUT : POLLIN, 0};
        if (poll(&p, 1, (int)left) <= 0) {
            continue;
        }
        if (off < len) {
            ssize_t w = send(fd, q + off, len - off, MSG_NOSIGNAL);
            if (w < 0 && errno != EAGAIN && errno != EINTR) {
                break;
            }
            off += w > 0 ? (size_t)w : 0;
            continue;
        }
        ssize_t g = recv(fd, buf + blen, cap - blen - 1, 0);
        if (g <= 0) {
            if (g < 0 && (errno == EAGAIN || errno == EINTR)) {
                continue;
            }
            break;
        }
        blen += (size_t)g;
        if (blen >= cap - 1) {
            break;
        }
    }
    close(fd);
    buf[blen] = '\0';
    const char *m = strstr(buf, "\nfencegate_waiters ");
    if (m != NULL) {
        v = atoll(m + strlen("\nfencegate_waiters "));
    }
    free(buf);
    return v;
}

static int busy_waiters(void)
{
    int n = 0;
    for (int i = 0; i < pool_cap; i++) {
        n += pool[i].state == C_BUSY && pool[i].r->kind == K_WAIT;
    }
    return n;
}

static int run_waiters(int argc, char **argv)
{
    if (argc != 13) {
        fprintf(stderr, "usage: fg_pool waiters SRC PORT RESOURCE N POOL WAIT_MS HOLDER "
                        "HOLDER_TOKEN SETTLE_S BOUND_MS OBS\n");
        return 2;
    }
    resource = argv[4];
    n_waiters = atoi(argv[5]);
    int cap = atoi(argv[6]);
    long wait_ms = atol(argv[7]);
    const char *holder = argv[8];
    long long holder_token = atoll(argv[9]);
    int settle_s = atoi(argv[10]);
    int bound_ms = atoi(argv[11]);
    const char *obs = argv[12];
    int failed = 0;
    char body[512];
    if (n_waiters <= 0 || n_waiters > MAX_REQS / 2) {
        fprintf(stderr, "fg_pool: bad N\n");
        return 2;
    }
    setup(argv[2], argv[3], cap);
    on_answer = waiter_answer;
    waiters_v = xmalloc(sizeof *waiters_v * (size_t)n_waiters);
    for (int i = 0; i < n_waiters; i++) {
        snprintf(body, sizeof body,
                 "{\"resource\":\"%s\",\"owner\":\"fgw-%d\",\"ttl_ms\":10000,\"wait_ms\":%ld,"
                 "\"fair\":true}",
                 resource, i, wait_ms);
        waiters_v[i] = new_req(K_WAIT, i, "POST", "/lock", "application/json", body, NULL);
        push(0, waiters_v[i]);
    }

    /* 2. Settle. */
    int64_t t0 = now_us(), settle_end = t0 + (int64_t)settle_s * 1000000, next_metric = 0;
    long long parked = -1;
    int settled = 0;
    while (!stop && now_us() < settle_end) {
        round_once(ROUND_MS);
        if (queued() == 0 && busy_waiters() > 0 && now_us() >= next_metric) {
            next_metric = now_us() + 50000;
            parked = metric_waiters(obs);
            if (parked >= busy_waiters()) {
                settled = 1;
                break;
            }
        }
        if (answered_waiters == n_waiters) {
            settled = 1; /* nothing parked at all: reported below */
            break;
        }
    }
    int64_t t_settle = now_us();
    if (parked < 0) {
        parked = metric_waiters(obs);
    }
    int inflight = busy_waiters();
    printf("after %.1f s: %d requests sent of %d, %d answered 503 too_many_waiters, %d other "
           "answers, %d in flight (gateway fencegate_waiters %lld), %zu still waiting for a "
           "pool connection, %d pool connections open, %lld dropped\n",
           (double)(t_settle - t0) / 1e6, n_waiters - (int)queued(), n_waiters, too_many,
           answered_waiters - too_many, inflight, parked, queued(), pool_open, dropped_total);
    if (!settled) {
        printf("FAIL: not settled within %d s: %zu of %d requests still wait for a pool "
               "connection (the pool's %d connections held by waiters the gateway parked), "
               "%d answered 503 too_many_waiters\n",
               settle_s, queued(), n_waiters, cap, too_many);
        failed = 1;
    }
    if (inflight == 0) {
        printf("FAIL: no waiter parked: nothing to wake\n");
        failed = 1;
    }

    /* 3. /healthz and /unlock of the holder through the same pool. */
    health_r = new_req(K_HEALTH, 0, "GET", "/healthz", NULL, NULL, NULL);
    snprintf(body, sizeof body, "{\"resource\":\"%s\",\"owner\":\"%s\"}", resource, holder);
    unlock_r = new_req(K_UNLOCK_HOLDER, 0, "POST", "/unlock", "application/json", body, NULL);
    push(1, health_r);
    push(1, unlock_r);
    unlock_sent = 1;
    int64_t t_probe = now_us(), probe_end = t_probe + 5000000;
    while (!stop && now_us() < probe_end && (health_r->status == 0 || unlock_r->status == 0)) {
        round_once(ROUND_MS);
    }
    const req *probes[2] = {health_r, unlock_r};
    const char *names[2] = {"GET /healthz", "POST /unlock of the holder"};
    for (int k = 0; k < 2; k++) {
        const req *r = probes[k];
        if (r->status == 0 && !r->dropped) {
            printf("%s: no answer within 5 s of asking (%s)\n", names[k],
                   r->sent_us == 0 ? "never sent: no free connection in the pool"
                                   : "sent, not answered");
            printf("FAIL: %s from the same address not answered within %d ms\n", names[k],
                   bound_ms);
            failed = 1;
            continue;
        }
        double ms = (double)(r->answered_us - t_probe) / 1000.0;
        printf("%s: %d after %.1f ms (%.1f ms waiting for a connection): %.120s\n", names[k],
               r->dropped ? 0 : r->status, ms, (double)(r->sent_us - t_probe) / 1000.0,
               r->body);
        if (r->dropped || r->status != 200 || ms > bound_ms) {
            printf("FAIL: %s from the same address: %d after %.1f ms, not 200 within %d ms\n",
                   names[k], r->dropped ? 0 : r->status, ms, bound_ms);
            failed = 1;
        }
    }

    /* 4. The first waiter woken. */
    if (unlock_r->status == 200) {
        int64_t wake_end = unlock_r->answered_us + 2LL * bound_ms * 1000;
        while (!stop && first_grant == NULL && now_us() < wake_end) {
            round_once(ROUND_MS);
        }
        if (first_grant == NULL) {
            printf("FAIL: no waiter got the lock within %d ms of the holder's unlock\n",
                   2 * bound_ms);
            failed = 1;
        } else {
            printf("first grant: fgw-%d, token %lld (holder's %lld), %.1f ms after the unlock "
                   "was answered\n",
                   first_grant->idx, first_grant->token, holder_token,
                   (double)(first_grant->answered_us - unlock_r->answered_us) / 1000.0);
            if (first_grant->token <= holder_token) {
                printf("FAIL: the first waiter's token %lld is not above the holder's %lld\n",
                       first_grant->token, holder_token);
                failed = 1;
            }
        }
    }
    if (granted_before_unlock > 0) {
        printf("FAIL: %d waiters got the lock while the holder held it\n", granted_before_unlock);
        failed = 1;
    }

    /* 5. Every waiter answered: granted ones unlocked in turn. Only when the fair queue can
     * drain (the holder unlocked); otherwise the waiters are left to the gateway when the
     * connections close. */
    if (unlock_r->status == 200 && first_grant != NULL) {
        int64_t drain_end = now_us() + (wait_ms + 15000) * 1000;
        while (!stop && now_us() < drain_end &&
               (answered_waiters < n_waiters || unlocks_ok + unlocks_bad < grants)) {
            round_once(ROUND_MS);
        }
        printf("drained in %.1f s: %d granted and unlocked (%d unlocks not 200)\n",
               (double)(now_us() - unlock_r->answered_us) / 1e6, grants, unlocks_bad);
    }

    /* The figures. */
    int64_t *l503 = xmalloc(sizeof *l503 * (size_t)n_waiters);
    size_t n503 = 0;
    int unanswered = 0;
    for (int i = 0; i < n_waiters; i++) {
        req *r = waiters_v[i];
        if (r->status == 503 && r->too_many) {
            l503[n503++] = r->answered_us - r->sent_us;
        }
        if (r->status == 0 && !r->dropped) {
            unanswered++;
        }
    }
    double p50 = pct_ms(l503, n503, 0.5), p99 = pct_ms(l503, n503, 0.99);
    printf("waiters: %d, 503 too_many_waiters %d (p50 %.1f ms, p99 %.1f ms, %d without "
           "Retry-After), granted %d, dropped %lld, other answers %d, unanswered %d\n",
           n_waiters, too_many, p50, p99, too_many_no_retry, grants, dropped_total,
           bad_answers - (int)dropped_total, unanswered);
    if (too_many == 0) {
        printf("FAIL: no waiter was answered 503 too_many_waiters\n");
        failed = 1;
    }
    if (too_many_no_retry > 0) {
        printf("FAIL: %d answers 503 too_many_waiters without Retry-After\n", too_many_no_retry);
        failed = 1;
    }
    if (n503 > 0 && p99 > 5.0 * bound_ms) {
        printf("FAIL: the 503 too_many_waiters answers took up to %.1f ms (p99), past %d ms\n",
               p99, 5 * bound_ms);
        failed = 1;
    }
    if (dropped_total > 0 || bad_answers > 0) {
        printf("FAIL: %lld requests dropped without an answer, %d answered neither 200 nor "
               "503 too_many_waiters\n",
               dropped_total, bad_answers - (int)dropped_total);
        failed = 1;
    }
    if (unanswered > 0) {
        printf("FAIL: %d waiters without an answer at the end\n", unanswered);
        failed = 1;
    }
    if (unlocks_bad > 0) {
        printf("FAIL: %d unlocks of granted waiters not answered 200\n", unlocks_bad);
        failed = 1;
    }
    free(l503);
    close_all();
    return failed;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "repeat") == 0) {
        return run_repeat(argc, argv);
    }
    if (argc >= 2 && strcmp(argv[1], "burst") == 0) {
        return run_burst(argc, argv);
    }
    if (argc >= 2 && strcmp(argv[1], "waiters") == 0) {
        return run_waiters(argc, argv);
    }
    fprintf(stderr, "usage: fg_pool repeat|burst|waiters ...\n");
    return 2;
}
