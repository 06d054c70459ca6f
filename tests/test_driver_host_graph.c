/*
 * test_driver_host_graph.c — tests of the host emulation backend's graphs, executable graphs
 * and user objects (src/backends/host/driver_host_graph.c): capture through the driver table
 * (modes, threads, the graph capture_info shows), an invalidated capture dropping its graph's
 * references, and the reference model of user objects, whose destructors wait for graphs, execs and
 * their pending launches and may call the backend again.
 *
 * Destructors record what they see in a dtor_log_t (runs, and vpmm_host_check() from inside)
 * instead of asserting, and the test checks the log after the call that should have run them.
 * Every test opens its own instance and calls vpmm_host_check() after each mutation (CHECKED)
 * and before closing.
 */
#include "driver_host_test_util.h"

#include <pthread.h>

/* ---- capture through the table, graphs ---------------------------------------------------- */

/* The graph controls' failures have no entry in the enum either. */
static void expect_control_failure(vpmm_driver_t *d, vpmm_dres_t got, vpmm_dres_t want, int code,
                                   const char *call)
{
    assert_int_equal(got, want);
    assert_int_equal(d->last_code, code);
    assert_string_equal(d->last_call, call);
}

static vpmm_graph_t capture_graph(vpmm_driver_t *d, vpmm_stream_t s, vpmm_capture_status_t *st)
{
    vpmm_graph_t g = (vpmm_graph_t)(uintptr_t)0xbad;
    assert_int_equal(d->capture_info(d, s, st, NULL, &g), VPMM_DRV_OK);
    return g;
}

/* end_capture from another thread: the result is collected and checked on the test thread. */
typedef struct end_run {
    vpmm_driver_t *d;
    vpmm_stream_t s;
    vpmm_graph_t g;
    vpmm_dres_t res;
    int code;
} end_run_t;

static void *end_on_thread(void *arg)
{
    end_run_t *r = arg;
    r->res = r->d->end_capture(r->d, r->s, &r->g);
    r->code = r->d->last_code;
    return NULL;
}

