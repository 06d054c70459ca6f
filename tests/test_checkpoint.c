/*
 * test_checkpoint.c — checkpoint take and reapply (checkpoint/) on the host backend.
 *
 * The graph-tree flow (G1, checkpoint, G2, reapply, G3 reusing G2's memory), growth after the
 * checkpoint, freeing dead allocations with the reapply, the refusals (another graph pool, a
 * conflict with what is mapped now, a capture in progress, bad dead pointers) each leaving the
 * pool unchanged, double reapply, the no-change fast path (no region is rewritten), and a seeded
 * random sequence of captures, checkpoints and reapplies checked against the checkpoint's own
 * record after every step. Reapply makes no driver call.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_test_util.h"

/* ---- the graph pool's allocations, from the public walk ------------------------------------ */

typedef struct state_q {
    unsigned pool;
    vpmm_checkpoint_alloc_t got[512];
    size_t n;
    int pending_free; /* a free region of the pool that is not ready */
} state_q_t;

static int state_visit(const vpmm_region_info_t *r, void *user)
{
    state_q_t *q = user;
    if (r->pool != q->pool)
        return 0;
    if (r->state == VPMM_REGION_ALLOCATED) {
        assert_true(q->n < 512);
        q->got[q->n++] = (vpmm_checkpoint_alloc_t){ (void *)r->addr, r->requested, r->stream };
    } else if (r->state == VPMM_REGION_FREE && !r->ready) {
        q->pending_free = 1;
    }
    return 0;
}

static int by_ptr(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const vpmm_checkpoint_alloc_t *)a)->ptr;
    uintptr_t y = (uintptr_t)((const vpmm_checkpoint_alloc_t *)b)->ptr;
    return (x > y) - (x < y);
}

/* Asserts that gp's live allocations are exactly ck's minus dead[], and that all else is ready
 * free memory. */
static void assert_state_is(tpool_t *t, vpmm_graph_pool_t *gp, const vpmm_checkpoint_t *ck,
                            void *const *dead, size_t ndead)
{
    static state_q_t q;
    vpmm_checkpoint_alloc_t want[512];
    size_t n = vpmm_checkpoint_allocs(ck, want, 512), m = 0;
    memset(&q, 0, sizeof q);
    q.pool = tgp_stats(gp).id;
    assert_true(n <= 512);
    for (size_t i = 0; i < n; i++) {
        int is_dead = 0;
        for (size_t j = 0; j < ndead; j++)
            is_dead |= dead[j] == want[i].ptr;
        if (!is_dead)
            want[m++] = want[i];
    }
    assert_int_equal(vpmm_pool_walk(t->pool, state_visit, &q), VPMM_SUCCESS);
    qsort(q.got, q.n, sizeof q.got[0], by_ptr);
    assert_int_equal(q.n, m);
    for (size_t i = 0; i < m; i++) {
        assert_ptr_equal(q.got[i].ptr, want[i].ptr);
        assert_int_equal(q.got[i].size, want[i].size);
        assert_ptr_equal(q.got[i].stream, want[i].stream);
    }
    assert_false(q.pending_free);
    CHECK_POOL(t->pool);
}

/* ---- the graph-tree flow ------------------------------------------------------------------- */

