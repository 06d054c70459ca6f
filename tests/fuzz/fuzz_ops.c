/*
 * fuzz_ops.c — a libFuzzer target: each input is decoded into a sequence of pool operations on
 * the host backend (wrapped in the fault decorator), and the pool is checked after every one.
 *
 * Per input: a fresh pool (64 MiB VA chunks, a small emulated device so that OOM is reached) on
 * device 0 of a host node of one or two devices, four created streams, the two spellings of the
 * legacy stream and the per-thread handle (and two created streams of device 1 on two devices),
 * four threads (the main one and three persistent workers), the segment hook with its mirror,
 * then one operation after the other until the input is exhausted, then a full cleanup (captures
 * ended by the threads that began them, graphs destroyed, everything freed, graph pools released,
 * the importer's opens closed and the importer destroyed, pool destroyed) after which the fault
 * wrappers and the host nodes must hold nothing and no descriptor may be left open (a leak is a
 * finding). A finding prints what was expected and what happened and calls abort(), which
 * libFuzzer records as a crash. The operations and checks of several devices and of CUDA IPC
 * (GRANT, EXPORT, OPEN, CLOSE, UNSHARE, the segment mirror) are in fuzz_devices.c, whose head
 * comment describes their model; the workers in fuzz_threads.c; the stream-order model (what
 * vpmm owes a stream that gets another stream's freed memory, checked after every operation) in
 * fuzz_order.c.
 *
 * Threads. Each operation runs on the current thread (THREAD selects it; the main thread to
 * begin with). An operation for a worker is handed to it and the main thread waits for it, so
 * one operation runs at a time and a run is reproducible from its input; the thread decides what
 * the calls mean: which per-thread stream 0x2 (and 0 when per-thread) names, which thread began a
 * capture, which thread frees an allocation.
 *
 * Encoding. Byte 0 configures the pool:
 *   bits 0-1  page size / driver granularity: 2M/2M, 64K/64K, 256K/64K, 4M/2M
 *   bits 2-3  emulated device memory: 64, 128, 256 or 32 MiB (a quarter of it with 64K pages)
 *   bits 4-5  exact-size cache: default, off, 100 %, 1 %
 *   bit 6     VPMM_MAX_BYTES = 40 MiB        bit 7  two preallocated pages
 * Byte 1 configures it further:
 *   bit 0     stream 0 is the calling thread's per-thread stream (config.default_stream =
 *             VPMM_DEFAULT_STREAM_PER_THREAD; the host backend's per_thread_default_stream)
 *   bit 1     the background worker (config.worker = 1). Its thread is held; after every
 *             operation one of its passes runs on the fuzzing thread (vpmm_i_worker_step): the
 *             same collect / unmap without the lock / commit, at defined points, so that a run
 *             stays reproducible from its input (test_worker runs the thread itself, under TSan)
 *   bits 2-3  config.handle_pages: 1, 2, 4 or 8 pages per growth handle
 *   bits 4-5  size classes (config.small_bytes): the default (an 8th of a page), none (1), a
 *             32nd of a page, or a whole page (every sub-page request small)
 *   bit 6     the host node has two devices (vpmm_host_options_t.devices = 2): the pool is on
 *             device 0, a second view of device 1 (vpmm_host_open_device) makes the streams P1
 *             and P2, which join the stream slots
 *   bit 7     with bit 6: device 1 is isolated (no peer access to or from it)
 * This is the fourth encoding: the second added byte 1 and THREAD (22), the third RECORD_STREAM
 * (23, a MALLOC before), the fourth byte 1's bits 6-7 (ignored before), GRANT, EXPORT, OPEN,
 * CLOSE, UNSHARE (24-28; 24-26 were MALLOC, 27-28 FREE), FAULT's kind bit 3 and its entry operand
 * fixed mod 27 (mod 22 when the third was defined). make_corpus.py --upgrade rewrites inputs of
 * the third (--from 2: the second, --from 1: the first) so that they decode to the same
 * operations.
 * Then each operation is one opcode byte (op = byte & 31; 29-30 are MALLOC and 31 FREE again,
 * so that mutations favour the common pair) followed by its operand bytes, little-endian; an
 * operand read past the end is 0, and the input ends at the next opcode. `s` is a stream byte:
 * slot s % 7 of { NULL, 0x1, S1, S2, S3, S4, 0x2 } (s % 9 of the same then P1, P2 on two
 * devices), as the current thread names it: NULL and 0x1 are the legacy stream (NULL is the
 * thread's per-thread stream instead when byte 1 says so), 0x2 (VPMM_STREAM_PER_THREAD) is the
 * thread's per-thread stream, S1-S4 are created streams, P1 and P2 created streams of device 1.
 * Device 1's streams are used like S1-S4 (MALLOC, FREE, WORK, RECORD_STREAM, STREAM_RELEASE, and
 * the capture queries, which find them not capturing) but never captured nor launched on:
 * CAPTURE_BEGIN, EXT_BEGIN and an EXEC launch naming one are skipped.
 *    0 MALLOC      s cls u8, v u32   size by cls % 8: 0 v%256+1, 1 v%64K+1, 2 v%4M+1, 3 v%32M+1,
 *                                    4 (v%40+1) pages + ((v>>8)%5-2)*256, 5 an absurd one (0,
 *                                    SIZE_MAX, VA size +-, 2^62 ...), 6 v itself, 7 v%128M+1
 *    1 FREE        v u16             the live allocation made by malloc #v of this input (malloc
 *                                    ops are numbered from 0, mod 65536), else live[v % n]
 *    2 FREE_BAD    kind u8, v u16, off u32   kind % 7: NULL, an already freed pointer, an interior
 *                                    pointer, a stack address, a heap/static address, another
 *                                    pool's allocation, an address near the pool's memory
 *    3 WORK        s kind u8, n u8   kind % 5: enqueue n%4+1 kernels, complete s, advance s by
 *                                    n%4+1, complete all, advance every stream by 1 (the six
 *                                    slots but 0x2, each thread's per-thread stream, P1, P2). On a
 *                                    per-thread stream the control acts on thread
 *                                    (current + (kind>>3)) % 4's, by its vpmm_host_thread_stream
 *                                    key (issued from the current thread)
 *    4 STREAM_RELEASE s              (skipped while s is being captured: it is about to die)
 *    5 CAPTURE_BEGIN  s gp u8, mode u8   gp % (graph pools + 1): one held, or NULL (a new one);
 *                                    mode % 4: GLOBAL, THREAD_LOCAL, RELAXED, an invalid mode
 *    6 CAPTURE_END    s              vpmm_capture_end; the graph is kept
 *    7 EXT_BEGIN      s              a capture begun outside vpmm (vpmm_host_begin_capture,
 *                                    global mode)
 *    8 EXT_END        s how u8       ended outside vpmm: how % 2: graph destroyed, or kept
 *    9 CAPTURE_REGISTER s gp u8      vpmm_capture_register with a held graph pool
 *   10 CAPTURE_GP     s              vpmm_capture_graph_pool (a new handle reference)
 *   11 GRAPH_DESTROY  i u8           vpmm_graph_destroy of a kept graph
 *   12 EXEC           kind u8, i u8, s   kind % 3: instantiate a graph, launch an exec on s,
 *                                    destroy an exec (host backend controls)
 *   13 GP_CREATE                     vpmm_graph_pool_create
 *   14 GP_REF         kind u8, i u8  retain or release a held graph pool handle
 *   15 CK_TAKE        i u8           vpmm_checkpoint_take of a held graph pool
 *   16 CK_REAPPLY     gp u8, ck u8, dead u8, mask u32   dead % 4: none dead, the checkpoint's
 *                                    allocations picked by mask (twice), picked plus one bad
 *                                    entry (bit 2: a foreign pointer, else a duplicate)
 *   17 CK_DESTROY     i u8
 *   18 TRIM           kind u8, v u16 kind % 4: target 0, v*64K, SIZE_MAX, v*64K without out
 *   19 FAULT          kind u8, entry u8, n u8   result: kind bit 0 (ERROR / OUT_OF_MEMORY);
 *                                    (kind>>1) % 4: entry % 27 (driver.h's entries, the
 *                                    several-devices ones included) fails at its (n%8+1)-th call,
 *                                    any entry at the (n%16+1)-th, entry from its (n%4+1)-th call
 *                                    on (release entries: once), or one failure during the final
 *                                    vpmm_pool_destroy; kind bit 3 (first three modes): the first
 *                                    revoke_access fails too (a refused grant's undo). Armed for
 *                                    the next executed operation, on the pool's driver (OPEN and
 *                                    CLOSE: on the importer's). get_access is never failed (the
 *                                    decorator leaves the pool check's query alone).
 *   20 INSPECT        kind u8, i u8  kind % 8: stats, walk, dump, OOM report, last driver
 *                                    error, reset peaks, graph pool stats, checkpoint info
 *   21 SYNC                          the device synchronised by the application (it invalidates
 *                                    captures in progress, as in CUDA's global mode)
 *   22 THREAD         t u8           the following operations run on thread t % 4 (0: main)
 *   23 RECORD_STREAM  s kind u8, v u16, off u32   vpmm_record_stream(ptr, s), s as the current
 *                                    thread names it. kind bit 7 clear: ptr is the live
 *                                    allocation v (as FREE picks it); skipped with none. Set:
 *                                    ptr is FREE_BAD's kind (kind & 127) % 7 with v and off
 *                                    (NULL, freed, interior, stack, heap/static, another pool's,
 *                                    near the pool's memory): vpmm_free's statuses, no change
 *   24 GRANT          d u8           vpmm_pool_grant_access(device d % 8 of { 0, 1, 1, 1, 2, -1,
 *                                    64, INT_MIN }): the own device and a granted one change
 *                                    nothing; 1 on one device, 2 and the others do not exist
 *                                    (INVALID_ARGUMENT), an isolated 1 is NOT_SUPPORTED
 *   25 EXPORT         kind u8, v u16, off u32   vpmm_ipc_export, the handle bytes kept (the
 *                                    last 8). kind bit 7 clear: the live allocation v (as FREE
 *                                    picks it; skipped with none), bit 6: with a buffer of
 *                                    off % 64 bytes (too small; 0: NULL). Set: FREE_BAD's kind
 *                                    (kind & 127) % 7 with v and off
 *   26 OPEN           h u8, kind u8  vpmm_ipc_open in the importer of kept handle h % n, made at
 *                                    the first OPEN: kind % 8 0-3 as exported; 4 one byte short,
 *                                    5 a wrong magic, 6 a wrong version, 7 NULL (refused)
 *   27 CLOSE          i u8           vpmm_ipc_close in the importer: bit 7 clear, open pointer
 *                                    i % n; set, (i & 127) % 3: NULL, a stack address, the last
 *                                    pointer closed (when not open again)
 *   28 UNSHARE        kind u8, v u16, off u32   vpmm_ipc_unshare, the pointer as EXPORT's
 *
 * An operation with nothing to act on (a FREE with no live allocation frees NULL, but e.g. a
 * CK_REAPPLY with no checkpoint) is skipped: it is neither checked nor counted; THREAD is not
 * counted either. Built without graph/ (VPMM_HAVE_GRAPHS unset), operations 5-17 (captures, graph
 * pools, graphs, checkpoints) are skipped the same way, without reading their operands.
 * The count of executed operations is printed at exit ("fuzz_ops: N operations in M inputs"),
 * then how many streams were recorded on allocations, frees deferred by them and reapplies that
 * had to be refused for them, then grants, exports, opens, closes, unshares and segment events.
 *
 * Checks after every operation: vpmm_pool_check() == 0, vpmm_host_check() == 0, the driver holds
 * exactly the handles, mappings, reservations and events the pool believes it holds, and no user
 * object reference is left with the caller; the same of the importer; and fuzz_devices.c's
 * (peer access, shares, segments). Per operation: the status is one that call may
 * return for that input (bad input gets its exact status and leaves the pool unchanged: stats
 * and region layout are compared), a failed malloc sets the pointer to NULL, a successful one is
 * 256-aligned, overlaps no tracked allocation and is writable at both ends (a stamp written there
 * is checked on free, after reapply and on walk), the walk and the stats agree with the tracked
 * set, and a reapply leaves exactly the checkpoint's allocations (minus the dead ones) in its
 * graph pool and touches no other.
 *
 * Streams and captures, per thread:
 *  - Stream order. The application uses an allocation on its allocation stream only. Memory
 *    freed on stream A while A's work (up to item q) is pending, then given (by address, or by
 *    the physical pages behind it) to a malloc on another stream B, outside captures: no work
 *    item B enqueues after that malloc may complete before A has completed q (vpmm owes B a
 *    GPU-side wait; the host backend completes an item only after what it waits for). Streams are
 *    told apart as the host tells them apart: two threads' per-thread streams are two streams.
 *    After vpmm_stream_release the stream is gone: what was allocated on it had its last work
 *    at the release.
 *  - Other streams' uses (vpmm_record_stream). Each tracked allocation keeps the streams recorded
 *    on it (not its own stream, nor one recorded before; a stream on a released stream's handle
 *    is a new one, its own stream's included). Once it is freed, if a recorded stream U had work
 *    pending (up to item q, or its release), the memory goes to no stream — its own included, in
 *    a capture or not, by address or by physical page, nor to a reapply's revived allocation —
 *    before U has completed q; then the rule above applies (its own stream at once, others after
 *    its work). Meanwhile, after every operation: the walk shows it as one FREE, not ready region
 *    starting where it was (deferred: neither reallocated, merged into, unmapped nor moved) and the
 *    stats' free bytes are exactly the walk's free regions, deferred ones included; a reapply of
 *    the graph pool holding it returns exactly VPMM_ERROR_CHECKPOINT_CONFLICT (when nothing else
 *    refuses it first: another graph pool's checkpoint, a capture, a bad dead list) and leaves
 *    the pool unchanged; a reapply keeps the uses of the allocations it keeps (the same
 *    allocation, on the same stream record) and a revived one has none. And no marker is recorded
 *    on a stream vpmm_stream_release retired (the application may have destroyed it): the markers
 *    of a retired record never grow.
 *  - Captures. Ends follow CUDA's rule, which the host enforces: unless the mode is RELAXED, only
 *    the thread that began a capture may end it (another thread gets VPMM_ERROR_DRIVER, and the
 *    capture goes on); 0x2 from another thread names that thread's own stream. A capture's
 *    allocations come from its graph pool (never the shared pool), the one it was begun with,
 *    registered or first served by, and vpmm_capture_graph_pool returns that one. A capture vpmm
 *    knows of (holds a record of) is never invalidated unless the input did it: SYNC, or the
 *    application's own work on the legacy stream (WORK enqueue, a graph launch) while the capture
 *    involves a per-thread stream (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT). vpmm does no legacy-stream
 *    work (markers, GPU-side waits) while it knows of a capture (docs/ALGORITHM.md), so a malloc
 *    or a release on the legacy stream breaks nothing then; a release of the legacy stream is
 *    refused then instead (VPMM_ERROR_STREAM_CAPTURING: its last marker would be legacy work).
 *    While vpmm knows of none, its legacy-stream work may break a per-thread capture it has not
 *    seen (begun outside vpmm, neither registered nor allocated in), and a malloc on any stream
 *    or a release of the legacy stream may then fail with 906 (VPMM_ERROR_DRIVER): documented,
 *    the application's to avoid by registering the capture. "Knows of" means a record of a
 *    capture still in progress: a record of one already over (ended outside vpmm) guards nothing,
 *    as the call may notice that and end it before its legacy-stream work.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_internal.h"
#include "fuzz_ops.h"
#include "test_rng.h"

enum {
    OP_MALLOC,
    OP_FREE,
    OP_FREE_BAD,
    OP_WORK,
    OP_STREAM_RELEASE,
    OP_CAPTURE_BEGIN,
    OP_CAPTURE_END,
    OP_EXT_BEGIN,
    OP_EXT_END,
    OP_CAPTURE_REGISTER,
    OP_CAPTURE_GP,
    OP_GRAPH_DESTROY,
    OP_EXEC,
    OP_GP_CREATE,
    OP_GP_REF,
    OP_CK_TAKE,
    OP_CK_REAPPLY,
    OP_CK_DESTROY,
    OP_TRIM,
    OP_FAULT,
    OP_INSPECT,
    OP_SYNC,
    OP_THREAD,
    OP_RECORD_STREAM,
    OP_GRANT,
    OP_EXPORT,
    OP_OPEN,
    OP_CLOSE,
    OP_UNSHARE,
    OP_COUNT
};

static const char *const op_names[OP_COUNT] = {
    "MALLOC",        "FREE",          "FREE_BAD",   "WORK",          "STREAM_RELEASE",
    "CAPTURE_BEGIN", "CAPTURE_END",   "EXT_BEGIN",  "EXT_END",       "CAPTURE_REGISTER",
    "CAPTURE_GP",    "GRAPH_DESTROY", "EXEC",       "GP_CREATE",     "GP_REF",
    "CK_TAKE",       "CK_REAPPLY",    "CK_DESTROY", "TRIM",          "FAULT",
    "INSPECT",       "SYNC",          "THREAD",     "RECORD_STREAM", "GRANT",
    "EXPORT",        "OPEN",          "CLOSE",      "UNSHARE",
};

static fz_t fz_state;
static uint64_t total_ops, total_inputs;
static uint64_t records_made, conflicts_expected; /* printed at exit, with gated_frees */
static FILE *devnull;
static vpmm_pool_t *side_pool; /* another pool: its allocation is a foreign pointer here */
static void *side_ptr;
static unsigned char static_buf[4096];
int fz_verbose;

