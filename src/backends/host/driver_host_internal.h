/*
 * driver_host_internal.h — what the three parts of the host emulation backend share:
 * driver_host.c (memory: memfd extents, handles, mappings, reservations, lifetime, the invariant
 * check), driver_host_stream.c (simulated streams, events and capture) and driver_host_graph.c
 * (graphs, executable graphs, user objects), on driver_host_base.c (slot tables, failure
 * recorders). Calls go one way: driver_host.c -> _graph.c -> _stream.c -> _base.c; the
 * stream side reaches the graph side only through h->graph_ops. It holds the instance (host_drv_t)
 * and its records, the invariants as equations above struct host_drv, and the vpmm_host_i_* helpers
 * one part defines and another calls. Nothing outside those files may include it: tests and the
 * core use driver_host.h.
 *
 * Thread-safety: none of its own; every entry point and stream control holds host_drv.lock.
 * Invariants: I1..I10 above struct host_drv, checked by vpmm_host_check() in driver_host.c (I8 and
 * I9 through vpmm_host_i_graph_check in driver_host_graph.c).
 */
#ifndef VPMM_DRIVER_HOST_INTERNAL_H
#define VPMM_DRIVER_HOST_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "array.h"
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
    CODE_CAPTURE_WRONG_THREAD = 908,
    CODE_UNKNOWN = 999,
};

/* ---- small containers (driver_host_base.c) ------------------------------------------------ */

/* Grows the array `arr` of capacity `cap` to hold `need` elements (doubling from 8, ds/array.h);
 * 0, or -1 with the array untouched when out of host memory. */
#define RESERVE(arr, cap, need) VPMM_GROW(arr, cap, need, 8)

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
    uint64_t access; /* bit k: device k may read and write it (set_access) */
} host_map_t;

typedef struct host_resv {
    uintptr_t base;
    size_t size;
} host_resv_t;

struct host_stream;
struct host_graph;

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
    struct host_graph *graph; /* the graph it builds (handed to the caller at a clean end) */
    vpmm_capture_mode_t mode;
    pthread_t thread; /* that began it: the only one that may end it unless mode is RELAXED */
    int invalidated;
} host_capture_t;

/* The handles CUDA gives a meaning of its own (driver_host.h, "streams"). The legacy stream's
 * record is kept under HOST_STREAM_LEGACY; no record is ever kept under NULL or
 * HOST_STREAM_PER_THREAD, which are resolved to a record before any lookup. */
#define HOST_STREAM_LEGACY     ((vpmm_stream_t)(uintptr_t)0x1)
#define HOST_STREAM_PER_THREAD ((vpmm_stream_t)(uintptr_t)0x2)

typedef struct host_stream {
    vpmm_stream_t key; /* the handle, LEGACY, or the record's own address (synthetic) */
    uint64_t thread;   /* nonzero: the per-thread stream of the thread with this token */
    int blocking;      /* synchronises implicitly with the legacy stream */
    uint64_t enqueued, completed;
    host_barrier_t *bar; /* live barriers are bar[bar_head, bar_len) */
    size_t bar_head, bar_len, bar_cap;
    host_capture_t *capture; /* the capture it originated or joined, NULL if none */
    int busy;                /* inside stream_complete_to (guards against cycles) */
} host_stream_t;

/* An entry of the map that resolves CU_STREAM_PER_THREAD: a thread's token and its stream. */
typedef struct host_ptds {
    uint64_t token;
    host_stream_t *stream;
} host_ptds_t;

/*
 * A user object. refs = caller_refs + the references graphs and execs hold (one per entry of their
 * refs arrays). At refs = 0 it leaves the slot table (id = 0) and waits on host_drv.dead for its
 * destructor, which runs before the entry point or control that dropped it returns.
 */
typedef struct host_uobj {
    uint64_t id; /* 0 once dead */
    vpmm_drv_uobj_fn destroy;
    void *arg;
    uint64_t refs, caller_refs;
    struct host_uobj *next_dead;
} host_uobj_t;

