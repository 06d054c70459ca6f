/*
 * demo.c — a first tour of vpmm (the README's demo); it uses only include/vpmm.h.
 *
 * It creates a pool on the default backend, CUDA (the VPMM_* environment variables apply, so
 * VPMM_BACKEND=host asks for the emulation). On a machine without a GPU that fails with
 * VPMM_ERROR_NO_DEVICE — vpmm never hands out host memory unasked — and the demo then asks for the
 * host emulation backend by name and says so (unless VPMM_BACKEND chose a backend). It allocates on
 * two streams and writes every block, frees every other block of stream A so that the free
 * memory is fragmented, then asks for a block larger than any free piece: the pool maps those
 * free physical pages at a new address instead of copying or growing. It verifies the data,
 * prints the statistics and the region map, frees everything and destroys the pool.
 * Exit status: 0 on success, 1 on any failure (with the reason on stderr).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vpmm.h"
#ifdef VPMM_DEMO_KERNELS
#include "demo_kernels.h"
#endif

#define MIB (1024.0 * 1024.0)
enum { NA = 8, NB = 4, NBLOCKS = NA + NB + 2 }; /* blocks of stream A, of B, and two more */

typedef struct block {
    void *p;
    size_t size;
    vpmm_stream_t stream;
} block_t;

static int on_gpu; /* CUDA backend: kernels write and check the memory; host backend: the CPU */

static int fail(const char *what, vpmm_status_t st)
{
    fprintf(stderr, "demo: %s failed: %s (%s)\n", what, vpmm_strerror(st), vpmm_last_error());
    return 1;
}

/* Allocates block number `seed` on stream s and writes it: byte i is (seed + i) % 256. */
static int new_block(vpmm_pool_t *pool, block_t *b, size_t size, vpmm_stream_t s, unsigned seed)
{
    vpmm_status_t st = vpmm_malloc(pool, size, s, &b->p);
    if (st != VPMM_SUCCESS)
        return fail("vpmm_malloc", st);
    b->size = size;
    b->stream = s;
#ifdef VPMM_DEMO_KERNELS
    if (on_gpu) {
        int e = demo_gpu_fill(b->p, size, seed, s); /* queued on s: no host synchronisation */
        if (e != 0)
            fprintf(stderr, "demo: fill kernel: %s\n", sample_gpu_error(e));
        return e != 0;
    }
#endif
    for (size_t i = 0; i < size; i++)
        ((unsigned char *)b->p)[i] = (unsigned char)(seed + i);
    return 0;
}

/* Bytes of block `seed` that do not hold its pattern (checked on the block's stream). */
static size_t bad_bytes(const block_t *b, unsigned seed)
{
    size_t bad = 0;
#ifdef VPMM_DEMO_KERNELS
    if (on_gpu)
        return demo_gpu_count_bad(b->p, b->size, seed, b->stream, &bad) == 0 ? bad : b->size;
#endif
    for (size_t i = 0; i < b->size; i++)
        bad += ((unsigned char *)b->p)[i] != (unsigned char)(seed + i);
    return bad;
}

static void print_stats(const vpmm_stats_t *s)
{
    const struct {
        const char *what;
        double value;
        const char *unit;
    } rows[] = {
        { "live (allocated by the program)", s->live_bytes / MIB, " MiB" },
        { "mapped (physical memory held)", s->mapped_bytes / MIB, " MiB" },
        { "free (mapped, reusable)", s->free_bytes / MIB, " MiB" },
        { "zombie (old address of moved pages)", s->zombie_bytes / MIB, " MiB" },
        { "pages created", (double)s->pages_created, "" },
        { "pages remapped (defragmentation)", (double)s->pages_remapped, "" },
        { "cross-stream waits (GPU-side)", (double)s->cross_stream_waits, "" },
        { "mallocs", (double)s->mallocs, "" },
        { "frees", (double)s->frees, "" },
    };
    printf("\n");
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        printf("  %-38s %8.*f%s\n", rows[i].what, *rows[i].unit ? 1 : 0, rows[i].value,
               rows[i].unit);
    printf("\n");
}

