/*
 * test_driver_fault.c — tests of the fault-injection decorator (src/backends/fault/driver_fault.c)
 * over the host backend: per-entry n-th call failures that never reach the inner driver (the graph
 * and user object entries included), "any entry" failures counted across entries, sticky failures,
 * disarming, call and live-object counters (user objects as the caller owns them), propagation
 * of the inner driver's own errors, naming and ownership.
 *
 * Each test wraps a fresh host instance; the inner state is read through vpmm_fault_inner and
 * checked with vpmm_host_check before the wrapper (and with it the inner driver) is closed.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "driver.h"
#include "driver_fault.h"
#include "driver_host.h"

#define MiB ((size_t)1 << 20)
#define G   (2 * MiB)
#define S1  ((vpmm_stream_t)(uintptr_t)0x2001)

static vpmm_driver_t *open_wrapped(void)
{
    /* Two devices: revoke_access needs a peer to revoke. */
    vpmm_host_options_t opt = { .granularity = G, .memory_limit = 256 * MiB, .devices = 2 };
    vpmm_driver_t *host = NULL, *w = NULL;
    assert_int_equal(vpmm_host_open(&opt, &host), VPMM_DRV_OK);
    assert_int_equal(vpmm_fault_wrap(host, &w), VPMM_DRV_OK);
    assert_ptr_equal(vpmm_fault_inner(w), host);
    return w;
}

static void close_wrapped(vpmm_driver_t *w)
{
    assert_int_equal(vpmm_host_check(vpmm_fault_inner(w), 1), 0);
    w->close(w);
}

static int fixture_dtor_runs;

static void fixture_dtor(void *arg)
{
    (void)arg;
    fixture_dtor_runs++;
}

/* Streams for begin_capture (BEGIN_STREAM(k)) and end_capture (CAPTURING(k)). */
#define BEGIN_STREAM(k) ((vpmm_stream_t)(uintptr_t)(0x4000 + (k)))
#define CAPTURING(k)    ((vpmm_stream_t)(uintptr_t)(0x5000 + (k)))

/*
 * Objects prepared through the inner driver (so they do not count as wrapper calls): enough of
 * everything for each entry to be called three times with valid arguments. The captures that
 * end_capture ends are begun only for that entry (a capture would make synchronize fail).
 */
typedef struct fixture {
    vpmm_driver_t *w, *inner;
    uintptr_t spare_va[3]; /* unmapped reservations, for va_free */
    vpmm_drv_handle_t h;   /* a handle to map */
    vpmm_drv_handle_t spare_h[3];
    uintptr_t map_va;            /* a reservation with room for three more mappings */
    uintptr_t mapped_va[3];      /* mapped, not yet accessible */
    vpmm_drv_event_t ev[3];      /* spare events */
    vpmm_drv_event_t pending;    /* recorded on S1 with work pending */
    vpmm_graph_t graph;          /* a captured graph, the caller's */
    vpmm_graph_t spare_graph[3]; /* captured graphs, for graph_destroy */
    vpmm_drv_uobj_t retain_obj[3], release_obj[3];
    uintptr_t peer_va[3];           /* mapped, device 1 granted: for revoke_access */
    vpmm_drv_shareable_t shared[3]; /* exported handles, for mem_import */
    vpmm_drv_handle_t imported[3];  /* what mem_import made (released by the node's close) */
} fixture_t;

static void fixture_init(fixture_t *f, vpmm_drv_entry_t entry)
{
    memset(f, 0, sizeof *f);
    f->w = open_wrapped();
    vpmm_driver_t *d = f->inner = vpmm_fault_inner(f->w);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(d->va_reserve(d, G, 0, &f->spare_va[i]), VPMM_DRV_OK);
        assert_int_equal(d->mem_create(d, G, &f->spare_h[i]), VPMM_DRV_OK);
        assert_int_equal(d->event_create(d, NULL, &f->ev[i]), VPMM_DRV_OK);
    }
    assert_int_equal(d->mem_create(d, G, &f->h), VPMM_DRV_OK);
    assert_int_equal(d->va_reserve(d, 32 * MiB, 0, &f->map_va), VPMM_DRV_OK);
    for (int i = 0; i < 3; i++) {
        f->mapped_va[i] = f->map_va + 8 * MiB + (size_t)i * G;
        assert_int_equal(d->mem_map(d, f->mapped_va[i], G, f->h, 0), VPMM_DRV_OK);
    }
    for (int i = 0; i < 3; i++) {
        vpmm_drv_handle_t ph;
        const int peer = 1;
        f->peer_va[i] = f->map_va + 16 * MiB + (size_t)i * G;
        assert_int_equal(d->mem_create(d, G, &ph), VPMM_DRV_OK);
        assert_int_equal(d->mem_map(d, f->peer_va[i], G, ph, 0), VPMM_DRV_OK);
        assert_int_equal(d->set_access(d, f->peer_va[i], G, &peer, 1), VPMM_DRV_OK);
        assert_int_equal(d->mem_release(d, ph), VPMM_DRV_OK); /* the mapping keeps it */
        assert_int_equal(d->mem_export(d, f->spare_h[i], &f->shared[i]), VPMM_DRV_OK);
        f->imported[i] = 0;
    }
    assert_int_equal(d->event_create(d, NULL, &f->pending), VPMM_DRV_OK);
    vpmm_host_enqueue(d, S1);
    assert_int_equal(d->event_record(d, f->pending, S1), VPMM_DRV_OK);
    const vpmm_stream_t gs = (vpmm_stream_t)(uintptr_t)0x6000;
    assert_int_equal(d->begin_capture(d, gs, VPMM_CAPTURE_MODE_GLOBAL), VPMM_DRV_OK);
    assert_int_equal(d->end_capture(d, gs, &f->graph), VPMM_DRV_OK);
    for (int i = 0; i < 3; i++) {
        const vpmm_stream_t s = (vpmm_stream_t)(uintptr_t)(0x7000 + i);
        assert_int_equal(d->begin_capture(d, s, VPMM_CAPTURE_MODE_GLOBAL), VPMM_DRV_OK);
        assert_int_equal(d->end_capture(d, s, &f->spare_graph[i]), VPMM_DRV_OK);
    }
    for (int i = 0; i < 3; i++) {
        assert_int_equal(d->user_object_create(d, fixture_dtor, NULL, &f->retain_obj[i]),
                         VPMM_DRV_OK);
        assert_int_equal(d->user_object_create(d, fixture_dtor, NULL, &f->release_obj[i]),
                         VPMM_DRV_OK);
        if (entry == VPMM_DRV_END_CAPTURE)
            assert_int_equal(d->begin_capture(d, CAPTURING(i), VPMM_CAPTURE_MODE_GLOBAL),
                             VPMM_DRV_OK);
    }
    assert_int_equal(vpmm_fault_total_calls(f->w), 0);
}

