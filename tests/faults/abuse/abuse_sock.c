/* Raw HTTP over loopback TCP for the abuse tests (see abuse_sock.h). */
#define _DEFAULT_SOURCE
#include "abuse_sock.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"

int ab_connect(int port)
{
    struct sockaddr_in sa;
    int one = 1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0) {
        return -1;
    }
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* Writes all of buf; a reset or a close by the gateway mid-request ends the write early,
 * which is fine: the gateway may answer before it has read everything. */
static void send_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n <= 0) {
            if (n < 0 && errno == EINTR) {
                continue;
            }
            return;
        }
        buf += n;
        len -= (size_t)n;
    }
}

long ab_read_answer(int fd, int timeout_ms, char *body, size_t bodylen)
{
    char buf[8192];
    size_t used = 0;
    long status = 0;
    int64_t deadline = th_now_ms() + timeout_ms;
    for (;;) {
        int64_t left = deadline - th_now_ms();
        struct pollfd p = {fd, POLLIN, 0};
        if (left <= 0 || poll(&p, 1, (int)left) <= 0) {
            break;
        }
        ssize_t n = recv(fd, buf + used, sizeof buf - 1 - used, 0);
        if (n <= 0) {
            break;
        }
        used += (size_t)n;
        if (used == sizeof buf - 1) {
            break;
        }
    }
    close(fd);
    buf[used] = '\0';
    if (sscanf(buf, "HTTP/1.%*d %ld", &status) != 1) {
        status = 0;
    }
    if (body != NULL && bodylen > 0) {
        const char *start = strstr(buf, "\r\n\r\n");
        snprintf(body, bodylen, "%s", start != NULL ? start + 4 : buf);
    }
    return status;
}

long ab_raw(int port, const void *req, size_t len, int timeout_ms, char *body, size_t bodylen)
{
    int fd = ab_connect(port);

    if (fd < 0) {
        return 0;
    }
    send_all(fd, req, len);
    return ab_read_answer(fd, timeout_ms, body, bodylen);
}

int ab_fd_count(int pid)
{
    char path[64];
    int n = 0;

    snprintf(path, sizeof path, "/proc/%d/fd", pid);
    DIR *d = opendir(path);
    if (d == NULL) {
        return -1;
    }
    for (struct dirent *e = readdir(d); e != NULL; e = readdir(d)) {
        n += e->d_name[0] != '.';
    }
    closedir(d);
    return n;
}
