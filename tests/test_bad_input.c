/*
 * test_bad_input.c — the bad-input table of docs/BAD_INPUT.md, one cmocka test per row (the
 * test's name is the table's last column). Each row makes one kind of misuse on a host-backend
 * test pool (tpool_open) and asserts:
 *   - the exact status (EXPECT);
 *   - that out pointers are NULL, or untouched, as documented;
 *   - that vpmm_last_error() names the problem (a substring; a successful call leaves it alone,
 *     so each call is made right after poison() and a success must leave the poison there);
 *   - that the pool is unchanged (tsnap before/after, assert_snap_equal), its invariants hold and
 *     the driver holds what the pool believes (CHECK_POOL, assert_driver_matches_pool), and that
 *     it still works (a malloc and a free).
 * Rows where the misuse is not refused but has a defined effect (a free during someone else's
 * capture, a release of an unknown stream, free(NULL)) assert that effect instead.
 *
 * The last four rows were found by this table (docs/BAD_INPUT.md, "Found by the table") and
 * fixed in src/; they stay as regression tests.
 *
 * Environment rows run between tenv_clear (test_util.c), which unset every VPMM_* variable, so no
 * row sees another's settings or the caller's shell. Single-threaded, like every core test.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "graph_test_util.h"

/* ---- helpers --------------------------------------------------------------------------------- */

#define POISON "(poisoned by test_bad_input)"

/* Sets the thread's last error to a marker: a call that succeeds must leave it there. */
static void poison(void)
{
    vpmm_i_set_error("%s", POISON);
}

static void expect_(const char *expr, vpmm_status_t got, vpmm_status_t want, const char *mention)
{
    const char *err = vpmm_last_error();
    if (got != want)
        fail_msg("%s: got %s (\"%s\"), want %s", expr, vpmm_status_name(got), err,
                 vpmm_status_name(want));
    if (mention != NULL && strstr(err, mention) == NULL)
        fail_msg("%s: last error \"%s\" does not mention \"%s\"", expr, err, mention);
    if (mention == NULL && strcmp(err, POISON) != 0)
        fail_msg("%s succeeded but changed the last error to \"%s\"", expr, err);
}

/* Makes `call` right after poison() and checks its status and what vpmm_last_error() says
 * (mention NULL: the call must succeed and leave the last error alone). */
#define EXPECT(call, want, mention) expect_(#call, (poison(), (call)), (want), (mention))

static void assert_error_mentions(const char *needle)
{
    if (strstr(vpmm_last_error(), needle) == NULL)
        fail_msg("last error \"%s\" does not mention \"%s\"", vpmm_last_error(), needle);
}

/* The pool is exactly as it was, consistent, and still serves a malloc and a free. */
static void assert_unchanged_and_works(tpool_t *t, const tsnap_t *before)
{
    tsnap_t after = tsnap(t->pool);
    assert_snap_equal(before, &after);
    CHECK_POOL(t->pool);
    assert_driver_matches_pool(t);
    tfree(t->pool, tmalloc(t->pool, 4096, NULL));
}

/* Every pool here reserves 4 GiB chunks (a graph pool's too): a row may hold two pools with a
 * graph pool each, which must fit in the address space valgrind allows. */
static const tpool_params_t small_va = { .va_size = 4 * GiB };

/* A test pool with some state: two live shared allocations and a cached free block. */
typedef struct fx {
    tpool_t t;
    vpmm_stream_t s;
    void *big;   /* 3 MiB on s */
    void *small; /* 1000 bytes on the legacy stream */
} fx_t;

static void fx_open(fx_t *f, const tpool_params_t *prm)
{
    tpool_open(&f->t, prm);
    f->s = vpmm_host_stream_create(f->t.host);
    f->big = tmalloc(f->t.pool, 3 * MiB, f->s);
    f->small = tmalloc(f->t.pool, 1000, NULL);
    tfree(f->t.pool, tmalloc(f->t.pool, 64 * KiB, f->s)); /* in s's exact-size cache */
}

static void fx_close(fx_t *f)
{
    tfree(f->t.pool, f->big);
    tfree(f->t.pool, f->small);
    tpool_close(&f->t);
}

/* A graph pool with one captured graph G1 on stream cs: a temporary freed inside the capture, an
 * output `out` that stays live, and a checkpoint `ck` taken after G1. */
typedef struct gfx {
    fx_t f;
    vpmm_stream_t cs;
    vpmm_graph_pool_t *gp;
    vpmm_graph_t g;
    void *out;
    vpmm_checkpoint_t *ck;
} gfx_t;

static void gfx_open(gfx_t *x)
{
    fx_open(&x->f, &small_va);
    x->cs = vpmm_host_stream_create(x->f.t.host);
    x->gp = tgp_create(&x->f.t);
    tcapture_begin(&x->f.t, x->gp, x->cs);
    tfree(x->f.t.pool, tmalloc(x->f.t.pool, 2 * MiB, x->cs));
    x->out = tmalloc(x->f.t.pool, 100 * KiB, x->cs);
    x->g = tcapture_end(&x->f.t, x->cs);
    x->ck = tcheckpoint_take(x->gp);
}

static void gfx_close(gfx_t *x)
{
    vpmm_checkpoint_destroy(x->ck);
    if (x->out != NULL)
        tfree(x->f.t.pool, x->out);
    assert_int_equal(vpmm_graph_destroy(x->f.t.pool, x->g), VPMM_SUCCESS);
    assert_int_equal(vpmm_graph_pool_release(x->gp), VPMM_SUCCESS);
    fx_close(&x->f);
}

/* ---- NULL arguments, one row per function (or family) ---------------------------------------- */

static void test_null_config_init(void **state)
{
    (void)state;
    EXPECT(vpmm_config_init(NULL), VPMM_ERROR_INVALID_ARGUMENT, "vpmm_config_init: config is NULL");
}

