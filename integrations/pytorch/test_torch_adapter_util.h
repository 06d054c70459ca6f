/*
 * test_torch_adapter_util.h — what the adapter's host tests share: the fixture (a vpmm pool and
 * the adapter's device over it; each test file opens its own kind of pool), its teardown with the
 * pool's invariant check, an allocation that must succeed, the pool's statistics. Header-only
 * (test_torch_adapter.c, test_torch_adapter_ipc.c, test_torch_adapter_segments.c).
 */
#ifndef VPMM_TEST_TORCH_ADAPTER_UTIL_H
#define VPMM_TEST_TORCH_ADAPTER_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include <cmocka.h>

#include "torch_adapter.h"

typedef struct fixture {
    vpmm_pool_t *pool;
    vta_device_t d;
} fixture_t;

/* The shared pool's mempool id. */
static const vta_pool_id_t SHARED = { 0, 0 };

/* The adapter's device finished, the pool checked and destroyed. */
static inline void close_fx(fixture_t *f)
{
    vta_device_fini(&f->d);
    assert_int_equal(vpmm_pool_check(f->pool, stderr), 0);
    assert_int_equal(vpmm_pool_destroy(f->pool), VPMM_SUCCESS);
}

/* vta_malloc of `size` on stream s for mempool id `id`, which must succeed. */
static inline void *talloc(fixture_t *f, size_t size, vpmm_stream_t s, vta_pool_id_t id)
{
    void *p = NULL;
    assert_int_equal(vta_malloc(&f->d, size, s, id, &p), VPMM_SUCCESS);
    assert_non_null(p);
    return p;
}

/* The pool's statistics. */
static inline vpmm_stats_t pstats(fixture_t *f)
{
    vpmm_stats_t s;
    assert_int_equal(vpmm_get_stats(f->pool, &s), VPMM_SUCCESS);
    return s;
}

#endif
