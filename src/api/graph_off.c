/*
 * graph_off.c — the graph and checkpoint calls of include/vpmm.h in a build without graph/ and
 * checkpoint/ (VPMM_WITH_GRAPHS=OFF; compiled instead of them): each refuses with
 * VPMM_ERROR_NOT_SUPPORTED and says why in vpmm_last_error(), so that the library's exported
 * functions (src/vpmm.map) stay the same in every build; and the build's graph hook table, none.
 * Stateless, thread-safe.
 */
#include "api.h"

/* No graph hooks: a captured malloc is refused (src/api/malloc.c), the rest are no-ops. */
const vpmm_graph_hooks_t *vpmm_i_graph_hooks(void)
{
    return NULL;
}

static vpmm_status_t off(const char *fn)
{
    vpmm_i_set_error("%s: this vpmm was built without graph support (VPMM_WITH_GRAPHS=OFF)", fn);
    return VPMM_ERROR_NOT_SUPPORTED;
}

/* Out parameters are cleared as the real calls clear them on failure. */
#define CLEAR(p)                                                                                   \
    do {                                                                                           \
        if ((p) != NULL)                                                                           \
            *(p) = NULL;                                                                           \
    } while (0)

vpmm_status_t vpmm_graph_pool_create(vpmm_pool_t *pool, vpmm_graph_pool_t **out_graph_pool)
{
    CLEAR(out_graph_pool);
    return off("vpmm_graph_pool_create");
}

vpmm_status_t vpmm_graph_pool_malloc(vpmm_graph_pool_t *graph_pool, size_t size,
                                     vpmm_stream_t stream, void **out_ptr)
{
    CLEAR(out_ptr);
    return off("vpmm_graph_pool_malloc");
}

vpmm_status_t vpmm_graph_pool_retain(vpmm_graph_pool_t *graph_pool)
{
    return off("vpmm_graph_pool_retain");
}

vpmm_status_t vpmm_graph_pool_release(vpmm_graph_pool_t *graph_pool)
{
    return off("vpmm_graph_pool_release");
}

vpmm_status_t vpmm_graph_pool_stats(const vpmm_graph_pool_t *graph_pool,
                                    vpmm_graph_pool_stats_t *out_stats)
{
    return off("vpmm_graph_pool_stats");
}

vpmm_status_t vpmm_graph_pool_reset_peak_stats(vpmm_graph_pool_t *graph_pool)
{
    return off("vpmm_graph_pool_reset_peak_stats");
}

vpmm_status_t vpmm_capture_begin(vpmm_pool_t *pool, vpmm_graph_pool_t *graph_pool,
                                 vpmm_stream_t stream, vpmm_stream_capture_mode_t mode)
{
    return off("vpmm_capture_begin");
}

vpmm_status_t vpmm_capture_end(vpmm_pool_t *pool, vpmm_stream_t stream, vpmm_graph_t *out_graph)
{
    CLEAR(out_graph);
    return off("vpmm_capture_end");
}

vpmm_status_t vpmm_graph_destroy(vpmm_pool_t *pool, vpmm_graph_t graph)
{
    return off("vpmm_graph_destroy");
}

vpmm_status_t vpmm_capture_register(vpmm_pool_t *pool, vpmm_graph_pool_t *graph_pool,
                                    vpmm_stream_t stream)
{
    return off("vpmm_capture_register");
}

vpmm_status_t vpmm_capture_graph_pool(vpmm_pool_t *pool, vpmm_stream_t stream,
                                      vpmm_graph_pool_t **out_graph_pool)
{
    CLEAR(out_graph_pool);
    return off("vpmm_capture_graph_pool");
}

vpmm_status_t vpmm_checkpoint_take(vpmm_graph_pool_t *graph_pool,
                                   vpmm_checkpoint_t **out_checkpoint)
{
    CLEAR(out_checkpoint);
    return off("vpmm_checkpoint_take");
}

vpmm_status_t vpmm_checkpoint_reapply(vpmm_graph_pool_t *graph_pool,
                                      const vpmm_checkpoint_t *checkpoint, void *const *dead,
                                      size_t n_dead)
{
    return off("vpmm_checkpoint_reapply");
}

vpmm_status_t vpmm_checkpoint_info(const vpmm_checkpoint_t *checkpoint,
                                   vpmm_checkpoint_info_t *out_info)
{
    return off("vpmm_checkpoint_info");
}

size_t vpmm_checkpoint_allocs(const vpmm_checkpoint_t *checkpoint, vpmm_checkpoint_alloc_t *out,
                              size_t cap)
{
    (void)off("vpmm_checkpoint_allocs");
    return 0;
}

void vpmm_checkpoint_destroy(vpmm_checkpoint_t *checkpoint)
{
    (void)checkpoint; /* no checkpoint can exist */
}
