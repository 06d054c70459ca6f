/*
 * test_host_oom.c — host memory failures: every malloc, calloc and realloc the library (and the
 * host backend under it) makes during a scenario is made to fail in turn.
 *
 * The executable is linked with --wrap=malloc,--wrap=calloc,--wrap=realloc and oom_wrap.c
 * (tests/CMakeLists.txt), so every allocation of the library's objects goes through wrappers that
 * fail the n-th call while armed and pass everything else through (cmocka's and the checks' own
 * allocations happen disarmed). For n = 1, 2, 3 ... the scenario runs on a fresh pool with its
 * n-th allocation refused, until a run refuses none. Each call must then return success or a
 * clear status (VPMM_ERROR_HOST_OUT_OF_MEMORY, or OUT_OF_MEMORY / DRIVER_ERROR where the host
 * backend's own allocation failed under a driver call), never crash or abort; after each call the
 * invariants hold and the driver holds exactly what the pool believes; a failed malloc leaves
 * the pool's live and mapped bytes as they were; at the end everything is freed, the pool is
 * destroyed and the driver holds nothing. Under ASan (tests/sanitize/run_ci.sh) LeakSanitizer
 * sees the host memory: a path that loses a block on a failure is a finding.
 *
 * Then the background worker's thread is refused (pthread_create wrapped as well): creation fails
 * cleanly and the next one works.
 *
 * The scenario: pool creation, a growth that gives a free handle back first (with 8-page handles:
 * a sweep of its own), growth, sub-page blocks, another stream recorded on a block
 * (vpmm_record_stream) and its deferred free, a defragmentation across streams, stream work and
 * its completion, trim, statistics, the walk, the dump, the background worker's pass
 * (vpmm_i_worker_step) over the zombies, and a graph pool: a capture that allocates and frees
 * inside, its end, a checkpoint taken and reapplied, the graph destroyed, the pool released; and
 * CUDA IPC: a block exported, opened (the pool imports its own process's memory: the same calls
 * as another process's), closed, and its shares ended.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oom_wrap.h"
#include "test_util.h"

/* pthread_create is wrapped too (--wrap=pthread_create): refused while refuse_threads is set, as
 * the C library refuses it when the process is out of threads or memory. */
static int refuse_threads;
int __real_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg);
int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg);
int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg)
{
    return refuse_threads ? EAGAIN : __real_pthread_create(t, a, fn, arg);
}

#define PG (2 * MiB)

static unsigned long run_n; /* the allocation this run refuses (messages) */

typedef struct ctx {
    tpool_t t;
    vpmm_stream_t a, b;
    void *live[16];
    size_t nlive;
} ctx_t;

/* A status a call may return when its host memory is refused. */
static void assert_clear_status(vpmm_status_t st, const char *what)
{
    if (st != VPMM_SUCCESS && st != VPMM_ERROR_HOST_OUT_OF_MEMORY &&
        st != VPMM_ERROR_OUT_OF_MEMORY && st != VPMM_ERROR_DRIVER)
        fail_msg("%s with allocation #%lu refused: %s (%s)", what, run_n, vpmm_status_name(st),
                 vpmm_last_error());
}

static void check(ctx_t *c)
{
    CHECK_POOL(c->t.pool);
    assert_driver_matches_pool(&c->t);
}

/* The status of call made armed, after the checks; TRY_THEN_SURE: for a call that must end what
 * it began (refused for host memory, it is made again unarmed and must succeed). */
static vpmm_status_t checked(ctx_t *c, vpmm_status_t st, const char *what)
{
    assert_clear_status(st, what);
    check(c);
    return st;
}
#define TRY(c, what, call) checked((c), OOM_ARMED(call), (what))
#define TRY_THEN_SURE(c, what, call)                                                               \
    do {                                                                                           \
        if (TRY(c, what, call) != VPMM_SUCCESS)                                                    \
            assert_int_equal((call), VPMM_SUCCESS);                                                \
    } while (0)

