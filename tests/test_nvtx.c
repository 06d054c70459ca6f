/*
 * test_nvtx.c — vpmm's NVTX annotations (src/core/nvtx.c), seen by a tool: libnvtx_inject.so, a
 * recording NVTX tool that NVTX itself loads through NVTX_INJECTION64_PATH (tests/nvtx_inject.h).
 *
 * A scripted scenario on the host backend, and what the tool must have seen, in order: the
 * "vpmm" domain and its registered range names; a "grow" range (payload: bytes mapped) and, at a
 * chunk's first allocation, a sub-allocator heap over the chunk; a region per allocation (its
 * requested size) and its unregistration at the free; "defragment" (payload) when free pages are
 * remapped, "reclaim zombies" and "trim" ranges; a graph pool's own heap; capture begin/end and
 * checkpoint take/reapply ranges, the reapply resetting the graph pool's heap and registering its
 * allocations again; every heap unregistered at pool destruction — and no rule of the NVTX memory
 * API broken (regions inside their heaps, no overlap, unregister only what is live).
 * Skips when the library was built with VPMM_NVTX=OFF.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvtx_inject.h"
#include "test_util.h"

static nvtx_inject_api_t api;
static size_t cursor; /* events before it have been matched */

static int setup_group(void **state)
{
    (void)state;
#ifdef VPMM_HAVE_NVTX
    /* NVTX reads the variable at its first call: vpmm's first pool creation. */
    if (setenv("NVTX_INJECTION64_PATH", NVTX_INJECT_PATH, 1) != 0)
        return -1;
#endif
    return 0;
}

/* Binds to the tool NVTX loaded (at the first pool's creation) and forgets what it saw so far. */
static void attach(void)
{
    if (nvtx_inject_bind(NVTX_INJECT_PATH, &api) != 0)
        fail_msg("NVTX did not load %s: %s", NVTX_INJECT_PATH, dlerror());
    cursor = 0;
}

/* The next event of this kind (and text, when given) at or after the cursor; the cursor moves
 * past it. Events of other kinds in between are allowed. */
static const nvtx_inject_event_t *next_of(nvtx_inject_kind_t kind, const char *text)
{
    for (size_t i = cursor; i < api.count(); i++) {
        const nvtx_inject_event_t *e = api.event(i);
        if (e->kind == kind && (text == NULL || strcmp(e->text, text) == 0)) {
            assert_int_equal(e->flags, 0);
            assert_string_equal(e->domain, "vpmm");
            cursor = i + 1;
            return e;
        }
    }
    api.dump(stderr);
    fail_msg("no %s \"%s\" after event %zu", api.kind_name(kind), text ? text : "", cursor);
    return NULL;
}

/* A range: its push (with this payload) and its pop, in that order. */
static void range(const char *name, uint64_t payload)
{
    const nvtx_inject_event_t *e = next_of(NVTX_INJECT_RANGE_PUSH, name);
    assert_int_equal(e->payload, payload);
    next_of(NVTX_INJECT_RANGE_POP, NULL);
}

static void no_errors(void)
{
    char why[256];
    api.last_error(why, sizeof why);
    if (api.errors() != 0)
        fail_msg("the tool saw %zu broken rules; last: %s", api.errors(), why);
}

