/*
 * check.c — vpmm_pool_check: validates exactly the invariants I1–I14 written above the structs in
 * pool.h and returns how many are violated (each described on `report`).
 *
 * It recomputes everything from the region lists — byte sums, per-stream reference counts, the
 * mapping table — and compares with the incrementally kept counters and indexes, so a bug in any
 * bookkeeping path shows up at the first mutation after it. Tests call it after every operation.
 * O(regions + mapped pages); takes the pool lock; allocates only temporary tables. I14 asks the
 * driver (get_access, once per mapped page and device): the one question the books cannot answer.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "entry.h"
#include "arena.h"
#include "pages.h"
#include "pool.h"
#include "region.h"
#include "share.h"

typedef struct checker {
    FILE *out;
    size_t violations;
} checker_t;

__attribute__((format(printf, 2, 3))) static void fail(checker_t *k, const char *fmt, ...)
{
    va_list ap;
    k->violations++;
    if (k->out == NULL)
        return;
    fputs("vpmm check: ", k->out);
    va_start(ap, fmt);
    vfprintf(k->out, fmt, ap);
    va_end(ap);
    fputc('\n', k->out);
}

/* Per-key counter in a temporary map (key: a pointer; value: the count). */
static void bump(vpmm_hmap_t *m, const void *key, checker_t *k)
{
    uintptr_t n = (uintptr_t)vpmm_hmap_get(m, (uintptr_t)key);
    if (vpmm_hmap_put(m, (uintptr_t)key, (void *)(n + 1)) != 0)
        fail(k, "out of host memory while checking");
}

static size_t count_of(const vpmm_hmap_t *m, const void *key)
{
    return (size_t)(uintptr_t)vpmm_hmap_get(m, (uintptr_t)key);
}

typedef struct sums {
    size_t alloc, live, nalloc, free, hole, zombie, nready, npending, ncached, nholes, nzombies;
    size_t ndeferred;
    size_t live_pages, zombie_pages;
} sums_t;

/* One arena's share, recomputed from its chunks (I7, I9). */
typedef struct arena_sums {
    const vpmm_arena_t *arena;
    size_t alloc, live, nalloc, free, hole, zombie, va, nready, nholes, npending, ncapture;
    unsigned chunks;
} arena_sums_t;

/* I14: the pool's device and every peer may read and write page a. */
static void check_access(const vpmm_pool_t *p, uintptr_t a, checker_t *k)
{
    vpmm_driver_t *d = p->drv;
    for (size_t i = 0; i <= p->npeers; i++) {
        int dev = i == 0 ? d->device : p->peers[i - 1], rw = 0;
        vpmm_dres_t r = d->get_access(d, a, dev, &rw);
        if (r != VPMM_DRV_OK || !rw)
            fail(k, "I14: page 0x%" PRIxPTR " is not accessible to device %d%s", a, dev,
                 r != VPMM_DRV_OK ? " (the driver cannot say)" : "");
    }
}

/* I3: the pages of one region are mapped as its state requires; I14: accessible. */
static void check_pages(const vpmm_pool_t *p, const vpmm_region_t *r, uintptr_t *last_live,
                        sums_t *s, checker_t *k)
{
    const size_t pg = p->page_size;
    uintptr_t lo = vpmm_align_down(r->addr, pg), hi = vpmm_align_up(r->addr + r->size, pg);
    if (r->state == VPMM_REGION_HOLE)
        return;
    for (uintptr_t a = lo; a < hi; a += pg) {
        const vpmm_phys_t *ph = vpmm_i_phys_at(p, a);
        int live = ph != NULL && a >= ph->va && a - ph->va < ph->size;
        if (r->state == VPMM_REGION_ZOMBIE) {
            if (ph == NULL || live)
                fail(k, "I3: zombie page 0x%" PRIxPTR " has no zombie mapping", a);
            else if (!r->busy) /* a busy one is being unmapped without the lock (I12) */
                check_access(p, a, k);
            s->zombie_pages++;
            continue;
        }
        if (!live)
            fail(k, "I3: page 0x%" PRIxPTR " of a %s region has no live mapping", a,
                 r->state == VPMM_REGION_FREE ? "free" : "allocated");
        if (a != *last_live) { /* pages shared by neighbours count once */
            s->live_pages++;
            if (live)
                check_access(p, a, k);
        }
        *last_live = a;
    }
}

