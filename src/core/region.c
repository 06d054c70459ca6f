/*
 * region.c — region nodes, the per-state indexes, split/merge, cutting a range out of an indexed
 * region, and coalescing.
 *
 * A region is "indexed" when it sits in the structure its state calls for (I7 in pool.h: the
 * trees of its chunk's arena) and its bytes are counted in the matching counters (I5; a private
 * arena's own counters too, I9). Every state change goes through
 * vpmm_i_index_del → change fields → vpmm_i_index_add, so the indexes and the byte counters can
 * never drift apart. Split and merge work on unindexed regions only.
 *
 * Nodes come from a free list refilled in slabs; vpmm_i_region_reserve is called before any driver
 * work so that committing a successful driver sequence never needs memory (transactional
 * failures). Called under the pool lock. Invariants are checked in check.c.
 */
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "arena.h"
#include "pages.h"
#include "pool.h"
#include "region.h"
#include "stream.h"
#include "uses.h"

#define REGION_SLAB 256

vpmm_status_t vpmm_i_region_reserve(vpmm_pool_t *p, size_t n)
{
    while (p->spare_count < n) {
        vpmm_region_t *slab;
        if (VPMM_GROW(p->slabs, p->slab_cap, p->slab_count + 1, 16) != 0)
            goto oom;
        slab = calloc(REGION_SLAB, sizeof *slab);
        if (slab == NULL)
            goto oom;
        p->slabs[p->slab_count++] = slab;
        for (size_t i = 0; i < REGION_SLAB; i++)
            vpmm_i_region_give(p, &slab[i]);
    }
    return VPMM_SUCCESS;
oom:
    vpmm_i_set_error("out of host memory for region bookkeeping");
    return VPMM_ERROR_HOST_OUT_OF_MEMORY;
}

vpmm_region_t *vpmm_i_region_take(vpmm_pool_t *p)
{
    vpmm_region_t *r = p->spare;
    VPMM_ASSERT_SLOW(r != NULL && p->spare_count > 0); /* vpmm_i_region_reserve came first */
    p->spare = r->next;
    p->spare_count--;
    return r; /* callers initialise every field (split copies, carve and chunk_add set them) */
}

void vpmm_i_region_give(vpmm_pool_t *p, vpmm_region_t *r)
{
    r->next = p->spare;
    p->spare = r;
    p->spare_count++;
}

void vpmm_i_region_slabs_free(vpmm_pool_t *p)
{
    for (size_t i = 0; i < p->slab_count; i++)
        free(p->slabs[i]);
    free(p->slabs);
    p->slabs = NULL;
    p->slab_count = p->slab_cap = 0;
    p->spare = NULL;
    p->spare_count = 0;
}

static void tree_add(vpmm_rbtree_t *t, vpmm_region_t *r)
{
    r->node.k1 = r->chunk->small ? VPMM_KEY_SMALL | r->size : r->size; /* I13 */
    r->node.k2 = r->addr;
    vpmm_rb_insert(t, &r->node);
}

/* The region lists linked through qprev/qnext — the zombies, the deferred frees (uses.c) and a
 * stream's pending regions — given by their head and tail. */
static void qlist_append(vpmm_region_t **head, vpmm_region_t **tail, vpmm_region_t *r)
{
    r->qnext = NULL;
    r->qprev = *tail;
    if (*tail)
        (*tail)->qnext = r;
    else
        *head = r;
    *tail = r;
}

static void qlist_unlink(vpmm_region_t **head, vpmm_region_t **tail, vpmm_region_t *r)
{
    if (r->qprev)
        r->qprev->qnext = r->qnext;
    else
        *head = r->qnext;
    if (r->qnext)
        r->qnext->qprev = r->qprev;
    else
        *tail = r->qprev;
    r->qprev = r->qnext = NULL;
}

/* A private pending region's tree: its arena's side tree for its stream (reserved earlier). */
static vpmm_rbtree_t *side_tree(vpmm_arena_t *a, const vpmm_region_t *r)
{
    return &vpmm_i_side_find(a, r->stream)->tree;
}

vpmm_rbtree_t *vpmm_i_free_tree(vpmm_pool_t *p, const vpmm_region_t *r)
{
    vpmm_arena_t *a = vpmm_i_arena_of(r);
    (void)p;
    if (r->ready)
        return &a->ready;
    return VPMM_LIKELY(!a->priv) ? &r->stream->free_tree : side_tree(a, r);
}

