/*
 * test_gpu_streams.c — vpmm on a real GPU across host threads, for every kind of stream handle: a
 * stream the program created, 0 (NULL), the legacy stream VPMM_STREAM_LEGACY (= cudaStreamLegacy,
 * 0x1) and the calling thread's own stream VPMM_STREAM_PER_THREAD (= cudaStreamPerThread, 0x2).
 * A block freed on one thread's stream while a kernel there still reads it must not reach another
 * stream without a GPU-side wait; the kernels (gpu_kernels.cu) count the words that changed under
 * the reader, so a missing wait shows up as mismatches, not as a guess.
 *
 * Each case is a fresh pool (CUDA backend, 64 GiB of VA, default cache) and two host threads.
 * Thread A allocates 16 MiB on its stream SA and enqueues on SA: fill (seed a), spin ~250 ms, check
 * (seed a); it frees the block at once (a stream-ordered free) and signals B. Thread B allocates
 * 16 MiB on its stream SB — the pool can only give A's freed block or new memory — fills it (seed
 * b), checks it, signals A and frees it. A must find SA still busy (else the case proved nothing)
 * and waits for it. The main thread joins both, synchronises and asserts: A's check and B's saw 0
 * mismatches; a reuse across two different streams counted a GPU-side wait (cross_stream_waits);
 * the pool passes vpmm_pool_check, vpmm_pool_destroy succeeds and the device's free memory comes
 * back. Cases: SA in {created, 0, 0x1, 0x2} x SB in {created, 0x1, 0x2, 0}, with non-blocking
 * created streams; then every case with a created stream once more with blocking ones.
 *
 * Built twice from this file: test_gpu_streams, where stream 0 is the legacy default stream, and
 * test_gpu_streams_ptds (CUDA_API_PER_THREAD_DEFAULT_STREAM; kernels built with nvcc
 * --default-stream per-thread), where stream 0 is the calling thread's per-thread stream for the
 * kernels and, through vpmm_config_init, for vpmm: there the cases with 0 behave like 0x2. The
 * first log line says which; test_mode checks that the file, its kernels and the config agree.
 *
 * Every GPU test skip()s when there is no CUDA device (or the build had no nvcc); with
 * VPMM_TEST_REQUIRE_GPU=1 that is a failure instead, for runs on GPU machines; when they all
 * skipped and nothing failed, the program exits 77 (ctest: Skipped). The log is the report: lines
 * start with "[gpu]". Threads: cmocka's asserts run on the main thread only; threads
 * A and B record their first error, and the main thread fails with it after joining them.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "gpu_kernels.h"
#include "gpu_test_util.h"
#include "test_util.h"

#ifdef CUDA_API_PER_THREAD_DEFAULT_STREAM
#define PTDS      1 /* stream 0 is the calling thread's per-thread stream */
#define PROG_NAME "test_gpu_streams_ptds"
#else
#define PTDS      0 /* stream 0 is the legacy default stream */
#define PROG_NAME "test_gpu_streams"
#endif

#define BLOCK   (16 * MiB) /* what A and B each allocate */
#define SPIN_MS 250.0      /* A's kernel holds the block this long after its free */
#define WAIT_S  60         /* a thread waiting longer than this for the other gives up */

/* What the probe sets up for the tests. */
static struct gpu {
    unsigned long long *counters; /* mismatch counters in device memory: [0] A's, [1] B's */
    double cycles_per_ms;         /* gk_spin's clock, measured */
} g;

/*
 * SM clock cycles per millisecond as gk_spin sees them: a spin of ~20 ms at the nominal clock,
 * timed with events (the second of two rounds; the first wakes the clocks up). The attribute alone
 * is the maximum clock, and the spin would be shorter or longer than meant at another one.
 */
static double spin_calibrate(int clock_khz)
{
    const unsigned long long cycles = (unsigned long long)clock_khz * 20;
    cudaStream_t s;
    cudaEvent_t e0, e1;
    float ms = 0;

    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    for (int i = 0; i < 2; i++) {
        CUDA_OK(cudaEventRecord(e0, s));
        GK_OK(gk_spin(s, cycles));
        CUDA_OK(cudaEventRecord(e1, s));
        CUDA_OK(cudaEventSynchronize(e1));
        CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
    }
    CUDA_OK(cudaEventDestroy(e0));
    CUDA_OK(cudaEventDestroy(e1));
    CUDA_OK(cudaStreamDestroy(s));
    assert_true(ms > 0.0f);
    return (double)cycles / ms;
}

