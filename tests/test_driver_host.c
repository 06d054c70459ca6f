/*
 * test_driver_host.c — tests of the host emulation backend (src/driver_host.c): VA reservations,
 * handles and the memory limit, map/unmap/set_access validation, real aliasing, deferred release,
 * streams/events/barriers, capture emulation, graphs and user objects (whose destructors wait for
 * graphs, execs and their launches), and the fd budget (thousands of handles, one memfd).
 *
 * Every test opens its own instance and calls vpmm_host_check() after each mutation (CHECKED)
 * and before closing. Inaccessible memory is never touched: protections are read from the
 * kernel's table (/proc/self/maps), so a PROT_NONE page raises no signal and valgrind sees no
 * access to it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "driver.h"
#include "driver_host.h"

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define TiB ((size_t)1 << 40)
#define G   (2 * MiB)

/* 8 TiB: the pool's default chunk. It costs nothing (PROT_NONE, MAP_NORESERVE) and fits next to
 * ASan's shadow on x86-64 (checked with gcc and clang); TSan and MSan claim more of the address
 * space (1 TiB failed intermittently under TSan), so those builds use 64 GiB. */
#if defined(__SANITIZE_THREAD__)
#define HUGE_RESERVATION (64 * GiB)
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define HUGE_RESERVATION (64 * GiB)
#endif
#endif
#ifndef HUGE_RESERVATION
#define HUGE_RESERVATION (8 * TiB)
#endif

/* valgrind manages the client's address space itself and refuses terabyte mappings. */
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif

static size_t huge_reservation(void)
{
    return RUNNING_ON_VALGRIND ? 16 * GiB : HUGE_RESERVATION;
}

/* Streams as tests name them: any pointer value is a stream. */
#define S1 ((vpmm_stream_t)(uintptr_t)0x1001)
#define S2 ((vpmm_stream_t)(uintptr_t)0x1002)
#define S3 ((vpmm_stream_t)(uintptr_t)0x1003)

#define CHECKED(d) assert_int_equal(vpmm_host_check((d), 1), 0)

/*
 * Aliased mappings break a compiler assumption: two different addresses are two different bytes.
 * Accesses that must observe a write through another alias go through volatile pointers, and
 * bulk copies are fenced with a compiler barrier, or -O2 may reorder the read before the write.
 */
typedef volatile unsigned char vbyte_t;
#define ALIAS_BARRIER() __asm__ __volatile__("" ::: "memory")

static vpmm_driver_t *open_host(size_t gran, size_t limit)
{
    vpmm_host_options_t opt = { .granularity = gran, .memory_limit = limit };
    vpmm_driver_t *d = NULL;
    assert_int_equal(vpmm_host_open(&opt, &d), VPMM_DRV_OK);
    assert_non_null(d);
    CHECKED(d);
    return d;
}

static void close_host(vpmm_driver_t *d)
{
    CHECKED(d);
    d->close(d);
}

/* The kernel's view of the mapping holding p: its permissions ("rw-s", "---p") and path. */
typedef struct vma {
    int found;
    char perms[5];
    char path[128];
} vma_t;

static vma_t vma_at(const void *p)
{
    vma_t v = { 0 };
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    char line[512];
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        int path_at = 0;
        if (sscanf(line, "%lx-%lx %4s %*s %*s %*s %n", &lo, &hi, v.perms, &path_at) < 3)
            continue;
        if ((uintptr_t)p < lo || (uintptr_t)p >= hi)
            continue;
        v.found = 1;
        if (path_at > 0)
            snprintf(v.path, sizeof v.path, "%.*s", (int)strcspn(line + path_at, "\n"),
                     line + path_at);
        break;
    }
    fclose(f);
    return v;
}

static int readable(const void *p)
{
    vma_t v = vma_at(p);
    return v.found && v.perms[0] == 'r';
}

static int writable(const void *p)
{
    vma_t v = vma_at(p);
    return v.found && v.perms[1] == 'w';
}

/* 1 if p lies in a shared mapping of the backend's memfd (not a PROT_NONE placeholder). */
static int memfd_backed(const void *p)
{
    vma_t v = vma_at(p);
    return v.found && v.perms[3] == 's' && strstr(v.path, "memfd:vpmm-host") != NULL;
}

static void expect_failure(vpmm_driver_t *d, vpmm_dres_t got, vpmm_dres_t want, int code,
                           vpmm_drv_entry_t entry)
{
    assert_int_equal(got, want);
    assert_int_equal(d->last_code, code);
    assert_string_equal(d->last_call, vpmm_drv_entry_name(entry));
}

static void expect_same_counts(vpmm_driver_t *d, const vpmm_host_counts_t *before)
{
    vpmm_host_counts_t now;
    vpmm_host_counts(d, &now);
    assert_int_equal(now.handles, before->handles);
    assert_int_equal(now.handle_bytes, before->handle_bytes);
    assert_int_equal(now.mappings, before->mappings);
    assert_int_equal(now.mapped_bytes, before->mapped_bytes);
    assert_int_equal(now.reservations, before->reservations);
    assert_int_equal(now.reserved_bytes, before->reserved_bytes);
    assert_int_equal(now.events, before->events);
    assert_int_equal(now.graphs, before->graphs);
    assert_int_equal(now.user_objects, before->user_objects);
}

static void expect_empty(vpmm_driver_t *d)
{
    vpmm_host_counts_t c;
    vpmm_host_counts(d, &c);
    assert_int_equal(c.handles, 0);
    assert_int_equal(c.handle_bytes, 0);
    assert_int_equal(c.mappings, 0);
    assert_int_equal(c.mapped_bytes, 0);
    assert_int_equal(c.reservations, 0);
    assert_int_equal(c.reserved_bytes, 0);
    assert_int_equal(c.events, 0);
    assert_int_equal(c.graphs, 0);
    assert_int_equal(c.user_objects, 0);
    assert_int_equal(c.touched_bytes, 0);
    assert_int_equal(vpmm_host_graphs(d), 0);
    assert_int_equal(vpmm_host_user_objects(d), 0);
}

static uintptr_t reserve(vpmm_driver_t *d, size_t size)
{
    uintptr_t va = 0;
    assert_int_equal(d->va_reserve(d, size, 0, &va), VPMM_DRV_OK);
    CHECKED(d);
    return va;
}

static vpmm_drv_handle_t create(vpmm_driver_t *d, size_t size)
{
    vpmm_drv_handle_t h = 0;
    assert_int_equal(d->mem_create(d, size, &h), VPMM_DRV_OK);
    assert_true(h != 0);
    CHECKED(d);
    return h;
}

static void map_rw(vpmm_driver_t *d, uintptr_t va, size_t size, vpmm_drv_handle_t h, size_t off)
{
    assert_int_equal(d->mem_map(d, va, size, h, off), VPMM_DRV_OK);
    assert_int_equal(d->set_access(d, va, size), VPMM_DRV_OK);
    CHECKED(d);
}

/* ---- basics ------------------------------------------------------------------------------- */

static void test_entry_names(void **state)
{
    (void)state;
    static const char *const want[VPMM_DRV_ENTRY_COUNT] = {
        "cuMemGetAllocationGranularity",
        "cuMemAddressReserve",
        "cuMemAddressFree",
        "cuMemCreate",
        "cuMemRelease",
        "cuMemMap",
        "cuMemUnmap",
        "cuMemSetAccess",
        "cuEventCreate",
        "cuEventDestroy",
        "cuEventRecord",
        "cuEventQuery",
        "cuStreamWaitEvent",
        "cuStreamGetCaptureInfo",
        "cuMemGetInfo",
        "cuCtxSynchronize",
        "cuStreamBeginCapture",
        "cuStreamEndCapture",
        "cuUserObjectCreate",
        "cuGraphRetainUserObject",
        "cuUserObjectRelease",
        "cuGraphDestroy",
    };
    for (int e = 0; e < VPMM_DRV_ENTRY_COUNT; e++)
        assert_string_equal(vpmm_drv_entry_name((vpmm_drv_entry_t)e), want[e]);
    assert_string_equal(vpmm_drv_entry_name(VPMM_DRV_ENTRY_COUNT), "?");
    assert_string_equal(vpmm_drv_entry_name((vpmm_drv_entry_t)-1), "?");
}

static void test_open_options(void **state)
{
    (void)state;
    vpmm_driver_t *d = (vpmm_driver_t *)&d;
    assert_int_equal(vpmm_host_open(NULL, NULL), VPMM_DRV_INVALID);
    vpmm_host_options_t bad = { .granularity = 1000 };
    assert_int_equal(vpmm_host_open(&bad, &d), VPMM_DRV_INVALID);
    assert_null(d);

    assert_int_equal(vpmm_host_open(NULL, &d), VPMM_DRV_OK);
    assert_string_equal(d->name, "host");
    size_t g = 0, free_b = 0, total = 0;
    assert_int_equal(d->granularity(d, &g), VPMM_DRV_OK);
    assert_int_equal(g, 2 * MiB);
    assert_int_equal(d->mem_get_info(d, &free_b, &total), VPMM_DRV_OK);
    assert_int_equal(total, 80 * GiB);
    assert_int_equal(free_b, 80 * GiB);
    expect_failure(d, d->granularity(d, NULL), VPMM_DRV_INVALID, 1, VPMM_DRV_GRANULARITY);
    expect_failure(d, d->mem_get_info(d, NULL, &total), VPMM_DRV_INVALID, 1, VPMM_DRV_MEM_GET_INFO);
    expect_failure(d, d->mem_get_info(d, &free_b, NULL), VPMM_DRV_INVALID, 1,
                   VPMM_DRV_MEM_GET_INFO);
    expect_empty(d);
    close_host(d);

    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    d = open_host(page, 3 * page);
    assert_int_equal(d->granularity(d, &g), VPMM_DRV_OK);
    assert_int_equal(g, page);
    assert_int_equal(d->mem_get_info(d, &free_b, &total), VPMM_DRV_OK);
    assert_int_equal(total, 3 * page);
    close_host(d);
}

/* The vpmm_host_* controls refuse anything that is not a host driver, without crashing. */
static void test_controls_reject_foreign_driver(void **state)
{
    (void)state;
    vpmm_driver_t fake = { .name = "fake" };
    vpmm_host_counts_t c;
    memset(&c, 0xff, sizeof c);
    uint64_t id = 7;
    assert_null(vpmm_host_stream_create(NULL));
    assert_null(vpmm_host_stream_create(&fake));
    assert_int_equal(vpmm_host_enqueue(&fake, S1), 0);
    vpmm_host_complete(&fake, S1);
    vpmm_host_complete_all(NULL);
    assert_int_equal(vpmm_host_advance(&fake, S1, 3), 0);
    assert_int_equal(vpmm_host_stream_idle(&fake, S1), 1);
    assert_int_equal(vpmm_host_begin_capture(&fake, S1, &id), VPMM_DRV_INVALID);
    assert_int_equal(id, 7);
    assert_int_equal(vpmm_host_end_capture(NULL, S1), VPMM_DRV_INVALID);
    vpmm_host_exec_t x = (vpmm_host_exec_t)(uintptr_t)5;
    vpmm_graph_t g = (vpmm_graph_t)(uintptr_t)6;
    assert_int_equal(vpmm_host_graph_instantiate(&fake, g, &x), VPMM_DRV_INVALID);
    assert_ptr_equal(x, (vpmm_host_exec_t)(uintptr_t)5);
    assert_int_equal(vpmm_host_graph_launch(NULL, x, S1), VPMM_DRV_INVALID);
    assert_int_equal(vpmm_host_graph_destroy(&fake, g), VPMM_DRV_INVALID);
    assert_int_equal(vpmm_host_exec_destroy(&fake, x), VPMM_DRV_INVALID);
    assert_int_equal(vpmm_host_user_objects(&fake), 0);
    assert_int_equal(vpmm_host_graphs(NULL), 0);
    vpmm_host_counts(&fake, &c);
    assert_int_equal(c.handles, 0);
    assert_int_equal(c.events, 0);
    assert_int_equal(c.graphs, 0);
    assert_int_equal(c.user_objects, 0);
    vpmm_host_counts(&fake, NULL);
    assert_int_equal(vpmm_host_wait_count(&fake), 0);
    assert_null(vpmm_host_wait_at(&fake, 0).waiter);
    assert_int_equal(vpmm_host_check(&fake, 0), 1);
    assert_int_equal(vpmm_host_check(NULL, 0), 1);
}

