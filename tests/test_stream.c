/*
 * test_stream.c — stream.c: tracked-stream lookup, lazily recorded markers, polling in order and
 * promotion to ready, marker ring growth, event reuse, capture refusal and stream retirement.
 */
#include "test_util.h"

static void lock(tpool_t *t)
{
    vpmm_i_lock(t->pool);
}

static void unlock(tpool_t *t)
{
    vpmm_i_unlock(t->pool);
    CHECK_POOL(t->pool);
}

static void test_lookup_and_cache(void **state)
{
    tpool_t t;
    vpmm_stream_t a, b;
    vpmm_strm_t *sa, *sb;
    (void)state;
    tpool_open(&t, NULL);
    a = vpmm_host_stream_create(t.host);
    b = vpmm_host_stream_create(t.host);
    lock(&t);
    sa = vpmm_i_stream_get(t.pool, vpmm_i_stream_key(t.pool, a));
    sb = vpmm_i_stream_get(t.pool, vpmm_i_stream_key(t.pool, b));
    assert_ptr_not_equal(sa, sb);
    assert_ptr_equal(vpmm_i_stream_get(t.pool, vpmm_i_stream_key(t.pool, a)), sa);
    assert_ptr_equal(t.pool->last_stream, sa);
    assert_int_equal(t.pool->stream_count, 2);
    unlock(&t);
    tpool_close(&t);
}

static void test_mark_is_lazy_and_idempotent(void **state)
{
    tpool_t t;
    vpmm_stream_t a;
    vpmm_strm_t *s;
    void *x;
    (void)state;
    tpool_open(&t, NULL);
    a = vpmm_host_stream_create(t.host);
    x = tmalloc(t.pool, MiB, a);
    tfree(t.pool, x);
    lock(&t);
    s = vpmm_i_stream_get(t.pool, vpmm_i_stream_key(t.pool, a));
    assert_int_equal(s->recorded, 0);
    assert_int_equal(s->dirty_regions, 1);
    assert_int_equal(vpmm_i_stream_mark(t.pool, s, 0), VPMM_SUCCESS);
    assert_int_equal(s->recorded, 1);
    assert_int_equal(s->dirty_regions, 0);
    assert_int_equal(vpmm_i_stream_mark(t.pool, s, 0), VPMM_SUCCESS); /* already recorded */
    assert_int_equal(s->recorded, 1);
    assert_int_equal(vpmm_fault_calls(t.fault, VPMM_DRV_EVENT_RECORD), 1);
    unlock(&t);
    tpool_close(&t);
}

static void test_poll_promotes_in_order(void **state)
{
    tpool_t t;
    vpmm_stream_t a;
    vpmm_strm_t *s;
    void *x, *sep, *y;
    (void)state;
    tpool_open(&t, NULL);
    a = vpmm_host_stream_create(t.host);
    /* All on one stream: no other stream's slow path polls (and marks) a behind our back. */
    x = tmalloc(t.pool, MiB, a);
    sep = tmalloc(t.pool, MiB, a);
    y = tmalloc(t.pool, 2 * MiB, a);
    vpmm_host_enqueue(t.host, a);
    tfree(t.pool, x); /* seq 0 */
    lock(&t);
    s = vpmm_i_stream_get(t.pool, vpmm_i_stream_key(t.pool, a));
    assert_int_equal(vpmm_i_stream_mark(t.pool, s, 0), VPMM_SUCCESS);
    unlock(&t);
    vpmm_host_enqueue(t.host, a);
    tfree(t.pool, y); /* seq 1 */
    lock(&t);
    assert_int_equal(vpmm_i_stream_mark(t.pool, s, 1), VPMM_SUCCESS);
    vpmm_i_stream_poll(t.pool, s);
    assert_int_equal(s->completed, 0);
    unlock(&t);
    /* Finish only the first kernel: marker 0 completes, marker 1 does not. */
    vpmm_host_advance(t.host, a, 1);
    lock(&t);
    vpmm_i_stream_poll(t.pool, s);
    assert_int_equal(s->completed, 1);
    assert_int_equal(t.pool->shared.ready.count, 1); /* x */
    assert_int_equal(s->free_tree.count, 1);         /* y */
    unlock(&t);
    vpmm_host_complete(t.host, a);
    lock(&t);
    vpmm_i_stream_poll(t.pool, s);
    assert_int_equal(s->completed, 2);
    assert_int_equal(s->free_tree.count, 0);
    unlock(&t);
    tfree(t.pool, sep);
    tpool_close(&t);
}

