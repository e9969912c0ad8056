/*
 * The decimal text of a 64-bit integer, without a format string: the numbers of every
 * script call (leases, floors, deadlines) are written on the thread that sends the calls,
 * where snprintf's parsing of "%" PRId64 costs about ten times the conversion itself
 * (callgrind, docs/performance.md). No dependency offers the conversion alone: hiredis's
 * sdsll2str is in none of its headers, and its sdsfromlonglong allocates. Never installed;
 * uses nothing of locklib's own.
 */
#ifndef LOCKLIB_DECIMAL_INTERNAL_H
#define LOCKLIB_DECIMAL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* The most bytes lk__decimal() writes: a sign, 19 digits and the NUL. */
#define LK__DECIMAL_MAX 21

/* Writes n in decimal ("-" before a negative one) and a NUL into buf, which holds at least
 * LK__DECIMAL_MAX bytes; returns the length written, the NUL not counted. */
size_t lk__decimal(char *buf, int64_t n);

#endif
