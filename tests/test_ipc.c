/*
 * test_ipc.c — sharing allocations with other processes (vpmm_ipc_export / vpmm_ipc_open /
 * vpmm_ipc_close: src/core/share.c, share_table.c, import.c), on the host backend, whose handles
 * export as memfd descriptors that another process takes with pidfd_getfd (driver_host.h).
 *
 * In one process (two pools: exporter and importer, each its own emulated node) and across fork:
 * data written through one mapping is read through the other; the same allocation exported twice
 * gives the same bytes and opened twice maps once; the lifetime rule — memory another process may
 * map is not handed out again while shared — with the exporter freeing first and the importer
 * closing first; 10,000 shares and 1,000 distinct ones without descriptor growth; refusals that
 * change nothing (a buffer too small, bad or stale bytes, a graph pool's allocation, a pool that
 * cannot export, a system that refuses to pass descriptors: a seccomp filter in a child); a
 * failure injected at every driver call of export and open leaks nothing; the pool check (I11,
 * I14) after every step.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include <dirent.h>
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "graph_test_util.h"
#include "test_pattern.h"

#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

/* Opening takes descriptors with pidfd_getfd (Linux 5.6); valgrind does not know the call
 * (ENOSYS): there the tests that open skip, saying why. */
static void require_pidfd(void)
{
    long fd = syscall(SYS_pidfd_open, getpid(), 0u);
    if (fd >= 0) {
        close((int)fd);
        return;
    }
    print_message("skipped: pidfd_open is not available here (%s): vpmm_ipc_open cannot run\n",
                  strerror(errno));
    skip();
}

#define HANDLE_CAP 4096

typedef struct handle {
    unsigned char b[HANDLE_CAP];
    size_t len;
} handle_t;

static handle_t export_ok(tpool_t *t, const void *p)
{
    handle_t h;
    vpmm_status_t st = vpmm_ipc_export(t->pool, p, h.b, sizeof h.b, &h.len);
    if (st != VPMM_SUCCESS)
        fail_msg("vpmm_ipc_export: %s (%s)", vpmm_status_name(st), vpmm_last_error());
    CHECK_POOL(t->pool);
    return h;
}

static void *open_ok(tpool_t *t, const handle_t *h)
{
    void *q = NULL;
    vpmm_status_t st = vpmm_ipc_open(t->pool, h->b, h->len, &q);
    if (st != VPMM_SUCCESS)
        fail_msg("vpmm_ipc_open: %s (%s)", vpmm_status_name(st), vpmm_last_error());
    assert_non_null(q);
    CHECK_POOL(t->pool);
    return q;
}

static void close_ok(tpool_t *t, void *q)
{
    assert_int_equal(vpmm_ipc_close(t->pool, q), VPMM_SUCCESS);
    CHECK_POOL(t->pool);
}

/* A slow path: what releases deferred frees (every trim polls; this one gives nothing back). */
static void slow_path(tpool_t *t)
{
    assert_int_equal(vpmm_trim(t->pool, SIZE_MAX, NULL), VPMM_SUCCESS);
    CHECK_POOL(t->pool);
}

static size_t open_fds(void)
{
    size_t n = 0;
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n;
}

static void open_two(tpool_t *exporter, tpool_t *importer)
{
    tpool_open(exporter, &(tpool_params_t){ .small_bytes = 1 });
    tpool_open(importer, &(tpool_params_t){ .small_bytes = 1 });
}

