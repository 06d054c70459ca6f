/*
 * soak.c — vpmm-soak: many threads and streams hammer one vpmm pool on a real GPU for minutes,
 * and kernels write and verify every byte handed out, so a wrong mapping, a missing GPU-side
 * wait, a remap that loses data or memory handed out twice shows up as mismatching words.
 *
 *   vpmm-soak [--seconds N] [--ops N] [--threads T] [--streams S] [--trace PATH]... [--seed S]
 *             [--live-mb M] [--capture-mode M] [--light] [--json]
 *
 * One pool on the CUDA backend (VPMM_* variables apply), T worker threads (default 4), each with
 * S private non-blocking streams (default 2) plus a private *side* stream used only inside its
 * captures. A worker runs a seeded loop of steps on its blocks: allocate and fill (gk_fill of
 * kernels/gpu_kernels.cu, seeded with the block's id) — sizes cycled through the allocation sizes
 * of the traces (every .trace.gz of bench/traces unless --trace is given) mixed with synthetic
 * sub-page, whole-page, multi-page and occasional large sizes; verify (gk_check adds mismatching
 * words to the worker's device counter); rewrite with a new seed; check and free; hand the block to
 * another worker, which checks it and frees it, or checks it and returns it to its owner to free;
 * check it on another of the worker's streams. Every few hundred steps the worker synchronises its
 * streams and reads its counter (any mismatch stops the soak, after re-checking its live blocks
 * one by one to name the damaged ones). Periodically it forces a defragmentation (page-sized
 * blocks, every other one freed, then a block larger than the largest free region, the survivors
 * checked) and runs a graph round: an inference-like step captured into a new graph pool
 * (temporaries allocated and freed inside the capture, sub-page sizes, sometimes a forked side
 * stream, an output left live), instantiated and replayed K times — with a forced defragmentation
 * half-way — its in-graph checks and its output checked on every replay; every few rounds a graph
 * tree instead (G1, checkpoint, G2, reapply, G3; G1→G2 and G1→G3 replayed in turn). Captures
 * rotate through the global, thread-local and relaxed capture modes (--capture-mode pins one).
 * The main thread watches:
 * vpmm_pool_check every 2 s (0 violations), the stats' accounting equations, vpmm_trim every 5 s,
 * a progress line every 10 s, and the limits: --seconds and --ops, whichever comes first (0: no
 * limit; default 60 s). At the end everything is freed, every stream is released
 * (vpmm_stream_release, then cudaStreamDestroy) and vpmm_pool_destroy must succeed.
 *
 * Stream ordering — why a mismatch can only be vpmm's. vpmm_free is ordered on the block's
 * allocation stream: that stream may reuse the memory at once, others once the GPU has done the
 * work enqueued on it before the free. So the soak keeps one rule per path:
 *  R1 A block in a worker's table is touched only on its allocation stream (fill, check,
 *     rewrite, the check before its free): every use precedes the free in that stream's order.
 *  R2 Handed to worker B to free: the owner records an event E on the block's stream after its
 *     last use and forgets the block; B makes one of its streams wait for E, checks, records E
 *     there, and calls vpmm_free only once cudaEventQuery(E) succeeds (or after synchronising
 *     that stream). When vpmm learns of the free, no GPU work on the block is left at all. B never
 *     touches the owner's stream.
 *  R3 Handed to B and returned: B waits for E, checks, records E on its stream and gives the
 *     block back; the owner makes the block's stream wait for E, then frees it — the wait is the
 *     block's last use on that stream, so R1's argument holds. Checking on another of the
 *     owner's own streams is the same within one worker (then the block may also stay live).
 *     An event is owned by one block at a time and re-recorded only after the wait that used
 *     its previous record was enqueued (CUDA binds a wait to the record current at the call).
 *  R4 Captures: what a capture allocates it frees inside the capture on the stream it was
 *     allocated on, except its outputs, which stay live, are read only on the capture's origin
 *     stream (replays and checks) and are freed there after the last replay; the shared input x
 *     is allocated on the origin stream and read only by graphs launched there. A worker
 *     launches the graphs of a graph pool on one stream, one after another. The side stream is
 *     joined by events, allocates and frees temporaries only inside captures and is never used
 *     outside one, so it never has a free awaiting a marker and vpmm never records a marker on
 *     it: a stream joined into a capture by cudaStreamWaitEvent is not serialised with vpmm's
 *     lock the way vpmm_capture_begin is, so a marker decided on just before the join would land
 *     inside the capture. After a checkpoint reapply the dropped output of G2 is read only right
 *     after a replay of G2, before anything else runs on that stream.
 *  R5 Forced defragmentation: the blocks and the large block each follow R1 on their own
 *     streams; the waits needed to reuse one stream's memory on another are vpmm's to insert.
 *  R6 Mismatch counters (cudaMalloc, not vpmm memory): one per worker, written only by kernels
 *     that worker enqueued (its graphs included) and read after synchronising every stream of
 *     the worker, so the value read is exact.
 *  R7 Capture rules: nothing but vpmm ever touches another worker's stream (vpmm records its
 *     markers under its lock, after checking the stream is not being captured; the capture
 *     began under the same lock). The soak's own synchronising calls (stream synchronise, event
 *     query, memcpy, graph instantiate, launch and destroy) pass a gate that keeps them out of
 *     every capture in progress, and a global-mode capture has the gate to itself; the legacy
 *     default stream is never used while workers run, and every kernel is loaded before they
 *     start. So CUDA's capture rules are never broken by the soak's calls; during a capture only
 *     kernel launches, event records and waits on other streams, and vpmm's own calls run — the
 *     latter are what is being tested (vpmm relaxes the capture mode around its driver calls).
 *
 * Exit status: 0 pass (no mismatch, no error, the pool destroyed); 1 bad usage or trace; 2 no CUDA
 * device; 3 an error (a vpmm status other than an expected out-of-memory, a CUDA error, a
 * violated invariant, a driver error recorded by the pool, a failed destroy); 4 corruption.
 * Every failure names the call, the worker, what it was doing and the pool's last driver error.
 */
#include <getopt.h>
#include <glob.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "gpu_kernels.h"
#include "trace.h"
#include "vpmm.h"

#ifndef VPMM_SOAK_TRACE_DIR
#define VPMM_SOAK_TRACE_DIR "bench/traces"
#endif

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

enum { SOAK_PASS = 0, SOAK_USAGE = 1, SOAK_NO_DEVICE = 2, SOAK_ERROR = 3, SOAK_CORRUPT = 4 };

enum {
    MAX_THREADS = 64,
    MAX_STREAMS = 16,
    EVENTS_PER_WORKER = 64, /* handoff events: every block in transit holds one */
    INBOX_MAX = 32,         /* no new handoff to a worker with this many waiting */
    DEFER_MAX = 64,         /* checked blocks waiting for the GPU before their free */
    MAX_DEFRAG_BLOCKS = 32,
    CUDA_OOM_CODE = 2,  /* CUDA_ERROR_OUT_OF_MEMORY, as vpmm_pool_last_driver_error reports it */
    STALL_FAIL_S = 300, /* no operation at all for this long: fail, naming what workers do */
};

