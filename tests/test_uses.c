/*
 * test_uses.c — allocations used by other streams (vpmm_record_stream) and their deferred frees
 * (src/core/uses.c), on the host backend.
 *
 * A block recorded on stream B and freed on A is reused by nobody — A included — until B's work
 * enqueued before the free is done; then a slow path releases it as ordinary free memory of A.
 * Recording the own stream, or a stream twice, changes nothing; bad pointers get vpmm_free's
 * statuses and change nothing. A gate that cannot be recorded at the free (B being captured, an
 * injected failure) is recorded later. In a graph pool a deferred free blocks a checkpoint's
 * reapply until B is done; a reapply keeps a surviving allocation's uses and drops a dead one's; a
 * dissolved graph pool's deferred free is released in the shared pool; destroying a pool with
 * deferred frees leaks nothing. The invariants (I11) are checked after every step.
 */
#include <string.h>

#include "graph_test_util.h"

static void record(tpool_t *t, void *p, vpmm_stream_t s)
{
    assert_int_equal(vpmm_record_stream(t->pool, p, s), VPMM_SUCCESS);
    CHECK_POOL(t->pool);
}

/* A slow path: what releases deferred frees (every trim polls; this one gives nothing back). */
static void slow_path(tpool_t *t)
{
    assert_int_equal(vpmm_trim(t->pool, SIZE_MAX, NULL), VPMM_SUCCESS);
    CHECK_POOL(t->pool);
}

static void test_deferred_until_other_stream_done(void **state)
{
    tpool_t t;
    vpmm_stream_t a, b;
    void *x, *y, *z;
    uint64_t records;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .prealloc = 8 });
    a = vpmm_host_stream_create(t.host);
    b = vpmm_host_stream_create(t.host);
    x = tmalloc(t.pool, 4 * MiB, a);
    vpmm_host_enqueue(t.host, b); /* B's kernel reads x */
    record(&t, x, b);
    records = vpmm_fault_calls(t.fault, VPMM_DRV_EVENT_RECORD);
    tfree(t.pool, x);
    assert_int_equal(vpmm_fault_calls(t.fault, VPMM_DRV_EVENT_RECORD), records + 1); /* B's gate */
    assert_int_equal(tregion_of(t.pool, x).state, VPMM_REGION_FREE);
    assert_false(tregion_of(t.pool, x).ready);
    assert_int_equal(tstats(t.pool).free_bytes, 16 * MiB); /* counted as free memory */

    /* Nobody reuses it, its own stream included, not even through a slow path. */
    y = tmalloc(t.pool, 4 * MiB, a);
    assert_ptr_not_equal(y, x);
    slow_path(&t);
    z = tmalloc(t.pool, 4 * MiB, a);
    assert_ptr_not_equal(z, x);
    tfree(t.pool, z);

    /* B done: a slow path releases it, pending on A; A takes it back. */
    vpmm_host_complete(t.host, b);
    slow_path(&t);
    z = tmalloc(t.pool, 4 * MiB, a);
    assert_ptr_equal(z, x);
    tfree(t.pool, z);
    tfree(t.pool, y);
    tpool_close(&t);
}

/* The own stream, a stream recorded twice: nothing more than one use; bad pointers refused. */
static void test_record_is_idempotent_and_checked(void **state)
{
    tpool_t t;
    vpmm_stream_t a, b;
    tsnap_t before, after;
    void *x;
    (void)state;
    tpool_open(&t, NULL);
    a = vpmm_host_stream_create(t.host);
    b = vpmm_host_stream_create(t.host);
    x = tmalloc(t.pool, 3000, a);
    record(&t, x, a); /* its own stream */
    vpmm_i_lock(t.pool);
    assert_null(((vpmm_region_t *)vpmm_hmap_get(&t.pool->allocs, (uintptr_t)x))->uses);
    vpmm_i_unlock(t.pool);
    record(&t, x, b);
    record(&t, x, b);
    record(&t, x, VPMM_STREAM_PER_THREAD);
    vpmm_i_lock(t.pool);
    assert_int_equal(((vpmm_region_t *)vpmm_hmap_get(&t.pool->allocs, (uintptr_t)x))->uses->n, 2);
    vpmm_i_unlock(t.pool);

    before = tsnap(t.pool);
    assert_int_equal(vpmm_record_stream(NULL, x, b), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_record_stream(t.pool, NULL, b), VPMM_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(vpmm_last_error(), "ptr is NULL"));
    assert_int_equal(vpmm_record_stream(t.pool, (char *)x + 256, b), VPMM_ERROR_INTERIOR_POINTER);
    assert_non_null(strstr(vpmm_last_error(), "vpmm_record_stream: "));
    assert_int_equal(vpmm_record_stream(t.pool, (void *)0x1000, b), VPMM_ERROR_FOREIGN_POINTER);
    after = tsnap(t.pool);
    assert_snap_equal(&before, &after);
    tfree(t.pool, x);
    assert_int_equal(vpmm_record_stream(t.pool, x, b), VPMM_ERROR_DOUBLE_FREE);
    CHECK_POOL(t.pool);
    vpmm_host_complete_all(t.host);
    tpool_close(&t);
}

