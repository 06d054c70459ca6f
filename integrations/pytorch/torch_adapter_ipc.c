/*
 * torch_adapter_ipc.c — CUDA IPC for vpmm's PyTorch CUDAAllocator (contracts in torch_adapter.h):
 * shareIpcHandle's export, getIpcDevPtr's open and its deleter's close, the handles of other
 * allocators told apart and refused by name, and the shares a free ends.
 *
 * A handle is vpmm_ipc_export's bytes, its offset the pointer's from the allocation's start.
 * vpmm counts one share per export, which one open in the consumer takes over and its close
 * ends. torch.multiprocessing's consumer opens a handle only when it does not hold the storage
 * already (its cache), so a send that finds it there leaves its share open; PyTorch frees the
 * producer's block only once every consumer has released it (INTERFACE.md §9.3). So each device
 * keeps the allocations it exported (d->exported, sorted) and their free ends the shares left
 * (vpmm_ipc_unshare, in vta_free_known): the memory is reused at once, as with PyTorch's own
 * allocator.
 *
 * Thread-safety: d->lock guards d->exported and the counters. An export holds it across
 * vpmm_ipc_export, so that the room for the table's entry is made before anything is exported
 * and the entry is added after (no export a free would miss, none that host memory could make
 * unrecorded); d->nexported is also read without it (a relaxed atomic load: zero, and a free
 * looks no further). Lock order: d->lock, then the pool's lock (inside vpmm).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torch_adapter.h"

#define VPMM_WIRE_MAGIC     "vpmmIPC1" /* the first bytes vpmm_ipc_export writes */
#define NATIVE_VERSION      2          /* PyTorch's SHAREABLE_HANDLE_VERSION */
#define CUDA_IPC_HANDLE_LEN 64         /* sizeof(cudaIpcMemHandle_t) */

vta_ipc_kind_t vta_ipc_kind(const void *bytes, size_t len)
{
    const unsigned char *b = bytes;
    if (b == NULL)
        return VTA_IPC_UNKNOWN;
    if (len >= 8 && memcmp(b, VPMM_WIRE_MAGIC, 8) == 0)
        return VTA_IPC_VPMM;
    if (len == CUDA_IPC_HANDLE_LEN) /* what PyTorch itself takes for a bare handle */
        return VTA_IPC_LEGACY;
    if (len >= 2 && b[0] == NATIVE_VERSION && b[1] == 'c')
        return VTA_IPC_NATIVE_CUDA_MALLOC;
    if (len >= 2 && b[0] == NATIVE_VERSION && b[1] == 'e')
        return VTA_IPC_NATIVE_EXPANDABLE;
    return VTA_IPC_UNKNOWN;
}

const char *vta_ipc_refusal(const void *bytes, size_t len, char *buf, size_t cap)
{
    static const char enable[] =
        "vpmm opens only handles of vpmm memory: enable vpmm in the producing process too "
        "(vpmm.torch.enable() before CUDA starts there, or VPMM_TORCH_ENABLE=1 with "
        "integrations/pytorch/autoenable on PYTHONPATH), or run this process on PyTorch's "
        "native allocator";
    const unsigned char *b = bytes;
    switch (vta_ipc_kind(bytes, len)) {
    case VTA_IPC_VPMM:
        snprintf(buf, cap, "a vpmm IPC handle (%zu bytes)", len);
        break;
    case VTA_IPC_NATIVE_CUDA_MALLOC:
        snprintf(buf, cap,
                 "this CUDA IPC handle was made by PyTorch's native CUDA allocator, not by vpmm "
                 "(format version 2, type 'c': the cudaIpcMemHandle_t of a cudaMalloc segment, "
                 "%zu bytes); %s",
                 len, enable);
        break;
    case VTA_IPC_NATIVE_EXPANDABLE:
        snprintf(buf, cap,
                 "this CUDA IPC handle was made by PyTorch's native CUDA allocator with "
                 "expandable_segments:True, not by vpmm (format version 2, type 'e': an "
                 "expandable segment's memory handles, %zu bytes); %s",
                 len, enable);
        break;
    case VTA_IPC_LEGACY:
        snprintf(buf, cap,
                 "this CUDA IPC handle is a bare 64-byte cudaIpcMemHandle_t (PyTorch before 2.5, "
                 "or cudaIpcGetMemHandle of cudaMalloc memory), not vpmm's; %s",
                 enable);
        break;
    default:
        snprintf(buf, cap,
                 "this CUDA IPC handle (%zu bytes, starting 0x%02x 0x%02x) is neither vpmm's (it "
                 "starts with \"" VPMM_WIRE_MAGIC "\") nor PyTorch's native allocator's: it "
                 "cannot be opened",
                 len, len > 0 && b ? b[0] : 0u, len > 1 && b ? b[1] : 0u);
        break;
    }
    return buf;
}

