/*
 * cache.h — the per-stream exact-size cache (cache.c).
 * The structs and their invariants are pool.h's; core.h includes every header of the core.
 */
#ifndef VPMM_CACHE_H
#define VPMM_CACHE_H

#include "pool.h"

/* Caches an unindexed, just-freed region on its stream; -1 (nothing changed) if it cannot. */
int vpmm_i_cache_put(vpmm_pool_t *p, vpmm_stream_rec_t *s, vpmm_region_t *r);
/* A cached region of exactly `size` bytes of stream s, uncached and unindexed; or NULL. */
vpmm_region_t *vpmm_i_cache_take(vpmm_pool_t *p, vpmm_stream_rec_t *s, size_t size);
/* Returns a stream's (every stream's) cached regions to the ordinary free states, coalesced. */
void vpmm_i_cache_flush(vpmm_pool_t *p, vpmm_stream_rec_t *s);
void vpmm_i_cache_flush_all(vpmm_pool_t *p);
/* A malloc on s found no block of its size in s's cache: flushes that cache if it holds at least
 * cache_stale bytes (its sizes are presumed stale: the program's shapes changed). */
void vpmm_i_cache_missed(vpmm_pool_t *p, vpmm_stream_rec_t *s);
/* Recomputes cache_limit and cache_stale after mapped_bytes changed. */
void vpmm_i_cache_limit_update(vpmm_pool_t *p);

#endif /* VPMM_CACHE_H */
