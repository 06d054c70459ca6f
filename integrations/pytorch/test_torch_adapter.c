/*
 * test_torch_adapter.c — the C half of vpmm's PyTorch CUDAAllocator (torch_adapter.c), on the
 * host backend, through the public API only (cmocka).
 *
 * What PyTorch's graph trees and memory APIs do, as the memo (INTERFACE.md) recorded them:
 * mempool ids referenced and released (beginAllocateToPool / releasePool), allocations routed to
 * an id's graph pool outside a capture (warm-up) and inside one, a checkpoint taken after a
 * recording and applied before the next (the CheckpointDelta: allocations freed and made live
 * again), checkPoolLiveAllocations, DeviceStats as PyTorch reads them (allocated, requested,
 * small/large, reserved, num_ooms, peaks and their reset), snapshot segments whose blocks tile
 * them and name their pool, a MemPool with its own allocator (counted, in snapshots, never served
 * by vpmm), emptyCache, recordStream, the OOM message; and the stats JSON the
 * Python side reads (stats_json.c).
 *
 * Several devices: size failures as out-of-memory with the device named, the device table (which
 * pool owns a pointer; free and recordStream routed by it whatever the stream's device), peer
 * grants recorded per device, the memory fraction. The host backend models one device per pool,
 * so several devices are separate host pools in one table; what needs a second device of one
 * node is run by test_backend.py on GPUs. CUDA IPC is test_torch_adapter_ipc.c's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "stats_json.h"
#include "test_torch_adapter_util.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

/* A host pool as device `device` of the process (ipc: config.ipc). */
static void open_dev(fixture_t *f, size_t max_bytes, int device, int ipc)
{
    vpmm_config_t c;
    vpmm_config_init(&c);
    c.backend = VPMM_BACKEND_HOST;
    c.ignore_env = 1;
    c.va_size = (size_t)4 << 30;
    c.max_bytes = max_bytes;
    c.ipc = ipc;
    assert_int_equal(vpmm_pool_create(&c, &f->pool), VPMM_SUCCESS);
    assert_int_equal(vta_device_init(&f->d, f->pool, device), 0);
}

static void open_fx(fixture_t *f, size_t max_bytes)
{
    open_dev(f, max_bytes, 0, -1);
}

static void test_stats_follow_allocations(void **state)
{
    fixture_t f;
    vta_stats_t st;
    void *small, *large;
    (void)state;
    open_fx(&f, 0);
    small = talloc(&f, 1000, NULL, SHARED); /* 1024 handed out */
    large = talloc(&f, 3 * MiB, NULL, SHARED);
    vta_get_stats(&f.d, &st);
    assert_int_equal(st.allocation[VTA_ALL].current, 2);
    /* Both live in vpmm's pages: the large pool, whatever their size (the pool they live in). */
    assert_int_equal(st.allocation[VTA_SMALL].current, 0);
    assert_int_equal(st.allocation[VTA_LARGE].current, 2);
    assert_int_equal(st.allocated_bytes[VTA_ALL].current, 1024 + 3 * MiB);
    assert_int_equal(st.requested_bytes[VTA_ALL].current, 1000 + 3 * MiB);
    assert_int_equal(st.active_bytes[VTA_LARGE].current, 1024 + 3 * MiB);
    assert_int_equal(st.active_bytes[VTA_SMALL].current, 0);
    /* Three 2 MiB pages: the small block's own (size classes), two for the large one. */
    assert_int_equal(st.reserved_bytes[VTA_ALL].current, 6 * MiB);
    assert_int_equal(st.segment[VTA_ALL].current, 3);
    assert_int_equal(st.num_device_alloc, 3);
    assert_int_equal(st.max_split_size, -1);
    assert_int_equal(vta_free(&f.d, large), VPMM_SUCCESS);
    vta_get_stats(&f.d, &st);
    assert_int_equal(st.allocation[VTA_ALL].current, 1);
    assert_int_equal(st.allocation[VTA_ALL].peak, 2);
    assert_int_equal(st.allocation[VTA_ALL].allocated, 2);
    assert_int_equal(st.allocation[VTA_ALL].freed, 1);
    assert_int_equal(st.allocated_bytes[VTA_LARGE].current, 1024);
    assert_int_equal(st.allocated_bytes[VTA_LARGE].peak, 1024 + 3 * MiB);
    assert_true(st.inactive_split_bytes[VTA_ALL].current >= (int64_t)(3 * MiB));
    assert_int_equal(st.inactive_split_bytes[VTA_LARGE].current,
                     st.inactive_split_bytes[VTA_ALL].current);
    /* Peaks go back to the current values; accumulated counts to 0. */
    vta_reset_peak(&f.d);
    vta_get_stats(&f.d, &st);
    assert_int_equal(st.allocated_bytes[VTA_LARGE].peak, 1024);
    assert_int_equal(st.allocation[VTA_ALL].peak, 1);
    vta_reset_accumulated(&f.d);
    vta_get_stats(&f.d, &st);
    assert_int_equal(st.allocation[VTA_ALL].allocated, 0);
    assert_int_equal(st.allocation[VTA_ALL].freed, 0);
    assert_int_equal(st.allocation[VTA_ALL].current, 1);
    /* emptyCache gives the large block's two free pages back. */
    assert_int_equal(vta_empty_cache(&f.d), 4 * MiB);
    vta_get_stats(&f.d, &st);
    assert_int_equal(st.reserved_bytes[VTA_ALL].current, 2 * MiB);
    assert_int_equal(st.reserved_bytes[VTA_ALL].freed, 4 * MiB);
    assert_int_equal(st.num_device_free, 2);
    /* emptyCache's synchronisation of the device, counted once per call; an accumulated count. */
    assert_int_equal(st.num_sync_all_streams, 0);
    vta_note_sync_all(&f.d);
    vta_note_sync_all(&f.d);
    vta_get_stats(&f.d, &st);
    assert_int_equal(st.num_sync_all_streams, 2);
    vta_reset_accumulated(&f.d);
    vta_get_stats(&f.d, &st);
    assert_int_equal(st.num_sync_all_streams, 0);
    /* A pointer vpmm does not know: refused, nothing counted. */
    assert_int_equal(vta_free(&f.d, (void *)0x1000), VPMM_ERROR_FOREIGN_POINTER);
    assert_int_equal(vta_free(&f.d, (char *)small + 256), VPMM_ERROR_INTERIOR_POINTER);
    assert_int_equal(vta_free(&f.d, NULL), VPMM_SUCCESS);
    assert_int_equal(vta_free(&f.d, small), VPMM_SUCCESS);
    vta_get_stats(&f.d, &st);
    assert_int_equal(st.allocation[VTA_ALL].current, 0);
    close_fx(&f);
}