/* ---- VA reservations ---------------------------------------------------------------------- */

static void test_reserve_free(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    const size_t huge = huge_reservation();
    uintptr_t hv = 0, big = 0, va = 0x1234;

    /* A huge reservation costs nothing (PROT_NONE, NORESERVE). */
    assert_int_equal(d->va_reserve(d, huge, 0, &hv), VPMM_DRV_OK);
    assert_true(hv != 0 && hv % G == 0);
    assert_false(readable((void *)hv));
    assert_false(readable((void *)(hv + huge - 1)));
    CHECKED(d);

    /* Alignment is honoured by over-reserving and trimming. */
    assert_int_equal(d->va_reserve(d, 4 * MiB, GiB, &big), VPMM_DRV_OK);
    assert_int_equal(big % GiB, 0);
    CHECKED(d);

    vpmm_host_counts_t c;
    vpmm_host_counts(d, &c);
    assert_int_equal(c.reservations, 2);
    assert_int_equal(c.reserved_bytes, huge + 4 * MiB);

    /* Bad arguments do nothing. */
    expect_failure(d, d->va_reserve(d, 0, 0, &va), VPMM_DRV_INVALID, 1, VPMM_DRV_VA_RESERVE);
    expect_failure(d, d->va_reserve(d, G + 4096, 0, &va), VPMM_DRV_INVALID, 1, VPMM_DRV_VA_RESERVE);
    expect_failure(d, d->va_reserve(d, G, G / 2, &va), VPMM_DRV_INVALID, 1, VPMM_DRV_VA_RESERVE);
    expect_failure(d, d->va_reserve(d, G, 0, NULL), VPMM_DRV_INVALID, 1, VPMM_DRV_VA_RESERVE);
    expect_failure(d, d->va_reserve(d, SIZE_MAX - G + 1, 0, &va), VPMM_DRV_OUT_OF_MEMORY, 2,
                   VPMM_DRV_VA_RESERVE);
    assert_int_equal(va, 0x1234);
    expect_same_counts(d, &c);

    /* va_free takes exactly one whole reservation. */
    expect_failure(d, d->va_free(d, hv, huge - G), VPMM_DRV_INVALID, 1, VPMM_DRV_VA_FREE);
    expect_failure(d, d->va_free(d, hv + G, huge - G), VPMM_DRV_INVALID, 1, VPMM_DRV_VA_FREE);
    expect_failure(d, d->va_free(d, hv, huge + G), VPMM_DRV_INVALID, 1, VPMM_DRV_VA_FREE);
    expect_failure(d, d->va_free(d, 0, G), VPMM_DRV_INVALID, 1, VPMM_DRV_VA_FREE);
    expect_failure(d, d->va_free(d, hv, 0), VPMM_DRV_INVALID, 1, VPMM_DRV_VA_FREE);
    expect_same_counts(d, &c);

    assert_int_equal(d->va_free(d, hv, huge), VPMM_DRV_OK);
    CHECKED(d);
    expect_failure(d, d->va_free(d, hv, huge), VPMM_DRV_INVALID, 1, VPMM_DRV_VA_FREE);
    assert_int_equal(d->va_free(d, big, 4 * MiB), VPMM_DRV_OK);
    expect_empty(d);
    close_host(d);
}

/* Counts destructor runs; checks the instance from inside the destructor (it must be consistent
 * by then) and records instead of asserting (a longjmp out of a driver call would be wrong). */
typedef struct dtor_log {
    vpmm_driver_t *d;
    int runs;
    size_t bad_in_dtor;
} dtor_log_t;

static void dtor(void *arg)
{
    dtor_log_t *l = arg;
    l->runs++;
    if (l->d)
        l->bad_in_dtor += vpmm_host_check(l->d, 1);
}

static vpmm_drv_uobj_t uobj_new(vpmm_driver_t *d, dtor_log_t *l)
{
    vpmm_drv_uobj_t o = NULL;
    assert_int_equal(d->user_object_create(d, dtor, l, &o), VPMM_DRV_OK);
    assert_non_null(o);
    CHECKED(d);
    return o;
}

/* close() gives back what is left: reservations with live mappings, handles, events, graphs,
 * execs (one destroyed with a launch pending) and user objects, running no destructor. */
static void test_close_releases_everything(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 64 * MiB);
    uintptr_t va = reserve(d, 8 * MiB);
    vpmm_drv_handle_t h = create(d, 4 * MiB);
    map_rw(d, va, 4 * MiB, h, 0);
    memset((void *)va, 1, 4 * MiB);
    vpmm_drv_event_t ev;
    assert_int_equal(d->event_create(d, &ev), VPMM_DRV_OK);
    vpmm_host_enqueue(d, S1);
    assert_int_equal(d->event_record(d, ev, S1), VPMM_DRV_OK);
    assert_int_equal(d->stream_wait_event(d, S2, ev), VPMM_DRV_OK);
    uint64_t id;
    assert_int_equal(vpmm_host_begin_capture(d, S3, &id), VPMM_DRV_OK);

    dtor_log_t log = { 0 };
    vpmm_drv_uobj_t kept = uobj_new(d, &log), held = uobj_new(d, &log), cap = uobj_new(d, &log);
    (void)kept;
    vpmm_graph_t g = NULL, capturing = NULL;
    vpmm_host_exec_t live, zombie;
    assert_int_equal(d->begin_capture(d, S2, VPMM_CAPTURE_MODE_GLOBAL), VPMM_DRV_OK);
    assert_int_equal(d->end_capture(d, S2, &g), VPMM_DRV_OK);
    assert_int_equal(d->graph_retain_user_object(d, g, held), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graph_instantiate(d, g, &live), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graph_instantiate(d, g, &zombie), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graph_launch(d, zombie, S1), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_exec_destroy(d, zombie), VPMM_DRV_OK);
    assert_int_equal(d->capture_info(d, S3, &(vpmm_capture_status_t){ 0 }, NULL, &capturing),
                     VPMM_DRV_OK);
    assert_int_equal(d->graph_retain_user_object(d, capturing, cap), VPMM_DRV_OK);
    vpmm_host_counts_t c;
    vpmm_host_counts(d, &c);
    assert_int_equal(c.graphs, 4); /* g, the capturing graph, live, zombie */
    assert_int_equal(c.user_objects, 3);
    close_host(d); /* leak checkers (ASan, valgrind) verify the rest */
    assert_int_equal(log.runs, 0);
}

/* ---- handles and the memory limit ------------------------------------------------------------ */

static void test_create_release_limit(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 64 * MiB);
    vpmm_drv_handle_t a = create(d, 32 * MiB), b = create(d, 30 * MiB), c = create(d, G);
    assert_true(a != b && b != c && a != c);

    size_t free_b = 1, total = 0;
    assert_int_equal(d->mem_get_info(d, &free_b, &total), VPMM_DRV_OK);
    assert_int_equal(free_b, 0);
    assert_int_equal(total, 64 * MiB);

    /* Over the limit: CUDA_ERROR_OUT_OF_MEMORY, no handle. */
    vpmm_drv_handle_t x = 42;
    vpmm_host_counts_t before;
    vpmm_host_counts(d, &before);
    expect_failure(d, d->mem_create(d, G, &x), VPMM_DRV_OUT_OF_MEMORY, 2, VPMM_DRV_MEM_CREATE);
    assert_int_equal(x, 42);
    expect_same_counts(d, &before);
    CHECKED(d);

    /* Recovery: releasing makes room again. */
    assert_int_equal(d->mem_release(d, b), VPMM_DRV_OK);
    CHECKED(d);
    assert_int_equal(d->mem_get_info(d, &free_b, &total), VPMM_DRV_OK);
    assert_int_equal(free_b, 30 * MiB);
    vpmm_drv_handle_t b2 = create(d, 16 * MiB), b3 = create(d, 14 * MiB);
    assert_true(b2 != b && b3 != b); /* a released id is never handed out again */
    expect_failure(d, d->mem_create(d, G, &x), VPMM_DRV_OUT_OF_MEMORY, 2, VPMM_DRV_MEM_CREATE);

    /* Bad sizes and ids. */
    expect_failure(d, d->mem_create(d, 0, &x), VPMM_DRV_INVALID, 1, VPMM_DRV_MEM_CREATE);
    expect_failure(d, d->mem_create(d, G + 4096, &x), VPMM_DRV_INVALID, 1, VPMM_DRV_MEM_CREATE);
    expect_failure(d, d->mem_create(d, G, NULL), VPMM_DRV_INVALID, 1, VPMM_DRV_MEM_CREATE);
    expect_failure(d, d->mem_create(d, SIZE_MAX - G + 1, &x), VPMM_DRV_OUT_OF_MEMORY, 2,
                   VPMM_DRV_MEM_CREATE);
    expect_failure(d, d->mem_release(d, b), VPMM_DRV_INVALID, 1, VPMM_DRV_MEM_RELEASE);
    expect_failure(d, d->mem_release(d, 0), VPMM_DRV_INVALID, 1, VPMM_DRV_MEM_RELEASE);
    expect_failure(d, d->mem_release(d, 12345), VPMM_DRV_INVALID, 1, VPMM_DRV_MEM_RELEASE);
    expect_failure(d, d->mem_release(d, UINT64_MAX), VPMM_DRV_INVALID, 1, VPMM_DRV_MEM_RELEASE);
    CHECKED(d);

    assert_int_equal(d->mem_release(d, a), VPMM_DRV_OK);
    assert_int_equal(d->mem_release(d, c), VPMM_DRV_OK);
    assert_int_equal(d->mem_release(d, b3), VPMM_DRV_OK);
    assert_int_equal(d->mem_release(d, b2), VPMM_DRV_OK);
    expect_empty(d);
    close_host(d);
}

/* Freed extents are reused first-fit and their memory really goes back to the kernel. */
static void test_memory_returned(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    uintptr_t va = reserve(d, 16 * MiB);
    vpmm_drv_handle_t h[3];
    for (int i = 0; i < 3; i++) {
        h[i] = create(d, G);
        map_rw(d, va + (size_t)i * G, G, h[i], 0);
        memset((void *)(va + (size_t)i * G), 0x5a, G);
    }
    vpmm_host_counts_t c;
    vpmm_host_counts(d, &c);
    assert_int_equal(c.touched_bytes, 3 * G);

    /* Middle handle: its extent is punched out. */
    assert_int_equal(d->mem_unmap(d, va + G, G), VPMM_DRV_OK);
    assert_int_equal(d->mem_release(d, h[1]), VPMM_DRV_OK);
    CHECKED(d);
    vpmm_host_counts(d, &c);
    assert_int_equal(c.touched_bytes, 2 * G);

    /* The hole is reused (first fit), and reads back as zero: the old bytes are gone. */
    h[1] = create(d, G);
    map_rw(d, va + 4 * G, G, h[1], 0);
    assert_int_equal(((vbyte_t *)va)[4 * G], 0);
    assert_int_equal(((vbyte_t *)va)[5 * G - 1], 0);

    for (int i = 0; i < 3; i++) {
        uintptr_t at = va + (i == 1 ? 4 : (size_t)i) * G;
        assert_int_equal(d->mem_unmap(d, at, G), VPMM_DRV_OK);
        assert_int_equal(d->mem_release(d, h[i]), VPMM_DRV_OK);
        CHECKED(d);
    }
    assert_int_equal(d->va_free(d, va, 16 * MiB), VPMM_DRV_OK);
    expect_empty(d);
    close_host(d);
}

/* ---- mappings ------------------------------------------------------------------------------ */

