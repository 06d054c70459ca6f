/*
 * trim.c — vpmm_trim: giving fully free pages back to the driver; vpmm_set_max_bytes: the cap
 * on what the pool may map.
 *
 * A pool keeps the pages it maps: reusing them is what makes malloc cheap. vpmm_trim gives back
 * the free ones, all of them or until the pool maps no more than a byte target: first it makes
 * every free page it can see free (flushes the exact-size caches, unmaps zombies whose GPU work is
 * done, polls every stream's markers), then releases whole handles lying entirely in *ready* free
 * memory of the shared pool and of idle graph pools (memory still pending on a busy stream, or
 * held by a graph pool a graph uses, stays). Their VA becomes hole; extra shared chunks that
 * became one whole hole are given back too.
 *
 * Per handle: unmap (under the pool lock: the VA becomes hole), then release — after the lock is
 * dropped (driver.h rule 7): a release is the slowest driver call there is (~0.5 ms for 1 GiB),
 * and nothing of the pool refers to the handle any more. If the unmap fails nothing changed and
 * the trim stops. A release that fails twice leaves the handle — unmapped, its memory not yet
 * returned — in pool->unreleased, retried by every later trim and by the pool's destruction, so a
 * driver failure loses track of nothing.
 */
#include <stdlib.h>

#include "array.h"
#include "entry.h"
#include "arena.h"
#include "cache.h"
#include "defrag.h"
#include "graph_hooks.h"
#include "pages.h"
#include "pool.h"
#include "region.h"
#include "segment.h"
#include "share.h"
#include "stream.h"
#include "trim.h"
#include "va.h"
#include "worker.h"

/* Retries the releases that failed before; keeps those that fail again. */
static vpmm_status_t retry_unreleased(vpmm_pool_t *p)
{
    vpmm_status_t st = VPMM_SUCCESS;
    size_t kept = 0;
    for (size_t i = 0; i < p->nunreleased; i++) {
        vpmm_status_t r = vpmm_i_drv_status(p, p->drv->mem_release(p->drv, p->unreleased[i]));
        if (r != VPMM_SUCCESS) {
            p->unreleased[kept++] = p->unreleased[i];
            st = st == VPMM_SUCCESS ? r : st;
        }
    }
    p->nunreleased = kept;
    return st;
}

/* Whether ph is a whole handle inside the ready free region r, with no zombie mapping. */
static int releasable(const vpmm_phys_t *ph, const vpmm_region_t *r)
{
    return ph->zombie_maps == 0 && ph->va >= r->addr && ph->va + ph->size <= r->addr + r->size;
}

/* Appends the handles lying wholly in ready free region r to (*out)[0..*n). */
static vpmm_status_t region_candidates(vpmm_pool_t *p, const vpmm_region_t *r, vpmm_phys_t ***out,
                                       size_t *n, size_t *cap)
{
    const size_t pg = p->page_size;
    for (uintptr_t at = vpmm_align_up(r->addr, pg); at + pg <= r->addr + r->size;) {
        vpmm_phys_t *ph = vpmm_i_phys_at(p, at);
        if (ph->va == at && releasable(ph, r)) {
            if (VPMM_GROW(*out, *cap, *n + 1, 64) != 0)
                return VPMM_ERROR_HOST_OUT_OF_MEMORY;
            (*out)[(*n)++] = ph;
        }
        at = ph->va == at ? at + ph->size : at + pg;
    }
    return VPMM_SUCCESS;
}

/* Handles of arena a that lie wholly in its ready free memory, in address order (vpmm_trim). */
static vpmm_status_t candidates(vpmm_pool_t *p, const vpmm_arena_t *a, vpmm_phys_t ***out,
                                size_t *n, size_t *cap)
{
    for (vpmm_chunk_t *c = p->chunks; c; c = c->next)
        for (vpmm_region_t *r = c->first; r && c->arena == a; r = r->next)
            if (r->state == VPMM_REGION_FREE && r->ready)
                VPMM_CHECK(region_candidates(p, r, out, n, cap));
    return VPMM_SUCCESS;
}

/* The same in any order, from the arena's ready tree: only its free regions are visited (the
 * growth trim runs on mallocs). */
static vpmm_status_t ready_candidates(vpmm_pool_t *p, const vpmm_arena_t *a, vpmm_phys_t ***out,
                                      size_t *n, size_t *cap)
{
    for (vpmm_rb_node_t *x = vpmm_rb_first(&a->ready); x; x = vpmm_rb_next(x))
        VPMM_CHECK(region_candidates(p, VPMM_CONTAINER_OF(x, vpmm_region_t, node), out, n, cap));
    return VPMM_SUCCESS;
}

/*
 * The handle's range leaves its free region and becomes hole:
 *
 *   [...... ready free ......]  ->  [free][ hole ][free]      (a piece may be empty)
 */
