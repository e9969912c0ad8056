/*
 * fg_proxy: a small TCP proxy that the fault suite puts between the gateway and
 * Redis, to delay, reset and blackhole their connections (tc netem is not available here).
 *
 *   fg_proxy TARGET_PORT [LISTEN_PORT]
 *
 * It listens on 127.0.0.1:LISTEN_PORT (0 or none: a free port the kernel picks), prints
 * "port N" on stdout once it listens, and forwards every accepted connection to
 * 127.0.0.1:TARGET_PORT, both directions, with a FIN passed on as a FIN.
 *
 * It is steered by one command per line on stdin. Each command is answered by one line on
 * stdout once it has taken effect ("ok ..." or "error ..."), so a script that reads the
 * answer knows the mode is in force:
 *   pass        forward everything at once (the mode it starts in)
 *   delay MS    hold every chunk read from now on MS ms before forwarding it, both ways
 *               (0 <= MS <= 600000); what was read before keeps its own time, and order is
 *               kept in each direction
 *   reset       reset every current connection, both sides, with a TCP RST (SO_LINGER 0,
 *               dropping what was held), and reset every new one as soon as it is accepted;
 *               answers "ok reset N" with the number of connections reset
 *   blackhole   forward nothing and read nothing, on the current connections and on new ones,
 *               which are accepted and kept open: the peers' reads time out and their writes
 *               stall once the socket buffers are full. Going back to pass or delay forwards
 *               what was held, like a network that heals.
 *   stats       answers "stats open N accepted N reset N failed N": the connections open now,
 *               accepted in all, reset by the reset mode or the connection cap, and closed
 *               after an error (a peer's RST, a failed connect to the target)
 *
 * Bounds: at most MAX_PAIRS connections at a time (a new one beyond that is reset at once),
 * and at most QUEUE_CAP bytes held per direction of a connection (above it, that side is not
 * read until the other side has taken some), so its memory stays bounded whatever the peers
 * do. Every descriptor of a connection is closed when either side is done with it.
 *
 * It exits 0 on SIGTERM or SIGINT, or when stdin reaches its end (the script that steers it
 * is gone); 1 on a setup error, with a message on stderr.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_PAIRS 256
#define QUEUE_CAP (256 * 1024)
#define READ_CHUNK 16384
#define ACCEPTS_PER_ROUND 64
#define MAX_DELAY_MS 600000L
#define LINE_MAX_LEN 256

enum { SIDE_CLIENT, SIDE_SERVER };
enum mode { MODE_PASS, MODE_DELAY, MODE_RESET, MODE_BLACKHOLE };

/* Bytes read from one side, waiting to be written to the other. */
typedef struct chunk {
    struct chunk *next;
    int64_t due_ms; /* not written before this CLOCK_MONOTONIC time */
    size_t off, len;
    char data[];
} chunk;

/* One direction of a connection: what was read from a side and is owed to the other. */
typedef struct flow {
    chunk *head, *tail;
    size_t queued; /* bytes held, at most QUEUE_CAP + READ_CHUNK */
    int eof;       /* the source side sent its FIN */
    int shut;      /* that FIN was passed on (shutdown SHUT_WR of the other side) */
} flow;

/* A proxied connection. flow[s] is read from fd[s] and written to fd[1 - s]. */
typedef struct pair {
    int fd[2];
    int connecting; /* the connect to the target has not completed yet */
    flow flow[2];
} pair;

typedef struct proxy {
    int listen_fd;
    int signal_fd; /* read end of the self-pipe the signal handler writes to */
    int target_port;
    enum mode mode;
    long delay_ms;
    int stop;
    pair *pairs[MAX_PAIRS];
    size_t npairs;
    char line[LINE_MAX_LEN];
    size_t line_len;
    int line_too_long;
    unsigned long long accepted, resets, failed;
} proxy;

static int signal_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
    int saved = errno;
    char byte = (char)sig;
    ssize_t n = write(signal_pipe[1], &byte, 1);
    (void)n; /* a full pipe already holds a wake-up */
    errno = saved;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int set_nonblock(int fd)
{
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
        return -1;
    }
    return fcntl(fd, F_SETFD, FD_CLOEXEC);
}

