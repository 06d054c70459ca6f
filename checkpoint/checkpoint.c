/*
 * checkpoint.c — checkpoints of a graph pool's region state, and reapplying them (docs/GRAPHS.md).
 *
 * A checkpoint is a sorted copy of the graph pool's mapped regions: each allocation (address,
 * size, requested size, stream) and each free region (address, size; adjacent free regions
 * merged). Holes and zombies are not recorded: unmapped memory is never part of a checkpoint.
 *
 * Reapply makes every currently mapped byte of the graph pool what the checkpoint says: inside a
 * checkpointed allocation that is still wanted (not listed as dead) it is that allocation again;
 * anywhere else it is ready free memory — including pages mapped after the checkpoint was taken
 * (the pool grew in a later branch; PyTorch's allocator asserts here). It runs in two passes:
 *
 *  1. validate, changing nothing: the checkpoint is of this graph pool, no capture into it is in
 *     progress, every dead pointer is one of its allocations, and every wanted allocation still
 *     lies in mapped memory (else VPMM_ERROR_CHECKPOINT_CONFLICT); then reserve every node and
 *     table slot the rewrite may need.
 *  2. a merge walk of the current regions against the expected ones. Where they agree (the common
 *     case: branches share their parent's allocations) nothing is touched; where they differ, the
 *     smallest span at whose two ends both agree on a boundary is rewritten in one go
 *     (vpmm_i_rewrite). Cost: O(regions + allocations), plus O(changed) index updates.
 *
 *     current:  [A][ free ][B1][B2][  free  ][C]        (B1, B2 allocated after the checkpoint)
 *     expected: [A][ free ][ D ][     free   ][C]
 *                          ^--- rewritten ---^
 */
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "graph.h"

typedef struct ck_alloc {
    uintptr_t addr;
    size_t size;              /* rounded, as the region */
    size_t requested;         /* the caller's size */
    vpmm_stream_key_t stream; /* a per-thread stream's owner included (internal.h) */
} ck_alloc_t;

typedef struct ck_free {
    uintptr_t addr;
    size_t size;
} ck_free_t;

struct vpmm_checkpoint {
    unsigned graph_pool;
    ck_alloc_t *allocs; /* address order */
    size_t nallocs, live_bytes;
    ck_free_t *frees; /* address order */
    size_t nfrees, free_bytes, alloc_bytes;
};

/* ---- take ---------------------------------------------------------------------------------- */

/* The arena's regions as views, in one pass (one retry if it has grown past the guess). */
static vpmm_status_t views_of(vpmm_pool_t *p, vpmm_arena_t *a, size_t guess, vpmm_view_t **out,
                              size_t *n)
{
    size_t cap = guess ? guess : 64;
    for (;;) {
        vpmm_view_t *v = malloc(cap * sizeof *v);
        if (v == NULL) {
            vpmm_i_set_error("out of host memory for a checkpoint");
            return VPMM_ERROR_HOST_OUT_OF_MEMORY;
        }
        *n = vpmm_i_arena_views(p, a, v, cap);
        if (*n <= cap) {
            *out = v;
            return VPMM_SUCCESS;
        }
        free(v);
        cap = *n;
    }
}