static void forget_handle(vpmm_pool_t *p, vpmm_phys_t *ph)
{
    vpmm_region_t *mid =
        vpmm_i_region_cut(p, vpmm_i_region_find(p, ph->va), ph->va, ph->va + ph->size);

    mid->state = VPMM_REGION_HOLE;
    mid->ready = 0;
    mid->stream = NULL;
    vpmm_i_index_add(p, mid);
    vpmm_i_region_coalesce(p, mid);

    for (size_t off = 0; off < ph->size; off += p->page_size)
        vpmm_hmap_remove(&p->maps, ph->va + off);
    if (ph->prev)
        ph->prev->next = ph->next;
    else
        p->phys_head = ph->next;
    if (ph->next)
        ph->next->prev = ph->prev;
    p->phys_count--;
    p->c.mapped_bytes -= ph->size;
    p->c.pages_released += ph->size / p->page_size;
    vpmm_i_phys_unexport(ph);
    free(ph);
}

/* Unmaps one handle and forgets it (under the lock); its handle goes to `out` for release. The
 * segment is reported gone before the unmap (a registered range must be deregistered first), and
 * back if the unmap fails. */
static vpmm_status_t unmap_handle(vpmm_pool_t *p, vpmm_phys_t *ph, vpmm_drv_handle_t *out)
{
    const vpmm_arena_t *a =
        p->segment_hook != NULL ? vpmm_i_arena_of(vpmm_i_region_find(p, ph->va)) : NULL;
    vpmm_status_t st;
    vpmm_i_segment(p, VPMM_SEGMENT_UNMAPPED, ph, a);
    st = vpmm_i_drv_status(p, p->drv->mem_unmap(p->drv, ph->va, ph->size));
    if (st != VPMM_SUCCESS) {
        vpmm_i_segment(p, VPMM_SEGMENT_MAPPED, ph, a);
        return st;
    }
    *out = ph->handle;
    forget_handle(p, ph);
    return VPMM_SUCCESS;
}

/* Room for unmapping n handles into batch: region nodes, places in pool->unreleased should
 * their releases fail (counted in unreleased_reserved until the batch is released: several
 * threads may release at once), and the batch's array. Nothing below then needs host memory: a
 * handle unmapped must be kept whatever happens. Under the lock. */
static vpmm_status_t reserve_unmaps(vpmm_pool_t *pool, size_t n, vpmm_unmapped_t *batch)
{
    const size_t need = pool->nunreleased + pool->unreleased_reserved + n;
    *batch = (vpmm_unmapped_t){ NULL, 0, 0 };
    if (vpmm_i_region_reserve(pool, 2 * n + 2) != VPMM_SUCCESS)
        return VPMM_ERROR_HOST_OUT_OF_MEMORY;
    if (pool->unreleased_cap < need) {
        vpmm_drv_handle_t *u = realloc(pool->unreleased, need * sizeof *u);
        if (u == NULL)
            return VPMM_ERROR_HOST_OUT_OF_MEMORY;
        pool->unreleased = u;
        pool->unreleased_cap = need;
    }
    batch->h = malloc((n ? n : 1) * sizeof *batch->h);
    if (batch->h == NULL)
        return VPMM_ERROR_HOST_OUT_OF_MEMORY;
    batch->reserved = n;
    pool->unreleased_reserved += n;
    return VPMM_SUCCESS;
}

vpmm_status_t vpmm_i_release_unmapped(vpmm_pool_t *pool, vpmm_unmapped_t *batch)
{
    vpmm_driver_t *d = pool->drv;
    vpmm_status_t st = VPMM_SUCCESS;
    size_t failed = 0;
    for (size_t i = 0; i < batch->n; i++) {
        if (d->mem_release(d, batch->h[i]) == VPMM_DRV_OK ||
            d->mem_release(d, batch->h[i]) == VPMM_DRV_OK)
            continue;
        batch->h[failed++] = batch->h[i];
    }
    if (batch->reserved > 0) {
        vpmm_i_lock(pool);
        for (size_t i = 0; i < failed; i++)
            pool->unreleased[pool->nunreleased++] = batch->h[i]; /* room reserved */
        pool->unreleased_reserved -= batch->reserved;
        if (failed > 0)
            st = vpmm_i_drv_status(pool, VPMM_DRV_ERROR);
        vpmm_i_unlock(pool);
    }
    free(batch->h);
    *batch = (vpmm_unmapped_t){ NULL, 0, 0 };
    return st;
}

