/*
 * test_driver_host_ipc.c — tests of the host emulation backend's shareable handles
 * (src/backends/host/driver_host_mem.c; driver.h rule 10): mem_export and mem_import in one node,
 * between nodes and across fork() (the child takes the descriptor with pidfd_getfd), the bytes
 * seen through both sides, an import counting against no device, every refusal changing nothing,
 * an import keeping the exporter's bytes alive after its release, and the descriptors: 10,000
 * imports and releases leave the process's open descriptors as they were, closing a node closes
 * its imports', and with none left export and import fail cleanly.
 *
 * Every test opens its own nodes and calls vpmm_host_check() and vpmm_host_check_access() after
 * each mutation (CHECKED; the 10,000-cycle loop calls the cheap check after each step and the full
 * one every 100).
 */
#include "driver_host_test_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434 /* the same number on every architecture since Linux 5.3 */
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

typedef volatile unsigned char vbyte_t;

/* ---- helpers ------------------------------------------------------------------------------ */

static vpmm_driver_t *open_devices(int devices, size_t limit)
{
    vpmm_host_options_t opt = { .memory_limit = limit, .devices = devices };
    return open_host_opt(&opt);
}

static vpmm_drv_shareable_t export_of(vpmm_driver_t *d, vpmm_drv_handle_t h)
{
    vpmm_drv_shareable_t sh = { .fd = -1 };
    assert_int_equal(d->mem_export(d, h, &sh), VPMM_DRV_OK);
    assert_true(sh.fd >= 0);
    CHECKED(d);
    return sh;
}

static vpmm_drv_handle_t import_of(vpmm_driver_t *d, const vpmm_drv_shareable_t *sh)
{
    vpmm_drv_handle_t h = 0;
    assert_int_equal(d->mem_import(d, sh, &h), VPMM_DRV_OK);
    assert_true(h != 0);
    CHECKED(d);
    return h;
}

static unsigned char pattern(size_t i)
{
    return (unsigned char)(i * 31 + 7);
}

static void fill(uintptr_t va, size_t size)
{
    for (size_t i = 0; i < size; i += 4096)
        ((vbyte_t *)va)[i] = pattern(i);
}

static int holds_pattern(uintptr_t va, size_t size)
{
    for (size_t i = 0; i < size; i += 4096)
        if (((vbyte_t *)va)[i] != pattern(i))
            return 0;
    return 1;
}

static void unmap_release(vpmm_driver_t *d, uintptr_t va, size_t size, vpmm_drv_handle_t h)
{
    assert_int_equal(d->mem_unmap(d, va, size), VPMM_DRV_OK);
    assert_int_equal(d->mem_release(d, h), VPMM_DRV_OK);
    CHECKED(d);
}

/* ---- in one node -------------------------------------------------------------------------- */

/* An import of an export maps the same bytes: a write through either is read through the other. */
static void test_export_import_aliasing(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_devices(2, 0), *d1 = NULL;
    assert_int_equal(vpmm_host_open_device(d, 1, &d1), VPMM_DRV_OK);
    uintptr_t va = reserve(d, 16 * MiB);
    vpmm_drv_handle_t h = create(d, 2 * G);
    map_rw(d, va, 2 * G, h);
    fill(va, 2 * G);
    vpmm_drv_shareable_t sh = export_of(d, h);
    assert_int_equal(sh.size, 2 * G);
    vpmm_drv_handle_t imp = import_of(d1, &sh); /* through device 1's view */
    assert_int_equal(close(sh.fd), 0);          /* the descriptor may go after the import */
    map_rw(d1, va + 4 * G, 2 * G, imp);
    assert_true(holds_pattern(va + 4 * G, 2 * G));
    ((vbyte_t *)va)[4 * G + 12345] = 0xab;
    assert_int_equal(((vbyte_t *)va)[12345], 0xab);
    ((vbyte_t *)va)[2 * G - 1] = 0xcd;
    assert_int_equal(((vbyte_t *)va)[6 * G - 1], 0xcd);

    vpmm_host_counts_t c;
    vpmm_host_counts(d, &c);
    assert_int_equal(c.handles, 1);
    assert_int_equal(c.handle_bytes, 2 * G);
    assert_int_equal(c.imported, 1);
    assert_int_equal(c.imported_bytes, 2 * G);
    assert_int_equal(c.mappings, 2);
    unmap_release(d1, va + 4 * G, 2 * G, imp);
    unmap_release(d, va, 2 * G, h);
    assert_int_equal(d->va_free(d, va, 16 * MiB), VPMM_DRV_OK);
    expect_empty(d);
    close_host(d1);
    close_host(d);
}

