/*
 * pool.h — the core pool's data model, shared by the core files (region, stream, pages, va,
 * policy, defrag, arena, pool, stats, check). Nothing outside src/core/ and src/api/ includes it
 * (and the tests): graph/ and checkpoint/ use the narrower src/core/internal.h.
 *
 * Terms (docs/ALGORITHM.md has pictures). A *chunk* is one VA reservation. It is tiled by
 * *regions*, each in one state: ALLOCATED, FREE (mapped, reusable), HOLE (nothing mapped) or
 * ZOMBIE (the old address of pages that were remapped elsewhere, still mapped until the GPU is done
 * with it). A *phys* is one physical allocation (driver handle) of one page; it is mapped at
 * exactly one live address, plus any number of zombie addresses.
 *
 * A FREE region is either *ready* (any stream may reuse it without waiting: fresh memory, or its
 * freeing stream's work is known complete) or *pending* on the stream that freed it. Completion is
 * tracked with per-stream *markers*: events recorded lazily (never per free). A pending region
 * freed when its stream had recorded `e` markers carries seq = e; it is complete once marker e is,
 * i.e. once stream->completed > e.
 *
 * An *arena* is the set of chunks one pool of memory owns: the shared arena (every stream's
 * ordinary allocations) or a private arena (a graph pool, graph/). Each arena has its own hole
 * and ready trees, so one arena's searches never see another's memory. Private arenas differ in
 * three ways: they have no exact-size cache; their pending FREE regions sit in per-stream side
 * trees of the arena (not in the stream's free_tree), and may be pending *until the capture into
 * the arena ends* (seq = VPMM_SEQ_CAPTURE) instead of until a marker; and their pages never move
 * while the arena is pinned (a graph or a capture uses it): private growth maps only fresh pages
 * or the shared arena's ready pages, and the shared arena harvests a private arena's free pages
 * only when it is idle.
 *
 * Invariants (checked by vpmm_pool_check, check.c, after every mutation in the tests):
 *  I1  Tiling: per chunk, regions are address-sorted, contiguous and cover [base, base+size);
 *      the chunk list is in address order.
 *  I2  HOLE and ZOMBIE regions start and end on page boundaries (so a page is never split between
 *      mapped and unmapped VA; ALLOCATED and FREE regions may share pages with each other).
 *  I3  Mapping: every page overlapping an ALLOCATED or FREE region has a live mapping
 *      (maps[page] = phys with phys->va == page); every ZOMBIE page has a zombie mapping
 *      (maps[page] = phys with phys->va != page); HOLE pages have none; maps has nothing else.
 *  I4  Physical: mapped_bytes = Σ phys->size = Σ ALLOCATED sizes + Σ FREE sizes, each phys is
 *      mapped live exactly once, at a page boundary; every ZOMBIE region is a sequence of whole
 *      handles (zombie mappings), and phys->zombie_maps counts them.
 *  I5  Accounting: allocated + free + hole + zombie bytes = reserved_va_bytes = Σ chunk sizes,
 *      each byte counter equal to the sum over regions in that state.
 *  I6  Coalescing: no two adjacent HOLEs; no two adjacent uncached FREE regions that are both
 *      ready or both pending on the same stream (cached regions are never merged: cache.c).
 *  I7  Indexes: ALLOCATED regions are exactly the entries of allocs (by address); ready FREE
 *      regions exactly the ready tree of their chunk's arena; pending FREE regions exactly their
 *      stream's free_tree (shared) or their arena's side tree for the stream (private) and, in
 *      nondecreasing seq order, the stream's pending list; cached FREE regions exactly the lists
 *      of their stream's cache, under their size; HOLEs exactly their arena's holes tree;
 *      ZOMBIEs exactly the zombie list; every tree is a valid red-black tree keyed (size, addr).
 *  I8  Markers: completed <= recorded for every stream; a pending region has
 *      completed <= seq <= recorded, or seq == VPMM_SEQ_CAPTURE in a private arena with a capture
 *      in progress; a stream is `dirty` iff some pending region has seq == recorded.
 *  I9  Arenas: every chunk belongs to the shared arena or a listed private arena; a private
 *      arena's counters equal the sums over its chunks; cached regions are shared only.
 *  I10 Streams: a record's owner is nonzero iff its handle is VPMM_STREAM_PER_THREAD, and no two
 *      live records have the same (handle, owner) key (internal.h).
 *  I11 Uses: only ALLOCATED and deferred FREE regions have uses (n >= 1, distinct streams, none
 *      the region's own); a deferred region is FREE, not ready, not cached, has its own stream,
 *      sits in the deferred list (and no tree), and each gate's seq <= its stream's recorded;
 *      a stream's refs count its uses too.
 *  I12 Worker: only ZOMBIE regions are busy, and only in a pool with a background worker (a busy
 *      zombie's mappings are being unmapped without the pool lock: I3 still lists them).
 *  I13 Size classes: only shared chunks are small; an indexed FREE or HOLE region's tree key is
 *      its size, plus VPMM_KEY_SMALL in a small chunk. (Placement, not an invariant: a small
 *      request is served in a small chunk and any other in a large one, unless memory ran short:
 *      then free memory of the other class serves, counted in class_fallbacks.)
 *  I14 Access: every page mapped live or as a zombie (not busy) is readable and writable by the
 *      pool's own device and by every device in peers[0..npeers) (the driver's get_access).
 */