static void test_oom_counted_and_explained(void **state)
{
    fixture_t f;
    vta_stats_t st;
    char msg[2048];
    void *p = (void *)1;
    (void)state;
    open_fx(&f, 4 * MiB);
    assert_int_equal(vta_malloc(&f.d, 8 * MiB, NULL, SHARED, &p), VPMM_ERROR_OUT_OF_MEMORY);
    assert_null(p);
    vta_get_stats(&f.d, &st);
    assert_int_equal(st.num_ooms, 1);
    assert_int_equal(st.num_alloc_retries, 0);
    assert_int_equal(st.allocation[VTA_ALL].current, 0);
    /* Retried after the free-memory callbacks: a retry, and an OOM again only if it fails. */
    vta_oom_retried(&f.d);
    vta_get_stats(&f.d, &st);
    assert_int_equal(st.num_ooms, 0);
    assert_int_equal(st.num_alloc_retries, 1);
    assert_int_equal(vta_malloc(&f.d, 8 * MiB, NULL, SHARED, &p), VPMM_ERROR_OUT_OF_MEMORY);
    vta_get_stats(&f.d, &st);
    assert_int_equal(st.num_ooms, 1);
    vta_oom_message(&f.d, 8 * MiB, VPMM_ERROR_OUT_OF_MEMORY, 0, 0, msg, sizeof msg);
    assert_non_null(strstr(
        msg, "CUDA out of memory. Tried to allocate 8.00 MiB (8388608 bytes) on device 0. vpmm: "));
    assert_non_null(strstr(msg, "VPMM_MAX_BYTES"));
    assert_null(strstr(msg, "total capacity")); /* no device figures given */
    /* With the device's figures (the caller's cudaMemGetInfo), PyTorch's sentence too. */
    vta_oom_message(&f.d, 8 * MiB, VPMM_ERROR_OUT_OF_MEMORY, (size_t)80 << 30, (size_t)3 << 29, msg,
                    sizeof msg);
    assert_non_null(strstr(msg, " on device 0. GPU 0 has a total capacity of 80.00 GiB of which "
                                "1.50 GiB is free. vpmm: "));
    /* Cut short, always terminated. */
    {
        char small[24];
        vta_oom_message(&f.d, 8 * MiB, VPMM_ERROR_OUT_OF_MEMORY, 0, 0, small, sizeof small);
        assert_int_equal(strlen(small), sizeof small - 1);
    }
    close_fx(&f);
}

/* A request larger than the address range vpmm reserves at once (VPMM_ERROR_SIZE_TOO_LARGE) is
 * an out-of-memory for PyTorch (native: "CUDA out of memory", whatever the size): counted, and
 * explained with the device, the size and the knob, never with an older OOM's report. */
static void test_size_too_large_is_oom(void **state)
{
    fixture_t f;
    vta_stats_t st;
    char msg[2048];
    void *p = (void *)1;
    (void)state;
    open_dev(&f, 4 * MiB, 3, -1); /* device 3 of the process; 4 GiB VA chunks, 4 MiB cap */
    assert_int_equal(vta_malloc(&f.d, 8 * MiB, NULL, SHARED, &p), VPMM_ERROR_OUT_OF_MEMORY);
    assert_int_equal(vta_malloc(&f.d, (size_t)8 << 30, NULL, SHARED, &p),
                     VPMM_ERROR_SIZE_TOO_LARGE);
    assert_null(p);
    vta_oom_message(&f.d, (size_t)8 << 30, VPMM_ERROR_SIZE_TOO_LARGE, 0, 0, msg, sizeof msg);
    assert_non_null(strstr(msg, "CUDA out of memory. Tried to allocate 8.00 GiB (8589934592 "
                                "bytes) on device 3. vpmm: the request is larger than the "
                                "address range vpmm reserves at once ("));
    assert_non_null(strstr(msg, "8589934592 bytes exceed the VA chunk size (4294967296)"));
    assert_non_null(strstr(msg, "raise VPMM_VA_SIZE"));
    assert_null(strstr(msg, "VPMM_MAX_BYTES")); /* the earlier OOM's report stays out */
    vta_get_stats(&f.d, &st);
    assert_int_equal(st.num_ooms, 2);
    assert_int_equal(st.allocation[VTA_ALL].current, 0);
    /* What is about size, and what is not. */
    assert_true(vta_is_oom(VPMM_ERROR_OUT_OF_MEMORY));
    assert_true(vta_is_oom(VPMM_ERROR_SIZE_TOO_LARGE));
    assert_false(vta_is_oom(VPMM_ERROR_INVALID_SIZE));
    assert_false(vta_is_oom(VPMM_ERROR_DRIVER));
    assert_false(vta_is_oom(VPMM_ERROR_HOST_OUT_OF_MEMORY));
    assert_int_equal(vta_malloc(&f.d, 0, NULL, SHARED, &p), VPMM_ERROR_INVALID_SIZE);
    vta_get_stats(&f.d, &st);
    assert_int_equal(st.num_ooms, 2);
    close_fx(&f);
}

/* PyTorch's format_size. */
static void test_format_size(void **state)
{
    char b[32];
    (void)state;
    assert_string_equal(vta_format_size(0, b, sizeof b), "0 bytes");
    assert_string_equal(vta_format_size(1024, b, sizeof b), "1024 bytes");
    assert_string_equal(vta_format_size(1536, b, sizeof b), "1.50 KiB");
    assert_string_equal(vta_format_size(MiB, b, sizeof b), "1024.00 KiB");
    assert_string_equal(vta_format_size(2 * MiB, b, sizeof b), "2.00 MiB");
    assert_string_equal(vta_format_size((size_t)13 << 28, b, sizeof b), "3.25 GiB");
    assert_string_equal(vta_format_size((uint64_t)1 << 46, b, sizeof b), "65536.00 GiB");
}

/* Mempool ids: references, warm-up allocations outside a capture, allocations during a capture,
 * the graph pool gone at the last reference (live allocations stay valid, in the shared pool). */
