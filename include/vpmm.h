/*
 * vpmm.h — the one public header of vpmm, a GPU memory allocator built on the CUDA Virtual
 * Memory Management (VMM) driver API.
 *
 * A pool reserves a large virtual address range once and maps physical pages into it on demand.
 * Freed memory is reused in stream order without host synchronisation; when no free region fits,
 * the pool defragments by remapping physical pages into a fresh address range instead of copying
 * or growing. See README.md for a tour and docs/ALGORITHM.md for the algorithm.
 *
 * Conventions:
 *  - Handles are opaque (vpmm_pool_t). Every fallible call returns a vpmm_status_t; results come
 *    back through out_ parameters, which are left untouched (or set to NULL for pointers) on error.
 *  - Bad input gets a distinct status and leaves the pool unchanged. A driver failure returns
 *    VPMM_ERROR_DRIVER (or VPMM_ERROR_OUT_OF_MEMORY), leaks nothing and leaves the pool usable; the
 *    raw driver error is kept per pool (vpmm_pool_last_driver_error), a one-line explanation of the
 *    latest failure in the calling thread is in vpmm_last_error().
 *  - Thread safety: every function taking a pool may be called from any thread; calls on one pool
 *    are serialised by the pool's lock. Functions without a pool are thread-safe.
 *  - The header needs no CUDA header: vpmm_stream_t is the same type as cudaStream_t and CUstream
 *    (a pointer to struct CUstream_st), so either can be passed directly. Stream 0 (NULL) is the
 *    legacy default stream.
 */
#ifndef VPMM_H
#define VPMM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VPMM_VERSION_MAJOR 0
#define VPMM_VERSION_MINOR 1
#define VPMM_VERSION_PATCH 0

/* Every allocation is aligned to (and its size rounded up to) this many bytes, like cudaMalloc. */
#define VPMM_ALIGNMENT 256u

/* The same type as cudaStream_t / CUstream, without including a CUDA header. */
struct CUstream_st;
typedef struct CUstream_st *vpmm_stream_t;

typedef struct vpmm_pool vpmm_pool_t;

/* Status codes. Values are stable (they may be logged or compared across versions). */
typedef enum vpmm_status {
    VPMM_SUCCESS = 0,
    VPMM_ERROR_INVALID_ARGUMENT = 1,   /* a NULL pool, NULL out pointer or other bad argument */
    VPMM_ERROR_INVALID_SIZE = 2,       /* size 0 */
    VPMM_ERROR_SIZE_TOO_LARGE = 3,     /* larger than one VA chunk (VPMM_VA_SIZE), e.g. SIZE_MAX */
    VPMM_ERROR_OUT_OF_MEMORY = 4,      /* the device (or the address space) has no room */
    VPMM_ERROR_HOST_OUT_OF_MEMORY = 5, /* the host could not allocate bookkeeping */
    VPMM_ERROR_FOREIGN_POINTER = 6,    /* the pointer is not inside this pool */
    VPMM_ERROR_DOUBLE_FREE = 7,        /* the pointer is inside the pool but not allocated */
    VPMM_ERROR_INTERIOR_POINTER = 8,   /* the pointer is inside an allocation, not its start */
    VPMM_ERROR_NO_DEVICE = 9,          /* no CUDA driver or no CUDA device */
    VPMM_ERROR_NOT_SUPPORTED = 10,     /* the device lacks VMM support, or the operation is N/A */
    VPMM_ERROR_DRIVER = 11,            /* a driver call failed; see vpmm_pool_last_driver_error */
    VPMM_ERROR_INVALID_CONFIG = 12,    /* a vpmm_config_t field is out of range */
    VPMM_ERROR_INVALID_ENV = 13,       /* a VPMM_* environment variable is malformed */
    VPMM_ERROR_STREAM_CAPTURING = 14, /* the stream is being captured and no graph pool serves it */
    VPMM_ERROR_POOL_BUSY = 15,        /* the pool still has live allocations */
} vpmm_status_t;

/* Which implementation of the driver the pool runs on. */
typedef enum vpmm_backend {
    VPMM_BACKEND_AUTO = 0, /* CUDA when a device exists, otherwise the host emulation */
    VPMM_BACKEND_CUDA = 1, /* the real CUDA driver (loaded at run time) */
    VPMM_BACKEND_HOST = 2, /* CPU emulation: memfd pages, simulated streams (tests, CI, replay) */
} vpmm_backend_t;