/* A private arena's byte counters follow its regions (sign: +1 index, -1 unindex). */
static void arena_count(vpmm_arena_t *a, const vpmm_region_t *r, int sign)
{
    size_t *bytes = NULL;
    switch (r->state) {
    case VPMM_REGION_ALLOCATED:
        bytes = &a->c.allocated_bytes;
        a->c.live_bytes += sign > 0 ? r->requested : -r->requested;
        a->c.live_allocs += sign > 0 ? 1 : (uint64_t)-1;
        break;
    case VPMM_REGION_FREE:
        bytes = &a->c.free_bytes;
        if (!r->ready && r->seq == VPMM_SEQ_CAPTURE)
            a->capture_pending += sign > 0 ? 1 : (size_t)-1;
        break;
    case VPMM_REGION_HOLE:
        bytes = &a->c.hole_bytes;
        break;
    case VPMM_REGION_ZOMBIE:
        bytes = &a->c.zombie_bytes;
        break;
    }
    *bytes += sign > 0 ? r->size : -r->size;
}

#ifdef VPMM_HAVE_NVTX
/* NVTX (a tool attached): an allocation is a region of its chunk's heap, registered lazily. */
void vpmm_i_nvtx_region_add(vpmm_region_t *r)
{
    vpmm_chunk_t *c = r->chunk;
    if (!c->nvtx_tried) {
        c->nvtx_heap = vpmm_i_nvtx_heap_slow(c->base, c->size);
        c->nvtx_tried = 1;
    }
    if (c->nvtx_heap != NULL)
        vpmm_i_nvtx_region_slow(c->nvtx_heap, r->addr, r->requested);
}
#endif

void vpmm_i_index_add(vpmm_pool_t *p, vpmm_region_t *r)
{
    vpmm_arena_t *a = vpmm_i_arena_of(r);
    switch (r->state) {
    case VPMM_REGION_ALLOCATED:
        /* Cannot fail: callers reserve room in allocs before committing. */
        vpmm_hmap_put(&p->allocs, r->addr, r);
        p->c.allocated_bytes += r->size;
        p->c.live_bytes += r->requested;
        p->c.live_allocs++;
        r->stream->refs++;
        if (VPMM_UNLIKELY(vpmm_i_nvtx_mem))
            vpmm_i_nvtx_region_add(r);
        break;
    case VPMM_REGION_FREE:
        p->c.free_bytes += r->size;
        if (VPMM_UNLIKELY(r->uses != NULL)) {
            qlist_append(&p->deferred_head, &p->deferred_tail, r);
            r->stream->refs++;
        } else if (r->ready) {
            tree_add(&a->ready, r);
        } else {
            vpmm_stream_rec_t *s = r->stream;
            if (VPMM_LIKELY(!a->priv)) {
                tree_add(&s->free_tree, r);
                s->pending_bytes += r->size;
            } else {
                tree_add(side_tree(a, r), r);
            }
            vpmm_i_stream_pending_add(s, r);
            s->refs++;
            if (r->seq == s->recorded)
                s->dirty_regions++;
        }
        break;
    case VPMM_REGION_HOLE:
        tree_add(&a->holes, r);
        p->c.hole_bytes += r->size;
        break;
    case VPMM_REGION_ZOMBIE:
        qlist_append(&p->zombie_head, &p->zombie_tail, r);
        p->c.zombie_bytes += r->size;
        if (r->stream)
            r->stream->refs++;
        break;
    }
    if (VPMM_UNLIKELY(a->priv))
        arena_count(a, r, +1);
}

void vpmm_i_alloc_forget(vpmm_pool_t *p, vpmm_region_t *r)
{
    vpmm_arena_t *a = vpmm_i_arena_of(r);
    p->c.allocated_bytes -= r->size;
    p->c.live_bytes -= r->requested;
    p->c.live_allocs--;
    r->stream->refs--;
    if (VPMM_UNLIKELY(a->priv))
        arena_count(a, r, -1);
    if (VPMM_NVTX_COMPILED && VPMM_UNLIKELY(r->chunk->nvtx_heap != NULL))
        vpmm_i_nvtx_unregion_slow(r->addr);
}