uint64_t vpmm_fuzz_operations(void)
{
    return total_ops;
}

/* ---- findings -------------------------------------------------------------------------------- */

void finding(const fz_t *z, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr,
            "\nfuzz_ops: FINDING at operation %llu (%s, thread %u) of this input, config "
            "0x%02x 0x%02x: ",
            (unsigned long long)z->nop, z->op >= 0 ? op_names[z->op] : "cleanup", z->thread, z->cfg,
            z->cfg2);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n  vpmm_last_error: %s\n", vpmm_last_error());
    fprintf(stderr, "fuzz_ops: %llu operations in %llu inputs before this finding\n",
            (unsigned long long)total_ops, (unsigned long long)total_inputs);
    fflush(stderr);
    abort();
}

/* st must be in `allowed`; an armed fault adds DRIVER and OUT_OF_MEMORY unless exact. */
void expect_status(const fz_t *z, const char *call, vpmm_status_t st, unsigned allowed, int exact)
{
    if (fz_verbose)
        fprintf(stderr, "    %s: %s\n", call, vpmm_status_name(st));
    if (z->armed && !exact)
        allowed |= S(VPMM_ERROR_DRIVER) | S(VPMM_ERROR_OUT_OF_MEMORY);
    if ((unsigned)st >= 32 || (allowed & S(st)) == 0)
        finding(z, "%s returned %s (%d), not allowed here (allowed mask 0x%x%s)", call,
                vpmm_status_name(st), (int)st, allowed, z->armed ? ", fault armed" : "");
}

/* ---- input ----------------------------------------------------------------------------------- */

unsigned rd8(fz_t *z)
{
    return z->pos < z->len ? z->in[z->pos++] : 0;
}

unsigned rd16(fz_t *z)
{
    unsigned v = rd8(z);
    return v | rd8(z) << 8;
}

uint32_t rd32(fz_t *z)
{
    uint32_t v = rd16(z);
    return v | (uint32_t)rd16(z) << 16;
}

/* An allocation's size as the pool rounds it. */
size_t rnd(size_t n)
{
    return (n + VPMM_ALIGNMENT - 1) & ~(size_t)(VPMM_ALIGNMENT - 1);
}

/* ---- streams: slots, threads, identities ---------------------------------------------------
 *
 * A stream operand names a slot; what the slot names depends on the thread that runs the
 * operation, as in CUDA: 0x2 is that thread's per-thread stream, and so is NULL when stream 0 is
 * per-thread. vpmm gets the slot's handle (from that thread); the harness's own controls and
 * queries use the host backend's key for the stream it names (vpmm_host_thread_stream for a
 * per-thread stream), which is valid from any thread.
 */

static int slot_of(fz_t *z)
{
    return (int)(rd8(z) % (unsigned)z->nslots);
}

/* Whether slot si names a stream of device 1 (P1, P2: two devices only). */
static int slot_is_peer(int si)
{
    return si >= SLOT_P1;
}

/* What the application passes to vpmm for slot si. */
static vpmm_stream_t slot_handle(const fz_t *z, int si)
{
    if (si == 0)
        return NULL;
    if (si == 1)
        return VPMM_STREAM_LEGACY;
    if (si == SLOT_PT)
        return VPMM_STREAM_PER_THREAD;
    if (slot_is_peer(si))
        return z->dev.pc[si - SLOT_P1];
    return z->created[si - 2];
}

/* The stream slot si names in thread t. */
static int ident_in(const fz_t *z, int si, unsigned t)
{
    if (si == SLOT_PT || (si == 0 && z->ptd_default))
        return ID_PT0 + (int)t;
    if (si < 2)
        return ID_LEGACY;
    if (slot_is_peer(si))
        return ID_P1 + si - SLOT_P1;
    return ID_S1 + si - 2;
}

/* The stream slot si names in the thread running the current operation. */
static int ident_of(const fz_t *z, int si)
{
    return ident_in(z, si, z->thread);
}

static int ident_is_pt(int id)
{
    return id >= ID_PT0 && id < ID_PT0 + NTHREADS;
}

/* Which of vpmm's stream records slot si names (as its stream identity, vpmm_stream_key_t):
 * the stream's, except that vpmm keeps NULL and 0x1 apart even where both are the legacy
 * stream. vpmm_stream_release retires one record: allocations made on it before belong to a
 * stream that is gone, whose work ended with the release. */
static int rec_of(const fz_t *z, int si)
{
    int id = ident_of(z, si);
    return id == ID_LEGACY && si == 1 ? NIDENT : id;
}

/* The host backend's name for a stream, usable from any thread. */
vpmm_stream_t ident_key(const fz_t *z, int id)
{
    if (id == ID_LEGACY)
        return VPMM_STREAM_LEGACY;
    if (ident_is_pt(id))
        return z->ptkey[id - ID_PT0];
    if (id >= ID_P1)
        return z->dev.pc[id - ID_P1];
    return z->created[id - ID_S1];
}

/* The handle that names stream id from its own thread (per-thread streams) or any thread. */
static vpmm_stream_t ident_handle(const fz_t *z, int id)
{
    return ident_is_pt(id) ? VPMM_STREAM_PER_THREAD : ident_key(z, id);
}

/* Which record, as rec_of numbers them, vpmm's stream key k names (-1: none of the input's). */
static int rec_of_key(const fz_t *z, vpmm_stream_key_t k)
{
    if (k.handle == VPMM_STREAM_LEGACY)
        return NIDENT;
    if (k.handle == NULL)
        return ID_LEGACY;
    for (int t = 0; t < NTHREADS; t++)
        if (k.handle == VPMM_STREAM_PER_THREAD && k.owner == z->token[t])
            return ID_PT0 + t;
    for (int i = 0; i < NCREATED; i++)
        if (k.handle == z->created[i])
            return ID_S1 + i;
    for (int i = 0; i < NPEER; i++)
        if (k.handle != NULL && k.handle == z->dev.pc[i])
            return ID_P1 + i;
    return -1;
}

/* The stream identities of this input: device 1's only on a node of two devices. */
int nident(const fz_t *z)
{
    return z->dev.devices > 1 ? NIDENT : ID_P1;
}

const char *ident_name(int id)
{
    static const char *const names[NIDENT] = { "legacy", "S1",  "S2",  "S3", "S4", "PT0",
                                               "PT1",    "PT2", "PT3", "P1", "P2" };
    return id >= 0 && id < NIDENT ? names[id] : "?";
}

uint64_t enqueued_on(const fz_t *z, int id)
{
    return vpmm_host_stream_enqueued(z->host, ident_key(z, id));
}

uint64_t completed_on(const fz_t *z, int id)
{
    return vpmm_host_stream_completed(z->host, ident_key(z, id));
}

static vpmm_capture_status_t cap_of(const fz_t *z, int id, uint64_t *out_id)
{
    vpmm_capture_status_t cap = VPMM_CAPTURE_NONE;
    uint64_t cid = 0;
    if (z->host->capture_info(z->host, ident_key(z, id), &cap, &cid, NULL) != VPMM_DRV_OK)
        finding(z, "the host backend's capture_info failed on stream %s", ident_name(id));
    if (out_id != NULL)
        *out_id = cid;
    return cap;
}

static cap_t *cap_find(fz_t *z, uint64_t id)
{
    for (size_t i = 0; i < z->ncaps; i++)
        if (z->caps[i].id == id)
            return &z->caps[i];
    return NULL;
}

static void cap_add(fz_t *z, uint64_t id, int ident, int mode)
{
    if (cap_find(z, id) != NULL || z->ncaps == MAX_CAPS)
        finding(z,
                "capture %llu begun on %s: a capture id seen twice, or more captures than "
                "streams",
                (unsigned long long)id, ident_name(ident));
    z->caps[z->ncaps++] = (cap_t){ .id = id, .ident = ident, .thread = z->thread, .mode = mode };
}

/* Whether a capture's end from the current thread is refused because another thread began it
 * (CUDA and the host backend: unless the mode is RELAXED, only the beginning thread may end it). */
static int cap_wrong_thread(const fz_t *z, const cap_t *c)
{
    return c->mode != VPMM_STREAM_CAPTURE_RELAXED && c->thread != z->thread;
}

/* A per-thread stream's capture, if any is in progress (they are what legacy work breaks). */
static int ptds_capturing(const fz_t *z)
{
    for (int t = 0; t < NTHREADS; t++)
        if (cap_of(z, ID_PT0 + t, NULL) != VPMM_CAPTURE_NONE)
            return 1;
    return 0;
}

/* Whether vpmm holds a record of a capture that is still in progress. Such a record lasts as long
 * as its capture, so vpmm stays off the legacy stream for the whole of the next call.
 * pool->captures is not this: it also counts records of captures already over (ended outside
 * vpmm, on another thread's per-thread stream or with their graph destroyed) that vpmm has not
 * noticed yet, and the call under test may notice and end them first (vpmm_g_collect opens the
 * malloc slow path), then do legacy-stream work. */
static int known_capture_running(const fz_t *z)
{
    for (size_t i = 0; i < z->ncaps; i++) {
        uint64_t id;
        if (cap_of(z, z->caps[i].ident, &id) != VPMM_CAPTURE_NONE && id == z->caps[i].id &&
            vpmm_i_graphs_capture_arena(z->pool, id) != NULL)
            return 1;
    }
    return 0;
}

/* vpmm may do legacy-stream work (a marker, a GPU-side wait) while a per-thread stream
 * captures: only while it knows of no capture in progress (it then does none at all, as
 * docs/ALGORITHM.md says), which its records of captures already over do not change. */
