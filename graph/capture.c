/*
 * capture.c — captures: which graph pool serves which capture, and the public capture calls.
 *
 * vpmm_malloc asks the driver whether its stream is being captured (one query, which it makes
 * anyway). If so, vpmm_g_malloc looks the capture id up here: a capture begun with
 * vpmm_capture_begin or registered with vpmm_capture_register has a record naming its graph
 * pool; a capture vpmm has not seen (begun outside vpmm, e.g. by torch.cuda.graph) gets a new
 * graph pool and a record now. Every stream of a capture reports the same id, so streams joined
 * into it through events are served by the same graph pool.
 *
 * On its first sight of a capture, vpmm retains a user object on the graph being captured: the
 * graph keeps the graph pool alive (graph_pool.c). The record lives until the capture ends:
 * vpmm_capture_end says so, and a capture ended outside vpmm is noticed by vpmm_cap_refresh (its
 * stream no longer reports that id) on the next collect or the next unknown capture id.
 *
 * All under the pool lock.
 */
#include <stdlib.h>

#include "graph.h"

/* ---- hooks -------------------------------------------------------------------------------- */

/* The record of the capture stream is in (status and id already known), made if new: served by
 * gp, or by a new graph pool when gp is NULL. */
static vpmm_status_t record_for(vpmm_pool_t *p, vpmm_graphs_t *g, vpmm_graph_pool_t *gp,
                                vpmm_stream_key_t stream, uint64_t id, vpmm_capture_rec_t **out)
{
    vpmm_driver_t *d = vpmm_i_pool_driver(p);
    vpmm_capture_status_t cap;
    vpmm_graph_t graph;
    uint64_t id2;

    *out = vpmm_cap_find(g, id);
    if (*out != NULL)
        return VPMM_SUCCESS;
    vpmm_cap_refresh(p, g); /* a new capture: earlier ones may have ended */
    VPMM_CHECK(vpmm_i_drv_status(p, d->capture_info(d, stream.handle, &cap, &id2, &graph)));
    if (cap == VPMM_CAPTURE_NONE || id2 != id) {
        vpmm_i_set_error("stream %p left capture %llu while vpmm looked at it",
                         (void *)stream.handle, (unsigned long long)id);
        return VPMM_ERROR_NOT_CAPTURING;
    }
    return vpmm_cap_new(p, g, gp, stream, id, graph, out);
}

vpmm_status_t vpmm_g_capture_malloc(vpmm_pool_t *p, vpmm_stream_key_t stream, uint64_t capture_id,
                                    size_t size, void **out_ptr)
{
    vpmm_graphs_t *g = vpmm_gp_state(p);
    vpmm_capture_rec_t *rec;
    if (g == NULL)
        return VPMM_ERROR_HOST_OUT_OF_MEMORY;
    VPMM_CHECK(record_for(p, g, NULL, stream, capture_id, &rec));
    return vpmm_i_arena_malloc(p, rec->gp->arena, stream, size, out_ptr);
}

static vpmm_status_t malloc_into(vpmm_pool_t *p, vpmm_graph_pool_t *gp, vpmm_stream_key_t stream,
                                 int capturing, uint64_t capture_id, size_t size, void **out_ptr)
{
    if (capturing) {
        vpmm_graphs_t *g = vpmm_gp_state(p);
        vpmm_capture_rec_t *rec;
        if (g == NULL)
            return VPMM_ERROR_HOST_OUT_OF_MEMORY;
        VPMM_CHECK(record_for(p, g, gp, stream, capture_id, &rec));
        if (rec->gp != gp) {
            vpmm_i_set_error("vpmm_graph_pool_malloc: stream %p is part of capture %llu, served "
                             "by graph pool g%u, not g%u",
                             (void *)stream.handle, (unsigned long long)capture_id, rec->gp->id,
                             gp->id);
            return VPMM_ERROR_WRONG_POOL;
        }
    }
    return vpmm_i_arena_malloc(p, gp->arena, stream, size, out_ptr);
}

