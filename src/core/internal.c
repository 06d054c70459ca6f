/*
 * internal.c — the out-of-line functions internal.h promises graph/ and checkpoint/ (who see a
 * pool only through it): the pool lock (vpmm_i_lock/_unlock, which the core takes everywhere
 * too), the pool's driver and graph/'s state slot, and a device synchronisation. They call nothing
 * of the core but driver_error.c (docs/ARCHITECTURE.md, "The core's sub-layers").
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
