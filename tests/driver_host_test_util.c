/*
 * driver_host_test_util.c — see driver_host_test_util.h. Not thread-safe (the tests call these
 * from their own thread only).
 */
#include "driver_host_test_util.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>

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
    assert_int_equal(c.imported, 0);
    assert_int_equal(c.imported_bytes, 0);
    assert_int_equal(c.mappings, 0);
    assert_int_equal(c.mapped_bytes, 0);
    assert_int_equal(c.reservations, 0);
    assert_int_equal(c.reserved_bytes, 0);
    assert_int_equal(c.events, 0);
    assert_int_equal(c.graphs, 0);
    assert_int_equal(c.user_objects, 0);
    assert_true(c.touched_bytes <= c.retired_bytes); /* exported bytes stay for importers */
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

void expect_same_counts(vpmm_driver_t *d, const vpmm_host_counts_t *before)
{
    vpmm_host_counts_t now;
    vpmm_host_counts(d, &now);
    assert_int_equal(now.handles, before->handles);
    assert_int_equal(now.handle_bytes, before->handle_bytes);
    assert_int_equal(now.imported, before->imported);
    assert_int_equal(now.imported_bytes, before->imported_bytes);
    assert_int_equal(now.mappings, before->mappings);
    assert_int_equal(now.mapped_bytes, before->mapped_bytes);
    assert_int_equal(now.reservations, before->reservations);
    assert_int_equal(now.reserved_bytes, before->reserved_bytes);
    assert_int_equal(now.events, before->events);
    assert_int_equal(now.graphs, before->graphs);
    assert_int_equal(now.user_objects, before->user_objects);
}

uintptr_t reserve(vpmm_driver_t *d, size_t size)
{
    uintptr_t va = 0;
    assert_int_equal(d->va_reserve(d, size, 0, &va), VPMM_DRV_OK);
    CHECKED(d);
    return va;
}

vpmm_drv_handle_t create(vpmm_driver_t *d, size_t size)
{
    vpmm_drv_handle_t h = 0;
    assert_int_equal(d->mem_create(d, size, &h), VPMM_DRV_OK);
    assert_true(h != 0);
    CHECKED(d);
    return h;
}

void map_rw(vpmm_driver_t *d, uintptr_t va, size_t size, vpmm_drv_handle_t h)
{
    assert_int_equal(d->mem_map(d, va, size, h, 0), VPMM_DRV_OK);
    assert_int_equal(d->set_access(d, va, size, NULL, 0), VPMM_DRV_OK);
    CHECKED(d);
}

vma_t vma_at(const void *p)
{
    vma_t v = { 0 };
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    char line[512];
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        int path_at = 0;
        if (sscanf(line, "%lx-%lx %4s %*s %*s %*s %n", &lo, &hi, v.perms, &path_at) < 3)
            continue;
        if ((uintptr_t)p < lo || (uintptr_t)p >= hi)
            continue;
        v.found = 1;
        if (path_at > 0)
            snprintf(v.path, sizeof v.path, "%.*s", (int)strcspn(line + path_at, "\n"),
                     line + path_at);
        break;
    }
    fclose(f);
    return v;
}

int readable(const void *p)
{
    vma_t v = vma_at(p);
    return v.found && v.perms[0] == 'r';
}

int writable(const void *p)
{
    vma_t v = vma_at(p);
    return v.found && v.perms[1] == 'w';
}

size_t open_fds(void)
{
    size_t n = 0;
    DIR *dir = opendir("/proc/self/fd");
    assert_non_null(dir);
    for (struct dirent *e = readdir(dir); e; e = readdir(dir))
        n += e->d_name[0] != '.';
    closedir(dir);
    return n;
}
