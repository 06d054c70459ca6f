/*
 * test_gpu.c — vpmm on a real GPU: pools on the CUDA backend, with kernels (gpu_kernels.cu)
 * writing a seeded pattern into every allocation and checking it, so a wrong mapping, a missing
 * GPU-side wait or a remap that loses data shows up as mismatching words, not as a guess.
 *
 * Scenarios: the kernels' own self-test; basic sizes; the seed walkthrough (docs/ALGORITHM.md) with
 * 2 MiB pages, compared with the host emulation; data integrity across a defragmentation; reuse
 * and defragmentation across two streams while the first is still busy (and no host sync on the
 * malloc path); a seeded random stress over 4 streams; out of device memory. Every pool is
 * checked with vpmm_pool_check after every operation, destroyed at the end, and the device's free
 * memory must come back. The log is the report: lines start with "[gpu]".
 *
 * Every test skip()s when there is no CUDA device (or the build had no nvcc), and the program then
 * exits 77 (ctest: Skipped); with VPMM_TEST_REQUIRE_GPU=1 that is a failure instead, for runs on
 * GPU machines. The stress test's
 * sequence comes from VPMM_TEST_SEED (default 20240611, printed). Single-threaded.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "gpu_kernels.h"
#include "gpu_test_util.h"
#include "test_util.h"

#define NCOUNTERS 16

/* What the probe sets up for the tests. */
static struct gpu {
    unsigned long long *counters; /* NCOUNTERS mismatch counters in device memory */
    int clock_khz;                /* SM clock: cycles per millisecond for gk_spin */
} g;

static unsigned long long spin_cycles(double ms)
{
    return (unsigned long long)(ms * g.clock_khz);
}

/* The probe (gpu_test_util.h): prints the device once, warms the kernels up. */
static int gpu_probe(char *why, size_t len)
{
    struct cudaDeviceProp prop;
    int drv = 0, rt = 0;
    size_t free_b, total_b, page_size = 0;

    if (!gpu_probe_pool(why, len, &page_size))
        return 0;
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    CUDA_OK(cudaDriverGetVersion(&drv));
    CUDA_OK(cudaRuntimeGetVersion(&rt));
    CUDA_OK(cudaDeviceGetAttribute(&g.clock_khz, cudaDevAttrClockRate, 0));
    CUDA_OK(cudaMalloc((void **)&g.counters, NCOUNTERS * sizeof *g.counters));
    /* Warm up: load the kernels now, so module memory is not charged to the first pool. */
    GK_OK(gk_fill(g.counters, NCOUNTERS * sizeof *g.counters, 1, 0));
    GK_OK(gk_check(g.counters, NCOUNTERS * sizeof *g.counters, 1, g.counters, 0));
    GK_OK(gk_spin(0, 1000));
    CUDA_OK(cudaMemset(g.counters, 0, NCOUNTERS * sizeof *g.counters));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemGetInfo(&free_b, &total_b));
    print_message("[gpu] device 0: %s, compute capability %d.%d, %d SMs, SM clock %d MHz\n",
                  prop.name, prop.major, prop.minor, prop.multiProcessorCount, g.clock_khz / 1000);
    print_message("[gpu] memory %zu MiB total, %zu MiB free; driver for CUDA %d.%d, runtime %d.%d; "
                  "VMM granularity %zu KiB\n",
                  total_b / MiB, free_b / MiB, drv / 1000, drv % 1000 / 10, rt / 1000,
                  rt % 1000 / 10, page_size / KiB);
    return 1;
}

/* Every test starts here: skips without a GPU (fails if one is required). */
#define REQUIRE_GPU() GPU_REQUIRE("[gpu]", gpu_probe)

/* ---- helpers --------------------------------------------------------------------------------- */

static vpmm_pool_t *gpu_pool(size_t page, size_t va, size_t prealloc)
{
    vpmm_config_t cfg;
    vpmm_pool_t *pool = NULL;
    vpmm_status_t st;
    vpmm_config_init(&cfg);
    cfg.backend = VPMM_BACKEND_CUDA;
    cfg.ignore_env = 1;
    cfg.page_size = page;
    cfg.va_size = va;
    cfg.prealloc_pages = prealloc;
    st = vpmm_pool_create(&cfg, &pool);
    if (st != VPMM_SUCCESS)
        fail_msg("vpmm_pool_create(CUDA, page %zu, va %zu, prealloc %zu): %s (%s)", page, va,
                 prealloc, vpmm_status_name(st), vpmm_last_error());
    assert_string_equal(vpmm_pool_backend_name(pool), "cuda");
    CHECK_POOL(pool);
    return pool;
}

/* Destroys the pool; the device must get its memory back (free_before: before the pool). */
static void gpu_pool_close(vpmm_pool_t *pool, size_t free_before)
{
    size_t after;
    CHECK_POOL(pool);
    assert_int_equal(vpmm_pool_destroy(pool), VPMM_SUCCESS);
    CUDA_OK(cudaDeviceSynchronize());
    after = gpu_device_free();
    print_message("[gpu]   destroyed; device free memory %zu MiB before the pool, %zu MiB after\n",
                  free_before / MiB, after / MiB);
    assert_true(after + MEM_SLACK >= free_before);
}

static void fill(void *p, size_t n, uint32_t seed, cudaStream_t s)
{
    GK_OK(gk_fill(p, n, seed, s));
}

