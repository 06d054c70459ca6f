/*
 * test_driver_host_devices.c — tests of the host emulation backend's several devices
 * (src/backends/host/driver_host.c, driver_host_access.c, driver_host_stream.c; driver.h rule 9):
 * nodes of two and four devices and their views (fields, options, closing in any order), the
 * memory limit and mem_get_info per device, access per device (grant with and without peers,
 * revoke, get, an isolated peer, part of a mapping, vpmm_host_can_access), streams per device
 * (legacy and per-thread streams of each device, their implicit synchronisation, stream_device,
 * synchronize), events per device (recorded on their own device's streams only, waited on from
 * any), and the process-wide shared node (shared streams and VA, options refused, freed after its
 * last view, opened by vpmm_pool_create for a pool with config.device set). Export and import are
 * tested in test_driver_host_ipc.c.
 *
 * Every test opens its own node (the shared node's tests close every view they open) and calls
 * vpmm_host_check() and vpmm_host_check_access() after each mutation (CHECKED). Every failure is
 * checked to leave the node as it was: counts, access bits, the kernel's protections, streams.
 */
#include "driver_host_test_util.h"

#include <stdlib.h>
#include <string.h>

#include "vpmm.h"

/* ---- helpers ------------------------------------------------------------------------------ */

/* A node of `devices` devices, isolated as given, `limit` bytes per device; its view of device 0.
 */
static vpmm_driver_t *open_node(int devices, uint64_t isolated, size_t limit)
{
    vpmm_host_options_t opt = { .memory_limit = limit, .devices = devices, .isolated = isolated };
    return open_host_opt(&opt);
}

/* A view of device dev of sibling's node. */
static vpmm_driver_t *open_view(vpmm_driver_t *sibling, int dev)
{
    vpmm_driver_t *v = NULL;
    assert_int_equal(vpmm_host_open_device(sibling, dev, &v), VPMM_DRV_OK);
    assert_non_null(v);
    assert_int_equal(v->device, dev);
    CHECKED(v);
    return v;
}

/* Views of every device of d's node: v[0] = d, v[k] a new view of device k. */
static void open_views(vpmm_driver_t *d, vpmm_driver_t **v, int n)
{
    v[0] = d;
    for (int k = 1; k < n; k++)
        v[k] = open_view(d, k);
}

/* Closes v[n-1] .. v[0], the last one freeing the node. */
static void close_views(vpmm_driver_t **v, int n)
{
    for (int k = n - 1; k >= 0; k--)
        close_host(v[k]);
}

/* The devices that may access va (get_access for each of the node's devices). */
static uint64_t access_at(vpmm_driver_t *d, uintptr_t va)
{
    uint64_t mask = 0;
    for (int k = 0; k < d->device_count; k++) {
        int rw = -1;
        assert_int_equal(d->get_access(d, va, k, &rw), VPMM_DRV_OK);
        assert_true(rw == 0 || rw == 1);
        mask |= (uint64_t)rw << k;
    }
    return mask;
}

static int device_of(vpmm_driver_t *d, vpmm_stream_t s)
{
    int dev = -1;
    assert_int_equal(d->stream_device(d, s, &dev), VPMM_DRV_OK);
    return dev;
}

static vpmm_drv_event_t event_on(vpmm_driver_t *d, vpmm_stream_t on)
{
    vpmm_drv_event_t ev = NULL;
    assert_int_equal(d->event_create(d, on, &ev), VPMM_DRV_OK);
    CHECKED(d);
    return ev;
}

static size_t free_bytes(vpmm_driver_t *d)
{
    size_t free_b = 0, total = 0;
    assert_int_equal(d->mem_get_info(d, &free_b, &total), VPMM_DRV_OK);
    return free_b;
}

/* A mapping of one fresh handle of `size` bytes at va, granted to nobody yet. */
static vpmm_drv_handle_t map_new(vpmm_driver_t *d, uintptr_t va, size_t size)
{
    vpmm_drv_handle_t h = create(d, size);
    assert_int_equal(d->mem_map(d, va, size, h, 0), VPMM_DRV_OK);
    CHECKED(d);
    return h;
}

static void unmap_release(vpmm_driver_t *d, uintptr_t va, size_t size, vpmm_drv_handle_t h)
{
    assert_int_equal(d->mem_unmap(d, va, size), VPMM_DRV_OK);
    assert_int_equal(d->mem_release(d, h), VPMM_DRV_OK);
    CHECKED(d);
}

/* ---- nodes and views ---------------------------------------------------------------------- */

static void test_open_device_options(void **state)
{
    (void)state;
    vpmm_driver_t *d = (vpmm_driver_t *)&d;
    vpmm_host_options_t bad[] = {
        { .devices = -1 },
        { .devices = VPMM_DRV_MAX_DEVICES + 1 },
        { .devices = 2, .isolated = 1u << 2 }, /* isolates a device the node lacks */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(vpmm_host_open(&bad[i], &d), VPMM_DRV_INVALID);
        assert_null(d);
    }

    d = open_node(0, 0, 0); /* 0 = one device */
    assert_int_equal(d->device, 0);
    assert_int_equal(d->device_count, 1);
    assert_int_equal(d->peer_capable, 1);
    assert_int_equal(d->exportable, 1);
    close_host(d);

    d = open_node(VPMM_DRV_MAX_DEVICES, 0, 0);
    assert_int_equal(d->device_count, VPMM_DRV_MAX_DEVICES);
    assert_true(d->peer_capable == ~(uint64_t)0);
    vpmm_driver_t *last = open_view(d, VPMM_DRV_MAX_DEVICES - 1);
    assert_true(last->peer_capable == ~(uint64_t)0);
    close_host(last);
    close_host(d);

    vpmm_host_options_t ne = { .devices = 2, .not_exportable = 1 };
    d = open_host_opt(&ne);
    assert_int_equal(d->exportable, 0);
    vpmm_driver_t *v1 = open_view(d, 1);
    assert_int_equal(v1->exportable, 0); /* a view copies its sibling's */
    close_host(v1);
    close_host(d);
}

/* Every view is its own vpmm_driver_t: its device, the node's count, what it can reach. */
static void test_views_of_four_devices(void **state)
{
    (void)state;
    vpmm_driver_t *v[4];
    open_views(open_node(4, (uint64_t)1 << 2, 0), v, 4);
    static const uint64_t reach[4] = { 0xb, 0xb, 0x4, 0xb }; /* device 2 is isolated */
    for (int k = 0; k < 4; k++) {
        assert_int_equal(v[k]->device, k);
        assert_int_equal(v[k]->device_count, 4);
        assert_int_equal(v[k]->peer_capable, reach[k]);
        assert_int_equal(v[k]->exportable, 1);
        assert_string_equal(v[k]->name, "host");
    }
    /* A second view of a device is another instance of the same device. */
    vpmm_driver_t *again = open_view(v[3], 3);
    assert_ptr_not_equal(again, v[3]);
    assert_int_equal(again->peer_capable, reach[3]);
    close_host(again);
    close_views(v, 4);
}

