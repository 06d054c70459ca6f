/*
 * torch_adapter_segments.c — the segments of vpmm's PyTorch CUDAAllocator (contracts in
 * torch_adapter.h): the events PyTorch's allocator trace trackers hear (SEGMENT_ALLOC /
 * SEGMENT_FREE: ProcessGroupNCCL registers each segment with NCCL and deregisters it by address),
 * and snapshot()'s segments, of two kinds (INTERFACE.md §3.2 and §10):
 *
 *   runs     runs of mapped regions of one VA chunk, one pool and one stream, cut by holes and
 *            zombies; the blocks are the regions, so each allocation is one block (what
 *            PyTorch's memory tools and tests expect of a snapshot); each run marked expandable,
 *            as PyTorch's own VMM segments are (vta_segment_t.expandable: the statistics'
 *            segments are handles, so a run is not one of them)
 *   handles  vpmm's segments (vpmm_pool_walk_segments): each physical handle at its live address,
 *            exactly what the events have reported, so that a communicator created now registers
 *            what later events deregister; the blocks are the regions clipped to the handle
 *
 * An allocation that spans several handles shows, in handle mode, as one block per handle it
 * touches: the first (the one holding its start) is the allocation ("active_allocated", its
 * address the tensor's data_ptr), the others are its continuation (vta_block_t.continued:
 * "active_pending_free" for PyTorch: in use, not an allocation of its own), so that counting
 * "active_allocated" blocks still counts allocations; each part's requested size is the part of
 * the request that lies in it, so a segment's requested size is the sum of its blocks'.
 *
 *     handle 1             handle 2             handle 3
 *   |--------------------|--------------------|--------------------|
 *   [ a ][ free ][ b .......................................][ free ]
 *   [a  ][inact.][b: allocated][b: continued][b: continued ][inact.]
 *
 * Graph pool names. vpmm names a segment's owner by its graph pool id, PyTorch by a mempool id:
 * d->names maps one to the other from the graph pool's creation (vta_pool_incref) until its last
 * segment is gone, which may come after the id's last reference (vpmm hands a released graph
 * pool's pages to the shared pool once its graphs are gone, reporting them gone from the graph
 * pool then: that event must name the mempool id the segment came with, or a registration kept
 * per mempool id would never end). A name released and left without segments is dropped at the
 * next graph pool creation (vta_i_names_prune).
 *
 * Locks. vpmm calls the segment hook under the pool's lock. The hook takes d->seg_lock (names,
 * sink): a leaf — no thread holding it calls vpmm or takes another lock — and calls the sink with
 * no adapter lock held. It never takes d->lock, which threads hold across vpmm calls (the runs
 * snapshot's walk, graph pool creation, checkpoints). Order: d->lock, the pool's lock,
 * d->seg_lock. Tests: test_torch_adapter_segments.c (the events' mirror equals the handle-mode
 * snapshot after every step).
 */
#include <stdlib.h>
#include <string.h>

#include "torch_adapter.h"

static int id_eq(vta_pool_id_t a, vta_pool_id_t b)
{
    return a.first == b.first && a.second == b.second;
}

static unsigned gp_id(const vpmm_graph_pool_t *gp)
{
    vpmm_graph_pool_stats_t s;
    return gp != NULL && vpmm_graph_pool_stats(gp, &s) == VPMM_SUCCESS ? s.id : 0;
}

/* ---- graph pool names ------------------------------------------------------------------------ */

/* The name of graph pool gp in names[0..n), or NULL. */
static vta_gp_name_t *name_in(vta_gp_name_t *names, size_t n, unsigned gp)
{
    for (size_t i = 0; i < n; i++)
        if (names[i].gp == gp)
            return &names[i];
    return NULL;
}

vpmm_status_t vta_i_names_reserve(vta_device_t *d)
{
    vpmm_status_t st = VPMM_SUCCESS;
    pthread_mutex_lock(&d->seg_lock);
    if (VTA_GROW(d->names, d->names_cap, d->nnames + 1, 8) != 0)
        st = VPMM_ERROR_HOST_OUT_OF_MEMORY;
    pthread_mutex_unlock(&d->seg_lock);
    return st;
}

