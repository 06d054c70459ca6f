/*
 * sample_gpu.cu — the CUDA runtime calls every GPU sample makes (sample_gpu.h): shared by the
 * demo (demo_kernels.cu), the graph samples (graph_kernels.cu) and vpmm_nvtx_oob.
 */
#include <cstdio>

#include <cuda_runtime.h>

#include "sample_gpu.h"

extern "C" int sample_gpu_name(char *buf, size_t len)
{
    cudaDeviceProp prop;
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess)
        e = cudaGetDeviceProperties(&prop, dev);
    if (e == cudaSuccess && len > 0)
        snprintf(buf, len, "%s", prop.name);
    return (int)e;
}

extern "C" int sample_stream_create(vpmm_stream_t *out)
{
    return (int)cudaStreamCreateWithFlags(out, cudaStreamNonBlocking);
}

extern "C" int sample_stream_destroy(vpmm_stream_t s)
{
    return (int)cudaStreamDestroy(s);
}

extern "C" const char *sample_gpu_error(int err)
{
    return cudaGetErrorString((cudaError_t)err);
}
