/*
 * test_rbtree.c — unit tests for src/ds/rbtree.c: shapes that exercise every insert and remove
 * case, lower_bound at, between and beyond keys (ties on k1 broken by k2), iteration both ways,
 * a seeded random stress against a sorted-array reference, and corruptions that
 * vpmm_rb_validate() must report. Every mutation is followed by vpmm_rb_validate() (the stress
 * test thins that out after its first 20k operations to stay fast under valgrind).
 *
 * Single-threaded; no allocation besides the node arrays the tests own.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "rbtree.h"
#include "test_rng.h"

static size_t height(const vpmm_rb_node_t *n)
{
    size_t l, r;

    if (n == NULL)
        return 0;
    l = height(n->left);
    r = height(n->right);
    return 1 + (l > r ? l : r);
}

static size_t log2_ceil(size_t n)
{
    size_t b = 0;

    while (((size_t)1 << b) < n)
        b++;
    return b;
}

/* The tree is valid, no taller than 2 log2(count + 1), and in order forwards and backwards equal
 * to ref[0..n). */
static void check_tree(const vpmm_rbtree_t *t, vpmm_rb_node_t *const *ref, size_t n)
{
    vpmm_rb_node_t *it;
    size_t i;

    assert_int_equal(vpmm_rb_validate(t), 0);
    assert_int_equal(t->count, n);
    assert_true(height(t->root) <= 2 * log2_ceil(n + 1));
    for (i = 0, it = vpmm_rb_first(t); it != NULL; it = vpmm_rb_next(it), i++) {
        assert_true(i < n);
        assert_ptr_equal(it, ref[i]);
    }
    assert_int_equal(i, n);
    for (i = n, it = vpmm_rb_last(t); it != NULL; it = vpmm_rb_prev(it), i--) {
        assert_true(i > 0);
        assert_ptr_equal(it, ref[i - 1]);
    }
    assert_int_equal(i, 0);
}

/* Nodes with k1 = i * 10 and k2 = 0, already in key order; ref[i] = &nodes[i]. */
static vpmm_rb_node_t *make_nodes(size_t n, vpmm_rb_node_t ***out_ref)
{
    vpmm_rb_node_t *nodes = calloc(n, sizeof(*nodes));
    vpmm_rb_node_t **ref = calloc(n, sizeof(*ref));

    assert_non_null(nodes);
    assert_non_null(ref);
    for (size_t i = 0; i < n; i++) {
        nodes[i].k1 = (uint64_t)i * 10;
        ref[i] = &nodes[i];
    }
    *out_ref = ref;
    return nodes;
}

static void test_empty(void **state)
{
    vpmm_rbtree_t t;

    (void)state;
    vpmm_rb_init(&t);
    assert_null(t.root);
    assert_int_equal(t.count, 0);
    assert_int_equal(vpmm_rb_validate(&t), 0);
    assert_null(vpmm_rb_first(&t));
    assert_null(vpmm_rb_last(&t));
    assert_null(vpmm_rb_lower_bound(&t, 0, 0));
    assert_null(vpmm_rb_lower_bound(&t, UINT64_MAX, UINT64_MAX));
}

static void test_single(void **state)
{
    vpmm_rbtree_t t;
    vpmm_rb_node_t n = { .k1 = 5, .k2 = 7 };

    (void)state;
    vpmm_rb_init(&t);
    vpmm_rb_insert(&t, &n);
    assert_int_equal(vpmm_rb_validate(&t), 0);
    assert_ptr_equal(t.root, &n);
    assert_false(n.red);
    assert_ptr_equal(vpmm_rb_first(&t), &n);
    assert_ptr_equal(vpmm_rb_last(&t), &n);
    assert_null(vpmm_rb_next(&n));
    assert_null(vpmm_rb_prev(&n));
    assert_ptr_equal(vpmm_rb_lower_bound(&t, 5, 7), &n);
    assert_ptr_equal(vpmm_rb_lower_bound(&t, 0, 0), &n);
    assert_null(vpmm_rb_lower_bound(&t, 5, 8));
    vpmm_rb_remove(&t, &n);
    assert_int_equal(vpmm_rb_validate(&t), 0);
    assert_null(t.root);
    assert_int_equal(t.count, 0);
}

