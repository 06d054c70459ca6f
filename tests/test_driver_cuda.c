/*
 * test_driver_cuda.c — tests of the CUDA backend (src/backends/cuda/driver_cuda.c) against
 * driver.h.
 *
 * The first group runs everywhere: without a driver the backend must report "no device" as a
 * status, quickly, and never crash. The GPU group skip()s when vpmm_driver_cuda_device_count() is
 * 0 and otherwise exercises the contract on the real driver; it uses the CUDA runtime (linked
 * statically, so the binary still starts without a driver) to move bytes and to drive streams
 * and captures. Set VPMM_TEST_REQUIRE_GPU=1 to turn "no device" into a failure on GPU machines.
 *
 * `test_driver_cuda anywhere` runs the first group, `test_driver_cuda gpu` the GPU group, which
 * exits 77 when every test skipped (ctest: Skipped; ctest runs the two as test_driver_cuda and
 * test_driver_cuda_gpu); no argument runs both.
 *
 * Notes print with a "[driver_cuda]" prefix: granularity, the non-zero-offset verdict, OOM counts,
 * what the driver says to captures on the legacy stream, and when and on which thread a user
 * object's destructor ran.
 *
 * Built by tests/CMakeLists.txt (vpmm_add_test ... GPU: the CUDA runtime, statically). By hand:
 *   gcc -std=c11 -D_GNU_SOURCE -Iinclude -Isrc/driver -Itests -I/usr/local/cuda/include
 *       src/driver/driver.c src/backends/cuda/driver_cuda.c tests/test_driver_cuda.c
 *       -L/usr/local/cuda/lib64 -lcudart_static -lcmocka -ldl -lpthread -lrt -o test_driver_cuda
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "driver_cuda.h"
#include "test_rng.h"

#define KiB ((size_t)1 << 10)
#define GiB ((size_t)1 << 30)
#define TiB ((size_t)1 << 40)

/* CUresult values the tests compare last_code with (cuda.h is the library's alone). */
#define CU_INVALID_VALUE 1
#define CU_OUT_OF_MEMORY 2

#define CUDA_OK(expr)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (expr);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            print_error("%s failed: %s (%d)\n", #expr, cudaGetErrorString(e_), (int)e_);           \
            fail();                                                                                \
        }                                                                                          \
    } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_us(long us)
{
    struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
    nanosleep(&ts, NULL);
}

/* ---- always run ---------------------------------------------------------------------------- */

static void test_device_count_without_crash(void **state)
{
    (void)state;
    int n = vpmm_driver_cuda_device_count();
    assert_true(n >= 0);
    assert_int_equal(vpmm_driver_cuda_device_count(), n); /* loaded once, same answer */
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL)
        assert_int_equal(n, 0);
    else
        dlclose(lib);
    printf("[driver_cuda] device_count = %d (libcuda.so.1 %s)\n", n, lib ? "present" : "absent");
}

/* The reason vpmm_pool_create gives for NO_DEVICE: empty exactly when the driver has devices. */
static void test_load_error_explains_no_device(void **state)
{
    char why[96], tiny[8];
    (void)state;
    memset(why, 'x', sizeof why);
    vpmm_driver_cuda_load_error(why, sizeof why);
    assert_non_null(memchr(why, '\0', sizeof why));
    printf("[driver_cuda] load error: \"%s\"\n", why);
    if (vpmm_driver_cuda_device_count() > 0) {
        assert_string_equal(why, "");
        return;
    }
    assert_true(why[0] != '\0');
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL)
        assert_string_equal(why, "libcuda.so.1 could not be loaded");
    else
        dlclose(lib);
    vpmm_driver_cuda_load_error(tiny, sizeof tiny); /* truncated, terminated */
    assert_int_equal(strlen(tiny), sizeof tiny - 1);
    vpmm_driver_cuda_load_error(NULL, 0); /* asks for nothing */
}

static void test_open_null_out(void **state)
{
    (void)state;
    assert_int_equal(vpmm_driver_cuda_open(0, 0, NULL), VPMM_DRV_INVALID);
}

static void test_open_current_device(void **state)
{
    (void)state;
    vpmm_driver_t *d = (vpmm_driver_t *)&d; /* not NULL: open must clear it on failure */
    double t0 = now_s();
    vpmm_dres_t st = vpmm_driver_cuda_open(-1, 0, &d);
    double dt = now_s() - t0;
    if (vpmm_driver_cuda_device_count() == 0) {
        assert_int_equal(st, VPMM_DRV_NO_DEVICE);
        assert_null(d);
        assert_true(dt < 2.0);
        return;
    }
    printf("[driver_cuda] open(-1) took %.3f ms\n", dt * 1e3);
    if (st == VPMM_DRV_NOT_SUPPORTED) {
        assert_null(d);
        skip();
    }
    assert_int_equal(st, VPMM_DRV_OK);
    assert_non_null(d);
    assert_string_equal(d->name, "cuda");
    d->close(d);
}

static void test_open_out_of_range(void **state)
{
    (void)state;
    vpmm_driver_t *d = (vpmm_driver_t *)&d;
    assert_int_equal(vpmm_driver_cuda_open(9999, 0, &d), VPMM_DRV_NO_DEVICE);
    assert_null(d);
    d = (vpmm_driver_t *)&d;
    assert_int_equal(vpmm_driver_cuda_open(-2, 0, &d), VPMM_DRV_NO_DEVICE);
    assert_null(d);
    d = (vpmm_driver_t *)&d;
    assert_int_equal(vpmm_driver_cuda_open(vpmm_driver_cuda_device_count(), 0, &d),
                     VPMM_DRV_NO_DEVICE);
    assert_null(d);
}

/*
 * If the driver itself reports devices, the backend must see the same number: a resolution bug
 * (a wrong version in the cuGetProcAddress table) would otherwise look like "no device" and make
 * every GPU test skip silently. Uses the driver's own exported cuInit / cuDeviceGetCount.
 */
