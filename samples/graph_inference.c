/*
 * graph_inference.c — capture once, replay many: an inference step captured into a graph whose
 * memory comes from a vpmm graph pool, replayed with a new input each time. It uses only
 * include/vpmm.h, through the op list of graph_ops.h.
 *
 * The pool is created on the default backend, CUDA. On a GPU the step's ops are kernels captured
 * into a CUDA graph, replayed with cudaGraphLaunch. With no GPU the program asks for vpmm's host
 * emulation backend by name (ops_pool_create), which emulates the capture: the ops are recorded in
 * an op list that each replay runs on the CPU, on the same vpmm memory. It says which it does.
 *
 * The input (4096 floats) and the weights (3 MiB) are allocated before the capture, from the
 * shared pool. The step is six layers; each writes a new array allocated inside the capture with
 * vpmm_malloc, and each array is freed with vpmm_free inside the capture as soon as no later
 * layer reads it. vpmm serves those allocations from the graph pool and reuses what the capture
 * freed for its later layers (stream order); the output (1000 floats) stays live after it. The
 * graph is replayed N times (argv[1], default 1000), each time after writing a new input; the
 * output of every 10th replay and of the last is compared with the step run eagerly on the CPU
 * on malloc'd arrays (which costs as much as a host replay again). Printed: the time per replay,
 * the graph pool's and the pool's statistics, the outputs that were correct. Then everything is
 * freed and destroyed; vpmm_pool_destroy must succeed. Exit status: 0 if every output was correct
 * and every call succeeded, else 1 (reason on stderr).
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "graph_ops.h"
#include "vpmm.h"

enum {
    N_IN = 4096,                  /* input: 16 KiB */
    N_WIDE = 3 * 1024 * 1024 / 4, /* the wide layers: 3 MiB each */
    N_OUT = 1000,                 /* output: 4000 bytes, not even a multiple of VPMM_ALIGNMENT */
    LAYERS = 6,
    DEFAULT_REPLAYS = 1000,
    CHECK_EVERY = 10, /* replays whose output is checked: 1, 11, 21, ... and the last */
};

/*
 * The inference step, from input x and weights w; returns the output (1000 floats). Six layers,
 * every array freed once no later layer reads it: h5 reuses the memory of h1 and h2.
 */
