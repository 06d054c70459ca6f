/*
 * graph_kernels.h — the graph samples' only CUDA code (graph_kernels.cu), behind a C interface so
 * that the samples need no CUDA header: the kernels of the ops in graph_ops.h, and the CUDA
 * runtime calls only the graph samples make (copies, instantiating and launching graphs; the
 * device's name and streams: sample_gpu.h). Built
 * only when CMake found nvcc (VPMM_SAMPLE_KERNELS=1). Every function returns a cudaError_t as int
 * (0 = success); sample_gpu_error names it. Kernels and copies are enqueued on stream s and do not
 * wait.
 */
#ifndef VPMM_GRAPH_KERNELS_H
#define VPMM_GRAPH_KERNELS_H

#include <stddef.h>

#include "sample_gpu.h"
#include "vpmm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The same type as cudaGraphExec_t, without a CUDA header (as vpmm.h does for graphs). */
struct CUgraphExec_st;
typedef struct CUgraphExec_st *gpu_exec_t;

/* The ops (graph_ops.h says what each computes). */
int gpu_affine_relu(float *out, const float *x, size_t n, float a, float b, vpmm_stream_t s);
int gpu_scale(float *out, const float *x, size_t nx, const float *w, size_t n, vpmm_stream_t s);
int gpu_add(float *out, const float *x, const float *y, size_t n, vpmm_stream_t s);
int gpu_fold(float *out, size_t m, const float *x, size_t n, vpmm_stream_t s);

/* Copies bytes from src to dst (host or device memory) in stream order. */
int gpu_copy(void *dst, const void *src, size_t bytes, vpmm_stream_t s);

/* Waits until the work enqueued on s is done. */
int gpu_synchronize(vpmm_stream_t s);

/* cudaGraphInstantiate, cudaGraphLaunch, cudaGraphExecDestroy. */
int gpu_graph_instantiate(vpmm_graph_t graph, gpu_exec_t *out);
int gpu_graph_launch(gpu_exec_t exec, vpmm_stream_t s);
int gpu_exec_destroy(gpu_exec_t exec);

#ifdef __cplusplus
}
#endif

#endif /* VPMM_GRAPH_KERNELS_H */
