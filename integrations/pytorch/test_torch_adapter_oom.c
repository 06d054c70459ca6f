/*
 * test_torch_adapter_oom.c — the PyTorch adapter (torch_adapter.c) when host memory runs out:
 * every malloc, calloc and realloc that the adapter, vpmm and the host backend make during a
 * scenario is refused in turn (the executable is linked with --wrap=malloc,--wrap=calloc,
 * --wrap=realloc and tests/oom_wrap.c; integrations/CMakeLists.txt).
 *
 * For n = 1, 2, 3 ... a fresh pool and device state run the scenario with their n-th allocation
 * refused, until a run refuses none. Each call must succeed or answer a clear status
 * (HOST_OUT_OF_MEMORY; OUT_OF_MEMORY or DRIVER where the host backend's own allocation failed
 * under a driver call; vta_device_init -1), never crash; after each call vpmm's invariants hold;
 * an external allocation that could not be counted leaves the statistics as they were; in the
 * end everything is freed, the device state and the pool are destroyed (LeakSanitizer checks the
 * host memory in the sanitizer build).
 *
 * The scenario: the device state with a segment sink, shared allocations, recordStream, a mempool
 * id with a warm-up allocation and a checkpoint taken and applied (the CheckpointDelta arrays), a
 * MemPool with its own allocator and an allocation counted for it, snapshots of both kinds, the
 * statistics, emptyCache; the device table's recordStream and free, a memory fraction set and
 * lifted; CUDA IPC through its successful paths (an allocation exported, opened on a second device
 * state over another host pool, written through the import, closed, freed) and an open of a handle
 * that is not vpmm's (refused before anything is allocated).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* open_memstream */
#endif
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "oom_wrap.h"
#include "torch_adapter.h"

#define MiB ((size_t)1 << 20)

static unsigned long run_n;       /* the allocation this run refuses (messages) */
static unsigned long round_trips; /* runs whose IPC export, open and close all succeeded */

static const vta_pool_id_t SHARED = { 0, 0 }, TREE = { 0, 1 }, OWN = { 0, 2 };

static vpmm_pool_t *pool, *pool2; /* pool2: another process's, in IPC (its own host node) */
static vta_device_t dev, dev2;

static void assert_clear(vpmm_status_t st, const char *what)
{
    if (st != VPMM_SUCCESS && st != VPMM_ERROR_HOST_OUT_OF_MEMORY &&
        st != VPMM_ERROR_OUT_OF_MEMORY && st != VPMM_ERROR_DRIVER)
        fail_msg("%s with allocation #%lu refused: %s (%s)", what, run_n, vpmm_status_name(st),
                 vpmm_last_error());
    assert_int_equal(vpmm_pool_check(pool, stderr), 0);
}

static vpmm_status_t checked(vpmm_status_t st, const char *what)
{
    assert_clear(st, what);
    return st;
}

/* Runs call armed; its status, after the checks. */
#define ARMED(what, call) checked(OOM_ARMED(call), (what))

/* The same for a call that must end what it began: refused, it is made again unarmed. */
#define ARMED_THEN_SURE(what, call)                                                                \
    do {                                                                                           \
        if (ARMED(what, call) != VPMM_SUCCESS)                                                     \
            assert_int_equal((call), VPMM_SUCCESS);                                                \
    } while (0)

static void checkpoint_part(vpmm_stream_t s)
{
    void *w = NULL, **freed = NULL, **allocd = NULL;
    size_t nfreed = 0, nallocd = 0;
    vpmm_checkpoint_t *ck = NULL;
    if (ARMED("vta_pool_incref", vta_pool_incref(&dev, TREE)) != VPMM_SUCCESS)
        return;
    (void)ARMED("vta_malloc (mempool)", vta_malloc(&dev, 4000, s, TREE, &w));
    if (ARMED("vta_checkpoint_take", vta_checkpoint_take(&dev, TREE, &ck)) == VPMM_SUCCESS) {
        if (ARMED("vta_checkpoint_apply", vta_checkpoint_apply(&dev, ck, &freed, &nfreed, &allocd,
                                                               &nallocd)) == VPMM_SUCCESS) {
            free(freed);
            free(allocd);
        }
        vpmm_checkpoint_destroy(ck);
    }
    if (w != NULL)
        ARMED_THEN_SURE("vta_free (mempool)", vta_free(&dev, w));
    ARMED_THEN_SURE("vta_pool_decref", vta_pool_decref(&dev, TREE));
}

