/*
 * entry.h — the core halves of the public entry points: what src/api/ calls once it has checked
 * the caller's arguments (non-NULL pool and outputs, sizes in range). Each takes the pool lock
 * itself and sets vpmm_last_error() where it fails. Every exported function is defined on the API
 * floor (src/api/); this is the line below it. graph/ and checkpoint/ have their own entry points
 * (internal.h).
 */
#ifndef VPMM_ENTRY_H
#define VPMM_ENTRY_H

#include <stdio.h>

#include "vpmm.h"

/* Pool (pool.c, options.c, trim.c, segment.c). */
void vpmm_i_config_defaults(vpmm_config_t *config);
vpmm_status_t vpmm_i_pool_destroy(vpmm_pool_t *pool);
vpmm_status_t vpmm_i_stream_release(vpmm_pool_t *pool, vpmm_stream_t stream);
vpmm_status_t vpmm_i_trim(vpmm_pool_t *pool, size_t target_bytes, size_t *out_released);
void vpmm_i_set_max_bytes(vpmm_pool_t *pool, size_t max_bytes); /* 0, or at least one page */
void vpmm_i_set_segment_hook(vpmm_pool_t *pool, vpmm_segment_hook_t hook, void *user);

/* Blocks (pool.c, uses.c). ptr is not NULL. */
vpmm_status_t vpmm_i_free(vpmm_pool_t *pool, void *ptr);
vpmm_status_t vpmm_i_record_stream(vpmm_pool_t *pool, void *ptr, vpmm_stream_t stream);

/* Inspection (stats.c, segment.c, check.c, report.c). */
void vpmm_i_get_stats(const vpmm_pool_t *pool, vpmm_stats_t *out);
void vpmm_i_reset_peak_stats(vpmm_pool_t *pool);
vpmm_status_t vpmm_i_pointer_info(const vpmm_pool_t *pool, const void *ptr,
                                  vpmm_region_info_t *out_info);
void vpmm_i_pool_walk(const vpmm_pool_t *pool, vpmm_region_visitor_t visit, void *user);
void vpmm_i_walk_segments(const vpmm_pool_t *pool, vpmm_segment_visitor_t visit, void *user);
vpmm_status_t vpmm_i_pool_dump(const vpmm_pool_t *pool, FILE *out);
void vpmm_i_last_driver_error(const vpmm_pool_t *pool, int *out_code, const char **out_call);
size_t vpmm_i_pool_check(const vpmm_pool_t *pool, FILE *report);
void vpmm_i_oom_report_copy(const vpmm_pool_t *pool, char *buf, size_t len); /* len > 0 */

#endif /* VPMM_ENTRY_H */
