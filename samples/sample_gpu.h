/*
 * sample_gpu.h — the CUDA runtime calls every GPU sample makes (sample_gpu.cu), behind a C
 * interface so that the samples need no CUDA header: the device's name, a stream's creation and
 * destruction, an error's name. Built only when CMake found nvcc. Every function returns a
 * cudaError_t as int (0 = success).
 */
#ifndef VPMM_SAMPLE_GPU_H
#define VPMM_SAMPLE_GPU_H

#include <stddef.h>

#include "vpmm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The name of the current CUDA device. */
int sample_gpu_name(char *buf, size_t len);

/* A new non-blocking stream, and its destruction. */
int sample_stream_create(vpmm_stream_t *out);
int sample_stream_destroy(vpmm_stream_t s);

/* What an error code returned here (or by a sample's kernels) means. */
const char *sample_gpu_error(int err);

#ifdef __cplusplus
}
#endif

#endif /* VPMM_SAMPLE_GPU_H */
