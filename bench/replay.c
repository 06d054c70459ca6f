/*
 * replay.c — vpmm-replay: replays an allocation trace (docs/TRACE_FORMAT.md) against vpmm or a
 * baseline and reports footprint (peak device memory / peak live bytes) and per-call latency.
 *
 *   vpmm-replay [--backend host|cuda|cudaMallocAsync|cudaMalloc|torch|torch-expandable] [--json]
 *               [--svg FILE] [--verify] [--driver-stats] [--quiet] [--version] TRACE
 *
 * torch and torch-expandable, PyTorch's caching allocator (backends.h), are built in where PyTorch
 * is found; without them, asking for one is "backend unavailable" (exit 2), as a missing GPU is.
 * The --svg file is created before anything else, so a bad path fails at once; the trace is then
 * loaded and validated (bad lines are reported with their number, a truncated .gz as truncated),
 * so the replay loop only indexes arrays; each malloc and free is timed alone with the TSC
 * (timing.h; the timer's own cost is reported as timer_ns, not subtracted). Where the time goes
 * the sum of all malloc and of all free durations (the total allocator time), their
 * p99 and max; for vpmm its driver calls by kind (count and time, vpmm_driver_stats: with
 * --driver-stats, off by default so that the latency figures do not pay its two clock reads per
 * driver call), defragmentations, remaps per
 * page; the mallocs above 2 ms and, for vpmm, how many of them grew the pool by more than 1 GiB
 * (the single-call goal and its exception), and what the slowest malloc asked for and did
 * (pages created and remapped: vpmm's counters, read untimed after each malloc that left the fast
 * path); the total of the trace's second half (past a training program's warm-up); and the
 * background CPU time: the process's CPU time during the replay minus the replay
 * thread's own (CLOCK_PROCESS_CPUTIME_ID - CLOCK_THREAD_CPUTIME_ID), so that work another thread
 * does for the allocator (a driver's or a future worker's) is reported, never hidden. Without
 * --verify no allocation is touched, so an 8 GB trace replays on the host backend in a few MB of
 * RAM. A replay in which mallocs failed (out of memory: a cap, a small device) served another
 * program than the trace's: its figures are printed, but no footprint, and it exits 4. Exit status:
 * 0 ok, 1 bad usage, trace or output file, 2 backend unavailable, 3 an allocator error, 4 mallocs
 * failed for lack of memory. A run that does not end in 0 or 4 leaves no --svg file behind.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backends.h"
#include "cli.h"
#include "escape.h"
#include "svg.h"
#include "timing.h"
#include "trace.h"

#define TOOL           "vpmm-replay"
#define MAX_SVG_POINTS 2000
/* The single-call goal: no malloc above 2 ms unless it grows the pool by more than 1 GiB. */
#define SLOW_CALL_NS     2000000u
#define BIG_GROWTH_BYTES ((uint64_t)1 << 30)
/* vpmm's page counters are read after every malloc that took at least this long (a fast-path
 * malloc takes ~0.1 us and changes no counter; one driver call takes more than a microsecond). */
#define COUNTERS_AFTER_NS 1000u

enum { EXIT_USAGE = 1, EXIT_BACKEND = 2, EXIT_ERROR = 3, EXIT_OOM = 4 };

typedef struct options {
    const char *backend, *trace, *svg;
    int json, verify, quiet, driver_stats;
} options_t;

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: vpmm-replay [--backend NAME] [--json] [--svg FILE] [--verify] [--driver-stats]\n"
        "                   [--quiet] TRACE\n"
        "  --backend  %s (default: cuda; host = vpmm's emulation, no GPU)\n"
        "  --json     print one JSON object on stdout instead of the table\n"
        "  --svg FILE write a memory timeline (live, device, free; VA holes in a panel of\n"
        "             their own); FILE is created before the replay starts\n"
        "  --verify   write a pattern into every allocation, check it before the free\n"
        "  --driver-stats  vpmm: count and time its driver calls by kind (two clock reads\n"
        "             per driver call: off by default, so that latencies do not pay them)\n"
        "  --quiet    no progress bar\n"
        "  --version  print the version and exit\n"
        "TRACE: a trace file (docs/TRACE_FORMAT.md), gzip or plain, or - for stdin\n"
        "Exit status: 0 ok, 1 bad usage, trace or output file, 2 backend unavailable,\n"
        "3 allocator error, 4 mallocs failed (out of memory; no footprint is reported).\n",
        backend_names());
}

