/*
 * test_torch_adapter_ipc.c — CUDA IPC of vpmm's PyTorch CUDAAllocator (torch_adapter_ipc.c:
 * shareIpcHandle's export, getIpcDevPtr's open and its deleter's close) on the host backend, whose
 * memory exports as memfd descriptors that the opener takes with pidfd_getfd
 * (src/backends/host/driver_host.h), through the public API only (cmocka).
 *
 * Round trips, as torch.multiprocessing makes them: exported on one vta_device_t and opened on
 * another — two pools of one process, and a child made by fork() that creates its own host pool
 * and device state, opens the parent's handle, writes and closes; the offset convention (a
 * pointer inside an allocation shares the allocation, base + offset in the consumer is the byte
 * the producer named); the same block sent twice (the same bytes, one mapping, every open closed
 * by its own close); the lifetime (the consumer closing first makes the free an ordinary one;
 * a producer that frees first through vpmm_free gets the memory back only once the consumer
 * closes); the adapter's free of an exported block ends the shares no close ended (a send the
 * consumer's cache absorbed), so the memory is reused at once. Refusals: the handles of other
 * allocators told apart by name, a handle whose exporter has exited, memory that cannot be exported
 * (config.ipc = 0), a graph pool's, a bad pointer.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* fork, waitpid */
#endif
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_pattern.h"
#include "test_torch_adapter_util.h"

#define MiB ((size_t)1 << 20)

/* A host pool (its own emulated node) as device `device` of the process (ipc: config.ipc). */
static void open_dev(fixture_t *f, int device, int ipc)
{
    vpmm_config_t c;
    vpmm_config_init(&c);
    c.backend = VPMM_BACKEND_HOST;
    c.ignore_env = 1;
    c.va_size = (size_t)4 << 30;
    c.ipc = ipc;
    assert_int_equal(vpmm_pool_create(&c, &f->pool), VPMM_SUCCESS);
    assert_int_equal(vta_device_init(&f->d, f->pool, device), 0);
}

static void open_fx(fixture_t *f)
{
    open_dev(f, 0, -1);
}

/* shareIpcHandle of ptr: the handle (the caller frees it) and the offset. */
static unsigned char *export_ok(fixture_t *f, const void *ptr, size_t *len, size_t *offset)
{
    unsigned char *h = NULL;
    vpmm_status_t st = vta_ipc_export(&f->d, ptr, &h, len, offset);
    if (st != VPMM_SUCCESS)
        fail_msg("vta_ipc_export: %s (%s)", vpmm_status_name(st), vpmm_last_error());
    assert_non_null(h);
    assert_int_equal(vpmm_pool_check(f->pool, stderr), 0);
    return h;
}

/* getIpcDevPtr of a handle: the allocation's start here. */
static void *open_ok(fixture_t *f, const unsigned char *h, size_t len)
{
    void *q = NULL;
    vpmm_status_t st = vta_ipc_open(&f->d, h, len, &q);
    if (st != VPMM_SUCCESS)
        fail_msg("vta_ipc_open: %s (%s)", vpmm_status_name(st), vpmm_last_error());
    assert_non_null(q);
    assert_int_equal(vpmm_pool_check(f->pool, stderr), 0);
    return q;
}

static size_t open_now(fixture_t *f)
{
    size_t n = 0;
    vta_ipc_counts(&f->d, NULL, NULL, NULL, &n, NULL);
    return n;
}