/* The inner state an injected failure must leave alone. */
typedef struct snapshot {
    vpmm_host_counts_t counts; /* graphs and user objects included */
    size_t waits;
    int s1_idle;
    int ev_ready[3];
    int access[3];    /* set_access reached: the mapping is writable */
    int capturing[6]; /* status of BEGIN_STREAM(k) and CAPTURING(k) */
    int dtor_runs;
} snapshot_t;

/* Whether va is writable, from the kernel's table (touching it could raise SIGSEGV). */
static int probe_writable(uintptr_t va)
{
    char line[512];
    FILE *f = fopen("/proc/self/maps", "r");
    int w = 0;
    assert_non_null(f);
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perms[5];
        if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) == 3 && va >= lo && va < hi) {
            w = perms[1] == 'w';
            break;
        }
    }
    fclose(f);
    return w;
}

static snapshot_t snap(const fixture_t *f)
{
    snapshot_t s;
    memset(&s, 0, sizeof s);
    vpmm_host_counts(f->inner, &s.counts);
    s.counts.touched_bytes = 0;
    s.waits = vpmm_host_wait_count(f->inner);
    s.s1_idle = vpmm_host_stream_idle(f->inner, S1);
    for (int i = 0; i < 3; i++) {
        s.ev_ready[i] = f->inner->event_query(f->inner, f->ev[i]) == VPMM_DRV_OK;
        s.access[i] = probe_writable(f->mapped_va[i]);
        vpmm_capture_status_t st[2];
        assert_int_equal(f->inner->capture_info(f->inner, BEGIN_STREAM(i), &st[0], NULL, NULL),
                         VPMM_DRV_OK);
        assert_int_equal(f->inner->capture_info(f->inner, CAPTURING(i), &st[1], NULL, NULL),
                         VPMM_DRV_OK);
        s.capturing[i] = (int)st[0];
        s.capturing[3 + i] = (int)st[1];
    }
    s.dtor_runs = fixture_dtor_runs;
    return s;
}

/* Calls entry e for the k-th time (k = 0, 1, 2) with valid arguments; out-parameters start as
 * sentinels and *touched says whether the call wrote one. */