/* Enqueues a check of [p, p+n) on s that adds its mismatches to counter c (read later). */
static void check_into(const void *p, size_t n, uint32_t seed, cudaStream_t s, int c)
{
    GK_OK(gk_check(p, n, seed, &g.counters[c], s));
}

/* Zeroes counter c (synchronously). */
static void counter_reset(int c)
{
    CUDA_OK(cudaMemset(&g.counters[c], 0, sizeof *g.counters));
    CUDA_OK(cudaDeviceSynchronize());
}

/* Waits for the whole device, then reads counter c. */
static unsigned long long counter_read(int c)
{
    unsigned long long v = 0;
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(&v, &g.counters[c], sizeof v, cudaMemcpyDeviceToHost));
    return v;
}

/* Checks [p, p+n) on s now: returns the mismatches (uses counter NCOUNTERS-1). */
static unsigned long long check_now(const void *p, size_t n, uint32_t seed, cudaStream_t s)
{
    unsigned long long v = 0;
    const int c = NCOUNTERS - 1;
    CUDA_OK(cudaMemsetAsync(&g.counters[c], 0, sizeof v, s));
    check_into(p, n, seed, s, c);
    CUDA_OK(cudaMemcpyAsync(&v, &g.counters[c], sizeof v, cudaMemcpyDeviceToHost, s));
    CUDA_OK(cudaStreamSynchronize(s));
    return v;
}

static void print_stats(const char *label, const vpmm_stats_t *s)
{
    print_message("[gpu]   %s: live %zu KiB in %" PRIu64 " allocs, mapped %zu MiB (peak %zu), "
                  "free %zu KiB, zombie %zu MiB, holes %zu MiB, VA %zu GiB in %" PRIu64
                  " chunk(s)\n",
                  label, s->live_bytes / KiB, s->live_allocs, s->mapped_bytes / MiB,
                  s->peak_mapped_bytes / MiB, s->free_bytes / KiB, s->zombie_bytes / MiB,
                  s->hole_bytes / MiB, s->reserved_va_bytes / GiB, s->va_chunks);
    print_message("[gpu]   %s: %" PRIu64 " mallocs, %" PRIu64 " frees, %" PRIu64 " grows, %" PRIu64
                  " pages created, %" PRIu64 " defrags, %" PRIu64 " pages remapped, %" PRIu64
                  " cross-stream waits, %" PRIu64 " OOMs\n",
                  label, s->mallocs, s->frees, s->grows, s->pages_created, s->defrags,
                  s->pages_remapped, s->cross_stream_waits, s->ooms);
}

/* The accounting equations every snapshot must satisfy (pool.h I4, I5). */
static void assert_stats_sane(const vpmm_stats_t *s)
{
    assert_int_equal(s->mapped_bytes % s->page_size, 0);
    assert_int_equal(s->mapped_bytes, s->allocated_bytes + s->free_bytes);
    assert_int_equal(s->reserved_va_bytes,
                     s->allocated_bytes + s->free_bytes + s->hole_bytes + s->zombie_bytes);
    assert_true(s->live_bytes <= s->allocated_bytes);
    assert_true(s->peak_live_bytes >= s->live_bytes);
    assert_true(s->peak_mapped_bytes >= s->mapped_bytes);
    assert_true(s->mallocs >= s->frees);
    assert_int_equal(s->live_allocs, s->mallocs - s->frees);
}

/* A compact picture of the regions: "A0:4 F4:6 Z.. H22:*" in units of `unit` bytes; '*' is the
 * rest of a chunk. R = free and ready, F = free pending on its stream. Chunks after the first are
 * prefixed "c<index>/". */
typedef struct layout {
    char text[4096];
    size_t len, unit, va;
} layout_t;

static int layout_add(const vpmm_region_info_t *r, void *user)
{
    layout_t *l = user;
    char st = '?', prefix[16] = "";
    size_t off = (r->addr - r->chunk_base) / l->unit;
    if (r->state <= VPMM_REGION_ZOMBIE)
        st = r->state == VPMM_REGION_FREE && r->ready ? 'R' : "AFHZ"[r->state];
    if (r->chunk != 0)
        snprintf(prefix, sizeof prefix, "c%u/", r->chunk);
    if (l->len + 64 >= sizeof l->text)
        return 1;
    if (r->state == VPMM_REGION_HOLE && r->addr + r->size == r->chunk_base + l->va)
        l->len += (size_t)snprintf(l->text + l->len, sizeof l->text - l->len, "%s%s%c%zu:*",
                                   l->len ? " " : "", prefix, st, off);
    else
        l->len += (size_t)snprintf(l->text + l->len, sizeof l->text - l->len, "%s%s%c%zu:%zu",
                                   l->len ? " " : "", prefix, st, off, r->size / l->unit);
    return 0;
}

static void layout_of(vpmm_pool_t *pool, size_t unit, size_t va, layout_t *l)
{
    memset(l, 0, sizeof *l);
    l->unit = unit;
    l->va = va;
    assert_int_equal(vpmm_pool_walk(pool, layout_add, l), VPMM_SUCCESS);
}

/* Finds the region starting at `addr`. */
typedef struct region_find {
    uintptr_t addr;
    vpmm_region_info_t info;
    int found;
} region_find_t;

static int find_visit(const vpmm_region_info_t *r, void *user)
{
    region_find_t *f = user;
    if (r->addr != f->addr)
        return 0;
    f->info = *r;
    f->found = 1;
    return 1;
}

