/*
 * pool_base.c — the pool's small shared helpers, at the bottom of the core's call graph: the lock
 * wrappers, the driver-result-to-status step (which keeps the pool's "last driver error"), and the
 * accessors graph/ and checkpoint/ use (internal.h). Every file of the core may call them; they
 * call nothing of the core but status.c (docs/ARCHITECTURE.md, "The core's sub-layers").
 *
 * Thread-safety: vpmm_i_lock/vpmm_i_unlock take and drop the pool lock (lock.h); the others are
 * called under it. No invariant of its own.
 */
#include "pool.h"

void vpmm_i_lock(const vpmm_pool_t *p)
{
    vpmm_lock_acquire(&((vpmm_pool_t *)p)->lock);
}

void vpmm_i_unlock(const vpmm_pool_t *p)
{
    vpmm_lock_release(&((vpmm_pool_t *)p)->lock);
}

vpmm_driver_t *vpmm_i_pool_driver(const vpmm_pool_t *p)
{
    return p->drv;
}

struct vpmm_graphs **vpmm_i_pool_graphs(vpmm_pool_t *p)
{
    return &p->graphs;
}

vpmm_status_t vpmm_i_pool_synchronize(vpmm_pool_t *p)
{
    return vpmm_i_drv_status(p, p->drv->synchronize(p->drv));
}

vpmm_status_t vpmm_i_drv_status(vpmm_pool_t *p, vpmm_dres_t r)
{
    if (VPMM_LIKELY(r == VPMM_DRV_OK))
        return VPMM_SUCCESS;
    p->drv_code = p->drv->last_code;
    p->drv_call = p->drv->last_call;
    vpmm_i_set_error("%s failed (driver error %d)", p->drv_call ? p->drv_call : "driver call",
                     p->drv_code);
    return vpmm_i_status_from_dres(r);
}
