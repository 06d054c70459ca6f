/*
 * fuzz_threads.c — the operation fuzzer's threads (fuzz_internal.h: workers_start, run_here,
 * run_on, workers_stop_all).
 *
 * Three persistent workers besides the main thread. An operation meant for a worker is handed to
 * it and the main thread waits until it is done, so one operation runs at a time and a run is as
 * reproducible as a single-threaded one; the thread only changes what the calls mean (which
 * per-thread stream 0x2 names, which thread began a capture). The mutex hand-over orders every
 * access to the harness's state.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_internal.h"

typedef struct worker {
    pthread_t th;
    op_fn fn;   /* handed over, not done yet */
    fz_t *z;    /* what fn acts on */
    int result; /* fn's */
    int started;
} worker_t;

static worker_t workers[NTHREADS]; /* [0] is the main thread: unused */
static pthread_mutex_t work_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work_cv = PTHREAD_COND_INITIALIZER;
static int workers_stop;

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    pthread_mutex_lock(&work_mu);
    for (;;) {
        while (w->fn == NULL && !workers_stop)
            pthread_cond_wait(&work_cv, &work_mu);
        if (w->fn == NULL)
            break;
        op_fn fn = w->fn;
        fz_t *z = w->z;
        pthread_mutex_unlock(&work_mu);
        int r = fn(z);
        pthread_mutex_lock(&work_mu);
        w->result = r;
        w->fn = NULL;
        pthread_cond_broadcast(&work_cv);
    }
    pthread_mutex_unlock(&work_mu);
    return NULL;
}

void workers_start(void)
{
    for (int t = 1; t < NTHREADS; t++) {
        if (workers[t].started)
            continue;
        if (pthread_create(&workers[t].th, NULL, worker_main, &workers[t]) != 0) {
            fprintf(stderr, "fuzz_ops: cannot start worker thread %d\n", t);
            abort();
        }
        workers[t].started = 1;
    }
}

int run_here(fz_t *z, op_fn fn)
{
    worker_t *w = &workers[z->thread];
    int r;
    if (z->thread == 0)
        return fn(z);
    pthread_mutex_lock(&work_mu);
    w->z = z;
    w->fn = fn;
    pthread_cond_broadcast(&work_cv);
    while (w->fn != NULL)
        pthread_cond_wait(&work_cv, &work_mu);
    r = w->result;
    pthread_mutex_unlock(&work_mu);
    return r;
}

int run_on(fz_t *z, unsigned t, op_fn fn)
{
    unsigned was = z->thread;
    int r;
    z->thread = t;
    r = run_here(z, fn);
    z->thread = was;
    return r;
}

void workers_stop_all(void)
{
    int idle[NTHREADS] = { 0 };
    pthread_mutex_lock(&work_mu);
    workers_stop = 1;
    pthread_cond_broadcast(&work_cv);
    for (int t = 1; t < NTHREADS; t++)
        idle[t] = workers[t].started && workers[t].fn == NULL;
    pthread_mutex_unlock(&work_mu);
    for (int t = 1; t < NTHREADS; t++) {
        if (idle[t])
            pthread_join(workers[t].th, NULL);
        workers[t].started = 0;
    }
}
