/*
 * test_threads.c — one pool shared by 8 threads on 4 shared streams and their own per-thread
 * streams, through the public API only, on the host backend; the second run with the
 * pool's background worker on (VPMM_WORKER) unmapping beside them.
 *
 * Each thread allocates mixed sizes (1 B to 12 MiB, mostly small) on a random one of the 4 shared
 * streams or on its own per-thread stream (VPMM_STREAM_PER_THREAD, one more choice of the same
 * weight), writes a pattern derived from (thread, op index, address) into the allocation, keeps
 * it a while, then hands it to another thread's mailbox (a mutex-protected ring); the receiving
 * thread checks the pattern and frees it. A thread whose hands are full and finds every other
 * inbox full frees from its own inbox or waits, so almost every free (≥ 95% asserted, ~99.7%
 * seen) happens on a thread other than the allocating one; the rest are the captures' and
 * scratch streams' own, and short-lived threads' that found every inbox full. The pattern covers
 * the first and last 64 bytes and one word every 4 KiB in between: two live allocations that
 * overlapped, memory unmapped or remapped under a live allocation, or a page given back while in
 * use would show up as a mismatch (or a fault).
 *
 * Per-thread streams. A block of a per-thread stream freed on another thread is pending on a
 * stream that thread may not name: the marker another thread's malloc needs for it is recorded on
 * the legacy stream instead, and that happens all the time here. Half the capture sessions (below)
 * capture the thread's own per-thread stream, in global, thread-local or relaxed mode (the
 * beginning thread ends it), with a yield in the middle while the others go on allocating and
 * freeing: a per-thread stream is blocking, so a marker on the legacy stream then would invalidate
 * the capture (906). Nothing in the test invalidates a capture, so vpmm_capture_end must succeed,
 * and no driver call may fail at all (vpmm_pool_last_driver_error stays 0). Threads come and go:
 * now and then a worker starts a short-lived thread (one at a time, running alongside it) that
 * allocates a few blocks on its own per-thread stream, hands them to the workers' inboxes and
 * exits, a quarter of them after vpmm_stream_release of their stream; its blocks are freed after
 * it has gone.
 *
 * Other streams' uses. One block in 16 of the main allocation path is recorded
 * (vpmm_record_stream) on another stream its thread uses — a shared stream, or its own
 * per-thread stream — sometimes twice (a no-op); a quarter of the capture sessions' blocks on a
 * shared stream while the capture runs; a quarter of the short-lived threads' blocks are
 * allocated on a shared stream and recorded on the thread's own per-thread stream, which is gone
 * (sometimes released) by the time another thread frees them. They are handed over and freed
 * elsewhere like the rest, and their patterns checked there: each such free is deferred until
 * the recorded stream's marker completes (recorded on the legacy stream for another thread's
 * per-thread stream, and later while a capture runs), then released by a slow path. Every
 * recorded block is freed (asserted), and the end's bounds (no stream record, no mapped byte
 * after the final trims) include the records they referenced.
 *
 * Two runs of the same program: stream 0 is the legacy stream (config.default_stream LEGACY, 0 is
 * never used), then stream 0 is each thread's per-thread stream (VPMM_DEFAULT_STREAM_PER_THREAD):
 * 0 is one more stream choice, and 0 or 0x2 (the same stream) is what the per-thread captures and
 * the short-lived threads use, at random.
 *
 * Sprinkled in, from every thread at random: vpmm_get_stats (with its documented equations),
 * vpmm_pool_check, vpmm_trim (to half the mapped bytes, rarely to 0), vpmm_pool_walk,
 * vpmm_pool_dump (into memory), vpmm_pool_oom_report, vpmm_reset_peak_stats,
 * vpmm_pool_last_driver_error, vpmm_record_stream (above), short-lived threads, and capture
 * sessions: a graph pool, a capture (of a fresh stream or of the thread's per-thread stream) with
 * allocations and frees in it, a checkpoint, the graph destroyed and the graph pool released, the
 * capture's surviving allocations handed to other threads like any other; and a scratch stream
 * used, drained and released with vpmm_stream_release (the 4 shared streams are never released
 * while in use). At the end every allocation is freed and the pool checks clean and holds no live
 * byte; once the fresh and shared streams are released, only per-thread records of threads that
 * have all gone are left, and two vpmm_trim(0) must leave none of them and no mapped byte (the
 * bound: records of departed threads and their memory do not pile up, however many came and went);
 * then the pool is destroyed.
 *
 * Worker threads must not use cmocka's assertions (they longjmp into the main thread's frame):
 * a failure prints what it saw, with the seed, and aborts. The seed and the number of operations
 * come from VPMM_THREADS_SEED (the second run takes seed + 1) and VPMM_THREADS_OPS (the total
 * over all threads and both runs, half each; an operation is one call into the pool); the
 * default, 1.2 M operations, takes ~10-20 s on 2 cores (most of it the kernel's page faults on
 * freshly mapped pages). Thread interleaving is not reproducible: the seed fixes each thread's
 * choices, not their order.
 */
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_util.h"

#define NTHREADS 8
#define NSTREAMS 4
#define LOCAL    32 /* allocations a thread holds before handing them over */
#define MAILBOX  64 /* a thread's inbox; ≥ LOCAL, so the final hand-over always fits */
#define HEAD     64 /* bytes of pattern at each end */
#define STRIDE   4096