vpmm_status_t vpmm_i_trim(vpmm_pool_t *pool, size_t target_bytes, size_t *out_released)
{
    vpmm_phys_t **cand = NULL;
    vpmm_unmapped_t batch = { NULL, 0, 0 };
    size_t n = 0, cap = 0, before;
    vpmm_status_t st, rst;

    /* The worker's pass finishes first and no other starts meanwhile: every zombie whose GPU work
     * is done is unmapped below, so its handle can go back (a handle with a zombie mapping
     * stays). */
    vpmm_i_worker_hold(pool, 1);
    vpmm_i_lock(pool);
    before = pool->c.mapped_bytes;
    vpmm_i_graphs_collect(pool);
    vpmm_i_reclaim_zombies(pool, 1);
    /* Every free page is wanted: other threads' per-thread streams get their markers too. */
    vpmm_i_stream_mark_foreign(pool);
    vpmm_i_stream_poll_all(pool, NULL); /* caches flushed first */
    st = retry_unreleased(pool);
    if (st == VPMM_SUCCESS) {
        vpmm_status_t hst = candidates(pool, &pool->shared, &cand, &n, &cap);
        for (vpmm_arena_t *a = pool->privates; a && hst == VPMM_SUCCESS; a = a->next)
            if (!a->pinned && a->captures == 0)
                hst = candidates(pool, a, &cand, &n, &cap);
        if (hst == VPMM_SUCCESS)
            hst = reserve_unmaps(pool, n, &batch);
        if (hst != VPMM_SUCCESS) {
            vpmm_i_set_error("vpmm_trim: out of host memory");
            st = hst;
        }
    }
    if (st == VPMM_SUCCESS && n > 0 && pool->c.mapped_bytes > target_bytes) {
        size_t bytes = 0;
        for (size_t i = 0; i < n; i++)
            bytes += cand[i]->size;
        vpmm_i_nvtx_push(VPMM_NVTX_TRIM, VPMM_MIN(bytes, pool->c.mapped_bytes - target_bytes));
        for (size_t i = 0; i < n && st == VPMM_SUCCESS && pool->c.mapped_bytes > target_bytes; i++)
            if ((st = unmap_handle(pool, cand[i], &batch.h[batch.n])) == VPMM_SUCCESS)
                batch.n++;
        vpmm_i_nvtx_pop();
    }
    vpmm_i_chunk_trim(pool);
    vpmm_i_cache_limit_update(pool);
    if (out_released != NULL)
        *out_released = before - pool->c.mapped_bytes;
    vpmm_i_unlock(pool);
    free(cand);

    /* The releases, without the lock; one that fails twice is kept for a later retry. */
    rst = vpmm_i_release_unmapped(pool, &batch);
    vpmm_i_worker_hold(pool, 0);
    return st != VPMM_SUCCESS ? st : rst;
}

/*
 * Why: the harvest moves a free handle only while it fits in the pages still needed, so a growth
 * of a few pages is created fresh while whole free handles of more pages lie unused (handles of
 * several pages: VPMM_HANDLE_PAGES, bursts, growths of 1 GiB). Giving such a handle back before
 * the growth keeps the pool at its high-water mark; below the mark nothing is given back (the
 * footprint is the mark: a release there would only cost a later growth).
 */
void vpmm_i_trim_for_growth(vpmm_pool_t *p, const vpmm_plan_t *plan, vpmm_unmapped_t *out)
{
    const size_t grown = p->c.mapped_bytes + plan->nnew * p->page_size;
    vpmm_phys_t **cand = NULL;
    size_t n = 0, cap = 0, kept = 0, excess;
    *out = (vpmm_unmapped_t){ NULL, 0, 0 };
    if (plan->nnew == 0 || plan->arena->priv || grown <= p->mapped_high)
        return;
    excess = grown - p->mapped_high;
    if (ready_candidates(p, &p->shared, &cand, &n, &cap) != VPMM_SUCCESS)
        goto done;
    for (vpmm_arena_t *a = p->privates; a; a = a->next)
        if (!a->pinned && a->captures == 0 &&
            ready_candidates(p, a, &cand, &n, &cap) != VPMM_SUCCESS)
            goto done;
    for (size_t i = 0; i < n; i++)
        if (!vpmm_i_plan_uses(p, plan, cand[i]->va, cand[i]->size) &&
            cand[i]->size <= VPMM_MAX(excess, p->opt.handle_pages * p->page_size))
            cand[kept++] = cand[i];
    n = kept;
    if (n == 0 || reserve_unmaps(p, n, out) != VPMM_SUCCESS)
        goto done;
    vpmm_i_nvtx_push(VPMM_NVTX_TRIM, excess);
    while (excess > 0 && n > 0) {
        /* The smallest handle that covers the excess, else the largest there is. */
        size_t pick = 0, size;
        for (size_t i = 1; i < n; i++) {
            const size_t a = cand[i]->size, b = cand[pick]->size;
            if (b >= excess ? (a >= excess && a < b) : a > b)
                pick = i;
        }
        size = cand[pick]->size;
        if (unmap_handle(p, cand[pick], &out->h[out->n]) != VPMM_SUCCESS)
            break;
        out->n++;
        excess -= VPMM_MIN(excess, size);
        cand[pick] = cand[--n];
    }
    vpmm_i_nvtx_pop();
    vpmm_i_cache_limit_update(p);
done:
    free(cand);
    if (out->n == 0) { /* nothing to release: the room goes back at once (under the lock) */
        p->unreleased_reserved -= out->reserved;
        free(out->h);
        *out = (vpmm_unmapped_t){ NULL, 0, 0 };
    }
}

void vpmm_i_set_max_bytes(vpmm_pool_t *pool, size_t max_bytes)
{
    vpmm_i_lock(pool);
    pool->opt.max_bytes = vpmm_align_down(max_bytes, pool->page_size);
    vpmm_i_unlock(pool);
}
