/*
 * stream.h — application streams and their markers (stream.c; the sweep of every stream:
 * stream_sweep.c).
 * The structs and their invariants are pool.h's; core.h includes every header of the core.
 */
#ifndef VPMM_STREAM_H
#define VPMM_STREAM_H

#include "pool.h"

/* Makes sure marker `seq` of s is recorded (recording it now if it is the next one): on s, or on
 * the legacy stream when s is another thread's per-thread stream (stream.c, "Identity"). Refuses
 * (VPMM_ERROR_STREAM_CAPTURING) on a stream being captured, whose marker would be a graph node,
 * and the legacy substitute while any capture is in progress. */
vpmm_status_t vpmm_i_stream_mark(vpmm_pool_t *p, vpmm_stream_rec_t *s, uint64_t seq);
/* Whether vpmm_i_stream_mark could record a marker for s now (one capture query at most):
 * VPMM_SUCCESS, VPMM_ERROR_STREAM_CAPTURING, or the failed query's status; and as a boolean. */
vpmm_status_t vpmm_i_stream_can_mark(vpmm_pool_t *p, const vpmm_stream_rec_t *s);
int vpmm_i_stream_markable(vpmm_pool_t *p, const vpmm_stream_rec_t *s);
/* Whether a GPU-side wait may be enqueued on s now: not on the legacy stream while a capture is
 * in progress (legacy work would invalidate it). */
int vpmm_i_stream_may_wait(const vpmm_pool_t *p, const vpmm_stream_rec_t *s);
/* Flushes the caches and records a marker (the legacy-stream substitute) for every other
 * thread's per-thread stream with unmarked frees, unless a capture is in progress: for a caller
 * that wants every free page back (vpmm_trim). */
void vpmm_i_stream_mark_foreign(vpmm_pool_t *p);

/* The event of an in-flight marker (completed <= seq < recorded). */
vpmm_drv_event_t vpmm_i_stream_marker(const vpmm_stream_rec_t *s, uint64_t seq);

/* Queries s's in-flight markers in order and promotes its completed pending regions to ready. */
void vpmm_i_stream_poll(vpmm_pool_t *p, vpmm_stream_rec_t *s);

/* Whether s's stream may be named by its handle here (stream.c, "Identity"). */
static inline int vpmm_i_stream_here(const vpmm_stream_rec_t *s)
{
    return vpmm_i_stream_key_here(vpmm_i_stream_key_of(s));
}

/* Frees record s: destroys its in-flight markers (first failure returned), drops its arenas'
 * side entries. s is on no list any more. */
vpmm_status_t vpmm_i_stream_free(vpmm_pool_t *p, vpmm_stream_rec_t *s);

/* Whether marker seq of s is known complete. */
static inline int vpmm_i_stream_done(const vpmm_stream_rec_t *s, uint64_t seq)
{
    return s->completed > seq;
}

/* Pending-list and reference bookkeeping used by the index (defined in region.c, which keeps
 * them: below stream.c). */
void vpmm_i_stream_pending_add(vpmm_stream_rec_t *s, vpmm_region_t *r);
void vpmm_i_stream_pending_del(vpmm_stream_rec_t *s, vpmm_region_t *r);
void vpmm_i_stream_unref(vpmm_pool_t *p, vpmm_stream_rec_t *s);

/* vpmm_stream_release's work (under the lock). */
vpmm_status_t vpmm_i_stream_retire(vpmm_pool_t *p, vpmm_stream_rec_t *s);

/* Destroys every stream's events and frees all stream records (pool destruction). */
vpmm_status_t vpmm_i_stream_fini_all(vpmm_pool_t *p);

/* An event for a new marker: reused from the idle list or created. */
vpmm_status_t vpmm_i_event_get(vpmm_pool_t *p, vpmm_drv_event_t *out);
void vpmm_i_event_put(vpmm_pool_t *p, vpmm_drv_event_t ev);

#endif /* VPMM_STREAM_H */
