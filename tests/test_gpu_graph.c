/*
 * test_gpu_graph.c — graph pools and checkpoints on a real GPU, with real CUDA graphs.
 *
 * An "inference" step of several kernels (gpu_kernels.cu: affine, add, resample) allocates its
 * intermediate buffers inside the capture and frees them there (sub-page sizes among them), so
 * the graph reuses memory within itself; the host computes the same step bit for bit. Scenarios:
 *  1. capture once, replay 100 times with new inputs: every output equals the host's;
 *  2. between replays, the shared pool is fragmented and defragmented hard (pages remapped while
 *     other data must survive): outputs stay correct, and the graph pool's regions, mapped bytes
 *     and addresses never change;
 *  3. a graph tree: G1, checkpoint, G2, reapply, G3 (an alternative child of G1); G1→G2 and
 *     G1→G3 replayed in turn; the graph pool's mapped bytes must be at most 1.05 × the larger
 *     branch's peak (each branch alone in its own graph pool), reported with the sum of one graph
 *     pool per graph;
 *  4. destroying the graphs and the graph pool handle returns its pages: a following large
 *     malloc of the shared pool creates no page (pool destruction is refused while a graph lives);
 *  5. a capture begun outside vpmm (cudaStreamBeginCapture, global mode) with a second stream
 *     forked into it by events: both streams' allocations come from one new graph pool, which
 *     grows during the capture (cuMemMap in global mode), and goes back after the graph.
 * Every pool is checked (vpmm_pool_check) after each phase and destroyed at the end; the log is
 * the report (lines start with "[gpu-graph]"). Skips without a device (the program then exits
 * 77, ctest: Skipped) unless VPMM_TEST_REQUIRE_GPU=1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "gpu_kernels.h"
#include "gpu_test_util.h"
#include "graph_test_util.h"

#define VPMM_OK(expr)                                                                              \
    do {                                                                                           \
        vpmm_status_t s_ = (expr);                                                                 \
        if (s_ != VPMM_SUCCESS)                                                                    \
            fail_msg("%s failed: %s (%s)", #expr, vpmm_status_name(s_), vpmm_last_error());        \
    } while (0)

#define N_BIG   ((size_t)1 << 20) /* floats: 4 MiB buffers */
#define N_OUT   1000              /* floats: 4000-byte (sub-page) buffers */
#define REPLAYS 100

/* ---- the device --------------------------------------------------------------------------- */

/* The probe (gpu_test_util.h): prints the device once. */
static int gpu_probe(char *why, size_t len)
{
    struct cudaDeviceProp prop;
    int count = 0, drv = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        snprintf(why, len, "no CUDA device");
        return 0;
    }
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    CUDA_OK(cudaDriverGetVersion(&drv));
    print_message("[gpu-graph] device 0: %s, driver for CUDA %d.%d\n", prop.name, drv / 1000,
                  drv % 1000 / 10);
    return 1;
}

/* Every test starts here: skips without a GPU (fails if one is required). */
#define REQUIRE_GPU() GPU_REQUIRE("[gpu-graph]", gpu_probe)

static vpmm_pool_t *gpu_pool(void)
{
    vpmm_config_t cfg;
    vpmm_pool_t *pool = NULL;
    vpmm_config_init(&cfg);
    cfg.backend = VPMM_BACKEND_CUDA;
    cfg.ignore_env = 1;
    cfg.va_size = VA_SMALL;
    VPMM_OK(vpmm_pool_create(&cfg, &pool));
    CHECK_POOL(pool);
    return pool;
}

static float *alloc_f(vpmm_pool_t *pool, size_t n, cudaStream_t s)
{
    void *p = NULL;
    VPMM_OK(vpmm_malloc(pool, n * sizeof(float), s, &p));
    return p;
}

static void free_f(vpmm_pool_t *pool, float *p)
{
    VPMM_OK(vpmm_free(pool, p));
}

/* Waits (up to 5 s) until no graph pool is alive: CUDA runs user-object destructors on its own
 * thread, after the graphs, execs and launches are gone. Returns the milliseconds it took. */
