/*
 * driver_host_access.c — who may touch a mapping, in the host emulation backend (driver.h rule 9;
 * driver_host.h, "Access"): set_access, revoke_access, get_access and vpmm_host_can_access, on
 * the mappings driver_host_mem.c makes. driver_host.c owns the node and the driver table.
 *
 * Each mapping keeps a set of devices (bit k: device k may read and write it), one for the whole
 * mapping, or one per granule once a grant or revoke covered only part of it (as CUDA allows). The
 * host stands for every device at once, so the pages are PROT_READ|PROT_WRITE while the set is not
 * empty and PROT_NONE while it is: set_access (which always grants the view's own device) is one
 * mprotect of the whole range, revoke_access an mprotect of the parts nobody may touch any more.
 *
 *      mapping [........ 4 granules ........]   set_access(granules 1-2, peers {1}) from device 0
 *      masks   {0}      {0,1}   {0,1}   {0}     -> gmask[4]; back to one mask once all are equal
 *
 * Thread-safety: the entries run under the node's recursive mutex (driver_host.c's wrappers; the
 * control vpmm_host_can_access takes it there too).
 * Invariants: I4's access half above struct host_drv in driver_host_internal.h — masks within the
 * node's devices (vpmm_host_check), pages protected as the masks say (vpmm_host_check_access,
 * against the kernel's own table, /proc/self/maps) — checked here by vpmm_host_i_access_check.
 * Failure atomicity
 * (rule 1): every argument is validated and every mask array allocated before the first mprotect;
 * a revoke whose mprotect fails part-way puts back the protections it had changed.
 */
#include "driver_host_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "util.h"

#define PROT_RW (PROT_READ | PROT_WRITE)

/* Whether every byte of [va, end) is mapped (the range may span adjacent mappings). */
static int range_mapped(const host_drv_t *h, uintptr_t va, uintptr_t end)
{
    for (uintptr_t cur = va; cur < end;) {
        const host_map_t *m = vpmm_host_i_map_at(h, cur);
        if (!m)
            return 0;
        cur = m->va + m->size;
    }
    return 1;
}

/* ---- masks ------------------------------------------------------------------------- */

static size_t map_granules(const host_drv_t *h, const host_map_t *m)
{
    return m->size / h->gran;
}

/* The mask of the granule of m holding va. */
static uint64_t mask_at(const host_drv_t *h, const host_map_t *m, uintptr_t va)
{
    return m->gmask ? m->gmask[(va - m->va) / h->gran] : m->access;
}

/* Gives m one mask per granule (each the mapping's). -1 when out of host memory. */
static int mask_split(const host_drv_t *h, host_map_t *m)
{
    size_t n = map_granules(h, m);
    if (m->gmask)
        return 0;
    m->gmask = malloc(n * sizeof *m->gmask);
    if (!m->gmask)
        return -1;
    for (size_t i = 0; i < n; i++)
        m->gmask[i] = m->access;
    return 0;
}

/* Back to one mask when every granule's is the same. Never allocates. */
static void mask_collapse(const host_drv_t *h, host_map_t *m)
{
    size_t n = map_granules(h, m);
    if (!m->gmask)
        return;
    for (size_t i = 1; i < n; i++)
        if (m->gmask[i] != m->gmask[0])
            return;
    m->access = m->gmask[0];
    free(m->gmask);
    m->gmask = NULL;
}

/* Before a grant or revoke of [va, end) (all mapped): the mappings it covers only in part — the
 * first and the last — get a mask per granule. -1 when out of host memory, nothing changed. */
static int masks_prepare(const host_drv_t *h, uintptr_t va, uintptr_t end)
{
    host_map_t *first = vpmm_host_i_map_at(h, va), *last = vpmm_host_i_map_at(h, end - 1);
    int split_first = first->va < va || first->va + first->size > end;
    int split_last = last != first && last->va + last->size > end;
    int had_first = first->gmask != NULL;
    if (split_first && mask_split(h, first) != 0)
        return -1;
    if (split_last && mask_split(h, last) != 0) {
        if (!had_first)
            mask_collapse(h, first);
        return -1;
    }
    return 0;
}

