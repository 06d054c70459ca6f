/*
 * pool.c — the core halves of the pool's life and of its blocks': create (vpmm_i_pool_create_on),
 * destroy, malloc (vpmm_i_malloc_shared, the frame vpmm_i_malloc_enter/_leave), free and stream
 * release (entry.h declares them; src/api/pool.c and src/api/malloc.c hold the public entry points,
 * which check the arguments and call these).
 *
 * The shared pool's malloc runs the phases of docs/ALGORITHM.md in order and stops at the first
 * that finds room:
 *   1a  a block of exactly this size freed earlier on this stream (cache.c) — the hot path: two
 *       hash operations, no tree, no driver call but one capture-status query; else best fit
 *       among memory the stream can use without waiting (its own frees, ready memory);
 *    0  (slow path from here) flush every stream's cache and retry 1a; unmap zombies whose GPU
 *       work is done (or, with the background worker, wake it: worker.c unmaps them);
 *   1b  poll other streams' markers (recording one where frees are unmarked), retry 1a;
 *   1c  best fit among other streams' pending memory, with a GPU-side wait;
 *    2  defragment / grow: map pages into a hole (policy.c decides, defrag.c executes).
 * A stream that is being captured into a CUDA graph is served by its capture's graph pool
 * instead (src/api/malloc.c sends it to graph/; arena.c allocates); the shared pool never serves
 * a capture. vpmm_free puts the block into its stream's exact-size cache
 * (cache.c: no coalescing until a slow path or until the cache reaches opt.cache_percent of mapped
 * memory), else frees and coalesces; a graph pool's block goes back to its graph pool (arena.c).
 * Every public call takes the pool lock for its whole duration (thread-safe, one at a time).
 * Invariants (pool.h) are checked by vpmm_pool_check (check.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "cache.h"
#include "defrag.h"
#include "entry.h"
#include "graph_hooks.h"
#include "pages.h"
#include "policy.h"
#include "pool.h"
#include "record.h"
#include "region.h"
#include "report.h"
#include "segment.h"
#include "share.h"
#include "stats.h"
#include "stream.h"
#include "trim.h"
#include "uses.h"
#include "va.h"
#include "worker.h"

/* ---- creation ---------------------------------------------------------------------------- */

/*
 * Maps VPMM_PAGES pages at the start of the first chunk as one ready free region. One handle per
 * page: preallocated memory stays movable page by page (the seed walkthrough relies on it).
 */
static vpmm_status_t preallocate(vpmm_pool_t *p, size_t n)
{
    vpmm_chunk_t *c = p->chunks;
    vpmm_phys_t **pages;
    vpmm_region_t *r;
    vpmm_status_t st;

    pages = malloc(n * sizeof *pages);
    if (pages == NULL || vpmm_hmap_reserve(&p->maps, n) != 0) {
        free(pages);
        vpmm_i_set_error("out of host memory for %zu preallocated pages", n);
        return VPMM_ERROR_HOST_OUT_OF_MEMORY;
    }
    VPMM_CHECK_GOTO(st, vpmm_i_region_reserve(p, 2), out);
    VPMM_CHECK_GOTO(st, vpmm_i_pages_create(p, n, 1, pages), out);
    st = vpmm_i_pages_map(p, c->base, pages, n);
    if (st != VPMM_SUCCESS) {
        vpmm_i_pages_destroy(p, pages, n);
        goto out;
    }
    r = vpmm_i_hole_carve(p, c->first, c->base, n * p->page_size);
    for (size_t i = 0; i < n; i++)
        vpmm_i_phys_link(p, pages[i], c->base + i * p->page_size);
    vpmm_i_region_set_free(p, r, NULL); /* never used: ready for every stream */
    vpmm_i_index_add(p, r);
    vpmm_i_note_peaks(p);
out:
    free(pages);
    return st;
}

static void pool_free_host(vpmm_pool_t *p)
{
    vpmm_phys_t *ph = p->phys_head;
    vpmm_chunk_t *c = p->chunks;
    while (ph) {
        vpmm_phys_t *next = ph->next;
        vpmm_i_phys_unexport(ph);
        free(ph);
        ph = next;
    }
    while (c) {
        vpmm_chunk_t *next = c->next;
        free(c);
        c = next;
    }
    vpmm_hmap_fini(&p->allocs);
    vpmm_hmap_fini(&p->maps);
    free(p->unreleased);
    vpmm_i_region_slabs_free(p);
    if (p->owns_drv)
        p->drv->close(p->drv);
    free(p);
}

