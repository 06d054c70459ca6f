/*
 * pages.c — physical handles and the mapping table.
 *
 * A phys is one driver handle of one or more whole pages (growth creates up to 1 GiB at a time:
 * per-handle costs dominate, see growth_plan in policy.c). The driver maps only whole handles, so
 * a handle is also the unit defragmentation moves. pool->maps sends every page address of every
 * mapping to its phys: the pages of its live mapping, [phys->va, phys->va + size), and the pages
 * of any zombie mapping left behind by defragmentation. Creation and mapping are all-or-nothing:
 * each multi-step acquire undoes its own partial work before returning an error, so callers see
 * either the full result or no change (I3, I4 in pool.h; checked in check.c).
 *
 * Called under the pool lock.
 */
#include <stdlib.h>

#include "cache.h"
#include "pages.h"
#include "pool.h"

/* A release or unmap that undoes work or gives memory back gets a second try: one transient driver
 * failure must not leak the handle or the mapping (as at teardown, pool.c). */
static vpmm_dres_t release_twice(vpmm_driver_t *d, vpmm_drv_handle_t h)
{
    vpmm_dres_t r = d->mem_release(d, h);
    return r == VPMM_DRV_OK ? r : d->mem_release(d, h);
}

static vpmm_dres_t unmap_twice(vpmm_driver_t *d, uintptr_t va, size_t size)
{
    vpmm_dres_t r = d->mem_unmap(d, va, size);
    return r == VPMM_DRV_OK ? r : d->mem_unmap(d, va, size);
}

size_t vpmm_i_pages_handles(size_t npages, size_t unit)
{
    return npages / unit + (npages % unit != 0);
}

vpmm_status_t vpmm_i_pages_create(vpmm_pool_t *p, size_t npages, size_t unit, vpmm_phys_t **out)
{
    const size_t n = vpmm_i_pages_handles(npages, unit);
    vpmm_status_t st = VPMM_SUCCESS;
    size_t i;
    for (i = 0; i < n; i++) {
        size_t pages = i + 1 < n || npages % unit == 0 ? unit : npages % unit;
        vpmm_phys_t *ph = calloc(1, sizeof *ph);
        if (ph == NULL) {
            vpmm_i_set_error("out of host memory for page bookkeeping");
            st = VPMM_ERROR_HOST_OUT_OF_MEMORY;
            goto undo;
        }
        ph->size = pages * p->page_size;
        st = vpmm_i_drv_status(p, p->drv->mem_create(p->drv, ph->size, &ph->handle));
        if (st != VPMM_SUCCESS) {
            free(ph);
            goto undo;
        }
        out[i] = ph;
    }
    return VPMM_SUCCESS;
undo:
    vpmm_i_pages_destroy(p, out, i);
    return st;
}

vpmm_dres_t vpmm_i_precreate(vpmm_driver_t *d, size_t page_size, size_t npages, size_t unit,
                             vpmm_precreated_t *set)
{
    const size_t n = vpmm_i_pages_handles(npages, unit);
    size_t i;
    vpmm_dres_t r = VPMM_DRV_OK;

    if (set->cap < set->n + n) {
        vpmm_phys_t **h = realloc(set->h, (set->n + n) * sizeof *h);
        if (h == NULL)
            return VPMM_DRV_OUT_OF_MEMORY;
        set->h = h;
        set->cap = set->n + n;
    }
    for (i = 0; i < n && r == VPMM_DRV_OK; i++) {
        size_t pages = i + 1 < n || npages % unit == 0 ? unit : npages % unit;
        vpmm_phys_t *ph = calloc(1, sizeof *ph);
        if (ph == NULL) {
            r = VPMM_DRV_OUT_OF_MEMORY;
            break;
        }
        ph->size = pages * page_size;
        r = d->mem_create(d, ph->size, &ph->handle);
        if (r != VPMM_DRV_OK) {
            free(ph);
            break;
        }
        set->h[set->n + i] = ph;
    }
    if (r != VPMM_DRV_OK) { /* all or nothing */
        while (i-- > 0) {
            (void)release_twice(d, set->h[set->n + i]->handle);
            free(set->h[set->n + i]);
        }
        return r;
    }
    set->n += n;
    return VPMM_DRV_OK;
}

void vpmm_i_precreated_discard(vpmm_driver_t *d, vpmm_precreated_t *set)
{
    for (size_t i = 0; i < set->n; i++) {
        (void)release_twice(d, set->h[i]->handle);
        free(set->h[i]);
    }
    free(set->h);
    *set = (vpmm_precreated_t){ NULL, 0, 0, 0 };
}

