/*
 * region.h — regions and their indexes: node slabs, the address list, the trees, splits and
 * merges, the region a pointer names (region.c).
 * The structs and their invariants are pool.h's; core.h includes every header of the core.
 */
#ifndef VPMM_REGION_H
#define VPMM_REGION_H

#include "pool.h"

/* Makes sure n region nodes can be taken without allocating (so commits cannot fail). */
vpmm_status_t vpmm_i_region_reserve(vpmm_pool_t *p, size_t n);
vpmm_region_t *vpmm_i_region_take(vpmm_pool_t *p);
void vpmm_i_region_give(vpmm_pool_t *p, vpmm_region_t *r);
void vpmm_i_region_slabs_free(vpmm_pool_t *p);

/* NVTX: registers allocation r as a region of its chunk's heap (nvtx.h; tool attached only). */
#ifdef VPMM_HAVE_NVTX
void vpmm_i_nvtx_region_add(vpmm_region_t *r);
#else
static inline void vpmm_i_nvtx_region_add(vpmm_region_t *r)
{
    (void)r;
}
#endif

/* An allocation's counters, once it has left the allocation table (vpmm_free's one probe). */
void vpmm_i_alloc_forget(vpmm_pool_t *p, vpmm_region_t *r);

/* Adds r (state and fields set) to the index and byte counter of its state, or removes it. */
void vpmm_i_index_add(vpmm_pool_t *p, vpmm_region_t *r);
void vpmm_i_index_del(vpmm_pool_t *p, vpmm_region_t *r);

/* Splits an unindexed region at addr; returns the new upper part (linked after r, unindexed). */
vpmm_region_t *vpmm_i_region_split(vpmm_pool_t *p, vpmm_region_t *r, uintptr_t addr);

/* Cuts [lo, hi) out of the indexed region r: the parts outside keep r's state and stay indexed;
 * returns the middle piece, unindexed (r itself when lo == r->addr). Up to two spare nodes. */
vpmm_region_t *vpmm_i_region_cut(vpmm_pool_t *p, vpmm_region_t *r, uintptr_t lo, uintptr_t hi);

/* Carves the first `bytes` of an indexed FREE region r off as a new unindexed region; r stays
 * indexed as the rest (hot-path split: one tree re-key). */
vpmm_region_t *vpmm_i_free_take_front(vpmm_pool_t *p, vpmm_region_t *r, size_t bytes);

/* Merges the unindexed region `next` (r->next) into r and gives its node back. */
void vpmm_i_region_absorb_next(vpmm_pool_t *p, vpmm_region_t *r);

/* Coalesces an indexed FREE or HOLE region with its neighbours per I6; returns the result. */
vpmm_region_t *vpmm_i_region_coalesce(vpmm_pool_t *p, vpmm_region_t *r);

/* Whether two adjacent FREE regions must be merged (I6). */
int vpmm_i_free_mergeable(const vpmm_region_t *a, const vpmm_region_t *b);

/* Region containing addr, or NULL (error paths: linear in the chunk). */
vpmm_region_t *vpmm_i_region_find(const vpmm_pool_t *p, uintptr_t addr);

/* Marks an unindexed region FREE: pending on s (seq = its next marker) or ready if s is NULL. */
void vpmm_i_region_set_free(vpmm_pool_t *p, vpmm_region_t *r, vpmm_stream_rec_t *s);

/* Makes stream s wait on the GPU for the marker that covers free region r's owner (another
 * stream); 0 if it cannot (the marker or the wait failed, or s may not wait now). */
typedef int (*vpmm_join_wait_fn)(vpmm_pool_t *p, vpmm_stream_rec_t *s, const vpmm_region_t *r);

/* The shared arena's free regions next to another free region where the boundary between them
 * runs through a page or a handle, made pending on stream s and coalesced: the pages and handles
 * across such a boundary become one free region's, which defragmentation can move (it takes whole
 * handles out of one region). Ready memory joins at once (s may reuse it at once; other streams
 * then wait for s's marker, as for s's own frees); memory pending on another stream joins once
 * `wait` has made s wait for its marker (NULL: it does not join). Returns how many regions it
 * joined. The near-full rule's step (docs/ALGORITHM.md): free whole pages are never left out
 * because a state boundary cuts their handle. */
size_t vpmm_i_region_join_across(vpmm_pool_t *p, vpmm_stream_rec_t *s, vpmm_join_wait_fn wait);

/*
 * Size classes (docs/ALGORITHM.md, "Small blocks in pages of their own"). A request of fewer than
 * opt.small_bytes (rounded) bytes is small: in the shared arena it lives in small chunks, the
 * others in large ones, so no page holds both. One tree serves both classes: a region's key is its
 * size, plus VPMM_KEY_SMALL in a small chunk, so the large regions come first and a best fit is one
 * lower_bound in either class. Graph pools have one class (their chunks are large).
 */
#define VPMM_KEY_SMALL ((uint64_t)1 << 63)

static inline int vpmm_i_is_small(const vpmm_pool_t *p, size_t rsize)
{
    return rsize < p->opt.small_bytes;
}

/* The tree key a best fit for rsize bytes of the shared arena starts from. */
static inline uint64_t vpmm_i_fit_key(const vpmm_pool_t *p, size_t rsize)
{
    return vpmm_i_is_small(p, rsize) ? VPMM_KEY_SMALL | rsize : rsize;
}

/* Turns an unindexed region into an allocation of stream s. */
static inline void vpmm_i_make_allocated(vpmm_pool_t *p, vpmm_region_t *r, vpmm_stream_rec_t *s,
                                         size_t requested)
{
    r->state = VPMM_REGION_ALLOCATED;
    r->ready = 0;
    r->stream = s;
    r->seq = 0;
    r->requested = requested;
    vpmm_i_index_add(p, r);
}

/* Takes `rsize` bytes from the start of the indexed FREE region r for stream s. */
static inline vpmm_region_t *vpmm_i_allocate_from(vpmm_pool_t *p, vpmm_region_t *r,
                                                  vpmm_stream_rec_t *s, size_t rsize,
                                                  size_t requested)
{
    if (r->size > rsize)
        r = vpmm_i_free_take_front(p, r, rsize); /* the rest keeps its place and state */
    else
        vpmm_i_index_del(p, r);
    vpmm_i_make_allocated(p, r, s, requested);
    return r;
}

/* The status and message for a pointer that is not a live allocation of p (region.c). */
vpmm_status_t vpmm_i_bad_pointer(vpmm_pool_t *p, void *ptr, const char *fn);

#endif /* VPMM_REGION_H */
