/*
 * test_faults.c — every driver call made by create, malloc (each phase), free, stream release and
 * destroy is forced to fail in turn.
 *
 * For each scenario the step under test is run again and again on a fresh pool, failing its 1st,
 * 2nd, 3rd ... driver call (whatever entry point that is) until a run makes no call that could be
 * failed. After each failure: the invariants hold, the driver holds exactly what the pool believes
 * it holds (no leaked handle, mapping, reservation or event), a failed malloc left the
 * allocations and mapped memory exactly as before (but for free handles a growth gave back before
 * it created, which stay given back), and the same operation succeeds once the fault is cleared;
 * finally the pool is destroyed and the driver is empty. The entry points that were failed are
 * tallied and must cover every entry the core uses.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

typedef struct ctx {
    tpool_t t;
    vpmm_stream_t a, b;
    void *live[32];
    size_t nlive;
} ctx_t;

enum step_kind { STEP_CREATE, STEP_MALLOC, STEP_FREE, STEP_RELEASE, STEP_DESTROY };

typedef struct scenario {
    const char *name;
    tpool_params_t params;
    enum step_kind kind;
    void (*prefix)(ctx_t *c);
    vpmm_status_t (*step)(ctx_t *c);
} scenario_t;

static void keep(ctx_t *c, void *p)
{
    c->live[c->nlive++] = p;
}

static void *take(ctx_t *c, size_t size, vpmm_stream_t s)
{
    void *p = tmalloc(c->t.pool, size, s);
    keep(c, p);
    return p;
}

static void drop(ctx_t *c, void *p)
{
    for (size_t i = 0; i < c->nlive; i++) {
        if (c->live[i] == p) {
            c->live[i] = c->live[--c->nlive];
            tfree(c->t.pool, p);
            return;
        }
    }
    fail_msg("pointer %p not tracked", p);
}

static vpmm_status_t step_malloc(ctx_t *c, size_t size, vpmm_stream_t s)
{
    void *p = NULL;
    vpmm_status_t st = vpmm_malloc(c->t.pool, size, s, &p);
    if (st == VPMM_SUCCESS)
        keep(c, p);
    return st;
}

/* ---- scenarios ------------------------------------------------------------------------------ */

static void prefix_none(ctx_t *c)
{
    (void)c;
}

static vpmm_status_t step_grow(ctx_t *c)
{
    return step_malloc(c, 5 * 2 * MiB, c->a);
}

static vpmm_status_t step_big(ctx_t *c);

/* 2 GiB at once: two 1 GiB handles (policy.c's growth plan). */
static vpmm_status_t step_two_gib(ctx_t *c)
{
    return step_malloc(c, 2 * GiB, c->a);
}

static vpmm_status_t step_subpage(ctx_t *c)
{
    return step_malloc(c, 3000, c->a);
}

/* Seed case C at 2 MiB pages: +11 pages needs 1 new page and 10 remapped from the same stream. */
static void prefix_seed_c(ctx_t *c)
{
    void *p10 = take(c, 20 * MiB, c->a);
    take(c, 2 * MiB, c->a);
    vpmm_host_enqueue(c->t.host, c->a);
    drop(c, p10);
    take(c, 8 * MiB, c->a);
}

static vpmm_status_t step_seed_c(ctx_t *c)
{
    return step_malloc(c, 22 * MiB, c->a);
}

/* Stream b harvests a's pending pages: markers, a GPU wait, and new pages. */
static void prefix_other_stream(ctx_t *c)
{
    void *x1 = take(c, 4 * MiB, c->a), *x2;
    take(c, 2 * MiB, c->b);
    x2 = take(c, 4 * MiB, c->a);
    vpmm_host_enqueue(c->t.host, c->a);
    drop(c, x1);
    drop(c, x2);
}

static vpmm_status_t step_other_stream(ctx_t *c)
{
    return step_malloc(c, 14 * MiB, c->b);
}

/* Phase 1c: b takes a's pending region behind a GPU-side wait. */
static void prefix_pending(ctx_t *c)
{
    void *x = take(c, 8 * MiB, c->a);
    vpmm_host_enqueue(c->t.host, c->a);
    drop(c, x);
}

static vpmm_status_t step_on_b(ctx_t *c)
{
    return step_malloc(c, 8 * MiB, c->b);
}

/* Phase 1b: a's work is done; b records a's marker, queries it, reuses without waiting. */
static void prefix_completed(ctx_t *c)
{
    prefix_pending(c);
    vpmm_host_complete(c->t.host, c->a);
}

