/*
 * fuzz_devices.c — the operation fuzzer's part for several devices and several processes
 * (docs/DEVICES.md), on the host backend's node of devices: GRANT (vpmm_pool_grant_access),
 * EXPORT / OPEN / CLOSE / UNSHARE (CUDA IPC between the input's pool, the exporter, and a second
 * pool on a node of its own, the importer, standing for another process: in-process import takes
 * the exporter's descriptors with pidfd_getfd on the own pid), and the segment hook's mirror.
 * Device 1's streams (P1, P2 of the stream operand) are fuzz_ops.c's, as every other stream.
 *
 * The model, checked after every operation (dev_check) besides fuzz_ops.c's checks:
 *  - Peer access. Once device 1 was granted, every live allocation is reachable by it
 *    (vpmm_host_can_access on device 1's view): growth, defragmentation's remaps and graph-pool
 *    growth must name the peer. A refused grant (no such device, an isolated one, an injected
 *    driver failure) changes nothing (stats and regions compared).
 *  - Shares. Each exported allocation has a record: the shares not over (each export adds one,
 *    a close that ends an open takes one, vpmm_ipc_unshare ends them all), its slot and gen from
 *    the handle bytes. The exporter's table says exactly that count and gen while the allocation
 *    holds its slot, vpmm_stats_t.ipc_exports the exports, ipc_shared lies between the slots held
 *    for certain and those maybe still held. Freed with shares not over, its memory is nobody's —
 *    by address or physical page, fuzz_ops.c's deferred-free checks — until the last one ends
 *    (then a slow path may release it). An open of a handle whose share is over is refused; of
 *    one open already, it returns the same pointer; the importer reads what the exporter wrote,
 *    and the exporter what is written through the importer's pointer. Failed exports and opens
 *    change neither pool, and leave no mapping, handle, reservation or descriptor behind.
 *  - Segments. The hook's events alone build a mirror; a MAPPED of a segment already there (or
 *    overlapping one), an UNMAPPED of one not there, or a mirror that differs from
 *    vpmm_pool_walk_segments (and from the handles and mapped bytes of the stats) is a finding.
 */
#include <dirent.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fuzz_internal.h"
#include "ipc_wire.h"
#include "test_rng.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

static uint64_t grants_made, exports_made, opens_made, closes_made, unshares_made, seg_events;
static unsigned char not_null;

/* ---- the segment hook's mirror ----------------------------------------------------------------
 */

static long seg_find(const fz_dev_t *d, uintptr_t addr)
{
    for (size_t i = 0; i < d->nseg; i++)
        if (d->seg[i].addr == addr)
            return (long)i;
    return -1;
}

static void seg_break(fz_dev_t *d, const char *what, const vpmm_segment_info_t *s)
{
    if (d->seg_broken++)
        return;
    snprintf(d->seg_why, sizeof d->seg_why, "%s: [%p, +%zu) of pool %u", what, (void *)s->addr,
             s->size, s->pool);
}

static void seg_add(fz_dev_t *d, const vpmm_segment_info_t *s)
{
    if (d->nseg == d->segcap) {
        size_t cap = d->segcap ? d->segcap * 2 : 256;
        vpmm_segment_info_t *a = realloc(d->seg, cap * sizeof *a);
        if (a == NULL) {
            fprintf(stderr, "fuzz_ops: out of host memory\n");
            abort();
        }
        d->seg = a;
        d->segcap = cap;
    }
    d->seg[d->nseg++] = *s;
}

/* Under the pool lock: it only keeps the mirror (a finding is reported after the operation). */
static void seg_hook(void *user, vpmm_segment_event_t ev, const vpmm_segment_info_t *s)
{
    fz_dev_t *d = &((fz_t *)user)->dev;
    long i = seg_find(d, s->addr);
    d->seg_events++;
    seg_events++;
    if (ev == VPMM_SEGMENT_MAPPED) {
        if (i >= 0) {
            seg_break(d, "MAPPED of a segment already there", s);
            return;
        }
        for (size_t k = 0; k < d->nseg; k++)
            if (s->addr < d->seg[k].addr + d->seg[k].size && d->seg[k].addr < s->addr + s->size)
                seg_break(d, "MAPPED overlapping a segment already there", s);
        seg_add(d, s);
    } else if (ev == VPMM_SEGMENT_UNMAPPED) {
        if (i < 0) {
            seg_break(d, "UNMAPPED of a segment not there", s);
            return;
        }
        if (d->seg[i].size != s->size || d->seg[i].pool != s->pool)
            seg_break(d, "UNMAPPED of another size or pool than it was MAPPED with", s);
        d->seg[i] = d->seg[--d->nseg];
    } else {
        seg_break(d, "an event neither MAPPED nor UNMAPPED", s);
    }
}

static int seg_seed(const vpmm_segment_info_t *s, void *user)
{
    seg_add(user, s);
    return 0;
}

static int by_seg_addr(const void *a, const void *b)
{
    uintptr_t x = ((const vpmm_segment_info_t *)a)->addr;
    uintptr_t y = ((const vpmm_segment_info_t *)b)->addr;
    return (x > y) - (x < y);
}