/* The handles getIpcDevPtr may be given, told apart and refused by name. */
static void test_ipc_kinds(void **state)
{
    unsigned char vp[96] = "vpmmIPC1", c[66] = { 2, 'c' }, e[30] = { 2, 'e' }, legacy[64] = { 0 };
    char why[1024];
    fixture_t f;
    void *p = (void *)1;
    uint64_t opens = 9, closes = 9, unshares = 9;
    size_t now = 9, exported = 9;
    (void)state;
    assert_int_equal(vta_ipc_kind(vp, sizeof vp), VTA_IPC_VPMM);
    assert_int_equal(vta_ipc_kind(c, sizeof c), VTA_IPC_NATIVE_CUDA_MALLOC);
    assert_int_equal(vta_ipc_kind(e, sizeof e), VTA_IPC_NATIVE_EXPANDABLE);
    assert_int_equal(vta_ipc_kind(legacy, sizeof legacy), VTA_IPC_LEGACY);
    assert_int_equal(vta_ipc_kind("hello", 5), VTA_IPC_UNKNOWN);
    assert_int_equal(vta_ipc_kind(vp, 7), VTA_IPC_UNKNOWN); /* too short for the magic */
    assert_int_equal(vta_ipc_kind(vp, 0), VTA_IPC_UNKNOWN);
    assert_int_equal(vta_ipc_kind(NULL, 10), VTA_IPC_UNKNOWN);
    vta_ipc_refusal(c, sizeof c, why, sizeof why);
    assert_non_null(strstr(why, "made by PyTorch's native CUDA allocator, not by vpmm"));
    assert_non_null(strstr(why, "type 'c'"));
    assert_non_null(strstr(why, "66 bytes"));
    assert_non_null(strstr(why, "vpmm.torch.enable()"));
    vta_ipc_refusal(e, sizeof e, why, sizeof why);
    assert_non_null(strstr(why, "expandable_segments:True"));
    assert_non_null(strstr(why, "type 'e'"));
    vta_ipc_refusal(legacy, sizeof legacy, why, sizeof why);
    assert_non_null(strstr(why, "bare 64-byte cudaIpcMemHandle_t"));
    vta_ipc_refusal("hello", 5, why, sizeof why);
    assert_non_null(strstr(why, "(5 bytes, starting 0x68 0x65) is neither vpmm's"));
    vta_ipc_refusal(vp, sizeof vp, why, sizeof why);
    assert_non_null(strstr(why, "a vpmm IPC handle"));

    /* Refused before vpmm is asked: nothing opened, nothing counted. */
    open_fx(&f);
    assert_int_equal(vta_ipc_open(&f.d, c, sizeof c, &p), VPMM_ERROR_INVALID_ARGUMENT);
    assert_null(p);
    assert_int_equal(vta_ipc_open(&f.d, legacy, sizeof legacy, &p), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vta_ipc_open(&f.d, e, sizeof e, &p), VPMM_ERROR_INVALID_ARGUMENT);
    /* vpmm's magic, but not a whole handle: vpmm says so. */
    assert_int_equal(vta_ipc_open(&f.d, vp, 40, &p), VPMM_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(vpmm_last_error(), "not a vpmm IPC handle"));
    /* A pointer no open returned: a close knows nothing. */
    assert_int_equal(vta_ipc_close(&f.d, (void *)0x1000), VPMM_ERROR_FOREIGN_POINTER);
    vta_ipc_counts(&f.d, &opens, &closes, &unshares, &now, &exported);
    assert_int_equal(opens, 0);
    assert_int_equal(closes, 0);
    assert_int_equal(unshares, 0);
    assert_int_equal(now, 0);
    assert_int_equal(exported, 0);
    close_fx(&f);
}

/* vpmm's wire header (src/core/ipc_wire.h), to make a well-formed handle of a process that has
 * exited: the open must fail with vpmm's reason, counting nothing. */
typedef struct wire {
    char magic[8];
    uint32_t version, nphys;
    int32_t pid, table_fd;
    uint64_t nonce, offset, size;
    uint32_t slot, gen;
    int32_t device;
    uint32_t reserved;
    int32_t fd;
    uint32_t reserved2;
    uint64_t serial, esize, eoffset;
} wire_t;

static void test_ipc_open_refused(void **state)
{
    fixture_t f;
    wire_t w;
    pid_t child;
    void *p = (void *)1;
    size_t now = 9;
    vpmm_status_t st;
    (void)state;
    child = fork();
    assert_true(child >= 0);
    if (child == 0)
        _exit(0);
    assert_int_equal(waitpid(child, NULL, 0), child); /* reaped: its pid names no process */
    memset(&w, 0, sizeof w);
    memcpy(w.magic, "vpmmIPC1", 8);
    w.version = 1;
    w.nphys = 1;
    w.pid = (int32_t)child;
    w.table_fd = 3;
    w.nonce = 1;
    w.size = 4096;
    w.gen = 1;
    w.fd = 3;
    w.serial = 1;
    w.esize = 2 * MiB;
    open_fx(&f);
    assert_int_equal(vta_ipc_kind(&w, sizeof w), VTA_IPC_VPMM);
    st = vta_ipc_open(&f.d, &w, sizeof w, &p);
    assert_null(p);
    if (st == VPMM_ERROR_INVALID_ARGUMENT)
        assert_non_null(strstr(vpmm_last_error(), "has exited"));
    else /* a system that refuses pidfd_open says so */
        assert_int_equal(st, VPMM_ERROR_NOT_SUPPORTED);
    vta_ipc_counts(&f.d, NULL, NULL, NULL, &now, NULL);
    assert_int_equal(now, 0);
    close_fx(&f);
}