/* Prints one answer line on stdout at once; the steering script waits for it. */
static void answer(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void answer(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

/* Closes fd so that the peer sees a TCP RST instead of a FIN. */
static void close_with_rst(int fd)
{
    struct linger lg = {1, 0};
    if (fd < 0) {
        return;
    }
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(fd);
}

static void flow_free(flow *f)
{
    while (f->head != NULL) {
        chunk *next = f->head->next;
        free(f->head);
        f->head = next;
    }
    f->tail = NULL;
    f->queued = 0;
}

/* Closes both sides of pr (with RST when rst is set) and frees it. */
static void pair_close(pair *pr, int rst)
{
    for (int s = 0; s < 2; s++) {
        if (rst) {
            close_with_rst(pr->fd[s]);
        } else if (pr->fd[s] >= 0) {
            close(pr->fd[s]);
        }
        flow_free(&pr->flow[s]);
    }
    free(pr);
}

/* ---- Listening and accepting ---------------------------------------------------------- */

static struct sockaddr_in loopback(int port)
{
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return sa;
}

/* Listens on 127.0.0.1:port (0: any free port). Returns the port, or -1 with a message. */
static int listen_on(proxy *p, int port)
{
    struct sockaddr_in sa = loopback(port);
    socklen_t len = sizeof sa;
    int one = 1;

    p->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    if (p->listen_fd < 0 || set_nonblock(p->listen_fd) != 0) {
        perror("fg_proxy: socket");
        return -1;
    }
    setsockopt(p->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(p->listen_fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        listen(p->listen_fd, 128) != 0 ||
        getsockname(p->listen_fd, (struct sockaddr *)&sa, &len) != 0) {
        perror("fg_proxy: bind/listen");
        return -1;
    }
    return ntohs(sa.sin_port);
}

/* Starts the connect of a new pair to the target. Returns 0, or -1 when it failed at once. */
static int connect_target(proxy *p, pair *pr)
{
    struct sockaddr_in sa = loopback(p->target_port);
    int one = 1;

    pr->fd[SIDE_SERVER] = socket(AF_INET, SOCK_STREAM, 0);
    if (pr->fd[SIDE_SERVER] < 0 || set_nonblock(pr->fd[SIDE_SERVER]) != 0) {
        return -1;
    }
    setsockopt(pr->fd[SIDE_SERVER], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(pr->fd[SIDE_SERVER], (struct sockaddr *)&sa, sizeof sa) == 0) {
        return 0;
    }
    if (errno != EINPROGRESS) {
        return -1;
    }
    pr->connecting = 1;
    return 0;
}

/* Takes an accepted client connection: resets it in the reset mode or beyond the cap,
 * otherwise starts its connection to the target. */
static void take_client(proxy *p, int fd)
{
    pair *pr = NULL;
    int one = 1;

    p->accepted++;
    if (p->mode == MODE_RESET || p->npairs == MAX_PAIRS || set_nonblock(fd) != 0) {
        close_with_rst(fd);
        p->resets++;
        return;
    }
    pr = calloc(1, sizeof *pr);
    if (pr == NULL) {
        close_with_rst(fd);
        p->failed++;
        return;
    }
    pr->fd[SIDE_CLIENT] = fd;
    pr->fd[SIDE_SERVER] = -1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect_target(p, pr) != 0) {
        pair_close(pr, 1);
        p->failed++;
        return;
    }
    p->pairs[p->npairs++] = pr;
}

static void accept_clients(proxy *p)
{
    for (int i = 0; i < ACCEPTS_PER_ROUND; i++) {
        int fd = accept(p->listen_fd, NULL, NULL);
        if (fd < 0) {
            /* EAGAIN: none left. A connection that died in the backlog (ECONNABORTED) is
             * skipped; anything else (EMFILE) is retried next round. */
            if (errno == ECONNABORTED || errno == EINTR) {
                continue;
            }
            return;
        }
        take_client(p, fd);
    }
}

/* ---- Moving bytes ------------------------------------------------------------------- */

static int can_read(const pair *pr, int side)
{
    const flow *f = &pr->flow[side];
    if (side == SIDE_SERVER && pr->connecting) {
        return 0;
    }
    return !f->eof && f->queued < QUEUE_CAP;
}

/* 1 when the flow has bytes that may be written now. */
static int flow_due(const flow *f, int64_t now)
{
    return f->head != NULL && f->head->due_ms <= now;
}

/* Reads once from side into its flow. Returns 0, or -1 when the pair must be reset. */
static int pair_read(proxy *p, pair *pr, int side, int64_t now)
{
    char buf[READ_CHUNK];
    flow *f = &pr->flow[side];
    chunk *c = NULL;
    ssize_t n = read(pr->fd[side], buf, sizeof buf);

    if (n < 0) {
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
    }
    if (n == 0) {
        f->eof = 1;
        return 0;
    }
    c = malloc(sizeof *c + (size_t)n);
    if (c == NULL) {
        return -1;
    }
    c->next = NULL;
    c->due_ms = now + (p->mode == MODE_DELAY ? p->delay_ms : 0);
    c->off = 0;
    c->len = (size_t)n;
    memcpy(c->data, buf, (size_t)n);
    if (f->tail != NULL) {
        f->tail->next = c;
    } else {
        f->head = c;
    }
    f->tail = c;
    f->queued += (size_t)n;
    return 0;
}

/* Writes what is due of flow[side] to the other side, and passes its FIN on once the flow
 * is empty. Returns 0, or -1 when the pair must be reset. */
static int pair_write(pair *pr, int side, int64_t now)
{
    flow *f = &pr->flow[side];
    int to = pr->fd[1 - side];

    while (flow_due(f, now)) {
        chunk *c = f->head;
        ssize_t n = send(to, c->data + c->off, c->len - c->off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
        }
        c->off += (size_t)n;
        f->queued -= (size_t)n;
        if (c->off == c->len) {
            f->head = c->next;
            if (f->head == NULL) {
                f->tail = NULL;
            }
            free(c);
        }
    }
    if (f->eof && f->head == NULL && !f->shut) {
        f->shut = 1;
        if (shutdown(to, SHUT_WR) != 0 && errno != ENOTCONN) {
            return -1;
        }
    }
    return 0;
}

/* Completes a pending connect to the target. Returns 0, or -1 when it failed. */
static int pair_connected(pair *pr, short revents)
{
    int err = 0;
    socklen_t len = sizeof err;

    if ((revents & (POLLOUT | POLLERR | POLLHUP)) == 0) {
        return 0;
    }
    if (getsockopt(pr->fd[SIDE_SERVER], SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
        return -1;
    }
    pr->connecting = 0;
    return 0;
}

/* One round of a pair after poll: reads what poll reported, writes what is due. Returns 1
 * when the pair is over (both FINs passed on, or an error), 0 otherwise. */
static int pair_step(proxy *p, pair *pr, const short revents[2], int64_t now)
{
    if (pr->connecting && pair_connected(pr, revents[SIDE_SERVER]) != 0) {
        p->failed++;
        pair_close(pr, 1);
        return 1;
    }
    for (int s = 0; s < 2; s++) {
        int readable = (revents[s] & (POLLIN | POLLHUP | POLLERR)) != 0;
        if ((readable && can_read(pr, s) && pair_read(p, pr, s, now) != 0) ||
            (!pr->connecting && pair_write(pr, s, now) != 0)) {
            p->failed++;
            pair_close(pr, 1);
            return 1;
        }
    }
    if (pr->flow[0].shut && pr->flow[1].shut) {
        pair_close(pr, 0);
        return 1;
    }
    return 0;
}

/* ---- poll ----------------------------------------------------------------------------- */

enum { PFD_SIGNAL, PFD_STDIN, PFD_LISTEN, PFD_PAIRS };

/* The events side of pr waits for; 0 when it waits for nothing. */
static short side_events(const pair *pr, int side, int64_t now)
{
    short ev = 0;
    if (side == SIDE_SERVER && pr->connecting) {
        return POLLOUT;
    }
    if (can_read(pr, side)) {
        ev |= POLLIN;
    }
    if (!pr->connecting && flow_due(&pr->flow[1 - side], now)) {
        ev |= POLLOUT;
    }
    return ev;
}

/* Fills pfds for this round and returns the poll timeout: until the next held chunk is due,
 * or -1. A side that waits for nothing, and every side in the blackhole mode, is left out
 * (fd -1), so an error or hang-up there cannot make poll spin; it is seen on the next read
 * or write. */
static int build_poll(const proxy *p, struct pollfd *pfds, int stdin_open, int64_t now)
{
    int64_t next = -1;

    pfds[PFD_SIGNAL] = (struct pollfd){p->signal_fd, POLLIN, 0};
    pfds[PFD_STDIN] = (struct pollfd){stdin_open ? STDIN_FILENO : -1, POLLIN, 0};
    pfds[PFD_LISTEN] = (struct pollfd){p->listen_fd, POLLIN, 0};
    for (size_t i = 0; i < p->npairs; i++) {
        const pair *pr = p->pairs[i];
        for (int s = 0; s < 2; s++) {
            short ev = p->mode == MODE_BLACKHOLE ? 0 : side_events(pr, s, now);
            const chunk *head = pr->flow[s].head;
            pfds[PFD_PAIRS + 2 * i + s] = (struct pollfd){ev != 0 ? pr->fd[s] : -1, ev, 0};
            if (p->mode != MODE_BLACKHOLE && head != NULL && head->due_ms > now &&
                (next < 0 || head->due_ms < next)) {
                next = head->due_ms;
            }
        }
    }
    if (next < 0) {
        return -1;
    }
    return (int)(next - now);
}

/* Runs every pair's round and drops the pairs that are over. */
static void step_pairs(proxy *p, const struct pollfd *pfds, int64_t now)
{
    size_t kept = 0;
    size_t n = p->npairs;

    if (p->mode == MODE_BLACKHOLE) {
        return;
    }
    for (size_t i = 0; i < n; i++) {
        short revents[2] = {pfds[PFD_PAIRS + 2 * i].revents,
                            pfds[PFD_PAIRS + 2 * i + 1].revents};
        if (pair_step(p, p->pairs[i], revents, now) == 0) {
            p->pairs[kept++] = p->pairs[i];
        }
    }
    p->npairs = kept;
}

/* ---- Commands on stdin ----------------------------------------------------------------- */

static void reset_all(proxy *p)
{
    size_t n = p->npairs;
    for (size_t i = 0; i < n; i++) {
        pair_close(p->pairs[i], 1);
    }
    p->npairs = 0;
    p->resets += n;
    answer("ok reset %zu", n);
}

static void run_command(proxy *p, const char *line)
{
    char word[16];
    long ms = 0;
    char extra = 0;
    int fields = sscanf(line, "%15s %ld %c", word, &ms, &extra);

    if (fields == 1 && strcmp(word, "pass") == 0) {
        p->mode = MODE_PASS;
        answer("ok pass");
    } else if (fields == 2 && strcmp(word, "delay") == 0 && ms >= 0 && ms <= MAX_DELAY_MS) {
        p->mode = MODE_DELAY;
        p->delay_ms = ms;
        answer("ok delay %ld", ms);
    } else if (fields == 1 && strcmp(word, "reset") == 0) {
        p->mode = MODE_RESET;
        reset_all(p);
    } else if (fields == 1 && strcmp(word, "blackhole") == 0) {
        p->mode = MODE_BLACKHOLE;
        answer("ok blackhole");
    } else if (fields == 1 && strcmp(word, "stats") == 0) {
        answer("stats open %zu accepted %llu reset %llu failed %llu", p->npairs, p->accepted,
               p->resets, p->failed);
    } else {
        answer("error unknown command: %.60s", line);
    }
}

/* Reads what stdin has and runs every complete line. Returns 0, or -1 at its end. */
static int read_commands(proxy *p)
{
    char buf[512];
    ssize_t n = read(STDIN_FILENO, buf, sizeof buf);

    if (n < 0) {
        return errno == EINTR || errno == EAGAIN ? 0 : -1;
    }
    if (n == 0) {
        return -1;
    }
    for (ssize_t i = 0; i < n; i++) {
        if (buf[i] != '\n') {
            if (p->line_len + 1 < sizeof p->line) {
                p->line[p->line_len++] = buf[i];
            } else {
                p->line_too_long = 1;
            }
            continue;
        }
        p->line[p->line_len] = '\0';
        if (p->line_too_long) {
            answer("error line too long");
        } else {
            run_command(p, p->line);
        }
        p->line_len = 0;
        p->line_too_long = 0;
    }
    return 0;
}

/* ---- main ------------------------------------------------------------------------------ */

static int install_signals(void)
{
    struct sigaction sa;

    if (pipe(signal_pipe) != 0 || set_nonblock(signal_pipe[0]) != 0 ||
        set_nonblock(signal_pipe[1]) != 0) {
        perror("fg_proxy: pipe");
        return -1;
    }
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_signal;
    if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0) {
        perror("fg_proxy: sigaction");
        return -1;
    }
    /* A peer gone mid-write is an EPIPE from send (MSG_NOSIGNAL); ignore any other source. */
    sa.sa_handler = SIG_IGN;
    return sigaction(SIGPIPE, &sa, NULL);
}

/* The event loop: until a signal or the end of stdin. */
static void run(proxy *p)
{
    static struct pollfd pfds[PFD_PAIRS + 2 * MAX_PAIRS];
    int stdin_open = 1;

    while (!p->stop) {
        int64_t now = now_ms();
        int timeout = build_poll(p, pfds, stdin_open, now);
        int n = poll(pfds, (nfds_t)(PFD_PAIRS + 2 * p->npairs), timeout);
        if (n < 0 && errno != EINTR) {
            perror("fg_proxy: poll");
            return;
        }
        if (n < 0) {
            continue;
        }
        now = now_ms();
        if (pfds[PFD_SIGNAL].revents != 0) {
            return;
        }
        /* Pairs first: the commands below may close pairs that pfds still describe. */
        step_pairs(p, pfds, now);
        if (pfds[PFD_LISTEN].revents != 0) {
            accept_clients(p);
        }
        if (pfds[PFD_STDIN].revents != 0 && read_commands(p) != 0) {
            return;
        }
    }
}

int main(int argc, char **argv)
{
    proxy *p = NULL;
    char *end = NULL;
    long target = 0;
    long port = 0;
    int rc = 1;

    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: fg_proxy TARGET_PORT [LISTEN_PORT]\n");
        return 2;
    }
    target = strtol(argv[1], &end, 10);
    if (*end != '\0' || target < 1 || target > 65535) {
        fprintf(stderr, "fg_proxy: bad target port %s\n", argv[1]);
        return 2;
    }
    if (argc == 3) {
        port = strtol(argv[2], &end, 10);
        if (*end != '\0' || port < 0 || port > 65535) {
            fprintf(stderr, "fg_proxy: bad listen port %s\n", argv[2]);
            return 2;
        }
    }
    p = calloc(1, sizeof *p);
    if (p == NULL) {
        goto out;
    }
    p->listen_fd = -1;
    if (install_signals() != 0) {
        goto out;
    }
    p->signal_fd = signal_pipe[0];
    p->target_port = (int)target;
    p->mode = MODE_PASS;
    port = listen_on(p, (int)port);
    if (port < 0) {
        goto out;
    }
    answer("port %ld", port);
    run(p);
    rc = 0;
out:
    if (p != NULL) {
        for (size_t i = 0; i < p->npairs; i++) {
            pair_close(p->pairs[i], 0);
        }
        if (p->listen_fd >= 0) {
            close(p->listen_fd);
        }
        free(p);
    }
    return rc;
}