static void assert_allocated_at(vpmm_pool_t *pool, void *p, size_t requested)
{
    region_find_t f = { (uintptr_t)p, { 0 }, 0 };
    assert_int_equal(vpmm_pool_walk(pool, find_visit, &f), VPMM_SUCCESS);
    assert_true(f.found);
    assert_int_equal(f.info.state, VPMM_REGION_ALLOCATED);
    assert_int_equal(f.info.requested, requested);
}

/* Largest FREE region and the number of fully free pages over all FREE regions. */
typedef struct free_scan {
    size_t page, largest, full_pages;
} free_scan_t;

static int free_visit(const vpmm_region_info_t *r, void *user)
{
    free_scan_t *f = user;
    if (r->state != VPMM_REGION_FREE)
        return 0;
    uintptr_t lo = (r->addr + f->page - 1) / f->page * f->page;
    uintptr_t hi = (r->addr + r->size) / f->page * f->page;
    if (r->size > f->largest)
        f->largest = r->size;
    if (hi > lo)
        f->full_pages += (hi - lo) / f->page;
    return 0;
}

/* ---- 0: the kernels themselves --------------------------------------------------------------- */

/*
 * gk_fill writes exactly [p, p+n) with the pattern the host computes (any length, any alignment),
 * gk_check finds 0 mismatches on it, many with another seed, and exactly 1 after one byte changes.
 */
static void test_kernels_selftest(void **state)
{
    static const size_t lens[] = { 1, 3, 4, 5, 15, 16, 17, 31, 33, 4099, MiB + 13 };
    static const size_t offs[] = { 0, 1, 4, 8, 12 };
    const size_t cap = MiB + 64;
    uint8_t *d = NULL, *h;
    size_t cases = 0;
    (void)state;
    REQUIRE_GPU();

    CUDA_OK(cudaMalloc((void **)&d, cap));
    h = malloc(cap);
    assert_non_null(h);
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        for (size_t k = 0; k < sizeof offs / sizeof offs[0]; k++) {
            const size_t n = lens[i], off = offs[k];
            const uint32_t seed = (uint32_t)(i * 31 + k + 7);
            size_t bad = 0, mid = off + n / 2;
            uint8_t flip;
            if (off + n > cap)
                continue;
            CUDA_OK(cudaMemset(d, 0xA5, cap));
            fill(d + off, n, seed, 0);
            CUDA_OK(cudaMemcpy(h, d, cap, cudaMemcpyDeviceToHost));
            for (size_t j = 0; j < cap; j++) {
                uint8_t want = j >= off && j < off + n ? gk_pattern_byte(seed, j - off) : 0xA5;
                bad += h[j] != want;
            }
            if (bad != 0)
                fail_msg("gk_fill(len %zu, offset %zu): %zu bytes differ from the host pattern", n,
                         off, bad);
            assert_int_equal(check_now(d + off, n, seed, 0), 0);
            if (n >= 16)
                assert_true(check_now(d + off, n, seed ^ 0x5bd1e995u, 0) > 0);
            flip = (uint8_t)~h[mid];
            CUDA_OK(cudaMemset(d + mid, flip, 1));
            assert_int_equal(check_now(d + off, n, seed, 0), 1);
            cases++;
        }
    }
    free(h);
    CUDA_OK(cudaFree(d));
    print_message("[gpu] kernels: fill/check agree with the host pattern in %zu length/offset "
                  "cases (unaligned heads and tails included)\n",
                  cases);
}

/* ---- 1: basic -------------------------------------------------------------------------------- */

static void test_basic(void **state)
{
    static const size_t sizes[] = { 256, 3 * KiB, MiB, 2 * MiB, 2 * MiB + 1, 37 * MiB };
    enum { N = sizeof sizes / sizeof sizes[0] };
    void *p[N];
    size_t live = 0, alloc = 0, free0;
    vpmm_pool_t *pool;
    vpmm_stats_t s;
    cudaStream_t st;
    (void)state;
    REQUIRE_GPU();

    free0 = gpu_device_free();
    st = gpu_stream_new(0);
    pool = gpu_pool(0, VA_SMALL, 0);
    for (size_t i = 0; i < N; i++) {
        p[i] = tmalloc(pool, sizes[i], st);
        assert_int_equal((uintptr_t)p[i] % VPMM_ALIGNMENT, 0);
        for (size_t j = 0; j < i; j++)
            assert_false(gpu_overlaps(p[i], sizes[i], p[j], sizes[j]));
        fill(p[i], sizes[i], (uint32_t)(100 + i), st);
        live += sizes[i];
        alloc += (sizes[i] + VPMM_ALIGNMENT - 1) / VPMM_ALIGNMENT * VPMM_ALIGNMENT;
        s = tstats(pool);
        assert_stats_sane(&s);
        assert_int_equal(s.live_bytes, live);
        assert_int_equal(s.allocated_bytes, alloc);
        assert_int_equal(s.live_allocs, i + 1);
    }
    /* All filled before any is checked: an overlap would show as mismatches. */
    for (size_t i = 0; i < N; i++)
        assert_int_equal(check_now(p[i], sizes[i], (uint32_t)(100 + i), st), 0);
    s = tstats(pool);
    print_stats("6 sizes live", &s);
    assert_true(s.mapped_bytes >= alloc);
    assert_true(s.mapped_bytes <= alloc + N * s.page_size);
    for (size_t i = 0; i < N; i++) {
        tfree(pool, p[i]);
        s = tstats(pool);
        assert_stats_sane(&s);
    }
    s = tstats(pool);
    assert_int_equal(s.live_bytes, 0);
    assert_int_equal(s.allocated_bytes, 0);
    assert_int_equal(s.live_allocs, 0);
    assert_int_equal(s.mallocs, N);
    assert_int_equal(s.frees, N);
    gpu_stream_done(pool, st);
    gpu_pool_close(pool, free0);
}

