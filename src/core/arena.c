/*
 * arena.c — private arenas: the memory of graph pools (graph/), and the region views and
 * rewrites checkpoints are built on (checkpoint/).
 *
 * A private arena owns its own VA chunks; its regions are indexed in its own trees (pool.h), so
 * the shared pool never allocates from it. Three paths are specific to it:
 *
 *  malloc  (during a capture, vpmm_i_arena_malloc) best fit among the arena's ready regions and
 *          the stream's own pending ones; else growth into the arena's holes with fresh pages or
 *          the shared arena's ready pages (policy.c, defrag.c). No cache, no marker, no event
 *          query, no wait: none is allowed while a stream is being captured.
 *  free    (vpmm_i_arena_free) a free on a stream that is capturing into the arena is pending
 *          with seq = VPMM_SEQ_CAPTURE: its stream reuses it within the capture (stream order);
 *          every stream may once the capture ends (vpmm_i_arena_capture_ended). Any other free
 *          is stream-ordered exactly as in the shared arena (pending until the stream's marker).
 *  dissolve (the graph pool is gone, vpmm_i_arena_dissolve) its chunks become shared chunks.
 *
 * Its pages never move while it is pinned (graph/ pins it while a graph may use it); unpinned
 * and with no capture, the shared arena may take its ready pages (policy.c).
 *
 * Everything here runs under the pool lock. Invariants I7–I9 (pool.h) are checked in check.c.
 */
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "arena.h"
#include "cache.h"
#include "defrag.h"
#include "graph_hooks.h"
#include "pages.h"
#include "policy.h"
#include "pool.h"
#include "region.h"
#include "segment.h"
#include "stats.h"
#include "uses.h"
#include "va.h"

/* ---- life ---------------------------------------------------------------------------------- */

vpmm_status_t vpmm_i_arena_create(vpmm_pool_t *p, unsigned id, vpmm_arena_t **out)
{
    vpmm_arena_t *a = calloc(1, sizeof *a);
    if (a == NULL) {
        vpmm_i_set_error("out of host memory for a graph pool");
        return VPMM_ERROR_HOST_OUT_OF_MEMORY;
    }
    vpmm_rb_init(&a->holes);
    vpmm_rb_init(&a->ready);
    a->priv = 1;
    a->id = id;
    a->next = p->privates;
    p->privates = a;
    p->private_count++;
    *out = a;
    return VPMM_SUCCESS;
}

/* Regions of chunk c, re-indexed as the shared arena's. */
static void chunk_to_shared(vpmm_pool_t *p, vpmm_chunk_t *c)
{
    vpmm_region_t *r;
    for (r = c->first; r; r = r->next)
        vpmm_i_index_del(p, r);
    c->arena = &p->shared;
    for (r = c->first; r; r = r->next) {
        if (r->state == VPMM_REGION_FREE && !r->ready && r->seq == VPMM_SEQ_CAPTURE) {
            /* Its capture is over (the graph is gone): nothing uses it any more. */
            r->ready = 1;
            r->stream = NULL;
            r->seq = 0;
        }
        vpmm_i_index_add(p, r);
    }
    /* Newly ready regions may now touch ready neighbours. */
    for (r = c->first; r; r = r->next)
        if (r->state == VPMM_REGION_FREE)
            r = vpmm_i_region_coalesce(p, r);
}

void vpmm_i_arena_dissolve(vpmm_pool_t *p, vpmm_arena_t *a)
{
    vpmm_arena_t **link;
    /* Only a graph pool's arena, and only once no graph can use it (graph/ unpins it first). */
    VPMM_ASSERT(a->priv && a != &p->shared && !a->pinned);
    for (vpmm_chunk_t *c = p->chunks; c; c = c->next) {
        if (c->arena == a) {
            /* Its segments change hands: reported as going from a and coming to the shared pool. */
            vpmm_i_segment_chunk(p, c, VPMM_SEGMENT_UNMAPPED);
            chunk_to_shared(p, c);
            p->shared.chunks++;
            vpmm_i_segment_chunk(p, c, VPMM_SEGMENT_MAPPED);
        }
    }
    for (link = &p->privates; *link != a; link = &(*link)->next)
        ;
    *link = a->next;
    p->private_count--;
    free(a->side);
    free(a);
    /* Its chunks that hold nothing go back now, not at the next vpmm_trim; so do those that held
     * only zombies of pages a later graph pool took (known complete: no event query, which a
     * capture would forbid). A server that captures and destroys graphs forever keeps two. */
    vpmm_i_reclaim_zombies(p, 0);
    vpmm_i_chunk_trim(p);
}