/* Insert nodes[order[i]] one by one, checking the whole tree after each. */
static void insert_in_order(const size_t *order, size_t n)
{
    vpmm_rb_node_t **ref;
    vpmm_rb_node_t *nodes = make_nodes(n, &ref);
    vpmm_rb_node_t **sorted = calloc(n, sizeof(*sorted));
    char *present = calloc(n, 1);
    vpmm_rbtree_t t;

    assert_non_null(sorted);
    assert_non_null(present);
    vpmm_rb_init(&t);
    for (size_t i = 0; i < n; i++) {
        size_t m = 0;
        vpmm_rb_insert(&t, &nodes[order[i]]);
        present[order[i]] = 1;
        for (size_t j = 0; j < n; j++)
            if (present[j])
                sorted[m++] = ref[j];
        check_tree(&t, sorted, m);
    }
    check_tree(&t, ref, n);
    free(present);
    free(sorted);
    free(ref);
    free(nodes);
}

static void test_insert_ascending(void **state)
{
    size_t order[512];

    (void)state;
    for (size_t i = 0; i < 512; i++)
        order[i] = i;
    insert_in_order(order, 512);
}

static void test_insert_descending(void **state)
{
    size_t order[512];

    (void)state;
    for (size_t i = 0; i < 512; i++)
        order[i] = 511 - i;
    insert_in_order(order, 512);
}

static void test_insert_random(void **state)
{
    size_t order[512];

    (void)state;
    trng_t rng = { 1 };
    for (size_t i = 0; i < 512; i++)
        order[i] = i;
    trng_shuffle(&rng, order, 512);
    insert_in_order(order, 512);
}

/* Delete ref[idx] from the expected array. */
static void ref_erase(vpmm_rb_node_t **ref, size_t *n, size_t idx)
{
    memmove(&ref[idx], &ref[idx + 1], (*n - idx - 1) * sizeof(*ref));
    (*n)--;
}

static size_t ref_index(vpmm_rb_node_t *const *ref, size_t n, const vpmm_rb_node_t *x)
{
    for (size_t i = 0; i < n; i++)
        if (ref[i] == x)
            return i;
    fail_msg("node not in reference");
    return 0;
}

static void test_remove_root_repeatedly(void **state)
{
    enum { N = 255 };
    vpmm_rb_node_t **ref;
    vpmm_rb_node_t *nodes = make_nodes(N, &ref);
    vpmm_rbtree_t t;
    size_t n = N;

    (void)state;
    vpmm_rb_init(&t);
    for (size_t i = 0; i < N; i++)
        vpmm_rb_insert(&t, &nodes[i]);
    check_tree(&t, ref, n);
    while (t.root != NULL) {
        vpmm_rb_node_t *root = t.root;
        vpmm_rb_remove(&t, root);
        ref_erase(ref, &n, ref_index(ref, n, root));
        check_tree(&t, ref, n);
    }
    assert_int_equal(n, 0);
    free(ref);
    free(nodes);
}

/* Remove nodes by kind in turn (step % 3: a leaf, a node with one child, a node with two
 * children; never the root unless it is all that is left) until the tree is empty. */
static void test_remove_leaf_and_internal(void **state)
{
    enum { N = 300 };
    vpmm_rb_node_t **ref;
    vpmm_rb_node_t *nodes = make_nodes(N, &ref);
    vpmm_rbtree_t t;
    size_t order[N], n = N, hits[3] = { 0, 0, 0 };

    (void)state;
    trng_t rng = { 2 };
    for (size_t i = 0; i < N; i++)
        order[i] = i;
    trng_shuffle(&rng, order, N);
    vpmm_rb_init(&t);
    for (size_t i = 0; i < N; i++)
        vpmm_rb_insert(&t, &nodes[order[i]]);
    check_tree(&t, ref, n);
    for (size_t step = 0; n > 0; step++) {
        vpmm_rb_node_t *victim = t.root;
        const size_t start = trng_below(&rng, n);
        for (size_t k = 0; k < 3 && victim == t.root; k++) {
            const size_t kind = (step + k) % 3;
            for (size_t i = 0; i < n; i++) {
                vpmm_rb_node_t *x = ref[(start + i) % n];
                if (x != t.root && (size_t)(x->left != NULL) + (x->right != NULL) == kind) {
                    victim = x;
                    hits[kind]++;
                    break;
                }
            }
        }
        vpmm_rb_remove(&t, victim);
        ref_erase(ref, &n, ref_index(ref, n, victim));
        check_tree(&t, ref, n);
    }
    assert_true(hits[0] > 20);
    assert_true(hits[1] > 20);
    assert_true(hits[2] > 20);
    free(ref);
    free(nodes);
}

