/*
 * vpmm_torch.c — libvpmm_torch.so: vpmm as PyTorch's CUDA allocator, loaded through
 * torch.cuda.memory.CUDAPluggableAllocator. Uses only include/vpmm.h.
 *
 * PyTorch looks up two C functions by name in this library (CUDAPluggableAllocator(path,
 * "vpmm_torch_alloc", "vpmm_torch_free")) and, once torch.cuda.memory.change_current_allocator()
 * has installed them, calls them for every CUDA tensor, cuBLAS workspace and graph capture
 * allocation of the process:
 *
 *   void *vpmm_torch_alloc(size_t size, int device, cudaStream_t stream);
 *   void  vpmm_torch_free(void *ptr, size_t size, int device, cudaStream_t stream);
 *
 * (cudaStream_t is vpmm_stream_t, so no CUDA header is needed.) `device` is PyTorch's current
 * device, `stream` its current stream; the free gets the size, device and stream of the
 * allocation back (PyTorch keeps them). Each device gets one vpmm pool, created at its first
 * allocation with config.device = device: vpmm's CUDA backend retains that device's primary
 * context (the one the CUDA runtime, hence PyTorch, uses) and makes it current around its own
 * driver calls, so nothing here calls cudaSetDevice. The pool runs on the CUDA backend, vpmm's
 * default; VPMM_BACKEND=host asks for the host emulation, for the tests of this file only (its
 * memory is not device memory). Every other VPMM_* variable applies as usual.
 *
 * Graph captures need nothing from this file. PyTorch's CUDAGraph::capture_begin calls the
 * allocator's beginAllocateToPool hook before cudaStreamBeginCapture; CUDAPluggableAllocator
 * calls a user hook there only if one was set, so leaving them unset is valid. vpmm_malloc sees
 * the capture itself (the stream's capture id) and serves it from a graph pool of its own, whose
 * addresses never move and which the captured graph keeps alive (docs/GRAPHS.md). PyTorch's
 * `pool=` argument (sharing one private pool between captures) is not seen by vpmm: every
 * capture gets its own graph pool.
 *
 * Sizes and errors. A 0-byte request returns NULL without a message, as PyTorch's native
 * allocator does for empty tensors. Any other failure returns NULL and counts it; the first one
 * is printed on stderr with vpmm_last_error() and kept for vpmm_torch_first_error(). PyTorch
 * does not check the pointer a pluggable allocator returns (it does not raise OutOfMemoryError),
 * so callers should poll vpmm_torch_failures() — the sample does after every step. A pool whose
 * creation failed is tried again at the device's next allocation.
 *
 * Thread safety: PyTorch calls in from any thread (autograd runs on its own). The device table
 * is read with one acquire load on the hot path; pools are created under a mutex, never
 * destroyed (PyTorch frees tensors until the very end of the process, so the pool must outlive
 * it). vpmm's pools are thread-safe themselves.
 *
 * The extras (stats, a JSON summary, dump, check, peak reset) are for the Python side through
 * ctypes; integrations/pytorch/README.md lists them. The library exports only vpmm_torch_*
 * (vpmm_torch.map): the vpmm copy linked into it stays private. Tested by test_vpmm_torch.c (host
 * emulation); the GPU path by samples/pytorch/train_and_graph.py.
 */
#define _POSIX_C_SOURCE 200809L /* pthread_mutex_t with -std=c11 */

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stats_json.h"
#include "vpmm_torch.h"

/* Devices beyond this ordinal are refused (no pool, NULL, a message). */
#define VPMM_TORCH_MAX_DEVICES 64

static _Atomic(vpmm_pool_t *) g_pools[VPMM_TORCH_MAX_DEVICES];
static pthread_mutex_t g_create_lock = PTHREAD_MUTEX_INITIALIZER;

static atomic_ullong g_alloc_failures;
static atomic_ullong g_free_failures;
static atomic_flag g_reported = ATOMIC_FLAG_INIT; /* the first failure was printed */
static char g_first_error[512];                   /* written once, before g_first_error_set */
static atomic_int g_first_error_set;

/* Prints the first failure of the process on stderr and keeps it; later ones are only counted
 * by the caller. */