static vpmm_dres_t call_entry(fixture_t *f, vpmm_drv_entry_t e, int k, int *touched)
{
    vpmm_driver_t *w = f->w;
    vpmm_dres_t r = VPMM_DRV_ERROR;
    const uint64_t sentinel = 0x5e5e5e5e5e5e5e5eULL;
    uint64_t out = sentinel, out2 = sentinel;
    vpmm_graph_t graph = (vpmm_graph_t)(uintptr_t)sentinel;
    *touched = 0;
    switch (e) {
    case VPMM_DRV_GRANULARITY: {
        size_t g = (size_t)sentinel;
        r = w->granularity(w, &g);
        out = g;
        break;
    }
    case VPMM_DRV_VA_RESERVE: {
        uintptr_t va = (uintptr_t)sentinel;
        r = w->va_reserve(w, G, 0, &va);
        out = va;
        break;
    }
    case VPMM_DRV_VA_FREE:
        r = w->va_free(w, f->spare_va[k], G);
        break;
    case VPMM_DRV_MEM_CREATE: {
        vpmm_drv_handle_t h = sentinel;
        r = w->mem_create(w, G, &h);
        out = h;
        break;
    }
    case VPMM_DRV_MEM_RELEASE:
        r = w->mem_release(w, f->spare_h[k]);
        break;
    case VPMM_DRV_MEM_MAP:
        r = w->mem_map(w, f->map_va + (size_t)k * G, G, f->h, 0);
        break;
    case VPMM_DRV_MEM_UNMAP:
        r = w->mem_unmap(w, f->mapped_va[k], G);
        break;
    case VPMM_DRV_SET_ACCESS:
        r = w->set_access(w, f->mapped_va[k], G, NULL, 0);
        break;
    case VPMM_DRV_REVOKE_ACCESS:
        r = w->revoke_access(w, f->peer_va[k], G, 1);
        break;
    case VPMM_DRV_STREAM_DEVICE: {
        int dev = (int)0x5e5e5e5e;
        r = w->stream_device(w, S1, &dev);
        out = dev == (int)0x5e5e5e5e ? sentinel : (uint64_t)dev;
        break;
    }
    case VPMM_DRV_MEM_EXPORT: {
        vpmm_drv_shareable_t sh = { (int)0x5e5e5e5e, sentinel, (size_t)sentinel };
        r = w->mem_export(w, f->h, &sh);
        out = sh.fd == (int)0x5e5e5e5e ? sentinel : (uint64_t)sh.fd;
        if (r == VPMM_DRV_OK)
            close(sh.fd);
        break;
    }
    case VPMM_DRV_MEM_IMPORT: {
        vpmm_drv_handle_t h = sentinel;
        r = w->mem_import(w, &f->shared[k], &h);
        out = h;
        if (r == VPMM_DRV_OK)
            f->imported[k] = h;
        break;
    }
    case VPMM_DRV_EVENT_CREATE: {
        vpmm_drv_event_t ev = (vpmm_drv_event_t)(uintptr_t)sentinel;
        r = w->event_create(w, NULL, &ev);
        out = (uint64_t)(uintptr_t)ev;
        break;
    }
    case VPMM_DRV_EVENT_DESTROY:
        r = w->event_destroy(w, f->ev[k]);
        break;
    case VPMM_DRV_EVENT_RECORD:
        r = w->event_record(w, f->ev[k], S1); /* S1 has pending work: the event turns pending */
        break;
    case VPMM_DRV_EVENT_QUERY:
        /* The failing call (k = 1) asks about pending work: had it reached the host, the host
         * would have answered NOT_READY and set its last_code to 600. */
        r = w->event_query(w, k == 1 ? f->pending : f->ev[k]);
        break;
    case VPMM_DRV_STREAM_WAIT_EVENT:
        r = w->stream_wait_event(w, (vpmm_stream_t)(uintptr_t)(0x3000 + k), f->pending);
        break;
    case VPMM_DRV_CAPTURE_INFO: {
        vpmm_capture_status_t st = (vpmm_capture_status_t)0x5e;
        r = w->capture_info(w, S1, &st, &out2, &graph);
        out = st == (vpmm_capture_status_t)0x5e ? sentinel : (uint64_t)st;
        break;
    }
    case VPMM_DRV_BEGIN_CAPTURE:
        r = w->begin_capture(w, BEGIN_STREAM(k), VPMM_CAPTURE_MODE_GLOBAL);
        break;
    case VPMM_DRV_END_CAPTURE:
        r = w->end_capture(w, CAPTURING(k), &graph);
        break;
    case VPMM_DRV_USER_OBJECT_CREATE: {
        vpmm_drv_uobj_t o = (vpmm_drv_uobj_t)(uintptr_t)sentinel;
        r = w->user_object_create(w, fixture_dtor, NULL, &o);
        out = (uint64_t)(uintptr_t)o;
        break;
    }
    case VPMM_DRV_GRAPH_RETAIN_USER_OBJECT:
        r = w->graph_retain_user_object(w, f->graph, f->retain_obj[k]);
        break;
    case VPMM_DRV_USER_OBJECT_RELEASE:
        r = w->user_object_release(w, f->release_obj[k]);
        break;
    case VPMM_DRV_GRAPH_DESTROY:
        r = w->graph_destroy(w, f->spare_graph[k]);
        break;
    case VPMM_DRV_MEM_GET_INFO: {
        size_t fr = (size_t)sentinel, tot = (size_t)sentinel;
        r = w->mem_get_info(w, &fr, &tot);
        out = fr;
        out2 = tot;
        break;
    }
    case VPMM_DRV_SYNCHRONIZE:
        r = w->synchronize(w);
        break;
    default:
        fail_msg("unknown entry %d", (int)e);
    }
    *touched = out != sentinel || out2 != sentinel || graph != (vpmm_graph_t)(uintptr_t)sentinel;
    return r;
}

static void expect_same_snapshot(const snapshot_t *a, const snapshot_t *b)
{
    assert_memory_equal(&a->counts, &b->counts, sizeof a->counts);
    assert_int_equal(a->waits, b->waits);
    assert_int_equal(a->s1_idle, b->s1_idle);
    assert_memory_equal(a->ev_ready, b->ev_ready, sizeof a->ev_ready);
    assert_memory_equal(a->access, b->access, sizeof a->access);
    assert_memory_equal(a->capturing, b->capturing, sizeof a->capturing);
    assert_int_equal(a->dtor_runs, b->dtor_runs);
}

/* For every entry: the 2nd call fails with the armed result, changes nothing in the inner
 * driver, is counted, and the 1st and 3rd calls go through (one-shot). get_access, the
 * validator's query, is neither counted nor failed (driver.h rule 9). */
