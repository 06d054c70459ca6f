/*
 * test_driver_host.c — tests of the host emulation backend's basics and memory side
 * (src/backends/host/driver_host.c, driver_host_mem.c, driver_host_access.c): entry names, open
 * options, the controls' refusal of a foreign driver, VA reservations and their limit (va_limit),
 * close() releasing everything, handles and the memory limit, map/unmap/set_access validation, real
 * aliasing, deferred release, and the fd budget (thousands of handles, one memfd), with a random
 * run against a small model. Streams, events and capture are tested in test_driver_host_stream.c,
 * graphs and user objects in test_driver_host_graph.c; the helpers they share are in
 * driver_host_test_util.h.
 *
 * Every test opens its own node and calls vpmm_host_check() after each mutation (CHECKED)
 * and before closing. Inaccessible memory is never touched: protections are read from the
 * kernel's table (/proc/self/maps, vma_at in driver_host_test_util.c), so a PROT_NONE page raises
 * no signal and valgrind sees no access to it. Several devices, access per device, export and
 * import are tested in test_driver_host_devices.c.
 */
#include "driver_host_test_util.h"
#include "test_rng.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

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

/*
 * Aliased mappings break a compiler assumption: two different addresses are two different bytes.
 * Accesses that must observe a write through another alias go through volatile pointers, and
 * bulk copies are fenced with a compiler barrier, or -O2 may reorder the read before the write.
 */
typedef volatile unsigned char vbyte_t;
#define ALIAS_BARRIER() __asm__ __volatile__("" ::: "memory")