static int legacy_unguarded(const fz_t *z)
{
    return !known_capture_running(z) && ptds_capturing(z);
}

/* The input is about to do work on the legacy stream: every capture a per-thread stream is in
 * may be invalidated by it (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT), not by vpmm. */
static void taint_ptds(fz_t *z)
{
    for (int t = 0; t < NTHREADS; t++) {
        uint64_t id;
        cap_t *c;
        if (cap_of(z, ID_PT0 + t, &id) != VPMM_CAPTURE_NONE && (c = cap_find(z, id)) != NULL)
            c->tainted = 1;
    }
}

/* ---- the tracked allocations ---------------------------------------------------------------- */

void stamp_put(unsigned char *p, size_t size, uint64_t stamp)
{
    memcpy(p, &stamp, size < 8 ? size : 8);
    if (size >= 16)
        memcpy(p + size - 8, &stamp, 8);
}

int stamp_there(const unsigned char *p, size_t size, uint64_t stamp)
{
    int ok = memcmp(p, &stamp, size < 8 ? size : 8) == 0;
    if (ok && size >= 16)
        ok = memcmp(p + size - 8, &stamp, 8) == 0;
    return ok;
}

static void stamp_write(const live_t *l)
{
    stamp_put(l->p, l->size, l->stamp);
}

void stamp_check(const fz_t *z, const live_t *l, const char *when)
{
    if (!stamp_there(l->p, l->size, l->stamp))
        finding(z, "%s: the allocation at %p (%zu bytes) lost its contents", when, (void *)l->p,
                l->size);
}

ptrdiff_t live_find(const fz_t *z, uintptr_t a)
{
    for (size_t i = 0; i < z->nlive; i++)
        if ((uintptr_t)z->live[i].p == a)
            return (ptrdiff_t)i;
    return -1;
}

ptrdiff_t live_pick(const fz_t *z, unsigned v)
{
    if (z->nlive == 0)
        return -1;
    for (size_t i = 0; i < z->nlive; i++)
        if (z->live[i].serial == v)
            return (ptrdiff_t)i;
    return (ptrdiff_t)(v % z->nlive);
}

static ptrdiff_t live_containing(const fz_t *z, uintptr_t a)
{
    for (size_t i = 0; i < z->nlive; i++) {
        uintptr_t p = (uintptr_t)z->live[i].p;
        if (a >= p && a < p + rnd(z->live[i].size))
            return (ptrdiff_t)i;
    }
    return -1;
}

/* vpmm's record of the allocation stream of the allocation at a (internal: an identity only). */
static const vpmm_stream_rec_t *alloc_strm(const fz_t *z, uintptr_t a)
{
    const vpmm_region_t *r = vpmm_hmap_get(&z->pool->allocs, a);
    if (r == NULL)
        finding(z, "the allocation %p vpmm just returned is not in its table", (void *)a);
    return r->stream;
}

/* Starts tracking a fresh allocation: aligned, disjoint from every tracked one, writable. */
static void live_add(fz_t *z, void *ptr, size_t size, uint16_t serial, const char *call)
{
    uintptr_t a = (uintptr_t)ptr;
    live_t *l;
    if (ptr == NULL || a % VPMM_ALIGNMENT != 0)
        finding(z, "%s returned %p for %zu bytes: not %u-aligned", call, ptr, size, VPMM_ALIGNMENT);
    for (size_t i = 0; i < z->nlive; i++) {
        uintptr_t b = (uintptr_t)z->live[i].p;
        if (a < b + rnd(z->live[i].size) && b < a + rnd(size))
            finding(z, "%s returned %p (%zu bytes), overlapping the live allocation %p (%zu bytes)",
                    call, ptr, size, (void *)b, z->live[i].size);
    }
    l = &z->live[z->nlive++];
    l->p = ptr;
    l->size = size;
    l->serial = serial;
    l->ident = -1;
    l->rec = -1;
    l->released = 0;
    l->upto = 0;
    l->own_rec = -1;
    l->own_gone = 0;
    l->strm = alloc_strm(z, a);
    l->nuses = 0;
    l->share = -1;
    l->stamp = tmix64(((uint64_t)z->cfg << 48) ^ ((uint64_t)serial << 32) ^ z->nop ^ a);
    stamp_write(l);
}

static void note_freed(fz_t *z, uintptr_t a)
{
    z->freed[z->freed_at] = a;
    z->freed_at = (z->freed_at + 1) % MAX_FREED;
    if (z->nfreed < MAX_FREED)
        z->nfreed++;
}

static void live_remove(fz_t *z, size_t i)
{
    note_freed(z, (uintptr_t)z->live[i].p);
    z->live[i] = z->live[--z->nlive];
}

/* Frees tracked allocation i, which must succeed (also with a fault armed: free makes no driver
 * call that may fail it). */
static void free_live(fz_t *z, size_t i)
{
    vpmm_status_t st;
    stamp_check(z, &z->live[i], "before vpmm_free");
    pend_note(z, &z->live[i], dev_freed(z, &z->live[i]));
    st = vpmm_free(z->pool, z->live[i].p);
    expect_status(z, "vpmm_free(live)", st, S(VPMM_SUCCESS), 1);
    live_remove(z, i);
}

/* ---- observations -----------------------------------------------------------------------------
 */

static int hash_region(const vpmm_region_info_t *r, void *user)
{
    snap_t *s = user;
    uint64_t v[6] = { r->addr,
                      r->size,
                      (uint64_t)r->state * 2 + (uint64_t)r->ready,
                      (uint64_t)(uintptr_t)r->stream,
                      r->requested,
                      r->pool };
    for (int i = 0; i < 6; i++)
        s->hash = (s->hash ^ v[i]) * 0x100000001b3ULL;
    s->regions++;
    return 0;
}

vpmm_stats_t stats_of(const fz_t *z)
{
    vpmm_stats_t s;
    memset(&s, 0, sizeof s);
    expect_status(z, "vpmm_get_stats", vpmm_get_stats(z->pool, &s), S(VPMM_SUCCESS), 1);
    return s;
}

void snap_take(const fz_t *z, snap_t *s)
{
    memset(s, 0, sizeof *s);
    s->hash = 0xcbf29ce484222325ULL;
    s->stats = stats_of(z);
    expect_status(z, "vpmm_pool_walk", vpmm_pool_walk(z->pool, hash_region, s), S(VPMM_SUCCESS), 1);
}

/* Bad input must leave the pool exactly as it was. */
void snap_same(const fz_t *z, const snap_t *before, const char *call)
{
    snap_t now;
    snap_take(z, &now);
    if (memcmp(&now.stats, &before->stats, sizeof now.stats) != 0 ||
        now.regions != before->regions || now.hash != before->hash)
        finding(z,
                "%s failed but changed the pool (regions %zu -> %zu, live %zu -> %zu, mapped "
                "%zu -> %zu)",
                call, before->regions, now.regions, before->stats.live_bytes, now.stats.live_bytes,
                before->stats.mapped_bytes, now.stats.mapped_bytes);
}

typedef struct regions {
    vpmm_region_info_t *r;
    size_t n, cap;
    int oom;
} regions_t;

static int collect_region(const vpmm_region_info_t *r, void *user)
{
    regions_t *rs = user;
    if (rs->n == rs->cap) {
        size_t cap = rs->cap ? rs->cap * 2 : 256;
        vpmm_region_info_t *a = realloc(rs->r, cap * sizeof *a);
        if (a == NULL) {
            rs->oom = 1;
            return 1;
        }
        rs->r = a;
        rs->cap = cap;
    }
    rs->r[rs->n++] = *r;
    return 0;
}

static int by_addr(const void *a, const void *b)
{
    uintptr_t x = ((const vpmm_region_info_t *)a)->addr, y = ((const vpmm_region_info_t *)b)->addr;
    return (x > y) - (x < y);
}

static void regions_get(const fz_t *z, regions_t *rs)
{
    memset(rs, 0, sizeof *rs);
    expect_status(z, "vpmm_pool_walk", vpmm_pool_walk(z->pool, collect_region, rs), S(VPMM_SUCCESS),
                  1);
    if (rs->oom)
        finding(z, "out of host memory while walking");
    qsort(rs->r, rs->n, sizeof *rs->r, by_addr);
}

static const vpmm_region_info_t *region_containing(const regions_t *rs, uintptr_t a)
{
    size_t lo = 0, hi = rs->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const vpmm_region_info_t *r = &rs->r[mid];
        if (a < r->addr)
            hi = mid;
        else if (a >= r->addr + r->size)
            lo = mid + 1;
        else
            return r;
    }
    return NULL;
}

static int cmp_uptr(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return (x > y) - (x < y);
}

/* A sorted copy of the tracked addresses (free it). */
static uintptr_t *live_sorted(const fz_t *z)
{
    uintptr_t *v = malloc((z->nlive + 1) * sizeof *v);
    if (v == NULL)
        finding(z, "out of host memory");
    for (size_t i = 0; i < z->nlive; i++)
        v[i] = (uintptr_t)z->live[i].p;
    qsort(v, z->nlive, sizeof *v, cmp_uptr);
    return v;
}

static int in_sorted(const uintptr_t *v, size_t n, uintptr_t a)
{
    return bsearch(&a, v, n, sizeof *v, cmp_uptr) != NULL;
}

/* ---- the checks after every operation -------------------------------------------------------- */

/* The driver holds exactly what the pool believes it holds (as tests/test_util.c checks). */
void driver_matches_pool(const fz_t *z, const vpmm_pool_t *p, vpmm_driver_t *w)
{
    vpmm_fault_live_t live;
    size_t zombie_maps = 0, events = p->idle_count;
    const vpmm_stream_rec_t *lists[2] = { p->streams, p->retired };

    for (const vpmm_region_t *r = p->zombie_head; r; r = r->qnext)
        for (uintptr_t at = r->addr; at < r->addr + r->size; zombie_maps++)
            at += vpmm_i_phys_at(p, at)->size;
    for (int l = 0; l < 2; l++)
        for (const vpmm_stream_rec_t *s = lists[l]; s; s = s->next)
            events += (size_t)(s->recorded - s->completed);
    vpmm_fault_live(w, &live);
    /* Imported mappings (vpmm_ipc_open): each handle is mapped once, in a reservation of its
     * mapping's own. */
    if (live.handles != (int64_t)(p->phys_count + p->nunreleased + p->import_handles) ||
        live.mappings != (int64_t)(p->phys_count + zombie_maps + p->import_handles) ||
        live.reservations != (int64_t)(p->chunk_count + p->nimports) ||
        live.events != (int64_t)events || live.user_objects != 0)
        finding(
            z,
            "the driver holds handles %lld, mappings %lld, reservations %lld, events %lld, "
            "caller user objects %lld; the %s believes %zu, %zu, %zu, %zu, 0",
            (long long)live.handles, (long long)live.mappings, (long long)live.reservations,
            (long long)live.events, (long long)live.user_objects,
            p == z->pool ? "pool" : "importer", p->phys_count + p->nunreleased + p->import_handles,
            p->phys_count + zombie_maps + p->import_handles, p->chunk_count + p->nimports, events);
}

static void check_all(const fz_t *z)
{
    size_t bad;
    if (z->pool->worker != NULL)
        vpmm_i_worker_step(z->pool); /* its pass between two operations */
    bad = vpmm_pool_check(z->pool, NULL);
    if (bad != 0) {
        vpmm_pool_check(z->pool, stderr);
        finding(z, "vpmm_pool_check: %zu invariant(s) violated", bad);
    }
    bad = vpmm_host_check(z->host, 0);
    if (bad != 0) {
        vpmm_host_check(z->host, 1);
        finding(z, "vpmm_host_check: %zu invariant(s) violated", bad);
    }
    driver_matches_pool(z, z->pool, z->fault);
}

/*
 * Memory freed while a stream recorded on it (vpmm_record_stream) still had work is deferred as
 * long as that work is pending, and memory freed while shared (vpmm_ipc_export) as long as its
 * shares are not over: FREE, counted as free memory, in no tree (docs/ALGORITHM.md). So
 * after every operation, for each such free the input knows of: the walk shows its region as it
 * was freed (same start, never merged into by a neighbour's free, not reallocated, not unmapped)
 * and not ready, and the stats' free bytes are exactly the walk's free regions, deferred ones
 * included.
 */
static void deferred_check(const fz_t *z)
{
    regions_t rs;
    vpmm_stats_t s;
    size_t deferred = 0, free_sum = 0;
    int any = 0;

    for (size_t i = 0; i < z->npend && !any; i++)
        any = gate_pending(z, &z->pend[i]);
    if (!any)
        return;
    regions_get(z, &rs);
    s = stats_of(z);
    for (size_t k = 0; k < rs.n; k++)
        if (rs.r[k].state == VPMM_REGION_FREE)
            free_sum += rs.r[k].size;
    for (size_t i = 0; i < z->npend; i++) {
        const pend_t *e = &z->pend[i];
        const vpmm_region_info_t *r;
        if (!gate_pending(z, e))
            continue;
        r = region_containing(&rs, e->lo);
        if (r == NULL || r->state != VPMM_REGION_FREE || r->ready || r->addr != e->lo ||
            r->size < e->hi - e->lo)
            finding(z,
                    "the allocation %p (%zu bytes) freed at operation %llu, which %s, is not a "
                    "deferred free region: region %p, %zu bytes, state %d, ready %d",
                    (void *)e->lo, (size_t)(e->hi - e->lo), (unsigned long long)e->nop,
                    e->share >= 0 && dev_share_pending(z, e->share)
                        ? "the importer may still map (its shares are not over)"
                        : "a recorded stream still uses",
                    r ? (void *)r->addr : NULL, r ? r->size : 0, r ? (int)r->state : -1,
                    r ? r->ready : -1);
        deferred += r->size;
    }
    if (s.free_bytes < deferred || s.free_bytes != free_sum)
        finding(z,
                "stats: %zu free bytes; the walk's free regions hold %zu, of which %zu deferred "
                "(freed, still used by a recorded stream)",
                s.free_bytes, free_sum, deferred);
    free(rs.r);
}