static void test_open_device_refused(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_node(2, 0, 0);
    vpmm_driver_t *v = (vpmm_driver_t *)&v;
    assert_int_equal(vpmm_host_open_device(d, 2, &v), VPMM_DRV_INVALID);
    assert_null(v);
    v = (vpmm_driver_t *)&v;
    assert_int_equal(vpmm_host_open_device(d, -1, &v), VPMM_DRV_INVALID);
    assert_null(v);
    assert_int_equal(vpmm_host_open_device(d, 0, NULL), VPMM_DRV_INVALID);
    CHECKED(d);
    close_host(d); /* the refused opens left no view behind: this one frees the node */
}

/* The node lives until its last view closes, whatever the order; what one view made, the others
 * use and release. */
static void test_close_views_in_any_order(void **state)
{
    (void)state;
    size_t fds = open_fds();
    vpmm_driver_t *v[4];
    open_views(open_node(4, 0, 0), v, 4);
    uintptr_t va = reserve(v[2], 8 * MiB);
    vpmm_drv_handle_t h = map_new(v[3], va, G); /* made by device 3's view */
    assert_int_equal(v[1]->set_access(v[1], va, G, NULL, 0), VPMM_DRV_OK);
    memset((void *)va, 0x5a, G);
    vpmm_drv_event_t ev = event_on(v[3], NULL);

    close_host(v[3]); /* its handle, mapping and event stay: they are the node's */
    vpmm_host_counts_t c;
    vpmm_host_counts(v[0], &c);
    assert_int_equal(c.handles, 1);
    assert_int_equal(c.events, 1);
    assert_int_equal(((volatile unsigned char *)va)[G - 1], 0x5a);
    close_host(v[0]);
    assert_int_equal(v[2]->event_destroy(v[2], ev), VPMM_DRV_OK);
    unmap_release(v[1], va, G, h);
    assert_int_equal(v[2]->va_free(v[2], va, 8 * MiB), VPMM_DRV_OK);
    close_host(v[1]);
    expect_empty(v[2]);
    close_host(v[2]); /* the last view: the node and its memfd go */
    assert_int_equal(open_fds(), fds);
}

/* ---- memory per device -------------------------------------------------------------------- */

static void test_memory_limit_per_device(void **state)
{
    (void)state;
    vpmm_driver_t *v[2];
    open_views(open_node(2, 0, 4 * G), v, 2);
    vpmm_drv_handle_t h0 = create(v[0], 4 * G); /* device 0 full */
    vpmm_host_counts_t before;
    vpmm_host_counts(v[0], &before);
    vpmm_drv_handle_t none = 0;
    expect_failure(v[0], v[0]->mem_create(v[0], G, &none), VPMM_DRV_OUT_OF_MEMORY, 2,
                   VPMM_DRV_MEM_CREATE);
    assert_int_equal(none, 0);
    expect_same_counts(v[0], &before);
    CHECKED(v[0]);

    vpmm_drv_handle_t h1 = create(v[1], 4 * G); /* device 1 has memory of its own */
    vpmm_drv_handle_t extra = 0;
    expect_failure(v[1], v[1]->mem_create(v[1], G, &extra), VPMM_DRV_OUT_OF_MEMORY, 2,
                   VPMM_DRV_MEM_CREATE);
    vpmm_host_counts_t c;
    vpmm_host_counts(v[1], &c);
    assert_int_equal(c.handles, 2);
    assert_int_equal(c.handle_bytes, 8 * G); /* the node's total: both devices */

    /* Released through the other device's view, h0 still gives device 0 its memory back. */
    assert_int_equal(v[1]->mem_release(v[1], h0), VPMM_DRV_OK);
    CHECKED(v[1]);
    assert_int_equal(free_bytes(v[0]), 4 * G);
    assert_int_equal(free_bytes(v[1]), 0);
    assert_int_equal(v[0]->mem_release(v[0], h1), VPMM_DRV_OK);
    expect_empty(v[0]);
    close_views(v, 2);
}

static void test_mem_get_info_per_device(void **state)
{
    (void)state;
    vpmm_driver_t *v[4];
    open_views(open_node(4, 0, 16 * MiB), v, 4);
    vpmm_drv_handle_t h[4];
    for (int k = 0; k < 4; k++)
        h[k] = create(v[k], (size_t)(k + 1) * G);
    vpmm_driver_t *again = open_view(v[2], 2); /* another view of device 2: the same memory */
    for (int k = 0; k < 4; k++) {
        size_t free_b = 0, total = 0;
        assert_int_equal(v[k]->mem_get_info(v[k], &free_b, &total), VPMM_DRV_OK);
        assert_int_equal(total, 16 * MiB);
        assert_int_equal(free_b, 16 * MiB - (size_t)(k + 1) * G);
    }
    assert_int_equal(free_bytes(again), 16 * MiB - 3 * G);
    close_host(again);
    for (int k = 0; k < 4; k++)
        assert_int_equal(v[0]->mem_release(v[0], h[k]), VPMM_DRV_OK);
    expect_empty(v[0]);
    close_views(v, 4);
}

/* ---- access per device -------------------------------------------------------------------- */

static void test_set_access_without_peers_grants_own_device(void **state)
{
    (void)state;
    vpmm_driver_t *v[4];
    open_views(open_node(4, 0, 0), v, 4);
    uintptr_t va = reserve(v[0], 8 * MiB);
    vpmm_drv_handle_t h = map_new(v[0], va, 2 * G);
    assert_int_equal(access_at(v[0], va), 0); /* a new mapping: nobody */
    assert_false(readable((void *)va));
    assert_int_equal(vpmm_host_can_access(v[1], va, 2 * G), 0);

    assert_int_equal(v[1]->set_access(v[1], va, 2 * G, NULL, 0), VPMM_DRV_OK);
    CHECKED(v[1]);
    assert_int_equal(access_at(v[3], va), 1u << 1);
    assert_int_equal(access_at(v[3], va + 2 * G - 1), 1u << 1);
    assert_true(writable((void *)va));
    assert_int_equal(vpmm_host_can_access(v[1], va, 2 * G), 1);
    assert_int_equal(vpmm_host_can_access(v[0], va, 2 * G), 0); /* what the core must grant */
    assert_int_equal(vpmm_host_can_access(v[2], va + 5, 1), 0);
    unmap_release(v[0], va, 2 * G, h);
    assert_int_equal(v[0]->va_free(v[0], va, 8 * MiB), VPMM_DRV_OK);
    close_views(v, 4);
}