#ifndef VPMM_POOL_H
#define VPMM_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "driver.h"
#include "hashmap.h"
#include "internal.h"
#include "lock.h"
#include "options.h"
#include "rbtree.h"
#include "vpmm_assert.h"
#include "status.h"
#include "util.h"
#include "vpmm.h"

/* What said no to a malloc that ran out of memory (the report says it). */
typedef enum vpmm_oom_cause {
    VPMM_OOM_DEVICE = 0, /* the device had no room (the default) */
    VPMM_OOM_CAP,        /* opt.max_bytes */
    VPMM_OOM_VA,         /* no address space for a new VA chunk */
} vpmm_oom_cause_t;

typedef struct vpmm_record vpmm_record_t; /* record.c */
typedef struct vpmm_chunk vpmm_chunk_t;
typedef struct vpmm_region vpmm_region_t;
typedef struct vpmm_stream_rec vpmm_stream_rec_t;
typedef struct vpmm_phys vpmm_phys_t;
typedef struct vpmm_arena vpmm_arena_t;
typedef struct vpmm_worker vpmm_worker_t; /* worker.c */
typedef struct vpmm_shares vpmm_shares_t; /* share_table.c */
typedef struct vpmm_import vpmm_import_t; /* import.c */

/* One share slot, in memory the exporter shares with its importers (share_table.c): one atomic
 * word, gen << 32 | count — the shares not over yet, and the use they belong to (gen moves on when
 * the slot is given back), changed together so that a close names the use it ends. */
typedef struct vpmm_share_slot {
    _Atomic uint64_t word;
} vpmm_share_slot_t;
#define VPMM_SHARE_GEN(w)   ((uint32_t)((w) >> 32))
#define VPMM_SHARE_COUNT(w) ((uint32_t)(w))

/* vpmm_stream_rec_t.device before the driver was asked (stream.c, "Devices"). */
#define VPMM_STREAM_DEVICE_UNKNOWN (-1)

/* The seq of a private pending region reusable by its stream only until the capture into its
 * arena ends (then it becomes ready). */
#define VPMM_SEQ_CAPTURE UINT64_MAX

/* One VA reservation. */
struct vpmm_chunk {
    uintptr_t base;
    size_t size;
    vpmm_arena_t *arena;  /* the arena that owns it */
    unsigned index;       /* reservation order, for dumps */
    void *nvtx_heap;      /* its NVTX heap (nvtx.h), registered at its first allocation */
    int nvtx_tried;       /* that registration was attempted (a tool may decline: NULL) */
    int small;            /* holds the shared arena's small requests only (size classes, I13) */
    vpmm_region_t *first; /* lowest region */
    vpmm_chunk_t *next;
};

/* The other streams that use an allocation (vpmm_record_stream); once it is freed, the marker
 * of each that must complete before its memory is reused (uses.c). An entry with no stream is
 * the allocation's share slot (share.c): other processes may map it while its count is not 0. */
struct vpmm_use {
    vpmm_stream_rec_t *stream; /* holds a reference (refs); NULL: a share slot */
    uint64_t seq; /* deferred FREE: the gate, marker `seq` of stream; a share: the slot */
};
typedef struct vpmm_uses {
    size_t n, cap;
    struct vpmm_use e[];
} vpmm_uses_t;

struct vpmm_region {
    uintptr_t addr;
    size_t size;
    vpmm_region_t *prev, *next; /* address neighbours inside the chunk */
    vpmm_chunk_t *chunk;
    vpmm_region_state_t state;
    int ready;                    /* FREE only: in the pool's ready tree */
    int cached;                   /* FREE only: in its stream's exact-size cache (cache.c) */
    int busy;                     /* ZOMBIE only: the worker is unmapping it without the pool
                                     lock (worker.c); nobody else touches it meanwhile */
    vpmm_rb_node_t node;          /* FREE: ready tree, stream free_tree or side tree; HOLE: holes
                                     tree */
    vpmm_region_t *qprev, *qnext; /* pending FREE: stream pending list; cached FREE: its cache
                                     list; ZOMBIE: zombie list */
    vpmm_stream_rec_t *stream;    /* ALLOCATED: allocating stream; pending FREE: freeing stream;
                               ZOMBIE: stream whose marker guards it (NULL: already safe) */
    uint64_t seq;                 /* pending FREE and ZOMBIE: the marker that covers it (or
                                     VPMM_SEQ_CAPTURE) */
    size_t requested;             /* ALLOCATED: the caller's size */
    uint64_t age;                 /* FREE: pool->clock when freed (oldest-first harvesting) */
    vpmm_uses_t *uses;            /* ALLOCATED: its other streams; FREE: non-NULL iff deferred
                                     (uses.c); else NULL */
};