static double wait_graph_pools_gone(vpmm_pool_t *pool)
{
    double t0 = gpu_now_s();
    vpmm_stats_t st;
    for (;;) {
        VPMM_OK(vpmm_get_stats(pool, &st));
        if (st.graph_pools == 0)
            return (gpu_now_s() - t0) * 1e3;
        if (gpu_now_s() - t0 > 5.0)
            fail_msg("graph pools still alive 5 s after their graphs were destroyed");
        struct timespec ms = { 0, 1000000 };
        nanosleep(&ms, NULL);
    }
}

/* ---- the steps: device and host versions ----------------------------------------------------- */

/*
 * The inference step on stream s (being captured): x (N_BIG floats) -> out (N_OUT floats,
 * allocated here and left live); every intermediate is allocated and freed inside.
 */
static float *inference(vpmm_pool_t *pool, const float *x, cudaStream_t s)
{
    float *h1, *h2, *h3, *a, *b, *c, *d, *out;
    h1 = alloc_f(pool, N_BIG, s);
    GK_OK(gk_affine(h1, x, N_BIG, 1.5f, 0.25f, 1, s));
    a = alloc_f(pool, N_OUT, s);
    GK_OK(gk_resample(a, N_OUT, h1, N_BIG, 0.5f, s));
    h2 = alloc_f(pool, N_BIG, s);
    GK_OK(gk_affine(h2, h1, N_BIG, 0.75f, -1.0f, 0, s));
    free_f(pool, h1);
    b = alloc_f(pool, N_OUT + 37, s);
    GK_OK(gk_resample(b, N_OUT, h2, N_BIG, 2.0f, s));
    c = alloc_f(pool, N_OUT, s);
    GK_OK(gk_add(c, a, b, N_OUT, s));
    free_f(pool, a);
    free_f(pool, b);
    h3 = alloc_f(pool, N_BIG, s);
    GK_OK(gk_add(h3, h2, x, N_BIG, s));
    GK_OK(gk_affine(h3, h3, N_BIG, 1.0f, 0.0f, 1, s));
    free_f(pool, h2);
    d = alloc_f(pool, 4096 + 5, s);
    GK_OK(gk_resample(d, N_OUT, h3, N_BIG, 1.0f, s));
    free_f(pool, h3);
    out = alloc_f(pool, N_OUT, s);
    GK_OK(gk_add(out, c, d, N_OUT, s));
    free_f(pool, c);
    free_f(pool, d);
    return out;
}

static void ref_affine(float *out, const float *in, size_t n, float a, float b, int relu)
{
    for (size_t i = 0; i < n; i++)
        out[i] = gk_ref_affine(in[i], a, b, relu);
}

static void ref_add(float *out, const float *x, const float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = x[i] + y[i];
}

static void ref_resample(float *out, size_t n_out, const float *in, size_t n_in, float scale)
{
    for (size_t i = 0; i < n_out; i++)
        out[i] = in[gk_resample_src(i, n_in)] * scale;
}

/* The host's inference step (same operations, same order, same roundings). */
static void inference_ref(const float *x, float *out)
{
    float *h1 = malloc(N_BIG * sizeof *h1), *h2 = malloc(N_BIG * sizeof *h2);
    float a[N_OUT], b[N_OUT], c[N_OUT], d[N_OUT];
    assert_non_null(h1);
    assert_non_null(h2);
    ref_affine(h1, x, N_BIG, 1.5f, 0.25f, 1);
    ref_resample(a, N_OUT, h1, N_BIG, 0.5f);
    ref_affine(h2, h1, N_BIG, 0.75f, -1.0f, 0);
    ref_resample(b, N_OUT, h2, N_BIG, 2.0f);
    ref_add(c, a, b, N_OUT);
    ref_add(h1, h2, x, N_BIG); /* h3, in h1's memory */
    ref_affine(h1, h1, N_BIG, 1.0f, 0.0f, 1);
    ref_resample(d, N_OUT, h1, N_BIG, 1.0f);
    ref_add(out, c, d, N_OUT);
    free(h1);
    free(h2);
}

/* Branch A after G1: two 8 MiB temporaries; out2 (500 floats). */
#define N_A  ((size_t)2 << 20)
#define N_B  ((size_t)3 << 20)
#define OUT2 500
#define OUT3 700