static void test_map_validation(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 64 * MiB);
    uintptr_t va = reserve(d, 16 * MiB);
    vpmm_drv_handle_t h = create(d, 4 * MiB), gone = create(d, G);
    assert_int_equal(d->mem_release(d, gone), VPMM_DRV_OK);
    map_rw(d, va + 8 * MiB, 4 * MiB, h, 0); /* an existing mapping to collide with */

    vpmm_host_counts_t before;
    vpmm_host_counts(d, &before);
    struct {
        uintptr_t va;
        size_t size;
        vpmm_drv_handle_t h;
        size_t off;
    } bad[] = {
        { va + 4096, G, h, 0 },           /* misaligned address */
        { va, G + 4096, h, 0 },           /* misaligned size */
        { va, G, h, 4096 },               /* misaligned offset */
        { va, 0, h, 0 },                  /* empty */
        { va, G, h, 4 * MiB },            /* offset at the end of the handle */
        { va, 4 * MiB, h, G },            /* offset + size past the handle */
        { va, 6 * MiB, h, 0 },            /* larger than the handle */
        { va, G, h, SIZE_MAX - G + 1 },   /* offset overflow */
        { va + 14 * MiB, 4 * MiB, h, 0 }, /* runs past the end of the reservation */
        { va - G, 4 * MiB, h, 0 },        /* starts before the reservation */
        { G, G, h, 0 },                   /* not reserved at all */
        { va, G, 0, 0 },                  /* handle 0 */
        { va, G, 9999, 0 },               /* unknown handle */
        { va, G, gone, 0 },               /* released handle */
        { va + 6 * MiB, 4 * MiB, h, 0 },  /* overlaps the existing mapping's head */
        { va + 10 * MiB, 4 * MiB, h, 0 }, /* overlaps its tail */
        { va + 8 * MiB, G, h, 0 },        /* inside it */
        { va, 16 * MiB, h, 0 },           /* covers it (and is too large) */
        { UINTPTR_MAX - G + 1, G, h, 0 }, /* wraps around */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        d->last_code = 0;
        expect_failure(d, d->mem_map(d, bad[i].va, bad[i].size, bad[i].h, bad[i].off),
                       VPMM_DRV_INVALID, 1, VPMM_DRV_MEM_MAP);
        expect_same_counts(d, &before);
        CHECKED(d);
    }
    /* The failed attempts left the placeholder in place. */
    assert_false(readable((void *)va));
    assert_false(readable((void *)(va + 6 * MiB)));
    assert_true(readable((void *)(va + 8 * MiB)));

    assert_int_equal(d->mem_unmap(d, va + 8 * MiB, 4 * MiB), VPMM_DRV_OK);
    assert_int_equal(d->mem_release(d, h), VPMM_DRV_OK);
    assert_int_equal(d->va_free(d, va, 16 * MiB), VPMM_DRV_OK);
    expect_empty(d);
    close_host(d);
}

/* One handle at two addresses: a write through one is read through the other. */
static void test_aliasing(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 64 * MiB);
    uintptr_t va = reserve(d, 8 * MiB), other = reserve(d, 4 * MiB);
    vpmm_drv_handle_t h = create(d, G);
    map_rw(d, va, G, h, 0);
    map_rw(d, other + G, G, h, 0); /* in another reservation */
    map_rw(d, va + 4 * MiB, G, h, 0);

    vbyte_t *a = (vbyte_t *)va, *b = (vbyte_t *)(va + 4 * MiB), *c = (vbyte_t *)(other + G);
    for (size_t i = 0; i < G; i += 4096)
        a[i] = (unsigned char)(i / 4096 + 1);
    for (size_t i = 0; i < G; i += 4096) {
        assert_int_equal(b[i], (unsigned char)(i / 4096 + 1));
        assert_int_equal(c[i], (unsigned char)(i / 4096 + 1));
    }
    memcpy((char *)b + 100, "alias", 6);
    ALIAS_BARRIER();
    assert_string_equal((const char *)a + 100, "alias");
    assert_string_equal((const char *)c + 100, "alias");

    vpmm_host_counts_t cnt;
    vpmm_host_counts(d, &cnt);
    assert_int_equal(cnt.handles, 1);
    assert_int_equal(cnt.handle_bytes, G);
    assert_int_equal(cnt.mappings, 3);
    assert_int_equal(cnt.mapped_bytes, 3 * G);
    assert_int_equal(cnt.touched_bytes, G);

    /* Unmapping one alias leaves the others intact. */
    assert_int_equal(d->mem_unmap(d, va, G), VPMM_DRV_OK);
    assert_string_equal((const char *)b + 100, "alias");
    assert_int_equal(d->mem_unmap(d, va + 4 * MiB, G), VPMM_DRV_OK);
    assert_int_equal(d->mem_unmap(d, other + G, G), VPMM_DRV_OK);
    assert_int_equal(d->mem_release(d, h), VPMM_DRV_OK);
    assert_int_equal(d->va_free(d, va, 8 * MiB), VPMM_DRV_OK);
    assert_int_equal(d->va_free(d, other, 4 * MiB), VPMM_DRV_OK);
    expect_empty(d);
    close_host(d);
}

/*
 * Only whole handles are mapped, as the CUDA 13 driver on an H100 answers (CUDA_ERROR_NOT_SUPPORTED
 * for a non-zero offset or a smaller size, measured by tests/test_driver_cuda.c): the emulation
 * must refuse the same calls, so host tests catch code that relies on partial mappings.
 */
static void test_partial_mapping_refused(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 64 * MiB);
    uintptr_t va = reserve(d, 8 * MiB);
    vpmm_drv_handle_t h = create(d, 2 * G);
    vpmm_host_counts_t before;
    vpmm_host_counts(d, &before);
    expect_failure(d, d->mem_map(d, va + 3 * G, G, h, G), VPMM_DRV_NOT_SUPPORTED, 801,
                   VPMM_DRV_MEM_MAP);
    expect_failure(d, d->mem_map(d, va + 3 * G, G, h, 0), VPMM_DRV_NOT_SUPPORTED, 801,
                   VPMM_DRV_MEM_MAP);
    expect_same_counts(d, &before);
    CHECKED(d);
    /* The whole handle maps. */
    map_rw(d, va, 2 * G, h, 0);
    assert_int_equal(d->mem_unmap(d, va, 2 * G), VPMM_DRV_OK);
    assert_int_equal(d->mem_release(d, h), VPMM_DRV_OK);
    assert_int_equal(d->va_free(d, va, 8 * MiB), VPMM_DRV_OK);
    expect_empty(d);
    close_host(d);
}

static void test_set_access_rules(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 64 * MiB);
    uintptr_t va = reserve(d, 16 * MiB);
    vpmm_drv_handle_t h1 = create(d, G), h2 = create(d, 2 * G), h3 = create(d, G);

    /* Nothing mapped yet. */
    expect_failure(d, d->set_access(d, va, G), VPMM_DRV_INVALID, 1, VPMM_DRV_SET_ACCESS);

    /* A fresh mapping is inaccessible until set_access. */
    assert_int_equal(d->mem_map(d, va, G, h1, 0), VPMM_DRV_OK);
    assert_int_equal(d->mem_map(d, va + G, 2 * G, h2, 0), VPMM_DRV_OK);
    assert_int_equal(d->mem_map(d, va + 4 * G, G, h3, 0), VPMM_DRV_OK); /* gap at 3G */
    CHECKED(d);
    assert_false(readable((void *)va));
    assert_false(readable((void *)(va + G)));

    /* Bad ranges: misaligned, empty, a gap, past the end. */
    expect_failure(d, d->set_access(d, va + 4096, G), VPMM_DRV_INVALID, 1, VPMM_DRV_SET_ACCESS);
    expect_failure(d, d->set_access(d, va, G + 4096), VPMM_DRV_INVALID, 1, VPMM_DRV_SET_ACCESS);
    expect_failure(d, d->set_access(d, va, 0), VPMM_DRV_INVALID, 1, VPMM_DRV_SET_ACCESS);
    expect_failure(d, d->set_access(d, va, 5 * G), VPMM_DRV_INVALID, 1, VPMM_DRV_SET_ACCESS);
    expect_failure(d, d->set_access(d, va + 2 * G, 2 * G), VPMM_DRV_INVALID, 1,
                   VPMM_DRV_SET_ACCESS);
    assert_false(readable((void *)va));

    /* Part of one mapping, then a range spanning two adjacent mappings. */
    assert_int_equal(d->set_access(d, va + 2 * G, G), VPMM_DRV_OK);
    assert_false(readable((void *)(va + G)));
    assert_true(writable((void *)(va + 2 * G)));
    assert_int_equal(d->set_access(d, va, 3 * G), VPMM_DRV_OK);
    assert_true(writable((void *)va));
    assert_true(writable((void *)(va + 3 * G - 1)));
    assert_false(readable((void *)(va + 3 * G)));
    assert_false(readable((void *)(va + 4 * G)));
    CHECKED(d);

    assert_int_equal(d->mem_unmap(d, va, G), VPMM_DRV_OK);
    assert_int_equal(d->mem_unmap(d, va + G, 2 * G), VPMM_DRV_OK);
    assert_int_equal(d->mem_unmap(d, va + 4 * G, G), VPMM_DRV_OK);
    assert_int_equal(d->mem_release(d, h1), VPMM_DRV_OK);
    assert_int_equal(d->mem_release(d, h2), VPMM_DRV_OK);
    assert_int_equal(d->mem_release(d, h3), VPMM_DRV_OK);
    assert_int_equal(d->va_free(d, va, 16 * MiB), VPMM_DRV_OK);
    expect_empty(d);
    close_host(d);
}

static void test_unmap_rules(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 64 * MiB);
    uintptr_t va = reserve(d, 16 * MiB);
    vpmm_drv_handle_t h = create(d, 4 * MiB), h2 = create(d, G);
    map_rw(d, va, 4 * MiB, h, 0);
    map_rw(d, va + 4 * MiB, G, h2, 0);
    memset((void *)va, 0xcd, 4 * MiB);

    vpmm_host_counts_t before;
    vpmm_host_counts(d, &before);
    expect_failure(d, d->mem_unmap(d, va, G), VPMM_DRV_INVALID, 1, VPMM_DRV_MEM_UNMAP);
    expect_failure(d, d->mem_unmap(d, va + G, G), VPMM_DRV_INVALID, 1, VPMM_DRV_MEM_UNMAP);
    expect_failure(d, d->mem_unmap(d, va + G, 3 * G), VPMM_DRV_INVALID, 1, VPMM_DRV_MEM_UNMAP);
    expect_failure(d, d->mem_unmap(d, va, 6 * MiB), VPMM_DRV_INVALID, 1, VPMM_DRV_MEM_UNMAP);
    expect_failure(d, d->mem_unmap(d, va + 4096, G), VPMM_DRV_INVALID, 1, VPMM_DRV_MEM_UNMAP);
    expect_failure(d, d->mem_unmap(d, va, 0), VPMM_DRV_INVALID, 1, VPMM_DRV_MEM_UNMAP);
    expect_failure(d, d->mem_unmap(d, va + 8 * MiB, G), VPMM_DRV_INVALID, 1, VPMM_DRV_MEM_UNMAP);
    expect_same_counts(d, &before);
    assert_int_equal(((unsigned char *)va)[3 * MiB], 0xcd); /* still mapped and accessible */

    /* va_free refuses while anything is mapped. */
    expect_failure(d, d->va_free(d, va, 16 * MiB), VPMM_DRV_INVALID, 1, VPMM_DRV_VA_FREE);
    expect_same_counts(d, &before);

    /* The exact mapping: access is gone, the VA stays reserved and can be mapped again. */
    assert_int_equal(d->mem_unmap(d, va, 4 * MiB), VPMM_DRV_OK);
    CHECKED(d);
    assert_false(readable((void *)va));
    assert_false(readable((void *)(va + 4 * MiB - 1)));
    assert_false(memfd_backed((void *)va)); /* a private anonymous placeholder again */
    assert_true(vma_at((void *)va).found);  /* still reserved */
    assert_true(memfd_backed((void *)(va + 4 * MiB)));
    assert_true(readable((void *)(va + 4 * MiB))); /* the neighbour is untouched */
    expect_failure(d, d->set_access(d, va, G), VPMM_DRV_INVALID, 1, VPMM_DRV_SET_ACCESS);
    expect_failure(d, d->mem_unmap(d, va, 4 * MiB), VPMM_DRV_INVALID, 1, VPMM_DRV_MEM_UNMAP);
    vpmm_host_counts_t after;
    vpmm_host_counts(d, &after);
    assert_int_equal(after.mappings, 1);
    assert_int_equal(after.mapped_bytes, G);
    assert_int_equal(after.reservations, 1);

    map_rw(d, va + 6 * MiB, 4 * MiB, h, 0); /* same handle, different place: contents kept */
    assert_int_equal(((vbyte_t *)va)[6 * MiB + 3 * MiB], 0xcd);
    assert_int_equal(d->mem_unmap(d, va + 6 * MiB, 4 * MiB), VPMM_DRV_OK);
    assert_int_equal(d->mem_unmap(d, va + 4 * MiB, G), VPMM_DRV_OK);
    assert_int_equal(d->va_free(d, va, 16 * MiB), VPMM_DRV_OK);
    assert_int_equal(d->mem_release(d, h), VPMM_DRV_OK);
    assert_int_equal(d->mem_release(d, h2), VPMM_DRV_OK);
    expect_empty(d);
    close_host(d);
}