/* The memory is the exporter's: an import takes nothing from the importing device's limit. */
static void test_import_counts_against_no_device(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_devices(2, 2 * G), *d1 = NULL;
    assert_int_equal(vpmm_host_open_device(d, 1, &d1), VPMM_DRV_OK);
    vpmm_drv_handle_t h = create(d, 2 * G), full = create(d1, 2 * G);
    vpmm_drv_shareable_t sh = export_of(d, h);
    vpmm_drv_handle_t imp = import_of(d1, &sh); /* device 1 is full: no matter */
    size_t free_b = 1, total = 0;
    assert_int_equal(d1->mem_get_info(d1, &free_b, &total), VPMM_DRV_OK);
    assert_int_equal(free_b, 0);
    assert_int_equal(d->mem_get_info(d, &free_b, &total), VPMM_DRV_OK);
    assert_int_equal(free_b, 0);
    assert_int_equal(d1->mem_release(d1, imp), VPMM_DRV_OK);
    CHECKED(d1);
    assert_int_equal(d->mem_get_info(d, &free_b, &total), VPMM_DRV_OK);
    assert_int_equal(free_b, 0); /* the exporter still holds its handle */
    assert_int_equal(d->mem_release(d, h), VPMM_DRV_OK);
    assert_int_equal(d->mem_release(d, full), VPMM_DRV_OK);
    assert_int_equal(close(sh.fd), 0);
    expect_empty(d);
    close_host(d1);
    close_host(d);
}

static void test_export_refused(void **state)
{
    (void)state;
    vpmm_host_options_t ne = { .not_exportable = 1 };
    vpmm_driver_t *n = open_host_opt(&ne), *d = open_host(0, 0);
    vpmm_drv_handle_t hn = create(n, G), h = create(d, G), dead = create(d, G);
    assert_int_equal(d->mem_release(d, dead), VPMM_DRV_OK);
    size_t fds = open_fds();
    vpmm_host_counts_t before;
    vpmm_host_counts(d, &before);
    vpmm_drv_shareable_t sh = { .fd = -7 };
    expect_failure(n, n->mem_export(n, hn, &sh), VPMM_DRV_NOT_SUPPORTED, 801, VPMM_DRV_MEM_EXPORT);
    expect_failure(d, d->mem_export(d, dead, &sh), VPMM_DRV_INVALID, 1, VPMM_DRV_MEM_EXPORT);
    expect_failure(d, d->mem_export(d, 0, &sh), VPMM_DRV_INVALID, 1, VPMM_DRV_MEM_EXPORT);
    expect_failure(d, d->mem_export(d, h, NULL), VPMM_DRV_INVALID, 1, VPMM_DRV_MEM_EXPORT);
    assert_int_equal(sh.fd, -7);
    assert_int_equal(open_fds(), fds);
    expect_same_counts(d, &before);
    CHECKED(d);
    /* Not exportable, the view still imports. */
    sh = export_of(d, h);
    vpmm_drv_handle_t imp = import_of(n, &sh);
    assert_int_equal(n->mem_release(n, imp), VPMM_DRV_OK);
    assert_int_equal(close(sh.fd), 0);
    assert_int_equal(n->mem_release(n, hn), VPMM_DRV_OK);
    assert_int_equal(d->mem_release(d, h), VPMM_DRV_OK);
    close_host(n);
    close_host(d);
}

/* Whether a handle can be exported is fixed when it is created (CUDA: its shareable type), by the
 * view that created it: another view of the node cannot export it either. */