#if VPMM_HAVE_GRAPHS
/* A gate that cannot be recorded at the free — the use stream is being captured, or the record
 * fails — is recorded later, on demand. */
static void test_gate_recorded_later(void **state)
{
    tpool_t t;
    vpmm_stream_t a, b;
    vpmm_graph_pool_t *gp;
    vpmm_graph_t g;
    void *x, *y;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .prealloc = 4 });
    a = vpmm_host_stream_create(t.host);
    b = vpmm_host_stream_create(t.host);

    /* B is being captured at the free. */
    x = tmalloc(t.pool, 2 * MiB, a);
    record(&t, x, b);
    gp = tgp_create(&t);
    assert_int_equal(vpmm_capture_begin(t.pool, gp, b, VPMM_STREAM_CAPTURE_RELAXED), VPMM_SUCCESS);
    tfree(t.pool, x);
    g = tcapture_end(&t, b);
    slow_path(&t); /* B's gate recorded now; B has no work: released */
    y = tmalloc(t.pool, 2 * MiB, a);
    assert_ptr_equal(y, x);
    tfree(t.pool, y);

    /* The record fails at the free: nothing is lost, the gate comes later. */
    x = tmalloc(t.pool, 2 * MiB, a);
    vpmm_host_enqueue(t.host, b);
    record(&t, x, b);
    vpmm_fault_fail_nth(t.fault, VPMM_DRV_EVENT_RECORD, 1, VPMM_DRV_ERROR);
    tfree(t.pool, x);
    assert_driver_matches_pool(&t);
    slow_path(&t); /* recorded now, not done yet */
    assert_false(tregion_of(t.pool, x).ready);
    vpmm_host_complete(t.host, b);
    slow_path(&t);
    y = tmalloc(t.pool, 2 * MiB, a);
    assert_ptr_equal(y, x);
    tfree(t.pool, y);
    assert_int_equal(vpmm_graph_destroy(t.pool, g), VPMM_SUCCESS);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    tpool_close(&t);
}

/* A graph pool's allocation: its deferred free blocks a reapply until B is done; a reapply keeps
 * a surviving allocation's uses; a dissolved graph pool's deferred free ends in the shared pool. */
static void test_graph_pool_deferred(void **state)
{
    tpool_t t;
    vpmm_stream_t a, b;
    vpmm_graph_pool_t *gp;
    vpmm_checkpoint_t *ck;
    vpmm_graph_t g1, g2;
    void *out, *tmp;
    (void)state;
    tpool_open(&t, NULL);
    a = vpmm_host_stream_create(t.host);
    b = vpmm_host_stream_create(t.host);
    gp = tgp_create(&t);
    tcapture_begin(&t, gp, a);
    out = tmalloc(t.pool, 64 * KiB, a);
    g1 = tcapture_end(&t, a);
    ck = tcheckpoint_take(gp);
    record(&t, out, b); /* G1's output read on B */
    tcapture_begin(&t, gp, a);
    tmp = tmalloc(t.pool, 64 * KiB, a);
    g2 = tcapture_end(&t, a);
    vpmm_host_enqueue(t.host, b);
    record(&t, tmp, b);
    tfree(t.pool, tmp); /* deferred: B may still read it */
    assert_int_equal(vpmm_checkpoint_reapply(gp, ck, NULL, 0), VPMM_ERROR_CHECKPOINT_CONFLICT);
    assert_non_null(strstr(vpmm_last_error(), "still used by another stream"));
    CHECK_POOL(t.pool);
    vpmm_host_complete(t.host, b);
    assert_int_equal(vpmm_checkpoint_reapply(gp, ck, NULL, 0), VPMM_SUCCESS); /* released first */
    CHECK_POOL(t.pool);
    /* out survived the reapply with its use: freed, it is deferred again while B works. */
    vpmm_host_enqueue(t.host, b);
    tfree(t.pool, out);
    assert_false(tregion_of(t.pool, out).ready);
    /* Graphs gone: the graph pool dissolves with the deferred free in it. */
    vpmm_checkpoint_destroy(ck);
    assert_int_equal(vpmm_graph_destroy(t.pool, g1), VPMM_SUCCESS);
    assert_int_equal(vpmm_graph_destroy(t.pool, g2), VPMM_SUCCESS);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    CHECK_POOL(t.pool);
    assert_int_equal(tregion_of(t.pool, out).pool, 0);
    vpmm_host_complete(t.host, b);
    assert_int_equal(vpmm_trim(t.pool, 0, NULL), VPMM_SUCCESS);
    assert_int_equal(tstats(t.pool).mapped_bytes, 0); /* released, then given back */
    tpool_close(&t);
}

