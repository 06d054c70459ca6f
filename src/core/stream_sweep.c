/*
 * stream_sweep.c — the sweep of every stream record (vpmm_i_stream_poll_all): the caches
 * flushed, deferred frees released (uses.c), unmarked frees marked, markers polled, and records
 * that hold nothing freed. It sits above stream.c, cache.c and uses.c, which it drives; stream.c
 * itself (keys, markers, one stream's poll) stays below uses.c, which calls it
 * (docs/ARCHITECTURE.md, "The core's sub-layers").
 *
 * Called under the pool lock. Invariant I8 (pool.h) is checked in check.c.
 */
#include "cache.h"
#include "pool.h"
#include "stream.h"

/* Another thread's per-thread stream record that holds nothing: no region names it, no marker
 * is in flight, no call holds it across an unlock. Freed, it costs nothing: its thread gets a
 * new one on its next call (threads come and go; their records must not pile up). */
static int stream_idle_foreign(const vpmm_stream_rec_t *s)
{
    return s->owner != 0 && !vpmm_i_stream_here(s) && s->refs == 0 && s->held == 0 &&
           s->completed == s->recorded && s->cache.count == 0;
}

void vpmm_i_stream_poll_all(vpmm_pool_t *p, vpmm_stream_rec_t *except)
{
    vpmm_stream_rec_t **link;
    /* Cached regions are on no pending list: back to the ordinary states first, or polling
     * would never make them ready for other streams. */
    vpmm_i_cache_flush_all(p);
    /* Deferred frees whose other streams are done become ordinary free memory (uses.c), pending
     * on their own stream: marked and polled below with the rest. */
    if (p->deferred_head != NULL)
        vpmm_i_uses_release(p);
    for (vpmm_stream_rec_t *s = p->streams; s; s = s->next) {
        if (s == except)
            continue;
        /* Unmarked frees get their marker; not another thread's per-thread stream's, whose
         * substitute would make every blocking stream wait (stream.c, "Identity"). */
        if (s->dirty_regions > 0 && vpmm_i_stream_here(s))
            (void)vpmm_i_stream_mark(p, s, s->recorded); /* capturing: stays unmarked */
        vpmm_i_stream_poll(p, s);
    }
    /* Retired streams: poll, and forget those nothing refers to once their markers are done. */
    link = &p->retired;
    while (*link) {
        vpmm_stream_rec_t *s = *link;
        vpmm_i_stream_poll(p, s);
        if (s->refs == 0 && s->completed == s->recorded) {
            *link = s->next;
            vpmm_i_stream_free(p, s); /* no marker in flight: nothing to destroy, cannot fail */
            continue;
        }
        link = &s->next;
    }
    /* Last, once their memory could become ready: records of other threads that hold nothing. */
    link = &p->streams;
    while (*link) {
        vpmm_stream_rec_t *s = *link;
        if (s != except && stream_idle_foreign(s)) {
            *link = s->next;
            p->stream_count--;
            if (p->last_stream == s)
                p->last_stream = NULL;
            vpmm_i_stream_free(p, s); /* nothing in flight: cannot fail */
            continue;
        }
        link = &s->next;
    }
}