/* A handle of `bytes` from the set, or NULL. */
static vpmm_phys_t *take_precreated(vpmm_precreated_t *set, size_t bytes)
{
    for (size_t i = 0; set != NULL && i < set->n; i++) {
        if (set->h[i]->size == bytes) {
            vpmm_phys_t *ph = set->h[i];
            set->h[i] = set->h[--set->n];
            return ph;
        }
    }
    return NULL;
}

vpmm_status_t vpmm_i_pages_create_from(vpmm_pool_t *p, size_t npages, size_t unit,
                                       vpmm_phys_t **out, vpmm_precreated_t *set)
{
    const size_t n = vpmm_i_pages_handles(npages, unit);
    unsigned char *made;
    vpmm_status_t st = VPMM_SUCCESS;
    size_t i;

    if (set == NULL || set->n == 0)
        return vpmm_i_pages_create(p, npages, unit, out);
    made = calloc(n, 1);
    if (made == NULL) {
        vpmm_i_set_error("out of host memory for page bookkeeping");
        return VPMM_ERROR_HOST_OUT_OF_MEMORY;
    }
    /* The set's handles where their size fits; one handle each created for the others. */
    for (i = 0; i < n && st == VPMM_SUCCESS; i++) {
        const size_t pages = i + 1 < n || npages % unit == 0 ? unit : npages % unit;
        out[i] = take_precreated(set, pages * p->page_size);
        if (out[i] == NULL) {
            st = vpmm_i_pages_create(p, pages, pages, &out[i]);
            made[i] = st == VPMM_SUCCESS;
        }
    }
    if (st != VPMM_SUCCESS) {
        /* All or nothing: release what was made here, hand the set's handles back to it. */
        while (i-- > 0) {
            if (out[i] == NULL)
                continue;
            if (made[i])
                vpmm_i_pages_destroy(p, &out[i], 1);
            else
                set->h[set->n++] = out[i]; /* it held them: capacity is there */
        }
    }
    free(made);
    return st;
}

void vpmm_i_pages_destroy(vpmm_pool_t *p, vpmm_phys_t **pages, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        vpmm_i_drv_status(p, release_twice(p->drv, pages[i]->handle));
        free(pages[i]);
        pages[i] = NULL;
    }
}

void vpmm_i_pages_unmap(vpmm_pool_t *p, uintptr_t va, vpmm_phys_t **pages, size_t n)
{
    VPMM_ASSERT(va % p->granularity == 0); /* driver.h: mappings are granularity-aligned */
    for (size_t i = 0; i < n; va += pages[i]->size, i++)
        vpmm_i_drv_status(p, unmap_twice(p->drv, va, pages[i]->size));
}

vpmm_status_t vpmm_i_pages_map(vpmm_pool_t *p, uintptr_t va, vpmm_phys_t **pages, size_t n)
{
    vpmm_status_t st;
    uintptr_t at = va;
    size_t i;
    VPMM_ASSERT(n > 0 && va % p->granularity == 0); /* driver.h: granularity-aligned mappings */
    for (i = 0; i < n; at += pages[i]->size, i++) {
        st = vpmm_i_drv_status(p, p->drv->mem_map(p->drv, at, pages[i]->size, pages[i]->handle, 0));
        if (st != VPMM_SUCCESS)
            goto undo;
    }
    /* One access call for the whole span: the driver accepts several adjacent mappings. */
    /* The pool's own device and every peer granted so far (peer.c). */
    st = vpmm_i_drv_status(p, p->drv->set_access(p->drv, va, at - va, p->peers, p->npeers));
    if (st == VPMM_SUCCESS) {
        p->peer_grants += p->npeers > 0;
        return VPMM_SUCCESS;
    }
undo:
    vpmm_i_pages_unmap(p, va, pages, i);
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
    for (size_t off = 0; off < ph->size; off += p->page_size)
        vpmm_hmap_put(&p->maps, va + off, ph); /* room reserved by the caller */
    p->c.mapped_bytes += ph->size;
    if (p->c.mapped_bytes > p->mapped_high)
        p->mapped_high = p->c.mapped_bytes; /* the only place mapped memory grows */
    p->c.pages_created += ph->size / p->page_size;
    p->c.handles_created++;
    vpmm_i_cache_limit_update(p);
}

size_t vpmm_i_whole_handle_bytes(const vpmm_pool_t *p, uintptr_t addr, size_t size)
{
    const size_t pg = p->page_size;
    const uintptr_t hi = vpmm_align_down(addr + size, pg);
    uintptr_t at = vpmm_align_up(addr, pg);
    size_t bytes = 0;
    while (at < hi) {
        const vpmm_phys_t *ph = vpmm_i_phys_at(p, at);
        if (ph->va >= at && ph->va + ph->size <= hi)
            bytes += ph->size;
        at = ph->va + ph->size > at ? ph->va + ph->size : at + pg;
    }
    return bytes;
}
