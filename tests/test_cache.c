/*
 * test_cache.c — cache.c: a freed block goes to its stream's exact-size cache and comes back to
 * the next malloc of that size on that stream; other streams never see it; the cap on cached
 * bytes, every slow path and a miss on a stream whose cache holds 1% of the mapped bytes flush it
 * back into coalesced free memory; a retired stream keeps no cache; VPMM_CACHE_PERCENT=0 turns it
 * off. Invariants are checked after every operation.
 */
#include "test_util.h"

static vpmm_stream_rec_t *strm(tpool_t *t, vpmm_stream_t s)
{
    vpmm_stream_rec_t *r;
    vpmm_i_lock(t->pool);
    r = vpmm_i_stream_get(t->pool, vpmm_i_stream_key(t->pool, s));
    vpmm_i_unlock(t->pool);
    return r;
}

static void test_exact_reuse(void **state)
{
    tpool_t t;
    tpool_params_t prm = { .cache_percent = 100 };
    void *a, *b, *c;
    (void)state;
    tpool_open(&t, &prm);
    a = tmalloc(t.pool, 3000, NULL);
    b = tmalloc(t.pool, 3000, NULL);
    tfree(t.pool, a);
    assert_int_equal(t.pool->cached_bytes, 3072);
    assert_int_equal(strm(&t, NULL)->cached_bytes, 3072);
    /* The same rounded size comes back from the cache: the block just freed. */
    c = tmalloc(t.pool, 2900, NULL);
    assert_ptr_equal(c, a);
    assert_int_equal(t.pool->cached_bytes, 0);
    /* LIFO within a size. */
    tfree(t.pool, b);
    tfree(t.pool, c);
    assert_ptr_equal(tmalloc(t.pool, 3072, NULL), c);
    assert_ptr_equal(tmalloc(t.pool, 3072, NULL), b);
    tfree(t.pool, b);
    tfree(t.pool, c);
    tpool_close(&t);
}

/* With room of its own, s2 is served without touching s1's cache (no slow path, no wait). */
static void test_other_stream_never_takes_it(void **state)
{
    tpool_t t;
    tpool_params_t prm = { .cache_percent = 100, .prealloc = 2 };
    vpmm_stream_t s1, s2;
    void *a, *b;
    (void)state;
    tpool_open(&t, &prm);
    s1 = vpmm_host_stream_create(t.host);
    s2 = vpmm_host_stream_create(t.host);
    a = tmalloc(t.pool, MiB, s1);
    vpmm_host_enqueue(t.host, s1); /* a kernel on s1 may still use a */
    tfree(t.pool, a);
    b = tmalloc(t.pool, MiB, s2);
    assert_ptr_not_equal(b, a);
    assert_int_equal(strm(&t, s1)->cached_bytes, MiB);
    assert_int_equal(vpmm_host_wait_count(t.host), 0);
    tfree(t.pool, b);
    vpmm_host_complete_all(t.host);
    tpool_close(&t);
}

/* Cached blocks are coalesced before any slow-path decision: four cached 1 MiB neighbours serve a
 * 4 MiB request without growing. */
static void test_slow_path_flushes(void **state)
{
    tpool_t t;
    tpool_params_t prm = { .cache_percent = 100 };
    void *p[4], *big;
    uint64_t created;
    (void)state;
    tpool_open(&t, &prm);
    for (int i = 0; i < 4; i++)
        p[i] = tmalloc(t.pool, MiB, NULL);
    created = tstats(t.pool).pages_created;
    for (int i = 0; i < 4; i++)
        tfree(t.pool, p[i]);
    assert_int_equal(t.pool->cached_bytes, 4 * MiB);
    big = tmalloc(t.pool, 4 * MiB, NULL);
    assert_ptr_equal(big, p[0]);
    assert_int_equal(tstats(t.pool).pages_created, created);
    assert_int_equal(t.pool->cached_bytes, 0);
    tfree(t.pool, big);
    tpool_close(&t);
}

static void test_cap_flushes(void **state)
{
    tpool_t t;
    tpool_params_t prm = { .cache_percent = 10 };
    void *p[64];
    (void)state;
    tpool_open(&t, &prm);
    for (int i = 0; i < 64; i++)
        p[i] = tmalloc(t.pool, 256 * KiB, NULL); /* 16 MiB mapped: the cap is 1.6 MiB */
    for (int i = 0; i < 64; i += 2) {
        tfree(t.pool, p[i]);
        assert_true(t.pool->cached_bytes <= t.pool->cache_limit);
    }
    for (int i = 1; i < 64; i += 2)
        tfree(t.pool, p[i]);
    assert_true(t.pool->cached_bytes <= t.pool->cache_limit);
    tpool_close(&t);
}

/* A miss (a size the stream's cache lacks) flushes that stream's cache once it holds 1% of the
 * mapped bytes: the old sizes coalesce and serve the new one in their place. Below 1%, and on
 * other streams, the cache stays. */
