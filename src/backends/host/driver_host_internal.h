/*
 * driver_host_internal.h — what the parts of the host emulation backend share: driver_host.c (the
 * node and its views: open, close, the shared node, the driver table, counts and the invariant
 * check), driver_host_mem.c (memory: memfd extents, handles, mappings and their per-device access,
 * reservations, export and import), driver_host_graph.c (graphs, executable graphs, user objects)
 * and driver_host_stream.c (simulated streams, events and capture), on driver_host_base.c (slot
 * tables, views, failure recorders). Calls go one way: driver_host.c -> _mem.c, and
 * driver_host.c -> _graph.c -> _stream.c, all of them -> _base.c; the stream side reaches the
 * graph side only through h->graph_ops. It holds the node (host_drv_t), its views (host_view_t)
 * and records, the invariants as equations above struct host_drv, and the vpmm_host_i_* helpers
 * one part defines and another calls. Nothing outside those files may include it: tests and the
 * core use driver_host.h.
 *
 * Thread-safety: none of its own; every entry point and control holds host_drv.lock (the node's,
 * whichever view it came through).
 * Invariants: I1..I11 above struct host_drv, checked by vpmm_host_check() in driver_host.c (I6, I7,
 * I10, I11 there; I1..I5 through vpmm_host_i_mem_check in driver_host_mem.c, I8 and I9 through
 * vpmm_host_i_graph_check in driver_host_graph.c).
 */
#ifndef VPMM_DRIVER_HOST_INTERNAL_H
#define VPMM_DRIVER_HOST_INTERNAL_H

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "array.h"
#include "driver_host.h"

/* Event tokens carry a 64-bit slot id in the pointer (see slot_table_t). */
_Static_assert(sizeof(uintptr_t) >= sizeof(uint64_t), "the host backend needs 64-bit pointers");

