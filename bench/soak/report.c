/*
 * report.c — how vpmm-soak ends: the summary (a table on stdout, or on stderr with --json and one
 * JSON line on stdout; every string in it escaped by escape.c), and fail(), through which the
 * first failure of any thread reports what the pool knows and exits (a second failure waits on
 * fail_lock until the exit). The counters are relaxed atomics, read while workers run.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "escape.h"
#include "soak.h"
#include "timing.h"

static const char *const count_names[NCOUNTS] = {
    "ops",          "mallocs",       "frees",          "fills",
    "checks",       "handoffs",      "returns",        "cross_stream",
    "captures",     "replays",       "checkpoint_ops", "bytes_allocated",
    "ooms_handled", "defrag_rounds", "graph_rounds",   "graph_trees",
    "sync_points",
};

/* The command line, its arguments separated by spaces (truncated to fit). */
static const char *join_command(char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < g.argc && used + 1 < len; i++) {
        int n = snprintf(buf + used, len - used, "%s%s", i > 0 ? " " : "", g.argv[i]);
        if (n < 0)
            break;
        used += (size_t)n < len - used ? (size_t)n : len - used - 1;
    }
    return buf;
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

const char *capture_mode_name(void)
{
    switch (g.o.capture_mode) {
    case VPMM_STREAM_CAPTURE_GLOBAL:
        return "global";
    case VPMM_STREAM_CAPTURE_THREAD_LOCAL:
        return "thread-local";
    case VPMM_STREAM_CAPTURE_RELAXED:
        return "relaxed";
    default:
        return "mixed";
    }
}

void sum_up(totals_t *t)
{
    memset(t, 0, sizeof *t);
    for (int i = 0; g.w != NULL && i < g.nw; i++) {
        for (int k = 0; k < NCOUNTS; k++)
            t->c[k] += load(&g.w[i].c[k]);
        t->mismatches += atomic_load(&g.w[i].mismatches);
    }
    t->c[C_OPS] += load(&g.pool_checks) + load(&g.trims);
    t->elapsed = g.t0 > 0 ? timing_now_s() - g.t0 : 0;
}