static void report_failure(const char *fmt, ...)
{
    va_list ap;

    if (atomic_flag_test_and_set(&g_reported))
        return;
    va_start(ap, fmt);
    vsnprintf(g_first_error, sizeof g_first_error, fmt, ap);
    va_end(ap);
    atomic_store_explicit(&g_first_error_set, 1, memory_order_release);
    fprintf(stderr,
            "vpmm_torch: %s\nvpmm_torch: further failures are counted, not printed "
            "(vpmm_torch_failures, vpmm_torch_stats_json)\n",
            g_first_error);
}

/* The pool of device, or NULL (no message) if none was created yet or device is out of range. */
static vpmm_pool_t *pool_of(int device)
{
    if (device < 0 || device >= VPMM_TORCH_MAX_DEVICES)
        return NULL;
    return atomic_load_explicit(&g_pools[device], memory_order_acquire);
}

/* The pool of device, created on first use. NULL on failure (reported). */
static vpmm_pool_t *pool_get(int device)
{
    vpmm_pool_t *pool = pool_of(device);
    vpmm_config_t cfg;
    vpmm_status_t st;

    if (pool != NULL)
        return pool;
    if (device < 0 || device >= VPMM_TORCH_MAX_DEVICES) {
        report_failure("device %d is out of range (this build supports ordinals 0..%d)", device,
                       VPMM_TORCH_MAX_DEVICES - 1);
        return NULL;
    }
    pthread_mutex_lock(&g_create_lock);
    pool = atomic_load_explicit(&g_pools[device], memory_order_acquire);
    if (pool == NULL) {
        vpmm_config_init(&cfg); /* the CUDA backend: vpmm's default */
        cfg.device = device;
        st = vpmm_pool_create(&cfg, &pool);
        if (st != VPMM_SUCCESS) {
            report_failure("creating the pool of device %d failed: %s (%s): %s", device,
                           vpmm_status_name(st), vpmm_strerror(st), vpmm_last_error());
            pool = NULL;
        } else {
            atomic_store_explicit(&g_pools[device], pool, memory_order_release);
        }
    }
    pthread_mutex_unlock(&g_create_lock);
    return pool;
}

/* ---- the two functions PyTorch calls ------------------------------------------------------ */

VPMM_TORCH_API void *vpmm_torch_alloc(size_t size, int device, vpmm_stream_t stream)
{
    vpmm_pool_t *pool;
    vpmm_status_t st;
    void *p;

    if (size == 0)
        return NULL; /* as PyTorch's native allocator: an empty tensor has no storage */
    pool = pool_get(device);
    if (pool == NULL) {
        atomic_fetch_add_explicit(&g_alloc_failures, 1, memory_order_relaxed);
        return NULL;
    }
    st = vpmm_malloc(pool, size, stream, &p);
    if (st != VPMM_SUCCESS) {
        char report[400] = "";
        atomic_fetch_add_explicit(&g_alloc_failures, 1, memory_order_relaxed);
        if (st == VPMM_ERROR_OUT_OF_MEMORY) /* the pool's report: what it holds, and where */
            (void)vpmm_pool_oom_report(pool, report, sizeof report);
        report_failure("vpmm_malloc(%zu bytes, device %d, stream %p) failed: %s (%s): %s", size,
                       device, (void *)stream, vpmm_status_name(st), vpmm_strerror(st),
                       report[0] ? report : vpmm_last_error());
        return NULL;
    }
    return p;
}

VPMM_TORCH_API void vpmm_torch_free(void *ptr, size_t size, int device, vpmm_stream_t stream)
{
    vpmm_pool_t *pool;
    vpmm_status_t st;

    (void)stream; /* vpmm orders the free on the allocation's stream itself */
    if (ptr == NULL)
        return;
    pool = pool_of(device);
    if (pool == NULL) {
        atomic_fetch_add_explicit(&g_free_failures, 1, memory_order_relaxed);
        report_failure("free of %p (%zu bytes) on device %d, which has no vpmm pool", ptr, size,
                       device);
        return;
    }
    st = vpmm_free(pool, ptr);
    if (st != VPMM_SUCCESS) {
        atomic_fetch_add_explicit(&g_free_failures, 1, memory_order_relaxed);
        report_failure("vpmm_free(%p, %zu bytes, device %d) failed: %s (%s): %s", ptr, size, device,
                       vpmm_status_name(st), vpmm_strerror(st), vpmm_last_error());
    }
}

