/*
 * test_graph.c — graph pools and captures (graph/, src/core/arena.c) on the host backend.
 *
 * Routing: every allocation of a capture (vpmm_capture_begin, a registered external capture, an
 * unknown external capture, a stream joined into one) comes from its graph pool, sub-page sizes
 * included, with no event call and no synchronisation; the shared pool is untouched. Reuse: a
 * free during the capture is reused by the same stream in stream order, by other streams only
 * after the capture. Lifetime: a graph keeps its graph pool's pages (even when the handle is gone
 * and the shared pool is starving); destroying the graph, its exec (after its launches) and the
 * handle returns them, and the shared pool then reuses them without growing. Errors leave the
 * pool unchanged. The invariants (and the driver's view) are checked after every step.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_test_util.h"

/* ---- routing ------------------------------------------------------------------------------- */

static void test_capture_allocates_from_graph_pool(void **state)
{
    tpool_t t;
    vpmm_graph_pool_t *gp;
    vpmm_stream_t s;
    vpmm_stats_t before, after;
    vpmm_graph_pool_stats_t gs;
    const size_t sizes[] = { 256, 1000, 64 * KiB, 2 * MiB, 3 * MiB + 17, 300 };
    void *p[6];
    uint64_t forbidden;
    (void)state;
    gp = tgraph_open(&t, &(tpool_params_t){ .prealloc = 4 }, &s);
    before = tstats(t.pool);
    tcapture_begin(&t, gp, s);
    forbidden = tcapture_forbidden_calls(&t);
    for (int i = 0; i < 6; i++) {
        p[i] = tmalloc(t.pool, sizes[i], s);
        assert_int_equal(tregion_of(t.pool, p[i]).pool, tgp_stats(gp).id);
    }
    assert_int_equal(tcapture_forbidden_calls(&t), forbidden); /* no event, no wait, no sync */
    gs = tgp_stats(gp);
    assert_int_equal(gs.live_allocs, 6);
    assert_int_equal(gs.captures, 1);
    assert_int_equal(gs.graphs, 1);
    assert_true(gs.pinned);
    /* The shared pool's preallocated ready pages were taken over (no new pages needed for them),
     * and nothing of the shared pool was allocated. */
    after = tstats(t.pool);
    assert_int_equal(after.live_allocs, 6);
    assert_int_equal(after.private_live_bytes, after.live_bytes);
    assert_int_equal(after.graph_pools, 1);
    assert_true(gs.pages_taken > 0);
    assert_int_equal(after.mapped_bytes - after.private_mapped_bytes + gs.pages_taken * 2 * MiB,
                     before.mapped_bytes);
    for (int i = 0; i < 6; i++)
        tfree(t.pool, p[i]);
    tgraph_destroy(&t, tcapture_end(&t, s));
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    CHECK_POOL(t.pool);
    assert_int_equal(tstats(t.pool).graph_pools, 0);
    tpool_close(&t);
}

static void test_reuse_in_stream_order(void **state)
{
    tpool_t t;
    vpmm_graph_pool_t *gp;
    vpmm_stream_t s, j;
    vpmm_drv_event_t ev;
    void *a, *b, *c, *d;
    (void)state;
    tpool_open(&t, NULL);
    s = vpmm_host_stream_create(t.host);
    j = vpmm_host_stream_create(t.host);
    gp = tgp_create(&t);
    tcapture_begin(&t, gp, s);
    /* j joins the capture through an event recorded in it. */
    assert_int_equal(t.host->event_create(t.host, NULL, &ev), VPMM_DRV_OK);
    assert_int_equal(t.host->event_record(t.host, ev, s), VPMM_DRV_OK);
    assert_int_equal(t.host->stream_wait_event(t.host, j, ev), VPMM_DRV_OK);

    a = tmalloc(t.pool, 100 * KiB, s);
    tfree(t.pool, a);
    b = tmalloc(t.pool, 100 * KiB, s); /* same stream: reused at once (stream order) */
    assert_ptr_equal(a, b);
    tfree(t.pool, b);
    c = tmalloc(t.pool, 100 * KiB, j); /* joined stream: same graph pool, not s's free memory */
    assert_int_equal(tregion_of(t.pool, c).pool, tgp_stats(gp).id);
    assert_ptr_not_equal(c, a);
    tgraph_destroy(&t, tcapture_end(&t, s));
    /* After the capture, a's memory is ready for any later capture, on any stream. */
    tcapture_begin(&t, gp, j);
    d = tmalloc(t.pool, 100 * KiB, j);
    assert_ptr_equal(d, a);
    tfree(t.pool, c);
    tfree(t.pool, d);
    tgraph_destroy(&t, tcapture_end(&t, j));
    assert_int_equal(t.host->event_destroy(t.host, ev), VPMM_DRV_OK);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    tpool_close(&t);
}

