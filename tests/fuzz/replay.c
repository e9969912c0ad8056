/*
 * A main() for the fuzz targets when libFuzzer is not there (gcc builds): runs every file of
 * each directory or file named on the command line through LLVMFuzzerTestOneInput() once.
 * ctest uses it to replay each target's seed corpus (tests/fuzz/corpus/<target>/) in the
 * normal and the ASan+UBSan builds, so the targets and their invariants are checked on every
 * test run, not only when someone runs scripts/fuzz.sh.
 *
 * Exits 0 when every input ran (a target reports a broken invariant by aborting), 1 when an
 * input cannot be read or a directory holds no input at all: an empty corpus would pass
 * while testing nothing.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Runs one file. Returns 0, or -1 when it cannot be read. */
static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t *data = NULL;
    long size = 0;
    int rc = -1;

    if (f == NULL) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return -1;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fprintf(stderr, "replay: cannot size %s\n", path);
        goto out;
    }
    /* Exactly size bytes (at least 1 for malloc), so ASan sees any read past the input. */
    data = malloc(size > 0 ? (size_t)size : 1);
    if (data == NULL || fread(data, 1, (size_t)size, f) != (size_t)size) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        goto out;
    }
    LLVMFuzzerTestOneInput(data, (size_t)size);
    rc = 0;
out:
    free(data);
    fclose(f);
    return rc;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs every regular file of dir, in name order so a failure is reproducible. Returns the
 * number run, or -1. */
static long run_dir(const char *dir)
{
    DIR *d = opendir(dir);
    char **names = NULL;
    size_t n = 0, cap = 0;
    long ran = 0;
    struct dirent *e = NULL;

    if (d == NULL) {
        fprintf(stderr, "replay: cannot open directory %s\n", dir);
        return -1;
    }
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') {
            continue;
        }
        if (n == cap) {
            size_t grown_cap = cap == 0 ? 16 : cap * 2;
            char **grown = realloc(names, grown_cap * sizeof *names);
            if (grown == NULL) {
                ran = -1;
                goto out;
            }
            names = grown;
            cap = grown_cap;
        }
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        names[n] = malloc(len);
        if (names[n] == NULL) {
            ran = -1;
            goto out;
        }
        snprintf(names[n], len, "%s/%s", dir, e->d_name);
        n++;
    }
    qsort(names, n, sizeof *names, by_name);
    for (size_t i = 0; i < n && ran >= 0; i++) {
        ran = run_file(names[i]) == 0 ? ran + 1 : -1;
    }
out:
    for (size_t i = 0; i < n; i++) {
        free(names[i]);
    }
    free(names);
    closedir(d);
    return ran;
}

int main(int argc, char **argv)
{
    struct stat st;

    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
        return 1;
    }
    for (int i = 1; i < argc; i++) {
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s does not exist\n", argv[i]);
            return 1;
        }
        long ran = S_ISDIR(st.st_mode) ? run_dir(argv[i]) : run_file(argv[i]) == 0 ? 1 : -1;
        if (ran <= 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], ran == 0 ? "no inputs" : "failed");
            return 1;
        }
        printf("replay: %s: %ld inputs, no invariant broken\n", argv[i], ran);
    }
    return 0;
}
