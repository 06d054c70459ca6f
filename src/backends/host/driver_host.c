/*
 * driver_host.c — the host emulation backend (driver_host.h): the driver contract of driver.h
 * implemented on the CPU, faithfully enough that misuse caught by CUDA is caught here too. This
 * file owns the memory side and the instance's lifetime; driver_host_stream.c owns the simulated
 * streams, events and capture, driver_host_graph.c the graphs and user objects, and
 * driver_host_internal.h holds what the three share.
 *
 *  - VA: a reservation is an mmap(PROT_NONE, MAP_NORESERVE) placeholder, so 8 TiB costs nothing;
 *    an optional limit on the bytes reserved (va_limit) makes address-space exhaustion testable.
 *  - Physical memory: every handle is an extent of ONE memfd (thousands of handles must fit under
 *    a 1024-fd limit). Extents come from a first-fit, coalescing free list; the file grows with
 *    ftruncate (sparse: untouched pages cost nothing) and freed extents are punched out (or
 *    truncated away at the tail) so touched memory really goes back.
 *  - Mapping: mmap(MAP_SHARED|MAP_FIXED) of the handle's extent over the placeholder, so aliases
 *    see the same bytes; set_access is mprotect; unmap puts a PROT_NONE placeholder back.
 *  - Also here: the driver table, open and close, vpmm_host_counts and vpmm_host_check. The slot
 *    table and failure recorders all three files use are in driver_host_base.c.
 *    Calls go one way: driver_host.c -> driver_host_graph.c -> driver_host_stream.c ->
 *    driver_host_base.c; the stream side reaches graphs only through h->graph_ops.
 *
 * Thread-safety: every entry of the table runs under the instance's recursive mutex (driver.h
 * rule 7; the wrappers are in driver_host.c).
 * Invariants: listed as equations above struct host_drv in driver_host_internal.h, all of them
 * checked by vpmm_host_check() at the end of this file (the stream ones I6, I7, I10 here too; the
 * graph ones I8, I9 through vpmm_host_i_graph_check in driver_host_graph.c).
 * Failure atomicity (rule 1): each entry point validates and allocates everything it needs before
 * its first visible change. Release, unmap and va_free never allocate (nor does event_destroy in
 * driver_host_stream.c), so the teardown paths cannot fail for lack of host memory.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* memfd_create, fallocate, MAP_NORESERVE */
#endif

#include "driver_host_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

#define DEFAULT_GRANULARITY ((size_t)2 << 20)
#define DEFAULT_LIMIT       ((size_t)80 << 30)

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

/* ---- entry points: memory ----------------------------------------------------------------- */

static vpmm_dres_t host_granularity(vpmm_driver_t *d, size_t *out_bytes)
{
    host_drv_t *h = (host_drv_t *)d;
    if (!out_bytes)
        return vpmm_host_i_fail_invalid(h, VPMM_DRV_GRANULARITY);
    *out_bytes = h->gran;
    return VPMM_DRV_OK;
}

