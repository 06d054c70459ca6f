/*
 * driver.h — the backend contract: the only way the core pool touches memory, streams and events.
 *
 * A backend fills a vpmm_driver_t (embedded as the first member of its own state) with function
 * pointers. The core never includes cuda.h; driver_cuda.c does, and loads the driver at run time,
 * so every binary starts on a machine without one. driver_host.c emulates the same contract on the
 * CPU, and driver_fault.c wraps any backend to count calls and inject failures.
 *
 * Contract, for every backend and every entry point:
 *  1. Result. Each call returns a vpmm_dres_t. VPMM_DRV_OK means it did exactly what it says. Any
 *     other value means it did nothing: a failed create leaves no handle, a failed map leaves the
 *     range unmapped, a failed reserve leaves no VA. On failure the backend stores its raw error in
 *     last_code and the driver function's name in last_call (CUDA names on every backend).
 *  2. Granularity. granularity() reports G (2 MiB on an H100). va_reserve sizes and alignments,
 *     mem_create sizes, and map/unmap/set_access addresses, sizes and offsets are multiples of G;
 *     a call breaking this returns VPMM_DRV_INVALID and does nothing.
 *  3. Mappings. mem_map(va, size, h, offset) maps handle h at va, which must lie inside one
 *     reservation and be unmapped. Only whole handles are mapped: offset 0 and size = the handle's
 *     size (the CUDA 13.0 driver 580 on an H100 refuses a non-zero offset, and a smaller size,
 *     with CUDA_ERROR_NOT_SUPPORTED; the host backend refuses them the same way). A handle may be
 *     mapped at several addresses at once (aliasing). mem_unmap(va, size) takes exactly one whole
 *     earlier mapping (never part of one, never two). A new mapping is inaccessible until
 *     set_access, which may span several adjacent mappings. va_free requires the whole
 *     reservation to be unmapped.
 *  4. Ownership. The caller owns handles from mem_create to mem_release and events from
 *     event_create to event_destroy. mem_release of a handle that is still mapped is allowed; the
 *     memory goes back when its last mapping is unmapped (as in CUDA). Streams belong to the
 *     application: the driver never creates or destroys them; NULL is the legacy default stream.
 *  5. Ordering. event_record captures the work enqueued on a stream so far; event_query returns
 *     VPMM_DRV_OK once that work is done and VPMM_DRV_NOT_READY before; stream_wait_event makes
 *     later work on a stream wait for an event on the GPU (the host never blocks). synchronize()
 *     blocks the host until the device is idle (used by pool destruction only).
 *  6. Capture. capture_info reports whether a stream is being captured into a graph and the
 *     capture's id. event_query on an event recorded in a capturing stream is an error (and, in
 *     CUDA, invalidates the capture): callers never do it. The legacy default stream (NULL, or
 *     CU_STREAM_LEGACY = 0x1) is never captured — CUDA refuses to begin a capture on it, and so
 *     does the host backend — so callers may skip the query for it (the malloc hot path does).
 *     Legacy-stream work (an event record, a wait) while a blocking stream — a per-thread stream
 *     — is being captured fails and invalidates that capture (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT):
 *     the core records on the legacy stream only while it knows of no capture.
 *  6b. Stream handles. CU_STREAM_PER_THREAD (0x2) names the calling thread's own per-thread
 *     stream, a different stream in each thread: only that thread may pass it (the core keys
 *     streams by thread for it, internal.h). NULL is always the legacy stream here (the CUDA
 *     backend looks its entry points up with CU_GET_PROC_ADDRESS_LEGACY_STREAM; the core turns
 *     stream 0 of a per-thread program into CU_STREAM_PER_THREAD itself). The legacy stream waits
 *     for the earlier work of every blocking stream (per-thread streams among them) and they for
 *     its earlier work; the host backend emulates this (driver_host.h).
 *  7. Threads. A driver instance belongs to one pool. Its entries may be called from several
 *     threads at once: the pool calls most of them under its lock, but creates and releases
 *     handles outside it (pool.c, trim.c), so those slow calls do not block other threads. The
 *     CUDA driver is thread-safe; the host backend and the fault decorator serialise their own
 *     state. last_code / last_call hold the instance's latest failure (atomically; with
 *     concurrent failures, one of them). close() is called once, by one thread, and releases
 *     everything the instance itself holds (not the caller's handles).
 *  8. Graphs. begin_capture / end_capture wrap cuStreamBeginCapture / cuStreamEndCapture
 *     (end_capture returns the captured graph; the caller owns it). capture_info also returns the
 *     graph being captured when asked (out_graph may be NULL). user_object_create makes a user
 *     object with one reference, owned by the caller; graph_retain_user_object MOVES that one
 *     reference to the graph (the caller no longer owns it); user_object_release drops one the
 *     caller owns. When the last reference goes (the graph and every executable graph made from
 *     it destroyed, their launches complete), the destructor runs once, on a thread of the
 *     driver's choosing (see vpmm_drv_uobj_fn).
 *  9. Devices. An instance allocates on one device: `device`, its ordinal among the `device_count`
 *     devices the backend sees (CUDA: the ordinal of cuDeviceGet; host: a device of the emulated
 *     node, driver_host.h). Handles it creates live there. Virtual addresses are one space for
 *     every device of the process, and access is per device: a mapping is usable by a device only
 *     once set_access named it. set_access always grants the instance's own device, plus each
 *     device of peers[] (read-write); revoke_access takes one peer's access away again (never
 *     the own device's: the undo of a grant that failed part-way); get_access says whether a
 *     device may read and write a mapped address (the validator's query: the fault and counting
 *     decorators neither count nor fail it). `peer_capable` has bit k set when device k can be
 * granted access at all (CUDA: cuDeviceCanAccessPeer; the own device's bit is set). Streams belong
 * to a device too: stream_device says which (the special handles NULL, 0x1 and 0x2 name the
 *     instance's own device's streams, and cost no call). An event is recorded only on a stream
 *     of the device it was created on (CUDA refuses others, and so does the host backend):
 *     event_create(d, NULL, ..) makes one for the own device's streams, event_create(d, s, ..)
 *     one for stream s's device. Waits and queries work across devices.
 * 10. Shareable handles (CUDA IPC). When `exportable` is set, every handle mem_create makes can be
 *     exported: mem_export returns a new file descriptor for it (the caller closes it) plus a
 *     backend-private offset (0 on CUDA); another process that obtained that descriptor (e.g.
 *     with pidfd_getfd) and the handle's size turns it into a handle of its own with mem_import,
 *     which it maps like any other (and releases with mem_release); the descriptor may be closed
 *     after the import. The memory lives until its last handle and mapping are gone, in every
 *     process. Without `exportable`, mem_export returns VPMM_DRV_NOT_SUPPORTED.
 */
