/*
 * vpmm_torch.h — the functions libvpmm_torch.so exports: the two that PyTorch's
 * torch.cuda.memory.CUDAPluggableAllocator calls, and extras for the Python side (ctypes) or a
 * C/C++ extension. How the plug-in works is in vpmm_torch.c's head comment; how to build and use
 * it is in integrations/pytorch/README.md.
 *
 * Every function may be called from any thread. `device` is a CUDA device ordinal (0..63); each
 * device has one vpmm pool, created by its first nonzero allocation. The extras return
 * VPMM_TORCH_NO_POOL for a device that has none yet and VPMM_TORCH_BAD_ARGS for an ordinal out
 * of range or a NULL out pointer; otherwise a vpmm_status_t (0 = VPMM_SUCCESS) unless said.
 */
#ifndef VPMM_TORCH_H
#define VPMM_TORCH_H

#include <stddef.h>

#include "vpmm.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VPMM_TORCH_API __attribute__((visibility("default")))

#define VPMM_TORCH_NO_POOL  (-1) /* nothing was allocated on that device yet */
#define VPMM_TORCH_BAD_ARGS (-2) /* device out of range, or a NULL out pointer */

/*
 * PyTorch's alloc_fn: size bytes for work on stream (PyTorch's current stream), on device (its
 * current device). NULL for size 0 (no message) and on failure (counted; the first failure is
 * printed on stderr). A capture in progress on stream is served by a vpmm graph pool.
 */
VPMM_TORCH_API void *vpmm_torch_alloc(size_t size, int device, vpmm_stream_t stream);

/* PyTorch's free_fn: frees ptr (stream-ordered on its allocation stream). NULL is a no-op. */
VPMM_TORCH_API void vpmm_torch_free(void *ptr, size_t size, int device, vpmm_stream_t stream);

/* Allocation plus free failures since the process started (0 when all went well). */
VPMM_TORCH_API unsigned long long vpmm_torch_failures(void);

/* The message printed for the first failure, or "" if there was none. Never NULL. */
VPMM_TORCH_API const char *vpmm_torch_first_error(void);

/* vpmm_get_stats of device's pool. */
VPMM_TORCH_API int vpmm_torch_stats(int device, vpmm_stats_t *out);

/*
 * device's pool statistics as one JSON object (no newline) in buf, NUL-terminated when cap > 0:
 * every vpmm_stats_t field under its own name, plus "device", "backend", "alloc_failures" and
 * "free_failures". Returns the length the whole text needs without its NUL, as snprintf does
 * (call again with a larger buffer if it is >= cap), or VPMM_TORCH_NO_POOL /
 * VPMM_TORCH_BAD_ARGS, or -100 - status if vpmm_get_stats failed.
 */
VPMM_TORCH_API long vpmm_torch_stats_json(int device, char *buf, size_t cap);

/* vpmm_pool_dump of device's pool to path (created or truncated), or to stderr when path is NULL
 * or "". -3 if path cannot be opened. */
VPMM_TORCH_API int vpmm_torch_dump(int device, const char *path);

/* vpmm_pool_check of device's pool: the number of violated invariants (0; each one is described
 * on stderr). */
VPMM_TORCH_API long vpmm_torch_check(int device);

/* vpmm_reset_peak_stats of device's pool. */
VPMM_TORCH_API int vpmm_torch_reset_peak(int device);

/* vpmm_trim on device's pool: gives free pages back until it maps at most target_bytes (0: all
 * it can). Returns the bytes given back, VPMM_TORCH_BAD_ARGS / VPMM_TORCH_NO_POOL, or -100 - the
 * vpmm_status_t of a failed trim. A PyTorch reset hook (set_reset_fn) can call it. */
VPMM_TORCH_API long long vpmm_torch_trim(int device, size_t target_bytes);

#ifdef __cplusplus
}
#endif

#endif /* VPMM_TORCH_H */