typedef struct item {
    unsigned char *p;
    size_t size;
    uint64_t key;   /* the pattern's seed: (thread, op index, address) mixed */
    unsigned owner; /* allocating thread */
    uint64_t op;    /* its op index there */
    int graph;      /* allocated during a capture (from a graph pool) */
    int per_thread; /* allocated on the owner's per-thread stream (0x2, or 0 where that is one) */
    int recorded;   /* also used by another stream the owner uses (vpmm_record_stream) */
} item_t;

typedef struct mailbox {
    pthread_mutex_t mu;
    size_t head, n;
    item_t items[MAILBOX];
} mailbox_t;

typedef struct counts {
    uint64_t ops, mallocs, frees, cross_frees, graph_mallocs, captures, checks, trims, stats,
        released_streams;
    uint64_t pt_mallocs;     /* on the allocating thread's per-thread stream (graph ones too) */
    uint64_t pt_cross_frees; /* of those, freed on another thread */
    uint64_t pt_captures;    /* captures of the thread's own per-thread stream */
    uint64_t transients;     /* short-lived threads started */
    uint64_t during_pt;      /* mallocs and frees while another thread's per-thread stream was
                                being captured (as far as the test knows) */
    uint64_t records;        /* vpmm_record_stream of a block on another stream than its own */
    uint64_t recorded_frees; /* frees of such blocks (deferred until that stream is done) */
    uint64_t recorded_cross; /* of those, on another thread than the allocating one */
} counts_t;

struct worker;

typedef struct shared {
    vpmm_pool_t *pool;
    uint64_t seed;
    uint64_t ops_per_thread;
    int per_thread_default; /* the pool's default_stream is PER_THREAD: stream 0 is per-thread */
    atomic_int finished;    /* threads done with their operations */
    atomic_int pt_captures; /* captures of a per-thread stream in progress (begun, not ended) */
    pthread_barrier_t barrier;
    mailbox_t box[NTHREADS];
    counts_t counts[NTHREADS];
    struct worker *transient; /* [NTHREADS]: worker i's current short-lived thread */
} shared_t;

typedef struct worker {
    shared_t *sh;
    unsigned id; /* < NTHREADS: a worker; else a short-lived thread */
    trng_t rng;
    item_t local[LOCAL];
    size_t nlocal;
    uint64_t sessions;   /* capture sessions so far: each uses fresh stream tokens */
    uint64_t fresh;      /* of those, captures of a fresh stream (private_stream(id, k, 0)) */
    int capturing_pt;    /* capturing its own per-thread stream now */
    int transient_alive; /* its short-lived thread was started and not joined yet */
    pthread_t transient_tid;
    counts_t c;
} worker_t;

static vpmm_stream_t shared_stream(unsigned i)
{
    return (vpmm_stream_t)(uintptr_t)(0x1000 + i);
}

/* A stream only thread id uses, new for each session (never one of the shared four). */
static vpmm_stream_t private_stream(unsigned id, uint64_t session, unsigned which)
{
    return (vpmm_stream_t)(uintptr_t)(0x100000 + ((uint64_t)id << 24) + session * 2 + which);
}

/* Whether s names the calling thread's own per-thread stream. */
static int is_per_thread(const shared_t *sh, vpmm_stream_t s)
{
    return s == VPMM_STREAM_PER_THREAD || (s == NULL && sh->per_thread_default);
}

/* The calling thread's per-thread stream: 0x2, or (half the time) 0 where 0 names it too. */
static vpmm_stream_t own_stream(worker_t *w)
{
    return w->sh->per_thread_default && trng_below(&w->rng, 2) ? NULL : VPMM_STREAM_PER_THREAD;
}

/* Where a worker allocates: one of the 4 shared streams or its own per-thread stream (0x2), and
 * where 0 is per-thread, 0 as well: each with the same weight. */
static vpmm_stream_t pick_stream(worker_t *w)
{
    uint64_t k = trng_below(&w->rng, NSTREAMS + 1 + (w->sh->per_thread_default != 0));
    if (k < NSTREAMS)
        return shared_stream((unsigned)k);
    return k == NSTREAMS ? VPMM_STREAM_PER_THREAD : NULL;
}

static void counts_add(counts_t *to, const counts_t *c)
{
    to->ops += c->ops;
    to->mallocs += c->mallocs;
    to->frees += c->frees;
    to->cross_frees += c->cross_frees;
    to->graph_mallocs += c->graph_mallocs;
    to->captures += c->captures;
    to->checks += c->checks;
    to->trims += c->trims;
    to->stats += c->stats;
    to->released_streams += c->released_streams;
    to->pt_mallocs += c->pt_mallocs;
    to->pt_cross_frees += c->pt_cross_frees;
    to->pt_captures += c->pt_captures;
    to->transients += c->transients;
    to->during_pt += c->during_pt;
    to->records += c->records;
    to->recorded_frees += c->recorded_frees;
    to->recorded_cross += c->recorded_cross;
}

static void die(const worker_t *w, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "test_threads: thread %u (seed %" PRIu64 "): ", w->id, w->sh->seed);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    abort();
}

static void expect_ok(const worker_t *w, vpmm_status_t st, const char *call)
{
    if (st != VPMM_SUCCESS)
        die(w, "%s failed: %s (%s)", call, vpmm_status_name(st), vpmm_last_error());
}

