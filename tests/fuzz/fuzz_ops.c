/*
 * fuzz_ops.c — a libFuzzer target: each input is decoded into a sequence of pool operations on
 * the host backend (wrapped in the fault decorator), and the pool is checked after every one.
 *
 * Per input: a fresh pool (64 MiB VA chunks, a small emulated device so that OOM is reached),
 * four created streams plus the two spellings of the legacy stream, then one operation after the
 * other until the input is exhausted, then a full cleanup (captures ended, graphs destroyed,
 * everything freed, graph pools released, pool destroyed) after which the fault wrapper and the
 * host backend must hold nothing (a leak is a finding). A finding prints what was expected and
 * what happened and calls abort(), which libFuzzer records as a crash.
 *
 * Encoding. Byte 0 configures the pool:
 *   bits 0-1  page size / driver granularity: 2M/2M, 64K/64K, 256K/64K, 4M/2M
 *   bits 2-3  emulated device memory: 64, 128, 256 or 32 MiB (a quarter of it with 64K pages)
 *   bits 4-5  exact-size cache: default, off, 100 %, 1 %
 *   bit 6     VPMM_MAX_BYTES = 40 MiB        bit 7  two preallocated pages
 * Then each operation is one opcode byte (op = byte & 31; 22-26 are MALLOC and 27-31 FREE again,
 * so that mutations favour the common pair) followed by its operand bytes, little-endian; an
 * operand read past the end is 0, and the input ends at the next opcode. `s` is a stream byte:
 * index s % 6 into { NULL, 0x1 (both the legacy stream), S1, S2, S3, S4 }.
 *    0 MALLOC      s cls u8, v u32   size by cls % 8: 0 v%256+1, 1 v%64K+1, 2 v%4M+1, 3 v%32M+1,
 *                                    4 (v%40+1) pages + ((v>>8)%5-2)*256, 5 an absurd one (0,
 *                                    SIZE_MAX, VA size +-, 2^62 ...), 6 v itself, 7 v%128M+1
 *    1 FREE        v u16             the live allocation made by malloc #v of this input (malloc
 *                                    ops are numbered from 0, mod 65536), else live[v % n]
 *    2 FREE_BAD    kind u8, v u16, off u32   kind % 7: NULL, an already freed pointer, an interior
 *                                    pointer, a stack address, a heap/static address, another
 *                                    pool's allocation, an address near the pool's memory
 *    3 WORK        s kind u8, n u8   kind % 5: enqueue n%4+1 kernels, complete s, advance s by
 *                                    n%4+1, complete all, advance every stream by 1
 *    4 STREAM_RELEASE s              (skipped while s is being captured: it is about to die)
 *    5 CAPTURE_BEGIN  s gp u8, mode u8   gp % (graph pools + 1): one held, or NULL (a new one);
 *                                    mode % 4: GLOBAL, THREAD_LOCAL, RELAXED, an invalid mode
 *    6 CAPTURE_END    s              vpmm_capture_end; the graph is kept
 *    7 EXT_BEGIN      s              a capture begun outside vpmm (vpmm_host_begin_capture)
 *    8 EXT_END        s how u8       ended outside vpmm: how % 2: graph destroyed, or kept
 *    9 CAPTURE_REGISTER s gp u8      vpmm_capture_register with a held graph pool
 *   10 CAPTURE_GP     s              vpmm_capture_graph_pool (a new handle reference)
 *   11 GRAPH_DESTROY  i u8           vpmm_graph_destroy of a kept graph
 *   12 EXEC           kind u8, i u8, s   kind % 3: instantiate a graph, launch an exec on s,
 *                                    destroy an exec (host backend controls)
 *   13 GP_CREATE                     vpmm_graph_pool_create
 *   14 GP_REF         kind u8, i u8  retain or release a held graph pool handle
 *   15 CK_TAKE        i u8           vpmm_checkpoint_take of a held graph pool
 *   16 CK_REAPPLY     gp u8, ck u8, dead u8, mask u32   dead % 4: none dead, the checkpoint's
 *                                    allocations picked by mask (twice), picked plus one bad
 *                                    entry (bit 2: a foreign pointer, else a duplicate)
 *   17 CK_DESTROY     i u8
 *   18 TRIM           kind u8, v u16 kind % 4: target 0, v*64K, SIZE_MAX, v*64K without out
 *   19 FAULT          kind u8, entry u8, n u8   result: kind bit 0 (ERROR / OUT_OF_MEMORY);
 *                                    (kind>>1) % 4: entry fails at its (n%8+1)-th call, any
 *                                    entry at the (n%16+1)-th, entry from its (n%4+1)-th call on
 *                                    (release entries: once), or one failure during the final
 *                                    vpmm_pool_destroy. Armed for the next executed operation.
 *   20 INSPECT        kind u8, i u8  kind % 8: stats, walk, dump, OOM report, last driver
 *                                    error, reset peaks, graph pool stats, checkpoint info
 *   21 SYNC                          the device synchronised by the application (it invalidates
 *                                    captures in progress, as in CUDA's global mode)
 *
 * An operation with nothing to act on (a FREE with no live allocation frees NULL, but e.g. a
 * CK_REAPPLY with no checkpoint) is skipped: it is neither checked nor counted. The count of
 * executed operations is printed at exit ("fuzz_ops: N operations in M inputs").
 *
 * Checks after every operation: vpmm_pool_check() == 0, vpmm_host_check() == 0, the driver holds
 * exactly the handles, mappings, reservations and events the pool believes it holds, and no user
 * object reference is left with the caller. Per operation: the status is one that call may
 * return for that input (bad input gets its exact status and leaves the pool unchanged: stats
 * and region layout are compared), a failed malloc sets the pointer to NULL, a successful one is
 * 256-aligned, overlaps no tracked allocation and is writable at both ends (a stamp written there
 * is checked on free, after reapply and on walk), the walk and the stats agree with the tracked
 * set, and a reapply leaves exactly the checkpoint's allocations (minus the dead ones) in its
 * graph pool and touches no other. Single-threaded, like the pool's tests.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver_fault.h"
#include "driver_host.h"
#include "fuzz_ops.h"
#include "pool.h"
#include "vpmm.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

#define VA_SIZE    (64 * MiB)
#define NSTREAMS   6
#define MAX_LIVE   1024
#define MAX_FREED  64
#define MAX_GP     8
#define MAX_CK     8
#define MAX_GRAPHS 16
#define MAX_EXECS  8

enum {
    OP_MALLOC,
    OP_FREE,
    OP_FREE_BAD,
    OP_WORK,
    OP_STREAM_RELEASE,
    OP_CAPTURE_BEGIN,
    OP_CAPTURE_END,
    OP_EXT_BEGIN,
    OP_EXT_END,
    OP_CAPTURE_REGISTER,
    OP_CAPTURE_GP,
    OP_GRAPH_DESTROY,
    OP_EXEC,
    OP_GP_CREATE,
    OP_GP_REF,
    OP_CK_TAKE,
    OP_CK_REAPPLY,
    OP_CK_DESTROY,
    OP_TRIM,
    OP_FAULT,
    OP_INSPECT,
    OP_SYNC,
    OP_COUNT
};

static const char *const op_names[OP_COUNT] = {
    "MALLOC",        "FREE",          "FREE_BAD",   "WORK",      "STREAM_RELEASE",
    "CAPTURE_BEGIN", "CAPTURE_END",   "EXT_BEGIN",  "EXT_END",   "CAPTURE_REGISTER",
    "CAPTURE_GP",    "GRAPH_DESTROY", "EXEC",       "GP_CREATE", "GP_REF",
    "CK_TAKE",       "CK_REAPPLY",    "CK_DESTROY", "TRIM",      "FAULT",
    "INSPECT",       "SYNC",
};

typedef struct live {
    unsigned char *p;
    size_t size;
    uint64_t stamp;
    uint16_t serial; /* the malloc op that made it (revived ones get a fresh number) */
} live_t;

typedef struct gref {
    vpmm_graph_pool_t *gp;
    unsigned refs; /* handle references this harness holds */
} gref_t;