unsigned vpmm_i_arena_id(const vpmm_arena_t *a)
{
    return a->id;
}

void vpmm_i_arena_set_pinned(vpmm_arena_t *a, int pinned)
{
    a->pinned = pinned;
}

unsigned vpmm_i_arena_captures(const vpmm_arena_t *a)
{
    return a->captures;
}

/* ---- per-stream side trees ---------------------------------------------------------------- */

vpmm_status_t vpmm_i_side_reserve(vpmm_arena_t *a, vpmm_stream_rec_t *s)
{
    if (vpmm_i_side_find(a, s) != NULL)
        return VPMM_SUCCESS;
    /* Trees hold no pointer to themselves: moving them is safe. */
    if (VPMM_GROW(a->side, a->side_cap, a->nside + 1, 4) != 0) {
        vpmm_i_set_error("out of host memory for a graph pool's stream table");
        return VPMM_ERROR_HOST_OUT_OF_MEMORY;
    }
    /* An entry stays while its stream record lives (a region of s may need it at any later
     * free); vpmm_i_arena_forget_stream drops it when the record is freed. */
    a->side[a->nside].stream = s;
    vpmm_rb_init(&a->side[a->nside].tree);
    a->nside++;
    return VPMM_SUCCESS;
}

/* ---- coalescing, capture end --------------------------------------------------------------- */

void vpmm_i_arena_coalesce_all(vpmm_pool_t *p, vpmm_arena_t *a)
{
    for (vpmm_chunk_t *c = p->chunks; c; c = c->next)
        if (c->arena == a)
            for (vpmm_region_t *r = c->first; r; r = r->next)
                if (r->state == VPMM_REGION_FREE)
                    r = vpmm_i_region_coalesce(p, r);
}

void vpmm_i_arena_capture_begun(vpmm_pool_t *p, vpmm_arena_t *a)
{
    a->captures++;
    p->captures++;
}

void vpmm_i_arena_capture_ended(vpmm_pool_t *p, vpmm_arena_t *a)
{
    VPMM_ASSERT(a->captures > 0 && p->captures >= a->captures);
    a->captures--;
    p->captures--;
    if (a->captures > 0 || a->capture_pending == 0)
        return;
    /* Every region freed during the captures becomes ready; the tree walk takes each node's
     * successor before moving the node to the ready tree. Coalescing waits for the end. */
    for (size_t i = 0; i < a->nside; i++) {
        vpmm_rb_node_t *n = vpmm_rb_first(&a->side[i].tree);
        while (n != NULL) {
            vpmm_region_t *r = VPMM_CONTAINER_OF(n, vpmm_region_t, node);
            n = vpmm_rb_next(n);
            if (r->seq != VPMM_SEQ_CAPTURE)
                continue;
            vpmm_i_index_del(p, r);
            r->ready = 1;
            r->stream = NULL;
            r->seq = 0;
            vpmm_i_index_add(p, r);
        }
    }
    vpmm_i_arena_coalesce_all(p, a);
}

/* ---- malloc and free ------------------------------------------------------------------------ */

