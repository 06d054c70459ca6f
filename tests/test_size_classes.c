/*
 * test_size_classes.c — size classes (I13, docs/ALGORITHM.md "Small blocks in pages of their
 * own"): requests under opt.small_bytes live in small chunks, the others in large ones, so no page
 * holds both and a small survivor never pins a large block's page; the class in the tree key keeps
 * best fit one lookup; free memory of the other class serves when the cap refuses new pages (and
 * nothing changes when nothing fits); a failed reservation of the small chunk leaves the pool as it
 * was; the statistics, the dump and the trim see both classes; `small_bytes = 1` is the one-class
 * pool of before. Host backend, invariants checked after every operation (tmalloc / tfree).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_rng.h"
#include "test_util.h"

/* The chunk a live block lies in. */
static const vpmm_chunk_t *chunk_of(vpmm_pool_t *p, void *ptr)
{
    const vpmm_region_t *r = vpmm_i_region_find(p, (uintptr_t)ptr);
    assert_non_null(r);
    return r->chunk;
}

/* Seeded random sizes on two streams, frees in random order: every block lies in the chunk of
 * its class, and no page holds blocks of both classes. */
static void test_classes_never_share_a_page(void **state)
{
    enum { N = 400 };
    tpool_t t;
    trng_t rng = { 13 };
    vpmm_stream_t s[2];
    void *p[N] = { 0 };
    size_t sz[N] = { 0 };
    (void)state;
    tpool_open(&t, NULL);
    s[0] = vpmm_host_stream_create(t.host);
    s[1] = vpmm_host_stream_create(t.host);
    for (int round = 0; round < 6; round++) {
        for (int i = 0; i < N; i++) {
            if (p[i] != NULL && trng_below(&rng, 3) == 0) {
                tfree(t.pool, p[i]);
                p[i] = NULL;
            } else if (p[i] == NULL) {
                /* Half small (1 B to 256 KiB), half large (256 KiB to 9 MiB). */
                sz[i] = trng_below(&rng, 2) ? 1 + trng_below(&rng, 256 * KiB - 1)
                                            : 256 * KiB + trng_below(&rng, 9 * MiB);
                p[i] = tmalloc(t.pool, sz[i], s[trng_below(&rng, 2)]);
            }
        }
        for (int i = 0; i < N; i++) {
            if (p[i] == NULL)
                continue;
            size_t rsize = vpmm_align_up(sz[i], VPMM_ALIGNMENT);
            assert_int_equal(chunk_of(t.pool, p[i])->small, rsize < 256 * KiB);
            for (int j = 0; j < N; j++) {
                if (p[j] == NULL || chunk_of(t.pool, p[j])->small == chunk_of(t.pool, p[i])->small)
                    continue;
                /* Blocks of different classes: their page ranges are disjoint. */
                uintptr_t a0 = (uintptr_t)p[i] / (2 * MiB),
                          a1 = ((uintptr_t)p[i] + sz[i] - 1) / (2 * MiB);
                uintptr_t b0 = (uintptr_t)p[j] / (2 * MiB),
                          b1 = ((uintptr_t)p[j] + sz[j] - 1) / (2 * MiB);
                assert_true(a1 < b0 || b1 < a0);
            }
        }
    }
    assert_int_equal(tstats(t.pool).class_fallbacks, 0);
    for (int i = 0; i < N; i++)
        if (p[i] != NULL)
            tfree(t.pool, p[i]);
    tpool_close(&t);
}

/* Large blocks with small survivors between them (synthetic_scattered's pattern), then a request
 * larger than any freed block: with size classes the freed pages move whole and nothing is
 * created; with one class the survivors pin their pages and the request needs new ones. */
static size_t created_for_the_bigger_request(size_t small_bytes)
{
    tpool_t t;
    void *big[8], *small[8], *x;
    size_t before, created;
    tpool_open(&t, &(tpool_params_t){ .small_bytes = small_bytes, .cache_percent = -1 });
    for (int i = 0; i < 8; i++) {
        big[i] = tmalloc(t.pool, 3 * MiB, NULL);
        small[i] = tmalloc(t.pool, 4 * KiB, NULL);
    }
    for (int i = 0; i < 8; i++)
        tfree(t.pool, big[i]);
    before = tstats(t.pool).pages_created;
    x = tmalloc(t.pool, 24 * MiB, NULL);
    created = tstats(t.pool).pages_created - before;
    tfree(t.pool, x);
    for (int i = 0; i < 8; i++)
        tfree(t.pool, small[i]);
    tpool_close(&t);
    return created;
}