static int tour(vpmm_pool_t *pool, vpmm_stream_t a, vpmm_stream_t b)
{
    block_t blk[NBLOCKS] = { { 0 } };
    void *freed[NA / 2];
    vpmm_stats_t s0, s1;
    vpmm_status_t st;
    size_t pg, bad = 0, live = 0;
    int reused = 0;

    vpmm_get_stats(pool, &s0);
    pg = s0.page_size;
    printf(
        "1. stream A allocates %d blocks of %.0f MiB, stream B %d of %.0f MiB; each is written\n",
        NA, 2 * pg / MIB, NB, pg / 2 / MIB);
    for (int i = 0; i < NA + NB; i++)
        if (new_block(pool, &blk[i], i < NA ? 2 * pg : pg / 2, i < NA ? a : b, (unsigned)i))
            return 1;

    printf("2. stream A frees every other block: %.0f MiB free, in %.0f MiB pieces\n",
           NA / 2 * 2 * pg / MIB, 2 * pg / MIB);
    for (int i = 0; i < NA; i += 2) {
        freed[i / 2] = blk[i].p;
        st = vpmm_free(pool, blk[i].p);
        if (st != VPMM_SUCCESS)
            return fail("vpmm_free", st);
        blk[i].p = NULL;
    }

    vpmm_get_stats(pool, &s0);
    printf("3. stream A asks for %.0f MiB, more than any free piece: ", 6 * pg / MIB);
    if (new_block(pool, &blk[NA + NB], 6 * pg, a, NA + NB))
        return 1;
    vpmm_get_stats(pool, &s1);
    printf("the pool remapped %llu free pages\n   to a new address and created %llu "
           "(no copy, no host synchronisation)\n",
           (unsigned long long)(s1.pages_remapped - s0.pages_remapped),
           (unsigned long long)(s1.pages_created - s0.pages_created));

    printf("4. stream B asks for %.0f MiB: ", 2 * pg / MIB);
    if (new_block(pool, &blk[NA + NB + 1], 2 * pg, b, NA + NB + 1))
        return 1;
    vpmm_get_stats(pool, &s0);
    for (int i = 0; i < NA / 2; i++)
        reused |= freed[i] == blk[NA + NB + 1].p;
    printf("%s%s\n", reused ? "it reuses memory that stream A freed" : "it gets new memory",
           s0.cross_stream_waits > s1.cross_stream_waits
               ? ",\n   after a GPU-side wait for stream A's work on it"
               : " (stream A is done with it)");

    for (int i = 0; i < NBLOCKS; i++) {
        if (blk[i].p != NULL) {
            bad += bad_bytes(&blk[i], (unsigned)i);
            live++;
        }
    }
    printf("5. verified the %zu live blocks: %zu bad bytes\n", live, bad);
    print_stats(&s0);
    vpmm_pool_dump(pool, stdout);

    for (int i = 0; i < NBLOCKS; i++)
        if ((st = vpmm_free(pool, blk[i].p)) != VPMM_SUCCESS) /* vpmm_free(pool, NULL) is fine */
            return fail("vpmm_free", st);
    return bad != 0;
}

int main(void)
{
    static int token_a, token_b;
    vpmm_stream_t a = NULL, b = NULL;
    vpmm_config_t cfg;
    vpmm_pool_t *pool;
    vpmm_status_t st;
    int rc;

    vpmm_config_init(&cfg); /* the default backend, CUDA; the VPMM_* environment variables apply */
#ifndef VPMM_DEMO_KERNELS
    cfg.backend = VPMM_BACKEND_HOST; /* no kernels to write GPU memory with */
#endif
    st = vpmm_pool_create(&cfg, &pool);
#ifdef VPMM_DEMO_KERNELS
    if (st == VPMM_ERROR_NO_DEVICE && getenv("VPMM_BACKEND") == NULL) {
        /* No GPU: the demo can still run, on the emulation, but only by asking for it. */
        printf("vpmm_pool_create: %s: %s\n", vpmm_status_name(st), vpmm_last_error());
        printf("so the demo asks for the host emulation: config.backend = VPMM_BACKEND_HOST\n");
        cfg.backend = VPMM_BACKEND_HOST;
        st = vpmm_pool_create(&cfg, &pool);
    }
#endif
    if (st != VPMM_SUCCESS)
        return fail("vpmm_pool_create", st);
    on_gpu = strcmp(vpmm_pool_backend_name(pool), "cuda") == 0;
#ifdef VPMM_DEMO_KERNELS
    if (on_gpu) {
        char name[256] = "?";
        sample_gpu_name(name, sizeof name);
        printf("running on CUDA device 0: %s\n", name);
        if (sample_stream_create(&a) != 0 || sample_stream_create(&b) != 0) {
            fprintf(stderr, "demo: cudaStreamCreate failed\n");
            return 1;
        }
    }
#endif
    if (!on_gpu) {
        const char *env = getenv("VPMM_BACKEND");
#ifdef VPMM_DEMO_KERNELS
        printf("%s%s: ", env ? "VPMM_BACKEND=" : "no CUDA device", env ? env : "");
#else
        printf("built without nvcc (no GPU kernels): ");
        (void)env;
#endif
        printf("running on the host emulation backend (CPU memory, simulated streams)\n");
        /* The host backend treats any value as a stream: two distinct addresses are two
         * streams. (On the GPU these are cudaStream_t values.) */
        a = (vpmm_stream_t)&token_a;
        b = (vpmm_stream_t)&token_b;
    }

    printf("stream A = %p, stream B = %p (the dump below names streams this way)\n", (void *)a,
           (void *)b);
    rc = tour(pool, a, b);
    /* Streams that freed vpmm memory are released before they are destroyed. */
    vpmm_stream_release(pool, a);
    vpmm_stream_release(pool, b);
#ifdef VPMM_DEMO_KERNELS
    if (on_gpu) {
        sample_stream_destroy(a);
        sample_stream_destroy(b);
    }
#endif
    if (rc != 0)
        return 1; /* the process exit gives everything back */
    st = vpmm_pool_destroy(pool);
    if (st != VPMM_SUCCESS)
        return fail("vpmm_pool_destroy", st);
    printf("all blocks freed, pool destroyed\n");
    return 0;
}
