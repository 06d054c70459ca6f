/*
 * test_driver_host_stream.c — tests of the host emulation backend's simulated streams, events
 * and capture (src/backends/host/driver_host_stream.c): stream identity and progress, event
 * record/query, waits across streams and the barriers they leave (complete() pulls in what it waits
 * on, and terminates on long chains), capture emulation: beginning and ending, invalidation with
 * CUDA's error codes, joining through a wait, and the legacy stream that is never captured. CUDA's
 * special handles (per-thread streams driven from real threads, the legacy stream's implicit
 * synchronisation) are in test_driver_host_thread.c; capture through the driver table and the
 * graphs it builds in test_driver_host_graph.c.
 *
 * Streams are bookkeeping only: work advances when a test says so (vpmm_host_advance,
 * vpmm_host_complete) or on synchronize. Every test opens its own instance and calls
 * vpmm_host_check() after each mutation (CHECKED) and before closing.
 */
#include "driver_host_test_util.h"

#include <pthread.h>
#include <stdlib.h>

/* ---- streams and events ------------------------------------------------------------------- */

static void test_streams(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    vpmm_stream_t s[64];
    for (int i = 0; i < 64; i++) {
        s[i] = vpmm_host_stream_create(d);
        assert_non_null(s[i]);
        for (int j = 0; j < i; j++)
            assert_ptr_not_equal(s[i], s[j]);
        assert_true(vpmm_host_stream_idle(d, s[i]));
    }
    /* Unknown streams, NULL included, have nothing pending. */
    assert_true(vpmm_host_stream_idle(d, NULL));
    assert_true(vpmm_host_stream_idle(d, S1));
    assert_int_equal(vpmm_host_advance(d, S1, 5), 0);
    vpmm_host_complete(d, S2);

    /* The legacy default stream: NULL and 0x1 name it. No per-thread stream is in use, so it
     * synchronises with nothing and behaves as any other stream. */
    assert_int_equal(vpmm_host_enqueue(d, NULL), 1);
    assert_int_equal(vpmm_host_enqueue(d, LEGACY), 2);
    assert_int_equal(vpmm_host_enqueue(d, s[3]), 1);
    assert_false(vpmm_host_stream_idle(d, NULL));
    assert_true(vpmm_host_stream_idle(d, s[4]));
    assert_int_equal(vpmm_host_advance(d, NULL, 1), 1);
    assert_int_equal(vpmm_host_stream_completed(d, NULL), 1);
    assert_int_equal(vpmm_host_advance(d, NULL, 5), 1);
    assert_true(vpmm_host_stream_idle(d, NULL));
    assert_false(vpmm_host_stream_idle(d, s[3]));
    vpmm_host_complete(d, s[3]);
    assert_true(vpmm_host_stream_idle(d, s[3]));
    assert_int_equal(vpmm_host_stream_enqueued(d, s[3]), 1);
    assert_int_equal(vpmm_host_stream_enqueued(d, S3), 0);
    CHECKED(d);
    close_host(d);
}

