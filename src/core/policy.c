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
 *               the caller's stream first (no wait), then ready memory (no wait), then free
 *               pages of idle graph pools (no graph or capture uses them), then other
 *               streams' pending memory, oldest first (GPU-side wait). Only the shortfall is
 *               created. Within a class, smallest regions first: scattered fragments are the
 *               memory nobody else can use, and large free regions stay whole.
 *
 *  Private     vpmm_i_fit_private / vpmm_i_plan_make_private: a graph pool's arena, whose pages
 *               never move; it grows into its own holes with fresh pages or the shared arena's
 *               ready pages only (no marker, wait or event query: it runs during a capture).
 *
 * Pure decisions over the indexes (the one driver call is capture_info, to skip streams that are
 * being captured: vpmm_i_stream_markable). Called under the pool lock.
 */
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "arena.h"
#include "pages.h"
#include "policy.h"
#include "pool.h"
#include "region.h"
#include "stream.h"

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

/* Best fit in a shared tree within the request's size class (I13): the first region whose key is
 * at least the request's; a large request's search ends where the small keys begin. */
static vpmm_region_t *fit_shared(const vpmm_rbtree_t *t, uint64_t key)
{
    vpmm_rb_node_t *n = vpmm_rb_lower_bound(t, key, 0);
    if (n == NULL || ((n->k1 ^ key) & VPMM_KEY_SMALL))
        return NULL;
    return region_of(n);
}

vpmm_region_t *vpmm_i_fit_private(vpmm_pool_t *p, vpmm_arena_t *a, vpmm_stream_rec_t *s,
                                  size_t size)
{
    vpmm_side_t *side = vpmm_i_side_find(a, s);
    vpmm_region_t *own = side ? region_of(vpmm_rb_lower_bound(&side->tree, size, 0)) : NULL;
    vpmm_region_t *ready = region_of(vpmm_rb_lower_bound(&a->ready, size, 0));
    (void)p;
    if (own && ready && ready->size == own->size)
        return own;
    return better(own, ready);
}

static vpmm_region_t *fit_nowait_key(vpmm_pool_t *p, vpmm_stream_rec_t *s, uint64_t key)
{
    vpmm_region_t *own = fit_shared(&s->free_tree, key);
    vpmm_region_t *ready = fit_shared(&p->shared.ready, key);
    /* On a tie prefer the caller's own memory: ready memory serves every stream. */
    if (own && ready && ready->size == own->size)
        return own;
    return better(own, ready);
}

static vpmm_region_t *fit_wait_key(vpmm_pool_t *p, vpmm_stream_rec_t *s, uint64_t key)
{
    vpmm_region_t *best = NULL;
    vpmm_stream_rec_t *lists[2] = { p->streams, p->retired };
    for (int l = 0; l < 2; l++)
        for (vpmm_stream_rec_t *t = lists[l]; t; t = t->next)
            if (t != s)
                best = better(best, fit_shared(&t->free_tree, key));
    return best;
}

vpmm_region_t *vpmm_i_fit_nowait(vpmm_pool_t *p, vpmm_stream_rec_t *s, size_t size)
{
    return fit_nowait_key(p, s, vpmm_i_fit_key(p, size));
}

vpmm_region_t *vpmm_i_fit_wait(vpmm_pool_t *p, vpmm_stream_rec_t *s, size_t size)
{
    return fit_wait_key(p, s, vpmm_i_fit_key(p, size));
}

