/*
 * test_driver_stats.c — vpmm_driver_stats and the counting decorator (backends/count/): a pool
 * created with driver_stats counts every driver call by kind, exactly as the fault decorator
 * underneath sees them, with exact counts for a small scenario (creation, growth, reuse, another
 * stream, a defragmentation, trim); failures are counted; the time adds up;
 * a pool without it answers NOT_SUPPORTED; the config field and VPMM_DRIVER_STATS are checked.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

/* The stats of a test pool, which must keep them. */
static vpmm_driver_stats_t dstats(vpmm_pool_t *pool)
{
    vpmm_driver_stats_t s;
    assert_int_equal(vpmm_driver_stats(pool, &s), VPMM_SUCCESS);
    return s;
}

/* Every kind counted as the fault decorator below counted it; the totals add up. */
static void assert_same_as_fault(vpmm_pool_t *pool, vpmm_driver_t *fault)
{
    vpmm_driver_stats_t s = dstats(pool);
    uint64_t calls = 0, ns = 0;
    for (int e = 0; e < VPMM_DRIVER_CALL_COUNT; e++) {
        assert_int_equal(s.call[e].calls, vpmm_fault_calls(fault, (vpmm_drv_entry_t)e));
        assert_true(s.call[e].failures <= s.call[e].calls);
        calls += s.call[e].calls;
        ns += s.call[e].ns;
    }
    assert_int_equal(s.calls, calls);
    assert_int_equal(s.ns, ns);
    assert_int_equal(s.calls, vpmm_fault_total_calls(fault));
}

#define CALLS(s, kind) ((s).call[VPMM_DRIVER_CALL_##kind].calls)

static void test_exact_counts(void **state)
{
    /* One size class: the counts below follow one chunk (a small block would reserve another). */
    tpool_params_t prm = { .driver_stats = 1, .cache_percent = -1, .small_bytes = 1 };
    tpool_t t;
    vpmm_driver_stats_t s;
    void *a, *b, *c, *d;
    vpmm_stream_t other = (vpmm_stream_t)0x1000;
    (void)state;
    tpool_open(&t, &prm);
    s = dstats(t.pool);
    /* Creation: the granularity and one VA chunk. */
    assert_int_equal(CALLS(s, GRANULARITY), 1);
    assert_int_equal(CALLS(s, VA_RESERVE), 1);
    assert_int_equal(s.calls, 2);
    assert_same_as_fault(t.pool, t.fault);

    /* Growth: 3 MiB on the legacy stream creates, maps and opens two pages; no capture query. */
    a = tmalloc(t.pool, 3 * MiB, NULL);
    s = dstats(t.pool);
    assert_int_equal(CALLS(s, MEM_CREATE), 2);
    assert_int_equal(CALLS(s, MEM_MAP), 2);
    assert_int_equal(CALLS(s, SET_ACCESS), 1);
    assert_int_equal(CALLS(s, CAPTURE_INFO), 0);
    assert_same_as_fault(t.pool, t.fault);

    /* Reuse on the same stream: no driver call at all, malloc or free. */
    tfree(t.pool, a);
    a = tmalloc(t.pool, 3 * MiB, NULL);
    s = dstats(t.pool);
    assert_int_equal(s.calls, 2 + 2 + 2 + 1);

    /* Another stream: one capture query per malloc, none per free. */
    b = tmalloc(t.pool, 1000, other);
    s = dstats(t.pool);
    assert_int_equal(CALLS(s, CAPTURE_INFO), 1);
    tfree(t.pool, b);
    assert_int_equal(CALLS(dstats(t.pool), CAPTURE_INFO), 1);
    assert_same_as_fault(t.pool, t.fault);

    /* Two 2 MiB blocks, the first freed: a 4 MiB malloc remaps that page next to a new one. */
    c = tmalloc(t.pool, 2 * MiB, NULL);
    d = tmalloc(t.pool, 2 * MiB, NULL);
    tfree(t.pool, c);
    c = tmalloc(t.pool, 4 * MiB, NULL);
    assert_same_as_fault(t.pool, t.fault);
    s = dstats(t.pool);
    {
        /* Exact, on this backend: 5 pages created (2 + 1 + 1 + 1), one remapped by the
         * defragmentation; a map per created page and per remap, one set_access per mapped
         * range; the stream markers of the other stream (created once, recorded, queried),
         * whose device was asked once, at its first marker. */
        vpmm_stats_t st = tstats(t.pool);
        assert_int_equal(st.defrags, 1);
        assert_int_equal(st.pages_remapped, 1);
        assert_int_equal(st.pages_created, 5);
        assert_int_equal(CALLS(s, MEM_CREATE), st.handles_created);
        assert_int_equal(CALLS(s, MEM_MAP), st.handles_created + st.pages_remapped);
        assert_int_equal(CALLS(s, MEM_CREATE), 5);
        assert_int_equal(CALLS(s, MEM_MAP), 6);
        assert_int_equal(CALLS(s, SET_ACCESS), 4);
        assert_int_equal(CALLS(s, MEM_UNMAP), 0);
        assert_int_equal(CALLS(s, EVENT_CREATE), 1);
        assert_int_equal(CALLS(s, EVENT_RECORD), 3);
        assert_int_equal(CALLS(s, EVENT_QUERY), 2);
        assert_int_equal(CALLS(s, CAPTURE_INFO), 2);
        assert_int_equal(CALLS(s, STREAM_DEVICE), 1);
        assert_int_equal(s.calls, 1 + 1 + 5 + 6 + 4 + 1 + 3 + 2 + 2 + 1);
    }
    assert_true(s.ns > 0);
    tfree(t.pool, a);
    tfree(t.pool, c);
    tfree(t.pool, d);
    assert_int_equal(vpmm_trim(t.pool, 0, NULL), VPMM_SUCCESS);
    s = dstats(t.pool);
    /* Trim gives every page back: each created handle released, each mapping undone. */
    assert_int_equal(CALLS(s, MEM_RELEASE), CALLS(s, MEM_CREATE));
    assert_int_equal(CALLS(s, MEM_UNMAP), CALLS(s, MEM_MAP));
    assert_same_as_fault(t.pool, t.fault);
    tpool_close(&t);
}

