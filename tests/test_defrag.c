/*
 * test_defrag.c — defrag.c: executing phase-2 plans (pages land where the plan says, harvested
 * runs become zombies at their old address), zombie reclaim (only once their marker completes;
 * all of them in one pass, also when a reclaimed zombie's hole absorbs its neighbour; partial
 * progress when an unmap fails), the undo of a new VA chunk when a later step fails, and the
 * near-full rule's two steps: a free handle larger than what is left moved whole, and a page cut
 * by a boundary between ready and pending memory joined.
 */
#include "test_util.h"

#define PG (2 * MiB)

typedef struct zombie_list {
    size_t n;
    uintptr_t addr[8];
    size_t size[8];
} zombie_list_t;

static int collect_zombies(const vpmm_region_info_t *r, void *user)
{
    zombie_list_t *z = user;
    if (r->state == VPMM_REGION_ZOMBIE && z->n < 8) {
        z->addr[z->n] = r->addr;
        z->size[z->n] = r->size;
        z->n++;
    }
    return 0;
}

static zombie_list_t zombies(vpmm_pool_t *pool)
{
    zombie_list_t z = { 0 };
    vpmm_pool_walk(pool, collect_zombies, &z);
    return z;
}

static void reclaim(tpool_t *t)
{
    vpmm_i_lock(t->pool);
    vpmm_i_reclaim_zombies(t->pool, 1);
    vpmm_i_unlock(t->pool);
    CHECK_POOL(t->pool);
    assert_driver_matches_pool(t);
}

/* Two separated freed runs are moved behind one new page; their old VA waits as zombies. */
static void test_runs_become_zombies_until_marker(void **state)
{
    tpool_t t;
    vpmm_stream_t s;
    void *a, *b, *k1, *k2, *big;
    zombie_list_t z;
    (void)state;
    tpool_open(&t, NULL);
    s = vpmm_host_stream_create(t.host);
    a = tmalloc(t.pool, 2 * PG, s);
    k1 = tmalloc(t.pool, PG, s);
    b = tmalloc(t.pool, 3 * PG, s);
    k2 = tmalloc(t.pool, PG, s);
    vpmm_host_enqueue(t.host, s);
    tfree(t.pool, a);
    tfree(t.pool, b);
    big = tmalloc(t.pool, 6 * PG, s);
    assert_int_equal(tstats(t.pool).pages_remapped, 5);
    assert_int_equal(tstats(t.pool).pages_created, 8);
    z = zombies(t.pool);
    assert_int_equal(z.n, 2);
    assert_int_equal(z.addr[0], (uintptr_t)a);
    assert_int_equal(z.size[0], 2 * PG);
    assert_int_equal(z.addr[1], (uintptr_t)b);
    assert_int_equal(z.size[1], 3 * PG);
    /* New page first, then the runs in harvest order (smaller first: a, then b). */
    assert_ptr_equal(vpmm_i_phys_at(t.pool, (uintptr_t)big)->va, (uintptr_t)big);
    assert_int_equal(vpmm_i_phys_at(t.pool, (uintptr_t)a)->va, (uintptr_t)big + PG);
    assert_int_equal(vpmm_i_phys_at(t.pool, (uintptr_t)b)->va, (uintptr_t)big + 3 * PG);
    reclaim(&t); /* the stream still has work: nothing happens */
    assert_int_equal(zombies(t.pool).n, 2);
    vpmm_host_complete(t.host, s);
    reclaim(&t);
    assert_int_equal(zombies(t.pool).n, 0);
    assert_int_equal(tstats(t.pool).zombie_bytes, 0);
    tfree(t.pool, big);
    tfree(t.pool, k1);
    tfree(t.pool, k2);
    tpool_close(&t);
}

