/*
 * main.c — vpmm-soak's start and end (what the soak does and why a mismatch can only be vpmm's:
 * soak.h): the pool on the CUDA backend, every worker's streams, events, device counters and
 * tables, the kernels loaded before any capture; then the workers started, the monitor run
 * (monitor.c), the workers joined, and the teardown, which must leave nothing live and destroy
 * the pool. Owns g, the soak's shared state. Exit status: soak.h.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gpu_kernels.h"
#include "soak.h"
#include "timing.h"

struct soak g = {
    .gate_lock = PTHREAD_MUTEX_INITIALIZER,
    .gate_cv = PTHREAD_COND_INITIALIZER,
    .ev_lock = PTHREAD_MUTEX_INITIALIZER,
    .fail_lock = PTHREAD_MUTEX_INITIALIZER,
};

static const profile_t profile_full = {
    "full",  1 * GiB, 512, 512 * MiB, 64 * MiB, 512 * MiB, 24,
    2 * GiB, 8 * MiB, 8,   256,       1500,     1000,      4,
};
static const profile_t profile_light = {
    "light", 32 * MiB, 64, 8 * MiB, 2 * MiB, 8 * MiB, 8, 64 * MiB, 1 * MiB, 4, 64, 150, 200, 3,
};

static void setup(void)
{
    const size_t nw = (size_t)g.o.threads;
    size_t live_cap = g.pr.max_live;
    worker_t *z;

    g.w = calloc(nw, sizeof *g.w);
    g.ev_total = nw * EVENTS_PER_WORKER;
    g.ev = calloc(g.ev_total, sizeof *g.ev);
    if (g.w == NULL || g.ev == NULL)
        fail(SOAK_ERROR, NULL, "out of host memory");
    CK(NULL, cudaMalloc((void **)&g.dcount, 2 * nw * sizeof *g.dcount));
    CK(NULL, cudaMallocHost((void **)&g.hcount, 2 * nw * sizeof *g.hcount));
    CK(NULL, cudaMemset(g.dcount, 0, 2 * nw * sizeof *g.dcount));
    for (size_t i = 0; i < g.ev_total; i++)
        CK(NULL, cudaEventCreateWithFlags(&g.ev[g.nev++], cudaEventDisableTiming));
    for (size_t i = 0; i < nw; i++) {
        worker_t *w = &g.w[i];
        uint64_t mix = g.o.seed ^ (0xD1B54A32D192ED03ull * (i + 1));
        w->id = (int)i;
        w->rng = splitmix(&mix);
        w->next_seed = 1;
        w->trace_pos = g.nsizes / nw * i;
        w->dcount = &g.dcount[2 * i];
        w->dscratch = &g.dcount[2 * i + 1];
        w->hcount = &g.hcount[2 * i];
        w->hscratch = &g.hcount[2 * i + 1];
        w->live = calloc(live_cap, sizeof *w->live);
        w->inbox = calloc(g.ev_total, sizeof *w->inbox);
        if (w->live == NULL || w->inbox == NULL)
            fail(SOAK_ERROR, NULL, "out of host memory");
        pthread_mutex_init(&w->inbox_lock, NULL);
        atomic_store(&w->phase, "starting");
        for (int k = 0; k < g.o.streams; k++)
            CK(NULL, cudaStreamCreateWithFlags(&w->s[k], cudaStreamNonBlocking));
        CK(NULL, cudaStreamCreateWithFlags(&w->side, cudaStreamNonBlocking));
        CK(NULL, cudaEventCreateWithFlags(&w->fork, cudaEventDisableTiming));
        CK(NULL, cudaEventCreateWithFlags(&w->join, cudaEventDisableTiming));
    }
    g.nw = (int)nw;
    /* Load every kernel now (lazy loading would otherwise load them during a capture). */
    z = &g.w[0];
    CK(NULL, (cudaError_t)gk_fill(z->dscratch, sizeof *z->dscratch, 1, z->s[0]));
    CK(NULL, (cudaError_t)gk_check(z->dscratch, sizeof *z->dscratch, 1, z->dscratch, z->s[0]));
    CK(NULL, cudaDeviceSynchronize());
    CK(NULL, cudaMemset(g.dcount, 0, 2 * nw * sizeof *g.dcount));
    CK(NULL, cudaDeviceSynchronize());
    pthread_barrier_init(&g.drained, NULL, (unsigned)nw);
}

