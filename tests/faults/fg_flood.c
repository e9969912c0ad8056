/*
 * fg_flood: the idle-connection flood. One client address opens many TCP
 * connections to the gateway, sends nothing on them, and opens a new one as soon as the
 * gateway closes one, until told to stop.
 *
 *   fg_flood SOURCE_ADDR PORT CONNECTIONS OPENS_PER_S
 *
 * SOURCE_ADDR is the local address to connect from (127.0.0.2: any 127/8 address is the
 * loopback's on Linux, so the flood has an address of its own, apart from the honest clients
 * on 127.0.0.1); the gateway is 127.0.0.1:PORT. At most OPENS_PER_S connections are opened a
 * second (a flood that reopens faster only costs both sides CPU, which is not what this
 * measures). It exits 0 on SIGTERM or SIGINT and prints one line:
 *   "flood opened N refused N cut N open N"
 * opened: connections opened in all (or tried: a failed socket or connect counts too); refused: closed by the gateway within 1 s of their
 * opening (a limit at accept); cut: closed by the gateway later (the request deadline); open:
 * the connections still open at the end. Exits 1 on a setup error, with a message.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 20000
#define REFUSED_WITHIN_MS 1000
#define ROUND_MS 10

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A non-blocking connection from src to dst, under way or made. Returns the descriptor, or -1
 * (the caller tries again in a later round). */
static int open_one(const struct sockaddr_in *src, const struct sockaddr_in *dst)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        return -1;
    }
    if (bind(fd, (const struct sockaddr *)src, sizeof *src) != 0 ||
        (connect(fd, (const struct sockaddr *)dst, sizeof *dst) != 0 && errno != EINPROGRESS)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* True when the gateway has closed fd (end of file, reset or error); reads and drops
 * anything it sent (an error page). */
static int closed_by_peer(int fd, short revents)
{
    char buf[512];
    if ((revents & (POLLERR | POLLHUP)) != 0) {
        return 1;
    }
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

int main(int argc, char **argv)
{
    static struct pollfd pfd[MAX_CONNS];
    static int64_t opened_at[MAX_CONNS];
    struct sockaddr_in src, dst;
    long long opened = 0, refused = 0, cut = 0;

    if (argc != 5) {
        fprintf(stderr, "usage: fg_flood SOURCE_ADDR PORT CONNECTIONS OPENS_PER_S\n");
        return 1;
    }
    int port = atoi(argv[2]), want = atoi(argv[3]), per_s = atoi(argv[4]);
    memset(&src, 0, sizeof src);
    memset(&dst, 0, sizeof dst);
    src.sin_family = dst.sin_family = AF_INET;
    dst.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, argv[1], &src.sin_addr) != 1 || port <= 0 || port > 65535 ||
        want <= 0 || want > MAX_CONNS || per_s <= 0) {
        fprintf(stderr, "fg_flood: bad arguments\n");
        return 1;
    }
    inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    signal(SIGPIPE, SIG_IGN);
    for (int i = 0; i < want; i++) {
        pfd[i].fd = -1;
    }
    int64_t start_ms = now_ms();
    while (!stop) {
        int64_t now = now_ms();
        /* All CONNECTIONS at once at the start, then at most OPENS_PER_S a second. */
        long long allowed = want + (long long)(now - start_ms) * per_s / 1000;
        for (int i = 0; i < want && opened < allowed; i++) {
            if (pfd[i].fd < 0) {
                pfd[i].fd = open_one(&src, &dst);
                pfd[i].events = POLLIN;
                opened_at[i] = now;
                opened++;
            }
        }
        if (poll(pfd, (nfds_t)want, ROUND_MS) < 0 && errno != EINTR) {
            perror("fg_flood: poll");
            return 1;
        }
        now = now_ms();
        for (int i = 0; i < want; i++) {
            if (pfd[i].fd >= 0 && pfd[i].revents != 0 &&
                closed_by_peer(pfd[i].fd, pfd[i].revents)) {
                close(pfd[i].fd);
                pfd[i].fd = -1;
                if (now - opened_at[i] < REFUSED_WITHIN_MS) {
                    refused++;
                } else {
                    cut++;
                }
            }
        }
    }
    int open_now = 0;
    for (int i = 0; i < want; i++) {
        if (pfd[i].fd >= 0) {
            open_now++;
            close(pfd[i].fd);
        }
    }
    printf("flood opened %lld refused %lld cut %lld open %d\n", opened, refused, cut, open_now);
    return 0;
}