void vta_i_names_add(vta_device_t *d, const vpmm_graph_pool_t *gp, vta_pool_id_t id)
{
    const unsigned g = gp_id(gp);
    pthread_mutex_lock(&d->seg_lock);
    if (g != 0 && name_in(d->names, d->nnames, g) == NULL && d->nnames < d->names_cap)
        d->names[d->nnames++] = (vta_gp_name_t){ g, id, 0, 0 };
    pthread_mutex_unlock(&d->seg_lock);
}

void vta_i_names_release(vta_device_t *d, unsigned gp)
{
    vta_gp_name_t *e;
    pthread_mutex_lock(&d->seg_lock);
    e = name_in(d->names, d->nnames, gp);
    if (e != NULL) {
        e->released = 1;
        d->nreleased++;
    }
    pthread_mutex_unlock(&d->seg_lock);
}

static int mark_seen(const vpmm_segment_info_t *s, void *user)
{
    vta_device_t *d = user;
    vta_gp_name_t *e;
    if (s->pool == 0)
        return 0;
    pthread_mutex_lock(&d->seg_lock); /* under the pool's lock: the documented order */
    e = name_in(d->names, d->nnames, s->pool);
    if (e != NULL)
        e->seen = 1;
    pthread_mutex_unlock(&d->seg_lock);
    return 0;
}

void vta_i_names_prune(vta_device_t *d)
{
    size_t kept = 0;
    pthread_mutex_lock(&d->seg_lock);
    for (size_t i = 0; i < d->nnames; i++)
        d->names[i].seen = 0;
    if (d->nreleased == 0) {
        pthread_mutex_unlock(&d->seg_lock);
        return;
    }
    pthread_mutex_unlock(&d->seg_lock);
    /* A released graph pool gets no segment again (nothing allocates in it, no checkpoint is
     * applied to it): one not seen in this walk has reported its last one. */
    if (vpmm_pool_walk_segments(d->pool, mark_seen, d) != VPMM_SUCCESS)
        return;
    pthread_mutex_lock(&d->seg_lock);
    for (size_t i = 0; i < d->nnames; i++) {
        if (d->names[i].released && !d->names[i].seen)
            d->nreleased--;
        else
            d->names[kept++] = d->names[i];
    }
    d->nnames = kept;
    pthread_mutex_unlock(&d->seg_lock);
}

/* ---- segment events ------------------------------------------------------------------------- */

/* vpmm's segment hook: the event, with the mempool id that owns the segment, to the sink. Under
 * the pool's lock. */
static void on_segment(void *user, vpmm_segment_event_t ev, const vpmm_segment_info_t *s)
{
    vta_device_t *d = user;
    vta_pool_id_t id = { 0, 0 };
    vta_segment_sink_t sink;
    void *sink_user;
    pthread_mutex_lock(&d->seg_lock);
    sink = d->sink;
    sink_user = d->sink_user;
    if (s->pool != 0) {
        const vta_gp_name_t *e = name_in(d->names, d->nnames, s->pool);
        if (e != NULL)
            id = e->id;
    }
    pthread_mutex_unlock(&d->seg_lock);
    if (sink != NULL)
        sink(sink_user, d->device, ev, s->addr, s->size, id);
}

vpmm_status_t vta_segments_attach(vta_device_t *d, vta_segment_sink_t sink, void *user)
{
    pthread_mutex_lock(&d->seg_lock);
    d->sink = sink;
    d->sink_user = user;
    pthread_mutex_unlock(&d->seg_lock);
    /* Not under seg_lock: vpmm takes the pool's lock, which comes first. */
    return vpmm_pool_set_segment_hook(d->pool, sink != NULL ? on_segment : NULL, d);
}

int vta_segments_mode_parse(const char *text, vta_segments_mode_t *out)
{
    if (text == NULL || text[0] == '\0' || strcmp(text, "auto") == 0) {
        *out = VTA_SEGMENTS_AUTO;
        return 0;
    }
    if (strcmp(text, "handles") == 0) {
        *out = VTA_SEGMENTS_HANDLES;
        return 0;
    }
    return -1;
}

/* ---- snapshots: common parts ---------------------------------------------------------------- */

typedef struct seg_out {
    vta_segment_t *segs;
    size_t n, cap;
    int oom;
} seg_out_t;

