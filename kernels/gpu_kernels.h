/*
 * gpu_kernels.h — small CUDA kernels with C launchers, used by the GPU tests (tests/test_gpu*.c)
 * and the GPU soak (bench/soak/) to write and verify device memory handed out by vpmm, and by the
 * tests to keep a stream busy. They live in kernels/, below both: neither tests/ nor bench/
 * reaches into the other.
 *
 * The data pattern: byte j of a range filled with seed s is byte (j % 4) (little-endian) of
 * gk_pattern(s, j / 4), counted from the start of the range; so a range of any length and any
 * alignment has one well-defined content, and gk_pattern lets the host compute it too. Launchers
 * return a cudaError_t as int (0 = cudaSuccess: the kernel was enqueued); they never synchronise.
 * Thread-safe as the CUDA runtime is. Compiled by nvcc (gpu_kernels.cu) into vpmm_gpu_kernels,
 * and a second time with --default-stream per-thread into vpmm_gpu_kernels_ptds (for
 * test_gpu_streams_ptds): there stream 0 given to a launcher is the calling thread's per-thread
 * stream, not the legacy default stream. cudaStreamLegacy (0x1) and cudaStreamPerThread (0x2)
 * name those two streams explicitly in either copy.
 */
#ifndef VPMM_GPU_KERNELS_H
#define VPMM_GPU_KERNELS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __CUDACC__
#define GK_HOST_DEVICE __host__ __device__
#else
#define GK_HOST_DEVICE
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The 32-bit word at index `word` of the pattern for `seed` (a 64-bit mix; distinct seeds give
 * unrelated patterns). */
static inline GK_HOST_DEVICE uint32_t gk_pattern(uint32_t seed, uint64_t word)
{
    uint64_t x = (word + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)seed * 0xD1B54A32D192ED03ull);
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 32;
    return (uint32_t)x;
}

/* Byte j of the pattern for `seed`. */
static inline GK_HOST_DEVICE uint8_t gk_pattern_byte(uint32_t seed, uint64_t j)
{
    return (uint8_t)(gk_pattern(seed, j / 4) >> (8 * (j % 4)));
}

/* Writes the pattern for `seed` over [ptr, ptr + bytes) on stream s. */
int gk_fill(void *ptr, size_t bytes, uint32_t seed, cudaStream_t s);

/*
 * Compares [ptr, ptr + bytes) with the pattern for `seed` on stream s and adds the number of
 * mismatching units (a 4-byte word of the bulk, or a single byte of an unaligned head or tail) to
 * the device counter *mismatches_dev (never reset here: zero it first, or let it accumulate).
 */
int gk_check(const void *ptr, size_t bytes, uint32_t seed, unsigned long long *mismatches_dev,
             cudaStream_t s);

/* Busy-waits about `cycles` SM clock cycles in one thread on stream s (work really pending). */
int gk_spin(cudaStream_t s, unsigned long long cycles);

/* 1 if this copy of the kernels was built with nvcc --default-stream per-thread (stream 0 is the
 * calling thread's per-thread stream), 0 if stream 0 is the legacy default stream. */
int gk_per_thread_default_stream(void);

/*
 * Float kernels for the graph tests' small "inference" steps. Each is exactly reproducible on the
 * host (gk_ref_* below): one rounding per operation, fused multiply-add as fmaf, no reordering.
 *   affine:   out[i] = a * in[i] + b, then max(0, .) when relu
 *   add:      out[i] = x[i] + y[i]
 *   resample: out[i] = in[(i * 31 + 7) % n_in] * scale        (changes the length)
 * out may alias in (affine) or x / y (add).
 */
int gk_affine(float *out, const float *in, size_t n, float a, float b, int relu, cudaStream_t s);
int gk_add(float *out, const float *x, const float *y, size_t n, cudaStream_t s);
int gk_resample(float *out, size_t n_out, const float *in, size_t n_in, float scale,
                cudaStream_t s);

static inline GK_HOST_DEVICE float gk_ref_affine(float x, float a, float b, int relu)
{
    float y = fmaf(a, x, b);
    return relu && y < 0.0f ? 0.0f : y;
}

static inline GK_HOST_DEVICE size_t gk_resample_src(size_t i, size_t n_in)
{
    return (i * 31 + 7) % n_in;
}

#ifdef __cplusplus
}
#endif

#endif /* VPMM_GPU_KERNELS_H */