static void test_each_entry_nth(void **state)
{
    (void)state;
    for (int e = 0; e < VPMM_DRV_ENTRY_COUNT; e++) {
        fixture_t f;
        if (e == VPMM_DRV_GET_ACCESS) {
            int rw = 0;
            fixture_init(&f, (vpmm_drv_entry_t)e);
            vpmm_fault_fail_nth(f.w, VPMM_DRV_GET_ACCESS, 1, VPMM_DRV_ERROR);
            vpmm_fault_fail_any_nth(f.w, 1, VPMM_DRV_ERROR);
            assert_int_equal(f.w->get_access(f.w, f.peer_va[0], 1, &rw), VPMM_DRV_OK);
            assert_int_equal(rw, 1);
            assert_int_equal(vpmm_fault_injected(f.w), 0);
            assert_int_equal(vpmm_fault_total_calls(f.w), 0);
            vpmm_fault_clear(f.w);
            close_wrapped(f.w);
            continue;
        }
        fixture_init(&f, (vpmm_drv_entry_t)e);
        const vpmm_dres_t want = e % 2 ? VPMM_DRV_OUT_OF_MEMORY : VPMM_DRV_ERROR;
        vpmm_fault_fail_nth(f.w, (vpmm_drv_entry_t)e, 2, want);
        int touched;

        vpmm_dres_t r = call_entry(&f, (vpmm_drv_entry_t)e, 0, &touched);
        if (r != VPMM_DRV_OK)
            fail_msg("%s: %d (%d)", vpmm_drv_entry_name((vpmm_drv_entry_t)e), (int)r,
                     f.w->last_code);
        assert_int_equal(vpmm_fault_injected(f.w), 0);

        vpmm_host_enqueue(f.inner, S1); /* pending work: a synchronize that got through shows */
        snapshot_t before = snap(&f);
        assert_false(before.s1_idle);
        f.inner->last_code = 0;
        r = call_entry(&f, (vpmm_drv_entry_t)e, 1, &touched);
        assert_int_equal(r, want);
        assert_false(touched); /* out-parameters untouched */
        assert_int_equal(f.w->last_code, 999);
        assert_string_equal(f.w->last_call, vpmm_drv_entry_name((vpmm_drv_entry_t)e));
        assert_int_equal(f.inner->last_code, 0); /* the inner driver was not reached */
        snapshot_t after = snap(&f);
        expect_same_snapshot(&before, &after);
        assert_int_equal(vpmm_fault_injected(f.w), 1);
        assert_int_equal(vpmm_fault_calls(f.w, (vpmm_drv_entry_t)e), 2);
        assert_int_equal(vpmm_fault_total_calls(f.w), 2);

        r = call_entry(&f, (vpmm_drv_entry_t)e, 2, &touched);
        assert_int_equal(r, VPMM_DRV_OK);
        assert_int_equal(vpmm_fault_injected(f.w), 1);
        assert_int_equal(vpmm_fault_calls(f.w, (vpmm_drv_entry_t)e), 3);
        for (int o = 0; o < VPMM_DRV_ENTRY_COUNT; o++)
            if (o != e)
                assert_int_equal(vpmm_fault_calls(f.w, (vpmm_drv_entry_t)o), 0);
        close_wrapped(f.w);
    }
}

/* Failing the very first call (n = 1) works too, e.g. mem_create creates no handle. */
static void test_first_call_fails(void **state)
{
    (void)state;
    vpmm_driver_t *w = open_wrapped();
    vpmm_drv_handle_t h = 77;
    vpmm_fault_fail_nth(w, VPMM_DRV_MEM_CREATE, 1, VPMM_DRV_OUT_OF_MEMORY);
    assert_int_equal(w->mem_create(w, G, &h), VPMM_DRV_OUT_OF_MEMORY);
    assert_int_equal(h, 77);
    vpmm_host_counts_t c;
    vpmm_host_counts(vpmm_fault_inner(w), &c);
    assert_int_equal(c.handles, 0);
    vpmm_fault_live_t live;
    vpmm_fault_live(w, &live);
    assert_int_equal(live.handles, 0);
    assert_int_equal(w->mem_create(w, G, &h), VPMM_DRV_OK);
    assert_int_equal(w->mem_release(w, h), VPMM_DRV_OK);
    close_wrapped(w);
}

