/*
 * test_arena.c — src/core/arena.c: private arenas (the memory of graph pools) and the region views
 * and rewrites checkpoints are built on, tested through the internal interface on the host backend.
 *
 * Life: a new arena is listed and empty; dissolving it (empty, or with live allocations, ready
 * and pending free regions over several chunks) hands every chunk to the shared arena with no
 * driver call, moves its counters and pending regions, and leaves its allocations freeable.
 * Malloc: sub-page and multi-page sizes, the size of a fresh private chunk, growth that takes the
 * shared arena's ready pages first (whole handles only) and never its pending memory, and never an
 * event, wait or synchronisation (counted on the fault driver). Free: stream-ordered on its
 * stream's marker in the arena's side tree, or, on a stream capturing into the arena (graph pools
 * made through the public API), pending until the last capture ends, never merged with
 * marker-pending memory. The side table grows past its first four streams with its trees intact.
 * Views walk an arena's regions across chunks; rewrites replace a run of regions and keep every
 * index, counter and stream reference exact. Stats and peak resets. Every mutation is followed by
 * CHECK_POOL (I1–I9).
 *
 * Two tests demonstrate defects of vpmm_i_rewrite and fail until it is fixed: it does not raise
 * the peaks (test_rewrite_keeps_peaks), and it does not give a new allocation's stream the side
 * entry its free needs (test_rewrite_allocation_is_freeable).
 */
#include <stdio.h>
#include <string.h>

#include "graph_test_util.h"

#define PG (2 * MiB) /* the test pools' page size */

/* ---- helpers ------------------------------------------------------------------------------- */

static vpmm_arena_t *arena_new(tpool_t *t, unsigned id)
{
    vpmm_arena_t *a = NULL;
    vpmm_status_t st;
    vpmm_i_lock(t->pool);
    st = vpmm_i_arena_create(t->pool, id, &a);
    vpmm_i_unlock(t->pool);
    assert_int_equal(st, VPMM_SUCCESS);
    assert_non_null(a);
    CHECK_POOL(t->pool);
    return a;
}

static void arena_dissolve(tpool_t *t, vpmm_arena_t *a)
{
    vpmm_i_lock(t->pool);
    vpmm_i_arena_dissolve(t->pool, a);
    vpmm_i_unlock(t->pool);
    CHECK_POOL(t->pool);
}

static vpmm_status_t arena_try_malloc(tpool_t *t, vpmm_arena_t *a, vpmm_stream_t s, size_t size,
                                      void **out)
{
    vpmm_status_t st;
    vpmm_i_lock(t->pool);
    st = vpmm_i_arena_malloc(t->pool, a, vpmm_i_stream_key(t->pool, s), size, out);
    vpmm_i_unlock(t->pool);
    CHECK_POOL(t->pool);
    return st;
}

static void *amalloc(tpool_t *t, vpmm_arena_t *a, vpmm_stream_t s, size_t size)
{
    void *ptr = NULL;
    vpmm_status_t st = arena_try_malloc(t, a, s, size, &ptr);
    if (st != VPMM_SUCCESS)
        fail_msg("vpmm_i_arena_malloc(%zu) failed: %s (%s)", size, vpmm_status_name(st),
                 vpmm_last_error());
    assert_non_null(ptr);
    return ptr;
}

static vpmm_stream_rec_t *strm(tpool_t *t, vpmm_stream_t s)
{
    vpmm_stream_rec_t *r;
    vpmm_i_lock(t->pool);
    r = vpmm_i_stream_get(t->pool, vpmm_i_stream_key(t->pool, s));
    vpmm_i_unlock(t->pool);
    assert_non_null(r);
    return r;
}

static vpmm_region_t *region_at(tpool_t *t, const void *ptr)
{
    vpmm_region_t *r = vpmm_i_region_find(t->pool, (uintptr_t)ptr);
    assert_non_null(r);
    return r;
}

static void poll_all(tpool_t *t)
{
    vpmm_i_lock(t->pool);
    vpmm_i_stream_poll_all(t->pool, NULL);
    vpmm_i_unlock(t->pool);
    CHECK_POOL(t->pool);
}

#if VPMM_HAVE_GRAPHS
/* Driver calls a capture forbids or that would stall it, event creation included. */
static uint64_t forbidden_calls(const tpool_t *t)
{
    return tcapture_forbidden_calls(t) + vpmm_fault_calls(t->fault, VPMM_DRV_EVENT_CREATE);
}
#endif

static vpmm_chunk_t *shared_chunk(tpool_t *t)
{
    for (vpmm_chunk_t *c = t->pool->chunks; c; c = c->next)
        if (c->arena == &t->pool->shared)
            return c;
    fail_msg("no shared chunk");
    return NULL;
}

#if VPMM_HAVE_GRAPHS
/* The private arena behind a graph pool (listed under its id). */
static vpmm_arena_t *gp_arena(tpool_t *t, const vpmm_graph_pool_t *gp)
{
    unsigned id = tgp_stats(gp).id;
    for (vpmm_arena_t *a = t->pool->privates; a; a = a->next)
        if (a->id == id)
            return a;
    fail_msg("graph pool g%u has no arena", id);
    return NULL;
}
#endif

/* ---- life ---------------------------------------------------------------------------------- */

static void test_create_and_dissolve_empty(void **state)
{
    tpool_t t;
    vpmm_arena_t *a, *b;
    vpmm_counters_t zero;
    uint64_t calls;
    unsigned chunks;
    (void)state;
    tpool_open(&t, NULL);
    memset(&zero, 0, sizeof zero);
    calls = vpmm_fault_total_calls(t.fault);
    chunks = t.pool->chunk_count;

    a = arena_new(&t, 901);
    assert_ptr_equal(t.pool->privates, a);
    assert_int_equal(t.pool->private_count, 1);
    assert_true(a->priv);
    assert_int_equal(vpmm_i_arena_id(a), 901);
    assert_int_equal(vpmm_i_arena_captures(a), 0);
    assert_int_equal(a->chunks, 0); /* VA is reserved on the first growth only */
    assert_null(vpmm_i_arena_first(t.pool, a));
    assert_int_equal(a->holes.count + a->ready.count + a->nside, 0);
    assert_memory_equal(&a->c, &zero, sizeof zero);
    for (vpmm_chunk_t *c = t.pool->chunks; c; c = c->next)
        assert_ptr_not_equal(c->arena, a);
    assert_int_equal(tstats(t.pool).graph_pools, 1);

    b = arena_new(&t, 902);
    assert_ptr_equal(t.pool->privates, b);
    assert_ptr_equal(b->next, a);
    assert_int_equal(t.pool->private_count, 2);
    arena_dissolve(&t, a); /* not the list head: unlinked from behind b */
    assert_ptr_equal(t.pool->privates, b);
    assert_null(b->next);
    assert_int_equal(t.pool->private_count, 1);
    arena_dissolve(&t, b);
    assert_null(t.pool->privates);
    assert_int_equal(t.pool->private_count, 0);
    assert_int_equal(tstats(t.pool).graph_pools, 0);
    assert_int_equal(t.pool->chunk_count, chunks);
    assert_int_equal(vpmm_fault_total_calls(t.fault), calls); /* no driver call at all */
    tpool_close(&t);
}

/* ---- malloc -------------------------------------------------------------------------------- */

