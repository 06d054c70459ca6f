/*
 * graph_test_util.h — helpers shared by the tests of graph pools, captures and checkpoints
 * (graph/, checkpoint/, src/core/arena.c), on top of test_util.h.
 *
 * Every helper asserts that its call succeeds and, where the call changes the pool, that the
 * pool's invariants hold after it (CHECK_POOL). Captures run on the host backend underneath the
 * test pool (t->host); tgp_stats and tregion_of (test_util.h) need no test pool, so the GPU tests
 * use them too. Not thread-safe (the tests are single-threaded).
 */
#ifndef VPMM_GRAPH_TEST_UTIL_H
#define VPMM_GRAPH_TEST_UTIL_H

#include "test_util.h"

/* vpmm_graph_pool_create that must succeed. */
vpmm_graph_pool_t *tgp_create(tpool_t *t);
/* A capture test's start: the test pool (tpool_open with prm), a host stream *s to capture on,
 * and a graph pool of the pool (returned). */
vpmm_graph_pool_t *tgraph_open(tpool_t *t, const tpool_params_t *prm, vpmm_stream_t *s);
/* vpmm_graph_pool_stats that must succeed. */
vpmm_graph_pool_stats_t tgp_stats(const vpmm_graph_pool_t *gp);

/* vpmm_capture_begin in global mode that must succeed (gp NULL: a graph pool of its own). */
void tcapture_begin(tpool_t *t, vpmm_graph_pool_t *gp, vpmm_stream_t s);
/* A capture begun on the host backend, as a framework begins one, and registered into gp. */
void tcapture_register(tpool_t *t, vpmm_graph_pool_t *gp, vpmm_stream_t s);
/* vpmm_capture_end that must succeed and give a graph. */
vpmm_graph_t tcapture_end(tpool_t *t, vpmm_stream_t s);
/* Destroys a captured graph on the host backend (not through vpmm_graph_destroy). */
void tgraph_destroy(tpool_t *t, vpmm_graph_t g);

/* The capture status of s, straight from the host backend (no pool call, no fault counter);
 * out_id (may be NULL) gets the capture's id. */
vpmm_capture_status_t tcapture_status(tpool_t *t, vpmm_stream_t s, uint64_t *out_id);
/* Driver calls that must never happen while a stream is being captured (they would be illegal
 * or stall it): event query and record, stream wait, synchronize. */
uint64_t tcapture_forbidden_calls(const tpool_t *t);

/* vpmm_checkpoint_take that must succeed. */
vpmm_checkpoint_t *tcheckpoint_take(vpmm_graph_pool_t *gp);

#endif /* VPMM_GRAPH_TEST_UTIL_H */
