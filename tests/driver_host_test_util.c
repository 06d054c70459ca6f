/*
 * driver_host_test_util.c — see driver_host_test_util.h. Not thread-safe (the tests call these
 * from their own thread only).
 */
#include "driver_host_test_util.h"

vpmm_driver_t *open_host(size_t gran, size_t limit)
{
    vpmm_host_options_t opt = { .granularity = gran, .memory_limit = limit };
    return open_host_opt(&opt);
}

vpmm_driver_t *open_host_opt(const vpmm_host_options_t *opt)
{
    vpmm_driver_t *d = NULL;
    assert_int_equal(vpmm_host_open(opt, &d), VPMM_DRV_OK);
    assert_non_null(d);
    CHECKED(d);
    return d;
}

void close_host(vpmm_driver_t *d)
{
    CHECKED(d);
    d->close(d);
}

void expect_failure(vpmm_driver_t *d, vpmm_dres_t got, vpmm_dres_t want, int code,
                    vpmm_drv_entry_t entry)
{
    assert_int_equal(got, want);
    assert_int_equal(d->last_code, code);
    assert_string_equal(d->last_call, vpmm_drv_entry_name(entry));
}

void expect_empty(vpmm_driver_t *d)
{
    vpmm_host_counts_t c;
    vpmm_host_counts(d, &c);
    assert_int_equal(c.handles, 0);
    assert_int_equal(c.handle_bytes, 0);
    assert_int_equal(c.mappings, 0);
    assert_int_equal(c.mapped_bytes, 0);
    assert_int_equal(c.reservations, 0);
    assert_int_equal(c.reserved_bytes, 0);
    assert_int_equal(c.events, 0);
    assert_int_equal(c.graphs, 0);
    assert_int_equal(c.user_objects, 0);
    assert_int_equal(c.touched_bytes, 0);
    assert_int_equal(vpmm_host_graphs(d), 0);
    assert_int_equal(vpmm_host_user_objects(d), 0);
}

void dtor(void *arg)
{
    dtor_log_t *l = arg;
    l->runs++;
    if (l->d)
        l->bad_in_dtor += vpmm_host_check(l->d, 1);
}

vpmm_drv_uobj_t uobj_new(vpmm_driver_t *d, dtor_log_t *l)
{
    vpmm_drv_uobj_t o = NULL;
    assert_int_equal(d->user_object_create(d, dtor, l, &o), VPMM_DRV_OK);
    assert_non_null(o);
    CHECKED(d);
    return o;
}

vpmm_capture_status_t capture_status(vpmm_driver_t *d, vpmm_stream_t s, uint64_t *id)
{
    vpmm_capture_status_t st = (vpmm_capture_status_t)-1;
    assert_int_equal(d->capture_info(d, s, &st, id, NULL), VPMM_DRV_OK);
    return st;
}

void expect_capture_failure(vpmm_driver_t *d, vpmm_dres_t got, int code, const char *call)
{
    assert_int_equal(got, VPMM_DRV_ERROR);
    assert_int_equal(d->last_code, code);
    assert_string_equal(d->last_call, call);
}
