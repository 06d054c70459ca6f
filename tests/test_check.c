/*
 * test_check.c — check.c: the validator reports zero on healthy pools and catches each kind of
 * corruption it is meant to catch. Each test breaks one invariant by hand, asserts the count
 * and the message, and repairs it so the pool can be destroyed cleanly.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

typedef struct fixture {
    tpool_t t;
    void *a, *b, *c;
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof *f);
    tpool_params_t prm = { .prealloc = 2 };
    tpool_open(&f->t, &prm);
    f->a = tmalloc(f->t.pool, 1000, NULL);
    f->b = tmalloc(f->t.pool, 3 * MiB, NULL);
    f->c = tmalloc(f->t.pool, 5000, NULL);
    tfree(f->t.pool, f->b);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    tfree(f->t.pool, f->a);
    tfree(f->t.pool, f->c);
    tpool_close(&f->t);
    free(f);
    return 0;
}

/* Runs the checker into a buffer; returns the count and whether `needle` was reported. */
static size_t check_says(vpmm_pool_t *pool, const char *needle)
{
    char *buf = NULL;
    size_t len = 0, n;
    FILE *out = open_memstream(&buf, &len);
    n = vpmm_pool_check(pool, out);
    fclose(out);
    if (n > 0 && strstr(buf, needle) == NULL)
        fail_msg("checker output lacks \"%s\":\n%s", needle, buf);
    free(buf);
    return n;
}

static vpmm_region_t *region_at(vpmm_pool_t *p, void *ptr)
{
    return vpmm_i_region_find(p, (uintptr_t)ptr);
}

static void test_healthy(void **state)
{
    fixture_t *f = *state;
    assert_int_equal(vpmm_pool_check(f->t.pool, NULL), 0);
    assert_int_equal(vpmm_pool_check(NULL, NULL), 1);
}

static void test_counter_drift(void **state)
{
    fixture_t *f = *state;
    f->t.pool->c.free_bytes += 256;
    assert_true(check_says(f->t.pool, "I5: free") >= 1);
    f->t.pool->c.free_bytes -= 256;
    f->t.pool->c.live_bytes += 1;
    assert_true(check_says(f->t.pool, "I5: allocated") >= 1);
    f->t.pool->c.live_bytes -= 1;
    assert_int_equal(vpmm_pool_check(f->t.pool, NULL), 0);
}

static void test_tiling_gap(void **state)
{
    fixture_t *f = *state;
    vpmm_region_t *r = region_at(f->t.pool, f->a);
    r->size -= 256;
    assert_true(check_says(f->t.pool, "I1:") >= 1);
    r->size += 256;
    assert_int_equal(vpmm_pool_check(f->t.pool, NULL), 0);
}

static void test_missing_allocation_entry(void **state)
{
    fixture_t *f = *state;
    vpmm_region_t *r = vpmm_hmap_remove(&f->t.pool->allocs, (uintptr_t)f->c);
    assert_non_null(r);
    assert_true(check_says(f->t.pool, "missing from the allocation table") >= 1);
    assert_int_equal(vpmm_hmap_put(&f->t.pool->allocs, (uintptr_t)f->c, r), 0);
    assert_int_equal(vpmm_pool_check(f->t.pool, NULL), 0);
}

static void test_unmapped_page_under_allocation(void **state)
{
    fixture_t *f = *state;
    uintptr_t page = vpmm_align_down((uintptr_t)f->a, 2 * MiB);
    vpmm_phys_t *ph = vpmm_hmap_remove(&f->t.pool->maps, page);
    assert_non_null(ph);
    assert_true(check_says(f->t.pool, "I3:") >= 1);
    assert_int_equal(vpmm_hmap_put(&f->t.pool->maps, page, ph), 0);
    assert_int_equal(vpmm_pool_check(f->t.pool, NULL), 0);
}

static void test_wrong_readiness(void **state)
{
    fixture_t *f = *state;
    vpmm_region_t *r = region_at(f->t.pool, f->b);
    assert_int_equal(r->state, VPMM_REGION_FREE);
    assert_false(r->ready);
    /* Claim it is ready without moving it to the ready tree. */
    r->ready = 1;
    assert_true(check_says(f->t.pool, "I7") >= 1);
    r->ready = 0;
    assert_int_equal(vpmm_pool_check(f->t.pool, NULL), 0);
}

static void test_marker_bounds(void **state)
{
    fixture_t *f = *state;
    vpmm_region_t *r = region_at(f->t.pool, f->b);
    uint64_t seq = r->seq;
    r->seq = r->stream->recorded + 5;
    assert_true(check_says(f->t.pool, "I8") >= 1);
    r->seq = seq;
    assert_int_equal(vpmm_pool_check(f->t.pool, NULL), 0);
}

static void test_broken_tree(void **state)
{
    fixture_t *f = *state;
    vpmm_rb_node_t *root = f->t.pool->shared.holes.root;
    assert_non_null(root);
    root->red = !root->red;
    assert_true(check_says(f->t.pool, "hole tree") >= 1);
    root->red = !root->red;
    assert_int_equal(vpmm_pool_check(f->t.pool, NULL), 0);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_healthy),
        T(test_counter_drift),
        T(test_tiling_gap),
        T(test_missing_allocation_entry),
        T(test_unmapped_page_under_allocation),
        T(test_wrong_readiness),
        T(test_marker_bounds),
        T(test_broken_tree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
