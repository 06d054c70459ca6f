/*
 * test_worker.c — worker.c, the background worker that unmaps zombies: off by default, on when
 * asked; it unmaps a defragmentation's zombies once their marker completes and not before, and
 * what it has not taken yet the next slow-path malloc still does;
 * data moved by the remap reads back at the new address before and after the old one goes; a
 * failed unmap leaves the rest of the zombie for a later pass and leaks nothing; vpmm_trim still
 * gives every free page back (it holds the worker and unmaps the due zombies itself); threads that
 * malloc and free while the worker runs keep every invariant (this test also runs under TSan,
 * tests/sanitize/run_ci.sh); a pool destroyed while zombies wait is torn down completely.
 */
#include <pthread.h>
#include <string.h>

#include "test_util.h"

#define PG (2 * MiB)

static size_t zombie_count(vpmm_pool_t *pool)
{
    size_t n = 0;
    vpmm_i_lock(pool);
    for (const vpmm_region_t *z = pool->zombie_head; z; z = z->qnext)
        n++;
    vpmm_i_unlock(pool);
    return n;
}

/* The worker's pass is over and nothing of the pool moves: books and driver agree. */
static void drain_and_check(tpool_t *t)
{
    vpmm_i_worker_drain(t->pool);
    CHECK_POOL(t->pool);
    assert_driver_matches_pool(t);
}

static void fill(void *p, size_t n, unsigned char v)
{
    memset(p, v, n);
}

static void assert_filled(const void *p, size_t n, unsigned char v)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i += 4096)
        assert_int_equal(b[i], v);
    assert_int_equal(b[n - 1], v);
}

static void test_off_by_default(void **state)
{
    tpool_t t;
    (void)state;
    tpool_open(&t, NULL);
    assert_null(t.pool->worker);
    assert_int_equal(tstats(t.pool).worker, 0);
    tpool_close(&t);
}

/* Two freed runs move behind a new page; the worker unmaps their old VA once the stream that
 * freed them is done, never before; what was written there reads back at the new address. */
static void test_unmaps_zombies_when_marker_completes(void **state)
{
    tpool_params_t prm = { .worker = 1 };
    tpool_t t;
    vpmm_stream_t s;
    void *a, *b, *k1, *k2, *big;
    (void)state;
    tpool_open(&t, &prm);
    assert_non_null(t.pool->worker);
    assert_int_equal(tstats(t.pool).worker, 1);
    s = vpmm_host_stream_create(t.host);
    a = tmalloc(t.pool, 2 * PG, s);
    k1 = tmalloc(t.pool, PG, s);
    b = tmalloc(t.pool, 3 * PG, s);
    k2 = tmalloc(t.pool, PG, s);
    fill(a, 2 * PG, 0xa1);
    fill(b, 3 * PG, 0xb2);
    vpmm_host_enqueue(t.host, s);
    tfree(t.pool, a);
    tfree(t.pool, b);
    big = tmalloc(t.pool, 6 * PG, s); /* a and b move behind one new page (test_defrag.c) */
    assert_int_equal(tstats(t.pool).pages_remapped, 5);
    assert_filled((char *)big + PG, 2 * PG, 0xa1);
    assert_filled((char *)big + 3 * PG, 3 * PG, 0xb2);
    drain_and_check(&t); /* the stream still has work: the zombies stay */
    assert_int_equal(zombie_count(t.pool), 2);
    assert_int_equal(tstats(t.pool).worker_unmaps, 0);
    vpmm_host_complete(t.host, s);
    drain_and_check(&t);
    assert_int_equal(zombie_count(t.pool), 0);
    assert_int_equal(tstats(t.pool).zombie_bytes, 0);
    assert_int_equal(tstats(t.pool).worker_unmaps, 5); /* one-page handles */
    assert_filled((char *)big + PG, 2 * PG, 0xa1);
    assert_filled((char *)big + 3 * PG, 3 * PG, 0xb2);
    tfree(t.pool, big);
    tfree(t.pool, k1);
    tfree(t.pool, k2);
    tpool_close(&t);
}

