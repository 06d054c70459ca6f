/*
 * test_array.c — unit tests for src/ds/array.c (vpmm_i_grow, VPMM_GROW): no growth when there is
 * room, the first capacity, doubling until the need is met (one step or several), contents kept
 * across growth, and every failure leaving the array, its contents and its capacity untouched:
 * an out-of-memory realloc (through the realloc hook) and sizes whose byte count would overflow.
 *
 * Single-threaded. The realloc hook is process-wide; every test that sets it restores it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>

#include "array.h"

/* Counting realloc: fails once `realloc_budget` successful calls have been used (-1: never). */
static size_t realloc_calls, last_bytes;
static long realloc_budget = -1;

static void *counting_realloc(void *old, size_t bytes)
{
    realloc_calls++;
    last_bytes = bytes;
    if (realloc_budget == 0)
        return NULL;
    if (realloc_budget > 0)
        realloc_budget--;
    return realloc(old, bytes);
}

static int hook_on(void **state)
{
    (void)state;
    realloc_calls = 0;
    last_bytes = 0;
    realloc_budget = -1;
    vpmm_i_grow_set_realloc_hook(counting_realloc);
    return 0;
}

static int hook_off(void **state)
{
    (void)state;
    vpmm_i_grow_set_realloc_hook(NULL);
    return 0;
}

static void test_room_is_no_op(void **state)
{
    int *a = NULL;
    size_t cap = 0;
    (void)state;
    assert_int_equal(VPMM_GROW(a, cap, 0, 8), 0); /* nothing needed: a NULL array stays NULL */
    assert_null(a);
    assert_int_equal(cap, 0);
    assert_int_equal(realloc_calls, 0);
    assert_int_equal(VPMM_GROW(a, cap, 1, 8), 0);
    assert_non_null(a);
    assert_int_equal(cap, 8);
    int *before = a;
    for (size_t need = 0; need <= 8; need++)
        assert_int_equal(VPMM_GROW(a, cap, need, 8), 0);
    assert_ptr_equal(a, before);
    assert_int_equal(cap, 8);
    assert_int_equal(realloc_calls, 1);
    free(a);
}

static void test_first_and_doubling(void **state)
{
    double *a = NULL;
    size_t cap = 0;
    (void)state;
    assert_int_equal(VPMM_GROW(a, cap, 1, 4), 0);
    assert_int_equal(cap, 4);
    assert_int_equal(last_bytes, 4 * sizeof *a);
    assert_int_equal(VPMM_GROW(a, cap, 5, 4), 0); /* one step: 4 -> 8 */
    assert_int_equal(cap, 8);
    assert_int_equal(VPMM_GROW(a, cap, 9, 4), 0); /* the `first` is not used again: 8 -> 16 */
    assert_int_equal(cap, 16);
    assert_int_equal(VPMM_GROW(a, cap, 100, 4), 0); /* several steps in one call: 16 -> 128 */
    assert_int_equal(cap, 128);
    assert_int_equal(realloc_calls, 4); /* one realloc per call, however many steps */
    assert_int_equal(last_bytes, 128 * sizeof *a);
    free(a);

    /* A need above the first capacity from empty: doubled from `first`, not from the need. */
    a = NULL;
    cap = 0;
    assert_int_equal(VPMM_GROW(a, cap, 65, 64), 0);
    assert_int_equal(cap, 128);
    free(a);

    /* first == 0 is treated as 1. */
    a = NULL;
    cap = 0;
    assert_int_equal(VPMM_GROW(a, cap, 3, 0), 0);
    assert_int_equal(cap, 4);
    free(a);
}

/* Appending one at a time, as the library's call sites do: contents survive every move. */
static void test_append_keeps_contents(void **state)
{
    struct item {
        uint64_t k;
        char tag;
    } *a = NULL;
    size_t n = 0, cap = 0, grows = 0;
    (void)state;
    for (uint64_t i = 0; i < 10000; i++) {
        size_t old = cap;
        assert_int_equal(VPMM_GROW(a, cap, n + 1, 16), 0);
        grows += cap != old;
        assert_true(cap >= n + 1);
        a[n++] = (struct item){ i * 2654435761u, (char)i };
    }
    for (uint64_t i = 0; i < n; i++) {
        assert_int_equal(a[i].k, i * 2654435761u);
        assert_int_equal(a[i].tag, (char)i);
    }
    assert_int_equal(cap, 16384);
    assert_int_equal(grows, 11); /* 16, 32, ..., 16384 */
    assert_int_equal(realloc_calls, grows);
    free(a);
}

static void test_oom_leaves_array_untouched(void **state)
{
    int *a = NULL;
    size_t cap = 0;
    (void)state;

    realloc_budget = 0; /* the very first allocation fails */
    assert_int_equal(VPMM_GROW(a, cap, 1, 8), -1);
    assert_null(a);
    assert_int_equal(cap, 0);

    realloc_budget = -1;
    assert_int_equal(VPMM_GROW(a, cap, 8, 8), 0);
    for (int i = 0; i < 8; i++)
        a[i] = i + 1;
    int *before = a;
    realloc_budget = 0;
    assert_int_equal(VPMM_GROW(a, cap, 9, 8), -1);
    assert_ptr_equal(a, before);
    assert_int_equal(cap, 8);
    for (int i = 0; i < 8; i++)
        assert_int_equal(a[i], i + 1);

    realloc_budget = -1; /* the next try succeeds and keeps the contents */
    assert_int_equal(VPMM_GROW(a, cap, 9, 8), 0);
    assert_int_equal(cap, 16);
    for (int i = 0; i < 8; i++)
        assert_int_equal(a[i], i + 1);
    free(a);
}

static void test_overflow_fails_without_realloc(void **state)
{
    uint64_t *a = NULL;
    size_t cap = 0;
    (void)state;

    assert_int_equal(VPMM_GROW(a, cap, SIZE_MAX, 8), -1); /* SIZE_MAX * 8 bytes */
    assert_int_equal(VPMM_GROW(a, cap, SIZE_MAX / sizeof *a + 1, 8), -1);
    assert_int_equal(VPMM_GROW(a, cap, 1, SIZE_MAX / 2), -1); /* the first capacity alone */
    assert_null(a);
    assert_int_equal(cap, 0);
    assert_int_equal(realloc_calls, 0);

    assert_int_equal(VPMM_GROW(a, cap, 4, 4), 0);
    a[3] = 42;
    uint64_t *before = a;
    assert_int_equal(VPMM_GROW(a, cap, SIZE_MAX / 4, 4), -1); /* doubling would overflow */
    assert_ptr_equal(a, before);
    assert_int_equal(cap, 4);
    assert_int_equal(a[3], 42);
    assert_int_equal(realloc_calls, 1);

    /* Byte-sized elements: the limit is the doubling itself, not the multiplication. */
    char *c = NULL;
    size_t ccap = 0;
    assert_int_equal(VPMM_GROW(c, ccap, SIZE_MAX, 1), -1);
    assert_null(c);
    assert_int_equal(ccap, 0);
    free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_room_is_no_op, hook_on, hook_off),
        cmocka_unit_test_setup_teardown(test_first_and_doubling, hook_on, hook_off),
        cmocka_unit_test_setup_teardown(test_append_keeps_contents, hook_on, hook_off),
        cmocka_unit_test_setup_teardown(test_oom_leaves_array_untouched, hook_on, hook_off),
        cmocka_unit_test_setup_teardown(test_overflow_fails_without_realloc, hook_on, hook_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