/* I11: r's other streams: distinct, not its own, each counted as a reference; gates (deferred)
 * name recorded markers or a live stream's next one. */
static void check_uses(const vpmm_region_t *r, vpmm_hmap_t *refs, checker_t *k)
{
    const vpmm_uses_t *u = r->uses;
    if (u->n == 0 || u->n > u->cap)
        fail(k, "I11: region 0x%" PRIxPTR " has %zu uses (room %zu)", r->addr, u->n, u->cap);
    for (size_t i = 0; i < u->n && i < u->cap; i++) {
        const struct vpmm_use *e = &u->e[i];
        if (e->stream == NULL) { /* a share slot (share.c): one per region, of the shared pool */
            for (size_t j = 0; j < i; j++)
                if (u->e[j].stream == NULL)
                    fail(k, "I11: region 0x%" PRIxPTR " holds two share slots", r->addr);
            if (vpmm_i_arena_of(r)->priv)
                fail(k, "I11: graph pool region 0x%" PRIxPTR " holds a share slot", r->addr);
            continue;
        }
        if (e->stream == r->stream) {
            fail(k, "I11: region 0x%" PRIxPTR " use %zu names its own stream", r->addr, i);
            continue;
        }
        bump(refs, e->stream, k);
        for (size_t j = 0; j < i; j++)
            if (u->e[j].stream == e->stream)
                fail(k, "I11: region 0x%" PRIxPTR " names stream %p twice", r->addr,
                     (void *)e->stream->handle);
        if (r->state == VPMM_REGION_FREE &&
            e->seq + (e->stream->retired ? 1 : 0) > e->stream->recorded)
            fail(k, "I11: deferred region 0x%" PRIxPTR " waits for an unrecordable marker",
                 r->addr);
    }
}

