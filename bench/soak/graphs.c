/*
 * graphs.c — graph rounds of vpmm-soak (rule R4 of soak.h): an inference-like step captured into
 * a new graph pool (temporaries allocated and freed inside the capture, sometimes on a forked side
 * stream, an output left live), replayed with a forced defragmentation half-way; or a graph tree
 * (G1, checkpoint, G2, reapply, G3) replayed G1->G2 and G1->G3 in turn. Every output is checked
 * after every replay. Captures go through the gate (sync.c) in the mode --capture-mode asks for,
 * or rotate through the three. Runs on the worker's thread; the graph pool is the round's own.
 */
#include <string.h>

#include "soak.h"

/* A capture in progress: what it allocated and has not freed yet. */
typedef struct capture {
    worker_t *w;
    cudaStream_t s; /* origin stream */
    gate_kind_t gate;
    int failed; /* an allocation ran out of memory: the graph will be thrown away */
    void *live[16];
    size_t nlive;
} capture_t;

static void cap_begin(capture_t *c, worker_t *w, vpmm_graph_pool_t *gp, cudaStream_t s)
{
    static const vpmm_stream_capture_mode_t modes[3] = {
        VPMM_STREAM_CAPTURE_GLOBAL,
        VPMM_STREAM_CAPTURE_THREAD_LOCAL,
        VPMM_STREAM_CAPTURE_RELAXED,
    };
    const vpmm_stream_capture_mode_t mode = g.o.capture_mode >= 0
                                                ? (vpmm_stream_capture_mode_t)g.o.capture_mode
                                                : modes[(w->ncaptures++ + (unsigned)w->id) % 3];
    memset(c, 0, sizeof *c);
    c->w = w;
    c->s = s;
    c->gate = mode == VPMM_STREAM_CAPTURE_GLOBAL ? GATE_CAPTURE_GLOBAL : GATE_CAPTURE;
    gate_enter(c->gate);
    VK(w, vpmm_capture_begin(g.pool, gp, s, mode));
    count(w, C_CAPTURES, 1);
}

static void *cap_malloc(capture_t *c, size_t size, cudaStream_t s)
{
    void *p;
    if (c->failed)
        return NULL;
    p = soak_malloc(c->w, size, s);
    if (p == NULL)
        c->failed = 1;
    else
        c->live[c->nlive++] = p;
    return p;
}

static void cap_free(capture_t *c, void *p)
{
    for (size_t i = 0; p != NULL && i < c->nlive; i++) {
        if (c->live[i] == p) {
            c->live[i] = c->live[--c->nlive];
            soak_free(c->w, p);
            return;
        }
    }
}

static void cap_fill(capture_t *c, void *p, size_t n, uint32_t seed, cudaStream_t s)
{
    if (!c->failed && p != NULL)
        fill(c->w, p, n, seed, s);
}

static void cap_check(capture_t *c, const void *p, size_t n, uint32_t seed, cudaStream_t s)
{
    if (!c->failed && p != NULL)
        check(c->w, p, n, seed, s);
}

/* Orders `to` after `from` inside the capture (a fork or a join; always done, even after a
 * failed allocation: a forked stream must rejoin before the capture ends). */
static void cap_edge(capture_t *c, cudaEvent_t ev, cudaStream_t from, cudaStream_t to)
{
    CK(c->w, cudaEventRecord(ev, from));
    CK(c->w, cudaStreamWaitEvent(to, ev, 0));
}

/* Ends the capture. Returns the graph, or NULL when an allocation failed: then whatever the
 * capture still held is freed inside it first, and the graph is destroyed. */
static cudaGraph_t cap_end(capture_t *c)
{
    vpmm_graph_t graph = NULL;
    if (c->failed)
        while (c->nlive > 0)
            cap_free(c, c->live[c->nlive - 1]);
    VK(c->w, vpmm_capture_end(g.pool, c->s, &graph));
    gate_leave(c->gate);
    if (c->failed) {
        graph_destroy(c->w, (cudaGraph_t)graph);
        return NULL;
    }
    return (cudaGraph_t)graph;
}

/* A buffer a graph reads or writes, with its pattern. */
typedef struct buf {
    void *p;
    size_t n;
    uint32_t seed;
} buf_t;