static void test_export_follows_the_creating_view(void **state)
{
    (void)state;
    vpmm_host_options_t ne = { .memory_limit = 16 * MiB, .not_exportable = 1 };
    vpmm_host_options_t ex = { .memory_limit = 16 * MiB };
    vpmm_driver_t *n = NULL, *d = NULL;
    assert_int_equal(vpmm_host_open_shared(&ne, 0, &n), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_open_shared(&ex, 1, &d), VPMM_DRV_OK);
    assert_int_equal(n->exportable, 0);
    assert_int_equal(d->exportable, 1);
    vpmm_drv_handle_t hn = create(n, G), hd = create(d, G);
    vpmm_drv_shareable_t sh = { .fd = -1 };
    expect_failure(d, d->mem_export(d, hn, &sh), VPMM_DRV_NOT_SUPPORTED, 801, VPMM_DRV_MEM_EXPORT);
    assert_int_equal(sh.fd, -1);
    sh = export_of(d, hd);
    assert_int_equal(close(sh.fd), 0);
    assert_int_equal(d->mem_release(d, hn), VPMM_DRV_OK);
    assert_int_equal(d->mem_release(d, hd), VPMM_DRV_OK);
    close_host(n);
    close_host(d);
}

static void test_import_refused(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    vpmm_drv_handle_t gone = create(d, G), h = create(d, 2 * G); /* gone at offset 0, h after */
    vpmm_drv_shareable_t old = export_of(d, gone), good = export_of(d, h);
    assert_int_equal(d->mem_release(d, gone), VPMM_DRV_OK); /* [0, G) of the memfd is free now */
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    int closed = dup(good.fd);
    assert_true(closed >= 0);
    assert_int_equal(close(closed), 0);
    size_t fds = open_fds();
    vpmm_host_counts_t before;
    vpmm_host_counts(d, &before);
    const vpmm_drv_shareable_t bad[] = {
        { -1, good.offset, good.size },
        { closed, good.offset, good.size },
        { good.fd, good.offset, 0 },
        { good.fd, good.offset, good.size - 4096 },      /* not a multiple of G */
        { good.fd, good.offset + 4096, good.size },      /* nor is the offset */
        { good.fd, good.offset + good.size, good.size }, /* past the end of the file */
        { good.fd, UINT64_MAX - G + 1, good.size },      /* wrapping */
        { pipefd[0], 0, G },                             /* names no memory */
        { good.fd, good.offset + G, G },                 /* part of the node's handle */
        { old.fd, old.offset, old.size },                /* the node's free memory */
    };
    vpmm_drv_handle_t out = 99;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        expect_failure(d, d->mem_import(d, &bad[i], &out), VPMM_DRV_INVALID, 1,
                       VPMM_DRV_MEM_IMPORT);
        assert_int_equal(out, 99);
    }
    expect_failure(d, d->mem_import(d, NULL, &out), VPMM_DRV_INVALID, 1, VPMM_DRV_MEM_IMPORT);
    expect_failure(d, d->mem_import(d, &good, NULL), VPMM_DRV_INVALID, 1, VPMM_DRV_MEM_IMPORT);
    CHECKED(d);
    expect_same_counts(d, &before);
    assert_int_equal(open_fds(), fds);
    assert_int_equal(close(pipefd[0]), 0);
    assert_int_equal(close(pipefd[1]), 0);
    assert_int_equal(close(good.fd), 0);
    assert_int_equal(close(old.fd), 0);
    assert_int_equal(d->mem_release(d, h), VPMM_DRV_OK);
    expect_empty(d);
    close_host(d);
}

/* Rule 10: the memory lives until its last handle and mapping are gone. In one node the import
 * keeps the exporting handle's bytes after that handle's release and last unmap. */
static void test_import_keeps_the_exporter_alive(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 4 * G);
    uintptr_t va = reserve(d, 8 * MiB);
    vpmm_drv_handle_t h = create(d, G);
    map_rw(d, va, G, h);
    fill(va, G);
    vpmm_drv_shareable_t sh = export_of(d, h);
    vpmm_drv_handle_t imp = import_of(d, &sh);
    assert_int_equal(close(sh.fd), 0);
    unmap_release(d, va, G, h);
    vpmm_host_counts_t c;
    vpmm_host_counts(d, &c);
    assert_int_equal(c.handles, 1); /* still the device's memory */
    assert_int_equal(c.touched_bytes, G);
    size_t free_b = 0, total = 0;
    assert_int_equal(d->mem_get_info(d, &free_b, &total), VPMM_DRV_OK);
    assert_int_equal(free_b, 3 * G);
    vpmm_drv_handle_t other = create(d, G); /* must not get those bytes */
    map_rw(d, va + G, G, other);
    memset((void *)(va + G), 0x11, G);
    map_rw(d, va + 2 * G, G, imp);
    assert_true(holds_pattern(va + 2 * G, G));
    unmap_release(d, va + 2 * G, G, imp); /* the last holder: now the bytes go */
    vpmm_host_counts(d, &c);
    assert_int_equal(c.handles, 1);
    assert_int_equal(c.imported, 0);
    unmap_release(d, va + G, G, other);
    assert_int_equal(d->va_free(d, va, 8 * MiB), VPMM_DRV_OK);
    expect_empty(d);
    close_host(d);
}

