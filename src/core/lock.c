/*
 * lock.c — the contended paths of the pool lock (lock.h): sleeping and waking through futex(2).
 * Thread-safe by construction; tested in tests/test_lock.c.
 */
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lock.h"

static void futex(atomic_int *word, int op, int val)
{
    syscall(SYS_futex, (int *)word, op | FUTEX_PRIVATE_FLAG, val, NULL, NULL, 0);
}

void vpmm_i_lock_wait(vpmm_lock_t *l, int seen)
{
    /* Announce a waiter (state 2) and sleep until the holder lets go; whoever takes the lock from
     * here on leaves it at 2, so its release wakes the next sleeper. */
    if (seen != 2)
        seen = atomic_exchange_explicit(&l->state, 2, memory_order_acquire);
    while (seen != 0) {
        futex(&l->state, FUTEX_WAIT, 2);
        seen = atomic_exchange_explicit(&l->state, 2, memory_order_acquire);
    }
}

void vpmm_i_lock_wake(vpmm_lock_t *l)
{
    atomic_store_explicit(&l->state, 0, memory_order_release);
    futex(&l->state, FUTEX_WAKE, 1);
}