static float *branch_a(vpmm_pool_t *pool, const float *out1, cudaStream_t s)
{
    float *t1 = alloc_f(pool, N_A, s), *t2, *o;
    GK_OK(gk_resample(t1, N_A, out1, N_OUT, 1.0f, s));
    t2 = alloc_f(pool, N_A, s);
    GK_OK(gk_affine(t2, t1, N_A, 0.5f, 1.0f, 1, s));
    free_f(pool, t1);
    o = alloc_f(pool, OUT2, s);
    GK_OK(gk_resample(o, OUT2, t2, N_A, 3.0f, s));
    free_f(pool, t2);
    return o;
}

/* Branch B after G1: three 12 MiB temporaries at once; out3 (700 floats). */
static float *branch_b(vpmm_pool_t *pool, const float *out1, cudaStream_t s)
{
    float *t1 = alloc_f(pool, N_B, s), *t2, *t3, *o;
    GK_OK(gk_resample(t1, N_B, out1, N_OUT, 1.0f, s));
    t2 = alloc_f(pool, N_B, s);
    GK_OK(gk_affine(t2, t1, N_B, -0.5f, 2.0f, 1, s));
    t3 = alloc_f(pool, N_B, s);
    GK_OK(gk_add(t3, t1, t2, N_B, s));
    free_f(pool, t1);
    free_f(pool, t2);
    o = alloc_f(pool, OUT3, s);
    GK_OK(gk_resample(o, OUT3, t3, N_B, 0.25f, s));
    free_f(pool, t3);
    return o;
}

static void branch_a_ref(const float *out1, float *o)
{
    float *t1 = malloc(N_A * sizeof *t1), *t2 = malloc(N_A * sizeof *t2);
    assert_non_null(t1);
    assert_non_null(t2);
    ref_resample(t1, N_A, out1, N_OUT, 1.0f);
    ref_affine(t2, t1, N_A, 0.5f, 1.0f, 1);
    ref_resample(o, OUT2, t2, N_A, 3.0f);
    free(t1);
    free(t2);
}

static void branch_b_ref(const float *out1, float *o)
{
    float *t1 = malloc(N_B * sizeof *t1), *t2 = malloc(N_B * sizeof *t2);
    assert_non_null(t1);
    assert_non_null(t2);
    ref_resample(t1, N_B, out1, N_OUT, 1.0f);
    ref_affine(t2, t1, N_B, -0.5f, 2.0f, 1);
    ref_add(t1, t1, t2, N_B); /* t3, in t1's memory */
    ref_resample(o, OUT3, t1, N_B, 0.25f);
    free(t1);
    free(t2);
}

/* Fills x with replay r's input: values in [-2, 2) from a seeded generator. */
static void make_input(float *x, size_t n, uint64_t r)
{
    trng_t rng = { 0x2545F4914F6CDD1DULL ^ (r * 0x9E3779B97F4A7C15ULL) };
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(trng_next(&rng) >> 40) / (float)(1 << 22) - 2.0f;
}

static size_t mismatches(const float *a, const float *b, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += memcmp(&a[i], &b[i], sizeof a[i]) != 0;
    return bad;
}

/* ---- capture helpers ---------------------------------------------------------------------- */

typedef struct captured {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
} captured_t;

static void instantiate(captured_t *c, vpmm_graph_t g)
{
    c->graph = (cudaGraph_t)g;
    CUDA_OK(cudaGraphInstantiate(&c->exec, c->graph, 0));
}

static void destroy(captured_t *c)
{
    CUDA_OK(cudaGraphExecDestroy(c->exec));
    CUDA_OK(cudaGraphDestroy(c->graph));
}

/* The graph pool's regions as (addr, size, state), to see that nothing of it ever moves. */
typedef struct layout {
    unsigned pool;
    size_t n;
    uintptr_t addr[256];
    size_t size[256];
    int state[256];
} layout_t;

static int layout_visit(const vpmm_region_info_t *r, void *user)
{
    layout_t *l = user;
    if (r->pool == l->pool && l->n < 256) {
        l->addr[l->n] = r->addr;
        l->size[l->n] = r->size;
        l->state[l->n] = (int)r->state;
        l->n++;
    }
    return 0;
}

static void layout_of(vpmm_pool_t *pool, unsigned gp_id, layout_t *l)
{
    memset(l, 0, sizeof *l);
    l->pool = gp_id;
    VPMM_OK(vpmm_pool_walk(pool, layout_visit, l));
    assert_true(l->n > 0 && l->n < 256);
}