/* Written through the exporter's address, read through the importer's, and back. */
static void test_export_open_aliases(void **state)
{
    tpool_t a, b;
    handle_t h;
    void *p, *q;
    vpmm_stats_t sa, sb;
    (void)state;
    require_pidfd();
    open_two(&a, &b);
    p = tmalloc(a.pool, 3 * MiB, NULL);
    tpattern_fill(p, 3 * MiB, 7);
    h = export_ok(&a, p);
    assert_true(h.len <= VPMM_IPC_HANDLE_BYTES(3 * MiB, 2 * MiB));
    q = open_ok(&b, &h);
    assert_true(tpattern_same(q, 3 * MiB, 7));
    tpattern_fill(q, 3 * MiB, 9);
    assert_true(tpattern_same(p, 3 * MiB, 9));
    sa = tstats(a.pool);
    sb = tstats(b.pool);
    assert_int_equal(sa.ipc_exports, 1);
    assert_int_equal(sa.ipc_shared, 1);
    assert_int_equal(sb.ipc_imports, 1);
    assert_int_equal(sb.ipc_imported_bytes, 4 * MiB); /* the two whole pages */
    assert_int_equal(sb.live_allocs, 0);              /* imports are not the pool's memory */
    /* An imported address is not the importer's allocation. */
    assert_int_equal(vpmm_free(b.pool, q), VPMM_ERROR_FOREIGN_POINTER);
    close_ok(&b, q);
    assert_int_equal(tstats(b.pool).ipc_imports, 0);
    tfree(a.pool, p);
    assert_int_equal(tstats(a.pool).ipc_shared, 0); /* every share over: the slot went back */
    tpool_close(&b);
    tpool_close(&a);
}

/* The same allocation exported twice: the same bytes; opened twice: one mapping, one pointer. */
static void test_same_allocation_maps_once(void **state)
{
    tpool_t a, b;
    handle_t h1, h2;
    void *p, *q1, *q2;
    vpmm_host_counts_t before, during;
    (void)state;
    require_pidfd();
    open_two(&a, &b);
    p = tmalloc(a.pool, 5 * MiB, NULL);
    h1 = export_ok(&a, p);
    h2 = export_ok(&a, p);
    assert_int_equal(h1.len, h2.len);
    assert_memory_equal(h1.b, h2.b, h1.len);
    vpmm_host_counts(b.host, &before);
    q1 = open_ok(&b, &h1);
    vpmm_host_counts(b.host, &during);
    q2 = open_ok(&b, &h2);
    assert_ptr_equal(q1, q2);
    {
        vpmm_host_counts_t after;
        vpmm_host_counts(b.host, &after);
        assert_int_equal(after.mappings, during.mappings); /* the second open mapped nothing */
        assert_int_equal(during.mappings, before.mappings + 3);
    }
    assert_int_equal(tstats(b.pool).ipc_imports, 1);
    close_ok(&b, q1);
    assert_int_equal(tstats(b.pool).ipc_imports, 1); /* one open left */
    close_ok(&b, q2);
    assert_int_equal(tstats(b.pool).ipc_imports, 0);
    {
        vpmm_host_counts_t after;
        vpmm_host_counts(b.host, &after);
        assert_int_equal(after.mappings, before.mappings);
        assert_int_equal(after.reservations, before.reservations);
    }
    assert_int_equal(vpmm_ipc_close(b.pool, q1), VPMM_ERROR_FOREIGN_POINTER); /* closed */
    tfree(a.pool, p);
    tpool_close(&b);
    tpool_close(&a);
}

/* Two allocations on the same pages share the importer's mapping, each with its own share. */
static void test_neighbours_share_a_mapping(void **state)
{
    tpool_t a, b;
    handle_t hx, hy;
    void *x, *y, *qx, *qy;
    (void)state;
    require_pidfd();
    open_two(&a, &b);
    x = tmalloc(a.pool, 1 * MiB, NULL);
    y = tmalloc(a.pool, 1 * MiB, NULL); /* same page */
    hx = export_ok(&a, x);
    hy = export_ok(&a, y);
    qx = open_ok(&b, &hx);
    qy = open_ok(&b, &hy);
    assert_int_equal((char *)qy - (char *)qx, (char *)y - (char *)x);
    assert_int_equal(tstats(b.pool).ipc_imports, 1);
    assert_int_equal(tstats(a.pool).ipc_shared, 2);
    close_ok(&b, qx);
    tfree(a.pool, x); /* x's share is over: freed at once */
    assert_int_equal(tstats(a.pool).ipc_shared, 1);
    close_ok(&b, qy);
    tfree(a.pool, y);
    assert_int_equal(tstats(a.pool).ipc_shared, 0);
    tpool_close(&b);
    tpool_close(&a);
}

