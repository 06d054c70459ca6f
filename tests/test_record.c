/*
 * test_record.c — recording a pool's allocations as a replay trace (src/core/record.c,
 * VPMM_TRACE_FILE / config.trace_file).
 *
 * A recorded program (mallocs and frees on the legacy stream, a created stream, the per-thread
 * streams of two threads, and a capture's graph pool) gives exactly one line per call, in order,
 * with the caller's addresses and sizes, the allocation stream of each free, streams numbered in
 * order of first use with the legacy stream 0 and each thread's per-thread stream its own number;
 * the trace loads with vpmm-replay's loader (bench/trace.c) with the same peak live bytes. The
 * path's "%p" and "%n" are expanded, and a path that cannot be written, a bad "%", or an empty
 * name makes pool creation fail with the status of the knob that named it (INVALID_CONFIG /
 * INVALID_ENV) and nothing leaked. A name ending in .gz is written gzip-compressed (refused when
 * zlib cannot be loaded); a write error — a full disk — makes vpmm_pool_destroy return
 * VPMM_ERROR_IO naming the file; a pool never destroyed has its trace closed at exit.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "graph_test_util.h"
#include "trace.h"

typedef struct line {
    char op;
    uintptr_t addr;
    size_t size;
    unsigned long stream;
} line_t;

/* The trace's operation lines (comments skipped); returns how many, at most max. */
static size_t read_trace(const char *path, line_t *out, size_t max)
{
    FILE *f = fopen(path, "r");
    char buf[256];
    size_t n = 0;
    assert_non_null(f);
    while (fgets(buf, sizeof buf, f) != NULL) {
        line_t l;
        if (buf[0] == '#')
            continue;
        assert_int_equal(sscanf(buf, "%c %" SCNxPTR " %zu %lu", &l.op, &l.addr, &l.size, &l.stream),
                         4);
        if (n < max)
            out[n] = l;
        n++;
    }
    fclose(f);
    return n;
}

static void temp_path(char *buf, size_t len, const char *tag)
{
    snprintf(buf, len, "%s/vpmm-test-record-%ld-%s", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (long)getpid(), tag);
}

typedef struct thread_job {
    tpool_t *t;
    void *p;
} thread_job_t;

static void *per_thread_malloc(void *arg)
{
    thread_job_t *j = arg;
    if (vpmm_malloc(j->t->pool, 3000, VPMM_STREAM_PER_THREAD, &j->p) != VPMM_SUCCESS)
        j->p = NULL;
    return NULL;
}

static void expect_line(const line_t *l, char op, void *p, size_t size, unsigned long stream)
{
    assert_int_equal(l->op, op);
    assert_int_equal(l->addr, (uintptr_t)p);
    assert_int_equal(l->size, size);
    assert_int_equal(l->stream, stream);
}