/*
 * Writes (check = 0) or checks (check = 1) the pattern of it: 8-byte words, tmix64(key + offset),
 * over [0, 64), [size - 64, size) and one word every 4 KiB in between. Returns the first bad
 * offset, or SIZE_MAX.
 */
static size_t pattern(const item_t *it, int check)
{
    size_t head = it->size < HEAD ? it->size : HEAD;
    size_t tail = it->size > 2 * HEAD ? it->size - HEAD : head;
    for (size_t o = 0; o < it->size;) {
        uint64_t v = tmix64(it->key + o);
        size_t n = it->size - o < 8 ? it->size - o : 8;
        if (check) {
            if (memcmp(it->p + o, &v, n) != 0)
                return o;
        } else {
            memcpy(it->p + o, &v, n);
        }
        /* next spot: within the head, the stride, then the tail */
        if (o + 8 < head || o >= tail)
            o += 8;
        else if ((o / STRIDE + 1) * STRIDE + 8 <= tail)
            o = (o / STRIDE + 1) * STRIDE;
        else
            o = tail > o + 8 ? tail : o + 8;
    }
    return SIZE_MAX;
}

static void check_pattern(const worker_t *w, const item_t *it)
{
    size_t bad = pattern(it, 1);
    if (bad != SIZE_MAX) {
        uint64_t want = tmix64(it->key + bad), got = 0;
        memcpy(&got, it->p + bad, it->size - bad < 8 ? it->size - bad : 8);
        die(w,
            "pattern broken at %p + %zu: allocation of %zu bytes%s by thread %u at its op %" PRIu64
            ", want %016" PRIx64 " got %016" PRIx64 " (first min(8, rest) bytes)",
            (void *)it->p, bad, it->size, it->graph ? " (graph pool)" : "", it->owner, it->op, want,
            got);
    }
}

/* Mostly small, some around a page, a few of several pages. */
static size_t random_size(trng_t *r)
{
    uint64_t k = trng_below(r, 1000);
    if (k < 550)
        return (size_t)trng_below(r, 1 * KiB) + 1;
    if (k < 800)
        return (size_t)trng_below(r, 63 * KiB) + 1 * KiB;
    if (k < 930)
        return (size_t)trng_below(r, 960 * KiB) + 64 * KiB;
    if (k < 990)
        return (size_t)trng_below(r, 3 * MiB) + 1 * MiB;
    return (size_t)trng_below(r, 8 * MiB) + 4 * MiB; /* 2 to 6 pages */
}

/* Counts a call made while another thread's per-thread stream is being captured: its markers,
 * if this call needs any, may not go to the legacy stream now. */
static void note_pt_capture(worker_t *w)
{
    w->c.during_pt +=
        atomic_load_explicit(&w->sh->pt_captures, memory_order_relaxed) > w->capturing_pt;
}

static void alloc_item(worker_t *w, vpmm_stream_t stream, int graph, item_t *it)
{
    void *p = NULL;
    note_pt_capture(w);
    it->size = random_size(&w->rng);
    expect_ok(w, vpmm_malloc(w->sh->pool, it->size, stream, &p), "vpmm_malloc");
    if (p == NULL || (uintptr_t)p % VPMM_ALIGNMENT != 0)
        die(w, "vpmm_malloc(%zu) returned %p", it->size, p);
    it->p = p;
    it->owner = w->id;
    it->op = w->c.ops;
    it->graph = graph;
    it->per_thread = is_per_thread(w->sh, stream);
    it->recorded = 0;
    it->key = tmix64(((uint64_t)w->id << 56) ^ (w->c.ops << 8) ^ tmix64((uint64_t)(uintptr_t)p));
    pattern(it, 0);
    w->c.ops++;
    w->c.mallocs++;
    w->c.graph_mallocs += (uint64_t)graph;
    w->c.pt_mallocs += (uint64_t)it->per_thread;
}

static void free_item(worker_t *w, const item_t *it)
{
    check_pattern(w, it);
    note_pt_capture(w);
    expect_ok(w, vpmm_free(w->sh->pool, it->p), "vpmm_free");
    w->c.ops++;
    w->c.frees++;
    w->c.cross_frees += it->owner != w->id;
    w->c.pt_cross_frees += it->per_thread && it->owner != w->id;
    w->c.recorded_frees += (uint64_t)it->recorded;
    w->c.recorded_cross += it->recorded && it->owner != w->id;
}

/* Another stream w uses than s (one of the shared four, or its own per-thread stream): where a
 * block allocated on s is used too. */
static vpmm_stream_t other_stream(worker_t *w, vpmm_stream_t s)
{
    for (;;) {
        vpmm_stream_t o = pick_stream(w);
        if (o != s && !(is_per_thread(w->sh, o) && is_per_thread(w->sh, s)))
            return o;
    }
}

/* Tells the pool that work on stream `on` uses it too (vpmm_record_stream): freed, wherever, its
 * memory is reused by nobody before that stream's work enqueued until then is done (here: none,
 * so the next slow path releases it). Now and then also its own stream, or `on` again: no-ops. */