/* The probe (gpu_test_util.h): prints the device once, warms the kernels up and times gk_spin. */
static int gpu_probe(char *why, size_t len)
{
    struct cudaDeviceProp prop;
    int clock_khz = 0;
    size_t free_b, total_b;

    if (!gpu_probe_pool(why, len, NULL))
        return 0;
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    CUDA_OK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
    CUDA_OK(cudaMalloc((void **)&g.counters, 2 * sizeof *g.counters));
    /* Warm up: load the kernels now, so module memory is not charged to the first pool. */
    GK_OK(gk_fill(g.counters, 2 * sizeof *g.counters, 1, 0));
    GK_OK(gk_check(g.counters, 2 * sizeof *g.counters, 1, g.counters, 0));
    GK_OK(gk_spin(0, 1000));
    CUDA_OK(cudaDeviceSynchronize());
    g.cycles_per_ms = spin_calibrate(clock_khz);
    CUDA_OK(cudaMemGetInfo(&free_b, &total_b));
    print_message("[gpu] device 0: %s, compute capability %d.%d, %d SMs, %zu MiB free of %zu MiB\n",
                  prop.name, prop.major, prop.minor, prop.multiProcessorCount, free_b / MiB,
                  total_b / MiB);
    print_message("[gpu] spin: %.0f cycles per ms measured (SM clock attribute %d MHz); A's "
                  "kernel spins %.0f ms in each case\n",
                  g.cycles_per_ms, clock_khz / 1000, SPIN_MS);
    return 1;
}

/* Every GPU test starts here: skips without a GPU (fails if one is required). */
#define REQUIRE_GPU() GPU_REQUIRE("[gpu]", gpu_probe)

/* ---- the cases ------------------------------------------------------------------------------- */

typedef enum kind {
    K_CREATED,    /* a stream of its own, made by cudaStreamCreate[WithFlags] */
    K_NULL,       /* 0: the legacy stream, or in the PTDS build the calling thread's stream */
    K_LEGACY,     /* 0x1: VPMM_STREAM_LEGACY = cudaStreamLegacy */
    K_PER_THREAD, /* 0x2: VPMM_STREAM_PER_THREAD = cudaStreamPerThread, the calling thread's */
} kind_t;

typedef struct scase {
    kind_t a, b;
    int blocking; /* created streams by cudaStreamCreate instead of cudaStreamNonBlocking */
    char name[96];
    /* Results, for the summary. */
    int ran, reused;
    uint64_t waits;
    unsigned long long bad_a, bad_b;
} scase_t;

#define NKINDS 4
#define NCASES (NKINDS * NKINDS + 2 * NKINDS - 1) /* the matrix, then its created-stream cases */
static scase_t cases[NCASES];

static const char *kind_name(kind_t k, int blocking)
{
    switch (k) {
    case K_CREATED:
        return blocking ? "created (blocking)" : "created (non-blocking)";
    case K_NULL:
        return PTDS ? "0 (= per-thread)" : "0 (= legacy)";
    case K_LEGACY:
        return "0x1 legacy";
    case K_PER_THREAD:
        return "0x2 per-thread";
    }
    return "?";
}

/* The stream is the legacy default stream (the same one in every thread). */
static int is_legacy(kind_t k)
{
    return k == K_LEGACY || (k == K_NULL && !PTDS);
}

/* The stream synchronises implicitly with the legacy stream: blocking created streams and the
 * per-thread streams do; non-blocking streams do not. */
static int syncs_with_legacy(kind_t k, int blocking)
{
    return k == K_CREATED ? blocking : 1;
}

/* A and B (different threads) name the same stream: only the legacy stream is shared. */
static int same_stream(const scase_t *c)
{
    return is_legacy(c->a) && is_legacy(c->b);
}

/* CUDA itself orders B's work after A's (the legacy stream's implicit synchronisation), so a
 * missing wait in vpmm would go unseen in that case; the log says so. */
static int implicit_sync(const scase_t *c)
{
    return (is_legacy(c->a) && syncs_with_legacy(c->b, c->blocking)) ||
           (is_legacy(c->b) && syncs_with_legacy(c->a, c->blocking));
}

