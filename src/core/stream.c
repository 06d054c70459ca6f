/*
 * stream.c — tracked streams and their completion markers.
 *
 * vpmm never records an event per free. A free only tags its region with the stream's marker
 * count `recorded`; the marker itself (an event) is recorded later, on the slow path, when another
 * stream wants to know whether that memory is done with (phase 1b/1c/2) or when a zombie needs a
 * guard. One event then covers every free since the previous marker. Markers complete in order on
 * their stream, so polling stops at the first one not ready; completed pending regions move to the
 * ready tree, where every stream may take them without waiting.
 *
 * Markers are never recorded on a stream that is being captured: there, cuEventRecord makes a
 * graph node, and querying such an event would invalidate the capture.
 *
 * Identity (internal.h, vpmm_stream_key_t). VPMM_STREAM_PER_THREAD names the calling thread's
 * own stream, so a record is keyed by handle *and* owner thread, and only the owner may record
 * a marker on it by handle: from another thread the same value is another stream. A marker that
 * another thread needs is recorded on the legacy stream instead: the legacy stream waits for the
 * work enqueued before it on every blocking stream, per-thread streams are blocking, so that
 * event completes only after the per-thread stream's earlier work — a later point, never an
 * earlier one. Its price: while it is pending, later work of every blocking stream waits for it
 * (CUDA's implicit synchronisation), so it is recorded only on demand (a malloc that wants that
 * memory, vpmm_trim: vpmm_i_stream_mark_foreign), never by the blanket marking of
 * stream_poll_all. And no legacy-stream work at all — neither the substitute nor the legacy
 * stream's own markers or waits — while a capture is in progress: legacy work that depends on a
 * capturing blocking stream invalidates the capture (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT); that
 * memory then stays pending until the owner thread marks it or the captures end.
 *
 * Devices. A stream may belong to another device than the pool's (a peer's stream that uses the
 * pool's memory). An event is recorded only on a stream of its own device (driver.h rule 9), so
 * the markers of such a stream are events made on its device: asked of the driver once, at the
 * stream's first marker (s->device), made for it and destroyed when they complete, never parked
 * among the pool's idle events, which are the pool's device's. Waits and queries work across
 * devices. The special handles name the pool's device's streams.
 *
 * Called under the pool lock. Invariant I8 (pool.h) is checked in check.c.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "arena.h"
#include "cache.h"
#include "pool.h"
#include "region.h"
#include "stream.h"

uint64_t vpmm_i_thread_token(void)
{
    static atomic_uint_fast64_t next = 1;
    static _Thread_local uint64_t token;
    if (VPMM_UNLIKELY(token == 0))
        token = atomic_fetch_add_explicit(&next, 1, memory_order_relaxed);
    return token;
}

vpmm_stream_key_t vpmm_i_stream_key(const vpmm_pool_t *p, vpmm_stream_t handle)
{
    vpmm_stream_key_t k = { handle, 0 };
    if (handle == NULL && p->opt.per_thread_default)
        k.handle = VPMM_STREAM_PER_THREAD; /* what 0 means to the program's kernels */
    if (k.handle == VPMM_STREAM_PER_THREAD)
        k.owner = vpmm_i_thread_token();
    return k;
}

vpmm_stream_key_t vpmm_i_stream_key_of(const vpmm_stream_rec_t *s)
{
    return (vpmm_stream_key_t){ s->handle, s->owner };
}

vpmm_stream_rec_t *vpmm_i_stream_get(vpmm_pool_t *p, vpmm_stream_key_t key)
{
    const vpmm_stream_t handle = key.handle;
    vpmm_stream_rec_t *s = p->last_stream;
    if (VPMM_LIKELY(s != NULL && s->handle == handle && s->owner == key.owner))
        return s;
    for (s = p->streams; s; s = s->next) {
        if (s->handle == handle && s->owner == key.owner) {
            p->last_stream = s;
            return s;
        }
    }
    s = calloc(1, sizeof *s);
    if (s == NULL) {
        vpmm_i_set_error("out of host memory for stream bookkeeping");
        return NULL;
    }
    if (vpmm_hmap_init(&s->cache, 16) != 0) {
        free(s);
        vpmm_i_set_error("out of host memory for stream bookkeeping");
        return NULL;
    }
    s->handle = handle;
    s->owner = key.owner;
    s->device = VPMM_STREAM_DEVICE_UNKNOWN;
    vpmm_rb_init(&s->free_tree);
    s->next = p->streams;
    p->streams = s;
    p->stream_count++;
    p->last_stream = s;
    return s;
}

/* Destroys an event, with a second try: a transient failure must not leak it. */
static vpmm_status_t event_destroy(vpmm_pool_t *p, vpmm_drv_event_t ev)
{
    vpmm_dres_t r = p->drv->event_destroy(p->drv, ev);
    if (r != VPMM_DRV_OK)
        r = p->drv->event_destroy(p->drv, ev);
    return vpmm_i_drv_status(p, r);
}

