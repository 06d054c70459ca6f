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
    const int exists = stat(path, &out) == 0;
    int fd;
    o->tool = tool;
    o->opt = opt;
    o->path = path;
    o->tmp = NULL;
    o->f = NULL;
    if (input != NULL && exists && stat(input, &in) == 0 && out.st_dev == in.st_dev &&
        out.st_ino == in.st_ino) {
        fprintf(stderr, "%s: %s %s: that is the input file %s\n", tool, opt, path, input);
        return -1;
    }
    if (exists && !S_ISREG(out.st_mode)) {
        o->f = fopen(path, "w"); /* a device or a pipe: written directly */
        if (o->f == NULL) {
            fprintf(stderr, "%s: %s %s: cannot open: %s\n", tool, opt, path, strerror(errno));
            return -1;
        }
        return 0;
    }
    o->tmp = malloc(strlen(path) + sizeof ".tmp-XXXXXX");
    if (o->tmp == NULL) {
        fprintf(stderr, "%s: %s %s: out of memory\n", tool, opt, path);
        return -1;
    }
    strcpy(o->tmp, path);
    strcat(o->tmp, ".tmp-XXXXXX");
    fd = mkstemp(o->tmp);
    if (fd < 0 || (o->f = fdopen(fd, "w")) == NULL) {
        fprintf(stderr, "%s: %s %s: cannot create: %s\n", tool, opt, path, strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(o->tmp);
        }
        free(o->tmp);
        o->tmp = NULL;
        return -1;
    }
    return 0;
}

/* The mode a file created with fopen(path, "w") gets: 0666 less the umask. */
static mode_t created_mode(void)
{
    mode_t mask = umask(0);
    umask(mask);
    return 0666 & ~mask;
}

int cli_output_close(cli_output_t *o, int keep)
{
    int failed, err;
    if (o->f == NULL)
        return 0;
    errno = 0;
    failed = fflush(o->f) != 0 || ferror(o->f) != 0;
    err = errno;
    if (keep && !failed && o->tmp != NULL && fchmod(fileno(o->f), created_mode()) != 0) {
        failed = 1;
        err = errno;
    }
    if (fclose(o->f) != 0 && !failed) {
        failed = 1;
        err = errno;
    }
    o->f = NULL;
    if (keep && !failed && o->tmp != NULL && rename(o->tmp, o->path) != 0) {
        failed = 1;
        err = errno;
    }
    if (failed)
        fprintf(stderr, "%s: %s %s: writing failed%s%s\n", o->tool, o->opt, o->path,
                err != 0 ? ": " : "", err != 0 ? strerror(err) : "");
    if ((failed || !keep) && o->tmp != NULL)
        unlink(o->tmp);
    free(o->tmp);
    o->tmp = NULL;
    return failed ? -1 : 0;
}

const char *cli_bytes(double bytes, int decimals, char *buf, size_t len)
{
    static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    unsigned u = 0;
    while (bytes >= 1024.0 && u + 1 < sizeof units / sizeof units[0]) {
        bytes /= 1024.0;
        u++;
    }
    snprintf(buf, len, "%.*f %s", u == 0 ? 0 : decimals, bytes, units[u]);
    return buf;
}

static const char *stdout_tool;

static void check_stdout(void)
{
    int failed, err;
    errno = 0;
    failed = fflush(stdout) != 0 || ferror(stdout) != 0;
    err = errno;
    if (fclose(stdout) != 0 && !failed) {
        failed = 1;
        err = errno;
    }
    if (failed) {
        /* An error of an earlier write is kept by ferror, not its errno. */
        fprintf(stderr, "%s: writing the standard output failed%s%s\n", stdout_tool,
                err != 0 ? ": " : "", err != 0 ? strerror(err) : "");
        _exit(1);
    }
}

void cli_check_stdout_at_exit(const char *tool)
{
    stdout_tool = tool;
    (void)atexit(check_stdout);
}