/* ---- 1 and 2: replay, with and without defragmentation in between -------------------------- */

/* Captures the inference step and replays it REPLAYS times; with hard_defrag, the shared pool is
 * fragmented and defragmented between replays. */
static void replay_inference(vpmm_pool_t *pool, int hard_defrag)
{
    cudaStream_t s = gpu_stream_new(0), s2 = gpu_stream_new(0);
    vpmm_graph_pool_t *gp;
    vpmm_graph_pool_stats_t g0, g1;
    vpmm_stats_t st0, st1;
    captured_t cap;
    vpmm_graph_t g;
    layout_t before, after;
    float *x, *out, *hx = malloc(N_BIG * sizeof *hx), hout[N_OUT], want[N_OUT];
    size_t bad = 0;
    int rounds_remapped = 0;
    double t0, t_replay = 0;
    uint64_t defrags0, remapped0;

    assert_non_null(hx);
    VPMM_OK(vpmm_graph_pool_create(pool, &gp));
    x = alloc_f(pool, N_BIG, s); /* the input lives in the shared pool */
    VPMM_OK(vpmm_get_stats(pool, &st0));
    VPMM_OK(vpmm_capture_begin(pool, gp, s, VPMM_STREAM_CAPTURE_GLOBAL));
    out = inference(pool, x, s);
    VPMM_OK(vpmm_capture_end(pool, s, &g));
    CHECK_POOL(pool);
    VPMM_OK(vpmm_get_stats(pool, &st1));
    g0 = tgp_stats(gp);
    /* The capture touched nothing of the shared pool's allocations. */
    assert_int_equal(st1.live_bytes - st1.private_live_bytes, st0.live_bytes);
    assert_int_equal(g0.live_allocs, 1);
    assert_int_equal(g0.mallocs, 8);
    assert_int_equal(g0.frees, 7);
    instantiate(&cap, g);
    layout_of(pool, g0.id, &before);
    defrags0 = st1.defrags;
    remapped0 = st1.pages_remapped;

    for (int r = 0; r < REPLAYS; r++) {
        make_input(hx, N_BIG, (uint64_t)r + (hard_defrag ? 1000 : 0));
        CUDA_OK(cudaMemcpyAsync(x, hx, N_BIG * sizeof *hx, cudaMemcpyHostToDevice, s));
        t0 = gpu_now_s();
        CUDA_OK(cudaGraphLaunch(cap.exec, s));
        CUDA_OK(cudaStreamSynchronize(s));
        t_replay += gpu_now_s() - t0;
        CUDA_OK(cudaMemcpy(hout, out, sizeof hout, cudaMemcpyDeviceToHost));
        inference_ref(hx, want);
        bad += mismatches(hout, want, N_OUT);
        if (hard_defrag) {
            /* Fragment the shared pool on another stream, then make it remap: 24 blocks of one
             * page each, every other freed, then a block as large as all free memory (no free
             * piece can hold it: its pages must be gathered by remapping). */
            enum { NB = 24 };
            float *blk[NB], *big;
            size_t page = st1.page_size, big_bytes;
            vpmm_stats_t sa, sb;
            for (int i = 0; i < NB; i++)
                blk[i] = alloc_f(pool, page / sizeof(float), s2);
            for (int i = 0; i < NB; i += 2)
                free_f(pool, blk[i]);
            VPMM_OK(vpmm_get_stats(pool, &sa));
            big_bytes = (sa.free_bytes - tgp_stats(gp).free_bytes) / page * page; /* shared free */
            big = alloc_f(pool, big_bytes / sizeof(float), s2);
            GK_OK(gk_affine(big, big, big_bytes / sizeof(float), 1.0f, 0.0f, 0, s2));
            for (int i = 1; i < NB; i += 2)
                free_f(pool, blk[i]);
            free_f(pool, big);
            VPMM_OK(vpmm_get_stats(pool, &sb));
            rounds_remapped += sb.pages_remapped > sa.pages_remapped;
            CHECK_POOL(pool);
            layout_of(pool, g0.id, &after);
            assert_int_equal(after.n, before.n);
            for (size_t i = 0; i < before.n; i++) {
                assert_int_equal(after.addr[i], before.addr[i]);
                assert_int_equal(after.size[i], before.size[i]);
                assert_int_equal(after.state[i], before.state[i]);
            }
        }
    }
    CUDA_OK(cudaDeviceSynchronize());
    g1 = tgp_stats(gp);
    VPMM_OK(vpmm_get_stats(pool, &st1));
    print_message("[gpu-graph] %s: %d replays, %zu output mismatches, %.1f us per replay "
                  "(launch + sync); graph pool mapped %zu KiB (peak %zu KiB) for %zu KiB live; "
                  "shared pool: %llu defragmentations, %llu pages remapped meanwhile (in %d "
                  "of the %d rounds between replays)\n",
                  hard_defrag ? "replay across defragmentation" : "inference replay", REPLAYS, bad,
                  t_replay / REPLAYS * 1e6, g1.mapped_bytes / KiB, g1.peak_mapped_bytes / KiB,
                  g1.live_bytes / KiB, (unsigned long long)(st1.defrags - defrags0),
                  (unsigned long long)(st1.pages_remapped - remapped0), rounds_remapped,
                  hard_defrag ? REPLAYS : 0);
    assert_int_equal(bad, 0);
    assert_int_equal(g1.mapped_bytes, g0.mapped_bytes);
    assert_int_equal(g1.zombie_bytes, 0);
    if (hard_defrag)
        assert_int_equal(rounds_remapped, REPLAYS); /* every round moved pages */

    destroy(&cap);
    free_f(pool, out);
    free_f(pool, x);
    VPMM_OK(vpmm_graph_pool_release(gp));
    wait_graph_pools_gone(pool);
    CHECK_POOL(pool);
    CUDA_OK(cudaStreamDestroy(s));
    CUDA_OK(cudaStreamDestroy(s2));
    free(hx);
}

