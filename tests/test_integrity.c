/*
 * test_integrity.c — data survives defragmentation. The host backend maps real memory with real
 * aliasing (one memfd, MAP_SHARED), so the CPU can write a pattern through every allocation, force
 * remaps of the freed pages around them, and read every byte back through the unchanged
 * addresses. It also proves the double mapping is real: until a zombie is reclaimed, the page's old
 * address shows what is written through its new one.
 */
#include <string.h>

#include "test_util.h"

typedef struct block {
    unsigned char *p;
    size_t size;
    uint32_t seed;
} block_t;

/* The block's byte i: a function of (seed, i) alone. */
static unsigned char pattern(uint32_t seed, size_t i)
{
    return (unsigned char)tmix64(((uint64_t)seed << 32) ^ i);
}

static void fill(block_t *b)
{
    for (size_t i = 0; i < b->size; i++)
        b->p[i] = pattern(b->seed, i);
}

static void verify(const block_t *b)
{
    for (size_t i = 0; i < b->size; i++)
        if (b->p[i] != pattern(b->seed, i))
            fail_msg("block %p (+%zu, seed %u) corrupted at byte %zu", (void *)b->p, b->size,
                     b->seed, i);
}

/*
 * Interleave kept and freed blocks of mixed sizes (sub-page ones included), then ask for more than
 * any free region: the freed pages are remapped next to each other, the kept ones are untouched.
 */
static void test_data_survives_defrag(void **state)
{
    tpool_t t;
    tpool_params_t prm = { .granularity = 64 * KiB, .memory_limit = 16 * MiB };
    block_t blocks[48];
    block_t big;
    size_t nb = 0, freed = 0;
    trng_t rng = { 7 };
    vpmm_stats_t s;
    (void)state;
    tpool_open(&t, &prm);
    while (nb < 48) {
        block_t *b = &blocks[nb];
        b->size = nb % 3 == 0 ? (size_t)trng_below(&rng, 3000) + 1
                              : (size_t)(trng_below(&rng, 4) + 1) * 64 * KiB;
        b->seed = (uint32_t)nb + 1;
        b->p = tmalloc(t.pool, b->size, NULL);
        fill(b);
        nb++;
    }
    for (size_t i = 1; i < nb; i += 2) {
        freed += blocks[i].size;
        tfree(t.pool, blocks[i].p);
        blocks[i].p = NULL;
    }
    s = tstats(t.pool);
    big.size = s.free_bytes - s.free_bytes % (64 * KiB);
    big.seed = 999;
    big.p = tmalloc(t.pool, big.size, NULL);
    s = tstats(t.pool);
    print_message("freed %zu bytes in 24 blocks, then %zu bytes in one: %llu pages remapped, "
                  "%llu created\n",
                  freed, big.size, (unsigned long long)s.pages_remapped,
                  (unsigned long long)s.pages_created);
    assert_true(s.pages_remapped > 0);
    for (size_t i = 0; i < nb; i += 2)
        verify(&blocks[i]);
    fill(&big);
    verify(&big);
    for (size_t i = 0; i < nb; i += 2)
        verify(&blocks[i]);
    for (size_t i = 0; i < nb; i += 2)
        tfree(t.pool, blocks[i].p);
    tfree(t.pool, big.p);
    tpool_close(&t);
}

typedef struct find_zombie {
    uintptr_t addr;
    size_t size;
} find_zombie_t;

static int first_zombie(const vpmm_region_info_t *r, void *user)
{
    find_zombie_t *z = user;
    if (r->state != VPMM_REGION_ZOMBIE)
        return 0;
    z->addr = r->addr;
    z->size = r->size;
    return 1;
}

