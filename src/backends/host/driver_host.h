/*
 * driver_host.h — the host emulation backend: the driver contract (driver.h) on the CPU, with
 * real aliasing (one memfd, MAP_SHARED mappings), simulated streams/events/capture that advance
 * only when a test says so, graphs and user objects whose destructors run when the emulated
 * work lets them, several devices of one machine with per-device access to memory, exportable
 * handles, and a device-memory limit that makes OOM testable.
 *
 * The model.
 *  - A NODE is a machine of N emulated devices (vpmm_host_options_t.devices): one address space,
 *    one memfd holding every device's memory, one set of streams, events, captures and graphs. A
 *    VIEW is the vpmm_driver_t of one device of a node: vpmm_host_open creates a node and returns
 *    the view of device 0, vpmm_host_open_device another view of the same node (any device, the
 *    same one again included), vpmm_host_open_shared a view of the process-wide shared node. Each
 *    view is its own instance (driver.h rule 9: base.device is its device, base.device_count = N,
 *    base.peer_capable the devices it can grant, base.exportable) with its own last_code /
 *    last_call and its own close(); the node goes when its last view closes, in any order.
 *  - Memory. Handles, mappings and reservations are the node's: a handle created through one view
 *    may be mapped, released or exported through any other of the node. memory_limit is per
 *    device: a handle counts against the device of the view that created it (released, it keeps
 *    counting while still mapped, or aliased by an import of the node), and mem_get_info reports
 *    that device's free and total bytes.
 *  - Access (rule 9). Each mapping keeps a set of devices that may read and write it, per granule
 *    (a grant or revoke may cover part of a mapping, as in CUDA). set_access grants the view's
 *    device and its peers; revoke_access takes one peer away; get_access reads one device's bit.
 *    The host stands for every device at once: pages are PROT_READ|PROT_WRITE while any device
 *    may access them and PROT_NONE while none may. vpmm_host_can_access answers what a kernel of
 *    a view's device would need. A device isolated by vpmm_host_options_t.isolated can neither be
 *    granted another device's memory nor grant its own to another device (peer_capable: only its
 *    own bit, and every other device's lacks it): set_access naming such a peer fails with
 *    VPMM_DRV_NOT_SUPPORTED, last_code 217 (CUDA_ERROR_PEER_ACCESS_UNSUPPORTED).
 *  - Streams and events are per device (see "streams"): the special handles name the view's
 *    device's own streams, every other handle is a node-wide stream of the device it was created
 *    or first used on; an event is recorded only on streams of its device; waits, queries and
 *    captures work across devices.
 *  - Export and import (rule 10). mem_export of a handle returns a new descriptor (a dup of the
 *    node's memfd, or of an imported handle's own descriptor; the caller closes it), the offset of
 *    the handle's bytes in the file it names, and the handle's size. mem_import makes a handle of
 *    [offset, offset + size) of such a descriptor, holding a dup of it: it maps, aliases and is
 *    released like any other, sees the exporter's bytes (in this process, or in another that took
 *    the descriptor with pidfd_getfd), and counts against no device (the memory is the
 *    exporter's): counts.imported, not counts.handles. An import of the node's own memory keeps
 *    the exporting handle's bytes alive after that handle's release and last unmap, until the
 *    import goes too (rule 10: the memory lives until its last handle and mapping are gone); an
 *    exporter in another node or process cannot see the importer, so there the exporter must keep
 *    its handle while importers use it — what the core's IPC does anyway (vpmm_ipc_* keep the
 *    pages of every share). Only imported handles carry a descriptor of their own: thousands of
 *    own handles still cost one fd.
 *
 * Thread-safety: the entries of every view may be called from several threads at once (driver.h
 * rule 7): each runs under the node's recursive mutex, which every vpmm_host_* control below takes
 * too, so the threads of a test may drive their own per-thread streams while others use the node.
 * The shared node's opens and closes are serialised by a process mutex. Invariants are written
 * above struct host_drv in driver_host_internal.h and checked by vpmm_host_check() (and the
 * kernel's side of access by vpmm_host_check_access()), which tests call after every mutation.
 *
 * Every vpmm_host_* helper takes a view (what vpmm_host_open, _open_device or _open_shared
 * returned; not a wrapper such as driver_fault's: unwrap it with vpmm_fault_inner). Given anything
 * else it does nothing and returns 0 / NULL / VPMM_DRV_INVALID.
 */
#ifndef VPMM_DRIVER_HOST_H
#define VPMM_DRIVER_HOST_H

