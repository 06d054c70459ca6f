/*
 * driver_error.c — a driver call's result as the pool's status: on failure the pool keeps the
 * failed call and its code (vpmm_pool_last_driver_error) and the thread's vpmm_last_error()
 * names them. Every driver call of the core goes through vpmm_i_drv_status (internal.h). Called
 * under the pool lock; calls nothing of the core but status.c.
 */
#include "pool.h"

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
