/*
 * report.c — the out-of-memory report and the pool-wide figures behind it: the largest free
 * span, what defragmentation could gather, utilization and fragmentation.
 *
 * When a malloc fails for lack of memory, vpmm_i_oom_report writes one paragraph into the pool
 * (vpmm_pool_oom_report copies it out; VPMM_VERBOSE=1 also prints it on stderr, the pool's first
 * VPMM_VERBOSE_OOM_REPORTS in full, then only counts them: a program that goes on after thousands
 * of failures, a replay under a cap, must not bury its own output; the count is printed when the
 * pool is destroyed) with the figures
 * a person needs to decide what to change: what was asked; whether the device or the pool's cap
 * (VPMM_MAX_BYTES) said no; what the pool maps, how much is live, free, in its largest free span,
 * in whole free pages (what defragmentation can gather without new memory) and still pending on
 * busy streams; zombies and holes; what each graph pool holds; what the device had free.
 * vpmm_last_error() gets its first sentence.
 *
 * Definitions (docs/OBSERVABILITY.md): utilization = live bytes / mapped bytes; fragmentation =
 * 1 - largest free span / free bytes. Called under the pool lock; the walks are O(regions) and run
 * only on the OOM path and in vpmm_get_stats' largest-span search (O(trees + cached sizes)).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "entry.h"
#include "pages.h"
#include "pool.h"
#include "region.h"
#include "report.h"
#include "stream.h"

/* The largest region of a tree: the last of each size class (I13: the small keys come last). */
static size_t tree_max(const vpmm_rbtree_t *t)
{
    const vpmm_rb_node_t *last = vpmm_rb_last(t), *n;
    size_t best = last ? VPMM_CONTAINER_OF(last, vpmm_region_t, node)->size : 0;
    if (last != NULL && (last->k1 & VPMM_KEY_SMALL)) {
        n = vpmm_rb_lower_bound(t, VPMM_KEY_SMALL, 0);
        n = n ? vpmm_rb_prev(n) : NULL;
        if (n != NULL)
            best = VPMM_MAX(best, VPMM_CONTAINER_OF(n, vpmm_region_t, node)->size);
    }
    return best;
}

/* The largest cached region of s: the largest size key with a non-empty list. */
static size_t cache_max(const vpmm_stream_rec_t *s)
{
    size_t best = 0, pos;
    uint64_t key;
    void *val;
    if (s->cached_bytes == 0)
        return 0;
    for (pos = vpmm_hmap_next(&s->cache, 0, &key, &val); pos < s->cache.cap;
         pos = vpmm_hmap_next(&s->cache, pos + 1, &key, &val))
        if (val != NULL && key > best)
            best = key;
    return best;
}

size_t vpmm_i_largest_free(const vpmm_pool_t *p, const vpmm_arena_t *only)
{
    const vpmm_stream_rec_t *lists[2] = { p->streams, p->retired };
    size_t best = 0;
    if (only == NULL || only == &p->shared) {
        best = tree_max(&p->shared.ready);
        for (int l = 0; l < 2; l++)
            for (const vpmm_stream_rec_t *s = lists[l]; s; s = s->next)
                best = VPMM_MAX(best, VPMM_MAX(tree_max(&s->free_tree), cache_max(s)));
    }
    for (const vpmm_arena_t *a = p->privates; a; a = a->next) {
        if (only != NULL && only != a)
            continue;
        best = VPMM_MAX(best, tree_max(&a->ready));
        for (size_t i = 0; i < a->nside; i++)
            best = VPMM_MAX(best, tree_max(&a->side[i].tree));
    }
    return best;
}

/*
 * Of the shared arena's free memory: the bytes defragmentation can gather without new memory —
 * whole handles (a handle partly in use stays) in ready memory, or pending on a stream whose
 * marker can be recorded now (not one being captured) —, the bytes of whole free pages in those
 * same regions that it cannot gather because their handle holds memory in use too (`trapped`:
 * the near-full rule's open part, docs/ALGORITHM.md), and the bytes still pending.
 */