/*
 * Returns every driver resource; each call gets a second try (a transient failure should not
 * leak), and the first lasting failure is reported. Host bookkeeping is freed regardless.
 */
#define TWICE(call) ((call) == VPMM_DRV_OK || (call) == VPMM_DRV_OK)

static vpmm_status_t pool_teardown(vpmm_pool_t *p)
{
    vpmm_driver_t *d = p->drv;
    vpmm_status_t first = VPMM_SUCCESS;
#define NOTE(ok)                                                                                   \
    do {                                                                                           \
        if (!(ok) && first == VPMM_SUCCESS)                                                        \
            first = vpmm_i_drv_status(p, VPMM_DRV_ERROR);                                          \
    } while (0)

    if (p->phys_count > 0 || p->zombie_head != NULL)
        NOTE(TWICE(d->synchronize(d))); /* nothing may still use the memory */
    for (vpmm_chunk_t *c = p->chunks; c; c = c->next)
        vpmm_i_segment_chunk(p, c, VPMM_SEGMENT_UNMAPPED);
    for (vpmm_region_t *z = p->zombie_head; z; z = z->qnext) {
        /* A zombie is a run of whole handles (I4): unmap each mapping. */
        for (size_t off = 0; off < z->size;) {
            size_t size = vpmm_i_phys_at(p, z->addr + off)->size;
            NOTE(TWICE(d->mem_unmap(d, z->addr + off, size)));
            off += size;
        }
    }
    for (vpmm_phys_t *ph = p->phys_head; ph; ph = ph->next) {
        NOTE(TWICE(d->mem_unmap(d, ph->va, ph->size)));
        NOTE(TWICE(d->mem_release(d, ph->handle)));
    }
    for (size_t i = 0; i < p->nunreleased; i++) /* a trim's failed releases (trim.c) */
        NOTE(TWICE(d->mem_release(d, p->unreleased[i])));
    for (vpmm_chunk_t *c = p->chunks; c; c = c->next) {
        NOTE(TWICE(d->va_free(d, c->base, c->size)));
        if (c->nvtx_heap != NULL)
            vpmm_i_nvtx_heap_unregister_slow(c->nvtx_heap);
    }
    vpmm_i_uses_fini(p); /* before the stream records they name go; share slots back */
    vpmm_i_share_table_fini(p);
    NOTE(vpmm_i_stream_fini_all(p) == VPMM_SUCCESS);
#undef NOTE
    return first;
}

vpmm_status_t vpmm_i_pool_create_on(const vpmm_options_t *opt, vpmm_driver_t *drv, int owns_drv,
                                    const vpmm_graph_hooks_t *ghooks, vpmm_pool_t **out)
{
    vpmm_pool_t *p;
    vpmm_chunk_t *c;
    vpmm_status_t st;
    size_t gran;

    vpmm_i_nvtx_init(); /* once per process: is a tool attached? */
    st = vpmm_i_status_from_dres(drv->granularity(drv, &gran));
    if (st != VPMM_SUCCESS) {
        vpmm_i_set_error("%s failed (driver error %d)", drv->last_call ? drv->last_call : "?",
                         drv->last_code);
        goto fail_drv;
    }
    p = calloc(1, sizeof *p);
    if (p == NULL) {
        st = VPMM_ERROR_HOST_OUT_OF_MEMORY;
        vpmm_i_set_error("out of host memory for the pool");
        goto fail_drv;
    }
    p->drv = drv;
    p->owns_drv = owns_drv;
    p->ghooks = ghooks;
    p->opt = *opt;
    p->granularity = gran;
    vpmm_lock_init(&p->lock);
    vpmm_rb_init(&p->shared.holes);
    vpmm_rb_init(&p->shared.ready);
    if (vpmm_hmap_init(&p->allocs, 1024) != 0 || vpmm_hmap_init(&p->maps, 1024) != 0) {
        st = VPMM_ERROR_HOST_OUT_OF_MEMORY;
        vpmm_i_set_error("out of host memory for the pool's tables");
        goto fail_pool;
    }
    VPMM_CHECK_GOTO(st, vpmm_i_options_finish(&p->opt, gran), fail_pool);
    p->page_size = p->opt.page_size;
    vpmm_i_cache_limit_update(p);
    VPMM_CHECK_GOTO(st, vpmm_i_chunk_add(p, &p->shared, 0, 0, &c), fail_pool);
    if (p->opt.prealloc_pages > 0)
        VPMM_CHECK_GOTO(st, preallocate(p, p->opt.prealloc_pages), fail_teardown);
    VPMM_CHECK_GOTO(st, vpmm_i_record_open(p), fail_teardown);
    p->opt.trace_file = NULL; /* the string may not outlive the call */
    if (p->opt.worker) {
        st = vpmm_i_worker_start(p);
        if (st != VPMM_SUCCESS) {
            (void)vpmm_i_record_close(p); /* the worker's failure is the status */
            goto fail_teardown;
        }
    }
    *out = p;
    return VPMM_SUCCESS;

fail_teardown:
    pool_teardown(p);
fail_pool:
    pool_free_host(p);
    return st;
fail_drv:
    if (owns_drv)
        drv->close(drv);
    return st;
}

