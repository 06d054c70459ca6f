/*
 * cli.c — the shared command-line pieces of cli.h. --version prints the library's own
 * vpmm_version() (the one the tool runs with).
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vpmm.h"

#include "cli.h"

const char *cli_version(void)
{
    return vpmm_version();
}

_Noreturn void cli_other_option(const char *tool, int opt, void (*usage)(FILE *))
{
    if (opt == 'h') {
        usage(stdout);
        exit(0);
    }
    if (opt == CLI_OPT_VERSION) {
        printf("%s (vpmm) %s\n", tool, cli_version());
        exit(0);
    }
    usage(stderr);
    exit(1);
}

int cli_u64(const char *tool, const char *opt, const char *arg, uint64_t min, uint64_t max,
            uint64_t *out)
{
    const int hex = arg[0] == '0' && (arg[1] == 'x' || arg[1] == 'X');
    const char *digits = hex ? arg + 2 : arg;
    unsigned long long v;
    char *end;
    /* strtoull would take a sign, leading spaces, and "-1" as 2^64 - 1. */
    if (hex ? !isxdigit((unsigned char)*digits) : !isdigit((unsigned char)*digits))
        goto bad;
    errno = 0;
    v = strtoull(digits, &end, hex ? 16 : 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        goto bad;
    *out = v;
    return 0;
bad:
    fprintf(stderr, "%s: %s: '%s' is not an integer in %llu..%llu\n", tool, opt, arg,
            (unsigned long long)min, (unsigned long long)max);
    return -1;
}

int cli_double(const char *tool, const char *opt, const char *arg, double min, double max,
               double *out)
{
    char *end;
    double v;
    errno = 0;
    v = strtod(arg, &end);
    if (end == arg || *end != '\0' || errno != 0 || !isfinite(v) || v < min || v > max) {
        fprintf(stderr, "%s: %s: '%s' is not a number in %g..%g\n", tool, opt, arg, min, max);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_output_open(cli_output_t *o, const char *tool, const char *opt, const char *path,
                    const char *input)
{
    struct stat out, in;
    o->tool = tool;
    o->opt = opt;
    o->path = path;
    o->regular = 0;
    if (input != NULL && stat(path, &out) == 0 && stat(input, &in) == 0 &&
        out.st_dev == in.st_dev && out.st_ino == in.st_ino) {
        fprintf(stderr, "%s: %s %s: that is the input file %s\n", tool, opt, path, input);
        o->f = NULL;
        return -1;
    }
    o->f = fopen(path, "w");
    if (o->f == NULL) {
        fprintf(stderr, "%s: %s %s: cannot create: %s\n", tool, opt, path, strerror(errno));
        return -1;
    }
    o->regular = fstat(fileno(o->f), &out) == 0 && S_ISREG(out.st_mode);
    return 0;
}

int cli_output_close(cli_output_t *o, int keep)
{
    int failed;
    if (o->f == NULL)
        return 0;
    failed = ferror(o->f) != 0;
    if (fclose(o->f) != 0)
        failed = 1;
    o->f = NULL;
    if (failed)
        fprintf(stderr, "%s: %s %s: writing failed: %s\n", o->tool, o->opt, o->path,
                strerror(errno));
    if ((failed || !keep) && o->regular)
        unlink(o->path);
    return failed ? -1 : 0;
}
