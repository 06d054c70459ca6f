/*
 * internal.h — the narrow interface between the core pool (src/core/) and the layers built on it:
 * graph/ (graph pools, captures) and checkpoint/ (checkpoint take and reapply).
 *
 * Those layers never see the core's structs: arenas, streams and regions are opaque here, and
 * everything they do to the pool goes through the functions below, each under the pool lock
 * (vpmm_i_lock) unless it says otherwise. The core never calls graph/ by name: it calls the hook
 * table at the end (vpmm_graph_hooks_t), which the core owns and graph/ fills, so that a free
 * during a capture finds its arena, a destroyed graph's pool is returned, and a pool with graph
 * pools is not torn down.
 * Without graph/ (VPMM_WITH_GRAPHS=OFF) the table is NULL.
 *
 *   graph/, checkpoint/  --arena, view, rewrite-->  core/
 *   core/                --p->ghooks (NULL: none)-->  graph/'s table
 */
#ifndef VPMM_INTERNAL_H
#define VPMM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "driver.h"
#include "nvtx.h"
#include "status.h"
#include "util.h"
#include "vpmm.h"

typedef struct vpmm_arena vpmm_arena_t;           /* a pool of memory: shared, or a graph pool's */
typedef struct vpmm_stream_rec vpmm_stream_rec_t; /* a tracked stream */
typedef struct vpmm_region vpmm_region_t;         /* a region of a VA chunk */

/* ---- the pool (internal.c; vpmm_i_drv_status: driver_error.c) ------------------------------ */

void vpmm_i_lock(const vpmm_pool_t *p);
void vpmm_i_unlock(const vpmm_pool_t *p);
vpmm_driver_t *vpmm_i_pool_driver(const vpmm_pool_t *p);
/* Turns a driver result into a status, remembering the raw error and explaining it. */
vpmm_status_t vpmm_i_drv_status(vpmm_pool_t *p, vpmm_dres_t r);
/* graph/'s per-pool state (NULL until graph/ first stores one; freed by the fini hook). */
struct vpmm_graphs **vpmm_i_pool_graphs(vpmm_pool_t *p);
/*
 * A stream's identity. A handle alone is not one: VPMM_STREAM_PER_THREAD (and stream 0 in a
 * program built with per-thread default streams) names a different stream in each host thread.
 * The key of such a handle carries the thread whose stream it names (owner: that thread's
 * vpmm_i_thread_token); every other handle names one stream in every thread (owner 0). Only the
 * owner may pass a per-thread handle to the driver (vpmm_i_stream_key_here): from any other
 * thread the same value names another stream. stream.c.
 */
typedef struct vpmm_stream_key {
    vpmm_stream_t handle; /* canonical: stream 0 of a per-thread program is PER_THREAD */
    uint64_t owner;
} vpmm_stream_key_t;

/* A number for the calling thread, unique for the life of the process (never 0, never reused). */
uint64_t vpmm_i_thread_token(void);
/* The key of handle as the calling thread means it. */
vpmm_stream_key_t vpmm_i_stream_key(const vpmm_pool_t *p, vpmm_stream_t handle);
static inline int vpmm_i_stream_key_equal(vpmm_stream_key_t a, vpmm_stream_key_t b)
{
    return a.handle == b.handle && a.owner == b.owner;
}
/* Whether the calling thread may name the key's stream by its handle in a driver call. */
static inline int vpmm_i_stream_key_here(vpmm_stream_key_t k)
{
    return k.owner == 0 || k.owner == vpmm_i_thread_token();
}
/* The tracked stream for key, created on first sight; NULL if the host is out of memory. */
vpmm_stream_rec_t *vpmm_i_stream_get(vpmm_pool_t *p, vpmm_stream_key_t key);
vpmm_stream_key_t vpmm_i_stream_key_of(const vpmm_stream_rec_t *s);
/* The legacy default stream (NULL, or CU_STREAM_LEGACY = 0x1): never captured, driver.h rule 6.
 * Ask it of a canonical handle (a key's): stream 0 of a per-thread program is not legacy. */