typedef struct fz {
    const uint8_t *in;
    size_t len, pos;
    uint64_t nop; /* index of the current operation in this input */
    int op;       /* and its code */
    unsigned cfg;
    size_t page_size, memory_limit, max_bytes;
    vpmm_pool_t *pool;
    vpmm_driver_t *fault, *host;
    vpmm_stream_t streams[NSTREAMS];
    uint64_t origin[NSTREAMS]; /* id of the capture each stream began (0: none) */
    live_t live[MAX_LIVE];
    size_t nlive;
    uint16_t next_serial;
    uintptr_t freed[MAX_FREED]; /* a ring of freed addresses (double-free candidates) */
    size_t nfreed, freed_at;
    gref_t gps[MAX_GP];
    size_t ngp;
    vpmm_checkpoint_t *cks[MAX_CK];
    size_t nck;
    vpmm_graph_t graphs[MAX_GRAPHS];
    size_t ngraphs;
    vpmm_host_exec_t execs[MAX_EXECS];
    size_t nexec;
    int armed; /* a fault is armed for the current operation */
    int destroy_fault;
    uint64_t destroy_fault_n;
    vpmm_dres_t destroy_fault_res;
} fz_t;

static fz_t fz_state;
static uint64_t total_ops, total_inputs;
static FILE *devnull;
static vpmm_pool_t *side_pool; /* another pool: its allocation is a foreign pointer here */
static void *side_ptr;
static unsigned char static_buf[4096];
static int verbose; /* FUZZ_OPS_VERBOSE=1: every operation and status on stderr */

uint64_t vpmm_fuzz_operations(void)
{
    return total_ops;
}

/* ---- findings -------------------------------------------------------------------------------- */

__attribute__((format(printf, 2, 3), noreturn)) static void finding(const fz_t *z, const char *fmt,
                                                                    ...)
{
    va_list ap;
    fprintf(stderr, "\nfuzz_ops: FINDING at operation %llu (%s) of this input, config 0x%02x: ",
            (unsigned long long)z->nop, z->op >= 0 ? op_names[z->op] : "cleanup", z->cfg);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n  vpmm_last_error: %s\n", vpmm_last_error());
    fprintf(stderr, "fuzz_ops: %llu operations in %llu inputs before this finding\n",
            (unsigned long long)total_ops, (unsigned long long)total_inputs);
    fflush(stderr);
    abort();
}

#define S(st) (1u << (unsigned)(st))

/* st must be in `allowed`; an armed fault adds DRIVER and OUT_OF_MEMORY unless exact. */
static void expect_status(const fz_t *z, const char *call, vpmm_status_t st, unsigned allowed,
                          int exact)
{
    if (verbose)
        fprintf(stderr, "    %s: %s\n", call, vpmm_status_name(st));
    if (z->armed && !exact)
        allowed |= S(VPMM_ERROR_DRIVER) | S(VPMM_ERROR_OUT_OF_MEMORY);
    if ((unsigned)st >= 32 || (allowed & S(st)) == 0)
        finding(z, "%s returned %s (%d), not allowed here (allowed mask 0x%x%s)", call,
                vpmm_status_name(st), (int)st, allowed, z->armed ? ", fault armed" : "");
}

/* ---- input ----------------------------------------------------------------------------------- */

static unsigned rd8(fz_t *z)
{
    return z->pos < z->len ? z->in[z->pos++] : 0;
}

static unsigned rd16(fz_t *z)
{
    unsigned v = rd8(z);
    return v | rd8(z) << 8;
}

static uint32_t rd32(fz_t *z)
{
    uint32_t v = rd16(z);
    return v | (uint32_t)rd16(z) << 16;
}

/* ---- the tracked allocations ---------------------------------------------------------------- */

static size_t rnd(size_t n)
{
    return (n + VPMM_ALIGNMENT - 1) & ~(size_t)(VPMM_ALIGNMENT - 1);
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static void stamp_write(const live_t *l)
{
    memcpy(l->p, &l->stamp, l->size < 8 ? l->size : 8);
    if (l->size >= 16)
        memcpy(l->p + l->size - 8, &l->stamp, 8);
}

static void stamp_check(const fz_t *z, const live_t *l, const char *when)
{
    int ok = memcmp(l->p, &l->stamp, l->size < 8 ? l->size : 8) == 0;
    if (ok && l->size >= 16)
        ok = memcmp(l->p + l->size - 8, &l->stamp, 8) == 0;
    if (!ok)
        finding(z, "%s: the allocation at %p (%zu bytes) lost its contents", when, (void *)l->p,
                l->size);
}

static ptrdiff_t live_find(const fz_t *z, uintptr_t a)
{
    for (size_t i = 0; i < z->nlive; i++)
        if ((uintptr_t)z->live[i].p == a)
            return (ptrdiff_t)i;
    return -1;
}

static ptrdiff_t live_containing(const fz_t *z, uintptr_t a)
{
    for (size_t i = 0; i < z->nlive; i++) {
        uintptr_t p = (uintptr_t)z->live[i].p;
        if (a >= p && a < p + rnd(z->live[i].size))
            return (ptrdiff_t)i;
    }
    return -1;
}

/* Starts tracking a fresh allocation: aligned, disjoint from every tracked one, writable. */
static void live_add(fz_t *z, void *ptr, size_t size, uint16_t serial, const char *call)
{
    uintptr_t a = (uintptr_t)ptr;
    live_t *l;
    if (ptr == NULL || a % VPMM_ALIGNMENT != 0)
        finding(z, "%s returned %p for %zu bytes: not %u-aligned", call, ptr, size, VPMM_ALIGNMENT);
    for (size_t i = 0; i < z->nlive; i++) {
        uintptr_t b = (uintptr_t)z->live[i].p;
        if (a < b + rnd(z->live[i].size) && b < a + rnd(size))
            finding(z, "%s returned %p (%zu bytes), overlapping the live allocation %p (%zu bytes)",
                    call, ptr, size, (void *)b, z->live[i].size);
    }
    l = &z->live[z->nlive++];
    l->p = ptr;
    l->size = size;
    l->serial = serial;
    l->stamp = mix(((uint64_t)z->cfg << 48) ^ ((uint64_t)serial << 32) ^ z->nop ^ a);
    stamp_write(l);
}

static void note_freed(fz_t *z, uintptr_t a)
{
    z->freed[z->freed_at] = a;
    z->freed_at = (z->freed_at + 1) % MAX_FREED;
    if (z->nfreed < MAX_FREED)
        z->nfreed++;
}

static void live_remove(fz_t *z, size_t i)
{
    note_freed(z, (uintptr_t)z->live[i].p);
    z->live[i] = z->live[--z->nlive];
}

/* Frees tracked allocation i, which must succeed (also with a fault armed: free makes no driver
 * call that may fail it). */
static void free_live(fz_t *z, size_t i)
{
    vpmm_status_t st;
    stamp_check(z, &z->live[i], "before vpmm_free");
    st = vpmm_free(z->pool, z->live[i].p);
    expect_status(z, "vpmm_free(live)", st, S(VPMM_SUCCESS), 1);
    live_remove(z, i);
}

/* ---- observations -----------------------------------------------------------------------------
 */

typedef struct snap {
    vpmm_stats_t stats;
    size_t regions;
    uint64_t hash;
} snap_t;

static int hash_region(const vpmm_region_info_t *r, void *user)
{
    snap_t *s = user;
    uint64_t v[6] = { r->addr,
                      r->size,
                      (uint64_t)r->state * 2 + (uint64_t)r->ready,
                      (uint64_t)(uintptr_t)r->stream,
                      r->requested,
                      r->pool };
    for (int i = 0; i < 6; i++)
        s->hash = (s->hash ^ v[i]) * 0x100000001b3ULL;
    s->regions++;
    return 0;
}

static vpmm_stats_t stats_of(const fz_t *z)
{
    vpmm_stats_t s;
    memset(&s, 0, sizeof s);
    expect_status(z, "vpmm_get_stats", vpmm_get_stats(z->pool, &s), S(VPMM_SUCCESS), 1);
    return s;
}

static void snap_take(const fz_t *z, snap_t *s)
{
    memset(s, 0, sizeof *s);
    s->hash = 0xcbf29ce484222325ULL;
    s->stats = stats_of(z);
    expect_status(z, "vpmm_pool_walk", vpmm_pool_walk(z->pool, hash_region, s), S(VPMM_SUCCESS), 1);
}

/* Bad input must leave the pool exactly as it was. */
static void snap_same(const fz_t *z, const snap_t *before, const char *call)
{
    snap_t now;
    snap_take(z, &now);
    if (memcmp(&now.stats, &before->stats, sizeof now.stats) != 0 ||
        now.regions != before->regions || now.hash != before->hash)
        finding(z,
                "%s failed but changed the pool (regions %zu -> %zu, live %zu -> %zu, mapped "
                "%zu -> %zu)",
                call, before->regions, now.regions, before->stats.live_bytes, now.stats.live_bytes,
                before->stats.mapped_bytes, now.stats.mapped_bytes);
}

typedef struct regions {
    vpmm_region_info_t *r;
    size_t n, cap;
    int oom;
} regions_t;

static int collect_region(const vpmm_region_info_t *r, void *user)
{
    regions_t *rs = user;
    if (rs->n == rs->cap) {
        size_t cap = rs->cap ? rs->cap * 2 : 256;
        vpmm_region_info_t *a = realloc(rs->r, cap * sizeof *a);
        if (a == NULL) {
            rs->oom = 1;
            return 1;
        }
        rs->r = a;
        rs->cap = cap;
    }
    rs->r[rs->n++] = *r;
    return 0;
}

static int by_addr(const void *a, const void *b)
{
    uintptr_t x = ((const vpmm_region_info_t *)a)->addr, y = ((const vpmm_region_info_t *)b)->addr;
    return (x > y) - (x < y);
}

static void regions_get(const fz_t *z, regions_t *rs)
{
    memset(rs, 0, sizeof *rs);
    expect_status(z, "vpmm_pool_walk", vpmm_pool_walk(z->pool, collect_region, rs), S(VPMM_SUCCESS),
                  1);
    if (rs->oom)
        finding(z, "out of host memory while walking");
    qsort(rs->r, rs->n, sizeof *rs->r, by_addr);
}

static const vpmm_region_info_t *region_containing(const regions_t *rs, uintptr_t a)
{
    size_t lo = 0, hi = rs->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const vpmm_region_info_t *r = &rs->r[mid];
        if (a < r->addr)
            hi = mid;
        else if (a >= r->addr + r->size)
            lo = mid + 1;
        else
            return r;
    }
    return NULL;
}

