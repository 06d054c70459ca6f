/*
 * graph_ops.h — a tiny "op list" framework that the graph samples (graph_inference.c,
 * graph_tree.c) write their steps in, so that one program runs on a GPU and on vpmm's host
 * emulation backend, and checks itself against a CPU reference. It uses only include/vpmm.h
 * (and, on the GPU, graph_kernels.h).
 *
 * A step is a function of an ops_ctx_t that allocates float arrays (ops_new, ops_free) and
 * computes each from others with the op_* functions. What an op does depends on the context:
 *
 *   OPS_CUDA       vpmm runs on the CUDA backend: the op launches a kernel on the context's
 *                  stream. Between ops_capture_begin and ops_capture_end that stream is being
 *                  captured (vpmm_capture_begin/_end), so the kernels become a CUDA graph;
 *                  ops_graph_launch replays its executable instance (cudaGraphLaunch).
 *   OPS_EMULATED   vpmm runs on the host backend, which emulates captures and graphs but has no
 *                  kernels: the op is appended to the op list of the graph being captured, and
 *                  ops_graph_launch runs that list on the CPU. vpmm's memory is host memory here.
 *   OPS_REFERENCE  no vpmm: arrays come from malloc and each op runs at once on the CPU. Running
 *                  a step this way gives the reference its replays are checked against.
 *
 * In the first two modes ops_new and ops_free are vpmm_malloc and vpmm_free on the context's
 * stream, so a step captured into a graph pool gets its memory from the graph pool (reusing what
 * the step freed earlier in the capture), and every replay computes through those addresses.
 *
 * Errors are sticky, as CUDA's are: a failure is reported on stderr and sets ctx->failed, and
 * from then on the calls that act (arrays, ops, graphs) do nothing (ops_new returns NULL), so a
 * step is straight-line code whose caller checks ops_failed once. Single-threaded, like the
 * samples.
 */
#ifndef VPMM_GRAPH_OPS_H
#define VPMM_GRAPH_OPS_H

#include <stddef.h>

#include "vpmm.h"

typedef enum ops_mode {
    OPS_CUDA,
    OPS_EMULATED,
    OPS_REFERENCE,
} ops_mode_t;

typedef struct op op_t; /* one recorded op (graph_ops.c) */
struct CUgraphExec_st;  /* cudaGraphExec_t is a pointer to it */

/* A captured step: the graph vpmm_capture_end returned and what replays it. */
typedef struct ops_graph {
    vpmm_graph_t graph;          /* a CUDA graph, or the host emulation's handle of one */
    struct CUgraphExec_st *exec; /* OPS_CUDA: its executable instance (cudaGraphExec_t) */
    op_t *ops;                   /* OPS_EMULATED: the op list replays run */
    size_t n_ops, cap_ops;
} ops_graph_t;

typedef struct ops_ctx {
    ops_mode_t mode;
    vpmm_pool_t *pool;      /* NULL for OPS_REFERENCE */
    vpmm_stream_t stream;   /* what every call of the context is ordered on */
    ops_graph_t *capturing; /* the graph being captured, if any */
    size_t new_bytes;       /* bytes ops_new handed out, in all (a step's total demand) */
    int failed;             /* sticky: a call failed (and said why on stderr) */
} ops_ctx_t;

/*
 * vpmm_pool_create(cfg, out) on the default backend, CUDA (VPMM_BACKEND may choose the host). The
 * host emulation is asked for by name (cfg->backend = VPMM_BACKEND_HOST), saying so on stdout,
 * in a build without nvcc (no kernels) and when CUDA finds no GPU (VPMM_ERROR_NO_DEVICE) while
 * VPMM_BACKEND is unset.
 */
vpmm_status_t ops_pool_create(vpmm_config_t *cfg, vpmm_pool_t **out);

/* A context for pool: OPS_CUDA on the CUDA backend (with a new non-blocking stream), else
 * OPS_EMULATED (the stream is a token the host backend accepts). Prints which on stdout. */