vpmm_status_t vpmm_i_pool_destroy(vpmm_pool_t *pool)
{
    vpmm_status_t st, rst;
    vpmm_i_lock(pool);
    /* Graph pools first: a graph destroyed just before returns its pages (and their live
     * allocations) to the shared pool, which the live-allocation test then sees. */
    st = vpmm_i_graphs_fini(pool);
    if (st == VPMM_SUCCESS && pool->c.live_allocs > 0) {
        vpmm_i_set_error("vpmm_pool_destroy: %llu allocations are still live",
                         (unsigned long long)pool->c.live_allocs);
        st = VPMM_ERROR_POOL_BUSY;
    }
    if (st == VPMM_SUCCESS && vpmm_i_import_opens(pool) > 0) {
        vpmm_i_set_error("vpmm_pool_destroy: %zu vpmm_ipc_open calls are not closed",
                         vpmm_i_import_opens(pool));
        st = VPMM_ERROR_POOL_BUSY;
    }
    if (st == VPMM_SUCCESS)
        st = vpmm_i_import_fini(pool); /* mappings whose last close could not unmap them */
    if (st != VPMM_SUCCESS) {
        vpmm_i_unlock(pool);
        return st;
    }
    if (pool->worker != NULL) {
        /* Its pass takes the pool lock: stop it without holding it. */
        vpmm_i_unlock(pool);
        vpmm_i_worker_stop(pool);
        vpmm_i_lock(pool);
    }
    vpmm_i_oom_summary(pool);
    st = pool_teardown(pool);
    rst = vpmm_i_record_close(pool); /* the trace's last lines; a write error is said */
    vpmm_i_unlock(pool);
    pool_free_host(pool);
    return st != VPMM_SUCCESS ? st : rst;
}

/* ---- malloc / free ------------------------------------------------------------------------- */

static size_t precreated_bytes(const vpmm_precreated_t *pre)
{
    size_t bytes = 0;
    for (size_t i = 0; i < pre->n; i++)
        bytes += pre->h[i]->size;
    return bytes;
}

/*
 * Phases 0, 1b, 1c and 2. When phase 2 must create memory, the handles are created without the
 * pool lock (driver.h rule 7): other threads' mallocs and frees go on meanwhile. Then everything
 * is planned again under the lock — memory may have been freed or taken in between — and the new
 * plan takes the handles it can use from `pre`; the caller releases the rest without the lock.
 */
/* Phase 1c's step: stream s waits on the GPU for the marker covering the owner's use of free
 * region r (recorded first if it is the next one). 0 if the marker or the wait fails. */
static int wait_for_owner(vpmm_pool_t *p, vpmm_stream_rec_t *s, const vpmm_region_t *r)
{
    if (vpmm_i_stream_mark(p, r->stream, r->seq) != VPMM_SUCCESS ||
        vpmm_i_drv_status(p, p->drv->stream_wait_event(p->drv, s->handle,
                                                       vpmm_i_stream_marker(r->stream, r->seq))) !=
            VPMM_SUCCESS)
        return 0;
    p->c.cross_stream_waits++;
    return 1;
}

