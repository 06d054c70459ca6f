/*
 * driver_fault.c — the fault-injection decorator (driver_fault.h): forwards every entry point to
 * the inner driver, counting calls, keeping live-object counters, and failing armed calls before
 * they reach the inner driver (so an injected mem_create failure really creates nothing).
 *
 * Thread-safety: none; called under the owning pool's lock (driver.h rule 7).
 * Invariants: calls[e] sums to total; injected ≤ total; live counters move only on inner
 * success. They are simple enough to be checked by tests/test_driver_fault.c directly.
 */
#include "driver_fault.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { CODE_INJECTED = 999 }; /* CUDA_ERROR_UNKNOWN: what an injected failure reports */

typedef struct fault_arm {
    uint64_t countdown; /* 0 = disarmed; the call that decrements it to 0 fails */
    vpmm_dres_t result;
    uint64_t runs; /* calls that fail once it fired (UINT64_MAX: until disarmed, fail_from) */
} fault_arm_t;

typedef struct fault_drv {
    vpmm_driver_t base; /* first member: the table the core calls */
    vpmm_driver_t *inner;
    char *name;
    uint64_t calls[VPMM_DRV_ENTRY_COUNT];
    uint64_t total, injected;
    fault_arm_t arm[VPMM_DRV_ENTRY_COUNT];
    fault_arm_t any;
    vpmm_fault_live_t live;
    pthread_mutex_t mutex; /* recursive: counters, arming, live counts (the inner call included) */
} fault_drv_t;

static void fault_close(vpmm_driver_t *d);

static fault_drv_t *as_fault(vpmm_driver_t *d)
{
    return d && d->close == fault_close ? (fault_drv_t *)d : NULL;
}

/* Counts the call; returns 1 if an armed countdown fires (and *out_result says how to fail). */
static int arm_tick(fault_arm_t *a, vpmm_dres_t *out_result)
{
    if (a->countdown == 0)
        return 0;
    if (a->countdown > 1) {
        a->countdown--;
        return 0;
    }
    *out_result = a->result;
    if (a->runs != UINT64_MAX && --a->runs == 0)
        a->countdown = 0; /* the run is over: disarm; otherwise it stays at 1 and fires again */
    return 1;
}

/* Counts a call of entry e; VPMM_DRV_OK to forward it, else the injected failure. */
static vpmm_dres_t enter(fault_drv_t *f, vpmm_drv_entry_t e)
{
    vpmm_dres_t any_res = VPMM_DRV_OK, entry_res = VPMM_DRV_OK;
    f->calls[e]++;
    f->total++;
    int fire_any = arm_tick(&f->any, &any_res);
    int fire_entry = arm_tick(&f->arm[e], &entry_res);
    if (!fire_any && !fire_entry)
        return VPMM_DRV_OK;
    vpmm_dres_t res = fire_entry ? entry_res : any_res;
    if (res == VPMM_DRV_OK)
        res = VPMM_DRV_ERROR; /* arming with OK would make a "failure" indistinguishable */
    f->injected++;
    f->base.last_code = CODE_INJECTED;
    f->base.last_call = vpmm_drv_entry_name(e);
    return res;
}

/* Passes an inner result up, copying the inner's raw error on failure. */
static vpmm_dres_t leave(fault_drv_t *f, vpmm_dres_t res)
{
    if (res != VPMM_DRV_OK) {
        f->base.last_code = f->inner->last_code;
        f->base.last_call = f->inner->last_call;
    }
    return res;
}

/* Each forwarder: count, maybe inject, call the inner driver, then track live objects. */
#define FORWARD(e, call)                                                                           \
    fault_drv_t *f = (fault_drv_t *)d;                                                             \
    vpmm_dres_t res;                                                                               \
    pthread_mutex_lock(&f->mutex);                                                                 \
    res = enter(f, (e));                                                                           \
    if (res == VPMM_DRV_OK)                                                                        \
    res = leave(f, f->inner->call)