/* ---- between nodes and processes ---------------------------------------------------------- */

/* Another node (another program, as far as the backend knows) imports; the exporting node may
 * even go first: the descriptor keeps the file. A re-export of the import names the same bytes. */
static void test_import_from_another_node(void **state)
{
    (void)state;
    size_t fds = open_fds();
    vpmm_driver_t *a = open_host(0, 0), *b = open_host(0, 0), *c = open_host(0, 0);
    uintptr_t va = reserve(a, 8 * MiB), vb = reserve(b, 8 * MiB), vc = reserve(c, 8 * MiB);
    vpmm_drv_handle_t h = create(a, 2 * G);
    map_rw(a, va, 2 * G, h);
    fill(va, 2 * G);
    vpmm_drv_shareable_t sh = export_of(a, h);
    vpmm_drv_handle_t hb = import_of(b, &sh);
    assert_int_equal(close(sh.fd), 0);
    map_rw(b, vb, 2 * G, hb);
    assert_true(holds_pattern(vb, 2 * G));
    vpmm_host_counts_t cnt;
    vpmm_host_counts(b, &cnt);
    assert_int_equal(cnt.handles, 0);
    assert_int_equal(cnt.imported, 1);

    vpmm_drv_shareable_t again = export_of(b, hb); /* the import's own descriptor */
    assert_int_equal(again.size, 2 * G);
    vpmm_drv_handle_t hc = import_of(c, &again);
    assert_int_equal(close(again.fd), 0);
    map_rw(c, vc, 2 * G, hc);
    ((vbyte_t *)vc)[777] = 0x42;
    assert_int_equal(((vbyte_t *)va)[777], 0x42);

    assert_int_equal(a->mem_unmap(a, va, 2 * G), VPMM_DRV_OK);
    assert_int_equal(a->va_free(a, va, 8 * MiB), VPMM_DRV_OK);
    close_host(a); /* with h still created: the node's close frees its records only */
    assert_int_equal(((vbyte_t *)vb)[777], 0x42);
    assert_true(holds_pattern(vb + 4096, G));
    unmap_release(b, vb, 2 * G, hb);
    unmap_release(c, vc, 2 * G, hc);
    assert_int_equal(b->va_free(b, vb, 8 * MiB), VPMM_DRV_OK);
    assert_int_equal(c->va_free(c, vc, 8 * MiB), VPMM_DRV_OK);
    expect_empty(b);
    close_host(b);
    close_host(c);
    assert_int_equal(open_fds(), fds);
}

enum { CHILD_OK = 0, CHILD_NOSYS = 77, CHILD_DENIED = 78 };

typedef struct fork_msg {
    int fd;
    uint64_t offset;
    size_t size;
} fork_msg_t;

/* The child's side: take the parent's descriptor with pidfd_getfd, import it into a node of its
 * own, check the parent's bytes and leave a mark. Never asserts (cmocka belongs to the parent):
 * returns its exit status; CHILD_NOSYS or CHILD_DENIED when the kernel will not hand the
 * descriptor over (no such call — an old kernel, or valgrind, which does not know them — or
 * ptrace restrictions). */