/* 1 if p lies in a shared mapping of the backend's memfd (not a PROT_NONE placeholder). */
static int memfd_backed(const void *p)
{
    vma_t v = vma_at(p);
    return v.found && v.perms[3] == 's' && strstr(v.path, "memfd:vpmm-host") != NULL;
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
        "cuMemSetAccess",
        "cuMemGetAccess",
        "cuStreamGetDevice",
        "cuMemExportToShareableHandle",
        "cuMemImportFromShareableHandle",
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
    assert_null(vpmm_host_thread_stream(NULL));
    assert_null(vpmm_host_thread_stream(&fake));
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
    assert_int_equal(vpmm_host_check_access(&fake, 0), 1);
    assert_int_equal(vpmm_host_check_access(NULL, 0), 1);
    assert_int_equal(vpmm_host_can_access(&fake, 0x200000, 1), 0);
    assert_int_equal(vpmm_host_can_access(NULL, 0x200000, 0), 0);
    vpmm_driver_t *v = (vpmm_driver_t *)&fake;
    assert_int_equal(vpmm_host_open_device(&fake, 0, &v), VPMM_DRV_INVALID);
    assert_null(v);
    assert_int_equal(vpmm_host_open_device(NULL, 0, &v), VPMM_DRV_INVALID);
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

/* va_limit bounds the bytes reserved at once: past it va_reserve fails as cuMemAddressReserve does
 * when the address space is exhausted, doing nothing, and freeing makes room again. */
static void test_va_limit(void **state)
{
    (void)state;
    vpmm_host_options_t opt = { .va_limit = 8 * G };
    vpmm_driver_t *d = open_host_opt(&opt);
    uintptr_t a = 0, b = 0, va = 0x1234;
    assert_int_equal(d->va_reserve(d, 4 * G, 0, &a), VPMM_DRV_OK);
    assert_int_equal(d->va_reserve(d, 3 * G, 2 * G, &b), VPMM_DRV_OK);
    CHECKED(d);
    vpmm_host_counts_t c;
    vpmm_host_counts(d, &c);
    assert_int_equal(c.reserved_bytes, 7 * G);

    expect_failure(d, d->va_reserve(d, 2 * G, 0, &va), VPMM_DRV_OUT_OF_MEMORY, 2,
                   VPMM_DRV_VA_RESERVE);
    expect_failure(d, d->va_reserve(d, 9 * G, 0, &va), VPMM_DRV_OUT_OF_MEMORY, 2,
                   VPMM_DRV_VA_RESERVE);
    expect_failure(d, d->va_reserve(d, SIZE_MAX - G + 1, 0, &va), VPMM_DRV_OUT_OF_MEMORY, 2,
                   VPMM_DRV_VA_RESERVE);
    /* Bad arguments are still refused as such. */
    expect_failure(d, d->va_reserve(d, G + 4096, 0, &va), VPMM_DRV_INVALID, 1, VPMM_DRV_VA_RESERVE);
    assert_int_equal(va, 0x1234);
    expect_same_counts(d, &c);
    CHECKED(d);

    /* Exactly up to the limit fits; freeing makes room again. */
    assert_int_equal(d->va_reserve(d, G, 0, &va), VPMM_DRV_OK);
    expect_failure(d, d->va_reserve(d, G, 0, &va), VPMM_DRV_OUT_OF_MEMORY, 2, VPMM_DRV_VA_RESERVE);
    assert_int_equal(d->va_free(d, a, 4 * G), VPMM_DRV_OK);
    assert_int_equal(d->va_reserve(d, 4 * G, 0, &a), VPMM_DRV_OK);
    CHECKED(d);
    assert_int_equal(d->va_free(d, a, 4 * G), VPMM_DRV_OK);
    assert_int_equal(d->va_free(d, b, 3 * G), VPMM_DRV_OK);
    assert_int_equal(d->va_free(d, va, G), VPMM_DRV_OK);
    expect_empty(d);
    close_host(d);

    /* 0 is unlimited (the default). */
    d = open_host(0, 0);
    assert_int_equal(d->va_reserve(d, 64 * G, 0, &a), VPMM_DRV_OK);
    assert_int_equal(d->va_free(d, a, 64 * G), VPMM_DRV_OK);
    close_host(d);
}

/* close() gives back what is left: reservations with live mappings, handles, events, graphs,
 * execs (one destroyed with a launch pending) and user objects, running no destructor. */
static void test_close_releases_everything(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 64 * MiB);
    uintptr_t va = reserve(d, 8 * MiB);
    vpmm_drv_handle_t h = create(d, 4 * MiB);
    map_rw(d, va, 4 * MiB, h);
    memset((void *)va, 1, 4 * MiB);
    vpmm_drv_event_t ev;
    assert_int_equal(d->event_create(d, NULL, &ev), VPMM_DRV_OK);
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
        map_rw(d, va + (size_t)i * G, G, h[i]);
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
    map_rw(d, va + 4 * G, G, h[1]);
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
    map_rw(d, va + 8 * MiB, 4 * MiB, h); /* an existing mapping to collide with */

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
    map_rw(d, va, G, h);
    map_rw(d, other + G, G, h); /* in another reservation */
    map_rw(d, va + 4 * MiB, G, h);

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
    map_rw(d, va, 2 * G, h);
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
    expect_failure(d, d->set_access(d, va, G, NULL, 0), VPMM_DRV_INVALID, 1, VPMM_DRV_SET_ACCESS);

    /* A fresh mapping is inaccessible until set_access. */
    assert_int_equal(d->mem_map(d, va, G, h1, 0), VPMM_DRV_OK);
    assert_int_equal(d->mem_map(d, va + G, 2 * G, h2, 0), VPMM_DRV_OK);
    assert_int_equal(d->mem_map(d, va + 4 * G, G, h3, 0), VPMM_DRV_OK); /* gap at 3G */
    CHECKED(d);
    assert_false(readable((void *)va));
    assert_false(readable((void *)(va + G)));

    /* Bad ranges: misaligned, empty, a gap, past the end. */
    expect_failure(d, d->set_access(d, va + 4096, G, NULL, 0), VPMM_DRV_INVALID, 1,
                   VPMM_DRV_SET_ACCESS);
    expect_failure(d, d->set_access(d, va, G + 4096, NULL, 0), VPMM_DRV_INVALID, 1,
                   VPMM_DRV_SET_ACCESS);
    expect_failure(d, d->set_access(d, va, 0, NULL, 0), VPMM_DRV_INVALID, 1, VPMM_DRV_SET_ACCESS);
    expect_failure(d, d->set_access(d, va, 5 * G, NULL, 0), VPMM_DRV_INVALID, 1,
                   VPMM_DRV_SET_ACCESS);
    expect_failure(d, d->set_access(d, va + 2 * G, 2 * G, NULL, 0), VPMM_DRV_INVALID, 1,
                   VPMM_DRV_SET_ACCESS);
    assert_false(readable((void *)va));

    /* Part of one mapping, then a range spanning two adjacent mappings. */
    assert_int_equal(d->set_access(d, va + 2 * G, G, NULL, 0), VPMM_DRV_OK);
    assert_false(readable((void *)(va + G)));
    assert_true(writable((void *)(va + 2 * G)));
    assert_int_equal(d->set_access(d, va, 3 * G, NULL, 0), VPMM_DRV_OK);
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
    map_rw(d, va, 4 * MiB, h);
    map_rw(d, va + 4 * MiB, G, h2);
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
    expect_failure(d, d->set_access(d, va, G, NULL, 0), VPMM_DRV_INVALID, 1, VPMM_DRV_SET_ACCESS);
    expect_failure(d, d->mem_unmap(d, va, 4 * MiB), VPMM_DRV_INVALID, 1, VPMM_DRV_MEM_UNMAP);
    vpmm_host_counts_t after;
    vpmm_host_counts(d, &after);
    assert_int_equal(after.mappings, 1);
    assert_int_equal(after.mapped_bytes, G);
    assert_int_equal(after.reservations, 1);

    map_rw(d, va + 6 * MiB, 4 * MiB, h); /* same handle, different place: contents kept */
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
    map_rw(d, va, G, h);
    map_rw(d, va + 2 * G, G, h);
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
    assert_int_equal(d->set_access(d, va, N * page, NULL, 0), VPMM_DRV_OK);
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
    trng_t gen = { 88172645463325252ULL };

    for (int step = 0; step < STEPS; step++) {
        uint64_t rng = trng_next(&gen);
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
            assert_int_equal(d->set_access(d, va + (size_t)slot * g, len * g, NULL, 0),
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_entry_names),
        cmocka_unit_test(test_open_options),
        cmocka_unit_test(test_controls_reject_foreign_driver),
        cmocka_unit_test(test_reserve_free),
        cmocka_unit_test(test_va_limit),
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
