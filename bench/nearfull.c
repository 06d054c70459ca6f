/*
 * nearfull.c — vpmm-nearfull: does a malloc succeed whenever the pool's free memory in whole
 * pages, plus what the device and the cap still allow, covers it? (The near-full rule:
 * docs/ALGORITHM.md.)
 *
 *   vpmm-nearfull [--seed N] [--ops N] [--device-gib N] [--cap-gib N] [--graph-gib N]
 *                 [--large-percent P] [--handle-pages N] [--json] [--quiet] [--report]
 *
 * A seeded stress on the host backend, as a serving process that sizes its memory to the device
 * lives (nearfull_rule.h: one stream, blocks of 1 B to 3 MiB and, --large-percent of the time,
 * of 3 MiB up to the device's size; half the steps free a random live block), so that the pool
 * fills the device and stays near its end. --graph-gib N first allocates N GiB in a graph pool
 * and keeps it (pages the shared pool cannot use); --cap-gib sets the pool's cap.
 *
 * At every malloc refused with VPMM_ERROR_OUT_OF_MEMORY it counts, through the public API only,
 * the shared pool's free whole pages by the kind of handle they lie in (one page; several, all
 * free; several, some live) and the pages the device and the cap still allow. A refusal the rule
 * says should not have happened is a *violation*; one where the pages of movable handles alone
 * (one page, or all free) covered the request is counted apart: vpmm keeps that part of the rule
 * (tests/test_nearfull.c), and the rest needs handles that are never cut up again.
 *
 * Exit status: 0 the rule held at every refusal, 1 bad usage, 3 an unexpected error,
 * 5 violations.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "nearfull_rule.h"

#define TOOL "vpmm-nearfull"
#define GiB  ((size_t)1 << 30)

typedef struct options {
    int json, quiet, report;
} options_t;

static void usage(FILE *f)
{
    fprintf(f, "usage: vpmm-nearfull [--seed N] [--ops N] [--device-gib N] [--cap-gib N]\n"
               "                     [--graph-gib N] [--large-percent P] [--handle-pages N]\n"
               "                     [--large-handles 0|1] [--json] [--quiet] [--report]\n"
               "                     [--help] [--version]\n"
               "  --seed           the stress's seed (default 1)\n"
               "  --ops            operations (default 200000)\n"
               "  --device-gib     the host emulation's device memory (default 80)\n"
               "  --cap-gib        the pool's cap (default none)\n"
               "  --graph-gib      GiB a graph pool holds from the start (default 0)\n"
               "  --large-percent  mallocs of 3 MiB up to the device's size (default 3)\n"
               "  --handle-pages   config.handle_pages (default: the library's, 1)\n"
               "  --large-handles  config.large_handles (default: the library's, 1)\n"
               "  --json           one JSON object on stdout instead of the text\n"
               "  --quiet          no line per violation\n"
               "  --report         vpmm's own out-of-memory report after each violation\n"
               "  --help, --version\n"
               "Checks the near-full rule on the host backend: a malloc succeeds while the pool's\n"
               "free memory in whole pages plus what the device and the cap allow covers it.\n"
               "Exit status: 0 the rule held, 1 bad usage, 3 an error, 5 violations.\n");
}

static void on_oom(void *user, vpmm_pool_t *pool, uint64_t op, size_t size, const nf_count_t *c)
{
    const options_t *o = user;
    char text[2048];
    if (!nf_rule_covers(c) || o->quiet || o->json)
        return;
    printf("  violation at op %llu: %zu bytes (%zu pages) refused with %zu free whole pages (%zu "
           "in single-page handles, %zu in fully free handles, %zu in %zu partly live handles of "
           "several pages) and %zu of room%s\n",
           (unsigned long long)op, size, c->need, c->single + c->whole_free + c->trapped, c->single,
           c->whole_free, c->trapped, c->trapped_handles, c->room,
           nf_movable_covers(c) ? " (movable handles alone were enough)" : "");
    if (o->report && vpmm_pool_oom_report(pool, text, sizeof text) == VPMM_SUCCESS)
        printf("    vpmm's report: %s\n", text);
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "seed", required_argument, NULL, 's' },
        { "ops", required_argument, NULL, 'o' },
        { "device-gib", required_argument, NULL, 'd' },
        { "cap-gib", required_argument, NULL, 'c' },
        { "graph-gib", required_argument, NULL, 'g' },
        { "large-percent", required_argument, NULL, 'l' },
        { "handle-pages", required_argument, NULL, 'p' },
        { "large-handles", required_argument, NULL, 'L' },
        { "json", no_argument, NULL, 'j' },
        { "quiet", no_argument, NULL, 'q' },
        { "report", no_argument, NULL, 'r' },
        CLI_COMMON_OPTIONS,
        { NULL, 0, NULL, 0 },
    };
    uint64_t seed = 1, ops = 200000, device_gib = 80, cap_gib = 0, graph_gib = 0, large = 3,
             handle_pages = 0, large_handles = 2;
    options_t o = { 0, 0, 0 };
    nf_params_t prm;
    nf_result_t res;
    int c;

    cli_check_stdout_at_exit(TOOL);
    while ((c = getopt_long(argc, argv, "s:o:d:c:g:l:p:L:jqrh", longopts, NULL)) != -1) {
        switch (c) {
        case 's':
            if (cli_u64(TOOL, "--seed", optarg, 0, UINT64_MAX, &seed) != 0)
                return 1;
            break;
        case 'o':
            if (cli_u64(TOOL, "--ops", optarg, 1, UINT64_MAX, &ops) != 0)
                return 1;
            break;
        case 'd':
            if (cli_u64(TOOL, "--device-gib", optarg, 1, 1 << 20, &device_gib) != 0)
                return 1;
            break;
        case 'c':
            if (cli_u64(TOOL, "--cap-gib", optarg, 1, 1 << 20, &cap_gib) != 0)
                return 1;
            break;
        case 'g':
            if (cli_u64(TOOL, "--graph-gib", optarg, 1, 1 << 20, &graph_gib) != 0)
                return 1;
            break;
        case 'l':
            if (cli_u64(TOOL, "--large-percent", optarg, 0, 100, &large) != 0)
                return 1;
            break;
        case 'p':
            if (cli_u64(TOOL, "--handle-pages", optarg, 1, 512, &handle_pages) != 0)
                return 1;
            break;
        case 'L':
            if (cli_u64(TOOL, "--large-handles", optarg, 0, 1, &large_handles) != 0)
                return 1;
            break;
        case 'j':
            o.json = 1;
            break;
        case 'q':
            o.quiet = 1;
            break;
        case 'r':
            o.report = 1;
            break;
        default:
            cli_other_option(TOOL, c, usage);
        }
    }
    if (optind != argc) {
        fprintf(stderr, TOOL ": unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 1;
    }
    if (graph_gib >= device_gib || (cap_gib != 0 && graph_gib >= cap_gib)) {
        fprintf(stderr, TOOL ": --graph-gib must be less than --device-gib and --cap-gib\n");
        return 1;
    }
    prm = (nf_params_t){ .seed = seed,
                         .ops = ops,
                         .device = (size_t)device_gib * GiB,
                         .cap = (size_t)cap_gib * GiB,
                         .graph_bytes = (size_t)graph_gib * GiB,
                         .large_percent = (unsigned)large,
                         .handle_pages = (size_t)handle_pages,
                         .no_large_handles = large_handles == 0 };
    if (nf_run(&prm, &res, on_oom, &o) != 0 || res.check != 0)
        return 3;
    if (o.json)
        printf("{\"tool\": \"%s\", \"seed\": %llu, \"ops\": %llu, \"device_gib\": %llu, "
               "\"cap_gib\": %llu, \"graph_gib\": %llu, \"large_percent\": %llu, "
               "\"handle_pages\": %llu, \"large_handles\": %d, "
               "\"mallocs\": %llu, \"frees\": %llu, \"ooms\": %llu, \"violations\": %llu, "
               "\"violations_movable\": %llu, \"peak_mapped_bytes\": %zu, "
               "\"peak_live_bytes\": %zu}\n",
               TOOL, (unsigned long long)seed, (unsigned long long)ops,
               (unsigned long long)device_gib, (unsigned long long)cap_gib,
               (unsigned long long)graph_gib, (unsigned long long)large,
               (unsigned long long)(handle_pages ? handle_pages : 1), large_handles != 0,
               (unsigned long long)res.mallocs, (unsigned long long)res.frees,
               (unsigned long long)res.ooms, (unsigned long long)res.violations,
               (unsigned long long)res.movable, res.peak_mapped, res.peak_live);
    else
        printf("%s: seed %llu, %llu ops, device %llu GiB, cap %llu GiB, graph pool %llu GiB: "
               "%llu mallocs, %llu frees, %llu out of memory, %llu against the rule (%llu of "
               "them with enough pages in movable handles); peak mapped %.2f GiB, peak live "
               "%.2f GiB\n",
               TOOL, (unsigned long long)seed, (unsigned long long)ops,
               (unsigned long long)device_gib, (unsigned long long)cap_gib,
               (unsigned long long)graph_gib, (unsigned long long)res.mallocs,
               (unsigned long long)res.frees, (unsigned long long)res.ooms,
               (unsigned long long)res.violations, (unsigned long long)res.movable,
               (double)res.peak_mapped / GiB, (double)res.peak_live / GiB);
    return res.violations ? 5 : 0;
}