static void test_null_pool_create(void **state)
{
    vpmm_config_t c;
    (void)state;
    vpmm_config_init(&c);
    c.backend = (vpmm_backend_t)7; /* even a bad config: the NULL out is reported first */
    EXPECT(vpmm_pool_create(&c, NULL), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_pool_create: out_pool is NULL");
    EXPECT(vpmm_pool_create(NULL, NULL), VPMM_ERROR_INVALID_ARGUMENT, "out_pool is NULL");
}

static void test_null_pool_destroy(void **state)
{
    (void)state;
    EXPECT(vpmm_pool_destroy(NULL), VPMM_ERROR_INVALID_ARGUMENT, "vpmm_pool_destroy: pool is NULL");
}

static void test_null_malloc(void **state)
{
    fx_t f;
    tsnap_t before;
    void *p = (void *)1;
    (void)state;
    fx_open(&f, &small_va);
    before = tsnap(f.t.pool);
    EXPECT(vpmm_malloc(NULL, 64, NULL, &p), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_malloc: pool is NULL");
    assert_null(p); /* *out_ptr is NULL on every error */
    EXPECT(vpmm_malloc(f.t.pool, 64, f.s, NULL), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_malloc: out_ptr is NULL");
    EXPECT(vpmm_malloc(f.t.pool, 0, NULL, NULL), VPMM_ERROR_INVALID_ARGUMENT, "out_ptr is NULL");
    assert_unchanged_and_works(&f.t, &before);
    fx_close(&f);
}

static void test_null_free_pool(void **state)
{
    fx_t f;
    tsnap_t before;
    (void)state;
    fx_open(&f, &small_va);
    before = tsnap(f.t.pool);
    EXPECT(vpmm_free(NULL, f.big), VPMM_ERROR_INVALID_ARGUMENT, "vpmm_free: pool is NULL");
    EXPECT(vpmm_free(NULL, NULL), VPMM_ERROR_INVALID_ARGUMENT, "vpmm_free: pool is NULL");
    assert_unchanged_and_works(&f.t, &before); /* f.big is still live: fx_close frees it */
    fx_close(&f);
}

static void test_free_null_pointer(void **state)
{
    fx_t f;
    tsnap_t before;
    (void)state;
    fx_open(&f, &small_va);
    before = tsnap(f.t.pool);
    EXPECT(vpmm_free(f.t.pool, NULL), VPMM_SUCCESS, NULL); /* free(3), cudaFree(0) */
    assert_unchanged_and_works(&f.t, &before);             /* the frees counter did not move */
    fx_close(&f);
}

static void test_null_stream_release(void **state)
{
    fx_t f;
    tsnap_t before;
    (void)state;
    fx_open(&f, &small_va);
    before = tsnap(f.t.pool);
    EXPECT(vpmm_stream_release(NULL, f.s), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_stream_release: pool is NULL");
    assert_unchanged_and_works(&f.t, &before);
    fx_close(&f);
}

static void test_null_trim(void **state)
{
    size_t released = 12345;
    (void)state;
    EXPECT(vpmm_trim(NULL, 0, &released), VPMM_ERROR_INVALID_ARGUMENT, "vpmm_trim: pool is NULL");
    assert_int_equal(released, 12345); /* untouched */
    EXPECT(vpmm_trim(NULL, 0, NULL), VPMM_ERROR_INVALID_ARGUMENT, "vpmm_trim: pool is NULL");
}

static void test_null_stats(void **state)
{
    fx_t f;
    tsnap_t before;
    vpmm_stats_t s, sentinel;
    (void)state;
    fx_open(&f, &small_va);
    before = tsnap(f.t.pool);
    memset(&s, 0x5a, sizeof s);
    sentinel = s;
    EXPECT(vpmm_get_stats(NULL, &s), VPMM_ERROR_INVALID_ARGUMENT, "vpmm_get_stats: pool is NULL");
    assert_memory_equal(&s, &sentinel, sizeof s); /* untouched */
    EXPECT(vpmm_get_stats(f.t.pool, NULL), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_get_stats: out_stats is NULL");
    EXPECT(vpmm_reset_peak_stats(NULL), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_reset_peak_stats: pool is NULL");
    assert_unchanged_and_works(&f.t, &before);
    fx_close(&f);
}

static int count_visit(const vpmm_region_info_t *r, void *user)
{
    (void)r;
    ++*(size_t *)user;
    return 0;
}

static void test_null_walk_dump_check(void **state)
{
    fx_t f;
    tsnap_t before;
    size_t visited = 0;
    (void)state;
    fx_open(&f, &small_va);
    before = tsnap(f.t.pool);
    EXPECT(vpmm_pool_walk(NULL, count_visit, &visited), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_pool_walk: pool is NULL");
    assert_int_equal(visited, 0);
    EXPECT(vpmm_pool_walk(f.t.pool, NULL, NULL), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_pool_walk: visit is NULL");
    EXPECT(vpmm_pool_dump(NULL, stdout), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_pool_dump: pool is NULL");
    EXPECT(vpmm_pool_dump(f.t.pool, NULL), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_pool_dump: out is NULL");
    /* vpmm_pool_check returns a count, not a status: a NULL pool is one violation. */
    poison();
    assert_int_equal(vpmm_pool_check(NULL, NULL), 1);
    assert_int_equal(vpmm_pool_check(NULL, stderr), 1);
    assert_unchanged_and_works(&f.t, &before);
    fx_close(&f);
}

static void test_null_oom_report(void **state)
{
    fx_t f;
    tsnap_t before;
    char buf[16] = "untouched";
    (void)state;
    fx_open(&f, &small_va);
    before = tsnap(f.t.pool);
    EXPECT(vpmm_pool_oom_report(NULL, buf, sizeof buf), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_pool_oom_report: pool is NULL");
    assert_string_equal(buf, "untouched");
    EXPECT(vpmm_pool_oom_report(f.t.pool, NULL, 16), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_pool_oom_report: buf is NULL");
    /* len 0 asks for nothing: NULL is fine then, and a buffer is not written. */
    EXPECT(vpmm_pool_oom_report(f.t.pool, NULL, 0), VPMM_SUCCESS, NULL);
    EXPECT(vpmm_pool_oom_report(f.t.pool, buf, 0), VPMM_SUCCESS, NULL);
    assert_string_equal(buf, "untouched");
    assert_unchanged_and_works(&f.t, &before);
    fx_close(&f);
}

static void test_null_last_driver_error(void **state)
{
    fx_t f;
    tsnap_t before;
    int code = 7;
    const char *call = "untouched";
    (void)state;
    fx_open(&f, &small_va);
    before = tsnap(f.t.pool);
    EXPECT(vpmm_pool_last_driver_error(NULL, &code, &call), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_pool_last_driver_error: NULL argument");
    EXPECT(vpmm_pool_last_driver_error(f.t.pool, NULL, &call), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_pool_last_driver_error: NULL argument");
    EXPECT(vpmm_pool_last_driver_error(f.t.pool, &code, NULL), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_pool_last_driver_error: NULL argument");
    assert_int_equal(code, 7);
    assert_string_equal(call, "untouched");
    poison();
    assert_null(vpmm_pool_backend_name(NULL)); /* a pointer result: NULL */
    assert_unchanged_and_works(&f.t, &before);
    fx_close(&f);
}

static void test_null_graph_pool_calls(void **state)
{
    gfx_t x;
    tsnap_t before;
    vpmm_graph_pool_stats_t gs, sentinel;
    (void)state;
    gfx_open(&x);
    before = tsnap(x.f.t.pool);
    memset(&gs, 0x5a, sizeof gs);
    sentinel = gs;
    EXPECT(vpmm_graph_pool_create(NULL, NULL), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_graph_pool_create: pool is NULL");
    EXPECT(vpmm_graph_pool_create(x.f.t.pool, NULL), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_graph_pool_create: out_graph_pool is NULL");
    EXPECT(vpmm_graph_pool_retain(NULL), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_graph_pool_retain: graph_pool is NULL");
    EXPECT(vpmm_graph_pool_release(NULL), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_graph_pool_release: graph_pool is NULL");
    EXPECT(vpmm_graph_pool_stats(NULL, &gs), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_graph_pool_stats: graph_pool is NULL");
    assert_memory_equal(&gs, &sentinel, sizeof gs);
    EXPECT(vpmm_graph_pool_stats(x.gp, NULL), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_graph_pool_stats: out_stats is NULL");
    EXPECT(vpmm_graph_pool_reset_peak_stats(NULL), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_graph_pool_reset_peak_stats: graph_pool is NULL");
    assert_unchanged_and_works(&x.f.t, &before);
    gfx_close(&x);
}

static void test_null_capture_calls(void **state)
{
    gfx_t x;
    tsnap_t before;
    uint64_t id;
    (void)state;
    gfx_open(&x);
    before = tsnap(x.f.t.pool);
    EXPECT(vpmm_capture_begin(NULL, x.gp, x.cs, VPMM_STREAM_CAPTURE_GLOBAL),
           VPMM_ERROR_INVALID_ARGUMENT, "vpmm_capture_begin: pool is NULL");
    assert_int_equal(tcapture_status(&x.f.t, x.cs, NULL), VPMM_CAPTURE_NONE);
    EXPECT(vpmm_capture_end(NULL, x.cs, NULL), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_capture_end: pool is NULL");
    EXPECT(vpmm_capture_register(NULL, x.gp, x.cs), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_capture_register: pool is NULL");
    EXPECT(vpmm_capture_graph_pool(NULL, x.cs, NULL), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_capture_graph_pool: pool is NULL");
    EXPECT(vpmm_graph_destroy(NULL, x.g), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_graph_destroy: pool is NULL");
    EXPECT(vpmm_graph_destroy(x.f.t.pool, NULL), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_graph_destroy: graph is NULL");
    /* NULL out pointers and graph pools, on a stream that is being captured. */
    assert_int_equal(vpmm_host_begin_capture(x.f.t.host, x.f.s, &id), VPMM_DRV_OK);
    before = tsnap(x.f.t.pool);
    EXPECT(vpmm_capture_end(x.f.t.pool, x.f.s, NULL), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_capture_end: out_graph is NULL");
    EXPECT(vpmm_capture_register(x.f.t.pool, NULL, x.f.s), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_capture_register: graph_pool is NULL");
    EXPECT(vpmm_capture_graph_pool(x.f.t.pool, x.f.s, NULL), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_capture_graph_pool: out_graph_pool is NULL");
    assert_int_equal(tcapture_status(&x.f.t, x.f.s, NULL), VPMM_CAPTURE_ACTIVE); /* it goes on */
    {
        tsnap_t now = tsnap(x.f.t.pool);
        assert_snap_equal(&before, &now); /* no graph pool was made for the capture */
    }
    assert_int_equal(vpmm_host_end_capture(x.f.t.host, x.f.s), VPMM_DRV_OK);
    assert_unchanged_and_works(&x.f.t, &before);
    gfx_close(&x);
}

static void test_null_checkpoint_calls(void **state)
{
    gfx_t x;
    tsnap_t before;
    vpmm_checkpoint_info_t info, sentinel;
    vpmm_checkpoint_alloc_t al[2];
    (void)state;
    gfx_open(&x);
    before = tsnap(x.f.t.pool);
    EXPECT(vpmm_checkpoint_take(NULL, NULL), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_checkpoint_take: graph_pool is NULL");
    EXPECT(vpmm_checkpoint_take(x.gp, NULL), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_checkpoint_take: out_checkpoint is NULL");
    EXPECT(vpmm_checkpoint_reapply(NULL, x.ck, NULL, 0), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_checkpoint_reapply: graph_pool is NULL");
    EXPECT(vpmm_checkpoint_reapply(x.gp, NULL, NULL, 0), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_checkpoint_reapply: checkpoint is NULL");
    EXPECT(vpmm_checkpoint_reapply(x.gp, x.ck, NULL, 1), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_checkpoint_reapply: dead is NULL");
    memset(&info, 0x5a, sizeof info);
    sentinel = info;
    EXPECT(vpmm_checkpoint_info(NULL, &info), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_checkpoint_info: checkpoint is NULL");
    assert_memory_equal(&info, &sentinel, sizeof info);
    EXPECT(vpmm_checkpoint_info(x.ck, NULL), VPMM_ERROR_INVALID_ARGUMENT,
           "vpmm_checkpoint_info: out_info is NULL");
    /* vpmm_checkpoint_allocs returns a count: 0 for no checkpoint; a NULL array only sizes. */
    poison();
    memset(al, 0x5a, sizeof al);
    assert_int_equal(vpmm_checkpoint_allocs(NULL, al, 2), 0);
    assert_int_equal(vpmm_checkpoint_allocs(x.ck, NULL, 2), 1);
    vpmm_checkpoint_destroy(NULL); /* ignored, like free(NULL) */
    assert_string_equal(vpmm_last_error(), POISON);
    assert_unchanged_and_works(&x.f.t, &before);
    gfx_close(&x);
}

static void test_unknown_status(void **state)
{
    (void)state;
    assert_string_equal(vpmm_strerror((vpmm_status_t)99), "unknown status");
    assert_string_equal(vpmm_status_name((vpmm_status_t)99), "VPMM_STATUS_UNKNOWN");
    assert_string_equal(vpmm_status_name((vpmm_status_t)-1), "VPMM_STATUS_UNKNOWN");
}

/* ---- sizes ----------------------------------------------------------------------------------- */

static void test_malloc_size_zero(void **state)
{
    gfx_t x;
    tsnap_t before;
    void *p = (void *)1;
    (void)state;
    gfx_open(&x);
    before = tsnap(x.f.t.pool);
    EXPECT(vpmm_malloc(x.f.t.pool, 0, x.f.s, &p), VPMM_ERROR_INVALID_SIZE,
           "vpmm_malloc: size is 0");
    assert_null(p);
    /* On a stream that is being captured too: refused before routing, the graph pool untouched
     * and the capture still valid. */
    tcapture_begin(&x.f.t, x.gp, x.cs);
    before = tsnap(x.f.t.pool);
    p = (void *)1;
    EXPECT(vpmm_malloc(x.f.t.pool, 0, x.cs, &p), VPMM_ERROR_INVALID_SIZE, "size is 0");
    assert_null(p);
    assert_int_equal(tcapture_status(&x.f.t, x.cs, NULL), VPMM_CAPTURE_ACTIVE);
    assert_unchanged_and_works(&x.f.t, &before);
    assert_int_equal(vpmm_graph_destroy(x.f.t.pool, tcapture_end(&x.f.t, x.cs)), VPMM_SUCCESS);
    gfx_close(&x);
}

static void test_malloc_size_max(void **state)
{
    gfx_t x;
    tsnap_t before;
    void *p = (void *)1;
    (void)state;
    gfx_open(&x);
    before = tsnap(x.f.t.pool);
    EXPECT(vpmm_malloc(x.f.t.pool, SIZE_MAX, x.f.s, &p), VPMM_ERROR_SIZE_TOO_LARGE,
           "bytes exceed the VA chunk size");
    assert_null(p);
    /* Sizes whose rounding up to VPMM_ALIGNMENT overflows. */
    p = (void *)1;
    EXPECT(vpmm_malloc(x.f.t.pool, SIZE_MAX - 100, NULL, &p), VPMM_ERROR_SIZE_TOO_LARGE,
           "exceed the VA chunk size");
    assert_null(p);
    EXPECT(vpmm_malloc(x.f.t.pool, SIZE_MAX - VPMM_ALIGNMENT + 2, NULL, &p),
           VPMM_ERROR_SIZE_TOO_LARGE, "exceed the VA chunk size");
    tcapture_begin(&x.f.t, x.gp, x.cs);
    before = tsnap(x.f.t.pool);
    p = (void *)1;
    EXPECT(vpmm_malloc(x.f.t.pool, SIZE_MAX, x.cs, &p), VPMM_ERROR_SIZE_TOO_LARGE,
           "exceed the VA chunk size");
    assert_null(p);
    assert_int_equal(tcapture_status(&x.f.t, x.cs, NULL), VPMM_CAPTURE_ACTIVE);
    assert_unchanged_and_works(&x.f.t, &before);
    assert_int_equal(vpmm_graph_destroy(x.f.t.pool, tcapture_end(&x.f.t, x.cs)), VPMM_SUCCESS);
    gfx_close(&x);
}

static void test_malloc_above_va_chunk(void **state)
{
    fx_t f;
    vpmm_graph_pool_t *gp;
    vpmm_stream_t cs;
    tsnap_t before;
    void *p = (void *)1;
    (void)state;
    fx_open(&f, &(tpool_params_t){ .va_size = 256 * MiB });
    cs = vpmm_host_stream_create(f.t.host);
    gp = tgp_create(&f.t);
    before = tsnap(f.t.pool);
    EXPECT(vpmm_malloc(f.t.pool, 256 * MiB + 1, f.s, &p), VPMM_ERROR_SIZE_TOO_LARGE,
           "268435457 bytes exceed the VA chunk size (268435456)");
    assert_null(p);
    EXPECT(vpmm_malloc(f.t.pool, 1 * GiB, NULL, &p), VPMM_ERROR_SIZE_TOO_LARGE,
           "exceed the VA chunk size");
    /* A graph pool may reserve a chunk larger than its usual one for one large request, but the
     * limit is the pool's VA chunk size all the same. */
    tcapture_begin(&f.t, gp, cs);
    before = tsnap(f.t.pool);
    p = (void *)1;
    EXPECT(vpmm_malloc(f.t.pool, 256 * MiB + 1, cs, &p), VPMM_ERROR_SIZE_TOO_LARGE,
           "exceed the VA chunk size");
    assert_null(p);
    assert_int_equal(tgp_stats(gp).mallocs, 0);
    assert_unchanged_and_works(&f.t, &before);
    assert_int_equal(vpmm_graph_destroy(f.t.pool, tcapture_end(&f.t, cs)), VPMM_SUCCESS);
    /* Exactly one chunk is fine. */
    tfree(f.t.pool, tmalloc(f.t.pool, 256 * MiB, NULL));
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    fx_close(&f);
}

/* ---- bad pointers -------------------------------------------------------------------------- */

static void test_free_double(void **state)
{
    gfx_t x;
    tsnap_t before;
    void *a, *b, *priv;
    (void)state;
    gfx_open(&x);
    a = tmalloc(x.f.t.pool, 5 * MiB, x.f.s);
    b = tmalloc(x.f.t.pool, 4096, x.f.s);
    tfree(x.f.t.pool, a); /* shared blocks freed on s (cached or coalesced) */
    tfree(x.f.t.pool, b);
    tcapture_begin(&x.f.t, x.gp, x.cs);
    priv = tmalloc(x.f.t.pool, 8192, x.cs);
    tfree(x.f.t.pool, priv); /* a graph pool's, pending until the capture ends */
    before = tsnap(x.f.t.pool);
    EXPECT(vpmm_free(x.f.t.pool, a), VPMM_ERROR_DOUBLE_FREE, "is not allocated (double free?)");
    EXPECT(vpmm_free(x.f.t.pool, b), VPMM_ERROR_DOUBLE_FREE, "double free");
    EXPECT(vpmm_free(x.f.t.pool, priv), VPMM_ERROR_DOUBLE_FREE, "double free");
    assert_unchanged_and_works(&x.f.t, &before);
    assert_int_equal(vpmm_graph_destroy(x.f.t.pool, tcapture_end(&x.f.t, x.cs)), VPMM_SUCCESS);
    gfx_close(&x);
}

static void test_free_interior(void **state)
{
    gfx_t x;
    tsnap_t before;
    (void)state;
    gfx_open(&x);
    before = tsnap(x.f.t.pool);
    EXPECT(vpmm_free(x.f.t.pool, (char *)x.f.big + 256), VPMM_ERROR_INTERIOR_POINTER,
           "is 256 bytes into the allocation at");
    EXPECT(vpmm_free(x.f.t.pool, (char *)x.f.big + 2 * MiB + 1), VPMM_ERROR_INTERIOR_POINTER,
           "is 2097153 bytes into");
    EXPECT(vpmm_free(x.f.t.pool, (char *)x.f.small + 999), VPMM_ERROR_INTERIOR_POINTER,
           "999 bytes into");
    EXPECT(vpmm_free(x.f.t.pool, (char *)x.out + 4096), VPMM_ERROR_INTERIOR_POINTER,
           "4096 bytes into"); /* a graph pool's allocation */
    assert_unchanged_and_works(&x.f.t, &before);
    gfx_close(&x);
}

static void test_free_foreign_stack(void **state)
{
    fx_t f;
    tsnap_t before;
    int on_stack = 0;
    (void)state;
    fx_open(&f, &small_va);
    before = tsnap(f.t.pool);
    EXPECT(vpmm_free(f.t.pool, &on_stack), VPMM_ERROR_FOREIGN_POINTER, "is not inside this pool");
    EXPECT(vpmm_free(f.t.pool, (void *)1), VPMM_ERROR_FOREIGN_POINTER, "not inside this pool");
    EXPECT(vpmm_free(f.t.pool, (void *)(uintptr_t)-4096), VPMM_ERROR_FOREIGN_POINTER,
           "not inside this pool");
    EXPECT(vpmm_free(f.t.pool, f.t.pool), VPMM_ERROR_FOREIGN_POINTER, "not inside this pool");
    assert_unchanged_and_works(&f.t, &before);
    fx_close(&f);
}

static void test_free_foreign_other_pool(void **state)
{
    gfx_t x;
    tpool_t other;
    vpmm_graph_pool_t *ogp;
    vpmm_stream_t os;
    vpmm_graph_t og;
    tsnap_t before, other_before, other_after;
    void *theirs, *their_priv;
    (void)state;
    gfx_open(&x);
    tpool_open(&other, &small_va);
    os = vpmm_host_stream_create(other.host);
    ogp = tgp_create(&other);
    theirs = tmalloc(other.pool, 4096, NULL);
    tcapture_begin(&other, ogp, os);
    their_priv = tmalloc(other.pool, 4096, os);
    og = tcapture_end(&other, os);
    before = tsnap(x.f.t.pool);
    other_before = tsnap(other.pool);
    EXPECT(vpmm_free(x.f.t.pool, theirs), VPMM_ERROR_FOREIGN_POINTER, "is not inside this pool");
    EXPECT(vpmm_free(x.f.t.pool, their_priv), VPMM_ERROR_FOREIGN_POINTER, "not inside this pool");
    EXPECT(vpmm_free(other.pool, x.out), VPMM_ERROR_FOREIGN_POINTER, "not inside this pool");
    assert_unchanged_and_works(&x.f.t, &before);
    other_after = tsnap(other.pool);
    assert_snap_equal(&other_before, &other_after); /* the owner is untouched too */
    tfree(other.pool, theirs);
    tfree(other.pool, their_priv);
    assert_int_equal(vpmm_graph_destroy(other.pool, og), VPMM_SUCCESS);
    assert_int_equal(vpmm_graph_pool_release(ogp), VPMM_SUCCESS);
    tpool_close(&other);
    gfx_close(&x);
}

static void test_free_never_allocated(void **state)
{
    fx_t f;
    tsnap_t before;
    vpmm_region_info_t r;
    (void)state;
    fx_open(&f, &small_va);
    /* 1 GiB past big: reserved VA of the pool's chunk, never mapped (a hole). */
    r = tregion_of(f.t.pool, (char *)f.big + 1 * GiB);
    assert_int_equal(r.state, VPMM_REGION_HOLE);
    before = tsnap(f.t.pool);
    EXPECT(vpmm_free(f.t.pool, (char *)f.big + 1 * GiB), VPMM_ERROR_DOUBLE_FREE,
           "is not allocated (double free?)");
    assert_unchanged_and_works(&f.t, &before);
    fx_close(&f);
}

static void test_free_after_reapply(void **state)
{
    gfx_t x;
    tsnap_t before;
    void *later;
    vpmm_graph_t g2;
    (void)state;
    gfx_open(&x);
    tcapture_begin(&x.f.t, x.gp, x.cs);
    later = tmalloc(x.f.t.pool, 300 * KiB, x.cs); /* made after the checkpoint */
    g2 = tcapture_end(&x.f.t, x.cs);
    assert_int_equal(vpmm_checkpoint_reapply(x.gp, x.ck, NULL, 0), VPMM_SUCCESS);
    before = tsnap(x.f.t.pool);
    EXPECT(vpmm_free(x.f.t.pool, later), VPMM_ERROR_DOUBLE_FREE, "double free");
    assert_unchanged_and_works(&x.f.t, &before);
    assert_int_equal(vpmm_graph_destroy(x.f.t.pool, g2), VPMM_SUCCESS);
    gfx_close(&x);
}

/* ---- frees during someone else's capture ----------------------------------------------------- */

/* A graph pool's allocation is freed while ANOTHER stream captures into ANOTHER graph pool: the
 * free is stream-ordered on its own allocation stream (pending until that stream's next marker),
 * stays in its graph pool, and the capture neither sees it nor is disturbed. */
static void test_free_private_during_other_capture(void **state)
{
    gfx_t x;
    vpmm_graph_pool_t *gp2;
    vpmm_stream_t s2;
    vpmm_graph_pool_stats_t g1_before, g2_before, g1_after, g2_after;
    vpmm_region_info_t r;
    vpmm_stats_t before, after;
    uint64_t forbidden, calls, id, id_after;
    void *y;
    (void)state;
    gfx_open(&x);
    s2 = vpmm_host_stream_create(x.f.t.host);
    gp2 = tgp_create(&x.f.t);
    tcapture_begin(&x.f.t, gp2, s2);
    tcapture_status(&x.f.t, s2, &id);
    g1_before = tgp_stats(x.gp);
    g2_before = tgp_stats(gp2);
    before = tstats(x.f.t.pool);
    forbidden = tcapture_forbidden_calls(&x.f.t);
    calls = vpmm_fault_total_calls(x.f.t.fault);
    EXPECT(vpmm_free(x.f.t.pool, x.out), VPMM_SUCCESS, NULL);
    /* No driver call: no capture into its graph pool is in progress. */
    assert_int_equal(vpmm_fault_total_calls(x.f.t.fault), calls);
    CHECK_POOL(x.f.t.pool);
    r = tregion_of(x.f.t.pool, x.out);
    assert_int_equal(r.state, VPMM_REGION_FREE);
    assert_int_equal(r.pool, g1_before.id); /* still its graph pool's */
    assert_false(r.ready);                  /* pending on its allocation stream ... */
    assert_ptr_equal(r.stream, x.cs);       /* ... cs, not the capturing s2 */
    g1_after = tgp_stats(x.gp);
    g2_after = tgp_stats(gp2);
    assert_int_equal(g1_after.frees, g1_before.frees + 1);
    assert_int_equal(g1_after.live_allocs, g1_before.live_allocs - 1);
    assert_memory_equal(&g2_after, &g2_before, sizeof g2_after);
    after = tstats(x.f.t.pool);
    assert_int_equal(after.frees, before.frees + 1);
    assert_int_equal(after.live_bytes, before.live_bytes - 100 * KiB);
    /* The capture goes on, undisturbed: no event, wait or sync was made, and its mallocs are
     * served by its own graph pool, never from the memory just freed. */
    assert_int_equal(tcapture_forbidden_calls(&x.f.t), forbidden);
    assert_int_equal(tcapture_status(&x.f.t, s2, &id_after), VPMM_CAPTURE_ACTIVE);
    assert_int_equal(id_after, id);
    y = tmalloc(x.f.t.pool, 100 * KiB, s2);
    assert_ptr_not_equal(y, x.out);
    assert_int_equal(tregion_of(x.f.t.pool, y).pool, g2_after.id);
    tfree(x.f.t.pool, y);
    assert_int_equal(vpmm_graph_destroy(x.f.t.pool, tcapture_end(&x.f.t, s2)), VPMM_SUCCESS);
    assert_int_equal(vpmm_graph_pool_release(gp2), VPMM_SUCCESS);
    tfree(x.f.t.pool, tmalloc(x.f.t.pool, 4096, NULL));
    x.out = NULL;
    gfx_close(&x);
}

/* A graph pool's allocation freed while its own allocation stream is capturing into ANOTHER graph
 * pool: the free is not part of that capture (it is not of its graph pool), so it is an ordinary
 * stream-ordered free, pending until the stream's next marker; no marker can be recorded while
 * the stream is captured, and that capture does not reuse the memory. */
static void test_free_private_while_its_stream_captures_elsewhere(void **state)
{
    gfx_t x;
    vpmm_graph_pool_t *gp2;
    vpmm_region_info_t r;
    uint64_t forbidden, calls;
    void *y;
    (void)state;
    gfx_open(&x);
    gp2 = tgp_create(&x.f.t);
    tcapture_begin(&x.f.t, gp2, x.cs); /* x.out was allocated on cs, by G1's capture into x.gp */
    forbidden = tcapture_forbidden_calls(&x.f.t);
    calls = vpmm_fault_total_calls(x.f.t.fault);
    EXPECT(vpmm_free(x.f.t.pool, x.out), VPMM_SUCCESS, NULL);
    assert_int_equal(vpmm_fault_total_calls(x.f.t.fault), calls); /* no driver call */
    CHECK_POOL(x.f.t.pool);
    r = tregion_of(x.f.t.pool, x.out);
    assert_int_equal(r.state, VPMM_REGION_FREE);
    assert_int_equal(r.pool, tgp_stats(x.gp).id);
    assert_false(r.ready);
    assert_ptr_equal(r.stream, x.cs);
    y = tmalloc(x.f.t.pool, 100 * KiB, x.cs); /* gp2's, not x.out */
    assert_ptr_not_equal(y, x.out);
    assert_int_equal(tregion_of(x.f.t.pool, y).pool, tgp_stats(gp2).id);
    assert_int_equal(tcapture_forbidden_calls(&x.f.t), forbidden);
    assert_int_equal(tcapture_status(&x.f.t, x.cs, NULL), VPMM_CAPTURE_ACTIVE);
    tfree(x.f.t.pool, y);
    assert_int_equal(vpmm_graph_destroy(x.f.t.pool, tcapture_end(&x.f.t, x.cs)), VPMM_SUCCESS);
    assert_int_equal(vpmm_graph_pool_release(gp2), VPMM_SUCCESS);
    x.out = NULL;
    gfx_close(&x);
}

/* The same, while the other stream captures into the SAME graph pool: still pending on the
 * allocation stream (only frees made inside a capture of the pool are capture-pending), so the
 * capture on the other stream does not reuse it. */
static void test_free_private_during_capture_into_its_pool(void **state)
{
    gfx_t x;
    vpmm_stream_t s2;
    vpmm_region_info_t r;
    uint64_t forbidden, calls, queries;
    void *y;
    (void)state;
    gfx_open(&x);
    s2 = vpmm_host_stream_create(x.f.t.host);
    tcapture_begin(&x.f.t, x.gp, s2);
    forbidden = tcapture_forbidden_calls(&x.f.t);
    calls = vpmm_fault_total_calls(x.f.t.fault);
    queries = vpmm_fault_calls(x.f.t.fault, VPMM_DRV_CAPTURE_INFO);
    EXPECT(vpmm_free(x.f.t.pool, x.out), VPMM_SUCCESS, NULL);
    /* One driver call: is cs capturing into this graph pool? (No: then the marker rule.) */
    assert_int_equal(vpmm_fault_total_calls(x.f.t.fault) - calls, 1);
    assert_int_equal(vpmm_fault_calls(x.f.t.fault, VPMM_DRV_CAPTURE_INFO) - queries, 1);
    CHECK_POOL(x.f.t.pool);
    r = tregion_of(x.f.t.pool, x.out);
    assert_int_equal(r.state, VPMM_REGION_FREE);
    assert_int_equal(r.pool, tgp_stats(x.gp).id);
    assert_false(r.ready);
    assert_ptr_equal(r.stream, x.cs);
    y = tmalloc(x.f.t.pool, 100 * KiB, s2);
    assert_ptr_not_equal(y, x.out);
    assert_int_equal(tcapture_forbidden_calls(&x.f.t), forbidden);
    assert_int_equal(tcapture_status(&x.f.t, s2, NULL), VPMM_CAPTURE_ACTIVE);
    tfree(x.f.t.pool, y);
    assert_int_equal(vpmm_graph_destroy(x.f.t.pool, tcapture_end(&x.f.t, s2)), VPMM_SUCCESS);
    /* Still pending on cs after that capture: it waits for cs's marker, not for captures. */
    r = tregion_of(x.f.t.pool, x.out);
    assert_false(r.ready);
    assert_ptr_equal(r.stream, x.cs);
    x.out = NULL;
    gfx_close(&x);
}

/* A shared allocation freed while its stream is being captured by someone else (a capture begun
 * outside vpmm, e.g. torch.cuda.graph): it is stream-ordered on that stream like any free — the
 * memory stays in the shared pool, pending on the stream; the capture's own mallocs come from
 * its graph pool, never from it; no marker is recorded on the stream while it is captured, so
 * other streams cannot take it during the capture; after the capture the stream reuses it at
 * once. (A graph that used it must not be replayed after that: it was freed.) */
static void test_free_shared_during_capture_of_its_stream(void **state)
{
    fx_t f;
    vpmm_stream_t o;
    vpmm_region_info_t r;
    vpmm_stats_t before, after;
    uint64_t id, records, calls;
    void *x, *y, *z, *w;
    (void)state;
    fx_open(&f, &small_va);
    o = vpmm_host_stream_create(f.t.host);
    x = tmalloc(f.t.pool, 5 * MiB, f.s);
    vpmm_host_enqueue(f.t.host, f.s); /* a kernel using x, still running */
    assert_int_equal(vpmm_host_begin_capture(f.t.host, f.s, &id), VPMM_DRV_OK);
    before = tstats(f.t.pool);
    records = vpmm_fault_calls(f.t.fault, VPMM_DRV_EVENT_RECORD);
    calls = vpmm_fault_total_calls(f.t.fault);
    EXPECT(vpmm_free(f.t.pool, x), VPMM_SUCCESS, NULL);
    assert_int_equal(vpmm_fault_total_calls(f.t.fault), calls); /* no driver call */
    CHECK_POOL(f.t.pool);
    after = tstats(f.t.pool);
    assert_int_equal(after.frees, before.frees + 1);
    assert_int_equal(after.graph_pools, before.graph_pools); /* nothing private happened */
    r = tregion_of(f.t.pool, x);
    assert_int_equal(r.state, VPMM_REGION_FREE);
    assert_int_equal(r.pool, 0);
    assert_false(r.ready);
    assert_ptr_equal(r.stream, f.s);
    /* The capture's malloc of the same size comes from its graph pool. */
    y = tmalloc(f.t.pool, 5 * MiB, f.s);
    assert_ptr_not_equal(y, x);
    assert_true(tregion_of(f.t.pool, y).pool != 0);
    /* Another stream's malloc (a slow path: it polls and marks streams) does not get it. */
    z = tmalloc(f.t.pool, 5 * MiB, o);
    assert_ptr_not_equal(z, x);
    assert_int_equal(vpmm_fault_calls(f.t.fault, VPMM_DRV_EVENT_RECORD), records);
    assert_int_equal(tcapture_status(&f.t, f.s, NULL), VPMM_CAPTURE_ACTIVE);
    r = tregion_of(f.t.pool, x);
    assert_false(r.ready);
    assert_ptr_equal(r.stream, f.s);
    tfree(f.t.pool, y);
    assert_int_equal(vpmm_host_end_capture(f.t.host, f.s), VPMM_DRV_OK);
    /* After the capture, its stream reuses it at once (stream order). */
    w = tmalloc(f.t.pool, 5 * MiB, f.s);
    assert_ptr_equal(w, x);
    tfree(f.t.pool, w);
    tfree(f.t.pool, z);
    fx_close(&f);
}

/* ---- captures ------------------------------------------------------------------------------ */

static void test_capture_begin_legacy_stream(void **state)
{
    gfx_t x;
    tsnap_t before;
    (void)state;
    gfx_open(&x);
    before = tsnap(x.f.t.pool);
    EXPECT(vpmm_capture_begin(x.f.t.pool, x.gp, NULL, VPMM_STREAM_CAPTURE_GLOBAL),
           VPMM_ERROR_INVALID_ARGUMENT, "the legacy default stream cannot be captured");
    EXPECT(vpmm_capture_begin(x.f.t.pool, NULL, (vpmm_stream_t)1, VPMM_STREAM_CAPTURE_RELAXED),
           VPMM_ERROR_INVALID_ARGUMENT, "legacy default stream");
    assert_int_equal(tgp_stats(x.gp).captures, 0);
    assert_unchanged_and_works(&x.f.t, &before);
    gfx_close(&x);
}

/* Stream 0 of a program built with per-thread default streams is the calling thread's own
 * stream: it can be captured (not refused as the legacy stream), and its allocations come from
 * the graph pool. */
static void test_capture_stream_zero_per_thread(void **state)
{
    tpool_t t;
    vpmm_graph_pool_t *gp;
    vpmm_graph_t g;
    void *p;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .va_size = 4 * GiB, .per_thread_default = 1 });
    gp = tgp_create(&t);
    EXPECT(vpmm_capture_begin(t.pool, gp, NULL, VPMM_STREAM_CAPTURE_GLOBAL), VPMM_SUCCESS, NULL);
    assert_int_equal(tgp_stats(gp).captures, 1);
    p = tmalloc(t.pool, 4096, NULL);
    assert_int_equal(tgp_stats(gp).live_allocs, 1);
    /* The same capture, named by its per-thread handle. */
    EXPECT(vpmm_capture_end(t.pool, VPMM_STREAM_PER_THREAD, &g), VPMM_SUCCESS, NULL);
    tfree(t.pool, p);
    assert_int_equal(vpmm_graph_destroy(t.pool, g), VPMM_SUCCESS);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    tpool_close(&t);
}

/* The per-thread handle names the calling thread's own stream: another thread cannot end (or
 * release) a capture of this thread's per-thread stream through it — its own is not capturing. */
typedef struct other_thread {
    tpool_t *t;
    vpmm_status_t end_st, release_st;
    vpmm_graph_t g;
    char err[256];
} other_thread_t;

static void *end_from_other_thread(void *arg)
{
    other_thread_t *o = arg;
    o->g = (vpmm_graph_t)1;
    o->end_st = vpmm_capture_end(o->t->pool, VPMM_STREAM_PER_THREAD, &o->g);
    snprintf(o->err, sizeof o->err, "%s", vpmm_last_error());
    o->release_st = vpmm_stream_release(o->t->pool, VPMM_STREAM_PER_THREAD);
    return NULL;
}

static void test_capture_end_per_thread_from_other_thread(void **state)
{
    tpool_t t;
    vpmm_graph_pool_t *gp;
    vpmm_graph_t g;
    other_thread_t o;
    pthread_t th;
    tsnap_t before;
    void *p;
    (void)state;
    tpool_open(&t, &small_va);
    gp = tgp_create(&t);
    tcapture_begin(&t, gp, VPMM_STREAM_PER_THREAD);
    p = tmalloc(t.pool, 4096, VPMM_STREAM_PER_THREAD);
    before = tsnap(t.pool);
    o = (other_thread_t){ .t = &t };
    assert_int_equal(pthread_create(&th, NULL, end_from_other_thread, &o), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(o.end_st, VPMM_ERROR_NOT_CAPTURING);
    assert_null(o.g);
    assert_non_null(strstr(o.err, "is not being captured"));
    assert_int_equal(o.release_st, VPMM_SUCCESS); /* its own, unknown stream: a no-op */
    {
        tsnap_t after = tsnap(t.pool);
        assert_snap_equal(&before, &after);
    }
    assert_int_equal(tgp_stats(gp).captures, 1); /* this thread's capture goes on */
    tfree(t.pool, p);
    g = tcapture_end(&t, VPMM_STREAM_PER_THREAD);
    assert_int_equal(vpmm_graph_destroy(t.pool, g), VPMM_SUCCESS);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    tpool_close(&t);
}

static void test_capture_begin_already_capturing(void **state)
{
    gfx_t x;
    vpmm_stream_t ext, joined;
    vpmm_drv_event_t ev;
    tsnap_t before;
    uint64_t id, ext_id, id_after;
    (void)state;
    gfx_open(&x);
    ext = vpmm_host_stream_create(x.f.t.host);
    joined = vpmm_host_stream_create(x.f.t.host);
    tcapture_begin(&x.f.t, x.gp, x.cs); /* by vpmm */
    tcapture_status(&x.f.t, x.cs, &id);
    assert_int_equal(x.f.t.host->event_create(x.f.t.host, &ev), VPMM_DRV_OK);
    assert_int_equal(x.f.t.host->event_record(x.f.t.host, ev, x.cs), VPMM_DRV_OK);
    assert_int_equal(x.f.t.host->stream_wait_event(x.f.t.host, joined, ev), VPMM_DRV_OK);
    /* ext: begun outside vpmm. */
    assert_int_equal(vpmm_host_begin_capture(x.f.t.host, ext, &ext_id), VPMM_DRV_OK);
    before = tsnap(x.f.t.pool);
    EXPECT(vpmm_capture_begin(x.f.t.pool, x.gp, x.cs, VPMM_STREAM_CAPTURE_GLOBAL),
           VPMM_ERROR_STREAM_CAPTURING, "is already being captured");
    EXPECT(vpmm_capture_begin(x.f.t.pool, NULL, joined, VPMM_STREAM_CAPTURE_GLOBAL),
           VPMM_ERROR_STREAM_CAPTURING, "is already being captured");
    EXPECT(vpmm_capture_begin(x.f.t.pool, x.gp, ext, VPMM_STREAM_CAPTURE_GLOBAL),
           VPMM_ERROR_STREAM_CAPTURING, "is already being captured");
    /* Every capture goes on as it was. */
    assert_int_equal(tcapture_status(&x.f.t, x.cs, &id_after), VPMM_CAPTURE_ACTIVE);
    assert_int_equal(id_after, id);
    assert_int_equal(tcapture_status(&x.f.t, joined, &id_after), VPMM_CAPTURE_ACTIVE);
    assert_int_equal(id_after, id);
    assert_int_equal(tcapture_status(&x.f.t, ext, &id_after), VPMM_CAPTURE_ACTIVE);
    assert_int_equal(id_after, ext_id);
    assert_int_equal(tgp_stats(x.gp).captures, 1);
    assert_unchanged_and_works(&x.f.t, &before);
    assert_int_equal(vpmm_host_end_capture(x.f.t.host, ext), VPMM_DRV_OK);
    assert_int_equal(vpmm_graph_destroy(x.f.t.pool, tcapture_end(&x.f.t, x.cs)), VPMM_SUCCESS);
    assert_int_equal(x.f.t.host->event_destroy(x.f.t.host, ev), VPMM_DRV_OK);
    gfx_close(&x);
}

static void test_capture_begin_other_pools_graph_pool(void **state)
{
    gfx_t x;
    tpool_t other;
    vpmm_graph_pool_t *theirs;
    tsnap_t before, other_before, other_after;
    (void)state;
    gfx_open(&x);
    tpool_open(&other, &small_va);
    theirs = tgp_create(&other);
    before = tsnap(x.f.t.pool);
    other_before = tsnap(other.pool);
    EXPECT(vpmm_capture_begin(x.f.t.pool, theirs, x.cs, VPMM_STREAM_CAPTURE_GLOBAL),
           VPMM_ERROR_WRONG_POOL, "vpmm_capture_begin: graph pool g");
    assert_error_mentions("belongs to another pool");
    assert_int_equal(tcapture_status(&x.f.t, x.cs, NULL), VPMM_CAPTURE_NONE); /* not begun */
    assert_int_equal(tgp_stats(theirs).captures, 0);
    assert_unchanged_and_works(&x.f.t, &before);
    other_after = tsnap(other.pool);
    assert_snap_equal(&other_before, &other_after);
    assert_int_equal(vpmm_graph_pool_release(theirs), VPMM_SUCCESS);
    tpool_close(&other);
    gfx_close(&x);
}

static void test_capture_begin_bad_mode(void **state)
{
    gfx_t x;
    tsnap_t before;
    (void)state;
    gfx_open(&x);
    before = tsnap(x.f.t.pool);
    EXPECT(vpmm_capture_begin(x.f.t.pool, x.gp, x.cs, (vpmm_stream_capture_mode_t)3),
           VPMM_ERROR_INVALID_ARGUMENT, "vpmm_capture_begin: unknown capture mode 3");
    EXPECT(vpmm_capture_begin(x.f.t.pool, NULL, x.cs, (vpmm_stream_capture_mode_t)-1),
           VPMM_ERROR_INVALID_ARGUMENT, "unknown capture mode -1");
    assert_int_equal(tcapture_status(&x.f.t, x.cs, NULL), VPMM_CAPTURE_NONE);
    assert_unchanged_and_works(&x.f.t, &before);
    gfx_close(&x);
}

static void test_capture_end_not_capturing(void **state)
{
    gfx_t x;
    tsnap_t before;
    vpmm_graph_t g = (vpmm_graph_t)1;
    (void)state;
    gfx_open(&x);
    before = tsnap(x.f.t.pool);
    EXPECT(vpmm_capture_end(x.f.t.pool, x.cs, &g), VPMM_ERROR_NOT_CAPTURING,
           "vpmm_capture_end: stream");
    assert_error_mentions("is not being captured");
    assert_null(g);
    g = (vpmm_graph_t)1;
    EXPECT(vpmm_capture_end(x.f.t.pool, NULL, &g), VPMM_ERROR_NOT_CAPTURING,
           "is not being captured"); /* the legacy stream never is */
    assert_null(g);
    assert_unchanged_and_works(&x.f.t, &before);
    gfx_close(&x);
}

/* cudaStreamEndCapture on a stream that joined a capture but did not begin it is refused by the
 * driver; vpmm reports the driver's refusal, and the capture goes on. */
static void test_capture_end_joined_stream(void **state)
{
    gfx_t x;
    vpmm_stream_t joined;
    vpmm_drv_event_t ev;
    tsnap_t before;
    vpmm_graph_t g = (vpmm_graph_t)1;
    int code;
    const char *call;
    (void)state;
    gfx_open(&x);
    joined = vpmm_host_stream_create(x.f.t.host);
    tcapture_begin(&x.f.t, x.gp, x.cs);
    assert_int_equal(x.f.t.host->event_create(x.f.t.host, &ev), VPMM_DRV_OK);
    assert_int_equal(x.f.t.host->event_record(x.f.t.host, ev, x.cs), VPMM_DRV_OK);
    assert_int_equal(x.f.t.host->stream_wait_event(x.f.t.host, joined, ev), VPMM_DRV_OK);
    before = tsnap(x.f.t.pool);
    EXPECT(vpmm_capture_end(x.f.t.pool, joined, &g), VPMM_ERROR_DRIVER,
           "cuStreamEndCapture failed (driver error 903)");
    assert_null(g);
    assert_int_equal(vpmm_pool_last_driver_error(x.f.t.pool, &code, &call), VPMM_SUCCESS);
    assert_int_equal(code, 903);
    assert_string_equal(call, "cuStreamEndCapture");
    assert_int_equal(tcapture_status(&x.f.t, x.cs, NULL), VPMM_CAPTURE_ACTIVE);
    assert_int_equal(tcapture_status(&x.f.t, joined, NULL), VPMM_CAPTURE_ACTIVE);
    assert_int_equal(tgp_stats(x.gp).captures, 1);
    assert_unchanged_and_works(&x.f.t, &before);
    assert_int_equal(vpmm_graph_destroy(x.f.t.pool, tcapture_end(&x.f.t, x.cs)), VPMM_SUCCESS);
    assert_int_equal(x.f.t.host->event_destroy(x.f.t.host, ev), VPMM_DRV_OK);
    gfx_close(&x);
}

static void test_capture_register_other_pools_graph_pool(void **state)
{
    gfx_t x;
    tpool_t other;
    vpmm_graph_pool_t *theirs;
    tsnap_t before;
    uint64_t id;
    (void)state;
    gfx_open(&x);
    tpool_open(&other, &small_va);
    theirs = tgp_create(&other);
    assert_int_equal(vpmm_host_begin_capture(x.f.t.host, x.cs, &id), VPMM_DRV_OK);
    before = tsnap(x.f.t.pool);
    EXPECT(vpmm_capture_register(x.f.t.pool, theirs, x.cs), VPMM_ERROR_WRONG_POOL,
           "vpmm_capture_register: graph pool g");
    assert_error_mentions("belongs to another pool");
    assert_int_equal(tgp_stats(theirs).captures, 0);
    assert_int_equal(tcapture_status(&x.f.t, x.cs, NULL), VPMM_CAPTURE_ACTIVE);
    assert_unchanged_and_works(&x.f.t, &before);
    assert_int_equal(vpmm_host_end_capture(x.f.t.host, x.cs), VPMM_DRV_OK);
    assert_int_equal(vpmm_graph_pool_release(theirs), VPMM_SUCCESS);
    tpool_close(&other);
    gfx_close(&x);
}

static void test_capture_register_served_by_other_graph_pool(void **state)
{
    gfx_t x;
    vpmm_graph_pool_t *mine;
    tsnap_t before;
    char want[96];
    void *p;
    (void)state;
    gfx_open(&x);
    mine = tgp_create(&x.f.t);
    tcapture_begin(&x.f.t, x.gp, x.cs); /* served by x.gp */
    before = tsnap(x.f.t.pool);
    snprintf(want, sizeof want, "is already served by graph pool g%u", tgp_stats(x.gp).id);
    EXPECT(vpmm_capture_register(x.f.t.pool, mine, x.cs), VPMM_ERROR_WRONG_POOL, want);
    assert_int_equal(tgp_stats(mine).captures, 0);
    assert_int_equal(tgp_stats(x.gp).captures, 1);
    assert_unchanged_and_works(&x.f.t, &before);
    p = tmalloc(x.f.t.pool, 4096, x.cs); /* still served by x.gp */
    assert_int_equal(tregion_of(x.f.t.pool, p).pool, tgp_stats(x.gp).id);
    tfree(x.f.t.pool, p);
    assert_int_equal(vpmm_graph_destroy(x.f.t.pool, tcapture_end(&x.f.t, x.cs)), VPMM_SUCCESS);
    /* A capture begun outside vpmm that already allocated: its first malloc gave it a graph pool
     * of its own, so registering it afterwards is too late. */
    {
        uint64_t id;
        vpmm_region_info_t r;
        assert_int_equal(vpmm_host_begin_capture(x.f.t.host, x.f.s, &id), VPMM_DRV_OK);
        p = tmalloc(x.f.t.pool, 4096, x.f.s);
        r = tregion_of(x.f.t.pool, p);
        before = tsnap(x.f.t.pool);
        snprintf(want, sizeof want, "is already served by graph pool g%u", r.pool);
        EXPECT(vpmm_capture_register(x.f.t.pool, mine, x.f.s), VPMM_ERROR_WRONG_POOL, want);
        assert_int_equal(tgp_stats(mine).captures, 0);
        assert_unchanged_and_works(&x.f.t, &before);
        tfree(x.f.t.pool, p);
        assert_int_equal(vpmm_host_end_capture(x.f.t.host, x.f.s), VPMM_DRV_OK);
    }
    assert_int_equal(vpmm_graph_pool_release(mine), VPMM_SUCCESS);
    gfx_close(&x);
}

static void test_capture_register_not_capturing(void **state)
{
    gfx_t x;
    tsnap_t before;
    (void)state;
    gfx_open(&x);
    before = tsnap(x.f.t.pool);
    EXPECT(vpmm_capture_register(x.f.t.pool, x.gp, x.cs), VPMM_ERROR_NOT_CAPTURING,
           "vpmm_capture_register: stream");
    assert_error_mentions("is not being captured");
    EXPECT(vpmm_capture_register(x.f.t.pool, x.gp, NULL), VPMM_ERROR_NOT_CAPTURING,
           "is not being captured");
    assert_int_equal(tgp_stats(x.gp).captures, 0);
    assert_unchanged_and_works(&x.f.t, &before);
    gfx_close(&x);
}

static void test_capture_graph_pool_not_capturing(void **state)
{
    gfx_t x;
    tsnap_t before;
    vpmm_graph_pool_t *got = (vpmm_graph_pool_t *)1;
    (void)state;
    gfx_open(&x);
    before = tsnap(x.f.t.pool);
    EXPECT(vpmm_capture_graph_pool(x.f.t.pool, x.cs, &got), VPMM_ERROR_NOT_CAPTURING,
           "vpmm_capture_graph_pool: stream");
    assert_null(got);
    got = (vpmm_graph_pool_t *)1;
    EXPECT(vpmm_capture_graph_pool(x.f.t.pool, NULL, &got), VPMM_ERROR_NOT_CAPTURING,
           "is not being captured");
    assert_null(got);
    assert_unchanged_and_works(&x.f.t, &before);
    gfx_close(&x);
}

/* ---- graph pools ----------------------------------------------------------------------------- */

/* A release with no handle reference left is refused — as long as the graph pool still exists
 * (a graph keeps it). Once nothing references it, it is freed and the handle dangles: a further
 * release is a use after free, as with free(3). */
static void test_graph_pool_release_more_than_retained(void **state)
{
    gfx_t x;
    tsnap_t before;
    char want[96];
    (void)state;
    gfx_open(&x);
    assert_int_equal(vpmm_graph_pool_retain(x.gp), VPMM_SUCCESS);
    assert_int_equal(vpmm_graph_pool_release(x.gp), VPMM_SUCCESS);
    assert_int_equal(vpmm_graph_pool_release(x.gp), VPMM_SUCCESS); /* G1 keeps it alive */
    assert_int_equal(tgp_stats(x.gp).graphs, 1);
    before = tsnap(x.f.t.pool);
    snprintf(want, sizeof want, "vpmm_graph_pool_release: graph pool g%u has no handle reference",
             tgp_stats(x.gp).id);
    EXPECT(vpmm_graph_pool_release(x.gp), VPMM_ERROR_INVALID_ARGUMENT, want);
    assert_int_equal(tgp_stats(x.gp).graphs, 1);
    assert_unchanged_and_works(&x.f.t, &before);
    /* Take a handle again for gfx_close's release. */
    assert_int_equal(vpmm_graph_pool_retain(x.gp), VPMM_SUCCESS);
    gfx_close(&x);
}

/* ---- checkpoints ------------------------------------------------------------------------- */

static void test_checkpoint_take_during_capture(void **state)
{
    gfx_t x;
    tsnap_t before;
    vpmm_checkpoint_t *ck = (vpmm_checkpoint_t *)1;
    (void)state;
    gfx_open(&x);
    tcapture_begin(&x.f.t, x.gp, x.cs);
    before = tsnap(x.f.t.pool);
    EXPECT(vpmm_checkpoint_take(x.gp, &ck), VPMM_ERROR_STREAM_CAPTURING,
           "vpmm_checkpoint_take: graph pool g");
    assert_error_mentions("is being captured into");
    assert_null(ck);
    assert_int_equal(tcapture_status(&x.f.t, x.cs, NULL), VPMM_CAPTURE_ACTIVE);
    assert_unchanged_and_works(&x.f.t, &before);
    assert_int_equal(vpmm_graph_destroy(x.f.t.pool, tcapture_end(&x.f.t, x.cs)), VPMM_SUCCESS);
    gfx_close(&x);
}

static void test_checkpoint_reapply_other_graph_pool(void **state)
{
    gfx_t x;
    tpool_t other;
    vpmm_graph_pool_t *mine, *theirs;
    tsnap_t before, other_before, other_after;
    char want[96];
    (void)state;
    gfx_open(&x);
    tpool_open(&other, &small_va);
    mine = tgp_create(&x.f.t);
    theirs = tgp_create(&other);
    before = tsnap(x.f.t.pool);
    other_before = tsnap(other.pool);
    snprintf(want, sizeof want, "the checkpoint is of graph pool g%u, not g%u", tgp_stats(x.gp).id,
             tgp_stats(mine).id);
    EXPECT(vpmm_checkpoint_reapply(mine, x.ck, NULL, 0), VPMM_ERROR_WRONG_POOL, want);
    /* A graph pool of another pool: ids are unique in the process, so the same. */
    EXPECT(vpmm_checkpoint_reapply(theirs, x.ck, NULL, 0), VPMM_ERROR_WRONG_POOL,
           "the checkpoint is of graph pool g");
    assert_unchanged_and_works(&x.f.t, &before);
    other_after = tsnap(other.pool);
    assert_snap_equal(&other_before, &other_after);
    assert_int_equal(vpmm_graph_pool_release(mine), VPMM_SUCCESS);
    assert_int_equal(vpmm_graph_pool_release(theirs), VPMM_SUCCESS);
    tpool_close(&other);
    gfx_close(&x);
}

static void test_checkpoint_reapply_during_capture(void **state)
{
    gfx_t x;
    tsnap_t before;
    vpmm_stream_t s2;
    uint64_t id;
    void *p;
    (void)state;
    gfx_open(&x);
    s2 = vpmm_host_stream_create(x.f.t.host);
    /* Captured into by a capture begun elsewhere and registered. */
    assert_int_equal(vpmm_host_begin_capture(x.f.t.host, s2, &id), VPMM_DRV_OK);
    assert_int_equal(vpmm_capture_register(x.f.t.pool, x.gp, s2), VPMM_SUCCESS);
    p = tmalloc(x.f.t.pool, 4096, s2);
    before = tsnap(x.f.t.pool);
    EXPECT(vpmm_checkpoint_reapply(x.gp, x.ck, NULL, 0), VPMM_ERROR_STREAM_CAPTURING,
           "vpmm_checkpoint_reapply: graph pool g");
    assert_error_mentions("is being captured into");
    EXPECT(vpmm_checkpoint_reapply(x.gp, x.ck, &x.out, 1), VPMM_ERROR_STREAM_CAPTURING,
           "is being captured into");
    assert_int_equal(tcapture_status(&x.f.t, s2, NULL), VPMM_CAPTURE_ACTIVE);
    assert_unchanged_and_works(&x.f.t, &before);
    tfree(x.f.t.pool, p);
    assert_int_equal(vpmm_host_end_capture(x.f.t.host, s2), VPMM_DRV_OK);
    gfx_close(&x);
}

static void test_checkpoint_reapply_dead_not_in_checkpoint(void **state)
{
    gfx_t x;
    tsnap_t before;
    vpmm_graph_t g2;
    void *later;
    (void)state;
    gfx_open(&x);
    tcapture_begin(&x.f.t, x.gp, x.cs);
    later = tmalloc(x.f.t.pool, 4096, x.cs); /* an allocation of the graph pool, made after */
    g2 = tcapture_end(&x.f.t, x.cs);
    before = tsnap(x.f.t.pool);
    {
        void *interior[] = { (char *)x.out + 256 };
        void *after_ck[] = { later };
        void *shared[] = { x.f.small };
        void *null[] = { NULL };
        void *second[] = { x.out, later }; /* the bad one is reported by its index */
        EXPECT(vpmm_checkpoint_reapply(x.gp, x.ck, interior, 1), VPMM_ERROR_INVALID_ARGUMENT,
               "is not an allocation of the checkpoint");
        EXPECT(vpmm_checkpoint_reapply(x.gp, x.ck, after_ck, 1), VPMM_ERROR_INVALID_ARGUMENT,
               "dead[0] =");
        EXPECT(vpmm_checkpoint_reapply(x.gp, x.ck, shared, 1), VPMM_ERROR_INVALID_ARGUMENT,
               "is not an allocation of the checkpoint");
        EXPECT(vpmm_checkpoint_reapply(x.gp, x.ck, null, 1), VPMM_ERROR_INVALID_ARGUMENT,
               "is not an allocation of the checkpoint");
        EXPECT(vpmm_checkpoint_reapply(x.gp, x.ck, second, 2), VPMM_ERROR_INVALID_ARGUMENT,
               "dead[1] =");
    }
    assert_unchanged_and_works(&x.f.t, &before);
    tfree(x.f.t.pool, later);
    assert_int_equal(vpmm_graph_destroy(x.f.t.pool, g2), VPMM_SUCCESS);
    gfx_close(&x);
}

static void test_checkpoint_reapply_dead_listed_twice(void **state)
{
    gfx_t x;
    tsnap_t before;
    (void)state;
    gfx_open(&x);
    before = tsnap(x.f.t.pool);
    {
        void *twice[] = { x.out, x.out };
        EXPECT(vpmm_checkpoint_reapply(x.gp, x.ck, twice, 2), VPMM_ERROR_INVALID_ARGUMENT,
               "dead[1] =");
        assert_error_mentions("is listed twice");
    }
    assert_unchanged_and_works(&x.f.t, &before);
    gfx_close(&x);
}

static void test_checkpoint_reapply_conflict(void **state)
{
    tpool_t t;
    vpmm_graph_pool_t *gp;
    vpmm_stream_t s;
    vpmm_graph_t g;
    vpmm_checkpoint_t *ck;
    tsnap_t before;
    void *keep, *a, *big;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .va_size = 4 * GiB, .memory_limit = 16 * MiB });
    s = vpmm_host_stream_create(t.host);
    gp = tgp_create(&t);
    tcapture_begin(&t, gp, s);
    keep = tmalloc(t.pool, 1 * MiB, s);
    a = tmalloc(t.pool, 8 * MiB, s);
    g = tcapture_end(&t, s);
    ck = tcheckpoint_take(gp);
    /* a is freed, the graph dies, and the shared pool takes a's pages from the idle graph pool. */
    tfree(t.pool, a);
    assert_int_equal(vpmm_graph_destroy(t.pool, g), VPMM_SUCCESS);
    big = tmalloc(t.pool, 14 * MiB, NULL);
    assert_true(tgp_stats(gp).mapped_bytes < 8 * MiB);
    before = tsnap(t.pool);
    EXPECT(vpmm_checkpoint_reapply(gp, ck, NULL, 0), VPMM_ERROR_CHECKPOINT_CONFLICT,
           "vpmm_checkpoint_reapply: the checkpoint's allocation at");
    assert_error_mentions("(8388608 bytes) is no longer mapped in graph pool g");
    {
        tsnap_t now = tsnap(t.pool);
        assert_snap_equal(&before, &now);
        CHECK_POOL(t.pool);
        assert_driver_matches_pool(&t);
    }
    /* The way out: list the unmapped allocation as dead. */
    assert_int_equal(vpmm_checkpoint_reapply(gp, ck, &a, 1), VPMM_SUCCESS);
    CHECK_POOL(t.pool);
    tfree(t.pool, big);
    tfree(t.pool, keep);
    tfree(t.pool, tmalloc(t.pool, 4096, NULL));
    vpmm_checkpoint_destroy(ck);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    tpool_close(&t);
}

/* ---- destroy ----------------------------------------------------------------------------- */

static void test_destroy_live_allocations(void **state)
{
    fx_t f;
    tsnap_t before;
    (void)state;
    fx_open(&f, &small_va);
    before = tsnap(f.t.pool);
    EXPECT(vpmm_pool_destroy(f.t.pool), VPMM_ERROR_POOL_BUSY,
           "vpmm_pool_destroy: 2 allocations are still live");
    assert_unchanged_and_works(&f.t, &before);
    fx_close(&f); /* frees both, then destroy succeeds (and leaks nothing) */
}

static void test_destroy_live_graph_pool_handle(void **state)
{
    tpool_t t;
    vpmm_graph_pool_t *gp;
    tsnap_t before;
    (void)state;
    tpool_open(&t, &small_va);
    gp = tgp_create(&t);
    before = tsnap(t.pool);
    EXPECT(vpmm_pool_destroy(t.pool), VPMM_ERROR_POOL_BUSY,
           "vpmm_pool_destroy: 1 graph pool(s) still alive (1 handle reference(s) not released, "
           "0 graph(s) not destroyed)");
    assert_int_equal(tgp_stats(gp).graphs, 0);
    assert_unchanged_and_works(&t, &before);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    tpool_close(&t); /* destroy works now */
}

static void test_destroy_live_graph(void **state)
{
    tpool_t t;
    vpmm_graph_pool_t *gp;
    vpmm_stream_t s;
    vpmm_graph_t g;
    tsnap_t before;
    (void)state;
    tpool_open(&t, &small_va);
    s = vpmm_host_stream_create(t.host);
    gp = tgp_create(&t);
    tcapture_begin(&t, gp, s);
    tfree(t.pool, tmalloc(t.pool, 4096, s));
    g = tcapture_end(&t, s);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS); /* only the graph holds it */
    before = tsnap(t.pool);
    /* It waits up to 0.5 s for CUDA's destructors, then refuses. */
    EXPECT(vpmm_pool_destroy(t.pool), VPMM_ERROR_POOL_BUSY,
           "vpmm_pool_destroy: 1 graph pool(s) still alive (0 handle reference(s) not released, "
           "1 graph(s) not destroyed)");
    assert_unchanged_and_works(&t, &before);
    assert_int_equal(vpmm_graph_destroy(t.pool, g), VPMM_SUCCESS);
    tpool_close(&t); /* destroy works now */
}

/* During a capture into a graph pool whose handle is held: the graph being captured holds it. */
static void test_destroy_during_capture(void **state)
{
    tpool_t t;
    vpmm_graph_pool_t *gp;
    vpmm_stream_t s;
    tsnap_t before;
    void *p;
    (void)state;
    tpool_open(&t, &small_va);
    s = vpmm_host_stream_create(t.host);
    gp = tgp_create(&t);
    tcapture_begin(&t, gp, s);
    p = tmalloc(t.pool, 4096, s);
    before = tsnap(t.pool);
    EXPECT(vpmm_pool_destroy(t.pool), VPMM_ERROR_POOL_BUSY,
           "vpmm_pool_destroy: stream 0x"); /* "... is being captured into graph pool gN" */
    assert_int_equal(tcapture_status(&t, s, NULL), VPMM_CAPTURE_ACTIVE); /* undisturbed */
    assert_int_equal(tgp_stats(gp).captures, 1);
    assert_unchanged_and_works(&t, &before);
    tfree(t.pool, p);
    assert_int_equal(vpmm_graph_destroy(t.pool, tcapture_end(&t, s)), VPMM_SUCCESS);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    tpool_close(&t); /* destroy works now */
}

/* ---- streams ----------------------------------------------------------------------------- */

/* A stream the pool never saw: nothing to forget; a no-op that succeeds (one capture query
 * each: a stream being captured would be refused). */
/* The legacy stream's last marker would be legacy-stream work, which invalidates the capture of
 * a blocking stream: while any capture is in progress, releasing it (with frees unmarked) is
 * refused, before anything changes. */
static void test_stream_release_legacy_during_capture(void **state)
{
    gfx_t x;
    tsnap_t before;
    vpmm_stream_t cs;
    vpmm_graph_t g;
    (void)state;
    gfx_open(&x);
    tfree(x.f.t.pool, tmalloc(x.f.t.pool, 5000, NULL)); /* cached on the legacy stream */
    cs = vpmm_host_stream_create(x.f.t.host);
    tcapture_begin(&x.f.t, x.gp, cs);
    before = tsnap(x.f.t.pool);
    EXPECT(vpmm_stream_release(x.f.t.pool, NULL), VPMM_ERROR_STREAM_CAPTURING,
           "cannot be recorded while a capture is in progress");
    EXPECT(vpmm_stream_release(x.f.t.pool, VPMM_STREAM_LEGACY), VPMM_SUCCESS, NULL); /* unknown */
    {
        tsnap_t after = tsnap(x.f.t.pool);
        assert_snap_equal(&before, &after);
    }
    g = tcapture_end(&x.f.t, cs);
    EXPECT(vpmm_stream_release(x.f.t.pool, NULL), VPMM_SUCCESS, NULL); /* after the capture */
    assert_int_equal(vpmm_graph_destroy(x.f.t.pool, g), VPMM_SUCCESS);
    gfx_close(&x);
}

static void test_stream_release_unknown(void **state)
{
    fx_t f;
    tsnap_t before;
    vpmm_stream_t never;
    uint64_t calls;
    (void)state;
    fx_open(&f, &small_va);
    never = vpmm_host_stream_create(f.t.host);
    before = tsnap(f.t.pool);
    calls = vpmm_fault_total_calls(f.t.fault);
    EXPECT(vpmm_stream_release(f.t.pool, never), VPMM_SUCCESS, NULL);
    EXPECT(vpmm_stream_release(f.t.pool, (vpmm_stream_t)0xdead0), VPMM_SUCCESS, NULL);
    assert_int_equal(vpmm_fault_total_calls(f.t.fault), calls + 2); /* the capture queries */
    assert_unchanged_and_works(&f.t, &before);
    /* Twice for a known one: the second is a release of an unknown stream. */
    EXPECT(vpmm_stream_release(f.t.pool, f.s), VPMM_SUCCESS, NULL);
    before = tsnap(f.t.pool);
    EXPECT(vpmm_stream_release(f.t.pool, f.s), VPMM_SUCCESS, NULL);
    assert_unchanged_and_works(&f.t, &before);
    fx_close(&f);
}

/* ---- bad environment values ------------------------------------------------------------ */

/* A host pool with a small VA chunk (the default 8 TiB may not fit under valgrind or ASan). */
static void base_config(vpmm_config_t *c)
{
    vpmm_config_init(c);
    c->backend = VPMM_BACKEND_HOST;
    c->va_size = 1 * GiB;
}

/* vpmm_pool_create fails with want, *out_pool is NULL, and the last error says both things. */
static void expect_create_fails(const vpmm_config_t *c, vpmm_status_t want, const char *m1,
                                const char *m2)
{
    vpmm_pool_t *pool = (vpmm_pool_t *)&pool; /* must be reset to NULL */
    vpmm_status_t st;
    poison();
    st = vpmm_pool_create(c, &pool);
    if (st != want)
        fail_msg("vpmm_pool_create: got %s (\"%s\"), want %s", vpmm_status_name(st),
                 vpmm_last_error(), vpmm_status_name(want));
    assert_null(pool);
    assert_error_mentions(m1);
    if (m2 != NULL)
        assert_error_mentions(m2);
}

static void expect_create_works(const vpmm_config_t *c)
{
    vpmm_pool_t *pool = NULL;
    vpmm_status_t st = vpmm_pool_create(c, &pool);
    if (st != VPMM_SUCCESS)
        fail_msg("vpmm_pool_create: %s (\"%s\")", vpmm_status_name(st), vpmm_last_error());
    tfree(pool, tmalloc(pool, 4096, NULL));
    CHECK_POOL(pool);
    assert_int_equal(vpmm_pool_destroy(pool), VPMM_SUCCESS);
}

typedef struct bad_value {
    const char *value;
    const char *says; /* a substring of the message */
} bad_value_t;

/*
 * One variable, several malformed values: each fails creation with VPMM_ERROR_INVALID_ENV naming
 * the variable, even though the config sets the field itself (every variable is parsed: a typo
 * never goes unnoticed); once it is unset, the same config creates a pool. va_from_env: leave
 * config.va_size at its default so that VPMM_VA_SIZE is the one used.
 */
static void env_row(const char *name, const bad_value_t *bad, size_t n, int va_from_env)
{
    vpmm_config_t c, ok;
    base_config(&c);
    base_config(&ok);
    if (va_from_env)
        c.va_size = 0;
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(setenv(name, bad[i].value, 1), 0);
        expect_create_fails(&c, VPMM_ERROR_INVALID_ENV, name, bad[i].says);
        assert_int_equal(unsetenv(name), 0);
        expect_create_works(&ok);
    }
}

#define ENV_ROW(name, va_from_env, ...)                                                            \
    do {                                                                                           \
        static const bad_value_t bad_[] = { __VA_ARGS__ };                                         \
        env_row((name), bad_, sizeof bad_ / sizeof bad_[0], (va_from_env));                        \
    } while (0)

static void test_env_backend(void **state)
{
    (void)state;
    ENV_ROW("VPMM_BACKEND", 0, { "gpu", "VPMM_BACKEND='gpu': expected cuda, host or auto" },
            { "CUDA", "VPMM_BACKEND='CUDA': expected cuda, host or auto" },
            { "", "VPMM_BACKEND='': expected" });
}

static void test_env_page_size(void **state)
{
    (void)state;
    ENV_ROW("VPMM_PAGE_SIZE", 0,
            { "3X", "VPMM_PAGE_SIZE='3X': expected bytes with an optional K, M, G or T suffix" },
            { "1.5G", "VPMM_PAGE_SIZE='1.5G': expected bytes" },
            { "0", "VPMM_PAGE_SIZE='0': the page size must be positive" },
            { "18446744073709551616", "VPMM_PAGE_SIZE='18446744073709551616': value too large" },
            { "", "VPMM_PAGE_SIZE='': expected bytes" });
}

static void test_env_page_size_not_granular(void **state)
{
    (void)state;
    ENV_ROW("VPMM_PAGE_SIZE", 0,
            { "3M", "VPMM_PAGE_SIZE=3145728: not a multiple of the allocation granularity "
                    "(2 MiB)" },
            { "4K", "VPMM_PAGE_SIZE=4096: not a multiple of the allocation granularity" });
}

static void test_env_va_size(void **state)
{
    (void)state;
    ENV_ROW("VPMM_VA_SIZE", 1, { "abc", "VPMM_VA_SIZE='abc': expected bytes" },
            { "0", "VPMM_VA_SIZE='0': the VA chunk size must be positive" },
            { "3M", "VPMM_VA_SIZE=3145728: must be a positive multiple of the page size (2 MiB)" },
            { "1M", "VPMM_VA_SIZE=1048576: must be a positive multiple of the page size" });
}

static void test_env_pages(void **state)
{
    (void)state;
    ENV_ROW("VPMM_PAGES", 0, { "2K", "VPMM_PAGES='2K': expected a decimal count" },
            { "-1", "VPMM_PAGES='-1': expected a decimal count" },
            { "99999999999999999999999", "VPMM_PAGES='99999999999999999999999': value too large" },
            { "513", "VPMM_PAGES=513: 513 pages of 2 MiB do not fit in one VA chunk of 1 GiB" });
}

static void test_env_host_memory(void **state)
{
    (void)state;
    ENV_ROW("VPMM_HOST_MEMORY", 0,
            { "0", "VPMM_HOST_MEMORY='0': the emulated device memory must be positive" },
            { "1.5G", "VPMM_HOST_MEMORY='1.5G': expected bytes" });
}

static void test_env_cache_percent(void **state)
{
    (void)state;
    ENV_ROW("VPMM_CACHE_PERCENT", 0, { "101", "VPMM_CACHE_PERCENT='101': expected 0 to 100" },
            { "5%", "VPMM_CACHE_PERCENT='5%': expected a decimal count" },
            { "10M", "VPMM_CACHE_PERCENT='10M': expected a decimal count" });
}

static void test_env_max_bytes(void **state)
{
    (void)state;
    ENV_ROW("VPMM_MAX_BYTES", 0, { "lots", "VPMM_MAX_BYTES='lots': expected bytes" },
            { "-4G", "VPMM_MAX_BYTES='-4G': expected bytes" },
            { "1M", "VPMM_MAX_BYTES=1048576: less than one page (2 MiB)" });
}

static void test_env_verbose(void **state)
{
    (void)state;
    ENV_ROW("VPMM_VERBOSE", 0, { "2", "VPMM_VERBOSE='2': expected 0 or 1" },
            { "yes", "VPMM_VERBOSE='yes': expected a decimal count" });
}

static void test_env_default_stream(void **state)
{
    (void)state;
    ENV_ROW("VPMM_DEFAULT_STREAM", 0,
            { "per_thread", "VPMM_DEFAULT_STREAM='per_thread': expected legacy or per-thread" },
            { "Legacy", "VPMM_DEFAULT_STREAM='Legacy': expected legacy or per-thread" },
            { "", "VPMM_DEFAULT_STREAM='': expected legacy or per-thread" });
}

/* Not malformed, but no device for it: VPMM_BACKEND=cuda on a machine without a GPU. */
static void test_env_backend_cuda_without_device(void **state)
{
    vpmm_config_t c;
    (void)state;
    if (vpmm_driver_cuda_device_count() > 0)
        skip();
    vpmm_config_init(&c);
    c.va_size = 1 * GiB;
    assert_int_equal(setenv("VPMM_BACKEND", "cuda", 1), 0);
    expect_create_fails(&c, VPMM_ERROR_NO_DEVICE, "no CUDA device", NULL);
}

/* ---- bad config fields --------------------------------------------------------------------- */

static void config_row(void (*set)(vpmm_config_t *c, size_t i), size_t n, vpmm_status_t want,
                       const char *const *says)
{
    vpmm_config_t c, ok;
    for (size_t i = 0; i < n; i++) {
        base_config(&c);
        c.ignore_env = 1;
        set(&c, i);
        expect_create_fails(&c, want, says[i], NULL);
    }
    base_config(&ok);
    ok.ignore_env = 1;
    expect_create_works(&ok);
}

static void set_backend(vpmm_config_t *c, size_t i)
{
    c->backend = (vpmm_backend_t)(i == 0 ? 7 : -1);
}

static void test_config_backend(void **state)
{
    static const char *const says[] = {
        "config.backend=7: expected VPMM_BACKEND_AUTO, _CUDA or _HOST",
        "config.backend=-1: expected",
    };
    (void)state;
    config_row(set_backend, 2, VPMM_ERROR_INVALID_CONFIG, says);
}

static void set_device(vpmm_config_t *c, size_t i)
{
    (void)i;
    c->device = -2;
}

static void test_config_device(void **state)
{
    static const char *const says[] = {
        "config.device=-2: expected -1 (current) or a device ordinal",
    };
    (void)state;
    config_row(set_device, 1, VPMM_ERROR_INVALID_CONFIG, says);
}

static void set_cache_percent(vpmm_config_t *c, size_t i)
{
    c->cache_percent = i == 0 ? 101 : -2;
}

static void test_config_cache_percent(void **state)
{
    static const char *const says[] = {
        "config.cache_percent=101: expected -1 (default) or 0 to 100",
        "config.cache_percent=-2: expected",
    };
    (void)state;
    config_row(set_cache_percent, 2, VPMM_ERROR_INVALID_CONFIG, says);
}

static void set_verbose(vpmm_config_t *c, size_t i)
{
    c->verbose = i == 0 ? 2 : -2;
}

static void test_config_verbose(void **state)
{
    static const char *const says[] = {
        "config.verbose=2: expected -1 (default), 0 or 1",
        "config.verbose=-2: expected",
    };
    (void)state;
    config_row(set_verbose, 2, VPMM_ERROR_INVALID_CONFIG, says);
}

static void set_default_stream(vpmm_config_t *c, size_t i)
{
    c->default_stream = (vpmm_default_stream_t)(i == 0 ? 3 : -1);
}

static void test_config_default_stream(void **state)
{
    static const char *const says[] = {
        "config.default_stream=3: expected VPMM_DEFAULT_STREAM_UNSET, _LEGACY or _PER_THREAD",
        "config.default_stream=-1: expected",
    };
    (void)state;
    config_row(set_default_stream, 2, VPMM_ERROR_INVALID_CONFIG, says);
}

static void set_page_size(vpmm_config_t *c, size_t i)
{
    static const size_t sizes[] = { 3 * MiB, 4 * KiB, SIZE_MAX };
    c->page_size = sizes[i];
}

static void test_config_page_size_not_granular(void **state)
{
    static const char *const says[] = {
        "config.page_size=3145728: not a multiple of the allocation granularity (2 MiB)",
        "config.page_size=4096: not a multiple of the allocation granularity",
        "config.page_size=18446744073709551615: not a multiple",
    };
    (void)state;
    config_row(set_page_size, 3, VPMM_ERROR_INVALID_CONFIG, says);
}

static void set_va_size(vpmm_config_t *c, size_t i)
{
    c->va_size = i == 0 ? 3 * MiB : 1 * MiB;
}

static void test_config_va_size(void **state)
{
    static const char *const says[] = {
        "config.va_size=3145728: must be a positive multiple of the page size (2 MiB)",
        "config.va_size=1048576: must be a positive multiple of the page size",
    };
    (void)state;
    config_row(set_va_size, 2, VPMM_ERROR_INVALID_CONFIG, says);
}

static void set_max_bytes(vpmm_config_t *c, size_t i)
{
    (void)i;
    c->max_bytes = 1 * MiB;
}

static void test_config_max_bytes(void **state)
{
    static const char *const says[] = {
        "config.max_bytes=1048576: less than one page (2 MiB)",
    };
    (void)state;
    config_row(set_max_bytes, 1, VPMM_ERROR_INVALID_CONFIG, says);
}

static void set_prealloc(vpmm_config_t *c, size_t i)
{
    if (i == 0) {
        c->prealloc_pages = 513;
    } else if (i == 1) {
        c->prealloc_pages = 3;
        c->max_bytes = 4 * MiB;
    } else {
        c->prealloc_pages = SIZE_MAX;
    }
}

static void test_config_prealloc_pages(void **state)
{
    static const char *const says[] = {
        "config.prealloc_pages=513: 513 pages of 2 MiB do not fit in one VA chunk of 1 GiB",
        "config.prealloc_pages=3: 3 pages of 2 MiB exceed the cap of 4 MiB",
        "do not fit in one VA chunk",
    };
    (void)state;
    config_row(set_prealloc, 3, VPMM_ERROR_INVALID_CONFIG, says);
}

/* Well-formed but impossible: a VA chunk larger than the address space. */
static void set_va_huge(vpmm_config_t *c, size_t i)
{
    (void)i;
    c->va_size = (size_t)1 << 62;
}

static void test_config_va_size_unreservable(void **state)
{
    static const char *const says[] = {
        "cuMemAddressReserve failed",
    };
    (void)state;
    config_row(set_va_huge, 1, VPMM_ERROR_OUT_OF_MEMORY, says);
}

/* ---- found by this table, fixed in src/ (each row once asserted the bug) ------------------- */

/*
 * vpmm_stream_release on a stream that is being captured: releasing means the stream is about to
 * be destroyed, which a capturing stream cannot be. Refused with VPMM_ERROR_STREAM_CAPTURING and
 * no change — with or without a live allocation on the stream. (It used to end vpmm's record of
 * the capture: memory freed earlier in the capture became ready for every stream mid-capture, and
 * the capture's next malloc was served by a new graph pool.)
 */
static void test_stream_release_during_capture(void **state)
{
    tpool_t t;
    vpmm_graph_pool_t *gp, *served = NULL;
    vpmm_stream_t s[2];
    vpmm_graph_t g;
    void *a = NULL, *b, *tmp;
    (void)state;
    tpool_open(&t, &small_va);
    gp = tgp_create(&t);
    for (int k = 0; k < 2; k++) {
        tsnap_t before, after;
        s[k] = vpmm_host_stream_create(t.host);
        tcapture_begin(&t, gp, s[k]);
        if (k == 0)
            a = tmalloc(t.pool, 4096, s[k]); /* k == 0: the stream has a live allocation */
        tmp = tmalloc(t.pool, 8192, s[k]);
        tfree(t.pool, tmp); /* capture-pending: for this capture's stream only */
        before = tsnap(t.pool);
        EXPECT(vpmm_stream_release(t.pool, s[k]), VPMM_ERROR_STREAM_CAPTURING,
               "is being captured; end the capture first");
        after = tsnap(t.pool);
        assert_snap_equal(&before, &after);
        CHECK_POOL(t.pool);
        assert_false(tregion_of(t.pool, tmp).ready); /* still for this capture's stream only */
        assert_int_equal(tgp_stats(gp).captures, 1); /* the capture goes on */
        b = tmalloc(t.pool, 4096, s[k]);
        assert_int_equal(vpmm_capture_graph_pool(t.pool, s[k], &served), VPMM_SUCCESS);
        assert_ptr_equal(served, gp); /* still served by the graph pool it was begun with */
        tfree(t.pool, b);
        g = tcapture_end(&t, s[k]);
        assert_int_equal(vpmm_graph_destroy(t.pool, g), VPMM_SUCCESS);
        assert_int_equal(vpmm_graph_pool_release(served), VPMM_SUCCESS);
        assert_int_equal(vpmm_stream_release(t.pool, s[k]), VPMM_SUCCESS); /* after the end */
        CHECK_POOL(t.pool);
    }
    tfree(t.pool, a);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    tpool_close(&t);
}

/*
 * vpmm_pool_destroy during a capture into a graph pool that has no handle (a capture begun by
 * vpmm_capture_begin(pool, NULL, ...) or outside vpmm, e.g. torch.cuda.graph): refused with
 * VPMM_ERROR_POOL_BUSY before anything else. (It used to synchronise the device first, waiting for
 * graph destructors, which invalidates the capture: the graph was lost.)
 */
static void test_destroy_during_handleless_capture(void **state)
{
    tpool_t t;
    vpmm_stream_t s;
    vpmm_graph_t g;
    tsnap_t before, after;
    void *p;
    (void)state;
    tpool_open(&t, &small_va);
    s = vpmm_host_stream_create(t.host);
    tcapture_begin(&t, NULL,
                   s); /* its graph pool has no handle: only the capture's graph holds it */
    p = tmalloc(t.pool, 4096, s);
    before = tsnap(t.pool);
    EXPECT(vpmm_pool_destroy(t.pool), VPMM_ERROR_POOL_BUSY, "is being captured into graph pool");
    after = tsnap(t.pool);
    assert_snap_equal(&before, &after);
    assert_int_equal(tcapture_status(&t, s, NULL), VPMM_CAPTURE_ACTIVE); /* undisturbed */
    CHECK_POOL(t.pool);
    tfree(t.pool, p);
    g = tcapture_end(&t, s);
    assert_non_null(g);
    assert_int_equal(vpmm_graph_destroy(t.pool, g), VPMM_SUCCESS);
    tpool_close(&t);
}

/*
 * A refused reapply (VPMM_ERROR_CHECKPOINT_CONFLICT) whose wanted allocation's stream was released
 * since: no new stream record (stream records are made only once validation passed; it used to
 * make one before the conflict was found).
 */
static void test_checkpoint_conflict_released_stream(void **state)
{
    tpool_t t;
    vpmm_graph_pool_t *gp;
    vpmm_stream_t s;
    vpmm_graph_t g;
    vpmm_checkpoint_t *ck;
    tsnap_t before, after;
    void *keep, *a, *big;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .va_size = 4 * GiB, .memory_limit = 16 * MiB });
    s = vpmm_host_stream_create(t.host);
    gp = tgp_create(&t);
    tcapture_begin(&t, gp, s);
    keep = tmalloc(t.pool, 1 * MiB, s);
    a = tmalloc(t.pool, 8 * MiB, s);
    g = tcapture_end(&t, s);
    ck = tcheckpoint_take(gp);
    tfree(t.pool, a);
    tfree(t.pool, keep);
    assert_int_equal(vpmm_graph_destroy(t.pool, g), VPMM_SUCCESS);
    assert_int_equal(vpmm_stream_release(t.pool, s), VPMM_SUCCESS); /* s is going away */
    big = tmalloc(t.pool, 14 * MiB, NULL); /* takes a's pages from the idle graph pool */
    before = tsnap(t.pool);
    EXPECT(vpmm_checkpoint_reapply(gp, ck, NULL, 0), VPMM_ERROR_CHECKPOINT_CONFLICT,
           "is no longer mapped");
    after = tsnap(t.pool);
    assert_snap_equal(&before, &after); /* streams included */
    CHECK_POOL(t.pool);
    tfree(t.pool, big);
    vpmm_checkpoint_destroy(ck);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    tpool_close(&t);
}

/*
 * The header's convention: out pointers are set to NULL on error. The handle-returning calls do
 * so also when the pool / graph pool argument itself is NULL (they used to leave it untouched).
 */
static void test_out_pointer_on_null_handle(void **state)
{
    vpmm_graph_pool_t *gp = (vpmm_graph_pool_t *)1;
    vpmm_graph_t g = (vpmm_graph_t)1;
    vpmm_checkpoint_t *ck = (vpmm_checkpoint_t *)1;
    vpmm_stream_t s = (vpmm_stream_t)0x1000;
    (void)state;
    EXPECT(vpmm_graph_pool_create(NULL, &gp), VPMM_ERROR_INVALID_ARGUMENT, "pool is NULL");
    assert_null(gp);
    EXPECT(vpmm_capture_end(NULL, s, &g), VPMM_ERROR_INVALID_ARGUMENT, "pool is NULL");
    assert_null(g);
    gp = (vpmm_graph_pool_t *)1;
    EXPECT(vpmm_capture_graph_pool(NULL, s, &gp), VPMM_ERROR_INVALID_ARGUMENT, "pool is NULL");
    assert_null(gp);
    EXPECT(vpmm_checkpoint_take(NULL, &ck), VPMM_ERROR_INVALID_ARGUMENT, "graph_pool is NULL");
    assert_null(ck);
}

/* ---- the table ------------------------------------------------------------------------------- */

#define ENV_TEST(f) cmocka_unit_test_setup_teardown(f, tenv_clear, tenv_clear)

int main(void)
{
    const struct CMUnitTest tests[] = {
        /* NULL arguments */
        cmocka_unit_test(test_null_config_init),
        ENV_TEST(test_null_pool_create),
        cmocka_unit_test(test_null_pool_destroy),
        cmocka_unit_test(test_null_malloc),
        cmocka_unit_test(test_null_free_pool),
        cmocka_unit_test(test_free_null_pointer),
        cmocka_unit_test(test_null_stream_release),
        cmocka_unit_test(test_null_trim),
        cmocka_unit_test(test_null_stats),
        cmocka_unit_test(test_null_walk_dump_check),
        cmocka_unit_test(test_null_oom_report),
        cmocka_unit_test(test_null_last_driver_error),
        cmocka_unit_test(test_null_graph_pool_calls),
        cmocka_unit_test(test_null_capture_calls),
        cmocka_unit_test(test_null_checkpoint_calls),
        cmocka_unit_test(test_unknown_status),
        /* sizes */
        cmocka_unit_test(test_malloc_size_zero),
        cmocka_unit_test(test_malloc_size_max),
        cmocka_unit_test(test_malloc_above_va_chunk),
        /* bad pointers */
        cmocka_unit_test(test_free_double),
        cmocka_unit_test(test_free_interior),
        cmocka_unit_test(test_free_foreign_stack),
        cmocka_unit_test(test_free_foreign_other_pool),
        cmocka_unit_test(test_free_never_allocated),
        cmocka_unit_test(test_free_after_reapply),
        /* frees during someone else's capture */
        cmocka_unit_test(test_free_private_during_other_capture),
        cmocka_unit_test(test_free_private_while_its_stream_captures_elsewhere),
        cmocka_unit_test(test_free_private_during_capture_into_its_pool),
        cmocka_unit_test(test_free_shared_during_capture_of_its_stream),
        /* captures */
        cmocka_unit_test(test_capture_begin_legacy_stream),
        cmocka_unit_test(test_capture_stream_zero_per_thread),
        cmocka_unit_test(test_capture_end_per_thread_from_other_thread),
        cmocka_unit_test(test_capture_begin_already_capturing),
        cmocka_unit_test(test_capture_begin_other_pools_graph_pool),
        cmocka_unit_test(test_capture_begin_bad_mode),
        cmocka_unit_test(test_capture_end_not_capturing),
        cmocka_unit_test(test_capture_end_joined_stream),
        cmocka_unit_test(test_capture_register_other_pools_graph_pool),
        cmocka_unit_test(test_capture_register_served_by_other_graph_pool),
        cmocka_unit_test(test_capture_register_not_capturing),
        cmocka_unit_test(test_capture_graph_pool_not_capturing),
        /* graph pools */
        cmocka_unit_test(test_graph_pool_release_more_than_retained),
        /* checkpoints */
        cmocka_unit_test(test_checkpoint_take_during_capture),
        cmocka_unit_test(test_checkpoint_reapply_other_graph_pool),
        cmocka_unit_test(test_checkpoint_reapply_during_capture),
        cmocka_unit_test(test_checkpoint_reapply_dead_not_in_checkpoint),
        cmocka_unit_test(test_checkpoint_reapply_dead_listed_twice),
        cmocka_unit_test(test_checkpoint_reapply_conflict),
        /* destroy */
        cmocka_unit_test(test_destroy_live_allocations),
        cmocka_unit_test(test_destroy_live_graph_pool_handle),
        cmocka_unit_test(test_destroy_live_graph),
        cmocka_unit_test(test_destroy_during_capture),
        /* streams */
        cmocka_unit_test(test_stream_release_unknown),
        /* bad environment values */
        ENV_TEST(test_env_backend),
        ENV_TEST(test_env_page_size),
        ENV_TEST(test_env_page_size_not_granular),
        ENV_TEST(test_env_va_size),
        ENV_TEST(test_env_pages),
        ENV_TEST(test_env_host_memory),
        ENV_TEST(test_env_cache_percent),
        ENV_TEST(test_env_max_bytes),
        ENV_TEST(test_env_verbose),
        ENV_TEST(test_env_default_stream),
        ENV_TEST(test_env_backend_cuda_without_device),
        /* bad config fields */
        ENV_TEST(test_config_backend),
        ENV_TEST(test_config_device),
        ENV_TEST(test_config_cache_percent),
        ENV_TEST(test_config_verbose),
        ENV_TEST(test_config_default_stream),
        ENV_TEST(test_config_page_size_not_granular),
        ENV_TEST(test_config_va_size),
        ENV_TEST(test_config_max_bytes),
        ENV_TEST(test_config_prealloc_pages),
        ENV_TEST(test_config_va_size_unreservable),
        /* found by this table, fixed in src/ */
        cmocka_unit_test(test_stream_release_during_capture),
        cmocka_unit_test(test_stream_release_legacy_during_capture),
        cmocka_unit_test(test_destroy_during_handleless_capture),
        cmocka_unit_test(test_checkpoint_conflict_released_stream),
        cmocka_unit_test(test_out_pointer_on_null_handle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
