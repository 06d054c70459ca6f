/*
 * driver_cuda.c — the CUDA backend: implements the contract of driver.h on the real CUDA driver.
 * The only file of the library that includes cuda.h.
 *
 * Loading. Nothing here links against libcuda: the first call of vpmm_driver_cuda_open() or
 * vpmm_driver_cuda_device_count() dlopen()s "libcuda.so.1" (RTLD_NOW | RTLD_LOCAL), dlsym()s only
 * cuGetProcAddress_v2 and resolves every other entry point through it, each at the CUDA version
 * whose ABI this file calls (the table in cu_load_once). So the binaries start without a driver,
 * and a missing library, symbol or device is a status (VPMM_DRV_NO_DEVICE), never a crash. The
 * library handle, the entry points and cuInit's verdict are loaded once per process (pthread_once)
 * and shared by every instance; the library is never dlclose()d.
 *
 * Versions. Needs a driver of CUDA 12.0 or later (cuGetProcAddress_v2 appeared in 12.0); compiles
 * against the CUDA 13.0 headers. cuStreamGetCaptureInfo is taken at 12030 (v3 signature, with
 * edge data) on a 12.3+ driver and at 11030 (v2) on 12.0-12.2, since cuGetProcAddress refuses a
 * version newer than the driver; both return the graph being captured. Graph entry points:
 * cuStreamBeginCapture at 10010 (the _v2 ABI, with a capture mode; 10000 is the mode-less one),
 * cuStreamEndCapture at 10000, cuUserObjectCreate / cuUserObjectRelease / cuGraphRetainUserObject
 * at 11030 (their only ABI). Entry points are looked up with CU_GET_PROC_ADDRESS_LEGACY_STREAM:
 * stream 0 (NULL) means the legacy default stream, whatever the application was compiled with
 * (CU_STREAM_PER_THREAD / cudaStreamPerThread still name the per-thread stream explicitly).
 *
 * Contexts. An instance retains its device's primary context (the one the CUDA runtime uses)
 * at open and releases it at close. Every entry point that calls the driver runs with that
 * context current: cuCtxGetCurrent and a pointer compare when it already is (the common case in
 * a runtime application), otherwise cuCtxPushCurrent / cuCtxPopCurrent around the call.
 *
 * Threads. The loader is thread-safe. An instance is not (driver.h rule 7: the owning pool calls
 * it under its lock); its only mutable state is last_code / last_call. Never prints, never exits.
 *
 * Devices. vpmm_driver_cuda_device_count() is cuDeviceGetCount (0 without a usable driver), so its
 * range is exactly the ordinals open() accepts; a device in it may still lack VMM support
 * (open says VPMM_DRV_NOT_SUPPORTED).
 *
 * Checks. Arguments that break driver.h rule 2 (granularity) are refused here with
 * VPMM_DRV_INVALID before the driver sees them, so the answer does not depend on the driver
 * version; last_code is then CUDA_ERROR_INVALID_VALUE, as the driver would have said.
 *
 * Graphs (rule 8). User objects are made with CU_USER_OBJECT_NO_DESTRUCTOR_SYNC (the only flag
 * CUDA accepts) and one reference; retain moves it to the graph (CU_GRAPH_USER_OBJECT_MOVE).
 * The destructor runs on a CUDA-internal thread, some time after the last reference went.
 * begin_capture on the legacy stream (NULL or CU_STREAM_LEGACY) is refused by the driver; its
 * refusal is reported as VPMM_DRV_NOT_SUPPORTED whatever CUresult it carries (kept in last_code),
 * as the host backend does. In global and thread-local modes CUDA requires end_capture from the
 * thread that began the capture.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cudaTypedefs.h>

#include "driver_cuda.h"

_Static_assert(sizeof(vpmm_drv_handle_t) == sizeof(CUmemGenericAllocationHandle),
               "vpmm_drv_handle_t must hold a CUmemGenericAllocationHandle");
_Static_assert(sizeof(uintptr_t) >= sizeof(CUdeviceptr), "uintptr_t must hold a CUdeviceptr");
_Static_assert(sizeof(void *) == sizeof(void (*)(void)), "function pointers must fit a void *");
_Static_assert(_Generic((vpmm_drv_uobj_fn)0, CUhostFn : 1, default : 0),
               "vpmm_drv_uobj_fn must be the type of CUhostFn");
_Static_assert((int)VPMM_CAPTURE_MODE_GLOBAL == (int)CU_STREAM_CAPTURE_MODE_GLOBAL &&
                   (int)VPMM_CAPTURE_MODE_THREAD_LOCAL ==
                       (int)CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
                   (int)VPMM_CAPTURE_MODE_RELAXED == (int)CU_STREAM_CAPTURE_MODE_RELAXED,
               "vpmm_capture_mode_t must have CUstreamCaptureMode's values");

/* Versions at which the 12.3 capture-info ABI (v3, with edge data) exists. */
#define CU_CAPTURE_INFO_V3_VERSION 12030
#define CU_CAPTURE_INFO_V2_VERSION 11030

/* ---- process-wide loader ----------------------------------------------------------------- */

static struct cu_api {
    pthread_once_t once;
    void *lib;

    /* Verdict of the load: VPMM_DRV_OK, or why the backend cannot run (code/call: the CUresult
     * and the function that gave it). A failed open has no instance to carry a last_code, so this
     * is where a debugger finds the reason; driver.h has no call that reports it yet. */
    vpmm_dres_t status;
    CUresult code;
    const char *call;
    int driver_version;
    int device_count;