/* mask = (mask | set) & ~clear on every granule of [va, end) (prepared by masks_prepare). */
static void masks_apply(const host_drv_t *h, uintptr_t va, uintptr_t end, uint64_t set,
                        uint64_t clear)
{
    for (uintptr_t cur = va; cur < end;) {
        host_map_t *m = vpmm_host_i_map_at(h, cur);
        uintptr_t stop = VPMM_MIN(end, m->va + m->size);
        if (!m->gmask) {
            m->access = (m->access | set) & ~clear;
        } else {
            for (size_t i = (cur - m->va) / h->gran; i < (stop - m->va) / h->gran; i++)
                m->gmask[i] = (m->gmask[i] | set) & ~clear;
            mask_collapse(h, m);
        }
        cur = stop;
    }
}

/*
 * mprotect(prot) on the parts of [va, end) that clearing `clear` leaves without any device (mask
 * nonzero, mask & ~clear zero), coalesced into runs. Stops at the first failure, returning -1 with
 * *failed_at = where the failed run starts (the runs before it are done).
 */
static int protect_cleared(const host_drv_t *h, uintptr_t va, uintptr_t end, uint64_t clear,
                           int prot, uintptr_t *failed_at)
{
    uintptr_t run = 0, run_end = 0;
    for (uintptr_t cur = va; cur <= end;) {
        const host_map_t *m = cur < end ? vpmm_host_i_map_at(h, cur) : NULL;
        uintptr_t stop = m ? VPMM_MIN(end, m->va + m->size) : end;
        uintptr_t step = m && m->gmask ? h->gran : stop - cur;
        int hit = 0;
        if (m) {
            uint64_t mask = mask_at(h, m, cur);
            hit = mask != 0 && (mask & ~clear) == 0;
        }
        if (run_end > run && (!hit || cur != run_end)) {
            if (mprotect((void *)run, run_end - run, prot) != 0) {
                *failed_at = run;
                return -1;
            }
            run = run_end = 0;
        }
        if (hit) {
            if (run_end == 0)
                run = cur;
            run_end = cur + step;
        }
        if (!m)
            break;
        cur += step;
    }
    return 0;
}

/* ---- entry points: access (rule 9) -------------------------------------------------------- */

/* Common validation of set_access and revoke_access: a non-empty, gran-aligned, fully mapped
 * range. */
static int access_range_ok(const host_drv_t *h, uintptr_t va, size_t size)
{
    return size != 0 && vpmm_host_i_gran_aligned(h, va) && vpmm_host_i_gran_aligned(h, size) &&
           size <= UINTPTR_MAX - va && range_mapped(h, va, va + size);
}

vpmm_dres_t vpmm_host_i_set_access(vpmm_driver_t *d, uintptr_t va, size_t size, const int *peers,
                                   size_t npeers)
{
    host_view_t *v = vpmm_host_i_view(d);
    host_drv_t *h = v->node;
    const vpmm_drv_entry_t e = VPMM_DRV_SET_ACCESS;
    uint64_t grant = (uint64_t)1 << v->base.device;
    if (npeers > 0 && peers == NULL)
        return vpmm_host_i_fail_invalid(v, e);
    for (size_t i = 0; i < npeers; i++) {
        if (peers[i] < 0 || peers[i] >= h->ndev)
            return vpmm_host_i_fail_invalid(v, e);
        grant |= (uint64_t)1 << peers[i];
    }
    if (!access_range_ok(h, va, size)) /* every granule mapped; may span several mappings */
        return vpmm_host_i_fail_invalid(v, e);
    if (grant & ~v->base.peer_capable) /* cuMemSetAccess: CUDA_ERROR_PEER_ACCESS_UNSUPPORTED */
        return vpmm_host_i_fail(v, e, VPMM_DRV_NOT_SUPPORTED, CODE_PEER_ACCESS_UNSUPPORTED);
    if (masks_prepare(h, va, va + size) != 0)
        return vpmm_host_i_fail(v, e, VPMM_DRV_ERROR, CODE_OUT_OF_MEMORY);
    /* The own device is always granted, so the whole range becomes accessible. */
    if (mprotect((void *)va, size, PROT_RW) != 0) {
        int err = errno;
        masks_apply(h, va, va + size, 0, 0); /* only collapses what masks_prepare split */
        return vpmm_host_i_fail(v, e, VPMM_DRV_ERROR, vpmm_host_i_errno_code(err));
    }
    masks_apply(h, va, va + size, grant, 0);
    return VPMM_DRV_OK;
}