static int child_imports(int rd)
{
    fork_msg_t m;
    if (read(rd, &m, sizeof m) != (ssize_t)sizeof m)
        return 10;
    int pidfd = (int)syscall(SYS_pidfd_open, getppid(), 0);
    if (pidfd < 0)
        return errno == ENOSYS ? CHILD_NOSYS : 11;
    int fd = (int)syscall(SYS_pidfd_getfd, pidfd, m.fd, 0);
    int err = errno;
    close(pidfd);
    if (fd < 0)
        return err == ENOSYS ? CHILD_NOSYS : err == EPERM || err == EACCES ? CHILD_DENIED : 12;
    vpmm_driver_t *d = NULL;
    vpmm_drv_handle_t h = 0;
    uintptr_t va = 0;
    vpmm_drv_shareable_t in = { fd, m.offset, m.size };
    if (vpmm_host_open(NULL, &d) != VPMM_DRV_OK || d->mem_import(d, &in, &h) != VPMM_DRV_OK)
        return 13;
    close(fd);
    if (d->va_reserve(d, 8 * MiB, 0, &va) != VPMM_DRV_OK ||
        d->mem_map(d, va, m.size, h, 0) != VPMM_DRV_OK ||
        d->set_access(d, va, m.size, NULL, 0) != VPMM_DRV_OK)
        return 14;
    if (!holds_pattern(va, m.size))
        return 15;
    ((vbyte_t *)va)[m.size - 1] = 0xee;
    if (vpmm_host_check(d, 1) != 0 || vpmm_host_check_access(d, 1) != 0)
        return 16;
    if (d->mem_unmap(d, va, m.size) != VPMM_DRV_OK || d->mem_release(d, h) != VPMM_DRV_OK ||
        d->va_free(d, va, 8 * MiB) != VPMM_DRV_OK)
        return 17;
    d->close(d);
    return CHILD_OK;
}

static void test_export_import_across_fork(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    uintptr_t va = reserve(d, 8 * MiB);
    vpmm_drv_handle_t h = create(d, 2 * G);
    map_rw(d, va, 2 * G, h);
    fill(va, 2 * G);
    vpmm_drv_shareable_t sh = export_of(d, h);
    int p[2];
    assert_int_equal(pipe(p), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[1]);
        _exit(child_imports(p[0]));
    }
    close(p[0]);
    /* Under Yama (ptrace_scope 1) a child may take a parent's descriptor only when allowed. */
    (void)prctl(PR_SET_PTRACER, (unsigned long)pid, 0, 0, 0);
    fork_msg_t m = { sh.fd, sh.offset, sh.size };
    assert_int_equal(write(p[1], &m, sizeof m), (ssize_t)sizeof m);
    close(p[1]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    int code = WEXITSTATUS(status);
    assert_int_equal(close(sh.fd), 0);
    if (code == CHILD_OK)
        assert_int_equal(((vbyte_t *)va)[2 * G - 1], 0xee); /* the child's write, seen here */
    unmap_release(d, va, 2 * G, h);
    assert_int_equal(d->va_free(d, va, 8 * MiB), VPMM_DRV_OK);
    close_host(d);
    if (code == CHILD_NOSYS || code == CHILD_DENIED) {
        print_message("skipped: the child could not take the parent's descriptor: %s\n",
                      code == CHILD_NOSYS ? "pidfd_open/pidfd_getfd: ENOSYS (a kernel before 5.6, "
                                            "or valgrind, which does not know them)"
                                          : "pidfd_getfd: EPERM (ptrace restrictions)");
        skip();
    }
    assert_int_equal(code, CHILD_OK);
}

/* Out of descriptors (RLIMIT_NOFILE reached): export and import fail (999, the dup's EMFILE) and
 * change nothing; once a descriptor is free again both work. */
static void test_out_of_descriptors(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    vpmm_drv_handle_t h = create(d, G), imp = 0;
    vpmm_drv_shareable_t sh = export_of(d, h), none = { .fd = -5 };
    struct rlimit old, low;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
    int top = dup(sh.fd); /* the lowest free descriptor: every one below it is in use */
    assert_true(top >= 0);
    assert_int_equal(close(top), 0);
    vpmm_host_counts_t before;
    vpmm_host_counts(d, &before);
    low = old;
    low.rlim_cur = (rlim_t)top; /* none numbered top or above: no new one at all */
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
    vpmm_dres_t re = d->mem_export(d, h, &none), ri = d->mem_import(d, &sh, &imp);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
    expect_failure(d, ri, VPMM_DRV_ERROR, 999, VPMM_DRV_MEM_IMPORT);
    assert_int_equal(re, VPMM_DRV_ERROR);
    assert_int_equal(none.fd, -5);
    assert_int_equal(imp, 0);
    expect_same_counts(d, &before);
    CHECKED(d);
    imp = import_of(d, &sh);
    assert_int_equal(d->mem_release(d, imp), VPMM_DRV_OK);
    assert_int_equal(close(sh.fd), 0);
    assert_int_equal(d->mem_release(d, h), VPMM_DRV_OK);
    expect_empty(d);
    close_host(d);
}