/* The end of every forwarder: the counters are consistent again. */
static vpmm_dres_t unlocked(fault_drv_t *f, vpmm_dres_t res)
{
    pthread_mutex_unlock(&f->mutex);
    return res;
}

static vpmm_dres_t fault_granularity(vpmm_driver_t *d, size_t *out_bytes)
{
    FORWARD(VPMM_DRV_GRANULARITY, granularity(f->inner, out_bytes));
    return unlocked(f, res);
}

static vpmm_dres_t fault_va_reserve(vpmm_driver_t *d, size_t size, size_t align, uintptr_t *out_va)
{
    FORWARD(VPMM_DRV_VA_RESERVE, va_reserve(f->inner, size, align, out_va));
    f->live.reservations += res == VPMM_DRV_OK;
    return unlocked(f, res);
}

static vpmm_dres_t fault_va_free(vpmm_driver_t *d, uintptr_t va, size_t size)
{
    FORWARD(VPMM_DRV_VA_FREE, va_free(f->inner, va, size));
    f->live.reservations -= res == VPMM_DRV_OK;
    return unlocked(f, res);
}

static vpmm_dres_t fault_mem_create(vpmm_driver_t *d, size_t size, vpmm_drv_handle_t *out_handle)
{
    FORWARD(VPMM_DRV_MEM_CREATE, mem_create(f->inner, size, out_handle));
    f->live.handles += res == VPMM_DRV_OK;
    return unlocked(f, res);
}

static vpmm_dres_t fault_mem_release(vpmm_driver_t *d, vpmm_drv_handle_t handle)
{
    FORWARD(VPMM_DRV_MEM_RELEASE, mem_release(f->inner, handle));
    f->live.handles -= res == VPMM_DRV_OK;
    return unlocked(f, res);
}

static vpmm_dres_t fault_mem_map(vpmm_driver_t *d, uintptr_t va, size_t size,
                                 vpmm_drv_handle_t handle, size_t offset)
{
    FORWARD(VPMM_DRV_MEM_MAP, mem_map(f->inner, va, size, handle, offset));
    f->live.mappings += res == VPMM_DRV_OK;
    return unlocked(f, res);
}

static vpmm_dres_t fault_mem_unmap(vpmm_driver_t *d, uintptr_t va, size_t size)
{
    FORWARD(VPMM_DRV_MEM_UNMAP, mem_unmap(f->inner, va, size));
    f->live.mappings -= res == VPMM_DRV_OK;
    return unlocked(f, res);
}

static vpmm_dres_t fault_set_access(vpmm_driver_t *d, uintptr_t va, size_t size, const int *peers,
                                    size_t npeers)
{
    FORWARD(VPMM_DRV_SET_ACCESS, set_access(f->inner, va, size, peers, npeers));
    return unlocked(f, res);
}

static vpmm_dres_t fault_event_create(vpmm_driver_t *d, vpmm_stream_t on,
                                      vpmm_drv_event_t *out_event)
{
    FORWARD(VPMM_DRV_EVENT_CREATE, event_create(f->inner, on, out_event));
    f->live.events += res == VPMM_DRV_OK;
    return unlocked(f, res);
}

static vpmm_dres_t fault_event_destroy(vpmm_driver_t *d, vpmm_drv_event_t event)
{
    FORWARD(VPMM_DRV_EVENT_DESTROY, event_destroy(f->inner, event));
    f->live.events -= res == VPMM_DRV_OK;
    return unlocked(f, res);
}

static vpmm_dres_t fault_event_record(vpmm_driver_t *d, vpmm_drv_event_t event,
                                      vpmm_stream_t stream)
{
    FORWARD(VPMM_DRV_EVENT_RECORD, event_record(f->inner, event, stream));
    return unlocked(f, res);
}

static vpmm_dres_t fault_event_query(vpmm_driver_t *d, vpmm_drv_event_t event)
{
    FORWARD(VPMM_DRV_EVENT_QUERY, event_query(f->inner, event));
    return unlocked(f, res);
}

