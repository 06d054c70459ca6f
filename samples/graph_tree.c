/*
 * graph_tree.c — a graph tree: two branches after a common prefix, sharing one graph pool
 * through a checkpoint, against one graph pool per graph. It uses only include/vpmm.h, through
 * the op list of graph_ops.h (kernels on a GPU; on vpmm's host emulation backend, op lists the
 * CPU runs; the program says which).
 *
 * Three steps, each captured into a graph; the input and the weights are allocated outside the
 * captures, from the shared pool:
 *   G1  the encoder: 16 KiB -> 1 MiB -> 1 MiB -> its output `code` (64 KiB, live after G1)
 *   G2  branch A, a decoder reading code: three 3 MiB arrays live at once -> 1000 floats
 *   G3  branch B, another decoder reading code: two 5 MiB arrays live at once -> 1000 floats
 * G2 and G3 are alternative continuations of G1: a replay runs G1 then G2, or G1 then G3.
 *
 * One graph pool for the tree: capture G1, take checkpoint c1 (code live, G1's freed arrays
 * free), capture G2, reapply c1 (G2's allocations, its output included, are free again), capture
 * G3. G2 and G3 reuse G1's freed memory and each other's; a branch's output is read after its
 * replay, before the other branch runs (PyTorch's graph trees have the same rule). The peak of each
 * (vpmm_graph_pool_stats after vpmm_graph_pool_reset_peak_stats) is printed. G1 -> G2 and G1 -> G3
 * are then replayed alternately N times each (argv[1], default 50), each on a new input, and every
 * output is compared with the same steps run eagerly on the CPU on malloc'd arrays. For comparison
 * the same three steps are captured each into a graph pool of its own, and the memory of the two
 * layouts is printed side by side. Everything is freed; vpmm_pool_destroy must succeed.
 * Exit status: 0 if every output was correct and every call succeeded, else 1 (reason on stderr).
 */
#include <stdio.h>
#include <stdlib.h>

#include "graph_ops.h"
#include "vpmm.h"

enum {
    N_IN = 4096,               /* input: 16 KiB */
    N_ENC = 1024 * 1024 / 4,   /* the encoder's arrays: 1 MiB */
    N_CODE = 16384,            /* the encoder's output: 64 KiB */
    N_A = 3 * 1024 * 1024 / 4, /* branch A's arrays: 3 MiB */
    N_B = 5 * 1024 * 1024 / 4, /* branch B's arrays: 5 MiB */
    N_OUT = 1000,              /* a branch's output: 4000 bytes */
    DEFAULT_ROUNDS = 50,
};

enum { BRANCH_A, BRANCH_B, BRANCHES };

/* The weights of the three steps, on the host (the reference's) and in the pool (the graphs'). */
typedef struct weights {
    float *enc, *branch[BRANCHES];
} weights_t;

static const size_t branch_width[BRANCHES] = { N_A, N_B };

/* ---- the steps ------------------------------------------------------------------------------ */

static float *encoder(ops_ctx_t *c, const float *x, const weights_t *w)
{
    float *e1, *e2, *e3, *code;

    e1 = ops_new(c, N_IN);
    op_affine_relu(c, e1, x, N_IN, 0.5f, 0.25f);
    e2 = ops_new(c, N_ENC);
    op_scale(c, e2, e1, N_IN, w->enc, N_ENC);
    ops_free(c, e1);
    e3 = ops_new(c, N_ENC);
    op_affine_relu(c, e3, e2, N_ENC, 2.0f, -0.125f);
    ops_free(c, e2);
    code = ops_new(c, N_CODE);
    op_fold(c, code, N_CODE, e3, N_ENC);
    ops_free(c, e3);
    return code;
}

/* Branch A: a1 = code * w, a2 = relu(1/2 - a1), a3 = a1 + a2 (all three live), then a fold. */
static float *branch_a(ops_ctx_t *c, const float *code, const weights_t *w)
{
    float *a1, *a2, *a3, *out;

    a1 = ops_new(c, N_A);
    op_scale(c, a1, code, N_CODE, w->branch[BRANCH_A], N_A);
    a2 = ops_new(c, N_A);
    op_affine_relu(c, a2, a1, N_A, -1.0f, 0.5f);
    a3 = ops_new(c, N_A);
    op_add(c, a3, a1, a2, N_A);
    ops_free(c, a1);
    ops_free(c, a2);
    out = ops_new(c, N_OUT);
    op_fold(c, out, N_OUT, a3, N_A);
    ops_free(c, a3);
    return out;
}