void report(const totals_t *t, const char *result, const char *message, const char *destroy)
{
    FILE *f = g.o.json ? stderr : stdout;
    char command[4096];
    const vpmm_stats_t *s = &t->st;
    double rate = t->elapsed > 0 ? (double)t->c[C_OPS] / t->elapsed : 0;

    fprintf(f, "vpmm-soak: %s%s%s\n", result, message[0] ? ": " : "", message);
    fprintf(f, "  %-20s", "command");
    for (int i = 0; i < g.argc; i++)
        fprintf(f, " %s", g.argv[i]);
    fprintf(f, "\n  %-20s %s, page %zu KiB, profile %s, seed %" PRIu64 "\n", "device",
            g.device[0] ? g.device : "?", g.page >> 10, g.pr.name ? g.pr.name : "?", g.o.seed);
    fprintf(f, "  %-20s %d workers x %d streams (+1 capture side stream each), %.1f s\n", "threads",
            g.o.threads, g.o.streams, t->elapsed);
    fprintf(f, "  %-20s %" PRIu64 " (%.0f/s)\n", "operations", t->c[C_OPS], rate);
    fprintf(f,
            "  %-20s %" PRIu64 " / %" PRIu64 ", %.1f GiB allocated, %" PRIu64
            " out-of-memory (handled)\n",
            "mallocs / frees", t->c[C_MALLOCS], t->c[C_FREES], (double)t->c[C_BYTES] / GiB,
            t->c[C_OOMS]);
    fprintf(f, "  %-20s %" PRIu64 " / %" PRIu64 "\n", "fills / checks", t->c[C_FILLS],
            t->c[C_CHECKS]);
    fprintf(f,
            "  %-20s %" PRIu64 " to other workers (%" PRIu64 " returned), %" PRIu64
            " across own streams\n",
            "handoffs", t->c[C_HANDOFFS], t->c[C_RETURNS], t->c[C_CROSS]);
    fprintf(f,
            "  %-20s %" PRIu64 " rounds (%" PRIu64 " trees), %" PRIu64 " captures, %" PRIu64
            " replays, %" PRIu64 " checkpoint take/reapply\n",
            "graphs", t->c[C_GRAPH_ROUNDS], t->c[C_TREES], t->c[C_CAPTURES], t->c[C_REPLAYS],
            t->c[C_CHECKPOINT_OPS]);
    fprintf(f,
            "  %-20s %" PRIu64 " forced rounds; pool: %" PRIu64 " defrags, %" PRIu64
            " pages remapped, %" PRIu64 " cross-stream waits\n",
            "defragmentation", t->c[C_DEFRAG_ROUNDS], s->defrags, s->pages_remapped,
            s->cross_stream_waits);
    fprintf(f, "  %-20s %" PRIu64 " invariant checks, %" PRIu64 " trims (%.1f GiB given back)\n",
            "pool", load(&g.pool_checks), load(&g.trims), (double)load(&g.trimmed_bytes) / GiB);
    fprintf(f,
            "  %-20s peak mapped %.2f GiB, peak live %.2f GiB, %" PRIu64 " pages created, %" PRIu64
            " released, %" PRIu64 " grows\n",
            "memory", (double)s->peak_mapped_bytes / GiB, (double)s->peak_live_bytes / GiB,
            s->pages_created, s->pages_released, s->grows);
    fprintf(f, "  %-20s peak %" PRIu64 " chunks, %.1f TiB reserved (sampled every 2 s)\n",
            "address space", g.peak_va_chunks, (double)g.peak_va_bytes / (1024.0 * GiB));
    fprintf(f, "  %-20s %llu\n", "mismatches", t->mismatches);
    fprintf(f, "  %-20s %s %d\n", "last driver error", t->drv_call ? t->drv_call : "none",
            t->drv_code);
    fprintf(f, "  %-20s %s\n", "vpmm_pool_destroy", destroy);
    if (!g.o.json)
        return;
    printf("{\"tool\": \"vpmm-soak\", \"result\": ");
    esc_json_string(stdout, result);
    printf(", \"message\": ");
    esc_json_string(stdout, message);
    printf(", \"command\": ");
    esc_json_string(stdout, join_command(command, sizeof command));
    printf(", \"device\": ");
    esc_json_string(stdout, g.device);
    printf(", \"profile\": ");
    esc_json_string(stdout, g.pr.name ? g.pr.name : "");
    printf(", \"capture_mode\": \"%s\"", capture_mode_name());
    printf(", \"threads\": %d, \"streams\": %d, \"seed\": %" PRIu64 ", \"seconds\": %.3f, "
           "\"ops_per_s\": %.0f, \"traces\": %d, \"trace_sizes\": %zu",
           g.o.threads, g.o.streams, g.o.seed, t->elapsed, rate, g.traces_loaded, g.nsizes);
    for (int k = 0; k < NCOUNTS; k++)
        printf(", \"%s\": %" PRIu64, count_names[k], t->c[k]);
    printf(", \"mismatches\": %llu, \"pool_checks\": %" PRIu64 ", \"trims\": %" PRIu64
           ", \"trimmed_bytes\": %" PRIu64,
           t->mismatches, load(&g.pool_checks), load(&g.trims), load(&g.trimmed_bytes));
    printf(", \"page_size\": %zu, \"defrags\": %" PRIu64 ", \"pages_remapped\": %" PRIu64
           ", \"pages_created\": %" PRIu64 ", \"pages_released\": %" PRIu64 ", \"grows\": %" PRIu64
           ", \"cross_stream_waits\": %" PRIu64 ", \"pool_ooms\": %" PRIu64
           ", \"peak_mapped_bytes\": %zu, \"peak_live_bytes\": %zu, \"peak_va_chunks\": %" PRIu64
           ", \"peak_va_bytes\": %" PRIu64,
           g.page, s->defrags, s->pages_remapped, s->pages_created, s->pages_released, s->grows,
           s->cross_stream_waits, s->ooms, s->peak_mapped_bytes, s->peak_live_bytes,
           g.peak_va_chunks, g.peak_va_bytes);
    printf(", \"driver_error_code\": %d, \"driver_error_call\": ", t->drv_code);
    esc_json_string(stdout, t->drv_call); /* null when none */
    printf(", \"pool_destroy\": ");
    esc_json_string(stdout, destroy);
    printf("}\n");
}

/* Stops the soak: the first failure reports, with what the pool knows, and exits. */
_Noreturn void fail(int code, const worker_t *w, const char *fmt, ...)
{
    char msg[1024], who[64];
    va_list ap;
    totals_t t;

    pthread_mutex_lock(&g.fail_lock); /* never unlocked: a second failure waits for the exit */
    atomic_store(&g.stop, 1);
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (w != NULL)
        snprintf(who, sizeof who, "worker %d (%s)", w->id,
                 atomic_load_explicit(&w->phase, memory_order_relaxed));
    else
        snprintf(who, sizeof who, "the main thread");
    sum_up(&t);
    fprintf(stderr, "vpmm-soak: FAILED after %.1f s, %" PRIu64 " operations, in %s: %s\n",
            t.elapsed, t.c[C_OPS], who, msg);
    if (g.pool != NULL) {
        t.have_st = vpmm_get_stats(g.pool, &t.st) == VPMM_SUCCESS;
        vpmm_pool_last_driver_error(g.pool, &t.drv_code, &t.drv_call);
    }
    fflush(stderr);
    report(&t, code == SOAK_CORRUPT ? "corruption" : "error", msg, "not reached");
    fflush(stdout);
    fflush(stderr);
    _exit(code);
}

void cuda_ok(const worker_t *w, cudaError_t e, const char *what, const char *file, int line)
{
    if (e != cudaSuccess)
        fail(SOAK_ERROR, w, "%s failed: %s (%s, %d) [%s:%d]", what, cudaGetErrorName(e),
             cudaGetErrorString(e), (int)e, base_name(file), line);
}

void vpmm_ok(const worker_t *w, vpmm_status_t st, const char *what, const char *file, int line)
{
    if (st != VPMM_SUCCESS)
        fail(SOAK_ERROR, w, "%s failed: %s (%s) [%s:%d]", what, vpmm_status_name(st),
             vpmm_last_error(), base_name(file), line);
}