/* ---- 2: the seed walkthrough with 2 MiB pages ------------------------------------------------ */

typedef struct seed_case {
    const char *name;
    size_t prealloc, mapped_after, ptr4, max_remapped; /* pages; ALGORITHM.md's table */
} seed_case_t;

static const seed_case_t seed_cases[] = {
    { "A", 22, 22, 0, 0 }, { "B", 18, 18, 11, 11 },      { "C", 15, 16, 11, 10 },
    { "D", 12, 16, 0, 6 }, { "on-demand", 0, 16, 0, 6 },
};

/* What a walkthrough produced, for comparing the CUDA backend with the host emulation. */
typedef struct seed_result {
    size_t mapped, off4, off11;
    uint64_t remapped;
    layout_t layout;
} seed_result_t;

static void seed_on_host(const seed_case_t *c, size_t pg, vpmm_stream_t s, seed_result_t *out)
{
    vpmm_config_t cfg;
    vpmm_pool_t *pool = NULL;
    vpmm_stats_t st;
    void *p10, *p1, *p4, *p11;
    vpmm_config_init(&cfg);
    cfg.backend = VPMM_BACKEND_HOST;
    cfg.ignore_env = 1;
    cfg.page_size = pg;
    cfg.va_size = VA_SMALL;
    cfg.prealloc_pages = c->prealloc;
    assert_int_equal(vpmm_pool_create(&cfg, &pool), VPMM_SUCCESS);
    /* The host backend takes any value as a stream: the same handle keeps the same decisions. */
    p10 = tmalloc(pool, 10 * pg, s);
    p1 = tmalloc(pool, pg, s);
    tfree(pool, p10);
    p4 = tmalloc(pool, 4 * pg, s);
    p11 = tmalloc(pool, 11 * pg, s);
    st = tstats(pool);
    out->mapped = st.mapped_bytes / pg;
    out->remapped = st.pages_remapped;
    out->off4 = toff(pool, p4) / pg;
    out->off11 = toff(pool, p11) / pg;
    layout_of(pool, pg, VA_SMALL, &out->layout);
    tfree(pool, p1);
    tfree(pool, p4);
    tfree(pool, p11);
    assert_int_equal(vpmm_pool_destroy(pool), VPMM_SUCCESS);
}

static void run_seed_case(const seed_case_t *c)
{
    vpmm_pool_t *pool;
    vpmm_stats_t s;
    seed_result_t gpu, host;
    cudaStream_t st;
    void *p10, *p1, *p4, *p11;
    size_t pg, free0;

    free0 = gpu_device_free();
    st = gpu_stream_new(0);
    pool = gpu_pool(0, VA_SMALL, c->prealloc);
    pg = tstats(pool).page_size;

    p10 = tmalloc(pool, 10 * pg, st);
    p1 = tmalloc(pool, pg, st);
    assert_int_equal(toff(pool, p10), 0);
    assert_int_equal(toff(pool, p1), 10 * pg);
    fill(p10, 10 * pg, 10, st);
    tfree(pool, p10);
    p4 = tmalloc(pool, 4 * pg, st);
    assert_int_equal(toff(pool, p4), c->ptr4 * pg);
    /* Data written before the defragmentation ... */
    fill(p1, pg, 1, st);
    fill(p4, 4 * pg, 4, st);
    p11 = tmalloc(pool, 11 * pg, st);
    s = tstats(pool);
    assert_stats_sane(&s);
    /* ... is still there, at the same addresses, */
    assert_allocated_at(pool, p1, pg);
    assert_allocated_at(pool, p4, 4 * pg);
    assert_int_equal(check_now(p1, pg, 1, st), 0);
    assert_int_equal(check_now(p4, 4 * pg, 4, st), 0);
    /* and the +11, made of remapped pages, holds what is written through its new addresses
     * without touching the others. */
    fill(p11, 11 * pg, 11, st);
    assert_int_equal(check_now(p11, 11 * pg, 11, st), 0);
    assert_int_equal(check_now(p1, pg, 1, st), 0);
    assert_int_equal(check_now(p4, 4 * pg, 4, st), 0);

    gpu.mapped = s.mapped_bytes / pg;
    gpu.remapped = s.pages_remapped;
    gpu.off4 = toff(pool, p4) / pg;
    gpu.off11 = toff(pool, p11) / pg;
    layout_of(pool, pg, VA_SMALL, &gpu.layout);
    seed_on_host(c, pg, st, &host);
    print_message("[gpu] seed case %-9s P=%-2zu mapped %zu pages, +4 at %zu, +11 at %zu, remapped "
                  "%" PRIu64 " (reference <= %zu): %s\n",
                  c->name, c->prealloc, gpu.mapped, gpu.off4, gpu.off11, gpu.remapped,
                  c->max_remapped, gpu.layout.text);
    if (strcmp(gpu.layout.text, host.layout.text) != 0)
        print_message("[gpu]   the host emulation gave: %s\n", host.layout.text);

    /* The seed's binding figures. */
    assert_int_equal(gpu.mapped, c->mapped_after);
    assert_true(s.peak_mapped_bytes <= c->mapped_after * pg);
    assert_int_equal(gpu.off4, c->ptr4);
    assert_true(gpu.remapped <= c->max_remapped);
    assert_int_equal(s.live_bytes, 16 * pg);
    /* The CUDA backend decides exactly as the emulation the design is tested on. */
    assert_int_equal(gpu.mapped, host.mapped);
    assert_int_equal(gpu.off11, host.off11);
    assert_int_equal(gpu.remapped, host.remapped);
    assert_string_equal(gpu.layout.text, host.layout.text);

    tfree(pool, p1);
    tfree(pool, p4);
    tfree(pool, p11);
    gpu_stream_done(pool, st);
    gpu_pool_close(pool, free0);
}