static vpmm_dres_t fault_stream_wait_event(vpmm_driver_t *d, vpmm_stream_t stream,
                                           vpmm_drv_event_t event)
{
    FORWARD(VPMM_DRV_STREAM_WAIT_EVENT, stream_wait_event(f->inner, stream, event));
    return unlocked(f, res);
}

static vpmm_dres_t fault_capture_info(vpmm_driver_t *d, vpmm_stream_t stream,
                                      vpmm_capture_status_t *out_status, uint64_t *out_id,
                                      vpmm_graph_t *out_graph)
{
    FORWARD(VPMM_DRV_CAPTURE_INFO, capture_info(f->inner, stream, out_status, out_id, out_graph));
    return unlocked(f, res);
}

static vpmm_dres_t fault_mem_get_info(vpmm_driver_t *d, size_t *out_free, size_t *out_total)
{
    FORWARD(VPMM_DRV_MEM_GET_INFO, mem_get_info(f->inner, out_free, out_total));
    return unlocked(f, res);
}

static vpmm_dres_t fault_synchronize(vpmm_driver_t *d)
{
    FORWARD(VPMM_DRV_SYNCHRONIZE, synchronize(f->inner));
    return unlocked(f, res);
}

static vpmm_dres_t fault_begin_capture(vpmm_driver_t *d, vpmm_stream_t stream,
                                       vpmm_capture_mode_t mode)
{
    FORWARD(VPMM_DRV_BEGIN_CAPTURE, begin_capture(f->inner, stream, mode));
    return unlocked(f, res);
}

static vpmm_dres_t fault_end_capture(vpmm_driver_t *d, vpmm_stream_t stream,
                                     vpmm_graph_t *out_graph)
{
    FORWARD(VPMM_DRV_END_CAPTURE, end_capture(f->inner, stream, out_graph));
    return unlocked(f, res);
}

static vpmm_dres_t fault_user_object_create(vpmm_driver_t *d, vpmm_drv_uobj_fn destroy, void *arg,
                                            vpmm_drv_uobj_t *out)
{
    FORWARD(VPMM_DRV_USER_OBJECT_CREATE, user_object_create(f->inner, destroy, arg, out));
    f->live.user_objects += res == VPMM_DRV_OK;
    return unlocked(f, res);
}

/* A successful retain moves the caller's reference to the graph: the caller holds one less. */
static vpmm_dres_t fault_graph_retain_user_object(vpmm_driver_t *d, vpmm_graph_t graph,
                                                  vpmm_drv_uobj_t obj)
{
    FORWARD(VPMM_DRV_GRAPH_RETAIN_USER_OBJECT, graph_retain_user_object(f->inner, graph, obj));
    f->live.user_objects -= res == VPMM_DRV_OK;
    return unlocked(f, res);
}

static vpmm_dres_t fault_user_object_release(vpmm_driver_t *d, vpmm_drv_uobj_t obj)
{
    FORWARD(VPMM_DRV_USER_OBJECT_RELEASE, user_object_release(f->inner, obj));
    f->live.user_objects -= res == VPMM_DRV_OK;
    return unlocked(f, res);
}

static vpmm_dres_t fault_graph_destroy(vpmm_driver_t *d, vpmm_graph_t graph)
{
    FORWARD(VPMM_DRV_GRAPH_DESTROY, graph_destroy(f->inner, graph));
    return unlocked(f, res);
}

static vpmm_dres_t fault_revoke_access(vpmm_driver_t *d, uintptr_t va, size_t size, int peer)
{
    FORWARD(VPMM_DRV_REVOKE_ACCESS, revoke_access(f->inner, va, size, peer));
    return unlocked(f, res);
}

/* The validator's query (driver.h rule 9): neither counted nor failed, so that a fault sweep never
 * lands inside vpmm_pool_check. */
