/*
 * driver_count.c — the counting decorator (driver_count.h): forwards every entry point to the
 * inner driver and adds one call, its failure if it failed, and the nanoseconds it took to that
 * entry's counters.
 *
 * Thread-safety: relaxed atomics only (no lock): the entries may run on several threads at once,
 * and a reader may see one entry's call before its time. Invariants: calls[e] >= failures[e];
 * tests/test_driver_stats.c checks exact counts.
 */
#include "driver_count.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The public enum (vpmm.h) and the table's (driver.h) name the same entries in the same order. */
_Static_assert((int)VPMM_DRIVER_CALL_GRANULARITY == (int)VPMM_DRV_GRANULARITY, "entry order");
_Static_assert((int)VPMM_DRIVER_CALL_VA_RESERVE == (int)VPMM_DRV_VA_RESERVE, "entry order");
_Static_assert((int)VPMM_DRIVER_CALL_VA_FREE == (int)VPMM_DRV_VA_FREE, "entry order");
_Static_assert((int)VPMM_DRIVER_CALL_MEM_CREATE == (int)VPMM_DRV_MEM_CREATE, "entry order");
_Static_assert((int)VPMM_DRIVER_CALL_MEM_RELEASE == (int)VPMM_DRV_MEM_RELEASE, "entry order");
_Static_assert((int)VPMM_DRIVER_CALL_MEM_MAP == (int)VPMM_DRV_MEM_MAP, "entry order");
_Static_assert((int)VPMM_DRIVER_CALL_MEM_UNMAP == (int)VPMM_DRV_MEM_UNMAP, "entry order");
_Static_assert((int)VPMM_DRIVER_CALL_SET_ACCESS == (int)VPMM_DRV_SET_ACCESS, "entry order");
_Static_assert((int)VPMM_DRIVER_CALL_EVENT_CREATE == (int)VPMM_DRV_EVENT_CREATE, "entry order");
_Static_assert((int)VPMM_DRIVER_CALL_EVENT_DESTROY == (int)VPMM_DRV_EVENT_DESTROY, "entry order");
_Static_assert((int)VPMM_DRIVER_CALL_EVENT_RECORD == (int)VPMM_DRV_EVENT_RECORD, "entry order");
_Static_assert((int)VPMM_DRIVER_CALL_EVENT_QUERY == (int)VPMM_DRV_EVENT_QUERY, "entry order");
_Static_assert((int)VPMM_DRIVER_CALL_STREAM_WAIT_EVENT == (int)VPMM_DRV_STREAM_WAIT_EVENT,
               "entry order");
_Static_assert((int)VPMM_DRIVER_CALL_CAPTURE_INFO == (int)VPMM_DRV_CAPTURE_INFO, "entry order");
_Static_assert((int)VPMM_DRIVER_CALL_MEM_GET_INFO == (int)VPMM_DRV_MEM_GET_INFO, "entry order");
_Static_assert((int)VPMM_DRIVER_CALL_SYNCHRONIZE == (int)VPMM_DRV_SYNCHRONIZE, "entry order");
_Static_assert((int)VPMM_DRIVER_CALL_BEGIN_CAPTURE == (int)VPMM_DRV_BEGIN_CAPTURE, "entry order");
_Static_assert((int)VPMM_DRIVER_CALL_END_CAPTURE == (int)VPMM_DRV_END_CAPTURE, "entry order");
_Static_assert((int)VPMM_DRIVER_CALL_USER_OBJECT_CREATE == (int)VPMM_DRV_USER_OBJECT_CREATE,
               "entry order");
_Static_assert((int)VPMM_DRIVER_CALL_GRAPH_RETAIN_USER_OBJECT ==
                   (int)VPMM_DRV_GRAPH_RETAIN_USER_OBJECT,
               "entry order");
_Static_assert((int)VPMM_DRIVER_CALL_USER_OBJECT_RELEASE == (int)VPMM_DRV_USER_OBJECT_RELEASE,
               "entry order");
