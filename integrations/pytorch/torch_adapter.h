/*
 * torch_adapter.h — the logic of vpmm's PyTorch CUDAAllocator backend, in C: what PyTorch's
 * c10::cuda::CUDACachingAllocator::CUDAAllocator asks of an allocator (integrations/pytorch/
 * INTERFACE.md), on one vpmm pool per device. The C++ class that PyTorch calls is a thin layer
 * over these functions (it evaluates PyTorch's routing filters, builds DataPtrs, throws
 * OutOfMemoryError); everything that can be tested without PyTorch is here and in
 * test_torch_adapter.c, on the host backend.
 *
 * One vta_device_t per CUDA device, over a vpmm pool:
 *  - PyTorch mempool ids (a pair of counters, never reused) map to vpmm graph pools, with
 *    PyTorch's use count: vta_pool_incref (beginAllocateToPool, createOrIncrefPool) creates the
 *    graph pool at its first reference, vta_pool_decref (releasePool) drops it at the last one —
 *    vpmm then returns its pages to the shared pool once its graphs are gone too, and live
 *    allocations stay valid;
 *  - vta_malloc allocates from the shared pool, or from a mempool id's graph pool (the routing
 *    PyTorch's filters chose), and keeps PyTorch's statistics (vta_stats_t: DeviceStats' shape);
 *  - checkpoints of a mempool id's graph pool, applied with the CheckpointDelta PyTorch's graph
 *    trees expect (the allocations freed, the allocations made live again);
 *  - the live-allocation check, a snapshot (segments and blocks), empty cache.
 *
 * Thread-safety: every function may be called from any thread; a device's own mutex guards its
 * id table and statistics (never held across a vpmm call that may block on the device).
 */
#ifndef VPMM_TORCH_ADAPTER_H
#define VPMM_TORCH_ADAPTER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "vpmm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* c10::CachingAllocator::Stat, and StatType's indices (AGGREGATE, SMALL_POOL, LARGE_POOL). */
typedef struct vta_stat {
    int64_t current, peak, allocated, freed;
} vta_stat_t;
enum { VTA_ALL = 0, VTA_SMALL = 1, VTA_LARGE = 2, VTA_NTYPES = 3 };
#define VTA_SMALL_SIZE ((size_t)1 << 20) /* PyTorch's kSmallSize: a block this size or less */

/* c10::CachingDeviceAllocator::DeviceStats, field for field. How vpmm fills each is in
 * torch_adapter.c ("Statistics"). */
typedef struct vta_stats {
    vta_stat_t allocation[VTA_NTYPES], segment[VTA_NTYPES], active[VTA_NTYPES],
        inactive_split[VTA_NTYPES], allocated_bytes[VTA_NTYPES], reserved_bytes[VTA_NTYPES],
        active_bytes[VTA_NTYPES], inactive_split_bytes[VTA_NTYPES], requested_bytes[VTA_NTYPES];
    int64_t num_alloc_retries, num_ooms;
    vta_stat_t oversize_allocations, oversize_segments;
    int64_t num_sync_all_streams, num_device_alloc, num_device_free, max_split_size;
} vta_stats_t;

/* A PyTorch MempoolId_t: {0, 0} is the default (shared) pool. */
typedef struct vta_pool_id {
    uint64_t first, second;
} vta_pool_id_t;

typedef struct vta_pool_entry {
    vta_pool_id_t id;
    vpmm_graph_pool_t *gp; /* NULL for a pool served by its own allocator */
    int64_t use_count;
} vta_pool_entry_t;

/* An allocation of a MemPool with its own allocator (another CUDAAllocator: vpmm never sees
 * that memory; it counts it in the statistics and shows it in snapshots, as the native
 * allocator does). */
typedef struct vta_external {
    void *ptr;
    size_t size;
    vpmm_stream_t stream;
    vta_pool_id_t pool;
} vta_external_t;

typedef struct vta_device {
    vpmm_pool_t *pool;
    int device;
    pthread_mutex_t lock;
    vta_pool_entry_t *pools; /* live mempool ids (use_count > 0) */
    size_t npools, cap;
    vta_stats_t stats;
    uint64_t base_created, base_released; /* vpmm's page counters at the last accumulated reset */
    vta_external_t *ext;                  /* live allocations of pools with their own allocator */
    size_t next, ext_cap;
    vta_stat_t ext_reserved[VTA_NTYPES], ext_segment[VTA_NTYPES]; /* their part of the stats */
    int64_t ext_allocs, ext_frees;
} vta_device_t;

/* Starts a device's state over pool (the caller keeps the pool alive); 0 or -1 (no memory). */
int vta_device_init(vta_device_t *d, vpmm_pool_t *pool, int device);
/* Releases every mempool id's graph pool and frees the state (not the pool). */
void vta_device_fini(vta_device_t *d);

/* ---- allocation ---------------------------------------------------------------------------- */

/* size bytes on stream, from the shared pool (id {0,0}) or id's graph pool (which must hold a
 * reference: VPMM_ERROR_INVALID_ARGUMENT otherwise). Counts the statistics; an out-of-memory is
 * counted in num_ooms (the caller throws with vta_oom_message). */
vpmm_status_t vta_malloc(vta_device_t *d, size_t size, vpmm_stream_t stream, vta_pool_id_t id,
                         void **out);
/* Frees ptr (NULL: nothing); its size comes from vpmm (vpmm_pointer_info). */
vpmm_status_t vta_free(vta_device_t *d, void *ptr);
/* The same for a caller that has just asked vpmm_pointer_info (info: its answer for ptr). */
vpmm_status_t vta_free_known(vta_device_t *d, void *ptr, const vpmm_region_info_t *info);
/* recordStream: ptr is also used on stream (vpmm_record_stream). A pointer vpmm does not know
 * (another allocator's) is ignored, as the native allocator ignores foreign DataPtrs. */