/* The any-countdown counts calls of every entry. */
static void test_any_nth(void **state)
{
    (void)state;
    vpmm_driver_t *w = open_wrapped();
    size_t g, fr, tot;
    uintptr_t va;
    vpmm_drv_handle_t h;
    vpmm_drv_event_t ev;
    vpmm_fault_fail_any_nth(w, 4, VPMM_DRV_ERROR);
    assert_int_equal(w->granularity(w, &g), VPMM_DRV_OK);           /* 1 */
    assert_int_equal(w->va_reserve(w, 4 * G, 0, &va), VPMM_DRV_OK); /* 2 */
    assert_int_equal(w->mem_create(w, G, &h), VPMM_DRV_OK);         /* 3 */
    assert_int_equal(w->mem_map(w, va, G, h, 0), VPMM_DRV_ERROR);   /* 4: injected */
    assert_int_equal(w->last_code, 999);
    assert_string_equal(w->last_call, "cuMemMap");
    vpmm_host_counts_t c;
    vpmm_host_counts(vpmm_fault_inner(w), &c);
    assert_int_equal(c.mappings, 0);
    assert_int_equal(w->mem_map(w, va, G, h, 0), VPMM_DRV_OK); /* one-shot */
    assert_int_equal(vpmm_fault_injected(w), 1);
    assert_int_equal(vpmm_fault_total_calls(w), 5);
    assert_int_equal(vpmm_fault_calls(w, VPMM_DRV_MEM_MAP), 2);

    /* Both countdowns tick on every call; the per-entry result wins when both fire. */
    vpmm_fault_fail_any_nth(w, 2, VPMM_DRV_ERROR);
    vpmm_fault_fail_nth(w, VPMM_DRV_MEM_GET_INFO, 2, VPMM_DRV_OUT_OF_MEMORY);
    assert_int_equal(w->mem_get_info(w, &fr, &tot), VPMM_DRV_OK);
    assert_int_equal(w->mem_get_info(w, &fr, &tot), VPMM_DRV_OUT_OF_MEMORY);
    assert_int_equal(vpmm_fault_injected(w), 2);
    assert_int_equal(w->event_create(w, NULL, &ev), VPMM_DRV_OK); /* both disarmed now */
    assert_int_equal(w->event_destroy(w, ev), VPMM_DRV_OK);

    /* Any-failure on a different entry than the armed one. */
    vpmm_fault_fail_any_nth(w, 2, VPMM_DRV_INVALID);
    vpmm_fault_fail_nth(w, VPMM_DRV_SET_ACCESS, 3, VPMM_DRV_ERROR);
    assert_int_equal(w->set_access(w, va, G, NULL, 0), VPMM_DRV_OK); /* entry 1, any 1 */
    assert_int_equal(w->capture_info(w, S1, &(vpmm_capture_status_t){ 0 }, NULL, NULL),
                     VPMM_DRV_INVALID);                                 /* any 2 fires */
    assert_int_equal(w->set_access(w, va, G, NULL, 0), VPMM_DRV_OK);    /* entry 2 */
    assert_int_equal(w->set_access(w, va, G, NULL, 0), VPMM_DRV_ERROR); /* entry 3 fires */
    assert_int_equal(vpmm_fault_injected(w), 4);

    assert_int_equal(w->mem_unmap(w, va, G), VPMM_DRV_OK);
    assert_int_equal(w->mem_release(w, h), VPMM_DRV_OK);
    assert_int_equal(w->va_free(w, va, 4 * G), VPMM_DRV_OK);
    close_wrapped(w);
}

static void test_sticky_and_disarm(void **state)
{
    (void)state;
    vpmm_driver_t *w = open_wrapped();
    size_t g;

    /* n = 0 disarms a pending countdown. */
    vpmm_fault_fail_nth(w, VPMM_DRV_GRANULARITY, 3, VPMM_DRV_ERROR);
    vpmm_fault_fail_nth(w, VPMM_DRV_GRANULARITY, 0, VPMM_DRV_ERROR);
    for (int i = 0; i < 5; i++)
        assert_int_equal(w->granularity(w, &g), VPMM_DRV_OK);
    vpmm_fault_fail_any_nth(w, 2, VPMM_DRV_ERROR);
    vpmm_fault_fail_any_nth(w, 0, VPMM_DRV_ERROR);
    for (int i = 0; i < 5; i++)
        assert_int_equal(w->granularity(w, &g), VPMM_DRV_OK);

    /* fail_from keeps failing from the n-th call on, until cleared. */
    vpmm_fault_fail_from(w, VPMM_DRV_GRANULARITY, 2, VPMM_DRV_NOT_SUPPORTED);
    assert_int_equal(w->granularity(w, &g), VPMM_DRV_OK);
    for (int i = 0; i < 4; i++)
        assert_int_equal(w->granularity(w, &g), VPMM_DRV_NOT_SUPPORTED);
    assert_int_equal(vpmm_fault_injected(w), 4);

    /* clear disarms everything at once. */
    vpmm_fault_fail_any_nth(w, 1, VPMM_DRV_ERROR);
    vpmm_fault_fail_nth(w, VPMM_DRV_SYNCHRONIZE, 1, VPMM_DRV_ERROR);
    vpmm_fault_clear(w);
    assert_int_equal(w->granularity(w, &g), VPMM_DRV_OK);
    assert_int_equal(w->synchronize(w), VPMM_DRV_OK);

    /* Arming with VPMM_DRV_OK still fails (as VPMM_DRV_ERROR): an "OK failure" would be
     * indistinguishable from a real call that never happened. */
    vpmm_fault_fail_nth(w, VPMM_DRV_GRANULARITY, 1, VPMM_DRV_OK);
    g = 1;
    assert_int_equal(w->granularity(w, &g), VPMM_DRV_ERROR);
    assert_int_equal(g, 1);

    /* Out-of-range entries are ignored. */
    vpmm_fault_fail_nth(w, VPMM_DRV_ENTRY_COUNT, 1, VPMM_DRV_ERROR);
    vpmm_fault_fail_from(w, (vpmm_drv_entry_t)-1, 1, VPMM_DRV_ERROR);
    assert_int_equal(vpmm_fault_calls(w, VPMM_DRV_ENTRY_COUNT), 0);
    assert_int_equal(w->granularity(w, &g), VPMM_DRV_OK);
    close_wrapped(w);
}