/* cuMemRelease of a mapped handle succeeds; the memory goes back at the last unmap. */
static void test_release_while_mapped(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 16 * MiB);
    uintptr_t va = reserve(d, 8 * MiB);
    vpmm_drv_handle_t h = create(d, G);
    map_rw(d, va, G, h, 0);
    map_rw(d, va + 2 * G, G, h, 0);
    memset((void *)va, 0xab, G);

    assert_int_equal(d->mem_release(d, h), VPMM_DRV_OK);
    CHECKED(d);
    vpmm_host_counts_t c;
    vpmm_host_counts(d, &c);
    assert_int_equal(c.handles, 1);
    assert_int_equal(c.handle_bytes, G);
    assert_int_equal(c.touched_bytes, G);
    size_t free_b, total;
    assert_int_equal(d->mem_get_info(d, &free_b, &total), VPMM_DRV_OK);
    assert_int_equal(free_b, 16 * MiB - G);

    /* The id is dead for the caller, but the mappings still work. */
    expect_failure(d, d->mem_release(d, h), VPMM_DRV_INVALID, 1, VPMM_DRV_MEM_RELEASE);
    expect_failure(d, d->mem_map(d, va + G, G, h, 0), VPMM_DRV_INVALID, 1, VPMM_DRV_MEM_MAP);
    assert_int_equal(((unsigned char *)va)[G - 1], 0xab);
    assert_int_equal(((vbyte_t *)va)[3 * G - 1], 0xab);

    assert_int_equal(d->mem_unmap(d, va, G), VPMM_DRV_OK);
    vpmm_host_counts(d, &c);
    assert_int_equal(c.handles, 1); /* one mapping left */
    assert_int_equal(((vbyte_t *)va)[2 * G], 0xab);
    assert_int_equal(d->mem_unmap(d, va + 2 * G, G), VPMM_DRV_OK);
    CHECKED(d);
    vpmm_host_counts(d, &c);
    assert_int_equal(c.handles, 0);
    assert_int_equal(c.handle_bytes, 0);
    assert_int_equal(c.touched_bytes, 0);
    assert_int_equal(d->mem_get_info(d, &free_b, &total), VPMM_DRV_OK);
    assert_int_equal(free_b, 16 * MiB);
    assert_int_equal(d->va_free(d, va, 8 * MiB), VPMM_DRV_OK);
    expect_empty(d);
    close_host(d);
}

/* Thousands of handles live at once under a small fd limit: one memfd, not one fd per handle. */
static void test_many_handles_few_fds(void **state)
{
    (void)state;
    enum { N = 4096 };
    struct rlimit old, low;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
    low = old;
    low.rlim_cur = 256; /* far below 4096, with room for whatever the harness left open */
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);

    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    vpmm_driver_t *d = open_host(page, 0);
    uintptr_t va = reserve(d, N * page);
    vpmm_drv_handle_t *h = calloc(N, sizeof *h);
    assert_non_null(h);
    for (size_t i = 0; i < N; i++) {
        assert_int_equal(d->mem_create(d, page, &h[i]), VPMM_DRV_OK);
        /* Reverse order so neighbouring pages come from non-adjacent file extents. */
        assert_int_equal(d->mem_map(d, va + (N - 1 - i) * page, page, h[i], 0), VPMM_DRV_OK);
    }
    /* One set_access across all 4096 adjacent mappings. */
    assert_int_equal(d->set_access(d, va, N * page), VPMM_DRV_OK);
    for (size_t i = 0; i < N; i++)
        *(uint32_t *)(va + (N - 1 - i) * page) = (uint32_t)i;
    for (size_t i = 0; i < N; i++)
        assert_int_equal(*(uint32_t *)(va + (N - 1 - i) * page), i);
    vpmm_host_counts_t c;
    vpmm_host_counts(d, &c);
    assert_int_equal(c.handles, N);
    assert_int_equal(c.mappings, N);
    assert_int_equal(c.touched_bytes, N * page);
    CHECKED(d);

    /* Release in an interleaved order to exercise extent coalescing. */
    for (size_t pass = 0; pass < 2; pass++) {
        for (size_t i = pass; i < N; i += 2) {
            assert_int_equal(d->mem_release(d, h[i]), VPMM_DRV_OK);
            assert_int_equal(d->mem_unmap(d, va + (N - 1 - i) * page, page), VPMM_DRV_OK);
        }
        CHECKED(d);
    }
    assert_int_equal(d->va_free(d, va, N * page), VPMM_DRV_OK);
    expect_empty(d);
    close_host(d);
    free(h);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
}

/*
 * Random operations against a small model: every call must succeed exactly when the model says
 * the contract allows it, and the invariants must hold after each one.
 */
static void test_random_against_model(void **state)
{
    (void)state;
    enum { SLOTS = 16, HANDLES = 12, STEPS = 3000 };
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t g = page;
    vpmm_driver_t *d = open_host(g, 24 * g);
    uintptr_t va = reserve(d, SLOTS * g);
    struct {
        vpmm_drv_handle_t id;
        size_t size;
        int live, released, nmaps;
    } hs[HANDLES] = { { 0 } };
    struct {
        int handle;   /* index into hs, -1 if not mapped */
        size_t len;   /* granules */
    } at[SLOTS];      /* mapping starting at slot i */
    int owner[SLOTS]; /* slot -> start slot of the mapping covering it, -1 if free */
    for (int i = 0; i < SLOTS; i++)
        at[i].handle = owner[i] = -1;
    size_t live_bytes = 0;
    uint64_t rng = 88172645463325252ULL;

    for (int step = 0; step < STEPS; step++) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        int op = (int)(rng % 5), hi = (int)((rng >> 8) % HANDLES);
        int slot = (int)((rng >> 16) % SLOTS);
        size_t len = 1 + (size_t)((rng >> 24) % 3), off = (size_t)((rng >> 32) % 3);
        if (op == 0) { /* create */
            if (hs[hi].live)
                continue;
            size_t size = (1 + (size_t)((rng >> 40) % 4)) * g;
            int ok = live_bytes + size <= 24 * g;
            vpmm_dres_t r = d->mem_create(d, size, &hs[hi].id);
            assert_int_equal(r, ok ? VPMM_DRV_OK : VPMM_DRV_OUT_OF_MEMORY);
            if (ok) {
                hs[hi].size = size;
                hs[hi].live = 1;
                hs[hi].released = 0;
                hs[hi].nmaps = 0;
                live_bytes += size;
            }
        } else if (op == 1) { /* release */
            if (!hs[hi].live)
                continue;
            int ok = !hs[hi].released;
            assert_int_equal(d->mem_release(d, hs[hi].id), ok ? VPMM_DRV_OK : VPMM_DRV_INVALID);
            if (ok) {
                hs[hi].released = 1;
                if (hs[hi].nmaps == 0) {
                    hs[hi].live = 0;
                    live_bytes -= hs[hi].size;
                }
            }
        } else if (op == 2) { /* map */
            if (!hs[hi].live)
                continue;
            int ok =
                !hs[hi].released && (off + len) * g <= hs[hi].size && (size_t)slot + len <= SLOTS;
            for (size_t k = 0; ok && k < len; k++)
                ok = owner[slot + (int)k] < 0;
            vpmm_dres_t r = d->mem_map(d, va + (size_t)slot * g, len * g, hs[hi].id, off * g);
            /* Valid arguments naming part of a handle: refused as CUDA refuses them. */
            int whole = off == 0 && len * g == hs[hi].size;
            assert_int_equal(r, !ok     ? VPMM_DRV_INVALID
                                : whole ? VPMM_DRV_OK
                                        : VPMM_DRV_NOT_SUPPORTED);
            ok = ok && whole;
            if (ok) {
                at[slot].handle = hi;
                at[slot].len = len;
                for (size_t k = 0; k < len; k++)
                    owner[slot + (int)k] = slot;
                hs[hi].nmaps++;
            }
        } else if (op == 3) { /* unmap */
            int ok = at[slot].handle >= 0 && at[slot].len == len;
            assert_int_equal(d->mem_unmap(d, va + (size_t)slot * g, len * g),
                             ok ? VPMM_DRV_OK : VPMM_DRV_INVALID);
            if (ok) {
                int j = at[slot].handle;
                at[slot].handle = -1;
                for (size_t k = 0; k < len; k++)
                    owner[slot + (int)k] = -1;
                if (--hs[j].nmaps == 0 && hs[j].released) {
                    hs[j].live = 0;
                    live_bytes -= hs[j].size;
                }
            }
        } else { /* set_access: every granule mapped */
            int ok = (size_t)slot + len <= SLOTS;
            for (size_t k = 0; ok && k < len; k++)
                ok = owner[slot + (int)k] >= 0;
            assert_int_equal(d->set_access(d, va + (size_t)slot * g, len * g),
                             ok ? VPMM_DRV_OK : VPMM_DRV_INVALID);
        }
        CHECKED(d);
        vpmm_host_counts_t c;
        vpmm_host_counts(d, &c);
        assert_int_equal(c.handle_bytes, live_bytes);
    }
    for (int i = 0; i < SLOTS; i++)
        if (at[i].handle >= 0)
            assert_int_equal(d->mem_unmap(d, va + (size_t)i * g, at[i].len * g), VPMM_DRV_OK);
    for (int i = 0; i < HANDLES; i++)
        if (hs[i].live && !hs[i].released)
            assert_int_equal(d->mem_release(d, hs[i].id), VPMM_DRV_OK);
    assert_int_equal(d->va_free(d, va, SLOTS * g), VPMM_DRV_OK);
    expect_empty(d);
    close_host(d);
}

/* ---- streams and events ------------------------------------------------------------------- */

static void test_streams(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    vpmm_stream_t s[64];
    for (int i = 0; i < 64; i++) {
        s[i] = vpmm_host_stream_create(d);
        assert_non_null(s[i]);
        for (int j = 0; j < i; j++)
            assert_ptr_not_equal(s[i], s[j]);
        assert_true(vpmm_host_stream_idle(d, s[i]));
    }
    /* Unknown streams, NULL included, have nothing pending. */
    assert_true(vpmm_host_stream_idle(d, NULL));
    assert_true(vpmm_host_stream_idle(d, S1));
    assert_int_equal(vpmm_host_advance(d, S1, 5), 0);
    vpmm_host_complete(d, S2);

    /* The legacy default stream is just another stream here. */
    assert_int_equal(vpmm_host_enqueue(d, NULL), 1);
    assert_int_equal(vpmm_host_enqueue(d, NULL), 2);
    assert_int_equal(vpmm_host_enqueue(d, s[3]), 1);
    assert_false(vpmm_host_stream_idle(d, NULL));
    assert_true(vpmm_host_stream_idle(d, s[4]));
    assert_int_equal(vpmm_host_advance(d, NULL, 1), 1);
    assert_int_equal(vpmm_host_stream_completed(d, NULL), 1);
    assert_int_equal(vpmm_host_advance(d, NULL, 5), 1);
    assert_true(vpmm_host_stream_idle(d, NULL));
    assert_false(vpmm_host_stream_idle(d, s[3]));
    vpmm_host_complete(d, s[3]);
    assert_true(vpmm_host_stream_idle(d, s[3]));
    assert_int_equal(vpmm_host_stream_enqueued(d, s[3]), 1);
    assert_int_equal(vpmm_host_stream_enqueued(d, S3), 0);
    CHECKED(d);
    close_host(d);
}