static vpmm_status_t malloc_slow_in_class(vpmm_pool_t *p, vpmm_stream_rec_t *s, size_t rsize,
                                          vpmm_region_t **out, vpmm_precreated_t *pre);

/* One attempt of the slow path within the request's size class (malloc_slow_in_class). */
static vpmm_status_t slow_in_class_once(vpmm_pool_t *p, vpmm_stream_rec_t *s, size_t rsize,
                                        vpmm_region_t **out, vpmm_precreated_t *pre)
{
    vpmm_plan_t plan;
    vpmm_region_t *r;
    vpmm_status_t st;

    p->oom_cause = VPMM_OOM_DEVICE; /* unless the cap or the address space says otherwise */
    /* Graph pools whose graphs are all gone give their pages back first. */
    vpmm_i_graphs_collect(p);
    /* Everything below must see fully coalesced memory: no region stays cached. */
    vpmm_i_cache_flush_all(p);
    r = vpmm_i_fit_nowait(p, s, rsize);
    if (r != NULL) {
        *out = r;
        return VPMM_SUCCESS;
    }
    vpmm_i_reclaim_zombies(p, 1); /* what the worker has not taken yet (it skips busy ones) */
    vpmm_i_stream_poll_all(p, s);
    r = vpmm_i_fit_nowait(p, s, rsize);
    if (r != NULL) {
        *out = r;
        return VPMM_SUCCESS;
    }
    r = vpmm_i_stream_may_wait(p, s) ? vpmm_i_fit_wait(p, s, rsize) : NULL;
    if (r != NULL && wait_for_owner(p, s, r)) {
        *out = r;
        return VPMM_SUCCESS;
    }
    memset(&plan, 0, sizeof plan);
    VPMM_CHECK(vpmm_i_plan_make(p, s, rsize, precreated_bytes(pre), 0, &plan));
    if (plan.nnew > 0 && !pre->tried) {
        const size_t nnew = plan.nnew, unit = plan.unit;
        vpmm_unmapped_t given_back;
        vpmm_i_trim_for_growth(p, &plan, &given_back); /* the plan's regions may go */
        vpmm_i_plan_fini(&plan);
        pre->tried = 1;
        s->held++; /* not reclaimed meanwhile (stream.c) */
        vpmm_i_unlock(p);
        /* Released before the creation, which may need their room; a failure is kept in
         * pool->unreleased and does not stop the malloc. */
        (void)vpmm_i_release_unmapped(p, &given_back);
        /* A failure here is not reported: creating under the lock below says what fails. */
        (void)vpmm_i_precreate(p->drv, p->page_size, nnew, unit, pre);
        vpmm_i_lock(p);
        s->held--;
        /* Other threads may have used the nodes and table room reserved before. */
        if (vpmm_i_region_reserve(p, 4) != VPMM_SUCCESS || vpmm_hmap_reserve(&p->allocs, 1) != 0) {
            vpmm_i_set_error("vpmm_malloc: out of host memory for bookkeeping");
            return VPMM_ERROR_HOST_OUT_OF_MEMORY;
        }
        return malloc_slow_in_class(p, s, rsize, out, pre);
    }
    st = vpmm_i_defrag(p, s, &plan, pre, out);
    vpmm_i_plan_fini(&plan);
    if (st == VPMM_ERROR_OUT_OF_MEMORY && plan.nneed > 0) {
        /* The device refused the new pages: the placement that creates the fewest may need
         * fewer (policy.c, choose_span). */
        const size_t refused = plan.nneed;
        memset(&plan, 0, sizeof plan);
        if (vpmm_i_plan_make(p, s, rsize, precreated_bytes(pre), 1, &plan) == VPMM_SUCCESS &&
            plan.nneed < refused)
            st = vpmm_i_defrag(p, s, &plan, pre, out);
        vpmm_i_plan_fini(&plan);
    }
    if (p->worker != NULL && p->zombie_head != NULL)
        vpmm_i_worker_kick(p); /* this defragmentation's zombies */
    return st;
}

