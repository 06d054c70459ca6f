/*
 * test_stats.c — stats.c: counters after known operations, peaks and their reset, the region walk
 * (order, early stop), the dump's content (also which pool owns what), backend name and the last
 * driver error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_test_util.h"

static void test_counters(void **state)
{
    tpool_t t;
    void *a, *b;
    vpmm_stats_t s;
    (void)state;
    tpool_open(&t, NULL);
    a = tmalloc(t.pool, 1000, NULL);
    b = tmalloc(t.pool, 3 * MiB, NULL);
    s = tstats(t.pool);
    assert_int_equal(s.live_bytes, 1000 + 3 * MiB);
    assert_int_equal(s.allocated_bytes, 1024 + 3 * MiB);
    assert_int_equal(s.live_allocs, 2);
    assert_int_equal(s.mallocs, 2);
    /* The 1000 bytes are small (under an 8th of a page): a page of their own, in a chunk of
     * their own (32 GiB here: the small class's 64 GiB, capped by the test pool's VA size);
     * the 3 MiB take two pages of the large chunk. */
    assert_int_equal(s.small_bytes, 256 * KiB);
    assert_int_equal(s.mapped_bytes, 6 * MiB);
    assert_int_equal(s.free_bytes, 6 * MiB - 1024 - 3 * MiB);
    assert_int_equal(s.reserved_va_bytes, 64 * GiB);
    assert_int_equal(s.hole_bytes, 64 * GiB - 6 * MiB);
    assert_int_equal(s.va_chunks, 2);
    assert_int_equal(s.pages_created, 3);
    assert_int_equal(s.class_fallbacks, 0);
    assert_int_equal(s.grows, 2);
    assert_int_equal(s.streams, 1);
    tfree(t.pool, a);
    s = tstats(t.pool);
    assert_int_equal(s.frees, 1);
    assert_int_equal(s.live_allocs, 1);
    tfree(t.pool, b);
    tpool_close(&t);
}

static void test_peaks_and_reset(void **state)
{
    tpool_t t;
    void *a, *b;
    vpmm_stats_t s;
    (void)state;
    tpool_open(&t, NULL);
    a = tmalloc(t.pool, 5 * MiB, NULL);
    b = tmalloc(t.pool, 5 * MiB, NULL);
    tfree(t.pool, a);
    s = tstats(t.pool);
    assert_int_equal(s.peak_live_bytes, 10 * MiB);
    assert_int_equal(s.peak_mapped_bytes, 10 * MiB);
    assert_int_equal(vpmm_reset_peak_stats(t.pool), VPMM_SUCCESS);
    s = tstats(t.pool);
    assert_int_equal(s.peak_live_bytes, 5 * MiB);
    assert_int_equal(s.peak_mapped_bytes, 10 * MiB); /* still mapped: free memory is kept */
    tfree(t.pool, b);
    tpool_close(&t);
}

typedef struct walk_state {
    size_t visits;
    uintptr_t last_end;
    int ordered;
    size_t stop_after;
} walk_state_t;

static int visit(const vpmm_region_info_t *r, void *user)
{
    walk_state_t *w = user;
    if (w->visits > 0 && r->addr != w->last_end)
        w->ordered = 0;
    w->last_end = r->addr + r->size;
    w->visits++;
    return w->stop_after && w->visits == w->stop_after;
}

static void test_walk_order_and_stop(void **state)
{
    tpool_t t;
    void *p[6];
    walk_state_t w = { 0, 0, 1, 0 };
    (void)state;
    tpool_open(&t, NULL);
    for (int i = 0; i < 6; i++)
        p[i] = tmalloc(t.pool, (size_t)(i + 1) * 700 * KiB, NULL);
    for (int i = 0; i < 6; i += 2)
        tfree(t.pool, p[i]);
    assert_int_equal(vpmm_pool_walk(t.pool, visit, &w), VPMM_SUCCESS);
    assert_true(w.ordered);
    assert_true(w.visits >= 7);
    w = (walk_state_t){ 0, 0, 1, 3 };
    assert_int_equal(vpmm_pool_walk(t.pool, visit, &w), VPMM_SUCCESS);
    assert_int_equal(w.visits, 3);
    for (int i = 1; i < 6; i += 2)
        tfree(t.pool, p[i]);
    tpool_close(&t);
}

static void test_dump(void **state)
{
    tpool_t t;
    tpool_params_t prm = { .prealloc = 2 };
    char *buf = NULL;
    size_t len = 0;
    FILE *f;
    void *a;
    (void)state;
    tpool_open(&t, &prm);
    a = tmalloc(t.pool, 12345, NULL);
    f = open_memstream(&buf, &len);
    assert_non_null(f);
    assert_int_equal(vpmm_pool_dump(t.pool, f), VPMM_SUCCESS);
    fclose(f);
    print_message("%s", buf);
    assert_non_null(strstr(buf, "vpmm pool (fault(host) backend), page 2 MiB"));
    assert_non_null(strstr(buf, "allocated"));
    assert_non_null(strstr(buf, "(asked 12345)"));
    assert_non_null(strstr(buf, "free ready"));
    assert_non_null(strstr(buf, "hole"));
    assert_non_null(strstr(buf, "1 live allocations"));
    free(buf);
    tfree(t.pool, a);
    tpool_close(&t);
}