static void test_failures_counted(void **state)
{
    tpool_params_t prm = { .driver_stats = 1 };
    tpool_t t;
    vpmm_driver_stats_t s;
    void *p = NULL;
    (void)state;
    tpool_open(&t, &prm);
    uint64_t failed;
    vpmm_fault_fail_from(t.fault, VPMM_DRV_MEM_CREATE, 1, VPMM_DRV_OUT_OF_MEMORY);
    assert_int_equal(vpmm_malloc(t.pool, 1000, NULL, &p), VPMM_ERROR_OUT_OF_MEMORY);
    vpmm_fault_clear(t.fault);
    s = dstats(t.pool);
    failed = s.call[VPMM_DRIVER_CALL_MEM_CREATE].calls;
    assert_true(failed >= 1);
    assert_int_equal(s.call[VPMM_DRIVER_CALL_MEM_CREATE].failures, failed);
    assert_int_equal(s.call[VPMM_DRIVER_CALL_MEM_MAP].calls, 0);
    p = tmalloc(t.pool, 1000, NULL);
    s = dstats(t.pool);
    assert_int_equal(s.call[VPMM_DRIVER_CALL_MEM_CREATE].calls, failed + 1);
    assert_int_equal(s.call[VPMM_DRIVER_CALL_MEM_CREATE].failures, failed);
    assert_int_equal(s.call[VPMM_DRIVER_CALL_MEM_MAP].failures, 0);
    assert_same_as_fault(t.pool, t.fault);
    tfree(t.pool, p);
    tpool_close(&t);
}

static void test_off_by_default(void **state)
{
    tpool_t t;
    vpmm_driver_stats_t s;
    (void)state;
    memset(&s, 0xab, sizeof s);
    tpool_open(&t, NULL);
    assert_ptr_equal(t.pool->drv, t.fault); /* no wrapper: the pool calls its backend directly */
    assert_int_equal(vpmm_driver_stats(t.pool, &s), VPMM_ERROR_NOT_SUPPORTED);
    assert_non_null(strstr(vpmm_last_error(), "VPMM_DRIVER_STATS"));
    assert_int_equal(s.calls, 0xabababababababab); /* untouched */
    assert_int_equal(vpmm_driver_stats(NULL, &s), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_driver_stats(t.pool, NULL), VPMM_ERROR_INVALID_ARGUMENT);
    tpool_close(&t);
}

