/*
 * worker.c — the pool's background worker (VPMM_WORKER=1, off by default): a thread that unmaps
 * zombies as soon as their GPU work is done, so that slow-path mallocs find fewer to unmap.
 *
 * Why: on an H100 a remapped page costs ~26 us of cuMemSetAccess when it moves and ~16-22 us of
 * cuMemUnmap when its old address goes, per handle, whether the handles are unmapped one call
 * each or many in one call (bench/RESULTS.md, "Where the time goes"). Without a worker every
 * unmap happens in phase 0 of a later slow-path malloc, on the caller's path.
 *
 * Why off by default: measured on the H100, the driver runs one VMM call at a time across
 * threads (a thread's cuMemUnmap waits while another maps, and delays it), so in a replay —
 * mallocs back to back, the worst case — the worker took a quarter of the unmaps and the total
 * did not drop; zombies that linger also change which holes a plan sees (more remaps on some
 * traces). It can only pay where the program leaves the allocator idle between slow paths
 * (GPU-bound steps); bench/RESULTS.md, "The background worker", has the numbers.
 *
 * Phase 0 still reclaims what the worker has not taken (it skips busy zombies), so the layouts
 * stay close to the worker-less ones. Per pass (woken by vpmm_i_worker_kick after a
 * defragmentation, or by its own timer while zombies wait for the GPU):
 *   1. under the pool lock: every zombie that is due (vpmm_i_zombie_due: marker complete, arena
 *      not pinned; no event is queried while a capture is in progress) is marked busy and its
 *      mappings (whole handles) are listed; one region node per zombie is reserved, so that
 *      step 3 cannot fail;
 *   2. without the lock: cuMemUnmap of each mapping, in order; a failure stops that zombie there;
 *   3. under the lock: each zombie's unmapped prefix becomes hole (vpmm_i_zombie_unmapped, the
 *      same step phase 0 uses), the rest stays a zombie, not busy, for a later pass; chunks left
 *      empty go back.
 * A busy zombie belongs to the worker: phase 0 and an arena's dissolution skip it
 * (vpmm_i_zombie_due), vpmm_trim holds the worker (its pass finishes, none starts) so that it
 * can unmap every due zombie itself, and nothing else cuts, joins or re-states a zombie; its
 * handles cannot be released meanwhile (vpmm_trim releases only handles with no zombie mapping).
 * The books stay true whenever the lock is free (I3: a busy zombie's mappings are still listed, and
 * are still in place or about to go; I12), so vpmm_pool_check may run at any time;
 * vpmm_pool_destroy stops the thread before the teardown.
 *
 * Its CPU time is measured (CLOCK_THREAD_CPUTIME_ID after each pass) and reported
 * (vpmm_stats_t.worker_cpu_ns, worker_unmaps): moved work is shown, never hidden. A driver call
 * from this thread makes the pool's device context current here (driver_cuda.c does that on any
 * thread). Tests: tests/test_worker.c (host backend, worker on: zombies unmapped only once their
 * marker completes, data read back after remapping, the malloc path when the worker is held,
 * driver faults at its unmaps, threads under TSan, destroy with zombies waiting).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "array.h"
#include "arena.h"
#include "defrag.h"
#include "pages.h"
#include "pool.h"
#include "region.h"
#include "va.h"
#include "worker.h"

/* While zombies wait for the GPU, the worker looks again after this long, doubling up to the
 * maximum (no GPU work is quicker than a few microseconds; a step of a model takes milliseconds).
 */
#define WORKER_POLL_MIN_NS 50000L   /* 50 us */
#define WORKER_POLL_MAX_NS 5000000L /* 5 ms */

struct vpmm_worker {
    vpmm_pool_t *pool;
    pthread_t thread;
    pthread_mutex_t mu; /* guards the fields below (never held with the pool lock wanted) */
    pthread_cond_t wake, done;
    int kicked, stop, in_pass;
    unsigned held;   /* vpmm_i_worker_hold calls not yet undone (trim, tests): no pass starts */
    uint64_t passes; /* passes completed */
};

