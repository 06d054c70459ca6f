/*
 * graph_ops.c — the op list of graph_ops.h. Every op_* function describes its op in an op_t and
 * hands it to submit, the one place the three modes differ: a kernel launch (OPS_CUDA), an entry
 * in the op list of the graph being captured (OPS_EMULATED), or op_run at once (OPS_REFERENCE).
 * op_run is the CPU arithmetic of every op, so host replays and references compute alike.
 * The GPU paths are compiled only with VPMM_SAMPLE_KERNELS (graph_kernels.cu); without them
 * ops_pool_create keeps vpmm on the host, so OPS_CUDA never occurs.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_ops.h"
#ifdef VPMM_SAMPLE_KERNELS
#include "graph_kernels.h"
#endif

/* The host backend takes any non-NULL value as a stream (NULL is the legacy default stream,
 * which cannot be captured). On the GPU the context has a real cudaStream_t. */
#define HOST_STREAM ((vpmm_stream_t)(uintptr_t)0x10)

typedef enum op_kind {
    OP_AFFINE_RELU,
    OP_SCALE,
    OP_ADD,
    OP_FOLD,
} op_kind_t;

/* One op, as graph_ops.h defines it: out has n elements (m for fold); x has n (m for scale);
 * y is the weights of scale and the second term of add. */
struct op {
    op_kind_t kind;
    float *out;
    const float *x, *y;
    size_t n, m;
    float a, b;
};

static void fail(ops_ctx_t *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    c->failed = 1;
}

int ops_check(ops_ctx_t *c, vpmm_status_t st, const char *what)
{
    if (st == VPMM_SUCCESS)
        return 0;
    fail(c, "%s failed: %s (%s)", what, vpmm_strerror(st), vpmm_last_error());
    return 1;
}

int ops_failed(const ops_ctx_t *c)
{
    return c->failed;
}

#ifdef VPMM_SAMPLE_KERNELS
static void gpu_check(ops_ctx_t *c, int err, const char *what)
{
    if (err != 0)
        fail(c, "%s failed: %s", what, sample_gpu_error(err));
}

static int gpu_launch(const op_t *op, vpmm_stream_t s)
{
    switch (op->kind) {
    case OP_AFFINE_RELU:
        return gpu_affine_relu(op->out, op->x, op->n, op->a, op->b, s);
    case OP_SCALE:
        return gpu_scale(op->out, op->x, op->m, op->y, op->n, s);
    case OP_ADD:
        return gpu_add(op->out, op->x, op->y, op->n, s);
    case OP_FOLD:
        return gpu_fold(op->out, op->m, op->x, op->n, s);
    }
    return 0;
}
#endif

static void op_run(const op_t *op)
{
    float *out = op->out;
    const float *x = op->x, *y = op->y;
    size_t n = op->n, m = op->m;

    switch (op->kind) {
    case OP_AFFINE_RELU:
        for (size_t i = 0; i < n; i++) {
            float v = op->a * x[i] + op->b;
            out[i] = v > 0.0f ? v : 0.0f;
        }
        break;
    case OP_SCALE:
        for (size_t i = 0, k = 0; i < n; i++, k = k + 1 < m ? k + 1 : 0)
            out[i] = x[k] * y[i]; /* k = i % m, without a division */
        break;
    case OP_ADD:
        for (size_t i = 0; i < n; i++)
            out[i] = x[i] + y[i];
        break;
    case OP_FOLD:
        /* In address order rather than one output at a time, but each output still adds its
         * inputs in increasing i: the order the kernel adds them in. */
        memset(out, 0, m * sizeof *out);
        for (size_t i = 0, j = 0; i < n; i++, j = j + 1 < m ? j + 1 : 0)
            out[j] += x[i];
        break;
    }
}

/* Appends op to the op list of the graph being captured. */
static void record(ops_ctx_t *c, const op_t *op)
{
    ops_graph_t *g = c->capturing;
    if (g == NULL) {
        fail(c, "an op outside a capture: on the host backend ops only exist in graphs");
        return;
    }
    if (g->n_ops == g->cap_ops) {
        size_t cap = g->cap_ops ? 2 * g->cap_ops : 16;
        op_t *ops = realloc(g->ops, cap * sizeof *ops);
        if (ops == NULL) {
            fail(c, "out of host memory for an op list");
            return;
        }
        g->ops = ops;
        g->cap_ops = cap;
    }
    g->ops[g->n_ops++] = *op;
}

static void submit(ops_ctx_t *c, const op_t *op)
{
    if (c->failed)
        return;
    switch (c->mode) {
    case OPS_CUDA:
#ifdef VPMM_SAMPLE_KERNELS
        gpu_check(c, gpu_launch(op, c->stream), "kernel launch");
#endif
        break;
    case OPS_EMULATED:
        record(c, op);
        break;
    case OPS_REFERENCE:
        op_run(op);
        break;
    }
}