vpmm_status_t vpmm_i_arena_malloc(vpmm_pool_t *p, vpmm_arena_t *a, vpmm_stream_key_t stream,
                                  size_t size, void **out_ptr)
{
    const size_t rsize = vpmm_round_up_checked(size, VPMM_ALIGNMENT); /* checked by vpmm_malloc */
    vpmm_stream_rec_t *s = vpmm_i_stream_get(p, stream);
    vpmm_region_t *r;
    vpmm_status_t st;

    if (s == NULL)
        return VPMM_ERROR_HOST_OUT_OF_MEMORY;
    /* Host room first: once memory is taken nothing may fail. The side entry is needed by this
     * allocation's free, which must not fail either. */
    VPMM_CHECK(vpmm_i_side_reserve(a, s));
    VPMM_CHECK(vpmm_i_region_reserve(p, 4));
    if (vpmm_hmap_reserve(&p->allocs, 1) != 0) {
        vpmm_i_set_error("vpmm_malloc: out of host memory for bookkeeping");
        return VPMM_ERROR_HOST_OUT_OF_MEMORY;
    }
    r = vpmm_i_fit_private(p, a, s, rsize);
    if (r == NULL) {
        vpmm_plan_t plan;
        memset(&plan, 0, sizeof plan);
        p->oom_cause = VPMM_OOM_DEVICE; /* unless the cap or the address space says otherwise */
        /* Growth may take the shared pool's ready pages: cached ones whose work is known done
         * must count among them (no event is queried here: a capture forbids it). */
        vpmm_i_cache_flush_all(p);
        st = vpmm_i_plan_make_private(p, a, s, rsize, 0, &plan);
        if (st == VPMM_SUCCESS)
            st = vpmm_i_defrag(p, s, &plan, NULL, &r); /* a capture: one thread, nothing spare */
        vpmm_i_plan_fini(&plan);
        if (st == VPMM_ERROR_OUT_OF_MEMORY && plan.nneed > 0) {
            /* The device refused: the placement that creates the fewest pages may fit. */
            const size_t refused = plan.nneed;
            memset(&plan, 0, sizeof plan);
            if (vpmm_i_plan_make_private(p, a, s, rsize, 1, &plan) == VPMM_SUCCESS &&
                plan.nneed < refused)
                st = vpmm_i_defrag(p, s, &plan, NULL, &r);
            vpmm_i_plan_fini(&plan);
        }
        if (st != VPMM_SUCCESS) {
            a->c.ooms += st == VPMM_ERROR_OUT_OF_MEMORY; /* vpmm_malloc counts and reports it */
            return st;
        }
    }
    r = vpmm_i_allocate_from(p, r, s, rsize, size);
    p->c.mallocs++;
    a->c.mallocs++;
    vpmm_i_note_peaks(p);
    vpmm_i_arena_note_peaks(a);
    *out_ptr = (void *)r->addr;
    return VPMM_SUCCESS;
}

/* Whether s is being captured into a right now (a driver query; never fails a free). Another
 * thread's per-thread stream cannot be asked from here: then the marker rule applies, which is
 * never earlier (no marker is recorded for it while a capture is in progress, stream.c). */
static int capturing_into(vpmm_pool_t *p, vpmm_arena_t *a, const vpmm_stream_rec_t *s)
{
    vpmm_capture_status_t cap;
    uint64_t id;
    if (vpmm_i_stream_is_legacy(s->handle) || a->captures == 0 ||
        !vpmm_i_stream_key_here(vpmm_i_stream_key_of(s)))
        return 0;
    if (p->drv->capture_info(p->drv, s->handle, &cap, &id, NULL) != VPMM_DRV_OK)
        return 0; /* then the marker rule applies: later, never earlier */
    return cap != VPMM_CAPTURE_NONE && vpmm_i_graphs_capture_arena(p, id) == a;
}

void vpmm_i_arena_free(vpmm_pool_t *p, vpmm_region_t *r)
{
    vpmm_arena_t *a = vpmm_i_arena_of(r);
    vpmm_stream_rec_t *s = r->stream;

    vpmm_i_region_set_free(p, r, s);
    if (capturing_into(p, a, s)) {
        r->ready = 0;
        r->stream = s;
        r->seq = VPMM_SEQ_CAPTURE;
    }
    vpmm_i_index_add(p, r);
    vpmm_i_region_coalesce(p, r);
    a->c.frees++;
}

