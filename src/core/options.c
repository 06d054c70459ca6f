/*
 * options.c — a config's defaults (vpmm_config_init, src/api/pool.c, hands them out), environment
 * parsing and validation of a pool's settings.
 *
 * Every malformed or inconsistent setting becomes a status plus a vpmm_last_error() message that
 * names the variable or field, its value and what was expected; nothing here can crash on input.
 * A VPMM_* variable that the project does not define (vpmm_i_env_vars, every name in one table) is
 * refused too, naming the closest known one: a misspelled knob never goes unnoticed.
 * Tests: tests/test_options.c, tests/test_env_names.py (the table against the sources).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "entry.h"
#include "options.h"
#include "status.h"
#include "util.h"

void vpmm_i_config_defaults(vpmm_config_t *config)
{
    memset(config, 0, sizeof *config);
    config->backend = VPMM_BACKEND_DEFAULT;
    config->device = -1;
    config->cache_percent = -1;
    config->verbose = -1;
    config->driver_stats = -1;
    config->worker = -1;
    config->ipc = -1;
    config->large_handles = -1;
    config->default_stream = VPMM_DEFAULT_STREAM_UNSET;
}

static int parse_digits(const char **p, size_t *out)
{
    const char *s = *p;
    size_t v = 0;
    if (*s < '0' || *s > '9')
        return -1;
    for (; *s >= '0' && *s <= '9'; s++) {
        size_t d = (size_t)(*s - '0');
        if (v > (SIZE_MAX - d) / 10)
            return -2;
        v = v * 10 + d;
    }
    *p = s;
    *out = v;
    return 0;
}

int vpmm_i_parse_count(const char *text, size_t *out)
{
    size_t v;
    int rc;
    if (text == NULL || out == NULL)
        return -1;
    rc = parse_digits(&text, &v);
    if (rc != 0)
        return rc;
    if (*text != '\0')
        return -1;
    *out = v;
    return 0;
}

int vpmm_i_parse_size(const char *text, size_t *out)
{
    size_t v;
    unsigned shift = 0;
    int rc;
    if (text == NULL || out == NULL)
        return -1;
    rc = parse_digits(&text, &v);
    if (rc != 0)
        return rc;
    switch (*text) {
    case '\0':
        break;
    case 'k':
    case 'K':
        shift = 10;
        break;
    case 'm':
    case 'M':
        shift = 20;
        break;
    case 'g':
    case 'G':
        shift = 30;
        break;
    case 't':
    case 'T':
        shift = 40;
        break;
    default:
        return -1;
    }
    if (shift != 0 && text[1] != '\0')
        return -1;
    if (shift != 0 && v > (SIZE_MAX >> shift))
        return -2;
    *out = v << shift;
    return 0;
}

const char *vpmm_i_format_bytes(size_t bytes, char *buf, size_t len)
{
    static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
    unsigned u = 0;
    size_t whole = bytes;
    while (u + 1 < sizeof units / sizeof units[0] && whole >= 1024 && whole % 1024 == 0) {
        whole /= 1024;
        u++;
    }
    if (whole >= 10240 && u + 1 < sizeof units / sizeof units[0]) {
        /* Not a round multiple: show one decimal in the largest fitting unit. */
        double v = (double)bytes;
        u = 0;
        while (v >= 1024.0 && u + 1 < sizeof units / sizeof units[0]) {
            v /= 1024.0;
            u++;
        }
        snprintf(buf, len, "%.1f %s", v, units[u]);
        return buf;
    }
    snprintf(buf, len, "%zu %s", whole, units[u]);
    return buf;
}

/*
 * Reads one variable (a byte size, or a plain count) and checks it lies in [lo, hi]; leaves *value
 * alone when unset. `what` names the range in the message ("must be positive").
 */