_Static_assert((int)VPMM_DRIVER_CALL_GRAPH_DESTROY == (int)VPMM_DRV_GRAPH_DESTROY, "entry order");
_Static_assert((int)VPMM_DRIVER_CALL_REVOKE_ACCESS == (int)VPMM_DRV_REVOKE_ACCESS, "entry order");
_Static_assert((int)VPMM_DRIVER_CALL_GET_ACCESS == (int)VPMM_DRV_GET_ACCESS, "entry order");
_Static_assert((int)VPMM_DRIVER_CALL_STREAM_DEVICE == (int)VPMM_DRV_STREAM_DEVICE, "entry order");
_Static_assert((int)VPMM_DRIVER_CALL_MEM_EXPORT == (int)VPMM_DRV_MEM_EXPORT, "entry order");
_Static_assert((int)VPMM_DRIVER_CALL_MEM_IMPORT == (int)VPMM_DRV_MEM_IMPORT, "entry order");
_Static_assert((int)VPMM_DRIVER_CALL_COUNT == (int)VPMM_DRV_ENTRY_COUNT, "entry count");

typedef struct count_entry {
    _Atomic uint64_t calls, failures, ns;
} count_entry_t;

typedef struct count_drv {
    vpmm_driver_t base; /* first member: the table the core calls */
    vpmm_driver_t *inner;
    int owns_inner;
    count_entry_t e[VPMM_DRV_ENTRY_COUNT];
} count_drv_t;

static void count_close(vpmm_driver_t *d);

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Adds one call of entry e that started at t0 and returned res. */
static vpmm_dres_t count(count_drv_t *c, vpmm_drv_entry_t e, uint64_t t0, vpmm_dres_t res)
{
    count_entry_t *x = &c->e[e];
    atomic_fetch_add_explicit(&x->ns, now_ns() - t0, memory_order_relaxed);
    atomic_fetch_add_explicit(&x->calls, 1, memory_order_relaxed);
    /* event_query's NOT_READY is an answer, not a failure (driver.h rule 5). */
    if (res != VPMM_DRV_OK && res != VPMM_DRV_NOT_READY) {
        atomic_fetch_add_explicit(&x->failures, 1, memory_order_relaxed);
        c->base.last_code = c->inner->last_code;
        c->base.last_call = c->inner->last_call;
    }
    return res;
}

/* Each forwarder: read the clock, call the inner driver, count. */
#define FORWARD(e, call)                                                                           \
    count_drv_t *c = (count_drv_t *)d;                                                             \
    uint64_t t0 = now_ns();                                                                        \
    return count(c, (e), t0, c->inner->call)

static vpmm_dres_t count_granularity(vpmm_driver_t *d, size_t *out_bytes)
{
    FORWARD(VPMM_DRV_GRANULARITY, granularity(c->inner, out_bytes));
}

static vpmm_dres_t count_va_reserve(vpmm_driver_t *d, size_t size, size_t align, uintptr_t *out_va)
{
    FORWARD(VPMM_DRV_VA_RESERVE, va_reserve(c->inner, size, align, out_va));
}

static vpmm_dres_t count_va_free(vpmm_driver_t *d, uintptr_t va, size_t size)
{
    FORWARD(VPMM_DRV_VA_FREE, va_free(c->inner, va, size));
}

static vpmm_dres_t count_mem_create(vpmm_driver_t *d, size_t size, vpmm_drv_handle_t *out_handle)
{
    FORWARD(VPMM_DRV_MEM_CREATE, mem_create(c->inner, size, out_handle));
}

static vpmm_dres_t count_mem_release(vpmm_driver_t *d, vpmm_drv_handle_t handle)
{
    FORWARD(VPMM_DRV_MEM_RELEASE, mem_release(c->inner, handle));
}

static vpmm_dres_t count_mem_map(vpmm_driver_t *d, uintptr_t va, size_t size,
                                 vpmm_drv_handle_t handle, size_t offset)
{
    FORWARD(VPMM_DRV_MEM_MAP, mem_map(c->inner, va, size, handle, offset));
}

static vpmm_dres_t count_mem_unmap(vpmm_driver_t *d, uintptr_t va, size_t size)
{
    FORWARD(VPMM_DRV_MEM_UNMAP, mem_unmap(c->inner, va, size));
}

static vpmm_dres_t count_set_access(vpmm_driver_t *d, uintptr_t va, size_t size, const int *peers,
                                    size_t npeers)
{
    FORWARD(VPMM_DRV_SET_ACCESS, set_access(c->inner, va, size, peers, npeers));
}