static void do_malloc(ctx_t *c, size_t size, vpmm_stream_t s)
{
    vpmm_stats_t before = tstats(c->t.pool), after;
    void *p = NULL;
    vpmm_status_t st = TRY(c, "vpmm_malloc", vpmm_malloc(c->t.pool, size, s, &p));
    after = tstats(c->t.pool);
    if (st != VPMM_SUCCESS) {
        assert_null(p);
        assert_int_equal(after.live_bytes, before.live_bytes);
        /* free handles a growth gave back before it failed stay given back (trim.c) */
        assert_int_equal(before.mapped_bytes - after.mapped_bytes,
                         (after.pages_released - before.pages_released) * PG);
        return;
    }
    c->live[c->nlive++] = p;
}

/* A free refused for host memory keeps the block live: it is freed again unarmed. */
static void do_free_oldest(ctx_t *c)
{
    if (c->nlive == 0)
        return;
    TRY_THEN_SURE(c, "vpmm_free", vpmm_free(c->t.pool, c->live[0]));
    c->nlive--;
    memmove(c->live, c->live + 1, c->nlive * sizeof c->live[0]);
}

/* A growth above the pool's high-water mark that first gives back a free handle it cannot use
 * (trim.c): with 8-page handles, two free 16 MiB handles between live blocks, then 20 MiB asked
 * (one handle moved, the other given back). Set up unarmed; the malloc armed. With single pages
 * the same calls are an ordinary defragmentation. */
static void growth_trim(ctx_t *c)
{
    void *a[2], *b[2];
    size_t n = c->nlive;
    for (int i = 0; i < 2; i++) {
        a[i] = tmalloc(c->t.pool, 8 * PG, c->a);
        b[i] = tmalloc(c->t.pool, PG, c->a);
    }
    tfree(c->t.pool, a[0]);
    tfree(c->t.pool, a[1]);
    assert_int_equal(vpmm_trim(c->t.pool, SIZE_MAX, NULL), VPMM_SUCCESS); /* now ready */
    do_malloc(c, 10 * PG, c->a);
    if (c->nlive > n) {
        tfree(c->t.pool, c->live[--c->nlive]);
    }
    tfree(c->t.pool, b[0]);
    tfree(c->t.pool, b[1]);
}

static int count_region(const vpmm_region_info_t *r, void *user)
{
    (void)r;
    ++*(size_t *)user;
    return 0;
}

/* A graph pool: a capture that allocates (and frees one block) inside, a checkpoint taken and
 * reapplied, the graph destroyed, the pool released. */
static void graphs(ctx_t *c)
{
    vpmm_graph_pool_t *gp = NULL;
    vpmm_checkpoint_t *ck = NULL;
    vpmm_graph_t g = NULL;
    void *x = NULL, *y = NULL;
    vpmm_status_t st;
    st = OOM_ARMED(vpmm_graph_pool_create(c->t.pool, &gp));
    if (st == VPMM_ERROR_NOT_SUPPORTED)
        return; /* built without graphs (VPMM_WITH_GRAPHS=OFF) */
    assert_clear_status(st, "vpmm_graph_pool_create");
    check(c);
    if (gp == NULL)
        return;
    if (TRY(c, "vpmm_capture_begin",
            vpmm_capture_begin(c->t.pool, gp, c->a, VPMM_STREAM_CAPTURE_GLOBAL)) == VPMM_SUCCESS) {
        (void)TRY(c, "vpmm_malloc (captured)", vpmm_malloc(c->t.pool, 3 * PG, c->a, &x));
        (void)TRY(c, "vpmm_malloc (captured)", vpmm_malloc(c->t.pool, 5000, c->a, &y));
        if (y != NULL)
            TRY_THEN_SURE(c, "vpmm_free (captured)", vpmm_free(c->t.pool, y));
        TRY_THEN_SURE(c, "vpmm_capture_end", vpmm_capture_end(c->t.pool, c->a, &g));
        (void)TRY(c, "vpmm_checkpoint_take", vpmm_checkpoint_take(gp, &ck));
        if (ck != NULL) {
            (void)TRY(c, "vpmm_checkpoint_reapply", vpmm_checkpoint_reapply(gp, ck, NULL, 0));
            vpmm_checkpoint_destroy(ck);
        }
        if (x != NULL)
            TRY_THEN_SURE(c, "vpmm_free (graph pool)", vpmm_free(c->t.pool, x));
        if (g != NULL)
            TRY_THEN_SURE(c, "vpmm_graph_destroy", vpmm_graph_destroy(c->t.pool, g));
    }
    TRY_THEN_SURE(c, "vpmm_graph_pool_release", vpmm_graph_pool_release(gp));
}