/* Seed case C at 64 KiB pages: the 10 freed pages are remapped behind 1 new one. */
static void test_double_mapping_aliases(void **state)
{
    const size_t pg = 64 * KiB;
    tpool_t t;
    tpool_params_t prm = { .granularity = pg, .prealloc = 15 };
    vpmm_stream_t s;
    find_zombie_t z = { 0, 0 };
    block_t b1, b4, b11;
    void *p10;
    (void)state;
    tpool_open(&t, &prm);
    s = vpmm_host_stream_create(t.host);
    p10 = tmalloc(t.pool, 10 * pg, s);
    b1 = (block_t){ tmalloc(t.pool, pg, s), pg, 1 };
    fill(&b1);
    memset(p10, 0xAB, 10 * pg);
    vpmm_host_enqueue(t.host, s); /* keep the zombie alive: its stream has pending work */
    tfree(t.pool, p10);
    b4 = (block_t){ tmalloc(t.pool, 4 * pg, s), 4 * pg, 4 };
    fill(&b4);
    b11 = (block_t){ tmalloc(t.pool, 11 * pg, s), 11 * pg, 11 };
    assert_int_equal(tstats(t.pool).pages_remapped, 10);
    vpmm_pool_walk(t.pool, first_zombie, &z);
    assert_int_equal(z.addr, (uintptr_t)p10);
    assert_int_equal(z.size, 10 * pg);
    /* The remapped pages still hold what was written through their old address... */
    for (size_t i = 0; i < 10 * pg; i++)
        assert_int_equal(b11.p[pg + i], 0xAB);
    /* ...and what is written through the new address shows at the old one: same memory. */
    fill(&b11);
    for (size_t i = 0; i < 10 * pg; i += 4099)
        assert_int_equal(((unsigned char *)z.addr)[i], b11.p[pg + i]);
    verify(&b1);
    verify(&b4);
    vpmm_host_complete(t.host, s);
    tfree(t.pool, b1.p);
    tfree(t.pool, b4.p);
    tfree(t.pool, b11.p);
    tpool_close(&t);
}

/* Repeated fragmentation and defragmentation: every live block is verified after each round. */
static void test_repeated_defrag_rounds(void **state)
{
    tpool_t t;
    tpool_params_t prm = { .granularity = 64 * KiB, .memory_limit = 8 * MiB };
    block_t live[64];
    size_t n = 0;
    trng_t rng = { 2024 };
    uint32_t seed = 1;
    (void)state;
    tpool_open(&t, &prm);
    for (int round = 0; round < 40; round++) {
        /* Allocate until a request fails (memory is bounded), or the table is full. */
        while (n < 64) {
            block_t b;
            vpmm_status_t st;
            b.size = trng_below(&rng, 2) ? trng_below(&rng, 5000) + 1
                                         : (trng_below(&rng, 12) + 1) * 64 * KiB;
            b.seed = seed++;
            st = vpmm_malloc(t.pool, b.size, NULL, (void **)&b.p);
            CHECK_POOL(t.pool);
            if (st == VPMM_ERROR_OUT_OF_MEMORY)
                break;
            assert_int_equal(st, VPMM_SUCCESS);
            fill(&b);
            live[n++] = b;
        }
        for (size_t i = 0; i < n; i++)
            verify(&live[i]);
        /* Free a random half. */
        for (size_t i = 0; i < n;) {
            if (trng_below(&rng, 2)) {
                tfree(t.pool, live[i].p);
                live[i] = live[--n];
            } else {
                i++;
            }
        }
    }
    print_message("40 rounds: %llu pages remapped, %llu defrags\n",
                  (unsigned long long)tstats(t.pool).pages_remapped,
                  (unsigned long long)tstats(t.pool).defrags);
    assert_true(tstats(t.pool).defrags > 0);
    for (size_t i = 0; i < n; i++) {
        verify(&live[i]);
        tfree(t.pool, live[i].p);
    }
    tpool_close(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_data_survives_defrag),
        cmocka_unit_test(test_double_mapping_aliases),
        cmocka_unit_test(test_repeated_defrag_rounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
