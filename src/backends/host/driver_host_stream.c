/*
 * driver_host_stream.c — the simulated streams, events and capture of the host emulation backend
 * (driver_host.h); driver_host.c owns the node, its views and its lifetime, driver_host_mem.c the
 * memory side, driver_host_graph.c the graphs captures build and the user objects they hold.
 *
 * Streams are bookkeeping only: a stream is a record with counters of enqueued and completed work
 * items and the barriers that stream_wait_event put in its way, on one device of the node; work
 * advances only when a test says so (the vpmm_host_* controls) or on synchronize, and every call
 * that advances it lets driver_host_graph.c free what the completed work kept alive
 * (vpmm_host_i_graph_progress). Events are slot-table ids naming a (stream, sequence) point, or a
 * capture, and belong to a device. Captures follow CUDA's rules for beginning, ending, joining,
 * merging and invalidation; each builds one graph. Also here: the stream-side entry points of the
 * driver table (capture ones included) and the wait log.
 *
 * Handles are resolved through the calling view before any lookup (driver_host.h, "streams"):
 * NULL and 0x1 name the view's device's legacy stream (host_dev.legacy, outside the table), 0x2
 * the calling thread's per-thread stream of that device; any other value is looked up in the
 * node's open-addressing table keyed by vpmm_stream_t. A thread is known by a token from a
 * process-wide counter, kept in a _Thread_local (pthread_self() values are reused after a thread
 * exits; a token never is); a sorted map token -> record per device resolves 0x2, and the record
 * itself sits in the stream table under its own address, like the streams of
 * vpmm_host_stream_create, so that every walk over the table covers it (stream_each adds the
 * legacy streams). The implicit synchronisation between a device's legacy stream and its blocking
 * (per-thread) streams is made of ordinary barriers, added just before the operation that implies
 * them:
 *
 *   enqueued in this order:  a1 a2 (on A)  b1 (on B)  l1 (legacy)  record E (legacy)  a3 (on A)
 *   barriers added:          l1 waits for A@2 and B@1; E covers l1, so A@2 and B@1 too; a3 waits
 *                            for legacy@1 and for whatever legacy's trailing waits wait on
 *
 * Barriers may name streams of other devices (a wait on another device's event): completing a
 * stream completes what it waits for, wherever that is.
 *
 * Thread-safety: every entry of the table, and every stream control, runs under the node's
 * recursive mutex (driver.h rule 7; the entries' wrappers are in driver_host.c).
 * Invariants: I6, I7 and I10 above struct host_drv in driver_host_internal.h, checked with the
 * rest by vpmm_host_check() in driver_host.c (I9, which ties captures to their graphs, in
 * driver_host_graph.c). Failure atomicity (rule 1): each entry point allocates what it needs
 * before its first visible change; event_destroy never allocates. The exceptions are CUDA's:
 * end_capture of an invalidated capture fails (901) and still ends it, and an operation on a
 * legacy stream refused with 906 invalidates the captures it would have depended on.
 */
#include "driver_host_internal.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* ---- streams ------------------------------------------------------------------------------ */

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* Where key lives in the table, or the empty slot where it would go (stream_cap > 0). */
static size_t stream_slot(const host_drv_t *h, vpmm_stream_t key)
{
    size_t mask = h->stream_cap - 1;
    size_t i = (size_t)mix64((uint64_t)(uintptr_t)key) & mask;
    while (h->stream_tab[i] && h->stream_tab[i]->key != key)
        i = (i + 1) & mask;
    return i;
}

static host_stream_t *stream_find(const host_drv_t *h, vpmm_stream_t key)
{
    return h->stream_cap ? h->stream_tab[stream_slot(h, key)] : NULL;
}

host_stream_t *vpmm_host_i_stream_find(const host_drv_t *h, vpmm_stream_t key)
{
    return stream_find(h, key);
}

/* Adds st under st->key, which must be new. Keeps the load factor ≤ 1/2. */
static int stream_insert(host_drv_t *h, host_stream_t *st)
{
    if ((h->n_streams + 1) * 2 > h->stream_cap) {
        size_t old_cap = h->stream_cap, cap = old_cap ? old_cap * 2 : 16;
        host_stream_t **old = h->stream_tab, **tab = calloc(cap, sizeof *tab);
        if (!tab)
            return -1;
        h->stream_tab = tab;
        h->stream_cap = cap;
        for (size_t i = 0; i < old_cap; i++)
            if (old[i])
                tab[stream_slot(h, old[i]->key)] = old[i];
        free(old);
    }
    h->stream_tab[stream_slot(h, st->key)] = st;
    h->n_streams++;
    return 0;
}

/* A new record under key, which must be new, on device dev (NULL when out of host memory). */
static host_stream_t *stream_register(host_drv_t *h, vpmm_stream_t key, int dev)
{
    host_stream_t *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->key = key;
    st->dev = dev;
    if (stream_insert(h, st) != 0) {
        free(st);
        return NULL;
    }
    return st;
}

/*
 * A new record, not yet in the table, whose key is its own address: no live record can share
 * it, and it cannot collide with the small integers tests use as streams. A foreign pointer
 * registered earlier could equal it, so retry while the address is taken (keeping the rejects so
 * malloc moves on). NULL when out of host memory.
 */
