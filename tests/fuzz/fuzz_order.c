/*
 * fuzz_order.c — the operation fuzzer's stream-order model: what vpmm owes a stream that gets
 * memory another stream freed, and the check after every operation (fuzz_internal.h).
 *
 * The application uses an allocation only on its allocation stream. So when memory freed on
 * stream A (its work enqueued up to item q when freed) goes to a malloc on another stream B while
 * A has not completed q, every item B enqueues after that malloc must wait for A@q: vpmm owes B
 * a GPU-side wait (on a marker of A, or of the legacy stream in A's place). "Goes to" is by
 * address (A's work still uses those addresses) and by physical memory (pages moved elsewhere
 * keep being A's until A is done). The host backend completes an item only after what it waits
 * for, so the harness checks, after every operation, that no such B item completed before A@q.
 * Allocations made in captures are not tracked: their order is the graph's.
 *
 * A stream U recorded on the allocation (vpmm_record_stream) is stricter: while U has not
 * completed the work it had enqueued at the free (its gate), the memory goes to no stream at all,
 * A included, captures included — vpmm keeps it deferred, so a malloc that gets any of it then is
 * a finding on the spot (gates_check), whatever waits it enqueued.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_internal.h"

uint64_t gated_frees;

/* The physical bytes behind [lo, hi) (mapped memory of the pool), as pieces of handles. */
static size_t phys_pieces(const fz_t *z, uintptr_t lo, uintptr_t hi, piece_t **out)
{
    const vpmm_pool_t *p = z->pool;
    size_t n = 0, cap = (hi - lo) / p->page_size + 2;
    piece_t *pc = malloc(cap * sizeof *pc);
    if (pc == NULL)
        finding(z, "out of host memory");
    for (uintptr_t a = lo; a < hi;) {
        uintptr_t page = a & ~(uintptr_t)(p->page_size - 1), end = page + p->page_size;
        const vpmm_phys_t *ph = vpmm_i_phys_at(p, page);
        if (end > hi)
            end = hi;
        if (ph == NULL || page < ph->va || page >= ph->va + ph->size)
            finding(z, "the allocated page %p has no live mapping", (void *)page);
        if (n > 0 && pc[n - 1].handle == ph->handle && pc[n - 1].hi == a - ph->va)
            pc[n - 1].hi = end - ph->va;
        else
            pc[n++] = (piece_t){ ph->handle, a - ph->va, end - ph->va };
        a = end;
    }
    *out = pc;
    return n;
}

static int pieces_overlap(const piece_t *a, size_t na, const piece_t *b, size_t nb)
{
    for (size_t i = 0; i < na; i++)
        for (size_t j = 0; j < nb; j++)
            if (a[i].handle == b[j].handle && a[i].lo < b[j].hi && b[j].lo < a[i].hi)
                return 1;
    return 0;
}

static void pend_drop(fz_t *z, size_t i)
{
    free(z->pend[i].pc);
    memmove(&z->pend[i], &z->pend[i + 1], (z->npend - i - 1) * sizeof *z->pend);
    z->npend--;
}

/* Whether stream `ident` has work up to item seq not completed yet. */
static int not_done(const fz_t *z, int ident, uint64_t seq)
{
    return ident >= 0 && completed_on(z, ident) < seq;
}

/* Whether a recorded stream of e has not completed its work yet, or its shares are not over:
 * nobody may have its memory. */
int gate_pending(const fz_t *z, const pend_t *e)
{
    for (size_t i = 0; i < e->ngates; i++)
        if (not_done(z, e->gates[i].ident, e->gates[i].seq))
            return 1;
    return e->share >= 0 && dev_share_pending(z, e->share);
}

