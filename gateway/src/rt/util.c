/*
 * Small helpers every layer uses: the monotonic clock, printable copies of client bytes, and
 * counting request headers, reading a whole file.
 */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "rt/util.h"

int64_t gw__now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t gw__now_ms(void)
{
    return gw__now_us() / 1000;
}

int64_t gw__wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void gw__printable(char *dst, size_t len, const char *src)
{
    size_t i = 0;
    for (; src[i] != '\0' && i + 1 < len; i++) {
        unsigned char ch = (unsigned char)src[i];
        dst[i] = (ch >= 0x21 && ch <= 0x7e && ch != '"' && ch != '\\') ? (char)ch : '?';
    }
    dst[i] = '\0';
}

typedef struct header_count {
    const char *name;
    const char *value;
    int n;
} header_count;

static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                    const char *value)
{
    header_count *hc = cls;
    (void)kind;
    if (key != NULL && strcasecmp(key, hc->name) == 0) {
        hc->n++;
        hc->value = value;
    }
    return MHD_YES;
}

int gw__header_count(struct MHD_Connection *conn, const char *name, const char **value)
{
    header_count hc = {name, NULL, 0};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, count_header, &hc);
    if (value != NULL) {
        *value = hc.value;
    }
    return hc.n;
}

int gw__read_file(const char *path, size_t max, char **out, size_t *len, char *err,
                  size_t errlen, const char *what)
{
    struct stat st, after;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);

    *out = NULL;
    if (fd < 0) {
        snprintf(err, errlen, "%s %s: cannot open it: %s", what, path, strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s %s: not a regular file%s", what, path,
                 S_ISDIR(st.st_mode) ? " (a directory)" : "");
        close(fd);
        return -1;
    }
    if ((unsigned long long)st.st_size > max) {
        snprintf(err, errlen, "%s %s: over %zu bytes", what, path, max);
        close(fd);
        return -1;
    }
    size_t want = (size_t)st.st_size, got = 0;
    char *buf = malloc(want + 2);
    if (buf == NULL) {
        snprintf(err, errlen, "%s %s: out of memory", what, path);
        close(fd);
        return -1;
    }
    /* One byte more than its size: a file that grew while being read is noticed. */
    while (got < want + 1) {
        ssize_t n = read(fd, buf + got, want + 1 - got);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            snprintf(err, errlen, "%s %s: cannot read it: %s", what, path, strerror(errno));
            free(buf);
            close(fd);
            return -1;
        }
        if (n == 0) {
            break;
        }
        got += (size_t)n;
    }
    int changed = got != want || fstat(fd, &after) != 0 || after.st_size != st.st_size ||
                  after.st_mtim.tv_sec != st.st_mtim.tv_sec ||
                  after.st_mtim.tv_nsec != st.st_mtim.tv_nsec;
    close(fd);
    if (changed) {
        snprintf(err, errlen, "%s %s: the file changed while being read; write it to another "
                              "name and rename it into place", what, path);
        free(buf);
        return -1;
    }
    buf[got] = '\0';
    if (memchr(buf, '\0', got) != NULL) {
        snprintf(err, errlen, "%s %s: has a NUL byte (not a text file)", what, path);
        free(buf);
        return -1;
    }
    *out = buf;
    if (len != NULL) {
        *len = got;
    }
    return 0;
}
