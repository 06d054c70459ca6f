/*
 * test_report.c — the out-of-memory report and the figures behind it (src/core/report.c): the
 * largest free span (ready, pending, cached and graph-pool memory all count), utilization and
 * fragmentation in vpmm_get_stats, the report's paragraph for a device refusal and for the cap
 * (VPMM_MAX_BYTES), for the address space, graph pools in it, what defragmentation can gather
 * (movable pages only), VPMM_VERBOSE printing it on stderr (a pool's first reports in full, then
 * only their count, printed at destroy), and bad arguments.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph_test_util.h"

static void report_of(vpmm_pool_t *pool, char *buf, size_t len)
{
    assert_int_equal(vpmm_pool_oom_report(pool, buf, len), VPMM_SUCCESS);
    print_message("%s\n", buf);
}

static void test_figures(void **state)
{
    tpool_t t;
    vpmm_stream_t s;
    vpmm_stats_t st;
    void *a, *b, *c, *d;
    (void)state;
    tpool_open(&t, NULL);
    s = vpmm_host_stream_create(t.host);
    st = tstats(t.pool);
    assert_int_equal(st.largest_free_bytes, 0);
    assert_true(st.utilization == 1.0 && st.fragmentation == 0.0); /* nothing mapped, none free */

    a = tmalloc(t.pool, 3 * MiB, s);
    b = tmalloc(t.pool, 1 * MiB, s); /* 4 MiB mapped, all live */
    st = tstats(t.pool);
    assert_int_equal(st.largest_free_bytes, 0);
    assert_true(st.utilization == 1.0);
    tfree(t.pool, a); /* cached on s: still a free span of 3 MiB */
    st = tstats(t.pool);
    assert_int_equal(st.largest_free_bytes, 3 * MiB);
    assert_true(st.utilization == 0.25);
    assert_true(st.fragmentation == 0.0); /* one free piece */
    tfree(t.pool, b);
    /* Two pages in four 1 MiB blocks; the first and third freed: two separate 1 MiB pieces. */
    a = tmalloc(t.pool, 4 * MiB, s); /* takes the free 4 MiB back */
    tfree(t.pool, a);
    {
        void *q[4];
        for (int i = 0; i < 4; i++)
            q[i] = tmalloc(t.pool, 1 * MiB, s);
        tfree(t.pool, q[0]);
        tfree(t.pool, q[2]);
        st = tstats(t.pool);
        assert_int_equal(st.free_bytes, 2 * MiB);
        assert_int_equal(st.largest_free_bytes, 1 * MiB);
        assert_true(st.fragmentation == 0.5);
        assert_true(st.utilization == 0.5);
        tfree(t.pool, q[1]);
        tfree(t.pool, q[3]);
    }
    (void)c;
    (void)d;
    tpool_close(&t);
}

static void test_device_refusal(void **state)
{
    tpool_t t;
    vpmm_stream_t s;
    char buf[2048];
    void *a, *b, *p = NULL;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .memory_limit = 8 * MiB });
    s = vpmm_host_stream_create(t.host);
    report_of(t.pool, buf, sizeof buf);
    assert_string_equal(buf, ""); /* none yet */
    a = tmalloc(t.pool, 3 * MiB, s);
    b = tmalloc(t.pool, 2 * MiB, s);
    tfree(t.pool, a); /* 3 MiB free, pending on s */
    assert_int_equal(vpmm_malloc(t.pool, 9 * MiB, s, &p), VPMM_ERROR_OUT_OF_MEMORY);
    report_of(t.pool, buf, sizeof buf);
    assert_non_null(strstr(
        buf, "out of memory: the device has 2 MiB free of 8 MiB; 0 B of it is held outside this "
             "pool"));
    assert_non_null(strstr(buf, "The pool maps 6 MiB: 2 MiB live in 1 allocations"));
    /* a's 3 MiB and the 1 MiB after b are not adjacent; a covers one whole page. */
    assert_non_null(strstr(buf, "and 4 MiB free, whose largest span is 3 MiB; 2 MiB of the shared "
                                "pool's free memory is in whole pages that defragmentation "
                                "gathers without new memory, 4 MiB is still pending"));
    assert_non_null(strstr(buf, "Zombies"));
    assert_non_null(strstr(buf, "To make room"));
    assert_null(strstr(buf, "Graph pools"));
    /* A shorter buffer gets a terminated prefix. */
    assert_int_equal(vpmm_pool_oom_report(t.pool, buf, 10), VPMM_SUCCESS);
    assert_int_equal(strlen(buf), 9);
    assert_int_equal(vpmm_pool_oom_report(t.pool, NULL, 0), VPMM_SUCCESS);
    assert_int_equal(vpmm_pool_oom_report(t.pool, NULL, 5), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vpmm_pool_oom_report(NULL, buf, sizeof buf), VPMM_ERROR_INVALID_ARGUMENT);
    tfree(t.pool, b);
    tpool_close(&t);
}