static void check_region(const vpmm_pool_t *p, const vpmm_region_t *r, sums_t *s, vpmm_hmap_t *refs,
                         checker_t *k)
{
    const size_t pg = p->page_size;
    if (r->uses != NULL) {
        if (r->state != VPMM_REGION_ALLOCATED && r->state != VPMM_REGION_FREE)
            fail(k, "I11: %s region 0x%" PRIxPTR " has uses",
                 r->state == VPMM_REGION_HOLE ? "hole" : "zombie", r->addr);
        else
            check_uses(r, refs, k);
    }
    /* I13: an indexed FREE or HOLE region's tree key is its size and its chunk's class. */
    if ((r->state == VPMM_REGION_HOLE ||
         (r->state == VPMM_REGION_FREE && !r->cached && !r->uses)) &&
        r->node.k1 != (r->chunk->small ? VPMM_KEY_SMALL | r->size : r->size))
        fail(k, "I13: region 0x%" PRIxPTR "+%zu is keyed %#" PRIx64 " in its tree", r->addr,
             r->size, r->node.k1);
    if (r->busy && (r->state != VPMM_REGION_ZOMBIE || p->worker == NULL))
        fail(k, "I12: region 0x%" PRIxPTR " is busy but %s", r->addr,
             p->worker == NULL ? "the pool has no worker" : "not a zombie");
    if (r->state == VPMM_REGION_FREE && r->uses != NULL) {
        /* Deferred (uses.c): in the deferred list only, its own stream referenced. */
        s->free += r->size;
        s->ndeferred++;
        if (r->ready || r->cached || r->stream == NULL)
            fail(k, "I11: deferred region 0x%" PRIxPTR " is ready, cached or has no stream",
                 r->addr);
        else
            bump(refs, r->stream, k);
        return;
    }
    switch (r->state) {
    case VPMM_REGION_ALLOCATED:
        s->alloc += r->size;
        s->live += r->requested;
        s->nalloc++;
        if (vpmm_hmap_get(&p->allocs, r->addr) != r)
            fail(k, "I7: allocation 0x%" PRIxPTR " missing from the allocation table", r->addr);
        if (r->requested == 0 || vpmm_round_up_checked(r->requested, VPMM_ALIGNMENT) != r->size)
            fail(k, "allocation 0x%" PRIxPTR ": size %zu does not fit request %zu", r->addr,
                 r->size, r->requested);
        if (r->stream == NULL)
            fail(k, "allocation 0x%" PRIxPTR " has no stream", r->addr);
        else
            bump(refs, r->stream, k);
        break;
    case VPMM_REGION_FREE:
        s->free += r->size;
        if (r->cached) {
            s->ncached++;
            if (vpmm_i_arena_of(r)->priv)
                fail(k, "I9: cached region 0x%" PRIxPTR " in a graph pool", r->addr);
            if (r->ready || r->stream == NULL)
                fail(k, "cached region 0x%" PRIxPTR " is ready or has no stream", r->addr);
            else {
                bump(refs, r->stream, k);
                if (r->seq > r->stream->recorded)
                    fail(k, "I8: cached region 0x%" PRIxPTR " seq beyond its stream's markers",
                         r->addr);
            }
        } else if (r->ready) {
            s->nready++;
            if (r->stream != NULL)
                fail(k, "ready region 0x%" PRIxPTR " still names a stream", r->addr);
        } else if (r->stream == NULL) {
            fail(k, "pending region 0x%" PRIxPTR " has no stream", r->addr);
        } else if (r->seq == VPMM_SEQ_CAPTURE) {
            s->npending++;
            bump(refs, r->stream, k);
            if (!vpmm_i_arena_of(r)->priv || vpmm_i_arena_of(r)->captures == 0)
                fail(k,
                     "I8: region 0x%" PRIxPTR " waits for a capture's end with no capture into "
                     "its arena",
                     r->addr);
        } else {
            s->npending++;
            bump(refs, r->stream, k);
            if (r->seq < r->stream->completed || r->seq > r->stream->recorded)
                fail(k,
                     "I8: pending region 0x%" PRIxPTR " seq %" PRIu64 " outside [%" PRIu64
                     ", %" PRIu64 "]",
                     r->addr, r->seq, r->stream->completed, r->stream->recorded);
        }
        break;
    case VPMM_REGION_HOLE:
    case VPMM_REGION_ZOMBIE:
        if (!vpmm_is_aligned(r->addr, pg) || !vpmm_is_aligned(r->size, pg))
            fail(k, "I2: %s 0x%" PRIxPTR "+%zu is not page aligned",
                 r->state == VPMM_REGION_HOLE ? "hole" : "zombie", r->addr, r->size);
        if (r->state == VPMM_REGION_HOLE) {
            s->hole += r->size;
            s->nholes++;
        } else {
            s->zombie += r->size;
            s->nzombies++;
            if (r->stream != NULL) {
                bump(refs, r->stream, k);
                if (r->seq >= r->stream->recorded)
                    fail(k,
                         "zombie 0x%" PRIxPTR " waits for marker %" PRIu64
                         " that was never recorded",
                         r->addr, r->seq);
            }
        }
        break;
    default:
        fail(k, "region 0x%" PRIxPTR " has unknown state %d", r->addr, (int)r->state);
    }
    if (r->next) {
        if (r->state == VPMM_REGION_HOLE && r->next->state == VPMM_REGION_HOLE)
            fail(k, "I6: adjacent holes at 0x%" PRIxPTR, r->next->addr);
        if (vpmm_i_free_mergeable(r, r->next))
            fail(k, "I6: mergeable free regions at 0x%" PRIxPTR " and 0x%" PRIxPTR, r->addr,
                 r->next->addr);
    }
}

/* Adds r to its arena's sums. */
static void count_in_arena(const vpmm_region_t *r, arena_sums_t *a)
{
    switch (r->state) {
    case VPMM_REGION_ALLOCATED:
        a->alloc += r->size;
        a->live += r->requested;
        a->nalloc++;
        break;
    case VPMM_REGION_FREE:
        a->free += r->size;
        if (r->ready)
            a->nready++;
        else if (!r->cached && r->uses == NULL) /* deferred: in no tree */
            a->npending++;
        if (!r->ready && r->seq == VPMM_SEQ_CAPTURE)
            a->ncapture++;
        break;
    case VPMM_REGION_HOLE:
        a->hole += r->size;
        a->nholes++;
        break;
    case VPMM_REGION_ZOMBIE:
        a->zombie += r->size;
        break;
    }
}

static arena_sums_t *sums_of(arena_sums_t *as, size_t n, const vpmm_arena_t *a)
{
    for (size_t i = 0; i < n; i++)
        if (as[i].arena == a)
            return &as[i];
    return NULL;
}

