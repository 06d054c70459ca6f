/*
 * worker.c — a worker thread of vpmm-soak (rules R1-R3, R5, R6 of soak.h): its seeded loop of
 * steps on its own blocks (allocate and fill, check, rewrite, check and free, check on another of
 * its streams), blocks handed to other workers and back through their inboxes and events, sync
 * points that read its mismatch counter (a mismatch locates the damaged blocks and stops the
 * soak), forced defragmentation, and graph rounds (graphs.c) every so often. A worker's blocks
 * and counters are its own; only its inbox (under inbox_lock) is touched by other threads.
 */
#include <string.h>

#include "gpu_kernels.h"
#include "soak.h"
#include "timing.h"

/* vpmm_malloc: NULL on an out-of-memory (expected, counted); any other status fails the soak. */
void *soak_malloc(worker_t *w, size_t size, cudaStream_t s)
{
    void *p = NULL;
    vpmm_status_t st = vpmm_malloc(g.pool, size, s, &p);
    if (st == VPMM_ERROR_OUT_OF_MEMORY) {
        count(w, C_OOMS, 1);
        if (atomic_exchange(&g.oom_reported, 1) == 0) { /* why, once */
            char why[2048];
            vpmm_pool_oom_report(g.pool, why, sizeof why);
            fprintf(stderr,
                    "vpmm-soak: note: first out-of-memory (handled: blocks are freed and "
                    "the soak goes on): %s\n",
                    why);
        }
        return NULL;
    }
    if (st != VPMM_SUCCESS || p == NULL)
        fail(SOAK_ERROR, w, "vpmm_malloc(%zu bytes, stream %p): %s (%s)", size, (void *)s,
             vpmm_status_name(st), vpmm_last_error());
    count(w, C_MALLOCS, 1);
    count(w, C_BYTES, size);
    return p;
}

void soak_free(worker_t *w, void *p)
{
    vpmm_status_t st = vpmm_free(g.pool, p);
    if (st != VPMM_SUCCESS)
        fail(SOAK_ERROR, w, "vpmm_free(%p): %s (%s)", p, vpmm_status_name(st), vpmm_last_error());
    count(w, C_FREES, 1);
}

void fill(worker_t *w, void *p, size_t n, uint32_t seed, cudaStream_t s)
{
    CK(w, (cudaError_t)gk_fill(p, n, seed, s));
    count(w, C_FILLS, 1);
}

void check(worker_t *w, const void *p, size_t n, uint32_t seed, cudaStream_t s)
{
    CK(w, (cudaError_t)gk_check(p, n, seed, w->dcount, s));
    count(w, C_CHECKS, 1);
}

/* A size: trace sizes in order, or synthetic ones; folded below the profile's largest. */
static size_t pick_size(worker_t *w)
{
    const size_t page = g.page, r = below(w, 100);
    size_t n;
    if (r < 45 && g.nsizes > 0)
        n = (size_t)g.sizes[w->trace_pos++ % g.nsizes];
    else if (r < 60)
        n = 1 + below(w, page - 1); /* sub-page */
    else if (r < 68)
        n = 1 + below(w, 512); /* tiny */
    else if (r < 80)
        n = page * (1 + below(w, 4)); /* whole pages */
    else if (r < 97)
        n = page * (1 + below(w, 16)) + 1 + below(w, page - 1); /* pages and a tail */
    else
        n = g.pr.large_min + below(w, g.pr.large_max - g.pr.large_min + 1);
    if (n > g.pr.max_alloc)
        n = 1 + n % g.pr.max_alloc;
    return n;
}

/* ---- a worker's own blocks (R1) ----------------------------------------------------------- */

static void live_remove(worker_t *w, size_t i)
{
    w->live_bytes -= w->live[i].size;
    w->live[i] = w->live[--w->nlive];
}

static void op_check_free(worker_t *w, size_t i)
{
    block_t b = w->live[i];
    check(w, b.p, b.size, b.seed, w->s[b.stream]);
    soak_free(w, b.p);
    live_remove(w, i);
}

/* Out of memory: give back half of this worker's blocks (the others do the same). */
void release_half(worker_t *w)
{
    size_t n = (w->nlive + 1) / 2;
    if (n == 0)
        timing_sleep_us(1000);
    while (n-- > 0)
        op_check_free(w, below(w, w->nlive));
}

