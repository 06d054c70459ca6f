/*
 * test_graphs_off.c — a vpmm built without graph/ and checkpoint/ (VPMM_WITH_GRAPHS=OFF; this test
 * is registered only then), on the host backend: every graph and checkpoint call of
 * include/vpmm.h (src/api/graph_off.c) returns VPMM_ERROR_NOT_SUPPORTED, says so in
 * vpmm_last_error(), clears its out pointers and leaves the pool exactly as it was; a vpmm_malloc
 * on a stream captured outside vpmm (a framework's capture) is refused the same way by
 * vpmm_malloc's routing (src/api/malloc.c), and the stream serves allocations again once its
 * capture has ended. Single-threaded.
 */
#include <string.h>

#include "graph_test_util.h"

#define OFF "built without graph support (VPMM_WITH_GRAPHS=OFF)"

/* st is the refusal of fn: the status, and the thread's last error naming fn and why. */
static void assert_off(vpmm_status_t st, const char *fn)
{
    const char *err = vpmm_last_error();
    assert_int_equal(st, VPMM_ERROR_NOT_SUPPORTED);
    if (strncmp(err, fn, strlen(fn)) != 0 || err[strlen(fn)] != ':' || strstr(err, OFF) == NULL)
        fail_msg("%s: last error \"%s\" does not name the call and say \"%s\"", fn, err, OFF);
}

/* Sets the last error to something else, so that each call is seen to write its own. */
static void poison(void)
{
    vpmm_i_set_error("(poisoned by test_graphs_off)");
}

static void test_graph_calls_refused(void **state)
{
    tpool_t t;
    tsnap_t before, after;
    vpmm_stream_t s;
    vpmm_graph_pool_t *gp;
    vpmm_graph_t g;
    vpmm_checkpoint_t *ck;
    vpmm_graph_pool_stats_t gs;
    vpmm_checkpoint_info_t info;
    vpmm_checkpoint_alloc_t al[2];
    void *live, *p;
    void *bogus = &t; /* what the out pointers hold before each call: never left there */
    (void)state;

    tpool_open(&t, NULL);
    s = vpmm_host_stream_create(t.host);
    tfree(t.pool, tmalloc(t.pool, 64 * KiB, s)); /* a pool with something in it */
    live = tmalloc(t.pool, 3 * MiB, s);
    before = tsnap(t.pool);

    poison();
    gp = bogus;
    assert_off(vpmm_graph_pool_create(t.pool, &gp), "vpmm_graph_pool_create");
    assert_null(gp);
    poison();
    p = bogus;
    assert_off(vpmm_graph_pool_malloc(NULL, 4096, s, &p), "vpmm_graph_pool_malloc");
    assert_null(p);
    poison();
    assert_off(vpmm_graph_pool_retain(NULL), "vpmm_graph_pool_retain");
    poison();
    assert_off(vpmm_graph_pool_release(NULL), "vpmm_graph_pool_release");
    poison();
    assert_off(vpmm_graph_pool_stats(NULL, &gs), "vpmm_graph_pool_stats");
    poison();
    assert_off(vpmm_graph_pool_reset_peak_stats(NULL), "vpmm_graph_pool_reset_peak_stats");
    poison();
    assert_off(vpmm_capture_begin(t.pool, NULL, s, VPMM_STREAM_CAPTURE_GLOBAL),
               "vpmm_capture_begin");
    assert_int_equal(tcapture_status(&t, s, NULL), VPMM_CAPTURE_NONE); /* none was begun */
    poison();
    g = bogus;
    assert_off(vpmm_capture_end(t.pool, s, &g), "vpmm_capture_end");
    assert_null(g);
    poison();
    assert_off(vpmm_graph_destroy(t.pool, NULL), "vpmm_graph_destroy");
    poison();
    assert_off(vpmm_capture_register(t.pool, NULL, s), "vpmm_capture_register");
    poison();
    gp = bogus;
    assert_off(vpmm_capture_graph_pool(t.pool, s, &gp), "vpmm_capture_graph_pool");
    assert_null(gp);
    poison();
    ck = bogus;
    assert_off(vpmm_checkpoint_take(NULL, &ck), "vpmm_checkpoint_take");
    assert_null(ck);
    poison();
    assert_off(vpmm_checkpoint_reapply(NULL, NULL, NULL, 0), "vpmm_checkpoint_reapply");
    poison();
    assert_off(vpmm_checkpoint_info(NULL, &info), "vpmm_checkpoint_info");
    poison();
    assert_int_equal(vpmm_checkpoint_allocs(NULL, al, 2), 0);
    assert_off(VPMM_ERROR_NOT_SUPPORTED, "vpmm_checkpoint_allocs");
    vpmm_checkpoint_destroy(NULL); /* no checkpoint can exist: nothing to do, nothing said */

    after = tsnap(t.pool);
    assert_snap_equal(&before, &after);
    assert_int_equal(after.stats.graph_pools, 0);
    CHECK_POOL(t.pool);
    assert_driver_matches_pool(&t);
    tfree(t.pool, tmalloc(t.pool, 4096, s)); /* and it still works */
    tfree(t.pool, live);
    tpool_close(&t);
}

/* A stream captured outside vpmm (as a framework captures one): its malloc is refused, the pool
 * does not change, and once the capture has ended the stream allocates again. */
static void test_malloc_on_captured_stream_refused(void **state)
{
    tpool_t t;
    tsnap_t before, after;
    vpmm_stream_t s;
    uint64_t id;
    void *p, *q;
    (void)state;

    tpool_open(&t, NULL);
    s = vpmm_host_stream_create(t.host);
    q = tmalloc(t.pool, 1000, s);
    before = tsnap(t.pool);
    assert_int_equal(vpmm_host_begin_capture(t.host, s, &id), VPMM_DRV_OK);

    poison();
    p = &t;
    assert_int_equal(vpmm_malloc(t.pool, 4096, s, &p), VPMM_ERROR_NOT_SUPPORTED);
    assert_null(p);
    if (strstr(vpmm_last_error(), "vpmm_malloc: the stream is being captured") == NULL ||
        strstr(vpmm_last_error(), OFF) == NULL)
        fail_msg("last error \"%s\" does not say why", vpmm_last_error());
    after = tsnap(t.pool);
    assert_snap_equal(&before, &after);
    CHECK_POOL(t.pool);
    assert_driver_matches_pool(&t);

    assert_int_equal(vpmm_host_end_capture(t.host, s), VPMM_DRV_OK);
    tfree(t.pool, q);
    tfree(t.pool, tmalloc(t.pool, 4096, s));
    tpool_close(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_graph_calls_refused),
        cmocka_unit_test(test_malloc_on_captured_stream_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