    PFN_cuGetProcAddress_v12000 get_proc_address;
    PFN_cuInit_v2000 init;
    PFN_cuDriverGetVersion_v2020 driver_get_version;
    PFN_cuDeviceGetCount_v2000 device_get_count;
    PFN_cuDeviceGet_v2000 device_get;
    PFN_cuDeviceGetAttribute_v2000 device_get_attribute;
    PFN_cuDevicePrimaryCtxRetain_v7000 primary_ctx_retain;
    PFN_cuDevicePrimaryCtxRelease_v11000 primary_ctx_release;
    PFN_cuCtxGetCurrent_v4000 ctx_get_current;
    PFN_cuCtxGetDevice_v2000 ctx_get_device;
    PFN_cuCtxSetCurrent_v4000 ctx_set_current;
    PFN_cuCtxPushCurrent_v4000 ctx_push_current;
    PFN_cuCtxPopCurrent_v4000 ctx_pop_current;
    PFN_cuCtxSynchronize_v2000 ctx_synchronize;
    PFN_cuMemGetInfo_v3020 mem_get_info;
    PFN_cuMemGetAllocationGranularity_v10020 mem_get_allocation_granularity;
    PFN_cuMemAddressReserve_v10020 mem_address_reserve;
    PFN_cuMemAddressFree_v10020 mem_address_free;
    PFN_cuMemCreate_v10020 mem_create;
    PFN_cuMemRelease_v10020 mem_release;
    PFN_cuMemMap_v10020 mem_map;
    PFN_cuMemUnmap_v10020 mem_unmap;
    PFN_cuMemSetAccess_v10020 mem_set_access;
    PFN_cuMemGetAccess_v10020 mem_get_access;
    PFN_cuMemExportToShareableHandle_v10020 mem_export_to_shareable_handle;
    PFN_cuMemImportFromShareableHandle_v10020 mem_import_from_shareable_handle;
    PFN_cuDeviceCanAccessPeer_v4000 device_can_access_peer;
    PFN_cuStreamGetCtx_v9020 stream_get_ctx;
    PFN_cuEventCreate_v2000 event_create;
    PFN_cuEventDestroy_v4000 event_destroy;
    PFN_cuEventRecord_v2000 event_record;
    PFN_cuEventQuery_v2000 event_query;
    PFN_cuStreamWaitEvent_v3020 stream_wait_event;
    PFN_cuStreamGetCaptureInfo_v12030 stream_get_capture_info_v3; /* driver >= 12.3 */
    PFN_cuStreamGetCaptureInfo_v11030 stream_get_capture_info_v2; /* driver 12.0 - 12.2 */
    PFN_cuStreamBeginCapture_v10010 stream_begin_capture;
    PFN_cuStreamEndCapture_v10000 stream_end_capture;
    PFN_cuUserObjectCreate_v11030 user_object_create;
    PFN_cuUserObjectRelease_v11030 user_object_release;
    PFN_cuGraphRetainUserObject_v11030 graph_retain_user_object;
    PFN_cuGraphDestroy_v10000 graph_destroy;
    PFN_cuThreadExchangeStreamCaptureMode_v10010 thread_exchange_capture_mode;
} g_cu = { .once = PTHREAD_ONCE_INIT };

/* Records why the load failed; returns 0 so callers can `return cu_load_fail(...)`. */
static int cu_load_fail(vpmm_dres_t status, CUresult code, const char *call)
{
    g_cu.status = status;
    g_cu.code = code;
    g_cu.call = call;
    return 0;
}

/* Looks up `name` at `version` into *out (a function pointer of the matching PFN_ type). */
static int cu_resolve(const char *name, int version, void *out, size_t out_size)
{
    void *sym = NULL;
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult r =
        g_cu.get_proc_address(name, &sym, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &found);
    if (r != CUDA_SUCCESS)
        return cu_load_fail(VPMM_DRV_NO_DEVICE, r, name);
    if (found != CU_GET_PROC_ADDRESS_SUCCESS || sym == NULL)
        return cu_load_fail(VPMM_DRV_NO_DEVICE, CUDA_ERROR_NOT_FOUND, name);
    memcpy(out, &sym, out_size); /* object to function pointer, without a pedantic cast */
    return 1;
}

#define CU_RESOLVE(field, name, version)                                                           \
    do {                                                                                           \
        if (!cu_resolve(name, version, &g_cu.field, sizeof g_cu.field))                            \
            return;                                                                                \
    } while (0)

