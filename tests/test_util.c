/*
 * test_util.c — see test_util.h. Not thread-safe (tests are single-threaded).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

static uintptr_t first_base;

static int find_base(const vpmm_region_info_t *r, void *user)
{
    (void)user;
    first_base = r->chunk_base;
    return 1;
}

vpmm_status_t tpool_try_open(tpool_t *t, const tpool_params_t *params, vpmm_driver_t *fault)
{
    tpool_params_t d = { 0 };
    vpmm_config_t cfg;
    vpmm_options_t opt;
    vpmm_status_t st;

    if (params == NULL)
        params = &d;
    memset(t, 0, sizeof *t);
    vpmm_config_init(&cfg);
    cfg.ignore_env = 1;
    cfg.backend = VPMM_BACKEND_HOST;
    cfg.page_size = params->page_size;
    cfg.va_size = params->va_size ? params->va_size : 32 * GiB; /* fits under valgrind too */
    cfg.prealloc_pages = params->prealloc;
    cfg.max_bytes = params->max_bytes;
    cfg.trace_file = params->trace_file;
    cfg.driver_stats = params->driver_stats;
    cfg.worker = params->worker;
    cfg.handle_pages = params->handle_pages;
    if (params->no_large_handles)
        cfg.large_handles = 0;
    cfg.small_bytes = params->small_bytes;
    if (params->per_thread_default)
        cfg.default_stream = VPMM_DEFAULT_STREAM_PER_THREAD;
    if (params->cache_percent != 0)
        cfg.cache_percent = params->cache_percent < 0 ? 0 : params->cache_percent;
    assert_int_equal(vpmm_i_options_resolve(&cfg, &opt), VPMM_SUCCESS);
    if (fault == NULL) {
        vpmm_host_options_t ho = { .granularity = params->granularity,
                                   .memory_limit = params->memory_limit,
                                   .per_thread_default_stream = params->per_thread_default,
                                   .va_limit = params->va_limit,
                                   .devices = params->devices,
                                   .isolated = params->isolated,
                                   .not_exportable = params->not_exportable };
        vpmm_driver_t *host;
        assert_int_equal(vpmm_host_open(&ho, &host), VPMM_DRV_OK);
        assert_int_equal(vpmm_fault_wrap(host, &fault), VPMM_DRV_OK);
    }
    t->fault = fault;
    t->host = vpmm_fault_inner(fault);
    st = vpmm_a_pool_create_on(&opt, fault, 0, &t->pool);
    if (st == VPMM_SUCCESS) {
        CHECK_POOL(t->pool);
        t->node_pools_own = 1;
        t->node_pools = &t->node_pools_own;
    }
    return st;
}

void tpool_open(tpool_t *t, const tpool_params_t *params)
{
    vpmm_status_t st = tpool_try_open(t, params, NULL);
    if (st != VPMM_SUCCESS)
        fail_msg("pool creation failed: %s (%s)", vpmm_status_name(st), vpmm_last_error());
}

void tpool_open_sibling(tpool_t *t, const tpool_t *sibling, int device,
                        const tpool_params_t *params)
{
    tpool_params_t d = { 0 };
    vpmm_driver_t *view, *fault;
    vpmm_status_t st;
    assert_int_equal(vpmm_host_open_device(sibling->host, device, &view), VPMM_DRV_OK);
    assert_int_equal(vpmm_fault_wrap(view, &fault), VPMM_DRV_OK);
    st = tpool_try_open(t, params ? params : &d, fault);
    if (st != VPMM_SUCCESS)
        fail_msg("pool creation failed: %s (%s)", vpmm_status_name(st), vpmm_last_error());
    t->node_pools = sibling->node_pools;
    (*t->node_pools)++;
}

/* What the fault decorator says the pool held; the node's own counts when no other pool uses
 * the node. */
static void assert_released(vpmm_driver_t *fault, int node_empty)
{
    vpmm_fault_live_t live;
    vpmm_host_counts_t hc;
    vpmm_fault_live(fault, &live);
    assert_int_equal(live.handles, 0);
    assert_int_equal(live.mappings, 0);
    assert_int_equal(live.reservations, 0);
    assert_int_equal(live.events, 0);
    if (!node_empty)
        return;
    vpmm_host_counts(vpmm_fault_inner(fault), &hc);
    assert_int_equal(hc.handles, 0);
    assert_int_equal(hc.imported, 0);
    assert_int_equal(hc.mappings, 0);
    assert_int_equal(hc.reservations, 0);
    assert_int_equal(hc.events, 0);
}

