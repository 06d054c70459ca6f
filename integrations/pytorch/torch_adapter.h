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
 *  - the live-allocation check, a snapshot (segments and blocks), empty cache, the memory
 *    fraction;
 *  - several devices in one process: the device table (the owner of a pointer, so that a free or
 *    a recordStream reaches the pool that holds it whatever device or stream is current), peer
 *    access granted per device, the OutOfMemoryError text naming the device;
 *  - CUDA IPC: handles exported (shareIpcHandle) and opened (getIpcDevPtr), the handles of other
 *    allocators told apart and refused by name, the shares a free ends;
 *  - segments: the physical handles reported as they come and go (PyTorch's allocator trace
 *    trackers: NCCL registers them) and listed by a snapshot that agrees with those events.
 *
 * Thread-safety: every function may be called from any thread; a device's own mutex guards its
 * id table, statistics and IPC books (never held across a vpmm call that may block on the
 * device).
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
/* The pool type of a block of a pool with its own allocator (size asked): PyTorch's small pool
 * for at most VTA_SMALL_SIZE once rounded to VPMM_ALIGNMENT, as the native allocator types it.
 * vpmm's own blocks are all "large": they live in its pages, of one size. */
#define VTA_EXTERNAL_TYPE(size)                                                                    \
    (((size) + VPMM_ALIGNMENT - 1) / VPMM_ALIGNMENT * VPMM_ALIGNMENT <= VTA_SMALL_SIZE             \
         ? VTA_SMALL                                                                               \
         : VTA_LARGE)

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

/* A vpmm graph pool's mempool id, kept while the graph pool may have segments (events name it
 * after the id's last reference: torch_adapter_segments.c). */
typedef struct vta_gp_name {
    unsigned gp;      /* vpmm's graph pool id */
    vta_pool_id_t id; /* PyTorch's mempool id */
    int released;     /* the id's last reference is gone */
    int seen;         /* a pruning walk found a segment of it */
} vta_gp_name_t;

/*
 * A segment of a device's pool appeared (VPMM_SEGMENT_MAPPED: mapped and usable) or is about to
 * go (VPMM_SEGMENT_UNMAPPED: reported before it moves or is unmapped): [addr, addr + size), one
 * physical handle, owned by mempool id `pool` ({0,0}: the shared pool). Called under vpmm's pool
 * lock: it must not call into that pool, nor take a lock that a thread may hold while it calls
 * into vpmm (a device's `lock` is one).
 */
typedef void (*vta_segment_sink_t)(void *user, int device, vpmm_segment_event_t event,
                                   uintptr_t addr, size_t size, vta_pool_id_t pool);

typedef struct vta_device {
    vpmm_pool_t *pool;
    int device;
    size_t page_size; /* the pool's (sizes an IPC handle) */
    pthread_mutex_t lock;
    vta_pool_entry_t *pools; /* live mempool ids (use_count > 0) */
    size_t npools, cap;
    vta_stats_t stats;
    uint64_t base_created, base_released; /* vpmm's page counters at the last accumulated reset */
    vta_external_t *ext;                  /* live allocations of pools with their own allocator */
    size_t next, ext_cap;
    vta_stat_t ext_reserved[VTA_NTYPES], ext_segment[VTA_NTYPES]; /* their part of the stats */
    int64_t ext_allocs, ext_frees;
    double fraction;          /* setMemoryFraction's (1.0: no cap) */
    uint64_t peers;           /* bit k: device k was given access to this pool (vta_grant_peer) */
    uint64_t ipc_open_calls;  /* vta_ipc_open calls that mapped (or found) a handle */
    uint64_t ipc_close_calls; /* vta_ipc_close calls that ended one */
    /* The allocations of this pool exported and not freed since (their starts, sorted): a free
     * of one ends its shares first (vta_free_known). nexported is read without the lock (a
     * relaxed load: a free of memory never exported pays nothing more), written under it. */
    uintptr_t *exported;
    size_t nexported, exported_cap;
    uint64_t ipc_unshares; /* frees that ended an exported allocation's shares */
    /* Segments (torch_adapter_segments.c): seg_lock is a leaf, taken under vpmm's pool lock by
     * the segment hook; it guards the names and the sink. */
    pthread_mutex_t seg_lock;
    vta_gp_name_t *names; /* graph pool id -> mempool id */
    size_t nnames, names_cap, nreleased;
    vta_segment_sink_t sink; /* vta_segments_attach's */
    void *sink_user;
} vta_device_t;