static void test_counters_and_live(void **state)
{
    (void)state;
    vpmm_driver_t *w = open_wrapped();
    vpmm_fault_live_t live;
    uintptr_t va[2];
    vpmm_drv_handle_t h[3];
    vpmm_drv_event_t ev[2];

    for (int i = 0; i < 2; i++)
        assert_int_equal(w->va_reserve(w, 8 * MiB, 0, &va[i]), VPMM_DRV_OK);
    for (int i = 0; i < 3; i++)
        assert_int_equal(w->mem_create(w, G, &h[i]), VPMM_DRV_OK);
    for (int i = 0; i < 2; i++)
        assert_int_equal(w->event_create(w, NULL, &ev[i]), VPMM_DRV_OK);
    assert_int_equal(w->mem_map(w, va[0], G, h[0], 0), VPMM_DRV_OK);
    assert_int_equal(w->mem_map(w, va[0] + G, G, h[0], 0), VPMM_DRV_OK);
    assert_int_equal(w->mem_map(w, va[0] + 2 * G, G, h[1], 0), VPMM_DRV_OK);
    vpmm_fault_live(w, &live);
    assert_int_equal(live.reservations, 2);
    assert_int_equal(live.handles, 3);
    assert_int_equal(live.mappings, 3);
    assert_int_equal(live.events, 2);

    /* Real inner failures do not move live counts, and their raw error is copied up. */
    assert_int_equal(w->mem_release(w, 12345), VPMM_DRV_INVALID);
    assert_int_equal(w->last_code, 1);
    assert_string_equal(w->last_call, "cuMemRelease");
    assert_int_equal(w->mem_unmap(w, va[1], G), VPMM_DRV_INVALID);
    assert_int_equal(w->va_free(w, va[0], 8 * MiB), VPMM_DRV_INVALID); /* still mapped */
    assert_int_equal(w->event_destroy(w, NULL), VPMM_DRV_INVALID);
    vpmm_drv_handle_t none;
    assert_int_equal(w->mem_create(w, 512 * MiB, &none), VPMM_DRV_OUT_OF_MEMORY);
    assert_int_equal(w->last_code, 2);
    assert_string_equal(w->last_call, "cuMemCreate");
    assert_int_equal(vpmm_fault_injected(w), 0);
    /* Neither do injected ones. */
    vpmm_fault_fail_nth(w, VPMM_DRV_MEM_RELEASE, 1, VPMM_DRV_ERROR);
    assert_int_equal(w->mem_release(w, h[2]), VPMM_DRV_ERROR);
    vpmm_fault_live(w, &live);
    assert_int_equal(live.reservations, 2);
    assert_int_equal(live.handles, 3);
    assert_int_equal(live.mappings, 3);
    assert_int_equal(live.events, 2);

    /* Call counts: injected failures included; reset zeroes calls but not live counts. */
    assert_int_equal(vpmm_fault_calls(w, VPMM_DRV_MEM_CREATE), 4);
    assert_int_equal(vpmm_fault_calls(w, VPMM_DRV_MEM_RELEASE), 2);
    assert_int_equal(vpmm_fault_calls(w, VPMM_DRV_MEM_MAP), 3);
    assert_int_equal(vpmm_fault_total_calls(w), 2 + 4 + 2 + 3 + 2 + 1 + 1 + 1);
    vpmm_fault_reset_calls(w);
    assert_int_equal(vpmm_fault_total_calls(w), 0);
    assert_int_equal(vpmm_fault_injected(w), 0);
    for (int e = 0; e < VPMM_DRV_ENTRY_COUNT; e++)
        assert_int_equal(vpmm_fault_calls(w, (vpmm_drv_entry_t)e), 0);
    vpmm_fault_live(w, &live);
    assert_int_equal(live.handles, 3);

    /* Tear down through the wrapper: every live count returns to zero. */
    assert_int_equal(w->mem_unmap(w, va[0], G), VPMM_DRV_OK);
    assert_int_equal(w->mem_unmap(w, va[0] + G, G), VPMM_DRV_OK);
    assert_int_equal(w->mem_unmap(w, va[0] + 2 * G, G), VPMM_DRV_OK);
    for (int i = 0; i < 3; i++)
        assert_int_equal(w->mem_release(w, h[i]), VPMM_DRV_OK);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(w->va_free(w, va[i], 8 * MiB), VPMM_DRV_OK);
        assert_int_equal(w->event_destroy(w, ev[i]), VPMM_DRV_OK);
    }
    vpmm_fault_live(w, &live);
    assert_int_equal(live.reservations, 0);
    assert_int_equal(live.handles, 0);
    assert_int_equal(live.mappings, 0);
    assert_int_equal(live.events, 0);
    assert_int_equal(vpmm_fault_total_calls(w), 3 + 3 + 2 + 2);
    close_wrapped(w);
}

/* Live user objects are the references the caller owns: create +1, release -1, and a retain that
 * moved the reference to a graph -1; failures (real or injected) move nothing. */
