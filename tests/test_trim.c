/*
 * test_trim.c — vpmm_trim (src/core/trim.c): free pages go back to the driver, all or down to a
 * target; memory still pending on a busy stream, pages shared with a live allocation, zombies and
 * pinned graph pools stay; idle graph pools give theirs; emptied extra chunks go; data in what
 * stays is intact; every driver call of a trim fails in turn without losing anything (a failed
 * release is kept and retried); and the cap (VPMM_MAX_BYTES, vpmm_set_max_bytes) bounds growth,
 * bursts included. Before a growth above the pool's high-water mark, free handles the growth
 * cannot use go back first (vpmm_i_trim_for_growth), and only then; their failed releases are
 * kept for a later trim too.
 * The invariants and the driver's view are checked after every step.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_test_util.h"

static size_t trim(tpool_t *t, size_t target)
{
    size_t released = (size_t)-1;
    assert_int_equal(vpmm_trim(t->pool, target, &released), VPMM_SUCCESS);
    CHECK_POOL(t->pool);
    assert_driver_matches_pool(t);
    return released;
}

static void test_trim_all_and_to_target(void **state)
{
    tpool_t t;
    vpmm_stream_t s;
    vpmm_stats_t st;
    void *p[1];
    unsigned char *keep;
    (void)state;
    tpool_open(&t, NULL);
    s = vpmm_host_stream_create(t.host);
    keep = tmalloc(t.pool, 1000, s); /* the first page, shared with free memory after it */
    memset(keep, 0x77, 1000);
    p[0] = tmalloc(t.pool, 16 * MiB, s); /* the rest of that page and eight more, one handle each */
    tfree(t.pool, p[0]);
    assert_int_equal(tstats(t.pool).mapped_bytes, 18 * MiB);

    assert_int_equal(trim(&t, 12 * MiB), 6 * MiB); /* down to the target: whole pages only */
    assert_int_equal(tstats(t.pool).mapped_bytes, 12 * MiB);
    assert_int_equal(trim(&t, 0), 10 * MiB); /* every free page; keep's page stays */
    st = tstats(t.pool);
    assert_int_equal(st.mapped_bytes, 2 * MiB);
    assert_int_equal(st.pages_released, 8);
    assert_int_equal(st.handles, 1);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(keep[i], 0x77);
    assert_int_equal(trim(&t, 0), 0); /* nothing more */
    assert_int_equal(vpmm_trim(NULL, 0, NULL), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_trim(t.pool, 0, NULL), VPMM_SUCCESS); /* out_released may be NULL */
    /* The pool grows again as usual. */
    p[0] = tmalloc(t.pool, 4 * MiB, s);
    tfree(t.pool, p[0]);
    tfree(t.pool, keep);
    tpool_close(&t);
}

static void test_pending_memory_stays(void **state)
{
    tpool_t t;
    vpmm_stream_t s;
    void *a;
    (void)state;
    tpool_open(&t, NULL);
    s = vpmm_host_stream_create(t.host);
    a = tmalloc(t.pool, 4 * MiB, s);
    vpmm_host_enqueue(t.host, s); /* work on s still uses a */
    tfree(t.pool, a);
    assert_int_equal(trim(&t, 0), 0); /* the GPU may still be using it */
    vpmm_host_complete(t.host, s);
    assert_int_equal(trim(&t, 0), 4 * MiB); /* its marker completed: it goes */
    tpool_close(&t);
}

static void test_zombies_and_chunks(void **state)
{
    tpool_t t;
    vpmm_stream_t a, b;
    void *x[4], *big;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .va_size = 8 * MiB });
    a = vpmm_host_stream_create(t.host);
    b = vpmm_host_stream_create(t.host);
    for (int i = 0; i < 4; i++)
        x[i] = tmalloc(t.pool, 2 * MiB, a); /* fills the first chunk */
    vpmm_host_enqueue(t.host, a);
    tfree(t.pool, x[1]);
    tfree(t.pool, x[3]);
    big = tmalloc(t.pool, 6 * MiB, b); /* a second chunk: a's two pages remapped + one new */
    assert_int_equal(tstats(t.pool).va_chunks, 2);
    assert_true(tstats(t.pool).zombie_bytes > 0);
    assert_int_equal(trim(&t, 0), 0); /* the remapped pages are live elsewhere; zombies wait */
    tfree(t.pool, big);
    tfree(t.pool, x[0]);
    tfree(t.pool, x[2]);
    vpmm_host_complete_all(t.host);
    assert_int_equal(trim(&t, 0), 10 * MiB); /* everything; the empty second chunk goes too */
    assert_int_equal(tstats(t.pool).va_chunks, 1);
    assert_int_equal(tstats(t.pool).zombie_bytes, 0);
    tpool_close(&t);
}

