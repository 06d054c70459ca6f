/*
 * growth.c — vpmm-growth: how long growing from empty to N bytes takes.
 *
 *   vpmm-growth [--backend host|cuda|cudaMallocAsync|cudaMalloc] [--json] [--gib N] [--version]
 *
 * Patterns, each on a fresh pool (a fresh default mempool for cudaMallocAsync, trimmed to zero):
 *   one      one malloc of N GiB
 *   2mib     N GiB in 2 MiB mallocs (4096 for 8 GiB)
 *   128mib   N GiB in 128 MiB mallocs
 * Only the mallocs are timed (wall clock around the whole loop); the frees and the pool's
 * creation and destruction are not. For vpmm the handles created and the device memory held at
 * the end are reported too: growth is fast because it creates few, large handles, and this shows
 * what that costs in memory. The backend defaults to cuda (host only when named, as the library).
 * Exit status 0, 2 if the backend is unavailable, 3 on an error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "backends.h"
#include "cli.h"
#include "escape.h"
#include "timing.h"

#define TOOL "vpmm-growth"

typedef struct pattern {
    const char *name;
    size_t block; /* 0: the whole size at once */
} pattern_t;

static const pattern_t PATTERNS[] = {
    { "one", 0 },
    { "2mib", (size_t)2 << 20 },
    { "128mib", (size_t)128 << 20 },
};

static int run(const char *backend, const pattern_t *pat, size_t total, int json)
{
    const uint64_t stream0 = 0;
    size_t block = pat->block ? pat->block : total, n = total / block;
    void **ptrs = calloc(n, sizeof *ptrs);
    backend_t *b = NULL;
    backend_result_t res;
    char err[256];
    double t0, dt;
    int rc = 0;

    if (ptrs == NULL)
        return 3;
    if (backend_open(backend, 1, &stream0, 0, &b, err, sizeof err) != 0) {
        fprintf(stderr, "vpmm-growth: backend %s: %s\n", backend, err);
        free(ptrs);
        return 2;
    }
    if (strcmp(backend, "host") != 0)
        cudaDeviceSynchronize();
    t0 = timing_now_s();
    for (size_t i = 0; i < n; i++) {
        if (backend_malloc(b, block, 0, &ptrs[i]) != BACKEND_OK) {
            fprintf(stderr, "vpmm-growth: malloc %zu of %zu (%zu bytes): %s\n", i, n, block,
                    backend_error(b));
            rc = 3;
            n = i;
            break;
        }
    }
    dt = timing_now_s() - t0;
    backend_finish(b, &res);
    if (rc == 0) {
        if (json) {
            printf("{\"backend\": ");
            esc_json_string(stdout, backend_name(b));
            printf(", \"pattern\": ");
            esc_json_string(stdout, pat->name);
            printf(", \"bytes\": %zu, \"mallocs\": %zu, \"ms\": %.3f, \"peak_device_bytes\": %llu",
                   total, n, dt * 1e3, (unsigned long long)res.peak_device);
            if (res.have_vpmm_stats)
                printf(", \"handles_created\": %llu, \"pages_created\": %llu",
                       (unsigned long long)res.vpmm.handles_created,
                       (unsigned long long)res.vpmm.pages_created);
            printf("}\n");
        } else {
            printf("  %-16s %-7s %6zu mallocs  %9.3f ms  device %6.2f GiB", backend_name(b),
                   pat->name, n, dt * 1e3, (double)res.peak_device / (1 << 30));
            if (res.have_vpmm_stats)
                printf("  %llu handles", (unsigned long long)res.vpmm.handles_created);
            printf("\n");
        }
    }
    for (size_t i = 0; i < n; i++)
        backend_free(b, ptrs[i], block, 0);
    backend_close(b);
    free(ptrs);
    return rc;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: vpmm-growth [--backend NAME] [--json] [--gib N]\n"
            "  --backend  %s (default: cuda, as the library's; host = the emulation, no GPU)\n"
            "  --json     one JSON object per pattern instead of the table\n"
            "  --gib N    grow to N GiB, 1..1024 (default 8)\n"
            "  --version  print the version and exit\n",
            backend_names());
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "backend", required_argument, NULL, 'b' },
        { "json", no_argument, NULL, 'j' },
        { "gib", required_argument, NULL, 'g' },
        CLI_COMMON_OPTIONS,
        { NULL, 0, NULL, 0 },
    };
    const char *backend = NULL;
    uint64_t gib = 8;
    int json = 0, c, rc = 0;

    cli_check_stdout_at_exit(TOOL);
    while ((c = getopt_long(argc, argv, "b:jg:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'b':
            backend = optarg;
            break;
        case 'j':
            json = 1;
            break;
        case 'g':
            if (cli_u64(TOOL, "--gib", optarg, 1, 1024, &gib) != 0)
                return 1;
            break;
        default:
            cli_other_option(TOOL, c, usage);
        }
    }
    if (optind != argc) {
        fprintf(stderr, "vpmm-growth: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 1;
    }
    if (backend == NULL)
        backend = backend_default();
    if (!backend_known(backend)) {
        fprintf(stderr, "vpmm-growth: --backend: '%s' is not one of %s\n", backend,
                backend_names());
        return 1;
    }
    if (!json)
        printf("vpmm-growth: %zu GiB from empty\n", (size_t)gib);
    for (size_t i = 0; i < sizeof PATTERNS / sizeof PATTERNS[0] && rc == 0; i++)
        rc = run(backend, &PATTERNS[i], (size_t)gib << 30, json);
    return rc;
}
