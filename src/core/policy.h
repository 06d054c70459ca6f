/*
 * policy.h — where an allocation goes: the fits and the growth plan (policy.c).
 * The structs and their invariants are pool.h's; core.h includes every header of the core.
 */
#ifndef VPMM_POLICY_H
#define VPMM_POLICY_H

#include "pool.h"

/* Phase 1a: best fit among regions s may use without waiting (its own pending ones, ready ones). */
vpmm_region_t *vpmm_i_fit_nowait(vpmm_pool_t *p, vpmm_stream_rec_t *s, size_t size);
/* Phase 1c: best fit among other streams' pending regions (a GPU-side wait makes them usable). */
vpmm_region_t *vpmm_i_fit_wait(vpmm_pool_t *p, vpmm_stream_rec_t *s, size_t size);
/* Best fit in the other size class (I13) when memory ran short: as vpmm_i_fit_nowait, or with
 * `wait` as vpmm_i_fit_wait. */
vpmm_region_t *vpmm_i_fit_across(vpmm_pool_t *p, vpmm_stream_rec_t *s, size_t size, int wait);
/* A private arena's best fit for s: its ready regions and s's side tree (no wait, no query). */
vpmm_region_t *vpmm_i_fit_private(vpmm_pool_t *p, vpmm_arena_t *a, vpmm_stream_rec_t *s,
                                  size_t size);

/* One run of fully free pages to move: [addr, addr + npages*page) inside FREE region src. */
typedef struct vpmm_harvest {
    vpmm_region_t *src;
    uintptr_t addr;
    size_t npages;
} vpmm_harvest_t;

/* Phase 2's decision: where the new span goes and where its pages come from. */
typedef struct vpmm_plan {
    vpmm_arena_t *arena;  /* the arena the span goes to */
    vpmm_region_t *hole;  /* the hole pages are mapped into (NULL: reserve a new chunk) */
    vpmm_region_t *left;  /* usable FREE region ending where the mapped pages start, or NULL */
    vpmm_region_t *right; /* usable FREE region starting where the mapped pages end, or NULL */
    uintptr_t map_at;     /* first page address to map at (valid once the hole is known) */
    size_t npages;        /* pages mapped into the hole */
    size_t nnew;          /* of which created fresh (more than needed in an allocation burst) */
    size_t nneed;         /* of those, what the request itself needs (the rest: burst extra) */
    size_t unit;          /* pages per new handle (the last one may be smaller) */
    size_t req_pages;     /* pages the request spans (its size, rounded up to whole pages) */
    int small;            /* the span goes to a small chunk (a small request of the shared arena) */
    vpmm_harvest_t *runs; /* the rest, moved from free regions (npages - nnew pages in all) */
    size_t nruns, runs_cap;
} vpmm_plan_t;

void vpmm_i_plan_fini(vpmm_plan_t *plan);
/* Chooses the span (fewest pages to map; if that needs more new pages than the cap allows, or
 * with fewest_new, fewest pages to create) and the harvest (caller's stream, then ready memory,
 * then idle private arenas' ready memory, then other streams oldest first). `ours` is device
 * memory this malloc already created (vpmm_precreated_t), which the device no longer counts free
 * but the plan may use. VPMM_ERROR_OUT_OF_MEMORY when no plan fits under the cap. */
vpmm_status_t vpmm_i_plan_make(vpmm_pool_t *p, vpmm_stream_rec_t *s, size_t size, size_t ours,
                               int fewest_new, vpmm_plan_t *plan);
/* The same for private arena a, whose pages never move: a span among its holes and ready
 * regions; pages only from the shared arena's ready memory (no wait, no marker) or fresh. */
vpmm_status_t vpmm_i_plan_make_private(vpmm_pool_t *p, vpmm_arena_t *a, vpmm_stream_rec_t *s,
                                       size_t size, int fewest_new, vpmm_plan_t *plan);
/* Whether the plan uses [va, va + bytes): it overlaps one of the runs the plan moves or a free
 * neighbour its span absorbs. */
int vpmm_i_plan_uses(const vpmm_pool_t *p, const vpmm_plan_t *plan, uintptr_t va, size_t bytes);
/* Where to map when the plan's hole is a fresh chunk. */
void vpmm_i_plan_place_in(vpmm_pool_t *p, vpmm_plan_t *plan, vpmm_region_t *hole);

#endif /* VPMM_POLICY_H */
