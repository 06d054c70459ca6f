/*
 * test_driver_host_stream.c — tests of the host emulation backend's simulated streams, events
 * and capture (src/driver_host_stream.c): stream identity and progress, event record/query,
 * waits across streams and the barriers they leave (complete() pulls in what it waits on, and
 * terminates on long chains), capture emulation: beginning and ending, invalidation with CUDA's
 * error codes, joining through a wait, and the legacy stream that is never captured; and CUDA's
 * special handles: per-thread streams (0x2) driven from real threads, 0 and 0x1 as one legacy
 * stream, per_thread_default_stream, and the legacy stream's implicit synchronisation with the
 * blocking (per-thread) streams, refused (906) while one of them captures. Capture through the
 * driver table and the graphs it builds are in test_driver_host_graph.c.
 *
 * Streams are bookkeeping only: work advances when a test says so (vpmm_host_advance,
 * vpmm_host_complete) or on synchronize. Every test opens its own instance and calls
 * vpmm_host_check() after each mutation (CHECKED) and before closing. Only the test thread
 * asserts: the threads a test starts hand their results back to it.
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
    expect_failure(d, d->event_create(d, NULL), VPMM_DRV_INVALID, 1, VPMM_DRV_EVENT_CREATE);
    assert_int_equal(d->event_create(d, &ev), VPMM_DRV_OK);
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
    assert_int_equal(d->event_create(d, &ev2), VPMM_DRV_OK);
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
    assert_int_equal(d->event_create(d, &ea), VPMM_DRV_OK);
    assert_int_equal(d->event_create(d, &eb), VPMM_DRV_OK);
    assert_int_equal(d->event_create(d, &done), VPMM_DRV_OK);

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
    assert_int_equal(d->event_create(d, &fresh), VPMM_DRV_OK);
    assert_int_equal(d->stream_wait_event(d, B, fresh), VPMM_DRV_OK);
    assert_int_equal(d->stream_wait_event(d, B, eb), VPMM_DRV_OK);
    assert_int_equal(d->stream_wait_event(d, B, ea), VPMM_DRV_OK); /* A@4: done */
    vpmm_host_enqueue(d, B);
    assert_int_equal(vpmm_host_advance(d, B, 1), 1);

    /* The log lists every wait, in order. */
    const vpmm_host_wait_t want[] = {
        { B, A, 2 },    { C, B, 2 }, { B, A, 4 }, { C, B, 3 },
        { B, NULL, 0 }, { B, B, 3 }, { B, A, 4 },
    };
    assert_int_equal(vpmm_host_wait_count(d), sizeof want / sizeof want[0]);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        vpmm_host_wait_t w = vpmm_host_wait_at(d, i);
        assert_ptr_equal(w.waiter, want[i].waiter);
        assert_ptr_equal(w.signaller, want[i].signaller);
        assert_int_equal(w.signal_seq, want[i].signal_seq);
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
    assert_int_equal(d->event_create(d, &ea), VPMM_DRV_OK);
    assert_int_equal(d->event_create(d, &eb), VPMM_DRV_OK);

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
    assert_int_equal(d->event_create(d, &ev), VPMM_DRV_OK);

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

/* end_capture's failures have no entry in the enum: check them by hand. */
static void expect_capture_failure(vpmm_driver_t *d, vpmm_dres_t got, int code, const char *call)
{
    assert_int_equal(got, VPMM_DRV_ERROR);
    assert_int_equal(d->last_code, code);
    assert_string_equal(d->last_call, call);
}

static void test_capture_basics(void **state)
{
    (void)state;
    vpmm_driver_t *d = open_host(0, 0);
    uint64_t id = 0, got = 99;
    vpmm_drv_event_t ev;
    assert_int_equal(d->event_create(d, &ev), VPMM_DRV_OK);

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
    assert_int_equal(d->event_create(d, &ev), VPMM_DRV_OK);
    assert_int_equal(d->event_create(d, &plain), VPMM_DRV_OK);

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
    assert_int_equal(d->event_create(d, &ev), VPMM_DRV_OK);
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
    assert_int_equal(d->event_create(d, &fork_ev), VPMM_DRV_OK);
    assert_int_equal(d->event_create(d, &join_ev), VPMM_DRV_OK);

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
    assert_int_equal(d->event_create(d, &ev), VPMM_DRV_OK);
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
    assert_int_equal(d->event_create(d, &ev), VPMM_DRV_OK);
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
    assert_int_equal(d->event_create(d, &ev), VPMM_DRV_OK);
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
    assert_int_equal(d->event_create(d, &ev), VPMM_DRV_OK);

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
    assert_int_equal(d->event_create(d, &ex), VPMM_DRV_OK);
    assert_int_equal(d->event_create(d, &el), VPMM_DRV_OK);

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
    assert_int_equal(d->event_create(d, &ev), VPMM_DRV_OK);
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
    assert_int_equal(d->event_create(d, &ev), VPMM_DRV_OK);
    assert_int_equal(d->event_create(d, &fork_ev), VPMM_DRV_OK);
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
        cmocka_unit_test_teardown(test_per_thread_streams, stop_workers),
        cmocka_unit_test(test_thread_tokens_not_reused),
        cmocka_unit_test(test_per_thread_streams_concurrently),
        cmocka_unit_test_teardown(test_default_stream_handles, stop_workers),
        cmocka_unit_test_teardown(test_legacy_syncs_with_per_thread, stop_workers),
        cmocka_unit_test_teardown(test_legacy_wait_orders_per_thread, stop_workers),
        cmocka_unit_test_teardown(test_legacy_sync_barriers_bounded, stop_workers),
        cmocka_unit_test_teardown(test_legacy_refused_while_per_thread_captures, stop_workers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