vpmm_status_t vpmm_graph_pool_malloc(vpmm_graph_pool_t *gp, size_t size, vpmm_stream_t stream,
                                     void **out_ptr)
{
    vpmm_malloc_call_t c;
    vpmm_status_t st;
    if (out_ptr != NULL)
        *out_ptr = NULL;
    VPMM_CHECK(vpmm_gp_check(gp, NULL, "vpmm_graph_pool_malloc"));
    VPMM_CHECK(vpmm_i_malloc_enter(gp->pool, "vpmm_graph_pool_malloc", size, stream, out_ptr, &c));
    st = malloc_into(gp->pool, gp, c.key, c.cap != VPMM_CAPTURE_NONE, c.capture_id, size, out_ptr);
    vpmm_i_malloc_leave(gp->pool, &c, st, size, out_ptr);
    return st;
}

static vpmm_arena_t *vpmm_g_capture_arena(vpmm_pool_t *p, uint64_t capture_id)
{
    vpmm_graphs_t *g = *vpmm_i_pool_graphs(p);
    vpmm_capture_rec_t *rec = g ? vpmm_cap_find(g, capture_id) : NULL;
    return rec ? rec->gp->arena : NULL;
}

static void vpmm_g_stream_released(vpmm_pool_t *p, vpmm_stream_key_t stream)
{
    vpmm_graphs_t *g = *vpmm_i_pool_graphs(p);
    vpmm_capture_rec_t *rec, *next;
    if (g == NULL)
        return;
    for (rec = g->captures; rec; rec = next) {
        next = rec->next;
        if (vpmm_i_stream_key_equal(rec->stream, stream))
            vpmm_cap_end(p, g, rec); /* the stream goes away: never query it again */
    }
}

const vpmm_graph_hooks_t vpmm_g_hooks = {
    .capture_malloc = vpmm_g_capture_malloc,
    .capture_arena = vpmm_g_capture_arena,
    .collect = vpmm_g_collect,
    .fini = vpmm_g_fini,
    .stream_released = vpmm_g_stream_released,
};

const vpmm_graph_hooks_t *vpmm_i_graph_hooks(void)
{
    return &vpmm_g_hooks;
}

/* ---- public calls ------------------------------------------------------------------------- */

/* The capture stream is in; VPMM_ERROR_NOT_CAPTURING if none. */
static vpmm_status_t capture_of(vpmm_pool_t *p, vpmm_stream_t stream, const char *fn,
                                uint64_t *out_id)
{
    vpmm_driver_t *d = vpmm_i_pool_driver(p);
    vpmm_capture_status_t cap = VPMM_CAPTURE_NONE;
    if (!vpmm_i_stream_is_legacy(stream))
        VPMM_CHECK(vpmm_i_drv_status(p, d->capture_info(d, stream, &cap, out_id, NULL)));
    if (cap == VPMM_CAPTURE_NONE) {
        vpmm_i_set_error("%s: stream %p is not being captured", fn, (void *)stream);
        return VPMM_ERROR_NOT_CAPTURING;
    }
    return VPMM_SUCCESS;
}

/* Whether capture id is over on stream (after a failed end: an invalidated capture ends anyway,
 * a refused one goes on). Not knowing means not over. */
static int capture_over(vpmm_pool_t *p, vpmm_stream_t stream, uint64_t id)
{
    vpmm_driver_t *d = vpmm_i_pool_driver(p);
    vpmm_capture_status_t cap;
    uint64_t now;
    if (d->capture_info(d, stream, &cap, &now, NULL) != VPMM_DRV_OK)
        return 0;
    return cap == VPMM_CAPTURE_NONE || now != id;
}

/* Ends the capture vpmm just began on stream and destroys its graph (a failed begin); each call
 * gets a second try, so that one transient failure leaves no capture and no graph behind. */
static void abort_capture(vpmm_pool_t *p, vpmm_stream_t stream)
{
    vpmm_driver_t *d = vpmm_i_pool_driver(p);
    vpmm_graph_t graph = NULL;
    if (d->end_capture(d, stream, &graph) != VPMM_DRV_OK &&
        d->end_capture(d, stream, &graph) != VPMM_DRV_OK)
        return;
    if (graph != NULL && d->graph_destroy(d, graph) != VPMM_DRV_OK)
        (void)d->graph_destroy(d, graph);
}