static void test_miss_flushes_a_stale_cache(void **state)
{
    tpool_t t;
    tpool_params_t prm = { .cache_percent = 100 };
    vpmm_stream_t s2 = (vpmm_stream_t)(uintptr_t)0x5200;
    void *big, *a, *b, *c, *d, *other, *m, *n;
    (void)state;
    tpool_open(&t, &prm);
    big = tmalloc(t.pool, 64 * MiB, NULL); /* mapped >= 64 MiB: the stale mark is >= 640 KiB */
    a = tmalloc(t.pool, 256 * KiB, NULL);
    b = tmalloc(t.pool, 256 * KiB, NULL);
    c = tmalloc(t.pool, 256 * KiB, NULL);
    d = tmalloc(t.pool, 256 * KiB, NULL);
    other = tmalloc(t.pool, 256 * KiB, s2);
    assert_true(t.pool->cache_stale >= 640 * KiB && t.pool->cache_stale < 768 * KiB);
    tfree(t.pool, other); /* cached on s2 */
    tfree(t.pool, a);
    /* 256 KiB cached, under the mark: a miss leaves it. */
    m = tmalloc(t.pool, 512 * KiB, NULL);
    assert_int_equal(strm(&t, NULL)->cached_bytes, 256 * KiB);
    tfree(t.pool, b);
    tfree(t.pool, c);
    assert_int_equal(strm(&t, NULL)->cached_bytes, 768 * KiB);
    /* 768 KiB cached: the next miss flushes it, and a, b, c, coalesced, serve the new size. */
    n = tmalloc(t.pool, 384 * KiB, NULL);
    assert_int_equal(strm(&t, NULL)->cached_bytes, 0);
    assert_ptr_equal(n, a);
    assert_int_equal(strm(&t, s2)->cached_bytes, 256 * KiB); /* another stream's: kept */
    /* A hit never flushes. */
    tfree(t.pool, d);
    tfree(t.pool, n);
    assert_ptr_equal(tmalloc(t.pool, 256 * KiB, NULL), d);
    tfree(t.pool, d);
    tfree(t.pool, m);
    tfree(t.pool, big);
    tpool_close(&t);
}

static void test_disabled(void **state)
{
    tpool_t t;
    tpool_params_t prm = { .cache_percent = -1 };
    void *a;
    (void)state;
    tpool_open(&t, &prm);
    a = tmalloc(t.pool, 5000, NULL);
    tfree(t.pool, a);
    assert_int_equal(t.pool->cached_bytes, 0);
    assert_int_equal(t.pool->cache_limit, 0);
    tpool_close(&t);
}

static void test_retire_flushes(void **state)
{
    tpool_t t;
    tpool_params_t prm = { .cache_percent = 100 };
    vpmm_stream_t s;
    void *a, *keep;
    (void)state;
    tpool_open(&t, &prm);
    s = vpmm_host_stream_create(t.host);
    a = tmalloc(t.pool, 5000, s);
    keep = tmalloc(t.pool, 5000, s);
    tfree(t.pool, a);
    assert_int_equal(t.pool->cached_bytes, 5120);
    assert_int_equal(vpmm_stream_release(t.pool, s), VPMM_SUCCESS);
    CHECK_POOL(t.pool);
    assert_int_equal(t.pool->cached_bytes, 0);
    /* Frees on a retired stream take the ordinary path. */
    tfree(t.pool, keep);
    assert_int_equal(t.pool->cached_bytes, 0);
    tpool_close(&t);
}

/* Pending-marker bookkeeping survives the trip through the cache (I8 after a flush). */
static void test_markers_through_the_cache(void **state)
{
    tpool_t t;
    tpool_params_t prm = { .cache_percent = 100 };
    vpmm_stream_t s1, s2;
    void *a, *b;
    (void)state;
    tpool_open(&t, &prm);
    s1 = vpmm_host_stream_create(t.host);
    s2 = vpmm_host_stream_create(t.host);
    a = tmalloc(t.pool, 8 * MiB, s1);
    vpmm_host_enqueue(t.host, s1);
    tfree(t.pool, a); /* cached on s1, seq 0 */
    /* s2's slow path flushes s1's cache, marks s1, and takes a behind a GPU-side wait. */
    b = tmalloc(t.pool, 8 * MiB, s2);
    assert_ptr_equal(b, a);
    assert_int_equal(vpmm_host_wait_count(t.host), 1);
    tfree(t.pool, b);
    vpmm_host_complete_all(t.host);
    tpool_close(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_reuse),
        cmocka_unit_test(test_other_stream_never_takes_it),
        cmocka_unit_test(test_slow_path_flushes),
        cmocka_unit_test(test_cap_flushes),
        cmocka_unit_test(test_miss_flushes_a_stale_cache),
        cmocka_unit_test(test_disabled),
        cmocka_unit_test(test_retire_flushes),
        cmocka_unit_test(test_markers_through_the_cache),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
