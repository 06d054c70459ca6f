/*
 * test_hashmap.c — unit tests for src/ds/hashmap.c: put/get/remove/replace, keys aligned to 256 B
 * and 2 MiB (they must spread, not cluster), growth at exactly 3/4 load, backward-shift deletion
 * (including runs that wrap past the end of the table), iteration, reserve, out-of-memory through
 * the allocation hook, and a seeded random stress against a plain array. vpmm_hmap_validate()
 * runs after every mutation wherever the table is small; the 100k-key tests and the large phases
 * of the stress check at checkpoints instead, to stay fast under valgrind.
 *
 * Single-threaded. The allocation hook is process-wide; every test that sets it restores it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "hashmap.h"
#include "test_rng.h"

/* Counting calloc: fails once `alloc_budget` successful calls have been used (-1: never). */
static size_t alloc_calls;
static long alloc_budget = -1;

static void *counting_calloc(size_t nmemb, size_t size)
{
    alloc_calls++;
    if (alloc_budget == 0)
        return NULL;
    if (alloc_budget > 0)
        alloc_budget--;
    return calloc(nmemb, size);
}

static void hook_install(long budget)
{
    alloc_calls = 0;
    alloc_budget = budget;
    vpmm_hmap_set_alloc_hook(counting_calloc);
}

static int hook_reset(void **state)
{
    (void)state;
    alloc_budget = -1;
    vpmm_hmap_set_alloc_hook(NULL);
    return 0;
}

/* Values are addresses inside this array, so a wrong value is never NULL by accident. */
static char value_pool[1 << 16];

static void *val_of(size_t i)
{
    return &value_pool[i % sizeof(value_pool)];
}

/* Longest run of consecutive occupied slots, counting a run that wraps around the end. */
static size_t longest_run(const vpmm_hmap_t *m)
{
    size_t best = 0, run = 0;

    for (size_t i = 0; i < 2 * m->cap; i++) {
        run = m->keys[i % m->cap] != 0 ? run + 1 : 0;
        best = run > best ? run : best;
    }
    return best > m->cap ? m->cap : best;
}

static void test_basic(void **state)
{
    vpmm_hmap_t m;
    int a, b;

    (void)state;
    assert_int_equal(vpmm_hmap_init(&m, 0), 0);
    assert_int_equal(m.cap, 16);
    assert_int_equal(m.count, 0);
    assert_int_equal(vpmm_hmap_validate(&m), 0);
    assert_null(vpmm_hmap_get(&m, 0x1000));

    assert_int_equal(vpmm_hmap_put(&m, 0x1000, &a), 0);
    assert_int_equal(vpmm_hmap_validate(&m), 0);
    assert_ptr_equal(vpmm_hmap_get(&m, 0x1000), &a);
    assert_null(vpmm_hmap_get(&m, 0x2000));
    assert_int_equal(m.count, 1);

    /* Replace keeps the count. */
    assert_int_equal(vpmm_hmap_put(&m, 0x1000, &b), 0);
    assert_ptr_equal(vpmm_hmap_get(&m, 0x1000), &b);
    assert_int_equal(m.count, 1);
    assert_int_equal(vpmm_hmap_validate(&m), 0);

    /* A NULL value is stored like any other (get cannot tell it from absence; that is fine). */
    assert_int_equal(vpmm_hmap_put(&m, 0x3000, NULL), 0);
    assert_int_equal(m.count, 2);
    assert_null(vpmm_hmap_remove(&m, 0x3000));
    assert_int_equal(m.count, 1);

    assert_null(vpmm_hmap_remove(&m, 0x2000));
    assert_ptr_equal(vpmm_hmap_remove(&m, 0x1000), &b);
    assert_null(vpmm_hmap_get(&m, 0x1000));
    assert_null(vpmm_hmap_remove(&m, 0x1000));
    assert_int_equal(m.count, 0);
    assert_int_equal(vpmm_hmap_validate(&m), 0);

    /* Key 0 is never valid. */
    assert_int_equal(vpmm_hmap_put(&m, 0, &a), -1);
    assert_null(vpmm_hmap_get(&m, 0));
    assert_null(vpmm_hmap_remove(&m, 0));
    assert_int_equal(m.count, 0);

    /* Extreme keys are ordinary. */
    assert_int_equal(vpmm_hmap_put(&m, 1, &a), 0);
    assert_int_equal(vpmm_hmap_put(&m, UINT64_MAX, &b), 0);
    assert_ptr_equal(vpmm_hmap_get(&m, 1), &a);
    assert_ptr_equal(vpmm_hmap_get(&m, UINT64_MAX), &b);
    assert_int_equal(vpmm_hmap_validate(&m), 0);

    vpmm_hmap_fini(&m);
    assert_null(m.keys);
    assert_int_equal(m.cap, 0);
    vpmm_hmap_fini(&m); /* fini twice is harmless */
}

