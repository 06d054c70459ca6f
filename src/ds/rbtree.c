/*
 * rbtree.c — insert, remove, search and validation for the intrusive red-black tree.
 *
 * The algorithm is the classic one (CLRS chapter 13) without a sentinel node: NULL children are
 * the black leaves, so remove() carries the parent of the possibly-NULL node being fixed up.
 * Nothing here allocates, and keys are compared inline.
 *
 * Thread safety: none; the caller holds the lock of the structure that owns the tree.
 * Invariants: the equations above vpmm_rbtree_t in rbtree.h, checked by vpmm_rb_validate() at the
 * end of this file.
 */
#include "rbtree.h"

#include "util.h"
#include "vpmm_assert.h"

/* (a1, a2) < (b1, b2), lexicographically. */
static inline int key_less(uint64_t a1, uint64_t a2, uint64_t b1, uint64_t b2)
{
    return a1 < b1 || (a1 == b1 && a2 < b2);
}

static inline int is_red(const vpmm_rb_node_t *n)
{
    return n != NULL && n->red;
}

/* Make `repl` take `old`'s place under `parent` (or as the root). */
static inline void replace_child(vpmm_rbtree_t *t, vpmm_rb_node_t *parent, vpmm_rb_node_t *old,
                                 vpmm_rb_node_t *repl)
{
    if (parent == NULL)
        t->root = repl;
    else if (parent->left == old)
        parent->left = repl;
    else
        parent->right = repl;
}

/*
 * Rotations keep the in-order sequence (a x b y c) and change only the shape:
 *
 *        x                        y
 *       / \     rotate_left      / \
 *      a   y    ---------->     x   c
 *         / \   <----------    / \
 *        b   c  rotate_right  a   b
 */
static void rotate_left(vpmm_rbtree_t *t, vpmm_rb_node_t *x)
{
    vpmm_rb_node_t *y = x->right;
    vpmm_rb_node_t *b = y->left;

    x->right = b;
    if (b != NULL)
        b->parent = x;
    y->parent = x->parent;
    replace_child(t, x->parent, x, y);
    y->left = x;
    x->parent = y;
}

static void rotate_right(vpmm_rbtree_t *t, vpmm_rb_node_t *y)
{
    vpmm_rb_node_t *x = y->left;
    vpmm_rb_node_t *b = x->right;

    y->left = b;
    if (b != NULL)
        b->parent = y;
    x->parent = y->parent;
    replace_child(t, y->parent, y, x);
    x->right = y;
    y->parent = x;
}

void vpmm_rb_init(vpmm_rbtree_t *t)
{
    t->root = NULL;
    t->count = 0;
}

/*
 * After linking red n below red p, restore "no red node has a red child". g (p's parent) exists
 * and is black because the root is black. Cases, drawn for p == g->left (the other side mirrors):
 *
 *  1. uncle u red: push g's blackness down; the red-red problem may move up to g.
 *          g(B)               g(R)   <- continue with n = g
 *         /   \              /   \
 *       p(R)  u(R)   ->    p(B)  u(B)
 *        |                  |
 *       n(R)               n(R)
 *
 *  2. u black, n an inner child (p's right): rotate p left, turning it into case 3 with the
 *     roles of n and p swapped.
 *
 *  3. u black, n an outer child: rotate g right and swap the colours of p and g; the subtree
 *     root is black again, black heights are unchanged, and we are done.
 *            g(B)              p(B)
 *           /   \             /   \
 *         p(R)  u(B)   ->   n(R)  g(R)
 *         /                         \
 *       n(R)                        u(B)
 */
static void insert_fixup(vpmm_rbtree_t *t, vpmm_rb_node_t *n)
{
    vpmm_rb_node_t *p;

    while ((p = n->parent) != NULL && p->red) {
        vpmm_rb_node_t *g = p->parent;
        if (p == g->left) {
            vpmm_rb_node_t *u = g->right;
            if (is_red(u)) { /* case 1 */
                p->red = 0;
                u->red = 0;
                g->red = 1;
                n = g;
                continue;
            }
            if (n == p->right) { /* case 2 */
                rotate_left(t, p);
                p = n;
            }
            p->red = 0; /* case 3 */
            g->red = 1;
            rotate_right(t, g);
        } else {
            vpmm_rb_node_t *u = g->left;
            if (is_red(u)) {
                p->red = 0;
                u->red = 0;
                g->red = 1;
                n = g;
                continue;
            }
            if (n == p->left) {
                rotate_right(t, p);
                p = n;
            }
            p->red = 0;
            g->red = 1;
            rotate_left(t, g);
        }
        break;
    }
    t->root->red = 0;
}