static void test_scenario(void **state)
{
    static const char *const names[] = {
        "grow",          "defragment",  "reclaim zombies", "trim",
        "capture begin", "capture end", "checkpoint take", "checkpoint reapply"
    };
    tpool_t t;
    vpmm_stream_t s;
#if VPMM_HAVE_GRAPHS
    vpmm_graph_pool_t *gp;
    vpmm_graph_t g;
    vpmm_checkpoint_t *ck;
    vpmm_graph_pool_stats_t gs;
    uint64_t private_heap;
    void *out, *tmp;
#endif
    const nvtx_inject_event_t *e;
    uint64_t shared_heap;
    void *a, *b, *blk[6], *big;
    (void)state;
#ifndef VPMM_HAVE_NVTX
    skip(); /* built with VPMM_NVTX=OFF: nothing to see */
#endif
    tpool_open(&t, &(tpool_params_t){ .small_bytes = 1 }); /* one chunk, one heap (no classes) */
    attach();
    s = vpmm_host_stream_create(t.host);

    /* The domain and its strings (made once, at the first pool). */
    next_of(NVTX_INJECT_DOMAIN_CREATE, "vpmm");
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        next_of(NVTX_INJECT_STRING_REGISTER, names[i]);

    /* Growth, the chunk's heap, a region per allocation, unregistered at its free. */
    a = tmalloc(t.pool, 3 * MiB, s);
    range("grow", 4 * MiB);
    e = next_of(NVTX_INJECT_HEAP_REGISTER, "vpmm VA chunk");
    assert_int_equal(e->usage, 1);    /* NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR */
    assert_int_equal(e->mem_type, 1); /* NVTX_MEM_TYPE_VIRTUAL_ADDRESS */
    assert_int_equal(e->size, t.pool->chunks->size);
    shared_heap = e->handle;
    e = next_of(NVTX_INJECT_REGION_REGISTER, NULL);
    assert_int_equal(e->address, (uintptr_t)a);
    assert_int_equal(e->size, 3 * MiB);
    assert_int_equal(e->heap, shared_heap);
    b = tmalloc(t.pool, 1000, s); /* the hot path: a region, no range */
    e = next_of(NVTX_INJECT_REGION_REGISTER, NULL);
    assert_int_equal(e->address, (uintptr_t)b);
    assert_int_equal(e->size, 1000);
    tfree(t.pool, b);
    e = next_of(NVTX_INJECT_REGION_UNREGISTER, NULL);
    assert_int_equal(e->address, (uintptr_t)b);
    assert_int_equal(api.live_regions(shared_heap), 1);

    /* Defragmentation: six pages, every other one freed, then three pages asked for. */
    for (int i = 0; i < 6; i++)
        blk[i] = tmalloc(t.pool, 2 * MiB, NULL);
    for (int i = 0; i < 6; i += 2)
        tfree(t.pool, blk[i]);
    big = tmalloc(t.pool, 6 * MiB, NULL);
    range("defragment", 6 * MiB);
    e = next_of(NVTX_INJECT_REGION_REGISTER, NULL);
    assert_int_equal(e->address, (uintptr_t)big);
    tfree(t.pool, big);
    for (int i = 1; i < 6; i += 2)
        tfree(t.pool, blk[i]);
    tfree(t.pool, a);
    assert_int_equal(api.live_regions(shared_heap), 0);

    /* Trim: zombies (the remapped pages' old addresses) are reclaimed, free pages released. */
    assert_int_equal(vpmm_trim(t.pool, 0, NULL), VPMM_SUCCESS);
    next_of(NVTX_INJECT_RANGE_PUSH, "reclaim zombies");
    next_of(NVTX_INJECT_RANGE_PUSH, "trim");

#if VPMM_HAVE_GRAPHS
    /* A graph pool: capture ranges, its own heap, a checkpoint reapplied. */
    assert_int_equal(vpmm_graph_pool_create(t.pool, &gp), VPMM_SUCCESS);
    assert_int_equal(vpmm_graph_pool_stats(gp, &gs), VPMM_SUCCESS);
    assert_int_equal(vpmm_capture_begin(t.pool, gp, s, 0), VPMM_SUCCESS);
    range("capture begin", gs.id);
    out = tmalloc(t.pool, 5000, s);
    range("grow", 2 * MiB);
    e = next_of(NVTX_INJECT_HEAP_REGISTER, "vpmm VA chunk");
    private_heap = e->handle;
    assert_true(private_heap != shared_heap);
    e = next_of(NVTX_INJECT_REGION_REGISTER, NULL);
    assert_int_equal(e->address, (uintptr_t)out);
    assert_int_equal(e->heap, private_heap);
    tmp = tmalloc(t.pool, 100 * KiB, s);
    tfree(t.pool, tmp);
    assert_int_equal(vpmm_capture_end(t.pool, s, &g), VPMM_SUCCESS);
    next_of(NVTX_INJECT_RANGE_PUSH, "capture end");
    assert_int_equal(vpmm_checkpoint_take(gp, &ck), VPMM_SUCCESS);
    range("checkpoint take", gs.id);
    /* Reapply: the graph pool's heap is reset, its allocations registered again. */
    assert_int_equal(vpmm_checkpoint_reapply(gp, ck, NULL, 0), VPMM_SUCCESS);
    next_of(NVTX_INJECT_RANGE_PUSH, "checkpoint reapply");
    e = next_of(NVTX_INJECT_HEAP_RESET, NULL);
    assert_int_equal(e->heap, private_heap);
    assert_int_equal(e->count, 1); /* out's region, dropped ... */
    e = next_of(NVTX_INJECT_REGION_REGISTER, NULL);
    assert_int_equal(e->address, (uintptr_t)out); /* ... and registered again */
    next_of(NVTX_INJECT_RANGE_POP, NULL);
    assert_int_equal(api.live_regions(private_heap), 1);
#endif

    /* Teardown: every region unregistered, every heap with it. */
#if VPMM_HAVE_GRAPHS
    vpmm_checkpoint_destroy(ck);
    tfree(t.pool, out);
    assert_int_equal(vpmm_graph_destroy(t.pool, g), VPMM_SUCCESS);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
#endif
    tpool_close(&t);
    print_message("the tool recorded %zu NVTX events (%u core and %u memory attachments)\n",
                  api.count(), api.core_attached(), api.mem_attached());
    assert_int_equal(api.live_regions(NVTX_INJECT_ALL_HEAPS), 0);
    assert_int_equal(api.live_heaps(), 0);
    no_errors();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scenario),
    };
    return cmocka_run_group_tests(tests, setup_group, NULL);
}
