/*
 * test_seed.c — the seed walkthrough (docs/ALGORITHM.md) on the host backend: 1 GiB pages, one
 * stream, +10, +1, -10, +4, +11 GiB with VPMM_PAGES = 22, 18, 15, 12 and 0 (on demand).
 *
 * Binding (from the reference): mapped bytes after, placement of +4, +11 succeeding without
 * growing past the table, pages remapped <= the table. Beyond that we assert the full layouts our
 * allocator produces (documented in docs/ALGORITHM.md), including that the unused end of the hole
 * stays a hole (the reference leaks it in case D). Invariants are checked after every operation.
 */
#include <stdio.h>
#include <string.h>

#include "test_util.h"

typedef struct seed_case {
    const char *name;
    size_t prealloc;
    size_t mapped_after; /* GiB */
    size_t ptr4, ptr11;  /* offsets in GiB */
    size_t max_remapped; /* the reference's figure; ours may be lower */
    size_t remapped;     /* ours */
    const char *layout;  /* ours, right after +11: state offset:size in GiB, '*' = to chunk end */
} seed_case_t;

/*
 * Layout letters: A allocated, F free (pending on its stream), R free and ready, Z zombie, H hole.
 */
static const seed_case_t cases[] = {
    { "A", 22, 22, 0, 11, 0, 0, "A0:4 F4:6 A10:1 A11:11 H22:*" },
    /* B: the 3-page ready tail at 15 is extended in place by 8 pages from [2,10). */
    { "B", 18, 18, 11, 15, 11, 8, "F0:2 Z2:8 A10:1 A11:4 A15:11 H26:*" },
    /* C: 1 new page then the 10 freed pages, in a fresh hole at 15. */
    { "C", 15, 16, 11, 15, 10, 10, "Z0:10 A10:1 A11:4 A15:11 H26:*" },
    /* D: 4 new pages then 6 remapped extend the free page at 11; the hole's rest stays a hole. */
    { "D", 12, 16, 0, 11, 6, 6, "A0:4 Z4:6 A10:1 A11:11 H22:*" },
    { "on-demand", 0, 16, 0, 11, 6, 6, "A0:4 Z4:6 A10:1 A11:11 H22:*" },
};

typedef struct layout_buf {
    char text[512];
    size_t len;
} layout_buf_t;

static int append_region(const vpmm_region_info_t *r, void *user)
{
    layout_buf_t *b = user;
    char st = '?';
    size_t off = (r->addr - r->chunk_base) / GiB;
    switch (r->state) {
    case VPMM_REGION_ALLOCATED:
        st = 'A';
        break;
    case VPMM_REGION_FREE:
        st = r->ready ? 'R' : 'F';
        break;
    case VPMM_REGION_HOLE:
        st = 'H';
        break;
    case VPMM_REGION_ZOMBIE:
        st = 'Z';
        break;
    }
    if (r->addr + r->size == r->chunk_base + 32 * GiB && r->state == VPMM_REGION_HOLE)
        b->len += (size_t)snprintf(b->text + b->len, sizeof b->text - b->len, "%s%c%zu:*",
                                   b->len ? " " : "", st, off);
    else
        b->len += (size_t)snprintf(b->text + b->len, sizeof b->text - b->len, "%s%c%zu:%zu",
                                   b->len ? " " : "", st, off, r->size / GiB);
    return 0;
}

static void layout_of(vpmm_pool_t *pool, layout_buf_t *b)
{
    memset(b, 0, sizeof *b);
    assert_int_equal(vpmm_pool_walk(pool, append_region, b), VPMM_SUCCESS);
}

