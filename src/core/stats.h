/*
 * stats.h — peak bookkeeping and region descriptions (stats.c).
 * The structs and their invariants are pool.h's; core.h includes every header of the core.
 */
#ifndef VPMM_STATS_H
#define VPMM_STATS_H

#include "pool.h"

static inline void vpmm_i_note_peaks(vpmm_pool_t *p)
{
    if (p->c.live_bytes > p->c.peak_live_bytes)
        p->c.peak_live_bytes = p->c.live_bytes;
    if (p->c.mapped_bytes > p->c.peak_mapped_bytes)
        p->c.peak_mapped_bytes = p->c.mapped_bytes;
}

/* The same for a private arena (its mapped bytes are its allocated + free bytes). */
static inline void vpmm_i_arena_note_peaks(vpmm_arena_t *a)
{
    size_t mapped = a->c.allocated_bytes + a->c.free_bytes;
    if (a->c.live_bytes > a->c.peak_live_bytes)
        a->c.peak_live_bytes = a->c.live_bytes;
    if (mapped > a->c.peak_mapped_bytes)
        a->c.peak_mapped_bytes = mapped;
}

/* Fills a public region description. */
void vpmm_i_region_info(const vpmm_region_t *r, vpmm_region_info_t *out);

#endif /* VPMM_STATS_H */