static void test_capture_via_table(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    vpmm_capture_status_t st;
    vpmm_graph_t g = NULL, seen, other;
    uint64_t id = 0, id2 = 0;

    /* The legacy stream (NULL, 0x1) is refused; so are a bad mode and a stream already capturing,
     * originated or joined. None leaves a graph behind. */
    expect_failure(d, d->begin_capture(d, NULL, VPMM_CAPTURE_MODE_GLOBAL), VPMM_DRV_NOT_SUPPORTED,
                   900, VPMM_DRV_BEGIN_CAPTURE);
    expect_failure(d, d->begin_capture(d, (vpmm_stream_t)(uintptr_t)1, VPMM_CAPTURE_MODE_RELAXED),
                   VPMM_DRV_NOT_SUPPORTED, 900, VPMM_DRV_BEGIN_CAPTURE);
    expect_failure(d, d->begin_capture(d, S1, (vpmm_capture_mode_t)3), VPMM_DRV_INVALID, 1,
                   VPMM_DRV_BEGIN_CAPTURE);
    assert_int_equal(vpmm_host_graphs(d), 0);
    assert_null(capture_graph(d, S1, &st)); /* not capturing: no graph */
    assert_int_equal(st, VPMM_CAPTURE_NONE);

    assert_int_equal(d->begin_capture(d, S1, VPMM_CAPTURE_MODE_GLOBAL), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graphs(d), 1); /* the graph exists from the start */
    seen = capture_graph(d, S1, &st);
    assert_int_equal(st, VPMM_CAPTURE_ACTIVE);
    assert_non_null(seen);
    assert_int_equal(d->capture_info(d, S1, &st, &id, NULL), VPMM_DRV_OK); /* graph optional */
    assert_true(id != 0);
    expect_failure(d, d->begin_capture(d, S1, VPMM_CAPTURE_MODE_GLOBAL), VPMM_DRV_ERROR, 401,
                   VPMM_DRV_BEGIN_CAPTURE);
    /* A joined stream reports the same graph, cannot begin its own capture, nor end this one. */
    vpmm_drv_event_t ev;
    assert_int_equal(d->event_create(d, NULL, &ev), VPMM_DRV_OK);
    assert_int_equal(d->event_record(d, ev, S1), VPMM_DRV_OK);
    assert_int_equal(d->stream_wait_event(d, S2, ev), VPMM_DRV_OK);
    assert_ptr_equal(capture_graph(d, S2, &st), seen);
    expect_failure(d, d->begin_capture(d, S2, VPMM_CAPTURE_MODE_GLOBAL), VPMM_DRV_ERROR, 401,
                   VPMM_DRV_BEGIN_CAPTURE);
    expect_failure(d, d->end_capture(d, S2, &other), VPMM_DRV_ERROR, 903, VPMM_DRV_END_CAPTURE);
    expect_failure(d, d->end_capture(d, S3, &other), VPMM_DRV_ERROR, 401, VPMM_DRV_END_CAPTURE);
    expect_failure(d, d->end_capture(d, S1, NULL), VPMM_DRV_INVALID, 1, VPMM_DRV_END_CAPTURE);
    /* The graph being captured cannot be destroyed. */
    expect_control_failure(d, vpmm_host_graph_destroy(d, seen), VPMM_DRV_ERROR, 401,
                           "cuGraphDestroy");
    /* Global mode: only the thread that began the capture may end it (908; it goes on). */
    end_run_t run = { .d = d, .s = S1 };
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, end_on_thread, &run), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(run.res, VPMM_DRV_ERROR);
    assert_int_equal(run.code, 908);
    assert_int_equal(capture_status(d, S1, NULL), VPMM_CAPTURE_ACTIVE);
    CHECKED(d);

    /* A clean end returns the graph capture_info showed; the joined stream leaves too. */
    assert_int_equal(d->end_capture(d, S1, &g), VPMM_DRV_OK);
    assert_ptr_equal(g, seen);
    assert_int_equal(capture_status(d, S1, NULL), VPMM_CAPTURE_NONE);
    assert_int_equal(capture_status(d, S2, NULL), VPMM_CAPTURE_NONE);
    assert_null(capture_graph(d, S1, &st));
    assert_int_equal(vpmm_host_graphs(d), 1);
    CHECKED(d);

    /* Relaxed mode: another thread may end it; a second capture has a new id and graph. */
    assert_int_equal(d->begin_capture(d, S1, VPMM_CAPTURE_MODE_RELAXED), VPMM_DRV_OK);
    assert_int_equal(d->capture_info(d, S1, &st, &id2, &other), VPMM_DRV_OK);
    assert_true(id2 > id);
    assert_true(other != g);
    run = (end_run_t){ .d = d, .s = S1 };
    assert_int_equal(pthread_create(&th, NULL, end_on_thread, &run), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(run.res, VPMM_DRV_OK);
    assert_ptr_equal(run.g, other);
    assert_int_equal(vpmm_host_graphs(d), 2);

    /* The controls: vpmm_host_end_capture destroys the graph it does not return. */
    assert_int_equal(vpmm_host_begin_capture(d, S3, &id), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graphs(d), 3);
    assert_non_null(capture_graph(d, S3, &st));
    assert_int_equal(vpmm_host_end_capture(d, S3), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graphs(d), 2);

    /* Graph handles are checked: a destroyed one is refused. */
    assert_int_equal(vpmm_host_graph_destroy(d, g), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graph_destroy(d, run.g), VPMM_DRV_OK);
    expect_control_failure(d, vpmm_host_graph_destroy(d, g), VPMM_DRV_INVALID, 1, "cuGraphDestroy");
    vpmm_host_exec_t x;
    assert_int_equal(vpmm_host_graph_instantiate(d, g, &x), VPMM_DRV_INVALID);
    assert_int_equal(vpmm_host_graph_instantiate(d, NULL, &x), VPMM_DRV_INVALID);
    assert_string_equal(d->last_call, "cuGraphInstantiate");
    assert_int_equal(d->event_destroy(d, ev), VPMM_DRV_OK);
    expect_empty(d);
    close_host(d);
}

