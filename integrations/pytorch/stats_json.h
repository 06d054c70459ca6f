/*
 * stats_json.h — a pool's vpmm_stats_t as one JSON object, for the Python sides of both PyTorch
 * plug-ins (vpmm_torch.c's vpmm_torch_stats_json, vpmm_cuda_allocator.cpp's
 * vpmm_torch_backend_stats_json): Python reads it with json.loads instead of mirroring the C
 * struct in ctypes. Field names are vpmm_stats_t's.
 */
#ifndef VPMM_STATS_JSON_H
#define VPMM_STATS_JSON_H

#include <stddef.h>

#include "vpmm.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Writes {"device":N,"backend":"...",<every vpmm_stats_t field>[,extra]} into buf (cap bytes,
 * vpmm_stats_t's own device as "pool_device", and its peers mask also as "peer_devices":[k,...],
 * always NUL-terminated when cap > 0; buf may be NULL with cap 0). extra (NULL or "") is more
 * members, written verbatim before the closing brace, e.g. "\"alloc_failures\":0". Returns the
 * length the whole text needs, without the NUL, as snprintf does: a result >= cap means it was
 * cut short.
 */
size_t vpmm_stats_json(const vpmm_stats_t *s, int device, const char *backend, const char *extra,
                       char *buf, size_t cap);

#ifdef __cplusplus
}
#endif

#endif