#include <stddef.h>
#include <stdint.h>

#include "driver.h"

typedef struct vpmm_host_options {
    size_t granularity;            /* 0 = 2 MiB; must be a multiple of the OS page size */
    size_t memory_limit;           /* emulated memory of EACH device in bytes; 0 = 80 GiB */
    int per_thread_default_stream; /* nonzero: stream 0 (NULL) names the calling thread's
                                      per-thread stream, as in a program built with nvcc
                                      --default-stream per-thread; 0: the legacy stream (a
                                      property of the view: open_device copies its sibling's) */
    size_t va_limit;    /* address space in bytes: va_reserve fails with VPMM_DRV_OUT_OF_MEMORY
                           (last_code 2, as cuMemAddressReserve) when reserved_bytes + size would
                           exceed it; 0 = unlimited (as much as the host's mmap gives) */
    int devices;        /* devices of the node: 0 = 1 (8 for vpmm_host_open_shared); at most
                           VPMM_DRV_MAX_DEVICES */
    uint64_t isolated;  /* bit k: device k reaches no other device (its peer_capable has only its
                           own bit, and every other device's lacks bit k); bits past `devices`
                           are refused */
    int not_exportable; /* nonzero: the view is not exportable (exportable = 0): mem_export fails
                           with VPMM_DRV_NOT_SUPPORTED, last_code 801, and so does exporting a
                           handle it created, through any view (CUDA: a handle's shareable type
                           is chosen at creation); mem_import still works */
} vpmm_host_options_t;

/*
 * Opens a new node (opt may be NULL: the defaults) and returns the view of its device 0.
 * VPMM_DRV_INVALID for a NULL out, a bad granularity, devices out of range or an isolated bit
 * past them; VPMM_DRV_OUT_OF_MEMORY when the host has no memory for the node; VPMM_DRV_NO_DEVICE
 * when the memfd cannot be created. *out is NULL on failure.
 */
vpmm_dres_t vpmm_host_open(const vpmm_host_options_t *opt, vpmm_driver_t **out);

/*
 * A new view of device `device` of sibling's node (the sibling's own device included: two views
 * of one device share its streams and memory limit), with the sibling's per_thread_default_stream
 * and exportability. Close it with its close(), in any order with the node's other views.
 * VPMM_DRV_INVALID for a NULL out, a sibling that is not a host view, or a device outside [0, N);
 * VPMM_DRV_OUT_OF_MEMORY when out of host memory. *out is NULL on failure.
 */
vpmm_dres_t vpmm_host_open_device(vpmm_driver_t *sibling, int device, vpmm_driver_t **out);

/*
 * A new view of device `device` of the process-wide SHARED node (what vpmm_pool_create opens for
 * a pool of the host backend whose config.device is set, so that the pools of one process see one
 * machine). The first call creates the node from opt (devices 0 = 8); a later call while it lives
 * returns a new view of it: its granularity and memory_limit (defaults applied) must be the node's,
 * else VPMM_DRV_INVALID; its per_thread_default_stream and not_exportable apply to its view; its
 * devices, isolated and va_limit are ignored (the node's stand). The node is freed when its last
 * view closes; the next call makes a new one. VPMM_DRV_INVALID also for a NULL out, bad options or
 * a device outside [0, N); otherwise as vpmm_host_open. Thread-safe.
 */
vpmm_dres_t vpmm_host_open_shared(const vpmm_host_options_t *opt, int device, vpmm_driver_t **out);

/*
 * 1 iff every byte of [va, va + size) is mapped and d's device may read and write it — what a
 * kernel of d's device touching that memory would need (the host itself can touch any page some
 * device may access: this is the per-device answer a machine without GPUs cannot give by
 * faulting). 1 for size 0; 0 for a non-host d.
 */
int vpmm_host_can_access(vpmm_driver_t *d, uintptr_t va, size_t size);