/* How hard a run pushes; --light is for compute-sanitizer (small kernels, frequent rounds). */
typedef struct profile {
    const char *name;
    size_t live_bytes;           /* per worker: no new block above this many live bytes */
    size_t max_live;             /* per worker: nor above this many live blocks */
    size_t max_alloc;            /* larger sizes are folded below it */
    size_t large_min, large_max; /* the occasional large block */
    size_t defrag_blocks;        /* page-sized blocks of a forced defragmentation */
    size_t defrag_cap;           /* the largest block it allocates */
    size_t graph_unit;           /* scale of a graph step's buffers */
    int replays;                 /* replays per graph round */
    unsigned sync_every;         /* steps between counter reads */
    unsigned defrag_every;       /* mean steps between forced defragmentations */
    unsigned graph_every;        /* mean steps between graph rounds */
    unsigned tree_every;         /* every n-th graph round is a graph tree */
} profile_t;

static const profile_t profile_full = {
    "full",  1 * GiB, 512, 512 * MiB, 64 * MiB, 512 * MiB, 24,
    2 * GiB, 8 * MiB, 8,   256,       1500,     1000,      4,
};
static const profile_t profile_light = {
    "light", 32 * MiB, 64, 8 * MiB, 2 * MiB, 8 * MiB, 8, 64 * MiB, 1 * MiB, 4, 64, 150, 200, 3,
};

typedef struct options {
    double seconds;
    uint64_t ops, seed;
    int threads, streams, json, light;
    int capture_mode; /* -1: rotate through the three; else a vpmm_stream_capture_mode_t */
    size_t live_mb;
    const char **traces;
    size_t ntraces;
} options_t;

/* Per-worker counters (relaxed atomics: the main thread reads them while workers run). */
enum {
    C_OPS, /* everything below that is an operation (not bytes, not rounds) */
    C_MALLOCS,
    C_FREES,
    C_FILLS,
    C_CHECKS,
    C_HANDOFFS,
    C_RETURNS,
    C_CROSS,
    C_CAPTURES,
    C_REPLAYS,
    C_CHECKPOINT_OPS,
    C_BYTES,
    C_OOMS,
    C_DEFRAG_ROUNDS,
    C_GRAPH_ROUNDS,
    C_TREES,
    C_SYNCS,
    NCOUNTS
};
static const char *const count_names[NCOUNTS] = {
    "ops",          "mallocs",       "frees",          "fills",
    "checks",       "handoffs",      "returns",        "cross_stream",
    "captures",     "replays",       "checkpoint_ops", "bytes_allocated",
    "ooms_handled", "defrag_rounds", "graph_rounds",   "graph_trees",
    "sync_points",
};
typedef _Atomic uint64_t counter_t;

typedef struct block {
    void *p;
    size_t size;
    uint32_t seed;
    int stream; /* index of its allocation stream among its owner's */
} block_t;

typedef enum item_kind {
    ITEM_FREE_THERE,   /* the receiver checks and frees it (R2) */
    ITEM_CHECK_RETURN, /* the receiver checks and returns it (R3) */
    ITEM_RETURNED,     /* back at the owner, to be freed behind the event */
} item_kind_t;

/* A block in transit between workers. */
typedef struct item {
    block_t b;
    int owner;
    item_kind_t kind;
    cudaEvent_t ev;
} item_t;

typedef struct worker {
    int id;
    uint64_t rng;
    uint32_t next_seed;
    unsigned ncaptures;
    uint64_t trace_pos, steps;
    cudaStream_t s[MAX_STREAMS], side;
    cudaEvent_t fork, join;                /* recorded only inside captures */
    unsigned long long *dcount, *dscratch; /* device counters */
    unsigned long long *hcount, *hscratch; /* pinned host copies */
    block_t *live;
    size_t nlive, live_bytes;
    pthread_mutex_t inbox_lock;
    item_t *inbox;
    size_t ninbox;
    item_t defer[DEFER_MAX];
    size_t ndefer;
    counter_t c[NCOUNTS];
    _Atomic uint64_t mismatches; /* last value read from its counter */
    _Atomic(const char *) phase;
    pthread_t thread;
} worker_t;

/*
 * The gate (R7): synchronising calls of the soak (GATE_SYNC) share it among themselves, captures
 * in thread-local or relaxed mode share it among themselves, a global-mode capture has it alone.
 * A waiting capture keeps new synchronising calls out, so captures are not starved.
 */
typedef enum gate_kind { GATE_SYNC, GATE_CAPTURE, GATE_CAPTURE_GLOBAL, NGATES } gate_kind_t;

static struct soak {
    options_t o;
    profile_t pr;
    char **argv;
    int argc;
    char device[256];
    vpmm_pool_t *pool;
    size_t page;
    uint64_t *sizes; /* allocation sizes of the traces, in order */
    size_t nsizes, sizes_cap;
    int traces_loaded;
    const char *trace_dir;
    worker_t *w;
    int nw;
    unsigned long long *dcount, *hcount; /* 2 per worker: running, scratch */
    pthread_mutex_t gate_lock;
    pthread_cond_t gate_cv;
    int gate_n[NGATES], gate_waiting;
    pthread_mutex_t ev_lock;
    cudaEvent_t *ev;
    size_t nev, ev_total;
    pthread_barrier_t drained;
    atomic_int stop;
    _Atomic int64_t inflight; /* items in transit, until their block is freed */
    pthread_mutex_t fail_lock;
    double t0;
    counter_t pool_checks, trims, trimmed_bytes;
    uint64_t peak_va_chunks, peak_va_bytes; /* sampled by the main thread's checks */
    atomic_int oom_reported;
    int drv_code0;
    const char *drv_call0;
} g = {
    .gate_lock = PTHREAD_MUTEX_INITIALIZER,
    .gate_cv = PTHREAD_COND_INITIALIZER,
    .ev_lock = PTHREAD_MUTEX_INITIALIZER,
    .fail_lock = PTHREAD_MUTEX_INITIALIZER,
};

/* ---- small helpers ------------------------------------------------------------------------ */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_us(long us)
{
    struct timespec ts = { us / 1000000, us % 1000000 * 1000 };
    nanosleep(&ts, NULL);
}

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rnd(worker_t *w)
{
    return splitmix(&w->rng);
}

static size_t below(worker_t *w, size_t n)
{
    return n > 1 ? (size_t)(rnd(w) % n) : 0;
}

/* A fresh pattern seed: the worker in the top 6 bits, a running number below. */
static uint32_t new_seed(worker_t *w)
{
    return (uint32_t)w->id << 26 | (w->next_seed++ & 0x3ffffffu);
}

static void count(worker_t *w, int which, uint64_t n)
{
    atomic_fetch_add_explicit(&w->c[which], n, memory_order_relaxed);
    if (which < C_BYTES)
        atomic_fetch_add_explicit(&w->c[C_OPS], n, memory_order_relaxed);
}

static void set_phase(worker_t *w, const char *what)
{
    atomic_store_explicit(&w->phase, what, memory_order_relaxed);
}

