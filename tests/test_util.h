/*
 * test_util.h — helpers shared by the core tests.
 *
 * A test pool runs on the host backend wrapped in the fault decorator, so every test can drive
 * streams (vpmm_host_*), count driver calls and inject failures (vpmm_fault_*), and assert after
 * every mutation that the pool's invariants hold (CHECK_POOL). tpool_close destroys the pool and
 * asserts that no handle, mapping, reservation or event is left behind. Random numbers: the one
 * seeded generator of test_rng.h, included here; graph pools and captures: graph_test_util.h.
 */
#ifndef VPMM_TEST_UTIL_H
#define VPMM_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "api.h"
#include "driver_fault.h"
#include "driver_host.h"
#include "core.h"
#include "test_rng.h"
#include "vpmm.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define TiB ((size_t)1 << 40)

typedef struct tpool {
    vpmm_pool_t *pool;
    vpmm_driver_t *fault; /* the pool's driver: counts calls, injects failures */
    vpmm_driver_t *host;  /* the host backend underneath (a view of its node): streams, capture,
                             memory */
    int node_pools_own;   /* the count below, for the pool that opened the node */
    int *node_pools;      /* pools open on the node (tpool_open_sibling points at the opener's
                             count): the node's counts are checked empty when the last closes */
} tpool_t;

typedef struct tpool_params {
    size_t granularity;     /* 0 = 2 MiB */
    size_t page_size;       /* 0 = granularity */
    size_t va_size;         /* 0 = 32 GiB (tests keep VA small; valgrind caps the address space) */
    size_t prealloc;        /* VPMM_PAGES */
    size_t memory_limit;    /* 0 = 80 GiB */
    int cache_percent;      /* 0 = the pool's default, -1 = no cache, else the cap in percent */
    size_t max_bytes;       /* VPMM_MAX_BYTES: 0 = no cap */
    int per_thread_default; /* stream 0 is the calling thread's per-thread stream (pool and host) */
    size_t va_limit;        /* the host backend's address space: 0 = unlimited */
    const char *trace_file; /* VPMM_TRACE_FILE: NULL = none */
    int driver_stats;       /* VPMM_DRIVER_STATS: the counting decorator over the fault one */
    int worker;             /* VPMM_WORKER: 1 = the background worker (off by default) */
    size_t handle_pages;    /* VPMM_HANDLE_PAGES: 0 = the default (1) */
    int no_large_handles;   /* VPMM_LARGE_HANDLES=0: 1 GiB and burst handles off */
    size_t small_bytes;     /* VPMM_SMALL_BYTES: 0 = the default (an 8th of a page), 1 = no size
                               classes (tests whose layouts mix small and large blocks in a page) */
    int devices;            /* devices of the host node: 0 = 1 */
    uint64_t isolated;      /* the node's devices that reach no other (driver_host.h) */
    int not_exportable;     /* the pool's handles cannot be exported (config.ipc = 0) */
} tpool_params_t;

/* Opens a test pool; fails the test on error. */
void tpool_open(tpool_t *t, const tpool_params_t *params);
/* Opens a test pool on device `device` of sibling's host node (a view of it: its streams, memory
 * and limits are the node's); params' host options are the sibling's. */
void tpool_open_sibling(tpool_t *t, const tpool_t *sibling, int device,
                        const tpool_params_t *params);
/* Like tpool_open but returns the creation status (fault-injection tests of creation). */
vpmm_status_t tpool_try_open(tpool_t *t, const tpool_params_t *params, vpmm_driver_t *fault);
/* Destroys the pool and asserts that nothing is leaked; then closes the drivers. */
void tpool_close(tpool_t *t);
/* Asserts the fault decorator's live counts are zero (after the pool is gone), and its host
 * node's. */
void assert_no_driver_leaks(vpmm_driver_t *fault);

#define CHECK_POOL(pool) assert_int_equal(vpmm_pool_check((pool), stderr), 0)

/* vpmm_malloc that must succeed; checks invariants after. */
void *tmalloc(vpmm_pool_t *pool, size_t size, vpmm_stream_t stream);
/* vpmm_free that must succeed; checks invariants after. */
void tfree(vpmm_pool_t *pool, void *ptr);

/*
 * A snapshot of everything observable about a pool: its stats and its region layout. Bad input
 * must leave it equal.
 */
typedef struct tsnap {
    vpmm_stats_t stats;
    size_t regions;
    uint64_t layout_hash;
} tsnap_t;
tsnap_t tsnap(vpmm_pool_t *pool);
void assert_snap_equal(const tsnap_t *a, const tsnap_t *b);

/*
 * Asserts that the driver holds exactly what the pool believes it holds: one handle per page, one
 * mapping per live page plus one per zombie page, one reservation per chunk, and one event per
 * idle or in-flight marker. A leak at any call site shows up here at once.
 */
void assert_driver_matches_pool(const tpool_t *t);

/* Unsets every VPMM_* variable vpmm_pool_create reads (the library's rows of vpmm_i_env_vars,
 * options.h) and every VPMM_* name that is none of the table's; tenv_clear is the same as a
 * cmocka setup/teardown, for the tests that set them. */
void tenv_unset_all(void);
int tenv_clear(void **state);

/* Stats snapshot. */
vpmm_stats_t tstats(vpmm_pool_t *pool);

/* Offset of an address from the first chunk's base (in bytes). */
size_t toff(vpmm_pool_t *pool, void *ptr);

/* The region holding ptr, from the public walk (asserts there is one). */
vpmm_region_info_t tregion_of(vpmm_pool_t *pool, const void *ptr);

/*
 * Fault sweeps (test_faults.c, test_graph_faults.c): a step runs again and again on a fresh pool,
 * failing its 1st, 2nd, 3rd ... driver call, until a run makes no call that could be failed.
 * run(scenario, k, result) makes the run that fails call k with result, and returns whether a
 * failure was injected (tfault_settle). The entry points failed are tallied for the process;
 * tfault_assert_covered prints the tally and fails for each entry of used[] never failed.
 */
typedef int (*tfault_run_t)(const void *scenario, uint64_t k, vpmm_dres_t result);
void tfault_sweep(const char *name, tfault_run_t run, const void *scenario, vpmm_dres_t result);
/* After the step: whether a failure was injected (then its entry is tallied); clears the faults. */
int tfault_settle(vpmm_driver_t *fault);
/* Tallies a failure of the entry named call (vpmm_drv_entry_name) made outside a sweep. */
void tfault_note(const char *call);
void tfault_assert_covered(const vpmm_drv_entry_t *used, size_t n);

#endif /* VPMM_TEST_UTIL_H */
