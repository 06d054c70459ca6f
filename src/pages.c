/*
 * pages.c — physical pages (one driver handle each) and the mapping table.
 *
 * pool->maps sends every mapped page address to its phys: the live address (phys->va) and any
 * zombie addresses left behind by defragmentation. Creation and mapping are all-or-nothing: each
 * multi-step acquire undoes its own partial work before returning an error, so callers see either
 * the full result or no change (I3, I4 in pool.h; checked in check.c).
 *
 * Called under the pool lock.
 */
#include <stdlib.h>

#include "pool.h"

vpmm_status_t vpmm_i_pages_create(vpmm_pool_t *p, size_t n, vpmm_phys_t **out)
{
    vpmm_status_t st = VPMM_SUCCESS;
    size_t i;
    for (i = 0; i < n; i++) {
        vpmm_phys_t *ph = calloc(1, sizeof *ph);
        if (ph == NULL) {
            vpmm_i_set_error("out of host memory for page bookkeeping");
            st = VPMM_ERROR_HOST_OUT_OF_MEMORY;
            goto undo;
        }
        st = vpmm_i_drv_status(p, p->drv->mem_create(p->drv, p->page_size, &ph->handle));
        if (st != VPMM_SUCCESS) {
            free(ph);
            goto undo;
        }
        ph->size = p->page_size;
        out[i] = ph;
    }
    return VPMM_SUCCESS;
undo:
    vpmm_i_pages_destroy(p, out, i);
    return st;
}

void vpmm_i_pages_destroy(vpmm_pool_t *p, vpmm_phys_t **pages, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        vpmm_i_drv_status(p, p->drv->mem_release(p->drv, pages[i]->handle));
        free(pages[i]);
        pages[i] = NULL;
    }
}

void vpmm_i_pages_unmap(vpmm_pool_t *p, uintptr_t va, size_t n)
{
    for (size_t i = 0; i < n; i++)
        vpmm_i_drv_status(p, p->drv->mem_unmap(p->drv, va + i * p->page_size, p->page_size));
}

vpmm_status_t vpmm_i_pages_map(vpmm_pool_t *p, uintptr_t va, vpmm_phys_t **pages, size_t n)
{
    const size_t pg = p->page_size;
    vpmm_status_t st;
    size_t i;
    for (i = 0; i < n; i++) {
        st = vpmm_i_drv_status(p, p->drv->mem_map(p->drv, va + i * pg, pg, pages[i]->handle, 0));
        if (st != VPMM_SUCCESS)
            goto undo;
    }
    /* One access call for the whole span: the driver accepts several adjacent mappings. */
    st = vpmm_i_drv_status(p, p->drv->set_access(p->drv, va, n * pg));
    if (st == VPMM_SUCCESS)
        return VPMM_SUCCESS;
undo:
    vpmm_i_pages_unmap(p, va, i);
    return st;
}

void vpmm_i_phys_link(vpmm_pool_t *p, vpmm_phys_t *ph, uintptr_t va)
{
    ph->va = va;
    ph->zombie_maps = 0;
    ph->prev = NULL;
    ph->next = p->phys_head;
    if (p->phys_head)
        p->phys_head->prev = ph;
    p->phys_head = ph;
    p->phys_count++;
    vpmm_hmap_put(&p->maps, va, ph); /* room reserved by the caller */
    p->c.mapped_bytes += ph->size;
    vpmm_i_cache_limit_update(p);
}