#if VPMM_HAVE_GRAPHS
static void test_graph_pools(void **state)
{
    tpool_t t;
    vpmm_stream_t s;
    vpmm_graph_pool_t *gp;
    vpmm_graph_pool_stats_t gs;
    vpmm_graph_t g;
    void *a, *keep;
    (void)state;
    tpool_open(&t, NULL);
    s = vpmm_host_stream_create(t.host);
    gp = tgp_create(&t);
    tcapture_begin(&t, gp, s);
    keep = tmalloc(t.pool, 1 * MiB, s);
    a = tmalloc(t.pool, 6 * MiB, s);
    tfree(t.pool, a);
    g = tcapture_end(&t, s);
    assert_int_equal(trim(&t, 0), 0); /* pinned: its graph may use every page */
    assert_int_equal(vpmm_graph_destroy(t.pool, g), VPMM_SUCCESS);
    assert_int_equal(trim(&t, 0), 6 * MiB); /* idle: its free pages go, keep's page stays */
    gs = tgp_stats(gp);
    assert_int_equal(gs.mapped_bytes, 2 * MiB);
    assert_int_equal(gs.live_allocs, 1);
    tfree(t.pool, keep);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    tpool_close(&t);
}
#endif

/* Every driver call a trim makes fails in turn (the 1st, 2nd, ...), then everything again. */
static void test_faults(void **state)
{
    vpmm_dres_t results[2] = { VPMM_DRV_ERROR, VPMM_DRV_OUT_OF_MEMORY };
    (void)state;
    for (int r = 0; r < 2; r++) {
        for (uint64_t k = 1;; k++) {
            tpool_t t;
            vpmm_stream_t s;
            vpmm_stats_t before, after;
            vpmm_status_t st;
            size_t released = 0;
            void *p[3];
            int injected;
            tpool_open(&t, NULL);
            s = vpmm_host_stream_create(t.host);
            for (int i = 0; i < 3; i++)
                p[i] = tmalloc(t.pool, 2 * MiB, s);
            for (int i = 0; i < 3; i++)
                tfree(t.pool, p[i]);
            before = tstats(t.pool);
            vpmm_fault_fail_any_nth(t.fault, k, results[r]);
            st = vpmm_trim(t.pool, 0, &released);
            injected = vpmm_fault_injected(t.fault) > 0;
            vpmm_fault_clear(t.fault);
            CHECK_POOL(t.pool);
            assert_driver_matches_pool(&t);
            after = tstats(t.pool);
            assert_int_equal(after.mapped_bytes + released, before.mapped_bytes);
            if (st != VPMM_SUCCESS)
                assert_true(injected &&
                            (st == VPMM_ERROR_DRIVER || st == VPMM_ERROR_OUT_OF_MEMORY));
            /* A second trim gives back the rest (and retries a failed release). */
            trim(&t, 0);
            assert_int_equal(tstats(t.pool).mapped_bytes, 0);
            tpool_close(&t);
            if (!injected)
                break;
        }
    }
}

/* Unmap succeeds, both releases fail and so does mapping back: the handle is kept, unmapped,
 * and released by the next trim (or by the pool's destruction). */
static void test_release_kept_for_later(void **state)
{
    tpool_t t;
    void *p;
    size_t released = 0;
    (void)state;
    for (int later_by_destroy = 0; later_by_destroy < 2; later_by_destroy++) {
        tpool_open(&t, NULL);
        p = tmalloc(t.pool, 2 * MiB, NULL);
        tfree(t.pool, p);
        vpmm_fault_fail_from(t.fault, VPMM_DRV_MEM_RELEASE, 1, VPMM_DRV_ERROR);
        vpmm_fault_fail_nth(t.fault, VPMM_DRV_MEM_MAP, 1, VPMM_DRV_ERROR);
        assert_int_equal(vpmm_trim(t.pool, 0, &released), VPMM_ERROR_DRIVER);
        vpmm_fault_clear(t.fault);
        assert_int_equal(released, 2 * MiB); /* unmapped: no longer the pool's memory */
        assert_int_equal(t.pool->nunreleased, 1);
        assert_int_equal(t.pool->unreleased_reserved, 0); /* the trim's room was given back */
        CHECK_POOL(t.pool);
        assert_driver_matches_pool(&t);
        if (!later_by_destroy) {
            trim(&t, 0);
            assert_int_equal(t.pool->nunreleased, 0);
        }
        tpool_close(&t); /* asserts that the driver holds nothing */
    }
}