static void test_pool_ids(void **state)
{
    fixture_t f;
    const vta_pool_id_t tree = { 0, 3 }, other = { 1, 0 };
    vpmm_stream_t s = (vpmm_stream_t)(uintptr_t)0x5100;
    void *w, *c, *p = (void *)1;
    (void)state;
    open_fx(&f, 0);
    assert_int_equal(vta_pool_use_count(&f.d, tree), 0);
    assert_int_equal(vta_malloc(&f.d, 64, s, tree, &p), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vta_pool_incref(&f.d, tree), VPMM_SUCCESS); /* the tree's keep-alive */
    assert_int_equal(vta_pool_incref(&f.d, tree), VPMM_SUCCESS); /* a warm-up */
    assert_int_equal(vta_pool_use_count(&f.d, tree), 2);
    w = talloc(&f, 4000, s, tree); /* outside any capture */
    assert_int_equal(vta_pool_decref(&f.d, tree), VPMM_SUCCESS);
    assert_int_equal(vta_pool_use_count(&f.d, tree), 1);
    assert_int_equal(vta_pool_live_matches(&f.d, tree, &w, 1), 1);
    assert_int_equal(vta_pool_live_matches(&f.d, tree, NULL, 0), 0);
    assert_int_equal(vta_pool_live_matches(&f.d, other, NULL, 0), -1);

    /* A recording into the id's graph pool (PyTorch begins it with cudaStreamBeginCapture; the
     * first allocation of the capture registers it: test_graph.c; here vpmm begins it). */
    {
        vpmm_graph_pool_t *gp;
        pthread_mutex_lock(&f.d.lock);
        gp = vta_pool_graph_pool(&f.d, tree);
        pthread_mutex_unlock(&f.d.lock);
        assert_int_equal(vpmm_capture_begin(f.pool, gp, s, VPMM_STREAM_CAPTURE_THREAD_LOCAL),
                         VPMM_SUCCESS);
    }
    c = talloc(&f, 52 * MiB, s, tree);
    {
        vpmm_graph_t g;
        void *both[2] = { c, w };
        assert_int_equal(vpmm_capture_end(f.pool, s, &g), VPMM_SUCCESS);
        assert_int_equal(vta_pool_live_matches(&f.d, tree, both, 2), 1);
        assert_int_equal(vpmm_graph_destroy(f.pool, g), VPMM_SUCCESS);
    }
    /* The last reference: the graph pool goes; the allocations stay, now shared. */
    assert_int_equal(vta_pool_decref(&f.d, tree), VPMM_SUCCESS);
    assert_int_equal(vta_pool_use_count(&f.d, tree), 0);
    assert_int_equal(vta_pool_decref(&f.d, tree), VPMM_ERROR_INVALID_ARGUMENT);
    {
        vpmm_region_info_t info;
        assert_int_equal(vpmm_pointer_info(f.pool, c, &info), VPMM_SUCCESS);
        assert_int_equal(info.pool, 0);
    }
    assert_int_equal(vta_free(&f.d, w), VPMM_SUCCESS);
    assert_int_equal(vta_free(&f.d, c), VPMM_SUCCESS);
    assert_int_equal(vta_pool_incref(&f.d, SHARED), VPMM_ERROR_INVALID_ARGUMENT);
    close_fx(&f);
}

/* A graph tree: record G1 (output o1), checkpoint; record G2 (output o2); apply the checkpoint:
 * freed = {o1, o2}, allocd = {o1}; then o1 freed through raw_delete; statistics follow. */
static void test_checkpoint_delta(void **state)
{
    fixture_t f;
    const vta_pool_id_t tree = { 0, 1 };
    vpmm_stream_t s = (vpmm_stream_t)(uintptr_t)0x5200;
    vpmm_checkpoint_t *ck;
    vpmm_graph_pool_t *gp;
    vpmm_graph_t g1, g2;
    vta_stats_t st;
    void *o1, *o2, *t1, **freed, **allocd;
    size_t nf, na;
    (void)state;
    open_fx(&f, 0);
    assert_int_equal(vta_pool_incref(&f.d, tree), VPMM_SUCCESS);
    pthread_mutex_lock(&f.d.lock);
    gp = vta_pool_graph_pool(&f.d, tree);
    pthread_mutex_unlock(&f.d.lock);
    assert_int_equal(vpmm_capture_begin(f.pool, gp, s, VPMM_STREAM_CAPTURE_THREAD_LOCAL),
                     VPMM_SUCCESS);
    t1 = talloc(&f, 1 * MiB, s, tree);
    o1 = talloc(&f, 4000, s, tree);
    assert_int_equal(vta_free(&f.d, t1), VPMM_SUCCESS);
    assert_int_equal(vpmm_capture_end(f.pool, s, &g1), VPMM_SUCCESS);
    assert_int_equal(vta_checkpoint_take(&f.d, tree, &ck), VPMM_SUCCESS);
    assert_int_equal(vpmm_capture_begin(f.pool, gp, s, VPMM_STREAM_CAPTURE_THREAD_LOCAL),
                     VPMM_SUCCESS);
    o2 = talloc(&f, 2 * MiB, s, tree);
    assert_int_equal(vpmm_capture_end(f.pool, s, &g2), VPMM_SUCCESS);

    assert_int_equal(vta_checkpoint_apply(&f.d, ck, &freed, &nf, &allocd, &na), VPMM_SUCCESS);
    assert_int_equal(nf, 2);
    assert_int_equal(na, 1);
    assert_ptr_equal(allocd[0], o1);
    assert_true((freed[0] == o1 && freed[1] == o2) || (freed[0] == o2 && freed[1] == o1));
    {
        void *live[1] = { o1 };
        assert_int_equal(vta_pool_live_matches(&f.d, tree, live, 1), 1);
    }
    vta_get_stats(&f.d, &st);
    assert_int_equal(st.allocation[VTA_ALL].current, 1); /* o1 again; o2 gone */
    assert_int_equal(vta_free(&f.d, o1), VPMM_SUCCESS);  /* the dead output, by raw_delete */
    vta_get_stats(&f.d, &st);
    assert_int_equal(st.allocation[VTA_ALL].current, 0);
    assert_int_equal(st.requested_bytes[VTA_ALL].current, 0);
    free(freed);
    free(allocd);
    vpmm_checkpoint_destroy(ck);
    assert_int_equal(vpmm_graph_destroy(f.pool, g1), VPMM_SUCCESS);
    assert_int_equal(vpmm_graph_destroy(f.pool, g2), VPMM_SUCCESS);
    assert_int_equal(vta_pool_decref(&f.d, tree), VPMM_SUCCESS);
    close_fx(&f);
}

