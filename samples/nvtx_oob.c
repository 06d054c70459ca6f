/*
 * nvtx_oob.c — what NVTX registration buys under compute-sanitizer (docs/OBSERVABILITY.md).
 *
 * A pool hands out two 1000-byte allocations that share one mapped page. A kernel then writes 4
 * bytes just past the end of the first one: still inside mapped memory (in the first
 * allocation's alignment padding, before the second one), so the GPU itself never faults. A
 * second kernel writes into the second allocation after it was freed.
 *
 * vpmm registers each VA chunk as an NVTX sub-allocator heap and each allocation as a region of
 * its requested size. A tool that takes heaps over VMM-mapped memory would then see both writes;
 * compute-sanitizer 2025.3 does not: it refuses such a heap ("Call to nvtxMemHeapRegister
 * failed: One or more of the parameters is invalid"), and memcheck, which sees only the mapped
 * page, reports nothing — with or without registration. What memcheck does catch in a vpmm pool
 * is an access to reserved VA that nothing is mapped at: `--hole` adds a third write, into the
 * pool's unmapped VA just after the mapped page (without a sanitizer that kernel faults, and the
 * sample exits 1). docs/OBSERVABILITY.md has the outputs. Without a GPU there is nothing to show:
 * it says so and exits 0.
 *
 *   compute-sanitizer --tool memcheck ./build/bin/vpmm_nvtx_oob           # 0 errors
 *   compute-sanitizer --tool memcheck ./build/bin/vpmm_nvtx_oob --hole    # 1 error: the hole
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vpmm.h"
#ifdef VPMM_DEMO_KERNELS
#include "demo_kernels.h"

static int fail(const char *what, vpmm_status_t st)
{
    fprintf(stderr, "nvtx_oob: %s failed: %s (%s)\n", what, vpmm_strerror(st), vpmm_last_error());
    return 1;
}
#endif

int main(int argc, char **argv)
{
    const int hole = argc > 1 && strcmp(argv[1], "--hole") == 0;
#ifndef VPMM_DEMO_KERNELS
    (void)hole;
    printf("nvtx_oob: built without CUDA kernels (no nvcc): nothing to demonstrate\n");
    return 0;
#else
    char name[256];
    vpmm_config_t cfg;
    vpmm_pool_t *pool;
    vpmm_stream_t s;
    vpmm_status_t st;
    unsigned char *a, *b;
    size_t bad = 0;
    int e;

    /* The CUDA runtime first: compute-sanitizer takes NVTX memory registrations only once it is
     * initialised (and this tells whether there is a GPU at all). */
    if (sample_gpu_name(name, sizeof name) != 0) {
        printf("nvtx_oob: no CUDA device: nothing to demonstrate (this sample needs a GPU and "
               "compute-sanitizer)\n");
        return 0;
    }
    vpmm_config_init(&cfg);
    cfg.backend = VPMM_BACKEND_CUDA;
    if ((st = vpmm_pool_create(&cfg, &pool)) != VPMM_SUCCESS)
        return fail("vpmm_pool_create", st);
    if ((e = sample_stream_create(&s)) != 0) {
        fprintf(stderr, "nvtx_oob: stream: %s\n", sample_gpu_error(e));
        return 1;
    }
    if ((st = vpmm_malloc(pool, 1000, s, (void **)&a)) != VPMM_SUCCESS ||
        (st = vpmm_malloc(pool, 1000, s, (void **)&b)) != VPMM_SUCCESS)
        return fail("vpmm_malloc", st);
    printf("running on %s: two 1000-byte allocations at %p and %p (one page, %td bytes apart)\n",
           name, (void *)a, (void *)b, b - a);

    /* 1. Four bytes just past a's end: inside a's 256-byte alignment padding, mapped memory. */
    e = demo_gpu_fill(a + 1000, 4, 7, s);
    printf("1. a kernel wrote 4 bytes at %p, just past the end of the allocation at %p\n",
           (void *)(a + 1000), (void *)a);
    /* 2. Into b after its free (stream-ordered: the kernel runs after the free on s). */
    if (e == 0 && (st = vpmm_free(pool, b)) != VPMM_SUCCESS)
        return fail("vpmm_free", st);
    if (e == 0)
        e = demo_gpu_fill(b, 4, 7, s);
    printf("2. a kernel wrote 4 bytes at %p, the start of an allocation freed before it\n",
           (void *)b);
    if (e == 0 && hole) {
        /* 3. Just after the mapped page: reserved VA with nothing mapped (a hole). */
        vpmm_stats_t stats;
        unsigned char *h;
        if ((st = vpmm_get_stats(pool, &stats)) != VPMM_SUCCESS)
            return fail("vpmm_get_stats", st);
        h = (unsigned char *)((uintptr_t)a / stats.page_size * stats.page_size +
                              stats.mapped_bytes + 16);
        e = demo_gpu_fill(h, 4, 7, s);
        printf("3. a kernel wrote 4 bytes at %p, reserved VA of the pool with nothing mapped\n",
               (void *)h);
    }
    if (e == 0)
        e = demo_gpu_count_bad(a, 1000, 7, s, &bad); /* waits for the stream */
    if (e != 0) {
        fprintf(stderr, "nvtx_oob: kernel: %s\n", sample_gpu_error(e));
        return 1;
    }
    printf("the GPU did not fault: writes 1 and 2 hit mapped memory (memcheck sees them only "
           "through NVTX regions, if the tool takes them)\n");
    if ((st = vpmm_free(pool, a)) != VPMM_SUCCESS)
        return fail("vpmm_free", st);
    if ((st = vpmm_stream_release(pool, s)) != VPMM_SUCCESS)
        return fail("vpmm_stream_release", st);
    sample_stream_destroy(s);
    if ((st = vpmm_pool_destroy(pool)) != VPMM_SUCCESS)
        return fail("vpmm_pool_destroy", st);
    return 0;
#endif
}