static void record_item(worker_t *w, item_t *it, vpmm_stream_t on)
{
    note_pt_capture(w);
    expect_ok(w, vpmm_record_stream(w->sh->pool, it->p, on), "vpmm_record_stream");
    it->recorded = 1;
    w->c.ops++;
    w->c.records++;
    if (trng_below(&w->rng, 4) == 0) {
        expect_ok(w, vpmm_record_stream(w->sh->pool, it->p, on), "vpmm_record_stream (again)");
        w->c.ops++;
    }
}

static int mailbox_put(mailbox_t *b, const item_t *it)
{
    int ok;
    pthread_mutex_lock(&b->mu);
    ok = b->n < MAILBOX;
    if (ok)
        b->items[(b->head + b->n++) % MAILBOX] = *it;
    pthread_mutex_unlock(&b->mu);
    return ok;
}

static int mailbox_get(mailbox_t *b, item_t *out)
{
    int ok;
    pthread_mutex_lock(&b->mu);
    ok = b->n > 0;
    if (ok) {
        *out = b->items[b->head];
        b->head = (b->head + 1) % MAILBOX;
        b->n--;
    }
    pthread_mutex_unlock(&b->mu);
    return ok;
}

/* Gives it to another thread (trying each in turn from a random one); 0 if every inbox is full. */
static int hand_over(worker_t *w, const item_t *it)
{
    unsigned first = (unsigned)trng_below(&w->rng, NTHREADS - 1);
    for (unsigned i = 0; i < NTHREADS - 1; i++)
        if (mailbox_put(&w->sh->box[(w->id + 1 + (first + i) % (NTHREADS - 1)) % NTHREADS], it))
            return 1;
    return 0;
}

/* Frees what another thread sent, if anything came. */
static int free_from_inbox(worker_t *w)
{
    item_t it;
    if (!mailbox_get(&w->sh->box[w->id], &it))
        return 0;
    free_item(w, &it);
    return 1;
}

#if VPMM_HAVE_GRAPHS /* used by capture sessions only */
/* Keeps it (to hand over later), else hands it over now; only if every inbox is full, frees it
 * here. */
static void keep(worker_t *w, const item_t *it)
{
    if (w->nlocal < LOCAL)
        w->local[w->nlocal++] = *it;
    else if (!hand_over(w, it))
        free_item(w, it);
}
#endif

/* The documented equations of vpmm_stats_t, which hold at every instant under the lock. */
static void check_stats(worker_t *w)
{
    vpmm_stats_t s;
    expect_ok(w, vpmm_get_stats(w->sh->pool, &s), "vpmm_get_stats");
    w->c.ops++;
    w->c.stats++;
    if (s.reserved_va_bytes != s.allocated_bytes + s.free_bytes + s.hole_bytes + s.zombie_bytes ||
        s.live_bytes > s.allocated_bytes || s.live_bytes > s.peak_live_bytes ||
        s.mapped_bytes > s.peak_mapped_bytes || s.private_live_bytes > s.live_bytes ||
        s.private_mapped_bytes > s.mapped_bytes || s.largest_free_bytes > s.free_bytes ||
        s.live_allocs != s.mallocs - s.frees || s.ooms != 0)
        die(w,
            "inconsistent stats: live %zu allocated %zu peak live %zu mapped %zu peak mapped %zu "
            "free %zu holes %zu zombies %zu reserved %zu private live %zu private mapped %zu "
            "largest free %zu live allocs %" PRIu64 " mallocs %" PRIu64 " frees %" PRIu64
            " ooms %" PRIu64,
            s.live_bytes, s.allocated_bytes, s.peak_live_bytes, s.mapped_bytes, s.peak_mapped_bytes,
            s.free_bytes, s.hole_bytes, s.zombie_bytes, s.reserved_va_bytes, s.private_live_bytes,
            s.private_mapped_bytes, s.largest_free_bytes, s.live_allocs, s.mallocs, s.frees,
            s.ooms);
}

static int count_region(const vpmm_region_info_t *r, void *user)
{
    size_t *n = user;
    (void)r;
    (*n)++;
    return 0;
}

static void introspect(worker_t *w)
{
    vpmm_pool_t *pool = w->sh->pool;
    char report[512];
    size_t regions = 0;
    int code;
    const char *call;
    char *text = NULL;
    size_t len = 0;
    FILE *f;
    switch (trng_below(&w->rng, 5)) {
    case 0:
        expect_ok(w, vpmm_pool_walk(pool, count_region, &regions), "vpmm_pool_walk");
        if (regions == 0)
            die(w, "vpmm_pool_walk visited no region");
        break;
    case 1:
        expect_ok(w, vpmm_pool_oom_report(pool, report, sizeof report), "vpmm_pool_oom_report");
        break;
    case 2:
        expect_ok(w, vpmm_reset_peak_stats(pool), "vpmm_reset_peak_stats");
        break;
    case 3: /* into memory: the lock is held while it writes */
        f = open_memstream(&text, &len);
        if (f == NULL)
            die(w, "open_memstream failed");
        expect_ok(w, vpmm_pool_dump(pool, f), "vpmm_pool_dump");
        fclose(f);
        if (len == 0 || strcmp(vpmm_pool_backend_name(pool), "host") != 0)
            die(w, "vpmm_pool_dump wrote nothing, or the backend is not the host's");
        free(text);
        break;
    default: /* nothing in the test makes a driver call fail (a legacy marker during a
              * per-thread stream's capture would: 906) */
        expect_ok(w, vpmm_pool_last_driver_error(pool, &code, &call),
                  "vpmm_pool_last_driver_error");
        if (code != 0)
            die(w, "driver error %d in %s", code, call ? call : "?");
        break;
    }
    w->c.ops++;
}