static int cmp_uptr(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return (x > y) - (x < y);
}

/* A sorted copy of the tracked addresses (free it). */
static uintptr_t *live_sorted(const fz_t *z)
{
    uintptr_t *v = malloc((z->nlive + 1) * sizeof *v);
    if (v == NULL)
        finding(z, "out of host memory");
    for (size_t i = 0; i < z->nlive; i++)
        v[i] = (uintptr_t)z->live[i].p;
    qsort(v, z->nlive, sizeof *v, cmp_uptr);
    return v;
}

static int in_sorted(const uintptr_t *v, size_t n, uintptr_t a)
{
    return bsearch(&a, v, n, sizeof *v, cmp_uptr) != NULL;
}

/* ---- the checks after every operation -------------------------------------------------------- */

/* The driver holds exactly what the pool believes it holds (as tests/test_util.c checks). */
static void driver_matches_pool(const fz_t *z)
{
    const vpmm_pool_t *p = z->pool;
    vpmm_fault_live_t live;
    size_t zombie_maps = 0, events = p->idle_count;
    const vpmm_strm_t *lists[2] = { p->streams, p->retired };

    for (const vpmm_region_t *r = p->zombie_head; r; r = r->qnext)
        for (uintptr_t at = r->addr; at < r->addr + r->size; zombie_maps++)
            at += vpmm_i_phys_at(p, at)->size;
    for (int l = 0; l < 2; l++)
        for (const vpmm_strm_t *s = lists[l]; s; s = s->next)
            events += (size_t)(s->recorded - s->completed);
    vpmm_fault_live(z->fault, &live);
    if (live.handles != (int64_t)(p->phys_count + p->nunreleased) ||
        live.mappings != (int64_t)(p->phys_count + zombie_maps) ||
        live.reservations != (int64_t)p->chunk_count || live.events != (int64_t)events ||
        live.user_objects != 0)
        finding(z,
                "the driver holds handles %lld, mappings %lld, reservations %lld, events %lld, "
                "caller user objects %lld; the pool believes %zu, %zu, %u, %zu, 0",
                (long long)live.handles, (long long)live.mappings, (long long)live.reservations,
                (long long)live.events, (long long)live.user_objects,
                p->phys_count + p->nunreleased, p->phys_count + zombie_maps, p->chunk_count,
                events);
}

static void check_all(const fz_t *z)
{
    size_t bad = vpmm_pool_check(z->pool, NULL);
    if (bad != 0) {
        vpmm_pool_check(z->pool, stderr);
        finding(z, "vpmm_pool_check: %zu invariant(s) violated", bad);
    }
    bad = vpmm_host_check(z->host, 0);
    if (bad != 0) {
        vpmm_host_check(z->host, 1);
        finding(z, "vpmm_host_check: %zu invariant(s) violated", bad);
    }
    driver_matches_pool(z);
}

/* ---- streams and captures -------------------------------------------------------------------- */

static size_t stream_index(fz_t *z)
{
    return rd8(z) % NSTREAMS;
}

static int is_legacy(size_t si)
{
    return si < 2;
}

static vpmm_capture_status_t cap_of(const fz_t *z, size_t si, uint64_t *out_id)
{
    vpmm_capture_status_t cap = VPMM_CAPTURE_NONE;
    uint64_t id = 0;
    if (z->host->capture_info(z->host, z->streams[si], &cap, &id, NULL) != VPMM_DRV_OK)
        finding(z, "the host backend's capture_info failed on stream %zu", si);
    if (out_id != NULL)
        *out_id = id;
    return cap;
}

static void keep_graph(fz_t *z, vpmm_graph_t g)
{
    if (z->ngraphs < MAX_GRAPHS) {
        z->graphs[z->ngraphs++] = g;
        return;
    }
    /* The application destroys it directly (cudaGraphDestroy). */
    if (vpmm_host_graph_destroy(z->host, g) != VPMM_DRV_OK)
        finding(z, "the host backend could not destroy a graph vpmm returned");
}

static void gref_add(fz_t *z, vpmm_graph_pool_t *gp)
{
    for (size_t i = 0; i < z->ngp; i++) {
        if (z->gps[i].gp == gp) {
            z->gps[i].refs++;
            return;
        }
    }
    if (z->ngp < MAX_GP) {
        z->gps[z->ngp++] = (gref_t){ gp, 1 };
        return;
    }
    expect_status(z, "vpmm_graph_pool_release", vpmm_graph_pool_release(gp), S(VPMM_SUCCESS), 1);
}

static vpmm_graph_pool_stats_t gstats(const fz_t *z, const vpmm_graph_pool_t *gp)
{
    vpmm_graph_pool_stats_t s;
    memset(&s, 0, sizeof s);
    expect_status(z, "vpmm_graph_pool_stats", vpmm_graph_pool_stats(gp, &s), S(VPMM_SUCCESS), 1);
    return s;
}

/* ---- operations ----------------------------------------------------------------------------- */

static size_t size_of(const fz_t *z, unsigned cls, uint32_t v)
{
    const size_t absurd[10] = {
        0,           SIZE_MAX,      SIZE_MAX - 254, SIZE_MAX / 2,    VA_SIZE,
        VA_SIZE + 1, VA_SIZE - 255, VA_SIZE + 256,  (size_t)1 << 62, VPMM_ALIGNMENT + 1
    };
    switch (cls % 8) {
    case 0:
        return v % 256 + 1;
    case 1:
        return v % (64 * KiB) + 1;
    case 2:
        return v % (4 * MiB) + 1;
    case 3:
        return v % (32 * MiB) + 1;
    case 4: {
        long long s =
            (long long)((v % 40 + 1) * z->page_size) + ((long long)(v >> 8) % 5 - 2) * 256;
        return (size_t)s;
    }
    case 5:
        return absurd[v % 10];
    case 6:
        return v;
    default:
        return v % (128 * MiB) + 1;
    }
}

