/*
 * test_peer.c — several devices: other devices' access to a pool's memory
 * (vpmm_pool_grant_access, src/core/peer.c) and streams of another device (src/core/stream.c),
 * on the host backend's emulated node of several devices, where a mapping is usable by a device
 * only once set_access named it (vpmm_host_can_access: what a kernel of that device touching the
 * memory needs) and an event is recorded only on a stream of its own device.
 *
 * A pool's memory is out of a peer's reach until it is granted; a grant reaches every mapping —
 * the shared pool's, graph pools', zombies — and every later one: growth, defragmentation's
 * remaps, graph-pool growth, a checkpoint reapply that makes a zombie live again; the pool check
 * (I14) proves it after every step. Refusals (no such device, no peer access between the two)
 * and driver failures at every set_access of a grant leave the pool as it was, revoking what was
 * granted. A block used by a stream of another device is reused only after that stream's work,
 * through events made on that device; a driver failure there leaves the memory pending. Two
 * pools on one device share its memory: one's OOM report says what the other holds, and the
 * other's trim makes room.
 */
#include <string.h>

#include "graph_test_util.h"

#define G (2 * MiB)

/* Whether every byte of [p, p + n) is usable by the device of view d. */
static int reachable(vpmm_driver_t *d, const void *p, size_t n)
{
    return vpmm_host_can_access(d, (uintptr_t)p, n);
}

static void grant_ok(tpool_t *t, int device)
{
    vpmm_status_t st = vpmm_pool_grant_access(t->pool, device);
    if (st != VPMM_SUCCESS)
        fail_msg("vpmm_pool_grant_access(%d): %s (%s)", device, vpmm_status_name(st),
                 vpmm_last_error());
    CHECK_POOL(t->pool);
}

/* Two views of one node: pool `t` on device 0, and the bare view of device 1 in *peer. */
static void open_pair(tpool_t *t, vpmm_driver_t **peer, const tpool_params_t *prm)
{
    tpool_params_t p = prm ? *prm : (tpool_params_t){ 0 };
    p.devices = p.devices ? p.devices : 2;
    tpool_open(t, &p);
    assert_int_equal(vpmm_host_open_device(t->host, 1, peer), VPMM_DRV_OK);
}

static void close_pair(tpool_t *t, vpmm_driver_t *peer)
{
    tpool_close(t);
    peer->close(peer);
}

/* Without a grant a peer reaches nothing; with one it reaches all, now and later. */
static void test_grant_reaches_everything(void **state)
{
    tpool_t t;
    vpmm_driver_t *d1;
    void *a, *b, *c;
    vpmm_stats_t s;
    (void)state;
    open_pair(&t, &d1, &(tpool_params_t){ .small_bytes = 1 });
    a = tmalloc(t.pool, 3 * MiB, NULL);
    b = tmalloc(t.pool, 100 * KiB, NULL);
    assert_true(reachable(t.host, a, 3 * MiB)); /* the own device */
    assert_false(reachable(d1, a, 3 * MiB));    /* a missing grant is visible */
    assert_false(reachable(d1, b, 100 * KiB));
    s = tstats(t.pool);
    assert_int_equal(s.device, 0);
    assert_int_equal(s.peers, 0);
    grant_ok(&t, 1);
    assert_true(reachable(d1, a, 3 * MiB));
    assert_true(reachable(d1, b, 100 * KiB));
    s = tstats(t.pool);
    assert_int_equal(s.peers, 2); /* bit 1 */
    assert_true(s.peer_grants >= 1);
    /* Later growth names the peer too. */
    c = tmalloc(t.pool, 9 * MiB, NULL);
    assert_true(reachable(d1, c, 9 * MiB));
    assert_true(tstats(t.pool).peer_grants > s.peer_grants);
    /* Granting again, or the own device: nothing to do. */
    s = tstats(t.pool);
    grant_ok(&t, 1);
    grant_ok(&t, 0);
    assert_int_equal(tstats(t.pool).peer_grants, s.peer_grants);
    {
        int dev = -1;
        assert_int_equal(vpmm_pool_device(t.pool, &dev), VPMM_SUCCESS);
        assert_int_equal(dev, 0);
    }
    tfree(t.pool, a);
    tfree(t.pool, b);
    tfree(t.pool, c);
    close_pair(&t, d1);
}