static void test_small_survivors_pin_no_large_page(void **state)
{
    (void)state;
    assert_int_equal(created_for_the_bigger_request(0), 0);
    assert_true(created_for_the_bigger_request(1) > 0);
}

/* Under the cap, memory of the other class serves rather than an out-of-memory: a small block in
 * a large chunk's free tail, then a large block in a small chunk's free page. When nothing fits,
 * OUT_OF_MEMORY and the pool as it was. */
static void test_other_class_serves_under_the_cap(void **state)
{
    tpool_t t;
    void *large, *small, *large2, *p = NULL;
    tsnap_t before, after;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .max_bytes = 4 * MiB });
    large = tmalloc(t.pool, 3 * MiB, NULL); /* two pages of the large chunk, 1 MiB free */
    small = tmalloc(t.pool, 4 * KiB, NULL); /* a small page would pass the cap */
    assert_false(chunk_of(t.pool, small)->small);
    assert_int_equal(tstats(t.pool).class_fallbacks, 1);
    assert_int_equal(tstats(t.pool).mapped_bytes, 4 * MiB);
    tfree(t.pool, small);
    tfree(t.pool, large);
    tpool_close(&t);

    tpool_open(&t, &(tpool_params_t){ .max_bytes = 2 * MiB });
    small = tmalloc(t.pool, 4 * KiB, NULL); /* the one page the cap allows, in a small chunk */
    assert_true(chunk_of(t.pool, small)->small);
    large2 = tmalloc(t.pool, 1 * MiB, NULL); /* large, but only the small page has room */
    assert_true(chunk_of(t.pool, large2)->small);
    assert_int_equal(tstats(t.pool).class_fallbacks, 1);
    before = tsnap(t.pool);
    assert_int_equal(vpmm_malloc(t.pool, 1536 * KiB, NULL, &p), VPMM_ERROR_OUT_OF_MEMORY);
    assert_null(p);
    after = tsnap(t.pool);
    after.stats.ooms--;
    assert_snap_equal(&before, &after);
    tfree(t.pool, large2);
    tfree(t.pool, small);
    tpool_close(&t);
}

/* Under the cap, the other class's free memory still pending on another stream serves through a
 * GPU-side wait on that stream's marker; when the wait is refused, OUT_OF_MEMORY and the pool as
 * it was, then the same malloc succeeds. */
static void test_other_class_with_a_wait(void **state)
{
    tpool_t t;
    vpmm_stream_t a, b;
    void *large, *small = NULL;
    tsnap_t before, after;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .max_bytes = 4 * MiB });
    a = vpmm_host_stream_create(t.host);
    b = vpmm_host_stream_create(t.host);
    large = tmalloc(t.pool, 3 * MiB, b); /* its span's free 1 MiB tail is pending on b */
    vpmm_host_enqueue(t.host, b);        /* b's work is not done: no marker of b completes */
    before = tsnap(t.pool);
    vpmm_fault_fail_nth(t.fault, VPMM_DRV_STREAM_WAIT_EVENT, 1, VPMM_DRV_ERROR);
    assert_int_equal(vpmm_malloc(t.pool, 4 * KiB, a, &small), VPMM_ERROR_OUT_OF_MEMORY);
    assert_null(small);
    CHECK_POOL(t.pool);
    after = tsnap(t.pool);
    after.stats.ooms--;
    after.stats.streams--; /* the malloc made stream a known to the pool: no memory changed */
    assert_snap_equal(&before, &after);
    assert_int_equal(vpmm_host_wait_count(t.host), 0);
    small = tmalloc(t.pool, 4 * KiB, a);
    assert_false(chunk_of(t.pool, small)->small);
    assert_int_equal(tstats(t.pool).class_fallbacks, 1);
    assert_int_equal(tstats(t.pool).cross_stream_waits, 1);
    assert_int_equal(vpmm_host_wait_count(t.host), 1); /* a waits for b on the GPU */
    vpmm_host_complete_all(t.host);
    tfree(t.pool, small);
    tfree(t.pool, large);
    tpool_close(&t);
}

/* The small class's first block reserves its chunk: when the driver refuses the reservation the
 * malloc fails and nothing changed; the next one reserves it. */
static void test_small_chunk_reserve_failure_is_clean(void **state)
{
    tpool_t t;
    void *a, *p = NULL;
    tsnap_t before, after;
    (void)state;
    tpool_open(&t, NULL);
    a = tmalloc(t.pool, 4 * MiB, NULL);
    before = tsnap(t.pool);
    vpmm_fault_fail_nth(t.fault, VPMM_DRV_VA_RESERVE, 1, VPMM_DRV_OUT_OF_MEMORY);
    assert_int_equal(vpmm_malloc(t.pool, 1000, NULL, &p), VPMM_ERROR_OUT_OF_MEMORY);
    after = tsnap(t.pool);
    after.stats.ooms--;
    assert_snap_equal(&before, &after);
    assert_driver_matches_pool(&t);
    p = tmalloc(t.pool, 1000, NULL);
    assert_true(chunk_of(t.pool, p)->small);
    assert_int_equal(tstats(t.pool).va_chunks, 2);
    tfree(t.pool, p);
    tfree(t.pool, a);
    tpool_close(&t);
}

