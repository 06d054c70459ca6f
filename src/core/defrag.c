/*
 * defrag.c — phase 0 (zombie reclaim) and phase 2 (grow / defragment by remapping).
 *
 * Phase 2 executes a plan from policy.c in two halves. First every fallible step, each undone in
 * reverse on failure: reserve a chunk if needed, record the markers that will guard the zombies,
 * create the shortfall pages, map new and harvested pages into the hole (harvested pages are now
 * double-mapped: old address and new), grant access, and make the caller's stream wait on the GPU
 * for other streams whose memory it takes. Then the commit, which cannot fail (nodes and table
 * room were reserved first): the hole becomes a FREE span joined with the usable neighbours, each
 * harvested run becomes a ZOMBIE at its old address, and the mapping table learns the new
 * addresses. So a driver failure leaves the pool exactly as it was (no handle, mapping or VA
 * leaks).
 *
 *    before:  [F free][ hole ...............]   ...  [R free: a b c d]
 *    after:   [F free|new|a'|b'|c'|d'][ hole ]  ...  [R|zombie a b c d]
 *
 * Zombies are unmapped once the marker of the stream that last used the memory has completed:
 * by the pool's background worker (worker.c: the unmaps off every malloc's path), or without one
 * in phase 0 of a later malloc; their VA becomes hole again. A graph pool's growth (plan->arena
 * private) runs the same code with a plan that harvests only ready shared pages: no marker, no
 * wait, so it is safe during a capture. Called under the pool lock.
 */
#include <stdlib.h>

#include "arena.h"
#include "defrag.h"
#include "pages.h"
#include "policy.h"
#include "pool.h"
#include "region.h"
#include "segment.h"
#include "stats.h"
#include "stream.h"
#include "va.h"

/* Turn the unmapped prefix [z->addr, z->addr + done) of zombie z into hole. The hole coalesces
 * with its neighbours: z may grow or be freed, so the caller must not look at it afterwards. */
static void zombie_to_hole(vpmm_pool_t *p, vpmm_region_t *z, size_t done)
{
    z = vpmm_i_region_cut(p, z, z->addr, z->addr + done); /* z itself; the rest stays zombie */
    z->state = VPMM_REGION_HOLE;
    z->stream = NULL;
    z->seq = 0;
    vpmm_i_index_add(p, z);
    vpmm_i_region_coalesce(p, z);
}

int vpmm_i_zombie_due(vpmm_pool_t *p, vpmm_region_t *z, int poll)
{
    if (z->busy || vpmm_i_arena_of(z)->pinned)
        return 0; /* the worker is unmapping it; or a graph may still use this address */
    if (z->stream == NULL || vpmm_i_stream_done(z->stream, z->seq))
        return 1;
    if (!poll)
        return 0;
    vpmm_i_stream_poll(p, z->stream);
    return vpmm_i_stream_done(z->stream, z->seq);
}

void vpmm_i_zombie_unmapped(vpmm_pool_t *p, vpmm_region_t *z, size_t done)
{
    const size_t pg = p->page_size;
    for (size_t off = 0; off < done;) {
        vpmm_phys_t *ph = vpmm_i_phys_at(p, z->addr + off);
        for (size_t o = 0; o < ph->size; o += pg)
            vpmm_hmap_remove(&p->maps, z->addr + off + o);
        ph->zombie_maps--;
        off += ph->size;
    }
    if (done > 0)
        zombie_to_hole(p, z, done); /* z is not to be used after this */
}

/* Unmaps the zombies that are due (polling their streams when `poll`, else only those known
 * complete); stops at the first driver failure. */