#if VPMM_HAVE_GRAPHS
/* The dump and the walk say which pool owns each region; the stats split out the graph pools. */
static void test_graph_pool_ownership(void **state)
{
    tpool_t t;
    vpmm_graph_pool_t *gp;
    vpmm_graph_pool_stats_t gs;
    vpmm_stream_t s;
    vpmm_graph_t g;
    vpmm_stats_t st;
    char *buf = NULL, owner[32], line[96];
    size_t len = 0;
    FILE *f;
    void *shared, *priv;
    (void)state;
    tpool_open(&t, NULL);
    s = vpmm_host_stream_create(t.host);
    shared = tmalloc(t.pool, 5000, s);
    gp = tgp_create(&t);
    tcapture_begin(&t, gp, s);
    priv = tmalloc(t.pool, 7000, s);
    g = tcapture_end(&t, s);
    gs = tgp_stats(gp);
    st = tstats(t.pool);
    assert_int_equal(st.graph_pools, 1);
    assert_int_equal(st.private_live_bytes, 7000);
    assert_int_equal(st.private_mapped_bytes, gs.mapped_bytes);
    assert_int_equal(st.live_bytes, 12000);
    assert_int_equal(gs.live_bytes, 7000);
    assert_int_equal(gs.graphs, 1);

    f = open_memstream(&buf, &len);
    assert_non_null(f);
    assert_int_equal(vpmm_pool_dump(t.pool, f), VPMM_SUCCESS);
    fclose(f);
    print_message("%s", buf);
    snprintf(owner, sizeof owner, "g%u", gs.id);
    assert_non_null(strstr(buf, " pool "));   /* the column */
    assert_non_null(strstr(buf, " shared ")); /* the shared allocation's chunk */
    assert_non_null(strstr(buf, owner));
    assert_non_null(strstr(buf, "(asked 7000)"));
    snprintf(line, sizeof line, "graph pool %s (pinned by graphs): live 7000 B", owner);
    assert_non_null(strstr(buf, line));
    free(buf);

    assert_int_equal(vpmm_graph_destroy(t.pool, g), VPMM_SUCCESS);
    tfree(t.pool, priv);
    tfree(t.pool, shared);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    tpool_close(&t);
}
#endif

static void test_backend_and_driver_error(void **state)
{
    tpool_t t;
    int code = -1;
    const char *call = "x";
    void *p = NULL;
    (void)state;
    tpool_open(&t, NULL);
    assert_string_equal(vpmm_pool_backend_name(t.pool), "fault(host)");
    assert_int_equal(vpmm_pool_last_driver_error(t.pool, &code, &call), VPMM_SUCCESS);
    assert_int_equal(code, 0);
    assert_null(call);
    vpmm_fault_fail_nth(t.fault, VPMM_DRV_SET_ACCESS, 1, VPMM_DRV_ERROR);
    assert_int_equal(vpmm_malloc(t.pool, 4096, NULL, &p), VPMM_ERROR_DRIVER);
    assert_int_equal(vpmm_pool_last_driver_error(t.pool, &code, &call), VPMM_SUCCESS);
    assert_int_equal(code, 999);
    assert_string_equal(call, "cuMemSetAccess");
    assert_non_null(strstr(vpmm_last_error(), "cuMemSetAccess failed"));
    tpool_close(&t);
}

#if VPMM_HAVE_GRAPHS
/* vpmm_pointer_info: an allocation by its start or any address inside it; free memory and holes
 * by any address in them; an address outside the pool refused. */
static void test_pointer_info(void **state)
{
    tpool_t t;
    vpmm_stream_t s;
    vpmm_region_info_t info;
    vpmm_graph_pool_t *gp;
    void *a, *b;
    (void)state;
    tpool_open(&t, NULL);
    s = vpmm_host_stream_create(t.host);
    a = tmalloc(t.pool, 1000, s);
    assert_int_equal(vpmm_pointer_info(t.pool, a, &info), VPMM_SUCCESS);
    assert_int_equal(info.addr, (uintptr_t)a);
    assert_int_equal(info.state, VPMM_REGION_ALLOCATED);
    assert_int_equal(info.size, 1024);
    assert_int_equal(info.requested, 1000);
    assert_ptr_equal(info.stream, s);
    assert_int_equal(info.pool, 0);
    assert_int_equal(vpmm_pointer_info(t.pool, (char *)a + 999, &info), VPMM_SUCCESS);
    assert_int_equal(info.addr, (uintptr_t)a); /* interior: the allocation holding it */
    assert_int_equal(vpmm_pointer_info(t.pool, (char *)a + 4096, &info), VPMM_SUCCESS);
    assert_int_equal(info.state, VPMM_REGION_FREE);
    gp = tgp_create(&t);
    assert_int_equal(vpmm_graph_pool_malloc(gp, 64, s, &b), VPMM_SUCCESS);
    assert_int_equal(vpmm_pointer_info(t.pool, b, &info), VPMM_SUCCESS);
    assert_true(info.pool != 0);
    assert_int_equal(vpmm_pointer_info(t.pool, (void *)0x1000, &info), VPMM_ERROR_FOREIGN_POINTER);
    assert_int_equal(vpmm_pointer_info(NULL, a, &info), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_pointer_info(t.pool, a, NULL), VPMM_ERROR_INVALID_ARGUMENT);
    tfree(t.pool, b);
    tfree(t.pool, a);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    tpool_close(&t);
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counters),
        cmocka_unit_test(test_peaks_and_reset),
        cmocka_unit_test(test_walk_order_and_stop),
        cmocka_unit_test(test_dump),
#if VPMM_HAVE_GRAPHS
        cmocka_unit_test(test_graph_pool_ownership),
#endif
        cmocka_unit_test(test_backend_and_driver_error),
#if VPMM_HAVE_GRAPHS
        cmocka_unit_test(test_pointer_info),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