static buf_t buf_of(worker_t *w, size_t n)
{
    buf_t b = { NULL, n, new_seed(w) };
    return b;
}

/*
 * An inference step, replayed K times: temporaries t1, t2 (sub-page), t3 (reuses t1's memory in
 * stream order), u on the forked side stream; the output stays live and is checked after every
 * replay, a forced defragmentation of the shared pool half-way.
 */
static void simple_round(worker_t *w, vpmm_graph_pool_t *gp, cudaStream_t so, buf_t x, size_t unit)
{
    buf_t t1 = buf_of(w, unit + 4099), t2 = buf_of(w, 3000), t3 = buf_of(w, unit + unit / 2 + 1);
    buf_t u = buf_of(w, unit / 2 + 5), out = buf_of(w, 4003);
    const int fork = (int)below(w, 2);
    cudaStream_t ss = w->side;
    cudaGraphExec_t exec;
    cudaGraph_t graph;
    capture_t c;

    cap_begin(&c, w, gp, so);
    t1.p = cap_malloc(&c, t1.n, so);
    cap_fill(&c, t1.p, t1.n, t1.seed, so);
    t2.p = cap_malloc(&c, t2.n, so);
    cap_fill(&c, t2.p, t2.n, t2.seed, so);
    cap_check(&c, x.p, x.n, x.seed, so);
    if (fork) {
        cap_edge(&c, w->fork, so, ss);
        u.p = cap_malloc(&c, u.n, ss);
        cap_fill(&c, u.p, u.n, u.seed, ss);
        cap_check(&c, x.p, x.n, x.seed, ss);
        cap_check(&c, u.p, u.n, u.seed, ss);
        cap_free(&c, u.p);
    }
    cap_check(&c, t1.p, t1.n, t1.seed, so);
    cap_free(&c, t1.p);
    t3.p = cap_malloc(&c, t3.n, so);
    cap_fill(&c, t3.p, t3.n, t3.seed, so);
    if (fork)
        cap_edge(&c, w->join, ss, so);
    cap_check(&c, t2.p, t2.n, t2.seed, so);
    cap_check(&c, t3.p, t3.n, t3.seed, so);
    cap_free(&c, t2.p);
    cap_free(&c, t3.p);
    out.p = cap_malloc(&c, out.n, so);
    cap_fill(&c, out.p, out.n, out.seed, so);
    graph = cap_end(&c);
    if (graph == NULL)
        return;
    exec = instantiate(w, graph);
    for (int r = 0; r < g.pr.replays; r++) {
        launch(w, exec, so);
        check(w, out.p, out.n, out.seed, so);
        if (r == g.pr.replays / 2)
            defrag_round(w);
    }
    exec_destroy(w, exec);
    graph_destroy(w, graph);
    soak_free(w, out.p); /* ordered on so, after the replays */
}

/*
 * A graph tree in one graph pool: G1 (output o1), checkpoint, G2 (output o2), reapply (o2 is
 * dropped), G3 (output o3, larger temporaries: it reuses G2's memory and grows); replayed
 * G1→G2 and G1→G3 in turn, each output checked right after its graph.
 */