/* The exporter frees first: the memory stays out of every free list until the importer closes,
 * and what the importer reads is still the exporter's data. */
static void test_exporter_frees_first(void **state)
{
    tpool_t a, b;
    handle_t h;
    void *p, *q, *r;
    (void)state;
    require_pidfd();
    open_two(&a, &b);
    p = tmalloc(a.pool, 4 * MiB, NULL);
    tpattern_fill(p, 4 * MiB, 3);
    h = export_ok(&a, p);
    q = open_ok(&b, &h);
    tfree(a.pool, p);
    assert_int_equal(tregion_of(a.pool, p).state, VPMM_REGION_FREE);
    assert_false(tregion_of(a.pool, p).ready);
    assert_int_equal(tstats(a.pool).ipc_shared, 1);
    /* Nobody gets it, not through a slow path, not by defragmentation or trim. */
    r = tmalloc(a.pool, 4 * MiB, NULL);
    assert_ptr_not_equal(r, p);
    tpattern_fill(r, 4 * MiB, 11);
    slow_path(&a);
    tfree(a.pool, r);
    {
        void *big = tmalloc(a.pool, 8 * MiB, NULL); /* may gather r's pages, never p's */
        tpattern_fill(big, 8 * MiB, 13);
        assert_true(tpattern_same(q, 4 * MiB, 3));
        tfree(a.pool, big);
    }
    assert_true(tpattern_same(q, 4 * MiB, 3));
    /* The importer is done: a slow path releases it; the exporter takes it back. */
    close_ok(&b, q);
    slow_path(&a);
    assert_int_equal(tstats(a.pool).ipc_shared, 0);
    r = tmalloc(a.pool, 4 * MiB, NULL);
    assert_ptr_equal(r, p);
    tfree(a.pool, r);
    tpool_close(&b);
    tpool_close(&a);
}

/* The importer closes first: the free is an ordinary one. */
static void test_importer_closes_first(void **state)
{
    tpool_t a, b;
    handle_t h;
    void *p, *q, *r;
    (void)state;
    require_pidfd();
    open_two(&a, &b);
    p = tmalloc(a.pool, 4 * MiB, NULL);
    h = export_ok(&a, p);
    q = open_ok(&b, &h);
    close_ok(&b, q);
    tfree(a.pool, p);
    assert_true(tregion_of(a.pool, p).state == VPMM_REGION_FREE);
    r = tmalloc(a.pool, 4 * MiB, NULL); /* its own stream takes it back at once */
    assert_ptr_equal(r, p);
    tfree(a.pool, r);
    assert_int_equal(tstats(a.pool).ipc_shared, 0);
    tpool_close(&b);
    tpool_close(&a);
}

/* vpmm_ipc_unshare: the shares not closed end at once (the caller knows nobody uses the memory);
 * the free is ordinary, a later close ends nothing of the next use of the slot, and the handle is
 * stale. */
static void test_unshare(void **state)
{
    tpool_t a, b;
    handle_t h, h2;
    void *p, *q, *r;
    (void)state;
    require_pidfd();
    open_two(&a, &b);
    p = tmalloc(a.pool, 4 * MiB, NULL);
    h = export_ok(&a, p);
    (void)export_ok(&a, p); /* a second share, never opened (a consumer's cache hit) */
    q = open_ok(&b, &h);
    assert_int_equal(vpmm_ipc_unshare(a.pool, p), VPMM_SUCCESS);
    CHECK_POOL(a.pool);
    tfree(a.pool, p);
    assert_int_equal(tstats(a.pool).ipc_shared, 0); /* ordinary: the slot went back */
    r = tmalloc(a.pool, 4 * MiB, NULL);
    assert_ptr_equal(r, p);
    h2 = export_ok(&a, r); /* the slot's next use */
    close_ok(&b, q);       /* ends nothing of r's share */
    assert_int_equal(tstats(a.pool).ipc_shared, 1);
    {
        void *q2 = open_ok(&b, &h2);
        close_ok(&b, q2);
    }
    assert_int_equal(vpmm_ipc_open(b.pool, h.b, h.len, &q), VPMM_ERROR_INVALID_ARGUMENT);
    /* Bad pointers and a never-exported allocation. */
    assert_int_equal(vpmm_ipc_unshare(a.pool, (char *)r + 256), VPMM_ERROR_INTERIOR_POINTER);
    assert_int_equal(vpmm_ipc_unshare(NULL, r), VPMM_ERROR_INVALID_ARGUMENT);
    tfree(a.pool, r);
    assert_int_equal(vpmm_ipc_unshare(a.pool, r), VPMM_ERROR_DOUBLE_FREE);
    r = tmalloc(a.pool, 1 * MiB, NULL);
    assert_int_equal(vpmm_ipc_unshare(a.pool, r), VPMM_SUCCESS);
    tfree(a.pool, r);
    tpool_close(&b);
    tpool_close(&a);
}

