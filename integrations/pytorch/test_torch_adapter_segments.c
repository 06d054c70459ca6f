/*
 * test_torch_adapter_segments.c — the segments of vpmm's PyTorch CUDAAllocator
 * (torch_adapter_segments.c) on the host backend, through the public API only (cmocka).
 *
 * ProcessGroupNCCL registers the segments a snapshot lists when it creates a communicator and
 * every SEGMENT_ALLOC after, and deregisters each at its SEGMENT_FREE, by address (one never
 * registered raises). So the tests keep the trackers' view — a mirror built from the sink's
 * events alone, which refuses what PyTorch or NCCL would (a segment reported twice, the end of
 * one never reported, a size or mempool id that changed, overlapping segments) — and check that
 * the handle-mode snapshot lists exactly the mirror's segments, with the same mempool ids, after
 * every step: growth, remapping defragmentation, trim, a mempool id's graph pool (warm-up growth,
 * a capture, a checkpoint applied, its last reference and the hand-over of its pages), in fixed
 * cases and a seeded random run. Also: blocks tile each segment; an allocation that spans several
 * handles is one allocated block and continued parts (requested bytes split among them); a sink
 * attached late hears what comes after and the snapshot lists the rest; the names of released
 * graph pools go once their segments have; the VPMM_TORCH_SEGMENTS values.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "test_torch_adapter_util.h"

#define MiB    ((size_t)1 << 20)
#define MAXSEG 1024

/* A host pool (2 MiB pages, one page per handle, no size classes) as device `device`. */
static void open_dev(fixture_t *f, size_t max_bytes, int device)
{
    vpmm_config_t c;
    vpmm_config_init(&c);
    c.backend = VPMM_BACKEND_HOST;
    c.ignore_env = 1;
    c.va_size = (size_t)4 << 30;
    c.max_bytes = max_bytes;
    c.small_bytes = 1;
    assert_int_equal(vpmm_pool_create(&c, &f->pool), VPMM_SUCCESS);
    assert_int_equal(vta_device_init(&f->d, f->pool, device), 0);
}

static vpmm_graph_pool_t *graph_pool_of(fixture_t *f, vta_pool_id_t id)
{
    vpmm_graph_pool_t *gp;
    pthread_mutex_lock(&f->d.lock);
    gp = vta_pool_graph_pool(&f->d, id);
    pthread_mutex_unlock(&f->d.lock);
    assert_non_null(gp);
    return gp;
}

static int id_eq(vta_pool_id_t a, vta_pool_id_t b)
{
    return a.first == b.first && a.second == b.second;
}

/* ---- the trackers' view ---------------------------------------------------------------------- */

typedef struct mseg {
    uintptr_t addr;
    size_t size;
    vta_pool_id_t pool;
} mseg_t;

typedef struct mirror {
    mseg_t seg[MAXSEG];
    size_t n;
    int device;
    unsigned mapped, unmapped;
    unsigned of_ids; /* events of a mempool id's segment */
    int broken;      /* an event PyTorch or NCCL would refuse */
} mirror_t;

static long find(const mirror_t *m, uintptr_t addr)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->seg[i].addr == addr)
            return (long)i;
    return -1;
}

static void sink(void *user, int device, vpmm_segment_event_t ev, uintptr_t addr, size_t size,
                 vta_pool_id_t pool)
{
    mirror_t *m = user;
    long i = find(m, addr);
    if (device != m->device)
        m->broken++;
    m->of_ids += !id_eq(pool, SHARED);
    if (ev == VPMM_SEGMENT_MAPPED) {
        m->mapped++;
        if (i >= 0 || m->n == MAXSEG) {
            m->broken++;
            return;
        }
        for (size_t k = 0; k < m->n; k++)
            if (addr < m->seg[k].addr + m->seg[k].size && m->seg[k].addr < addr + size)
                m->broken++;
        m->seg[m->n++] = (mseg_t){ addr, size, pool };
    } else {
        m->unmapped++;
        if (i < 0 || m->seg[i].size != size || !id_eq(m->seg[i].pool, pool)) {
            m->broken++;
            return;
        }
        m->seg[i] = m->seg[--m->n];
    }
}

