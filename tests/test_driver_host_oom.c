/*
 * test_driver_host_oom.c — the host emulation backend's own host-memory failures on its several
 * devices' paths (src/backends/host/: node and view creation, the access masks of a partial grant
 * or revoke, an import, an event or stream_device registering a stream): each allocation such a
 * call makes is refused in turn (tests/oom_wrap.h; linked with --wrap=malloc,calloc,realloc), and
 * the call must fail with the backend's out-of-memory answer and leave the node exactly as it was
 * — counts, access bits, the kernel's protections, descriptors — or, once no allocation is left
 * to refuse, succeed.
 *
 * Every sweep step calls vpmm_host_check() and vpmm_host_check_access() (CHECKED) after the
 * refused call. One thread: the wrappers' state is plain globals.
 */
#include "driver_host_test_util.h"
#include "oom_wrap.h"

#include <string.h>
#include <unistd.h>

/* Runs `call` with the n-th allocation refused, for n = 1, 2, ... until a run refuses none; `ok`
 * is the call's success, `undo` puts a success back, `same` asserts nothing changed after a
 * refused run. */
#define SWEEP(call_result, call, ok_expr, undo, same)                                              \
    for (unsigned long n_ = 1;; n_++) {                                                            \
        oom_start(n_);                                                                             \
        oom_armed = 1;                                                                             \
        call_result = (call);                                                                      \
        oom_armed = 0;                                                                             \
        if (oom_refused() == 0) {                                                                  \
            assert_true(ok_expr);                                                                  \
            undo;                                                                                  \
            break;                                                                                 \
        }                                                                                          \
        same;                                                                                      \
    }

static uint64_t access_at(vpmm_driver_t *d, uintptr_t va)
{
    uint64_t mask = 0;
    for (int k = 0; k < d->device_count; k++) {
        int rw = 0;
        assert_int_equal(d->get_access(d, va, k, &rw), VPMM_DRV_OK);
        mask |= (uint64_t)rw << k;
    }
    return mask;
}

/* A node, a view of another device, a view of the shared node: out of memory, nothing is left. */
static void test_open_refused(void **state)
{
    (void)state;
    size_t fds = open_fds();
    vpmm_host_options_t opt = { .devices = 4 };
    vpmm_driver_t *d = NULL, *v = NULL;
    vpmm_dres_t r;
    SWEEP(r, vpmm_host_open(&opt, &d), r == VPMM_DRV_OK && d, (void)0, {
        assert_int_equal(r, VPMM_DRV_OUT_OF_MEMORY);
        assert_null(d);
        assert_int_equal(open_fds(), fds);
    });
    CHECKED(d);
    SWEEP(r, vpmm_host_open_device(d, 3, &v), r == VPMM_DRV_OK && v, close_host(v), {
        assert_int_equal(r, VPMM_DRV_OUT_OF_MEMORY);
        assert_null(v);
        CHECKED(d);
    });
    close_host(d);
    assert_int_equal(open_fds(), fds);

    vpmm_host_options_t shared = { .memory_limit = 16 * MiB };
    vpmm_driver_t *keep = NULL;
    SWEEP(r, vpmm_host_open_shared(&shared, 1, &d), r == VPMM_DRV_OK && d, keep = d, {
        assert_int_equal(r, VPMM_DRV_OUT_OF_MEMORY);
        assert_null(d);
        assert_int_equal(open_fds(), fds); /* no node was left behind */
    });
    SWEEP(r, vpmm_host_open_shared(&shared, 2, &v), r == VPMM_DRV_OK && v, close_host(v), {
        assert_int_equal(r, VPMM_DRV_OUT_OF_MEMORY);
        assert_null(v);
        CHECKED(keep);
    });
    close_host(keep);
    assert_int_equal(open_fds(), fds);
}