static void test_graph_tree(void **state)
{
    tpool_t t;
    vpmm_graph_pool_t *gp;
    vpmm_stream_t s;
    vpmm_graph_t g1, g2, g3;
    vpmm_checkpoint_t *c1;
    vpmm_checkpoint_info_t info;
    vpmm_checkpoint_alloc_t rec[4];
    void *x1, *out1, *tmp, *b2[4], *b3[3];
    size_t peak2, mapped2;
    (void)state;
    gp = tgraph_open(&t, NULL, &s);

    /* G1: a temporary and an output that stays live. */
    tcapture_begin(&t, gp, s);
    tmp = tmalloc(t.pool, 3 * MiB, s);
    out1 = tmalloc(t.pool, 700 * KiB, s);
    x1 = tmalloc(t.pool, 5000, s);
    tfree(t.pool, tmp);
    g1 = tcapture_end(&t, s);
    c1 = tcheckpoint_take(gp);
    assert_int_equal(vpmm_checkpoint_info(c1, &info), VPMM_SUCCESS);
    assert_int_equal(info.allocs, 2);
    assert_int_equal(info.live_bytes, 700 * KiB + 5000);
    assert_int_equal(info.graph_pool, tgp_stats(gp).id);
    assert_int_equal(info.mapped_bytes, tgp_stats(gp).mapped_bytes);
    assert_int_equal(vpmm_checkpoint_allocs(c1, NULL, 0), 2);
    assert_int_equal(vpmm_checkpoint_allocs(c1, rec, 4), 2);
    assert_ptr_equal(rec[0].ptr < rec[1].ptr ? rec[0].ptr : rec[1].ptr, out1 < x1 ? out1 : x1);

    /* G2 (after G1): uses out1, frees x1, allocates more than the pool holds (it grows). */
    assert_int_equal(vpmm_graph_pool_reset_peak_stats(gp), VPMM_SUCCESS);
    tcapture_begin(&t, gp, s);
    for (int i = 0; i < 4; i++)
        b2[i] = tmalloc(t.pool, 2 * MiB + (size_t)i * 4096, s);
    tfree(t.pool, x1);
    tfree(t.pool, b2[0]);
    tfree(t.pool, b2[2]);
    g2 = tcapture_end(&t, s);
    peak2 = tgp_stats(gp).peak_mapped_bytes;
    mapped2 = tgp_stats(gp).mapped_bytes;

    /* Back to C1: out1 and x1 are live again; G2's allocations are gone, its pages free. */
    assert_int_equal(vpmm_checkpoint_reapply(gp, c1, NULL, 0), VPMM_SUCCESS);
    assert_state_is(&t, gp, c1, NULL, 0);
    assert_int_equal(tgp_stats(gp).mapped_bytes, mapped2); /* grown pages stay mapped, free */
    assert_int_equal(tgp_stats(gp).live_bytes, 700 * KiB + 5000);

    /* G3, the alternative after G1, reuses G2's memory: no growth. */
    tcapture_begin(&t, gp, s);
    for (int i = 0; i < 3; i++)
        b3[i] = tmalloc(t.pool, 2 * MiB, s);
    g3 = tcapture_end(&t, s);
    assert_int_equal(tgp_stats(gp).mapped_bytes, mapped2);
    assert_true(tgp_stats(gp).peak_mapped_bytes <= peak2);

    for (int i = 0; i < 3; i++)
        tfree(t.pool, b3[i]);
    tfree(t.pool, out1);
    tfree(t.pool, x1);
    tgraph_destroy(&t, g1);
    tgraph_destroy(&t, g2);
    tgraph_destroy(&t, g3);
    vpmm_checkpoint_destroy(c1);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    tpool_close(&t);
}

