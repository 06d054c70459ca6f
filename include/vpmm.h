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
 *  - Threads: one pool is meant to be shared by every thread of a process. Each function says
 *    "Threads:" at its declaration; the words mean:
 *      any    — callable from any number of threads at once, on the same pool too. It holds the
 *               pool's lock (a futex mutex) for its bookkeeping only and makes no slow driver call
 *               under it (slow: creating or releasing physical memory, destroying a graph; the
 *               calls made under it cost ~0.1–80 µs each, docs/ALGORITHM.md "Locking").
 *      free   — touches no pool: callable from any thread at any time.
 *      alone  — no other call on this pool (or object) may run at the same time, as with free(3)
 *               of any object: the caller makes sure every other thread is done with it.
 *    A pointer may be freed on another thread than the one that allocated it; the ordering rules
 *    are the stream's, never the thread's. Pool creation reads the environment: do not setenv(3)
 *    concurrently (the C library's rule).
 *  - The header needs no CUDA header: vpmm_stream_t is the same type as cudaStream_t and CUstream
 *    (a pointer to struct CUstream_st), so either can be passed directly. The special handles
 *    mean what they mean to CUDA: VPMM_STREAM_LEGACY (cudaStreamLegacy) is the legacy default
 *    stream; VPMM_STREAM_PER_THREAD (cudaStreamPerThread) is the calling thread's own per-thread
 *    stream, a different stream in each thread; stream 0 (NULL) is the legacy default stream, or
 *    the calling thread's per-thread stream in a program built with --default-stream per-thread
 *    (vpmm_config_t.default_stream; set automatically by vpmm_config_init in a file compiled
 *    that way). vpmm tells the per-thread streams of different threads apart: a block freed on
 *    one thread's per-thread stream is reused by another thread only after that stream's work.
 */
#ifndef VPMM_H
#define VPMM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The version of this header. It is written here only: CMake's project(VERSION) reads these three
 * lines, and vpmm_version() returns the library's own, which differs only when a program runs
 * against another build of libvpmm than the header it was compiled with. While the major version is
 * 0, a new minor version may change the ABI (the SONAME carries it: libvpmm.so.0.1).
 */
#define VPMM_VERSION_MAJOR 0
#define VPMM_VERSION_MINOR 1
#define VPMM_VERSION_PATCH 0
/* One number for #if: 0.1.0 is 100, 1.2.3 is 10203. */
#define VPMM_VERSION (VPMM_VERSION_MAJOR * 10000 + VPMM_VERSION_MINOR * 100 + VPMM_VERSION_PATCH)

/* Every allocation is aligned to (and its size rounded up to) this many bytes, like cudaMalloc. */
#define VPMM_ALIGNMENT 256u

/* The same types as cudaStream_t / CUstream and cudaGraph_t / CUgraph, without a CUDA header. */
struct CUstream_st;
typedef struct CUstream_st *vpmm_stream_t;
struct CUgraph_st;
typedef struct CUgraph_st *vpmm_graph_t;

/* CUDA's special stream handles (CU_STREAM_LEGACY / cudaStreamLegacy and CU_STREAM_PER_THREAD /
 * cudaStreamPerThread, same values), usable wherever a vpmm_stream_t is taken. */
#define VPMM_STREAM_LEGACY     ((vpmm_stream_t)0x1)
#define VPMM_STREAM_PER_THREAD ((vpmm_stream_t)0x2)

typedef struct vpmm_pool vpmm_pool_t;
typedef struct vpmm_graph_pool vpmm_graph_pool_t; /* a private pool for captured graphs */
typedef struct vpmm_checkpoint vpmm_checkpoint_t; /* a graph pool's region state, saved */

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
    VPMM_ERROR_NO_DEVICE = 9,          /* no CUDA driver or no CUDA device (the CUDA backend) */
    VPMM_ERROR_NOT_SUPPORTED = 10,     /* the device lacks VMM support, or the operation is N/A */
    VPMM_ERROR_DRIVER = 11,            /* a driver call failed; see vpmm_pool_last_driver_error */
    VPMM_ERROR_INVALID_CONFIG = 12,    /* a vpmm_config_t field is out of range */
    VPMM_ERROR_INVALID_ENV = 13,       /* a VPMM_* environment variable is malformed or unknown */
    VPMM_ERROR_STREAM_CAPTURING = 14,  /* the stream (or graph pool) is being captured: not now */
    VPMM_ERROR_POOL_BUSY = 15,         /* live allocations or graph pools remain */
    VPMM_ERROR_WRONG_POOL = 16,        /* the object belongs to another pool or graph pool */
    VPMM_ERROR_CHECKPOINT_CONFLICT = 17, /* a checkpointed allocation is no longer mapped */
    VPMM_ERROR_NOT_CAPTURING = 18,       /* the stream is not being captured */
    VPMM_ERROR_IO = 19, /* a file vpmm writes (the VPMM_TRACE_FILE trace) could not be written */
} vpmm_status_t;

/*
 * Which implementation of the driver the pool runs on. The default is CUDA: without a driver or
 * a device, vpmm_pool_create fails with VPMM_ERROR_NO_DEVICE rather than hand out host memory.
 * The host emulation runs only when asked for by name (here or with VPMM_BACKEND=host).
 */
typedef enum vpmm_backend {
    VPMM_BACKEND_DEFAULT = 0, /* VPMM_BACKEND if set, else CUDA */
    VPMM_BACKEND_CUDA = 1,    /* the real CUDA driver (loaded at run time) */
    VPMM_BACKEND_HOST = 2,    /* CPU emulation: memfd pages, simulated streams (tests, CI) */
} vpmm_backend_t;

/* What stream 0 (NULL) names in the application: that depends on how it was compiled. */
typedef enum vpmm_default_stream {
    VPMM_DEFAULT_STREAM_UNSET = 0,      /* VPMM_DEFAULT_STREAM, else LEGACY */
    VPMM_DEFAULT_STREAM_LEGACY = 1,     /* the legacy default stream (nvcc's default) */
    VPMM_DEFAULT_STREAM_PER_THREAD = 2, /* the calling thread's per-thread stream: a program built
                                           with nvcc --default-stream per-thread (which defines
                                           CUDA_API_PER_THREAD_DEFAULT_STREAM) */
} vpmm_default_stream_t;