static void test_external_capture_gets_own_graph_pool(void **state)
{
    tpool_t t;
    vpmm_stream_t s;
    vpmm_graph_pool_t *gp = NULL;
    uint64_t id;
    void *a, *b, *c;
    unsigned gid;
    (void)state;
    tpool_open(&t, NULL);
    s = vpmm_host_stream_create(t.host);
    a = tmalloc(t.pool, 1 * MiB, s); /* shared, before the capture */
    assert_int_equal(tregion_of(t.pool, a).pool, 0);
    assert_int_equal(vpmm_host_begin_capture(t.host, s, &id), VPMM_DRV_OK); /* outside vpmm */
    b = tmalloc(t.pool, 5000, s);
    gid = tregion_of(t.pool, b).pool;
    assert_true(gid != 0);
    assert_int_equal(tstats(t.pool).graph_pools, 1);
    assert_int_equal(vpmm_capture_graph_pool(t.pool, s, &gp), VPMM_SUCCESS);
    assert_int_equal(tgp_stats(gp).id, gid);
    c = tmalloc(t.pool, 5000, s);
    assert_int_equal(tregion_of(t.pool, c).pool, gid);
    tfree(t.pool, a); /* a shared allocation freed during the capture stays shared */
    tfree(t.pool, c);
    /* The capture ends outside vpmm too; vpmm notices on its next collect. */
    assert_int_equal(vpmm_host_end_capture(t.host, s), VPMM_DRV_OK); /* also destroys the graph */
    assert_int_equal(tgp_stats(gp).captures, 0);
    assert_int_equal(tgp_stats(gp).graphs, 0);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    CHECK_POOL(t.pool);
    /* No graph and no handle: its memory and its live allocation are the shared pool's now. */
    assert_int_equal(tstats(t.pool).graph_pools, 0);
    assert_int_equal(tregion_of(t.pool, b).pool, 0);
    tfree(t.pool, b);
    tpool_close(&t);
}

static void test_register_external_capture(void **state)
{
    tpool_t t;
    vpmm_stream_t s, s2;
    vpmm_graph_pool_t *gp, *other;
    uint64_t id;
    void *a;
    tsnap_t before;
    (void)state;
    tpool_open(&t, NULL);
    s = vpmm_host_stream_create(t.host);
    s2 = vpmm_host_stream_create(t.host);
    gp = tgp_create(&t);
    other = tgp_create(&t);
    before = tsnap(t.pool);
    assert_int_equal(vpmm_capture_register(t.pool, gp, s), VPMM_ERROR_NOT_CAPTURING);
    assert_int_equal(vpmm_capture_register(t.pool, gp, NULL), VPMM_ERROR_NOT_CAPTURING);
    assert_int_equal(vpmm_capture_register(t.pool, NULL, s), VPMM_ERROR_INVALID_ARGUMENT);
    {
        vpmm_graph_pool_t *got = (vpmm_graph_pool_t *)1;
        assert_int_equal(vpmm_capture_graph_pool(t.pool, s, &got), VPMM_ERROR_NOT_CAPTURING);
        assert_null(got);
    }
    {
        tsnap_t now = tsnap(t.pool);
        assert_snap_equal(&before, &now);
    }
    assert_int_equal(vpmm_host_begin_capture(t.host, s, &id), VPMM_DRV_OK);
    assert_int_equal(vpmm_capture_register(t.pool, gp, s), VPMM_SUCCESS);
    assert_int_equal(vpmm_capture_register(t.pool, gp, s), VPMM_SUCCESS); /* idempotent */
    assert_int_equal(vpmm_capture_register(t.pool, other, s), VPMM_ERROR_WRONG_POOL);
    a = tmalloc(t.pool, 3 * MiB, s);
    assert_int_equal(tregion_of(t.pool, a).pool, tgp_stats(gp).id);
    assert_int_equal(tgp_stats(other).mallocs, 0);
    /* A second, concurrent capture into the same graph pool. */
    assert_int_equal(vpmm_host_begin_capture(t.host, s2, &id), VPMM_DRV_OK);
    assert_int_equal(vpmm_capture_register(t.pool, gp, s2), VPMM_SUCCESS);
    assert_int_equal(tgp_stats(gp).captures, 2);
    assert_int_equal(tgp_stats(gp).graphs, 2);
    assert_int_equal(vpmm_host_end_capture(t.host, s2), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_end_capture(t.host, s), VPMM_DRV_OK);
    assert_int_equal(tgp_stats(gp).captures, 0);
    tfree(t.pool, a);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    assert_int_equal(vpmm_graph_pool_release(other), VPMM_SUCCESS);
    tpool_close(&t);
}