static inline int vpmm_i_stream_is_legacy(vpmm_stream_t s)
{
    return (uintptr_t)s <= 1;
}
/* Flushes every exact-size cache, records a marker on every live stream other than `except`
 * that has unmarked frees (streams being captured, and other threads' per-thread streams, are
 * skipped), then polls every stream (retired ones too) except `except`: pending memory whose
 * work is done becomes ready. NULL polls them all. */
void vpmm_i_stream_poll_all(vpmm_pool_t *p, vpmm_stream_rec_t *except);
/* Releases deferred frees (vpmm_record_stream) whose other streams' work is done: they become
 * ordinary free memory. Records markers and queries events: not during a capture. */
void vpmm_i_uses_release(vpmm_pool_t *p);
/* Whether deferred region r's gates have all completed (records on-demand markers and polls its
 * streams; moves nothing). */
int vpmm_i_uses_done(vpmm_pool_t *p, const vpmm_region_t *r);
/* The same without polling: the driver is asked, but no region changes state (a call that may
 * still refuse, such as a checkpoint's reapply, must leave the pool as it was). */
int vpmm_i_uses_done_peek(vpmm_pool_t *p, const vpmm_region_t *r);
/* Waits until the device is idle (pool destruction with graphs just destroyed). */
vpmm_status_t vpmm_i_pool_synchronize(vpmm_pool_t *p);

/* ---- private arenas ---------------------------------------------------------------------- */

/* A new, empty private arena with the given id (it reserves VA on its first growth). */
vpmm_status_t vpmm_i_arena_create(vpmm_pool_t *p, unsigned id, vpmm_arena_t **out);
/* Gives every chunk of a to the shared arena (allocations stay live, free pages become the
 * shared pool's, a pending capture's frees become ready) and frees a; chunks left empty are given
 * back to the driver (va.c, vpmm_i_chunk_trim). */
void vpmm_i_arena_dissolve(vpmm_pool_t *p, vpmm_arena_t *a);
unsigned vpmm_i_arena_id(const vpmm_arena_t *a);
/* Pinned: a live graph may use a's addresses, so the shared pool never takes its pages. */
void vpmm_i_arena_set_pinned(vpmm_arena_t *a, int pinned);
/* A capture into a begins / ends. When the last one ends, frees made during captures (usable by
 * their own stream only until then) become ready for every later capture. */
void vpmm_i_arena_capture_begun(vpmm_pool_t *p, vpmm_arena_t *a);
void vpmm_i_arena_capture_ended(vpmm_pool_t *p, vpmm_arena_t *a);
unsigned vpmm_i_arena_captures(const vpmm_arena_t *a);
/* Allocates from a for stream (a capture's allocation): a's own free memory first, else growth
 * with fresh pages or the shared pool's ready pages. No event query, no host synchronisation. */
vpmm_status_t vpmm_i_arena_malloc(vpmm_pool_t *p, vpmm_arena_t *a, vpmm_stream_key_t stream,
                                  size_t size, void **out_ptr);
/* a's statistics (graphs, captures and pinned are graph/'s to fill). */
void vpmm_i_arena_stats(const vpmm_pool_t *p, const vpmm_arena_t *a, vpmm_graph_pool_stats_t *out);
void vpmm_i_arena_reset_peaks(vpmm_arena_t *a);

/* ---- region views and rewrites (checkpoint/) --------------------------------------------- */

/* What checkpoint/ may know about a region. */
typedef struct vpmm_view {
    uintptr_t addr;
    size_t size;
    vpmm_region_state_t state;
    int ready;                /* FREE: not pending on a stream */
    int chunk_last;           /* the last region of its chunk (a rewrite never crosses one) */
    size_t requested;         /* ALLOCATED: the caller's size */
    vpmm_stream_key_t stream; /* ALLOCATED: its stream */
    int deferred;             /* FREE, but another stream may still use it (vpmm_record_stream) */
    vpmm_region_t *region;    /* for vpmm_i_rewrite */
} vpmm_view_t;

