/*
 * The auth token file (token_file.c), read one way by fencegate and fencectl. Includes
 * nothing of either.
 */
#ifndef FENCEGATE_TOKEN_FILE_H
#define FENCEGATE_TOKEN_FILE_H

#include <stddef.h>

#define FG_AUTH_TOKEN_MAX 511       /* the longest bearer token */
#define FG_AUTH_TOKEN_FILE_MAX 4096 /* the longest token file, white space included */

/* Reads the bearer token of an --auth-token-file. The rule, for both binaries: the token is
 * the whole file less leading and trailing white space (so `echo secret > file` and a CRLF
 * line both work); it must be 1 to FG_AUTH_TOKEN_MAX bytes of printable ASCII without white
 * space, so a second line is refused rather than silently ignored or sent. buf holds at least
 * FG_AUTH_TOKEN_MAX + 1 bytes and gets the token, NUL-terminated. Returns the token's length,
 * or -1 with a message that starts "--auth-token-file PATH: " in err (buf then holds
 * nothing of the file). */
long fg_auth_token_read(const char *path, char *buf, char *err, size_t errlen);

#endif