static void test_capture_errors_change_nothing(void **state)
{
    tpool_t t, t2;
    vpmm_graph_pool_t *gp, *foreign, *scratch = (vpmm_graph_pool_t *)1;
    vpmm_stream_t s;
    vpmm_graph_t g = (vpmm_graph_t)1;
    tsnap_t before, after;
    (void)state;
    tpool_open(&t, NULL);
    tpool_open(&t2, NULL);
    s = vpmm_host_stream_create(t.host);
    gp = tgp_create(&t);
    foreign = tgp_create(&t2);
    before = tsnap(t.pool);
    assert_int_equal(vpmm_capture_begin(NULL, gp, s, 0), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_capture_begin(t.pool, gp, NULL, 0), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_capture_begin(t.pool, gp, (vpmm_stream_t)1, 0),
                     VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_capture_begin(t.pool, gp, s, (vpmm_stream_capture_mode_t)7),
                     VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_capture_begin(t.pool, foreign, s, 0), VPMM_ERROR_WRONG_POOL);
    assert_int_equal(vpmm_capture_end(t.pool, s, &g), VPMM_ERROR_NOT_CAPTURING);
    assert_null(g);
    assert_int_equal(vpmm_capture_end(t.pool, s, NULL), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_graph_pool_create(NULL, &scratch), VPMM_ERROR_INVALID_ARGUMENT);
    assert_null(scratch); /* out pointers are set to NULL on error */
    assert_int_equal(vpmm_graph_pool_create(t.pool, NULL), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_graph_pool_stats(gp, NULL), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_graph_pool_stats(NULL, NULL), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_graph_pool_release(NULL), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_graph_pool_retain(NULL), VPMM_ERROR_INVALID_ARGUMENT);
    after = tsnap(t.pool);
    assert_snap_equal(&before, &after);
    assert_true(vpmm_host_stream_idle(t.host, s));

    tcapture_begin(&t, gp, s);
    before = tsnap(t.pool);
    assert_int_equal(vpmm_capture_begin(t.pool, gp, s, 0), VPMM_ERROR_STREAM_CAPTURING);
    after = tsnap(t.pool);
    assert_snap_equal(&before, &after);
    tgraph_destroy(&t, tcapture_end(&t, s));
    /* One handle: a second release is refused. */
    assert_int_equal(vpmm_graph_pool_retain(gp), VPMM_SUCCESS);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    assert_int_equal(vpmm_graph_pool_release(foreign), VPMM_SUCCESS);
    tpool_close(&t2);
    tpool_close(&t);
}

static void test_capture_begin_anonymous(void **state)
{
    tpool_t t;
    vpmm_stream_t s;
    vpmm_graph_pool_t *gp = NULL;
    void *a;
    (void)state;
    tpool_open(&t, NULL);
    s = vpmm_host_stream_create(t.host);
    tcapture_begin(&t, NULL, s);
    a = tmalloc(t.pool, 1 * MiB, s);
    assert_int_equal(vpmm_capture_graph_pool(t.pool, s, &gp), VPMM_SUCCESS);
    assert_int_equal(tregion_of(t.pool, a).pool, tgp_stats(gp).id);
    tfree(t.pool, a);
    assert_int_equal(vpmm_graph_destroy(t.pool, NULL), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_graph_destroy(NULL, (vpmm_graph_t)1), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_graph_destroy(t.pool, tcapture_end(&t, s)),
                     VPMM_SUCCESS); /* the public way */
    assert_int_equal(tgp_stats(gp).graphs, 0);
    assert_int_equal(tstats(t.pool).graph_pools, 1); /* our handle */
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    assert_int_equal(tstats(t.pool).graph_pools, 0);
    tpool_close(&t);
}