/* Snapshot segments: runs of mapped regions of one pool, blocks tiling them, the pool's id. */
static void test_snapshot(void **state)
{
    fixture_t f;
    const vta_pool_id_t tree = { 0, 7 };
    vpmm_stream_t s = (vpmm_stream_t)(uintptr_t)0x5300;
    vpmm_stream_t s2 = (vpmm_stream_t)(uintptr_t)0x5400;
    vta_segment_t *segs;
    size_t n, shared = 0, pooled = 0;
    void *a, *b, *p, *q;
    (void)state;
    open_fx(&f, 0);
    a = talloc(&f, 3000, s, SHARED);
    b = talloc(&f, 5 * MiB, s, SHARED);
    assert_int_equal(vta_pool_incref(&f.d, tree), VPMM_SUCCESS);
    p = talloc(&f, 100 * KiB, s, tree);
    assert_int_equal(vta_snapshot(&f.d, SHARED, 1, &segs, &n), VPMM_SUCCESS);
    for (size_t i = 0; i < n; i++) {
        uintptr_t at = segs[i].address;
        size_t alloc = 0;
        for (size_t j = 0; j < segs[i].nblocks; j++) {
            assert_int_equal(segs[i].blocks[j].address, at); /* blocks tile the segment */
            at += segs[i].blocks[j].size;
            alloc += segs[i].blocks[j].allocated ? segs[i].blocks[j].size : 0;
        }
        assert_int_equal(at - segs[i].address, segs[i].total_size);
        assert_int_equal(alloc, segs[i].allocated_size);
        if (segs[i].pool.second == 7)
            pooled++;
        else
            shared++;
    }
    assert_true(shared >= 1);
    assert_int_equal(pooled, 1);
    vta_snapshot_free(segs, n);
    /* Only the id's graph pool's. */
    assert_int_equal(vta_snapshot(&f.d, tree, 0, &segs, &n), VPMM_SUCCESS);
    assert_int_equal(n, 1);
    assert_int_equal(segs[0].blocks[0].address, (uintptr_t)p);
    assert_int_equal(segs[0].requested_size, 100 * KiB);
    assert_ptr_equal(segs[0].stream, s);
    vta_snapshot_free(segs, n);
    /* A second stream's allocation in the same pool, right after: a segment of its own. */
    q = talloc(&f, 100 * KiB, s2, tree);
    assert_int_equal((uintptr_t)q, (uintptr_t)p + 100 * KiB);
    assert_int_equal(vta_snapshot(&f.d, tree, 0, &segs, &n), VPMM_SUCCESS);
    assert_int_equal(n, 2);
    assert_ptr_equal(segs[0].stream, s);
    assert_ptr_equal(segs[1].stream, s2);
    assert_int_equal(segs[1].address, (uintptr_t)q);
    assert_int_equal(segs[0].pool.second, 7);
    assert_int_equal(segs[1].pool.second, 7);
    vta_snapshot_free(segs, n);
    assert_int_equal(vta_free(&f.d, q), VPMM_SUCCESS);
    assert_int_equal(vta_free(&f.d, a), VPMM_SUCCESS);
    assert_int_equal(vta_free(&f.d, b), VPMM_SUCCESS);
    assert_int_equal(vta_free(&f.d, p), VPMM_SUCCESS);
    assert_int_equal(vta_pool_decref(&f.d, tree), VPMM_SUCCESS);
    /* emptyCache: the graph pool's pages went to the shared pool, and back to the driver. */
    vta_empty_cache(&f.d);
    assert_int_equal(vta_snapshot(&f.d, SHARED, 1, &segs, &n), VPMM_SUCCESS);
    assert_int_equal(n, 0);
    vta_snapshot_free(segs, n);
    close_fx(&f);
}

/* PyTorch's rule for a snapshot (test_cuda_multigpu.py's _check_memory_stat_consistency): the
 * segments of snapshot() add up, pool type by pool type, to memory_stats()' current values —
 * allocated, reserved, active and requested bytes, allocations and active blocks; segments and
 * inactive split blocks only for segments that are not expandable. Checked on the runs snapshot
 * (the default) against vta_get_stats, after each step. */
static void check_snapshot_adds_up(fixture_t *f)
{
    enum { ALLOC_B, RESERVED_B, ACTIVE_B, REQUESTED_B, ALLOCS, ACTIVE, SEGS, SPLIT, SPLIT_B, NK };
    int64_t want[NK][VTA_NTYPES] = { { 0 } };
    int seen_seg[VTA_NTYPES] = { 0 }, seen_split[VTA_NTYPES] = { 0 };
    vta_segment_t *segs;
    vta_stats_t st;
    size_t n;
    assert_int_equal(vta_snapshot(&f->d, SHARED, 1, &segs, &n), VPMM_SUCCESS);
    for (size_t i = 0; i < n; i++) {
        const vta_segment_t *g = &segs[i];
        const int types[2] = { VTA_ALL, g->type };
        size_t requested = 0;
        assert_true(g->type == VTA_LARGE || (g->type == VTA_SMALL && !g->expandable));
        for (int k = 0; k < 2; k++) {
            const int t = types[k];
            want[ALLOC_B][t] += (int64_t)g->allocated_size;
            want[RESERVED_B][t] += (int64_t)g->total_size;
            want[ACTIVE_B][t] += (int64_t)g->allocated_size; /* SegmentInfo.active_size */
            want[REQUESTED_B][t] += (int64_t)g->requested_size;
            if (!g->expandable) {
                want[SEGS][t]++;
                seen_seg[t] = 1;
            }
            for (size_t j = 0; j < g->nblocks; j++) {
                const vta_block_t *b = &g->blocks[j];
                want[ALLOCS][t] += b->allocated && !b->continued;
                want[ACTIVE][t] += b->allocated;
                if (!b->allocated && g->nblocks > 1 && !g->expandable) {
                    want[SPLIT][t]++;
                    want[SPLIT_B][t] += (int64_t)b->size;
                    seen_split[t] = 1;
                }
            }
        }
        for (size_t j = 0; j < g->nblocks; j++)
            requested += g->blocks[j].requested_size;
        assert_int_equal(requested, g->requested_size);
    }
    vta_snapshot_free(segs, n);
    vta_get_stats(&f->d, &st);
    for (int t = 0; t < VTA_NTYPES; t++) {
        assert_int_equal(want[ALLOC_B][t], st.allocated_bytes[t].current);
        assert_int_equal(want[RESERVED_B][t], st.reserved_bytes[t].current);
        assert_int_equal(want[ACTIVE_B][t], st.active_bytes[t].current);
        assert_int_equal(want[REQUESTED_B][t], st.requested_bytes[t].current);
        assert_int_equal(want[ALLOCS][t], st.allocation[t].current);
        assert_int_equal(want[ACTIVE][t], st.active[t].current);
        /* Segments that are not expandable are external allocations' only; PyTorch's test
         * compares the count where it has one, so vpmm's handles must not be in the way. */
        if (seen_seg[t] && t == VTA_SMALL)
            assert_int_equal(want[SEGS][t], st.segment[t].current);
        if (seen_split[t]) {
            assert_int_equal(want[SPLIT][t], st.inactive_split[t].current);
            assert_int_equal(want[SPLIT_B][t], st.inactive_split_bytes[t].current);
        }
    }
}