static void check_chunks(const vpmm_pool_t *p, sums_t *s, arena_sums_t *as, size_t nas,
                         vpmm_hmap_t *refs, checker_t *k, size_t *va)
{
    unsigned n = 0;
    for (const vpmm_chunk_t *c = p->chunks; c; c = c->next, n++) {
        uintptr_t at = c->base, last_live = 0;
        const vpmm_region_t *prev = NULL;
        arena_sums_t *a = sums_of(as, nas, c->arena);
        *va += c->size;
        if (c->next && c->next->base < c->base + c->size)
            fail(k, "I1: chunk %u is not below the next chunk (the list is in address order)",
                 c->index);
        if (a == NULL) {
            fail(k, "I9: chunk %u belongs to an arena the pool does not list", c->index);
            continue;
        }
        if (c->small && c->arena->priv)
            fail(k, "I13: chunk %u of a graph pool is small", c->index);
        a->va += c->size;
        a->chunks++;
        for (const vpmm_region_t *r = c->first; r; prev = r, r = r->next) {
            count_in_arena(r, a);
            if (r->chunk != c || r->prev != prev)
                fail(k, "I1: region 0x%" PRIxPTR " has bad chunk or prev link", r->addr);
            if (r->addr != at || r->size == 0)
                fail(k, "I1: region 0x%" PRIxPTR "+%zu does not follow 0x%" PRIxPTR, r->addr,
                     r->size, at);
            at = r->addr + r->size;
            check_region(p, r, s, refs, k);
            check_pages(p, r, &last_live, s, k);
        }
        if (at != c->base + c->size)
            fail(k, "I1: chunk %u ends at 0x%" PRIxPTR ", regions end at 0x%" PRIxPTR, c->index,
                 c->base + c->size, at);
    }
    if (n != p->chunk_count)
        fail(k, "chunk count %u != %u chunks listed", p->chunk_count, n);
}

/* I7 for the cache: each list holds cached FREE regions of this stream, all of its key's size. */
static size_t check_cache(const vpmm_stream_rec_t *t, checker_t *k)
{
    size_t n = 0, bytes = 0, pos;
    uint64_t key;
    void *val;
    for (pos = vpmm_hmap_next(&t->cache, 0, &key, &val); pos < t->cache.cap;
         pos = vpmm_hmap_next(&t->cache, pos + 1, &key, &val)) {
        for (const vpmm_region_t *r = val; r; r = r->qnext, n++) {
            bytes += r->size;
            if (r->state != VPMM_REGION_FREE || !r->cached || r->stream != t || r->size != key)
                fail(k,
                     "I7: stream %p cache list for %" PRIu64
                     " bytes holds a wrong region 0x%" PRIxPTR,
                     (void *)t->handle, key, r->addr);
        }
    }
    if (bytes != t->cached_bytes)
        fail(k, "stream %p cached bytes %zu != %zu listed", (void *)t->handle, t->cached_bytes,
             bytes);
    return n;
}