/* ---- lifetime ------------------------------------------------------------------------------ */

static void test_graph_keeps_pages_until_launches_complete(void **state)
{
    tpool_t t;
    vpmm_graph_pool_t *gp;
    vpmm_stream_t s, r;
    vpmm_host_exec_t e;
    vpmm_graph_t g;
    vpmm_stats_t st;
    void *a, *big;
    uint64_t created;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .memory_limit = 16 * MiB });
    s = vpmm_host_stream_create(t.host);
    r = vpmm_host_stream_create(t.host);
    gp = tgp_create(&t);
    tcapture_begin(&t, gp, s);
    a = tmalloc(t.pool, 8 * MiB, s);
    tfree(t.pool, a); /* free inside the graph: still the graph's memory */
    g = tcapture_end(&t, s);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS); /* the graph keeps it */
    assert_int_equal(tstats(t.pool).graph_pools, 1);
    assert_int_equal(vpmm_host_graph_instantiate(t.host, g, &e), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graph_launch(t.host, e, r), VPMM_DRV_OK);
    tgraph_destroy(&t, g);
    assert_int_equal(vpmm_host_exec_destroy(t.host, e), VPMM_DRV_OK);
    /* The launch is still running: 8 of the 16 MiB device stay with the graph pool, and the
     * shared pool cannot take them even when it runs out. */
    st = tstats(t.pool);
    assert_int_equal(st.graph_pools, 1);
    assert_int_equal(st.private_mapped_bytes, 8 * MiB);
    big = NULL;
    assert_int_equal(vpmm_malloc(t.pool, 10 * MiB, s, &big), VPMM_ERROR_OUT_OF_MEMORY);
    CHECK_POOL(t.pool);
    assert_int_equal(tstats(t.pool).private_mapped_bytes, 8 * MiB);
    /* The launch completes: the destructor runs, the pages return, and the shared pool takes
     * them without creating any. */
    vpmm_host_complete(t.host, r);
    created = tstats(t.pool).pages_created;
    big = tmalloc(t.pool, 14 * MiB, s);
    st = tstats(t.pool);
    assert_int_equal(st.graph_pools, 0);
    assert_int_equal(st.private_mapped_bytes, 0);
    assert_int_equal(st.pages_created, created + 3); /* 14 MiB = the 4 returned pages + 3 new */
    assert_driver_matches_pool(&t);
    tfree(t.pool, big);
    tpool_close(&t);
}

static void test_idle_graph_pool_pages_may_be_taken(void **state)
{
    tpool_t t;
    vpmm_graph_pool_t *gp;
    vpmm_stream_t s;
    vpmm_graph_pool_stats_t gs;
    void *a, *keep, *big;
    (void)state;
    gp = tgraph_open(&t, &(tpool_params_t){ .memory_limit = 16 * MiB }, &s);
    tcapture_begin(&t, gp, s);
    keep = tmalloc(t.pool, 1 * MiB, s);
    a = tmalloc(t.pool, 8 * MiB, s);
    tfree(t.pool, a);
    tgraph_destroy(&t, tcapture_end(&t, s));
    /* No graph, but the handle stays: the graph pool is idle and its free pages may go. */
    gs = tgp_stats(gp);
    assert_int_equal(gs.graphs, 0);
    assert_false(gs.pinned);
    big = tmalloc(t.pool, 14 * MiB, s);
    gs = tgp_stats(gp);
    assert_true(gs.mapped_bytes < 10 * MiB);
    assert_int_equal(gs.live_allocs, 1); /* its allocation never moves */
    assert_int_equal(tregion_of(t.pool, keep).pool, gs.id);
    tfree(t.pool, big);
    tfree(t.pool, keep);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    tpool_close(&t);
}