#ifndef VPMM_DRIVER_H
#define VPMM_DRIVER_H

#include <stddef.h>
#include <stdint.h>

#include "vpmm.h"

typedef enum vpmm_dres {
    VPMM_DRV_OK = 0,
    VPMM_DRV_NOT_READY = 1,     /* event_query: the work is not finished yet */
    VPMM_DRV_OUT_OF_MEMORY = 2, /* mem_create: no device memory; va_reserve: no address space */
    VPMM_DRV_NO_DEVICE = 3,     /* open: no driver library, no device, or an unusable driver */
    VPMM_DRV_NOT_SUPPORTED = 4, /* open: the device cannot do virtual memory management */
    VPMM_DRV_INVALID = 5,       /* arguments break the contract (alignment, unknown handle, ...) */
    VPMM_DRV_ERROR = 6,         /* anything else the driver reported */
} vpmm_dres_t;

typedef enum vpmm_capture_status {
    VPMM_CAPTURE_NONE = 0,        /* the stream is not being captured */
    VPMM_CAPTURE_ACTIVE = 1,      /* the stream is being captured */
    VPMM_CAPTURE_INVALIDATED = 2, /* the capture was invalidated and must be ended */
} vpmm_capture_status_t;

/* One entry per function pointer below; used by counters and fault injection. */
typedef enum vpmm_drv_entry {
    VPMM_DRV_GRANULARITY = 0,
    VPMM_DRV_VA_RESERVE,
    VPMM_DRV_VA_FREE,
    VPMM_DRV_MEM_CREATE,
    VPMM_DRV_MEM_RELEASE,
    VPMM_DRV_MEM_MAP,
    VPMM_DRV_MEM_UNMAP,
    VPMM_DRV_SET_ACCESS,
    VPMM_DRV_EVENT_CREATE,
    VPMM_DRV_EVENT_DESTROY,
    VPMM_DRV_EVENT_RECORD,
    VPMM_DRV_EVENT_QUERY,
    VPMM_DRV_STREAM_WAIT_EVENT,
    VPMM_DRV_CAPTURE_INFO,
    VPMM_DRV_MEM_GET_INFO,
    VPMM_DRV_SYNCHRONIZE,
    VPMM_DRV_BEGIN_CAPTURE,
    VPMM_DRV_END_CAPTURE,
    VPMM_DRV_USER_OBJECT_CREATE,
    VPMM_DRV_GRAPH_RETAIN_USER_OBJECT,
    VPMM_DRV_USER_OBJECT_RELEASE,
    VPMM_DRV_GRAPH_DESTROY,
    VPMM_DRV_REVOKE_ACCESS,
    VPMM_DRV_GET_ACCESS,
    VPMM_DRV_STREAM_DEVICE,
    VPMM_DRV_MEM_EXPORT,
    VPMM_DRV_MEM_IMPORT,
    VPMM_DRV_ENTRY_COUNT
} vpmm_drv_entry_t;