static void test_records_every_call(void **state)
{
    char path[256];
    tpool_t t;
    vpmm_stream_t s;
#if VPMM_HAVE_GRAPHS
    vpmm_graph_pool_t *gp;
    vpmm_graph_t g;
    void *x;
#endif
    thread_job_t ja, jb;
    pthread_t th;
    line_t l[16];
    void *a, *b, *c;
    (void)state;
    temp_path(path, sizeof path, "every");
    tpool_open(&t, &(tpool_params_t){ .trace_file = path });
    s = vpmm_host_stream_create(t.host);
    a = tmalloc(t.pool, 5 * MiB + 3, s); /* stream 1 (0 is kept for the legacy stream) */
    b = tmalloc(t.pool, 1000, NULL);     /* stream 0 */
    ja = (thread_job_t){ .t = &t };
    jb = (thread_job_t){ .t = &t };
    assert_int_equal(pthread_create(&th, NULL, per_thread_malloc, &ja), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(pthread_create(&th, NULL, per_thread_malloc, &jb), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_non_null(ja.p);
    assert_non_null(jb.p);
    tfree(t.pool, a);
    tfree(t.pool, ja.p); /* freed here: the line names its allocation stream */
#if VPMM_HAVE_GRAPHS
    gp = tgp_create(&t);
    tcapture_begin(&t, gp, s);
    x = tmalloc(t.pool, 4096, s); /* a graph pool's allocation is recorded too */
    g = tcapture_end(&t, s);
#endif
    c = tmalloc(t.pool, 256, s);
#if VPMM_HAVE_GRAPHS
    tfree(t.pool, x);
#endif
    tfree(t.pool, c);
    tfree(t.pool, b);
    tfree(t.pool, jb.p);
#if VPMM_HAVE_GRAPHS
    assert_int_equal(vpmm_graph_destroy(t.pool, g), VPMM_SUCCESS);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
#endif
    tpool_close(&t); /* flushes */

#if VPMM_HAVE_GRAPHS
    assert_int_equal(read_trace(path, l, 16), 12);
#else
    assert_int_equal(read_trace(path, l, 16), 10); /* no capture: x's two lines are not there */
#endif
    expect_line(&l[0], 'a', a, 5 * MiB + 3, 1);
    expect_line(&l[1], 'a', b, 1000, 0);
    expect_line(&l[2], 'a', ja.p, 3000, 2);
    expect_line(&l[3], 'a', jb.p, 3000, 3); /* another thread's per-thread stream */
    expect_line(&l[4], 'f', a, 5 * MiB + 3, 1);
    expect_line(&l[5], 'f', ja.p, 3000, 2);
#if VPMM_HAVE_GRAPHS
    expect_line(&l[6], 'a', x, 4096, 1);
    expect_line(&l[7], 'a', c, 256, 1);
    expect_line(&l[8], 'f', x, 4096, 1);
    expect_line(&l[9], 'f', c, 256, 1);
    expect_line(&l[10], 'f', b, 1000, 0);
    expect_line(&l[11], 'f', jb.p, 3000, 3);
#else
    expect_line(&l[6], 'a', c, 256, 1);
    expect_line(&l[7], 'f', c, 256, 1);
    expect_line(&l[8], 'f', b, 1000, 0);
    expect_line(&l[9], 'f', jb.p, 3000, 3);
#endif
    assert_int_equal(unlink(path), 0);
}

/* What a program records, vpmm-replay loads: same operations, same peak live bytes. */
static void test_recorded_trace_replays(void **state)
{
    char path[256], err[256];
    tpool_t t;
    trace_t tr;
    trng_t rng = { 20261125 };
    void *live[64] = { 0 };
    size_t live_bytes = 0, peak = 0, sizes[64] = { 0 };
    vpmm_stream_t s[2];
    unsigned ops = 0;
    (void)state;
    temp_path(path, sizeof path, "replays");
    tpool_open(&t, &(tpool_params_t){ .trace_file = path });
    s[0] = NULL;
    s[1] = vpmm_host_stream_create(t.host);
    for (int i = 0; i < 2000; i++) {
        size_t k = trng_below(&rng, 64);
        if (live[k] != NULL) {
            tfree(t.pool, live[k]);
            live[k] = NULL;
            live_bytes -= sizes[k];
        } else {
            sizes[k] = trng_below(&rng, 3) == 0 ? trng_below(&rng, 8 * MiB) + 1
                                                : trng_below(&rng, 64 * KiB) + 1;
            live[k] = tmalloc(t.pool, sizes[k], s[trng_below(&rng, 2)]);
            live_bytes += sizes[k];
            peak = live_bytes > peak ? live_bytes : peak;
        }
        ops++;
    }
    for (size_t k = 0; k < 64; k++)
        if (live[k] != NULL)
            tfree(t.pool, live[k]);
    tpool_close(&t);
    assert_int_equal(trace_load(path, &tr, err, sizeof err), 0);
    assert_true(tr.allocs + tr.frees >= ops);
    assert_int_equal(tr.allocs, tr.frees);
    assert_int_equal(tr.peak_live, peak);
    assert_true(tr.nstreams <= 2);
    trace_free(&tr);
    assert_int_equal(unlink(path), 0);
}

/* "%n" numbers the pools of a process, "%p" is its id, "%%" a percent sign. */
static void test_path_expansion(void **state)
{
    char fmt[256], p0[256], p1[256];
    tpool_t t0, t1;
    FILE *f;
    (void)state;
    snprintf(fmt, sizeof fmt, "%s/vpmm-test-record-%%p-%%%%-%%n",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    tpool_open(&t0, &(tpool_params_t){ .trace_file = fmt });
    tpool_open(&t1, &(tpool_params_t){ .trace_file = fmt });
    tfree(t1.pool, tmalloc(t1.pool, 100, NULL));
    tpool_close(&t0);
    tpool_close(&t1);
    /* The pools' numbers are the process's: find two consecutive files. */
    for (unsigned n = 0; n < 1000; n++) {
        snprintf(p0, sizeof p0, "%s/vpmm-test-record-%ld-%%-%u",
                 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (long)getpid(), n);
        snprintf(p1, sizeof p1, "%s/vpmm-test-record-%ld-%%-%u",
                 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (long)getpid(), n + 1);
        if ((f = fopen(p0, "r")) != NULL) {
            fclose(f);
            break;
        }
    }
    {
        line_t l[2];
        assert_int_equal(read_trace(p0, l, 2), 0);
        assert_int_equal(read_trace(p1, l, 2), 2);
    }
    assert_int_equal(unlink(p0), 0);
    assert_int_equal(unlink(p1), 0);
}

/* A trace that cannot be written fails pool creation, naming the knob; nothing leaks. */
static void test_bad_paths(void **state)
{
    static const struct {
        const char *path;
        const char *says;
    } bad[] = {
        { "/nonexistent-vpmm-dir/trace", "cannot open /nonexistent-vpmm-dir/trace for writing" },
        { "/nonexistent-vpmm-dir/trace.gz",
          "cannot open /nonexistent-vpmm-dir/trace.gz for writing" }, /* through zlib */
        { "/tmp/vpmm-%x", "a % other than %p, %n or %%" },
    };
    vpmm_config_t c;
    vpmm_pool_t *pool = (vpmm_pool_t *)1;
    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tpool_t t;
        vpmm_driver_t *host, *fault;
        vpmm_status_t st;
        assert_int_equal(vpmm_host_open(NULL, &host), VPMM_DRV_OK);
        assert_int_equal(vpmm_fault_wrap(host, &fault), VPMM_DRV_OK);
        st = tpool_try_open(&t, &(tpool_params_t){ .trace_file = bad[i].path }, fault);
        assert_int_equal(st, VPMM_ERROR_INVALID_CONFIG);
        assert_null(t.pool);
        assert_non_null(strstr(vpmm_last_error(), bad[i].says));
        assert_non_null(strstr(vpmm_last_error(), "config.trace_file"));
        assert_no_driver_leaks(fault);
        fault->close(fault);
    }
    /* The empty name, through the public API; and the environment's knob. */
    vpmm_config_init(&c);
    c.backend = VPMM_BACKEND_HOST;
    c.ignore_env = 1;
    c.trace_file = "";
    assert_int_equal(vpmm_pool_create(&c, &pool), VPMM_ERROR_INVALID_CONFIG);
    assert_null(pool);
    assert_non_null(strstr(vpmm_last_error(), "config.trace_file=''"));
    c.trace_file = NULL;
    c.ignore_env = 0;
    c.va_size = 4 * GiB;
    assert_int_equal(setenv("VPMM_TRACE_FILE", "/nonexistent-vpmm-dir/t", 1), 0);
    assert_int_equal(vpmm_pool_create(&c, &pool), VPMM_ERROR_INVALID_ENV);
    assert_non_null(strstr(vpmm_last_error(), "VPMM_TRACE_FILE='/nonexistent-vpmm-dir/t'"));
    assert_int_equal(setenv("VPMM_TRACE_FILE", "", 1), 0);
    assert_int_equal(vpmm_pool_create(&c, &pool), VPMM_ERROR_INVALID_ENV);
    assert_non_null(strstr(vpmm_last_error(), "VPMM_TRACE_FILE='': expected a file name"));
    tenv_unset_all();
}

/* The public configuration of a host pool recording into path (no environment read). */
static vpmm_config_t trace_config(const char *path)
{
    vpmm_config_t c;
    vpmm_config_init(&c);
    c.backend = VPMM_BACKEND_HOST;
    c.ignore_env = 1;
    c.va_size = 4 * GiB;
    c.trace_file = path;
    return c;
}

/* A trace of a few calls, through the public API (vpmm_pool_destroy's status is the point). */
static vpmm_status_t record_some(const char *path, int calls)
{
    vpmm_config_t c = trace_config(path);
    vpmm_pool_t *pool = NULL;
    assert_int_equal(vpmm_pool_create(&c, &pool), VPMM_SUCCESS);
    for (int i = 0; i < calls; i++) {
        void *p = NULL;
        assert_int_equal(vpmm_malloc(pool, 1000 + (size_t)i, NULL, &p), VPMM_SUCCESS);
        assert_int_equal(vpmm_free(pool, p), VPMM_SUCCESS);
    }
    return vpmm_pool_destroy(pool);
}

/* A name ending in .gz is written gzip-compressed (zlib at run time); the loader reads it back,
 * the same operations as the plain file's. */
static void test_gzip_when_the_name_says_so(void **state)
{
    char plain[256], gz[256], err[256];
    unsigned char magic[2] = { 0, 0 };
    trace_t a, b;
    FILE *f;
    (void)state;
    temp_path(plain, sizeof plain, "plain.trace");
    temp_path(gz, sizeof gz, "packed.trace.gz");
    assert_int_equal(record_some(plain, 3000), VPMM_SUCCESS);
    assert_int_equal(record_some(gz, 3000), VPMM_SUCCESS);
    f = fopen(gz, "rb");
    assert_non_null(f);
    assert_int_equal(fread(magic, 1, 2, f), 2);
    fclose(f);
    assert_int_equal(magic[0], 0x1f); /* gzip's magic number */
    assert_int_equal(magic[1], 0x8b);
    assert_int_equal(trace_load(plain, &a, err, sizeof err), 0);
    assert_int_equal(trace_load(gz, &b, err, sizeof err), 0);
    assert_int_equal(a.nops, 6000);
    assert_int_equal(b.nops, a.nops);
    assert_int_equal(b.peak_live, a.peak_live);
    trace_free(&a);
    trace_free(&b);
    assert_int_equal(unlink(plain), 0);
    assert_int_equal(unlink(gz), 0);
}

/* Without zlib a .gz name is refused at creation, saying what to do; nothing leaks. */
static void test_gzip_without_zlib(void **state)
{
    const char *saved = vpmm_i_zlib_name;
    char gz[256];
    vpmm_config_t c;
    vpmm_pool_t *pool = NULL;
    (void)state;
    temp_path(gz, sizeof gz, "nozlib.trace.gz");
    vpmm_i_zlib_name = "libz-vpmm-test-absent.so.9";
    c = trace_config(gz);
    assert_int_equal(vpmm_pool_create(&c, &pool), VPMM_ERROR_INVALID_CONFIG);
    vpmm_i_zlib_name = saved;
    assert_null(pool);
    assert_non_null(strstr(vpmm_last_error(), "install zlib, or name the file without .gz"));
    assert_non_null(strstr(vpmm_last_error(), "libz-vpmm-test-absent.so.9")); /* dlerror's */
    assert_int_equal(access(gz, F_OK), -1);                                   /* nothing created */
}

/* A write that fails (a full disk: /dev/full) is reported: vpmm_pool_destroy returns
 * VPMM_ERROR_IO naming the file, whether the failure came at the last write or long before. */
static void test_write_errors_reported(void **state)
{
    (void)state;
    if (access("/dev/full", W_OK) != 0)
        skip(); /* a system without /dev/full: nothing to fill */
    /* Within one buffer: the failure comes when the pool is destroyed. */
    assert_int_equal(record_some("/dev/full", 10), VPMM_ERROR_IO);
    assert_non_null(strstr(vpmm_last_error(), "the trace file /dev/full is incomplete: "));
    assert_non_null(strstr(vpmm_last_error(), strerror(ENOSPC)));
    /* Many buffers: the first failure stops the recording; the pool goes on working. */
    assert_int_equal(record_some("/dev/full", 20000), VPMM_ERROR_IO);
    assert_non_null(strstr(vpmm_last_error(), "/dev/full"));
    /* A gzip trace on a full disk (a .gz name linked to /dev/full): the same. */
    {
        char gz[256];
        temp_path(gz, sizeof gz, "full.trace.gz");
        (void)unlink(gz);
        assert_int_equal(symlink("/dev/full", gz), 0);
        assert_int_equal(record_some(gz, 20000), VPMM_ERROR_IO);
        assert_non_null(strstr(vpmm_last_error(), gz));
        assert_int_equal(unlink(gz), 0);
    }
}

/* A pool never destroyed: its trace is written out and closed at exit, so that even a gzip one
 * is complete. */
static void test_closed_at_exit(void **state)
{
    char gz[256], err[256];
    trace_t tr;
    pid_t pid;
    int status = 0;
    (void)state;
    temp_path(gz, sizeof gz, "atexit.trace.gz");
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        vpmm_config_t c = trace_config(gz);
        vpmm_pool_t *pool = NULL;
        if (vpmm_pool_create(&c, &pool) != VPMM_SUCCESS)
            _exit(3);
        for (int i = 0; i < 500; i++) {
            void *p = NULL;
            if (vpmm_malloc(pool, 4096, NULL, &p) != VPMM_SUCCESS || vpmm_free(pool, p) != 0)
                _exit(4);
        }
        exit(0); /* no vpmm_pool_destroy */
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(trace_load(gz, &tr, err, sizeof err), 0);
    assert_int_equal(tr.nops, 1000);
    trace_free(&tr);
    assert_int_equal(unlink(gz), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_records_every_call),
        cmocka_unit_test(test_recorded_trace_replays),
        cmocka_unit_test(test_path_expansion),
        cmocka_unit_test_setup_teardown(test_bad_paths, tenv_clear, tenv_clear),
        cmocka_unit_test(test_gzip_when_the_name_says_so),
        cmocka_unit_test(test_gzip_without_zlib),
        cmocka_unit_test(test_write_errors_reported),
        cmocka_unit_test(test_closed_at_exit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