static void test_event_record_query(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    vpmm_drv_event_t ev = NULL, ev2 = NULL;
    expect_failure(d, d->event_create(d, NULL, NULL), VPMM_DRV_INVALID, 1, VPMM_DRV_EVENT_CREATE);
    assert_int_equal(d->event_create(d, NULL, &ev), VPMM_DRV_OK);
    assert_non_null(ev);
    assert_int_equal(d->event_query(d, ev), VPMM_DRV_OK); /* never recorded: complete */

    vpmm_host_enqueue(d, S1);
    vpmm_host_enqueue(d, S1);
    assert_int_equal(d->event_record(d, ev, S1), VPMM_DRV_OK);
    vpmm_host_enqueue(d, S1); /* after the record: not part of it */
    expect_failure(d, d->event_query(d, ev), VPMM_DRV_NOT_READY, 600, VPMM_DRV_EVENT_QUERY);
    assert_int_equal(vpmm_host_advance(d, S1, 1), 1);
    expect_failure(d, d->event_query(d, ev), VPMM_DRV_NOT_READY, 600, VPMM_DRV_EVENT_QUERY);
    assert_int_equal(vpmm_host_advance(d, S1, 1), 1);
    assert_int_equal(d->event_query(d, ev), VPMM_DRV_OK);
    assert_false(vpmm_host_stream_idle(d, S1));

    /* Re-recording moves the event; recording on an idle stream is complete at once. */
    assert_int_equal(d->event_record(d, ev, S1), VPMM_DRV_OK);
    assert_int_equal(d->event_query(d, ev), VPMM_DRV_NOT_READY);
    vpmm_host_complete(d, S1);
    assert_int_equal(d->event_query(d, ev), VPMM_DRV_OK);
    assert_int_equal(d->event_record(d, ev, S2), VPMM_DRV_OK);
    assert_int_equal(d->event_query(d, ev), VPMM_DRV_OK);
    CHECKED(d);

    /* Destroyed events are unknown; their ids are not reused for new events. */
    assert_int_equal(d->event_destroy(d, ev), VPMM_DRV_OK);
    assert_int_equal(d->event_create(d, NULL, &ev2), VPMM_DRV_OK);
    assert_ptr_not_equal(ev, ev2);
    expect_failure(d, d->event_query(d, ev), VPMM_DRV_INVALID, 1, VPMM_DRV_EVENT_QUERY);
    expect_failure(d, d->event_record(d, ev, S1), VPMM_DRV_INVALID, 1, VPMM_DRV_EVENT_RECORD);
    expect_failure(d, d->stream_wait_event(d, S1, ev), VPMM_DRV_INVALID, 1,
                   VPMM_DRV_STREAM_WAIT_EVENT);
    expect_failure(d, d->event_destroy(d, ev), VPMM_DRV_INVALID, 1, VPMM_DRV_EVENT_DESTROY);
    expect_failure(d, d->event_destroy(d, NULL), VPMM_DRV_INVALID, 1, VPMM_DRV_EVENT_DESTROY);
    expect_failure(d, d->event_query(d, (vpmm_drv_event_t)(uintptr_t)0xdeadbeef), VPMM_DRV_INVALID,
                   1, VPMM_DRV_EVENT_QUERY);
    vpmm_host_counts_t c;
    vpmm_host_counts(d, &c);
    assert_int_equal(c.events, 1);
    assert_int_equal(d->event_destroy(d, ev2), VPMM_DRV_OK);
    expect_empty(d);
    close_host(d);
}