void vpmm_i_index_del(vpmm_pool_t *p, vpmm_region_t *r)
{
    vpmm_arena_t *a = vpmm_i_arena_of(r);
    switch (r->state) {
    case VPMM_REGION_ALLOCATED:
        vpmm_hmap_remove(&p->allocs, r->addr);
        vpmm_i_alloc_forget(p, r);
        return; /* counted out by alloc_forget */
    case VPMM_REGION_FREE:
        VPMM_ASSERT_SLOW(p->c.free_bytes >= r->size); /* I5: counted when indexed */
        p->c.free_bytes -= r->size;
        if (VPMM_UNLIKELY(r->uses != NULL)) {
            qlist_unlink(&p->deferred_head, &p->deferred_tail, r);
            r->stream->refs--;
        } else if (r->ready) {
            vpmm_rb_remove(&a->ready, &r->node);
        } else {
            vpmm_stream_rec_t *s = r->stream;
            if (VPMM_LIKELY(!a->priv)) {
                vpmm_rb_remove(&s->free_tree, &r->node);
                s->pending_bytes -= r->size;
            } else {
                vpmm_rb_remove(side_tree(a, r), &r->node);
            }
            vpmm_i_stream_pending_del(s, r);
            s->refs--;
            if (r->seq == s->recorded)
                s->dirty_regions--;
        }
        break;
    case VPMM_REGION_HOLE:
        vpmm_rb_remove(&a->holes, &r->node);
        p->c.hole_bytes -= r->size;
        break;
    case VPMM_REGION_ZOMBIE:
        qlist_unlink(&p->zombie_head, &p->zombie_tail, r);
        p->c.zombie_bytes -= r->size;
        if (r->stream)
            r->stream->refs--;
        break;
    }
    if (VPMM_UNLIKELY(a->priv))
        arena_count(a, r, -1);
}

/*
 * Split an unindexed region at addr:
 *
 *     r: [addr0 ........................ end)
 *  => r: [addr0 ...... addr)  n: [addr ... end)
 *
 * n inherits every attribute; the caller indexes both.
 */
vpmm_region_t *vpmm_i_region_split(vpmm_pool_t *p, vpmm_region_t *r, uintptr_t addr)
{
    vpmm_region_t *n;
    VPMM_ASSERT(addr > r->addr && addr - r->addr < r->size); /* both halves non-empty */
    n = vpmm_i_region_take(p);
    *n = *r;
    memset(&n->node, 0, sizeof n->node);
    n->qprev = n->qnext = NULL;
    n->addr = addr;
    n->size = r->addr + r->size - addr;
    r->size = addr - r->addr;
    n->prev = r;
    n->next = r->next;
    if (r->next)
        r->next->prev = n;
    r->next = n;
    return n;
}

/*
 * Cut [lo, hi) out of the indexed region r; the pieces outside keep r's state and attributes and
 * stay indexed, the middle one comes back unindexed for the caller to give a new state:
 *
 *     r: [addr0 ........|===== lo .. hi =====|........ end)
 *  =>    [addr0 ...... lo)[lo ............. hi)[hi ..... end)
 *         r, indexed       returned, unindexed  new, indexed
 *
 * Either outer piece may be empty (then there is no such piece; with lo == r->addr the returned
 * piece is r itself). Needs up to two spare region nodes (vpmm_i_region_reserve, by the caller).
 */
vpmm_region_t *vpmm_i_region_cut(vpmm_pool_t *p, vpmm_region_t *r, uintptr_t lo, uintptr_t hi)
{
    vpmm_region_t *mid = r;
    VPMM_ASSERT(lo >= r->addr && lo < hi && hi - r->addr <= r->size);
    vpmm_i_index_del(p, r);
    if (lo > r->addr) {
        mid = vpmm_i_region_split(p, r, lo);
        vpmm_i_index_add(p, r);
    }
    if (mid->addr + mid->size > hi)
        vpmm_i_index_add(p, vpmm_i_region_split(p, mid, hi));
    return mid;
}

/*
 * Carve the first `bytes` of an indexed FREE region off as a new, unindexed region; the rest
 * stays r, indexed as it was (its pending-list place, marker and owner do not change, only its
 * key in the size tree):
 *
 *     r: [.............................)
 *  => n: [..bytes..) r: [...............)
 *
 * This is the hot path's split (malloc from a tree fit): one tree re-key instead of unindexing,
 * splitting and indexing two regions.
 */