static void attach(fixture_t *f, mirror_t *m)
{
    memset(m, 0, sizeof *m);
    m->device = f->d.device;
    assert_int_equal(vta_segments_attach(&f->d, sink, m), VPMM_SUCCESS);
}

/* Blocks tile g; allocated and requested sizes are their blocks' sums. */
static void check_blocks(const vta_segment_t *g)
{
    uintptr_t at = g->address;
    size_t alloc = 0, req = 0;
    for (size_t j = 0; j < g->nblocks; j++) {
        const vta_block_t *b = &g->blocks[j];
        assert_int_equal(b->address, at);
        assert_true(b->size > 0);
        assert_true(b->requested_size <= b->size);
        assert_true(b->allocated || (!b->continued && b->requested_size == 0));
        at += b->size;
        alloc += b->allocated ? b->size : 0;
        req += b->requested_size;
    }
    assert_int_equal(at - g->address, g->total_size);
    assert_int_equal(alloc, g->allocated_size);
    assert_int_equal(req, g->requested_size);
}

/* The handle-mode snapshot lists exactly the mirror's segments (address, size, mempool id), in
 * address order, holding every mapped byte; each mempool id's own snapshot, its segments. */
static void agree(fixture_t *f, const mirror_t *m)
{
    vta_segment_t *segs;
    size_t n, bytes = 0;
    vpmm_stats_t s = pstats(f);
    assert_int_equal(vpmm_pool_check(f->pool, stderr), 0);
    assert_int_equal(m->broken, 0);
    assert_int_equal(vta_snapshot_handles(&f->d, SHARED, 1, &segs, &n), VPMM_SUCCESS);
    assert_int_equal(n, m->n);
    for (size_t i = 0; i < n; i++) {
        long k = find(m, segs[i].address);
        assert_true(k >= 0);
        assert_int_equal(segs[i].total_size, m->seg[k].size);
        assert_true(id_eq(segs[i].pool, m->seg[k].pool));
        if (i > 0)
            assert_true(segs[i].address >= segs[i - 1].address + segs[i - 1].total_size);
        check_blocks(&segs[i]);
        bytes += segs[i].total_size;
    }
    vta_snapshot_free(segs, n);
    assert_int_equal(bytes, s.mapped_bytes);
    assert_int_equal(n, s.handles);
    /* Per mempool id (registerMemPool's snapshot(pool)). */
    for (size_t i = 0; i < m->n; i++) {
        size_t want = 0;
        if (id_eq(m->seg[i].pool, SHARED))
            continue;
        for (size_t k = 0; k < m->n; k++)
            want += id_eq(m->seg[k].pool, m->seg[i].pool);
        assert_int_equal(vta_snapshot_handles(&f->d, m->seg[i].pool, 0, &segs, &n), VPMM_SUCCESS);
        assert_int_equal(n, want);
        for (size_t k = 0; k < n; k++)
            assert_true(id_eq(segs[k].pool, m->seg[i].pool));
        vta_snapshot_free(segs, n);
    }
}

/* The blocks of the allocation at p (size bytes asked) across a handle-mode snapshot: one
 * allocated block at p, its other parts continued, the parts' sizes its rounded size and their
 * requested sizes its request. *parts gets how many blocks it has. */
static void check_parts(fixture_t *f, void *p, size_t size, size_t *parts)
{
    vta_segment_t *segs;
    size_t n, heads = 0, bytes = 0, req = 0;
    uintptr_t a = (uintptr_t)p;
    vpmm_region_info_t info;
    assert_int_equal(vpmm_pointer_info(f->pool, p, &info), VPMM_SUCCESS);
    *parts = 0;
    assert_int_equal(vta_snapshot_handles(&f->d, SHARED, 1, &segs, &n), VPMM_SUCCESS);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < segs[i].nblocks; j++) {
            const vta_block_t *b = &segs[i].blocks[j];
            if (!b->allocated || b->address < a || b->address >= a + info.size)
                continue;
            (*parts)++;
            heads += !b->continued;
            assert_true(b->continued == (b->address != a));
            bytes += b->size;
            req += b->requested_size;
        }
    vta_snapshot_free(segs, n);
    assert_int_equal(heads, 1);
    assert_int_equal(bytes, info.size);
    assert_int_equal(req, size);
}

