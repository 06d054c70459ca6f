/*
 * driver_host_test_util.h — helpers shared by the host backend's tests: test_driver_host.c
 * (memory, src/backends/host/driver_host_mem.c), test_driver_host_stream.c and
 * test_driver_host_thread.c (streams, events, capture, src/backends/host/driver_host_stream.c),
 * test_driver_host_graph.c (graphs, execs, user objects, src/backends/host/driver_host_graph.c)
 * and test_driver_host_devices.c (devices, views, access, export and import, the shared node:
 * src/backends/host/driver_host.c, _access.c, _mem.c).
 *
 * Every test opens its own node with open_host (several devices: open_host_opt, then views of
 * other devices with vpmm_host_open_device), calls vpmm_host_check() and vpmm_host_check_access()
 * after each mutation (CHECKED) and closes it with close_host, which checks once more. A failed
 * call must leave the instance's counts untouched and name itself in last_call/last_code
 * (expect_failure); a test that cleans up ends with expect_empty. Helpers one file alone uses stay
 * static in that file. Not thread-safe: only the test thread calls these.
 */
#ifndef VPMM_DRIVER_HOST_TEST_UTIL_H
#define VPMM_DRIVER_HOST_TEST_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "driver.h"
#include "driver_host.h"

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define TiB ((size_t)1 << 40)
#define G   (2 * MiB)

/* Streams as tests name them: any pointer value but CUDA's special handles is a stream of its
 * own (non-blocking). */
#define S1 ((vpmm_stream_t)(uintptr_t)0x1001)
#define S2 ((vpmm_stream_t)(uintptr_t)0x1002)
#define S3 ((vpmm_stream_t)(uintptr_t)0x1003)
/* CU_STREAM_LEGACY and CU_STREAM_PER_THREAD (driver_host.h, "streams"). */
#define LEGACY     ((vpmm_stream_t)(uintptr_t)0x1)
#define PER_THREAD ((vpmm_stream_t)(uintptr_t)0x2)

/* Every invariant of the node, the kernel's protections included (vpmm_host_check_access). */
#define CHECKED(d) assert_int_equal(vpmm_host_check((d), 1) + vpmm_host_check_access((d), 1), 0)

/* Opens a host instance (0 = the backend's default granularity / memory limit); fails the test
 * on error. */
vpmm_driver_t *open_host(size_t gran, size_t limit);
/* Opens a host instance with every option given; fails the test on error. */
vpmm_driver_t *open_host_opt(const vpmm_host_options_t *opt);
/* Checks the instance one last time and closes it. */
void close_host(vpmm_driver_t *d);

/* Asserts a call's result and the driver error and entry it recorded. */
void expect_failure(vpmm_driver_t *d, vpmm_dres_t got, vpmm_dres_t want, int code,
                    vpmm_drv_entry_t entry);
/* Asserts a failure that has no entry in the enum (capture calls): VPMM_DRV_ERROR with CUDA's
 * code and call name. */
void expect_capture_failure(vpmm_driver_t *d, vpmm_dres_t got, int code, const char *call);
/* Asserts that the node holds nothing: no handle (own or imported), mapping, reservation, event,
 * graph or user object, and no touched byte. */
void expect_empty(vpmm_driver_t *d);

/* Asserts that the node's counts (touched bytes aside) are those of *before. */
void expect_same_counts(vpmm_driver_t *d, const vpmm_host_counts_t *before);

/* A reservation of size bytes (default alignment) / a handle of size bytes; fail the test on
 * error. */
uintptr_t reserve(vpmm_driver_t *d, size_t size);
vpmm_drv_handle_t create(vpmm_driver_t *d, size_t size);
/* Maps the whole handle h at va and grants d's device (no peer). */
void map_rw(vpmm_driver_t *d, uintptr_t va, size_t size, vpmm_drv_handle_t h);

/* The kernel's view of the mapping holding p (/proc/self/maps): its permissions ("rw-s",
 * "---p") and path. Reading the table never touches p, so a PROT_NONE page raises no signal and
 * valgrind sees no access to it. */
typedef struct vma {
    int found;
    char perms[5];
    char path[128];
} vma_t;
vma_t vma_at(const void *p);
/* Whether the page holding p is readable / writable, by the kernel's table. */
int readable(const void *p);
int writable(const void *p);

/* Descriptors the process holds (entries of /proc/self/fd). */
size_t open_fds(void);

/* Counts destructor runs; checks the instance from inside the destructor (it must be consistent
 * by then) and records instead of asserting (a longjmp out of a driver call would be wrong). */
typedef struct dtor_log {
    vpmm_driver_t *d;
    int runs;
    size_t bad_in_dtor;
} dtor_log_t;

/* The destructor that logs into a dtor_log_t. */
void dtor(void *arg);
/* A user object whose destructor is dtor(l); fails the test on error. */
vpmm_drv_uobj_t uobj_new(vpmm_driver_t *d, dtor_log_t *l);

/* The capture status of s (through capture_info); its capture id in *id when id is not NULL. */
vpmm_capture_status_t capture_status(vpmm_driver_t *d, vpmm_stream_t s, uint64_t *id);

#endif
