/*
 * devices.c — the public entry points for more than one device and more than one process:
 * vpmm_pool_device, vpmm_pool_grant_access (peer access, core/peer.c) and vpmm_ipc_export /
 * vpmm_ipc_open / vpmm_ipc_close (CUDA IPC: core/share.c exports, core/import.c maps).
 *
 * This floor validates what the caller passed, takes the pool lock and calls down; the core does
 * the work transactionally (a refused call leaves the pool as it was). Thread-safe: every call
 * holds the pool lock for its bookkeeping and driver calls.
 */
#include "api.h"
#include "peer.h"
#include "share.h"
#include "region.h"

vpmm_status_t vpmm_pool_device(const vpmm_pool_t *pool, int *out_device)
{
    if (pool == NULL || out_device == NULL) {
        vpmm_i_set_error("vpmm_pool_device: %s is NULL", pool == NULL ? "pool" : "out_device");
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    *out_device = pool->drv->device; /* set at open, never changed: no lock */
    return VPMM_SUCCESS;
}

vpmm_status_t vpmm_pool_grant_access(vpmm_pool_t *pool, int device)
{
    vpmm_status_t st = VPMM_SUCCESS;
    vpmm_driver_t *d;
    if (pool == NULL)
        return vpmm_a_null("vpmm_pool_grant_access", "pool");
    d = pool->drv;
    if (device < 0 || device >= d->device_count) {
        vpmm_i_set_error("vpmm_pool_grant_access: device %d does not exist (the %s backend sees "
                         "%d device%s)",
                         device, d->name, d->device_count, d->device_count == 1 ? "" : "s");
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    if (!((d->peer_capable >> device) & 1)) {
        vpmm_i_set_error("vpmm_pool_grant_access: device %d cannot access device %d's memory "
                         "(no peer access between them)",
                         device, d->device);
        return VPMM_ERROR_NOT_SUPPORTED;
    }
    vpmm_i_lock(pool);
    if (!vpmm_i_peer_granted(pool, device))
        st = vpmm_i_peer_grant(pool, device);
    vpmm_i_unlock(pool);
    return st;
}

vpmm_status_t vpmm_ipc_export(vpmm_pool_t *pool, const void *ptr, void *buf, size_t cap,
                              size_t *out_len)
{
    vpmm_region_t *r;
    vpmm_status_t st;
    /* *out_len is written only with the handle's length (or the length a too-small buffer
     * lacked): untouched on every other error, as every output of a refused call. */
    if (pool == NULL || ptr == NULL) {
        vpmm_i_set_error("vpmm_ipc_export: %s is NULL", pool == NULL ? "pool" : "ptr");
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    vpmm_i_lock(pool);
    r = vpmm_hmap_get(&pool->allocs, (uintptr_t)ptr);
    if (r == NULL)
        st = vpmm_i_bad_pointer(pool, (void *)ptr, "vpmm_ipc_export");
    else
        st = vpmm_i_share_export(pool, r, buf, cap, out_len);
    vpmm_i_unlock(pool);
    return st;
}

vpmm_status_t vpmm_ipc_unshare(vpmm_pool_t *pool, const void *ptr)
{
    vpmm_region_t *r;
    vpmm_status_t st = VPMM_SUCCESS;
    if (pool == NULL || ptr == NULL) {
        vpmm_i_set_error("vpmm_ipc_unshare: %s is NULL", pool == NULL ? "pool" : "ptr");
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    vpmm_i_lock(pool);
    r = vpmm_hmap_get(&pool->allocs, (uintptr_t)ptr);
    if (r == NULL)
        st = vpmm_i_bad_pointer(pool, (void *)ptr, "vpmm_ipc_unshare");
    else
        vpmm_i_share_end_all(pool, r);
    vpmm_i_unlock(pool);
    return st;
}

vpmm_status_t vpmm_ipc_open(vpmm_pool_t *pool, const void *handle, size_t len, void **out_ptr)
{
    vpmm_status_t st;
    if (out_ptr != NULL)
        *out_ptr = NULL;
    if (pool == NULL || handle == NULL || out_ptr == NULL) {
        vpmm_i_set_error("vpmm_ipc_open: %s is NULL", pool == NULL     ? "pool"
                                                      : handle == NULL ? "handle"
                                                                       : "out_ptr");
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    vpmm_i_lock(pool);
    st = vpmm_i_import_open(pool, handle, len, out_ptr);
    vpmm_i_unlock(pool);
    return st;
}

vpmm_status_t vpmm_ipc_close(vpmm_pool_t *pool, void *ptr)
{
    vpmm_status_t st;
    if (pool == NULL || ptr == NULL) {
        vpmm_i_set_error("vpmm_ipc_close: %s is NULL", pool == NULL ? "pool" : "ptr");
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    vpmm_i_lock(pool);
    st = vpmm_i_import_close(pool, ptr);
    vpmm_i_unlock(pool);
    return st;
}