/* Seed case C with the worker on (test_defrag.c): 15 preallocated pages; 10 allocated and 1 after
 * them, the 10 freed, 4 taken back. The caller's 11-page malloc then remaps 10 pages, and their old
 * address becomes one zombie of 10 one-page handles, due at once (no stream work guards it). */
static void open_seed_c(tpool_t *t, void **p1, void **p4)
{
    tpool_params_t prm = { .worker = 1, .prealloc = 15 };
    void *p10;
    tpool_open(t, &prm);
    p10 = tmalloc(t->pool, 10 * PG, NULL);
    *p1 = tmalloc(t->pool, PG, NULL);
    tfree(t->pool, p10);
    *p4 = tmalloc(t->pool, 4 * PG, NULL);
}

static void close_seed_c(tpool_t *t, void *p1, void *p4, void *p11)
{
    tfree(t->pool, p1);
    tfree(t->pool, p4);
    tfree(t->pool, p11);
    tpool_close(t);
}

/* A zombie the worker has not taken yet (held here) is unmapped by the next slow-path malloc,
 * as without a worker: layouts do not wait for the worker's thread. Let go, the worker finds
 * nothing left. */
static void test_malloc_path_takes_what_worker_left(void **state)
{
    tpool_t t;
    void *p1, *p4, *p11, *more;
    uint64_t unmaps;
    (void)state;
    open_seed_c(&t, &p1, &p4);
    vpmm_i_worker_hold(t.pool, 1);
    unmaps = vpmm_fault_calls(t.fault, VPMM_DRV_MEM_UNMAP);
    p11 = tmalloc(t.pool, 11 * PG, NULL); /* the 10 pages at p10 become a zombie, due at once */
    assert_int_equal(tstats(t.pool).pages_remapped, 10);
    assert_int_equal(zombie_count(t.pool), 1);
    assert_int_equal(vpmm_fault_calls(t.fault, VPMM_DRV_MEM_UNMAP), unmaps);
    more = tmalloc(t.pool, 12 * PG, NULL); /* a slow path: phase 0 unmaps the zombie */
    assert_int_equal(zombie_count(t.pool), 0);
    assert_int_equal(vpmm_fault_calls(t.fault, VPMM_DRV_MEM_UNMAP), unmaps + 10);
    vpmm_i_worker_hold(t.pool, 0);
    drain_and_check(&t);
    assert_int_equal(tstats(t.pool).worker_unmaps, 0);
    tfree(t.pool, more);
    close_seed_c(&t, p1, p4, p11);
}

/* An unmap that fails in the middle of a zombie: the unmapped prefix becomes hole, the rest stays
 * a zombie (not busy), and a later pass finishes it. */
static void test_partial_failure_is_retried(void **state)
{
    tpool_t t;
    void *p1, *p4, *p11;
    (void)state;
    open_seed_c(&t, &p1, &p4);
    vpmm_fault_fail_nth(t.fault, VPMM_DRV_MEM_UNMAP, 4,
                        VPMM_DRV_ERROR); /* only the worker unmaps */
    p11 = tmalloc(t.pool, 11 * PG, NULL);
    /* The failed pass polls again by itself; two drains see at least one whole pass after it. */
    drain_and_check(&t);
    drain_and_check(&t);
    assert_int_equal(zombie_count(t.pool), 0);
    assert_int_equal(tstats(t.pool).worker_unmaps, 10);
    assert_int_equal(tstats(t.pool).zombie_bytes, 0);
    close_seed_c(&t, p1, p4, p11);
}

/* Destroying the pool while zombies wait for their stream: the worker stops, teardown unmaps
 * them, nothing leaks (tpool_close checks the driver's live counts). */
static void test_destroy_with_waiting_zombies(void **state)
{
    tpool_params_t prm = { .worker = 1 };
    tpool_t t;
    vpmm_stream_t s;
    void *a, *k, *big;
    (void)state;
    tpool_open(&t, &prm);
    s = vpmm_host_stream_create(t.host);
    a = tmalloc(t.pool, 3 * PG, s);
    k = tmalloc(t.pool, PG, s);
    vpmm_host_enqueue(t.host, s);
    tfree(t.pool, a);
    big = tmalloc(t.pool, 5 * PG, s);
    assert_int_equal(zombie_count(t.pool), 1);
    tfree(t.pool, big);
    tfree(t.pool, k);
    vpmm_host_complete(t.host, s);
    tpool_close(&t);
}