typedef struct seg_walk {
    const fz_dev_t *d;
    size_t n, bytes;
    const vpmm_segment_info_t *bad; /* the first segment the walk lists and the mirror lacks */
    vpmm_segment_info_t at;
} seg_walk_t;

static int seg_visit(const vpmm_segment_info_t *s, void *user)
{
    seg_walk_t *w = user;
    const vpmm_segment_info_t *m = w->n < w->d->nseg ? &w->d->seg[w->n] : NULL;
    if (w->bad == NULL &&
        (m == NULL || m->addr != s->addr || m->size != s->size || m->pool != s->pool)) {
        w->at = *s;
        w->bad = &w->at;
    }
    w->n++;
    w->bytes += s->size;
    return 0;
}

/* The mirror is exactly the walk (in address order), and holds the pool's handles (its
 * counters, read directly: vpmm_get_stats would collect graph pools, a change of its own). */
static void seg_check(fz_t *z)
{
    const vpmm_pool_t *p = z->pool;
    fz_dev_t *d = &z->dev;
    seg_walk_t w = { d, 0, 0, NULL, { 0, 0, 0 } };
    if (d->seg_broken)
        finding(z, "segment hook: %s (%d event(s) a collective library would refuse)", d->seg_why,
                d->seg_broken);
    if (d->nseg > 1 && d->seg_sorted_at != d->seg_events) { /* sorted since no event came */
        qsort(d->seg, d->nseg, sizeof *d->seg, by_seg_addr);
        d->seg_sorted_at = d->seg_events;
    }
    expect_status(z, "vpmm_pool_walk_segments", vpmm_pool_walk_segments(z->pool, seg_visit, &w),
                  S(VPMM_SUCCESS), 1);
    if (w.bad != NULL || w.n != d->nseg)
        finding(z,
                "the segment hook's events and vpmm_pool_walk_segments disagree: the walk lists "
                "%zu segments, the events left %zu%s%p (+%zu, pool %u)",
                w.n, d->nseg, w.bad ? "; the walk's first unknown one: " : "; walk ended at ",
                w.bad ? (void *)w.at.addr : NULL, w.bad ? w.at.size : 0, w.bad ? w.at.pool : 0);
    if (w.n != p->phys_count || w.bytes != p->c.mapped_bytes)
        finding(z, "%zu segments of %zu bytes; the pool holds %zu handles of %zu mapped bytes", w.n,
                w.bytes, (size_t)p->phys_count, p->c.mapped_bytes);
}

/* ---- peer access ------------------------------------------------------------------------------
 */

/* Every live allocation is reachable by device 1 once it was granted. */
static void reach_check(fz_t *z, const char *when)
{
    for (size_t i = 0; i < z->nlive; i++) {
        const live_t *l = &z->live[i];
        if (!vpmm_host_can_access(z->dev.peer, (uintptr_t)l->p, l->size))
            finding(z,
                    "%s: device 1 was granted access to the pool, but the live allocation %p "
                    "(%zu bytes, graph pool %u) is not reachable by it",
                    when, (void *)l->p, l->size, pool_of_alloc(z, (uintptr_t)l->p));
    }
}

int op_grant(fz_t *z)
{
    static const int devs[8] = { 0, 1, 1, 1, 2, -1, VPMM_DRV_MAX_DEVICES, INT_MIN };
    fz_dev_t *d = &z->dev;
    int dev = devs[rd8(z) % 8];
    int changes = dev == 1 && d->devices > 1 && !d->isolated && !d->granted;
    snap_t before;
    vpmm_status_t st;
    vpmm_stats_t s;

    snap_take(z, &before);
    st = vpmm_pool_grant_access(z->pool, dev);
    if (fz_verbose)
        fprintf(stderr, "    device %d\n", dev);
    if (dev < 0 || dev >= d->devices)
        expect_status(z, "vpmm_pool_grant_access(no such device)", st,
                      S(VPMM_ERROR_INVALID_ARGUMENT), 1);
    else if (dev == 0 || d->granted)
        expect_status(z, "vpmm_pool_grant_access(nothing to do)", st, S(VPMM_SUCCESS), 1);
    else if (d->isolated)
        expect_status(z, "vpmm_pool_grant_access(isolated)", st, S(VPMM_ERROR_NOT_SUPPORTED), 1);
    else
        expect_status(z, "vpmm_pool_grant_access", st, S(VPMM_SUCCESS), 0);
    if (st != VPMM_SUCCESS || !changes) {
        snap_same(z, &before, st != VPMM_SUCCESS ? "vpmm_pool_grant_access" : "a grant of nothing");
    } else {
        d->granted = 1;
        grants_made++;
        reach_check(z, "vpmm_pool_grant_access");
    }
    s = stats_of(z);
    if (s.peers != (d->granted ? 2u : 0u) || s.device != 0)
        finding(z, "stats: peers 0x%llx, device %d; expected 0x%x, 0", (unsigned long long)s.peers,
                s.device, d->granted ? 2u : 0u);
    return 1;
}

/* ---- shares: the model ------------------------------------------------------------------------
 */

int dev_share_pending(const fz_t *z, int i)
{
    return z->dev.shares[i].count > 0 &&
           (z->dev.shares[i].state == SH_LIVE || z->dev.shares[i].state == SH_DEFERRED);
}