static void test_event_record_query(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    vpmm_drv_event_t ev = NULL, ev2 = NULL;
    expect_failure(d, d->event_create(d, NULL), VPMM_DRV_INVALID, 1, VPMM_DRV_EVENT_CREATE);
    assert_int_equal(d->event_create(d, &ev), VPMM_DRV_OK);
    assert_non_null(ev);
    assert_int_equal(d->event_query(d, ev), VPMM_DRV_OK); /* never recorded: complete */

    vpmm_host_enqueue(d, S1);
    vpmm_host_enqueue(d, S1);
    assert_int_equal(d->event_record(d, ev, S1), VPMM_DRV_OK);
    vpmm_host_enqueue(d, S1); /* after the record: not part of it */
    expect_failure(d, d->event_query(d, ev), VPMM_DRV_NOT_READY, 600, VPMM_DRV_EVENT_QUERY);
    assert_int_equal(vpmm_host_advance(d, S1, 1), 1);
    expect_failure(d, d->event_query(d, ev), VPMM_DRV_NOT_READY, 600, VPMM_DRV_EVENT_QUERY);
    assert_int_equal(vpmm_host_advance(d, S1, 1), 1);
    assert_int_equal(d->event_query(d, ev), VPMM_DRV_OK);
    assert_false(vpmm_host_stream_idle(d, S1));

    /* Re-recording moves the event; recording on an idle stream is complete at once. */
    assert_int_equal(d->event_record(d, ev, S1), VPMM_DRV_OK);
    assert_int_equal(d->event_query(d, ev), VPMM_DRV_NOT_READY);
    vpmm_host_complete(d, S1);
    assert_int_equal(d->event_query(d, ev), VPMM_DRV_OK);
    assert_int_equal(d->event_record(d, ev, S2), VPMM_DRV_OK);
    assert_int_equal(d->event_query(d, ev), VPMM_DRV_OK);
    CHECKED(d);

    /* Destroyed events are unknown; their ids are not reused for new events. */
    assert_int_equal(d->event_destroy(d, ev), VPMM_DRV_OK);
    assert_int_equal(d->event_create(d, &ev2), VPMM_DRV_OK);
    assert_ptr_not_equal(ev, ev2);
    expect_failure(d, d->event_query(d, ev), VPMM_DRV_INVALID, 1, VPMM_DRV_EVENT_QUERY);
    expect_failure(d, d->event_record(d, ev, S1), VPMM_DRV_INVALID, 1, VPMM_DRV_EVENT_RECORD);
    expect_failure(d, d->stream_wait_event(d, S1, ev), VPMM_DRV_INVALID, 1,
                   VPMM_DRV_STREAM_WAIT_EVENT);
    expect_failure(d, d->event_destroy(d, ev), VPMM_DRV_INVALID, 1, VPMM_DRV_EVENT_DESTROY);
    expect_failure(d, d->event_destroy(d, NULL), VPMM_DRV_INVALID, 1, VPMM_DRV_EVENT_DESTROY);
    expect_failure(d, d->event_query(d, (vpmm_drv_event_t)(uintptr_t)0xdeadbeef), VPMM_DRV_INVALID,
                   1, VPMM_DRV_EVENT_QUERY);
    vpmm_host_counts_t c;
    vpmm_host_counts(d, &c);
    assert_int_equal(c.events, 1);
    assert_int_equal(d->event_destroy(d, ev2), VPMM_DRV_OK);
    expect_empty(d);
    close_host(d);
}

/* A -> B -> C: barriers hold later work back; complete() finishes what it waits on first. */
static void test_waits_across_three_streams(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    vpmm_stream_t A = vpmm_host_stream_create(d), B = vpmm_host_stream_create(d), C = S3;
    vpmm_drv_event_t ea, eb, done;
    assert_int_equal(d->event_create(d, &ea), VPMM_DRV_OK);
    assert_int_equal(d->event_create(d, &eb), VPMM_DRV_OK);
    assert_int_equal(d->event_create(d, &done), VPMM_DRV_OK);

    vpmm_host_enqueue(d, A);
    vpmm_host_enqueue(d, A);
    assert_int_equal(d->event_record(d, ea, A), VPMM_DRV_OK); /* A@2 */
    assert_int_equal(vpmm_host_enqueue(d, A), 3);             /* not waited on */
    assert_int_equal(vpmm_host_enqueue(d, B), 1);             /* before the wait: free to run */
    assert_int_equal(d->stream_wait_event(d, B, ea), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_enqueue(d, B), 2);
    assert_int_equal(d->event_record(d, eb, B), VPMM_DRV_OK); /* B@2 */
    assert_int_equal(d->stream_wait_event(d, C, eb), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_enqueue(d, C), 1);
    CHECKED(d);

    /* advance stops at an unsatisfied wait, and never runs another stream. */
    assert_int_equal(vpmm_host_advance(d, B, 5), 1);
    assert_int_equal(vpmm_host_stream_completed(d, B), 1);
    assert_int_equal(vpmm_host_advance(d, C, 1), 0);
    assert_int_equal(vpmm_host_advance(d, A, 1), 1);
    assert_int_equal(vpmm_host_advance(d, B, 5), 0); /* A@2 still pending */
    assert_int_equal(vpmm_host_advance(d, A, 1), 1);
    assert_int_equal(vpmm_host_advance(d, B, 5), 1); /* now it may go */
    assert_true(vpmm_host_stream_idle(d, B));
    assert_int_equal(d->event_query(d, eb), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_advance(d, C, 5), 1);
    CHECKED(d);

    /* Same shape again, finished by complete(C): it must pull A and B along, but not A's
     * later work. */
    vpmm_host_enqueue(d, A);                                  /* A@4 (A@3 pending too) */
    assert_int_equal(d->event_record(d, ea, A), VPMM_DRV_OK); /* A@4 */
    vpmm_host_enqueue(d, A);                                  /* A@5: not needed */
    assert_int_equal(d->stream_wait_event(d, B, ea), VPMM_DRV_OK);
    vpmm_host_enqueue(d, B);                                  /* B@3 */
    assert_int_equal(d->event_record(d, eb, B), VPMM_DRV_OK); /* B@3 */
    assert_int_equal(d->stream_wait_event(d, C, eb), VPMM_DRV_OK);
    vpmm_host_enqueue(d, C); /* C@2 */
    assert_int_equal(d->event_record(d, done, C), VPMM_DRV_OK);
    assert_int_equal(d->event_query(d, done), VPMM_DRV_NOT_READY);
    vpmm_host_complete(d, C);
    assert_int_equal(d->event_query(d, done), VPMM_DRV_OK);
    assert_true(vpmm_host_stream_idle(d, B));
    assert_int_equal(vpmm_host_stream_completed(d, A), 4);
    assert_false(vpmm_host_stream_idle(d, A));
    CHECKED(d);

    /* A wait on finished work or on a never-recorded event adds no barrier. */
    vpmm_drv_event_t fresh;
    assert_int_equal(d->event_create(d, &fresh), VPMM_DRV_OK);
    assert_int_equal(d->stream_wait_event(d, B, fresh), VPMM_DRV_OK);
    assert_int_equal(d->stream_wait_event(d, B, eb), VPMM_DRV_OK);
    assert_int_equal(d->stream_wait_event(d, B, ea), VPMM_DRV_OK); /* A@4: done */
    vpmm_host_enqueue(d, B);
    assert_int_equal(vpmm_host_advance(d, B, 1), 1);

    /* The log lists every wait, in order. */
    const vpmm_host_wait_t want[] = {
        { B, A, 2 },    { C, B, 2 }, { B, A, 4 }, { C, B, 3 },
        { B, NULL, 0 }, { B, B, 3 }, { B, A, 4 },
    };
    assert_int_equal(vpmm_host_wait_count(d), sizeof want / sizeof want[0]);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        vpmm_host_wait_t w = vpmm_host_wait_at(d, i);
        assert_ptr_equal(w.waiter, want[i].waiter);
        assert_ptr_equal(w.signaller, want[i].signaller);
        assert_int_equal(w.signal_seq, want[i].signal_seq);
    }
    vpmm_host_wait_t none = vpmm_host_wait_at(d, 99);
    assert_null(none.waiter);
    assert_int_equal(none.signal_seq, 0);
    vpmm_host_wait_clear(d);
    assert_int_equal(vpmm_host_wait_count(d), 0);

    /* synchronize finishes everything. */
    vpmm_host_enqueue(d, S1);
    assert_int_equal(d->synchronize(d), VPMM_DRV_OK);
    assert_true(vpmm_host_stream_idle(d, A));
    assert_true(vpmm_host_stream_idle(d, S1));
    CHECKED(d);

    assert_int_equal(d->event_destroy(d, ea), VPMM_DRV_OK);
    assert_int_equal(d->event_destroy(d, eb), VPMM_DRV_OK);
    assert_int_equal(d->event_destroy(d, done), VPMM_DRV_OK);
    assert_int_equal(d->event_destroy(d, fresh), VPMM_DRV_OK);
    expect_empty(d);
    close_host(d);
}

/* Barriers that cross back and forth and a long chain: complete() terminates and is exact. */
static void test_barrier_graphs(void **state)
{
    (void)state;
    enum { N = 300 };
    vpmm_driver_t *d = open_host(0, 0);
    vpmm_drv_event_t ev;
    assert_int_equal(d->event_create(d, &ev), VPMM_DRV_OK);

    /* Ping-pong: S1 and S2 wait on each other alternately (never a real cycle). */
    for (int i = 0; i < 50; i++) {
        vpmm_stream_t from = i % 2 ? S1 : S2, to = i % 2 ? S2 : S1;
        vpmm_host_enqueue(d, from);
        assert_int_equal(d->event_record(d, ev, from), VPMM_DRV_OK);
        assert_int_equal(d->stream_wait_event(d, to, ev), VPMM_DRV_OK);
        vpmm_host_enqueue(d, to);
    }
    CHECKED(d);
    vpmm_host_complete(d, S1);
    assert_true(vpmm_host_stream_idle(d, S1));
    vpmm_host_complete(d, S2);
    assert_true(vpmm_host_stream_idle(d, S2));

    /* A chain of N streams, each waiting on the previous. */
    vpmm_stream_t s[N];
    for (int i = 0; i < N; i++) {
        s[i] = vpmm_host_stream_create(d);
        if (i > 0)
            assert_int_equal(d->stream_wait_event(d, s[i], ev), VPMM_DRV_OK);
        vpmm_host_enqueue(d, s[i]);
        assert_int_equal(d->event_record(d, ev, s[i]), VPMM_DRV_OK);
    }
    CHECKED(d);
    assert_int_equal(vpmm_host_advance(d, s[N - 1], 1), 0);
    vpmm_host_complete(d, s[N - 1]);
    for (int i = 0; i < N; i++)
        assert_true(vpmm_host_stream_idle(d, s[i]));
    CHECKED(d);

    /* Repeated waits between the same pair collapse into one barrier per position. */
    for (int i = 0; i < 1000; i++) {
        vpmm_host_enqueue(d, S1);
        assert_int_equal(d->event_record(d, ev, S1), VPMM_DRV_OK);
        assert_int_equal(d->stream_wait_event(d, S2, ev), VPMM_DRV_OK);
    }
    vpmm_host_enqueue(d, S2);
    assert_int_equal(vpmm_host_advance(d, S2, 1), 0);
    assert_int_equal(vpmm_host_advance(d, S1, 999), 999);
    assert_int_equal(vpmm_host_advance(d, S2, 1), 0);
    assert_int_equal(vpmm_host_advance(d, S1, 1), 1);
    assert_int_equal(vpmm_host_advance(d, S2, 1), 1);
    CHECKED(d);
    assert_int_equal(d->event_destroy(d, ev), VPMM_DRV_OK);
    close_host(d);
}

/* ---- capture ------------------------------------------------------------------------------ */

static vpmm_capture_status_t capture_status(vpmm_driver_t *d, vpmm_stream_t s, uint64_t *id)
{
    vpmm_capture_status_t st = (vpmm_capture_status_t)-1;
    assert_int_equal(d->capture_info(d, s, &st, id, NULL), VPMM_DRV_OK);
    return st;
}

/* end_capture's failures have no entry in the enum: check them by hand. */
static void expect_capture_failure(vpmm_driver_t *d, vpmm_dres_t got, int code, const char *call)
{
    assert_int_equal(got, VPMM_DRV_ERROR);
    assert_int_equal(d->last_code, code);
    assert_string_equal(d->last_call, call);
}