/* a's regions in address order, chunk after chunk: first, then next until NULL. */
vpmm_region_t *vpmm_i_arena_first(const vpmm_pool_t *p, const vpmm_arena_t *a);
vpmm_region_t *vpmm_i_arena_next(const vpmm_pool_t *p, const vpmm_region_t *r);
void vpmm_i_region_view(const vpmm_region_t *r, vpmm_view_t *out);
/* Whether r is the last region of its chunk. */
int vpmm_i_region_chunk_last(const vpmm_region_t *r);
/* Views of all of a's regions in address order, in one pass: fills out[0, cap) and returns how
 * many regions a has (more than cap: call again with room for that many). */
size_t vpmm_i_arena_views(const vpmm_pool_t *p, const vpmm_arena_t *a, vpmm_view_t *out,
                          size_t cap);

/* One region of a rewrite: ALLOCATED by stream when requested > 0, else ready FREE. */
typedef struct vpmm_span {
    uintptr_t addr;
    size_t size;
    size_t requested;
    vpmm_stream_rec_t *stream;
} vpmm_span_t;

/* Makes room so that rewrites of arena a creating up to nregions regions, among them the
 * nallocs allocations allocs[] (their streams), cannot fail (nor their later frees). */
vpmm_status_t vpmm_i_rewrite_reserve(vpmm_pool_t *p, vpmm_arena_t *a, size_t nregions,
                                     const vpmm_span_t *allocs, size_t nallocs);
/*
 * Replaces the consecutive regions first..last (ALLOCATED or FREE, one chunk) by spans, which
 * must tile exactly the same addresses and respect the invariants (no two adjacent ready FREE
 * spans, nor one next to a ready FREE neighbour). Live allocations replaced are dropped (their
 * pointers become invalid). Cannot fail after vpmm_i_rewrite_reserve.
 */
void vpmm_i_rewrite(vpmm_pool_t *p, vpmm_region_t *first, vpmm_region_t *last,
                    const vpmm_span_t *spans, size_t n);

/*
 * Zombie pages of a graph pool: when a capture needs a large span, the graph pool maps some of
 * its free pages again at a new address, and their old address stays mapped as a zombie (graphs
 * may still use it). A checkpoint may want an allocation back at such an old address; since both
 * mappings still exist, the pages can be made live there again, with no driver call, provided
 * their current address is free in the state being restored.
 *
 * vpmm_i_revive_check: every zombie handle overlapping [lo, hi) of arena a lives in a, and its
 * live range overlaps none of the wanted allocations w[0..n) (address order); *handles counts
 * them. VPMM_ERROR_CHECKPOINT_CONFLICT otherwise. Changes nothing.
 * vpmm_i_revive: makes those handles live at [lo, hi) again, as ready free memory; their current
 * ranges, which must be ready free memory by now, become zombies. Cannot fail once
 * vpmm_i_rewrite_reserve made room for 4 regions per handle.
 * vpmm_i_region_containing: the region of a containing addr (linear in its chunk), or NULL.
 */
vpmm_status_t vpmm_i_revive_check(const vpmm_pool_t *p, const vpmm_arena_t *a, uintptr_t lo,
                                  uintptr_t hi, const vpmm_span_t *w, size_t n, size_t *handles);
void vpmm_i_revive(vpmm_pool_t *p, vpmm_arena_t *a, uintptr_t lo, uintptr_t hi);
vpmm_region_t *vpmm_i_region_containing(const vpmm_pool_t *p, const vpmm_arena_t *a,
                                        uintptr_t addr);
/* NVTX (a tool attached): resets the heaps of a's chunks and registers their live allocations
 * again, so the tool's view is exactly a's state (after a checkpoint reapply). */