static void test_driver_presence_consistent(void **state)
{
    (void)state;
    int n = vpmm_driver_cuda_device_count();
    const char *require = getenv("VPMM_TEST_REQUIRE_GPU");
    if (require != NULL && require[0] != '\0' && strcmp(require, "0") != 0 && n == 0)
        fail_msg("VPMM_TEST_REQUIRE_GPU is set but the CUDA backend sees no device");

    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        assert_int_equal(n, 0);
        return;
    }
    int (*init)(unsigned) = NULL;
    int (*count)(int *) = NULL;
    void *s1 = dlsym(lib, "cuInit"), *s2 = dlsym(lib, "cuDeviceGetCount");
    memcpy(&init, &s1, sizeof init);
    memcpy(&count, &s2, sizeof count);
    int direct = 0;
    if (init != NULL && count != NULL && init(0) == 0 && count(&direct) != 0)
        direct = 0;
    printf("[driver_cuda] driver reports %d device(s), backend %d\n", direct, n);
    assert_int_equal(n, direct);
    dlclose(lib);
}

/* ---- GPU tests ----------------------------------------------------------------------------- */

static int gpu_opened; /* a GPU test got a driver: not every one skipped */

/* Every GPU test starts here: skips without a usable device, unless VPMM_TEST_REQUIRE_GPU is set
 * (then it fails). */
static vpmm_driver_t *open_or_skip(void)
{
    const char *require = getenv("VPMM_TEST_REQUIRE_GPU");
    int required = require != NULL && require[0] != '\0' && strcmp(require, "0") != 0;
    if (vpmm_driver_cuda_device_count() == 0) {
        if (required)
            fail_msg("VPMM_TEST_REQUIRE_GPU is set but the CUDA backend sees no device");
        skip();
    }
    vpmm_driver_t *d = NULL;
    vpmm_dres_t st = vpmm_driver_cuda_open(-1, 0, &d);
    if (st == VPMM_DRV_NOT_SUPPORTED) {
        if (required)
            fail_msg("VPMM_TEST_REQUIRE_GPU is set but the device does not support VMM");
        skip();
    }
    assert_int_equal(st, VPMM_DRV_OK);
    assert_non_null(d);
    gpu_opened = 1;
    return d;
}

static size_t gran(vpmm_driver_t *d)
{
    size_t g = 0;
    assert_int_equal(d->granularity(d, &g), VPMM_DRV_OK);
    assert_true(g > 0);
    return g;
}

static void fill(unsigned char *buf, size_t n, unsigned seed)
{
    trng_t r = { tmix64(seed) | 1 }; /* never 0 */
    for (size_t i = 0; i < n; i++)
        buf[i] = (unsigned char)(trng_next(&r) >> 56);
}

