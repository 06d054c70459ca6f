/*
 * driver_host_internal.h — what the two halves of the host emulation backend share:
 * driver_host.c (memory: memfd extents, handles, mappings, reservations, lifetime, the invariant
 * check) and driver_host_stream.c (simulated streams, events and capture). It holds the instance
 * (host_drv_t) and its records, the invariants as equations above struct host_drv, and the
 * vpmm_host_i_* helpers one half defines and the other calls. Nothing outside those two files may
 * include it: tests and the core use driver_host.h.
 *
 * Thread-safety: none; the owning pool serialises every call (driver.h rule 7).
 * Invariants: I1..I7 above struct host_drv, checked by vpmm_host_check() in driver_host.c.
 */
#ifndef VPMM_DRIVER_HOST_INTERNAL_H
#define VPMM_DRIVER_HOST_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "driver_host.h"

/* Event tokens carry a 64-bit slot id in the pointer (see slot_table_t). */
_Static_assert(sizeof(uintptr_t) >= sizeof(uint64_t), "the host backend needs 64-bit pointers");

/* Raw codes stored in last_code: the CUresult / cudaError_t values of the matching CUDA error. */
enum {
    CODE_INVALID_VALUE = 1,
    CODE_OUT_OF_MEMORY = 2,
    CODE_ILLEGAL_STATE = 401,
    CODE_NOT_SUPPORTED = 801,
    CODE_NOT_READY = 600,
    CODE_CAPTURE_UNSUPPORTED = 900,
    CODE_CAPTURE_INVALIDATED = 901,
    CODE_CAPTURE_MERGE = 902,
    CODE_CAPTURE_UNMATCHED = 903,
    CODE_CAPTURE_ISOLATION = 905,
    CODE_CAPTURE_IMPLICIT = 906,
    CODE_CAPTURED_EVENT = 907,
    CODE_UNKNOWN = 999,
};

/* ---- small containers (driver_host.c) ----------------------------------------------------- */

/* Grows the array *arr_ptr of capacity *cap to hold `need` elements of `elem` bytes (doubling);
 * 0, or -1 with the array untouched when out of host memory. Called through RESERVE. */
int vpmm_host_i_reserve_impl(void *arr_ptr, size_t *cap, size_t need, size_t elem);
#define RESERVE(arr, cap, need) vpmm_host_i_reserve_impl(&(arr), &(cap), (need), sizeof(*(arr)))

/*
 * Slot table: opaque 64-bit ids for handles and events. id = generation << 32 | (index + 1), so an
 * id is never 0 and a released id stops resolving as soon as its slot's generation moves on
 * (a stale handle or event gets VPMM_DRV_INVALID instead of hitting a newer object).
 */
typedef struct slot {
    void *obj;          /* NULL while free */
    uint32_t gen;       /* never 0 */
    uint32_t next_free; /* index + 1 of the next free slot, 0 = end */
} slot_t;

typedef struct slot_table {
    slot_t *slots;
    size_t len, cap;
    uint32_t free_head; /* index + 1, 0 = none */
} slot_table_t;

/* A fresh id for obj (0 when out of host memory). */
uint64_t vpmm_host_i_slot_put(slot_table_t *t, void *obj);
/* The object behind id, or NULL for an id never issued or already dropped. */
void *vpmm_host_i_slot_get(const slot_table_t *t, uint64_t id);
/* Frees id's slot and retires id; id must resolve (slot_get != NULL). Never allocates. */
void vpmm_host_i_slot_drop(slot_table_t *t, uint64_t id);

/* ---- objects ------------------------------------------------------------------------------ */

typedef struct host_extent {
    size_t off, len;
} host_extent_t;

typedef struct host_handle {
    struct host_handle *prev, *next; /* every record, released ones included (for close) */
    uint64_t id;                     /* 0 once released (the record lives on while mapped) */
    size_t off, size;                /* extent of the memfd */
    size_t nmaps;                    /* mappings of this handle */
} host_handle_t;

/* A mapping: a node of a treap keyed by va (expected O(log n) per operation). */
typedef struct host_map {
    struct host_map *left, *right;
    uint64_t prio; /* max-heap on prio */
    uintptr_t va;
    size_t size, offset; /* bytes [offset, offset+size) of handle */
    host_handle_t *handle;
} host_map_t;

typedef struct host_resv {
    uintptr_t base;
    size_t size;
} host_resv_t;

struct host_stream;

/* Work items numbered after `at` on the owning stream wait for signaller to complete `seq`. */
typedef struct host_barrier {
    uint64_t at;
    struct host_stream *signaller;
    uint64_t seq;
} host_barrier_t;

typedef struct host_capture {
    struct host_capture *next;
    uint64_t id;
    struct host_stream *origin;
    int invalidated;
} host_capture_t;

typedef struct host_stream {
    vpmm_stream_t key;
    uint64_t enqueued, completed;
    host_barrier_t *bar; /* live barriers are bar[bar_head, bar_len) */
    size_t bar_head, bar_len, bar_cap;
    host_capture_t *capture; /* the capture it originated or joined, NULL if none */
    int busy;                /* inside stream_complete_to (guards against cycles) */
} host_stream_t;