static void test_lower_bound(void **state)
{
    /* k1 in {10, 20, 30} x k2 in {100, 200}, plus the extreme keys (0,0) and (max,max). */
    vpmm_rb_node_t nodes[8];
    vpmm_rbtree_t t;
    size_t i = 0;

    (void)state;
    memset(nodes, 0, sizeof(nodes));
    vpmm_rb_init(&t);
    for (uint64_t a = 10; a <= 30; a += 10)
        for (uint64_t b = 100; b <= 200; b += 100) {
            nodes[i].k1 = a;
            nodes[i].k2 = b;
            vpmm_rb_insert(&t, &nodes[i++]);
        }
    assert_int_equal(vpmm_rb_validate(&t), 0);

    /* Exact hits. */
    assert_ptr_equal(vpmm_rb_lower_bound(&t, 10, 100), &nodes[0]);
    assert_ptr_equal(vpmm_rb_lower_bound(&t, 20, 200), &nodes[3]);
    assert_ptr_equal(vpmm_rb_lower_bound(&t, 30, 200), &nodes[5]);
    /* Best fit: (size, 0) picks the lowest k2 among equal k1. */
    assert_ptr_equal(vpmm_rb_lower_bound(&t, 20, 0), &nodes[2]);
    /* Ties on k1 broken by k2. */
    assert_ptr_equal(vpmm_rb_lower_bound(&t, 20, 101), &nodes[3]);
    assert_ptr_equal(vpmm_rb_lower_bound(&t, 20, 201), &nodes[4]);
    assert_ptr_equal(vpmm_rb_lower_bound(&t, 20, UINT64_MAX), &nodes[4]);
    /* Between k1 values. */
    assert_ptr_equal(vpmm_rb_lower_bound(&t, 11, 0), &nodes[2]);
    assert_ptr_equal(vpmm_rb_lower_bound(&t, 29, UINT64_MAX), &nodes[4]);
    /* Below and beyond everything. */
    assert_ptr_equal(vpmm_rb_lower_bound(&t, 0, 0), &nodes[0]);
    assert_ptr_equal(vpmm_rb_lower_bound(&t, 9, UINT64_MAX), &nodes[0]);
    assert_null(vpmm_rb_lower_bound(&t, 30, 201));
    assert_null(vpmm_rb_lower_bound(&t, 31, 0));
    assert_null(vpmm_rb_lower_bound(&t, UINT64_MAX, UINT64_MAX));

    /* Extreme keys are ordinary keys. */
    nodes[6].k1 = 0;
    nodes[6].k2 = 0;
    nodes[7].k1 = UINT64_MAX;
    nodes[7].k2 = UINT64_MAX;
    vpmm_rb_insert(&t, &nodes[6]);
    vpmm_rb_insert(&t, &nodes[7]);
    assert_int_equal(vpmm_rb_validate(&t), 0);
    assert_ptr_equal(vpmm_rb_lower_bound(&t, 0, 0), &nodes[6]);
    assert_ptr_equal(vpmm_rb_lower_bound(&t, 0, 1), &nodes[0]);
    assert_ptr_equal(vpmm_rb_lower_bound(&t, 31, 0), &nodes[7]);
    assert_ptr_equal(vpmm_rb_lower_bound(&t, UINT64_MAX, UINT64_MAX), &nodes[7]);
    assert_ptr_equal(vpmm_rb_first(&t), &nodes[6]);
    assert_ptr_equal(vpmm_rb_last(&t), &nodes[7]);
}

static void test_iteration(void **state)
{
    enum { N = 1000 };
    vpmm_rb_node_t **ref;
    vpmm_rb_node_t *nodes = make_nodes(N, &ref);
    vpmm_rbtree_t t;
    size_t order[N];

    (void)state;
    trng_t rng = { 3 };
    for (size_t i = 0; i < N; i++)
        order[i] = i;
    trng_shuffle(&rng, order, N);
    vpmm_rb_init(&t);
    for (size_t i = 0; i < N; i++)
        vpmm_rb_insert(&t, &nodes[order[i]]);
    check_tree(&t, ref, N);
    assert_ptr_equal(vpmm_rb_first(&t), ref[0]);
    assert_ptr_equal(vpmm_rb_last(&t), ref[N - 1]);
    assert_null(vpmm_rb_prev(ref[0]));
    assert_null(vpmm_rb_next(ref[N - 1]));
    /* next and prev are inverse at every interior node. */
    for (size_t i = 1; i + 1 < N; i++) {
        assert_ptr_equal(vpmm_rb_next(vpmm_rb_prev(ref[i])), ref[i]);
        assert_ptr_equal(vpmm_rb_prev(vpmm_rb_next(ref[i])), ref[i]);
    }
    free(ref);
    free(nodes);
}