/* Defragmentation's remaps (and the zombies they leave) keep the peer's access. */
static void test_remaps_keep_access(void **state)
{
    tpool_t t;
    vpmm_driver_t *d1;
    void *x[6], *big;
    vpmm_stream_t s;
    (void)state;
    open_pair(&t, &d1, &(tpool_params_t){ .small_bytes = 1, .max_bytes = 12 * MiB });
    s = vpmm_host_stream_create(t.host);
    grant_ok(&t, 1);
    for (int i = 0; i < 6; i++)
        x[i] = tmalloc(t.pool, 2 * MiB, s);
    for (int i = 0; i < 6; i += 2)
        tfree(t.pool, x[i]); /* every other page free: no 6 MiB span without remapping */
    vpmm_host_enqueue(t.host, s);
    big = tmalloc(t.pool, 6 * MiB, s);
    assert_true(tstats(t.pool).pages_remapped > 0);
    assert_true(tstats(t.pool).zombie_bytes > 0);
    assert_true(reachable(d1, big, 6 * MiB));
    for (int i = 1; i < 6; i += 2)
        assert_true(reachable(d1, x[i], 2 * MiB));
    vpmm_host_complete_all(t.host);
    tfree(t.pool, big);
    for (int i = 1; i < 6; i += 2)
        tfree(t.pool, x[i]);
    close_pair(&t, d1);
}

#if VPMM_HAVE_GRAPHS
/* Graph pools: their memory before the grant and their growth after it. */
static void test_graph_pools_granted(void **state)
{
    tpool_t t;
    vpmm_driver_t *d1;
    vpmm_graph_pool_t *gp;
    void *g1, *g2;
    (void)state;
    open_pair(&t, &d1, NULL);
    assert_int_equal(vpmm_graph_pool_create(t.pool, &gp), VPMM_SUCCESS);
    assert_int_equal(vpmm_graph_pool_malloc(gp, 5 * MiB, NULL, &g1), VPMM_SUCCESS);
    CHECK_POOL(t.pool);
    assert_false(reachable(d1, g1, 5 * MiB));
    grant_ok(&t, 1);
    assert_true(reachable(d1, g1, 5 * MiB));
    assert_int_equal(vpmm_graph_pool_malloc(gp, 7 * MiB, NULL, &g2), VPMM_SUCCESS);
    CHECK_POOL(t.pool);
    assert_true(reachable(d1, g2, 7 * MiB));
    tfree(t.pool, g1);
    tfree(t.pool, g2);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    close_pair(&t, d1);
}
#endif

/* Refusals: no such device, no peer access between the two; nothing changes. */
static void test_refusals(void **state)
{
    tpool_t t;
    vpmm_driver_t *d1;
    void *a;
    tsnap_t before, after;
    (void)state;
    open_pair(&t, &d1, &(tpool_params_t){ .devices = 3, .isolated = 4 }); /* device 2 isolated */
    a = tmalloc(t.pool, 2 * MiB, NULL);
    before = tsnap(t.pool);
    assert_int_equal(vpmm_pool_grant_access(t.pool, 3), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_pool_grant_access(t.pool, -1), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_pool_grant_access(NULL, 1), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_pool_grant_access(t.pool, 2), VPMM_ERROR_NOT_SUPPORTED);
    assert_non_null(strstr(vpmm_last_error(), "peer access"));
    assert_int_equal(vpmm_pool_device(NULL, &(int){ 0 }), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_pool_device(t.pool, NULL), VPMM_ERROR_INVALID_ARGUMENT);
    after = tsnap(t.pool);
    assert_snap_equal(&before, &after);
    CHECK_POOL(t.pool);
    tfree(t.pool, a);
    close_pair(&t, d1);
}

/* A driver failure at any set_access of a grant: the runs granted are revoked, the pool is as
 * before (no peer recorded, no page reachable), and a later grant works. */
