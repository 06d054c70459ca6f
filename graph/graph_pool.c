/*
 * graph_pool.c — graph pools (private pools for captured graphs): creation, handle and graph
 * references, the user-object destructor, returning a dead graph pool's pages to the shared
 * pool (vpmm_g_collect), pool destruction (vpmm_g_fini), and the public calls on a graph pool.
 *
 * The reference rules are in graph.h. The destructor CUDA calls when a graph's last reference
 * goes runs on a driver thread, possibly while another thread holds the pool lock inside a
 * driver call; so it takes no lock and calls nothing: two atomic stores. The next collect (every
 * shared slow-path malloc, every graph-pool call) does the rest under the lock.
 */
#include <stdlib.h>
#include <time.h>

#include "graph.h"

static atomic_uint next_id = 1; /* graph pool ids are unique in the process */

vpmm_graphs_t *vpmm_gp_state(vpmm_pool_t *p)
{
    vpmm_graphs_t **slot = vpmm_i_pool_graphs(p);
    if (*slot == NULL) {
        *slot = calloc(1, sizeof **slot);
        if (*slot == NULL)
            vpmm_i_set_error("out of host memory for graph pool bookkeeping");
    }
    return *slot;
}

vpmm_status_t vpmm_gp_check(const vpmm_graph_pool_t *gp, const vpmm_pool_t *pool, const char *fn)
{
    if (gp == NULL) {
        vpmm_i_set_error("%s: graph_pool is NULL", fn);
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    if (pool != NULL && gp->pool != pool) {
        vpmm_i_set_error("%s: graph pool g%u belongs to another pool", fn, gp->id);
        return VPMM_ERROR_WRONG_POOL;
    }
    return VPMM_SUCCESS;
}

vpmm_status_t vpmm_gp_new(vpmm_pool_t *p, size_t handles, vpmm_graph_pool_t **out)
{
    vpmm_graphs_t *g = vpmm_gp_state(p);
    vpmm_graph_pool_t *gp;
    vpmm_status_t st;

    if (g == NULL)
        return VPMM_ERROR_HOST_OUT_OF_MEMORY;
    gp = calloc(1, sizeof *gp);
    if (gp == NULL) {
        vpmm_i_set_error("out of host memory for a graph pool");
        return VPMM_ERROR_HOST_OUT_OF_MEMORY;
    }
    gp->id = atomic_fetch_add(&next_id, 1);
    st = vpmm_i_arena_create(p, gp->id, &gp->arena);
    if (st != VPMM_SUCCESS) {
        free(gp);
        return st;
    }
    gp->pool = p;
    gp->owner = g;
    gp->handles = handles;
    atomic_init(&gp->dead, 0);
    gp->next = g->pools;
    g->pools = gp;
    *out = gp;
    return VPMM_SUCCESS;
}

/* The user object's destructor: one graph referencing gp is gone (driver thread, no lock). */
static void graph_gone(void *arg)
{
    vpmm_graph_pool_t *gp = arg;
    atomic_fetch_add_explicit(&gp->dead, 1, memory_order_release);
    atomic_store_explicit(&gp->owner->dirty, 1, memory_order_release);
}

vpmm_status_t vpmm_gp_attach(vpmm_pool_t *p, vpmm_graph_pool_t *gp, vpmm_graph_t graph)
{
    vpmm_driver_t *d = vpmm_i_pool_driver(p);
    vpmm_drv_uobj_t obj;
    vpmm_status_t st;

    VPMM_CHECK(vpmm_i_drv_status(p, d->user_object_create(d, graph_gone, gp, &obj)));
    gp->graphs++; /* from now on the destructor will run exactly once */
    vpmm_i_arena_set_pinned(gp->arena, 1);
    st = vpmm_i_drv_status(p, d->graph_retain_user_object(d, graph, obj));
    if (st != VPMM_SUCCESS) {
        /* Still ours: dropping it runs the destructor (now or soon), which collect counts. */
        if (d->user_object_release(d, obj) != VPMM_DRV_OK)
            (void)d->user_object_release(d, obj);
    }
    return st;
}

int vpmm_gp_reap(vpmm_pool_t *p, vpmm_graph_pool_t *gp)
{
    vpmm_graphs_t *g = gp->owner;
    vpmm_graph_pool_t **link;
    if (gp->handles > 0 || gp->graphs > 0 || atomic_load(&gp->dead) > 0 || vpmm_cap_uses(g, gp))
        return 0;
    vpmm_i_arena_dissolve(p, gp->arena);
    for (link = &g->pools; *link != gp; link = &(*link)->next)
        ;
    *link = gp->next;
    free(gp);
    return 1;
}

void vpmm_g_collect(vpmm_pool_t *p)
{
    vpmm_graphs_t *g = *vpmm_i_pool_graphs(p);
    vpmm_graph_pool_t *gp, *next;
    if (g == NULL)
        return;
    if (g->captures != NULL)
        vpmm_cap_refresh(p, g);
    if (!atomic_exchange_explicit(&g->dirty, 0, memory_order_acquire))
        return;
    for (gp = g->pools; gp; gp = next) {
        size_t dead = atomic_exchange_explicit(&gp->dead, 0, memory_order_acquire);
        next = gp->next;
        if (dead == 0)
            continue;
        gp->graphs -= dead;
        if (gp->graphs > 0)
            continue;
        /* No graph left: its captures are over (each held a graph), its pages may move. Ending
         * the last capture reaps gp when nothing else holds it: gp is not touched after that. */
        vpmm_i_arena_set_pinned(gp->arena, 0);
        if (vpmm_cap_uses(g, gp))
            vpmm_cap_end_all_of(p, g, gp);
        else
            vpmm_gp_reap(p, gp);
    }
}

/* Graph pools with graphs but no handle: their graphs were probably just destroyed, and CUDA
 * runs the destructors asynchronously, after the launches complete. */
static int waiting_for_destructors(const vpmm_graphs_t *g)
{
    for (const vpmm_graph_pool_t *gp = g->pools; gp; gp = gp->next)
        if (gp->handles == 0 && gp->graphs > 0)
            return 1;
    return 0;
}

#define FINI_WAIT_MS 500

vpmm_status_t vpmm_g_fini(vpmm_pool_t *p)
{
    vpmm_graphs_t **slot = vpmm_i_pool_graphs(p);
    size_t n = 0, handles = 0, graphs = 0;

    if (*slot == NULL)
        return VPMM_SUCCESS;
    vpmm_g_collect(p);
    /* A capture in progress: refused before the synchronize below, which would invalidate it. */
    vpmm_cap_refresh(p, *slot);
    if ((*slot)->captures != NULL) {
        const vpmm_capture_rec_t *rec = (*slot)->captures;
        vpmm_i_set_error("vpmm_pool_destroy: stream %p is being captured into graph pool g%u",
                         (void *)rec->stream.handle, rec->gp->id);
        return VPMM_ERROR_POOL_BUSY;
    }
    if ((*slot)->pools != NULL && waiting_for_destructors(*slot)) {
        (void)vpmm_i_pool_synchronize(p); /* launches done: only the destructor thread remains */
        for (int ms = 0; ms < FINI_WAIT_MS && waiting_for_destructors(*slot); ms++) {
            struct timespec one_ms = { 0, 1000000 };
            nanosleep(&one_ms, NULL);
            vpmm_g_collect(p);
        }
    }
    for (const vpmm_graph_pool_t *gp = (*slot)->pools; gp; gp = gp->next, n++) {
        handles += gp->handles;
        graphs += gp->graphs;
    }
    if (n > 0) {
        vpmm_i_set_error("vpmm_pool_destroy: %zu graph pool(s) still alive (%zu handle "
                         "reference(s) not released, %zu graph(s) not destroyed)",
                         n, handles, graphs);
        return VPMM_ERROR_POOL_BUSY;
    }
    free(*slot);
    *slot = NULL;
    return VPMM_SUCCESS;
}

/* ---- public calls ---------------------------------------------------------------------------- */

vpmm_status_t vpmm_graph_pool_create(vpmm_pool_t *pool, vpmm_graph_pool_t **out)
{
    vpmm_status_t st;
    if (out != NULL)
        *out = NULL;
    if (pool == NULL || out == NULL) {
        vpmm_i_set_error("vpmm_graph_pool_create: %s is NULL",
                         pool == NULL ? "pool" : "out_graph_pool");
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    vpmm_i_lock(pool);
    vpmm_g_collect(pool);
    st = vpmm_gp_new(pool, 1, out);
    vpmm_i_unlock(pool);
    return st;
}

vpmm_status_t vpmm_graph_pool_retain(vpmm_graph_pool_t *gp)
{
    VPMM_CHECK(vpmm_gp_check(gp, NULL, "vpmm_graph_pool_retain"));
    vpmm_i_lock(gp->pool);
    gp->handles++;
    vpmm_i_unlock(gp->pool);
    return VPMM_SUCCESS;
}

vpmm_status_t vpmm_graph_pool_release(vpmm_graph_pool_t *gp)
{
    vpmm_pool_t *pool;
    vpmm_status_t st = VPMM_SUCCESS;
    VPMM_CHECK(vpmm_gp_check(gp, NULL, "vpmm_graph_pool_release"));
    pool = gp->pool;
    vpmm_i_lock(pool);
    if (gp->handles == 0) {
        vpmm_i_set_error("vpmm_graph_pool_release: graph pool g%u has no handle reference left",
                         gp->id);
        st = VPMM_ERROR_INVALID_ARGUMENT;
    } else {
        vpmm_g_collect(pool); /* gp still has our handle: collect cannot free it */
        gp->handles--;
        vpmm_gp_reap(pool, gp); /* gp is freed here once nothing uses it */
    }
    vpmm_i_unlock(pool);
    return st;
}

vpmm_status_t vpmm_graph_pool_stats(const vpmm_graph_pool_t *gp, vpmm_graph_pool_stats_t *out)
{
    VPMM_CHECK(vpmm_gp_check(gp, NULL, "vpmm_graph_pool_stats"));
    if (out == NULL) {
        vpmm_i_set_error("vpmm_graph_pool_stats: out_stats is NULL");
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    vpmm_i_lock(gp->pool);
    vpmm_g_collect(gp->pool); /* gp has a handle: collect cannot free it */
    vpmm_i_arena_stats(gp->pool, gp->arena, out);
    out->graphs = gp->graphs;
    vpmm_i_unlock(gp->pool);
    return VPMM_SUCCESS;
}

vpmm_status_t vpmm_graph_pool_reset_peak_stats(vpmm_graph_pool_t *gp)
{
    VPMM_CHECK(vpmm_gp_check(gp, NULL, "vpmm_graph_pool_reset_peak_stats"));
    vpmm_i_lock(gp->pool);
    vpmm_i_arena_reset_peaks(gp->arena);
    vpmm_i_unlock(gp->pool);
    return VPMM_SUCCESS;
}

/* ---- capture records (capture.c makes and looks them up) ------------------------------------ */

vpmm_capture_rec_t *vpmm_cap_find(vpmm_graphs_t *g, uint64_t id)
{
    for (vpmm_capture_rec_t *r = g->captures; r; r = r->next)
        if (r->id == id)
            return r;
    return NULL;
}

int vpmm_cap_uses(const vpmm_graphs_t *g, const vpmm_graph_pool_t *gp)
{
    for (const vpmm_capture_rec_t *r = g->captures; r; r = r->next)
        if (r->gp == gp)
            return 1;
    return 0;
}

/* Unlinks and frees rec; its graph pool learns that one capture into it is over. */
void vpmm_cap_end(vpmm_pool_t *p, vpmm_graphs_t *g, vpmm_capture_rec_t *rec)
{
    vpmm_capture_rec_t **link;
    vpmm_graph_pool_t *gp = rec->gp;
    for (link = &g->captures; *link != rec; link = &(*link)->next)
        ;
    *link = rec->next;
    free(rec);
    vpmm_i_arena_capture_ended(p, gp->arena);
    vpmm_gp_reap(p, gp);
}

/*
 * Starts serving capture `id` (of which stream is a part, graph its graph) from gp, or from a
 * new graph pool when gp is NULL. All or nothing.
 */
vpmm_status_t vpmm_cap_new(vpmm_pool_t *p, vpmm_graphs_t *g, vpmm_graph_pool_t *gp,
                           vpmm_stream_key_t stream, uint64_t id, vpmm_graph_t graph,
                           vpmm_capture_rec_t **out)
{
    vpmm_capture_rec_t *rec = calloc(1, sizeof *rec);
    vpmm_status_t st;
    int fresh = gp == NULL;

    if (rec == NULL) {
        vpmm_i_set_error("out of host memory for a capture record");
        return VPMM_ERROR_HOST_OUT_OF_MEMORY;
    }
    if (fresh && (st = vpmm_gp_new(p, 0, &gp)) != VPMM_SUCCESS)
        goto fail;
    st = vpmm_gp_attach(p, gp, graph);
    if (st != VPMM_SUCCESS) {
        if (fresh)
            vpmm_gp_reap(p, gp); /* or, if a destructor is due, the next collect */
        goto fail;
    }
    rec->id = id;
    rec->gp = gp;
    rec->stream = stream;
    rec->next = g->captures;
    g->captures = rec;
    vpmm_i_arena_capture_begun(p, gp->arena);
    *out = rec;
    return VPMM_SUCCESS;
fail:
    free(rec);
    return st;
}

void vpmm_cap_refresh(vpmm_pool_t *p, vpmm_graphs_t *g)
{
    vpmm_driver_t *d = vpmm_i_pool_driver(p);
    vpmm_capture_rec_t *rec = g->captures, *next;
    for (; rec; rec = next) {
        vpmm_capture_status_t cap;
        uint64_t id;
        next = rec->next;
        if (!vpmm_i_stream_key_here(rec->stream))
            continue; /* another thread's per-thread stream: that thread will see */
        if (d->capture_info(d, rec->stream.handle, &cap, &id, NULL) != VPMM_DRV_OK)
            continue; /* not knowing means not over */
        if (cap == VPMM_CAPTURE_NONE || id != rec->id)
            vpmm_cap_end(p, g, rec);
    }
}

void vpmm_cap_end_all_of(vpmm_pool_t *p, vpmm_graphs_t *g, vpmm_graph_pool_t *gp)
{
    vpmm_capture_rec_t *rec = g->captures, *next;
    for (; rec; rec = next) {
        next = rec->next;
        if (rec->gp == gp)
            vpmm_cap_end(p, g, rec);
    }
}
