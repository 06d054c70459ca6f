/*
 * test_segments.c — the pool's segments (vpmm_pool_set_segment_hook, vpmm_pool_walk_segments:
 * src/core/segment.c and the places that set a handle's live address), on the host backend.
 *
 * A collective library registers each segment the hook reports and deregisters it when told it
 * goes; it breaks if told of one twice, of the end of one it never heard of, or if a registered
 * range moves. So the tests keep the hook's view — a mirror built from the events alone, which
 * refuses exactly those — and compare it with the walk after every step of growth, remapping
 * defragmentation, trim, graph pools (growth, taking the shared pool's pages, dissolve) and
 * checkpoint reapplies, in fixed cases and a seeded random run.
 */
#include <string.h>

#include "graph_test_util.h"

#define MAXSEG 4096

typedef struct mirror {
    vpmm_segment_info_t seg[MAXSEG];
    size_t n;
    unsigned mapped, unmapped;
    int broken; /* an event the library would refuse */
} mirror_t;

static long find(const mirror_t *m, uintptr_t addr)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->seg[i].addr == addr)
            return (long)i;
    return -1;
}

static void hook(void *user, vpmm_segment_event_t ev, const vpmm_segment_info_t *s)
{
    mirror_t *m = user;
    long i = find(m, s->addr);
    if (ev == VPMM_SEGMENT_MAPPED) {
        m->mapped++;
        if (i >= 0 || m->n == MAXSEG) {
            m->broken++;
            return;
        }
        for (size_t k = 0; k < m->n; k++) /* no overlap with a segment already there */
            if (s->addr < m->seg[k].addr + m->seg[k].size && m->seg[k].addr < s->addr + s->size)
                m->broken++;
        m->seg[m->n++] = *s;
    } else {
        m->unmapped++;
        if (i < 0 || m->seg[i].size != s->size || m->seg[i].pool != s->pool) {
            m->broken++;
            return;
        }
        m->seg[i] = m->seg[--m->n];
    }
}

typedef struct walk {
    const mirror_t *m;
    size_t n;
    uintptr_t last;
    int bad;
} walk_t;

static int visit(const vpmm_segment_info_t *s, void *user)
{
    walk_t *w = user;
    long i = find(w->m, s->addr);
    if (i < 0 || w->m->seg[i].size != s->size || w->m->seg[i].pool != s->pool || s->addr < w->last)
        w->bad++;
    w->last = s->addr + s->size;
    w->n++;
    return 0;
}

/* The walk lists exactly the mirror's segments, in address order; they hold all mapped bytes. */
static void agree(tpool_t *t, const mirror_t *m)
{
    walk_t w = { m, 0, 0, 0 };
    size_t bytes = 0;
    vpmm_stats_t s = tstats(t->pool);
    CHECK_POOL(t->pool);
    assert_int_equal(m->broken, 0);
    assert_int_equal(vpmm_pool_walk_segments(t->pool, visit, &w), VPMM_SUCCESS);
    assert_int_equal(w.bad, 0);
    assert_int_equal(w.n, m->n);
    for (size_t i = 0; i < m->n; i++)
        bytes += m->seg[i].size;
    assert_int_equal(bytes, s.mapped_bytes);
    assert_int_equal(m->n, s.handles);
}

static void attach(tpool_t *t, mirror_t *m)
{
    memset(m, 0, sizeof *m);
    assert_int_equal(vpmm_pool_set_segment_hook(t->pool, hook, m), VPMM_SUCCESS);
}

