/*
 * nvtx_oob.c — what NVTX registration buys under compute-sanitizer (docs/OBSERVABILITY.md).
 *
 * A pool hands out two 1000-byte allocations that share one mapped page. A kernel then writes 4
 * bytes just past the end of the first one: still inside mapped memory (in the first
 * allocation's alignment padding, before the second one), so the GPU itself never faults. A
 * second kernel writes into the second allocation after it was freed.
 *
 * Run under `compute-sanitizer --tool memcheck`: vpmm registers each VA chunk as an NVTX
 * sub-allocator heap and each allocation as a region of its requested size, so memcheck reports
 * both writes (out of bounds; and into memory no allocation covers). With registration off
 * (`compute-sanitizer --nvtx no`, or a build with -DVPMM_NVTX=OFF) memcheck sees only the mapped
 * page and reports nothing. Without a GPU there is nothing to show: it says so and exits 0.
 *
 *   compute-sanitizer --tool memcheck ./build/bin/vpmm_nvtx_oob            # 2 errors
 *   compute-sanitizer --tool memcheck --nvtx no ./build/bin/vpmm_nvtx_oob  # 0 errors
 */
#include <stdio.h>
#include <stdlib.h>

#include "vpmm.h"
#ifdef VPMM_DEMO_KERNELS
#include "demo_kernels.h"
#endif

static int fail(const char *what, vpmm_status_t st)
{
    fprintf(stderr, "nvtx_oob: %s failed: %s (%s)\n", what, vpmm_strerror(st), vpmm_last_error());
    return 1;
}

int main(void)
{
#ifndef VPMM_DEMO_KERNELS
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
    if (demo_gpu_name(name, sizeof name) != 0) {
        printf("nvtx_oob: no CUDA device: nothing to demonstrate (this sample needs a GPU and "
               "compute-sanitizer)\n");
        return 0;
    }
    vpmm_config_init(&cfg);
    cfg.backend = VPMM_BACKEND_CUDA;
    if ((st = vpmm_pool_create(&cfg, &pool)) != VPMM_SUCCESS)
        return fail("vpmm_pool_create", st);
    if ((e = demo_stream_create(&s)) != 0) {
        fprintf(stderr, "nvtx_oob: stream: %s\n", demo_gpu_error(e));
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
    if (e == 0)
        e = demo_gpu_count_bad(a, 1000, 7, s, &bad); /* waits for the stream */
    if (e != 0) {
        fprintf(stderr, "nvtx_oob: kernel: %s\n", demo_gpu_error(e));
        return 1;
    }
    printf("the GPU did not fault (the memory is mapped); compute-sanitizer memcheck reports both "
           "writes only when vpmm's NVTX registrations reach it\n");
    if ((st = vpmm_free(pool, a)) != VPMM_SUCCESS)
        return fail("vpmm_free", st);
    if ((st = vpmm_stream_release(pool, s)) != VPMM_SUCCESS)
        return fail("vpmm_stream_release", st);
    demo_stream_destroy(s);
    if ((st = vpmm_pool_destroy(pool)) != VPMM_SUCCESS)
        return fail("vpmm_pool_destroy", st);
    return 0;
#endif
}