/* A graph: built by a capture (capture != NULL), then the caller's. */
typedef struct host_graph {
    struct host_graph *prev, *next;
    uint64_t id;
    host_capture_t *capture;
    host_uobj_t **refs; /* one reference each (an object retained twice appears twice) */
    size_t n_refs, refs_cap;
} host_graph_t;

/* The latest launch of an exec on one stream: it is pending while stream->completed < seq. */
typedef struct host_launch {
    struct host_stream *stream;
    uint64_t seq;
} host_launch_t;

/* An executable graph. Destroyed with launches pending, it loses its id and handle (id = 0) and
 * lives on, holding its references, until the streams complete those launches. */
typedef struct host_exec {
    struct host_exec *prev, *next;
    uint64_t id;
    host_uobj_t **refs;
    size_t n_refs;
    host_launch_t *launches; /* at most one per stream */
    size_t n_launches, launches_cap;
} host_exec_t;

/*
 * An event: a point of a stream. A wait enqueued on the stream after its last work item is part
 * of that point too (CUDA orders the record after the wait), so the record copies the stream's
 * trailing barriers — those at = seq — into deps (their `at` unused): the event is complete when
 * the stream has completed seq and every dep's signaller its seq. A stream that waits on the
 * event waits on the deps too, so the ordering is transitive, as in CUDA.
 */
