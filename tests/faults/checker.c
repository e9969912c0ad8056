/*
 * fg_checker: checks a fault-suite history against issue 7's invariants (check.h).
 *
 *   fg_checker [--expect-fenced N] HISTORY...
 *
 * Prints every violation with the operations involved, then one summary line. Exits 1 on any
 * hard violation, or when fewer than N writes of frozen or robbed clients were fenced off
 * (409 stale_token), so a scenario that never produced its fault cannot pass; 2 on bad usage.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"

int main(int argc, char **argv)
{
    fh_history h = {0};
    fc_result res;
    long expect_fenced = 0;
    int i = 1;

    if (argc > 2 && strcmp(argv[1], "--expect-fenced") == 0) {
        expect_fenced = strtol(argv[2], NULL, 10);
        i = 3;
    }
    if (i >= argc) {
        fprintf(stderr, "usage: fg_checker [--expect-fenced N] HISTORY...\n");
        return 2;
    }
    for (; i < argc; i++) {
        if (fh_load(&h, argv[i]) != 0) {
            fh_free(&h);
            return 2;
        }
    }
    fc_check(&h, stdout, &res);
    printf("checker: %ld operations; violations:", res.ops);
    for (int inv = 1; inv <= 8; inv++)
        printf(" %d=%ld%s", inv, res.violations[inv], inv == 7 ? "(reported only)" : "");
    printf("; fenced-off writes of frozen/robbed clients: %ld (expected >= %ld)\n", res.fenced,
           expect_fenced);
    fh_free(&h);
    if (res.hard > 0) {
        printf("checker: FAIL (%ld hard violations)\n", res.hard);
        return 1;
    }
    if (res.fenced < expect_fenced) {
        printf("checker: FAIL (the fault never fenced a frozen client off)\n");
        return 1;
    }
    printf("checker: OK\n");
    return 0;
}
