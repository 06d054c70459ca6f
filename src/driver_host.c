/*
 * driver_host.c — the host emulation backend (driver_host.h): the driver contract of driver.h
 * implemented on the CPU, faithfully enough that misuse caught by CUDA is caught here too.
 *
 *  - VA: a reservation is an mmap(PROT_NONE, MAP_NORESERVE) placeholder, so 8 TiB costs nothing.
 *  - Physical memory: every handle is an extent of ONE memfd (thousands of handles must fit under
 *    a 1024-fd limit). Extents come from a first-fit, coalescing free list; the file grows with
 *    ftruncate (sparse: untouched pages cost nothing) and freed extents are punched out (or
 *    truncated away at the tail) so touched memory really goes back.
 *  - Mapping: mmap(MAP_SHARED|MAP_FIXED) of the handle's extent over the placeholder, so aliases
 *    see the same bytes; set_access is mprotect; unmap puts a PROT_NONE placeholder back.
 *  - Streams, events and capture are bookkeeping only; work advances when a test says so.
 *
 * Thread-safety: none; the owning pool serialises every call (driver.h rule 7).
 * Invariants: listed as equations above struct host_drv, checked by vpmm_host_check().
 * Failure atomicity (rule 1): each entry point validates and allocates everything it needs before
 * its first visible change. Release, unmap, va_free and event_destroy never allocate, so the
 * teardown paths cannot fail for lack of host memory.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* memfd_create, fallocate, MAP_NORESERVE */
#endif

#include "driver_host.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

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
    CODE_CAPTURED_EVENT = 907,
    CODE_UNKNOWN = 999,
};

#define DEFAULT_GRANULARITY ((size_t)2 << 20)
#define DEFAULT_LIMIT       ((size_t)80 << 30)

static const char call_begin_capture[] = "cuStreamBeginCapture";
static const char call_end_capture[] = "cuStreamEndCapture";

/* ---- small containers -------------------------------------------------------------------- */

/* Makes room for `need` elements in the array *arr_ptr of capacity *cap (doubling). The pointer
 * is moved through memcpy so one helper serves every element type without aliasing tricks. */
static int reserve_impl(void *arr_ptr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 8;
    while (n < need) {
        if (n > SIZE_MAX / 2 / elem)
            return -1;
        n *= 2;
    }
    void *old;
    memcpy(&old, arr_ptr, sizeof old);
    void *p = realloc(old, n * elem);
    if (!p)
        return -1;
    memcpy(arr_ptr, &p, sizeof p);
    *cap = n;
    return 0;
}
#define RESERVE(arr, cap, need) reserve_impl(&(arr), &(cap), (need), sizeof(*(arr)))

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

static uint64_t slot_put(slot_table_t *t, void *obj)
{
    uint32_t i;
    if (t->free_head) {
        i = t->free_head - 1;
        t->free_head = t->slots[i].next_free;
    } else {
        if (t->len >= UINT32_MAX - 1 || RESERVE(t->slots, t->cap, t->len + 1))
            return 0;
        i = (uint32_t)t->len++;
        t->slots[i].gen = 1;
    }
    t->slots[i].obj = obj;
    t->slots[i].next_free = 0;
    return ((uint64_t)t->slots[i].gen << 32) | (uint64_t)(i + 1);
}

static void *slot_get(const slot_table_t *t, uint64_t id)
{
    uint64_t i = id & UINT32_MAX;
    if (i == 0 || i > t->len)
        return NULL;
    const slot_t *s = &t->slots[i - 1];
    return s->gen == (uint32_t)(id >> 32) ? s->obj : NULL;
}

/* id must resolve (slot_get != NULL). */
static void slot_drop(slot_table_t *t, uint64_t id)
{
    uint32_t i = (uint32_t)(id & UINT32_MAX) - 1;
    slot_t *s = &t->slots[i];
    s->obj = NULL;
    s->gen = s->gen == UINT32_MAX ? 1 : s->gen + 1;
    s->next_free = t->free_head;
    t->free_head = i + 1;
}

/* ---- objects ----------------------------------------------------------------------------- */

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
 * One instance. Invariants (vpmm_host_check verifies each):
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

static void host_close(vpmm_driver_t *d);

/* The instance behind d, or NULL when d is not a host backend (a wrapper, NULL, ...). */
static host_drv_t *as_host(vpmm_driver_t *d)
{
    return d && d->close == host_close ? (host_drv_t *)d : NULL;
}

static vpmm_dres_t fail_call(host_drv_t *h, const char *call, vpmm_dres_t res, int code)
{
    h->base.last_code = code;
    h->base.last_call = call;
    return res;
}

static vpmm_dres_t fail(host_drv_t *h, vpmm_drv_entry_t entry, vpmm_dres_t res, int code)
{
    return fail_call(h, vpmm_drv_entry_name(entry), res, code);
}

static vpmm_dres_t fail_invalid(host_drv_t *h, vpmm_drv_entry_t entry)
{
    return fail(h, entry, VPMM_DRV_INVALID, CODE_INVALID_VALUE);
}

/* A failed system call: ENOMEM is what CUDA reports as out of memory, the rest is unknown. */
static int errno_code(int err)
{
    return err == ENOMEM ? CODE_OUT_OF_MEMORY : CODE_UNKNOWN;
}

static int gran_aligned(const host_drv_t *h, uintptr_t x)
{
    return vpmm_is_aligned(x, h->gran);
}

/* ---- memfd extents ------------------------------------------------------------------------ */