/* Through the public API: config.driver_stats, VPMM_DRIVER_STATS, and the backend's name. */
static void test_public_api(void **state)
{
    vpmm_config_t cfg;
    vpmm_pool_t *pool;
    vpmm_driver_stats_t s;
    void *p;
    (void)state;
    vpmm_config_init(&cfg);
    assert_int_equal(cfg.driver_stats, -1);
    cfg.backend = VPMM_BACKEND_HOST;
    cfg.va_size = 32 * GiB;
    cfg.driver_stats = 1;
    assert_int_equal(vpmm_pool_create(&cfg, &pool), VPMM_SUCCESS);
    assert_string_equal(vpmm_pool_backend_name(pool), "host"); /* the wrapper is transparent */
    assert_int_equal(vpmm_malloc(pool, 1000, NULL, &p), VPMM_SUCCESS);
    assert_int_equal(vpmm_free(pool, p), VPMM_SUCCESS);
    assert_int_equal(vpmm_driver_stats(pool, &s), VPMM_SUCCESS);
    assert_int_equal(s.call[VPMM_DRIVER_CALL_MEM_CREATE].calls, 1);
    assert_int_equal(s.call[VPMM_DRIVER_CALL_MEM_MAP].calls, 1);
    assert_int_equal(vpmm_pool_destroy(pool), VPMM_SUCCESS);

    cfg.driver_stats = -1;
    setenv("VPMM_DRIVER_STATS", "1", 1);
    assert_int_equal(vpmm_pool_create(&cfg, &pool), VPMM_SUCCESS);
    assert_int_equal(vpmm_driver_stats(pool, &s), VPMM_SUCCESS);
    assert_int_equal(vpmm_pool_destroy(pool), VPMM_SUCCESS);
    cfg.driver_stats = 0; /* the config wins over the environment */
    assert_int_equal(vpmm_pool_create(&cfg, &pool), VPMM_SUCCESS);
    assert_int_equal(vpmm_driver_stats(pool, &s), VPMM_ERROR_NOT_SUPPORTED);
    assert_int_equal(vpmm_pool_destroy(pool), VPMM_SUCCESS);

    setenv("VPMM_DRIVER_STATS", "2", 1);
    assert_int_equal(vpmm_pool_create(&cfg, &pool), VPMM_ERROR_INVALID_ENV);
    assert_non_null(strstr(vpmm_last_error(), "VPMM_DRIVER_STATS='2'"));
    unsetenv("VPMM_DRIVER_STATS");
    cfg.driver_stats = 2;
    assert_int_equal(vpmm_pool_create(&cfg, &pool), VPMM_ERROR_INVALID_CONFIG);
    assert_non_null(strstr(vpmm_last_error(), "config.driver_stats=2"));
}

static void test_call_names(void **state)
{
    (void)state;
    assert_string_equal(vpmm_driver_call_name(VPMM_DRIVER_CALL_MEM_MAP), "mem_map");
    assert_string_equal(vpmm_driver_call_name(VPMM_DRIVER_CALL_SET_ACCESS), "set_access");
    assert_string_equal(vpmm_driver_call_name(VPMM_DRIVER_CALL_GRAPH_DESTROY), "graph_destroy");
    assert_string_equal(vpmm_driver_call_name(VPMM_DRIVER_CALL_COUNT), "unknown");
    assert_string_equal(vpmm_driver_call_name((vpmm_driver_call_t)-1), "unknown");
    for (int e = 0; e < VPMM_DRIVER_CALL_COUNT; e++) /* the table's order, checked by name */
        assert_non_null(strstr(vpmm_drv_entry_name((vpmm_drv_entry_t)e), "cu"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_counts),   cmocka_unit_test(test_failures_counted),
        cmocka_unit_test(test_off_by_default), cmocka_unit_test(test_public_api),
        cmocka_unit_test(test_call_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