/* ---- stats ----------------------------------------------------------------------------------- */

void vpmm_i_arena_stats(const vpmm_pool_t *p, const vpmm_arena_t *a, vpmm_graph_pool_stats_t *out)
{
    const vpmm_counters_t *c = &a->c;
    (void)p;
    *out = (vpmm_graph_pool_stats_t){
        .id = a->id,
        .live_bytes = c->live_bytes,
        .allocated_bytes = c->allocated_bytes,
        .peak_live_bytes = c->peak_live_bytes,
        .mapped_bytes = c->allocated_bytes + c->free_bytes,
        .peak_mapped_bytes = c->peak_mapped_bytes,
        .free_bytes = c->free_bytes,
        .hole_bytes = c->hole_bytes,
        .zombie_bytes = c->zombie_bytes,
        .reserved_va_bytes = c->reserved_va_bytes,
        .live_allocs = c->live_allocs,
        .mallocs = c->mallocs,
        .frees = c->frees,
        .grows = c->grows,
        .pages_created = c->pages_created,
        .pages_taken = c->pages_taken,
        .pages_remapped = c->pages_remapped,
        .captures = a->captures,
        .pinned = a->pinned,
    };
}

void vpmm_i_arena_reset_peaks(vpmm_arena_t *a)
{
    a->c.peak_live_bytes = a->c.live_bytes;
    a->c.peak_mapped_bytes = a->c.allocated_bytes + a->c.free_bytes;
}

/* ---- views and rewrites ------------------------------------------------------------------------
 */

static vpmm_region_t *first_of_chunks_from(const vpmm_chunk_t *c, const vpmm_arena_t *a)
{
    for (; c; c = c->next)
        if (c->arena == a)
            return c->first;
    return NULL;
}

vpmm_region_t *vpmm_i_arena_first(const vpmm_pool_t *p, const vpmm_arena_t *a)
{
    return first_of_chunks_from(p->chunks, a);
}

vpmm_region_t *vpmm_i_arena_next(const vpmm_pool_t *p, const vpmm_region_t *r)
{
    (void)p;
    if (r->next)
        return r->next;
    return first_of_chunks_from(r->chunk->next, r->chunk->arena);
}

int vpmm_i_region_chunk_last(const vpmm_region_t *r)
{
    return r->next == NULL;
}

void vpmm_i_region_view(const vpmm_region_t *r, vpmm_view_t *out)
{
    out->addr = r->addr;
    out->size = r->size;
    out->state = r->state;
    out->ready = r->state == VPMM_REGION_FREE && r->ready;
    out->chunk_last = r->next == NULL;
    out->requested = r->state == VPMM_REGION_ALLOCATED ? r->requested : 0;
    out->stream = r->state == VPMM_REGION_ALLOCATED ? vpmm_i_stream_key_of(r->stream)
                                                    : (vpmm_stream_key_t){ NULL, 0 };
    out->deferred = r->state == VPMM_REGION_FREE && r->uses != NULL;
    out->region = (vpmm_region_t *)r;
}

size_t vpmm_i_arena_views(const vpmm_pool_t *p, const vpmm_arena_t *a, vpmm_view_t *out, size_t cap)
{
    size_t n = 0;
    for (const vpmm_chunk_t *c = p->chunks; c; c = c->next) {
        if (c->arena != a)
            continue;
        for (const vpmm_region_t *r = c->first; r; r = r->next, n++)
            if (n < cap)
                vpmm_i_region_view(r, &out[n]);
    }
    return n;
}

vpmm_status_t vpmm_i_rewrite_reserve(vpmm_pool_t *p, vpmm_arena_t *a, size_t nregions,
                                     const vpmm_span_t *allocs, size_t nallocs)
{
    VPMM_CHECK(vpmm_i_region_reserve(p, nregions));
    if (vpmm_hmap_reserve(&p->allocs, nallocs) != 0) {
        vpmm_i_set_error("out of host memory for the allocation table");
        return VPMM_ERROR_HOST_OUT_OF_MEMORY;
    }
    /* An allocation's free needs its stream's side entry (vpmm_i_arena_free cannot fail). */
    if (a->priv)
        for (size_t i = 0; i < nallocs; i++)
            VPMM_CHECK(vpmm_i_side_reserve(a, allocs[i].stream));
    return VPMM_SUCCESS;
}

