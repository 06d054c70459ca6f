/*
 * torch_adapter_ipc.c — CUDA IPC for vpmm's PyTorch CUDAAllocator (contracts in torch_adapter.h):
 * shareIpcHandle's export, getIpcDevPtr's open and its deleter's close, the handles of other
 * allocators told apart and refused by name.
 *
 * A handle is vpmm_ipc_export's bytes, its offset the pointer's from the allocation's start.
 * vpmm counts one share per export, which one open in the consumer takes over and its close
 * ends; torch.multiprocessing's consumer opens a handle only when it does not hold the storage
 * already (its cache), so each device keeps the handles open here (d->ipc) and vta_ipc_release
 * ends the share of a send that found the storage cached (INTERFACE.md §9.3).
 *
 * Thread-safety: d->lock guards d->ipc and the counters. The order that makes vta_ipc_release
 * safe without holding d->lock across a blocking call: a close forgets its open here (under
 * d->lock) *before* vpmm_ipc_close, so an open this table counts is always open in vpmm too; a
 * release holds d->lock across its vpmm_ipc_open / vpmm_ipc_close pair, which then neither maps
 * nor waits (the allocation is open, and not for the last time).
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
    st = vpmm_ipc_export(d->pool, (const void *)base, buf, cap, &n);
    if (st == VPMM_ERROR_INVALID_ARGUMENT && n > cap) { /* a bound too small: once more */
        unsigned char *more = realloc(buf, n);
        if (more == NULL) {
            free(buf);
            return VPMM_ERROR_HOST_OUT_OF_MEMORY;
        }
        buf = more;
        st = vpmm_ipc_export(d->pool, (const void *)base, buf, n, &n);
    }
    if (st != VPMM_SUCCESS) {
        free(buf);
        return st;
    }
    *out = buf;
    *len = n;
    *offset = (uintptr_t)ptr - base;
    return VPMM_SUCCESS;
}

/* The entry of d->ipc opened through these bytes, or NULL. Under d->lock. */
static vta_ipc_open_t *ipc_by_bytes(vta_device_t *d, const void *bytes, size_t len)
{
    for (size_t i = 0; i < d->nipc; i++)
        if (d->ipc[i].len == len && memcmp(d->ipc[i].bytes, bytes, len) == 0)
            return &d->ipc[i];
    return NULL;
}

vpmm_status_t vta_ipc_open(vta_device_t *d, const void *handle, size_t len, void **out)
{
    unsigned char *copy;
    vta_ipc_open_t *e;
    vpmm_status_t st;
    void *p = NULL;

    *out = NULL;
    if (vta_ipc_kind(handle, len) != VTA_IPC_VPMM)
        return VPMM_ERROR_INVALID_ARGUMENT; /* vta_ipc_refusal says what it is */
    copy = malloc(len);
    if (copy == NULL)
        return VPMM_ERROR_HOST_OUT_OF_MEMORY;
    memcpy(copy, handle, len);
    st = vpmm_ipc_open(d->pool, handle, len, &p); /* may map: not under d->lock */
    if (st != VPMM_SUCCESS) {
        free(copy);
        return st;
    }
    pthread_mutex_lock(&d->lock);
    e = ipc_by_bytes(d, handle, len);
    if (e == NULL && d->nipc == d->ipc_cap) {
        size_t cap = d->ipc_cap ? d->ipc_cap * 2 : 8;
        vta_ipc_open_t *t = realloc(d->ipc, cap * sizeof *t);
        if (t == NULL) {
            pthread_mutex_unlock(&d->lock);
            free(copy);
            (void)vpmm_ipc_close(d->pool, p);
            return VPMM_ERROR_HOST_OUT_OF_MEMORY;
        }
        d->ipc = t;
        d->ipc_cap = cap;
    }
    if (e == NULL) {
        e = &d->ipc[d->nipc++];
        *e = (vta_ipc_open_t){ copy, len, p, 0 };
        copy = NULL;
    }
    e->opens++;
    d->ipc_open_calls++;
    pthread_mutex_unlock(&d->lock);
    free(copy);
    *out = p;
    return VPMM_SUCCESS;
}

vpmm_status_t vta_ipc_close(vta_device_t *d, void *ptr)
{
    vpmm_status_t st;
    /* Forgotten here first (see the head comment): an open this table counts is open in vpmm. */
    pthread_mutex_lock(&d->lock);
    for (size_t i = 0; i < d->nipc; i++) {
        vta_ipc_open_t *e = &d->ipc[i];
        if (e->ptr != ptr || e->opens == 0)
            continue;
        if (--e->opens == 0) {
            free(e->bytes);
            *e = d->ipc[--d->nipc];
        }
        break;
    }
    pthread_mutex_unlock(&d->lock);
    st = vpmm_ipc_close(d->pool, ptr); /* the last close waits for the device */
    if (st == VPMM_SUCCESS) {
        pthread_mutex_lock(&d->lock);
        d->ipc_close_calls++;
        pthread_mutex_unlock(&d->lock);
    }
    return st;
}

vpmm_status_t vta_ipc_release(vta_device_t *d, const void *handle, size_t len, int *released)
{
    vta_ipc_open_t *e;
    vpmm_status_t st = VPMM_SUCCESS;
    void *p = NULL;

    *released = 0;
    if (vta_ipc_kind(handle, len) != VTA_IPC_VPMM)
        return VPMM_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&d->lock);
    e = ipc_by_bytes(d, handle, len);
    if (e != NULL && e->opens > 0) {
        /* Open here, and not closed meanwhile (a close needs d->lock first): vpmm's open finds
         * the mapping and its close is not the last one, so neither maps nor waits. */
        st = vpmm_ipc_open(d->pool, handle, len, &p);
        if (st == VPMM_SUCCESS)
            st = vpmm_ipc_close(d->pool, p); /* ends one share */
        if (st == VPMM_SUCCESS) {
            *released = 1;
            d->ipc_releases++;
        }
    }
    pthread_mutex_unlock(&d->lock);
    return st;
}

void vta_ipc_counts(vta_device_t *d, uint64_t *open_calls, uint64_t *close_calls,
                    uint64_t *releases, size_t *open_now)
{
    size_t now = 0;
    pthread_mutex_lock(&d->lock);
    for (size_t i = 0; i < d->nipc; i++)
        now += (size_t)d->ipc[i].opens;
    if (open_calls != NULL)
        *open_calls = d->ipc_open_calls;
    if (close_calls != NULL)
        *close_calls = d->ipc_close_calls;
    if (releases != NULL)
        *releases = d->ipc_releases;
    if (open_now != NULL)
        *open_now = now;
    pthread_mutex_unlock(&d->lock);
}
