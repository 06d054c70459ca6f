/*
 * nvtx.h — vpmm's NVTX v3 annotations, for Nsight Systems and compute-sanitizer (docs/
 * OBSERVABILITY.md). Everything compiles to nothing without VPMM_HAVE_NVTX (CMake VPMM_NVTX=OFF).
 *
 * Ranges, in a "vpmm" domain with registered strings, mark the slow paths only: grow, defragment,
 * zombie reclaim, trim, capture begin/end, checkpoint take/reapply, each with a byte count (or id)
 * as its payload. The NVTX memory API describes the pool to tools: each VA chunk is a sub-allocator
 * heap (registered lazily, at its first allocation), each live allocation a region of it
 * (registered where an allocation starts to exist — the index, region.c — and unregistered where
 * it stops), and a checkpoint reapply resets its graph pool's heaps and registers their
 * allocations again.
 *
 * Two switches, each one predictable branch where it is tested: vpmm_i_nvtx_on (ranges) is set
 * when NVTX returns a domain, i.e. a tool attached to NVTX's core; vpmm_i_nvtx_mem (heaps and
 * regions) starts on and goes off at the first heap NVTX does not return — no tool attached to
 * the memory extension, or a tool that refuses the heap. They are separate because a tool may
 * attach to one and not the other: compute-sanitizer takes memory-API calls with no domain (it
 * returns NULL for nvtxDomainCreateA), and it refuses heaps over VMM-mapped memory
 * (docs/OBSERVABILITY.md). The domain is made once per process, at the first pool's creation.
 */
#ifndef VPMM_NVTX_H
#define VPMM_NVTX_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

/* The ranges (their names are in nvtx.c). */
typedef enum vpmm_nvtx_range {
    VPMM_NVTX_GROW,               /* payload: bytes mapped, all of them new pages */
    VPMM_NVTX_DEFRAG,             /* payload: bytes mapped, some of them remapped free pages */
    VPMM_NVTX_RECLAIM,            /* payload: zombie bytes waiting to be unmapped */
    VPMM_NVTX_TRIM,               /* payload: bytes that may be released */
    VPMM_NVTX_CAPTURE_BEGIN,      /* payload: the graph pool's id */
    VPMM_NVTX_CAPTURE_END,        /* payload: the capture id */
    VPMM_NVTX_CHECKPOINT_TAKE,    /* payload: the graph pool's id */
    VPMM_NVTX_CHECKPOINT_REAPPLY, /* payload: allocations in the checkpoint */
    VPMM_NVTX_RANGE_COUNT
} vpmm_nvtx_range_t;

#ifdef VPMM_HAVE_NVTX
#define VPMM_NVTX_COMPILED 1

/* Nonzero once a tool attached to the "vpmm" domain (set by vpmm_i_nvtx_init). */
extern int vpmm_i_nvtx_on;
/* Nonzero while the memory API may have a tool: heaps and regions are registered. */
extern int vpmm_i_nvtx_mem;

/* Creates the domain and its strings once per process; cheap after the first call. */
void vpmm_i_nvtx_init(void);
void vpmm_i_nvtx_push_slow(vpmm_nvtx_range_t range, uint64_t payload);
void vpmm_i_nvtx_pop_slow(void);
/* A heap for the VA range [base, base + size); NULL when the tool declines. */
void *vpmm_i_nvtx_heap_slow(uintptr_t base, size_t size);
void vpmm_i_nvtx_heap_unregister_slow(void *heap);
void vpmm_i_nvtx_heap_reset_slow(void *heap);
void vpmm_i_nvtx_region_slow(void *heap, uintptr_t addr, size_t size);
void vpmm_i_nvtx_unregion_slow(uintptr_t addr);

static inline void vpmm_i_nvtx_push(vpmm_nvtx_range_t range, uint64_t payload)
{
    if (VPMM_UNLIKELY(vpmm_i_nvtx_on))
        vpmm_i_nvtx_push_slow(range, payload);
}

static inline void vpmm_i_nvtx_pop(void)
{
    if (VPMM_UNLIKELY(vpmm_i_nvtx_on))
        vpmm_i_nvtx_pop_slow();
}

#else /* !VPMM_HAVE_NVTX */
#define VPMM_NVTX_COMPILED 0

enum { vpmm_i_nvtx_on = 0, vpmm_i_nvtx_mem = 0 };
static inline void vpmm_i_nvtx_init(void) {}
static inline void vpmm_i_nvtx_push(vpmm_nvtx_range_t range, uint64_t payload)
{
    (void)range;
    (void)payload;
}
static inline void vpmm_i_nvtx_pop(void) {}
static inline void *vpmm_i_nvtx_heap_slow(uintptr_t base, size_t size)
{
    (void)base;
    (void)size;
    return NULL;
}
static inline void vpmm_i_nvtx_heap_unregister_slow(void *heap)
{
    (void)heap;
}
static inline void vpmm_i_nvtx_heap_reset_slow(void *heap)
{
    (void)heap;
}
static inline void vpmm_i_nvtx_region_slow(void *heap, uintptr_t addr, size_t size)
{
    (void)heap;
    (void)addr;
    (void)size;
}
static inline void vpmm_i_nvtx_unregion_slow(uintptr_t addr)
{
    (void)addr;
}

#endif /* VPMM_HAVE_NVTX */

#endif /* VPMM_NVTX_H */