vpmm_region_t *vpmm_i_fit_across(vpmm_pool_t *p, vpmm_stream_rec_t *s, size_t size, int wait)
{
    const uint64_t key = vpmm_i_fit_key(p, size) ^ VPMM_KEY_SMALL;
    return wait ? fit_wait_key(p, s, key) : fit_nowait_key(p, s, key);
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

/* A free neighbour the span may absorb: ready, or (shared arena) pending on the caller's stream.
 * In a private arena only ready memory: the span becomes ready memory of the arena. */
static int usable(const vpmm_region_t *r, const vpmm_stream_rec_t *s)
{
    if (r == NULL || r->state != VPMM_REGION_FREE || r->uses != NULL)
        return 0; /* a deferred free (uses.c) is nobody's until its gates complete */
    return r->ready || (r->stream == s && !vpmm_i_arena_of(r)->priv);
}

/* Pages of whole handles lying inside free region r: what a harvest could take from it. */
static size_t whole_pages(const vpmm_pool_t *p, const vpmm_region_t *r)
{
    return vpmm_i_whole_handle_bytes(p, r->addr, r->size) / p->page_size;
}

/*
 * The span search. By default the candidate that maps the fewest pages wins (each page mapped is a
 * remap or a creation, ~40 us on an H100). With `supply` set (SIZE_MAX: not set) it is the one
 * that creates the fewest: the pages it maps beyond what the harvest can give, which is `supply`
 * whole free pages less those of the neighbours it absorbs (they are part of the span, not moved).
 * That is the second try when the cap or the device refuses the first plan's new pages: joining
 * a neighbour saves remaps but may need new memory where moving it would not.
 */
typedef struct span_search {
    vpmm_plan_t *best;
    size_t supply;   /* SIZE_MAX: fewest pages mapped; else fewest created */
    size_t best_new; /* pages the best candidate creates (fewest-created search) */
} span_search_t;

/* A candidate span: k pages into hole h, extending left/right; smaller (created if asked, k, hole
 * size, addr) wins. */
static void consider(const vpmm_pool_t *p, span_search_t *q, size_t k, vpmm_region_t *h,
                     vpmm_region_t *left, vpmm_region_t *right, uintptr_t map_at)
{
    vpmm_plan_t *best = q->best;
    size_t created = 0;
    if (q->supply != SIZE_MAX) {
        size_t absorbed = (left ? whole_pages(p, left) : 0) + (right ? whole_pages(p, right) : 0);
        size_t avail = q->supply - VPMM_MIN(q->supply, absorbed);
        created = k > avail ? k - avail : 0;
    }
    if (best->hole != NULL) {
        if (created != q->best_new) {
            if (created > q->best_new)
                return;
        } else if (k > best->npages) {
            return;
        } else if (k == best->npages && (h->size > best->hole->size ||
                                         (h->size == best->hole->size && map_at >= best->map_at))) {
            return;
        }
    }
    q->best_new = created;
    best->hole = h;
    best->left = left;
    best->right = right;
    best->npages = k;
    best->map_at = map_at;
}

static void choose_span(vpmm_pool_t *p, vpmm_stream_rec_t *s, size_t size, size_t supply,
                        vpmm_plan_t *plan)
{
    const size_t pg = p->page_size;
    span_search_t q = { plan, supply, 0 };
    /* A small request of the shared arena maps its pages in a small chunk, any other in a large
     * one (I13): the holes of the other class are not candidates. */
    plan->small = !plan->arena->priv && vpmm_i_is_small(p, size);
    for (vpmm_rb_node_t *n = vpmm_rb_first(&plan->arena->holes); n; n = vpmm_rb_next(n)) {
        vpmm_region_t *h = region_of(n);
        if (h->chunk->small != plan->small)
            continue;
        vpmm_region_t *f = usable(h->prev, s) ? h->prev : NULL;
        vpmm_region_t *g = usable(h->next, s) ? h->next : NULL;
        size_t hp = h->size / pg, k;

        k = pages_for(size, pg);
        if (k <= hp)
            consider(p, &q, k, h, NULL, NULL, h->addr);
        /* Grow a usable free region upwards into the hole:  [f][new pages|  hole rest ] */
        if (f && (k = pages_for(size - f->size, pg)) <= hp)
            consider(p, &q, k, h, f, NULL, h->addr);
        /* ... or downwards from the hole's top:              [ hole rest |new pages][g] */
        if (g && (k = pages_for(size - g->size, pg)) <= hp)
            consider(p, &q, k, h, NULL, g, h->addr + (hp - k) * pg);
        /* ... or fill the hole and join both:                [f][  all new pages   ][g] */
        if (f && g && f->size + h->size + g->size >= size)
            consider(p, &q, hp, h, f, g, h->addr);
    }
    if (plan->hole == NULL)
        plan->npages = pages_for(size, pg); /* a fresh chunk will be reserved */
}

static vpmm_status_t add_run(vpmm_plan_t *plan, vpmm_region_t *src, uintptr_t addr, size_t np)
{
    if (VPMM_GROW(plan->runs, plan->runs_cap, plan->nruns + 1, 8) != 0) {
        vpmm_i_set_error("out of host memory for a defragmentation plan");
        return VPMM_ERROR_HOST_OUT_OF_MEMORY;
    }
    plan->runs[plan->nruns++] = (vpmm_harvest_t){ src, addr, np };
    return VPMM_SUCCESS;
}

/*
 * Takes whole handles lying entirely inside the free region r, from its top down, as long as each
 * fits in what is still needed (*need pages); consecutive ones form one run. Skips r when it is
 * part of the span. A handle that straddles r's edge, or is larger than what is still needed,
 * stays (the driver moves only whole handles):
 *
 *     r: [..|h3 |  h2  | h1 |..]   need 3 pages, h1 = 1 page, h2 = 2, h3 = 4
 *     run = [h2 h1]; h3 stays
 */
static vpmm_status_t harvest_from(vpmm_pool_t *p, vpmm_plan_t *plan, vpmm_region_t *r, size_t *need)
{
    const size_t pg = p->page_size;
    const uintptr_t lo = vpmm_align_up(r->addr, pg), hi = vpmm_align_down(r->addr + r->size, pg);
    uintptr_t at = hi, run_lo = 0, run_hi = 0;

    if (r == plan->left || r == plan->right)
        return VPMM_SUCCESS;
    while (at > lo && *need > 0) {
        const vpmm_phys_t *ph = vpmm_i_phys_at(p, at - pg);
        uintptr_t start = ph->va;
        size_t np = ph->size / pg;
        if (start < lo)
            break; /* straddles the region's start */
        if (start + ph->size > hi || np > *need) {
            if (run_hi > run_lo)
                VPMM_CHECK(add_run(plan, r, run_lo, (run_hi - run_lo) / pg));
            run_lo = run_hi = 0;
            at = start;
            continue;
        }
        if (run_hi == run_lo)
            run_hi = start + ph->size;
        run_lo = start;
        *need -= np;
        at = start;
    }
    if (run_hi > run_lo)
        VPMM_CHECK(add_run(plan, r, run_lo, (run_hi - run_lo) / pg));
    return VPMM_SUCCESS;
}

static vpmm_status_t harvest_tree(vpmm_pool_t *p, vpmm_plan_t *plan, vpmm_rbtree_t *t, size_t *need)
{
    /* Ascending size: fragments first (the large class, then the small one: I13). Regions smaller
     * than a page have no full page. */
    for (vpmm_rb_node_t *n = vpmm_rb_lower_bound(t, p->page_size, 0); n && *need;
         n = vpmm_rb_next(n))
        if (region_of(n)->size >= p->page_size)
            VPMM_CHECK(harvest_from(p, plan, region_of(n), need));
    return VPMM_SUCCESS;
}

/* The same over a private arena's side tree, taking only regions freed during the capture
 * (the others wait for a marker, which cannot be recorded on a capturing stream). */
static vpmm_status_t harvest_capture_pending(vpmm_pool_t *p, vpmm_plan_t *plan, vpmm_side_t *side,
                                             size_t *need)
{
    if (side == NULL)
        return VPMM_SUCCESS;
    for (vpmm_rb_node_t *n = vpmm_rb_lower_bound(&side->tree, p->page_size, 0); n && *need;
         n = vpmm_rb_next(n))
        if (region_of(n)->seq == VPMM_SEQ_CAPTURE)
            VPMM_CHECK(harvest_from(p, plan, region_of(n), need));
    return VPMM_SUCCESS;
}

static int by_age(const void *a, const void *b)
{
    const vpmm_region_t *x = *(vpmm_region_t *const *)a, *y = *(vpmm_region_t *const *)b;
    return (x->age > y->age) - (x->age < y->age);
}

/* A stream whose pending memory can be moved: its marker exists, or can be recorded now. */
static int markable(vpmm_pool_t *p, const vpmm_stream_rec_t *t)
{
    if (t->retired || t->dirty_regions == 0)
        return 1;
    return vpmm_i_stream_markable(p, t);
}

static vpmm_status_t harvest_others(vpmm_pool_t *p, vpmm_stream_rec_t *s, vpmm_plan_t *plan,
                                    size_t *need)
{
    vpmm_stream_rec_t *lists[2] = { p->streams, p->retired };
    vpmm_region_t **cand = NULL;
    size_t n = 0, cap = 0;
    vpmm_status_t st = VPMM_SUCCESS;

    for (int l = 0; l < 2; l++) {
        for (vpmm_stream_rec_t *t = lists[l]; t; t = t->next) {
            if (t == s || t->pending_bytes < p->page_size || !markable(p, t))
                continue;
            for (vpmm_rb_node_t *nd = vpmm_rb_lower_bound(&t->free_tree, p->page_size, 0); nd;
                 nd = vpmm_rb_next(nd)) {
                if (region_of(nd)->size < p->page_size)
                    continue; /* a small chunk's fragment (I13): no whole page */
                if (VPMM_GROW(cand, cap, n + 1, 64) != 0) {
                    vpmm_i_set_error("out of host memory for a defragmentation plan");
                    free(cand);
                    return VPMM_ERROR_HOST_OUT_OF_MEMORY;
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

/*
 * How the pages the plan creates are cut into handles, and whether to create more than needed.
 * Per-handle driver costs dominate growth (H100: ~41 us per 2 MiB handle, ~120 us per 1 GiB), so:
 *  - a request for at least GROWTH_BIG_BYTES of new memory gets handles of up to 1 GiB: one
 *    request fills them, and when it is freed they move (or are reused) whole;
 *  - a homogeneous allocation burst — GROWTH_STREAK growths in a row for requests of the same
 *    number of pages, with no free in between (a model's layers being loaded, KV-cache blocks being
 * added) — is expected to go on: each further growth creates one handle of a quarter of what is
 * mapped (at least the request, at most 1 GiB), so growth is geometric — the number of handles
 *    grows with the logarithm of the size reached — and at most a quarter of the memory is
 *    unused when the burst ends;
 *  - anything else gets one handle per page (VPMM_HANDLE_PAGES raises that: handles of up to
 *    that many pages, fewer driver calls, less freedom to move): every page stays movable on
 *    its own. Real programs interleave frees with their growth (both traces do), and then nothing
 *    is created ahead.
 * The first two make handles of several pages that smaller blocks may later share, and a free
 * page beside a live block in such a handle cannot be gathered (the driver maps whole handles).
 * VPMM_LARGE_HANDLES=0 turns both off: every growth is an ordinary one, so that with single pages
 * the near-full rule holds in full (docs/ALGORITHM.md).
 */
#define GROWTH_BIG_BYTES ((size_t)1 << 30)
#define GROWTH_STREAK    8 /* 4 is the least both traces tolerate: twice that, for margin */

/* Pages that may still be created under the pool's cap (opt.max_bytes; SIZE_MAX without one). */
static size_t cap_room(const vpmm_pool_t *p)
{
    if (p->opt.max_bytes == 0)
        return SIZE_MAX;
    return (p->opt.max_bytes - VPMM_MIN(p->opt.max_bytes, p->c.mapped_bytes)) / p->page_size;
}

/* The plan's shortfall must fit under the cap, else the malloc is out of memory. */
static vpmm_status_t cap_check(vpmm_pool_t *p, vpmm_plan_t *plan)
{
    if (plan->nnew <= cap_room(p))
        return VPMM_SUCCESS;
    p->oom_cause = VPMM_OOM_CAP; /* for the report: the cap, not the device, said no */
    vpmm_i_plan_fini(plan);
    return VPMM_ERROR_OUT_OF_MEMORY;
}

/* Pages the device can still create, as far as it knows (SIZE_MAX if it cannot say), plus the
 * memory this malloc created already. */
static size_t device_room(vpmm_pool_t *p, size_t ours)
{
    size_t dfree, dtotal;
    if (p->drv->mem_get_info(p->drv, &dfree, &dtotal) != VPMM_DRV_OK)
        return SIZE_MAX;
    return (dfree + VPMM_MIN(ours, SIZE_MAX - dfree)) / p->page_size;
}

/* Pages per handle of an ordinary growth of nnew pages: VPMM_HANDLE_PAGES at most. */
static size_t ordinary_unit(const vpmm_pool_t *p, size_t nnew)
{
    return VPMM_MAX((size_t)1, VPMM_MIN(nnew, p->opt.handle_pages));
}

/* A large growth's handles: 1 GiB, unless VPMM_LARGE_HANDLES=0 makes it an ordinary one. */
static size_t large_unit(const vpmm_pool_t *p, size_t nnew)
{
    if (p->opt.large_handles && nnew * p->page_size >= GROWTH_BIG_BYTES)
        return VPMM_MAX((size_t)1, GROWTH_BIG_BYTES / p->page_size);
    return ordinary_unit(p, nnew);
}

static void plan_growth(vpmm_pool_t *p, vpmm_plan_t *plan, size_t ours)
{
    const size_t pg = p->page_size;
    const size_t big = VPMM_MAX((size_t)1, GROWTH_BIG_BYTES / pg);

    plan->unit = 1;
    if (plan->nnew == 0)
        return;
    if (p->opt.large_handles && p->grow_streak >= GROWTH_STREAK &&
        p->c.frees == p->grow_frees_mark && plan->req_pages == p->grow_req && plan->right == NULL) {
        size_t room = plan->hole ? (plan->hole->addr + plan->hole->size - plan->map_at) / pg
                                 : p->opt.va_size / pg;
        size_t target = VPMM_MAX(p->c.mapped_bytes / pg / 4, plan->nnew);
        target = VPMM_MIN(target, VPMM_MAX(big, plan->nnew));
        target = VPMM_MIN(target, plan->nnew + (room - plan->npages));
        /* Never past the cap, and never more than the device has left: a burst that fills the
         * device (KV-cache blocks) must get its last pages too. */
        target = VPMM_MIN(target, VPMM_MIN(cap_room(p), device_room(p, ours)));
        target = VPMM_MAX(plan->nnew, target);
        plan->npages += target - plan->nnew;
        plan->nnew = target;
        plan->unit = VPMM_MIN(target, big);
        return;
    }
    plan->unit = large_unit(p, plan->nnew);
}

/* Free pages of private arenas no graph and no capture uses: they may move like shared ones. */
static vpmm_status_t harvest_idle_private(vpmm_pool_t *p, vpmm_plan_t *plan, size_t *need)
{
    for (vpmm_arena_t *a = p->privates; a && *need; a = a->next)
        if (!a->pinned && a->captures == 0)
            VPMM_CHECK(harvest_tree(p, plan, &a->ready, need));
    return VPMM_SUCCESS;
}

/*
 * The harvest, in order of preference. Shared: the caller's stream first (no wait), then ready
 * memory (no wait), then idle graph pools' ready memory, then other streams oldest first (a
 * GPU-side wait). Private (a graph pool's growth, during a capture): the arena's own free pages —
 * the capturing stream's frees of this capture (stream order makes them its to reuse), then
 * ready ones; mapped again at the span, they stay mapped where they were too (a zombie kept while
 * the arena is pinned), so graphs that used the old addresses still find them; graphs sharing a
 * pool run one after another, as with any reuse — then ready shared memory, known complete: it
 * moves without a marker, a wait or a query, which a capture forbids.
 */
static vpmm_status_t harvest(vpmm_pool_t *p, vpmm_stream_rec_t *s, vpmm_plan_t *plan, size_t *need)
{
    vpmm_arena_t *a = plan->arena;
    vpmm_status_t st;
    if (a->priv) {
        st = harvest_capture_pending(p, plan, vpmm_i_side_find(a, s), need);
        if (st == VPMM_SUCCESS && *need)
            st = harvest_tree(p, plan, &a->ready, need);
        if (st == VPMM_SUCCESS && *need)
            st = harvest_tree(p, plan, &p->shared.ready, need);
        return st;
    }
    /* The caller's own pending memory needs its marker (the zombie's guard), other streams'
     * memory a GPU-side wait too: neither on the legacy stream during a capture (stream.c). */
    st = VPMM_SUCCESS;
    if (markable(p, s))
        st = harvest_tree(p, plan, &s->free_tree, need);
    if (st == VPMM_SUCCESS && *need)
        st = harvest_tree(p, plan, &p->shared.ready, need);
    if (st == VPMM_SUCCESS && *need)
        st = harvest_idle_private(p, plan, need);
    if (st == VPMM_SUCCESS && *need && vpmm_i_stream_may_wait(p, s))
        st = harvest_others(p, s, plan, need);
    return st;
}

/* Whole free pages the harvest could give to a span that absorbs no neighbour. */
static vpmm_status_t harvest_supply(vpmm_pool_t *p, vpmm_stream_rec_t *s, vpmm_arena_t *a,
                                    size_t *out)
{
    vpmm_plan_t scratch;
    size_t need = SIZE_MAX;
    vpmm_status_t st;
    memset(&scratch, 0, sizeof scratch);
    scratch.arena = a;
    st = harvest(p, s, &scratch, &need);
    vpmm_i_plan_fini(&scratch);
    *out = SIZE_MAX - need;
    return st;
}

int vpmm_i_plan_uses(const vpmm_pool_t *p, const vpmm_plan_t *plan, uintptr_t va, size_t bytes)
{
    const vpmm_region_t *nb[2] = { plan->left, plan->right };
    for (size_t i = 0; i < 2; i++)
        if (nb[i] != NULL && va < nb[i]->addr + nb[i]->size && va + bytes > nb[i]->addr)
            return 1;
    for (size_t i = 0; i < plan->nruns; i++)
        if (va < plan->runs[i].addr + plan->runs[i].npages * p->page_size &&
            va + bytes > plan->runs[i].addr)
            return 1;
    return 0;
}

typedef struct bigger {
    vpmm_region_t *src;
    uintptr_t va;
    size_t np; /* SIZE_MAX: none found */
} bigger_t;

/* The smallest whole handle of more than `need` pages inside the free regions of tree t, not in
 * the plan's runs yet, if smaller than b's. */
static void find_bigger(const vpmm_pool_t *p, const vpmm_plan_t *plan, const vpmm_rbtree_t *t,
                        size_t need, bigger_t *b)
{
    const size_t pg = p->page_size;
    for (vpmm_rb_node_t *n = vpmm_rb_lower_bound(t, (need + 1) * pg, 0); n; n = vpmm_rb_next(n)) {
        vpmm_region_t *r = region_of(n);
        const uintptr_t lo = vpmm_align_up(r->addr, pg),
                        hi = vpmm_align_down(r->addr + r->size, pg);
        if (r == plan->left || r == plan->right || r->size < (need + 1) * pg)
            continue;
        for (uintptr_t at = lo; at < hi;) {
            const vpmm_phys_t *ph = vpmm_i_phys_at(p, at);
            const size_t np = ph->size / pg;
            if (ph->va >= lo && ph->va + ph->size <= hi && np > need && np < b->np &&
                !vpmm_i_plan_uses(p, plan, ph->va, ph->size))
                *b = (bigger_t){ r, ph->va, np };
            at = ph->va + ph->size > at ? ph->va + ph->size : at + pg;
        }
    }
}

/*
 * The harvest takes a handle only while it fits in what is still needed, so `need` pages may be
 * left although a free handle larger than that lies in free memory. When new pages cannot be had
 * (the fewest-created plan), that handle is moved whole and the span grows by its extra pages,
 * which stay free after the allocation: free whole pages serve whatever handle they belong to
 * (the near-full rule, docs/ALGORITHM.md). The smallest such handle of the caller's and ready
 * memory, else of other streams' (a GPU-side wait, as for their harvest). The span must have the
 * room: upwards in its hole without a right neighbour, downwards without a left one.
 */
static vpmm_status_t overshoot(vpmm_pool_t *p, vpmm_stream_rec_t *s, vpmm_plan_t *plan,
                               size_t *need)
{
    const size_t pg = p->page_size;
    bigger_t b = { NULL, 0, SIZE_MAX };
    size_t extra;
    if (*need == 0 || plan->arena->priv)
        return VPMM_SUCCESS;
    if (markable(p, s))
        find_bigger(p, plan, &s->free_tree, *need, &b);
    find_bigger(p, plan, &p->shared.ready, *need, &b);
    if (b.src == NULL && vpmm_i_stream_may_wait(p, s)) {
        /* Other streams' memory, as the harvest takes it: behind a GPU-side wait (defrag.c). */
        vpmm_stream_rec_t *lists[2] = { p->streams, p->retired };
        for (int l = 0; l < 2; l++)
            for (vpmm_stream_rec_t *t = lists[l]; t; t = t->next)
                if (t != s && t->pending_bytes > *need * pg && markable(p, t))
                    find_bigger(p, plan, &t->free_tree, *need, &b);
    }
    if (b.src == NULL)
        return VPMM_SUCCESS;
    extra = b.np - *need;
    if (plan->hole != NULL) {
        const vpmm_region_t *h = plan->hole;
        if (plan->right == NULL) {
            if (plan->map_at + (plan->npages + extra) * pg > h->addr + h->size)
                return VPMM_SUCCESS;
        } else if (plan->left == NULL && plan->map_at - h->addr >= extra * pg) {
            plan->map_at -= extra * pg;
        } else {
            return VPMM_SUCCESS;
        }
    }
    VPMM_CHECK(add_run(plan, b.src, b.va, b.np));
    /* The runs of one region are committed from its top down (each cut keeps the region's lower
     * part as the region): the new one goes before the first of its region's runs below it. */
    for (size_t i = 0; i + 1 < plan->nruns; i++) {
        if (plan->runs[i].src == b.src && plan->runs[i].addr < b.va) {
            memmove(&plan->runs[i + 1], &plan->runs[i],
                    (plan->nruns - 1 - i) * sizeof plan->runs[0]);
            plan->runs[i] = (vpmm_harvest_t){ b.src, b.va, b.np };
            break;
        }
    }
    plan->npages += extra;
    *need = 0;
    return VPMM_SUCCESS;
}

/* The pages of plan's span: harvested, then (larger_ok) a handle larger than what is left moved
 * whole; *need gets what is still missing. */
static vpmm_status_t gather(vpmm_pool_t *p, vpmm_stream_rec_t *s, vpmm_plan_t *plan, int larger_ok,
                            size_t *need)
{
    vpmm_status_t st;
    *need = plan->npages;
    st = harvest(p, s, plan, need);
    if (st == VPMM_SUCCESS && *need > 0 && larger_ok)
        st = overshoot(p, s, plan, need);
    return st;
}

/* A span (choose_span with `supply`) and its harvest; nnew is what is left to create. With
 * `supply` set (the fewest-created plan), a handle larger than what is left may be moved whole
 * (overshoot). */
static vpmm_status_t plan_span(vpmm_pool_t *p, vpmm_stream_rec_t *s, size_t size, size_t supply,
                               vpmm_plan_t *plan)
{
    vpmm_arena_t *a = plan->arena;
    size_t need;
    vpmm_status_t st;
    vpmm_i_plan_fini(plan);
    memset(plan, 0, sizeof *plan);
    plan->arena = a;
    choose_span(p, s, size, supply, plan);
    st = gather(p, s, plan, supply != SIZE_MAX, &need);
    if (st == VPMM_SUCCESS && need > 0 && supply != SIZE_MAX && plan->hole != NULL) {
        /* The span's hole had no room for a handle larger than what was left: the same in a
         * VA chunk of its own, where any overshoot fits (the neighbours it joined are then
         * harvested instead), if that leaves less to create. */
        vpmm_plan_t alone;
        size_t need_alone;
        memset(&alone, 0, sizeof alone);
        alone.arena = a;
        alone.small = plan->small;
        alone.npages = pages_for(size, p->page_size);
        st = gather(p, s, &alone, 1, &need_alone);
        if (st == VPMM_SUCCESS && need_alone < need) {
            vpmm_plan_t loser = *plan;
            *plan = alone;
            need = need_alone;
            vpmm_i_plan_fini(&loser);
        } else {
            vpmm_i_plan_fini(&alone);
        }
    }
    if (st != VPMM_SUCCESS) {
        vpmm_i_plan_fini(plan);
        return st;
    }
    plan->nnew = plan->nneed = need;
    plan->req_pages = pages_for(size, p->page_size);
    return VPMM_SUCCESS;
}

/* The plan, under the cap: the fewest pages mapped, unless that creates more than the cap allows
 * (or fewest_new asks for it): then the fewest pages created. */
static vpmm_status_t plan_within_cap(vpmm_pool_t *p, vpmm_stream_rec_t *s, size_t size,
                                     int fewest_new, vpmm_plan_t *plan)
{
    size_t supply;
    if (!fewest_new) {
        VPMM_CHECK(plan_span(p, s, size, SIZE_MAX, plan));
        if (plan->nnew <= cap_room(p))
            return VPMM_SUCCESS;
    }
    VPMM_CHECK(harvest_supply(p, s, plan->arena, &supply));
    VPMM_CHECK(plan_span(p, s, size, supply, plan));
    return cap_check(p, plan);
}

vpmm_status_t vpmm_i_plan_make(vpmm_pool_t *p, vpmm_stream_rec_t *s, size_t size, size_t ours,
                               int fewest_new, vpmm_plan_t *plan)
{
    plan->arena = &p->shared;
    VPMM_CHECK(plan_within_cap(p, s, size, fewest_new, plan));
    plan_growth(p, plan, ours);
    return VPMM_SUCCESS;
}

vpmm_status_t vpmm_i_plan_make_private(vpmm_pool_t *p, vpmm_arena_t *a, vpmm_stream_rec_t *s,
                                       size_t size, int fewest_new, vpmm_plan_t *plan)
{
    plan->arena = a;
    VPMM_CHECK(plan_within_cap(p, s, size, fewest_new, plan));
    plan->unit = large_unit(p, plan->nnew);
    return VPMM_SUCCESS;
}