/* ---- extras for the Python side (contracts in vpmm_torch.h) ------------------------------- */

VPMM_TORCH_API unsigned long long vpmm_torch_failures(void)
{
    return atomic_load_explicit(&g_alloc_failures, memory_order_relaxed) +
           atomic_load_explicit(&g_free_failures, memory_order_relaxed);
}

VPMM_TORCH_API const char *vpmm_torch_first_error(void)
{
    return atomic_load_explicit(&g_first_error_set, memory_order_acquire) ? g_first_error : "";
}

VPMM_TORCH_API int vpmm_torch_stats(int device, vpmm_stats_t *out)
{
    vpmm_pool_t *pool;

    if (out == NULL || device < 0 || device >= VPMM_TORCH_MAX_DEVICES)
        return VPMM_TORCH_BAD_ARGS;
    pool = pool_of(device);
    if (pool == NULL)
        return VPMM_TORCH_NO_POOL;
    return (int)vpmm_get_stats(pool, out);
}

VPMM_TORCH_API long vpmm_torch_stats_json(int device, char *buf, size_t cap)
{
    vpmm_stats_t s;
    char extra[96];
    int st = vpmm_torch_stats(device, &s);

    if (st < 0)
        return st;
    if (st != VPMM_SUCCESS)
        return -100 - st;
    snprintf(extra, sizeof extra, "\"alloc_failures\":%llu,\"free_failures\":%llu",
             atomic_load_explicit(&g_alloc_failures, memory_order_relaxed),
             atomic_load_explicit(&g_free_failures, memory_order_relaxed));
    return (long)vpmm_stats_json(&s, device, vpmm_pool_backend_name(pool_of(device)), extra, buf,
                                 cap);
}

VPMM_TORCH_API int vpmm_torch_dump(int device, const char *path)
{
    vpmm_pool_t *pool;
    FILE *f = stderr;
    int st;

    if (device < 0 || device >= VPMM_TORCH_MAX_DEVICES)
        return VPMM_TORCH_BAD_ARGS;
    pool = pool_of(device);
    if (pool == NULL)
        return VPMM_TORCH_NO_POOL;
    if (path != NULL && path[0] != '\0') {
        f = fopen(path, "w");
        if (f == NULL)
            return -3;
    }
    st = (int)vpmm_pool_dump(pool, f);
    if (f != stderr)
        fclose(f);
    else
        fflush(f);
    return st;
}

VPMM_TORCH_API long vpmm_torch_check(int device)
{
    vpmm_pool_t *pool;

    if (device < 0 || device >= VPMM_TORCH_MAX_DEVICES)
        return VPMM_TORCH_BAD_ARGS;
    pool = pool_of(device);
    if (pool == NULL)
        return VPMM_TORCH_NO_POOL;
    return (long)vpmm_pool_check(pool, stderr);
}

VPMM_TORCH_API long long vpmm_torch_trim(int device, size_t target_bytes)
{
    vpmm_pool_t *pool;
    size_t released = 0;
    vpmm_status_t st;

    if (device < 0 || device >= VPMM_TORCH_MAX_DEVICES)
        return VPMM_TORCH_BAD_ARGS;
    pool = pool_of(device);
    if (pool == NULL)
        return VPMM_TORCH_NO_POOL;
    st = vpmm_trim(pool, target_bytes, &released);
    return st == VPMM_SUCCESS ? (long long)released : -100 - (long long)st;
}

VPMM_TORCH_API int vpmm_torch_reset_peak(int device)
{
    vpmm_pool_t *pool;

    if (device < 0 || device >= VPMM_TORCH_MAX_DEVICES)
        return VPMM_TORCH_BAD_ARGS;
    pool = pool_of(device);
    if (pool == NULL)
        return VPMM_TORCH_NO_POOL;
    return (int)vpmm_reset_peak_stats(pool);
}
