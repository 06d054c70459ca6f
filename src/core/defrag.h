/*
 * defrag.h — phase 0 (zombie reclaim) and phase 2, a plan's execution (defrag.c).
 * The structs and their invariants are pool.h's; core.h includes every header of the core.
 */
#ifndef VPMM_DEFRAG_H
#define VPMM_DEFRAG_H

#include "pages.h"
#include "policy.h"
#include "pool.h"

/* Phase 0: unmaps zombies whose marker completed; their VA becomes holes, and chunks left empty
 * go back (vpmm_i_chunk_trim). With poll = 0 it queries no event (safe during a capture): only
 * zombies already known complete go. */
void vpmm_i_reclaim_zombies(vpmm_pool_t *p, int poll);
/* Whether zombie z may be unmapped now: not busy (the worker's), its arena not pinned, its marker
 * complete (polled when `poll`). */
int vpmm_i_zombie_due(vpmm_pool_t *p, vpmm_region_t *z, int poll);
/* The books after the first `done` bytes of zombie z (whole handles) were unmapped: their
 * mappings forgotten, that prefix a hole (z is not to be used afterwards; the rest stays zombie).
 */
void vpmm_i_zombie_unmapped(vpmm_pool_t *p, vpmm_region_t *z, size_t done);
/* Phase 2: executes a plan, transactionally; *out_span is a FREE region of s with >= size bytes.
 * New handles come from pre first (may be NULL). When the device refuses the new pages and the
 * plan asked for more than the request needs (a burst's extra, or handles larger than a page),
 * it tries once more with just the needed pages, one handle each (the plan shrinks to that). A
 * refused growth ends the shared arena's allocation burst. */
vpmm_status_t vpmm_i_defrag(vpmm_pool_t *p, vpmm_stream_rec_t *s, vpmm_plan_t *plan,
                            vpmm_precreated_t *pre, vpmm_region_t **out_span);

#endif /* VPMM_DEFRAG_H */