/*
 * vpmm_stream_release tells vpmm that the stream is about to be destroyed (vpmm.h): after it, no
 * driver call may name that stream through the retired record. So the markers a retired record
 * has recorded never grow (the host backend keeps the handle alive, and later work on it is a
 * new stream's, so nothing else would notice a marker recorded on the dead one).
 */
static void retired_check(fz_t *z)
{
    const vpmm_stream_rec_t *seen[MAX_RETIRED];
    uint64_t recorded[MAX_RETIRED];
    size_t n = 0;
    for (const vpmm_stream_rec_t *s = z->pool->retired; s != NULL && n < MAX_RETIRED; s = s->next) {
        uint64_t was = s->recorded;
        for (size_t k = 0; k < z->nretired; k++)
            if (z->retired[k] == s)
                was = z->retired_recorded[k];
        if (s->recorded != was)
            finding(z,
                    "vpmm recorded a marker on stream %s (handle %p, owner %llu) after "
                    "vpmm_stream_release retired it (%llu markers then, %llu now): the "
                    "application may have destroyed it",
                    ident_name(rec_of_key(z, vpmm_i_stream_key_of(s)) % NIDENT), (void *)s->handle,
                    (unsigned long long)s->owner, (unsigned long long)was,
                    (unsigned long long)s->recorded);
        seen[n] = s;
        recorded[n++] = was;
    }
    memcpy(z->retired, seen, n * sizeof *seen);
    memcpy(z->retired_recorded, recorded, n * sizeof *recorded);
    z->nretired = n;
}

/* ---- streams and captures -------------------------------------------------------------------- */

/* The id of the graph pool that owns the allocation at a (0: the shared pool). */
unsigned pool_of_alloc(const fz_t *z, uintptr_t a)
{
    const vpmm_region_t *r = vpmm_hmap_get(&z->pool->allocs, a);
    if (r == NULL)
        finding(z, "the allocation %p vpmm just returned is not in its table", (void *)a);
    return vpmm_i_arena_of(r)->id;
}

/* The id of the graph pool vpmm's record of capture id names (0: vpmm has no record of it). */
static unsigned record_gp(const fz_t *z, uint64_t id)
{
    vpmm_arena_t *a = vpmm_i_graphs_capture_arena(z->pool, id);
    vpmm_graph_pool_stats_t gs;
    if (a == NULL)
        return 0;
    vpmm_i_arena_stats(z->pool, a, &gs);
    if (gs.id == 0)
        finding(z, "capture %llu is served by the shared pool", (unsigned long long)id);
    return gs.id;
}

/* Capture c is served by graph pool gp (from now on: it never changes while c lasts). */
static void cap_served_by(fz_t *z, cap_t *c, unsigned gp, const char *what)
{
    if (c->gp == 0)
        c->gp = gp;
    else if (c->gp != gp)
        finding(z, "%s: capture %llu (begun on %s) is served by g%u, earlier by g%u", what,
                (unsigned long long)c->id, ident_name(c->ident), gp, c->gp);
}

/*
 * After every operation, for every capture the input began and that still runs: vpmm did not
 * invalidate it behind the input's back (a capture vpmm knows of, i.e. held a record of before
 * this operation, may be invalidated only by what the input did: SYNC, or legacy work while it
 * involves a per-thread stream), and vpmm's record names one graph pool for it all along.
 */
static void caps_check(fz_t *z)
{
    for (size_t i = 0; i < z->ncaps;) {
        cap_t *c = &z->caps[i];
        uint64_t id;
        vpmm_capture_status_t st = cap_of(z, c->ident, &id);
        unsigned gp;
        if (st == VPMM_CAPTURE_NONE || id != c->id) {
            z->caps[i] = z->caps[--z->ncaps]; /* over */
            continue;
        }
        if (st == VPMM_CAPTURE_INVALIDATED && c->seen && !c->tainted)
            finding(z,
                    "capture %llu (begun on %s by thread %u, known to vpmm) was invalidated, "
                    "and the input did nothing that invalidates it",
                    (unsigned long long)c->id, ident_name(c->ident), c->thread);
        gp = record_gp(z, c->id);
        if (gp != 0)
            cap_served_by(z, c, gp, "vpmm's capture record");
        c->seen = gp != 0;
        i++;
    }
}

static void keep_graph(fz_t *z, vpmm_graph_t g)
{
    if (z->ngraphs < MAX_GRAPHS) {
        z->graphs[z->ngraphs++] = g;
        return;
    }
    /* The application destroys it directly (cudaGraphDestroy). */
    if (vpmm_host_graph_destroy(z->host, g) != VPMM_DRV_OK)
        finding(z, "the host backend could not destroy a graph vpmm returned");
}

static void gref_add(fz_t *z, vpmm_graph_pool_t *gp)
{
    for (size_t i = 0; i < z->ngp; i++) {
        if (z->gps[i].gp == gp) {
            z->gps[i].refs++;
            return;
        }
    }
    if (z->ngp < MAX_GP) {
        z->gps[z->ngp++] = (gref_t){ gp, 1 };
        return;
    }
    expect_status(z, "vpmm_graph_pool_release", vpmm_graph_pool_release(gp), S(VPMM_SUCCESS), 1);
}

static vpmm_graph_pool_stats_t gstats(const fz_t *z, const vpmm_graph_pool_t *gp)
{
    vpmm_graph_pool_stats_t s;
    memset(&s, 0, sizeof s);
    expect_status(z, "vpmm_graph_pool_stats", vpmm_graph_pool_stats(gp, &s), S(VPMM_SUCCESS), 1);
    return s;
}

/* ---- operations ----------------------------------------------------------------------------- */

static size_t size_of(const fz_t *z, unsigned cls, uint32_t v)
{
    const size_t absurd[10] = {
        0,           SIZE_MAX,      SIZE_MAX - 254, SIZE_MAX / 2,    VA_SIZE,
        VA_SIZE + 1, VA_SIZE - 255, VA_SIZE + 256,  (size_t)1 << 62, VPMM_ALIGNMENT + 1
    };
    switch (cls % 8) {
    case 0:
        return v % 256 + 1;
    case 1:
        return v % (64 * KiB) + 1;
    case 2:
        return v % (4 * MiB) + 1;
    case 3:
        return v % (32 * MiB) + 1;
    case 4: {
        long long s =
            (long long)((v % 40 + 1) * z->page_size) + ((long long)(v >> 8) % 5 - 2) * 256;
        return (size_t)s;
    }
    case 5:
        return absurd[v % 10];
    case 6:
        return v;
    default:
        return v % (128 * MiB) + 1;
    }
}

static int op_malloc(fz_t *z)
{
    int si = slot_of(z), id = ident_of(z, si);
    unsigned cls = rd8(z);
    uint32_t v = rd32(z);
    size_t size = size_of(z, cls, v);
    uint16_t serial = z->next_serial++;
    vpmm_capture_status_t cap;
    uint64_t cid;
    void *p = (void *)static_buf; /* must become NULL on failure */
    vpmm_status_t st;
    snap_t before;
    unsigned driver = 0;
    live_t *l;

    if (size == 0 || size > VA_SIZE) {
        vpmm_status_t want = size == 0 ? VPMM_ERROR_INVALID_SIZE : VPMM_ERROR_SIZE_TOO_LARGE;
        snap_take(z, &before);
        st = vpmm_malloc(z->pool, size, slot_handle(z, si), &p);
        expect_status(z, "vpmm_malloc(bad size)", st, S(want), 1);
        if (p != NULL)
            finding(z, "vpmm_malloc(%zu) failed but left the pointer %p", size, p);
        snap_same(z, &before, "vpmm_malloc(bad size)");
        return 1;
    }
    if (z->nlive == MAX_LIVE)
        return 0;
    cap = cap_of(z, id, &cid);
    if (cap == VPMM_CAPTURE_INVALIDATED)
        driver = S(VPMM_ERROR_DRIVER);
    if (legacy_unguarded(z)) {
        /* A per-thread stream captures and vpmm knows of no capture (begun outside vpmm, not
         * registered, nothing allocated in it): vpmm may do legacy-stream work (its markers,
         * GPU-side waits), which CUDA refuses (906) and which invalidates that capture, as
         * docs/ALGORITHM.md says. The application's doing: it did not register the capture. */
        taint_ptds(z);
        driver = S(VPMM_ERROR_DRIVER);
    }
    st = vpmm_malloc(z->pool, size, slot_handle(z, si), &p);
    expect_status(z, "vpmm_malloc", st, S(VPMM_SUCCESS) | S(VPMM_ERROR_OUT_OF_MEMORY) | driver, 0);
    if (st != VPMM_SUCCESS) {
        if (p != NULL)
            finding(z, "vpmm_malloc(%zu) failed with %s but left the pointer %p", size,
                    vpmm_status_name(st), p);
        return 1;
    }
    live_add(z, p, size, serial, "vpmm_malloc");
    l = &z->live[z->nlive - 1];
    l->own_rec = rec_of(z, si);
    if (fz_verbose)
        fprintf(stderr, "    %p (%zu bytes) on %s\n", p, size, ident_name(id));
    gates_check(z, l, "vpmm_malloc");
    dev_given(z, (uintptr_t)p, size);
    if (cap != VPMM_CAPTURE_NONE) {
        /* A capture's allocations come from its graph pool, never from the shared pool. */
        cap_t *c = cap_find(z, cid);
        unsigned gp = pool_of_alloc(z, (uintptr_t)p);
        if (c == NULL)
            finding(z, "stream %s is in capture %llu, which the input never began", ident_name(id),
                    (unsigned long long)cid);
        if (gp == 0)
            finding(z, "vpmm_malloc on %s in capture %llu returned %p from the shared pool",
                    ident_name(id), (unsigned long long)cid, p);
        cap_served_by(z, c, gp, "vpmm_malloc in a capture");
        return 1;
    }
    l->ident = id;
    l->rec = rec_of(z, si);
    pend_reused(z, l);
    return 1;
}

static int op_free(fz_t *z)
{
    unsigned v = rd16(z);
    if (z->nlive == 0) {
        expect_status(z, "vpmm_free(NULL)", vpmm_free(z->pool, NULL), S(VPMM_SUCCESS), 1);
        return 1;
    }
    free_live(z, (size_t)live_pick(z, v));
    return 1;
}

/* Calls op on an arbitrary address; the tracked set says what must happen: bad pointers get
 * vpmm_free's statuses and change nothing. */
int ptr_any(fz_t *z, uintptr_t a, int foreign, const ptr_op_t *op)
{
    ptrdiff_t i;
    snap_t before;
    vpmm_status_t st;
    char what[64];

    if (a == 0)
        return 0;
    i = foreign ? -1 : live_find(z, a);
    if (i >= 0) {
        op->live(z, (size_t)i); /* it was freed, then reused: a valid call */
        return 1;
    }
    snap_take(z, &before);
    st = op->call(z, (void *)a);
    if (foreign) {
        snprintf(what, sizeof what, "%s(foreign)", op->name);
        expect_status(z, what, st, S(VPMM_ERROR_FOREIGN_POINTER), 1);
    } else if (live_containing(z, a) >= 0) {
        snprintf(what, sizeof what, "%s(interior)", op->name);
        expect_status(z, what, st, S(VPMM_ERROR_INTERIOR_POINTER), 1);
    } else {
        snprintf(what, sizeof what, "%s(not allocated)", op->name);
        expect_status(z, what, st, S(VPMM_ERROR_DOUBLE_FREE) | S(VPMM_ERROR_FOREIGN_POINTER), 1);
    }
    snprintf(what, sizeof what, "%s(bad pointer)", op->name);
    snap_same(z, &before, what);
    return 1;
}

static vpmm_status_t call_free(fz_t *z, void *p)
{
    return vpmm_free(z->pool, p);
}

static const ptr_op_t FREE_OP = { "vpmm_free", free_live, call_free };

/* Frees an arbitrary address. */
static int free_any(fz_t *z, uintptr_t a, int foreign)
{
    return ptr_any(z, a, foreign, &FREE_OP);
}

/* The addresses of FREE_BAD's kinds 1-6 (kind 0, NULL, is the caller's): act(address, whether it
 * is foreign for certain) runs on one; 0 if there is none to act on. */
int bad_target(fz_t *z, unsigned kind, unsigned v, uint32_t off, target_fn act)
{
    unsigned char local[64];
    uintptr_t base;

    switch (kind) {
    case 1:
        if (z->nfreed == 0)
            return 0;
        return act(z, z->freed[v % z->nfreed], 0);
    case 2:
        if (z->nlive == 0)
            return 0;
        base = (uintptr_t)z->live[v % z->nlive].p;
        return act(z, base + 1 + off % (rnd(z->live[v % z->nlive].size) - 1), 0);
    case 3:
        return act(z, (uintptr_t)&local[off % sizeof local], 1);
    case 4:
        if (off & 1) {
            unsigned char *h = malloc(64);
            int done;
            if (h == NULL)
                finding(z, "out of host memory");
            done = act(z, (uintptr_t)h + (v % 64), 1);
            free(h);
            return done;
        }
        return act(z, (uintptr_t)&static_buf[off % sizeof static_buf], 1);
    case 5:
        return side_ptr != NULL ? act(z, (uintptr_t)side_ptr + (off % 4096), 1) : 0;
    default:
        if (z->nlive > 0 && (v & 1))
            base = (uintptr_t)z->live[(v >> 1) % z->nlive].p;
        else if (z->nfreed > 0)
            base = z->freed[(v >> 1) % z->nfreed];
        else
            return 0;
        base &= ~(uintptr_t)(z->page_size - 1);
        base += off % (4 * z->page_size);
        base -= 2 * z->page_size;
        if (off & 0x80000000u)
            base &= ~(uintptr_t)(VPMM_ALIGNMENT - 1);
        return act(z, base, 0);
    }
}