static int op_malloc(fz_t *z)
{
    size_t si = stream_index(z);
    unsigned cls = rd8(z);
    uint32_t v = rd32(z);
    size_t size = size_of(z, cls, v);
    uint16_t serial = z->next_serial++;
    vpmm_capture_status_t cap;
    void *p = (void *)static_buf; /* must become NULL on failure */
    vpmm_status_t st;
    snap_t before;

    if (size == 0 || size > VA_SIZE) {
        vpmm_status_t want = size == 0 ? VPMM_ERROR_INVALID_SIZE : VPMM_ERROR_SIZE_TOO_LARGE;
        snap_take(z, &before);
        st = vpmm_malloc(z->pool, size, z->streams[si], &p);
        expect_status(z, "vpmm_malloc(bad size)", st, S(want), 1);
        if (p != NULL)
            finding(z, "vpmm_malloc(%zu) failed but left the pointer %p", size, p);
        snap_same(z, &before, "vpmm_malloc(bad size)");
        return 1;
    }
    if (z->nlive == MAX_LIVE)
        return 0;
    cap = cap_of(z, si, NULL);
    st = vpmm_malloc(z->pool, size, z->streams[si], &p);
    expect_status(z, "vpmm_malloc", st,
                  S(VPMM_SUCCESS) | S(VPMM_ERROR_OUT_OF_MEMORY) |
                      (cap == VPMM_CAPTURE_INVALIDATED ? S(VPMM_ERROR_DRIVER) : 0),
                  0);
    if (st != VPMM_SUCCESS) {
        if (p != NULL)
            finding(z, "vpmm_malloc(%zu) failed with %s but left the pointer %p", size,
                    vpmm_status_name(st), p);
        return 1;
    }
    live_add(z, p, size, serial, "vpmm_malloc");
    return 1;
}

static int op_free(fz_t *z)
{
    unsigned v = rd16(z);
    if (z->nlive == 0) {
        expect_status(z, "vpmm_free(NULL)", vpmm_free(z->pool, NULL), S(VPMM_SUCCESS), 1);
        return 1;
    }
    for (size_t i = 0; i < z->nlive; i++) {
        if (z->live[i].serial == v) {
            free_live(z, i);
            return 1;
        }
    }
    free_live(z, v % z->nlive);
    return 1;
}

/* Frees an arbitrary address; the tracked set says what must happen. */
static int free_any(fz_t *z, uintptr_t a, int foreign)
{
    ptrdiff_t i;
    snap_t before;
    vpmm_status_t st;

    if (a == 0)
        return 0;
    i = foreign ? -1 : live_find(z, a);
    if (i >= 0) {
        free_live(z, (size_t)i); /* it was freed, then reused: a valid free */
        return 1;
    }
    snap_take(z, &before);
    st = vpmm_free(z->pool, (void *)a);
    if (foreign)
        expect_status(z, "vpmm_free(foreign)", st, S(VPMM_ERROR_FOREIGN_POINTER), 1);
    else if (live_containing(z, a) >= 0)
        expect_status(z, "vpmm_free(interior)", st, S(VPMM_ERROR_INTERIOR_POINTER), 1);
    else
        expect_status(z, "vpmm_free(not allocated)", st,
                      S(VPMM_ERROR_DOUBLE_FREE) | S(VPMM_ERROR_FOREIGN_POINTER), 1);
    snap_same(z, &before, "vpmm_free(bad pointer)");
    return 1;
}

static int op_free_bad(fz_t *z)
{
    unsigned kind = rd8(z) % 7, v = rd16(z);
    uint32_t off = rd32(z);
    unsigned char local[64];
    uintptr_t base;

    switch (kind) {
    case 0:
        expect_status(z, "vpmm_free(NULL)", vpmm_free(z->pool, NULL), S(VPMM_SUCCESS), 1);
        return 1;
    case 1:
        if (z->nfreed == 0)
            return 0;
        return free_any(z, z->freed[v % z->nfreed], 0);
    case 2:
        if (z->nlive == 0)
            return 0;
        base = (uintptr_t)z->live[v % z->nlive].p;
        return free_any(z, base + 1 + off % (rnd(z->live[v % z->nlive].size) - 1), 0);
    case 3:
        return free_any(z, (uintptr_t)&local[off % sizeof local], 1);
    case 4:
        if (off & 1) {
            unsigned char *h = malloc(64);
            int done;
            if (h == NULL)
                finding(z, "out of host memory");
            done = free_any(z, (uintptr_t)h + (v % 64), 1);
            free(h);
            return done;
        }
        return free_any(z, (uintptr_t)&static_buf[off % sizeof static_buf], 1);
    case 5:
        return side_ptr != NULL ? free_any(z, (uintptr_t)side_ptr + (off % 4096), 1) : 0;
    default:
        if (z->nlive > 0 && (v & 1))
            base = (uintptr_t)z->live[(v >> 1) % z->nlive].p;
        else if (z->nfreed > 0)
            base = z->freed[(v >> 1) % z->nfreed];
        else
            return 0;
        base &= ~(uintptr_t)(z->page_size - 1);
        base += off % (4 * z->page_size);
        base -= 2 * z->page_size;
        if (off & 0x80000000u)
            base &= ~(uintptr_t)(VPMM_ALIGNMENT - 1);
        return free_any(z, base, 0);
    }
}

static int op_work(fz_t *z)
{
    size_t si = stream_index(z);
    unsigned kind = rd8(z) % 5, n = rd8(z);
    vpmm_stream_t s = z->streams[si];
    switch (kind) {
    case 0:
        for (unsigned k = 0; k < n % 4 + 1; k++)
            vpmm_host_enqueue(z->host, s);
        break;
    case 1:
        vpmm_host_complete(z->host, s);
        break;
    case 2:
        vpmm_host_advance(z->host, s, n % 4 + 1);
        break;
    case 3:
        vpmm_host_complete_all(z->host);
        break;
    default:
        for (size_t i = 0; i < NSTREAMS; i++)
            vpmm_host_advance(z->host, z->streams[i], 1);
        break;
    }
    return 1;
}

static int op_stream_release(fz_t *z)
{
    size_t si = stream_index(z);
    vpmm_status_t st;
    /* A stream being released is about to be destroyed; CUDA forbids that during a capture. */
    if (cap_of(z, si, NULL) != VPMM_CAPTURE_NONE)
        return 0;
    st = vpmm_stream_release(z->pool, z->streams[si]);
    expect_status(z, "vpmm_stream_release", st, S(VPMM_SUCCESS), 0);
    return 1;
}

static int op_capture_begin(fz_t *z)
{
    size_t si = stream_index(z);
    unsigned g = rd8(z), mode = rd8(z) % 4;
    vpmm_graph_pool_t *gp = NULL;
    vpmm_capture_status_t before = cap_of(z, si, NULL), after;
    vpmm_status_t st;
    uint64_t id;

    if (z->ngp > 0 && g % (z->ngp + 1) < z->ngp)
        gp = z->gps[g % (z->ngp + 1)].gp;
    st = vpmm_capture_begin(z->pool, gp, z->streams[si],
                            mode == 3 ? (vpmm_stream_capture_mode_t)7
                                      : (vpmm_stream_capture_mode_t)mode);
    if (is_legacy(si) || mode == 3)
        expect_status(z, "vpmm_capture_begin(bad argument)", st, S(VPMM_ERROR_INVALID_ARGUMENT), 1);
    else if (before != VPMM_CAPTURE_NONE)
        expect_status(z, "vpmm_capture_begin(capturing)", st, S(VPMM_ERROR_STREAM_CAPTURING), 0);
    else
        expect_status(z, "vpmm_capture_begin", st, S(VPMM_SUCCESS), 0);
    after = cap_of(z, si, &id);
    if (st == VPMM_SUCCESS) {
        if (after != VPMM_CAPTURE_ACTIVE)
            finding(z, "vpmm_capture_begin succeeded but stream %zu is not capturing", si);
        z->origin[si] = id;
    } else if (before == VPMM_CAPTURE_NONE && after != VPMM_CAPTURE_NONE) {
        finding(z, "vpmm_capture_begin failed with %s but left stream %zu capturing",
                vpmm_status_name(st), si);
    }
    return 1;
}

static int op_capture_end(fz_t *z)
{
    size_t si = stream_index(z);
    uint64_t id;
    vpmm_capture_status_t cap = cap_of(z, si, &id);
    vpmm_graph_t g = (vpmm_graph_t)static_buf;
    vpmm_status_t st = vpmm_capture_end(z->pool, z->streams[si], &g);

    if (cap == VPMM_CAPTURE_NONE)
        expect_status(z, "vpmm_capture_end(not capturing)", st, S(VPMM_ERROR_NOT_CAPTURING),
                      is_legacy(si));
    else if (cap == VPMM_CAPTURE_ACTIVE && z->origin[si] == id)
        expect_status(z, "vpmm_capture_end", st, S(VPMM_SUCCESS), 0);
    else /* invalidated, or joined by a stream that did not begin it */
        expect_status(z, "vpmm_capture_end(invalidated or joined)", st, S(VPMM_ERROR_DRIVER), 0);
    if (st != VPMM_SUCCESS) {
        if (g != NULL)
            finding(z, "vpmm_capture_end failed with %s but returned a graph",
                    vpmm_status_name(st));
        return 1;
    }
    if (g == NULL)
        finding(z, "vpmm_capture_end succeeded without a graph");
    if (cap_of(z, si, NULL) != VPMM_CAPTURE_NONE)
        finding(z, "vpmm_capture_end succeeded but stream %zu is still capturing", si);
    z->origin[si] = 0;
    keep_graph(z, g);
    return 1;
}