/*
 * Pool configuration. Initialise with vpmm_config_init(), then set what you need. A field left at
 * its "default" value is taken from the environment (unless ignore_env is set), else the built-in
 * default; a value set here wins over the environment. Environment knobs are listed in README.md.
 */
typedef struct vpmm_config {
    vpmm_backend_t backend; /* VPMM_BACKEND; DEFAULT (what vpmm_config_init sets) = CUDA */
    int device;             /* CUDA device ordinal; -1 (default) = current device, else 0 */
    size_t page_size; /* VPMM_PAGE_SIZE; 0 = driver granularity (2 MiB on H100); multiple of it */
    size_t va_size;   /* VPMM_VA_SIZE; 0 = 8 TiB; size of each reserved VA chunk */
    size_t prealloc_pages;  /* VPMM_PAGES; 0 = none (grow on demand) */
    size_t host_memory;     /* VPMM_HOST_MEMORY; host backend's device memory; 0 = 80 GiB */
    int cache_percent;      /* VPMM_CACHE_PERCENT; cap on the exact-size cache, in percent of
                               mapped memory; -1 (default) = 10; 0 = no cache */
    int ignore_env;         /* nonzero: do not read VPMM_* variables */
    size_t max_bytes;       /* VPMM_MAX_BYTES; 0 (default) = no cap; else mapped memory never
                               exceeds it (rounded down to whole pages): past it, malloc reports
                               VPMM_ERROR_OUT_OF_MEMORY */
    int verbose;            /* VPMM_VERBOSE; -1 (default) = 0; 1 = print the pool's first 10
                               out-of-memory reports on stderr, then count the rest and say how
                               many at vpmm_pool_destroy */
    const char *trace_file; /* VPMM_TRACE_FILE; NULL (default) = none; else record every malloc
                              and free into this file, in the trace format vpmm-replay reads
                              (docs/TRACE_FORMAT.md); "%p" = process id, "%n" = the pool's number
                              in the process. Read at vpmm_pool_create only */
    vpmm_default_stream_t default_stream; /* VPMM_DEFAULT_STREAM; what stream 0 names. UNSET
                              (what vpmm_config_init sets, unless the calling file was compiled with
                              CUDA_API_PER_THREAD_DEFAULT_STREAM: then PER_THREAD) = the
                              environment, else LEGACY */
    int driver_stats; /* VPMM_DRIVER_STATS; -1 (default) = 0; 1 = count every driver call
                        and time it, by kind (vpmm_driver_stats): two clock reads per
                        driver call; 0 = the pool calls its backend directly (no cost) */
    int worker;       /* VPMM_WORKER; -1 (default) = 0; 1 = a background thread per pool unmaps the
                        old addresses of remapped pages (zombies) as soon as the GPU is done with
                        them, so that mallocs find fewer to unmap (its CPU time:
                        vpmm_stats_t.worker_cpu_ns); 0 = the next slow-path malloc unmaps them.
                        Off by default: on an H100 the driver runs one VMM call at a time, so the
                        worker helps only where the caller leaves gaps (bench/RESULTS.md) */
    size_t handle_pages; /* VPMM_HANDLE_PAGES; 0 (default) = 1; the most pages one handle of an
                           ordinary growth holds (1 to 512). The driver's costs are per handle
                           (an H100: ~40 us to create and grant access, ~45 us to move), but a
                           handle moves only whole: larger ones make growth and defragmentation
                           cheaper and the footprint larger (bench/RESULTS.md, "Handle size") */
    size_t small_bytes;  /* VPMM_SMALL_BYTES; 0 (default) = an eighth of the page size (256 KiB
                            on an H100); requests smaller than this are placed in pages of their
                            own (a VA chunk of their own), so that small blocks that outlive large
                            ones do not pin the large blocks' pages; at most the page size; 1 = no
                            size classes (VPMM_SMALL_BYTES=0 says the same) */
    int ipc;             /* VPMM_IPC; -1 (default) = 1; 1 = create physical memory that other
                            processes can map (vpmm_ipc_export), where the device supports it
                            (POSIX file descriptors; else the pool works without, and exports fail
                            with VPMM_ERROR_NOT_SUPPORTED); 0 = never */
    int large_handles;   /* VPMM_LARGE_HANDLES; -1 (default) = 1; 1 = a growth of 1 GiB or more
                            gets handles of up to 1 GiB, and an allocation burst grows ahead in
                            handles of up to 1 GiB: fast (an H100 maps 8 GiB in ~1 ms), but once
                            smaller blocks reuse such a handle, its free pages can serve only what
                            fits beside them; 0 = every growth makes exactly the pages it needs,
                            in handles of handle_pages: with handle_pages 1, every free page can
                            be gathered, so the near-full rule holds in full (docs/ALGORITHM.md,
                            "The near-full rule"), at ~20-25 ms per GiB of growth on an H100 */
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
    uint64_t graph_pools;        /* graph pools alive (created or captured, not yet returned) */
    size_t private_mapped_bytes; /* of mapped_bytes, what graph pools hold */
    size_t private_live_bytes;   /* of live_bytes, what graph pools hold */
    size_t largest_free_bytes;   /* the largest contiguous free region */
    double utilization;          /* live_bytes / mapped_bytes (1 when nothing is mapped): how much
                                    of the memory held is in use */
    double fragmentation;        /* 1 - largest_free_bytes / free_bytes (0 when nothing is free):
                                    how scattered the free memory is (a free span that large is
                                    served without remapping) */
    size_t max_bytes;            /* the cap on mapped_bytes (VPMM_MAX_BYTES); 0 = none */
    int worker;                  /* 1: a background worker unmaps zombies (VPMM_WORKER) */
    uint64_t worker_unmaps;      /* zombie mappings it unmapped (each would have cost a malloc
                                    one cuMemUnmap) */
    uint64_t worker_cpu_ns;      /* CPU time its thread used, as of its last pass: work moved
                                    off the callers' path, still paid for */
    size_t small_bytes;          /* requests below this many bytes (rounded) get pages of their
                                    own (VPMM_SMALL_BYTES; 1: no size classes) */
    uint64_t class_fallbacks;    /* mallocs served from free memory of the other size class
                                    because the cap or the device refused new pages */
    int device;                  /* the device the pool allocates on (its ordinal) */
    uint64_t peers;              /* bit k set: device k was granted access to the pool's memory
                                    (vpmm_pool_grant_access); the pool's own device not included */
    uint64_t peer_grants;        /* set-access calls that gave the peers access: at the grant, one
                                    per mapped run, then one per later mapping */
    uint64_t ipc_shared;         /* allocations (live or freed) other processes may still map:
                                    their memory is not reused until every share is closed */
    uint64_t ipc_exports;        /* vpmm_ipc_export calls that succeeded */
    uint64_t ipc_imports;        /* other processes' memory mapped here now (vpmm_ipc_open: one per
                                    distinct set of pages, however often opened) */
    size_t ipc_imported_bytes;   /* what those mappings span */
} vpmm_stats_t;