static void test_dead_allocations(void **state)
{
    tpool_t t;
    vpmm_graph_pool_t *gp;
    vpmm_stream_t s;
    vpmm_graph_t g;
    vpmm_checkpoint_t *ck;
    void *a, *b, *c, *after;
    tsnap_t before, now;
    (void)state;
    gp = tgraph_open(&t, NULL, &s);
    tcapture_begin(&t, gp, s);
    a = tmalloc(t.pool, 1000, s);
    b = tmalloc(t.pool, 2000, s);
    c = tmalloc(t.pool, 3000, s);
    g = tcapture_end(&t, s);
    ck = tcheckpoint_take(gp);
    tfree(t.pool, b);
    after = tmalloc(t.pool, 64, s); /* outside a capture: the shared pool's */
    before = tsnap(t.pool);
    {
        void *bad1[] = { (char *)a + 256 };
        void *bad2[] = { a, a };
        void *bad3[] = { after };
        assert_int_equal(vpmm_checkpoint_reapply(gp, ck, bad1, 1), VPMM_ERROR_INVALID_ARGUMENT);
        assert_int_equal(vpmm_checkpoint_reapply(gp, ck, bad2, 2), VPMM_ERROR_INVALID_ARGUMENT);
        assert_int_equal(vpmm_checkpoint_reapply(gp, ck, bad3, 1), VPMM_ERROR_INVALID_ARGUMENT);
        assert_int_equal(vpmm_checkpoint_reapply(gp, ck, NULL, 1), VPMM_ERROR_INVALID_ARGUMENT);
        assert_int_equal(vpmm_checkpoint_reapply(gp, NULL, NULL, 0), VPMM_ERROR_INVALID_ARGUMENT);
        assert_int_equal(vpmm_checkpoint_reapply(NULL, ck, NULL, 0), VPMM_ERROR_INVALID_ARGUMENT);
    }
    now = tsnap(t.pool);
    assert_snap_equal(&before, &now);
    {
        void *dead[] = { c, a };
        assert_int_equal(vpmm_checkpoint_reapply(gp, ck, dead, 2), VPMM_SUCCESS);
        assert_state_is(&t, gp, ck, dead, 2);
    }
    assert_int_equal(tgp_stats(gp).live_allocs, 1); /* b, live again */
    tfree(t.pool, b);
    tfree(t.pool, after);
    tgraph_destroy(&t, g);
    vpmm_checkpoint_destroy(ck);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    tpool_close(&t);
}

/* Region nodes of gp's arena, in order (to see whether a reapply rewrote anything). */
static size_t region_nodes(tpool_t *t, vpmm_graph_pool_t *gp, const void **out, size_t cap)
{
    size_t n = 0;
    for (const vpmm_chunk_t *c = t->pool->chunks; c; c = c->next)
        if (c->arena->id == tgp_stats(gp).id)
            for (const vpmm_region_t *r = c->first; r; r = r->next) {
                assert_true(n < cap);
                out[n++] = r;
            }
    return n;
}

static void test_double_reapply_changes_nothing(void **state)
{
    tpool_t t;
    vpmm_graph_pool_t *gp;
    vpmm_stream_t s;
    vpmm_graph_t g;
    vpmm_checkpoint_t *ck;
    void *p[8];
    const void *n1[64], *n2[64];
    size_t c1, c2;
    tsnap_t a, b;
    uint64_t calls;
    (void)state;
    gp = tgraph_open(&t, NULL, &s);
    tcapture_begin(&t, gp, s);
    for (int i = 0; i < 8; i++)
        p[i] = tmalloc(t.pool, (size_t)(i + 1) * 300 * KiB, s);
    for (int i = 0; i < 8; i += 3)
        tfree(t.pool, p[i]);
    g = tcapture_end(&t, s);
    ck = tcheckpoint_take(gp);
    a = tsnap(t.pool);
    c1 = region_nodes(&t, gp, n1, 64);
    calls = vpmm_fault_total_calls(t.fault);
    assert_int_equal(vpmm_checkpoint_reapply(gp, ck, NULL, 0), VPMM_SUCCESS);
    assert_int_equal(vpmm_checkpoint_reapply(gp, ck, NULL, 0), VPMM_SUCCESS);
    assert_int_equal(vpmm_fault_total_calls(t.fault), calls); /* no driver call */
    b = tsnap(t.pool);
    assert_snap_equal(&a, &b);
    c2 = region_nodes(&t, gp, n2, 64);
    assert_int_equal(c1, c2);
    for (size_t i = 0; i < c1; i++)
        assert_ptr_equal(n1[i], n2[i]); /* nothing was rewritten */
    CHECK_POOL(t.pool);
    for (int i = 0; i < 8; i++)
        if (i % 3 != 0)
            tfree(t.pool, p[i]);
    tgraph_destroy(&t, g);
    vpmm_checkpoint_destroy(ck);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    tpool_close(&t);
}