static void test_grant_faults_revoke(void **state)
{
    (void)state;
    for (uint64_t k = 1;; k++) {
        tpool_t t;
        vpmm_driver_t *d1;
        void *x[5];
        vpmm_status_t st;
        int injected;
        open_pair(&t, &d1, &(tpool_params_t){ .small_bytes = 1 });
        /* Five mapped runs: holes between them. */
        for (int i = 0; i < 5; i++)
            x[i] = tmalloc(t.pool, 4 * MiB, NULL);
        for (int i = 1; i < 5; i += 2) {
            tfree(t.pool, x[i]);
            x[i] = NULL;
        }
        assert_int_equal(vpmm_trim(t.pool, 0, NULL), VPMM_SUCCESS);
        vpmm_fault_fail_nth(t.fault, VPMM_DRV_SET_ACCESS, k, VPMM_DRV_ERROR);
        st = vpmm_pool_grant_access(t.pool, 1);
        injected = tfault_settle(t.fault);
        CHECK_POOL(t.pool);
        if (injected) {
            assert_int_equal(st, VPMM_ERROR_DRIVER);
            assert_int_equal(tstats(t.pool).peers, 0);
            for (int i = 0; i < 5; i += 2)
                assert_false(reachable(d1, x[i], 4 * MiB));
            grant_ok(&t, 1);
        }
        for (int i = 0; i < 5; i += 2) {
            assert_true(reachable(d1, x[i], 4 * MiB));
            tfree(t.pool, x[i]);
        }
        close_pair(&t, d1);
        if (!injected)
            break;
    }
}

/* A failure of the undo itself (revoke_access) is reported as the grant's failure; the pool
 * records no peer. */
static void test_grant_fault_then_revoke_fault(void **state)
{
    tpool_t t;
    vpmm_driver_t *d1;
    void *x, *y;
    (void)state;
    open_pair(&t, &d1, &(tpool_params_t){ .small_bytes = 1 });
    x = tmalloc(t.pool, 4 * MiB, NULL);
    y = tmalloc(t.pool, 4 * MiB, NULL);
    tfree(t.pool, tmalloc(t.pool, 4 * MiB, NULL));
    {
        void *z = tmalloc(t.pool, 4 * MiB, NULL);
        (void)z;
        tfree(t.pool, y);
        assert_int_equal(vpmm_trim(t.pool, 0, NULL), VPMM_SUCCESS); /* two runs: x, z */
        vpmm_fault_fail_nth(t.fault, VPMM_DRV_SET_ACCESS, 2, VPMM_DRV_ERROR);
        vpmm_fault_fail_nth(t.fault, VPMM_DRV_REVOKE_ACCESS, 1, VPMM_DRV_ERROR);
        assert_int_equal(vpmm_pool_grant_access(t.pool, 1), VPMM_ERROR_DRIVER);
        (void)tfault_settle(t.fault);
        CHECK_POOL(t.pool);
        assert_int_equal(tstats(t.pool).peers, 0);
        grant_ok(&t, 1);
        assert_true(reachable(d1, z, 4 * MiB));
        tfree(t.pool, z);
    }
    tfree(t.pool, x);
    close_pair(&t, d1);
}

/* ---- streams of another device ------------------------------------------------------------- */

/* A block used by a stream of device 1 (record_stream) is reused only after that stream's work;
 * the marker is an event of device 1 (the host backend refuses any other, as CUDA does). */
static void test_record_stream_of_another_device(void **state)
{
    tpool_t t;
    vpmm_driver_t *d1;
    vpmm_stream_t a, b1;
    void *x, *y;
    (void)state;
    open_pair(&t, &d1, &(tpool_params_t){ .prealloc = 4, .small_bytes = 1 });
    grant_ok(&t, 1);
    a = vpmm_host_stream_create(t.host);
    b1 = vpmm_host_stream_create(d1); /* a stream of device 1 */
    x = tmalloc(t.pool, 4 * MiB, a);
    vpmm_host_enqueue(d1, b1); /* device 1's kernel reads x */
    assert_int_equal(vpmm_record_stream(t.pool, x, b1), VPMM_SUCCESS);
    tfree(t.pool, x);
    assert_int_equal(vpmm_fault_calls(t.fault, VPMM_DRV_STREAM_DEVICE), 1);
    y = tmalloc(t.pool, 4 * MiB, a);
    assert_ptr_not_equal(y, x);
    tfree(t.pool, y);
    assert_int_equal(vpmm_trim(t.pool, SIZE_MAX, NULL), VPMM_SUCCESS);
    y = tmalloc(t.pool, 4 * MiB, a);
    assert_ptr_not_equal(y, x); /* b1 not done */
    tfree(t.pool, y);
    vpmm_host_complete(d1, b1);
    assert_int_equal(vpmm_trim(t.pool, SIZE_MAX, NULL), VPMM_SUCCESS);
    y = tmalloc(t.pool, 4 * MiB, a);
    assert_ptr_equal(y, x);
    tfree(t.pool, y);
    assert_driver_matches_pool(&t);
    close_pair(&t, d1);
}