/* A -> B -> C: barriers hold later work back; complete() finishes what it waits on first. */
static void test_waits_across_three_streams(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    vpmm_stream_t A = vpmm_host_stream_create(d), B = vpmm_host_stream_create(d), C = S3;
    vpmm_drv_event_t ea, eb, done;
    assert_int_equal(d->event_create(d, NULL, &ea), VPMM_DRV_OK);
    assert_int_equal(d->event_create(d, NULL, &eb), VPMM_DRV_OK);
    assert_int_equal(d->event_create(d, NULL, &done), VPMM_DRV_OK);

    vpmm_host_enqueue(d, A);
    vpmm_host_enqueue(d, A);
    assert_int_equal(d->event_record(d, ea, A), VPMM_DRV_OK); /* A@2 */
    assert_int_equal(vpmm_host_enqueue(d, A), 3);             /* not waited on */
    assert_int_equal(vpmm_host_enqueue(d, B), 1);             /* before the wait: free to run */
    assert_int_equal(d->stream_wait_event(d, B, ea), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_enqueue(d, B), 2);
    assert_int_equal(d->event_record(d, eb, B), VPMM_DRV_OK); /* B@2 */
    assert_int_equal(d->stream_wait_event(d, C, eb), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_enqueue(d, C), 1);
    CHECKED(d);

    /* advance stops at an unsatisfied wait, and never runs another stream. */
    assert_int_equal(vpmm_host_advance(d, B, 5), 1);
    assert_int_equal(vpmm_host_stream_completed(d, B), 1);
    assert_int_equal(vpmm_host_advance(d, C, 1), 0);
    assert_int_equal(vpmm_host_advance(d, A, 1), 1);
    assert_int_equal(vpmm_host_advance(d, B, 5), 0); /* A@2 still pending */
    assert_int_equal(vpmm_host_advance(d, A, 1), 1);
    assert_int_equal(vpmm_host_advance(d, B, 5), 1); /* now it may go */
    assert_true(vpmm_host_stream_idle(d, B));
    assert_int_equal(d->event_query(d, eb), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_advance(d, C, 5), 1);
    CHECKED(d);

    /* Same shape again, finished by complete(C): it must pull A and B along, but not A's
     * later work. */
    vpmm_host_enqueue(d, A);                                  /* A@4 (A@3 pending too) */
    assert_int_equal(d->event_record(d, ea, A), VPMM_DRV_OK); /* A@4 */
    vpmm_host_enqueue(d, A);                                  /* A@5: not needed */
    assert_int_equal(d->stream_wait_event(d, B, ea), VPMM_DRV_OK);
    vpmm_host_enqueue(d, B);                                  /* B@3 */
    assert_int_equal(d->event_record(d, eb, B), VPMM_DRV_OK); /* B@3 */
    assert_int_equal(d->stream_wait_event(d, C, eb), VPMM_DRV_OK);
    vpmm_host_enqueue(d, C); /* C@2 */
    assert_int_equal(d->event_record(d, done, C), VPMM_DRV_OK);
    assert_int_equal(d->event_query(d, done), VPMM_DRV_NOT_READY);
    vpmm_host_complete(d, C);
    assert_int_equal(d->event_query(d, done), VPMM_DRV_OK);
    assert_true(vpmm_host_stream_idle(d, B));
    assert_int_equal(vpmm_host_stream_completed(d, A), 4);
    assert_false(vpmm_host_stream_idle(d, A));
    CHECKED(d);

    /* A wait on finished work or on a never-recorded event adds no barrier. */
    vpmm_drv_event_t fresh;
    assert_int_equal(d->event_create(d, NULL, &fresh), VPMM_DRV_OK);
    assert_int_equal(d->stream_wait_event(d, B, fresh), VPMM_DRV_OK);
    assert_int_equal(d->stream_wait_event(d, B, eb), VPMM_DRV_OK);
    assert_int_equal(d->stream_wait_event(d, B, ea), VPMM_DRV_OK); /* A@4: done */
    vpmm_host_enqueue(d, B);
    assert_int_equal(vpmm_host_advance(d, B, 1), 1);

    /* The log lists every wait, in order. */
    const vpmm_host_wait_t want[] = {
        { B, A, 2, 0, 0 },    { C, B, 2, 0, 0 }, { B, A, 4, 0, 0 }, { C, B, 3, 0, 0 },
        { B, NULL, 0, 0, 0 }, { B, B, 3, 0, 0 }, { B, A, 4, 0, 0 },
    };
    assert_int_equal(vpmm_host_wait_count(d), sizeof want / sizeof want[0]);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        vpmm_host_wait_t w = vpmm_host_wait_at(d, i);
        assert_ptr_equal(w.waiter, want[i].waiter);
        assert_ptr_equal(w.signaller, want[i].signaller);
        assert_int_equal(w.signal_seq, want[i].signal_seq);
        assert_int_equal(w.waiter_device, 0); /* one device */
        assert_int_equal(w.signaller_device, 0);
    }
    vpmm_host_wait_t none = vpmm_host_wait_at(d, 99);
    assert_null(none.waiter);
    assert_int_equal(none.signal_seq, 0);
    vpmm_host_wait_clear(d);
    assert_int_equal(vpmm_host_wait_count(d), 0);

    /* synchronize finishes everything. */
    vpmm_host_enqueue(d, S1);
    assert_int_equal(d->synchronize(d), VPMM_DRV_OK);
    assert_true(vpmm_host_stream_idle(d, A));
    assert_true(vpmm_host_stream_idle(d, S1));
    CHECKED(d);

    assert_int_equal(d->event_destroy(d, ea), VPMM_DRV_OK);
    assert_int_equal(d->event_destroy(d, eb), VPMM_DRV_OK);
    assert_int_equal(d->event_destroy(d, done), VPMM_DRV_OK);
    assert_int_equal(d->event_destroy(d, fresh), VPMM_DRV_OK);
    expect_empty(d);
    close_host(d);
}