/* ---- cases ----------------------------------------------------------------------------------- */

/* Growth, remapping defragmentation and trim: each change reported once, in order (a moved
 * handle is reported gone from its old address before it appears at its new one). */
static void test_shared_pool_events(void **state)
{
    fixture_t f;
    mirror_t m;
    void *x[6], *big;
    (void)state;
    open_dev(&f, 12 * MiB, 1);
    attach(&f, &m);
    for (int i = 0; i < 6; i++) {
        x[i] = talloc(&f, 2 * MiB, NULL, SHARED);
        agree(&f, &m);
    }
    assert_int_equal(m.mapped, 6);
    for (int i = 0; i < 6; i += 2)
        assert_int_equal(vta_free(&f.d, x[i]), VPMM_SUCCESS);
    big = talloc(&f, 6 * MiB, NULL, SHARED); /* at the cap: remaps the three free pages */
    agree(&f, &m);
    assert_int_equal(m.unmapped, 3);
    assert_int_equal(m.mapped, 9);
    assert_int_equal(vta_free(&f.d, big), VPMM_SUCCESS);
    assert_int_equal(vta_empty_cache(&f.d), 6 * MiB);
    agree(&f, &m);
    assert_int_equal(m.n, 3);
    for (int i = 1; i < 6; i += 2)
        assert_int_equal(vta_free(&f.d, x[i]), VPMM_SUCCESS);
    (void)vta_empty_cache(&f.d);
    agree(&f, &m);
    assert_int_equal(m.n, 0);
    /* Detached: no more events; the snapshot still lists what exists. */
    assert_int_equal(vta_segments_attach(&f.d, NULL, NULL), VPMM_SUCCESS);
    x[0] = talloc(&f, 2 * MiB, NULL, SHARED);
    assert_int_equal(m.mapped, 9);
    assert_int_equal(vta_free(&f.d, x[0]), VPMM_SUCCESS);
    close_fx(&f);
}

/* An allocation over three handles: one allocated block and two continued parts in the handle
 * segments; one block in the runs. */
static void test_allocation_over_handles(void **state)
{
    fixture_t f;
    mirror_t m;
    vta_segment_t *segs;
    size_t n, parts;
    void *a, *b;
    (void)state;
    open_dev(&f, 0, 0);
    attach(&f, &m);
    a = talloc(&f, 1000, NULL, SHARED);
    b = talloc(&f, 5 * MiB - 100, NULL, SHARED); /* from a's page on: 3 handles */
    agree(&f, &m);
    check_parts(&f, a, 1000, &parts);
    assert_int_equal(parts, 1);
    check_parts(&f, b, 5 * MiB - 100, &parts);
    assert_int_equal(parts, 3);
    assert_int_equal(vta_snapshot_handles(&f.d, SHARED, 1, &segs, &n), VPMM_SUCCESS);
    assert_int_equal(n, 3);
    assert_int_equal(segs[0].blocks[0].address, (uintptr_t)a);
    assert_false(segs[0].blocks[0].continued);
    assert_int_equal(segs[0].blocks[0].requested_size, 1000);
    assert_int_equal(segs[2].blocks[segs[2].nblocks - 1].allocated, 0); /* b's tail page */
    vta_snapshot_free(segs, n);
    /* Runs: one segment, each allocation one block. */
    assert_int_equal(vta_snapshot(&f.d, SHARED, 1, &segs, &n), VPMM_SUCCESS);
    assert_int_equal(n, 1);
    assert_int_equal(segs[0].total_size, 6 * MiB);
    assert_int_equal(segs[0].blocks[1].address, (uintptr_t)b);
    assert_int_equal(segs[0].blocks[1].requested_size, 5 * MiB - 100);
    assert_false(segs[0].blocks[1].continued);
    vta_snapshot_free(segs, n);
    assert_int_equal(vta_free(&f.d, b), VPMM_SUCCESS);
    assert_int_equal(vta_free(&f.d, a), VPMM_SUCCESS);
    agree(&f, &m);
    close_fx(&f);
}

