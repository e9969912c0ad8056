/*
 * Shared by the fuzz targets in tests/fuzz/. Each target is one LLVMFuzzerTestOneInput();
 * built with clang it links libFuzzer, built with gcc it links replay.c (see CMakeLists.txt).
 * A broken invariant prints what broke and aborts, which libFuzzer and ctest both report as
 * a crash.
 */
#ifndef FG_FUZZ_H
#define FG_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Aborts with `what` when ok is 0. */
static inline void fuzz_check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz: invariant broken: %s\n", what);
        abort();
    }
}

/* The input as a NUL-terminated string in exactly size + 1 malloc'd bytes (ASan sees any read
 * past it). An embedded NUL ends the string early, as it would in a C API. The caller frees
 * it. Aborts on allocation failure: libFuzzer keeps inputs small. */
static inline char *fuzz_cstr(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    fuzz_check(s != NULL, "malloc");
    for (size_t i = 0; i < size; i++) {
        s[i] = (char)data[i];
    }
    s[size] = '\0';
    return s;
}

/* 1 when ch is in the name alphabet [A-Za-z0-9._:-] of resources, owners and keys. */
static inline int fuzz_name_char(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '.' || ch == '_' || ch == ':' || ch == '-';
}

/* The oracle for every name check: 1 when s is 1 to max bytes of [A-Za-z0-9._:-]. Written
 * independently of the code under test, as the spec states it. */
static inline int fuzz_valid_name(const char *s, size_t max)
{
    size_t n = 0;
    for (; s[n] != '\0'; n++) {
        if (!fuzz_name_char((unsigned char)s[n])) {
            return 0;
        }
    }
    return n >= 1 && n <= max;
}

#endif