/* ---- streams ------------------------------------------------------------------------------
 * Work is emulated: vpmm_host_enqueue adds one pending "kernel"; nothing completes until
 * complete/advance/complete_all (or the synchronize entry point) says so.
 *
 * Handles. Every entry point and every control below that takes a stream resolves the handle
 * first, as CUDA does, through the view it was called with (its device, and its
 * per_thread_default_stream):
 *   0x2 (CU_STREAM_PER_THREAD)  the calling thread's per-thread stream of the view's device: a
 *                               different stream in each thread and on each device, created on the
 *                               thread's first use with no pending work. Its record is named by a
 *                               synthetic key (vpmm_host_thread_stream), which names that same
 *                               stream from any thread and any view of the node.
 *   0x1 (CU_STREAM_LEGACY)      the legacy default stream of the view's device, one per device.
 *   0 (NULL)                    the legacy stream as well (the same stream as 0x1), unless the
 *                               view was opened with per_thread_default_stream: then as 0x2.
 *   anything else               a stream of the node (the same stream through every view), on the
 *                               device of the view that created it (vpmm_host_stream_create) or
 *                               first used it (an unknown value is registered then, with no
 *                               pending work); non-blocking: like a stream created with
 *                               cudaStreamNonBlocking, which is what PyTorch creates.
 * stream_device answers a stream's device (the special handles: the view's, at no cost). A control
 * that only reads or advances (complete, advance, idle, enqueued, completed) creates nothing: a
 * thread that never used 0x2 has a per-thread stream with no work. A per-thread stream outlives
 * its thread (until the node goes), so its work can still be completed through its key. Every
 * control keeps its single-device meaning on a node of one device.
 *
 * Events (rule 9). event_create(d, NULL, ..) makes an event of d's device, event_create(d, s, ..)
 * one of stream s's device. event_record of an event on a stream of another device fails with
 * VPMM_DRV_INVALID, last_code 400 (CUDA_ERROR_INVALID_HANDLE, as CUDA refuses it) and changes
 * nothing. stream_wait_event and event_query work across devices (a stream of device 1 may wait
 * for an event of device 0); captures are the node's (capture_info from any view).
 *
 * Implicit synchronisation, per device. Per-thread streams are blocking; every other non-legacy
 * stream is not. As in CUDA, an operation on a device's legacy stream (event_record,
 * stream_wait_event, a work item of vpmm_host_enqueue or vpmm_host_graph_launch) waits for
 * everything enqueued before it on every blocking stream OF THAT DEVICE (their work items and the
 * waits after them), and an operation on a blocking stream waits for everything enqueued before it
 * on its device's legacy stream. They are barriers (the ones stream_wait_event leaves), so an
 * event recorded on the legacy stream completes only once every blocking stream of its device has
 * completed what it had enqueued, and advance stops at them. A capturing stream's operations are
 * graph nodes, not work: they take no part. An operation on a legacy stream while a blocking
 * stream of its device is capturing would make the legacy stream depend on the capture: it fails
 * with VPMM_DRV_ERROR, last_code 906 (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT), and invalidates those
 * captures, as CUDA does (vpmm_host_enqueue returns 0 then).
 *
 * The synchronize entry point (cuCtxSynchronize) finishes every stream of the view's device, and
 * whatever their work waits for on other devices; during any capture of the node it fails (900)
 * and invalidates them all, as in global mode.
 */

/* A fresh token distinct from every stream known to d's node (NULL only when out of host memory):
 * a non-blocking stream of d's device. */
vpmm_stream_t vpmm_host_stream_create(vpmm_driver_t *d);

/* The synthetic key of the calling thread's per-thread stream of d's device (creating that
 * stream): the stream 0x2 names in this thread through a view of that device, named by the key
 * from any thread and any view (NULL when out of host memory). */
vpmm_stream_t vpmm_host_thread_stream(vpmm_driver_t *d);

/* Enqueues one work item on s and returns its 1-based sequence number on s. Returns 0 (and
 * creates no work) when s is being captured (captured work belongs to a graph, not to s), when s
 * is a legacy stream and a blocking stream of its device is capturing (that capture is
 * invalidated), and when out of host memory. */
uint64_t vpmm_host_enqueue(vpmm_driver_t *d, vpmm_stream_t s);

/* Finishes everything enqueued on s so far, first finishing (recursively) whatever it waits on
 * (for the legacy stream, through the implicit synchronisation, its device's blocking streams'
 * work; across devices, what its waits name). */
void vpmm_host_complete(vpmm_driver_t *d, vpmm_stream_t s);

/* Finishes up to n items of s in order, stopping at the first one whose waits are unsatisfied
 * (it never completes other streams). Returns how many finished. */
size_t vpmm_host_advance(vpmm_driver_t *d, vpmm_stream_t s, size_t n);

/* Finishes every item on every stream of the node (every device). */
void vpmm_host_complete_all(vpmm_driver_t *d);

/* 1 if s has no pending work (unknown streams have none), else 0. */
int vpmm_host_stream_idle(vpmm_driver_t *d, vpmm_stream_t s);

