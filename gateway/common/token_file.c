/*
 * The auth token file: one reader for fencegate and fencectl (token_file.h states the rule),
 * so that a file the one accepts the other reads the same way.
 */
#define _DEFAULT_SOURCE /* explicit_bzero */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "token_file.h"

static int white(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n' || ch == '\f' || ch == '\v';
}

/* Cuts white space from both ends of file[0..n) and checks what is left. Returns the token's
 * start and its length in *len, or NULL with a message in err. */
static const char *trim_check(const char *path, char *file, size_t n, size_t *len, char *err,
                              size_t errlen)
{
    size_t start = 0;

    while (start < n && white(file[start])) {
        start++;
    }
    while (n > start && white(file[n - 1])) {
        n--;
    }
    *len = n - start;
    if (*len == 0) {
        snprintf(err, errlen, "--auth-token-file %s: the file holds no token (it is empty or "
                              "only white space)", path);
        return NULL;
    }
    if (*len > FG_AUTH_TOKEN_MAX) {
        snprintf(err, errlen, "--auth-token-file %s: the token is longer than %d bytes", path,
                 FG_AUTH_TOKEN_MAX);
        return NULL;
    }
    for (size_t i = start; i < n; i++) {
        if (file[i] < 0x21 || file[i] > 0x7e) {
            snprintf(err, errlen, "--auth-token-file %s: the token must be one word of "
                                  "printable ASCII; the file holds white space or another line "
                                  "inside it, or a control character", path);
            return NULL;
        }
    }
    return file + start;
}

long fg_auth_token_read(const char *path, char *buf, char *err, size_t errlen)
{
    char file[FG_AUTH_TOKEN_FILE_MAX + 1];
    size_t len = 0;
    long rc = -1;

    buf[0] = '\0';
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, errlen, "--auth-token-file %s: %s", path, strerror(errno));
        return -1;
    }
    /* One byte more than allowed, to tell a file of exactly the limit from a longer one. */
    size_t n = fread(file, 1, sizeof file, f);
    int read_error = ferror(f);
    fclose(f);
    if (read_error) {
        snprintf(err, errlen, "--auth-token-file %s: read error", path);
    } else if (n > FG_AUTH_TOKEN_FILE_MAX) {
        snprintf(err, errlen, "--auth-token-file %s: the file is longer than %d bytes", path,
                 FG_AUTH_TOKEN_FILE_MAX);
    } else {
        const char *token = trim_check(path, file, n, &len, err, errlen);
        if (token != NULL) {
            memcpy(buf, token, len);
            buf[len] = '\0';
            rc = (long)len;
        }
    }
    explicit_bzero(file, sizeof file); /* no copy of the secret stays on the stack */
    return rc;
}