/* A graph pool's statistics (vpmm_graph_pool_stats); its share of the pool's vpmm_stats_t. */
typedef struct vpmm_graph_pool_stats {
    unsigned id;              /* the graph pool's id (the `pool` column of vpmm_pool_dump) */
    size_t live_bytes;        /* requested sizes of its live allocations */
    size_t allocated_bytes;   /* the same, rounded up to VPMM_ALIGNMENT */
    size_t peak_live_bytes;   /* max of live_bytes since creation or reset */
    size_t mapped_bytes;      /* physical memory it holds */
    size_t peak_mapped_bytes; /* max of mapped_bytes since creation or reset */
    size_t free_bytes;        /* mapped, not allocated (reused by its later captures) */
    size_t hole_bytes;        /* its reserved VA with nothing mapped */
    size_t zombie_bytes;      /* its old VA of pages the shared pool took back while idle */
    size_t reserved_va_bytes; /* its VA reservations */
    uint64_t live_allocs;     /* its live allocations */
    uint64_t mallocs, frees;  /* calls it served */
    uint64_t grows;           /* mallocs that mapped pages into it */
    uint64_t pages_created;   /* pages created for it */
    uint64_t pages_taken;     /* free pages it took over from the shared pool */
    uint64_t pages_remapped;  /* of its own free pages, mapped again at a new address to make
                                 room for a large allocation (the old address stays mapped while
                                 a graph may use it) */
    uint64_t graphs;          /* graphs (being) captured into it that are still alive */
    uint64_t captures;        /* captures into it in progress */
    int pinned;               /* its pages may not leave it: a graph or capture uses it */
} vpmm_graph_pool_stats_t;

/*
 * The kinds of driver call a pool makes, one per entry of its backend's table (the CUDA driver
 * function each stands for in parentheses). Values are stable; vpmm_driver_call_name gives the
 * short name ("mem_map") the tools print.
 */
typedef enum vpmm_driver_call {
    VPMM_DRIVER_CALL_GRANULARITY = 0,               /* cuMemGetAllocationGranularity */
    VPMM_DRIVER_CALL_VA_RESERVE = 1,                /* cuMemAddressReserve */
    VPMM_DRIVER_CALL_VA_FREE = 2,                   /* cuMemAddressFree */
    VPMM_DRIVER_CALL_MEM_CREATE = 3,                /* cuMemCreate: a physical handle */
    VPMM_DRIVER_CALL_MEM_RELEASE = 4,               /* cuMemRelease */
    VPMM_DRIVER_CALL_MEM_MAP = 5,                   /* cuMemMap */
    VPMM_DRIVER_CALL_MEM_UNMAP = 6,                 /* cuMemUnmap */
    VPMM_DRIVER_CALL_SET_ACCESS = 7,                /* cuMemSetAccess */
    VPMM_DRIVER_CALL_EVENT_CREATE = 8,              /* cuEventCreate */
    VPMM_DRIVER_CALL_EVENT_DESTROY = 9,             /* cuEventDestroy */
    VPMM_DRIVER_CALL_EVENT_RECORD = 10,             /* cuEventRecord */
    VPMM_DRIVER_CALL_EVENT_QUERY = 11,              /* cuEventQuery */
    VPMM_DRIVER_CALL_STREAM_WAIT_EVENT = 12,        /* cuStreamWaitEvent */
    VPMM_DRIVER_CALL_CAPTURE_INFO = 13,             /* cuStreamGetCaptureInfo */
    VPMM_DRIVER_CALL_MEM_GET_INFO = 14,             /* cuMemGetInfo */
    VPMM_DRIVER_CALL_SYNCHRONIZE = 15,              /* cuCtxSynchronize */
    VPMM_DRIVER_CALL_BEGIN_CAPTURE = 16,            /* cuStreamBeginCapture */
    VPMM_DRIVER_CALL_END_CAPTURE = 17,              /* cuStreamEndCapture */
    VPMM_DRIVER_CALL_USER_OBJECT_CREATE = 18,       /* cuUserObjectCreate */
    VPMM_DRIVER_CALL_GRAPH_RETAIN_USER_OBJECT = 19, /* cuGraphRetainUserObject */
    VPMM_DRIVER_CALL_USER_OBJECT_RELEASE = 20,      /* cuUserObjectRelease */
    VPMM_DRIVER_CALL_GRAPH_DESTROY = 21,            /* cuGraphDestroy */
    VPMM_DRIVER_CALL_REVOKE_ACCESS = 22,            /* cuMemSetAccess, taking a peer's away */
    VPMM_DRIVER_CALL_GET_ACCESS = 23,               /* cuMemGetAccess: vpmm_pool_check's
                                                       query, never counted (always 0) */
    VPMM_DRIVER_CALL_STREAM_DEVICE = 24,            /* cuStreamGetDevice */
    VPMM_DRIVER_CALL_MEM_EXPORT = 25,               /* cuMemExportToShareableHandle */
    VPMM_DRIVER_CALL_MEM_IMPORT = 26,               /* cuMemImportFromShareableHandle */
    VPMM_DRIVER_CALL_COUNT = 27
} vpmm_driver_call_t;

/* One kind of driver call: how often the pool made it and how long it took in all. */
typedef struct vpmm_driver_call_stats {
    uint64_t calls;    /* calls made (failed ones included) */
    uint64_t failures; /* calls that failed (event_query's "not ready" is an answer, not one) */
    uint64_t ns;       /* wall time spent in the calls (CLOCK_MONOTONIC), in nanoseconds */
} vpmm_driver_call_stats_t;