/* Branch B: b1 = code * w, b2 = relu(b1 / 2 + 1/16), b3 = relu(1 - 2 b2) in b1's memory, then
 * a fold. */
static float *branch_b(ops_ctx_t *c, const float *code, const weights_t *w)
{
    float *b1, *b2, *b3, *out;

    b1 = ops_new(c, N_B);
    op_scale(c, b1, code, N_CODE, w->branch[BRANCH_B], N_B);
    b2 = ops_new(c, N_B);
    op_affine_relu(c, b2, b1, N_B, 0.5f, 0.0625f);
    ops_free(c, b1);
    b3 = ops_new(c, N_B);
    op_affine_relu(c, b3, b2, N_B, -2.0f, 1.0f);
    ops_free(c, b2);
    out = ops_new(c, N_OUT);
    op_fold(c, out, N_OUT, b3, N_B);
    ops_free(c, b3);
    return out;
}

static float *branch(ops_ctx_t *c, int b, const float *code, const weights_t *w)
{
    return b == BRANCH_A ? branch_a(c, code, w) : branch_b(c, code, w);
}

/* ---- the tree ------------------------------------------------------------------------------- */

/* The memory a capture left its graph pool with. */
typedef struct usage {
    size_t peak_live, peak_mapped, mapped;
} usage_t;

/* The three graphs, their outputs and what their captures used. */
typedef struct tree {
    ops_graph_t enc, branch[BRANCHES];
    float *code, *out[BRANCHES];
    usage_t enc_use, branch_use[BRANCHES];
} tree_t;

static void measure(ops_ctx_t *c, const vpmm_graph_pool_t *gp, usage_t *u)
{
    vpmm_graph_pool_stats_t s;
    if (ops_check(c, vpmm_graph_pool_stats(gp, &s), "vpmm_graph_pool_stats") == 0)
        *u = (usage_t){ s.peak_live_bytes, s.peak_mapped_bytes, s.mapped_bytes };
}

/*
 * Captures G1, G2 and G3 into graph pools gp[0], gp[1] and gp[2]. When they are one graph pool
 * (shared), G2 and G3 are made alternatives: checkpoint c1 after G1, reapplied before G3. Each
 * capture's peaks are measured from just before it.
 */
static void capture_tree(ops_ctx_t *c, vpmm_graph_pool_t *const gp[3], int shared, const float *x,
                         const weights_t *w, tree_t *t)
{
    vpmm_checkpoint_t *c1 = NULL;
    vpmm_checkpoint_info_t info;

    ops_capture_begin(c, gp[0], &t->enc);
    t->code = encoder(c, x, w);
    ops_capture_end(c, &t->enc);
    measure(c, gp[0], &t->enc_use);
    if (shared && !ops_failed(c) &&
        ops_check(c, vpmm_checkpoint_take(gp[0], &c1), "vpmm_checkpoint_take") == 0 &&
        ops_check(c, vpmm_checkpoint_info(c1, &info), "vpmm_checkpoint_info") == 0)
        printf("checkpoint c1 after G1: %zu allocation(s) (%s: G1's output), %s free, %s mapped\n",
               info.allocs, ops_bytes(info.live_bytes).s, ops_bytes(info.free_bytes).s,
               ops_bytes(info.mapped_bytes).s);

    for (int b = 0; b < BRANCHES && !ops_failed(c); b++) {
        vpmm_graph_pool_t *branch_gp = gp[1 + b];
        /* G3 continues G1, not G2: back to c1. Nothing of c1 has died (no dead list); G2's
         * allocations, its output included, are not in c1, so they are free again. G2 still
         * writes its output there on each replay: it is read before the next replay. */
        if (shared && b == BRANCH_B) {
            vpmm_graph_pool_stats_t s;
            if (ops_check(c, vpmm_checkpoint_reapply(branch_gp, c1, NULL, 0),
                          "vpmm_checkpoint_reapply") ||
                ops_check(c, vpmm_graph_pool_stats(branch_gp, &s), "vpmm_graph_pool_stats"))
                break;
            printf("reapplied c1 after G2: %s live (G1's output again), %s of %s mapped free\n",
                   ops_bytes(s.live_bytes).s, ops_bytes(s.free_bytes).s,
                   ops_bytes(s.mapped_bytes).s);
        }
        if (ops_check(c, vpmm_graph_pool_reset_peak_stats(branch_gp),
                      "vpmm_graph_pool_reset_peak_stats"))
            break;
        ops_capture_begin(c, branch_gp, &t->branch[b]);
        t->out[b] = branch(c, b, t->code, w);
        ops_capture_end(c, &t->branch[b]);
        measure(c, branch_gp, &t->branch_use[b]);
    }
    vpmm_checkpoint_destroy(c1);
}