static int op_ext_begin(fz_t *z)
{
    size_t si = stream_index(z);
    vpmm_capture_status_t cap = cap_of(z, si, NULL);
    uint64_t id = 0;
    vpmm_dres_t r = vpmm_host_begin_capture(z->host, z->streams[si], &id);
    vpmm_dres_t want = is_legacy(si)              ? VPMM_DRV_NOT_SUPPORTED
                       : cap != VPMM_CAPTURE_NONE ? VPMM_DRV_ERROR
                                                  : VPMM_DRV_OK;
    if (r != want)
        finding(z, "vpmm_host_begin_capture returned %d, expected %d", (int)r, (int)want);
    if (r == VPMM_DRV_OK)
        z->origin[si] = id;
    return 1;
}

static int op_ext_end(fz_t *z)
{
    size_t si = stream_index(z);
    unsigned how = rd8(z) % 2;
    vpmm_graph_t g = NULL;
    vpmm_dres_t r;
    if (how == 0) {
        r = vpmm_host_end_capture(z->host, z->streams[si]);
    } else {
        r = z->host->end_capture(z->host, z->streams[si], &g);
        if (r == VPMM_DRV_OK && g != NULL)
            keep_graph(z, g);
    }
    if (r != VPMM_DRV_OK && r != VPMM_DRV_ERROR)
        finding(z, "the host backend's end_capture returned %d", (int)r);
    return 1;
}

static int op_capture_register(fz_t *z)
{
    size_t si = stream_index(z);
    unsigned g = rd8(z);
    vpmm_capture_status_t cap;
    vpmm_status_t st;
    if (z->ngp == 0)
        return 0;
    cap = cap_of(z, si, NULL);
    st = vpmm_capture_register(z->pool, z->gps[g % z->ngp].gp, z->streams[si]);
    if (cap == VPMM_CAPTURE_NONE)
        expect_status(z, "vpmm_capture_register(not capturing)", st, S(VPMM_ERROR_NOT_CAPTURING),
                      is_legacy(si));
    else
        expect_status(z, "vpmm_capture_register", st,
                      S(VPMM_SUCCESS) | S(VPMM_ERROR_WRONG_POOL) |
                          (cap == VPMM_CAPTURE_INVALIDATED ? S(VPMM_ERROR_DRIVER) : 0),
                      0);
    return 1;
}

static int op_capture_gp(fz_t *z)
{
    size_t si = stream_index(z);
    vpmm_capture_status_t cap = cap_of(z, si, NULL);
    vpmm_graph_pool_t *gp = (vpmm_graph_pool_t *)static_buf;
    vpmm_status_t st = vpmm_capture_graph_pool(z->pool, z->streams[si], &gp);
    if (cap == VPMM_CAPTURE_NONE)
        expect_status(z, "vpmm_capture_graph_pool(not capturing)", st, S(VPMM_ERROR_NOT_CAPTURING),
                      is_legacy(si));
    else
        expect_status(
            z, "vpmm_capture_graph_pool", st,
            S(VPMM_SUCCESS) | (cap == VPMM_CAPTURE_INVALIDATED ? S(VPMM_ERROR_DRIVER) : 0), 0);
    if (st != VPMM_SUCCESS) {
        if (gp != NULL)
            finding(z, "vpmm_capture_graph_pool failed but returned a graph pool");
        return 1;
    }
    gref_add(z, gp);
    return 1;
}

static int op_graph_destroy(fz_t *z)
{
    unsigned i = rd8(z);
    vpmm_status_t st;
    if (z->ngraphs == 0)
        return 0;
    i %= (unsigned)z->ngraphs;
    st = vpmm_graph_destroy(z->pool, z->graphs[i]);
    expect_status(z, "vpmm_graph_destroy", st, S(VPMM_SUCCESS), 0);
    if (st == VPMM_SUCCESS)
        z->graphs[i] = z->graphs[--z->ngraphs];
    return 1;
}

static int op_exec(fz_t *z)
{
    unsigned kind = rd8(z) % 3, i = rd8(z);
    size_t si = stream_index(z);
    vpmm_dres_t r;
    if (kind == 0) {
        vpmm_host_exec_t e;
        if (z->ngraphs == 0 || z->nexec == MAX_EXECS)
            return 0;
        r = vpmm_host_graph_instantiate(z->host, z->graphs[i % z->ngraphs], &e);
        if (r != VPMM_DRV_OK)
            finding(z, "vpmm_host_graph_instantiate returned %d", (int)r);
        z->execs[z->nexec++] = e;
        return 1;
    }
    if (z->nexec == 0)
        return 0;
    i %= (unsigned)z->nexec;
    if (kind == 1) {
        vpmm_capture_status_t cap = cap_of(z, si, NULL);
        r = vpmm_host_graph_launch(z->host, z->execs[i], z->streams[si]);
        if (r != (cap == VPMM_CAPTURE_NONE ? VPMM_DRV_OK : VPMM_DRV_NOT_SUPPORTED))
            finding(z, "vpmm_host_graph_launch returned %d", (int)r);
    } else {
        r = vpmm_host_exec_destroy(z->host, z->execs[i]);
        if (r != VPMM_DRV_OK)
            finding(z, "vpmm_host_exec_destroy returned %d", (int)r);
        z->execs[i] = z->execs[--z->nexec];
    }
    return 1;
}

static int op_gp_create(fz_t *z)
{
    vpmm_graph_pool_t *gp = NULL;
    vpmm_status_t st;
    if (z->ngp == MAX_GP)
        return 0;
    st = vpmm_graph_pool_create(z->pool, &gp);
    expect_status(z, "vpmm_graph_pool_create", st, S(VPMM_SUCCESS), 0);
    if (st == VPMM_SUCCESS)
        gref_add(z, gp);
    return 1;
}

static int op_gp_ref(fz_t *z)
{
    unsigned kind = rd8(z) % 2, i = rd8(z);
    gref_t *g;
    if (z->ngp == 0)
        return 0;
    g = &z->gps[i % z->ngp];
    if (kind == 0) {
        expect_status(z, "vpmm_graph_pool_retain", vpmm_graph_pool_retain(g->gp), S(VPMM_SUCCESS),
                      1);
        g->refs++;
        return 1;
    }
    expect_status(z, "vpmm_graph_pool_release", vpmm_graph_pool_release(g->gp), S(VPMM_SUCCESS), 1);
    if (--g->refs == 0)
        *g = z->gps[--z->ngp];
    return 1;
}

static int op_ck_take(fz_t *z)
{
    unsigned i = rd8(z);
    vpmm_graph_pool_t *gp;
    vpmm_graph_pool_stats_t gs;
    vpmm_checkpoint_t *ck = NULL;
    vpmm_status_t st;
    if (z->ngp == 0)
        return 0;
    gp = z->gps[i % z->ngp].gp;
    gs = gstats(z, gp);
    st = vpmm_checkpoint_take(gp, &ck);
    expect_status(z, "vpmm_checkpoint_take", st,
                  S(gs.captures > 0 ? VPMM_ERROR_STREAM_CAPTURING : VPMM_SUCCESS), 1);
    if (st != VPMM_SUCCESS)
        return 1;
    if (z->nck == MAX_CK) {
        vpmm_checkpoint_destroy(z->cks[0]);
        z->cks[0] = z->cks[--z->nck];
    }
    z->cks[z->nck++] = ck;
    return 1;
}

static int by_ck_ptr(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const vpmm_checkpoint_alloc_t *)a)->ptr;
    uintptr_t y = (uintptr_t)((const vpmm_checkpoint_alloc_t *)b)->ptr;
    return (x > y) - (x < y);
}

/*
 * After a successful reapply on graph pool gid: its allocations are exactly the checkpoint's
 * minus the dead ones, nothing else changed; the tracked set follows (dropped allocations
 * leave it, revived ones join it with a fresh stamp, untouched ones keep theirs).
 */