/*
 * Handles of 8 pages. Two free 8-page handles, each between live blocks; 10 pages asked. The
 * harvest moves one (8 <= 10) and leaves 2 pages to create; the other (8 > 2) cannot serve. The
 * growth would go 2 pages over the high-water mark, so that handle goes back first:
 *   [A1 free: 8][b1][A2 free: 8][b2][hole   ->   [zombie A1][b1][ hole ][b2][A1'|2 new]
 */
static void two_free_handles(tpool_t *t, vpmm_stream_t s, unsigned char *b[2], int ready)
{
    void *a[2];
    for (int i = 0; i < 2; i++) {
        a[i] = tmalloc(t->pool, 16 * MiB, s);
        b[i] = tmalloc(t->pool, 2 * MiB, s);
        memset(b[i], 0x30 + i, 2 * MiB);
    }
    tfree(t->pool, a[0]);
    tfree(t->pool, a[1]);
    if (ready)
        assert_int_equal(trim(t, SIZE_MAX), 0); /* marks and polls s: its free memory is ready */
}

static void check_b(unsigned char *b[2])
{
    for (int i = 0; i < 2; i++)
        for (size_t k = 0; k < 2 * MiB; k += 4093)
            assert_int_equal(b[i][k], 0x30 + i);
}

/* The growth-trim tests' pool: 8-page handles, no cache, one stream; b: two_free_handles' live
 * blocks, checked and freed by growth_close. */
typedef struct growth_fx {
    tpool_t t;
    vpmm_stream_t s;
    unsigned char *b[2];
} growth_fx_t;

static void growth_open(growth_fx_t *f)
{
    const tpool_params_t pp = { .handle_pages = 8, .cache_percent = -1 };
    tpool_open(&f->t, &pp);
    f->s = vpmm_host_stream_create(f->t.host);
}

static void growth_close(growth_fx_t *f)
{
    check_b(f->b);
    tfree(f->t.pool, f->b[0]);
    tfree(f->t.pool, f->b[1]);
    tpool_close(&f->t);
}

static void test_growth_above_the_mark_gives_unused_handles_back(void **state)
{
    growth_fx_t f;
    vpmm_stats_t before, after;
    unsigned char *x;
    (void)state;
    growth_open(&f);
    two_free_handles(&f.t, f.s, f.b, 1);
    before = tstats(f.t.pool);
    assert_int_equal(before.peak_mapped_bytes, before.mapped_bytes); /* at the mark */
    x = tmalloc(f.t.pool, 20 * MiB, f.s);
    memset(x, 0x55, 20 * MiB);
    CHECK_POOL(f.t.pool);
    assert_driver_matches_pool(&f.t);
    after = tstats(f.t.pool);
    assert_int_equal(after.pages_released - before.pages_released, 8); /* the unused handle */
    assert_int_equal(after.pages_created - before.pages_created, 2);
    assert_int_equal(after.mapped_bytes, before.mapped_bytes - 12 * MiB);
    assert_int_equal(after.peak_mapped_bytes, before.peak_mapped_bytes); /* no higher */
    check_b(f.b);
    for (size_t k = 0; k < 20 * MiB; k += 4093)
        assert_int_equal(x[k], 0x55);
    tfree(f.t.pool, x);
    growth_close(&f);
}

/* The growth trim's releases fail (twice each): the handle is kept, unmapped, for the next trim;
 * the malloc succeeds all the same, and the room reserved for the failure is given back. */
static void test_growth_trim_release_kept_for_later(void **state)
{
    growth_fx_t f;
    unsigned char *x;
    (void)state;
    growth_open(&f);
    two_free_handles(&f.t, f.s, f.b, 1);
    vpmm_fault_fail_run(f.t.fault, VPMM_DRV_MEM_RELEASE, 1, 2, VPMM_DRV_ERROR);
    x = tmalloc(f.t.pool, 20 * MiB, f.s);
    vpmm_fault_clear(f.t.fault);
    assert_int_equal(f.t.pool->nunreleased, 1);
    assert_int_equal(f.t.pool->unreleased_reserved, 0);
    CHECK_POOL(f.t.pool);
    assert_driver_matches_pool(&f.t);
    memset(x, 0x66, 20 * MiB);
    check_b(f.b);
    trim(&f.t, SIZE_MAX); /* retries the kept release */
    assert_int_equal(f.t.pool->nunreleased, 0);
    tfree(f.t.pool, x);
    growth_close(&f);
}