static vpmm_status_t env_number(const char *name, size_t *value, vpmm_option_source_t *src,
                                int count_only, size_t lo, size_t hi, const char *what)
{
    const char *text = getenv(name);
    size_t v;
    int rc;
    if (text == NULL)
        return VPMM_SUCCESS;
    rc = count_only ? vpmm_i_parse_count(text, &v) : vpmm_i_parse_size(text, &v);
    if (rc == -2) {
        vpmm_i_set_error("%s='%s': value too large", name, text);
        return VPMM_ERROR_INVALID_ENV;
    }
    if (rc != 0) {
        vpmm_i_set_error(count_only
                             ? "%s='%s': expected a decimal count"
                             : "%s='%s': expected bytes with an optional K, M, G or T suffix",
                         name, text);
        return VPMM_ERROR_INVALID_ENV;
    }
    if (v < lo || v > hi) {
        vpmm_i_set_error("%s='%s': %s", name, text, what);
        return VPMM_ERROR_INVALID_ENV;
    }
    *value = v;
    *src = VPMM_FROM_ENV;
    return VPMM_SUCCESS;
}

static vpmm_status_t env_backend(vpmm_backend_t *backend)
{
    const char *text = getenv("VPMM_BACKEND");
    if (text == NULL)
        return VPMM_SUCCESS;
    if (strcmp(text, "cuda") == 0)
        *backend = VPMM_BACKEND_CUDA;
    else if (strcmp(text, "host") == 0)
        *backend = VPMM_BACKEND_HOST;
    else if (strcmp(text, "auto") == 0) {
        /* It used to mean "cuda, else host": say why it went rather than just refuse it. */
        vpmm_i_set_error("VPMM_BACKEND='auto': expected cuda or host (auto is gone: cuda is the "
                         "default and never falls back to host memory)");
        return VPMM_ERROR_INVALID_ENV;
    } else {
        vpmm_i_set_error("VPMM_BACKEND='%s': expected cuda or host", text);
        return VPMM_ERROR_INVALID_ENV;
    }
    return VPMM_SUCCESS;
}

static vpmm_status_t env_default_stream(vpmm_default_stream_t *out)
{
    const char *text = getenv("VPMM_DEFAULT_STREAM");
    if (text == NULL)
        return VPMM_SUCCESS;
    if (strcmp(text, "legacy") == 0)
        *out = VPMM_DEFAULT_STREAM_LEGACY;
    else if (strcmp(text, "per-thread") == 0)
        *out = VPMM_DEFAULT_STREAM_PER_THREAD;
    else {
        vpmm_i_set_error("VPMM_DEFAULT_STREAM='%s': expected legacy or per-thread", text);
        return VPMM_ERROR_INVALID_ENV;
    }
    return VPMM_SUCCESS;
}

/* ---- which VPMM_* names exist ------------------------------------------------------------- */

extern char **environ; /* POSIX: the program declares it */

/*
 * Every VPMM_* environment variable of the project, in one table. The first eleven are the
 * library's knobs; the others are read by tests, tools and integrations whose processes also create
 * pools (or start processes that do), so they must pass the check below.
 */
const vpmm_env_var_t vpmm_i_env_vars[] = {
    { "VPMM_BACKEND", NULL },
    { "VPMM_PAGE_SIZE", NULL },
    { "VPMM_VA_SIZE", NULL },
    { "VPMM_PAGES", NULL },
    { "VPMM_HOST_MEMORY", NULL },
    { "VPMM_CACHE_PERCENT", NULL },
    { "VPMM_MAX_BYTES", NULL },
    { "VPMM_VERBOSE", NULL },
    { "VPMM_TRACE_FILE", NULL },
    { "VPMM_DEFAULT_STREAM", NULL },
    { "VPMM_DRIVER_STATS", NULL },
    { "VPMM_WORKER", NULL },
    { "VPMM_IPC", NULL },
    { "VPMM_HANDLE_PAGES", NULL },
    { "VPMM_LARGE_HANDLES", NULL },
    { "VPMM_SMALL_BYTES", NULL },
    { "VPMM_TORCH_ENABLE", "integrations/pytorch/autoenable/sitecustomize.py" },
    { "VPMM_TORCH_BACKEND", "integrations/pytorch/vpmm/torch.py" },
    { "VPMM_TORCH_BACKEND_BUILD", "integrations/pytorch/setup.py" },
    { "VPMM_TORCH_SEGMENTS", "integrations/pytorch/vpmm_torch_backend.cpp" },
    { "VPMM_TORCH_NCCL_ZERO_COPY", "integrations/pytorch/vpmm/torch.py" },
    { "VPMM_TORCH_LIB", "samples/pytorch/train_and_graph.py" },
    { "VPMM_SUITE_TIMEOUT", "integrations/pytorch/suite/run.sh" },
    { "VPMM_PYTHON", "bench/run_all.sh" },
    { "VPMM_TEST_REQUIRE_GPU", "tests/gpu_test_util.c" },
    { "VPMM_TEST_GPUS", "tests/test_gpu_multi.c" },
    { "VPMM_TEST_SEED", "tests/test_gpu.c" },
    { "VPMM_TEST_UNDER_VALGRIND", "tests/sanitize/valgrind.sh" },
    { "VPMM_STRESS_SEED", "tests/test_stress.c" },
    { "VPMM_STRESS_OPS", "tests/test_stress.c" },
    { "VPMM_THREADS_SEED", "tests/test_threads.c" },
    { "VPMM_THREADS_OPS", "tests/test_threads.c" },
    { "VPMM_TSAN_THREADS_OPS", "tests/sanitize/run_ci.sh" },
};
const size_t vpmm_i_env_var_count = sizeof vpmm_i_env_vars / sizeof vpmm_i_env_vars[0];