/* A pool's driver calls by kind since its creation (vpmm_driver_stats): where its time goes. */
typedef struct vpmm_driver_stats {
    uint64_t calls;                                        /* all kinds together */
    uint64_t ns;                                           /* all kinds together */
    vpmm_driver_call_stats_t call[VPMM_DRIVER_CALL_COUNT]; /* indexed by vpmm_driver_call_t */
} vpmm_driver_stats_t;

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
    vpmm_stream_t stream; /* allocated: allocating stream; free: freeing stream (if not ready);
                             zombie: the stream whose completion it waits for (NULL: none) */
    int ready;            /* free: any stream may reuse it without waiting */
    size_t requested;     /* allocated: the size the caller asked for */
    unsigned chunk;       /* index of the VA chunk, in reservation order */
    uintptr_t chunk_base; /* start of that chunk */
    unsigned pool;        /* 0: the shared pool; else the id of the graph pool that owns it */
} vpmm_region_info_t;

/* Called once per region in address order; return nonzero to stop the walk. */
typedef int (*vpmm_region_visitor_t)(const vpmm_region_info_t *region, void *user);

/* ---- configuration and lifetime ---------------------------------------------------------- */

/* Fills *config with defaults. Never fails for a non-NULL config. Threads: free.
 * In a file compiled with CUDA_API_PER_THREAD_DEFAULT_STREAM (nvcc --default-stream per-thread)
 * the name stands for vpmm_config_init_per_thread (below the declarations), which also sets
 * default_stream to VPMM_DEFAULT_STREAM_PER_THREAD: stream 0 means there what it means to the
 * kernels of that file, as CUDA's own headers map their calls. */
vpmm_status_t vpmm_config_init(vpmm_config_t *config);
vpmm_status_t vpmm_config_init_per_thread(vpmm_config_t *config);

/*
 * Creates a pool. config may be NULL (all defaults). Reads VPMM_* environment variables (see
 * README.md); a malformed value, or a VPMM_* name that is none of README.md's table (a typo such
 * as VPMM_MAXBYTES), fails with VPMM_ERROR_INVALID_ENV and vpmm_last_error() names it (and the
 * closest known name).
 * With no CUDA driver or device, the CUDA backend (the default) fails with VPMM_ERROR_NO_DEVICE
 * and a vpmm_last_error() saying why; nothing is allocated. Threads: free (the driver is loaded
 * once per process, whichever thread is first).
 */
vpmm_status_t vpmm_pool_create(const vpmm_config_t *config, vpmm_pool_t **out_pool);

/*
 * Destroys a pool: waits for the device to finish, unmaps and releases everything, frees the VA.
 * Refuses with VPMM_ERROR_POOL_BUSY (pool unchanged) while allocations are live, a graph pool
 * is alive or a capture into one is in progress (refused before any synchronize, so the capture
 * is not disturbed). If a driver call fails part-way the pool stays valid (smaller) and the call
 * may be repeated. With a trace being recorded (VPMM_TRACE_FILE), its last lines are written and
 * the file closed: VPMM_ERROR_IO, after the pool is destroyed all the same, when any write or the
 * close failed (a full disk; vpmm_last_error() names the file). Threads: alone.
 */
vpmm_status_t vpmm_pool_destroy(vpmm_pool_t *pool);

/* ---- allocation -------------------------------------------------------------------------- */

/*
 * Allocates size bytes for use on stream. The memory is usable by work enqueued on stream after
 * this call (any wait the pool needed was enqueued GPU-side; the host never synchronises).
 * The result is aligned to VPMM_ALIGNMENT. On error *out_ptr is set to NULL. A growth that would
 * map more than the pool ever has first gives back free handles it cannot use (ready memory
 * only); they stay given back if the malloc then fails (counted in pages_released).
 * Threads: any. The capture query runs before the lock is taken; when the pool must grow it
 * drops the lock while the driver creates the new physical memory (other threads allocate and
 * free meanwhile), then plans again under it and releases, unlocked, what it no longer needs.
 */
vpmm_status_t vpmm_malloc(vpmm_pool_t *pool, size_t size, vpmm_stream_t stream, void **out_ptr);

/*
 * Frees an allocation, stream-ordered on its allocation stream: that stream may reuse the memory
 * at once, other streams once the GPU has finished the work enqueued before this call (and, for
 * the streams named with vpmm_record_stream, no stream before their work has).
 * vpmm_free(pool, NULL) does nothing and succeeds, as free(3) and cudaFree(0) do.
 * Threads: any. Any thread may free any allocation. No driver call, except one capture query
 * for a graph pool's allocation freed while a capture into that graph pool runs, and one event
 * record per stream named with vpmm_record_stream.
 */
vpmm_status_t vpmm_free(vpmm_pool_t *pool, void *ptr);

/*
 * Records that the allocation at ptr is also used by work on `stream` (cudaStream_t, any handle;
 * PyTorch's Tensor.record_stream): once it is freed, no stream — its own included — reuses its
 * memory before the work enqueued on `stream` until the free has completed. Call it after
 * enqueuing that work and before the free; calling it again, or for the allocation's own stream,
 * changes nothing. At the free, vpmm records one completion marker per such stream; the memory
 * stays out of every free list until they complete (a slow path notices: docs/ALGORITHM.md).
 * Bad pointers get the statuses of vpmm_free (FOREIGN_POINTER, INTERIOR_POINTER, DOUBLE_FREE;
 * INVALID_ARGUMENT for NULL) and change nothing. Threads: any; no driver call.
 */
vpmm_status_t vpmm_record_stream(vpmm_pool_t *pool, void *ptr, vpmm_stream_t stream);

/*
 * Tells the pool that stream is about to be destroyed: the pool records a last completion marker
 * on it and forgets it; memory it freed becomes reusable by other streams once that marker
 * completes. Call it before cudaStreamDestroy for streams that freed vpmm memory. A stream
 * being captured is refused with VPMM_ERROR_STREAM_CAPTURING (end the capture first), and so is
 * the legacy stream, which holds unmarked frees, while any capture is in progress (its marker
 * would be legacy-stream work, which invalidates the capture of a blocking stream).
 * VPMM_STREAM_PER_THREAD releases the calling thread's own per-thread stream (a thread that
 * ends need not: its record is forgotten once it holds nothing).
 * Threads: any (records one event under the lock); not concurrently with mallocs on that stream.
 */
vpmm_status_t vpmm_stream_release(vpmm_pool_t *pool, vpmm_stream_t stream);

