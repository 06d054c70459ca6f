/*
 * driver_count.h — a decorator over any vpmm_driver_t that counts every call per entry point and
 * the time spent in it (CLOCK_MONOTONIC around the inner call), for vpmm_driver_stats: where a
 * pool's driver time goes, by kind of call.
 *
 * Zero cost unless asked for: the API floor inserts it only for a pool created with
 * config.driver_stats = 1 (or VPMM_DRIVER_STATS=1); other pools call their backend directly.
 * When inserted, each driver call costs two clock reads and three relaxed atomic additions more.
 *
 * Transparent: the wrapper keeps the inner's name ("cuda", "host"), so reports and traces read the
 * same, and copies the inner's last_code / last_call up on failure (driver.h rule 1).
 * Thread-safety: the counters are atomics, so entries may run on several threads at once (driver.h
 * rule 7) and vpmm_count_get may read them at any time, without the pool's lock; a snapshot taken
 * while other threads call the driver may be a few calls behind in some entries.
 * Invariants: calls[e] ≥ failures[e] for every entry; tests/test_driver_stats.c checks the counts
 * against the fault decorator's, entry by entry.
 */
#ifndef VPMM_DRIVER_COUNT_H
#define VPMM_DRIVER_COUNT_H

#include "driver.h"

/*
 * Wraps inner. owns_inner: closing the wrapper closes inner too. On failure
 * (VPMM_DRV_INVALID for NULL arguments, VPMM_DRV_OUT_OF_MEMORY) *out is NULL and inner is the
 * caller's, untouched.
 */
vpmm_dres_t vpmm_count_wrap(vpmm_driver_t *inner, int owns_inner, vpmm_driver_t **out);

/* Whether d is a counting wrapper. */
int vpmm_count_is(const vpmm_driver_t *d);

/* The counts so far into out (every entry, totals too). Returns -1, leaving out alone, when w is
 * not a counting wrapper. */
int vpmm_count_get(const vpmm_driver_t *w, vpmm_driver_stats_t *out);

#endif /* VPMM_DRIVER_COUNT_H */
