/*
 * cache.c — the per-stream exact-size cache in front of the trees ("quick lists").
 *
 * Deep-learning programs free and allocate the same sizes over and over (79% of the mallocs of
 * the GPT-2 training trace and 92% of the BERT inference trace find a block of exactly their
 * rounded size freed earlier on their stream). A freed region therefore first goes, unmerged, to
 * its stream's cache: a hash from size to a LIFO list. A malloc of that size on that stream takes
 * it back with one hash probe — no tree update, no coalescing — which is what makes the hot path
 * cheap. A cached region belongs to its stream alone (the same stream-order argument as any of
 * its pending regions); other streams never see it until a flush.
 *
 * The price is that cached regions are not coalesced, and the tree path cannot place other sizes
 * in them. Three rules keep that from costing memory: every slow-path malloc flushes every cache
 * first (growth, defragmentation and other streams always see fully coalesced memory); the bytes
 * held in caches never exceed opt.cache_percent of the mapped bytes (past it, the freeing
 * stream's cache is flushed); and a malloc that misses its stream's cache flushes that cache
 * when it holds 1% of the mapped bytes or more. A miss means the program asks for a size it has
 * not freed lately — its shapes changed (a new sequence length, a new batch) — and a cache that
 * large then mostly holds the old shapes' blocks: left there, they keep their places while the
 * new sizes cut up the rest, and the next slow path finds the pages fragmented. Measured on the
 * traces (docs/ALGORITHM.md, "The exact-size cache"; bench/RESULTS.md).
 *
 * Bookkeeping: a cached region is FREE with cached = 1, linked through qnext; it counts in
 * free_bytes, its stream's refs and cached_bytes, and the pool's cached_bytes, and it is in no
 * tree. An emptied list keeps its key (value NULL) until the next flush clears the table, so a
 * take or put is one probe. Called under the pool lock; checked in check.c.
 */
#include "cache.h"
#include "pool.h"
#include "region.h"
#include "stream.h"

int vpmm_i_cache_put(vpmm_pool_t *p, vpmm_stream_rec_t *s, vpmm_region_t *r)
{
    void **slot;
    /* A retired stream takes no new markers: its frees take the ordinary path. */
    if (p->cache_limit == 0 || s->retired || vpmm_hmap_reserve(&s->cache, 1) != 0)
        return -1;
    slot = vpmm_hmap_ref_insert(&s->cache, r->size);
    r->state = VPMM_REGION_FREE;
    r->cached = 1;
    r->ready = 0;
    r->stream = s;
    r->seq = s->recorded;
    r->requested = 0;
    r->age = ++p->clock;
    r->qprev = NULL;
    r->qnext = *slot;
    *slot = r;
    s->cached_bytes += r->size;
    s->refs++;
    p->cached_bytes += r->size;
    p->c.free_bytes += r->size;
    if (VPMM_UNLIKELY(p->cached_bytes > p->cache_limit))
        vpmm_i_cache_flush(p, s);
    return 0;
}

/* Undoes a cached region's accounting; it stays state FREE, unlinked and unindexed. */
static void uncache(vpmm_pool_t *p, vpmm_stream_rec_t *s, vpmm_region_t *r)
{
    r->cached = 0;
    r->qnext = NULL;
    s->cached_bytes -= r->size;
    s->refs--;
    p->cached_bytes -= r->size;
    p->c.free_bytes -= r->size;
}

vpmm_region_t *vpmm_i_cache_take(vpmm_pool_t *p, vpmm_stream_rec_t *s, size_t size)
{
    void **slot = vpmm_hmap_ref(&s->cache, size);
    vpmm_region_t *r;
    if (slot == NULL || *slot == NULL)
        return NULL;
    r = *slot;
    *slot = r->qnext;
    uncache(p, s, r);
    return r;
}

void vpmm_i_cache_flush(vpmm_pool_t *p, vpmm_stream_rec_t *s)
{
    vpmm_region_t *chain = NULL;
    size_t pos;
    uint64_t key;
    void *val;

    if (s->cached_bytes == 0) {
        vpmm_hmap_clear(&s->cache); /* drop the keys of emptied lists */
        return;
    }
    /* Join every list into one chain first: the table must not change during its walk. */
    for (pos = vpmm_hmap_next(&s->cache, 0, &key, &val); pos < s->cache.cap;
         pos = vpmm_hmap_next(&s->cache, pos + 1, &key, &val)) {
        vpmm_region_t *tail = val;
        if (tail == NULL)
            continue;
        while (tail->qnext)
            tail = tail->qnext;
        tail->qnext = chain;
        chain = val;
    }
    vpmm_hmap_clear(&s->cache);
    while (chain) {
        vpmm_region_t *r = chain;
        chain = r->qnext;
        uncache(p, s, r);
        /* Back to the ordinary free states: ready if its marker already completed. */
        if (vpmm_i_stream_done(s, r->seq)) {
            r->ready = 1;
            r->stream = NULL;
            r->seq = 0;
        }
        vpmm_i_index_add(p, r);
        vpmm_i_region_coalesce(p, r);
    }
}

void vpmm_i_cache_flush_all(vpmm_pool_t *p)
{
    for (vpmm_stream_rec_t *s = p->streams; s; s = s->next)
        if (s->cache.count != 0)
            vpmm_i_cache_flush(p, s);
}

void vpmm_i_cache_missed(vpmm_pool_t *p, vpmm_stream_rec_t *s)
{
    if (s->cached_bytes != 0 && s->cached_bytes >= p->cache_stale)
        vpmm_i_cache_flush(p, s);
}

void vpmm_i_cache_limit_update(vpmm_pool_t *p)
{
    size_t m = p->c.mapped_bytes, pct = p->opt.cache_percent;
    p->cache_limit = m / 100 * pct + m % 100 * pct / 100; /* exact, and no overflow */
    p->cache_stale = m / 100;
}
