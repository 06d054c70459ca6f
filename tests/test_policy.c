/*
 * test_policy.c — policy.c's decisions, observed before anything is executed: best fit with and
 * without waiting, the choice of span for phase 2 (extend a usable neighbour up, down, or both, or
 * use the best-fitting hole), and the harvest order (own stream, ready memory, other streams
 * oldest first; small regions first; never the span's own neighbours).
 */
#include <string.h>

#include "test_util.h"

#define PG (2 * MiB)

typedef struct fixture {
    tpool_t t;
    vpmm_stream_t a, b;
    vpmm_stream_rec_t *sa, *sb;
    uintptr_t base;
} fixture_t;

static void open_fx(fixture_t *f, const tpool_params_t *prm)
{
    tpool_open(&f->t, prm);
    f->a = vpmm_host_stream_create(f->t.host);
    f->b = vpmm_host_stream_create(f->t.host);
    f->base = f->t.pool->chunks->base;
}

static void streams_of(fixture_t *f)
{
    f->sa = vpmm_i_stream_get(f->t.pool, vpmm_i_stream_key(f->t.pool, f->a));
    f->sb = vpmm_i_stream_get(f->t.pool, vpmm_i_stream_key(f->t.pool, f->b));
}

static void test_fit_nowait_prefers_best_then_own(void **state)
{
    fixture_t f;
    tpool_params_t prm = { .prealloc = 8 };
    void *big, *sep, *mid, *sep2;
    vpmm_region_t *r;
    (void)state;
    open_fx(&f, &prm);
    big = tmalloc(f.t.pool, 3 * PG, f.a);
    sep = tmalloc(f.t.pool, PG, f.a);
    mid = tmalloc(f.t.pool, 2 * PG, f.a);
    sep2 = tmalloc(f.t.pool, PG, f.a);
    /* Left: 1 page ready at the end of the preallocation. */
    tfree(f.t.pool, big);
    tfree(f.t.pool, mid);
    vpmm_i_lock(f.t.pool);
    streams_of(&f);
    r = vpmm_i_fit_nowait(f.t.pool, f.sa, PG);
    assert_int_equal(r->addr, f.base + 7 * PG); /* the exact 1-page ready region */
    r = vpmm_i_fit_nowait(f.t.pool, f.sa, 2 * PG);
    assert_int_equal(r->addr, (uintptr_t)mid); /* own, 2 pages, beats own 3 pages */
    r = vpmm_i_fit_nowait(f.t.pool, f.sb, 2 * PG);
    assert_null(r); /* b may not use a's pending memory without waiting */
    r = vpmm_i_fit_wait(f.t.pool, f.sb, 2 * PG);
    assert_int_equal(r->addr, (uintptr_t)mid);
    assert_null(vpmm_i_fit_wait(f.t.pool, f.sb, 4 * PG));
    vpmm_i_unlock(f.t.pool);
    tfree(f.t.pool, sep);
    tfree(f.t.pool, sep2);
    tpool_close(&f.t);
}

static void plan_for(fixture_t *f, vpmm_stream_t s, size_t size, vpmm_plan_t *plan)
{
    vpmm_stream_rec_t *st = vpmm_i_stream_get(f->t.pool, vpmm_i_stream_key(f->t.pool, s));
    memset(plan, 0, sizeof *plan);
    assert_int_equal(vpmm_i_plan_make(f->t.pool, st, size, 0, 0, plan), VPMM_SUCCESS);
}

/* [F free on a][hole ...): grow F upwards. */
static void test_span_extends_left_neighbour(void **state)
{
    fixture_t f;
    vpmm_plan_t plan;
    void *x, *y;
    (void)state;
    open_fx(&f, NULL);
    x = tmalloc(f.t.pool, PG, f.a);
    y = tmalloc(f.t.pool, 3 * PG, f.a);
    tfree(f.t.pool, y); /* [x][y free, 3 pages][hole] */
    vpmm_i_lock(f.t.pool);
    plan_for(&f, f.a, 5 * PG, &plan);
    assert_ptr_equal(plan.left->addr, (uintptr_t)y);
    assert_null(plan.right);
    assert_int_equal(plan.npages, 2);
    assert_int_equal(plan.map_at, f.base + 4 * PG);
    assert_int_equal(plan.nnew, 2);
    vpmm_i_plan_fini(&plan);
    /* Stream b cannot extend a's pending region: it gets a fresh span. */
    plan_for(&f, f.b, 5 * PG, &plan);
    assert_null(plan.left);
    assert_int_equal(plan.npages, 5);
    assert_int_equal(plan.nnew, 2); /* 3 of a's pages are harvested (behind a wait) */
    assert_int_equal(plan.nruns, 1);
    vpmm_i_plan_fini(&plan);
    vpmm_i_unlock(f.t.pool);
    tfree(f.t.pool, x);
    tpool_close(&f.t);
}

