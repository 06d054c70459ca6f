/*
 * pages.h — physical handles and the mapping table (pages.c).
 * The structs and their invariants are pool.h's; core.h includes every header of the core.
 */
#ifndef VPMM_PAGES_H
#define VPMM_PAGES_H

#include "pool.h"

/* Handles needed for npages pages in units of `unit` pages (the last one may be smaller). */
size_t vpmm_i_pages_handles(size_t npages, size_t unit);
/* Creates handles for npages pages, `unit` pages each (phys records not yet linked) into out[],
 * which has room for vpmm_i_pages_handles(npages, unit); all-or-nothing. */
vpmm_status_t vpmm_i_pages_create(vpmm_pool_t *p, size_t npages, size_t unit, vpmm_phys_t **out);
/* Releases handles created by vpmm_i_pages_create that were never linked. */
void vpmm_i_pages_destroy(vpmm_pool_t *p, vpmm_phys_t **pages, size_t n);

/*
 * Handles created WITHOUT the pool lock (driver.h rule 7: the driver is thread-safe), so that the
 * slowest driver call of a growth does not block the pool's other threads. The slow path plans
 * under the lock, drops it to create what the plan needs, takes it again and plans again: the
 * new plan takes matching handles from the set first (vpmm_i_pages_create_from) and creates the
 * rest under the lock; what is left is released, again without the lock.
 */
typedef struct vpmm_precreated {
    vpmm_phys_t **h;
    size_t n, cap;
    int tried; /* the slow path dropped the lock once for it (never twice per malloc) */
} vpmm_precreated_t;
/* Creates handles for npages pages in units of `unit` pages into set (no pool state touched:
 * callable without the lock). VPMM_DRV_OK, or the failing driver result (the set is unchanged). */
vpmm_dres_t vpmm_i_precreate(vpmm_driver_t *d, size_t page_size, size_t npages, size_t unit,
                             vpmm_precreated_t *set);
/* Releases the set's handles and frees it (no pool state touched: callable without the lock). */
void vpmm_i_precreated_discard(vpmm_driver_t *d, vpmm_precreated_t *set);

/* vpmm_i_pages_create that takes handles of the right size from set first (set may be NULL). */
vpmm_status_t vpmm_i_pages_create_from(vpmm_pool_t *p, size_t npages, size_t unit,
                                       vpmm_phys_t **out, vpmm_precreated_t *set);
/* Maps pages[0..n) one after another from va (then one set_access); undoes all on failure. */
vpmm_status_t vpmm_i_pages_map(vpmm_pool_t *p, uintptr_t va, vpmm_phys_t **pages, size_t n);
/* Undoes vpmm_i_pages_map. */
void vpmm_i_pages_unmap(vpmm_pool_t *p, uintptr_t va, vpmm_phys_t **pages, size_t n);
/* Links a new handle into the pool at its live address (maps must have room for its pages). */
void vpmm_i_phys_link(vpmm_pool_t *p, vpmm_phys_t *ph, uintptr_t va);
/* Bytes of the whole handles mapped live inside [addr, addr + size): what defragmentation could
 * move out of a free region (a handle partly outside stays). */
size_t vpmm_i_whole_handle_bytes(const vpmm_pool_t *p, uintptr_t addr, size_t size);
/* The phys mapped at page address va (live or zombie), or NULL. */
static inline vpmm_phys_t *vpmm_i_phys_at(const vpmm_pool_t *p, uintptr_t va)
{
    return (vpmm_phys_t *)vpmm_hmap_get(&p->maps, va);
}

#endif /* VPMM_PAGES_H */