vpmm_status_t vpmm_i_event_get(vpmm_pool_t *p, vpmm_drv_event_t *out)
{
    if (p->idle_count > 0) {
        *out = p->idle_events[--p->idle_count];
        return VPMM_SUCCESS;
    }
    return vpmm_i_drv_status(p, p->drv->event_create(p->drv, NULL, out));
}

void vpmm_i_event_put(vpmm_pool_t *p, vpmm_drv_event_t ev)
{
    if (VPMM_GROW(p->idle_events, p->idle_cap, p->idle_count + 1, 16) != 0) {
        /* Keeping it is an optimisation only: without room, give the event back. */
        event_destroy(p, ev);
        return;
    }
    p->idle_events[p->idle_count++] = ev;
}

/* Room for one more in-flight marker, keeping ring[i % cap] addressing. */
static vpmm_status_t ring_grow(vpmm_stream_rec_t *s)
{
    size_t cap = s->ring_cap ? s->ring_cap * 2 : 4;
    vpmm_drv_event_t *ring = malloc(cap * sizeof *ring);
    if (ring == NULL) {
        vpmm_i_set_error("out of host memory for stream markers");
        return VPMM_ERROR_HOST_OUT_OF_MEMORY;
    }
    for (uint64_t i = s->completed; s->ring_cap != 0 && i < s->recorded; i++)
        ring[i % cap] = s->ring[i % s->ring_cap]; /* none in flight before the first ring */
    free(s->ring);
    s->ring = ring;
    s->ring_cap = cap;
    return VPMM_SUCCESS;
}

/* Whether markers recorded on `at` for s must be events of another device (see "Devices"): asks
 * the driver the first time. */
static vpmm_status_t marker_foreign(vpmm_pool_t *p, vpmm_stream_rec_t *s, vpmm_stream_t at,
                                    int *out)
{
    *out = 0;
    if (at != s->handle || vpmm_i_stream_is_legacy(at) || at == VPMM_STREAM_PER_THREAD)
        return VPMM_SUCCESS; /* the special handles name the pool's device's streams */
    if (s->device == VPMM_STREAM_DEVICE_UNKNOWN)
        VPMM_CHECK(vpmm_i_drv_status(p, p->drv->stream_device(p->drv, at, &s->device)));
    *out = s->device != p->drv->device;
    return VPMM_SUCCESS;
}

/* Gives back the event of a completed (or never recorded) marker of s. */
static void marker_put(vpmm_pool_t *p, const vpmm_stream_rec_t *s, vpmm_drv_event_t ev)
{
    if (s->device != VPMM_STREAM_DEVICE_UNKNOWN && s->device != p->drv->device)
        (void)event_destroy(p, ev); /* another device's: not for the pool's idle list */
    else
        vpmm_i_event_put(p, ev);
}

vpmm_drv_event_t vpmm_i_stream_marker(const vpmm_stream_rec_t *s, uint64_t seq)
{
    return s->ring[seq % s->ring_cap];
}

int vpmm_i_stream_may_wait(const vpmm_pool_t *p, const vpmm_stream_rec_t *s)
{
    return !(vpmm_i_stream_is_legacy(s->handle) && p->captures > 0);
}

/* Where a marker for s is recorded from this thread: s itself, or the legacy stream in its
 * place; VPMM_ERROR_STREAM_CAPTURING when neither may take one now. Legacy-stream work (the
 * legacy stream's own marker, or the substitute) is never recorded while a capture is in
 * progress: it would depend on a capturing blocking stream, which invalidates that capture. */
static vpmm_status_t marker_stream(vpmm_pool_t *p, const vpmm_stream_rec_t *s, vpmm_stream_t *out)
{
    vpmm_capture_status_t cap;
    uint64_t capture_id;
    if (!vpmm_i_stream_here(s) || vpmm_i_stream_is_legacy(s->handle)) {
        if (p->captures > 0)
            return VPMM_ERROR_STREAM_CAPTURING;
        *out = vpmm_i_stream_here(s) ? s->handle : VPMM_STREAM_LEGACY;
        return VPMM_SUCCESS;
    }
    VPMM_CHECK(
        vpmm_i_drv_status(p, p->drv->capture_info(p->drv, s->handle, &cap, &capture_id, NULL)));
    if (cap != VPMM_CAPTURE_NONE)
        return VPMM_ERROR_STREAM_CAPTURING;
    *out = s->handle;
    return VPMM_SUCCESS;
}

vpmm_status_t vpmm_i_stream_can_mark(vpmm_pool_t *p, const vpmm_stream_rec_t *s)
{
    vpmm_stream_t at;
    return marker_stream(p, s, &at);
}

int vpmm_i_stream_markable(vpmm_pool_t *p, const vpmm_stream_rec_t *s)
{
    return vpmm_i_stream_can_mark(p, s) == VPMM_SUCCESS;
}

