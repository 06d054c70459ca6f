/*
 * worker.h — the background worker (worker.c).
 * The structs and their invariants are pool.h's; core.h includes every header of the core.
 */
#ifndef VPMM_WORKER_H
#define VPMM_WORKER_H

#include "pool.h"

/* Starts the pool's worker thread (pool creation, when opt.worker). */
vpmm_status_t vpmm_i_worker_start(vpmm_pool_t *p);
/* Stops and joins it (NULL-safe); the caller must not hold the pool lock. */
void vpmm_i_worker_stop(vpmm_pool_t *p);
/* Wakes it: zombies appeared (p->worker != NULL; under the pool lock or not). */
void vpmm_i_worker_kick(vpmm_pool_t *p);
/* Holds it (no pass starts; one running finishes first) or undoes one hold (vpmm_trim; tests).
 * NULL-safe; the caller must not hold the pool lock. */
void vpmm_i_worker_hold(vpmm_pool_t *p, int hold);
/* One pass on the calling thread while the worker is held (the fuzzer: unmaps at defined points,
 * so that a run replays exactly). */
void vpmm_i_worker_step(vpmm_pool_t *p);
/* Waits until it has made a whole pass after this call (tests; without the pool lock). Zombies
 * that still wait for the GPU then are left for later passes. */
void vpmm_i_worker_drain(vpmm_pool_t *p);

#endif /* VPMM_WORKER_H */