vpmm_dres_t vpmm_host_i_revoke_access(vpmm_driver_t *d, uintptr_t va, size_t size, int peer)
{
    host_view_t *v = vpmm_host_i_view(d);
    host_drv_t *h = v->node;
    const vpmm_drv_entry_t e = VPMM_DRV_REVOKE_ACCESS;
    if (peer < 0 || peer >= h->ndev || peer == v->base.device || !access_range_ok(h, va, size))
        return vpmm_host_i_fail_invalid(v, e);
    uint64_t clear = (uint64_t)1 << peer;
    uintptr_t end = va + size, failed_at = 0;
    if (masks_prepare(h, va, end) != 0)
        return vpmm_host_i_fail(v, e, VPMM_DRV_ERROR, CODE_OUT_OF_MEMORY);
    /* Pages no device may touch any more become PROT_NONE; undo those done if one fails. */
    if (protect_cleared(h, va, end, clear, PROT_NONE, &failed_at) != 0) {
        int err = errno;
        (void)protect_cleared(h, va, failed_at, clear, PROT_RW, &failed_at);
        masks_apply(h, va, end, 0, 0);
        return vpmm_host_i_fail(v, e, VPMM_DRV_ERROR, vpmm_host_i_errno_code(err));
    }
    masks_apply(h, va, end, 0, clear);
    return VPMM_DRV_OK;
}

vpmm_dres_t vpmm_host_i_get_access(vpmm_driver_t *d, uintptr_t va, int device, int *out_rw)
{
    host_view_t *v = vpmm_host_i_view(d);
    host_drv_t *h = v->node;
    const host_map_t *m = vpmm_host_i_map_at(h, va);
    if (out_rw == NULL || device < 0 || device >= h->ndev || !m)
        return vpmm_host_i_fail_invalid(v, VPMM_DRV_GET_ACCESS);
    *out_rw = (int)((mask_at(h, m, va) >> device) & 1);
    return VPMM_DRV_OK;
}

int vpmm_host_i_can_access(const host_view_t *v, uintptr_t va, size_t size)
{
    const host_drv_t *h = v->node;
    uint64_t bit = (uint64_t)1 << v->base.device;
    if (size > UINTPTR_MAX - va)
        return 0;
    for (uintptr_t cur = va, end = va + size; cur < end;) {
        const host_map_t *m = vpmm_host_i_map_at(h, cur);
        if (!m)
            return 0;
        uintptr_t stop = VPMM_MIN(end, m->va + m->size);
        if (!m->gmask) {
            if (!(m->access & bit))
                return 0;
        } else {
            for (size_t i = (cur - m->va) / h->gran; i <= (stop - 1 - m->va) / h->gran; i++)
                if (!(m->gmask[i] & bit))
                    return 0;
        }
        cur = stop;
    }
    return 1;
}

/* ---- invariant check (I4's access half) --------------------------------------------------- */

/* A line of /proc/self/maps: [lo, hi) and its permissions ("rw-s", "---p"). */
typedef struct host_vma {
    uintptr_t lo, hi;
    char perms[5];
} host_vma_t;

/* The kernel's table of this process's mappings, sorted by address as the kernel lists them; NULL
 * (and *n = 0) when it cannot be read. */