typedef struct host_event {
    host_stream_t *stream; /* NULL: never recorded */
    uint64_t seq;          /* stream->enqueued when recorded */
    uint64_t capture_id;   /* nonzero: last recorded in that capture (seq is then 0) */
} host_event_t;

/*
 * One instance. Invariants (vpmm_host_check in driver_host.c verifies each):
 *  I1  the free extents and the extents of all handle records tile [0, file_size) exactly;
 *      extents are sorted, non-empty, never adjacent (coalesced), none ends at file_size (the
 *      tail is truncated away), all offsets and sizes are multiples of gran.
 *  I2  counts.handles = |handle list|, counts.handle_bytes = Σ handle.size ≤ limit;
 *      a record with id ≠ 0 is the one slot_get(handles, id) returns; id = 0 ⇒ nmaps > 0.
 *  I3  n_ext ≤ counts.handles + 1, and ext_cap ≥ counts.handles + 1 once a handle exists, so
 *      freeing an extent never allocates.
 *  I4  mappings are pairwise disjoint, each inside one reservation, offset + size ≤ its handle's
 *      size; Σ handle.nmaps = counts.mappings, Σ mapping.size = counts.mapped_bytes.
 *  I5  reservations are sorted, disjoint, gran-aligned; counts.reservations/reserved_bytes match.
 *  I6  counts.events = live slots of the event table.
 *  I7  per stream: completed ≤ enqueued; live barriers are sorted by at, and
 *      completed ≤ at ≤ enqueued, seq ≤ signaller->enqueued; capture, if set, is in the list.
 */
typedef struct host_drv {
    vpmm_driver_t base; /* first member: the table the core calls */
    size_t gran, limit;

    int fd;
    size_t file_size;
    host_extent_t *ext; /* free extents of the memfd, sorted by off */
    size_t n_ext, ext_cap;

    slot_table_t handles;
    host_handle_t *handle_list;

    host_map_t *maps; /* treap root */
    uint64_t rng;     /* treap priorities (xorshift64*, deterministic) */

    host_resv_t *resv; /* sorted by base */
    size_t n_resv, resv_cap;

    slot_table_t events;

    host_stream_t **stream_tab; /* open addressing by key, linear probing; never shrinks */
    size_t stream_cap, n_streams;

    host_capture_t *captures; /* active captures */
    uint64_t next_capture_id;

    vpmm_host_wait_t *waits;
    size_t n_waits, waits_cap;

    vpmm_host_counts_t counts; /* touched_bytes is computed on demand */
} host_drv_t;

/* ---- shared helpers ----------------------------------------------------------------------- */

/* driver_host.c: the instance behind d, or NULL when d is not a host backend (a wrapper, NULL). */
host_drv_t *vpmm_host_i_as_host(vpmm_driver_t *d);

/* driver_host.c: record a failure as last_code/last_call and return res. fail names the entry
 * point, fail_call a CUDA call by name; fail_invalid is fail(h, entry, VPMM_DRV_INVALID,
 * CODE_INVALID_VALUE). */
vpmm_dres_t vpmm_host_i_fail_call(host_drv_t *h, const char *call, vpmm_dres_t res, int code);
vpmm_dres_t vpmm_host_i_fail(host_drv_t *h, vpmm_drv_entry_t entry, vpmm_dres_t res, int code);
vpmm_dres_t vpmm_host_i_fail_invalid(host_drv_t *h, vpmm_drv_entry_t entry);

/* driver_host_stream.c: the active capture with this id, or NULL. */
host_capture_t *vpmm_host_i_capture_find(const host_drv_t *h, uint64_t id);

/* driver_host_stream.c: frees every event, stream, capture and wait record (for host_close). */
void vpmm_host_i_stream_fini(host_drv_t *h);

/* driver_host_stream.c: the stream-side entry points of the driver table (driver.h). */
vpmm_dres_t vpmm_host_i_event_create(vpmm_driver_t *d, vpmm_drv_event_t *out_event);
vpmm_dres_t vpmm_host_i_event_destroy(vpmm_driver_t *d, vpmm_drv_event_t event);
vpmm_dres_t vpmm_host_i_event_record(vpmm_driver_t *d, vpmm_drv_event_t event,
                                     vpmm_stream_t stream);
vpmm_dres_t vpmm_host_i_event_query(vpmm_driver_t *d, vpmm_drv_event_t event);
vpmm_dres_t vpmm_host_i_stream_wait_event(vpmm_driver_t *d, vpmm_stream_t stream,
                                          vpmm_drv_event_t event);
vpmm_dres_t vpmm_host_i_capture_info(vpmm_driver_t *d, vpmm_stream_t stream,
                                     vpmm_capture_status_t *out_status, uint64_t *out_id);
vpmm_dres_t vpmm_host_i_synchronize(vpmm_driver_t *d);

#endif /* VPMM_DRIVER_HOST_INTERNAL_H */