static vpmm_dres_t count_event_create(vpmm_driver_t *d, vpmm_stream_t on,
                                      vpmm_drv_event_t *out_event)
{
    FORWARD(VPMM_DRV_EVENT_CREATE, event_create(c->inner, on, out_event));
}

static vpmm_dres_t count_revoke_access(vpmm_driver_t *d, uintptr_t va, size_t size, int peer)
{
    FORWARD(VPMM_DRV_REVOKE_ACCESS, revoke_access(c->inner, va, size, peer));
}

/* The validator's query (driver.h rule 9): not counted, as the fault decorator does not count
 * it, so that vpmm_pool_check leaves the figures of the calls it checks alone. */
static vpmm_dres_t count_get_access(vpmm_driver_t *d, uintptr_t va, int device, int *out_rw)
{
    count_drv_t *c = (count_drv_t *)d;
    return c->inner->get_access(c->inner, va, device, out_rw);
}

static vpmm_dres_t count_stream_device(vpmm_driver_t *d, vpmm_stream_t stream, int *out_device)
{
    FORWARD(VPMM_DRV_STREAM_DEVICE, stream_device(c->inner, stream, out_device));
}

static vpmm_dres_t count_mem_export(vpmm_driver_t *d, vpmm_drv_handle_t handle,
                                    vpmm_drv_shareable_t *out)
{
    FORWARD(VPMM_DRV_MEM_EXPORT, mem_export(c->inner, handle, out));
}

static vpmm_dres_t count_mem_import(vpmm_driver_t *d, const vpmm_drv_shareable_t *in,
                                    vpmm_drv_handle_t *out_handle)
{
    FORWARD(VPMM_DRV_MEM_IMPORT, mem_import(c->inner, in, out_handle));
}

static vpmm_dres_t count_event_destroy(vpmm_driver_t *d, vpmm_drv_event_t event)
{
    FORWARD(VPMM_DRV_EVENT_DESTROY, event_destroy(c->inner, event));
}

static vpmm_dres_t count_event_record(vpmm_driver_t *d, vpmm_drv_event_t event,
                                      vpmm_stream_t stream)
{
    FORWARD(VPMM_DRV_EVENT_RECORD, event_record(c->inner, event, stream));
}

static vpmm_dres_t count_event_query(vpmm_driver_t *d, vpmm_drv_event_t event)
{
    FORWARD(VPMM_DRV_EVENT_QUERY, event_query(c->inner, event));
}

static vpmm_dres_t count_stream_wait_event(vpmm_driver_t *d, vpmm_stream_t stream,
                                           vpmm_drv_event_t event)
{
    FORWARD(VPMM_DRV_STREAM_WAIT_EVENT, stream_wait_event(c->inner, stream, event));
}

static vpmm_dres_t count_capture_info(vpmm_driver_t *d, vpmm_stream_t stream,
                                      vpmm_capture_status_t *out_status, uint64_t *out_id,
                                      vpmm_graph_t *out_graph)
{
    FORWARD(VPMM_DRV_CAPTURE_INFO, capture_info(c->inner, stream, out_status, out_id, out_graph));
}

static vpmm_dres_t count_mem_get_info(vpmm_driver_t *d, size_t *out_free, size_t *out_total)
{
    FORWARD(VPMM_DRV_MEM_GET_INFO, mem_get_info(c->inner, out_free, out_total));
}

static vpmm_dres_t count_synchronize(vpmm_driver_t *d)
{
    FORWARD(VPMM_DRV_SYNCHRONIZE, synchronize(c->inner));
}

static vpmm_dres_t count_begin_capture(vpmm_driver_t *d, vpmm_stream_t stream,
                                       vpmm_capture_mode_t mode)
{
    FORWARD(VPMM_DRV_BEGIN_CAPTURE, begin_capture(c->inner, stream, mode));
}

static vpmm_dres_t count_end_capture(vpmm_driver_t *d, vpmm_stream_t stream,
                                     vpmm_graph_t *out_graph)
{
    FORWARD(VPMM_DRV_END_CAPTURE, end_capture(c->inner, stream, out_graph));
}