static char upper(char c)
{
    return c >= 'a' && c <= 'z' ? (char)(c - 'a' + 'A') : c;
}

/* Optimal string alignment: Levenshtein plus adjacent swaps, three rows of at most 64 cells. */
size_t vpmm_i_name_distance(const char *a, size_t alen, const char *b)
{
    size_t rows[3][VPMM_NAME_DISTANCE_MAX + 1];
    size_t *before = rows[0], *prev = rows[1], *cur = rows[2], *t;
    size_t blen = strlen(b);

    if (alen > VPMM_NAME_DISTANCE_MAX || blen > VPMM_NAME_DISTANCE_MAX)
        return SIZE_MAX;
    for (size_t j = 0; j <= blen; j++)
        prev[j] = j;
    for (size_t i = 1; i <= alen; i++) {
        cur[0] = i;
        for (size_t j = 1; j <= blen; j++) {
            size_t v = VPMM_MIN(prev[j], cur[j - 1]) + 1; /* a deletion or an insertion */
            v = VPMM_MIN(v, prev[j - 1] + (upper(a[i - 1]) != upper(b[j - 1])));
            if (i > 1 && j > 1 && upper(a[i - 1]) == upper(b[j - 2]) &&
                upper(a[i - 2]) == upper(b[j - 1]))
                v = VPMM_MIN(v, before[j - 2] + 1);
            cur[j] = v;
        }
        t = before;
        before = prev;
        prev = cur;
        cur = t;
    }
    return prev[blen];
}

/* Whether the first len bytes of a start b, letters compared without case. */
static int starts(const char *b, const char *a, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (b[i] == '\0' || upper(a[i]) != upper(b[i]))
            return 0;
    return 1;
}

/*
 * Refuses a VPMM_* variable that is none of ours: a misspelled knob (VPMM_MAXBYTES=1M) would
 * otherwise be ignored, and the program would run without the setting it asked for. The message
 * names the closest known name when one is near: at most a third of its part after "VPMM_"
 * differs (VPMM_MAXBYTES -> VPMM_MAX_BYTES), or the name is cut short after four letters or more
 * (VPMM_TRACE -> VPMM_TRACE_FILE); VPMM_FOO gets no guess. config.ignore_env skips this with the
 * rest of the environment.
 */