static void test_set_access_with_peers(void **state)
{
    (void)state;
    vpmm_driver_t *v[4];
    open_views(open_node(4, 0, 0), v, 4);
    uintptr_t va = reserve(v[0], 8 * MiB);
    vpmm_drv_handle_t h = map_new(v[1], va, G);
    const int peers[] = { 3, 0, 3 }; /* a repeat is harmless */
    assert_int_equal(v[1]->set_access(v[1], va, G, peers, 3), VPMM_DRV_OK);
    CHECKED(v[1]);
    assert_int_equal(access_at(v[1], va), 0xb);
    assert_int_equal(vpmm_host_can_access(v[3], va, G), 1);
    assert_int_equal(vpmm_host_can_access(v[2], va, G), 0);
    /* A later grant adds to the set. */
    const int two = 2;
    assert_int_equal(v[0]->set_access(v[0], va, G, &two, 1), VPMM_DRV_OK);
    CHECKED(v[0]);
    assert_int_equal(access_at(v[1], va), 0xf);
    unmap_release(v[0], va, G, h);
    assert_int_equal(v[0]->va_free(v[0], va, 8 * MiB), VPMM_DRV_OK);
    close_views(v, 4);
}

static void test_set_access_bad_peers_change_nothing(void **state)
{
    (void)state;
    vpmm_driver_t *v[2];
    open_views(open_node(2, 0, 0), v, 2);
    uintptr_t va = reserve(v[0], 8 * MiB);
    vpmm_drv_handle_t h = map_new(v[0], va, G), h2 = map_new(v[0], va + G, G);
    const int one = 1;
    assert_int_equal(v[0]->set_access(v[0], va + G, G, &one, 1), VPMM_DRV_OK);
    CHECKED(v[0]);
    const int out_of_range[] = { 1, 2 }, negative[] = { -1 };
    vpmm_host_counts_t before;
    vpmm_host_counts(v[0], &before);
    expect_failure(v[0], v[0]->set_access(v[0], va, 2 * G, out_of_range, 2), VPMM_DRV_INVALID, 1,
                   VPMM_DRV_SET_ACCESS);
    expect_failure(v[0], v[0]->set_access(v[0], va, 2 * G, negative, 1), VPMM_DRV_INVALID, 1,
                   VPMM_DRV_SET_ACCESS);
    expect_failure(v[0], v[0]->set_access(v[0], va, 2 * G, NULL, 1), VPMM_DRV_INVALID, 1,
                   VPMM_DRV_SET_ACCESS);
    expect_failure(v[1], v[1]->set_access(v[1], va, 3 * G, &one, 1), VPMM_DRV_INVALID, 1,
                   VPMM_DRV_SET_ACCESS); /* the third granule is not mapped */
    CHECKED(v[0]);
    expect_same_counts(v[0], &before);
    assert_int_equal(access_at(v[0], va), 0);
    assert_int_equal(access_at(v[0], va + G), 0x3);
    assert_false(readable((void *)va));
    assert_true(writable((void *)(va + G)));
    unmap_release(v[0], va, G, h);
    unmap_release(v[0], va + G, G, h2);
    assert_int_equal(v[0]->va_free(v[0], va, 8 * MiB), VPMM_DRV_OK);
    close_views(v, 2);
}

/* An isolated device can neither be granted another's memory nor grant its own: 217, nothing. */
static void test_set_access_isolated_peer(void **state)
{
    (void)state;
    vpmm_driver_t *v[3];
    open_views(open_node(3, (uint64_t)1 << 2, 0), v, 3);
    uintptr_t va = reserve(v[0], 8 * MiB);
    vpmm_drv_handle_t h = map_new(v[0], va, G), h2 = map_new(v[2], va + G, G);
    vpmm_host_counts_t before;
    vpmm_host_counts(v[0], &before);
    const int to_isolated[] = { 1, 2 }, to_zero = 0;
    expect_failure(v[0], v[0]->set_access(v[0], va, G, to_isolated, 2), VPMM_DRV_NOT_SUPPORTED, 217,
                   VPMM_DRV_SET_ACCESS);
    expect_failure(v[2], v[2]->set_access(v[2], va + G, G, &to_zero, 1), VPMM_DRV_NOT_SUPPORTED,
                   217, VPMM_DRV_SET_ACCESS);
    CHECKED(v[0]);
    expect_same_counts(v[0], &before);
    assert_int_equal(access_at(v[0], va), 0);
    assert_int_equal(access_at(v[0], va + G), 0);
    assert_false(readable((void *)va));
    assert_false(readable((void *)(va + G)));

    /* Its own memory, it may grant itself; the others may share among themselves. */
    assert_int_equal(v[2]->set_access(v[2], va + G, G, NULL, 0), VPMM_DRV_OK);
    const int one = 1;
    assert_int_equal(v[0]->set_access(v[0], va, G, &one, 1), VPMM_DRV_OK);
    CHECKED(v[0]);
    assert_int_equal(access_at(v[0], va), 0x3);
    assert_int_equal(access_at(v[0], va + G), 0x4);
    unmap_release(v[0], va, G, h);
    unmap_release(v[0], va + G, G, h2);
    assert_int_equal(v[0]->va_free(v[0], va, 8 * MiB), VPMM_DRV_OK);
    close_views(v, 3);
}