/* An invalidated capture ends with 901 and no graph; the references its graph held are dropped. */
static void test_capture_invalidated_end(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    dtor_log_t log = { .d = d };
    vpmm_drv_event_t ev;
    vpmm_capture_status_t st;
    assert_int_equal(d->event_create(d, NULL, &ev), VPMM_DRV_OK);
    vpmm_drv_uobj_t o = uobj_new(d, &log);

    assert_int_equal(d->begin_capture(d, S1, VPMM_CAPTURE_MODE_GLOBAL), VPMM_DRV_OK);
    vpmm_graph_t cg = capture_graph(d, S1, &st);
    assert_int_equal(d->graph_retain_user_object(d, cg, o), VPMM_DRV_OK);
    assert_int_equal(d->event_record(d, ev, S1), VPMM_DRV_OK);
    assert_int_equal(d->event_query(d, ev), VPMM_DRV_ERROR); /* invalidates the capture */
    assert_null(capture_graph(d, S1, &st)); /* no valid graph for an invalidated capture */
    assert_int_equal(st, VPMM_CAPTURE_INVALIDATED);
    assert_int_equal(log.runs, 0);

    vpmm_graph_t g = (vpmm_graph_t)(uintptr_t)0x77;
    expect_failure(d, d->end_capture(d, S1, &g), VPMM_DRV_ERROR, 901, VPMM_DRV_END_CAPTURE);
    assert_ptr_equal(g, (vpmm_graph_t)(uintptr_t)0x77);               /* no graph */
    assert_int_equal(capture_status(d, S1, NULL), VPMM_CAPTURE_NONE); /* but over */
    assert_int_equal(vpmm_host_graphs(d), 0);
    assert_int_equal(log.runs, 1);
    assert_int_equal(log.bad_in_dtor, 0);
    assert_int_equal(vpmm_host_graph_destroy(d, cg), VPMM_DRV_INVALID);
    CHECKED(d);
    assert_int_equal(d->event_destroy(d, ev), VPMM_DRV_OK);
    expect_empty(d);
    close_host(d);
}

/* create -> release runs the destructor once, with its argument; misuse is refused. */
static void test_user_object_release(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    dtor_log_t log = { .d = d }, other = { .d = d };
    vpmm_drv_uobj_t o = NULL;
    expect_failure(d, d->user_object_create(d, NULL, &log, &o), VPMM_DRV_INVALID, 1,
                   VPMM_DRV_USER_OBJECT_CREATE);
    expect_failure(d, d->user_object_create(d, dtor, &log, NULL), VPMM_DRV_INVALID, 1,
                   VPMM_DRV_USER_OBJECT_CREATE);
    assert_null(o);
    assert_int_equal(vpmm_host_user_objects(d), 0);

    o = uobj_new(d, &log);
    vpmm_drv_uobj_t o2 = uobj_new(d, &other);
    assert_true(o != o2);
    assert_int_equal(vpmm_host_user_objects(d), 2);
    vpmm_host_counts_t c;
    vpmm_host_counts(d, &c);
    assert_int_equal(c.user_objects, 2);
    assert_int_equal(d->user_object_release(d, o), VPMM_DRV_OK);
    assert_int_equal(log.runs, 1);
    assert_int_equal(other.runs, 0);
    assert_int_equal(log.bad_in_dtor, 0);
    assert_int_equal(vpmm_host_user_objects(d), 1);
    CHECKED(d);

    /* The caller owned one reference: a second release, or a retain, is refused. */
    expect_failure(d, d->user_object_release(d, o), VPMM_DRV_INVALID, 1,
                   VPMM_DRV_USER_OBJECT_RELEASE);
    expect_failure(d, d->user_object_release(d, NULL), VPMM_DRV_INVALID, 1,
                   VPMM_DRV_USER_OBJECT_RELEASE);
    vpmm_graph_t g;
    assert_int_equal(d->begin_capture(d, S1, VPMM_CAPTURE_MODE_GLOBAL), VPMM_DRV_OK);
    assert_int_equal(d->end_capture(d, S1, &g), VPMM_DRV_OK);
    expect_failure(d, d->graph_retain_user_object(d, g, o), VPMM_DRV_INVALID, 1,
                   VPMM_DRV_GRAPH_RETAIN_USER_OBJECT);
    expect_failure(d, d->graph_retain_user_object(d, NULL, o2), VPMM_DRV_INVALID, 1,
                   VPMM_DRV_GRAPH_RETAIN_USER_OBJECT);
    /* Once moved to the graph, the reference is not the caller's any more. */
    assert_int_equal(d->graph_retain_user_object(d, g, o2), VPMM_DRV_OK);
    expect_failure(d, d->user_object_release(d, o2), VPMM_DRV_INVALID, 1,
                   VPMM_DRV_USER_OBJECT_RELEASE);
    expect_failure(d, d->graph_retain_user_object(d, g, o2), VPMM_DRV_INVALID, 1,
                   VPMM_DRV_GRAPH_RETAIN_USER_OBJECT);
    assert_int_equal(log.runs, 1);
    assert_int_equal(other.runs, 0);
    CHECKED(d);
    assert_int_equal(vpmm_host_graph_destroy(d, g), VPMM_DRV_OK);
    assert_int_equal(other.runs, 1);
    assert_int_equal(other.bad_in_dtor, 0);
    expect_empty(d);
    close_host(d);
}