/* ---- descriptors -------------------------------------------------------------------------- */

/* Only imported handles hold a descriptor, and only while they live. */
static void test_import_release_cycles_keep_fds(void **state)
{
    (void)state;
    enum { CYCLES = 10000 };
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    vpmm_driver_t *a = open_host(page, 0), *b = open_host(page, 0);
    uintptr_t va = reserve(b, 4 * page);
    vpmm_drv_handle_t h = create(a, 2 * page);
    vpmm_drv_shareable_t sh = export_of(a, h);
    size_t fds = open_fds();
    for (size_t i = 0; i < CYCLES; i++) {
        vpmm_drv_handle_t imp = 0;
        assert_int_equal(b->mem_import(b, &sh, &imp), VPMM_DRV_OK);
        assert_int_equal(vpmm_host_check(b, 1), 0);
        if (i % 10 == 0) { /* now and then mapped, and released while mapped */
            assert_int_equal(b->mem_map(b, va + page * 2 * (i % 20 == 0), 2 * page, imp, 0),
                             VPMM_DRV_OK);
            assert_int_equal(b->mem_release(b, imp), VPMM_DRV_OK);
            assert_int_equal(b->mem_unmap(b, va + page * 2 * (i % 20 == 0), 2 * page), VPMM_DRV_OK);
        } else {
            assert_int_equal(b->mem_release(b, imp), VPMM_DRV_OK);
        }
        assert_int_equal(vpmm_host_check(b, 1), 0);
        if (i % 100 == 0)
            CHECKED(b);
    }
    assert_int_equal(open_fds(), fds);
    vpmm_host_counts_t c;
    vpmm_host_counts(b, &c);
    assert_int_equal(c.imported, 0);
    assert_int_equal(b->va_free(b, va, 4 * page), VPMM_DRV_OK);
    assert_int_equal(close(sh.fd), 0);
    assert_int_equal(a->mem_release(a, h), VPMM_DRV_OK);
    close_host(b);
    close_host(a);
}

/* The node's last close closes its imports' descriptors, mapped or not. */
static void test_close_closes_imported_fds(void **state)
{
    (void)state;
    vpmm_driver_t *a = open_host(0, 0);
    vpmm_drv_handle_t h = create(a, G);
    vpmm_drv_shareable_t sh = export_of(a, h);
    size_t fds = open_fds();
    vpmm_driver_t *b = open_devices(2, 0), *b1 = NULL;
    assert_int_equal(vpmm_host_open_device(b, 1, &b1), VPMM_DRV_OK);
    uintptr_t va = reserve(b, 8 * MiB);
    vpmm_drv_handle_t i1 = import_of(b, &sh), i2 = import_of(b1, &sh), i3 = import_of(b1, &sh);
    map_rw(b, va, G, i1);
    map_rw(b1, va + G, G, i2);
    assert_int_equal(b1->mem_release(b1, i2), VPMM_DRV_OK); /* still mapped */
    (void)i3;
    CHECKED(b);
    assert_int_equal(open_fds(), fds + 4); /* the node's memfd and three imports */
    close_host(b);
    assert_int_equal(open_fds(), fds + 4); /* b1 still holds the node */
    close_host(b1);
    assert_int_equal(open_fds(), fds);
    assert_int_equal(close(sh.fd), 0);
    assert_int_equal(a->mem_release(a, h), VPMM_DRV_OK);
    close_host(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_export_import_aliasing),
        cmocka_unit_test(test_import_counts_against_no_device),
        cmocka_unit_test(test_export_refused),
        cmocka_unit_test(test_export_follows_the_creating_view),
        cmocka_unit_test(test_import_refused),
        cmocka_unit_test(test_import_keeps_the_exporter_alive),
        cmocka_unit_test(test_import_from_another_node),
        cmocka_unit_test(test_export_import_across_fork),
        cmocka_unit_test(test_import_release_cycles_keep_fds),
        cmocka_unit_test(test_close_closes_imported_fds),
        cmocka_unit_test(test_out_of_descriptors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