/*
 * A reclaimed zombie whose hole absorbs the hole after it must not stop the reclaim: every
 * zombie whose marker completed goes in one pass. (Found by the GPU soak: reclaim mistook the
 * grown hole for an unmap failure and returned, so zombies piled up to a terabyte of VA.)
 *
 *   after round 1:  [a][k1][hole][k2][big]...
 *   after round 2:  [a][Z k1][hole][Z k2][big][big2]    Z k1 is first in the zombie list
 *   after reclaim:  [a][hole .............][big][big2]
 */
static void test_reclaim_goes_on_past_a_growing_hole(void **state)
{
    tpool_t t;
    vpmm_stream_t s, s2;
    void *a, *k1, *b, *k2, *big, *big2;
    zombie_list_t z;
    (void)state;
    tpool_open(&t, NULL);
    s = vpmm_host_stream_create(t.host);
    s2 = vpmm_host_stream_create(t.host);
    a = tmalloc(t.pool, 2 * PG, s);
    k1 = tmalloc(t.pool, PG, s);
    b = tmalloc(t.pool, 3 * PG, s);
    k2 = tmalloc(t.pool, PG, s);
    vpmm_host_enqueue(t.host, s);
    tfree(t.pool, b);
    big = tmalloc(t.pool, 4 * PG, s); /* b's pages move: b's VA is a zombie, then a hole */
    vpmm_host_complete(t.host, s);
    reclaim(&t);
    assert_int_equal(zombies(t.pool).n, 0);

    vpmm_host_enqueue(t.host, s);
    tfree(t.pool, k1);
    tfree(t.pool, k2);
    big2 = tmalloc(t.pool, 8 * PG, s2); /* takes k1 and k2 (pending on s) */
    z = zombies(t.pool);
    assert_int_equal(z.n, 2);
    assert_int_equal(z.addr[0], (uintptr_t)k1);
    assert_int_equal(z.addr[1], (uintptr_t)k2);
    assert_int_equal(vpmm_i_region_find(t.pool, (uintptr_t)b)->state, VPMM_REGION_HOLE);
    vpmm_host_complete(t.host, s);
    reclaim(&t); /* one pass: k1's hole joins b's, and k2 goes too */
    assert_int_equal(zombies(t.pool).n, 0);
    assert_int_equal(tstats(t.pool).zombie_bytes, 0);
    tfree(t.pool, a);
    tfree(t.pool, big);
    tfree(t.pool, big2);
    tpool_close(&t);
}

/* An unmap failure half-way through a zombie turns the done part into hole, keeps the rest. */
static void test_reclaim_partial_failure(void **state)
{
    tpool_t t;
    tpool_params_t prm = { .prealloc = 15 };
    void *p10, *p1, *p4, *p11;
    zombie_list_t z;
    (void)state;
    tpool_open(&t, &prm);
    p10 = tmalloc(t.pool, 10 * PG, NULL);
    p1 = tmalloc(t.pool, PG, NULL);
    tfree(t.pool, p10);
    p4 = tmalloc(t.pool, 4 * PG, NULL);
    p11 = tmalloc(t.pool, 11 * PG, NULL); /* seed case C: the 10 pages at 0 become a zombie */
    assert_int_equal(zombies(t.pool).n, 1);
    vpmm_fault_fail_nth(t.fault, VPMM_DRV_MEM_UNMAP, 4, VPMM_DRV_ERROR);
    reclaim(&t);
    z = zombies(t.pool);
    assert_int_equal(z.n, 1);
    assert_int_equal(z.addr[0], (uintptr_t)p10 + 3 * PG);
    assert_int_equal(z.size[0], 7 * PG);
    assert_int_equal(tstats(t.pool).hole_bytes, t.pool->opt.va_size - 26 * PG + 3 * PG);
    reclaim(&t);
    assert_int_equal(zombies(t.pool).n, 0);
    tfree(t.pool, p1);
    tfree(t.pool, p4);
    tfree(t.pool, p11);
    tpool_close(&t);
}