/* Whether a kept handle or an open names record i. */
static int share_named(const fz_dev_t *d, int i)
{
    for (size_t k = 0; k < d->nhandles; k++)
        if (d->handles[k].share == i)
            return 1;
    for (size_t k = 0; k < d->nopens; k++)
        if (d->opens[k].share == i)
            return 1;
    return 0;
}

/* A record for a newly exported allocation: an unused one, or one gone and named nowhere. */
static int share_free(fz_dev_t *d)
{
    for (int i = 0; i < MAX_SHARES; i++)
        if (d->shares[i].state == SH_UNUSED ||
            (d->shares[i].state == SH_GONE && !share_named(d, i)))
            return i;
    return -1;
}

int dev_freed(fz_t *z, const live_t *l)
{
    share_t *r;
    if (l->share < 0)
        return -1;
    r = &z->dev.shares[l->share];
    r->stamp = l->stamp;
    r->nop_free = z->nop;
    if (r->count == 0) {
        r->state = SH_GONE; /* every share over: the free gives the slot back */
        return -1;
    }
    r->state = SH_DEFERRED;
    if (fz_verbose)
        fprintf(stderr, "    %p freed with %u share(s) not over\n", (void *)l->p, r->count);
    return l->share;
}

void dev_given(fz_t *z, uintptr_t a, size_t size)
{
    for (int i = 0; i < MAX_SHARES; i++) {
        share_t *r = &z->dev.shares[i];
        if ((r->state != SH_DEFERRED && r->state != SH_MAYBE) || a >= r->addr + rnd(r->size) ||
            r->addr >= a + rnd(size))
            continue;
        if (r->state == SH_DEFERRED)
            finding(z,
                    "lifetime rule: %p (%zu bytes) was handed out, overlapping %p (%zu bytes), "
                    "freed at operation %llu with %u share(s) that are not over",
                    (void *)a, size, (void *)r->addr, r->size, (unsigned long long)r->nop_free,
                    r->count);
        r->state = SH_GONE; /* released by a slow path: its slot went back then */
    }
}

/* A share ended (a close that took effect): one fewer, if any was left. */
static void share_end(fz_dev_t *d, int i)
{
    share_t *r = &d->shares[i];
    if (r->count == 0)
        return;
    if (--r->count == 0 && r->state == SH_DEFERRED)
        r->state = SH_MAYBE;
}

/* The exporter's table and counters (vpmm_stats_t's ipc_exports and ipc_shared) agree with the
 * records. */
static void share_check(fz_t *z)
{
    fz_dev_t *d = &z->dev;
    uint64_t surely = 0, maybe = 0, shared = vpmm_i_share_live(z->pool);
    for (int i = 0; i < MAX_SHARES; i++) {
        const share_t *r = &d->shares[i];
        int fd;
        uint64_t nonce;
        uint32_t gen = 0, count;
        if (r->state == SH_MAYBE)
            maybe++;
        if (r->state != SH_LIVE && r->state != SH_DEFERRED)
            continue;
        surely++;
        count = vpmm_i_share_count(z->pool, r->slot);
        vpmm_i_share_table_info(z->pool, &fd, &nonce, r->slot, &gen);
        if (count != r->count || gen != r->gen)
            finding(z,
                    "the share slot %u of %p (%s) holds %u share(s) of use %u; expected %u of "
                    "use %u",
                    r->slot, (void *)r->addr, r->state == SH_LIVE ? "live" : "freed", count, gen,
                    r->count, r->gen);
    }
    if (z->pool->ipc_exports != d->exports || shared < surely || shared > surely + maybe)
        finding(z,
                "stats: ipc_exports %llu, ipc_shared %llu; expected %llu exports, between %llu "
                "and %llu allocations sharing",
                (unsigned long long)z->pool->ipc_exports, (unsigned long long)shared,
                (unsigned long long)d->exports, (unsigned long long)surely,
                (unsigned long long)(surely + maybe));
}

/* ---- EXPORT and UNSHARE -----------------------------------------------------------------------
 */

static int small_cap; /* the EXPORT being run passes a buffer too small: this many bytes */
static int want_small;

static void keep_handle(fz_dev_t *d, const unsigned char *b, size_t len, int share)
{
    ipc_handle_t *h;
    unsigned char *copy = malloc(len);
    if (copy == NULL) {
        fprintf(stderr, "fuzz_ops: out of host memory\n");
        abort();
    }
    memcpy(copy, b, len);
    if (d->nhandles < MAX_HANDLES) {
        h = &d->handles[d->nhandles++];
    } else {
        h = &d->handles[d->handle_at];
        d->handle_at = (d->handle_at + 1) % MAX_HANDLES;
        free(h->b);
    }
    *h = (ipc_handle_t){ copy, len, share };
}