/* Starts a device's state over pool (the caller keeps the pool alive); 0 or -1 (no memory). */
int vta_device_init(vta_device_t *d, vpmm_pool_t *pool, int device);
/* Releases every mempool id's graph pool and frees the state (not the pool). */
void vta_device_fini(vta_device_t *d);

/* ---- allocation ---------------------------------------------------------------------------- */

/* size bytes on stream, from the shared pool (id {0,0}) or id's graph pool (which must hold a
 * reference: VPMM_ERROR_INVALID_ARGUMENT otherwise). Counts the statistics; a failure about size
 * (vta_is_oom) is counted in num_ooms (the caller throws with vta_oom_message). */
vpmm_status_t vta_malloc(vta_device_t *d, size_t size, vpmm_stream_t stream, vta_pool_id_t id,
                         void **out);
/* Frees ptr (NULL: nothing); its size comes from vpmm (vpmm_pointer_info). An allocation that
 * was exported (vta_ipc_export) has its shares ended first (vpmm_ipc_unshare): PyTorch frees a
 * shared block only once every consumer released it, so no other process uses it any more. */
vpmm_status_t vta_free(vta_device_t *d, void *ptr);
/* The same for a caller that has just asked vpmm_pointer_info (info: its answer for ptr). */
vpmm_status_t vta_free_known(vta_device_t *d, void *ptr, const vpmm_region_info_t *info);
/* recordStream: ptr is also used on stream (vpmm_record_stream). A pointer vpmm does not know
 * (another allocator's) is ignored, as the native allocator ignores foreign DataPtrs. */
vpmm_status_t vta_record_stream(vta_device_t *d, void *ptr, vpmm_stream_t stream);
/* The out-of-memory vta_malloc just counted is being retried after freeing memory (PyTorch's
 * free-memory callbacks, e.g. torch.multiprocessing's IPC collection): counted as a retry
 * (num_alloc_retries) instead; the retry counts again if it fails. */
void vta_oom_retried(vta_device_t *d);
/* Whether an allocation's failure is about size, which PyTorch raises as OutOfMemoryError:
 * the device (or the cap) had no room (VPMM_ERROR_OUT_OF_MEMORY), or the request is larger than
 * the address range vpmm reserves at once (VPMM_ERROR_SIZE_TOO_LARGE). */
int vta_is_oom(vpmm_status_t st);
/*
 * The text of PyTorch's OutOfMemoryError for an allocation of size bytes on d's device that
 * failed with st (call it on the failing thread, right after the failure: it reads
 * vpmm_last_error for SIZE_TOO_LARGE): what was asked, on which device, why.
 *   "CUDA out of memory. Tried to allocate 2.00 GiB (2147483648 bytes) on device 1. GPU 1 has a
 *    total capacity of 79.19 GiB of which 1.02 GiB is free. vpmm: <why>"
 * The capacity sentence only when device_total > 0 (the caller's cudaMemGetInfo of that device);
 * <why> is vpmm's out-of-memory report (OUT_OF_MEMORY) or what was too large and the knob
 * (SIZE_TOO_LARGE), and the memory fraction when one caps the device. Returns buf.
 */
const char *vta_oom_message(vta_device_t *d, size_t size, vpmm_status_t st, size_t device_total,
                            size_t device_free, char *buf, size_t len);
/* PyTorch's format_size: "512 bytes", "1.50 KiB", "2.00 MiB", "3.25 GiB". Returns buf. */
const char *vta_format_size(uint64_t bytes, char *buf, size_t len);

/* ---- several devices (one vta_device_t per device, in a table) ------------------------------
 *
 * A process with several GPUs has one vta_device_t per device it used, in a table indexed by
 * device: devs[i] is device i's state, NULL while it has none. Entries are read with acquire
 * loads (__atomic_load_n), so one thread may publish a new device (__atomic_store_n, release)
 * while others look pointers up. What PyTorch gives with a pointer — a DataPtr's device, a
 * stream — may name another device than the one whose pool holds it: these functions go by the
 * pool that holds the pointer. */