/* Tracked allocation l is about to be freed (its shares not over if share >= 0). */
void pend_note(fz_t *z, const live_t *l, int share)
{
    pend_t *e;
    gate_t gates[MAX_USES];
    size_t ngates = 0;
    int own = l->ident;
    uint64_t q = 0;
    if (own >= 0) {
        q = l->released ? l->upto : enqueued_on(z, own);
        if (!not_done(z, own, q))
            own = -1; /* nothing of its stream may still use it */
    }
    for (size_t i = 0; i < l->nuses; i++) {
        const use_t *u = &l->uses[i];
        uint64_t g = u->released ? u->upto : enqueued_on(z, u->ident);
        if (not_done(z, u->ident, g))
            gates[ngates++] = (gate_t){ u->ident, g };
    }
    if (own < 0 && ngates == 0 && share < 0)
        return;
    if (z->npend == MAX_PEND)
        pend_drop(z, 0); /* the oldest: its check is lost, nothing else */
    e = &z->pend[z->npend++];
    e->lo = (uintptr_t)l->p;
    e->hi = e->lo + rnd(l->size);
    e->npc = phys_pieces(z, e->lo, e->hi, &e->pc);
    e->ident = own;
    e->seq = q;
    memcpy(e->gates, gates, ngates * sizeof *gates);
    e->ngates = ngates;
    e->share = share;
    gated_frees += ngates > 0;
    e->gp = pool_of_alloc(z, e->lo);
    e->nop = z->nop;
    if (fz_verbose && own >= 0)
        fprintf(stderr, "    %p (%zu bytes) freed; %s has completed %llu of its %llu items\n",
                (void *)l->p, l->size, ident_name(own), (unsigned long long)completed_on(z, own),
                (unsigned long long)q);
    if (fz_verbose && share >= 0)
        fprintf(stderr, "    %p: shared, no stream may have it before every share is over\n",
                (void *)l->p);
    for (size_t i = 0; fz_verbose && i < ngates; i++)
        fprintf(stderr, "    %p: no stream may have it before %s has completed %llu (done %llu)\n",
                (void *)l->p, ident_name(gates[i].ident), (unsigned long long)gates[i].seq,
                (unsigned long long)completed_on(z, gates[i].ident));
}

/* Whether [lo, hi), with physical pieces pc (computed on demand), overlaps e's memory. */
static int pend_overlaps(const fz_t *z, const pend_t *e, uintptr_t lo, uintptr_t hi, piece_t **pc,
                         size_t *npc)
{
    if (lo < e->hi && e->lo < hi)
        return 1;
    if (*pc == NULL)
        *npc = phys_pieces(z, lo, hi, pc);
    return pieces_overlap(*pc, *npc, e->pc, e->npc);
}

/* A malloc (in a capture or not) or a reapply gave l: none of it may be memory whose recorded
 * streams have not completed the work they had enqueued when it was freed. */
void gates_check(const fz_t *z, const live_t *l, const char *call)
{
    uintptr_t lo = (uintptr_t)l->p, hi = lo + rnd(l->size);
    piece_t *pc = NULL;
    size_t npc = 0;
    for (size_t i = 0; i < z->npend; i++) {
        const pend_t *e = &z->pend[i];
        if (!gate_pending(z, e) || !pend_overlaps(z, e, lo, hi, &pc, &npc))
            continue;
        if (e->share >= 0 && dev_share_pending(z, e->share))
            finding(z,
                    "lifetime rule: %s gave %p (%zu bytes), memory freed at operation %llu "
                    "(%p, %zu bytes) while it was shared (vpmm_ipc_export), and %u of its shares "
                    "are not over: the importer may still map it",
                    call, (void *)l->p, l->size, (unsigned long long)e->nop, (void *)e->lo,
                    (size_t)(e->hi - e->lo), (unsigned)z->dev.shares[e->share].count);
        for (size_t k = 0; k < e->ngates; k++)
            if (not_done(z, e->gates[k].ident, e->gates[k].seq))
                finding(z,
                        "stream order: %s gave %p (%zu bytes), memory freed at operation %llu "
                        "(%p, %zu bytes) that %s still uses: recorded with vpmm_record_stream, "
                        "its work up to item %llu was pending at the free and it has completed "
                        "only %llu",
                        call, (void *)l->p, l->size, (unsigned long long)e->nop, (void *)e->lo,
                        (size_t)(e->hi - e->lo), ident_name(e->gates[k].ident),
                        (unsigned long long)e->gates[k].seq,
                        (unsigned long long)completed_on(z, e->gates[k].ident));
    }
    free(pc);
}

/* A malloc outside any capture gave l (on stream l->ident): what it got of memory still in use
 * by another stream becomes an obligation. */
