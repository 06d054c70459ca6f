/*
 * hashmap.c — the open-addressing map from addresses to records (linear probing, Fibonacci
 * hashing, backward-shift deletion).
 *
 * get and put are on the allocator's hot path: one multiply and shift to find the home slot, then
 * a scan of a short run of neighbouring slots. Growth is split off into a cold function.
 *
 * Thread safety: none; the caller holds the lock of the structure that owns the map. The
 * allocation hook is a process-wide test knob.
 * Invariants: the equations above vpmm_hmap_t in hashmap.h, checked by vpmm_hmap_validate() at
 * the end of this file.
 */
#include "hashmap.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

#define HMAP_MIN_CAP 16
/* 2^64 / golden ratio (odd). Multiplying by it spreads the key's low-order differences into
 * the high bits, which become the slot; keys aligned to 2 MiB differ only above bit 20. */
#define HMAP_FIB 0x9E3779B97F4A7C15ull

static vpmm_hmap_calloc_fn alloc_fn = calloc;

void vpmm_hmap_set_alloc_hook(vpmm_hmap_calloc_fn fn)
{
    alloc_fn = fn != NULL ? fn : calloc;
}

static inline size_t home_slot(uint64_t key, size_t cap)
{
    return (size_t)((key * HMAP_FIB) >> (64 - __builtin_ctzll((unsigned long long)cap)));
}

/* Most entries a table of cap slots may hold: 3/4 full keeps linear probes short. */
static inline size_t max_count(size_t cap)
{
    return cap - cap / 4;
}

/* Keys then values, zeroed, in one block; NULL if the size does not fit in size_t (checked
 * here rather than left to calloc, which sanitizers would report as an error). */
static uint64_t *table_alloc(size_t cap)
{
    const size_t slot_bytes = sizeof(uint64_t) + sizeof(void *);

    if (cap > SIZE_MAX / slot_bytes)
        return NULL;
    return alloc_fn(cap, slot_bytes);
}

/* Replaces the table with one of new_cap slots (a power of two that fits count). */
static int rehash(vpmm_hmap_t *m, size_t new_cap)
{
    const size_t mask = new_cap - 1;
    uint64_t *keys = table_alloc(new_cap);
    void **vals;

    if (keys == NULL)
        return -1;
    vals = (void **)(keys + new_cap);
    for (size_t i = 0; i < m->cap; i++) {
        const uint64_t k = m->keys[i];
        size_t j;
        if (k == 0)
            continue;
        j = home_slot(k, new_cap);
        while (keys[j] != 0)
            j = (j + 1) & mask;
        keys[j] = k;
        vals[j] = m->vals[i];
    }
    free(m->keys);
    m->keys = keys;
    m->vals = vals;
    m->cap = new_cap;
    return 0;
}

int vpmm_hmap_init(vpmm_hmap_t *m, size_t initial_capacity)
{
    size_t cap = HMAP_MIN_CAP;

    m->keys = NULL;
    m->vals = NULL;
    m->cap = 0;
    m->count = 0;
    while (cap < initial_capacity) {
        if (cap > SIZE_MAX / 2)
            return -1;
        cap *= 2;
    }
    m->keys = table_alloc(cap);
    if (m->keys == NULL)
        return -1;
    m->vals = (void **)(m->keys + cap);
    m->cap = cap;
    return 0;
}

void vpmm_hmap_fini(vpmm_hmap_t *m)
{
    free(m->keys);
    m->keys = NULL;
    m->vals = NULL;
    m->cap = 0;
    m->count = 0;
}

void vpmm_hmap_clear(vpmm_hmap_t *m)
{
    /* Keys and values are one allocation (rule 1); empty slots hold NULL values (rule 3). */
    if (m->keys != NULL)
        memset(m->keys, 0, m->cap * (sizeof *m->keys + sizeof *m->vals));
    m->count = 0;
}

void *vpmm_hmap_get(const vpmm_hmap_t *m, uint64_t key)
{
    const size_t mask = m->cap - 1;
    size_t i = home_slot(key, m->cap);

    /* Terminates: the table is never full. Key 0 stops at the first empty slot, whose value is
     * NULL by invariant 3. */
    for (;;) {
        const uint64_t k = m->keys[i];
        if (k == key)
            return m->vals[i];
        if (k == 0)
            return NULL;
        i = (i + 1) & mask;
    }
}

/* Cold half of put: key is new and the table is full. */
static __attribute__((noinline)) int grow_and_insert(vpmm_hmap_t *m, uint64_t key, void *val)
{
    size_t mask, i;

    if (m->cap > SIZE_MAX / 2 || rehash(m, m->cap * 2) != 0)
        return -1;
    mask = m->cap - 1;
    i = home_slot(key, m->cap);
    while (m->keys[i] != 0)
        i = (i + 1) & mask;
    m->keys[i] = key;
    m->vals[i] = val;
    m->count++;
    return 0;
}