/*
 * A wait is part of the stream's order even with no work after it (CUDA: a wait node): an event
 * recorded right after a wait completes only once the awaited work has, and a stream waiting on
 * that event waits for it too (transitively).
 */
static void test_record_after_wait(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    vpmm_stream_t A = vpmm_host_stream_create(d), B = vpmm_host_stream_create(d);
    vpmm_stream_t C = vpmm_host_stream_create(d);
    vpmm_drv_event_t ea, eb;
    assert_int_equal(d->event_create(d, NULL, &ea), VPMM_DRV_OK);
    assert_int_equal(d->event_create(d, NULL, &eb), VPMM_DRV_OK);

    vpmm_host_enqueue(d, A);                                       /* A@1: running */
    assert_int_equal(d->event_record(d, ea, A), VPMM_DRV_OK);      /* A@1 */
    assert_int_equal(d->stream_wait_event(d, B, ea), VPMM_DRV_OK); /* B idle, then waits */
    assert_int_equal(d->event_record(d, eb, B), VPMM_DRV_OK);      /* after the wait */
    assert_true(vpmm_host_stream_idle(d, B));                      /* no work item on B */
    assert_int_equal(d->event_query(d, eb), VPMM_DRV_NOT_READY);   /* but the wait is pending */
    assert_int_equal(d->stream_wait_event(d, C, eb), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_enqueue(d, C), 1);
    assert_int_equal(vpmm_host_advance(d, C, 1), 0); /* held back by A, through B's event */
    CHECKED(d);
    assert_int_equal(vpmm_host_advance(d, A, 1), 1);
    assert_int_equal(d->event_query(d, eb), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_advance(d, C, 1), 1);

    /* complete() of a stream whose last entry is a wait completes what it waits on. */
    vpmm_host_enqueue(d, A);
    assert_int_equal(d->event_record(d, ea, A), VPMM_DRV_OK);
    assert_int_equal(d->stream_wait_event(d, B, ea), VPMM_DRV_OK);
    assert_int_equal(d->event_record(d, eb, B), VPMM_DRV_OK);
    assert_int_equal(d->event_query(d, eb), VPMM_DRV_NOT_READY);
    vpmm_host_complete(d, B);
    assert_int_equal(d->event_query(d, eb), VPMM_DRV_OK);
    assert_true(vpmm_host_stream_idle(d, A));
    CHECKED(d);
    assert_int_equal(d->event_destroy(d, ea), VPMM_DRV_OK);
    assert_int_equal(d->event_destroy(d, eb), VPMM_DRV_OK);
    close_host(d);
}