/* First fit among the free extents, else grow the file (I1: no free extent touches its end). */
static int extent_alloc(host_drv_t *h, size_t size, size_t *out_off)
{
    for (size_t i = 0; i < h->n_ext; i++) {
        host_extent_t *e = &h->ext[i];
        if (e->len < size)
            continue;
        *out_off = e->off;
        e->off += size;
        e->len -= size;
        if (e->len == 0) {
            memmove(e, e + 1, (h->n_ext - i - 1) * sizeof *e);
            h->n_ext--;
        }
        return 0;
    }
    size_t off = h->file_size;
    if (size > (size_t)INT64_MAX - off || ftruncate(h->fd, (off_t)(off + size)) != 0)
        return -1;
    h->file_size = off + size;
    *out_off = off;
    return 0;
}

/*
 * Returns [off, off+size) to the free list, coalescing, and gives its memory back to the kernel:
 *
 *   before:  [free A][freed][free B]        after:  [free A........B]   (one extent)
 *   at the tail:  [free A][freed]|EOF   ->  ftruncate to A.off          (no extent left)
 *
 * Never allocates (I3 keeps capacity for the one extra extent).
 */
static void extent_free(host_drv_t *h, size_t off, size_t size)
{
    size_t lo = 0, hi = h->n_ext; /* first extent after off */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (h->ext[mid].off < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t i = lo;
    int join_prev = i > 0 && h->ext[i - 1].off + h->ext[i - 1].len == off;
    int join_next = i < h->n_ext && off + size == h->ext[i].off;
    if (join_prev && join_next) {
        h->ext[i - 1].len += size + h->ext[i].len;
        memmove(&h->ext[i], &h->ext[i + 1], (h->n_ext - i - 1) * sizeof *h->ext);
        h->n_ext--;
        i--;
    } else if (join_prev) {
        h->ext[i - 1].len += size;
        i--;
    } else if (join_next) {
        h->ext[i].off = off;
        h->ext[i].len += size;
    } else {
        memmove(&h->ext[i + 1], &h->ext[i], (h->n_ext - i) * sizeof *h->ext);
        h->ext[i] = (host_extent_t){ off, size };
        h->n_ext++;
    }
    host_extent_t *e = &h->ext[i];
    if (e->off + e->len == h->file_size && ftruncate(h->fd, (off_t)e->off) == 0) {
        h->file_size = e->off;
        h->n_ext--; /* e was the last extent */
        return;
    }
    /* A failed punch only costs memory: the extent is still free and reusable. */
    (void)fallocate(h->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)size);
}

static void handle_free(host_drv_t *h, host_handle_t *hd)
{
    extent_free(h, hd->off, hd->size);
    if (hd->prev)
        hd->prev->next = hd->next;
    else
        h->handle_list = hd->next;
    if (hd->next)
        hd->next->prev = hd->prev;
    h->counts.handles--;
    h->counts.handle_bytes -= hd->size;
    free(hd);
}

/* ---- mapping treap ------------------------------------------------------------------------ */

static uint64_t next_prio(host_drv_t *h)
{
    h->rng ^= h->rng >> 12;
    h->rng ^= h->rng << 25;
    h->rng ^= h->rng >> 27;
    return h->rng * 0x2545F4914F6CDD1DULL;
}

/* Splits t into keys < key (*l) and keys ≥ key (*r). */
static void map_split(host_map_t *t, uintptr_t key, host_map_t **l, host_map_t **r)
{
    if (!t) {
        *l = *r = NULL;
    } else if (t->va < key) {
        map_split(t->right, key, &t->right, r);
        *l = t;
    } else {
        map_split(t->left, key, l, &t->left);
        *r = t;
    }
}

/* Every key of l is below every key of r. */
static host_map_t *map_merge(host_map_t *l, host_map_t *r)
{
    if (!l)
        return r;
    if (!r)
        return l;
    if (l->prio > r->prio) {
        l->right = map_merge(l->right, r);
        return l;
    }
    r->left = map_merge(l, r->left);
    return r;
}

/* The mapping with the largest va < key, or NULL. */
static host_map_t *map_below(const host_drv_t *h, uintptr_t key)
{
    host_map_t *t = h->maps, *best = NULL;
    while (t) {
        if (t->va < key) {
            best = t;
            t = t->right;
        } else {
            t = t->left;
        }
    }
    return best;
}

/* Mappings are disjoint and sorted, so only the last one starting below va+size can overlap. */
static int map_overlaps(const host_drv_t *h, uintptr_t va, size_t size)
{
    const host_map_t *m = map_below(h, va + size);
    return m && m->va + m->size > va;
}

static void map_insert(host_drv_t *h, host_map_t *n)
{
    host_map_t *l, *r;
    n->left = n->right = NULL;
    n->prio = next_prio(h);
    map_split(h->maps, n->va, &l, &r);
    h->maps = map_merge(map_merge(l, n), r);
}

static void map_erase(host_drv_t *h, const host_map_t *n)
{
    host_map_t *l, *m, *r;
    map_split(h->maps, n->va, &l, &r);
    map_split(r, n->va + 1, &m, &r);
    h->maps = map_merge(l, r);
}

static void map_free_all(host_map_t *t)
{
    if (!t)
        return;
    map_free_all(t->left);
    map_free_all(t->right);
    free(t);
}

/* ---- reservations ------------------------------------------------------------------------- */