static void test_init_capacity(void **state)
{
    static const size_t ask[][2] = { { 0, 16 },  { 1, 16 },      { 16, 16 },
                                     { 17, 32 }, { 1000, 1024 }, { 1024, 1024 } };
    vpmm_hmap_t m;

    (void)state;
    for (size_t i = 0; i < sizeof(ask) / sizeof(ask[0]); i++) {
        assert_int_equal(vpmm_hmap_init(&m, ask[i][0]), 0);
        assert_int_equal(m.cap, ask[i][1]);
        assert_ptr_equal(m.vals, (void **)(m.keys + m.cap));
        assert_int_equal(vpmm_hmap_validate(&m), 0);
        vpmm_hmap_fini(&m);
    }
    /* Impossible sizes fail cleanly and leave a map that fini accepts. */
    assert_int_equal(vpmm_hmap_init(&m, SIZE_MAX), -1);
    assert_null(m.keys);
    assert_int_equal(m.cap, 0);
    vpmm_hmap_fini(&m);
    assert_int_equal(vpmm_hmap_init(&m, SIZE_MAX / 4), -1);
    vpmm_hmap_fini(&m);
}

/* n keys base + i * stride: all found, validate clean, runs short, then half removed. */
static void check_aligned(uint64_t base, uint64_t stride, size_t n)
{
    vpmm_hmap_t m;
    size_t run;

    assert_int_equal(vpmm_hmap_init(&m, 0), 0);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(vpmm_hmap_put(&m, base + i * stride, val_of(i)), 0);
    assert_int_equal(m.count, n);
    assert_int_equal(vpmm_hmap_validate(&m), 0);
    for (size_t i = 0; i < n; i++)
        assert_ptr_equal(vpmm_hmap_get(&m, base + i * stride), val_of(i));
    /* Misses next to the keys (same alignment, just outside the range) stay misses. */
    for (size_t i = 1; i <= 1000; i++)
        assert_null(vpmm_hmap_get(&m, base + (n - 1 + i) * stride));
    /* Taking the slot from the key's low bits would pile aligned keys onto 1/stride of the
     * slots in runs of ~100 or more; Fibonacci hashing spreads an arithmetic sequence almost
     * evenly (runs of 2-6 slots here). */
    run = longest_run(&m);
    assert_true(run < 32);
    for (size_t i = 0; i < n; i += 2)
        assert_ptr_equal(vpmm_hmap_remove(&m, base + i * stride), val_of(i));
    assert_int_equal(vpmm_hmap_validate(&m), 0);
    for (size_t i = 0; i < n; i++)
        assert_ptr_equal(vpmm_hmap_get(&m, base + i * stride), i % 2 ? val_of(i) : NULL);
    vpmm_hmap_fini(&m);
}

static void test_aligned_256(void **state)
{
    (void)state;
    check_aligned(0x7f3a00000000ull, 256, 100000);
}

static void test_aligned_2mib(void **state)
{
    (void)state;
    check_aligned(0x7f0000000000ull, 2ull << 20, 100000);
    check_aligned(0x200000000ull, 2ull << 20, 3000); /* a VA reservation of ~6 GiB */
}

/* Keys that differ only above bit 32 (distinct VA reservations) spread as well. */
static void test_high_bit_keys(void **state)
{
    (void)state;
    check_aligned(1ull << 32, 1ull << 32, 20000);
}