/* Barriers that cross back and forth and a long chain: complete() terminates and is exact. */
static void test_barrier_graphs(void **state)
{
    (void)state;
    enum { N = 300 };
    vpmm_driver_t *d = open_host(0, 0);
    vpmm_drv_event_t ev;
    assert_int_equal(d->event_create(d, NULL, &ev), VPMM_DRV_OK);

    /* Ping-pong: S1 and S2 wait on each other alternately (never a real cycle). */
    for (int i = 0; i < 50; i++) {
        vpmm_stream_t from = i % 2 ? S1 : S2, to = i % 2 ? S2 : S1;
        vpmm_host_enqueue(d, from);
        assert_int_equal(d->event_record(d, ev, from), VPMM_DRV_OK);
        assert_int_equal(d->stream_wait_event(d, to, ev), VPMM_DRV_OK);
        vpmm_host_enqueue(d, to);
    }
    CHECKED(d);
    vpmm_host_complete(d, S1);
    assert_true(vpmm_host_stream_idle(d, S1));
    vpmm_host_complete(d, S2);
    assert_true(vpmm_host_stream_idle(d, S2));

    /* A chain of N streams, each waiting on the previous. */
    vpmm_stream_t s[N];
    for (int i = 0; i < N; i++) {
        s[i] = vpmm_host_stream_create(d);
        if (i > 0)
            assert_int_equal(d->stream_wait_event(d, s[i], ev), VPMM_DRV_OK);
        vpmm_host_enqueue(d, s[i]);
        assert_int_equal(d->event_record(d, ev, s[i]), VPMM_DRV_OK);
    }
    CHECKED(d);
    assert_int_equal(vpmm_host_advance(d, s[N - 1], 1), 0);
    vpmm_host_complete(d, s[N - 1]);
    for (int i = 0; i < N; i++)
        assert_true(vpmm_host_stream_idle(d, s[i]));
    CHECKED(d);

    /* Repeated waits between the same pair collapse into one barrier per position. */
    for (int i = 0; i < 1000; i++) {
        vpmm_host_enqueue(d, S1);
        assert_int_equal(d->event_record(d, ev, S1), VPMM_DRV_OK);
        assert_int_equal(d->stream_wait_event(d, S2, ev), VPMM_DRV_OK);
    }
    vpmm_host_enqueue(d, S2);
    assert_int_equal(vpmm_host_advance(d, S2, 1), 0);
    assert_int_equal(vpmm_host_advance(d, S1, 999), 999);
    assert_int_equal(vpmm_host_advance(d, S2, 1), 0);
    assert_int_equal(vpmm_host_advance(d, S1, 1), 1);
    assert_int_equal(vpmm_host_advance(d, S2, 1), 1);
    CHECKED(d);
    assert_int_equal(d->event_destroy(d, ev), VPMM_DRV_OK);
    close_host(d);
}

/* ---- capture ------------------------------------------------------------------------------ */