static void trim(worker_t *w)
{
    vpmm_stats_t s;
    size_t released = 0;
    expect_ok(w, vpmm_get_stats(w->sh->pool, &s), "vpmm_get_stats");
    expect_ok(
        w, vpmm_trim(w->sh->pool, trng_below(&w->rng, 8) == 0 ? 0 : s.mapped_bytes / 2, &released),
        "vpmm_trim");
    w->c.ops += 2;
    w->c.trims++;
}

static void pool_check(worker_t *w)
{
    size_t bad = vpmm_pool_check(w->sh->pool, stderr);
    if (bad != 0)
        die(w, "vpmm_pool_check found %zu violated invariant(s) (listed above)", bad);
    w->c.ops++;
    w->c.checks++;
}

#if VPMM_HAVE_GRAPHS
/*
 * A graph pool, a capture with allocations and frees in it, a checkpoint, the graph destroyed and
 * the graph pool released; the capture's live allocations go on like any other (another thread
 * frees them, after or before the graph pool went back). Half the captures are of a fresh
 * stream, half of the thread's own per-thread stream (0x2, or 0 where 0 is per-thread): a
 * blocking stream, so while it captures, a marker on the legacy stream — what the other threads'
 * mallocs would record for memory pending on another thread's per-thread stream — would
 * invalidate it. In any mode (global and thread-local: this thread ends what it began), with a
 * yield in the middle so that the others run meanwhile. Then a scratch stream: used, drained and
 * released.
 */
static void capture_session(worker_t *w)
{
    static const vpmm_stream_capture_mode_t modes[] = { VPMM_STREAM_CAPTURE_GLOBAL,
                                                        VPMM_STREAM_CAPTURE_THREAD_LOCAL,
                                                        VPMM_STREAM_CAPTURE_RELAXED };
    static const char *const mode_names[] = { "global", "thread-local", "relaxed" };
    vpmm_pool_t *pool = w->sh->pool;
    const int per_thread = trng_below(&w->rng, 2) == 0;
    const unsigned m = (unsigned)trng_below(&w->rng, 3);
    vpmm_stream_t cs = per_thread ? own_stream(w) : private_stream(w->id, w->fresh, 0);
    vpmm_stream_t scratch = private_stream(w->id, w->sessions, 1);
    vpmm_graph_pool_t *gp = NULL, *serving = NULL;
    vpmm_graph_pool_stats_t gs;
    vpmm_checkpoint_t *cp = NULL;
    vpmm_checkpoint_info_t ci;
    vpmm_graph_t graph = NULL;
    vpmm_status_t st;
    item_t it[8];
    size_t n = 1 + (size_t)trng_below(&w->rng, 8), kept = 0;

    w->sessions++;
    w->fresh += !per_thread;
    expect_ok(w, vpmm_graph_pool_create(pool, &gp), "vpmm_graph_pool_create");
    expect_ok(w, vpmm_capture_begin(pool, gp, cs, modes[m]), "vpmm_capture_begin");
    if (per_thread) {
        w->capturing_pt = 1;
        atomic_fetch_add(&w->sh->pt_captures, 1);
    }
    expect_ok(w, vpmm_capture_graph_pool(pool, cs, &serving), "vpmm_capture_graph_pool");
    if (serving != gp)
        die(w, "vpmm_capture_graph_pool returned another graph pool");
    expect_ok(w, vpmm_graph_pool_release(serving), "vpmm_graph_pool_release");
    w->c.ops += 4;
    for (size_t i = 0; i < n; i++) {
        alloc_item(w, cs, 1, &it[i]);
        if (trng_below(&w->rng, 4) == 0) /* the graph's output, read on a shared stream too */
            record_item(w, &it[i], shared_stream((unsigned)trng_below(&w->rng, NSTREAMS)));
        if (trng_below(&w->rng, 3) == 0 && i > 0) { /* freed within the capture, reused by it */
            free_item(w, &it[i - 1]);
            it[i - 1].p = NULL;
        }
        if (i == n / 2)
            sched_yield(); /* the others allocate and free while it captures */
    }
    /* Nothing in the test invalidates a capture: a failure here is vpmm's or the emulation's
     * (the legacy stream used while a blocking stream captures: 906, then 901 here). */
    st = vpmm_capture_end(pool, cs, &graph);
    if (st != VPMM_SUCCESS)
        die(w, "vpmm_capture_end of a %s capture of %s %p: %s (%s)", mode_names[m],
            per_thread ? "its per-thread stream" : "stream", (void *)cs, vpmm_status_name(st),
            vpmm_last_error());
    if (per_thread) {
        atomic_fetch_sub(&w->sh->pt_captures, 1);
        w->capturing_pt = 0;
        w->c.pt_captures++;
    }
    if (graph == NULL)
        die(w, "vpmm_capture_end gave no graph");
    expect_ok(w, vpmm_graph_pool_stats(gp, &gs), "vpmm_graph_pool_stats");
    for (size_t i = 0; i < n; i++)
        kept += it[i].p != NULL;
    if (gs.captures != 0 || gs.graphs != 1 || gs.live_allocs != kept || !gs.pinned)
        die(w,
            "graph pool g%u after its capture: %" PRIu64 " capture(s), %" PRIu64
            " graph(s), %" PRIu64 " live (want %zu), pinned %d",
            gs.id, gs.captures, gs.graphs, gs.live_allocs, kept, gs.pinned);
    expect_ok(w, vpmm_checkpoint_take(gp, &cp), "vpmm_checkpoint_take");
    expect_ok(w, vpmm_checkpoint_info(cp, &ci), "vpmm_checkpoint_info");
    if (ci.allocs != kept)
        die(w, "checkpoint of g%u holds %zu allocations, want %zu", gs.id, ci.allocs, kept);
    vpmm_checkpoint_destroy(cp);
    w->c.ops += 4;
    /* The survivors join the thread's own: handed over, freed elsewhere, maybe after the graph
     * pool is gone (they are shared allocations then). */
    for (size_t i = 0; i < n; i++)
        if (it[i].p != NULL)
            keep(w, &it[i]);
    expect_ok(w, vpmm_graph_destroy(pool, graph), "vpmm_graph_destroy");
    expect_ok(w, vpmm_graph_pool_release(gp), "vpmm_graph_pool_release");
    w->c.ops += 2;
    w->c.captures++;

    /* The scratch stream: no other thread knows it, so it may be released once drained. */
    for (int i = 0; i < 3; i++) {
        item_t s;
        alloc_item(w, scratch, 0, &s);
        free_item(w, &s);
    }
    expect_ok(w, vpmm_stream_release(pool, scratch), "vpmm_stream_release");
    w->c.ops++;
    w->c.released_streams++;
}
#endif