static void test_live_user_objects(void **state)
{
    (void)state;
    vpmm_driver_t *w = open_wrapped();
    vpmm_driver_t *inner = vpmm_fault_inner(w);
    vpmm_fault_live_t live;
    vpmm_drv_uobj_t o[3], none = NULL;
    vpmm_graph_t g = NULL;
    const vpmm_stream_t s = (vpmm_stream_t)(uintptr_t)0x7000;
    fixture_dtor_runs = 0;

    for (int i = 0; i < 3; i++)
        assert_int_equal(w->user_object_create(w, fixture_dtor, NULL, &o[i]), VPMM_DRV_OK);
    vpmm_fault_fail_nth(w, VPMM_DRV_USER_OBJECT_CREATE, 1, VPMM_DRV_OUT_OF_MEMORY);
    assert_int_equal(w->user_object_create(w, fixture_dtor, NULL, &none), VPMM_DRV_OUT_OF_MEMORY);
    assert_null(none);
    assert_int_equal(w->user_object_create(w, NULL, NULL, &none), VPMM_DRV_INVALID); /* real */
    vpmm_fault_live(w, &live);
    assert_int_equal(live.user_objects, 3);
    assert_int_equal(vpmm_host_user_objects(inner), 3);

    /* Through the wrapper: begin, capture_info's graph, retain on it while capturing, end. */
    assert_int_equal(w->begin_capture(w, s, VPMM_CAPTURE_MODE_GLOBAL), VPMM_DRV_OK);
    vpmm_capture_status_t st;
    uint64_t id;
    vpmm_graph_t cg = NULL;
    assert_int_equal(w->capture_info(w, s, &st, &id, &cg), VPMM_DRV_OK);
    assert_int_equal(st, VPMM_CAPTURE_ACTIVE);
    assert_non_null(cg);
    vpmm_fault_fail_nth(w, VPMM_DRV_GRAPH_RETAIN_USER_OBJECT, 1, VPMM_DRV_ERROR);
    assert_int_equal(w->graph_retain_user_object(w, cg, o[0]), VPMM_DRV_ERROR);
    assert_int_equal(w->graph_retain_user_object(w, cg, o[0]), VPMM_DRV_OK);
    assert_int_equal(w->graph_retain_user_object(w, cg, o[0]), VPMM_DRV_INVALID); /* moved */
    assert_int_equal(w->last_code, 1);
    assert_string_equal(w->last_call, "cuGraphRetainUserObject");
    vpmm_fault_live(w, &live);
    assert_int_equal(live.user_objects, 2);
    assert_int_equal(w->end_capture(w, s, &g), VPMM_DRV_OK);
    assert_ptr_equal(g, cg);

    vpmm_fault_fail_nth(w, VPMM_DRV_USER_OBJECT_RELEASE, 1, VPMM_DRV_ERROR);
    assert_int_equal(w->user_object_release(w, o[1]), VPMM_DRV_ERROR);
    assert_int_equal(fixture_dtor_runs, 0);
    assert_int_equal(w->user_object_release(w, o[1]), VPMM_DRV_OK);
    assert_int_equal(fixture_dtor_runs, 1);
    assert_int_equal(w->user_object_release(w, o[1]), VPMM_DRV_INVALID); /* already gone */
    assert_int_equal(w->user_object_release(w, o[2]), VPMM_DRV_OK);
    vpmm_fault_live(w, &live);
    assert_int_equal(live.user_objects, 0);
    assert_int_equal(vpmm_host_user_objects(inner), 1); /* o[0], held by the graph */
    assert_int_equal(vpmm_host_graph_destroy(inner, g), VPMM_DRV_OK);
    assert_int_equal(fixture_dtor_runs, 3);
    assert_int_equal(vpmm_host_user_objects(inner), 0);

    assert_int_equal(vpmm_fault_calls(w, VPMM_DRV_USER_OBJECT_CREATE), 5);
    assert_int_equal(vpmm_fault_calls(w, VPMM_DRV_GRAPH_RETAIN_USER_OBJECT), 3);
    assert_int_equal(vpmm_fault_calls(w, VPMM_DRV_USER_OBJECT_RELEASE), 4);
    assert_int_equal(vpmm_fault_calls(w, VPMM_DRV_BEGIN_CAPTURE), 1);
    assert_int_equal(vpmm_fault_calls(w, VPMM_DRV_END_CAPTURE), 1);
    assert_int_equal(vpmm_fault_calls(w, VPMM_DRV_CAPTURE_INFO), 1);
    assert_int_equal(vpmm_fault_injected(w), 3);
    close_wrapped(w);
}

/* Injected begin/end failures do nothing: no capture begins, and an armed end leaves the capture
 * going (the inner driver never saw it), so a later end still gets the graph. */
static void test_capture_entries_injected(void **state)
{
    (void)state;
    vpmm_driver_t *w = open_wrapped();
    vpmm_driver_t *inner = vpmm_fault_inner(w);
    const vpmm_stream_t s = (vpmm_stream_t)(uintptr_t)0x7100;
    vpmm_capture_status_t st;
    vpmm_graph_t g = NULL;
    vpmm_fault_fail_nth(w, VPMM_DRV_BEGIN_CAPTURE, 1, VPMM_DRV_ERROR);
    assert_int_equal(w->begin_capture(w, s, VPMM_CAPTURE_MODE_GLOBAL), VPMM_DRV_ERROR);
    assert_string_equal(w->last_call, "cuStreamBeginCapture");
    assert_int_equal(vpmm_host_graphs(inner), 0);
    assert_int_equal(w->begin_capture(w, s, VPMM_CAPTURE_MODE_GLOBAL), VPMM_DRV_OK);
    vpmm_fault_fail_nth(w, VPMM_DRV_END_CAPTURE, 1, VPMM_DRV_ERROR);
    assert_int_equal(w->end_capture(w, s, &g), VPMM_DRV_ERROR);
    assert_null(g);
    assert_int_equal(w->capture_info(w, s, &st, NULL, NULL), VPMM_DRV_OK);
    assert_int_equal(st, VPMM_CAPTURE_ACTIVE);
    /* A real failure is copied up: the legacy stream cannot capture. */
    assert_int_equal(w->begin_capture(w, NULL, VPMM_CAPTURE_MODE_GLOBAL), VPMM_DRV_NOT_SUPPORTED);
    assert_int_equal(w->last_code, 900);
    assert_int_equal(w->end_capture(w, s, &g), VPMM_DRV_OK);
    assert_non_null(g);
    assert_int_equal(vpmm_host_graph_destroy(inner, g), VPMM_DRV_OK);
    assert_int_equal(vpmm_host_graphs(inner), 0);
    close_wrapped(w);
}