static int op_free_bad(fz_t *z)
{
    unsigned kind = rd8(z) % 7, v = rd16(z);
    uint32_t off = rd32(z);

    if (kind == 0) {
        expect_status(z, "vpmm_free(NULL)", vpmm_free(z->pool, NULL), S(VPMM_SUCCESS), 1);
        return 1;
    }
    return bad_target(z, kind, v, off, free_any);
}

/* vpmm_record_stream of tracked allocation i on the stream of operand z->rec_slot: a stream
 * other than its own (or one on its handle after its own was released) becomes one of its uses;
 * its own, or one recorded before, changes nothing. */
static void record_live(fz_t *z, size_t i)
{
    live_t *l = &z->live[i];
    const int si = z->rec_slot, id = ident_of(z, si), rec = rec_of(z, si);
    vpmm_status_t st = vpmm_record_stream(z->pool, l->p, slot_handle(z, si));
    expect_status(z, "vpmm_record_stream", st, S(VPMM_SUCCESS), 1);
    if (rec == l->own_rec && !l->own_gone)
        return; /* its own stream: stream order covers it */
    records_made++;
    for (size_t k = 0; k < l->nuses; k++) {
        if (l->uses[k].rec == rec) {
            l->uses[k].released = 0; /* after a release, the stream on that handle is new */
            return;
        }
    }
    l->uses[l->nuses++] = (use_t){ .ident = id, .rec = rec };
    if (fz_verbose)
        fprintf(stderr, "    %p is used by %s too\n", (void *)l->p, ident_name(id));
}

static vpmm_status_t call_record(fz_t *z, void *p)
{
    return vpmm_record_stream(z->pool, p, slot_handle(z, z->rec_slot));
}

/* vpmm_record_stream of an arbitrary address, on the record slot's stream. */
static int record_any(fz_t *z, uintptr_t a, int foreign)
{
    static const ptr_op_t op = { "vpmm_record_stream", record_live, call_record };
    return ptr_any(z, a, foreign, &op);
}

static int op_record_stream(fz_t *z)
{
    unsigned kind, v;
    uint32_t off;
    snap_t before;

    z->rec_slot = slot_of(z);
    kind = rd8(z);
    v = rd16(z);
    off = rd32(z);
    if ((kind & 0x80) == 0) {
        if (z->nlive == 0)
            return 0;
        record_live(z, (size_t)live_pick(z, v));
        return 1;
    }
    kind = (kind & 127) % 7;
    if (kind != 0)
        return bad_target(z, kind, v, off, record_any);
    snap_take(z, &before);
    expect_status(z, "vpmm_record_stream(NULL)",
                  vpmm_record_stream(z->pool, NULL, slot_handle(z, z->rec_slot)),
                  S(VPMM_ERROR_INVALID_ARGUMENT), 1);
    snap_same(z, &before, "vpmm_record_stream(NULL)");
    return 1;
}

static int op_work(fz_t *z)
{
    int si = slot_of(z), id = ident_of(z, si);
    unsigned kind = rd8(z), n = rd8(z);
    vpmm_stream_t s;
    /* Another thread's per-thread stream, through its key: the control comes from this one. */
    if (ident_is_pt(id))
        id = ID_PT0 + (int)((z->thread + (kind >> 3)) % NTHREADS);
    s = ident_key(z, id);
    switch (kind % 5) {
    case 0:
        if (id == ID_LEGACY)
            taint_ptds(z); /* refused (906) while a per-thread stream captures, which it breaks */
        for (unsigned k = 0; k < n % 4 + 1; k++)
            vpmm_host_enqueue(z->host, s);
        break;
    case 1:
        vpmm_host_complete(z->host, s);
        break;
    case 2:
        vpmm_host_advance(z->host, s, n % 4 + 1);
        break;
    case 3:
        vpmm_host_complete_all(z->host);
        break;
    default:
        for (int k = 0; k < 6; k++) /* the six slots but 0x2 (the legacy stream twice) */
            vpmm_host_advance(z->host, ident_key(z, ident_of(z, k)), 1);
        for (int t = 0; t < NTHREADS; t++)
            vpmm_host_advance(z->host, z->ptkey[t], 1);
        for (int id2 = ID_P1; id2 < nident(z); id2++)
            vpmm_host_advance(z->host, ident_key(z, id2), 1);
        break;
    }
    return 1;
}

static int op_stream_release(fz_t *z)
{
    int si = slot_of(z), id = ident_of(z, si);
    unsigned other = 0;
    vpmm_status_t st;
    /* A stream being released is about to be destroyed; CUDA forbids that during a capture. */
    if (cap_of(z, id, NULL) != VPMM_CAPTURE_NONE)
        return 0;
    if (id == ID_LEGACY && z->pool->captures > 0)
        other = S(VPMM_ERROR_STREAM_CAPTURING); /* its last marker would be legacy work */
    if (id == ID_LEGACY && legacy_unguarded(z)) {
        /* It is legacy work: refused (906), and it breaks those captures — unless vpmm still
         * holds a record of a capture already over and refuses first (above). */
        taint_ptds(z);
        other |= S(VPMM_ERROR_DRIVER);
    }
    st = vpmm_stream_release(z->pool, slot_handle(z, si));
    expect_status(z, "vpmm_stream_release", st, S(VPMM_SUCCESS) | other, 0);
    if (st == VPMM_SUCCESS)
        stream_released(z, rec_of(z, si), id);
    return 1;
}

static int op_capture_begin(fz_t *z)
{
    int si = slot_of(z), id = ident_of(z, si);
    unsigned g = rd8(z), mode = rd8(z) % 4;
    vpmm_graph_pool_t *gp = NULL;
    vpmm_capture_status_t before, after;
    vpmm_status_t st;
    uint64_t cid;

    if (slot_is_peer(si))
        return 0; /* device 1's streams are not captured (see the head comment) */
    before = cap_of(z, id, NULL);
    if (z->ngp > 0 && g % (z->ngp + 1) < z->ngp)
        gp = z->gps[g % (z->ngp + 1)].gp;
    st = vpmm_capture_begin(z->pool, gp, slot_handle(z, si),
                            mode == 3 ? (vpmm_stream_capture_mode_t)7
                                      : (vpmm_stream_capture_mode_t)mode);
    if (id == ID_LEGACY || mode == 3)
        expect_status(z, "vpmm_capture_begin(bad argument)", st, S(VPMM_ERROR_INVALID_ARGUMENT), 1);
    else if (before != VPMM_CAPTURE_NONE)
        expect_status(z, "vpmm_capture_begin(capturing)", st, S(VPMM_ERROR_STREAM_CAPTURING), 0);
    else
        expect_status(z, "vpmm_capture_begin", st, S(VPMM_SUCCESS), 0);
    after = cap_of(z, id, &cid);
    if (st == VPMM_SUCCESS) {
        if (after != VPMM_CAPTURE_ACTIVE)
            finding(z, "vpmm_capture_begin succeeded but stream %s is not capturing",
                    ident_name(id));
        cap_add(z, cid, id, (int)mode);
        if (gp != NULL)
            z->caps[z->ncaps - 1].gp = gstats(z, gp).id;
    } else if (before == VPMM_CAPTURE_NONE && after != VPMM_CAPTURE_NONE) {
        finding(z, "vpmm_capture_begin failed with %s but left stream %s capturing",
                vpmm_status_name(st), ident_name(id));
    }
    return 1;
}

static int op_capture_end(fz_t *z)
{
    int si = slot_of(z), id = ident_of(z, si);
    uint64_t cid, now;
    vpmm_capture_status_t cap = cap_of(z, id, &cid);
    const cap_t *c = cap == VPMM_CAPTURE_NONE ? NULL : cap_find(z, cid);
    vpmm_graph_t g = (vpmm_graph_t)static_buf;
    vpmm_status_t st;
    int goes_on = 0; /* a refused end leaves the capture running */

    if (cap != VPMM_CAPTURE_NONE && c == NULL)
        finding(z, "stream %s is in capture %llu, which the input never began", ident_name(id),
                (unsigned long long)cid);
    st = vpmm_capture_end(z->pool, slot_handle(z, si), &g);
    if (cap == VPMM_CAPTURE_NONE) {
        expect_status(z, "vpmm_capture_end(not capturing)", st, S(VPMM_ERROR_NOT_CAPTURING),
                      id == ID_LEGACY);
    } else if (c->ident != id) {
        expect_status(z, "vpmm_capture_end(joined)", st, S(VPMM_ERROR_DRIVER), 0);
        goes_on = 1;
    } else if (cap_wrong_thread(z, c)) {
        expect_status(z, "vpmm_capture_end(another thread's capture)", st, S(VPMM_ERROR_DRIVER), 0);
        goes_on = 1;
    } else if (cap == VPMM_CAPTURE_ACTIVE) {
        expect_status(z, "vpmm_capture_end", st, S(VPMM_SUCCESS), 0);
    } else {
        expect_status(z, "vpmm_capture_end(invalidated)", st, S(VPMM_ERROR_DRIVER), 0);
    }
    if (goes_on && (cap_of(z, c->ident, &now) == VPMM_CAPTURE_NONE || now != cid))
        finding(z,
                "vpmm_capture_end on %s was refused but capture %llu (begun by thread %u, "
                "mode %d) is over",
                ident_name(id), (unsigned long long)cid, c->thread, c->mode);
    if (st != VPMM_SUCCESS) {
        if (g != NULL)
            finding(z, "vpmm_capture_end failed with %s but returned a graph",
                    vpmm_status_name(st));
        return 1;
    }
    if (g == NULL)
        finding(z, "vpmm_capture_end succeeded without a graph");
    if (cap_of(z, id, NULL) != VPMM_CAPTURE_NONE)
        finding(z, "vpmm_capture_end succeeded but stream %s is still capturing", ident_name(id));
    keep_graph(z, g);
    return 1;
}

static int op_ext_begin(fz_t *z)
{
    int si = slot_of(z), id = ident_of(z, si);
    vpmm_capture_status_t cap;
    uint64_t cid = 0;
    vpmm_dres_t r, want;
    if (slot_is_peer(si))
        return 0; /* device 1's streams are not captured (see the head comment) */
    cap = cap_of(z, id, NULL);
    r = vpmm_host_begin_capture(z->host, slot_handle(z, si), &cid);
    want = id == ID_LEGACY            ? VPMM_DRV_NOT_SUPPORTED
           : cap != VPMM_CAPTURE_NONE ? VPMM_DRV_ERROR
                                      : VPMM_DRV_OK;
    if (fz_verbose)
        fprintf(stderr, "    capture %llu begun outside vpmm on %s: result %d\n",
                (unsigned long long)cid, ident_name(id), (int)r);
    if (r != want)
        finding(z, "vpmm_host_begin_capture returned %d, expected %d", (int)r, (int)want);
    if (r == VPMM_DRV_OK)
        cap_add(z, cid, id, VPMM_STREAM_CAPTURE_GLOBAL);
    return 1;
}

static int op_ext_end(fz_t *z)
{
    int si = slot_of(z), id = ident_of(z, si);
    unsigned how = rd8(z) % 2;
    uint64_t cid, now;
    vpmm_capture_status_t cap = cap_of(z, id, &cid);
    const cap_t *c = cap == VPMM_CAPTURE_NONE ? NULL : cap_find(z, cid);
    vpmm_graph_t g = NULL;
    vpmm_dres_t r, want = VPMM_DRV_ERROR;
    int goes_on = 0;

    if (cap != VPMM_CAPTURE_NONE && c == NULL)
        finding(z, "stream %s is in capture %llu, which the input never began", ident_name(id),
                (unsigned long long)cid);
    if (c != NULL && (c->ident != id || cap_wrong_thread(z, c)))
        goes_on = 1; /* joined (903), or another thread's (908) */
    else if (cap == VPMM_CAPTURE_ACTIVE)
        want = VPMM_DRV_OK; /* (an invalidated one ends with 901) */
    if (how == 0) {
        r = vpmm_host_end_capture(z->host, slot_handle(z, si));
    } else {
        r = z->host->end_capture(z->host, slot_handle(z, si), &g);
        if (r == VPMM_DRV_OK && g != NULL)
            keep_graph(z, g);
    }
    if (fz_verbose)
        fprintf(stderr, "    capture %llu on %s ended outside vpmm: result %d\n",
                (unsigned long long)cid, ident_name(id), (int)r);
    if (r != want)
        finding(z, "the host backend's end_capture on %s returned %d, expected %d", ident_name(id),
                (int)r, (int)want);
    if (goes_on && (cap_of(z, c->ident, &now) == VPMM_CAPTURE_NONE || now != cid))
        finding(z, "the host backend's end_capture on %s was refused but ended capture %llu",
                ident_name(id), (unsigned long long)cid);
    return 1;
}