/* vpmm_ipc_export of tracked allocation i (a buffer of the size it needs, or too small). */
static void export_live(fz_t *z, size_t i)
{
    fz_dev_t *d = &z->dev;
    live_t *l = &z->live[i];
    unsigned gp = pool_of_alloc(z, (uintptr_t)l->p);
    size_t need = VPMM_IPC_HANDLE_BYTES(l->size, z->page_size), len = 1, cap;
    unsigned char *buf = malloc(need);
    vpmm_ipc_header_t h;
    int si = l->share;
    snap_t before;
    vpmm_status_t st;

    if (buf == NULL)
        finding(z, "out of host memory");
    cap = want_small ? (size_t)small_cap : need;
    snap_take(z, &before);
    st = vpmm_ipc_export(z->pool, l->p, cap ? buf : NULL, cap, &len);
    if (gp != 0) {
        expect_status(z, "vpmm_ipc_export(a graph pool's)", st, S(VPMM_ERROR_NOT_SUPPORTED), 1);
    } else if (want_small) {
        expect_status(z, "vpmm_ipc_export(buffer too small)", st, S(VPMM_ERROR_INVALID_ARGUMENT),
                      1);
        if (len <= cap || len > need)
            finding(z, "vpmm_ipc_export with %zu bytes of buffer says it needs %zu (at most %zu)",
                    cap, len, need);
    } else {
        expect_status(z, "vpmm_ipc_export", st, S(VPMM_SUCCESS), 0);
    }
    if (st != VPMM_SUCCESS) {
        snap_same(z, &before, "vpmm_ipc_export");
        free(buf);
        return;
    }
    if (len < sizeof h + sizeof(vpmm_ipc_entry_t) || len > need ||
        (len - sizeof h) % sizeof(vpmm_ipc_entry_t) != 0)
        finding(z, "vpmm_ipc_export of %zu bytes wrote a handle of %zu bytes (at most %zu)",
                l->size, len, need);
    memcpy(&h, buf, sizeof h);
    if (h.pid != (int32_t)getpid() || h.size != rnd(l->size) || h.device != 0)
        finding(z, "vpmm_ipc_export's handle: pid %d, size %llu, device %d", (int)h.pid,
                (unsigned long long)h.size, (int)h.device);
    if (si >= 0) {
        share_t *r = &d->shares[si];
        if (r->slot != h.slot || r->gen != h.gen)
            finding(z, "%p exported again in slot %u use %u, before in slot %u use %u",
                    (void *)l->p, h.slot, h.gen, r->slot, r->gen);
        for (size_t k = 0; k < d->nhandles; k++)
            if (d->handles[k].share == si &&
                (d->handles[k].len != len || memcmp(d->handles[k].b, buf, len) != 0))
                finding(z, "%p exported twice gave different bytes", (void *)l->p);
    } else {
        si = share_free(d); /* there is one: checked before the call */
        l->share = si;
        d->shares[si] = (share_t){
            .state = SH_LIVE, .addr = (uintptr_t)l->p, .size = l->size, .slot = h.slot, .gen = h.gen
        };
    }
    d->shares[si].count++;
    d->exports++;
    exports_made++;
    keep_handle(d, buf, len, si);
    if (fz_verbose)
        fprintf(stderr, "    %p exported: slot %u use %u, %u share(s), %zu bytes of handle\n",
                (void *)l->p, h.slot, h.gen, d->shares[si].count, len);
    free(buf);
}

static vpmm_status_t call_export(fz_t *z, void *p)
{
    unsigned char buf[4096];
    size_t len = 1;
    vpmm_status_t st = vpmm_ipc_export(z->pool, p, buf, sizeof buf, &len);
    if (len != 1) /* a refused export leaves it untouched (the header's conventions) */
        finding(z, "vpmm_ipc_export of a bad pointer set the length to %zu", len);
    return st;
}

static int export_any(fz_t *z, uintptr_t a, int foreign)
{
    static const ptr_op_t op = { "vpmm_ipc_export", export_live, call_export };
    ptrdiff_t i = foreign ? -1 : live_find(z, a);
    if (i >= 0 && z->live[i].share < 0 && share_free(&z->dev) < 0)
        return 0; /* no record left to follow another exported allocation */
    return ptr_any(z, a, foreign, &op);
}

int op_export(fz_t *z)
{
    unsigned kind = rd8(z), v = rd16(z);
    uint32_t off = rd32(z);
    snap_t before;
    size_t len = 1;

    want_small = (kind & 0x40) != 0;
    small_cap = (int)(off % 64); /* under any handle's length (one header and one entry) */
    if ((kind & 0x80) == 0) {
        ptrdiff_t i = live_pick(z, v);
        if (i < 0 || (z->live[i].share < 0 && share_free(&z->dev) < 0))
            return 0;
        export_live(z, (size_t)i);
        return 1;
    }
    want_small = 0;
    kind = (kind & 127) % 7;
    if (kind != 0)
        return bad_target(z, kind, v, off, export_any);
    snap_take(z, &before);
    expect_status(z, "vpmm_ipc_export(NULL)", vpmm_ipc_export(z->pool, NULL, &len, 1, &len),
                  S(VPMM_ERROR_INVALID_ARGUMENT), 1);
    if (len != 1) /* untouched: only the handle's length, or the length lacking, is written */
        finding(z, "vpmm_ipc_export(NULL) set the length to %zu", len);
    snap_same(z, &before, "vpmm_ipc_export(NULL)");
    return 1;
}

