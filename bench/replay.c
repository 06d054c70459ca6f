/*
 * replay.c — vpmm-replay: replays an allocation trace (docs/TRACE_FORMAT.md) against vpmm or a
 * baseline and reports footprint (peak device memory / peak live bytes) and per-call latency.
 *
 *   vpmm-replay [--backend host|cuda|cudaMallocAsync|cudaMalloc] [--json] [--svg FILE]
 *               [--verify] [--quiet] TRACE
 *
 * The trace is loaded and validated first (bad lines are reported with their number), so the
 * replay loop only indexes arrays; each malloc and free is timed alone with the TSC (rdtscp,
 * calibrated against CLOCK_MONOTONIC; the timer's own cost is reported as timer_ns, not
 * subtracted). Without --verify
 * no allocation is touched, so an 8 GB trace replays on the host backend in a few MB of RAM.
 * The backend defaults to cuda, as the library does: without a GPU that is exit status 2 with a
 * message naming --backend host, never a silent switch to the emulation.
 * Exit status: 0 ok, 1 bad usage or trace, 2 backend unavailable, 3 an allocator error.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backends.h"
#include "svg.h"
#include "trace.h"

#define MAX_SVG_POINTS 2000

typedef struct options {
    const char *backend, *trace, *svg;
    int json, verify, quiet;
} options_t;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * Each call is timed with the TSC where there is one: in a VM, clock_gettime may be a system
 * call costing more than the allocator call being measured. ticks_per_ns is calibrated against
 * CLOCK_MONOTONIC at start-up.
 */
#if defined(__x86_64__)
#include <x86intrin.h>
static inline uint64_t ticks(void)
{
    unsigned aux;
    return __rdtscp(&aux);
}
#else
static inline uint64_t ticks(void)
{
    return now_ns();
}
#endif

static double ticks_per_ns = 1.0;

static void calibrate_ticks(void)
{
    uint64_t n0 = now_ns(), t0 = ticks(), n1, t1;
    do
        n1 = now_ns();
    while (n1 - n0 < 50000000u); /* 50 ms */
    t1 = ticks();
    ticks_per_ns = (double)(t1 - t0) / (double)(n1 - n0);
}

static uint32_t to_ns(uint64_t t)
{
    double ns = (double)t / ticks_per_ns;
    return ns > 4e9 ? UINT32_MAX : (uint32_t)(ns + 0.5);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Sorts v in place and returns its q-quantile (0.5 = median). */
static uint32_t quantile(uint32_t *v, size_t n, double q)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, cmp_u32);
    return v[(size_t)(q * (double)(n - 1))];
}

static uint32_t timer_cost_ns(void)
{
    uint32_t d[1001];
    for (int i = 0; i < 1001; i++) {
        uint64_t a = ticks(), b = ticks();
        d[i] = to_ns(b - a);
    }
    return quantile(d, 1001, 0.5);
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: vpmm-replay [--backend NAME] [--json] [--svg FILE] [--verify] [--quiet] TRACE\n"
            "  --backend  %s (default: cuda; host = vpmm's emulation, no GPU)\n"
            "  --json     print one JSON object on stdout instead of the table\n"
            "  --svg FILE write a memory timeline (live, device, free, holes)\n"
            "  --verify   write a pattern into every allocation, check it before the free\n"
            "  --quiet    no progress bar\n"
            "TRACE: a trace file (docs/TRACE_FORMAT.md), gzip or plain, or - for stdin\n",
            backend_names());
}

static int parse_args(int argc, char **argv, options_t *o)
{
    static const struct option longopts[] = {
        { "backend", required_argument, NULL, 'b' },
        { "json", no_argument, NULL, 'j' },
        { "svg", required_argument, NULL, 's' },
        { "verify", no_argument, NULL, 'v' },
        { "quiet", no_argument, NULL, 'q' },
        { "help", no_argument, NULL, 'h' },
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
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return -1;
        }
    }
    if (optind != argc - 1) {
        usage(stderr);
        return -1;
    }
    o->trace = argv[optind];
    if (o->backend == NULL)
        o->backend = "cuda"; /* as the library's default: the emulation only when asked for */
    return 0;
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

typedef struct result {
    size_t mallocs, frees, ooms;
    uint32_t malloc_med, malloc_p99, malloc_max, free_med, free_p99;
    double wall_s;
    backend_result_t br;
} result_t;

