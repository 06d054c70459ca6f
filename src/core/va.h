/*
 * va.h — VA chunks: reserving, carving holes, giving chunks back (va.c).
 * The structs and their invariants are pool.h's; core.h includes every header of the core.
 */
#ifndef VPMM_VA_H
#define VPMM_VA_H

#include "pool.h"

/* Reserves a new chunk for arena a (opt.va_size; a graph pool's and a small one are smaller,
 * but at least min_bytes); it becomes one HOLE region. small: it holds the shared arena's small
 * requests (size classes; shared arena only). */
vpmm_status_t vpmm_i_chunk_add(vpmm_pool_t *p, vpmm_arena_t *a, size_t min_bytes, int small,
                               vpmm_chunk_t **out);
/* Gives back one chunk that is a single whole HOLE; if the driver refuses, the chunk stays (empty,
 * accounted, reusable) and the failure is recorded. */
vpmm_status_t vpmm_i_chunk_remove(vpmm_pool_t *p, vpmm_chunk_t *c);
/* Gives back every shared chunk that is one whole HOLE, except, per size class, one full-size
 * chunk when no other full-size shared chunk of its class is in use. O(chunks); region pointers
 * into the chunks given back die with them: call it where no caller holds one (after reclaim,
 * dissolve, trim). */
void vpmm_i_chunk_trim(vpmm_pool_t *p);
/* Carves [addr, addr+len) out of an indexed HOLE; returns that piece, unindexed. */
vpmm_region_t *vpmm_i_hole_carve(vpmm_pool_t *p, vpmm_region_t *hole, uintptr_t addr, size_t len);

#endif /* VPMM_VA_H */