/* What the pool knows about one application stream. */
struct vpmm_stream_rec {
    vpmm_stream_t handle;
    uint64_t owner; /* per-thread handle: the thread whose stream it is (internal.h), else 0 */
    vpmm_rbtree_t
        free_tree; /* pending FREE regions of this stream (shared arena), by (size, addr) */
    vpmm_region_t *pend_head, *pend_tail; /* its pending regions of every arena, in seq order */
    size_t pending_bytes;                 /* in free_tree */
    vpmm_hmap_t cache; /* size -> newest cached FREE region (a LIFO list through qnext) */
    size_t cached_bytes;
    /* Markers [completed, recorded) are in flight; marker i lives in ring[i % ring_cap]. */
    vpmm_drv_event_t *ring;
    size_t ring_cap;
    uint64_t recorded, completed;
    size_t dirty_regions; /* pending regions with seq == recorded (need a marker not yet taken) */
    size_t refs;          /* regions pointing here (ALLOCATED, pending FREE, ZOMBIE) */
    unsigned held;        /* calls that dropped the pool lock while using this record */
    int retired;          /* vpmm_stream_release was called: no new markers, freed once refs==0 */
    int device;           /* VPMM_STREAM_DEVICE_UNKNOWN until its first marker asks the driver;
                             then its device: another than the pool's takes events made on it */
    vpmm_stream_rec_t *next;
};

/* One physical allocation (driver handle) of one or more whole pages; moved only as a whole. */
struct vpmm_phys {
    vpmm_drv_handle_t handle;
    size_t size;
    uintptr_t va;       /* its live address */
    size_t zombie_maps; /* further (zombie) mappings still in place */
    vpmm_phys_t *prev, *next;
    /* Exported (share.c) iff serial != 0: its descriptor, kept until the handle is given back. */
    uint64_t serial;     /* unique in the pool, for importers' caches */
    int ipc_fd;          /* the descriptor the driver made for it */
    uint64_t ipc_offset; /* where its bytes start in what the descriptor names */
};

/* Counters behind vpmm_stats_t that are not derived from the region lists. */
typedef struct vpmm_counters {
    size_t live_bytes, allocated_bytes, peak_live_bytes;
    size_t mapped_bytes, peak_mapped_bytes;
    size_t free_bytes, hole_bytes, zombie_bytes, reserved_va_bytes;
    uint64_t live_allocs, mallocs, frees, defrags, pages_remapped, pages_created;
    uint64_t pages_released, grows, ooms, cross_stream_waits, handles_created;
    uint64_t pages_taken;     /* a private arena's pages taken over from the shared arena */
    uint64_t class_fallbacks; /* mallocs served in the other size class, memory short (I13) */
} vpmm_counters_t;

/* A private arena's pending FREE regions of one stream (I7). */
typedef struct vpmm_side {
    vpmm_stream_rec_t *stream; /* compared only: a reused stream record takes the entry over */
    vpmm_rbtree_t tree;        /* keyed (size, addr) */
} vpmm_side_t;

/*
 * A pool of memory: the shared arena (embedded in the pool, counted only in pool->c) or a private
 * one (a graph pool; its own counters in c, which pool->c also includes). `priv` is the fast
 * test the index uses.
 */
struct vpmm_arena {
    vpmm_rbtree_t holes; /* HOLE regions, keyed (size, addr) */
    vpmm_rbtree_t ready; /* ready FREE regions, keyed (size, addr) */
    int priv;
    unsigned id;     /* 0: shared; else the graph pool's id (dumps, checkpoints) */
    unsigned chunks; /* chunks it owns */
    /* Private arenas only. */
    vpmm_side_t *side;
    size_t nside, side_cap;
    unsigned captures;      /* captures into it in progress (graph/ keeps this) */
    size_t capture_pending; /* regions with seq == VPMM_SEQ_CAPTURE */
    int pinned;             /* a live graph may use its addresses (graph/ keeps this) */
    vpmm_counters_t c;      /* bytes and counts of its own regions and calls */
    vpmm_arena_t *next;     /* the pool's private arenas */
};

struct vpmm_pool {
    vpmm_lock_t lock;
    vpmm_driver_t *drv;
    int owns_drv;
    vpmm_options_t opt;
    size_t page_size;
    size_t granularity;

    vpmm_chunk_t *chunks; /* every arena's */
    unsigned chunk_count, next_chunk_index;
    vpmm_arena_t shared;
    vpmm_arena_t *privates; /* private arenas (graph pools) */
    size_t private_count;
    unsigned captures;          /* captures in progress, all arenas (the sum of their `captures`) */
    struct vpmm_graphs *graphs; /* graph/'s state (graph pools, captures); NULL until used */
    const vpmm_graph_hooks_t *ghooks; /* graph/'s entry points (internal.h); NULL: none */
    vpmm_region_t *zombie_head, *zombie_tail;
    vpmm_region_t *deferred_head, *deferred_tail; /* deferred FREE regions (uses.c) */
    vpmm_hmap_t allocs;                           /* address -> ALLOCATED region */
    vpmm_hmap_t maps; /* page address -> phys (live and zombie mappings) */
    vpmm_phys_t *phys_head;
    size_t phys_count;
    vpmm_drv_handle_t *unreleased; /* unmapped handles whose release failed (trim.c) */
    size_t nunreleased, unreleased_cap;

