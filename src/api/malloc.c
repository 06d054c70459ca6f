/*
 * malloc.c — a block's entry points: vpmm_malloc, vpmm_free and vpmm_record_stream.
 *
 * vpmm_malloc: the API floor decides who serves an allocation and calls down. A stream
 * being captured into a CUDA graph is served by its capture's graph pool (graph/, reached through
 * the pool's graph hook table: this floor never names graph/), never the shared pool; any other
 * by the shared pool (the core: src/core/pool.c, vpmm_i_malloc_shared).
 * The frame around both (validation, the capture query, the lock, the trace line, the
 * out-of-memory report) is the core's, inline (vpmm_i_malloc_enter/_leave_inline in entry.h), so
 * the hot path makes one call into the core. Thread-safe: the pool lock is held from enter to
 * leave.
 */
#include "api.h"

vpmm_status_t vpmm_malloc(vpmm_pool_t *pool, size_t size, vpmm_stream_t stream, void **out_ptr)
{
    vpmm_precreated_t pre = { NULL, 0, 0, 0 };
    vpmm_malloc_call_t c;
    vpmm_status_t st;

    VPMM_CHECK(vpmm_i_malloc_enter_inline(pool, "vpmm_malloc", size, stream, out_ptr, &c));
    if (VPMM_LIKELY(c.cap == VPMM_CAPTURE_NONE)) {
        st = vpmm_i_malloc_shared(pool, "vpmm_malloc", c.key, size, c.rsize, out_ptr, &pre);
    } else if (pool->ghooks != NULL) {
        st = pool->ghooks->capture_malloc(pool, c.key, c.capture_id, size, out_ptr);
    } else {
        vpmm_i_set_error("vpmm_malloc: the stream is being captured, and this vpmm was built "
                         "without graph support (VPMM_WITH_GRAPHS=OFF)");
        st = VPMM_ERROR_NOT_SUPPORTED;
    }
    vpmm_i_malloc_leave_inline(pool, &c, st, size, out_ptr);
    if (VPMM_UNLIKELY(pre.h != NULL))
        vpmm_i_precreated_discard(pool->drv, &pre); /* the handles the final plan did not use */
    return st;
}

/* The core's half (src/core/pool.c) finds the block with one probe: the free's hot path is that
 * call and the lock it takes. */
vpmm_status_t vpmm_free(vpmm_pool_t *pool, void *ptr)
{
    if (VPMM_UNLIKELY(pool == NULL))
        return vpmm_a_null("vpmm_free", "pool");
    if (ptr == NULL)
        return VPMM_SUCCESS;
    return vpmm_i_free(pool, ptr);
}

vpmm_status_t vpmm_record_stream(vpmm_pool_t *pool, void *ptr, vpmm_stream_t stream)
{
    if (pool == NULL || ptr == NULL) {
        vpmm_i_set_error("vpmm_record_stream: %s is NULL", pool == NULL ? "pool" : "ptr");
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    return vpmm_i_record_stream(pool, ptr, stream);
}
