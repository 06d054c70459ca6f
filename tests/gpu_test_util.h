/*
 * gpu_test_util.h — what the GPU tests (test_gpu.c, test_gpu_graph.c, test_gpu_streams.c) share:
 * the "is there a GPU" gate every GPU test starts at, CUDA_OK / GK_OK, a few small CUDA helpers,
 * and the kernels' stand-ins for a build without nvcc.
 *
 * The gate: each file has its own probe (what it prints about the device and sets up differs)
 * and passes it to gpu_ready, which calls it once, caches the answer and, without a device, says
 * why once ("<tag> every GPU test skips: <why>") and lets the test skip(); with
 * VPMM_TEST_REQUIRE_GPU=1 that is a failure instead, for runs on GPU machines. A build without
 * the kernels (no nvcc: VPMM_HAVE_KERNELS undefined) skips without calling the probe. A program
 * whose every test skipped exits GPU_SKIP_EXIT (77, gpu_exit_status), which ctest shows as skipped.
 *
 * gpu_test_util.c is compiled into each test program (CMake SOURCES), not into a library: it
 * must see that program's VPMM_HAVE_KERNELS (the stand-ins) and its
 * CUDA_API_PER_THREAD_DEFAULT_STREAM (test_gpu_streams_ptds: the runtime calls and
 * vpmm_config_init here must take stream 0 as that program's other files do). The gate's cache
 * is one per program. Single-threaded: cmocka's asserts run on the main thread only.
 */
#ifndef VPMM_GPU_TEST_UTIL_H
#define VPMM_GPU_TEST_UTIL_H

#include <stddef.h>

#include <cuda_runtime_api.h>

#include "test_util.h"

#define VA_SMALL  (64 * GiB) /* a GPU test pool's VA: keeps reservations quick */
#define MEM_SLACK (64 * MiB) /* device memory may differ by this much after a pool is gone */

/* A CUDA runtime call that must succeed; fails the test with its error otherwise. */
#define CUDA_OK(expr)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (expr);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            fail_msg("%s failed: %s (%d)", #expr, cudaGetErrorString(e_), (int)e_);                \
    } while (0)

/* A launcher of gpu_kernels.h (a cudaError_t as int) that must succeed. */
#define GK_OK(expr)                                                                                \
    do {                                                                                           \
        int e_ = (expr);                                                                           \
        if (e_ != 0)                                                                               \
            fail_msg("%s failed: %s (%d)", #expr, cudaGetErrorString((cudaError_t)e_), e_);        \
    } while (0)

/*
 * A file's probe: 1 if a CUDA device can run its tests (it may print the device and set up what
 * its tests need); 0 with the reason in why[0 .. len) otherwise. It may fail the test (fail_msg,
 * an assert) when a device is there but broken; gpu_ready then skips every later test with "the
 * GPU probe failed (see the first test's failure)".
 */
typedef int (*gpu_probe_fn)(char *why, size_t len);

/*
 * Every GPU test starts here: 1 to go on; 0 to skip (the first time with "<tag> every GPU test
 * skips: <why>"); fails the test instead when VPMM_TEST_REQUIRE_GPU=1. The probe runs on the
 * first call only; tag is the file's log prefix ("[gpu]").
 */
int gpu_ready(const char *tag, gpu_probe_fn probe);

/* gpu_ready, then skip() the test when there is no GPU. */
#define GPU_REQUIRE(tag, probe)                                                                    \
    do {                                                                                           \
        if (!gpu_ready((tag), (probe)))                                                            \
            skip();                                                                                \
    } while (0)

/* 1 once gpu_ready has found a device; 0 before, or when every GPU test skipped. */
int gpu_present(void);

/* The exit status of a GPU test program whose every test skipped (no usable device, or built
 * without the kernels): tests/CMakeLists.txt gives it to ctest as SKIP_RETURN_CODE, so that ctest
 * reports the program as skipped, not passed. */
#define GPU_SKIP_EXIT 77

/* What main returns after cmocka_run_group_tests (failed: its result, the number of failed tests):
 * GPU_SKIP_EXIT when nothing failed and no device was found, else failed. With
 * VPMM_TEST_REQUIRE_GPU=1 and no device every test has failed, so it is never GPU_SKIP_EXIT. */
int gpu_exit_status(int failed);

/*
 * The first step of a probe: 1 if the CUDA runtime sees a device and vpmm opens a pool on it (CUDA
 * backend, VA_SMALL of VA, closed again), *out_page_size (may be NULL) its page size; 0 with the
 * reason in why when there is no usable device. A device that vpmm cannot use fails the test.
 */
int gpu_probe_pool(char *why, size_t len, size_t *out_page_size);

/* The device's free memory now. */
size_t gpu_device_free(void);

/* A created stream: non-blocking (as PyTorch makes its streams) unless `blocking`. A blocking
 * stream is implicitly synchronised with the legacy stream, which orders work by itself and would
 * hide a wait that vpmm failed to insert whenever the other side is the legacy stream. */
cudaStream_t gpu_stream_new(int blocking);

/* Releases the stream from the pool, then destroys it. */
void gpu_stream_done(vpmm_pool_t *pool, cudaStream_t s);

/* 1 if [a, a + an) and [b, b + bn) share a byte. */
int gpu_overlaps(const void *a, size_t an, const void *b, size_t bn);

/* Seconds on the monotonic clock. */
double gpu_now_s(void);

#endif /* VPMM_GPU_TEST_UTIL_H */