/*
 * Gives fully free pages back to the driver until the pool maps at most target_bytes (0: every
 * free page it can). Only memory whose GPU work is known complete goes — synchronise first to
 * release everything — and a graph pool's pages only while no graph uses it. Extra VA chunks that
 * became empty are released too. *out_released (may be NULL) gets the bytes given back. A driver
 * failure stops the trim and leaves the pool consistent (it keeps what it could not release).
 * Threads: any. Unmapping runs under the lock (the address range must be gone before anyone can
 * reuse it); releasing the physical memory, the slow part, after the lock is dropped.
 */
vpmm_status_t vpmm_trim(vpmm_pool_t *pool, size_t target_bytes, size_t *out_released);

/*
 * Caps the memory the pool maps from now on, as config.max_bytes does at creation: max_bytes is
 * rounded down to whole pages (0: no cap; less than one page: VPMM_ERROR_INVALID_ARGUMENT, the cap
 * unchanged). Past the cap, growth stops and malloc reports VPMM_ERROR_OUT_OF_MEMORY. Memory
 * already mapped above a lowered cap stays until freed and trimmed — vpmm_trim(pool, max_bytes)
 * gives back what is free. vpmm_get_stats' max_bytes reads the cap. (PyTorch's
 * set_per_process_memory_fraction maps to this.) Threads: any.
 */
vpmm_status_t vpmm_set_max_bytes(vpmm_pool_t *pool, size_t max_bytes);

/* ---- introspection ----------------------------------------------------------------------- */

/* The pool's statistics (graph pools included; a graph pool whose graphs are all gone is
 * returned to the shared pool first, so graph_pools counts only those still alive). A consistent
 * snapshot: taken under the lock. Threads: any. */
vpmm_status_t vpmm_get_stats(const vpmm_pool_t *pool, vpmm_stats_t *out_stats);

/*
 * The pool's driver calls by kind (count, failures, time) since its creation, graph pools
 * included: kept only for a pool created with config.driver_stats = 1 (or VPMM_DRIVER_STATS=1),
 * which wraps its backend in a counting layer (two clock reads per driver call; the malloc/free
 * fast path makes no driver call on the legacy stream and one capture query on other streams).
 * Any other pool gets VPMM_ERROR_NOT_SUPPORTED (out_stats untouched). Threads: any (no lock: the
 * counters are atomic; with other threads calling the driver, a kind may be a call behind).
 */
vpmm_status_t vpmm_driver_stats(const vpmm_pool_t *pool, vpmm_driver_stats_t *out_stats);

/* The short name of a kind of driver call: "mem_map", "set_access", ... (the driver table's
 * member names); "unknown" for a value out of range. Threads: free. */
const char *vpmm_driver_call_name(vpmm_driver_call_t call);

/* Resets peak_live_bytes and peak_mapped_bytes to the current values. Threads: any. */
vpmm_status_t vpmm_reset_peak_stats(vpmm_pool_t *pool);

/* Visits every region of every VA chunk in address order. Threads: any; the visitor runs under
 * the pool lock, so it must not call back into this pool (that would deadlock) and should be
 * quick: every other thread's calls on the pool wait for the walk. */
vpmm_status_t vpmm_pool_walk(const vpmm_pool_t *pool, vpmm_region_visitor_t visit, void *user);

/*
 * The region holding ptr (any address inside the pool): for an allocation, its start, rounded
 * size, requested size, stream and graph pool (the `pool` field; 0 = shared). O(1) for an
 * allocation's start, O(regions of its chunk) otherwise. VPMM_ERROR_FOREIGN_POINTER for an
 * address outside the pool. Threads: any.
 */
vpmm_status_t vpmm_pointer_info(const vpmm_pool_t *pool, const void *ptr,
                                vpmm_region_info_t *out_info);

/* Writes a human-readable table of every region in address order, then a stats summary.
 * Threads: any (holds the lock while writing: point it at a memory stream for a big pool). */
vpmm_status_t vpmm_pool_dump(const vpmm_pool_t *pool, FILE *out);

/*
 * Checks every internal invariant (docs/ALGORITHM.md lists them) and returns the number of
 * violations; each is described on report when report is not NULL. A NULL pool counts as one.
 * Threads: any; checks one consistent state (under the lock), O(regions).
 */
size_t vpmm_pool_check(const vpmm_pool_t *pool, FILE *report);

/*
 * The report of the pool's latest out-of-memory failure (empty if none yet), copied into buf
 * (truncated to len - 1 bytes, always terminated): one paragraph with what was asked, whether the
 * device or the cap said no, what the pool maps, how much is live and free, its largest free
 * span, what defragmentation could gather, what is pending on busy streams, the free whole pages
 * it cannot gather (their handle also holds memory in use), zombies, holes, each graph pool, and
 * what the device had free. VPMM_VERBOSE=1 prints a pool's first 10 reports on
 * stderr (then only their count, at vpmm_pool_destroy).
 * Threads: any. With several threads, it is the latest OOM of any of them.
 */
vpmm_status_t vpmm_pool_oom_report(const vpmm_pool_t *pool, char *buf, size_t len);

/* "cuda" or "host". NULL for a NULL pool. Threads: any (no lock: the backend never changes). */
const char *vpmm_pool_backend_name(const vpmm_pool_t *pool);

/*
 * The last failed driver call of this pool: *out_code is the backend's raw error (a CUresult on
 * the CUDA backend), *out_call the driver function's name ("cuMemCreate"). Both 0/NULL if none.
 * Threads: any. With several threads, the latest failure of any of them (vpmm_last_error() is
 * the calling thread's own).
 */
vpmm_status_t vpmm_pool_last_driver_error(const vpmm_pool_t *pool, int *out_code,
                                          const char **out_call);

/* ---- several devices --------------------------------------------------------------------- */
/*
 * A pool allocates on one device (config.device) and works whatever device is current on the
 * calling thread: each driver call runs in its device's context. A process with several GPUs
 * makes one pool per device. Streams of any device may be passed (vpmm_malloc, vpmm_record_stream):
 * memory used by a stream of another device is reused only after that stream's work, through
 * events created on its own device. The special handles (0, VPMM_STREAM_LEGACY,
 * VPMM_STREAM_PER_THREAD) name the pool's device's streams.
 */

/* The device the pool allocates on. Threads: any (no lock). */
vpmm_status_t vpmm_pool_device(const vpmm_pool_t *pool, int *out_device);