/* A seeded mix of small and large allocations on two streams, a graph pool's, a pool with its
 * own allocator's small and large blocks, frees in random order and emptyCache: after every
 * step the snapshot adds up to the statistics (the check test_cuda_multigpu.py's test_memory_stats
 * makes after each step of its own sequence). */
static void test_snapshot_adds_up_to_stats(void **state)
{
    enum { LIVE = 48, STEPS = 600 };
    const vta_pool_id_t tree = { 0, 11 }, own = { 0, 12 };
    fixture_t f;
    void *live[LIVE] = { NULL };
    int is_ext[LIVE] = { 0 };
    unsigned rng = 12345;
    uintptr_t next_ext = (uintptr_t)0x7f0000000000;
    (void)state;
    open_fx(&f, 0);
    assert_int_equal(vta_pool_incref(&f.d, tree), VPMM_SUCCESS);
    assert_int_equal(vta_pool_incref_external(&f.d, own), VPMM_SUCCESS);
    check_snapshot_adds_up(&f);
    for (int step = 0; step < STEPS; step++) {
        const unsigned slot = (rng = rng * 1103515245u + 12345u) >> 8 & (LIVE - 1);
        const unsigned r = (rng = rng * 1103515245u + 12345u) >> 8;
        if (live[slot] != NULL) {
            size_t size;
            if (is_ext[slot])
                assert_int_equal(vta_external_remove(&f.d, live[slot], &size), 1);
            else
                assert_int_equal(vta_free(&f.d, live[slot]), VPMM_SUCCESS);
            live[slot] = NULL;
        } else {
            /* 1 B .. 64 KiB, up to 1 MiB, or up to 9 MiB; 1 in 8 external, 1 in 4 the tree's */
            const size_t cap = r % 3 == 0 ? 64 * KiB : r % 3 == 1 ? MiB : 9 * MiB;
            const size_t size = 1 + (r >> 4) % cap;
            vpmm_stream_t s = (vpmm_stream_t)(uintptr_t)(r & 16 ? 0x6100 : 0x6200);
            is_ext[slot] = (r & 0xe0) == 0;
            if (is_ext[slot]) {
                live[slot] = (void *)next_ext;
                next_ext += 16 * MiB;
                assert_int_equal(vta_external_add(&f.d, own, live[slot], size, s), VPMM_SUCCESS);
            } else {
                live[slot] = talloc(&f, size, s, (r & 0x300) == 0 ? tree : SHARED);
            }
        }
        if (step % 97 == 96)
            (void)vta_empty_cache(&f.d);
        check_snapshot_adds_up(&f);
    }
    for (unsigned i = 0; i < LIVE; i++) {
        size_t size;
        if (live[i] != NULL && is_ext[i])
            assert_int_equal(vta_external_remove(&f.d, live[i], &size), 1);
        else if (live[i] != NULL)
            assert_int_equal(vta_free(&f.d, live[i]), VPMM_SUCCESS);
    }
    check_snapshot_adds_up(&f);
    assert_int_equal(vta_pool_decref(&f.d, own), VPMM_SUCCESS);
    assert_int_equal(vta_pool_decref(&f.d, tree), VPMM_SUCCESS);
    (void)vta_empty_cache(&f.d);
    check_snapshot_adds_up(&f);
    close_fx(&f);
}

/* recordStream: vpmm's; another allocator's pointer is ignored, as the native allocator does. */
/* A MemPool with its own allocator: the C++ layer calls that allocator; the adapter counts its
 * allocations (allocation, segment, reserved, device allocs) and shows them in snapshots; its id
 * is never a vpmm graph pool, and vpmm never serves it. */