static vpmm_status_t env_names_known(void)
{
    for (char **e = environ; e != NULL && *e != NULL; e++) {
        const char *eq = strchr(*e, '=');
        size_t len = eq != NULL ? (size_t)(eq - *e) : strlen(*e);
        const char *guess = NULL;
        size_t best = SIZE_MAX;
        int known = 0;

        if (strncmp(*e, "VPMM_", 5) != 0)
            continue;
        for (size_t i = 0; i < vpmm_i_env_var_count; i++) {
            const char *name = vpmm_i_env_vars[i].name;
            size_t d;
            if (strlen(name) == len && strncmp(*e, name, len) == 0) {
                known = 1;
                break;
            }
            d = vpmm_i_name_distance(*e, len, name);
            if (d < best &&
                (d <= (strlen(name) - 5 + 2) / 3 || (len >= 9 && starts(name, *e, len)))) {
                best = d;
                guess = name;
            }
        }
        if (known)
            continue;
        if (guess != NULL)
            vpmm_i_set_error("%.*s is not a vpmm variable; did you mean %s?", (int)len, *e, guess);
        else
            vpmm_i_set_error("%.*s%s is not a vpmm variable (README.md's knob table lists them)",
                             (int)VPMM_MIN(len, 64), *e, len > 64 ? "..." : "");
        return VPMM_ERROR_INVALID_ENV;
    }
    return VPMM_SUCCESS;
}

