/*
 * backends.c — the allocators of backends.h. vpmm is used only through include/vpmm.h; the
 * baselines through the CUDA runtime (linked statically, or in a vpmm-replay with the PyTorch
 * anchors PyTorch's shared runtime, backend_torch.cpp says why: either way the program starts
 * without a driver and reports "no CUDA device" when a GPU backend is asked for); the PyTorch
 * anchors through backend_torch.h, compiled in only with VPMM_BENCH_HAVE_TORCH (vpmm-replay where
 * PyTorch is found; elsewhere asking for them is refused as an unavailable backend).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "backends.h"
#ifdef VPMM_BENCH_HAVE_TORCH
#include "backend_torch.h"
#define TORCH_NAMES ", torch, torch-expandable"
#else
#define TORCH_NAMES ""
#endif

typedef enum kind { K_VPMM, K_ASYNC, K_MALLOC, K_TORCH } kind_t;

struct backend {
    kind_t kind;
    const char *name;
    vpmm_pool_t *pool;
    vpmm_stream_t *streams;
    size_t nstreams;
    int own_streams; /* CUDA streams we created (indices with a non-zero trace id) */
    int verify;
    cudaMemPool_t mempool;
    struct torch_backend *torch; /* K_TORCH: PyTorch's caching allocator (backend_torch.h) */
    size_t free0, min_free;      /* cudaMalloc's accounting */
    uint64_t live;
    char err[256];
};

/* Host backend: any distinct value is a stream; these give each trace stream a token. */
static char host_tokens[64];

const char *backend_names(void)
{
    return "host, cuda, cudaMallocAsync, cudaMalloc" TORCH_NAMES;
}

int backend_known(const char *name)
{
    static const char *const known[] = { "host",       "cuda",  "cudaMallocAsync",
                                         "cudaMalloc", "torch", "torch-expandable" };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(name, known[i]) == 0)
            return 1;
    return 0;
}

const char *backend_default(void)
{
    return "cuda"; /* as the library's default: the host emulation only when asked for */
}

const char *backend_name(const backend_t *b)
{
    return b->name;
}

const char *backend_error(const backend_t *b)
{
    return b->err;
}

static int cuda_fail(backend_t *b, const char *what, cudaError_t e)
{
    snprintf(b->err, sizeof b->err, "%s: %s", what, cudaGetErrorString(e));
    return -1;
}

static int cuda_device_ready(char *err, size_t errlen)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        snprintf(err, errlen, "no CUDA device (%s); --backend host runs vpmm's host emulation",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return -1;
    }
    return 0;
}

#ifdef VPMM_BENCH_HAVE_TORCH
/* backend_torch.h's statuses are backends.h's, as plain ints for its C++ side. */
static backend_rc_t torch_rc(int rc)
{
    return rc == 0 ? BACKEND_OK : rc == 1 ? BACKEND_OOM : BACKEND_ERROR;
}
#endif

static int make_streams(backend_t *b, const uint64_t *ids, int cuda)
{
    b->streams = calloc(b->nstreams ? b->nstreams : 1, sizeof *b->streams);
    if (b->streams == NULL)
        return -1;
    for (size_t i = 0; i < b->nstreams; i++) {
        if (ids[i] == 0) {
            b->streams[i] = NULL; /* the trace's default stream: the legacy default stream */
        } else if (!cuda) {
            b->streams[i] = (vpmm_stream_t)&host_tokens[i % sizeof host_tokens];
        } else {
            cudaStream_t s;
            cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
            if (e != cudaSuccess)
                return cuda_fail(b, "cudaStreamCreate", e);
            b->streams[i] = (vpmm_stream_t)s;
            b->own_streams = 1;
        }
    }
    return 0;
}