static uint64_t load(counter_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

/* ---- the report --------------------------------------------------------------------------- */

static const char *capture_mode_name(void)
{
    switch (g.o.capture_mode) {
    case VPMM_STREAM_CAPTURE_GLOBAL:
        return "global";
    case VPMM_STREAM_CAPTURE_THREAD_LOCAL:
        return "thread-local";
    case VPMM_STREAM_CAPTURE_RELAXED:
        return "relaxed";
    default:
        return "mixed";
    }
}

typedef struct totals {
    uint64_t c[NCOUNTS];
    unsigned long long mismatches;
    vpmm_stats_t st;
    int have_st, drv_code;
    const char *drv_call;
    double elapsed;
} totals_t;

static void sum_up(totals_t *t)
{
    memset(t, 0, sizeof *t);
    for (int i = 0; g.w != NULL && i < g.nw; i++) {
        for (int k = 0; k < NCOUNTS; k++)
            t->c[k] += load(&g.w[i].c[k]);
        t->mismatches += atomic_load(&g.w[i].mismatches);
    }
    t->c[C_OPS] += load(&g.pool_checks) + load(&g.trims);
    t->elapsed = g.t0 > 0 ? now_s() - g.t0 : 0;
}

static void print_json_string(const char *s)
{
    putchar('"');
    for (; s != NULL && *s; s++) {
        if (*s == '"' || *s == '\\')
            putchar('\\');
        putchar((unsigned char)*s < 0x20 ? ' ' : *s);
    }
    putchar('"');
}

/* The summary table (stdout; stderr with --json) and, with --json, one JSON line on stdout. */
static void report(const totals_t *t, const char *result, const char *message, const char *destroy)
{
    FILE *f = g.o.json ? stderr : stdout;
    const vpmm_stats_t *s = &t->st;
    double rate = t->elapsed > 0 ? (double)t->c[C_OPS] / t->elapsed : 0;

    fprintf(f, "vpmm-soak: %s%s%s\n", result, message[0] ? ": " : "", message);
    fprintf(f, "  %-20s", "command");
    for (int i = 0; i < g.argc; i++)
        fprintf(f, " %s", g.argv[i]);
    fprintf(f, "\n  %-20s %s, page %zu KiB, profile %s, seed %" PRIu64 "\n", "device",
            g.device[0] ? g.device : "?", g.page >> 10, g.pr.name ? g.pr.name : "?", g.o.seed);
    fprintf(f, "  %-20s %d workers x %d streams (+1 capture side stream each), %.1f s\n", "threads",
            g.o.threads, g.o.streams, t->elapsed);
    fprintf(f, "  %-20s %" PRIu64 " (%.0f/s)\n", "operations", t->c[C_OPS], rate);
    fprintf(f,
            "  %-20s %" PRIu64 " / %" PRIu64 ", %.1f GiB allocated, %" PRIu64
            " out-of-memory (handled)\n",
            "mallocs / frees", t->c[C_MALLOCS], t->c[C_FREES], (double)t->c[C_BYTES] / GiB,
            t->c[C_OOMS]);
    fprintf(f, "  %-20s %" PRIu64 " / %" PRIu64 "\n", "fills / checks", t->c[C_FILLS],
            t->c[C_CHECKS]);
    fprintf(f,
            "  %-20s %" PRIu64 " to other workers (%" PRIu64 " returned), %" PRIu64
            " across own streams\n",
            "handoffs", t->c[C_HANDOFFS], t->c[C_RETURNS], t->c[C_CROSS]);
    fprintf(f,
            "  %-20s %" PRIu64 " rounds (%" PRIu64 " trees), %" PRIu64 " captures, %" PRIu64
            " replays, %" PRIu64 " checkpoint take/reapply\n",
            "graphs", t->c[C_GRAPH_ROUNDS], t->c[C_TREES], t->c[C_CAPTURES], t->c[C_REPLAYS],
            t->c[C_CHECKPOINT_OPS]);
    fprintf(f,
            "  %-20s %" PRIu64 " forced rounds; pool: %" PRIu64 " defrags, %" PRIu64
            " pages remapped, %" PRIu64 " cross-stream waits\n",
            "defragmentation", t->c[C_DEFRAG_ROUNDS], s->defrags, s->pages_remapped,
            s->cross_stream_waits);
    fprintf(f, "  %-20s %" PRIu64 " invariant checks, %" PRIu64 " trims (%.1f GiB given back)\n",
            "pool", load(&g.pool_checks), load(&g.trims), (double)load(&g.trimmed_bytes) / GiB);
    fprintf(f,
            "  %-20s peak mapped %.2f GiB, peak live %.2f GiB, %" PRIu64 " pages created, %" PRIu64
            " released, %" PRIu64 " grows\n",
            "memory", (double)s->peak_mapped_bytes / GiB, (double)s->peak_live_bytes / GiB,
            s->pages_created, s->pages_released, s->grows);
    fprintf(f, "  %-20s peak %" PRIu64 " chunks, %.1f TiB reserved (sampled every 2 s)\n",
            "address space", g.peak_va_chunks, (double)g.peak_va_bytes / (1024.0 * GiB));
    fprintf(f, "  %-20s %llu\n", "mismatches", t->mismatches);
    fprintf(f, "  %-20s %s %d\n", "last driver error", t->drv_call ? t->drv_call : "none",
            t->drv_code);
    fprintf(f, "  %-20s %s\n", "vpmm_pool_destroy", destroy);
    if (!g.o.json)
        return;
    printf("{\"tool\": \"vpmm-soak\", \"result\": ");
    print_json_string(result);
    printf(", \"message\": ");
    print_json_string(message);
    printf(", \"command\": \"");
    for (int i = 0; i < g.argc; i++) {
        for (const char *c = g.argv[i]; *c; c++)
            if (*c != '"' && *c != '\\' && (unsigned char)*c >= 0x20)
                putchar(*c);
        if (i + 1 < g.argc)
            putchar(' ');
    }
    printf("\", \"device\": ");
    print_json_string(g.device);
    printf(", \"profile\": ");
    print_json_string(g.pr.name ? g.pr.name : "");
    printf(", \"capture_mode\": \"%s\"", capture_mode_name());
    printf(", \"threads\": %d, \"streams\": %d, \"seed\": %" PRIu64 ", \"seconds\": %.3f, "
           "\"ops_per_s\": %.0f, \"traces\": %d, \"trace_sizes\": %zu",
           g.o.threads, g.o.streams, g.o.seed, t->elapsed, rate, g.traces_loaded, g.nsizes);
    for (int k = 0; k < NCOUNTS; k++)
        printf(", \"%s\": %" PRIu64, count_names[k], t->c[k]);
    printf(", \"mismatches\": %llu, \"pool_checks\": %" PRIu64 ", \"trims\": %" PRIu64
           ", \"trimmed_bytes\": %" PRIu64,
           t->mismatches, load(&g.pool_checks), load(&g.trims), load(&g.trimmed_bytes));
    printf(", \"page_size\": %zu, \"defrags\": %" PRIu64 ", \"pages_remapped\": %" PRIu64
           ", \"pages_created\": %" PRIu64 ", \"pages_released\": %" PRIu64 ", \"grows\": %" PRIu64
           ", \"cross_stream_waits\": %" PRIu64 ", \"pool_ooms\": %" PRIu64
           ", \"peak_mapped_bytes\": %zu, \"peak_live_bytes\": %zu, \"peak_va_chunks\": %" PRIu64
           ", \"peak_va_bytes\": %" PRIu64,
           g.page, s->defrags, s->pages_remapped, s->pages_created, s->pages_released, s->grows,
           s->cross_stream_waits, s->ooms, s->peak_mapped_bytes, s->peak_live_bytes,
           g.peak_va_chunks, g.peak_va_bytes);
    printf(", \"driver_error_code\": %d, \"driver_error_call\": ", t->drv_code);
    if (t->drv_call)
        print_json_string(t->drv_call);
    else
        printf("null");
    printf(", \"pool_destroy\": ");
    print_json_string(destroy);
    printf("}\n");
}

/* Stops the soak: the first failure reports, with what the pool knows, and exits. */
__attribute__((format(printf, 3, 4))) static _Noreturn void fail(int code, const worker_t *w,
                                                                 const char *fmt, ...)
{
    char msg[1024], who[64];
    va_list ap;
    totals_t t;

    pthread_mutex_lock(&g.fail_lock); /* never unlocked: a second failure waits for the exit */
    atomic_store(&g.stop, 1);
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (w != NULL)
        snprintf(who, sizeof who, "worker %d (%s)", w->id,
                 atomic_load_explicit(&w->phase, memory_order_relaxed));
    else
        snprintf(who, sizeof who, "the main thread");
    sum_up(&t);
    fprintf(stderr, "vpmm-soak: FAILED after %.1f s, %" PRIu64 " operations, in %s: %s\n",
            t.elapsed, t.c[C_OPS], who, msg);
    if (g.pool != NULL) {
        t.have_st = vpmm_get_stats(g.pool, &t.st) == VPMM_SUCCESS;
        vpmm_pool_last_driver_error(g.pool, &t.drv_code, &t.drv_call);
    }
    fflush(stderr);
    report(&t, code == SOAK_CORRUPT ? "corruption" : "error", msg, "not reached");
    fflush(stdout);
    fflush(stderr);
    _exit(code);
}

static void cuda_ok(const worker_t *w, cudaError_t e, const char *what, int line)
{
    if (e != cudaSuccess)
        fail(SOAK_ERROR, w, "%s failed: %s (%s, %d) [soak.c:%d]", what, cudaGetErrorName(e),
             cudaGetErrorString(e), (int)e, line);
}

static void vpmm_ok(const worker_t *w, vpmm_status_t st, const char *what, int line)
{
    if (st != VPMM_SUCCESS)
        fail(SOAK_ERROR, w, "%s failed: %s (%s) [soak.c:%d]", what, vpmm_status_name(st),
             vpmm_last_error(), line);
}

#define CK(w, expr) cuda_ok((w), (expr), #expr, __LINE__)
#define VK(w, expr) vpmm_ok((w), (expr), #expr, __LINE__)

/* ---- the gate (R7) and the event pool ------------------------------------------------------ */

static int gate_free(gate_kind_t k)
{
    const int *n = g.gate_n;
    if (k == GATE_SYNC)
        return n[GATE_CAPTURE] == 0 && n[GATE_CAPTURE_GLOBAL] == 0 && g.gate_waiting == 0;
    if (k == GATE_CAPTURE)
        return n[GATE_SYNC] == 0 && n[GATE_CAPTURE_GLOBAL] == 0;
    return n[GATE_SYNC] == 0 && n[GATE_CAPTURE] == 0 && n[GATE_CAPTURE_GLOBAL] == 0;
}

static void gate_enter(gate_kind_t k)
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

static void gate_leave(gate_kind_t k)
{
    pthread_mutex_lock(&g.gate_lock);
    if (--g.gate_n[k] == 0)
        pthread_cond_broadcast(&g.gate_cv);
    pthread_mutex_unlock(&g.gate_lock);
}

static void stream_sync(const worker_t *w, cudaStream_t s)
{
    cudaError_t e;
    gate_enter(GATE_SYNC);
    e = cudaStreamSynchronize(s);
    gate_leave(GATE_SYNC);
    CK(w, e);
}

static cudaEvent_t event_get(void)
{
    cudaEvent_t ev = NULL;
    pthread_mutex_lock(&g.ev_lock);
    if (g.nev > 0)
        ev = g.ev[--g.nev];
    pthread_mutex_unlock(&g.ev_lock);
    return ev;
}

static void event_put(cudaEvent_t ev)
{
    pthread_mutex_lock(&g.ev_lock);
    g.ev[g.nev++] = ev;
    pthread_mutex_unlock(&g.ev_lock);
}

/* ---- allocation, kernels ------------------------------------------------------------------ */

/* vpmm_malloc: NULL on an out-of-memory (expected, counted); any other status fails the soak. */
static void *soak_malloc(worker_t *w, size_t size, cudaStream_t s)
{
    void *p = NULL;
    vpmm_status_t st = vpmm_malloc(g.pool, size, s, &p);
    if (st == VPMM_ERROR_OUT_OF_MEMORY) {
        count(w, C_OOMS, 1);
        if (atomic_exchange(&g.oom_reported, 1) == 0) { /* why, once */
            char why[2048];
            vpmm_pool_oom_report(g.pool, why, sizeof why);
            fprintf(stderr,
                    "vpmm-soak: note: first out-of-memory (handled: blocks are freed and "
                    "the soak goes on): %s\n",
                    why);
        }
        return NULL;
    }
    if (st != VPMM_SUCCESS || p == NULL)
        fail(SOAK_ERROR, w, "vpmm_malloc(%zu bytes, stream %p): %s (%s)", size, (void *)s,
             vpmm_status_name(st), vpmm_last_error());
    count(w, C_MALLOCS, 1);
    count(w, C_BYTES, size);
    return p;
}

static void soak_free(worker_t *w, void *p)
{
    vpmm_status_t st = vpmm_free(g.pool, p);
    if (st != VPMM_SUCCESS)
        fail(SOAK_ERROR, w, "vpmm_free(%p): %s (%s)", p, vpmm_status_name(st), vpmm_last_error());
    count(w, C_FREES, 1);
}

static void fill(worker_t *w, void *p, size_t n, uint32_t seed, cudaStream_t s)
{
    CK(w, (cudaError_t)gk_fill(p, n, seed, s));
    count(w, C_FILLS, 1);
}

static void check(worker_t *w, const void *p, size_t n, uint32_t seed, cudaStream_t s)
{
    CK(w, (cudaError_t)gk_check(p, n, seed, w->dcount, s));
    count(w, C_CHECKS, 1);
}

/* A size: trace sizes in order, or synthetic ones; folded below the profile's largest. */
static size_t pick_size(worker_t *w)
{
    const size_t page = g.page, r = below(w, 100);
    size_t n;
    if (r < 45 && g.nsizes > 0)
        n = (size_t)g.sizes[w->trace_pos++ % g.nsizes];
    else if (r < 60)
        n = 1 + below(w, page - 1); /* sub-page */
    else if (r < 68)
        n = 1 + below(w, 512); /* tiny */
    else if (r < 80)
        n = page * (1 + below(w, 4)); /* whole pages */
    else if (r < 97)
        n = page * (1 + below(w, 16)) + 1 + below(w, page - 1); /* pages and a tail */
    else
        n = g.pr.large_min + below(w, g.pr.large_max - g.pr.large_min + 1);
    if (n > g.pr.max_alloc)
        n = 1 + n % g.pr.max_alloc;
    return n;
}

/* ---- a worker's own blocks (R1) ----------------------------------------------------------- */

static void live_remove(worker_t *w, size_t i)
{
    w->live_bytes -= w->live[i].size;
    w->live[i] = w->live[--w->nlive];
}

static void op_check_free(worker_t *w, size_t i)
{
    block_t b = w->live[i];
    check(w, b.p, b.size, b.seed, w->s[b.stream]);
    soak_free(w, b.p);
    live_remove(w, i);
}

/* Out of memory: give back half of this worker's blocks (the others do the same). */
static void release_half(worker_t *w)
{
    size_t n = (w->nlive + 1) / 2;
    if (n == 0)
        sleep_us(1000);
    while (n-- > 0)
        op_check_free(w, below(w, w->nlive));
}

static void op_alloc(worker_t *w)
{
    const size_t size = pick_size(w);
    const int k = (int)below(w, (size_t)g.o.streams);
    block_t b = { NULL, size, new_seed(w), k };
    b.p = soak_malloc(w, size, w->s[k]);
    if (b.p == NULL) {
        release_half(w);
        return;
    }
    fill(w, b.p, size, b.seed, w->s[k]);
    w->live[w->nlive++] = b;
    w->live_bytes += size;
}

static void op_rewrite(worker_t *w, size_t i)
{
    block_t *b = &w->live[i];
    b->seed = new_seed(w);
    fill(w, b->p, b->size, b->seed, w->s[b->stream]);
}

/* Checks block i on another stream of this worker, then frees it or keeps it (R3). */
static void op_cross(worker_t *w, size_t i)
{
    block_t b = w->live[i];
    const int k = (b.stream + 1 + (int)below(w, (size_t)g.o.streams - 1)) % g.o.streams;
    cudaEvent_t ev = g.o.streams > 1 ? event_get() : NULL;
    if (ev == NULL) {
        check(w, b.p, b.size, b.seed, w->s[b.stream]);
        return;
    }
    CK(w, cudaEventRecord(ev, w->s[b.stream]));
    CK(w, cudaStreamWaitEvent(w->s[k], ev, 0));
    check(w, b.p, b.size, b.seed, w->s[k]);
    CK(w, cudaEventRecord(ev, w->s[k]));
    CK(w, cudaStreamWaitEvent(w->s[b.stream], ev, 0));
    event_put(ev);
    count(w, C_CROSS, 1);
    if (below(w, 2) == 0) {
        soak_free(w, b.p);
        live_remove(w, i);
    }
}

/* ---- blocks in transit between workers (R2, R3) ------------------------------------------- */

static void inbox_push(worker_t *to, const item_t *it)
{
    pthread_mutex_lock(&to->inbox_lock);
    to->inbox[to->ninbox++] = *it; /* room: every item holds one of g.ev_total events */
    pthread_mutex_unlock(&to->inbox_lock);
}

static size_t inbox_len(worker_t *w)
{
    size_t n;
    pthread_mutex_lock(&w->inbox_lock);
    n = w->ninbox;
    pthread_mutex_unlock(&w->inbox_lock);
    return n;
}

static void op_handoff(worker_t *w, size_t i)
{
    block_t b = w->live[i];
    size_t to = below(w, (size_t)g.nw - 1);
    cudaEvent_t ev;
    item_t it;
    if (g.nw < 2) {
        op_cross(w, i);
        return;
    }
    if (to >= (size_t)w->id)
        to++;
    if (inbox_len(&g.w[to]) >= INBOX_MAX || (ev = event_get()) == NULL) {
        op_check_free(w, i);
        return;
    }
    CK(w, cudaEventRecord(ev, w->s[b.stream]));
    it.b = b;
    it.owner = w->id;
    it.kind = below(w, 2) ? ITEM_FREE_THERE : ITEM_CHECK_RETURN;
    it.ev = ev;
    atomic_fetch_add(&g.inflight, 1);
    live_remove(w, i);
    inbox_push(&g.w[to], &it);
    count(w, C_HANDOFFS, 1);
}

/* Frees a deferred block whose event has completed. */
static void defer_finish(worker_t *w, size_t i)
{
    item_t *it = &w->defer[i];
    soak_free(w, it->b.p);
    event_put(it->ev);
    atomic_fetch_sub(&g.inflight, 1);
    memmove(&w->defer[i], &w->defer[i + 1], (w->ndefer - i - 1) * sizeof *it);
    w->ndefer--;
}

static void corruption(worker_t *w, unsigned long long bad);

/*
 * Synchronises every stream of the worker and reads its counter (R6); every deferred block is
 * then done with the GPU and is freed.
 */
static void sync_point(worker_t *w)
{
    unsigned long long bad;
    cudaError_t e;
    for (int k = 0; k < g.o.streams; k++)
        stream_sync(w, w->s[k]);
    gate_enter(GATE_SYNC);
    e = cudaMemcpyAsync(w->hcount, w->dcount, sizeof *w->hcount, cudaMemcpyDeviceToHost, w->s[0]);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(w->s[0]);
    gate_leave(GATE_SYNC);
    CK(w, e);
    bad = *w->hcount;
    atomic_store(&w->mismatches, bad);
    if (bad != 0)
        corruption(w, bad);
    while (w->ndefer > 0)
        defer_finish(w, w->ndefer - 1);
    count(w, C_SYNCS, 1);
}

static void defer_push(worker_t *w, const item_t *it)
{
    if (w->ndefer == DEFER_MAX)
        sync_point(w);
    w->defer[w->ndefer++] = *it;
}

/* Frees the deferred blocks whose check has completed, oldest first, without waiting. */
static void poll_deferred(worker_t *w)
{
    while (w->ndefer > 0) {
        cudaError_t e;
        gate_enter(GATE_SYNC);
        e = cudaEventQuery(w->defer[0].ev);
        gate_leave(GATE_SYNC);
        if (e == cudaErrorNotReady) {
            (void)cudaGetLastError(); /* "not ready" must not reach the next launcher's check */
            return;
        }
        CK(w, e);
        defer_finish(w, 0);
    }
}

static void process_item(worker_t *w, item_t *it)
{
    cudaStream_t s;
    switch (it->kind) {
    case ITEM_FREE_THERE:
    case ITEM_CHECK_RETURN:
        s = w->s[below(w, (size_t)g.o.streams)];
        CK(w, cudaStreamWaitEvent(s, it->ev, 0));
        check(w, it->b.p, it->b.size, it->b.seed, s);
        CK(w, cudaEventRecord(it->ev, s));
        if (it->kind == ITEM_FREE_THERE) {
            defer_push(w, it);
        } else {
            it->kind = ITEM_RETURNED;
            inbox_push(&g.w[it->owner], it);
        }
        break;
    case ITEM_RETURNED: /* w is the owner */
        CK(w, cudaStreamWaitEvent(w->s[it->b.stream], it->ev, 0));
        event_put(it->ev);
        soak_free(w, it->b.p);
        atomic_fetch_sub(&g.inflight, 1);
        count(w, C_RETURNS, 1);
        break;
    }
}

/* Processes what other workers sent; returns how many items there were. */
static size_t drain_inbox(worker_t *w)
{
    item_t batch[16];
    size_t n;
    pthread_mutex_lock(&w->inbox_lock);
    n = w->ninbox < 16 ? w->ninbox : 16;
    memcpy(batch, w->inbox, n * sizeof *batch);
    memmove(w->inbox, w->inbox + n, (w->ninbox - n) * sizeof *batch);
    w->ninbox -= n;
    pthread_mutex_unlock(&w->inbox_lock);
    for (size_t i = 0; i < n; i++)
        process_item(w, &batch[i]);
    return n;
}

/* A mismatch: re-check every live block alone to name the damaged ones, then stop. */
static void corruption(worker_t *w, unsigned long long bad)
{
    size_t damaged = 0;
    set_phase(w, "locating corruption");
    fprintf(stderr,
            "vpmm-soak: worker %d: its checks found %llu mismatching words; re-checking its %zu "
            "live blocks one by one\n",
            w->id, bad, w->nlive);
    for (size_t i = 0; i < w->nlive; i++) {
        const block_t *b = &w->live[i];
        cudaStream_t s = w->s[b->stream];
        cudaError_t e;
        gate_enter(GATE_SYNC);
        e = cudaMemsetAsync(w->dscratch, 0, sizeof *w->dscratch, s);
        if (e == cudaSuccess)
            e = (cudaError_t)gk_check(b->p, b->size, b->seed, w->dscratch, s);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(w->hscratch, w->dscratch, sizeof *w->hscratch,
                                cudaMemcpyDeviceToHost, s);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(s);
        gate_leave(GATE_SYNC);
        CK(w, e);
        if (*w->hscratch != 0 && damaged++ < 20)
            fprintf(stderr,
                    "vpmm-soak:   block %p, %zu bytes, seed 0x%08x, stream %d: %llu "
                    "mismatching words\n",
                    b->p, b->size, b->seed, b->stream, *w->hscratch);
    }
    fail(SOAK_CORRUPT, w,
         "%llu mismatching words (%zu of the worker's %zu live blocks still damaged): memory "
         "written through vpmm did not read back",
         bad, damaged, w->nlive);
}

/* ---- forced defragmentation (R5) ---------------------------------------------------------- */

static void defrag_round(worker_t *w)
{
    const char *was = atomic_load_explicit(&w->phase, memory_order_relaxed);
    const int a = (int)below(w, (size_t)g.o.streams), b = (int)below(w, (size_t)g.o.streams);
    size_t nb = g.pr.defrag_blocks < MAX_DEFRAG_BLOCKS ? g.pr.defrag_blocks : MAX_DEFRAG_BLOCKS;
    void *blk[MAX_DEFRAG_BLOCKS] = { 0 }, *big;
    uint32_t seed[MAX_DEFRAG_BLOCKS], big_seed = new_seed(w);
    size_t big_bytes, i;
    vpmm_stats_t st;

    set_phase(w, "forced defragmentation");
    for (i = 0; i < nb; i++) {
        blk[i] = soak_malloc(w, g.page, w->s[a]);
        if (blk[i] == NULL)
            break;
        seed[i] = new_seed(w);
        fill(w, blk[i], g.page, seed[i], w->s[a]);
    }
    nb = i;
    for (i = 0; i < nb; i += 2) {
        check(w, blk[i], g.page, seed[i], w->s[a]);
        soak_free(w, blk[i]);
        blk[i] = NULL;
    }
    /* Larger than the largest free region: the pool must gather pages (remap) or grow. */
    VK(w, vpmm_get_stats(g.pool, &st));
    big_bytes = (st.largest_free_bytes / g.page + 1) * g.page;
    if (big_bytes < nb / 2 * g.page)
        big_bytes = nb / 2 * g.page;
    if (big_bytes > g.pr.defrag_cap)
        big_bytes = g.pr.defrag_cap;
    big = soak_malloc(w, big_bytes, w->s[b]);
    if (big != NULL) {
        fill(w, big, big_bytes, big_seed, w->s[b]);
        check(w, big, big_bytes, big_seed, w->s[b]);
    }
    for (i = 1; i < nb; i += 2)
        check(w, blk[i], g.page, seed[i], w->s[a]); /* the survivors kept their data */
    if (big != NULL)
        soak_free(w, big);
    for (i = 1; i < nb; i += 2)
        soak_free(w, blk[i]);
    count(w, C_DEFRAG_ROUNDS, 1);
    set_phase(w, was);
}

/* ---- graph rounds (R4) -------------------------------------------------------------------- */

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

static void graph_destroy(worker_t *w, cudaGraph_t graph)
{
    cudaError_t e;
    if (graph == NULL)
        return;
    gate_enter(GATE_SYNC);
    e = cudaGraphDestroy(graph);
    gate_leave(GATE_SYNC);
    CK(w, e);
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

static cudaGraphExec_t instantiate(worker_t *w, cudaGraph_t graph)
{
    cudaGraphExec_t exec = NULL;
    cudaError_t e;
    gate_enter(GATE_SYNC);
    e = cudaGraphInstantiate(&exec, graph, 0);
    gate_leave(GATE_SYNC);
    CK(w, e);
    return exec;
}

static void launch(worker_t *w, cudaGraphExec_t exec, cudaStream_t s)
{
    cudaError_t e;
    gate_enter(GATE_SYNC);
    e = cudaGraphLaunch(exec, s);
    gate_leave(GATE_SYNC);
    CK(w, e);
    count(w, C_REPLAYS, 1);
}

static void exec_destroy(worker_t *w, cudaGraphExec_t exec)
{
    cudaError_t e;
    gate_enter(GATE_SYNC);
    e = cudaGraphExecDestroy(exec); /* launches in flight complete first (CUDA's rule) */
    gate_leave(GATE_SYNC);
    CK(w, e);
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

static void graph_round(worker_t *w, int tree)
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

/* ---- the worker --------------------------------------------------------------------------- */

static void step(worker_t *w)
{
    const size_t r = below(w, 100);
    size_t i;
    if (w->nlive == 0 || (r < 40 && w->nlive < g.pr.max_live && w->live_bytes < g.pr.live_bytes)) {
        op_alloc(w);
        return;
    }
    i = below(w, w->nlive);
    if (r < 62)
        op_check_free(w, i);
    else if (r < 77)
        check(w, w->live[i].p, w->live[i].size, w->live[i].seed, w->s[w->live[i].stream]);
    else if (r < 85)
        op_rewrite(w, i);
    else if (r < 93)
        op_handoff(w, i);
    else
        op_cross(w, i);
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    uint64_t next_sync = g.pr.sync_every, next_defrag = 20, next_graph = 40, rounds = 0;

    set_phase(w, "steps");
    while (!atomic_load_explicit(&g.stop, memory_order_relaxed)) {
        drain_inbox(w);
        poll_deferred(w);
        step(w);
        w->steps++;
        if (w->steps >= next_sync) {
            sync_point(w);
            next_sync = w->steps + g.pr.sync_every;
        }
        if (w->steps >= next_defrag) {
            defrag_round(w);
            next_defrag = w->steps + g.pr.defrag_every / 2 + below(w, g.pr.defrag_every);
        }
        if (w->steps >= next_graph) {
            /* Round 0 is a plain round and round 1 a tree, early: short runs see both. */
            graph_round(w, rounds % g.pr.tree_every == 1);
            next_graph =
                w->steps + (rounds < 1 ? 40 : g.pr.graph_every / 2 + below(w, g.pr.graph_every));
            rounds++;
            set_phase(w, "steps");
        }
    }

    /* Wind down: free what this worker holds; once every worker is past its loop no new block
     * goes into transit, and each serves its inbox until nothing is in transit anywhere. */
    set_phase(w, "draining");
    while (w->nlive > 0)
        op_check_free(w, w->nlive - 1);
    pthread_barrier_wait(&g.drained);
    for (;;) {
        size_t n = drain_inbox(w);
        if (w->ndefer > 0)
            sync_point(w);
        if (n == 0 && atomic_load(&g.inflight) == 0)
            break;
        if (n == 0)
            sleep_us(100);
    }
    sync_point(w); /* the final count */
    set_phase(w, "done");
    return NULL;
}

/* ---- the main thread: watch, stop, tear down ---------------------------------------------- */

static uint64_t total_ops(void)
{
    uint64_t n = load(&g.pool_checks) + load(&g.trims);
    for (int i = 0; i < g.nw; i++)
        n += load(&g.w[i].c[C_OPS]);
    return n;
}

static void check_pool(void)
{
    vpmm_stats_t s;
    size_t bad = vpmm_pool_check(g.pool, stderr);
    atomic_fetch_add_explicit(&g.pool_checks, 1, memory_order_relaxed);
    if (bad != 0)
        fail(SOAK_ERROR, NULL, "vpmm_pool_check: %zu invariant violations (listed above)", bad);
    VK(NULL, vpmm_get_stats(g.pool, &s));
    if (s.mapped_bytes % s.page_size != 0 || s.mapped_bytes != s.allocated_bytes + s.free_bytes ||
        s.reserved_va_bytes != s.allocated_bytes + s.free_bytes + s.hole_bytes + s.zombie_bytes)
        fail(SOAK_ERROR, NULL,
             "stats do not add up: mapped %zu, allocated %zu, free %zu, holes %zu, zombies %zu, "
             "reserved VA %zu, page %zu",
             s.mapped_bytes, s.allocated_bytes, s.free_bytes, s.hole_bytes, s.zombie_bytes,
             s.reserved_va_bytes, s.page_size);
    if (s.va_chunks > g.peak_va_chunks)
        g.peak_va_chunks = s.va_chunks;
    if (s.reserved_va_bytes > g.peak_va_bytes)
        g.peak_va_bytes = s.reserved_va_bytes;
}

/* Zombies by why they are still there: waiting for a stream's marker (a side stream's: one only
 * used inside captures), or in a graph pool. */
typedef struct zombie_tally {
    size_t n, waiting, on_side, in_graph_pools;
} zombie_tally_t;

static int tally_zombie(const vpmm_region_info_t *r, void *user)
{
    zombie_tally_t *z = user;
    if (r->state == VPMM_REGION_ZOMBIE) {
        z->n++;
        z->waiting += r->stream != NULL;
        z->in_graph_pools += r->pool != 0;
        for (int i = 0; r->stream != NULL && i < g.nw; i++)
            z->on_side += r->stream == (vpmm_stream_t)g.w[i].side;
    }
    return 0;
}

static void progress(double t, uint64_t ops)
{
    vpmm_stats_t s;
    zombie_tally_t z = { 0, 0, 0, 0 };
    unsigned long long bad = 0;
    uint64_t replays = 0;
    const char *call = NULL;
    int code = 0;
    VK(NULL, vpmm_get_stats(g.pool, &s));
    VK(NULL, vpmm_pool_walk(g.pool, tally_zombie, &z));
    VK(NULL, vpmm_pool_last_driver_error(g.pool, &code, &call));
    for (int i = 0; i < g.nw; i++) {
        bad += atomic_load(&g.w[i].mismatches);
        replays += load(&g.w[i].c[C_REPLAYS]);
    }
    fprintf(stderr,
            "vpmm-soak: %6.0f s  %" PRIu64 " ops (%.0f/s)  live %.2f / mapped %.2f GiB  %" PRIu64
            " defrags, %" PRIu64 " pages remapped  %" PRIu64 " replays  %" PRIu64
            " graph pools  VA %" PRIu64 " chunks, %.1f TiB  zombies %zu (%.1f GiB: %zu waiting for "
            "a stream, %zu of them a side stream; %zu in graph pools)  last driver error %s %d  "
            "mismatches %llu\n",
            t, ops, (double)ops / t, (double)s.live_bytes / GiB, (double)s.mapped_bytes / GiB,
            s.defrags, s.pages_remapped, replays, s.graph_pools, s.va_chunks,
            (double)s.reserved_va_bytes / (1024.0 * GiB), z.n, (double)s.zombie_bytes / GiB,
            z.waiting, z.on_side, z.in_graph_pools, call ? call : "none", code, bad);
}

/* Runs until a limit is reached; checks the pool, trims, reports progress meanwhile. */
static void monitor(void)
{
    double next_check = 2, next_trim = 5, next_progress = 10, last_change = 0, last_warn = 0;
    uint64_t last_ops = 0;
    for (;;) {
        const double t = now_s() - g.t0;
        const uint64_t ops = total_ops();
        if ((g.o.seconds > 0 && t >= g.o.seconds) || (g.o.ops > 0 && ops >= g.o.ops))
            break;
        if (t >= next_check) {
            check_pool();
            next_check = t + 2;
        }
        if (t >= next_trim) {
            size_t released = 0;
            VK(NULL, vpmm_trim(g.pool, 0, &released));
            atomic_fetch_add_explicit(&g.trims, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&g.trimmed_bytes, released, memory_order_relaxed);
            next_trim = t + 5;
        }
        if (t >= next_progress) {
            progress(t, ops);
            next_progress = t + 10;
        }
        if (ops != last_ops) {
            last_ops = ops;
            last_change = t;
        } else if (t - last_change > STALL_FAIL_S) {
            fail(SOAK_ERROR, NULL, "no operation for %.0f s: hung? (worker phases above)",
                 t - last_change);
        } else if (t - last_change > 60 && t - last_warn > 60) {
            last_warn = t;
            fprintf(stderr,
                    "vpmm-soak: warning: no operation for %.0f s; workers:", t - last_change);
            for (int i = 0; i < g.nw; i++)
                fprintf(stderr, " %d=%s", i,
                        atomic_load_explicit(&g.w[i].phase, memory_order_relaxed));
            fprintf(stderr, "\n");
        }
        sleep_us(20000);
    }
    atomic_store(&g.stop, 1);
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: vpmm-soak [--seconds N] [--ops N] [--threads T] [--streams S] "
            "[--trace PATH]...\n"
            "                 [--seed S] [--live-mb M] [--capture-mode M] [--light] [--json]\n"
            "  --seconds N   stop after N seconds (default 60 unless --ops is given; 0: no limit)\n"
            "  --ops N       stop after N operations (default 0: no limit); the first limit wins\n"
            "  --threads T   worker threads sharing the pool (default 4, at most %d)\n"
            "  --streams S   non-blocking streams per worker (default 2, at most %d)\n"
            "  --trace PATH  take allocation sizes from this trace (repeatable; default: every\n"
            "                %s/*.trace.gz)\n"
            "  --seed S      seed of the workers' generators (default 1)\n"
            "  --live-mb M   live bytes per worker before it stops allocating (default: profile)\n"
            "  --capture-mode M  mixed (default: global, thread-local, relaxed in turn), global,\n"
            "                thread-local or relaxed\n"
            "  --light       small sizes and frequent rounds, for compute-sanitizer\n"
            "  --json        also print the result as one JSON line on stdout (table on stderr)\n"
            "Exit status: 0 pass, 1 usage or trace error, 2 no CUDA device, 3 error, "
            "4 corruption.\n",
            MAX_THREADS, MAX_STREAMS, VPMM_SOAK_TRACE_DIR);
}

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v;
    if (s == NULL || *s == '\0' || *s == '-')
        return -1;
    v = strtoull(s, &end, 0);
    if (*end != '\0')
        return -1;
    *out = v;
    return 0;
}

static int parse_options(int argc, char **argv, options_t *o)
{
    static const struct option longs[] = {
        { "seconds", required_argument, NULL, 's' },
        { "ops", required_argument, NULL, 'o' },
        { "threads", required_argument, NULL, 't' },
        { "streams", required_argument, NULL, 'S' },
        { "trace", required_argument, NULL, 'T' },
        { "seed", required_argument, NULL, 'r' },
        { "live-mb", required_argument, NULL, 'm' },
        { "light", no_argument, NULL, 'l' },
        { "json", no_argument, NULL, 'j' },
        { "help", no_argument, NULL, 'h' },
        { "capture-mode", required_argument, NULL, 'c' },
        { NULL, 0, NULL, 0 },
    };
    int c, have_seconds = 0;
    uint64_t v;
    char *end;

    memset(o, 0, sizeof *o);
    o->threads = 4;
    o->streams = 2;
    o->seed = 1;
    o->capture_mode = -1;
    o->traces = calloc((size_t)argc, sizeof *o->traces);
    if (o->traces == NULL)
        return -1;
    while ((c = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
        switch (c) {
        case 's':
            o->seconds = strtod(optarg, &end);
            if (*end != '\0' || !(o->seconds >= 0)) {
                fprintf(stderr, "vpmm-soak: --seconds: '%s' is not a number of seconds\n", optarg);
                return -1;
            }
            have_seconds = 1;
            break;
        case 'o':
        case 't':
        case 'S':
        case 'r':
        case 'm':
            if (parse_u64(optarg, &v) != 0) {
                fprintf(stderr, "vpmm-soak: '%s' is not a non-negative integer\n", optarg);
                return -1;
            }
            if (c == 'o')
                o->ops = v;
            else if (c == 'r')
                o->seed = v;
            else if (c == 'm')
                o->live_mb = (size_t)v;
            else if (c == 't' && (v < 1 || v > MAX_THREADS)) {
                fprintf(stderr, "vpmm-soak: --threads must be 1..%d\n", MAX_THREADS);
                return -1;
            } else if (c == 'S' && (v < 1 || v > MAX_STREAMS)) {
                fprintf(stderr, "vpmm-soak: --streams must be 1..%d\n", MAX_STREAMS);
                return -1;
            } else if (c == 't')
                o->threads = (int)v;
            else
                o->streams = (int)v;
            break;
        case 'T':
            o->traces[o->ntraces++] = optarg;
            break;
        case 'c':
            if (strcmp(optarg, "mixed") == 0)
                o->capture_mode = -1;
            else if (strcmp(optarg, "global") == 0)
                o->capture_mode = VPMM_STREAM_CAPTURE_GLOBAL;
            else if (strcmp(optarg, "thread-local") == 0)
                o->capture_mode = VPMM_STREAM_CAPTURE_THREAD_LOCAL;
            else if (strcmp(optarg, "relaxed") == 0)
                o->capture_mode = VPMM_STREAM_CAPTURE_RELAXED;
            else {
                fprintf(stderr,
                        "vpmm-soak: --capture-mode: '%s' is not mixed, global, "
                        "thread-local or relaxed\n",
                        optarg);
                return -1;
            }
            break;
        case 'l':
            o->light = 1;
            break;
        case 'j':
            o->json = 1;
            break;
        case 'h':
            usage(stdout);
            exit(SOAK_PASS);
        default:
            usage(stderr);
            return -1;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "vpmm-soak: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return -1;
    }
    if (!have_seconds && o->ops == 0)
        o->seconds = 60;
    if (o->seconds == 0 && o->ops == 0) {
        fprintf(stderr, "vpmm-soak: --seconds 0 and no --ops: the soak would never stop\n");
        return -1;
    }
    return 0;
}

/* Appends the allocation sizes of one trace. Returns 0, or -1 (message printed). */
static int load_sizes(const char *path)
{
    trace_t t;
    char err[512];
    if (trace_load(path, &t, err, sizeof err) != 0) {
        fprintf(stderr, "vpmm-soak: %s\n", err);
        return -1;
    }
    if (g.nsizes + t.allocs > g.sizes_cap) {
        size_t cap = (g.nsizes + t.allocs) * 2;
        uint64_t *s = realloc(g.sizes, cap * sizeof *s);
        if (s == NULL) {
            trace_free(&t);
            fprintf(stderr, "vpmm-soak: out of memory\n");
            return -1;
        }
        g.sizes = s;
        g.sizes_cap = cap;
    }
    for (size_t i = 0; i < t.nops; i++)
        if (t.ops[i].kind == TRACE_ALLOC)
            g.sizes[g.nsizes++] = t.ops[i].size;
    trace_free(&t);
    g.traces_loaded++;
    return 0;
}

/* --trace files, else every trace of the source tree's bench/traces (or of ./bench/traces: a
 * build directory carried to another machine keeps this one's path). */
static int load_traces(void)
{
    static const char *const dirs[] = { VPMM_SOAK_TRACE_DIR, "bench/traces" };
    glob_t gl;
    if (g.o.ntraces > 0) {
        for (size_t i = 0; i < g.o.ntraces; i++)
            if (load_sizes(g.o.traces[i]) != 0)
                return -1;
        g.trace_dir = "--trace";
        return 0;
    }
    for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
        char pattern[4200];
        snprintf(pattern, sizeof pattern, "%.4000s/*.trace.gz", dirs[d]);
        if (glob(pattern, 0, NULL, &gl) != 0)
            continue;
        for (size_t i = 0; i < gl.gl_pathc; i++)
            if (load_sizes(gl.gl_pathv[i]) != 0)
                fprintf(stderr, "vpmm-soak: warning: %s skipped\n", gl.gl_pathv[i]);
        globfree(&gl);
        if (g.traces_loaded > 0) {
            g.trace_dir = dirs[d];
            return 0;
        }
    }
    fprintf(stderr, "vpmm-soak: warning: no trace in %s or bench/traces: synthetic sizes only\n",
            VPMM_SOAK_TRACE_DIR);
    g.trace_dir = "none";
    return 0;
}

/* Streams, events, counters and tables of every worker; the kernels loaded. */
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
    double t0 = now_s();
    CK(NULL, cudaDeviceSynchronize());
    for (;;) { /* CUDA runs the graph pools' destructors on its own thread */
        VK(NULL, vpmm_get_stats(g.pool, &t->st));
        if (t->st.graph_pools == 0)
            break;
        if (now_s() - t0 > 10)
            fail(SOAK_ERROR, NULL,
                 "%" PRIu64 " graph pool(s) still alive 10 s after the last graph",
                 t->st.graph_pools);
        sleep_us(1000);
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

    g.t0 = now_s();
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
