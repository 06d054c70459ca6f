/*
 * checkpoint.c — vpmm-checkpoint: what graph-pool checkpoints cost, in time and in memory.
 *
 *   vpmm-checkpoint [--backend host|cuda] [--json] [--regions 10,1000,100000] [--reps N]
 *                   [--seed S] [--version]
 *
 * A. Time. For each region count R, a fresh pool with one graph pool: one capture (relaxed mode)
 *    makes R allocations of seeded sub-page sizes (multiples of 256 B, 256 B .. 64 KiB) and frees
 *    every other one, so the graph pool holds about R regions, live and free alternating. Each
 *    call below is timed alone with the TSC (timing.h, as in vpmm-replay; the timer's own tens of
 *    ns are included), after one untimed warm-up, --reps
 *    times; the table gives the median, the p90 and the median per region of the target state:
 *      take          vpmm_checkpoint_take (the destroy is not timed);
 *      unchanged     reapplying a checkpoint of the current state (nothing differs);
 *      branch        C1 = that state; a capture allocates and frees R/10 temporaries and leaves
 *                    2 outputs live; C2; reapply C1 and reapply C2 alternately, each timed;
 *      all-differ    reapply C1 with all its allocations dead, a capture of R different sizes
 *                    over the whole pool; C3; reapply C1 and reapply C3 alternately.
 *    "changed" is how many allocations the two states do not share. The checkpoint goal is
 *    <= 20 us at 1k regions; rows for R = 1000 say whether the median meets it.
 * B. Memory. A graph tree of a Llama-7B-like model (fp16, 8 layers): G1 a 512-token prefill that
 *    leaves its hidden states live, then two alternative decode steps after it, G2 (batch 256)
 *    and G3 (batch 512), each leaving its logits and tokens live. Captured into ONE graph pool
 *    (G1, take C1, G2, reapply C1, G3), versus each graph in a graph pool of its own, versus each
 *    branch alone (G1 then G2, G1 then G3, in a graph pool of their own). Reported: the mapped
 *    bytes of each; each branch's peak live bytes (the shared pool's peaks are reset between the
 *    captures; live bytes do not depend on placement); and two ratios against the goal <= 1.05:
 *    shared / the larger branch alone (what sharing costs) and shared / the larger branch's peak
 *    live bytes (which adds what placement costs inside captures, where pages cannot move).
 *
 * The backend is CUDA by default, as the library's and the other tools' (--backend host: the
 * emulation; checkpoints are host bookkeeping, the backend only builds the state: on cuda the
 * captures are real, on one non-blocking stream; nothing is launched). Every graph stays alive
 * until the end (a graph pins its graph pool's memory); then each graph pool is emptied by a
 * reapply with every allocation dead, the graphs are destroyed, the graph pools released and the
 * pools destroyed. Exit status: 0, 1 bad usage, 2 backend unavailable, 3 an error (vpmm's message
 * on stderr).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cli.h"
#include "escape.h"
#include "timing.h"
#include "vpmm.h"

#define TOOL "vpmm-checkpoint"

#define KiB          ((size_t)1 << 10)
#define MiB          ((size_t)1 << 20)
#define MAX_COUNTS   16
#define GOAL_REGIONS 1000
#define GOAL_US      20.0
#define GOAL_RATIO   1.05
/* VA chunks of 16 GiB (the shared pool's default is 8 TiB, a graph pool's 64 GiB): valgrind cannot
 * reserve those, and no graph pool here needs more than a few GiB (more chunks come if one does).
 */
#define VA_CHUNK ((size_t)16 << 30)

typedef struct setup {
    vpmm_backend_t backend;
    vpmm_stream_t stream;
    int json;
    size_t reps;
    uint64_t seed;
} setup_t;

/* The q-quantile of n tick counts (sorted in place), in microseconds. */
static double quantile_us(uint64_t *t, size_t n, double q)
{
    return (double)timing_quantile_u64(t, n, q) / timing_ticks_per_ns / 1e3;
}

static uint64_t rng_next(uint64_t *s) /* splitmix64 */
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* A size in [lo, hi], a multiple of 256 B. */
static size_t rng_size(uint64_t *s, size_t lo, size_t hi)
{
    return lo + (size_t)(rng_next(s) % ((hi - lo) / VPMM_ALIGNMENT + 1)) * VPMM_ALIGNMENT;
}

/* ---- a pool, its graph pools and the graphs captured into them ----------------------------- */

typedef struct world {
    vpmm_pool_t *pool;
    vpmm_stream_t stream;
    vpmm_graph_pool_t *gp[3];
    size_t ngp;
    vpmm_graph_t *graphs;
    size_t ngraphs, graphs_cap;
    int capturing;
    vpmm_status_t st; /* the first failure; t_alloc and t_free do nothing after it */
} world_t;