static void test_external_pool(void **state)
{
    fixture_t f;
    const vta_pool_id_t own = { 0, 7 }, tree = { 0, 8 }, unknown = { 0, 9 };
    vpmm_stream_t s = (vpmm_stream_t)(uintptr_t)0x5700;
    void *mine = (void *)(uintptr_t)0x7f0000100000, *p = NULL, *v;
    vta_stats_t before, st;
    vta_segment_t *segs;
    size_t n, size = 0;
    (void)state;
    open_fx(&f, 0);
    v = talloc(&f, 3 * MiB, s, SHARED);
    vta_get_stats(&f.d, &before);
    assert_int_equal(vta_pool_incref_external(&f.d, SHARED), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vta_pool_incref_external(&f.d, own), VPMM_SUCCESS);
    assert_int_equal(vta_pool_use_count(&f.d, own), 1);
    assert_int_equal(vta_pool_is_external(&f.d, own), 1);
    assert_int_equal(vta_pool_is_external(&f.d, SHARED), 0);
    /* one id, one kind of pool: use_mem_pool references it as it is */
    assert_int_equal(vta_pool_incref(&f.d, own), VPMM_SUCCESS);
    assert_int_equal(vta_pool_use_count(&f.d, own), 2);
    assert_int_equal(vta_pool_is_external(&f.d, own), 1);
    assert_int_equal(vta_pool_decref(&f.d, own), VPMM_SUCCESS);
    assert_int_equal(vta_pool_incref(&f.d, tree), VPMM_SUCCESS);
    assert_int_equal(vta_pool_incref_external(&f.d, tree), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vta_pool_is_external(&f.d, tree), 0);
    /* vpmm does not serve it, and only its pool's memory is counted as its */
    assert_int_equal(vta_malloc(&f.d, 64, s, own, &p), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vta_external_add(&f.d, tree, mine, MiB, s), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vta_external_add(&f.d, unknown, mine, MiB, s), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vta_external_add(&f.d, own, NULL, MiB, s), VPMM_ERROR_INVALID_ARGUMENT);
    vta_get_stats(&f.d, &st);
    assert_memory_equal(&st.allocation, &before.allocation, sizeof st.allocation);

    assert_int_equal(vta_external_add(&f.d, own, mine, 40 * MiB, s), VPMM_SUCCESS);
    vta_get_stats(&f.d, &st);
    for (int t = VTA_ALL; t <= VTA_LARGE; t += VTA_LARGE) {
        assert_int_equal(st.allocation[t].current, before.allocation[t].current + 1);
        assert_int_equal(st.allocated_bytes[t].current,
                         before.allocated_bytes[t].current + (int64_t)(40 * MiB));
        assert_int_equal(st.reserved_bytes[t].current,
                         before.reserved_bytes[t].current + (int64_t)(40 * MiB));
        assert_true(st.reserved_bytes[t].peak >= st.reserved_bytes[t].current);
        assert_int_equal(st.segment[t].current, before.segment[t].current + 1);
    }
    assert_int_equal(st.reserved_bytes[VTA_SMALL].current, 0);
    assert_int_equal(st.num_device_alloc, before.num_device_alloc + 1);

    /* snapshots: the whole device shows it; the pool's own shows only it */
    assert_int_equal(vta_snapshot(&f.d, SHARED, 1, &segs, &n), VPMM_SUCCESS);
    {
        size_t found = 0;
        for (size_t i = 0; i < n; i++) {
            if (segs[i].address != (uintptr_t)mine)
                continue;
            found++;
            assert_int_equal(segs[i].total_size, 40 * MiB);
            assert_int_equal(segs[i].pool.second, own.second);
            assert_int_equal(segs[i].nblocks, 1);
            assert_int_equal(segs[i].blocks[0].allocated, 1);
            assert_ptr_equal(segs[i].stream, s);
        }
        assert_int_equal(found, 1);
    }
    vta_snapshot_free(segs, n);
    assert_int_equal(vta_snapshot(&f.d, own, 0, &segs, &n), VPMM_SUCCESS);
    assert_int_equal(n, 1);
    assert_int_equal(segs[0].address, (uintptr_t)mine);
    vta_snapshot_free(segs, n);
    assert_int_equal(vta_snapshot(&f.d, tree, 0, &segs, &n), VPMM_SUCCESS);
    assert_int_equal(n, 0); /* the graph pool holds nothing */
    vta_snapshot_free(segs, n);

    /* the pool released while its memory is live: the allocation stays counted until freed */
    assert_int_equal(vta_pool_decref(&f.d, own), VPMM_SUCCESS);
    assert_int_equal(vta_pool_use_count(&f.d, own), 0);
    assert_int_equal(vta_external_remove(&f.d, v, &size), 0); /* vpmm's own: not external */
    assert_int_equal(vta_external_remove(&f.d, mine, &size), 1);
    assert_int_equal(size, 40 * MiB);
    assert_int_equal(vta_external_remove(&f.d, mine, &size), 0);
    vta_get_stats(&f.d, &st);
    for (int t = 0; t < VTA_NTYPES; t++) {
        assert_int_equal(st.allocation[t].current, before.allocation[t].current);
        assert_int_equal(st.reserved_bytes[t].current, before.reserved_bytes[t].current);
        assert_int_equal(st.segment[t].current, before.segment[t].current);
    }
    assert_int_equal(st.num_device_free, before.num_device_free + 1);
    vta_reset_accumulated(&f.d);
    vta_get_stats(&f.d, &st);
    assert_int_equal(st.reserved_bytes[VTA_ALL].allocated, 0);
    assert_int_equal(vta_pool_decref(&f.d, tree), VPMM_SUCCESS);
    assert_int_equal(vta_free(&f.d, v), VPMM_SUCCESS);
    close_fx(&f);
}

static void test_record_stream(void **state)
{
    fixture_t f;
    void *a;
    (void)state;
    open_fx(&f, 0);
    a = talloc(&f, 4096, NULL, SHARED);
    assert_int_equal(vta_record_stream(&f.d, a, (vpmm_stream_t)(uintptr_t)0x5400), VPMM_SUCCESS);
    assert_int_equal(vta_record_stream(&f.d, (void *)0x1000, NULL), VPMM_SUCCESS);
    assert_int_equal(vta_free(&f.d, a), VPMM_SUCCESS);
    close_fx(&f);
}