static void reclaim(vpmm_pool_t *p, int poll)
{
    vpmm_region_t *z = p->zombie_head;
    while (z) {
        vpmm_region_t *next = z->qnext;
        const size_t size = z->size;
        size_t done = 0;
        if (!vpmm_i_zombie_due(p, z, poll)) {
            z = next;
            continue;
        }
        if (vpmm_i_region_reserve(p, 1) != VPMM_SUCCESS)
            return;
        /* A zombie is a run of whole handles (I4): one unmap per mapping. */
        while (done < size) {
            uintptr_t va = z->addr + done;
            vpmm_phys_t *ph = vpmm_i_phys_at(p, va);
            if (vpmm_i_drv_status(p, p->drv->mem_unmap(p->drv, va, ph->size)) != VPMM_SUCCESS)
                break;
            done += ph->size;
        }
        vpmm_i_zombie_unmapped(p, z, done); /* z is not to be used after this */
        if (done < size)
            return; /* a driver failure: try again on a later slow path */
        z = next;
    }
}

void vpmm_i_reclaim_zombies(vpmm_pool_t *p, int poll)
{
    const size_t before = p->c.zombie_bytes;
    if (p->zombie_head == NULL)
        return;
    vpmm_i_nvtx_push(VPMM_NVTX_RECLAIM, p->c.zombie_bytes);
    reclaim(p, poll);
    if (p->c.zombie_bytes < before)
        vpmm_i_chunk_trim(p); /* a chunk whose last zombie went may be empty now */
    vpmm_i_nvtx_pop();
}

/* Other streams the caller must wait for: the latest marker of each whose memory it takes. */
typedef struct wait_need {
    vpmm_stream_rec_t *stream;
    uint64_t seq;
} wait_need_t;

static size_t collect_waits(const vpmm_plan_t *plan, const vpmm_stream_rec_t *s, wait_need_t *w)
{
    size_t n = 0;
    for (size_t i = 0; i < plan->nruns; i++) {
        const vpmm_region_t *src = plan->runs[i].src;
        size_t j;
        if (src->ready || src->stream == s)
            continue;
        for (j = 0; j < n && w[j].stream != src->stream; j++)
            ;
        if (j == n)
            w[n++] = (wait_need_t){ src->stream, src->seq };
        else if (src->seq > w[j].seq)
            w[j].seq = src->seq;
    }
    return n;
}

/* Commit one harvested run: its handles now live at `to` (in arena `dst`), its old VA becomes a
 * zombie. */
static void commit_run(vpmm_pool_t *p, const vpmm_harvest_t *run, uintptr_t to,
                       const vpmm_arena_t *dst)
{
    const size_t pg = p->page_size;
    uintptr_t end = run->addr + run->npages * pg;
    const vpmm_arena_t *src = vpmm_i_arena_of(run->src);
    vpmm_region_t *mid = vpmm_i_region_cut(p, run->src, run->addr, end);

    for (uintptr_t at = run->addr; at < end;) {
        vpmm_phys_t *ph = vpmm_i_phys_at(p, at);
        vpmm_i_segment(p, VPMM_SEGMENT_UNMAPPED, ph, src);
        ph->va = to + (at - run->addr);
        vpmm_i_segment(p, VPMM_SEGMENT_MAPPED, ph, dst);
        ph->zombie_maps++;
        for (size_t off = 0; off < ph->size; off += pg)
            vpmm_hmap_put(&p->maps, ph->va + off, ph); /* room reserved */
        at += ph->size;
    }
    /* Fresh or completed memory is safe to unmap at once; pending memory waits for its marker; a
     * graph pool's zombie waits for its arena to be unpinned (and a capture's free has no
     * marker: the pin covers it). */
    if (mid->ready || mid->seq == VPMM_SEQ_CAPTURE) {
        mid->stream = NULL;
        mid->seq = 0;
    }
    mid->state = VPMM_REGION_ZOMBIE;
    mid->ready = 0;
    vpmm_i_index_add(p, mid);
}

