/*
 * test_multistream.c — stream-ordered reuse across streams on the host backend, whose streams only
 * progress when the test says so.
 *
 * Rules under test: a stream reuses its own frees at once; another stream reuses them only once the
 * freeing stream's work is known complete (phase 1b), or after a GPU-side wait on the freeing
 * stream's marker (phase 1c, and phase 2 when it harvests pending pages); zombies are unmapped only
 * after their marker completes; no event is recorded per free; the malloc path never synchronises
 * the host.
 */
#include "test_util.h"

typedef struct two {
    tpool_t t;
    vpmm_stream_t a, b;
} two_t;

static void open_two(two_t *w, const tpool_params_t *prm)
{
    tpool_open(&w->t, prm);
    w->a = vpmm_host_stream_create(w->t.host);
    w->b = vpmm_host_stream_create(w->t.host);
    vpmm_host_wait_clear(w->t.host);
}

static uint64_t calls(const two_t *w, vpmm_drv_entry_t e)
{
    return vpmm_fault_calls(w->t.fault, e);
}

static void churn(two_t *w, int streams)
{
    void *p[64];
    for (int round = 0; round < 10; round++) {
        for (int i = 0; i < 64; i++)
            p[i] = tmalloc(w->t.pool, (size_t)(i + 1) * 4096, streams == 2 && i % 2 ? w->a : w->b);
        vpmm_host_enqueue(w->t.host, w->a);
        vpmm_host_enqueue(w->t.host, w->b);
        for (int i = 0; i < 64; i++)
            tfree(w->t.pool, p[i]);
    }
}

static void test_no_event_per_free(void **state)
{
    two_t w;
    uint64_t two_stream_records;
    (void)state;
    open_two(&w, NULL);
    vpmm_fault_reset_calls(w.t.fault);
    /* One stream, 640 frees: same-stream reuse never needs a marker. */
    churn(&w, 1);
    assert_int_equal(calls(&w, VPMM_DRV_EVENT_RECORD), 0);
    assert_int_equal(calls(&w, VPMM_DRV_EVENT_CREATE), 0);
    /* Two streams: markers are recorded only when a slow-path malloc looks at the other stream. */
    churn(&w, 2);
    two_stream_records = calls(&w, VPMM_DRV_EVENT_RECORD);
    print_message("two streams, 640 frees: %llu markers recorded\n",
                  (unsigned long long)two_stream_records);
    assert_true(two_stream_records <= 640 / 16);
    assert_true(calls(&w, VPMM_DRV_EVENT_CREATE) <= two_stream_records);
    assert_int_equal(calls(&w, VPMM_DRV_SYNCHRONIZE), 0);
    vpmm_host_complete_all(w.t.host);
    tpool_close(&w.t);
}

static void test_pending_not_reused_without_wait(void **state)
{
    two_t w;
    tpool_params_t prm = { .memory_limit = 64 * MiB };
    void *x, *y;
    vpmm_host_wait_t wt;
    (void)state;
    open_two(&w, &prm);
    x = tmalloc(w.t.pool, 8 * MiB, w.a);
    vpmm_host_enqueue(w.t.host, w.a); /* a kernel on a uses x */
    tfree(w.t.pool, x);
    /* b wants the same size: a's work is pending, so reuse is allowed only behind a GPU wait. */
    y = tmalloc(w.t.pool, 8 * MiB, w.b);
    assert_ptr_equal(x, y);
    assert_int_equal(vpmm_host_wait_count(w.t.host), 1);
    wt = vpmm_host_wait_at(w.t.host, 0);
    assert_ptr_equal(wt.waiter, w.b);
    assert_ptr_equal(wt.signaller, w.a);
    assert_int_equal(wt.signal_seq, 1);
    assert_int_equal(tstats(w.t.pool).cross_stream_waits, 1);
    /* b's next kernel cannot run before a's: the emulation enforces the wait. */
    vpmm_host_enqueue(w.t.host, w.b);
    assert_int_equal(vpmm_host_advance(w.t.host, w.b, 1), 0);
    vpmm_host_complete(w.t.host, w.a);
    assert_int_equal(vpmm_host_advance(w.t.host, w.b, 1), 1);
    assert_int_equal(calls(&w, VPMM_DRV_SYNCHRONIZE), 0);
    tfree(w.t.pool, y);
    tpool_close(&w.t);
}