/* One walk over the arena's regions, straight into the checkpoint's arrays. */
static vpmm_status_t snapshot(vpmm_pool_t *p, vpmm_arena_t *a, vpmm_checkpoint_t *ck)
{
    size_t acap = 0, fcap = 0;
    uintptr_t free_end = 0;
    for (vpmm_region_t *r = vpmm_i_arena_first(p, a); r; r = vpmm_i_arena_next(p, r)) {
        vpmm_view_t v;
        vpmm_i_region_view(r, &v);
        if (v.state == VPMM_REGION_ALLOCATED) {
            if (VPMM_GROW(ck->allocs, acap, ck->nallocs + 1, 64) != 0)
                goto oom;
            ck->allocs[ck->nallocs++] = (ck_alloc_t){ v.addr, v.size, v.requested, v.stream };
            ck->live_bytes += v.requested;
            ck->alloc_bytes += v.size;
        } else if (v.state == VPMM_REGION_FREE) {
            ck->free_bytes += v.size;
            if (ck->nfrees > 0 && free_end == v.addr) {
                ck->frees[ck->nfrees - 1].size += v.size; /* ready next to pending: one region */
            } else {
                if (VPMM_GROW(ck->frees, fcap, ck->nfrees + 1, 64) != 0)
                    goto oom;
                ck->frees[ck->nfrees++] = (ck_free_t){ v.addr, v.size };
            }
            free_end = v.addr + v.size;
        }
    }
    return VPMM_SUCCESS;
oom:
    vpmm_i_set_error("out of host memory for a checkpoint");
    return VPMM_ERROR_HOST_OUT_OF_MEMORY;
}