static void run_case(const seed_case_t *c)
{
    tpool_t t;
    tpool_params_t prm = { .page_size = GiB, .prealloc = c->prealloc };
    layout_buf_t lay;
    vpmm_stats_t s;
    void *p10, *p1, *p4, *p11;

    tpool_open(&t, &prm);
    p10 = tmalloc(t.pool, 10 * GiB, NULL);
    p1 = tmalloc(t.pool, 1 * GiB, NULL);
    assert_int_equal(toff(t.pool, p10), 0);
    assert_int_equal(toff(t.pool, p1), 10 * GiB);
    tfree(t.pool, p10);
    p4 = tmalloc(t.pool, 4 * GiB, NULL);
    assert_int_equal(toff(t.pool, p4), c->ptr4 * GiB);
    p11 = tmalloc(t.pool, 11 * GiB, NULL);

    s = tstats(t.pool);
    layout_of(t.pool, &lay);
    print_message("case %-9s mapped %zu GiB, +4 at %zu, +11 at %zu, remapped %llu (reference "
                  "%zu): %s\n",
                  c->name, s.mapped_bytes / GiB, toff(t.pool, p4) / GiB, toff(t.pool, p11) / GiB,
                  (unsigned long long)s.pages_remapped, c->max_remapped, lay.text);
    /* Binding figures from the seed's table. */
    assert_int_equal(s.mapped_bytes, c->mapped_after * GiB);
    assert_true(s.peak_mapped_bytes <= c->mapped_after * GiB);
    assert_true(s.pages_remapped <= c->max_remapped);
    /* Our own layout. */
    assert_int_equal(toff(t.pool, p11), c->ptr11 * GiB);
    assert_int_equal(s.pages_remapped, c->remapped);
    assert_string_equal(lay.text, c->layout);
    assert_int_equal(s.live_bytes, 16 * GiB);

    tfree(t.pool, p1);
    tfree(t.pool, p4);
    tfree(t.pool, p11);
    tpool_close(&t);
}

static void test_case_a(void **state)
{
    (void)state;
    run_case(&cases[0]);
}

static void test_case_b(void **state)
{
    (void)state;
    run_case(&cases[1]);
}

static void test_case_c(void **state)
{
    (void)state;
    run_case(&cases[2]);
}

static void test_case_d(void **state)
{
    (void)state;
    run_case(&cases[3]);
}

static void test_on_demand(void **state)
{
    (void)state;
    run_case(&cases[4]);
}

/*
 * Case D again, then the next slow-path malloc: the zombie's marker has completed (the default
 * stream has no pending work on the host backend), so phase 0 unmaps it and its VA rejoins the
 * hole structure; nothing is leaked and reserved VA is exactly one chunk.
 */
static void test_zombies_become_holes(void **state)
{
    tpool_t t;
    tpool_params_t prm = { .page_size = GiB, .prealloc = 12 };
    vpmm_stats_t s;
    void *p10, *p1, *p4, *p11, *p2;
    (void)state;

    tpool_open(&t, &prm);
    p10 = tmalloc(t.pool, 10 * GiB, NULL);
    p1 = tmalloc(t.pool, GiB, NULL);
    tfree(t.pool, p10);
    p4 = tmalloc(t.pool, 4 * GiB, NULL);
    p11 = tmalloc(t.pool, 11 * GiB, NULL);
    s = tstats(t.pool);
    assert_int_equal(s.zombie_bytes, 6 * GiB);
    /* Nothing free is left, so this takes the slow path: zombies are reclaimed first. */
    p2 = tmalloc(t.pool, 2 * GiB, NULL);
    s = tstats(t.pool);
    assert_int_equal(s.zombie_bytes, 0);
    assert_int_equal(s.mapped_bytes, 18 * GiB);
    assert_int_equal(s.reserved_va_bytes, 32 * GiB);
    assert_int_equal(s.va_chunks, 1);
    /* The reclaimed VA [4,10) is a hole, and the new span fits there (best-fit hole). */
    assert_int_equal(toff(t.pool, p2), 4 * GiB);
    tfree(t.pool, p1);
    tfree(t.pool, p2);
    tfree(t.pool, p4);
    tfree(t.pool, p11);
    tpool_close(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_case_a),    cmocka_unit_test(test_case_b),
        cmocka_unit_test(test_case_c),    cmocka_unit_test(test_case_d),
        cmocka_unit_test(test_on_demand), cmocka_unit_test(test_zombies_become_holes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