static void test_seed_case_a(void **state)
{
    (void)state;
    REQUIRE_GPU();
    run_seed_case(&seed_cases[0]);
}

static void test_seed_case_b(void **state)
{
    (void)state;
    REQUIRE_GPU();
    run_seed_case(&seed_cases[1]);
}

static void test_seed_case_c(void **state)
{
    (void)state;
    REQUIRE_GPU();
    run_seed_case(&seed_cases[2]);
}

static void test_seed_case_d(void **state)
{
    (void)state;
    REQUIRE_GPU();
    run_seed_case(&seed_cases[3]);
}

static void test_seed_on_demand(void **state)
{
    (void)state;
    REQUIRE_GPU();
    run_seed_case(&seed_cases[4]);
}

/* ---- 3: data integrity across a defragmentation ---------------------------------------------- */

static void test_integrity_under_remap(void **state)
{
    enum { N = 96 };
    void *p[N];
    size_t sz[N], pg, free0, want;
    vpmm_pool_t *pool;
    vpmm_stats_t s0, s1;
    free_scan_t fs;
    trng_t r = { 0x9E3779B97F4A7C15ull };
    cudaStream_t st;
    void *big;
    (void)state;
    REQUIRE_GPU();

    free0 = gpu_device_free();
    st = gpu_stream_new(0);
    pool = gpu_pool(0, VA_SMALL, 0);
    pg = tstats(pool).page_size;
    for (int i = 0; i < N; i++) {
        if (i % 3 == 0)
            sz[i] = pg * (1 + trng_below(&r, 4)); /* whole pages */
        else if (i % 3 == 1)
            sz[i] = 256 + trng_below(&r, pg - 256); /* sub-page */
        else
            sz[i] = pg * (1 + trng_below(&r, 3)) + trng_below(&r, pg); /* straddling pages */
        p[i] = tmalloc(pool, sz[i], st);
        fill(p[i], sz[i], 1000u + (uint32_t)i, st);
    }
    for (int i = 1; i < N; i += 2)
        tfree(pool, p[i]);
    s0 = tstats(pool);
    fs = (free_scan_t){ pg, 0, 0 };
    assert_int_equal(vpmm_pool_walk(pool, free_visit, &fs), VPMM_SUCCESS);
    /* Bigger than any free region, about 3/4 of the fully free pages, with a sub-page tail. */
    want = VPMM_MAX(fs.largest + pg, fs.full_pages * pg * 3 / 4) + 12345;
    print_message("[gpu] integrity: %d blocks, %d freed: %zu MiB free (largest region %zu KiB, "
                  "%zu fully free pages); asking for %zu bytes\n",
                  N, N / 2, s0.free_bytes / MiB, fs.largest / KiB, fs.full_pages, want);
    assert_true(want > fs.largest);
    assert_true(want <= s0.free_bytes + 4 * pg);

    big = tmalloc(pool, want, st);
    s1 = tstats(pool);
    assert_stats_sane(&s1);
    print_message("[gpu]   served by remapping %" PRIu64 " pages and creating %" PRIu64
                  " (mapped %zu -> %zu MiB)\n",
                  s1.pages_remapped - s0.pages_remapped, s1.pages_created - s0.pages_created,
                  s0.mapped_bytes / MiB, s1.mapped_bytes / MiB);
    assert_true(s1.pages_remapped > s0.pages_remapped);
    assert_true(s1.defrags > s0.defrags);

    /* Survivors unchanged, the new block usable, and filling it disturbs no survivor. */
    counter_reset(0);
    for (int i = 0; i < N; i += 2)
        check_into(p[i], sz[i], 1000u + (uint32_t)i, st, 0);
    assert_int_equal(counter_read(0), 0);
    fill(big, want, 4242, st);
    check_into(big, want, 4242, st, 0);
    for (int i = 0; i < N; i += 2)
        check_into(p[i], sz[i], 1000u + (uint32_t)i, st, 0);
    assert_int_equal(counter_read(0), 0);

    for (int i = 0; i < N; i += 2)
        tfree(pool, p[i]);
    tfree(pool, big);
    print_stats("integrity", &s1);
    gpu_stream_done(pool, st);
    gpu_pool_close(pool, free0);
}

/* ---- 4: two streams -------------------------------------------------------------------------- */

#define SPIN_MS          50.0
#define MALLOC_BUDGET_MS 5.0

/*
 * Stream A allocates X, spins ~50 ms, then writes X and frees it. Stream B at once asks for the
 * same size. The pool may hand out X's memory only with a GPU-side wait (cross_stream_waits), and
 * must not block the host: the malloc returns while A is still spinning. B's data must survive
 * A's delayed write.
 */
