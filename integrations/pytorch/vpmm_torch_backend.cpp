/*
 * vpmm_torch_backend.cpp — the functions libvpmm_torch_backend.so exports (vpmm_torch_backend_*,
 * vpmm_torch_backend.map), which the Python package vpmm.torch calls through ctypes: install the
 * allocator, and read or act on one device's pool (trim, dump, check, statistics as JSON). Plain
 * C entry points over vpmm_backend.h; no PyTorch header, no exception leaves them.
 *
 * Threads: any (what they call is thread-safe: vpmm, the adapter, the allocator's accessors).
 */
#include <cstdio>
#include <cstdlib>

extern "C" {
#include "stats_json.h"
#include "torch_adapter.h"
}
#include "vpmm_backend.h"

#define VPMM_EXPORT extern "C" __attribute__((visibility("default")))

/*
 * Makes vpmm PyTorch's CUDA allocator: 0, or -1 with the reason in err. VPMM_TORCH_SEGMENTS (which
 * segments snapshot() lists: INTERFACE.md §10) is read here; a bad value is refused before
 * anything is installed.
 */
VPMM_EXPORT int vpmm_torch_backend_install(char *err, size_t len)
{
    const char *mode_text = std::getenv("VPMM_TORCH_SEGMENTS");
    vta_segments_mode_t mode = VTA_SEGMENTS_AUTO;
    if (vta_segments_mode_parse(mode_text, &mode) != 0) {
        std::snprintf(err, len,
                      "VPMM_TORCH_SEGMENTS=%s is not a known value: \"handles\" (the snapshot "
                      "lists vpmm's physical handles, what NCCL registers), \"auto\" or unset (the "
                      "handles while an allocator trace tracker is attached, else runs of "
                      "regions)",
                      mode_text);
        return -1;
    }
    try {
        std::string why = vpmm_torch::install(mode);
        if (why.empty())
            return 0;
        std::snprintf(err, len, "%s", why.c_str());
    } catch (...) { /* out of host memory for the message */
        std::snprintf(err, len, "installing the allocator failed");
    }
    return -1;
}

/* vpmm_trim of device's pool (0: every free page); the bytes given back, or -1 (no pool). */
VPMM_EXPORT long long vpmm_torch_backend_trim(int device, size_t target)
{
    size_t released = 0;
    if (vpmm_torch::pool_of(device) == nullptr)
        return -1;
    return vpmm_torch::trim(device, target, &released) == VPMM_SUCCESS
               ? static_cast<long long>(released)
               : -1;
}

/* vpmm_pool_dump of device's pool to path (stderr when NULL); -1 without a pool or file. */
VPMM_EXPORT int vpmm_torch_backend_dump(int device, const char *path)
{
    vpmm_pool_t *pool = vpmm_torch::pool_of(device);
    if (pool == nullptr)
        return -1;
    FILE *f = path && *path ? std::fopen(path, "w") : stderr;
    if (f == nullptr)
        return -1;
    int st = vpmm_pool_dump(pool, f);
    if (f != stderr)
        std::fclose(f);
    return st;
}

/* vpmm_pool_check of device's pool: the violated invariants (0), or -1 without a pool. */
VPMM_EXPORT long vpmm_torch_backend_check(int device)
{
    vpmm_pool_t *pool = vpmm_torch::pool_of(device);
    return pool ? static_cast<long>(vpmm_pool_check(pool, stderr)) : -1;
}

/* vpmm_get_stats of device's pool as JSON (stats_json.h): the length needed, or -1 without a
 * pool. */
VPMM_EXPORT long vpmm_torch_backend_stats_json(int device, char *buf, size_t cap)
{
    vpmm_pool_t *pool = vpmm_torch::pool_of(device);
    vta_device_t *v = vpmm_torch::state_of(device);
    vpmm_stats_t s;
    if (pool == nullptr || v == nullptr || vpmm_get_stats(pool, &s) != VPMM_SUCCESS)
        return -1;
    /* The adapter's side: its IPC opens and closes, the frees that ended an exported block's
     * shares, the memory fraction; the trace trackers and the snapshot's kind of segments. */
    uint64_t opens = 0, closes = 0, unshares = 0;
    size_t now = 0, exported = 0;
    vta_ipc_counts(v, &opens, &closes, &unshares, &now, &exported);
    char extra[512];
    std::snprintf(extra, sizeof extra,
                  "\"ipc_open_calls\":%llu,\"ipc_close_calls\":%llu,\"ipc_unshares\":%llu,"
                  "\"ipc_open_now\":%zu,\"ipc_exported_now\":%zu,\"memory_fraction\":%.6g,"
                  "\"trace_trackers\":%zu,\"snapshot_segments\":\"%s\"",
                  static_cast<unsigned long long>(opens), static_cast<unsigned long long>(closes),
                  static_cast<unsigned long long>(unshares), now, exported, vta_memory_fraction(v),
                  vpmm_torch::trace_trackers(),
                  vpmm_torch::snapshot_lists_handles() ? "handles" : "runs");
    return static_cast<long>(
        vpmm_stats_json(&s, device, vpmm_pool_backend_name(pool), extra, buf, cap));
}

/* The interface between this library and the Python package vpmm.torch: the package refuses a
 * backend built for another one (an older build, say, whose IPC needed a Python hook). */
VPMM_EXPORT int vpmm_torch_backend_abi(void)
{
    return 2;
}