static void check_stream(const vpmm_pool_t *p, const vpmm_stream_rec_t *t, const vpmm_hmap_t *refs,
                         size_t *npending, size_t *ncached, checker_t *k)
{
    size_t n = 0, bytes = 0, dirty = 0;
    *ncached += check_cache(t, k);
    if ((t->owner != 0) != (t->handle == VPMM_STREAM_PER_THREAD))
        fail(k, "I10: stream %p has owner %" PRIu64, (void *)t->handle, t->owner);
    for (const vpmm_stream_rec_t *u = p->streams; u && !t->retired; u = u->next)
        if (u != t && u->handle == t->handle && u->owner == t->owner)
            fail(k, "I10: two records for stream %p of thread %" PRIu64, (void *)t->handle,
                 t->owner);
    if (t->completed > t->recorded)
        fail(k, "I8: stream %p completed %" PRIu64 " > recorded %" PRIu64, (void *)t->handle,
             t->completed, t->recorded);
    size_t all = 0;
    for (const vpmm_region_t *r = t->pend_head; r; r = r->qnext, all++) {
        if (r->state != VPMM_REGION_FREE || r->ready || r->stream != t)
            fail(k, "I7: stream %p pending list holds a foreign region 0x%" PRIxPTR,
                 (void *)t->handle, r->addr);
        if (r->qnext && r->qnext->seq < r->seq)
            fail(k, "I7: stream %p pending list out of seq order", (void *)t->handle);
        if ((r->qnext == NULL) != (r == t->pend_tail))
            fail(k, "I7: stream %p pending list tail is wrong", (void *)t->handle);
        dirty += r->seq == t->recorded;
        if (vpmm_i_arena_of(r)->priv)
            continue; /* in its arena's side tree: check_arena */
        bytes += r->size;
        n++;
    }
    if (n != t->free_tree.count)
        fail(k, "I7: stream %p has %zu pending regions listed, %zu in its tree", (void *)t->handle,
             n, t->free_tree.count);
    if (vpmm_rb_validate(&t->free_tree) != 0)
        fail(k, "I7: stream %p free tree is not a valid red-black tree", (void *)t->handle);
    if (bytes != t->pending_bytes)
        fail(k, "stream %p pending bytes %zu != %zu listed", (void *)t->handle, t->pending_bytes,
             bytes);
    if (dirty != t->dirty_regions)
        fail(k, "I8: stream %p dirty count %zu != %zu", (void *)t->handle, t->dirty_regions, dirty);
    if (count_of(refs, t) != t->refs)
        fail(k, "stream %p refs %zu != %zu regions naming it", (void *)t->handle, t->refs,
             count_of(refs, t));
    *npending += all;
}

/* I4: zombie regions are whole handles; count each handle's zombie mappings. */
static void count_zombie_maps(const vpmm_pool_t *p, vpmm_hmap_t *zmaps, checker_t *k)
{
    for (const vpmm_region_t *z = p->zombie_head; z; z = z->qnext) {
        uintptr_t at = z->addr, end = z->addr + z->size;
        while (at < end) {
            const vpmm_phys_t *ph = vpmm_i_phys_at(p, at);
            if (ph == NULL || ph->size == 0 || ph->size > end - at) {
                fail(k, "I4: zombie 0x%" PRIxPTR " is not a run of whole handles", z->addr);
                break;
            }
            bump(zmaps, ph, k);
            at += ph->size;
        }
    }
}

static void check_phys(const vpmm_pool_t *p, const sums_t *s, checker_t *k)
{
    vpmm_hmap_t zmaps;
    size_t n = 0, bytes = 0, pages = 0;

    if (vpmm_hmap_init(&zmaps, 64) != 0) {
        fail(k, "out of host memory while checking");
        return;
    }
    count_zombie_maps(p, &zmaps, k);
    for (const vpmm_phys_t *ph = p->phys_head; ph; ph = ph->next) {
        n++;
        bytes += ph->size;
        pages += ph->size / p->page_size;
        if (ph->size == 0 || ph->size % p->page_size != 0 || ph->va % p->page_size != 0)
            fail(k, "I4: handle at 0x%" PRIxPTR " is not whole pages", ph->va);
        for (size_t off = 0; off < ph->size; off += p->page_size)
            if (vpmm_i_phys_at(p, ph->va + off) != ph)
                fail(k, "I4: page 0x%" PRIxPTR " of a handle is not mapped to it", ph->va + off);
        if (count_of(&zmaps, ph) != ph->zombie_maps)
            fail(k, "I4: handle at 0x%" PRIxPTR " has %zu zombie mappings, %zu recorded", ph->va,
                 count_of(&zmaps, ph), ph->zombie_maps);
    }
    vpmm_hmap_fini(&zmaps);
    if (n != p->phys_count)
        fail(k, "I4: %zu handles listed, count says %zu", n, p->phys_count);
    if (bytes != p->c.mapped_bytes || bytes != s->alloc + s->free)
        fail(k, "I4: mapped %zu, handles %zu, allocated+free %zu", p->c.mapped_bytes, bytes,
             s->alloc + s->free);
    if (s->live_pages != pages)
        fail(k, "I3: %zu live pages under allocated/free regions, handles hold %zu", s->live_pages,
             pages);
    if (p->maps.count != s->live_pages + s->zombie_pages)
        fail(k, "I3: mapping table has %zu entries, regions account for %zu", p->maps.count,
             s->live_pages + s->zombie_pages);
}