static void op_alloc(worker_t *w)
{
    const size_t size = pick_size(w);
    const int k = (int)below(w, (size_t)g.o.streams);
    block_t b = { NULL, size, new_seed(w), k };
    b.p = soak_malloc(w, size, w->s[k]);
    if (b.p == NULL) {
        release_half(w);
        return;
    }
    fill(w, b.p, size, b.seed, w->s[k]);
    w->live[w->nlive++] = b;
    w->live_bytes += size;
}

static void op_rewrite(worker_t *w, size_t i)
{
    block_t *b = &w->live[i];
    b->seed = new_seed(w);
    fill(w, b->p, b->size, b->seed, w->s[b->stream]);
}

/* Checks block i on another stream of this worker, then frees it or keeps it (R3). */
static void op_cross(worker_t *w, size_t i)
{
    block_t b = w->live[i];
    const int k = (b.stream + 1 + (int)below(w, (size_t)g.o.streams - 1)) % g.o.streams;
    cudaEvent_t ev = g.o.streams > 1 ? event_get() : NULL;
    if (ev == NULL) {
        check(w, b.p, b.size, b.seed, w->s[b.stream]);
        return;
    }
    CK(w, cudaEventRecord(ev, w->s[b.stream]));
    CK(w, cudaStreamWaitEvent(w->s[k], ev, 0));
    check(w, b.p, b.size, b.seed, w->s[k]);
    CK(w, cudaEventRecord(ev, w->s[k]));
    CK(w, cudaStreamWaitEvent(w->s[b.stream], ev, 0));
    event_put(ev);
    count(w, C_CROSS, 1);
    if (below(w, 2) == 0) {
        soak_free(w, b.p);
        live_remove(w, i);
    }
}

/* ---- blocks in transit between workers (R2, R3) ------------------------------------------- */

static void inbox_push(worker_t *to, const item_t *it)
{
    pthread_mutex_lock(&to->inbox_lock);
    to->inbox[to->ninbox++] = *it; /* room: every item holds one of g.ev_total events */
    pthread_mutex_unlock(&to->inbox_lock);
}

static size_t inbox_len(worker_t *w)
{
    size_t n;
    pthread_mutex_lock(&w->inbox_lock);
    n = w->ninbox;
    pthread_mutex_unlock(&w->inbox_lock);
    return n;
}

static void op_handoff(worker_t *w, size_t i)
{
    block_t b = w->live[i];
    size_t to = below(w, (size_t)g.nw - 1);
    cudaEvent_t ev;
    item_t it;
    if (g.nw < 2) {
        op_cross(w, i);
        return;
    }
    if (to >= (size_t)w->id)
        to++;
    if (inbox_len(&g.w[to]) >= INBOX_MAX || (ev = event_get()) == NULL) {
        op_check_free(w, i);
        return;
    }
    CK(w, cudaEventRecord(ev, w->s[b.stream]));
    it.b = b;
    it.owner = w->id;
    it.kind = below(w, 2) ? ITEM_FREE_THERE : ITEM_CHECK_RETURN;
    it.ev = ev;
    atomic_fetch_add(&g.inflight, 1);
    live_remove(w, i);
    inbox_push(&g.w[to], &it);
    count(w, C_HANDOFFS, 1);
}

/* Frees a deferred block whose event has completed. */
static void defer_finish(worker_t *w, size_t i)
{
    item_t *it = &w->defer[i];
    soak_free(w, it->b.p);
    event_put(it->ev);
    atomic_fetch_sub(&g.inflight, 1);
    memmove(&w->defer[i], &w->defer[i + 1], (w->ndefer - i - 1) * sizeof *it);
    w->ndefer--;
}

static void corruption(worker_t *w, unsigned long long bad);

/*
 * Synchronises every stream of the worker and reads its counter (R6); every deferred block is
 * then done with the GPU and is freed.
 */
static void sync_point(worker_t *w)
{
    unsigned long long bad;
    cudaError_t e;
    for (int k = 0; k < g.o.streams; k++)
        stream_sync(w, w->s[k]);
    gate_enter(GATE_SYNC);
    e = cudaMemcpyAsync(w->hcount, w->dcount, sizeof *w->hcount, cudaMemcpyDeviceToHost, w->s[0]);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(w->s[0]);
    gate_leave(GATE_SYNC);
    CK(w, e);
    bad = *w->hcount;
    atomic_store(&w->mismatches, bad);
    if (bad != 0)
        corruption(w, bad);
    while (w->ndefer > 0)
        defer_finish(w, w->ndefer - 1);
    count(w, C_SYNCS, 1);
}

