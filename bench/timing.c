/*
 * timing.c — the clocks and quantiles of timing.h. The only state is timing_ticks_per_ns,
 * written by timing_calibrate() before any timing and read afterwards.
 */
#include <stdlib.h>
#include <time.h>

#include "timing.h"

double timing_ticks_per_ns = 1.0;

uint64_t timing_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double timing_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void timing_sleep_us(long us)
{
    struct timespec ts = { us / 1000000, us % 1000000 * 1000 };
    nanosleep(&ts, NULL);
}

void timing_calibrate(void)
{
    uint64_t n0 = timing_now_ns(), t0 = timing_ticks(), n1, t1;
    do
        n1 = timing_now_ns();
    while (n1 - n0 < 50000000u); /* 50 ms */
    t1 = timing_ticks();
    timing_ticks_per_ns = (double)(t1 - t0) / (double)(n1 - n0);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

uint32_t timing_quantile_u32(uint32_t *v, size_t n, double q)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, cmp_u32);
    return v[(size_t)(q * (double)(n - 1))];
}

uint64_t timing_quantile_u64(uint64_t *v, size_t n, double q)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, cmp_u64);
    return v[(size_t)(q * (double)(n - 1))];
}

uint32_t timing_timer_cost_ns(void)
{
    uint32_t d[1001];
    for (int i = 0; i < 1001; i++) {
        uint64_t a = timing_ticks(), b = timing_ticks();
        d[i] = timing_to_ns(b - a);
    }
    return timing_quantile_u32(d, 1001, 0.5);
}