/* vpmm_trim with a worker gives back every free page: it waits for the worker's pass, unmaps
 * the due zombies itself, so that no handle stays for a zombie mapping; a hold of the caller's
 * own survives the trim's. */
static void test_trim_gives_everything_back(void **state)
{
    tpool_t t;
    void *p1, *p4, *p11;
    (void)state;
    open_seed_c(&t, &p1, &p4);
    vpmm_i_worker_hold(t.pool, 1);
    p11 = tmalloc(t.pool, 11 * PG, NULL); /* a zombie of 10 pages, due at once */
    tfree(t.pool, p11);
    tfree(t.pool, p4);
    tfree(t.pool, p1);
    assert_int_equal(vpmm_trim(t.pool, 0, NULL), VPMM_SUCCESS);
    assert_int_equal(tstats(t.pool).mapped_bytes, 0);
    assert_int_equal(zombie_count(t.pool), 0);
    assert_int_equal(tstats(t.pool).worker_unmaps, 0); /* still held by the test: trim did it */
    CHECK_POOL(t.pool);
    assert_driver_matches_pool(&t);
    vpmm_i_worker_hold(t.pool, 0);
    drain_and_check(&t);
    tpool_close(&t);
}

/* Threads malloc and free sizes that force defragmentation while the worker unmaps. */
#define NTHREADS 4
#define NSLOTS   24

typedef struct thread_arg {
    vpmm_pool_t *pool;
    unsigned seed;
    size_t ops;
} thread_arg_t;

static void *churn(void *argp)
{
    thread_arg_t *arg = argp;
    void *slot[NSLOTS] = { 0 };
    size_t size[NSLOTS] = { 0 };
    trng_t rng = { tmix64(arg->seed) | 1 };
    for (size_t i = 0; i < arg->ops; i++) {
        size_t k = trng_below(&rng, NSLOTS);
        if (slot[k] != NULL) {
            assert_filled(slot[k], size[k], (unsigned char)k);
            assert_int_equal(vpmm_free(arg->pool, slot[k]), VPMM_SUCCESS);
            slot[k] = NULL;
        } else {
            /* Mostly pages and page multiples: freed pages get harvested into larger spans. */
            size[k] = (1 + trng_below(&rng, 6)) * PG - trng_below(&rng, 3) * 4096;
            assert_int_equal(vpmm_malloc(arg->pool, size[k], NULL, &slot[k]), VPMM_SUCCESS);
            fill(slot[k], size[k], (unsigned char)k);
        }
    }
    for (size_t k = 0; k < NSLOTS; k++)
        if (slot[k] != NULL)
            assert_int_equal(vpmm_free(arg->pool, slot[k]), VPMM_SUCCESS);
    return NULL;
}

static void test_threads_with_worker(void **state)
{
    tpool_params_t prm = { .worker = 1, .cache_percent = -1 };
    tpool_t t;
    pthread_t th[NTHREADS];
    thread_arg_t arg[NTHREADS];
    vpmm_stats_t st;
    (void)state;
    tpool_open(&t, &prm);
    for (unsigned i = 0; i < NTHREADS; i++) {
        arg[i] = (thread_arg_t){ t.pool, 1000 + i, 2000 };
        assert_int_equal(pthread_create(&th[i], NULL, churn, &arg[i]), 0);
    }
    for (unsigned i = 0; i < NTHREADS; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    drain_and_check(&t);
    st = tstats(t.pool);
    assert_true(st.defrags > 0);
    assert_true(st.worker_unmaps > 0); /* it did the unmaps */
    assert_int_equal(st.zombie_bytes, 0);
    tpool_close(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_off_by_default),
        cmocka_unit_test(test_unmaps_zombies_when_marker_completes),
        cmocka_unit_test(test_malloc_path_takes_what_worker_left),
        cmocka_unit_test(test_partial_failure_is_retried),
        cmocka_unit_test(test_destroy_with_waiting_zombies),
        cmocka_unit_test(test_trim_gives_everything_back),
        cmocka_unit_test(test_threads_with_worker),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