    vpmm_stream_rec_t *streams;     /* live (not retired) streams */
    vpmm_stream_rec_t *retired;     /* retired streams still referenced */
    vpmm_stream_rec_t *last_stream; /* lookup cache for the hot path */
    size_t stream_count;

    vpmm_drv_event_t *idle_events; /* created events not in any ring, reused for markers */
    size_t idle_count, idle_cap;

    vpmm_region_t *spare; /* free list of region nodes */
    size_t spare_count;
    void **slabs; /* blocks of region nodes, freed at destroy */
    size_t slab_count, slab_cap;

    uint64_t clock;             /* increments on every free */
    size_t cached_bytes;        /* in every stream's cache (cache.c) */
    unsigned grow_streak;       /* same-size growths in a row with no free in between (policy.c) */
    size_t grow_req;            /* pages of the request behind the last growth */
    uint64_t grow_frees_mark;   /* c.frees at the last growth */
    size_t cache_limit;         /* cached_bytes may not exceed it: opt.cache_percent of mapped */
    size_t cache_stale;         /* a stream's cache this large is flushed at its next miss: 1% of
                                   mapped (cache.c) */
    vpmm_oom_cause_t oom_cause; /* what refused the malloc being reported (report.c) */
    vpmm_record_t *record;      /* the trace being recorded (record.c), or NULL */
    char oom_report[2048];      /* the last out-of-memory report (report.c) */
    unsigned oom_printed;       /* reports VPMM_VERBOSE printed in full (report.c) */
    uint64_t oom_unprinted;     /* later reports, only counted */
    vpmm_worker_t *worker;      /* the background worker (worker.c), or NULL (opt.worker off) */
    uint64_t worker_unmaps;     /* zombie mappings it unmapped */
    uint64_t worker_cpu_ns;     /* its thread's CPU time, as of its last pass */
    vpmm_counters_t c;
    /* Devices granted access besides the pool's own (peer.c): every set_access names them. */
    int peers[VPMM_DRV_MAX_DEVICES];
    size_t npeers;
    uint64_t peer_grants; /* set_access calls that named peers */
    /* Other processes (share.c, import.c). */
    vpmm_shares_t *shares;  /* the share slots of exported allocations; NULL until the first */
    uint64_t ipc_serial;    /* the last serial given to an exported handle */
    uint64_t ipc_exports;   /* vpmm_ipc_export calls that succeeded */
    vpmm_import_t *imports; /* other processes' memory mapped here */
    size_t nimports, imported_bytes;
    size_t import_handles; /* their handles (each mapped once), for the driver-state tests */
    vpmm_segment_hook_t segment_hook; /* vpmm_pool_set_segment_hook (segment.c), or NULL */
    void *segment_user;
    int drv_code; /* last failed driver call */
    const char *drv_call;
};

/* ---- creation and driver calls (pool.c) ---------------------------------------------------- */

/*
 * Creates a pool on an already opened driver (tests pass host or fault-injecting drivers this
 * way). owns_drv: close the driver with the pool (also when creation fails). ghooks: graph/'s
 * table (NULL: no graph support); the API floor's vpmm_a_pool_create_on passes the built-in one.
 */
vpmm_status_t vpmm_i_pool_create_on(const vpmm_options_t *opt, vpmm_driver_t *drv, int owns_drv,
                                    const vpmm_graph_hooks_t *ghooks, vpmm_pool_t **out);

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

/* ---- other streams' uses, deferred frees (uses.c) ------------------------------------------ */

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
/* The status and message for a pointer that is not a live allocation of p (region.c). */
vpmm_status_t vpmm_i_bad_pointer(vpmm_pool_t *p, void *ptr, const char *fn);

/* ---- trace recording (record.c) ------------------------------------------------------------- */

/* Opens opt.trace_file if set (the status names the knob when it cannot be opened). */
vpmm_status_t vpmm_i_record_open(vpmm_pool_t *p);
/* Writes one trace line: op 'a' (a malloc served) or 'f' (a free), under the pool lock. */
void vpmm_i_record_op(vpmm_pool_t *p, char op, uintptr_t addr, size_t size, vpmm_stream_key_t k);
/* Writes out and closes the trace (pool destruction): VPMM_ERROR_IO (said on stderr and in
 * vpmm_last_error) when a write or the close failed, then or before. */
vpmm_status_t vpmm_i_record_close(vpmm_pool_t *p);
/* The zlib a ".gz" trace is written through, loaded at run time ("libz.so.1"; tests point it
 * elsewhere to see a system without zlib). */
extern const char *vpmm_i_zlib_name;

/* ---- report (report.c) ---------------------------------------------------------------------- */

/* Writes the out-of-memory report of a failed malloc (oom_report, vpmm_last_error, stderr when
 * verbose: the pool's first VPMM_VERBOSE_OOM_REPORTS in full, later ones counted): what was asked,
 * what the pool holds and where, what the device has left. */
void vpmm_i_oom_report(vpmm_pool_t *p, size_t size, vpmm_stream_t stream);
/* At destroy, when verbose: how many reports were counted but not printed (nothing if none). */
void vpmm_i_oom_summary(const vpmm_pool_t *p);

