/*
 * share_table.c — the exporter's share counts: one slot per shared allocation, in memory that
 * the processes which map the allocation share with this one (CUDA IPC, share.c and import.c).
 *
 * A slot counts the shares of one allocation that are not over: each vpmm_ipc_export adds one,
 * the vpmm_ipc_close that ends the vpmm_ipc_open of it (in another process) takes it away. The
 * table is a memfd of slots that the importers map too (one page of it each, the page their
 * slot is on), so the count is the only state the processes share. A slot is one atomic word,
 * gen << 32 | count: gen tells a slot's uses apart (it moves on when the slot is given back), and
 * every change is a compare-and-swap of the whole word, so an importer's close ends a share of
 * the use it opened and never one of a later use of the slot, and one that names an old use is
 * refused at its open.
 *
 *   pool ──shares──> table (memfd) ──mapped by──> importers (a page each)
 *                    [gen|count][gen|count]...
 *
 * The file grows by doubling (ftruncate; importers keep their pages: a mapping of a file outlives
 * its growth); this side remaps it whole. Slots given back wait on a free list. The slot of an
 * allocation sits in its uses list (uses.c: an entry with no stream), which keeps the memory out
 * of every free list after the free until the count is 0.
 *
 * Under the pool lock, except vpmm_i_share_count, which reads one atomic.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* memfd_create, mremap */
#endif

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "pool.h"
#include "share.h"

#define FIRST_SLOTS 512 /* one 4 KiB page */

struct vpmm_shares {
    int fd;
    vpmm_share_slot_t *slots; /* the whole file, mapped here */
    uint32_t cap;             /* slots the file holds */
    uint32_t used;            /* slots handed out at least once (the rest were never used) */
    uint32_t *free;           /* slots given back, reused first */
    uint32_t nfree;
    uint32_t live; /* slots held by an allocation now */
    uint64_t nonce;
};

/* A number that tells this pool apart from every other pool of every process the importer may
 * meet (with the pid, which the kernel may reuse later). */
static uint64_t make_nonce(const vpmm_pool_t *p)
{
    struct timespec ts;
    uint64_t x = (uint64_t)(uintptr_t)p ^ ((uint64_t)getpid() << 32);
    clock_gettime(CLOCK_MONOTONIC, &ts);
    x ^= (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ULL ^ (uint64_t)ts.tv_sec << 20;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x != 0 ? x : 1;
}

static vpmm_status_t table_create(vpmm_pool_t *p)
{
    vpmm_shares_t *t = calloc(1, sizeof *t);
    size_t bytes = FIRST_SLOTS * sizeof(vpmm_share_slot_t);
    if (t == NULL)
        goto oom;
    t->free = malloc(FIRST_SLOTS * sizeof *t->free);
    if (t->free == NULL)
        goto oom;
    t->fd = memfd_create("vpmm-ipc-shares", MFD_CLOEXEC);
    if (t->fd < 0) {
        const int err = errno;
        vpmm_i_set_error("vpmm_ipc_export: cannot create the share table (memfd_create: %s)",
                         strerror(err));
        free(t->free);
        free(t);
        return err == EMFILE || err == ENFILE ? VPMM_ERROR_HOST_OUT_OF_MEMORY
                                              : VPMM_ERROR_NOT_SUPPORTED;
    }
    if (ftruncate(t->fd, (off_t)bytes) != 0 ||
        (t->slots = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, t->fd, 0)) ==
            MAP_FAILED) {
        close(t->fd);
        goto oom; /* which frees t */
    }
    t->cap = FIRST_SLOTS;
    t->nonce = make_nonce(p);
    p->shares = t;
    return VPMM_SUCCESS;
oom:
    if (t != NULL)
        free(t->free);
    free(t);
    vpmm_i_set_error("vpmm_ipc_export: out of host memory for the share table");
    return VPMM_ERROR_HOST_OUT_OF_MEMORY;
}

/* Doubles the table (nothing changes on failure). */
static vpmm_status_t table_grow(vpmm_shares_t *t)
{
    uint32_t cap = t->cap * 2;
    size_t old = (size_t)t->cap * sizeof *t->slots, bytes = (size_t)cap * sizeof *t->slots;
    uint32_t *fl;
    void *m;
    if (cap <= t->cap || (fl = realloc(t->free, (size_t)cap * sizeof *fl)) == NULL)
        goto oom;
    t->free = fl;
    if (ftruncate(t->fd, (off_t)bytes) != 0)
        goto oom;
    m = mremap(t->slots, old, bytes, MREMAP_MAYMOVE);
    if (m == MAP_FAILED) {
        if (ftruncate(t->fd, (off_t)old) != 0) { /* the file stays larger: harmless */
        }
        goto oom;
    }
    t->slots = m;
    t->cap = cap;
    return VPMM_SUCCESS;
oom:
    vpmm_i_set_error("vpmm_ipc_export: out of host memory for the share table");
    return VPMM_ERROR_HOST_OUT_OF_MEMORY;
}

