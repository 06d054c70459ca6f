/*
 * test_driver_host_thread.c — tests of the host emulation backend's CUDA special stream handles
 * (src/backends/host/driver_host_stream.c): per-thread streams (0x2) driven from real threads, each
 * thread its own stream behind the same handle value, thread tokens never reused, 0 and 0x1 as one
 * legacy stream, the per_thread_default_stream option, and the legacy stream's implicit
 * synchronisation with the blocking (per-thread) streams in both directions, refused (906, capture
 * invalidated) while one of them captures; the shared node opened, used and closed from several
 * threads at once, and views of two devices driven by their own threads. The rest of the stream
 * emulation is in test_driver_host_stream.c, devices in test_driver_host_devices.c.
 *
 * Every test opens its own instance and calls vpmm_host_check() after each mutation (CHECKED) and
 * before closing. Only the test thread asserts: the threads a test starts hand their results
 * back to it.
 */
#include "driver_host_test_util.h"

#include <pthread.h>
#include <stdlib.h>

/* ---- special handles and the legacy stream's implicit synchronisation ---------------------- */

/*
 * A thread of its own, to drive its per-thread stream (0x2) while the test thread watches:
 * on_thread(w, op, arg) runs one operation on PER_THREAD there and returns its result. Operations
 * never assert (a longjmp out of another thread would be wrong); the test thread asserts. Workers
 * live on the heap and are listed, so that when an assertion leaves a test early its teardown
 * (stop_workers) still stops them, and no thread is left using a dead stack frame.
 */
typedef enum wop {
    W_KEY,      /* (uintptr_t)vpmm_host_thread_stream */
    W_ENQUEUE,  /* vpmm_host_enqueue's sequence number */
    W_ADVANCE,  /* vpmm_host_advance(arg)'s count */
    W_COMPLETE, /* vpmm_host_complete; 0 */
    W_ENQUEUED, /* vpmm_host_stream_enqueued */
    W_BEGIN,    /* vpmm_host_begin_capture: the id, 0 on failure */
    W_END,      /* vpmm_host_end_capture's result */
    W_CAPTURE,  /* capture_info's status */
    W_STOP,
} wop_t;

typedef struct worker {
    vpmm_driver_t *d;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int pending; /* a request is posted and not yet answered */
    wop_t op;
    uint64_t arg, result;
} worker_t;

static uint64_t worker_do(vpmm_driver_t *d, wop_t op, uint64_t arg)
{
    uint64_t id = 0;
    vpmm_capture_status_t st = VPMM_CAPTURE_NONE;
    switch (op) {
    case W_KEY:
        return (uint64_t)(uintptr_t)vpmm_host_thread_stream(d);
    case W_ENQUEUE:
        return vpmm_host_enqueue(d, PER_THREAD);
    case W_ADVANCE:
        return vpmm_host_advance(d, PER_THREAD, (size_t)arg);
    case W_COMPLETE:
        vpmm_host_complete(d, PER_THREAD);
        return 0;
    case W_ENQUEUED:
        return vpmm_host_stream_enqueued(d, PER_THREAD);
    case W_BEGIN:
        return vpmm_host_begin_capture(d, PER_THREAD, &id) == VPMM_DRV_OK ? id : 0;
    case W_END:
        return (uint64_t)vpmm_host_end_capture(d, PER_THREAD);
    case W_CAPTURE:
        return d->capture_info(d, PER_THREAD, &st, NULL, NULL) == VPMM_DRV_OK ? (uint64_t)st : 99;
    case W_STOP:
        break;
    }
    return 0;
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->pending)
            pthread_cond_wait(&w->cv, &w->mu);
        wop_t op = w->op;
        w->result = worker_do(w->d, op, w->arg);
        w->pending = 0;
        pthread_cond_broadcast(&w->cv);
        if (op == W_STOP)
            break;
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

enum { MAX_WORKERS = 4 };
static worker_t *live_workers[MAX_WORKERS];

static worker_t *worker_start(vpmm_driver_t *d)
{
    size_t slot = 0;
    while (slot < MAX_WORKERS && live_workers[slot])
        slot++;
    assert_true(slot < MAX_WORKERS);
    worker_t *w = calloc(1, sizeof *w);
    assert_non_null(w);
    w->d = d;
    assert_int_equal(pthread_mutex_init(&w->mu, NULL), 0);
    assert_int_equal(pthread_cond_init(&w->cv, NULL), 0);
    assert_int_equal(pthread_create(&w->thread, NULL, worker_main, w), 0);
    live_workers[slot] = w;
    return w;
}

static uint64_t on_thread(worker_t *w, wop_t op, uint64_t arg)
{
    pthread_mutex_lock(&w->mu);
    w->op = op;
    w->arg = arg;
    w->pending = 1;
    pthread_cond_broadcast(&w->cv);
    while (w->pending)
        pthread_cond_wait(&w->cv, &w->mu);
    uint64_t r = w->result;
    pthread_mutex_unlock(&w->mu);
    return r;
}

