/*
 * uses.h — other streams' uses of an allocation and deferred frees (uses.c).
 * The structs and their invariants are pool.h's; core.h includes every header of the core.
 */
#ifndef VPMM_USES_H
#define VPMM_USES_H

#include "pool.h"

/* Frees allocation r (out of the allocation table, counted out) into the deferred state: each use
 * gets its gate (recorded now where it may be). */
void vpmm_i_uses_defer(vpmm_pool_t *p, vpmm_region_t *r);
/* (vpmm_i_uses_release, which checkpoint/ calls too, is declared in internal.h.) */
/* Drops a region's uses (a node leaving the pool's books); vpmm_i_uses_fini: every deferred
 * region's (pool destruction). */
void vpmm_i_uses_forget(vpmm_pool_t *p, vpmm_region_t *r);
/* At a free: drops r's share slots whose shares are all over (r->uses may become NULL: then
 * nothing defers the free). */
void vpmm_i_uses_prune_shares(vpmm_pool_t *p, vpmm_region_t *r);
/* Room for one more use in r's list (host memory may fail: nothing changes then). */
vpmm_status_t vpmm_i_uses_room(vpmm_region_t *r);
void vpmm_i_uses_fini(vpmm_pool_t *p);

#endif /* VPMM_USES_H */
