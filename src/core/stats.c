/*
 * stats.c — statistics, the region walk and the human-readable dump: the core halves of
 * vpmm_get_stats, vpmm_reset_peak_stats, vpmm_pointer_info, vpmm_pool_walk, vpmm_pool_dump and
 * vpmm_pool_last_driver_error (src/api/inspect.c checks the arguments, entry.h declares them).
 *
 * Byte counters are maintained incrementally by the index (region.c) and pages (pages.c), so
 * reading them is O(1); the walk and the dump visit every region in address order. All functions
 * take the pool lock. The counters are cross-checked against the regions in check.c (I4, I5).
 */
#include <inttypes.h>
#include <stdio.h>

#include "entry.h"
#include "graph_hooks.h"
#include "peer.h"
#include "pool.h"
#include "region.h"
#include "report.h"
#include "share.h"
#include "stats.h"

void vpmm_i_get_stats(const vpmm_pool_t *pool, vpmm_stats_t *out)
{
    const vpmm_counters_t *c;
    size_t private_mapped = 0, private_live = 0;
    vpmm_i_lock(pool);
    /* Graph pools whose graphs CUDA has just let go of count as returned from now on. */
    vpmm_i_graphs_collect((vpmm_pool_t *)pool);
    c = &pool->c;
    for (const vpmm_arena_t *a = pool->privates; a; a = a->next) {
        private_mapped += a->c.allocated_bytes + a->c.free_bytes;
        private_live += a->c.live_bytes;
    }
    *out = (vpmm_stats_t){
        .live_bytes = c->live_bytes,
        .allocated_bytes = c->allocated_bytes,
        .peak_live_bytes = c->peak_live_bytes,
        .mapped_bytes = c->mapped_bytes,
        .peak_mapped_bytes = c->peak_mapped_bytes,
        .free_bytes = c->free_bytes,
        .hole_bytes = c->hole_bytes,
        .zombie_bytes = c->zombie_bytes,
        .reserved_va_bytes = c->reserved_va_bytes,
        .page_size = pool->page_size,
        .live_allocs = c->live_allocs,
        .mallocs = c->mallocs,
        .frees = c->frees,
        .defrags = c->defrags,
        .pages_remapped = c->pages_remapped,
        .pages_created = c->pages_created,
        .handles_created = c->handles_created,
        .handles = pool->phys_count,
        .pages_released = c->pages_released,
        .grows = c->grows,
        .ooms = c->ooms,
        .cross_stream_waits = c->cross_stream_waits,
        .small_bytes = pool->opt.small_bytes,
        .class_fallbacks = c->class_fallbacks,
        .va_chunks = pool->chunk_count,
        .streams = pool->stream_count,
        .graph_pools = pool->private_count,
        .private_mapped_bytes = private_mapped,
        .private_live_bytes = private_live,
        .largest_free_bytes = vpmm_i_largest_free(pool, NULL),
        .max_bytes = pool->opt.max_bytes,
        .worker = pool->worker != NULL,
        .worker_unmaps = pool->worker_unmaps,
        .worker_cpu_ns = pool->worker_cpu_ns,
        .device = pool->drv->device,
        .peers = vpmm_i_peer_mask(pool),
        .peer_grants = pool->peer_grants,
        .ipc_shared = vpmm_i_share_live(pool),
        .ipc_exports = pool->ipc_exports,
        .ipc_imports = pool->nimports,
        .ipc_imported_bytes = pool->imported_bytes,
    };
    out->utilization = c->mapped_bytes ? (double)c->live_bytes / (double)c->mapped_bytes : 1.0;
    out->fragmentation =
        c->free_bytes ? 1.0 - (double)out->largest_free_bytes / (double)c->free_bytes : 0.0;
    vpmm_i_unlock(pool);
}

void vpmm_i_reset_peak_stats(vpmm_pool_t *pool)
{
    vpmm_i_lock(pool);
    pool->c.peak_live_bytes = pool->c.live_bytes;
    pool->c.peak_mapped_bytes = pool->c.mapped_bytes;
    vpmm_i_unlock(pool);
}

void vpmm_i_region_info(const vpmm_region_t *r, vpmm_region_info_t *out)
{
    *out = (vpmm_region_info_t){
        .addr = r->addr,
        .size = r->size,
        .state = r->state,
        .stream = r->stream ? r->stream->handle : NULL,
        .ready = r->state == VPMM_REGION_FREE && r->ready,
        .requested = r->state == VPMM_REGION_ALLOCATED ? r->requested : 0,
        .chunk = r->chunk->index,
        .chunk_base = r->chunk->base,
        .pool = r->chunk->arena->id,
    };
}

vpmm_status_t vpmm_i_pointer_info(const vpmm_pool_t *pool, const void *ptr,
                                  vpmm_region_info_t *out_info)
{
    vpmm_region_t *r;
    vpmm_status_t st = VPMM_SUCCESS;
    vpmm_i_lock(pool);
    /* An allocation's start: one probe; anywhere else: the region holding it. */
    r = vpmm_hmap_get(&pool->allocs, (uintptr_t)ptr);
    if (r == NULL)
        r = vpmm_i_region_find(pool, (uintptr_t)ptr);
    if (r == NULL) {
        vpmm_i_set_error("vpmm_pointer_info: %p is not inside this pool", ptr);
        st = VPMM_ERROR_FOREIGN_POINTER;
    } else {
        vpmm_i_region_info(r, out_info);
    }
    vpmm_i_unlock(pool);
    return st;
}