static int op_capture_register(fz_t *z)
{
    int si = slot_of(z), id = ident_of(z, si);
    unsigned g = rd8(z), gid, rec = 0;
    vpmm_capture_status_t cap;
    vpmm_graph_pool_t *gp;
    vpmm_status_t st;
    uint64_t cid;
    if (z->ngp == 0)
        return 0;
    gp = z->gps[g % z->ngp].gp;
    gid = gstats(z, gp).id;
    cap = cap_of(z, id, &cid);
    if (cap != VPMM_CAPTURE_NONE)
        rec = record_gp(z, cid);
    st = vpmm_capture_register(z->pool, gp, slot_handle(z, si));
    if (fz_verbose)
        fprintf(stderr, "    on %s (capture %llu), graph pool %u\n", ident_name(id),
                cap == VPMM_CAPTURE_NONE ? 0ull : (unsigned long long)cid, gid);
    if (cap == VPMM_CAPTURE_NONE)
        expect_status(z, "vpmm_capture_register(not capturing)", st, S(VPMM_ERROR_NOT_CAPTURING),
                      id == ID_LEGACY);
    else if (rec != 0) /* already served: by this graph pool, or by another one */
        expect_status(z, "vpmm_capture_register(served)", st,
                      S(rec == gid ? VPMM_SUCCESS : VPMM_ERROR_WRONG_POOL), 0);
    else
        expect_status(
            z, "vpmm_capture_register", st,
            S(VPMM_SUCCESS) | (cap == VPMM_CAPTURE_INVALIDATED ? S(VPMM_ERROR_DRIVER) : 0), 0);
    if (st == VPMM_SUCCESS) {
        cap_t *c = cap_find(z, cid);
        if (c == NULL)
            finding(z, "stream %s is in capture %llu, which the input never began", ident_name(id),
                    (unsigned long long)cid);
        cap_served_by(z, c, gid, "vpmm_capture_register");
    }
    return 1;
}

static int op_capture_gp(fz_t *z)
{
    int si = slot_of(z), id = ident_of(z, si);
    uint64_t cid;
    vpmm_capture_status_t cap = cap_of(z, id, &cid);
    vpmm_graph_pool_t *gp = (vpmm_graph_pool_t *)static_buf;
    vpmm_status_t st = vpmm_capture_graph_pool(z->pool, slot_handle(z, si), &gp);
    cap_t *c;
    if (cap == VPMM_CAPTURE_NONE)
        expect_status(z, "vpmm_capture_graph_pool(not capturing)", st, S(VPMM_ERROR_NOT_CAPTURING),
                      id == ID_LEGACY);
    else
        expect_status(
            z, "vpmm_capture_graph_pool", st,
            S(VPMM_SUCCESS) | (cap == VPMM_CAPTURE_INVALIDATED ? S(VPMM_ERROR_DRIVER) : 0), 0);
    if (st != VPMM_SUCCESS) {
        if (gp != NULL)
            finding(z, "vpmm_capture_graph_pool failed but returned a graph pool");
        return 1;
    }
    c = cap_find(z, cid);
    if (c == NULL)
        finding(z, "stream %s is in capture %llu, which the input never began", ident_name(id),
                (unsigned long long)cid);
    cap_served_by(z, c, gstats(z, gp).id, "vpmm_capture_graph_pool");
    gref_add(z, gp);
    return 1;
}

static int op_graph_destroy(fz_t *z)
{
    unsigned i = rd8(z);
    vpmm_status_t st;
    if (z->ngraphs == 0)
        return 0;
    i %= (unsigned)z->ngraphs;
    st = vpmm_graph_destroy(z->pool, z->graphs[i]);
    expect_status(z, "vpmm_graph_destroy", st, S(VPMM_SUCCESS), 0);
    if (st == VPMM_SUCCESS)
        z->graphs[i] = z->graphs[--z->ngraphs];
    return 1;
}

static int op_exec(fz_t *z)
{
    unsigned kind = rd8(z) % 3, i = rd8(z);
    int si = slot_of(z), id = ident_of(z, si);
    vpmm_dres_t r;
    if (kind == 0) {
        vpmm_host_exec_t e;
        if (z->ngraphs == 0 || z->nexec == MAX_EXECS)
            return 0;
        r = vpmm_host_graph_instantiate(z->host, z->graphs[i % z->ngraphs], &e);
        if (r != VPMM_DRV_OK)
            finding(z, "vpmm_host_graph_instantiate returned %d", (int)r);
        z->execs[z->nexec++] = e;
        return 1;
    }
    if (z->nexec == 0)
        return 0;
    i %= (unsigned)z->nexec;
    if (kind == 1) {
        vpmm_dres_t want;
        if (slot_is_peer(si))
            return 0; /* graphs are launched on device 0's streams only */
        want = cap_of(z, id, NULL) != VPMM_CAPTURE_NONE ? VPMM_DRV_NOT_SUPPORTED : VPMM_DRV_OK;
        if (id == ID_LEGACY && ptds_capturing(z)) {
            taint_ptds(z); /* legacy work: refused (906), and it breaks those captures */
            want = VPMM_DRV_ERROR;
        }
        r = vpmm_host_graph_launch(z->host, z->execs[i], slot_handle(z, si));
        if (r != want)
            finding(z, "vpmm_host_graph_launch on %s returned %d, expected %d", ident_name(id),
                    (int)r, (int)want);
    } else {
        r = vpmm_host_exec_destroy(z->host, z->execs[i]);
        if (r != VPMM_DRV_OK)
            finding(z, "vpmm_host_exec_destroy returned %d", (int)r);
        z->execs[i] = z->execs[--z->nexec];
    }
    return 1;
}

static int op_gp_create(fz_t *z)
{
    vpmm_graph_pool_t *gp = NULL;
    vpmm_status_t st;
    if (z->ngp == MAX_GP)
        return 0;
    st = vpmm_graph_pool_create(z->pool, &gp);
    expect_status(z, "vpmm_graph_pool_create", st, S(VPMM_SUCCESS), 0);
    if (st == VPMM_SUCCESS)
        gref_add(z, gp);
    return 1;
}

static int op_gp_ref(fz_t *z)
{
    unsigned kind = rd8(z) % 2, i = rd8(z);
    gref_t *g;
    if (z->ngp == 0)
        return 0;
    g = &z->gps[i % z->ngp];
    if (kind == 0) {
        expect_status(z, "vpmm_graph_pool_retain", vpmm_graph_pool_retain(g->gp), S(VPMM_SUCCESS),
                      1);
        g->refs++;
        return 1;
    }
    expect_status(z, "vpmm_graph_pool_release", vpmm_graph_pool_release(g->gp), S(VPMM_SUCCESS), 1);
    if (--g->refs == 0)
        *g = z->gps[--z->ngp];
    return 1;
}

static int op_ck_take(fz_t *z)
{
    unsigned i = rd8(z);
    vpmm_graph_pool_t *gp;
    vpmm_graph_pool_stats_t gs;
    vpmm_checkpoint_t *ck = NULL;
    vpmm_status_t st;
    if (z->ngp == 0)
        return 0;
    gp = z->gps[i % z->ngp].gp;
    gs = gstats(z, gp);
    st = vpmm_checkpoint_take(gp, &ck);
    expect_status(z, "vpmm_checkpoint_take", st,
                  S(gs.captures > 0 ? VPMM_ERROR_STREAM_CAPTURING : VPMM_SUCCESS), 1);
    if (st != VPMM_SUCCESS)
        return 1;
    if (z->nck == MAX_CK) {
        vpmm_checkpoint_destroy(z->cks[0]);
        z->cks[0] = z->cks[--z->nck];
    }
    z->cks[z->nck++] = ck;
    return 1;
}

/* Whether graph pool gid holds memory freed while a stream recorded on it had work, still
 * pending: a reapply must refuse (vpmm_record_stream, "deferred"). */
static int deferred_in(const fz_t *z, unsigned gid)
{
    for (size_t i = 0; i < z->npend; i++)
        if (z->pend[i].gp == gid && gate_pending(z, &z->pend[i]))
            return 1;
    return 0;
}

static int by_ck_ptr(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const vpmm_checkpoint_alloc_t *)a)->ptr;
    uintptr_t y = (uintptr_t)((const vpmm_checkpoint_alloc_t *)b)->ptr;
    return (x > y) - (x < y);
}

/*
 * After a successful reapply on graph pool gid: its allocations are exactly the checkpoint's
 * minus the dead ones, nothing else changed; the tracked set follows (dropped allocations
 * leave it, revived ones join it with a fresh stamp, untouched ones keep theirs).
 */
static void reconcile(fz_t *z, unsigned gid, vpmm_checkpoint_alloc_t *ca, size_t n,
                      const unsigned char *dead)
{
    regions_t rs;
    uintptr_t *tracked;
    size_t found = 0, wanted = 0;

    regions_get(z, &rs);
    for (size_t i = 0; i < n; i++)
        wanted += !dead[i];
    for (size_t k = 0; k < rs.n; k++) {
        const vpmm_region_info_t *r = &rs.r[k];
        vpmm_checkpoint_alloc_t key = { (void *)r->addr, 0, NULL }, *c;
        if (r->state != VPMM_REGION_ALLOCATED || r->pool != gid)
            continue;
        c = bsearch(&key, ca, n, sizeof *ca, by_ck_ptr);
        if (c == NULL || dead[c - ca] || c->size != r->requested)
            finding(z,
                    "after reapply, g%u holds the allocation %p (%zu bytes) the checkpoint "
                    "does not want",
                    gid, (void *)r->addr, r->requested);
        found++;
    }
    if (found != wanted)
        finding(z, "after reapply, g%u holds %zu allocations, the checkpoint wants %zu", gid, found,
                wanted);
    for (size_t k = 0; k < z->nlive;) {
        live_t *l = &z->live[k];
        const vpmm_region_info_t *r = region_containing(&rs, (uintptr_t)l->p);
        if (r == NULL)
            finding(z, "after reapply, the tracked allocation %p is in no region", (void *)l->p);
        if (r->state == VPMM_REGION_ALLOCATED && r->addr == (uintptr_t)l->p &&
            r->requested == l->size) {
            const vpmm_stream_rec_t *now = alloc_strm(z, r->addr);
            stamp_check(z, l, "after reapply");
            if (now != l->strm) {
                /* The checkpoint's allocation at the same place and of the same size, on another
                 * stream: the tracked one was dropped, that one revived (with no other streams). */
                l->strm = now;
                l->own_rec = rec_of_key(z, vpmm_i_stream_key_of(now));
                l->own_gone = 0;
                l->nuses = 0;
            } /* else the same allocation: it keeps its other streams (uses) */
            k++;
            continue;
        }
        if (r->pool != gid)
            finding(z, "reapply on g%u changed the allocation %p of pool %u", gid, (void *)l->p,
                    r->pool);
        if (l->share >= 0)
            finding(z, "reapply on g%u dropped the allocation %p, which was exported", gid,
                    (void *)l->p);
        live_remove(z, k); /* dropped by the reapply */
    }
    tracked = live_sorted(z);
    for (size_t i = 0, nl = z->nlive; i < n; i++) {
        if (dead[i] || in_sorted(tracked, nl, (uintptr_t)ca[i].ptr))
            continue;
        if (z->nlive == MAX_LIVE) { /* no room to track it: give it back */
            expect_status(z, "vpmm_free(revived)", vpmm_free(z->pool, ca[i].ptr), S(VPMM_SUCCESS),
                          1);
            continue;
        }
        live_add(z, ca[i].ptr, ca[i].size, z->next_serial++, "vpmm_checkpoint_reapply (revived)");
        z->live[z->nlive - 1].own_rec =
            rec_of_key(z, vpmm_i_stream_key_of(z->live[z->nlive - 1].strm));
        gates_check(z, &z->live[z->nlive - 1], "vpmm_checkpoint_reapply (revived)");
        dev_given(z, (uintptr_t)ca[i].ptr, ca[i].size);
    }
    free(tracked);
    free(rs.r);
}

static int op_ck_reapply(fz_t *z)
{
    unsigned gsel = rd8(z), csel = rd8(z), mode = rd8(z);
    uint32_t mask = rd32(z);
    vpmm_graph_pool_t *gp;
    vpmm_checkpoint_t *ck;
    vpmm_graph_pool_stats_t gs;
    vpmm_checkpoint_info_t info;
    vpmm_checkpoint_alloc_t *ca;
    unsigned char *dead, local;
    void **list;
    size_t n, nlist = 0;
    int defect = 0;
    snap_t before;
    vpmm_status_t st;

    if (z->ngp == 0 || z->nck == 0)
        return 0;
    gp = z->gps[gsel % z->ngp].gp;
    ck = z->cks[csel % z->nck];
    gs = gstats(z, gp);
    expect_status(z, "vpmm_checkpoint_info", vpmm_checkpoint_info(ck, &info), S(VPMM_SUCCESS), 1);
    n = info.allocs;
    ca = malloc((n + 1) * sizeof *ca);
    dead = calloc(n + 1, 1);
    list = malloc((n + 2) * sizeof *list);
    if (ca == NULL || dead == NULL || list == NULL)
        finding(z, "out of host memory");
    if (vpmm_checkpoint_allocs(ck, ca, n) != n)
        finding(z, "vpmm_checkpoint_allocs disagrees with vpmm_checkpoint_info");
    qsort(ca, n, sizeof *ca, by_ck_ptr);
    if (mode % 4 != 0) {
        for (size_t i = 0; i < n; i++) {
            if ((mask >> (i % 32)) & 1) {
                dead[i] = 1;
                list[nlist++] = ca[i].ptr;
            }
        }
    }
    if (mode % 4 == 3) {
        list[nlist] = ((mode >> 2) & 1) || nlist == 0 ? (void *)&local : list[0];
        nlist++;
        defect = 1;
    }
    snap_take(z, &before);
    st = vpmm_checkpoint_reapply(gp, ck, list, nlist);
    if (info.graph_pool != gs.id)
        expect_status(z, "vpmm_checkpoint_reapply(other graph pool)", st, S(VPMM_ERROR_WRONG_POOL),
                      1);
    else if (gs.captures > 0)
        expect_status(z, "vpmm_checkpoint_reapply(capturing)", st, S(VPMM_ERROR_STREAM_CAPTURING),
                      1);
    else if (defect)
        expect_status(z, "vpmm_checkpoint_reapply(bad dead list)", st,
                      S(VPMM_ERROR_INVALID_ARGUMENT), 1);
    else if (deferred_in(z, gs.id) && ++conflicts_expected)
        expect_status(z, "vpmm_checkpoint_reapply(memory another stream still uses)", st,
                      S(VPMM_ERROR_CHECKPOINT_CONFLICT), 1);
    else
        expect_status(z, "vpmm_checkpoint_reapply", st,
                      S(VPMM_SUCCESS) | S(VPMM_ERROR_CHECKPOINT_CONFLICT), 1);
    if (st == VPMM_SUCCESS)
        reconcile(z, gs.id, ca, n, dead);
    else
        snap_same(z, &before, "vpmm_checkpoint_reapply");
    free(list);
    free(dead);
    free(ca);
    return 1;
}

