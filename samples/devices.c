/*
 * devices.c — two devices and two processes on vpmm; it uses only include/vpmm.h (and, on a GPU,
 * the CUDA runtime's cudaMemcpy to write and read device memory).
 *
 * 1. One pool per device (config.device 0 and 1). Device 1 is granted access to device 0's pool
 *    (vpmm_pool_grant_access): memory mapped with cuMemMap is reachable from another device only
 *    that way, and the grant covers what the pool maps later too.
 * 2. A block of device 0's pool is shared with another process: vpmm_ipc_export writes its handle,
 *    the child (this program run again with --child, reading the handle on its stdin) opens it on
 *    a pool of its own with vpmm_ipc_open, checks what the parent wrote, writes its answer and
 *    closes it. The parent frees its block before the child is done: vpmm keeps the memory out of
 *    every free list until the child's close (the lifetime rule of docs/DEVICES.md), and reads
 *    the child's answer.
 *
 * On the CUDA backend it needs one GPU (the peer part two GPUs with peer access; with one it says
 * so and skips that part). Without a GPU it asks for the host emulation backend by name, as the
 * other samples do, whose devices share one emulated machine when config.device is set.
 * Exit status: 0 on success, 1 on any failure (with the reason on stderr).
 */
#define _POSIX_C_SOURCE 200809L /* setenv, fork, pipe */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vpmm.h"
#ifdef VPMM_SAMPLE_CUDART
#include <cuda_runtime_api.h>
#endif

#define BLOCK ((size_t)6 << 20)

static vpmm_backend_t backend = VPMM_BACKEND_DEFAULT;

static int fail(const char *what, vpmm_status_t st)
{
    fprintf(stderr, "devices: %s failed: %s (%s)\n", what, vpmm_strerror(st), vpmm_last_error());
    return 1;
}

static vpmm_status_t pool_on(int device, vpmm_pool_t **out)
{
    vpmm_config_t cfg;
    vpmm_config_init(&cfg);
    cfg.backend = backend;
    cfg.device = device;
    return vpmm_pool_create(&cfg, out);
}

static int on_gpu(vpmm_pool_t *pool)
{
    return strcmp(vpmm_pool_backend_name(pool), "cuda") == 0;
}

/* Copies between device memory and the host: cudaMemcpy on a GPU, memcpy on the host backend
 * (whose device memory is the host's). */
static int copy(vpmm_pool_t *pool, void *dst, const void *src, size_t n)
{
#ifdef VPMM_SAMPLE_CUDART
    if (on_gpu(pool))
        return cudaMemcpy(dst, src, n, cudaMemcpyDefault) == cudaSuccess ? 0 : -1;
#else
    if (on_gpu(pool)) {
        fprintf(stderr, "devices: built without the CUDA runtime: cannot touch GPU memory\n");
        return -1;
    }
#endif
    memcpy(dst, src, n);
    return 0;
}

static void pattern(unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(seed + i * 7);
}

static int has_pattern(const unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != (unsigned char)(seed + i * 7))
            return 0;
    return 1;
}

/* The child: opens the handle on its stdin, checks seed 1, writes seed 2, closes. */
static int child(void)
{
    unsigned char handle[4096], *buf = malloc(BLOCK);
    size_t len = 0;
    vpmm_pool_t *pool;
    vpmm_status_t st;
    void *p = NULL;
    int bad = 0;
    if (buf == NULL || read(0, &len, sizeof len) != (ssize_t)sizeof len || len > sizeof handle ||
        read(0, handle, len) != (ssize_t)len) {
        fprintf(stderr, "devices (child): no handle on stdin\n");
        return 1;
    }
    if ((st = pool_on(0, &pool)) != VPMM_SUCCESS)
        return fail("vpmm_pool_create (child)", st);
    if ((st = vpmm_ipc_open(pool, handle, len, &p)) != VPMM_SUCCESS)
        return fail("vpmm_ipc_open", st);
    bad |= copy(pool, buf, p, BLOCK) != 0 || !has_pattern(buf, BLOCK, 1);
    pattern(buf, BLOCK, 2);
    bad |= copy(pool, p, buf, BLOCK) != 0;
    printf("child %d: opened the parent's block at %p, read its data (%s), wrote its answer\n",
           (int)getpid(), p, bad ? "WRONG" : "as written");
    if ((st = vpmm_ipc_close(pool, p)) != VPMM_SUCCESS)
        return fail("vpmm_ipc_close", st);
    vpmm_pool_destroy(pool);
    free(buf);
    return bad;
}

