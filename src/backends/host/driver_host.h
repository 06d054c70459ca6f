/*
 * driver_host.h — the host emulation backend: the driver contract (driver.h) on the CPU, with
 * real aliasing (one memfd, MAP_SHARED mappings), simulated streams/events/capture that advance
 * only when a test says so, graphs and user objects whose destructors run when the emulated
 * work lets them, and a device-memory limit that makes OOM testable.
 *
 * Thread-safety: the table's entries may be called from several threads at once (driver.h rule
 * 7): each runs under the instance's recursive mutex. The stream and capture controls below (those
 * of the "streams" and "capture" sections and the wait log) take it too, so the threads of a test
 * may drive their own per-thread streams while others use the instance. The remaining vpmm_host_*
 * helpers do not: call them from the test that owns the instance while no other thread uses it.
 * Invariants are written above struct host_drv in driver_host_internal.h and checked by
 * vpmm_host_check(), which tests call after every mutation.
 *
 * Every vpmm_host_* helper takes the vpmm_driver_t returned by vpmm_host_open (not a wrapper such
 * as driver_fault's: unwrap it with vpmm_fault_inner). Given anything else it does nothing and
 * returns 0 / NULL / VPMM_DRV_INVALID.
 */
#ifndef VPMM_DRIVER_HOST_H
#define VPMM_DRIVER_HOST_H

#include <stddef.h>
#include <stdint.h>

#include "driver.h"

typedef struct vpmm_host_options {
    size_t granularity;            /* 0 = 2 MiB; must be a multiple of the OS page size */
    size_t memory_limit;           /* emulated device memory in bytes; 0 = 80 GiB */
    int per_thread_default_stream; /* nonzero: stream 0 (NULL) names the calling thread's
                                      per-thread stream, as in a program built with nvcc
                                      --default-stream per-thread; 0: the legacy stream */
    size_t va_limit; /* address space in bytes: va_reserve fails with VPMM_DRV_OUT_OF_MEMORY
                        (last_code 2, as cuMemAddressReserve) when reserved_bytes + size would
                        exceed it; 0 = unlimited (as much as the host's mmap gives) */
} vpmm_host_options_t;

/*
 * Opens a host backend. opt may be NULL (defaults). VPMM_DRV_INVALID for a NULL out or a bad
 * granularity, VPMM_DRV_OUT_OF_MEMORY when the host has no memory for the instance,
 * VPMM_DRV_NO_DEVICE when the memfd cannot be created. *out is NULL on failure.
 */
vpmm_dres_t vpmm_host_open(const vpmm_host_options_t *opt, vpmm_driver_t **out);

/* ---- streams ------------------------------------------------------------------------------
 * Work is emulated: vpmm_host_enqueue adds one pending "kernel"; nothing completes until
 * complete/advance/complete_all (or the synchronize entry point) says so.
 *
 * Handles. Every entry point and every control below that takes a stream resolves the handle
 * first, as CUDA does:
 *   0x2 (CU_STREAM_PER_THREAD)  the calling thread's per-thread stream: a different stream in each
 *                               thread, created on the thread's first use with no pending work.
 *                               Its record is named by a synthetic key (vpmm_host_thread_stream),
 *                               which names that same stream from any thread.
 *   0x1 (CU_STREAM_LEGACY)      the legacy default stream, one per instance.
 *   0 (NULL)                    the legacy stream as well (the same stream as 0x1), unless the
 *                               instance was opened with per_thread_default_stream: then as 0x2.
 *   anything else               a stream of its own (an unknown value is registered on first use
 *                               with no pending work), non-blocking: like a stream created with
 *                               cudaStreamNonBlocking, which is what PyTorch creates.
 * A control that only reads or advances (complete, advance, idle, enqueued, completed) creates
 * nothing: a thread that never used 0x2 has a per-thread stream with no work. A per-thread stream
 * outlives its thread (until close), so its work can still be completed through its key.
 *
 * Implicit synchronisation. Per-thread streams are blocking; every other non-legacy stream is not.
 * As in CUDA, an operation on the legacy stream (event_record, stream_wait_event, a work item of
 * vpmm_host_enqueue or vpmm_host_graph_launch) waits for everything enqueued before it on every
 * blocking stream (their work items and the waits after them), and an operation on a blocking
 * stream waits for everything enqueued before it on the legacy stream. They are barriers (the
 * ones stream_wait_event leaves), so an event recorded on the legacy stream completes only once
 * every blocking stream has completed what it had enqueued, and advance stops at them. A capturing
 * stream's operations are graph nodes, not work: they take no part. An operation on the legacy
 * stream while any blocking stream is capturing would make the legacy stream depend on the capture:
 * it fails with VPMM_DRV_ERROR, last_code 906 (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT), and invalidates
 * those captures, as CUDA does (vpmm_host_enqueue returns 0 then).
 */