static int op_ck_destroy(fz_t *z)
{
    unsigned i = rd8(z);
    if (z->nck == 0)
        return 0;
    i %= (unsigned)z->nck;
    vpmm_checkpoint_destroy(z->cks[i]);
    z->cks[i] = z->cks[--z->nck];
    return 1;
}

static int op_trim(fz_t *z)
{
    unsigned kind = rd8(z) % 4, v = rd16(z);
    size_t target = kind == 0 ? 0 : kind == 2 ? SIZE_MAX : (size_t)v * 64 * KiB;
    size_t released = SIZE_MAX;
    vpmm_status_t st = vpmm_trim(z->pool, target, kind == 3 ? NULL : &released);
    expect_status(z, "vpmm_trim", st, S(VPMM_SUCCESS), 0);
    if (st == VPMM_SUCCESS && kind != 3 && released % z->page_size != 0)
        finding(z, "vpmm_trim released %zu bytes: not whole pages", released);
    return 1;
}

static int release_entry(vpmm_drv_entry_t e)
{
    return e == VPMM_DRV_VA_FREE || e == VPMM_DRV_MEM_RELEASE || e == VPMM_DRV_MEM_UNMAP ||
           e == VPMM_DRV_EVENT_DESTROY || e == VPMM_DRV_USER_OBJECT_RELEASE ||
           e == VPMM_DRV_GRAPH_DESTROY || e == VPMM_DRV_END_CAPTURE;
}

/* The driver entries FAULT's operand names (e % FZ_DRV_ENTRIES): fixed by the encoding, so that
 * a new entry of the driver table changes no input's meaning (the fourth encoding has the 27 of
 * driver.h since the several-devices contract: REVOKE_ACCESS, GET_ACCESS — never counted nor
 * failed by the decorator, so an arming of it fails nothing —, STREAM_DEVICE, MEM_EXPORT and
 * MEM_IMPORT after the first 22, which the third encoding had). */
#define FZ_DRV_ENTRIES 27
_Static_assert(VPMM_DRV_ENTRY_COUNT == FZ_DRV_ENTRIES,
               "a new driver entry: make FAULT name it in a new encoding (fuzz_ops.c, "
               "make_corpus.py --upgrade)");

void arm_apply(fz_t *z, vpmm_driver_t *w)
{
    vpmm_drv_entry_t e = z->arm_entry;
    unsigned n = (unsigned)z->arm_n;
    switch (z->arm_mode) {
    case 0:
        vpmm_fault_fail_nth(w, e, n % 8 + 1, z->arm_res);
        break;
    case 1:
        vpmm_fault_fail_any_nth(w, n % 16 + 1, z->arm_res);
        break;
    default:
        /* A lasting failure of a release entry leaks by design (every release gets two tries). */
        if (release_entry(e))
            vpmm_fault_fail_nth(w, e, n % 4 + 1, z->arm_res);
        else
            vpmm_fault_fail_from(w, e, n % 4 + 1, z->arm_res);
        break;
    }
    /* The undo of a refused grant fails too: a second arming, of an entry whose failure leaves
     * nothing behind that the pool relies on (vpmm.h: the revoke is best effort). */
    if (z->arm_undo)
        vpmm_fault_fail_nth(w, VPMM_DRV_REVOKE_ACCESS, 1, z->arm_res);
}

static int op_fault(fz_t *z)
{
    unsigned kind = rd8(z);
    vpmm_drv_entry_t e = (vpmm_drv_entry_t)(rd8(z) % FZ_DRV_ENTRIES);
    unsigned n = rd8(z);
    vpmm_dres_t res = (kind & 1) ? VPMM_DRV_OUT_OF_MEMORY : VPMM_DRV_ERROR;
    if (fz_verbose)
        fprintf(stderr, "    arm: mode %u, %s, n %u, %s\n", (kind >> 1) % 4, vpmm_drv_entry_name(e),
                n, res == VPMM_DRV_ERROR ? "ERROR" : "OUT_OF_MEMORY");
    /* One arming at a time: two could fail both tries of one call, which is allowed to leak. */
    vpmm_fault_clear(z->fault);
    if (z->dev.ifault != NULL)
        vpmm_fault_clear(z->dev.ifault);
    if ((kind >> 1) % 4 == 3) {
        z->armed = 0;
        z->destroy_fault = 1;
        z->destroy_fault_n = n % 32 + 1;
        z->destroy_fault_res = res;
        return 1;
    }
    z->armed = 1;
    z->arm_mode = (int)((kind >> 1) % 4);
    z->arm_entry = e;
    z->arm_n = (int)n;
    z->arm_res = res;
    z->arm_undo = (kind >> 3) & 1;
    arm_apply(z, z->fault); /* OPEN and CLOSE move it to the importer's driver */
    return 1;
}

static void inspect_stats(fz_t *z)
{
    vpmm_stats_t s = stats_of(z);
    size_t live = 0, alloc = 0;
    for (size_t i = 0; i < z->nlive; i++) {
        live += z->live[i].size;
        alloc += rnd(z->live[i].size);
    }
    if (s.live_allocs != z->nlive || s.live_bytes != live || s.allocated_bytes != alloc)
        finding(z,
                "stats: %llu live allocations of %zu bytes (%zu allocated); tracked %zu of %zu "
                "(%zu)",
                (unsigned long long)s.live_allocs, s.live_bytes, s.allocated_bytes, z->nlive, live,
                alloc);
    if (s.reserved_va_bytes != s.allocated_bytes + s.free_bytes + s.hole_bytes + s.zombie_bytes)
        finding(z, "stats: reserved %zu != allocated %zu + free %zu + holes %zu + zombies %zu",
                s.reserved_va_bytes, s.allocated_bytes, s.free_bytes, s.hole_bytes, s.zombie_bytes);
    if (s.mapped_bytes > z->memory_limit || (z->max_bytes && s.mapped_bytes > z->max_bytes))
        finding(z, "stats: %zu bytes mapped, over the device (%zu) or the cap (%zu)",
                s.mapped_bytes, z->memory_limit, z->max_bytes);
    if (s.peak_live_bytes < s.live_bytes || s.peak_mapped_bytes < s.mapped_bytes)
        finding(z, "stats: a peak below its current value");
}

static void inspect_walk(fz_t *z)
{
    regions_t rs;
    uintptr_t *tracked = live_sorted(z);
    size_t nalloc = 0;
    regions_get(z, &rs);
    for (size_t k = 0; k < rs.n; k++) {
        const vpmm_region_info_t *r = &rs.r[k];
        if (k > 0 && r->addr < rs.r[k - 1].addr + rs.r[k - 1].size)
            finding(z, "walk: regions %p and %p overlap", (void *)rs.r[k - 1].addr,
                    (void *)r->addr);
        if (r->state != VPMM_REGION_ALLOCATED)
            continue;
        nalloc++;
        if (!in_sorted(tracked, z->nlive, r->addr))
            finding(z, "walk: an allocation at %p (%zu bytes) nobody made", (void *)r->addr,
                    r->requested);
    }
    if (nalloc != z->nlive)
        finding(z, "walk: %zu allocations, %zu tracked", nalloc, z->nlive);
    for (size_t i = 0; i < z->nlive; i++) {
        const vpmm_region_info_t *r = region_containing(&rs, (uintptr_t)z->live[i].p);
        if (r == NULL || r->addr != (uintptr_t)z->live[i].p || r->requested != z->live[i].size)
            finding(z, "walk: the tracked allocation %p (%zu bytes) is not a region",
                    (void *)z->live[i].p, z->live[i].size);
        stamp_check(z, &z->live[i], "walk");
    }
    free(tracked);
    free(rs.r);
}

static int op_inspect(fz_t *z)
{
    unsigned kind = rd8(z) % 8, i = rd8(z);
    char buf[4097];
    switch (kind) {
    case 0:
        inspect_stats(z);
        break;
    case 1:
        inspect_walk(z);
        break;
    case 2:
        expect_status(z, "vpmm_pool_dump", vpmm_pool_dump(z->pool, devnull), S(VPMM_SUCCESS), 1);
        break;
    case 3: {
        size_t len = (i & 0x80) ? sizeof buf - 1 : i % 120 + 1;
        memset(buf, 'x', sizeof buf);
        expect_status(z, "vpmm_pool_oom_report", vpmm_pool_oom_report(z->pool, buf, len),
                      S(VPMM_SUCCESS), 1);
        if (memchr(buf, '\0', len) == NULL || buf[len] != 'x')
            finding(z, "vpmm_pool_oom_report did not stay within and terminate %zu bytes", len);
        break;
    }
    case 4: {
        int code = 0;
        const char *call = NULL;
        expect_status(z, "vpmm_pool_last_driver_error",
                      vpmm_pool_last_driver_error(z->pool, &code, &call), S(VPMM_SUCCESS), 1);
        if (code != 0 && call == NULL)
            finding(z, "last driver error %d without a call name", code);
        break;
    }
    case 5: {
        vpmm_stats_t s;
        expect_status(z, "vpmm_reset_peak_stats", vpmm_reset_peak_stats(z->pool), S(VPMM_SUCCESS),
                      1);
        s = stats_of(z);
        if (s.peak_live_bytes != s.live_bytes || s.peak_mapped_bytes != s.mapped_bytes)
            finding(z, "peaks not reset (live %zu/%zu, mapped %zu/%zu)", s.live_bytes,
                    s.peak_live_bytes, s.mapped_bytes, s.peak_mapped_bytes);
        break;
    }
    case 6:
        if (z->ngp == 0)
            return 0;
        {
            vpmm_graph_pool_t *gp = z->gps[i % z->ngp].gp;
            vpmm_graph_pool_stats_t gs = gstats(z, gp);
            vpmm_stats_t s = stats_of(z);
            if (gs.live_allocs > s.live_allocs || gs.mapped_bytes > s.mapped_bytes ||
                gs.peak_live_bytes < gs.live_bytes)
                finding(z, "graph pool g%u stats do not fit the pool's", gs.id);
            expect_status(z, "vpmm_graph_pool_reset_peak_stats",
                          vpmm_graph_pool_reset_peak_stats(gp), S(VPMM_SUCCESS), 1);
        }
        break;
    default:
        if (z->nck == 0)
            return 0;
        {
            const vpmm_checkpoint_t *ck = z->cks[i % z->nck];
            vpmm_checkpoint_info_t info;
            vpmm_checkpoint_alloc_t one[4];
            size_t live = 0, n;
            expect_status(z, "vpmm_checkpoint_info", vpmm_checkpoint_info(ck, &info),
                          S(VPMM_SUCCESS), 1);
            n = vpmm_checkpoint_allocs(ck, one, 4);
            for (size_t k = 0; k < n && k < 4; k++)
                live += one[k].size;
            if (n != info.allocs || (n <= 4 && live != info.live_bytes) ||
                info.mapped_bytes < info.live_bytes)
                finding(z, "checkpoint info and allocations disagree");
        }
        break;
    }
    return 1;
}

static int op_sync(fz_t *z)
{
    for (size_t i = 0; i < z->ncaps; i++)
        z->caps[i].tainted = 1; /* refused during a capture, which it invalidates */
    (void)z->host->synchronize(z->host);
    return 1;
}

/* Not an operation of its own (neither checked nor counted): where the next ones run. */
static int op_thread(fz_t *z)
{
    z->thread = rd8(z) % NTHREADS;
    if (fz_verbose)
        fprintf(stderr, "    now on thread %u\n", z->thread);
    return 0;
}

static const op_fn op_table[OP_COUNT] = {
    op_malloc,        op_free,          op_free_bad,   op_work,          op_stream_release,
    op_capture_begin, op_capture_end,   op_ext_begin,  op_ext_end,       op_capture_register,
    op_capture_gp,    op_graph_destroy, op_exec,       op_gp_create,     op_gp_ref,
    op_ck_take,       op_ck_reapply,    op_ck_destroy, op_trim,          op_fault,
    op_inspect,       op_sync,          op_thread,     op_record_stream, op_grant,
    op_export,        op_open,          op_close,      op_unshare,
};

/* ---- one input ------------------------------------------------------------------------------ */

/* The calling thread's per-thread stream, by its key (the harness's name for it). */
static int learn_thread_stream(fz_t *z)
{
    z->ptkey[z->thread] = vpmm_host_thread_stream(z->host);
    if (z->ptkey[z->thread] == NULL)
        finding(z, "vpmm_host_thread_stream failed");
    z->token[z->thread] = vpmm_i_thread_token();
    return 1;
}

