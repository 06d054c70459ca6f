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

/* A file the tool writes its result into, opened before the work. A regular file (or a path
 * that does not exist yet) is written under a temporary name in the same directory and renamed
 * over the path only when the work succeeded, so that a failed run leaves the path as it was —
 * a result of an earlier run included. Anything else (/dev/stdout, a pipe) is written directly. */
typedef struct cli_output {
    FILE *f;
    const char *tool, *opt, *path;
    char *tmp; /* the temporary name, or NULL (written directly) */
} cli_output_t;

/* Opens path for writing: 0, or -1 after a message ("vpmm-replay: --svg /no/such/x.svg: cannot
 * create: No such file or directory"). A path naming the same file as `input` (the file the
 * work will read; NULL: none) is refused before anything is written. */
int cli_output_open(cli_output_t *o, const char *tool, const char *opt, const char *path,
                    const char *input);

/*
 * Closes it. keep = 1 (the work succeeded): the temporary file becomes the path. keep = 0: it is
 * removed, and the path is left as it was. Returns 0, or -1 after a message when writing, closing
 * or renaming failed (a full disk); nothing is then left at the path either. Does nothing when
 * o->f is NULL.
 */
int cli_output_close(cli_output_t *o, int keep);

/* bytes in the library's units (KiB, MiB, GiB, TiB: powers of 1024, as vpmm's own messages),
 * with `decimals` decimals: "7.205 GiB". Returns buf. */
const char *cli_bytes(double bytes, int decimals, char *buf, size_t len);

/*
 * From now on, the tool's standard output is checked when the process exits: if writing or
 * closing it failed (`> /dev/full`, a closed pipe), "<tool>: writing the standard output failed:
 * <why>" goes to stderr and the exit status becomes 1 (the tools' status for an output they could
 * not write), whatever main returned. Call it first thing in main.
 */
void cli_check_stdout_at_exit(const char *tool);

#endif /* VPMM_BENCH_CLI_H */