static vpmm_dres_t host_va_reserve(vpmm_driver_t *d, size_t size, size_t align, uintptr_t *out_va)
{
    host_drv_t *h = (host_drv_t *)d;
    const vpmm_drv_entry_t e = VPMM_DRV_VA_RESERVE;
    if (!out_va || size == 0 || !gran_aligned(h, size) || !gran_aligned(h, align))
        return vpmm_host_i_fail_invalid(h, e);
    if (align == 0)
        align = h->gran; /* as CUDA: 0 = the default alignment */
    if (h->va_limit && (size > h->va_limit || h->counts.reserved_bytes > h->va_limit - size))
        return vpmm_host_i_fail(h, e, VPMM_DRV_OUT_OF_MEMORY, CODE_OUT_OF_MEMORY);
    /* Over-reserve so that an aligned start exists inside, then trim both ends:
     *   [p ...head... |start ....... size ....... |end ...tail... p+span)          */
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t extra = align > page ? align - page : 0;
    if (size > SIZE_MAX - extra)
        return vpmm_host_i_fail(h, e, VPMM_DRV_OUT_OF_MEMORY, CODE_OUT_OF_MEMORY);
    size_t span = size + extra;
    if (RESERVE(h->resv, h->resv_cap, h->n_resv + 1))
        return vpmm_host_i_fail(h, e, VPMM_DRV_OUT_OF_MEMORY, CODE_OUT_OF_MEMORY);
    void *p = placeholder(NULL, span, 0);
    if (p == MAP_FAILED)
        return vpmm_host_i_fail(h, e, VPMM_DRV_OUT_OF_MEMORY, CODE_OUT_OF_MEMORY);
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
        return vpmm_host_i_fail_invalid(h, e); /* not exactly one reservation */
    if (map_overlaps(h, va, size))
        return vpmm_host_i_fail_invalid(h, e); /* rule 3: the whole reservation must be unmapped */
    if (munmap((void *)va, size) != 0)
        return vpmm_host_i_fail(h, e, VPMM_DRV_ERROR, errno_code(errno));
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
        return vpmm_host_i_fail_invalid(h, e);
    if (size > h->limit - h->counts.handle_bytes)
        return vpmm_host_i_fail(h, e, VPMM_DRV_OUT_OF_MEMORY, CODE_OUT_OF_MEMORY);
    /* I3: room for the extent this handle may split off when it is freed. */
    if (RESERVE(h->ext, h->ext_cap, h->counts.handles + 2))
        return vpmm_host_i_fail(h, e, VPMM_DRV_OUT_OF_MEMORY, CODE_OUT_OF_MEMORY);
    host_handle_t *hd = calloc(1, sizeof *hd);
    if (!hd)
        return vpmm_host_i_fail(h, e, VPMM_DRV_OUT_OF_MEMORY, CODE_OUT_OF_MEMORY);
    uint64_t id = vpmm_host_i_slot_put(&h->handles, hd);
    if (id == 0 || extent_alloc(h, size, &hd->off) != 0) {
        if (id)
            vpmm_host_i_slot_drop(&h->handles, id);
        free(hd);
        return vpmm_host_i_fail(h, e, VPMM_DRV_OUT_OF_MEMORY, CODE_OUT_OF_MEMORY);
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
    host_handle_t *hd = vpmm_host_i_slot_get(&h->handles, handle);
    if (!hd)
        return vpmm_host_i_fail_invalid(h, VPMM_DRV_MEM_RELEASE);
    vpmm_host_i_slot_drop(&h->handles, handle);
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
        return vpmm_host_i_fail_invalid(h, e);
    host_handle_t *hd = vpmm_host_i_slot_get(&h->handles, handle);
    if (!hd || offset > hd->size || size > hd->size - offset)
        return vpmm_host_i_fail_invalid(h, e);
    if (!resv_containing(h, va, size) || map_overlaps(h, va, size))
        return vpmm_host_i_fail_invalid(h, e);
    /* As the CUDA 13 driver on an H100 does (measured): only whole handles are mapped. */
    if (offset != 0 || size != hd->size)
        return vpmm_host_i_fail(h, e, VPMM_DRV_NOT_SUPPORTED, CODE_NOT_SUPPORTED);
    host_map_t *m = calloc(1, sizeof *m);
    if (!m)
        return vpmm_host_i_fail(h, e, VPMM_DRV_ERROR, CODE_OUT_OF_MEMORY);
    void *p = mmap((void *)va, size, PROT_NONE, MAP_SHARED | MAP_FIXED | MAP_NORESERVE, h->fd,
                   (off_t)(hd->off + offset));
    if (p == MAP_FAILED) {
        int err = errno;
        /* MAP_FIXED may have torn the placeholder down before failing; put it back. */
        (void)placeholder((void *)va, size, MAP_FIXED);
        free(m);
        return vpmm_host_i_fail(h, e, VPMM_DRV_ERROR, errno_code(err));
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
        return vpmm_host_i_fail_invalid(h, e);
    host_map_t *m = map_below(h, va + 1); /* the mapping starting at or below va */
    if (!m || m->va != va || m->size != size)
        return vpmm_host_i_fail_invalid(h, e); /* rule 3: exactly one whole mapping */
    if (placeholder((void *)va, size, MAP_FIXED) == MAP_FAILED)
        return vpmm_host_i_fail(h, e, VPMM_DRV_ERROR, errno_code(errno));
    host_handle_t *hd = m->handle;
    map_erase(h, m);
    h->counts.mappings--;
    h->counts.mapped_bytes -= size;
    free(m);
    if (--hd->nmaps == 0 && hd->id == 0)
        handle_free(h, hd); /* released earlier: this was its last mapping */
    return VPMM_DRV_OK;
}

static vpmm_dres_t host_set_access(vpmm_driver_t *d, uintptr_t va, size_t size,
                                   const int *peers, size_t npeers)
{
    host_drv_t *h = (host_drv_t *)d;
    const vpmm_drv_entry_t e = VPMM_DRV_SET_ACCESS;
    uint64_t grant = (uint64_t)1 << d->device;
    if (size == 0 || !gran_aligned(h, va) || !gran_aligned(h, size) || size > UINTPTR_MAX - va ||
        (npeers > 0 && peers == NULL))
        return vpmm_host_i_fail_invalid(h, e);
    for (size_t i = 0; i < npeers; i++) {
        if (peers[i] < 0 || peers[i] >= d->device_count)
            return vpmm_host_i_fail_invalid(h, e);
        grant |= (uint64_t)1 << peers[i];
    }
    /* Every granule must be mapped; the range may span several adjacent mappings. */
    for (uintptr_t cur = va, end = va + size; cur < end;) {
        const host_map_t *m = map_below(h, cur + 1);
        if (!m || m->va + m->size <= cur)
            return vpmm_host_i_fail_invalid(h, e);
        cur = m->va + m->size;
    }
    if (mprotect((void *)va, size, PROT_READ | PROT_WRITE) != 0)
        return vpmm_host_i_fail(h, e, VPMM_DRV_ERROR, errno_code(errno));
    for (uintptr_t cur = va, end = va + size; cur < end;) {
        host_map_t *m = map_below(h, cur + 1);
        m->access |= grant;
        cur = m->va + m->size;
    }
    return VPMM_DRV_OK;
}

static vpmm_dres_t host_revoke_access(vpmm_driver_t *d, uintptr_t va, size_t size, int peer)
{
    (void)va;
    (void)size;
    (void)peer;
    return vpmm_host_i_fail_invalid((host_drv_t *)d, VPMM_DRV_REVOKE_ACCESS); /* one device */
}

static vpmm_dres_t host_get_access(vpmm_driver_t *d, uintptr_t va, int device, int *out_rw)
{
    host_drv_t *h = (host_drv_t *)d;
    const host_map_t *m = map_below(h, va + 1);
    if (out_rw == NULL || device < 0 || device >= d->device_count || !m || m->va + m->size <= va)
        return vpmm_host_i_fail_invalid(h, VPMM_DRV_GET_ACCESS);
    *out_rw = (m->access >> device) & 1;
    return VPMM_DRV_OK;
}

static vpmm_dres_t host_stream_device(vpmm_driver_t *d, vpmm_stream_t stream, int *out_device)
{
    (void)stream;
    if (out_device == NULL)
        return vpmm_host_i_fail_invalid((host_drv_t *)d, VPMM_DRV_STREAM_DEVICE);
    *out_device = d->device;
    return VPMM_DRV_OK;
}

static vpmm_dres_t host_mem_export(vpmm_driver_t *d, vpmm_drv_handle_t handle,
                                   vpmm_drv_shareable_t *out)
{
    (void)handle;
    (void)out;
    return vpmm_host_i_fail((host_drv_t *)d, VPMM_DRV_MEM_EXPORT, VPMM_DRV_NOT_SUPPORTED,
                            CODE_NOT_SUPPORTED);
}

static vpmm_dres_t host_mem_import(vpmm_driver_t *d, const vpmm_drv_shareable_t *in,
                                   vpmm_drv_handle_t *out_handle)
{
    (void)in;
    (void)out_handle;
    return vpmm_host_i_fail((host_drv_t *)d, VPMM_DRV_MEM_IMPORT, VPMM_DRV_NOT_SUPPORTED,
                            CODE_NOT_SUPPORTED);
}

static vpmm_dres_t host_mem_get_info(vpmm_driver_t *d, size_t *out_free, size_t *out_total)
{
    host_drv_t *h = (host_drv_t *)d;
    if (!out_free || !out_total)
        return vpmm_host_i_fail_invalid(h, VPMM_DRV_MEM_GET_INFO);
    *out_free = h->limit - h->counts.handle_bytes;
    *out_total = h->limit;
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
    vpmm_host_i_stream_fini(h);
    vpmm_host_i_graph_fini(h); /* runs no destructor (driver_host.h) */
    if (h->fd >= 0)
        close(h->fd);
    free(h->ext);
    free(h->handles.slots);
    free(h->resv);
    pthread_mutex_destroy(&h->lock);
    free(h);
}

/*
 * Thread safety (driver.h rule 7): the table's entries may be called from several threads at once,
 * so each runs under the instance's recursive mutex (recursive: a user object's destructor may
 * call the backend from inside a call). The vpmm_host_* controls do not take it: they belong to
 * the test that owns the instance.
 */
#define LOCKED(h, call)                                                                            \
    do {                                                                                           \
        vpmm_dres_t r_;                                                                            \
        pthread_mutex_lock(&(h)->lock);                                                            \
        r_ = (call);                                                                               \
        pthread_mutex_unlock(&(h)->lock);                                                          \
        return r_;                                                                                 \
    } while (0)

static vpmm_dres_t locked_granularity(vpmm_driver_t *d, size_t *out_bytes)
{
    LOCKED((host_drv_t *)d, host_granularity(d, out_bytes));
}

static vpmm_dres_t locked_va_reserve(vpmm_driver_t *d, size_t size, size_t align, uintptr_t *out_va)
{
    LOCKED((host_drv_t *)d, host_va_reserve(d, size, align, out_va));
}

static vpmm_dres_t locked_va_free(vpmm_driver_t *d, uintptr_t va, size_t size)
{
    LOCKED((host_drv_t *)d, host_va_free(d, va, size));
}

static vpmm_dres_t locked_mem_create(vpmm_driver_t *d, size_t size, vpmm_drv_handle_t *out_handle)
{
    LOCKED((host_drv_t *)d, host_mem_create(d, size, out_handle));
}

static vpmm_dres_t locked_mem_release(vpmm_driver_t *d, vpmm_drv_handle_t handle)
{
    LOCKED((host_drv_t *)d, host_mem_release(d, handle));
}

static vpmm_dres_t locked_mem_map(vpmm_driver_t *d, uintptr_t va, size_t size,
                                  vpmm_drv_handle_t handle, size_t offset)
{
    LOCKED((host_drv_t *)d, host_mem_map(d, va, size, handle, offset));
}

static vpmm_dres_t locked_mem_unmap(vpmm_driver_t *d, uintptr_t va, size_t size)
{
    LOCKED((host_drv_t *)d, host_mem_unmap(d, va, size));
}

static vpmm_dres_t locked_set_access(vpmm_driver_t *d, uintptr_t va, size_t size,
                                     const int *peers, size_t npeers)
{
    LOCKED((host_drv_t *)d, host_set_access(d, va, size, peers, npeers));
}

static vpmm_dres_t locked_event_create(vpmm_driver_t *d, vpmm_stream_t on,
                                       vpmm_drv_event_t *out_event)
{
    LOCKED((host_drv_t *)d, vpmm_host_i_event_create(d, on, out_event));
}

static vpmm_dres_t locked_revoke_access(vpmm_driver_t *d, uintptr_t va, size_t size, int peer)
{
    LOCKED((host_drv_t *)d, host_revoke_access(d, va, size, peer));
}

static vpmm_dres_t locked_get_access(vpmm_driver_t *d, uintptr_t va, int device, int *out_rw)
{
    LOCKED((host_drv_t *)d, host_get_access(d, va, device, out_rw));
}

static vpmm_dres_t locked_stream_device(vpmm_driver_t *d, vpmm_stream_t stream, int *out_device)
{
    LOCKED((host_drv_t *)d, host_stream_device(d, stream, out_device));
}

static vpmm_dres_t locked_mem_export(vpmm_driver_t *d, vpmm_drv_handle_t handle,
                                     vpmm_drv_shareable_t *out)
{
    LOCKED((host_drv_t *)d, host_mem_export(d, handle, out));
}

static vpmm_dres_t locked_mem_import(vpmm_driver_t *d, const vpmm_drv_shareable_t *in,
                                     vpmm_drv_handle_t *out_handle)
{
    LOCKED((host_drv_t *)d, host_mem_import(d, in, out_handle));
}

static vpmm_dres_t locked_event_destroy(vpmm_driver_t *d, vpmm_drv_event_t event)
{
    LOCKED((host_drv_t *)d, vpmm_host_i_event_destroy(d, event));
}

static vpmm_dres_t locked_event_record(vpmm_driver_t *d, vpmm_drv_event_t event,
                                       vpmm_stream_t stream)
{
    LOCKED((host_drv_t *)d, vpmm_host_i_event_record(d, event, stream));
}

static vpmm_dres_t locked_event_query(vpmm_driver_t *d, vpmm_drv_event_t event)
{
    LOCKED((host_drv_t *)d, vpmm_host_i_event_query(d, event));
}

static vpmm_dres_t locked_stream_wait_event(vpmm_driver_t *d, vpmm_stream_t stream,
                                            vpmm_drv_event_t event)
{
    LOCKED((host_drv_t *)d, vpmm_host_i_stream_wait_event(d, stream, event));
}

static vpmm_dres_t locked_capture_info(vpmm_driver_t *d, vpmm_stream_t stream,
                                       vpmm_capture_status_t *out_status, uint64_t *out_id,
                                       vpmm_graph_t *out_graph)
{
    LOCKED((host_drv_t *)d, vpmm_host_i_capture_info(d, stream, out_status, out_id, out_graph));
}

static vpmm_dres_t locked_mem_get_info(vpmm_driver_t *d, size_t *out_free, size_t *out_total)
{
    LOCKED((host_drv_t *)d, host_mem_get_info(d, out_free, out_total));
}

static vpmm_dres_t locked_synchronize(vpmm_driver_t *d)
{
    LOCKED((host_drv_t *)d, vpmm_host_i_synchronize(d));
}

static vpmm_dres_t locked_begin_capture(vpmm_driver_t *d, vpmm_stream_t stream,
                                        vpmm_capture_mode_t mode)
{
    LOCKED((host_drv_t *)d, vpmm_host_i_begin_capture(d, stream, mode));
}

static vpmm_dres_t locked_end_capture(vpmm_driver_t *d, vpmm_stream_t stream,
                                      vpmm_graph_t *out_graph)
{
    LOCKED((host_drv_t *)d, vpmm_host_i_end_capture(d, stream, out_graph));
}

static vpmm_dres_t locked_user_object_create(vpmm_driver_t *d, vpmm_drv_uobj_fn destroy, void *arg,
                                             vpmm_drv_uobj_t *out)
{
    LOCKED((host_drv_t *)d, vpmm_host_i_user_object_create(d, destroy, arg, out));
}

static vpmm_dres_t locked_graph_retain_user_object(vpmm_driver_t *d, vpmm_graph_t graph,
                                                   vpmm_drv_uobj_t obj)
{
    LOCKED((host_drv_t *)d, vpmm_host_i_graph_retain_user_object(d, graph, obj));
}

static vpmm_dres_t locked_user_object_release(vpmm_driver_t *d, vpmm_drv_uobj_t obj)
{
    LOCKED((host_drv_t *)d, vpmm_host_i_user_object_release(d, obj));
}

static vpmm_dres_t locked_graph_destroy(vpmm_driver_t *d, vpmm_graph_t g)
{
    LOCKED((host_drv_t *)d, vpmm_host_graph_destroy(d, g));
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
    {
        pthread_mutexattr_t attr;
        pthread_mutexattr_init(&attr);
        pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
        pthread_mutex_init(&h->lock, &attr);
        pthread_mutexattr_destroy(&attr);
    }
    h->gran = gran;
    h->limit = limit;
    h->va_limit = opt ? opt->va_limit : 0;
    h->null_per_thread = opt && opt->per_thread_default_stream;
    h->rng = 0x9E3779B97F4A7C15ULL;
    h->next_capture_id = 1;
    h->graph_ops = &vpmm_host_i_graph_ops;
    h->base = (vpmm_driver_t){
        .name = vpmm_host_i_name,
        .device = 0,
        .device_count = 1,
        .peer_capable = 1,
        .exportable = 0,
        .granularity = locked_granularity,
        .va_reserve = locked_va_reserve,
        .va_free = locked_va_free,
        .mem_create = locked_mem_create,
        .mem_release = locked_mem_release,
        .mem_map = locked_mem_map,
        .mem_unmap = locked_mem_unmap,
        .set_access = locked_set_access,
        .event_create = locked_event_create,
        .event_destroy = locked_event_destroy,
        .event_record = locked_event_record,
        .event_query = locked_event_query,
        .stream_wait_event = locked_stream_wait_event,
        .capture_info = locked_capture_info,
        .mem_get_info = locked_mem_get_info,
        .synchronize = locked_synchronize,
        .begin_capture = locked_begin_capture,
        .end_capture = locked_end_capture,
        .user_object_create = locked_user_object_create,
        .graph_retain_user_object = locked_graph_retain_user_object,
        .user_object_release = locked_user_object_release,
        .graph_destroy = locked_graph_destroy,
        .revoke_access = locked_revoke_access,
        .get_access = locked_get_access,
        .stream_device = locked_stream_device,
        .mem_export = locked_mem_export,
        .mem_import = locked_mem_import,
        .close = host_close,
    };
    *out = &h->base;
    return VPMM_DRV_OK;
}

/* ---- inspection --------------------------------------------------------------------------- */

void vpmm_host_counts(vpmm_driver_t *d, vpmm_host_counts_t *out)
{
    host_drv_t *h = vpmm_host_i_as_host(d);
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

/* ---- invariant check ---------------------------------------------------------------------- */

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

/* I10: which record each special handle names, and which streams are blocking. */
static size_t check_stream_identity(const host_drv_t *h, int verbose)
{
    size_t bad = 0, n_blocking = 0;
    uint64_t next_token = vpmm_host_i_next_token();
    for (size_t i = 0; i < h->stream_cap; i++) {
        const host_stream_t *st = h->stream_tab[i];
        if (!st)
            continue;
        CHECK_THAT(st->key != NULL && st->key != HOST_STREAM_PER_THREAD,
                   "I10 a record under the unresolved handle %p", (void *)st->key);
        CHECK_THAT((st->key == HOST_STREAM_LEGACY) == (st == h->legacy),
                   "I10 record %p under key %p is not the legacy stream's", (void *)st,
                   (void *)st->key);
        CHECK_THAT(st->blocking == (st->thread != 0), "I10 stream %p blocking %d, thread %llu",
                   (void *)st->key, st->blocking, (unsigned long long)st->thread);
        n_blocking += st->thread != 0;
    }
    if (h->legacy)
        CHECK_THAT(h->legacy->key == HOST_STREAM_LEGACY && h->legacy->thread == 0 &&
                       !h->legacy->capture,
                   "I10 the legacy stream is per-thread, capturing or misfiled");
    for (size_t i = 0; i < h->n_ptds; i++) {
        const host_ptds_t *p = &h->ptds[i];
        CHECK_THAT(p->token != 0 && p->token < next_token, "I10 thread token %llu never issued",
                   (unsigned long long)p->token);
        CHECK_THAT(i == 0 || h->ptds[i - 1].token < p->token, "I10 thread map out of order at %zu",
                   i);
        CHECK_THAT(p->stream && p->stream->key == (vpmm_stream_t)(void *)p->stream &&
                       p->stream->thread == p->token,
                   "I10 thread %llu maps to a stream not its own", (unsigned long long)p->token);
        CHECK_THAT(!p->stream || vpmm_host_i_stream_find(h, p->stream->key) == p->stream,
                   "I10 thread %llu's stream is not in the table", (unsigned long long)p->token);
    }
    CHECK_THAT(n_blocking == h->n_ptds, "I10 %zu per-thread records, %zu in the thread map",
               n_blocking, h->n_ptds);
    return bad;
}

size_t vpmm_host_check(vpmm_driver_t *d, int verbose)
{
    const host_drv_t *h = vpmm_host_i_as_host(d);
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
        CHECK_THAT(hd->id == 0 || vpmm_host_i_slot_get(&h->handles, hd->id) == hd,
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
    CHECK_THAT(h->va_limit == 0 || resv_bytes <= h->va_limit, "I5 %zu bytes reserved, limit %zu",
               resv_bytes, h->va_limit);

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
        CHECK_THAT(!st->capture || vpmm_host_i_capture_find(h, st->capture->id) == st->capture,
                   "I7 stream %p in an unknown capture", (void *)st->key);
    }
    CHECK_THAT(n_streams == h->n_streams, "I7 stream table holds %zu, counted %zu", n_streams,
               h->n_streams);
    bad += check_stream_identity(h, verbose);
    for (const host_capture_t *c = h->captures; c; c = c->next)
        CHECK_THAT(c->id < h->next_capture_id && c->origin && c->origin->capture == c,
                   "I7 capture %llu has lost its origin", (unsigned long long)c->id);

    /* I8, I9 */
    bad += vpmm_host_i_graph_check(h, verbose);
    return bad;
}