#if VPMM_HAVE_GRAPHS
static void test_malloc_sizes_and_counters(void **state)
{
    tpool_t t;
    vpmm_arena_t *a;
    vpmm_stream_t s;
    const size_t sizes[] = { 256, 1000, 64 * KiB, 3 * MiB + 17, 5000 };
    void *p[5];
    size_t live = 0, alloc = 0;
    uint64_t forbidden;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .cache_percent = -1 });
    s = vpmm_host_stream_create(t.host);
    a = arena_new(&t, 911);
    forbidden = forbidden_calls(&t);
    for (int i = 0; i < 5; i++) {
        vpmm_region_t *r;
        p[i] = amalloc(&t, a, s, sizes[i]);
        r = region_at(&t, p[i]);
        assert_int_equal(r->state, VPMM_REGION_ALLOCATED);
        assert_int_equal(r->addr, (uintptr_t)p[i]);
        assert_int_equal(r->size, vpmm_round_up_checked(sizes[i], VPMM_ALIGNMENT));
        assert_int_equal(r->requested, sizes[i]);
        assert_ptr_equal(vpmm_i_arena_of(r), a);
        assert_ptr_equal(r->stream, strm(&t, s));
        assert_ptr_equal(vpmm_hmap_get(&t.pool->allocs, r->addr), r);
        live += sizes[i];
        alloc += r->size;
        assert_int_equal(a->c.live_bytes, live);
        assert_int_equal(a->c.allocated_bytes, alloc);
        assert_int_equal(a->c.live_allocs, i + 1);
        assert_int_equal(a->c.mallocs, i + 1);
        assert_int_equal(a->c.peak_live_bytes, live);
        /* No shared page was free: every mapped byte is a page created for the arena. */
        assert_int_equal(a->c.allocated_bytes + a->c.free_bytes, a->c.pages_created * PG);
        assert_int_equal(a->c.pages_taken, 0);
        assert_int_equal(a->c.allocated_bytes + a->c.free_bytes + a->c.hole_bytes,
                         a->c.reserved_va_bytes);
    }
    assert_int_equal((uintptr_t)p[1], (uintptr_t)p[0] + 256); /* sub-page: same page */
    assert_int_equal(forbidden_calls(&t), forbidden);         /* no event, no wait, no sync */
    /* One private chunk: the pool's va_size (32 GiB), below the 64 GiB cap. */
    assert_int_equal(a->chunks, 1);
    assert_int_equal(a->c.reserved_va_bytes, 32 * GiB);
    /* The shared arena served nothing: the pool's totals are the arena's. */
    assert_int_equal(t.pool->c.live_bytes, live);
    assert_int_equal(t.pool->c.allocated_bytes, alloc);
    assert_int_equal(t.pool->c.mallocs, 5);
    assert_int_equal(tstats(t.pool).private_live_bytes, live);
    for (int i = 0; i < 5; i++)
        tfree(t.pool, p[i]);
    assert_int_equal(a->c.frees, 5);
    assert_int_equal(a->c.live_allocs, 0);
    assert_int_equal(a->c.live_bytes, 0);
    arena_dissolve(&t, a);
    tpool_close(&t);
}
#endif

static void test_private_chunk_capped(void **state)
{
    tpool_t t;
    vpmm_arena_t *a;
    vpmm_stream_t s;
    void *x;
    (void)state;
    /* A pool whose chunks are larger than the private cap. Valgrind caps the address space
     * below 80 GiB: there the test is skipped. */
    if (tpool_try_open(&t, &(tpool_params_t){ .va_size = 80 * GiB }, NULL) != VPMM_SUCCESS) {
        t.fault->close(t.fault);
        skip();
    }
    s = vpmm_host_stream_create(t.host);
    a = arena_new(&t, 912);
    x = amalloc(&t, a, s, 1 * MiB);
    assert_int_equal(a->chunks, 1);
    assert_int_equal(a->c.reserved_va_bytes, 64 * GiB);
    assert_int_equal(region_at(&t, x)->chunk->size, 64 * GiB);
    assert_int_equal(shared_chunk(&t)->size, 80 * GiB);
    assert_int_equal(tstats(t.pool).reserved_va_bytes, 144 * GiB);
    tfree(t.pool, x);
    arena_dissolve(&t, a);
    tpool_close(&t);
}

static void test_private_chunk_small_pool(void **state)
{
    tpool_t t;
    vpmm_arena_t *a;
    vpmm_stream_t s;
    vpmm_region_t *r;
    void *x, *big;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .va_size = 64 * MiB });
    s = vpmm_host_stream_create(t.host);
    a = arena_new(&t, 913);
    x = amalloc(&t, a, s, 1 * MiB);
    assert_int_equal(a->c.reserved_va_bytes, 64 * MiB); /* the pool's va_size: below the cap */
    /* A request larger than that gets a chunk of its own size (the internal call is not bounded
     * by the pool's va_size; vpmm_malloc is). */
    big = amalloc(&t, a, s, 100 * MiB);
    r = region_at(&t, big);
    assert_int_equal(a->chunks, 2);
    assert_int_equal(r->chunk->size, 100 * MiB);
    assert_int_equal(r->size, 100 * MiB);
    assert_ptr_equal(r->chunk->first, r); /* it fills the chunk */
    assert_null(r->next);
    assert_int_equal(a->c.reserved_va_bytes, 164 * MiB);
    tfree(t.pool, big);
    tfree(t.pool, x);
    arena_dissolve(&t, a);
    tpool_close(&t);
}

#if VPMM_HAVE_GRAPHS
static void test_growth_takes_shared_ready_pages(void **state)
{
    tpool_t t;
    vpmm_arena_t *a;
    vpmm_stream_t s;
    vpmm_phys_t *ph[4];
    vpmm_region_t *r;
    uintptr_t base;
    uint64_t created, forbidden;
    void *x, *y;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .prealloc = 4, .cache_percent = -1 });
    base = shared_chunk(&t)->base; /* four ready pages, one handle each */
    for (int i = 0; i < 4; i++)
        ph[i] = vpmm_i_phys_at(t.pool, base + (size_t)i * PG);
    s = vpmm_host_stream_create(t.host);
    a = arena_new(&t, 921);
    created = vpmm_fault_calls(t.fault, VPMM_DRV_MEM_CREATE);
    forbidden = forbidden_calls(&t);

    x = amalloc(&t, a, s, 3 * MiB); /* two pages, both taken from the shared arena */
    assert_int_equal(a->c.pages_taken, 2);
    assert_int_equal(a->c.pages_created, 0);
    assert_int_equal(vpmm_fault_calls(t.fault, VPMM_DRV_MEM_CREATE), created);
    /* Taken from the top of the ready region down, moved as one run in address order. */
    assert_ptr_equal(vpmm_i_phys_at(t.pool, (uintptr_t)x), ph[2]);
    assert_ptr_equal(vpmm_i_phys_at(t.pool, (uintptr_t)x + PG), ph[3]);
    assert_int_equal(ph[2]->va, (uintptr_t)x);
    assert_int_equal(t.pool->c.mapped_bytes, 4 * PG);
    assert_int_equal(t.pool->c.zombie_bytes, 2 * PG); /* their old shared addresses */
    r = region_at(&t, (void *)base);
    assert_int_equal(r->state, VPMM_REGION_FREE);
    assert_true(r->ready);
    assert_int_equal(r->size, 2 * PG);

    y = amalloc(&t, a, s, 6 * MiB); /* three pages: the last two shared ones and a fresh one */
    assert_int_equal(a->c.pages_taken, 4);
    assert_int_equal(a->c.pages_created, 1);
    assert_int_equal(vpmm_fault_calls(t.fault, VPMM_DRV_MEM_CREATE), created + 1);
    assert_int_equal(t.pool->c.mapped_bytes, 5 * PG);
    assert_int_equal(t.pool->c.free_bytes, a->c.free_bytes); /* nothing free left in shared */
    assert_int_equal(forbidden_calls(&t), forbidden);
    tfree(t.pool, x);
    tfree(t.pool, y);
    arena_dissolve(&t, a);
    tpool_close(&t);
}
#endif