static void test_capture_basics(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    uint64_t id = 0, got = 99;
    vpmm_drv_event_t ev;
    assert_int_equal(d->event_create(d, &ev), VPMM_DRV_OK);

    assert_int_equal(capture_status(d, S1, &got), VPMM_CAPTURE_NONE);
    assert_int_equal(got, 0);
    expect_failure(d, d->capture_info(d, S1, NULL, &got, NULL), VPMM_DRV_INVALID, 1,
                   VPMM_DRV_CAPTURE_INFO);
    assert_int_equal(capture_status(d, S1, NULL), VPMM_CAPTURE_NONE); /* id is optional */

    /* Real work enqueued before the capture stays real. */
    assert_int_equal(vpmm_host_enqueue(d, S1), 1);
    assert_int_equal(vpmm_host_begin_capture(d, S1, NULL), VPMM_DRV_INVALID);
    assert_int_equal(vpmm_host_begin_capture(d, S1, &id), VPMM_DRV_OK);
    assert_int_equal(id, 1);
    assert_int_equal(capture_status(d, S1, &got), VPMM_CAPTURE_ACTIVE);
    assert_int_equal(got, 1);
    assert_int_equal(capture_status(d, S2, &got), VPMM_CAPTURE_NONE);
    assert_int_equal(vpmm_host_begin_capture(d, S1, &got), VPMM_DRV_ERROR);
    assert_int_equal(d->last_code, 401);
    assert_string_equal(d->last_call, "cuStreamBeginCapture");
    CHECKED(d);

    /* Captured work is not executed; the pre-capture item still completes. */
    assert_int_equal(vpmm_host_enqueue(d, S1), 0);
    assert_int_equal(vpmm_host_stream_enqueued(d, S1), 1);
    vpmm_host_complete(d, S1);
    assert_true(vpmm_host_stream_idle(d, S1));

    /* Recording during capture is allowed (and mem calls are too: nothing else to check). */
    assert_int_equal(d->event_record(d, ev, S1), VPMM_DRV_OK);
    assert_int_equal(capture_status(d, S1, NULL), VPMM_CAPTURE_ACTIVE);

    /* Only the origin ends a capture; a clean end succeeds and frees the stream. */
    expect_capture_failure(d, vpmm_host_end_capture(d, S2), 401, "cuStreamEndCapture");
    assert_int_equal(vpmm_host_end_capture(d, S1), VPMM_DRV_OK);
    assert_int_equal(capture_status(d, S1, &got), VPMM_CAPTURE_NONE);
    assert_int_equal(vpmm_host_enqueue(d, S1), 2);

    /* The event still stands for graph work: querying it is an error, and so is waiting on it
     * (the graph it belongs to is closed). */
    expect_failure(d, d->event_query(d, ev), VPMM_DRV_ERROR, 907, VPMM_DRV_EVENT_QUERY);
    expect_failure(d, d->stream_wait_event(d, S2, ev), VPMM_DRV_ERROR, 905,
                   VPMM_DRV_STREAM_WAIT_EVENT);
    /* Recording it outside capture makes it an ordinary event again. */
    assert_int_equal(d->event_record(d, ev, S1), VPMM_DRV_OK);
    assert_int_equal(d->event_query(d, ev), VPMM_DRV_NOT_READY);

    /* Ids are never reused. */
    assert_int_equal(vpmm_host_begin_capture(d, S2, &id), VPMM_DRV_OK);
    assert_int_equal(id, 2);
    assert_int_equal(vpmm_host_end_capture(d, S2), VPMM_DRV_OK);
    CHECKED(d);
    assert_int_equal(d->event_destroy(d, ev), VPMM_DRV_OK);
    close_host(d);
}

static void test_capture_invalidation(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    uint64_t id, got;
    vpmm_drv_event_t ev, plain;
    assert_int_equal(d->event_create(d, &ev), VPMM_DRV_OK);
    assert_int_equal(d->event_create(d, &plain), VPMM_DRV_OK);

    /* Querying a captured event: error 907 and the capture is invalidated. */
    assert_int_equal(vpmm_host_begin_capture(d, S1, &id), VPMM_DRV_OK);
    assert_int_equal(d->event_record(d, ev, S1), VPMM_DRV_OK);
    expect_failure(d, d->event_query(d, ev), VPMM_DRV_ERROR, 907, VPMM_DRV_EVENT_QUERY);
    assert_int_equal(capture_status(d, S1, &got), VPMM_CAPTURE_INVALIDATED);
    assert_int_equal(got, id);
    /* An invalidated capture refuses further work until it is ended. */
    expect_failure(d, d->event_record(d, plain, S1), VPMM_DRV_ERROR, 901, VPMM_DRV_EVENT_RECORD);
    expect_failure(d, d->stream_wait_event(d, S1, ev), VPMM_DRV_ERROR, 901,
                   VPMM_DRV_STREAM_WAIT_EVENT);
    expect_capture_failure(d, vpmm_host_end_capture(d, S1), 901, "cuStreamEndCapture");
    assert_int_equal(capture_status(d, S1, NULL), VPMM_CAPTURE_NONE);
    CHECKED(d);

    /* Waiting on a plain (non-captured) event from a capturing stream: 905, invalidated. */
    vpmm_host_enqueue(d, S2);
    assert_int_equal(d->event_record(d, plain, S2), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_begin_capture(d, S1, &id), VPMM_DRV_OK);
    expect_failure(d, d->stream_wait_event(d, S1, plain), VPMM_DRV_ERROR, 905,
                   VPMM_DRV_STREAM_WAIT_EVENT);
    assert_int_equal(capture_status(d, S1, NULL), VPMM_CAPTURE_INVALIDATED);
    expect_capture_failure(d, vpmm_host_end_capture(d, S1), 901, "cuStreamEndCapture");

    /* Two captures merged through a wait: 902, both invalidated. */
    uint64_t id1, id2;
    assert_int_equal(vpmm_host_begin_capture(d, S1, &id1), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_begin_capture(d, S2, &id2), VPMM_DRV_OK);
    assert_true(id1 != id2);
    assert_int_equal(d->event_record(d, ev, S1), VPMM_DRV_OK);
    expect_failure(d, d->stream_wait_event(d, S2, ev), VPMM_DRV_ERROR, 902,
                   VPMM_DRV_STREAM_WAIT_EVENT);
    assert_int_equal(capture_status(d, S1, NULL), VPMM_CAPTURE_INVALIDATED);
    assert_int_equal(capture_status(d, S2, NULL), VPMM_CAPTURE_INVALIDATED);
    expect_capture_failure(d, vpmm_host_end_capture(d, S1), 901, "cuStreamEndCapture");
    expect_capture_failure(d, vpmm_host_end_capture(d, S2), 901, "cuStreamEndCapture");

    /* Synchronizing the device during a capture: 900, invalidated; work stays pending. */
    vpmm_host_enqueue(d, S3);
    assert_int_equal(vpmm_host_begin_capture(d, S1, &id), VPMM_DRV_OK);
    expect_failure(d, d->synchronize(d), VPMM_DRV_ERROR, 900, VPMM_DRV_SYNCHRONIZE);
    assert_false(vpmm_host_stream_idle(d, S3));
    assert_int_equal(capture_status(d, S1, NULL), VPMM_CAPTURE_INVALIDATED);
    expect_capture_failure(d, vpmm_host_end_capture(d, S1), 901, "cuStreamEndCapture");
    assert_int_equal(d->synchronize(d), VPMM_DRV_OK);
    assert_true(vpmm_host_stream_idle(d, S3));
    CHECKED(d);

    assert_int_equal(d->event_destroy(d, ev), VPMM_DRV_OK);
    assert_int_equal(d->event_destroy(d, plain), VPMM_DRV_OK);
    expect_empty(d);
    close_host(d);
}

/*
 * The legacy default stream is never captured, as in CUDA (the pool's hot path relies on it,
 * driver.h rule 6): beginning a capture on it fails, and it cannot join one through a wait.
 */
static void test_capture_not_on_legacy_stream(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 64 * MiB);
    vpmm_stream_t s = vpmm_host_stream_create(d);
    vpmm_drv_event_t ev;
    vpmm_capture_status_t st;
    uint64_t id = 0;

    assert_int_equal(vpmm_host_begin_capture(d, NULL, &id), VPMM_DRV_NOT_SUPPORTED);
    assert_int_equal(d->last_code, 900);
    assert_int_equal(vpmm_host_begin_capture(d, (vpmm_stream_t)(uintptr_t)1, &id),
                     VPMM_DRV_NOT_SUPPORTED);
    assert_int_equal(vpmm_host_begin_capture(d, s, &id), VPMM_DRV_OK);
    assert_int_equal(d->event_create(d, &ev), VPMM_DRV_OK);
    assert_int_equal(d->event_record(d, ev, s), VPMM_DRV_OK); /* a node in s's capture */
    assert_int_equal(d->stream_wait_event(d, NULL, ev), VPMM_DRV_ERROR);
    assert_int_equal(d->last_code, 906);
    assert_int_equal(d->capture_info(d, NULL, &st, &id, NULL), VPMM_DRV_OK);
    assert_int_equal(st, VPMM_CAPTURE_NONE);
    assert_int_equal(d->capture_info(d, s, &st, &id, NULL), VPMM_DRV_OK);
    assert_int_equal(st, VPMM_CAPTURE_INVALIDATED); /* as CUDA: the implicit join broke it */
    assert_int_equal(vpmm_host_end_capture(d, s), VPMM_DRV_ERROR);
    assert_int_equal(d->event_destroy(d, ev), VPMM_DRV_OK);
    CHECKED(d);
    close_host(d);
}

/* A stream that waits on a captured event joins the capture, and leaves when the origin ends. */
static void test_capture_join(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    uint64_t id, got;
    vpmm_drv_event_t fork_ev, join_ev;
    assert_int_equal(d->event_create(d, &fork_ev), VPMM_DRV_OK);
    assert_int_equal(d->event_create(d, &join_ev), VPMM_DRV_OK);

    assert_int_equal(vpmm_host_enqueue(d, S2), 1); /* real work on the side stream */
    assert_int_equal(vpmm_host_begin_capture(d, S1, &id), VPMM_DRV_OK);
    assert_int_equal(d->event_record(d, fork_ev, S1), VPMM_DRV_OK);
    assert_int_equal(d->stream_wait_event(d, S2, fork_ev), VPMM_DRV_OK);
    assert_int_equal(capture_status(d, S2, &got), VPMM_CAPTURE_ACTIVE);
    assert_int_equal(got, id);
    assert_int_equal(vpmm_host_enqueue(d, S2), 0); /* captured now */
    /* Joined, not originated: cannot end it. */
    expect_capture_failure(d, vpmm_host_end_capture(d, S2), 903, "cuStreamEndCapture");
    /* The side stream forks further: a third stream joins through it. */
    assert_int_equal(d->event_record(d, join_ev, S2), VPMM_DRV_OK);
    assert_int_equal(d->stream_wait_event(d, S3, join_ev), VPMM_DRV_OK);
    assert_int_equal(capture_status(d, S3, &got), VPMM_CAPTURE_ACTIVE);
    assert_int_equal(got, id);
    /* Join back into the origin (a wait inside the same capture is fine). */
    assert_int_equal(d->stream_wait_event(d, S1, join_ev), VPMM_DRV_OK);
    CHECKED(d);

    assert_int_equal(vpmm_host_end_capture(d, S1), VPMM_DRV_OK);
    assert_int_equal(capture_status(d, S1, NULL), VPMM_CAPTURE_NONE);
    assert_int_equal(capture_status(d, S2, NULL), VPMM_CAPTURE_NONE);
    assert_int_equal(capture_status(d, S3, NULL), VPMM_CAPTURE_NONE);
    assert_int_equal(vpmm_host_enqueue(d, S2), 2);
    /* The pre-capture item was never blocked by the capture. */
    assert_int_equal(vpmm_host_advance(d, S2, 2), 2);

    /* The captured waits were logged with signal_seq 0. */
    vpmm_host_wait_t w = vpmm_host_wait_at(d, 0);
    assert_ptr_equal(w.waiter, S2);
    assert_ptr_equal(w.signaller, S1);
    assert_int_equal(w.signal_seq, 0);
    assert_int_equal(vpmm_host_wait_count(d), 3);
    CHECKED(d);
    assert_int_equal(d->event_destroy(d, fork_ev), VPMM_DRV_OK);
    assert_int_equal(d->event_destroy(d, join_ev), VPMM_DRV_OK);
    close_host(d);
}