void assert_no_driver_leaks(vpmm_driver_t *fault)
{
    assert_released(fault, 1);
}

void tpool_close(tpool_t *t)
{
    int last = 1;
    if (t->pool != NULL) {
        CHECK_POOL(t->pool);
        assert_int_equal(vpmm_pool_destroy(t->pool), VPMM_SUCCESS);
        t->pool = NULL;
    }
    if (t->node_pools != NULL) {
        last = --*t->node_pools == 0;
        t->node_pools = NULL;
    }
    assert_released(t->fault, last);
    t->fault->close(t->fault);
    t->fault = t->host = NULL;
}

void *tmalloc(vpmm_pool_t *pool, size_t size, vpmm_stream_t stream)
{
    void *p = NULL;
    vpmm_status_t st = vpmm_malloc(pool, size, stream, &p);
    if (st != VPMM_SUCCESS)
        fail_msg("vpmm_malloc(%zu) failed: %s (%s)", size, vpmm_status_name(st), vpmm_last_error());
    assert_non_null(p);
    CHECK_POOL(pool);
    return p;
}

void tfree(vpmm_pool_t *pool, void *ptr)
{
    vpmm_status_t st = vpmm_free(pool, ptr);
    if (st != VPMM_SUCCESS)
        fail_msg("vpmm_free(%p) failed: %s (%s)", ptr, vpmm_status_name(st), vpmm_last_error());
    CHECK_POOL(pool);
}

vpmm_stats_t tstats(vpmm_pool_t *pool)
{
    vpmm_stats_t s;
    assert_int_equal(vpmm_get_stats(pool, &s), VPMM_SUCCESS);
    return s;
}

size_t toff(vpmm_pool_t *pool, void *ptr)
{
    vpmm_pool_walk(pool, find_base, NULL);
    return (size_t)((uintptr_t)ptr - first_base);
}

typedef struct find_q {
    uintptr_t addr;
    vpmm_region_info_t info;
    int found;
} find_q_t;

static int find_visit(const vpmm_region_info_t *r, void *user)
{
    find_q_t *q = user;
    if (q->addr >= r->addr && q->addr - r->addr < r->size) {
        q->info = *r;
        q->found = 1;
        return 1;
    }
    return 0;
}

vpmm_region_info_t tregion_of(vpmm_pool_t *pool, const void *ptr)
{
    find_q_t q = { (uintptr_t)ptr, { 0 }, 0 };
    assert_int_equal(vpmm_pool_walk(pool, find_visit, &q), VPMM_SUCCESS);
    if (!q.found)
        fail_msg("%p is in no region of the pool", ptr);
    return q.info;
}

static int hash_region(const vpmm_region_info_t *r, void *user)
{
    tsnap_t *s = user;
    uint64_t v[4] = { r->addr, r->size, (uint64_t)r->state * 2 + (uint64_t)r->ready,
                      (uint64_t)(uintptr_t)r->stream };
    for (int i = 0; i < 4; i++)
        s->layout_hash = (s->layout_hash ^ v[i]) * 0x100000001b3ULL;
    s->regions++;
    return 0;
}

tsnap_t tsnap(vpmm_pool_t *pool)
{
    tsnap_t s;
    memset(&s, 0, sizeof s);
    s.layout_hash = 0xcbf29ce484222325ULL;
    assert_int_equal(vpmm_get_stats(pool, &s.stats), VPMM_SUCCESS);
    assert_int_equal(vpmm_pool_walk(pool, hash_region, &s), VPMM_SUCCESS);
    return s;
}

void assert_snap_equal(const tsnap_t *a, const tsnap_t *b)
{
    assert_memory_equal(&a->stats, &b->stats, sizeof a->stats);
    assert_int_equal(a->regions, b->regions);
    assert_int_equal(a->layout_hash, b->layout_hash);
}

