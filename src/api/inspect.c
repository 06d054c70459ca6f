/*
 * inspect.c — the API floor's entry points that read a pool: vpmm_get_stats,
 * vpmm_reset_peak_stats, vpmm_pointer_info, vpmm_pool_walk, vpmm_pool_walk_segments,
 * vpmm_pool_dump, vpmm_pool_backend_name, vpmm_pool_last_driver_error, vpmm_pool_check and
 * vpmm_pool_oom_report. Each checks the caller's arguments and calls the core's half
 * (src/core/entry.h: stats.c, segment.c, check.c, report.c), which takes the pool lock.
 */
#include "api.h"

vpmm_status_t vpmm_get_stats(const vpmm_pool_t *pool, vpmm_stats_t *out)
{
    if (pool == NULL || out == NULL) {
        vpmm_i_set_error("vpmm_get_stats: %s is NULL", pool == NULL ? "pool" : "out_stats");
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    vpmm_i_get_stats(pool, out);
    return VPMM_SUCCESS;
}

vpmm_status_t vpmm_reset_peak_stats(vpmm_pool_t *pool)
{
    if (pool == NULL)
        return vpmm_a_null("vpmm_reset_peak_stats", "pool");
    vpmm_i_reset_peak_stats(pool);
    return VPMM_SUCCESS;
}

vpmm_status_t vpmm_pointer_info(const vpmm_pool_t *pool, const void *ptr,
                                vpmm_region_info_t *out_info)
{
    if (pool == NULL || out_info == NULL) {
        vpmm_i_set_error("vpmm_pointer_info: %s is NULL", pool == NULL ? "pool" : "out_info");
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    return vpmm_i_pointer_info(pool, ptr, out_info);
}

vpmm_status_t vpmm_pool_walk(const vpmm_pool_t *pool, vpmm_region_visitor_t visit, void *user)
{
    if (pool == NULL || visit == NULL) {
        vpmm_i_set_error("vpmm_pool_walk: %s is NULL", pool == NULL ? "pool" : "visit");
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    vpmm_i_pool_walk(pool, visit, user);
    return VPMM_SUCCESS;
}

vpmm_status_t vpmm_pool_walk_segments(const vpmm_pool_t *pool, vpmm_segment_visitor_t visit,
                                      void *user)
{
    if (pool == NULL || visit == NULL) {
        vpmm_i_set_error("vpmm_pool_walk_segments: %s is NULL", pool == NULL ? "pool" : "visit");
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    vpmm_i_walk_segments(pool, visit, user);
    return VPMM_SUCCESS;
}

vpmm_status_t vpmm_pool_dump(const vpmm_pool_t *pool, FILE *out)
{
    if (pool == NULL || out == NULL) {
        vpmm_i_set_error("vpmm_pool_dump: %s is NULL", pool == NULL ? "pool" : "out");
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    return vpmm_i_pool_dump(pool, out);
}

const char *vpmm_pool_backend_name(const vpmm_pool_t *pool)
{
    return pool ? pool->drv->name : NULL; /* set at creation, never changed: no lock */
}

vpmm_status_t vpmm_pool_last_driver_error(const vpmm_pool_t *pool, int *out_code,
                                          const char **out_call)
{
    if (pool == NULL || out_code == NULL || out_call == NULL) {
        vpmm_i_set_error("vpmm_pool_last_driver_error: NULL argument");
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    vpmm_i_last_driver_error(pool, out_code, out_call);
    return VPMM_SUCCESS;
}

size_t vpmm_pool_check(const vpmm_pool_t *pool, FILE *report)
{
    if (pool == NULL) {
        if (report != NULL)
            fputs("vpmm check: pool is NULL\n", report);
        return 1;
    }
    return vpmm_i_pool_check(pool, report);
}

vpmm_status_t vpmm_pool_oom_report(const vpmm_pool_t *pool, char *buf, size_t len)
{
    if (pool == NULL || (buf == NULL && len > 0)) {
        vpmm_i_set_error("vpmm_pool_oom_report: %s is NULL", pool == NULL ? "pool" : "buf");
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    if (len > 0)
        vpmm_i_oom_report_copy(pool, buf, len);
    return VPMM_SUCCESS;
}
