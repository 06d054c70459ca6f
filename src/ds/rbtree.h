/*
 * rbtree.h — an intrusive red-black tree ordered by a two-word key (k1, k2).
 *
 * The caller embeds a vpmm_rb_node_t in its own record and owns its memory; the tree never
 * allocates. Keys are compared inline (no callback) because the free-range trees sit on the
 * allocator's hot path: best fit is vpmm_rb_lower_bound(t, size, 0) on a tree keyed by
 * (size, address), where the address breaks ties so that keys stay unique.
 *
 * Thread safety: none. A tree belongs to one pool and is only touched under that pool's lock.
 * Invariants: listed above vpmm_rbtree_t and checked, one count per broken equation, by
 * vpmm_rb_validate(); tests/test_rbtree.c calls it after every mutation.
 */
#ifndef VPMM_RBTREE_H
#define VPMM_RBTREE_H

#include <stddef.h>
#include <stdint.h>

typedef struct vpmm_rb_node {
    struct vpmm_rb_node *parent, *left, *right;
    uint64_t k1, k2; /* ordered by k1, then k2; set before insert, constant while linked */
    int red;
} vpmm_rb_node_t;

/*
 * Invariants (NULL children count as black leaves):
 *  1. order:   for every node n, every key in n->left < n's key < every key in n->right
 *              (keys are unique, so the order is strict)
 *  2. links:   n->left->parent == n and n->right->parent == n; root->parent == NULL
 *  3. colour:  root->red == 0; n->red implies !n->left->red and !n->right->red
 *  4. balance: every path from a node down to a NULL leaf crosses the same number of black nodes
 *  5. count:   count == number of nodes reachable from root
 * 3 and 4 bound the height by 2 log2(count + 1), so every operation is O(log count).
 */
typedef struct vpmm_rbtree {
    vpmm_rb_node_t *root;
    size_t count;
} vpmm_rbtree_t;

void vpmm_rb_init(vpmm_rbtree_t *t);

/* Links n (keys already set, not in any tree). Keys must be unique within the tree. */
void vpmm_rb_insert(vpmm_rbtree_t *t, vpmm_rb_node_t *n);

/* Unlinks n, which must be in t. n's fields are left stale; n may be reused at once. */
void vpmm_rb_remove(vpmm_rbtree_t *t, vpmm_rb_node_t *n);

/* Smallest / largest node, NULL on an empty tree. */
vpmm_rb_node_t *vpmm_rb_first(const vpmm_rbtree_t *t);
vpmm_rb_node_t *vpmm_rb_last(const vpmm_rbtree_t *t);

/* In-order neighbours, NULL past either end. Amortised O(1) over a full walk. */
vpmm_rb_node_t *vpmm_rb_next(const vpmm_rb_node_t *n);
vpmm_rb_node_t *vpmm_rb_prev(const vpmm_rb_node_t *n);

/* First node with (k1, k2) >= (key1, key2); NULL if none. Best fit is lower_bound(size, 0). */
vpmm_rb_node_t *vpmm_rb_lower_bound(const vpmm_rbtree_t *t, uint64_t key1, uint64_t key2);

/*
 * Number of broken invariants (see vpmm_rbtree_t): each misordered node, bad parent link, red
 * node with a red child, node whose subtrees differ in black height, a red root and a count
 * mismatch adds one. 0 means valid. O(count); for tests and debug checks, never the hot path.
 * Safe on a corrupted tree: it only descends into children whose parent link points back, so it
 * cannot loop.
 */
size_t vpmm_rb_validate(const vpmm_rbtree_t *t);

#endif /* VPMM_RBTREE_H */