static void cu_load_once(void)
{
    g_cu.status = VPMM_DRV_NO_DEVICE;
    g_cu.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (g_cu.lib == NULL) {
        cu_load_fail(VPMM_DRV_NO_DEVICE, CUDA_SUCCESS, "dlopen(libcuda.so.1)");
        return;
    }
    void *sym = dlsym(g_cu.lib, "cuGetProcAddress_v2");
    if (sym == NULL) { /* a driver older than CUDA 12.0 */
        cu_load_fail(VPMM_DRV_NO_DEVICE, CUDA_ERROR_NOT_FOUND, "cuGetProcAddress_v2");
        return;
    }
    memcpy(&g_cu.get_proc_address, &sym, sizeof g_cu.get_proc_address);

    /* Each at the CUDA version of the ABI this file calls (its PFN_..._vNNNNN typedef). */
    CU_RESOLVE(init, "cuInit", 2000);
    CU_RESOLVE(driver_get_version, "cuDriverGetVersion", 2020);
    CU_RESOLVE(device_get_count, "cuDeviceGetCount", 2000);
    CU_RESOLVE(device_get, "cuDeviceGet", 2000);
    CU_RESOLVE(device_get_attribute, "cuDeviceGetAttribute", 2000);
    CU_RESOLVE(primary_ctx_retain, "cuDevicePrimaryCtxRetain", 7000);
    CU_RESOLVE(primary_ctx_release, "cuDevicePrimaryCtxRelease", 11000);
    CU_RESOLVE(ctx_get_current, "cuCtxGetCurrent", 4000);
    CU_RESOLVE(ctx_get_device, "cuCtxGetDevice", 2000);
    CU_RESOLVE(ctx_set_current, "cuCtxSetCurrent", 4000);
    CU_RESOLVE(ctx_push_current, "cuCtxPushCurrent", 4000);
    CU_RESOLVE(ctx_pop_current, "cuCtxPopCurrent", 4000);
    CU_RESOLVE(ctx_synchronize, "cuCtxSynchronize", 2000);
    CU_RESOLVE(mem_get_info, "cuMemGetInfo", 3020);
    CU_RESOLVE(mem_get_allocation_granularity, "cuMemGetAllocationGranularity", 10020);
    CU_RESOLVE(mem_address_reserve, "cuMemAddressReserve", 10020);
    CU_RESOLVE(mem_address_free, "cuMemAddressFree", 10020);
    CU_RESOLVE(mem_create, "cuMemCreate", 10020);
    CU_RESOLVE(mem_release, "cuMemRelease", 10020);
    CU_RESOLVE(mem_map, "cuMemMap", 10020);
    CU_RESOLVE(mem_unmap, "cuMemUnmap", 10020);
    CU_RESOLVE(mem_set_access, "cuMemSetAccess", 10020);
    CU_RESOLVE(mem_get_access, "cuMemGetAccess", 10020);
    CU_RESOLVE(mem_export_to_shareable_handle, "cuMemExportToShareableHandle", 10020);
    CU_RESOLVE(mem_import_from_shareable_handle, "cuMemImportFromShareableHandle", 10020);
    CU_RESOLVE(device_can_access_peer, "cuDeviceCanAccessPeer", 4000);
    CU_RESOLVE(stream_get_ctx, "cuStreamGetCtx", 9020);
    CU_RESOLVE(event_create, "cuEventCreate", 2000);
    CU_RESOLVE(event_destroy, "cuEventDestroy", 4000);
    CU_RESOLVE(event_record, "cuEventRecord", 2000);
    CU_RESOLVE(event_query, "cuEventQuery", 2000);
    CU_RESOLVE(stream_wait_event, "cuStreamWaitEvent", 3020);
    CU_RESOLVE(stream_begin_capture, "cuStreamBeginCapture", 10010);
    CU_RESOLVE(stream_end_capture, "cuStreamEndCapture", 10000);
    CU_RESOLVE(user_object_create, "cuUserObjectCreate", 11030);
    CU_RESOLVE(user_object_release, "cuUserObjectRelease", 11030);
    CU_RESOLVE(graph_retain_user_object, "cuGraphRetainUserObject", 11030);
    CU_RESOLVE(graph_destroy, "cuGraphDestroy", 10000);
    CU_RESOLVE(thread_exchange_capture_mode, "cuThreadExchangeStreamCaptureMode", 10010);

    CUresult r = g_cu.init(0);
    if (r != CUDA_SUCCESS) {
        cu_load_fail(VPMM_DRV_NO_DEVICE, r, "cuInit");
        return;
    }
    r = g_cu.driver_get_version(&g_cu.driver_version);
    if (r != CUDA_SUCCESS) {
        cu_load_fail(VPMM_DRV_NO_DEVICE, r, "cuDriverGetVersion");
        return;
    }
    if (g_cu.driver_version >= CU_CAPTURE_INFO_V3_VERSION)
        CU_RESOLVE(stream_get_capture_info_v3, "cuStreamGetCaptureInfo",
                   CU_CAPTURE_INFO_V3_VERSION);
    else
        CU_RESOLVE(stream_get_capture_info_v2, "cuStreamGetCaptureInfo",
                   CU_CAPTURE_INFO_V2_VERSION);

    int count = 0;
    r = g_cu.device_get_count(&count);
    if (r != CUDA_SUCCESS) {
        cu_load_fail(VPMM_DRV_NO_DEVICE, r, "cuDeviceGetCount");
        return;
    }
    if (count <= 0) {
        cu_load_fail(VPMM_DRV_NO_DEVICE, CUDA_ERROR_NO_DEVICE, "cuDeviceGetCount");
        return;
    }
    g_cu.device_count = count;
    g_cu.status = VPMM_DRV_OK;
    g_cu.code = CUDA_SUCCESS;
    g_cu.call = NULL;
}

static vpmm_dres_t cu_load(void)
{
    if (pthread_once(&g_cu.once, cu_load_once) != 0)
        return VPMM_DRV_NO_DEVICE;
    return g_cu.status;
}

/* ---- one instance ------------------------------------------------------------------------- */

typedef struct cuda_driver {
    vpmm_driver_t base; /* first: the core sees only this */
    CUdevice device;
    CUcontext ctx; /* the device's primary context, retained by this instance */
    size_t granularity;
    CUmemAllocationProp prop; /* pinned device memory at `device`; POSIX fds when exportable */
} cuda_driver_t;

static cuda_driver_t *cuda_of(vpmm_driver_t *d)
{
    return (cuda_driver_t *)d;
}

static vpmm_dres_t cu_map_result(CUresult r)
{
    switch (r) {
    case CUDA_SUCCESS:
        return VPMM_DRV_OK;
    case CUDA_ERROR_NOT_READY:
        return VPMM_DRV_NOT_READY;
    case CUDA_ERROR_OUT_OF_MEMORY:
        return VPMM_DRV_OUT_OF_MEMORY;
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH: /* the driver API's "insufficient driver" */
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
    case CUDA_ERROR_STUB_LIBRARY:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
        return VPMM_DRV_NO_DEVICE;
    case CUDA_ERROR_NOT_SUPPORTED:
        return VPMM_DRV_NOT_SUPPORTED;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE:
        return VPMM_DRV_INVALID;
    default:
        return VPMM_DRV_ERROR;
    }
}

/* Rule 1: keep the raw error and the function's name, return the mapped status. */
static vpmm_dres_t cu_fail(cuda_driver_t *cd, CUresult r, const char *call)
{
    cd->base.last_code = (int)r;
    cd->base.last_call = call;
    return cu_map_result(r);
}

/* Rule 2 refusals (see the head comment). */
static vpmm_dres_t cu_invalid(cuda_driver_t *cd, const char *call)
{
    return cu_fail(cd, CUDA_ERROR_INVALID_VALUE, call);
}

static int cu_misaligned(const cuda_driver_t *cd, size_t x)
{
    return x % cd->granularity != 0;
}

/*
 * Makes the instance's context current for one driver call. *pushed tells cu_ctx_leave whether
 * there is something to undo. Failure is reported against the context call that failed.
 */
static vpmm_dres_t cu_ctx_enter(cuda_driver_t *cd, int *pushed)
{
    CUcontext cur = NULL;
    CUresult r = g_cu.ctx_get_current(&cur);
    *pushed = 0;
    if (r != CUDA_SUCCESS)
        return cu_fail(cd, r, "cuCtxGetCurrent");
    if (cur == cd->ctx)
        return VPMM_DRV_OK;
    if (cur == NULL && cd->base.device == 0) {
        /* A thread with no context gets device 0's primary context and keeps it, exactly as the
         * runtime does on a thread's first CUDA call (its current device is 0 until it sets
         * one): later calls then cost one cuCtxGetCurrent, not a push and a pop (which is what
         * the malloc hot path needs). Another device's context is pushed and popped instead:
         * keeping it would change the thread's current device under the application. */
        r = g_cu.ctx_set_current(cd->ctx);
        if (r != CUDA_SUCCESS)
            return cu_fail(cd, r, "cuCtxSetCurrent");
        return VPMM_DRV_OK;
    }
    r = g_cu.ctx_push_current(cd->ctx);
    if (r != CUDA_SUCCESS)
        return cu_fail(cd, r, "cuCtxPushCurrent");
    *pushed = 1;
    return VPMM_DRV_OK;
}