/* Memory that cannot be shared: vpmm's reason, which names the cause, and nothing handed out. */
static void test_ipc_export_refused(void **state)
{
    fixture_t f, off;
    const vta_pool_id_t tree = { 0, 4 };
    unsigned char *h = (unsigned char *)1;
    size_t len = 9, offset = 9;
    void *a, *g;
    (void)state;
    /* config.ipc = 0 (VPMM_IPC=0): the host backend makes handles that cannot be exported. */
    open_dev(&off, 0, 0);
    a = talloc(&off, 3 * MiB, NULL, SHARED);
    assert_int_equal(vta_ipc_export(&off.d, a, &h, &len, &offset), VPMM_ERROR_NOT_SUPPORTED);
    assert_non_null(strstr(vpmm_last_error(), "cannot be exported"));
    assert_non_null(strstr(vpmm_last_error(), "VPMM_IPC=0"));
    assert_null(h);
    assert_int_equal(len, 0);
    assert_int_equal(offset, 0);
    /* A pointer inside the allocation is the allocation's to share: refused for the same cause,
     * not as an interior pointer. */
    assert_int_equal(vta_ipc_export(&off.d, (char *)a + 4096, &h, &len, &offset),
                     VPMM_ERROR_NOT_SUPPORTED);
    assert_non_null(strstr(vpmm_last_error(), "VPMM_IPC=0"));
    assert_int_equal(pstats(&off).ipc_exports, 0);
    assert_int_equal(vta_free(&off.d, a), VPMM_SUCCESS);
    close_fx(&off);

    /* Exportable memory, but not these pointers. */
    open_fx(&f);
    a = talloc(&f, 3 * MiB, NULL, SHARED);
    assert_int_equal(vta_ipc_export(&f.d, (void *)0x1000, &h, &len, &offset),
                     VPMM_ERROR_FOREIGN_POINTER);
    assert_null(h);
    /* A graph pool's (a MemPool's, a capture's) memory is not shared. */
    assert_int_equal(vta_pool_incref(&f.d, tree), VPMM_SUCCESS);
    g = talloc(&f, 4096, (vpmm_stream_t)(uintptr_t)0x5a00, tree);
    assert_int_equal(vta_ipc_export(&f.d, g, &h, &len, &offset), VPMM_ERROR_NOT_SUPPORTED);
    assert_non_null(strstr(vpmm_last_error(), "graph pool's allocation"));
    assert_null(h);
    assert_int_equal(vta_free(&f.d, g), VPMM_SUCCESS);
    assert_int_equal(vta_pool_decref(&f.d, tree), VPMM_SUCCESS);
    assert_int_equal(vta_free(&f.d, a), VPMM_SUCCESS);
    /* Freed memory: vpmm's status for a bad pointer. */
    assert_int_equal(vta_ipc_export(&f.d, a, &h, &len, &offset), VPMM_ERROR_DOUBLE_FREE);
    assert_null(h);
    assert_int_equal(pstats(&f).ipc_exports, 0);
    close_fx(&f);
}

/* Exported on one device state, opened on another (two pools of this process, each its own
 * node): the consumer's base + offset is the byte the producer named; writes go both ways. */