/*
 * Gives device `device` read-write access to all memory of the pool: every range mapped now (the
 * shared pool's and the graph pools', zombie addresses included) and every page mapped later, by
 * growth, defragmentation and graph-pool growth. Memory mapped with cuMemMap is reachable from
 * another device only this way: cudaDeviceEnablePeerAccess covers cudaMalloc memory alone. The
 * pool's own device, or a device already granted: nothing to do. VPMM_ERROR_INVALID_ARGUMENT for a
 * device that does not exist, VPMM_ERROR_NOT_SUPPORTED when the two devices cannot reach each
 * other (no peer access between them). Transactional: if the driver refuses part-way, the ranges
 * already granted are revoked, the pool is as before and the status says why. Counted in
 * vpmm_stats_t (peers, peer_grants). Threads: any; holds the pool lock for the whole walk (one
 * cuMemSetAccess per mapped run: ~30 us per physical handle on an H100).
 */
vpmm_status_t vpmm_pool_grant_access(vpmm_pool_t *pool, int device);

/*
 * Segments: each physical handle of the pool at its live address — the unit a collective library
 * registers (NCCL's ncclCommRegister maps the physical allocation under a buffer, so a registered
 * range must be one handle and must not move while registered: PyTorch's ProcessGroupNCCL
 * registers every segment its allocator reports). A segment appears when a handle is mapped at
 * a new live address (growth, a remap by defragmentation or graph-pool growth, a checkpoint
 * reapply that makes an old address live again) and disappears before that address stops being
 * its live one (moved, given back by vpmm_trim, the pool destroyed); a graph pool's segments
 * pass to the shared pool when it is returned (reported as disappearing and appearing again).
 */
typedef enum vpmm_segment_event {
    VPMM_SEGMENT_MAPPED = 0,   /* [addr, addr + size) is a segment from now on */
    VPMM_SEGMENT_UNMAPPED = 1, /* it is one no more (reported before it moves or goes) */
} vpmm_segment_event_t;

typedef struct vpmm_segment_info {
    uintptr_t addr;
    size_t size;
    unsigned pool; /* 0: the shared pool; else the id of the graph pool that owns it */
} vpmm_segment_info_t;

/* Called under the pool lock for every segment event: it must not call into this pool. */
typedef void (*vpmm_segment_hook_t)(void *user, vpmm_segment_event_t event,
                                    const vpmm_segment_info_t *segment);

/* Sets the pool's segment hook (NULL: none); the events after the call reach it. Threads: any. */
vpmm_status_t vpmm_pool_set_segment_hook(vpmm_pool_t *pool, vpmm_segment_hook_t hook, void *user);

/* Called once per segment, in address order; return nonzero to stop. */
typedef int (*vpmm_segment_visitor_t)(const vpmm_segment_info_t *segment, void *user);

/* Visits every segment of the pool in address order (what the hook has reported so far, summed
 * up). Threads: any; the visitor runs under the pool lock (it must not call into the pool). */
vpmm_status_t vpmm_pool_walk_segments(const vpmm_pool_t *pool, vpmm_segment_visitor_t visit,
                                      void *user);

/* ---- sharing memory with other processes (CUDA IPC) ---------------------------------------- */
/*
 * An allocation can be mapped by another process, as cudaIpcGetMemHandle allows for cudaMalloc
 * memory: vpmm_ipc_export writes a handle (bytes) for it; the other process passes those bytes to
 * vpmm_ipc_open on a pool of its own (same GPU, or a device with access to it) and gets a pointer
 * to the same memory; vpmm_ipc_close ends its use. Physical memory travels as POSIX file
 * descriptors: the opener takes the exporter's descriptors with pidfd_getfd(2) (Linux 5.6), which
 * needs the permission to trace the exporter (same user; some containers refuse it: the open then
 * fails with VPMM_ERROR_NOT_SUPPORTED and says so). The pool must have been created with
 * physical memory that can be exported (config.ipc, the default where the device supports it).
 *
 * Lifetime rule: memory another process may map is not handed out again while it is shared. Each
 * export counts one share, which one vpmm_ipc_open takes over and its vpmm_ipc_close ends (the
 * counts live in shared memory). An allocation freed while shares remain (the exporter frees
 * first) is kept out of every free list, like a vpmm_record_stream free, until the last share
 * ends; then it becomes free memory. A handle that is exported but never opened keeps its memory
 * until the pool is destroyed. The exporter's descriptors are made once per physical handle and
 * kept until that handle is given back, so sharing the same memory again opens no new descriptor;
 * the opener closes the ones it took once it has imported them.
 */

/* The most bytes vpmm_ipc_export writes for an allocation of `size` bytes on a pool of page size
 * `page_size` (room for one descriptor per page it touches). Threads: free. */
#define VPMM_IPC_HANDLE_BYTES(size, page_size)                                                     \
    (96u + 32u * ((size_t)(size) / (size_t)(page_size) + 2u))

/*
 * Writes the handle of the allocation at ptr into buf (cap bytes) and counts one share;
 * *out_len (may be NULL) gets the handle's length. With cap too small (buf may then be NULL),
 * nothing is exported: VPMM_ERROR_INVALID_ARGUMENT, and *out_len says how many bytes it needs.
 * The same allocation exported twice gives the same bytes. Refused: a pointer that is not the
 * start of a live allocation (the statuses of vpmm_free), a graph pool's allocation, a pool
 * whose memory cannot be exported (VPMM_ERROR_NOT_SUPPORTED). Threads: any.
 */
vpmm_status_t vpmm_ipc_export(vpmm_pool_t *pool, const void *ptr, void *buf, size_t cap,
                              size_t *out_len);

/*
 * Ends every share of the allocation at ptr that no vpmm_ipc_close has ended yet, for a caller
 * that knows no other process uses the memory any more: then vpmm_free is an ordinary free.
 * PyTorch is one: it frees a shared block only once every consumer has released it, and a
 * consumer that receives the same tensor again opens nothing, which would leave that export's
 * share open. Later closes of those shares end nothing. Statuses of vpmm_free for a bad pointer;
 * an allocation never exported: nothing to do. Threads: any.
 */
vpmm_status_t vpmm_ipc_unshare(vpmm_pool_t *pool, const void *ptr);

/*
 * Maps the memory a handle of another process describes (len bytes at handle) and returns the
 * allocation's address in *out_ptr, usable by the pool's device and by its peers. The same pages
 * opened again map nothing new (the pointer is the same). VPMM_ERROR_INVALID_ARGUMENT for bytes
 * that are not a vpmm handle, or whose exporter has exited; VPMM_ERROR_NOT_SUPPORTED when the
 * system refuses to pass the descriptors; driver failures as usual (nothing left mapped).
 * Threads: any.
 */