vpmm_status_t vta_record_stream(vta_device_t *d, void *ptr, vpmm_stream_t stream);
/* The OOM message for PyTorch's OutOfMemoryError: "CUDA out of memory. Tried to allocate ..."
 * followed by vpmm's report. Returns buf. */
const char *vta_oom_message(vta_device_t *d, size_t size, char *buf, size_t len);

/* ---- mempool ids ---------------------------------------------------------------------------- */

/* beginAllocateToPool / createOrIncrefPool: one more reference to id (a graph pool at the first;
 * an existing id of either kind is referenced as it is). */
vpmm_status_t vta_pool_incref(vta_device_t *d, vta_pool_id_t id);
/* releasePool: one reference less; at 0 the graph pool's handle goes (INVALID_ARGUMENT for an
 * id with no reference). */
vpmm_status_t vta_pool_decref(vta_device_t *d, vta_pool_id_t id);
/* createOrIncrefPool with an allocator: one more reference to id, a pool whose memory comes from
 * that allocator (the caller keeps it and calls it; see vta_external_add). INVALID_ARGUMENT if id
 * already is a vpmm graph pool, or {0,0}. */
vpmm_status_t vta_pool_incref_external(vta_device_t *d, vta_pool_id_t id);
/* 1 if id is a pool with its own allocator, 0 if not. */
int vta_pool_is_external(vta_device_t *d, vta_pool_id_t id);
/* Counts ptr (size bytes, from id's own allocator, on stream) as live: statistics, snapshots.
 * INVALID_ARGUMENT if id is not such a pool, HOST_OUT_OF_MEMORY (nothing counted). */
vpmm_status_t vta_external_add(vta_device_t *d, vta_pool_id_t id, void *ptr, size_t size,
                               vpmm_stream_t stream);
/* Forgets ptr if it is such an allocation: 1 (its size in *size), else 0. */
int vta_external_remove(vta_device_t *d, void *ptr, size_t *size);
/* getPoolUseCount (0 for an unknown id). */
int64_t vta_pool_use_count(vta_device_t *d, vta_pool_id_t id);
/* The graph pool of id, or NULL. */
vpmm_graph_pool_t *vta_pool_graph_pool(vta_device_t *d, vta_pool_id_t id);
/* The mempool id of a vpmm graph pool id (vpmm_region_info_t.pool), {0,0} if none. Both under
 * d->lock (the caller takes it). */
vta_pool_id_t vta_pool_of_graph_pool(vta_device_t *d, unsigned gp_id);

/* ---- checkpoints ---------------------------------------------------------------------------- */

/* getCheckpointState: a checkpoint of id's graph pool. */
vpmm_status_t vta_checkpoint_take(vta_device_t *d, vta_pool_id_t id, vpmm_checkpoint_t **out);
/*
 * setCheckpointPoolState: makes the checkpoint's graph pool what it was. *freed (n_freed) gets
 * every allocation that was live in the graph pool before, *allocd (n_allocd) every allocation
 * the checkpoint makes live again (the same address may be in both: PyTorch's CheckpointDelta).
 * Both arrays are the caller's to free(). Statistics follow.
 */
vpmm_status_t vta_checkpoint_apply(vta_device_t *d, const vpmm_checkpoint_t *ck, void ***freed,
                                   size_t *n_freed, void ***allocd, size_t *n_allocd);
/* checkPoolLiveAllocations: 1 if the live allocations of id's graph pool are exactly ptrs[0..n)
 * (in any order), 0 if not, -1 for an id without a graph pool. */
int vta_pool_live_matches(vta_device_t *d, vta_pool_id_t id, void *const *ptrs, size_t n);

/* ---- statistics, cache, snapshot ------------------------------------------------------------ */

/* getDeviceStats / resetPeakStats / resetAccumulatedStats. */
void vta_get_stats(vta_device_t *d, vta_stats_t *out);
void vta_reset_peak(vta_device_t *d);
void vta_reset_accumulated(vta_device_t *d);
/* emptyCache: gives every free page back (vpmm_trim); the bytes given back. */
size_t vta_empty_cache(vta_device_t *d);
/* cacheInfo: the largest free span. */
size_t vta_largest_free(vta_device_t *d);

/* One block of a snapshot segment (BlockInfo): an allocation or free memory. */
typedef struct vta_block {
    uintptr_t address;
    size_t size, requested_size;
    int allocated;
} vta_block_t;

/* One segment (SegmentInfo): a run of mapped regions of one VA chunk with no hole between them,
 * of one pool (a mempool id's graph pool, or the shared pool: id {0,0}) and one stream — an
 * allocation of another stream than the run's first starts a new segment, as each native segment
 * belongs to one stream (free memory stays with the segment it follows). Its blocks tile it. */
typedef struct vta_segment {
    uintptr_t address;
    size_t total_size, allocated_size, requested_size;
    vpmm_stream_t stream; /* the first allocation's stream, NULL if none */
    vta_pool_id_t pool;
    vta_block_t *blocks;
    size_t nblocks;
} vta_segment_t;

/* snapshot(id): every segment (id {0,0} and all = 1), or only id's graph pool's (all = 0).
 * *out is an array the caller frees with vta_snapshot_free. */
vpmm_status_t vta_snapshot(vta_device_t *d, vta_pool_id_t id, int all, vta_segment_t **out,
                           size_t *n);
void vta_snapshot_free(vta_segment_t *segs, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* VPMM_TORCH_ADAPTER_H */