static void test_ipc_round_trip(void **state)
{
    fixture_t a, b;
    unsigned char *h, *h0;
    size_t len, len0, offset, offset0;
    void *p, *q;
    uint64_t opens, closes;
    (void)state;
    open_fx(&a);
    open_fx(&b);
    p = talloc(&a, 3 * MiB, NULL, SHARED);
    tpattern_fill(p, 3 * MiB, 7);
    /* A pointer inside the allocation (a storage that starts there): the allocation, with the
     * offset; the storage's own pointer: offset 0, the same bytes. */
    h = export_ok(&a, (char *)p + 8192, &len, &offset);
    assert_int_equal(offset, 8192);
    assert_true(len <= VPMM_IPC_HANDLE_BYTES(3 * MiB, 2 * MiB));
    assert_int_equal(vta_ipc_kind(h, len), VTA_IPC_VPMM);
    assert_int_not_equal(len, 64); /* never taken for a bare cudaIpcMemHandle_t */
    h0 = export_ok(&a, p, &len0, &offset0);
    assert_int_equal(offset0, 0);
    assert_int_equal(len0, len);
    assert_memory_equal(h0, h, len);
    assert_int_equal(pstats(&a).ipc_exports, 2);

    q = open_ok(&b, h, len);
    assert_true(tpattern_same(q, 3 * MiB, 7));
    assert_int_equal(((unsigned char *)q)[offset], ((unsigned char *)p)[8192]);
    tpattern_fill((char *)q + offset, 4096, 40); /* through the consumer's base + offset */
    assert_int_equal(((unsigned char *)p)[8192], 40);
    tpattern_fill(q, 3 * MiB, 9);
    assert_true(tpattern_same(p, 3 * MiB, 9));
    assert_int_equal(pstats(&b).ipc_imports, 1);
    assert_int_equal(pstats(&b).live_allocs, 0); /* imports are not the consumer's memory */
    assert_int_equal(open_now(&b), 1);
    /* An imported pointer is not the consumer's to free. */
    assert_int_equal(vta_free(&b.d, q), VPMM_ERROR_FOREIGN_POINTER);
    assert_ptr_equal(open_ok(&b, h0, len0), q); /* the second send, opened: same mapping */
    assert_int_equal(open_now(&b), 2);
    assert_int_equal(vta_ipc_close(&b.d, q), VPMM_SUCCESS);
    assert_int_equal(pstats(&b).ipc_imports, 1); /* one open left */
    assert_int_equal(vta_ipc_close(&b.d, q), VPMM_SUCCESS);
    assert_int_equal(pstats(&b).ipc_imports, 0);
    assert_int_equal(vta_ipc_close(&b.d, q), VPMM_ERROR_FOREIGN_POINTER); /* all closed */
    vta_ipc_counts(&b.d, &opens, &closes, NULL, NULL, NULL);
    assert_int_equal(opens, 2);
    assert_int_equal(closes, 2);
    assert_int_equal(open_now(&b), 0);
    /* Both shares over: the producer's free is ordinary, the memory in use again at once. */
    assert_int_equal(vta_free(&a.d, p), VPMM_SUCCESS);
    assert_int_equal(pstats(&a).ipc_shared, 0);
    assert_ptr_equal(talloc(&a, 3 * MiB, NULL, SHARED), p);
    assert_int_equal(vta_free(&a.d, p), VPMM_SUCCESS);
    free(h);
    free(h0);
    close_fx(&b);
    close_fx(&a);
}

/* The lifetime of shared memory, by layer. vpmm's shares protect a C user of vpmm_ipc_*: the
 * producer frees first, through vpmm_free, and vpmm keeps the memory out of use until the
 * consumer closes (the consumer keeps reading the producer's data meanwhile; the adapter's books
 * are not the point here). The consumer closes first (what PyTorch's reference counts ensure):
 * the adapter's free is ordinary. */