vpmm_status_t vpmm_ipc_open(vpmm_pool_t *pool, const void *handle, size_t len, void **out_ptr);

/*
 * Ends one vpmm_ipc_open of ptr: its share is over (the exporter may reuse the memory once every
 * share of it has ended and it was freed). The last close of a mapping unmaps it.
 * VPMM_ERROR_FOREIGN_POINTER for a pointer no open returned. Threads: any.
 */
vpmm_status_t vpmm_ipc_close(vpmm_pool_t *pool, void *ptr);

/* ---- graph pools and captures ------------------------------------------------------------ */
/*
 * Allocations made on a stream while it is being captured into a CUDA graph are served by a
 * *graph pool* (a private pool) instead of the shared pool: its addresses never move, so the
 * graph can be replayed for as long as it lives. Every stream of a capture (also streams joined
 * into it through events) allocates from the capture's graph pool, sub-page sizes included, with
 * no event query and no host synchronisation. Memory freed during the capture is reused by later
 * allocations of the same stream in that capture (stream order), and by any stream of a later
 * capture into the pool once this one has ended.
 *
 * Graphs captured into one graph pool share its memory: replay them one after another (as their
 * captures ran), never concurrently — the rule PyTorch's shared graph pools follow too.
 *
 * Lifetime: each graph captured into a graph pool holds a reference on it (a CUDA user object
 * retained by the graph, so this also works for captures begun outside vpmm); the handle returned
 * by vpmm_graph_pool_create is another. Once the graphs, their executable instances (and their
 * launches) and every handle are gone, the graph pool's pages return to the shared pool, which
 * may defragment them; allocations still live then become ordinary shared allocations. While no
 * graph or capture uses a graph pool, the shared pool may also take its free pages.
 */

/* Creates an empty graph pool of pool (no memory until a capture allocates). Threads: any. */
vpmm_status_t vpmm_graph_pool_create(vpmm_pool_t *pool, vpmm_graph_pool_t **out_graph_pool);

/*
 * Allocates size bytes from graph_pool rather than from the shared pool, for use on stream —
 * also outside any capture: PyTorch allocates into a private pool during warm-up runs and under
 * torch.cuda.MemPool. The memory is the graph pool's (its pages never move while a graph uses
 * it; freed, it returns to the graph pool). When stream is part of a capture, that capture must
 * be graph_pool's (a capture vpmm has not seen yet is registered with graph_pool, as by
 * vpmm_capture_register); another graph pool's gets VPMM_ERROR_WRONG_POOL. Statuses otherwise
 * as vpmm_malloc's (INVALID_ARGUMENT for a NULL graph_pool). Threads: any.
 */
vpmm_status_t vpmm_graph_pool_malloc(vpmm_graph_pool_t *graph_pool, size_t size,
                                     vpmm_stream_t stream, void **out_ptr);

/* Adds a handle reference (each vpmm_graph_pool_retain needs its vpmm_graph_pool_release).
 * Threads: any (takes the lock of the graph pool's pool). */
vpmm_status_t vpmm_graph_pool_retain(vpmm_graph_pool_t *graph_pool);

/* Drops a handle reference; the pages go back to the shared pool once no graph uses them.
 * Threads: any. (A graph's own reference is dropped by CUDA on a driver thread when the graph
 * and its instances are gone; that destructor takes no lock and calls nothing: it only marks the
 * graph pool, and the next call on the pool returns its pages.) */
vpmm_status_t vpmm_graph_pool_release(vpmm_graph_pool_t *graph_pool);

/* The graph pool's statistics. Threads: any. */
vpmm_status_t vpmm_graph_pool_stats(const vpmm_graph_pool_t *graph_pool,
                                    vpmm_graph_pool_stats_t *out_stats);

/* Resets the graph pool's peak_live_bytes and peak_mapped_bytes to the current values.
 * Threads: any. */
vpmm_status_t vpmm_graph_pool_reset_peak_stats(vpmm_graph_pool_t *graph_pool);

/* Capture modes (the values of cudaStreamCaptureMode). */
typedef enum vpmm_stream_capture_mode {
    VPMM_STREAM_CAPTURE_GLOBAL = 0,
    VPMM_STREAM_CAPTURE_THREAD_LOCAL = 1,
    VPMM_STREAM_CAPTURE_RELAXED = 2,
} vpmm_stream_capture_mode_t;

/*
 * Begins capturing stream (cudaStreamBeginCapture with mode) into graph_pool, or into a new graph
 * pool when graph_pool is NULL (vpmm_capture_graph_pool returns it). The legacy default stream
 * cannot be captured (VPMM_ERROR_INVALID_ARGUMENT); a stream already capturing gets
 * VPMM_ERROR_STREAM_CAPTURING. Threads: any; cuStreamBeginCapture runs under the lock, so that
 * no malloc can see the capture before its graph pool is recorded (one call per capture). Other
 * threads may allocate on other streams during the capture; in VPMM_STREAM_CAPTURE_GLOBAL mode
 * CUDA itself forbids some of their calls (not vpmm's: vpmm makes none of them).
 */
vpmm_status_t vpmm_capture_begin(vpmm_pool_t *pool, vpmm_graph_pool_t *graph_pool,
                                 vpmm_stream_t stream, vpmm_stream_capture_mode_t mode);

/*
 * Ends the capture on stream (cudaStreamEndCapture) and returns the graph; the caller owns it
 * (vpmm_graph_destroy, or cudaGraphDestroy on the CUDA backend). Memory freed during the capture
 * becomes reusable by later captures. If the capture was invalidated, returns VPMM_ERROR_DRIVER and
 * *out_graph = NULL (CUDA discards it). Threads: any; cuStreamEndCapture runs under the lock
 * (one call per capture).
 */
vpmm_status_t vpmm_capture_end(vpmm_pool_t *pool, vpmm_stream_t stream, vpmm_graph_t *out_graph);

/*
 * Destroys a graph (cudaGraphDestroy on the CUDA backend; the emulation's own graph on the host
 * backend, where this is the only way to destroy one). Its graph pool's pages return once its
 * executable graphs are gone too. Equivalent to calling cudaGraphDestroy directly on CUDA.
 * Threads: any; the graph is destroyed before the lock is taken. Alone with respect to graph.
 */
