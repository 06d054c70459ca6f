/*
 * test_pages.c — pages.c: creating and mapping pages is all-or-nothing (a failure at any step
 * undoes the steps before it), and linking keeps the mapping table and mapped bytes exact.
 */
#include "test_util.h"

static void test_create_all_or_nothing(void **state)
{
    tpool_t t;
    vpmm_phys_t *pages[8];
    vpmm_fault_live_t live;
    (void)state;
    tpool_open(&t, NULL);
    vpmm_i_lock(t.pool);
    vpmm_fault_fail_nth(t.fault, VPMM_DRV_MEM_CREATE, 5, VPMM_DRV_OUT_OF_MEMORY);
    assert_int_equal(vpmm_i_pages_create(t.pool, 8, 1, pages), VPMM_ERROR_OUT_OF_MEMORY);
    vpmm_fault_live(t.fault, &live);
    assert_int_equal(live.handles, 0); /* the four created before the failure were released */
    assert_int_equal(vpmm_i_pages_create(t.pool, 8, 1, pages), VPMM_SUCCESS);
    vpmm_fault_live(t.fault, &live);
    assert_int_equal(live.handles, 8);
    vpmm_i_pages_destroy(t.pool, pages, 8);
    vpmm_fault_live(t.fault, &live);
    assert_int_equal(live.handles, 0);
    vpmm_i_unlock(t.pool);
    tpool_close(&t);
}

static void map_failure_undone(vpmm_drv_entry_t entry, uint64_t nth)
{
    tpool_t t;
    vpmm_phys_t *pages[4];
    vpmm_fault_live_t live;
    uintptr_t va;
    tpool_open(&t, NULL);
    va = t.pool->chunks->base;
    vpmm_i_lock(t.pool);
    assert_int_equal(vpmm_i_pages_create(t.pool, 4, 1, pages), VPMM_SUCCESS);
    vpmm_fault_fail_nth(t.fault, entry, nth, VPMM_DRV_ERROR);
    assert_int_equal(vpmm_i_pages_map(t.pool, va, pages, 4), VPMM_ERROR_DRIVER);
    vpmm_fault_live(t.fault, &live);
    assert_int_equal(live.mappings, 0);
    assert_int_equal(t.pool->drv_code, 999);
    assert_string_equal(t.pool->drv_call, vpmm_drv_entry_name(entry));
    /* And it works when the driver does. */
    assert_int_equal(vpmm_i_pages_map(t.pool, va, pages, 4), VPMM_SUCCESS);
    vpmm_fault_live(t.fault, &live);
    assert_int_equal(live.mappings, 4);
    vpmm_i_pages_unmap(t.pool, va, pages, 4);
    vpmm_i_pages_destroy(t.pool, pages, 4);
    vpmm_i_unlock(t.pool);
    tpool_close(&t);
}

static void test_map_failure_each_step(void **state)
{
    (void)state;
    for (uint64_t n = 1; n <= 4; n++)
        map_failure_undone(VPMM_DRV_MEM_MAP, n);
    map_failure_undone(VPMM_DRV_SET_ACCESS, 1);
}

static void test_link_accounts(void **state)
{
    tpool_t t;
    vpmm_phys_t *pages[3];
    vpmm_region_t *r;
    uintptr_t va;
    (void)state;
    tpool_open(&t, NULL);
    va = t.pool->chunks->base;
    vpmm_i_lock(t.pool);
    assert_int_equal(vpmm_hmap_reserve(&t.pool->maps, 3), 0);
    assert_int_equal(vpmm_i_region_reserve(t.pool, 2), VPMM_SUCCESS);
    assert_int_equal(vpmm_i_pages_create(t.pool, 3, 1, pages), VPMM_SUCCESS);
    assert_int_equal(vpmm_i_pages_map(t.pool, va, pages, 3), VPMM_SUCCESS);
    r = vpmm_i_hole_carve(t.pool, t.pool->chunks->first, va, 3 * 2 * MiB);
    for (int i = 0; i < 3; i++)
        vpmm_i_phys_link(t.pool, pages[i], va + (uintptr_t)i * 2 * MiB);
    vpmm_i_region_set_free(t.pool, r, NULL);
    vpmm_i_index_add(t.pool, r);
    vpmm_i_note_peaks(t.pool); /* callers own the peaks; the checker insists */
    assert_int_equal(t.pool->c.mapped_bytes, 6 * MiB);
    assert_ptr_equal(vpmm_i_phys_at(t.pool, va + 2 * MiB), pages[1]);
    vpmm_i_unlock(t.pool);
    CHECK_POOL(t.pool);
    assert_driver_matches_pool(&t);
    tpool_close(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_all_or_nothing),
        cmocka_unit_test(test_map_failure_each_step),
        cmocka_unit_test(test_link_accounts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
