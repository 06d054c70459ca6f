/*
 * gpu_kernels.cu — the kernels behind gpu_kernels.h: pattern fill, pattern check, spin, and the
 * float steps of the graph tests (affine, add, resample); and which default stream the copy was
 * built for (kernels/CMakeLists.txt builds it twice).
 *
 * Fill and check split a range into an unaligned head (bytes up to the first 16-byte boundary),
 * a bulk of 16-byte vectors, and a tail of bytes; each thread walks the bulk and then the edge
 * bytes with grid-stride loops. When the range does not start on a 4-byte boundary the pattern's
 * words do not line up with memory words, so the whole range goes through the byte loop (only
 * the kernels' own self-test does that; vpmm hands out 256-byte aligned memory). Launchers report
 * launch errors through cudaGetLastError and never synchronise.
 */
#include "gpu_kernels.h"

namespace
{

constexpr unsigned kThreads = 256;
constexpr size_t kMaxBlocks = 4096;

/* How a range is cut: [0, head) bytes, then nvec 16-byte vectors, then bytes up to n. */
struct span {
    size_t head, nvec, n;
};

span cut(const void *ptr, size_t n)
{
    uintptr_t a = (uintptr_t)ptr;
    span s;
    if (a % 4 != 0) {
        s.head = n; /* pattern words straddle memory words: bytes only */
    } else {
        size_t to16 = (16 - a % 16) % 16;
        s.head = to16 < n ? to16 : n;
    }
    s.nvec = (n - s.head) / 16;
    s.n = n;
    return s;
}

unsigned blocks_for(const span &s)
{
    size_t edge = s.n - 16 * s.nvec;
    size_t work = s.nvec > edge ? s.nvec : edge;
    size_t b = (work + kThreads - 1) / kThreads;
    if (b == 0)
        b = 1;
    return (unsigned)(b < kMaxBlocks ? b : kMaxBlocks);
}

__device__ __forceinline__ uint4 pattern_vec(uint32_t seed, uint64_t w)
{
    return make_uint4(gk_pattern(seed, w), gk_pattern(seed, w + 1), gk_pattern(seed, w + 2),
                      gk_pattern(seed, w + 3));
}

/* Byte index (from the range start) of the i-th edge byte: head bytes first, then the tail. */
__device__ __forceinline__ size_t edge_byte(const span &s, size_t i)
{
    return i < s.head ? i : s.head + 16 * s.nvec + (i - s.head);
}

__global__ void fill_kernel(uint8_t *p, span s, uint32_t seed)
{
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    uint4 *v = reinterpret_cast<uint4 *>(p + s.head);
    const uint64_t w0 = s.head / 4;
    const size_t nedge = s.n - 16 * s.nvec;

    for (size_t i = tid; i < s.nvec; i += stride)
        v[i] = pattern_vec(seed, w0 + 4 * i);
    for (size_t i = tid; i < nedge; i += stride) {
        size_t j = edge_byte(s, i);
        p[j] = gk_pattern_byte(seed, j);
    }
}

__global__ void check_kernel(const uint8_t *p, span s, uint32_t seed, unsigned long long *bad)
{
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const uint4 *v = reinterpret_cast<const uint4 *>(p + s.head);
    const uint64_t w0 = s.head / 4;
    const size_t nedge = s.n - 16 * s.nvec;
    unsigned long long mine = 0;

    for (size_t i = tid; i < s.nvec; i += stride) {
        uint4 got = v[i], want = pattern_vec(seed, w0 + 4 * i);
        mine += (got.x != want.x) + (got.y != want.y) + (got.z != want.z) + (got.w != want.w);
    }
    for (size_t i = tid; i < nedge; i += stride) {
        size_t j = edge_byte(s, i);
        mine += p[j] != gk_pattern_byte(seed, j);
    }
    if (mine != 0)
        atomicAdd(bad, mine);
}

__global__ void spin_kernel(unsigned long long cycles)
{
    long long start = clock64();
    while ((unsigned long long)(clock64() - start) < cycles) {
    }
}

__global__ void affine_kernel(float *out, const float *in, size_t n, float a, float b, int relu)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = gk_ref_affine(in[i], a, b, relu);
}

__global__ void add_kernel(float *out, const float *x, const float *y, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = __fadd_rn(x[i], y[i]);
}

__global__ void resample_kernel(float *out, size_t n_out, const float *in, size_t n_in, float scale)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_out;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = __fmul_rn(in[gk_resample_src(i, n_in)], scale);
}

unsigned blocks_for_n(size_t n)
{
    size_t b = (n + kThreads - 1) / kThreads;
    return (unsigned)(b == 0 ? 1 : b < kMaxBlocks ? b : kMaxBlocks);
}

} // namespace

extern "C" int gk_affine(float *out, const float *in, size_t n, float a, float b, int relu,
                         cudaStream_t s)
{
    affine_kernel<<<blocks_for_n(n), kThreads, 0, s>>>(out, in, n, a, b, relu);
    return (int)cudaGetLastError();
}

extern "C" int gk_add(float *out, const float *x, const float *y, size_t n, cudaStream_t s)
{
    add_kernel<<<blocks_for_n(n), kThreads, 0, s>>>(out, x, y, n);
    return (int)cudaGetLastError();
}

extern "C" int gk_resample(float *out, size_t n_out, const float *in, size_t n_in, float scale,
                           cudaStream_t s)
{
    resample_kernel<<<blocks_for_n(n_out), kThreads, 0, s>>>(out, n_out, in, n_in, scale);
    return (int)cudaGetLastError();
}

extern "C" int gk_fill(void *ptr, size_t bytes, uint32_t seed, cudaStream_t s)
{
    if (bytes == 0)
        return (int)cudaSuccess;
    span sp = cut(ptr, bytes);
    fill_kernel<<<blocks_for(sp), kThreads, 0, s>>>(static_cast<uint8_t *>(ptr), sp, seed);
    return (int)cudaGetLastError();
}

extern "C" int gk_check(const void *ptr, size_t bytes, uint32_t seed,
                        unsigned long long *mismatches_dev, cudaStream_t s)
{
    if (bytes == 0)
        return (int)cudaSuccess;
    span sp = cut(ptr, bytes);
    check_kernel<<<blocks_for(sp), kThreads, 0, s>>>(static_cast<const uint8_t *>(ptr), sp, seed,
                                                     mismatches_dev);
    return (int)cudaGetLastError();
}

extern "C" int gk_spin(cudaStream_t s, unsigned long long cycles)
{
    spin_kernel<<<1, 1, 0, s>>>(cycles);
    return (int)cudaGetLastError();
}

extern "C" int gk_per_thread_default_stream(void)
{
#ifdef CUDA_API_PER_THREAD_DEFAULT_STREAM /* nvcc --default-stream per-thread defines it */
    return 1;
#else
    return 0;
#endif
}