vpmm_status_t vpmm_i_stream_mark(vpmm_pool_t *p, vpmm_stream_rec_t *s, uint64_t seq)
{
    vpmm_stream_t at;
    vpmm_drv_event_t ev;
    vpmm_status_t st;
    int foreign;

    if (seq < s->recorded)
        return VPMM_SUCCESS;
    if (s->recorded - s->completed == s->ring_cap)
        VPMM_CHECK(ring_grow(s));
    VPMM_CHECK(marker_stream(p, s, &at));
    VPMM_CHECK(marker_foreign(p, s, at, &foreign));
    if (foreign)
        VPMM_CHECK(vpmm_i_drv_status(p, p->drv->event_create(p->drv, at, &ev)));
    else
        VPMM_CHECK(vpmm_i_event_get(p, &ev));
    st = vpmm_i_drv_status(p, p->drv->event_record(p->drv, ev, at));
    if (st != VPMM_SUCCESS) {
        marker_put(p, s, ev);
        return st;
    }
    s->ring[s->recorded % s->ring_cap] = ev;
    s->recorded++;
    s->dirty_regions = 0; /* every pending region now has its marker */
    return VPMM_SUCCESS;
}

void vpmm_i_stream_poll(vpmm_pool_t *p, vpmm_stream_rec_t *s)
{
    while (s->completed < s->recorded) {
        vpmm_drv_event_t ev = s->ring[s->completed % s->ring_cap];
        vpmm_dres_t r = p->drv->event_query(p->drv, ev);
        if (r == VPMM_DRV_NOT_READY)
            break;
        if (r != VPMM_DRV_OK) {
            /* Not knowing means not done: the memory just stays pending. */
            vpmm_i_drv_status(p, r);
            break;
        }
        s->completed++;
        marker_put(p, s, ev);
    }
    while (s->pend_head && s->pend_head->seq < s->completed) {
        vpmm_region_t *r = s->pend_head;
        vpmm_i_index_del(p, r);
        r->ready = 1;
        r->stream = NULL;
        r->seq = 0;
        vpmm_i_index_add(p, r);
        vpmm_i_region_coalesce(p, r);
    }
}

vpmm_status_t vpmm_i_stream_free(vpmm_pool_t *p, vpmm_stream_rec_t *s)
{
    vpmm_status_t first = VPMM_SUCCESS;
    for (uint64_t i = s->completed; i < s->recorded; i++) {
        vpmm_status_t st = event_destroy(p, s->ring[i % s->ring_cap]);
        if (first == VPMM_SUCCESS)
            first = st;
    }
    vpmm_i_arena_forget_stream(p, s);
    free(s->ring);
    vpmm_hmap_fini(&s->cache);
    free(s);
    return first;
}

void vpmm_i_stream_mark_foreign(vpmm_pool_t *p)
{
    if (p->captures > 0)
        return; /* no legacy-stream work now (see "Identity") */
    vpmm_i_cache_flush_all(p);
    for (vpmm_stream_rec_t *s = p->streams; s; s = s->next)
        if (s->dirty_regions > 0 && !vpmm_i_stream_here(s))
            (void)vpmm_i_stream_mark(p, s, s->recorded);
}

vpmm_status_t vpmm_i_stream_retire(vpmm_pool_t *p, vpmm_stream_rec_t *s)
{
    vpmm_stream_rec_t **link;
    /* Refused before anything changes when its final marker cannot be recorded now. */
    if (s->refs > 0)
        VPMM_CHECK(vpmm_i_stream_can_mark(p, s));
    if (s->cache.count != 0)
        vpmm_i_cache_flush(p, s); /* a retired stream keeps no cache */
    if (s->refs > 0) {
        /* Its final marker covers everything it did; later frees of its allocations use it. */
        VPMM_CHECK(vpmm_i_stream_mark(p, s, s->recorded));
    }
    for (link = &p->streams; *link != s; link = &(*link)->next)
        ;
    *link = s->next;
    p->stream_count--;
    if (p->last_stream == s)
        p->last_stream = NULL;
    if (s->refs == 0)
        return vpmm_i_stream_free(p, s); /* its in-flight markers, if any, are destroyed */
    s->retired = 1;
    s->next = p->retired;
    p->retired = s;
    return VPMM_SUCCESS;
}

vpmm_status_t vpmm_i_stream_fini_all(vpmm_pool_t *p)
{
    vpmm_stream_rec_t *lists[2] = { p->streams, p->retired };
    vpmm_status_t first = VPMM_SUCCESS, st;
    for (int l = 0; l < 2; l++) {
        vpmm_stream_rec_t *s = lists[l];
        while (s) {
            vpmm_stream_rec_t *next = s->next;
            st = vpmm_i_stream_free(p, s);
            first = first == VPMM_SUCCESS ? st : first;
            s = next;
        }
    }
    p->streams = p->retired = p->last_stream = NULL;
    p->stream_count = 0;
    for (size_t i = 0; i < p->idle_count; i++) {
        st = event_destroy(p, p->idle_events[i]);
        first = first == VPMM_SUCCESS ? st : first;
    }
    free(p->idle_events);
    p->idle_events = NULL;
    p->idle_count = p->idle_cap = 0;
    return first;
}
