/*
 * api.h — the API floor: the public entry points that pick a backend or a layer and call down.
 * create.c is the backend factory and hands graph/'s hook table (when built in) to the core;
 * malloc.c routes vpmm_malloc to graph/ (a captured stream) or to the core (the shared pool);
 * graph_off.c stands in for graph/ and checkpoint/ when VPMM_WITH_GRAPHS=OFF. Nothing below
 * src/api/ includes this header.
 */
#ifndef VPMM_API_H
#define VPMM_API_H

#include "pool.h"

/* vpmm_i_pool_create_on with this build's graph hooks (graph/'s, or NULL without graph/): how
 * tests and the fuzzer create a pool on a driver they opened themselves. */
vpmm_status_t vpmm_a_pool_create_on(const vpmm_options_t *opt, vpmm_driver_t *drv, int owns_drv,
                                    vpmm_pool_t **out);

#endif /* VPMM_API_H */