static float *inference_step(ops_ctx_t *c, const float *x, const float *w)
{
    float *h1, *h2, *h3, *h4, *h5, *out;

    h1 = ops_new(c, N_IN);
    op_affine_relu(c, h1, x, N_IN, 0.5f, 0.25f); /* 1. h1 = relu(x / 2 + 1 / 4) */
    h2 = ops_new(c, N_WIDE);
    op_scale(c, h2, h1, N_IN, w, N_WIDE); /* 2. h2 = h1 (repeated) * w: widen */
    ops_free(c, h1);
    h3 = ops_new(c, N_WIDE);
    op_affine_relu(c, h3, h2, N_WIDE, 2.0f, -0.125f); /* 3. h3 = relu(2 h2 - 1 / 8) */
    h4 = ops_new(c, N_WIDE);
    op_add(c, h4, h2, h3, N_WIDE); /* 4. h4 = h2 + h3: a residual connection */
    ops_free(c, h2);
    ops_free(c, h3);
    h5 = ops_new(c, N_WIDE);
    op_affine_relu(c, h5, h4, N_WIDE, -1.0f, 0.5f); /* 5. h5 = relu(1 / 2 - h4) */
    ops_free(c, h4);
    out = ops_new(c, N_OUT);
    op_fold(c, out, N_OUT, h5, N_WIDE); /* 6. out = h5 summed down to 1000 values */
    ops_free(c, h5);
    return out;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/*
 * Replays graph `replays` times, each after writing a new input into x. The output (at out) of
 * every CHECK_EVERY-th replay and of the last is compared with the step run on the CPU:
 * *out_checked counts those, *out_correct the correct ones. Returns nonzero if a call failed.
 */
static int replay(ops_ctx_t *c, const ops_graph_t *graph, float *x, const float *out,
                  const float *w_host, long replays, long *out_checked, long *out_correct,
                  double *out_seconds)
{
    static float x_host[N_IN], out_host[N_OUT];
    ops_ctx_t ref;

    *out_checked = *out_correct = 0;
    *out_seconds = 0.0;
    ops_ctx_init_reference(&ref);
    for (long r = 0; r < replays && !ops_failed(c) && !ops_failed(&ref); r++) {
        double t0;
        float *want;

        ops_random(x_host, N_IN, (unsigned)r + 1);
        t0 = now_s();
        ops_write(c, x, x_host, N_IN); /* outside the graph, before the replay */
        ops_graph_launch(c, graph);
        ops_read(c, out_host, out, N_OUT);
        *out_seconds += now_s() - t0;

        if (r % CHECK_EVERY != 0 && r != replays - 1)
            continue;
        want = inference_step(&ref, x_host, w_host);
        if (want != NULL) {
            ++*out_checked;
            *out_correct += ops_same(out_host, want, N_OUT);
        }
        ops_free(&ref, want);
    }
    return ops_failed(c) || ops_failed(&ref);
}

static void print_stats(const vpmm_graph_pool_stats_t *g, const vpmm_stats_t *s)
{
    printf("graph pool g%u (the step's memory)\n", g->id);
    printf("  %-44s %12s\n", "live (the output)", ops_bytes(g->live_bytes).s);
    printf("  %-44s %12s\n", "peak live (during the capture)", ops_bytes(g->peak_live_bytes).s);
    printf("  %-44s %12s\n", "mapped", ops_bytes(g->mapped_bytes).s);
    printf("  %-44s %12s\n", "peak mapped", ops_bytes(g->peak_mapped_bytes).s);
    printf("  %-44s %12llu\n", "mallocs", (unsigned long long)g->mallocs);
    printf("  %-44s %12llu\n", "frees", (unsigned long long)g->frees);
    printf("pool (shared pool and graph pools)\n");
    printf("  %-44s %12s\n", "mapped", ops_bytes(s->mapped_bytes).s);
    printf("  %-44s %12s\n", "of which graph pools (private_mapped_bytes)",
           ops_bytes(s->private_mapped_bytes).s);
    printf("  %-44s %12llu\n", "graph pools", (unsigned long long)s->graph_pools);
}

int main(int argc, char **argv)
{
    long replays = ops_count_arg(argc, argv, DEFAULT_REPLAYS), checked, correct;
    vpmm_graph_pool_stats_t gs;
    vpmm_graph_pool_t *gp;
    vpmm_config_t cfg;
    vpmm_stats_t s;
    vpmm_pool_t *pool;
    ops_graph_t graph;
    ops_ctx_t c = { 0 }; /* ops_check may report into it before ops_ctx_init */
    float *w_host, *x, *w, *out;
    size_t step_bytes;
    double seconds;

    if (replays == 0) {
        fprintf(stderr, "usage: %s [replays]   (a positive count; default %d)\n", argv[0],
                DEFAULT_REPLAYS);
        return 2;
    }
    vpmm_config_init(&cfg);
    if (ops_check(&c, ops_pool_create(&cfg, &pool), "vpmm_pool_create"))
        return 1;
    if (ops_ctx_init(&c, pool) ||
        ops_check(&c, vpmm_graph_pool_create(pool, &gp), "vpmm_graph_pool_create"))
        return 1; /* the process exit gives everything back */

    /* Outside the capture: the input and the weights, from the shared pool. */
    w_host = malloc(N_WIDE * sizeof *w_host);
    if (w_host == NULL) {
        fprintf(stderr, "error: out of host memory for the weights\n");
        return 1;
    }
    ops_random(w_host, N_WIDE, 0);
    x = ops_new(&c, N_IN);
    w = ops_new(&c, N_WIDE);
    ops_write(&c, w, w_host, N_WIDE);

    /* Capture once: every allocation of the step comes from the graph pool. */
    step_bytes = c.new_bytes;
    ops_capture_begin(&c, gp, &graph);
    out = inference_step(&c, x, w);
    ops_capture_end(&c, &graph);
    if (ops_failed(&c))
        return 1;
    step_bytes = c.new_bytes - step_bytes;
    printf("captured the step once: %d layers writing %s of new arrays, all but the output\n"
           "freed inside the capture\n",
           LAYERS, ops_bytes(step_bytes).s);

    /* Replay many. */
    if (replay(&c, &graph, x, out, w_host, replays, &checked, &correct, &seconds) ||
        ops_check(&c, vpmm_graph_pool_stats(gp, &gs), "vpmm_graph_pool_stats") ||
        ops_check(&c, vpmm_get_stats(pool, &s), "vpmm_get_stats"))
        return 1;
    printf("replayed it %ld times: %.1f us per replay (write the input, launch, read the "
           "output)\n",
           replays, 1e6 * seconds / (double)replays);
    if (c.mode == OPS_EMULATED)
        printf("(on the host backend a launch runs the captured op list on the CPU)\n");
    print_stats(&gs, &s);
    printf("outputs correct: %ld/%ld (every %dth replay and the last, checked against the CPU)\n",
           correct, checked, CHECK_EVERY);

    /* Clean up: the output, the graph (and its instance), the graph pool, the pool. */
    ops_free(&c, out);
    ops_free(&c, x);
    ops_free(&c, w);
    ops_graph_destroy(&c, &graph);
    ops_check(&c, vpmm_graph_pool_release(gp), "vpmm_graph_pool_release");
    if (ops_ctx_fini(&c))
        return 1;
    /* CUDA lets go of a destroyed graph's resources on its own thread, once its launches are
     * done: the graph pool's pages come back a moment later (vpmm_get_stats notices). */
    for (int ms = 0;; ms++) {
        const struct timespec one_ms = { 0, 1000000 };
        if (ops_check(&c, vpmm_get_stats(pool, &s), "vpmm_get_stats"))
            return 1;
        if (s.graph_pools == 0 || ms == 1000) {
            printf("graph and graph pool gone after %d ms: %llu graph pools, %s private, %s "
                   "mapped in the pool (free, for the pool's next allocations)\n",
                   ms, (unsigned long long)s.graph_pools, ops_bytes(s.private_mapped_bytes).s,
                   ops_bytes(s.mapped_bytes).s);
            break;
        }
        nanosleep(&one_ms, NULL);
    }
    if (ops_check(&c, vpmm_pool_destroy(pool), "vpmm_pool_destroy"))
        return 1;
    printf("pool destroyed\n");
    free(w_host);
    return correct == checked ? 0 : 1;
}