static void test_inference_replay(void **state)
{
    vpmm_pool_t *pool;
    (void)state;
    REQUIRE_GPU();
    pool = gpu_pool();
    replay_inference(pool, 0);
    VPMM_OK(vpmm_pool_destroy(pool));
}

static void test_replay_across_defragmentation(void **state)
{
    vpmm_pool_t *pool;
    (void)state;
    REQUIRE_GPU();
    pool = gpu_pool();
    replay_inference(pool, 1);
    VPMM_OK(vpmm_pool_destroy(pool));
}

/* ---- 3: a graph tree ------------------------------------------------------------------------- */

/* Captures step `which` (1: G1, 2: branch A, 3: branch B) on s into gp. */
static float *capture_step(vpmm_pool_t *pool, vpmm_graph_pool_t *gp, cudaStream_t s, int which,
                           const float *in, captured_t *c)
{
    vpmm_graph_t g;
    float *o;
    VPMM_OK(vpmm_capture_begin(pool, gp, s, VPMM_STREAM_CAPTURE_GLOBAL));
    o = which == 1   ? inference(pool, in, s)
        : which == 2 ? branch_a(pool, in, s)
                     : branch_b(pool, in, s);
    VPMM_OK(vpmm_capture_end(pool, s, &g));
    CHECK_POOL(pool);
    instantiate(c, g);
    return o;
}