/* Phase 0: zombies from case C are reclaimed by the next slow-path malloc. */
static void prefix_zombies(ctx_t *c)
{
    prefix_seed_c(c);
    assert_int_equal(step_seed_c(c), VPMM_SUCCESS);
    vpmm_host_complete_all(c->t.host);
}

static vpmm_status_t step_big(ctx_t *c)
{
    return step_malloc(c, 30 * MiB, c->a);
}

/* A new VA chunk: the first (16 MiB) is fragmented so no hole takes 6 MiB. */
static void prefix_full_chunk(ctx_t *c)
{
    take(c, 6 * MiB, c->a);
    take(c, 6 * MiB, c->a);
}

static vpmm_status_t step_new_chunk(ctx_t *c)
{
    return step_malloc(c, 6 * MiB, c->a);
}

static void prefix_one(ctx_t *c)
{
    take(c, 6 * MiB, c->a);
    vpmm_host_enqueue(c->t.host, c->a);
}

static vpmm_status_t step_free(ctx_t *c)
{
    void *p = c->live[--c->nlive];
    return vpmm_free(c->t.pool, p);
}

static void prefix_release(ctx_t *c)
{
    take(c, 6 * MiB, c->a);
    prefix_pending(c);
}

/*
 * The near-full rule's overshoot (policy.c): the device full, free memory a 4-page handle and
 * three scattered single pages; 6 pages asked. The singles leave 3 pages to find, the 4-page
 * handle is moved whole (one page over), nothing is created.
 *   [a: 4-page handle, free][p0][p1 free][p2][p3 free][p4][p5 free][hole
 */
static void prefix_overshoot(ctx_t *c)
{
    void *a = take(c, 4 * 2 * MiB, c->a), *p[6];
    for (int i = 0; i < 6; i++) {
        p[i] = take(c, 2 * MiB, c->a);
        tfree(c->t.pool, tmalloc(c->t.pool, 64, c->a)); /* a free between growths: no burst */
    }
    drop(c, a);
    for (int i = 1; i < 6; i += 2)
        drop(c, p[i]);
}

static vpmm_status_t step_overshoot(ctx_t *c)
{
    return step_malloc(c, 6 * 2 * MiB, c->a);
}

/* The same with the 4-page handle freed on b while b's work still runs: it moves behind a wait. */
static void prefix_overshoot_other(ctx_t *c)
{
    void *a = take(c, 4 * 2 * MiB, c->b), *p[6];
    for (int i = 0; i < 6; i++) {
        p[i] = take(c, 2 * MiB, c->a);
        tfree(c->t.pool, tmalloc(c->t.pool, 64, c->a)); /* a free between growths: no burst */
    }
    vpmm_host_enqueue(c->t.host, c->b);
    drop(c, a);
    for (int i = 1; i < 6; i += 2)
        drop(c, p[i]);
}

/* The near-full rule's join (region.c): a page half ready (b's free, b released with no work
 * left), half pending on a; the device full; a page asked on a. */
static void prefix_join(ctx_t *c)
{
    void *x = take(c, MiB, c->b);
    take(c, MiB, c->a);
    void *y = c->live[c->nlive - 1];
    take(c, 4 * MiB, c->a);
    drop(c, x);
    assert_int_equal(vpmm_stream_release(c->t.pool, c->b), VPMM_SUCCESS);
    vpmm_host_enqueue(c->t.host, c->a);
    drop(c, y);
}

static vpmm_status_t step_join(ctx_t *c)
{
    return step_malloc(c, 2 * MiB, c->a);
}

/* The join across two streams: a page half pending on b (its work still running), half on a; the
 * device full; a page asked on a, which waits for b's marker on the GPU. */
static void prefix_join_streams(ctx_t *c)
{
    void *x = take(c, MiB, c->b);
    take(c, MiB, c->a);
    void *y = c->live[c->nlive - 1];
    take(c, 4 * MiB, c->a);
    vpmm_host_enqueue(c->t.host, c->b);
    drop(c, x);
    vpmm_host_enqueue(c->t.host, c->a);
    drop(c, y);
}

/* A growth above the high-water mark gives a free 8-page handle it cannot use back first
 * (trim.c, vpmm_i_trim_for_growth): 10 pages asked, one free 8-page handle moved, the other
 * unmapped and released, 2 pages created.
 *   [a0 free: 8][b0][a1 free: 8][b1][hole */
static void prefix_growth_trim(ctx_t *c)
{
    void *a[2];
    for (int i = 0; i < 2; i++) {
        a[i] = take(c, 16 * MiB, c->a);
        take(c, 2 * MiB, c->a);
    }
    drop(c, a[0]);
    drop(c, a[1]);
    assert_int_equal(vpmm_trim(c->t.pool, SIZE_MAX, NULL), VPMM_SUCCESS); /* now ready */
}