void vpmm_rb_insert(vpmm_rbtree_t *t, vpmm_rb_node_t *n)
{
    vpmm_rb_node_t *parent = NULL;
    vpmm_rb_node_t **link = &t->root;
    const uint64_t k1 = n->k1, k2 = n->k2;

    while (*link != NULL) {
        parent = *link;
        link = key_less(k1, k2, parent->k1, parent->k2) ? &parent->left : &parent->right;
    }
    n->parent = parent;
    n->left = NULL;
    n->right = NULL;
    n->red = 1;
    *link = n;
    t->count++;
    insert_fixup(t, n);
}

/*
 * Removing a black node leaves the path through x (possibly NULL, child of xp) one black short:
 * x is "doubly black". Cases, drawn for x == xp->left (the other side mirrors); w is x's sibling,
 * which cannot be NULL because its side has black height >= 1.
 *
 *  1. w red: rotate xp left and swap the colours of xp and w; x now has a black sibling, go on
 *     with case 2, 3 or 4.
 *  2. w black with two black children: paint w red, so both sides of xp are one black short,
 *     and move the problem up to xp (done at once if xp was red: it is painted black below).
 *  3. w black, w->left red, w->right black: rotate w right and swap colours, giving case 4.
 *  4. w black, w->right red: rotate xp left; w takes xp's colour, xp and w->right turn black.
 *     The extra black on x's side fixes the shortage; the tree is valid.
 *           xp(?)                    w(?)
 *          /    \                   /    \
 *        x(B)   w(B)      ->     xp(B)   r(B)
 *              /    \            /   \
 *             l      r(R)      x(B)   l
 */
static void remove_fixup(vpmm_rbtree_t *t, vpmm_rb_node_t *x, vpmm_rb_node_t *xp)
{
    while (x != t->root && !is_red(x)) {
        if (x == xp->left) {
            vpmm_rb_node_t *w = xp->right;
            /* x is short of a black, so its sibling's side has one: w exists */
            VPMM_ASSERT(w != NULL);
            if (w->red) { /* case 1 */
                w->red = 0;
                xp->red = 1;
                rotate_left(t, xp);
                w = xp->right;
            }
            if (!is_red(w->left) && !is_red(w->right)) { /* case 2 */
                w->red = 1;
                x = xp;
                xp = x->parent;
                continue;
            }
            if (!is_red(w->right)) { /* case 3 */
                w->left->red = 0;
                w->red = 1;
                rotate_right(t, w);
                w = xp->right;
            }
            w->red = xp->red; /* case 4 */
            xp->red = 0;
            w->right->red = 0;
            rotate_left(t, xp);
        } else {
            vpmm_rb_node_t *w = xp->left;
            VPMM_ASSERT(w != NULL); /* as on the left */
            if (w->red) {
                w->red = 0;
                xp->red = 1;
                rotate_right(t, xp);
                w = xp->left;
            }
            if (!is_red(w->left) && !is_red(w->right)) {
                w->red = 1;
                x = xp;
                xp = x->parent;
                continue;
            }
            if (!is_red(w->left)) {
                w->right->red = 0;
                w->red = 1;
                rotate_left(t, w);
                w = xp->left;
            }
            w->red = xp->red;
            xp->red = 0;
            w->left->red = 0;
            rotate_right(t, xp);
        }
        x = t->root;
        break;
    }
    if (x != NULL)
        x->red = 0;
}

/*
 * The node physically unlinked is y: n itself if it has at most one child, otherwise n's
 * successor (leftmost of n->right, which has no left child). y is spliced out by lifting its
 * only child x; then, if y != n, y is moved into n's position and takes n's colour, so that the
 * colour actually lost from the tree is y's original one:
 *
 *         n                     y
 *        / \                   / \
 *       a   ...        ->     a   ...
 *           /                     /
 *          y                     x
 *           \
 *            x
 */