/* CUDA IPC on the pool's own memory: export, open, close, unshare (a share that no open took
 * over, when the open was refused, is ended by the unshare before the block's free). */
static void ipc(ctx_t *c)
{
    unsigned char h[1024];
    size_t len = 0;
    void *q = NULL, *p;
    if (c->nlive == 0)
        return;
    p = c->live[c->nlive - 1];
    if (TRY(c, "vpmm_ipc_export", vpmm_ipc_export(c->t.pool, p, h, sizeof h, &len)) ==
            VPMM_SUCCESS &&
        TRY(c, "vpmm_ipc_open", vpmm_ipc_open(c->t.pool, h, len, &q)) == VPMM_SUCCESS)
        TRY_THEN_SURE(c, "vpmm_ipc_close", vpmm_ipc_close(c->t.pool, q));
    TRY_THEN_SURE(c, "vpmm_ipc_unshare", vpmm_ipc_unshare(c->t.pool, p));
}

static void scenario(ctx_t *c)
{
    FILE *sink = fopen("/dev/null", "w");
    size_t regions = 0;
    assert_non_null(sink);
    growth_trim(c);
    do_malloc(c, 3 * PG, c->a);    /* growth */
    do_malloc(c, 1000, c->a);      /* sub-page */
    do_malloc(c, PG + 4096, c->b); /* another stream */
    if (c->nlive > 1)              /* another stream uses the sub-page block */
        (void)TRY(c, "vpmm_record_stream", vpmm_record_stream(c->t.pool, c->live[1], c->b));
    vpmm_host_enqueue(c->t.host, c->b);
    do_free_oldest(c);          /* pending on a */
    do_free_oldest(c);          /* deferred on b's work */
    do_malloc(c, 5 * PG, c->b); /* defragments across streams (or grows) */
    do_malloc(c, 300, NULL);    /* the legacy stream */
    vpmm_host_complete_all(c->t.host);
    (void)TRY(c, "vpmm_trim", vpmm_trim(c->t.pool, 0, NULL));
    if (c->t.pool->worker != NULL) {
        oom_armed = 1;
        vpmm_i_worker_step(c->t.pool); /* its pass: collect, unmap, commit */
        oom_armed = 0;
        check(c);
    }
    {
        vpmm_stats_t st;
        (void)TRY(c, "vpmm_get_stats", vpmm_get_stats(c->t.pool, &st));
    }
    (void)TRY(c, "vpmm_pool_walk", vpmm_pool_walk(c->t.pool, count_region, &regions));
    (void)TRY(c, "vpmm_pool_dump", vpmm_pool_dump(c->t.pool, sink));
    do_malloc(c, 7 * PG, c->a);
    ipc(c);
    graphs(c);
    while (c->nlive > 0)
        do_free_oldest(c);
    fclose(sink);
}

