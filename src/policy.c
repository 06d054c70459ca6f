/*
 * policy.c — where an allocation goes: the decisions, not their execution.
 *
 *  Phase 1a/1b  vpmm_i_fit_nowait: best fit over the caller's own pending regions and the ready
 *               tree (both usable at once: stream order, or known completion). 1b is the same
 *               search after the caller has polled other streams' markers.
 *  Phase 1c     vpmm_i_fit_wait: best fit over other streams' pending regions; the caller will make
 *               its stream wait for the owner's marker on the GPU. Cheaper than phase 2, which
 *               would insert the same wait *and* remap pages.
 *  Phase 2      vpmm_i_plan_make: choose a hole and the usable free neighbours to extend, so that
 *               the fewest pages must be mapped; then choose which fully free pages to move there:
 *               the caller's stream first (no wait), then ready memory (no wait), then other
 *               streams' pending memory, oldest first (GPU-side wait). Only the shortfall is
 *               created. Within a class, smallest regions first: scattered fragments are the
 *               memory nobody else can use, and large free regions stay whole.
 *
 * Pure decisions over the indexes (the one driver call is capture_info, to skip streams that are
 * being captured). Called under the pool lock.
 */
#include <stdlib.h>

#include "pool.h"

static vpmm_region_t *region_of(vpmm_rb_node_t *n)
{
    return n ? VPMM_CONTAINER_OF(n, vpmm_region_t, node) : NULL;
}

/* The better of two best-fit candidates: smaller, then lower address. */
static vpmm_region_t *better(vpmm_region_t *a, vpmm_region_t *b)
{
    if (a == NULL)
        return b;
    if (b == NULL)
        return a;
    if (b->size != a->size)
        return b->size < a->size ? b : a;
    return b->addr < a->addr ? b : a;
}

vpmm_region_t *vpmm_i_fit_nowait(vpmm_pool_t *p, vpmm_strm_t *s, size_t size)
{
    vpmm_region_t *own = region_of(vpmm_rb_lower_bound(&s->free_tree, size, 0));
    vpmm_region_t *ready = region_of(vpmm_rb_lower_bound(&p->ready, size, 0));
    /* On a tie prefer the caller's own memory: ready memory serves every stream. */
    if (own && ready && ready->size == own->size)
        return own;
    return better(own, ready);
}

vpmm_region_t *vpmm_i_fit_wait(vpmm_pool_t *p, vpmm_strm_t *s, size_t size)
{
    vpmm_region_t *best = NULL;
    vpmm_strm_t *lists[2] = { p->streams, p->retired };
    for (int l = 0; l < 2; l++)
        for (vpmm_strm_t *t = lists[l]; t; t = t->next)
            if (t != s)
                best = better(best, region_of(vpmm_rb_lower_bound(&t->free_tree, size, 0)));
    return best;
}

void vpmm_i_plan_fini(vpmm_plan_t *plan)
{
    free(plan->runs);
    plan->runs = NULL;
    plan->nruns = plan->runs_cap = 0;
}

static size_t pages_for(size_t bytes, size_t pg)
{
    return bytes / pg + (bytes % pg != 0);
}

/* Fully free pages inside a FREE region: [first, first + count*pg). */
static size_t full_pages(const vpmm_region_t *r, size_t pg, uintptr_t *first)
{
    uintptr_t lo = vpmm_align_up(r->addr, pg);
    uintptr_t hi = vpmm_align_down(r->addr + r->size, pg);
    *first = lo;
    return hi > lo ? (hi - lo) / pg : 0;
}

static int usable(const vpmm_region_t *r, const vpmm_strm_t *s)
{
    return r && r->state == VPMM_REGION_FREE && (r->ready || r->stream == s);
}

/* A candidate span: k pages into hole h, extending left/right; smaller (k, hole size, addr) wins.
 */
static void consider(vpmm_plan_t *best, size_t k, vpmm_region_t *h, vpmm_region_t *left,
                     vpmm_region_t *right, uintptr_t map_at)
{
    if (best->hole != NULL) {
        if (k > best->npages)
            return;
        if (k == best->npages &&
            (h->size > best->hole->size || (h->size == best->hole->size && map_at >= best->map_at)))
            return;
    }
    best->hole = h;
    best->left = left;
    best->right = right;
    best->npages = k;
    best->map_at = map_at;
}

static void choose_span(vpmm_pool_t *p, vpmm_strm_t *s, size_t size, vpmm_plan_t *plan)
{
    const size_t pg = p->page_size;
    for (vpmm_rb_node_t *n = vpmm_rb_first(&p->holes); n; n = vpmm_rb_next(n)) {
        vpmm_region_t *h = region_of(n);
        vpmm_region_t *f = usable(h->prev, s) ? h->prev : NULL;
        vpmm_region_t *g = usable(h->next, s) ? h->next : NULL;
        size_t hp = h->size / pg, k;

        k = pages_for(size, pg);
        if (k <= hp)
            consider(plan, k, h, NULL, NULL, h->addr);
        /* Grow a usable free region upwards into the hole:  [f][new pages|  hole rest ] */
        if (f && (k = pages_for(size - f->size, pg)) <= hp)
            consider(plan, k, h, f, NULL, h->addr);
        /* ... or downwards from the hole's top:              [ hole rest |new pages][g] */
        if (g && (k = pages_for(size - g->size, pg)) <= hp)
            consider(plan, k, h, NULL, g, h->addr + (hp - k) * pg);
        /* ... or fill the hole and join both:                [f][  all new pages   ][g] */
        if (f && g && f->size + h->size + g->size >= size)
            consider(plan, hp, h, f, g, h->addr);
    }
    if (plan->hole == NULL)
        plan->npages = pages_for(size, pg); /* a fresh chunk will be reserved */
}