static void test_completed_reused_without_wait(void **state)
{
    two_t w;
    void *x, *y;
    (void)state;
    open_two(&w, NULL);
    x = tmalloc(w.t.pool, 8 * MiB, w.a);
    vpmm_host_enqueue(w.t.host, w.a);
    tfree(w.t.pool, x);
    vpmm_host_complete(w.t.host, w.a);
    /* b polls a's marker (recording it lazily), finds it done: phase 1b, no wait. */
    y = tmalloc(w.t.pool, 8 * MiB, w.b);
    assert_ptr_equal(x, y);
    assert_int_equal(vpmm_host_wait_count(w.t.host), 0);
    assert_int_equal(calls(&w, VPMM_DRV_EVENT_RECORD), 1);
    tfree(w.t.pool, y);
    tpool_close(&w.t);
}

static void test_marker_recorded_after_free_is_conservative(void **state)
{
    two_t w;
    void *x, *y;
    (void)state;
    open_two(&w, NULL);
    x = tmalloc(w.t.pool, 4 * MiB, w.a);
    tfree(w.t.pool, x);
    /* More work lands on a after the free; the lazy marker covers it too (never too early). */
    vpmm_host_enqueue(w.t.host, w.a);
    y = tmalloc(w.t.pool, 4 * MiB, w.b);
    assert_ptr_equal(x, y);
    assert_int_equal(vpmm_host_wait_count(w.t.host), 1);
    assert_int_equal(vpmm_host_wait_at(w.t.host, 0).signal_seq, 1);
    tfree(w.t.pool, y);
    vpmm_host_complete_all(w.t.host);
    tpool_close(&w.t);
}

/*
 * Phase 2 across streams: b needs more than any free region, and a's freed pages (still pending)
 * are harvested: b waits for a's marker on the GPU, and the zombies at a's old addresses are not
 * unmapped before a's work completes.
 */
static void test_harvest_other_stream_waits_and_guards_zombies(void **state)
{
    two_t w;
    tpool_params_t prm = { .memory_limit = 16 * MiB };
    void *x1, *x2, *sep, *y;
    vpmm_stats_t s;
    (void)state;
    open_two(&w, &prm);
    x1 = tmalloc(w.t.pool, 4 * MiB, w.a);
    sep = tmalloc(w.t.pool, 2 * MiB, w.b);
    x2 = tmalloc(w.t.pool, 4 * MiB, w.a);
    vpmm_host_enqueue(w.t.host, w.a);
    tfree(w.t.pool, x1);
    tfree(w.t.pool, x2);
    /* 8 MiB free on a (two 4 MiB pieces), 6 MiB left to create: b asks for 14 MiB. */
    y = tmalloc(w.t.pool, 14 * MiB, w.b);
    s = tstats(w.t.pool);
    assert_int_equal(s.pages_remapped, 4);
    assert_int_equal(s.mapped_bytes, 16 * MiB);
    assert_int_equal(s.zombie_bytes, 8 * MiB);
    assert_int_equal(vpmm_host_wait_count(w.t.host), 1);
    assert_ptr_equal(vpmm_host_wait_at(w.t.host, 0).signaller, w.a);
    assert_driver_matches_pool(&w.t);
    /* A slow-path malloc before a completes leaves the zombies alone... */
    tfree(w.t.pool, sep);
    assert_int_equal(vpmm_malloc(w.t.pool, 32 * MiB, w.b, &(void *){ 0 }),
                     VPMM_ERROR_OUT_OF_MEMORY);
    assert_int_equal(tstats(w.t.pool).zombie_bytes, 8 * MiB);
    /* ...and after it completes, they are unmapped. */
    vpmm_host_complete_all(w.t.host);
    assert_int_equal(vpmm_malloc(w.t.pool, 32 * MiB, w.b, &(void *){ 0 }),
                     VPMM_ERROR_OUT_OF_MEMORY);
    assert_int_equal(tstats(w.t.pool).zombie_bytes, 0);
    assert_driver_matches_pool(&w.t);
    assert_int_equal(calls(&w, VPMM_DRV_SYNCHRONIZE), 0);
    tfree(w.t.pool, y);
    tpool_close(&w.t);
}