/* A reapply drops an allocation made after the checkpoint at once, although another stream
 * recorded a use of it and is still busy: the reapply says it is dead (vpmm.h), and the next
 * capture into the graph pool may take its memory. */
static void test_reapply_drops_used_allocation(void **state)
{
    tpool_t t;
    vpmm_stream_t a, b;
    vpmm_graph_pool_t *gp;
    vpmm_checkpoint_t *ck;
    vpmm_graph_t g1, g2, g3;
    vpmm_region_info_t r;
    void *out, *later, *again;
    (void)state;
    tpool_open(&t, NULL);
    a = vpmm_host_stream_create(t.host);
    b = vpmm_host_stream_create(t.host);
    gp = tgp_create(&t);
    tcapture_begin(&t, gp, a);
    out = tmalloc(t.pool, 64 * KiB, a);
    g1 = tcapture_end(&t, a);
    ck = tcheckpoint_take(gp);
    tcapture_begin(&t, gp, a);
    later = tmalloc(t.pool, 64 * KiB, a);
    g2 = tcapture_end(&t, a);
    vpmm_host_enqueue(t.host, b);
    record(&t, later, b); /* B reads G2's output and is still busy */
    assert_int_equal(vpmm_checkpoint_reapply(gp, ck, NULL, 0), VPMM_SUCCESS);
    CHECK_POOL(t.pool);
    r = tregion_of(t.pool, later);
    assert_int_equal(r.state, VPMM_REGION_FREE);
    assert_true(r.ready);
    tcapture_begin(&t, gp, a); /* G3 takes G2's output's memory while B works */
    again = tmalloc(t.pool, 64 * KiB, a);
    g3 = tcapture_end(&t, a);
    assert_ptr_equal(again, later);
    CHECK_POOL(t.pool);
    vpmm_host_complete(t.host, b);
    vpmm_checkpoint_destroy(ck);
    assert_int_equal(vpmm_graph_destroy(t.pool, g1), VPMM_SUCCESS);
    assert_int_equal(vpmm_graph_destroy(t.pool, g2), VPMM_SUCCESS);
    assert_int_equal(vpmm_graph_destroy(t.pool, g3), VPMM_SUCCESS);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    tfree(t.pool, out);
    tfree(t.pool, again);
    CHECK_POOL(t.pool);
    tpool_close(&t);
}
#endif

/* Destroying a pool with deferred frees and uses leaks nothing (tpool_close checks). */
static void test_destroy_with_deferred(void **state)
{
    tpool_t t;
    vpmm_stream_t a, b;
    void *x;
    (void)state;
    tpool_open(&t, NULL);
    a = vpmm_host_stream_create(t.host);
    b = vpmm_host_stream_create(t.host);
    x = tmalloc(t.pool, 5 * MiB, a);
    vpmm_host_enqueue(t.host, b);
    record(&t, x, b);
    tfree(t.pool, x);
    tpool_close(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deferred_until_other_stream_done),
        cmocka_unit_test(test_record_is_idempotent_and_checked),
#if VPMM_HAVE_GRAPHS
        cmocka_unit_test(test_gate_recorded_later),
        cmocka_unit_test(test_graph_pool_deferred),
        cmocka_unit_test(test_reapply_drops_used_allocation),
#endif
        cmocka_unit_test(test_destroy_with_deferred),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