/* Index of the first reservation with base > va. */
static size_t resv_upper(const host_drv_t *h, uintptr_t va)
{
    size_t lo = 0, hi = h->n_resv;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (h->resv[mid].base <= va)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The reservation holding all of [va, va+size), or NULL. */
static const host_resv_t *resv_containing(const host_drv_t *h, uintptr_t va, size_t size)
{
    size_t i = resv_upper(h, va);
    if (i == 0)
        return NULL;
    const host_resv_t *r = &h->resv[i - 1];
    size_t off = va - r->base;
    return off <= r->size && size <= r->size - off ? r : NULL;
}

/* A PROT_NONE placeholder over [va, va+size): what a reservation holds where nothing is mapped. */
static void *placeholder(void *hint, size_t size, int flags)
{
    return mmap(hint, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | flags, -1, 0);
}

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

/* The stream for key, registered (no pending work) if new; NULL when out of host memory. */
static host_stream_t *stream_get(host_drv_t *h, vpmm_stream_t key)
{
    host_stream_t *st = stream_find(h, key);
    if (st)
        return st;
    st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->key = key;
    if (stream_insert(h, st) != 0) {
        free(st);
        return NULL;
    }
    return st;
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

static void complete_everything(host_drv_t *h)
{
    for (size_t i = 0; i < h->stream_cap; i++)
        if (h->stream_tab[i])
            stream_complete_to(h->stream_tab[i], h->stream_tab[i]->enqueued);
}

/* ---- captures ----------------------------------------------------------------------------- */

static host_capture_t *capture_find(const host_drv_t *h, uint64_t id)
{
    host_capture_t *c = h->captures;
    while (c && c->id != id)
        c = c->next;
    return c;
}

/* ---- entry points: memory ----------------------------------------------------------------- */

static vpmm_dres_t host_granularity(vpmm_driver_t *d, size_t *out_bytes)
{
    host_drv_t *h = (host_drv_t *)d;
    if (!out_bytes)
        return fail_invalid(h, VPMM_DRV_GRANULARITY);
    *out_bytes = h->gran;
    return VPMM_DRV_OK;
}

static vpmm_dres_t host_va_reserve(vpmm_driver_t *d, size_t size, size_t align, uintptr_t *out_va)
{
    host_drv_t *h = (host_drv_t *)d;
    const vpmm_drv_entry_t e = VPMM_DRV_VA_RESERVE;
    if (!out_va || size == 0 || !gran_aligned(h, size) || !gran_aligned(h, align))
        return fail_invalid(h, e);
    if (align == 0)
        align = h->gran; /* as CUDA: 0 = the default alignment */
    /* Over-reserve so that an aligned start exists inside, then trim both ends:
     *   [p ...head... |start ....... size ....... |end ...tail... p+span)          */
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t extra = align > page ? align - page : 0;
    if (size > SIZE_MAX - extra)
        return fail(h, e, VPMM_DRV_OUT_OF_MEMORY, CODE_OUT_OF_MEMORY);
    size_t span = size + extra;
    if (RESERVE(h->resv, h->resv_cap, h->n_resv + 1))
        return fail(h, e, VPMM_DRV_OUT_OF_MEMORY, CODE_OUT_OF_MEMORY);
    void *p = placeholder(NULL, span, 0);
    if (p == MAP_FAILED)
        return fail(h, e, VPMM_DRV_OUT_OF_MEMORY, CODE_OUT_OF_MEMORY);
    uintptr_t start = vpmm_align_up((uintptr_t)p, align), end = start + size;
    if (start > (uintptr_t)p)
        munmap(p, start - (uintptr_t)p);
    if ((uintptr_t)p + span > end)
        munmap((void *)end, (uintptr_t)p + span - end);

    size_t i = resv_upper(h, start);
    memmove(&h->resv[i + 1], &h->resv[i], (h->n_resv - i) * sizeof *h->resv);
    h->resv[i] = (host_resv_t){ start, size };
    h->n_resv++;
    h->counts.reservations++;
    h->counts.reserved_bytes += size;
    *out_va = start;
    return VPMM_DRV_OK;
}

static vpmm_dres_t host_va_free(vpmm_driver_t *d, uintptr_t va, size_t size)
{
    host_drv_t *h = (host_drv_t *)d;
    const vpmm_drv_entry_t e = VPMM_DRV_VA_FREE;
    size_t i = resv_upper(h, va);
    if (size == 0 || i == 0 || h->resv[i - 1].base != va || h->resv[i - 1].size != size)
        return fail_invalid(h, e); /* not exactly one reservation */
    if (map_overlaps(h, va, size))
        return fail_invalid(h, e); /* rule 3: the whole reservation must be unmapped */
    if (munmap((void *)va, size) != 0)
        return fail(h, e, VPMM_DRV_ERROR, errno_code(errno));
    i--;
    memmove(&h->resv[i], &h->resv[i + 1], (h->n_resv - i - 1) * sizeof *h->resv);
    h->n_resv--;
    h->counts.reservations--;
    h->counts.reserved_bytes -= size;
    return VPMM_DRV_OK;
}

static vpmm_dres_t host_mem_create(vpmm_driver_t *d, size_t size, vpmm_drv_handle_t *out_handle)
{
    host_drv_t *h = (host_drv_t *)d;
    const vpmm_drv_entry_t e = VPMM_DRV_MEM_CREATE;
    if (!out_handle || size == 0 || !gran_aligned(h, size))
        return fail_invalid(h, e);
    if (size > h->limit - h->counts.handle_bytes)
        return fail(h, e, VPMM_DRV_OUT_OF_MEMORY, CODE_OUT_OF_MEMORY);
    /* I3: room for the extent this handle may split off when it is freed. */
    if (RESERVE(h->ext, h->ext_cap, h->counts.handles + 2))
        return fail(h, e, VPMM_DRV_OUT_OF_MEMORY, CODE_OUT_OF_MEMORY);
    host_handle_t *hd = calloc(1, sizeof *hd);
    if (!hd)
        return fail(h, e, VPMM_DRV_OUT_OF_MEMORY, CODE_OUT_OF_MEMORY);
    uint64_t id = slot_put(&h->handles, hd);
    if (id == 0 || extent_alloc(h, size, &hd->off) != 0) {
        if (id)
            slot_drop(&h->handles, id);
        free(hd);
        return fail(h, e, VPMM_DRV_OUT_OF_MEMORY, CODE_OUT_OF_MEMORY);
    }
    hd->id = id;
    hd->size = size;
    hd->next = h->handle_list;
    if (hd->next)
        hd->next->prev = hd;
    h->handle_list = hd;
    h->counts.handles++;
    h->counts.handle_bytes += size;
    *out_handle = id;
    return VPMM_DRV_OK;
}

static vpmm_dres_t host_mem_release(vpmm_driver_t *d, vpmm_drv_handle_t handle)
{
    host_drv_t *h = (host_drv_t *)d;
    host_handle_t *hd = slot_get(&h->handles, handle);
    if (!hd)
        return fail_invalid(h, VPMM_DRV_MEM_RELEASE);
    slot_drop(&h->handles, handle);
    hd->id = 0;
    if (hd->nmaps == 0)
        handle_free(h, hd); /* else the last unmap frees it (rule 4) */
    return VPMM_DRV_OK;
}

static vpmm_dres_t host_mem_map(vpmm_driver_t *d, uintptr_t va, size_t size,
                                vpmm_drv_handle_t handle, size_t offset)
{
    host_drv_t *h = (host_drv_t *)d;
    const vpmm_drv_entry_t e = VPMM_DRV_MEM_MAP;
    if (size == 0 || !gran_aligned(h, va) || !gran_aligned(h, size) || !gran_aligned(h, offset) ||
        size > UINTPTR_MAX - va)
        return fail_invalid(h, e);
    host_handle_t *hd = slot_get(&h->handles, handle);
    if (!hd || offset > hd->size || size > hd->size - offset)
        return fail_invalid(h, e);
    if (!resv_containing(h, va, size) || map_overlaps(h, va, size))
        return fail_invalid(h, e);
    /* As the CUDA 13 driver on an H100 does (measured): only whole handles are mapped. */
    if (offset != 0 || size != hd->size)
        return fail(h, e, VPMM_DRV_NOT_SUPPORTED, CODE_NOT_SUPPORTED);
    host_map_t *m = calloc(1, sizeof *m);
    if (!m)
        return fail(h, e, VPMM_DRV_ERROR, CODE_OUT_OF_MEMORY);
    void *p = mmap((void *)va, size, PROT_NONE, MAP_SHARED | MAP_FIXED | MAP_NORESERVE, h->fd,
                   (off_t)(hd->off + offset));
    if (p == MAP_FAILED) {
        int err = errno;
        /* MAP_FIXED may have torn the placeholder down before failing; put it back. */
        (void)placeholder((void *)va, size, MAP_FIXED);
        free(m);
        return fail(h, e, VPMM_DRV_ERROR, errno_code(err));
    }
    m->va = va;
    m->size = size;
    m->offset = offset;
    m->handle = hd;
    map_insert(h, m);
    hd->nmaps++;
    h->counts.mappings++;
    h->counts.mapped_bytes += size;
    return VPMM_DRV_OK;
}

static vpmm_dres_t host_mem_unmap(vpmm_driver_t *d, uintptr_t va, size_t size)
{
    host_drv_t *h = (host_drv_t *)d;
    const vpmm_drv_entry_t e = VPMM_DRV_MEM_UNMAP;
    if (size == 0 || !gran_aligned(h, va) || !gran_aligned(h, size))
        return fail_invalid(h, e);
    host_map_t *m = map_below(h, va + 1); /* the mapping starting at or below va */
    if (!m || m->va != va || m->size != size)
        return fail_invalid(h, e); /* rule 3: exactly one whole mapping */
    if (placeholder((void *)va, size, MAP_FIXED) == MAP_FAILED)
        return fail(h, e, VPMM_DRV_ERROR, errno_code(errno));
    host_handle_t *hd = m->handle;
    map_erase(h, m);
    h->counts.mappings--;
    h->counts.mapped_bytes -= size;
    free(m);
    if (--hd->nmaps == 0 && hd->id == 0)
        handle_free(h, hd); /* released earlier: this was its last mapping */
    return VPMM_DRV_OK;
}

static vpmm_dres_t host_set_access(vpmm_driver_t *d, uintptr_t va, size_t size)
{
    host_drv_t *h = (host_drv_t *)d;
    const vpmm_drv_entry_t e = VPMM_DRV_SET_ACCESS;
    if (size == 0 || !gran_aligned(h, va) || !gran_aligned(h, size) || size > UINTPTR_MAX - va)
        return fail_invalid(h, e);
    /* Every granule must be mapped; the range may span several adjacent mappings. */
    for (uintptr_t cur = va, end = va + size; cur < end;) {
        const host_map_t *m = map_below(h, cur + 1);
        if (!m || m->va + m->size <= cur)
            return fail_invalid(h, e);
        cur = m->va + m->size;
    }
    if (mprotect((void *)va, size, PROT_READ | PROT_WRITE) != 0)
        return fail(h, e, VPMM_DRV_ERROR, errno_code(errno));
    return VPMM_DRV_OK;
}

static vpmm_dres_t host_mem_get_info(vpmm_driver_t *d, size_t *out_free, size_t *out_total)
{
    host_drv_t *h = (host_drv_t *)d;
    if (!out_free || !out_total)
        return fail_invalid(h, VPMM_DRV_MEM_GET_INFO);
    *out_free = h->limit - h->counts.handle_bytes;
    *out_total = h->limit;
    return VPMM_DRV_OK;
}

/* ---- entry points: events, streams, capture ----------------------------------------------- */

static host_event_t *event_get(const host_drv_t *h, vpmm_drv_event_t ev)
{
    return slot_get(&h->events, (uint64_t)(uintptr_t)ev);
}

static vpmm_dres_t host_event_create(vpmm_driver_t *d, vpmm_drv_event_t *out_event)
{
    host_drv_t *h = (host_drv_t *)d;
    const vpmm_drv_entry_t e = VPMM_DRV_EVENT_CREATE;
    if (!out_event)
        return fail_invalid(h, e);
    host_event_t *ev = calloc(1, sizeof *ev);
    uint64_t id = ev ? slot_put(&h->events, ev) : 0;
    if (id == 0) {
        free(ev);
        return fail(h, e, VPMM_DRV_ERROR, CODE_OUT_OF_MEMORY);
    }
    h->counts.events++;
    *out_event = (vpmm_drv_event_t)(uintptr_t)id;
    return VPMM_DRV_OK;
}

static vpmm_dres_t host_event_destroy(vpmm_driver_t *d, vpmm_drv_event_t event)
{
    host_drv_t *h = (host_drv_t *)d;
    host_event_t *ev = event_get(h, event);
    if (!ev)
        return fail_invalid(h, VPMM_DRV_EVENT_DESTROY);
    slot_drop(&h->events, (uint64_t)(uintptr_t)event);
    free(ev);
    h->counts.events--;
    return VPMM_DRV_OK;
}

static vpmm_dres_t host_event_record(vpmm_driver_t *d, vpmm_drv_event_t event, vpmm_stream_t stream)
{
    host_drv_t *h = (host_drv_t *)d;
    const vpmm_drv_entry_t e = VPMM_DRV_EVENT_RECORD;
    host_event_t *ev = event_get(h, event);
    if (!ev)
        return fail_invalid(h, e);
    host_stream_t *st = stream_get(h, stream);
    if (!st)
        return fail(h, e, VPMM_DRV_ERROR, CODE_OUT_OF_MEMORY);
    if (st->capture && st->capture->invalidated)
        return fail(h, e, VPMM_DRV_ERROR, CODE_CAPTURE_INVALIDATED);
    ev->stream = st;
    if (st->capture) {
        /* In a capture the record becomes a graph node: the event no longer tracks real work. */
        ev->seq = 0;
        ev->capture_id = st->capture->id;
    } else {
        ev->seq = st->enqueued;
        ev->capture_id = 0;
    }
    return VPMM_DRV_OK;
}

static vpmm_dres_t host_event_query(vpmm_driver_t *d, vpmm_drv_event_t event)
{
    host_drv_t *h = (host_drv_t *)d;
    const vpmm_drv_entry_t e = VPMM_DRV_EVENT_QUERY;
    const host_event_t *ev = event_get(h, event);
    if (!ev)
        return fail_invalid(h, e);
    if (ev->capture_id) {
        /* CUDA: cudaErrorCapturedEvent, and the capture it belongs to is invalidated. After the
         * capture ended the event still stands for graph work, not real work: keep failing. */
        host_capture_t *c = capture_find(h, ev->capture_id);
        if (c)
            c->invalidated = 1;
        return fail(h, e, VPMM_DRV_ERROR, CODE_CAPTURED_EVENT);
    }
    if (ev->stream && ev->stream->completed < ev->seq)
        return fail(h, e, VPMM_DRV_NOT_READY, CODE_NOT_READY);
    return VPMM_DRV_OK; /* done, or never recorded (as CUDA) */
}

/*
 * Later work on stream waits for event. Outside capture this is a barrier; with a captured event
 * it makes the stream join that capture (CUDA's cross-stream capture). A capturing stream may only
 * wait on events captured in its own capture (a plain event would need cudaEventWaitExternal;
 * another capture's event would merge two graphs): both fail and invalidate, as in CUDA.
 */
static vpmm_dres_t host_stream_wait_event(vpmm_driver_t *d, vpmm_stream_t stream,
                                          vpmm_drv_event_t event)
{
    host_drv_t *h = (host_drv_t *)d;
    const vpmm_drv_entry_t e = VPMM_DRV_STREAM_WAIT_EVENT;
    const host_event_t *ev = event_get(h, event);
    if (!ev)
        return fail_invalid(h, e);
    host_stream_t *st = stream_get(h, stream);
    if (!st || RESERVE(h->waits, h->waits_cap, h->n_waits + 1) ||
        RESERVE(st->bar, st->bar_cap, st->bar_len + 1))
        return fail(h, e, VPMM_DRV_ERROR, CODE_OUT_OF_MEMORY);
    host_capture_t *mine = st->capture;
    if (mine && mine->invalidated)
        return fail(h, e, VPMM_DRV_ERROR, CODE_CAPTURE_INVALIDATED);

    if (ev->capture_id) {
        host_capture_t *theirs = capture_find(h, ev->capture_id);
        if (!theirs)
            return fail(h, e, VPMM_DRV_ERROR, CODE_CAPTURE_ISOLATION); /* that graph is closed */
        if (theirs->invalidated)
            return fail(h, e, VPMM_DRV_ERROR, CODE_CAPTURE_INVALIDATED);
        if (mine && mine != theirs) {
            mine->invalidated = theirs->invalidated = 1;
            return fail(h, e, VPMM_DRV_ERROR, CODE_CAPTURE_MERGE);
        }
        st->capture = theirs; /* joins (or already in) the capture */
    } else if (mine) {
        mine->invalidated = 1;
        return fail(h, e, VPMM_DRV_ERROR, CODE_CAPTURE_ISOLATION);
    } else if (ev->stream && ev->stream != st && ev->stream->completed < ev->seq) {
        /* Barriers are appended in `at` order; merge with one for the same signaller and `at`. */
        host_barrier_t *last = st->bar_len > st->bar_head ? &st->bar[st->bar_len - 1] : NULL;
        if (last && last->at == st->enqueued && last->signaller == ev->stream)
            last->seq = VPMM_MAX(last->seq, ev->seq);
        else
            st->bar[st->bar_len++] = (host_barrier_t){ st->enqueued, ev->stream, ev->seq };
    }
    h->waits[h->n_waits++] = (vpmm_host_wait_t){
        .waiter = stream,
        .signaller = ev->stream ? ev->stream->key : NULL,
        .signal_seq = ev->seq,
    };
    return VPMM_DRV_OK;
}

static vpmm_dres_t host_capture_info(vpmm_driver_t *d, vpmm_stream_t stream,
                                     vpmm_capture_status_t *out_status, uint64_t *out_id)
{
    host_drv_t *h = (host_drv_t *)d;
    if (!out_status)
        return fail_invalid(h, VPMM_DRV_CAPTURE_INFO); /* out_id is optional, as in CUDA */
    const host_stream_t *st = stream_find(h, stream);
    const host_capture_t *c = st ? st->capture : NULL;
    *out_status =
        !c ? VPMM_CAPTURE_NONE : (c->invalidated ? VPMM_CAPTURE_INVALIDATED : VPMM_CAPTURE_ACTIVE);
    if (out_id)
        *out_id = c ? c->id : 0;
    return VPMM_DRV_OK;
}

static vpmm_dres_t host_synchronize(vpmm_driver_t *d)
{
    host_drv_t *h = (host_drv_t *)d;
    if (h->captures) {
        /* cudaDeviceSynchronize during a (global-mode) capture is illegal and invalidates it. */
        for (host_capture_t *c = h->captures; c; c = c->next)
            c->invalidated = 1;
        return fail(h, VPMM_DRV_SYNCHRONIZE, VPMM_DRV_ERROR, CODE_CAPTURE_UNSUPPORTED);
    }
    complete_everything(h);
    return VPMM_DRV_OK;
}

/* ---- lifetime ----------------------------------------------------------------------------- */

static void host_close(vpmm_driver_t *d)
{
    host_drv_t *h = (host_drv_t *)d;
    if (!h)
        return;
    for (size_t i = 0; i < h->n_resv; i++)
        munmap((void *)h->resv[i].base, h->resv[i].size); /* drops the mappings inside too */
    map_free_all(h->maps);
    while (h->handle_list) {
        host_handle_t *next = h->handle_list->next;
        free(h->handle_list);
        h->handle_list = next;
    }
    for (size_t i = 0; i < h->events.len; i++)
        free(h->events.slots[i].obj);
    for (size_t i = 0; i < h->stream_cap; i++) {
        if (h->stream_tab[i]) {
            free(h->stream_tab[i]->bar);
            free(h->stream_tab[i]);
        }
    }
    while (h->captures) {
        host_capture_t *next = h->captures->next;
        free(h->captures);
        h->captures = next;
    }
    if (h->fd >= 0)
        close(h->fd);
    free(h->ext);
    free(h->handles.slots);
    free(h->events.slots);
    free(h->resv);
    free(h->stream_tab);
    free(h->waits);
    free(h);
}

vpmm_dres_t vpmm_host_open(const vpmm_host_options_t *opt, vpmm_driver_t **out)
{
    if (!out)
        return VPMM_DRV_INVALID;
    *out = NULL;
    size_t gran = opt && opt->granularity ? opt->granularity : DEFAULT_GRANULARITY;
    size_t limit = opt && opt->memory_limit ? opt->memory_limit : DEFAULT_LIMIT;
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0 || gran % (size_t)page != 0)
        return VPMM_DRV_INVALID;

    host_drv_t *h = calloc(1, sizeof *h);
    if (!h)
        return VPMM_DRV_OUT_OF_MEMORY;
    h->fd = memfd_create("vpmm-host", MFD_CLOEXEC);
    if (h->fd < 0) {
        free(h);
        return VPMM_DRV_NO_DEVICE;
    }
    h->gran = gran;
    h->limit = limit;
    h->rng = 0x9E3779B97F4A7C15ULL;
    h->next_capture_id = 1;
    h->base = (vpmm_driver_t){
        .name = "host",
        .granularity = host_granularity,
        .va_reserve = host_va_reserve,
        .va_free = host_va_free,
        .mem_create = host_mem_create,
        .mem_release = host_mem_release,
        .mem_map = host_mem_map,
        .mem_unmap = host_mem_unmap,
        .set_access = host_set_access,
        .event_create = host_event_create,
        .event_destroy = host_event_destroy,
        .event_record = host_event_record,
        .event_query = host_event_query,
        .stream_wait_event = host_stream_wait_event,
        .capture_info = host_capture_info,
        .mem_get_info = host_mem_get_info,
        .synchronize = host_synchronize,
        .close = host_close,
    };
    *out = &h->base;
    return VPMM_DRV_OK;
}

/* ---- test controls ------------------------------------------------------------------------ */

vpmm_stream_t vpmm_host_stream_create(vpmm_driver_t *d)
{
    host_drv_t *h = as_host(d);
    if (!h)
        return NULL;
    /* The token is the record's own address: no live stream record can share it, and it cannot
     * collide with small integers tests use as streams. A foreign pointer registered earlier could
     * equal it, so retry while the address is taken (keeping the rejects so malloc moves on). */
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
    if (!st)
        return NULL;
    st->key = (vpmm_stream_t)(void *)st;
    if (stream_insert(h, st) != 0) {
        free(st);
        return NULL;
    }
    return st->key;
}

uint64_t vpmm_host_enqueue(vpmm_driver_t *d, vpmm_stream_t s)
{
    host_drv_t *h = as_host(d);
    host_stream_t *st = h ? stream_get(h, s) : NULL;
    if (!st || st->capture)
        return 0;
    return ++st->enqueued;
}

void vpmm_host_complete(vpmm_driver_t *d, vpmm_stream_t s)
{
    host_drv_t *h = as_host(d);
    host_stream_t *st = h ? stream_find(h, s) : NULL;
    if (st)
        stream_complete_to(st, st->enqueued);
}

size_t vpmm_host_advance(vpmm_driver_t *d, vpmm_stream_t s, size_t n)
{
    host_drv_t *h = as_host(d);
    host_stream_t *st = h ? stream_find(h, s) : NULL;
    size_t done = 0;
    if (!st)
        return 0;
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

void vpmm_host_complete_all(vpmm_driver_t *d)
{
    host_drv_t *h = as_host(d);
    if (h)
        complete_everything(h);
}

int vpmm_host_stream_idle(vpmm_driver_t *d, vpmm_stream_t s)
{
    host_drv_t *h = as_host(d);
    const host_stream_t *st = h ? stream_find(h, s) : NULL;
    return !st || st->completed == st->enqueued;
}

uint64_t vpmm_host_stream_enqueued(vpmm_driver_t *d, vpmm_stream_t s)
{
    host_drv_t *h = as_host(d);
    const host_stream_t *st = h ? stream_find(h, s) : NULL;
    return st ? st->enqueued : 0;
}

uint64_t vpmm_host_stream_completed(vpmm_driver_t *d, vpmm_stream_t s)
{
    host_drv_t *h = as_host(d);
    const host_stream_t *st = h ? stream_find(h, s) : NULL;
    return st ? st->completed : 0;
}

vpmm_dres_t vpmm_host_begin_capture(vpmm_driver_t *d, vpmm_stream_t s, uint64_t *out_id)
{
    host_drv_t *h = as_host(d);
    if (!h)
        return VPMM_DRV_INVALID;
    if (!out_id)
        return fail_call(h, call_begin_capture, VPMM_DRV_INVALID, CODE_INVALID_VALUE);
    host_stream_t *st = stream_get(h, s);
    host_capture_t *c = st && !st->capture ? calloc(1, sizeof *c) : NULL;
    if (!c) {
        if (st && st->capture)
            return fail_call(h, call_begin_capture, VPMM_DRV_ERROR, CODE_ILLEGAL_STATE);
        return fail_call(h, call_begin_capture, VPMM_DRV_ERROR, CODE_OUT_OF_MEMORY);
    }
    c->id = h->next_capture_id++;
    c->origin = st;
    c->next = h->captures;
    h->captures = c;
    st->capture = c;
    *out_id = c->id;
    return VPMM_DRV_OK;
}

vpmm_dres_t vpmm_host_end_capture(vpmm_driver_t *d, vpmm_stream_t s)
{
    host_drv_t *h = as_host(d);
    if (!h)
        return VPMM_DRV_INVALID;
    host_stream_t *st = stream_find(h, s);
    host_capture_t *c = st ? st->capture : NULL;
    if (!c)
        return fail_call(h, call_end_capture, VPMM_DRV_ERROR, CODE_ILLEGAL_STATE);
    if (c->origin != st)
        return fail_call(h, call_end_capture, VPMM_DRV_ERROR, CODE_CAPTURE_UNMATCHED);
    for (size_t i = 0; i < h->stream_cap; i++)
        if (h->stream_tab[i] && h->stream_tab[i]->capture == c)
            h->stream_tab[i]->capture = NULL;
    host_capture_t **link = &h->captures;
    while (*link != c)
        link = &(*link)->next;
    *link = c->next;
    int invalidated = c->invalidated;
    free(c);
    if (invalidated)
        return fail_call(h, call_end_capture, VPMM_DRV_ERROR, CODE_CAPTURE_INVALIDATED);
    return VPMM_DRV_OK;
}

void vpmm_host_counts(vpmm_driver_t *d, vpmm_host_counts_t *out)
{
    host_drv_t *h = as_host(d);
    if (!out)
        return;
    memset(out, 0, sizeof *out);
    if (!h)
        return;
    *out = h->counts;
    struct stat sb;
    if (fstat(h->fd, &sb) == 0)
        out->touched_bytes = (size_t)sb.st_blocks * 512u;
}

size_t vpmm_host_wait_count(vpmm_driver_t *d)
{
    host_drv_t *h = as_host(d);
    return h ? h->n_waits : 0;
}

vpmm_host_wait_t vpmm_host_wait_at(vpmm_driver_t *d, size_t i)
{
    host_drv_t *h = as_host(d);
    if (!h || i >= h->n_waits)
        return (vpmm_host_wait_t){ 0 };
    return h->waits[i];
}

void vpmm_host_wait_clear(vpmm_driver_t *d)
{
    host_drv_t *h = as_host(d);
    if (h)
        h->n_waits = 0;
}

/* ---- invariant check ---------------------------------------------------------------------- */

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

typedef struct map_walk {
    const host_drv_t *h;
    const host_map_t *prev;
    size_t count, bytes;
    size_t bad;
    int verbose;
} map_walk_t;

static void check_maps(map_walk_t *w, const host_map_t *t, const host_map_t *parent)
{
    if (!t)
        return;
    size_t bad = 0;
    int verbose = w->verbose;
    check_maps(w, t->left, t);
    CHECK_THAT(!parent || t->prio <= parent->prio, "I4 treap heap order broken at %#lx",
               (unsigned long)t->va);
    CHECK_THAT(!w->prev || w->prev->va + w->prev->size <= t->va,
               "I4 mapping at %#lx overlaps or is out of order", (unsigned long)t->va);
    CHECK_THAT(resv_containing(w->h, t->va, t->size) != NULL,
               "I4 mapping at %#lx not inside one reservation", (unsigned long)t->va);
    CHECK_THAT(t->offset <= t->handle->size && t->size <= t->handle->size - t->offset,
               "I4 mapping at %#lx past its handle", (unsigned long)t->va);
    w->prev = t;
    w->count++;
    w->bytes += t->size;
    w->bad += bad;
    check_maps(w, t->right, t);
}

static int cmp_extent(const void *a, const void *b)
{
    const host_extent_t *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

size_t vpmm_host_check(vpmm_driver_t *d, int verbose)
{
    const host_drv_t *h = as_host(d);
    size_t bad = 0;
    CHECK_THAT(h != NULL, "not a host driver");
    if (!h)
        return bad;

    /* I1: free extents sorted, coalesced, gran-aligned, tail truncated. */
    for (size_t i = 0; i < h->n_ext; i++) {
        const host_extent_t *x = &h->ext[i];
        CHECK_THAT(x->len > 0 && gran_aligned(h, x->off) && gran_aligned(h, x->len),
                   "I1 extent %zu empty or misaligned", i);
        CHECK_THAT(x->off + x->len < h->file_size, "I1 extent %zu reaches the end of the file", i);
        CHECK_THAT(i == 0 || h->ext[i - 1].off + h->ext[i - 1].len < x->off,
                   "I1 extents %zu and %zu overlap or touch", i - 1, i);
    }
    /* I2 + I1 tiling: handle extents and free extents cover [0, file_size) exactly. */
    size_t n_handles = 0, handle_bytes = 0, nmaps = 0;
    host_extent_t *all = malloc((h->counts.handles + h->n_ext + 1) * sizeof *all);
    size_t n_all = 0;
    for (const host_handle_t *hd = h->handle_list; hd; hd = hd->next) {
        n_handles++;
        handle_bytes += hd->size;
        nmaps += hd->nmaps;
        CHECK_THAT(hd->id != 0 || hd->nmaps > 0, "I2 released handle with no mapping is alive");
        CHECK_THAT(hd->id == 0 || slot_get(&h->handles, hd->id) == hd,
                   "I2 handle %#llx does not resolve to its record", (unsigned long long)hd->id);
        if (all && n_all < h->counts.handles)
            all[n_all++] = (host_extent_t){ hd->off, hd->size };
    }
    CHECK_THAT(n_handles == h->counts.handles && handle_bytes == h->counts.handle_bytes,
               "I2 handle counts %zu/%zu, records %zu/%zu", h->counts.handles,
               h->counts.handle_bytes, n_handles, handle_bytes);
    CHECK_THAT(handle_bytes <= h->limit, "I2 handle bytes %zu over the limit", handle_bytes);
    CHECK_THAT(h->n_ext <= h->counts.handles + 1 &&
                   (h->counts.handles == 0 || h->ext_cap >= h->counts.handles + 1),
               "I3 %zu free extents, %zu handles, capacity %zu", h->n_ext, h->counts.handles,
               h->ext_cap);
    if (all) {
        for (size_t i = 0; i < h->n_ext; i++)
            all[n_all++] = h->ext[i];
        qsort(all, n_all, sizeof *all, cmp_extent);
        size_t at = 0;
        for (size_t i = 0; i < n_all; i++) {
            CHECK_THAT(all[i].off == at, "I1 file gap or overlap at offset %zu", at);
            at = all[i].off + all[i].len;
        }
        CHECK_THAT(at == h->file_size, "I1 extents end at %zu, file size %zu", at, h->file_size);
        free(all);
    }

    /* I4 */
    map_walk_t w = { .h = h, .verbose = verbose };
    check_maps(&w, h->maps, NULL);
    bad += w.bad;
    CHECK_THAT(w.count == h->counts.mappings && w.bytes == h->counts.mapped_bytes &&
                   nmaps == w.count,
               "I4 mapping counts %zu/%zu, tree %zu/%zu, handles say %zu", h->counts.mappings,
               h->counts.mapped_bytes, w.count, w.bytes, nmaps);

    /* I5 */
    size_t resv_bytes = 0;
    for (size_t i = 0; i < h->n_resv; i++) {
        const host_resv_t *r = &h->resv[i];
        resv_bytes += r->size;
        CHECK_THAT(r->size > 0 && gran_aligned(h, r->base) && gran_aligned(h, r->size),
                   "I5 reservation %zu misaligned", i);
        CHECK_THAT(i == 0 || h->resv[i - 1].base + h->resv[i - 1].size <= r->base,
                   "I5 reservations %zu and %zu overlap or are out of order", i - 1, i);
    }
    CHECK_THAT(h->n_resv == h->counts.reservations && resv_bytes == h->counts.reserved_bytes,
               "I5 reservation counts");

    /* I6 */
    size_t live_events = 0;
    for (size_t i = 0; i < h->events.len; i++)
        live_events += h->events.slots[i].obj != NULL;
    CHECK_THAT(live_events == h->counts.events, "I6 %zu live events, counted %zu", live_events,
               h->counts.events);

    /* I7 */
    size_t n_streams = 0;
    for (size_t i = 0; i < h->stream_cap; i++) {
        const host_stream_t *st = h->stream_tab[i];
        if (!st)
            continue;
        n_streams++;
        CHECK_THAT(st->completed <= st->enqueued, "I7 stream %p completed past enqueued",
                   (void *)st->key);
        CHECK_THAT(!st->busy, "I7 stream %p left busy", (void *)st->key);
        for (size_t j = st->bar_head; j < st->bar_len; j++) {
            const host_barrier_t *b = &st->bar[j];
            CHECK_THAT(b->at >= st->completed && b->at <= st->enqueued,
                       "I7 stream %p barrier %zu out of range", (void *)st->key, j);
            CHECK_THAT(j == st->bar_head || st->bar[j - 1].at <= b->at,
                       "I7 stream %p barriers out of order", (void *)st->key);
            CHECK_THAT(b->signaller && b->seq <= b->signaller->enqueued,
                       "I7 stream %p barrier %zu waits for work never enqueued", (void *)st->key,
                       j);
        }
        CHECK_THAT(!st->capture || capture_find(h, st->capture->id) == st->capture,
                   "I7 stream %p in an unknown capture", (void *)st->key);
    }
    CHECK_THAT(n_streams == h->n_streams, "I7 stream table holds %zu, counted %zu", n_streams,
               h->n_streams);
    for (const host_capture_t *c = h->captures; c; c = c->next)
        CHECK_THAT(c->id < h->next_capture_id && c->origin && c->origin->capture == c,
                   "I7 capture %llu has lost its origin", (unsigned long long)c->id);
    return bad;
}
