/*
 * options.c — vpmm-soak's command line (checked with cli.h: each number against its range, the
 * option named in the message; --help, --version), and the traces whose allocation sizes the
 * workers cycle through: --trace files, else every .trace.gz of the source tree's bench/traces.
 * Runs on the main thread before any worker starts.
 */
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "soak.h"
#include "trace.h"

#define TOOL "vpmm-soak"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: vpmm-soak [--seconds N] [--ops N] [--threads T] [--streams S] "
            "[--trace PATH]...\n"
            "                 [--seed S] [--live-mb M] [--capture-mode M] [--light] [--json]\n"
            "  --seconds N   stop after N seconds (default 60 unless --ops is given; 0: no limit)\n"
            "  --ops N       stop after N operations (default 0: no limit); the first limit wins\n"
            "  --threads T   worker threads sharing the pool (default 4, at most %d)\n"
            "  --streams S   non-blocking streams per worker (default 2, at most %d)\n"
            "  --trace PATH  take allocation sizes from this trace (repeatable; default: every\n"
            "                %s/*.trace.gz)\n"
            "  --seed S      seed of the workers' generators (default 1)\n"
            "  --live-mb M   live bytes per worker before it stops allocating (default: profile)\n"
            "  --capture-mode M  mixed (default: global, thread-local, relaxed in turn), global,\n"
            "                thread-local or relaxed\n"
            "  --light       small sizes and frequent rounds, for compute-sanitizer\n"
            "  --json        also print the result as one JSON line on stdout (table on stderr)\n"
            "  --version     print the version and exit\n"
            "Exit status: 0 pass, 1 usage or trace error, 2 no CUDA device, 3 error, "
            "4 corruption.\n",
            MAX_THREADS, MAX_STREAMS, VPMM_SOAK_TRACE_DIR);
}