static void test_revoke_access(void **state)
{
    (void)state;
    vpmm_driver_t *v[4];
    open_views(open_node(4, 0, 0), v, 4);
    uintptr_t va = reserve(v[0], 8 * MiB);
    vpmm_drv_handle_t h = map_new(v[0], va, G), h2 = map_new(v[0], va + G, G);
    const int peers[] = { 1, 2 };
    assert_int_equal(v[0]->set_access(v[0], va, 2 * G, peers, 2), VPMM_DRV_OK);
    CHECKED(v[0]);

    /* One peer goes, over both mappings; the pages stay read-write for the others. */
    assert_int_equal(v[0]->revoke_access(v[0], va, 2 * G, 2), VPMM_DRV_OK);
    CHECKED(v[0]);
    assert_int_equal(access_at(v[0], va), 0x3);
    assert_int_equal(access_at(v[0], va + G), 0x3);
    assert_true(writable((void *)va));
    assert_int_equal(vpmm_host_can_access(v[2], va, 1), 0);
    /* A peer that never had access: nothing to do, and no error. */
    assert_int_equal(v[0]->revoke_access(v[0], va, G, 3), VPMM_DRV_OK);
    CHECKED(v[0]);
    assert_int_equal(access_at(v[0], va), 0x3);

    /* Refused, changing nothing: the own device, bad peers, bad or unmapped ranges. */
    vpmm_host_counts_t before;
    vpmm_host_counts(v[0], &before);
    const struct {
        uintptr_t va;
        size_t size;
        int peer;
    } bad[] = {
        { va, 2 * G, 0 }, { va, 2 * G, -1 },   { va, 2 * G, 4 },    { va, 3 * G, 1 },
        { va, 0, 1 },     { va + 4096, G, 1 }, { va, G + 4096, 1 }, { va + 3 * G, G, 1 },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_failure(v[0], v[0]->revoke_access(v[0], bad[i].va, bad[i].size, bad[i].peer),
                       VPMM_DRV_INVALID, 1, VPMM_DRV_REVOKE_ACCESS);
    CHECKED(v[0]);
    expect_same_counts(v[0], &before);
    assert_int_equal(access_at(v[0], va), 0x3);
    assert_int_equal(access_at(v[0], va + G), 0x3);
    unmap_release(v[0], va, G, h);
    unmap_release(v[0], va + G, G, h2);
    assert_int_equal(v[0]->va_free(v[0], va, 8 * MiB), VPMM_DRV_OK);
    close_views(v, 4);
}

/* Memory no device may access any more is inaccessible to the host too, until granted again. */
static void test_revoke_last_device_makes_pages_inaccessible(void **state)
{
    (void)state;
    vpmm_driver_t *v[2];
    open_views(open_node(2, 0, 0), v, 2);
    uintptr_t va = reserve(v[0], 8 * MiB);
    vpmm_drv_handle_t h = map_new(v[0], va, G);
    assert_int_equal(v[0]->set_access(v[0], va, G, NULL, 0), VPMM_DRV_OK);
    memset((void *)va, 0x77, G);
    assert_int_equal(v[1]->revoke_access(v[1], va, G, 0), VPMM_DRV_OK); /* device 0's, by 1 */
    CHECKED(v[1]);
    assert_int_equal(access_at(v[0], va), 0);
    assert_false(readable((void *)va));
    assert_int_equal(vpmm_host_can_access(v[0], va, G), 0);
    assert_int_equal(v[1]->set_access(v[1], va, G, NULL, 0), VPMM_DRV_OK);
    CHECKED(v[1]);
    assert_int_equal(access_at(v[0], va), 0x2);
    assert_int_equal(((volatile unsigned char *)va)[G / 2], 0x77); /* the bytes stayed */
    unmap_release(v[0], va, G, h);
    assert_int_equal(v[0]->va_free(v[0], va, 8 * MiB), VPMM_DRV_OK);
    close_views(v, 2);
}

/* Grants and revokes may cover part of a mapping: access is kept per granule. */
static void test_access_to_part_of_a_mapping(void **state)
{
    (void)state;
    vpmm_driver_t *v[3];
    open_views(open_node(3, 0, 0), v, 3);
    uintptr_t va = reserve(v[0], 16 * MiB);
    vpmm_drv_handle_t h = map_new(v[0], va, 4 * G), h2 = map_new(v[0], va + 4 * G, 2 * G);
    const int one = 1, two = 2;
    /* Granules 1-2 of the first mapping for devices 0 and 1. */
    assert_int_equal(v[0]->set_access(v[0], va + G, 2 * G, &one, 1), VPMM_DRV_OK);
    CHECKED(v[0]);
    assert_int_equal(access_at(v[0], va), 0);
    assert_int_equal(access_at(v[0], va + G), 0x3);
    assert_int_equal(access_at(v[0], va + 3 * G - 1), 0x3);
    assert_int_equal(access_at(v[0], va + 3 * G), 0);
    assert_false(readable((void *)va));
    assert_true(writable((void *)(va + G)));
    assert_false(readable((void *)(va + 3 * G)));
    assert_int_equal(vpmm_host_can_access(v[1], va + G, 2 * G), 1);
    assert_int_equal(vpmm_host_can_access(v[1], va + G - 1, 2), 0);
    assert_int_equal(vpmm_host_can_access(v[1], va + G, 2 * G + 1), 0);

    /* Across the two mappings: the last granule of the first and the first of the second. */
    assert_int_equal(v[2]->set_access(v[2], va + 3 * G, 2 * G, NULL, 0), VPMM_DRV_OK);
    CHECKED(v[2]);
    assert_int_equal(access_at(v[0], va + 3 * G), 0x4);
    assert_int_equal(access_at(v[0], va + 4 * G), 0x4);
    assert_int_equal(access_at(v[0], va + 5 * G), 0);
    assert_int_equal(vpmm_host_can_access(v[2], va + 3 * G, 2 * G), 1);

    /* Revoke device 1 from granule 2 only, then device 2 from granule 3: that one is nobody's. */
    assert_int_equal(v[0]->revoke_access(v[0], va + 2 * G, G, 1), VPMM_DRV_OK);
    CHECKED(v[0]);
    assert_int_equal(access_at(v[0], va + G), 0x3);
    assert_int_equal(access_at(v[0], va + 2 * G), 0x1);
    assert_int_equal(v[0]->revoke_access(v[0], va + 3 * G, G, 2), VPMM_DRV_OK);
    CHECKED(v[0]);
    assert_false(readable((void *)(va + 3 * G)));
    assert_true(writable((void *)(va + 4 * G)));
    /* One grant over the whole first mapping makes its granules alike again. */
    assert_int_equal(v[1]->set_access(v[1], va, 4 * G, &two, 1), VPMM_DRV_OK);
    CHECKED(v[1]);
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(access_at(v[0], va + i * G) & 0x6, 0x6);
    unmap_release(v[0], va, 4 * G, h);
    unmap_release(v[0], va + 4 * G, 2 * G, h2);
    assert_int_equal(v[0]->va_free(v[0], va, 16 * MiB), VPMM_DRV_OK);
    close_views(v, 3);
}

static void test_get_access_refused(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_node(2, 0, 0);
    uintptr_t va = reserve(d, 8 * MiB);
    vpmm_drv_handle_t h = map_new(d, va, G);
    int rw = 7;
    expect_failure(d, d->get_access(d, va + G, 0, &rw), VPMM_DRV_INVALID, 1, VPMM_DRV_GET_ACCESS);
    expect_failure(d, d->get_access(d, va, 2, &rw), VPMM_DRV_INVALID, 1, VPMM_DRV_GET_ACCESS);
    expect_failure(d, d->get_access(d, va, -1, &rw), VPMM_DRV_INVALID, 1, VPMM_DRV_GET_ACCESS);
    expect_failure(d, d->get_access(d, va, 0, NULL), VPMM_DRV_INVALID, 1, VPMM_DRV_GET_ACCESS);
    assert_int_equal(rw, 7);
    assert_int_equal(d->get_access(d, va + G - 1, 1, &rw), VPMM_DRV_OK); /* any byte of it */
    assert_int_equal(rw, 0);
    unmap_release(d, va, G, h);
    expect_failure(d, d->get_access(d, va, 0, &rw), VPMM_DRV_INVALID, 1, VPMM_DRV_GET_ACCESS);
    assert_int_equal(d->va_free(d, va, 8 * MiB), VPMM_DRV_OK);
    close_host(d);
}

/* What a kernel of the view's device touching [va, va + size) needs: every byte mapped and its. */
static void test_can_access(void **state)
{
    (void)state;
    vpmm_driver_t *v[2];
    open_views(open_node(2, 0, 0), v, 2);
    uintptr_t va = reserve(v[0], 8 * MiB);
    vpmm_drv_handle_t h = map_new(v[0], va, G), h2 = map_new(v[0], va + G, G);
    const int one = 1;
    assert_int_equal(v[0]->set_access(v[0], va, G, &one, 1), VPMM_DRV_OK);
    assert_int_equal(v[0]->set_access(v[0], va + G, G, NULL, 0), VPMM_DRV_OK);
    CHECKED(v[0]);
    assert_int_equal(vpmm_host_can_access(v[0], va, 2 * G), 1);
    assert_int_equal(vpmm_host_can_access(v[1], va + 3, G - 3), 1);
    assert_int_equal(vpmm_host_can_access(v[1], va, G + 1), 0);     /* one byte of device 0 alone */
    assert_int_equal(vpmm_host_can_access(v[0], va, 2 * G + 1), 0); /* a byte not mapped */
    assert_int_equal(vpmm_host_can_access(v[0], va - 1, 2), 0);
    assert_int_equal(vpmm_host_can_access(v[1], va + 2 * G, 0), 1); /* nothing to touch */
    assert_int_equal(vpmm_host_can_access(v[0], UINTPTR_MAX - 4, 16), 0);
    unmap_release(v[0], va, G, h);
    assert_int_equal(vpmm_host_can_access(v[0], va, 1), 0);
    unmap_release(v[0], va + G, G, h2);
    assert_int_equal(v[0]->va_free(v[0], va, 8 * MiB), VPMM_DRV_OK);
    close_views(v, 2);
}

/* ---- streams per device ------------------------------------------------------------------- */

static void test_legacy_stream_per_device(void **state)
{
    (void)state;
    vpmm_driver_t *v[2];
    open_views(open_node(2, 0, 0), v, 2);
    vpmm_driver_t *v1b = open_view(v[0], 1);
    assert_int_equal(vpmm_host_enqueue(v[0], LEGACY), 1);
    assert_int_equal(vpmm_host_enqueue(v[0], NULL), 2); /* NULL: the same legacy stream */
    assert_int_equal(vpmm_host_enqueue(v[1], LEGACY), 1);
    assert_int_equal(vpmm_host_enqueue(v1b, NULL), 2); /* device 1's, through another view */
    CHECKED(v[0]);
    assert_int_equal(vpmm_host_stream_enqueued(v[0], LEGACY), 2);
    assert_int_equal(vpmm_host_stream_enqueued(v[1], LEGACY), 2);
    vpmm_host_complete(v[1], NULL);
    CHECKED(v[1]);
    assert_int_equal(vpmm_host_stream_idle(v1b, LEGACY), 1);
    assert_int_equal(vpmm_host_stream_idle(v[0], LEGACY), 0);
    assert_int_equal(device_of(v[0], LEGACY), 0);
    assert_int_equal(device_of(v[1], NULL), 1);
    vpmm_host_complete_all(v[1]); /* every device */
    assert_int_equal(vpmm_host_stream_idle(v[0], LEGACY), 1);
    close_host(v1b);
    close_views(v, 2);
}

static void test_per_thread_stream_per_device(void **state)
{
    (void)state;
    vpmm_host_options_t opt = { .devices = 2, .per_thread_default_stream = 1 };
    vpmm_driver_t *v[2];
    open_views(open_host_opt(&opt), v, 2);
    vpmm_stream_t k0 = vpmm_host_thread_stream(v[0]), k1 = vpmm_host_thread_stream(v[1]);
    assert_non_null(k0);
    assert_non_null(k1);
    assert_ptr_not_equal(k0, k1);
    assert_ptr_equal(vpmm_host_thread_stream(v[1]), k1);
    assert_int_equal(vpmm_host_enqueue(v[0], PER_THREAD), 1);
    assert_int_equal(vpmm_host_enqueue(v[1], NULL), 1); /* NULL is per-thread on this node */
    assert_int_equal(vpmm_host_enqueue(v[0], k1), 2);   /* a key names its stream from anywhere */
    CHECKED(v[0]);
    assert_int_equal(vpmm_host_stream_enqueued(v[1], PER_THREAD), 2);
    assert_int_equal(vpmm_host_stream_enqueued(v[0], NULL), 1);
    assert_int_equal(device_of(v[0], k1), 1);
    assert_int_equal(device_of(v[1], k0), 0);
    assert_int_equal(device_of(v[1], PER_THREAD), 1);
    assert_int_equal(vpmm_host_stream_enqueued(v[0], LEGACY), 0); /* the legacy one is apart */
    vpmm_host_complete_all(v[0]);
    close_views(v, 2);
}

/* The legacy stream of a device waits for that device's per-thread streams only. */
static void test_implicit_sync_stays_on_its_device(void **state)
{
    (void)state;
    vpmm_driver_t *v[2];
    open_views(open_node(2, 0, 0), v, 2);
    assert_int_equal(vpmm_host_enqueue(v[0], PER_THREAD), 1); /* device 0's, pending */
    vpmm_drv_event_t e1 = event_on(v[1], NULL), e0 = event_on(v[0], NULL);
    assert_int_equal(v[1]->event_record(v[1], e1, LEGACY), VPMM_DRV_OK);
    assert_int_equal(v[0]->event_record(v[0], e0, LEGACY), VPMM_DRV_OK);
    CHECKED(v[0]);
    assert_int_equal(v[1]->event_query(v[1], e1), VPMM_DRV_OK); /* no tie to device 0 */
    assert_int_equal(v[0]->event_query(v[0], e0), VPMM_DRV_NOT_READY);
    /* Device 1's legacy stream waits for device 1's per-thread stream, though. */
    assert_int_equal(vpmm_host_enqueue(v[1], PER_THREAD), 1);
    assert_int_equal(v[1]->event_record(v[1], e1, LEGACY), VPMM_DRV_OK);
    assert_int_equal(v[1]->event_query(v[1], e1), VPMM_DRV_NOT_READY);
    vpmm_host_complete(v[1], PER_THREAD);
    assert_int_equal(v[1]->event_query(v[1], e1), VPMM_DRV_OK);
    assert_int_equal(v[0]->event_query(v[0], e0), VPMM_DRV_NOT_READY);

    /* And the other way: device 1's legacy work does not hold device 0's per-thread stream. */
    assert_int_equal(vpmm_host_enqueue(v[1], LEGACY), 1);
    assert_int_equal(vpmm_host_enqueue(v[0], PER_THREAD), 2);
    assert_int_equal(vpmm_host_advance(v[0], PER_THREAD, 2), 2);
    CHECKED(v[0]);
    assert_int_equal(v[0]->event_query(v[0], e0), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_stream_idle(v[1], LEGACY), 0);
    /* While device 0's legacy stream has work, its per-thread stream waits for it. */
    assert_int_equal(vpmm_host_enqueue(v[0], LEGACY), 1);
    assert_int_equal(vpmm_host_enqueue(v[0], PER_THREAD), 3);
    assert_int_equal(vpmm_host_advance(v[0], PER_THREAD, 1), 0);
    vpmm_host_complete(v[0], PER_THREAD);
    assert_int_equal(vpmm_host_stream_idle(v[0], LEGACY), 1);
    assert_int_equal(vpmm_host_stream_idle(v[1], LEGACY), 0);
    vpmm_host_complete_all(v[0]);
    assert_int_equal(v[0]->event_destroy(v[0], e0), VPMM_DRV_OK);
    assert_int_equal(v[1]->event_destroy(v[1], e1), VPMM_DRV_OK);
    close_views(v, 2);
}

/* A capturing per-thread stream refuses only its own device's legacy stream (906). */
static void test_legacy_refusal_stays_on_its_device(void **state)
{
    (void)state;
    vpmm_driver_t *v[2];
    open_views(open_node(2, 0, 0), v, 2);
    vpmm_stream_t pt0 = vpmm_host_thread_stream(v[0]);
    uint64_t id = 0;
    assert_int_equal(vpmm_host_begin_capture(v[0], PER_THREAD, &id), VPMM_DRV_OK);
    vpmm_drv_event_t e1 = event_on(v[1], NULL), e0 = event_on(v[0], NULL);
    assert_int_equal(v[1]->event_record(v[1], e1, LEGACY), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_enqueue(v[1], LEGACY), 1);
    assert_int_equal(capture_status(v[1], pt0, NULL), VPMM_CAPTURE_ACTIVE); /* any view sees it */
    CHECKED(v[0]);
    expect_failure(v[0], v[0]->event_record(v[0], e0, LEGACY), VPMM_DRV_ERROR, 906,
                   VPMM_DRV_EVENT_RECORD);
    assert_int_equal(capture_status(v[1], pt0, NULL), VPMM_CAPTURE_INVALIDATED);
    assert_int_equal(vpmm_host_end_capture(v[0], PER_THREAD), VPMM_DRV_ERROR);
    CHECKED(v[0]);
    /* The same on device 1: its capture refuses its own legacy stream, not device 0's. */
    vpmm_stream_t pt1 = vpmm_host_thread_stream(v[1]);
    assert_int_equal(vpmm_host_begin_capture(v[1], PER_THREAD, &id), VPMM_DRV_OK);
    assert_int_equal(v[0]->event_record(v[0], e0, LEGACY), VPMM_DRV_OK);
    expect_failure(v[1], v[1]->stream_wait_event(v[1], NULL, e0), VPMM_DRV_ERROR, 906,
                   VPMM_DRV_STREAM_WAIT_EVENT);
    assert_int_equal(capture_status(v[0], pt1, NULL), VPMM_CAPTURE_INVALIDATED);
    assert_int_equal(vpmm_host_end_capture(v[1], PER_THREAD), VPMM_DRV_ERROR);
    CHECKED(v[1]);
    vpmm_host_complete_all(v[0]);
    assert_int_equal(v[0]->event_destroy(v[0], e0), VPMM_DRV_OK);
    assert_int_equal(v[0]->event_destroy(v[0], e1), VPMM_DRV_OK);
    expect_empty(v[0]);
    close_views(v, 2);
}

static void test_stream_device(void **state)
{
    (void)state;
    vpmm_driver_t *v[3];
    open_views(open_node(3, 0, 0), v, 3);
    assert_int_equal(device_of(v[2], NULL), 2);
    assert_int_equal(device_of(v[2], LEGACY), 2);
    assert_int_equal(device_of(v[2], PER_THREAD), 2);
    vpmm_stream_t s = vpmm_host_stream_create(v[1]);
    assert_non_null(s);
    assert_int_equal(device_of(v[0], s), 1);
    assert_int_equal(device_of(v[2], s), 1);
    /* An unknown value belongs to the device of the view that first uses it. */
    assert_int_equal(vpmm_host_enqueue(v[2], S1), 1);
    assert_int_equal(device_of(v[0], S1), 2);
    assert_int_equal(device_of(v[1], S2), 1); /* a first use too */
    assert_int_equal(device_of(v[2], S2), 1);
    CHECKED(v[0]);
    int dev = 9;
    expect_failure(v[0], v[0]->stream_device(v[0], S1, NULL), VPMM_DRV_INVALID, 1,
                   VPMM_DRV_STREAM_DEVICE);
    assert_int_equal(dev, 9);
    vpmm_host_complete_all(v[0]);
    close_views(v, 3);
}

/* synchronize (cuCtxSynchronize) finishes its device's streams and what they wait for. */
static void test_synchronize_per_device(void **state)
{
    (void)state;
    vpmm_driver_t *v[2];
    open_views(open_node(2, 0, 0), v, 2);
    vpmm_stream_t a0 = vpmm_host_stream_create(v[0]), b0 = vpmm_host_stream_create(v[0]);
    vpmm_stream_t s1 = vpmm_host_stream_create(v[1]);
    vpmm_host_enqueue(v[0], a0);
    vpmm_host_enqueue(v[1], s1);
    assert_int_equal(v[1]->synchronize(v[1]), VPMM_DRV_OK);
    CHECKED(v[1]);
    assert_int_equal(vpmm_host_stream_idle(v[1], s1), 1);
    assert_int_equal(vpmm_host_stream_idle(v[1], a0), 0);

    vpmm_drv_event_t ev = event_on(v[0], b0);
    vpmm_host_enqueue(v[0], b0);
    assert_int_equal(v[0]->event_record(v[0], ev, b0), VPMM_DRV_OK);
    assert_int_equal(v[1]->stream_wait_event(v[1], s1, ev), VPMM_DRV_OK);
    vpmm_host_enqueue(v[1], s1);
    assert_int_equal(v[1]->synchronize(v[1]), VPMM_DRV_OK);
    CHECKED(v[1]);
    assert_int_equal(vpmm_host_stream_idle(v[1], s1), 1);
    assert_int_equal(vpmm_host_stream_idle(v[1], b0), 1); /* waited for: done too */
    assert_int_equal(vpmm_host_stream_idle(v[1], a0), 0);
    assert_int_equal(v[0]->synchronize(v[0]), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_stream_idle(v[1], a0), 1);
    assert_int_equal(v[0]->event_destroy(v[0], ev), VPMM_DRV_OK);
    close_views(v, 2);
}

/* ---- events per device -------------------------------------------------------------------- */

static void test_event_of_a_device(void **state)
{
    (void)state;
    vpmm_driver_t *v[2];
    open_views(open_node(2, 0, 0), v, 2);
    vpmm_stream_t s1 = vpmm_host_stream_create(v[1]);
    vpmm_drv_event_t own = event_on(v[1], NULL), theirs = event_on(v[0], s1);
    assert_int_equal(v[1]->event_record(v[1], own, LEGACY), VPMM_DRV_OK);
    assert_int_equal(v[1]->event_record(v[1], own, s1), VPMM_DRV_OK);
    assert_int_equal(v[0]->event_record(v[0], theirs, s1), VPMM_DRV_OK); /* s1's device */
    assert_int_equal(v[1]->event_record(v[1], theirs, PER_THREAD), VPMM_DRV_OK);
    CHECKED(v[0]);
    expect_failure(v[0], v[0]->event_record(v[0], theirs, LEGACY), VPMM_DRV_INVALID, 400,
                   VPMM_DRV_EVENT_RECORD);
    expect_failure(v[0], v[0]->event_create(v[0], s1, NULL), VPMM_DRV_INVALID, 1,
                   VPMM_DRV_EVENT_CREATE);
    assert_int_equal(v[0]->event_destroy(v[0], own), VPMM_DRV_OK); /* any view destroys */
    assert_int_equal(v[1]->event_destroy(v[1], theirs), VPMM_DRV_OK);
    vpmm_host_complete_all(v[0]);
    expect_empty(v[0]);
    close_views(v, 2);
}

/* A record on another device's stream is refused (400) and leaves the event where it was. */
static void test_event_record_on_another_device_changes_nothing(void **state)
{
    (void)state;
    vpmm_driver_t *v[3];
    open_views(open_node(3, 0, 0), v, 3);
    vpmm_stream_t s0 = vpmm_host_stream_create(v[0]), s1 = vpmm_host_stream_create(v[1]);
    vpmm_drv_event_t ev = event_on(v[0], NULL);
    vpmm_host_enqueue(v[0], s0);
    assert_int_equal(v[0]->event_record(v[0], ev, s0), VPMM_DRV_OK);
    assert_int_equal(v[0]->event_query(v[0], ev), VPMM_DRV_NOT_READY);
    vpmm_host_counts_t before;
    vpmm_host_counts(v[0], &before);
    expect_failure(v[0], v[0]->event_record(v[0], ev, s1), VPMM_DRV_INVALID, 400,
                   VPMM_DRV_EVENT_RECORD);
    expect_failure(v[1], v[1]->event_record(v[1], ev, LEGACY), VPMM_DRV_INVALID, 400,
                   VPMM_DRV_EVENT_RECORD);
    expect_failure(v[1], v[1]->event_record(v[1], ev, PER_THREAD), VPMM_DRV_INVALID, 400,
                   VPMM_DRV_EVENT_RECORD);
    expect_failure(v[1], v[1]->event_record(v[1], ev, S3), VPMM_DRV_INVALID, 400,
                   VPMM_DRV_EVENT_RECORD);
    CHECKED(v[0]);
    expect_same_counts(v[0], &before);
    assert_int_equal(device_of(v[2], S3), 2); /* the refused record did not register S3 */
    assert_int_equal(v[0]->event_query(v[0], ev), VPMM_DRV_NOT_READY); /* still s0's point */
    vpmm_host_complete(v[0], s0);
    assert_int_equal(v[0]->event_query(v[0], ev), VPMM_DRV_OK);
    assert_int_equal(v[0]->event_destroy(v[0], ev), VPMM_DRV_OK);
    close_views(v, 3);
}

/* A stream of device 1 waits on an event of device 0; queries work from any view. */
static void test_wait_across_devices(void **state)
{
    (void)state;
    vpmm_driver_t *v[2];
    open_views(open_node(2, 0, 0), v, 2);
    vpmm_stream_t s0 = vpmm_host_stream_create(v[0]), s1 = vpmm_host_stream_create(v[1]);
    vpmm_drv_event_t ev = event_on(v[0], s0);
    vpmm_host_enqueue(v[0], s0);
    assert_int_equal(v[0]->event_record(v[0], ev, s0), VPMM_DRV_OK);
    assert_int_equal(v[1]->stream_wait_event(v[1], s1, ev), VPMM_DRV_OK);
    assert_int_equal(v[1]->stream_wait_event(v[1], LEGACY, ev), VPMM_DRV_OK);
    CHECKED(v[1]);
    vpmm_host_wait_t w = vpmm_host_wait_at(v[0], 0);
    assert_ptr_equal(w.waiter, s1);
    assert_ptr_equal(w.signaller, s0);
    assert_int_equal(w.signal_seq, 1);
    assert_int_equal(w.waiter_device, 1);
    assert_int_equal(w.signaller_device, 0);
    w = vpmm_host_wait_at(v[0], 1);
    assert_ptr_equal(w.waiter, LEGACY);
    assert_int_equal(w.waiter_device, 1);

    assert_int_equal(vpmm_host_enqueue(v[1], s1), 1);
    assert_int_equal(vpmm_host_advance(v[1], s1, 1), 0); /* held by device 0's work */
    assert_int_equal(v[1]->event_query(v[1], ev), VPMM_DRV_NOT_READY);
    vpmm_host_complete(v[0], s0);
    assert_int_equal(v[1]->event_query(v[1], ev), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_advance(v[1], s1, 1), 1);
    CHECKED(v[1]);
    assert_int_equal(v[1]->event_destroy(v[1], ev), VPMM_DRV_OK);
    close_views(v, 2);
}

/* ---- the shared node ---------------------------------------------------------------------- */

static vpmm_driver_t *open_shared(size_t limit, int dev)
{
    vpmm_host_options_t opt = { .memory_limit = limit };
    vpmm_driver_t *d = NULL;
    assert_int_equal(vpmm_host_open_shared(&opt, dev, &d), VPMM_DRV_OK);
    assert_non_null(d);
    assert_int_equal(d->device, dev);
    CHECKED(d);
    return d;
}

/* Two opens are two views of one machine: streams, VA, handles and access are common. */
static void test_shared_node_is_one_machine(void **state)
{
    (void)state;
    vpmm_driver_t *a = open_shared(16 * MiB, 0), *b = open_shared(16 * MiB, 3);
    assert_int_equal(a->device_count, 8);
    assert_int_equal(b->peer_capable, 0xff);
    vpmm_stream_t s = vpmm_host_stream_create(a);
    assert_int_equal(device_of(b, s), 0);
    assert_int_equal(vpmm_host_enqueue(b, s), 1);
    assert_int_equal(vpmm_host_stream_enqueued(a, s), 1);
    uintptr_t va = reserve(a, 8 * MiB);
    vpmm_host_counts_t c;
    vpmm_host_counts(b, &c);
    assert_int_equal(c.reservations, 1);
    vpmm_drv_handle_t h = create(b, G);
    assert_int_equal(free_bytes(b), 16 * MiB - G);
    assert_int_equal(free_bytes(a), 16 * MiB);
    assert_int_equal(a->mem_map(a, va, G, h, 0), VPMM_DRV_OK);
    const int three = 3;
    assert_int_equal(a->set_access(a, va, G, &three, 1), VPMM_DRV_OK);
    CHECKED(a);
    assert_int_equal(vpmm_host_can_access(b, va, G), 1);
    unmap_release(b, va, G, h);
    assert_int_equal(b->va_free(b, va, 8 * MiB), VPMM_DRV_OK);
    vpmm_host_complete_all(a);
    close_host(a);
    close_host(b);
}

static void test_shared_node_refuses_other_options(void **state)
{
    (void)state;
    vpmm_driver_t *a = open_shared(16 * MiB, 1);
    vpmm_driver_t *x = (vpmm_driver_t *)&x;
    vpmm_host_options_t other_mem = { .memory_limit = 32 * MiB };
    vpmm_host_options_t other_gran = { .memory_limit = 16 * MiB, .granularity = 4 * MiB };
    vpmm_host_options_t same = { .memory_limit = 16 * MiB };
    assert_int_equal(vpmm_host_open_shared(&other_mem, 1, &x), VPMM_DRV_INVALID);
    assert_null(x);
    assert_int_equal(vpmm_host_open_shared(&other_gran, 1, &x), VPMM_DRV_INVALID);
    assert_int_equal(vpmm_host_open_shared(NULL, 1, &x), VPMM_DRV_INVALID); /* 80 GiB */
    assert_int_equal(vpmm_host_open_shared(&same, 8, &x), VPMM_DRV_INVALID);
    assert_int_equal(vpmm_host_open_shared(&same, -1, &x), VPMM_DRV_INVALID);
    assert_int_equal(vpmm_host_open_shared(&same, 0, NULL), VPMM_DRV_INVALID);
    assert_null(x);
    CHECKED(a);
    vpmm_drv_handle_t h = create(a, G); /* the node is unharmed */
    assert_int_equal(a->mem_release(a, h), VPMM_DRV_OK);
    close_host(a);
}

static void test_shared_node_freed_after_last_close(void **state)
{
    (void)state;
    size_t fds = open_fds();
    vpmm_driver_t *a = open_shared(16 * MiB, 0), *b = open_shared(16 * MiB, 1);
    close_host(a);
    vpmm_drv_handle_t h = create(b, G); /* b still holds the node */
    assert_int_equal(b->mem_release(b, h), VPMM_DRV_OK);
    close_host(b);
    assert_int_equal(open_fds(), fds); /* the memfd went with the node */

    vpmm_driver_t *c = open_shared(32 * MiB, 7); /* a new node, with new options */
    size_t free_b = 0, total = 0;
    assert_int_equal(c->mem_get_info(c, &free_b, &total), VPMM_DRV_OK);
    assert_int_equal(total, 32 * MiB);
    expect_empty(c);
    close_host(c);
}

/* vpmm_pool_create opens the shared node for a host pool whose config.device is set, and a
 * private node for the default (-1). */
static void test_shared_node_of_pools(void **state)
{
    (void)state;
    vpmm_config_t cfg;
    vpmm_pool_t *pool = NULL, *other = NULL;
    vpmm_driver_t *x = NULL;
    vpmm_host_options_t small = { .memory_limit = 32 * MiB }, pools = { .memory_limit = 64 * MiB };
    assert_int_equal(vpmm_config_init(&cfg), VPMM_SUCCESS);
    cfg.backend = VPMM_BACKEND_HOST;
    cfg.ignore_env = 1;
    cfg.host_memory = 64 * MiB;
    cfg.va_size = 64 * MiB;
    cfg.device = 2;
    assert_int_equal(vpmm_pool_create(&cfg, &pool), VPMM_SUCCESS);
    cfg.device = 5;
    assert_int_equal(vpmm_pool_create(&cfg, &other), VPMM_SUCCESS);
    assert_int_equal(vpmm_host_open_shared(&small, 0, &x), VPMM_DRV_INVALID); /* it is there */
    assert_int_equal(vpmm_host_open_shared(&pools, 0, &x), VPMM_DRV_OK);
    vpmm_host_counts_t c;
    vpmm_host_counts(x, &c);
    assert_int_equal(c.reservations, 2); /* each pool's VA chunk */
    CHECKED(x);
    close_host(x);
    assert_int_equal(vpmm_pool_destroy(pool), VPMM_SUCCESS);
    assert_int_equal(vpmm_pool_destroy(other), VPMM_SUCCESS);
    cfg.device = -1; /* a node of its own */
    assert_int_equal(vpmm_pool_create(&cfg, &pool), VPMM_SUCCESS);
    x = open_shared(32 * MiB, 0); /* the pools' shared node went with them */
    vpmm_host_counts(x, &c);
    assert_int_equal(c.reservations, 0);
    close_host(x);
    assert_int_equal(vpmm_pool_destroy(pool), VPMM_SUCCESS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_device_options),
        cmocka_unit_test(test_views_of_four_devices),
        cmocka_unit_test(test_open_device_refused),
        cmocka_unit_test(test_close_views_in_any_order),
        cmocka_unit_test(test_memory_limit_per_device),
        cmocka_unit_test(test_mem_get_info_per_device),
        cmocka_unit_test(test_set_access_without_peers_grants_own_device),
        cmocka_unit_test(test_set_access_with_peers),
        cmocka_unit_test(test_set_access_bad_peers_change_nothing),
        cmocka_unit_test(test_set_access_isolated_peer),
        cmocka_unit_test(test_revoke_access),
        cmocka_unit_test(test_revoke_last_device_makes_pages_inaccessible),
        cmocka_unit_test(test_access_to_part_of_a_mapping),
        cmocka_unit_test(test_get_access_refused),
        cmocka_unit_test(test_can_access),
        cmocka_unit_test(test_legacy_stream_per_device),
        cmocka_unit_test(test_per_thread_stream_per_device),
        cmocka_unit_test(test_implicit_sync_stays_on_its_device),
        cmocka_unit_test(test_legacy_refusal_stays_on_its_device),
        cmocka_unit_test(test_stream_device),
        cmocka_unit_test(test_synchronize_per_device),
        cmocka_unit_test(test_event_of_a_device),
        cmocka_unit_test(test_event_record_on_another_device_changes_nothing),
        cmocka_unit_test(test_wait_across_devices),
        cmocka_unit_test(test_shared_node_is_one_machine),
        cmocka_unit_test(test_shared_node_refuses_other_options),
        cmocka_unit_test(test_shared_node_freed_after_last_close),
        cmocka_unit_test(test_shared_node_of_pools),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