/* Part 1: device 1 gets access to device 0's pool. */
static int peers(vpmm_pool_t *p0)
{
    vpmm_pool_t *p1 = NULL;
    vpmm_stats_t s;
    vpmm_status_t st = pool_on(1, &p1);
    void *before = NULL, *after = NULL;
    if (st == VPMM_ERROR_NO_DEVICE || st == VPMM_ERROR_NOT_SUPPORTED) {
        printf("one device only: the peer part is skipped (%s)\n", vpmm_last_error());
        return 0;
    }
    if (st != VPMM_SUCCESS)
        return fail("vpmm_pool_create (device 1)", st);
    if ((st = vpmm_malloc(p0, BLOCK, NULL, &before)) != VPMM_SUCCESS)
        return fail("vpmm_malloc", st);
    st = vpmm_pool_grant_access(p0, 1);
    if (st == VPMM_ERROR_NOT_SUPPORTED) {
        printf("devices 0 and 1 have no peer access: %s\n", vpmm_last_error());
    } else if (st != VPMM_SUCCESS) {
        return fail("vpmm_pool_grant_access", st);
    } else {
        if ((st = vpmm_malloc(p0, 2 * BLOCK, NULL, &after)) != VPMM_SUCCESS)
            return fail("vpmm_malloc", st);
        vpmm_get_stats(p0, &s);
        printf("device 0's pool: peers 0x%llx, %llu set-access calls named the peer (the grant's "
               "and the later growth's); its memory mapped before and after the grant is device "
               "1's to use too\n",
               (unsigned long long)s.peers, (unsigned long long)s.peer_grants);
        vpmm_free(p0, after);
    }
    vpmm_free(p0, before);
    if (vpmm_pool_check(p0, stderr) != 0)
        return 1;
    vpmm_pool_destroy(p1);
    return 0;
}

/* Part 2: a block shared with a child process, freed here before the child is done. */
static int share(vpmm_pool_t *pool, const char *self)
{
    unsigned char handle[4096], *buf = malloc(BLOCK);
    size_t len = 0;
    void *p = NULL, *q = NULL;
    int in[2], status = 0;
    vpmm_stats_t s;
    vpmm_status_t st;
    pid_t pid;
    if (buf == NULL || (st = vpmm_malloc(pool, BLOCK, NULL, &p)) != VPMM_SUCCESS)
        return fail("vpmm_malloc", buf == NULL ? VPMM_ERROR_HOST_OUT_OF_MEMORY : st);
    pattern(buf, BLOCK, 1);
    if (copy(pool, p, buf, BLOCK) != 0)
        return 1;
    if ((st = vpmm_ipc_export(pool, p, handle, sizeof handle, &len)) != VPMM_SUCCESS) {
        if (st == VPMM_ERROR_NOT_SUPPORTED) { /* e.g. VPMM_IPC=0, or no POSIX-fd handles */
            printf("this pool's memory cannot be shared: %s\n", vpmm_last_error());
            vpmm_free(pool, p);
            free(buf);
            return 0;
        }
        return fail("vpmm_ipc_export", st);
    }
    printf("exported a %zu MiB block: a handle of %zu bytes\n", BLOCK >> 20, len);
    /* Freed before the child is done: kept out of every free list until its close. */
    vpmm_free(pool, p);
    vpmm_get_stats(pool, &s);
    printf("freed here; other processes may still map it: ipc_shared = %llu\n",
           (unsigned long long)s.ipc_shared);
    fflush(stdout); /* before the child writes its own lines */
    if (pipe(in) != 0 || (pid = fork()) < 0)
        return 1;
    if (pid == 0) {
        dup2(in[0], 0);
        close(in[0]);
        close(in[1]);
        execl(self, self, "--child", (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    if (write(in[1], &len, sizeof len) != (ssize_t)sizeof len ||
        write(in[1], handle, len) != (ssize_t)len)
        return 1;
    close(in[1]);
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "devices: the child failed\n");
        return 1;
    }
    /* The child closed: a slow path (here a trim) releases the block; read the answer there. */
    vpmm_trim(pool, SIZE_MAX, NULL);
    vpmm_get_stats(pool, &s);
    if ((st = vpmm_malloc(pool, BLOCK, NULL, &q)) != VPMM_SUCCESS)
        return fail("vpmm_malloc", st);
    if (copy(pool, buf, q, BLOCK) != 0)
        return 1;
    {
        int answered = q == p && has_pattern(buf, BLOCK, 2);
        printf("the child closed it: ipc_shared = %llu; allocated again, the same memory (%s) "
               "holds the child's answer: %s\n",
               (unsigned long long)s.ipc_shared, q == p ? "the same address" : "another address",
               answered ? "yes" : "NO");
        vpmm_free(pool, q);
        free(buf);
        return answered ? 0 : 1;
    }
}

int main(int argc, char **argv)
{
    vpmm_pool_t *pool = NULL;
    vpmm_status_t st;
    const char *env = getenv("VPMM_BACKEND");
    (void)argv;
    if (env != NULL && strcmp(env, "host") == 0)
        backend = VPMM_BACKEND_HOST;
    if (argc == 2 && strcmp(argv[1], "--child") == 0)
        return child();
    st = pool_on(0, &pool);
    if (st == VPMM_ERROR_NO_DEVICE && env == NULL) {
        printf("no CUDA device (%s),\nso the sample asks for the host emulation: config.backend = "
               "VPMM_BACKEND_HOST\n",
               vpmm_last_error());
        setenv("VPMM_BACKEND", "host", 1); /* the child's too */
        backend = VPMM_BACKEND_HOST;
        st = pool_on(0, &pool);
    }
    if (st != VPMM_SUCCESS)
        return fail("vpmm_pool_create", st);
    printf("pool on device 0, backend %s\n", vpmm_pool_backend_name(pool));
    if (peers(pool) != 0 || share(pool, "/proc/self/exe") != 0)
        return 1;
    if (vpmm_pool_check(pool, stderr) != 0)
        return 1;
    vpmm_pool_destroy(pool);
    printf("done\n");
    return 0;
}
