/*
 * lock.h — the pool lock: a futex mutex ("Futexes Are Tricky", U. Drepper, mutex 2).
 *
 * Uncontended, lock and unlock are one atomic instruction each with no library call: the pool
 * lock is taken twice per malloc/free pair, so pthread_mutex's ~50 instructions mattered on a
 * hot path of a few hundred. Contended, waiters sleep in the kernel (no spinning while the holder
 * runs a slow driver call). State: 0 unlocked, 1 locked, 2 locked and maybe waiters. Not
 * recursive. Linux only (futex), like the rest of vpmm. The slow paths live in lock.c.
 */
#ifndef VPMM_LOCK_H
#define VPMM_LOCK_H

#include <stdatomic.h>

typedef struct vpmm_lock {
    atomic_int state;
} vpmm_lock_t;

void vpmm_i_lock_wait(vpmm_lock_t *l, int seen);
void vpmm_i_lock_wake(vpmm_lock_t *l);

static inline void vpmm_lock_init(vpmm_lock_t *l)
{
    atomic_init(&l->state, 0);
}

static inline void vpmm_lock_acquire(vpmm_lock_t *l)
{
    int expected = 0;
    if (__builtin_expect(atomic_compare_exchange_strong_explicit(
                             &l->state, &expected, 1, memory_order_acquire, memory_order_relaxed),
                         1))
        return;
    vpmm_i_lock_wait(l, expected);
}

static inline void vpmm_lock_release(vpmm_lock_t *l)
{
    if (__builtin_expect(atomic_fetch_sub_explicit(&l->state, 1, memory_order_release) != 1, 0))
        vpmm_i_lock_wake(l);
}

#endif /* VPMM_LOCK_H */