/* Handles in the plan's runs (each run is a sequence of whole handles). */
static size_t run_handles(const vpmm_pool_t *p, const vpmm_plan_t *plan, vpmm_phys_t **out)
{
    size_t n = 0;
    for (size_t i = 0; i < plan->nruns; i++) {
        uintptr_t at = plan->runs[i].addr, end = at + plan->runs[i].npages * p->page_size;
        while (at < end) {
            vpmm_phys_t *ph = vpmm_i_phys_at(p, at);
            if (out != NULL)
                out[n] = ph;
            n++;
            at += ph->size;
        }
    }
    return n;
}

/*
 * Creates the plan's new pages into pages[]. If the device refuses and the plan asked for more
 * than the request needs — a burst's extra pages, or handles of several pages — it tries once
 * more with exactly the missing pages, one handle each, and shrinks the plan to match (the extra
 * lies at the top of the span: plan_growth adds it only where no right neighbour is joined).
 * pages[] has room for one handle per new page.
 */
static vpmm_status_t create_new(vpmm_pool_t *p, vpmm_plan_t *plan, vpmm_phys_t **pages,
                                vpmm_precreated_t *pre)
{
    vpmm_status_t st = vpmm_i_pages_create_from(p, plan->nnew, plan->unit, pages, pre);
    if (st != VPMM_ERROR_OUT_OF_MEMORY || (plan->nnew == plan->nneed && plan->unit == 1))
        return st;
    plan->npages -= plan->nnew - plan->nneed;
    plan->nnew = plan->nneed;
    plan->unit = 1;
    return vpmm_i_pages_create_from(p, plan->nnew, 1, pages, pre);
}