/* Three devices of a process, the last without a pool: which one owns a pointer. */
static void test_device_table_owner(void **state)
{
    fixture_t f0, f1;
    vta_device_t *devs[3];
    vpmm_region_info_t info;
    vta_stats_t s0, s1;
    void *a, *b;
    int owner = 7;
    (void)state;
    open_dev(&f0, 0, 0, -1);
    open_dev(&f1, 0, 1, -1);
    devs[0] = &f0.d;
    devs[1] = &f1.d;
    devs[2] = NULL;
    a = talloc(&f0, 3 * MiB, NULL, SHARED);
    b = talloc(&f1, 5000, NULL, SHARED);
    assert_int_equal(vta_owner(devs, 3, a, -1, &info), 0);
    assert_int_equal(info.addr, (uintptr_t)a);
    assert_int_equal(vta_owner(devs, 3, b, -1, NULL), 1);
    assert_int_equal(vta_owner(devs, 3, b, 0, &info), 1); /* a wrong hint: asked, then the rest */
    assert_int_equal(vta_owner(devs, 3, b, 2, NULL), 1);  /* a hint with no pool */
    assert_int_equal(vta_owner(devs, 3, b, 9, NULL), 1);  /* out of the table */
    assert_int_equal(vta_owner(devs, 3, (char *)b + 1000, 1, &info), 1); /* inside it */
    assert_int_equal(info.addr, (uintptr_t)b);
    assert_int_equal(info.requested, 5000);
    assert_int_equal(vta_owner(devs, 3, (void *)0x1000, 0, NULL), -1);
    assert_int_equal(vta_owner(devs, 3, NULL, 0, NULL), -1);
    assert_int_equal(vta_owner(NULL, 3, a, 0, NULL), -1);
    assert_int_equal(vta_owner(devs, 1, b, -1, NULL), -1); /* the table's first entry only */

    /* raw_delete with device 0 "current": b goes to device 1's pool, its statistics fall there. */
    assert_int_equal(vta_free_any(devs, 3, b, &owner, &info), VPMM_SUCCESS);
    assert_int_equal(owner, 1);
    assert_int_equal(info.requested, 5000);
    vta_get_stats(&f0.d, &s0);
    vta_get_stats(&f1.d, &s1);
    assert_int_equal(s0.allocation[VTA_ALL].current, 1);
    assert_int_equal(s1.allocation[VTA_ALL].current, 0);
    assert_int_equal(s1.allocation[VTA_ALL].freed, 1);
    assert_int_equal(vta_free_any(devs, 3, b, &owner, NULL), VPMM_ERROR_DOUBLE_FREE);
    assert_int_equal(owner, 1);
    assert_int_equal(vta_free_any(devs, 3, (void *)0x1000, &owner, NULL),
                     VPMM_ERROR_FOREIGN_POINTER);
    assert_int_equal(owner, -1);
    assert_int_equal(vta_free_any(devs, 3, NULL, &owner, NULL), VPMM_SUCCESS);
    assert_int_equal(vta_free_any(devs, 3, a, NULL, NULL), VPMM_SUCCESS);
    vta_get_stats(&f0.d, &s0);
    assert_int_equal(s0.allocation[VTA_ALL].current, 0);
    close_fx(&f1);
    close_fx(&f0);
}

/* recordStream with a stream of another device: recorded on the pool that holds the pointer.
 * Asking the stream's device's pool (what PyTorch's device index would pick) finds nothing there
 * and drops the record silently — the case the table's routing exists for. */
static void test_record_stream_routes_by_owner(void **state)
{
    fixture_t f0, f1;
    vta_device_t *devs[2];
    vpmm_stream_t s1 = (vpmm_stream_t)(uintptr_t)0x5900; /* "a stream of device 1" */
    vpmm_stats_t before0, before1, st;
    void *a;
    int owner = 7;
    (void)state;
    open_dev(&f0, 0, 0, -1);
    open_dev(&f1, 0, 1, -1);
    devs[0] = &f0.d;
    devs[1] = &f1.d;
    a = talloc(&f0, MiB, NULL, SHARED);
    assert_int_equal(vpmm_get_stats(f0.pool, &before0), VPMM_SUCCESS);
    assert_int_equal(vpmm_get_stats(f1.pool, &before1), VPMM_SUCCESS);
    /* By the stream's device: device 1's pool does not know a; nothing is recorded anywhere. */
    assert_int_equal(vta_record_stream(&f1.d, a, s1), VPMM_SUCCESS);
    assert_int_equal(vpmm_get_stats(f0.pool, &st), VPMM_SUCCESS);
    assert_int_equal(st.streams, before0.streams);
    /* By the pointer: device 0's pool tracks stream s1 for a from now on. */
    assert_int_equal(vta_record_stream_any(devs, 2, a, 1, s1, &owner), VPMM_SUCCESS);
    assert_int_equal(owner, 0);
    assert_int_equal(vpmm_get_stats(f0.pool, &st), VPMM_SUCCESS);
    assert_int_equal(st.streams, before0.streams + 1);
    assert_int_equal(vpmm_get_stats(f1.pool, &st), VPMM_SUCCESS);
    assert_int_equal(st.streams, before1.streams);
    /* Another allocator's pointer: ignored, as the native allocator ignores foreign DataPtrs. */
    assert_int_equal(vta_record_stream_any(devs, 2, (void *)0x1000, 0, s1, &owner), VPMM_SUCCESS);
    assert_int_equal(owner, -1);
    /* Inside vpmm but not an allocation's start: vpmm's status. */
    assert_int_equal(vta_record_stream_any(devs, 2, (char *)a + 256, 0, s1, NULL),
                     VPMM_ERROR_INTERIOR_POINTER);
    assert_int_equal(vta_free_any(devs, 2, a, &owner, NULL), VPMM_SUCCESS);
    assert_int_equal(owner, 0);
    close_fx(&f1);
    close_fx(&f0);
}

/* enablePeerAccess's vpmm half, recorded per device. The host backend models one device: its own
 * device is nothing to grant, another one does not exist there (a host backend with several
 * devices runs the rest). */