/* A mempool id's graph pool: warm-up growth, a capture, a checkpoint applied; its segments carry
 * the id in events and snapshots; at its last reference (graphs gone) its pages go to the shared
 * pool — reported gone under the id, back under {0,0} — and its name goes at the next graph
 * pool's creation. */
static void test_graph_pool_events(void **state)
{
    fixture_t f;
    mirror_t m;
    const vta_pool_id_t tree = { 0, 7 }, next = { 2, 0 };
    vpmm_stream_t s = (vpmm_stream_t)(uintptr_t)0x5300;
    vpmm_checkpoint_t *ck;
    vpmm_graph_t g1, g2;
    void *w, *o1, *o2, *big, **freed, **allocd;
    size_t nf, na, in_tree = 0;
    (void)state;
    open_dev(&f, 0, 0);
    attach(&f, &m);
    big = talloc(&f, 6 * MiB, NULL, SHARED);
    assert_int_equal(vta_free(&f.d, big), VPMM_SUCCESS); /* free pages a graph pool may take */
    agree(&f, &m);
    assert_int_equal(vta_pool_incref(&f.d, tree), VPMM_SUCCESS);
    w = talloc(&f, 3 * MiB, s, tree); /* a warm-up, outside any capture */
    agree(&f, &m);
    assert_int_equal(
        vpmm_capture_begin(f.pool, graph_pool_of(&f, tree), s, VPMM_STREAM_CAPTURE_THREAD_LOCAL),
        VPMM_SUCCESS);
    o1 = talloc(&f, 8 * MiB, s, tree);
    assert_int_equal(vpmm_capture_end(f.pool, s, &g1), VPMM_SUCCESS);
    agree(&f, &m);
    for (size_t i = 0; i < m.n; i++)
        in_tree += id_eq(m.seg[i].pool, tree);
    assert_true(in_tree >= 5);
    assert_int_equal(vta_checkpoint_take(&f.d, tree, &ck), VPMM_SUCCESS);
    assert_int_equal(
        vpmm_capture_begin(f.pool, graph_pool_of(&f, tree), s, VPMM_STREAM_CAPTURE_THREAD_LOCAL),
        VPMM_SUCCESS);
    assert_int_equal(vta_free(&f.d, o1), VPMM_SUCCESS);
    o2 = talloc(&f, 12 * MiB, s, tree);
    assert_int_equal(vpmm_capture_end(f.pool, s, &g2), VPMM_SUCCESS);
    agree(&f, &m);
    assert_int_equal(vta_checkpoint_apply(&f.d, ck, &freed, &nf, &allocd, &na), VPMM_SUCCESS);
    agree(&f, &m);
    assert_int_equal(na, 2); /* w and o1 live again (o2 gone) */
    for (size_t i = 0; i < na; i++)
        if (allocd[i] != w)
            assert_int_equal(vta_free(&f.d, allocd[i]), VPMM_SUCCESS);
    free(freed);
    free(allocd);
    vpmm_checkpoint_destroy(ck);
    (void)o2;
    agree(&f, &m);
    assert_int_equal(vpmm_graph_destroy(f.pool, g1), VPMM_SUCCESS);
    assert_int_equal(vpmm_graph_destroy(f.pool, g2), VPMM_SUCCESS);
    {
        unsigned before = m.unmapped;
        assert_int_equal(vta_pool_decref(&f.d, tree), VPMM_SUCCESS);
        assert_int_equal(vta_free(&f.d, talloc(&f, 256, NULL, SHARED)), VPMM_SUCCESS);
        agree(&f, &m); /* the hand-over: reported gone under the id, back under {0,0} */
        assert_true(m.unmapped > before);
    }
    for (size_t i = 0; i < m.n; i++)
        assert_true(id_eq(m.seg[i].pool, SHARED));
    assert_int_equal(vta_free(&f.d, w), VPMM_SUCCESS); /* live, now the shared pool's */
    /* The released name goes once its segments have: at the next graph pool's creation. */
    assert_int_equal(f.d.nnames, 1);
    assert_int_equal(vta_pool_incref(&f.d, next), VPMM_SUCCESS);
    assert_int_equal(f.d.nnames, 1);
    assert_true(id_eq(f.d.names[0].id, next));
    assert_int_equal(vta_pool_decref(&f.d, next), VPMM_SUCCESS);
    (void)vta_empty_cache(&f.d);
    agree(&f, &m);
    assert_int_equal(m.n, 0);
    close_fx(&f);
}

