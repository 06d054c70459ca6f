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
#include "torch_adapter.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

typedef struct fixture {
    vpmm_pool_t *pool;
    vta_device_t d;
} fixture_t;

static void open_fx(fixture_t *f, size_t max_bytes)
{
    vpmm_config_t c;
    vpmm_config_init(&c);
    c.backend = VPMM_BACKEND_HOST;
    c.ignore_env = 1;
    c.va_size = (size_t)4 << 30;
    c.max_bytes = max_bytes;
    assert_int_equal(vpmm_pool_create(&c, &f->pool), VPMM_SUCCESS);
    assert_int_equal(vta_device_init(&f->d, f->pool, 0), 0);
}

static void close_fx(fixture_t *f)
{
    vta_device_fini(&f->d);
    assert_int_equal(vpmm_pool_check(f->pool, stderr), 0);
    assert_int_equal(vpmm_pool_destroy(f->pool), VPMM_SUCCESS);
}

static void *talloc(fixture_t *f, size_t size, vpmm_stream_t s, vta_pool_id_t id)
{
    void *p = NULL;
    assert_int_equal(vta_malloc(&f->d, size, s, id, &p), VPMM_SUCCESS);
    assert_non_null(p);
    return p;
}

static const vta_pool_id_t SHARED = { 0, 0 };

static void test_stats_follow_allocations(void **state)
{
    fixture_t f;
    vta_stats_t st;
    void *small, *large;
    (void)state;
    open_fx(&f, 0);
    small = talloc(&f, 1000, NULL, SHARED);    /* 1024 handed out, small */
    large = talloc(&f, 3 * MiB, NULL, SHARED); /* large */
    vta_get_stats(&f.d, &st);
    assert_int_equal(st.allocation[VTA_ALL].current, 2);
    assert_int_equal(st.allocation[VTA_SMALL].current, 1);
    assert_int_equal(st.allocation[VTA_LARGE].current, 1);
    assert_int_equal(st.allocated_bytes[VTA_ALL].current, 1024 + 3 * MiB);
    assert_int_equal(st.requested_bytes[VTA_ALL].current, 1000 + 3 * MiB);
    assert_int_equal(st.active_bytes[VTA_SMALL].current, 1024);
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
    assert_int_equal(st.allocated_bytes[VTA_LARGE].current, 0);
    assert_int_equal(st.allocated_bytes[VTA_LARGE].peak, 3 * MiB);
    assert_true(st.inactive_split_bytes[VTA_ALL].current >= (int64_t)(3 * MiB));
    /* Peaks go back to the current values; accumulated counts to 0. */
    vta_reset_peak(&f.d);
    vta_get_stats(&f.d, &st);
    assert_int_equal(st.allocated_bytes[VTA_LARGE].peak, 0);
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
    assert_int_equal(st.allocation[VTA_ALL].current, 0);
    vta_oom_message(&f.d, 8 * MiB, msg, sizeof msg);
    assert_non_null(
        strstr(msg, "CUDA out of memory. Tried to allocate 8388608 bytes on device 0."));
    assert_non_null(strstr(msg, "VPMM_MAX_BYTES"));
    close_fx(&f);
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
    assert_non_null(strstr(buf, ",\"class_fallbacks\":0,\"extra\":7}"));
    /* Too small a buffer: cut short, terminated, the full length still returned. */
    assert_int_equal(vpmm_stats_json(&s, 2, "host", "\"extra\":7", small, sizeof small), n);
    assert_int_equal(strlen(small), sizeof small - 1);
    assert_int_equal(vpmm_stats_json(&s, 2, "host", "\"extra\":7", NULL, 0), n);
    /* No extra: the object closes after the last field. */
    n = vpmm_stats_json(&s, 0, "host", NULL, buf, sizeof buf);
    assert_non_null(strstr(buf, ",\"class_fallbacks\":0}"));
    assert_int_equal(strlen(buf), n);
    assert_int_equal(vta_free(&f.d, p), VPMM_SUCCESS);
    close_fx(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stats_follow_allocations),
        cmocka_unit_test(test_oom_counted_and_explained),
        cmocka_unit_test(test_pool_ids),
        cmocka_unit_test(test_checkpoint_delta),
        cmocka_unit_test(test_snapshot),
        cmocka_unit_test(test_external_pool),
        cmocka_unit_test(test_record_stream),
        cmocka_unit_test(test_stats_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
