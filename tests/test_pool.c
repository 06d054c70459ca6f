/*
 * test_pool.c — the public entry points of pool.c on the host backend: creation and destruction,
 * malloc/free basics (alignment, sub-page packing), and every kind of bad input, each of which
 * must get its own status and leave the pool exactly as it was (snapshot before == after).
 */
#include <string.h>

#include "test_util.h"

static void test_create_destroy_public(void **state)
{
    vpmm_config_t cfg;
    vpmm_pool_t *pool = (vpmm_pool_t *)1;
    vpmm_stats_t s;
    (void)state;
    assert_int_equal(vpmm_config_init(&cfg), VPMM_SUCCESS);
    cfg.backend = VPMM_BACKEND_HOST;
    cfg.ignore_env = 1;
    cfg.va_size = GiB;
    assert_int_equal(vpmm_pool_create(&cfg, &pool), VPMM_SUCCESS);
    assert_string_equal(vpmm_pool_backend_name(pool), "host");
    assert_int_equal(vpmm_get_stats(pool, &s), VPMM_SUCCESS);
    assert_int_equal(s.reserved_va_bytes, GiB);
    assert_int_equal(s.hole_bytes, GiB);
    assert_int_equal(s.mapped_bytes, 0);
    assert_int_equal(s.page_size, 2 * MiB);
    assert_int_equal(s.va_chunks, 1);
    assert_int_equal(vpmm_pool_check(pool, stderr), 0);
    assert_int_equal(vpmm_pool_destroy(pool), VPMM_SUCCESS);
}

static void test_alignment_and_subpage_packing(void **state)
{
    tpool_t t;
    void *a, *b, *c, *big;
    vpmm_stats_t s;
    (void)state;
    tpool_open(&t, NULL);
    a = tmalloc(t.pool, 1, NULL);
    b = tmalloc(t.pool, 3000, NULL);
    c = tmalloc(t.pool, 257, NULL);
    assert_true((uintptr_t)a % VPMM_ALIGNMENT == 0);
    assert_true((uintptr_t)b % VPMM_ALIGNMENT == 0);
    assert_true((uintptr_t)c % VPMM_ALIGNMENT == 0);
    /* Sub-page sizes share one page: they are packed, not given a page each. */
    s = tstats(t.pool);
    assert_int_equal(s.mapped_bytes, 2 * MiB);
    assert_int_equal(s.live_bytes, 1 + 3000 + 257);
    assert_int_equal(s.allocated_bytes, 256 + 3072 + 512);
    assert_int_equal((uintptr_t)b - (uintptr_t)a, 256);
    assert_int_equal((uintptr_t)c - (uintptr_t)b, 3072);
    /* A large allocation does not share their page (size classes: pages of their own for
     * blocks under an 8th of a page), so a small survivor never pins a large block's page. */
    big = tmalloc(t.pool, 3 * MiB, NULL);
    s = tstats(t.pool);
    assert_int_equal(s.mapped_bytes, 6 * MiB);
    assert_true((uintptr_t)big / (2 * MiB) != (uintptr_t)a / (2 * MiB));
    tfree(t.pool, a);
    tfree(t.pool, b);
    tfree(t.pool, c);
    tfree(t.pool, big);
    s = tstats(t.pool);
    assert_int_equal(s.live_bytes, 0);
    assert_int_equal(s.free_bytes, s.mapped_bytes);
    tpool_close(&t);
}

static void test_reuse_same_stream(void **state)
{
    tpool_t t;
    void *a, *b;
    (void)state;
    tpool_open(&t, NULL);
    a = tmalloc(t.pool, 5 * MiB, NULL);
    tfree(t.pool, a);
    b = tmalloc(t.pool, 5 * MiB, NULL);
    assert_ptr_equal(a, b); /* stream order: the same stream reuses at once */
    assert_int_equal(tstats(t.pool).pages_created, 3);
    tfree(t.pool, b);
    tpool_close(&t);
}

static void test_free_null_is_noop(void **state)
{
    tpool_t t;
    tsnap_t before, after;
    (void)state;
    tpool_open(&t, NULL);
    before = tsnap(t.pool);
    assert_int_equal(vpmm_free(t.pool, NULL), VPMM_SUCCESS);
    after = tsnap(t.pool);
    assert_snap_equal(&before, &after);
    tpool_close(&t);
}

static void test_null_arguments(void **state)
{
    tpool_t t;
    tsnap_t before, after;
    void *p = (void *)1;
    vpmm_stats_t s;
    int code;
    const char *call;
    (void)state;
    tpool_open(&t, NULL);
    before = tsnap(t.pool);
    assert_int_equal(vpmm_malloc(NULL, 64, NULL, &p), VPMM_ERROR_INVALID_ARGUMENT);
    assert_null(p);
    assert_int_equal(vpmm_malloc(t.pool, 64, NULL, NULL), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_free(NULL, (void *)0x1000), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_get_stats(NULL, &s), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_get_stats(t.pool, NULL), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_reset_peak_stats(NULL), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_pool_walk(NULL, NULL, NULL), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_pool_walk(t.pool, NULL, NULL), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_pool_dump(NULL, stdout), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_pool_dump(t.pool, NULL), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_pool_destroy(NULL), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_pool_create(NULL, NULL), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_stream_release(NULL, NULL), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_pool_last_driver_error(NULL, &code, &call), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_pool_last_driver_error(t.pool, NULL, &call), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_pool_check(NULL, NULL), 1);
    assert_null(vpmm_pool_backend_name(NULL));
    assert_non_null(strstr(vpmm_last_error(), "NULL"));
    after = tsnap(t.pool);
    assert_snap_equal(&before, &after);
    tpool_close(&t);
}