static void reconcile(fz_t *z, unsigned gid, vpmm_checkpoint_alloc_t *ca, size_t n,
                      const unsigned char *dead)
{
    regions_t rs;
    uintptr_t *tracked;
    size_t found = 0, wanted = 0;

    regions_get(z, &rs);
    for (size_t i = 0; i < n; i++)
        wanted += !dead[i];
    for (size_t k = 0; k < rs.n; k++) {
        const vpmm_region_info_t *r = &rs.r[k];
        vpmm_checkpoint_alloc_t key = { (void *)r->addr, 0, NULL }, *c;
        if (r->state != VPMM_REGION_ALLOCATED || r->pool != gid)
            continue;
        c = bsearch(&key, ca, n, sizeof *ca, by_ck_ptr);
        if (c == NULL || dead[c - ca] || c->size != r->requested)
            finding(z,
                    "after reapply, g%u holds the allocation %p (%zu bytes) the checkpoint "
                    "does not want",
                    gid, (void *)r->addr, r->requested);
        found++;
    }
    if (found != wanted)
        finding(z, "after reapply, g%u holds %zu allocations, the checkpoint wants %zu", gid, found,
                wanted);
    for (size_t k = 0; k < z->nlive;) {
        live_t *l = &z->live[k];
        const vpmm_region_info_t *r = region_containing(&rs, (uintptr_t)l->p);
        if (r == NULL)
            finding(z, "after reapply, the tracked allocation %p is in no region", (void *)l->p);
        if (r->state == VPMM_REGION_ALLOCATED && r->addr == (uintptr_t)l->p &&
            r->requested == l->size) {
            stamp_check(z, l, "after reapply");
            k++;
            continue;
        }
        if (r->pool != gid)
            finding(z, "reapply on g%u changed the allocation %p of pool %u", gid, (void *)l->p,
                    r->pool);
        live_remove(z, k); /* dropped by the reapply */
    }
    tracked = live_sorted(z);
    for (size_t i = 0, nl = z->nlive; i < n; i++) {
        if (dead[i] || in_sorted(tracked, nl, (uintptr_t)ca[i].ptr))
            continue;
        if (z->nlive == MAX_LIVE) { /* no room to track it: give it back */
            expect_status(z, "vpmm_free(revived)", vpmm_free(z->pool, ca[i].ptr), S(VPMM_SUCCESS),
                          1);
            continue;
        }
        live_add(z, ca[i].ptr, ca[i].size, z->next_serial++, "vpmm_checkpoint_reapply (revived)");
    }
    free(tracked);
    free(rs.r);
}

static int op_ck_reapply(fz_t *z)
{
    unsigned gsel = rd8(z), csel = rd8(z), mode = rd8(z);
    uint32_t mask = rd32(z);
    vpmm_graph_pool_t *gp;
    vpmm_checkpoint_t *ck;
    vpmm_graph_pool_stats_t gs;
    vpmm_checkpoint_info_t info;
    vpmm_checkpoint_alloc_t *ca;
    unsigned char *dead, local;
    void **list;
    size_t n, nlist = 0;
    int defect = 0;
    snap_t before;
    vpmm_status_t st;

    if (z->ngp == 0 || z->nck == 0)
        return 0;
    gp = z->gps[gsel % z->ngp].gp;
    ck = z->cks[csel % z->nck];
    gs = gstats(z, gp);
    expect_status(z, "vpmm_checkpoint_info", vpmm_checkpoint_info(ck, &info), S(VPMM_SUCCESS), 1);
    n = info.allocs;
    ca = malloc((n + 1) * sizeof *ca);
    dead = calloc(n + 1, 1);
    list = malloc((n + 2) * sizeof *list);
    if (ca == NULL || dead == NULL || list == NULL)
        finding(z, "out of host memory");
    if (vpmm_checkpoint_allocs(ck, ca, n) != n)
        finding(z, "vpmm_checkpoint_allocs disagrees with vpmm_checkpoint_info");
    qsort(ca, n, sizeof *ca, by_ck_ptr);
    if (mode % 4 != 0) {
        for (size_t i = 0; i < n; i++) {
            if ((mask >> (i % 32)) & 1) {
                dead[i] = 1;
                list[nlist++] = ca[i].ptr;
            }
        }
    }
    if (mode % 4 == 3) {
        list[nlist] = ((mode >> 2) & 1) || nlist == 0 ? (void *)&local : list[0];
        nlist++;
        defect = 1;
    }
    snap_take(z, &before);
    st = vpmm_checkpoint_reapply(gp, ck, list, nlist);
    if (info.graph_pool != gs.id)
        expect_status(z, "vpmm_checkpoint_reapply(other graph pool)", st, S(VPMM_ERROR_WRONG_POOL),
                      1);
    else if (gs.captures > 0)
        expect_status(z, "vpmm_checkpoint_reapply(capturing)", st, S(VPMM_ERROR_STREAM_CAPTURING),
                      1);
    else if (defect)
        expect_status(z, "vpmm_checkpoint_reapply(bad dead list)", st,
                      S(VPMM_ERROR_INVALID_ARGUMENT), 1);
    else
        expect_status(z, "vpmm_checkpoint_reapply", st,
                      S(VPMM_SUCCESS) | S(VPMM_ERROR_CHECKPOINT_CONFLICT), 1);
    if (st == VPMM_SUCCESS)
        reconcile(z, gs.id, ca, n, dead);
    else
        snap_same(z, &before, "vpmm_checkpoint_reapply");
    free(list);
    free(dead);
    free(ca);
    return 1;
}

static int op_ck_destroy(fz_t *z)
{
    unsigned i = rd8(z);
    if (z->nck == 0)
        return 0;
    i %= (unsigned)z->nck;
    vpmm_checkpoint_destroy(z->cks[i]);
    z->cks[i] = z->cks[--z->nck];
    return 1;
}

static int op_trim(fz_t *z)
{
    unsigned kind = rd8(z) % 4, v = rd16(z);
    size_t target = kind == 0 ? 0 : kind == 2 ? SIZE_MAX : (size_t)v * 64 * KiB;
    size_t released = SIZE_MAX;
    vpmm_status_t st = vpmm_trim(z->pool, target, kind == 3 ? NULL : &released);
    expect_status(z, "vpmm_trim", st, S(VPMM_SUCCESS), 0);
    if (st == VPMM_SUCCESS && kind != 3 && released % z->page_size != 0)
        finding(z, "vpmm_trim released %zu bytes: not whole pages", released);
    return 1;
}

static int release_entry(vpmm_drv_entry_t e)
{
    return e == VPMM_DRV_VA_FREE || e == VPMM_DRV_MEM_RELEASE || e == VPMM_DRV_MEM_UNMAP ||
           e == VPMM_DRV_EVENT_DESTROY || e == VPMM_DRV_USER_OBJECT_RELEASE ||
           e == VPMM_DRV_GRAPH_DESTROY || e == VPMM_DRV_END_CAPTURE;
}

static int op_fault(fz_t *z)
{
    unsigned kind = rd8(z);
    vpmm_drv_entry_t e = (vpmm_drv_entry_t)(rd8(z) % VPMM_DRV_ENTRY_COUNT);
    unsigned n = rd8(z);
    vpmm_dres_t res = (kind & 1) ? VPMM_DRV_OUT_OF_MEMORY : VPMM_DRV_ERROR;
    if (verbose)
        fprintf(stderr, "    arm: mode %u, %s, n %u, %s\n", (kind >> 1) % 4, vpmm_drv_entry_name(e),
                n, res == VPMM_DRV_ERROR ? "ERROR" : "OUT_OF_MEMORY");
    /* One arming at a time: two could fail both tries of one call, which is allowed to leak. */
    vpmm_fault_clear(z->fault);
    z->armed = 1;
    switch ((kind >> 1) % 4) {
    case 0:
        vpmm_fault_fail_nth(z->fault, e, n % 8 + 1, res);
        break;
    case 1:
        vpmm_fault_fail_any_nth(z->fault, n % 16 + 1, res);
        break;
    case 2:
        /* A lasting failure of a release entry leaks by design (every release gets two tries). */
        if (release_entry(e))
            vpmm_fault_fail_nth(z->fault, e, n % 4 + 1, res);
        else
            vpmm_fault_fail_from(z->fault, e, n % 4 + 1, res);
        break;
    default:
        z->armed = 0;
        z->destroy_fault = 1;
        z->destroy_fault_n = n % 32 + 1;
        z->destroy_fault_res = res;
        break;
    }
    return 1;
}