/* Below the mark nothing goes back: the footprint is the mark, and a release would only cost a
 * later growth. Memory pending on a busy stream never goes back. */
static void test_growth_below_the_mark_or_pending_keeps_handles(void **state)
{
    growth_fx_t f;
    vpmm_stats_t before, after;
    void *x, *big;
    (void)state;
    growth_open(&f);
    big = tmalloc(f.t.pool, 64 * MiB, f.s); /* sets the mark */
    tfree(f.t.pool, big);
    trim(&f.t, 0);
    assert_int_equal(tstats(f.t.pool).mapped_bytes, 0);
    two_free_handles(&f.t, f.s, f.b, 1);
    before = tstats(f.t.pool);
    assert_true(before.mapped_bytes + 4 * MiB <= before.peak_mapped_bytes);
    x = tmalloc(f.t.pool, 20 * MiB, f.s); /* 2 pages created, still below the mark */
    after = tstats(f.t.pool);
    assert_int_equal(after.pages_released, before.pages_released);
    assert_int_equal(after.mapped_bytes, before.mapped_bytes + 4 * MiB);
    check_b(f.b);
    tfree(f.t.pool, x);
    growth_close(&f);

    /* At the mark, but the unused handle is pending on a stream whose work is not done. */
    growth_open(&f);
    two_free_handles(&f.t, f.s, f.b, 0);
    vpmm_host_enqueue(f.t.host, f.s);
    {
        vpmm_stream_t s2 = vpmm_host_stream_create(f.t.host);
        before = tstats(f.t.pool);
        /* s's free memory may move (with a GPU-side wait), never go back */
        x = tmalloc(f.t.pool, 20 * MiB, s2);
        CHECK_POOL(f.t.pool);
        assert_driver_matches_pool(&f.t);
        after = tstats(f.t.pool);
        assert_true(after.peak_mapped_bytes > before.peak_mapped_bytes); /* above the mark */
        assert_int_equal(after.pages_released, before.pages_released);
        tfree(f.t.pool, x);
    }
    vpmm_host_complete_all(f.t.host);
    growth_close(&f);
}

/* The cap bounds growth: a burst stops at it, and past it malloc reports out of memory. */
static void test_cap(void **state)
{
    tpool_t t;
    void *p[16];
    void *q = NULL;
    int n = 0;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .max_bytes = 24 * MiB });
    /* A homogeneous burst grows geometrically, but never past the cap. */
    while (n < 16 && vpmm_malloc(t.pool, 2 * MiB, NULL, &p[n]) == VPMM_SUCCESS) {
        assert_true(tstats(t.pool).mapped_bytes <= 24 * MiB);
        CHECK_POOL(t.pool);
        n++;
    }
    assert_int_equal(n, 12);
    assert_int_equal(tstats(t.pool).mapped_bytes, 24 * MiB);
    assert_int_equal(vpmm_malloc(t.pool, 256, NULL, &q), VPMM_ERROR_OUT_OF_MEMORY);
    assert_null(q);
    tfree(t.pool, p[--n]);
    q = tmalloc(t.pool, 256, NULL); /* room again */
    tfree(t.pool, q);
    while (n > 0)
        tfree(t.pool, p[--n]);
    /* A request larger than the cap fails at once, whatever the device has. */
    assert_int_equal(vpmm_malloc(t.pool, 25 * MiB, NULL, &q), VPMM_ERROR_OUT_OF_MEMORY);
    CHECK_POOL(t.pool);
    tpool_close(&t);
}