vpmm_status_t vpmm_graph_destroy(vpmm_pool_t *pool, vpmm_graph_t graph);

/*
 * For captures begun outside vpmm (e.g. torch.cuda.graph): serve the capture stream is part of
 * from graph_pool. Call after the capture began and before anything in it allocates; without it
 * the first allocation of the capture creates a new graph pool for it. A capture already served
 * by another graph pool gets VPMM_ERROR_WRONG_POOL; a stream not capturing,
 * VPMM_ERROR_NOT_CAPTURING. Threads: any.
 */
vpmm_status_t vpmm_capture_register(vpmm_pool_t *pool, vpmm_graph_pool_t *graph_pool,
                                    vpmm_stream_t stream);

/*
 * The graph pool serving the capture stream is part of (created now if none yet), as a new
 * handle reference: release it with vpmm_graph_pool_release. Threads: any.
 */
vpmm_status_t vpmm_capture_graph_pool(vpmm_pool_t *pool, vpmm_stream_t stream,
                                      vpmm_graph_pool_t **out_graph_pool);

/* ---- checkpoints ------------------------------------------------------------------------- */
/*
 * A checkpoint is a graph pool's mapped region state: its allocated regions (address, size) and
 * its free regions. Unmapped VA is not part of it. Reapplying it makes the graph pool's state
 * equal to it again: the checkpoint's allocations are live again at the same addresses and
 * everything else mapped is free — also pages mapped after the checkpoint was taken. This is how
 * a graph tree shares one pool: capture G1, take C1, capture G2, reapply C1, capture G3 (G2 and
 * G3 are alternatives after G1 and reuse each other's memory). So a replay of G3 overwrites G2's
 * outputs (which the reapply dropped): read a branch's outputs before replaying another branch.
 */

/* One allocation recorded in a checkpoint. */
typedef struct vpmm_checkpoint_alloc {
    void *ptr;
    size_t size;          /* the size asked for */
    vpmm_stream_t stream; /* its allocation stream */
} vpmm_checkpoint_alloc_t;

typedef struct vpmm_checkpoint_info {
    unsigned graph_pool; /* id of the graph pool it was taken from */
    size_t allocs;       /* allocations in it */
    size_t live_bytes;   /* their requested bytes */
    size_t free_regions; /* free regions in it */
    size_t free_bytes;   /* their bytes */
    size_t mapped_bytes; /* live + free, rounded: the mapped memory it describes */
} vpmm_checkpoint_info_t;

/* Takes a checkpoint of graph_pool (refused with VPMM_ERROR_STREAM_CAPTURING during a capture
 * into it). Threads: any; the copy is made under the lock (one consistent state). */
vpmm_status_t vpmm_checkpoint_take(vpmm_graph_pool_t *graph_pool,
                                   vpmm_checkpoint_t **out_checkpoint);

/*
 * Reapplies checkpoint to graph_pool, then frees the n_dead allocations listed in dead (each must
 * be an allocation of the checkpoint: the caller's way to drop those whose owners have died).
 * Allocations made after the checkpoint are freed; their pointers are invalid afterwards. Their
 * memory is free at once, for the graph pool's next capture, even where vpmm_record_stream named
 * other streams: a graph pool's memory is ordered by its graphs' replays, and a reapply says the
 * dropped allocations are dead (PyTorch's graph trees reapply only then).
 * Refused with no change: VPMM_ERROR_WRONG_POOL for a checkpoint of another graph pool,
 * VPMM_ERROR_CHECKPOINT_CONFLICT when a checkpointed allocation is no longer mapped, or while
 * memory freed in the graph pool is still used by another stream (a vpmm_record_stream free),
 * VPMM_ERROR_STREAM_CAPTURING during a capture into the graph pool, VPMM_ERROR_INVALID_ARGUMENT
 * when a dead pointer is not one of the checkpoint's allocations (or listed twice).
 * Threads: any; validation and rewrite happen under the lock, so other threads see the graph
 * pool either before or after, never half-reapplied. The checkpoint is only read.
 */
vpmm_status_t vpmm_checkpoint_reapply(vpmm_graph_pool_t *graph_pool,
                                      const vpmm_checkpoint_t *checkpoint, void *const *dead,
                                      size_t n_dead);

/* What a checkpoint holds. Threads: free (a checkpoint never changes after it is taken). */
vpmm_status_t vpmm_checkpoint_info(const vpmm_checkpoint_t *checkpoint,
                                   vpmm_checkpoint_info_t *out_info);

/* Copies up to cap of the checkpoint's allocations (address order) into out; returns how many
 * there are in all (call with cap 0 to size the array). Threads: free. */
size_t vpmm_checkpoint_allocs(const vpmm_checkpoint_t *checkpoint, vpmm_checkpoint_alloc_t *out,
                              size_t cap);

/* Frees a checkpoint (it holds no pool memory, takes no pool lock). NULL is ignored.
 * Threads: alone with respect to checkpoint. */
void vpmm_checkpoint_destroy(vpmm_checkpoint_t *checkpoint);

/* ---- version ----------------------------------------------------------------------------- */

/* The library's version, "MAJOR.MINOR.PATCH" (e.g. "0.1.0"): a static string, never NULL. It
 * equals the VPMM_VERSION_* macros of the header the library was built with. Threads: free. */
const char *vpmm_version(void);

/* ---- errors ------------------------------------------------------------------------------ */

/* A short constant description of a status ("out of device memory"). Never NULL. Threads: free. */
const char *vpmm_strerror(vpmm_status_t status);

/* The name of the status constant ("VPMM_ERROR_OUT_OF_MEMORY"). Never NULL. Threads: free. */
const char *vpmm_status_name(vpmm_status_t status);

/*
 * A one-line explanation of the most recent failure of a vpmm call in this thread, e.g.
 * "VPMM_PAGE_SIZE='3X': expected bytes with an optional K, M, G or T suffix". Empty if none.
 * Threads: free; thread-local, so it is this thread's failure, whatever other threads do.
 */
const char *vpmm_last_error(void);

#ifdef __cplusplus
}
#endif

/* See vpmm_config_init. Defined after every declaration, so that only calls are renamed. */
#if defined(CUDA_API_PER_THREAD_DEFAULT_STREAM) && !defined(VPMM_NO_PER_THREAD_MAPPING)
#define vpmm_config_init(config) vpmm_config_init_per_thread(config)
#endif

#endif /* VPMM_H */