/* Frees the tree's live outputs and destroys its graphs. In the shared layout G2's output was
 * freed by the reapply; otherwise each branch's output is still allocated. */
static void destroy_tree(ops_ctx_t *c, int shared, tree_t *t)
{
    ops_free(c, t->code);
    for (int b = 0; b < BRANCHES; b++)
        if (!shared || b == BRANCH_B)
            ops_free(c, t->out[b]);
    ops_graph_destroy(c, &t->enc);
    for (int b = 0; b < BRANCHES; b++)
        ops_graph_destroy(c, &t->branch[b]);
}

/*
 * Replays G1 -> G2 and G1 -> G3 alternately, `rounds` times each, each time on a new input, and
 * compares every output with the steps run on the CPU: *out_checked counts the outputs compared,
 * *out_correct the correct ones. Returns nonzero if a call failed.
 */
static int replay_tree(ops_ctx_t *c, const tree_t *t, float *x, const weights_t *w_host,
                       long rounds, long *out_checked, long *out_correct)
{
    static float x_host[N_IN], out_host[N_OUT];
    ops_ctx_t ref;

    *out_checked = *out_correct = 0;
    ops_ctx_init_reference(&ref);
    for (long r = 0; r < rounds; r++) {
        for (int b = 0; b < BRANCHES && !ops_failed(c) && !ops_failed(&ref); b++) {
            float *code, *want;

            ops_random(x_host, N_IN, (unsigned)(BRANCHES * r + b) + 1);
            ops_write(c, x, x_host, N_IN);
            ops_graph_launch(c, &t->enc);
            ops_graph_launch(c, &t->branch[b]);
            ops_read(c, out_host, t->out[b], N_OUT); /* before the other branch reuses it */

            code = encoder(&ref, x_host, w_host);
            want = branch(&ref, b, code, w_host);
            if (want != NULL) {
                ++*out_checked;
                *out_correct += ops_same(out_host, want, N_OUT);
            }
            ops_free(&ref, code);
            ops_free(&ref, want);
        }
    }
    return ops_failed(c) || ops_failed(&ref);
}

static void print_row(const char *label, const char *live, const char *mapped)
{
    printf("%-64s %11s %12s\n", label, live, mapped);
}

static void print_memory(size_t page_size, const tree_t *shared, const tree_t *own)
{
    const usage_t *use[3] = { &shared->enc_use, &shared->branch_use[BRANCH_A],
                              &shared->branch_use[BRANCH_B] };
    const char *const step[3] = { "    G1       encoder", "    G1 + G2  branch A",
                                  "    G1 + G3  branch B, after reapplying c1" };
    size_t tree_mapped = shared->branch_use[BRANCH_B].mapped;
    size_t own_mapped =
        own->enc_use.mapped + own->branch_use[BRANCH_A].mapped + own->branch_use[BRANCH_B].mapped;
    char line[128], ratio[16];

    snprintf(line, sizeof line, "memory (pages of %s)", ops_bytes(page_size).s);
    printf("\n");
    print_row(line, "peak live", "peak mapped");
    printf("  one graph pool for the tree, shared through checkpoint c1\n");
    for (int i = 0; i < 3; i++)
        print_row(step[i], ops_bytes(use[i]->peak_live).s, ops_bytes(use[i]->peak_mapped).s);
    print_row("    mapped in all", "", ops_bytes(tree_mapped).s);
    snprintf(line, sizeof line, "  one graph pool per graph: G1 %s + G2 %s + G3 %s",
             ops_bytes(own->enc_use.mapped).s, ops_bytes(own->branch_use[BRANCH_A].mapped).s,
             ops_bytes(own->branch_use[BRANCH_B].mapped).s);
    print_row(line, "", ops_bytes(own_mapped).s);
    snprintf(ratio, sizeof ratio, "%.2fx", (double)own_mapped / (double)tree_mapped);
    print_row("  one graph pool per graph / one for the tree", "", ratio);
    printf("\n");
}