static void external_part(vpmm_stream_t s)
{
    void *mine = (void *)(uintptr_t)0x7f0000100000;
    vta_stats_t before, after;
    size_t size = 0;
    if (ARMED("vta_pool_incref_external", vta_pool_incref_external(&dev, OWN)) != VPMM_SUCCESS)
        return;
    vta_get_stats(&dev, &before);
    if (ARMED("vta_external_add", vta_external_add(&dev, OWN, mine, 2 * MiB, s)) == VPMM_SUCCESS) {
        assert_int_equal(vta_external_remove(&dev, mine, &size), 1);
        assert_int_equal(size, 2 * MiB);
    } else {
        vta_get_stats(&dev, &after); /* nothing counted */
        assert_int_equal(after.allocated_bytes[VTA_ALL].current,
                         before.allocated_bytes[VTA_ALL].current);
        assert_int_equal(after.allocation[VTA_ALL].current, before.allocation[VTA_ALL].current);
    }
    ARMED_THEN_SURE("vta_pool_decref (external)", vta_pool_decref(&dev, OWN));
}

/* Several devices, the memory fraction: each answer clear, nothing left behind. */
static void devices_part(vpmm_stream_t t)
{
    vta_device_t *devs[2] = { &dev, NULL };
    void *c = NULL;
    int owner = -1;
    if (ARMED("vta_malloc (table)", vta_malloc(&dev, 5000, t, SHARED, &c)) != VPMM_SUCCESS)
        return;
    (void)ARMED("vta_record_stream_any",
                vta_record_stream_any(devs, 2, c, 1, (vpmm_stream_t)(uintptr_t)0x5300, &owner));
    (void)ARMED("vta_set_memory_fraction", vta_set_memory_fraction(&dev, 0.5, (size_t)1 << 30));
    ARMED_THEN_SURE("vta_set_memory_fraction (lift)", vta_set_memory_fraction(&dev, 1.0, 0));
    ARMED_THEN_SURE("vta_free_any", vta_free_any(devs, 2, c, &owner, NULL));
}

/*
 * CUDA IPC through the successful paths: an allocation exported on dev, opened on dev2 (another
 * pool of this process), checked through both mappings, closed, freed; then a handle that is not
 * vpmm's, refused before anything is allocated. A step refused for host memory leaves the ones
 * after it undone (an export that failed exported nothing; an open that failed mapped nothing);
 * the free then ends what is left.
 */
static void ipc_part(vpmm_stream_t t)
{
    unsigned char native[66] = { 2, 'c' }, *h = NULL;
    size_t len = 0, off = 0, now = 9;
    void *c = NULL, *q = NULL, *p = NULL;
    vpmm_status_t st;
    if (ARMED("vta_malloc (ipc)", vta_malloc(&dev, 3 * MiB, t, SHARED, &c)) != VPMM_SUCCESS)
        return;
    memset(c, 0x21, 3 * MiB);
    st = OOM_ARMED(vta_ipc_export(&dev, (char *)c + 4096, &h, &len, &off));
    assert_clear(st, "vta_ipc_export");
    if (st == VPMM_SUCCESS) {
        assert_non_null(h);
        assert_int_equal(off, 4096);
        if (ARMED("vta_ipc_open", vta_ipc_open(&dev2, h, len, &q)) == VPMM_SUCCESS) {
            assert_int_equal(((unsigned char *)q)[off], 0x21);
            ((unsigned char *)q)[off] = 0x42;
            assert_int_equal(((unsigned char *)c)[4096], 0x42);
            if (ARMED("vta_ipc_close", vta_ipc_close(&dev2, q)) == VPMM_SUCCESS)
                round_trips++;
            else
                assert_int_equal(vta_ipc_close(&dev2, q), VPMM_SUCCESS);
        } else {
            assert_null(q);
        }
        free(h);
    } else {
        assert_null(h);
    }
    vta_ipc_counts(&dev2, NULL, NULL, NULL, &now, NULL);
    assert_int_equal(now, 0);
    assert_int_equal(vpmm_pool_check(pool2, stderr), 0);
    assert_int_equal(OOM_ARMED(vta_ipc_open(&dev2, native, sizeof native, &p)),
                     VPMM_ERROR_INVALID_ARGUMENT);
    assert_null(p);
    ARMED_THEN_SURE("vta_free (ipc)", vta_free(&dev, c));
}