/* A plan needing a new chunk whose mapping then fails gives the chunk back. */
static void test_new_chunk_undone(void **state)
{
    tpool_t t;
    tpool_params_t prm = { .va_size = 8 * PG };
    tsnap_t before, after;
    void *a, *p = NULL;
    (void)state;
    tpool_open(&t, &prm);
    a = tmalloc(t.pool, 8 * PG, NULL);
    before = tsnap(t.pool);
    vpmm_fault_fail_nth(t.fault, VPMM_DRV_MEM_MAP, 2, VPMM_DRV_ERROR);
    assert_int_equal(vpmm_malloc(t.pool, 3 * PG, NULL, &p), VPMM_ERROR_DRIVER);
    after = tsnap(t.pool);
    assert_snap_equal(&before, &after);
    assert_int_equal(vpmm_fault_calls(t.fault, VPMM_DRV_VA_FREE), 1);
    assert_driver_matches_pool(&t);
    p = tmalloc(t.pool, 3 * PG, NULL);
    assert_int_equal(tstats(t.pool).va_chunks, 2);
    tfree(t.pool, p);
    tfree(t.pool, a);
    tpool_close(&t);
}

/* A span joined with a ready left neighbour and a harvested page: one region of the caller. */
static void test_span_is_one_region_of_caller(void **state)
{
    tpool_t t;
    tpool_params_t prm = { .prealloc = 2 };
    vpmm_stream_t s;
    void *a, *big;
    vpmm_region_t *r;
    (void)state;
    tpool_open(&t, &prm);
    s = vpmm_host_stream_create(t.host);
    a = tmalloc(t.pool, PG, s); /* [a][ready page][hole] */
    big = tmalloc(t.pool, 3 * PG, s);
    assert_int_equal((uintptr_t)big, (uintptr_t)a + PG); /* the ready page was extended */
    assert_int_equal(tstats(t.pool).pages_created, 4);
    r = vpmm_hmap_get(&t.pool->allocs, (uintptr_t)big);
    assert_non_null(r);
    assert_int_equal(r->size, 3 * PG);
    assert_ptr_equal(r->stream->handle, s);
    tfree(t.pool, a);
    tfree(t.pool, big);
    tpool_close(&t);
}

/* Growth creates 1 GiB handles for a request of 1 GiB or more: 8 GiB in 8 handles. */
static void test_big_request_big_handles(void **state)
{
    tpool_t t;
    void *p, *q;
    vpmm_stats_t s;
    (void)state;
    tpool_open(&t, NULL);
    p = tmalloc(t.pool, 8 * GiB, NULL);
    s = tstats(t.pool);
    assert_int_equal(s.handles_created, 8);
    assert_int_equal(s.pages_created, 4096);
    assert_int_equal(s.mapped_bytes, 8 * GiB);
    assert_driver_matches_pool(&t);
    /* Smaller requests keep one handle per page: every page movable on its own. */
    q = tmalloc(t.pool, 20 * MiB, NULL);
    assert_int_equal(tstats(t.pool).handles_created, 8 + 10);
    tfree(t.pool, q);
    tfree(t.pool, p);
    tpool_close(&t);
}

/*
 * VPMM_LARGE_HANDLES=0: a growth of 1 GiB or more and an allocation burst make exactly the pages
 * they need, one handle each. The point is near the end of the device: 64 one-page blocks of a
 * burst fill it, every other one is freed, and a 32-page request must gather the free pages.
 * With large handles (the default) the burst's later growths are handles of several pages, each
 * now half live: their free pages cannot be gathered, and the request is refused, the pool
 * unchanged. Without, it succeeds with no page created.
 */