/* Gives it to any worker (trying each in turn from a random one); 0 if every inbox is full. */
static int give_away(worker_t *t, const item_t *it)
{
    unsigned first = (unsigned)trng_below(&t->rng, NTHREADS);
    for (unsigned i = 0; i < NTHREADS; i++)
        if (mailbox_put(&t->sh->box[(first + i) % NTHREADS], it))
            return 1;
    return 0;
}

/*
 * A short-lived thread: a few blocks on its own per-thread stream, handed to the workers (freed
 * there, mostly after it has gone; only if every inbox is full, here); a quarter of them tell the
 * pool their stream is done (vpmm_stream_release) before they exit, the others just exit. Their
 * records must not pile up: idle ones are freed, and what the others hold is freed once the
 * memory freed on them is reused or known complete.
 */
static void *transient_main(void *arg)
{
    worker_t *t = arg;
    size_t n = 1 + (size_t)trng_below(&t->rng, 6);
    for (size_t i = 0; i < n; i++) {
        item_t it;
        if (trng_below(&t->rng, 4) == 0) { /* a shared stream's block its own stream uses */
            alloc_item(t, shared_stream((unsigned)trng_below(&t->rng, NSTREAMS)), 0, &it);
            record_item(t, &it, own_stream(t));
        } else {
            alloc_item(t, own_stream(t), 0, &it);
        }
        if (!give_away(t, &it))
            free_item(t, &it);
    }
    if (trng_below(&t->rng, 4) == 0) {
        expect_ok(t, vpmm_stream_release(t->sh->pool, own_stream(t)), "vpmm_stream_release");
        t->c.ops++;
        t->c.released_streams++;
    }
    return NULL;
}

/* Waits for w's short-lived thread, if one runs, and takes over its counts. */
static void transient_join(worker_t *w)
{
    if (!w->transient_alive)
        return;
    if (pthread_join(w->transient_tid, NULL) != 0)
        die(w, "pthread_join of its short-lived thread failed");
    w->transient_alive = 0;
    counts_add(&w->c, &w->sh->transient[w->id].c);
}

/* Starts a short-lived thread (after the previous one is gone); it runs alongside w. */
static void transient_start(worker_t *w)
{
    worker_t *t = &w->sh->transient[w->id];
    transient_join(w);
    w->c.transients++;
    *t = (worker_t){ .sh = w->sh,
                     .id = (unsigned)(NTHREADS * w->c.transients) + w->id,
                     .rng = { tmix64(trng_next(&w->rng)) | 1 } };
    if (pthread_create(&w->transient_tid, NULL, transient_main, t) != 0)
        die(w, "pthread_create of a short-lived thread failed");
    w->transient_alive = 1;
    w->c.ops++;
}

static void step(worker_t *w)
{
    uint64_t k = trng_below(&w->rng, 100000);
    item_t it;
    if (k < 20) {
        pool_check(w);
    } else if (k < 120) {
        check_stats(w);
    } else if (k < 140) {
        trim(w);
    } else if (k < 240) {
        introspect(w);
#if VPMM_HAVE_GRAPHS /* without graph/: short-lived threads instead */
    } else if (k < 260) {
        capture_session(w);
#endif
    } else if (k < 300) {
        transient_start(w);
    } else if ((k & 1) && free_from_inbox(w)) {
        /* freed one another thread sent */
    } else if (w->nlocal < LOCAL && (k % 4 != 0 || w->nlocal == 0)) {
        vpmm_stream_t s = pick_stream(w);
        alloc_item(w, s, 0, &it);
        if (trng_below(&w->rng, 16) == 0) /* used on another of its streams too, then handed
                                             over like the rest */
            record_item(w, &it, other_stream(w, s));
        w->local[w->nlocal++] = it;
    } else {
        /* Hand one over. When every inbox is full (their owners are not running), free what came
         * in instead and keep it; with nothing in our own inbox either, let the others run: they
         * empty their inboxes, also once they are done (worker_main). */
        size_t i = (size_t)trng_below(&w->rng, w->nlocal);
        if (hand_over(w, &w->local[i]))
            w->local[i] = w->local[--w->nlocal];
        else if (!free_from_inbox(w))
            sched_yield();
    }
}