/* A sink attached after memory was mapped: a tracker seeded from the snapshot (what a new
 * communicator registers) stays right with the events after; the device state's end detaches it
 * (the pool's destruction reports to no one). */
static void test_attach_late(void **state)
{
    fixture_t f;
    mirror_t m;
    vta_segment_t *segs;
    size_t n;
    void *a, *b;
    unsigned heard;
    (void)state;
    open_dev(&f, 0, 3);
    a = talloc(&f, 3 * MiB, NULL, SHARED);
    attach(&f, &m);
    assert_int_equal(m.mapped, 0);
    assert_int_equal(vta_snapshot_handles(&f.d, SHARED, 1, &segs, &n), VPMM_SUCCESS);
    assert_int_equal(n, 2);
    for (size_t i = 0; i < n; i++)
        m.seg[m.n++] = (mseg_t){ segs[i].address, segs[i].total_size, segs[i].pool };
    vta_snapshot_free(segs, n);
    b = talloc(&f, 5 * MiB, NULL, SHARED);
    agree(&f, &m);
    assert_int_equal(vta_free(&f.d, a), VPMM_SUCCESS);
    assert_int_equal(vta_free(&f.d, b), VPMM_SUCCESS);
    (void)vta_empty_cache(&f.d);
    agree(&f, &m);
    assert_int_equal(m.n, 0);
    a = talloc(&f, 3 * MiB, NULL, SHARED);
    heard = m.mapped + m.unmapped;
    vta_device_fini(&f.d);
    assert_int_equal(vpmm_free(f.pool, a), VPMM_SUCCESS);
    assert_int_equal(vpmm_pool_destroy(f.pool), VPMM_SUCCESS);
    assert_int_equal(m.mapped + m.unmapped, heard);
}

/* A seeded random run through the adapter: allocations of two streams, frees, empty caches, a
 * mempool id referenced and released, warm-up allocations in it, checkpoints taken and applied;
 * the mirror agrees with the handle-mode snapshot after every step. */
