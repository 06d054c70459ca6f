/*
 * arena.h — arenas: a graph pool's allocation and free, zombie revival (arena.c).
 * The structs and their invariants are pool.h's; core.h includes every header of the core.
 */
#ifndef VPMM_ARENA_H
#define VPMM_ARENA_H

#include "pool.h"

static inline vpmm_arena_t *vpmm_i_arena_of(const vpmm_region_t *r)
{
    return r->chunk->arena;
}

/* The tree an indexed FREE region sits in (ready, its stream's free_tree, or a side tree). */
vpmm_rbtree_t *vpmm_i_free_tree(vpmm_pool_t *p, const vpmm_region_t *r);
/* Private arena a's side entry for s, or NULL (region.c: the free trees use it); _reserve
 * creates it (host memory may fail). */
vpmm_side_t *vpmm_i_side_find(vpmm_arena_t *a, const vpmm_stream_rec_t *s);
vpmm_status_t vpmm_i_side_reserve(vpmm_arena_t *a, vpmm_stream_rec_t *s);
/* Merges every pair of mergeable neighbours in a's chunks (after bulk state changes). */
void vpmm_i_arena_coalesce_all(vpmm_pool_t *p, vpmm_arena_t *a);
/* Frees private allocation r (already out of the allocation table and counted out): pending on
 * its stream until the capture ends if that stream is capturing into r's arena, else until its
 * stream's next marker (stream-ordered, as in the shared arena). */
void vpmm_i_arena_free(vpmm_pool_t *p, vpmm_region_t *r);
/* Drops every arena's side entry for s (s is being freed: it names no region any more;
 * region.c, below stream.c, which calls it). */
void vpmm_i_arena_forget_stream(vpmm_pool_t *p, const vpmm_stream_rec_t *s);

#endif /* VPMM_ARENA_H */