void vpmm_i_pool_walk(const vpmm_pool_t *pool, vpmm_region_visitor_t visit, void *user)
{
    vpmm_i_lock(pool);
    for (const vpmm_chunk_t *c = pool->chunks; c; c = c->next) {
        for (const vpmm_region_t *r = c->first; r; r = r->next) {
            vpmm_region_info_t info;
            vpmm_i_region_info(r, &info);
            if (visit(&info, user) != 0)
                goto out;
        }
    }
out:
    vpmm_i_unlock(pool);
}

static const char *state_name(const vpmm_region_t *r)
{
    switch (r->state) {
    case VPMM_REGION_ALLOCATED:
        return "allocated";
    case VPMM_REGION_FREE:
        return r->ready ? "free ready" : "free";
    case VPMM_REGION_HOLE:
        return "hole";
    case VPMM_REGION_ZOMBIE:
        return "zombie";
    }
    return "?";
}

vpmm_status_t vpmm_i_pool_dump(const vpmm_pool_t *pool, FILE *out)
{
    char a[32], b[32], c2[32], d[32], e[32];
    const vpmm_counters_t *c;
    vpmm_i_lock(pool);
    c = &pool->c;
    fprintf(out, "vpmm pool (%s backend), page %s, %u VA chunk(s) of %s", pool->drv->name,
            vpmm_i_format_bytes(pool->page_size, a, sizeof a), pool->chunk_count,
            vpmm_i_format_bytes(pool->opt.va_size, b, sizeof b));
    if (pool->opt.small_bytes > 1) /* size classes (I13): the shared pool's small chunks */
        fprintf(out, "; blocks under %s in \"small\" chunks of their own",
                vpmm_i_format_bytes(pool->opt.small_bytes, a, sizeof a));
    fputc('\n', out);
    fprintf(out, "  %-5s %-6s %-18s %-14s %-18s %-11s %s\n", "chunk", "pool", "address", "offset",
            "size", "state", "stream");
    for (const vpmm_chunk_t *ch = pool->chunks; ch; ch = ch->next) {
        char owner[16] = "shared";
        if (ch->small)
            snprintf(owner, sizeof owner, "small");
        else if (ch->arena->priv)
            snprintf(owner, sizeof owner, "g%u", ch->arena->id);
        for (const vpmm_region_t *r = ch->first; r; r = r->next) {
            fprintf(out, "  %-5u %-6s 0x%016" PRIxPTR " +0x%-12" PRIxPTR " %-18zu %-11s", ch->index,
                    owner, r->addr, r->addr - ch->base, r->size, state_name(r));
            if (r->state == VPMM_REGION_FREE && !r->ready && r->seq == VPMM_SEQ_CAPTURE)
                fprintf(out, " %p until its capture ends", (void *)r->stream->handle);
            else if (r->state == VPMM_REGION_ALLOCATED ||
                     (r->state == VPMM_REGION_FREE && !r->ready))
                fprintf(out, " %p", (void *)r->stream->handle);
            else if (r->state == VPMM_REGION_ZOMBIE && r->stream)
                fprintf(out, " until marker %" PRIu64 " of %p", r->seq, (void *)r->stream->handle);
            if (r->state == VPMM_REGION_ALLOCATED)
                fprintf(out, " (asked %zu)", r->requested);
            fputc('\n', out);
        }
    }
    fprintf(out, "  live %s (peak %s), mapped %s (peak %s)\n",
            vpmm_i_format_bytes(c->live_bytes, a, sizeof a),
            vpmm_i_format_bytes(c->peak_live_bytes, b, sizeof b),
            vpmm_i_format_bytes(c->mapped_bytes, c2, sizeof c2),
            vpmm_i_format_bytes(c->peak_mapped_bytes, d, sizeof d));
    fprintf(out, "  free %s, holes %s, zombies %s, reserved VA %s\n",
            vpmm_i_format_bytes(c->free_bytes, a, sizeof a),
            vpmm_i_format_bytes(c->hole_bytes, b, sizeof b),
            vpmm_i_format_bytes(c->zombie_bytes, c2, sizeof c2),
            vpmm_i_format_bytes(c->reserved_va_bytes, d, sizeof d));
    fprintf(out,
            "  %" PRIu64 " live allocations, %" PRIu64 " mallocs, %" PRIu64 " frees, %" PRIu64
            " defrags, %" PRIu64 " pages remapped, %" PRIu64 " created, %" PRIu64
            " cross-stream waits\n",
            c->live_allocs, c->mallocs, c->frees, c->defrags, c->pages_remapped, c->pages_created,
            c->cross_stream_waits);
    for (const vpmm_arena_t *ar = pool->privates; ar; ar = ar->next) {
        fprintf(out, "  graph pool g%u%s: live %s (peak %s), mapped %s (peak %s), free %s\n",
                ar->id, ar->pinned ? " (pinned by graphs)" : "",
                vpmm_i_format_bytes(ar->c.live_bytes, a, sizeof a),
                vpmm_i_format_bytes(ar->c.peak_live_bytes, b, sizeof b),
                vpmm_i_format_bytes(ar->c.allocated_bytes + ar->c.free_bytes, c2, sizeof c2),
                vpmm_i_format_bytes(ar->c.peak_mapped_bytes, d, sizeof d),
                vpmm_i_format_bytes(ar->c.free_bytes, e, sizeof e));
    }
    vpmm_i_unlock(pool);
    return VPMM_SUCCESS;
}

void vpmm_i_last_driver_error(const vpmm_pool_t *pool, int *out_code, const char **out_call)
{
    vpmm_i_lock(pool);
    *out_code = pool->drv_code;
    *out_call = pool->drv_call;
    vpmm_i_unlock(pool);
}