/*
 * Build [X][hole][Z][W][...] on stream a: Y between X and Z is harvested by a 3-page malloc and,
 * once a's work is done, its zombie becomes a hole. Then:
 *   Z free, X allocated: a 3-page request grows Z downwards into the hole's top page;
 *   X and Z free:        a 5-page request fills the hole and joins both.
 */
static void make_hole_between(fixture_t *f, void **x, void **z, void **w, void **v)
{
    void *y;
    *x = tmalloc(f->t.pool, 2 * PG, f->a);
    y = tmalloc(f->t.pool, 2 * PG, f->a);
    *z = tmalloc(f->t.pool, 2 * PG, f->a);
    *w = tmalloc(f->t.pool, PG, f->a);
    tfree(f->t.pool, y);
    *v = tmalloc(f->t.pool, 3 * PG, f->a); /* y's 2 pages + 1 new, at the end */
    assert_int_equal(tstats(f->t.pool).pages_remapped, 2);
    vpmm_host_complete_all(f->t.host);
    vpmm_i_lock(f->t.pool);
    vpmm_i_reclaim_zombies(f->t.pool, 1);
    vpmm_i_unlock(f->t.pool);
    CHECK_POOL(f->t.pool);
    /* mapped now: x(2) z(2) w(1) v(3); the rest, y's old VA included, is hole */
    assert_int_equal(tstats(f->t.pool).hole_bytes, f->t.pool->opt.va_size - 8 * PG);
}

static void test_span_extends_right_neighbour(void **state)
{
    fixture_t f;
    vpmm_plan_t plan;
    void *x, *z, *w, *v;
    (void)state;
    open_fx(&f, NULL);
    make_hole_between(&f, &x, &z, &w, &v);
    tfree(f.t.pool, z);
    vpmm_i_lock(f.t.pool);
    plan_for(&f, f.a, 3 * PG, &plan);
    assert_null(plan.left);
    assert_ptr_equal(plan.right->addr, (uintptr_t)z);
    assert_int_equal(plan.npages, 1);
    assert_int_equal(plan.map_at, f.base + 3 * PG); /* the hole's top page, just below z */
    vpmm_i_plan_fini(&plan);
    vpmm_i_unlock(f.t.pool);
    /* Executed: the allocation starts in the hole and runs into z. */
    z = tmalloc(f.t.pool, 3 * PG, f.a);
    assert_int_equal((uintptr_t)z, f.base + 3 * PG);
    tfree(f.t.pool, x);
    tfree(f.t.pool, z);
    tfree(f.t.pool, w);
    tfree(f.t.pool, v);
    tpool_close(&f.t);
}

static void test_span_joins_both_neighbours(void **state)
{
    fixture_t f;
    vpmm_plan_t plan;
    void *x, *z, *w, *v, *all;
    (void)state;
    open_fx(&f, NULL);
    make_hole_between(&f, &x, &z, &w, &v);
    tfree(f.t.pool, x);
    tfree(f.t.pool, z);
    vpmm_i_lock(f.t.pool);
    plan_for(&f, f.a, 5 * PG, &plan);
    assert_ptr_equal(plan.left->addr, (uintptr_t)x);
    assert_ptr_equal(plan.right->addr, (uintptr_t)z);
    assert_int_equal(plan.npages, 2);
    assert_int_equal(plan.nnew, 2);
    assert_int_equal(plan.map_at, f.base + 2 * PG);
    vpmm_i_plan_fini(&plan);
    vpmm_i_unlock(f.t.pool);
    all = tmalloc(f.t.pool, 5 * PG, f.a);
    assert_ptr_equal(all, x);
    tfree(f.t.pool, all);
    tfree(f.t.pool, w);
    tfree(f.t.pool, v);
    tpool_close(&f.t);
}

/* No hole fits in a full chunk: the plan asks for a new chunk, harvesting all it can. */
static void test_span_in_new_chunk(void **state)
{
    fixture_t f;
    tpool_params_t prm = { .va_size = 16 * PG };
    vpmm_plan_t plan;
    void *p[4];
    (void)state;
    open_fx(&f, &prm);
    for (int i = 0; i < 4; i++)
        p[i] = tmalloc(f.t.pool, 4 * PG, f.a); /* fills the chunk: 16 pages */
    vpmm_host_enqueue(f.t.host, f.a);
    for (int i = 0; i < 3; i++)
        tfree(f.t.pool, p[i]);
    vpmm_i_lock(f.t.pool);
    plan_for(&f, f.b, 13 * PG, &plan); /* more than a's 12 pending pages */
    assert_null(plan.hole);
    assert_int_equal(plan.npages, 13);
    assert_int_equal(plan.nnew, 1);
    vpmm_i_plan_fini(&plan);
    vpmm_i_unlock(f.t.pool);
    vpmm_host_complete_all(f.t.host);
    tfree(f.t.pool, p[3]);
    tpool_close(&f.t);
}