static void parse_args(int argc, char **argv, options_t *o)
{
    static const struct option longopts[] = {
        { "backend", required_argument, NULL, 'b' },
        { "json", no_argument, NULL, 'j' },
        { "svg", required_argument, NULL, 's' },
        { "verify", no_argument, NULL, 'v' },
        { "quiet", no_argument, NULL, 'q' },
        { "driver-stats", no_argument, NULL, 'D' },
        CLI_COMMON_OPTIONS,
        { NULL, 0, NULL, 0 },
    };
    int c;
    memset(o, 0, sizeof *o);
    while ((c = getopt_long(argc, argv, "b:js:vqh", longopts, NULL)) != -1) {
        switch (c) {
        case 'b':
            o->backend = optarg;
            break;
        case 'j':
            o->json = 1;
            break;
        case 's':
            o->svg = optarg;
            break;
        case 'v':
            o->verify = 1;
            break;
        case 'q':
            o->quiet = 1;
            break;
        case 'D':
            o->driver_stats = 1;
            break;
        default:
            cli_other_option(TOOL, c, usage);
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, "vpmm-replay: expected one TRACE argument, got %d\n", argc - optind);
        usage(stderr);
        exit(EXIT_USAGE);
    }
    o->trace = argv[optind];
    if (o->backend == NULL)
        o->backend = backend_default();
    if (!backend_known(o->backend)) {
        fprintf(stderr, "vpmm-replay: --backend: '%s' is not one of %s\n", o->backend,
                backend_names());
        exit(EXIT_USAGE);
    }
}

static void progress(size_t done, size_t total, int *last_pct)
{
    int pct = (int)(done * 100 / (total ? total : 1));
    if (pct == *last_pct)
        return;
    *last_pct = pct;
    fprintf(stderr, "\r  replaying [%-50.*s] %3d%%", pct / 2,
            "##################################################", pct);
    if (done == total)
        fputc('\n', stderr);
}

