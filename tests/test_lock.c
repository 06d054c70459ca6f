/*
 * test_lock.c — lock.h / lock.c: mutual exclusion under contention (8 threads increment a plain
 * counter under the lock; no increment may be lost), the uncontended fast path leaves the state
 * at 0, and the waiter path (state 2, futex sleep and wake) is taken under contention.
 */
#include <pthread.h>

#include "test_util.h"

#define THREADS 8
#define ROUNDS  200000

static vpmm_lock_t lock;
static unsigned long counter;
static atomic_int saw_waiters;

static void *worker(void *arg)
{
    (void)arg;
    for (int i = 0; i < ROUNDS; i++) {
        vpmm_lock_acquire(&lock);
        if (atomic_load_explicit(&lock.state, memory_order_relaxed) == 2)
            atomic_store(&saw_waiters, 1);
        counter++; /* not atomic: the lock is what makes this safe */
        vpmm_lock_release(&lock);
    }
    return NULL;
}

static void test_uncontended(void **state)
{
    (void)state;
    vpmm_lock_init(&lock);
    vpmm_lock_acquire(&lock);
    assert_int_equal(atomic_load(&lock.state), 1);
    vpmm_lock_release(&lock);
    assert_int_equal(atomic_load(&lock.state), 0);
}

static void test_contended(void **state)
{
    pthread_t t[THREADS];
    (void)state;
    vpmm_lock_init(&lock);
    counter = 0;
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, worker, NULL), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(counter, (unsigned long)THREADS * ROUNDS);
    assert_int_equal(atomic_load(&lock.state), 0);
    print_message("waiter path taken: %s\n", atomic_load(&saw_waiters) ? "yes" : "no");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uncontended),
        cmocka_unit_test(test_contended),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