static void defer_push(worker_t *w, const item_t *it)
{
    if (w->ndefer == DEFER_MAX)
        sync_point(w);
    w->defer[w->ndefer++] = *it;
}

/* Frees the deferred blocks whose check has completed, oldest first, without waiting. */
static void poll_deferred(worker_t *w)
{
    while (w->ndefer > 0) {
        cudaError_t e;
        gate_enter(GATE_SYNC);
        e = cudaEventQuery(w->defer[0].ev);
        gate_leave(GATE_SYNC);
        if (e == cudaErrorNotReady) {
            (void)cudaGetLastError(); /* "not ready" must not reach the next launcher's check */
            return;
        }
        CK(w, e);
        defer_finish(w, 0);
    }
}

static void process_item(worker_t *w, item_t *it)
{
    cudaStream_t s;
    switch (it->kind) {
    case ITEM_FREE_THERE:
    case ITEM_CHECK_RETURN:
        s = w->s[below(w, (size_t)g.o.streams)];
        CK(w, cudaStreamWaitEvent(s, it->ev, 0));
        check(w, it->b.p, it->b.size, it->b.seed, s);
        CK(w, cudaEventRecord(it->ev, s));
        if (it->kind == ITEM_FREE_THERE) {
            defer_push(w, it);
        } else {
            it->kind = ITEM_RETURNED;
            inbox_push(&g.w[it->owner], it);
        }
        break;
    case ITEM_RETURNED: /* w is the owner */
        CK(w, cudaStreamWaitEvent(w->s[it->b.stream], it->ev, 0));
        event_put(it->ev);
        soak_free(w, it->b.p);
        atomic_fetch_sub(&g.inflight, 1);
        count(w, C_RETURNS, 1);
        break;
    }
}

/* Processes what other workers sent; returns how many items there were. */
static size_t drain_inbox(worker_t *w)
{
    item_t batch[16];
    size_t n;
    pthread_mutex_lock(&w->inbox_lock);
    n = w->ninbox < 16 ? w->ninbox : 16;
    memcpy(batch, w->inbox, n * sizeof *batch);
    memmove(w->inbox, w->inbox + n, (w->ninbox - n) * sizeof *batch);
    w->ninbox -= n;
    pthread_mutex_unlock(&w->inbox_lock);
    for (size_t i = 0; i < n; i++)
        process_item(w, &batch[i]);
    return n;
}

/* A mismatch: re-check every live block alone to name the damaged ones, then stop. */
static void corruption(worker_t *w, unsigned long long bad)
{
    size_t damaged = 0;
    set_phase(w, "locating corruption");
    fprintf(stderr,
            "vpmm-soak: worker %d: its checks found %llu mismatching words; re-checking its %zu "
            "live blocks one by one\n",
            w->id, bad, w->nlive);
    for (size_t i = 0; i < w->nlive; i++) {
        const block_t *b = &w->live[i];
        cudaStream_t s = w->s[b->stream];
        cudaError_t e;
        gate_enter(GATE_SYNC);
        e = cudaMemsetAsync(w->dscratch, 0, sizeof *w->dscratch, s);
        if (e == cudaSuccess)
            e = (cudaError_t)gk_check(b->p, b->size, b->seed, w->dscratch, s);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(w->hscratch, w->dscratch, sizeof *w->hscratch,
                                cudaMemcpyDeviceToHost, s);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(s);
        gate_leave(GATE_SYNC);
        CK(w, e);
        if (*w->hscratch != 0 && damaged++ < 20)
            fprintf(stderr,
                    "vpmm-soak:   block %p, %zu bytes, seed 0x%08x, stream %d: %llu "
                    "mismatching words\n",
                    b->p, b->size, b->seed, b->stream, *w->hscratch);
    }
    fail(SOAK_CORRUPT, w,
         "%llu mismatching words (%zu of the worker's %zu live blocks still damaged): memory "
         "written through vpmm did not read back",
         bad, damaged, w->nlive);
}

/* ---- forced defragmentation (R5) ---------------------------------------------------------- */