vpmm_region_t *vpmm_i_free_take_front(vpmm_pool_t *p, vpmm_region_t *r, size_t bytes)
{
    vpmm_rbtree_t *tree = vpmm_i_free_tree(p, r);
    vpmm_arena_t *a = vpmm_i_arena_of(r);
    vpmm_region_t *n;

    VPMM_ASSERT_SLOW(r->state == VPMM_REGION_FREE && bytes > 0 && bytes < r->size);
    n = vpmm_i_region_take(p);
    memset(n, 0, sizeof *n);
    n->addr = r->addr;
    n->size = bytes;
    n->chunk = r->chunk;
    n->prev = r->prev;
    n->next = r;
    if (r->prev)
        r->prev->next = n;
    else
        r->chunk->first = n;
    r->prev = n;

    vpmm_rb_remove(tree, &r->node);
    r->addr += bytes;
    r->size -= bytes;
    tree_add(tree, r);
    p->c.free_bytes -= bytes;
    if (VPMM_UNLIKELY(a->priv))
        a->c.free_bytes -= bytes;
    else if (!r->ready)
        r->stream->pending_bytes -= bytes;
    return n;
}

void vpmm_i_region_absorb_next(vpmm_pool_t *p, vpmm_region_t *r)
{
    vpmm_region_t *n = r->next;
    /* Neighbours in address order (I1, pool.h): one chunk, no gap. */
    VPMM_ASSERT(n != NULL && n->chunk == r->chunk && r->addr + r->size == n->addr);
    r->size += n->size;
    r->next = n->next;
    if (n->next)
        n->next->prev = r;
    vpmm_i_region_give(p, n);
}

int vpmm_i_free_mergeable(const vpmm_region_t *a, const vpmm_region_t *b)
{
    if (a->state != VPMM_REGION_FREE || b->state != VPMM_REGION_FREE || a->cached || b->cached ||
        a->uses != NULL || b->uses != NULL)
        return 0;
    if (a->ready || b->ready)
        return a->ready && b->ready;
    /* Pending until a capture ends and pending until a marker never merge: neither condition
     * implies the other. */
    return a->stream == b->stream && (a->seq == VPMM_SEQ_CAPTURE) == (b->seq == VPMM_SEQ_CAPTURE);
}

static int mergeable(const vpmm_region_t *a, const vpmm_region_t *b)
{
    if (a->state == VPMM_REGION_HOLE)
        return b->state == VPMM_REGION_HOLE;
    return vpmm_i_free_mergeable(a, b);
}

/*
 * Merge two indexed neighbours a (lower) and b (upper) into a:
 *
 *     a: [......)  b: [......)   =>   a: [..............)
 *
 * A pending result keeps the later marker (covers the work of both) and the younger age.
 */
static vpmm_region_t *merge(vpmm_pool_t *p, vpmm_region_t *a, vpmm_region_t *b)
{
    VPMM_ASSERT(a->next == b && a->state == b->state);
    vpmm_i_index_del(p, a);
    vpmm_i_index_del(p, b);
    if (a->state == VPMM_REGION_FREE && !a->ready) {
        a->seq = VPMM_MAX(a->seq, b->seq);
        a->age = VPMM_MAX(a->age, b->age);
    }
    vpmm_i_region_absorb_next(p, a);
    vpmm_i_index_add(p, a);
    return a;
}

vpmm_region_t *vpmm_i_region_coalesce(vpmm_pool_t *p, vpmm_region_t *r)
{
    if (r->prev && mergeable(r->prev, r))
        r = merge(p, r->prev, r);
    if (r->next && mergeable(r, r->next))
        r = merge(p, r, r->next);
    return r;
}

void vpmm_i_region_set_free(vpmm_pool_t *p, vpmm_region_t *r, vpmm_stream_rec_t *s)
{
    r->state = VPMM_REGION_FREE;
    r->requested = 0;
    r->age = ++p->clock;
    if (s == NULL || (s->retired && s->completed >= s->recorded)) {
        r->ready = 1;
        r->stream = NULL;
        r->seq = 0;
        return;
    }
    r->ready = 0;
    r->stream = s;
    /* A retired stream takes no new markers; its final one covers all its work. */
    r->seq = s->retired ? s->recorded - 1 : s->recorded;
}

/* Whether the boundary at b (between two mapped regions) runs through a page or a handle. */
static int cuts_a_handle(const vpmm_pool_t *p, uintptr_t b)
{
    if (b % p->page_size != 0)
        return 1;
    return vpmm_i_phys_at(p, b)->va < b;
}

/* A free region a join may take or join onto: not a deferred free (its gates decide), not cached
 * (the slow path flushed the caches; a cached region is its stream's until then). */
static int joinable(const vpmm_region_t *r)
{
    return r != NULL && r->state == VPMM_REGION_FREE && r->uses == NULL && !r->cached &&
           (r->ready || r->seq != VPMM_SEQ_CAPTURE);
}