/* vpmm_ipc_unshare of tracked allocation i: every share it has is over; nothing else changes. */
static void unshare_live(fz_t *z, size_t i)
{
    live_t *l = &z->live[i];
    snap_t before;
    snap_take(z, &before);
    expect_status(z, "vpmm_ipc_unshare", vpmm_ipc_unshare(z->pool, l->p), S(VPMM_SUCCESS), 1);
    snap_same(z, &before, "vpmm_ipc_unshare (changes no region nor statistic)");
    unshares_made++;
    if (l->share >= 0)
        z->dev.shares[l->share].count = 0;
}

static vpmm_status_t call_unshare(fz_t *z, void *p)
{
    return vpmm_ipc_unshare(z->pool, p);
}

static int unshare_any(fz_t *z, uintptr_t a, int foreign)
{
    static const ptr_op_t op = { "vpmm_ipc_unshare", unshare_live, call_unshare };
    return ptr_any(z, a, foreign, &op);
}

int op_unshare(fz_t *z)
{
    unsigned kind = rd8(z), v = rd16(z);
    uint32_t off = rd32(z);
    snap_t before;
    if ((kind & 0x80) == 0) {
        ptrdiff_t i = live_pick(z, v);
        if (i < 0)
            return 0;
        unshare_live(z, (size_t)i);
        return 1;
    }
    kind = (kind & 127) % 7;
    if (kind != 0)
        return bad_target(z, kind, v, off, unshare_any);
    snap_take(z, &before);
    expect_status(z, "vpmm_ipc_unshare(NULL)", vpmm_ipc_unshare(z->pool, NULL),
                  S(VPMM_ERROR_INVALID_ARGUMENT), 1);
    snap_same(z, &before, "vpmm_ipc_unshare(NULL)");
    return 1;
}

/* ---- the importer: OPEN and CLOSE -------------------------------------------------------------
 */

long dev_fd_count(void)
{
    long n = 0;
    DIR *dir = opendir("/proc/self/fd");
    if (dir == NULL)
        return -1;
    while (readdir(dir) != NULL)
        n++;
    closedir(dir);
    return n;
}

/* Whether this system refuses to pass descriptors (pidfd_getfd on the own pid): every open is
 * then refused with VPMM_ERROR_NOT_SUPPORTED. Asked once. */
static int ipc_refused(void)
{
    static int known = -1;
    if (known < 0) {
        long pidfd = syscall(SYS_pidfd_open, getpid(), 0u), fd = -1;
        if (pidfd >= 0)
            fd = syscall(SYS_pidfd_getfd, (int)pidfd, 2, 0u);
        known = fd < 0;
        if (fd >= 0)
            close((int)fd);
        if (pidfd >= 0)
            close((int)pidfd);
        if (known)
            fprintf(stderr, "fuzz_ops: this system refuses pidfd_getfd: every vpmm_ipc_open is "
                            "expected to fail with VPMM_ERROR_NOT_SUPPORTED\n");
    }
    return known;
}

static void importer_make(fz_t *z)
{
    fz_dev_t *d = &z->dev;
    vpmm_config_t cfg;
    vpmm_options_t opt;
    vpmm_host_options_t ho = { .granularity = z->granularity, .memory_limit = 16 * MiB };
    vpmm_status_t st;
    vpmm_config_init(&cfg);
    cfg.ignore_env = 1;
    cfg.backend = VPMM_BACKEND_HOST;
    cfg.page_size = z->page_size;
    cfg.va_size = VA_SIZE;
    if (vpmm_i_options_resolve(&cfg, &opt) != VPMM_SUCCESS)
        finding(z, "the importer's options");
    if (vpmm_host_open(&ho, &d->ihost) != VPMM_DRV_OK ||
        vpmm_fault_wrap(d->ihost, &d->ifault) != VPMM_DRV_OK)
        finding(z, "the importer's host node could not be opened");
    st = vpmm_a_pool_create_on(&opt, d->ifault, 0, &d->ipool);
    if (st != VPMM_SUCCESS)
        finding(z, "the importer's pool: %s", vpmm_status_name(st));
}

/* What the importer holds (a refused call must change none of it). */
typedef struct isnap {
    vpmm_stats_t st;
    vpmm_fault_live_t live;
    size_t opens, handles;
    long fds;
} isnap_t;

static isnap_t isnap(const fz_t *z)
{
    isnap_t s;
    memset(&s, 0, sizeof s);
    expect_status(z, "vpmm_get_stats(importer)", vpmm_get_stats(z->dev.ipool, &s.st),
                  S(VPMM_SUCCESS), 1);
    vpmm_fault_live(z->dev.ifault, &s.live);
    s.opens = vpmm_i_import_opens(z->dev.ipool);
    s.handles = z->dev.ipool->import_handles;
    s.fds = dev_fd_count();
    return s;
}

