/*
 * segment.c — the pool's segments (vpmm.h): each physical handle at its live address, the unit
 * a collective library registers. vpmm_pool_set_segment_hook hears of each one appearing and
 * going (the core calls vpmm_i_segment where a handle's live address is set or dropped: pages.c's
 * callers at growth, defrag.c's commit_run at a remap, arena.c at a revive and a dissolve, trim.c
 * at a release, pool.c at destruction); vpmm_pool_walk_segments lists those that exist now, in
 * address order, so a listing and the events agree.
 *
 * Under the pool lock; the hook runs under it too.
 */
#include "entry.h"
#include "pages.h"
#include "pool.h"
#include "segment.h"

void vpmm_i_segment_report(vpmm_pool_t *p, vpmm_segment_event_t ev, uintptr_t va, size_t size,
                           const vpmm_arena_t *a)
{
    vpmm_segment_info_t info = { va, size, a->id };
    p->segment_hook(p->segment_user, ev, &info);
}

/* Calls fn on every live handle of chunk c in address order; stops at a nonzero return. */
static int each_live(const vpmm_pool_t *p, const vpmm_chunk_t *c,
                     int (*fn)(const vpmm_phys_t *ph, const vpmm_chunk_t *c, void *ctx), void *ctx)
{
    const size_t pg = p->page_size;
    uintptr_t last = 0;
    for (const vpmm_region_t *r = c->first; r; r = r->next) {
        uintptr_t at, end;
        if (r->state != VPMM_REGION_ALLOCATED && r->state != VPMM_REGION_FREE)
            continue;
        at = vpmm_align_down(r->addr, pg);
        end = r->addr + r->size;
        while (at < end) {
            const vpmm_phys_t *ph = vpmm_i_phys_at(p, at);
            if (ph->va != last && ph->va <= at) { /* a live handle not reported yet */
                last = ph->va;
                if (fn(ph, c, ctx) != 0)
                    return 1;
            }
            at = ph->va + ph->size > at ? ph->va + ph->size : at + pg;
        }
    }
    return 0;
}

typedef struct chunk_ctx {
    vpmm_pool_t *p;
    vpmm_segment_event_t ev;
} chunk_ctx_t;

static int report_one(const vpmm_phys_t *ph, const vpmm_chunk_t *c, void *ctx)
{
    chunk_ctx_t *k = ctx;
    vpmm_i_segment_report(k->p, k->ev, ph->va, ph->size, c->arena);
    return 0;
}

void vpmm_i_segment_chunk(vpmm_pool_t *p, const vpmm_chunk_t *c, vpmm_segment_event_t ev)
{
    chunk_ctx_t k = { p, ev };
    if (p->segment_hook != NULL)
        (void)each_live(p, c, report_one, &k);
}

void vpmm_i_set_segment_hook(vpmm_pool_t *pool, vpmm_segment_hook_t hook, void *user)
{
    vpmm_i_lock(pool);
    pool->segment_hook = hook;
    pool->segment_user = hook != NULL ? user : NULL;
    vpmm_i_unlock(pool);
}

typedef struct walk_ctx {
    vpmm_segment_visitor_t visit;
    void *user;
} walk_ctx_t;

static int visit_one(const vpmm_phys_t *ph, const vpmm_chunk_t *c, void *ctx)
{
    walk_ctx_t *w = ctx;
    vpmm_segment_info_t info = { ph->va, ph->size, c->arena->id };
    return w->visit(&info, w->user);
}

void vpmm_i_walk_segments(const vpmm_pool_t *pool, vpmm_segment_visitor_t visit, void *user)
{
    walk_ctx_t w = { visit, user };
    vpmm_i_lock(pool);
    for (const vpmm_chunk_t *c = pool->chunks; c; c = c->next)
        if (each_live(pool, c, visit_one, &w) != 0)
            break;
    vpmm_i_unlock(pool);
}