static void test_refusals_change_nothing(void **state)
{
    tpool_t t;
    vpmm_graph_pool_t *gp, *other;
    vpmm_stream_t s;
    vpmm_graph_t g;
    vpmm_checkpoint_t *ck, *ck2 = (vpmm_checkpoint_t *)1;
    void *a, *keep, *big;
    tsnap_t before, now;
    (void)state;
    gp = tgraph_open(&t, &(tpool_params_t){ .memory_limit = 16 * MiB }, &s);
    other = tgp_create(&t);
    tcapture_begin(&t, gp, s);
    keep = tmalloc(t.pool, 1 * MiB, s);
    a = tmalloc(t.pool, 8 * MiB, s);
    g = tcapture_end(&t, s);
    ck = tcheckpoint_take(gp);
    assert_int_equal(vpmm_checkpoint_take(NULL, &ck2), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_checkpoint_take(gp, NULL), VPMM_ERROR_INVALID_ARGUMENT);

    /* Another graph pool's checkpoint. */
    before = tsnap(t.pool);
    assert_int_equal(vpmm_checkpoint_reapply(other, ck, NULL, 0), VPMM_ERROR_WRONG_POOL);
    now = tsnap(t.pool);
    assert_snap_equal(&before, &now);

    /* During a capture into the graph pool. */
    tcapture_begin(&t, gp, s);
    before = tsnap(t.pool);
    assert_int_equal(vpmm_checkpoint_reapply(gp, ck, NULL, 0), VPMM_ERROR_STREAM_CAPTURING);
    assert_int_equal(vpmm_checkpoint_take(gp, &ck2), VPMM_ERROR_STREAM_CAPTURING);
    assert_null(ck2);
    now = tsnap(t.pool);
    assert_snap_equal(&before, &now);
    tgraph_destroy(&t, tcapture_end(&t, s));

    /* A conflict: a is freed, the graphs die, and the shared pool takes a's idle pages. */
    tfree(t.pool, a);
    tgraph_destroy(&t, g);
    big = tmalloc(t.pool, 14 * MiB, NULL);
    assert_true(tgp_stats(gp).mapped_bytes < 8 * MiB);
    before = tsnap(t.pool);
    assert_int_equal(vpmm_checkpoint_reapply(gp, ck, NULL, 0), VPMM_ERROR_CHECKPOINT_CONFLICT);
    now = tsnap(t.pool);
    assert_snap_equal(&before, &now);
    /* ... unless a is listed as dead: then nothing unmapped is wanted. */
    assert_int_equal(vpmm_checkpoint_reapply(gp, ck, &a, 1), VPMM_SUCCESS);
    assert_state_is(&t, gp, ck, &a, 1);

    tfree(t.pool, big);
    tfree(t.pool, keep);
    vpmm_checkpoint_destroy(ck);
    vpmm_checkpoint_destroy(NULL);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    assert_int_equal(vpmm_graph_pool_release(other), VPMM_SUCCESS);
    tpool_close(&t);
}

/*
 * A late large allocation in a capture reuses the graph pool's own free pages by mapping them
 * again at a new address (the old one stays mapped: a zombie while graphs may use it). A
 * checkpoint that wants an allocation back at the old address revives the pages there; the
 * other address becomes the zombie. Both directions, with the data seen through both addresses.
 */