/* The join's wait (vpmm_i_region_join_across): phase 1c's, where the caller may wait. */
static int join_wait(vpmm_pool_t *p, vpmm_stream_rec_t *s, const vpmm_region_t *r)
{
    return vpmm_i_stream_may_wait(p, s) && wait_for_owner(p, s, r);
}

/* The slow path within the request's size class. Out of memory, it joins the whole pages that a
 * boundary between two free regions of different states cut off — ready memory, the caller's
 * pending memory, other streams' (after a GPU-side wait) — since they could not move
 * (vpmm_i_region_join_across), and tries again: free whole pages serve whatever handle they
 * belong to (the near-full rule, docs/ALGORITHM.md). Each retry joins at least one region, so
 * the retries end. */
static vpmm_status_t malloc_slow_in_class(vpmm_pool_t *p, vpmm_stream_rec_t *s, size_t rsize,
                                          vpmm_region_t **out, vpmm_precreated_t *pre)
{
    vpmm_status_t st = slow_in_class_once(p, s, rsize, out, pre);
    while (st == VPMM_ERROR_OUT_OF_MEMORY && vpmm_i_region_join_across(p, s, join_wait) > 0)
        st = slow_in_class_once(p, s, rsize, out, pre);
    return st;
}

/*
 * The slow path within the request's size class (I13); when that runs out of memory (the cap, or
 * the device) while free memory of the other class would fit, that memory serves: size classes
 * choose where blocks go, they never cause an out-of-memory one pool of both would not report.
 * Own and ready memory first, then other streams' (a GPU-side wait), as in phases 1a-1c.
 */
static vpmm_status_t malloc_slow(vpmm_pool_t *p, vpmm_stream_rec_t *s, size_t rsize,
                                 vpmm_region_t **out, vpmm_precreated_t *pre)
{
    vpmm_status_t st = malloc_slow_in_class(p, s, rsize, out, pre);
    vpmm_region_t *r;
    if (st != VPMM_ERROR_OUT_OF_MEMORY || p->opt.small_bytes <= 1)
        return st;
    r = vpmm_i_fit_across(p, s, rsize, 0);
    if (r == NULL && vpmm_i_stream_may_wait(p, s)) {
        r = vpmm_i_fit_across(p, s, rsize, 1);
        if (r != NULL && !wait_for_owner(p, s, r))
            return st;
    }
    if (r == NULL)
        return st;
    p->c.class_fallbacks++;
    *out = r;
    return VPMM_SUCCESS;
}

/*
 * The shared pool's part of vpmm_malloc (src/api/malloc.c decides that the shared pool serves
 * it): the caller holds the lock (vpmm_i_malloc_enter) and releases what `pre` holds after
 * vpmm_i_malloc_leave.
 */
vpmm_status_t vpmm_i_malloc_shared(vpmm_pool_t *pool, const char *fn, vpmm_stream_key_t key,
                                   size_t size, size_t rsize, void **out_ptr,
                                   vpmm_precreated_t *pre)
{
    vpmm_region_t *r;
    vpmm_stream_rec_t *s;
    vpmm_status_t st;

    s = vpmm_i_stream_get(pool, key);
    if (s == NULL ||
        (VPMM_UNLIKELY(pool->spare_count < 4) && vpmm_i_region_reserve(pool, 4) != VPMM_SUCCESS) ||
        vpmm_hmap_reserve(&pool->allocs, 1) != 0) {
        vpmm_i_set_error("%s: out of host memory for bookkeeping", fn);
        return VPMM_ERROR_HOST_OUT_OF_MEMORY;
    }
    r = vpmm_i_cache_take(pool, s, rsize);
    if (VPMM_LIKELY(r != NULL)) {
        vpmm_i_make_allocated(pool, r, s,
                              size); /* the hot path: an exact-size block of this stream */
    } else {
        vpmm_i_cache_missed(pool, s);
        r = vpmm_i_fit_nowait(pool, s, rsize);
        if (VPMM_UNLIKELY(r == NULL)) {
            st = malloc_slow(pool, s, rsize, &r, pre);
            if (st != VPMM_SUCCESS)
                return st;
        }
        r = vpmm_i_allocate_from(pool, r, s, rsize, size);
    }
    pool->c.mallocs++;
    vpmm_i_note_peaks(pool);
    *out_ptr = (void *)r->addr;
    return VPMM_SUCCESS;
}

