/*
 * soak.h — vpmm-soak: many threads and streams hammer one vpmm pool on a real GPU for minutes,
 * and kernels write and verify every byte handed out, so a wrong mapping, a missing GPU-side
 * wait, a remap that loses data or memory handed out twice shows up as mismatching words.
 *
 *   vpmm-soak [--seconds N] [--ops N] [--threads T] [--streams S] [--trace PATH]... [--seed S]
 *             [--live-mb M] [--capture-mode M] [--light] [--json] [--version]
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
 *
 * The files, one concern each; this header holds what they share (the state g, the workers'
 * types, small inline helpers) and the one place each cross-file function is declared:
 *   main.c     the pool, the workers' streams, events and counters; start, wait, tear down
 *   options.c  the command line, and the traces whose allocation sizes the workers use
 *   worker.c   a worker's loop: its blocks (R1), blocks in transit (R2, R3), sync points and
 *              their mismatch counters (R6), forced defragmentation (R5)
 *   graphs.c   graph rounds and graph trees (R4)
 *   sync.c     the gate (R7) and the soak's synchronising CUDA calls; the handoff event pool
 *   monitor.c  the main thread while the workers run: invariant checks, trims, progress, limits
 *   report.c   the summary (table, JSON), and fail(): the first failure reports and exits
 */
#ifndef VPMM_BENCH_SOAK_H
#define VPMM_BENCH_SOAK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cuda_runtime_api.h>

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

/* The soak's one shared state (main.c defines it): the options, the pool, the workers, the gate,
 * the event pool and the main thread's figures. */
struct soak {
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
};
extern struct soak g;

/* ---- small helpers ------------------------------------------------------------------------ */

static inline uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline uint64_t rnd(worker_t *w)
{
    return splitmix(&w->rng);
}

static inline size_t below(worker_t *w, size_t n)
{
    return n > 1 ? (size_t)(rnd(w) % n) : 0;
}

/* A fresh pattern seed: the worker in the top 6 bits, a running number below. */
static inline uint32_t new_seed(worker_t *w)
{
    return (uint32_t)w->id << 26 | (w->next_seed++ & 0x3ffffffu);
}

static inline void count(worker_t *w, int which, uint64_t n)
{
    atomic_fetch_add_explicit(&w->c[which], n, memory_order_relaxed);
    if (which < C_BYTES)
        atomic_fetch_add_explicit(&w->c[C_OPS], n, memory_order_relaxed);
}

static inline void set_phase(worker_t *w, const char *what)
{
    atomic_store_explicit(&w->phase, what, memory_order_relaxed);
}

static inline uint64_t load(counter_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

/* ---- report.c ------------------------------------------------------------------------------ */

typedef struct totals {
    uint64_t c[NCOUNTS];
    unsigned long long mismatches;
    vpmm_stats_t st;
    int have_st, drv_code;
    const char *drv_call;
    double elapsed;
} totals_t;

/* "global", "thread-local", "relaxed" or "mixed": the captures' mode (--capture-mode). */
const char *capture_mode_name(void);
/* The workers' counters added up, and the time since the start. */
void sum_up(totals_t *t);
/* The summary table (stdout; stderr with --json) and, with --json, one JSON line on stdout. */
void report(const totals_t *t, const char *result, const char *message, const char *destroy);
/* Stops the soak: the first failure reports, with what the pool knows, and exits with code. */
__attribute__((format(printf, 3, 4))) _Noreturn void fail(int code, const worker_t *w,
                                                          const char *fmt, ...);
void cuda_ok(const worker_t *w, cudaError_t e, const char *what, const char *file, int line);
void vpmm_ok(const worker_t *w, vpmm_status_t st, const char *what, const char *file, int line);

/* A CUDA or vpmm call that must succeed (w: the worker making it, NULL for the main thread). */
#define CK(w, expr) cuda_ok((w), (expr), #expr, __FILE__, __LINE__)
#define VK(w, expr) vpmm_ok((w), (expr), #expr, __FILE__, __LINE__)

/* ---- sync.c -------------------------------------------------------------------------------- */

void gate_enter(gate_kind_t k);
void gate_leave(gate_kind_t k);
/* The synchronising calls, each through the gate (R7). */
void stream_sync(const worker_t *w, cudaStream_t s);
cudaGraphExec_t instantiate(worker_t *w, cudaGraph_t graph);
void launch(worker_t *w, cudaGraphExec_t exec, cudaStream_t s);
void exec_destroy(worker_t *w, cudaGraphExec_t exec);
void graph_destroy(worker_t *w, cudaGraph_t graph);
/* The handoff events: NULL when every one is in use. */
cudaEvent_t event_get(void);
void event_put(cudaEvent_t ev);

/* ---- worker.c ------------------------------------------------------------------------------ */

/* vpmm_malloc: NULL on an out-of-memory (expected, counted); any other status fails the soak. */
void *soak_malloc(worker_t *w, size_t size, cudaStream_t s);
void soak_free(worker_t *w, void *p);
/* The kernels of kernels/gpu_kernels.h, counted: fill with a seed's pattern, check against it. */
void fill(worker_t *w, void *p, size_t n, uint32_t seed, cudaStream_t s);
void check(worker_t *w, const void *p, size_t n, uint32_t seed, cudaStream_t s);
/* Out of memory: give back half of this worker's blocks (the others do the same). */
void release_half(worker_t *w);
/* A forced defragmentation (R5). */
void defrag_round(worker_t *w);
/* A worker thread (pthread_create's start routine). */
void *worker_main(void *arg);

/* ---- graphs.c ------------------------------------------------------------------------------ */

/* A graph round (R4): a captured inference step replayed, or a graph tree when `tree`. */
void graph_round(worker_t *w, int tree);

/* ---- monitor.c ----------------------------------------------------------------------------- */

/* vpmm_pool_check and the stats' accounting equations; fails the soak on a violation. */
void check_pool(void);
/* Runs until a limit is reached; checks the pool, trims, reports progress meanwhile. */
void monitor(void);

/* ---- options.c ----------------------------------------------------------------------------- */

/* The command line into *o: 0, or -1 after a message (--help and --version exit). */
int parse_options(int argc, char **argv, options_t *o);
/* The allocation sizes of the traces into g.sizes: 0, or -1 after a message. */
int load_traces(void);

#endif /* VPMM_BENCH_SOAK_H */
