/*
 * uses.c — allocations used by other streams (vpmm_record_stream) and their deferred frees.
 *
 * An allocation belongs to the stream it was allocated on: freed, its memory is reused at once
 * by that stream (stream order) and by other streams once that stream's work is done. Work on a
 * *second* stream that reads or writes the block (a tensor handed to another stream, PyTorch's
 * Tensor.record_stream) is invisible to that rule. vpmm_record_stream names such a stream: the
 * allocation keeps a list of its other streams (r->uses), each holding a reference on its stream
 * record. When it is freed, each of them gets a gate: the marker that covers the work enqueued on
 * it so far (recorded at once where it can be, else later; stream.c's rules for another thread's
 * per-thread stream and for captures apply). Until every gate has completed the region is
 * *deferred*: FREE, counted as free memory, but in no tree — in the pool's deferred list — so no
 * stream, its own included, can take it, nothing can move it, and it merges with nothing. The
 * slow paths (vpmm_i_stream_poll_all) release deferred regions whose gates completed: they become
 * ordinary free memory, pending on their own stream (a marker later than the free: later, never
 * earlier).
 *
 *     allocated, uses {B}  --free-->  deferred (gate: B's marker m)  --m done-->  pending on A
 *
 * Other processes are uses too (share.c): an allocation exported with vpmm_ipc_export holds its
 * share slot as a use with no stream (seq = the slot). Its gate is the slot's count: the shares
 * not over yet (share_table.c), 0 once every importer has closed. The slot goes back to the
 * table with the use.
 *
 * A checkpoint is not reapplied over deferred memory of its graph pool (checkpoint.c refuses with
 * VPMM_ERROR_CHECKPOINT_CONFLICT): another stream may still use it.
 *
 * Under the pool lock. Invariants (pool.h I7, I11) are checked in check.c; tests in
 * tests/test_uses.c.
 */
#include <stdlib.h>

#include "entry.h"
#include "pool.h"
#include "region.h"
#include "share.h"
#include "stream.h"
#include "uses.h"

/* Room for one more use; -1 when out of host memory (nothing changed). */
static int uses_reserve(vpmm_region_t *r)
{
    vpmm_uses_t *u = r->uses;
    size_t cap;
    if (u != NULL && u->n < u->cap)
        return 0;
    cap = u ? u->cap * 2 : 2;
    u = realloc(u, sizeof *u + cap * sizeof u->e[0]);
    if (u == NULL)
        return -1;
    if (r->uses == NULL)
        u->n = 0;
    u->cap = cap;
    r->uses = u;
    return 0;
}

vpmm_status_t vpmm_i_uses_room(vpmm_region_t *r)
{
    if (uses_reserve(r) == 0)
        return VPMM_SUCCESS;
    vpmm_i_set_error("out of host memory for an allocation's uses");
    return VPMM_ERROR_HOST_OUT_OF_MEMORY;
}

vpmm_status_t vpmm_i_record_stream(vpmm_pool_t *pool, void *ptr, vpmm_stream_t stream)
{
    vpmm_stream_key_t key;
    vpmm_region_t *r;
    vpmm_stream_rec_t *s;
    vpmm_status_t st = VPMM_SUCCESS;

    key = vpmm_i_stream_key(pool, stream);
    vpmm_i_lock(pool);
    r = vpmm_hmap_get(&pool->allocs, (uintptr_t)ptr);
    if (r == NULL) {
        st = vpmm_i_bad_pointer(pool, ptr, "vpmm_record_stream");
        goto out;
    }
    /* A released stream's handle may name a new stream: that one is not the same stream. */
    if (!r->stream->retired && vpmm_i_stream_key_equal(vpmm_i_stream_key_of(r->stream), key))
        goto out; /* its own stream: stream order covers it */
    if (r->uses != NULL)
        for (size_t i = 0; i < r->uses->n; i++)
            if (r->uses->e[i].stream != NULL && !r->uses->e[i].stream->retired &&
                vpmm_i_stream_key_equal(vpmm_i_stream_key_of(r->uses->e[i].stream), key))
                goto out; /* already recorded */
    s = vpmm_i_stream_get(pool, key);
    if (s == NULL || uses_reserve(r) != 0) {
        vpmm_i_set_error("vpmm_record_stream: out of host memory");
        st = VPMM_ERROR_HOST_OUT_OF_MEMORY;
        goto out;
    }
    r->uses->e[r->uses->n++] = (struct vpmm_use){ s, 0 };
    s->refs++;
out:
    vpmm_i_unlock(pool);
    return st;
}

/*
 * The marker a use's gate waits for: a live stream's next one (recorded now if it may be, else on
 * demand); a released stream's final one — it takes no new markers (the application may have
 * destroyed it), and vpmm_stream_release recorded that one because the use held a reference.
 */
static uint64_t gate_seq(const vpmm_stream_rec_t *s)
{
    return s->retired ? s->recorded - 1 : s->recorded;
}