static vpmm_status_t add_run(vpmm_plan_t *plan, vpmm_region_t *src, uintptr_t addr, size_t np)
{
    if (plan->nruns == plan->runs_cap) {
        size_t cap = plan->runs_cap ? plan->runs_cap * 2 : 8;
        vpmm_harvest_t *runs = realloc(plan->runs, cap * sizeof *runs);
        if (runs == NULL) {
            vpmm_i_set_error("out of host memory for a defragmentation plan");
            return VPMM_ERROR_HOST_OUT_OF_MEMORY;
        }
        plan->runs = runs;
        plan->runs_cap = cap;
    }
    plan->runs[plan->nruns++] = (vpmm_harvest_t){ src, addr, np };
    return VPMM_SUCCESS;
}

/* Takes up to *need fully free pages from r (its highest ones), unless r is part of the span. */
static vpmm_status_t harvest_from(vpmm_pool_t *p, vpmm_plan_t *plan, vpmm_region_t *r, size_t *need)
{
    uintptr_t first;
    size_t np, take;
    if (r == plan->left || r == plan->right)
        return VPMM_SUCCESS;
    np = full_pages(r, p->page_size, &first);
    if (np == 0)
        return VPMM_SUCCESS;
    take = VPMM_MIN(np, *need);
    VPMM_CHECK(add_run(plan, r, first + (np - take) * p->page_size, take));
    *need -= take;
    return VPMM_SUCCESS;
}

static vpmm_status_t harvest_tree(vpmm_pool_t *p, vpmm_plan_t *plan, vpmm_rbtree_t *t, size_t *need)
{
    /* Ascending size: fragments first. Regions smaller than a page have no full page. */
    for (vpmm_rb_node_t *n = vpmm_rb_lower_bound(t, p->page_size, 0); n && *need;
         n = vpmm_rb_next(n))
        VPMM_CHECK(harvest_from(p, plan, region_of(n), need));
    return VPMM_SUCCESS;
}

static int by_age(const void *a, const void *b)
{
    const vpmm_region_t *x = *(vpmm_region_t *const *)a, *y = *(vpmm_region_t *const *)b;
    return (x->age > y->age) - (x->age < y->age);
}

/* A stream whose pending memory can be moved: its marker exists, or can be recorded now. */
static int markable(vpmm_pool_t *p, const vpmm_strm_t *t)
{
    vpmm_capture_status_t cap;
    uint64_t id;
    if (t->retired || t->dirty_regions == 0)
        return 1;
    return p->drv->capture_info(p->drv, t->handle, &cap, &id) == VPMM_DRV_OK &&
           cap == VPMM_CAPTURE_NONE;
}

static vpmm_status_t harvest_others(vpmm_pool_t *p, vpmm_strm_t *s, vpmm_plan_t *plan, size_t *need)
{
    vpmm_strm_t *lists[2] = { p->streams, p->retired };
    vpmm_region_t **cand = NULL;
    size_t n = 0, cap = 0;
    vpmm_status_t st = VPMM_SUCCESS;

    for (int l = 0; l < 2; l++) {
        for (vpmm_strm_t *t = lists[l]; t; t = t->next) {
            if (t == s || t->pending_bytes < p->page_size || !markable(p, t))
                continue;
            for (vpmm_rb_node_t *nd = vpmm_rb_lower_bound(&t->free_tree, p->page_size, 0); nd;
                 nd = vpmm_rb_next(nd)) {
                if (n == cap) {
                    size_t ncap = cap ? cap * 2 : 64;
                    vpmm_region_t **c = realloc(cand, ncap * sizeof *c);
                    if (c == NULL) {
                        vpmm_i_set_error("out of host memory for a defragmentation plan");
                        free(cand);
                        return VPMM_ERROR_HOST_OUT_OF_MEMORY;
                    }
                    cand = c;
                    cap = ncap;
                }
                cand[n++] = region_of(nd);
            }
        }
    }
    if (n > 1)
        qsort(cand, n, sizeof *cand, by_age);
    for (size_t i = 0; i < n && *need && st == VPMM_SUCCESS; i++)
        st = harvest_from(p, plan, cand[i], need);
    free(cand);
    return st;
}

void vpmm_i_plan_place_in(vpmm_pool_t *p, vpmm_plan_t *plan, vpmm_region_t *hole)
{
    (void)p;
    plan->hole = hole;
    plan->left = plan->right = NULL;
    plan->map_at = hole->addr;
}

vpmm_status_t vpmm_i_plan_make(vpmm_pool_t *p, vpmm_strm_t *s, size_t size, vpmm_plan_t *plan)
{
    size_t need;
    vpmm_status_t st;

    choose_span(p, s, size, plan);
    need = plan->npages;
    st = harvest_tree(p, plan, &s->free_tree, &need);
    if (st == VPMM_SUCCESS && need)
        st = harvest_tree(p, plan, &p->ready, &need);
    if (st == VPMM_SUCCESS && need)
        st = harvest_others(p, s, plan, &need);
    if (st != VPMM_SUCCESS) {
        vpmm_i_plan_fini(plan);
        return st;
    }
    plan->nnew = need;
    return VPMM_SUCCESS;
}
