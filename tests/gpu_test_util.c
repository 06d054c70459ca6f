/*
 * gpu_test_util.c — the GPU tests' shared gate and helpers (gpu_test_util.h), and the kernels'
 * stand-ins for a build without nvcc.
 *
 * Compiled into each GPU test program with that program's definitions (see the header): in
 * test_gpu_streams_ptds the runtime calls here, and vpmm_config_init, take stream 0 as the
 * calling thread's per-thread stream, as that program's own file does. The gate's state is one
 * per program, touched by the main thread only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "gpu_kernels.h"
#include "gpu_test_util.h"

#ifndef VPMM_HAVE_KERNELS
/* Built without nvcc: stand-ins so the tests compile; never reached (gpu_ready skips every GPU
 * test without calling the probe). */
int gk_fill(void *ptr, size_t bytes, uint32_t seed, cudaStream_t s)
{
    return (int)cudaErrorNotSupported;
}
int gk_check(const void *ptr, size_t bytes, uint32_t seed, unsigned long long *mismatches_dev,
             cudaStream_t s)
{
    return (int)cudaErrorNotSupported;
}
int gk_spin(cudaStream_t s, unsigned long long cycles)
{
    return (int)cudaErrorNotSupported;
}
int gk_affine(float *out, const float *in, size_t n, float a, float b, int relu, cudaStream_t s)
{
    return (int)cudaErrorNotSupported;
}
int gk_add(float *out, const float *x, const float *y, size_t n, cudaStream_t s)
{
    return (int)cudaErrorNotSupported;
}
int gk_resample(float *out, size_t n_out, const float *in, size_t n_in, float scale, cudaStream_t s)
{
    return (int)cudaErrorNotSupported;
}
#endif

/* The device, probed once by the first GPU test. */
static struct gate {
    int probed;    /* 0: not yet; 1: probed; 2: probed and the reason for skipping printed */
    int present;   /* 1: a device that can run the tests */
    char why[512]; /* why the tests skip */
} gate;

int gpu_ready(const char *tag, gpu_probe_fn probe)
{
    const char *req = getenv("VPMM_TEST_REQUIRE_GPU");
    if (!gate.probed) {
        gate.probed = 1;
#ifdef VPMM_HAVE_KERNELS
        /* What stays if the probe fails the test and leaves by longjmp. */
        snprintf(gate.why, sizeof gate.why, "the GPU probe failed (see the first test's failure)");
        gate.present = probe(gate.why, sizeof gate.why);
#else
        (void)probe;
        snprintf(gate.why, sizeof gate.why,
                 "built without CUDA kernels (no nvcc at configure time)");
#endif
    }
    if (gate.present)
        return 1;
    if (req != NULL && strcmp(req, "1") == 0)
        fail_msg("VPMM_TEST_REQUIRE_GPU=1, but %s", gate.why);
    if (gate.probed == 1) /* say why once */
        print_message("%s every GPU test skips: %s\n", tag, gate.why);
    gate.probed = 2;
    return 0;
}

int gpu_present(void)
{
    return gate.present;
}

int gpu_exit_status(int failed)
{
    return failed == 0 && !gate.present ? GPU_SKIP_EXIT : failed;
}

int gpu_probe_pool(char *why, size_t len, size_t *out_page_size)
{
    vpmm_config_t cfg;
    vpmm_pool_t *pool = NULL;
    vpmm_stats_t s;
    vpmm_status_t st;
    int count = 0;
    cudaError_t ce = cudaGetDeviceCount(&count);

    vpmm_config_init(&cfg);
    cfg.backend = VPMM_BACKEND_CUDA;
    cfg.ignore_env = 1;
    cfg.va_size = VA_SMALL;
    st = vpmm_pool_create(&cfg, &pool);
    if (st == VPMM_ERROR_NO_DEVICE || st == VPMM_ERROR_NOT_SUPPORTED || ce != cudaSuccess ||
        count == 0) {
        snprintf(why, len,
                 "no usable CUDA device (cudaGetDeviceCount: %s, %d devices; "
                 "vpmm_pool_create(CUDA): %s%s%s)",
                 ce == cudaSuccess ? "ok" : cudaGetErrorString(ce), count, vpmm_status_name(st),
                 st == VPMM_SUCCESS ? "" : ": ", st == VPMM_SUCCESS ? "" : vpmm_last_error());
        if (pool != NULL)
            vpmm_pool_destroy(pool);
        return 0;
    }
    if (st != VPMM_SUCCESS)
        fail_msg("a CUDA device is present but vpmm_pool_create(CUDA) failed: %s (%s)",
                 vpmm_status_name(st), vpmm_last_error());
    assert_int_equal(vpmm_get_stats(pool, &s), VPMM_SUCCESS);
    assert_int_equal(vpmm_pool_destroy(pool), VPMM_SUCCESS);
    if (out_page_size != NULL)
        *out_page_size = s.page_size;
    return 1;
}

size_t gpu_device_free(void)
{
    size_t f, t;
    CUDA_OK(cudaMemGetInfo(&f, &t));
    return f;
}

cudaStream_t gpu_stream_new(int blocking)
{
    cudaStream_t s;
    if (blocking)
        CUDA_OK(cudaStreamCreate(&s));
    else
        CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
}

void gpu_stream_done(vpmm_pool_t *pool, cudaStream_t s)
{
    assert_int_equal(vpmm_stream_release(pool, s), VPMM_SUCCESS);
    CUDA_OK(cudaStreamDestroy(s));
}

int gpu_overlaps(const void *a, size_t an, const void *b, size_t bn)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y + bn && y < x + an;
}

double gpu_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