static void test_ipc_lifetime(void **state)
{
    fixture_t a, b;
    unsigned char *h;
    size_t len, offset;
    void *p, *q, *r;
    (void)state;
    open_fx(&a);
    open_fx(&b);
    p = talloc(&a, 4 * MiB, NULL, SHARED);
    tpattern_fill(p, 4 * MiB, 3);
    h = export_ok(&a, p, &len, &offset);
    q = open_ok(&b, h, len);
    free(h);
    assert_int_equal(vpmm_free(a.pool, p), VPMM_SUCCESS); /* the producer first */
    assert_int_equal(pstats(&a).ipc_shared, 1);
    r = talloc(&a, 4 * MiB, NULL, SHARED);
    assert_ptr_not_equal(r, p);
    tpattern_fill(r, 4 * MiB, 11);
    assert_int_equal(vta_empty_cache(&a.d), 0); /* a slow path: p stays put */
    assert_true(tpattern_same(q, 4 * MiB, 3));
    assert_int_equal(vta_free(&a.d, r), VPMM_SUCCESS);
    assert_int_equal(vta_ipc_close(&b.d, q), VPMM_SUCCESS);            /* the consumer is done */
    assert_int_equal(vpmm_trim(a.pool, SIZE_MAX, NULL), VPMM_SUCCESS); /* polls deferred frees */
    assert_int_equal(pstats(&a).ipc_shared, 0);
    r = talloc(&a, 4 * MiB, NULL, SHARED);
    assert_ptr_equal(r, p);

    /* The consumer first: the producer's free is ordinary. */
    h = export_ok(&a, r, &len, &offset);
    q = open_ok(&b, h, len);
    assert_int_equal(vta_ipc_close(&b.d, q), VPMM_SUCCESS);
    assert_int_equal(vta_free(&a.d, r), VPMM_SUCCESS);
    assert_int_equal(pstats(&a).ipc_shared, 0);
    assert_ptr_equal(talloc(&a, 4 * MiB, NULL, SHARED), p);
    assert_int_equal(vta_free(&a.d, p), VPMM_SUCCESS);
    free(h);
    close_fx(&b);
    close_fx(&a);
}

/* PyTorch's case (INTERFACE.md §9.3): the same block sent twice while the consumer holds the
 * first, so the second send finds the storage in the consumer's cache and opens nothing (one
 * open, one close for two shares); the producer frees the block once the consumer is done. The
 * free ends the share no close ended: the memory is in use again at once, and a handle of the
 * ended share is stale. A block never exported pays nothing. */
static void test_ipc_unshare_at_free(void **state)
{
    fixture_t a, b;
    unsigned char *h1, *h2, *h3;
    size_t len, len2, offset, exported = 9;
    uint64_t unshares = 9;
    void *p, *q, *r, *x;
    (void)state;
    open_fx(&a);
    open_fx(&b);
    x = talloc(&a, MiB, NULL, SHARED);
    p = talloc(&a, 4 * MiB, NULL, SHARED);
    tpattern_fill(p, 4 * MiB, 5);
    h1 = export_ok(&a, p, &len, &offset);
    h2 = export_ok(&a, p, &len2, &offset); /* the second send */
    assert_int_equal(len2, len);
    assert_memory_equal(h1, h2, len);
    assert_int_equal(pstats(&a).ipc_exports, 2);
    vta_ipc_counts(&a.d, NULL, NULL, &unshares, NULL, &exported);
    assert_int_equal(exported, 1); /* one allocation, however often sent */
    assert_int_equal(unshares, 0);
    q = open_ok(&b, h1, len); /* the first receive; the second is the consumer's cache hit */
    assert_true(tpattern_same(q, 4 * MiB, 5));
    tpattern_fill(q, 4 * MiB, 6);
    assert_int_equal(vta_ipc_close(&b.d, q), VPMM_SUCCESS); /* the consumer is done */
    assert_int_equal(pstats(&a).ipc_shared, 1); /* the absorbed send's share is still counted */
    assert_true(tpattern_same(p, 4 * MiB, 6));

    assert_int_equal(vta_free(&a.d, p), VPMM_SUCCESS); /* PyTorch's free, after the consumer */
    assert_int_equal(pstats(&a).ipc_shared, 0);
    vta_ipc_counts(&a.d, NULL, NULL, &unshares, NULL, &exported);
    assert_int_equal(unshares, 1);
    assert_int_equal(exported, 0);
    r = talloc(&a, 4 * MiB, NULL, SHARED);
    assert_ptr_equal(r, p); /* reused at once */
    /* The ended share's handle is stale: nothing is mapped from it. */
    q = (void *)1;
    assert_int_equal(vta_ipc_open(&b.d, h2, len, &q), VPMM_ERROR_INVALID_ARGUMENT);
    assert_null(q);
    assert_int_equal(pstats(&b).ipc_imports, 0);
    /* The next use of the memory is shared and freed on its own terms. */
    h3 = export_ok(&a, r, &len, &offset);
    q = open_ok(&b, h3, len);
    assert_int_equal(vta_ipc_close(&b.d, q), VPMM_SUCCESS);
    assert_int_equal(vta_free(&a.d, r), VPMM_SUCCESS);
    /* A free of memory never exported ends nothing. */
    assert_int_equal(vta_free(&a.d, x), VPMM_SUCCESS);
    vta_ipc_counts(&a.d, NULL, NULL, &unshares, NULL, &exported);
    assert_int_equal(unshares, 2);
    assert_int_equal(exported, 0);
    assert_int_equal(pstats(&a).ipc_shared, 0);
    free(h1);
    free(h2);
    free(h3);
    close_fx(&b);
    close_fx(&a);
}