static void test_growth(void **state)
{
    vpmm_hmap_t m;
    size_t cap = 16;

    (void)state;
    hook_install(-1);
    assert_int_equal(vpmm_hmap_init(&m, 16), 0);
    assert_int_equal(alloc_calls, 1);
    for (size_t i = 1; i <= 10000; i++) {
        assert_int_equal(vpmm_hmap_put(&m, i << 12, val_of(i)), 0);
        /* The table doubles exactly when the new key would pass 3/4 of it. */
        if (i > cap - cap / 4)
            cap *= 2;
        assert_int_equal(m.cap, cap);
        assert_int_equal(m.count, i);
        assert_int_equal(vpmm_hmap_validate(&m), 0);
        if ((i & (i - 1)) == 0 || i == 10000)
            for (size_t j = 1; j <= i; j++)
                assert_ptr_equal(vpmm_hmap_get(&m, j << 12), val_of(j));
    }
    assert_int_equal(cap, 16384);
    /* One allocation per doubling, 16 -> 16384. */
    assert_int_equal(alloc_calls, 1 + 10);
    /* Replace and remove never allocate and never shrink. */
    for (size_t i = 1; i <= 10000; i++)
        assert_int_equal(vpmm_hmap_put(&m, i << 12, val_of(i + 1)), 0);
    for (size_t i = 1; i <= 10000; i++)
        assert_ptr_equal(vpmm_hmap_remove(&m, i << 12), val_of(i + 1));
    assert_int_equal(alloc_calls, 1 + 10);
    assert_int_equal(m.cap, 16384);
    assert_int_equal(m.count, 0);
    assert_int_equal(vpmm_hmap_validate(&m), 0);
    vpmm_hmap_fini(&m);
}

/* Remove in random order; after each removal the map is valid and everything left is found. */
static void test_remove_random_order(void **state)
{
    enum { N = 3000 };
    static size_t order[N];
    static char gone[N];
    vpmm_hmap_t m;

    (void)state;
    trng_t rng = { 7 };
    assert_int_equal(vpmm_hmap_init(&m, 0), 0);
    for (size_t i = 0; i < N; i++) {
        order[i] = i;
        gone[i] = 0;
        assert_int_equal(vpmm_hmap_put(&m, 0x10000 + (uint64_t)i * 256, val_of(i)), 0);
    }
    trng_shuffle(&rng, order, N);
    for (size_t r = 0; r < N; r++) {
        const size_t x = order[r];
        assert_ptr_equal(vpmm_hmap_remove(&m, 0x10000 + (uint64_t)x * 256), val_of(x));
        gone[x] = 1;
        assert_int_equal(vpmm_hmap_validate(&m), 0);
        assert_int_equal(m.count, N - r - 1);
        if (r % 16 == 0 || r > N - 64)
            for (size_t i = 0; i < N; i++)
                assert_ptr_equal(vpmm_hmap_get(&m, 0x10000 + (uint64_t)i * 256),
                                 gone[i] ? NULL : val_of(i));
    }
    vpmm_hmap_fini(&m);
}

/*
 * A 16-slot table filled to 12 holds runs that wrap from the last slot to the first, where
 * backward shift must move entries from slot 0 back to slot 15 and the distance arithmetic wraps.
 * Many random rounds; the test checks that wrapping runs really occurred.
 */
static void test_remove_wrapping_runs(void **state)
{
    vpmm_hmap_t m;
    size_t wrapped = 0;

    (void)state;
    trng_t rng = { 8 };
    assert_int_equal(vpmm_hmap_init(&m, 16), 0);
    for (size_t round = 0; round < 3000; round++) {
        uint64_t keys[12];
        size_t order[12];
        for (size_t i = 0; i < 12; i++) {
            do
                keys[i] = (trng_next(&rng) | 1) << trng_below(&rng, 24);
            while (vpmm_hmap_get(&m, keys[i]) != NULL);
            assert_int_equal(vpmm_hmap_put(&m, keys[i], val_of(i)), 0);
            order[i] = i;
        }
        assert_int_equal(m.cap, 16);
        assert_int_equal(vpmm_hmap_validate(&m), 0);
        wrapped += m.keys[0] != 0 && m.keys[15] != 0;
        trng_shuffle(&rng, order, 12);
        for (size_t r = 0; r < 12; r++) {
            assert_ptr_equal(vpmm_hmap_remove(&m, keys[order[r]]), val_of(order[r]));
            assert_int_equal(vpmm_hmap_validate(&m), 0);
            for (size_t q = r + 1; q < 12; q++)
                assert_ptr_equal(vpmm_hmap_get(&m, keys[order[q]]), val_of(order[q]));
        }
        assert_int_equal(m.count, 0);
    }
    assert_true(wrapped > 1000);
    vpmm_hmap_fini(&m);
}

