/*
 * backends.h — the allocators vpmm-replay and the benchmarks can drive, behind one interface:
 *
 *   host             vpmm on its host emulation backend (no GPU needed)
 *   cuda             vpmm on the CUDA backend
 *   cudaMallocAsync  the CUDA default memory pool, release threshold at max (nothing given back)
 *   cudaMalloc       plain cudaMalloc / cudaFree
 *   torch            PyTorch's CUDA caching allocator, its defaults ("torch/native")
 *   torch-expandable the same with expandable segments ("torch/expandable")
 *
 * The two PyTorch anchors (backend_torch.cpp: raw_alloc_with_stream / raw_delete) exist only in a
 * vpmm-replay built where PyTorch is found; elsewhere backend_open refuses them, saying so. Each
 * backend reports the peak device memory it held, by its own accounting: vpmm its peak mapped
 * bytes (every page, small allocations included — nothing is bypassed); cudaMallocAsync the pool's
 * reserved-memory high-water mark; PyTorch's allocator its reserved bytes' high-water mark
 * (max_memory_reserved); cudaMalloc the largest drop of cudaMemGetInfo's free memory, sampled
 * after every allocation outside the timed region. Not thread-safe.
 */
#ifndef VPMM_BENCH_BACKENDS_H
#define VPMM_BENCH_BACKENDS_H

#include <stddef.h>
#include <stdint.h>

#include "vpmm.h"

typedef struct backend backend_t;

typedef enum backend_rc { BACKEND_OK = 0, BACKEND_OOM = 1, BACKEND_ERROR = -1 } backend_rc_t;

/* A point on the memory timeline. */
typedef struct backend_sample {
    uint64_t live;   /* bytes the program has allocated (the backend's view when it has one) */
    uint64_t device; /* device memory held right now */
    uint64_t free;   /* held but not allocated (vpmm only) */
    uint64_t holes;  /* VA holes between mapped regions (vpmm only; the unused tail is not one) */
} backend_sample_t;

typedef struct backend_result {
    uint64_t peak_device;
    int have_vpmm_stats;
    vpmm_stats_t vpmm; /* when have_vpmm_stats */
    int have_driver_stats;
    vpmm_driver_stats_t driver; /* when have_driver_stats (vpmm opened with BACKEND_DRIVER_STATS) */
} backend_result_t;

/* backend_open's flags. */
enum {
    BACKEND_VERIFY = 1,       /* write a pattern into every allocation, check it before the free */
    BACKEND_DRIVER_STATS = 2, /* vpmm: count and time its driver calls (config.driver_stats) */
};

/* Known names, for messages: "host, cuda, cudaMallocAsync, cudaMalloc", then "torch,
 * torch-expandable" where they are built in. */
const char *backend_names(void);
/* Whether name is a backend at all (the anchors torch and torch-expandable included, built in or
 * not): an unknown name is a usage error (exit 1), a known one this build or machine cannot open
 * is "backend unavailable" (exit 2). */
int backend_known(const char *name);

/* The tools' default: "cuda", as the library's (the host emulation only when asked for). */
const char *backend_default(void);

/*
 * Opens a backend with nstreams streams (index 0 is the legacy default stream when the trace's
 * first stream is 0, see replay.c). flags: BACKEND_VERIFY writes a pattern into every allocation
 * and checks it before the free (touches every page); BACKEND_DRIVER_STATS makes a vpmm pool keep
 * its driver calls by kind (backend_finish reports them). Returns 0, or -1 with a message in err.
 */
int backend_open(const char *name, size_t nstreams, const uint64_t *stream_ids, int flags,
                 backend_t **out, char *err, size_t errlen);

/* The backend's display name ("vpmm/host", "cudaMallocAsync", "torch/native", ...). */
const char *backend_name(const backend_t *b);

/* The timed calls. malloc fills *out or returns BACKEND_OOM / BACKEND_ERROR. */
backend_rc_t backend_malloc(backend_t *b, size_t size, size_t stream, void **out);
backend_rc_t backend_free(backend_t *b, void *p, size_t size, size_t stream);

/* Untimed bookkeeping after a malloc (cudaMalloc's memory sampling, --verify's fill). */
backend_rc_t backend_after_malloc(backend_t *b, void *p, size_t size, size_t stream);
/* Untimed check before a free (--verify). */
backend_rc_t backend_before_free(backend_t *b, void *p, size_t size, size_t stream);

void backend_sample(backend_t *b, backend_sample_t *out);
/* Only live and device bytes (cheap enough to call after every operation). */
void backend_sample_cheap(backend_t *b, backend_sample_t *out);
/* vpmm only: the pool's pages created and remapped so far (what its slow paths did). Returns 0
 * (counters untouched) for every other backend. Untimed: vpmm_get_stats takes the pool lock. */
int backend_page_counters(backend_t *b, uint64_t *created, uint64_t *remapped, size_t *page_size);
/* Waits for the device, then fills the result. */
void backend_finish(backend_t *b, backend_result_t *out);
void backend_close(backend_t *b);

/* The last error message of the backend (vpmm_last_error or cudaGetErrorString). */
const char *backend_error(const backend_t *b);

#endif /* VPMM_BENCH_BACKENDS_H */