/* Where ptr is or would go in d->exported (sorted). Under d->lock. */
static size_t exported_at(const vta_device_t *d, uintptr_t ptr)
{
    size_t lo = 0, hi = d->nexported;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (d->exported[mid] < ptr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Room for one more entry in d->exported. Under d->lock. */
static vpmm_status_t exported_room(vta_device_t *d)
{
    return VTA_GROW(d->exported, d->exported_cap, d->nexported + 1, 16) != 0
               ? VPMM_ERROR_HOST_OUT_OF_MEMORY
               : VPMM_SUCCESS;
}

/* Adds ptr to d->exported (room made: exported_room), once. Under d->lock. */
static void exported_add(vta_device_t *d, uintptr_t ptr)
{
    size_t i = exported_at(d, ptr);
    if (i < d->nexported && d->exported[i] == ptr)
        return;
    memmove(&d->exported[i + 1], &d->exported[i], (d->nexported - i) * sizeof *d->exported);
    d->exported[i] = ptr;
    __atomic_store_n(&d->nexported, d->nexported + 1, __ATOMIC_RELAXED);
}

int vta_i_exported_forget(vta_device_t *d, const void *ptr)
{
    size_t i;
    int found;
    pthread_mutex_lock(&d->lock);
    i = exported_at(d, (uintptr_t)ptr);
    found = i < d->nexported && d->exported[i] == (uintptr_t)ptr;
    if (found) {
        memmove(&d->exported[i], &d->exported[i + 1], (d->nexported - i - 1) * sizeof *d->exported);
        __atomic_store_n(&d->nexported, d->nexported - 1, __ATOMIC_RELAXED);
        d->ipc_unshares++;
    }
    pthread_mutex_unlock(&d->lock);
    return found;
}

vpmm_status_t vta_ipc_export(vta_device_t *d, const void *ptr, unsigned char **out, size_t *len,
                             size_t *offset)
{
    vpmm_region_info_t info;
    uintptr_t base = (uintptr_t)ptr;
    unsigned char *buf;
    size_t cap, n = 0;
    vpmm_status_t st;

    *out = NULL;
    *len = 0;
    *offset = 0;
    st = vpmm_pointer_info(d->pool, ptr, &info);
    if (st != VPMM_SUCCESS)
        return st;
    if (info.state == VPMM_REGION_ALLOCATED)
        base = info.addr; /* else vpmm_ipc_export says what ptr is */
    cap = VPMM_IPC_HANDLE_BYTES(info.size, d->page_size ? d->page_size : VPMM_ALIGNMENT);
    buf = malloc(cap);
    if (buf == NULL)
        return VPMM_ERROR_HOST_OUT_OF_MEMORY;
    pthread_mutex_lock(&d->lock);
    st = exported_room(d);
    if (st == VPMM_SUCCESS)
        st = vpmm_ipc_export(d->pool, (const void *)base, buf, cap, &n);
    if (st == VPMM_ERROR_INVALID_ARGUMENT && n > cap) { /* a bound too small: once more */
        unsigned char *more = realloc(buf, n);
        if (more == NULL) {
            st = VPMM_ERROR_HOST_OUT_OF_MEMORY;
        } else {
            buf = more;
            st = vpmm_ipc_export(d->pool, (const void *)base, buf, n, &n);
        }
    }
    if (st == VPMM_SUCCESS)
        exported_add(d, base);
    pthread_mutex_unlock(&d->lock);
    if (st != VPMM_SUCCESS) {
        free(buf);
        return st;
    }
    *out = buf;
    *len = n;
    *offset = (uintptr_t)ptr - base;
    return VPMM_SUCCESS;
}

vpmm_status_t vta_ipc_open(vta_device_t *d, const void *handle, size_t len, void **out)
{
    vpmm_status_t st;
    *out = NULL;
    if (vta_ipc_kind(handle, len) != VTA_IPC_VPMM)
        return VPMM_ERROR_INVALID_ARGUMENT;        /* vta_ipc_refusal says what it is */
    st = vpmm_ipc_open(d->pool, handle, len, out); /* may map: not under d->lock */
    if (st == VPMM_SUCCESS) {
        pthread_mutex_lock(&d->lock);
        d->ipc_open_calls++;
        pthread_mutex_unlock(&d->lock);
    }
    return st;
}

vpmm_status_t vta_ipc_close(vta_device_t *d, void *ptr)
{
    vpmm_status_t st = vpmm_ipc_close(d->pool, ptr); /* the last close waits for the device */
    if (st == VPMM_SUCCESS) {
        pthread_mutex_lock(&d->lock);
        d->ipc_close_calls++;
        pthread_mutex_unlock(&d->lock);
    }
    return st;
}

void vta_ipc_counts(vta_device_t *d, uint64_t *open_calls, uint64_t *close_calls,
                    uint64_t *unshares, size_t *open_now, size_t *exported_now)
{
    pthread_mutex_lock(&d->lock);
    if (open_calls != NULL)
        *open_calls = d->ipc_open_calls;
    if (close_calls != NULL)
        *close_calls = d->ipc_close_calls;
    if (unshares != NULL)
        *unshares = d->ipc_unshares;
    if (open_now != NULL)
        *open_now = (size_t)(d->ipc_open_calls - d->ipc_close_calls);
    if (exported_now != NULL)
        *exported_now = d->nexported;
    pthread_mutex_unlock(&d->lock);
}