/*
 * Pool configuration. Initialise with vpmm_config_init(), then set what you need. A field left at
 * its "default" value is taken from the environment (unless ignore_env is set), else the built-in
 * default; a value set here wins over the environment. Environment knobs are listed in README.md.
 */
typedef struct vpmm_config {
    vpmm_backend_t backend; /* VPMM_BACKEND; default AUTO */
    int device;             /* CUDA device ordinal; -1 (default) = current device, else 0 */
    size_t page_size; /* VPMM_PAGE_SIZE; 0 = driver granularity (2 MiB on H100); multiple of it */
    size_t va_size;   /* VPMM_VA_SIZE; 0 = 8 TiB; size of each reserved VA chunk */
    size_t prealloc_pages; /* VPMM_PAGES; 0 = none (grow on demand) */
    size_t host_memory;    /* VPMM_HOST_MEMORY; host backend's device memory; 0 = 80 GiB */
    int cache_percent;     /* VPMM_CACHE_PERCENT; cap on the exact-size cache, in percent of
                              mapped memory; -1 (default) = 10; 0 = no cache */
    int ignore_env;        /* nonzero: do not read VPMM_* variables */
} vpmm_config_t;

/* Pool statistics; byte counts are exact at the moment of the call. */
typedef struct vpmm_stats {
    size_t live_bytes;        /* sum of requested sizes of live allocations */
    size_t allocated_bytes;   /* the same, each rounded up to VPMM_ALIGNMENT */
    size_t peak_live_bytes;   /* max of live_bytes since creation or vpmm_reset_peak_stats */
    size_t mapped_bytes;      /* physical memory held (pages mapped at live addresses) */
    size_t peak_mapped_bytes; /* max of mapped_bytes since creation or reset */
    size_t free_bytes;        /* mapped but not allocated */
    size_t hole_bytes;        /* reserved VA with nothing mapped */
    size_t zombie_bytes;      /* old VA of remapped pages, unmapped once the GPU is done with it */
    size_t reserved_va_bytes; /* allocated + free + holes + zombies */
    size_t page_size;         /* the pool's physical page size */
    uint64_t live_allocs;     /* number of live allocations */
    uint64_t mallocs;         /* successful vpmm_malloc calls */
    uint64_t frees;           /* successful vpmm_free calls */
    uint64_t defrags;         /* mallocs that remapped at least one page */
    uint64_t pages_remapped;  /* pages moved to a new address by defragmentation */
    uint64_t pages_created;   /* pages created (grow + prealloc) */
    uint64_t handles_created; /* physical handles created (a handle holds one or more pages) */
    uint64_t handles;         /* physical handles held now */
    uint64_t pages_released;  /* pages given back to the driver */
    uint64_t grows;           /* mallocs that created physical memory */
    uint64_t ooms;            /* mallocs that failed with VPMM_ERROR_OUT_OF_MEMORY */
    uint64_t cross_stream_waits; /* GPU-side waits inserted to reuse another stream's memory */
    uint64_t va_chunks;          /* VA chunks currently reserved */
    uint64_t streams;            /* streams the pool currently tracks */
} vpmm_stats_t;

/* Region states, as reported by vpmm_pool_walk and vpmm_pool_dump. */
typedef enum vpmm_region_state {
    VPMM_REGION_ALLOCATED = 0,
    VPMM_REGION_FREE = 1,   /* mapped, reusable (by its stream at once, by others when ready) */
    VPMM_REGION_HOLE = 2,   /* reserved VA, nothing mapped */
    VPMM_REGION_ZOMBIE = 3, /* pages moved elsewhere; still mapped until the GPU is done */
} vpmm_region_state_t;

typedef struct vpmm_region_info {
    uintptr_t addr;
    size_t size;
    vpmm_region_state_t state;
    vpmm_stream_t stream; /* allocated: allocating stream; free: freeing stream (if not ready) */
    int ready;            /* free: any stream may reuse it without waiting */
    size_t requested;     /* allocated: the size the caller asked for */
    unsigned chunk;       /* index of the VA chunk, in reservation order */
    uintptr_t chunk_base; /* start of that chunk */
} vpmm_region_info_t;

/* Called once per region in address order; return nonzero to stop the walk. */
typedef int (*vpmm_region_visitor_t)(const vpmm_region_info_t *region, void *user);

/* ---- configuration and lifetime ---------------------------------------------------------- */