#ifdef VPMM_HAVE_NVTX
void vpmm_i_arena_nvtx_refresh(vpmm_pool_t *p, vpmm_arena_t *a);
#else
static inline void vpmm_i_arena_nvtx_refresh(vpmm_pool_t *p, vpmm_arena_t *a)
{
    (void)p;
    (void)a;
}
#endif

/*
 * A malloc's frame, shared by every public malloc (src/api/malloc.c: vpmm_malloc; graph/:
 * vpmm_graph_pool_malloc), which decides in between who serves it:
 *   vpmm_i_malloc_enter  validates (fn names the call in messages), rounds the size, asks whether
 *                        the stream is being captured (before the lock: the query needs no pool
 *                        state) and takes the pool lock. Returns with the lock held iff
 *                        VPMM_SUCCESS.
 *   vpmm_i_malloc_leave  the trace line, the out-of-memory count and report (once, for the shared
 *                        pool and graph pools alike), then the lock released.
 */
typedef struct vpmm_malloc_call {
    vpmm_stream_key_t key;     /* the stream, canonical */
    vpmm_capture_status_t cap; /* its capture status (NONE for the legacy stream: never asked) */
    uint64_t capture_id;       /* the capture's id when cap != NONE */
    size_t rsize;              /* the size rounded to VPMM_ALIGNMENT */
} vpmm_malloc_call_t;

vpmm_status_t vpmm_i_malloc_enter(vpmm_pool_t *p, const char *fn, size_t size, vpmm_stream_t stream,
                                  void **out_ptr, vpmm_malloc_call_t *c);
void vpmm_i_malloc_leave(vpmm_pool_t *p, const vpmm_malloc_call_t *c, vpmm_status_t st, size_t size,
                         void **out_ptr);

/* ---- hooks: the core calls graph/ through a table it owns ---------------------------------- */

/*
 * graph/'s entry points for the core and the API floor, set per pool at creation
 * (vpmm_i_pool_create_on, with the table vpmm_i_graph_hooks() returns). NULL: no graph support
 * (VPMM_WITH_GRAPHS=OFF): each is a no-op, and a captured malloc is refused. Neither the core nor
 * the API floor names a graph/ function: this table is their only way to it, so graph/ and
 * checkpoint/ sit above the core and below nothing of src/. Every hook runs under the pool lock.
 */
typedef struct vpmm_graph_hooks {
    /* vpmm_malloc on a stream being captured (capture_id): served from the capture's graph pool,
     * made for it if vpmm has not seen the capture yet (src/api/malloc.c routes it here). */
    vpmm_status_t (*capture_malloc)(vpmm_pool_t *p, vpmm_stream_key_t stream, uint64_t capture_id,
                                    size_t size, void **out_ptr);
    /* The arena capture_id allocates from, or NULL (a free during a capture asks). */
    vpmm_arena_t *(*capture_arena)(vpmm_pool_t *p, uint64_t capture_id);
    /* Returns the pages of graph pools whose last graph and handle are gone, and notices
     * captures that ended outside vpmm. Cheap when nothing happened. */
    void (*collect)(vpmm_pool_t *p);
    /* Pool destruction: VPMM_SUCCESS when no graph pool is left (graph/'s state freed), else
     * VPMM_ERROR_POOL_BUSY with the reason set. */
    vpmm_status_t (*fini)(vpmm_pool_t *p);
    /* vpmm_stream_release: captures seen on stream are over (the stream is going away). */
    void (*stream_released)(vpmm_pool_t *p, vpmm_stream_key_t stream);
} vpmm_graph_hooks_t;

/* The hook table of this build: graph/'s (graph/capture.c) when it is built in, NULL in a build
 * without it (src/api/graph_off.c). A link-time choice: the caller names neither. */
const vpmm_graph_hooks_t *vpmm_i_graph_hooks(void);

#endif /* VPMM_INTERNAL_H */