static uint64_t rng_next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static void test_random_agrees(void **state)
{
    fixture_t f;
    mirror_t m;
    void *live[48] = { 0 }, *gl[8] = { 0 };
    vpmm_stream_t s[2] = { (vpmm_stream_t)(uintptr_t)0x5100, (vpmm_stream_t)(uintptr_t)0x5200 };
    vpmm_checkpoint_t *ck = NULL;
    vta_pool_id_t id = { 0, 0 };
    uint64_t x = 0x9e3779b97f4a7c15ull;
    uint64_t next_id = 100;
    unsigned applied = 0, released = 0;
    (void)state;
    open_dev(&f, 96 * MiB, 0);
    attach(&f, &m);
    for (int step = 0; step < 2000; step++) {
        unsigned op = (unsigned)(rng_next(&x) % 100), i = (unsigned)(rng_next(&x) % 48);
        if (op < 55) {
            if (live[i] == NULL) {
                size_t size = 1 + (size_t)(rng_next(&x) % (7 * MiB));
                if (vta_malloc(&f.d, size, s[i & 1], SHARED, &live[i]) != VPMM_SUCCESS)
                    live[i] = NULL;
            } else {
                assert_int_equal(vta_free(&f.d, live[i]), VPMM_SUCCESS);
                live[i] = NULL;
            }
        } else if (op < 60) {
            (void)vta_empty_cache(&f.d);
        } else if (op < 92) {
            unsigned j = i % 8;
            if (id.second == 0) {
                id = (vta_pool_id_t){ 0, next_id++ };
                assert_int_equal(vta_pool_incref(&f.d, id), VPMM_SUCCESS);
            }
            if (op < 82) {
                if (gl[j] == NULL) {
                    size_t size = 1 + (size_t)(rng_next(&x) % (5 * MiB));
                    if (vta_malloc(&f.d, size, s[0], id, &gl[j]) != VPMM_SUCCESS)
                        gl[j] = NULL;
                } else {
                    assert_int_equal(vta_free(&f.d, gl[j]), VPMM_SUCCESS);
                    gl[j] = NULL;
                }
            } else if (op < 87) {
                vpmm_checkpoint_destroy(ck);
                ck = NULL;
                assert_int_equal(vta_checkpoint_take(&f.d, id, &ck), VPMM_SUCCESS);
            } else if (ck != NULL) {
                void **freed, **allocd;
                size_t nf, na;
                if (vta_checkpoint_apply(&f.d, ck, &freed, &nf, &allocd, &na) == VPMM_SUCCESS) {
                    /* The checkpoint's allocations are live again: free them at once. */
                    for (size_t k = 0; k < na; k++)
                        assert_int_equal(vta_free(&f.d, allocd[k]), VPMM_SUCCESS);
                    memset(gl, 0, sizeof gl);
                    applied++;
                    free(freed);
                    free(allocd);
                }
            }
        } else if (id.second != 0) {
            for (unsigned j = 0; j < 8; j++)
                if (gl[j] != NULL) {
                    assert_int_equal(vta_free(&f.d, gl[j]), VPMM_SUCCESS);
                    gl[j] = NULL;
                }
            vpmm_checkpoint_destroy(ck);
            ck = NULL;
            assert_int_equal(vta_pool_decref(&f.d, id), VPMM_SUCCESS);
            id = (vta_pool_id_t){ 0, 0 };
            released++;
        }
        agree(&f, &m);
    }
    for (unsigned j = 0; j < 8; j++)
        if (gl[j] != NULL)
            assert_int_equal(vta_free(&f.d, gl[j]), VPMM_SUCCESS);
    vpmm_checkpoint_destroy(ck);
    if (id.second != 0)
        assert_int_equal(vta_pool_decref(&f.d, id), VPMM_SUCCESS);
    for (int i = 0; i < 48; i++)
        if (live[i] != NULL)
            assert_int_equal(vta_free(&f.d, live[i]), VPMM_SUCCESS);
    (void)vta_empty_cache(&f.d);
    agree(&f, &m);
    print_message("random run: %u segments mapped, %u unmapped (%u of mempool ids); %u "
                  "checkpoints applied, %u ids released; %zu graph pool names kept\n",
                  m.mapped, m.unmapped, m.of_ids, applied, released, f.d.nnames);
    assert_true(m.mapped > 100 && m.unmapped > 100 && m.of_ids > 50);
    assert_true(applied > 5 && released > 5);
    assert_true(f.d.nnames <= 2); /* released names do not pile up */
    close_fx(&f);
}

/* VPMM_TORCH_SEGMENTS. */
static void test_mode_parse(void **state)
{
    vta_segments_mode_t mode = VTA_SEGMENTS_HANDLES;
    (void)state;
    assert_int_equal(vta_segments_mode_parse(NULL, &mode), 0);
    assert_int_equal(mode, VTA_SEGMENTS_AUTO);
    assert_int_equal(vta_segments_mode_parse("handles", &mode), 0);
    assert_int_equal(mode, VTA_SEGMENTS_HANDLES);
    assert_int_equal(vta_segments_mode_parse("", &mode), 0);
    assert_int_equal(mode, VTA_SEGMENTS_AUTO);
    assert_int_equal(vta_segments_mode_parse("auto", &mode), 0);
    assert_int_equal(mode, VTA_SEGMENTS_AUTO);
    mode = VTA_SEGMENTS_HANDLES;
    assert_int_equal(vta_segments_mode_parse("runs", &mode), -1);
    assert_int_equal(vta_segments_mode_parse("Handles", &mode), -1);
    assert_int_equal(mode, VTA_SEGMENTS_HANDLES); /* unchanged */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_pool_events), cmocka_unit_test(test_allocation_over_handles),
        cmocka_unit_test(test_graph_pool_events),  cmocka_unit_test(test_attach_late),
        cmocka_unit_test(test_random_agrees),      cmocka_unit_test(test_mode_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