static void test_iteration(void **state)
{
    enum { N = 5000 };
    static unsigned char seen[N];
    vpmm_hmap_t m;
    size_t pos, visits = 0, last = 0;
    uint64_t key;
    void *val;

    (void)state;
    assert_int_equal(vpmm_hmap_init(&m, 0), 0);
    assert_int_equal(vpmm_hmap_next(&m, 0, &key, &val), m.cap);
    for (size_t i = 0; i < N; i++)
        assert_int_equal(vpmm_hmap_put(&m, (uint64_t)(i + 1) << 21, val_of(i)), 0);
    /* Punch holes so the walk crosses emptied slots too. */
    for (size_t i = 0; i < N; i += 3)
        assert_ptr_equal(vpmm_hmap_remove(&m, (uint64_t)(i + 1) << 21), val_of(i));
    memset(seen, 0, sizeof(seen));
    for (pos = vpmm_hmap_next(&m, 0, &key, &val); pos < m.cap;
         pos = vpmm_hmap_next(&m, pos + 1, &key, &val)) {
        const size_t i = (size_t)(key >> 21) - 1;
        assert_true(visits == 0 || pos > last);
        assert_int_equal(m.keys[pos], key);
        assert_true(i < N && i % 3 != 0);
        assert_ptr_equal(val, val_of(i));
        assert_int_equal(seen[i], 0);
        seen[i] = 1;
        last = pos;
        visits++;
    }
    assert_int_equal(pos, m.cap);
    assert_int_equal(visits, m.count);
    for (size_t i = 0; i < N; i++)
        assert_int_equal(seen[i], i % 3 != 0);
    /* NULL out-parameters are allowed; a start past the end finds nothing. */
    assert_true(vpmm_hmap_next(&m, 0, NULL, NULL) < m.cap);
    assert_int_equal(vpmm_hmap_next(&m, m.cap, &key, &val), m.cap);
    vpmm_hmap_fini(&m);
}

/* clear forgets every entry, keeps the table, and the map works as new afterwards. */
static void test_clear(void **state)
{
    vpmm_hmap_t m;
    size_t cap;
    (void)state;
    assert_int_equal(vpmm_hmap_init(&m, 16), 0);
    for (uint64_t k = 1; k <= 100; k++)
        assert_int_equal(vpmm_hmap_put(&m, k << 21, (void *)(uintptr_t)k), 0);
    cap = m.cap;
    vpmm_hmap_clear(&m);
    assert_int_equal(m.count, 0);
    assert_int_equal(m.cap, cap);
    assert_int_equal(vpmm_hmap_validate(&m), 0);
    for (uint64_t k = 1; k <= 100; k++)
        assert_null(vpmm_hmap_get(&m, k << 21));
    assert_int_equal(vpmm_hmap_next(&m, 0, NULL, NULL), m.cap);
    assert_int_equal(vpmm_hmap_put(&m, 5 << 21, (void *)(uintptr_t)5), 0);
    assert_ptr_equal(vpmm_hmap_get(&m, 5 << 21), (void *)(uintptr_t)5);
    vpmm_hmap_fini(&m);
}