/* A destructor may call the backend: here it releases a second object, whose destructor runs
 * before the outer release returns. */
typedef struct chain {
    vpmm_driver_t *d;
    vpmm_drv_uobj_t next;
    vpmm_dres_t res;
    dtor_log_t *log;
} chain_t;

static void chain_dtor(void *arg)
{
    chain_t *c = arg;
    dtor(c->log);
    c->res = c->d->user_object_release(c->d, c->next);
}

static void test_destructor_reenters(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    dtor_log_t first = { .d = d }, second = { .d = d };
    chain_t c = { .d = d, .res = VPMM_DRV_ERROR, .log = &first };
    c.next = uobj_new(d, &second);
    vpmm_drv_uobj_t o = NULL;
    assert_int_equal(d->user_object_create(d, chain_dtor, &c, &o), VPMM_DRV_OK);
    assert_int_equal(d->user_object_release(d, o), VPMM_DRV_OK);
    assert_int_equal(c.res, VPMM_DRV_OK);
    assert_int_equal(first.runs, 1);
    assert_int_equal(second.runs, 1);
    assert_int_equal(first.bad_in_dtor + second.bad_in_dtor, 0);
    expect_empty(d);
    close_host(d);
}

/*
 * The whole life of a user object handed to a captured graph: the graph, then an exec made from
 * it, then that exec's pending launch keep it alive; the destructor runs once, from the progress
 * call that completes the launch.
 */