void vpmm_i_uses_defer(vpmm_pool_t *p, vpmm_region_t *r)
{
    r->state = VPMM_REGION_FREE;
    r->requested = 0;
    r->age = ++p->clock;
    r->ready = 0;
    r->cached = 0;
    r->seq = 0;
    /* r->stream stays its own stream, r->uses its other streams: each gets its gate (a share's
     * gate is its slot's count, seq the slot). */
    for (size_t i = 0; i < r->uses->n; i++) {
        struct vpmm_use *e = &r->uses->e[i];
        if (e->stream == NULL)
            continue;
        e->seq = gate_seq(e->stream);
        if (!e->stream->retired)
            (void)vpmm_i_stream_mark(p, e->stream, e->seq); /* now if it may be; else later */
    }
    vpmm_i_index_add(p, r); /* the deferred list */
}

/* Drops r's uses: their stream references, share slots, and the list. */
static void uses_drop(vpmm_pool_t *p, vpmm_region_t *r)
{
    for (size_t i = 0; i < r->uses->n; i++) {
        if (r->uses->e[i].stream != NULL)
            r->uses->e[i].stream->refs--;
        else
            vpmm_i_share_slot_give(p, (uint32_t)r->uses->e[i].seq);
    }
    free(r->uses);
    r->uses = NULL;
}

/* Whether marker seq of s has completed, asked of the driver without taking note of it (no
 * region changes state: the next poll does that). Markers complete in order, so one event query
 * answers. */
static int marker_done_peek(vpmm_pool_t *p, const vpmm_stream_rec_t *s, uint64_t seq)
{
    if (vpmm_i_stream_done(s, seq))
        return 1;
    if (seq >= s->recorded)
        return 0; /* no marker yet */
    return p->drv->event_query(p->drv, vpmm_i_stream_marker(s, seq)) == VPMM_DRV_OK;
}

/* vpmm_i_uses_done and vpmm_i_uses_done_peek: with `poll`, the streams are polled (their
 * completed memory becomes ready); without, nothing but the markers changes. */
static int uses_done(vpmm_pool_t *p, const vpmm_region_t *r, int poll)
{
    for (size_t i = 0; i < r->uses->n; i++) {
        const struct vpmm_use *e = &r->uses->e[i];
        if (e->stream == NULL) {
            if (vpmm_i_share_count(p, (uint32_t)e->seq) != 0)
                return 0; /* another process may still map it */
            continue;
        }
        if (vpmm_i_stream_done(e->stream, e->seq))
            continue;
        if (e->seq == e->stream->recorded && !e->stream->retired)
            (void)vpmm_i_stream_mark(p, e->stream, e->seq); /* on demand: someone polls for it */
        if (!poll) {
            if (!marker_done_peek(p, e->stream, e->seq))
                return 0;
            continue;
        }
        vpmm_i_stream_poll(p, e->stream);
        if (!vpmm_i_stream_done(e->stream, e->seq))
            return 0;
    }
    return 1;
}

int vpmm_i_uses_done(vpmm_pool_t *p, const vpmm_region_t *r)
{
    return uses_done(p, r, 1);
}

int vpmm_i_uses_done_peek(vpmm_pool_t *p, const vpmm_region_t *r)
{
    return uses_done(p, r, 0);
}

void vpmm_i_uses_release(vpmm_pool_t *p)
{
    vpmm_region_t *r = p->deferred_head;
    while (r != NULL) {
        vpmm_region_t *next = r->qnext;
        if (vpmm_i_uses_done(p, r)) {
            vpmm_stream_rec_t *own = r->stream;
            vpmm_i_index_del(p, r);
            uses_drop(p, r);
            vpmm_i_region_set_free(p, r, own); /* pending on its own stream from now */
            vpmm_i_index_add(p, r);
            vpmm_i_region_coalesce(p, r);
        }
        r = next;
    }
}

void vpmm_i_uses_prune_shares(vpmm_pool_t *p, vpmm_region_t *r)
{
    vpmm_uses_t *u = r->uses;
    size_t kept = 0;
    for (size_t i = 0; i < u->n; i++) {
        if (u->e[i].stream == NULL && vpmm_i_share_count(p, (uint32_t)u->e[i].seq) == 0)
            vpmm_i_share_slot_give(p, (uint32_t)u->e[i].seq); /* every share is over */
        else
            u->e[kept++] = u->e[i];
    }
    u->n = kept;
    if (kept == 0) {
        free(u);
        r->uses = NULL;
    }
}

void vpmm_i_uses_forget(vpmm_pool_t *p, vpmm_region_t *r)
{
    if (r->uses != NULL)
        uses_drop(p, r);
}

void vpmm_i_uses_fini(vpmm_pool_t *p)
{
    for (vpmm_region_t *r = p->deferred_head; r; r = r->qnext)
        vpmm_i_uses_forget(p, r);
}