/*
 * Undoes cu_ctx_enter. A failed pop is not reported: the call itself already happened (or
 * failed) and rule 1 forbids saying otherwise; the worst outcome is our primary context left
 * current on this thread, which is what the runtime would have made current anyway.
 */
static void cu_ctx_leave(int pushed)
{
    if (pushed) {
        CUcontext popped = NULL;
        (void)g_cu.ctx_pop_current(&popped);
    }
}

/* Runs `expr` (a CUresult) with the instance's context current; assigns its result to r. */
#define CU_IN_CTX(cd, r, expr)                                                                     \
    do {                                                                                           \
        int pushed_;                                                                               \
        vpmm_dres_t enter_ = cu_ctx_enter((cd), &pushed_);                                         \
        if (enter_ != VPMM_DRV_OK)                                                                 \
            return enter_;                                                                         \
        (r) = (expr);                                                                              \
        cu_ctx_leave(pushed_);                                                                     \
    } while (0)

/*
 * CU_RELAXED: CU_IN_CTX with this thread's capture mode relaxed for the call. While any thread
 * captures in CU_STREAM_CAPTURE_MODE_GLOBAL (the default), calls CUDA deems "potentially unsafe"
 * (cuMemCreate, cuMemMap, cuEventQuery, ...) fail and invalidate that capture, even on an
 * unrelated stream. vpmm makes such calls knowing they touch no captured stream (a graph pool
 * grows during its capture; another thread's malloc defragments), so it relaxes the mode around
 * them, as PyTorch's allocator does around cudaMalloc.
 */
#define CU_RELAXED(cd, r, expr)                                                                    \
    do {                                                                                           \
        CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;                                \
        int pushed_;                                                                               \
        vpmm_dres_t enter_ = cu_ctx_enter((cd), &pushed_);                                         \
        if (enter_ != VPMM_DRV_OK)                                                                 \
            return enter_;                                                                         \
        (void)g_cu.thread_exchange_capture_mode(&mode_);                                           \
        (r) = (expr);                                                                              \
        (void)g_cu.thread_exchange_capture_mode(&mode_);                                           \
        cu_ctx_leave(pushed_);                                                                     \
    } while (0)

/*
 * The check -> call -> translate step of most entry points, written once (as NCCL's CUDACHECK):
 * run the call (CU_IN_CTX, or CU_RELAXED for the calls a global capture would refuse) and, when
 * the driver refuses, return cu_fail's verdict for it, naming the driver call.
 */
#define CU_CHECK(cd, expr, call)                                                                   \
    do {                                                                                           \
        CUresult r_;                                                                               \
        CU_IN_CTX((cd), r_, (expr));                                                               \
        if (r_ != CUDA_SUCCESS)                                                                    \
            return cu_fail((cd), r_, (call));                                                      \
    } while (0)
#define CU_CHECK_RELAXED(cd, expr, call)                                                           \
    do {                                                                                           \
        CUresult r_;                                                                               \
        CU_RELAXED((cd), r_, (expr));                                                              \
        if (r_ != CUDA_SUCCESS)                                                                    \
            return cu_fail((cd), r_, (call));                                                      \
    } while (0)

/* ---- entry points ------------------------------------------------------------------------- */

static vpmm_dres_t cu_granularity(vpmm_driver_t *d, size_t *out_bytes)
{
    *out_bytes = cuda_of(d)->granularity; /* queried once at open */
    return VPMM_DRV_OK;
}

static vpmm_dres_t cu_va_reserve(vpmm_driver_t *d, size_t size, size_t align, uintptr_t *out_va)
{
    cuda_driver_t *cd = cuda_of(d);
    if (size == 0 || cu_misaligned(cd, size) || cu_misaligned(cd, align))
        return cu_invalid(cd, "cuMemAddressReserve");
    CUdeviceptr va = 0;
    CU_CHECK_RELAXED(cd, g_cu.mem_address_reserve(&va, size, align, 0, 0), "cuMemAddressReserve");
    *out_va = (uintptr_t)va;
    return VPMM_DRV_OK;
}

static vpmm_dres_t cu_va_free(vpmm_driver_t *d, uintptr_t va, size_t size)
{
    cuda_driver_t *cd = cuda_of(d);
    if (va == 0 || size == 0 || cu_misaligned(cd, va) || cu_misaligned(cd, size))
        return cu_invalid(cd, "cuMemAddressFree");
    CU_CHECK_RELAXED(cd, g_cu.mem_address_free((CUdeviceptr)va, size), "cuMemAddressFree");
    return VPMM_DRV_OK;
}

static vpmm_dres_t cu_mem_create(vpmm_driver_t *d, size_t size, vpmm_drv_handle_t *out_handle)
{
    cuda_driver_t *cd = cuda_of(d);
    if (size == 0 || cu_misaligned(cd, size))
        return cu_invalid(cd, "cuMemCreate");
    CUmemGenericAllocationHandle h = 0;
    CU_CHECK_RELAXED(cd, g_cu.mem_create(&h, size, &cd->prop, 0), "cuMemCreate");
    *out_handle = (vpmm_drv_handle_t)h;
    return VPMM_DRV_OK;
}

static vpmm_dres_t cu_mem_release(vpmm_driver_t *d, vpmm_drv_handle_t handle)
{
    cuda_driver_t *cd = cuda_of(d);
    CU_CHECK_RELAXED(cd, g_cu.mem_release((CUmemGenericAllocationHandle)handle), "cuMemRelease");
    return VPMM_DRV_OK;
}

/* The offset goes to the driver as is: if a driver refuses a non-zero offset, that is its answer
 * (returned, with its CUresult in last_code). */