/* Fills *config with defaults. Never fails for a non-NULL config. */
vpmm_status_t vpmm_config_init(vpmm_config_t *config);

/*
 * Creates a pool. config may be NULL (all defaults). Reads VPMM_* environment variables (see
 * README.md); a malformed value fails with VPMM_ERROR_INVALID_ENV and vpmm_last_error() names it.
 * With no driver or device, VPMM_BACKEND_CUDA fails with VPMM_ERROR_NO_DEVICE and AUTO picks the
 * host emulation.
 */
vpmm_status_t vpmm_pool_create(const vpmm_config_t *config, vpmm_pool_t **out_pool);

/*
 * Destroys a pool: waits for the device to finish, unmaps and releases everything, frees the VA.
 * Refuses with VPMM_ERROR_POOL_BUSY (pool unchanged) while allocations are live. If a driver call
 * fails part-way the pool stays valid (smaller) and the call may be repeated.
 */
vpmm_status_t vpmm_pool_destroy(vpmm_pool_t *pool);

/* ---- allocation -------------------------------------------------------------------------- */

/*
 * Allocates size bytes for use on stream. The memory is usable by work enqueued on stream after
 * this call (any wait the pool needed was enqueued GPU-side; the host never synchronises).
 * The result is aligned to VPMM_ALIGNMENT. On error *out_ptr is set to NULL.
 */
vpmm_status_t vpmm_malloc(vpmm_pool_t *pool, size_t size, vpmm_stream_t stream, void **out_ptr);

/*
 * Frees an allocation, stream-ordered on its allocation stream: that stream may reuse the memory
 * at once, other streams once the GPU has finished the work enqueued before this call.
 * vpmm_free(pool, NULL) does nothing and succeeds, as free(3) and cudaFree(0) do.
 */
vpmm_status_t vpmm_free(vpmm_pool_t *pool, void *ptr);

/*
 * Tells the pool that stream is about to be destroyed: the pool records a last completion marker
 * on it and forgets it; memory it freed becomes reusable by other streams once that marker
 * completes. Call it before cudaStreamDestroy for streams that freed vpmm memory.
 */
vpmm_status_t vpmm_stream_release(vpmm_pool_t *pool, vpmm_stream_t stream);

/* ---- introspection ----------------------------------------------------------------------- */

vpmm_status_t vpmm_get_stats(const vpmm_pool_t *pool, vpmm_stats_t *out_stats);

/* Resets peak_live_bytes and peak_mapped_bytes to the current values. */
vpmm_status_t vpmm_reset_peak_stats(vpmm_pool_t *pool);

/* Visits every region of every VA chunk in address order (under the pool lock: do not call
 * back into the pool from the visitor). */
vpmm_status_t vpmm_pool_walk(const vpmm_pool_t *pool, vpmm_region_visitor_t visit, void *user);

/* Writes a human-readable table of every region in address order, then a stats summary. */
vpmm_status_t vpmm_pool_dump(const vpmm_pool_t *pool, FILE *out);

/*
 * Checks every internal invariant (docs/ALGORITHM.md lists them) and returns the number of
 * violations; each is described on report when report is not NULL. A NULL pool counts as one.
 */
size_t vpmm_pool_check(const vpmm_pool_t *pool, FILE *report);

/* "cuda" or "host". NULL for a NULL pool. */
const char *vpmm_pool_backend_name(const vpmm_pool_t *pool);

/*
 * The last failed driver call of this pool: *out_code is the backend's raw error (a CUresult on
 * the CUDA backend), *out_call the driver function's name ("cuMemCreate"). Both 0/NULL if none.
 */
vpmm_status_t vpmm_pool_last_driver_error(const vpmm_pool_t *pool, int *out_code,
                                          const char **out_call);

/* ---- errors ------------------------------------------------------------------------------ */

/* A short constant description of a status ("out of device memory"). Never NULL. */
const char *vpmm_strerror(vpmm_status_t status);

/* The name of the status constant ("VPMM_ERROR_OUT_OF_MEMORY"). Never NULL. */
const char *vpmm_status_name(vpmm_status_t status);

/*
 * A one-line explanation of the most recent failure of a vpmm call in this thread, e.g.
 * "VPMM_PAGE_SIZE='3X': expected bytes with an optional K, M, G or T suffix". Empty if none.
 */
const char *vpmm_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* VPMM_H */