/* ---- capture through the table, graphs ---------------------------------------------------- */

/* The graph controls' failures have no entry in the enum either. */
static void expect_control_failure(vpmm_driver_t *d, vpmm_dres_t got, vpmm_dres_t want, int code,
                                   const char *call)
{
    assert_int_equal(got, want);
    assert_int_equal(d->last_code, code);
    assert_string_equal(d->last_call, call);
}

static vpmm_graph_t capture_graph(vpmm_driver_t *d, vpmm_stream_t s, vpmm_capture_status_t *st)
{
    vpmm_graph_t g = (vpmm_graph_t)(uintptr_t)0xbad;
    assert_int_equal(d->capture_info(d, s, st, NULL, &g), VPMM_DRV_OK);
    return g;
}

/* end_capture from another thread: the result is collected and checked on the test thread. */
typedef struct end_run {
    vpmm_driver_t *d;
    vpmm_stream_t s;
    vpmm_graph_t g;
    vpmm_dres_t res;
    int code;
} end_run_t;

static void *end_on_thread(void *arg)
{
    end_run_t *r = arg;
    r->res = r->d->end_capture(r->d, r->s, &r->g);
    r->code = r->d->last_code;
    return NULL;
}

static void test_capture_via_table(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    vpmm_capture_status_t st;
    vpmm_graph_t g = NULL, seen, other;
    uint64_t id = 0, id2 = 0;

    /* The legacy stream (NULL, 0x1) is refused; so are a bad mode and a stream already capturing,
     * originated or joined. None leaves a graph behind. */
    expect_failure(d, d->begin_capture(d, NULL, VPMM_CAPTURE_MODE_GLOBAL), VPMM_DRV_NOT_SUPPORTED,
                   900, VPMM_DRV_BEGIN_CAPTURE);
    expect_failure(d, d->begin_capture(d, (vpmm_stream_t)(uintptr_t)1, VPMM_CAPTURE_MODE_RELAXED),
                   VPMM_DRV_NOT_SUPPORTED, 900, VPMM_DRV_BEGIN_CAPTURE);
    expect_failure(d, d->begin_capture(d, S1, (vpmm_capture_mode_t)3), VPMM_DRV_INVALID, 1,
                   VPMM_DRV_BEGIN_CAPTURE);
    assert_int_equal(vpmm_host_graphs(d), 0);
    assert_null(capture_graph(d, S1, &st)); /* not capturing: no graph */
    assert_int_equal(st, VPMM_CAPTURE_NONE);

    assert_int_equal(d->begin_capture(d, S1, VPMM_CAPTURE_MODE_GLOBAL), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graphs(d), 1); /* the graph exists from the start */
    seen = capture_graph(d, S1, &st);
    assert_int_equal(st, VPMM_CAPTURE_ACTIVE);
    assert_non_null(seen);
    assert_int_equal(d->capture_info(d, S1, &st, &id, NULL), VPMM_DRV_OK); /* graph optional */
    assert_true(id != 0);
    expect_failure(d, d->begin_capture(d, S1, VPMM_CAPTURE_MODE_GLOBAL), VPMM_DRV_ERROR, 401,
                   VPMM_DRV_BEGIN_CAPTURE);
    /* A joined stream reports the same graph, cannot begin its own capture, nor end this one. */
    vpmm_drv_event_t ev;
    assert_int_equal(d->event_create(d, &ev), VPMM_DRV_OK);
    assert_int_equal(d->event_record(d, ev, S1), VPMM_DRV_OK);
    assert_int_equal(d->stream_wait_event(d, S2, ev), VPMM_DRV_OK);
    assert_ptr_equal(capture_graph(d, S2, &st), seen);
    expect_failure(d, d->begin_capture(d, S2, VPMM_CAPTURE_MODE_GLOBAL), VPMM_DRV_ERROR, 401,
                   VPMM_DRV_BEGIN_CAPTURE);
    expect_failure(d, d->end_capture(d, S2, &other), VPMM_DRV_ERROR, 903, VPMM_DRV_END_CAPTURE);
    expect_failure(d, d->end_capture(d, S3, &other), VPMM_DRV_ERROR, 401, VPMM_DRV_END_CAPTURE);
    expect_failure(d, d->end_capture(d, S1, NULL), VPMM_DRV_INVALID, 1, VPMM_DRV_END_CAPTURE);
    /* The graph being captured cannot be destroyed. */
    expect_control_failure(d, vpmm_host_graph_destroy(d, seen), VPMM_DRV_ERROR, 401,
                           "cuGraphDestroy");
    /* Global mode: only the thread that began the capture may end it (908; it goes on). */
    end_run_t run = { .d = d, .s = S1 };
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, end_on_thread, &run), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(run.res, VPMM_DRV_ERROR);
    assert_int_equal(run.code, 908);
    assert_int_equal(capture_status(d, S1, NULL), VPMM_CAPTURE_ACTIVE);
    CHECKED(d);

    /* A clean end returns the graph capture_info showed; the joined stream leaves too. */
    assert_int_equal(d->end_capture(d, S1, &g), VPMM_DRV_OK);
    assert_ptr_equal(g, seen);
    assert_int_equal(capture_status(d, S1, NULL), VPMM_CAPTURE_NONE);
    assert_int_equal(capture_status(d, S2, NULL), VPMM_CAPTURE_NONE);
    assert_null(capture_graph(d, S1, &st));
    assert_int_equal(vpmm_host_graphs(d), 1);
    CHECKED(d);

    /* Relaxed mode: another thread may end it; a second capture has a new id and graph. */
    assert_int_equal(d->begin_capture(d, S1, VPMM_CAPTURE_MODE_RELAXED), VPMM_DRV_OK);
    assert_int_equal(d->capture_info(d, S1, &st, &id2, &other), VPMM_DRV_OK);
    assert_true(id2 > id);
    assert_true(other != g);
    run = (end_run_t){ .d = d, .s = S1 };
    assert_int_equal(pthread_create(&th, NULL, end_on_thread, &run), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(run.res, VPMM_DRV_OK);
    assert_ptr_equal(run.g, other);
    assert_int_equal(vpmm_host_graphs(d), 2);

    /* The controls: vpmm_host_end_capture destroys the graph it does not return. */
    assert_int_equal(vpmm_host_begin_capture(d, S3, &id), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graphs(d), 3);
    assert_non_null(capture_graph(d, S3, &st));
    assert_int_equal(vpmm_host_end_capture(d, S3), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graphs(d), 2);

    /* Graph handles are checked: a destroyed one is refused. */
    assert_int_equal(vpmm_host_graph_destroy(d, g), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graph_destroy(d, run.g), VPMM_DRV_OK);
    expect_control_failure(d, vpmm_host_graph_destroy(d, g), VPMM_DRV_INVALID, 1, "cuGraphDestroy");
    vpmm_host_exec_t x;
    assert_int_equal(vpmm_host_graph_instantiate(d, g, &x), VPMM_DRV_INVALID);
    assert_int_equal(vpmm_host_graph_instantiate(d, NULL, &x), VPMM_DRV_INVALID);
    assert_string_equal(d->last_call, "cuGraphInstantiate");
    assert_int_equal(d->event_destroy(d, ev), VPMM_DRV_OK);
    expect_empty(d);
    close_host(d);
}

/* An invalidated capture ends with 901 and no graph; the references its graph held are dropped. */
static void test_capture_invalidated_end(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    dtor_log_t log = { .d = d };
    vpmm_drv_event_t ev;
    vpmm_capture_status_t st;
    assert_int_equal(d->event_create(d, &ev), VPMM_DRV_OK);
    vpmm_drv_uobj_t o = uobj_new(d, &log);

    assert_int_equal(d->begin_capture(d, S1, VPMM_CAPTURE_MODE_GLOBAL), VPMM_DRV_OK);
    vpmm_graph_t cg = capture_graph(d, S1, &st);
    assert_int_equal(d->graph_retain_user_object(d, cg, o), VPMM_DRV_OK);
    assert_int_equal(d->event_record(d, ev, S1), VPMM_DRV_OK);
    assert_int_equal(d->event_query(d, ev), VPMM_DRV_ERROR); /* invalidates the capture */
    assert_null(capture_graph(d, S1, &st)); /* no valid graph for an invalidated capture */
    assert_int_equal(st, VPMM_CAPTURE_INVALIDATED);
    assert_int_equal(log.runs, 0);

    vpmm_graph_t g = (vpmm_graph_t)(uintptr_t)0x77;
    expect_failure(d, d->end_capture(d, S1, &g), VPMM_DRV_ERROR, 901, VPMM_DRV_END_CAPTURE);
    assert_ptr_equal(g, (vpmm_graph_t)(uintptr_t)0x77);               /* no graph */
    assert_int_equal(capture_status(d, S1, NULL), VPMM_CAPTURE_NONE); /* but over */
    assert_int_equal(vpmm_host_graphs(d), 0);
    assert_int_equal(log.runs, 1);
    assert_int_equal(log.bad_in_dtor, 0);
    assert_int_equal(vpmm_host_graph_destroy(d, cg), VPMM_DRV_INVALID);
    CHECKED(d);
    assert_int_equal(d->event_destroy(d, ev), VPMM_DRV_OK);
    expect_empty(d);
    close_host(d);
}

/* create -> release runs the destructor once, with its argument; misuse is refused. */
static void test_user_object_release(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    dtor_log_t log = { .d = d }, other = { .d = d };
    vpmm_drv_uobj_t o = NULL;
    expect_failure(d, d->user_object_create(d, NULL, &log, &o), VPMM_DRV_INVALID, 1,
                   VPMM_DRV_USER_OBJECT_CREATE);
    expect_failure(d, d->user_object_create(d, dtor, &log, NULL), VPMM_DRV_INVALID, 1,
                   VPMM_DRV_USER_OBJECT_CREATE);
    assert_null(o);
    assert_int_equal(vpmm_host_user_objects(d), 0);

    o = uobj_new(d, &log);
    vpmm_drv_uobj_t o2 = uobj_new(d, &other);
    assert_true(o != o2);
    assert_int_equal(vpmm_host_user_objects(d), 2);
    vpmm_host_counts_t c;
    vpmm_host_counts(d, &c);
    assert_int_equal(c.user_objects, 2);
    assert_int_equal(d->user_object_release(d, o), VPMM_DRV_OK);
    assert_int_equal(log.runs, 1);
    assert_int_equal(other.runs, 0);
    assert_int_equal(log.bad_in_dtor, 0);
    assert_int_equal(vpmm_host_user_objects(d), 1);
    CHECKED(d);

    /* The caller owned one reference: a second release, or a retain, is refused. */
    expect_failure(d, d->user_object_release(d, o), VPMM_DRV_INVALID, 1,
                   VPMM_DRV_USER_OBJECT_RELEASE);
    expect_failure(d, d->user_object_release(d, NULL), VPMM_DRV_INVALID, 1,
                   VPMM_DRV_USER_OBJECT_RELEASE);
    vpmm_graph_t g;
    assert_int_equal(d->begin_capture(d, S1, VPMM_CAPTURE_MODE_GLOBAL), VPMM_DRV_OK);
    assert_int_equal(d->end_capture(d, S1, &g), VPMM_DRV_OK);
    expect_failure(d, d->graph_retain_user_object(d, g, o), VPMM_DRV_INVALID, 1,
                   VPMM_DRV_GRAPH_RETAIN_USER_OBJECT);
    expect_failure(d, d->graph_retain_user_object(d, NULL, o2), VPMM_DRV_INVALID, 1,
                   VPMM_DRV_GRAPH_RETAIN_USER_OBJECT);
    /* Once moved to the graph, the reference is not the caller's any more. */
    assert_int_equal(d->graph_retain_user_object(d, g, o2), VPMM_DRV_OK);
    expect_failure(d, d->user_object_release(d, o2), VPMM_DRV_INVALID, 1,
                   VPMM_DRV_USER_OBJECT_RELEASE);
    expect_failure(d, d->graph_retain_user_object(d, g, o2), VPMM_DRV_INVALID, 1,
                   VPMM_DRV_GRAPH_RETAIN_USER_OBJECT);
    assert_int_equal(log.runs, 1);
    assert_int_equal(other.runs, 0);
    CHECKED(d);
    assert_int_equal(vpmm_host_graph_destroy(d, g), VPMM_DRV_OK);
    assert_int_equal(other.runs, 1);
    assert_int_equal(other.bad_in_dtor, 0);
    expect_empty(d);
    close_host(d);
}