/* The handle a thread passes to vpmm and to the kernels (0x2 is the calling thread's stream). */
static cudaStream_t handle_of(kind_t k, cudaStream_t created)
{
    switch (k) {
    case K_CREATED:
        return created;
    case K_NULL:
        return (cudaStream_t)0;
    case K_LEGACY:
        return cudaStreamLegacy;
    case K_PER_THREAD:
        return cudaStreamPerThread;
    }
    return created;
}

/* ---- helpers --------------------------------------------------------------------------------- */

static vpmm_pool_t *gpu_pool(void)
{
    vpmm_config_t cfg;
    vpmm_pool_t *pool = NULL;
    vpmm_status_t st;
    vpmm_config_init(&cfg); /* vpmm_config_init_per_thread in the PTDS build (vpmm.h) */
    assert_int_equal(cfg.default_stream,
                     PTDS ? VPMM_DEFAULT_STREAM_PER_THREAD : VPMM_DEFAULT_STREAM_UNSET);
    cfg.backend = VPMM_BACKEND_CUDA;
    cfg.ignore_env = 1; /* VPMM_DEFAULT_STREAM must not change what stream 0 means here */
    cfg.va_size = VA_SMALL;
    st = vpmm_pool_create(&cfg, &pool);
    if (st != VPMM_SUCCESS)
        fail_msg("vpmm_pool_create(CUDA, va %zu): %s (%s)", cfg.va_size, vpmm_status_name(st),
                 vpmm_last_error());
    assert_string_equal(vpmm_pool_backend_name(pool), "cuda");
    CHECK_POOL(pool);
    return pool;
}

/* Destroys the pool after the device is idle; the device must get its memory back (quietly: the
 * case has printed its line). */
static void gpu_pool_close(vpmm_pool_t *pool, size_t free_before)
{
    size_t after;
    CUDA_OK(cudaDeviceSynchronize());
    CHECK_POOL(pool);
    assert_int_equal(vpmm_pool_destroy(pool), VPMM_SUCCESS);
    CUDA_OK(cudaDeviceSynchronize());
    after = gpu_device_free();
    if (after + MEM_SLACK < free_before)
        fail_msg("the pool is gone but not its memory: device free memory %zu MiB before the pool, "
                 "%zu MiB after",
                 free_before / MiB, after / MiB);
}

/* ---- the two threads ------------------------------------------------------------------------- */

enum { WHO_A = 0, WHO_B = 1 };

/* What threads A and B share. Phases: 0 start; 1 A enqueued its kernels and freed its block;
 * 2 B allocated and enqueued its fill. `failed` stops every wait. */
typedef struct run {
    vpmm_pool_t *pool;
    cudaStream_t sa, sb; /* the handles as passed (0x2 means the calling thread's stream) */
    uint32_t seed_a, seed_b;
    unsigned long long spin_cycles;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int phase, failed;
    char err[2][320]; /* first error of A, of B */
    /* A's results */
    void *a_ptr;
    cudaError_t a_busy; /* cudaStreamQuery(SA) once B has enqueued: cudaErrorNotReady */
    double a_ms;        /* from A's first launch until SA is done */
    /* B's results */
    void *b_ptr;
    double b_malloc_ms;
    vpmm_stats_t b_before, b_after; /* around B's vpmm_malloc */
    size_t b_violations;            /* vpmm_pool_check right after B's malloc */
} run_t;

