/*
 * backend_torch.h — PyTorch's CUDA caching allocator (c10::cuda::CUDACachingAllocator, the
 * "native" one) as vpmm-replay's anchors `torch` and `torch-expandable`, behind a C interface for
 * backends.c. backend_torch.cpp is the only file that sees PyTorch's headers; it is compiled into
 * vpmm-replay only where PyTorch is found (bench/CMakeLists.txt, VPMM_BENCH_HAVE_TORCH), and no
 * C++ exception crosses these functions. Streams are the caller's cudaStream_t (NULL: the legacy
 * default stream), created on the one CUDA runtime the process has (backend_torch.cpp says why it
 * is one). Statuses are backends.h's: 0 ok, 1 out of memory, -1 error with a message in err.
 * Not thread-safe; open once per process (PyTorch reads its allocator settings once).
 */
#ifndef VPMM_BENCH_BACKEND_TORCH_H
#define VPMM_BENCH_BACKEND_TORCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct torch_backend torch_backend_t;

/*
 * Sets PyTorch's allocator up: expandable segments on (expandable != 0) or PyTorch's defaults,
 * then initialises the native allocator for every device. Refuses, with a message, when the
 * environment already configures PyTorch's allocator, when the allocator is not the native one,
 * or when the setting did not take. The CUDA context must exist already (backends.c creates it,
 * so that the first timed malloc does not pay for it). Returns 0, or -1 with a message in err.
 */
int torch_backend_open(int expandable, torch_backend_t **out, char *err, size_t errlen);

/* "torch/native" or "torch/expandable". */
const char *torch_backend_name(const torch_backend_t *t);

/* The timed calls: raw_alloc_with_stream and raw_delete, nothing else. */
int torch_backend_malloc(torch_backend_t *t, size_t size, void *stream, void **out, char *err,
                         size_t errlen);
int torch_backend_free(torch_backend_t *t, void *p, char *err, size_t errlen);

/* Allocated bytes (the rounded block sizes: torch.cuda.memory_allocated) and reserved bytes (the
 * device memory held: torch.cuda.memory_reserved), from the allocator's own statistics. */
void torch_backend_sample(torch_backend_t *t, uint64_t *live, uint64_t *device);

/* The reserved bytes' high-water mark (torch.cuda.max_memory_reserved). Call after the device is
 * synchronised. */
uint64_t torch_backend_peak_reserved(torch_backend_t *t);

/* Gives the cached memory back (torch.cuda.empty_cache) and frees t; NULL is ignored. */
void torch_backend_close(torch_backend_t *t);

#ifdef __cplusplus
}
#endif

#endif /* VPMM_BENCH_BACKEND_TORCH_H */