static void free_pages_of(vpmm_pool_t *p, size_t *movable, size_t *trapped, size_t *pending)
{
    const size_t pg = p->page_size;
    for (const vpmm_chunk_t *c = p->chunks; c; c = c->next) {
        if (c->arena != &p->shared)
            continue;
        for (const vpmm_region_t *r = c->first; r; r = r->next) {
            if (r->state != VPMM_REGION_FREE)
                continue;
            if (!r->ready)
                *pending += r->size;
            if (r->uses != NULL)
                continue; /* deferred: another stream may still use it */
            if (r->ready || r->cached || r->stream->retired || r->stream->dirty_regions == 0 ||
                vpmm_i_stream_markable(p, r->stream)) {
                const uintptr_t lo = vpmm_align_up(r->addr, pg);
                const uintptr_t hi = vpmm_align_down(r->addr + r->size, pg);
                const size_t whole = vpmm_i_whole_handle_bytes(p, r->addr, r->size);
                *movable += whole;
                *trapped += hi > lo ? (size_t)(hi - lo) - whole : 0;
            }
        }
    }
}

/* Appends to a fixed buffer, truncating. */
typedef struct text {
    char *buf;
    size_t len, used;
} text_t;

__attribute__((format(printf, 2, 3))) static void put(text_t *t, const char *fmt, ...)
{
    va_list ap;
    int n;
    if (t->used + 1 >= t->len)
        return;
    va_start(ap, fmt);
    n = vsnprintf(t->buf + t->used, t->len - t->used, fmt, ap);
    va_end(ap);
    if (n > 0)
        t->used = VPMM_MIN(t->len - 1, t->used + (size_t)n);
}

/* Byte counts formatted into rotating buffers: a call is a sequence point, so several may
 * appear in one argument list (12 at most). */
typedef struct sizes {
    char buf[12][32];
    unsigned next;
} sizes_t;

static const char *fmt_bytes(sizes_t *z, size_t bytes)
{
    char *b = z->buf[z->next++ % 12];
    return vpmm_i_format_bytes(bytes, b, sizeof z->buf[0]);
}

#define B(x) fmt_bytes(&z, (x))