static void test_reapply_revives_remapped_pages(void **state)
{
    tpool_t t;
    vpmm_graph_pool_t *gp;
    vpmm_stream_t s;
    vpmm_graph_t g1, g2;
    vpmm_checkpoint_t *c1, *c2;
    vpmm_graph_pool_stats_t gs;
    unsigned char *out, *big;
    (void)state;
    gp = tgraph_open(&t, NULL, &s);
    tcapture_begin(&t, gp, s);
    out = tmalloc(t.pool, 6 * MiB, s); /* G1's output: three pages */
    g1 = tcapture_end(&t, s);
    c1 = tcheckpoint_take(gp);
    memset(out, 0x3c, 6 * MiB);

    /* G2 consumes out, then needs 8 MiB: out's three pages are mapped again under it. */
    tcapture_begin(&t, gp, s);
    tfree(t.pool, out);
    big = tmalloc(t.pool, 8 * MiB, s);
    g2 = tcapture_end(&t, s);
    gs = tgp_stats(gp);
    assert_int_equal(gs.pages_remapped, 3);
    assert_int_equal(gs.pages_created, 4); /* 3 for G1, 1 more for G2 */
    assert_int_equal(gs.zombie_bytes, 6 * MiB);
    /* [new page | out's three pages]: the same physical pages, behind the new one. */
    assert_int_equal(big[2 * MiB], 0x3c);
    assert_int_equal(big[8 * MiB - 1], 0x3c);
    memset(big, 0x5a, 8 * MiB);
    assert_int_equal(out[6 * MiB - 1], 0x5a); /* the old address still reaches them */
    c2 = tcheckpoint_take(gp);

    /* Back to C1: out is live again where it was; big's first 6 MiB become the zombie. */
    assert_int_equal(vpmm_checkpoint_reapply(gp, c1, NULL, 0), VPMM_SUCCESS);
    assert_state_is(&t, gp, c1, NULL, 0);
    gs = tgp_stats(gp);
    assert_int_equal(gs.zombie_bytes, 6 * MiB);
    assert_int_equal(gs.mapped_bytes, 8 * MiB);
    assert_int_equal(out[0], 0x5a);
    /* And to C2 again. */
    assert_int_equal(vpmm_checkpoint_reapply(gp, c2, NULL, 0), VPMM_SUCCESS);
    assert_state_is(&t, gp, c2, NULL, 0);
    assert_int_equal(tgp_stats(gp).zombie_bytes, 6 * MiB);
    /* Back to C1 with out dead: nothing to revive, nothing changes but big's end. */
    assert_int_equal(vpmm_checkpoint_reapply(gp, c1, (void **)&out, 1), VPMM_SUCCESS);
    assert_state_is(&t, gp, c1, (void **)&out, 1);

    tgraph_destroy(&t, g1);
    tgraph_destroy(&t, g2);
    vpmm_checkpoint_destroy(c1);
    vpmm_checkpoint_destroy(c2);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    tpool_close(&t);
}

/*
 * Regression: a checkpointed allocation whose stream was released (its record freed) comes back
 * on a new record of that stream; freeing it afterwards must work, and the peaks must cover it.
 */
static void test_reapply_after_stream_released(void **state)
{
    tpool_t t;
    vpmm_graph_pool_t *gp;
    vpmm_stream_t s, o;
    vpmm_graph_t g;
    vpmm_checkpoint_t *ck;
    void *x, *y;
    (void)state;
    tpool_open(&t, NULL);
    s = vpmm_host_stream_create(t.host);
    o = vpmm_host_stream_create(t.host);
    gp = tgp_create(&t);
    tcapture_begin(&t, gp, s);
    x = tmalloc(t.pool, 1 * MiB, s);
    g = tcapture_end(&t, s);
    ck = tcheckpoint_take(gp);
    tfree(t.pool, x);
    assert_int_equal(vpmm_stream_release(t.pool, s), VPMM_SUCCESS);
    y = tmalloc(t.pool, 2 * MiB, o); /* a slow path: the released record is freed */
    assert_int_equal(vpmm_checkpoint_reapply(gp, ck, NULL, 0), VPMM_SUCCESS);
    assert_state_is(&t, gp, ck, NULL, 0);
    tfree(t.pool, x);
    tfree(t.pool, y);
    tgraph_destroy(&t, g);
    vpmm_checkpoint_destroy(ck);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    tpool_close(&t);
}

/*
 * Random graph trees: captures allocate and free random sizes (some outputs survive), checkpoints
 * are taken at random, and a random one is reapplied (with random dead allocations) before
 * random captures. After every reapply the state must be the checkpoint's.
 */
