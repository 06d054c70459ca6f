/*
 * test_vpmm_torch.c — libvpmm_torch.so as PyTorch sees it, on the host emulation backend: the
 * exported symbols (vpmm_torch_* only), 0-byte requests, alloc/free with stream 0, lazy and
 * concurrent creation of one pool per device, the JSON statistics (snprintf-style truncation),
 * dump, check, peak reset, and the failure counter / first-error message for every kind of bad
 * call. Linked against the shared library itself, so the dynamic linker checks the exports.
 *
 * The pools are process-wide and never destroyed, so the tests run in order and measure
 * differences; the failure tests come last. VPMM_BACKEND=host is set before the first call.
 */
#define _GNU_SOURCE /* RTLD_DEFAULT */

#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "vpmm_torch.h"

#define MiB ((size_t)1 << 20)

static vpmm_stats_t stats_of(int device)
{
    vpmm_stats_t s;
    assert_int_equal(vpmm_torch_stats(device, &s), VPMM_SUCCESS);
    return s;
}

static void test_exports(void **state)
{
    (void)state;
    /* The vpmm linked into the library is private: none of its symbols is visible. */
    assert_null(dlsym(RTLD_DEFAULT, "vpmm_malloc"));
    assert_null(dlsym(RTLD_DEFAULT, "vpmm_pool_create"));
    assert_null(dlsym(RTLD_DEFAULT, "vpmm_i_lock"));
    assert_non_null(dlsym(RTLD_DEFAULT, "vpmm_torch_alloc"));
    assert_non_null(dlsym(RTLD_DEFAULT, "vpmm_torch_free"));
}

static void test_no_pool_yet(void **state)
{
    vpmm_stats_t s;
    char buf[8] = "x";
    (void)state;
    assert_int_equal(vpmm_torch_stats(0, &s), VPMM_TORCH_NO_POOL);
    assert_int_equal(vpmm_torch_stats_json(0, buf, sizeof buf), VPMM_TORCH_NO_POOL);
    assert_int_equal(vpmm_torch_check(0), VPMM_TORCH_NO_POOL);
    assert_int_equal(vpmm_torch_dump(0, NULL), VPMM_TORCH_NO_POOL);
    assert_int_equal(vpmm_torch_reset_peak(0), VPMM_TORCH_NO_POOL);
    assert_int_equal(vpmm_torch_stats(-1, &s), VPMM_TORCH_BAD_ARGS);
    assert_int_equal(vpmm_torch_stats(64, &s), VPMM_TORCH_BAD_ARGS);
    assert_int_equal(vpmm_torch_stats(0, NULL), VPMM_TORCH_BAD_ARGS);
    assert_int_equal(vpmm_torch_stats_json(-1, buf, sizeof buf), VPMM_TORCH_BAD_ARGS);
    /* A 0-byte request (an empty tensor) creates nothing and is no failure. */
    assert_null(vpmm_torch_alloc(0, 0, NULL));
    assert_int_equal(vpmm_torch_stats(0, &s), VPMM_TORCH_NO_POOL);
    vpmm_torch_free(NULL, 0, 0, NULL);
    assert_int_equal(vpmm_torch_failures(), 0);
    assert_string_equal(vpmm_torch_first_error(), "");
}

static void test_alloc_free(void **state)
{
    vpmm_stats_t s;
    char *p, *q;
    (void)state;
    p = vpmm_torch_alloc(1000, 0, NULL);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % VPMM_ALIGNMENT, 0);
    memset(p, 0xab, 1000); /* the host backend's memory is host memory */
    q = vpmm_torch_alloc(3 * MiB, 0, NULL);
    assert_non_null(q);
    s = stats_of(0);
    assert_int_equal(s.live_bytes, 1000 + 3 * MiB);
    assert_int_equal(s.live_allocs, 2);
    assert_int_equal(s.mallocs, 2);
    assert_int_equal(s.graph_pools, 0);
    vpmm_torch_free(p, 1000, 0, NULL);
    vpmm_torch_free(q, 3 * MiB, 0, NULL);
    s = stats_of(0);
    assert_int_equal(s.live_allocs, 0);
    assert_int_equal(s.frees, 2);
    assert_int_equal(vpmm_torch_check(0), 0);
    assert_int_equal(vpmm_torch_reset_peak(0), VPMM_SUCCESS);
    s = stats_of(0);
    assert_int_equal(s.peak_live_bytes, 0);
    /* Everything is free: trim gives all its pages back. */
    assert_int_equal(vpmm_torch_trim(0, 0), (long long)s.mapped_bytes);
    assert_int_equal(stats_of(0).mapped_bytes, 0);
    assert_int_equal(vpmm_torch_trim(0, 0), 0);
    assert_int_equal(vpmm_torch_trim(5, 0), VPMM_TORCH_NO_POOL);
    assert_int_equal(vpmm_torch_trim(-1, 0), VPMM_TORCH_BAD_ARGS);
    assert_int_equal(vpmm_torch_failures(), 0);
}

enum { THREADS = 8, OPS = 400 };