static int fail(world_t *w, const char *what, vpmm_status_t st)
{
    if (w->st == VPMM_SUCCESS)
        fprintf(stderr, "vpmm-checkpoint: %s: %s (%s)\n", what, vpmm_status_name(st),
                vpmm_last_error());
    w->st = st;
    return -1;
}

#define CHECK_W(w, call)                                                                           \
    do {                                                                                           \
        vpmm_status_t st_ = (call);                                                                \
        if (st_ != VPMM_SUCCESS)                                                                   \
            return fail((w), #call, st_);                                                          \
    } while (0)

#define CHECK_GOTO_W(w, call, label)                                                               \
    do {                                                                                           \
        vpmm_status_t st_ = (call);                                                                \
        if (st_ != VPMM_SUCCESS) {                                                                 \
            fail((w), #call, st_);                                                                 \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

static void *t_alloc(world_t *w, size_t size)
{
    void *p = NULL;
    vpmm_status_t st;
    if (w->st != VPMM_SUCCESS)
        return NULL;
    st = vpmm_malloc(w->pool, size, w->stream, &p);
    if (st != VPMM_SUCCESS)
        fail(w, "vpmm_malloc", st);
    return p;
}

static void t_free(world_t *w, void *p)
{
    vpmm_status_t st;
    if (w->st != VPMM_SUCCESS)
        return;
    st = vpmm_free(w->pool, p);
    if (st != VPMM_SUCCESS)
        fail(w, "vpmm_free", st);
}

static int capture_begin(world_t *w, vpmm_graph_pool_t *gp)
{
    if (w->st != VPMM_SUCCESS)
        return -1;
    CHECK_W(w, vpmm_capture_begin(w->pool, gp, w->stream, VPMM_STREAM_CAPTURE_RELAXED));
    w->capturing = 1;
    return 0;
}

/* Ends the capture (also after a failure inside it) and keeps its graph until world_close. */
static int capture_end(world_t *w)
{
    vpmm_graph_t g = NULL;
    vpmm_status_t st;
    if (!w->capturing)
        return -1;
    if (w->ngraphs == w->graphs_cap) {
        size_t cap = w->graphs_cap ? 2 * w->graphs_cap : 8;
        vpmm_graph_t *v = realloc(w->graphs, cap * sizeof *v);
        if (v == NULL)
            return fail(w, "realloc", VPMM_ERROR_HOST_OUT_OF_MEMORY);
        w->graphs = v;
        w->graphs_cap = cap;
    }
    w->capturing = 0;
    st = vpmm_capture_end(w->pool, w->stream, &g);
    if (g != NULL)
        w->graphs[w->ngraphs++] = g;
    if (st != VPMM_SUCCESS)
        return fail(w, "vpmm_capture_end", st);
    return w->st == VPMM_SUCCESS ? 0 : -1;
}

/* The addresses of ck's allocations (malloc'd; NULL when out of memory), their number in *n. */
static void **alloc_ptrs(const vpmm_checkpoint_t *ck, size_t *n)
{
    vpmm_checkpoint_alloc_t *al;
    void **ptrs;
    *n = vpmm_checkpoint_allocs(ck, NULL, 0);
    al = malloc((*n + 1) * sizeof *al);
    ptrs = malloc((*n + 1) * sizeof *ptrs);
    if (al != NULL && ptrs != NULL) {
        vpmm_checkpoint_allocs(ck, al, *n);
        for (size_t i = 0; i < *n; i++)
            ptrs[i] = al[i].ptr;
    } else {
        free(ptrs);
        ptrs = NULL;
    }
    free(al);
    return ptrs;
}

/* Frees every allocation of gp: a reapply of its current state with all of them dead. */
static int empty_graph_pool(world_t *w, vpmm_graph_pool_t *gp)
{
    vpmm_checkpoint_t *ck = NULL;
    vpmm_status_t st = VPMM_ERROR_HOST_OUT_OF_MEMORY;
    void **dead;
    size_t n;

    CHECK_W(w, vpmm_checkpoint_take(gp, &ck));
    dead = alloc_ptrs(ck, &n);
    if (dead != NULL)
        st = vpmm_checkpoint_reapply(gp, ck, dead, n);
    free(dead);
    vpmm_checkpoint_destroy(ck);
    return st == VPMM_SUCCESS ? 0 : fail(w, "emptying a graph pool", st);
}

/* Checks the pool's invariants, then tears everything down; 0, or 3 after any failure. */
static int world_close(world_t *w)
{
    size_t bad = 0;
    vpmm_status_t st;
    if (w->capturing)
        capture_end(w);
    if (w->st == VPMM_SUCCESS && (bad = vpmm_pool_check(w->pool, stderr)) != 0)
        fprintf(stderr, "vpmm-checkpoint: vpmm_pool_check: %zu violations\n", bad);
    for (size_t i = 0; i < w->ngp; i++)
        empty_graph_pool(w, w->gp[i]);
    for (size_t i = 0; i < w->ngraphs; i++)
        if ((st = vpmm_graph_destroy(w->pool, w->graphs[i])) != VPMM_SUCCESS)
            fail(w, "vpmm_graph_destroy", st);
    for (size_t i = 0; i < w->ngp; i++)
        if ((st = vpmm_graph_pool_release(w->gp[i])) != VPMM_SUCCESS)
            fail(w, "vpmm_graph_pool_release", st);
    if ((st = vpmm_pool_destroy(w->pool)) != VPMM_SUCCESS)
        fail(w, "vpmm_pool_destroy", st);
    free(w->graphs);
    return w->st == VPMM_SUCCESS && bad == 0 ? 0 : 3;
}

/* A pool on su's backend with ngp graph pools: 0, or the exit status (nothing left open). */
static int world_open(const setup_t *su, size_t ngp, world_t *w)
{
    vpmm_config_t cfg;
    vpmm_status_t st;
    memset(w, 0, sizeof *w);
    w->stream = su->stream;
    vpmm_config_init(&cfg);
    cfg.backend = su->backend;
    cfg.ignore_env = 1;
    cfg.va_size = VA_CHUNK;
    st = vpmm_pool_create(&cfg, &w->pool);
    if (st != VPMM_SUCCESS) {
        fprintf(stderr, "vpmm-checkpoint: vpmm_pool_create: %s (%s)\n", vpmm_status_name(st),
                vpmm_last_error());
        return st == VPMM_ERROR_NO_DEVICE || st == VPMM_ERROR_NOT_SUPPORTED ? 2 : 3;
    }
    for (; w->ngp < ngp; w->ngp++) {
        st = vpmm_graph_pool_create(w->pool, &w->gp[w->ngp]);
        if (st != VPMM_SUCCESS) {
            fail(w, "vpmm_graph_pool_create", st);
            return world_close(w);
        }
    }
    return 0;
}

static vpmm_graph_pool_stats_t gp_stats(world_t *w, vpmm_graph_pool_t *gp)
{
    vpmm_graph_pool_stats_t s;
    vpmm_status_t st = vpmm_graph_pool_stats(gp, &s);
    if (st != VPMM_SUCCESS) {
        fail(w, "vpmm_graph_pool_stats", st);
        memset(&s, 0, sizeof s);
    }
    return s;
}

/* ---- A. take and reapply time -------------------------------------------------------------- */

/* n allocations of seeded sub-page sizes; those with index parity `freed` are freed at once
 * after all are made, so live and free regions alternate. */
static int capture_layout(world_t *w, size_t n, uint64_t *rng, size_t freed)
{
    void **p = calloc(n, sizeof *p);
    if (p == NULL)
        return fail(w, "calloc", VPMM_ERROR_HOST_OUT_OF_MEMORY);
    if (capture_begin(w, w->gp[0]) == 0) {
        for (size_t i = 0; i < n; i++)
            p[i] = t_alloc(w, rng_size(rng, 256, 64 * KiB));
        for (size_t i = freed; i < n; i += 2)
            t_free(w, p[i]);
    }
    free(p);
    return capture_end(w);
}

/* A branch after the current state: n temporaries (at most 4 live at a time, in stream order),
 * of which two, a third and two thirds of the way in, stay live as outputs. */
static int capture_branch(world_t *w, size_t n, uint64_t *rng)
{
    void *window[4] = { NULL };
    if (capture_begin(w, w->gp[0]) != 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        void *p = t_alloc(w, rng_size(rng, 256, 64 * KiB));
        if (i == n / 3 || i == 2 * n / 3)
            continue; /* an output */
        t_free(w, window[i % 4]);
        window[i % 4] = p;
    }
    for (size_t i = 0; i < 4; i++)
        t_free(w, window[i]);
    return capture_end(w);
}

static size_t ck_regions(const vpmm_checkpoint_t *ck)
{
    vpmm_checkpoint_info_t info;
    if (vpmm_checkpoint_info(ck, &info) != VPMM_SUCCESS)
        return 0;
    return info.allocs + info.free_regions;
}

/* Allocations that are in one checkpoint but not (at the same address and size) the other. */
static size_t changed_allocs(const vpmm_checkpoint_t *a, const vpmm_checkpoint_t *b)
{
    size_t na = vpmm_checkpoint_allocs(a, NULL, 0), nb = vpmm_checkpoint_allocs(b, NULL, 0);
    vpmm_checkpoint_alloc_t *x = malloc((na + 1) * sizeof *x), *y = malloc((nb + 1) * sizeof *y);
    size_t i = 0, j = 0, same = 0;
    if (x != NULL && y != NULL) {
        vpmm_checkpoint_allocs(a, x, na);
        vpmm_checkpoint_allocs(b, y, nb);
        while (i < na && j < nb) { /* both in address order */
            uintptr_t p = (uintptr_t)x[i].ptr, q = (uintptr_t)y[j].ptr;
            same += p == q && x[i].size == y[j].size;
            i += p <= q;
            j += q <= p;
        }
    }
    free(x);
    free(y);
    return na + nb - 2 * same;
}

/* "vpmm/<backend>" as a JSON string. */
static void json_backend(const char *backend)
{
    char name[64];
    snprintf(name, sizeof name, "vpmm/%s", backend);
    esc_json_string(stdout, name);
}

static void report_time(const setup_t *su, const char *backend, size_t asked, const char *name,
                        size_t regions, size_t changed, uint64_t *t)
{
    double med = quantile_us(t, su->reps, 0.5), p90 = quantile_us(t, su->reps, 0.9);
    double per = regions ? med * 1e3 / (double)regions : 0.0;
    int goal = asked == GOAL_REGIONS, met = med <= GOAL_US;
    if (su->json) {
        printf("{\"bench\": \"checkpoint-time\", \"backend\": ");
        json_backend(backend);
        printf(", \"regions_asked\": %zu, \"regions\": %zu, \"scenario\": ", asked, regions);
        esc_json_string(stdout, name);
        printf(", \"changed_allocs\": %zu, \"reps\": %zu, \"median_us\": %.3f, \"p90_us\": %.3f, "
               "\"ns_per_region\": %.2f",
               changed, su->reps, med, p90, per);
        if (goal)
            printf(", \"goal_us\": %.0f, \"meets_goal\": %s", GOAL_US, met ? "true" : "false");
        printf("}\n");
    } else {
        printf("  %8zu  %-20s %8zu %8zu %11.2f %10.2f %10.2f%s%s\n", asked, name, regions, changed,
               med, p90, per, goal ? "  " : "", goal ? (met ? "met" : "MISSED") : "");
    }
}

/* Times reapply(a) and, when b is not NULL, reapply(b) right after it, su->reps times each. */
static int time_reapply(world_t *w, const setup_t *su, const vpmm_checkpoint_t *a,
                        const vpmm_checkpoint_t *b, uint64_t *ta, uint64_t *tb)
{
    vpmm_graph_pool_t *gp = w->gp[0];
    for (size_t i = 0; i <= su->reps; i++) { /* i = 0: the warm-up */
        uint64_t t0 = timing_ticks();
        vpmm_status_t st = vpmm_checkpoint_reapply(gp, a, NULL, 0);
        uint64_t t1 = timing_ticks();
        if (st != VPMM_SUCCESS)
            return fail(w, "vpmm_checkpoint_reapply", st);
        if (i > 0)
            ta[i - 1] = t1 - t0;
        if (b == NULL)
            continue;
        t0 = timing_ticks();
        st = vpmm_checkpoint_reapply(gp, b, NULL, 0);
        t1 = timing_ticks();
        if (st != VPMM_SUCCESS)
            return fail(w, "vpmm_checkpoint_reapply", st);
        if (i > 0)
            tb[i - 1] = t1 - t0;
    }
    return 0;
}

static int time_take(world_t *w, const setup_t *su, uint64_t *t, size_t *regions)
{
    for (size_t i = 0; i <= su->reps; i++) {
        vpmm_checkpoint_t *ck = NULL;
        uint64_t t0 = timing_ticks();
        vpmm_status_t st = vpmm_checkpoint_take(w->gp[0], &ck);
        uint64_t t1 = timing_ticks();
        if (st != VPMM_SUCCESS)
            return fail(w, "vpmm_checkpoint_take", st);
        if (i > 0)
            t[i - 1] = t1 - t0;
        *regions = ck_regions(ck);
        vpmm_checkpoint_destroy(ck);
    }
    return 0;
}

/* All four scenarios at one region count, on a fresh pool. */
static int bench_time(const setup_t *su, size_t asked)
{
    world_t w;
    vpmm_checkpoint_t *c1 = NULL, *c2 = NULL, *c3 = NULL;
    uint64_t rng = su->seed ^ (asked * 0x2545f4914f6cdd1dULL);
    uint64_t *ta = malloc(su->reps * sizeof *ta), *tb = malloc(su->reps * sizeof *tb);
    const char *backend;
    size_t regions = 0, n = 0, changed;
    void **dead = NULL;
    int rc;

    if (ta == NULL || tb == NULL) {
        free(ta);
        free(tb);
        fprintf(stderr, "vpmm-checkpoint: out of host memory\n");
        return 3;
    }
    if ((rc = world_open(su, 1, &w)) != 0) {
        free(ta);
        free(tb);
        return rc;
    }
    backend = vpmm_pool_backend_name(w.pool);
    if (capture_layout(&w, asked, &rng, 1) != 0)
        goto out;

    if (time_take(&w, su, ta, &regions) != 0)
        goto out;
    report_time(su, backend, asked, "take", regions, 0, ta);

    CHECK_GOTO_W(&w, vpmm_checkpoint_take(w.gp[0], &c1), out);
    if (time_reapply(&w, su, c1, NULL, ta, NULL) != 0)
        goto out;
    report_time(su, backend, asked, "unchanged", ck_regions(c1), 0, ta);

    if (capture_branch(&w, asked / 10 + 2, &rng) != 0)
        goto out;
    CHECK_GOTO_W(&w, vpmm_checkpoint_take(w.gp[0], &c2), out);
    if (time_reapply(&w, su, c1, c2, ta, tb) != 0)
        goto out;
    changed = changed_allocs(c1, c2);
    report_time(su, backend, asked, "branch, to C1", ck_regions(c1), changed, ta);
    report_time(su, backend, asked, "branch, to C2", ck_regions(c2), changed, tb);

    if ((dead = alloc_ptrs(c1, &n)) == NULL) {
        fail(&w, "malloc", VPMM_ERROR_HOST_OUT_OF_MEMORY);
        goto out;
    }
    CHECK_GOTO_W(&w, vpmm_checkpoint_reapply(w.gp[0], c1, dead, n), out);
    if (capture_layout(&w, asked, &rng, 0) != 0)
        goto out;
    CHECK_GOTO_W(&w, vpmm_checkpoint_take(w.gp[0], &c3), out);
    if (time_reapply(&w, su, c1, c3, ta, tb) != 0)
        goto out;
    changed = changed_allocs(c1, c3);
    report_time(su, backend, asked, "all-differ, to C1", ck_regions(c1), changed, ta);
    report_time(su, backend, asked, "all-differ, to C3", ck_regions(c3), changed, tb);
out:
    free(dead);
    free(ta);
    free(tb);
    vpmm_checkpoint_destroy(c1);
    vpmm_checkpoint_destroy(c2);
    vpmm_checkpoint_destroy(c3);
    return world_close(&w);
}

/* ---- B. graph-tree memory ------------------------------------------------------------------ */

/* A Llama-7B-like decoder (fp16 activations, fp32 logits), 8 of its layers. */
#define HIDDEN  ((size_t)4096)
#define FFN     ((size_t)11008)
#define HEADS   ((size_t)32)
#define VOCAB   ((size_t)32000)
#define LAYERS  8
#define PROMPT  ((size_t)512)
#define BATCH_A ((size_t)256)
#define BATCH_B ((size_t)512)
#define FP16    2

/* One layer on n tokens attending to ctx positions: consumes x, returns its output. GEMM
 * workspaces (seeded, 256 KiB .. 4 MiB) and small tables (seeded sub-page sizes) come and go. */
static void *layer(world_t *w, uint64_t *rng, void *x, size_t n, size_t ctx)
{
    void *stats = t_alloc(w, n * 2 * sizeof(float));
    void *ln = t_alloc(w, n * HIDDEN * FP16);
    void *rope = t_alloc(w, rng_size(rng, 256, 64 * KiB));
    void *qkv = t_alloc(w, n * 3 * HIDDEN * FP16);
    void *ws, *scores, *attn, *h, *gate, *up, *act, *out;

    t_free(w, ln);
    ws = t_alloc(w, rng_size(rng, 256 * KiB, 4 * MiB));
    scores = t_alloc(w, HEADS * n * ctx * FP16);
    attn = t_alloc(w, n * HIDDEN * FP16);
    t_free(w, scores);
    t_free(w, ws);
    t_free(w, rope);
    t_free(w, qkv);
    h = t_alloc(w, n * HIDDEN * FP16); /* x + attn Wo */
    t_free(w, attn);
    t_free(w, x);
    ln = t_alloc(w, n * HIDDEN * FP16);
    gate = t_alloc(w, n * FFN * FP16);
    up = t_alloc(w, n * FFN * FP16);
    t_free(w, ln);
    act = t_alloc(w, n * FFN * FP16);
    t_free(w, gate);
    t_free(w, up);
    ws = t_alloc(w, rng_size(rng, 256 * KiB, 4 * MiB));
    out = t_alloc(w, n * HIDDEN * FP16); /* h + act Wdown */
    t_free(w, ws);
    t_free(w, act);
    t_free(w, h);
    t_free(w, stats);
    return out;
}

/* G1: the prompt's prefill; its final hidden states stay live. */
static void prefill(world_t *w, uint64_t *rng)
{
    void *ids = t_alloc(w, PROMPT * sizeof(int64_t));
    void *x = t_alloc(w, PROMPT * HIDDEN * FP16);
    t_free(w, ids);
    for (int l = 0; l < LAYERS; l++)
        x = layer(w, rng, x, PROMPT, PROMPT);
    t_alloc(w, PROMPT * HIDDEN * FP16); /* the output: final norm */
    t_free(w, x);
}

/* G2, G3: one decode step for batch sequences; its logits and tokens stay live. */
static void decode(world_t *w, uint64_t *rng, size_t batch)
{
    void *x = t_alloc(w, batch * HIDDEN * FP16), *ln;
    for (int l = 0; l < LAYERS; l++)
        x = layer(w, rng, x, batch, PROMPT + 1);
    ln = t_alloc(w, batch * HIDDEN * FP16);
    t_free(w, x);
    t_alloc(w, batch * VOCAB * sizeof(float)); /* the logits */
    t_free(w, ln);
    t_alloc(w, batch * sizeof(int64_t)); /* the sampled tokens */
}

/* Captures graph `which` (0: G1, 1: G2, 2: G3) into gp; the same allocations in every setup. */
static int capture_graph(world_t *w, vpmm_graph_pool_t *gp, const setup_t *su, int which)
{
    uint64_t rng = su->seed + (uint64_t)which;
    if (capture_begin(w, gp) != 0)
        return -1;
    if (which == 0)
        prefill(w, &rng);
    else
        decode(w, &rng, which == 1 ? BATCH_A : BATCH_B);
    return capture_end(w);
}

typedef struct tree_mem {
    size_t page_size;
    size_t peak_live[3];    /* the shared graph pool, over G1, over G2, over G3 */
    size_t shared_mapped;   /* the shared graph pool at the end */
    size_t alone_mapped[2]; /* G1 then G2, G1 then G3, each in a graph pool of its own */
    size_t own_mapped[3];   /* G1, G2, G3, each in a graph pool of its own */
} tree_mem_t;

/* G1, take C1, G2, reapply C1, G3: one graph pool, peaks reset between the captures. */
static int tree_shared(const setup_t *su, tree_mem_t *m)
{
    world_t w;
    vpmm_checkpoint_t *c1 = NULL;
    vpmm_checkpoint_info_t info;
    vpmm_graph_pool_t *gp;
    vpmm_stats_t pst;
    int rc = world_open(su, 1, &w);
    if (rc != 0)
        return rc;
    gp = w.gp[0];
    if (capture_graph(&w, gp, su, 0) != 0)
        goto out;
    m->peak_live[0] = gp_stats(&w, gp).peak_live_bytes;
    CHECK_GOTO_W(&w, vpmm_checkpoint_take(gp, &c1), out);
    for (int branch = 1; branch <= 2; branch++) {
        if (branch == 2) {
            CHECK_GOTO_W(&w, vpmm_checkpoint_reapply(gp, c1, NULL, 0), out);
            CHECK_GOTO_W(&w, vpmm_checkpoint_info(c1, &info), out);
            if (gp_stats(&w, gp).live_bytes != info.live_bytes) {
                fprintf(stderr,
                        "vpmm-checkpoint: after reapplying C1 the graph pool holds %zu "
                        "live bytes, C1 %zu\n",
                        gp_stats(&w, gp).live_bytes, info.live_bytes);
                w.st = VPMM_ERROR_CHECKPOINT_CONFLICT;
                goto out;
            }
        }
        CHECK_GOTO_W(&w, vpmm_graph_pool_reset_peak_stats(gp), out);
        if (capture_graph(&w, gp, su, branch) != 0)
            goto out;
        m->peak_live[branch] = gp_stats(&w, gp).peak_live_bytes;
    }
    m->shared_mapped = gp_stats(&w, gp).mapped_bytes;
    CHECK_GOTO_W(&w, vpmm_get_stats(w.pool, &pst), out);
    m->page_size = pst.page_size;
out:
    vpmm_checkpoint_destroy(c1);
    return world_close(&w);
}

/* graphs[0..n) captured one after another, into gp[i] when `own`, else all into gp[0]; fills
 * mapped[i] with the mapped bytes of graph pool i after its capture. */
static int tree_apart(const setup_t *su, const int *graphs, size_t n, int own, size_t *mapped)
{
    world_t w;
    int rc = world_open(su, own ? n : 1, &w);
    if (rc != 0)
        return rc;
    for (size_t i = 0; i < n; i++) {
        vpmm_graph_pool_t *gp = w.gp[own ? i : 0];
        if (capture_graph(&w, gp, su, graphs[i]) != 0)
            break;
        mapped[i] = gp_stats(&w, gp).mapped_bytes;
    }
    return world_close(&w);
}

static double mib(size_t bytes)
{
    return (double)bytes / (double)MiB;
}

static int bench_tree(const setup_t *su, const char *backend)
{
    static const int all[] = { 0, 1, 2 }, path_a[] = { 0, 1 }, path_b[] = { 0, 2 };
    tree_mem_t m;
    size_t alone[2], branch_live[2], larger_live, larger_alone, own_total;
    double r_live, r_alone, r_own;
    int rc;

    memset(&m, 0, sizeof m);
    if ((rc = tree_shared(su, &m)) != 0 || (rc = tree_apart(su, all, 3, 1, m.own_mapped)) != 0 ||
        (rc = tree_apart(su, path_a, 2, 0, alone)) != 0)
        return rc;
    m.alone_mapped[0] = alone[1];
    if ((rc = tree_apart(su, path_b, 2, 0, alone)) != 0)
        return rc;
    m.alone_mapped[1] = alone[1];

    for (int b = 0; b < 2; b++)
        branch_live[b] = m.peak_live[0] > m.peak_live[b + 1] ? m.peak_live[0] : m.peak_live[b + 1];
    larger_live = branch_live[0] > branch_live[1] ? branch_live[0] : branch_live[1];
    larger_alone = m.alone_mapped[0] > m.alone_mapped[1] ? m.alone_mapped[0] : m.alone_mapped[1];
    own_total = m.own_mapped[0] + m.own_mapped[1] + m.own_mapped[2];
    r_live = (double)m.shared_mapped / (double)larger_live;
    r_alone = (double)m.shared_mapped / (double)larger_alone;
    r_own = (double)own_total / (double)m.shared_mapped;

    if (su->json) {
        printf("{\"bench\": \"checkpoint-tree\", \"backend\": ");
        json_backend(backend);
        printf(", \"page_size\": %zu, \"g1_peak_live\": %zu, \"branch_a_peak_live\": %zu, "
               "\"branch_b_peak_live\": %zu, "
               "\"branch_a_alone_mapped\": %zu, \"branch_b_alone_mapped\": %zu, "
               "\"shared_mapped\": %zu, \"goal_ratio\": %.2f, "
               "\"shared_over_larger_branch_alone\": %.4f, \"meets_goal_alone\": %s, "
               "\"shared_over_larger_branch_peak_live\": %.4f, \"meets_goal_peak_live\": %s, "
               "\"per_graph_mapped\": [%zu, %zu, %zu], \"per_graph_total\": %zu, "
               "\"per_graph_over_shared\": %.4f}\n",
               m.page_size, m.peak_live[0], branch_live[0], branch_live[1], m.alone_mapped[0],
               m.alone_mapped[1], m.shared_mapped, GOAL_RATIO, r_alone,
               r_alone <= GOAL_RATIO ? "true" : "false", r_live,
               r_live <= GOAL_RATIO ? "true" : "false", m.own_mapped[0], m.own_mapped[1],
               m.own_mapped[2], own_total, r_own);
        return 0;
    }
    printf("\nGraph-tree memory, vpmm/%s, %zu MiB pages: a Llama-7B-like model, fp16, %d layers\n"
           "  G1 prefill of %zu tokens -> G2 decode step, batch %zu (branch A)\n"
           "                          -> G3 decode step, batch %zu (branch B)\n",
           backend, m.page_size / MiB, LAYERS, PROMPT, BATCH_A, BATCH_B);
    printf("  %-54s %10s %14s\n", "", "mapped MiB", "peak live MiB");
    printf("  %-54s %10.1f %14.1f\n", "branch A: G1, G2 alone in a graph pool",
           mib(m.alone_mapped[0]), mib(branch_live[0]));
    printf("  %-54s %10.1f %14.1f\n", "branch B: G1, G3 alone in a graph pool",
           mib(m.alone_mapped[1]), mib(branch_live[1]));
    printf("  %-54s %10.1f\n", "shared: G1, C1, G2, reapply C1, G3 in one graph pool",
           mib(m.shared_mapped));
    printf("  %-54s %10.1f   (G1 %.1f + G2 %.1f + G3 %.1f)\n", "one graph pool per graph",
           mib(own_total), mib(m.own_mapped[0]), mib(m.own_mapped[1]), mib(m.own_mapped[2]));
    printf("  shared / larger branch alone, mapped   %6.3f   goal <= %.2f: %s\n", r_alone,
           GOAL_RATIO, r_alone <= GOAL_RATIO ? "met" : "MISSED");
    printf("  shared / larger branch's peak live     %6.3f   goal <= %.2f: %s\n", r_live,
           GOAL_RATIO, r_live <= GOAL_RATIO ? "met" : "MISSED");
    printf("  one graph pool per graph / shared      %6.3f\n", r_own);
    return 0;
}

/* ---- main ---------------------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f, "usage: vpmm-checkpoint [--backend host|cuda] [--json] [--regions N,N,...] "
               "[--reps N] [--seed S]\n"
               "  --backend  cuda (default: a GPU) or host (the emulation)\n"
               "  --json     one JSON object per line instead of the tables\n"
               "  --regions  region counts of the timing part (default 10,1000,100000)\n"
               "  --reps     timed repetitions of each call (default 200)\n"
               "  --seed     seed of the sizes (default 1)\n"
               "  --version  print the version and exit\n");
}

/* "10,1000,100000" into counts[]; 0 or the number of counts. */
static size_t parse_counts(const char *arg, size_t *counts)
{
    size_t n = 0;
    while (*arg != '\0') {
        char *end;
        unsigned long long v = strtoull(arg, &end, 10);
        if (end == arg || v < 2 || v > 10000000 || n == MAX_COUNTS || (*end != ',' && *end != 0))
            return 0;
        counts[n++] = (size_t)v;
        arg = *end == ',' ? end + 1 : end;
    }
    return n;
}

static int open_cuda_stream(setup_t *su)
{
    cudaStream_t s;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess && n > 0)
        e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e != cudaSuccess || n == 0) {
        fprintf(stderr,
                "vpmm-checkpoint: no usable CUDA device (%s); --backend host runs on the host "
                "emulation\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return -1;
    }
    su->stream = (vpmm_stream_t)s;
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "backend", required_argument, NULL, 'b' },
        { "json", no_argument, NULL, 'j' },
        { "regions", required_argument, NULL, 'r' },
        { "reps", required_argument, NULL, 'n' },
        { "seed", required_argument, NULL, 's' },
        CLI_COMMON_OPTIONS,
        { NULL, 0, NULL, 0 },
    };
    setup_t su = { VPMM_BACKEND_HOST, (vpmm_stream_t)(uintptr_t)0x10, 0, 200, 1 };
    size_t counts[MAX_COUNTS] = { 10, 1000, 100000 }, ncounts = 3;
    const char *backend = "cuda"; /* as the library and the other tools: host when asked for */
    uint64_t reps = su.reps;
    int c, rc = 0;

    cli_check_stdout_at_exit(TOOL);
    while ((c = getopt_long(argc, argv, "b:jr:n:s:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'b':
            backend = optarg;
            break;
        case 'j':
            su.json = 1;
            break;
        case 'r':
            if ((ncounts = parse_counts(optarg, counts)) == 0) {
                fprintf(stderr,
                        "vpmm-checkpoint: --regions: '%s' is not a list of at most %d counts "
                        "in 2..10000000\n",
                        optarg, MAX_COUNTS);
                return 1;
            }
            break;
        case 'n':
            if (cli_u64(TOOL, "--reps", optarg, 1, 1000000, &reps) != 0)
                return 1;
            su.reps = (size_t)reps;
            break;
        case 's':
            if (cli_u64(TOOL, "--seed", optarg, 0, UINT64_MAX, &su.seed) != 0)
                return 1;
            break;
        default:
            cli_other_option(TOOL, c, usage);
        }
    }
    if (optind < argc || (strcmp(backend, "host") != 0 && strcmp(backend, "cuda") != 0)) {
        if (optind < argc)
            fprintf(stderr, "vpmm-checkpoint: unexpected argument '%s'\n", argv[optind]);
        else
            fprintf(stderr, "vpmm-checkpoint: --backend: '%s' is not host or cuda\n", backend);
        usage(stderr);
        return 1;
    }
    if (strcmp(backend, "cuda") == 0) {
        su.backend = VPMM_BACKEND_CUDA;
        if (open_cuda_stream(&su) != 0)
            return 2;
    }
    timing_calibrate();
    if (!su.json)
        printf("Checkpoint take and reapply, vpmm/%s: median and p90 of %zu timed calls each\n"
               "  %8s  %-20s %8s %8s %11s %10s %10s  %s\n",
               backend, su.reps, "asked", "scenario", "regions", "changed", "median us", "p90 us",
               "ns/region", "<= 20 us at 1k");
    for (size_t i = 0; i < ncounts && rc == 0; i++)
        rc = bench_time(&su, counts[i]);
    if (rc == 0)
        rc = bench_tree(&su, backend);
    if (su.backend == VPMM_BACKEND_CUDA)
        cudaStreamDestroy((cudaStream_t)su.stream);
    return rc;
}
