/*
 * graph_hooks.h — the graph hooks the core calls (the table graph/ hands in at creation,
 * internal.h), each a no-op without graph/: one pointer test on slow paths only.
 * The structs and their invariants are pool.h's; core.h includes every header of the core.
 */
#ifndef VPMM_GRAPH_HOOKS_H
#define VPMM_GRAPH_HOOKS_H

#include "pool.h"

/* The graph hooks the core calls, each a no-op without graph/ (all slow paths: one pointer test).
 * A captured malloc never reaches the core: src/api/malloc.c routes it. */
static inline void vpmm_i_graphs_collect(vpmm_pool_t *p)
{
    if (p->ghooks != NULL)
        p->ghooks->collect(p);
}

static inline vpmm_status_t vpmm_i_graphs_fini(vpmm_pool_t *p)
{
    return p->ghooks != NULL ? p->ghooks->fini(p) : VPMM_SUCCESS;
}

static inline void vpmm_i_graphs_stream_released(vpmm_pool_t *p, vpmm_stream_key_t stream)
{
    if (p->ghooks != NULL)
        p->ghooks->stream_released(p, stream);
}

static inline vpmm_arena_t *vpmm_i_graphs_capture_arena(vpmm_pool_t *p, uint64_t capture_id)
{
    return p->ghooks != NULL ? p->ghooks->capture_arena(p, capture_id) : NULL;
}

#endif /* VPMM_GRAPH_HOOKS_H */