/* Harvest order: own stream first, then ready memory, then other streams oldest first. */
static void test_harvest_order(void **state)
{
    fixture_t f;
    tpool_params_t prm = { .prealloc = 2 };
    vpmm_plan_t plan;
    void *oa, *ob1, *ob2, *own, *seps[4];
    (void)state;
    open_fx(&f, &prm);
    /* [ready: 2 pages] preallocated; then a 1-page block per owner, separated. */
    seps[0] = tmalloc(f.t.pool, 2 * PG, NULL); /* takes the 2 ready pages */
    ob1 = tmalloc(f.t.pool, PG, f.b);
    seps[1] = tmalloc(f.t.pool, PG, NULL);
    oa = tmalloc(f.t.pool, PG, f.a);
    seps[2] = tmalloc(f.t.pool, PG, NULL);
    ob2 = tmalloc(f.t.pool, PG, f.b);
    seps[3] = tmalloc(f.t.pool, PG, NULL);
    own = NULL;
    vpmm_host_enqueue(f.t.host, f.a);
    vpmm_host_enqueue(f.t.host, f.b);
    tfree(f.t.pool, ob1); /* b, older */
    tfree(f.t.pool, oa);  /* a */
    tfree(f.t.pool, ob2); /* b, younger (merges with nothing: separated) */
    vpmm_i_lock(f.t.pool);
    /* Stream a asks for 10 pages: its own page first, then b's, oldest first. */
    plan_for(&f, f.a, 10 * PG, &plan);
    assert_int_equal(plan.nruns, 3);
    assert_int_equal(plan.runs[0].addr, (uintptr_t)oa);
    assert_int_equal(plan.runs[1].addr, (uintptr_t)ob1);
    assert_int_equal(plan.runs[2].addr, (uintptr_t)ob2);
    assert_int_equal(plan.nnew, 7);
    vpmm_i_plan_fini(&plan);
    vpmm_i_unlock(f.t.pool);
    (void)own;
    vpmm_host_complete_all(f.t.host);
    for (int i = 0; i < 4; i++)
        tfree(f.t.pool, seps[i]);
    tpool_close(&f.t);
}

/* Among harvestable regions of one class, the smallest go first; the span's neighbour is kept. */
static void test_harvest_small_first_and_not_the_span(void **state)
{
    fixture_t f;
    vpmm_plan_t plan;
    void *small, *big, *s1, *s2, *tail;
    (void)state;
    open_fx(&f, NULL);
    small = tmalloc(f.t.pool, PG, f.a);
    s1 = tmalloc(f.t.pool, PG, f.a);
    big = tmalloc(f.t.pool, 4 * PG, f.a);
    s2 = tmalloc(f.t.pool, PG, f.a);
    tail = tmalloc(f.t.pool, 2 * PG, f.a);
    tfree(f.t.pool, small);
    tfree(f.t.pool, big);
    tfree(f.t.pool, tail); /* [small][s1][big][s2][tail free][hole] */
    vpmm_i_lock(f.t.pool);
    plan_for(&f, f.a, 5 * PG, &plan); /* tail (2) + 3 more mapped after it */
    assert_ptr_equal(plan.left->addr, (uintptr_t)tail);
    assert_int_equal(plan.npages, 3);
    assert_int_equal(plan.nruns, 2);
    assert_int_equal(plan.runs[0].addr, (uintptr_t)small); /* 1 page: fragments first */
    assert_int_equal(plan.runs[1].npages, 2);              /* then 2 of big's 4 (its top) */
    assert_int_equal(plan.runs[1].addr, (uintptr_t)big + 2 * PG);
    assert_int_equal(plan.nnew, 0);
    vpmm_i_plan_fini(&plan);
    vpmm_i_unlock(f.t.pool);
    tfree(f.t.pool, s1);
    tfree(f.t.pool, s2);
    tpool_close(&f.t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fit_nowait_prefers_best_then_own),
        cmocka_unit_test(test_span_extends_left_neighbour),
        cmocka_unit_test(test_span_extends_right_neighbour),
        cmocka_unit_test(test_span_joins_both_neighbours),
        cmocka_unit_test(test_span_in_new_chunk),
        cmocka_unit_test(test_harvest_order),
        cmocka_unit_test(test_harvest_small_first_and_not_the_span),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