#define VPMM_VERBOSE_OOM_REPORTS 10
/* The largest free region of arena `only`, or of the whole pool when NULL. */
size_t vpmm_i_largest_free(const vpmm_pool_t *p, const vpmm_arena_t *only);

/* ---- regions and indexes (region.c) -------------------------------------------------------- */

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

/* The shared arena's ready free regions next to free regions pending on stream s, where the
 * boundary between them runs through a page or a handle, made pending on s and coalesced: the
 * pages and handles across such a boundary become one free region's, which defragmentation can
 * move (it takes whole handles out of one region). s may reuse ready memory at once; other
 * streams then wait for s's marker, as for s's own frees. Returns how many regions it joined.
 * The near-full rule's step (docs/ALGORITHM.md): free whole pages the caller may use are never
 * left out because a state boundary cuts their handle. */
size_t vpmm_i_region_join_across(vpmm_pool_t *p, vpmm_stream_rec_t *s);

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

/* ---- streams and markers (stream.c) -------------------------------------------------------- */

/* Makes sure marker `seq` of s is recorded (recording it now if it is the next one): on s, or on
 * the legacy stream when s is another thread's per-thread stream (stream.c, "Identity"). Refuses
 * (VPMM_ERROR_STREAM_CAPTURING) on a stream being captured, whose marker would be a graph node,
 * and the legacy substitute while any capture is in progress. */
vpmm_status_t vpmm_i_stream_mark(vpmm_pool_t *p, vpmm_stream_rec_t *s, uint64_t seq);
/* Whether vpmm_i_stream_mark could record a marker for s now (one capture query at most):
 * VPMM_SUCCESS, VPMM_ERROR_STREAM_CAPTURING, or the failed query's status; and as a boolean. */
vpmm_status_t vpmm_i_stream_can_mark(vpmm_pool_t *p, const vpmm_stream_rec_t *s);
int vpmm_i_stream_markable(vpmm_pool_t *p, const vpmm_stream_rec_t *s);
/* Whether a GPU-side wait may be enqueued on s now: not on the legacy stream while a capture is
 * in progress (legacy work would invalidate it). */
int vpmm_i_stream_may_wait(const vpmm_pool_t *p, const vpmm_stream_rec_t *s);
/* Flushes the caches and records a marker (the legacy-stream substitute) for every other
 * thread's per-thread stream with unmarked frees, unless a capture is in progress: for a caller
 * that wants every free page back (vpmm_trim). */
void vpmm_i_stream_mark_foreign(vpmm_pool_t *p);

/* The event of an in-flight marker (completed <= seq < recorded). */
vpmm_drv_event_t vpmm_i_stream_marker(const vpmm_stream_rec_t *s, uint64_t seq);

/* Queries s's in-flight markers in order and promotes its completed pending regions to ready. */
void vpmm_i_stream_poll(vpmm_pool_t *p, vpmm_stream_rec_t *s);

/* Whether s's stream may be named by its handle here (stream.c, "Identity"). */
static inline int vpmm_i_stream_here(const vpmm_stream_rec_t *s)
{
    return vpmm_i_stream_key_here(vpmm_i_stream_key_of(s));
}

/* Frees record s: destroys its in-flight markers (first failure returned), drops its arenas'
 * side entries. s is on no list any more. */
vpmm_status_t vpmm_i_stream_free(vpmm_pool_t *p, vpmm_stream_rec_t *s);

/* Whether marker seq of s is known complete. */
static inline int vpmm_i_stream_done(const vpmm_stream_rec_t *s, uint64_t seq)
{
    return s->completed > seq;
}

/* Pending-list and reference bookkeeping used by the index (defined in region.c, which keeps
 * them: below stream.c). */
void vpmm_i_stream_pending_add(vpmm_stream_rec_t *s, vpmm_region_t *r);
void vpmm_i_stream_pending_del(vpmm_stream_rec_t *s, vpmm_region_t *r);
void vpmm_i_stream_unref(vpmm_pool_t *p, vpmm_stream_rec_t *s);

/* vpmm_stream_release's work (under the lock). */
vpmm_status_t vpmm_i_stream_retire(vpmm_pool_t *p, vpmm_stream_rec_t *s);

/* Destroys every stream's events and frees all stream records (pool destruction). */
vpmm_status_t vpmm_i_stream_fini_all(vpmm_pool_t *p);

/* An event for a new marker: reused from the idle list or created. */
vpmm_status_t vpmm_i_event_get(vpmm_pool_t *p, vpmm_drv_event_t *out);
void vpmm_i_event_put(vpmm_pool_t *p, vpmm_drv_event_t ev);

/* ---- exact-size cache (cache.c) ------------------------------------------------------------ */

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

/* ---- physical pages and mappings (pages.c) ------------------------------------------------- */

/* Handles needed for npages pages in units of `unit` pages (the last one may be smaller). */
size_t vpmm_i_pages_handles(size_t npages, size_t unit);
/* Creates handles for npages pages, `unit` pages each (phys records not yet linked) into out[],
 * which has room for vpmm_i_pages_handles(npages, unit); all-or-nothing. */