#if VPMM_HAVE_GRAPHS
static void test_cap_and_graph_pools(void **state)
{
    tpool_t t;
    vpmm_stream_t s;
    vpmm_graph_pool_t *gp;
    vpmm_graph_t g;
    char buf[2048];
    void *a, *priv, *p = NULL;
    vpmm_stats_t st;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .max_bytes = 10 * MiB + 1 }); /* a cap of 5 pages */
    s = vpmm_host_stream_create(t.host);
    assert_int_equal(tstats(t.pool).max_bytes, 10 * MiB);
    gp = tgp_create(&t);
    tcapture_begin(&t, gp, s);
    priv = tmalloc(t.pool, 3 * MiB, s); /* the graph pool maps 4 MiB */
    g = tcapture_end(&t, s);
    a = tmalloc(t.pool, 5 * MiB, NULL); /* 6 MiB more: 10 MiB, the cap */
    assert_int_equal(vpmm_malloc(t.pool, 2 * MiB, NULL, &p), VPMM_ERROR_OUT_OF_MEMORY);
    CHECK_POOL(t.pool);
    report_of(t.pool, buf, sizeof buf);
    assert_non_null(strstr(buf, "vpmm_malloc(2 MiB) on the legacy stream: out of memory: the "
                                "pool's cap (VPMM_MAX_BYTES = 10 MiB) leaves room for 0 B more."));
    assert_non_null(strstr(buf, "Graph pools: g"));
    assert_non_null(strstr(buf, "maps 4 MiB (3 MiB live, 1 MiB free, pinned by its graphs)."));
    assert_non_null(strstr(buf, "raise VPMM_MAX_BYTES"));
    assert_non_null(strstr(vpmm_last_error(), "VPMM_MAX_BYTES = 10 MiB"));
    st = tstats(t.pool);
    assert_int_equal(st.mapped_bytes, 10 * MiB);
    assert_int_equal(st.ooms, 1);
    /* 1 MiB is still free in the last shared page: a small request fits under the cap. */
    p = tmalloc(t.pool, 512 * KiB, NULL);
    tfree(t.pool, p);
    tfree(t.pool, a);
    tfree(t.pool, priv);
    assert_int_equal(vpmm_graph_destroy(t.pool, g), VPMM_SUCCESS);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    tpool_close(&t);
}

/*
 * "Whole pages that defragmentation gathers" counts only what it can move: not the free pages of
 * a multi-page handle partly in use (handles move whole: those are said apart), nor memory
 * pending on a stream that is being captured (no marker can be recorded there).
 */
static void test_movable_pages_only(void **state)
{
    tpool_t t;
    vpmm_stream_t s, c;
    vpmm_graph_pool_t *gp;
    vpmm_graph_t g;
    char buf[2048];
    void *big, *x, *small, *p = NULL;
    (void)state;
    /* No size classes: the premise is a small block inside the big handle. */
    tpool_open(&t, &(tpool_params_t){
                       .memory_limit = 1 * GiB + 8 * MiB, .cache_percent = -1, .small_bytes = 1 });
    s = vpmm_host_stream_create(t.host);
    c = vpmm_host_stream_create(t.host);
    x = tmalloc(t.pool, 4 * MiB, c); /* two one-page handles */
    big = tmalloc(t.pool, GiB, s);   /* one 1 GiB handle */
    tfree(t.pool, big);
    small = tmalloc(t.pool, 4096, s); /* in the big handle: it can no longer move */
    gp = tgp_create(&t);
    tcapture_begin(&t, gp, c);
    tfree(t.pool, x); /* pending on c, which is being captured: no marker until it ends */
    assert_int_equal(vpmm_malloc(t.pool, GiB + 8 * MiB, s, &p), VPMM_ERROR_OUT_OF_MEMORY);
    report_of(t.pool, buf, sizeof buf);
    assert_non_null(strstr(buf, "; 0 B of the shared pool's free memory is in whole pages that "
                                "defragmentation gathers"));
    /* The big handle's other 511 pages are free but cannot move: said apart. */
    assert_non_null(strstr(buf, " 1022 MiB more is in free whole pages of handles that also hold "
                                "memory in use or pending elsewhere: a handle moves only whole."));
    g = tcapture_end(&t, c);
    /* The capture over, c's pages can move: they count. */
    assert_int_equal(vpmm_malloc(t.pool, GiB + 8 * MiB, s, &p), VPMM_ERROR_OUT_OF_MEMORY);
    report_of(t.pool, buf, sizeof buf);
    assert_non_null(strstr(buf, "; 4 MiB of the shared pool's free memory is in whole pages that "
                                "defragmentation gathers"));
    tfree(t.pool, small);
    assert_int_equal(vpmm_graph_destroy(t.pool, g), VPMM_SUCCESS);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    tpool_close(&t);
}
#endif