/* Raw codes stored in last_code: the CUresult / cudaError_t values of the matching CUDA error. */
enum {
    CODE_INVALID_VALUE = 1,
    CODE_OUT_OF_MEMORY = 2,
    CODE_PEER_ACCESS_UNSUPPORTED = 217,
    CODE_INVALID_HANDLE = 400,
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

/*
 * A physical allocation. An own handle (mem_create; fd = -1) is an extent of the node's memfd and
 * counts against its device's memory. An imported one (mem_import; fd ≥ 0) is [off, off + size)
 * of its own descriptor, a dup of what the exporter gave, and counts against no device: the memory
 * is the exporter's. An import of the node's own memfd pins the own handle it names (origin), so
 * that the extent outlives that handle's release and last unmap, as rule 10 wants.
 */
typedef struct host_handle {
    struct host_handle *prev, *next; /* every record, released ones included (for close) */
    uint64_t id;                     /* 0 once released (the record lives on while mapped) */
    size_t off, size;                /* where its bytes start in the memfd or in fd */
    size_t nmaps;                    /* mappings of this handle */
    int dev;                         /* the device of the view that created or imported it */
    int fd;                          /* -1: own (the node's memfd); else imported, its own fd */
    int exportable;                  /* mem_export may export it */
    size_t pins;                     /* own: imported handles whose origin it is */
    int exported;                    /* own: mem_export gave a descriptor of it away: once dead
                                        its extent is retired, never reused (see retired) */
    struct host_handle *origin;      /* imported: the own handle of this node it aliases */
} host_handle_t;

/* A mapping: a node of a treap keyed by va (expected O(log n) per operation). */
typedef struct host_map {
    struct host_map *left, *right;
    uint64_t prio; /* max-heap on prio */
    uintptr_t va;
    size_t size, offset; /* bytes [offset, offset+size) of handle */
    host_handle_t *handle;
    /* Access (rule 9): bit k set, device k may read and write. One mask for the whole mapping
     * while gmask is NULL; once a grant or revoke covered part of it, one per granule (gmask[i]
     * for [va + i·gran, va + (i+1)·gran)), and `access` is unused. */
    uint64_t access;
    uint64_t *gmask;
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

/* The handles CUDA gives a meaning of its own (driver_host.h, "streams"). Each device's legacy
 * stream record carries the key HOST_STREAM_LEGACY and lives in host_dev.legacy, outside the
 * stream table; no record is ever kept under NULL or HOST_STREAM_PER_THREAD, which are resolved
 * to a record before any lookup. */
#define HOST_STREAM_LEGACY     ((vpmm_stream_t)(uintptr_t)0x1)
#define HOST_STREAM_PER_THREAD ((vpmm_stream_t)(uintptr_t)0x2)

typedef struct host_stream {
    vpmm_stream_t key; /* the handle, LEGACY, or the record's own address (synthetic) */
    int dev;           /* the device it belongs to (rule 9) */
    uint64_t thread;   /* nonzero: the per-thread stream of the thread with this token */
    int blocking;      /* synchronises implicitly with its device's legacy stream */
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
    int dev;               /* recorded only on streams of this device (rule 9) */
    host_stream_t *stream; /* NULL: never recorded */
    uint64_t seq;          /* stream->enqueued when recorded */
    uint64_t capture_id;   /* nonzero: last recorded in that capture (seq is then 0) */
    host_barrier_t *deps;  /* deps[0, ndeps): unsatisfied waits at seq when recorded */
    size_t ndeps, deps_cap;
} host_event_t;

/* One device of the node: its memory, its legacy stream, its per-thread streams. */
typedef struct host_dev {
    size_t handles, handle_bytes; /* its own handles (released-but-mapped or pinned included) */
    host_stream_t *legacy;        /* its legacy stream's record, NULL until first used */
    host_ptds_t *ptds;            /* its per-thread streams by thread token, sorted */
    size_t n_ptds, ptds_cap;
} host_dev_t;

struct host_drv;

/*
 * A view: what vpmm_host_open, vpmm_host_open_device and vpmm_host_open_shared return. It is the
 * vpmm_driver_t the caller holds (base, first member), for one device of its node: base.device
 * and the special stream handles are its own, everything else is the node's. Its last failure is
 * its own (base.last_code / last_call).
 */
typedef struct host_view {
    vpmm_driver_t base;
    struct host_drv *node;
    struct host_view *prev, *next; /* the node's views */
    int null_per_thread;           /* NULL resolves like PER_THREAD (per_thread_default_stream) */
} host_view_t;

/*
 * One node of ndev devices. Invariants (vpmm_host_check in driver_host.c verifies each):
 *  I1  the free extents, the extents of all own handle records and the retired ones tile
 *      [0, file_size) exactly;
 *      extents are sorted, non-empty, never adjacent (coalesced), none ends at file_size (the
 *      tail is truncated away), all offsets and sizes are multiples of gran.
 *  I2  own records (fd = -1): counts.handles = |them| = Σ_k devs[k].handles, counts.handle_bytes
 *      = Σ size = Σ_k devs[k].handle_bytes, and devs[k].handle_bytes ≤ limit (the limit is per
 *      device); imported records (fd ≥ 0, fd open): counts.imported = |them|,
 *      counts.imported_bytes = Σ size; every record's dev < ndev; a record with id ≠ 0 is the one
 *      slot_get(handles, id) returns; id = 0 ⇒ nmaps > 0 or pins > 0; an own record's pins =
 *      |imported records whose origin it is|, and an origin has the importer's off and size.
 *  I3  n_ext ≤ counts.handles + counts.retired + 1, and ext_cap ≥ that
 *      once a handle exists, so freeing an extent never allocates.
 *  I4  mappings are pairwise disjoint, each inside one reservation, offset + size ≤ its handle's
 *      size; Σ handle.nmaps = counts.mappings, Σ mapping.size = counts.mapped_bytes. Access masks
 *      (the mapping's, or each granule's) ⊆ all_devs (bits [0, ndev)); the pages are
 *      PROT_READ|PROT_WRITE where the mask is nonzero and PROT_NONE where it is 0 (set_access
 *      and revoke_access change both together). That last equation is checked against the
 *      kernel's table by vpmm_host_check_access, not vpmm_host_check: reading /proc/self/maps
 *      after every operation made the fuzzer's replay 7x slower; the host tests call both.
 *  I5  reservations are sorted, disjoint, gran-aligned; counts.reservations/reserved_bytes match;
 *      va_limit = 0 or counts.reserved_bytes ≤ va_limit.
 *  I6  counts.events = live slots of the event table; every event's dev < ndev, and a recorded
 *      event's stream is on its dev.
 *  I7  per stream: completed ≤ enqueued; live barriers are sorted by at, and
 *      completed ≤ at ≤ enqueued, seq ≤ signaller->enqueued; capture, if set, is in the list;
 *      dev < ndev.
 *  I8  counts.user_objects = live slots of the user-object table; every live user object o has
 *      o.refs = o.caller_refs + |{entries of graph and exec refs arrays naming o}| ≥ 1, and those
 *      arrays name live user objects only; dead = NULL (between calls, no destructor is owed).
 *  I9  counts.graphs = |graph list| + |exec list|; the graph table's live slots are exactly the
 *      graph list, the exec table's the execs with id ≠ 0; graph.capture = c ⇔ c.graph = graph
 *      for every active capture c (each has one); an exec with id = 0 has a pending launch and
 *      zombie_execs counts them; launches name distinct streams, seq ≤ stream->enqueued.
 *  I10 stream identity, per device k: no record of the table has key NULL, LEGACY or PER_THREAD;
 *      devs[k].legacy, if any, has key LEGACY, dev = k, thread = 0, blocking = 0 and capture =
 *      NULL (it is never captured); devs[k].ptds is sorted by token, tokens strictly increasing,
 *      0 < token < vpmm_host_i_next_token(); each entry's stream is in the table under its own
 *      address (key = stream) with thread = token and dev = k; blocking = 1 ⇔ thread ≠ 0, and
 *      |{records of device k with thread ≠ 0}| = devs[k].n_ptds.
 *  I11 views: n_views = |view list| ≥ 1; every view has node = this node, base.device < ndev,
 *      base.device_count = ndev, base.peer_capable = vpmm_host_i_reach(h, base.device), and
 *      base.exportable ∈ {0, 1}; reach(k) holds bit k, and j ∈ reach(k) ⇔ k ∈ reach(j).
 */
typedef struct host_drv {
    pthread_mutex_t lock; /* recursive: held by every entry of the table and every control, of
                             every view */
    int ndev;
    uint64_t isolated;  /* bit k: device k reaches no other device (vpmm_host_options_t) */
    host_dev_t *devs;   /* devs[0, ndev) */
    host_view_t *views; /* the open views; the node is freed when the last one closes */
    size_t n_views;
    int shared;         /* the process-wide node of vpmm_host_open_shared */
    size_t gran, limit; /* limit: per device */
    size_t va_limit;    /* 0 = unlimited (vpmm_host_options_t) */

    int fd;
    dev_t fd_dev; /* the memfd's identity (fstat), to recognise an import of the node's own */
    ino_t fd_ino;
    size_t file_size;
    host_extent_t *ext; /* free extents of the memfd, sorted by off */
    size_t n_ext, ext_cap;

    slot_table_t handles;
    host_handle_t *handle_list;
    /* Dead own records whose bytes another node or process may still map (they were exported):
     * their extents stay as they are, never punched, never reused, until the node goes, as a
     * CUDA handle's memory lives while any process holds an import of it. */
    host_handle_t *retired; /* counts.retired of them */

    host_map_t *maps; /* treap root */
    uint64_t rng;     /* treap priorities (xorshift64*, deterministic) */

    host_resv_t *resv; /* sorted by base */
    size_t n_resv, resv_cap;

    slot_table_t events;

    host_stream_t **stream_tab; /* open addressing by key, linear probing; never shrinks */
    size_t stream_cap, n_streams;

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

    /* driver_host_graph.c's functions the stream side calls (set at open): the stream side sits
     * below the graph side and reaches it only through this table. */
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

/* The view behind an entry point's d (the table is only ever installed in views). */
static inline host_view_t *vpmm_host_i_view(vpmm_driver_t *d)
{
    return (host_view_t *)d;
}

/* The device set of the node: bits [0, ndev). */
static inline uint64_t vpmm_host_i_all_devs(const host_drv_t *h)
{
    return h->ndev >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << h->ndev) - 1;
}

/* The devices device k can be granted access for (its peer_capable): itself, and unless one of
 * the two is isolated, every other device of the node. */
static inline uint64_t vpmm_host_i_reach(const host_drv_t *h, int k)
{
    uint64_t own = (uint64_t)1 << k;
    return (h->isolated & own) ? own : (vpmm_host_i_all_devs(h) & ~h->isolated) | own;
}

/* The raw code of a failed system call: ENOMEM is what CUDA reports as out of memory, the rest is
 * unknown. */
static inline int vpmm_host_i_errno_code(int err)
{
    return err == ENOMEM ? CODE_OUT_OF_MEMORY : CODE_UNKNOWN;
}

static inline int vpmm_host_i_gran_aligned(const host_drv_t *h, uintptr_t x)
{
    return x % h->gran == 0;
}

/* driver_host_base.c: the name every view carries (vpmm_host_i_as_view tests it). */
extern const char vpmm_host_i_name[];

/* driver_host_base.c: the view behind d, or NULL when d is not a host backend (a wrapper, NULL). */
host_view_t *vpmm_host_i_as_view(vpmm_driver_t *d);

/* driver_host_base.c: the view behind d with its node's lock held, or NULL (nothing held) when d
 * is not a host backend; unlock_view releases it (NULL: nothing). The controls' bracket. */
host_view_t *vpmm_host_i_lock_view(vpmm_driver_t *d);
void vpmm_host_i_unlock_view(host_view_t *v);

/* driver_host_base.c: record a failure as the view's last_code/last_call and return res. fail
 * names the entry point, fail_call a CUDA call by name; fail_invalid is fail(v, entry,
 * VPMM_DRV_INVALID, CODE_INVALID_VALUE). */
vpmm_dres_t vpmm_host_i_fail_call(host_view_t *v, const char *call, vpmm_dres_t res, int code);
vpmm_dres_t vpmm_host_i_fail(host_view_t *v, vpmm_drv_entry_t entry, vpmm_dres_t res, int code);
vpmm_dres_t vpmm_host_i_fail_invalid(host_view_t *v, vpmm_drv_entry_t entry);

/* One violation of an invariant, counted in the caller's local `bad` and described on stderr when
 * its local `verbose` is nonzero (the check functions of every part). */
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

/* ---- memory (driver_host_mem.c) ----------------------------------------------------------- */

/* The mapping holding address va, or NULL. */
host_map_t *vpmm_host_i_map_at(const host_drv_t *h, uintptr_t va);

/* The memory-side entry points of the driver table (driver.h rules 2-4, 10). */
vpmm_dres_t vpmm_host_i_granularity(vpmm_driver_t *d, size_t *out_bytes);
vpmm_dres_t vpmm_host_i_va_reserve(vpmm_driver_t *d, size_t size, size_t align, uintptr_t *out_va);
vpmm_dres_t vpmm_host_i_va_free(vpmm_driver_t *d, uintptr_t va, size_t size);
vpmm_dres_t vpmm_host_i_mem_create(vpmm_driver_t *d, size_t size, vpmm_drv_handle_t *out_handle);
vpmm_dres_t vpmm_host_i_mem_release(vpmm_driver_t *d, vpmm_drv_handle_t handle);
vpmm_dres_t vpmm_host_i_mem_map(vpmm_driver_t *d, uintptr_t va, size_t size,
                                vpmm_drv_handle_t handle, size_t offset);
vpmm_dres_t vpmm_host_i_mem_unmap(vpmm_driver_t *d, uintptr_t va, size_t size);
vpmm_dres_t vpmm_host_i_mem_export(vpmm_driver_t *d, vpmm_drv_handle_t handle,
                                   vpmm_drv_shareable_t *out);
vpmm_dres_t vpmm_host_i_mem_import(vpmm_driver_t *d, const vpmm_drv_shareable_t *in,
                                   vpmm_drv_handle_t *out_handle);
vpmm_dres_t vpmm_host_i_mem_get_info(vpmm_driver_t *d, size_t *out_free, size_t *out_total);

/* Unmaps every reservation and frees every handle, mapping and extent record, closing imported
 * handles' descriptors and the memfd (for the node's last close). */
void vpmm_host_i_mem_fini(host_drv_t *h);

/* I1..I5; returns the number of violations. */
size_t vpmm_host_i_mem_check(const host_drv_t *h, int verbose);

/* ---- access (driver_host_access.c) -------------------------------------------------------- */

/* The access entry points of the driver table (driver.h rule 9). */
vpmm_dres_t vpmm_host_i_set_access(vpmm_driver_t *d, uintptr_t va, size_t size, const int *peers,
                                   size_t npeers);
vpmm_dres_t vpmm_host_i_revoke_access(vpmm_driver_t *d, uintptr_t va, size_t size, int peer);
vpmm_dres_t vpmm_host_i_get_access(vpmm_driver_t *d, uintptr_t va, int device, int *out_rw);

/* Whether the view's device may access every byte of [va, va + size), all of it mapped
 * (vpmm_host_can_access). */
int vpmm_host_i_can_access(const host_view_t *v, uintptr_t va, size_t size);

/* I4's access half: masks within the node's devices and, with_kernel, pages protected as the
 * masks say (read from /proc/self/maps: slow). Returns the number of violations. */
size_t vpmm_host_i_access_check(const host_drv_t *h, int verbose, int with_kernel);

/* ---- streams, events, capture (driver_host_stream.c) -------------------------------------- */

/* The active capture with this id, or NULL. */
host_capture_t *vpmm_host_i_capture_find(const host_drv_t *h, uint64_t id);

/* The stream the handle names for the calling thread through view v (driver_host.h, "streams"),
 * registered (no pending work, on v's device) if new; NULL when out of host memory. */
host_stream_t *vpmm_host_i_stream_get(host_view_t *v, vpmm_stream_t handle);

/* The implicit synchronisation of a device's legacy stream (driver_host.h), in three steps so that
 * a caller stays failure-atomic. Before an operation on st (not capturing): refused returns 1 when
 * st is a legacy stream while a blocking stream of its device is capturing, having invalidated
 * those captures (the caller fails with CODE_CAPTURE_IMPLICIT), else 0 and changes nothing; room is
 * an upper bound on the barriers apply adds to st (the caller reserves them with its own); apply
 * adds them (at st->enqueued) and never allocates. */
int vpmm_host_i_sync_refused(host_drv_t *h, const host_stream_t *st);
size_t vpmm_host_i_sync_room(const host_drv_t *h, const host_stream_t *st);
void vpmm_host_i_sync_apply(host_drv_t *h, host_stream_t *st);

/* The record kept in the table under key, without resolving the handle (for the check); NULL if
 * none. */
host_stream_t *vpmm_host_i_stream_find(const host_drv_t *h, vpmm_stream_t key);

/* The process-wide thread token the next new thread will get (every token issued so far is below
 * it; for the check). */
uint64_t vpmm_host_i_next_token(void);

/* Frees every event, stream, capture and wait record (for the node's last close). */
void vpmm_host_i_stream_fini(host_drv_t *h);

/* The stream-side entry points of the driver table (driver.h). */
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
vpmm_dres_t vpmm_host_i_stream_device(vpmm_driver_t *d, vpmm_stream_t stream, int *out_device);

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

/* Frees every graph, exec and user object without running destructors (for the last close). */
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
