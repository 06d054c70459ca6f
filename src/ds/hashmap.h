/*
 * hashmap.h — an open-addressing hash map from non-zero uint64_t keys (addresses) to void *.
 *
 * Linear probing over a power-of-two table, Fibonacci hashing (the keys are addresses whose low
 * bits are mostly zero, so the slot is taken from the high bits of key * 2^64/phi), at most 3/4
 * full (the table doubles beyond that), and backward-shift deletion, so there are no tombstones
 * and probe sequences never degrade with churn. Keys and values live in one allocation.
 *
 * Thread safety: none. A map belongs to one pool and is only touched under that pool's lock;
 * vpmm_hmap_set_alloc_hook() is process-wide and meant for single-threaded tests only.
 * Invariants: listed above vpmm_hmap_t and checked by vpmm_hmap_validate();
 * tests/test_hashmap.c calls it after every mutation.
 */
#ifndef VPMM_HASHMAP_H
#define VPMM_HASHMAP_H

#include <stddef.h>
#include <stdint.h>

/*
 * keys[i] == 0 marks an empty slot; 0 is never a valid key. Invariants:
 *  1. cap is a power of two >= 16; vals == (void **)(keys + cap) (one allocation)
 *  2. count == number of slots with keys[i] != 0, and count <= cap * 3/4
 *  3. keys[i] == 0 implies vals[i] == NULL (so a lookup of key 0 finds NULL without a branch)
 *  4. no duplicate keys, and every slot from home(keys[i]) to i, cyclically, is occupied
 *     (linear probing finds each key before it meets an empty slot)
 */
typedef struct vpmm_hmap {
    uint64_t *keys;
    void **vals;
    size_t cap, count;
} vpmm_hmap_t;

/*
 * Allocates a table of initial_capacity slots, rounded up to a power of two >= 16. Returns 0, or
 * -1 when out of memory (then m is zeroed; only vpmm_hmap_fini may be called on it).
 */
int vpmm_hmap_init(vpmm_hmap_t *m, size_t initial_capacity);

/* Frees the table and zeroes m. Safe on a zeroed map. The values are the caller's. */
void vpmm_hmap_fini(vpmm_hmap_t *m);

/* The value stored under key, NULL if absent (and for key 0). */
/* Removes every entry, keeping the capacity (no allocation; cannot fail). */
void vpmm_hmap_clear(vpmm_hmap_t *m);

void *vpmm_hmap_get(const vpmm_hmap_t *m, uint64_t key);

/*
 * Inserts key or replaces its value. Returns 0, or -1 with the map unchanged when the table had
 * to grow and could not, or when key is 0. Replacing an existing key never fails.
 */
int vpmm_hmap_put(vpmm_hmap_t *m, uint64_t key, void *val);

/* Removes key and returns its value; NULL if absent. Never allocates, never shrinks the table. */
void *vpmm_hmap_remove(vpmm_hmap_t *m, uint64_t key);

/*
 * The value slot of key, for read-modify-write in one probe: vpmm_hmap_ref returns NULL when key
 * is absent; vpmm_hmap_ref_insert adds it (value NULL) when absent. ref_insert needs room for one
 * more new key (vpmm_hmap_reserve(m, 1)); it returns NULL only for key 0 or without room. A slot
 * stays valid until the next put, insert or remove.
 */
void **vpmm_hmap_ref(const vpmm_hmap_t *m, uint64_t key);
void **vpmm_hmap_ref_insert(vpmm_hmap_t *m, uint64_t key);

/*
 * Grows the table, if needed, so that `extra` further puts of new keys cannot fail. Returns 0, or
 * -1 when out of memory (or when count + extra overflows), with the map unchanged.
 */
int vpmm_hmap_reserve(vpmm_hmap_t *m, size_t extra);

/*
 * Iteration in slot order: pos starts at 0. Returns the slot index of the first entry at or
 * after pos and fills *key and *val (either may be NULL), or m->cap when there is none. Continue
 * with the returned index + 1. The map must not be modified during a walk: a removal may shift
 * an entry from a later slot to an earlier one.
 */
size_t vpmm_hmap_next(const vpmm_hmap_t *m, size_t pos, uint64_t *key, void **val);

/* Number of broken invariants (see vpmm_hmap_t); 0 means valid. O(cap); for tests and debug. */
size_t vpmm_hmap_validate(const vpmm_hmap_t *m);

/*
 * Test hook: the calloc-compatible function that allocates tables (NULL restores calloc). The
 * memory it returns is released with free(). Lets tests make the Nth allocation fail.
 */
typedef void *(*vpmm_hmap_calloc_fn)(size_t nmemb, size_t size);
void vpmm_hmap_set_alloc_hook(vpmm_hmap_calloc_fn fn);

#endif /* VPMM_HASHMAP_H */