/* ref / ref_insert: one-probe read-modify-write of a value slot. */
static void test_ref(void **state)
{
    vpmm_hmap_t m;
    void **slot;
    (void)state;
    assert_int_equal(vpmm_hmap_init(&m, 16), 0);
    assert_null(vpmm_hmap_ref(&m, 42 << 8));
    assert_int_equal(vpmm_hmap_reserve(&m, 1), 0);
    slot = vpmm_hmap_ref_insert(&m, 42 << 8);
    assert_non_null(slot);
    assert_null(*slot);
    assert_int_equal(m.count, 1);
    *slot = (void *)(uintptr_t)7;
    assert_ptr_equal(vpmm_hmap_get(&m, 42 << 8), (void *)(uintptr_t)7);
    assert_ptr_equal(vpmm_hmap_ref(&m, 42 << 8), slot);
    assert_ptr_equal(vpmm_hmap_ref_insert(&m, 42 << 8), slot); /* present: same slot */
    assert_int_equal(m.count, 1);
    assert_null(vpmm_hmap_ref_insert(&m, 0));
    /* Without room for a new key, ref_insert refuses rather than grow. */
    for (uint64_t k = 1; m.count < m.cap - m.cap / 4; k++)
        assert_int_equal(vpmm_hmap_put(&m, k << 20, (void *)(uintptr_t)k), 0);
    assert_null(vpmm_hmap_ref_insert(&m, 999ULL << 40));
    assert_int_equal(vpmm_hmap_reserve(&m, 1), 0);
    assert_non_null(vpmm_hmap_ref_insert(&m, 999ULL << 40));
    assert_int_equal(vpmm_hmap_validate(&m), 0);
    vpmm_hmap_fini(&m);
}

static void test_reserve(void **state)
{
    vpmm_hmap_t m;
    size_t cap;

    (void)state;
    assert_int_equal(vpmm_hmap_init(&m, 0), 0);
    for (size_t i = 1; i <= 5; i++)
        assert_int_equal(vpmm_hmap_put(&m, i << 8, val_of(i)), 0);

    /* Room already there: no allocation. */
    hook_install(0);
    assert_int_equal(vpmm_hmap_reserve(&m, 7), 0);
    assert_int_equal(m.cap, 16);
    assert_int_equal(vpmm_hmap_reserve(&m, 0), 0);
    assert_int_equal(alloc_calls, 0);

    /* 5 + 1000 entries need 1005 <= 3/4 cap, so cap 2048, in one allocation. */
    hook_install(-1);
    assert_int_equal(vpmm_hmap_reserve(&m, 1000), 0);
    assert_int_equal(alloc_calls, 1);
    assert_int_equal(m.cap, 2048);
    assert_int_equal(vpmm_hmap_validate(&m), 0);
    for (size_t i = 1; i <= 5; i++)
        assert_ptr_equal(vpmm_hmap_get(&m, i << 8), val_of(i));

    /* With every allocation failing, exactly 1000 new keys still go in (plus 531 more, since
     * 2048 slots hold 1536), and replacements always do. */
    hook_install(0);
    for (size_t i = 6; i <= 1005; i++)
        assert_int_equal(vpmm_hmap_put(&m, i << 8, val_of(i)), 0);
    for (size_t i = 1006; i <= 1536; i++)
        assert_int_equal(vpmm_hmap_put(&m, i << 8, val_of(i)), 0);
    cap = m.cap;
    assert_int_equal(vpmm_hmap_put(&m, 1537 << 8, val_of(0)), -1);
    assert_int_equal(vpmm_hmap_put(&m, 1 << 8, val_of(9)), 0);
    assert_int_equal(alloc_calls, 1);
    assert_int_equal(m.cap, cap);
    assert_int_equal(m.count, 1536);
    assert_int_equal(vpmm_hmap_validate(&m), 0);

    /* Overflowing requests fail without touching the map. */
    hook_reset(NULL);
    assert_int_equal(vpmm_hmap_reserve(&m, SIZE_MAX), -1);
    assert_int_equal(vpmm_hmap_reserve(&m, SIZE_MAX / 2), -1);
    assert_int_equal(m.cap, cap);
    assert_int_equal(m.count, 1536);
    assert_int_equal(vpmm_hmap_validate(&m), 0);
    vpmm_hmap_fini(&m);
}