static void test_pinned_pages_never_move(void **state)
{
    tpool_t t;
    vpmm_graph_pool_t *gp;
    vpmm_stream_t s;
    vpmm_graph_t g;
    vpmm_graph_pool_stats_t before, after;
    void *a, *b, *big;
    (void)state;
    gp = tgraph_open(&t, &(tpool_params_t){ .memory_limit = 64 * MiB }, &s);
    tcapture_begin(&t, gp, s);
    a = tmalloc(t.pool, 6 * MiB, s);
    b = tmalloc(t.pool, 300, s);
    tfree(t.pool, a);
    g = tcapture_end(&t, s);
    memset(b, 0x5a, 300); /* the host backend's memory is real */
    before = tgp_stats(gp);
    /* Fragment the shared pool and force defragmentation: the graph pool must not be touched. */
    {
        void *v[16];
        for (int i = 0; i < 16; i++)
            v[i] = tmalloc(t.pool, 2 * MiB, NULL);
        for (int i = 0; i < 16; i += 2)
            tfree(t.pool, v[i]);
        big = tmalloc(t.pool, 16 * MiB, NULL);
        assert_true(tstats(t.pool).defrags > 0);
        for (int i = 1; i < 16; i += 2)
            tfree(t.pool, v[i]);
    }
    after = tgp_stats(gp);
    assert_int_equal(after.mapped_bytes, before.mapped_bytes);
    assert_int_equal(after.zombie_bytes, 0);
    for (int i = 0; i < 300; i++)
        assert_int_equal(((unsigned char *)b)[i], 0x5a);
    tfree(t.pool, big);
    tfree(t.pool, b);
    tgraph_destroy(&t, g);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    tpool_close(&t);
}

/* A graph pool's zombies (own pages mapped again for a larger allocation) stay mapped while a
 * graph may use the old address, and go once no graph is left. */
static void test_private_zombies_kept_while_pinned(void **state)
{
    tpool_t t;
    vpmm_graph_pool_t *gp;
    vpmm_stream_t s;
    vpmm_graph_t g1, g2;
    void *a, *big, *shared;
    (void)state;
    gp = tgraph_open(&t, NULL, &s);
    tcapture_begin(&t, gp, s);
    a = tmalloc(t.pool, 4 * MiB, s);
    g1 = tcapture_end(&t, s);
    tcapture_begin(&t, gp, s);
    tfree(t.pool, a);
    big = tmalloc(t.pool, 6 * MiB, s); /* a's two pages, mapped again, plus one new */
    g2 = tcapture_end(&t, s);
    assert_int_equal(tgp_stats(gp).pages_remapped, 2);
    assert_int_equal(tgp_stats(gp).zombie_bytes, 4 * MiB);
    shared = tmalloc(t.pool, 64 * MiB, NULL); /* a shared slow path: zombies are reclaimed there */
    assert_int_equal(tgp_stats(gp).zombie_bytes, 4 * MiB); /* but not these */
    tfree(t.pool, shared);
    tgraph_destroy(&t, g1);
    tgraph_destroy(&t, g2);
    shared = tmalloc(t.pool, 128 * MiB, NULL);
    assert_int_equal(tgp_stats(gp).zombie_bytes, 0); /* unpinned: the old address is unmapped */
    assert_int_equal(tgp_stats(gp).hole_bytes, tgp_stats(gp).reserved_va_bytes - 6 * MiB);
    assert_driver_matches_pool(&t);
    tfree(t.pool, shared);
    tfree(t.pool, big);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    tpool_close(&t);
}

static void test_destroy_with_live_graph_refused(void **state)
{
    tpool_t t;
    vpmm_graph_pool_t *gp;
    vpmm_stream_t s;
    vpmm_graph_t g;
    (void)state;
    gp = tgraph_open(&t, NULL, &s);
    assert_int_equal(vpmm_pool_destroy(t.pool), VPMM_ERROR_POOL_BUSY); /* a handle */
    tcapture_begin(&t, gp, s);
    tfree(t.pool, tmalloc(t.pool, 4096, s));
    g = tcapture_end(&t, s);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    assert_int_equal(vpmm_pool_destroy(t.pool), VPMM_ERROR_POOL_BUSY); /* a graph */
    assert_non_null(strstr(vpmm_last_error(), "graph"));
    CHECK_POOL(t.pool);
    tgraph_destroy(&t, g);
    tpool_close(&t); /* destroy now succeeds */
}