static void test_multistream_reuse(void **state)
{
    const size_t size = 6 * MiB + 1000;
    vpmm_pool_t *pool;
    vpmm_stats_t s0, s1;
    cudaStream_t a, b;
    cudaError_t busy;
    vpmm_status_t rc;
    void *x, *y = NULL;
    double t0, dt_ms;
    size_t free0;
    int same;
    (void)state;
    REQUIRE_GPU();

    free0 = gpu_device_free();
    a = gpu_stream_new(0);
    b = gpu_stream_new(0);
    pool = gpu_pool(0, VA_SMALL, 0);
    counter_reset(1);
    x = tmalloc(pool, size, a);
    GK_OK(gk_spin(a, spin_cycles(SPIN_MS)));
    fill(x, size, 0xA, a);
    tfree(pool, x);

    s0 = tstats(pool);
    t0 = gpu_now_s();
    rc = vpmm_malloc(pool, size, b, &y);
    dt_ms = (gpu_now_s() - t0) * 1e3;
    busy = cudaStreamQuery(a);
    assert_int_equal(rc, VPMM_SUCCESS);
    CHECK_POOL(pool);
    s1 = tstats(pool);
    same = gpu_overlaps(x, size, y, size);
    print_message("[gpu] multistream reuse: malloc on B took %.3f ms while A spun %.0f ms (A %s); "
                  "%s; cross-stream waits %" PRIu64 " -> %" PRIu64 "\n",
                  dt_ms, SPIN_MS, busy == cudaErrorNotReady ? "still busy" : "already idle",
                  same ? "got X's memory" : "got other memory", s0.cross_stream_waits,
                  s1.cross_stream_waits);
    assert_int_equal(busy, cudaErrorNotReady); /* otherwise the test proved nothing */
    assert_true(dt_ms < MALLOC_BUDGET_MS);
    if (same)
        assert_true(s1.cross_stream_waits > s0.cross_stream_waits);

    fill(y, size, 0xB, b);
    check_into(y, size, 0xB, b, 1);
    CUDA_OK(cudaDeviceSynchronize()); /* A's late write to X has happened by now */
    check_into(y, size, 0xB, b, 1);
    assert_int_equal(counter_read(1), 0);

    tfree(pool, y);
    gpu_stream_done(pool, a);
    gpu_stream_done(pool, b);
    gpu_pool_close(pool, free0);
}

/*
 * Stream A allocates 4 x 4 MiB, spins ~50 ms, writes them and frees them. Stream B asks for
 * 24 MiB: no free region is that large, so the pool defragments, remapping A's pages (with a
 * GPU-side wait for A) next to fresh ones. No host sync: the malloc returns while A spins. A's
 * delayed writes land on pages that now back B's block; B's data must still be intact after.
 */
static void test_multistream_defrag(void **state)
{
    const size_t xs = 4 * MiB, ys = 24 * MiB;
    vpmm_pool_t *pool;
    vpmm_stats_t s0, s1, s2;
    cudaStream_t a, b;
    cudaError_t busy;
    vpmm_status_t rc;
    void *x[4], *y = NULL, *z;
    double t0, dt_ms;
    size_t free0;
    (void)state;
    REQUIRE_GPU();

    free0 = gpu_device_free();
    a = gpu_stream_new(0);
    b = gpu_stream_new(0);
    pool = gpu_pool(0, VA_SMALL, 0);
    counter_reset(2);
    for (int i = 0; i < 4; i++)
        x[i] = tmalloc(pool, xs, a);
    GK_OK(gk_spin(a, spin_cycles(SPIN_MS)));
    for (int i = 0; i < 4; i++)
        fill(x[i], xs, 0xA0u + (uint32_t)i, a);
    for (int i = 0; i < 4; i++)
        tfree(pool, x[i]);

    s0 = tstats(pool);
    t0 = gpu_now_s();
    rc = vpmm_malloc(pool, ys, b, &y);
    dt_ms = (gpu_now_s() - t0) * 1e3;
    busy = cudaStreamQuery(a);
    assert_int_equal(rc, VPMM_SUCCESS);
    CHECK_POOL(pool);
    s1 = tstats(pool);
    print_message("[gpu] multistream defrag: 24 MiB on B took %.3f ms while A spun (A %s): %" PRIu64
                  " pages remapped from A, %" PRIu64 " created, cross-stream waits %" PRIu64
                  " -> %" PRIu64 ", zombies %zu MiB\n",
                  dt_ms, busy == cudaErrorNotReady ? "still busy" : "already idle",
                  s1.pages_remapped - s0.pages_remapped, s1.pages_created - s0.pages_created,
                  s0.cross_stream_waits, s1.cross_stream_waits, s1.zombie_bytes / MiB);
    assert_int_equal(busy, cudaErrorNotReady);
    assert_true(dt_ms < MALLOC_BUDGET_MS);
    assert_true(s1.pages_remapped > s0.pages_remapped);
    assert_true(s1.cross_stream_waits > s0.cross_stream_waits);

    fill(y, ys, 0xB0, b);
    CUDA_OK(cudaDeviceSynchronize());
    check_into(y, ys, 0xB0, b, 2);
    assert_int_equal(counter_read(2), 0);

    /* A is done: the next slow-path malloc unmaps the zombies (their VA becomes hole). */
    z = tmalloc(pool, 64 * MiB, b);
    s2 = tstats(pool);
    assert_int_equal(s2.zombie_bytes, 0);
    fill(z, 64 * MiB, 0xC0, b);
    check_into(z, 64 * MiB, 0xC0, b, 2);
    check_into(y, ys, 0xB0, b, 2);
    assert_int_equal(counter_read(2), 0);

    tfree(pool, y);
    tfree(pool, z);
    print_stats("multistream defrag", &s2);
    gpu_stream_done(pool, a);
    gpu_stream_done(pool, b);
    gpu_pool_close(pool, free0);
}

