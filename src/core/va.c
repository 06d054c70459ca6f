/*
 * va.c — VA chunks (reservations) and carving holes.
 *
 * The pool reserves one chunk of opt.va_size at creation and another only when no hole of the
 * span's size class can take it (small requests live in small chunks of their own, 64 GiB: I13);
 * a shared chunk that has become one whole hole is given back by itself (vpmm_i_chunk_trim: when
 * zombies are reclaimed, a graph pool's chunks come back, or on vpmm_trim), except, per class, the
 * one full-size chunk the next malloc would reserve again, so address space never leaks — not
 * even for a server that captures and destroys graphs forever, each graph pool reserving its own
 * chunk (the seed's case D leaked the unused end of a hole — here the remainder of a carved hole
 * always stays a hole). Regions never cross chunks, and a chunk belongs to one arena (the
 * shared one or a graph pool's) for as long as that arena lives. Called under the pool lock; I1/I5
 * are checked in check.c.
 */
#include <stdlib.h>
#include <string.h>

#include "pool.h"
#include "region.h"
#include "va.h"

/*
 * A graph pool's chunk is smaller than the shared pool's: a process may hold hundreds of graph
 * pools (one per captured graph is common), and 8 TiB each would exhaust the 47-bit address
 * space. One larger than this is reserved only for a request that needs it.
 */
#define PRIVATE_CHUNK_BYTES ((size_t)64 << 30)
/* A small chunk holds only blocks under opt.small_bytes: 64 GiB is half a million of its pages. */
#define SMALL_CHUNK_BYTES ((size_t)64 << 30)

/* The full size of a chunk of arena a (of the small class if small): what the trim keeps. */
static size_t chunk_full_size(const vpmm_pool_t *p, const vpmm_arena_t *a, int small)
{
    if (a->priv)
        return VPMM_MIN(p->opt.va_size, PRIVATE_CHUNK_BYTES);
    return small ? VPMM_MIN(p->opt.va_size, SMALL_CHUNK_BYTES) : p->opt.va_size;
}

static size_t chunk_size_for(const vpmm_pool_t *p, const vpmm_arena_t *a, size_t min_bytes,
                             int small)
{
    size_t size = chunk_full_size(p, a, small);
    if (a->priv || small)
        size = VPMM_MAX(size, vpmm_align_up(min_bytes, p->page_size));
    return size;
}

vpmm_status_t vpmm_i_chunk_add(vpmm_pool_t *p, vpmm_arena_t *a, size_t min_bytes, int small,
                               vpmm_chunk_t **out)
{
    const size_t size = chunk_size_for(p, a, min_bytes, small);
    vpmm_chunk_t *c, **tail;
    vpmm_region_t *r;
    uintptr_t base;
    vpmm_status_t st;

    VPMM_CHECK(vpmm_i_region_reserve(p, 1));
    c = calloc(1, sizeof *c);
    if (c == NULL) {
        vpmm_i_set_error("out of host memory for a VA chunk");
        return VPMM_ERROR_HOST_OUT_OF_MEMORY;
    }
    st = vpmm_i_drv_status(p, p->drv->va_reserve(p->drv, size, p->page_size, &base));
    if (st != VPMM_SUCCESS) {
        if (st == VPMM_ERROR_OUT_OF_MEMORY)
            p->oom_cause = VPMM_OOM_VA; /* for the report: address space, not device memory */
        free(c);
        return st;
    }
    c->base = base;
    c->size = size;
    c->index = p->next_chunk_index++;
    c->arena = a;
    c->small = small && !a->priv;
    r = vpmm_i_region_take(p);
    memset(r, 0, sizeof *r);
    r->addr = base;
    r->size = c->size;
    r->chunk = c;
    r->state = VPMM_REGION_HOLE;
    c->first = r;
    vpmm_i_index_add(p, r);
    /* The list is kept in address order: walks, dumps and checkpoints visit memory in order. */
    for (tail = &p->chunks; *tail && (*tail)->base < base; tail = &(*tail)->next)
        ;
    c->next = *tail;
    *tail = c;
    p->chunk_count++;
    p->c.reserved_va_bytes += c->size;
    a->chunks++;
    if (a->priv)
        a->c.reserved_va_bytes += c->size;
    *out = c;
    return VPMM_SUCCESS;
}

static int chunk_empty(const vpmm_chunk_t *c)
{
    return c->first->state == VPMM_REGION_HOLE && c->first->next == NULL;
}

vpmm_status_t vpmm_i_chunk_remove(vpmm_pool_t *p, vpmm_chunk_t *c)
{
    vpmm_chunk_t **link;
    VPMM_CHECK(vpmm_i_drv_status(p, p->drv->va_free(p->drv, c->base, c->size)));
    if (c->nvtx_heap != NULL)
        vpmm_i_nvtx_heap_unregister_slow(c->nvtx_heap);
    vpmm_i_index_del(p, c->first);
    vpmm_i_region_give(p, c->first);
    for (link = &p->chunks; *link != c; link = &(*link)->next)
        ;
    *link = c->next;
    p->chunk_count--;
    p->c.reserved_va_bytes -= c->size;
    c->arena->chunks--;
    if (c->arena->priv)
        c->arena->c.reserved_va_bytes -= c->size;
    free(c);
    return VPMM_SUCCESS;
}

void vpmm_i_chunk_trim(vpmm_pool_t *p)
{
    unsigned full_in_use[2] = { 0, 0 }; /* per size class: large, small */
    vpmm_chunk_t *c;
    for (c = p->chunks; c; c = c->next)
        full_in_use[c->small] +=
            !c->arena->priv && c->size >= chunk_full_size(p, c->arena, c->small) && !chunk_empty(c);
    for (c = p->chunks; c;) {
        vpmm_chunk_t *next = c->next;
        if (!c->arena->priv && chunk_empty(c)) {
            /* One empty full-size chunk of each class stays when no other of its class is in
             * use: the next malloc of that class needs one anyway. A failed release keeps the
             * chunk (empty, accounted, reusable). */
            if (c->size >= chunk_full_size(p, c->arena, c->small) && full_in_use[c->small] == 0)
                full_in_use[c->small] = 1;
            else
                (void)vpmm_i_chunk_remove(p, c);
        }
        c = next;
    }
}

/*
 * Carve [addr, addr+len) out of a hole; the rest stays hole (never leaked):
 *
 *   hole: [.......|=====len=====|.......)
 *          hole    returned      hole
 *
 * Needs up to two spare region nodes (reserved by the caller).
 */
vpmm_region_t *vpmm_i_hole_carve(vpmm_pool_t *p, vpmm_region_t *hole, uintptr_t addr, size_t len)
{
    return vpmm_i_region_cut(p, hole, addr, addr + len);
}