vpmm_status_t vpmm_i_options_resolve(const vpmm_config_t *config, vpmm_options_t *out)
{
    vpmm_config_t defaults;
    vpmm_options_t o;
    size_t env_page = 0, env_va = 0, env_pages = 0, env_host = 0, env_cache = 0;
    size_t env_max = 0, env_verbose = 0, env_dstats = 0, env_worker = 0, env_hpages = 0;
    size_t env_small = 0, env_ipc = 1, env_large = 1;
    vpmm_option_source_t ipc_src = VPMM_FROM_DEFAULT, large_src = VPMM_FROM_DEFAULT;
    vpmm_option_source_t small_src = VPMM_FROM_DEFAULT;
    vpmm_option_source_t page_src = VPMM_FROM_DEFAULT, va_src = VPMM_FROM_DEFAULT;
    vpmm_option_source_t pages_src = VPMM_FROM_DEFAULT, host_src = VPMM_FROM_DEFAULT;
    vpmm_option_source_t cache_src = VPMM_FROM_DEFAULT, max_src = VPMM_FROM_DEFAULT;
    vpmm_option_source_t verbose_src = VPMM_FROM_DEFAULT, dstats_src = VPMM_FROM_DEFAULT,
                         worker_src = VPMM_FROM_DEFAULT, hpages_src = VPMM_FROM_DEFAULT;
    vpmm_backend_t env_back = VPMM_BACKEND_CUDA; /* the default backend */
    vpmm_default_stream_t env_default = VPMM_DEFAULT_STREAM_UNSET;

    if (config == NULL) {
        vpmm_i_config_defaults(&defaults);
        config = &defaults;
    }
    if (config->backend != VPMM_BACKEND_DEFAULT && config->backend != VPMM_BACKEND_CUDA &&
        config->backend != VPMM_BACKEND_HOST) {
        vpmm_i_set_error("config.backend=%d: expected VPMM_BACKEND_DEFAULT, _CUDA or _HOST",
                         (int)config->backend);
        return VPMM_ERROR_INVALID_CONFIG;
    }
    if (config->cache_percent < -1 || config->cache_percent > 100) {
        vpmm_i_set_error("config.cache_percent=%d: expected -1 (default) or 0 to 100",
                         config->cache_percent);
        return VPMM_ERROR_INVALID_CONFIG;
    }
    if (config->verbose < -1 || config->verbose > 1) {
        vpmm_i_set_error("config.verbose=%d: expected -1 (default), 0 or 1", config->verbose);
        return VPMM_ERROR_INVALID_CONFIG;
    }
    if (config->driver_stats < -1 || config->driver_stats > 1) {
        vpmm_i_set_error("config.driver_stats=%d: expected -1 (default), 0 or 1",
                         config->driver_stats);
        return VPMM_ERROR_INVALID_CONFIG;
    }
    if (config->handle_pages > VPMM_HANDLE_PAGES_MAX) {
        vpmm_i_set_error("config.handle_pages=%zu: expected 0 (default: 1) to %d",
                         config->handle_pages, VPMM_HANDLE_PAGES_MAX);
        return VPMM_ERROR_INVALID_CONFIG;
    }
    if (config->worker < -1 || config->worker > 1) {
        vpmm_i_set_error("config.worker=%d: expected -1 (default), 0 or 1", config->worker);
        return VPMM_ERROR_INVALID_CONFIG;
    }
    if (config->ipc < -1 || config->ipc > 1) {
        vpmm_i_set_error("config.ipc=%d: expected -1 (default), 0 or 1", config->ipc);
        return VPMM_ERROR_INVALID_CONFIG;
    }
    if (config->large_handles < -1 || config->large_handles > 1) {
        vpmm_i_set_error("config.large_handles=%d: expected -1 (default), 0 or 1",
                         config->large_handles);
        return VPMM_ERROR_INVALID_CONFIG;
    }
    if ((unsigned)config->default_stream > (unsigned)VPMM_DEFAULT_STREAM_PER_THREAD) {
        vpmm_i_set_error("config.default_stream=%d: expected VPMM_DEFAULT_STREAM_UNSET, _LEGACY "
                         "or _PER_THREAD",
                         (int)config->default_stream);
        return VPMM_ERROR_INVALID_CONFIG;
    }
    if (config->device < -1) {
        vpmm_i_set_error("config.device=%d: expected -1 (current) or a device ordinal",
                         config->device);
        return VPMM_ERROR_INVALID_CONFIG;
    }

    /* Parse every variable even if the config overrides it: a typo should never go unnoticed. */
    if (!config->ignore_env) {
        VPMM_CHECK(env_names_known());
        VPMM_CHECK(env_backend(&env_back));
        VPMM_CHECK(env_number("VPMM_PAGE_SIZE", &env_page, &page_src, 0, 1, SIZE_MAX,
                              "the page size must be positive"));
        VPMM_CHECK(env_number("VPMM_VA_SIZE", &env_va, &va_src, 0, 1, SIZE_MAX,
                              "the VA chunk size must be positive"));
        VPMM_CHECK(env_number("VPMM_PAGES", &env_pages, &pages_src, 1, 0, SIZE_MAX, ""));
        VPMM_CHECK(env_number("VPMM_HOST_MEMORY", &env_host, &host_src, 0, 1, SIZE_MAX,
                              "the emulated device memory must be positive"));
        VPMM_CHECK(env_number("VPMM_CACHE_PERCENT", &env_cache, &cache_src, 1, 0, 100,
                              "expected 0 to 100"));
        VPMM_CHECK(env_number("VPMM_MAX_BYTES", &env_max, &max_src, 0, 0, SIZE_MAX, ""));
        VPMM_CHECK(
            env_number("VPMM_VERBOSE", &env_verbose, &verbose_src, 1, 0, 1, "expected 0 or 1"));
        VPMM_CHECK(
            env_number("VPMM_DRIVER_STATS", &env_dstats, &dstats_src, 1, 0, 1, "expected 0 or 1"));
        VPMM_CHECK(env_number("VPMM_WORKER", &env_worker, &worker_src, 1, 0, 1, "expected 0 or 1"));
        VPMM_CHECK(env_number("VPMM_IPC", &env_ipc, &ipc_src, 1, 0, 1, "expected 0 or 1"));
        VPMM_CHECK(
            env_number("VPMM_LARGE_HANDLES", &env_large, &large_src, 1, 0, 1, "expected 0 or 1"));
        VPMM_CHECK(env_number("VPMM_HANDLE_PAGES", &env_hpages, &hpages_src, 1, 1,
                              VPMM_HANDLE_PAGES_MAX, "expected 1 to 512"));
        VPMM_CHECK(env_number("VPMM_SMALL_BYTES", &env_small, &small_src, 0, 0, SIZE_MAX, ""));
        VPMM_CHECK(env_default_stream(&env_default));
        const char *trace_file = getenv("VPMM_TRACE_FILE");
        if (trace_file != NULL && trace_file[0] == '\0') {
            vpmm_i_set_error("VPMM_TRACE_FILE='': expected a file name");
            return VPMM_ERROR_INVALID_ENV;
        }
    }
    if (config->trace_file != NULL && config->trace_file[0] == '\0') {
        vpmm_i_set_error("config.trace_file='': expected a file name or NULL");
        return VPMM_ERROR_INVALID_CONFIG;
    }

    memset(&o, 0, sizeof o);
    o.backend = config->backend != VPMM_BACKEND_DEFAULT ? config->backend : env_back;
    o.device = config->device;

    o.page_size = config->page_size ? config->page_size : env_page;
    o.page_size_src = config->page_size ? VPMM_FROM_CONFIG : page_src;
    o.va_size = config->va_size ? config->va_size : env_va;
    o.va_size_src = config->va_size ? VPMM_FROM_CONFIG : va_src;
    o.prealloc_pages = config->prealloc_pages ? config->prealloc_pages : env_pages;
    o.prealloc_src = config->prealloc_pages ? VPMM_FROM_CONFIG : pages_src;
    o.host_memory = config->host_memory ? config->host_memory : env_host;
    if (o.va_size == 0) {
        o.va_size = VPMM_DEFAULT_VA_SIZE;
        o.va_size_src = VPMM_FROM_DEFAULT;
    }
    if (o.host_memory == 0)
        o.host_memory = VPMM_DEFAULT_HOST_MEMORY;
    if (config->cache_percent >= 0)
        o.cache_percent = (unsigned)config->cache_percent;
    else
        o.cache_percent =
            cache_src == VPMM_FROM_ENV ? (unsigned)env_cache : VPMM_DEFAULT_CACHE_PERCENT;
    o.max_bytes = config->max_bytes ? config->max_bytes : env_max;
    o.max_bytes_src = config->max_bytes ? VPMM_FROM_CONFIG : max_src;
    o.verbose = config->verbose >= 0 ? config->verbose : (int)env_verbose;
    o.driver_stats = config->driver_stats >= 0 ? config->driver_stats : (int)env_dstats;
    /* The background worker (worker.c): off unless asked. Measured on an H100, it did not lower
     * the replays' allocator time: the driver runs one VMM call at a time across threads, so its
     * unmaps wait for (and delay) the caller's maps (bench/RESULTS.md, "The background worker"). */
    o.worker = config->worker >= 0 ? config->worker : (int)env_worker;
    /* Exportable memory (CUDA IPC): on unless asked not to, as PyTorch's expandable segments
     * create POSIX-descriptor handles by default; the backend falls back where the device
     * cannot (driver_cuda.c). */
    o.ipc = config->ipc >= 0 ? config->ipc : ipc_src == VPMM_FROM_ENV ? (int)env_ipc : 1;
    /* Large handles (policy.c, plan_growth): on unless asked not to; off, every free page can be
     * gathered near the end of the device (docs/ALGORITHM.md, "The near-full rule"). */
    o.large_handles = config->large_handles >= 0   ? config->large_handles
                      : large_src == VPMM_FROM_ENV ? (int)env_large
                                                   : 1;
    o.handle_pages = config->handle_pages          ? config->handle_pages
                     : hpages_src == VPMM_FROM_ENV ? env_hpages
                                                   : 1;
    /* Size classes: 0 = the default, set once the page size is known; 1 = none (no request is
     * smaller than one byte), which VPMM_SMALL_BYTES=0 asks for too. */
    if (config->small_bytes != 0) {
        o.small_bytes = config->small_bytes;
        o.small_bytes_src = VPMM_FROM_CONFIG;
    } else if (small_src == VPMM_FROM_ENV) {
        o.small_bytes = env_small != 0 ? env_small : 1;
        o.small_bytes_src = VPMM_FROM_ENV;
    }
    if (config->trace_file != NULL) {
        o.trace_file = config->trace_file;
        o.trace_file_src = VPMM_FROM_CONFIG;
    } else if (!config->ignore_env && getenv("VPMM_TRACE_FILE") != NULL) {
        o.trace_file = getenv("VPMM_TRACE_FILE");
        o.trace_file_src = VPMM_FROM_ENV;
    }
    o.per_thread_default = (config->default_stream != VPMM_DEFAULT_STREAM_UNSET
                                ? config->default_stream
                                : env_default) == VPMM_DEFAULT_STREAM_PER_THREAD;
    *out = o;
    return VPMM_SUCCESS;
}