static void test_private_free_after_capture_is_stream_ordered(void **state)
{
    tpool_t t;
    vpmm_graph_pool_t *gp;
    vpmm_stream_t s, o;
    vpmm_graph_t g1, g2, g3;
    void *out, *x, *y;
    (void)state;
    tpool_open(&t, NULL);
    s = vpmm_host_stream_create(t.host);
    o = vpmm_host_stream_create(t.host);
    gp = tgp_create(&t);
    tcapture_begin(&t, gp, s);
    out = tmalloc(t.pool, 1 * MiB, s); /* the graph's output: live after the capture */
    g1 = tcapture_end(&t, s);
    vpmm_host_enqueue(t.host, s); /* s reads the output */
    tfree(t.pool, out);           /* pending on s until that work is done */
    /* Another stream's capture must not get it yet ... */
    tcapture_begin(&t, gp, o);
    x = tmalloc(t.pool, 1 * MiB, o);
    assert_ptr_not_equal(x, out);
    tfree(t.pool, x);
    g2 = tcapture_end(&t, o);
    /* ... but s's own next capture may (stream order). */
    tcapture_begin(&t, gp, s);
    y = tmalloc(t.pool, 1 * MiB, s);
    assert_ptr_equal(y, out);
    tfree(t.pool, y);
    g3 = tcapture_end(&t, s);
    tgraph_destroy(&t, g1);
    tgraph_destroy(&t, g2);
    tgraph_destroy(&t, g3);
    vpmm_host_complete_all(t.host);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    tpool_close(&t);
}

static void test_invalidated_capture(void **state)
{
    tpool_t t;
    vpmm_graph_pool_t *gp;
    vpmm_stream_t s;
    vpmm_graph_t g = (vpmm_graph_t)1;
    void *a;
    (void)state;
    gp = tgraph_open(&t, NULL, &s);
    tcapture_begin(&t, gp, s);
    a = tmalloc(t.pool, 4096, s);
    /* A synchronize during the capture invalidates it (host rule, as CUDA's global mode). */
    {
        vpmm_capture_status_t cap;
        uint64_t id;
        (void)t.host->synchronize(t.host);
        assert_int_equal(t.host->capture_info(t.host, s, &cap, &id, NULL), VPMM_DRV_OK);
        assert_int_equal(cap, VPMM_CAPTURE_INVALIDATED);
    }
    assert_int_equal(vpmm_capture_end(t.pool, s, &g), VPMM_ERROR_DRIVER);
    assert_null(g);
    CHECK_POOL(t.pool);
    assert_int_equal(tgp_stats(gp).captures, 0);
    assert_int_equal(tgp_stats(gp).graphs, 0); /* CUDA discarded the graph */
    tfree(t.pool, a);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    tpool_close(&t);
}

/* ---- out of memory during a capture --------------------------------------------------------- */

/*
 * The cap refusing a capture's growth is an out-of-memory like any other: vpmm_last_error says
 * so (not an older, unrelated failure), stats.ooms counts it, the report names the cap.
 */
static void test_capture_oom_under_cap_is_reported(void **state)
{
    tpool_t t;
    vpmm_graph_pool_t *gp;
    vpmm_stream_t s;
    vpmm_graph_t g;
    char report[1536];
    void *p = (void *)1;
    (void)state;
    gp = tgraph_open(&t, &(tpool_params_t){ .max_bytes = 4 * MiB }, &s);
    /* An earlier, unrelated failure that must not stand as the explanation. */
    assert_int_equal(vpmm_free(t.pool, (void *)0x1000), VPMM_ERROR_FOREIGN_POINTER);
    tcapture_begin(&t, gp, s);
    assert_int_equal(vpmm_malloc(t.pool, 8 * MiB, s, &p), VPMM_ERROR_OUT_OF_MEMORY);
    assert_null(p);
    CHECK_POOL(t.pool);
    assert_non_null(strstr(vpmm_last_error(), "out of memory"));
    assert_non_null(strstr(vpmm_last_error(), "VPMM_MAX_BYTES"));
    assert_int_equal(tstats(t.pool).ooms, 1);
    assert_int_equal(vpmm_pool_oom_report(t.pool, report, sizeof report), VPMM_SUCCESS);
    assert_non_null(strstr(report, "cap"));
    assert_non_null(strstr(report, "g1")); /* the graph pool is listed */
    /* The capture goes on: what fits under the cap still comes. */
    p = tmalloc(t.pool, 2 * MiB, s);
    tfree(t.pool, p);
    g = tcapture_end(&t, s);
    tgraph_destroy(&t, g);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    tpool_close(&t);
}

