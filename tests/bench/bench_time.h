/* Small helpers the single-file benchmarks share: a monotonic clock in ms, and a qsort()
 * comparison of doubles (for medians and percentiles). */
#ifndef FG_BENCH_TIME_H
#define FG_BENCH_TIME_H

#include <time.h>

static inline double bench_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static inline int bench_by_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#endif