static void test_growth_takes_whole_handles_only(void **state)
{
    tpool_t t;
    vpmm_arena_t *a;
    vpmm_stream_t s;
    vpmm_phys_t *h;
    vpmm_region_t *r;
    void *big, *x, *y;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .cache_percent = -1 });
    big = tmalloc(t.pool, 1 * GiB, NULL); /* one 1 GiB handle (policy.c: big growths) */
    h = vpmm_i_phys_at(t.pool, (uintptr_t)big);
    assert_int_equal(h->size, 1 * GiB);
    tfree(t.pool, big);
    poll_all(&t);
    r = region_at(&t, big);
    assert_true(r->state == VPMM_REGION_FREE && r->ready);
    s = vpmm_host_stream_create(t.host);
    a = arena_new(&t, 922);

    /* One page is needed, the ready handle is 512: it stays, a page is created. */
    x = amalloc(&t, a, s, 2 * MiB);
    assert_int_equal(a->c.pages_taken, 0);
    assert_int_equal(a->c.pages_created, 1);
    assert_ptr_equal(vpmm_i_phys_at(t.pool, (uintptr_t)big), h);
    assert_int_equal(h->va, (uintptr_t)big);
    assert_int_equal(h->zombie_maps, 0);

    /* 512 pages are needed: the whole handle moves. */
    y = amalloc(&t, a, s, 1 * GiB);
    assert_int_equal(a->c.pages_taken, 512);
    assert_int_equal(a->c.pages_created, 1);
    assert_ptr_equal(vpmm_i_phys_at(t.pool, (uintptr_t)y), h);
    assert_int_equal(h->va, (uintptr_t)y);
    assert_int_equal(region_at(&t, big)->state, VPMM_REGION_ZOMBIE);
    tfree(t.pool, x);
    tfree(t.pool, y);
    arena_dissolve(&t, a);
    tpool_close(&t);
}

#if VPMM_HAVE_GRAPHS
static void test_growth_never_takes_shared_pending(void **state)
{
    tpool_t t;
    vpmm_arena_t *a;
    vpmm_stream_t s, o;
    vpmm_phys_t *h;
    vpmm_region_t *r;
    uint64_t created, forbidden;
    void *x, *y, *z;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .cache_percent = -1 });
    s = vpmm_host_stream_create(t.host);
    o = vpmm_host_stream_create(t.host);
    x = tmalloc(t.pool, 4 * MiB, s);
    vpmm_host_enqueue(t.host, s); /* s's work still uses x */
    tfree(t.pool, x);
    assert_int_equal(strm(&t, s)->pending_bytes, 4 * MiB);
    h = vpmm_i_phys_at(t.pool, (uintptr_t)x);
    a = arena_new(&t, 923);
    created = vpmm_fault_calls(t.fault, VPMM_DRV_MEM_CREATE);
    forbidden = forbidden_calls(&t);

    y = amalloc(&t, a, s, 4 * MiB); /* even on s itself: a graph may run on any stream */
    z = amalloc(&t, a, o, 2 * MiB);
    assert_int_equal(a->c.pages_taken, 0);
    assert_int_equal(a->c.pages_created, 3);
    assert_int_equal(vpmm_fault_calls(t.fault, VPMM_DRV_MEM_CREATE), created + 3);
    assert_int_equal(forbidden_calls(&t), forbidden); /* no marker to make it ready, no wait */
    r = region_at(&t, x);
    assert_int_equal(r->state, VPMM_REGION_FREE);
    assert_false(r->ready);
    assert_ptr_equal(r->stream, strm(&t, s));
    assert_int_equal(r->size, 4 * MiB);
    assert_int_equal(strm(&t, s)->pending_bytes, 4 * MiB);
    assert_ptr_equal(vpmm_i_phys_at(t.pool, (uintptr_t)x), h);
    assert_int_equal(h->va, (uintptr_t)x);
    assert_int_equal(t.pool->c.zombie_bytes, 0);
    tfree(t.pool, y);
    tfree(t.pool, z);
    vpmm_host_complete_all(t.host);
    poll_all(&t);
    arena_dissolve(&t, a);
    tpool_close(&t);
}
#endif

static void test_malloc_failure_changes_nothing(void **state)
{
    tpool_t t;
    vpmm_arena_t *a;
    vpmm_stream_t s;
    tsnap_t before, after;
    void *x = NULL;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .memory_limit = 8 * MiB });
    s = vpmm_host_stream_create(t.host);
    a = arena_new(&t, 924);
    before = tsnap(t.pool);

    assert_int_equal(arena_try_malloc(&t, a, s, 16 * MiB, &x), VPMM_ERROR_OUT_OF_MEMORY);
    assert_null(x);
    assert_int_equal(a->c.ooms, 1);
    assert_int_equal(t.pool->c.ooms, 0); /* vpmm_malloc counts and reports it (test_graph) */
    assert_int_equal(a->chunks, 0);      /* the chunk reserved for the growth was given back */
    after = tsnap(t.pool);
    assert_int_equal(after.regions, before.regions);
    assert_int_equal(after.layout_hash, before.layout_hash);
    assert_int_equal(after.stats.reserved_va_bytes, before.stats.reserved_va_bytes);
    assert_driver_matches_pool(&t);

    vpmm_fault_fail_nth(t.fault, VPMM_DRV_MEM_MAP, 1, VPMM_DRV_ERROR);
    assert_int_equal(arena_try_malloc(&t, a, s, 1 * MiB, &x), VPMM_ERROR_DRIVER);
    assert_null(x);
    assert_int_equal(a->c.ooms, 1);
    assert_int_equal(a->c.mallocs, 0);
    assert_int_equal(a->chunks, 0);
    after = tsnap(t.pool);
    assert_int_equal(after.layout_hash, before.layout_hash);
    assert_driver_matches_pool(&t);

    x = amalloc(&t, a, s, 1 * MiB); /* and then it works */
    tfree(t.pool, x);
    arena_dissolve(&t, a);
    tpool_close(&t);
}

/* ---- free ---------------------------------------------------------------------------------- */