/* ---- contexts ------------------------------------------------------------------------------ */

vpmm_status_t ops_pool_create(vpmm_config_t *cfg, vpmm_pool_t **out)
{
#ifdef VPMM_SAMPLE_KERNELS
    vpmm_status_t st = vpmm_pool_create(cfg, out);
    if (st != VPMM_ERROR_NO_DEVICE || getenv("VPMM_BACKEND") != NULL)
        return st;
    /* No GPU: the sample can still run, on the emulation, but only by asking for it. */
    printf("vpmm_pool_create: %s: %s\n", vpmm_status_name(st), vpmm_last_error());
    printf("so this sample asks for the host emulation: config.backend = VPMM_BACKEND_HOST\n");
#else
    printf("built without nvcc (no GPU kernels): config.backend = VPMM_BACKEND_HOST\n");
#endif
    cfg->backend = VPMM_BACKEND_HOST;
    return vpmm_pool_create(cfg, out);
}

int ops_ctx_init(ops_ctx_t *c, vpmm_pool_t *pool)
{
    const char *env = getenv("VPMM_BACKEND");

    memset(c, 0, sizeof *c);
    c->pool = pool;
    if (strcmp(vpmm_pool_backend_name(pool), "cuda") == 0) {
#ifdef VPMM_SAMPLE_KERNELS
        char name[256] = "?";
        c->mode = OPS_CUDA;
        gpu_check(c, sample_gpu_name(name, sizeof name), "cudaGetDeviceProperties");
        if (!c->failed)
            gpu_check(c, sample_stream_create(&c->stream), "cudaStreamCreate");
        if (!c->failed)
            printf("running on the GPU (%s)\n", name);
#else
        fail(c, "the pool runs on a GPU but this build has no kernels (see ops_pool_create)");
#endif
        return c->failed;
    }
    c->mode = OPS_EMULATED;
    c->stream = HOST_STREAM;
    if (env != NULL && strcmp(env, "host") == 0)
        printf("VPMM_BACKEND=host: ");
    printf("running on the host emulation backend\n");
    return 0;
}

void ops_ctx_init_reference(ops_ctx_t *c)
{
    memset(c, 0, sizeof *c);
    c->mode = OPS_REFERENCE;
}

int ops_ctx_fini(ops_ctx_t *c)
{
    if (c->failed || c->mode == OPS_REFERENCE)
        return c->failed;
    /* The stream freed vpmm memory: the pool forgets it before it goes away. */
    ops_check(c, vpmm_stream_release(c->pool, c->stream), "vpmm_stream_release");
#ifdef VPMM_SAMPLE_KERNELS
    if (!c->failed && c->mode == OPS_CUDA)
        gpu_check(c, sample_stream_destroy(c->stream), "cudaStreamDestroy");
#endif
    return c->failed;
}

/* ---- arrays -------------------------------------------------------------------------------- */

float *ops_new(ops_ctx_t *c, size_t n)
{
    void *p = NULL;
    if (c->failed)
        return NULL;
    if (c->mode == OPS_REFERENCE) {
        p = malloc(n * sizeof(float));
        if (p == NULL)
            fail(c, "out of host memory for %zu floats", n);
    } else
        ops_check(c, vpmm_malloc(c->pool, n * sizeof(float), c->stream, &p), "vpmm_malloc");
    if (p != NULL)
        c->new_bytes += n * sizeof(float);
    return p;
}

void ops_free(ops_ctx_t *c, float *p)
{
    if (c->failed)
        return;
    if (c->mode == OPS_REFERENCE)
        free(p);
    else
        ops_check(c, vpmm_free(c->pool, p), "vpmm_free");
}

void ops_write(ops_ctx_t *c, float *dst, const float *src, size_t n)
{
    if (c->failed)
        return;
    if (c->capturing != NULL) {
        fail(c, "ops_write inside a capture: inputs are written before a replay");
        return;
    }
#ifdef VPMM_SAMPLE_KERNELS
    if (c->mode == OPS_CUDA) {
        gpu_check(c, gpu_copy(dst, src, n * sizeof(float), c->stream), "cudaMemcpyAsync");
        return;
    }
#endif
    memcpy(dst, src, n * sizeof(float)); /* the host backend's memory is host memory */
}

void ops_read(ops_ctx_t *c, float *dst, const float *src, size_t n)
{
    if (c->failed)
        return;
    if (c->capturing != NULL) {
        fail(c, "ops_read inside a capture: outputs are read after a replay");
        return;
    }
#ifdef VPMM_SAMPLE_KERNELS
    if (c->mode == OPS_CUDA) {
        gpu_check(c, gpu_copy(dst, src, n * sizeof(float), c->stream), "cudaMemcpyAsync");
        if (!c->failed)
            gpu_check(c, gpu_synchronize(c->stream), "cudaStreamSynchronize");
        return;
    }
#endif
    memcpy(dst, src, n * sizeof(float));
}