#define RAND_CKS 6

static void test_random_trees(void **state)
{
    tpool_t t;
    vpmm_graph_pool_t *gp;
    vpmm_stream_t s[2];
    trng_t rng = { 0x9e3779b97f4a7c15ULL };
    vpmm_checkpoint_t *cks[RAND_CKS] = { NULL };
    vpmm_graph_t graphs[64];
    size_t ngraphs = 0;
    (void)state;
    tpool_open(&t, NULL);
    s[0] = vpmm_host_stream_create(t.host);
    s[1] = vpmm_host_stream_create(t.host);
    gp = tgp_create(&t);
    for (int round = 0; round < 60; round++) {
        int k = (int)trng_below(&rng, RAND_CKS);
        vpmm_stream_t st = s[trng_below(&rng, 2)];
        void *live[64];
        size_t nlive = 0;
        if (cks[k] != NULL && trng_below(&rng, 2) == 0) {
            vpmm_checkpoint_alloc_t al[512];
            void *dead[8];
            size_t n = vpmm_checkpoint_allocs(cks[k], al, 512), nd = 0;
            for (size_t i = 0; i < n && nd < 8; i++)
                if (trng_below(&rng, 4) == 0)
                    dead[nd++] = al[i].ptr;
            assert_int_equal(vpmm_checkpoint_reapply(gp, cks[k], dead, nd), VPMM_SUCCESS);
            assert_state_is(&t, gp, cks[k], dead, nd);
        }
        tcapture_begin(&t, gp, st);
        for (int i = 0; i < 24; i++) {
            if (nlive > 0 && trng_below(&rng, 3) == 0) {
                size_t j = trng_below(&rng, nlive);
                tfree(t.pool, live[j]);
                live[j] = live[--nlive];
            } else {
                size_t size = trng_below(&rng, 4) == 0 ? 1 + trng_below(&rng, 6 * MiB)
                                                       : 1 + trng_below(&rng, 256 * KiB);
                live[nlive++] = tmalloc(t.pool, size, st);
            }
        }
        /* Outputs survive the capture; the rest die inside it. */
        while (nlive > 3) {
            size_t j = trng_below(&rng, nlive);
            tfree(t.pool, live[j]);
            live[j] = live[--nlive];
        }
        assert_true(ngraphs < 64);
        graphs[ngraphs++] = tcapture_end(&t, st);
        if (trng_below(&rng, 2) == 0) {
            vpmm_checkpoint_destroy(cks[k]);
            cks[k] = tcheckpoint_take(gp);
            assert_state_is(&t, gp, cks[k], NULL, 0);
        }
    }
    /* Clean up: reapply an empty state by listing every allocation as dead. */
    {
        vpmm_checkpoint_t *now = tcheckpoint_take(gp);
        vpmm_checkpoint_alloc_t al[512];
        void *dead[512];
        size_t n = vpmm_checkpoint_allocs(now, al, 512);
        for (size_t i = 0; i < n; i++)
            dead[i] = al[i].ptr;
        assert_int_equal(vpmm_checkpoint_reapply(gp, now, dead, n), VPMM_SUCCESS);
        assert_int_equal(tgp_stats(gp).live_allocs, 0);
        vpmm_checkpoint_destroy(now);
    }
    for (size_t i = 0; i < ngraphs; i++)
        tgraph_destroy(&t, graphs[i]);
    for (int k = 0; k < RAND_CKS; k++)
        vpmm_checkpoint_destroy(cks[k]);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    tpool_close(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_graph_tree),
        cmocka_unit_test(test_dead_allocations),
        cmocka_unit_test(test_double_reapply_changes_nothing),
        cmocka_unit_test(test_refusals_change_nothing),
        cmocka_unit_test(test_reapply_after_stream_released),
        cmocka_unit_test(test_reapply_revives_remapped_pages),
        cmocka_unit_test(test_random_trees),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