static vpmm_status_t step_growth_trim(ctx_t *c)
{
    return step_malloc(c, 20 * MiB, c->a);
}

static vpmm_status_t step_release(ctx_t *c)
{
    return vpmm_stream_release(c->t.pool, c->a);
}

/* Destroy with zombies, in-flight markers, idle events, free and ready memory. */
static void prefix_busy_history(ctx_t *c)
{
    prefix_other_stream(c);
    assert_int_equal(step_other_stream(c), VPMM_SUCCESS); /* zombies guarded by a's marker */
    while (c->nlive)
        drop(c, c->live[c->nlive - 1]);
    prefix_pending(c); /* b waits on a again: more markers in flight */
    take(c, 2 * MiB, c->b);
    while (c->nlive)
        drop(c, c->live[c->nlive - 1]);
}

static vpmm_status_t step_destroy(ctx_t *c)
{
    vpmm_status_t st = vpmm_pool_destroy(c->t.pool);
    c->t.pool = NULL;
    return st;
}

static const scenario_t scenarios[] = {
    { "create with 3 preallocated pages", { .prealloc = 3 }, STEP_CREATE, prefix_none, NULL },
    { "malloc: grow 5 pages", { 0 }, STEP_MALLOC, prefix_none, step_grow },
    { "malloc: sub-page grow", { 0 }, STEP_MALLOC, prefix_none, step_subpage },
    { "malloc: 2 GiB in 1 GiB handles", { 0 }, STEP_MALLOC, prefix_none, step_two_gib },
    { "malloc: defrag, own stream (seed C)",
      { .prealloc = 15 },
      STEP_MALLOC,
      prefix_seed_c,
      step_seed_c },
    { "malloc: defrag, other stream + wait",
      { .memory_limit = 16 * MiB },
      STEP_MALLOC,
      prefix_other_stream,
      step_other_stream },
    { "malloc: phase 1c wait", { 0 }, STEP_MALLOC, prefix_pending, step_on_b },
    { "malloc: phase 1b poll", { 0 }, STEP_MALLOC, prefix_completed, step_on_b },
    { "malloc: zombie reclaim", { .prealloc = 15 }, STEP_MALLOC, prefix_zombies, step_big },
    { "malloc: new VA chunk",
      { .va_size = 16 * MiB },
      STEP_MALLOC,
      prefix_full_chunk,
      step_new_chunk },
    { "malloc: near full, a larger handle moved whole",
      { .memory_limit = 11 * 2 * MiB, .handle_pages = 4, .small_bytes = 1, .cache_percent = -1 },
      STEP_MALLOC,
      prefix_overshoot,
      step_overshoot },
    { "malloc: near full, another stream's larger handle moved whole",
      { .memory_limit = 11 * 2 * MiB, .handle_pages = 4, .small_bytes = 1, .cache_percent = -1 },
      STEP_MALLOC,
      prefix_overshoot_other,
      step_overshoot },
    { "malloc: near full, a page joined across a state boundary",
      { .memory_limit = 3 * 2 * MiB, .small_bytes = 1, .cache_percent = -1 },
      STEP_MALLOC,
      prefix_join,
      step_join },
    { "malloc: near full, a page joined across two streams",
      { .memory_limit = 3 * 2 * MiB, .small_bytes = 1, .cache_percent = -1 },
      STEP_MALLOC,
      prefix_join_streams,
      step_join },
    { "malloc: above the mark, an unused handle given back first",
      { .handle_pages = 8, .cache_percent = -1 },
      STEP_MALLOC,
      prefix_growth_trim,
      step_growth_trim },
    { "free", { 0 }, STEP_FREE, prefix_one, step_free },
    { "stream release", { 0 }, STEP_RELEASE, prefix_release, step_release },
    { "destroy", { .memory_limit = 16 * MiB }, STEP_DESTROY, prefix_busy_history, step_destroy },
};

/* ---- the sweep ------------------------------------------------------------------------------ */

static void open_ctx(ctx_t *c, const scenario_t *sc, vpmm_driver_t *fault)
{
    memset(c, 0, sizeof *c);
    if (fault == NULL)
        tpool_open(&c->t, &sc->params);
    c->a = vpmm_host_stream_create(c->t.host ? c->t.host : vpmm_fault_inner(fault));
    c->b = vpmm_host_stream_create(c->t.host ? c->t.host : vpmm_fault_inner(fault));
}

static void cleanup(ctx_t *c)
{
    if (c->t.pool != NULL) {
        while (c->nlive)
            drop(c, c->live[c->nlive - 1]);
        vpmm_host_complete_all(c->t.host);
    }
    tpool_close(&c->t);
}