static void test_capture_basics(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    uint64_t id = 0, got = 99;
    vpmm_drv_event_t ev;
    assert_int_equal(d->event_create(d, NULL, &ev), VPMM_DRV_OK);

    assert_int_equal(capture_status(d, S1, &got), VPMM_CAPTURE_NONE);
    assert_int_equal(got, 0);
    expect_failure(d, d->capture_info(d, S1, NULL, &got, NULL), VPMM_DRV_INVALID, 1,
                   VPMM_DRV_CAPTURE_INFO);
    assert_int_equal(capture_status(d, S1, NULL), VPMM_CAPTURE_NONE); /* id is optional */

    /* Real work enqueued before the capture stays real. */
    assert_int_equal(vpmm_host_enqueue(d, S1), 1);
    assert_int_equal(vpmm_host_begin_capture(d, S1, NULL), VPMM_DRV_INVALID);
    assert_int_equal(vpmm_host_begin_capture(d, S1, &id), VPMM_DRV_OK);
    assert_int_equal(id, 1);
    assert_int_equal(capture_status(d, S1, &got), VPMM_CAPTURE_ACTIVE);
    assert_int_equal(got, 1);
    assert_int_equal(capture_status(d, S2, &got), VPMM_CAPTURE_NONE);
    assert_int_equal(vpmm_host_begin_capture(d, S1, &got), VPMM_DRV_ERROR);
    assert_int_equal(d->last_code, 401);
    assert_string_equal(d->last_call, "cuStreamBeginCapture");
    CHECKED(d);

    /* Captured work is not executed; the pre-capture item still completes. */
    assert_int_equal(vpmm_host_enqueue(d, S1), 0);
    assert_int_equal(vpmm_host_stream_enqueued(d, S1), 1);
    vpmm_host_complete(d, S1);
    assert_true(vpmm_host_stream_idle(d, S1));

    /* Recording during capture is allowed (and mem calls are too: nothing else to check). */
    assert_int_equal(d->event_record(d, ev, S1), VPMM_DRV_OK);
    assert_int_equal(capture_status(d, S1, NULL), VPMM_CAPTURE_ACTIVE);

    /* Only the origin ends a capture; a clean end succeeds and frees the stream. */
    expect_capture_failure(d, vpmm_host_end_capture(d, S2), 401, "cuStreamEndCapture");
    assert_int_equal(vpmm_host_end_capture(d, S1), VPMM_DRV_OK);
    assert_int_equal(capture_status(d, S1, &got), VPMM_CAPTURE_NONE);
    assert_int_equal(vpmm_host_enqueue(d, S1), 2);

    /* The event still stands for graph work: querying it is an error, and so is waiting on it
     * (the graph it belongs to is closed). */
    expect_failure(d, d->event_query(d, ev), VPMM_DRV_ERROR, 907, VPMM_DRV_EVENT_QUERY);
    expect_failure(d, d->stream_wait_event(d, S2, ev), VPMM_DRV_ERROR, 905,
                   VPMM_DRV_STREAM_WAIT_EVENT);
    /* Recording it outside capture makes it an ordinary event again. */
    assert_int_equal(d->event_record(d, ev, S1), VPMM_DRV_OK);
    assert_int_equal(d->event_query(d, ev), VPMM_DRV_NOT_READY);

    /* Ids are never reused. */
    assert_int_equal(vpmm_host_begin_capture(d, S2, &id), VPMM_DRV_OK);
    assert_int_equal(id, 2);
    assert_int_equal(vpmm_host_end_capture(d, S2), VPMM_DRV_OK);
    CHECKED(d);
    assert_int_equal(d->event_destroy(d, ev), VPMM_DRV_OK);
    close_host(d);
}