int backend_open(const char *name, size_t nstreams, const uint64_t *stream_ids, int flags,
                 backend_t **out, char *err, size_t errlen)
{
    backend_t *b = calloc(1, sizeof *b);
    int cuda;
    if (b == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    b->nstreams = nstreams;
    b->verify = (flags & BACKEND_VERIFY) != 0;
    if (strcmp(name, "host") == 0 || strcmp(name, "cuda") == 0) {
        vpmm_config_t cfg;
        vpmm_status_t st;
        b->kind = K_VPMM;
        cuda = name[0] == 'c';
        b->name = cuda ? "vpmm/cuda" : "vpmm/host";
        if (cuda && cuda_device_ready(err, errlen) != 0)
            goto fail;
        vpmm_config_init(&cfg);
        cfg.backend = cuda ? VPMM_BACKEND_CUDA : VPMM_BACKEND_HOST;
        if (flags & BACKEND_DRIVER_STATS)
            cfg.driver_stats = 1;
        st = vpmm_pool_create(&cfg, &b->pool);
        if (st != VPMM_SUCCESS) {
            snprintf(err, errlen, "vpmm_pool_create: %s (%s)", vpmm_strerror(st),
                     vpmm_last_error());
            goto fail;
        }
    } else if (strcmp(name, "cudaMallocAsync") == 0 || strcmp(name, "cudaMalloc") == 0) {
        cudaError_t e;
        size_t total;
        cuda = 1;
        if (cuda_device_ready(err, errlen) != 0)
            goto fail;
        if (strcmp(name, "cudaMalloc") == 0) {
            b->kind = K_MALLOC;
            b->name = "cudaMalloc";
            e = cudaFree(NULL); /* create the context before measuring free memory */
            if (e == cudaSuccess)
                e = cudaMemGetInfo(&b->free0, &total);
            b->min_free = b->free0;
        } else {
            uint64_t threshold = UINT64_MAX, zero = 0;
            b->kind = K_ASYNC;
            b->name = "cudaMallocAsync";
            e = cudaDeviceGetDefaultMemPool(&b->mempool, 0);
            if (e == cudaSuccess)
                e = cudaMemPoolSetAttribute(b->mempool, cudaMemPoolAttrReleaseThreshold,
                                            &threshold);
            if (e == cudaSuccess)
                e = cudaMemPoolTrimTo(b->mempool, 0);
            if (e == cudaSuccess)
                e = cudaMemPoolSetAttribute(b->mempool, cudaMemPoolAttrReservedMemHigh, &zero);
        }
        if (e != cudaSuccess) {
            snprintf(err, errlen, "%s setup: %s", name, cudaGetErrorString(e));
            goto fail;
        }
    } else if (strcmp(name, "torch") == 0 || strcmp(name, "torch-expandable") == 0) {
#ifdef VPMM_BENCH_HAVE_TORCH
        cudaError_t e;
        cuda = 1;
        b->kind = K_TORCH;
        b->name = name;
        if (cuda_device_ready(err, errlen) != 0)
            goto fail;
        /* The context first, as for cudaMalloc: the first timed malloc must not create it. */
        e = cudaFree(NULL);
        if (e != cudaSuccess) {
            snprintf(err, errlen, "%s setup: %s", name, cudaGetErrorString(e));
            goto fail;
        }
        if (torch_backend_open(strcmp(name, "torch-expandable") == 0, &b->torch, err, errlen) != 0)
            goto fail;
        b->name = torch_backend_name(b->torch);
#else
        snprintf(err, errlen,
                 "built without PyTorch (the anchors torch and torch-expandable are compiled into "
                 "vpmm-replay where VPMM_PYTHON, python3 by default, imports torch when CMake "
                 "configures the build: bench/CMakeLists.txt)");
        goto fail;
#endif
    } else {
        snprintf(err, errlen, "unknown backend '%s' (expected %s)", name, backend_names());
        goto fail;
    }
    if (make_streams(b, stream_ids, cuda) != 0) {
        snprintf(err, errlen, "%s", b->err[0] ? b->err : "out of memory");
        goto fail;
    }
    *out = b;
    return 0;
fail:
    backend_close(b);
    return -1;
}

backend_rc_t backend_malloc(backend_t *b, size_t size, size_t stream, void **out)
{
    switch (b->kind) {
    case K_VPMM: {
        vpmm_status_t st = vpmm_malloc(b->pool, size, b->streams[stream], out);
        if (st == VPMM_SUCCESS)
            return BACKEND_OK;
        snprintf(b->err, sizeof b->err, "%s: %s", vpmm_strerror(st), vpmm_last_error());
        return st == VPMM_ERROR_OUT_OF_MEMORY ? BACKEND_OOM : BACKEND_ERROR;
    }
    case K_ASYNC: {
        cudaError_t e = cudaMallocAsync(out, size, (cudaStream_t)b->streams[stream]);
        if (e == cudaSuccess)
            return BACKEND_OK;
        cuda_fail(b, "cudaMallocAsync", e);
        return e == cudaErrorMemoryAllocation ? BACKEND_OOM : BACKEND_ERROR;
    }
    case K_MALLOC: {
        cudaError_t e = cudaMalloc(out, size);
        if (e == cudaSuccess)
            return BACKEND_OK;
        cuda_fail(b, "cudaMalloc", e);
        return e == cudaErrorMemoryAllocation ? BACKEND_OOM : BACKEND_ERROR;
    }
    case K_TORCH:
#ifdef VPMM_BENCH_HAVE_TORCH
        return torch_rc(torch_backend_malloc(b->torch, size, (void *)b->streams[stream], out,
                                             b->err, sizeof b->err));
#endif
        break;
    }
    return BACKEND_ERROR;
}

backend_rc_t backend_free(backend_t *b, void *p, size_t size, size_t stream)
{
    (void)size;
    switch (b->kind) {
    case K_VPMM: {
        vpmm_status_t st = vpmm_free(b->pool, p);
        if (st == VPMM_SUCCESS)
            return BACKEND_OK;
        snprintf(b->err, sizeof b->err, "%s: %s", vpmm_strerror(st), vpmm_last_error());
        return BACKEND_ERROR;
    }
    case K_ASYNC: {
        cudaError_t e = cudaFreeAsync(p, (cudaStream_t)b->streams[stream]);
        return e == cudaSuccess ? BACKEND_OK : (cuda_fail(b, "cudaFreeAsync", e), BACKEND_ERROR);
    }
    case K_MALLOC: {
        cudaError_t e = cudaFree(p);
        return e == cudaSuccess ? BACKEND_OK : (cuda_fail(b, "cudaFree", e), BACKEND_ERROR);
    }
    case K_TORCH:
#ifdef VPMM_BENCH_HAVE_TORCH
        return torch_rc(torch_backend_free(b->torch, p, b->err, sizeof b->err));
#endif
        break;
    }
    return BACKEND_ERROR;
}

static int on_device(const backend_t *b)
{
    return b->kind != K_VPMM || strcmp(b->name, "vpmm/cuda") == 0;
}

/* --verify's pattern: every byte of a block is its size's low byte, salted. */
static unsigned char pattern_of(size_t size)
{
    return (unsigned char)(size * 131 + 7);
}

backend_rc_t backend_after_malloc(backend_t *b, void *p, size_t size, size_t stream)
{
    b->live += size;
    if (b->kind == K_MALLOC) {
        size_t fr, total;
        if (cudaMemGetInfo(&fr, &total) == cudaSuccess && fr < b->min_free)
            b->min_free = fr;
    }
    if (!b->verify)
        return BACKEND_OK;
    if (on_device(b)) {
        cudaError_t e =
            cudaMemsetAsync(p, pattern_of(size), size, (cudaStream_t)b->streams[stream]);
        if (e != cudaSuccess)
            return cuda_fail(b, "cudaMemsetAsync", e), BACKEND_ERROR;
    } else {
        memset(p, pattern_of(size), size);
    }
    return BACKEND_OK;
}

backend_rc_t backend_before_free(backend_t *b, void *p, size_t size, size_t stream)
{
    unsigned char head[4096], tail[4096];
    size_t n = size < sizeof head ? size : sizeof head;
    b->live -= size;
    if (!b->verify)
        return BACKEND_OK;
    if (on_device(b)) {
        cudaStream_t s = (cudaStream_t)b->streams[stream];
        cudaError_t e = cudaMemcpyAsync(head, p, n, cudaMemcpyDeviceToHost, s);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(tail, (char *)p + size - n, n, cudaMemcpyDeviceToHost, s);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(s);
        if (e != cudaSuccess)
            return cuda_fail(b, "verify copy", e), BACKEND_ERROR;
    } else {
        memcpy(head, p, n);
        memcpy(tail, (char *)p + size - n, n);
    }
    for (size_t i = 0; i < n; i++) {
        if (head[i] != pattern_of(size) || tail[i] != pattern_of(size)) {
            snprintf(b->err, sizeof b->err, "verify: block %p (%zu bytes) corrupted", p, size);
            return BACKEND_ERROR;
        }
    }
    return BACKEND_OK;
}

/* Holes followed by something in their chunk: VA fragmentation, not the unused tail. */
typedef struct hole_sum {
    uint64_t holes, pending;
    uintptr_t chunk;
} hole_sum_t;

static int sum_holes(const vpmm_region_info_t *r, void *user)
{
    hole_sum_t *h = user;
    if (h->pending && r->chunk_base == h->chunk)
        h->holes += h->pending;
    h->pending = r->state == VPMM_REGION_HOLE ? r->size : 0;
    h->chunk = r->chunk_base;
    return 0;
}

void backend_sample(backend_t *b, backend_sample_t *out)
{
    memset(out, 0, sizeof *out);
    out->live = b->live;
    if (b->kind == K_VPMM) {
        vpmm_stats_t s;
        hole_sum_t h = { 0, 0, 0 };
        vpmm_get_stats(b->pool, &s);
        out->live = s.live_bytes;
        out->device = s.mapped_bytes;
        out->free = s.free_bytes;
        vpmm_pool_walk(b->pool, sum_holes, &h);
        out->holes = h.holes;
    } else if (b->kind == K_ASYNC) {
        uint64_t reserved = 0;
        cudaMemPoolGetAttribute(b->mempool, cudaMemPoolAttrReservedMemCurrent, &reserved);
        out->device = reserved;
    } else if (b->kind == K_TORCH) {
#ifdef VPMM_BENCH_HAVE_TORCH
        torch_backend_sample(b->torch, &out->live, &out->device);
#endif
    } else {
        size_t fr, total;
        if (cudaMemGetInfo(&fr, &total) == cudaSuccess)
            out->device = b->free0 > fr ? b->free0 - fr : 0;
    }
}

void backend_sample_cheap(backend_t *b, backend_sample_t *out)
{
    memset(out, 0, sizeof *out);
    out->live = b->live;
    if (b->kind == K_VPMM) {
        vpmm_stats_t s;
        vpmm_get_stats(b->pool, &s);
        out->live = s.live_bytes;
        out->device = s.mapped_bytes;
    } else {
        backend_sample(b, out);
    }
}

int backend_page_counters(backend_t *b, uint64_t *created, uint64_t *remapped, size_t *page_size)
{
    vpmm_stats_t s;
    if (b->kind != K_VPMM || vpmm_get_stats(b->pool, &s) != VPMM_SUCCESS)
        return 0;
    *created = s.pages_created;
    *remapped = s.pages_remapped;
    *page_size = s.page_size;
    return 1;
}

void backend_finish(backend_t *b, backend_result_t *out)
{
    memset(out, 0, sizeof *out);
    if (on_device(b))
        cudaDeviceSynchronize();
    if (b->kind == K_VPMM) {
        vpmm_get_stats(b->pool, &out->vpmm);
        out->have_vpmm_stats = 1;
        out->peak_device = out->vpmm.peak_mapped_bytes;
        out->have_driver_stats = vpmm_driver_stats(b->pool, &out->driver) == VPMM_SUCCESS;
    } else if (b->kind == K_ASYNC) {
        uint64_t high = 0;
        cudaMemPoolGetAttribute(b->mempool, cudaMemPoolAttrReservedMemHigh, &high);
        out->peak_device = high;
    } else if (b->kind == K_TORCH) {
#ifdef VPMM_BENCH_HAVE_TORCH
        out->peak_device = torch_backend_peak_reserved(b->torch);
#endif
    } else {
        out->peak_device = b->free0 - b->min_free;
    }
}

void backend_close(backend_t *b)
{
    if (b == NULL)
        return;
    if (b->pool != NULL && vpmm_pool_destroy(b->pool) != VPMM_SUCCESS)
        fprintf(stderr, "vpmm_pool_destroy: %s\n", vpmm_last_error());
    if (b->kind == K_ASYNC && b->mempool != NULL) {
        cudaDeviceSynchronize();
        cudaMemPoolTrimTo(b->mempool, 0);
    }
#ifdef VPMM_BENCH_HAVE_TORCH
    torch_backend_close(b->torch); /* before the streams its blocks were allocated on */
#endif
    if (b->own_streams)
        for (size_t i = 0; i < b->nstreams; i++)
            if (b->streams[i] != NULL)
                cudaStreamDestroy((cudaStream_t)b->streams[i]);
    free(b->streams);
    free(b);
}