/* Growth, remapping defragmentation and trim: each change reported once, in the right order. */
static void test_shared_pool_events(void **state)
{
    tpool_t t;
    mirror_t m;
    void *x[6], *big;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .small_bytes = 1, .max_bytes = 12 * MiB });
    attach(&t, &m);
    for (int i = 0; i < 6; i++) {
        x[i] = tmalloc(t.pool, 2 * MiB, NULL);
        agree(&t, &m);
    }
    assert_int_equal(m.mapped, 6);
    for (int i = 0; i < 6; i += 2)
        tfree(t.pool, x[i]);
    big = tmalloc(t.pool, 6 * MiB, NULL); /* remaps the three free pages */
    agree(&t, &m);
    assert_int_equal(m.unmapped, 3); /* each moved handle went from its old address first */
    assert_int_equal(m.mapped, 9);
    tfree(t.pool, big);
    assert_int_equal(vpmm_trim(t.pool, 0, NULL), VPMM_SUCCESS);
    agree(&t, &m);
    assert_int_equal(m.n, 3);
    for (int i = 1; i < 6; i += 2)
        tfree(t.pool, x[i]);
    assert_int_equal(vpmm_trim(t.pool, 0, NULL), VPMM_SUCCESS);
    agree(&t, &m);
    assert_int_equal(m.n, 0);
    /* Unhooked: no more events; the walk still lists what exists. */
    assert_int_equal(vpmm_pool_set_segment_hook(t.pool, NULL, &m), VPMM_SUCCESS);
    x[0] = tmalloc(t.pool, 2 * MiB, NULL);
    assert_int_equal(m.mapped, 9);
    tfree(t.pool, x[0]);
    assert_int_equal(vpmm_pool_set_segment_hook(NULL, hook, &m), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_pool_walk_segments(t.pool, NULL, NULL), VPMM_ERROR_INVALID_ARGUMENT);
    tpool_close(&t);
}

/* A trim whose unmap fails: the segment was reported gone before the unmap, and back after. */
static void test_trim_failure_reports_back(void **state)
{
    tpool_t t;
    mirror_t m;
    void *x;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .small_bytes = 1 });
    attach(&t, &m);
    x = tmalloc(t.pool, 4 * MiB, NULL);
    tfree(t.pool, x);
    vpmm_fault_fail_nth(t.fault, VPMM_DRV_MEM_UNMAP, 1, VPMM_DRV_ERROR);
    assert_int_equal(vpmm_trim(t.pool, 0, NULL), VPMM_ERROR_DRIVER);
    (void)tfault_settle(t.fault);
    agree(&t, &m);
    assert_int_equal(m.n, 2);
    tpool_close(&t);
}

#if VPMM_HAVE_GRAPHS
/* Graph pools: growth, the shared pool's pages taken over, the dissolve hands their segments to
 * the shared pool (gone from the graph pool's id, back under 0). */
static void test_graph_pool_events(void **state)
{
    tpool_t t;
    mirror_t m;
    vpmm_graph_pool_t *gp;
    vpmm_stream_t s;
    vpmm_graph_t g;
    void *a, *b, *c;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .small_bytes = 1 });
    attach(&t, &m);
    s = vpmm_host_stream_create(t.host);
    a = tmalloc(t.pool, 6 * MiB, NULL);
    tfree(t.pool, a); /* ready free pages a graph pool may take */
    gp = tgp_create(&t);
    tcapture_begin(&t, gp, s);
    assert_int_equal(vpmm_malloc(t.pool, 4 * MiB, s, &b), VPMM_SUCCESS);
    agree(&t, &m);
    assert_int_equal(vpmm_malloc(t.pool, 8 * MiB, s, &c), VPMM_SUCCESS);
    agree(&t, &m);
    {
        int in_gp = 0;
        for (size_t i = 0; i < m.n; i++)
            in_gp += m.seg[i].pool == tgp_stats(gp).id;
        assert_true(in_gp > 0);
    }
    tfree(t.pool, b);
    tfree(t.pool, c);
    g = tcapture_end(&t, s);
    agree(&t, &m);
    tgraph_destroy(&t, g);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    tfree(t.pool, tmalloc(t.pool, 256, NULL)); /* the next call returns the graph pool's pages */
    agree(&t, &m);
    for (size_t i = 0; i < m.n; i++)
        assert_int_equal(m.seg[i].pool, 0);
    tpool_close(&t);
}

/* A seeded random run: mallocs, frees, trims, graph pools, captures, checkpoints and reapplies
 * (which may make zombies live again); the mirror agrees with the walk after every step. */