vpmm_status_t vpmm_i_defrag(vpmm_pool_t *p, vpmm_stream_rec_t *s, vpmm_plan_t *plan,
                            vpmm_precreated_t *pre, vpmm_region_t **out_span)
{
    const size_t pg = p->page_size;
    const size_t nruns = run_handles(p, plan, NULL);
    size_t nnew = plan->nnew, hnew = 0, n;
    vpmm_phys_t **pages = NULL;
    wait_need_t *waits = NULL;
    vpmm_chunk_t *chunk = NULL;
    vpmm_region_t *span;
    uintptr_t at;
    size_t nwaits, own = 0;
    vpmm_status_t st;

    /* Host resources first, so the commit cannot fail. */
    VPMM_CHECK(vpmm_i_region_reserve(p, 4 + 2 * plan->nruns));
    if (vpmm_hmap_reserve(&p->maps, plan->npages) != 0 || vpmm_hmap_reserve(&p->allocs, 1) != 0)
        goto host_oom;
    pages = malloc((nnew + nruns + 1) * sizeof *pages); /* create_new may need a handle a page */
    waits = malloc((plan->nruns ? plan->nruns : 1) * sizeof *waits);
    if (pages == NULL || waits == NULL)
        goto host_oom;

    vpmm_i_nvtx_push(plan->npages > nnew ? VPMM_NVTX_DEFRAG : VPMM_NVTX_GROW, plan->npages * pg);
    if (plan->hole == NULL) {
        VPMM_CHECK_GOTO(
            st, vpmm_i_chunk_add(p, plan->arena, plan->npages * pg, plan->small, &chunk), fail);
        vpmm_i_plan_place_in(p, plan, chunk->first);
    }
    /* Zombie guards: the marker covering each pending run must exist. */
    for (size_t i = 0; i < plan->nruns; i++) {
        vpmm_region_t *src = plan->runs[i].src;
        if (!src->ready && src->seq != VPMM_SEQ_CAPTURE)
            VPMM_CHECK_GOTO(st, vpmm_i_stream_mark(p, src->stream, src->seq), undo_chunk);
    }
    if (nnew > 0) {
        VPMM_CHECK_GOTO(st, create_new(p, plan, pages, pre), undo_chunk);
        nnew = plan->nnew;
        hnew = vpmm_i_pages_handles(nnew, plan->unit);
    }
    n = hnew + nruns;
    run_handles(p, plan, pages + hnew);
    VPMM_CHECK_GOTO(st, vpmm_i_pages_map(p, plan->map_at, pages, n), undo_pages);
    nwaits = collect_waits(plan, s, waits);
    for (size_t i = 0; i < nwaits; i++) {
        vpmm_drv_event_t ev = vpmm_i_stream_marker(waits[i].stream, waits[i].seq);
        st = vpmm_i_drv_status(p, p->drv->stream_wait_event(p->drv, s->handle, ev));
        if (st != VPMM_SUCCESS)
            goto undo_map; /* waits already enqueued only order work; they change no state */
    }

    /* ---- commit: nothing below can fail ---- */
    span = vpmm_i_hole_carve(p, plan->hole, plan->map_at, plan->npages * pg);
    at = plan->map_at;
    for (size_t i = 0; i < hnew; at += pages[i]->size, i++) {
        vpmm_i_phys_link(p, pages[i], at);
        vpmm_i_segment(p, VPMM_SEGMENT_MAPPED, pages[i], plan->arena);
    }
    for (size_t i = 0; i < plan->nruns; i++) {
        own += vpmm_i_arena_of(plan->runs[i].src) == plan->arena ? plan->runs[i].npages : 0;
        commit_run(p, &plan->runs[i], at, plan->arena);
        at += plan->runs[i].npages * pg;
    }
    /* Join the usable neighbours: [left][span][right] becomes one region of the caller. */
    if (plan->left) {
        vpmm_i_index_del(p, plan->left);
        vpmm_i_region_absorb_next(p, plan->left);
        span = plan->left;
    }
    if (plan->right) {
        vpmm_i_index_del(p, plan->right);
        vpmm_i_region_absorb_next(p, span);
    }
    /* A private span holds only fresh or known-complete pages (and ready neighbours): ready. */
    vpmm_i_region_set_free(p, span, plan->arena->priv ? NULL : s);
    vpmm_i_index_add(p, span);
    span = vpmm_i_region_coalesce(p, span);

    p->c.pages_remapped += plan->npages - nnew;
    p->c.grows += nnew > 0;
    p->c.defrags += plan->npages > nnew;
    p->c.cross_stream_waits += nwaits;
    if (plan->arena->priv) {
        plan->arena->c.pages_remapped += own;
        plan->arena->c.pages_taken += plan->npages - nnew - own; /* from the shared arena */
        plan->arena->c.pages_created += nnew;
        plan->arena->c.grows += plan->npages > 0;
        vpmm_i_arena_note_peaks(plan->arena);
    } else if (nnew > 0) {
        /* Same-size growths with no free in between make an allocation burst (policy.c). */
        p->grow_streak = p->c.frees == p->grow_frees_mark && plan->req_pages == p->grow_req
                             ? p->grow_streak + 1
                             : 1;
        p->grow_req = plan->req_pages;
        p->grow_frees_mark = p->c.frees;
    }
    vpmm_i_note_peaks(p);
    vpmm_i_nvtx_pop();
    free(pages);
    free(waits);
    *out_span = span;
    return VPMM_SUCCESS;

undo_map:
    vpmm_i_pages_unmap(p, plan->map_at, pages, n);
undo_pages:
    vpmm_i_pages_destroy(p, pages, hnew);
undo_chunk:
    if (chunk != NULL)
        vpmm_i_chunk_remove(p, chunk);
fail:
    if (st == VPMM_ERROR_OUT_OF_MEMORY && !plan->arena->priv)
        p->grow_streak = 0; /* the burst is over: the next growth asks for its own pages only */
    vpmm_i_nvtx_pop();
    free(pages);
    free(waits);
    return st;
host_oom:
    free(pages);
    free(waits);
    vpmm_i_set_error("out of host memory for a defragmentation");
    return VPMM_ERROR_HOST_OUT_OF_MEMORY;
}