static void burst_then_gather(int large, vpmm_status_t expected)
{
    tpool_params_t prm = { .memory_limit = 64 * PG, .no_large_handles = !large };
    tpool_t t;
    void *p[64], *q = NULL;
    vpmm_stats_t before, after;
    tpool_open(&t, &prm);
    for (int i = 0; i < 64; i++)
        p[i] = tmalloc(t.pool, PG, NULL);
    before = tstats(t.pool);
    assert_int_equal(before.mapped_bytes, 64 * PG);
    if (large)
        assert_true(before.handles < 64); /* the burst grew ahead in larger handles */
    else
        assert_int_equal(before.handles_created, 64);
    for (int i = 0; i < 64; i += 2)
        tfree(t.pool, p[i]);
    assert_int_equal(vpmm_malloc(t.pool, 32 * PG, NULL, &q), expected);
    CHECK_POOL(t.pool);
    after = tstats(t.pool);
    assert_int_equal(after.pages_created, before.pages_created);
    assert_int_equal(after.mapped_bytes, 64 * PG);
    if (expected == VPMM_SUCCESS) {
        assert_int_equal(after.pages_remapped, 32);
        tfree(t.pool, q);
    } else {
        assert_null(q);
        assert_int_equal(after.live_allocs, 32);
        assert_int_equal(after.pages_remapped, 0);
    }
    for (int i = 1; i < 64; i += 2)
        tfree(t.pool, p[i]);
    assert_driver_matches_pool(&t);
    tpool_close(&t);
}

static void test_no_large_handles_gathers_every_page(void **state)
{
    tpool_params_t prm = { .no_large_handles = 1 };
    tpool_t t;
    void *p;
    (void)state;
    tpool_open(&t, &prm);
    p = tmalloc(t.pool, 2 * GiB, NULL);
    assert_int_equal(tstats(t.pool).handles_created, 1024);
    assert_int_equal(tstats(t.pool).pages_created, 1024);
    tfree(t.pool, p);
    tpool_close(&t);
    burst_then_gather(0, VPMM_SUCCESS);
    burst_then_gather(1, VPMM_ERROR_OUT_OF_MEMORY);
}

/* VPMM_HANDLE_PAGES = 4: a growth of 10 pages creates handles of 4, 4 and 2 pages; once freed,
 * a later span takes them whole (never part of a handle), and the books match the driver. */
static void test_handle_pages_cuts_growth(void **state)
{
    tpool_params_t prm = { .handle_pages = 4 };
    tpool_t t;
    void *a, *k, *b;
    vpmm_stats_t s;
    (void)state;
    tpool_open(&t, &prm);
    a = tmalloc(t.pool, 10 * PG, NULL);
    s = tstats(t.pool);
    assert_int_equal(s.pages_created, 10);
    assert_int_equal(s.handles_created, 3);
    assert_int_equal(vpmm_i_phys_at(t.pool, (uintptr_t)a)->size, 4 * PG);
    assert_int_equal(vpmm_i_phys_at(t.pool, (uintptr_t)a + 8 * PG)->size, 2 * PG);
    k = tmalloc(t.pool, PG, NULL); /* one handle of one page */
    assert_int_equal(tstats(t.pool).handles_created, 4);
    tfree(t.pool, a);
    b = tmalloc(t.pool, 12 * PG, NULL); /* a's 10 pages move whole (3 handles), 2 are new */
    s = tstats(t.pool);
    assert_int_equal(s.pages_remapped, 10);
    assert_int_equal(s.pages_created, 13);
    assert_int_equal(s.handles_created, 5);
    assert_driver_matches_pool(&t);
    tfree(t.pool, b);
    tfree(t.pool, k);
    tpool_close(&t);
}

/*
 * A homogeneous burst (same-size growths, no free in between) grows geometrically: 4096 mallocs of
 * 2 MiB create a few dozen handles, not 4096, and hold at most a quarter more than asked.
 */
