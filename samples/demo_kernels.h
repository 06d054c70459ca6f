/*
 * demo_kernels.h — the demo's only CUDA code (demo_kernels.cu), behind a C interface so that
 * demo.c needs no CUDA header. Built only when CMake found nvcc (VPMM_DEMO_KERNELS=1). Every
 * function returns a cudaError_t as int (0 = success); sample_gpu_error names it.
 */
#ifndef VPMM_DEMO_KERNELS_H
#define VPMM_DEMO_KERNELS_H

#include <stddef.h>

#include "sample_gpu.h"
#include "vpmm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Enqueues a kernel on s that sets byte i of [p, p+n) to (seed + i) % 256. */
int demo_gpu_fill(void *p, size_t n, unsigned seed, vpmm_stream_t s);

/* Counts the bytes of [p, p+n) that differ from that pattern, on s; waits for the answer. */
int demo_gpu_count_bad(const void *p, size_t n, unsigned seed, vpmm_stream_t s, size_t *out_bad);

#ifdef __cplusplus
}
#endif

#endif /* VPMM_DEMO_KERNELS_H */