static void inspect_stats(fz_t *z)
{
    vpmm_stats_t s = stats_of(z);
    size_t live = 0, alloc = 0;
    for (size_t i = 0; i < z->nlive; i++) {
        live += z->live[i].size;
        alloc += rnd(z->live[i].size);
    }
    if (s.live_allocs != z->nlive || s.live_bytes != live || s.allocated_bytes != alloc)
        finding(z,
                "stats: %llu live allocations of %zu bytes (%zu allocated); tracked %zu of %zu "
                "(%zu)",
                (unsigned long long)s.live_allocs, s.live_bytes, s.allocated_bytes, z->nlive, live,
                alloc);
    if (s.reserved_va_bytes != s.allocated_bytes + s.free_bytes + s.hole_bytes + s.zombie_bytes)
        finding(z, "stats: reserved %zu != allocated %zu + free %zu + holes %zu + zombies %zu",
                s.reserved_va_bytes, s.allocated_bytes, s.free_bytes, s.hole_bytes, s.zombie_bytes);
    if (s.mapped_bytes > z->memory_limit || (z->max_bytes && s.mapped_bytes > z->max_bytes))
        finding(z, "stats: %zu bytes mapped, over the device (%zu) or the cap (%zu)",
                s.mapped_bytes, z->memory_limit, z->max_bytes);
    if (s.peak_live_bytes < s.live_bytes || s.peak_mapped_bytes < s.mapped_bytes)
        finding(z, "stats: a peak below its current value");
}

static void inspect_walk(fz_t *z)
{
    regions_t rs;
    uintptr_t *tracked = live_sorted(z);
    size_t nalloc = 0;
    regions_get(z, &rs);
    for (size_t k = 0; k < rs.n; k++) {
        const vpmm_region_info_t *r = &rs.r[k];
        if (k > 0 && r->addr < rs.r[k - 1].addr + rs.r[k - 1].size)
            finding(z, "walk: regions %p and %p overlap", (void *)rs.r[k - 1].addr,
                    (void *)r->addr);
        if (r->state != VPMM_REGION_ALLOCATED)
            continue;
        nalloc++;
        if (!in_sorted(tracked, z->nlive, r->addr))
            finding(z, "walk: an allocation at %p (%zu bytes) nobody made", (void *)r->addr,
                    r->requested);
    }
    if (nalloc != z->nlive)
        finding(z, "walk: %zu allocations, %zu tracked", nalloc, z->nlive);
    for (size_t i = 0; i < z->nlive; i++) {
        const vpmm_region_info_t *r = region_containing(&rs, (uintptr_t)z->live[i].p);
        if (r == NULL || r->addr != (uintptr_t)z->live[i].p || r->requested != z->live[i].size)
            finding(z, "walk: the tracked allocation %p (%zu bytes) is not a region",
                    (void *)z->live[i].p, z->live[i].size);
        stamp_check(z, &z->live[i], "walk");
    }
    free(tracked);
    free(rs.r);
}

static int op_inspect(fz_t *z)
{
    unsigned kind = rd8(z) % 8, i = rd8(z);
    char buf[4097];
    switch (kind) {
    case 0:
        inspect_stats(z);
        break;
    case 1:
        inspect_walk(z);
        break;
    case 2:
        expect_status(z, "vpmm_pool_dump", vpmm_pool_dump(z->pool, devnull), S(VPMM_SUCCESS), 1);
        break;
    case 3: {
        size_t len = (i & 0x80) ? sizeof buf - 1 : i % 120 + 1;
        memset(buf, 'x', sizeof buf);
        expect_status(z, "vpmm_pool_oom_report", vpmm_pool_oom_report(z->pool, buf, len),
                      S(VPMM_SUCCESS), 1);
        if (memchr(buf, '\0', len) == NULL || buf[len] != 'x')
            finding(z, "vpmm_pool_oom_report did not stay within and terminate %zu bytes", len);
        break;
    }
    case 4: {
        int code = 0;
        const char *call = NULL;
        expect_status(z, "vpmm_pool_last_driver_error",
                      vpmm_pool_last_driver_error(z->pool, &code, &call), S(VPMM_SUCCESS), 1);
        if (code != 0 && call == NULL)
            finding(z, "last driver error %d without a call name", code);
        break;
    }
    case 5: {
        vpmm_stats_t s;
        expect_status(z, "vpmm_reset_peak_stats", vpmm_reset_peak_stats(z->pool), S(VPMM_SUCCESS),
                      1);
        s = stats_of(z);
        if (s.peak_live_bytes != s.live_bytes || s.peak_mapped_bytes != s.mapped_bytes)
            finding(z, "peaks not reset (live %zu/%zu, mapped %zu/%zu)", s.live_bytes,
                    s.peak_live_bytes, s.mapped_bytes, s.peak_mapped_bytes);
        break;
    }
    case 6:
        if (z->ngp == 0)
            return 0;
        {
            vpmm_graph_pool_t *gp = z->gps[i % z->ngp].gp;
            vpmm_graph_pool_stats_t gs = gstats(z, gp);
            vpmm_stats_t s = stats_of(z);
            if (gs.live_allocs > s.live_allocs || gs.mapped_bytes > s.mapped_bytes ||
                gs.peak_live_bytes < gs.live_bytes)
                finding(z, "graph pool g%u stats do not fit the pool's", gs.id);
            expect_status(z, "vpmm_graph_pool_reset_peak_stats",
                          vpmm_graph_pool_reset_peak_stats(gp), S(VPMM_SUCCESS), 1);
        }
        break;
    default:
        if (z->nck == 0)
            return 0;
        {
            const vpmm_checkpoint_t *ck = z->cks[i % z->nck];
            vpmm_checkpoint_info_t info;
            vpmm_checkpoint_alloc_t one[4];
            size_t live = 0, n;
            expect_status(z, "vpmm_checkpoint_info", vpmm_checkpoint_info(ck, &info),
                          S(VPMM_SUCCESS), 1);
            n = vpmm_checkpoint_allocs(ck, one, 4);
            for (size_t k = 0; k < n && k < 4; k++)
                live += one[k].size;
            if (n != info.allocs || (n <= 4 && live != info.live_bytes) ||
                info.mapped_bytes < info.live_bytes)
                finding(z, "checkpoint info and allocations disagree");
        }
        break;
    }
    return 1;
}

static int op_sync(fz_t *z)
{
    (void)z->host->synchronize(z->host); /* refused during a capture, which it invalidates */
    return 1;
}

typedef int (*op_fn)(fz_t *z); /* returns 0 if the operation had nothing to act on */

static const op_fn op_table[OP_COUNT] = {
    op_malloc,        op_free,          op_free_bad,   op_work,      op_stream_release,
    op_capture_begin, op_capture_end,   op_ext_begin,  op_ext_end,   op_capture_register,
    op_capture_gp,    op_graph_destroy, op_exec,       op_gp_create, op_gp_ref,
    op_ck_take,       op_ck_reapply,    op_ck_destroy, op_trim,      op_fault,
    op_inspect,       op_sync,
};

/* ---- one input ------------------------------------------------------------------------------ */