static void test_burst_grows_geometrically(void **state)
{
    tpool_t t;
    static void *p[4096];
    vpmm_stats_t s;
    (void)state;
    tpool_open(&t, NULL);
    for (int i = 0; i < 4096; i++) {
        assert_int_equal(vpmm_malloc(t.pool, 2 * MiB, NULL, &p[i]), VPMM_SUCCESS);
        if (i % 512 == 0)
            CHECK_POOL(t.pool);
    }
    CHECK_POOL(t.pool);
    s = tstats(t.pool);
    print_message("4096 x 2 MiB: %llu handles, %zu MiB mapped\n",
                  (unsigned long long)s.handles_created, s.mapped_bytes >> 20);
    assert_true(s.handles_created <= 64);
    assert_true(s.mapped_bytes <= 8 * GiB + 2 * GiB);
    /* Freed in the middle of a burst, the handles' memory is reused; freed completely, the big
     * handles are moved whole by a defragmentation that needs them. */
    for (int i = 0; i < 4096; i++)
        assert_int_equal(vpmm_free(t.pool, p[i]), VPMM_SUCCESS);
    CHECK_POOL(t.pool);
    p[0] = tmalloc(t.pool, s.mapped_bytes, NULL);
    assert_int_equal(tstats(t.pool).mapped_bytes, s.mapped_bytes);
    tfree(t.pool, p[0]);
    tpool_close(&t);
}

/*
 * A free interrupts a burst: 7 growths, a free, 7 more are all one page each (the streak never
 * reaches 8); 8 growths in a row with no free make the next one speculative.
 */
static void test_free_ends_burst(void **state)
{
    tpool_t t;
    void *p[20], *q;
    vpmm_stats_t s;
    (void)state;
    tpool_open(&t, NULL);
    for (int i = 0; i < 7; i++)
        p[i] = tmalloc(t.pool, 2 * MiB, NULL);
    q = tmalloc(t.pool, 256, NULL);
    tfree(t.pool, q);
    for (int i = 7; i < 14; i++)
        p[i] = tmalloc(t.pool, 2 * MiB, NULL);
    s = tstats(t.pool);
    assert_int_equal(s.handles_created, s.pages_created);
    /* (The first of those reused the 256-byte block's page, so the streak is 6.) A few more
     * growths in a row, and the burst speculates: a handle of more than one page. */
    for (int i = 14; i < 20; i++)
        p[i] = tmalloc(t.pool, 2 * MiB, NULL);
    s = tstats(t.pool);
    assert_true(s.pages_created > s.handles_created);
    for (int i = 0; i < 20; i++)
        tfree(t.pool, p[i]);
    tpool_close(&t);
}

/*
 * A burst that fills the device gets every page the device has: 32 blocks of 2 MiB on a 64 MiB
 * device. (A speculative handle sized from what is mapped, ignoring what the device has left,
 * failed at block 28 with 10 MiB free, and the burst went on failing every later block.)
 */
static void test_burst_fills_the_device(void **state)
{
    tpool_t t;
    void *p[33];
    int n = 0;
    (void)state;
    tpool_open(&t, &(tpool_params_t){ .memory_limit = 64 * MiB });
    while (n < 33 && vpmm_malloc(t.pool, 2 * MiB, NULL, &p[n]) == VPMM_SUCCESS) {
        CHECK_POOL(t.pool);
        n++;
    }
    CHECK_POOL(t.pool);
    assert_int_equal(n, 32);
    assert_int_equal(tstats(t.pool).mapped_bytes, 64 * MiB);
    assert_int_equal(tstats(t.pool).ooms, 1);
    /* The failure ended the burst; what is freed is allocated again, at once. */
    tfree(t.pool, p[5]);
    p[5] = tmalloc(t.pool, 2 * MiB, NULL);
    assert_driver_matches_pool(&t);
    for (int i = 0; i < n; i++)
        tfree(t.pool, p[i]);
    tpool_close(&t);
}

/*
 * When the device refuses a burst's speculative handle, the growth is tried once more with just
 * the pages the request needs, one handle each; a burst whose growth failed altogether is over:
 * the next growth asks for its own pages only.
 */