static void test_user_object_lifecycle(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    dtor_log_t log = { .d = d };
    vpmm_capture_status_t st;
    vpmm_drv_uobj_t o = uobj_new(d, &log);

    assert_int_equal(d->begin_capture(d, S1, VPMM_CAPTURE_MODE_GLOBAL), VPMM_DRV_OK);
    vpmm_graph_t cg = capture_graph(d, S1, &st);
    assert_int_equal(d->graph_retain_user_object(d, cg, o), VPMM_DRV_OK); /* while capturing */
    CHECKED(d);
    vpmm_graph_t g = NULL;
    assert_int_equal(d->end_capture(d, S1, &g), VPMM_DRV_OK);
    assert_ptr_equal(g, cg);
    vpmm_host_exec_t x = NULL;
    assert_int_equal(vpmm_host_graph_instantiate(d, g, NULL), VPMM_DRV_INVALID);
    assert_int_equal(vpmm_host_graph_instantiate(d, g, &x), VPMM_DRV_OK);
    assert_non_null(x);
    assert_int_equal(vpmm_host_graphs(d), 2);
    CHECKED(d);

    assert_int_equal(vpmm_host_graph_destroy(d, g), VPMM_DRV_OK);
    assert_int_equal(log.runs, 0); /* the exec holds it */
    CHECKED(d);

    assert_int_equal(vpmm_host_enqueue(d, S2), 1); /* pending work ahead of the launch */
    assert_int_equal(vpmm_host_graph_launch(d, x, S2), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_stream_enqueued(d, S2), 2);
    assert_int_equal(vpmm_host_exec_destroy(d, x), VPMM_DRV_OK);
    assert_int_equal(log.runs, 0); /* the launch is pending */
    assert_int_equal(vpmm_host_graphs(d), 1);
    assert_int_equal(vpmm_host_user_objects(d), 1);
    /* The handle died at destroy; the exec lives on. */
    expect_control_failure(d, vpmm_host_exec_destroy(d, x), VPMM_DRV_INVALID, 1,
                           "cuGraphExecDestroy");
    expect_control_failure(d, vpmm_host_graph_launch(d, x, S2), VPMM_DRV_INVALID, 1,
                           "cuGraphLaunch");
    CHECKED(d);

    assert_int_equal(vpmm_host_advance(d, S2, 1), 1); /* the work ahead only */
    assert_int_equal(log.runs, 0);
    CHECKED(d);
    vpmm_host_complete(d, S2);
    assert_int_equal(log.runs, 1);
    assert_int_equal(log.bad_in_dtor, 0);
    vpmm_host_complete_all(d);
    assert_int_equal(d->synchronize(d), VPMM_DRV_OK);
    assert_int_equal(log.runs, 1); /* exactly once */
    expect_empty(d);
    close_host(d);
}

/* Several user objects on one graph, and an exec launched on two streams. */
static void test_several_user_objects_one_graph(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    enum { n = 5 };
    dtor_log_t log[n];
    vpmm_drv_uobj_t o[n];
    vpmm_graph_t g;
    vpmm_host_exec_t x;
    assert_int_equal(d->begin_capture(d, S1, VPMM_CAPTURE_MODE_THREAD_LOCAL), VPMM_DRV_OK);
    assert_int_equal(d->end_capture(d, S1, &g), VPMM_DRV_OK);
    for (int i = 0; i < n; i++) {
        log[i] = (dtor_log_t){ .d = d };
        o[i] = uobj_new(d, &log[i]);
        if (i < n - 1) /* the last one stays the caller's */
            assert_int_equal(d->graph_retain_user_object(d, g, o[i]), VPMM_DRV_OK);
    }
    assert_int_equal(vpmm_host_graph_instantiate(d, g, &x), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graph_destroy(d, g), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graph_launch(d, x, S1), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graph_launch(d, x, S2), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graph_launch(d, x, S1), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_exec_destroy(d, x), VPMM_DRV_OK);
    CHECKED(d);
    vpmm_host_complete(d, S1);
    for (int i = 0; i < n; i++)
        assert_int_equal(log[i].runs, 0); /* the launch on S2 is still pending */
    assert_int_equal(vpmm_host_advance(d, S2, 5), 1);
    for (int i = 0; i < n - 1; i++) {
        assert_int_equal(log[i].runs, 1);
        assert_int_equal(log[i].bad_in_dtor, 0);
    }
    assert_int_equal(log[n - 1].runs, 0);
    assert_int_equal(vpmm_host_user_objects(d), 1);
    assert_int_equal(vpmm_host_graphs(d), 0);
    assert_int_equal(d->user_object_release(d, o[n - 1]), VPMM_DRV_OK);
    assert_int_equal(log[n - 1].runs, 1);
    expect_empty(d);
    close_host(d);
}