static void test_ring_grows_and_events_are_reused(void **state)
{
    tpool_t t;
    vpmm_stream_t a;
    vpmm_strm_t *s;
    (void)state;
    tpool_open(&t, NULL);
    a = vpmm_host_stream_create(t.host);
    lock(&t);
    s = vpmm_i_stream_get(t.pool, vpmm_i_stream_key(t.pool, a));
    for (uint64_t i = 0; i < 37; i++) {
        vpmm_host_enqueue(t.host, a);
        assert_int_equal(vpmm_i_stream_mark(t.pool, s, s->recorded), VPMM_SUCCESS);
    }
    assert_true(s->ring_cap >= 37);
    assert_int_equal(vpmm_fault_calls(t.fault, VPMM_DRV_EVENT_CREATE), 37);
    vpmm_host_complete(t.host, a);
    vpmm_i_stream_poll(t.pool, s);
    assert_int_equal(s->completed, 37);
    assert_int_equal(t.pool->idle_count, 37);
    /* New markers reuse idle events: no new event is created. */
    for (int i = 0; i < 10; i++)
        assert_int_equal(vpmm_i_stream_mark(t.pool, s, s->recorded), VPMM_SUCCESS);
    assert_int_equal(vpmm_fault_calls(t.fault, VPMM_DRV_EVENT_CREATE), 37);
    vpmm_i_stream_poll(t.pool, s);
    unlock(&t);
    tpool_close(&t);
}

static void test_no_marker_on_capturing_stream(void **state)
{
    tpool_t t;
    vpmm_stream_t a;
    vpmm_strm_t *s;
    uint64_t id;
    (void)state;
    tpool_open(&t, NULL);
    a = vpmm_host_stream_create(t.host);
    assert_int_equal(vpmm_host_begin_capture(t.host, a, &id), VPMM_DRV_OK);
    lock(&t);
    s = vpmm_i_stream_get(t.pool, vpmm_i_stream_key(t.pool, a));
    assert_int_equal(vpmm_i_stream_mark(t.pool, s, 0), VPMM_ERROR_STREAM_CAPTURING);
    assert_int_equal(s->recorded, 0);
    assert_int_equal(vpmm_fault_calls(t.fault, VPMM_DRV_EVENT_RECORD), 0);
    unlock(&t);
    assert_int_equal(vpmm_host_end_capture(t.host, a), VPMM_DRV_OK);
    tpool_close(&t);
}

static void test_retire_then_collect(void **state)
{
    tpool_t t;
    vpmm_stream_t a, b;
    void *x;
    (void)state;
    tpool_open(&t, NULL);
    a = vpmm_host_stream_create(t.host);
    b = vpmm_host_stream_create(t.host);
    x = tmalloc(t.pool, MiB, a);
    vpmm_host_enqueue(t.host, a);
    tfree(t.pool, x);
    assert_int_equal(vpmm_stream_release(t.pool, a), VPMM_SUCCESS);
    CHECK_POOL(t.pool);
    assert_non_null(t.pool->retired);
    assert_int_equal(t.pool->retired->recorded, 1);
    /* Retired stream with work in flight: still referenced, still polled. */
    lock(&t);
    vpmm_i_stream_poll_all(t.pool, NULL);
    assert_non_null(t.pool->retired);
    unlock(&t);
    vpmm_host_complete(t.host, a);
    lock(&t);
    vpmm_i_stream_poll_all(t.pool, NULL);
    assert_null(t.pool->retired); /* promoted its memory and was forgotten */
    unlock(&t);
    x = tmalloc(t.pool, MiB, b);
    tfree(t.pool, x);
    /* A stream with nothing referenced is dropped at once. */
    assert_int_equal(vpmm_stream_release(t.pool, b), VPMM_SUCCESS);
    assert_int_equal(tstats(t.pool).streams, 0);
    tpool_close(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lookup_and_cache),
        cmocka_unit_test(test_mark_is_lazy_and_idempotent),
        cmocka_unit_test(test_poll_promotes_in_order),
        cmocka_unit_test(test_ring_grows_and_events_are_reused),
        cmocka_unit_test(test_no_marker_on_capturing_stream),
        cmocka_unit_test(test_retire_then_collect),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