static void test_out_of_memory(void **state)
{
    vpmm_hmap_t m;
    uint64_t *keys_before;

    (void)state;
    hook_install(0);
    assert_int_equal(vpmm_hmap_init(&m, 100), -1);
    assert_null(m.keys);
    assert_int_equal(m.cap, 0);
    vpmm_hmap_fini(&m);

    /* init, then 12 puts fit in 16 slots; the 13th must grow and cannot. */
    hook_install(1);
    assert_int_equal(vpmm_hmap_init(&m, 0), 0);
    for (size_t i = 1; i <= 12; i++)
        assert_int_equal(vpmm_hmap_put(&m, i << 21, val_of(i)), 0);
    keys_before = m.keys;
    assert_int_equal(vpmm_hmap_put(&m, 13 << 21, val_of(13)), -1);
    assert_int_equal(vpmm_hmap_reserve(&m, 1), -1);
    assert_ptr_equal(m.keys, keys_before);
    assert_int_equal(m.cap, 16);
    assert_int_equal(m.count, 12);
    assert_int_equal(vpmm_hmap_validate(&m), 0);
    assert_null(vpmm_hmap_get(&m, 13 << 21));
    for (size_t i = 1; i <= 12; i++)
        assert_ptr_equal(vpmm_hmap_get(&m, i << 21), val_of(i));
    /* A full table still replaces and removes, and takes a new key once there is room. */
    assert_int_equal(vpmm_hmap_put(&m, 5 << 21, val_of(50)), 0);
    assert_ptr_equal(vpmm_hmap_remove(&m, 6 << 21), val_of(6));
    assert_int_equal(vpmm_hmap_put(&m, 13 << 21, val_of(13)), 0);
    assert_int_equal(vpmm_hmap_validate(&m), 0);

    /* Once memory is back, growth works again. */
    hook_install(-1);
    assert_int_equal(vpmm_hmap_put(&m, 14 << 21, val_of(14)), 0);
    assert_int_equal(m.cap, 32);
    assert_int_equal(alloc_calls, 1);
    assert_ptr_equal(vpmm_hmap_get(&m, 5 << 21), val_of(50));
    assert_int_equal(vpmm_hmap_validate(&m), 0);
    vpmm_hmap_fini(&m);
}

/* Single corruptions of a valid map must be reported. */
static void test_validate_detects_corruption(void **state)
{
    vpmm_hmap_t m;
    size_t end = 0, stranded = 0;
    int dummy;

    (void)state;
    assert_int_equal(vpmm_hmap_init(&m, 64), 0);
    for (size_t i = 1; i <= 48; i++)
        assert_int_equal(vpmm_hmap_put(&m, i * 4096, val_of(i)), 0);
    assert_int_equal(m.cap, 64);
    assert_int_equal(vpmm_hmap_validate(&m), 0);

    m.count++;
    assert_true(vpmm_hmap_validate(&m) > 0);
    m.count--;

    /* Stale value in an empty slot, and a duplicate key right after the end of its run. */
    while (end + 1 < m.cap && !(m.keys[end] != 0 && m.keys[end + 1] == 0))
        end++;
    assert_true(end + 1 < m.cap);
    m.vals[end + 1] = &dummy;
    assert_true(vpmm_hmap_validate(&m) > 0);
    m.vals[end + 1] = NULL;
    m.keys[end + 1] = m.keys[end];
    m.count++;
    assert_true(vpmm_hmap_validate(&m) > 0);
    m.keys[end + 1] = 0;
    m.count--;
    assert_int_equal(vpmm_hmap_validate(&m), 0);

    /* Emptying a slot without the backward shift strands any later entry of its run that had
     * probed past it; in a 3/4-full table some slot must do that. */
    for (size_t i = 0; i < m.cap; i++) {
        const uint64_t k = m.keys[i];
        void *v = m.vals[i];
        if (k == 0)
            continue;
        m.keys[i] = 0;
        m.vals[i] = NULL;
        m.count--;
        stranded += vpmm_hmap_validate(&m) > 0;
        m.keys[i] = k;
        m.vals[i] = v;
        m.count++;
    }
    assert_true(stranded > 0);
    assert_int_equal(vpmm_hmap_validate(&m), 0);

    /* Over 3/4 full. */
    m.count = 49;
    assert_true(vpmm_hmap_validate(&m) > 0);
    m.count = 48;

    /* A capacity that is not a power of two. */
    m.cap = 48;
    assert_int_equal(vpmm_hmap_validate(&m), 1);
    m.cap = 64;
    assert_int_equal(vpmm_hmap_validate(&m), 0);
    vpmm_hmap_fini(&m);
}

/*
 * Mixed put (new and replace), remove, get and occasional reserve against a plain array indexed
 * by key number. Phases alternate between a small key universe (the table stays at 16-64 slots,
 * so runs wrap often) and a large one (growth to ~16k slots), and between 256-byte and 2 MiB
 * aligned keys.
 */
