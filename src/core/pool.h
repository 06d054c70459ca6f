/*
 * pool.h — the core pool's data model: the structs and their invariants (I1–I14 below), which
 * every core file shares. Each core file's functions are declared in a header of its own
 * (region.h, stream.h, cache.h, pages.h, va.h, policy.h, defrag.h, uses.h, arena.h, ...; entry.h
 * for what the API floor calls; core.h includes them all), and a file includes pool.h and the
 * headers of the files it calls. Nothing outside src/core/ and src/api/ includes it (and the
 * tests): graph/ and checkpoint/ use the narrower src/core/internal.h.
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
    size_t unreleased_reserved; /* room in unreleased promised to releases in progress without
                                   the lock (trim.c): cap >= nunreleased + reserved */

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
    size_t mapped_high;         /* the most mapped_bytes ever (never reset, unlike the peak
                                   statistics): a growth above it gives unused handles back first
                                   (trim.c, vpmm_i_trim_for_growth) */
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

#endif /* VPMM_POOL_H */
