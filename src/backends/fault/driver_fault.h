/*
 * driver_fault.h — a decorator over any vpmm_driver_t that counts calls per entry point, keeps
 * live-object counters, and makes chosen calls fail without reaching the inner driver. Tests use
 * it to check the exact driver traffic of the pool and to drive every failure path.
 *
 * Thread-safety: as every backend (driver.h rule 7), entries may be called from several threads at
 * once; a recursive mutex serialises each call with its bookkeeping (and the inner call), and the
 * vpmm_fault_* controls take it too.
 * Every vpmm_fault_* control given something other than a wrapper does nothing and returns 0/NULL.
 *
 * Arming: each entry point has one countdown and there is one "any entry" countdown. Every call
 * (close excepted) decrements its entry's countdown and the any-countdown; the call that brings
 * an armed countdown to zero fails with the armed result, without reaching the inner driver, and
 * that countdown disarms (unless armed with vpmm_fault_fail_from, which keeps failing). When both
 * fire on one call, the per-entry result wins (arming with VPMM_DRV_OK injects VPMM_DRV_ERROR:
 * a failure must look like one). An injected failure sets last_code = 999 and
 * last_call = the CUDA name of the entry; a real inner failure copies the inner's last_code and
 * last_call up. close() is never failed.
 */
#ifndef VPMM_DRIVER_FAULT_H
#define VPMM_DRIVER_FAULT_H

#include <stdint.h>

#include "driver.h"

/*
 * Wraps inner; on success the wrapper owns inner (closing the wrapper closes inner) and is named
 * "fault(<inner name>)". On failure (VPMM_DRV_INVALID for NULL arguments, VPMM_DRV_OUT_OF_MEMORY)
 * *out is NULL and the caller still owns inner.
 */
vpmm_dres_t vpmm_fault_wrap(vpmm_driver_t *inner, vpmm_driver_t **out);

/* The n-th call of entry from now (1-based) fails with result; n = 0 disarms that entry. */
void vpmm_fault_fail_nth(vpmm_driver_t *w, vpmm_drv_entry_t entry, uint64_t n, vpmm_dres_t result);

/* The n-th call of entry from now and the count - 1 calls after it fail with result (a run of
 * count failures, then disarmed); count = 0 or n = 0 disarms. */
void vpmm_fault_fail_run(vpmm_driver_t *w, vpmm_drv_entry_t entry, uint64_t n, uint64_t count,
                         vpmm_dres_t result);

/* Like vpmm_fault_fail_nth, but the n-th call and every later one fail until disarmed. */
void vpmm_fault_fail_from(vpmm_driver_t *w, vpmm_drv_entry_t entry, uint64_t n, vpmm_dres_t result);

/* The n-th call of ANY entry from now fails; n = 0 disarms. */
void vpmm_fault_fail_any_nth(vpmm_driver_t *w, uint64_t n, vpmm_dres_t result);

/* Disarms everything. */
void vpmm_fault_clear(vpmm_driver_t *w);

/* Calls of entry so far, injected failures included. */
uint64_t vpmm_fault_calls(vpmm_driver_t *w, vpmm_drv_entry_t entry);

/* Calls of all entries so far (close excluded). */
uint64_t vpmm_fault_total_calls(vpmm_driver_t *w);

/* Failures injected so far. */
uint64_t vpmm_fault_injected(vpmm_driver_t *w);

/* Objects alive through this wrapper, as the caller owns them: +1/-1 on each SUCCESSFUL
 * create/release (handles), map/unmap (mappings), reserve/free (reservations), event
 * create/destroy (events), and user_object_create / user_object_release (user_objects, the
 * caller's references: a successful graph_retain_user_object moves one to the graph, so it counts
 * -1 too). Graphs are not counted: the table has no call that destroys one. */
typedef struct vpmm_fault_live {
    int64_t handles, mappings, reservations, events;
    int64_t user_objects;
} vpmm_fault_live_t;

void vpmm_fault_live(vpmm_driver_t *w, vpmm_fault_live_t *out);

/* Zeroes the call counters and the injected count (not the live counts, not the arming). */
void vpmm_fault_reset_calls(vpmm_driver_t *w);

/* The wrapped driver (e.g. to reach vpmm_host_* controls). */
vpmm_driver_t *vpmm_fault_inner(vpmm_driver_t *w);

#endif /* VPMM_DRIVER_FAULT_H */