vpmm_status_t vpmm_i_pages_create(vpmm_pool_t *p, size_t npages, size_t unit, vpmm_phys_t **out);
/* Releases handles created by vpmm_i_pages_create that were never linked. */
void vpmm_i_pages_destroy(vpmm_pool_t *p, vpmm_phys_t **pages, size_t n);

/*
 * Handles created WITHOUT the pool lock (driver.h rule 7: the driver is thread-safe), so that the
 * slowest driver call of a growth does not block the pool's other threads. The slow path plans
 * under the lock, drops it to create what the plan needs, takes it again and plans again: the
 * new plan takes matching handles from the set first (vpmm_i_pages_create_from) and creates the
 * rest under the lock; what is left is released, again without the lock.
 */
typedef struct vpmm_precreated {
    vpmm_phys_t **h;
    size_t n, cap;
    int tried; /* the slow path dropped the lock once for it (never twice per malloc) */
} vpmm_precreated_t;
/* Creates handles for npages pages in units of `unit` pages into set (no pool state touched:
 * callable without the lock). VPMM_DRV_OK, or the failing driver result (the set is unchanged). */
vpmm_dres_t vpmm_i_precreate(vpmm_driver_t *d, size_t page_size, size_t npages, size_t unit,
                             vpmm_precreated_t *set);
/* Releases the set's handles and frees it (no pool state touched: callable without the lock). */
void vpmm_i_precreated_discard(vpmm_driver_t *d, vpmm_precreated_t *set);

/* vpmm_malloc's shared-pool part (pool.c): the lock held; what `pre` holds afterwards is the
 * caller's to discard, after vpmm_i_malloc_leave. */
vpmm_status_t vpmm_i_malloc_shared(vpmm_pool_t *pool, const char *fn, vpmm_stream_key_t key,
                                   size_t size, size_t rsize, void **out_ptr,
                                   vpmm_precreated_t *pre);

/* The malloc frame, vpmm_i_malloc_enter and _leave (internal.h), inline for the malloc hot path
 * (src/api/malloc.c): the public malloc makes one call into the core, as it did before the API
 * floor routed it. graph/ calls the out-of-line copies (pool.c). */
static inline void vpmm_i_malloc_leave_inline(vpmm_pool_t *pool, const vpmm_malloc_call_t *c,
                                              vpmm_status_t st, size_t size, void **out_ptr)
{
    if (VPMM_UNLIKELY(pool->record != NULL) && st == VPMM_SUCCESS)
        vpmm_i_record_op(pool, 'a', (uintptr_t)*out_ptr, size, c->key);
    if (VPMM_UNLIKELY(st == VPMM_ERROR_OUT_OF_MEMORY)) {
        /* Every way to run out, the shared pool's and a graph pool's, is counted and reported
         * here, once (the graph pool counted its own). */
        pool->c.ooms++;
        vpmm_i_oom_report(pool, size, c->key.handle);
    }
    vpmm_i_unlock(pool);
}