int main(int argc, char **argv)
{
    long rounds = ops_count_arg(argc, argv, DEFAULT_ROUNDS), checked, correct;
    vpmm_graph_pool_t *gp, *tree_gp[3], *own_gp[3];
    vpmm_config_t cfg;
    vpmm_pool_t *pool;
    vpmm_stats_t s;
    weights_t w_host, w;
    tree_t tree, own;
    ops_ctx_t c = { 0 }; /* ops_check may report into it before ops_ctx_init */
    float *x;

    if (rounds == 0) {
        fprintf(stderr, "usage: %s [rounds]   (replays of each branch; default %d)\n", argv[0],
                DEFAULT_ROUNDS);
        return 2;
    }
    vpmm_config_init(&cfg);
    if (ops_check(&c, ops_pool_create(&cfg, &pool), "vpmm_pool_create"))
        return 1;
    if (ops_ctx_init(&c, pool))
        return 1; /* the process exit gives everything back */

    /* Outside the captures: the input and the weights, from the shared pool. */
    w_host.enc = malloc(N_ENC * sizeof(float));
    for (int b = 0; b < BRANCHES; b++)
        w_host.branch[b] = malloc(branch_width[b] * sizeof(float));
    if (!w_host.enc || !w_host.branch[BRANCH_A] || !w_host.branch[BRANCH_B]) {
        fprintf(stderr, "error: out of host memory for the weights\n");
        return 1;
    }
    ops_random(w_host.enc, N_ENC, 0);
    w.enc = ops_new(&c, N_ENC);
    ops_write(&c, w.enc, w_host.enc, N_ENC);
    for (int b = 0; b < BRANCHES; b++) {
        ops_random(w_host.branch[b], branch_width[b], (unsigned)b + 1);
        w.branch[b] = ops_new(&c, branch_width[b]);
        ops_write(&c, w.branch[b], w_host.branch[b], branch_width[b]);
    }
    x = ops_new(&c, N_IN);

    /* The tree in one graph pool, replayed. */
    if (ops_failed(&c) ||
        ops_check(&c, vpmm_graph_pool_create(pool, &gp), "vpmm_graph_pool_create"))
        return 1;
    tree_gp[0] = tree_gp[1] = tree_gp[2] = gp;
    capture_tree(&c, tree_gp, 1, x, &w, &tree);
    if (ops_failed(&c) || replay_tree(&c, &tree, x, &w_host, rounds, &checked, &correct))
        return 1;
    printf("replayed G1 -> G2 and G1 -> G3 alternately, %ld times each\n", rounds);

    /* The same steps, one graph pool each. */
    for (int i = 0; i < 3; i++)
        ops_check(&c, vpmm_graph_pool_create(pool, &own_gp[i]), "vpmm_graph_pool_create");
    if (ops_failed(&c))
        return 1;
    capture_tree(&c, own_gp, 0, x, &w, &own);
    if (ops_failed(&c) || ops_check(&c, vpmm_get_stats(pool, &s), "vpmm_get_stats"))
        return 1;
    print_memory(s.page_size, &tree, &own);
    printf("outputs correct: %ld/%ld (every replay checked against the CPU)\n", correct, checked);

    /* Clean up: outputs, graphs, graph pools, inputs, the pool. */
    destroy_tree(&c, 1, &tree);
    destroy_tree(&c, 0, &own);
    ops_check(&c, vpmm_graph_pool_release(gp), "vpmm_graph_pool_release");
    for (int i = 0; i < 3; i++)
        ops_check(&c, vpmm_graph_pool_release(own_gp[i]), "vpmm_graph_pool_release");
    ops_free(&c, x);
    ops_free(&c, w.enc);
    for (int b = 0; b < BRANCHES; b++)
        ops_free(&c, w.branch[b]);
    if (ops_ctx_fini(&c) || ops_check(&c, vpmm_pool_destroy(pool), "vpmm_pool_destroy"))
        return 1;
    printf("graphs, graph pools and pool destroyed\n");
    free(w_host.enc);
    for (int b = 0; b < BRANCHES; b++)
        free(w_host.branch[b]);
    return correct == checked ? 0 : 1;
}