/* The device whose pool holds ptr (any address inside it): its index, or -1. hint (a DataPtr's
 * device; -1 for none) is asked first. *info (may be NULL) gets vpmm_pointer_info's answer. */
int vta_owner(vta_device_t *const *devs, size_t n, const void *ptr, int hint,
              vpmm_region_info_t *info);
/* raw_delete: frees ptr on the pool that holds it, whatever device is current; the statistics
 * fall on that device. *owner (may be NULL) gets its index, or -1: VPMM_ERROR_FOREIGN_POINTER
 * when no pool holds ptr. *info (may be NULL) gets the allocation as it was. */
vpmm_status_t vta_free_any(vta_device_t *const *devs, size_t n, void *ptr, int *owner,
                           vpmm_region_info_t *info);
/* recordStream: ptr is also used on stream, a stream of any device; recorded on the pool that
 * holds ptr (hint: the DataPtr's device), not the stream's device's. A pointer no pool holds
 * (another allocator's) is ignored: VPMM_SUCCESS with *owner = -1. *owner may be NULL. */
vpmm_status_t vta_record_stream_any(vta_device_t *const *devs, size_t n, void *ptr, int hint,
                                    vpmm_stream_t stream, int *owner);
/* enablePeerAccess(peer, d's device)'s vpmm half: device `peer` gets read-write access to every
 * byte d's pool maps, now and later (vpmm_pool_grant_access), recorded in d->peers. The pool's
 * own device, or a peer granted before: nothing to do. vpmm's status and message otherwise
 * (INVALID_ARGUMENT: no such device; NOT_SUPPORTED: no peer access between them). */
vpmm_status_t vta_grant_peer(vta_device_t *d, int peer);

/* setMemoryFraction: d's pool maps at most fraction * device_total bytes from now on
 * (vpmm_set_max_bytes, rounded down to whole pages; a cap under one page, 0 included, is one
 * page: vpmm's smallest); 1.0 lifts the cap. INVALID_ARGUMENT for a fraction outside [0, 1] or a
 * device_total of 0 with a fraction under 1 (nothing changes). */
vpmm_status_t vta_set_memory_fraction(vta_device_t *d, double fraction, size_t device_total);
/* getMemoryFraction (1.0 until set). */
double vta_memory_fraction(vta_device_t *d);

/* ---- CUDA IPC (shareIpcHandle / getIpcDevPtr) ------------------------------------------------
 *
 * The handle PyTorch sends (ShareableHandle.handle) is the bytes vpmm_ipc_export writes for the
 * allocation that holds the pointer; ShareableHandle.offset is the pointer's offset from that
 * allocation's start. getIpcDevPtr returns the allocation's start in the consumer (what
 * vpmm_ipc_open returns), so torch.multiprocessing's devPtr = base + offset is the byte the
 * producer's pointer named (the storage's own data pointer: offset 0). */

/* What a handle's bytes are. */
typedef enum vta_ipc_kind {
    VTA_IPC_VPMM = 0,               /* vpmm_ipc_export's (starts with "vpmmIPC1") */
    VTA_IPC_NATIVE_CUDA_MALLOC = 1, /* PyTorch's own allocator, a cudaMalloc segment: version 2,
                                       type 'c', a cudaIpcMemHandle_t (66 bytes) */
    VTA_IPC_NATIVE_EXPANDABLE = 2,  /* PyTorch's own allocator with expandable_segments:True:
                                       version 2, type 'e', a header and the segment's handles */
    VTA_IPC_LEGACY = 3,             /* a bare cudaIpcMemHandle_t (64 bytes): PyTorch before 2.5, or
                                       cudaIpcGetMemHandle's */
    VTA_IPC_UNKNOWN = 4,            /* none of these */
} vta_ipc_kind_t;
vta_ipc_kind_t vta_ipc_kind(const void *bytes, size_t len);
/* Why a handle that is not vpmm's cannot be opened, naming its format and what to do. Returns buf.
 */
