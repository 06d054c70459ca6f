/*
 * replay_main.c — runs files through the fuzz target without libFuzzer, so that any compiler
 * replays the seed corpus and every past crash on every CI run (ctest: test_fuzz_regressions).
 *
 * Usage: test_fuzz_regressions [FILE|DIR ...]. With no argument it replays the directories
 * compiled in as VPMM_FUZZ_DIRS (tests/fuzz/regressions and tests/fuzz/corpus). Directories are
 * read in name order; names starting with '.' and README files are skipped. A finding aborts
 * (fuzz_ops.c prints what it was); otherwise it prints how many files and operations ran and
 * fails only if it found nothing to run.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_ops.h"

#ifndef VPMM_FUZZ_DIRS
#define VPMM_FUZZ_DIRS ""
#endif

static size_t files_run;

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    size_t len = 0, cap = 0, n;
    uint64_t before = vpmm_fuzz_operations();

    if (f == NULL) {
        perror(path);
        return -1;
    }
    do {
        if (len == cap) {
            unsigned char *b = realloc(buf, cap ? cap * 2 : 65536);
            if (b == NULL) {
                fprintf(stderr, "%s: out of memory\n", path);
                free(buf);
                fclose(f);
                return -1;
            }
            buf = b;
            cap = cap ? cap * 2 : 65536;
        }
        n = fread(buf + len, 1, cap - len, f);
        len += n;
    } while (n > 0);
    fclose(f);
    fprintf(stderr, "%s: %zu bytes ... ", path, len);
    LLVMFuzzerTestOneInput(buf, len);
    fprintf(stderr, "%llu operations\n", (unsigned long long)(vpmm_fuzz_operations() - before));
    free(buf);
    files_run++;
    return 0;
}

static int skip_name(const struct dirent *e)
{
    return e->d_name[0] != '.' && strncmp(e->d_name, "README", 6) != 0;
}

static int run_path(const char *path)
{
    struct stat st;
    struct dirent **names;
    int n, rc = 0;

    if (stat(path, &st) != 0) {
        perror(path);
        return -1;
    }
    if (!S_ISDIR(st.st_mode))
        return run_file(path);
    n = scandir(path, &names, skip_name, alphasort);
    if (n < 0) {
        perror(path);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        char full[4096];
        snprintf(full, sizeof full, "%s/%s", path, names[i]->d_name);
        if (rc == 0 && stat(full, &st) == 0 && S_ISREG(st.st_mode))
            rc = run_file(full);
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv)
{
    int rc = 0;
    LLVMFuzzerInitialize(&argc, &argv);
    if (argc > 1) {
        for (int i = 1; i < argc && rc == 0; i++)
            rc = run_path(argv[i]);
    } else {
        char dirs[] = VPMM_FUZZ_DIRS;
        for (char *d = strtok(dirs, ":"); d != NULL && rc == 0; d = strtok(NULL, ":"))
            rc = run_path(d);
    }
    if (rc != 0)
        return 1;
    printf("replayed %zu inputs, %llu operations, no finding\n", files_run,
           (unsigned long long)vpmm_fuzz_operations());
    return files_run > 0 ? 0 : 1;
}