/* Allocated on a stream of device 1 and freed: another stream of device 0 waits on the GPU for a
 * marker of device 1's stream (an event of device 1). When the driver cannot say the stream's
 * device, or cannot make the event, the malloc that needs the marker fails and changes nothing;
 * the next one works. */
static void test_foreign_stream_markers(void **state)
{
    vpmm_drv_entry_t fails[] = { VPMM_DRV_STREAM_DEVICE, VPMM_DRV_EVENT_CREATE };
    (void)state;
    for (int f = -1; f < 2; f++) {
        tpool_t t;
        vpmm_driver_t *d1;
        vpmm_stream_t a, b1;
        void *x, *y;
        open_pair(&t, &d1, &(tpool_params_t){ .prealloc = 2, .small_bytes = 1 });
        grant_ok(&t, 1);
        a = vpmm_host_stream_create(t.host);
        b1 = vpmm_host_stream_create(d1);
        x = tmalloc(t.pool, 4 * MiB, b1);
        vpmm_host_enqueue(d1, b1);
        tfree(t.pool, x);
        if (f >= 0) {
            /* Every such call fails: the malloc that needs the marker fails, changing nothing. */
            tsnap_t before = tsnap(t.pool), after;
            vpmm_fault_fail_from(t.fault, fails[f], 1, VPMM_DRV_ERROR);
            assert_int_equal(vpmm_malloc(t.pool, 4 * MiB, a, &y), VPMM_ERROR_DRIVER);
            assert_true(tfault_settle(t.fault));
            CHECK_POOL(t.pool);
            after = tsnap(t.pool);
            assert_int_equal(after.regions, before.regions);
            assert_int_equal(after.stats.free_bytes, before.stats.free_bytes);
            assert_int_equal(after.stats.mapped_bytes, before.stats.mapped_bytes);
        }
        y = tmalloc(t.pool, 4 * MiB, a); /* only x's pages: a waits for b1's marker */
        assert_ptr_equal(y, x);
        assert_int_equal(tstats(t.pool).cross_stream_waits, 1);
        tfree(t.pool, y);
        vpmm_host_complete_all(d1);
        vpmm_host_complete_all(t.host);
        assert_driver_matches_pool(&t);
        close_pair(&t, d1);
    }
}

/* ---- two pools on one device ----------------------------------------------------------------- */

/* Pools on one device share its memory (two jobs on one GPU): the OOM report of one says what is
 * held outside it, and a trim of the other makes the room. */
static void test_two_pools_one_device(void **state)
{
    tpool_t a, b;
    void *x, *y = NULL;
    char report[2048];
    (void)state;
    tpool_open(&a, &(tpool_params_t){ .memory_limit = 64 * MiB, .small_bytes = 1 });
    tpool_open_sibling(&b, &a, 0, &(tpool_params_t){ .small_bytes = 1 });
    x = tmalloc(a.pool, 48 * MiB, NULL);
    tfree(a.pool, x); /* a keeps its pages */
    assert_int_equal(vpmm_malloc(b.pool, 32 * MiB, NULL, &y), VPMM_ERROR_OUT_OF_MEMORY);
    assert_int_equal(vpmm_pool_oom_report(b.pool, report, sizeof report), VPMM_SUCCESS);
    assert_non_null(strstr(report, "the device has 16 MiB free of 64 MiB; 48 MiB of it is held "
                                   "outside this pool"));
    CHECK_POOL(b.pool);
    assert_int_equal(vpmm_trim(a.pool, 0, NULL), VPMM_SUCCESS);
    y = tmalloc(b.pool, 32 * MiB, NULL);
    tfree(b.pool, y);
    tpool_close(&b);
    tpool_close(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grant_reaches_everything),
        cmocka_unit_test(test_remaps_keep_access),
#if VPMM_HAVE_GRAPHS
        cmocka_unit_test(test_graph_pools_granted),
#endif
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_grant_faults_revoke),
        cmocka_unit_test(test_grant_fault_then_revoke_fault),
        cmocka_unit_test(test_record_stream_of_another_device),
        cmocka_unit_test(test_foreign_stream_markers),
        cmocka_unit_test(test_two_pools_one_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