/* One mapping the pass unmaps. */
typedef struct unmap_job {
    vpmm_region_t *zombie;
    uintptr_t va;
    size_t size;
    int last; /* the zombie's last mapping */
    int ok;   /* unmapped */
} unmap_job_t;

static uint64_t thread_cpu_ns(void)
{
    struct timespec t;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0)
        return 0;
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Step 1: the due zombies, busy from now on. Returns the jobs (NULL if none or out of host
 * memory), their count in *n, and in *waiting whether some zombie still waits for the GPU. */
static unmap_job_t *collect(vpmm_pool_t *p, size_t *n, int *waiting)
{
    unmap_job_t *jobs = NULL;
    size_t cap = 0, nz = 0;
    *n = 0;
    *waiting = 0;
    for (vpmm_region_t *z = p->zombie_head; z; z = z->qnext) {
        if (z->busy)
            continue;
        /* No event query while a capture is in progress: in global capture mode one from any
         * thread could invalidate it (docs/ALGORITHM.md); zombies known complete still go. */
        if (!vpmm_i_zombie_due(p, z, p->captures == 0)) {
            *waiting |= !vpmm_i_arena_of(z)->pinned; /* a pinned arena's wait is not ours */
            continue;
        }
        if (vpmm_i_region_reserve(p, nz + 1) != VPMM_SUCCESS)
            break; /* a later pass tries again */
        for (size_t off = 0; off < z->size;) {
            const vpmm_phys_t *ph = vpmm_i_phys_at(p, z->addr + off);
            if (VPMM_GROW(jobs, cap, *n + 1, 16) != 0) {
                *waiting = 1; /* out of host memory: try again later */
                goto out;
            }
            jobs[(*n)++] = (unmap_job_t){ z, z->addr + off, ph->size, 0, 0 };
            off += ph->size;
        }
        VPMM_ASSERT(*n > 0); /* a zombie spans at least one handle: its loop made a job */
        jobs[*n - 1].last = 1;
        z->busy = 1;
        nz++;
    }
out:
    /* A zombie cut short by a failed allocation is not busy: drop its jobs. */
    while (*n > 0 && !jobs[*n - 1].last)
        (*n)--;
    return jobs;
}

/* Step 3: the books. Each zombie's unmapped prefix becomes hole; the rest stays a zombie. */
static void commit(vpmm_pool_t *p, const unmap_job_t *jobs, size_t n, uint64_t *unmaps)
{
    for (size_t i = 0; i < n;) {
        vpmm_region_t *z = jobs[i].zombie;
        size_t done = 0;
        int ok = 1;
        for (;; i++) {
            ok = ok && jobs[i].ok;
            if (ok) {
                done += jobs[i].size;
                (*unmaps)++;
            }
            if (jobs[i].last) {
                i++;
                break;
            }
        }
        z->busy = 0;
        vpmm_i_zombie_unmapped(p, z, done); /* z is not to be used after this */
    }
}

/* One pass; returns whether zombies still wait for the GPU. on_worker: it runs on the worker's
 * thread, whose CPU time it then records (vpmm_i_worker_step runs one on a caller's thread). */
static int pass(vpmm_pool_t *p, int on_worker)
{
    unmap_job_t *jobs;
    size_t n;
    int waiting;
    uint64_t unmaps = 0;

    vpmm_i_lock(p);
    jobs = collect(p, &n, &waiting);
    vpmm_i_unlock(p);
    /* Step 2, without the lock: mallocs and frees go on meanwhile. */
    for (size_t i = 0; i < n; i++) {
        const int skip = i > 0 && jobs[i - 1].zombie == jobs[i].zombie && !jobs[i - 1].ok;
        jobs[i].ok = !skip && p->drv->mem_unmap(p->drv, jobs[i].va, jobs[i].size) == VPMM_DRV_OK;
    }
    vpmm_i_lock(p);
    if (n > 0) {
        const size_t before = p->c.zombie_bytes;
        commit(p, jobs, n, &unmaps);
        p->worker_unmaps += unmaps;
        waiting |= unmaps < n; /* a driver failure: try again later */
        if (p->c.zombie_bytes < before)
            vpmm_i_chunk_trim(p); /* a chunk whose last zombie went may be empty now */
    }
    if (on_worker)
        p->worker_cpu_ns = thread_cpu_ns();
    vpmm_i_unlock(p);
    free(jobs);
    return waiting;
}