/* The CPU time of a clock (CLOCK_PROCESS_CPUTIME_ID, CLOCK_THREAD_CPUTIME_ID), in ns. */
static uint64_t cpu_ns(clockid_t clock)
{
    struct timespec ts;
    if (clock_gettime(clock, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

typedef struct result {
    size_t mallocs, frees, ooms;
    uint32_t malloc_med, malloc_p99, malloc_max, free_med, free_p99, free_max;
    uint64_t malloc_total, free_total; /* ns: the sums of all malloc / free durations */
    /* ns: the same over the trace's second half (operations nops/2 onwards): past a program's
     * warm-up (a training trace's first steps grow the memory; later steps reuse it). */
    uint64_t late_total;
    uint64_t thread_cpu_ns, bg_cpu_ns; /* the replay thread's CPU time; everyone else's */
    /* Mallocs above SLOW_CALL_NS; of them, those that grew the pool by more than
     * BIG_GROWTH_BYTES (vpmm only: the goal's exception). The slowest malloc: its request, and
     * for vpmm the pages it created and remapped. have_pages: vpmm's counters were read. */
    size_t slow_calls, slow_big_growths, max_size;
    uint64_t max_created, max_remapped;
    int have_pages;
    double wall_s;
    backend_result_t br;
} result_t;

/* Untimed, after a malloc that took ns: the slow-call count and the slowest call's figures.
 * *created / *remapped hold vpmm's counters as last read; the difference is this call's work. */
static void note_malloc(backend_t *b, result_t *r, uint32_t ns, size_t size, uint64_t *created,
                        uint64_t *remapped, size_t page_size)
{
    uint64_t c = *created, m = *remapped;
    if (r->have_pages && ns >= COUNTERS_AFTER_NS)
        backend_page_counters(b, created, remapped, &page_size);
    if (ns > SLOW_CALL_NS) {
        r->slow_calls++;
        r->slow_big_growths += (*created - c) * page_size > BIG_GROWTH_BYTES;
    }
    if (ns > r->malloc_max) {
        r->malloc_max = ns;
        r->max_size = size;
        r->max_created = *created - c;
        r->max_remapped = *remapped - m;
    }
}

/* The replay itself. Returns 0, or EXIT_ERROR after an allocator error (message on stderr);
 * out-of-memory statuses are counted in r->ooms, and the replay goes on. */
static int replay(const trace_t *t, backend_t *b, const options_t *o, result_t *r, svg_point_t *pts,
                  size_t *npts)
{
    void **ptr = calloc(t->nslots ? t->nslots : 1, sizeof *ptr);
    uint32_t *mt = malloc((t->allocs ? t->allocs : 1) * sizeof *mt);
    uint32_t *ft = malloc((t->frees ? t->frees : 1) * sizeof *ft);
    size_t every = t->nops / MAX_SVG_POINTS + 1;
    int last_pct = -1, rc = 0, tty = !o->quiet && isatty(2);
    uint64_t peak_live_iv = 0, peak_dev_iv = 0;
    uint64_t t0 = timing_now_ns();
    uint64_t proc0 = cpu_ns(CLOCK_PROCESS_CPUTIME_ID), thr0 = cpu_ns(CLOCK_THREAD_CPUTIME_ID);
    uint64_t proc1, thr1, created0 = 0, remapped0 = 0;
    size_t late_m = 0, late_f = 0; /* the first malloc and free of the second half */
    size_t page_size = 0;

    memset(r, 0, sizeof *r);
    r->have_pages = backend_page_counters(b, &created0, &remapped0, &page_size);
    if (ptr == NULL || mt == NULL || ft == NULL) {
        fprintf(stderr, "vpmm-replay: out of host memory\n");
        rc = EXIT_ERROR;
        goto out;
    }
    for (size_t i = 0; i < t->nops && rc == 0; i++) {
        const trace_op_t *op = &t->ops[i];
        if (i == t->nops / 2) {
            late_m = r->mallocs;
            late_f = r->frees;
        }
        if (op->kind == TRACE_ALLOC) {
            uint64_t a = timing_ticks();
            backend_rc_t e = backend_malloc(b, op->size, op->stream, &ptr[op->slot]);
            uint32_t ns = timing_to_ns(timing_ticks() - a);
            mt[r->mallocs++] = ns;
            note_malloc(b, r, ns, op->size, &created0, &remapped0, page_size);
            if (e == BACKEND_OOM) {
                r->ooms++;
                ptr[op->slot] = NULL;
            } else if (e != BACKEND_OK ||
                       backend_after_malloc(b, ptr[op->slot], op->size, op->stream) != BACKEND_OK) {
                fprintf(stderr, "vpmm-replay: operation %zu: malloc(%llu): %s\n", i,
                        (unsigned long long)op->size, backend_error(b));
                rc = EXIT_ERROR;
            }
        } else if (ptr[op->slot] != NULL) {
            uint64_t a;
            if (backend_before_free(b, ptr[op->slot], op->size, op->stream) != BACKEND_OK) {
                fprintf(stderr, "vpmm-replay: operation %zu: %s\n", i, backend_error(b));
                rc = EXIT_ERROR;
                break;
            }
            a = timing_ticks();
            if (backend_free(b, ptr[op->slot], op->size, op->stream) != BACKEND_OK) {
                fprintf(stderr, "vpmm-replay: operation %zu: free: %s\n", i, backend_error(b));
                rc = EXIT_ERROR;
            }
            ft[r->frees++] = timing_to_ns(timing_ticks() - a);
            ptr[op->slot] = NULL;
        }
        if (pts != NULL) {
            /* Each point is the maximum over its interval, so no peak falls between samples;
             * free bytes and holes are read at the interval's end. */
            backend_sample_t now;
            backend_sample_cheap(b, &now);
            if (now.live > peak_live_iv)
                peak_live_iv = now.live;
            if (now.device > peak_dev_iv)
                peak_dev_iv = now.device;
            if ((i + 1) % every == 0 || i + 1 == t->nops) {
                pts[*npts].op = i + 1;
                backend_sample(b, &pts[*npts].s);
                pts[*npts].s.live = peak_live_iv;
                pts[*npts].s.device = peak_dev_iv;
                (*npts)++;
                peak_live_iv = peak_dev_iv = 0;
            }
        }
        if (tty && (i & 1023) == 0)
            progress(i, t->nops, &last_pct);
    }
    if (tty)
        progress(t->nops, t->nops, &last_pct);
    r->wall_s = (double)(timing_now_ns() - t0) / 1e9;
    thr1 = cpu_ns(CLOCK_THREAD_CPUTIME_ID);
    proc1 = cpu_ns(CLOCK_PROCESS_CPUTIME_ID);
    r->thread_cpu_ns = thr1 - thr0;
    /* The process clock includes this thread: what is left is the other threads'. */
    r->bg_cpu_ns = proc1 - proc0 > r->thread_cpu_ns ? proc1 - proc0 - r->thread_cpu_ns : 0;
    backend_finish(b, &r->br);
    /* Blocks the trace never freed: give them back (untimed). */
    for (size_t s = 0; s < t->nslots; s++)
        if (ptr[s] != NULL)
            backend_free(b, ptr[s], 0, 0);
    for (size_t i = 0; i < r->mallocs; i++) {
        r->malloc_total += mt[i];
        r->late_total += i >= late_m ? mt[i] : 0;
    }
    for (size_t i = 0; i < r->frees; i++) {
        r->free_total += ft[i];
        r->late_total += i >= late_f ? ft[i] : 0;
        if (ft[i] > r->free_max)
            r->free_max = ft[i];
    }
    r->malloc_med = timing_quantile_u32(mt, r->mallocs, 0.5);
    r->malloc_p99 = timing_quantile_u32(mt, r->mallocs, 0.99);
    r->free_med = timing_quantile_u32(ft, r->frees, 0.5);
    r->free_p99 = timing_quantile_u32(ft, r->frees, 0.99);
out:
    free(ptr);
    free(mt);
    free(ft);
    return rc;
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* The footprint: peak device memory / peak live bytes; meaningless when mallocs failed. */
static double footprint(const trace_t *t, const result_t *r)
{
    return (double)r->br.peak_device / (double)t->peak_live;
}

/* Pages remapped per page (created, or held at the peak); 0 for no pages. */
static double remaps_per(uint64_t remapped, uint64_t pages)
{
    return pages ? (double)remapped / (double)pages : 0.0;
}

static void print_json(const options_t *o, const trace_t *t, const backend_t *b, const result_t *r,
                       uint32_t timer)
{
    const vpmm_stats_t *v = &r->br.vpmm;
    int hv = r->br.have_vpmm_stats;
    printf("{\"backend\": ");
    esc_json_string(stdout, backend_name(b));
    printf(", \"trace\": ");
    esc_json_string(stdout, base_name(o->trace));
    printf(", \"ops\": %zu, \"mallocs\": %zu, \"frees\": %zu, \"streams\": %zu, "
           "\"peak_live_bytes\": %llu, \"peak_device_bytes\": %llu, ",
           t->nops, r->mallocs, r->frees, t->nstreams, (unsigned long long)t->peak_live,
           (unsigned long long)r->br.peak_device);
    if (r->ooms == 0)
        printf("\"footprint\": %.4f, ", footprint(t, r));
    else
        printf("\"footprint\": null, ");
    printf("\"malloc_ns_median\": %u, \"free_ns_median\": %u, \"pair_ns_median\": %u, "
           "\"malloc_ns_p99\": %u, \"free_ns_p99\": %u, \"malloc_ns_max\": %u, \"timer_ns\": %u, "
           "\"wall_s\": %.3f, \"ooms\": %zu",
           r->malloc_med, r->free_med, r->malloc_med + r->free_med, r->malloc_p99, r->free_p99,
           r->malloc_max, timer, r->wall_s, r->ooms);
    printf(", \"malloc_ns_total\": %llu, \"free_ns_total\": %llu, \"alloc_ms_total\": %.3f, "
           "\"free_ns_max\": %u, \"replay_cpu_ms\": %.3f, \"background_cpu_ms\": %.3f",
           (unsigned long long)r->malloc_total, (unsigned long long)r->free_total,
           (double)(r->malloc_total + r->free_total) / 1e6, r->free_max,
           (double)r->thread_cpu_ns / 1e6, (double)r->bg_cpu_ns / 1e6);
    printf(", \"alloc_ms_second_half\": %.3f", (double)r->late_total / 1e6);
    printf(", \"malloc_over_2ms\": %zu, \"malloc_max_size\": %zu", r->slow_calls, r->max_size);
    if (r->have_pages)
        printf(", \"malloc_over_2ms_big_growth\": %zu, \"malloc_max_pages_created\": %llu, "
               "\"malloc_max_pages_remapped\": %llu",
               r->slow_big_growths, (unsigned long long)r->max_created,
               (unsigned long long)r->max_remapped);
    if (hv)
        printf(", \"defrag_count\": %llu, \"pages_remapped\": %llu, \"pages_created\": %llu, "
               "\"grows\": %llu, \"page_size\": %zu",
               (unsigned long long)v->defrags, (unsigned long long)v->pages_remapped,
               (unsigned long long)v->pages_created, (unsigned long long)v->grows, v->page_size);
    else
        printf(", \"defrag_count\": null, \"pages_remapped\": null");
    if (hv)
        printf(", \"remaps_per_page\": %.3f, \"remaps_per_peak_page\": %.3f, \"worker\": %d, "
               "\"worker_unmaps\": %llu, \"worker_cpu_ms\": %.3f",
               remaps_per(v->pages_remapped, v->pages_created),
               remaps_per(v->pages_remapped, v->peak_mapped_bytes / v->page_size), v->worker,
               (unsigned long long)v->worker_unmaps, (double)v->worker_cpu_ns / 1e6);
    if (r->br.have_driver_stats) {
        const vpmm_driver_stats_t *d = &r->br.driver;
        printf(", \"driver_calls\": %llu, \"driver_ms\": %.3f, \"driver\": {",
               (unsigned long long)d->calls, (double)d->ns / 1e6);
        for (int k = 0; k < VPMM_DRIVER_CALL_COUNT; k++)
            printf("%s\"%s\": {\"calls\": %llu, \"ns\": %llu, \"failures\": %llu}", k ? ", " : "",
                   vpmm_driver_call_name((vpmm_driver_call_t)k),
                   (unsigned long long)d->call[k].calls, (unsigned long long)d->call[k].ns,
                   (unsigned long long)d->call[k].failures);
        printf("}");
    } else {
        printf(", \"driver\": null");
    }
    printf("}\n");
}

static void print_table(const options_t *o, const trace_t *t, const backend_t *b, const result_t *r,
                        uint32_t timer)
{
    printf("vpmm-replay: %s on %s\n", base_name(o->trace), backend_name(b));
    printf("  %-22s %zu (%zu mallocs, %zu frees, %zu stream%s)\n", "operations", t->nops,
           r->mallocs, r->frees, t->nstreams, t->nstreams == 1 ? "" : "s");
    char sz[32];
    printf("  %-22s %s\n", "peak live", cli_bytes((double)t->peak_live, 3, sz, sizeof sz));
    printf("  %-22s %s\n", "peak device memory",
           cli_bytes((double)r->br.peak_device, 3, sz, sizeof sz));
    if (r->ooms == 0)
        printf("  %-22s %.4f\n", "footprint", footprint(t, r));
    else
        printf("  %-22s not measured: %zu of %zu mallocs failed (out of memory)\n", "footprint",
               r->ooms, r->mallocs);
    printf("  %-22s %u ns (p99 %u, max %u)\n", "malloc median", r->malloc_med, r->malloc_p99,
           r->malloc_max);
    printf("  %-22s %u ns (p99 %u, max %u)\n", "free median", r->free_med, r->free_p99,
           r->free_max);
    printf("  %-22s %zu bytes", "slowest malloc asked", r->max_size);
    if (r->have_pages)
        printf(" (created %llu pages, remapped %llu)", (unsigned long long)r->max_created,
               (unsigned long long)r->max_remapped);
    printf("\n  %-22s %zu", "mallocs above 2 ms", r->slow_calls);
    if (r->have_pages)
        printf(" (%zu of them grew the pool by more than 1 GiB)", r->slow_big_growths);
    printf("\n");
    printf("  %-22s %u ns (timer cost %u ns included)\n", "malloc+free median",
           r->malloc_med + r->free_med, timer);
    printf("  %-22s %.3f ms (malloc %.3f, free %.3f)\n", "allocator time total",
           (double)(r->malloc_total + r->free_total) / 1e6, (double)r->malloc_total / 1e6,
           (double)r->free_total / 1e6);
    printf("  %-22s %.3f ms\n", "  of it, second half", (double)r->late_total / 1e6);
    printf("  %-22s %.3f s\n", "wall time", r->wall_s);
    printf("  %-22s %.3f ms replay thread, %.3f ms background (other threads)\n", "CPU time",
           (double)r->thread_cpu_ns / 1e6, (double)r->bg_cpu_ns / 1e6);
    if (r->br.have_vpmm_stats) {
        const vpmm_stats_t *v = &r->br.vpmm;
        printf("  %-22s %llu defrags, %llu pages remapped, %llu created (page %zu KiB), %llu "
               "grows\n",
               "vpmm", (unsigned long long)v->defrags, (unsigned long long)v->pages_remapped,
               (unsigned long long)v->pages_created, v->page_size >> 10,
               (unsigned long long)v->grows);
        printf("  %-22s %.2f per page created, %.2f per page held at the peak\n", "remaps",
               remaps_per(v->pages_remapped, v->pages_created),
               remaps_per(v->pages_remapped, v->peak_mapped_bytes / v->page_size));
        if (v->worker)
            printf("  %-22s %llu unmaps, %.3f ms CPU (its whole life, the pool's end included)\n",
                   "background worker", (unsigned long long)v->worker_unmaps,
                   (double)v->worker_cpu_ns / 1e6);
        else
            printf("  %-22s off (VPMM_WORKER=0, or the host emulation)\n", "background worker");
    }
    if (r->br.have_driver_stats) {
        const vpmm_driver_stats_t *d = &r->br.driver;
        printf("  %-22s %llu calls, %.3f ms\n", "driver calls", (unsigned long long)d->calls,
               (double)d->ns / 1e6);
        for (int k = 0; k < VPMM_DRIVER_CALL_COUNT; k++) {
            const vpmm_driver_call_stats_t *c = &d->call[k];
            if (c->calls == 0)
                continue;
            printf("    %-20s %10llu calls %12.3f ms %10.0f ns/call",
                   vpmm_driver_call_name((vpmm_driver_call_t)k), (unsigned long long)c->calls,
                   (double)c->ns / 1e6, (double)c->ns / (double)c->calls);
            if (c->failures)
                printf(" (%llu failed)", (unsigned long long)c->failures);
            printf("\n");
        }
    }
}

int main(int argc, char **argv)
{
    options_t o;
    trace_t t;
    backend_t *b = NULL;
    result_t r;
    cli_output_t svg = { NULL, NULL, NULL, NULL, 0 };
    svg_point_t *pts = NULL;
    size_t npts = 0;
    char err[512];
    uint32_t timer;
    int rc;

    cli_check_stdout_at_exit(TOOL);
    parse_args(argc, argv, &o);
    /* Before the trace is even read: a bad path must not cost a replay. */
    if (o.svg != NULL && cli_output_open(&svg, TOOL, "--svg", o.svg, o.trace) != 0)
        return EXIT_USAGE;
    if (trace_load(o.trace, &t, err, sizeof err) != 0) {
        fprintf(stderr, "vpmm-replay: %s\n", err);
        cli_output_close(&svg, 0);
        return EXIT_USAGE;
    }
    if (backend_open(o.backend, t.nstreams, t.stream_ids,
                     (o.verify ? BACKEND_VERIFY : 0) | (o.driver_stats ? BACKEND_DRIVER_STATS : 0),
                     &b, err, sizeof err) != 0) {
        fprintf(stderr, "vpmm-replay: backend %s: %s\n", o.backend, err);
        trace_free(&t);
        cli_output_close(&svg, 0);
        return EXIT_BACKEND;
    }
    if (o.svg != NULL && (pts = calloc(MAX_SVG_POINTS + 2, sizeof *pts)) == NULL) {
        fprintf(stderr, "vpmm-replay: out of host memory\n");
        rc = EXIT_ERROR;
        goto out;
    }
    timing_calibrate();
    timer = timing_timer_cost_ns();
    rc = replay(&t, b, &o, &r, pts, &npts);
    if (rc != 0)
        goto out;
    if (o.json)
        print_json(&o, &t, b, &r, timer);
    else
        print_table(&o, &t, b, &r, timer);
    fflush(stdout);
    if (r.ooms > 0) {
        fprintf(stderr,
                "vpmm-replay: %zu of %zu mallocs failed (out of memory): the replay did not serve "
                "the trace's program, so it has no footprint (exit status %d)\n",
                r.ooms, r.mallocs, EXIT_OOM);
        rc = EXIT_OOM;
    }
    if (o.svg != NULL) {
        char title[256];
        if (r.ooms == 0)
            snprintf(title, sizeof title, "%s on %s: footprint %.3f", base_name(o.trace),
                     backend_name(b), footprint(&t, &r));
        else
            snprintf(title, sizeof title, "%s on %s: %zu of %zu mallocs failed (out of memory)",
                     base_name(o.trace), backend_name(b), r.ooms, r.mallocs);
        svg_write(svg.f, title, pts, npts, t.nops, r.br.have_vpmm_stats);
    }
out:
    if (cli_output_close(&svg, rc == 0 || rc == EXIT_OOM) != 0 && rc == 0)
        rc = EXIT_USAGE;
    backend_close(b);
    free(pts);
    trace_free(&t);
    return rc;
}