static void test_bad_sizes(void **state)
{
    tpool_t t;
    tpool_params_t prm = { .va_size = 256 * MiB };
    tsnap_t before, after;
    void *p = (void *)1;
    (void)state;
    tpool_open(&t, &prm);
    before = tsnap(t.pool);
    assert_int_equal(vpmm_malloc(t.pool, 0, NULL, &p), VPMM_ERROR_INVALID_SIZE);
    assert_null(p);
    p = (void *)1;
    assert_int_equal(vpmm_malloc(t.pool, SIZE_MAX, NULL, &p), VPMM_ERROR_SIZE_TOO_LARGE);
    assert_null(p);
    assert_int_equal(vpmm_malloc(t.pool, SIZE_MAX - 100, NULL, &p), VPMM_ERROR_SIZE_TOO_LARGE);
    assert_int_equal(vpmm_malloc(t.pool, 256 * MiB + 1, NULL, &p), VPMM_ERROR_SIZE_TOO_LARGE);
    assert_non_null(strstr(vpmm_last_error(), "VA chunk"));
    after = tsnap(t.pool);
    assert_snap_equal(&before, &after);
    /* Exactly one chunk is fine. */
    p = tmalloc(t.pool, 256 * MiB, NULL);
    tfree(t.pool, p);
    tpool_close(&t);
}

static void test_bad_pointers(void **state)
{
    tpool_t t, other;
    tsnap_t before, after;
    void *a, *b, *foreign;
    int on_stack;
    (void)state;
    tpool_open(&t, NULL);
    tpool_open(&other, NULL);
    a = tmalloc(t.pool, 3 * MiB, NULL);
    b = tmalloc(t.pool, 1000, NULL);
    foreign = tmalloc(other.pool, 4096, NULL);
    tfree(t.pool, b);
    before = tsnap(t.pool);

    assert_int_equal(vpmm_free(t.pool, b), VPMM_ERROR_DOUBLE_FREE);
    assert_non_null(strstr(vpmm_last_error(), "double free"));
    assert_int_equal(vpmm_free(t.pool, (char *)a + 256), VPMM_ERROR_INTERIOR_POINTER);
    assert_non_null(strstr(vpmm_last_error(), "256 bytes into"));
    assert_int_equal(vpmm_free(t.pool, (char *)a + 2 * MiB + 1), VPMM_ERROR_INTERIOR_POINTER);
    assert_int_equal(vpmm_free(t.pool, foreign), VPMM_ERROR_FOREIGN_POINTER);
    assert_int_equal(vpmm_free(t.pool, &on_stack), VPMM_ERROR_FOREIGN_POINTER);
    assert_int_equal(vpmm_free(t.pool, (void *)(uintptr_t)-4096), VPMM_ERROR_FOREIGN_POINTER);
    /* Inside the pool's VA but in a hole (never allocated). */
    assert_int_equal(vpmm_free(t.pool, (char *)a + 1 * GiB), VPMM_ERROR_DOUBLE_FREE);
    after = tsnap(t.pool);
    assert_snap_equal(&before, &after);

    tfree(t.pool, a);
    assert_int_equal(vpmm_free(t.pool, a), VPMM_ERROR_DOUBLE_FREE);
    tfree(other.pool, foreign);
    tpool_close(&other);
    tpool_close(&t);
}

static void test_destroy_busy(void **state)
{
    tpool_t t;
    tsnap_t before, after;
    void *a;
    (void)state;
    tpool_open(&t, NULL);
    a = tmalloc(t.pool, 100, NULL);
    before = tsnap(t.pool);
    assert_int_equal(vpmm_pool_destroy(t.pool), VPMM_ERROR_POOL_BUSY);
    assert_non_null(strstr(vpmm_last_error(), "1 allocations are still live"));
    after = tsnap(t.pool);
    assert_snap_equal(&before, &after);
    tfree(t.pool, a);
    tpool_close(&t);
}

#if VPMM_HAVE_GRAPHS
/* The shared pool never serves a capture: its regions and counters do not change (graph/ serves
 * it; test_graph.c tests how). */