static int pending_on(const vpmm_region_t *r, const vpmm_stream_rec_t *s)
{
    return joinable(r) && !r->ready && r->stream == s;
}

size_t vpmm_i_region_join_across(vpmm_pool_t *p, vpmm_stream_rec_t *s, vpmm_join_wait_fn wait)
{
    size_t joined = 0;
    if (s->retired)
        return 0;
    for (vpmm_chunk_t *c = p->chunks; c; c = c->next) {
        if (c->arena != &p->shared)
            continue;
        for (vpmm_region_t *r = c->first; r; r = r->next) {
            if (!joinable(r) || pending_on(r, s))
                continue;
            if (!(joinable(r->prev) && cuts_a_handle(p, r->addr)) &&
                !(joinable(r->next) && cuts_a_handle(p, r->addr + r->size)))
                continue;
            /* Another stream's memory: the caller's stream waits for it on the GPU first. */
            if (!r->ready && (wait == NULL || !wait(p, s, r)))
                continue;
            vpmm_i_index_del(p, r);
            r->ready = 0;
            r->stream = s;
            r->seq = s->recorded; /* covered by s's next marker, as a free of s now */
            vpmm_i_index_add(p, r);
            r = vpmm_i_region_coalesce(p, r); /* the walk goes on after the joined region */
            joined++;
        }
    }
    return joined;
}

vpmm_region_t *vpmm_i_region_find(const vpmm_pool_t *p, uintptr_t addr)
{
    for (const vpmm_chunk_t *c = p->chunks; c; c = c->next) {
        if (addr < c->base || addr - c->base >= c->size)
            continue;
        for (vpmm_region_t *r = c->first; r; r = r->next)
            if (addr >= r->addr && addr - r->addr < r->size)
                return r;
    }
    return NULL;
}

/* ---- the links the index keeps (a stream's pending list, an arena's side entries) ----------- */
/* They live here, below stream.c and arena.c, because the index (vpmm_i_index_add/_del, the free
 * trees) maintains them: the core's calls go down only (docs/ARCHITECTURE.md). */

void vpmm_i_stream_pending_add(vpmm_stream_rec_t *s, vpmm_region_t *r)
{
    /* Usually r is the newest: walk back from the tail to keep seq order. */
    vpmm_region_t *at = s->pend_tail;
    while (at && at->seq > r->seq)
        at = at->qprev;
    r->qprev = at;
    r->qnext = at ? at->qnext : s->pend_head;
    if (r->qnext)
        r->qnext->qprev = r;
    else
        s->pend_tail = r;
    if (at)
        at->qnext = r;
    else
        s->pend_head = r;
}

void vpmm_i_stream_pending_del(vpmm_stream_rec_t *s, vpmm_region_t *r)
{
    qlist_unlink(&s->pend_head, &s->pend_tail, r);
}

vpmm_side_t *vpmm_i_side_find(vpmm_arena_t *a, const vpmm_stream_rec_t *s)
{
    for (size_t i = 0; i < a->nside; i++)
        if (a->side[i].stream == s)
            return &a->side[i];
    return NULL;
}

void vpmm_i_arena_forget_stream(vpmm_pool_t *p, const vpmm_stream_rec_t *s)
{
    for (vpmm_arena_t *a = p->privates; a; a = a->next) {
        vpmm_side_t *e = vpmm_i_side_find(a, s);
        if (e != NULL)
            *e = a->side[--a->nside]; /* empty: s had no region left (refs == 0) */
    }
}

/* ---- a bad pointer's diagnosis (vpmm_free, the use calls of uses.c) ------------------------ */

vpmm_status_t vpmm_i_bad_pointer(vpmm_pool_t *p, void *ptr, const char *fn)
{
    vpmm_region_t *r = vpmm_i_region_find(p, (uintptr_t)ptr);
    if (r == NULL) {
        vpmm_i_set_error("%s: %p is not inside this pool", fn, ptr);
        return VPMM_ERROR_FOREIGN_POINTER;
    }
    if (r->state == VPMM_REGION_ALLOCATED) {
        vpmm_i_set_error("%s: %p is %zu bytes into the allocation at %p", fn, ptr,
                         (size_t)((uintptr_t)ptr - r->addr), (void *)r->addr);
        return VPMM_ERROR_INTERIOR_POINTER;
    }
    vpmm_i_set_error("%s: %p is not allocated (double free?)", fn, ptr);
    return VPMM_ERROR_DOUBLE_FREE;
}