/* Work items enqueued on / completed by s so far (0 for unknown streams). */
uint64_t vpmm_host_stream_enqueued(vpmm_driver_t *d, vpmm_stream_t s);
uint64_t vpmm_host_stream_completed(vpmm_driver_t *d, vpmm_stream_t s);

/* ---- capture ------------------------------------------------------------------------------
 * The begin_capture / end_capture entry points of the table, and these two controls, share one
 * implementation. begin starts a capture originating in s (ids start at 1 and are never reused)
 * and creates the graph it builds; VPMM_DRV_NOT_SUPPORTED (last_code 900) on the legacy stream
 * (0x1, and NULL unless per_thread_default_stream; a per-thread stream may be captured, as in
 * CUDA), VPMM_DRV_ERROR (401) if s is already capturing (originated or joined),
 * VPMM_DRV_INVALID (1) for an unknown mode. end ends the capture that s originated; every stream
 * joined to it (through stream_wait_event on a captured event) leaves it too. It fails with
 * VPMM_DRV_ERROR and 401 if s is not capturing, 903 if s joined but did not originate it, 908 if
 * the mode is not RELAXED and the calling thread is not the one that began it (those three leave
 * the capture going), and 901 if the capture had been invalidated: that capture still ends, as
 * cuStreamEndCapture's does, and its graph is destroyed (no graph is returned).
 *
 * The mode is recorded but the host applies the same rules to every mode (synchronize during any
 * capture invalidates it, as it does in global mode), except the thread check above.
 *
 * vpmm_host_begin_capture is begin_capture in global mode that also returns the capture id;
 * vpmm_host_end_capture is end_capture that destroys the graph it would have returned.
 */
vpmm_dres_t vpmm_host_begin_capture(vpmm_driver_t *d, vpmm_stream_t s, uint64_t *out_id);
vpmm_dres_t vpmm_host_end_capture(vpmm_driver_t *d, vpmm_stream_t s);

/* ---- graphs and user objects ---------------------------------------------------------------
 * The model (driver.h rule 8). A graph is created by begin_capture and owned by its capture until
 * end_capture hands it to the caller; capture_info returns the same handle while the capture is
 * ACTIVE (NULL otherwise: CUDA returns no valid graph for an invalidated capture). A user object
 * holds one reference count split in three: the caller's references (1 at create), one per
 * graph_retain_user_object that moved a caller reference into a graph, and one per executable
 * graph made from such a graph (an exec copies its graph's references). The destructor runs once,
 * when the last reference goes: from user_object_release, from end_capture of an invalidated
 * capture, from vpmm_host_end_capture, from vpmm_host_graph_destroy, from vpmm_host_exec_destroy
 * of an exec with no launch pending, or from the progress call (vpmm_host_complete, _advance,
 * _complete_all, the synchronize entry point) that completed the last pending launch of an exec
 * destroyed earlier. It runs synchronously, on the calling thread, just before that call returns
 * and after the node's state is consistent again; driver.h leaves the thread and the moment
 * to the driver, so the core must rely on neither.
 *
 * Stricter than CUDA (which keeps one shared count and would run the destructor early instead):
 * user_object_release and graph_retain_user_object need a reference the caller still owns, else
 * VPMM_DRV_INVALID and nothing happens. Handles of graphs, execs and user objects are checked
 * (a stale or foreign one gets VPMM_DRV_INVALID, last_code 1).
 *
 * The node's last close() frees every graph, exec and user object left WITHOUT running their
 * destructors.
 */

/* An executable graph (cudaGraphExec_t) of the host backend. */
typedef struct vpmm_host_exec *vpmm_host_exec_t;

/* Instantiates g (also while it is still being captured, as CUDA permits) into *out, which holds
 * its own reference to every user object g holds. VPMM_DRV_INVALID for a bad g or a NULL out;
 * VPMM_DRV_ERROR (2) when out of host memory. */
vpmm_dres_t vpmm_host_graph_instantiate(vpmm_driver_t *d, vpmm_graph_t g, vpmm_host_exec_t *out);

/* Enqueues one work item on s (like vpmm_host_enqueue, implicit synchronisation included) that
 * stands for a launch of e: e keeps its references until that item has completed.
 * VPMM_DRV_NOT_SUPPORTED (801) when s is capturing (launching into a capture is not emulated),
 * VPMM_DRV_ERROR (906) on the legacy stream while a blocking stream is capturing (that capture is
 * invalidated), VPMM_DRV_INVALID for a bad e. */
