/*
 * graph_test_util.c — see graph_test_util.h. Not thread-safe (tests are single-threaded).
 */
#include "graph_test_util.h"

vpmm_graph_pool_t *tgp_create(tpool_t *t)
{
    vpmm_graph_pool_t *gp = NULL;
    assert_int_equal(vpmm_graph_pool_create(t->pool, &gp), VPMM_SUCCESS);
    assert_non_null(gp);
    CHECK_POOL(t->pool);
    return gp;
}

vpmm_graph_pool_t *tgraph_open(tpool_t *t, const tpool_params_t *prm, vpmm_stream_t *s)
{
    tpool_open(t, prm);
    *s = vpmm_host_stream_create(t->host);
    return tgp_create(t);
}

vpmm_graph_pool_stats_t tgp_stats(const vpmm_graph_pool_t *gp)
{
    vpmm_graph_pool_stats_t s;
    assert_int_equal(vpmm_graph_pool_stats(gp, &s), VPMM_SUCCESS);
    return s;
}

void tcapture_begin(tpool_t *t, vpmm_graph_pool_t *gp, vpmm_stream_t s)
{
    assert_int_equal(vpmm_capture_begin(t->pool, gp, s, VPMM_STREAM_CAPTURE_GLOBAL), VPMM_SUCCESS);
    CHECK_POOL(t->pool);
}

void tcapture_register(tpool_t *t, vpmm_graph_pool_t *gp, vpmm_stream_t s)
{
    uint64_t id;
    assert_int_equal(vpmm_host_begin_capture(t->host, s, &id), VPMM_DRV_OK);
    assert_int_equal(vpmm_capture_register(t->pool, gp, s), VPMM_SUCCESS);
    CHECK_POOL(t->pool);
}

vpmm_graph_t tcapture_end(tpool_t *t, vpmm_stream_t s)
{
    vpmm_graph_t g = NULL;
    assert_int_equal(vpmm_capture_end(t->pool, s, &g), VPMM_SUCCESS);
    assert_non_null(g);
    CHECK_POOL(t->pool);
    return g;
}

void tgraph_destroy(tpool_t *t, vpmm_graph_t g)
{
    assert_int_equal(vpmm_host_graph_destroy(t->host, g), VPMM_DRV_OK);
}

vpmm_capture_status_t tcapture_status(tpool_t *t, vpmm_stream_t s, uint64_t *out_id)
{
    vpmm_capture_status_t cap = VPMM_CAPTURE_NONE;
    uint64_t id = 0;
    assert_int_equal(t->host->capture_info(t->host, s, &cap, &id, NULL), VPMM_DRV_OK);
    if (out_id != NULL)
        *out_id = id;
    return cap;
}

uint64_t tcapture_forbidden_calls(const tpool_t *t)
{
    return vpmm_fault_calls(t->fault, VPMM_DRV_EVENT_QUERY) +
           vpmm_fault_calls(t->fault, VPMM_DRV_EVENT_RECORD) +
           vpmm_fault_calls(t->fault, VPMM_DRV_STREAM_WAIT_EVENT) +
           vpmm_fault_calls(t->fault, VPMM_DRV_SYNCHRONIZE);
}

vpmm_checkpoint_t *tcheckpoint_take(vpmm_graph_pool_t *gp)
{
    vpmm_checkpoint_t *ck = NULL;
    assert_int_equal(vpmm_checkpoint_take(gp, &ck), VPMM_SUCCESS);
    assert_non_null(ck);
    return ck;
}