static void test_graph_tree(void **state)
{
    vpmm_pool_t *pool;
    cudaStream_t s;
    vpmm_graph_pool_t *gp, *alone_a, *alone_b;
    vpmm_checkpoint_t *c1;
    captured_t g1, g2, g3, a1, a2, b1, b3;
    float *x, *out1, *out2, *out3, *hx;
    float h1[N_OUT], h2[OUT2], h3[OUT3], w1[N_OUT], w2[OUT2], w3[OUT3];
    size_t tree, peak_a, peak_b, live_max, separate, bad = 0;
    double ratio;
    (void)state;
    REQUIRE_GPU(); /* before any malloc: skip() leaves the function */
    hx = malloc(N_BIG * sizeof *hx);
    assert_non_null(hx);
    pool = gpu_pool();
    s = gpu_stream_new(0);
    x = alloc_f(pool, N_BIG, s);

    /* The tree, in one graph pool. */
    VPMM_OK(vpmm_graph_pool_create(pool, &gp));
    out1 = capture_step(pool, gp, s, 1, x, &g1);
    VPMM_OK(vpmm_checkpoint_take(gp, &c1));
    out2 = capture_step(pool, gp, s, 2, out1, &g2);
    VPMM_OK(vpmm_checkpoint_reapply(gp, c1, NULL, 0)); /* out2 is not in c1: it is gone */
    CHECK_POOL(pool);
    out3 = capture_step(pool, gp, s, 3, out1, &g3);
    tree = tgp_stats(gp).mapped_bytes;

    /* Each branch alone (G1 then the branch, in a graph pool of its own): its peak. */
    VPMM_OK(vpmm_graph_pool_create(pool, &alone_a));
    VPMM_OK(vpmm_graph_pool_create(pool, &alone_b));
    {
        float *o1a = capture_step(pool, alone_a, s, 1, x, &a1);
        float *o1b = capture_step(pool, alone_b, s, 1, x, &b1);
        float *oa = capture_step(pool, alone_a, s, 2, o1a, &a2);
        float *ob = capture_step(pool, alone_b, s, 3, o1b, &b3);
        peak_a = tgp_stats(alone_a).peak_mapped_bytes;
        peak_b = tgp_stats(alone_b).peak_mapped_bytes;
        live_max = VPMM_MAX(tgp_stats(alone_a).peak_live_bytes, tgp_stats(alone_b).peak_live_bytes);
        destroy(&a1);
        destroy(&a2);
        destroy(&b1);
        destroy(&b3);
        free_f(pool, o1a);
        free_f(pool, o1b);
        free_f(pool, oa);
        free_f(pool, ob);
    }
    /* One graph pool per graph: G1, G2 and G3 each captured into its own. */
    {
        vpmm_graph_pool_t *p1, *p2, *p3;
        captured_t q1, q2, q3;
        float *o1, *o2, *o3;
        VPMM_OK(vpmm_graph_pool_create(pool, &p1));
        VPMM_OK(vpmm_graph_pool_create(pool, &p2));
        VPMM_OK(vpmm_graph_pool_create(pool, &p3));
        o1 = capture_step(pool, p1, s, 1, x, &q1);
        o2 = capture_step(pool, p2, s, 2, o1, &q2);
        o3 = capture_step(pool, p3, s, 3, o1, &q3);
        separate =
            tgp_stats(p1).mapped_bytes + tgp_stats(p2).mapped_bytes + tgp_stats(p3).mapped_bytes;
        destroy(&q1);
        destroy(&q2);
        destroy(&q3);
        free_f(pool, o1);
        free_f(pool, o2);
        free_f(pool, o3);
        VPMM_OK(vpmm_graph_pool_release(p1));
        VPMM_OK(vpmm_graph_pool_release(p2));
        VPMM_OK(vpmm_graph_pool_release(p3));
    }
    VPMM_OK(vpmm_graph_pool_release(alone_a));
    VPMM_OK(vpmm_graph_pool_release(alone_b));

    /* Replay G1 -> G2 and G1 -> G3 in turn, checking every output. */
    for (int r = 0; r < 40; r++) {
        const int branch = r % 2 == 0 ? 2 : 3;
        make_input(hx, N_BIG, (uint64_t)r + 5000);
        CUDA_OK(cudaMemcpyAsync(x, hx, N_BIG * sizeof *hx, cudaMemcpyHostToDevice, s));
        CUDA_OK(cudaGraphLaunch(g1.exec, s));
        CUDA_OK(cudaGraphLaunch(branch == 2 ? g2.exec : g3.exec, s));
        CUDA_OK(cudaStreamSynchronize(s));
        CUDA_OK(cudaMemcpy(h1, out1, sizeof h1, cudaMemcpyDeviceToHost));
        inference_ref(hx, w1);
        bad += mismatches(h1, w1, N_OUT);
        if (branch == 2) {
            CUDA_OK(cudaMemcpy(h2, out2, sizeof h2, cudaMemcpyDeviceToHost));
            branch_a_ref(w1, w2);
            bad += mismatches(h2, w2, OUT2);
        } else {
            CUDA_OK(cudaMemcpy(h3, out3, sizeof h3, cudaMemcpyDeviceToHost));
            branch_b_ref(w1, w3);
            bad += mismatches(h3, w3, OUT3);
        }
    }
    ratio = (double)tree / (double)VPMM_MAX(peak_a, peak_b);
    print_message("[gpu-graph] graph tree: 40 replays (G1->G2, G1->G3 in turn), %zu output "
                  "mismatches; one graph pool for the tree maps %.1f MiB; each branch alone "
                  "peaks at %.1f / %.1f MiB: ratio %.3f (goal <= 1.05); the larger branch's peak "
                  "live bytes are %.2f MiB (tree / that: %.3f); one graph pool per graph would "
                  "map %.1f MiB (%.2fx the tree's)\n",
                  bad, tree / (double)MiB, peak_a / (double)MiB, peak_b / (double)MiB, ratio,
                  live_max / (double)MiB, (double)tree / (double)live_max, separate / (double)MiB,
                  (double)separate / (double)tree);
    assert_int_equal(bad, 0);
    assert_true(ratio <= 1.05);

    destroy(&g1);
    destroy(&g2);
    destroy(&g3);
    free_f(pool, out1);
    free_f(pool, out3);
    free_f(pool, x);
    vpmm_checkpoint_destroy(c1);
    VPMM_OK(vpmm_graph_pool_release(gp));
    wait_graph_pools_gone(pool);
    CHECK_POOL(pool);
    VPMM_OK(vpmm_pool_destroy(pool));
    CUDA_OK(cudaStreamDestroy(s));
    free(hx);
}

