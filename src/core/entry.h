/*
 * entry.h — the core halves of the public entry points: what src/api/ calls once it has checked
 * the caller's arguments (non-NULL pool and outputs, sizes in range). Each takes the pool lock
 * itself and sets vpmm_last_error() where it fails. Every exported function is defined on the API
 * floor (src/api/); this is the line below it. graph/ and checkpoint/ have their own entry points
 * (internal.h).
 */
#ifndef VPMM_ENTRY_H
#define VPMM_ENTRY_H

#include <stdio.h>

#include "pages.h"
#include "pool.h"
#include "record.h"
#include "report.h"
#include "vpmm.h"

/* Pool (pool.c, options.c, trim.c, segment.c). */
void vpmm_i_config_defaults(vpmm_config_t *config);
vpmm_status_t vpmm_i_pool_destroy(vpmm_pool_t *pool);
vpmm_status_t vpmm_i_stream_release(vpmm_pool_t *pool, vpmm_stream_t stream);
vpmm_status_t vpmm_i_trim(vpmm_pool_t *pool, size_t target_bytes, size_t *out_released);
void vpmm_i_set_max_bytes(vpmm_pool_t *pool, size_t max_bytes); /* 0, or at least one page */
void vpmm_i_set_segment_hook(vpmm_pool_t *pool, vpmm_segment_hook_t hook, void *user);

/* Blocks (pool.c, uses.c). ptr is not NULL. */
vpmm_status_t vpmm_i_free(vpmm_pool_t *pool, void *ptr);
vpmm_status_t vpmm_i_record_stream(vpmm_pool_t *pool, void *ptr, vpmm_stream_t stream);

/* Inspection (stats.c, segment.c, check.c, report.c). */
void vpmm_i_get_stats(const vpmm_pool_t *pool, vpmm_stats_t *out);
void vpmm_i_reset_peak_stats(vpmm_pool_t *pool);
vpmm_status_t vpmm_i_pointer_info(const vpmm_pool_t *pool, const void *ptr,
                                  vpmm_region_info_t *out_info);
void vpmm_i_pool_walk(const vpmm_pool_t *pool, vpmm_region_visitor_t visit, void *user);
void vpmm_i_walk_segments(const vpmm_pool_t *pool, vpmm_segment_visitor_t visit, void *user);
vpmm_status_t vpmm_i_pool_dump(const vpmm_pool_t *pool, FILE *out);
void vpmm_i_last_driver_error(const vpmm_pool_t *pool, int *out_code, const char **out_call);
size_t vpmm_i_pool_check(const vpmm_pool_t *pool, FILE *report);
void vpmm_i_oom_report_copy(const vpmm_pool_t *pool, char *buf, size_t len); /* len > 0 */

/* Creation and malloc (pool.c): what the API floor's vpmm_pool_create and vpmm_malloc call. */

/*
 * Creates a pool on an already opened driver (tests pass host or fault-injecting drivers this
 * way). owns_drv: close the driver with the pool (also when creation fails). ghooks: graph/'s
 * table (NULL: no graph support); the API floor's vpmm_a_pool_create_on passes the built-in one.
 */
vpmm_status_t vpmm_i_pool_create_on(const vpmm_options_t *opt, vpmm_driver_t *drv, int owns_drv,
                                    const vpmm_graph_hooks_t *ghooks, vpmm_pool_t **out);

/* vpmm_malloc's shared-pool part (pool.c): the lock held; what `pre` holds afterwards is the
 * caller's to discard, after vpmm_i_malloc_leave. */
vpmm_status_t vpmm_i_malloc_shared(vpmm_pool_t *pool, const char *fn, vpmm_stream_key_t key,
                                   size_t size, size_t rsize, void **out_ptr,
                                   vpmm_precreated_t *pre);

/* The malloc frame, vpmm_i_malloc_enter and _leave (internal.h), inline for the malloc hot path
 * (src/api/malloc.c): the public malloc makes one call into the core, as it did before the API
 * floor routed it. graph/ calls the out-of-line copies (pool.c). */
static inline void vpmm_i_malloc_leave_inline(vpmm_pool_t *pool, const vpmm_malloc_call_t *c,
                                              vpmm_status_t st, size_t size, void **out_ptr)
{
    if (VPMM_UNLIKELY(pool->record != NULL) && st == VPMM_SUCCESS)
        vpmm_i_record_op(pool, 'a', (uintptr_t)*out_ptr, size, c->key);
    if (VPMM_UNLIKELY(st == VPMM_ERROR_OUT_OF_MEMORY)) {
        /* Every way to run out, the shared pool's and a graph pool's, is counted and reported
         * here, once (the graph pool counted its own). */
        pool->c.ooms++;
        vpmm_i_oom_report(pool, size, c->key.handle);
    }
    vpmm_i_unlock(pool);
}

static inline vpmm_status_t vpmm_i_malloc_enter_inline(vpmm_pool_t *pool, const char *fn,
                                                       size_t size, vpmm_stream_t stream,
                                                       void **out_ptr, vpmm_malloc_call_t *c)
{
    vpmm_dres_t dres = VPMM_DRV_OK;
    vpmm_status_t st;
    if (out_ptr == NULL || pool == NULL) {
        vpmm_i_set_error("%s: %s is NULL", fn, pool == NULL ? "pool" : "out_ptr");
        if (out_ptr != NULL)
            *out_ptr = NULL;
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    *out_ptr = NULL;
    if (size == 0) {
        vpmm_i_set_error("%s: size is 0", fn);
        return VPMM_ERROR_INVALID_SIZE;
    }
    c->rsize = vpmm_round_up_checked(size, VPMM_ALIGNMENT);
    if (c->rsize == 0 || c->rsize > pool->opt.va_size) {
        vpmm_i_set_error("%s: %zu bytes exceed the VA chunk size (%zu)", fn, size,
                         pool->opt.va_size);
        return VPMM_ERROR_SIZE_TOO_LARGE;
    }
    /* The legacy default stream is never captured (driver.h rule 6): no query on its hot path.
     * Other streams are asked before the lock is taken: the query needs no pool state. The key's
     * handle is canonical: stream 0 of a per-thread program is this thread's per-thread stream,
     * which can be captured. */
    c->key = vpmm_i_stream_key(pool, stream);
    c->cap = VPMM_CAPTURE_NONE;
    c->capture_id = 0;
    if (!vpmm_i_stream_is_legacy(c->key.handle))
        dres = pool->drv->capture_info(pool->drv, c->key.handle, &c->cap, &c->capture_id, NULL);
    vpmm_i_lock(pool);
    st = vpmm_i_drv_status(pool, dres);
    if (st != VPMM_SUCCESS)
        vpmm_i_malloc_leave_inline(pool, c, st, size, out_ptr); /* counted as any failed malloc */
    return st;
}

#endif /* VPMM_ENTRY_H */