void vpmm_i_oom_report(vpmm_pool_t *p, size_t size, vpmm_stream_t stream)
{
    sizes_t z = { .next = 0 };
    text_t t = { p->oom_report, sizeof p->oom_report, 0 };
    size_t dfree = 0, dtotal = 0, whole = 0, trapped = 0, pending = 0, first_end;
    int have_dev = p->drv->mem_get_info(p->drv, &dfree, &dtotal) == VPMM_DRV_OK;

    free_pages_of(p, &whole, &trapped, &pending);
    if (vpmm_i_stream_is_legacy(stream))
        put(&t, "vpmm_malloc(%s) on the legacy stream: out of memory: ", B(size));
    else if (stream == VPMM_STREAM_PER_THREAD)
        put(&t, "vpmm_malloc(%s) on the per-thread stream: out of memory: ", B(size));
    else
        put(&t, "vpmm_malloc(%s) on stream %p: out of memory: ", B(size), (void *)stream);
    if (p->oom_cause == VPMM_OOM_CAP)
        put(&t, "the pool's cap (VPMM_MAX_BYTES = %s) leaves room for %s more.",
            B(p->opt.max_bytes),
            B(p->opt.max_bytes - VPMM_MIN(p->opt.max_bytes, p->c.mapped_bytes)));
    else if (p->oom_cause == VPMM_OOM_VA)
        put(&t,
            "no virtual address space is left for another VA chunk (the pool reserves %s in %u "
            "chunks%s%s).",
            B(p->c.reserved_va_bytes), p->chunk_count, have_dev ? "; the device has " : "",
            have_dev ? B(dfree) : "");
    else if (have_dev)
        /* What the device holds besides this pool: other processes (another job on the GPU),
         * other pools and allocators of this process, and the driver's own. */
        put(&t,
            "the device has %s free of %s; %s of it is held outside this pool (other "
            "processes, other allocators and pools, the driver).",
            B(dfree), B(dtotal),
            B(dtotal - VPMM_MIN(dtotal, dfree + VPMM_MIN(dtotal, p->c.mapped_bytes))));
    else
        put(&t, "the device refused more memory.");
    first_end = t.used;
    put(&t,
        " The pool maps %s: %s live in %llu allocations (%s requested) and %s free, whose largest "
        "span is %s; %s of the shared pool's free memory is in whole pages that defragmentation "
        "gathers without new memory, %s is still pending on streams whose work is not done.",
        B(p->c.mapped_bytes), B(p->c.allocated_bytes), (unsigned long long)p->c.live_allocs,
        B(p->c.live_bytes), B(p->c.free_bytes), B(vpmm_i_largest_free(p, NULL)), B(whole),
        B(pending));
    if (trapped != 0)
        put(&t,
            " %s more is in free whole pages of handles that also hold memory in use or pending "
            "elsewhere: a handle moves only whole.",
            B(trapped));
    put(&t,
        " Zombies (old addresses of remapped pages, until the GPU is done): %s; reserved VA "
        "in holes: %s.",
        B(p->c.zombie_bytes), B(p->c.hole_bytes));
    if (p->privates != NULL) {
        put(&t, " Graph pools:");
        for (const vpmm_arena_t *a = p->privates; a; a = a->next)
            put(&t, " g%u maps %s (%s live, %s free, %s)%s", a->id,
                B(a->c.allocated_bytes + a->c.free_bytes), B(a->c.live_bytes), B(a->c.free_bytes),
                a->pinned || a->captures ? "pinned by its graphs" : "idle: its free pages can go",
                a->next ? ";" : ".");
    }
    if (p->oom_cause == VPMM_OOM_CAP)
        put(&t, " To make room: free what is no longer needed, or raise VPMM_MAX_BYTES.");
    else if (p->oom_cause == VPMM_OOM_VA)
        put(&t, " To make room: destroy graphs and graph pools no longer used, vpmm_trim, or "
                "lower VPMM_VA_SIZE.");
    else
        put(&t, " To make room: free what is no longer needed, synchronise streams with pending "
                "frees, destroy graphs no longer replayed, or vpmm_trim other pools on this "
                "device.");
    vpmm_i_set_error("%.*s", (int)VPMM_MIN(first_end, 255), p->oom_report);
    if (p->opt.verbose && p->oom_printed < VPMM_VERBOSE_OOM_REPORTS) {
        fprintf(stderr, "vpmm: %s\n", p->oom_report);
        if (++p->oom_printed == VPMM_VERBOSE_OOM_REPORTS)
            fprintf(stderr,
                    "vpmm: %d out-of-memory reports printed; VPMM_VERBOSE prints no more of this "
                    "pool's (vpmm_pool_oom_report has the latest), only how many there were "
                    "when it is destroyed\n",
                    VPMM_VERBOSE_OOM_REPORTS);
    } else if (p->opt.verbose) {
        p->oom_unprinted++;
    }
    p->oom_cause = VPMM_OOM_DEVICE;
}

void vpmm_i_oom_summary(const vpmm_pool_t *p)
{
    if (p->opt.verbose && p->oom_unprinted > 0)
        fprintf(stderr,
                "vpmm: pool destroyed after %llu out-of-memory reports; the last %llu were not "
                "printed (VPMM_VERBOSE prints a pool's first %d)\n",
                (unsigned long long)(p->oom_printed + p->oom_unprinted),
                (unsigned long long)p->oom_unprinted, VPMM_VERBOSE_OOM_REPORTS);
}

void vpmm_i_oom_report_copy(const vpmm_pool_t *pool, char *buf, size_t len)
{
    vpmm_i_lock(pool);
    snprintf(buf, len, "%s", pool->oom_report);
    vpmm_i_unlock(pool);
}
