/*
 * test_va.c — va.c: chunk reservation on demand, carving holes without leaking the rest, giving
 * back empty chunks (but never the last one).
 */
#include "test_util.h"

static void test_second_chunk_on_demand(void **state)
{
    tpool_t t;
    tpool_params_t prm = { .va_size = 16 * MiB };
    void *a, *b, *c;
    vpmm_stats_t s;
    (void)state;
    tpool_open(&t, &prm);
    a = tmalloc(t.pool, 10 * MiB, NULL);
    b = tmalloc(t.pool, 6 * MiB, NULL);
    s = tstats(t.pool);
    assert_int_equal(s.va_chunks, 1);
    assert_int_equal(s.hole_bytes, 0);
    c = tmalloc(t.pool, 4 * MiB, NULL);
    s = tstats(t.pool);
    assert_int_equal(s.va_chunks, 2);
    assert_int_equal(s.reserved_va_bytes, 32 * MiB);
    assert_int_equal(s.hole_bytes, 12 * MiB);
    /* The chunk list is in address order, whatever order the driver returned the VA in. */
    assert_true(t.pool->chunks->base < t.pool->chunks->next->base);
    assert_int_equal(t.pool->chunks->index + t.pool->chunks->next->index, 1);
    tfree(t.pool, a);
    tfree(t.pool, b);
    tfree(t.pool, c);
    tpool_close(&t);
}

static void test_hole_carve_keeps_rest(void **state)
{
    tpool_t t;
    vpmm_region_t *h, *mid;
    const size_t pg = 2 * MiB;
    uintptr_t base;
    (void)state;
    tpool_open(&t, NULL);
    h = t.pool->chunks->first;
    base = h->addr;
    assert_int_equal(vpmm_i_region_reserve(t.pool, 2), VPMM_SUCCESS);
    mid = vpmm_i_hole_carve(t.pool, h, base + 3 * pg, 2 * pg);
    assert_int_equal(mid->addr, base + 3 * pg);
    assert_int_equal(mid->size, 2 * pg);
    assert_int_equal(t.pool->shared.holes.count, 2); /* below and above stay holes */
    assert_int_equal(t.pool->c.hole_bytes, t.pool->chunks->size - 2 * pg);
    /* Put it back as a hole: the three merge and nothing was lost. */
    vpmm_i_index_add(t.pool, mid);
    vpmm_i_region_coalesce(t.pool, mid);
    assert_int_equal(t.pool->shared.holes.count, 1);
    assert_int_equal(t.pool->c.hole_bytes, t.pool->chunks->size);
    CHECK_POOL(t.pool);
    tpool_close(&t);
}

static void test_empty_chunks_trimmed_but_not_last(void **state)
{
    tpool_t t;
    tpool_params_t prm = { .va_size = 16 * MiB, .memory_limit = 64 * MiB };
    vpmm_chunk_t *second;
    void *a, *b;
    (void)state;
    tpool_open(&t, &prm);
    a = tmalloc(t.pool, 16 * MiB, NULL);
    b = tmalloc(t.pool, 16 * MiB, NULL);
    assert_int_equal(tstats(t.pool).va_chunks, 2);
    tfree(t.pool, a);
    tfree(t.pool, b);
    /* Free memory stays mapped (no trim in this issue): chunks are not empty yet. */
    vpmm_i_lock(t.pool);
    vpmm_i_chunk_trim(t.pool);
    vpmm_i_unlock(t.pool);
    assert_int_equal(tstats(t.pool).va_chunks, 2);
    /* An empty chunk beyond the first is given back. */
    vpmm_i_lock(t.pool);
    assert_int_equal(vpmm_i_chunk_add(t.pool, &t.pool->shared, 0, 0, &second), VPMM_SUCCESS);
    assert_int_equal(t.pool->chunk_count, 3);
    vpmm_i_chunk_trim(t.pool);
    assert_int_equal(t.pool->chunk_count, 2);
    vpmm_i_unlock(t.pool);
    CHECK_POOL(t.pool);
    assert_driver_matches_pool(&t);
    tpool_close(&t);
}

static void test_reserve_failure_is_clean(void **state)
{
    tpool_t t;
    tpool_params_t prm = { .va_size = 16 * MiB };
    void *a, *p = NULL;
    tsnap_t before, after;
    (void)state;
    tpool_open(&t, &prm);
    a = tmalloc(t.pool, 16 * MiB, NULL);
    before = tsnap(t.pool);
    vpmm_fault_fail_nth(t.fault, VPMM_DRV_VA_RESERVE, 1, VPMM_DRV_OUT_OF_MEMORY);
    assert_int_equal(vpmm_malloc(t.pool, 2 * MiB, NULL, &p), VPMM_ERROR_OUT_OF_MEMORY);
    after = tsnap(t.pool);
    after.stats.ooms--;
    assert_snap_equal(&before, &after);
    assert_driver_matches_pool(&t);
    p = tmalloc(t.pool, 2 * MiB, NULL);
    tfree(t.pool, p);
    tfree(t.pool, a);
    tpool_close(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_second_chunk_on_demand),
        cmocka_unit_test(test_hole_carve_keeps_rest),
        cmocka_unit_test(test_empty_chunks_trimmed_but_not_last),
        cmocka_unit_test(test_reserve_failure_is_clean),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