static vpmm_dres_t count_user_object_create(vpmm_driver_t *d, vpmm_drv_uobj_fn destroy, void *arg,
                                            vpmm_drv_uobj_t *out)
{
    FORWARD(VPMM_DRV_USER_OBJECT_CREATE, user_object_create(c->inner, destroy, arg, out));
}

static vpmm_dres_t count_graph_retain_user_object(vpmm_driver_t *d, vpmm_graph_t graph,
                                                  vpmm_drv_uobj_t obj)
{
    FORWARD(VPMM_DRV_GRAPH_RETAIN_USER_OBJECT, graph_retain_user_object(c->inner, graph, obj));
}

static vpmm_dres_t count_user_object_release(vpmm_driver_t *d, vpmm_drv_uobj_t obj)
{
    FORWARD(VPMM_DRV_USER_OBJECT_RELEASE, user_object_release(c->inner, obj));
}

static vpmm_dres_t count_graph_destroy(vpmm_driver_t *d, vpmm_graph_t graph)
{
    FORWARD(VPMM_DRV_GRAPH_DESTROY, graph_destroy(c->inner, graph));
}

static void count_close(vpmm_driver_t *d)
{
    count_drv_t *c = (count_drv_t *)d;
    if (c->owns_inner)
        c->inner->close(c->inner);
    free(c);
}

int vpmm_count_is(const vpmm_driver_t *d)
{
    return d != NULL && d->close == count_close;
}

int vpmm_count_get(const vpmm_driver_t *w, vpmm_driver_stats_t *out)
{
    const count_drv_t *c = (const count_drv_t *)w;
    if (!vpmm_count_is(w) || out == NULL)
        return -1;
    memset(out, 0, sizeof *out);
    for (int e = 0; e < VPMM_DRV_ENTRY_COUNT; e++) {
        vpmm_driver_call_stats_t *s = &out->call[e];
        s->calls = atomic_load_explicit(&c->e[e].calls, memory_order_relaxed);
        s->failures = atomic_load_explicit(&c->e[e].failures, memory_order_relaxed);
        s->ns = atomic_load_explicit(&c->e[e].ns, memory_order_relaxed);
        out->calls += s->calls;
        out->ns += s->ns;
    }
    return 0;
}

vpmm_dres_t vpmm_count_wrap(vpmm_driver_t *inner, int owns_inner, vpmm_driver_t **out)
{
    count_drv_t *c;
    if (out == NULL)
        return VPMM_DRV_INVALID;
    *out = NULL;
    if (inner == NULL)
        return VPMM_DRV_INVALID;
    c = calloc(1, sizeof *c);
    if (c == NULL)
        return VPMM_DRV_OUT_OF_MEMORY;
    c->inner = inner;
    c->owns_inner = owns_inner;
    c->base = (vpmm_driver_t){
        .name = inner->name, /* transparent: reports name the real backend */
        .device = inner->device,
        .device_count = inner->device_count,
        .peer_capable = inner->peer_capable,
        .exportable = inner->exportable,
        .granularity = count_granularity,
        .va_reserve = count_va_reserve,
        .va_free = count_va_free,
        .mem_create = count_mem_create,
        .mem_release = count_mem_release,
        .mem_map = count_mem_map,
        .mem_unmap = count_mem_unmap,
        .set_access = count_set_access,
        .event_create = count_event_create,
        .event_destroy = count_event_destroy,
        .event_record = count_event_record,
        .event_query = count_event_query,
        .stream_wait_event = count_stream_wait_event,
        .capture_info = count_capture_info,
        .mem_get_info = count_mem_get_info,
        .synchronize = count_synchronize,
        .begin_capture = count_begin_capture,
        .end_capture = count_end_capture,
        .user_object_create = count_user_object_create,
        .graph_retain_user_object = count_graph_retain_user_object,
        .user_object_release = count_user_object_release,
        .graph_destroy = count_graph_destroy,
        .revoke_access = count_revoke_access,
        .get_access = count_get_access,
        .stream_device = count_stream_device,
        .mem_export = count_mem_export,
        .mem_import = count_mem_import,
        .close = count_close,
    };
    *out = &c->base;
    return VPMM_DRV_OK;
}