void assert_driver_matches_pool(const tpool_t *t)
{
    const vpmm_pool_t *p = t->pool;
    vpmm_fault_live_t live;
    size_t zombie_maps = 0, events = p->idle_count;
    const vpmm_stream_rec_t *lists[2] = { p->streams, p->retired };

    /* A zombie is a run of whole handles, each one driver mapping. */
    for (const vpmm_region_t *z = p->zombie_head; z; z = z->qnext)
        for (uintptr_t at = z->addr; at < z->addr + z->size; zombie_maps++)
            at += vpmm_i_phys_at(p, at)->size;
    for (int l = 0; l < 2; l++)
        for (const vpmm_stream_rec_t *s = lists[l]; s; s = s->next)
            events += (size_t)(s->recorded - s->completed);
    vpmm_fault_live(t->fault, &live);
    assert_int_equal(live.handles, p->phys_count + p->nunreleased + p->import_handles);
    assert_int_equal(live.mappings, p->phys_count + zombie_maps + p->import_handles);
    assert_int_equal(live.reservations, p->chunk_count + p->nimports);
    assert_int_equal(live.events, events);
}

static unsigned fault_tally[VPMM_DRV_ENTRY_COUNT];

void tfault_note(const char *call)
{
    for (int e = 0; e < VPMM_DRV_ENTRY_COUNT; e++)
        if (call && strcmp(call, vpmm_drv_entry_name((vpmm_drv_entry_t)e)) == 0)
            fault_tally[e]++;
}

int tfault_settle(vpmm_driver_t *fault)
{
    int injected = vpmm_fault_injected(fault) > 0;
    if (injected)
        tfault_note(fault->last_call);
    vpmm_fault_clear(fault);
    return injected;
}

void tfault_sweep(const char *name, tfault_run_t run, const void *scenario, vpmm_dres_t result)
{
    uint64_t k = 1;
    while (run(scenario, k, result))
        k++;
    print_message("%-42s %3llu call sites failed in turn\n", name, (unsigned long long)(k - 1));
}

void tfault_assert_covered(const vpmm_drv_entry_t *used, size_t n)
{
    for (int e = 0; e < VPMM_DRV_ENTRY_COUNT; e++)
        print_message("  %-32s failed %u times\n", vpmm_drv_entry_name((vpmm_drv_entry_t)e),
                      fault_tally[e]);
    for (size_t i = 0; i < n; i++)
        if (fault_tally[used[i]] == 0)
            fail_msg("%s was never failed", vpmm_drv_entry_name(used[i]));
}

extern char **environ; /* POSIX: the program declares it */

/* Whether name (a whole environment entry "NAME=value" is fine) is one of vpmm_i_env_vars. */
static int env_name_known(const char *entry)
{
    size_t len = strcspn(entry, "=");
    for (size_t i = 0; i < vpmm_i_env_var_count; i++)
        if (strlen(vpmm_i_env_vars[i].name) == len &&
            strncmp(vpmm_i_env_vars[i].name, entry, len) == 0)
            return 1;
    return 0;
}

void tenv_unset_all(void)
{
    char name[256];
    int again = 1;

    /* The library's knobs, from its own table; the tests' variables (VPMM_TEST_UNDER_VALGRIND...)
     * stay: they tell the tests how they are run. */
    for (size_t i = 0; i < vpmm_i_env_var_count; i++)
        if (vpmm_i_env_vars[i].reader == NULL)
            assert_int_equal(unsetenv(vpmm_i_env_vars[i].name), 0);
    /* And any VPMM_* name that is none of ours (a test's, or the caller's shell's), which would
     * make every pool creation fail. unsetenv changes environ: look again from the start. */
    while (again) {
        again = 0;
        for (char **e = environ; *e != NULL; e++) {
            size_t len = strcspn(*e, "=");
            if (strncmp(*e, "VPMM_", 5) != 0 || env_name_known(*e) || len >= sizeof name)
                continue;
            memcpy(name, *e, len);
            name[len] = '\0';
            assert_int_equal(unsetenv(name), 0);
            again = 1;
            break;
        }
    }
}

int tenv_clear(void **state)
{
    (void)state;
    tenv_unset_all();
    return 0;
}