static void test_grant_peer(void **state)
{
    fixture_t f;
    vpmm_stats_t s;
    vpmm_status_t st;
    (void)state;
    open_fx(&f, 0);
    assert_int_equal(vta_grant_peer(&f.d, 0), VPMM_SUCCESS); /* the pool's own device */
    assert_int_equal(f.d.peers, 0);
    assert_int_equal(vta_grant_peer(&f.d, 40), VPMM_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(vpmm_last_error(), "device 40 does not exist"));
    assert_int_equal(vta_grant_peer(&f.d, -1), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(f.d.peers, 0);
    st = vta_grant_peer(&f.d, 1);
    if (st == VPMM_SUCCESS) { /* a backend with a second device */
        assert_int_equal(f.d.peers, 2);
        assert_int_equal(vta_grant_peer(&f.d, 1), VPMM_SUCCESS); /* again: nothing new */
        assert_int_equal(vpmm_get_stats(f.pool, &s), VPMM_SUCCESS);
        assert_int_equal(s.peers, 2);
    } else {
        assert_int_equal(st, VPMM_ERROR_INVALID_ARGUMENT);
        assert_int_equal(f.d.peers, 0);
        assert_int_equal(vpmm_get_stats(f.pool, &s), VPMM_SUCCESS);
        assert_int_equal(s.peers, 0);
        print_message("one host device: the grant to a second device is left to test_backend.py\n");
    }
    close_fx(&f);
}

/* setMemoryFraction: a cap of fraction x the device's memory; 0 is vpmm's smallest cap (a page),
 * not "no cap"; 1 lifts it; out of range refused; the OOM message says what capped it. */
static void test_memory_fraction(void **state)
{
    const size_t total = (size_t)2 << 30;
    fixture_t f;
    vpmm_stats_t s;
    char msg[2048];
    void *p;
    (void)state;
    open_dev(&f, 0, 1, -1);
    assert_true(vta_memory_fraction(&f.d) == 1.0);
    assert_int_equal(vta_set_memory_fraction(&f.d, 0.25, total), VPMM_SUCCESS);
    assert_true(vta_memory_fraction(&f.d) == 0.25);
    assert_int_equal(vpmm_get_stats(f.pool, &s), VPMM_SUCCESS);
    assert_int_equal(s.max_bytes, 512 * MiB);
    assert_int_equal(vta_malloc(&f.d, 600 * MiB, NULL, SHARED, &p), VPMM_ERROR_OUT_OF_MEMORY);
    vta_oom_message(&f.d, 600 * MiB, VPMM_ERROR_OUT_OF_MEMORY, total, total, msg, sizeof msg);
    assert_non_null(strstr(msg, "on device 1. GPU 1 has a total capacity of 2.00 GiB"));
    assert_non_null(strstr(msg, "This process may use 0.25 of device 1's memory "
                                "(torch.cuda.set_per_process_memory_fraction)."));
    p = talloc(&f, 200 * MiB, NULL, SHARED);
    assert_int_equal(vta_free(&f.d, p), VPMM_SUCCESS);
    assert_int_equal(vta_set_memory_fraction(&f.d, 0.0, total), VPMM_SUCCESS);
    assert_int_equal(vpmm_get_stats(f.pool, &s), VPMM_SUCCESS);
    assert_int_equal(s.max_bytes, s.page_size);
    assert_int_equal(vta_set_memory_fraction(&f.d, 1.0, 0), VPMM_SUCCESS);
    assert_int_equal(vpmm_get_stats(f.pool, &s), VPMM_SUCCESS);
    assert_int_equal(s.max_bytes, 0);
    assert_true(vta_memory_fraction(&f.d) == 1.0);
    assert_int_equal(vta_set_memory_fraction(&f.d, -0.1, total), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vta_set_memory_fraction(&f.d, 1.5, total), VPMM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vta_set_memory_fraction(&f.d, 0.5, 0), VPMM_ERROR_INVALID_ARGUMENT);
    assert_true(vta_memory_fraction(&f.d) == 1.0);
    close_fx(&f);
}

/* The stats as JSON: every field, the extra members, a size that tells how much is needed. */
static void test_stats_json(void **state)
{
    fixture_t f;
    vpmm_stats_t s;
    char buf[4096], small[16], field[64];
    void *p;
    size_t n;
    (void)state;
    open_fx(&f, 0);
    p = talloc(&f, 3 * MiB, NULL, (vta_pool_id_t){ 0, 0 });
    assert_int_equal(vpmm_get_stats(f.pool, &s), VPMM_SUCCESS);
    n = vpmm_stats_json(&s, 2, "host", "\"extra\":7", buf, sizeof buf);
    assert_true(n > 0 && n < sizeof buf);
    assert_int_equal(strlen(buf), n);
    assert_int_equal(buf[0], '{');
    assert_int_equal(buf[n - 1], '}');
    assert_non_null(strstr(buf, "\"device\":2,\"backend\":\"host\""));
    snprintf(field, sizeof field, "\"live_bytes\":%zu,", s.live_bytes);
    assert_non_null(strstr(buf, field));
    snprintf(field, sizeof field, "\"mapped_bytes\":%zu,", s.mapped_bytes);
    assert_non_null(strstr(buf, field));
    assert_non_null(strstr(buf, ",\"max_bytes\":0,\"worker\":0,\"worker_unmaps\":0,"));
    snprintf(field, sizeof field, ",\"small_bytes\":%zu,\"class_fallbacks\":0,", s.small_bytes);
    assert_non_null(strstr(buf, field));
    assert_non_null(strstr(buf, ",\"pool_device\":0,\"peers\":0,\"peer_devices\":[],"
                                "\"peer_grants\":0,\"ipc_shared\":0,\"ipc_exports\":0,"
                                "\"ipc_imports\":0,\"ipc_imported_bytes\":0,\"extra\":7}"));
    /* The peers as a mask and as a list (a pool of device 2 that devices 0, 3 and 63 reach). */
    s.device = 2;
    s.peers = ((uint64_t)1 << 0) | ((uint64_t)1 << 3) | ((uint64_t)1 << 63);
    s.ipc_exports = 5;
    (void)vpmm_stats_json(&s, 2, "host", NULL, buf, sizeof buf);
    assert_non_null(strstr(buf, ",\"pool_device\":2,\"peers\":9223372036854775817,"
                                "\"peer_devices\":[0,3,63],"));
    assert_non_null(strstr(buf, ",\"ipc_exports\":5,"));
    assert_int_equal(vpmm_get_stats(f.pool, &s), VPMM_SUCCESS);
    /* Too small a buffer: cut short, terminated, the full length still returned. */
    assert_int_equal(vpmm_stats_json(&s, 2, "host", "\"extra\":7", small, sizeof small), n);
    assert_int_equal(strlen(small), sizeof small - 1);
    assert_int_equal(vpmm_stats_json(&s, 2, "host", "\"extra\":7", NULL, 0), n);
    /* No extra: the object closes after the last field. */
    n = vpmm_stats_json(&s, 0, "host", NULL, buf, sizeof buf);
    assert_non_null(strstr(buf, ",\"ipc_imported_bytes\":0}"));
    assert_int_equal(strlen(buf), n);
    assert_int_equal(vta_free(&f.d, p), VPMM_SUCCESS);
    close_fx(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stats_follow_allocations),
        cmocka_unit_test(test_oom_counted_and_explained),
        cmocka_unit_test(test_size_too_large_is_oom),
        cmocka_unit_test(test_format_size),
        cmocka_unit_test(test_pool_ids),
        cmocka_unit_test(test_checkpoint_delta),
        cmocka_unit_test(test_snapshot),
        cmocka_unit_test(test_snapshot_adds_up_to_stats),
        cmocka_unit_test(test_external_pool),
        cmocka_unit_test(test_record_stream),
        cmocka_unit_test(test_device_table_owner),
        cmocka_unit_test(test_record_stream_routes_by_owner),
        cmocka_unit_test(test_grant_peer),
        cmocka_unit_test(test_memory_fraction),
        cmocka_unit_test(test_stats_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