static host_stream_t *stream_new_synthetic(const host_drv_t *h, int dev)
{
    host_stream_t *reject[8];
    size_t n_reject = 0;
    host_stream_t *st = NULL;
    while (n_reject < 8) {
        st = calloc(1, sizeof *st);
        if (!st || !stream_find(h, (vpmm_stream_t)(void *)st))
            break;
        reject[n_reject++] = st;
        st = NULL;
    }
    while (n_reject)
        free(reject[--n_reject]);
    if (st) {
        st->key = (vpmm_stream_t)(void *)st;
        st->dev = dev;
    }
    return st;
}

/* Calls fn on every stream of device dev (every stream of the node when dev < 0): the table's,
 * then the legacy streams, which live outside it. */
static void stream_each(host_drv_t *h, int dev, void (*fn)(host_stream_t *st))
{
    for (size_t i = 0; i < h->stream_cap; i++)
        if (h->stream_tab[i] && (dev < 0 || h->stream_tab[i]->dev == dev))
            fn(h->stream_tab[i]);
    for (int k = 0; k < h->ndev; k++)
        if (h->devs[k].legacy && (dev < 0 || k == dev))
            fn(h->devs[k].legacy);
}

/* ---- handle resolution -------------------------------------------------------------------- */

static _Atomic uint64_t next_token = 1;
static _Thread_local uint64_t my_token; /* 0 until this thread first needs one */

/* The calling thread's token, drawn on first use; never 0, never reused. */
static uint64_t thread_token(void)
{
    if (my_token == 0)
        my_token = atomic_fetch_add(&next_token, 1);
    return my_token;
}

uint64_t vpmm_host_i_next_token(void)
{
    return atomic_load(&next_token);
}

static int names_per_thread(const host_view_t *v, vpmm_stream_t handle)
{
    return handle == HOST_STREAM_PER_THREAD || (handle == NULL && v->null_per_thread);
}

static int names_legacy(const host_view_t *v, vpmm_stream_t handle)
{
    return handle == HOST_STREAM_LEGACY || (handle == NULL && !v->null_per_thread);
}