/*
 * Under the cap, a capture may use free pages another stream holds in its exact-size cache, once
 * that stream's work is done: capture begin flushes the caches before it polls (as every slow
 * path does), so they are as usable as with the caches off.
 */
static void test_capture_uses_cached_pages_under_cap(void **state)
{
    for (int cache = 0; cache < 2; cache++) {
        tpool_t t;
        vpmm_graph_pool_t *gp;
        vpmm_stream_t s, o;
        vpmm_graph_t g;
        void *x, *y;
        (void)state;
        tpool_open(&t,
                   &(tpool_params_t){ .max_bytes = 4 * MiB, .cache_percent = cache ? 100 : -1 });
        s = vpmm_host_stream_create(t.host);
        o = vpmm_host_stream_create(t.host);
        x = tmalloc(t.pool, 4 * MiB, o);
        vpmm_host_enqueue(t.host, o);
        tfree(t.pool, x);
        assert_int_equal(t.pool->cached_bytes, cache ? 4 * MiB : 0);
        vpmm_host_complete(t.host, o);
        gp = tgp_create(&t);
        tcapture_begin(&t, gp, s);
        y = tmalloc(t.pool, 4 * MiB, s); /* o's pages, whose work is done: no new memory */
        assert_int_equal(tstats(t.pool).mapped_bytes, 4 * MiB);
        assert_int_equal(tgp_stats(gp).pages_taken, 2);
        g = tcapture_end(&t, s);
        tfree(t.pool, y);
        tgraph_destroy(&t, g);
        assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
        tpool_close(&t);
    }
}

/*
 * A server that captures and destroys graphs forever, one alive at a time, must not run out of
 * address space: each graph pool reserves a chunk of its own, and once its graph is gone the
 * chunk, empty, goes back by itself (not only at a vpmm_trim).
 */
static void test_repeated_captures_keep_address_space(void **state)
{
    tpool_t t;
    vpmm_stream_t s;
    vpmm_stats_t st;
    (void)state;
    /* VA chunks of 32 GiB, a graph pool's too, and an address space of three of them: a leak of
     * one chunk per graph fails the third capture. */
    tpool_open(&t, &(tpool_params_t){ .va_limit = 96 * GiB });
    s = vpmm_host_stream_create(t.host);
    for (int i = 0; i < 300; i++) {
        vpmm_graph_pool_t *gp = tgp_create(&t);
        vpmm_graph_t g;
        void *x;
        tcapture_begin(&t, gp, s);
        x = tmalloc(t.pool, 2 * MiB, s);
        tfree(t.pool, x);
        g = tcapture_end(&t, s);
        assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
        assert_int_equal(vpmm_graph_destroy(t.pool, g), VPMM_SUCCESS);
        CHECK_POOL(t.pool);
        st = tstats(t.pool);
        assert_int_equal(st.graph_pools, 0);
        /* The last graph pool's page may still lie in its old chunk (as free shared memory,
         * until the next graph pool takes it): two chunks at most, never one per graph. */
        assert_true(st.va_chunks <= 2);
        assert_true(st.reserved_va_bytes <= 64 * GiB);
    }
    assert_driver_matches_pool(&t);
    tpool_close(&t);
}

/*
 * vpmm_graph_pool_malloc: a graph pool's memory outside any capture (PyTorch's warm-up runs,
 * torch.cuda.MemPool); during a capture only its own capture's graph pool, and a capture vpmm has
 * not seen yet is registered with it. Frees return to the graph pool; the shared pool is untouched.
 */