/* Released-while-mapped: the wrapper counts the release (the caller's view), the host keeps the
 * memory until the last unmap. */
static void test_live_counts_follow_caller_view(void **state)
{
    (void)state;
    vpmm_driver_t *w = open_wrapped();
    uintptr_t va;
    vpmm_drv_handle_t h;
    vpmm_fault_live_t live;
    assert_int_equal(w->va_reserve(w, 4 * MiB, 0, &va), VPMM_DRV_OK);
    assert_int_equal(w->mem_create(w, G, &h), VPMM_DRV_OK);
    assert_int_equal(w->mem_map(w, va, G, h, 0), VPMM_DRV_OK);
    assert_int_equal(w->mem_release(w, h), VPMM_DRV_OK);
    vpmm_fault_live(w, &live);
    assert_int_equal(live.handles, 0);
    assert_int_equal(live.mappings, 1);
    vpmm_host_counts_t c;
    vpmm_host_counts(vpmm_fault_inner(w), &c);
    assert_int_equal(c.handles, 1);
    assert_int_equal(w->mem_unmap(w, va, G), VPMM_DRV_OK);
    assert_int_equal(w->va_free(w, va, 4 * MiB), VPMM_DRV_OK);
    close_wrapped(w);
}

static void test_wrap_name_and_ownership(void **state)
{
    (void)state;
    vpmm_driver_t *host = NULL, *w = (vpmm_driver_t *)&host, *ww = NULL;
    assert_int_equal(vpmm_fault_wrap(NULL, &w), VPMM_DRV_INVALID);
    assert_null(w);
    assert_int_equal(vpmm_host_open(NULL, &host), VPMM_DRV_OK);
    assert_int_equal(vpmm_fault_wrap(host, NULL), VPMM_DRV_INVALID);
    assert_int_equal(vpmm_fault_wrap(host, &w), VPMM_DRV_OK);
    assert_string_equal(w->name, "fault(host)");
    /* Wrappers stack; closing the outer one closes everything (leak checkers verify). */
    assert_int_equal(vpmm_fault_wrap(w, &ww), VPMM_DRV_OK);
    assert_string_equal(ww->name, "fault(fault(host))");
    assert_ptr_equal(vpmm_fault_inner(ww), w);
    vpmm_fault_fail_nth(w, VPMM_DRV_GRANULARITY, 1, VPMM_DRV_ERROR);
    size_t g = 0;
    assert_int_equal(ww->granularity(ww, &g), VPMM_DRV_ERROR); /* inner wrapper's failure */
    assert_int_equal(ww->last_code, 999);
    assert_string_equal(ww->last_call, "cuMemGetAllocationGranularity");
    assert_int_equal(vpmm_fault_injected(ww), 0);
    assert_int_equal(vpmm_fault_injected(w), 1);

    /* Controls given something that is not a wrapper do nothing. */
    vpmm_fault_fail_nth(host, VPMM_DRV_GRANULARITY, 1, VPMM_DRV_ERROR);
    vpmm_fault_fail_any_nth(NULL, 1, VPMM_DRV_ERROR);
    vpmm_fault_clear(host);
    vpmm_fault_reset_calls(NULL);
    assert_null(vpmm_fault_inner(host));
    assert_int_equal(vpmm_fault_total_calls(host), 0);
    assert_int_equal(vpmm_fault_injected(NULL), 0);
    assert_int_equal(vpmm_fault_calls(host, VPMM_DRV_GRANULARITY), 0);
    vpmm_fault_live_t live = { 1, 1, 1, 1, 1 };
    vpmm_fault_live(host, &live);
    assert_int_equal(live.handles, 0);
    assert_int_equal(live.user_objects, 0);
    vpmm_fault_live(w, NULL);
    assert_int_equal(host->granularity(host, &g), VPMM_DRV_OK);

    /* The wrapper forwards close only: close is never counted or failed. */
    vpmm_fault_fail_any_nth(ww, 1, VPMM_DRV_ERROR);
    ww->close(ww);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_entry_nth),
        cmocka_unit_test(test_first_call_fails),
        cmocka_unit_test(test_any_nth),
        cmocka_unit_test(test_sticky_and_disarm),
        cmocka_unit_test(test_counters_and_live),
        cmocka_unit_test(test_live_counts_follow_caller_view),
        cmocka_unit_test(test_live_user_objects),
        cmocka_unit_test(test_capture_entries_injected),
        cmocka_unit_test(test_wrap_name_and_ownership),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