/* Index of the first ptds entry of dv whose token is ≥ token. */
static size_t ptds_lower(const host_dev_t *dv, uint64_t token)
{
    size_t lo = 0, hi = dv->n_ptds;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (dv->ptds[mid].token < token)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The calling thread's per-thread stream of device dev, or NULL if it has none yet. */
static host_stream_t *per_thread_find(const host_drv_t *h, int dev)
{
    const host_dev_t *dv = &h->devs[dev];
    uint64_t token = thread_token();
    size_t i = ptds_lower(dv, token);
    return i < dv->n_ptds && dv->ptds[i].token == token ? dv->ptds[i].stream : NULL;
}

/* The calling thread's per-thread stream of device dev, created (blocking, no work) if it has none
 * yet. */
static host_stream_t *per_thread_get(host_drv_t *h, int dev)
{
    host_dev_t *dv = &h->devs[dev];
    host_stream_t *st = per_thread_find(h, dev);
    if (st)
        return st;
    uint64_t token = thread_token();
    size_t i = ptds_lower(dv, token);
    if (RESERVE(dv->ptds, dv->ptds_cap, dv->n_ptds + 1))
        return NULL;
    st = stream_new_synthetic(h, dev);
    if (!st)
        return NULL;
    st->thread = token;
    st->blocking = 1;
    if (stream_insert(h, st) != 0) {
        free(st);
        return NULL;
    }
    memmove(&dv->ptds[i + 1], &dv->ptds[i], (dv->n_ptds - i) * sizeof *dv->ptds);
    dv->ptds[i] = (host_ptds_t){ token, st };
    dv->n_ptds++;
    return st;
}

/* The stream a handle names for the calling thread through v, or NULL if it has no record yet. */
static host_stream_t *stream_lookup(const host_view_t *v, vpmm_stream_t handle)
{
    const host_drv_t *h = v->node;
    if (names_per_thread(v, handle))
        return per_thread_find(h, v->base.device);
    if (names_legacy(v, handle))
        return h->devs[v->base.device].legacy;
    return stream_find(h, handle);
}

host_stream_t *vpmm_host_i_stream_get(host_view_t *v, vpmm_stream_t handle)
{
    host_drv_t *h = v->node;
    int dev = v->base.device;
    host_stream_t *st = stream_lookup(v, handle);
    if (st)
        return st;
    if (names_per_thread(v, handle))
        return per_thread_get(h, dev);
    if (!names_legacy(v, handle))
        return stream_register(h, handle, dev);
    st = calloc(1, sizeof *st); /* the device's legacy stream: outside the table (I10) */
    if (st) {
        st->key = HOST_STREAM_LEGACY;
        st->dev = dev;
        h->devs[dev].legacy = st;
    }
    return st;
}

/* The device of the stream a handle names through v, without registering anything: a special
 * handle's or an unknown value's is v's (where first use will register it). */
static int stream_device_of(const host_view_t *v, vpmm_stream_t handle)
{
    const host_stream_t *st = stream_lookup(v, handle);
    return st ? st->dev : v->base.device;
}

/* The same, registering an unknown value on v's device (its first use); a special handle names
 * v's device at no cost. -1 when out of host memory. */
static int stream_device_get(host_view_t *v, vpmm_stream_t handle)
{
    if (names_per_thread(v, handle) || names_legacy(v, handle))
        return v->base.device;
    const host_stream_t *st = vpmm_host_i_stream_get(v, handle);
    return st ? st->dev : -1;
}

/* Reclaims the consumed prefix of the barrier array. */
static void stream_compact(host_stream_t *st)
{
    if (st->bar_head == st->bar_len) {
        st->bar_head = st->bar_len = 0;
    } else if (st->bar_head > st->bar_cap / 2) {
        memmove(st->bar, st->bar + st->bar_head, (st->bar_len - st->bar_head) * sizeof *st->bar);
        st->bar_len -= st->bar_head;
        st->bar_head = 0;
    }
}

/*
 * Completes st up to item `target`, first completing what its barriers wait for. A barrier only
 * names work enqueued before the barrier existed, so following barriers always goes back in time
 * and the recursion ends; items before each barrier are marked done before recursing so that a
 * path leading back to st finds them complete. `busy` is a belt-and-braces cycle guard.
 */
static void stream_complete_to(host_stream_t *st, uint64_t target)
{
    if (target > st->enqueued)
        target = st->enqueued;
    if (st->completed >= target || st->busy)
        return;
    st->busy = 1;
    while (st->bar_head < st->bar_len && st->bar[st->bar_head].at < target) {
        host_barrier_t b = st->bar[st->bar_head];
        if (st->completed < b.at)
            st->completed = b.at;
        stream_complete_to(b.signaller, b.seq);
        st->bar_head++;
    }
    st->completed = target;
    stream_compact(st);
    st->busy = 0;
}

/* Finishes everything enqueued on st: its items, and what the waits after its last item wait on
 * (they are part of the stream too). */
static void stream_finish(host_stream_t *st)
{
    stream_complete_to(st, st->enqueued);
    for (size_t i = st->bar_head; i < st->bar_len; i++)
        stream_complete_to(st->bar[i].signaller, st->bar[i].seq);
}

/* Finishes every stream of device dev (of the node when dev < 0), and what they wait on. */
static void complete_everything(host_drv_t *h, int dev)
{
    stream_each(h, dev, stream_finish);
}

/* ---- barriers ---------------------------------------------------------------------------- */

/* The number of st's trailing barriers: those at st->enqueued, after its last work item. */
static size_t trailing(const host_stream_t *st)
{
    size_t n = 0;
    for (size_t i = st->bar_len; i > st->bar_head && st->bar[i - 1].at == st->enqueued; i--)
        n++;
    return n;
}

/* Appends a barrier at st->enqueued on (signaller, seq) unless it is satisfied; merges it with a
 * trailing one on the same signaller instead, so repeated waits (and the implicit ones of the
 * legacy stream) at one position keep one barrier per signaller. Room was reserved by the
 * caller. */
static void barrier_add(host_stream_t *st, host_stream_t *signaller, uint64_t seq)
{
    if (signaller == st || signaller->completed >= seq)
        return;
    for (size_t i = st->bar_len; i > st->bar_head && st->bar[i - 1].at == st->enqueued; i--) {
        if (st->bar[i - 1].signaller == signaller) {
            st->bar[i - 1].seq = VPMM_MAX(st->bar[i - 1].seq, seq);
            return;
        }
    }
    st->bar[st->bar_len++] = (host_barrier_t){ st->enqueued, signaller, seq };
}

/* ---- implicit synchronisation with the legacy stream -------------------------------------- */

/* Barriers waiter needs to wait for everything enqueued on signaller so far (an upper bound). */
static size_t point_room(const host_stream_t *signaller)
{
    return 1 + trailing(signaller);
}

/* waiter waits for everything enqueued on signaller so far: its last item and the waits after it,
 * as an event recorded there would (waiter ≠ signaller; room reserved by the caller). */
static void wait_point(host_stream_t *waiter, host_stream_t *signaller)
{
    size_t n = trailing(signaller);
    barrier_add(waiter, signaller, signaller->enqueued);
    for (size_t i = signaller->bar_len - n; i < signaller->bar_len; i++)
        barrier_add(waiter, signaller->bar[i].signaller, signaller->bar[i].seq);
}

/* Implicit synchronisation is per device: a legacy stream and the blocking streams of its own
 * device (its per-thread streams). */
int vpmm_host_i_sync_refused(host_drv_t *h, const host_stream_t *st)
{
    const host_dev_t *dv = &h->devs[st->dev];
    int refused = 0;
    if (st != dv->legacy)
        return 0;
    for (size_t i = 0; i < dv->n_ptds; i++) {
        host_capture_t *c = dv->ptds[i].stream->capture;
        if (c) {
            c->invalidated = 1; /* as CUDA: the capture would have gained an outside dependency */
            refused = 1;
        }
    }
    return refused;
}

size_t vpmm_host_i_sync_room(const host_drv_t *h, const host_stream_t *st)
{
    const host_dev_t *dv = &h->devs[st->dev];
    size_t n = 0;
    if (st->capture)
        return 0; /* its operations are graph nodes */
    if (st == dv->legacy) {
        for (size_t i = 0; i < dv->n_ptds; i++)
            n += point_room(dv->ptds[i].stream);
    } else if (st->blocking && dv->legacy) {
        n = point_room(dv->legacy);
    }
    return n;
}

void vpmm_host_i_sync_apply(host_drv_t *h, host_stream_t *st)
{
    host_dev_t *dv = &h->devs[st->dev];
    if (st->capture)
        return;
    if (st == dv->legacy) {
        for (size_t i = 0; i < dv->n_ptds; i++)
            wait_point(st, dv->ptds[i].stream);
    } else if (st->blocking && dv->legacy) {
        wait_point(st, dv->legacy);
    }
}

/* ---- captures ----------------------------------------------------------------------------- */

host_capture_t *vpmm_host_i_capture_find(const host_drv_t *h, uint64_t id)
{
    host_capture_t *c = h->captures;
    while (c && c->id != id)
        c = c->next;
    return c;
}

/* ---- entry points: events, streams, capture ----------------------------------------------- */

static host_event_t *event_get(const host_drv_t *h, vpmm_drv_event_t ev)
{
    return vpmm_host_i_slot_get(&h->events, (uint64_t)(uintptr_t)ev);
}

/* Whether a plain (not captured) event's work is complete: its point and the waits before it. */
static int event_done(const host_event_t *ev)
{
    if (ev->stream == NULL)
        return 1; /* never recorded: complete, as in CUDA */
    if (ev->stream->completed < ev->seq)
        return 0;
    for (size_t i = 0; i < ev->ndeps; i++)
        if (ev->deps[i].signaller->completed < ev->deps[i].seq)
            return 0;
    return 1;
}

vpmm_dres_t vpmm_host_i_event_create(vpmm_driver_t *d, vpmm_stream_t on,
                                     vpmm_drv_event_t *out_event)
{
    host_view_t *v = vpmm_host_i_view(d);
    host_drv_t *h = v->node;
    const vpmm_drv_entry_t e = VPMM_DRV_EVENT_CREATE;
    if (!out_event)
        return vpmm_host_i_fail_invalid(v, e);
    /* Rule 9: for the own device's streams, or for on's device. */
    int dev = on == NULL ? v->base.device : stream_device_get(v, on);
    host_event_t *ev = dev >= 0 ? calloc(1, sizeof *ev) : NULL;
    uint64_t id = ev ? vpmm_host_i_slot_put(&h->events, ev) : 0;
    if (id == 0) {
        free(ev);
        return vpmm_host_i_fail(v, e, VPMM_DRV_ERROR, CODE_OUT_OF_MEMORY);
    }
    ev->dev = dev;
    h->counts.events++;
    *out_event = (vpmm_drv_event_t)(uintptr_t)id;
    return VPMM_DRV_OK;
}

vpmm_dres_t vpmm_host_i_event_destroy(vpmm_driver_t *d, vpmm_drv_event_t event)
{
    host_view_t *v = vpmm_host_i_view(d);
    host_drv_t *h = v->node;
    host_event_t *ev = event_get(h, event);
    if (!ev)
        return vpmm_host_i_fail_invalid(v, VPMM_DRV_EVENT_DESTROY);
    vpmm_host_i_slot_drop(&h->events, (uint64_t)(uintptr_t)event);
    free(ev->deps);
    free(ev);
    h->counts.events--;
    return VPMM_DRV_OK;
}

vpmm_dres_t vpmm_host_i_event_record(vpmm_driver_t *d, vpmm_drv_event_t event, vpmm_stream_t stream)
{
    host_view_t *v = vpmm_host_i_view(d);
    host_drv_t *h = v->node;
    const vpmm_drv_entry_t e = VPMM_DRV_EVENT_RECORD;
    host_event_t *ev = event_get(h, event);
    if (!ev)
        return vpmm_host_i_fail_invalid(v, e);
    /* Rule 9: only on a stream of the event's device (CUDA: CUDA_ERROR_INVALID_HANDLE). */
    if (stream_device_of(v, stream) != ev->dev)
        return vpmm_host_i_fail(v, e, VPMM_DRV_INVALID, CODE_INVALID_HANDLE);
    host_stream_t *st = vpmm_host_i_stream_get(v, stream);
    if (!st)
        return vpmm_host_i_fail(v, e, VPMM_DRV_ERROR, CODE_OUT_OF_MEMORY);
    if (vpmm_host_i_sync_refused(h, st))
        return vpmm_host_i_fail(v, e, VPMM_DRV_ERROR, CODE_CAPTURE_IMPLICIT);
    /* The implicit barriers become trailing ones, so the deps may hold them too. */
    size_t nsync = vpmm_host_i_sync_room(h, st);
    size_t ndeps = st->capture ? 0 : trailing(st) + nsync;
    if (RESERVE(ev->deps, ev->deps_cap, ndeps) ||
        RESERVE(st->bar, st->bar_cap, st->bar_len + nsync))
        return vpmm_host_i_fail(v, e, VPMM_DRV_ERROR, CODE_OUT_OF_MEMORY);
    if (st->capture && st->capture->invalidated)
        return vpmm_host_i_fail(v, e, VPMM_DRV_ERROR, CODE_CAPTURE_INVALIDATED);
    ev->stream = st;
    ev->ndeps = 0;
    if (st->capture) {
        /* In a capture the record becomes a graph node: the event no longer tracks real work. */
        ev->seq = 0;
        ev->capture_id = st->capture->id;
    } else {
        vpmm_host_i_sync_apply(h, st);
        ev->seq = st->enqueued;
        ev->capture_id = 0;
        for (size_t i = st->bar_len - trailing(st); i < st->bar_len; i++)
            if (st->bar[i].signaller->completed < st->bar[i].seq)
                ev->deps[ev->ndeps++] = st->bar[i];
    }
    return VPMM_DRV_OK;
}

vpmm_dres_t vpmm_host_i_event_query(vpmm_driver_t *d, vpmm_drv_event_t event)
{
    host_view_t *v = vpmm_host_i_view(d);
    host_drv_t *h = v->node;
    const vpmm_drv_entry_t e = VPMM_DRV_EVENT_QUERY;
    const host_event_t *ev = event_get(h, event);
    if (!ev)
        return vpmm_host_i_fail_invalid(v, e);
    if (ev->capture_id) {
        /* CUDA: cudaErrorCapturedEvent, and the capture it belongs to is invalidated. After the
         * capture ended the event still stands for graph work, not real work: keep failing. */
        host_capture_t *c = vpmm_host_i_capture_find(h, ev->capture_id);
        if (c)
            c->invalidated = 1;
        return vpmm_host_i_fail(v, e, VPMM_DRV_ERROR, CODE_CAPTURED_EVENT);
    }
    if (!event_done(ev))
        return vpmm_host_i_fail(v, e, VPMM_DRV_NOT_READY, CODE_NOT_READY);
    return VPMM_DRV_OK; /* done, or never recorded (as CUDA) */
}

/*
 * Later work on stream waits for event. Outside capture this is a barrier; with a captured event
 * it makes the stream join that capture (CUDA's cross-stream capture). A capturing stream may only
 * wait on events captured in its own capture (a plain event would need cudaEventWaitExternal;
 * another capture's event would merge two graphs): both fail and invalidate, as in CUDA.
 */
vpmm_dres_t vpmm_host_i_stream_wait_event(vpmm_driver_t *d, vpmm_stream_t stream,
                                          vpmm_drv_event_t event)
{
    host_view_t *v = vpmm_host_i_view(d);
    host_drv_t *h = v->node;
    const vpmm_drv_entry_t e = VPMM_DRV_STREAM_WAIT_EVENT;
    const host_event_t *ev = event_get(h, event);
    if (!ev)
        return vpmm_host_i_fail_invalid(v, e);
    host_stream_t *st = vpmm_host_i_stream_get(v, stream);
    if (!st)
        return vpmm_host_i_fail(v, e, VPMM_DRV_ERROR, CODE_OUT_OF_MEMORY);
    if (vpmm_host_i_sync_refused(h, st))
        return vpmm_host_i_fail(v, e, VPMM_DRV_ERROR, CODE_CAPTURE_IMPLICIT);
    if (RESERVE(h->waits, h->waits_cap, h->n_waits + 1) ||
        RESERVE(st->bar, st->bar_cap, st->bar_len + 1 + ev->ndeps + vpmm_host_i_sync_room(h, st)))
        return vpmm_host_i_fail(v, e, VPMM_DRV_ERROR, CODE_OUT_OF_MEMORY);
    host_capture_t *mine = st->capture;
    if (mine && mine->invalidated)
        return vpmm_host_i_fail(v, e, VPMM_DRV_ERROR, CODE_CAPTURE_INVALIDATED);

    if (ev->capture_id) {
        host_capture_t *theirs = vpmm_host_i_capture_find(h, ev->capture_id);
        if (!theirs)
            return vpmm_host_i_fail(v, e, VPMM_DRV_ERROR,
                                    CODE_CAPTURE_ISOLATION); /* that graph is closed */
        if (theirs->invalidated)
            return vpmm_host_i_fail(v, e, VPMM_DRV_ERROR, CODE_CAPTURE_INVALIDATED);
        if (mine && mine != theirs) {
            mine->invalidated = theirs->invalidated = 1;
            return vpmm_host_i_fail(v, e, VPMM_DRV_ERROR, CODE_CAPTURE_MERGE);
        }
        if (st == h->devs[st->dev].legacy) {
            /* The legacy default stream cannot join a capture (CUDA: implicit dependency). */
            theirs->invalidated = 1;
            return vpmm_host_i_fail(v, e, VPMM_DRV_ERROR, CODE_CAPTURE_IMPLICIT);
        }
        st->capture = theirs; /* joins (or already in) the capture */
    } else if (mine) {
        mine->invalidated = 1;
        return vpmm_host_i_fail(v, e, VPMM_DRV_ERROR, CODE_CAPTURE_ISOLATION);
    } else {
        /* Barriers are appended in `at` order: the implicit ones, one on the event's point, one
         * per wait before it (a wait on a stream's own point is a no-op: its work is ahead in the
         * same stream). */
        vpmm_host_i_sync_apply(h, st);
        if (ev->stream) {
            barrier_add(st, ev->stream, ev->seq);
            for (size_t i = 0; i < ev->ndeps; i++)
                barrier_add(st, ev->deps[i].signaller, ev->deps[i].seq);
        }
    }
    h->waits[h->n_waits++] = (vpmm_host_wait_t){
        .waiter = st->key,
        .signaller = ev->stream ? ev->stream->key : NULL,
        .signal_seq = ev->seq,
        .waiter_device = st->dev,
        .signaller_device = ev->dev,
    };
    return VPMM_DRV_OK;
}

/* out_id and out_graph are optional, as in CUDA. The graph is returned only while the capture is
 * ACTIVE: CUDA returns no valid data but the status for an invalidated one (the id is kept here,
 * as the pool only compares it). */
vpmm_dres_t vpmm_host_i_capture_info(vpmm_driver_t *d, vpmm_stream_t stream,
                                     vpmm_capture_status_t *out_status, uint64_t *out_id,
                                     vpmm_graph_t *out_graph)
{
    host_view_t *v = vpmm_host_i_view(d);
    if (!out_status)
        return vpmm_host_i_fail_invalid(v, VPMM_DRV_CAPTURE_INFO);
    const host_stream_t *st = stream_lookup(v, stream);
    const host_capture_t *c = st ? st->capture : NULL;
    *out_status =
        !c ? VPMM_CAPTURE_NONE : (c->invalidated ? VPMM_CAPTURE_INVALIDATED : VPMM_CAPTURE_ACTIVE);
    if (out_id)
        *out_id = c ? c->id : 0;
    if (out_graph)
        *out_graph = c && !c->invalidated ? vpmm_host_i_graph_handle(c->graph) : NULL;
    return VPMM_DRV_OK;
}

vpmm_dres_t vpmm_host_i_synchronize(vpmm_driver_t *d)
{
    host_view_t *v = vpmm_host_i_view(d);
    host_drv_t *h = v->node;
    if (h->captures) {
        /* cudaDeviceSynchronize during a (global-mode) capture is illegal and invalidates it. */
        for (host_capture_t *c = h->captures; c; c = c->next)
            c->invalidated = 1;
        return vpmm_host_i_fail(v, VPMM_DRV_SYNCHRONIZE, VPMM_DRV_ERROR, CODE_CAPTURE_UNSUPPORTED);
    }
    complete_everything(h, v->base.device); /* cuCtxSynchronize: the context's device */
    h->graph_ops->progress(h);
    return VPMM_DRV_OK;
}

/*
 * Begins a capture originating in stream, with the graph it builds. Everything is allocated
 * before the first visible change (rule 1); out_id may be NULL.
 */
static vpmm_dres_t capture_begin(host_view_t *v, vpmm_stream_t stream, vpmm_capture_mode_t mode,
                                 uint64_t *out_id)
{
    host_drv_t *h = v->node;
    const vpmm_drv_entry_t e = VPMM_DRV_BEGIN_CAPTURE;
    if ((unsigned)mode > (unsigned)VPMM_CAPTURE_MODE_RELAXED)
        return vpmm_host_i_fail_invalid(v, e);
    if (names_legacy(v, stream)) /* CUDA: capture is not supported on the legacy default stream */
        return vpmm_host_i_fail(v, e, VPMM_DRV_NOT_SUPPORTED, CODE_CAPTURE_UNSUPPORTED);
    host_stream_t *st = vpmm_host_i_stream_get(v, stream);
    if (st && st->capture)
        return vpmm_host_i_fail(v, e, VPMM_DRV_ERROR, CODE_ILLEGAL_STATE);
    host_capture_t *c = st ? calloc(1, sizeof *c) : NULL;
    host_graph_t *g = c ? h->graph_ops->create(h, c) : NULL;
    if (!g) {
        free(c);
        return vpmm_host_i_fail(v, e, VPMM_DRV_ERROR, CODE_OUT_OF_MEMORY);
    }
    c->id = h->next_capture_id++;
    c->origin = st;
    c->graph = g;
    c->mode = mode;
    c->thread = pthread_self();
    c->next = h->captures;
    h->captures = c;
    st->capture = c;
    if (out_id)
        *out_id = c->id;
    return VPMM_DRV_OK;
}

/*
 * Ends the capture stream originated; every stream joined to it leaves it. On a clean end *out
 * receives its graph (the caller's now); an invalidated capture ends too but its graph is
 * destroyed (the destructors this owes run before the caller returns: see graph_progress).
 */
static vpmm_dres_t capture_end(host_view_t *v, vpmm_stream_t stream, host_graph_t **out)
{
    host_drv_t *h = v->node;
    const vpmm_drv_entry_t e = VPMM_DRV_END_CAPTURE;
    host_stream_t *st = stream_lookup(v, stream);
    host_capture_t *c = st ? st->capture : NULL;
    if (!c)
        return vpmm_host_i_fail(v, e, VPMM_DRV_ERROR, CODE_ILLEGAL_STATE);
    if (c->origin != st)
        return vpmm_host_i_fail(v, e, VPMM_DRV_ERROR, CODE_CAPTURE_UNMATCHED);
    if (c->mode != VPMM_CAPTURE_MODE_RELAXED && !pthread_equal(c->thread, pthread_self()))
        return vpmm_host_i_fail(v, e, VPMM_DRV_ERROR, CODE_CAPTURE_WRONG_THREAD);
    for (size_t i = 0; i < h->stream_cap; i++)
        if (h->stream_tab[i] && h->stream_tab[i]->capture == c)
            h->stream_tab[i]->capture = NULL;
    host_capture_t **link = &h->captures;
    while (*link != c)
        link = &(*link)->next;
    *link = c->next;
    host_graph_t *g = c->graph;
    int invalidated = c->invalidated;
    free(c);
    g->capture = NULL;
    if (invalidated) {
        h->graph_ops->free(h, g);
        return vpmm_host_i_fail(v, e, VPMM_DRV_ERROR, CODE_CAPTURE_INVALIDATED);
    }
    *out = g;
    return VPMM_DRV_OK;
}

vpmm_dres_t vpmm_host_i_begin_capture(vpmm_driver_t *d, vpmm_stream_t stream,
                                      vpmm_capture_mode_t mode)
{
    return capture_begin(vpmm_host_i_view(d), stream, mode, NULL);
}

vpmm_dres_t vpmm_host_i_end_capture(vpmm_driver_t *d, vpmm_stream_t stream, vpmm_graph_t *out_graph)
{
    host_view_t *v = vpmm_host_i_view(d);
    host_drv_t *h = v->node;
    if (!out_graph)
        return vpmm_host_i_fail_invalid(v, VPMM_DRV_END_CAPTURE);
    host_graph_t *g = NULL;
    vpmm_dres_t res = capture_end(v, stream, &g);
    h->graph_ops->progress(h);
    if (res == VPMM_DRV_OK)
        *out_graph = vpmm_host_i_graph_handle(g);
    return res;
}

/* Rule 9: the special handles name the view's device at no cost; another value its record's
 * (an unknown one is registered on the view's device, its first use). */
vpmm_dres_t vpmm_host_i_stream_device(vpmm_driver_t *d, vpmm_stream_t stream, int *out_device)
{
    host_view_t *v = vpmm_host_i_view(d);
    const vpmm_drv_entry_t e = VPMM_DRV_STREAM_DEVICE;
    if (out_device == NULL)
        return vpmm_host_i_fail_invalid(v, e);
    int dev = stream_device_get(v, stream);
    if (dev < 0)
        return vpmm_host_i_fail(v, e, VPMM_DRV_ERROR, CODE_OUT_OF_MEMORY);
    *out_device = dev;
    return VPMM_DRV_OK;
}

/* ---- test controls ------------------------------------------------------------------------ *
 * Each takes the node's lock (vpmm_host_i_lock_view), as the entries do, so a test's threads may
 * drive their per-thread streams while a pool runs on others (driver_host.h). */

vpmm_stream_t vpmm_host_stream_create(vpmm_driver_t *d)
{
    host_view_t *v = vpmm_host_i_lock_view(d);
    host_stream_t *st = v ? stream_new_synthetic(v->node, v->base.device) : NULL;
    if (st && stream_insert(v->node, st) != 0) {
        free(st);
        st = NULL;
    }
    vpmm_host_i_unlock_view(v);
    return st ? st->key : NULL;
}

vpmm_stream_t vpmm_host_thread_stream(vpmm_driver_t *d)
{
    host_view_t *v = vpmm_host_i_lock_view(d);
    host_stream_t *st = v ? per_thread_get(v->node, v->base.device) : NULL;
    vpmm_host_i_unlock_view(v);
    return st ? st->key : NULL;
}

/* Like a kernel launch: the implicit synchronisation first (or 0 and the captures invalidated). */
static uint64_t enqueue(host_view_t *v, vpmm_stream_t s)
{
    host_drv_t *h = v->node;
    host_stream_t *st = vpmm_host_i_stream_get(v, s);
    if (!st || st->capture || vpmm_host_i_sync_refused(h, st) ||
        RESERVE(st->bar, st->bar_cap, st->bar_len + vpmm_host_i_sync_room(h, st)))
        return 0;
    vpmm_host_i_sync_apply(h, st);
    return ++st->enqueued;
}

uint64_t vpmm_host_enqueue(vpmm_driver_t *d, vpmm_stream_t s)
{
    host_view_t *v = vpmm_host_i_lock_view(d);
    uint64_t seq = v ? enqueue(v, s) : 0;
    vpmm_host_i_unlock_view(v);
    return seq;
}

void vpmm_host_complete(vpmm_driver_t *d, vpmm_stream_t s)
{
    host_view_t *v = vpmm_host_i_lock_view(d);
    host_stream_t *st = v ? stream_lookup(v, s) : NULL;
    if (st) {
        stream_finish(st);
        v->node->graph_ops->progress(v->node);
    }
    vpmm_host_i_unlock_view(v);
}

/* Finishes up to n items of st in order, stopping at the first one whose waits are unsatisfied. */
static size_t advance(host_stream_t *st, size_t n)
{
    size_t done = 0;
    while (done < n && st->completed < st->enqueued) {
        uint64_t next = st->completed + 1;
        /* Live barriers have at ≥ completed, so those gating `next` sit at the head. Drop them
         * as they are found satisfied: satisfaction is permanent (completed only grows). */
        while (st->bar_head < st->bar_len && st->bar[st->bar_head].at < next) {
            const host_barrier_t *b = &st->bar[st->bar_head];
            if (b->signaller->completed < b->seq)
                goto blocked;
            st->bar_head++;
        }
        st->completed = next;
        done++;
    }
blocked:
    stream_compact(st);
    return done;
}

size_t vpmm_host_advance(vpmm_driver_t *d, vpmm_stream_t s, size_t n)
{
    host_view_t *v = vpmm_host_i_lock_view(d);
    host_stream_t *st = v ? stream_lookup(v, s) : NULL;
    size_t done = 0;
    if (st) {
        done = advance(st, n);
        v->node->graph_ops->progress(v->node);
    }
    vpmm_host_i_unlock_view(v);
    return done;
}

void vpmm_host_complete_all(vpmm_driver_t *d)
{
    host_view_t *v = vpmm_host_i_lock_view(d);
    if (v) {
        complete_everything(v->node, -1);
        v->node->graph_ops->progress(v->node);
    }
    vpmm_host_i_unlock_view(v);
}

int vpmm_host_stream_idle(vpmm_driver_t *d, vpmm_stream_t s)
{
    host_view_t *v = vpmm_host_i_lock_view(d);
    const host_stream_t *st = v ? stream_lookup(v, s) : NULL;
    int idle = !st || st->completed == st->enqueued;
    vpmm_host_i_unlock_view(v);
    return idle;
}

uint64_t vpmm_host_stream_enqueued(vpmm_driver_t *d, vpmm_stream_t s)
{
    host_view_t *v = vpmm_host_i_lock_view(d);
    const host_stream_t *st = v ? stream_lookup(v, s) : NULL;
    uint64_t n = st ? st->enqueued : 0;
    vpmm_host_i_unlock_view(v);
    return n;
}

uint64_t vpmm_host_stream_completed(vpmm_driver_t *d, vpmm_stream_t s)
{
    host_view_t *v = vpmm_host_i_lock_view(d);
    const host_stream_t *st = v ? stream_lookup(v, s) : NULL;
    uint64_t n = st ? st->completed : 0;
    vpmm_host_i_unlock_view(v);
    return n;
}

vpmm_dres_t vpmm_host_begin_capture(vpmm_driver_t *d, vpmm_stream_t s, uint64_t *out_id)
{
    host_view_t *v = vpmm_host_i_lock_view(d);
    vpmm_dres_t res = VPMM_DRV_INVALID;
    if (v && !out_id)
        res = vpmm_host_i_fail_invalid(v, VPMM_DRV_BEGIN_CAPTURE);
    else if (v)
        res = capture_begin(v, s, VPMM_CAPTURE_MODE_GLOBAL, out_id);
    vpmm_host_i_unlock_view(v);
    return res;
}

vpmm_dres_t vpmm_host_end_capture(vpmm_driver_t *d, vpmm_stream_t s)
{
    host_view_t *v = vpmm_host_i_lock_view(d);
    if (!v)
        return VPMM_DRV_INVALID;
    host_drv_t *h = v->node;
    host_graph_t *g = NULL;
    vpmm_dres_t res = capture_end(v, s, &g);
    if (res == VPMM_DRV_OK)
        h->graph_ops->free(h, g); /* nobody asked for the graph */
    h->graph_ops->progress(h);
    vpmm_host_i_unlock_view(v);
    return res;
}

size_t vpmm_host_wait_count(vpmm_driver_t *d)
{
    host_view_t *v = vpmm_host_i_lock_view(d);
    size_t n = v ? v->node->n_waits : 0;
    vpmm_host_i_unlock_view(v);
    return n;
}

vpmm_host_wait_t vpmm_host_wait_at(vpmm_driver_t *d, size_t i)
{
    host_view_t *v = vpmm_host_i_lock_view(d);
    vpmm_host_wait_t w = { 0 };
    if (v && i < v->node->n_waits)
        w = v->node->waits[i];
    vpmm_host_i_unlock_view(v);
    return w;
}

void vpmm_host_wait_clear(vpmm_driver_t *d)
{
    host_view_t *v = vpmm_host_i_lock_view(d);
    if (v)
        v->node->n_waits = 0;
    vpmm_host_i_unlock_view(v);
}

/* ---- lifetime ----------------------------------------------------------------------------- */

static void stream_free(host_stream_t *st)
{
    free(st->bar);
    free(st);
}

void vpmm_host_i_stream_fini(host_drv_t *h)
{
    for (size_t i = 0; i < h->events.len; i++) {
        host_event_t *ev = h->events.slots[i].obj;
        if (ev != NULL)
            free(ev->deps);
        free(ev);
    }
    stream_each(h, -1, stream_free);
    while (h->captures) {
        host_capture_t *next = h->captures->next;
        free(h->captures);
        h->captures = next;
    }
    for (int k = 0; k < h->ndev; k++)
        free(h->devs[k].ptds);
    free(h->events.slots);
    free(h->stream_tab);
    free(h->waits);
}