static void worker_stop(worker_t *w)
{
    for (size_t i = 0; i < MAX_WORKERS; i++)
        if (live_workers[i] == w)
            live_workers[i] = NULL;
    on_thread(w, W_STOP, 0);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}

/* Teardown of the tests with workers: stops those an early failure left running. */
static int stop_workers(void **state)
{
    (void)state;
    for (size_t i = 0; i < MAX_WORKERS; i++)
        if (live_workers[i])
            worker_stop(live_workers[i]);
    return 0;
}

/* The key of w's per-thread stream. */
static vpmm_stream_t worker_key(worker_t *w)
{
    return (vpmm_stream_t)(uintptr_t)on_thread(w, W_KEY, 0);
}

/* 0x2 names a different stream in each thread; its key names that stream from any thread. */
static void test_per_thread_streams(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    worker_t *a = worker_start(d), *b = worker_start(d);

    /* A thread that never used 0x2 has a per-thread stream with no work; asking creates none. */
    assert_true(vpmm_host_stream_idle(d, PER_THREAD));
    assert_int_equal(vpmm_host_advance(d, PER_THREAD, 3), 0);
    assert_int_equal(on_thread(a, W_ENQUEUED, 0), 0);
    CHECKED(d);

    assert_int_equal(on_thread(a, W_ENQUEUE, 0), 1);
    assert_int_equal(on_thread(a, W_ENQUEUE, 0), 2);
    assert_int_equal(on_thread(a, W_ENQUEUE, 0), 3);
    assert_int_equal(on_thread(b, W_ENQUEUED, 0), 0); /* a's work is not b's */
    assert_int_equal(on_thread(b, W_ENQUEUE, 0), 1);
    assert_int_equal(vpmm_host_stream_enqueued(d, PER_THREAD), 0); /* nor the test thread's */
    CHECKED(d);

    /* Keys: distinct, stable, none of the special handles, and different from the test thread's. */
    vpmm_stream_t ka = worker_key(a), kb = worker_key(b), mine = vpmm_host_thread_stream(d);
    assert_non_null(ka);
    assert_non_null(kb);
    assert_non_null(mine);
    assert_ptr_not_equal(ka, kb);
    assert_ptr_not_equal(ka, mine);
    assert_ptr_not_equal(kb, mine);
    assert_true((uintptr_t)ka > 2 && (uintptr_t)kb > 2 && (uintptr_t)mine > 2);
    assert_ptr_equal(worker_key(a), ka);
    assert_ptr_equal(vpmm_host_thread_stream(d), mine);
    CHECKED(d);

    /* The test thread drives a's stream through its key: controls and entry points. */
    assert_int_equal(vpmm_host_stream_enqueued(d, ka), 3);
    assert_int_equal(vpmm_host_advance(d, ka, 1), 1);
    assert_int_equal(vpmm_host_stream_completed(d, ka), 1);
    assert_int_equal(vpmm_host_enqueue(d, ka), 4);
    assert_int_equal(on_thread(a, W_ENQUEUED, 0), 4);
    vpmm_drv_event_t ev;
    assert_int_equal(d->event_create(d, NULL, &ev), VPMM_DRV_OK);
    assert_int_equal(d->event_record(d, ev, ka), VPMM_DRV_OK); /* a@4 */
    assert_int_equal(d->event_query(d, ev), VPMM_DRV_NOT_READY);
    vpmm_host_complete(d, ka);
    assert_true(vpmm_host_stream_idle(d, ka));
    assert_int_equal(d->event_query(d, ev), VPMM_DRV_OK);
    assert_false(vpmm_host_stream_idle(d, kb)); /* b's stream is untouched */
    assert_int_equal(on_thread(b, W_ADVANCE, 5), 1);
    assert_true(vpmm_host_stream_idle(d, kb));
    CHECKED(d);

    /* The wait log names per-thread streams by key, so threads can be told apart. */
    assert_int_equal(on_thread(b, W_ENQUEUE, 0), 2);
    assert_int_equal(d->event_record(d, ev, kb), VPMM_DRV_OK);
    assert_int_equal(d->stream_wait_event(d, PER_THREAD, ev), VPMM_DRV_OK);
    assert_int_equal(d->stream_wait_event(d, ka, ev), VPMM_DRV_OK);
    vpmm_host_wait_t w = vpmm_host_wait_at(d, 0);
    assert_ptr_equal(w.waiter, mine);
    assert_ptr_equal(w.signaller, kb);
    assert_int_equal(w.signal_seq, 2);
    assert_ptr_equal(vpmm_host_wait_at(d, 1).waiter, ka);
    CHECKED(d);

    worker_stop(a);
    worker_stop(b);
    /* A per-thread stream outlives its thread: its work still completes through its key. */
    assert_false(vpmm_host_stream_idle(d, kb));
    vpmm_host_complete(d, kb);
    assert_int_equal(d->event_query(d, ev), VPMM_DRV_OK);
    assert_int_equal(d->event_destroy(d, ev), VPMM_DRV_OK);
    CHECKED(d);
    close_host(d);
}

/* Threads are told apart by a token that is never reused, not by pthread_self(), which a new
 * thread may inherit from one that has exited. */