/* largest_free_bytes looks at both classes: the small keys sort last, the largest free region
 * here is the large class's. */
static void test_largest_free_sees_both_classes(void **state)
{
    tpool_t t;
    void *big, *keep, *small;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .cache_percent = -1 });
    big = tmalloc(t.pool, 6 * MiB, NULL);
    keep = tmalloc(t.pool, 2 * MiB, NULL); /* the large chunk's 6 MiB stay one region */
    small = tmalloc(t.pool, 4 * KiB, NULL);
    tfree(t.pool, big);
    assert_int_equal(tstats(t.pool).largest_free_bytes, 6 * MiB);
    tfree(t.pool, small); /* its page is now one free region of 2 MiB in the small class */
    assert_int_equal(tstats(t.pool).largest_free_bytes, 6 * MiB);
    tfree(t.pool, keep);
    tpool_close(&t);
}

/* vpmm_trim gives every free page back and keeps one empty chunk per class in use before. */
static void test_trim_keeps_a_chunk_per_class(void **state)
{
    tpool_t t;
    void *a, *b;
    size_t released = 0;
    (void)state;
    tpool_open(&t, NULL);
    a = tmalloc(t.pool, 3 * MiB, NULL);
    b = tmalloc(t.pool, 100, NULL);
    tfree(t.pool, a);
    tfree(t.pool, b);
    assert_int_equal(vpmm_trim(t.pool, 0, &released), VPMM_SUCCESS);
    assert_int_equal(released, 6 * MiB);
    assert_int_equal(tstats(t.pool).mapped_bytes, 0);
    assert_int_equal(tstats(t.pool).va_chunks, 2);
    CHECK_POOL(t.pool);
    tpool_close(&t);
}

/* The dump names the classes: the threshold in its header, "small" for the small chunk's rows. */
static void test_dump_names_the_classes(void **state)
{
    tpool_t t;
    void *a, *big;
    char *text = NULL;
    size_t len = 0;
    FILE *f;
    (void)state;
    tpool_open(&t, NULL);
    a = tmalloc(t.pool, 1000, NULL);
    big = tmalloc(t.pool, 3 * MiB, NULL);
    f = open_memstream(&text, &len);
    assert_non_null(f);
    assert_int_equal(vpmm_pool_dump(t.pool, f), VPMM_SUCCESS);
    fclose(f);
    assert_non_null(strstr(text,
                           "2 VA chunk(s) of 32 GiB; blocks under 256 KiB in \"small\" chunks "
                           "of their own\n"));
    assert_non_null(strstr(text, " small  0x"));
    assert_non_null(strstr(text, " shared 0x"));
    assert_non_null(strstr(text, "(asked 1000)"));
    free(text);
    tfree(t.pool, a);
    tfree(t.pool, big);
    tpool_close(&t);
}

/* small_bytes = 1: one class, the layout of before: a small block and a large block's tail share
 * a page, and one chunk serves both. */
static void test_one_class_when_off(void **state)
{
    tpool_t t;
    void *a, *big;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .small_bytes = 1 });
    a = tmalloc(t.pool, 1000, NULL);
    big = tmalloc(t.pool, 3 * MiB, NULL);
    assert_int_equal(tstats(t.pool).mapped_bytes, 4 * MiB);
    assert_int_equal(tstats(t.pool).va_chunks, 1);
    assert_int_equal(tstats(t.pool).small_bytes, 1);
    assert_int_equal((uintptr_t)big / (2 * MiB), (uintptr_t)a / (2 * MiB));
    tfree(t.pool, a);
    tfree(t.pool, big);
    tpool_close(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_classes_never_share_a_page),
        cmocka_unit_test(test_small_survivors_pin_no_large_page),
        cmocka_unit_test(test_other_class_serves_under_the_cap),
        cmocka_unit_test(test_other_class_with_a_wait),
        cmocka_unit_test(test_small_chunk_reserve_failure_is_clean),
        cmocka_unit_test(test_largest_free_sees_both_classes),
        cmocka_unit_test(test_trim_keeps_a_chunk_per_class),
        cmocka_unit_test(test_dump_names_the_classes),
        cmocka_unit_test(test_one_class_when_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