/* The CUDA name of an entry ("cuMemCreate"), for messages. */
const char *vpmm_drv_entry_name(vpmm_drv_entry_t entry);

typedef uint64_t vpmm_drv_handle_t; /* a physical allocation (CUmemGenericAllocationHandle) */
typedef struct vpmm_drv_event *vpmm_drv_event_t; /* an event (CUevent) */
typedef struct vpmm_drv_uobj *vpmm_drv_uobj_t;   /* a user object (CUuserObject) */

/* Capture modes, with the values of cudaStreamCaptureMode / CUstreamCaptureMode. */
typedef enum vpmm_capture_mode {
    VPMM_CAPTURE_MODE_GLOBAL = 0,
    VPMM_CAPTURE_MODE_THREAD_LOCAL = 1,
    VPMM_CAPTURE_MODE_RELAXED = 2,
} vpmm_capture_mode_t;

/* A user object's destructor. CUDA runs it on an internal thread once the last reference is gone
 * (graph and executable graphs destroyed, their launches complete); it must not call CUDA and
 * must not block on anything a CUDA call might hold. */
typedef void (*vpmm_drv_uobj_fn)(void *arg);

/* A handle exported for another process (rule 10): a file descriptor the exporter created for it
 * (the caller owns it), the handle's size, and where the memory begins in what the descriptor
 * names (0 on CUDA; the host backend's handles are extents of one file). */
typedef struct vpmm_drv_shareable {
    int fd;
    uint64_t offset;
    size_t size;
} vpmm_drv_shareable_t;

/* The most devices a backend reports (device_count), so that a set of them fits a uint64_t. */
#define VPMM_DRV_MAX_DEVICES 64

typedef struct vpmm_driver vpmm_driver_t;

struct vpmm_driver {
    const char *name; /* "cuda", "host", or a wrapper's name */

    /* Raw error of the latest failed call on this instance (rule 1). */
    _Atomic int last_code; /* atomic: entries may run on several threads (rule 7) */
    const char *_Atomic last_call;

    /* Rule 9: what the instance allocates on, set by open and never changed. */
    int device;            /* this instance's device ordinal */
    int device_count;      /* devices the backend sees (<= VPMM_DRV_MAX_DEVICES) */
    uint64_t peer_capable; /* bit k: device k can be granted access (the own device's bit too) */
    int exportable;        /* rule 10: mem_create's handles can be exported */

    vpmm_dres_t (*granularity)(vpmm_driver_t *d, size_t *out_bytes);