static void test_random_agrees(void **state)
{
    tpool_t t;
    mirror_t m;
    void *live[64] = { 0 };
    vpmm_stream_t s[2];
    vpmm_graph_pool_t *gp = NULL;
    vpmm_checkpoint_t *ck = NULL;
    void *gl[8] = { 0 };
    trng_t r;
    (void)state;
    r = (trng_t){ 1927 };
    tpool_open(&t, &(tpool_params_t){ .small_bytes = 1, .max_bytes = 64 * MiB });
    attach(&t, &m);
    s[0] = vpmm_host_stream_create(t.host);
    s[1] = vpmm_host_stream_create(t.host);
    for (int step = 0; step < 3000; step++) {
        unsigned op = (unsigned)trng_below(&r, 100);
        unsigned i = (unsigned)trng_below(&r, 64);
        if (op < 55) {
            if (live[i] == NULL) {
                size_t size = (size_t)1 + trng_below(&r, (unsigned)(6 * MiB));
                if (vpmm_malloc(t.pool, size, s[i & 1], &live[i]) != VPMM_SUCCESS)
                    live[i] = NULL;
            } else {
                tfree(t.pool, live[i]);
                live[i] = NULL;
            }
        } else if (op < 60) {
            vpmm_host_complete_all(t.host);
            assert_int_equal(vpmm_trim(t.pool, trng_below(&r, 2) ? 0 : 32 * MiB, NULL),
                             VPMM_SUCCESS);
        } else if (op < 70) {
            vpmm_host_enqueue(t.host, s[i & 1]);
        } else if (op < 95) {
            /* The graph pool: a capture that allocates, frees, checkpoints or reapplies. */
            unsigned j = i % 8;
            if (gp == NULL)
                gp = tgp_create(&t);
            if (op < 82) {
                if (gl[j] == NULL) {
                    if (vpmm_graph_pool_malloc(gp, (size_t)1 + trng_below(&r, (unsigned)(8 * MiB)),
                                               s[0], &gl[j]) != VPMM_SUCCESS)
                        gl[j] = NULL;
                } else {
                    tfree(t.pool, gl[j]);
                    gl[j] = NULL;
                }
            } else if (op < 88) {
                vpmm_checkpoint_destroy(ck);
                ck = tcheckpoint_take(gp);
            } else if (ck != NULL) {
                void *dead[8];
                size_t nd = 0;
                vpmm_checkpoint_alloc_t al[64];
                size_t n = vpmm_checkpoint_allocs(ck, al, 64);
                vpmm_host_complete_all(t.host);
                if (vpmm_checkpoint_reapply(gp, ck, NULL, 0) == VPMM_SUCCESS) {
                    /* The live set is the checkpoint's now: every earlier pointer of the graph
                     * pool is gone, the checkpoint's are back; free those at once. */
                    for (size_t k = 0; k < n && nd < 8; k++)
                        dead[nd++] = al[k].ptr;
                    for (size_t k = 0; k < nd; k++)
                        tfree(t.pool, dead[k]);
                    memset(gl, 0, sizeof gl);
                }
            }
        } else if (gp != NULL) {
            for (unsigned j = 0; j < 8; j++)
                if (gl[j] != NULL) {
                    tfree(t.pool, gl[j]);
                    gl[j] = NULL;
                }
            vpmm_checkpoint_destroy(ck);
            ck = NULL;
            assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
            gp = NULL;
        }
        agree(&t, &m);
    }
    for (unsigned j = 0; j < 8; j++)
        if (gl[j] != NULL)
            tfree(t.pool, gl[j]);
    vpmm_checkpoint_destroy(ck);
    if (gp != NULL)
        assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    for (int i = 0; i < 64; i++)
        if (live[i] != NULL)
            tfree(t.pool, live[i]);
    vpmm_host_complete_all(t.host);
    assert_int_equal(vpmm_trim(t.pool, 0, NULL), VPMM_SUCCESS);
    agree(&t, &m);
    print_message("random run: %u segments mapped, %u unmapped\n", m.mapped, m.unmapped);
    assert_true(m.mapped > 100 && m.unmapped > 100);
    tpool_close(&t);
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_pool_events),
        cmocka_unit_test(test_trim_failure_reports_back),
#if VPMM_HAVE_GRAPHS
        cmocka_unit_test(test_graph_pool_events),
        cmocka_unit_test(test_random_agrees),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
