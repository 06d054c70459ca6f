/*
 * monitor.c — vpmm-soak's main thread while the workers run: vpmm_pool_check every 2 s (0
 * violations) with the stats' accounting equations, vpmm_trim every 5 s, a progress line every
 * 10 s, a warning when no operation happened for a minute (and a failure after STALL_FAIL_S), and
 * the limits (--seconds, --ops). Reads the workers' counters (relaxed atomics) and calls only
 * thread-safe vpmm functions.
 */
#include <inttypes.h>
#include <stdio.h>

#include "soak.h"
#include "timing.h"

static uint64_t total_ops(void)
{
    uint64_t n = load(&g.pool_checks) + load(&g.trims);
    for (int i = 0; i < g.nw; i++)
        n += load(&g.w[i].c[C_OPS]);
    return n;
}

void check_pool(void)
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

void monitor(void)
{
    double next_check = 2, next_trim = 5, next_progress = 10, last_change = 0, last_warn = 0;
    uint64_t last_ops = 0;
    for (;;) {
        const double t = timing_now_s() - g.t0;
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
        timing_sleep_us(20000);
    }
    atomic_store(&g.stop, 1);
}
