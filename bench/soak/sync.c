/*
 * sync.c — the gate (R7 of soak.h) and the soak's own synchronising CUDA calls, which pass it:
 * stream synchronise, graph instantiate, launch and destroy; and the pool of handoff events
 * (every block in transit holds one). Thread-safe: the gate and the event pool each have their
 * lock in g.
 */
#include "soak.h"

static int gate_free(gate_kind_t k)
{
    const int *n = g.gate_n;
    if (k == GATE_SYNC)
        return n[GATE_CAPTURE] == 0 && n[GATE_CAPTURE_GLOBAL] == 0 && g.gate_waiting == 0;
    if (k == GATE_CAPTURE)
        return n[GATE_SYNC] == 0 && n[GATE_CAPTURE_GLOBAL] == 0;
    return n[GATE_SYNC] == 0 && n[GATE_CAPTURE] == 0 && n[GATE_CAPTURE_GLOBAL] == 0;
}

void gate_enter(gate_kind_t k)
{
    pthread_mutex_lock(&g.gate_lock);
    if (k != GATE_SYNC)
        g.gate_waiting++;
    while (!gate_free(k))
        pthread_cond_wait(&g.gate_cv, &g.gate_lock);
    if (k != GATE_SYNC)
        g.gate_waiting--;
    g.gate_n[k]++;
    pthread_mutex_unlock(&g.gate_lock);
}

void gate_leave(gate_kind_t k)
{
    pthread_mutex_lock(&g.gate_lock);
    if (--g.gate_n[k] == 0)
        pthread_cond_broadcast(&g.gate_cv);
    pthread_mutex_unlock(&g.gate_lock);
}

void stream_sync(const worker_t *w, cudaStream_t s)
{
    cudaError_t e;
    gate_enter(GATE_SYNC);
    e = cudaStreamSynchronize(s);
    gate_leave(GATE_SYNC);
    CK(w, e);
}

cudaEvent_t event_get(void)
{
    cudaEvent_t ev = NULL;
    pthread_mutex_lock(&g.ev_lock);
    if (g.nev > 0)
        ev = g.ev[--g.nev];
    pthread_mutex_unlock(&g.ev_lock);
    return ev;
}

void event_put(cudaEvent_t ev)
{
    pthread_mutex_lock(&g.ev_lock);
    g.ev[g.nev++] = ev;
    pthread_mutex_unlock(&g.ev_lock);
}

void graph_destroy(worker_t *w, cudaGraph_t graph)
{
    cudaError_t e;
    if (graph == NULL)
        return;
    gate_enter(GATE_SYNC);
    e = cudaGraphDestroy(graph);
    gate_leave(GATE_SYNC);
    CK(w, e);
}

cudaGraphExec_t instantiate(worker_t *w, cudaGraph_t graph)
{
    cudaGraphExec_t exec = NULL;
    cudaError_t e;
    gate_enter(GATE_SYNC);
    e = cudaGraphInstantiate(&exec, graph, 0);
    gate_leave(GATE_SYNC);
    CK(w, e);
    return exec;
}

void launch(worker_t *w, cudaGraphExec_t exec, cudaStream_t s)
{
    cudaError_t e;
    gate_enter(GATE_SYNC);
    e = cudaGraphLaunch(exec, s);
    gate_leave(GATE_SYNC);
    CK(w, e);
    count(w, C_REPLAYS, 1);
}

void exec_destroy(worker_t *w, cudaGraphExec_t exec)
{
    cudaError_t e;
    gate_enter(GATE_SYNC);
    e = cudaGraphExecDestroy(exec); /* launches in flight complete first (CUDA's rule) */
    gate_leave(GATE_SYNC);
    CK(w, e);
}