/* The segment events' sink: counts (it must allocate nothing: it runs under vpmm's lock). */
static void count_sink(void *user, int device, vpmm_segment_event_t ev, uintptr_t addr, size_t size,
                       vta_pool_id_t id)
{
    long *live = user;
    (void)device, (void)addr, (void)size, (void)id;
    *live += ev == VPMM_SEGMENT_MAPPED ? 1 : -1;
}

static void scenario(void)
{
    vpmm_stream_t s = (vpmm_stream_t)(uintptr_t)0x5100, t = (vpmm_stream_t)(uintptr_t)0x5200;
    void *a = NULL, *b = NULL;
    vta_segment_t *segs = NULL;
    vta_stats_t st;
    size_t n = 0;
    static long live_segments;
    live_segments = 0;
    (void)ARMED("vta_segments_attach", vta_segments_attach(&dev, count_sink, &live_segments));
    (void)ARMED("vta_malloc", vta_malloc(&dev, 3 * MiB, s, SHARED, &a));
    (void)ARMED("vta_malloc", vta_malloc(&dev, 1000, s, SHARED, &b));
    if (b != NULL)
        (void)ARMED("vta_record_stream", vta_record_stream(&dev, b, t));
    checkpoint_part(s);
    external_part(s);
    devices_part(t);
    ipc_part(t);
    if (ARMED("vta_snapshot", vta_snapshot(&dev, SHARED, 1, &segs, &n)) == VPMM_SUCCESS)
        vta_snapshot_free(segs, n);
    if (ARMED("vta_snapshot_handles", vta_snapshot_handles(&dev, SHARED, 1, &segs, &n)) ==
        VPMM_SUCCESS) {
        assert_int_equal((long)n, live_segments); /* what the events said */
        vta_snapshot_free(segs, n);
    }
    oom_armed = 1;
    vta_get_stats(&dev, &st);
    (void)vta_empty_cache(&dev);
    oom_armed = 0;
    assert_int_equal(vpmm_pool_check(pool, stderr), 0);
    if (a != NULL)
        ARMED_THEN_SURE("vta_free", vta_free(&dev, a));
    if (b != NULL)
        ARMED_THEN_SURE("vta_free", vta_free(&dev, b));
}

static vpmm_pool_t *host_pool(void)
{
    vpmm_config_t c;
    vpmm_pool_t *p = NULL;
    vpmm_config_init(&c);
    c.backend = VPMM_BACKEND_HOST;
    c.ignore_env = 1;
    c.va_size = (size_t)4 << 30;
    assert_int_equal(vpmm_pool_create(&c, &p), VPMM_SUCCESS);
    return p;
}

static unsigned long run_once(unsigned long n)
{
    int rc;
    oom_start(n);
    run_n = n;
    pool = host_pool();
    pool2 = host_pool();
    assert_int_equal(vta_device_init(&dev2, pool2, 0), 0);
    oom_armed = 1;
    rc = vta_device_init(&dev, pool, 0);
    oom_armed = 0;
    if (rc == 0) {
        scenario();
        oom_armed = 1;
        vta_device_fini(&dev);
        oom_armed = 0;
    } else {
        assert_int_equal(rc, -1);
    }
    vta_device_fini(&dev2);
    assert_int_equal(vpmm_pool_check(pool, stderr), 0);
    assert_int_equal(vpmm_pool_check(pool2, stderr), 0);
    assert_int_equal(vpmm_pool_destroy(pool2), VPMM_SUCCESS);
    assert_int_equal(vpmm_pool_destroy(pool), VPMM_SUCCESS);
    return oom_refused();
}

static void test_sweep(void **state)
{
    unsigned long n, total = 0;
    (void)state;
    for (n = 1; n < 100000; n++) {
        unsigned long r = run_once(n);
        if (r == 0)
            break;
        total += r;
    }
    print_message("adapter host OOM sweep: %lu runs, each with one allocation refused\n", n - 1);
    assert_true(n > 20);
    assert_true(round_trips > 0); /* the successful paths were run, refusals around them */
    assert_true(total == n - 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sweep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
