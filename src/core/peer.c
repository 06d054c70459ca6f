/*
 * peer.c — other devices' access to the pool's memory (vpmm_pool_grant_access).
 *
 * Memory mapped with cuMemMap is reachable only by the devices cuMemSetAccess names:
 * cudaDeviceEnablePeerAccess covers cudaMalloc memory alone. So the pool keeps the list of
 * devices it granted (p->peers, in grant order) and every set_access it makes names them
 * (pages.c, vpmm_i_pages_map): growth, defragmentation's remaps and graph-pool growth all go
 * through there. A new grant walks every mapping the pool holds — the shared pool's and the graph
 * pools', live and zombie addresses (a checkpoint may make a zombie live again without a driver
 * call, arena.c) — and grants the new device on each maximal run of adjacent mappings, one
 * set_access each (the driver accepts several adjacent mappings in one call).
 *
 *     chunk:  [alloc][free ][zombie][ hole ][alloc][zombie]
 *     runs:   |------ run 1 -------|        |--- run 2 ---|
 *
 * Transactional: the runs are collected before the first driver call (the only host allocation),
 * and if the driver refuses one, the runs already granted are revoked again (revoke_access), so
 * the pool is as before. Zombies the background worker is unmapping (busy, I12) are skipped: they
 * are gone the moment it finishes, without the lock. Imported mappings (import.c) get the grant
 * through vpmm_i_import_grant.
 *
 * Under the pool lock. Invariant I14 (pool.h) is checked in check.c.
 */
#include <stdlib.h>

#include "peer.h"
#include "pool.h"
#include "share.h"

typedef struct run {
    uintptr_t va;
    size_t size;
} run_t;

/* Whether region r is mapped and may be handed to the driver now (I3, I12). */
static int mapped(const vpmm_region_t *r)
{
    return r->state != VPMM_REGION_HOLE && !r->busy;
}

/* The mapped runs of every chunk into *out (page-aligned: I2, I3); returns how many, or -1 when
 * out of host memory. With out == NULL, only counts. */
static long collect_runs(const vpmm_pool_t *p, run_t *out)
{
    const size_t pg = p->page_size;
    long n = 0;
    for (const vpmm_chunk_t *c = p->chunks; c; c = c->next) {
        const vpmm_region_t *r = c->first;
        while (r) {
            uintptr_t lo, hi = 0;
            if (!mapped(r)) {
                r = r->next;
                continue;
            }
            lo = vpmm_align_down(r->addr, pg);
            while (r && mapped(r)) {
                hi = r->addr + r->size;
                r = r->next;
            }
            hi = vpmm_align_up(hi, pg);
            if (out)
                out[n] = (run_t){ lo, hi - lo };
            n++;
        }
    }
    return n;
}

vpmm_status_t vpmm_i_peer_grant(vpmm_pool_t *p, int device)
{
    vpmm_driver_t *d = p->drv;
    vpmm_status_t st = VPMM_SUCCESS;
    long n = collect_runs(p, NULL), done;
    run_t *runs = n > 0 ? malloc((size_t)n * sizeof *runs) : NULL;
    int one[1] = { device };

    if (n > 0 && runs == NULL) {
        vpmm_i_set_error("vpmm_pool_grant_access: out of host memory");
        return VPMM_ERROR_HOST_OUT_OF_MEMORY;
    }
    if (n > 0)
        collect_runs(p, runs);
    for (done = 0; done < n; done++) {
        st = vpmm_i_drv_status(p, d->set_access(d, runs[done].va, runs[done].size, one, 1));
        if (st != VPMM_SUCCESS)
            break;
    }
    if (st == VPMM_SUCCESS)
        st = vpmm_i_import_grant(p, device);
    if (st != VPMM_SUCCESS) {
        /* Undo: the pool keeps no half-granted memory. A revoke that fails leaves that run
         * reachable by the device, which the pool does not rely on either way. */
        for (long i = 0; i < done; i++)
            (void)d->revoke_access(d, runs[i].va, runs[i].size, device);
        free(runs);
        return st;
    }
    free(runs);
    p->peers[p->npeers++] = device;
    p->peer_grants += (uint64_t)n;
    return VPMM_SUCCESS;
}

int vpmm_i_peer_granted(const vpmm_pool_t *p, int device)
{
    if (device == p->drv->device)
        return 1;
    for (size_t i = 0; i < p->npeers; i++)
        if (p->peers[i] == device)
            return 1;
    return 0;
}

uint64_t vpmm_i_peer_mask(const vpmm_pool_t *p)
{
    uint64_t mask = 0;
    for (size_t i = 0; i < p->npeers; i++)
        mask |= (uint64_t)1 << p->peers[i];
    return mask;
}