/* A destructor may call the backend: here it releases a second object, whose destructor runs
 * before the outer release returns. */
typedef struct chain {
    vpmm_driver_t *d;
    vpmm_drv_uobj_t next;
    vpmm_dres_t res;
    dtor_log_t *log;
} chain_t;

static void chain_dtor(void *arg)
{
    chain_t *c = arg;
    dtor(c->log);
    c->res = c->d->user_object_release(c->d, c->next);
}

static void test_destructor_reenters(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    dtor_log_t first = { .d = d }, second = { .d = d };
    chain_t c = { .d = d, .res = VPMM_DRV_ERROR, .log = &first };
    c.next = uobj_new(d, &second);
    vpmm_drv_uobj_t o = NULL;
    assert_int_equal(d->user_object_create(d, chain_dtor, &c, &o), VPMM_DRV_OK);
    assert_int_equal(d->user_object_release(d, o), VPMM_DRV_OK);
    assert_int_equal(c.res, VPMM_DRV_OK);
    assert_int_equal(first.runs, 1);
    assert_int_equal(second.runs, 1);
    assert_int_equal(first.bad_in_dtor + second.bad_in_dtor, 0);
    expect_empty(d);
    close_host(d);
}

/*
 * The whole life of a user object handed to a captured graph: the graph, then an exec made from
 * it, then that exec's pending launch keep it alive; the destructor runs once, from the progress
 * call that completes the launch.
 */
static void test_user_object_lifecycle(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    dtor_log_t log = { .d = d };
    vpmm_capture_status_t st;
    vpmm_drv_uobj_t o = uobj_new(d, &log);

    assert_int_equal(d->begin_capture(d, S1, VPMM_CAPTURE_MODE_GLOBAL), VPMM_DRV_OK);
    vpmm_graph_t cg = capture_graph(d, S1, &st);
    assert_int_equal(d->graph_retain_user_object(d, cg, o), VPMM_DRV_OK); /* while capturing */
    CHECKED(d);
    vpmm_graph_t g = NULL;
    assert_int_equal(d->end_capture(d, S1, &g), VPMM_DRV_OK);
    assert_ptr_equal(g, cg);
    vpmm_host_exec_t x = NULL;
    assert_int_equal(vpmm_host_graph_instantiate(d, g, NULL), VPMM_DRV_INVALID);
    assert_int_equal(vpmm_host_graph_instantiate(d, g, &x), VPMM_DRV_OK);
    assert_non_null(x);
    assert_int_equal(vpmm_host_graphs(d), 2);
    CHECKED(d);

    assert_int_equal(vpmm_host_graph_destroy(d, g), VPMM_DRV_OK);
    assert_int_equal(log.runs, 0); /* the exec holds it */
    CHECKED(d);

    assert_int_equal(vpmm_host_enqueue(d, S2), 1); /* pending work ahead of the launch */
    assert_int_equal(vpmm_host_graph_launch(d, x, S2), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_stream_enqueued(d, S2), 2);
    assert_int_equal(vpmm_host_exec_destroy(d, x), VPMM_DRV_OK);
    assert_int_equal(log.runs, 0); /* the launch is pending */
    assert_int_equal(vpmm_host_graphs(d), 1);
    assert_int_equal(vpmm_host_user_objects(d), 1);
    /* The handle died at destroy; the exec lives on. */
    expect_control_failure(d, vpmm_host_exec_destroy(d, x), VPMM_DRV_INVALID, 1,
                           "cuGraphExecDestroy");
    expect_control_failure(d, vpmm_host_graph_launch(d, x, S2), VPMM_DRV_INVALID, 1,
                           "cuGraphLaunch");
    CHECKED(d);

    assert_int_equal(vpmm_host_advance(d, S2, 1), 1); /* the work ahead only */
    assert_int_equal(log.runs, 0);
    CHECKED(d);
    vpmm_host_complete(d, S2);
    assert_int_equal(log.runs, 1);
    assert_int_equal(log.bad_in_dtor, 0);
    vpmm_host_complete_all(d);
    assert_int_equal(d->synchronize(d), VPMM_DRV_OK);
    assert_int_equal(log.runs, 1); /* exactly once */
    expect_empty(d);
    close_host(d);
}

/* Several user objects on one graph, and an exec launched on two streams. */
static void test_several_user_objects_one_graph(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    enum { n = 5 };
    dtor_log_t log[n];
    vpmm_drv_uobj_t o[n];
    vpmm_graph_t g;
    vpmm_host_exec_t x;
    assert_int_equal(d->begin_capture(d, S1, VPMM_CAPTURE_MODE_THREAD_LOCAL), VPMM_DRV_OK);
    assert_int_equal(d->end_capture(d, S1, &g), VPMM_DRV_OK);
    for (int i = 0; i < n; i++) {
        log[i] = (dtor_log_t){ .d = d };
        o[i] = uobj_new(d, &log[i]);
        if (i < n - 1) /* the last one stays the caller's */
            assert_int_equal(d->graph_retain_user_object(d, g, o[i]), VPMM_DRV_OK);
    }
    assert_int_equal(vpmm_host_graph_instantiate(d, g, &x), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graph_destroy(d, g), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graph_launch(d, x, S1), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graph_launch(d, x, S2), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graph_launch(d, x, S1), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_exec_destroy(d, x), VPMM_DRV_OK);
    CHECKED(d);
    vpmm_host_complete(d, S1);
    for (int i = 0; i < n; i++)
        assert_int_equal(log[i].runs, 0); /* the launch on S2 is still pending */
    assert_int_equal(vpmm_host_advance(d, S2, 5), 1);
    for (int i = 0; i < n - 1; i++) {
        assert_int_equal(log[i].runs, 1);
        assert_int_equal(log[i].bad_in_dtor, 0);
    }
    assert_int_equal(log[n - 1].runs, 0);
    assert_int_equal(vpmm_host_user_objects(d), 1);
    assert_int_equal(vpmm_host_graphs(d), 0);
    assert_int_equal(d->user_object_release(d, o[n - 1]), VPMM_DRV_OK);
    assert_int_equal(log[n - 1].runs, 1);
    expect_empty(d);
    close_host(d);
}

/* Two execs of one graph each hold their own reference. */
static void test_two_execs_of_one_graph(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    dtor_log_t log = { .d = d };
    vpmm_drv_uobj_t o = uobj_new(d, &log);
    vpmm_graph_t g;
    vpmm_host_exec_t a, b;
    assert_int_equal(d->begin_capture(d, S1, VPMM_CAPTURE_MODE_GLOBAL), VPMM_DRV_OK);
    assert_int_equal(d->end_capture(d, S1, &g), VPMM_DRV_OK);
    assert_int_equal(d->graph_retain_user_object(d, g, o), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graph_instantiate(d, g, &a), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graph_instantiate(d, g, &b), VPMM_DRV_OK);
    assert_true(a != b);
    assert_int_equal(vpmm_host_graphs(d), 3);
    assert_int_equal(vpmm_host_graph_destroy(d, g), VPMM_DRV_OK);

    /* a: launched and completed before its destroy, so it goes at once; b still holds it. */
    assert_int_equal(vpmm_host_graph_launch(d, a, S1), VPMM_DRV_OK);
    vpmm_host_complete(d, S1);
    assert_int_equal(vpmm_host_exec_destroy(d, a), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graphs(d), 1);
    assert_int_equal(log.runs, 0);

    /* b: its launch waits (through a barrier) for work on S3; completing S2 completes S3 first,
     * and the destroyed b goes with it. */
    vpmm_drv_event_t ev;
    assert_int_equal(d->event_create(d, &ev), VPMM_DRV_OK);
    vpmm_host_enqueue(d, S3);
    assert_int_equal(d->event_record(d, ev, S3), VPMM_DRV_OK);
    assert_int_equal(d->stream_wait_event(d, S2, ev), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graph_launch(d, b, S2), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_exec_destroy(d, b), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_advance(d, S2, 1), 0); /* blocked by the barrier */
    assert_int_equal(log.runs, 0);
    CHECKED(d);
    vpmm_host_complete(d, S2);
    assert_int_equal(log.runs, 1);
    assert_int_equal(log.bad_in_dtor, 0);
    assert_int_equal(d->event_destroy(d, ev), VPMM_DRV_OK);
    expect_empty(d);
    close_host(d);
}

/* Instantiation while capturing (CUDA permits it), launch rules, and synchronize as progress. */
static void test_exec_rules(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    dtor_log_t log = { .d = d };
    vpmm_capture_status_t st;
    vpmm_drv_uobj_t o = uobj_new(d, &log);
    vpmm_host_exec_t x;
    vpmm_graph_t g;
    assert_int_equal(d->begin_capture(d, S1, VPMM_CAPTURE_MODE_GLOBAL), VPMM_DRV_OK);
    vpmm_graph_t cg = capture_graph(d, S1, &st);
    assert_int_equal(d->graph_retain_user_object(d, cg, o), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graph_instantiate(d, cg, &x), VPMM_DRV_OK);
    /* Launching into a capture is not emulated. */
    expect_control_failure(d, vpmm_host_graph_launch(d, x, S1), VPMM_DRV_NOT_SUPPORTED, 801,
                           "cuGraphLaunch");
    assert_int_equal(vpmm_host_stream_enqueued(d, S1), 0);
    assert_int_equal(d->end_capture(d, S1, &g), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graph_destroy(d, g), VPMM_DRV_OK);
    assert_int_equal(log.runs, 0);

    /* The legacy stream takes launches; synchronize completes them and frees the exec. */
    assert_int_equal(vpmm_host_graph_launch(d, x, NULL), VPMM_DRV_OK);
    assert_false(vpmm_host_stream_idle(d, NULL));
    assert_int_equal(vpmm_host_exec_destroy(d, x), VPMM_DRV_OK);
    assert_int_equal(log.runs, 0);
    CHECKED(d);
    assert_int_equal(d->synchronize(d), VPMM_DRV_OK);
    assert_int_equal(log.runs, 1);
    assert_int_equal(log.bad_in_dtor, 0);
    expect_empty(d);
    close_host(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_entry_names),
        cmocka_unit_test(test_open_options),
        cmocka_unit_test(test_controls_reject_foreign_driver),
        cmocka_unit_test(test_reserve_free),
        cmocka_unit_test(test_close_releases_everything),
        cmocka_unit_test(test_create_release_limit),
        cmocka_unit_test(test_memory_returned),
        cmocka_unit_test(test_map_validation),
        cmocka_unit_test(test_aliasing),
        cmocka_unit_test(test_partial_mapping_refused),
        cmocka_unit_test(test_set_access_rules),
        cmocka_unit_test(test_unmap_rules),
        cmocka_unit_test(test_release_while_mapped),
        cmocka_unit_test(test_many_handles_few_fds),
        cmocka_unit_test(test_random_against_model),
        cmocka_unit_test(test_streams),
        cmocka_unit_test(test_event_record_query),
        cmocka_unit_test(test_waits_across_three_streams),
        cmocka_unit_test(test_barrier_graphs),
        cmocka_unit_test(test_capture_basics),
        cmocka_unit_test(test_capture_invalidation),
        cmocka_unit_test(test_capture_join),
        cmocka_unit_test(test_capture_not_on_legacy_stream),
        cmocka_unit_test(test_capture_via_table),
        cmocka_unit_test(test_capture_invalidated_end),
        cmocka_unit_test(test_user_object_release),
        cmocka_unit_test(test_destructor_reenters),
        cmocka_unit_test(test_user_object_lifecycle),
        cmocka_unit_test(test_several_user_objects_one_graph),
        cmocka_unit_test(test_two_execs_of_one_graph),
        cmocka_unit_test(test_exec_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