/* ---- 5: seeded random stress ----------------------------------------------------------------- */

#define STRESS_OPS     20000
#define STRESS_SLOTS   384
#define STRESS_STREAMS 4

typedef struct slot {
    void *p;
    size_t size;
    uint32_t seed;
    int stream;
} slot_t;

static size_t stress_size(trng_t *r, size_t pg)
{
    uint64_t kind = trng_below(r, 4);
    if (kind == 0)
        return 1 + trng_below(r, 64 * KiB); /* small */
    if (kind == 1)
        return 64 * KiB + trng_below(r, pg); /* around a page */
    if (kind == 2)
        return pg * (1 + trng_below(r, 4)); /* whole pages, up to 8 MiB */
    return 1 + trng_below(r, 8 * MiB);      /* anything up to 8 MiB */
}

static void test_stress(void **state)
{
    static slot_t slots[STRESS_SLOTS];
    const char *env = getenv("VPMM_TEST_SEED"); /* to replay another sequence */
    const uint64_t seed = env ? strtoull(env, NULL, 0) : 20240611;
    cudaStream_t st[STRESS_STREAMS];
    trng_t r = { seed ? seed : 1 };
    vpmm_pool_t *pool;
    vpmm_stats_t s;
    size_t pg, free0;
    double t0, elapsed, in_vpmm = 0, worst_malloc = 0;
    unsigned long long bad = 0;
    uint64_t mallocs = 0, frees = 0;
    (void)state;
    REQUIRE_GPU();

    free0 = gpu_device_free();
    for (int i = 0; i < STRESS_STREAMS; i++) {
        st[i] = gpu_stream_new(0);
        counter_reset(4 + i);
    }
    pool = gpu_pool(0, VA_SMALL, 0);
    pg = tstats(pool).page_size;
    memset(slots, 0, sizeof slots);
    t0 = gpu_now_s();
    for (int op = 0; op < STRESS_OPS; op++) {
        slot_t *sl = &slots[trng_below(&r, STRESS_SLOTS)];
        double c0;
        if (sl->p == NULL) {
            vpmm_status_t rc;
            sl->size = stress_size(&r, pg);
            sl->stream = (int)trng_below(&r, STRESS_STREAMS);
            sl->seed = (uint32_t)op;
            c0 = gpu_now_s();
            rc = vpmm_malloc(pool, sl->size, st[sl->stream], &sl->p);
            c0 = gpu_now_s() - c0;
            in_vpmm += c0;
            worst_malloc = VPMM_MAX(worst_malloc, c0);
            if (rc != VPMM_SUCCESS)
                fail_msg("op %d: vpmm_malloc(%zu) on stream %d: %s (%s)", op, sl->size, sl->stream,
                         vpmm_status_name(rc), vpmm_last_error());
            fill(sl->p, sl->size, sl->seed, st[sl->stream]);
            mallocs++;
        } else {
            check_into(sl->p, sl->size, sl->seed, st[sl->stream], 4 + sl->stream);
            c0 = gpu_now_s();
            assert_int_equal(vpmm_free(pool, sl->p), VPMM_SUCCESS);
            in_vpmm += gpu_now_s() - c0;
            sl->p = NULL;
            frees++;
        }
        /* Now and then keep a stream busy, so other streams meet memory that is not done yet. */
        if (op % 512 == 511)
            GK_OK(gk_spin(st[trng_below(&r, STRESS_STREAMS)], spin_cycles(0.2)));
        if (op % 256 == 255)
            CHECK_POOL(pool);
    }
    elapsed = gpu_now_s() - t0;
    s = tstats(pool);
    assert_stats_sane(&s);
    for (int i = 0; i < STRESS_SLOTS; i++) {
        if (slots[i].p != NULL) {
            check_into(slots[i].p, slots[i].size, slots[i].seed, st[slots[i].stream],
                       4 + slots[i].stream);
            tfree(pool, slots[i].p);
            slots[i].p = NULL;
        }
    }
    for (int i = 0; i < STRESS_STREAMS; i++)
        bad += counter_read(4 + i);
    print_message("[gpu] stress (seed %" PRIu64 "): %d ops (%" PRIu64 " mallocs, %" PRIu64
                  " frees) over %d streams in %.3f s: %.0f ops/s with kernel launches; "
                  "%.2f us per vpmm call, slowest malloc %.3f ms; %llu mismatches\n",
                  seed, STRESS_OPS, mallocs, frees, STRESS_STREAMS, elapsed, STRESS_OPS / elapsed,
                  in_vpmm / STRESS_OPS * 1e6, worst_malloc * 1e3, bad);
    print_stats("stress", &s);
    assert_int_equal(bad, 0);
    for (int i = 0; i < STRESS_STREAMS; i++)
        gpu_stream_done(pool, st[i]);
    gpu_pool_close(pool, free0);
}

/* ---- 6: out of device memory ----------------------------------------------------------------- */