static void test_graph_pool_malloc(void **state)
{
    tpool_t t;
    vpmm_graph_pool_t *gp, *other;
    vpmm_stream_t s, c;
    vpmm_graph_t g;
    uint64_t id;
    void *a, *b, *x = (void *)1;
    (void)state;
    tpool_open(&t, NULL);
    s = vpmm_host_stream_create(t.host);
    c = vpmm_host_stream_create(t.host);
    gp = tgp_create(&t);
    other = tgp_create(&t);
    assert_int_equal(vpmm_graph_pool_malloc(gp, 3000, s, &a), VPMM_SUCCESS);
    CHECK_POOL(t.pool);
    assert_int_equal(tregion_of(t.pool, a).pool, tgp_stats(gp).id);
    assert_int_equal(tgp_stats(gp).live_allocs, 1);
    assert_int_equal(tstats(t.pool).private_live_bytes, 3000);
    tfree(t.pool, a);
    assert_int_equal(tgp_stats(gp).live_allocs, 0);
    /* The same page serves the next one, on this stream at once (stream order). */
    assert_int_equal(vpmm_graph_pool_malloc(gp, 2000, s, &b), VPMM_SUCCESS);
    assert_ptr_equal(b, a);
    tfree(t.pool, b);

    /* A capture begun outside vpmm, not seen yet: registered with gp by its first allocation. */
    assert_int_equal(vpmm_host_begin_capture(t.host, c, &id), VPMM_DRV_OK);
    assert_int_equal(vpmm_graph_pool_malloc(gp, 4096, c, &a), VPMM_SUCCESS);
    assert_int_equal(tregion_of(t.pool, a).pool, tgp_stats(gp).id);
    assert_int_equal(tgp_stats(gp).captures, 1);
    b = tmalloc(t.pool, 4096, c); /* the capture's ordinary mallocs follow */
    assert_int_equal(tregion_of(t.pool, b).pool, tgp_stats(gp).id);
    /* Another graph pool for a stream of that capture: refused, nothing changed. */
    {
        tsnap_t before = tsnap(t.pool), after;
        assert_int_equal(vpmm_graph_pool_malloc(other, 4096, c, &x), VPMM_ERROR_WRONG_POOL);
        assert_null(x);
        assert_non_null(strstr(vpmm_last_error(), "served by graph pool"));
        after = tsnap(t.pool);
        assert_snap_equal(&before, &after);
    }
    tfree(t.pool, a);
    tfree(t.pool, b);
    g = tcapture_end(&t, c);
    tgraph_destroy(&t, g);

    /* Bad input: vpmm_malloc's statuses. */
    assert_int_equal(vpmm_graph_pool_malloc(NULL, 10, s, &x), VPMM_ERROR_INVALID_ARGUMENT);
    assert_null(x);
    assert_int_equal(vpmm_graph_pool_malloc(gp, 10, s, NULL), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_graph_pool_malloc(gp, 0, s, &x), VPMM_ERROR_INVALID_SIZE);
    assert_non_null(strstr(vpmm_last_error(), "vpmm_graph_pool_malloc: size is 0"));
    assert_int_equal(vpmm_graph_pool_malloc(gp, SIZE_MAX, s, &x), VPMM_ERROR_SIZE_TOO_LARGE);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    assert_int_equal(vpmm_graph_pool_release(other), VPMM_SUCCESS);
    tpool_close(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_capture_allocates_from_graph_pool),
        cmocka_unit_test(test_reuse_in_stream_order),
        cmocka_unit_test(test_external_capture_gets_own_graph_pool),
        cmocka_unit_test(test_register_external_capture),
        cmocka_unit_test(test_capture_errors_change_nothing),
        cmocka_unit_test(test_capture_begin_anonymous),
        cmocka_unit_test(test_graph_keeps_pages_until_launches_complete),
        cmocka_unit_test(test_idle_graph_pool_pages_may_be_taken),
        cmocka_unit_test(test_pinned_pages_never_move),
        cmocka_unit_test(test_private_zombies_kept_while_pinned),
        cmocka_unit_test(test_destroy_with_live_graph_refused),
        cmocka_unit_test(test_private_free_after_capture_is_stream_ordered),
        cmocka_unit_test(test_invalidated_capture),
        cmocka_unit_test(test_capture_oom_under_cap_is_reported),
        cmocka_unit_test(test_capture_uses_cached_pages_under_cap),
        cmocka_unit_test(test_repeated_captures_keep_address_space),
        cmocka_unit_test(test_graph_pool_malloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