/* A new, zeroed segment at the end of o (NULL: no host memory, o->oom set). */
static vta_segment_t *seg_new(seg_out_t *o)
{
    if (VTA_GROW(o->segs, o->cap, o->n + 1, 16) != 0) {
        o->oom = 1;
        return NULL;
    }
    memset(&o->segs[o->n], 0, sizeof o->segs[o->n]);
    return &o->segs[o->n++];
}

/* Appends a block to g (0, or -1: no host memory). */
static int block_add(vta_segment_t *g, vta_block_t b)
{
    vta_block_t *t = realloc(g->blocks, (g->nblocks + 1) * sizeof *t);
    if (t == NULL)
        return -1;
    g->blocks = t;
    g->blocks[g->nblocks++] = b;
    return 0;
}

/* The allocations of pools with their own allocator, one segment of one block each (all, or
 * id's). Under d->lock. */
static void add_external_segments(vta_device_t *d, vta_pool_id_t id, int all, seg_out_t *o)
{
    for (size_t i = 0; i < d->next && !o->oom; i++) {
        const vta_external_t *x = &d->ext[i];
        vta_segment_t *g;
        if (!all && !id_eq(x->pool, id))
            continue;
        g = seg_new(o);
        if (g == NULL)
            return;
        g->address = (uintptr_t)x->ptr;
        g->total_size = g->allocated_size = g->requested_size = x->size;
        g->stream = x->stream;
        g->pool = x->pool;
        g->type = VTA_EXTERNAL_TYPE(x->size);
        if (block_add(g, (vta_block_t){ (uintptr_t)x->ptr, x->size, x->size, 1, 0 }) != 0)
            o->oom = 1;
    }
}

static vpmm_status_t finish(seg_out_t *o, vpmm_status_t st, vta_segment_t **out, size_t *n)
{
    if (st == VPMM_SUCCESS && o->oom)
        st = VPMM_ERROR_HOST_OUT_OF_MEMORY;
    if (st != VPMM_SUCCESS) {
        vta_snapshot_free(o->segs, o->n);
        return st;
    }
    *out = o->segs;
    *n = o->n;
    return VPMM_SUCCESS;
}

void vta_snapshot_free(vta_segment_t *segs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(segs[i].blocks);
    free(segs);
}

/* ---- snapshot: runs of regions --------------------------------------------------------------- */

/* vpmm graph pool id -> mempool id, made before a walk (whose visitor runs under the pool's
 * lock and must not call vpmm). */
typedef struct id_map {
    unsigned gp;
    vta_pool_id_t id;
} id_map_t;

typedef struct run_walk {
    id_map_t *map;
    size_t nmap;
    unsigned only; /* a graph pool id, or 0 */
    int all;       /* every segment */
    seg_out_t out;
    unsigned last_chunk, last_pool;
    uintptr_t last_end; /* where the open segment ends; 0: none open */
} run_walk_t;

static int run_visit(const vpmm_region_info_t *r, void *user)
{
    run_walk_t *w = user;
    vta_segment_t *g;
    int mapped = r->state == VPMM_REGION_ALLOCATED || r->state == VPMM_REGION_FREE;
    if (!mapped || (!w->all && r->pool != w->only)) {
        w->last_end = 0;
        return 0;
    }
    g = w->out.n > 0 ? &w->out.segs[w->out.n - 1] : NULL;
    if (w->last_end != r->addr || w->last_chunk != r->chunk || w->last_pool != r->pool ||
        (r->state == VPMM_REGION_ALLOCATED && g->stream != NULL && g->stream != r->stream)) {
        g = seg_new(&w->out); /* a new segment */
        if (g == NULL)
            return 1;
        g->address = r->addr;
        g->type = VTA_LARGE;
        g->expandable = 1;
        for (size_t i = 0; i < w->nmap; i++)
            if (w->map[i].gp == r->pool)
                g->pool = w->map[i].id;
    }
    if (block_add(g, (vta_block_t){ r->addr, r->size, r->requested,
                                    r->state == VPMM_REGION_ALLOCATED, 0 }) != 0) {
        w->out.oom = 1;
        return 1;
    }
    g->total_size += r->size;
    if (r->state == VPMM_REGION_ALLOCATED) {
        g->allocated_size += r->size;
        g->requested_size += r->requested;
        if (g->stream == NULL)
            g->stream = r->stream;
    }
    w->last_end = r->addr + r->size;
    w->last_chunk = r->chunk;
    w->last_pool = r->pool;
    return 0;
}