static void test_capture_leaves_shared_pool_alone(void **state)
{
    tpool_t t;
    vpmm_stream_t s;
    vpmm_stats_t before, after;
    vpmm_graph_pool_t *gp = NULL;
    uint64_t id;
    void *p = NULL, *q;
    (void)state;
    tpool_open(&t, NULL);
    s = vpmm_host_stream_create(t.host);
    q = tmalloc(t.pool, 4096, s);
    tfree(t.pool, q); /* cached on s: a shared malloc of 4096 on s would take it */
    before = tstats(t.pool);
    assert_int_equal(vpmm_host_begin_capture(t.host, s, &id), VPMM_DRV_OK);
    p = tmalloc(t.pool, 4096, s);
    assert_ptr_not_equal(p, q);
    after = tstats(t.pool);
    assert_int_equal(after.graph_pools, 1);
    assert_int_equal(after.live_bytes - after.private_live_bytes, before.live_bytes);
    assert_int_equal(after.mapped_bytes - after.private_mapped_bytes, before.mapped_bytes);
    assert_int_equal(vpmm_capture_graph_pool(t.pool, s, &gp), VPMM_SUCCESS);
    tfree(t.pool, p);
    assert_int_equal(vpmm_host_end_capture(t.host, s), VPMM_DRV_OK);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    CHECK_POOL(t.pool);
    assert_int_equal(tstats(t.pool).graph_pools, 0);
    q = tmalloc(t.pool, 4096, s);
    tfree(t.pool, q);
    tpool_close(&t);
}
#endif

static void test_oom_leaves_pool_unchanged(void **state)
{
    tpool_t t;
    tpool_params_t prm = { .memory_limit = 8 * MiB };
    tsnap_t before, after;
    void *a, *p = (void *)1;
    int code;
    const char *call;
    (void)state;
    tpool_open(&t, &prm);
    a = tmalloc(t.pool, 5 * MiB, NULL);
    before = tsnap(t.pool);
    assert_int_equal(vpmm_malloc(t.pool, 6 * MiB, NULL, &p), VPMM_ERROR_OUT_OF_MEMORY);
    assert_null(p);
    print_message("%s\n", vpmm_last_error());
    /* The first sentence of the report (test_report.c tests the rest). */
    assert_string_equal(vpmm_last_error(),
                        "vpmm_malloc(6 MiB) on the legacy stream: out of memory: the device has "
                        "2 MiB free of 8 MiB; 0 B of it is held outside this pool (other "
                        "processes, other allocators and pools, the driver).");
    after = tsnap(t.pool);
    /* Only the OOM counter moved. */
    assert_int_equal(after.stats.ooms, before.stats.ooms + 1);
    after.stats.ooms = before.stats.ooms;
    assert_snap_equal(&before, &after);
    assert_driver_matches_pool(&t);
    assert_int_equal(vpmm_pool_last_driver_error(t.pool, &code, &call), VPMM_SUCCESS);
    assert_int_equal(code, 2);
    assert_string_equal(call, "cuMemCreate");
    /* The rest still fits. */
    p = tmalloc(t.pool, 3 * MiB, NULL);
    tfree(t.pool, p);
    tfree(t.pool, a);
    tpool_close(&t);
}

static void test_stream_release(void **state)
{
    tpool_t t;
    vpmm_stream_t a, b;
    void *x, *y, *z;
    vpmm_stats_t s;
    (void)state;
    tpool_open(&t, NULL);
    a = vpmm_host_stream_create(t.host);
    b = vpmm_host_stream_create(t.host);
    x = tmalloc(t.pool, 4 * MiB, a);
    z = tmalloc(t.pool, 2 * MiB, a);
    vpmm_host_enqueue(t.host, a);
    tfree(t.pool, x);
    assert_int_equal(tstats(t.pool).streams, 1);
    assert_int_equal(vpmm_stream_release(t.pool, a), VPMM_SUCCESS);
    CHECK_POOL(t.pool);
    s = tstats(t.pool);
    assert_int_equal(s.streams, 0);
    /* Unknown streams are fine to release. */
    assert_int_equal(vpmm_stream_release(t.pool, b), VPMM_SUCCESS);
    /* Its allocation can still be freed; the memory waits for the final marker. */
    tfree(t.pool, z);
    vpmm_host_complete(t.host, a);
    y = tmalloc(t.pool, 6 * MiB, b);
    /* a's memory was reused on b without a wait once its work was done. */
    assert_int_equal(tstats(t.pool).pages_created, 3);
    assert_int_equal(tstats(t.pool).cross_stream_waits, 0);
    tfree(t.pool, y);
    tpool_close(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_destroy_public),
        cmocka_unit_test(test_alignment_and_subpage_packing),
        cmocka_unit_test(test_reuse_same_stream),
        cmocka_unit_test(test_free_null_is_noop),
        cmocka_unit_test(test_null_arguments),
        cmocka_unit_test(test_bad_sizes),
        cmocka_unit_test(test_bad_pointers),
        cmocka_unit_test(test_destroy_busy),
#if VPMM_HAVE_GRAPHS
        cmocka_unit_test(test_capture_leaves_shared_pool_alone),
#endif
        cmocka_unit_test(test_oom_leaves_pool_unchanged),
        cmocka_unit_test(test_stream_release),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