static vpmm_dres_t fault_get_access(vpmm_driver_t *d, uintptr_t va, int device, int *out_rw)
{
    fault_drv_t *f = (fault_drv_t *)d;
    return f->inner->get_access(f->inner, va, device, out_rw);
}

static vpmm_dres_t fault_stream_device(vpmm_driver_t *d, vpmm_stream_t stream, int *out_device)
{
    FORWARD(VPMM_DRV_STREAM_DEVICE, stream_device(f->inner, stream, out_device));
    return unlocked(f, res);
}

static vpmm_dres_t fault_mem_export(vpmm_driver_t *d, vpmm_drv_handle_t handle,
                                    vpmm_drv_shareable_t *out)
{
    FORWARD(VPMM_DRV_MEM_EXPORT, mem_export(f->inner, handle, out));
    return unlocked(f, res);
}

/* An imported handle is a handle the caller releases: counted live as a created one. */
static vpmm_dres_t fault_mem_import(vpmm_driver_t *d, const vpmm_drv_shareable_t *in,
                                    vpmm_drv_handle_t *out_handle)
{
    FORWARD(VPMM_DRV_MEM_IMPORT, mem_import(f->inner, in, out_handle));
    f->live.handles += res == VPMM_DRV_OK;
    return unlocked(f, res);
}

static void fault_close(vpmm_driver_t *d)
{
    fault_drv_t *f = (fault_drv_t *)d;
    if (!f)
        return;
    f->inner->close(f->inner);
    pthread_mutex_destroy(&f->mutex);
    free(f->name);
    free(f);
}

vpmm_dres_t vpmm_fault_wrap(vpmm_driver_t *inner, vpmm_driver_t **out)
{
    if (!out)
        return VPMM_DRV_INVALID;
    *out = NULL;
    if (!inner)
        return VPMM_DRV_INVALID;
    const char *inner_name = inner->name ? inner->name : "?";
    size_t len = strlen(inner_name) + sizeof "fault()";
    fault_drv_t *f = calloc(1, sizeof *f);
    char *name = malloc(len);
    if (!f || !name) {
        free(f);
        free(name);
        return VPMM_DRV_OUT_OF_MEMORY;
    }
    snprintf(name, len, "fault(%s)", inner_name);
    {
        pthread_mutexattr_t attr;
        pthread_mutexattr_init(&attr);
        pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
        pthread_mutex_init(&f->mutex, &attr);
        pthread_mutexattr_destroy(&attr);
    }
    f->inner = inner;
    f->name = name;
    f->base = (vpmm_driver_t){
        .name = name,
        .device = inner->device,
        .device_count = inner->device_count,
        .peer_capable = inner->peer_capable,
        .exportable = inner->exportable,
        .granularity = fault_granularity,
        .va_reserve = fault_va_reserve,
        .va_free = fault_va_free,
        .mem_create = fault_mem_create,
        .mem_release = fault_mem_release,
        .mem_map = fault_mem_map,
        .mem_unmap = fault_mem_unmap,
        .set_access = fault_set_access,
        .event_create = fault_event_create,
        .event_destroy = fault_event_destroy,
        .event_record = fault_event_record,
        .event_query = fault_event_query,
        .stream_wait_event = fault_stream_wait_event,
        .capture_info = fault_capture_info,
        .mem_get_info = fault_mem_get_info,
        .synchronize = fault_synchronize,
        .begin_capture = fault_begin_capture,
        .end_capture = fault_end_capture,
        .user_object_create = fault_user_object_create,
        .graph_retain_user_object = fault_graph_retain_user_object,
        .user_object_release = fault_user_object_release,
        .graph_destroy = fault_graph_destroy,
        .revoke_access = fault_revoke_access,
        .get_access = fault_get_access,
        .stream_device = fault_stream_device,
        .mem_export = fault_mem_export,
        .mem_import = fault_mem_import,
        .close = fault_close,
    };
    *out = &f->base;
    return VPMM_DRV_OK;
}