/* Running out of address space is reported as such, not as the device's memory. */
static void test_address_space_exhaustion(void **state)
{
    tpool_t t;
    char buf[2048];
    void *a, *p = NULL;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .va_size = 16 * MiB });
    a = tmalloc(t.pool, 16 * MiB, NULL); /* the first chunk is full */
    vpmm_fault_fail_nth(t.fault, VPMM_DRV_VA_RESERVE, 1, VPMM_DRV_OUT_OF_MEMORY);
    assert_int_equal(vpmm_malloc(t.pool, 2 * MiB, NULL, &p), VPMM_ERROR_OUT_OF_MEMORY);
    CHECK_POOL(t.pool);
    report_of(t.pool, buf, sizeof buf);
    assert_non_null(strstr(buf, "out of memory: no virtual address space is left for another VA "
                                "chunk (the pool reserves 16 MiB in 1 chunks; the device has "));
    assert_null(strstr(buf, "raise VPMM_MAX_BYTES"));
    assert_non_null(strstr(vpmm_last_error(), "no virtual address space"));
    /* The next failure is the device's again. */
    vpmm_fault_fail_from(t.fault, VPMM_DRV_MEM_CREATE, 1, VPMM_DRV_OUT_OF_MEMORY);
    assert_int_equal(vpmm_malloc(t.pool, 8 * MiB, NULL, &p), VPMM_ERROR_OUT_OF_MEMORY);
    vpmm_fault_clear(t.fault);
    report_of(t.pool, buf, sizeof buf);
    assert_non_null(strstr(buf, "out of memory: the device has "));
    CHECK_POOL(t.pool);
    tfree(t.pool, a);
    tpool_close(&t);
}

/* stderr into a temporary file, between capture_begin and capture_end (which returns it). */
typedef struct capture {
    FILE *tmp;
    int saved;
} capture_t;

static void capture_begin(capture_t *c)
{
    c->tmp = tmpfile();
    assert_non_null(c->tmp);
    c->saved = dup(STDERR_FILENO);
    fflush(stderr);
    assert_true(dup2(fileno(c->tmp), STDERR_FILENO) >= 0);
}

static void capture_end(capture_t *c, char *out, size_t len)
{
    size_t n;
    fflush(stderr);
    assert_true(dup2(c->saved, STDERR_FILENO) >= 0);
    close(c->saved);
    rewind(c->tmp);
    n = fread(out, 1, len - 1, c->tmp);
    out[n] = '\0';
    fclose(c->tmp);
}

static size_t occurrences(const char *s, const char *what)
{
    size_t n = 0;
    for (const char *p = strstr(s, what); p != NULL; p = strstr(p + 1, what))
        n++;
    return n;
}

/*
 * A program that runs out of memory thousands of times (a replay under a cap) must not get
 * thousands of paragraphs: the first VPMM_VERBOSE_OOM_REPORTS in full, one line saying no more
 * follow, and at destroy how many there were. vpmm_pool_oom_report still has the latest.
 */