static void setup(fz_t *z)
{
    static const size_t gran[4] = { 2 * MiB, 64 * KiB, 64 * KiB, 2 * MiB };
    static const size_t page[4] = { 2 * MiB, 64 * KiB, 256 * KiB, 4 * MiB };
    static const size_t memory[4] = { 64 * MiB, 128 * MiB, 256 * MiB, 32 * MiB };
    static const int cache[4] = { -1, 0, 100, 1 };
    vpmm_config_t cfg;
    vpmm_options_t opt;
    vpmm_host_options_t ho;
    vpmm_status_t st;

    z->page_size = page[z->cfg & 3];
    z->memory_limit = memory[(z->cfg >> 2) & 3];
    if ((z->cfg & 3) == 1)
        z->memory_limit /= 4; /* 64 KiB pages: at most 1024 of them, or checking dominates */
    z->max_bytes = (z->cfg & 0x40) ? 40 * MiB : 0;
    vpmm_config_init(&cfg);
    cfg.ignore_env = 1;
    cfg.backend = VPMM_BACKEND_HOST;
    cfg.page_size = z->page_size;
    cfg.va_size = VA_SIZE;
    cfg.prealloc_pages = (z->cfg & 0x80) ? 2 : 0;
    cfg.max_bytes = z->max_bytes;
    cfg.cache_percent = cache[(z->cfg >> 4) & 3];
    st = vpmm_i_options_resolve(&cfg, &opt);
    if (st != VPMM_SUCCESS)
        finding(z, "options: %s", vpmm_status_name(st));
    ho = (vpmm_host_options_t){ .granularity = gran[z->cfg & 3], .memory_limit = z->memory_limit };
    if (vpmm_host_open(&ho, &z->host) != VPMM_DRV_OK)
        finding(z, "vpmm_host_open failed");
    if (vpmm_fault_wrap(z->host, &z->fault) != VPMM_DRV_OK)
        finding(z, "vpmm_fault_wrap failed");
    st = vpmm_i_pool_create_on(&opt, z->fault, 0, &z->pool);
    if (st != VPMM_SUCCESS)
        finding(z, "pool creation failed: %s", vpmm_status_name(st));
    z->streams[0] = NULL;
    z->streams[1] = (vpmm_stream_t)(uintptr_t)1; /* CU_STREAM_LEGACY */
    for (size_t i = 2; i < NSTREAMS; i++) {
        z->streams[i] = vpmm_host_stream_create(z->host);
        if (z->streams[i] == NULL)
            finding(z, "vpmm_host_stream_create failed");
    }
    check_all(z);
}

static int any_capture(const fz_t *z)
{
    for (size_t si = 2; si < NSTREAMS; si++)
        if (cap_of(z, si, NULL) != VPMM_CAPTURE_NONE)
            return 1;
    return 0;
}

/* Ends everything and destroys the pool; nothing may be left in the driver. */
static void cleanup(fz_t *z)
{
    vpmm_fault_live_t live;
    vpmm_host_counts_t hc;
    vpmm_stats_t s;
    vpmm_status_t st;

    z->op = -1;
    vpmm_fault_clear(z->fault);
    z->armed = 0;
    for (int pass = 0; pass < 4 && any_capture(z); pass++) {
        for (size_t si = 2; si < NSTREAMS; si++) {
            vpmm_graph_t g = NULL;
            if (cap_of(z, si, NULL) == VPMM_CAPTURE_NONE)
                continue;
            st = vpmm_capture_end(z->pool, z->streams[si], &g);
            expect_status(z, "vpmm_capture_end(cleanup)", st,
                          S(VPMM_SUCCESS) | S(VPMM_ERROR_DRIVER), 1);
            if (st == VPMM_SUCCESS)
                keep_graph(z, g);
        }
    }
    if (any_capture(z))
        finding(z, "a capture cannot be ended");
    check_all(z);
    while (z->nexec > 0)
        if (vpmm_host_exec_destroy(z->host, z->execs[--z->nexec]) != VPMM_DRV_OK)
            finding(z, "vpmm_host_exec_destroy failed");
    while (z->ngraphs > 0)
        expect_status(z, "vpmm_graph_destroy(cleanup)",
                      vpmm_graph_destroy(z->pool, z->graphs[--z->ngraphs]), S(VPMM_SUCCESS), 1);
    vpmm_host_complete_all(z->host);
    check_all(z);
    while (z->nlive > 0)
        free_live(z, z->nlive - 1);
    while (z->ngp > 0) {
        gref_t *g = &z->gps[z->ngp - 1];
        for (; g->refs > 0; g->refs--)
            expect_status(z, "vpmm_graph_pool_release(cleanup)", vpmm_graph_pool_release(g->gp),
                          S(VPMM_SUCCESS), 1);
        z->ngp--;
    }
    while (z->nck > 0)
        vpmm_checkpoint_destroy(z->cks[--z->nck]);
    vpmm_host_complete_all(z->host);
    s = stats_of(z);
    if (s.live_allocs != 0 || s.graph_pools != 0)
        finding(z, "after cleanup: %llu live allocations, %llu graph pools",
                (unsigned long long)s.live_allocs, (unsigned long long)s.graph_pools);
    if (vpmm_host_user_objects(z->host) != 0 || vpmm_host_graphs(z->host) != 0)
        finding(z, "after cleanup: %zu user objects, %zu graphs in the driver",
                vpmm_host_user_objects(z->host), vpmm_host_graphs(z->host));
    check_all(z);
    if (z->destroy_fault)
        vpmm_fault_fail_any_nth(z->fault, z->destroy_fault_n, z->destroy_fault_res);
    /* Every teardown call gets a second try: one failure must not matter. */
    st = vpmm_pool_destroy(z->pool);
    if (st != VPMM_SUCCESS)
        finding(z, "vpmm_pool_destroy: %s", vpmm_status_name(st));
    z->pool = NULL;
    vpmm_fault_clear(z->fault);
    vpmm_fault_live(z->fault, &live);
    vpmm_host_counts(z->host, &hc);
    if (live.handles || live.mappings || live.reservations || live.events || live.user_objects ||
        hc.handles || hc.mappings || hc.reservations || hc.events)
        finding(z,
                "leak after vpmm_pool_destroy: handles %lld, mappings %lld, reservations %lld, "
                "events %lld, user objects %lld (host: %zu, %zu, %zu, %zu)",
                (long long)live.handles, (long long)live.mappings, (long long)live.reservations,
                (long long)live.events, (long long)live.user_objects, hc.handles, hc.mappings,
                hc.reservations, hc.events);
    z->fault->close(z->fault);
    z->fault = z->host = NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_t *z = &fz_state;
    if (size == 0)
        return 0;
    memset(z, 0, sizeof *z);
    z->in = data;
    z->len = size;
    z->cfg = data[0];
    z->pos = 1;
    z->op = -1;
    setup(z);
    while (z->pos < z->len) {
        int op = (int)(rd8(z) & 31), done;
        uint64_t injected;
        if (op >= OP_COUNT)
            op = op < 27 ? OP_MALLOC : OP_FREE;
        z->op = op;
        if (verbose)
            fprintf(stderr, "op %llu: %s\n", (unsigned long long)z->nop, op_names[op]);
        injected = vpmm_fault_injected(z->fault);
        done = op_table[op](z);
        if (verbose && vpmm_fault_injected(z->fault) != injected)
            fprintf(stderr, "    %llu driver failure(s) injected, the last in %s\n",
                    (unsigned long long)(vpmm_fault_injected(z->fault) - injected),
                    z->fault->last_call);
        if (!done)
            continue; /* nothing to act on (no graph pool, no checkpoint ...): not counted */
        if (op != OP_FAULT && z->armed) {
            vpmm_fault_clear(z->fault); /* an arming lasts one operation */
            z->armed = 0;
        }
        check_all(z);
        z->nop++;
        if (++total_ops % 1000000 == 0)
            fprintf(stderr, "fuzz_ops: %llu operations so far\n", (unsigned long long)total_ops);
    }
    cleanup(z);
    total_inputs++;
    return 0;
}

/* ---- process lifetime ------------------------------------------------------------------------ */

static void at_exit(void)
{
    fprintf(stderr, "fuzz_ops: %llu operations in %llu inputs\n", (unsigned long long)total_ops,
            (unsigned long long)total_inputs);
    if (side_pool != NULL) {
        vpmm_free(side_pool, side_ptr);
        vpmm_pool_destroy(side_pool);
        side_pool = NULL;
    }
    if (devnull != NULL)
        fclose(devnull);
    devnull = NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    vpmm_config_t cfg;
    (void)argc;
    (void)argv;
    verbose = getenv("FUZZ_OPS_VERBOSE") != NULL && atoi(getenv("FUZZ_OPS_VERBOSE")) > 0;
    devnull = fopen("/dev/null", "w");
    if (devnull == NULL) {
        perror("fuzz_ops: /dev/null");
        abort();
    }
    vpmm_config_init(&cfg);
    cfg.ignore_env = 1;
    cfg.backend = VPMM_BACKEND_HOST;
    cfg.va_size = VA_SIZE;
    cfg.host_memory = 16 * MiB;
    if (vpmm_pool_create(&cfg, &side_pool) != VPMM_SUCCESS ||
        vpmm_malloc(side_pool, 4096, NULL, &side_ptr) != VPMM_SUCCESS) {
        fprintf(stderr, "fuzz_ops: the side pool could not be made: %s\n", vpmm_last_error());
        abort();
    }
    atexit(at_exit);
    return 0;
}