static void arm_entry(vpmm_driver_t *w, vpmm_drv_entry_t entry, uint64_t n, uint64_t runs,
                      vpmm_dres_t result)
{
    fault_drv_t *f = as_fault(w);
    if (!f || (unsigned)entry >= (unsigned)VPMM_DRV_ENTRY_COUNT)
        return;
    pthread_mutex_lock(&f->mutex);
    f->arm[entry] = runs == 0 ? (fault_arm_t){ 0, result, 0 } : (fault_arm_t){ n, result, runs };
    pthread_mutex_unlock(&f->mutex);
}

void vpmm_fault_fail_nth(vpmm_driver_t *w, vpmm_drv_entry_t entry, uint64_t n, vpmm_dres_t result)
{
    arm_entry(w, entry, n, 1, result);
}

void vpmm_fault_fail_run(vpmm_driver_t *w, vpmm_drv_entry_t entry, uint64_t n, uint64_t count,
                         vpmm_dres_t result)
{
    arm_entry(w, entry, n, count, result);
}

void vpmm_fault_fail_from(vpmm_driver_t *w, vpmm_drv_entry_t entry, uint64_t n, vpmm_dres_t result)
{
    arm_entry(w, entry, n, UINT64_MAX, result);
}

void vpmm_fault_fail_any_nth(vpmm_driver_t *w, uint64_t n, vpmm_dres_t result)
{
    fault_drv_t *f = as_fault(w);
    if (!f)
        return;
    pthread_mutex_lock(&f->mutex);
    f->any = (fault_arm_t){ n, result, 1 };
    pthread_mutex_unlock(&f->mutex);
}

void vpmm_fault_clear(vpmm_driver_t *w)
{
    fault_drv_t *f = as_fault(w);
    if (!f)
        return;
    pthread_mutex_lock(&f->mutex);
    memset(f->arm, 0, sizeof f->arm);
    memset(&f->any, 0, sizeof f->any);
    pthread_mutex_unlock(&f->mutex);
}

uint64_t vpmm_fault_calls(vpmm_driver_t *w, vpmm_drv_entry_t entry)
{
    fault_drv_t *f = as_fault(w);
    uint64_t n;
    if (!f || (unsigned)entry >= (unsigned)VPMM_DRV_ENTRY_COUNT)
        return 0;
    pthread_mutex_lock(&f->mutex);
    n = f->calls[entry];
    pthread_mutex_unlock(&f->mutex);
    return n;
}

uint64_t vpmm_fault_total_calls(vpmm_driver_t *w)
{
    fault_drv_t *f = as_fault(w);
    uint64_t n;
    if (!f)
        return 0;
    pthread_mutex_lock(&f->mutex);
    n = f->total;
    pthread_mutex_unlock(&f->mutex);
    return n;
}

uint64_t vpmm_fault_injected(vpmm_driver_t *w)
{
    fault_drv_t *f = as_fault(w);
    uint64_t n;
    if (!f)
        return 0;
    pthread_mutex_lock(&f->mutex);
    n = f->injected;
    pthread_mutex_unlock(&f->mutex);
    return n;
}

void vpmm_fault_live(vpmm_driver_t *w, vpmm_fault_live_t *out)
{
    fault_drv_t *f = as_fault(w);
    if (!out)
        return;
    if (!f) {
        *out = (vpmm_fault_live_t){ 0 };
        return;
    }
    pthread_mutex_lock(&f->mutex);
    *out = f->live;
    pthread_mutex_unlock(&f->mutex);
}

void vpmm_fault_reset_calls(vpmm_driver_t *w)
{
    fault_drv_t *f = as_fault(w);
    if (!f)
        return;
    pthread_mutex_lock(&f->mutex);
    memset(f->calls, 0, sizeof f->calls);
    f->total = 0;
    f->injected = 0;
    pthread_mutex_unlock(&f->mutex);
}

vpmm_driver_t *vpmm_fault_inner(vpmm_driver_t *w)
{
    fault_drv_t *f = as_fault(w);
    return f ? f->inner : NULL;
}