int parse_options(int argc, char **argv, options_t *o)
{
    static const struct option longs[] = {
        { "seconds", required_argument, NULL, 's' },
        { "ops", required_argument, NULL, 'o' },
        { "threads", required_argument, NULL, 't' },
        { "streams", required_argument, NULL, 'S' },
        { "trace", required_argument, NULL, 'T' },
        { "seed", required_argument, NULL, 'r' },
        { "live-mb", required_argument, NULL, 'm' },
        { "light", no_argument, NULL, 'l' },
        { "json", no_argument, NULL, 'j' },
        { "capture-mode", required_argument, NULL, 'c' },
        CLI_COMMON_OPTIONS,
        { NULL, 0, NULL, 0 },
    };
    int c, have_seconds = 0;
    uint64_t v;

    memset(o, 0, sizeof *o);
    o->threads = 4;
    o->streams = 2;
    o->seed = 1;
    o->capture_mode = -1;
    o->traces = calloc((size_t)argc, sizeof *o->traces);
    if (o->traces == NULL)
        return -1;
    while ((c = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
        switch (c) {
        case 's':
            if (cli_double(TOOL, "--seconds", optarg, 0, 1e9, &o->seconds) != 0)
                return -1;
            have_seconds = 1;
            break;
        case 'o':
            if (cli_u64(TOOL, "--ops", optarg, 0, UINT64_MAX, &o->ops) != 0)
                return -1;
            break;
        case 'r':
            if (cli_u64(TOOL, "--seed", optarg, 0, UINT64_MAX, &o->seed) != 0)
                return -1;
            break;
        case 'm':
            if (cli_u64(TOOL, "--live-mb", optarg, 0, (uint64_t)1 << 30, &v) != 0)
                return -1;
            o->live_mb = (size_t)v;
            break;
        case 't':
            if (cli_u64(TOOL, "--threads", optarg, 1, MAX_THREADS, &v) != 0)
                return -1;
            o->threads = (int)v;
            break;
        case 'S':
            if (cli_u64(TOOL, "--streams", optarg, 1, MAX_STREAMS, &v) != 0)
                return -1;
            o->streams = (int)v;
            break;
        case 'T':
            o->traces[o->ntraces++] = optarg;
            break;
        case 'c':
            if (strcmp(optarg, "mixed") == 0)
                o->capture_mode = -1;
            else if (strcmp(optarg, "global") == 0)
                o->capture_mode = VPMM_STREAM_CAPTURE_GLOBAL;
            else if (strcmp(optarg, "thread-local") == 0)
                o->capture_mode = VPMM_STREAM_CAPTURE_THREAD_LOCAL;
            else if (strcmp(optarg, "relaxed") == 0)
                o->capture_mode = VPMM_STREAM_CAPTURE_RELAXED;
            else {
                fprintf(stderr,
                        "vpmm-soak: --capture-mode: '%s' is not mixed, global, "
                        "thread-local or relaxed\n",
                        optarg);
                return -1;
            }
            break;
        case 'l':
            o->light = 1;
            break;
        case 'j':
            o->json = 1;
            break;
        default:
            cli_other_option(TOOL, c, usage); /* exits: 0 for --help, --version; 1 (SOAK_USAGE) */
        }
    }
    if (optind != argc) {
        fprintf(stderr, "vpmm-soak: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return -1;
    }
    if (!have_seconds && o->ops == 0)
        o->seconds = 60;
    if (o->seconds == 0 && o->ops == 0) {
        fprintf(stderr, "vpmm-soak: --seconds 0 and no --ops: the soak would never stop\n");
        return -1;
    }
    return 0;
}

/* Appends the allocation sizes of one trace. Returns 0, or -1 (message printed). */
static int load_sizes(const char *path)
{
    trace_t t;
    char err[512];
    if (trace_load(path, &t, err, sizeof err) != 0) {
        fprintf(stderr, "vpmm-soak: %s\n", err);
        return -1;
    }
    if (g.nsizes + t.allocs > g.sizes_cap) {
        size_t cap = (g.nsizes + t.allocs) * 2;
        uint64_t *s = realloc(g.sizes, cap * sizeof *s);
        if (s == NULL) {
            trace_free(&t);
            fprintf(stderr, "vpmm-soak: out of memory\n");
            return -1;
        }
        g.sizes = s;
        g.sizes_cap = cap;
    }
    for (size_t i = 0; i < t.nops; i++)
        if (t.ops[i].kind == TRACE_ALLOC)
            g.sizes[g.nsizes++] = t.ops[i].size;
    trace_free(&t);
    g.traces_loaded++;
    return 0;
}

/* --trace files, else every trace of the source tree's bench/traces (or of ./bench/traces: a
 * build directory carried to another machine keeps this one's path). */
int load_traces(void)
{
    static const char *const dirs[] = { VPMM_SOAK_TRACE_DIR, "bench/traces" };
    glob_t gl;
    if (g.o.ntraces > 0) {
        for (size_t i = 0; i < g.o.ntraces; i++)
            if (load_sizes(g.o.traces[i]) != 0)
                return -1;
        g.trace_dir = "--trace";
        return 0;
    }
    for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
        char pattern[4200];
        snprintf(pattern, sizeof pattern, "%.4000s/*.trace.gz", dirs[d]);
        if (glob(pattern, 0, NULL, &gl) != 0)
            continue;
        for (size_t i = 0; i < gl.gl_pathc; i++)
            if (load_sizes(gl.gl_pathv[i]) != 0)
                fprintf(stderr, "vpmm-soak: warning: %s skipped\n", gl.gl_pathv[i]);
        globfree(&gl);
        if (g.traces_loaded > 0) {
            g.trace_dir = dirs[d];
            return 0;
        }
    }
    fprintf(stderr, "vpmm-soak: warning: no trace in %s or bench/traces: synthetic sizes only\n",
            VPMM_SOAK_TRACE_DIR);
    g.trace_dir = "none";
    return 0;
}