static void test_refused_burst_retries_needed_pages(void **state)
{
    tpool_t t;
    void *p[24];
    vpmm_stats_t s0, s1;
    (void)state;
    tpool_open(&t, NULL);
    for (int i = 0; i < 12; i++) /* past GROWTH_STREAK: the next growth speculates */
        p[i] = tmalloc(t.pool, 2 * MiB, NULL);
    s0 = tstats(t.pool);
    /* The big handle is refused twice: created ahead without the lock, then under it. */
    vpmm_fault_fail_run(t.fault, VPMM_DRV_MEM_CREATE, 1, 2, VPMM_DRV_OUT_OF_MEMORY);
    p[12] = tmalloc(t.pool, 2 * MiB, NULL); /* then one page is created */
    s1 = tstats(t.pool);
    assert_int_equal(s1.pages_created, s0.pages_created + 1);
    assert_int_equal(s1.handles_created, s0.handles_created + 1);
    assert_int_equal(s1.ooms, 0);
    assert_driver_matches_pool(&t);

    /* Both tries refused: out of memory, nothing changed, and the burst is over. */
    vpmm_fault_fail_from(t.fault, VPMM_DRV_MEM_CREATE, 1, VPMM_DRV_OUT_OF_MEMORY);
    {
        tsnap_t before = tsnap(t.pool);
        tsnap_t after;
        assert_int_equal(vpmm_malloc(t.pool, 2 * MiB, NULL, &p[13]), VPMM_ERROR_OUT_OF_MEMORY);
        after = tsnap(t.pool);
        assert_int_equal(after.layout_hash, before.layout_hash);
        assert_int_equal(after.stats.mapped_bytes, before.stats.mapped_bytes);
    }
    vpmm_fault_clear(t.fault);
    CHECK_POOL(t.pool);
    s0 = tstats(t.pool);
    p[13] = tmalloc(t.pool, 2 * MiB, NULL);
    s1 = tstats(t.pool);
    assert_int_equal(s1.pages_created, s0.pages_created + 1); /* no speculation */
    assert_driver_matches_pool(&t);
    for (int i = 0; i < 14; i++)
        tfree(t.pool, p[i]);
    tpool_close(&t);
}

/* Defragmentation moves only whole handles: a 1 GiB handle partly in use stays where it is. */
static void test_harvest_whole_handles_only(void **state)
{
    tpool_t t;
    /* No size classes: the premise is a small block inside the big handle. */
    tpool_params_t prm = { .memory_limit = 1 * GiB + 64 * MiB, .small_bytes = 1 };
    void *big, *small, *x;
    (void)state;
    tpool_open(&t, &prm);
    big = tmalloc(t.pool, GiB, NULL); /* one 1 GiB handle */
    tfree(t.pool, big);
    small = tmalloc(t.pool, 4096, NULL); /* lands in the big handle */
    /* 40 MiB cannot come from the big handle by moving it (partly used): it fits in place. */
    x = tmalloc(t.pool, 40 * MiB, NULL);
    assert_int_equal(tstats(t.pool).pages_remapped, 0);
    assert_int_equal(tstats(t.pool).handles_created, 1);
    tfree(t.pool, x);
    tfree(t.pool, small);
    tpool_close(&t);
}

/* Writes a byte at both ends of [p, p + size) and reads them back (the span is mapped). */
static void touch_ends(void *p, size_t size)
{
    volatile unsigned char *c = p;
    c[0] = 0x5a;
    c[size - 1] = 0xa5;
    assert_int_equal(c[0], 0x5a);
    assert_int_equal(c[size - 1], 0xa5);
}

/*
 * The near-full rule, a handle larger than what is left to gather: the device is full, the free
 * memory is a fully free 1 GiB handle and 301 scattered single pages (300 blocks' and the small
 * blocks' page), and 600 pages are asked. The harvest takes the singles, then about 300 pages are
 * still needed and the 512-page handle is too large for that; no page can be created. The
 * fewest-created plan moves the handle whole: the span grows by the extra pages, which stay
 * free.
 *
 *   [ a: 1 GiB handle, free ][p0][p1 free][p2][p3 free] ... [p599 free][hole ...
 */
