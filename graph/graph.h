/*
 * graph.h — graph pools and capture records: the state graph/ keeps per pool, shared by
 * graph_pool.c (graph pools, their lifetime, the capture records, noticing captures that ended,
 * the collect/fini hooks) and capture.c (capture begin/end/register, routing a captured malloc,
 * the hook table vpmm_g_hooks). capture.c calls graph_pool.c, never the other way round.
 * checkpoint/ uses the accessors at the end. Built on src/core/internal.h only.
 *
 * Lifetime of a graph pool (gp): it lives while handles + graphs > 0.
 *   handles  vpmm_graph_pool_create / _retain / vpmm_capture_graph_pool add one, _release drops
 * one; graphs   one per graph captured into it: a user object retained by the graph being captured
 *            (so a capture begun outside vpmm is covered too); CUDA runs its destructor once the
 *            graph, its executable graphs and their launches are gone. The destructor runs on a
 *            driver thread, so it only counts (gp->dead, atomics); vpmm_g_collect, under the pool
 *            lock, turns the counts into graphs -= dead.
 * While graphs > 0 the gp's arena is pinned (its pages never leave it). When both reach zero its
 * chunks become the shared pool's (vpmm_i_arena_dissolve) and the gp is freed.
 */
#ifndef VPMM_GRAPH_H
#define VPMM_GRAPH_H

#include <stdatomic.h>

#include "internal.h"

typedef struct vpmm_graphs vpmm_graphs_t;
typedef struct vpmm_capture_rec vpmm_capture_rec_t;

struct vpmm_graph_pool {
    vpmm_pool_t *pool;
    vpmm_graphs_t *owner; /* the pool's graph state (the destructor reaches it through gp) */
    vpmm_arena_t *arena;
    unsigned id;        /* unique in the process: checkpoints are matched by it */
    size_t handles;     /* handle references */
    size_t graphs;      /* graph references, as of the last collect */
    atomic_size_t dead; /* destructors run since the last collect */
    vpmm_graph_pool_t *next;
};

/* A capture vpmm serves: its id, its graph pool, and a stream of it (to notice its end; a
 * per-thread stream can be asked only from its own thread). */
struct vpmm_capture_rec {
    uint64_t id;
    vpmm_graph_pool_t *gp;
    vpmm_stream_key_t stream;
    vpmm_capture_rec_t *next;
};

struct vpmm_graphs {
    vpmm_graph_pool_t *pools;
    vpmm_capture_rec_t *captures;
    atomic_int dirty; /* some destructor ran since the last collect */
};

/* ---- graph_pool.c -------------------------------------------------------------------------- */

/* The pool's graph state, created on first use (NULL: host out of memory, reason set). */
vpmm_graphs_t *vpmm_gp_state(vpmm_pool_t *p);
/* A new graph pool with `handles` handle references (0 for a capture's own). */
vpmm_status_t vpmm_gp_new(vpmm_pool_t *p, size_t handles, vpmm_graph_pool_t **out);
/* Creates a user object for gp and moves it to graph: gp gains a graph reference. */
vpmm_status_t vpmm_gp_attach(vpmm_pool_t *p, vpmm_graph_pool_t *gp, vpmm_graph_t graph);
/* Frees gp if nothing references it any more (handles, graphs, captures); returns whether. */
int vpmm_gp_reap(vpmm_pool_t *p, vpmm_graph_pool_t *gp);
/* Validates a public graph pool argument (non-NULL; of `pool` when pool is not NULL). */
vpmm_status_t vpmm_gp_check(const vpmm_graph_pool_t *gp, const vpmm_pool_t *pool, const char *fn);
/* The hooks graph_pool.c serves (internal.h, vpmm_graph_hooks_t): collect and fini. */
void vpmm_g_collect(vpmm_pool_t *p);
vpmm_status_t vpmm_g_fini(vpmm_pool_t *p);

/* Capture records, kept with the graph pools they name (graph_pool.c). The record of capture `id`,
 * or NULL. */
vpmm_capture_rec_t *vpmm_cap_find(vpmm_graphs_t *g, uint64_t id);
/* Whether a capture record names gp. */
int vpmm_cap_uses(const vpmm_graphs_t *g, const vpmm_graph_pool_t *gp);
/* Ends every recorded capture whose stream is no longer in it (may reap their graph pools).
 * Captures on other threads' per-thread streams are left for their own thread to notice. */
void vpmm_cap_refresh(vpmm_pool_t *p, vpmm_graphs_t *g);
/* Ends the records of gp's captures (its graphs are all gone, so they are over). Ending the last
 * one reaps gp if nothing else references it: the caller must not use gp afterwards. */
void vpmm_cap_end_all_of(vpmm_pool_t *p, vpmm_graphs_t *g, vpmm_graph_pool_t *gp);

/* Unlinks and frees rec; its graph pool learns that one capture into it is over (and is reaped
 * if nothing else references it). */
void vpmm_cap_end(vpmm_pool_t *p, vpmm_graphs_t *g, vpmm_capture_rec_t *rec);
/* Starts serving capture `id` (of which stream is a part, graph its graph) from gp, or from a
 * new graph pool when gp is NULL. All or nothing. */
vpmm_status_t vpmm_cap_new(vpmm_pool_t *p, vpmm_graphs_t *g, vpmm_graph_pool_t *gp,
                           vpmm_stream_key_t stream, uint64_t id, vpmm_graph_t graph,
                           vpmm_capture_rec_t **out);

/* ---- capture.c ----------------------------------------------------------------------------- */

/* graph/'s hook table (vpmm_graph_hooks_t): captured malloc, capture arena and stream release
 * (capture.c), collect and fini (graph_pool.c); vpmm_i_graph_hooks() returns it, and the API
 * floor hands it to every pool it creates. */
extern const vpmm_graph_hooks_t vpmm_g_hooks;
/* vpmm_malloc on a stream that is being captured (capture_id), through the hook table: served
 * from the capture's graph pool, made for it if vpmm has not seen the capture yet. Under the
 * pool lock. */
vpmm_status_t vpmm_g_capture_malloc(vpmm_pool_t *p, vpmm_stream_key_t stream, uint64_t capture_id,
                                    size_t size, void **out_ptr);

/* ---- for checkpoint/ ----------------------------------------------------------------------- */

static inline vpmm_pool_t *vpmm_gp_pool(const vpmm_graph_pool_t *gp)
{
    return gp->pool;
}

static inline vpmm_arena_t *vpmm_gp_arena(const vpmm_graph_pool_t *gp)
{
    return gp->arena;
}

#endif /* VPMM_GRAPH_H */
