/*
 * options.h — resolving a pool's settings from vpmm_config_t and the VPMM_* environment.
 *
 * Precedence: a config field set away from its default wins; otherwise the environment variable
 * (unless config->ignore_env); otherwise the built-in default. Resolution happens in two steps
 * because the page size can only be checked once the driver has reported its granularity.
 * Pure functions over their arguments plus getenv() and environ; thread-safe as far as getenv is.
 */
#ifndef VPMM_OPTIONS_H
#define VPMM_OPTIONS_H

#include <stddef.h>

#include "vpmm.h"

#define VPMM_DEFAULT_VA_SIZE       ((size_t)8 << 40) /* 8 TiB: reserving VA costs ~13 us, no memory */
#define VPMM_DEFAULT_HOST_MEMORY   ((size_t)80 << 30) /* an H100's worth */
#define VPMM_DEFAULT_CACHE_PERCENT 10
#define VPMM_HANDLE_PAGES_MAX                                                                      \
    512 /* 1 GiB of 2 MiB pages: larger growths get 1 GiB handles */ /* bench/RESULTS.md:          \
                                                                        footprint vs hot path,     \
                                                                        measured */

/* Requests smaller than page size / this are "small" by default and get pages of their own:
 * 256 KiB with 2 MiB pages. Screened on every trace (bench/RESULTS.md, "Small blocks in pages of
 * their own"): an 8th held as little as or less than a 32nd, a 16th and a 4th on every trace but
 * two (within 3 pages there), with the least driver work. */
#define VPMM_SMALL_PAGE_FRACTION 8

/* Where each setting came from, so an error can name the knob the user actually touched. */
typedef enum vpmm_option_source {
    VPMM_FROM_DEFAULT = 0,
    VPMM_FROM_CONFIG = 1,
    VPMM_FROM_ENV = 2,
} vpmm_option_source_t;

typedef struct vpmm_options {
    vpmm_backend_t backend; /* CUDA or HOST once resolved, never DEFAULT */
    int device;
    size_t page_size; /* 0 until vpmm_i_options_finish: "use the granularity" */
    size_t va_size;
    size_t prealloc_pages;
    size_t host_memory;
    unsigned cache_percent;
    size_t max_bytes; /* 0: no cap; else a whole number of pages once finished */
    int verbose;
    int driver_stats;       /* wrap the backend in the counting decorator (api/pool.c) */
    int worker;             /* a background thread unmaps zombies (worker.c) */
    int ipc;                /* create exportable physical memory (CUDA IPC, share.c) */
    size_t handle_pages;    /* the most pages an ordinary growth puts in one handle (policy.c) */
    int large_handles;      /* 1 GiB handles for large growths and bursts (policy.c) */
    size_t small_bytes;     /* requests below this get pages of their own (policy.c); 0 until
                               finished (then an eighth of the page); 1 = no size classes */
    int per_thread_default; /* stream 0 is the calling thread's per-thread stream (stream.c) */
    const char *trace_file; /* NULL: no recording (record.c); valid during vpmm_pool_create */
    vpmm_option_source_t page_size_src, va_size_src, prealloc_src, max_bytes_src, trace_file_src;
    vpmm_option_source_t small_bytes_src;
} vpmm_options_t;

/*
 * Step 1: merge config and environment. Fails with VPMM_ERROR_INVALID_CONFIG for an out-of-range
 * field and VPMM_ERROR_INVALID_ENV for a malformed variable or a VPMM_* name that is none of
 * vpmm_i_env_vars; vpmm_last_error() names it (and, for an unknown name, the closest known one).
 */
vpmm_status_t vpmm_i_options_resolve(const vpmm_config_t *config, vpmm_options_t *out);

/*
 * Step 2: with the driver's granularity known, default the page size and check that page size,
 * VA chunk size and preallocation agree. Errors name the setting and where it came from.
 */
vpmm_status_t vpmm_i_options_finish(vpmm_options_t *o, size_t granularity);

/*
 * One VPMM_* environment variable the project defines. vpmm_i_env_vars lists every one, the
 * library's knobs and the variables its tests, tools and integrations read (README.md's knob
 * table has the same rows; tests/test_env_names.py checks both against the sources); any other
 * VPMM_* name makes vpmm_i_options_resolve fail.
 */
typedef struct vpmm_env_var {
    const char *name;
    const char *reader; /* NULL: a knob of vpmm_pool_create; else the file that reads it */
} vpmm_env_var_t;

extern const vpmm_env_var_t vpmm_i_env_vars[];
extern const size_t vpmm_i_env_var_count;

/*
 * Edit distance between the first alen bytes of a and the string b: insertions, deletions,
 * substitutions and swaps of adjacent characters cost one each, letters compare without case.
 * SIZE_MAX when either is longer than VPMM_NAME_DISTANCE_MAX (no name of ours is).
 */
#define VPMM_NAME_DISTANCE_MAX 63
size_t vpmm_i_name_distance(const char *a, size_t alen, const char *b);

/*
 * Parses a byte size: decimal digits with an optional K, M, G or T suffix (either case; powers of
 * 1024). No sign, space, fraction or trailing text. Returns 0 and sets *out, or -1 if malformed,
 * -2 if it overflows size_t.
 */
int vpmm_i_parse_size(const char *text, size_t *out);

/* Parses a plain decimal count (no suffix). Same return convention as vpmm_i_parse_size. */
int vpmm_i_parse_count(const char *text, size_t *out);

/* "2 MiB", "8 TiB", "1536 B": a short human form of a byte count, written into buf. */
const char *vpmm_i_format_bytes(size_t bytes, char *buf, size_t len);

#endif /* VPMM_OPTIONS_H */