static void drain_inbox(worker_t *w)
{
    while (free_from_inbox(w))
        ;
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    shared_t *sh = w->sh;
    pthread_barrier_wait(&sh->barrier); /* everyone starts together */
    while (w->c.ops < sh->ops_per_thread)
        step(w);
    transient_join(w); /* what it sent is in the inboxes before this thread counts as done */
    /* The end: keep emptying the inbox until everyone is done (a thread with its hands full
     * waits for room in some inbox), then hand what is left to the next thread (nobody sends
     * any more, its inbox is empty and MAILBOX ≥ LOCAL), and free what arrives. */
    atomic_fetch_add(&sh->finished, 1);
    while (atomic_load(&sh->finished) < NTHREADS)
        if (!free_from_inbox(w))
            sched_yield();
    pthread_barrier_wait(&sh->barrier);
    drain_inbox(w);
    pthread_barrier_wait(&sh->barrier);
    for (size_t i = 0; i < w->nlocal; i++)
        if (!mailbox_put(&sh->box[(w->id + 1) % NTHREADS], &w->local[i]))
            die(w, "final hand-over: inbox of thread %u full", (w->id + 1) % NTHREADS);
    w->nlocal = 0;
    pthread_barrier_wait(&sh->barrier);
    drain_inbox(w);
    sh->counts[w->id] = w->c;
    return NULL;
}