static void test_free_is_stream_ordered(void **state)
{
    tpool_t t;
    vpmm_arena_t *a;
    vpmm_stream_t s, o;
    vpmm_stream_rec_t *ss;
    vpmm_side_t *side;
    vpmm_region_t *r;
    void *x, *y, *z;
    size_t free_before;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .cache_percent = -1 });
    s = vpmm_host_stream_create(t.host);
    o = vpmm_host_stream_create(t.host);
    ss = strm(&t, s);
    a = arena_new(&t, 931);
    x = amalloc(&t, a, s, 1 * MiB);
    vpmm_host_enqueue(t.host, s); /* s's work reads x */
    free_before = a->c.free_bytes;

    /* vpmm_free's path: out of the table, counted out, then the arena's free. */
    vpmm_i_lock(t.pool);
    r = vpmm_hmap_remove(&t.pool->allocs, (uintptr_t)x);
    if (r != NULL) {
        vpmm_i_alloc_forget(t.pool, r);
        vpmm_i_arena_free(t.pool, r);
    }
    vpmm_i_unlock(t.pool);
    assert_non_null(r);
    CHECK_POOL(t.pool);
    assert_ptr_equal(region_at(&t, x), r);
    assert_int_equal(r->state, VPMM_REGION_FREE);
    assert_false(r->ready);
    assert_ptr_equal(r->stream, ss);
    assert_int_equal(r->seq, ss->recorded); /* the stream's next marker */
    assert_int_equal(ss->dirty_regions, 1);
    assert_ptr_equal(ss->pend_tail, r);
    side = vpmm_i_side_find(a, ss);
    assert_non_null(side);
    assert_int_equal(side->tree.count, 1);
    assert_ptr_equal(vpmm_rb_first(&side->tree), &r->node);
    assert_ptr_equal(vpmm_i_free_tree(t.pool, r), &side->tree);
    assert_int_equal(ss->free_tree.count, 0); /* not in the shared arena's tree */
    assert_int_equal(ss->pending_bytes, 0);
    assert_int_equal(a->c.frees, 1);
    assert_int_equal(a->c.free_bytes, free_before + 1 * MiB);

    y = amalloc(&t, a, o, 1 * MiB); /* another stream must not get it */
    assert_ptr_not_equal(y, x);
    z = amalloc(&t, a, s, 1 * MiB); /* its own stream does: stream order */
    assert_ptr_equal(z, x);
    tfree(t.pool, z);
    r = region_at(&t, x);
    assert_false(r->ready);
    assert_int_equal(r->seq, ss->recorded);

    poll_all(&t); /* records the marker; s's work is not done */
    assert_int_equal(ss->recorded, 1);
    assert_int_equal(ss->dirty_regions, 0);
    r = region_at(&t, x);
    assert_false(r->ready);
    assert_int_equal(r->seq, 0);

    vpmm_host_complete(t.host, s);
    poll_all(&t);
    r = region_at(&t, x);
    assert_int_equal(r->state, VPMM_REGION_FREE);
    assert_true(r->ready);
    assert_null(r->stream);
    assert_ptr_equal(vpmm_i_free_tree(t.pool, r), &a->ready);
    assert_int_equal(vpmm_i_side_find(a, ss)->tree.count, 0);
    tfree(t.pool, y);
    poll_all(&t);
    r = region_at(&t, x); /* everything mapped is one ready region again */
    assert_true(r->ready);
    assert_int_equal(r->size, a->c.free_bytes);
    arena_dissolve(&t, a);
    tpool_close(&t);
}

#if VPMM_HAVE_GRAPHS
static void test_capture_pending_frees(void **state)
{
    tpool_t t;
    vpmm_graph_pool_t *gp;
    vpmm_arena_t *a;
    vpmm_stream_t s;
    vpmm_stream_rec_t *ss;
    vpmm_graph_t g1, g2;
    vpmm_region_t *ra, *rb;
    void *A, *B, *C, *D;
    (void)state;
    tpool_open(&t, NULL);
    s = vpmm_host_stream_create(t.host);
    ss = strm(&t, s);
    gp = tgp_create(&t);
    a = gp_arena(&t, gp);

    tcapture_register(&t, gp, s);
    assert_int_equal(vpmm_i_arena_captures(a), 1);
    A = tmalloc(t.pool, 512 * KiB, s);
    B = tmalloc(t.pool, 512 * KiB, s);
    C = tmalloc(t.pool, 512 * KiB, s); /* [A][B][C][ready 512 KiB] in one page */
    assert_ptr_equal(vpmm_i_arena_of(region_at(&t, A)), a);
    assert_int_equal((uintptr_t)C, (uintptr_t)A + 1 * MiB);
    g1 = tcapture_end(&t, s);
    assert_int_equal(vpmm_i_arena_captures(a), 0);

    /* Outside a capture, a free is stream-ordered (s's work still reads A). */
    vpmm_host_enqueue(t.host, s);
    tfree(t.pool, A);
    ra = region_at(&t, A);
    assert_false(ra->ready);
    assert_int_equal(ra->seq, ss->recorded);

    /* During a capture into the arena, a free waits for the capture's end. */
    tcapture_register(&t, gp, s);
    tfree(t.pool, B);
    rb = region_at(&t, B);
    assert_int_equal(rb->state, VPMM_REGION_FREE);
    assert_false(rb->ready);
    assert_ptr_equal(rb->stream, ss);
    assert_true(rb->seq == VPMM_SEQ_CAPTURE);
    assert_int_equal(a->capture_pending, 1);
    assert_ptr_equal(ra->next, rb); /* neither pending condition implies the other */
    assert_false(vpmm_i_free_mergeable(ra, rb));
    assert_int_equal(vpmm_i_side_find(a, ss)->tree.count, 2);
    tfree(t.pool, C); /* joins B (same stream, same condition), not the ready rest */
    rb = region_at(&t, B);
    assert_int_equal(rb->size, 1 * MiB);
    assert_int_equal(a->capture_pending, 1);
    assert_true(rb->next->ready);
    assert_false(vpmm_i_free_mergeable(rb, rb->next));
    D = tmalloc(t.pool, 1 * MiB, s); /* its own stream reuses it within the capture */
    assert_ptr_equal(D, B);
    assert_int_equal(a->capture_pending, 0);
    tfree(t.pool, D);
    assert_int_equal(a->capture_pending, 1);

    g2 = tcapture_end(&t, s); /* vpmm_i_arena_capture_ended: ready and coalesced */
    assert_int_equal(a->capture_pending, 0);
    rb = region_at(&t, B);
    assert_int_equal(rb->addr, (uintptr_t)B);
    assert_true(rb->ready);
    assert_null(rb->stream);
    assert_int_equal(rb->size, 1 * MiB + 512 * KiB); /* B, C and the ready rest */
    assert_ptr_equal(vpmm_i_free_tree(t.pool, rb), &a->ready);
    ra = region_at(&t, A); /* still waits for its marker */
    assert_false(ra->ready);
    assert_ptr_equal(ra->next, rb);

    vpmm_host_complete(t.host, s);
    poll_all(&t);
    ra = region_at(&t, A);
    assert_true(ra->ready);
    assert_int_equal(ra->size, 2 * MiB);
    tgraph_destroy(&t, g1);
    tgraph_destroy(&t, g2);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    CHECK_POOL(t.pool);
    assert_int_equal(tstats(t.pool).graph_pools, 0);
    tpool_close(&t);
}

static void test_capture_pending_until_last_capture_ends(void **state)
{
    tpool_t t;
    vpmm_graph_pool_t *gp;
    vpmm_arena_t *a;
    vpmm_stream_t s1, s2;
    vpmm_graph_t g1, g2;
    vpmm_region_t *r;
    void *x, *y, *z;
    (void)state;
    tpool_open(&t, NULL);
    s1 = vpmm_host_stream_create(t.host);
    s2 = vpmm_host_stream_create(t.host);
    gp = tgp_create(&t);
    a = gp_arena(&t, gp);
    tcapture_register(&t, gp, s1);
    tcapture_register(&t, gp, s2);
    assert_int_equal(vpmm_i_arena_captures(a), 2);
    x = tmalloc(t.pool, 1 * MiB, s1);
    y = tmalloc(t.pool, 1 * MiB, s2);
    tfree(t.pool, x);
    assert_true(region_at(&t, x)->seq == VPMM_SEQ_CAPTURE);
    g1 = tcapture_end(&t, s1);
    /* s2's capture goes on: x is still s1's only (I8 allows it while a capture runs). */
    assert_int_equal(vpmm_i_arena_captures(a), 1);
    r = region_at(&t, x);
    assert_false(r->ready);
    assert_true(r->seq == VPMM_SEQ_CAPTURE);
    assert_int_equal(a->capture_pending, 1);
    z = tmalloc(t.pool, 1 * MiB, s2);
    assert_ptr_not_equal(z, x);
    g2 = tcapture_end(&t, s2);
    r = region_at(&t, x);
    assert_true(r->ready);
    assert_int_equal(a->capture_pending, 0);
    tfree(t.pool, y);
    tfree(t.pool, z);
    tgraph_destroy(&t, g1);
    tgraph_destroy(&t, g2);
    assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
    tpool_close(&t);
}