/* Every field of vpmm_stats_t but ooms (all are 64-bit counters on the platforms we build for). */
/* clang-format off */
#define STATS_FIELD(f) { #f, offsetof(vpmm_stats_t, f) }
static const struct {
    const char *name;
    size_t offset;
} stats_fields[] = {
    STATS_FIELD(live_bytes),    STATS_FIELD(allocated_bytes),    STATS_FIELD(peak_live_bytes),
    STATS_FIELD(mapped_bytes),  STATS_FIELD(peak_mapped_bytes),  STATS_FIELD(free_bytes),
    STATS_FIELD(hole_bytes),    STATS_FIELD(zombie_bytes),       STATS_FIELD(reserved_va_bytes),
    STATS_FIELD(page_size),     STATS_FIELD(live_allocs),        STATS_FIELD(mallocs),
    STATS_FIELD(frees),         STATS_FIELD(defrags),            STATS_FIELD(pages_remapped),
    STATS_FIELD(pages_created), STATS_FIELD(pages_released),     STATS_FIELD(grows),
    STATS_FIELD(va_chunks),     STATS_FIELD(cross_stream_waits), STATS_FIELD(streams),
};
/* clang-format on */
_Static_assert(sizeof(size_t) == sizeof(uint64_t), "stats fields are read as uint64_t");

/* Number of fields (other than ooms) that differ between two snapshots; each is printed. */
static int stats_diff(const vpmm_stats_t *a, const vpmm_stats_t *b)
{
    int n = 0;
    for (size_t i = 0; i < sizeof stats_fields / sizeof stats_fields[0]; i++) {
        uint64_t x, y;
        memcpy(&x, (const char *)a + stats_fields[i].offset, sizeof x);
        memcpy(&y, (const char *)b + stats_fields[i].offset, sizeof y);
        if (x != y) {
            print_error("[gpu]   stats.%s changed: %" PRIu64 " -> %" PRIu64 "\n",
                        stats_fields[i].name, x, y);
            n++;
        }
    }
    return n;
}

static void test_out_of_memory(void **state)
{
    const size_t va = TiB;
    vpmm_pool_t *pool;
    vpmm_stats_t s0, s1;
    layout_t l0, l1;
    cudaStream_t st;
    vpmm_status_t rc;
    void *keep, *p = (void *)&p, *q;
    size_t free0, total, want, free_mid;
    const char *call = NULL;
    int code = 0;
    double t0, dt;
    (void)state;
    REQUIRE_GPU();

    CUDA_OK(cudaMemGetInfo(&free0, &total));
    want = 2 * total;
    assert_true(want < va); /* it must be the device, not the VA chunk, that says no */
    st = gpu_stream_new(0);
    pool = gpu_pool(0, va, 0);
    /* A live block first: the stream is known and no page is fully free, so nothing may move. */
    keep = tmalloc(pool, MiB, st);
    fill(keep, MiB, 77, st);
    s0 = tstats(pool);
    layout_of(pool, MiB, va, &l0);

    t0 = gpu_now_s();
    rc = vpmm_malloc(pool, want, st, &p);
    dt = gpu_now_s() - t0;
    vpmm_pool_last_driver_error(pool, &code, &call);
    print_message("[gpu] OOM: vpmm_malloc(%zu GiB) on a %zu GiB device took %.3f s: %s\n"
                  "[gpu]   vpmm_last_error: %s\n[gpu]   last driver error: %s = %d\n",
                  want / GiB, total / GiB, dt, vpmm_status_name(rc), vpmm_last_error(),
                  call ? call : "(none)", code);
    assert_int_equal(rc, VPMM_ERROR_OUT_OF_MEMORY);
    assert_null(p);
    CHECK_POOL(pool);
    s1 = tstats(pool);
    layout_of(pool, MiB, va, &l1);
    assert_int_equal(s1.ooms, s0.ooms + 1);
    assert_int_equal(stats_diff(&s0, &s1), 0);
    assert_string_equal(l0.text, l1.text);
    CUDA_OK(cudaDeviceSynchronize());
    free_mid = gpu_device_free();
    print_message(
        "[gpu]   pool unchanged (regions in MiB: %s); device free %zu MiB before, %zu MiB after\n",
        l1.text, free0 / MiB, free_mid / MiB);
    assert_true(free_mid + MEM_SLACK >= free0 - s1.mapped_bytes);

    /* The pool keeps working. */
    q = tmalloc(pool, 4 * MiB, st);
    fill(q, 4 * MiB, 78, st);
    assert_int_equal(check_now(q, 4 * MiB, 78, st), 0);
    assert_int_equal(check_now(keep, MiB, 77, st), 0);
    tfree(pool, q);
    tfree(pool, keep);
    gpu_stream_done(pool, st);
    gpu_pool_close(pool, free0);
}

/* Frees what the first GPU test set up (the device-side mismatch counters). */
static int gpu_teardown(void **state)
{
    (void)state;
    if (g.counters != NULL)
        cudaFree(g.counters);
    g.counters = NULL;
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernels_selftest),
        cmocka_unit_test(test_basic),
        cmocka_unit_test(test_seed_case_a),
        cmocka_unit_test(test_seed_case_b),
        cmocka_unit_test(test_seed_case_c),
        cmocka_unit_test(test_seed_case_d),
        cmocka_unit_test(test_seed_on_demand),
        cmocka_unit_test(test_integrity_under_remap),
        cmocka_unit_test(test_multistream_reuse),
        cmocka_unit_test(test_multistream_defrag),
        cmocka_unit_test(test_stress),
        cmocka_unit_test(test_out_of_memory),
    };
    return gpu_exit_status(cmocka_run_group_tests(tests, NULL, gpu_teardown));
}