vpmm_status_t vta_snapshot(vta_device_t *d, vta_pool_id_t id, int all, vta_segment_t **out,
                           size_t *n)
{
    const vta_pool_id_t shared = { 0, 0 };
    run_walk_t w;
    vpmm_status_t st = VPMM_SUCCESS;
    memset(&w, 0, sizeof w);
    *out = NULL;
    *n = 0;
    w.all = all;
    pthread_mutex_lock(&d->lock);
    w.map = malloc((d->npools ? d->npools : 1) * sizeof *w.map);
    if (w.map == NULL) {
        pthread_mutex_unlock(&d->lock);
        return VPMM_ERROR_HOST_OUT_OF_MEMORY;
    }
    for (size_t i = 0; i < d->npools; i++)
        if (d->pools[i].gp != NULL)
            w.map[w.nmap++] = (id_map_t){ gp_id(d->pools[i].gp), d->pools[i].id };
    if (!all && !id_eq(id, shared)) {
        vpmm_graph_pool_t *gp = NULL;
        int known = 0;
        for (size_t i = 0; i < d->npools && !known; i++)
            if (id_eq(d->pools[i].id, id)) {
                known = 1;
                gp = d->pools[i].gp;
            }
        if (!known) {
            pthread_mutex_unlock(&d->lock);
            free(w.map);
            return VPMM_SUCCESS; /* no such pool: no segment */
        }
        w.only = gp_id(gp);
    }
    if (all || id_eq(id, shared) || w.only != 0) /* vpmm's regions (none: a pool of its own) */
        st = vpmm_pool_walk(d->pool, run_visit, &w);
    if (st == VPMM_SUCCESS && !w.out.oom)
        add_external_segments(d, id, all, &w.out);
    pthread_mutex_unlock(&d->lock);
    free(w.map);
    return finish(&w.out, st, out, n);
}

/* ---- snapshot: the physical handles -----------------------------------------------------------
 */

typedef struct seg_list {
    vpmm_segment_info_t *s;
    size_t n, cap;
    int oom;
} seg_list_t;

static int seg_visit(const vpmm_segment_info_t *s, void *user)
{
    seg_list_t *l = user;
    if (VTA_GROW(l->s, l->cap, l->n + 1, 64) != 0) {
        l->oom = 1;
        return 1;
    }
    l->s[l->n++] = *s;
    return 0;
}

typedef struct region_list {
    vpmm_region_info_t *r;
    size_t n, cap;
    int oom;
} region_list_t;

static int region_visit(const vpmm_region_info_t *r, void *user)
{
    region_list_t *l = user;
    if (r->state != VPMM_REGION_ALLOCATED && r->state != VPMM_REGION_FREE)
        return 0; /* a live handle holds only allocations and free memory */
    if (VTA_GROW(l->r, l->cap, l->n + 1, 256) != 0) {
        l->oom = 1;
        return 1;
    }
    l->r[l->n++] = *r;
    return 0;
}

static int cmp_segment(const void *a, const void *b)
{
    uintptr_t x = ((const vpmm_segment_info_t *)a)->addr,
              y = ((const vpmm_segment_info_t *)b)->addr;
    return (x > y) - (x < y);
}

static int cmp_region(const void *a, const void *b)
{
    uintptr_t x = ((const vpmm_region_info_t *)a)->addr, y = ((const vpmm_region_info_t *)b)->addr;
    return (x > y) - (x < y);
}

/* The segment of handle s, its blocks the regions r[*j..] clipped to it (gaps, which a live
 * handle never has, as free memory: the blocks tile the segment whatever a concurrent call did
 * between the two walks). *j moves past the regions that end before s. */