/* 10,000 shares of one allocation, then 1,000 allocations shared once each: descriptors stay put
 * (the exporter keeps one per handle while the handle lives; the importer keeps none). */
static void test_many_shares_no_descriptor_growth(void **state)
{
    tpool_t a, b;
    void *p;
    size_t fds;
    (void)state;
    require_pidfd();
    open_two(&a, &b);
    p = tmalloc(a.pool, 6 * MiB, NULL);
    {
        handle_t h = export_ok(&a, p);
        close_ok(&b, open_ok(&b, &h));
    }
    fds = open_fds();
    for (int i = 0; i < 10000; i++) {
        handle_t h;
        void *q = NULL;
        assert_int_equal(vpmm_ipc_export(a.pool, p, h.b, sizeof h.b, &h.len), VPMM_SUCCESS);
        assert_int_equal(vpmm_ipc_open(b.pool, h.b, h.len, &q), VPMM_SUCCESS);
        assert_int_equal(vpmm_ipc_close(b.pool, q), VPMM_SUCCESS);
    }
    CHECK_POOL(a.pool);
    CHECK_POOL(b.pool);
    assert_int_equal(open_fds(), fds);
    assert_int_equal(tstats(a.pool).ipc_exports, 10001);
    tfree(a.pool, p);

    /* Distinct allocations: one descriptor per exported handle, all closed once the handles go. */
    fds = open_fds();
    for (int i = 0; i < 1000; i++) {
        void *x = tmalloc(a.pool, 2 * MiB, NULL);
        handle_t h = export_ok(&a, x);
        close_ok(&b, open_ok(&b, &h));
        tfree(a.pool, x);
    }
    assert_true(open_fds() <= fds + 4); /* the pages the pool still holds, exported */
    assert_int_equal(vpmm_trim(a.pool, 0, NULL), VPMM_SUCCESS);
    assert_true(open_fds() <= fds + 1); /* the share table's, created by the first export */
    tpool_close(&b);
    tpool_close(&a);
    assert_true(open_fds() <= fds);
}