static void test_free_while_capturing_into_another_arena(void **state)
{
    tpool_t t;
    vpmm_graph_pool_t *gp1, *gp2;
    vpmm_arena_t *a1;
    vpmm_stream_t s, s2;
    vpmm_stream_rec_t *ss;
    vpmm_graph_t g1, g2, g3;
    vpmm_region_t *r;
    void *x;
    (void)state;
    tpool_open(&t, NULL);
    s = vpmm_host_stream_create(t.host);
    s2 = vpmm_host_stream_create(t.host);
    ss = strm(&t, s);
    gp1 = tgp_create(&t);
    gp2 = tgp_create(&t);
    a1 = gp_arena(&t, gp1);
    tcapture_register(&t, gp1, s);
    x = tmalloc(t.pool, 1 * MiB, s);
    g1 = tcapture_end(&t, s);
    tcapture_register(&t, gp1, s2); /* gp1 is being captured into, but not by s */
    tcapture_register(&t, gp2, s);
    tfree(t.pool, x);
    r = region_at(&t, x);
    assert_ptr_equal(vpmm_i_arena_of(r), a1);
    assert_false(r->ready);
    assert_ptr_equal(r->stream, ss);
    assert_int_equal(r->seq, ss->recorded); /* its marker, not gp1's capture */
    assert_int_equal(a1->capture_pending, 0);
    assert_int_equal(ss->dirty_regions, 1);
    g3 = tcapture_end(&t, s);
    g2 = tcapture_end(&t, s2);
    poll_all(&t); /* s is no longer captured: its marker is recorded and done */
    assert_true(region_at(&t, x)->ready);
    tgraph_destroy(&t, g1);
    tgraph_destroy(&t, g2);
    tgraph_destroy(&t, g3);
    assert_int_equal(vpmm_graph_pool_release(gp1), VPMM_SUCCESS);
    assert_int_equal(vpmm_graph_pool_release(gp2), VPMM_SUCCESS);
    tpool_close(&t);
}
#endif

/* ---- side table ---------------------------------------------------------------------------- */

static void test_side_table_growth(void **state)
{
    tpool_t t;
    vpmm_arena_t *a;
    vpmm_stream_t st[6];
    void *x[3], *y[6];
    size_t nside;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .cache_percent = -1 });
    a = arena_new(&t, 941);
    for (int i = 0; i < 6; i++)
        st[i] = vpmm_host_stream_create(t.host);
    assert_int_equal(a->side_cap, 0);
    for (int i = 0; i < 3; i++) {
        x[i] = amalloc(&t, a, st[i], 1 * MiB);
        vpmm_host_enqueue(t.host, st[i]);
        tfree(t.pool, x[i]); /* pending in st[i]'s side tree */
    }
    assert_int_equal(a->nside, 3);
    assert_int_equal(a->side_cap, 4);
    for (int i = 3; i < 6; i++)
        y[i] = amalloc(&t, a, st[i], 64 * KiB);
    assert_int_equal(a->nside, 6);
    assert_int_equal(a->side_cap, 8); /* reallocated: the trees moved */
    for (int i = 0; i < 6; i++) {
        vpmm_side_t *side = vpmm_i_side_find(a, strm(&t, st[i]));
        assert_non_null(side);
        assert_ptr_equal(side->stream, strm(&t, st[i]));
        assert_int_equal(side->tree.count, i < 3 ? 1 : 0);
        if (i < 3) {
            vpmm_region_t *r = region_at(&t, x[i]);
            assert_ptr_equal(vpmm_rb_first(&side->tree), &r->node);
            assert_ptr_equal(vpmm_i_free_tree(t.pool, r), &side->tree);
        }
    }
    /* Reserving a listed stream adds nothing; more streams grow the table again. */
    {
        vpmm_stream_rec_t *s0 = strm(&t, st[0]);
        vpmm_status_t rs;
        vpmm_i_lock(t.pool);
        rs = vpmm_i_side_reserve(a, s0);
        vpmm_i_unlock(t.pool);
        assert_int_equal(rs, VPMM_SUCCESS);
    }
    assert_int_equal(a->nside, 6);
    for (int i = 0; i < 5; i++) {
        vpmm_stream_rec_t *n = strm(&t, vpmm_host_stream_create(t.host));
        assert_null(vpmm_i_side_find(a, n));
        vpmm_i_lock(t.pool);
        nside = vpmm_i_side_reserve(a, n) == VPMM_SUCCESS ? a->nside : 0;
        vpmm_i_unlock(t.pool);
        assert_int_equal(nside, 7 + (size_t)i);
        assert_non_null(vpmm_i_side_find(a, n));
    }
    assert_int_equal(a->side_cap, 16);
    CHECK_POOL(t.pool); /* every side tree still validates */
    for (int i = 0; i < 3; i++) {
        void *again = amalloc(&t, a, st[i], 1 * MiB); /* each stream still finds its own */
        assert_ptr_equal(again, x[i]);
        tfree(t.pool, again);
    }
    for (int i = 3; i < 6; i++)
        tfree(t.pool, y[i]);
    vpmm_host_complete_all(t.host);
    poll_all(&t);
    arena_dissolve(&t, a);
    tpool_close(&t);
}

/* ---- dissolve ------------------------------------------------------------------------------ */

