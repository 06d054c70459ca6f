/*
 * driver_host_mem.c — the memory side of the host emulation backend (driver_host.h): the driver
 * contract's VA, handles, mappings, export and import (driver.h rules 2-4, 10) implemented on the
 * CPU, faithfully enough that misuse caught by CUDA is caught here too. driver_host_access.c owns
 * who may touch a mapping (rule 9), driver_host.c the node, its views and the driver table;
 * driver_host_internal.h holds what the parts share.
 *
 *  - VA: a reservation is an mmap(PROT_NONE, MAP_NORESERVE) placeholder, so 8 TiB costs nothing;
 *    an optional limit on the bytes reserved (va_limit) makes address-space exhaustion testable.
 *    One address space for every device of the node, as in a CUDA process.
 *  - Physical memory: every own handle is an extent of ONE memfd (thousands of handles must fit
 *    under a 1024-fd limit), whatever its device; each device's limit counts the handles created
 *    through its views. Extents come from a first-fit, coalescing free list; the file grows with
 *    ftruncate (sparse: untouched pages cost nothing) and freed extents are punched out (or
 *    truncated away at the tail) so touched memory really goes back. Only an imported handle
 *    carries a descriptor of its own (a dup of the one it was imported from), closed with it; an
 *    import of the node's own memfd pins the exporting handle's record, so its extent outlives
 *    that handle's release:
 *
 *      own handle A (extent of the memfd) <--origin-- imported B (dup fd, same bytes)
 *      release A, unmap A: A stays (id 0, pins 1)   release B: B's fd closed, then A freed
 *
 *    An own handle that was exported may be mapped by another node or process, which this node
 *    cannot see: once dead, its record is RETIRED (h->retired) with its extent, which is never
 *    punched or reused while the node lives — the importer keeps reading the exporter's bytes,
 *    as a CUDA import keeps the memory alive after the exporter's release.
 *
 *  - Mapping: mmap(MAP_SHARED|MAP_FIXED) of the handle's bytes over the placeholder, so aliases
 *    (and an import of an exported handle) see the same bytes; a new mapping is PROT_NONE until
 *    set_access (driver_host_access.c); unmap puts a PROT_NONE placeholder back.
 *
 * Thread-safety: the entries run under the node's recursive mutex (driver_host.c's wrappers).
 * Invariants: I1..I5 above struct host_drv in driver_host_internal.h, checked here by
 * vpmm_host_i_mem_check (called from vpmm_host_check). Failure atomicity (rule 1): each entry point
 * validates and allocates everything it needs before its first visible change. Release, unmap and
 * va_free never allocate, so the teardown paths cannot fail for lack of host memory.
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

/* ---- handle records ----------------------------------------------------------------------- */

static void handle_link(host_drv_t *h, host_handle_t *hd)
{
    hd->prev = NULL;
    hd->next = h->handle_list;
    if (hd->next)
        hd->next->prev = hd;
    h->handle_list = hd;
}

/* Released, unmapped and aliased by no import of this node: nothing needs its bytes any more. */
static int handle_dead(const host_handle_t *hd)
{
    return hd->id == 0 && hd->nmaps == 0 && hd->pins == 0;
}

/* Frees a dead record: an own handle's extent goes back, an imported one's descriptor is closed
 * and its origin unpinned (and freed too if that was all that kept it). Never allocates. */
static void handle_free(host_drv_t *h, host_handle_t *hd)
{
    if (hd->prev)
        hd->prev->next = hd->next;
    else
        h->handle_list = hd->next;
    if (hd->next)
        hd->next->prev = hd->prev;
    if (hd->fd < 0) {
        h->counts.handles--;
        h->counts.handle_bytes -= hd->size;
        h->devs[hd->dev].handles--;
        h->devs[hd->dev].handle_bytes -= hd->size;
        if (hd->exported) { /* another process may map it: retired, not freed (see the head) */
            hd->prev = NULL;
            hd->next = h->retired;
            h->retired = hd;
            h->counts.retired++;
            h->counts.retired_bytes += hd->size;
            return;
        }
        extent_free(h, hd->off, hd->size);
    } else {
        host_handle_t *origin = hd->origin;
        close(hd->fd);
        h->counts.imported--;
        h->counts.imported_bytes -= hd->size;
        if (origin && --origin->pins == 0 && handle_dead(origin))
            handle_free(h, origin);
    }
    free(hd);
}