/* Refusals change nothing. */
static void test_refusals(void **state)
{
    tpool_t a, b;
    handle_t h;
    void *p, *q = (void *)1;
    tsnap_t sa, sb;
    size_t need = 0;
    (void)state;
    require_pidfd();
    open_two(&a, &b);
    p = tmalloc(a.pool, 3 * MiB, NULL);
    sa = tsnap(a.pool);
    /* A buffer too small: the length needed, no share counted. */
    assert_int_equal(vpmm_ipc_export(a.pool, p, h.b, 16, &need), VPMM_ERROR_INVALID_ARGUMENT);
    assert_true(need > 16 && need <= VPMM_IPC_HANDLE_BYTES(3 * MiB, 2 * MiB));
    assert_int_equal(vpmm_ipc_export(a.pool, p, NULL, 0, &need), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(tstats(a.pool).ipc_exports, 0);
    assert_int_equal(tstats(a.pool).ipc_shared, 0);
    /* Bad pointers: vpmm_free's statuses. */
    assert_int_equal(vpmm_ipc_export(a.pool, (char *)p + 256, h.b, sizeof h.b, &h.len),
                     VPMM_ERROR_INTERIOR_POINTER);
    assert_int_equal(vpmm_ipc_export(a.pool, &h, h.b, sizeof h.b, &h.len),
                     VPMM_ERROR_FOREIGN_POINTER);
    assert_int_equal(vpmm_ipc_export(NULL, p, h.b, sizeof h.b, &h.len),
                     VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_ipc_export(a.pool, NULL, h.b, sizeof h.b, &h.len),
                     VPMM_ERROR_INVALID_ARGUMENT);
    {
        tsnap_t now = tsnap(a.pool);
        assert_snap_equal(&sa, &now);
    }

    h = export_ok(&a, p);
    sb = tsnap(b.pool);
    /* Bytes that are not a handle: too short, wrong magic, wrong version, wrong length, bad
     * entries; and NULLs. */
    {
        handle_t bad = h;
        assert_int_equal(vpmm_ipc_open(b.pool, bad.b, 10, &q), VPMM_ERROR_INVALID_ARGUMENT);
        assert_null(q);
        bad.b[0] ^= 1;
        assert_int_equal(vpmm_ipc_open(b.pool, bad.b, bad.len, &q), VPMM_ERROR_INVALID_ARGUMENT);
        bad = h;
        bad.b[8] ^= 0x40; /* version */
        assert_int_equal(vpmm_ipc_open(b.pool, bad.b, bad.len, &q), VPMM_ERROR_INVALID_ARGUMENT);
        assert_int_equal(vpmm_ipc_open(b.pool, h.b, h.len - 1, &q), VPMM_ERROR_INVALID_ARGUMENT);
        bad = h;
        memset(bad.b + 64 + 8, 0, 8); /* the first handle's serial */
        assert_int_equal(vpmm_ipc_open(b.pool, bad.b, bad.len, &q), VPMM_ERROR_INVALID_ARGUMENT);
        bad = h;
        memset(bad.b + 64, 0x7f, 4); /* a descriptor the exporter does not have */
        assert_int_equal(vpmm_ipc_open(b.pool, bad.b, bad.len, &q), VPMM_ERROR_INVALID_ARGUMENT);
        assert_non_null(strstr(vpmm_last_error(), "not open"));
        assert_int_equal(vpmm_ipc_open(b.pool, NULL, h.len, &q), VPMM_ERROR_INVALID_ARGUMENT);
        assert_int_equal(vpmm_ipc_open(b.pool, h.b, h.len, NULL), VPMM_ERROR_INVALID_ARGUMENT);
        assert_int_equal(vpmm_ipc_close(b.pool, NULL), VPMM_ERROR_INVALID_ARGUMENT);
        assert_int_equal(vpmm_ipc_close(b.pool, p), VPMM_ERROR_FOREIGN_POINTER);
    }
    {
        tsnap_t now = tsnap(b.pool);
        assert_snap_equal(&sb, &now);
    }
    /* A share that is over is stale: opening its bytes again is refused. */
    q = open_ok(&b, &h);
    close_ok(&b, q);
    assert_int_equal(vpmm_ipc_open(b.pool, h.b, h.len, &q), VPMM_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(vpmm_last_error(), "stale"));
    CHECK_POOL(b.pool);
    tfree(a.pool, p);
    tpool_close(&b);
    tpool_close(&a);
}

/* A graph pool's allocations and a pool that cannot export are refused. */
static void test_not_exportable(void **state)
{
    tpool_t a;
    handle_t h;
    void *p;
    vpmm_graph_pool_t *gp;
    (void)state;
    tpool_open(&a, &(tpool_params_t){ .not_exportable = 1 });
    p = tmalloc(a.pool, 1 * MiB, NULL);
    assert_int_equal(vpmm_ipc_export(a.pool, p, h.b, sizeof h.b, &h.len), VPMM_ERROR_NOT_SUPPORTED);
    assert_int_equal(tstats(a.pool).ipc_shared, 0);
    tfree(a.pool, p);
    tpool_close(&a);

#if VPMM_HAVE_GRAPHS
    tpool_open(&a, NULL);
    assert_int_equal(vpmm_graph_pool_create(a.pool, &gp), VPMM_SUCCESS);
    assert_int_equal(vpmm_graph_pool_malloc(gp, 1 * MiB, NULL, &p), VPMM_SUCCESS);
    assert_int_equal(vpmm_ipc_export(a.pool, p, h.b, sizeof h.b, &h.len), VPMM_ERROR_NOT_SUPPORTED);
    assert_non_null(strstr(vpmm_last_error(), "graph pool"));
    CHECK_POOL(a.pool);
    tfree(a.pool, p);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    tpool_close(&a);
#else
    (void)gp;
#endif
}

/* A driver failure at any call of an export or an open leaves both pools as they were, with
 * nothing held by the driver that the pools do not know of; the next try works. */
static void test_faults_leak_nothing(void **state)
{
    (void)state;
    require_pidfd();
    for (uint64_t k = 1;; k++) {
        tpool_t a, b;
        handle_t h;
        void *p, *q = NULL;
        vpmm_fault_live_t la, lb, la2, lb2;
        vpmm_status_t st;
        int injected;
        open_two(&a, &b);
        p = tmalloc(a.pool, 5 * MiB, NULL);
        vpmm_fault_live(a.fault, &la);
        vpmm_fault_live(b.fault, &lb);
        vpmm_fault_fail_any_nth(a.fault, k, VPMM_DRV_ERROR);
        st = vpmm_ipc_export(a.pool, p, h.b, sizeof h.b, &h.len);
        injected = tfault_settle(a.fault);
        CHECK_POOL(a.pool);
        if (st != VPMM_SUCCESS) {
            assert_true(injected);
            assert_int_equal(tstats(a.pool).ipc_shared, 0);
            h = export_ok(&a, p);
        }
        vpmm_fault_fail_any_nth(b.fault, k, VPMM_DRV_ERROR);
        st = vpmm_ipc_open(b.pool, h.b, h.len, &q);
        injected |= tfault_settle(b.fault);
        CHECK_POOL(b.pool);
        vpmm_fault_live(b.fault, &lb2);
        if (st != VPMM_SUCCESS) {
            assert_null(q);
            assert_int_equal(lb2.handles, lb.handles);
            assert_int_equal(lb2.mappings, lb.mappings);
            assert_int_equal(lb2.reservations, lb.reservations);
            assert_int_equal(tstats(b.pool).ipc_imports, 0);
            q = open_ok(&b, &h); /* the share was not taken: it opens now */
        }
        close_ok(&b, q);
        tfree(a.pool, p);
        vpmm_fault_live(a.fault, &la2);
        assert_int_equal(la2.reservations, la.reservations);
        tpool_close(&b);
        tpool_close(&a);
        if (!injected)
            break; /* past the last driver call of either */
    }
}

/* Memory of a device the importer's device cannot reach is refused, nothing mapped. */
static void test_open_unreachable_device(void **state)
{
    tpool_t a, b;
    handle_t h;
    void *p, *q = (void *)1;
    tsnap_t before, after;
    (void)state;
    tpool_open(&a, &(tpool_params_t){ .devices = 3, .isolated = 4, .small_bytes = 1 });
    tpool_open_sibling(&b, &a, 2, &(tpool_params_t){ .small_bytes = 1 }); /* the isolated one */
    p = tmalloc(b.pool, 2 * MiB, NULL);
    h = export_ok(&b, p);
    before = tsnap(a.pool);
    assert_int_equal(vpmm_ipc_open(a.pool, h.b, h.len, &q), VPMM_ERROR_NOT_SUPPORTED);
    assert_null(q);
    assert_non_null(strstr(vpmm_last_error(), "cannot reach"));
    after = tsnap(a.pool);
    assert_snap_equal(&before, &after);
    CHECK_POOL(a.pool);
    tfree(b.pool, p);
    tpool_close(&b);
    tpool_close(&a);
}

/* The importer's pool cannot go while an open is not closed. */
static void test_destroy_with_open_import(void **state)
{
    tpool_t a, b;
    handle_t h;
    void *p, *q;
    (void)state;
    require_pidfd();
    open_two(&a, &b);
    p = tmalloc(a.pool, 2 * MiB, NULL);
    h = export_ok(&a, p);
    q = open_ok(&b, &h);
    assert_int_equal(vpmm_pool_destroy(b.pool), VPMM_ERROR_POOL_BUSY);
    CHECK_POOL(b.pool);
    close_ok(&b, q);
    tfree(a.pool, p);
    tpool_close(&b);
    tpool_close(&a);
}

/* The exporter's pool may go while another process maps its memory: the mapping keeps it. */
static void test_exporter_destroyed_first(void **state)
{
    tpool_t a, b;
    handle_t h;
    void *p, *q;
    (void)state;
    require_pidfd();
    open_two(&a, &b);
    p = tmalloc(a.pool, 3 * MiB, NULL);
    tpattern_fill(p, 3 * MiB, 21);
    h = export_ok(&a, p);
    q = open_ok(&b, &h);
    tfree(a.pool, p); /* deferred: shared */
    tpool_close(&a);
    assert_true(tpattern_same(q, 3 * MiB, 21));
    close_ok(&b, q);
    tpool_close(&b);
}

/* ---- across processes ------------------------------------------------------------------------ */

/* Runs child(arg) in a forked process with a fresh importer pool; returns its exit status. */
static int in_child(int (*child)(tpool_t *b, void *arg), void *arg)
{
    pid_t pid = fork();
    int status = 0;
    assert_true(pid >= 0);
    if (pid == 0) {
        tpool_t b;
        int rc;
        tpool_open(&b, &(tpool_params_t){ .small_bytes = 1 });
        rc = child(&b, arg);
        if (vpmm_pool_check(b.pool, stderr) != 0)
            rc = 90;
        _exit(rc);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

typedef struct cross {
    handle_t h;
    int to_parent[2], to_child[2];
} cross_t;

/* The child opens the parent's allocation, checks it, writes its own pattern, closes. */
static int child_writes(tpool_t *b, void *arg)
{
    cross_t *x = arg;
    void *q = NULL;
    if (vpmm_ipc_open(b->pool, x->h.b, x->h.len, &q) != VPMM_SUCCESS) {
        fprintf(stderr, "child: %s\n", vpmm_last_error());
        return 1;
    }
    if (!tpattern_same(q, 3 * MiB, 31))
        return 2;
    tpattern_fill(q, 3 * MiB, 33);
    return vpmm_ipc_close(b->pool, q) == VPMM_SUCCESS ? 0 : 3;
}

static void test_across_fork(void **state)
{
    tpool_t a;
    cross_t x;
    void *p;
    (void)state;
    require_pidfd();
    tpool_open(&a, &(tpool_params_t){ .small_bytes = 1 });
    p = tmalloc(a.pool, 3 * MiB, NULL);
    tpattern_fill(p, 3 * MiB, 31);
    x.h = export_ok(&a, p);
    assert_int_equal(in_child(child_writes, &x), 0);
    assert_true(tpattern_same(p, 3 * MiB, 33)); /* the child's writes */
    tfree(a.pool, p);
    assert_int_equal(tstats(a.pool).ipc_shared, 0); /* the child closed: over */
    tpool_close(&a);
}

/* The child keeps its open while the parent frees: the parent does not reuse the memory until
 * the child closes (signalled through pipes). */
static int child_holds(tpool_t *b, void *arg)
{
    cross_t *x = arg;
    void *q = NULL;
    char c = 0;
    if (vpmm_ipc_open(b->pool, x->h.b, x->h.len, &q) != VPMM_SUCCESS)
        return 1;
    if (write(x->to_parent[1], "o", 1) != 1 || read(x->to_child[0], &c, 1) != 1)
        return 2;
    if (!tpattern_same(q, 4 * MiB, 41)) /* the parent freed and allocated again: still ours */
        return 3;
    return vpmm_ipc_close(b->pool, q) == VPMM_SUCCESS ? 0 : 4;
}

static void test_across_fork_exporter_frees_first(void **state)
{
    tpool_t a;
    cross_t x;
    void *p, *r;
    pid_t pid;
    int status = 0;
    char c = 0;
    (void)state;
    require_pidfd();
    tpool_open(&a, &(tpool_params_t){ .small_bytes = 1 });
    p = tmalloc(a.pool, 4 * MiB, NULL);
    tpattern_fill(p, 4 * MiB, 41);
    x.h = export_ok(&a, p);
    assert_int_equal(pipe(x.to_parent), 0);
    assert_int_equal(pipe(x.to_child), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        tpool_t b;
        int rc;
        tpool_open(&b, &(tpool_params_t){ .small_bytes = 1 });
        rc = child_holds(&b, &x);
        _exit(rc);
    }
    assert_int_equal(read(x.to_parent[0], &c, 1), 1); /* the child has it open */
    tfree(a.pool, p);
    r = tmalloc(a.pool, 4 * MiB, NULL);
    assert_ptr_not_equal(r, p);
    tpattern_fill(r, 4 * MiB, 43);
    assert_int_equal(write(x.to_child[1], "c", 1), 1);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    slow_path(&a); /* the child closed: released */
    assert_int_equal(tstats(a.pool).ipc_shared, 0);
    tfree(a.pool, r);
    for (int i = 0; i < 2; i++) {
        close(x.to_parent[i]);
        close(x.to_child[i]);
    }
    tpool_close(&a);
}

/* A system that refuses to pass descriptors (as a container's seccomp profile does): the open
 * fails with NOT_SUPPORTED, says why, and maps nothing. */
static int child_refused(tpool_t *b, void *arg)
{
    cross_t *x = arg;
    void *q = (void *)1;
    vpmm_host_counts_t before, after;
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_pidfd_getfd, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = { sizeof filter / sizeof filter[0], filter };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
        return 77; /* cannot install the filter here */
    vpmm_host_counts(b->host, &before);
    if (vpmm_ipc_open(b->pool, x->h.b, x->h.len, &q) != VPMM_ERROR_NOT_SUPPORTED || q != NULL)
        return 1;
    if (strstr(vpmm_last_error(), "pidfd_getfd") == NULL ||
        strstr(vpmm_last_error(), "refused") == NULL)
        return 2;
    vpmm_host_counts(b->host, &after);
    if (after.mappings != before.mappings || after.handles != before.handles ||
        after.reservations != before.reservations || tstats(b->pool).ipc_imports != 0)
        return 3;
    return 0;
}

static void test_descriptors_refused(void **state)
{
    tpool_t a;
    cross_t x;
    void *p;
    int rc;
    (void)state;
    require_pidfd();
    tpool_open(&a, &(tpool_params_t){ .small_bytes = 1 });
    p = tmalloc(a.pool, 2 * MiB, NULL);
    x.h = export_ok(&a, p);
    rc = in_child(child_refused, &x);
    if (rc == 77) {
        tfree(a.pool, p);
        tpool_close(&a);
        skip(); /* seccomp is not available to this process */
    }
    assert_int_equal(rc, 0);
    tfree(a.pool, p);
    tpool_close(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_export_open_aliases),
        cmocka_unit_test(test_same_allocation_maps_once),
        cmocka_unit_test(test_neighbours_share_a_mapping),
        cmocka_unit_test(test_exporter_frees_first),
        cmocka_unit_test(test_importer_closes_first),
        cmocka_unit_test(test_unshare),
        cmocka_unit_test(test_many_shares_no_descriptor_growth),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_not_exportable),
        cmocka_unit_test(test_faults_leak_nothing),
        cmocka_unit_test(test_open_unreachable_device),
        cmocka_unit_test(test_destroy_with_open_import),
        cmocka_unit_test(test_exporter_destroyed_first),
        cmocka_unit_test(test_across_fork),
        cmocka_unit_test(test_across_fork_exporter_frees_first),
        cmocka_unit_test(test_descriptors_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