/* vpmm_set_max_bytes: the cap set, lowered below what is mapped, lifted; bad values refused. */
static void test_set_cap(void **state)
{
    tpool_t t;
    void *p[8];
    void *q = NULL;
    (void)state;
    tpool_open(&t, NULL);
    assert_int_equal(vpmm_set_max_bytes(NULL, 0), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_set_max_bytes(t.pool, 2 * MiB - 1), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(tstats(t.pool).max_bytes, 0); /* unchanged */
    assert_int_equal(vpmm_set_max_bytes(t.pool, 9 * MiB), VPMM_SUCCESS);
    assert_int_equal(tstats(t.pool).max_bytes, 8 * MiB); /* whole pages */
    for (int i = 0; i < 4; i++)
        p[i] = tmalloc(t.pool, 2 * MiB, NULL);
    assert_int_equal(vpmm_malloc(t.pool, 2 * MiB, NULL, &q), VPMM_ERROR_OUT_OF_MEMORY);
    assert_null(q);
    CHECK_POOL(t.pool);
    /* Lowered below what is mapped: nothing moves; freed memory goes with a trim to the cap. */
    assert_int_equal(vpmm_set_max_bytes(t.pool, 4 * MiB), VPMM_SUCCESS);
    assert_int_equal(tstats(t.pool).mapped_bytes, 8 * MiB);
    tfree(t.pool, p[3]);
    tfree(t.pool, p[2]);
    assert_int_equal(trim(&t, 4 * MiB), 4 * MiB);
    assert_int_equal(vpmm_malloc(t.pool, 2 * MiB, NULL, &q), VPMM_ERROR_OUT_OF_MEMORY);
    /* Lifted: growth again. */
    assert_int_equal(vpmm_set_max_bytes(t.pool, 0), VPMM_SUCCESS);
    for (int i = 2; i < 8; i++)
        p[i] = tmalloc(t.pool, 2 * MiB, NULL);
    assert_true(tstats(t.pool).mapped_bytes >= 16 * MiB);
    CHECK_POOL(t.pool);
    for (int i = 0; i < 8; i++)
        tfree(t.pool, p[i]);
    tpool_close(&t);
}

#if VPMM_HAVE_GRAPHS
/*
 * Under the cap, the placement that maps the fewest pages may need new memory where another needs
 * none: here it fills a one-page hole and joins the free regions on both sides (1 page to map,
 * created: the cap has no room), while a span elsewhere made of those regions' 10 free pages,
 * moved, needs nothing new. The cap refusing the first, the second is taken.
 */
static void test_cap_tries_the_placement_that_creates_least(void **state)
{
    tpool_t t;
    vpmm_graph_pool_t *gp;
    vpmm_stream_t s, c;
    vpmm_graph_t g;
    vpmm_stats_t st;
    size_t released;
    void *a, *b, *cc, *x, *big;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .max_bytes = 22 * MiB, .cache_percent = -1 });
    s = vpmm_host_stream_create(t.host);
    c = vpmm_host_stream_create(t.host);
    a = tmalloc(t.pool, 10 * MiB, s);  /* pages 0-4 */
    b = tmalloc(t.pool, 2 * MiB, s);   /* page 5 */
    cc = tmalloc(t.pool, 10 * MiB, s); /* pages 6-10: the cap is reached */
    tfree(t.pool, b);
    assert_int_equal(vpmm_trim(t.pool, 0, &released), VPMM_SUCCESS); /* page 5 becomes a hole */
    assert_int_equal(released, 2 * MiB);
    /* A graph takes the room left under the cap, in its own chunk (fresh memory). */
    gp = tgp_create(&t);
    tcapture_begin(&t, gp, c);
    x = tmalloc(t.pool, 2 * MiB, c);
    g = tcapture_end(&t, c);
    assert_int_equal(tstats(t.pool).mapped_bytes, 22 * MiB);
    tfree(t.pool, a);
    tfree(t.pool, cc);
    CHECK_POOL(t.pool);

    big = tmalloc(t.pool, 16 * MiB, s); /* 8 of the 10 free pages, moved; nothing created */
    st = tstats(t.pool);
    assert_int_equal(st.mapped_bytes, 22 * MiB);
    assert_int_equal(st.ooms, 0);
    assert_true(st.pages_remapped >= 3);
    assert_driver_matches_pool(&t);
    tfree(t.pool, big);
    tfree(t.pool, x);
    tgraph_destroy(&t, g);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    tpool_close(&t);
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trim_all_and_to_target),
        cmocka_unit_test(test_pending_memory_stays),
        cmocka_unit_test(test_zombies_and_chunks),
#if VPMM_HAVE_GRAPHS
        cmocka_unit_test(test_graph_pools),
#endif
        cmocka_unit_test(test_faults),
        cmocka_unit_test(test_release_kept_for_later),
        cmocka_unit_test(test_growth_above_the_mark_gives_unused_handles_back),
        cmocka_unit_test(test_growth_below_the_mark_or_pending_keeps_handles),
        cmocka_unit_test(test_growth_trim_release_kept_for_later),
        cmocka_unit_test(test_cap),
        cmocka_unit_test(test_set_cap),
#if VPMM_HAVE_GRAPHS
        cmocka_unit_test(test_cap_tries_the_placement_that_creates_least),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
