/*
 * Raw HTTP over loopback TCP for the abuse tests: bytes go out exactly as given, so NULs,
 * repeated headers and conflicting framing reach the gateway unchanged (libcurl would
 * refuse or fix them).
 */
#ifndef FG_ABUSE_SOCK_H
#define FG_ABUSE_SOCK_H

#include <stddef.h>

/* A blocking TCP connection to 127.0.0.1:port. Returns the descriptor, or -1. */
int ab_connect(int port);

/* Sends req (len bytes) on a fresh connection and reads the answer until the gateway closes
 * the connection or timeout_ms pass. Returns the status code, 0 when nothing parseable came
 * back. When body is not NULL, the answer's body (or its start) is copied there,
 * NUL-terminated. */
long ab_raw(int port, const void *req, size_t len, int timeout_ms, char *body, size_t bodylen);

/* Reads the answer on fd until the gateway closes the connection or timeout_ms pass, then
 * closes fd. Returns the status code (0 when nothing parseable came back) and copies the
 * body as ab_raw does. */
long ab_read_answer(int fd, int timeout_ms, char *body, size_t bodylen);

/* The number of open descriptors of process pid (/proc/PID/fd), -1 when unreadable. */
int ab_fd_count(int pid);

#endif