/* A fresh token distinct from every stream known to d (NULL only when out of host memory). The
 * stream is non-blocking. */
vpmm_stream_t vpmm_host_stream_create(vpmm_driver_t *d);

/* The synthetic key of the calling thread's per-thread stream (creating that stream): the stream
 * 0x2 names in this thread, named by the key from any thread (NULL when out of host memory). */
vpmm_stream_t vpmm_host_thread_stream(vpmm_driver_t *d);

/* Enqueues one work item on s and returns its 1-based sequence number on s. Returns 0 (and
 * creates no work) when s is being captured (captured work belongs to a graph, not to s), when s
 * is the legacy stream and a blocking stream is capturing (that capture is invalidated), and when
 * out of host memory. */
uint64_t vpmm_host_enqueue(vpmm_driver_t *d, vpmm_stream_t s);

/* Finishes everything enqueued on s so far, first finishing (recursively) whatever it waits on
 * (for the legacy stream, through the implicit synchronisation, the blocking streams' work). */
void vpmm_host_complete(vpmm_driver_t *d, vpmm_stream_t s);

/* Finishes up to n items of s in order, stopping at the first one whose waits are unsatisfied
 * (it never completes other streams). Returns how many finished. */
size_t vpmm_host_advance(vpmm_driver_t *d, vpmm_stream_t s, size_t n);

/* Finishes every item on every stream. */
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
 * and after the instance's state is consistent again; driver.h leaves the thread and the moment
 * to the driver, so the core must rely on neither.
 *
 * Stricter than CUDA (which keeps one shared count and would run the destructor early instead):
 * user_object_release and graph_retain_user_object need a reference the caller still owns, else
 * VPMM_DRV_INVALID and nothing happens. Handles of graphs, execs and user objects are checked
 * (a stale or foreign one gets VPMM_DRV_INVALID, last_code 1).
 *
 * close() frees every graph, exec and user object left WITHOUT running their destructors.
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
    size_t handles, handle_bytes;  /* live physical allocations (released-but-still-mapped ones
                                      count until their last unmap) */
    size_t mappings, mapped_bytes; /* live mappings */
    size_t reservations, reserved_bytes;
    size_t events;
    size_t graphs;        /* as vpmm_host_graphs */
    size_t user_objects;  /* as vpmm_host_user_objects */
    size_t touched_bytes; /* bytes of the memfd actually resident (from fstat st_blocks) */
} vpmm_host_counts_t;

/* Fills *out (all zero for a non-host d). */
void vpmm_host_counts(vpmm_driver_t *d, vpmm_host_counts_t *out);

/* Every successful stream_wait_event call, in order. signaller/signal_seq are the stream and the
 * sequence number the event captured; signal_seq is 0 for an event never recorded, or recorded
 * in a capture (the wait then joins the capture instead of ordering real work). Streams are
 * logged resolved, so that threads can be told apart: a per-thread stream as its synthetic key
 * (vpmm_host_thread_stream), the legacy stream as 0x1 however it was named (NULL included), any
 * other stream as its handle; signaller is NULL for an event never recorded. The implicit
 * synchronisation of the legacy stream is not logged. */
typedef struct vpmm_host_wait {
    vpmm_stream_t waiter;
    vpmm_stream_t signaller;
    uint64_t signal_seq;
} vpmm_host_wait_t;

size_t vpmm_host_wait_count(vpmm_driver_t *d);

/* The i-th logged wait (0-based); all zero when i is out of range. */
vpmm_host_wait_t vpmm_host_wait_at(vpmm_driver_t *d, size_t i);

/* Forgets the wait log (vpmm_host_wait_count becomes 0); the barriers themselves stay. */
void vpmm_host_wait_clear(vpmm_driver_t *d);

/*
 * Checks every invariant listed above struct host_drv in driver_host_internal.h and returns the
 * number of violations (each described on stderr when verbose is nonzero). A non-host d counts as
 * one. O(n log n) in the number of objects: for tests, not for hot paths.
 */
size_t vpmm_host_check(vpmm_driver_t *d, int verbose);

#endif /* VPMM_DRIVER_HOST_H */