/* The descriptor and offset a handle's bytes are mapped from. */
static int handle_fd(const host_drv_t *h, const host_handle_t *hd)
{
    return hd->fd >= 0 ? hd->fd : h->fd;
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

host_map_t *vpmm_host_i_map_at(const host_drv_t *h, uintptr_t va)
{
    host_map_t *m = va < UINTPTR_MAX ? map_below(h, va + 1) : NULL;
    return m && va - m->va < m->size ? m : NULL;
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
    free(t->gmask);
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

/* ---- entry points: VA and handles --------------------------------------------------------- */

vpmm_dres_t vpmm_host_i_granularity(vpmm_driver_t *d, size_t *out_bytes)
{
    host_view_t *v = vpmm_host_i_view(d);
    if (!out_bytes)
        return vpmm_host_i_fail_invalid(v, VPMM_DRV_GRANULARITY);
    *out_bytes = v->node->gran;
    return VPMM_DRV_OK;
}

vpmm_dres_t vpmm_host_i_va_reserve(vpmm_driver_t *d, size_t size, size_t align, uintptr_t *out_va)
{
    host_view_t *v = vpmm_host_i_view(d);
    host_drv_t *h = v->node;
    const vpmm_drv_entry_t e = VPMM_DRV_VA_RESERVE;
    if (!out_va || size == 0 || !vpmm_host_i_gran_aligned(h, size) ||
        !vpmm_host_i_gran_aligned(h, align))
        return vpmm_host_i_fail_invalid(v, e);
    if (align == 0)
        align = h->gran; /* as CUDA: 0 = the default alignment */
    if (h->va_limit && (size > h->va_limit || h->counts.reserved_bytes > h->va_limit - size))
        return vpmm_host_i_fail(v, e, VPMM_DRV_OUT_OF_MEMORY, CODE_OUT_OF_MEMORY);
    /* Over-reserve so that an aligned start exists inside, then trim both ends:
     *   [p ...head... |start ....... size ....... |end ...tail... p+span)          */
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t extra = align > page ? align - page : 0;
    if (size > SIZE_MAX - extra)
        return vpmm_host_i_fail(v, e, VPMM_DRV_OUT_OF_MEMORY, CODE_OUT_OF_MEMORY);
    size_t span = size + extra;
    if (RESERVE(h->resv, h->resv_cap, h->n_resv + 1))
        return vpmm_host_i_fail(v, e, VPMM_DRV_OUT_OF_MEMORY, CODE_OUT_OF_MEMORY);
    void *p = placeholder(NULL, span, 0);
    if (p == MAP_FAILED)
        return vpmm_host_i_fail(v, e, VPMM_DRV_OUT_OF_MEMORY, CODE_OUT_OF_MEMORY);
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

vpmm_dres_t vpmm_host_i_va_free(vpmm_driver_t *d, uintptr_t va, size_t size)
{
    host_view_t *v = vpmm_host_i_view(d);
    host_drv_t *h = v->node;
    const vpmm_drv_entry_t e = VPMM_DRV_VA_FREE;
    size_t i = resv_upper(h, va);
    if (size == 0 || i == 0 || h->resv[i - 1].base != va || h->resv[i - 1].size != size)
        return vpmm_host_i_fail_invalid(v, e); /* not exactly one reservation */
    if (map_overlaps(h, va, size))
        return vpmm_host_i_fail_invalid(v, e); /* rule 3: the whole reservation must be unmapped */
    if (munmap((void *)va, size) != 0)
        return vpmm_host_i_fail(v, e, VPMM_DRV_ERROR, vpmm_host_i_errno_code(errno));
    i--;
    memmove(&h->resv[i], &h->resv[i + 1], (h->n_resv - i - 1) * sizeof *h->resv);
    h->n_resv--;
    h->counts.reservations--;
    h->counts.reserved_bytes -= size;
    return VPMM_DRV_OK;
}

vpmm_dres_t vpmm_host_i_mem_create(vpmm_driver_t *d, size_t size, vpmm_drv_handle_t *out_handle)
{
    host_view_t *v = vpmm_host_i_view(d);
    host_drv_t *h = v->node;
    host_dev_t *dev = &h->devs[v->base.device];
    const vpmm_drv_entry_t e = VPMM_DRV_MEM_CREATE;
    if (!out_handle || size == 0 || !vpmm_host_i_gran_aligned(h, size))
        return vpmm_host_i_fail_invalid(v, e);
    if (size > h->limit - dev->handle_bytes) /* the limit is the device's */
        return vpmm_host_i_fail(v, e, VPMM_DRV_OUT_OF_MEMORY, CODE_OUT_OF_MEMORY);
    /* I3: room for the extent this handle may split off when it is freed. */
    if (RESERVE(h->ext, h->ext_cap, h->counts.handles + h->counts.retired + 2))
        return vpmm_host_i_fail(v, e, VPMM_DRV_OUT_OF_MEMORY, CODE_OUT_OF_MEMORY);
    host_handle_t *hd = calloc(1, sizeof *hd);
    if (!hd)
        return vpmm_host_i_fail(v, e, VPMM_DRV_OUT_OF_MEMORY, CODE_OUT_OF_MEMORY);
    uint64_t id = vpmm_host_i_slot_put(&h->handles, hd);
    if (id == 0 || extent_alloc(h, size, &hd->off) != 0) {
        if (id)
            vpmm_host_i_slot_drop(&h->handles, id);
        free(hd);
        return vpmm_host_i_fail(v, e, VPMM_DRV_OUT_OF_MEMORY, CODE_OUT_OF_MEMORY);
    }
    hd->id = id;
    hd->size = size;
    hd->dev = v->base.device;
    hd->fd = -1;
    hd->exportable = v->base.exportable;
    handle_link(h, hd);
    h->counts.handles++;
    h->counts.handle_bytes += size;
    dev->handles++;
    dev->handle_bytes += size;
    *out_handle = id;
    return VPMM_DRV_OK;
}

vpmm_dres_t vpmm_host_i_mem_release(vpmm_driver_t *d, vpmm_drv_handle_t handle)
{
    host_view_t *v = vpmm_host_i_view(d);
    host_drv_t *h = v->node;
    host_handle_t *hd = vpmm_host_i_slot_get(&h->handles, handle);
    if (!hd)
        return vpmm_host_i_fail_invalid(v, VPMM_DRV_MEM_RELEASE);
    vpmm_host_i_slot_drop(&h->handles, handle);
    hd->id = 0;
    if (handle_dead(hd))
        handle_free(h, hd); /* else the last unmap (or the last import's release) frees it */
    return VPMM_DRV_OK;
}

vpmm_dres_t vpmm_host_i_mem_map(vpmm_driver_t *d, uintptr_t va, size_t size,
                                vpmm_drv_handle_t handle, size_t offset)
{
    host_view_t *v = vpmm_host_i_view(d);
    host_drv_t *h = v->node;
    const vpmm_drv_entry_t e = VPMM_DRV_MEM_MAP;
    if (size == 0 || !vpmm_host_i_gran_aligned(h, va) || !vpmm_host_i_gran_aligned(h, size) ||
        !vpmm_host_i_gran_aligned(h, offset) || size > UINTPTR_MAX - va)
        return vpmm_host_i_fail_invalid(v, e);
    host_handle_t *hd = vpmm_host_i_slot_get(&h->handles, handle);
    if (!hd || offset > hd->size || size > hd->size - offset)
        return vpmm_host_i_fail_invalid(v, e);
    if (!resv_containing(h, va, size) || map_overlaps(h, va, size))
        return vpmm_host_i_fail_invalid(v, e);
    /* As the CUDA 13 driver on an H100 does (measured): only whole handles are mapped. */
    if (offset != 0 || size != hd->size)
        return vpmm_host_i_fail(v, e, VPMM_DRV_NOT_SUPPORTED, CODE_NOT_SUPPORTED);
    host_map_t *m = calloc(1, sizeof *m);
    if (!m)
        return vpmm_host_i_fail(v, e, VPMM_DRV_ERROR, CODE_OUT_OF_MEMORY);
    void *p = mmap((void *)va, size, PROT_NONE, MAP_SHARED | MAP_FIXED | MAP_NORESERVE,
                   handle_fd(h, hd), (off_t)(hd->off + offset));
    if (p == MAP_FAILED) {
        int err = errno;
        /* MAP_FIXED may have torn the placeholder down before failing; put it back. */
        (void)placeholder((void *)va, size, MAP_FIXED);
        free(m);
        return vpmm_host_i_fail(v, e, VPMM_DRV_ERROR, vpmm_host_i_errno_code(err));
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

vpmm_dres_t vpmm_host_i_mem_unmap(vpmm_driver_t *d, uintptr_t va, size_t size)
{
    host_view_t *v = vpmm_host_i_view(d);
    host_drv_t *h = v->node;
    const vpmm_drv_entry_t e = VPMM_DRV_MEM_UNMAP;
    if (size == 0 || !vpmm_host_i_gran_aligned(h, va) || !vpmm_host_i_gran_aligned(h, size))
        return vpmm_host_i_fail_invalid(v, e);
    host_map_t *m = map_below(h, va + 1); /* the mapping starting at or below va */
    if (!m || m->va != va || m->size != size)
        return vpmm_host_i_fail_invalid(v, e); /* rule 3: exactly one whole mapping */
    if (placeholder((void *)va, size, MAP_FIXED) == MAP_FAILED)
        return vpmm_host_i_fail(v, e, VPMM_DRV_ERROR, vpmm_host_i_errno_code(errno));
    host_handle_t *hd = m->handle;
    map_erase(h, m);
    h->counts.mappings--;
    h->counts.mapped_bytes -= size;
    free(m->gmask);
    free(m);
    hd->nmaps--;
    if (handle_dead(hd))
        handle_free(h, hd); /* released earlier: this was its last mapping */
    return VPMM_DRV_OK;
}

vpmm_dres_t vpmm_host_i_mem_get_info(vpmm_driver_t *d, size_t *out_free, size_t *out_total)
{
    host_view_t *v = vpmm_host_i_view(d);
    host_drv_t *h = v->node;
    if (!out_free || !out_total)
        return vpmm_host_i_fail_invalid(v, VPMM_DRV_MEM_GET_INFO);
    *out_free = h->limit - h->devs[v->base.device].handle_bytes;
    *out_total = h->limit;
    return VPMM_DRV_OK;
}

/* ---- entry points: export and import (rule 10) -------------------------------------------- */

vpmm_dres_t vpmm_host_i_mem_export(vpmm_driver_t *d, vpmm_drv_handle_t handle,
                                   vpmm_drv_shareable_t *out)
{
    host_view_t *v = vpmm_host_i_view(d);
    host_drv_t *h = v->node;
    const vpmm_drv_entry_t e = VPMM_DRV_MEM_EXPORT;
    if (!v->base.exportable)
        return vpmm_host_i_fail(v, e, VPMM_DRV_NOT_SUPPORTED, CODE_NOT_SUPPORTED);
    host_handle_t *hd = vpmm_host_i_slot_get(&h->handles, handle);
    if (!out || !hd)
        return vpmm_host_i_fail_invalid(v, e);
    if (!hd->exportable) /* created through a view that was not exportable */
        return vpmm_host_i_fail(v, e, VPMM_DRV_NOT_SUPPORTED, CODE_NOT_SUPPORTED);
    int fd = fcntl(handle_fd(h, hd), F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        return vpmm_host_i_fail(v, e, VPMM_DRV_ERROR, vpmm_host_i_errno_code(errno));
    hd->exported = 1;
    *out = (vpmm_drv_shareable_t){ .fd = fd, .offset = hd->off, .size = hd->size };
    return VPMM_DRV_OK;
}

/* The own handle of this node whose extent an import of [off, off + size) of the node's own memfd
 * names, or NULL (the bytes are free, or span other handles). O(handles): imports are rare. */
static host_handle_t *own_origin(const host_drv_t *h, uint64_t off, size_t size)
{
    for (host_handle_t *hd = h->handle_list; hd; hd = hd->next)
        if (hd->fd < 0 && hd->off == off && hd->size == size)
            return hd;
    return NULL;
}

vpmm_dres_t vpmm_host_i_mem_import(vpmm_driver_t *d, const vpmm_drv_shareable_t *in,
                                   vpmm_drv_handle_t *out_handle)
{
    host_view_t *v = vpmm_host_i_view(d);
    host_drv_t *h = v->node;
    const vpmm_drv_entry_t e = VPMM_DRV_MEM_IMPORT;
    struct stat sb;
    if (!in || !out_handle || in->fd < 0 || in->size == 0 ||
        !vpmm_host_i_gran_aligned(h, in->size) ||
        !vpmm_host_i_gran_aligned(h, (uintptr_t)in->offset) || fstat(in->fd, &sb) != 0)
        return vpmm_host_i_fail_invalid(v, e);
    if (sb.st_size < 0 || in->offset > (uint64_t)sb.st_size ||
        in->size > (uint64_t)sb.st_size - in->offset)
        return vpmm_host_i_fail_invalid(v, e); /* past the end of what the descriptor names */
    host_handle_t *origin = NULL;
    if (sb.st_dev == h->fd_dev && sb.st_ino == h->fd_ino) {
        origin = own_origin(h, in->offset, in->size);
        if (!origin) /* the node's own memory, but no handle's: free or someone else's bytes */
            return vpmm_host_i_fail_invalid(v, e);
    }
    host_handle_t *hd = calloc(1, sizeof *hd);
    uint64_t id = hd ? vpmm_host_i_slot_put(&h->handles, hd) : 0;
    int fd = id ? fcntl(in->fd, F_DUPFD_CLOEXEC, 0) : -1;
    if (fd < 0) {
        int err = id ? errno : ENOMEM;
        if (id)
            vpmm_host_i_slot_drop(&h->handles, id);
        free(hd);
        return vpmm_host_i_fail(v, e, VPMM_DRV_ERROR, vpmm_host_i_errno_code(err));
    }
    hd->id = id;
    hd->off = (size_t)in->offset;
    hd->size = in->size;
    hd->dev = v->base.device;
    hd->fd = fd;
    hd->exportable = 1; /* it came from a shareable handle */
    hd->origin = origin;
    if (origin)
        origin->pins++;
    handle_link(h, hd);
    h->counts.imported++;
    h->counts.imported_bytes += in->size;
    *out_handle = id;
    return VPMM_DRV_OK;
}

/* ---- lifetime ----------------------------------------------------------------------------- */

void vpmm_host_i_mem_fini(host_drv_t *h)
{
    for (size_t i = 0; i < h->n_resv; i++)
        munmap((void *)h->resv[i].base, h->resv[i].size); /* drops the mappings inside too */
    map_free_all(h->maps);
    while (h->handle_list) {
        host_handle_t *next = h->handle_list->next;
        if (h->handle_list->fd >= 0)
            close(h->handle_list->fd);
        free(h->handle_list);
        h->handle_list = next;
    }
    while (h->retired) {
        host_handle_t *next = h->retired->next;
        free(h->retired);
        h->retired = next;
    }
    h->counts.retired = h->counts.retired_bytes = 0;
    if (h->fd >= 0)
        close(h->fd);
    free(h->ext);
    free(h->handles.slots);
    free(h->resv);
}

/* ---- invariant check (I1..I5) ------------------------------------------------------------- */

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

/* I2 for one record; counts it into the sums of the caller. */
static size_t check_handle(const host_drv_t *h, const host_handle_t *hd, int verbose)
{
    size_t bad = 0;
    CHECK_THAT(hd->dev >= 0 && hd->dev < h->ndev, "I2 handle on device %d", hd->dev);
    CHECK_THAT(hd->id != 0 || hd->nmaps > 0 || hd->pins > 0,
               "I2 released handle with no mapping and no import is alive");
    CHECK_THAT(hd->id == 0 || vpmm_host_i_slot_get(&h->handles, hd->id) == hd,
               "I2 handle %#llx does not resolve to its record", (unsigned long long)hd->id);
    if (hd->fd >= 0) {
        CHECK_THAT(fcntl(hd->fd, F_GETFD) != -1, "I2 imported handle's descriptor %d is closed",
                   hd->fd);
        CHECK_THAT(hd->pins == 0, "I2 an imported handle is pinned");
        CHECK_THAT(!hd->origin || (hd->origin->fd < 0 && hd->origin->off == hd->off &&
                                   hd->origin->size == hd->size),
                   "I2 imported handle's origin is not its extent's own handle");
    } else {
        size_t pins = 0;
        for (const host_handle_t *o = h->handle_list; o && hd->pins; o = o->next)
            pins += o->origin == hd;
        CHECK_THAT(pins == hd->pins, "I2 handle pinned %zu times, %zu imports name it", hd->pins,
                   pins);
    }
    return bad;
}

size_t vpmm_host_i_mem_check(const host_drv_t *h, int verbose)
{
    size_t bad = 0;
    /* I1: free extents sorted, coalesced, gran-aligned, tail truncated. */
    for (size_t i = 0; i < h->n_ext; i++) {
        const host_extent_t *x = &h->ext[i];
        CHECK_THAT(x->len > 0 && vpmm_host_i_gran_aligned(h, x->off) &&
                       vpmm_host_i_gran_aligned(h, x->len),
                   "I1 extent %zu empty or misaligned", i);
        CHECK_THAT(x->off + x->len < h->file_size, "I1 extent %zu reaches the end of the file", i);
        CHECK_THAT(i == 0 || h->ext[i - 1].off + h->ext[i - 1].len < x->off,
                   "I1 extents %zu and %zu overlap or touch", i - 1, i);
    }
    /* I2 + I1 tiling: own handle extents and free extents cover [0, file_size) exactly. */
    size_t n_handles = 0, handle_bytes = 0, n_imported = 0, imported_bytes = 0, nmaps = 0;
    size_t dev_handles = 0, dev_bytes = 0;
    host_extent_t *all =
        malloc((h->counts.handles + h->counts.retired + h->n_ext + 1) * sizeof *all);
    size_t n_all = 0;
    for (const host_handle_t *hd = h->handle_list; hd; hd = hd->next) {
        nmaps += hd->nmaps;
        bad += check_handle(h, hd, verbose);
        if (hd->fd >= 0) {
            n_imported++;
            imported_bytes += hd->size;
            continue;
        }
        n_handles++;
        handle_bytes += hd->size;
        if (all && n_all < h->counts.handles)
            all[n_all++] = (host_extent_t){ hd->off, hd->size };
    }
    CHECK_THAT(n_handles == h->counts.handles && handle_bytes == h->counts.handle_bytes,
               "I2 handle counts %zu/%zu, records %zu/%zu", h->counts.handles,
               h->counts.handle_bytes, n_handles, handle_bytes);
    CHECK_THAT(n_imported == h->counts.imported && imported_bytes == h->counts.imported_bytes,
               "I2 imported counts %zu/%zu, records %zu/%zu", h->counts.imported,
               h->counts.imported_bytes, n_imported, imported_bytes);
    for (int k = 0; k < h->ndev; k++) {
        CHECK_THAT(h->devs[k].handle_bytes <= h->limit, "I2 device %d holds %zu bytes, limit %zu",
                   k, h->devs[k].handle_bytes, h->limit);
        dev_handles += h->devs[k].handles;
        dev_bytes += h->devs[k].handle_bytes;
    }
    CHECK_THAT(dev_handles == n_handles && dev_bytes == handle_bytes,
               "I2 devices hold %zu handles / %zu bytes, the node %zu / %zu", dev_handles,
               dev_bytes, n_handles, handle_bytes);
    CHECK_THAT(
        h->n_ext <= h->counts.handles + h->counts.retired + 1 &&
            (h->counts.handles == 0 || h->ext_cap >= h->counts.handles + h->counts.retired + 1),
        "I3 %zu free extents, %zu handles, capacity %zu", h->n_ext, h->counts.handles, h->ext_cap);
    if (all) {
        size_t n_retired = 0;
        for (const host_handle_t *hd = h->retired; hd; hd = hd->next, n_retired++)
            if (n_retired < h->counts.retired)
                all[n_all++] = (host_extent_t){ hd->off, hd->size };
        CHECK_THAT(n_retired == h->counts.retired, "I1 %zu retired records, %zu counted", n_retired,
                   h->counts.retired);
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
        CHECK_THAT(r->size > 0 && vpmm_host_i_gran_aligned(h, r->base) &&
                       vpmm_host_i_gran_aligned(h, r->size),
                   "I5 reservation %zu misaligned", i);
        CHECK_THAT(i == 0 || h->resv[i - 1].base + h->resv[i - 1].size <= r->base,
                   "I5 reservations %zu and %zu overlap or are out of order", i - 1, i);
    }
    CHECK_THAT(h->n_resv == h->counts.reservations && resv_bytes == h->counts.reserved_bytes,
               "I5 reservation counts");
    CHECK_THAT(h->va_limit == 0 || resv_bytes <= h->va_limit, "I5 %zu bytes reserved, limit %zu",
               resv_bytes, h->va_limit);
    return bad;
}