/* A node can be removed, re-keyed and inserted again (the allocator recycles its records). */
static void test_reinsert_rekeyed(void **state)
{
    vpmm_rb_node_t nodes[64];
    vpmm_rbtree_t t;

    (void)state;
    memset(nodes, 0, sizeof(nodes));
    vpmm_rb_init(&t);
    for (size_t i = 0; i < 64; i++) {
        nodes[i].k1 = i;
        nodes[i].k2 = (uintptr_t)&nodes[i];
        vpmm_rb_insert(&t, &nodes[i]);
    }
    for (size_t round = 0; round < 4; round++) {
        for (size_t i = 0; i < 64; i++) {
            vpmm_rb_remove(&t, &nodes[i]);
            assert_int_equal(vpmm_rb_validate(&t), 0);
            nodes[i].k1 = 1000 * (round + 1) - i;
            vpmm_rb_insert(&t, &nodes[i]);
            assert_int_equal(vpmm_rb_validate(&t), 0);
        }
        assert_ptr_equal(vpmm_rb_first(&t), &nodes[63]);
        assert_ptr_equal(vpmm_rb_last(&t), &nodes[0]);
    }
    assert_int_equal(t.count, 64);
}

/* Reference: ref[0..n) sorted by key. */
static size_t ref_lower_bound(vpmm_rb_node_t *const *ref, size_t n, uint64_t k1, uint64_t k2)
{
    size_t lo = 0, hi = n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ref[mid]->k1 < k1 || (ref[mid]->k1 == k1 && ref[mid]->k2 < k2))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/*
 * Mixed inserts, removes and lower_bounds against a sorted array. Phases alternate between
 * growing and shrinking the tree (so it fills to ~1500 nodes and drains to empty) and between a
 * narrow k1 range (many ties, decided by k2 = the node's address, as in the allocator) and the
 * full 64-bit range.
 */
static void test_random_stress(void **state)
{
    enum { POOL = 2048, OPS = 240000, PHASE = 20000, FULL_CHECK = 20000 };
    vpmm_rb_node_t *nodes = calloc(POOL, sizeof(*nodes));
    vpmm_rb_node_t **ref = calloc(POOL, sizeof(*ref));
    char *linked = calloc(POOL, 1);
    vpmm_rbtree_t t;
    size_t n = 0, emptied = 0, max_n = 0;

    (void)state;
    assert_non_null(nodes);
    assert_non_null(ref);
    assert_non_null(linked);
    trng_t rng = { 42 };
    vpmm_rb_init(&t);
    for (size_t op = 0; op < OPS; op++) {
        const size_t phase = op / PHASE;
        const int growing = phase % 2 == 0;
        const int narrow = phase % 4 < 2;
        const size_t r = trng_below(&rng, 100);
        int mutated = 0;

        if (r < (growing ? 55u : 25u)) {
            size_t i = trng_below(&rng, POOL);
            if (!linked[i]) {
                size_t pos;
                nodes[i].k1 = narrow ? trng_below(&rng, 32) : trng_next(&rng);
                nodes[i].k2 = (uintptr_t)&nodes[i];
                vpmm_rb_insert(&t, &nodes[i]);
                linked[i] = 1;
                pos = ref_lower_bound(ref, n, nodes[i].k1, nodes[i].k2);
                memmove(&ref[pos + 1], &ref[pos], (n - pos) * sizeof(*ref));
                ref[pos] = &nodes[i];
                n++;
                mutated = 1;
            }
        } else if (r < 80) {
            if (n > 0) {
                size_t pos = trng_below(&rng, n);
                vpmm_rb_node_t *x = ref[pos];
                vpmm_rb_remove(&t, x);
                linked[x - nodes] = 0;
                ref_erase(ref, &n, pos);
                mutated = 1;
                emptied += n == 0;
            }
        } else {
            uint64_t k1, k2;
            size_t pos;
            if (n > 0 && trng_below(&rng, 2) == 0) {
                /* Near an existing key: at it, just after it, or at its k1 with k2 = 0. */
                const vpmm_rb_node_t *x = ref[trng_below(&rng, n)];
                k1 = x->k1;
                k2 = trng_below(&rng, 3) == 0 ? 0 : x->k2 + trng_below(&rng, 2);
            } else {
                k1 = narrow ? trng_below(&rng, 34) : trng_next(&rng);
                k2 = trng_below(&rng, 2) == 0 ? 0 : trng_next(&rng);
            }
            pos = ref_lower_bound(ref, n, k1, k2);
            assert_ptr_equal(vpmm_rb_lower_bound(&t, k1, k2), pos < n ? ref[pos] : NULL);
        }
        max_n = n > max_n ? n : max_n;
        assert_int_equal(t.count, n);
        if (mutated && (op < FULL_CHECK || op % 97 == 0))
            assert_int_equal(vpmm_rb_validate(&t), 0);
        if (op % 4096 == 0 || op == OPS - 1)
            check_tree(&t, ref, n);
    }
    /* The phases did what they are for. */
    assert_true(emptied >= 2);
    assert_true(max_n >= 1000);
    free(linked);
    free(ref);
    free(nodes);
}