static void test_capture_invalidation(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    uint64_t id, got;
    vpmm_drv_event_t ev, plain;
    assert_int_equal(d->event_create(d, NULL, &ev), VPMM_DRV_OK);
    assert_int_equal(d->event_create(d, NULL, &plain), VPMM_DRV_OK);

    /* Querying a captured event: error 907 and the capture is invalidated. */
    assert_int_equal(vpmm_host_begin_capture(d, S1, &id), VPMM_DRV_OK);
    assert_int_equal(d->event_record(d, ev, S1), VPMM_DRV_OK);
    expect_failure(d, d->event_query(d, ev), VPMM_DRV_ERROR, 907, VPMM_DRV_EVENT_QUERY);
    assert_int_equal(capture_status(d, S1, &got), VPMM_CAPTURE_INVALIDATED);
    assert_int_equal(got, id);
    /* An invalidated capture refuses further work until it is ended. */
    expect_failure(d, d->event_record(d, plain, S1), VPMM_DRV_ERROR, 901, VPMM_DRV_EVENT_RECORD);
    expect_failure(d, d->stream_wait_event(d, S1, ev), VPMM_DRV_ERROR, 901,
                   VPMM_DRV_STREAM_WAIT_EVENT);
    expect_capture_failure(d, vpmm_host_end_capture(d, S1), 901, "cuStreamEndCapture");
    assert_int_equal(capture_status(d, S1, NULL), VPMM_CAPTURE_NONE);
    CHECKED(d);

    /* Waiting on a plain (non-captured) event from a capturing stream: 905, invalidated. */
    vpmm_host_enqueue(d, S2);
    assert_int_equal(d->event_record(d, plain, S2), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_begin_capture(d, S1, &id), VPMM_DRV_OK);
    expect_failure(d, d->stream_wait_event(d, S1, plain), VPMM_DRV_ERROR, 905,
                   VPMM_DRV_STREAM_WAIT_EVENT);
    assert_int_equal(capture_status(d, S1, NULL), VPMM_CAPTURE_INVALIDATED);
    expect_capture_failure(d, vpmm_host_end_capture(d, S1), 901, "cuStreamEndCapture");

    /* Two captures merged through a wait: 902, both invalidated. */
    uint64_t id1, id2;
    assert_int_equal(vpmm_host_begin_capture(d, S1, &id1), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_begin_capture(d, S2, &id2), VPMM_DRV_OK);
    assert_true(id1 != id2);
    assert_int_equal(d->event_record(d, ev, S1), VPMM_DRV_OK);
    expect_failure(d, d->stream_wait_event(d, S2, ev), VPMM_DRV_ERROR, 902,
                   VPMM_DRV_STREAM_WAIT_EVENT);
    assert_int_equal(capture_status(d, S1, NULL), VPMM_CAPTURE_INVALIDATED);
    assert_int_equal(capture_status(d, S2, NULL), VPMM_CAPTURE_INVALIDATED);
    expect_capture_failure(d, vpmm_host_end_capture(d, S1), 901, "cuStreamEndCapture");
    expect_capture_failure(d, vpmm_host_end_capture(d, S2), 901, "cuStreamEndCapture");

    /* Synchronizing the device during a capture: 900, invalidated; work stays pending. */
    vpmm_host_enqueue(d, S3);
    assert_int_equal(vpmm_host_begin_capture(d, S1, &id), VPMM_DRV_OK);
    expect_failure(d, d->synchronize(d), VPMM_DRV_ERROR, 900, VPMM_DRV_SYNCHRONIZE);
    assert_false(vpmm_host_stream_idle(d, S3));
    assert_int_equal(capture_status(d, S1, NULL), VPMM_CAPTURE_INVALIDATED);
    expect_capture_failure(d, vpmm_host_end_capture(d, S1), 901, "cuStreamEndCapture");
    assert_int_equal(d->synchronize(d), VPMM_DRV_OK);
    assert_true(vpmm_host_stream_idle(d, S3));
    CHECKED(d);

    assert_int_equal(d->event_destroy(d, ev), VPMM_DRV_OK);
    assert_int_equal(d->event_destroy(d, plain), VPMM_DRV_OK);
    expect_empty(d);
    close_host(d);
}

/*
 * The legacy default stream is never captured, as in CUDA (the pool's hot path relies on it,
 * driver.h rule 6): beginning a capture on it fails, and it cannot join one through a wait.
 */
static void test_capture_not_on_legacy_stream(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 64 * MiB);
    vpmm_stream_t s = vpmm_host_stream_create(d);
    vpmm_drv_event_t ev;
    vpmm_capture_status_t st;
    uint64_t id = 0;

    assert_int_equal(vpmm_host_begin_capture(d, NULL, &id), VPMM_DRV_NOT_SUPPORTED);
    assert_int_equal(d->last_code, 900);
    assert_int_equal(vpmm_host_begin_capture(d, (vpmm_stream_t)(uintptr_t)1, &id),
                     VPMM_DRV_NOT_SUPPORTED);
    assert_int_equal(vpmm_host_begin_capture(d, s, &id), VPMM_DRV_OK);
    assert_int_equal(d->event_create(d, NULL, &ev), VPMM_DRV_OK);
    assert_int_equal(d->event_record(d, ev, s), VPMM_DRV_OK); /* a node in s's capture */
    assert_int_equal(d->stream_wait_event(d, NULL, ev), VPMM_DRV_ERROR);
    assert_int_equal(d->last_code, 906);
    assert_int_equal(d->capture_info(d, NULL, &st, &id, NULL), VPMM_DRV_OK);
    assert_int_equal(st, VPMM_CAPTURE_NONE);
    assert_int_equal(d->capture_info(d, s, &st, &id, NULL), VPMM_DRV_OK);
    assert_int_equal(st, VPMM_CAPTURE_INVALIDATED); /* as CUDA: the implicit join broke it */
    assert_int_equal(vpmm_host_end_capture(d, s), VPMM_DRV_ERROR);
    assert_int_equal(d->event_destroy(d, ev), VPMM_DRV_OK);
    CHECKED(d);
    close_host(d);
}