static void test_dissolve_with_live_and_free_regions(void **state)
{
    tpool_t t;
    vpmm_arena_t *a;
    vpmm_stream_t s, o;
    vpmm_stream_rec_t *so;
    vpmm_counters_t ac;
    vpmm_stats_t before, after;
    vpmm_region_t *r;
    unsigned shared_chunks, own;
    uint64_t created;
    void *x1, *x2, *x3, *x4, *big1, *big2, *again;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .va_size = 64 * MiB, .cache_percent = -1 });
    s = vpmm_host_stream_create(t.host);
    o = vpmm_host_stream_create(t.host);
    so = strm(&t, o);
    a = arena_new(&t, 951);
    x1 = amalloc(&t, a, s, 1 * MiB);
    x2 = amalloc(&t, a, s, 5 * MiB);
    x3 = amalloc(&t, a, o, 300 * KiB);
    x4 = amalloc(&t, a, o, 2 * MiB);
    big1 = amalloc(&t, a, s, 40 * MiB);
    big2 = amalloc(&t, a, s, 40 * MiB); /* no room left in the first chunk */
    assert_int_equal(a->chunks, 2);
    tfree(t.pool, x2);
    poll_all(&t); /* s has no work: x2 is ready */
    assert_true(region_at(&t, x2)->ready);
    vpmm_host_enqueue(t.host, o);
    tfree(t.pool, x3); /* pending on o's marker */
    assert_false(region_at(&t, x3)->ready);
    assert_int_equal(so->free_tree.count, 0);

    shared_chunks = t.pool->shared.chunks;
    own = a->chunks;
    ac = a->c;
    before = tstats(t.pool);
    assert_int_equal(before.private_mapped_bytes, ac.allocated_bytes + ac.free_bytes);
    assert_int_equal(before.private_live_bytes, ac.live_bytes);
    arena_dissolve(&t, a);

    for (vpmm_chunk_t *c = t.pool->chunks; c; c = c->next)
        assert_ptr_equal(c->arena, &t.pool->shared);
    /* The shared arena's own chunk was empty, and full-size chunks in use came: it went back. */
    assert_int_equal(shared_chunks, 1);
    assert_int_equal(t.pool->shared.chunks, own);
    assert_null(t.pool->privates);
    after = tstats(t.pool);
    assert_int_equal(after.graph_pools, 0);
    assert_int_equal(after.private_mapped_bytes, 0);
    assert_int_equal(after.private_live_bytes, 0);
    assert_int_equal(after.live_bytes, before.live_bytes);
    assert_int_equal(after.allocated_bytes, before.allocated_bytes);
    assert_int_equal(after.mapped_bytes, before.mapped_bytes);
    assert_int_equal(after.free_bytes, before.free_bytes);
    assert_int_equal(after.hole_bytes, before.hole_bytes - 64 * MiB);
    assert_int_equal(after.reserved_va_bytes, before.reserved_va_bytes - 64 * MiB);
    assert_int_equal(after.live_allocs, before.live_allocs);
    /* The shared arena held nothing of its own: its totals are now the arena's counters. */
    assert_int_equal(t.pool->c.live_bytes, ac.live_bytes);
    assert_int_equal(t.pool->c.allocated_bytes, ac.allocated_bytes);
    assert_int_equal(t.pool->c.free_bytes, ac.free_bytes);
    assert_int_equal(t.pool->c.hole_bytes, ac.hole_bytes);
    /* The pending region is its stream's, the ready one the shared arena's. */
    r = region_at(&t, x3);
    assert_false(r->ready);
    assert_ptr_equal(r->stream, so);
    assert_ptr_equal(vpmm_i_free_tree(t.pool, r), &so->free_tree);
    assert_int_equal(so->free_tree.count, 1);
    assert_int_equal(so->pending_bytes, r->size);
    r = region_at(&t, x2);
    assert_true(r->ready);
    assert_ptr_equal(vpmm_i_free_tree(t.pool, r), &t.pool->shared.ready);

    tfree(t.pool, x1);
    tfree(t.pool, x4);
    tfree(t.pool, big1);
    tfree(t.pool, big2);
    vpmm_host_complete(t.host, o);
    poll_all(&t);
    assert_int_equal(so->pending_bytes, 0);
    created = t.pool->c.pages_created;
    again = tmalloc(t.pool, 40 * MiB, s); /* the shared pool reuses the memory as its own */
    assert_int_equal(t.pool->c.pages_created, created);
    tfree(t.pool, again);
    tpool_close(&t);
}

static void test_dissolve_ends_capture_pending(void **state)
{
    tpool_t t;
    vpmm_arena_t *a;
    vpmm_stream_t s;
    vpmm_stream_rec_t *ss;
    vpmm_region_t *r;
    void *x, *y;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .cache_percent = -1 });
    s = vpmm_host_stream_create(t.host);
    ss = strm(&t, s);
    a = arena_new(&t, 952);
    x = amalloc(&t, a, s, 1 * MiB);
    y = amalloc(&t, a, s, 512 * KiB);
    tfree(t.pool, x);
    /* Make x a capture's free, as graph/ would (a capture into a is in progress). */
    vpmm_i_lock(t.pool);
    vpmm_i_arena_capture_begun(t.pool, a);
    r = vpmm_i_region_find(t.pool, (uintptr_t)x);
    vpmm_i_index_del(t.pool, r);
    r->seq = VPMM_SEQ_CAPTURE;
    vpmm_i_index_add(t.pool, r);
    vpmm_i_unlock(t.pool);
    CHECK_POOL(t.pool);
    assert_int_equal(a->capture_pending, 1);
    assert_int_equal(ss->refs, 2); /* y, and x's pending region */
    tfree(t.pool, y);              /* stream-ordered: it cannot join x */
    assert_ptr_not_equal(region_at(&t, x), region_at(&t, y));

    arena_dissolve(&t, a); /* the graph is gone: nothing uses x any more */
    r = region_at(&t, x);
    assert_int_equal(r->state, VPMM_REGION_FREE);
    assert_true(r->ready);
    assert_null(r->stream);
    assert_ptr_equal(vpmm_i_free_tree(t.pool, r), &t.pool->shared.ready);
    assert_int_equal(ss->refs, 1); /* y only */
    poll_all(&t);
    r = region_at(&t, x); /* y's work is done too: one ready page */
    assert_true(r->ready);
    assert_int_equal(r->size, 2 * MiB);
    assert_int_equal(ss->refs, 0);
    tpool_close(&t);
}

/* ---- views and rewrites -------------------------------------------------------------------- */

static void test_views_across_chunks(void **state)
{
    tpool_t t;
    vpmm_arena_t *a;
    vpmm_stream_t s, o;
    vpmm_region_t *expect[16], *r;
    size_t n = 0, i = 0, total = 0, lasts = 0, allocs = 0;
    void *x, *w, *y;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .va_size = 64 * MiB, .cache_percent = -1 });
    s = vpmm_host_stream_create(t.host);
    o = vpmm_host_stream_create(t.host);
    a = arena_new(&t, 961);
    x = amalloc(&t, a, s, 40 * MiB);
    w = amalloc(&t, a, o, 100 * KiB);
    y = amalloc(&t, a, s, 40 * MiB); /* larger than the first chunk's room: a second chunk */
    assert_int_equal(a->chunks, 2);
    assert_ptr_not_equal(region_at(&t, x)->chunk, region_at(&t, y)->chunk);
    vpmm_host_enqueue(t.host, o);
    tfree(t.pool, w);

    /* The expected order: the arena's chunks in the pool's (address-ordered) list. */
    for (vpmm_chunk_t *c = t.pool->chunks; c; c = c->next)
        if (c->arena == a)
            for (r = c->first; r; r = r->next) {
                assert_true(n < 16);
                expect[n++] = r;
            }
    for (r = vpmm_i_arena_first(t.pool, a); r; r = vpmm_i_arena_next(t.pool, r), i++) {
        vpmm_view_t v;
        assert_true(i < n);
        assert_ptr_equal(r, expect[i]);
        assert_ptr_equal(vpmm_i_arena_of(r), a);
        if (i > 0)
            assert_true(r->addr > expect[i - 1]->addr);
        vpmm_i_region_view(r, &v);
        assert_int_equal(v.addr, r->addr);
        assert_int_equal(v.size, r->size);
        assert_int_equal(v.state, r->state);
        assert_int_equal(v.ready, r->state == VPMM_REGION_FREE && r->ready);
        if (r->state == VPMM_REGION_ALLOCATED) {
            assert_int_equal(v.requested, 40 * MiB);
            assert_ptr_equal(v.stream.handle, s);
            assert_int_equal(v.stream.owner, 0);
            allocs++;
        } else {
            assert_int_equal(v.requested, 0);
            assert_null(v.stream.handle);
        }
        if (r->addr == (uintptr_t)w) {
            assert_int_equal(v.state, VPMM_REGION_FREE);
            assert_false(v.ready); /* pending on o */
        }
        assert_int_equal(vpmm_i_region_chunk_last(r),
                         r->addr + r->size == r->chunk->base + r->chunk->size);
        lasts += vpmm_i_region_chunk_last(r);
        total += r->size;
    }
    assert_int_equal(i, n);
    assert_int_equal(n, 6); /* [x][w][ready][hole] and [y][hole] */
    assert_int_equal(lasts, 2);
    assert_int_equal(allocs, a->c.live_allocs);
    assert_int_equal(total, a->c.reserved_va_bytes);
    tfree(t.pool, x);
    tfree(t.pool, y);
    vpmm_host_complete(t.host, o);
    poll_all(&t);
    arena_dissolve(&t, a);
    tpool_close(&t);
}