/* ---- 4: pages return --------------------------------------------------------------------------
 */

static void test_pages_return_to_shared_pool(void **state)
{
    vpmm_pool_t *pool;
    cudaStream_t s;
    vpmm_graph_pool_t *gp;
    captured_t c;
    vpmm_graph_t g;
    vpmm_stats_t st;
    float *t, *big, *keep;
    size_t held;
    uint64_t created;
    double ms;
    (void)state;
    REQUIRE_GPU();
    pool = gpu_pool();
    s = gpu_stream_new(0);
    VPMM_OK(vpmm_graph_pool_create(pool, &gp));
    VPMM_OK(vpmm_capture_begin(pool, gp, s, VPMM_STREAM_CAPTURE_GLOBAL));
    t = alloc_f(pool, 16 * MiB, s); /* 64 MiB, freed inside the graph */
    GK_OK(gk_affine(t, t, 16 * MiB, 0.0f, 1.0f, 0, s));
    keep = alloc_f(pool, 256, s);
    GK_OK(gk_resample(keep, 256, t, 16 * MiB, 1.0f, s));
    free_f(pool, t);
    VPMM_OK(vpmm_capture_end(pool, s, &g));
    instantiate(&c, g);
    CUDA_OK(cudaGraphLaunch(c.exec, s));
    held = tgp_stats(gp).mapped_bytes;
    VPMM_OK(vpmm_graph_pool_release(gp));
    /* The graph lives: its memory must not be freed. */
    assert_int_equal(vpmm_pool_destroy(pool), VPMM_ERROR_POOL_BUSY);
    CHECK_POOL(pool);
    CUDA_OK(cudaStreamSynchronize(s));
    destroy(&c);
    ms = wait_graph_pools_gone(pool);
    VPMM_OK(vpmm_get_stats(pool, &st));
    created = st.pages_created;
    /* The graph pool's pages (now the shared pool's, with keep still live in them) serve a
     * large malloc without creating any page. */
    big = alloc_f(pool, (held - 2 * MiB) / sizeof(float), s);
    GK_OK(gk_affine(big, big, 1024, 1.0f, 0.0f, 0, s));
    VPMM_OK(vpmm_get_stats(pool, &st));
    print_message("[gpu-graph] pages return: the graph pool held %zu MiB; %.1f ms after the "
                  "graph's destruction it was returned; a %zu MiB malloc then created %llu pages "
                  "(remapped %llu)\n",
                  held / MiB, ms, (held - 2 * MiB) / MiB,
                  (unsigned long long)(st.pages_created - created),
                  (unsigned long long)st.pages_remapped);
    assert_int_equal(st.pages_created, created);
    CUDA_OK(cudaStreamSynchronize(s));
    free_f(pool, big);
    free_f(pool, keep);
    CHECK_POOL(pool);
    VPMM_OK(vpmm_pool_destroy(pool));
    CUDA_OK(cudaStreamDestroy(s));
}

/* ---- 5: a capture begun outside vpmm, with a forked stream ----------------------------------- */