static void isnap_same(const fz_t *z, const isnap_t *a, const char *call)
{
    isnap_t b = isnap(z);
    if (memcmp(&a->st, &b.st, sizeof a->st) != 0 || memcmp(&a->live, &b.live, sizeof a->live) ||
        a->opens != b.opens || a->handles != b.handles || a->fds != b.fds)
        finding(z,
                "%s failed but changed the importer (imports %llu -> %llu, opens %zu -> %zu, "
                "driver handles %lld -> %lld, mappings %lld -> %lld, reservations %lld -> %lld, "
                "descriptors %ld -> %ld)",
                call, (unsigned long long)a->st.ipc_imports, (unsigned long long)b.st.ipc_imports,
                a->opens, b.opens, (long long)a->live.handles, (long long)b.live.handles,
                (long long)a->live.mappings, (long long)b.live.mappings,
                (long long)a->live.reservations, (long long)b.live.reservations, a->fds, b.fds);
}

/* The bytes the importer sees at q are the exporter's (record i): its live allocation's, or what
 * it held when freed while its shares are not over. 0 when nothing can be said. */
static const live_t *share_live(const fz_t *z, int i)
{
    const share_t *r = &z->dev.shares[i];
    ptrdiff_t k;
    if (r->state != SH_LIVE)
        return NULL;
    k = live_find(z, r->addr);
    if (k < 0 || z->live[k].share != i)
        finding(z, "the exported allocation %p is not tracked", (void *)r->addr);
    return &z->live[k];
}

static void data_check(const fz_t *z, const unsigned char *q, int i, const char *when)
{
    const share_t *r = &z->dev.shares[i];
    const live_t *l = share_live(z, i);
    if (l != NULL && !stamp_there(q, l->size, l->stamp))
        finding(z, "%s: the importer's %p does not read what the exporter's %p (%zu bytes) holds",
                when, (void *)q, (void *)l->p, l->size);
    if (l == NULL && dev_share_pending(z, i) && !stamp_there(q, r->size, r->stamp))
        finding(z,
                "%s: the importer's %p does not read what %p (%zu bytes) held when freed at "
                "operation %llu with its shares not over",
                when, (void *)q, (void *)r->addr, r->size, (unsigned long long)r->nop_free);
}

/* Moves the FAULT armed for this operation to the importer's driver. */
static void arm_importer(fz_t *z)
{
    if (!z->armed)
        return;
    vpmm_fault_clear(z->fault);
    arm_apply(z, z->dev.ifault);
}

int op_open(fz_t *z)
{
    fz_dev_t *d = &z->dev;
    unsigned hsel = rd8(z), kind = rd8(z) % 8;
    const ipc_handle_t *h;
    const share_t *r;
    unsigned char *bytes;
    size_t len;
    void *q = &not_null; /* must become NULL on failure */
    ptrdiff_t known = -1;
    isnap_t before;
    vpmm_status_t st;

    if (d->nhandles == 0 || (kind < 4 && d->nopens == MAX_OPENS))
        return 0;
    if (d->ipool == NULL)
        importer_make(z);
    arm_importer(z);
    h = &d->handles[hsel % d->nhandles];
    r = &d->shares[h->share];
    len = h->len;
    bytes = malloc(len);
    if (bytes == NULL)
        finding(z, "out of host memory");
    memcpy(bytes, h->b, len);
    switch (kind) {
    case 4:
        len--;
        break;
    case 5:
        bytes[0] ^= 1; /* the magic */
        break;
    case 6:
        bytes[offsetof(vpmm_ipc_header_t, version)] ^= 0x40;
        break;
    default:
        break;
    }
    for (size_t k = 0; k < d->nopens; k++)
        if (d->opens[k].share == h->share)
            known = (ptrdiff_t)k;
    before = isnap(z);
    st = vpmm_ipc_open(d->ipool, kind == 7 ? NULL : bytes, len, &q);
    free(bytes);
    if (fz_verbose)
        fprintf(stderr, "    handle of %p (%s, %u share(s)), %s: %p\n", (void *)r->addr,
                r->state == SH_LIVE       ? "live"
                : r->state == SH_DEFERRED ? "freed, deferred"
                                          : "freed",
                r->count, kind < 4 ? "as exported" : "corrupted", q);
    if (kind >= 4) {
        expect_status(z, "vpmm_ipc_open(not a handle)", st, S(VPMM_ERROR_INVALID_ARGUMENT), 1);
    } else if (known >= 0) {
        /* Open here already: one more open of the same mapping, no driver call. */
        expect_status(z, "vpmm_ipc_open(open already)", st, S(VPMM_SUCCESS), 1);
    } else if (ipc_refused()) {
        expect_status(z, "vpmm_ipc_open(pidfd_getfd refused)", st, S(VPMM_ERROR_NOT_SUPPORTED), 0);
    } else if (dev_share_pending(z, h->share)) {
        expect_status(z, "vpmm_ipc_open", st, S(VPMM_SUCCESS), 0);
    } else {
        /* Stale: its share is over, refused before any of its descriptors is taken. */
        expect_status(z, "vpmm_ipc_open(stale)", st, S(VPMM_ERROR_INVALID_ARGUMENT), 0);
    }
    if (st != VPMM_SUCCESS) {
        if (fz_verbose)
            fprintf(stderr, "    %s\n", vpmm_last_error());
        if (q != NULL)
            finding(z, "vpmm_ipc_open failed with %s but returned %p", vpmm_status_name(st), q);
        isnap_same(z, &before, "vpmm_ipc_open");
        return 1;
    }
    if (q == NULL)
        finding(z, "vpmm_ipc_open succeeded without a pointer");
    if (known >= 0 && q != d->opens[known].q)
        finding(z, "vpmm_ipc_open of a handle open already returned %p, before %p", q,
                (void *)d->opens[known].q);
    if (((uintptr_t)q - r->addr) % z->granularity != 0)
        finding(z, "vpmm_ipc_open returned %p for %p: not at the same place in its granule", q,
                (void *)r->addr);
    {
        isnap_t now = isnap(z);
        /* The importer keeps no descriptor of its own: only the driver's imported handles hold
         * one each (the host backend's). */
        if (now.fds - before.fds != (long)(now.handles - before.handles))
            finding(z, "vpmm_ipc_open: descriptors %ld -> %ld while imported handles %zu -> %zu",
                    before.fds, now.fds, before.handles, now.handles);
        if (now.opens != before.opens + 1)
            finding(z, "vpmm_ipc_open succeeded: opens %zu -> %zu", before.opens, now.opens);
    }
    d->opens[d->nopens++] = (ipc_open_t){ q, h->share };
    opens_made++;
    data_check(z, q, h->share, "vpmm_ipc_open");
    {
        /* Written through the importer's pointer, read through the exporter's. */
        live_t *l = (live_t *)share_live(z, h->share);
        if (l != NULL) {
            l->stamp = tmix64(l->stamp ^ (z->nop << 20) ^ 0x1b5);
            stamp_put(q, l->size, l->stamp);
            stamp_check(z, l, "written through the importer's pointer");
        }
    }
    return 1;
}

