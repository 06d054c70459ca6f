/*
 * test_rng.h — the tests' one seeded random number generator. Header-only and free of cmocka, so
 * that the fuzzer (tests/fuzz) shares it; test_util.h includes it for every other test.
 *
 * trng_t is xorshift64* (Vigna): one state word, which must not be 0. Each test seeds its own
 * generator with a fixed value or one it prints (VPMM_STRESS_SEED and the like), so a random test
 * replays exactly from its seed. tmix64 is splitmix64's output function, a bijection on 64 bits:
 * for patterns and keys derived from a seed, and for seeding one generator from another (one per
 * thread). Not thread-safe: a generator belongs to one thread.
 */
#ifndef VPMM_TEST_RNG_H
#define VPMM_TEST_RNG_H

#include <stddef.h>
#include <stdint.h>

typedef struct trng {
    uint64_t s;
} trng_t;

static inline uint64_t trng_next(trng_t *r)
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545F4914F6CDD1DULL;
}

/* A number in [0, n), n > 0 (modulo: the bias is far below what a test can see). */
static inline uint64_t trng_below(trng_t *r, uint64_t n)
{
    return trng_next(r) % n;
}

/* Shuffles a[0..n) (Fisher–Yates). */
static inline void trng_shuffle(trng_t *r, size_t *a, size_t n)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)trng_below(r, i);
        size_t tmp = a[i - 1];
        a[i - 1] = a[j];
        a[j] = tmp;
    }
}

static inline uint64_t tmix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

#endif /* VPMM_TEST_RNG_H */