static vpmm_dres_t cu_mem_map(vpmm_driver_t *d, uintptr_t va, size_t size, vpmm_drv_handle_t handle,
                              size_t offset)
{
    cuda_driver_t *cd = cuda_of(d);
    if (va == 0 || size == 0 || cu_misaligned(cd, va) || cu_misaligned(cd, size) ||
        cu_misaligned(cd, offset))
        return cu_invalid(cd, "cuMemMap");
    CUresult r;
    CU_RELAXED(
        cd, r,
        g_cu.mem_map((CUdeviceptr)va, size, offset, (CUmemGenericAllocationHandle)handle, 0));
    if (r != CUDA_SUCCESS)
        return cu_fail(cd, r, "cuMemMap");
    return VPMM_DRV_OK;
}

static vpmm_dres_t cu_mem_unmap(vpmm_driver_t *d, uintptr_t va, size_t size)
{
    cuda_driver_t *cd = cuda_of(d);
    if (va == 0 || size == 0 || cu_misaligned(cd, va) || cu_misaligned(cd, size))
        return cu_invalid(cd, "cuMemUnmap");
    CU_CHECK_RELAXED(cd, g_cu.mem_unmap((CUdeviceptr)va, size), "cuMemUnmap");
    return VPMM_DRV_OK;
}

static CUmemAccessDesc cu_access_desc(int device, CUmemAccess_flags flags)
{
    CUmemAccessDesc a;
    memset(&a, 0, sizeof a);
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = device;
    a.flags = flags;
    return a;
}

static int cu_bad_peer(const cuda_driver_t *cd, int peer)
{
    return peer < 0 || peer >= cd->base.device_count;
}

/* One cuMemSetAccess over the whole range, which may span several adjacent mappings: read-write
 * for the own device and every peer, one descriptor each (rule 9). */