vpmm_status_t vpmm_capture_begin(vpmm_pool_t *pool, vpmm_graph_pool_t *gp, vpmm_stream_t stream,
                                 vpmm_stream_capture_mode_t mode)
{
    vpmm_driver_t *d;
    vpmm_graphs_t *g;
    vpmm_capture_rec_t *rec;
    vpmm_capture_status_t cap;
    vpmm_stream_key_t key;
    vpmm_graph_t graph;
    vpmm_status_t st;
    uint64_t id;

    if (pool == NULL) {
        vpmm_i_set_error("vpmm_capture_begin: pool is NULL");
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    if (gp != NULL)
        VPMM_CHECK(vpmm_gp_check(gp, pool, "vpmm_capture_begin"));
    key = vpmm_i_stream_key(pool, stream);
    stream = key.handle; /* canonical: stream 0 of a per-thread program can be captured */
    if (vpmm_i_stream_is_legacy(stream)) {
        vpmm_i_set_error("vpmm_capture_begin: the legacy default stream cannot be captured");
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    if (mode != VPMM_STREAM_CAPTURE_GLOBAL && mode != VPMM_STREAM_CAPTURE_THREAD_LOCAL &&
        mode != VPMM_STREAM_CAPTURE_RELAXED) {
        vpmm_i_set_error("vpmm_capture_begin: unknown capture mode %d", (int)mode);
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    d = vpmm_i_pool_driver(pool);
    vpmm_i_lock(pool);
    g = vpmm_gp_state(pool);
    st = g ? VPMM_SUCCESS : VPMM_ERROR_HOST_OUT_OF_MEMORY;
    if (st == VPMM_SUCCESS)
        st = vpmm_i_drv_status(pool, d->capture_info(d, stream, &cap, &id, NULL));
    if (st == VPMM_SUCCESS && cap != VPMM_CAPTURE_NONE) {
        vpmm_i_set_error("vpmm_capture_begin: stream %p is already being captured", (void *)stream);
        st = VPMM_ERROR_STREAM_CAPTURING;
    }
    if (st != VPMM_SUCCESS)
        goto out;
    /* Last chance to query events before the capture: memory freed outside captures whose work
     * is done becomes ready, for this capture to reuse. */
    vpmm_g_collect(pool);
    vpmm_i_stream_poll_all(pool, NULL);
    vpmm_i_nvtx_push(VPMM_NVTX_CAPTURE_BEGIN, gp ? gp->id : 0);
    st = vpmm_i_drv_status(pool, d->begin_capture(d, stream, (vpmm_capture_mode_t)mode));
    if (st == VPMM_SUCCESS) {
        st = vpmm_i_drv_status(pool, d->capture_info(d, stream, &cap, &id, &graph));
        if (st == VPMM_SUCCESS)
            st = vpmm_cap_new(pool, g, gp, key, id, graph, &rec);
        if (st != VPMM_SUCCESS)
            abort_capture(pool, stream);
    }
    vpmm_i_nvtx_pop();
out:
    vpmm_i_unlock(pool);
    return st;
}

vpmm_status_t vpmm_capture_end(vpmm_pool_t *pool, vpmm_stream_t stream, vpmm_graph_t *out_graph)
{
    vpmm_driver_t *d;
    vpmm_graphs_t *g;
    vpmm_capture_rec_t *rec;
    vpmm_status_t st;
    uint64_t id;

    if (out_graph != NULL)
        *out_graph = NULL;
    if (pool == NULL || out_graph == NULL) {
        vpmm_i_set_error("vpmm_capture_end: %s is NULL", pool == NULL ? "pool" : "out_graph");
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    d = vpmm_i_pool_driver(pool);
    stream = vpmm_i_stream_key(pool, stream).handle;
    vpmm_i_lock(pool);
    st = capture_of(pool, stream, "vpmm_capture_end", &id);
    if (st != VPMM_SUCCESS)
        goto out;
    vpmm_i_nvtx_push(VPMM_NVTX_CAPTURE_END, id);
    st = vpmm_i_drv_status(pool, d->end_capture(d, stream, out_graph));
    g = *vpmm_i_pool_graphs(pool);
    rec = g ? vpmm_cap_find(g, id) : NULL;
    if (rec != NULL && (st == VPMM_SUCCESS || capture_over(pool, stream, id)))
        vpmm_cap_end(pool, g, rec); /* a refused end of an invalidated capture ends it too */
    vpmm_g_collect(pool);
    vpmm_i_nvtx_pop();
out:
    vpmm_i_unlock(pool);
    return st;
}

vpmm_status_t vpmm_graph_destroy(vpmm_pool_t *pool, vpmm_graph_t graph)
{
    vpmm_driver_t *d;
    vpmm_dres_t dres;
    vpmm_status_t st;
    if (pool == NULL || graph == NULL) {
        vpmm_i_set_error("vpmm_graph_destroy: %s is NULL", pool == NULL ? "pool" : "graph");
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    d = vpmm_i_pool_driver(pool);
    /* Destroying a large graph takes a while and needs no pool state: outside the lock. The
     * user objects it drops only make atomic stores (graph_pool.c). */
    dres = d->graph_destroy(d, graph);
    vpmm_i_lock(pool);
    st = vpmm_i_drv_status(pool, dres);
    vpmm_g_collect(pool); /* a graph pool it was the last user of goes back now */
    vpmm_i_unlock(pool);
    return st;
}

vpmm_status_t vpmm_capture_register(vpmm_pool_t *pool, vpmm_graph_pool_t *gp, vpmm_stream_t stream)
{
    vpmm_driver_t *d;
    vpmm_graphs_t *g;
    vpmm_capture_rec_t *rec;
    vpmm_capture_status_t cap;
    vpmm_stream_key_t key;
    vpmm_graph_t graph;
    vpmm_status_t st;
    uint64_t id;

    if (pool == NULL) {
        vpmm_i_set_error("vpmm_capture_register: pool is NULL");
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    VPMM_CHECK(vpmm_gp_check(gp, pool, "vpmm_capture_register"));
    d = vpmm_i_pool_driver(pool);
    key = vpmm_i_stream_key(pool, stream);
    stream = key.handle;
    vpmm_i_lock(pool);
    g = vpmm_gp_state(pool);
    st = g ? capture_of(pool, stream, "vpmm_capture_register", &id) : VPMM_ERROR_HOST_OUT_OF_MEMORY;
    if (st != VPMM_SUCCESS)
        goto out;
    vpmm_cap_refresh(pool, g);
    rec = vpmm_cap_find(g, id);
    if (rec != NULL) {
        if (rec->gp != gp) {
            vpmm_i_set_error("vpmm_capture_register: capture %llu is already served by graph "
                             "pool g%u",
                             (unsigned long long)id, rec->gp->id);
            st = VPMM_ERROR_WRONG_POOL;
        }
        goto out;
    }
    st = vpmm_i_drv_status(pool, d->capture_info(d, stream, &cap, &id, &graph));
    if (st == VPMM_SUCCESS)
        st = vpmm_cap_new(pool, g, gp, key, id, graph, &rec);
out:
    vpmm_i_unlock(pool);
    return st;
}

vpmm_status_t vpmm_capture_graph_pool(vpmm_pool_t *pool, vpmm_stream_t stream,
                                      vpmm_graph_pool_t **out)
{
    vpmm_graphs_t *g;
    vpmm_capture_rec_t *rec;
    vpmm_stream_key_t key;
    vpmm_status_t st;
    uint64_t id;

    if (out != NULL)
        *out = NULL;
    if (pool == NULL || out == NULL) {
        vpmm_i_set_error("vpmm_capture_graph_pool: %s is NULL",
                         pool == NULL ? "pool" : "out_graph_pool");
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    key = vpmm_i_stream_key(pool, stream);
    vpmm_i_lock(pool);
    g = vpmm_gp_state(pool);
    st = g ? capture_of(pool, key.handle, "vpmm_capture_graph_pool", &id)
           : VPMM_ERROR_HOST_OUT_OF_MEMORY;
    if (st == VPMM_SUCCESS)
        st = record_for(pool, g, NULL, key, id, &rec);
    if (st == VPMM_SUCCESS) {
        rec->gp->handles++;
        *out = rec->gp;
    }
    vpmm_i_unlock(pool);
    return st;
}