/* other: the freed 1 GiB handle is pending on another stream whose work still runs, and the
 * request comes from the caller's stream: the handle moves behind one GPU-side wait. */
static void overshoot_case(int other)
{
    tpool_t t;
    tpool_params_t prm = { .memory_limit = GiB + 601 * PG, .cache_percent = -1 };
    vpmm_stream_t s = NULL, s1 = NULL;
    void *a, *p[600], *x;
    vpmm_stats_t before, after;
    tpool_open(&t, &prm);
    if (other) {
        s = vpmm_host_stream_create(t.host);
        s1 = vpmm_host_stream_create(t.host);
    }
    a = tmalloc(t.pool, GiB, s1); /* one handle of 512 pages */
    for (int i = 0; i < 600; i++) {
        p[i] = tmalloc(t.pool, PG, NULL);         /* one page each: the device is full */
        tfree(t.pool, tmalloc(t.pool, 64, NULL)); /* a free between growths: no burst */
    }
    if (other)
        vpmm_host_enqueue(t.host, s1); /* a's last use, still running */
    tfree(t.pool, a);
    for (int i = 1; i < 600; i += 2)
        tfree(t.pool, p[i]);
    before = tstats(t.pool);
    assert_int_equal(before.mapped_bytes, GiB + 601 * PG); /* the last page: the small blocks' */
    assert_int_equal(before.free_bytes, GiB + 301 * PG);
    assert_true(before.largest_free_bytes < 600 * PG); /* no free region serves it in place */
    x = tmalloc(t.pool, 600 * PG, s);
    after = tstats(t.pool);
    assert_int_equal(after.pages_created, before.pages_created);      /* nothing new */
    assert_true(after.pages_remapped - before.pages_remapped >= 512); /* the handle, whole */
    assert_int_equal(after.free_bytes, 213 * PG); /* what the handle brought beyond the need */
    assert_int_equal(after.cross_stream_waits - before.cross_stream_waits, (uint64_t)other);
    vpmm_host_complete_all(t.host);
    touch_ends(x, 600 * PG);
    tfree(t.pool, x);
    for (int i = 0; i < 600; i += 2)
        tfree(t.pool, p[i]);
    assert_driver_matches_pool(&t);
    tpool_close(&t);
}

static void test_overshoot_moves_a_larger_handle(void **state)
{
    (void)state;
    overshoot_case(0);
    overshoot_case(1);
}

/* A full device (3 pages) whose first page x (1 MiB, on s1) and y (1 MiB, on s) share; z holds
 * the other two pages. The near-full joins' setting. */
static void shared_page_full_device(tpool_t *t, vpmm_stream_t *s, vpmm_stream_t *s1, void **x,
                                    void **y, void **z)
{
    tpool_params_t prm = { .memory_limit = 3 * PG, .cache_percent = -1, .small_bytes = 1 };
    tpool_open(t, &prm);
    *s = vpmm_host_stream_create(t->host);
    *s1 = vpmm_host_stream_create(t->host);
    *x = tmalloc(t->pool, MiB, *s1);
    *y = tmalloc(t->pool, MiB, *s);    /* x and y: one page */
    *z = tmalloc(t->pool, 2 * PG, *s); /* the device is full */
    assert_int_equal((uintptr_t)*y, (uintptr_t)*x + MiB);
}

/*
 * The near-full rule, a page across a state boundary: x and y share a page; x's free is known
 * complete (ready: its stream was released, with no work left), y's is still pending on the
 * caller's stream. The page is free, but its halves are two regions of different states, and
 * defragmentation moves whole handles out of one region. With the device full, a page-sized
 * request joins the ready half to the caller's pending half and is served there.
 */