static vpmm_dres_t cu_set_access(vpmm_driver_t *d, uintptr_t va, size_t size, const int *peers,
                                 size_t npeers)
{
    cuda_driver_t *cd = cuda_of(d);
    CUmemAccessDesc desc[VPMM_DRV_MAX_DEVICES + 1];
    if (va == 0 || size == 0 || cu_misaligned(cd, va) || cu_misaligned(cd, size) ||
        npeers > VPMM_DRV_MAX_DEVICES || (npeers > 0 && peers == NULL))
        return cu_invalid(cd, "cuMemSetAccess");
    desc[0] = cu_access_desc(d->device, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    for (size_t i = 0; i < npeers; i++) {
        if (cu_bad_peer(cd, peers[i]))
            return cu_invalid(cd, "cuMemSetAccess");
        desc[i + 1] = cu_access_desc(peers[i], CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    }
    CU_CHECK_RELAXED(cd, g_cu.mem_set_access((CUdeviceptr)va, size, desc, npeers + 1),
                     "cuMemSetAccess");
    return VPMM_DRV_OK;
}

/* The undo of a grant: the peer's access taken away (PROT_NONE), never the own device's. */
static vpmm_dres_t cu_revoke_access(vpmm_driver_t *d, uintptr_t va, size_t size, int peer)
{
    cuda_driver_t *cd = cuda_of(d);
    if (va == 0 || size == 0 || cu_misaligned(cd, va) || cu_misaligned(cd, size) ||
        cu_bad_peer(cd, peer) || peer == d->device)
        return cu_invalid(cd, "cuMemSetAccess");
    CUmemAccessDesc desc = cu_access_desc(peer, CU_MEM_ACCESS_FLAGS_PROT_NONE);
    CU_CHECK_RELAXED(cd, g_cu.mem_set_access((CUdeviceptr)va, size, &desc, 1), "cuMemSetAccess");
    return VPMM_DRV_OK;
}

static vpmm_dres_t cu_get_access(vpmm_driver_t *d, uintptr_t va, int device, int *out_rw)
{
    cuda_driver_t *cd = cuda_of(d);
    if (va == 0 || out_rw == NULL || cu_bad_peer(cd, device))
        return cu_invalid(cd, "cuMemGetAccess");
    CUmemLocation loc;
    memset(&loc, 0, sizeof loc);
    loc.type = CU_MEM_LOCATION_TYPE_DEVICE;
    loc.id = device;
    unsigned long long flags = 0;
    CU_CHECK_RELAXED(cd, g_cu.mem_get_access(&flags, &loc, (CUdeviceptr)va), "cuMemGetAccess");
    *out_rw = flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return VPMM_DRV_OK;
}

/* The special handles name the own device's streams (rule 9). */
static int cu_special_stream(vpmm_stream_t s)
{
    return (uintptr_t)s <= 2; /* NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD */
}

/* The context a stream's work runs in (the instance's own for the special handles). */
static vpmm_dres_t cu_stream_ctx(cuda_driver_t *cd, vpmm_stream_t s, CUcontext *out)
{
    if (cu_special_stream(s)) {
        *out = cd->ctx;
        return VPMM_DRV_OK;
    }
    CUresult r = g_cu.stream_get_ctx((CUstream)s, out);
    if (r != CUDA_SUCCESS)
        return cu_fail(cd, r, "cuStreamGetCtx");
    return VPMM_DRV_OK;
}

static vpmm_dres_t cu_stream_device(vpmm_driver_t *d, vpmm_stream_t stream, int *out_device)
{
    cuda_driver_t *cd = cuda_of(d);
    CUcontext ctx = NULL;
    CUdevice dev = 0;
    if (out_device == NULL)
        return cu_invalid(cd, "cuStreamGetCtx");
    vpmm_dres_t st = cu_stream_ctx(cd, stream, &ctx);
    if (st != VPMM_DRV_OK)
        return st;
    if (ctx == cd->ctx) {
        *out_device = d->device;
        return VPMM_DRV_OK;
    }
    CUresult r = g_cu.ctx_push_current(ctx);
    if (r != CUDA_SUCCESS)
        return cu_fail(cd, r, "cuCtxPushCurrent");
    r = g_cu.ctx_get_device(&dev);
    cu_ctx_leave(1);
    if (r != CUDA_SUCCESS)
        return cu_fail(cd, r, "cuCtxGetDevice");
    *out_device = (int)dev;
    return VPMM_DRV_OK;
}

/* An event of the own context, or of stream on's (an event is recorded only on a stream of its
 * own device: rule 9). */
static vpmm_dres_t cu_event_create(vpmm_driver_t *d, vpmm_stream_t on, vpmm_drv_event_t *out_event)
{
    cuda_driver_t *cd = cuda_of(d);
    CUevent ev = NULL;
    CUcontext ctx = cd->ctx;
    CUresult r;
    if (on != NULL) {
        vpmm_dres_t st = cu_stream_ctx(cd, on, &ctx);
        if (st != VPMM_DRV_OK)
            return st;
    }
    if (ctx == cd->ctx) {
        CU_RELAXED(cd, r, g_cu.event_create(&ev, CU_EVENT_DISABLE_TIMING));
    } else {
        CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
        r = g_cu.ctx_push_current(ctx);
        if (r != CUDA_SUCCESS)
            return cu_fail(cd, r, "cuCtxPushCurrent");
        (void)g_cu.thread_exchange_capture_mode(&mode);
        r = g_cu.event_create(&ev, CU_EVENT_DISABLE_TIMING);
        (void)g_cu.thread_exchange_capture_mode(&mode);
        cu_ctx_leave(1);
    }
    if (r != CUDA_SUCCESS)
        return cu_fail(cd, r, "cuEventCreate");
    *out_event = (vpmm_drv_event_t)ev;
    return VPMM_DRV_OK;
}

/* A new POSIX file descriptor for the handle (rule 10); the caller closes it. */
static vpmm_dres_t cu_mem_export(vpmm_driver_t *d, vpmm_drv_handle_t handle,
                                 vpmm_drv_shareable_t *out)
{
    cuda_driver_t *cd = cuda_of(d);
    int fd = -1;
    if (out == NULL)
        return cu_invalid(cd, "cuMemExportToShareableHandle");
    if (!d->exportable)
        return cu_fail(cd, CUDA_ERROR_NOT_SUPPORTED, "cuMemExportToShareableHandle");
    CUresult r;
    CU_RELAXED(cd, r,
               g_cu.mem_export_to_shareable_handle(&fd, (CUmemGenericAllocationHandle)handle,
                                                   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    if (r != CUDA_SUCCESS)
        return cu_fail(cd, r, "cuMemExportToShareableHandle");
    out->fd = fd;
    out->offset = 0;
    return VPMM_DRV_OK;
}

static vpmm_dres_t cu_mem_import(vpmm_driver_t *d, const vpmm_drv_shareable_t *in,
                                 vpmm_drv_handle_t *out_handle)
{
    cuda_driver_t *cd = cuda_of(d);
    CUmemGenericAllocationHandle h = 0;
    if (in == NULL || out_handle == NULL || in->fd < 0 || in->offset != 0)
        return cu_invalid(cd, "cuMemImportFromShareableHandle");
    CUresult r;
    CU_RELAXED(cd, r,
               g_cu.mem_import_from_shareable_handle(&h, (void *)(uintptr_t)in->fd,
                                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    if (r != CUDA_SUCCESS)
        return cu_fail(cd, r, "cuMemImportFromShareableHandle");
    *out_handle = (vpmm_drv_handle_t)h;
    return VPMM_DRV_OK;
}

static vpmm_dres_t cu_event_destroy(vpmm_driver_t *d, vpmm_drv_event_t event)
{
    cuda_driver_t *cd = cuda_of(d);
    CU_CHECK_RELAXED(cd, g_cu.event_destroy((CUevent)event), "cuEventDestroy");
    return VPMM_DRV_OK;
}

/* NULL stream: the legacy default stream of the instance's (primary) context. */
static vpmm_dres_t cu_event_record(vpmm_driver_t *d, vpmm_drv_event_t event, vpmm_stream_t stream)
{
    cuda_driver_t *cd = cuda_of(d);
    CU_CHECK(cd, g_cu.event_record((CUevent)event, (CUstream)stream), "cuEventRecord");
    return VPMM_DRV_OK;
}

/* NOT_READY is an answer, not a failure: last_code/last_call are left alone for it. */
static vpmm_dres_t cu_event_query(vpmm_driver_t *d, vpmm_drv_event_t event)
{
    cuda_driver_t *cd = cuda_of(d);
    CUresult r;
    CU_RELAXED(cd, r, g_cu.event_query((CUevent)event));
    if (r == CUDA_SUCCESS)
        return VPMM_DRV_OK;
    if (r == CUDA_ERROR_NOT_READY)
        return VPMM_DRV_NOT_READY;
    return cu_fail(cd, r, "cuEventQuery");
}

static vpmm_dres_t cu_stream_wait_event(vpmm_driver_t *d, vpmm_stream_t stream,
                                        vpmm_drv_event_t event)
{
    cuda_driver_t *cd = cuda_of(d);
    CUresult r;
    CU_IN_CTX(cd, r,
              g_cu.stream_wait_event((CUstream)stream, (CUevent)event, CU_EVENT_WAIT_DEFAULT));
    if (r != CUDA_SUCCESS)
        return cu_fail(cd, r, "cuStreamWaitEvent");
    return VPMM_DRV_OK;
}

/*
 * The dependency outputs are not wanted (NULL). The id is 0 when not capturing; out_id and
 * out_graph are optional. The graph is only asked for when wanted, and returned only for an
 * ACTIVE capture: for any other status CUDA returns no valid data but the status itself.
 */
static vpmm_dres_t cu_capture_info(vpmm_driver_t *d, vpmm_stream_t stream,
                                   vpmm_capture_status_t *out_status, uint64_t *out_id,
                                   vpmm_graph_t *out_graph)
{
    cuda_driver_t *cd = cuda_of(d);
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t id = 0;
    CUgraph graph = NULL;
    CUgraph *graph_out = out_graph != NULL ? &graph : NULL;
    CUresult r;
    if (g_cu.stream_get_capture_info_v3 != NULL)
        CU_IN_CTX(cd, r,
                  g_cu.stream_get_capture_info_v3((CUstream)stream, &cs, &id, graph_out, NULL, NULL,
                                                  NULL));
    else
        CU_IN_CTX(
            cd, r,
            g_cu.stream_get_capture_info_v2((CUstream)stream, &cs, &id, graph_out, NULL, NULL));
    if (r != CUDA_SUCCESS)
        return cu_fail(cd, r, "cuStreamGetCaptureInfo");
    switch (cs) {
    case CU_STREAM_CAPTURE_STATUS_ACTIVE:
        *out_status = VPMM_CAPTURE_ACTIVE;
        break;
    case CU_STREAM_CAPTURE_STATUS_INVALIDATED:
        *out_status = VPMM_CAPTURE_INVALIDATED;
        break;
    default:
        *out_status = VPMM_CAPTURE_NONE;
        id = 0;
        break;
    }
    if (out_id != NULL)
        *out_id = (uint64_t)id;
    if (out_graph != NULL)
        *out_graph = cs == CU_STREAM_CAPTURE_STATUS_ACTIVE ? (vpmm_graph_t)graph : NULL;
    return VPMM_DRV_OK;
}

static vpmm_dres_t cu_mem_get_info(vpmm_driver_t *d, size_t *out_free, size_t *out_total)
{
    cuda_driver_t *cd = cuda_of(d);
    size_t free_bytes = 0, total_bytes = 0;
    CU_CHECK_RELAXED(cd, g_cu.mem_get_info(&free_bytes, &total_bytes), "cuMemGetInfo");
    *out_free = free_bytes;
    *out_total = total_bytes;
    return VPMM_DRV_OK;
}

static vpmm_dres_t cu_synchronize(vpmm_driver_t *d)
{
    cuda_driver_t *cd = cuda_of(d);
    CU_CHECK(cd, g_cu.ctx_synchronize(), "cuCtxSynchronize");
    return VPMM_DRV_OK;
}

/* See "Graphs" in the head comment for the legacy stream. */
static vpmm_dres_t cu_begin_capture(vpmm_driver_t *d, vpmm_stream_t stream,
                                    vpmm_capture_mode_t mode)
{
    cuda_driver_t *cd = cuda_of(d);
    CUresult r;
    CU_IN_CTX(cd, r, g_cu.stream_begin_capture((CUstream)stream, (CUstreamCaptureMode)mode));
    if (r == CUDA_SUCCESS)
        return VPMM_DRV_OK;
    vpmm_dres_t res = cu_fail(cd, r, "cuStreamBeginCapture");
    if ((CUstream)stream == NULL || (CUstream)stream == CU_STREAM_LEGACY)
        res = VPMM_DRV_NOT_SUPPORTED;
    return res;
}

/* An invalidated capture ends with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED and no graph. A NULL
 * out_graph is refused here (the capture goes on), as the host backend does. */
static vpmm_dres_t cu_end_capture(vpmm_driver_t *d, vpmm_stream_t stream, vpmm_graph_t *out_graph)
{
    cuda_driver_t *cd = cuda_of(d);
    if (out_graph == NULL)
        return cu_invalid(cd, "cuStreamEndCapture");
    CUgraph graph = NULL;
    CU_CHECK(cd, g_cu.stream_end_capture((CUstream)stream, &graph), "cuStreamEndCapture");
    *out_graph = (vpmm_graph_t)graph;
    return VPMM_DRV_OK;
}

static vpmm_dres_t cu_user_object_create(vpmm_driver_t *d, vpmm_drv_uobj_fn destroy, void *arg,
                                         vpmm_drv_uobj_t *out)
{
    cuda_driver_t *cd = cuda_of(d);
    if (destroy == NULL || out == NULL)
        return cu_invalid(cd, "cuUserObjectCreate");
    CUuserObject obj = NULL;
    CUresult r;
    CU_IN_CTX(cd, r,
              g_cu.user_object_create(&obj, arg, destroy, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
    if (r != CUDA_SUCCESS)
        return cu_fail(cd, r, "cuUserObjectCreate");
    *out = (vpmm_drv_uobj_t)obj;
    return VPMM_DRV_OK;
}

static vpmm_dres_t cu_graph_retain_user_object(vpmm_driver_t *d, vpmm_graph_t graph,
                                               vpmm_drv_uobj_t obj)
{
    cuda_driver_t *cd = cuda_of(d);
    CUresult r;
    CU_IN_CTX(cd, r,
              g_cu.graph_retain_user_object((CUgraph)graph, (CUuserObject)obj, 1,
                                            CU_GRAPH_USER_OBJECT_MOVE));
    if (r != CUDA_SUCCESS)
        return cu_fail(cd, r, "cuGraphRetainUserObject");
    return VPMM_DRV_OK;
}

static vpmm_dres_t cu_user_object_release(vpmm_driver_t *d, vpmm_drv_uobj_t obj)
{
    cuda_driver_t *cd = cuda_of(d);
    CU_CHECK(cd, g_cu.user_object_release((CUuserObject)obj, 1), "cuUserObjectRelease");
    return VPMM_DRV_OK;
}

static vpmm_dres_t cu_graph_destroy(vpmm_driver_t *d, vpmm_graph_t graph)
{
    cuda_driver_t *cd = cuda_of(d);
    CUresult r;
    if (graph == NULL)
        return cu_invalid(cd, "cuGraphDestroy");
    CU_IN_CTX(cd, r, g_cu.graph_destroy((CUgraph)graph));
    if (r != CUDA_SUCCESS)
        return cu_fail(cd, r, "cuGraphDestroy");
    return VPMM_DRV_OK;
}

static void cu_close(vpmm_driver_t *d)
{
    if (d == NULL)
        return;
    cuda_driver_t *cd = cuda_of(d);
    (void)g_cu.primary_ctx_release(cd->device);
    free(cd);
}

/* ---- open --------------------------------------------------------------------------------- */

/*
 * Device -1: the device of the calling thread's current context, else device 0. Since CUDA 12.0
 * cudaSetDevice() makes the primary context current at once, so "the runtime's current device"
 * and "the current context's device" agree for runtime applications.
 */
static CUresult cu_pick_device(int ordinal, CUdevice *out_dev)
{
    if (ordinal == -1) {
        CUcontext cur = NULL;
        CUresult r = g_cu.ctx_get_current(&cur);
        if (r != CUDA_SUCCESS)
            return r;
        if (cur != NULL)
            return g_cu.ctx_get_device(out_dev);
        ordinal = 0;
    }
    if (ordinal < 0 || ordinal >= g_cu.device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    return g_cu.device_get(out_dev, ordinal);
}

/*
 * Whether this device's handles can be created exportable as POSIX file descriptors: the attribute
 * says so, and one granule created that way really is (some virtualised setups advertise it and
 * refuse the creation). Costs one small create and release, at open.
 */
static int cu_probe_exportable(cuda_driver_t *cd)
{
    int supported = 0;
    CUmemGenericAllocationHandle h = 0;
    CUmemAllocationProp prop = cd->prop;
    if (g_cu.device_get_attribute(&supported,
                                  CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                                  cd->device) != CUDA_SUCCESS ||
        !supported)
        return 0;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    if (g_cu.mem_create(&h, cd->granularity, &prop, 0) != CUDA_SUCCESS)
        return 0;
    (void)g_cu.mem_release(h);
    return 1;
}

/* Bit k: device k can be granted access to this device's memory (the own bit set). */
static uint64_t cu_peer_capable(const cuda_driver_t *cd)
{
    uint64_t mask = (uint64_t)1 << (int)cd->device;
    for (int k = 0; k < g_cu.device_count && k < VPMM_DRV_MAX_DEVICES; k++) {
        int can = 0;
        CUdevice peer = 0;
        if (k == (int)cd->device || g_cu.device_get(&peer, k) != CUDA_SUCCESS)
            continue;
        if (g_cu.device_can_access_peer(&can, peer, cd->device) == CUDA_SUCCESS && can)
            mask |= (uint64_t)1 << k;
    }
    return mask;
}

vpmm_dres_t vpmm_driver_cuda_open(int device, unsigned flags, vpmm_driver_t **out)
{
    if (out == NULL)
        return VPMM_DRV_INVALID;
    *out = NULL;
    vpmm_dres_t st = cu_load();
    if (st != VPMM_DRV_OK)
        return st;

    cuda_driver_t *cd = calloc(1, sizeof *cd);
    if (cd == NULL)
        return VPMM_DRV_ERROR;
    CUresult r = cu_pick_device(device, &cd->device);
    if (r != CUDA_SUCCESS) {
        /* A device that does not exist is "no device", whatever the driver calls it. */
        st = (r == CUDA_ERROR_INVALID_DEVICE) ? VPMM_DRV_NO_DEVICE : cu_map_result(r);
        goto fail_free;
    }

    int vmm = 0;
    r = g_cu.device_get_attribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                                  cd->device);
    if (r != CUDA_SUCCESS) {
        st = cu_map_result(r);
        goto fail_free;
    }
    if (!vmm) {
        st = VPMM_DRV_NOT_SUPPORTED;
        goto fail_free;
    }

    r = g_cu.primary_ctx_retain(&cd->ctx, cd->device);
    if (r != CUDA_SUCCESS) {
        st = cu_map_result(r);
        goto fail_free;
    }

    cd->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    cd->prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    cd->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    cd->prop.location.id = (int)cd->device;

    r = g_cu.mem_get_allocation_granularity(&cd->granularity, &cd->prop,
                                            CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (r != CUDA_SUCCESS || cd->granularity == 0) {
        st = (r != CUDA_SUCCESS) ? cu_map_result(r) : VPMM_DRV_ERROR;
        goto fail_release;
    }

    vpmm_driver_t *b = &cd->base;
    b->name = "cuda";
    b->last_code = 0;
    b->last_call = NULL;
    b->device = (int)cd->device;
    b->device_count =
        g_cu.device_count < VPMM_DRV_MAX_DEVICES ? g_cu.device_count : VPMM_DRV_MAX_DEVICES;
    b->peer_capable = cu_peer_capable(cd);
    if ((flags & VPMM_DRV_OPEN_EXPORTABLE) && cu_probe_exportable(cd)) {
        b->exportable = 1;
        cd->prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    }
    b->granularity = cu_granularity;
    b->va_reserve = cu_va_reserve;
    b->va_free = cu_va_free;
    b->mem_create = cu_mem_create;
    b->mem_release = cu_mem_release;
    b->mem_map = cu_mem_map;
    b->mem_unmap = cu_mem_unmap;
    b->set_access = cu_set_access;
    b->event_create = cu_event_create;
    b->event_destroy = cu_event_destroy;
    b->event_record = cu_event_record;
    b->event_query = cu_event_query;
    b->stream_wait_event = cu_stream_wait_event;
    b->capture_info = cu_capture_info;
    b->mem_get_info = cu_mem_get_info;
    b->synchronize = cu_synchronize;
    b->begin_capture = cu_begin_capture;
    b->end_capture = cu_end_capture;
    b->user_object_create = cu_user_object_create;
    b->graph_retain_user_object = cu_graph_retain_user_object;
    b->user_object_release = cu_user_object_release;
    b->graph_destroy = cu_graph_destroy;
    b->revoke_access = cu_revoke_access;
    b->get_access = cu_get_access;
    b->stream_device = cu_stream_device;
    b->mem_export = cu_mem_export;
    b->mem_import = cu_mem_import;
    b->close = cu_close;
    *out = b;
    return VPMM_DRV_OK;

fail_release:
    (void)g_cu.primary_ctx_release(cd->device);
fail_free:
    free(cd);
    return st;
}

int vpmm_driver_cuda_device_count(void)
{
    return cu_load() == VPMM_DRV_OK ? g_cu.device_count : 0;
}

void vpmm_driver_cuda_load_error(char *buf, size_t len)
{
    if (len == 0)
        return;
    buf[0] = '\0';
    if (cu_load() == VPMM_DRV_OK)
        return;
    if (g_cu.call == NULL)
        snprintf(buf, len, "the driver loader could not run");
    else if (g_cu.lib == NULL)
        snprintf(buf, len, "libcuda.so.1 could not be loaded");
    else if (g_cu.get_proc_address == NULL)
        snprintf(buf, len, "the driver predates CUDA 12.0 (no cuGetProcAddress_v2)");
    else if (g_cu.code == CUDA_ERROR_NO_DEVICE)
        snprintf(buf, len, "%s: no CUDA-capable device", g_cu.call);
    else
        snprintf(buf, len, "%s failed (CUresult %d)", g_cu.call, (int)g_cu.code);
}
