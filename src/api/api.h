/*
 * api.h — the API floor: every function vpmm.h exports is defined in src/api/ (or, for graph
 * pools, captures and checkpoints, in graph/ and checkpoint/: their own floor). A floor function
 * checks the caller's arguments, picks a backend or a layer, and calls down: the core's halves
 * are declared in src/core/entry.h. pool.c is the pool's life (the backend factory, which hands
 * graph/'s hook table to the core when built in); malloc.c a block's (vpmm_malloc routes to
 * graph/ for a captured stream, else to the shared pool); inspect.c statistics, walks, dumps and
 * checks; devices.c peers and CUDA IPC; status.c statuses and vpmm_last_error; driver_stats.c
 * and version.c; graph_off.c stands in for graph/ and checkpoint/ when VPMM_WITH_GRAPHS=OFF.
 * Nothing below src/api/ includes this header.
 */
#ifndef VPMM_API_H
#define VPMM_API_H

#include "entry.h"
#include "pool.h"

/* vpmm_i_pool_create_on with this build's graph hooks (graph/'s, or NULL without graph/): how
 * tests and the fuzzer create a pool on a driver they opened themselves. */
vpmm_status_t vpmm_a_pool_create_on(const vpmm_options_t *opt, vpmm_driver_t *drv, int owns_drv,
                                    vpmm_pool_t **out);

/* A NULL argument refused: "fn: what is NULL" as the thread's last error. */
static inline vpmm_status_t vpmm_a_null(const char *fn, const char *what)
{
    vpmm_i_set_error("%s: %s is NULL", fn, what);
    return VPMM_ERROR_INVALID_ARGUMENT;
}

#endif /* VPMM_API_H */