int vpmm_hmap_put(vpmm_hmap_t *m, uint64_t key, void *val)
{
    const size_t mask = m->cap - 1;
    size_t i = home_slot(key, m->cap);
    uint64_t k;

    if (VPMM_UNLIKELY(key == 0))
        return -1;
    while ((k = m->keys[i]) != 0) {
        if (k == key) {
            m->vals[i] = val;
            return 0;
        }
        i = (i + 1) & mask;
    }
    /* Growing only when the key is new keeps replacement infallible and reserve() honest. */
    if (VPMM_UNLIKELY(m->count >= max_count(m->cap)))
        return grow_and_insert(m, key, val);
    m->keys[i] = key;
    m->vals[i] = val;
    m->count++;
    return 0;
}

void **vpmm_hmap_ref(const vpmm_hmap_t *m, uint64_t key)
{
    const size_t mask = m->cap - 1;
    size_t i = home_slot(key, m->cap);
    uint64_t k;
    while ((k = m->keys[i]) != 0) {
        if (k == key)
            return &m->vals[i];
        i = (i + 1) & mask;
    }
    return NULL;
}

void **vpmm_hmap_ref_insert(vpmm_hmap_t *m, uint64_t key)
{
    const size_t mask = m->cap - 1;
    size_t i = home_slot(key, m->cap);
    uint64_t k;
    if (VPMM_UNLIKELY(key == 0))
        return NULL;
    while ((k = m->keys[i]) != 0) {
        if (k == key)
            return &m->vals[i];
        i = (i + 1) & mask;
    }
    if (VPMM_UNLIKELY(m->count >= max_count(m->cap)))
        return NULL; /* the caller did not reserve room */
    m->keys[i] = key;
    m->vals[i] = NULL;
    m->count++;
    return &m->vals[i];
}

/*
 * Backward-shift deletion. After emptying slot `hole`, walk the run that follows it. An entry at
 * j whose home h lies cyclically in (hole, j] must stay (moving it before its home would hide it
 * from lookups); any other entry probed through the hole on its way to j, so it moves back into
 * the hole and its old slot becomes the new hole. The first empty slot ends the run.
 *
 *            slot  0   1   2   3   4               slot  0   1   2   3   4
 *            key   X   A   B   C   .     ->      key   B   A   C   .   .
 *            home  0   1   0   1                 home  0   1   1
 *
 * Removing X: A sits at its home and stays; B (home 0) moves into the hole at 0; C (home 1) moves
 * into the new hole at 2; slot 3, the last hole, is emptied.
 */
void *vpmm_hmap_remove(vpmm_hmap_t *m, uint64_t key)
{
    const size_t mask = m->cap - 1;
    size_t hole = home_slot(key, m->cap);
    void *old;
    uint64_t k;

    if (VPMM_UNLIKELY(key == 0))
        return NULL;
    while ((k = m->keys[hole]) != key) {
        if (k == 0)
            return NULL;
        hole = (hole + 1) & mask;
    }
    old = m->vals[hole];
    for (size_t j = (hole + 1) & mask; (k = m->keys[j]) != 0; j = (j + 1) & mask) {
        /* Distances back from j: to k's home, and to the hole. k may move iff the hole is on the
         * probe path home..j, i.e. the home is at least as far back as the hole. */
        const size_t from_home = (j - home_slot(k, m->cap)) & mask;
        const size_t from_hole = (j - hole) & mask;
        if (from_home >= from_hole) {
            m->keys[hole] = k;
            m->vals[hole] = m->vals[j];
            hole = j;
        }
    }
    m->keys[hole] = 0;
    m->vals[hole] = NULL;
    m->count--;
    return old;
}

int vpmm_hmap_reserve(vpmm_hmap_t *m, size_t extra)
{
    size_t need, cap = m->cap;

    if (extra > SIZE_MAX - m->count)
        return -1;
    need = m->count + extra;
    while (max_count(cap) < need) {
        if (cap > SIZE_MAX / 2)
            return -1;
        cap *= 2;
    }
    return cap == m->cap ? 0 : rehash(m, cap);
}

size_t vpmm_hmap_next(const vpmm_hmap_t *m, size_t pos, uint64_t *key, void **val)
{
    for (; pos < m->cap; pos++) {
        if (m->keys[pos] == 0)
            continue;
        if (key != NULL)
            *key = m->keys[pos];
        if (val != NULL)
            *val = m->vals[pos];
        return pos;
    }
    return m->cap;
}

size_t vpmm_hmap_validate(const vpmm_hmap_t *m)
{
    size_t bad = 0, seen = 0, mask;

    /* Without a sound capacity no probe sequence can be followed; report that alone. */
    if (m->keys == NULL || m->cap < HMAP_MIN_CAP || (m->cap & (m->cap - 1)) != 0)
        return 1;
    mask = m->cap - 1;
    if (m->vals != (void **)(m->keys + m->cap))
        bad++;
    for (size_t i = 0; i < m->cap; i++) {
        const uint64_t k = m->keys[i];
        if (k == 0) {
            bad += m->vals[i] != NULL;
            continue;
        }
        seen++;
        /* A gap before i would end a lookup early; an equal key before i is a duplicate. */
        for (size_t j = home_slot(k, m->cap); j != i; j = (j + 1) & mask) {
            if (m->keys[j] == 0 || m->keys[j] == k) {
                bad++;
                break;
            }
        }
    }
    if (seen != m->count)
        bad++;
    if (m->count > max_count(m->cap))
        bad++;
    return bad;
}