typedef struct cross {
    unsigned char *h;
    size_t len, offset;
} cross_t;

/* The child: a host pool and a device state of its own, the parent's handle opened (its
 * descriptors taken with pidfd_getfd), checked, written, closed. 77: the system refuses to pass
 * descriptors (a container without the permission to trace the parent). */
static int child_writes(const cross_t *x)
{
    vpmm_config_t c;
    vpmm_pool_t *pool = NULL;
    vta_device_t d;
    vpmm_status_t st;
    void *q = NULL;
    int rc = 0;
    vpmm_config_init(&c);
    c.backend = VPMM_BACKEND_HOST;
    c.ignore_env = 1;
    c.va_size = (size_t)4 << 30;
    if (vpmm_pool_create(&c, &pool) != VPMM_SUCCESS || vta_device_init(&d, pool, 0) != 0)
        return 1;
    st = vta_ipc_open(&d, x->h, x->len, &q);
    if (st == VPMM_ERROR_NOT_SUPPORTED)
        rc = 77;
    else if (st != VPMM_SUCCESS)
        rc = 2;
    else if (!tpattern_same((char *)q + x->offset, 2 * MiB, 31))
        rc = 3;
    if (rc == 0) {
        tpattern_fill((char *)q + x->offset, 2 * MiB, 33);
        rc = vta_ipc_close(&d, q) == VPMM_SUCCESS ? 0 : 4;
    }
    if (rc != 0 && rc != 77)
        fprintf(stderr, "child: %d (%s)\n", rc, vpmm_last_error());
    vta_device_fini(&d);
    if (vpmm_pool_check(pool, stderr) != 0)
        rc = 5;
    if (vpmm_pool_destroy(pool) != VPMM_SUCCESS)
        rc = 6;
    return rc;
}

/* Across fork(): the child opens what the parent shared, writes it, closes; the parent sees the
 * writes, and its free is ordinary (the child's close ended the share). */
static void test_ipc_across_fork(void **state)
{
    fixture_t a;
    cross_t x;
    pid_t pid;
    void *p;
    int status = 0;
    (void)state;
    open_fx(&a);
    p = talloc(&a, 3 * MiB, NULL, SHARED);
    tpattern_fill((char *)p + MiB, 2 * MiB, 31);
    x.h = export_ok(&a, (char *)p + MiB, &x.len, &x.offset);
    assert_int_equal(x.offset, MiB);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(child_writes(&x));
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    free(x.h);
    if (WEXITSTATUS(status) == 77) {
        print_message("this system refuses to pass descriptors (pidfd_getfd): not run\n");
        assert_int_equal(vpmm_ipc_unshare(a.pool, p), VPMM_SUCCESS); /* the unopened share */
    } else {
        assert_int_equal(WEXITSTATUS(status), 0);
        assert_true(tpattern_same((char *)p + MiB, 2 * MiB, 33)); /* the child's writes */
    }
    assert_int_equal(vta_free(&a.d, p), VPMM_SUCCESS);
    assert_int_equal(pstats(&a).ipc_shared, 0);
    assert_ptr_equal(talloc(&a, 3 * MiB, NULL, SHARED), p);
    assert_int_equal(vta_free(&a.d, p), VPMM_SUCCESS);
    close_fx(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ipc_kinds),          cmocka_unit_test(test_ipc_open_refused),
        cmocka_unit_test(test_ipc_export_refused), cmocka_unit_test(test_ipc_round_trip),
        cmocka_unit_test(test_ipc_lifetime),       cmocka_unit_test(test_ipc_unshare_at_free),
        cmocka_unit_test(test_ipc_across_fork),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