int ops_ctx_init(ops_ctx_t *ctx, vpmm_pool_t *pool);

/* An OPS_REFERENCE context (cannot fail). */
void ops_ctx_init_reference(ops_ctx_t *ctx);

/* Releases the context's stream (vpmm_stream_release, then cudaStreamDestroy on the GPU). */
int ops_ctx_fini(ops_ctx_t *ctx);

/* Whether a call of ctx has failed. */
int ops_failed(const ops_ctx_t *ctx);

/* 0 if st is VPMM_SUCCESS; else marks ctx failed, prints what failed and why, and returns 1. */
int ops_check(ops_ctx_t *ctx, vpmm_status_t st, const char *what);

/* ---- arrays -------------------------------------------------------------------------------- */

/* A new array of n floats (vpmm_malloc on the context's stream, or malloc), or NULL. */
float *ops_new(ops_ctx_t *ctx, size_t n);

/* Frees an array of ops_new (vpmm_free: stream-ordered; in a capture, reusable by it at once). */
void ops_free(ops_ctx_t *ctx, float *p);

/* Copies n floats from host memory into an array, in stream order (outside captures). */
void ops_write(ops_ctx_t *ctx, float *dst, const float *src, size_t n);

/* Copies n floats of an array to host memory and waits until they are there. */
void ops_read(ops_ctx_t *ctx, float *dst, const float *src, size_t n);

/* ---- ops ------------------------------------------------------------------------------------ */

/* out[i] = max(a * x[i] + b, 0), i < n */
void op_affine_relu(ops_ctx_t *ctx, float *out, const float *x, size_t n, float a, float b);

/* out[i] = x[i % nx] * w[i], i < n: x broadcast over weights w */
void op_scale(ops_ctx_t *ctx, float *out, const float *x, size_t nx, const float *w, size_t n);

/* out[i] = x[i] + y[i], i < n */
void op_add(ops_ctx_t *ctx, float *out, const float *x, const float *y, size_t n);

/* out[j] = sum of x[i] over i < n with i % m == j, in increasing i, j < m: a reduction */
void op_fold(ops_ctx_t *ctx, float *out, size_t m, const float *x, size_t n);

/* ---- graphs --------------------------------------------------------------------------------- */

/* Begins capturing the context's stream into graph_pool (vpmm_capture_begin, global mode); the
 * ops until ops_capture_end make up graph. Not for OPS_REFERENCE. */
void ops_capture_begin(ops_ctx_t *ctx, vpmm_graph_pool_t *graph_pool, ops_graph_t *graph);

/* Ends the capture (vpmm_capture_end) and makes graph launchable (cudaGraphInstantiate). */
void ops_capture_end(ops_ctx_t *ctx, ops_graph_t *graph);

/* Replays graph on the context's stream (on the host: runs its op list now). */
void ops_graph_launch(ops_ctx_t *ctx, const ops_graph_t *graph);

/* Destroys the executable instance and the graph (vpmm_graph_destroy); graph is zeroed. */
void ops_graph_destroy(ops_ctx_t *ctx, ops_graph_t *graph);

/* ---- helpers -------------------------------------------------------------------------------- */

/* The positive count argv[1] (the program's only argument), or dflt without one; 0 if argv[1]
 * is not a positive count or there are more arguments. */
long ops_count_arg(int argc, char **argv, long dflt);

/* Fills dst[0, n) with pseudo-random floats in [-1, 1) determined by seed (inputs, weights). */
void ops_random(float *dst, size_t n, unsigned seed);

/* Whether got[0, n) matches want[0, n): equal up to float rounding (a GPU may fuse a * x + b
 * into one FMA where the CPU rounds twice). */
int ops_same(const float *got, const float *want, size_t n);

/* bytes as text, for printing: "4000 B", "16.0 KiB", "3.0 MiB" (use .s within the call). */
typedef struct ops_text {
    char s[24];
} ops_text_t;
ops_text_t ops_bytes(size_t bytes);

#endif /* VPMM_GRAPH_OPS_H */