static void tree_round(worker_t *w, vpmm_graph_pool_t *gp, cudaStream_t so, buf_t x, size_t unit)
{
    buf_t t = buf_of(w, unit), o1 = buf_of(w, 4000), a = buf_of(w, unit + 17);
    buf_t o2 = buf_of(w, 2000), b1 = buf_of(w, unit + unit / 2 + 33);
    buf_t b2 = buf_of(w, unit + unit / 2 + 33), o3 = buf_of(w, 2800);
    cudaGraph_t g1 = NULL, g2 = NULL, g3 = NULL;
    cudaGraphExec_t e1, e2, e3;
    vpmm_checkpoint_t *ck = NULL;
    vpmm_checkpoint_info_t info;
    capture_t c;

    cap_begin(&c, w, gp, so);
    t.p = cap_malloc(&c, t.n, so);
    cap_fill(&c, t.p, t.n, t.seed, so);
    cap_check(&c, x.p, x.n, x.seed, so);
    o1.p = cap_malloc(&c, o1.n, so);
    cap_fill(&c, o1.p, o1.n, o1.seed, so);
    cap_check(&c, t.p, t.n, t.seed, so);
    cap_free(&c, t.p);
    if ((g1 = cap_end(&c)) == NULL)
        return;
    VK(w, vpmm_checkpoint_take(gp, &ck));
    count(w, C_CHECKPOINT_OPS, 1);
    VK(w, vpmm_checkpoint_info(ck, &info));
    if (info.allocs != 1)
        fail(SOAK_ERROR, w, "a checkpoint of a graph pool with one live allocation lists %zu",
             info.allocs);

    cap_begin(&c, w, gp, so);
    a.p = cap_malloc(&c, a.n, so);
    cap_fill(&c, a.p, a.n, a.seed, so);
    cap_check(&c, o1.p, o1.n, o1.seed, so);
    o2.p = cap_malloc(&c, o2.n, so);
    cap_fill(&c, o2.p, o2.n, o2.seed, so);
    cap_check(&c, a.p, a.n, a.seed, so);
    cap_free(&c, a.p);
    if ((g2 = cap_end(&c)) == NULL)
        goto out;
    VK(w, vpmm_checkpoint_reapply(gp, ck, NULL, 0)); /* o2 is gone (vpmm freed it) */
    count(w, C_CHECKPOINT_OPS, 1);

    cap_begin(&c, w, gp, so);
    b1.p = cap_malloc(&c, b1.n, so);
    cap_fill(&c, b1.p, b1.n, b1.seed, so);
    b2.p = cap_malloc(&c, b2.n, so);
    cap_fill(&c, b2.p, b2.n, b2.seed, so);
    cap_check(&c, o1.p, o1.n, o1.seed, so);
    cap_check(&c, b1.p, b1.n, b1.seed, so);
    cap_check(&c, b2.p, b2.n, b2.seed, so);
    o3.p = cap_malloc(&c, o3.n, so);
    cap_fill(&c, o3.p, o3.n, o3.seed, so);
    cap_free(&c, b1.p);
    cap_free(&c, b2.p);
    if ((g3 = cap_end(&c)) == NULL)
        goto out;

    e1 = instantiate(w, g1);
    e2 = instantiate(w, g2);
    e3 = instantiate(w, g3);
    for (int r = 0; r < g.pr.replays; r++) {
        launch(w, e1, so);
        check(w, o1.p, o1.n, o1.seed, so);
        if (r % 2 == 0) {
            launch(w, e2, so);
            check(w, o2.p, o2.n, o2.seed, so); /* before G3 overwrites it */
        } else {
            launch(w, e3, so);
            check(w, o3.p, o3.n, o3.seed, so);
        }
    }
    exec_destroy(w, e1);
    exec_destroy(w, e2);
    exec_destroy(w, e3);
    soak_free(w, o3.p);
    count(w, C_TREES, 1);
out:
    graph_destroy(w, g1);
    graph_destroy(w, g2);
    graph_destroy(w, g3);
    soak_free(w, o1.p); /* g1 was captured: o1 is live */
    vpmm_checkpoint_destroy(ck);
}

void graph_round(worker_t *w, int tree)
{
    const size_t unit = g.pr.graph_unit / 2 + below(w, g.pr.graph_unit);
    cudaStream_t so = w->s[below(w, (size_t)g.o.streams)];
    buf_t x = buf_of(w, unit / 2 + 12);
    vpmm_graph_pool_t *gp;

    set_phase(w, tree ? "graph tree" : "graph round");
    x.p = soak_malloc(w, x.n, so); /* the input: shared pool, outside the capture */
    if (x.p == NULL) {
        release_half(w);
        return;
    }
    fill(w, x.p, x.n, x.seed, so);
    VK(w, vpmm_graph_pool_create(g.pool, &gp));
    if (tree)
        tree_round(w, gp, so, x, unit);
    else
        simple_round(w, gp, so, x, unit);
    VK(w, vpmm_graph_pool_release(gp));
    check(w, x.p, x.n, x.seed, so);
    soak_free(w, x.p);
    count(w, C_GRAPH_ROUNDS, 1);
}
