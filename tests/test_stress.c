/*
 * test_stress.c — seeded random operation sequences on the host backend, with the full invariant
 * check after every operation.
 *
 * Several streams, sizes from sub-page to many pages, frees on any stream's allocations, stream
 * work enqueued and completed at random (so memory is pending, ready, harvested behind GPU waits
 * and zombies come and go), a bounded device (OOM happens and must leave the pool intact), and a
 * stamp written at both ends of every allocation and checked before its free. Deterministic: the
 * seed is printed and fixed; VPMM_STRESS_SEED / VPMM_STRESS_OPS override it for longer local runs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#define MAX_LIVE 512
#define NSTREAMS 5

typedef struct live {
    unsigned char *p;
    size_t size;
    uint64_t stamp;
} live_t;

static size_t random_size(trng_t *r)
{
    uint64_t k = trng_below(r, 100);
    if (k < 50)
        return (size_t)trng_below(r, 64 * KiB) + 1; /* sub-page */
    if (k < 85)
        return (size_t)trng_below(r, 4 * MiB) + 64 * KiB; /* around a page */
    if (k < 99)
        return (size_t)trng_below(r, 24 * MiB) + 4 * MiB; /* several pages */
    return (size_t)trng_below(r, 96 * MiB) + 1; /* rare and large: forces defragmentation */
}

static void stamp(live_t *l)
{
    memcpy(l->p, &l->stamp, VPMM_MIN(l->size, sizeof l->stamp));
    if (l->size >= 2 * sizeof l->stamp)
        memcpy(l->p + l->size - sizeof l->stamp, &l->stamp, sizeof l->stamp);
}

static void check_stamp(const live_t *l)
{
    uint64_t v = 0;
    memcpy(&v, l->p, VPMM_MIN(l->size, sizeof v));
    if (l->size < sizeof v) {
        assert_memory_equal(l->p, &l->stamp, l->size);
        return;
    }
    assert_int_equal(v, l->stamp);
    if (l->size >= 2 * sizeof v) {
        memcpy(&v, l->p + l->size - sizeof v, sizeof v);
        assert_int_equal(v, l->stamp);
    }
}

static void run(uint64_t seed, uint64_t ops, int cache_percent)
{
    tpool_t t;
    tpool_params_t prm = { .memory_limit = 256 * MiB,
                           .va_size = 2 * GiB,
                           .cache_percent = cache_percent };
    vpmm_stream_t streams[NSTREAMS];
    live_t live[MAX_LIVE];
    size_t nlive = 0;
    trng_t rng = { seed };
    uint64_t ooms = 0, mallocs = 0, frees = 0;
    vpmm_stats_t s;

    tpool_open(&t, &prm);
    streams[0] = NULL; /* the legacy default stream takes part too */
    for (int i = 1; i < NSTREAMS; i++)
        streams[i] = vpmm_host_stream_create(t.host);

    for (uint64_t op = 0; op < ops; op++) {
        uint64_t k = trng_below(&rng, 100);
        vpmm_stream_t st = streams[trng_below(&rng, NSTREAMS)];
        if (k < 45 && nlive < MAX_LIVE) {
            live_t l;
            vpmm_status_t rc;
            l.size = random_size(&rng);
            l.stamp = trng_next(&rng);
            rc = vpmm_malloc(t.pool, l.size, st, (void **)&l.p);
            if (rc == VPMM_ERROR_OUT_OF_MEMORY) {
                ooms++;
            } else {
                assert_int_equal(rc, VPMM_SUCCESS);
                stamp(&l);
                live[nlive++] = l;
                mallocs++;
            }
        } else if (k < 88 && nlive > 0) {
            size_t i = (size_t)trng_below(&rng, nlive);
            check_stamp(&live[i]);
            assert_int_equal(vpmm_free(t.pool, live[i].p), VPMM_SUCCESS);
            live[i] = live[--nlive];
            frees++;
        } else if (k < 95) {
            vpmm_host_enqueue(t.host, st); /* a kernel keeps the stream busy */
        } else if (k < 99) {
            vpmm_host_advance(t.host, st, (size_t)trng_below(&rng, 3) + 1);
        } else {
            vpmm_host_complete_all(t.host);
        }
        if (vpmm_pool_check(t.pool, stderr) != 0)
            fail_msg("invariants broken after op %llu (seed %llu)", (unsigned long long)op,
                     (unsigned long long)seed);
    }
    assert_driver_matches_pool(&t);
    for (size_t i = 0; i < nlive; i++) {
        check_stamp(&live[i]);
        tfree(t.pool, live[i].p);
    }
    s = tstats(t.pool);
    print_message(
        "cache %s, seed %llu: %llu ops, %llu mallocs, %llu frees, %llu OOM, %llu defrags, %llu "
        "pages remapped, %llu created, %llu cross-stream waits, peak mapped %zu MiB\n",
        cache_percent == 0  ? "default"
        : cache_percent < 0 ? "off"
                            : "uncapped",
        (unsigned long long)seed, (unsigned long long)ops, (unsigned long long)mallocs,
        (unsigned long long)frees, (unsigned long long)ooms, (unsigned long long)s.defrags,
        (unsigned long long)s.pages_remapped, (unsigned long long)s.pages_created,
        (unsigned long long)s.cross_stream_waits, s.peak_mapped_bytes / MiB);
    assert_true(mallocs > ops / 4);
    assert_true(s.defrags > 0);
    assert_true(s.cross_stream_waits > 0);
    vpmm_host_complete_all(t.host);
    tpool_close(&t);
}

static uint64_t env_u64(const char *name, uint64_t def)
{
    const char *v = getenv(name);
    return v ? strtoull(v, NULL, 10) : def;
}

static void test_stress(void **state)
{
    (void)state;
    run(env_u64("VPMM_STRESS_SEED", 20261121), env_u64("VPMM_STRESS_OPS", 120000), 0);
}

/* The same with an uncapped exact-size cache: most frees are cached, slow paths flush them. */
static void test_stress_cached(void **state)
{
    (void)state;
    run(env_u64("VPMM_STRESS_SEED", 20261121) + 1, env_u64("VPMM_STRESS_OPS", 120000), 100);
}

/* And with the cache off: every free coalesces at once. */
static void test_stress_uncached(void **state)
{
    (void)state;
    run(env_u64("VPMM_STRESS_SEED", 20261121) + 2, env_u64("VPMM_STRESS_OPS", 120000) / 2, -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stress),
        cmocka_unit_test(test_stress_cached),
        cmocka_unit_test(test_stress_uncached),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