/* One run with allocation #n refused; returns how many were refused (0: the sweep is over). */
static unsigned long run_once(unsigned long n, int worker, size_t handle_pages)
{
    ctx_t c;
    vpmm_host_options_t ho = { 0 };
    vpmm_config_t cfg;
    vpmm_options_t opt;
    vpmm_status_t st;
    memset(&c, 0, sizeof c);
    oom_start(n);
    run_n = n;
    /* The test's drivers, unarmed; then the pool's creation, armed (as tpool_open, which checks
     * the new pool at once: that check must not run armed). */
    assert_int_equal(vpmm_host_open(&ho, &c.t.host), VPMM_DRV_OK);
    assert_int_equal(vpmm_fault_wrap(c.t.host, &c.t.fault), VPMM_DRV_OK);
    vpmm_config_init(&cfg);
    cfg.ignore_env = 1;
    cfg.backend = VPMM_BACKEND_HOST;
    cfg.va_size = 32 * GiB;
    cfg.worker = worker;
    cfg.handle_pages = handle_pages;
    assert_int_equal(vpmm_i_options_resolve(&cfg, &opt), VPMM_SUCCESS);
    st = OOM_ARMED(vpmm_a_pool_create_on(&opt, c.t.fault, 0, &c.t.pool));
    assert_clear_status(st, "pool creation");
    if (st != VPMM_SUCCESS) {
        assert_no_driver_leaks(c.t.fault);
        c.t.fault->close(c.t.fault);
        return oom_refused();
    }
    if (worker)
        vpmm_i_worker_hold(c.t.pool, 1); /* its pass runs where the scenario says */
    c.a = vpmm_host_stream_create(c.t.host);
    c.b = vpmm_host_stream_create(c.t.host);
    scenario(&c);
    vpmm_host_complete_all(c.t.host);
    assert_int_equal(vpmm_trim(c.t.pool, 0, NULL), VPMM_SUCCESS);
    if (worker)
        vpmm_i_worker_hold(c.t.pool, 0);
    tpool_close(&c.t);
    return oom_refused();
}

static void sweep(int worker, size_t handle_pages)
{
    unsigned long n, total = 0;
    for (n = 1; n < 100000; n++) {
        unsigned long r = run_once(n, worker, handle_pages);
        if (r == 0)
            break;
        total += r;
    }
    print_message("host OOM sweep (worker %s, %zu-page handles): %lu runs, each with one "
                  "allocation refused\n",
                  worker ? "on" : "off", handle_pages ? handle_pages : 1, n - 1);
    assert_true(n > 20); /* the scenario makes allocations to refuse */
    assert_true(total == n - 1);
}

static void test_sweep(void **state)
{
    (void)state;
    sweep(0, 0);
}

/* Handles of 8 pages: the growth trim's host memory (its candidates, the room for failed
 * releases) refused too. */
static void test_sweep_with_8_page_handles(void **state)
{
    (void)state;
    sweep(0, 8);
}

static void test_sweep_with_worker(void **state)
{
    (void)state;
    sweep(1, 0);
}

/* The background worker's thread refused (pthread_create fails): the pool's creation fails with
 * VPMM_ERROR_HOST_OUT_OF_MEMORY and a message naming VPMM_WORKER=0, the driver holds nothing
 * (and LeakSanitizer, in the sanitizer stage, sees no lost block); the next creation works. */
static void test_worker_thread_refused(void **state)
{
    tpool_t t;
    vpmm_host_options_t ho = { 0 };
    vpmm_config_t cfg;
    vpmm_options_t opt;
    void *p;
    (void)state;
    memset(&t, 0, sizeof t);
    assert_int_equal(vpmm_host_open(&ho, &t.host), VPMM_DRV_OK);
    assert_int_equal(vpmm_fault_wrap(t.host, &t.fault), VPMM_DRV_OK);
    vpmm_config_init(&cfg);
    cfg.ignore_env = 1;
    cfg.backend = VPMM_BACKEND_HOST;
    cfg.va_size = 32 * GiB;
    cfg.worker = 1;
    assert_int_equal(vpmm_i_options_resolve(&cfg, &opt), VPMM_SUCCESS);
    refuse_threads = 1;
    assert_int_equal(vpmm_a_pool_create_on(&opt, t.fault, 0, &t.pool),
                     VPMM_ERROR_HOST_OUT_OF_MEMORY);
    refuse_threads = 0;
    assert_null(t.pool);
    assert_non_null(strstr(vpmm_last_error(), "background worker"));
    assert_non_null(strstr(vpmm_last_error(), "VPMM_WORKER=0"));
    assert_no_driver_leaks(t.fault);
    assert_int_equal(vpmm_a_pool_create_on(&opt, t.fault, 0, &t.pool), VPMM_SUCCESS);
    assert_non_null(t.pool->worker);
    p = tmalloc(t.pool, 3 * MiB, NULL);
    tfree(t.pool, p);
    tpool_close(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sweep),
        cmocka_unit_test(test_sweep_with_8_page_handles),
        cmocka_unit_test(test_sweep_with_worker),
        cmocka_unit_test(test_worker_thread_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