static uint64_t env_u64(const char *name, uint64_t def)
{
    const char *v = getenv(name);
    return v && *v ? strtoull(v, NULL, 10) : def;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/*
 * One run: NTHREADS workers on one pool, VPMM_THREADS_OPS / 2 operations in all. per_thread:
 * the pool's default_stream is VPMM_DEFAULT_STREAM_PER_THREAD, so stream 0 is each thread's own
 * per-thread stream (and among the streams used); else it is the legacy stream, never used.
 * worker: the pool's background worker unmaps zombies meanwhile (config.worker).
 */
static void run(int per_thread, int worker)
{
    static shared_t sh; /* large: the mailboxes */
    static worker_t workers[NTHREADS], transients[NTHREADS];
    pthread_t tid[NTHREADS];
    vpmm_config_t cfg;
    vpmm_stats_t s;
    counts_t total = { 0 };
    uint64_t streams_before;
    int code = 0;
    const char *call = NULL;
    double t0, dt;

    /* Defragmentation under 8 threads reserves ~100 GiB of fresh VA over a run (cheap on a real
     * system), more than valgrind gives: there it ends in an OOM. ASan and TSan cover it. */
    if (getenv("VPMM_TEST_UNDER_VALGRIND") != NULL)
        skip();
    memset(&sh, 0, sizeof sh);
    sh.seed = env_u64("VPMM_THREADS_SEED", 20261122) + (uint64_t)per_thread;
    sh.ops_per_thread = (env_u64("VPMM_THREADS_OPS", 1200000) / 2 + NTHREADS - 1) / NTHREADS;
    sh.per_thread_default = per_thread;
    sh.transient = transients;
    vpmm_config_init(&cfg);
    cfg.backend = VPMM_BACKEND_HOST;
    cfg.ignore_env = 1;
    cfg.va_size = 64 * GiB;
    cfg.host_memory = 16 * GiB; /* only what is touched costs: live memory stays ~100s of MiB */
    cfg.default_stream = per_thread ? VPMM_DEFAULT_STREAM_PER_THREAD : VPMM_DEFAULT_STREAM_LEGACY;
    cfg.worker = worker;
    assert_int_equal(vpmm_pool_create(&cfg, &sh.pool), VPMM_SUCCESS);
    assert_int_equal(pthread_barrier_init(&sh.barrier, NULL, NTHREADS + 1), 0);
    for (unsigned i = 0; i < NTHREADS; i++) {
        assert_int_equal(pthread_mutex_init(&sh.box[i].mu, NULL), 0);
        workers[i] = (worker_t){ .sh = &sh, .id = i, .rng = { tmix64(sh.seed + i) | 1 } };
        assert_int_equal(pthread_create(&tid[i], NULL, worker_main, &workers[i]), 0);
    }
    t0 = now_s();
    pthread_barrier_wait(&sh.barrier); /* start */
    for (int i = 0; i < 3; i++)
        pthread_barrier_wait(&sh.barrier); /* the end's phases */
    for (unsigned i = 0; i < NTHREADS; i++)
        assert_int_equal(pthread_join(tid[i], NULL), 0);
    dt = now_s() - t0;

    for (unsigned i = 0; i < NTHREADS; i++) {
        counts_add(&total, &sh.counts[i]);
        assert_int_equal(sh.box[i].n, 0);
        pthread_mutex_destroy(&sh.box[i].mu);
    }
    pthread_barrier_destroy(&sh.barrier);

    s = tstats(sh.pool);
    print_message("seed %" PRIu64 ", stream 0 %s: %" PRIu64 " ops in %.2f s (%.0f ops/s) on %d "
                  "threads x %d streams + per-thread: %" PRIu64 " mallocs (%" PRIu64
                  " on per-thread streams, %" PRIu64 " in %" PRIu64 " captures, %" PRIu64
                  " of them of a per-thread stream), %" PRIu64 " frees (%" PRIu64
                  " on another thread, %" PRIu64 " of per-thread blocks), %" PRIu64
                  " calls during another thread's per-thread capture, %" PRIu64
                  " short-lived threads, %" PRIu64 " blocks recorded on another stream (%" PRIu64
                  " freed, %" PRIu64 " on another thread), %" PRIu64 " checks, %" PRIu64
                  " trims, %" PRIu64 " stats, %" PRIu64 " streams released; pool: %" PRIu64
                  " defrags, %" PRIu64 " pages remapped, %" PRIu64 " released, %" PRIu64
                  " cross-stream waits, peak mapped %zu MiB, %" PRIu64 " streams tracked\n",
                  sh.seed, per_thread ? "per-thread" : "legacy", total.ops, dt,
                  (double)total.ops / dt, NTHREADS, NSTREAMS, total.mallocs, total.pt_mallocs,
                  total.graph_mallocs, total.captures, total.pt_captures, total.frees,
                  total.cross_frees, total.pt_cross_frees, total.during_pt, total.transients,
                  total.records, total.recorded_frees, total.recorded_cross, total.checks,
                  total.trims, total.stats, total.released_streams, s.defrags, s.pages_remapped,
                  s.pages_released, s.cross_stream_waits, s.peak_mapped_bytes / MiB, s.streams);

    assert_int_equal(total.mallocs, total.frees);
    assert_int_equal(s.mallocs, total.mallocs);
    assert_int_equal(s.frees, total.frees);
    assert_true(total.cross_frees * 20 >= total.frees * 19); /* ≥ 95% freed elsewhere */
    assert_true(total.pt_mallocs > 0 && total.pt_cross_frees > 0);
#if VPMM_HAVE_GRAPHS
    assert_true(total.pt_captures > 0 && total.transients > 0);
#else
    assert_true(total.transients > 0);
#endif
    assert_true(total.records > 0 && total.recorded_frees == total.records);
    assert_int_equal(s.live_bytes, 0);
    assert_int_equal(s.live_allocs, 0);
    assert_int_equal(s.graph_pools, 0);
    assert_int_equal(s.ooms, 0);
    /* No driver call failed: in particular no marker went to the legacy stream while a
     * per-thread stream captured (906), even where vpmm would have swallowed the failure. */
    assert_int_equal(vpmm_pool_last_driver_error(sh.pool, &code, &call), VPMM_SUCCESS);
    if (code != 0)
        fail_msg("driver error %d in %s", code, call ? call : "?");
    CHECK_POOL(sh.pool);
    /* The capture streams still hold freed memory's markers: release them (they are unused
     * now), then the shared ones. */
    for (unsigned i = 0; i < NTHREADS; i++)
        for (uint64_t k = 0; k < workers[i].fresh; k++)
            assert_int_equal(vpmm_stream_release(sh.pool, private_stream(i, k, 0)), VPMM_SUCCESS);
    for (unsigned i = 0; i < NSTREAMS; i++)
        assert_int_equal(vpmm_stream_release(sh.pool, shared_stream(i)), VPMM_SUCCESS);
    CHECK_POOL(sh.pool);
    /* What is left are the per-thread stream records of threads that have all gone (this one
     * never allocated): the workers' and the short-lived threads'. Every block is freed and no
     * work is pending (the test enqueues none), so a trim makes all that memory ready and gives
     * every page back ("synchronise first to release everything"), and the records, holding
     * nothing then, go on the next poll (ALGORITHM.md, "Stream identity"): the second trim's.
     * The bound is 0 streams and 0 bytes mapped, however many threads came and went. */
    streams_before = tstats(sh.pool).streams;
    assert_int_equal(vpmm_trim(sh.pool, 0, NULL), VPMM_SUCCESS);
    assert_int_equal(vpmm_trim(sh.pool, 0, NULL), VPMM_SUCCESS);
    s = tstats(sh.pool);
    CHECK_POOL(sh.pool);
    /* Destroyed before the verdict: a failure must not keep its address space from the next run. */
    assert_int_equal(vpmm_pool_destroy(sh.pool), VPMM_SUCCESS);
    if (s.streams != 0 || s.mapped_bytes != 0)
        fail_msg("after the final trims the pool still tracks %" PRIu64 " stream(s) (%" PRIu64
                 " before) and maps %zu MiB (%zu MiB of it free) in %" PRIu64
                 " VA chunk(s): records of departed threads and their memory pile up",
                 s.streams, streams_before, s.mapped_bytes / MiB, s.free_bytes / MiB, s.va_chunks);
}

static void test_threads(void **state)
{
    (void)state;
    run(0, 0);
}

static void test_threads_per_thread_default(void **state)
{
    (void)state;
    run(1, 1); /* with the background worker (VPMM_WORKER=1) unmapping beside the 8 threads */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_threads_per_thread_default),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
