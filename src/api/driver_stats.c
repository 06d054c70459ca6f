/*
 * driver_stats.c — vpmm_driver_stats and vpmm_driver_call_name: a pool's driver calls by kind,
 * read from the counting decorator that pool.c (vpmm_pool_create) put over its backend
 * (backends/count/), or VPMM_ERROR_NOT_SUPPORTED for a pool created without it. No lock: the
 * counters are atomics. Tests: tests/test_driver_stats.c.
 */
#include "api.h"
#include "driver_count.h"

/* The driver table's member names (driver.h), indexed by vpmm_driver_call_t. */
static const char *const call_names[VPMM_DRIVER_CALL_COUNT] = {
    "granularity",
    "va_reserve",
    "va_free",
    "mem_create",
    "mem_release",
    "mem_map",
    "mem_unmap",
    "set_access",
    "event_create",
    "event_destroy",
    "event_record",
    "event_query",
    "stream_wait_event",
    "capture_info",
    "mem_get_info",
    "synchronize",
    "begin_capture",
    "end_capture",
    "user_object_create",
    "graph_retain_user_object",
    "user_object_release",
    "graph_destroy",
    "revoke_access",
    "get_access",
    "stream_device",
    "mem_export",
    "mem_import",
};

const char *vpmm_driver_call_name(vpmm_driver_call_t call)
{
    return (unsigned)call < VPMM_DRIVER_CALL_COUNT ? call_names[call] : "unknown";
}

vpmm_status_t vpmm_driver_stats(const vpmm_pool_t *pool, vpmm_driver_stats_t *out_stats)
{
    if (pool == NULL || out_stats == NULL) {
        vpmm_i_set_error("vpmm_driver_stats: %s is NULL", pool == NULL ? "pool" : "out_stats");
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    if (vpmm_count_get(pool->drv, out_stats) != 0) {
        vpmm_i_set_error("vpmm_driver_stats: the pool keeps no driver statistics (create it with "
                         "config.driver_stats = 1 or VPMM_DRIVER_STATS=1)");
        return VPMM_ERROR_NOT_SUPPORTED;
    }
    return VPMM_SUCCESS;
}