const char *vta_ipc_refusal(const void *bytes, size_t len, char *buf, size_t cap);

/*
 * shareIpcHandle(ptr): exports the allocation of d's pool that holds ptr (vpmm_ipc_export: one
 * share, which one open in another process takes over and its close ends) and remembers it as
 * exported, so that its free ends the shares no close has ended (vta_free). *out gets the handle
 * (malloc'd: the caller frees it), *len its length, *offset ptr - the allocation's start. Refused
 * with vpmm's status and message: a pointer that is not in a live allocation (the statuses of
 * vpmm_free), a graph pool's allocation (graph pools and MemPools are not shared), a pool whose
 * memory cannot be exported (VPMM_ERROR_NOT_SUPPORTED: VPMM_IPC=0, or the device has no
 * POSIX-descriptor handles); HOST_OUT_OF_MEMORY before anything is exported.
 *
 * The lifetime of a shared block: PyTorch's reference counts hold it (the producer frees it only
 * once every consumer has released it: CudaIPCSentData), and a consumer that receives the same
 * block again while it holds it opens nothing (its cache), so that send's share is never closed.
 * vpmm's share counts protect a C user of vpmm_ipc_* (memory freed while shared is not reused
 * until every share is over); for PyTorch the free ends them (vpmm_ipc_unshare), and the memory
 * is reused at once.
 */
vpmm_status_t vta_ipc_export(vta_device_t *d, const void *ptr, unsigned char **out, size_t *len,
                             size_t *offset);
/*
 * getIpcDevPtr(handle): maps another process's allocation on d's pool (vpmm_ipc_open: the same
 * pages are mapped once however often opened) and returns its start. Each call is one open that
 * one vta_ipc_close ends. VPMM_ERROR_INVALID_ARGUMENT for bytes that are not a vpmm handle
 * (vta_ipc_refusal says what they are) or a stale one; vpmm's status and message otherwise
 * (NOT_SUPPORTED when the system refuses to pass the descriptors).
 */
vpmm_status_t vta_ipc_open(vta_device_t *d, const void *handle, size_t len, void **out);
/* The deleter of getIpcDevPtr's pointer: ends one vta_ipc_open of ptr (vpmm_ipc_close; the last
 * one waits for the device, then unmaps). */
vpmm_status_t vta_ipc_close(vta_device_t *d, void *ptr);
/* The IPC counters of d (any pointer may be NULL): opens and closes made here, frees that ended an
 * exported allocation's shares, opens not closed yet, exported allocations not freed yet. */
void vta_ipc_counts(vta_device_t *d, uint64_t *open_calls, uint64_t *close_calls,
                    uint64_t *unshares, size_t *open_now, size_t *exported_now);

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
/* emptyCache synchronised the device before its trim (so that blocks whose stream work was
 * pending go back too): counted in num_sync_all_streams, one per call and device, as native. */
void vta_note_sync_all(vta_device_t *d);
/* cacheInfo: the largest free span. */
size_t vta_largest_free(vta_device_t *d);

/* One block of a snapshot segment (BlockInfo): an allocation, a part of one, or free memory. */
typedef struct vta_block {
    uintptr_t address;
    size_t size, requested_size; /* requested: the part of the request that lies in the block */
    int allocated;               /* an allocation's bytes */
    int continued; /* handle segments: a later part of an allocation that begins in an earlier
                      segment (PyTorch sees it as active, not allocated: one allocated block per
                      allocation) */
} vta_block_t;

/* One segment (SegmentInfo). vta_snapshot's: a run of mapped regions of one VA chunk with no hole
 * between them, of one pool (a mempool id's graph pool, or the shared pool: id {0,0}) and one
 * stream — an allocation of another stream than the run's first starts a new segment, as each
 * native segment belongs to one stream (free memory stays with the segment it follows).
 * vta_snapshot_handles': one physical handle at its live address. Either way its blocks tile
 * it. */