/* Writes a pattern through `dst` and checks it reads back the same through `src`. */
static void check_alias(uintptr_t dst, uintptr_t src, size_t n, unsigned seed)
{
    unsigned char *in = malloc(n), *out = malloc(n);
    assert_non_null(in);
    assert_non_null(out);
    fill(in, n, seed);
    memset(out, 0, n);
    CUDA_OK(cudaMemcpy((void *)dst, in, n, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(out, (const void *)src, n, cudaMemcpyDeviceToHost));
    assert_memory_equal(in, out, n);
    free(in);
    free(out);
}

static void test_granularity(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_or_skip();
    size_t g = gran(d);
    assert_int_equal(g & (g - 1), 0);
    size_t free_b = 0, total_b = 0;
    assert_int_equal(d->mem_get_info(d, &free_b, &total_b), VPMM_DRV_OK);
    assert_true(free_b > 0 && free_b <= total_b);
    printf("[driver_cuda] granularity %zu KiB, device memory free %zu MiB of %zu MiB\n", g / KiB,
           free_b >> 20, total_b >> 20);
    assert_int_equal(d->last_code, 0);
    assert_null(d->last_call);
    d->close(d);
}

static void test_reserve_8tib(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_or_skip();
    size_t g = gran(d);
    uintptr_t va = 0;
    double t0 = now_s();
    assert_int_equal(d->va_reserve(d, 8 * TiB, g, &va), VPMM_DRV_OK);
    printf("[driver_cuda] reserve 8 TiB: %.1f us\n", (now_s() - t0) * 1e6);
    assert_true(va != 0 && va % g == 0);
    assert_int_equal(d->va_free(d, va, 8 * TiB), VPMM_DRV_OK);
    d->close(d);
}

/* Rule 2: arguments off the granularity are refused before the driver sees them. */
static void test_invalid_arguments(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_or_skip();
    size_t g = gran(d);
    uintptr_t va = 0, tmp = 0;
    vpmm_drv_handle_t h = 0, h2 = 0;
    assert_int_equal(d->va_reserve(d, 4 * g, g, &va), VPMM_DRV_OK);
    assert_int_equal(d->mem_create(d, g, &h), VPMM_DRV_OK);

    assert_int_equal(d->va_reserve(d, g + 1, g, &tmp), VPMM_DRV_INVALID);
    assert_string_equal(d->last_call, "cuMemAddressReserve");
    assert_int_equal(d->last_code, CU_INVALID_VALUE);
    assert_int_equal(d->mem_create(d, g / 2, &h2), VPMM_DRV_INVALID);
    assert_string_equal(d->last_call, "cuMemCreate");
    assert_int_equal(d->mem_map(d, va + g / 2, g, h, 0), VPMM_DRV_INVALID);
    assert_string_equal(d->last_call, "cuMemMap");
    assert_int_equal(d->mem_map(d, va, g, h, g / 2), VPMM_DRV_INVALID);
    assert_int_equal(d->set_access(d, va, g - 1, NULL, 0), VPMM_DRV_INVALID);
    assert_string_equal(d->last_call, "cuMemSetAccess");
    assert_int_equal(d->mem_unmap(d, va, 0), VPMM_DRV_INVALID);
    assert_string_equal(d->last_call, "cuMemUnmap");

    /* The refusals did nothing: the range is still unmapped and maps now. */
    assert_int_equal(d->mem_map(d, va, g, h, 0), VPMM_DRV_OK);
    assert_int_equal(d->set_access(d, va, g, NULL, 0), VPMM_DRV_OK);
    /* What the driver itself says to unmapping a range that holds no mapping. */
    /* What the driver itself says to unmapping a range that holds no mapping (informational;
     * the contract forbids the call, so the core never makes it). */
    d->last_code = 0;
    d->last_call = NULL;
    vpmm_dres_t st = d->mem_unmap(d, va + 2 * g, g);
    printf("[driver_cuda] unmap of an unmapped range: status %d, CUresult %d (%s)\n", (int)st,
           d->last_code, d->last_call ? d->last_call : "-");
    assert_int_equal(d->mem_unmap(d, va, g), VPMM_DRV_OK);
    assert_int_equal(d->mem_release(d, h), VPMM_DRV_OK);
    assert_int_equal(d->va_free(d, va, 4 * g), VPMM_DRV_OK);
    d->close(d);
}

/*
 * Two handles, h1 mapped at two addresses (aliasing) and h2 next to the first one; one
 * set_access spans the two adjacent mappings.
 *
 *   va:        [ h1 | h2 | .. hole .. | h1 ]
 *               0    G               16G
 */
static void test_alias_two_addresses(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_or_skip();
    size_t g = gran(d);
    uintptr_t va = 0;
    vpmm_drv_handle_t h1 = 0, h2 = 0;
    assert_int_equal(d->va_reserve(d, 8 * TiB, g, &va), VPMM_DRV_OK);
    assert_int_equal(d->mem_create(d, g, &h1), VPMM_DRV_OK);
    assert_int_equal(d->mem_create(d, g, &h2), VPMM_DRV_OK);
    assert_true(h1 != h2);

    uintptr_t a = va, b = va + g, c = va + 16 * g;
    assert_int_equal(d->mem_map(d, a, g, h1, 0), VPMM_DRV_OK);
    assert_int_equal(d->mem_map(d, b, g, h2, 0), VPMM_DRV_OK);
    assert_int_equal(d->mem_map(d, c, g, h1, 0), VPMM_DRV_OK);
    assert_int_equal(d->set_access(d, a, 2 * g, NULL, 0), VPMM_DRV_OK); /* spans h1 and h2 */
    assert_int_equal(d->set_access(d, c, g, NULL, 0), VPMM_DRV_OK);

    check_alias(a, c, g, 1); /* through one address, back through the other */
    check_alias(c, a, g, 2);
    check_alias(a, a, 2 * g, 3); /* one copy across the two adjacent mappings */

    /* h2 is not h1: writing h2 leaves the alias of h1 alone. */
    unsigned char *in = malloc(g), *out = malloc(g);
    assert_non_null(in);
    assert_non_null(out);
    fill(in, g, 4);
    CUDA_OK(cudaMemcpy((void *)a, in, g, cudaMemcpyHostToDevice));
    memset(out, 0xab, g);
    CUDA_OK(cudaMemcpy((void *)b, out, g, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(out, (const void *)c, g, cudaMemcpyDeviceToHost));
    assert_memory_equal(in, out, g);
    free(in);
    free(out);

    /* Releasing a still-mapped handle is allowed (rule 4); the alias keeps the memory. */
    assert_int_equal(d->mem_unmap(d, a, g), VPMM_DRV_OK);
    assert_int_equal(d->mem_release(d, h1), VPMM_DRV_OK);
    check_alias(c, c, g, 5);
    assert_int_equal(d->mem_unmap(d, c, g), VPMM_DRV_OK);
    assert_int_equal(d->mem_unmap(d, b, g), VPMM_DRV_OK);
    assert_int_equal(d->mem_release(d, h2), VPMM_DRV_OK);
    assert_int_equal(d->va_free(d, va, 8 * TiB), VPMM_DRV_OK);
    d->close(d);
}

/*
 * Maps the second granule of a two-granule handle on its own (offset G). Older drivers refused
 * non-zero offsets; we want to learn what this one does. A refusal is printed and passes (and must
 * leave the range unmapped); a success must alias the right bytes.
 */
static void test_nonzero_offset_map(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_or_skip();
    size_t g = gran(d);
    uintptr_t va = 0;
    vpmm_drv_handle_t h = 0;
    assert_int_equal(d->va_reserve(d, 64 * g, g, &va), VPMM_DRV_OK);
    assert_int_equal(d->mem_create(d, 2 * g, &h), VPMM_DRV_OK);
    uintptr_t whole = va, second = va + 32 * g;
    assert_int_equal(d->mem_map(d, whole, 2 * g, h, 0), VPMM_DRV_OK);
    assert_int_equal(d->set_access(d, whole, 2 * g, NULL, 0), VPMM_DRV_OK);

    vpmm_dres_t st = d->mem_map(d, second, g, h, g);
    if (st != VPMM_DRV_OK) {
        printf("[driver_cuda] NOTE: cuMemMap REFUSED a non-zero offset (offset = 1 granule): "
               "status %d, CUresult %d from %s. Pages must be whole handles.\n",
               (int)st, d->last_code, d->last_call ? d->last_call : "-");
        /* A smaller size at offset 0 is a partial mapping too: record the driver's answer. */
        vpmm_dres_t part = d->mem_map(d, second, g, h, 0);
        printf("[driver_cuda] NOTE: cuMemMap of the first granule only (offset 0): %s "
               "(status %d, CUresult %d).\n",
               part == VPMM_DRV_OK ? "ACCEPTED" : "REFUSED", (int)part, d->last_code);
        if (part == VPMM_DRV_OK)
            assert_int_equal(d->mem_unmap(d, second, g), VPMM_DRV_OK);
        /* Rule 1: the failed maps left the range unmapped, so a whole handle maps there. */
        vpmm_drv_handle_t one = 0;
        assert_int_equal(d->mem_create(d, g, &one), VPMM_DRV_OK);
        assert_int_equal(d->mem_map(d, second, g, one, 0), VPMM_DRV_OK);
        assert_int_equal(d->mem_unmap(d, second, g), VPMM_DRV_OK);
        assert_int_equal(d->mem_release(d, one), VPMM_DRV_OK);
    } else {
        printf("[driver_cuda] NOTE: cuMemMap ACCEPTED a non-zero offset (offset = 1 granule).\n");
        assert_int_equal(d->set_access(d, second, g, NULL, 0), VPMM_DRV_OK);
        /* Fill the whole handle, then check the sub-mapping shows its second half. */
        unsigned char *in = malloc(2 * g), *out = malloc(g);
        assert_non_null(in);
        assert_non_null(out);
        fill(in, 2 * g, 6);
        CUDA_OK(cudaMemcpy((void *)whole, in, 2 * g, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(out, (const void *)second, g, cudaMemcpyDeviceToHost));
        assert_memory_equal(in + g, out, g);
        /* And the other way: a write through the sub-mapping lands in granule 1, not 0. */
        check_alias(second, whole + g, g, 7);
        CUDA_OK(cudaMemcpy(out, (const void *)whole, g, cudaMemcpyDeviceToHost));
        assert_memory_equal(in, out, g);
        free(in);
        free(out);
        assert_int_equal(d->mem_unmap(d, second, g), VPMM_DRV_OK);
    }
    assert_int_equal(d->mem_unmap(d, whole, 2 * g), VPMM_DRV_OK);
    assert_int_equal(d->mem_release(d, h), VPMM_DRV_OK);
    assert_int_equal(d->va_free(d, va, 64 * g), VPMM_DRV_OK);
    d->close(d);
}

/* A host function that holds a stream until the test opens the gate. */
static void CUDART_CB gate_wait(void *arg)
{
    atomic_int *gate = arg;
    while (!atomic_load(gate))
        sleep_us(100);
}

static void wait_ok(vpmm_driver_t *d, vpmm_drv_event_t ev)
{
    double t0 = now_s();
    vpmm_dres_t st;
    while ((st = d->event_query(d, ev)) == VPMM_DRV_NOT_READY) {
        if (now_s() - t0 > 10.0)
            fail_msg("event not done after 10 s");
        sleep_us(50);
    }
    assert_int_equal(st, VPMM_DRV_OK);
}

static void test_event_record_query(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_or_skip();
    cudaStream_t s = NULL;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    vpmm_drv_event_t ev = NULL;
    assert_int_equal(d->event_create(d, NULL, &ev), VPMM_DRV_OK);
    assert_non_null(ev);

    /* Recorded on an idle stream: done (after at most a short while). */
    assert_int_equal(d->event_record(d, ev, s), VPMM_DRV_OK);
    wait_ok(d, ev);

    /* Recorded behind a held host function: NOT_READY until the gate opens. */
    static atomic_int gate;
    atomic_store(&gate, 0);
    CUDA_OK(cudaLaunchHostFunc(s, gate_wait, &gate));
    assert_int_equal(d->event_record(d, ev, s), VPMM_DRV_OK);
    vpmm_dres_t st = d->event_query(d, ev);
    atomic_store(&gate, 1);
    assert_int_equal(st, VPMM_DRV_NOT_READY);
    assert_null(d->last_call); /* NOT_READY is not a failure */
    wait_ok(d, ev);

    /* The legacy default stream (NULL). */
    assert_int_equal(d->event_record(d, ev, NULL), VPMM_DRV_OK);
    wait_ok(d, ev);

    assert_int_equal(d->event_destroy(d, ev), VPMM_DRV_OK);
    CUDA_OK(cudaStreamDestroy(s));
    d->close(d);
}

/* stream_wait_event orders stream b after an event of stream a, on the GPU. */
static void test_stream_wait_event(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_or_skip();
    cudaStream_t a = NULL, b = NULL;
    CUDA_OK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CUDA_OK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    vpmm_drv_event_t ea = NULL, eb = NULL;
    assert_int_equal(d->event_create(d, NULL, &ea), VPMM_DRV_OK);
    assert_int_equal(d->event_create(d, NULL, &eb), VPMM_DRV_OK);

    static atomic_int gate;
    atomic_store(&gate, 0);
    CUDA_OK(cudaLaunchHostFunc(a, gate_wait, &gate));
    assert_int_equal(d->event_record(d, ea, a), VPMM_DRV_OK);
    vpmm_dres_t st_wait = d->stream_wait_event(d, b, ea);
    vpmm_dres_t st_rec = d->event_record(d, eb, b);
    sleep_us(20000);
    vpmm_dres_t st_b = d->event_query(d, eb);
    atomic_store(&gate, 1);
    assert_int_equal(st_wait, VPMM_DRV_OK);
    assert_int_equal(st_rec, VPMM_DRV_OK);
    assert_int_equal(st_b, VPMM_DRV_NOT_READY);
    wait_ok(d, eb);
    wait_ok(d, ea);

    assert_int_equal(d->event_destroy(d, ea), VPMM_DRV_OK);
    assert_int_equal(d->event_destroy(d, eb), VPMM_DRV_OK);
    CUDA_OK(cudaStreamDestroy(a));
    CUDA_OK(cudaStreamDestroy(b));
    d->close(d);
}

static void test_capture_info(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_or_skip();
    cudaStream_t s = NULL, other = NULL;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUDA_OK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    vpmm_capture_status_t cs = VPMM_CAPTURE_INVALIDATED;
    uint64_t id = 42;
    vpmm_graph_t cg = (vpmm_graph_t)&cg;
    assert_int_equal(d->capture_info(d, s, &cs, &id, &cg), VPMM_DRV_OK);
    assert_int_equal(cs, VPMM_CAPTURE_NONE);
    assert_int_equal(id, 0);
    assert_null(cg);

    uint64_t ids[2] = { 0, 0 };
    for (int round = 0; round < 2; round++) {
        CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        assert_int_equal(d->capture_info(d, s, &cs, &ids[round], &cg), VPMM_DRV_OK);
        assert_int_equal(cs, VPMM_CAPTURE_ACTIVE);
        assert_true(ids[round] != 0);
        assert_non_null(cg);
        assert_int_equal(d->capture_info(d, other, &cs, &id, NULL), VPMM_DRV_OK);
        assert_int_equal(cs, VPMM_CAPTURE_NONE);

        /* Recording an event in a capturing stream is allowed (docs/ALGORITHM.md, "The VMM
         * driver calls"). */
        vpmm_drv_event_t ev = NULL;
        assert_int_equal(d->event_create(d, NULL, &ev), VPMM_DRV_OK);
        assert_int_equal(d->event_record(d, ev, s), VPMM_DRV_OK);

        cudaGraph_t graph = NULL;
        CUDA_OK(cudaStreamEndCapture(s, &graph));
        assert_non_null(graph);
        assert_ptr_equal(graph, cg); /* capture_info's graph is the one the capture returns */
        CUDA_OK(cudaGraphDestroy(graph));
        assert_int_equal(d->event_destroy(d, ev), VPMM_DRV_OK);

        assert_int_equal(d->capture_info(d, s, &cs, &id, &cg), VPMM_DRV_OK);
        assert_int_equal(cs, VPMM_CAPTURE_NONE);
        assert_int_equal(id, 0);
        assert_null(cg);
    }
    assert_true(ids[0] != ids[1]);
    printf("[driver_cuda] capture ids %llu, %llu\n", (unsigned long long)ids[0],
           (unsigned long long)ids[1]);
    CUDA_OK(cudaStreamDestroy(s));
    CUDA_OK(cudaStreamDestroy(other));
    d->close(d);
}

/*
 * What happens after cudaEventQuery on an event recorded in a capturing stream (docs/ALGORITHM.md
 * says error 907 and an invalidated capture). Informational: prints, requires only sane answers.
 */
static void test_capture_invalidated(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_or_skip();
    cudaStream_t s = NULL;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    vpmm_drv_event_t ev = NULL;
    assert_int_equal(d->event_create(d, NULL, &ev), VPMM_DRV_OK);
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    assert_int_equal(d->event_record(d, ev, s), VPMM_DRV_OK);
    cudaError_t q = cudaEventQuery((cudaEvent_t)ev);
    vpmm_capture_status_t cs = VPMM_CAPTURE_NONE;
    uint64_t id = 0;
    vpmm_graph_t cg = NULL;
    vpmm_dres_t st = d->capture_info(d, s, &cs, &id, &cg);
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(s, &graph);
    printf("[driver_cuda] cudaEventQuery on a captured event: %d (%s); capture_info then: "
           "status %d, capture %d (1 active, 2 invalidated), graph %s; cudaStreamEndCapture: %d "
           "(%s), graph %s\n",
           (int)q, cudaGetErrorName(q), (int)st, (int)cs, cg ? "set" : "NULL", (int)e,
           cudaGetErrorName(e), graph ? "set" : "NULL");
    if (graph != NULL)
        CUDA_OK(cudaGraphDestroy(graph));
    (void)cudaGetLastError();
    assert_int_not_equal(q, cudaSuccess);
    assert_int_equal(st, VPMM_DRV_OK);
    assert_true(cs == VPMM_CAPTURE_ACTIVE || cs == VPMM_CAPTURE_INVALIDATED);
    assert_int_equal(d->capture_info(d, s, &cs, &id, NULL), VPMM_DRV_OK);
    assert_int_equal(cs, VPMM_CAPTURE_NONE);
    assert_int_equal(d->event_destroy(d, ev), VPMM_DRV_OK);
    CUDA_OK(cudaStreamDestroy(s));
    d->close(d);
}

/*
 * driver.h rule 6: the legacy default stream is never captured, so the pool skips the capture
 * query for it on the malloc hot path. Check the driver agrees: a capture cannot begin on it.
 */
static void test_no_capture_on_legacy_stream(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_or_skip();
    vpmm_capture_status_t st;
    uint64_t id;
    cudaError_t e = cudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal);
    printf("[driver_cuda] cudaStreamBeginCapture(legacy stream): %s\n", cudaGetErrorName(e));
    if (e == cudaSuccess) {
        cudaGraph_t g;
        (void)cudaStreamEndCapture(0, &g);
        fail_msg("the driver began a capture on the legacy default stream");
    }
    (void)cudaGetLastError(); /* clear the expected error */
    assert_int_equal(d->capture_info(d, NULL, &st, &id, NULL), VPMM_DRV_OK);
    assert_int_equal(st, VPMM_CAPTURE_NONE);
    d->close(d);
}

/*
 * The pool asks capture_info about the legacy stream (NULL) on every allocation made there, also
 * while some other stream is being captured in global mode. Informational: prints what the
 * driver answers and whether the other capture survives the question.
 */
static void test_capture_legacy_stream_query(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_or_skip();
    cudaStream_t s = NULL;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    vpmm_capture_status_t cs = VPMM_CAPTURE_INVALIDATED, cs_s = VPMM_CAPTURE_NONE;
    uint64_t id = 0, id_s = 0;
    vpmm_dres_t st = d->capture_info(d, NULL, &cs, &id, NULL);
    int code = st == VPMM_DRV_OK ? 0 : d->last_code;
    vpmm_dres_t st_s = d->capture_info(d, s, &cs_s, &id_s, NULL);
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(s, &graph);
    printf("[driver_cuda] capture_info(NULL) while a non-blocking stream captures (global): "
           "status %d, CUresult %d, capture %d; that stream then: status %d, capture %d; "
           "cudaStreamEndCapture: %s\n",
           (int)st, code, (int)cs, (int)st_s, (int)cs_s, cudaGetErrorName(e));
    if (graph != NULL)
        CUDA_OK(cudaGraphDestroy(graph));
    (void)cudaGetLastError();
    assert_int_equal(st_s, VPMM_DRV_OK);
    CUDA_OK(cudaStreamDestroy(s));
    d->close(d);
}

/* ---- graphs and user objects (driver.h rule 8) -------------------------------------------- */

/* What a user object's destructor saw: how often it ran, when, on which thread. */
typedef struct uobj_probe {
    atomic_int runs;
    double at; /* now_s() at the (first) run, published by the increment of runs */
    long tid;
} uobj_probe_t;

static long thread_id(void)
{
    return (long)syscall(SYS_gettid);
}

static void CUDART_CB probe_dtor(void *arg)
{
    uobj_probe_t *p = arg;
    if (atomic_load(&p->runs) == 0) {
        p->at = now_s();
        p->tid = thread_id();
    }
    atomic_fetch_add(&p->runs, 1);
}

/* Polls up to 5 s for the destructor; returns the seconds waited (or fails). */
static double wait_destructor(uobj_probe_t *p, double since)
{
    while (atomic_load(&p->runs) == 0) {
        if (now_s() - since > 5.0)
            fail_msg("the user object destructor did not run within 5 s");
        sleep_us(100);
    }
    return p->at - since;
}

/* begin_capture on the legacy stream (NULL or CU_STREAM_LEGACY) is refused through the table. */
static void test_begin_capture_legacy_refused(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_or_skip();
    const vpmm_stream_t legacy[2] = { NULL, (vpmm_stream_t)(uintptr_t)0x1 };
    for (int i = 0; i < 2; i++) {
        d->last_code = 0;
        d->last_call = NULL;
        vpmm_dres_t st = d->begin_capture(d, legacy[i], VPMM_CAPTURE_MODE_GLOBAL);
        printf("[driver_cuda] begin_capture(%s): status %d, CUresult %d from %s\n",
               i ? "CU_STREAM_LEGACY" : "NULL", (int)st, d->last_code,
               d->last_call ? d->last_call : "-");
        if (st == VPMM_DRV_OK) {
            vpmm_graph_t g = NULL;
            (void)d->end_capture(d, legacy[i], &g);
            fail_msg("the driver began a capture on the legacy default stream");
        }
        assert_int_equal(st, VPMM_DRV_NOT_SUPPORTED);
        assert_string_equal(d->last_call, "cuStreamBeginCapture");
    }
    vpmm_capture_status_t cs = VPMM_CAPTURE_ACTIVE;
    assert_int_equal(d->capture_info(d, NULL, &cs, NULL, NULL), VPMM_DRV_OK);
    assert_int_equal(cs, VPMM_CAPTURE_NONE);

    /* A capture on a real stream still works afterwards (an empty graph). Beginning it twice
     * must fail; what that does to the capture is printed (the host says 401, capture intact). */
    cudaStream_t s = NULL;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    vpmm_graph_t g = NULL;
    assert_int_equal(d->begin_capture(d, (vpmm_stream_t)s, VPMM_CAPTURE_MODE_RELAXED), VPMM_DRV_OK);
    vpmm_dres_t again = d->begin_capture(d, (vpmm_stream_t)s, VPMM_CAPTURE_MODE_RELAXED);
    int again_code = d->last_code;
    assert_int_equal(d->capture_info(d, (vpmm_stream_t)s, &cs, NULL, NULL), VPMM_DRV_OK);
    assert_int_equal(d->end_capture(d, (vpmm_stream_t)s, NULL), VPMM_DRV_INVALID);
    vpmm_dres_t end = d->end_capture(d, (vpmm_stream_t)s, &g);
    printf("[driver_cuda] begin_capture on a capturing stream: status %d, CUresult %d; capture "
           "then %d (1 active, 2 invalidated); end_capture: status %d, CUresult %d, graph %s\n",
           (int)again, again_code, (int)cs, (int)end, end ? d->last_code : 0, g ? "set" : "NULL");
    assert_int_not_equal(again, VPMM_DRV_OK);
    if (cs == VPMM_CAPTURE_ACTIVE) {
        assert_int_equal(end, VPMM_DRV_OK);
        assert_non_null(g);
    }
    if (g != NULL)
        CUDA_OK(cudaGraphDestroy((cudaGraph_t)g));
    CUDA_OK(cudaStreamDestroy(s));
    d->close(d);
}

/* create -> release: the destructor runs once, on a thread of CUDA's choosing. */
static void test_user_object_release(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_or_skip();
    static uobj_probe_t p;
    atomic_store(&p.runs, 0);
    vpmm_drv_uobj_t o = NULL;
    assert_int_equal(d->user_object_create(d, NULL, &p, &o), VPMM_DRV_INVALID);
    assert_int_equal(d->user_object_create(d, probe_dtor, &p, &o), VPMM_DRV_OK);
    assert_non_null(o);
    double t0 = now_s();
    assert_int_equal(d->user_object_release(d, o), VPMM_DRV_OK);
    double dt = wait_destructor(&p, t0);
    sleep_us(50000);
    printf("[driver_cuda] released user object: destructor ran after %.3f ms on thread %ld "
           "(test thread %ld)\n",
           dt * 1e3, p.tid, thread_id());
    assert_int_equal(atomic_load(&p.runs), 1);
    d->close(d);
}

/*
 * The whole path the pool takes: begin a capture through the table, find its graph with
 * capture_info, hand it a user object, capture real work, end the capture (same graph),
 * instantiate, launch twice, then destroy graph and exec; the destructor runs exactly once, and
 * not while the exec or one of its launches still holds the object.
 */
static void test_graph_user_object(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_or_skip();
    static uobj_probe_t p;
    atomic_store(&p.runs, 0);
    const size_t n = 4096;
    cudaStream_t cs_ = NULL;
    void *buf = NULL;
    CUDA_OK(cudaStreamCreateWithFlags(&cs_, cudaStreamNonBlocking));
    CUDA_OK(cudaMalloc(&buf, n)); /* before the capture: cudaMalloc would invalidate it */
    const vpmm_stream_t s = (vpmm_stream_t)cs_;

    assert_int_equal(d->begin_capture(d, s, VPMM_CAPTURE_MODE_GLOBAL), VPMM_DRV_OK);
    vpmm_capture_status_t cs = VPMM_CAPTURE_NONE;
    uint64_t id = 0;
    vpmm_graph_t g = NULL;
    assert_int_equal(d->capture_info(d, s, &cs, &id, &g), VPMM_DRV_OK);
    assert_int_equal(cs, VPMM_CAPTURE_ACTIVE);
    assert_true(id != 0);
    assert_non_null(g);

    /* Made and retained during the global-mode capture, as the pool does. */
    vpmm_drv_uobj_t o = NULL;
    assert_int_equal(d->user_object_create(d, probe_dtor, &p, &o), VPMM_DRV_OK);
    assert_int_equal(d->graph_retain_user_object(d, g, o), VPMM_DRV_OK);
    CUDA_OK(cudaMemsetAsync(buf, 0x5a, n, cs_));
    vpmm_graph_t g2 = NULL;
    assert_int_equal(d->capture_info(d, s, &cs, NULL, &g2), VPMM_DRV_OK);
    assert_int_equal(cs, VPMM_CAPTURE_ACTIVE); /* create and retain did not invalidate it */
    assert_ptr_equal(g2, g);

    vpmm_graph_t ended = NULL;
    assert_int_equal(d->end_capture(d, s, &ended), VPMM_DRV_OK);
    assert_ptr_equal(ended, g);
    assert_int_equal(d->capture_info(d, s, &cs, &id, &g2), VPMM_DRV_OK);
    assert_int_equal(cs, VPMM_CAPTURE_NONE);
    assert_null(g2);

    cudaGraphExec_t x = NULL;
    CUDA_OK(cudaGraphInstantiate(&x, (cudaGraph_t)ended, 0));
    CUDA_OK(cudaMemsetAsync(buf, 0, n, cs_));
    /* Hold the stream so both launches are still pending when the exec is destroyed. */
    static atomic_int gate;
    atomic_store(&gate, 0);
    CUDA_OK(cudaLaunchHostFunc(cs_, gate_wait, &gate));
    CUDA_OK(cudaGraphLaunch(x, cs_));
    CUDA_OK(cudaGraphLaunch(x, cs_));
    CUDA_OK(cudaGraphDestroy((cudaGraph_t)ended));
    sleep_us(20000);
    int after_graph = atomic_load(&p.runs); /* the exec still holds it */
    CUDA_OK(cudaGraphExecDestroy(x));
    sleep_us(50000);
    int after_exec = atomic_load(&p.runs); /* its launches are still pending */
    double t0 = now_s();
    atomic_store(&gate, 1);
    assert_int_equal(d->synchronize(d), VPMM_DRV_OK);
    double dt = wait_destructor(&p, t0);
    sleep_us(50000);
    printf("[driver_cuda] runs after graph destroy %d, after exec destroy with launches pending "
           "%d; user object destructor ran after %.3f ms on thread %ld (test thread %ld), %d "
           "time(s)\n",
           after_graph, after_exec, dt * 1e3, p.tid, thread_id(), atomic_load(&p.runs));
    assert_int_equal(after_graph, 0);
    assert_int_equal(after_exec, 0);
    assert_int_equal(atomic_load(&p.runs), 1);

    unsigned char host[64];
    CUDA_OK(cudaMemcpy(host, buf, sizeof host, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < sizeof host; i++)
        assert_int_equal(host[i], 0x5a); /* the captured memset ran */
    CUDA_OK(cudaFree(buf));
    CUDA_OK(cudaStreamDestroy(cs_));
    d->close(d);
}

static size_t absdiff(size_t a, size_t b)
{
    return a > b ? a - b : b - a;
}

/* Creates 64 GiB handles until the device says out of memory (at most 2 TiB asked). */
static void test_out_of_memory(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_or_skip();
    size_t g = gran(d);
    size_t free0 = 0, total = 0, free1 = 0;
    assert_int_equal(d->mem_get_info(d, &free0, &total), VPMM_DRV_OK);

    enum { max_handles = 32 };
    const size_t each = 64 * GiB;
    assert_int_equal(each % g, 0);
    vpmm_drv_handle_t h[max_handles];
    int n = 0;
    vpmm_dres_t st = VPMM_DRV_OK;
    double t0 = now_s();
    while (n < max_handles && (st = d->mem_create(d, each, &h[n])) == VPMM_DRV_OK)
        n++;
    double dt = now_s() - t0;
    int code = d->last_code;
    const char *call = d->last_call;
    for (int i = 0; i < n; i++)
        assert_int_equal(d->mem_release(d, h[i]), VPMM_DRV_OK);
    printf("[driver_cuda] OOM after %d x 64 GiB handles (%.1f ms): status %d, CUresult %d from "
           "%s\n",
           n, dt * 1e3, (int)st, code, call ? call : "-");
    assert_int_equal(st, VPMM_DRV_OUT_OF_MEMORY);
    assert_int_equal(code, CU_OUT_OF_MEMORY);
    assert_string_equal(call, "cuMemCreate");

    assert_int_equal(d->mem_get_info(d, &free1, &total), VPMM_DRV_OK);
    assert_true(absdiff(free0, free1) <= g);
    d->close(d);
}

/* One full cycle: reserve, 4 handles of 8 granules mapped side by side, one set_access, a copy,
 * then unmap / release / free. Returns the free memory seen while it was mapped. */
static size_t vmm_cycle(vpmm_driver_t *d, size_t g)
{
    enum { handles = 4, granules = 8 };
    const size_t each = granules * g, span = handles * each;
    uintptr_t va = 0;
    vpmm_drv_handle_t h[handles];
    assert_int_equal(d->va_reserve(d, 64 * span, g, &va), VPMM_DRV_OK);
    for (int i = 0; i < handles; i++) {
        assert_int_equal(d->mem_create(d, each, &h[i]), VPMM_DRV_OK);
        assert_int_equal(d->mem_map(d, va + i * each, each, h[i], 0), VPMM_DRV_OK);
    }
    assert_int_equal(d->set_access(d, va, span, NULL, 0), VPMM_DRV_OK);
    check_alias(va, va, span, 8);
    CUDA_OK(cudaDeviceSynchronize());
    size_t mid = 0, total = 0;
    assert_int_equal(d->mem_get_info(d, &mid, &total), VPMM_DRV_OK);
    for (int i = 0; i < handles; i++) {
        assert_int_equal(d->mem_unmap(d, va + i * each, each), VPMM_DRV_OK);
        assert_int_equal(d->mem_release(d, h[i]), VPMM_DRV_OK);
    }
    assert_int_equal(d->va_free(d, va, 64 * span), VPMM_DRV_OK);
    return mid;
}

static void test_release_returns_memory(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_or_skip();
    size_t g = gran(d);
    (void)vmm_cycle(d, g); /* warm-up: lazy runtime and copy-engine state */
    size_t free0 = 0, free1 = 0, total = 0;
    assert_int_equal(d->synchronize(d), VPMM_DRV_OK);
    assert_int_equal(d->mem_get_info(d, &free0, &total), VPMM_DRV_OK);
    size_t mid = vmm_cycle(d, g);
    assert_int_equal(d->synchronize(d), VPMM_DRV_OK);
    assert_int_equal(d->mem_get_info(d, &free1, &total), VPMM_DRV_OK);
    printf("[driver_cuda] free before %zu MiB, while mapped %zu MiB (%zu MiB mapped), after %zu "
           "MiB\n",
           free0 >> 20, mid >> 20, (32 * g) >> 20, free1 >> 20);
    assert_true(mid + 16 * g <= free0); /* the handles took real memory */
    assert_true(absdiff(free0, free1) <= g);
    d->close(d);
}

/*
 * Calls from a thread that has no current context take the push/pop path. Results are collected
 * and checked on the test thread (cmocka asserts must not longjmp across threads).
 */
struct thread_run {
    vpmm_driver_t *d;
    size_t g;
    vpmm_dres_t st[9];
};

static void *no_context_thread(void *arg)
{
    struct thread_run *t = arg;
    vpmm_driver_t *d = t->d;
    size_t free_b = 0, total_b = 0;
    uintptr_t va = 0;
    vpmm_drv_handle_t h = 0;
    vpmm_drv_event_t ev = NULL;
    vpmm_capture_status_t cs = VPMM_CAPTURE_INVALIDATED;
    uint64_t id = 1;
    t->st[0] = d->mem_get_info(d, &free_b, &total_b);
    t->st[1] = d->va_reserve(d, 4 * t->g, t->g, &va);
    t->st[2] = d->mem_create(d, t->g, &h);
    t->st[3] = d->mem_map(d, va, t->g, h, 0);
    t->st[4] = d->set_access(d, va, t->g, NULL, 0);
    t->st[5] = d->event_create(d, NULL, &ev);
    t->st[6] = d->event_record(d, ev, NULL);
    t->st[7] = d->synchronize(d);
    t->st[8] = d->capture_info(d, NULL, &cs, &id, NULL);
    if (t->st[8] == VPMM_DRV_OK && (cs != VPMM_CAPTURE_NONE || id != 0))
        t->st[8] = VPMM_DRV_ERROR;
    if (t->st[5] == VPMM_DRV_OK) {
        if (d->event_query(d, ev) != VPMM_DRV_OK || d->event_destroy(d, ev) != VPMM_DRV_OK)
            t->st[5] = VPMM_DRV_ERROR;
    }
    if (t->st[3] == VPMM_DRV_OK && d->mem_unmap(d, va, t->g) != VPMM_DRV_OK)
        t->st[3] = VPMM_DRV_ERROR;
    if (t->st[2] == VPMM_DRV_OK && d->mem_release(d, h) != VPMM_DRV_OK)
        t->st[2] = VPMM_DRV_ERROR;
    if (t->st[1] == VPMM_DRV_OK && d->va_free(d, va, 4 * t->g) != VPMM_DRV_OK)
        t->st[1] = VPMM_DRV_ERROR;
    return NULL;
}

static void test_thread_without_context(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_or_skip();
    struct thread_run t = { .d = d, .g = gran(d) };
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, no_context_thread, &t), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    for (size_t i = 0; i < sizeof t.st / sizeof t.st[0]; i++) {
        if (t.st[i] != VPMM_DRV_OK)
            print_error("step %zu: status %d (CUresult %d from %s)\n", i, (int)t.st[i],
                        d->last_code, d->last_call ? d->last_call : "-");
        assert_int_equal(t.st[i], VPMM_DRV_OK);
    }
    d->close(d);
}

/* Instances share the primary context; each retains and releases it once. */
static void test_open_twice(void **state)
{
    (void)state;
    vpmm_driver_t *a = open_or_skip();
    vpmm_driver_t *b = NULL;
    assert_int_equal(vpmm_driver_cuda_open(0, 0, &b), VPMM_DRV_OK);
    a->close(a);
    size_t free_b = 0, total_b = 0;
    assert_int_equal(b->mem_get_info(b, &free_b, &total_b), VPMM_DRV_OK);
    b->close(b);
    CUDA_OK(cudaSetDevice(0));
    assert_int_equal(vpmm_driver_cuda_open(-1, 0, &a), VPMM_DRV_OK);
    assert_int_equal(a->mem_get_info(a, &free_b, &total_b), VPMM_DRV_OK);
    a->close(a);
}

#define SKIP_EXIT 77 /* the GPU group's exit status when every test skipped (ctest: Skipped) */

int main(int argc, char **argv)
{
    const struct CMUnitTest anywhere[] = {
        cmocka_unit_test(test_device_count_without_crash),
        cmocka_unit_test(test_load_error_explains_no_device),
        cmocka_unit_test(test_open_null_out),
        cmocka_unit_test(test_open_current_device),
        cmocka_unit_test(test_open_out_of_range),
        cmocka_unit_test(test_driver_presence_consistent),
    };
    const struct CMUnitTest gpu[] = {
        cmocka_unit_test(test_granularity),
        cmocka_unit_test(test_reserve_8tib),
        cmocka_unit_test(test_invalid_arguments),
        cmocka_unit_test(test_alias_two_addresses),
        cmocka_unit_test(test_nonzero_offset_map),
        cmocka_unit_test(test_event_record_query),
        cmocka_unit_test(test_stream_wait_event),
        cmocka_unit_test(test_capture_info),
        cmocka_unit_test(test_capture_invalidated),
        cmocka_unit_test(test_capture_legacy_stream_query),
        cmocka_unit_test(test_no_capture_on_legacy_stream),
        cmocka_unit_test(test_begin_capture_legacy_refused),
        cmocka_unit_test(test_user_object_release),
        cmocka_unit_test(test_graph_user_object),
        cmocka_unit_test(test_out_of_memory),
        cmocka_unit_test(test_release_returns_memory),
        cmocka_unit_test(test_thread_without_context),
        cmocka_unit_test(test_open_twice),
    };
    const char *group = argc > 1 ? argv[1] : "";
    int failed = 0, gpu_failed;

    if (argc > 2 || (argc == 2 && strcmp(group, "anywhere") != 0 && strcmp(group, "gpu") != 0)) {
        fprintf(stderr, "usage: %s [anywhere | gpu]   (no argument: both groups)\n", argv[0]);
        return 2;
    }
    if (strcmp(group, "gpu") != 0)
        failed = cmocka_run_group_tests_name("driver_cuda (anywhere)", anywhere, NULL, NULL);
    if (strcmp(group, "anywhere") == 0)
        return failed;
    gpu_failed = cmocka_run_group_tests_name("driver_cuda (GPU)", gpu, NULL, NULL);
    if (strcmp(group, "gpu") == 0 && gpu_failed == 0 && !gpu_opened)
        return SKIP_EXIT;
    return failed + gpu_failed;
}