void defrag_round(worker_t *w)
{
    const char *was = atomic_load_explicit(&w->phase, memory_order_relaxed);
    const int a = (int)below(w, (size_t)g.o.streams), b = (int)below(w, (size_t)g.o.streams);
    size_t nb = g.pr.defrag_blocks < MAX_DEFRAG_BLOCKS ? g.pr.defrag_blocks : MAX_DEFRAG_BLOCKS;
    void *blk[MAX_DEFRAG_BLOCKS] = { 0 }, *big;
    uint32_t seed[MAX_DEFRAG_BLOCKS], big_seed = new_seed(w);
    size_t big_bytes, i;
    vpmm_stats_t st;

    set_phase(w, "forced defragmentation");
    for (i = 0; i < nb; i++) {
        blk[i] = soak_malloc(w, g.page, w->s[a]);
        if (blk[i] == NULL)
            break;
        seed[i] = new_seed(w);
        fill(w, blk[i], g.page, seed[i], w->s[a]);
    }
    nb = i;
    for (i = 0; i < nb; i += 2) {
        check(w, blk[i], g.page, seed[i], w->s[a]);
        soak_free(w, blk[i]);
        blk[i] = NULL;
    }
    /* Larger than the largest free region: the pool must gather pages (remap) or grow. */
    VK(w, vpmm_get_stats(g.pool, &st));
    big_bytes = (st.largest_free_bytes / g.page + 1) * g.page;
    if (big_bytes < nb / 2 * g.page)
        big_bytes = nb / 2 * g.page;
    if (big_bytes > g.pr.defrag_cap)
        big_bytes = g.pr.defrag_cap;
    big = soak_malloc(w, big_bytes, w->s[b]);
    if (big != NULL) {
        fill(w, big, big_bytes, big_seed, w->s[b]);
        check(w, big, big_bytes, big_seed, w->s[b]);
    }
    for (i = 1; i < nb; i += 2)
        check(w, blk[i], g.page, seed[i], w->s[a]); /* the survivors kept their data */
    if (big != NULL)
        soak_free(w, big);
    for (i = 1; i < nb; i += 2)
        soak_free(w, blk[i]);
    count(w, C_DEFRAG_ROUNDS, 1);
    set_phase(w, was);
}

/* ---- the worker --------------------------------------------------------------------------- */

static void step(worker_t *w)
{
    const size_t r = below(w, 100);
    size_t i;
    if (w->nlive == 0 || (r < 40 && w->nlive < g.pr.max_live && w->live_bytes < g.pr.live_bytes)) {
        op_alloc(w);
        return;
    }
    i = below(w, w->nlive);
    if (r < 62)
        op_check_free(w, i);
    else if (r < 77)
        check(w, w->live[i].p, w->live[i].size, w->live[i].seed, w->s[w->live[i].stream]);
    else if (r < 85)
        op_rewrite(w, i);
    else if (r < 93)
        op_handoff(w, i);
    else
        op_cross(w, i);
}

void *worker_main(void *arg)
{
    worker_t *w = arg;
    uint64_t next_sync = g.pr.sync_every, next_defrag = 20, next_graph = 40, rounds = 0;

    set_phase(w, "steps");
    while (!atomic_load_explicit(&g.stop, memory_order_relaxed)) {
        drain_inbox(w);
        poll_deferred(w);
        step(w);
        w->steps++;
        if (w->steps >= next_sync) {
            sync_point(w);
            next_sync = w->steps + g.pr.sync_every;
        }
        if (w->steps >= next_defrag) {
            defrag_round(w);
            next_defrag = w->steps + g.pr.defrag_every / 2 + below(w, g.pr.defrag_every);
        }
        if (w->steps >= next_graph) {
            /* Round 0 is a plain round and round 1 a tree, early: short runs see both. */
            graph_round(w, rounds % g.pr.tree_every == 1);
            next_graph =
                w->steps + (rounds < 1 ? 40 : g.pr.graph_every / 2 + below(w, g.pr.graph_every));
            rounds++;
            set_phase(w, "steps");
        }
    }

    /* Wind down: free what this worker holds; once every worker is past its loop no new block
     * goes into transit, and each serves its inbox until nothing is in transit anywhere. */
    set_phase(w, "draining");
    while (w->nlive > 0)
        op_check_free(w, w->nlive - 1);
    pthread_barrier_wait(&g.drained);
    for (;;) {
        size_t n = drain_inbox(w);
        if (w->ndefer > 0)
            sync_point(w);
        if (n == 0 && atomic_load(&g.inflight) == 0)
            break;
        if (n == 0)
            timing_sleep_us(100);
    }
    sync_point(w); /* the final count */
    set_phase(w, "done");
    return NULL;
}