/* Two execs of one graph each hold their own reference. */
static void test_two_execs_of_one_graph(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    dtor_log_t log = { .d = d };
    vpmm_drv_uobj_t o = uobj_new(d, &log);
    vpmm_graph_t g;
    vpmm_host_exec_t a, b;
    assert_int_equal(d->begin_capture(d, S1, VPMM_CAPTURE_MODE_GLOBAL), VPMM_DRV_OK);
    assert_int_equal(d->end_capture(d, S1, &g), VPMM_DRV_OK);
    assert_int_equal(d->graph_retain_user_object(d, g, o), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graph_instantiate(d, g, &a), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graph_instantiate(d, g, &b), VPMM_DRV_OK);
    assert_true(a != b);
    assert_int_equal(vpmm_host_graphs(d), 3);
    assert_int_equal(vpmm_host_graph_destroy(d, g), VPMM_DRV_OK);

    /* a: launched and completed before its destroy, so it goes at once; b still holds it. */
    assert_int_equal(vpmm_host_graph_launch(d, a, S1), VPMM_DRV_OK);
    vpmm_host_complete(d, S1);
    assert_int_equal(vpmm_host_exec_destroy(d, a), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graphs(d), 1);
    assert_int_equal(log.runs, 0);

    /* b: its launch waits (through a barrier) for work on S3; completing S2 completes S3 first,
     * and the destroyed b goes with it. */
    vpmm_drv_event_t ev;
    assert_int_equal(d->event_create(d, NULL, &ev), VPMM_DRV_OK);
    vpmm_host_enqueue(d, S3);
    assert_int_equal(d->event_record(d, ev, S3), VPMM_DRV_OK);
    assert_int_equal(d->stream_wait_event(d, S2, ev), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graph_launch(d, b, S2), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_exec_destroy(d, b), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_advance(d, S2, 1), 0); /* blocked by the barrier */
    assert_int_equal(log.runs, 0);
    CHECKED(d);
    vpmm_host_complete(d, S2);
    assert_int_equal(log.runs, 1);
    assert_int_equal(log.bad_in_dtor, 0);
    assert_int_equal(d->event_destroy(d, ev), VPMM_DRV_OK);
    expect_empty(d);
    close_host(d);
}

/* Instantiation while capturing (CUDA permits it), launch rules, and synchronize as progress. */
static void test_exec_rules(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    dtor_log_t log = { .d = d };
    vpmm_capture_status_t st;
    vpmm_drv_uobj_t o = uobj_new(d, &log);
    vpmm_host_exec_t x;
    vpmm_graph_t g;
    assert_int_equal(d->begin_capture(d, S1, VPMM_CAPTURE_MODE_GLOBAL), VPMM_DRV_OK);
    vpmm_graph_t cg = capture_graph(d, S1, &st);
    assert_int_equal(d->graph_retain_user_object(d, cg, o), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graph_instantiate(d, cg, &x), VPMM_DRV_OK);
    /* Launching into a capture is not emulated. */
    expect_control_failure(d, vpmm_host_graph_launch(d, x, S1), VPMM_DRV_NOT_SUPPORTED, 801,
                           "cuGraphLaunch");
    assert_int_equal(vpmm_host_stream_enqueued(d, S1), 0);
    assert_int_equal(d->end_capture(d, S1, &g), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graph_destroy(d, g), VPMM_DRV_OK);
    assert_int_equal(log.runs, 0);

    /* The legacy stream takes launches; synchronize completes them and frees the exec. */
    assert_int_equal(vpmm_host_graph_launch(d, x, NULL), VPMM_DRV_OK);
    assert_false(vpmm_host_stream_idle(d, NULL));
    assert_int_equal(vpmm_host_exec_destroy(d, x), VPMM_DRV_OK);
    assert_int_equal(log.runs, 0);
    CHECKED(d);
    assert_int_equal(d->synchronize(d), VPMM_DRV_OK);
    assert_int_equal(log.runs, 1);
    assert_int_equal(log.bad_in_dtor, 0);
    expect_empty(d);
    close_host(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_capture_via_table),
        cmocka_unit_test(test_capture_invalidated_end),
        cmocka_unit_test(test_user_object_release),
        cmocka_unit_test(test_destructor_reenters),
        cmocka_unit_test(test_user_object_lifecycle),
        cmocka_unit_test(test_several_user_objects_one_graph),
        cmocka_unit_test(test_two_execs_of_one_graph),
        cmocka_unit_test(test_exec_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