vpmm_status_t vpmm_i_share_slot_take(vpmm_pool_t *p, uint32_t *out)
{
    vpmm_shares_t *t;
    if (p->shares == NULL)
        VPMM_CHECK(table_create(p));
    t = p->shares;
    if (t->nfree > 0) {
        *out = t->free[--t->nfree];
    } else {
        if (t->used == t->cap)
            VPMM_CHECK(table_grow(t));
        *out = t->used++;
        atomic_store_explicit(&t->slots[*out].word, (uint64_t)1 << 32, memory_order_relaxed);
    }
    t->live++;
    return VPMM_SUCCESS;
}

void vpmm_i_share_slot_give(vpmm_pool_t *p, uint32_t slot)
{
    vpmm_shares_t *t = p->shares;
    VPMM_ASSERT(t != NULL && slot < t->used && t->nfree < t->cap && t->live > 0);
    {
        /* A handle naming the old use is stale from now on; its count is 0 (no share left). */
        uint64_t w = atomic_load_explicit(&t->slots[slot].word, memory_order_relaxed);
        atomic_store_explicit(&t->slots[slot].word, (uint64_t)(VPMM_SHARE_GEN(w) + 1) << 32,
                              memory_order_release);
    }
    t->free[t->nfree++] = slot;
    t->live--;
}

void vpmm_i_share_add(vpmm_pool_t *p, uint32_t slot)
{
    /* The count's half only: importers never take it below 0, so no carry reaches gen. */
    atomic_fetch_add_explicit(&p->shares->slots[slot].word, 1, memory_order_release);
}

uint32_t vpmm_i_share_count(const vpmm_pool_t *p, uint32_t slot)
{
    return VPMM_SHARE_COUNT(
        atomic_load_explicit(&p->shares->slots[slot].word, memory_order_acquire));
}

int vpmm_i_share_end(vpmm_share_slot_t *s, uint32_t gen)
{
    uint64_t w = atomic_load_explicit(&s->word, memory_order_relaxed);
    do {
        if (VPMM_SHARE_GEN(w) != gen || VPMM_SHARE_COUNT(w) == 0)
            return 0; /* another use's, or none left: a close too many ends nothing */
    } while (!atomic_compare_exchange_weak_explicit(&s->word, &w, w - 1, memory_order_release,
                                                    memory_order_relaxed));
    return 1;
}

void vpmm_i_share_end_all(vpmm_pool_t *p, vpmm_region_t *r)
{
    if (r->uses == NULL)
        return;
    for (size_t i = 0; i < r->uses->n; i++)
        if (r->uses->e[i].stream == NULL) {
            vpmm_share_slot_t *s = &p->shares->slots[r->uses->e[i].seq];
            uint64_t w = atomic_load_explicit(&s->word, memory_order_relaxed);
            /* gen stays: the slot's use goes on until the allocation is freed. */
            while (!atomic_compare_exchange_weak_explicit(&s->word, &w, w & ~(uint64_t)UINT32_MAX,
                                                          memory_order_release,
                                                          memory_order_relaxed))
                ;
        }
}

void vpmm_i_share_table_info(const vpmm_pool_t *p, int *fd, uint64_t *nonce, uint32_t slot,
                             uint32_t *gen)
{
    *fd = p->shares->fd;
    *nonce = p->shares->nonce;
    *gen = VPMM_SHARE_GEN(atomic_load_explicit(&p->shares->slots[slot].word, memory_order_relaxed));
}

uint32_t vpmm_i_share_live(const vpmm_pool_t *p)
{
    return p->shares ? p->shares->live : 0;
}

void vpmm_i_share_table_fini(vpmm_pool_t *p)
{
    vpmm_shares_t *t = p->shares;
    if (t == NULL)
        return;
    /* Importers keep their own pages of the file: their closes still count, into nothing. */
    munmap(t->slots, (size_t)t->cap * sizeof *t->slots);
    close(t->fd);
    free(t->free);
    free(t);
    p->shares = NULL;
}