void pend_reused(fz_t *z, const live_t *l)
{
    uintptr_t lo = (uintptr_t)l->p, hi = lo + rnd(l->size);
    piece_t *pc = NULL;
    size_t npc = 0;
    for (size_t i = 0; i < z->npend; i++) {
        const pend_t *e = &z->pend[i];
        if (e->ident < 0 || e->ident == l->ident || !not_done(z, e->ident, e->seq))
            continue; /* stream order, or nothing pending */
        if (!pend_overlaps(z, e, lo, hi, &pc, &npc))
            continue;
        if (z->nobl == MAX_OBLIG)
            memmove(&z->obl[0], &z->obl[1], --z->nobl * sizeof *z->obl);
        z->obl[z->nobl++] = (oblig_t){ .user = l->ident,
                                       .owner = e->ident,
                                       .user_rec = l->rec,
                                       .after = enqueued_on(z, l->ident),
                                       .seq = e->seq,
                                       .nop_free = e->nop,
                                       .nop_malloc = z->nop,
                                       .addr = lo };
        if (fz_verbose)
            fprintf(stderr,
                    "    it reuses memory freed at operation %llu: %s items after %llu must "
                    "wait for %s@%llu\n",
                    (unsigned long long)e->nop, ident_name(l->ident),
                    (unsigned long long)enqueued_on(z, l->ident), ident_name(e->ident),
                    (unsigned long long)e->seq);
    }
    free(pc);
}

/* vpmm_stream_release retired vpmm's record rec (of stream id): the application destroys that
 * stream; later work on the same handle is another stream's, and never uses what was allocated
 * on the old one. */
void stream_released(fz_t *z, int rec, int id)
{
    uint64_t upto = enqueued_on(z, id);
    for (size_t i = 0; i < z->nlive; i++) {
        live_t *l = &z->live[i];
        if (l->ident >= 0 && l->rec == rec && !l->released) {
            l->released = 1;
            l->upto = upto;
        }
        l->own_gone |= l->own_rec == rec;
        for (size_t k = 0; k < l->nuses; k++) {
            use_t *u = &l->uses[k];
            if (u->rec == rec && !u->released) {
                u->released = 1;
                u->upto = upto;
            }
        }
    }
    /* A user with no item since its malloc never used the memory on the old stream. */
    for (size_t i = 0; i < z->nobl;) {
        if (z->obl[i].user_rec == rec && z->obl[i].after == upto)
            z->obl[i] = z->obl[--z->nobl];
        else
            i++;
    }
}

/* The name of the stream the host backend logs as key. */
static const char *key_name(const fz_t *z, vpmm_stream_t key)
{
    for (int id = 0; id < nident(z); id++)
        if (ident_key(z, id) == key)
            return ident_name(id);
    return key == NULL ? "none" : "?";
}

/* FUZZ_OPS_VERBOSE: the GPU-side waits vpmm made during the operation. */
void trace_waits(fz_t *z)
{
    size_t n = vpmm_host_wait_count(z->host);
    for (; z->waits_seen < n; z->waits_seen++) {
        vpmm_host_wait_t w = vpmm_host_wait_at(z->host, z->waits_seen);
        fprintf(stderr, "    wait: %s waits for %s@%llu\n", key_name(z, w.waiter),
                key_name(z, w.signaller), (unsigned long long)w.signal_seq);
    }
}

/* After every operation: no stream ran ahead of the work it must wait for. */
void stream_order_check(fz_t *z)
{
    for (size_t i = 0; i < z->nobl;) {
        const oblig_t *o = &z->obl[i];
        uint64_t owner_done = completed_on(z, o->owner);
        if (owner_done >= o->seq) {
            z->obl[i] = z->obl[--z->nobl];
            continue;
        }
        if (completed_on(z, o->user) > o->after)
            finding(z,
                    "stream order: %s completed work enqueued after malloc (operation %llu) got "
                    "%p, memory freed on %s (operation %llu) while its work up to item %llu was "
                    "pending; %s has completed only %llu",
                    ident_name(o->user), (unsigned long long)o->nop_malloc, (void *)o->addr,
                    ident_name(o->owner), (unsigned long long)o->nop_free,
                    (unsigned long long)o->seq, ident_name(o->owner),
                    (unsigned long long)owner_done);
        i++;
    }
    for (size_t i = 0; i < z->npend;) {
        const pend_t *e = &z->pend[i];
        if (!not_done(z, e->ident, e->seq) && !gate_pending(z, e))
            pend_drop(z, i);
        else
            i++;
    }
}