vpmm_status_t vpmm_checkpoint_take(vpmm_graph_pool_t *gp, vpmm_checkpoint_t **out)
{
    vpmm_checkpoint_t *ck;
    vpmm_pool_t *p;
    vpmm_status_t st;

    if (out != NULL)
        *out = NULL;
    VPMM_CHECK(vpmm_gp_check(gp, NULL, "vpmm_checkpoint_take"));
    if (out == NULL) {
        vpmm_i_set_error("vpmm_checkpoint_take: out_checkpoint is NULL");
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    ck = calloc(1, sizeof *ck);
    if (ck == NULL) {
        vpmm_i_set_error("out of host memory for a checkpoint");
        return VPMM_ERROR_HOST_OUT_OF_MEMORY;
    }
    p = vpmm_gp_pool(gp);
    vpmm_i_lock(p);
    vpmm_g_collect(p); /* notices captures that ended outside vpmm */
    if (vpmm_i_arena_captures(vpmm_gp_arena(gp)) > 0) {
        vpmm_i_set_error("vpmm_checkpoint_take: graph pool g%u is being captured into", gp->id);
        st = VPMM_ERROR_STREAM_CAPTURING;
    } else {
        vpmm_i_nvtx_push(VPMM_NVTX_CHECKPOINT_TAKE, gp->id);
        ck->graph_pool = gp->id;
        st = snapshot(p, vpmm_gp_arena(gp), ck);
        vpmm_i_nvtx_pop();
    }
    vpmm_i_unlock(p);
    if (st != VPMM_SUCCESS) {
        vpmm_checkpoint_destroy(ck);
        return st;
    }
    *out = ck;
    return VPMM_SUCCESS;
}

void vpmm_checkpoint_destroy(vpmm_checkpoint_t *ck)
{
    if (ck == NULL)
        return;
    free(ck->allocs);
    free(ck->frees);
    free(ck);
}

vpmm_status_t vpmm_checkpoint_info(const vpmm_checkpoint_t *ck, vpmm_checkpoint_info_t *out)
{
    if (ck == NULL || out == NULL) {
        vpmm_i_set_error("vpmm_checkpoint_info: %s is NULL",
                         ck == NULL ? "checkpoint" : "out_info");
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    *out = (vpmm_checkpoint_info_t){
        .graph_pool = ck->graph_pool,
        .allocs = ck->nallocs,
        .live_bytes = ck->live_bytes,
        .free_regions = ck->nfrees,
        .free_bytes = ck->free_bytes,
        .mapped_bytes = ck->alloc_bytes + ck->free_bytes,
    };
    return VPMM_SUCCESS;
}

size_t vpmm_checkpoint_allocs(const vpmm_checkpoint_t *ck, vpmm_checkpoint_alloc_t *out, size_t cap)
{
    if (ck == NULL)
        return 0;
    for (size_t i = 0; i < ck->nallocs && i < cap && out != NULL; i++)
        out[i] = (vpmm_checkpoint_alloc_t){ (void *)ck->allocs[i].addr, ck->allocs[i].requested,
                                            ck->allocs[i].stream.handle };
    return ck->nallocs;
}

/* ---- reapply: validation ------------------------------------------------------------------- */

/* The index of the checkpoint allocation at addr, or -1 (binary search). */
static ptrdiff_t alloc_index(const vpmm_checkpoint_t *ck, uintptr_t addr)
{
    size_t lo = 0, hi = ck->nallocs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ck->allocs[mid].addr == addr)
            return (ptrdiff_t)mid;
        if (ck->allocs[mid].addr < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* The allocations that come back: the checkpoint's minus the dead ones, in address order. Their
 * streams are resolved by resolve_streams once the reapply is known to succeed. */
static vpmm_status_t wanted_allocs(vpmm_pool_t *p, const vpmm_checkpoint_t *ck, void *const *dead,
                                   size_t ndead, vpmm_span_t **out, size_t *nout)
{
    unsigned char *is_dead = calloc(ck->nallocs ? ck->nallocs : 1, 1);
    vpmm_span_t *w = malloc((ck->nallocs ? ck->nallocs : 1) * sizeof *w);
    vpmm_status_t st = VPMM_SUCCESS;
    size_t n = 0;

    if (is_dead == NULL || w == NULL) {
        vpmm_i_set_error("out of host memory to reapply a checkpoint");
        st = VPMM_ERROR_HOST_OUT_OF_MEMORY;
        goto out;
    }
    for (size_t i = 0; i < ndead; i++) {
        ptrdiff_t k = alloc_index(ck, (uintptr_t)dead[i]);
        if (k < 0 || is_dead[k]) {
            vpmm_i_set_error("vpmm_checkpoint_reapply: dead[%zu] = %p is %s", i, dead[i],
                             k < 0 ? "not an allocation of the checkpoint" : "listed twice");
            st = VPMM_ERROR_INVALID_ARGUMENT;
            goto out;
        }
        is_dead[k] = 1;
    }
    for (size_t i = 0; i < ck->nallocs; i++) {
        const ck_alloc_t *c = &ck->allocs[i];
        if (is_dead[i])
            continue;
        w[n++] = (vpmm_span_t){ c->addr, c->size, c->requested, NULL };
    }
out:
    free(is_dead);
    if (st != VPMM_SUCCESS) {
        free(w);
        return st;
    }
    *out = w;
    *nout = n;
    return VPMM_SUCCESS;
}

/*
 * Gives each wanted allocation its stream record, created for a stream released since the
 * checkpoint was taken. Called once validation passed (check_mapped): a refused reapply creates
 * nothing. w is the checkpoint's allocations minus the dead ones, both in address order.
 */
static vpmm_status_t resolve_streams(vpmm_pool_t *p, const vpmm_checkpoint_t *ck, vpmm_span_t *w,
                                     size_t n)
{
    size_t j = 0;
    for (size_t i = 0; i < ck->nallocs && j < n; i++) {
        if (ck->allocs[i].addr != w[j].addr)
            continue; /* a dead one */
        w[j].stream = vpmm_i_stream_get(p, ck->allocs[i].stream);
        if (w[j].stream == NULL)
            return VPMM_ERROR_HOST_OUT_OF_MEMORY;
        j++;
    }
    return VPMM_SUCCESS;
}

static int mapped(const vpmm_view_t *v)
{
    return v->state == VPMM_REGION_ALLOCATED || v->state == VPMM_REGION_FREE;
}

/*
 * Every wanted allocation must lie in one chunk of the graph pool, on mapped memory or on zombie
 * pages that can be made live again (their pages were mapped elsewhere by a later capture, and
 * that address is free in the restored state: vpmm_i_revive_check). revive[i] is set for the
 * latter; *handles counts the handles to revive. Both lists are in address order: one pass.
 */
static vpmm_status_t check_mapped(vpmm_pool_t *p, vpmm_arena_t *a, const vpmm_view_t *v, size_t nv,
                                  const vpmm_span_t *w, size_t n, unsigned char *revive,
                                  size_t *handles)
{
    size_t r = 0;
    for (size_t i = 0; i < n; i++) {
        const uintptr_t lo = w[i].addr, hi = w[i].addr + w[i].size;
        int ok = 0;
        while (r < nv && v[r].addr + v[r].size <= lo) /* to the region containing lo */
            r++;
        /* From there, mapped or zombie regions of one chunk up to hi. */
        for (size_t q = r; q < nv && v[r].addr <= lo && v[q].state != VPMM_REGION_HOLE; q++) {
            revive[i] |= v[q].state == VPMM_REGION_ZOMBIE;
            if (v[q].addr + v[q].size >= hi) {
                ok = 1;
                break;
            }
            if (v[q].chunk_last)
                break;
        }
        if (ok && revive[i] && vpmm_i_revive_check(p, a, lo, hi, w, n, handles) != VPMM_SUCCESS)
            ok = 0;
        if (!ok) {
            vpmm_i_set_error("vpmm_checkpoint_reapply: the checkpoint's allocation at %p (%zu "
                             "bytes) is no longer mapped in graph pool g%u",
                             (void *)w[i].addr, w[i].requested, vpmm_i_arena_id(a));
            return VPMM_ERROR_CHECKPOINT_CONFLICT;
        }
    }
    return VPMM_SUCCESS;
}

/* An allocation over revived pages: its range is ready free memory now; cut it out. */
static void place_revived(vpmm_pool_t *p, vpmm_arena_t *a, const vpmm_span_t *want)
{
    vpmm_region_t *r;
    vpmm_view_t f;
    vpmm_span_t spans[3];
    size_t ns = 0;
    vpmm_i_revive(p, a, want->addr, want->addr + want->size);
    r = vpmm_i_region_containing(p, a, want->addr);
    vpmm_i_region_view(r, &f);
    if (f.addr < want->addr)
        spans[ns++] = (vpmm_span_t){ f.addr, want->addr - f.addr, 0, NULL };
    spans[ns++] = *want;
    if (want->addr + want->size < f.addr + f.size)
        spans[ns++] = (vpmm_span_t){ want->addr + want->size,
                                     f.addr + f.size - want->addr - want->size, 0, NULL };
    vpmm_i_rewrite(p, r, r, spans, ns);
}

/* ---- reapply: the merge walk --------------------------------------------------------------- */

typedef struct walk {
    vpmm_pool_t *p;
    const vpmm_span_t *w; /* wanted allocations */
    size_t n, k;          /* k: first wanted allocation ending after the walk's position */
    uintptr_t run_end;    /* end of the current run of mapped regions */
    vpmm_span_t *scratch; /* room for 2n + 1 spans */
} walk_t;

/* The end of the run of mapped regions of one chunk that starts at v[i]. */
static uintptr_t run_end_from(const vpmm_view_t *v, size_t nv, size_t i)
{
    while (!v[i].chunk_last && i + 1 < nv && mapped(&v[i + 1]))
        i++;
    return v[i].addr + v[i].size;
}

/* Whether x is a region boundary of the expected state (inside the current run); *j is a
 * cursor over the wanted allocations that only moves forward while x grows. */
static int expected_boundary(const walk_t *wk, size_t *j, uintptr_t x)
{
    if (x == wk->run_end)
        return 1;
    while (*j < wk->n && wk->w[*j].addr + wk->w[*j].size < x)
        (*j)++;
    return *j < wk->n && (wk->w[*j].addr == x || wk->w[*j].addr + wk->w[*j].size == x);
}

/* Whether the current region v is exactly the expected region starting at v->addr. */
static int agrees(const walk_t *wk, const vpmm_view_t *v)
{
    const vpmm_span_t *e = wk->k < wk->n ? &wk->w[wk->k] : NULL;
    uintptr_t free_end;
    if (e != NULL && e->addr == v->addr)
        return v->state == VPMM_REGION_ALLOCATED && v->size == e->size &&
               v->requested == e->requested &&
               vpmm_i_stream_key_equal(v->stream, vpmm_i_stream_key_of(e->stream));
    free_end = e != NULL && e->addr < wk->run_end ? e->addr : wk->run_end;
    return v->state == VPMM_REGION_FREE && v->ready && v->addr + v->size == free_end;
}

/* The expected regions tiling [lo, hi): wanted allocations, ready free memory between. */
static size_t expected_spans(const walk_t *wk, uintptr_t lo, uintptr_t hi, vpmm_span_t *out)
{
    size_t n = 0;
    uintptr_t at = lo;
    for (size_t j = wk->k; j < wk->n && wk->w[j].addr < hi; j++) {
        if (wk->w[j].addr > at)
            out[n++] = (vpmm_span_t){ at, wk->w[j].addr - at, 0, NULL };
        out[n++] = wk->w[j];
        at = wk->w[j].addr + wk->w[j].size;
    }
    if (at < hi)
        out[n++] = (vpmm_span_t){ at, hi - at, 0, NULL };
    return n;
}

/* Rewrites every span where the current regions v[] differ from the expected ones. The views of
 * regions after a rewritten span stay valid: a rewrite touches only its own regions. */
static void merge_walk(walk_t *wk, const vpmm_view_t *v, size_t nv)
{
    int in_run = 0;
    size_t i = 0;

    while (i < nv) {
        size_t last, j;
        uintptr_t end;
        if (!mapped(&v[i])) {
            in_run = 0;
            i++;
            continue;
        }
        if (!in_run) /* the run's end is found once; every path below sets in_run again */
            wk->run_end = run_end_from(v, nv, i);
        while (wk->k < wk->n && wk->w[wk->k].addr + wk->w[wk->k].size <= v[i].addr)
            wk->k++;
        if (agrees(wk, &v[i])) {
            in_run = !v[i].chunk_last;
            i++;
            continue;
        }
        /* Grow the span until both states have a boundary at its end (the run's end is one). */
        last = i;
        j = wk->k;
        end = v[i].addr + v[i].size;
        while (!expected_boundary(wk, &j, end)) {
            last++;
            end = v[last].addr + v[last].size;
        }
        vpmm_i_rewrite(wk->p, v[i].region, v[last].region, wk->scratch,
                       expected_spans(wk, v[i].addr, end, wk->scratch));
        in_run = !v[last].chunk_last;
        i = last + 1;
    }
}

/*
 * Memory freed in the graph pool that another stream may still use (vpmm_record_stream: a deferred
 * free) cannot be given to a checkpoint's state: one whose streams are not done refuses the
 * reapply before anything moves. Asked without polling, changing nothing: a refusal must leave
 * every region as it was. *any: whether the views hold deferred frees (all done).
 */
static vpmm_status_t deferred_done(vpmm_pool_t *p, const vpmm_view_t *v, size_t nv, int *any)
{
    *any = 0;
    for (size_t i = 0; i < nv; i++) {
        if (!v[i].deferred)
            continue;
        if (!vpmm_i_uses_done_peek(p, v[i].region)) {
            vpmm_i_set_error("vpmm_checkpoint_reapply: the memory freed at %p is still used by "
                             "another stream (vpmm_record_stream); reapply once its work is done",
                             (void *)v[i].addr);
            return VPMM_ERROR_CHECKPOINT_CONFLICT;
        }
        *any = 1;
    }
    return VPMM_SUCCESS;
}

/* Once the reapply is known to go ahead: the deferred frees, all done, are released (uses.c) and
 * the views taken again (released regions coalesce with their neighbours). */
static vpmm_status_t release_deferred(vpmm_pool_t *p, vpmm_arena_t *a, vpmm_view_t **v, size_t *nv,
                                      size_t hint)
{
    vpmm_i_uses_release(p);
    free(*v);
    *v = NULL;
    return views_of(p, a, hint, v, nv);
}

vpmm_status_t vpmm_checkpoint_reapply(vpmm_graph_pool_t *gp, const vpmm_checkpoint_t *ck,
                                      void *const *dead, size_t ndead)
{
    vpmm_span_t *w = NULL, *walked = NULL;
    vpmm_view_t *v = NULL;
    unsigned char *revive = NULL;
    vpmm_arena_t *a;
    vpmm_pool_t *p;
    vpmm_status_t st;
    walk_t wk = { 0 };
    size_t n = 0, nv = 0, nwalked = 0, handles = 0;
    int deferred = 0;

    VPMM_CHECK(vpmm_gp_check(gp, NULL, "vpmm_checkpoint_reapply"));
    if (ck == NULL || (ndead > 0 && dead == NULL)) {
        vpmm_i_set_error("vpmm_checkpoint_reapply: %s is NULL", ck == NULL ? "checkpoint" : "dead");
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    if (ck->graph_pool != gp->id) {
        vpmm_i_set_error("vpmm_checkpoint_reapply: the checkpoint is of graph pool g%u, not g%u",
                         ck->graph_pool, gp->id);
        return VPMM_ERROR_WRONG_POOL;
    }
    p = vpmm_gp_pool(gp);
    a = vpmm_gp_arena(gp);
    vpmm_i_lock(p);
    vpmm_g_collect(p);
    if (vpmm_i_arena_captures(a) > 0) {
        vpmm_i_set_error("vpmm_checkpoint_reapply: graph pool g%u is being captured into", gp->id);
        st = VPMM_ERROR_STREAM_CAPTURING;
        goto out;
    }
    VPMM_CHECK_GOTO(st, wanted_allocs(p, ck, dead, ndead, &w, &n), out);
    VPMM_CHECK_GOTO(st, views_of(p, a, ck->nallocs + ck->nfrees + 16, &v, &nv), out);
    VPMM_CHECK_GOTO(st, deferred_done(p, v, nv, &deferred), out);
    revive = calloc(n ? n : 1, 1);
    wk.scratch = malloc((2 * n + 1) * sizeof(vpmm_span_t));
    walked = malloc((n ? n : 1) * sizeof *walked);
    if (revive == NULL || wk.scratch == NULL || walked == NULL) {
        vpmm_i_set_error("out of host memory to reapply a checkpoint");
        st = VPMM_ERROR_HOST_OUT_OF_MEMORY;
        goto out;
    }
    VPMM_CHECK_GOTO(st, check_mapped(p, a, v, nv, w, n, revive, &handles), out);
    /* Validated: from here the pool may change (a failure below is of host memory only). */
    if (deferred)
        VPMM_CHECK_GOTO(st, release_deferred(p, a, &v, &nv, ck->nallocs + ck->nfrees + 16), out);
    /* Each rewrite takes at most 2m + 1 new nodes (m wanted allocations in it), then gives its
     * old ones (at least one) back: with 2n + 1 spare nodes, each finds 2m + 1 left; a revived
     * handle takes 4 more, the allocation on it 3. */
    VPMM_CHECK_GOTO(st, resolve_streams(p, ck, w, n), out);
    VPMM_CHECK_GOTO(st, vpmm_i_rewrite_reserve(p, a, 2 * n + 1 + 4 * handles + 3 * n, w, n), out);
    /* Cannot fail from here. First the allocations on mapped memory, then the revived ones. */
    vpmm_i_nvtx_push(VPMM_NVTX_CHECKPOINT_REAPPLY, n);
    for (size_t i = 0; i < n; i++)
        if (!revive[i])
            walked[nwalked++] = w[i];
    wk.p = p;
    wk.w = walked;
    wk.n = nwalked;
    merge_walk(&wk, v, nv);
    for (size_t i = 0; i < n; i++)
        if (revive[i])
            place_revived(p, a, &w[i]);
    vpmm_i_arena_nvtx_refresh(p, a); /* a tool sees exactly the checkpoint's allocations */
    vpmm_i_nvtx_pop();
out:
    vpmm_i_unlock(p);
    free(wk.scratch);
    free(walked);
    free(revive);
    free(v);
    free(w);
    return st;
}