static host_vma_t *read_vmas(size_t *n)
{
    host_vma_t *v = NULL;
    size_t cap = 0;
    char line[512];
    FILE *f = fopen("/proc/self/maps", "r");
    *n = 0;
    if (!f)
        return NULL;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perms[5];
        if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) != 3)
            continue;
        if (RESERVE(v, cap, *n + 1)) {
            free(v);
            v = NULL;
            *n = 0;
            break;
        }
        v[*n].lo = lo;
        v[*n].hi = hi;
        memcpy(v[*n].perms, perms, sizeof perms);
        (*n)++;
    }
    fclose(f);
    return v;
}

/* Whether the kernel's table gives every page of [lo, hi) read-write access (rw) or none (!rw). */
static int vmas_say(const host_vma_t *v, size_t n, uintptr_t lo, uintptr_t hi, int rw)
{
    size_t a = 0, b = n; /* the first VMA ending after lo */
    while (a < b) {
        size_t mid = a + (b - a) / 2;
        if (v[mid].hi <= lo)
            a = mid + 1;
        else
            b = mid;
    }
    for (uintptr_t cur = lo; cur < hi; a++) {
        if (a == n || v[a].lo > cur)
            return 0; /* a hole: not mapped at all */
        const char *p = v[a].perms;
        if (rw ? !(p[0] == 'r' && p[1] == 'w') : !(p[0] == '-' && p[1] == '-' && p[2] == '-'))
            return 0;
        cur = v[a].hi;
    }
    return 1;
}

typedef struct access_walk {
    const host_drv_t *h;
    const host_vma_t *vmas; /* NULL: the kernel's table could not be read; masks only */
    size_t n_vmas;
    size_t bad;
    int verbose;
} access_walk_t;

/* Checks one run [lo, hi) of m whose granules all have access (nonzero) or none. */
static void check_run(access_walk_t *w, const host_map_t *m, uintptr_t lo, uintptr_t hi, int access)
{
    size_t bad = 0;
    int verbose = w->verbose;
    CHECK_THAT(!w->vmas || vmas_say(w->vmas, w->n_vmas, lo, hi, access),
               "I4 mapping at %#lx: [%#lx, %#lx) should be %s", (unsigned long)m->va,
               (unsigned long)lo, (unsigned long)hi, access ? "read-write" : "inaccessible");
    w->bad += bad;
}

static void check_access(access_walk_t *w, const host_map_t *t)
{
    if (!t)
        return;
    const host_drv_t *h = w->h;
    size_t bad = 0;
    int verbose = w->verbose;
    uint64_t stray = 0;
    check_access(w, t->left);
    if (!t->gmask) {
        stray = t->access & ~vpmm_host_i_all_devs(h);
        check_run(w, t, t->va, t->va + t->size, t->access != 0);
    } else {
        size_t n = t->size / h->gran, start = 0;
        for (size_t i = 0; i < n; i++) {
            stray |= t->gmask[i] & ~vpmm_host_i_all_devs(h);
            if (i + 1 == n || (t->gmask[i + 1] != 0) != (t->gmask[start] != 0)) {
                check_run(w, t, t->va + start * h->gran, t->va + (i + 1) * h->gran,
                          t->gmask[start] != 0);
                start = i + 1;
            }
        }
    }
    CHECK_THAT(stray == 0, "I4 mapping at %#lx grants devices %#llx the node lacks",
               (unsigned long)t->va, (unsigned long long)stray);
    w->bad += bad;
    check_access(w, t->right);
}

size_t vpmm_host_i_access_check(const host_drv_t *h, int verbose, int with_kernel)
{
    access_walk_t w = { .h = h, .verbose = verbose };
    host_vma_t *vmas = with_kernel && h->maps ? read_vmas(&w.n_vmas) : NULL;
    w.vmas = vmas;
    check_access(&w, h->maps);
    free(vmas);
    return w.bad;
}