static void *thread_key_job(void *arg)
{
    return (void *)vpmm_host_thread_stream(arg);
}

static void test_thread_tokens_not_reused(void **state)
{
    (void)state;
    enum { N = 8 };
    vpmm_driver_t *d = open_host(0, 0);
    vpmm_stream_t keys[N];
    for (int i = 0; i < N; i++) {
        pthread_t t;
        void *key = NULL;
        assert_int_equal(pthread_create(&t, NULL, thread_key_job, d), 0);
        assert_int_equal(pthread_join(t, &key), 0); /* the next thread may get the same id */
        keys[i] = key;
        assert_non_null(keys[i]);
        for (int j = 0; j < i; j++)
            assert_ptr_not_equal(keys[i], keys[j]);
    }
    CHECKED(d);
    close_host(d);
}

/* Several threads enqueue on their own 0x2 at once while the test thread records on the legacy
 * stream: the controls take the instance's lock, and each thread sees only its own stream. */
typedef struct pt_job {
    vpmm_driver_t *d;
    vpmm_stream_t key;
    uint64_t misordered; /* sequence numbers that were not 1, 2, 3, ... */
} pt_job_t;

enum { PT_ITEMS = 2000 };

static void *per_thread_enqueue_job(void *arg)
{
    pt_job_t *j = arg;
    j->key = vpmm_host_thread_stream(j->d);
    for (uint64_t i = 1; i <= PT_ITEMS; i++) {
        j->misordered += vpmm_host_enqueue(j->d, PER_THREAD) != i;
        if (i % 100 == 0)
            vpmm_host_advance(j->d, PER_THREAD, 50);
    }
    return NULL;
}