void vpmm_rb_remove(vpmm_rbtree_t *t, vpmm_rb_node_t *n)
{
    vpmm_rb_node_t *y = n;
    vpmm_rb_node_t *x, *xp;
    int lost_black;

    if (n->left != NULL && n->right != NULL) {
        y = n->right;
        while (y->left != NULL)
            y = y->left;
    }
    x = y->left != NULL ? y->left : y->right;
    xp = y->parent;
    lost_black = !y->red;

    if (x != NULL)
        x->parent = xp;
    replace_child(t, xp, y, x);

    if (y != n) {
        /* x's parent becomes y when y was n's direct child, since y now stands where n was. */
        if (xp == n)
            xp = y;
        y->parent = n->parent;
        y->left = n->left;
        y->right = n->right;
        y->red = n->red;
        replace_child(t, n->parent, n, y);
        if (y->left != NULL)
            y->left->parent = y;
        if (y->right != NULL)
            y->right->parent = y;
    }
    t->count--;
    if (lost_black)
        remove_fixup(t, x, xp);
}

vpmm_rb_node_t *vpmm_rb_first(const vpmm_rbtree_t *t)
{
    vpmm_rb_node_t *n = t->root;

    if (n == NULL)
        return NULL;
    while (n->left != NULL)
        n = n->left;
    return n;
}

vpmm_rb_node_t *vpmm_rb_last(const vpmm_rbtree_t *t)
{
    vpmm_rb_node_t *n = t->root;

    if (n == NULL)
        return NULL;
    while (n->right != NULL)
        n = n->right;
    return n;
}

vpmm_rb_node_t *vpmm_rb_next(const vpmm_rb_node_t *n)
{
    vpmm_rb_node_t *x = n->right;

    if (x != NULL) {
        while (x->left != NULL)
            x = x->left;
        return x;
    }
    /* Climb while we come from a right child: those ancestors are smaller than n. */
    for (x = n->parent; x != NULL && n == x->right; x = x->parent)
        n = x;
    return x;
}

vpmm_rb_node_t *vpmm_rb_prev(const vpmm_rb_node_t *n)
{
    vpmm_rb_node_t *x = n->left;

    if (x != NULL) {
        while (x->right != NULL)
            x = x->right;
        return x;
    }
    for (x = n->parent; x != NULL && n == x->left; x = x->parent)
        n = x;
    return x;
}

vpmm_rb_node_t *vpmm_rb_lower_bound(const vpmm_rbtree_t *t, uint64_t key1, uint64_t key2)
{
    vpmm_rb_node_t *n = t->root;
    vpmm_rb_node_t *best = NULL;

    /* Every node >= key is a candidate; the last one met going left is the smallest of them. */
    while (n != NULL) {
        if (key_less(n->k1, n->k2, key1, key2)) {
            n = n->right;
        } else {
            best = n;
            n = n->left;
        }
    }
    return best;
}

/*
 * Checks the subtree at n, whose keys must lie strictly between lo and hi (NULL = unbounded).
 * Adds broken equations to *bad, visited nodes to *seen, and returns the black height (NULL
 * leaves count 1). A child whose parent link is wrong counts as broken and is not entered, which
 * is what keeps a corrupted tree from sending us round a cycle.
 */
static size_t validate_node(const vpmm_rb_node_t *n, const vpmm_rb_node_t *lo,
                            const vpmm_rb_node_t *hi, size_t *bad, size_t *seen)
{
    size_t lh = 1, rh = 1;

    (*seen)++;
    if ((lo != NULL && !key_less(lo->k1, lo->k2, n->k1, n->k2)) ||
        (hi != NULL && !key_less(n->k1, n->k2, hi->k1, hi->k2)))
        (*bad)++;
    if (n->red && (is_red(n->left) || is_red(n->right)))
        (*bad)++;
    if (n->left != NULL && n->left == n->right) {
        (*bad)++;
        return 1 + !n->red;
    }
    if (n->left != NULL) {
        if (n->left->parent == n)
            lh = validate_node(n->left, lo, n, bad, seen);
        else
            (*bad)++;
    }
    if (n->right != NULL) {
        if (n->right->parent == n)
            rh = validate_node(n->right, n, hi, bad, seen);
        else
            (*bad)++;
    }
    if (lh != rh)
        (*bad)++;
    return VPMM_MAX(lh, rh) + !n->red;
}

size_t vpmm_rb_validate(const vpmm_rbtree_t *t)
{
    size_t bad = 0, seen = 0;

    if (t->root != NULL) {
        if (t->root->red)
            bad++;
        if (t->root->parent != NULL)
            bad++;
        validate_node(t->root, NULL, NULL, &bad, &seen);
    }
    if (seen != t->count)
        bad++;
    return bad;
}