    vpmm_dres_t (*va_reserve)(vpmm_driver_t *d, size_t size, size_t align, uintptr_t *out_va);
    vpmm_dres_t (*va_free)(vpmm_driver_t *d, uintptr_t va, size_t size);

    vpmm_dres_t (*mem_create)(vpmm_driver_t *d, size_t size, vpmm_drv_handle_t *out_handle);
    vpmm_dres_t (*mem_release)(vpmm_driver_t *d, vpmm_drv_handle_t handle);
    vpmm_dres_t (*mem_map)(vpmm_driver_t *d, uintptr_t va, size_t size, vpmm_drv_handle_t handle,
                           size_t offset);
    vpmm_dres_t (*mem_unmap)(vpmm_driver_t *d, uintptr_t va, size_t size);
    /* Rule 9: read-write access to [va, va + size) for the own device and peers[0..npeers). */
    vpmm_dres_t (*set_access)(vpmm_driver_t *d, uintptr_t va, size_t size, const int *peers,
                              size_t npeers);

    /* Rule 9: an event for the streams of the own device (on == NULL) or of stream on's device. */
    vpmm_dres_t (*event_create)(vpmm_driver_t *d, vpmm_stream_t on, vpmm_drv_event_t *out_event);
    vpmm_dres_t (*event_destroy)(vpmm_driver_t *d, vpmm_drv_event_t event);
    vpmm_dres_t (*event_record)(vpmm_driver_t *d, vpmm_drv_event_t event, vpmm_stream_t stream);
    vpmm_dres_t (*event_query)(vpmm_driver_t *d, vpmm_drv_event_t event);
    vpmm_dres_t (*stream_wait_event)(vpmm_driver_t *d, vpmm_stream_t stream,
                                     vpmm_drv_event_t event);

    vpmm_dres_t (*capture_info)(vpmm_driver_t *d, vpmm_stream_t stream,
                                vpmm_capture_status_t *out_status, uint64_t *out_id,
                                vpmm_graph_t *out_graph);

    vpmm_dres_t (*mem_get_info)(vpmm_driver_t *d, size_t *out_free, size_t *out_total);
    vpmm_dres_t (*synchronize)(vpmm_driver_t *d);

    /* Graphs (rule 8). */
    vpmm_dres_t (*begin_capture)(vpmm_driver_t *d, vpmm_stream_t stream, vpmm_capture_mode_t mode);
    vpmm_dres_t (*end_capture)(vpmm_driver_t *d, vpmm_stream_t stream, vpmm_graph_t *out_graph);
    vpmm_dres_t (*user_object_create)(vpmm_driver_t *d, vpmm_drv_uobj_fn destroy, void *arg,
                                      vpmm_drv_uobj_t *out);
    vpmm_dres_t (*graph_retain_user_object)(vpmm_driver_t *d, vpmm_graph_t graph,
                                            vpmm_drv_uobj_t obj);
    vpmm_dres_t (*user_object_release)(vpmm_driver_t *d, vpmm_drv_uobj_t obj);
    /* cuGraphDestroy (a graph vpmm ended while abandoning a failed capture; vpmm_graph_destroy). */
    vpmm_dres_t (*graph_destroy)(vpmm_driver_t *d, vpmm_graph_t graph);

    /* Several devices (rule 9). */
    vpmm_dres_t (*revoke_access)(vpmm_driver_t *d, uintptr_t va, size_t size, int peer);
    vpmm_dres_t (*get_access)(vpmm_driver_t *d, uintptr_t va, int device, int *out_rw);
    vpmm_dres_t (*stream_device)(vpmm_driver_t *d, vpmm_stream_t stream, int *out_device);

    /* Shareable handles (rule 10). */
    vpmm_dres_t (*mem_export)(vpmm_driver_t *d, vpmm_drv_handle_t handle,
                              vpmm_drv_shareable_t *out);
    vpmm_dres_t (*mem_import)(vpmm_driver_t *d, const vpmm_drv_shareable_t *in,
                              vpmm_drv_handle_t *out_handle);

    void (*close)(vpmm_driver_t *d);
};

#endif /* VPMM_DRIVER_H */
