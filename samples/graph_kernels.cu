/*
 * graph_kernels.cu — the kernels of the graph samples' ops (see graph_kernels.h and graph_ops.h)
 * and thin wrappers of the CUDA runtime calls they need. Elementwise ops are grid-stride loops;
 * fold gives each output one thread, which adds its inputs in the same order as the CPU does.
 * Each launch returns cudaGetLastError (launch errors only: kernels run later, in stream order).
 */
#include <cstdio>

#include <cuda_runtime.h>

#include "graph_kernels.h"

namespace
{

constexpr unsigned threads = 256;

unsigned blocks_for(size_t n)
{
    size_t b = (n + threads - 1) / threads;
    return (unsigned)(b == 0 ? 1 : b < 1024 ? b : 1024);
}

__global__ void affine_relu_kernel(float *out, const float *x, size_t n, float a, float b)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = fmaxf(a * x[i] + b, 0.0f);
}

__global__ void scale_kernel(float *out, const float *x, size_t nx, const float *w, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = x[i % nx] * w[i];
}

__global__ void add_kernel(float *out, const float *x, const float *y, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = x[i] + y[i];
}

__global__ void fold_kernel(float *out, size_t m, const float *x, size_t n)
{
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < m;
         j += (size_t)gridDim.x * blockDim.x) {
        float sum = 0.0f;
        for (size_t i = j; i < n; i += m)
            sum += x[i];
        out[j] = sum;
    }
}

} // namespace

extern "C" int gpu_affine_relu(float *out, const float *x, size_t n, float a, float b,
                               vpmm_stream_t s)
{
    affine_relu_kernel<<<blocks_for(n), threads, 0, s>>>(out, x, n, a, b);
    return (int)cudaGetLastError();
}

extern "C" int gpu_scale(float *out, const float *x, size_t nx, const float *w, size_t n,
                         vpmm_stream_t s)
{
    scale_kernel<<<blocks_for(n), threads, 0, s>>>(out, x, nx, w, n);
    return (int)cudaGetLastError();
}

extern "C" int gpu_add(float *out, const float *x, const float *y, size_t n, vpmm_stream_t s)
{
    add_kernel<<<blocks_for(n), threads, 0, s>>>(out, x, y, n);
    return (int)cudaGetLastError();
}

extern "C" int gpu_fold(float *out, size_t m, const float *x, size_t n, vpmm_stream_t s)
{
    fold_kernel<<<blocks_for(m), threads, 0, s>>>(out, m, x, n);
    return (int)cudaGetLastError();
}

extern "C" int gpu_copy(void *dst, const void *src, size_t bytes, vpmm_stream_t s)
{
    return (int)cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s);
}

extern "C" int gpu_synchronize(vpmm_stream_t s)
{
    return (int)cudaStreamSynchronize(s);
}

extern "C" int gpu_graph_instantiate(vpmm_graph_t graph, gpu_exec_t *out)
{
    return (int)cudaGraphInstantiate(out, graph, 0);
}

extern "C" int gpu_graph_launch(gpu_exec_t exec, vpmm_stream_t s)
{
    return (int)cudaGraphLaunch(exec, s);
}

extern "C" int gpu_exec_destroy(gpu_exec_t exec)
{
    return (int)cudaGraphExecDestroy(exec);
}