vpmm_dres_t vpmm_host_graph_launch(vpmm_driver_t *d, vpmm_host_exec_t e, vpmm_stream_t s);

/* Destroys a graph the caller owns, dropping its references. VPMM_DRV_INVALID for a bad g;
 * VPMM_DRV_ERROR (401) while g is still being captured (CUDA forbids destroying it then). */
vpmm_dres_t vpmm_host_graph_destroy(vpmm_driver_t *d, vpmm_graph_t g);

/* Destroys e: its handle is dead at once, but as in CUDA its references are dropped only once
 * every launch of it has completed (at once if none is pending). VPMM_DRV_INVALID for a bad e. */
vpmm_dres_t vpmm_host_exec_destroy(vpmm_driver_t *d, vpmm_host_exec_t e);

/* Live user objects (their destructor has not run). */
size_t vpmm_host_user_objects(vpmm_driver_t *d);

/* Live graphs (those being captured included) + live execs (destroyed ones whose launches are
 * still pending included). */
size_t vpmm_host_graphs(vpmm_driver_t *d);

/* ---- inspection --------------------------------------------------------------------------- */

typedef struct vpmm_host_counts {
    size_t handles, handle_bytes;    /* live physical allocations of the node's own, every device's
                                        (released-but-still-mapped ones count until their last
                                        unmap; one an import of the node aliases, until that goes) */
    size_t imported, imported_bytes; /* live imported handles (mem_import; the same rule), which
                                        are not in handles/handle_bytes: they are the exporter's
                                        memory and count against no device's limit */
    size_t retired, retired_bytes;   /* dead own handles that were exported: their bytes stay (an
                                        importer elsewhere may map them) until the node goes */
    size_t mappings, mapped_bytes;   /* live mappings */
    size_t reservations, reserved_bytes;
    size_t events;
    size_t graphs;        /* as vpmm_host_graphs */
    size_t user_objects;  /* as vpmm_host_user_objects */
    size_t touched_bytes; /* bytes of the node's memfd actually resident (fstat st_blocks) */
} vpmm_host_counts_t;

/* Fills *out with d's node's counts (all zero for a non-host d). */
void vpmm_host_counts(vpmm_driver_t *d, vpmm_host_counts_t *out);

/* Every successful stream_wait_event call of the node (through any view), in order.
 * signaller/signal_seq are the stream and the sequence number the event captured; signal_seq is 0
 * for an event never recorded, or recorded in a capture (the wait then joins the capture instead
 * of ordering real work). Streams are logged resolved, so that threads can be told apart: a
 * per-thread stream as its synthetic key (vpmm_host_thread_stream), a legacy stream as 0x1 however
 * it was named (NULL included; its device says whose), any other stream as its handle; signaller
 * is NULL for an event never recorded. waiter_device is the waiting stream's device,
 * signaller_device the event's (a recorded event's stream is on it). The implicit synchronisation
 * of the legacy streams is not logged. */
typedef struct vpmm_host_wait {
    vpmm_stream_t waiter;
    vpmm_stream_t signaller;
    uint64_t signal_seq;
    int waiter_device, signaller_device;
} vpmm_host_wait_t;

size_t vpmm_host_wait_count(vpmm_driver_t *d);

/* The i-th logged wait (0-based); all zero when i is out of range. */
vpmm_host_wait_t vpmm_host_wait_at(vpmm_driver_t *d, size_t i);

/* Forgets the node's wait log (vpmm_host_wait_count becomes 0); the barriers themselves stay. */
void vpmm_host_wait_clear(vpmm_driver_t *d);

/*
 * Checks every invariant listed above struct host_drv in driver_host_internal.h, for d's whole node
 * (every view and device), and returns the number of violations (each described on stderr when
 * verbose is nonzero). A non-host d counts as one. O(n log n) in the number of objects: for
 * tests, not for hot paths.
 */
size_t vpmm_host_check(vpmm_driver_t *d, int verbose);

/*
 * Checks what vpmm_host_check cannot afford after every operation of a long run: that the kernel's
 * protections (/proc/self/maps) are what the access masks say — read-write exactly where some
 * device may access a mapping, none elsewhere in it (I4). Returns the number of violations
 * (described on stderr when verbose); a non-host d counts as one; 0 checks of the kernel's side
 * when /proc/self/maps cannot be read. The host backend's own tests call it after every mutation.
 */
size_t vpmm_host_check_access(vpmm_driver_t *d, int verbose);

#endif /* VPMM_DRIVER_HOST_H */