vpmm_status_t vpmm_i_malloc_enter(vpmm_pool_t *pool, const char *fn, size_t size,
                                  vpmm_stream_t stream, void **out_ptr, vpmm_malloc_call_t *c)
{
    return vpmm_i_malloc_enter_inline(pool, fn, size, stream, out_ptr, c);
}

void vpmm_i_malloc_leave(vpmm_pool_t *pool, const vpmm_malloc_call_t *c, vpmm_status_t st,
                         size_t size, void **out_ptr)
{
    vpmm_i_malloc_leave_inline(pool, c, st, size, out_ptr);
}

vpmm_status_t vpmm_i_free(vpmm_pool_t *pool, void *ptr)
{
    vpmm_region_t *r;
    vpmm_status_t st = VPMM_SUCCESS;
    vpmm_i_lock(pool);
    /* One probe: the allocation leaves the table as it is found. */
    r = vpmm_hmap_remove(&pool->allocs, (uintptr_t)ptr);
    if (VPMM_UNLIKELY(r == NULL)) {
        st = vpmm_i_bad_pointer(pool, ptr, "vpmm_free");
        goto out;
    }
    if (VPMM_UNLIKELY(pool->record != NULL))
        vpmm_i_record_op(pool, 'f', r->addr, r->requested, vpmm_i_stream_key_of(r->stream));
    vpmm_i_alloc_forget(pool, r);
    if (VPMM_UNLIKELY(r->uses != NULL))
        vpmm_i_uses_prune_shares(pool, r); /* other processes done with it: nothing to wait for */
    if (VPMM_UNLIKELY(r->uses != NULL)) {
        vpmm_i_uses_defer(pool, r); /* other streams use it: deferred until they are done */
        vpmm_i_arena_of(r)->c.frees += vpmm_i_arena_of(r)->priv;
    } else if (VPMM_UNLIKELY(vpmm_i_arena_of(r)->priv)) {
        vpmm_i_arena_free(pool, r); /* a graph pool's: no cache, capture-aware (arena.c) */
    } else if (vpmm_i_cache_put(pool, r->stream, r) != 0) {
        vpmm_i_region_set_free(pool, r, r->stream);
        vpmm_i_index_add(pool, r);
        vpmm_i_region_coalesce(pool, r);
    }
    pool->c.frees++;
out:
    vpmm_i_unlock(pool);
    return st;
}

vpmm_status_t vpmm_i_stream_release(vpmm_pool_t *pool, vpmm_stream_t stream)
{
    vpmm_capture_status_t cap = VPMM_CAPTURE_NONE;
    vpmm_dres_t dres = VPMM_DRV_OK;
    vpmm_stream_key_t key;
    vpmm_stream_rec_t *s;
    vpmm_status_t st;
    /* A stream being captured is still in use: releasing it would end vpmm's record of the
     * capture while CUDA's goes on. Refused, nothing changed. */
    key = vpmm_i_stream_key(pool, stream);
    if (!vpmm_i_stream_is_legacy(key.handle))
        dres = pool->drv->capture_info(pool->drv, key.handle, &cap, NULL, NULL);
    vpmm_i_lock(pool);
    st = vpmm_i_drv_status(pool, dres);
    if (st == VPMM_SUCCESS && cap != VPMM_CAPTURE_NONE) {
        vpmm_i_set_error("vpmm_stream_release: stream %p is being captured; end the capture first",
                         (void *)stream);
        st = VPMM_ERROR_STREAM_CAPTURING;
    }
    if (st != VPMM_SUCCESS) {
        vpmm_i_unlock(pool);
        return st;
    }
    vpmm_i_graphs_stream_released(pool, key);
    for (s = pool->streams; s && !vpmm_i_stream_key_equal(vpmm_i_stream_key_of(s), key);
         s = s->next)
        ;
    if (s != NULL)
        st = vpmm_i_stream_retire(pool, s);
    if (st == VPMM_ERROR_STREAM_CAPTURING)
        vpmm_i_set_error("vpmm_stream_release: the legacy stream's last marker cannot be recorded "
                         "while a capture is in progress (it would invalidate it); release it "
                         "after the capture");
    vpmm_i_unlock(pool);
    return st;
}
