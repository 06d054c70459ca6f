/*
 * test_gpu_multi.c — several GPUs and processes, on real devices: one pool per device working
 * whatever device is current, peer access (vpmm_pool_grant_access: a kernel of device 1 writes
 * device 0's pool memory, also memory mapped after the grant by growth and by defragmentation),
 * a block used by a stream of another device reused only after that stream's work, and CUDA IPC
 * (vpmm_ipc_export / _open / _close) between two processes: the child is this program run again
 * with "--ipc-child" (a fresh process: CUDA cannot be used in a fork of an initialised process),
 * the handle passed through a pipe. Data is written with the pattern kernels and checked on the
 * device that owns the memory.
 *
 * Skips without a GPU (VPMM_TEST_REQUIRE_GPU=1: fails); the tests that need two devices with peer
 * access skip with fewer (VPMM_TEST_GPUS=2: fail instead, for runs on 2-GPU machines). The IPC
 * tests need one device. Every pool is checked (vpmm_pool_check: I14 asks cuMemGetAccess of
 * every page for the pool's device and its peers) after each step.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "gpu_kernels.h"
#include "gpu_test_util.h"

#define TAG "[gpu_multi]"

static int ndev;
static int peers_ok; /* devices 0 and 1 reach each other */

static int probe(char *why, size_t len)
{
    if (!gpu_probe_pool(why, len, NULL))
        return 0;
    CUDA_OK(cudaGetDeviceCount(&ndev));
    if (ndev >= 2) {
        int a = 0, b = 0;
        CUDA_OK(cudaDeviceCanAccessPeer(&a, 0, 1));
        CUDA_OK(cudaDeviceCanAccessPeer(&b, 1, 0));
        peers_ok = a && b;
    }
    print_message("%s %d device(s)%s\n", TAG, ndev,
                  ndev >= 2 ? (peers_ok ? ", 0 and 1 peers" : ", 0 and 1 NOT peers") : "");
    return 1;
}

#define REQUIRE_GPU() GPU_REQUIRE(TAG, probe)

/* The two-device tests start here. */
static void require_two(void)
{
    const char *want = getenv("VPMM_TEST_GPUS");
    REQUIRE_GPU();
    if (ndev >= 2 && peers_ok)
        return;
    if (want != NULL && atoi(want) >= 2)
        fail_msg("VPMM_TEST_GPUS=%s, but %d device(s)%s", want, ndev,
                 ndev >= 2 ? " without peer access between 0 and 1" : "");
    print_message("%s skipped: needs two devices with peer access\n", TAG);
    skip();
}

static vpmm_pool_t *pool_on(int device)
{
    vpmm_config_t cfg;
    vpmm_pool_t *p = NULL;
    vpmm_config_init(&cfg);
    cfg.backend = VPMM_BACKEND_CUDA;
    cfg.ignore_env = 1;
    cfg.va_size = VA_SMALL;
    cfg.device = device;
    cfg.small_bytes = 1;
    if (vpmm_pool_create(&cfg, &p) != VPMM_SUCCESS)
        fail_msg("vpmm_pool_create(device %d): %s", device, vpmm_last_error());
    CHECK_POOL(p);
    return p;
}

static void destroy(vpmm_pool_t *p)
{
    CHECK_POOL(p);
    assert_int_equal(vpmm_pool_destroy(p), VPMM_SUCCESS);
}

/* Mismatches of [ptr, ptr + n) against seed, checked on `device` (the memory's own). */
static unsigned long long mismatches(int device, const void *ptr, size_t n, uint32_t seed)
{
    unsigned long long *dev = NULL, host = 0;
    int cur = 0;
    CUDA_OK(cudaGetDevice(&cur));
    CUDA_OK(cudaSetDevice(device));
    CUDA_OK(cudaMalloc((void **)&dev, sizeof *dev));
    CUDA_OK(cudaMemset(dev, 0, sizeof *dev));
    GK_OK(gk_check(ptr, n, seed, dev, 0));
    CUDA_OK(cudaMemcpy(&host, dev, sizeof host, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaFree(dev));
    CUDA_OK(cudaSetDevice(cur));
    return host;
}

/* Fills [ptr, ptr + n) with seed from a kernel of `device`, and waits for it. */
static void fill_from(int device, void *ptr, size_t n, uint32_t seed)
{
    int cur = 0;
    CUDA_OK(cudaGetDevice(&cur));
    CUDA_OK(cudaSetDevice(device));
    GK_OK(gk_fill(ptr, n, seed, 0));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaSetDevice(cur));
}