static int handle_segment(seg_out_t *o, const vpmm_segment_info_t *s, const region_list_t *rl,
                          size_t *j, vta_pool_id_t pool)
{
    const uintptr_t end = s->addr + s->size;
    uintptr_t at = s->addr;
    vta_segment_t *g = seg_new(o);
    if (g == NULL)
        return -1;
    g->address = s->addr;
    g->total_size = s->size;
    g->pool = pool;
    g->type = VTA_LARGE;
    while (*j < rl->n && rl->r[*j].addr + rl->r[*j].size <= s->addr)
        (*j)++;
    for (size_t k = *j; k < rl->n && rl->r[k].addr < end; k++) {
        const vpmm_region_info_t *r = &rl->r[k];
        const uintptr_t lo = r->addr > s->addr ? r->addr : s->addr;
        const uintptr_t hi = r->addr + r->size < end ? r->addr + r->size : end;
        if (hi <= at)
            continue;
        if (lo > at && block_add(g, (vta_block_t){ at, lo - at, 0, 0, 0 }) != 0)
            return -1;
        if (r->state == VPMM_REGION_ALLOCATED) {
            /* The request's bytes [r->addr, r->addr + requested) that lie in this part. */
            const uintptr_t want = r->addr + r->requested;
            const size_t req = want > lo ? (size_t)((want < hi ? want : hi) - lo) : 0;
            if (block_add(g, (vta_block_t){ lo, hi - lo, req, 1, lo != r->addr }) != 0)
                return -1;
            g->allocated_size += hi - lo;
            g->requested_size += req;
            if (g->stream == NULL)
                g->stream = r->stream;
        } else if (block_add(g, (vta_block_t){ lo, hi - lo, 0, 0, 0 }) != 0) {
            return -1;
        }
        at = hi;
    }
    if (at < end && block_add(g, (vta_block_t){ at, end - at, 0, 0, 0 }) != 0)
        return -1;
    return 0;
}

vpmm_status_t vta_snapshot_handles(vta_device_t *d, vta_pool_id_t id, int all, vta_segment_t **out,
                                   size_t *n)
{
    const vta_pool_id_t shared = { 0, 0 };
    seg_out_t o = { 0 };
    seg_list_t sl = { 0 };
    region_list_t rl = { 0 };
    vta_gp_name_t *names;
    size_t nnames = 0, j = 0;
    unsigned only = 0;
    int want = 1; /* vpmm's segments wanted (not for a pool of its own allocator) */
    vpmm_status_t st = VPMM_SUCCESS;

    *out = NULL;
    *n = 0;
    pthread_mutex_lock(&d->seg_lock);
    names = malloc((d->nnames ? d->nnames : 1) * sizeof *names);
    if (names != NULL && d->nnames > 0) {
        nnames = d->nnames;
        memcpy(names, d->names, nnames * sizeof *names);
    }
    pthread_mutex_unlock(&d->seg_lock);
    if (names == NULL)
        return VPMM_ERROR_HOST_OUT_OF_MEMORY;
    if (!all && !id_eq(id, shared)) { /* the id's graph pool, named as the events named it */
        want = 0;
        for (size_t i = 0; i < nnames && !want; i++)
            if (id_eq(names[i].id, id)) {
                want = 1;
                only = names[i].gp;
            }
    }
    if (want) {
        st = vpmm_pool_walk_segments(d->pool, seg_visit, &sl);
        if (st == VPMM_SUCCESS && !sl.oom)
            st = vpmm_pool_walk(d->pool, region_visit, &rl);
        if (st == VPMM_SUCCESS && (sl.oom || rl.oom))
            st = VPMM_ERROR_HOST_OUT_OF_MEMORY;
    }
    if (st == VPMM_SUCCESS) {
        if (sl.n > 1)
            qsort(sl.s, sl.n, sizeof *sl.s, cmp_segment);
        if (rl.n > 1)
            qsort(rl.r, rl.n, sizeof *rl.r, cmp_region);
        for (size_t i = 0; i < sl.n && !o.oom; i++) {
            vta_pool_id_t pool = { 0, 0 };
            const vta_gp_name_t *e;
            if (!all && !id_eq(id, shared) && sl.s[i].pool != only)
                continue;
            e = sl.s[i].pool != 0 ? name_in(names, nnames, sl.s[i].pool) : NULL;
            if (e != NULL)
                pool = e->id;
            if (handle_segment(&o, &sl.s[i], &rl, &j, pool) != 0)
                o.oom = 1;
        }
        pthread_mutex_lock(&d->lock);
        add_external_segments(d, id, all, &o);
        pthread_mutex_unlock(&d->lock);
    }
    free(names);
    free(sl.s);
    free(rl.r);
    return finish(&o, st, out, n);
}