static void test_random_stress(void **state)
{
    enum { U_MAX = 12000, OPS = 260000, PHASE = 26000 };
    static void *ref[U_MAX];
    vpmm_hmap_t m;
    size_t count = 0, max_cap = 0;

    (void)state;
    trng_t rng = { 1234 };
    memset(ref, 0, sizeof(ref));
    assert_int_equal(vpmm_hmap_init(&m, 0), 0);
    for (size_t op = 0; op < OPS; op++) {
        const size_t phase = op / PHASE;
        const size_t universe = phase % 2 == 0 ? 40 : U_MAX;
        const uint64_t stride = phase % 4 < 2 ? 256 : 2ull << 20;
        const size_t r = trng_below(&rng, 100);
        size_t idx = trng_below(&rng, universe);
        const uint64_t key = 0x7f0000000000ull + (uint64_t)idx * stride;
        int mutated = 1;

        if (op % PHASE == 0) {
            /* New phase: the keys change meaning, so empty the map first. */
            for (size_t i = 0; i < U_MAX; i++) {
                if (ref[i] != NULL) {
                    const uint64_t old_stride = (op / PHASE - 1) % 4 < 2 ? 256 : 2ull << 20;
                    assert_ptr_equal(
                        vpmm_hmap_remove(&m, 0x7f0000000000ull + (uint64_t)i * old_stride), ref[i]);
                    ref[i] = NULL;
                    count--;
                }
            }
            assert_int_equal(count, 0);
            assert_int_equal(m.count, 0);
            /* Tables never shrink; start small so the small phases really wrap. */
            vpmm_hmap_fini(&m);
            assert_int_equal(vpmm_hmap_init(&m, 0), 0);
        }
        if (r < 50) {
            void *v = val_of(trng_next(&rng));
            assert_int_equal(vpmm_hmap_put(&m, key, v), 0);
            count += ref[idx] == NULL;
            ref[idx] = v;
        } else if (r < 80) {
            assert_ptr_equal(vpmm_hmap_remove(&m, key), ref[idx]);
            count -= ref[idx] != NULL;
            ref[idx] = NULL;
        } else if (r < 99) {
            assert_ptr_equal(vpmm_hmap_get(&m, key), ref[idx]);
            mutated = 0;
        } else {
            const size_t extra = trng_below(&rng, 64);
            const size_t cap = m.cap;
            assert_int_equal(vpmm_hmap_reserve(&m, extra), 0);
            assert_true(m.count + extra <= m.cap - m.cap / 4);
            assert_true(m.cap == cap || m.cap - m.cap / 4 < 2 * (m.count + extra));
        }
        assert_int_equal(m.count, count);
        max_cap = m.cap > max_cap ? m.cap : max_cap;
        if (mutated && (m.cap <= 256 || op % 61 == 0))
            assert_int_equal(vpmm_hmap_validate(&m), 0);
        if (op % PHASE == PHASE - 1)
            for (size_t i = 0; i < universe; i++)
                assert_ptr_equal(vpmm_hmap_get(&m, 0x7f0000000000ull + (uint64_t)i * stride),
                                 ref[i]);
    }
    assert_true(max_cap >= 8192);
    assert_int_equal(vpmm_hmap_validate(&m), 0);
    vpmm_hmap_fini(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_basic, hook_reset),
        cmocka_unit_test_teardown(test_init_capacity, hook_reset),
        cmocka_unit_test_teardown(test_aligned_256, hook_reset),
        cmocka_unit_test_teardown(test_aligned_2mib, hook_reset),
        cmocka_unit_test_teardown(test_high_bit_keys, hook_reset),
        cmocka_unit_test_teardown(test_growth, hook_reset),
        cmocka_unit_test_teardown(test_remove_random_order, hook_reset),
        cmocka_unit_test_teardown(test_remove_wrapping_runs, hook_reset),
        cmocka_unit_test_teardown(test_iteration, hook_reset),
        cmocka_unit_test_teardown(test_clear, hook_reset),
        cmocka_unit_test_teardown(test_ref, hook_reset),
        cmocka_unit_test_teardown(test_reserve, hook_reset),
        cmocka_unit_test_teardown(test_out_of_memory, hook_reset),
        cmocka_unit_test_teardown(test_validate_detects_corruption, hook_reset),
        cmocka_unit_test_teardown(test_random_stress, hook_reset),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