static void *worker_main(void *arg)
{
    vpmm_worker_t *w = arg;
    long poll_ns = 0; /* 0: sleep until kicked */
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while ((!w->kicked || w->held) && !w->stop) {
            if (poll_ns == 0 || w->held) {
                pthread_cond_wait(&w->wake, &w->mu);
            } else {
                struct timespec until;
                clock_gettime(CLOCK_MONOTONIC, &until);
                until.tv_nsec += poll_ns;
                until.tv_sec += until.tv_nsec / 1000000000L;
                until.tv_nsec %= 1000000000L;
                if (pthread_cond_timedwait(&w->wake, &w->mu, &until) == ETIMEDOUT && !w->held)
                    break;
            }
        }
        if (w->stop)
            break;
        w->kicked = 0;
        w->in_pass = 1;
        pthread_mutex_unlock(&w->mu);
        const int waiting = pass(w->pool, 1);
        poll_ns = !waiting       ? 0
                  : poll_ns == 0 ? WORKER_POLL_MIN_NS
                                 : VPMM_MIN(2 * poll_ns, WORKER_POLL_MAX_NS);
        pthread_mutex_lock(&w->mu);
        w->in_pass = 0;
        w->passes++;
        pthread_cond_broadcast(&w->done);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

vpmm_status_t vpmm_i_worker_start(vpmm_pool_t *p)
{
    vpmm_worker_t *w = calloc(1, sizeof *w);
    pthread_condattr_t ca;
    int rc;
    if (w == NULL) {
        vpmm_i_set_error("out of host memory for the pool's background worker");
        return VPMM_ERROR_HOST_OUT_OF_MEMORY;
    }
    w->pool = p;
    pthread_mutex_init(&w->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->wake, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&w->done, NULL);
    rc = pthread_create(&w->thread, NULL, worker_main, w);
    if (rc != 0) {
        pthread_cond_destroy(&w->done);
        pthread_cond_destroy(&w->wake);
        pthread_mutex_destroy(&w->mu);
        free(w);
        vpmm_i_set_error("could not start the pool's background worker (pthread_create: error "
                         "%d); VPMM_WORKER=0 runs without it",
                         rc);
        return VPMM_ERROR_HOST_OUT_OF_MEMORY;
    }
    p->worker = w;
    return VPMM_SUCCESS;
}

void vpmm_i_worker_stop(vpmm_pool_t *p)
{
    vpmm_worker_t *w = p->worker;
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->done);
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->mu);
    free(w);
    p->worker = NULL;
}

void vpmm_i_worker_kick(vpmm_pool_t *p)
{
    vpmm_worker_t *w = p->worker;
    pthread_mutex_lock(&w->mu);
    w->kicked = 1;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->mu);
}

void vpmm_i_worker_hold(vpmm_pool_t *p, int hold)
{
    vpmm_worker_t *w = p->worker;
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->mu);
    /* A pass already running finishes; none starts until every hold is undone. */
    while (hold && w->in_pass)
        pthread_cond_wait(&w->done, &w->mu);
    if (hold)
        w->held++;
    else if (w->held > 0)
        w->held--;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->mu);
}

void vpmm_i_worker_step(vpmm_pool_t *p)
{
    vpmm_worker_t *w = p->worker;
    pthread_mutex_lock(&w->mu);
    VPMM_ASSERT(w->held && !w->in_pass); /* the thread must not run a pass of its own */
    pthread_mutex_unlock(&w->mu);
    (void)pass(p, 0);
}

void vpmm_i_worker_drain(vpmm_pool_t *p)
{
    vpmm_worker_t *w = p->worker;
    uint64_t target;
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->mu);
    VPMM_ASSERT(!w->held); /* it would never come */
    /* A pass already running may have looked before the caller's last zombie appeared. */
    target = w->passes + (w->in_pass ? 2 : 1);
    w->kicked = 1;
    pthread_cond_signal(&w->wake);
    while (w->passes < target && !w->stop)
        pthread_cond_wait(&w->done, &w->mu);
    pthread_mutex_unlock(&w->mu);
}