static inline vpmm_status_t vpmm_i_malloc_enter_inline(vpmm_pool_t *pool, const char *fn,
                                                       size_t size, vpmm_stream_t stream,
                                                       void **out_ptr, vpmm_malloc_call_t *c)
{
    vpmm_dres_t dres = VPMM_DRV_OK;
    vpmm_status_t st;
    if (out_ptr == NULL || pool == NULL) {
        vpmm_i_set_error("%s: %s is NULL", fn, pool == NULL ? "pool" : "out_ptr");
        if (out_ptr != NULL)
            *out_ptr = NULL;
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    *out_ptr = NULL;
    if (size == 0) {
        vpmm_i_set_error("%s: size is 0", fn);
        return VPMM_ERROR_INVALID_SIZE;
    }
    c->rsize = vpmm_round_up_checked(size, VPMM_ALIGNMENT);
    if (c->rsize == 0 || c->rsize > pool->opt.va_size) {
        vpmm_i_set_error("%s: %zu bytes exceed the VA chunk size (%zu)", fn, size,
                         pool->opt.va_size);
        return VPMM_ERROR_SIZE_TOO_LARGE;
    }
    /* The legacy default stream is never captured (driver.h rule 6): no query on its hot path.
     * Other streams are asked before the lock is taken: the query needs no pool state. The key's
     * handle is canonical: stream 0 of a per-thread program is this thread's per-thread stream,
     * which can be captured. */
    c->key = vpmm_i_stream_key(pool, stream);
    c->cap = VPMM_CAPTURE_NONE;
    c->capture_id = 0;
    if (!vpmm_i_stream_is_legacy(c->key.handle))
        dres = pool->drv->capture_info(pool->drv, c->key.handle, &c->cap, &c->capture_id, NULL);
    vpmm_i_lock(pool);
    st = vpmm_i_drv_status(pool, dres);
    if (st != VPMM_SUCCESS)
        vpmm_i_malloc_leave_inline(pool, c, st, size, out_ptr); /* counted as any failed malloc */
    return st;
}

/* vpmm_i_pages_create that takes handles of the right size from set first (set may be NULL). */
vpmm_status_t vpmm_i_pages_create_from(vpmm_pool_t *p, size_t npages, size_t unit,
                                       vpmm_phys_t **out, vpmm_precreated_t *set);
/* Maps pages[0..n) one after another from va (then one set_access); undoes all on failure. */
vpmm_status_t vpmm_i_pages_map(vpmm_pool_t *p, uintptr_t va, vpmm_phys_t **pages, size_t n);
/* Undoes vpmm_i_pages_map. */
void vpmm_i_pages_unmap(vpmm_pool_t *p, uintptr_t va, vpmm_phys_t **pages, size_t n);
/* Links a new handle into the pool at its live address (maps must have room for its pages). */
void vpmm_i_phys_link(vpmm_pool_t *p, vpmm_phys_t *ph, uintptr_t va);
/* Bytes of the whole handles mapped live inside [addr, addr + size): what defragmentation could
 * move out of a free region (a handle partly outside stays). */
size_t vpmm_i_whole_handle_bytes(const vpmm_pool_t *p, uintptr_t addr, size_t size);
/* The phys mapped at page address va (live or zombie), or NULL. */
static inline vpmm_phys_t *vpmm_i_phys_at(const vpmm_pool_t *p, uintptr_t va)
{
    return (vpmm_phys_t *)vpmm_hmap_get(&p->maps, va);
}

/* ---- VA chunks (va.c) ---------------------------------------------------------------------- */

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

/* ---- allocation policy (policy.c) ---------------------------------------------------------- */

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
/* Where to map when the plan's hole is a fresh chunk. */
void vpmm_i_plan_place_in(vpmm_pool_t *p, vpmm_plan_t *plan, vpmm_region_t *hole);

/* ---- phase 0 and phase 2 (defrag.c) -------------------------------------------------------- */

/* Phase 0: unmaps zombies whose marker completed; their VA becomes holes, and chunks left empty
 * go back (vpmm_i_chunk_trim). With poll = 0 it queries no event (safe during a capture): only
 * zombies already known complete go. */
void vpmm_i_reclaim_zombies(vpmm_pool_t *p, int poll);
/* Whether zombie z may be unmapped now: not busy (the worker's), its arena not pinned, its marker
 * complete (polled when `poll`). */
int vpmm_i_zombie_due(vpmm_pool_t *p, vpmm_region_t *z, int poll);
/* The books after the first `done` bytes of zombie z (whole handles) were unmapped: their
 * mappings forgotten, that prefix a hole (z is not to be used afterwards; the rest stays zombie).
 */
void vpmm_i_zombie_unmapped(vpmm_pool_t *p, vpmm_region_t *z, size_t done);
/* Phase 2: executes a plan, transactionally; *out_span is a FREE region of s with >= size bytes.
 * New handles come from pre first (may be NULL). When the device refuses the new pages and the
 * plan asked for more than the request needs (a burst's extra, or handles larger than a page),
 * it tries once more with just the needed pages, one handle each (the plan shrinks to that). A
 * refused growth ends the shared arena's allocation burst. */
vpmm_status_t vpmm_i_defrag(vpmm_pool_t *p, vpmm_stream_rec_t *s, vpmm_plan_t *plan,
                            vpmm_precreated_t *pre, vpmm_region_t **out_span);

/* ---- segments: each handle at its live address (segment.c) -------------------------------- */

/* Reports that ph's live mapping, owned by arena a, appears or goes (one pointer test when no
 * hook is set: slow paths only). */
void vpmm_i_segment_report(vpmm_pool_t *p, vpmm_segment_event_t ev, uintptr_t va, size_t size,
                           const vpmm_arena_t *a);
static inline void vpmm_i_segment(vpmm_pool_t *p, vpmm_segment_event_t ev, const vpmm_phys_t *ph,
                                  const vpmm_arena_t *a)
{
    if (VPMM_UNLIKELY(p->segment_hook != NULL))
        vpmm_i_segment_report(p, ev, ph->va, ph->size, a);
}
/* Every live handle of chunk c as appearing or going (graph-pool dissolve, pool destruction). */
void vpmm_i_segment_chunk(vpmm_pool_t *p, const vpmm_chunk_t *c, vpmm_segment_event_t ev);

/* ---- other devices' access (peer.c) ---------------------------------------------------------- */

/* Grants `device` (not yet granted, not the pool's own) read-write access to every mapping of the
 * pool and records it in p->peers, so that every later set_access names it; transactional. */
vpmm_status_t vpmm_i_peer_grant(vpmm_pool_t *p, int device);
/* Whether device may use the pool's memory: the pool's own device, or a granted one. */
int vpmm_i_peer_granted(const vpmm_pool_t *p, int device);
/* p->peers as a mask (bit k: device k), for the statistics. */
uint64_t vpmm_i_peer_mask(const vpmm_pool_t *p);

/* ---- sharing with other processes (share_table.c, share.c, import.c) ------------------------ */

/* A free slot (count 0) for a newly shared allocation, the table created at the first. */
vpmm_status_t vpmm_i_share_slot_take(vpmm_pool_t *p, uint32_t *out);
/* Gives a slot back (its allocation is gone); handles naming its old use become stale. */
void vpmm_i_share_slot_give(vpmm_pool_t *p, uint32_t slot);
/* One share more (an export); the shares not over yet (another process may map the memory). */
void vpmm_i_share_add(vpmm_pool_t *p, uint32_t slot);
uint32_t vpmm_i_share_count(const vpmm_pool_t *p, uint32_t slot);
/* Ends one share of a slot's use gen, wherever the slot is mapped (never below 0, never another
 * use's): 1 if there was one. */
int vpmm_i_share_end(vpmm_share_slot_t *s, uint32_t gen);
/* Ends every share of r's use (vpmm_ipc_unshare); nothing if r was never exported. */
void vpmm_i_share_end_all(vpmm_pool_t *p, vpmm_region_t *r);
/* What the handle bytes say of the table: its descriptor, the pool's nonce, the slot's gen. */
void vpmm_i_share_table_info(const vpmm_pool_t *p, int *fd, uint64_t *nonce, uint32_t slot,
                             uint32_t *gen);
/* Slots held by allocations now (vpmm_stats_t.ipc_shared). */
uint32_t vpmm_i_share_live(const vpmm_pool_t *p);
/* Frees the table (pool destruction). */
void vpmm_i_share_table_fini(vpmm_pool_t *p);

/* vpmm_ipc_export of allocation r: the handle bytes into buf (cap bytes; *out_len: their length,
 * also when cap is too small, then VPMM_ERROR_INVALID_ARGUMENT and nothing changes). */
vpmm_status_t vpmm_i_share_export(vpmm_pool_t *p, vpmm_region_t *r, void *buf, size_t cap,
                                  size_t *out_len);
/* Closes a handle's exported descriptor, if any (the handle is being given back). */
void vpmm_i_phys_unexport(vpmm_phys_t *ph);

/* vpmm_ipc_open / vpmm_ipc_close (import.c). */
vpmm_status_t vpmm_i_import_open(vpmm_pool_t *p, const void *handle, size_t len, void **out_ptr);
vpmm_status_t vpmm_i_import_close(vpmm_pool_t *p, void *ptr);
/* Grants `device` access to every imported mapping (vpmm_i_peer_grant's last step); on failure
 * the imports granted so far are revoked again. */
vpmm_status_t vpmm_i_import_grant(vpmm_pool_t *p, int device);
/* I14 for the imported mappings; the number of pages found inaccessible (check.c). */
size_t vpmm_i_import_check(const vpmm_pool_t *p, FILE *report);
/* Opens not closed yet (a pool with any is busy); unmaps every mapping (pool destruction). */
size_t vpmm_i_import_opens(const vpmm_pool_t *p);
vpmm_status_t vpmm_i_import_fini(vpmm_pool_t *p);

/* ---- the background worker (worker.c) ----------------------------------------------------- */

/* Starts the pool's worker thread (pool creation, when opt.worker). */
vpmm_status_t vpmm_i_worker_start(vpmm_pool_t *p);
/* Stops and joins it (NULL-safe); the caller must not hold the pool lock. */
void vpmm_i_worker_stop(vpmm_pool_t *p);
/* Wakes it: zombies appeared (p->worker != NULL; under the pool lock or not). */
void vpmm_i_worker_kick(vpmm_pool_t *p);
/* Holds it (no pass starts; one running finishes first) or undoes one hold (vpmm_trim; tests).
 * NULL-safe; the caller must not hold the pool lock. */
void vpmm_i_worker_hold(vpmm_pool_t *p, int hold);
/* One pass on the calling thread while the worker is held (the fuzzer: unmaps at defined points,
 * so that a run replays exactly). */
void vpmm_i_worker_step(vpmm_pool_t *p);
/* Waits until it has made a whole pass after this call (tests; without the pool lock). Zombies
 * that still wait for the GPU then are left for later passes. */
void vpmm_i_worker_drain(vpmm_pool_t *p);

/* ---- arenas (arena.c) ---------------------------------------------------------------------- */

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

/* ---- stats (stats.c) ------------------------------------------------------------------------ */

static inline void vpmm_i_note_peaks(vpmm_pool_t *p)
{
    if (p->c.live_bytes > p->c.peak_live_bytes)
        p->c.peak_live_bytes = p->c.live_bytes;
    if (p->c.mapped_bytes > p->c.peak_mapped_bytes)
        p->c.peak_mapped_bytes = p->c.mapped_bytes;
}

/* The same for a private arena (its mapped bytes are its allocated + free bytes). */
static inline void vpmm_i_arena_note_peaks(vpmm_arena_t *a)
{
    size_t mapped = a->c.allocated_bytes + a->c.free_bytes;
    if (a->c.live_bytes > a->c.peak_live_bytes)
        a->c.peak_live_bytes = a->c.live_bytes;
    if (mapped > a->c.peak_mapped_bytes)
        a->c.peak_mapped_bytes = mapped;
}

/* Fills a public region description. */
void vpmm_i_region_info(const vpmm_region_t *r, vpmm_region_info_t *out);

#endif /* VPMM_POOL_H */
