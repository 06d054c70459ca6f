/*
 * cli.h — what the bench tools' command lines share: --help and --version, numbers checked against
 * their range with the option named in the message, and an output file opened before any work is
 * done, so that a bad path fails in milliseconds instead of after a long replay.
 *
 * Each tool keeps its own getopt_long table and switch: CLI_COMMON_OPTIONS adds --help and
 * --version to the table, cli_other_option() is the switch's `default:`. Messages go to stderr,
 * prefixed with the tool's name. No state; thread-safe as stdio is.
 */
#ifndef VPMM_BENCH_CLI_H
#define VPMM_BENCH_CLI_H

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>

/* getopt_long's value for --version (outside any short option's range). */
enum { CLI_OPT_VERSION = 0x1000 };

#define CLI_COMMON_OPTIONS                                                                         \
    { "help", no_argument, NULL, 'h' },                                                            \
    {                                                                                              \
        "version", no_argument, NULL, CLI_OPT_VERSION                                              \
    }

/* The version of vpmm the tools were built with ("0.1.0"): the one place that knows where it
 * comes from. */
const char *cli_version(void);

/*
 * The `default:` of a tool's option switch: -h/--help prints usage on stdout and exits 0;
 * --version prints "<tool> (vpmm) <version>" and exits 0; anything else (getopt has already said
 * what) prints usage on stderr and exits 1, the tools' bad-usage status.
 */
_Noreturn void cli_other_option(const char *tool, int opt, void (*usage)(FILE *));

/* arg as an unsigned integer (decimal, or hex after 0x) in [min, max]: 0, or -1 after a message
 * naming the option ("vpmm-growth: --gib: '0' is not an integer in 1..1024"). */
int cli_u64(const char *tool, const char *opt, const char *arg, uint64_t min, uint64_t max,
            uint64_t *out);

/* arg as a finite number in [min, max]: 0, or -1 after a message naming the option. */
int cli_double(const char *tool, const char *opt, const char *arg, double min, double max,
               double *out);

/* A file the tool writes its result into, opened (created or truncated) before the work. */
typedef struct cli_output {
    FILE *f;
    const char *tool, *opt, *path;
    int regular; /* a regular file (not /dev/stdout, a pipe): only such a file is ever removed */
} cli_output_t;

/* Opens path for writing: 0, or -1 after a message ("vpmm-replay: --svg /no/such/x.svg: cannot
 * create: No such file or directory"). A path naming the same file as `input` (the file the
 * work will read; NULL: none) is refused before anything is truncated. */
int cli_output_open(cli_output_t *o, const char *tool, const char *opt, const char *path,
                    const char *input);

/*
 * Closes it. keep = 0 (the work failed, or was never written): the file is removed when it is a
 * regular file, so a failed run leaves nothing that looks like a result. Returns 0, or -1 after a
 * message when writing or closing failed (a full disk); the file is then removed too. Does
 * nothing when o->f is NULL.
 */
int cli_output_close(cli_output_t *o, int keep);

#endif /* VPMM_BENCH_CLI_H */