typedef struct vta_segment {
    uintptr_t address;
    size_t total_size, allocated_size, requested_size;
    vpmm_stream_t stream; /* the first allocation's stream, NULL if none */
    vta_pool_id_t pool;
    vta_block_t *blocks;
    size_t nblocks;
    int type;       /* VTA_LARGE, or VTA_SMALL (an external allocation: VTA_EXTERNAL_TYPE) */
    int expandable; /* SegmentInfo.is_expandable. 1: a run of vta_snapshot, mapped page by page
                       as PyTorch's expandable segments are, so PyTorch reads it as they are read:
                       the segment statistic counts vpmm's physical handles, not runs, and a run's
                       free regions are not "inactive split" blocks. 0: a physical handle of
                       vta_snapshot_handles (a unit NCCL registers), an external allocation. */
} vta_segment_t;

/* snapshot(id): every segment (id {0,0} and all = 1), or only id's graph pool's (all = 0).
 * *out is an array the caller frees with vta_snapshot_free. Segments are runs of regions: each
 * allocation is one block (what PyTorch's memory tools expect). */
vpmm_status_t vta_snapshot(vta_device_t *d, vta_pool_id_t id, int all, vta_segment_t **out,
                           size_t *n);
/* The same with vpmm's segments: each physical handle at its live address — exactly the segments
 * the events have reported (vta_segments_attach), each named by the mempool id its events named
 * — its blocks the regions clipped to it; an allocation that spans several handles is one
 * allocated block in the first and a continued block in each other (torch_adapter_segments.c).
 * The segments of pools with their own allocator as vta_snapshot's. */
vpmm_status_t vta_snapshot_handles(vta_device_t *d, vta_pool_id_t id, int all, vta_segment_t **out,
                                   size_t *n);
void vta_snapshot_free(vta_segment_t *segs, size_t n);

/* ---- segment events (PyTorch's allocator trace trackers; NCCL registration) ----------------- */

/* From now on, every segment event of d's pool reaches sink (NULL: none), with the mempool id of
 * the segment's graph pool. Events before the call are not replayed: vta_snapshot_handles lists
 * what exists. vpmm's status (the pool's hook is set). */
vpmm_status_t vta_segments_attach(vta_device_t *d, vta_segment_sink_t sink, void *user);

/* VPMM_TORCH_SEGMENTS: which segments snapshot() reports. */
typedef enum vta_segments_mode {
    VTA_SEGMENTS_AUTO = 0,    /* unset, "" or "auto": the physical handles while a trace tracker
                                 is attached (NCCL registers what snapshot lists), else runs */
    VTA_SEGMENTS_HANDLES = 1, /* "handles": the physical handles always */
} vta_segments_mode_t;
/* 0 and *out, or -1 for any other text (*out unchanged). */
int vta_segments_mode_parse(const char *text, vta_segments_mode_t *out);

/* ---- internal (across the adapter's files) ------------------------------------------------- */

/* Room for `need` elements of `elem` bytes in the array stored at arr_ptr (a pointer to the
 * caller's T * variable) of capacity *cap: the capacity (`first` when 0) doubled until it holds
 * need. 0, or -1 with the array and *cap untouched (no host memory, or an overflow). The adapter's
 * copy of the library's internal vpmm_i_grow (src/ds/array.h): the adapter uses vpmm.h only.
 * VTA_GROW is the typed call. */
int vta_i_grow(void *arr_ptr, size_t *cap, size_t need, size_t elem, size_t first);
#define VTA_GROW(arr, cap, need, first) vta_i_grow(&(arr), &(cap), (need), sizeof *(arr), (first))

/* Forgets ptr as exported: 1 if it was (its free must end its shares), 0 if not. */
int vta_i_exported_forget(vta_device_t *d, const void *ptr);
/* Graph pool names (torch_adapter_segments.c; vta_pool_incref / vta_pool_decref): room for one
 * more (HOST_OUT_OF_MEMORY), the name of a new graph pool (room made), its last reference gone,
 * the released names without segments dropped. */
vpmm_status_t vta_i_names_reserve(vta_device_t *d);
void vta_i_names_add(vta_device_t *d, const vpmm_graph_pool_t *gp, vta_pool_id_t id);
void vta_i_names_release(vta_device_t *d, unsigned gp);
void vta_i_names_prune(vta_device_t *d);

#ifdef __cplusplus
}
#endif

#endif /* VPMM_TORCH_ADAPTER_H */