static void test_per_thread_streams_concurrently(void **state)
{
    (void)state;
    enum { T = 4 };
    vpmm_driver_t *d = open_host(0, 0);
    pthread_t t[T];
    pt_job_t jobs[T];
    vpmm_drv_event_t ev;
    assert_int_equal(d->event_create(d, NULL, &ev), VPMM_DRV_OK);
    int started = 0;
    while (started < T) {
        jobs[started] = (pt_job_t){ .d = d };
        if (pthread_create(&t[started], NULL, per_thread_enqueue_job, &jobs[started]) != 0)
            break;
        started++;
    }
    size_t wrong = 0; /* asserted once the threads are joined: they use jobs[] until then */
    for (uint64_t i = 1; i <= 500; i++) {
        wrong += vpmm_host_enqueue(d, LEGACY) != i;
        wrong += d->event_record(d, ev, LEGACY) != VPMM_DRV_OK;
    }
    for (int i = 0; i < started; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(started, T);
    assert_int_equal(wrong, 0);
    CHECKED(d);
    for (int i = 0; i < T; i++) {
        assert_int_equal(jobs[i].misordered, 0);
        assert_int_equal(vpmm_host_stream_enqueued(d, jobs[i].key), PT_ITEMS);
        for (int j = 0; j < i; j++)
            assert_ptr_not_equal(jobs[i].key, jobs[j].key);
    }
    vpmm_host_complete(d, LEGACY);
    assert_int_equal(d->event_query(d, ev), VPMM_DRV_OK);
    vpmm_host_complete_all(d);
    for (int i = 0; i < T; i++)
        assert_true(vpmm_host_stream_idle(d, jobs[i].key));
    assert_int_equal(d->event_destroy(d, ev), VPMM_DRV_OK);
    CHECKED(d);
    close_host(d);
}

/* 0 and 0x1 are one legacy stream; with per_thread_default_stream, 0 is the per-thread stream. */
static void test_default_stream_handles(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    vpmm_drv_event_t ev;
    uint64_t id = 0;
    assert_int_equal(d->event_create(d, NULL, &ev), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_enqueue(d, NULL), 1);
    assert_int_equal(vpmm_host_enqueue(d, LEGACY), 2);
    assert_int_equal(vpmm_host_stream_enqueued(d, NULL), 2);
    assert_int_equal(vpmm_host_advance(d, LEGACY, 1), 1);
    assert_int_equal(vpmm_host_stream_completed(d, NULL), 1);
    assert_int_equal(vpmm_host_stream_enqueued(d, PER_THREAD), 0);
    assert_int_equal(d->event_record(d, ev, NULL), VPMM_DRV_OK);
    assert_int_equal(d->event_query(d, ev), VPMM_DRV_NOT_READY);
    vpmm_host_complete(d, LEGACY);
    assert_int_equal(d->event_query(d, ev), VPMM_DRV_OK);
    /* The wait log names the legacy stream 0x1, however it was named. */
    assert_int_equal(d->stream_wait_event(d, NULL, ev), VPMM_DRV_OK);
    assert_ptr_equal(vpmm_host_wait_at(d, 0).waiter, LEGACY);
    assert_ptr_equal(vpmm_host_wait_at(d, 0).signaller, LEGACY);
    expect_failure(d, vpmm_host_begin_capture(d, NULL, &id), VPMM_DRV_NOT_SUPPORTED, 900,
                   VPMM_DRV_BEGIN_CAPTURE);
    assert_int_equal(d->event_destroy(d, ev), VPMM_DRV_OK);
    CHECKED(d);
    close_host(d);

    vpmm_host_options_t opt = { .per_thread_default_stream = 1 };
    d = open_host_opt(&opt);
    worker_t *a = worker_start(d);
    assert_int_equal(vpmm_host_enqueue(d, NULL), 1);
    assert_int_equal(vpmm_host_enqueue(d, PER_THREAD), 2);
    assert_int_equal(vpmm_host_stream_enqueued(d, vpmm_host_thread_stream(d)), 2);
    assert_int_equal(vpmm_host_stream_enqueued(d, LEGACY), 0);
    assert_int_equal(on_thread(a, W_ENQUEUED, 0), 0); /* another thread's 0 is its own */
    CHECKED(d);

    /* 0 may be captured now, and is the thread's 0x2 (LEGACY still may not). */
    expect_failure(d, vpmm_host_begin_capture(d, LEGACY, &id), VPMM_DRV_NOT_SUPPORTED, 900,
                   VPMM_DRV_BEGIN_CAPTURE);
    assert_int_equal(vpmm_host_begin_capture(d, NULL, &id), VPMM_DRV_OK);
    uint64_t got = 0;
    assert_int_equal(capture_status(d, PER_THREAD, &got), VPMM_CAPTURE_ACTIVE);
    assert_int_equal(got, id);
    assert_int_equal(capture_status(d, vpmm_host_thread_stream(d), NULL), VPMM_CAPTURE_ACTIVE);
    assert_int_equal(on_thread(a, W_CAPTURE, 0), VPMM_CAPTURE_NONE);
    assert_int_equal(capture_status(d, LEGACY, NULL), VPMM_CAPTURE_NONE);
    assert_int_equal(vpmm_host_enqueue(d, NULL), 0); /* captured */
    CHECKED(d);
    assert_int_equal(vpmm_host_end_capture(d, PER_THREAD), VPMM_DRV_OK);
    assert_int_equal(capture_status(d, NULL, NULL), VPMM_CAPTURE_NONE);
    worker_stop(a);
    CHECKED(d);
    close_host(d);
}

/*
 * An operation on the legacy stream waits for the work enqueued before it on every blocking
 * (per-thread) stream, and work on a blocking stream waits for the legacy stream's earlier work;
 * a non-blocking stream takes no part either way.
 */
static void test_legacy_syncs_with_per_thread(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    worker_t *a = worker_start(d), *b = worker_start(d);
    vpmm_stream_t ka = worker_key(a), kb = worker_key(b);
    vpmm_stream_t nb = vpmm_host_stream_create(d); /* non-blocking */
    vpmm_drv_event_t ev;
    assert_int_equal(d->event_create(d, NULL, &ev), VPMM_DRV_OK);

    /* An event on the (idle) legacy stream covers a's and b's earlier work, not nb's. */
    assert_int_equal(on_thread(a, W_ENQUEUE, 0), 1);
    assert_int_equal(on_thread(a, W_ENQUEUE, 0), 2);
    assert_int_equal(on_thread(b, W_ENQUEUE, 0), 1);
    assert_int_equal(vpmm_host_enqueue(d, nb), 1);
    assert_int_equal(d->event_record(d, ev, LEGACY), VPMM_DRV_OK);
    assert_int_equal(on_thread(a, W_ENQUEUE, 0), 3); /* after the record: not covered */
    CHECKED(d);
    assert_true(vpmm_host_stream_idle(d, LEGACY)); /* no work item of its own */
    assert_int_equal(d->event_query(d, ev), VPMM_DRV_NOT_READY);
    assert_int_equal(on_thread(a, W_ADVANCE, 1), 1);
    assert_int_equal(d->event_query(d, ev), VPMM_DRV_NOT_READY);
    assert_int_equal(on_thread(a, W_ADVANCE, 1), 1); /* a@2, from a's own thread */
    assert_int_equal(d->event_query(d, ev), VPMM_DRV_NOT_READY);
    assert_int_equal(vpmm_host_advance(d, kb, 1), 1); /* b@1, from the test thread */
    assert_int_equal(d->event_query(d, ev), VPMM_DRV_OK);
    assert_false(vpmm_host_stream_idle(d, nb));
    assert_false(vpmm_host_stream_idle(d, ka));
    CHECKED(d);

    /* complete() of the legacy stream completes what it waits on (and nothing after it). */
    assert_int_equal(on_thread(b, W_ENQUEUE, 0), 2);
    assert_int_equal(d->event_record(d, ev, NULL), VPMM_DRV_OK);
    assert_int_equal(d->event_query(d, ev), VPMM_DRV_NOT_READY);
    assert_int_equal(on_thread(b, W_ENQUEUE, 0), 3);
    vpmm_host_complete(d, LEGACY);
    assert_int_equal(d->event_query(d, ev), VPMM_DRV_OK);
    assert_true(vpmm_host_stream_idle(d, ka));
    assert_int_equal(vpmm_host_stream_completed(d, kb), 2);
    assert_false(vpmm_host_stream_idle(d, nb));
    CHECKED(d);

    /* Work on a per-thread stream enqueued after legacy work waits for it. */
    vpmm_host_complete(d, kb); /* else legacy@1 would wait for b@3 */
    assert_int_equal(vpmm_host_enqueue(d, LEGACY), 1);
    assert_int_equal(on_thread(a, W_ENQUEUE, 0), 4);
    assert_int_equal(on_thread(a, W_ENQUEUE, 0), 5);
    assert_int_equal(vpmm_host_advance(d, ka, 5), 0); /* held back by legacy@1 */
    assert_int_equal(on_thread(a, W_ADVANCE, 5), 0);
    /* ... and legacy work after that waits for a's, which waits for legacy@1: no cycle. */
    assert_int_equal(vpmm_host_enqueue(d, LEGACY), 2);
    assert_int_equal(vpmm_host_advance(d, LEGACY, 5), 1); /* legacy@2 waits for a@5 */
    assert_int_equal(on_thread(a, W_ADVANCE, 1), 1);
    assert_int_equal(vpmm_host_advance(d, LEGACY, 5), 0);
    assert_int_equal(on_thread(a, W_ADVANCE, 5), 1);
    assert_int_equal(vpmm_host_advance(d, LEGACY, 5), 1);
    assert_true(vpmm_host_stream_idle(d, LEGACY));
    CHECKED(d);

    /* A non-blocking stream is unaffected both ways: its work ignores legacy's, and an event on
     * the legacy stream ignores its work. */
    assert_int_equal(vpmm_host_enqueue(d, LEGACY), 3);
    assert_int_equal(vpmm_host_enqueue(d, nb), 2);
    assert_int_equal(vpmm_host_advance(d, nb, 5), 2);
    assert_int_equal(vpmm_host_enqueue(d, nb), 3);
    vpmm_host_complete(d, LEGACY);
    vpmm_host_complete(d, kb);
    assert_int_equal(d->event_record(d, ev, LEGACY), VPMM_DRV_OK);
    assert_int_equal(d->event_query(d, ev), VPMM_DRV_OK);
    assert_false(vpmm_host_stream_idle(d, nb));

    /* A stream waiting on a legacy event waits for the per-thread work it covers. */
    assert_int_equal(on_thread(b, W_ENQUEUE, 0), 4);
    assert_int_equal(d->event_record(d, ev, LEGACY), VPMM_DRV_OK);
    assert_int_equal(d->stream_wait_event(d, nb, ev), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_enqueue(d, nb), 4);
    assert_int_equal(vpmm_host_advance(d, nb, 5), 1); /* nb@3 was before the wait */
    assert_int_equal(vpmm_host_advance(d, nb, 5), 0);
    assert_int_equal(on_thread(b, W_ADVANCE, 1), 1);
    assert_int_equal(vpmm_host_advance(d, nb, 5), 1);
    CHECKED(d);

    /* synchronize finishes everything, per-thread streams included. */
    assert_int_equal(on_thread(a, W_ENQUEUE, 0), 6);
    assert_int_equal(d->synchronize(d), VPMM_DRV_OK);
    assert_true(vpmm_host_stream_idle(d, ka));
    worker_stop(a);
    worker_stop(b);
    assert_int_equal(d->event_destroy(d, ev), VPMM_DRV_OK);
    CHECKED(d);
    close_host(d);
}

/* A wait on the legacy stream is part of what later per-thread work waits for (transitively), and
 * a wait on a per-thread stream part of what a later legacy operation waits for. */
static void test_legacy_wait_orders_per_thread(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    worker_t *a = worker_start(d);
    vpmm_stream_t ka = worker_key(a), x = vpmm_host_stream_create(d), y = S1;
    vpmm_drv_event_t ex, el;
    assert_int_equal(d->event_create(d, NULL, &ex), VPMM_DRV_OK);
    assert_int_equal(d->event_create(d, NULL, &el), VPMM_DRV_OK);

    /* x -> (wait) legacy -> a: a's work waits for x's though neither names the other. */
    assert_int_equal(vpmm_host_enqueue(d, x), 1);
    assert_int_equal(d->event_record(d, ex, x), VPMM_DRV_OK);
    assert_int_equal(d->stream_wait_event(d, LEGACY, ex), VPMM_DRV_OK);
    assert_true(vpmm_host_stream_idle(d, LEGACY));
    assert_int_equal(on_thread(a, W_ENQUEUE, 0), 1);
    CHECKED(d);
    assert_int_equal(on_thread(a, W_ADVANCE, 1), 0);
    assert_int_equal(vpmm_host_advance(d, x, 1), 1);
    assert_int_equal(on_thread(a, W_ADVANCE, 1), 1);

    /* x -> (wait) a -> legacy: an event on the legacy stream covers a's trailing wait. */
    assert_int_equal(vpmm_host_enqueue(d, x), 2);
    assert_int_equal(d->event_record(d, ex, x), VPMM_DRV_OK);
    assert_int_equal(d->stream_wait_event(d, ka, ex), VPMM_DRV_OK);
    assert_int_equal(d->event_record(d, el, LEGACY), VPMM_DRV_OK);
    assert_int_equal(d->event_query(d, el), VPMM_DRV_NOT_READY);
    /* ... and so does a stream waiting on that event, through the event's deps. */
    assert_int_equal(d->stream_wait_event(d, y, el), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_enqueue(d, y), 1);
    assert_int_equal(vpmm_host_advance(d, y, 1), 0);
    CHECKED(d);
    vpmm_host_complete(d, y); /* pulls x along */
    assert_int_equal(d->event_query(d, el), VPMM_DRV_OK);
    assert_true(vpmm_host_stream_idle(d, x));
    CHECKED(d);

    worker_stop(a);
    assert_int_equal(d->event_destroy(d, ex), VPMM_DRV_OK);
    assert_int_equal(d->event_destroy(d, el), VPMM_DRV_OK);
    close_host(d);
}

/* Many legacy operations with nothing new to wait for: the implicit barriers they add merge (one
 * per stream and position), and the one work item after them still waits for both streams. */
static void test_legacy_sync_barriers_bounded(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    worker_t *a = worker_start(d), *b = worker_start(d);
    vpmm_stream_t ka = worker_key(a), kb = worker_key(b);
    vpmm_drv_event_t ev;
    assert_int_equal(d->event_create(d, NULL, &ev), VPMM_DRV_OK);
    assert_int_equal(on_thread(a, W_ENQUEUE, 0), 1);
    assert_int_equal(on_thread(b, W_ENQUEUE, 0), 1);
    for (int i = 0; i < 10000; i++) {
        assert_int_equal(d->event_record(d, ev, LEGACY), VPMM_DRV_OK);
        assert_int_equal(d->stream_wait_event(d, LEGACY, ev), VPMM_DRV_OK);
    }
    CHECKED(d);
    assert_int_equal(vpmm_host_enqueue(d, LEGACY), 1);
    assert_int_equal(vpmm_host_advance(d, LEGACY, 1), 0);
    assert_int_equal(vpmm_host_advance(d, ka, 1), 1);
    assert_int_equal(vpmm_host_advance(d, LEGACY, 1), 0);
    assert_int_equal(vpmm_host_advance(d, kb, 1), 1);
    assert_int_equal(vpmm_host_advance(d, LEGACY, 1), 1);
    assert_int_equal(d->event_query(d, ev), VPMM_DRV_OK);
    worker_stop(a);
    worker_stop(b);
    assert_int_equal(d->event_destroy(d, ev), VPMM_DRV_OK);
    CHECKED(d);
    close_host(d);
}

/*
 * While a blocking stream captures, an operation on the legacy stream would depend on it: 906,
 * and the capture is invalidated (CUDA's cudaErrorStreamCaptureImplicit). A non-blocking stream's
 * capture does not care.
 */
static void test_legacy_refused_while_per_thread_captures(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    worker_t *a = worker_start(d);
    vpmm_stream_t ka = worker_key(a), nb = vpmm_host_stream_create(d);
    vpmm_drv_event_t ev, fork_ev;
    uint64_t id = 0, got = 0;
    assert_int_equal(d->event_create(d, NULL, &ev), VPMM_DRV_OK);
    assert_int_equal(d->event_create(d, NULL, &fork_ev), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_enqueue(d, LEGACY), 1);
    assert_int_equal(on_thread(a, W_ENQUEUE, 0), 1);

    /* Each of record, wait and enqueue (0 or 0x1) fails and invalidates the capture; the failed
     * call leaves no work behind and records nothing. */
    for (int op = 0; op < 4; op++) {
        assert_int_equal(vpmm_host_begin_capture(d, PER_THREAD, &id), VPMM_DRV_OK);
        assert_int_equal(capture_status(d, PER_THREAD, &got), VPMM_CAPTURE_ACTIVE);
        assert_int_equal(got, id);
        if (op == 0)
            expect_failure(d, d->event_record(d, ev, LEGACY), VPMM_DRV_ERROR, 906,
                           VPMM_DRV_EVENT_RECORD);
        else if (op == 1)
            expect_failure(d, d->event_record(d, ev, NULL), VPMM_DRV_ERROR, 906,
                           VPMM_DRV_EVENT_RECORD);
        else if (op == 2)
            expect_failure(d, d->stream_wait_event(d, NULL, ev), VPMM_DRV_ERROR, 906,
                           VPMM_DRV_STREAM_WAIT_EVENT);
        else
            assert_int_equal(vpmm_host_enqueue(d, LEGACY), 0);
        assert_int_equal(capture_status(d, PER_THREAD, &got), VPMM_CAPTURE_INVALIDATED);
        assert_int_equal(got, id);
        assert_int_equal(capture_status(d, ka, NULL), VPMM_CAPTURE_NONE); /* a's: untouched */
        CHECKED(d);
        expect_capture_failure(d, vpmm_host_end_capture(d, PER_THREAD), 901, "cuStreamEndCapture");
        assert_int_equal(vpmm_host_stream_enqueued(d, LEGACY), 1);
        assert_int_equal(d->event_query(d, ev), VPMM_DRV_OK); /* never recorded */
    }
    assert_int_equal(vpmm_host_wait_count(d), 0);

    /* A graph launch on the legacy stream is work too. */
    vpmm_graph_t g = NULL;
    vpmm_host_exec_t x = NULL;
    assert_int_equal(d->begin_capture(d, nb, VPMM_CAPTURE_MODE_GLOBAL), VPMM_DRV_OK);
    assert_int_equal(d->end_capture(d, nb, &g), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graph_instantiate(d, g, &x), VPMM_DRV_OK);
    assert_int_equal(on_thread(a, W_BEGIN, 0) != 0, 1);
    assert_int_equal(vpmm_host_graph_launch(d, x, LEGACY), VPMM_DRV_ERROR);
    assert_int_equal(d->last_code, 906);
    assert_int_equal(on_thread(a, W_CAPTURE, 0), VPMM_CAPTURE_INVALIDATED);
    assert_int_equal(on_thread(a, W_END, 0), VPMM_DRV_ERROR);
    assert_int_equal(vpmm_host_stream_enqueued(d, LEGACY), 1);
    CHECKED(d);

    /* Other per-thread streams are not ordered against a capturing one: they go on. */
    assert_int_equal(vpmm_host_begin_capture(d, PER_THREAD, &id), VPMM_DRV_OK);
    assert_int_equal(on_thread(a, W_ENQUEUE, 0), 2);
    assert_int_equal(d->event_record(d, ev, ka), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graph_launch(d, x, ka), VPMM_DRV_OK);
    assert_int_equal(capture_status(d, PER_THREAD, NULL), VPMM_CAPTURE_ACTIVE);
    assert_int_equal(vpmm_host_end_capture(d, PER_THREAD), VPMM_DRV_OK);

    /* A per-thread stream that joined a non-blocking stream's capture counts too. */
    assert_int_equal(vpmm_host_begin_capture(d, nb, &id), VPMM_DRV_OK);
    assert_int_equal(d->event_record(d, fork_ev, nb), VPMM_DRV_OK);
    assert_int_equal(d->stream_wait_event(d, ka, fork_ev), VPMM_DRV_OK);
    assert_int_equal(capture_status(d, ka, &got), VPMM_CAPTURE_ACTIVE);
    assert_int_equal(got, id);
    expect_failure(d, d->event_record(d, ev, LEGACY), VPMM_DRV_ERROR, 906, VPMM_DRV_EVENT_RECORD);
    assert_int_equal(capture_status(d, nb, NULL), VPMM_CAPTURE_INVALIDATED);
    expect_capture_failure(d, vpmm_host_end_capture(d, nb), 901, "cuStreamEndCapture");
    assert_int_equal(capture_status(d, ka, NULL), VPMM_CAPTURE_NONE);
    CHECKED(d);

    /* While only a non-blocking stream captures, the legacy stream is free. */
    assert_int_equal(vpmm_host_begin_capture(d, nb, &id), VPMM_DRV_OK);
    assert_int_equal(d->event_record(d, ev, LEGACY), VPMM_DRV_OK);
    assert_int_equal(d->stream_wait_event(d, LEGACY, ev), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_enqueue(d, LEGACY), 2);
    assert_int_equal(vpmm_host_graph_launch(d, x, LEGACY), VPMM_DRV_OK);
    assert_int_equal(capture_status(d, nb, NULL), VPMM_CAPTURE_ACTIVE);
    assert_int_equal(vpmm_host_end_capture(d, nb), VPMM_DRV_OK);
    CHECKED(d);

    vpmm_host_complete_all(d);
    assert_int_equal(vpmm_host_exec_destroy(d, x), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graph_destroy(d, g), VPMM_DRV_OK);
    worker_stop(a);
    assert_int_equal(d->event_destroy(d, ev), VPMM_DRV_OK);
    assert_int_equal(d->event_destroy(d, fork_ev), VPMM_DRV_OK);
    expect_empty(d);
    close_host(d);
}

/* ---- the shared node and views from several threads --------------------------------------- */

typedef struct view_job {
    int dev;
    int rounds;
    size_t failures; /* counted, asserted by the test thread once joined */
} view_job_t;

/*
 * One thread's life on the shared node: open a view of its device, use it (memory, its per-thread
 * stream, an event), close it, again and again. With no view held elsewhere, the node is created
 * and freed over and over while the other threads open and close theirs.
 */
static void *view_churn_job(void *arg)
{
    view_job_t *j = arg;
    vpmm_host_options_t opt = { .memory_limit = 64 * MiB };
    for (int r = 0; r < j->rounds; r++) {
        vpmm_driver_t *v = NULL;
        vpmm_drv_handle_t h = 0;
        vpmm_drv_event_t ev = NULL;
        uintptr_t va = 0;
        if (vpmm_host_open_shared(&opt, j->dev, &v) != VPMM_DRV_OK) {
            j->failures++;
            continue;
        }
        j->failures += v->device != j->dev;
        j->failures += v->va_reserve(v, 4 * MiB, 0, &va) != VPMM_DRV_OK;
        j->failures += v->mem_create(v, G, &h) != VPMM_DRV_OK;
        j->failures += v->mem_map(v, va, G, h, 0) != VPMM_DRV_OK;
        j->failures += v->set_access(v, va, G, NULL, 0) != VPMM_DRV_OK;
        ((volatile unsigned char *)va)[r] = (unsigned char)r;
        j->failures += vpmm_host_enqueue(v, PER_THREAD) == 0;
        j->failures += v->event_create(v, NULL, &ev) != VPMM_DRV_OK;
        j->failures += v->event_record(v, ev, PER_THREAD) != VPMM_DRV_OK;
        vpmm_host_complete(v, PER_THREAD);
        j->failures += v->event_query(v, ev) != VPMM_DRV_OK;
        j->failures += v->event_destroy(v, ev) != VPMM_DRV_OK;
        j->failures += v->mem_unmap(v, va, G) != VPMM_DRV_OK;
        j->failures += v->mem_release(v, h) != VPMM_DRV_OK;
        j->failures += v->va_free(v, va, 4 * MiB) != VPMM_DRV_OK;
        j->failures += vpmm_host_check(v, 1) != 0;
        v->close(v);
    }
    return NULL;
}

static void test_shared_node_from_threads(void **state)
{
    (void)state;
    enum { T = 4, ROUNDS = 300 };
    pthread_t t[T];
    view_job_t jobs[T];
    int started = 0;
    while (started < T) {
        jobs[started] = (view_job_t){ .dev = 2 * started + 1, .rounds = ROUNDS };
        if (pthread_create(&t[started], NULL, view_churn_job, &jobs[started]) != 0)
            break;
        started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(started, T);
    for (int i = 0; i < T; i++)
        assert_int_equal(jobs[i].failures, 0);
    /* Every view closed: the node is gone, and the next open makes one with its own options. */
    vpmm_host_options_t other = { .memory_limit = 16 * MiB };
    vpmm_driver_t *d = NULL;
    assert_int_equal(vpmm_host_open_shared(&other, 0, &d), VPMM_DRV_OK);
    CHECKED(d);
    expect_empty(d);
    close_host(d);
}

/* Views of two devices of one node, each driven by its own thread, with waits across them. */
static void test_views_on_threads(void **state)
{
    (void)state;
    vpmm_host_options_t opt = { .devices = 2 };
    vpmm_driver_t *d0 = open_host_opt(&opt), *d1 = NULL;
    assert_int_equal(vpmm_host_open_device(d0, 1, &d1), VPMM_DRV_OK);
    worker_t *a = worker_start(d0), *b = worker_start(d1);
    vpmm_stream_t ka = worker_key(a), kb = worker_key(b);
    vpmm_drv_event_t ev;
    int dev = -1;
    assert_int_equal(d1->stream_device(d1, ka, &dev), VPMM_DRV_OK);
    assert_int_equal(dev, 0);
    assert_int_equal(d0->stream_device(d0, kb, &dev), VPMM_DRV_OK);
    assert_int_equal(dev, 1);
    assert_int_equal(d0->event_create(d0, ka, &ev), VPMM_DRV_OK);
    assert_int_equal(on_thread(a, W_ENQUEUE, 0), 1);
    assert_int_equal(d0->event_record(d0, ev, ka), VPMM_DRV_OK);
    expect_failure(d0, d0->event_record(d0, ev, kb), VPMM_DRV_INVALID, 400, VPMM_DRV_EVENT_RECORD);
    assert_int_equal(d1->stream_wait_event(d1, kb, ev), VPMM_DRV_OK);
    assert_int_equal(on_thread(b, W_ENQUEUE, 0), 1);
    assert_int_equal(on_thread(b, W_ADVANCE, 1), 0); /* waits for a's work, on device 0 */
    CHECKED(d0);
    assert_int_equal(on_thread(a, W_ADVANCE, 1), 1);
    assert_int_equal(on_thread(b, W_ADVANCE, 1), 1);
    CHECKED(d1);
    worker_stop(a);
    worker_stop(b);
    assert_int_equal(d1->event_destroy(d1, ev), VPMM_DRV_OK);
    close_host(d1);
    expect_empty(d0);
    close_host(d0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_per_thread_streams, stop_workers),
        cmocka_unit_test(test_thread_tokens_not_reused),
        cmocka_unit_test(test_per_thread_streams_concurrently),
        cmocka_unit_test_teardown(test_default_stream_handles, stop_workers),
        cmocka_unit_test_teardown(test_legacy_syncs_with_per_thread, stop_workers),
        cmocka_unit_test_teardown(test_legacy_wait_orders_per_thread, stop_workers),
        cmocka_unit_test_teardown(test_legacy_sync_barriers_bounded, stop_workers),
        cmocka_unit_test_teardown(test_legacy_refused_while_per_thread_captures, stop_workers),
        cmocka_unit_test(test_shared_node_from_threads),
        cmocka_unit_test_teardown(test_views_on_threads, stop_workers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