static void check_counters(const vpmm_pool_t *p, const sums_t *s, size_t va, checker_t *k)
{
    const vpmm_counters_t *c = &p->c;
    if (c->allocated_bytes != s->alloc || c->live_bytes != s->live || c->live_allocs != s->nalloc)
        fail(k, "I5: allocated %zu/%zu live %zu/%zu count %" PRIu64 "/%zu (counter/regions)",
             c->allocated_bytes, s->alloc, c->live_bytes, s->live, c->live_allocs, s->nalloc);
    if (c->free_bytes != s->free || c->hole_bytes != s->hole || c->zombie_bytes != s->zombie)
        fail(k, "I5: free %zu/%zu hole %zu/%zu zombie %zu/%zu (counter/regions)", c->free_bytes,
             s->free, c->hole_bytes, s->hole, c->zombie_bytes, s->zombie);
    if (c->reserved_va_bytes != va || s->alloc + s->free + s->hole + s->zombie != va)
        fail(k, "I5: reserved %zu, chunks %zu, regions %zu", c->reserved_va_bytes, va,
             s->alloc + s->free + s->hole + s->zombie);
    if (c->peak_live_bytes < c->live_bytes || c->peak_mapped_bytes < c->mapped_bytes ||
        p->mapped_high < c->mapped_bytes)
        fail(k, "peaks below current values");
    /* trim.c: every release in progress has room in unreleased should it fail */
    if (p->nunreleased + p->unreleased_reserved > p->unreleased_cap)
        fail(k, "unreleased: %zu kept + %zu reserved > room %zu", p->nunreleased,
             p->unreleased_reserved, p->unreleased_cap);
}

/* I7 and I9 for one arena: its trees hold exactly its regions; a private one's counters. */
static void check_arena(const vpmm_pool_t *p, const arena_sums_t *a, checker_t *k)
{
    const vpmm_arena_t *ar = a->arena;
    size_t nside = 0;
    (void)p;
    if (ar->ready.count != a->nready || vpmm_rb_validate(&ar->ready) != 0)
        fail(k, "I7: arena %u ready tree has %zu nodes for %zu ready regions (or is malformed)",
             ar->id, ar->ready.count, a->nready);
    if (ar->holes.count != a->nholes || vpmm_rb_validate(&ar->holes) != 0)
        fail(k, "I7: arena %u hole tree has %zu nodes for %zu holes (or is malformed)", ar->id,
             ar->holes.count, a->nholes);
    if (ar->chunks != a->chunks)
        fail(k, "I9: arena %u counts %u chunks, owns %u", ar->id, ar->chunks, a->chunks);
    if (!ar->priv)
        return;
    for (size_t i = 0; i < ar->nside; i++) {
        const vpmm_rbtree_t *t = &ar->side[i].tree;
        nside += t->count;
        if (vpmm_rb_validate(t) != 0)
            fail(k, "I7: arena %u side tree %zu is malformed", ar->id, i);
        for (vpmm_rb_node_t *n = vpmm_rb_first(t); n; n = vpmm_rb_next(n)) {
            const vpmm_region_t *r = VPMM_CONTAINER_OF(n, vpmm_region_t, node);
            if (r->state != VPMM_REGION_FREE || r->ready || r->stream != ar->side[i].stream ||
                vpmm_i_arena_of(r) != ar)
                fail(k, "I7: arena %u side tree holds a foreign region 0x%" PRIxPTR, ar->id,
                     r->addr);
        }
    }
    if (nside != a->npending)
        fail(k, "I7: arena %u side trees hold %zu regions for %zu pending", ar->id, nside,
             a->npending);
    if (ar->capture_pending != a->ncapture)
        fail(k, "I9: arena %u counts %zu capture-pending regions, has %zu", ar->id,
             ar->capture_pending, a->ncapture);
    if (ar->c.allocated_bytes != a->alloc || ar->c.live_bytes != a->live ||
        ar->c.live_allocs != a->nalloc || ar->c.free_bytes != a->free ||
        ar->c.hole_bytes != a->hole || ar->c.zombie_bytes != a->zombie ||
        ar->c.reserved_va_bytes != a->va)
        fail(k,
             "I9: arena %u counters (alloc %zu live %zu n %" PRIu64
             " free %zu hole %zu zombie %zu va %zu) != regions (%zu %zu %zu %zu %zu %zu %zu)",
             ar->id, ar->c.allocated_bytes, ar->c.live_bytes, ar->c.live_allocs, ar->c.free_bytes,
             ar->c.hole_bytes, ar->c.zombie_bytes, ar->c.reserved_va_bytes, a->alloc, a->live,
             a->nalloc, a->free, a->hole, a->zombie, a->va);
    if (ar->c.peak_live_bytes < ar->c.live_bytes ||
        ar->c.peak_mapped_bytes < ar->c.allocated_bytes + ar->c.free_bytes)
        fail(k, "arena %u peaks below current values", ar->id);
}