/*
 * Own-stream pending pages are harvested without any wait; here x2's free region borders the
 * hole and is usable by its own stream, so it is extended in place: only x1's 2 pages move.
 */
static void test_harvest_own_stream_no_wait(void **state)
{
    two_t w;
    tpool_params_t prm = { .memory_limit = 16 * MiB };
    void *x1, *x2, *sep, *y;
    (void)state;
    open_two(&w, &prm);
    x1 = tmalloc(w.t.pool, 4 * MiB, w.a);
    sep = tmalloc(w.t.pool, 2 * MiB, w.a);
    x2 = tmalloc(w.t.pool, 4 * MiB, w.a);
    vpmm_host_enqueue(w.t.host, w.a);
    tfree(w.t.pool, x1);
    tfree(w.t.pool, x2);
    y = tmalloc(w.t.pool, 14 * MiB, w.a);
    assert_ptr_equal(y, x2);
    assert_int_equal(tstats(w.t.pool).pages_remapped, 2);
    assert_int_equal(tstats(w.t.pool).mapped_bytes, 16 * MiB);
    assert_int_equal(vpmm_host_wait_count(w.t.host), 0);
    tfree(w.t.pool, y);
    tfree(w.t.pool, sep);
    vpmm_host_complete_all(w.t.host);
    tpool_close(&w.t);
}

/* A stream being captured is never marked (a marker would become a graph node). */
static void test_capturing_stream_memory_not_taken(void **state)
{
    two_t w;
    tpool_params_t prm = { .memory_limit = 8 * MiB };
    void *x, *p = NULL;
    uint64_t id;
    (void)state;
    open_two(&w, &prm);
    x = tmalloc(w.t.pool, 8 * MiB, w.a);
    vpmm_host_enqueue(w.t.host, w.a);
    tfree(w.t.pool, x);
    assert_int_equal(vpmm_host_begin_capture(w.t.host, w.a, &id), VPMM_DRV_OK);
    assert_int_equal(vpmm_malloc(w.t.pool, 4 * MiB, w.b, &p), VPMM_ERROR_OUT_OF_MEMORY);
    assert_int_equal(calls(&w, VPMM_DRV_EVENT_RECORD), 0);
    assert_int_equal(vpmm_host_end_capture(w.t.host, w.a), VPMM_DRV_OK);
    p = tmalloc(w.t.pool, 4 * MiB, w.b);
    assert_ptr_equal(p, x);
    tfree(w.t.pool, p);
    vpmm_host_complete_all(w.t.host);
    tpool_close(&w.t);
}

/* Many streams round-robin with partial progress; nothing is reused before its stream allows. */
static void test_round_robin_streams(void **state)
{
    tpool_t t;
    vpmm_stream_t s[6];
    void *live[6][8] = { { 0 } };
    trng_t rng = { 42 };
    (void)state;
    tpool_open(&t, NULL);
    for (int i = 0; i < 6; i++)
        s[i] = vpmm_host_stream_create(t.host);
    for (int step = 0; step < 3000; step++) {
        int i = (int)trng_below(&rng, 6), j = (int)trng_below(&rng, 8);
        if (live[i][j]) {
            vpmm_host_enqueue(t.host, s[i]);
            tfree(t.pool, live[i][j]);
            live[i][j] = NULL;
        } else {
            live[i][j] = tmalloc(t.pool, (trng_below(&rng, 3 * MiB) + 1), s[i]);
        }
        if (step % 7 == 0)
            vpmm_host_advance(t.host, s[trng_below(&rng, 6)], 1);
    }
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 8; j++)
            if (live[i][j])
                tfree(t.pool, live[i][j]);
    assert_int_equal(vpmm_fault_calls(t.fault, VPMM_DRV_SYNCHRONIZE), 0);
    vpmm_host_complete_all(t.host);
    tpool_close(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_event_per_free),
        cmocka_unit_test(test_pending_not_reused_without_wait),
        cmocka_unit_test(test_completed_reused_without_wait),
        cmocka_unit_test(test_marker_recorded_after_free_is_conservative),
        cmocka_unit_test(test_harvest_other_stream_waits_and_guards_zombies),
        cmocka_unit_test(test_harvest_own_stream_no_wait),
        cmocka_unit_test(test_capturing_stream_memory_not_taken),
        cmocka_unit_test(test_round_robin_streams),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