/* Each pool allocates, frees, grows and defragments whatever device is current. */
static void test_pools_whatever_device_is_current(void **state)
{
    vpmm_pool_t *p0, *p1;
    void *a[8], *big;
    int dev = -1;
    (void)state;
    require_two();
    p0 = pool_on(0);
    p1 = pool_on(1);
    assert_int_equal(vpmm_pool_device(p1, &dev), VPMM_SUCCESS);
    assert_int_equal(dev, 1);
    CUDA_OK(cudaSetDevice(1)); /* the other device current for pool 0's calls */
    for (int i = 0; i < 8; i++)
        assert_int_equal(vpmm_malloc(p0, 2 * MiB, NULL, &a[i]), VPMM_SUCCESS);
    for (int i = 0; i < 8; i += 2)
        assert_int_equal(vpmm_free(p0, a[i]), VPMM_SUCCESS);
    assert_int_equal(vpmm_set_max_bytes(p0, 16 * MiB), VPMM_SUCCESS);
    assert_int_equal(vpmm_malloc(p0, 8 * MiB, NULL, &big), VPMM_SUCCESS); /* remaps */
    assert_true(tstats(p0).pages_remapped > 0);
    CHECK_POOL(p0);
    CUDA_OK(cudaSetDevice(0));
    fill_from(0, big, 8 * MiB, 5);
    assert_int_equal(mismatches(0, big, 8 * MiB, 5), 0);
    CUDA_OK(cudaSetDevice(0)); /* and pool 1 while device 0 is current */
    {
        void *x;
        assert_int_equal(vpmm_malloc(p1, 5 * MiB, NULL, &x), VPMM_SUCCESS);
        fill_from(1, x, 5 * MiB, 6);
        assert_int_equal(mismatches(1, x, 5 * MiB, 6), 0);
        assert_int_equal(vpmm_free(p1, x), VPMM_SUCCESS);
    }
    assert_int_equal(vpmm_free(p0, big), VPMM_SUCCESS);
    for (int i = 1; i < 8; i += 2)
        assert_int_equal(vpmm_free(p0, a[i]), VPMM_SUCCESS);
    CUDA_OK(cudaDeviceSynchronize());
    destroy(p1);
    destroy(p0);
}

/* After a grant a kernel of device 1 writes device 0's pool memory: what was mapped before the
 * grant, growth after it, a defragmentation's remap after it. */
static void test_peer_kernels_after_grant(void **state)
{
    vpmm_pool_t *p0;
    void *before, *grown, *x[6], *remapped;
    vpmm_stats_t s;
    (void)state;
    require_two();
    CUDA_OK(cudaSetDevice(0));
    p0 = pool_on(0);
    assert_int_equal(vpmm_malloc(p0, 6 * MiB, NULL, &before), VPMM_SUCCESS);
    assert_int_equal(vpmm_pool_grant_access(p0, 1), VPMM_SUCCESS);
    CHECK_POOL(p0);
    s = tstats(p0);
    assert_int_equal(s.peers, 2);
    assert_true(s.peer_grants >= 1);
    fill_from(1, before, 6 * MiB, 11);
    assert_int_equal(mismatches(0, before, 6 * MiB, 11), 0);
    assert_int_equal(vpmm_malloc(p0, 10 * MiB, NULL, &grown), VPMM_SUCCESS);
    CHECK_POOL(p0);
    fill_from(1, grown, 10 * MiB, 12);
    assert_int_equal(mismatches(0, grown, 10 * MiB, 12), 0);
    assert_int_equal(vpmm_free(p0, grown), VPMM_SUCCESS);
    for (int i = 0; i < 6; i++)
        assert_int_equal(vpmm_malloc(p0, 2 * MiB, NULL, &x[i]), VPMM_SUCCESS);
    for (int i = 0; i < 6; i += 2)
        assert_int_equal(vpmm_free(p0, x[i]), VPMM_SUCCESS);
    assert_int_equal(vpmm_free(p0, before), VPMM_SUCCESS);
    CUDA_OK(cudaDeviceSynchronize());
    /* Under a cap at what is mapped, the free pages (scattered between x[1], x[3], x[5]) are
     * gathered by remapping: the new mapping must name device 1 too. */
    {
        vpmm_stats_t s0 = tstats(p0);
        size_t want = s0.free_bytes / (2 * MiB) * (2 * MiB);
        assert_int_equal(vpmm_set_max_bytes(p0, s0.mapped_bytes), VPMM_SUCCESS);
        assert_true(want >= 8 * MiB);
        assert_int_equal(vpmm_malloc(p0, want, NULL, &remapped), VPMM_SUCCESS);
        assert_true(tstats(p0).pages_remapped > 0);
        CHECK_POOL(p0);
        fill_from(1, remapped, want, 13);
        assert_int_equal(mismatches(0, remapped, want, 13), 0);
    }
    assert_int_equal(vpmm_free(p0, remapped), VPMM_SUCCESS);
    for (int i = 1; i < 6; i += 2)
        assert_int_equal(vpmm_free(p0, x[i]), VPMM_SUCCESS);
    CUDA_OK(cudaDeviceSynchronize());
    destroy(p0);
}