static void run_fail(run_t *r, int who, const char *fmt, ...)
{
    va_list ap;
    pthread_mutex_lock(&r->mu);
    if (r->err[who][0] == '\0') {
        va_start(ap, fmt);
        vsnprintf(r->err[who], sizeof r->err[who], fmt, ap);
        va_end(ap);
    }
    r->failed = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

#define T_FAIL(r, who, ...)                                                                        \
    do {                                                                                           \
        run_fail((r), (who), __VA_ARGS__);                                                         \
        goto out;                                                                                  \
    } while (0)

#define T_CUDA(r, who, expr)                                                                       \
    do {                                                                                           \
        cudaError_t e_ = (expr);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            T_FAIL(r, who, "%s: %s (%d)", #expr, cudaGetErrorString(e_), (int)e_);                 \
    } while (0)

#define T_GK(r, who, expr) T_CUDA(r, who, (cudaError_t)(expr))

#define T_VPMM(r, who, expr)                                                                       \
    do {                                                                                           \
        vpmm_status_t s_ = (expr);                                                                 \
        if (s_ != VPMM_SUCCESS)                                                                    \
            T_FAIL(r, who, "%s: %s (%s)", #expr, vpmm_status_name(s_), vpmm_last_error());         \
    } while (0)

static void set_phase(run_t *r, int phase)
{
    pthread_mutex_lock(&r->mu);
    r->phase = phase;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* Waits until the phase reaches `want`: 1; 0 if the other thread failed or WAIT_S passed. */
static int wait_phase(run_t *r, int who, int want)
{
    struct timespec until;
    int rc = 0, ok;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += WAIT_S;
    pthread_mutex_lock(&r->mu);
    while (r->phase < want && !r->failed && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&r->cv, &r->mu, &until);
    ok = r->phase >= want;
    pthread_mutex_unlock(&r->mu);
    if (!ok && rc == ETIMEDOUT)
        run_fail(r, who, "waited %d s for phase %d in vain (a hang)", WAIT_S, want);
    return ok;
}

/* Thread A: allocate, fill, spin, check (all on SA), free at once; then wait for SA. */
static void *thread_a(void *arg)
{
    run_t *r = arg;
    void *x = NULL;
    double t0;

    T_CUDA(r, WHO_A, cudaSetDevice(0));
    T_VPMM(r, WHO_A, vpmm_malloc(r->pool, BLOCK, r->sa, &x));
    r->a_ptr = x;
    t0 = gpu_now_s();
    T_GK(r, WHO_A, gk_fill(x, BLOCK, r->seed_a, r->sa));
    T_GK(r, WHO_A, gk_spin(r->sa, r->spin_cycles));
    T_GK(r, WHO_A, gk_check(x, BLOCK, r->seed_a, &g.counters[0], r->sa));
    /* Stream-ordered: legal now, while the kernels above still use the block. */
    T_VPMM(r, WHO_A, vpmm_free(r->pool, x));
    set_phase(r, 1);
    if (!wait_phase(r, WHO_A, 2))
        goto out;
    /* B's malloc and fill came before this: if SA is still busy, they came while A's check had
     * not yet run. */
    r->a_busy = cudaStreamQuery(r->sa);
    if (r->a_busy != cudaSuccess && r->a_busy != cudaErrorNotReady)
        T_FAIL(r, WHO_A, "cudaStreamQuery(SA): %s (%d)", cudaGetErrorString(r->a_busy),
               (int)r->a_busy);
    T_CUDA(r, WHO_A, cudaStreamSynchronize(r->sa));
    r->a_ms = (gpu_now_s() - t0) * 1e3;
out:
    return NULL;
}

/* Thread B: once A has freed, allocate the same size on SB, fill and check it, signal, free. */
static void *thread_b(void *arg)
{
    run_t *r = arg;
    void *y = NULL;
    double t0;

    T_CUDA(r, WHO_B, cudaSetDevice(0));
    if (!wait_phase(r, WHO_B, 1))
        goto out;
    T_VPMM(r, WHO_B, vpmm_get_stats(r->pool, &r->b_before));
    t0 = gpu_now_s();
    T_VPMM(r, WHO_B, vpmm_malloc(r->pool, BLOCK, r->sb, &y));
    r->b_malloc_ms = (gpu_now_s() - t0) * 1e3;
    r->b_ptr = y;
    T_VPMM(r, WHO_B, vpmm_get_stats(r->pool, &r->b_after));
    r->b_violations = vpmm_pool_check(r->pool, stderr);
    T_GK(r, WHO_B, gk_fill(y, BLOCK, r->seed_b, r->sb));
    T_GK(r, WHO_B, gk_check(y, BLOCK, r->seed_b, &g.counters[1], r->sb));
    set_phase(r, 2);
    T_VPMM(r, WHO_B, vpmm_free(r->pool, y));
    /* Before the thread (and with it its per-thread stream) ends. */
    T_CUDA(r, WHO_B, cudaStreamSynchronize(r->sb));
out:
    return NULL;
}

/* ---- tests ----------------------------------------------------------------------------------- */

/*
 * What stream 0 means in this program, for the three parts that must agree on it: this file (the
 * CUDA runtime's calls), its kernels (gpu_kernels.cu's copy) and vpmm (vpmm_config_init). Host
 * only: it runs without a GPU too.
 */
static void test_mode(void **state)
{
    vpmm_config_t cfg;
    (void)state;
    assert_ptr_equal(cudaStreamLegacy, VPMM_STREAM_LEGACY);
    assert_ptr_equal(cudaStreamPerThread, VPMM_STREAM_PER_THREAD);
    assert_int_equal(vpmm_config_init(&cfg), VPMM_SUCCESS);
    assert_int_equal(cfg.default_stream,
                     PTDS ? VPMM_DEFAULT_STREAM_PER_THREAD : VPMM_DEFAULT_STREAM_UNSET);
    assert_int_equal(vpmm_config_init_per_thread(&cfg), VPMM_SUCCESS);
    assert_int_equal(cfg.default_stream, VPMM_DEFAULT_STREAM_PER_THREAD);
#ifdef VPMM_HAVE_KERNELS
    assert_int_equal(gk_per_thread_default_stream(), PTDS);
    print_message(
        "[gpu] mode: this file, its kernels and vpmm_config_init all take stream 0 as %s\n",
        PTDS ? "the calling thread's per-thread stream" : "the legacy default stream");
#else
    print_message("[gpu] mode: this file and vpmm_config_init take stream 0 as %s (no kernels)\n",
                  PTDS ? "the calling thread's per-thread stream" : "the legacy default stream");
#endif
}

/* One case: see the head comment. *state is its scase_t. */
static void test_case(void **state)
{
    scase_t *c = *state;
    const int idx = (int)(c - cases);
    cudaStream_t created_a = NULL, created_b = NULL;
    pthread_t ta, tb;
    vpmm_pool_t *pool;
    vpmm_stats_t s;
    unsigned long long bad[2] = { 0, 0 };
    size_t free0;
    uint64_t waits;
    int reused, same;
    run_t r;
    REQUIRE_GPU();

    free0 = gpu_device_free();
    if (c->a == K_CREATED)
        created_a = gpu_stream_new(c->blocking);
    if (c->b == K_CREATED)
        created_b = gpu_stream_new(c->blocking);
    pool = gpu_pool();
    CUDA_OK(cudaMemset(g.counters, 0, 2 * sizeof *g.counters));
    CUDA_OK(cudaDeviceSynchronize());

    memset(&r, 0, sizeof r);
    r.pool = pool;
    r.sa = handle_of(c->a, created_a);
    r.sb = handle_of(c->b, created_b);
    r.seed_a = 0xA000u + (uint32_t)idx;
    r.seed_b = 0xB000u + (uint32_t)idx;
    r.spin_cycles = (unsigned long long)(SPIN_MS * g.cycles_per_ms);
    r.a_busy = cudaSuccess;
    assert_int_equal(pthread_mutex_init(&r.mu, NULL), 0);
    assert_int_equal(pthread_cond_init(&r.cv, NULL), 0);
    assert_int_equal(pthread_create(&tb, NULL, thread_b, &r), 0);
    if (pthread_create(&ta, NULL, thread_a, &r) != 0) {
        run_fail(&r, WHO_A, "pthread_create failed"); /* B must not outlive r */
        pthread_join(tb, NULL);
        fail_msg("%s: could not start thread A", c->name);
    }
    assert_int_equal(pthread_join(ta, NULL), 0);
    assert_int_equal(pthread_join(tb, NULL), 0);
    pthread_cond_destroy(&r.cv);
    pthread_mutex_destroy(&r.mu);
    if (r.err[WHO_A][0] != '\0' || r.err[WHO_B][0] != '\0')
        fail_msg("%s: thread A: %s; thread B: %s", c->name, r.err[WHO_A][0] ? r.err[WHO_A] : "ok",
                 r.err[WHO_B][0] ? r.err[WHO_B] : "ok");

    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(bad, g.counters, sizeof bad, cudaMemcpyDeviceToHost));
    CHECK_POOL(pool);
    s = tstats(pool);
    same = r.a_ptr == r.b_ptr;
    reused = gpu_overlaps(r.a_ptr, BLOCK, r.b_ptr, BLOCK);
    waits = r.b_after.cross_stream_waits - r.b_before.cross_stream_waits;
    print_message("[gpu] A %s -> B %s: B got %s, %" PRIu64 " cross-stream wait(s), %" PRIu64
                  " page(s) remapped; B's malloc %.3f ms while SA %s; A's check: %llu mismatching "
                  "words, B's: %llu; A's kernels %.0f ms; %s%s\n",
                  kind_name(c->a, c->blocking), kind_name(c->b, c->blocking),
                  same     ? "A's address"
                  : reused ? "memory overlapping A's block"
                           : "other memory",
                  waits, r.b_after.pages_remapped - r.b_before.pages_remapped, r.b_malloc_ms,
                  r.a_busy == cudaErrorNotReady ? "still busy" : "already idle", bad[0], bad[1],
                  r.a_ms, same_stream(c) ? "one stream (the legacy stream)" : "two streams",
                  implicit_sync(c) ? ", ordered implicitly by CUDA too" : "");
    c->ran = 1;
    c->reused = reused;
    c->waits = waits;
    c->bad_a = bad[0];
    c->bad_b = bad[1];

    assert_int_equal(r.b_violations, 0);
    assert_int_equal(r.a_busy, cudaErrorNotReady); /* otherwise the case proved nothing */
    assert_int_equal(bad[0], 0);                   /* the requirement: A's block held still */
    assert_int_equal(bad[1], 0);
    /* Reusing a block of another stream whose work is pending needs a GPU-side wait. In the PTDS
     * build this is where a pool that took stream 0 for the legacy stream would fail (as would
     * A's check): thread A's 0 and thread B's 0 are two streams there. */
    if (reused && !same_stream(c))
        assert_true(waits > 0);
    assert_int_equal(s.live_allocs, 0);

    if (created_a != NULL)
        gpu_stream_done(pool, created_a);
    if (created_b != NULL)
        gpu_stream_done(pool, created_b);
    gpu_pool_close(pool, free0);
}

/* Prints what the cases found, then frees the device-side counters. */
static int gpu_teardown(void **state)
{
    int n = 0, reused = 0;
    unsigned long long bad = 0;
    (void)state;
    for (int i = 0; i < NCASES; i++) {
        if (!cases[i].ran)
            continue;
        n++;
        reused += cases[i].reused;
        bad += cases[i].bad_a + cases[i].bad_b;
    }
    if (n > 0)
        print_message("[gpu] %s: %d of %d cases ran; B got A's memory in %d; %llu mismatching "
                      "words in all\n",
                      PROG_NAME, n, NCASES, reused, bad);
    if (g.counters != NULL)
        cudaFree(g.counters);
    g.counters = NULL;
    return 0;
}

int main(void)
{
    static const kind_t as[NKINDS] = { K_CREATED, K_NULL, K_LEGACY, K_PER_THREAD };
    static const kind_t bs[NKINDS] = { K_CREATED, K_LEGACY, K_PER_THREAD, K_NULL };
    static struct CMUnitTest tests[1 + NCASES];
    int n = 0, rc;

    for (int blocking = 0; blocking <= 1; blocking++) {
        for (int i = 0; i < NKINDS; i++) {
            for (int j = 0; j < NKINDS; j++) {
                scase_t *c = &cases[n];
                if (blocking && as[i] != K_CREATED && bs[j] != K_CREATED)
                    continue;
                c->a = as[i];
                c->b = bs[j];
                c->blocking = blocking;
                snprintf(c->name, sizeof c->name, "A %s, B %s", kind_name(c->a, blocking),
                         kind_name(c->b, blocking));
                tests[1 + n] = (struct CMUnitTest){ c->name, test_case, NULL, NULL, c };
                n++;
            }
        }
    }
    if (n != NCASES) {
        fprintf(stderr, "%s: %d cases built, %d expected\n", PROG_NAME, n, NCASES);
        return 1;
    }
    tests[0] = (struct CMUnitTest){ "test_mode", test_mode, NULL, NULL, NULL };
    print_message("[gpu] %s: stream 0 is %s\n", PROG_NAME,
                  PTDS ? "the calling thread's per-thread stream (built with "
                         "CUDA_API_PER_THREAD_DEFAULT_STREAM, kernels with nvcc --default-stream "
                         "per-thread, pools with vpmm_config_init_per_thread)"
                       : "the legacy default stream (nvcc's default; pools with vpmm_config_init, "
                         "default_stream UNSET = legacy)");
    rc = cmocka_run_group_tests_name(PROG_NAME, tests, NULL, gpu_teardown);
    return gpu_exit_status(rc); /* 77 (ctest: Skipped) when nothing failed but every case skipped */
}