typedef struct host_event {
    host_stream_t *stream; /* NULL: never recorded */
    uint64_t seq;          /* stream->enqueued when recorded */
    uint64_t capture_id;   /* nonzero: last recorded in that capture (seq is then 0) */
    host_barrier_t *deps;  /* deps[0, ndeps): unsatisfied waits at seq when recorded */
    size_t ndeps, deps_cap;
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
 *  I5  reservations are sorted, disjoint, gran-aligned; counts.reservations/reserved_bytes match;
 *      va_limit = 0 or counts.reserved_bytes ≤ va_limit.
 *  I6  counts.events = live slots of the event table.
 *  I7  per stream: completed ≤ enqueued; live barriers are sorted by at, and
 *      completed ≤ at ≤ enqueued, seq ≤ signaller->enqueued; capture, if set, is in the list.
 *  I8  counts.user_objects = live slots of the user-object table; every live user object o has
 *      o.refs = o.caller_refs + |{entries of graph and exec refs arrays naming o}| ≥ 1, and those
 *      arrays name live user objects only; dead = NULL (between calls, no destructor is owed).
 *  I9  counts.graphs = |graph list| + |exec list|; the graph table's live slots are exactly the
 *      graph list, the exec table's the execs with id ≠ 0; graph.capture = c ⇔ c.graph = graph
 *      for every active capture c (each has one); an exec with id = 0 has a pending launch and
 *      zombie_execs counts them; launches name distinct streams, seq ≤ stream->enqueued.
 *  I10 stream identity: no record has key NULL or PER_THREAD; legacy = the record under key
 *      LEGACY (NULL if there is none), with thread = 0, blocking = 0 and capture = NULL (it is
 *      never captured); ptds[0, n_ptds) is sorted by token, tokens strictly increasing,
 *      0 < token < vpmm_host_i_next_token(); each entry's stream is in the table under its own
 *      address (key = stream) with thread = token; blocking = 1 ⇔ thread ≠ 0, and
 *      |{records with thread ≠ 0}| = n_ptds (the blocking streams are exactly the ptds entries).
 */
typedef struct host_drv {
    vpmm_driver_t base;   /* first member: the table the core calls */
    pthread_mutex_t lock; /* recursive: held by every entry of the table (driver_host.c) and by
                             the stream controls (driver_host_stream.c) */
    size_t gran, limit;
    size_t va_limit;     /* 0 = unlimited (vpmm_host_options_t) */
    int null_per_thread; /* NULL resolves like PER_THREAD (per_thread_default_stream) */

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
    host_stream_t *legacy; /* the legacy stream's record, NULL until first used */
    host_ptds_t *ptds;     /* per-thread streams by thread token, sorted (binary search) */
    size_t n_ptds, ptds_cap;

    host_capture_t *captures; /* active captures */
    uint64_t next_capture_id;

    slot_table_t uobjs, graphs, execs;
    host_graph_t *graph_list;
    host_exec_t *exec_list;
    size_t zombie_execs; /* execs destroyed with launches pending */
    host_uobj_t *dead;   /* unreferenced user objects whose destructor is owed */

    vpmm_host_wait_t *waits;
    size_t n_waits, waits_cap;

    vpmm_host_counts_t counts; /* touched_bytes is computed on demand */

    /* driver_host_graph.c's functions the stream side calls (set by vpmm_host_open): the stream
     * side sits below the graph side and reaches it only through this table. */
    const struct host_graph_ops *graph_ops;
} host_drv_t;

/* What driver_host_stream.c needs of the graph side: vpmm_host_i_graph_create, _free and
 * _progress below (vpmm_host_i_graph_ops). */
typedef struct host_graph_ops {
    struct host_graph *(*create)(host_drv_t *h, host_capture_t *c);
    void (*free)(host_drv_t *h, struct host_graph *g);
    void (*progress)(host_drv_t *h);
} host_graph_ops_t;

/* ---- shared helpers ----------------------------------------------------------------------- */

/* driver_host_base.c: the name every host instance carries (vpmm_host_i_as_host tests it). */
extern const char vpmm_host_i_name[];

/* driver_host_base.c: the instance behind d, or NULL when d is not a host backend (a wrapper,
 * NULL). */
host_drv_t *vpmm_host_i_as_host(vpmm_driver_t *d);

/* driver_host_base.c: record a failure as last_code/last_call and return res. fail names the entry
 * point, fail_call a CUDA call by name; fail_invalid is fail(h, entry, VPMM_DRV_INVALID,
 * CODE_INVALID_VALUE). */
vpmm_dres_t vpmm_host_i_fail_call(host_drv_t *h, const char *call, vpmm_dres_t res, int code);
vpmm_dres_t vpmm_host_i_fail(host_drv_t *h, vpmm_drv_entry_t entry, vpmm_dres_t res, int code);
vpmm_dres_t vpmm_host_i_fail_invalid(host_drv_t *h, vpmm_drv_entry_t entry);

/* driver_host.c / driver_host_graph.c: one violation of an invariant, counted in the caller's
 * local `bad` and described on stderr when its local `verbose` is nonzero. */
#define CHECK_THAT(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            bad++;                                                                                 \
            if (verbose) {                                                                         \
                fprintf(stderr, "vpmm host check: " __VA_ARGS__);                                  \
                fputc('\n', stderr);                                                               \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* driver_host_stream.c: the active capture with this id, or NULL. */
host_capture_t *vpmm_host_i_capture_find(const host_drv_t *h, uint64_t id);

/* driver_host_stream.c: the stream the handle names for the calling thread (driver_host.h,
 * "streams"), registered (no pending work) if new; NULL when out of host memory. */
host_stream_t *vpmm_host_i_stream_get(host_drv_t *h, vpmm_stream_t handle);

/* driver_host_stream.c: the implicit synchronisation of the legacy stream (driver_host.h), in
 * three steps so that a caller stays failure-atomic. Before an operation on st (not capturing):
 * refused returns 1 when st is the legacy stream while a blocking stream is capturing, having
 * invalidated those captures (the caller fails with CODE_CAPTURE_IMPLICIT), else 0 and changes
 * nothing; room is an upper bound on the barriers apply adds to st (the caller reserves them with
 * its own); apply adds them (at st->enqueued) and never allocates. */
int vpmm_host_i_sync_refused(host_drv_t *h, const host_stream_t *st);
size_t vpmm_host_i_sync_room(const host_drv_t *h, const host_stream_t *st);
void vpmm_host_i_sync_apply(host_drv_t *h, host_stream_t *st);

/* driver_host_stream.c: the record kept in the table under key, without resolving the handle
 * (for the check); NULL if none. */
host_stream_t *vpmm_host_i_stream_find(const host_drv_t *h, vpmm_stream_t key);

/* driver_host_stream.c: the process-wide thread token the next new thread will get (every token
 * issued so far is below it; for the check). */
uint64_t vpmm_host_i_next_token(void);

/* driver_host_stream.c: frees every event, stream, capture and wait record (for host_close). */
void vpmm_host_i_stream_fini(host_drv_t *h);

/* driver_host_stream.c: the stream-side entry points of the driver table (driver.h). */
vpmm_dres_t vpmm_host_i_event_create(vpmm_driver_t *d, vpmm_stream_t on,
                                     vpmm_drv_event_t *out_event);
vpmm_dres_t vpmm_host_i_event_destroy(vpmm_driver_t *d, vpmm_drv_event_t event);
vpmm_dres_t vpmm_host_i_event_record(vpmm_driver_t *d, vpmm_drv_event_t event,
                                     vpmm_stream_t stream);
vpmm_dres_t vpmm_host_i_event_query(vpmm_driver_t *d, vpmm_drv_event_t event);
vpmm_dres_t vpmm_host_i_stream_wait_event(vpmm_driver_t *d, vpmm_stream_t stream,
                                          vpmm_drv_event_t event);
vpmm_dres_t vpmm_host_i_capture_info(vpmm_driver_t *d, vpmm_stream_t stream,
                                     vpmm_capture_status_t *out_status, uint64_t *out_id,
                                     vpmm_graph_t *out_graph);
vpmm_dres_t vpmm_host_i_synchronize(vpmm_driver_t *d);
vpmm_dres_t vpmm_host_i_begin_capture(vpmm_driver_t *d, vpmm_stream_t stream,
                                      vpmm_capture_mode_t mode);
vpmm_dres_t vpmm_host_i_end_capture(vpmm_driver_t *d, vpmm_stream_t stream,
                                    vpmm_graph_t *out_graph);

/* ---- graphs and user objects (driver_host_graph.c) ---------------------------------------- */

/* The handle of a graph: its slot id, as events carry theirs. */
static inline vpmm_graph_t vpmm_host_i_graph_handle(const host_graph_t *g)
{
    return (vpmm_graph_t)(uintptr_t)g->id;
}

/* A new graph owned by capture c (NULL when out of host memory; nothing changed then). */
host_graph_t *vpmm_host_i_graph_create(host_drv_t *h, host_capture_t *c);

/* Destroys g, dropping its references (destructors owed go on h->dead). Never allocates. */
void vpmm_host_i_graph_free(host_drv_t *h, host_graph_t *g);

/* After work completed: frees destroyed execs whose launches are done, then runs the destructors
 * owed. Every entry point and control that can drop a reference ends with it. */
void vpmm_host_i_graph_progress(host_drv_t *h);

/* Frees every graph, exec and user object without running destructors (for host_close). */
void vpmm_host_i_graph_fini(host_drv_t *h);

/* The three above, for the stream side (h->graph_ops). */
extern const host_graph_ops_t vpmm_host_i_graph_ops;

/* I8 and I9; returns the number of violations. */
size_t vpmm_host_i_graph_check(const host_drv_t *h, int verbose);

/* The graph-side entry points of the driver table (driver.h rule 8). */
vpmm_dres_t vpmm_host_i_user_object_create(vpmm_driver_t *d, vpmm_drv_uobj_fn destroy, void *arg,
                                           vpmm_drv_uobj_t *out);
vpmm_dres_t vpmm_host_i_graph_retain_user_object(vpmm_driver_t *d, vpmm_graph_t graph,
                                                 vpmm_drv_uobj_t obj);
vpmm_dres_t vpmm_host_i_user_object_release(vpmm_driver_t *d, vpmm_drv_uobj_t obj);

#endif /* VPMM_DRIVER_HOST_INTERNAL_H */