static const char *knob(vpmm_option_source_t src, const char *env, const char *field)
{
    return src == VPMM_FROM_ENV ? env : field;
}

static vpmm_status_t knob_status(vpmm_option_source_t src)
{
    return src == VPMM_FROM_ENV ? VPMM_ERROR_INVALID_ENV : VPMM_ERROR_INVALID_CONFIG;
}

vpmm_status_t vpmm_i_options_finish(vpmm_options_t *o, size_t granularity)
{
    char a[32], b[32];
    if (o->page_size == 0) {
        o->page_size = granularity;
        o->page_size_src = VPMM_FROM_DEFAULT;
    }
    if (o->page_size % granularity != 0) {
        vpmm_i_set_error("%s=%zu: not a multiple of the allocation granularity (%s)",
                         knob(o->page_size_src, "VPMM_PAGE_SIZE", "config.page_size"), o->page_size,
                         vpmm_i_format_bytes(granularity, a, sizeof a));
        return knob_status(o->page_size_src);
    }
    /* The default chunk is "about 8 TiB": make it a whole number of pages rather than fail. */
    if (o->va_size_src == VPMM_FROM_DEFAULT) {
        size_t va = vpmm_round_up_checked(o->va_size, o->page_size);
        if (va == 0) {
            vpmm_i_set_error("%s=%zu: too large for a VA chunk",
                             knob(o->page_size_src, "VPMM_PAGE_SIZE", "config.page_size"),
                             o->page_size);
            return knob_status(o->page_size_src);
        }
        o->va_size = va;
    }
    if (o->va_size < o->page_size || o->va_size % o->page_size != 0) {
        vpmm_i_set_error("%s=%zu: must be a positive multiple of the page size (%s)",
                         knob(o->va_size_src, "VPMM_VA_SIZE", "config.va_size"), o->va_size,
                         vpmm_i_format_bytes(o->page_size, a, sizeof a));
        return knob_status(o->va_size_src);
    }
    if (o->small_bytes == 0) {
        o->small_bytes = VPMM_MAX(o->page_size / VPMM_SMALL_PAGE_FRACTION, (size_t)1);
    } else if (o->small_bytes > o->page_size) {
        vpmm_i_set_error("%s=%zu: more than one page (%s); small blocks share pages",
                         knob(o->small_bytes_src, "VPMM_SMALL_BYTES", "config.small_bytes"),
                         o->small_bytes, vpmm_i_format_bytes(o->page_size, a, sizeof a));
        return knob_status(o->small_bytes_src);
    }
    if (o->max_bytes != 0) {
        /* The cap counts whole pages (what the pool maps); below one page nothing fits. */
        if (o->max_bytes < o->page_size) {
            vpmm_i_set_error("%s=%zu: less than one page (%s)",
                             knob(o->max_bytes_src, "VPMM_MAX_BYTES", "config.max_bytes"),
                             o->max_bytes, vpmm_i_format_bytes(o->page_size, a, sizeof a));
            return knob_status(o->max_bytes_src);
        }
        o->max_bytes = vpmm_align_down(o->max_bytes, o->page_size);
        if (o->prealloc_pages > o->max_bytes / o->page_size) {
            vpmm_i_set_error("%s=%zu: %zu pages of %s exceed the cap of %s",
                             knob(o->prealloc_src, "VPMM_PAGES", "config.prealloc_pages"),
                             o->prealloc_pages, o->prealloc_pages,
                             vpmm_i_format_bytes(o->page_size, a, sizeof a),
                             vpmm_i_format_bytes(o->max_bytes, b, sizeof b));
            return knob_status(o->prealloc_src);
        }
    }
    if (o->prealloc_pages > o->va_size / o->page_size) {
        vpmm_i_set_error("%s=%zu: %zu pages of %s do not fit in one VA chunk of %s",
                         knob(o->prealloc_src, "VPMM_PAGES", "config.prealloc_pages"),
                         o->prealloc_pages, o->prealloc_pages,
                         vpmm_i_format_bytes(o->page_size, a, sizeof a),
                         vpmm_i_format_bytes(o->va_size, b, sizeof b));
        return knob_status(o->prealloc_src);
    }
    return VPMM_SUCCESS;
}