/* Every single corruption below breaks at least one equation and must be reported. */
static void test_validate_detects_corruption(void **state)
{
    enum { N = 100 };
    vpmm_rb_node_t **ref;
    vpmm_rb_node_t *nodes = make_nodes(N, &ref);
    vpmm_rbtree_t t;
    vpmm_rb_node_t *leaf = NULL, *saved;
    uint64_t k;

    (void)state;
    vpmm_rb_init(&t);
    for (size_t i = 0; i < N; i++)
        vpmm_rb_insert(&t, &nodes[i]);
    assert_int_equal(vpmm_rb_validate(&t), 0);

    /* Recolouring any single node breaks the colour or the balance equations. */
    for (size_t i = 0; i < N; i++) {
        nodes[i].red = !nodes[i].red;
        assert_true(vpmm_rb_validate(&t) > 0);
        nodes[i].red = !nodes[i].red;
        assert_int_equal(vpmm_rb_validate(&t), 0);
    }

    /* Order: swap the keys of two in-order neighbours. */
    k = nodes[40].k1;
    nodes[40].k1 = nodes[41].k1;
    nodes[41].k1 = k;
    assert_true(vpmm_rb_validate(&t) > 0);
    nodes[41].k1 = nodes[40].k1;
    nodes[40].k1 = k;
    assert_int_equal(vpmm_rb_validate(&t), 0);

    /* Duplicate key. */
    k = nodes[70].k1;
    nodes[70].k1 = nodes[71].k1;
    assert_true(vpmm_rb_validate(&t) > 0);
    nodes[70].k1 = k;

    /* A wrong parent link. */
    for (size_t i = 0; i < N && leaf == NULL; i++)
        if (nodes[i].left == NULL && nodes[i].right == NULL)
            leaf = &nodes[i];
    assert_non_null(leaf);
    saved = leaf->parent;
    leaf->parent = t.root == saved ? leaf : t.root;
    assert_true(vpmm_rb_validate(&t) > 0);
    leaf->parent = saved;
    assert_int_equal(vpmm_rb_validate(&t), 0);

    /* A cycle (leaf pointing back at the root) is reported, not followed forever. */
    leaf->left = t.root;
    assert_true(vpmm_rb_validate(&t) > 0);
    leaf->left = NULL;

    /* Root with a parent. */
    t.root->parent = leaf;
    assert_true(vpmm_rb_validate(&t) > 0);
    t.root->parent = NULL;

    /* Count mismatch. */
    t.count++;
    assert_int_equal(vpmm_rb_validate(&t), 1);
    t.count--;
    assert_int_equal(vpmm_rb_validate(&t), 0);

    /* An unbalanced but correctly linked and coloured-black chain: balance is broken. */
    {
        vpmm_rb_node_t a = { 0 }, b = { 0 }, c = { 0 };
        vpmm_rbtree_t u = { &a, 3 };
        a.k1 = 1;
        b.k1 = 2;
        c.k1 = 3;
        a.right = &b;
        b.parent = &a;
        b.right = &c;
        c.parent = &b;
        assert_true(vpmm_rb_validate(&u) > 0);
    }
    free(ref);
    free(nodes);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_single),
        cmocka_unit_test(test_insert_ascending),
        cmocka_unit_test(test_insert_descending),
        cmocka_unit_test(test_insert_random),
        cmocka_unit_test(test_remove_root_repeatedly),
        cmocka_unit_test(test_remove_leaf_and_internal),
        cmocka_unit_test(test_lower_bound),
        cmocka_unit_test(test_iteration),
        cmocka_unit_test(test_reinsert_rekeyed),
        cmocka_unit_test(test_random_stress),
        cmocka_unit_test(test_validate_detects_corruption),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