/* A stream that waits on a captured event joins the capture, and leaves when the origin ends. */
static void test_capture_join(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    uint64_t id, got;
    vpmm_drv_event_t fork_ev, join_ev;
    assert_int_equal(d->event_create(d, NULL, &fork_ev), VPMM_DRV_OK);
    assert_int_equal(d->event_create(d, NULL, &join_ev), VPMM_DRV_OK);

    assert_int_equal(vpmm_host_enqueue(d, S2), 1); /* real work on the side stream */
    assert_int_equal(vpmm_host_begin_capture(d, S1, &id), VPMM_DRV_OK);
    assert_int_equal(d->event_record(d, fork_ev, S1), VPMM_DRV_OK);
    assert_int_equal(d->stream_wait_event(d, S2, fork_ev), VPMM_DRV_OK);
    assert_int_equal(capture_status(d, S2, &got), VPMM_CAPTURE_ACTIVE);
    assert_int_equal(got, id);
    assert_int_equal(vpmm_host_enqueue(d, S2), 0); /* captured now */
    /* Joined, not originated: cannot end it. */
    expect_capture_failure(d, vpmm_host_end_capture(d, S2), 903, "cuStreamEndCapture");
    /* The side stream forks further: a third stream joins through it. */
    assert_int_equal(d->event_record(d, join_ev, S2), VPMM_DRV_OK);
    assert_int_equal(d->stream_wait_event(d, S3, join_ev), VPMM_DRV_OK);
    assert_int_equal(capture_status(d, S3, &got), VPMM_CAPTURE_ACTIVE);
    assert_int_equal(got, id);
    /* Join back into the origin (a wait inside the same capture is fine). */
    assert_int_equal(d->stream_wait_event(d, S1, join_ev), VPMM_DRV_OK);
    CHECKED(d);

    assert_int_equal(vpmm_host_end_capture(d, S1), VPMM_DRV_OK);
    assert_int_equal(capture_status(d, S1, NULL), VPMM_CAPTURE_NONE);
    assert_int_equal(capture_status(d, S2, NULL), VPMM_CAPTURE_NONE);
    assert_int_equal(capture_status(d, S3, NULL), VPMM_CAPTURE_NONE);
    assert_int_equal(vpmm_host_enqueue(d, S2), 2);
    /* The pre-capture item was never blocked by the capture. */
    assert_int_equal(vpmm_host_advance(d, S2, 2), 2);

    /* The captured waits were logged with signal_seq 0. */
    vpmm_host_wait_t w = vpmm_host_wait_at(d, 0);
    assert_ptr_equal(w.waiter, S2);
    assert_ptr_equal(w.signaller, S1);
    assert_int_equal(w.signal_seq, 0);
    assert_int_equal(vpmm_host_wait_count(d), 3);
    CHECKED(d);
    assert_int_equal(d->event_destroy(d, fork_ev), VPMM_DRV_OK);
    assert_int_equal(d->event_destroy(d, join_ev), VPMM_DRV_OK);
    close_host(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_streams),
        cmocka_unit_test(test_event_record_query),
        cmocka_unit_test(test_waits_across_three_streams),
        cmocka_unit_test(test_record_after_wait),
        cmocka_unit_test(test_barrier_graphs),
        cmocka_unit_test(test_capture_basics),
        cmocka_unit_test(test_capture_invalidation),
        cmocka_unit_test(test_capture_join),
        cmocka_unit_test(test_capture_not_on_legacy_stream),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