/* After the workers: everything freed, graph pools gone, streams released, pool destroyed. */
static void teardown(totals_t *t)
{
    vpmm_status_t st;
    double t0 = timing_now_s();
    CK(NULL, cudaDeviceSynchronize());
    for (;;) { /* CUDA runs the graph pools' destructors on its own thread */
        VK(NULL, vpmm_get_stats(g.pool, &t->st));
        if (t->st.graph_pools == 0)
            break;
        if (timing_now_s() - t0 > 10)
            fail(SOAK_ERROR, NULL,
                 "%" PRIu64 " graph pool(s) still alive 10 s after the last graph",
                 t->st.graph_pools);
        timing_sleep_us(1000);
    }
    check_pool();
    VK(NULL, vpmm_get_stats(g.pool, &t->st));
    t->have_st = 1;
    if (t->st.live_allocs != 0)
        fail(SOAK_ERROR, NULL, "%" PRIu64 " allocations (%zu bytes) still live at the end",
             t->st.live_allocs, t->st.live_bytes);
    vpmm_pool_last_driver_error(g.pool, &t->drv_code, &t->drv_call);
    if (t->drv_code != 0 && t->drv_code != CUDA_OOM_CODE &&
        !(t->drv_code == g.drv_code0 && t->drv_call == g.drv_call0))
        fail(SOAK_ERROR, NULL,
             "the pool recorded a driver error that no call reported: %s returned %d",
             t->drv_call ? t->drv_call : "?", t->drv_code);
    for (int i = 0; i < g.nw; i++) {
        worker_t *w = &g.w[i];
        for (int k = 0; k <= g.o.streams; k++) {
            cudaStream_t s = k < g.o.streams ? w->s[k] : w->side;
            VK(NULL, vpmm_stream_release(g.pool, s));
            CK(NULL, cudaStreamDestroy(s));
        }
        CK(NULL, cudaEventDestroy(w->fork));
        CK(NULL, cudaEventDestroy(w->join));
        free(w->live);
        free(w->inbox);
    }
    if (g.nev != g.ev_total)
        fail(SOAK_ERROR, NULL, "%zu handoff events never came back", g.ev_total - g.nev);
    for (size_t i = 0; i < g.nev; i++)
        CK(NULL, cudaEventDestroy(g.ev[i]));
    CK(NULL, cudaFree(g.dcount));
    CK(NULL, cudaFreeHost(g.hcount));
    st = vpmm_pool_destroy(g.pool);
    if (st != VPMM_SUCCESS)
        fail(SOAK_ERROR, NULL, "vpmm_pool_destroy: %s (%s)", vpmm_status_name(st),
             vpmm_last_error());
    g.pool = NULL;
}

int main(int argc, char **argv)
{
    vpmm_config_t cfg;
    vpmm_stats_t s;
    vpmm_status_t st;
    struct cudaDeviceProp prop;
    int ndev = 0, drv = 0;
    cudaError_t e;
    totals_t t;
    char limits[128];

    g.argc = argc;
    g.argv = argv;
    cli_check_stdout_at_exit("vpmm-soak");
    if (parse_options(argc, argv, &g.o) != 0)
        return SOAK_USAGE;
    g.pr = g.o.light ? profile_light : profile_full;
    if (g.o.live_mb > 0)
        g.pr.live_bytes = g.o.live_mb * MiB;

    e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        fprintf(stderr,
                "vpmm-soak: no CUDA device (cudaGetDeviceCount: %s, %d devices): the soak needs "
                "a GPU; nothing was run\n",
                e == cudaSuccess ? "ok" : cudaGetErrorString(e), ndev);
        return SOAK_NO_DEVICE;
    }
    if (load_traces() != 0)
        return SOAK_USAGE;

    vpmm_config_init(&cfg);
    cfg.backend = VPMM_BACKEND_CUDA;
    st = vpmm_pool_create(&cfg, &g.pool);
    if (st == VPMM_ERROR_NO_DEVICE || st == VPMM_ERROR_NOT_SUPPORTED) {
        fprintf(stderr, "vpmm-soak: vpmm_pool_create(CUDA): %s (%s): nothing was run\n",
                vpmm_status_name(st), vpmm_last_error());
        return SOAK_NO_DEVICE;
    }
    if (st != VPMM_SUCCESS) {
        g.pool = NULL;
        fail(SOAK_ERROR, NULL, "vpmm_pool_create(CUDA): %s (%s)", vpmm_status_name(st),
             vpmm_last_error());
    }
    vpmm_pool_last_driver_error(g.pool, &g.drv_code0, &g.drv_call0);
    VK(NULL, vpmm_get_stats(g.pool, &s));
    g.page = s.page_size;
    CK(NULL, cudaGetDeviceProperties(&prop, 0));
    CK(NULL, cudaDriverGetVersion(&drv));
    snprintf(g.device, sizeof g.device, "%.200s (driver for CUDA %d.%d)", prop.name, drv / 1000,
             drv % 1000 / 10);
    setup();

    if (g.o.seconds > 0 && g.o.ops > 0)
        snprintf(limits, sizeof limits, "%.0f s or %" PRIu64 " operations, whichever first",
                 g.o.seconds, g.o.ops);
    else if (g.o.seconds > 0)
        snprintf(limits, sizeof limits, "%.0f s", g.o.seconds);
    else
        snprintf(limits, sizeof limits, "%" PRIu64 " operations", g.o.ops);
    fprintf(stderr,
            "vpmm-soak: %s, page %zu KiB; %d workers x %d streams (+1 capture side stream each); "
            "%s; seed %" PRIu64 "; sizes: %zu from %d trace(s) (%s) and synthetic; captures: "
            "%s; profile %s (live <= %zu MiB per worker, blocks <= %zu MiB)\n",
            g.device, g.page >> 10, g.o.threads, g.o.streams, limits, g.o.seed, g.nsizes,
            g.traces_loaded, g.trace_dir, capture_mode_name(), g.pr.name, g.pr.live_bytes / MiB,
            g.pr.max_alloc / MiB);

    g.t0 = timing_now_s();
    for (int i = 0; i < g.nw; i++)
        if (pthread_create(&g.w[i].thread, NULL, worker_main, &g.w[i]) != 0)
            fail(SOAK_ERROR, NULL, "pthread_create failed");
    monitor();
    for (int i = 0; i < g.nw; i++)
        pthread_join(g.w[i].thread, NULL);

    sum_up(&t);
    teardown(&t);
    if (t.mismatches != 0) /* sync_point stops at the first; a last line of defence */
        fail(SOAK_CORRUPT, NULL, "%llu mismatching words", t.mismatches);
    report(&t, "PASS", "", "VPMM_SUCCESS");
    free(g.sizes);
    free(g.o.traces);
    free(g.ev);
    free(g.w);
    return SOAK_PASS;
}