static void check_indexes(const vpmm_pool_t *p, const sums_t *s, checker_t *k)
{
    size_t nz = 0;
    if (p->allocs.count != s->nalloc)
        fail(k, "I7: allocation table has %zu entries, %zu allocations", p->allocs.count,
             s->nalloc);
    for (const vpmm_region_t *z = p->zombie_head; z; z = z->qnext, nz++)
        if (z->state != VPMM_REGION_ZOMBIE)
            fail(k, "I7: zombie list holds a non-zombie at 0x%" PRIxPTR, z->addr);
    if (nz != s->nzombies)
        fail(k, "I7: zombie list has %zu entries for %zu zombies", nz, s->nzombies);
    nz = 0;
    for (const vpmm_region_t *d = p->deferred_head; d; d = d->qnext, nz++)
        if (d->state != VPMM_REGION_FREE || d->uses == NULL)
            fail(k, "I11: deferred list holds a region that is not deferred at 0x%" PRIxPTR,
                 d->addr);
    if (nz != s->ndeferred)
        fail(k, "I11: deferred list has %zu entries for %zu deferred regions", nz, s->ndeferred);
}

size_t vpmm_i_pool_check(const vpmm_pool_t *pool, FILE *report)
{
    checker_t k = { report, 0 };
    sums_t s = { 0 };
    vpmm_hmap_t refs;
    arena_sums_t *as;
    size_t va = 0, npending = 0, ncached = 0, nlive = 0, nas = 0;

    if (vpmm_hmap_init(&refs, 64) != 0) {
        fail(&k, "out of host memory while checking");
        return k.violations;
    }
    vpmm_i_lock(pool);
    as = calloc(pool->private_count + 1, sizeof *as);
    if (as == NULL) {
        vpmm_i_unlock(pool);
        vpmm_hmap_fini(&refs);
        fail(&k, "out of host memory while checking");
        return k.violations;
    }
    as[nas++].arena = &pool->shared;
    for (const vpmm_arena_t *a = pool->privates; a; a = a->next) {
        if (nas > pool->private_count) {
            fail(&k, "I9: more private arenas listed than counted (%zu)", pool->private_count);
            break;
        }
        as[nas++].arena = a;
    }
    if (nas != pool->private_count + 1)
        fail(&k, "I9: %zu private arenas listed, %zu counted", nas - 1, pool->private_count);
    check_chunks(pool, &s, as, nas, &refs, &k, &va);
    for (size_t i = 0; i < nas; i++)
        check_arena(pool, &as[i], &k);
    free(as);
    for (const vpmm_stream_rec_t *t = pool->streams; t; t = t->next, nlive++) {
        if (t->retired)
            fail(&k, "retired stream %p on the live list", (void *)t->handle);
        check_stream(pool, t, &refs, &npending, &ncached, &k);
    }
    for (const vpmm_stream_rec_t *t = pool->retired; t; t = t->next)
        check_stream(pool, t, &refs, &npending, &ncached, &k);
    if (nlive != pool->stream_count)
        fail(&k, "stream count %zu != %zu listed", pool->stream_count, nlive);
    if (npending != s.npending)
        fail(&k, "I7: %zu pending regions, %zu on stream lists", s.npending, npending);
    if (ncached != s.ncached)
        fail(&k, "I7: %zu cached regions, %zu in stream caches", s.ncached, ncached);
    check_phys(pool, &s, &k);
    k.violations += vpmm_i_import_check(pool, report);
    check_counters(pool, &s, va, &k);
    check_indexes(pool, &s, &k);
    vpmm_i_unlock(pool);
    vpmm_hmap_fini(&refs);
    return k.violations;
}
