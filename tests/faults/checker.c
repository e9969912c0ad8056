/*
 * fg_checker: checks a fault-suite history against the invariants (check.h).
 *
 *   fg_checker [--expect-fenced N] [--expect-superseded N] [--expect-takeovers N]
 *              [--expect-fenced-reads N] [--strict-leases] [--lost-grants] HISTORY...
 *
 * Prints every violation with the operations involved, then one summary line. Exits 1 on any
 * hard violation, or when a scenario did not produce its fault as often as it says, so that it
 * cannot pass without it: fewer than N writes of frozen or robbed clients fenced off (409
 * stale_token); fewer than N of them refused while the next holder had locked but not yet
 * written (superseded); fewer than N locks of killed or frozen holders taken over; fewer
 * than N fenced reads of frozen or robbed clients refused 409 stale_token. With
 * --strict-leases, overlapping lease windows (invariant 7) are a hard violation, for
 * scenarios in which Redis loses no data. With --lost-grants, fenced reads answered 200
 * after a newer grant (invariant 12) are only reported: Redis may lose that grant and an
 * LMDB store keeps no grant per resource to refuse the read with. Exits 2 on bad usage.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"

typedef struct expect {
    long fenced;
    long superseded;
    long takeovers;
    long fenced_reads;
} expect;

/* Reads the options before the first history into opt and want. Returns the index of the
 * first history, or -1 on bad usage. */
static int parse_options(int argc, char **argv, fc_options *opt, expect *want)
{
    int i = 1;
    for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
        long *count = NULL;
        if (strcmp(argv[i], "--strict-leases") == 0) {
            opt->strict_leases = 1;
            continue;
        }
        if (strcmp(argv[i], "--lost-grants") == 0) {
            opt->lost_grants = 1;
            continue;
        }
        if (strcmp(argv[i], "--expect-fenced") == 0)
            count = &want->fenced;
        else if (strcmp(argv[i], "--expect-superseded") == 0)
            count = &want->superseded;
        else if (strcmp(argv[i], "--expect-takeovers") == 0)
            count = &want->takeovers;
        else if (strcmp(argv[i], "--expect-fenced-reads") == 0)
            count = &want->fenced_reads;
        if (count == NULL || i + 1 >= argc)
            return -1;
        char *end = NULL;
        *count = strtol(argv[++i], &end, 10);
        if (end == argv[i] || *end != '\0' || *count < 0)
            return -1;
    }
    return i < argc ? i : -1;
}

/* Prints why the run failed for a fault it did not produce often enough; returns 1 if so. */
static int short_of(const char *what, long got, long want)
{
    if (got >= want)
        return 0;
    printf("checker: FAIL (%s: %ld, expected at least %ld)\n", what, got, want);
    return 1;
}

int main(int argc, char **argv)
{
    fh_history h = {0};
    fc_result res;
    fc_options opt = {0};
    expect want = {0, 0, 0, 0};
    int i = parse_options(argc, argv, &opt, &want);

    if (i < 0) {
        fprintf(stderr, "usage: fg_checker [--expect-fenced N] [--expect-superseded N] "
                        "[--expect-takeovers N] [--expect-fenced-reads N] [--strict-leases] [--lost-grants] "
                        "HISTORY...\n");
        return 2;
    }
    for (; i < argc; i++) {
        if (fh_load(&h, argv[i]) != 0) {
            fh_free(&h);
            return 2;
        }
    }
    fc_check(&h, &opt, stdout, &res);
    printf("checker: %ld operations; violations:", res.ops);
    for (int inv = 1; inv < FC_INVARIANTS; inv++)
        if (inv != 9) /* the runner's idle check, not the checker's */
            printf(" %d=%ld%s", inv, res.violations[inv],
                   (inv == 7 && !opt.strict_leases) || (inv == 12 && opt.lost_grants)
                       ? "(reported only)" : "");
    printf("; fenced-off writes of frozen/robbed clients: %ld (expected >= %ld), of them before "
           "the next holder wrote: %ld (expected >= %ld); takeovers of lost holders: %ld "
           "(expected >= %ld); fenced-off reads of frozen/robbed clients: %ld (expected >= "
           "%ld); transactions committed: %ld\n",
           res.fenced, want.fenced, res.superseded, want.superseded, res.takeovers,
           want.takeovers, res.fenced_reads, want.fenced_reads, res.txns);
    fh_free(&h);
    if (res.hard > 0) {
        printf("checker: FAIL (%ld hard violations)\n", res.hard);
        return 1;
    }
    if (short_of("the fault never fenced a frozen client off", res.fenced, want.fenced) ||
        short_of("late writes refused before the next holder wrote", res.superseded,
                 want.superseded) ||
        short_of("locks of killed or frozen holders taken over", res.takeovers, want.takeovers) ||
        short_of("late fenced reads refused", res.fenced_reads, want.fenced_reads))
        return 1;
    printf("checker: OK\n");
    return 0;
}