/* One failure at call k of the step; returns whether a failure was injected at all. */
static int run_once(const void *scenario, uint64_t k, vpmm_dres_t result)
{
    const scenario_t *sc = scenario;
    ctx_t c;
    vpmm_stats_t before, after;
    vpmm_status_t st;
    int injected;

    if (sc->kind == STEP_CREATE) {
        vpmm_host_options_t ho = { .granularity = 0 };
        vpmm_driver_t *host, *fault;
        assert_int_equal(vpmm_host_open(&ho, &host), VPMM_DRV_OK);
        assert_int_equal(vpmm_fault_wrap(host, &fault), VPMM_DRV_OK);
        vpmm_fault_fail_any_nth(fault, k, result);
        st = tpool_try_open(&c.t, &sc->params, fault);
        injected = tfault_settle(fault);
        if (st != VPMM_SUCCESS) {
            assert_null(c.t.pool);
            assert_no_driver_leaks(fault);
            fault->close(fault);
            tpool_open(&c.t, &sc->params); /* the next attempt succeeds */
        }
        c.nlive = 0;
        assert_int_equal(tstats(c.t.pool).mapped_bytes, 3 * 2 * MiB);
        cleanup(&c);
        return injected;
    }

    open_ctx(&c, sc, NULL);
    sc->prefix(&c);
    before = tstats(c.t.pool);
    vpmm_fault_fail_any_nth(c.t.fault, k, result);
    st = sc->step(&c);
    injected = tfault_settle(c.t.fault);

    if (sc->kind == STEP_DESTROY) {
        /* Each teardown call gets a second try, so one failure leaks nothing. */
        assert_int_equal(st, VPMM_SUCCESS);
        assert_no_driver_leaks(c.t.fault);
        c.t.fault->close(c.t.fault);
        return injected;
    }
    CHECK_POOL(c.t.pool);
    assert_driver_matches_pool(&c.t);
    if (st != VPMM_SUCCESS) {
        after = tstats(c.t.pool);
        assert_true(st == VPMM_ERROR_DRIVER || st == VPMM_ERROR_OUT_OF_MEMORY);
        assert_int_equal(after.live_bytes, before.live_bytes);
        assert_int_equal(after.live_allocs, before.live_allocs);
        /* Free handles given back before a growth stay given back (trim.c): nothing else. */
        assert_int_equal(before.mapped_bytes - after.mapped_bytes,
                         (after.pages_released - before.pages_released) * 2 * MiB);
        assert_int_equal(after.pages_created, before.pages_created);
        assert_int_equal(after.pages_remapped, before.pages_remapped);
        if (sc->kind == STEP_MALLOC) {
            assert_int_equal(sc->step(&c), VPMM_SUCCESS); /* the next malloc succeeds */
            CHECK_POOL(c.t.pool);
            assert_driver_matches_pool(&c.t);
        }
    }
    if (sc->kind == STEP_FREE)
        assert_int_equal(st, VPMM_SUCCESS); /* free makes no driver call at all */
    cleanup(&c);
    return injected;
}

static void test_sweep_errors(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++)
        tfault_sweep(scenarios[i].name, run_once, &scenarios[i], VPMM_DRV_ERROR);
}

static void test_sweep_out_of_memory(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++)
        tfault_sweep(scenarios[i].name, run_once, &scenarios[i], VPMM_DRV_OUT_OF_MEMORY);
}

/* Every entry point the core uses was failed at least once. */
static void test_coverage(void **state)
{
    static const vpmm_drv_entry_t used[] = {
        VPMM_DRV_GRANULARITY,       VPMM_DRV_VA_RESERVE,   VPMM_DRV_VA_FREE,
        VPMM_DRV_MEM_CREATE,        VPMM_DRV_MEM_RELEASE,  VPMM_DRV_MEM_MAP,
        VPMM_DRV_MEM_UNMAP,         VPMM_DRV_SET_ACCESS,   VPMM_DRV_EVENT_CREATE,
        VPMM_DRV_EVENT_DESTROY,     VPMM_DRV_EVENT_RECORD, VPMM_DRV_EVENT_QUERY,
        VPMM_DRV_STREAM_WAIT_EVENT, VPMM_DRV_CAPTURE_INFO, VPMM_DRV_SYNCHRONIZE,
    };
    (void)state;
    tfault_assert_covered(used, sizeof used / sizeof used[0]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sweep_errors),
        cmocka_unit_test(test_sweep_out_of_memory),
        cmocka_unit_test(test_coverage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