static void test_rewrite(void **state)
{
    tpool_t t;
    vpmm_arena_t *a;
    vpmm_stream_t s, o;
    vpmm_stream_rec_t *ss, *so;
    vpmm_counters_t ac, pc;
    vpmm_region_t *ra, *rc, *rest, *r;
    vpmm_status_t st;
    size_t spare = 0;
    void *A, *B, *C;
    uintptr_t at;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .cache_percent = -1 });
    s = vpmm_host_stream_create(t.host);
    o = vpmm_host_stream_create(t.host);
    ss = strm(&t, s);
    so = strm(&t, o);
    a = arena_new(&t, 971);
    A = amalloc(&t, a, s, 256 * KiB);
    B = amalloc(&t, a, s, 256 * KiB);
    C = amalloc(&t, a, s, 512 * KiB);
    /* o allocates here too (a checkpoint's allocations come from the arena's own mallocs). */
    tfree(t.pool, amalloc(&t, a, o, 1 * MiB));
    poll_all(&t);
    vpmm_host_enqueue(t.host, s);
    tfree(t.pool, B); /* [A][B pending on s][C][ready 1 MiB][hole] */
    ra = region_at(&t, A);
    rc = region_at(&t, C);
    rest = rc->next;
    assert_ptr_equal(ra->next->next, rc);
    assert_null(ra->prev); /* the chunk's first region */
    assert_true(rest->ready);
    assert_int_equal(ss->refs, 3);
    assert_int_equal(so->refs, 0);
    ac = a->c;
    pc = t.pool->c;

    at = (uintptr_t)A;
    {
        /* New tiling of A..C: [ready 64K][N1 256K, o][N2 704K, s]. */
        const vpmm_span_t spans[3] = {
            { at, 64 * KiB, 0, NULL },
            { at + 64 * KiB, 256 * KiB, 256 * KiB - 100, so },
            { at + 320 * KiB, 704 * KiB, 704 * KiB - 10, ss },
        };
        vpmm_i_lock(t.pool);
        st = vpmm_i_rewrite_reserve(t.pool, a, 3, spans + 1, 2);
        if (st == VPMM_SUCCESS) {
            spare = t.pool->spare_count;
            vpmm_i_rewrite(t.pool, ra, rc, spans, 3);
        }
        vpmm_i_unlock(t.pool);
    }
    assert_int_equal(st, VPMM_SUCCESS);
    assert_true(spare >= 3);
    CHECK_POOL(t.pool); /* indexes, counters and stream references (check.c) */

    r = vpmm_i_arena_first(t.pool, a);
    assert_ptr_equal(region_at(&t, A), r);
    assert_true(r->state == VPMM_REGION_FREE && r->ready && r->size == 64 * KiB);
    assert_ptr_equal(r->chunk->first, r);
    r = r->next;
    assert_int_equal(r->state, VPMM_REGION_ALLOCATED);
    assert_int_equal(r->addr, at + 64 * KiB);
    assert_ptr_equal(r->stream, so);
    assert_ptr_equal(vpmm_hmap_get(&t.pool->allocs, r->addr), r);
    r = r->next;
    assert_int_equal(r->state, VPMM_REGION_ALLOCATED);
    assert_int_equal(r->size, 704 * KiB);
    assert_ptr_equal(r->stream, ss);
    assert_ptr_equal(r->next, rest);
    assert_ptr_equal(rest->prev, r);
    /* Counters: two allocations still, other sizes; mapped memory unchanged. */
    assert_int_equal(a->c.live_allocs, ac.live_allocs);
    assert_int_equal(a->c.live_bytes, 960 * KiB - 110);
    assert_int_equal(a->c.allocated_bytes, 960 * KiB);
    assert_int_equal(a->c.free_bytes, ac.free_bytes - 192 * KiB);
    assert_int_equal(a->c.allocated_bytes + a->c.free_bytes, ac.allocated_bytes + ac.free_bytes);
    assert_int_equal(t.pool->c.live_bytes - a->c.live_bytes, pc.live_bytes - ac.live_bytes);
    assert_int_equal(t.pool->c.free_bytes, pc.free_bytes - 192 * KiB);
    assert_int_equal(t.pool->c.mapped_bytes, pc.mapped_bytes);
    /* Stream references follow: s keeps N2 only (B's pending region is gone), o gains N1. */
    assert_int_equal(ss->refs, 1);
    assert_int_equal(so->refs, 1);
    assert_null(ss->pend_head);
    assert_int_equal(ss->dirty_regions, 0);
    /* The dropped allocations' pointers. */
    assert_int_equal(vpmm_free(t.pool, A), VPMM_ERROR_DOUBLE_FREE);      /* now ready memory */
    assert_int_equal(vpmm_free(t.pool, B), VPMM_ERROR_INTERIOR_POINTER); /* inside N1 */
    assert_int_equal(vpmm_free(t.pool, C), VPMM_ERROR_INTERIOR_POINTER); /* inside N2 */
    CHECK_POOL(t.pool);
    assert_int_equal(a->c.live_allocs, 2);
    tfree(t.pool, (void *)(at + 64 * KiB));
    tfree(t.pool, (void *)(at + 320 * KiB));
    assert_int_equal(a->c.live_allocs, 0);
    vpmm_host_complete(t.host, s);
    poll_all(&t);
    r = region_at(&t, A);
    assert_true(r->ready);
    assert_int_equal(r->size, 2 * MiB);
    arena_dissolve(&t, a);
    tpool_close(&t);
}

/*
 * A rewrite that makes more bytes live than the peaks record must raise the peaks, or the pool
 * breaks its own check ("peaks below current values") and reports a peak below the live bytes.
 * Public path: a checkpoint reapplied while other memory is live, or after a peak reset.
 */
static void test_rewrite_keeps_peaks(void **state)
{
    tpool_t t;
    vpmm_arena_t *a;
    vpmm_stream_t s;
    vpmm_region_t *r;
    size_t violations, a_peak, a_live, p_peak, p_live;
    void *x;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .cache_percent = -1 });
    s = vpmm_host_stream_create(t.host);
    a = arena_new(&t, 972);
    x = amalloc(&t, a, s, 2 * MiB);
    tfree(t.pool, x);
    poll_all(&t);
    vpmm_i_lock(t.pool);
    vpmm_i_arena_reset_peaks(a);
    vpmm_i_unlock(t.pool);
    assert_int_equal(vpmm_reset_peak_stats(t.pool), VPMM_SUCCESS);
    CHECK_POOL(t.pool);
    assert_int_equal(a->c.peak_live_bytes, 0);
    r = region_at(&t, x);
    assert_true(r->ready && r->size == 2 * MiB);
    {
        const vpmm_span_t span = { (uintptr_t)x, 2 * MiB, 2 * MiB, strm(&t, s) };
        vpmm_i_lock(t.pool);
        if (vpmm_i_rewrite_reserve(t.pool, a, 1, &span, 1) == VPMM_SUCCESS)
            vpmm_i_rewrite(t.pool, r, r, &span, 1);
        vpmm_i_unlock(t.pool);
    }
    violations = vpmm_pool_check(t.pool, stderr);
    a_peak = a->c.peak_live_bytes;
    a_live = a->c.live_bytes;
    p_peak = t.pool->c.peak_live_bytes;
    p_live = t.pool->c.live_bytes;
    /* Clean up first, so that a failure below leaks nothing. */
    assert_int_equal(vpmm_free(t.pool, x), VPMM_SUCCESS);
    arena_dissolve(&t, a);
    tpool_close(&t);
    assert_int_equal(a_live, 2 * MiB);
    assert_int_equal(p_live, 2 * MiB);
    assert_true(a_peak >= a_live);
    assert_true(p_peak >= p_live);
    assert_int_equal(violations, 0);
}