static void test_external_capture_with_fork(void **state)
{
    vpmm_pool_t *pool;
    cudaStream_t s, s2;
    cudaEvent_t fork, join;
    cudaGraph_t graph;
    captured_t c;
    float *x, *y, *z, *hx, *hz, *want, *tmp;
    vpmm_stats_t st;
    unsigned gid;
    size_t bad;
    (void)state;
    REQUIRE_GPU(); /* before any malloc: skip() leaves the function */
    hx = malloc(N_BIG * sizeof *hx);
    hz = malloc(N_BIG * sizeof *hz);
    want = malloc(N_BIG * sizeof *want);
    tmp = malloc(N_BIG * sizeof *tmp);
    assert_non_null(hx);
    assert_non_null(hz);
    assert_non_null(want);
    assert_non_null(tmp);
    pool = gpu_pool();
    s = gpu_stream_new(0);
    s2 = gpu_stream_new(0);
    CUDA_OK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CUDA_OK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    x = alloc_f(pool, N_BIG, s);
    make_input(hx, N_BIG, 77);
    CUDA_OK(cudaMemcpy(x, hx, N_BIG * sizeof *hx, cudaMemcpyHostToDevice));

    /* As torch.cuda.graph does: vpmm only sees allocations on capturing streams. */
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    y = alloc_f(pool, N_BIG, s);
    gid = tregion_of(pool, y).pool;
    assert_true(gid != 0);
    GK_OK(gk_affine(y, x, N_BIG, 2.0f, 1.0f, 0, s));
    CUDA_OK(cudaEventRecord(fork, s));
    CUDA_OK(cudaStreamWaitEvent(s2, fork, 0));
    z = alloc_f(pool, N_BIG, s2); /* the forked stream: same capture, same graph pool */
    assert_int_equal(tregion_of(pool, z).pool, gid);
    GK_OK(gk_affine(z, y, N_BIG, 0.5f, -1.0f, 1, s2));
    CUDA_OK(cudaEventRecord(join, s2));
    CUDA_OK(cudaStreamWaitEvent(s, join, 0));
    GK_OK(gk_add(z, z, x, N_BIG, s));
    free_f(pool, y);
    CUDA_OK(cudaStreamEndCapture(s, &graph));
    VPMM_OK(vpmm_get_stats(pool, &st));
    assert_int_equal(st.graph_pools, 1);
    instantiate(&c, (vpmm_graph_t)graph);
    CUDA_OK(cudaGraphLaunch(c.exec, s));
    CUDA_OK(cudaMemcpyAsync(hz, z, N_BIG * sizeof *hz, cudaMemcpyDeviceToHost, s));
    CUDA_OK(cudaStreamSynchronize(s));
    ref_affine(tmp, hx, N_BIG, 2.0f, 1.0f, 0);
    ref_affine(want, tmp, N_BIG, 0.5f, -1.0f, 1);
    ref_add(want, want, hx, N_BIG);
    bad = mismatches(hz, want, N_BIG);
    destroy(&c);
    free_f(pool, z);
    print_message("[gpu-graph] external capture (global mode) with a forked stream: one graph "
                  "pool g%u served both streams and grew during the capture; %zu mismatches; "
                  "returned %.1f ms after the graph's destruction\n",
                  gid, bad, wait_graph_pools_gone(pool));
    assert_int_equal(bad, 0);
    free_f(pool, x);
    CHECK_POOL(pool);
    VPMM_OK(vpmm_stream_release(pool, s));
    VPMM_OK(vpmm_stream_release(pool, s2));
    VPMM_OK(vpmm_pool_destroy(pool));
    CUDA_OK(cudaEventDestroy(fork));
    CUDA_OK(cudaEventDestroy(join));
    CUDA_OK(cudaStreamDestroy(s));
    CUDA_OK(cudaStreamDestroy(s2));
    free(hx);
    free(hz);
    free(want);
    free(tmp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inference_replay),
        cmocka_unit_test(test_replay_across_defragmentation),
        cmocka_unit_test(test_graph_tree),
        cmocka_unit_test(test_pages_return_to_shared_pool),
        cmocka_unit_test(test_external_capture_with_fork),
    };
    return gpu_exit_status(cmocka_run_group_tests(tests, NULL, NULL));
}
