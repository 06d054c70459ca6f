/*
 * trim.h — giving free handles back to the driver inside the core (trim.c): before a growth that
 * would raise the pool's high-water mark, and the releases that follow without the lock.
 * vpmm_trim's own half is entry.h's (the API floor calls it).
 * The structs and their invariants are pool.h's; core.h includes every header of the core.
 */
#ifndef VPMM_TRIM_H
#define VPMM_TRIM_H

#include "policy.h"
#include "pool.h"

/* Handles unmapped under the lock, to be released without it: h[0..n), and the room reserved
 * in pool->unreleased for them (reserved >= n) in case their release fails. */
typedef struct vpmm_unmapped {
    vpmm_drv_handle_t *h;
    size_t n, reserved;
} vpmm_unmapped_t;

/*
 * Called under the lock with a growth's plan, before its pages are created. When the growth
 * would map more than the pool ever has (mapped_high), unmaps ready free handles of the shared
 * pool and of idle graph pools that the plan does not use — at most as many bytes as the growth
 * would go above the mark, smallest sufficient handle first, none larger than that excess or
 * than VPMM_HANDLE_PAGES — into *out, for vpmm_i_release_unmapped (out->n may be 0). The plan's
 * regions may be gone afterwards: only vpmm_i_plan_fini may be called on it. Nothing is
 * unmapped when host memory for the bookkeeping is short, and a driver failure stops the step
 * (the growth goes on without it).
 */
void vpmm_i_trim_for_growth(vpmm_pool_t *p, const vpmm_plan_t *plan, vpmm_unmapped_t *out);
/* Releases a batch of unmapped handles, called without the lock (it takes it only if the batch
 * reserved room); one whose release fails twice is kept in pool->unreleased for vpmm_trim and
 * the pool's destruction. Frees the batch. VPMM_SUCCESS, or the driver's failure. */
vpmm_status_t vpmm_i_release_unmapped(vpmm_pool_t *p, vpmm_unmapped_t *batch);

#endif /* VPMM_TRIM_H */
