/*
 * report.h — the out-of-memory report (report.c).
 * The structs and their invariants are pool.h's; core.h includes every header of the core.
 */
#ifndef VPMM_REPORT_H
#define VPMM_REPORT_H

#include "pool.h"

/* Writes the out-of-memory report of a failed malloc (oom_report, vpmm_last_error, stderr when
 * verbose: the pool's first VPMM_VERBOSE_OOM_REPORTS in full, later ones counted): what was asked,
 * what the pool holds and where, what the device has left. */
void vpmm_i_oom_report(vpmm_pool_t *p, size_t size, vpmm_stream_t stream);
/* At destroy, when verbose: how many reports were counted but not printed (nothing if none). */
void vpmm_i_oom_summary(const vpmm_pool_t *p);

#define VPMM_VERBOSE_OOM_REPORTS 10
/* The largest free region of arena `only`, or of the whole pool when NULL. */
size_t vpmm_i_largest_free(const vpmm_pool_t *p, const vpmm_arena_t *only);

#endif /* VPMM_REPORT_H */