/*
 * A rewrite may create an allocation on a stream that has no side entry in the arena yet
 * (checkpoint/ resolves a checkpoint's stream handles with vpmm_i_stream_get, which makes a new
 * record for a stream released since). The allocation's free cannot fail, so
 * vpmm_i_rewrite_reserve must create the entry: without it the free would dereference a NULL
 * side entry.
 */
static void test_rewrite_allocation_is_freeable(void **state)
{
    tpool_t t;
    vpmm_arena_t *a;
    vpmm_stream_t s;
    vpmm_stream_rec_t *n;
    vpmm_region_t *r;
    int has_side;
    void *x;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .cache_percent = -1 });
    s = vpmm_host_stream_create(t.host);
    n = strm(&t, vpmm_host_stream_create(t.host)); /* never allocated in the arena */
    a = arena_new(&t, 973);
    x = amalloc(&t, a, s, 2 * MiB);
    tfree(t.pool, x);
    poll_all(&t);
    r = region_at(&t, x);
    assert_true(r->ready && r->size == 2 * MiB);
    {
        const vpmm_span_t span = { (uintptr_t)x, 2 * MiB, 2 * MiB, n };
        vpmm_status_t st;
        vpmm_i_lock(t.pool);
        st = vpmm_i_rewrite_reserve(t.pool, a, 1, &span, 1);
        if (st == VPMM_SUCCESS)
            vpmm_i_rewrite(t.pool, r, r, &span, 1);
        vpmm_i_unlock(t.pool);
        assert_int_equal(st, VPMM_SUCCESS);
    }
    CHECK_POOL(t.pool);
    assert_ptr_equal(region_at(&t, x)->stream, n);
    /* vpmm_free(x) needs n's side entry; without it, it would crash. */
    has_side = vpmm_i_side_find(a, n) != NULL;
    if (!has_side) { /* clean up without crashing, then report */
        vpmm_status_t st;
        vpmm_i_lock(t.pool);
        st = vpmm_i_side_reserve(a, n);
        vpmm_i_unlock(t.pool);
        assert_int_equal(st, VPMM_SUCCESS);
    }
    tfree(t.pool, x);
    arena_dissolve(&t, a);
    tpool_close(&t);
    assert_true(has_side);
}

/* ---- stats --------------------------------------------------------------------------------- */

static void test_stats_and_reset_peaks(void **state)
{
    tpool_t t;
    vpmm_arena_t *a;
    vpmm_stream_t s;
    vpmm_graph_pool_stats_t st;
    void *x, *y, *z;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .prealloc = 1, .cache_percent = -1 });
    s = vpmm_host_stream_create(t.host);
    a = arena_new(&t, 981);
    x = amalloc(&t, a, s, 3 * MiB);   /* one shared ready page taken, one created */
    y = amalloc(&t, a, s, 100 * KiB); /* from the ready rest of the span */
    vpmm_host_enqueue(t.host, s);
    tfree(t.pool, x);

    vpmm_i_lock(t.pool);
    vpmm_i_arena_stats(t.pool, a, &st);
    vpmm_i_unlock(t.pool);
    assert_int_equal(st.id, 981);
    assert_int_equal(st.live_bytes, 100 * KiB);
    assert_int_equal(st.allocated_bytes, 100 * KiB);
    assert_int_equal(st.peak_live_bytes, 3 * MiB + 100 * KiB);
    assert_int_equal(st.mapped_bytes, 4 * MiB);
    assert_int_equal(st.peak_mapped_bytes, 4 * MiB);
    assert_int_equal(st.free_bytes, 4 * MiB - 100 * KiB);
    assert_int_equal(st.reserved_va_bytes, 32 * GiB);
    assert_int_equal(st.hole_bytes, 32 * GiB - 4 * MiB);
    assert_int_equal(st.zombie_bytes, 0);
    assert_int_equal(st.live_allocs, 1);
    assert_int_equal(st.mallocs, 2);
    assert_int_equal(st.frees, 1);
    assert_int_equal(st.grows, 1);
    assert_int_equal(st.pages_created, 1);
    assert_int_equal(st.pages_taken, 1);
    assert_int_equal(st.graphs, 0); /* graph/'s to fill */
    assert_int_equal(st.captures, 0);
    assert_int_equal(st.pinned, 0);

    vpmm_i_lock(t.pool);
    vpmm_i_arena_reset_peaks(a);
    vpmm_i_arena_set_pinned(a, 1);
    vpmm_i_arena_capture_begun(t.pool, a);
    vpmm_i_arena_stats(t.pool, a, &st);
    vpmm_i_unlock(t.pool);
    CHECK_POOL(t.pool);
    assert_int_equal(st.peak_live_bytes, 100 * KiB);
    assert_int_equal(st.peak_mapped_bytes, 4 * MiB);
    assert_int_equal(st.captures, 1);
    assert_int_equal(st.pinned, 1);
    vpmm_i_lock(t.pool);
    vpmm_i_arena_capture_ended(t.pool, a);
    vpmm_i_arena_set_pinned(a, 0);
    vpmm_i_unlock(t.pool);
    CHECK_POOL(t.pool);
    assert_int_equal(vpmm_i_arena_captures(a), 0);

    z = amalloc(&t, a, s, 1 * MiB); /* reuses x's memory: stream order */
    assert_ptr_equal(z, x);
    vpmm_i_lock(t.pool);
    vpmm_i_arena_stats(t.pool, a, &st);
    vpmm_i_unlock(t.pool);
    assert_int_equal(st.peak_live_bytes, 1 * MiB + 100 * KiB);
    assert_int_equal(st.peak_mapped_bytes, 4 * MiB);
    assert_int_equal(st.mallocs, 3);
    assert_int_equal(st.pinned, 0);
    tfree(t.pool, y);
    tfree(t.pool, z);
    vpmm_host_complete(t.host, s);
    poll_all(&t);
    arena_dissolve(&t, a);
    tpool_close(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_and_dissolve_empty),
#if VPMM_HAVE_GRAPHS
        cmocka_unit_test(test_malloc_sizes_and_counters),
#endif
        cmocka_unit_test(test_private_chunk_capped),
        cmocka_unit_test(test_private_chunk_small_pool),
#if VPMM_HAVE_GRAPHS
        cmocka_unit_test(test_growth_takes_shared_ready_pages),
#endif
        cmocka_unit_test(test_growth_takes_whole_handles_only),
#if VPMM_HAVE_GRAPHS
        cmocka_unit_test(test_growth_never_takes_shared_pending),
#endif
        cmocka_unit_test(test_malloc_failure_changes_nothing),
        cmocka_unit_test(test_free_is_stream_ordered),
#if VPMM_HAVE_GRAPHS
        cmocka_unit_test(test_capture_pending_frees),
        cmocka_unit_test(test_capture_pending_until_last_capture_ends),
        cmocka_unit_test(test_free_while_capturing_into_another_arena),
#endif
        cmocka_unit_test(test_side_table_growth),
        cmocka_unit_test(test_dissolve_with_live_and_free_regions),
        cmocka_unit_test(test_dissolve_ends_capture_pending),
        cmocka_unit_test(test_views_across_chunks),
        cmocka_unit_test(test_rewrite),
        cmocka_unit_test(test_rewrite_keeps_peaks),
        cmocka_unit_test(test_rewrite_allocation_is_freeable),
        cmocka_unit_test(test_stats_and_reset_peaks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
