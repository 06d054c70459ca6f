/*
 * test_region.c — region.c: node reservation, split/absorb, per-state indexing and byte
 * accounting, the coalescing rules (I6), and region lookup.
 */
#include "test_util.h"

static void test_reserve_and_take(void **state)
{
    tpool_t t;
    size_t before;
    vpmm_region_t *r[600];
    (void)state;
    tpool_open(&t, NULL);
    assert_int_equal(vpmm_i_region_reserve(t.pool, 600), VPMM_SUCCESS);
    before = t.pool->spare_count;
    assert_true(before >= 600);
    for (int i = 0; i < 600; i++)
        r[i] = vpmm_i_region_take(t.pool);
    assert_int_equal(t.pool->spare_count, before - 600);
    for (int i = 0; i < 600; i++)
        vpmm_i_region_give(t.pool, r[i]);
    assert_int_equal(t.pool->spare_count, before);
    tpool_close(&t);
}

/* Split a hole, reindex the pieces, merge them back: counters and tiling stay exact. */
static void test_split_and_absorb(void **state)
{
    tpool_t t;
    vpmm_region_t *h, *mid, *hi;
    const size_t pg = 2 * MiB;
    (void)state;
    tpool_open(&t, NULL);
    h = t.pool->chunks->first;
    assert_int_equal(vpmm_i_region_reserve(t.pool, 2), VPMM_SUCCESS);
    vpmm_i_index_del(t.pool, h);
    mid = vpmm_i_region_split(t.pool, h, h->addr + 4 * pg);
    hi = vpmm_i_region_split(t.pool, mid, mid->addr + 2 * pg);
    assert_int_equal(h->size, 4 * pg);
    assert_int_equal(mid->size, 2 * pg);
    assert_ptr_equal(h->next, mid);
    assert_ptr_equal(mid->prev, h);
    assert_ptr_equal(mid->next, hi);
    assert_int_equal(hi->addr + hi->size, t.pool->chunks->base + t.pool->chunks->size);
    vpmm_i_index_add(t.pool, h);
    vpmm_i_index_add(t.pool, mid);
    vpmm_i_index_add(t.pool, hi);
    /* Three adjacent holes break I6, and the checker must say so. */
    assert_int_equal(vpmm_pool_check(t.pool, NULL), 2);
    assert_int_equal(t.pool->shared.holes.count, 3);
    assert_int_equal(t.pool->c.hole_bytes, t.pool->chunks->size);
    /* Coalescing restores one hole. */
    assert_ptr_equal(vpmm_i_region_coalesce(t.pool, mid), h);
    assert_int_equal(t.pool->shared.holes.count, 1);
    assert_int_equal(h->size, t.pool->chunks->size);
    CHECK_POOL(t.pool);
    tpool_close(&t);
}

typedef struct count_free {
    size_t free_regions;
    size_t ready_regions;
} count_free_t;

static int count_free_cb(const vpmm_region_info_t *r, void *user)
{
    count_free_t *c = user;
    if (r->state == VPMM_REGION_FREE) {
        c->free_regions++;
        c->ready_regions += r->ready;
    }
    return 0;
}

static count_free_t frees_of(vpmm_pool_t *pool)
{
    count_free_t c = { 0, 0 };
    vpmm_pool_walk(pool, count_free_cb, &c);
    return c;
}

static void test_coalesce_same_stream(void **state)
{
    tpool_t t;
    void *a, *b, *c;
    (void)state;
    tpool_open(&t, NULL);
    a = tmalloc(t.pool, 1 * MiB, NULL);
    b = tmalloc(t.pool, 1 * MiB, NULL);
    c = tmalloc(t.pool, 1 * MiB, NULL);
    tfree(t.pool, a);
    tfree(t.pool, c); /* merges with the free tail of the page */
    assert_int_equal(frees_of(t.pool).free_regions, 2);
    tfree(t.pool, b); /* joins both neighbours */
    assert_int_equal(frees_of(t.pool).free_regions, 1);
    assert_int_equal(tstats(t.pool).free_bytes, 4 * MiB);
    tpool_close(&t);
}

static void test_no_coalesce_across_streams(void **state)
{
    tpool_t t;
    vpmm_stream_t s1, s2;
    void *a, *b;
    (void)state;
    tpool_open(&t, NULL);
    s1 = vpmm_host_stream_create(t.host);
    s2 = vpmm_host_stream_create(t.host);
    a = tmalloc(t.pool, 1 * MiB, s1);
    b = tmalloc(t.pool, 1 * MiB, s2);
    vpmm_host_enqueue(t.host, s1);
    vpmm_host_enqueue(t.host, s2);
    tfree(t.pool, a);
    tfree(t.pool, b);
    /* a (pending on s1) and b (pending on s2) must stay apart: either may still be in use. */
    assert_true(frees_of(t.pool).free_regions >= 2);
    assert_int_equal(frees_of(t.pool).ready_regions, 0);
    /* Once both streams are done and polled, everything is ready and merges into one. */
    vpmm_host_complete_all(t.host);
    vpmm_i_lock(t.pool);
    vpmm_i_stream_poll_all(t.pool, NULL);
    vpmm_i_unlock(t.pool);
    CHECK_POOL(t.pool);
    assert_int_equal(frees_of(t.pool).free_regions, 1);
    assert_int_equal(frees_of(t.pool).ready_regions, 1);
    tpool_close(&t);
}

static void test_ready_and_pending_stay_apart(void **state)
{
    tpool_t t;
    tpool_params_t prm = { .prealloc = 2 };
    vpmm_stream_t s;
    void *a;
    (void)state;
    tpool_open(&t, &prm);
    s = vpmm_host_stream_create(t.host);
    assert_int_equal(frees_of(t.pool).ready_regions, 1); /* preallocated memory is ready */
    a = tmalloc(t.pool, 1 * MiB, s);
    vpmm_host_enqueue(t.host, s);
    tfree(t.pool, a);
    /* [a: pending on s][rest: ready] — merging would hide ready memory behind s's work. */
    assert_int_equal(frees_of(t.pool).free_regions, 2);
    assert_int_equal(frees_of(t.pool).ready_regions, 1);
    vpmm_host_complete(t.host, s);
    tpool_close(&t);
}

static void test_region_find(void **state)
{
    tpool_t t;
    void *a;
    vpmm_region_t *r;
    (void)state;
    tpool_open(&t, NULL);
    a = tmalloc(t.pool, 3000, NULL);
    r = vpmm_i_region_find(t.pool, (uintptr_t)a + 100);
    assert_non_null(r);
    assert_int_equal(r->addr, (uintptr_t)a);
    assert_int_equal(r->state, VPMM_REGION_ALLOCATED);
    r = vpmm_i_region_find(t.pool, (uintptr_t)a + 5000);
    assert_non_null(r);
    assert_int_equal(r->state, VPMM_REGION_FREE);
    assert_null(vpmm_i_region_find(t.pool, (uintptr_t)&t));
    tfree(t.pool, a);
    tpool_close(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reserve_and_take),
        cmocka_unit_test(test_split_and_absorb),
        cmocka_unit_test(test_coalesce_same_stream),
        cmocka_unit_test(test_no_coalesce_across_streams),
        cmocka_unit_test(test_ready_and_pending_stay_apart),
        cmocka_unit_test(test_region_find),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