/* ---- ops ------------------------------------------------------------------------------------ */

void op_affine_relu(ops_ctx_t *c, float *out, const float *x, size_t n, float a, float b)
{
    submit(c, &(op_t){ .kind = OP_AFFINE_RELU, .out = out, .x = x, .n = n, .a = a, .b = b });
}

void op_scale(ops_ctx_t *c, float *out, const float *x, size_t nx, const float *w, size_t n)
{
    submit(c, &(op_t){ .kind = OP_SCALE, .out = out, .x = x, .m = nx, .y = w, .n = n });
}

void op_add(ops_ctx_t *c, float *out, const float *x, const float *y, size_t n)
{
    submit(c, &(op_t){ .kind = OP_ADD, .out = out, .x = x, .y = y, .n = n });
}

void op_fold(ops_ctx_t *c, float *out, size_t m, const float *x, size_t n)
{
    submit(c, &(op_t){ .kind = OP_FOLD, .out = out, .m = m, .x = x, .n = n });
}

/* ---- graphs --------------------------------------------------------------------------------- */

void ops_capture_begin(ops_ctx_t *c, vpmm_graph_pool_t *gp, ops_graph_t *g)
{
    if (c->failed)
        return;
    memset(g, 0, sizeof *g);
    if (ops_check(c, vpmm_capture_begin(c->pool, gp, c->stream, VPMM_STREAM_CAPTURE_GLOBAL),
                  "vpmm_capture_begin") == 0)
        c->capturing = g;
}

void ops_capture_end(ops_ctx_t *c, ops_graph_t *g)
{
    if (c->failed)
        return;
    c->capturing = NULL;
    if (ops_check(c, vpmm_capture_end(c->pool, c->stream, &g->graph), "vpmm_capture_end"))
        return;
#ifdef VPMM_SAMPLE_KERNELS
    if (c->mode == OPS_CUDA)
        gpu_check(c, gpu_graph_instantiate(g->graph, &g->exec), "cudaGraphInstantiate");
#endif
}

void ops_graph_launch(ops_ctx_t *c, const ops_graph_t *g)
{
    if (c->failed)
        return;
    switch (c->mode) {
    case OPS_CUDA:
#ifdef VPMM_SAMPLE_KERNELS
        gpu_check(c, gpu_graph_launch(g->exec, c->stream), "cudaGraphLaunch");
#endif
        break;
    case OPS_EMULATED:
        for (size_t i = 0; i < g->n_ops; i++)
            op_run(&g->ops[i]);
        break;
    case OPS_REFERENCE:
        fail(c, "a reference context has no graphs");
        break;
    }
}

void ops_graph_destroy(ops_ctx_t *c, ops_graph_t *g)
{
    if (c->failed)
        return;
#ifdef VPMM_SAMPLE_KERNELS
    if (c->mode == OPS_CUDA)
        gpu_check(c, gpu_exec_destroy(g->exec), "cudaGraphExecDestroy");
#endif
    if (!c->failed)
        ops_check(c, vpmm_graph_destroy(c->pool, g->graph), "vpmm_graph_destroy");
    free(g->ops);
    memset(g, 0, sizeof *g);
}

/* ---- helpers -------------------------------------------------------------------------------- */

int ops_same(const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float diff = got[i] - want[i], mag = want[i] < 0.0f ? -want[i] : want[i];
        if (!(diff <= 1e-5f * (1.0f + mag) && -diff <= 1e-5f * (1.0f + mag)))
            return 0; /* also false for a NaN */
    }
    return 1;
}

long ops_count_arg(int argc, char **argv, long dflt)
{
    char *end;
    long n;
    if (argc < 2)
        return dflt;
    errno = 0;
    n = strtol(argv[1], &end, 10);
    return argc == 2 && errno == 0 && end != argv[1] && *end == '\0' && n > 0 ? n : 0;
}

void ops_random(float *dst, size_t n, unsigned seed)
{
    uint32_t s = (uint32_t)seed * 2654435761u + 0x9e3779b9u;
    if (s == 0)
        s = 1; /* xorshift32 stays at zero */
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        dst[i] = (float)(s >> 8) * (1.0f / 8388608.0f) - 1.0f; /* 24 bits: [0, 2) - 1 */
    }
}

ops_text_t ops_bytes(size_t bytes)
{
    ops_text_t t;
    if (bytes < 10 * 1024)
        snprintf(t.s, sizeof t.s, "%zu B", bytes);
    else if (bytes < 1024 * 1024)
        snprintf(t.s, sizeof t.s, "%.1f KiB", (double)bytes / 1024.0);
    else
        snprintf(t.s, sizeof t.s, "%.1f MiB", (double)bytes / (1024.0 * 1024.0));
    return t;
}
