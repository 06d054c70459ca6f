/*
 * demo_kernels.cu — the demo's kernels (see demo_kernels.h): write a byte pattern, count the
 * bytes that differ from it. Grid-stride loops; one device counter, so counting is done one call
 * at a time (the demo is single-threaded).
 */
#include <cstdio>

#include <cuda_runtime.h>

#include "demo_kernels.h"

namespace
{

__device__ unsigned long long g_bad;

unsigned blocks_for(size_t n)
{
    size_t b = (n + 255) / 256;
    return (unsigned)(b == 0 ? 1 : b < 1024 ? b : 1024);
}

__global__ void fill_kernel(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = (unsigned char)(seed + i);
}

__global__ void count_kernel(const unsigned char *p, size_t n, unsigned seed)
{
    unsigned long long bad = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        bad += p[i] != (unsigned char)(seed + i);
    if (bad != 0)
        atomicAdd(&g_bad, bad);
}

} // namespace

extern "C" int demo_gpu_fill(void *p, size_t n, unsigned seed, vpmm_stream_t s)
{
    fill_kernel<<<blocks_for(n), 256, 0, s>>>(static_cast<unsigned char *>(p), n, seed);
    return (int)cudaGetLastError();
}

extern "C" int demo_gpu_count_bad(const void *p, size_t n, unsigned seed, vpmm_stream_t s,
                                  size_t *out_bad)
{
    unsigned long long bad = 0;
    cudaError_t e = cudaMemcpyToSymbolAsync(g_bad, &bad, sizeof bad, 0, cudaMemcpyHostToDevice, s);
    if (e != cudaSuccess)
        return (int)e;
    count_kernel<<<blocks_for(n), 256, 0, s>>>(static_cast<const unsigned char *>(p), n, seed);
    e = cudaGetLastError();
    if (e == cudaSuccess)
        e = cudaMemcpyFromSymbolAsync(&bad, g_bad, sizeof bad, 0, cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(s);
    *out_bad = (size_t)bad;
    return (int)e;
}