static void test_join_across_a_state_boundary(void **state)
{
    tpool_t t;
    vpmm_stream_t s, s1;
    void *x, *y, *z, *w;
    vpmm_region_info_t info;
    (void)state;
    shared_page_full_device(&t, &s, &s1, &x, &y, &z);
    tfree(t.pool, x);
    assert_int_equal(vpmm_stream_release(t.pool, s1), VPMM_SUCCESS); /* x: done once polled */
    vpmm_host_enqueue(t.host, s);
    tfree(t.pool, y); /* y: pending on s */
    w = tmalloc(t.pool, PG, s);
    assert_ptr_equal(w, x);
    assert_int_equal(tstats(t.pool).pages_created, 3);
    assert_int_equal(tstats(t.pool).ooms, 0);
    assert_int_equal(vpmm_pointer_info(t.pool, w, &info), VPMM_SUCCESS);
    assert_int_equal(info.size, PG);
    touch_ends(w, PG);
    vpmm_host_complete(t.host, s);
    tfree(t.pool, w);
    tfree(t.pool, z);
    tpool_close(&t);
}

/*
 * The same join where the page's halves are pending on two streams: x's on s1 (its work still
 * running), y's on the caller s. The caller's stream waits on the GPU for s1's marker, and the
 * page joins s's memory. Then with s1's half next to ready memory instead: both join s.
 */
static void join_two_streams(int caller_half_ready)
{
    tpool_t t;
    vpmm_stream_t s, s1;
    void *x, *y, *z, *w;
    uint64_t waits, k;
    shared_page_full_device(&t, &s, &s1, &x, &y, &z);
    vpmm_host_enqueue(t.host, s1);
    tfree(t.pool, x); /* pending on s1 */
    if (!caller_half_ready)
        vpmm_host_enqueue(t.host, s);
    tfree(t.pool, y); /* pending on s; ready once polled if s has no work */
    waits = tstats(t.pool).cross_stream_waits;
    w = tmalloc(t.pool, PG, s);
    CHECK_POOL(t.pool);
    assert_ptr_equal(w, x);
    assert_int_equal(tstats(t.pool).pages_created, 3);
    assert_int_equal(tstats(t.pool).ooms, 0);
    assert_int_equal(tstats(t.pool).cross_stream_waits, waits + 1);
    /* s's work after the malloc runs after s1's: the GPU-side wait is in s's queue. */
    k = vpmm_host_enqueue(t.host, s);
    vpmm_host_advance(t.host, s, 64);
    assert_true(vpmm_host_stream_completed(t.host, s) < k);
    vpmm_host_complete(t.host, s1);
    vpmm_host_advance(t.host, s, 64);
    assert_true(vpmm_host_stream_completed(t.host, s) >= k);
    touch_ends(w, PG);
    tfree(t.pool, w);
    tfree(t.pool, z);
    assert_driver_matches_pool(&t);
    tpool_close(&t);
}

static void test_join_across_another_stream(void **state)
{
    (void)state;
    join_two_streams(0);
    join_two_streams(1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_runs_become_zombies_until_marker),
        cmocka_unit_test(test_reclaim_goes_on_past_a_growing_hole),
        cmocka_unit_test(test_reclaim_partial_failure),
        cmocka_unit_test(test_new_chunk_undone),
        cmocka_unit_test(test_span_is_one_region_of_caller),
        cmocka_unit_test(test_big_request_big_handles),
        cmocka_unit_test(test_no_large_handles_gathers_every_page),
        cmocka_unit_test(test_handle_pages_cuts_growth),
        cmocka_unit_test(test_burst_grows_geometrically),
        cmocka_unit_test(test_free_ends_burst),
        cmocka_unit_test(test_burst_fills_the_device),
        cmocka_unit_test(test_refused_burst_retries_needed_pages),
        cmocka_unit_test(test_harvest_whole_handles_only),
        cmocka_unit_test(test_overshoot_moves_a_larger_handle),
        cmocka_unit_test(test_join_across_a_state_boundary),
        cmocka_unit_test(test_join_across_another_stream),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