/* A block used by a stream of device 1 (record_stream), freed, and allocated again on device 0:
 * the new owner's write lands after device 1's (the wait or the delay was inserted). */
static void test_record_stream_of_device_1(void **state)
{
    vpmm_pool_t *p0;
    cudaStream_t s0, s1;
    void *x, *y;
    (void)state;
    require_two();
    CUDA_OK(cudaSetDevice(0));
    p0 = pool_on(0);
    assert_int_equal(vpmm_pool_grant_access(p0, 1), VPMM_SUCCESS);
    s0 = gpu_stream_new(0);
    CUDA_OK(cudaSetDevice(1));
    CUDA_OK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CUDA_OK(cudaSetDevice(0));
    assert_int_equal(vpmm_malloc(p0, 8 * MiB, s0, &x), VPMM_SUCCESS);
    CUDA_OK(cudaStreamSynchronize(s0));
    CUDA_OK(cudaSetDevice(1));
    GK_OK(gk_spin(s1, 200ull * 1000 * 1000)); /* ~0.1 s: device 1 is still busy at the free */
    GK_OK(gk_fill(x, 8 * MiB, 21, s1));
    CUDA_OK(cudaSetDevice(0));
    assert_int_equal(vpmm_record_stream(p0, x, s1), VPMM_SUCCESS);
    assert_int_equal(vpmm_free(p0, x), VPMM_SUCCESS);
    assert_int_equal(vpmm_malloc(p0, 8 * MiB, s0, &y), VPMM_SUCCESS);
    GK_OK(gk_fill(y, 8 * MiB, 22, s0));
    CUDA_OK(cudaSetDevice(1));
    CUDA_OK(cudaStreamSynchronize(s1));
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaStreamSynchronize(s0));
    assert_int_equal(mismatches(0, y, 8 * MiB, 22), 0); /* device 1's write did not land over it */
    CHECK_POOL(p0);
    assert_int_equal(vpmm_free(p0, y), VPMM_SUCCESS);
    CUDA_OK(cudaDeviceSynchronize());
    assert_int_equal(vpmm_stream_release(p0, s1), VPMM_SUCCESS);
    CUDA_OK(cudaSetDevice(1));
    CUDA_OK(cudaStreamDestroy(s1));
    CUDA_OK(cudaSetDevice(0));
    gpu_stream_done(p0, s0);
    destroy(p0);
}

/* ---- IPC ---------------------------------------------------------------------------------- */

/* The child: reads a handle (its length, then its bytes) from fd 0, opens it on a pool of
 * `device`, checks seed, writes seed + 1 and closes. Exit 0 when all went well. */
static int ipc_child(int device, uint32_t seed)
{
    unsigned char buf[8192];
    size_t len = 0;
    vpmm_pool_t *p;
    void *q = NULL;
    if (read(0, &len, sizeof len) != (ssize_t)sizeof len || len > sizeof buf ||
        read(0, buf, len) != (ssize_t)len)
        return 10;
    if (cudaSetDevice(device) != cudaSuccess)
        return 11;
    {
        vpmm_config_t cfg;
        vpmm_config_init(&cfg);
        cfg.backend = VPMM_BACKEND_CUDA;
        cfg.ignore_env = 1;
        cfg.va_size = VA_SMALL;
        cfg.device = device;
        if (vpmm_pool_create(&cfg, &p) != VPMM_SUCCESS)
            return 12;
    }
    if (vpmm_ipc_open(p, buf, len, &q) != VPMM_SUCCESS) {
        fprintf(stderr, "child: vpmm_ipc_open: %s\n", vpmm_last_error());
        return 13;
    }
    {
        unsigned long long *dev = NULL, host = 1;
        if (cudaMalloc((void **)&dev, sizeof *dev) != cudaSuccess ||
            cudaMemset(dev, 0, sizeof *dev) != cudaSuccess ||
            gk_check(q, 6 * MiB, seed, dev, 0) != 0 ||
            cudaMemcpy(&host, dev, sizeof host, cudaMemcpyDeviceToHost) != cudaSuccess || host != 0)
            return 14;
        cudaFree(dev);
    }
    if (gk_fill(q, 6 * MiB, seed + 1, 0) != 0 || cudaDeviceSynchronize() != cudaSuccess)
        return 15;
    if (vpmm_ipc_close(p, q) != VPMM_SUCCESS || vpmm_pool_check(p, stderr) != 0 ||
        vpmm_pool_destroy(p) != VPMM_SUCCESS)
        return 16;
    return 0;
}