/*
 * Before:   prev [first ... last] after       (regions of one chunk)
 * After:    prev [span0 ... spanN] after      (same addresses, new states)
 */
void vpmm_i_rewrite(vpmm_pool_t *p, vpmm_region_t *first, vpmm_region_t *last,
                    const vpmm_span_t *spans, size_t n)
{
    vpmm_chunk_t *chunk = first->chunk;
    vpmm_region_t *prev = first->prev, *after = last->next, *r = first, *old = first;

    /* The old regions leave the indexes; their nodes are given back at the end, once each
     * allocation that stays (same address) has handed its other streams' uses to its new node. */
    for (;;) {
        int done = r == last;
        vpmm_i_index_del(p, r);
        if (done)
            break;
        r = r->next;
    }
    last->next = NULL;
    for (size_t i = 0; i < n; i++) {
        r = vpmm_i_region_take(p);
        memset(r, 0, sizeof *r);
        r->addr = spans[i].addr;
        r->size = spans[i].size;
        r->chunk = chunk;
        r->prev = prev;
        if (prev)
            prev->next = r;
        else
            chunk->first = r;
        if (spans[i].requested > 0) {
            r->state = VPMM_REGION_ALLOCATED;
            r->stream = spans[i].stream;
            r->requested = spans[i].requested;
            while (old != NULL && old->addr < r->addr)
                old = old->next;
            if (old != NULL && old->addr == r->addr && old->state == VPMM_REGION_ALLOCATED &&
                old->stream == r->stream) {
                r->uses = old->uses;
                old->uses = NULL;
            }
        } else {
            r->state = VPMM_REGION_FREE;
            r->ready = 1;
            r->age = ++p->clock;
        }
        vpmm_i_index_add(p, r);
        prev = r;
    }
    prev->next = after;
    if (after)
        after->prev = prev;
    for (r = first; r != NULL;) {
        vpmm_region_t *next = r->next;
        /* A dropped allocation's other streams are forgotten, not waited for: the reapply says
         * it is dead, and the graph pool's memory is ordered by its graphs (vpmm.h). */
        vpmm_i_uses_forget(p, r);
        vpmm_i_region_give(p, r);
        r = next;
    }
    /* Allocations came back: live bytes may exceed what was live before. */
    vpmm_i_note_peaks(p);
    if (chunk->arena->priv)
        vpmm_i_arena_note_peaks(chunk->arena);
}

#ifdef VPMM_HAVE_NVTX
void vpmm_i_arena_nvtx_refresh(vpmm_pool_t *p, vpmm_arena_t *a)
{
    for (vpmm_chunk_t *c = p->chunks; c; c = c->next) {
        if (c->arena != a || c->nvtx_heap == NULL)
            continue;
        vpmm_i_nvtx_heap_reset_slow(c->nvtx_heap);
        for (vpmm_region_t *r = c->first; r; r = r->next)
            if (r->state == VPMM_REGION_ALLOCATED)
                vpmm_i_nvtx_region_add(r);
    }
}
#endif

/* ---- reviving zombie pages (checkpoint reapply) ------------------------------------------- */

vpmm_region_t *vpmm_i_region_containing(const vpmm_pool_t *p, const vpmm_arena_t *a, uintptr_t addr)
{
    vpmm_region_t *r = vpmm_i_region_find(p, addr);
    return r != NULL && vpmm_i_arena_of(r) == a ? r : NULL;
}