/* The replay itself. Returns 0, or 3 after an allocator error (message on stderr). */
static int replay(const trace_t *t, backend_t *b, const options_t *o, result_t *r, svg_point_t *pts,
                  size_t *npts)
{
    void **ptr = calloc(t->nslots ? t->nslots : 1, sizeof *ptr);
    uint32_t *mt = malloc((t->allocs ? t->allocs : 1) * sizeof *mt);
    uint32_t *ft = malloc((t->frees ? t->frees : 1) * sizeof *ft);
    size_t every = t->nops / MAX_SVG_POINTS + 1;
    int last_pct = -1, rc = 0, tty = !o->quiet && isatty(2);
    uint64_t peak_live_iv = 0, peak_dev_iv = 0;
    uint64_t t0 = now_ns();

    memset(r, 0, sizeof *r);
    if (ptr == NULL || mt == NULL || ft == NULL) {
        fprintf(stderr, "vpmm-replay: out of memory\n");
        rc = 3;
        goto out;
    }
    for (size_t i = 0; i < t->nops && rc == 0; i++) {
        const trace_op_t *op = &t->ops[i];
        if (op->kind == TRACE_ALLOC) {
            uint64_t a = ticks();
            backend_rc_t e = backend_malloc(b, op->size, op->stream, &ptr[op->slot]);
            mt[r->mallocs++] = to_ns(ticks() - a);
            if (e == BACKEND_OOM) {
                r->ooms++;
                ptr[op->slot] = NULL;
            } else if (e != BACKEND_OK ||
                       backend_after_malloc(b, ptr[op->slot], op->size, op->stream) != BACKEND_OK) {
                fprintf(stderr, "vpmm-replay: operation %zu: malloc(%llu): %s\n", i,
                        (unsigned long long)op->size, backend_error(b));
                rc = 3;
            }
        } else if (ptr[op->slot] != NULL) {
            uint64_t a;
            if (backend_before_free(b, ptr[op->slot], op->size, op->stream) != BACKEND_OK) {
                fprintf(stderr, "vpmm-replay: operation %zu: %s\n", i, backend_error(b));
                rc = 3;
                break;
            }
            a = ticks();
            if (backend_free(b, ptr[op->slot], op->size, op->stream) != BACKEND_OK) {
                fprintf(stderr, "vpmm-replay: operation %zu: free: %s\n", i, backend_error(b));
                rc = 3;
            }
            ft[r->frees++] = to_ns(ticks() - a);
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
    r->wall_s = (double)(now_ns() - t0) / 1e9;
    backend_finish(b, &r->br);
    /* Blocks the trace never freed: give them back (untimed). */
    for (size_t s = 0; s < t->nslots; s++)
        if (ptr[s] != NULL)
            backend_free(b, ptr[s], 0, 0);
    r->malloc_max = r->mallocs ? mt[0] : 0;
    for (size_t i = 0; i < r->mallocs; i++)
        if (mt[i] > r->malloc_max)
            r->malloc_max = mt[i];
    r->malloc_med = quantile(mt, r->mallocs, 0.5);
    r->malloc_p99 = quantile(mt, r->mallocs, 0.99);
    r->free_med = quantile(ft, r->frees, 0.5);
    r->free_p99 = quantile(ft, r->frees, 0.99);
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

static void print_json(const options_t *o, const trace_t *t, const backend_t *b, const result_t *r,
                       uint32_t timer)
{
    const vpmm_stats_t *v = &r->br.vpmm;
    int hv = r->br.have_vpmm_stats;
    printf("{\"backend\": \"%s\", \"trace\": \"%s\", \"ops\": %zu, \"mallocs\": %zu, "
           "\"frees\": %zu, \"streams\": %zu, \"peak_live_bytes\": %llu, "
           "\"peak_device_bytes\": %llu, \"footprint\": %.4f, \"malloc_ns_median\": %u, "
           "\"free_ns_median\": %u, \"pair_ns_median\": %u, \"malloc_ns_p99\": %u, "
           "\"free_ns_p99\": %u, \"malloc_ns_max\": %u, \"timer_ns\": %u, \"wall_s\": %.3f, "
           "\"ooms\": %zu",
           backend_name(b), base_name(o->trace), t->nops, r->mallocs, r->frees, t->nstreams,
           (unsigned long long)t->peak_live, (unsigned long long)r->br.peak_device,
           (double)r->br.peak_device / (double)t->peak_live, r->malloc_med, r->free_med,
           r->malloc_med + r->free_med, r->malloc_p99, r->free_p99, r->malloc_max, timer, r->wall_s,
           r->ooms);
    if (hv)
        printf(", \"defrag_count\": %llu, \"pages_remapped\": %llu, \"pages_created\": %llu, "
               "\"grows\": %llu, \"page_size\": %zu",
               (unsigned long long)v->defrags, (unsigned long long)v->pages_remapped,
               (unsigned long long)v->pages_created, (unsigned long long)v->grows, v->page_size);
    else
        printf(", \"defrag_count\": null, \"pages_remapped\": null");
    printf("}\n");
}

static void print_table(const options_t *o, const trace_t *t, const backend_t *b, const result_t *r,
                        uint32_t timer)
{
    printf("vpmm-replay: %s on %s\n", base_name(o->trace), backend_name(b));
    printf("  %-22s %zu (%zu mallocs, %zu frees, %zu stream%s)\n", "operations", t->nops,
           r->mallocs, r->frees, t->nstreams, t->nstreams == 1 ? "" : "s");
    printf("  %-22s %.3f GB\n", "peak live", (double)t->peak_live / 1e9);
    printf("  %-22s %.3f GB\n", "peak device memory", (double)r->br.peak_device / 1e9);
    printf("  %-22s %.4f\n", "footprint", (double)r->br.peak_device / (double)t->peak_live);
    printf("  %-22s %u ns (p99 %u, max %u)\n", "malloc median", r->malloc_med, r->malloc_p99,
           r->malloc_max);
    printf("  %-22s %u ns (p99 %u)\n", "free median", r->free_med, r->free_p99);
    printf("  %-22s %u ns (timer cost %u ns included)\n", "malloc+free median",
           r->malloc_med + r->free_med, timer);
    printf("  %-22s %.3f s\n", "wall time", r->wall_s);
    if (r->br.have_vpmm_stats) {
        const vpmm_stats_t *v = &r->br.vpmm;
        printf("  %-22s %llu defrags, %llu pages remapped, %llu created (page %zu KiB), %llu "
               "grows\n",
               "vpmm", (unsigned long long)v->defrags, (unsigned long long)v->pages_remapped,
               (unsigned long long)v->pages_created, v->page_size >> 10,
               (unsigned long long)v->grows);
    }
    if (r->ooms)
        printf("  %-22s %zu\n", "out of memory", r->ooms);
}

int main(int argc, char **argv)
{
    options_t o;
    trace_t t;
    backend_t *b = NULL;
    result_t r;
    svg_point_t *pts = NULL;
    size_t npts = 0;
    char err[512];
    uint32_t timer;
    int rc;

    if (parse_args(argc, argv, &o) != 0)
        return 1;
    if (trace_load(o.trace, &t, err, sizeof err) != 0) {
        fprintf(stderr, "vpmm-replay: %s\n", err);
        return 1;
    }
    if (backend_open(o.backend, t.nstreams, t.stream_ids, o.verify, &b, err, sizeof err) != 0) {
        fprintf(stderr, "vpmm-replay: backend %s: %s\n", o.backend, err);
        trace_free(&t);
        return 2;
    }
    if (o.svg != NULL && (pts = calloc(MAX_SVG_POINTS + 2, sizeof *pts)) == NULL) {
        fprintf(stderr, "vpmm-replay: out of memory\n");
        return 3;
    }
    calibrate_ticks();
    timer = timer_cost_ns();
    rc = replay(&t, b, &o, &r, pts, &npts);
    if (rc == 0) {
        if (o.json)
            print_json(&o, &t, b, &r, timer);
        else
            print_table(&o, &t, b, &r, timer);
        if (o.svg != NULL) {
            char title[256];
            snprintf(title, sizeof title, "%s on %s: footprint %.3f", base_name(o.trace),
                     backend_name(b), (double)r.br.peak_device / (double)t.peak_live);
            if (svg_write(o.svg, title, pts, npts, t.nops, r.br.have_vpmm_stats) != 0) {
                perror(o.svg);
                rc = 1;
            }
        }
    }
    backend_close(b);
    free(pts);
    trace_free(&t);
    return rc;
}