static const char *self_exe;

/* Runs this program with --ipc-child <device> <seed>, hands it the handle; its exit status. */
static int run_child(int device, uint32_t seed, const unsigned char *h, size_t len)
{
    int in[2];
    pid_t pid;
    int status = 0;
    assert_int_equal(pipe(in), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char dev[16], sd[16];
        dup2(in[0], 0);
        close(in[0]);
        close(in[1]);
        snprintf(dev, sizeof dev, "%d", device);
        snprintf(sd, sizeof sd, "%u", seed);
        execl(self_exe, self_exe, "--ipc-child", dev, sd, (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    assert_int_equal(write(in[1], &len, sizeof len), (ssize_t)sizeof len);
    assert_int_equal(write(in[1], h, len), (ssize_t)len);
    close(in[1]);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

/* Another process maps a block of this one, reads what this one wrote and writes; the block is
 * not reused while it holds it (this process frees first), and is after. */
static void run_ipc(int child_device)
{
    vpmm_pool_t *p0;
    unsigned char h[8192];
    size_t len = 0;
    void *x, *y;
    CUDA_OK(cudaSetDevice(0));
    p0 = pool_on(0);
    assert_int_equal(vpmm_malloc(p0, 6 * MiB, NULL, &x), VPMM_SUCCESS);
    fill_from(0, x, 6 * MiB, 31);
    assert_int_equal(vpmm_ipc_export(p0, x, h, sizeof h, &len), VPMM_SUCCESS);
    assert_true(len <= VPMM_IPC_HANDLE_BYTES(6 * MiB, tstats(p0).page_size));
    assert_int_equal(run_child(child_device, 31, h, len), 0);
    assert_int_equal(mismatches(0, x, 6 * MiB, 32), 0); /* the child's writes */
    assert_int_equal(tstats(p0).ipc_shared, 1);
    assert_int_equal(vpmm_free(p0, x), VPMM_SUCCESS); /* the child closed: an ordinary free */
    assert_int_equal(tstats(p0).ipc_shared, 0);
    /* Exported again and freed before the child opens it: kept until the child closes. */
    assert_int_equal(vpmm_malloc(p0, 6 * MiB, NULL, &x), VPMM_SUCCESS);
    fill_from(0, x, 6 * MiB, 41);
    assert_int_equal(vpmm_ipc_export(p0, x, h, sizeof h, &len), VPMM_SUCCESS);
    assert_int_equal(vpmm_free(p0, x), VPMM_SUCCESS);
    assert_int_equal(vpmm_malloc(p0, 6 * MiB, NULL, &y), VPMM_SUCCESS);
    assert_ptr_not_equal(y, x);
    fill_from(0, y, 6 * MiB, 51);
    assert_int_equal(run_child(child_device, 41, h, len), 0); /* still the exporter's data */
    assert_int_equal(vpmm_free(p0, y), VPMM_SUCCESS);
    assert_int_equal(vpmm_trim(p0, SIZE_MAX, NULL), VPMM_SUCCESS); /* releases the deferred free */
    assert_int_equal(tstats(p0).ipc_shared, 0);
    CUDA_OK(cudaDeviceSynchronize());
    destroy(p0);
}

static void test_ipc_same_device(void **state)
{
    (void)state;
    REQUIRE_GPU();
    run_ipc(0);
}

static void test_ipc_peer_device(void **state)
{
    (void)state;
    require_two();
    run_ipc(1);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pools_whatever_device_is_current),
        cmocka_unit_test(test_peer_kernels_after_grant),
        cmocka_unit_test(test_record_stream_of_device_1),
        cmocka_unit_test(test_ipc_same_device),
        cmocka_unit_test(test_ipc_peer_device),
    };
    if (argc == 4 && strcmp(argv[1], "--ipc-child") == 0)
        return ipc_child(atoi(argv[2]), (uint32_t)strtoul(argv[3], NULL, 10));
    (void)argv;
    self_exe = "/proc/self/exe";
    return gpu_exit_status(cmocka_run_group_tests(tests, NULL, NULL));
}