/* Whether [lo, hi) overlaps one of the spans w[0..n) (address order, disjoint). */
static int overlaps_any(const vpmm_span_t *w, size_t n, uintptr_t lo, uintptr_t hi)
{
    size_t l = 0, h = n;
    while (l < h) { /* the first span ending after lo */
        size_t m = l + (h - l) / 2;
        if (w[m].addr + w[m].size <= lo)
            l = m + 1;
        else
            h = m;
    }
    return l < n && w[l].addr < hi;
}

/* Calls visit(z, handle address in z, phys) for each zombie handle of a overlapping [lo, hi);
 * stops at the first nonzero result and returns it. */
static int
each_zombie_handle(const vpmm_pool_t *p, const vpmm_arena_t *a, uintptr_t lo, uintptr_t hi,
                   int (*visit)(vpmm_region_t *z, uintptr_t at, vpmm_phys_t *ph, void *ctx),
                   void *ctx)
{
    vpmm_region_t *r = vpmm_i_region_containing(p, a, lo);
    for (; r != NULL && r->addr < hi; r = r->next) {
        if (r->state != VPMM_REGION_ZOMBIE)
            continue;
        for (uintptr_t at = r->addr; at < r->addr + r->size;) {
            vpmm_phys_t *ph = vpmm_i_phys_at(p, at);
            int rc;
            if (at + ph->size > lo && at < hi && (rc = visit(r, at, ph, ctx)) != 0)
                return rc;
            at += ph->size;
        }
    }
    return 0;
}

typedef struct revive_check {
    const vpmm_pool_t *p;
    const vpmm_arena_t *a;
    const vpmm_span_t *w;
    size_t n, handles;
} revive_check_t;

static int check_one(vpmm_region_t *z, uintptr_t at, vpmm_phys_t *ph, void *ctx)
{
    revive_check_t *c = ctx;
    (void)z;
    (void)at;
    c->handles++;
    return vpmm_i_region_containing(c->p, c->a, ph->va) == NULL ||
           overlaps_any(c->w, c->n, ph->va, ph->va + ph->size);
}

vpmm_status_t vpmm_i_revive_check(const vpmm_pool_t *p, const vpmm_arena_t *a, uintptr_t lo,
                                  uintptr_t hi, const vpmm_span_t *w, size_t n, size_t *handles)
{
    revive_check_t c = { p, a, w, n, 0 };
    if (each_zombie_handle(p, a, lo, hi, check_one, &c) != 0)
        return VPMM_ERROR_CHECKPOINT_CONFLICT;
    *handles += c.handles;
    return VPMM_SUCCESS;
}

/*
 * One handle back at its old address `at` (inside zombie z):
 *
 *   at:      [..zombie..|  h  |..zombie..]   ->  [..zombie..| h, ready free |..zombie..]
 *   h->va:   [... ready free ...| h |....]   ->  [... free ...| zombie |.......]
 */
static int revive_one(vpmm_region_t *z, uintptr_t at, vpmm_phys_t *ph, void *ctx)
{
    vpmm_pool_t *p = ctx;
    vpmm_region_t *m =
        vpmm_i_region_cut(p, vpmm_i_region_find(p, ph->va), ph->va, ph->va + ph->size);
    m->state = VPMM_REGION_ZOMBIE;
    m->ready = 0;
    m->stream = NULL;
    m->seq = 0;
    vpmm_i_index_add(p, m);
    m = vpmm_i_region_cut(p, z, at, at + ph->size);
    vpmm_i_segment(p, VPMM_SEGMENT_UNMAPPED, ph, vpmm_i_arena_of(z));
    ph->va = at; /* both mappings stay; only which one is live changes */
    vpmm_i_segment(p, VPMM_SEGMENT_MAPPED, ph, vpmm_i_arena_of(z));
    vpmm_i_region_set_free(p, m, NULL);
    vpmm_i_index_add(p, m);
    vpmm_i_region_coalesce(p, m);
    return 1; /* z may have been cut: the caller starts over */
}

void vpmm_i_revive(vpmm_pool_t *p, vpmm_arena_t *a, uintptr_t lo, uintptr_t hi)
{
    while (each_zombie_handle(p, a, lo, hi, revive_one, p) != 0)
        ;
}