/* Each thread allocates on device 1 from the start, so the pool's creation races. */
static void *churn(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    void *live[4] = { NULL, NULL, NULL, NULL };
    size_t sizes[4] = { 0, 0, 0, 0 };
    for (int i = 0; i < OPS; i++) {
        int k = i % 4;
        if (live[k] != NULL)
            vpmm_torch_free(live[k], sizes[k], 1, NULL);
        sizes[k] = (size_t)(rand_r(&seed) % (2 * MiB)) + 1;
        live[k] = vpmm_torch_alloc(sizes[k], 1, NULL);
        if (live[k] == NULL)
            return (void *)1;
        memset(live[k], k, sizes[k] < 512 ? sizes[k] : 512);
    }
    for (int k = 0; k < 4; k++)
        vpmm_torch_free(live[k], sizes[k], 1, NULL);
    return NULL;
}

static void test_threads_create_one_pool(void **state)
{
    pthread_t t[THREADS];
    vpmm_stats_t s;
    void *ret;
    (void)state;
    for (uintptr_t i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, churn, (void *)(i + 1)), 0);
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(pthread_join(t[i], &ret), 0);
        assert_null(ret);
    }
    s = stats_of(1);
    assert_int_equal(s.mallocs, THREADS * OPS);
    assert_int_equal(s.frees, THREADS * OPS);
    assert_int_equal(s.live_allocs, 0);
    assert_int_equal(vpmm_torch_check(1), 0);
    assert_int_equal(vpmm_torch_failures(), 0);
}

static void test_stats_json(void **state)
{
    char small[10], *buf;
    long n;
    void *p;
    (void)state;
    p = vpmm_torch_alloc(4096, 0, NULL);
    assert_non_null(p);
    n = vpmm_torch_stats_json(0, NULL, 0);
    assert_true(n > 100);
    assert_int_equal(vpmm_torch_stats_json(0, small, sizeof small), n);
    assert_int_equal(strlen(small), sizeof small - 1); /* truncated and terminated */
    buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(vpmm_torch_stats_json(0, buf, (size_t)n + 1), n);
    assert_int_equal(strlen(buf), (size_t)n);
    assert_true(strncmp(buf, "{\"device\":0,\"backend\":\"host\",", 29) == 0);
    assert_non_null(strstr(buf, ",\"live_bytes\":4096,"));
    assert_non_null(strstr(buf, ",\"graph_pools\":0,"));
    assert_non_null(strstr(buf, ",\"alloc_failures\":0,\"free_failures\":0}"));
    assert_int_equal(buf[n - 1], '}');
    free(buf);
    vpmm_torch_free(p, 4096, 0, NULL);
}

static void test_dump(void **state)
{
    char path[] = "/tmp/test_vpmm_torch_dumpXXXXXX", line[256];
    int fd;
    FILE *f;
    (void)state;
    fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(vpmm_torch_dump(0, path), VPMM_SUCCESS);
    f = fdopen(fd, "r");
    assert_non_null(f);
    assert_non_null(fgets(line, sizeof line, f));
    assert_non_null(strstr(line, "vpmm pool (host backend)"));
    fclose(f);
    remove(path);
    assert_int_equal(vpmm_torch_dump(0, "/nonexistent-dir/dump.txt"), -3);
}

static void test_failures_are_counted(void **state)
{
    int local;
    (void)state;
    assert_int_equal(vpmm_torch_failures(), 0);
    vpmm_torch_free(&local, 4, 0, NULL); /* not vpmm's */
    assert_int_equal(vpmm_torch_failures(), 1);
    assert_non_null(strstr(vpmm_torch_first_error(), "VPMM_ERROR_FOREIGN_POINTER"));
    assert_null(vpmm_torch_alloc(SIZE_MAX, 0, NULL)); /* larger than a VA chunk */
    assert_int_equal(vpmm_torch_failures(), 2);
    assert_null(vpmm_torch_alloc(64, 64, NULL)); /* no such ordinal here */
    assert_null(vpmm_torch_alloc(64, -1, NULL));
    assert_int_equal(vpmm_torch_failures(), 4);
    vpmm_torch_free(&local, 4, 5, NULL); /* a device without a pool */
    assert_int_equal(vpmm_torch_failures(), 5);
    /* Only the first failure is kept; the pools still work. */
    assert_non_null(strstr(vpmm_torch_first_error(), "VPMM_ERROR_FOREIGN_POINTER"));
    assert_int_equal(vpmm_torch_check(0), 0);
    vpmm_torch_free(vpmm_torch_alloc(100, 0, NULL), 100, 0, NULL);
    assert_int_equal(vpmm_torch_failures(), 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exports),
        cmocka_unit_test(test_no_pool_yet),
        cmocka_unit_test(test_alloc_free),
        cmocka_unit_test(test_threads_create_one_pool),
        cmocka_unit_test(test_stats_json),
        cmocka_unit_test(test_dump),
        cmocka_unit_test(test_failures_are_counted),
    };
    /* The host emulation, whatever the machine has: pools are created by the first allocation. */
    setenv("VPMM_BACKEND", "host", 1);
    setenv("VPMM_HOST_MEMORY", "4G", 1);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
