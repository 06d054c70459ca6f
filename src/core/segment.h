/*
 * segment.h — segments, each handle at its live address, and the segment hook (segment.c).
 * The structs and their invariants are pool.h's; core.h includes every header of the core.
 */
#ifndef VPMM_SEGMENT_H
#define VPMM_SEGMENT_H

#include "pool.h"

/* Reports that ph's live mapping, owned by arena a, appears or goes (one pointer test when no
 * hook is set: slow paths only). */
void vpmm_i_segment_report(vpmm_pool_t *p, vpmm_segment_event_t ev, uintptr_t va, size_t size,
                           const vpmm_arena_t *a);
static inline void vpmm_i_segment(vpmm_pool_t *p, vpmm_segment_event_t ev, const vpmm_phys_t *ph,
                                  const vpmm_arena_t *a)
{
    if (VPMM_UNLIKELY(p->segment_hook != NULL))
        vpmm_i_segment_report(p, ev, ph->va, ph->size, a);
}
/* Every live handle of chunk c as appearing or going (graph-pool dissolve, pool destruction). */
void vpmm_i_segment_chunk(vpmm_pool_t *p, const vpmm_chunk_t *c, vpmm_segment_event_t ev);

#endif /* VPMM_SEGMENT_H */