static void test_verbose_rate_limited(void **state)
{
    enum { FAILURES = 3 * VPMM_VERBOSE_OOM_REPORTS + 5 };
    vpmm_config_t cfg;
    vpmm_pool_t *pool;
    static char out[64 * 1024];
    char buf[2048], want[128];
    capture_t c;
    void *p = NULL;
    (void)state;
    vpmm_config_init(&cfg);
    cfg.backend = VPMM_BACKEND_HOST;
    cfg.ignore_env = 1;
    cfg.va_size = 1 * GiB;
    cfg.host_memory = 4 * MiB;
    cfg.verbose = 1;
    assert_int_equal(vpmm_pool_create(&cfg, &pool), VPMM_SUCCESS);
    capture_begin(&c);
    for (size_t i = 0; i < FAILURES; i++)
        assert_int_equal(vpmm_malloc(pool, (6 + i) * MiB, NULL, &p), VPMM_ERROR_OUT_OF_MEMORY);
    assert_int_equal(vpmm_pool_oom_report(pool, buf, sizeof buf), VPMM_SUCCESS);
    assert_int_equal(vpmm_pool_destroy(pool), VPMM_SUCCESS);
    capture_end(&c, out, sizeof out);
    print_message("stderr: %s", out);
    assert_int_equal(occurrences(out, "out of memory: the device has"), VPMM_VERBOSE_OOM_REPORTS);
    assert_non_null(strstr(out, "vpmm: vpmm_malloc(6 MiB) on the legacy stream"));
    snprintf(want, sizeof want, "vpmm_malloc(%d MiB)", 6 + VPMM_VERBOSE_OOM_REPORTS - 1);
    assert_non_null(strstr(out, want)); /* the last one printed */
    snprintf(want, sizeof want, "vpmm_malloc(%d MiB)", 6 + VPMM_VERBOSE_OOM_REPORTS);
    assert_null(strstr(out, want)); /* the first one only counted */
    assert_int_equal(occurrences(out, "VPMM_VERBOSE prints no more"), 1);
    snprintf(want, sizeof want,
             "vpmm: pool destroyed after %d out-of-memory reports; the last %d were not printed",
             FAILURES, FAILURES - VPMM_VERBOSE_OOM_REPORTS);
    assert_non_null(strstr(out, want));
    snprintf(want, sizeof want, "vpmm_malloc(%d MiB)", 6 + FAILURES - 1);
    assert_non_null(strstr(buf, want)); /* the report itself is the latest */
}

/* Under the limit, nothing is summarised at destroy: every report was printed. */
static void test_verbose_no_summary_under_limit(void **state)
{
    vpmm_config_t cfg;
    vpmm_pool_t *pool;
    char out[16 * 1024];
    capture_t c;
    void *p = NULL;
    (void)state;
    vpmm_config_init(&cfg);
    cfg.backend = VPMM_BACKEND_HOST;
    cfg.ignore_env = 1;
    cfg.va_size = 1 * GiB;
    cfg.host_memory = 4 * MiB;
    cfg.verbose = 1;
    assert_int_equal(vpmm_pool_create(&cfg, &pool), VPMM_SUCCESS);
    capture_begin(&c);
    for (int i = 0; i < 2; i++)
        assert_int_equal(vpmm_malloc(pool, 6 * MiB, NULL, &p), VPMM_ERROR_OUT_OF_MEMORY);
    assert_int_equal(vpmm_pool_destroy(pool), VPMM_SUCCESS);
    capture_end(&c, out, sizeof out);
    assert_int_equal(occurrences(out, "vpmm: vpmm_malloc(6 MiB)"), 2);
    assert_null(strstr(out, "pool destroyed after"));
    assert_null(strstr(out, "prints no more"));
}

/* VPMM_VERBOSE=1 prints the report on stderr (captured here through a temporary file). */
static void test_verbose_prints(void **state)
{
    vpmm_config_t cfg;
    vpmm_pool_t *pool;
    char out[4096];
    capture_t c;
    void *p = NULL;
    (void)state;
    vpmm_config_init(&cfg);
    cfg.backend = VPMM_BACKEND_HOST;
    cfg.ignore_env = 1;
    cfg.va_size = 1 * GiB;
    cfg.host_memory = 4 * MiB;
    cfg.verbose = 1;
    assert_int_equal(vpmm_pool_create(&cfg, &pool), VPMM_SUCCESS);
    capture_begin(&c);
    assert_int_equal(vpmm_malloc(pool, 6 * MiB, NULL, &p), VPMM_ERROR_OUT_OF_MEMORY);
    capture_end(&c, out, sizeof out);
    print_message("stderr: %s", out);
    assert_non_null(strstr(out, "vpmm: vpmm_malloc(6 MiB) on the legacy stream: out of memory"));
    assert_int_equal(vpmm_pool_destroy(pool), VPMM_SUCCESS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_figures),
        cmocka_unit_test(test_device_refusal),
#if VPMM_HAVE_GRAPHS
        cmocka_unit_test(test_cap_and_graph_pools),
        cmocka_unit_test(test_movable_pages_only),
#endif
        cmocka_unit_test(test_address_space_exhaustion),
        cmocka_unit_test(test_verbose_prints),
        cmocka_unit_test(test_verbose_rate_limited),
        cmocka_unit_test(test_verbose_no_summary_under_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