static int is_open(const fz_dev_t *d, uintptr_t q)
{
    for (size_t k = 0; k < d->nopens; k++)
        if ((uintptr_t)d->opens[k].q == q)
            return 1;
    return 0;
}

int op_close(fz_t *z)
{
    fz_dev_t *d = &z->dev;
    unsigned sel = rd8(z);
    unsigned char local[64];
    isnap_t before, now;
    vpmm_status_t st;
    size_t k;

    if (d->ipool == NULL)
        return 0; /* nothing was ever opened */
    if (sel & 0x80) {
        void *bad;
        switch ((sel & 127) % 3) {
        case 0:
            bad = NULL;
            break;
        case 1:
            bad = &local[sel % sizeof local];
            break;
        default:
            if (d->closed == 0 || is_open(d, d->closed))
                return 0;
            bad = (void *)d->closed;
            break;
        }
        arm_importer(z);
        before = isnap(z);
        st = vpmm_ipc_close(d->ipool, bad);
        expect_status(z, bad == NULL ? "vpmm_ipc_close(NULL)" : "vpmm_ipc_close(not open)", st,
                      S(bad == NULL ? VPMM_ERROR_INVALID_ARGUMENT : VPMM_ERROR_FOREIGN_POINTER), 1);
        isnap_same(z, &before, "vpmm_ipc_close(bad pointer)");
        return 1;
    }
    if (d->nopens == 0)
        return 0;
    arm_importer(z);
    k = sel % d->nopens;
    data_check(z, d->opens[k].q, d->opens[k].share, "before vpmm_ipc_close");
    before = isnap(z);
    st = vpmm_ipc_close(d->ipool, d->opens[k].q);
    expect_status(z, "vpmm_ipc_close", st, S(VPMM_SUCCESS), 0);
    now = isnap(z);
    if (now.opens + 1 == before.opens) {
        /* It took effect (a driver failure after it, in the last close's unmapping, is still
         * reported): its share is over. */
        int i = d->opens[k].share;
        uintptr_t q = (uintptr_t)d->opens[k].q;
        d->opens[k] = d->opens[--d->nopens];
        if (!is_open(d, q))
            d->closed = q;
        share_end(d, i);
        closes_made++;
        if (now.fds - before.fds != (long)(now.handles - before.handles))
            finding(z, "vpmm_ipc_close: descriptors %ld -> %ld while imported handles %zu -> %zu",
                    before.fds, now.fds, before.handles, now.handles);
    } else if (st == VPMM_SUCCESS || now.opens != before.opens) {
        finding(z, "vpmm_ipc_close returned %s; opens %zu -> %zu", vpmm_status_name(st),
                before.opens, now.opens);
    } else {
        isnap_same(z, &before, "vpmm_ipc_close");
    }
    return 1;
}

/* The importer: its pool's invariants, its driver holds what it believes, the opens counted. */
static void importer_check(fz_t *z)
{
    fz_dev_t *d = &z->dev;
    size_t bad = vpmm_pool_check(d->ipool, NULL);
    if (bad != 0) {
        vpmm_pool_check(d->ipool, stderr);
        finding(z, "vpmm_pool_check(importer): %zu invariant(s) violated", bad);
    }
    bad = vpmm_host_check(d->ihost, 0);
    if (bad != 0) {
        vpmm_host_check(d->ihost, 1);
        finding(z, "vpmm_host_check(importer): %zu invariant(s) violated", bad);
    }
    driver_matches_pool(z, d->ipool, d->ifault);
    if (vpmm_i_import_opens(d->ipool) != d->nopens)
        finding(z, "the importer counts %zu opens, %zu were made and not closed",
                vpmm_i_import_opens(d->ipool), d->nopens);
}