static void setup(fz_t *z)
{
    static const size_t gran[4] = { 2 * MiB, 64 * KiB, 64 * KiB, 2 * MiB };
    static const size_t page[4] = { 2 * MiB, 64 * KiB, 256 * KiB, 4 * MiB };
    static const size_t memory[4] = { 64 * MiB, 128 * MiB, 256 * MiB, 32 * MiB };
    static const int cache[4] = { -1, 0, 100, 1 };
    vpmm_config_t cfg;
    vpmm_options_t opt;
    vpmm_host_options_t ho;
    vpmm_status_t st;

    z->page_size = page[z->cfg & 3];
    z->granularity = gran[z->cfg & 3];
    z->dev.devices = (z->cfg2 & 0x40) ? 2 : 1;
    z->dev.isolated = z->dev.devices > 1 && (z->cfg2 & 0x80);
    z->nslots = z->dev.devices > 1 ? NSLOTS2 : NSLOTS1;
    z->memory_limit = memory[(z->cfg >> 2) & 3];
    if ((z->cfg & 3) == 1)
        z->memory_limit /= 4; /* 64 KiB pages: at most 1024 of them, or checking dominates */
    z->max_bytes = (z->cfg & 0x40) ? 40 * MiB : 0;
    vpmm_config_init(&cfg);
    cfg.ignore_env = 1;
    cfg.backend = VPMM_BACKEND_HOST;
    cfg.page_size = z->page_size;
    cfg.va_size = VA_SIZE;
    cfg.prealloc_pages = (z->cfg & 0x80) ? 2 : 0;
    cfg.max_bytes = z->max_bytes;
    cfg.cache_percent = cache[(z->cfg >> 4) & 3];
    z->ptd_default = z->cfg2 & 1;
    cfg.worker = (z->cfg2 >> 1) & 1;
    cfg.handle_pages = (size_t)1 << ((z->cfg2 >> 2) & 3);
    switch ((z->cfg2 >> 4) & 3) {
    case 0:
        cfg.small_bytes = 0;
        break;
    case 1:
        cfg.small_bytes = 1;
        break;
    case 2:
        cfg.small_bytes = z->page_size / 32;
        break;
    default:
        cfg.small_bytes = z->page_size;
    }
    cfg.default_stream =
        z->ptd_default ? VPMM_DEFAULT_STREAM_PER_THREAD : VPMM_DEFAULT_STREAM_LEGACY;
    st = vpmm_i_options_resolve(&cfg, &opt);
    if (st != VPMM_SUCCESS)
        finding(z, "options: %s", vpmm_status_name(st));
    /* The pool's own host backend would follow its default stream (pool.c); this one must too. */
    ho = (vpmm_host_options_t){ .granularity = gran[z->cfg & 3],
                                .memory_limit = z->memory_limit,
                                .per_thread_default_stream = z->ptd_default,
                                .devices = z->dev.devices,
                                .isolated = z->dev.isolated ? 2u : 0u };
    if (vpmm_host_open(&ho, &z->host) != VPMM_DRV_OK)
        finding(z, "vpmm_host_open failed");
    if (vpmm_fault_wrap(z->host, &z->fault) != VPMM_DRV_OK)
        finding(z, "vpmm_fault_wrap failed");
    st = vpmm_a_pool_create_on(&opt, z->fault, 0, &z->pool);
    if (st != VPMM_SUCCESS)
        finding(z, "pool creation failed: %s", vpmm_status_name(st));
    if (z->pool->worker != NULL)
        vpmm_i_worker_hold(z->pool, 1); /* it runs between operations only (check_all) */
    for (size_t i = 0; i < NCREATED; i++) {
        z->created[i] = vpmm_host_stream_create(z->host);
        if (z->created[i] == NULL)
            finding(z, "vpmm_host_stream_create failed");
    }
    for (unsigned t = 0; t < NTHREADS; t++)
        run_on(z, t, learn_thread_stream);
    dev_setup(z);
    check_all(z);
}

static int any_capture(const fz_t *z)
{
    for (int id = ID_S1; id < nident(z); id++)
        if (cap_of(z, id, NULL) != VPMM_CAPTURE_NONE)
            return 1;
    return 0;
}

/* Ends the capture stream z->arg began, on the thread running this. */
static int end_capture_here(fz_t *z)
{
    vpmm_graph_t g = NULL;
    vpmm_status_t st = vpmm_capture_end(z->pool, ident_handle(z, z->arg), &g);
    expect_status(z, "vpmm_capture_end(cleanup)", st, S(VPMM_SUCCESS) | S(VPMM_ERROR_DRIVER), 1);
    if (st == VPMM_SUCCESS)
        keep_graph(z, g);
    return 1;
}

/* Ends everything and destroys the pool; nothing may be left in the driver. */
static void cleanup(fz_t *z)
{
    vpmm_fault_live_t live;
    vpmm_host_counts_t hc;
    vpmm_stats_t s;
    vpmm_status_t st;

    z->op = -1;
    vpmm_fault_clear(z->fault);
    if (z->dev.ifault != NULL)
        vpmm_fault_clear(z->dev.ifault);
    z->armed = 0;
    z->thread = 0;
    /* Each capture is ended by the thread that began it (the only one allowed, unless RELAXED). */
    for (int pass = 0; pass < 4 && any_capture(z); pass++) {
        for (int id = ID_S1; id < nident(z); id++) {
            uint64_t cid;
            const cap_t *c;
            if (cap_of(z, id, &cid) == VPMM_CAPTURE_NONE)
                continue;
            c = cap_find(z, cid);
            if (c == NULL)
                finding(z, "stream %s is in capture %llu, which the input never began",
                        ident_name(id), (unsigned long long)cid);
            if (c->ident != id)
                continue; /* joined: its origin's end ends it */
            z->arg = id;
            run_on(z, c->thread, end_capture_here);
        }
        caps_check(z);
    }
    if (any_capture(z))
        finding(z, "a capture cannot be ended");
    check_all(z);
    while (z->nexec > 0)
        if (vpmm_host_exec_destroy(z->host, z->execs[--z->nexec]) != VPMM_DRV_OK)
            finding(z, "vpmm_host_exec_destroy failed");
    while (z->ngraphs > 0)
        expect_status(z, "vpmm_graph_destroy(cleanup)",
                      vpmm_graph_destroy(z->pool, z->graphs[--z->ngraphs]), S(VPMM_SUCCESS), 1);
    vpmm_host_complete_all(z->host);
    check_all(z);
    while (z->nlive > 0)
        free_live(z, z->nlive - 1);
    while (z->ngp > 0) {
        gref_t *g = &z->gps[z->ngp - 1];
        for (; g->refs > 0; g->refs--)
            expect_status(z, "vpmm_graph_pool_release(cleanup)", vpmm_graph_pool_release(g->gp),
                          S(VPMM_SUCCESS), 1);
        z->ngp--;
    }
    while (z->nck > 0)
        vpmm_checkpoint_destroy(z->cks[--z->nck]);
    vpmm_host_complete_all(z->host);
    dev_cleanup(z);
    s = stats_of(z);
    if (s.live_allocs != 0 || s.graph_pools != 0)
        finding(z, "after cleanup: %llu live allocations, %llu graph pools",
                (unsigned long long)s.live_allocs, (unsigned long long)s.graph_pools);
    if (vpmm_host_user_objects(z->host) != 0 || vpmm_host_graphs(z->host) != 0)
        finding(z, "after cleanup: %zu user objects, %zu graphs in the driver",
                vpmm_host_user_objects(z->host), vpmm_host_graphs(z->host));
    check_all(z);
    if (z->destroy_fault)
        vpmm_fault_fail_any_nth(z->fault, z->destroy_fault_n, z->destroy_fault_res);
    /* Every teardown call gets a second try: one failure must not matter. */
    st = vpmm_pool_destroy(z->pool);
    if (st != VPMM_SUCCESS)
        finding(z, "vpmm_pool_destroy: %s", vpmm_status_name(st));
    z->pool = NULL;
    dev_after_destroy(z);
    vpmm_fault_clear(z->fault);
    vpmm_fault_live(z->fault, &live);
    vpmm_host_counts(z->host, &hc);
    if (live.handles || live.mappings || live.reservations || live.events || live.user_objects ||
        hc.handles || hc.mappings || hc.reservations || hc.events)
        finding(z,
                "leak after vpmm_pool_destroy: handles %lld, mappings %lld, reservations %lld, "
                "events %lld, user objects %lld (host: %zu, %zu, %zu, %zu)",
                (long long)live.handles, (long long)live.mappings, (long long)live.reservations,
                (long long)live.events, (long long)live.user_objects, hc.handles, hc.mappings,
                hc.reservations, hc.events);
    z->fault->close(z->fault);
    z->fault = z->host = NULL;
    dev_fds_check(z);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_t *z = &fz_state;
    if (size == 0)
        return 0;
    memset(z, 0, sizeof *z);
    z->in = data;
    z->len = size;
    z->cfg = data[0];
    z->pos = 1;
    z->cfg2 = rd8(z);
    z->op = -1;
    z->dev.fds = dev_fd_count();
    workers_start();
    setup(z);
    while (z->pos < z->len) {
        int op = (int)(rd8(z) & 31), done;
        uint64_t injected;
        if (op >= OP_COUNT)
            op = op < 31 ? OP_MALLOC : OP_FREE;
        z->op = op;
#if !VPMM_HAVE_GRAPHS
        /* Without graph/ (VPMM_WITH_GRAPHS=OFF): no capture, graph pool, graph or checkpoint is
         * ever made, so their operations are skipped like one with nothing to act on (their
         * operand bytes are read as the next opcodes). */
        if (op >= OP_CAPTURE_BEGIN && op <= OP_CK_DESTROY)
            continue;
#endif
        if (fz_verbose && z->thread != 0 && op != OP_THREAD)
            fprintf(stderr, "op %llu: %s (thread %u)\n", (unsigned long long)z->nop, op_names[op],
                    z->thread);
        else if (fz_verbose)
            fprintf(stderr, "op %llu: %s\n", (unsigned long long)z->nop, op_names[op]);
        injected = vpmm_fault_injected(z->fault) + vpmm_fault_injected(z->dev.ifault);
        done = op == OP_THREAD ? op_thread(z) : run_here(z, op_table[op]);
        if (fz_verbose &&
            vpmm_fault_injected(z->fault) + vpmm_fault_injected(z->dev.ifault) != injected)
            fprintf(stderr, "    %llu driver failure(s) injected, the last in %s\n",
                    (unsigned long long)(vpmm_fault_injected(z->fault) +
                                         vpmm_fault_injected(z->dev.ifault) - injected),
                    (op == OP_OPEN || op == OP_CLOSE) && z->dev.ifault != NULL
                        ? z->dev.ifault->last_call
                        : z->fault->last_call);
        if (!done)
            continue; /* nothing to act on (no graph pool, no checkpoint ...): not counted */
        if (op != OP_FAULT && z->armed) {
            vpmm_fault_clear(z->fault); /* an arming lasts one operation */
            if (z->dev.ifault != NULL)
                vpmm_fault_clear(z->dev.ifault);
            z->armed = 0;
        }
        if (fz_verbose)
            trace_waits(z);
        check_all(z);
        caps_check(z);
        deferred_check(z);
        retired_check(z);
        stream_order_check(z);
        dev_check(z);
        z->nop++;
        if (++total_ops % 1000000 == 0)
            fprintf(stderr, "fuzz_ops: %llu operations so far\n", (unsigned long long)total_ops);
    }
    cleanup(z);
    for (size_t i = 0; i < z->npend; i++)
        free(z->pend[i].pc);
    total_inputs++;
    return 0;
}

/* ---- process lifetime ------------------------------------------------------------------------ */

static void at_exit(void)
{
    fprintf(stderr, "fuzz_ops: %llu operations in %llu inputs\n", (unsigned long long)total_ops,
            (unsigned long long)total_inputs);
    fprintf(stderr,
            "fuzz_ops: %llu streams recorded on allocations, %llu frees deferred by them, %llu "
            "reapplies refused for them\n",
            (unsigned long long)records_made, (unsigned long long)gated_frees,
            (unsigned long long)conflicts_expected);
    dev_report();
    workers_stop_all();
    if (side_pool != NULL) {
        vpmm_free(side_pool, side_ptr);
        vpmm_pool_destroy(side_pool);
        side_pool = NULL;
    }
    if (devnull != NULL)
        fclose(devnull);
    devnull = NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    vpmm_config_t cfg;
    (void)argc;
    (void)argv;
    fz_verbose = getenv("FUZZ_OPS_VERBOSE") != NULL && atoi(getenv("FUZZ_OPS_VERBOSE")) > 0;
    devnull = fopen("/dev/null", "w");
    if (devnull == NULL) {
        perror("fuzz_ops: /dev/null");
        abort();
    }
    vpmm_config_init(&cfg);
    cfg.ignore_env = 1;
    cfg.backend = VPMM_BACKEND_HOST;
    cfg.va_size = VA_SIZE;
    cfg.host_memory = 16 * MiB;
    if (vpmm_pool_create(&cfg, &side_pool) != VPMM_SUCCESS ||
        vpmm_malloc(side_pool, 4096, NULL, &side_ptr) != VPMM_SUCCESS) {
        fprintf(stderr, "fuzz_ops: the side pool could not be made: %s\n", vpmm_last_error());
        abort();
    }
    atexit(at_exit);
    return 0;
}