/* Grants and revokes of part of two mappings need a mask per granule for each. */
static void test_partial_access_refused(void **state)
{
    (void)state;
    vpmm_host_options_t opt = { .devices = 3 };
    vpmm_driver_t *d = open_host_opt(&opt), *d2 = NULL;
    assert_int_equal(vpmm_host_open_device(d, 2, &d2), VPMM_DRV_OK);
    uintptr_t va = reserve(d, 16 * MiB);
    vpmm_drv_handle_t h1 = create(d, 2 * G), h2 = create(d, 2 * G);
    map_rw(d, va, 2 * G, h1);
    map_rw(d, va + 2 * G, 2 * G, h2);
    const int one = 1;
    vpmm_dres_t r;
    /* Granules 1 and 2: the second of the first mapping, the first of the second. */
    SWEEP(r, d2->set_access(d2, va + G, 2 * G, &one, 1), r == VPMM_DRV_OK, (void)0, {
        expect_failure(d2, r, VPMM_DRV_ERROR, 2, VPMM_DRV_SET_ACCESS);
        for (size_t i = 0; i < 4; i++)
            assert_int_equal(access_at(d, va + i * G), 0x1);
        CHECKED(d);
    });
    CHECKED(d);
    assert_int_equal(access_at(d, va + G), 0x7);
    assert_int_equal(access_at(d, va + 3 * G), 0x1);
    /* Back to one mask each, then a partial revoke. */
    assert_int_equal(d2->set_access(d2, va, 4 * G, &one, 1), VPMM_DRV_OK);
    SWEEP(r, d->revoke_access(d, va + G, 2 * G, 2), r == VPMM_DRV_OK, (void)0, {
        expect_failure(d, r, VPMM_DRV_ERROR, 2, VPMM_DRV_REVOKE_ACCESS);
        for (size_t i = 0; i < 4; i++)
            assert_int_equal(access_at(d, va + i * G), 0x7);
        CHECKED(d);
    });
    assert_int_equal(access_at(d, va + G), 0x3);
    assert_int_equal(access_at(d, va), 0x7);
    CHECKED(d);
    assert_int_equal(d->mem_unmap(d, va, 2 * G), VPMM_DRV_OK);
    assert_int_equal(d->mem_unmap(d, va + 2 * G, 2 * G), VPMM_DRV_OK);
    assert_int_equal(d->mem_release(d, h1), VPMM_DRV_OK);
    assert_int_equal(d->mem_release(d, h2), VPMM_DRV_OK);
    assert_int_equal(d->va_free(d, va, 16 * MiB), VPMM_DRV_OK);
    close_host(d2);
    expect_empty(d);
    close_host(d);
}

static void test_import_refused(void **state)
{
    (void)state;
    vpmm_driver_t *a = open_host(0, 0), *b = open_host(0, 0);
    vpmm_drv_handle_t h = create(a, G), imp = 0;
    vpmm_drv_shareable_t sh = { .fd = -1 };
    assert_int_equal(a->mem_export(a, h, &sh), VPMM_DRV_OK);
    size_t fds = open_fds();
    vpmm_host_counts_t before;
    vpmm_host_counts(b, &before);
    vpmm_dres_t r;
    SWEEP(r, b->mem_import(b, &sh, &imp), r == VPMM_DRV_OK && imp,
          assert_int_equal(b->mem_release(b, imp), VPMM_DRV_OK), {
              expect_failure(b, r, VPMM_DRV_ERROR, 2, VPMM_DRV_MEM_IMPORT);
              assert_int_equal(imp, 0);
              expect_same_counts(b, &before);
              assert_int_equal(open_fds(), fds);
              CHECKED(b);
          });
    expect_empty(b);
    assert_int_equal(close(sh.fd), 0);
    assert_int_equal(a->mem_release(a, h), VPMM_DRV_OK);
    close_host(b);
    close_host(a);
}

/* An event on a stream first used there, and stream_device of an unknown value: both register
 * the stream; refused, they leave no event and name no device. */
static void test_stream_registration_refused(void **state)
{
    (void)state;
    vpmm_host_options_t opt = { .devices = 2 };
    vpmm_driver_t *d = open_host_opt(&opt), *d1 = NULL;
    assert_int_equal(vpmm_host_open_device(d, 1, &d1), VPMM_DRV_OK);
    vpmm_drv_event_t ev = NULL;
    vpmm_dres_t r;
    SWEEP(r, d1->event_create(d1, S1, &ev), r == VPMM_DRV_OK && ev,
          assert_int_equal(d->event_destroy(d, ev), VPMM_DRV_OK), {
              expect_failure(d1, r, VPMM_DRV_ERROR, 2, VPMM_DRV_EVENT_CREATE);
              assert_null(ev);
              vpmm_host_counts_t c;
              vpmm_host_counts(d, &c);
              assert_int_equal(c.events, 0);
              CHECKED(d);
          });
    int dev = -1;
    assert_int_equal(d->stream_device(d, S1, &dev), VPMM_DRV_OK);
    assert_int_equal(dev, 1); /* registered by the event's create, on d1's device */
    SWEEP(r, d1->stream_device(d1, S2, &dev), r == VPMM_DRV_OK && dev == 1, (void)0, {
        expect_failure(d1, r, VPMM_DRV_ERROR, 2, VPMM_DRV_STREAM_DEVICE);
        assert_int_equal(dev, 1);
        CHECKED(d);
    });
    assert_int_equal(d->stream_device(d, S2, &dev), VPMM_DRV_OK);
    assert_int_equal(dev, 1);
    close_host(d1);
    expect_empty(d);
    close_host(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_refused),
        cmocka_unit_test(test_partial_access_refused),
        cmocka_unit_test(test_import_refused),
        cmocka_unit_test(test_stream_registration_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