/* ---- an input's life --------------------------------------------------------------------------
 */

void dev_setup(fz_t *z)
{
    fz_dev_t *d = &z->dev;
    int device = -1;
    expect_status(z, "vpmm_pool_device", vpmm_pool_device(z->pool, &device), S(VPMM_SUCCESS), 1);
    if (device != 0)
        finding(z, "vpmm_pool_device says %d, the pool is on device 0", device);
    if (d->devices > 1) {
        if (vpmm_host_open_device(z->host, 1, &d->peer) != VPMM_DRV_OK)
            finding(z, "vpmm_host_open_device(1) failed");
        for (int i = 0; i < NPEER; i++) {
            d->pc[i] = vpmm_host_stream_create(d->peer);
            if (d->pc[i] == NULL)
                finding(z, "vpmm_host_stream_create on device 1 failed");
        }
    }
    /* The hook hears of what comes after it: the mirror starts from the walk (preallocated
     * pages). */
    expect_status(z, "vpmm_pool_set_segment_hook", vpmm_pool_set_segment_hook(z->pool, seg_hook, z),
                  S(VPMM_SUCCESS), 1);
    expect_status(z, "vpmm_pool_walk_segments", vpmm_pool_walk_segments(z->pool, seg_seed, d),
                  S(VPMM_SUCCESS), 1);
}

void dev_check(fz_t *z)
{
    fz_dev_t *d = &z->dev;
    seg_check(z);
    if (d->granted)
        reach_check(z, "after the operation");
    share_check(z);
    if (d->ipool != NULL)
        importer_check(z);
}

void dev_cleanup(fz_t *z)
{
    fz_dev_t *d = &z->dev;
    vpmm_fault_live_t live;
    vpmm_host_counts_t hc;
    if (d->ipool == NULL)
        return;
    vpmm_fault_clear(d->ifault);
    if (d->nopens > 0) {
        isnap_t before = isnap(z);
        expect_status(z, "vpmm_pool_destroy(importer with opens)", vpmm_pool_destroy(d->ipool),
                      S(VPMM_ERROR_POOL_BUSY), 1);
        isnap_same(z, &before, "vpmm_pool_destroy(importer with opens)");
    }
    /* The exporter has freed everything: what is still shared kept its bytes. */
    while (d->nopens > 0) {
        ipc_open_t *o = &d->opens[d->nopens - 1];
        data_check(z, o->q, o->share, "cleanup");
        expect_status(z, "vpmm_ipc_close(cleanup)", vpmm_ipc_close(d->ipool, o->q), S(VPMM_SUCCESS),
                      1);
        share_end(d, o->share);
        d->nopens--;
    }
    importer_check(z);
    share_check(z);
    expect_status(z, "vpmm_pool_destroy(importer)", vpmm_pool_destroy(d->ipool), S(VPMM_SUCCESS),
                  1);
    d->ipool = NULL;
    vpmm_fault_live(d->ifault, &live);
    vpmm_host_counts(d->ihost, &hc);
    if (live.handles || live.mappings || live.reservations || live.events || hc.handles ||
        hc.imported || hc.mappings || hc.reservations || hc.events)
        finding(z,
                "leak after the importer's vpmm_pool_destroy: handles %lld, mappings %lld, "
                "reservations %lld, events %lld (host: %zu own and %zu imported handles, %zu "
                "mappings, %zu reservations, %zu events)",
                (long long)live.handles, (long long)live.mappings, (long long)live.reservations,
                (long long)live.events, hc.handles, hc.imported, hc.mappings, hc.reservations,
                hc.events);
    d->ifault->close(d->ifault);
    d->ifault = d->ihost = NULL;
}

void dev_after_destroy(fz_t *z)
{
    fz_dev_t *d = &z->dev;
    if (d->seg_broken)
        finding(z, "segment hook: %s", d->seg_why);
    if (d->nseg != 0)
        finding(z, "after vpmm_pool_destroy the segment hook's events leave %zu segments", d->nseg);
    free(d->seg);
    d->seg = NULL;
    d->nseg = d->segcap = 0;
    for (size_t k = 0; k < d->nhandles; k++)
        free(d->handles[k].b);
    d->nhandles = 0;
    if (d->peer != NULL)
        d->peer->close(d->peer);
    d->peer = NULL;
}

void dev_fds_check(fz_t *z)
{
    long now = dev_fd_count();
    if (now != z->dev.fds)
        finding(z,
                "%ld descriptors open after the input, %ld before: the exporter's or the "
                "importer's leaked",
                now, z->dev.fds);
}

void dev_report(void)
{
    if (grants_made + exports_made + seg_events == 0)
        return;
    fprintf(stderr,
            "fuzz_ops: %llu grants, %llu exports, %llu opens, %llu closes, %llu unshares, %llu "
            "segment events\n",
            (unsigned long long)grants_made, (unsigned long long)exports_made,
            (unsigned long long)opens_made, (unsigned long long)closes_made,
            (unsigned long long)unshares_made, (unsigned long long)seg_events);
}
