/*
 * timing.h — the clocks of the bench tools: CLOCK_MONOTONIC in ns and s, and the TSC for timing
 * one call alone (rdtscp on x86-64, the monotonic clock elsewhere), calibrated against
 * CLOCK_MONOTONIC; plus the quantiles the tools report.
 *
 * Why the TSC: in a VM clock_gettime may be a system call costing more than the allocator call
 * being measured. timing_calibrate() must run once before timing_to_ns() means anything (it
 * spins 50 ms); after it, timing_ticks_per_ns is only read, so the timers are thread-safe.
 * timing_ticks() is inline: it sits in the tools' timed regions.
 */
#ifndef VPMM_BENCH_TIMING_H
#define VPMM_BENCH_TIMING_H

#include <stddef.h>
#include <stdint.h>

uint64_t timing_now_ns(void); /* CLOCK_MONOTONIC */
double timing_now_s(void);
void timing_sleep_us(long us);

#if defined(__x86_64__)
#include <x86intrin.h>
static inline uint64_t timing_ticks(void)
{
    unsigned aux;
    return __rdtscp(&aux);
}
#else
static inline uint64_t timing_ticks(void)
{
    return timing_now_ns();
}
#endif

/* Ticks per nanosecond: 1.0 until timing_calibrate() has measured it. */
extern double timing_ticks_per_ns;

void timing_calibrate(void);

/* A tick count in ns, rounded, saturating at UINT32_MAX (about 4.3 s). */
static inline uint32_t timing_to_ns(uint64_t ticks)
{
    double ns = (double)ticks / timing_ticks_per_ns;
    return ns > 4e9 ? UINT32_MAX : (uint32_t)(ns + 0.5);
}

/* The median cost of one timing_ticks() pair, in ns (what every timed call includes). */
uint32_t timing_timer_cost_ns(void);

/* Sort v[0..n) in place and return its q-quantile (0.5 = median; element (size_t)(q * (n - 1)));
 * 0 when n is 0. */
uint32_t timing_quantile_u32(uint32_t *v, size_t n, double q);
uint64_t timing_quantile_u64(uint64_t *v, size_t n, double q);

#endif /* VPMM_BENCH_TIMING_H */
