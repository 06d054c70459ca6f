#!/usr/bin/env python3
"""make_corpus.py — writes the seed corpus of the operation fuzzer (tests/fuzz/corpus/).

Two kinds of seeds, in the encoding described at the top of fuzz_ops.c:

  trace-*   slices of the recorded allocation traces (bench/traces/*.trace.gz; format in
            docs/TRACE_FORMAT.md) turned into operations:
            each allocation is a MALLOC of its size (scaled down by a power of two so that the
            slice's peak fits the small emulated device) followed by one kernel enqueued on its
            stream, each free a FREE of that allocation (by malloc number), and each "free
            completed" event advances its stream by one kernel. Blocks allocated before the
            slice are ignored; blocks still live at its end are freed by the harness's cleanup.
            Some slices keep the trace's streams, others spread blocks over four streams;
            trace-*-ptds-* make each trace stream one thread's per-thread stream (0x2) and free
            half of the blocks from another thread; trace-*-uses-* record a quarter of the blocks
            on another stream with a kernel enqueued there (another thread's per-thread stream
            in -uses-1), which advances when the block's free completes.
  hand-*    hand-written scenarios: graph trees (capture, checkpoint, reapply with dead
            pointers), captures begun and ended outside vpmm, an invalidated capture, graph
            instantiation and launches, every kind of bad free and absurd size, OOM with trim,
            defragmentation across streams, and driver failures injected into each of those;
            per-thread streams (hand-ptds-*): the per-thread handle used from four threads with
            cross-thread frees and reuse, captures on per-thread streams and captures begun by
            workers (ends from the wrong thread, relaxed ends, legacy work and SYNC breaking
            them), everything that could make vpmm work on the legacy stream during a per-thread
            capture it knows of, and one it does not (begun outside vpmm), and stream 0 as the
            per-thread stream; other streams' uses (hand-uses-*, vpmm_record_stream): deferred
            frees against their own stream, slow paths and OOM, bad pointers, a gate stream being
            captured (by vpmm and outside it) at the free, a capture's allocation recorded and
            freed in and after captures, legacy gates during a capture, per-thread streams of
            other threads as gates, checkpoints refused over a deferred free (and reapplies
            keeping uses, a graph pool dissolving with one), driver failures around them;
            several devices (hand-dev-*, a node of two devices): device 1 granted before and
            after growth, defragmentation's remaps, graph-pool growth and a reapply reviving
            zombies, an isolated device 1 and devices that are not there, device 1's streams
            allocating, recorded and released, a fault sweep over a grant (each set_access, its
            undo, any call) and over the markers of device 1's streams; CUDA IPC (hand-ipc-*,
            with the importer): export, open, the exporter frees, the importer closes (and the
            other way round), unshare, refusals (buffers too small, bad pointers, a graph pool's
            allocation, bytes that are not a handle, stale handles, bad closes), neighbours on one
            page, shares with other streams' uses and defragmentation, fault sweeps over export,
            open and close.

The output is deterministic (fixed seeds, sorted traces). Usage:
  tests/fuzz/make_corpus.py [--out DIR]      (default: tests/fuzz/corpus next to this script)
  tests/fuzz/make_corpus.py --upgrade FILE...  rewrites inputs of the third encoding (24-30
                                             MALLOC or FREE, before GRANT, EXPORT, OPEN, CLOSE,
                                             UNSHARE) in place: they decode as before
  tests/fuzz/make_corpus.py --upgrade --from 2 FILE...  the same for the second encoding (23 a
                                             MALLOC, before RECORD_STREAM)
  tests/fuzz/make_corpus.py --upgrade --from 1 FILE...  the same for the first encoding (no
                                             second config byte)
"""
import argparse
import gzip
import os
import random
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MiB = 1 << 20
KiB = 1 << 10

# Opcodes (fuzz_ops.c).
(MALLOC, FREE, FREE_BAD, WORK, STREAM_RELEASE, CAPTURE_BEGIN, CAPTURE_END, EXT_BEGIN, EXT_END,
 CAPTURE_REGISTER, CAPTURE_GP, GRAPH_DESTROY, EXEC, GP_CREATE, GP_REF, CK_TAKE, CK_REAPPLY,
 CK_DESTROY, TRIM, FAULT, INSPECT, SYNC, THREAD, RECORD_STREAM, GRANT, EXPORT, OPEN, CLOSE,
 UNSHARE) = range(29)

# Stream operand slots: 0 NULL, 1 CU_STREAM_LEGACY, 2..5 created streams, 6 CU_STREAM_PER_THREAD
# (the per-thread stream of the thread running the operation; NULL too when config2 says so);
# on a node of two devices (config2 bit 6) 7 and 8 are created streams of device 1.
NULLS, LEGACY, S1, S2, S3, S4, PT, P1, P2 = range(9)

# Capture modes.
GLOBAL, THREAD_LOCAL, RELAXED = range(3)

# Driver entries (driver.h, vpmm_drv_entry_t).
(GRANULARITY, VA_RESERVE, VA_FREE, MEM_CREATE, MEM_RELEASE, MEM_MAP, MEM_UNMAP, SET_ACCESS,
 EVENT_CREATE, EVENT_DESTROY, EVENT_RECORD, EVENT_QUERY, STREAM_WAIT_EVENT, CAPTURE_INFO,
 MEM_GET_INFO, SYNCHRONIZE, BEGIN_CAPTURE, END_CAPTURE, USER_OBJECT_CREATE,
 GRAPH_RETAIN_USER_OBJECT, USER_OBJECT_RELEASE, GRAPH_DESTROY_ENTRY, REVOKE_ACCESS, GET_ACCESS,
 STREAM_DEVICE, MEM_EXPORT, MEM_IMPORT) = range(27)

# GRANT's device operand (d % 8 picks 0, 1, 1, 1, 2, -1, 64, INT_MIN).
OWN, PEER, DEV2, DEV_NEG, DEV64, DEV_MIN = 0, 1, 4, 5, 6, 7


def config(page=0, memory=0, cache=0, cap=False, prealloc=False):
    """The config byte: page 0-3 (2M, 64K, 256K/64K, 4M/2M), memory 0-3 (64, 128, 256, 32 MiB;
    a quarter with 64K pages), cache 0-3 (default, off, 100 %, 1 %)."""
    return page | memory << 2 | cache << 4 | (0x40 if cap else 0) | (0x80 if prealloc else 0)


def config2(ptd_default=False, worker=False, handle_pages_log2=0, classes=0, devices=1,
            isolated=False):
    """The second config byte: bit 0, stream 0 is the calling thread's per-thread stream; bit 1,
    the background worker; bits 2-3, handle pages 1, 2, 4 or 8 (log2); bits 4-5, size classes:
    default, none, a 32nd of a page, a whole page; bit 6, a node of two devices (the pool on
    device 0, P1 and P2 streams of device 1); bit 7, device 1 isolated (no peer access)."""
    return ((1 if ptd_default else 0) | (2 if worker else 0) | (handle_pages_log2 & 3) << 2 |
            (classes & 3) << 4 | (0x40 if devices > 1 else 0) | (0x80 if isolated else 0))


def with_config2(data, cfg2):
    """An input with its second config byte replaced."""
    return bytes(data[:1]) + bytes([cfg2]) + bytes(data[2:])


class Prog:
    """Assembles operations; numbers mallocs as the harness does (serial = malloc op index)."""

    def __init__(self, cfg, cfg2=0):
        self.b = bytearray([cfg, cfg2])
        self.serial = 0
        self.nhandles = 0  # IPC handles the harness keeps (a ring of 8), as it numbers them
        self.handle_at = 0
        self.opens = []  # the importer's open pointers, by the export's handle index

    def op(self, code, *operands):
        self.b.append(code)
        for size, v in operands:
            self.b += v.to_bytes(size, "little")
        return self

    def malloc(self, s, size, cls=6):
        """Returns the malloc's serial number (what FREE takes)."""
        self.op(MALLOC, (1, s), (1, cls), (4, size & 0xFFFFFFFF))
        self.serial += 1
        return (self.serial - 1) & 0xFFFF

    def free(self, serial):
        return self.op(FREE, (2, serial))

    def free_bad(self, kind, v=0, off=0):
        return self.op(FREE_BAD, (1, kind), (2, v), (4, off))

    def work(self, s, kind, n=0, other=0):
        """other: on a per-thread slot, the per-thread stream of thread (current + other) % 4."""
        return self.op(WORK, (1, s), (1, kind + 40 * other), (1, n))

    def enqueue(self, s, n=1, other=0):
        return self.work(s, 0, n - 1, other)

    def complete(self, s, other=0):
        return self.work(s, 1, 0, other)

    def advance(self, s, n=1, other=0):
        return self.work(s, 2, n - 1, other)

    def complete_all(self):
        return self.work(0, 3)

    def stream_release(self, s):
        return self.op(STREAM_RELEASE, (1, s))

    def capture_begin(self, s, gp=255, mode=0):
        """gp: index of a held graph pool, or a value >= their count for an anonymous one (the
        harness takes gp % (count + 1): 255 with no pool held is the anonymous one)."""
        return self.op(CAPTURE_BEGIN, (1, s), (1, gp), (1, mode))

    def capture_end(self, s):
        return self.op(CAPTURE_END, (1, s))

    def ext_begin(self, s):
        return self.op(EXT_BEGIN, (1, s))

    def ext_end(self, s, keep_graph=0):
        return self.op(EXT_END, (1, s), (1, keep_graph))

    def register(self, s, gp=0):
        return self.op(CAPTURE_REGISTER, (1, s), (1, gp))

    def capture_gp(self, s):
        return self.op(CAPTURE_GP, (1, s))

    def graph_destroy(self, i=0):
        return self.op(GRAPH_DESTROY, (1, i))

    def exec_(self, kind, i=0, s=S1):
        return self.op(EXEC, (1, kind), (1, i), (1, s))

    def gp_create(self):
        return self.op(GP_CREATE)

    def gp_ref(self, release, i=0):
        return self.op(GP_REF, (1, 1 if release else 0), (1, i))

    def ck_take(self, gp=0):
        return self.op(CK_TAKE, (1, gp))

    def ck_reapply(self, gp=0, ck=0, dead=0, mask=0):
        return self.op(CK_REAPPLY, (1, gp), (1, ck), (1, dead), (4, mask))

    def ck_destroy(self, i=0):
        return self.op(CK_DESTROY, (1, i))

    def trim(self, kind=0, v=0):
        return self.op(TRIM, (1, kind), (2, v))

    def fault(self, mode, entry=0, n=0, oom=False, undo=False):
        """mode 0: entry fails at its (n%8+1)-th call; 1: any entry at the (n%16+1)-th; 2: entry
        from its (n%4+1)-th call on; 3: one failure during the final pool destruction. undo: the
        first revoke_access fails too (a refused grant's undo)."""
        return self.op(FAULT, (1, mode << 1 | (1 if oom else 0) | (8 if undo else 0)), (1, entry),
                       (1, n))

    def inspect(self, kind, i=0):
        return self.op(INSPECT, (1, kind), (1, i))

    def sync(self):
        return self.op(SYNC)

    def thread(self, t):
        """The following operations run on thread t (0 main, 1-3 workers)."""
        return self.op(THREAD, (1, t))

    def record(self, s, serial):
        """vpmm_record_stream(the live allocation of malloc #serial, s), s named by the thread
        running it."""
        return self.op(RECORD_STREAM, (1, s), (1, 0), (2, serial), (4, 0))

    def record_bad(self, s, kind, v=0, off=0):
        """vpmm_record_stream of FREE_BAD's address kind (0 NULL, 1 freed, 2 interior, 3 stack,
        4 heap/static, 5 another pool's, 6 near the pool's memory)."""
        return self.op(RECORD_STREAM, (1, s), (1, 0x80 | kind), (2, v), (4, off))

    def grant(self, dev=PEER):
        """vpmm_pool_grant_access: OWN, PEER (device 1), or a device that is not there."""
        return self.op(GRANT, (1, dev))

    def export(self, serial, small=0):
        """vpmm_ipc_export of the live allocation of malloc #serial (small: a buffer of small - 1
        bytes, too small); returns the index of the handle kept, as OPEN names it (assuming the
        export succeeds)."""
        kind = 0x40 if small else 0
        self.op(EXPORT, (1, kind), (2, serial), (4, max(small - 1, 0)))
        if small:
            return None
        if self.nhandles < 8:
            self.nhandles += 1
            return self.nhandles - 1
        k = self.handle_at
        self.handle_at = (self.handle_at + 1) % 8
        return k

    def export_bad(self, kind, v=0, off=0):
        return self.op(EXPORT, (1, 0x80 | kind), (2, v), (4, off))

    def open(self, h, corrupt=0, ok=True):
        """vpmm_ipc_open of kept handle h in the importer; corrupt 4-7: shortened, wrong magic,
        wrong version, NULL (refused); ok=False: a stale handle, refused too."""
        self.op(OPEN, (1, h), (1, corrupt))
        if corrupt == 0 and ok:
            self.opens.append(h)
        return self

    def close(self, h=None):
        """vpmm_ipc_close of an open pointer: the first one opened from handle h (the newest
        open by default), as the harness numbers its opens (a closed one's place takes the
        last)."""
        k = len(self.opens) - 1 if h is None else self.opens.index(h)
        self.op(CLOSE, (1, k))
        self.opens[k] = self.opens[-1]
        self.opens.pop()
        return self

    def close_bad(self, kind):
        """vpmm_ipc_close of NULL (0), a stack address (1), the last pointer closed (2)."""
        return self.op(CLOSE, (1, 0x80 | kind))

    def unshare(self, serial):
        return self.op(UNSHARE, (1, 0), (2, serial), (4, 0))

    def unshare_bad(self, kind, v=0, off=0):
        return self.op(UNSHARE, (1, 0x80 | kind), (2, v), (4, off))

    def bytes(self):
        return bytes(self.b)


# ---- trace slices -------------------------------------------------------------------------------

def load_trace(path):
    ops = []
    with gzip.open(path, "rt") as f:
        for line in f:
            if not line.strip() or line.startswith("#"):
                continue
            kind, addr, size, stream = line.split()
            ops.append((kind, int(addr, 16), int(size), int(stream)))
    return ops


def trace_seed(ops, start, count, cfg, memory, spread, rng, threads=False, uses=False):
    """Operations for events [start, start + count) of a trace. threads: each trace stream is the
    per-thread stream of one of the four threads, blocks are freed by any thread. uses: a quarter
    of the blocks are also used by another stream (another thread's per-thread stream with
    threads), which enqueues one kernel and is recorded on the block (vpmm_record_stream); that
    stream advances by one when the block's free completes."""
    window = ops[start:start + count]
    live, peak, cur, biggest = {}, 0, 0, 1
    for kind, addr, size, _ in window:
        if kind == "a":
            live[addr] = size
            cur += size
            peak = max(peak, cur)
            biggest = max(biggest, size)
        elif kind == "f" and addr in live:
            cur -= live.pop(addr)
    scale = 1
    while peak // scale > memory * 6 // 10 or biggest // scale > 24 * MiB:
        scale *= 2
    p = Prog(cfg)
    serial_of, stream_of, used_by = {}, {}, {}
    streams = sorted({s for _, _, _, s in window})
    cur = 0  # the thread running operations (threads=True)

    def on(t):
        nonlocal cur
        if t != cur:
            p.thread(t)
            cur = t

    for kind, addr, size, stream in window:
        if kind == "a":
            if threads:
                t = streams.index(stream) % 4
                on(t)
                s = (PT, t)
            elif spread:
                s = S1 + (addr >> 12) % 4
            else:
                s = 0 if stream == 0 else S1 + streams.index(stream) % 4
            stream_of[addr] = s
            if threads:
                serial_of[addr] = p.malloc(PT, max(1, size // scale))
                p.enqueue(PT)
            else:
                serial_of[addr] = p.malloc(s, max(1, size // scale))
                p.enqueue(s)
            if uses and rng.random() < 0.25:
                if threads:  # another thread's per-thread stream
                    u = (cur + 1 + rng.randrange(3)) % 4
                    on(u)
                    used_by[addr] = (PT, u)
                    p.record(PT, serial_of[addr])
                    p.enqueue(PT)
                else:
                    u = rng.choice([o for o in (NULLS, S1, S2, S3, S4) if o != s])
                    used_by[addr] = u
                    p.enqueue(u)
                    p.record(u, serial_of[addr])
        elif kind == "f":
            if addr in serial_of:
                if threads and rng.random() < 0.5:
                    on(rng.randrange(4))  # a cross-thread free
                p.free(serial_of.pop(addr))
        elif kind == "c":
            if addr in stream_of:
                s = stream_of.pop(addr)
                if threads:
                    p.advance(PT, other=(s[1] - cur) % 4)
                else:
                    p.advance(s)
            if addr in used_by:
                u = used_by.pop(addr)
                if threads:
                    p.advance(PT, other=(u[1] - cur) % 4)
                else:
                    p.advance(u)
        if rng.random() < 0.004:
            p.inspect(rng.choice([0, 1]))
    p.inspect(1)
    return p.bytes()


def trace_seeds(out):
    dirs = [os.path.join(ROOT, "bench", "traces")]
    seen, files = set(), []
    for d in dirs:
        if not os.path.isdir(d):
            continue
        for name in sorted(os.listdir(d)):
            if name.endswith(".trace.gz") and name not in seen:
                seen.add(name)
                files.append(os.path.join(d, name))
    memories = [64 * MiB, 128 * MiB, 256 * MiB, 32 * MiB]
    written = 0
    for path in files:
        ops = load_trace(path)
        base = os.path.basename(path).replace(".trace.gz", "")
        rng = random.Random(base)
        for k in range(6):
            count = rng.choice([400, 800, 1500, 2500])
            start = rng.randrange(0, max(1, len(ops) - count))
            page, mem, cache = k % 4, rng.randrange(4), rng.randrange(4)
            cfg = config(page, mem, cache, cap=(k == 5), prealloc=(k == 2))
            memory = memories[mem] // (4 if page == 1 else 1)  # as fuzz_ops.c's setup()
            data = trace_seed(ops, start, count, cfg, memory, spread=(k % 2 == 1), rng=rng)
            write(out, "trace-%s-%d" % (base, k), data)
            written += 1
        for k in range(2):  # the trace's streams as four threads' per-thread streams
            count = rng.choice([400, 800, 1500])
            start = rng.randrange(0, max(1, len(ops) - count))
            page, mem, cache = (k * 2) % 4, rng.randrange(4), rng.randrange(4)
            cfg = config(page, mem, cache)
            memory = memories[mem] // (4 if page == 1 else 1)
            data = trace_seed(ops, start, count, cfg, memory, spread=False, rng=rng, threads=True)
            write(out, "trace-%s-ptds-%d" % (base, k), data)
            written += 1
        for k in range(2):  # a quarter of the blocks used by another stream too
            count = rng.choice([400, 800, 1500])
            start = rng.randrange(0, max(1, len(ops) - count))
            page, mem, cache = (k * 2 + 1) % 4, rng.randrange(4), rng.randrange(4)
            cfg = config(page, mem, cache)
            memory = memories[mem] // (4 if page == 1 else 1)
            data = trace_seed(ops, start, count, cfg, memory, spread=(k == 0), rng=rng,
                              threads=(k == 1), uses=True)
            write(out, "trace-%s-uses-%d" % (base, k), data)
            written += 1
    return written


# ---- hand-written scenarios ----------------------------------------------------------------------

def graph_tree(cfg, faults=False):
    """G1, checkpoint, G2 (grows), reapply, G3 reusing G2's memory; then reapply with dead
    pointers, a bad dead list, another pool's checkpoint, a reapply during a capture."""
    p = Prog(cfg)
    p.gp_create().gp_create()
    p.capture_begin(S1, gp=0)
    a = [p.malloc(S1, sz) for sz in (3000, 1 * MiB, 200 * KiB, 5 * MiB)]
    p.free(a[2])
    p.capture_end(S1)
    p.ck_take(0)
    p.inspect(7, 0)
    if faults:
        p.fault(1, n=2)
    p.capture_begin(S1, gp=0)
    b = [p.malloc(S1, sz) for sz in (7 * MiB, 100, 64 * KiB)]
    p.free(a[0])
    p.capture_end(S1)
    p.ck_reapply(0, 0)  # back to after G1: G2's memory is free, a[0] lives again
    p.inspect(1)
    p.capture_begin(S1, gp=0, mode=2)
    c = [p.malloc(S1, sz) for sz in (6 * MiB, 300)]
    if faults:
        p.fault(0, entry=MEM_CREATE, n=0, oom=True)
    p.malloc(S1, 9 * MiB)
    p.ck_reapply(0, 0)  # refused: capturing into g0
    p.capture_end(S1)
    p.ck_take(0)
    p.ck_reapply(0, 1, dead=1, mask=0x5)  # the newest checkpoint, some dead
    p.ck_reapply(0, 0, dead=3, mask=0x3)  # a duplicate dead pointer: refused
    p.ck_reapply(0, 0, dead=7, mask=0x1)  # a foreign dead pointer: refused
    p.ck_reapply(1, 0)  # a checkpoint of another graph pool: refused
    p.inspect(6, 0).inspect(6, 1)
    p.graph_destroy(0).graph_destroy(0)
    p.gp_ref(True, 0)
    p.complete_all()
    p.inspect(0)
    p.trim(0)
    for s in a + b + c:
        p.free(s)
    p.graph_destroy(0)
    p.ck_destroy(0)
    p.inspect(1)
    return p.bytes()


def external_capture(cfg, faults=False):
    p = Prog(cfg)
    p.ext_begin(S2)
    x = [p.malloc(S2, sz) for sz in (512, 2 * MiB + 256, 40 * KiB)]
    p.capture_gp(S2)  # a handle on the capture's own graph pool
    if faults:
        p.fault(0, entry=USER_OBJECT_CREATE)
    p.ext_begin(S3)
    p.gp_create()
    p.register(S3, 1)
    p.register(S3, 0)  # already served by another: WRONG_POOL
    y = [p.malloc(S3, sz) for sz in (3 * MiB, 1000)]
    p.free(x[1])
    p.ext_end(S2, keep_graph=1)
    p.ext_end(S3, keep_graph=0)
    p.exec_(0, 0).exec_(1, 0, S1).exec_(1, 0, S4).exec_(0, 0)
    p.graph_destroy(0)
    p.inspect(0)
    p.exec_(2, 0)
    p.advance(S1)
    p.exec_(2, 0)
    p.complete_all()
    p.inspect(0)
    p.gp_ref(True, 0).gp_ref(True, 0)
    p.malloc(S2, 4 * MiB)
    for s in x + y:
        p.free(s)
    p.trim(2)
    p.inspect(1)
    return p.bytes()


def invalidated_capture(cfg):
    p = Prog(cfg)
    p.gp_create()
    p.capture_begin(S1, 0)
    m = p.malloc(S1, 100 * KiB)
    p.capture_begin(S2)  # anonymous graph pool
    p.malloc(S2, 5000)
    p.sync()  # invalidates both captures
    p.malloc(S1, 300)
    p.capture_gp(S2)
    p.capture_end(S1)
    p.capture_end(S2)
    p.capture_end(S2)  # not capturing any more
    p.free(m)
    p.capture_begin(S1, 0)
    p.malloc(S1, 2 * MiB)
    p.capture_end(S1)
    p.ck_take(0)
    p.stream_release(S1)
    p.inspect(1)
    return p.bytes()


def bad_input(cfg):
    p = Prog(cfg)
    live = [p.malloc(S1 + i % 4, sz) for i, sz in enumerate((256, 1, 70000, 3 * MiB, 100))]
    for v in range(10):
        p.malloc(S1, v, cls=5)  # 0, SIZE_MAX, SIZE_MAX-254, ..., the VA size +-
    p.malloc(0, 64 * MiB + 1)
    p.malloc(0, 64 * MiB)
    for kind in range(7):
        for v in (0, 1, 3):
            p.free_bad(kind, v, 0x12345 + 97 * v)
    p.free(live[1])
    p.free_bad(1, 0)  # double free
    p.free_bad(2, 0, 255)  # interior
    p.free_bad(6, 0, 0x80000000)
    p.capture_begin(0)  # the legacy stream cannot be captured
    p.capture_begin(1)
    p.capture_begin(S1, mode=3)  # invalid mode
    p.capture_end(S1)  # not capturing
    p.capture_end(0)
    p.capture_gp(S1)
    p.ext_begin(0)
    p.inspect(3, 0).inspect(3, 5).inspect(3, 0x80).inspect(4).inspect(5).inspect(2)
    p.inspect(0).inspect(1)
    return p.bytes()


def oom_and_trim(cfg):
    p = Prog(cfg)
    got = [p.malloc(S1 + i % 2, 3 * MiB + 512 * i) for i in range(14)]
    for s in got[::2]:
        p.free(s)
    p.malloc(S3, 20 * MiB)  # does not fit without defragmentation, maybe not at all
    p.enqueue(S1, 3)
    p.malloc(S2, 5 * MiB)
    p.trim(1, 64)
    p.complete_all()
    p.trim(0)
    p.inspect(0)
    for s in got[1::2]:
        p.free(s)
    p.malloc(S4, 30 * MiB)
    p.trim(3, 1)
    p.inspect(1)
    return p.bytes()


def defrag_streams(cfg, rng):
    p = Prog(cfg)
    live = []
    for i in range(300):
        s = S1 + rng.randrange(4) if rng.random() < 0.8 else rng.randrange(2)
        r = rng.random()
        if r < 0.5 or not live:
            size = rng.choice([rng.randrange(1, 4096), rng.randrange(4096, 600 * KiB),
                               rng.randrange(1 * MiB, 6 * MiB)])
            live.append(p.malloc(s, size))
            p.enqueue(s)
        elif r < 0.85:
            p.free(live.pop(rng.randrange(len(live))))
        elif r < 0.93:
            p.advance(S1 + rng.randrange(4), rng.randrange(1, 4))
        elif r < 0.96:
            p.malloc(s, rng.randrange(8 * MiB, 24 * MiB))
        elif r < 0.98:
            p.stream_release(S1 + rng.randrange(4))
        else:
            p.complete_all()
    p.inspect(0).inspect(1)
    return p.bytes()


def fault_sweep(cfg, rng):
    """Driver failures armed before each kind of operation."""
    p = Prog(cfg)
    live = []
    for i in range(120):
        mode = rng.randrange(3)
        entry = rng.randrange(22)
        p.fault(mode, entry, rng.randrange(8), oom=rng.random() < 0.5)
        r = rng.randrange(8)
        s = S1 + rng.randrange(4)
        if r < 3:
            live.append(p.malloc(s, rng.choice([300, 70000, 3 * MiB, 9 * MiB])))
        elif r == 3 and live:
            p.free(live.pop(rng.randrange(len(live))))
        elif r == 4:
            p.trim(rng.randrange(4), rng.randrange(200))
        elif r == 5:
            p.capture_begin(s)
            live.append(p.malloc(s, rng.choice([1000, 3 * MiB])))
            p.fault(1, n=rng.randrange(4))
            p.capture_end(s)
            p.graph_destroy(0)
        elif r == 6:
            p.stream_release(s)
        else:
            p.enqueue(s)
            p.malloc(S1 + (s + 1) % 4, 2 * MiB)
    p.fault(3, n=rng.randrange(16))
    p.inspect(0).inspect(1)
    return p.bytes()


# ---- per-thread streams -------------------------------------------------------------------------

def ptds_threads(cfg, cfg2, rng):
    """Every thread allocates on its own per-thread stream (0x2) and enqueues work; blocks are
    freed by other threads while that work is pending, and reused by other threads' per-thread
    streams (which must then wait), by the legacy stream (which waits for every per-thread stream
    anyway) and by created streams; slow paths (defragmentation, trim) with all of it pending."""
    p = Prog(cfg, cfg2)
    blocks = {}
    for t in range(4):
        p.thread(t)
        blocks[t] = [p.malloc(PT, sz) for sz in (3000, 700 * KiB, 3 * MiB, 256)]
        p.enqueue(PT, 2)
    for t in range(4):  # cross-thread frees, the owners' work pending
        p.thread(t)
        for s in blocks[(t + 1) % 4][:3]:
            p.free(s)
    p.thread(2)
    again = [p.malloc(PT, sz) for sz in (3000, 700 * KiB, 3 * MiB)]
    p.enqueue(PT)
    p.advance(PT)  # thread 2's own stream first: must not pass what it waits for
    p.advance(PT, 2, other=1)  # thread 3's, through its key
    p.thread(0)
    p.enqueue(LEGACY)
    p.advance(LEGACY)
    p.malloc(LEGACY, 700 * KiB)
    p.malloc(S1, 3 * MiB)
    p.enqueue(S1)
    p.thread(1)
    big = p.malloc(PT, 20 * MiB)  # slow path: other threads' pending memory
    p.enqueue(PT)
    p.advance(PT, 2)
    for i in range(40):
        p.thread(rng.randrange(4))
        r = rng.random()
        if r < 0.45:
            again.append(p.malloc(rng.choice([PT, PT, S2, LEGACY]),
                                  rng.choice([300, 5000, 200 * KiB, 2 * MiB, 6 * MiB])))
            p.enqueue(PT)
        elif r < 0.8 and again:
            p.free(again.pop(rng.randrange(len(again))))
        elif r < 0.9:
            p.advance(PT, rng.randrange(1, 3), other=rng.randrange(4))
        else:
            p.work(PT, 4)  # every stream advances by one
    p.thread(3)
    p.stream_release(PT)
    p.thread(0)
    p.trim(1, 32)
    p.free(big)
    p.inspect(0).inspect(1)
    p.complete_all()
    p.trim(0)
    p.inspect(0)
    return p.bytes()


def ptds_captures(cfg, cfg2):
    """Captures on per-thread streams and on created streams begun by workers: allocations in
    them come from their graph pools, ends from the wrong thread are refused (global and
    thread-local modes), relaxed ones may end anywhere, per-thread blocks are freed by other
    threads during captures, external captures on per-thread streams, legacy work that breaks a
    per-thread capture, and a SYNC that breaks them all."""
    p = Prog(cfg, cfg2)
    p.gp_create()
    p.thread(2)
    owned = [p.malloc(PT, sz) for sz in (100 * KiB, 2 * MiB)]
    p.enqueue(PT)
    p.thread(1)
    p.capture_begin(PT, gp=0, mode=GLOBAL)
    a = [p.malloc(PT, sz) for sz in (3000, 1 * MiB)]
    p.capture_gp(PT)
    p.free(owned[0])  # thread 2's block, freed on thread 1 during thread 1's capture
    p.thread(2)
    p.malloc(PT, 1 * MiB)  # thread 2's own stream is not capturing
    p.capture_end(PT)  # not capturing: 0x2 is thread 2's stream here
    p.capture_begin(S1, mode=GLOBAL)
    p.thread(0)
    s1 = p.malloc(S1, 1000)  # in thread 2's capture, from its graph pool
    p.capture_end(S1)  # refused: thread 2 began it
    p.thread(2)
    p.capture_end(S1)
    p.thread(3)
    p.capture_begin(S2, mode=RELAXED)
    p.malloc(S2, 2 * MiB)
    p.thread(0)
    p.capture_end(S2)  # relaxed: any thread may end it
    p.thread(3)
    p.capture_begin(S3, mode=THREAD_LOCAL)
    p.thread(1)
    p.capture_end(S3)  # refused
    p.thread(0)
    p.malloc(S4, 24 * MiB)  # a slow path while per-thread and created streams capture
    p.trim(0)
    p.thread(3)
    p.capture_end(S3)
    p.thread(1)
    p.malloc(PT, 5 * MiB)
    p.capture_end(PT)
    p.ck_take(0)
    p.thread(2)
    p.ext_begin(PT)  # begun outside vpmm on a per-thread stream
    p.malloc(PT, 4096)
    p.capture_gp(PT)
    p.thread(0)
    p.ext_end(PT)  # main's own per-thread stream is not capturing
    p.thread(2)
    p.ext_end(PT, keep_graph=1)
    p.thread(3)
    p.capture_begin(PT, mode=GLOBAL)
    p.malloc(PT, 10000)
    p.thread(0)
    p.enqueue(LEGACY)  # legacy work: refused, and thread 3's capture is invalidated
    p.thread(3)
    p.malloc(PT, 300)
    p.capture_end(PT)
    p.thread(1)
    p.capture_begin(PT, gp=0, mode=THREAD_LOCAL)
    p.malloc(PT, 70000)
    p.sync()  # invalidates it
    p.capture_end(PT)
    p.thread(0)
    p.exec_(0, 0).exec_(1, 0, PT).exec_(1, 0, LEGACY)
    p.advance(LEGACY)
    p.graph_destroy(0).graph_destroy(0)
    p.free(s1)
    for s in a + owned:
        p.free(s)
    p.gp_ref(True, 0)
    p.complete_all()
    p.inspect(0).inspect(1)
    return p.bytes()


def ptds_legacy_work(cfg):
    """While a per-thread stream captures (known to vpmm), everything that could make vpmm work
    on the legacy stream: its own pending frees wanted by a slow path on another stream, a
    capture begun by another thread, trim, a malloc and a release on the legacy stream. None of
    it may invalidate the capture (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)."""
    p = Prog(cfg)
    x = [p.malloc(LEGACY, sz) for sz in (5000, 3 * MiB, 200 * KiB)]
    p.enqueue(LEGACY)
    y = p.malloc(NULLS, 6 * MiB)
    p.thread(1)
    mine = p.malloc(PT, 2 * MiB)
    p.enqueue(PT)
    p.free(y)  # freed on thread 1, pending on the legacy stream
    p.capture_begin(PT)
    p.malloc(PT, 1000)
    p.thread(0)
    for s in x:
        p.free(s)
    p.malloc(S1, 30 * MiB)  # slow path: the legacy stream's pending memory is wanted
    p.trim(0)
    p.thread(2)
    p.capture_begin(S2, mode=RELAXED)  # polls every stream first
    p.malloc(S2, 4 * MiB)
    p.malloc(PT, 3 * MiB)
    p.thread(0)
    p.malloc(LEGACY, 3 * MiB)
    p.malloc(NULLS, 20 * MiB)
    p.stream_release(LEGACY)
    p.capture_end(S2)  # relaxed: the main thread may end it
    p.thread(1)
    p.free(mine)
    p.malloc(PT, 70000)
    p.capture_end(PT)
    p.thread(0)
    p.stream_release(NULLS)
    p.complete_all()
    p.malloc(S1, 30 * MiB)
    p.inspect(0).inspect(1)
    return p.bytes()


def ptds_unseen_capture(cfg):
    """A per-thread stream captured outside vpmm: unseen, vpmm's legacy-stream work may break it
    (and the malloc that needed it fails with 906); registered, it may not."""
    p = Prog(cfg)
    x = p.malloc(LEGACY, 20)  # a fresh page, the rest of it pending on the legacy stream too
    p.enqueue(LEGACY)
    p.thread(1)
    p.ext_begin(PT)
    p.thread(0)
    p.free(x)
    p.malloc(S1, 1)  # may mark the legacy stream: the capture vpmm never saw breaks
    p.thread(1)
    p.ext_end(PT)
    p.thread(0)
    y = p.malloc(LEGACY, 20)
    p.malloc(S3, 64 * MiB)  # out of memory: nothing left to grow into
    p.enqueue(LEGACY)
    p.thread(1)
    p.gp_create()
    p.ext_begin(PT)
    p.register(PT, 0)  # now vpmm knows of it
    p.thread(0)
    p.free(y)
    p.malloc(S1, 1)
    p.malloc(S2, 3 * MiB)
    p.trim(0)
    p.thread(1)
    p.malloc(PT, 5000)
    p.ext_end(PT, keep_graph=1)
    p.thread(0)
    p.complete_all()
    p.malloc(S1, 2 * MiB)
    p.inspect(0).inspect(1)
    return p.bytes()


def ptds_default(cfg):
    """Stream 0 is per-thread (config2 bit 0): NULL names each thread's own stream, captures on
    it are allowed, 0x1 is still the legacy stream."""
    p = Prog(cfg, config2(ptd_default=True))
    mine = {}
    for t in range(4):
        p.thread(t)
        mine[t] = [p.malloc(NULLS, sz) for sz in (512, 300 * KiB, 2 * MiB)]
        p.enqueue(NULLS)
    p.thread(1)
    for s in mine[0]:
        p.free(s)
    p.malloc(NULLS, 300 * KiB)
    p.capture_begin(NULLS)
    p.malloc(NULLS, 5000)
    p.capture_end(NULLS)
    p.thread(0)
    p.malloc(LEGACY, 2 * MiB)  # the legacy stream waits for every thread's stream
    p.enqueue(LEGACY)
    p.advance(NULLS, 1, other=1)
    p.advance(LEGACY)
    p.capture_begin(LEGACY)  # still the legacy stream: refused
    p.thread(3)
    for s in mine[1] + mine[2]:
        p.free(s)
    p.malloc(PT, 2 * MiB)  # 0x2 and NULL are the same stream here
    p.enqueue(NULLS)
    p.advance(PT)
    p.malloc(S3, 12 * MiB)
    p.work(NULLS, 4)
    p.complete_all()
    p.inspect(0).inspect(1)
    return p.bytes()


# ---- other streams' uses (vpmm_record_stream) ----------------------------------------------------

def uses_basic(cfg):
    """Blocks recorded on other streams with work pending, freed: deferred until that work is
    done — reused by nobody, their own stream included, through slow paths (defragmentation, trim)
    and OOM — then reusable again; the own stream and a second record change nothing; every kind
    of bad pointer; a block recorded on the legacy stream and on several streams."""
    p = Prog(cfg)
    x = p.malloc(S1, 3 * MiB)
    p.enqueue(S1)
    p.enqueue(S2, 2)
    p.record(S2, x)
    p.record(S1, x)  # its own stream: nothing
    p.record(S2, x)  # again: nothing
    y = p.malloc(S1, 5000)
    p.enqueue(S3)
    p.record(S3, y)
    p.enqueue(LEGACY)
    p.record(LEGACY, y)
    p.record(NULLS, y)  # another record of the legacy stream
    z = p.malloc(S4, 700 * KiB)
    p.record(S2, z)
    for kind in range(7):
        p.record_bad(S2, kind, v=1, off=300)
    p.free(x)  # deferred: S2's two items
    p.record(S3, x)  # freed: DOUBLE_FREE
    p.inspect(1).inspect(0)
    a = p.malloc(S1, 3 * MiB)  # its own stream may not have it
    p.malloc(S4, 3 * MiB)
    p.trim(2)  # a slow path: still deferred
    p.malloc(S3, 20 * MiB)  # defragmentation may not move it
    p.advance(S2)
    p.trim(2)
    p.inspect(1)
    p.free(y)  # S3 and the legacy stream
    p.free(z)  # no work pending on S2 beyond what x waits for
    p.malloc(S1, 5000)
    p.complete(S2)
    p.malloc(S1, 3 * MiB)  # x's memory is S1's again
    p.advance(LEGACY)
    p.malloc(S2, 5000)
    p.complete_all()
    p.trim(0)
    p.free(a)
    b = p.malloc(S2, 9 * MiB)
    p.enqueue(S1)
    p.record(S1, b)
    p.enqueue(S2)
    p.free(b)  # its own stream and S1 pending
    p.malloc(S3, 30 * MiB)  # out of memory, maybe: b cannot be taken
    p.malloc(S2, 9 * MiB)
    p.complete(S1)
    p.malloc(S4, 9 * MiB)  # must wait for S2 now, as any other stream
    p.inspect(0).inspect(1)
    return p.bytes()


def uses_captures(cfg):
    """The gate stream is being captured at the free (its marker comes later), by vpmm and
    outside it; a capture's allocation recorded on another stream and freed after the capture
    (deferred in its graph pool, which a later capture may not reuse); one freed during its own
    capture; legacy records while a capture runs."""
    p = Prog(cfg)
    p.gp_create()
    x = p.malloc(S1, 2 * MiB)
    p.enqueue(S2)
    p.record(S2, x)
    p.capture_begin(S2, gp=0)
    p.malloc(S2, 1 * MiB)
    p.free(x)  # S2 is being captured: its gate is recorded later
    p.malloc(S1, 2 * MiB)
    p.malloc(S3, 2 * MiB)
    p.trim(2)
    p.capture_end(S2)
    p.trim(2)
    p.complete(S2)
    p.trim(2)
    p.malloc(S1, 2 * MiB)
    p.capture_begin(S1, gp=0)
    c = p.malloc(S1, 64 * KiB)
    p.capture_end(S1)
    p.enqueue(S3)
    p.record(S3, c)
    p.free(c)  # deferred in g0
    p.capture_begin(S1, gp=0)
    p.malloc(S1, 64 * KiB)  # not c's memory
    d = p.malloc(S1, 100 * KiB)
    p.enqueue(S4)
    p.record(S4, d)
    p.free(d)  # during its own capture
    p.malloc(S1, 100 * KiB)
    p.capture_end(S1)
    e = p.malloc(S2, 300 * KiB)
    p.enqueue(S4)
    p.record(S4, e)
    p.enqueue(LEGACY)
    p.record(LEGACY, e)
    p.ext_begin(S4)  # captured outside vpmm at the free
    p.free(e)
    p.malloc(S2, 300 * KiB)
    p.ext_end(S4, keep_graph=1)
    p.capture_begin(S3, gp=255)
    f = p.malloc(S1, 2 * MiB)
    p.enqueue(LEGACY)
    p.record(LEGACY, f)
    p.free(f)  # the legacy gate: no legacy work while vpmm knows of a capture
    p.malloc(S3, 2 * MiB)
    p.capture_end(S3)
    p.advance(S3)
    p.trim(0)
    p.complete_all()
    p.trim(2)
    p.graph_destroy(0).graph_destroy(0).graph_destroy(0)
    p.gp_ref(True, 0)
    p.malloc(S1, 2 * MiB)
    p.inspect(0).inspect(1)
    return p.bytes()


def uses_ptds(cfg, cfg2):
    """Per-thread streams: a thread's block recorded on other threads' per-thread streams
    (0x2 named by each), freed by a fourth thread: no thread's stream — the owner's included —
    gets it before those threads' work is done; records from a thread whose stream is capturing;
    the other threads' streams advanced through their keys."""
    p = Prog(cfg, cfg2)
    blocks = {}
    for t in range(4):
        p.thread(t)
        blocks[t] = [p.malloc(PT, sz) for sz in (2 * MiB, 300 * KiB, 4000)]
        p.enqueue(PT)
    p.thread(1)
    p.record(PT, blocks[0][0])  # thread 1's stream uses thread 0's block
    p.enqueue(PT, 2)
    p.thread(2)
    p.record(PT, blocks[0][0])
    p.record(LEGACY, blocks[1][0])
    p.record(PT, blocks[3][1])
    p.enqueue(PT)
    p.thread(3)
    p.free(blocks[0][0])  # gates on threads 1 and 2's streams, freed from thread 3
    p.free(blocks[1][0])
    p.free(blocks[3][1])  # its own: thread 2's stream still works
    p.malloc(PT, 300 * KiB)
    p.thread(0)
    p.malloc(PT, 2 * MiB)  # the owner's stream may not have it
    p.malloc(S1, 20 * MiB)  # a slow path
    p.advance(PT, 1, other=2)  # thread 2's stream
    p.thread(3)
    p.malloc(PT, 2 * MiB)
    p.trim(2)
    p.advance(PT, 2, other=2)  # thread 1's, from thread 3
    p.trim(2)
    p.thread(0)
    p.malloc(PT, 2 * MiB)
    p.thread(1)
    p.capture_begin(PT, mode=GLOBAL)
    g = p.malloc(PT, 50 * KiB)
    p.thread(2)
    p.record(PT, blocks[0][1])
    p.enqueue(PT)
    p.thread(1)
    p.record(PT, blocks[0][2])  # recorded by the capturing thread: no driver call
    p.thread(3)
    p.free(blocks[0][1])
    p.free(blocks[0][2])  # thread 1's stream captures: its gate comes later
    p.malloc(PT, 300 * KiB)
    p.trim(0)
    p.thread(1)
    p.free(g)
    p.capture_end(PT)
    p.thread(0)
    p.trim(2)
    p.work(PT, 4)
    p.complete_all()
    p.trim(2)
    for t in range(4):
        p.thread(t)
        p.malloc(PT, 300 * KiB)
    p.inspect(0).inspect(1)
    return p.bytes()


def uses_checkpoint(cfg):
    """A graph pool's allocations used by another stream: a deferred free refuses a reapply
    (exactly CHECKPOINT_CONFLICT, nothing changed) until that stream is done; a reapply keeps a
    surviving allocation's uses; a revived one has none; the graph pool dissolves with a deferred
    free in it (it ends in the shared pool, still deferred)."""
    p = Prog(cfg)
    p.gp_create()
    p.capture_begin(S1, gp=0)
    out = p.malloc(S1, 64 * KiB)
    keep = p.malloc(S1, 1 * MiB)
    p.capture_end(S1)
    p.ck_take(0)
    p.enqueue(S2)
    p.record(S2, out)  # G1's output read on S2
    p.capture_begin(S1, gp=0)
    tmp = p.malloc(S1, 64 * KiB)
    p.capture_end(S1)
    p.enqueue(S2)
    p.record(S2, tmp)
    p.free(tmp)  # deferred: S2 may still read it
    p.ck_reapply(0, 0)  # refused
    p.ck_reapply(0, 0, dead=3, mask=1)  # a bad dead list: that first
    p.inspect(7, 0)
    p.complete(S2)
    p.ck_reapply(0, 0)  # released first, then reapplied
    p.enqueue(S2)
    p.free(out)  # out survived with its use: deferred again
    p.ck_reapply(0, 0)  # refused
    p.complete(S2)
    p.ck_reapply(0, 0, dead=1, mask=2)  # out revived; keep dead
    p.enqueue(S3)
    p.record(S3, out)
    p.ck_take(0)
    p.capture_begin(S1, gp=0)
    t2 = p.malloc(S1, 200 * KiB)
    p.capture_end(S1)
    p.enqueue(S4)
    p.record(S4, t2)
    p.ck_reapply(0, 1)  # t2 dropped: its uses go with it
    p.free(out)
    p.ck_reapply(0, 1)  # refused: S3 still reads out
    p.trim(0)
    p.graph_destroy(0).graph_destroy(0).graph_destroy(0)
    p.ck_destroy(0).ck_destroy(0)
    p.gp_ref(True, 0)  # g0 dissolves with out deferred in it
    p.malloc(S3, 64 * KiB)
    p.malloc(S1, 64 * KiB)
    p.inspect(1)
    p.complete(S3)
    p.trim(2)
    p.malloc(S3, 64 * KiB)
    p.complete_all()
    p.trim(0)
    p.inspect(0).inspect(1)
    return p.bytes()


def uses_faults(cfg, rng):
    """Driver failures around deferred frees: the gate's marker fails at the free (recorded
    later), polls fail, growth fails while memory is deferred."""
    p = Prog(cfg)
    live = []
    for i in range(60):
        s = S1 + rng.randrange(4)
        r = rng.randrange(6)
        if r < 2 or not live:
            live.append(p.malloc(s, rng.choice([300, 70000, 3 * MiB])))
            p.enqueue(s)
        elif r == 2:
            o = S1 + (s - S1 + 1 + rng.randrange(3)) % 4
            p.enqueue(o)
            p.record(o, live[rng.randrange(len(live))])
        elif r == 3:
            p.fault(0, rng.choice([EVENT_RECORD, EVENT_QUERY, EVENT_CREATE, MEM_CREATE]),
                    rng.randrange(3), oom=rng.random() < 0.5)
            p.free(live.pop(rng.randrange(len(live))))
        elif r == 4:
            p.fault(0, rng.choice([EVENT_QUERY, EVENT_RECORD, MEM_MAP]), rng.randrange(3))
            p.malloc(s, rng.choice([2 * MiB, 9 * MiB]))
        else:
            p.advance(S1 + rng.randrange(4), rng.randrange(1, 3))
            p.trim(2)
    p.inspect(0).inspect(1)
    return p.bytes()


# ---- several devices and CUDA IPC (fuzz_devices.c) ---------------------------------------------

TWO = config2(devices=2)


def dev_grant_growth(cfg, cfg2=TWO):
    """Device 1 granted after growth, then more growth, defragmentation's remaps (every other page
    free, a span that needs them), graph-pool growth and a checkpoint reapply that makes zombie
    addresses live again: every live allocation stays reachable by device 1. Grants of nothing
    (the own device, again) and of devices that are not there change nothing."""
    p = Prog(cfg, cfg2)
    a = [p.malloc(S1 + i % 2, 2 * MiB + 256 * i) for i in range(8)]
    small = [p.malloc(S3, sz) for sz in (100, 5000, 70 * KiB)]
    p.grant(DEV2).grant(DEV_NEG).grant(DEV64).grant(DEV_MIN).grant(OWN)
    p.grant(PEER)
    p.inspect(0)
    for s_ in a[::2]:
        p.free(s_)
    p.enqueue(S1)
    p.malloc(S2, 7 * MiB)  # remaps the free pages: named for device 1 too
    p.malloc(P1, 3 * MiB)  # on a stream of device 1
    p.grant(PEER)  # again: nothing to do
    p.gp_create()
    p.capture_begin(S4, gp=0)
    g = [p.malloc(S4, sz) for sz in (1 * MiB, 6 * MiB)]
    p.capture_end(S4)
    p.ck_take(0)
    p.capture_begin(S4, gp=0)
    p.free(g[0])
    p.malloc(S4, 9 * MiB)
    p.capture_end(S4)
    p.ck_reapply(0, 0)
    p.complete_all()
    p.trim(0)
    p.malloc(S3, 20 * MiB)
    for s_ in a[1::2] + small:
        p.free(s_)
    p.graph_destroy(0).graph_destroy(0)
    p.gp_ref(True, 0)
    p.malloc(P2, 11 * MiB)
    p.inspect(0).inspect(1)
    return p.bytes()


def dev_grant_zombies(cfg, cfg2=TWO):
    """Device 1 granted while zombies exist — a graph pool's old addresses after a capture's
    remap, the shared pool's after defragmentation with work pending — then a checkpoint reapply
    makes the zombies live again without a driver call: the grant must have reached them."""
    page = [2 * MiB, 64 * KiB, 256 * KiB, 4 * MiB][cfg & 3]
    p = Prog(cfg, cfg2)
    p.gp_create()
    p.capture_begin(S1, gp=0)
    a = [p.malloc(S1, page) for _ in range(4)]
    p.capture_end(S1)
    p.ck_take(0)
    p.capture_begin(S1, gp=0)
    p.free(a[0])
    p.free(a[2])
    p.malloc(S1, 2 * page)  # a[0] and a[2] apart: their pages remapped, the old addresses kept
    p.capture_end(S1)
    x = [p.malloc(S2, page) for _ in range(6)]
    p.enqueue(S2)
    for s_ in x[::2]:
        p.free(s_)
    p.malloc(S3, 3 * page)  # the shared pool's remap: zombies while S2's work is pending
    p.inspect(0)
    p.grant(PEER)
    p.ck_reapply(0, 0)  # a[0] and a[2] live again at their zombie addresses
    p.inspect(1)
    p.complete_all()
    p.trim(0)
    p.ck_reapply(0, 0)
    p.graph_destroy(0).graph_destroy(0)
    p.inspect(0).inspect(1)
    return p.bytes()


def dev_grant_first(cfg, cfg2=TWO):
    """Device 1 granted before anything is mapped: every later mapping names it (growth, remaps,
    graph pools, the worker's passes when config2 says so)."""
    p = Prog(cfg, cfg2)
    p.grant(PEER)
    live = []
    for i in range(24):
        live.append(p.malloc([S1, S2, P1, P2][i % 4], [300, 3 * MiB, 700 * KiB, 5 * MiB][i % 4]))
        p.enqueue([S1, S2, P1, P2][i % 4])
        if i % 3 == 2:
            p.free(live.pop(0))
    p.malloc(S3, 24 * MiB)  # a slow path across both devices' pending memory
    p.advance(P1, 2)
    p.work(0, 4)
    p.malloc(S4, 24 * MiB)
    p.trim(1, 16)
    p.complete_all()
    p.trim(0)
    p.malloc(S4, 30 * MiB)
    p.inspect(0).inspect(1)
    return p.bytes()


def dev_isolated(cfg):
    """Device 1 isolated: its grant is refused (NOT_SUPPORTED, nothing changes); its streams still
    allocate, record and wait as any stream."""
    p = Prog(cfg, config2(devices=2, isolated=True))
    x = p.malloc(P1, 3 * MiB)
    p.enqueue(P1)
    p.grant(PEER)
    p.grant(DEV2)
    p.free(x)
    p.malloc(S1, 3 * MiB)  # must wait for P1's work
    p.enqueue(S1)
    y = p.malloc(S2, 1 * MiB)
    p.enqueue(P2)
    p.record(P2, y)
    p.free(y)
    p.malloc(S2, 1 * MiB)
    p.advance(P1)
    p.complete(P2)
    p.trim(2)
    p.grant(PEER)
    p.inspect(0).inspect(1)
    return p.bytes()


def dev_peer_streams(cfg, cfg2=TWO):
    """Streams of device 1 used with the pool: blocks allocated on them and freed with their work
    pending (reused by device 0's streams after a GPU-side wait on an event of device 1), recorded
    on device 0's blocks, released; the reverse."""
    p = Prog(cfg, cfg2)
    p.grant(PEER)
    blocks = [p.malloc(P1, sz) for sz in (4 * MiB, 200 * KiB, 3000)]
    p.enqueue(P1, 2)
    for b in blocks:
        p.free(b)
    p.malloc(S1, 4 * MiB)
    p.malloc(S2, 200 * KiB)
    p.enqueue(S1)
    p.advance(P1)
    p.advance(S1)
    x = p.malloc(S1, 2 * MiB)
    p.enqueue(P2)
    p.record(P2, x)
    p.record(P1, x)
    p.enqueue(P1)
    p.free(x)
    p.malloc(S1, 2 * MiB)  # not x's memory: P1 and P2 work on it
    p.stream_release(P2)
    p.malloc(S3, 20 * MiB)
    p.complete(P1)
    p.trim(2)
    y = p.malloc(P2, 5 * MiB)  # a new stream on P2's handle
    p.enqueue(P2)
    p.record(S4, y)
    p.free(y)
    p.malloc(P1, 5 * MiB)
    p.work(0, 4)
    p.complete_all()
    p.malloc(P1, 5 * MiB)
    p.inspect(0).inspect(1)
    return p.bytes()


def ipc_export_open_free_close(cfg, cfg2=0):
    """The exporter frees first: the memory stays out of every free list — no malloc of its size
    on its stream, no defragmentation or trim takes it — until the importer closes; a slow path
    then releases it."""
    p = Prog(cfg, cfg2)
    x = p.malloc(S1, 4 * MiB)
    h = p.export(x)
    p.open(h)
    p.free(x)
    p.malloc(S1, 4 * MiB)
    p.trim(2)
    p.malloc(S2, 20 * MiB)
    p.trim(0)
    p.inspect(1).inspect(0)
    p.close(h)
    p.malloc(S1, 4 * MiB)
    p.trim(2)
    p.malloc(S1, 4 * MiB)
    y = p.malloc(S3, 700 * KiB)
    hy = p.export(y)
    p.open(hy)
    p.enqueue(S3)
    p.free(y)  # shared and pending on S3
    p.close(hy)
    p.advance(S3)
    p.malloc(S3, 700 * KiB)
    p.inspect(0).inspect(1)
    return p.bytes()


def ipc_close_then_free(cfg, cfg2=0):
    """The importer closes first: the free is ordinary (its own stream takes it back at once);
    an export never opened keeps the memory until the pool goes."""
    p = Prog(cfg, cfg2)
    x = p.malloc(S1, 3 * MiB)
    h = p.export(x)
    p.open(h)
    p.close(h)
    p.free(x)
    p.malloc(S1, 3 * MiB)
    y = p.malloc(S2, 5 * MiB)
    p.export(y)  # never opened
    p.free(y)
    p.malloc(S2, 5 * MiB)
    p.trim(0)
    p.inspect(0).inspect(1)
    return p.bytes()


def ipc_unshare(cfg, cfg2=0):
    """vpmm_ipc_unshare ends the shares no close ended: the free is ordinary, the old handle is
    stale, a later close ends nothing of the address's next use (after its slot went back)."""
    p = Prog(cfg, cfg2)
    x = p.malloc(S1, 4 * MiB)
    h = p.export(x)
    p.export(x)  # the same bytes, a second share
    p.open(h)
    p.unshare(x)
    p.free(x)
    y = p.malloc(S1, 4 * MiB)  # x's memory, at once
    h2 = p.export(y)
    p.close(h)  # ends nothing of y's share
    p.open(h2)
    p.open(h, ok=False)  # stale
    p.close(h2)
    z = p.malloc(S2, 1 * MiB)
    p.unshare(z)  # never exported: nothing to do
    p.export(z)
    p.unshare(z)
    p.unshare(z)
    p.free(z)
    for kind in range(7):
        p.unshare_bad(kind, v=1, off=300)
    p.free(y)
    p.inspect(0).inspect(1)
    return p.bytes()


def ipc_refusals(cfg, cfg2=0):
    """Refused: buffers too small, bad pointers, a graph pool's allocation, handle bytes that are
    not a handle, stale handles, bad closes; none changes either pool."""
    p = Prog(cfg, cfg2)
    x = p.malloc(S1, 3 * MiB)
    p.export(x, small=1)  # no buffer: the length needed
    p.export(x, small=40)
    for kind in range(7):
        p.export_bad(kind, v=1, off=0x1234)
    p.gp_create()
    p.capture_begin(S2, gp=0)
    g = p.malloc(S2, 64 * KiB)
    p.export(g)  # a graph pool's: NOT_SUPPORTED
    p.capture_end(S2)
    h = p.export(x)
    for corrupt in (4, 5, 6, 7):
        p.open(h, corrupt)
    p.close_bad(0).close_bad(1)
    p.open(h)
    p.open(h)  # open already: the same pointer
    p.close(h)
    p.close(h)
    p.close_bad(2)  # the pointer just closed
    p.open(h, ok=False)  # stale: its share is over
    p.free(x)
    p.trim(0)
    p.malloc(S3, 3 * MiB)
    p.open(h, ok=False)  # stale, its pages given back or reused
    p.graph_destroy(0)
    p.free(g)
    p.gp_ref(True, 0)
    p.inspect(0).inspect(1)
    return p.bytes()


def ipc_neighbours(cfg, cfg2=0):
    """Allocations on the same pages shared and opened (one mapping in the importer), freed and
    closed in every order; small ones under size classes."""
    p = Prog(cfg, cfg2)
    a = [p.malloc(S1, sz) for sz in (300, 1000, 64 * KiB, 1 * MiB, 1 * MiB)]
    hs = [p.export(s_) for s_ in a]
    for h in hs:
        p.open(h)
    p.free(a[0])
    p.close(hs[1])
    p.free(a[1])
    p.free(a[3])
    p.malloc(S1, 1 * MiB)
    p.malloc(S1, 300)
    p.close(hs[0])
    p.close(hs[3])
    p.trim(2)
    p.malloc(S1, 1 * MiB)
    p.free(a[4])
    p.free(a[2])
    p.close(hs[2])
    p.malloc(S2, 12 * MiB)
    p.inspect(0).inspect(1)
    return p.bytes()


def ipc_with_streams(cfg, cfg2):
    """Shares and other streams' uses on one allocation; defragmentation and trims while shared
    memory is deferred; device 1's streams and a grant (config2 two devices)."""
    p = Prog(cfg, cfg2)
    p.grant(PEER)
    live = [p.malloc(S1 + i % 4, (i % 5 + 1) * 700 * KiB) for i in range(12)]
    hs = []
    for i in (1, 4, 7, 10):
        hs.append(p.export(live[i]))
        p.open(hs[-1])
    p.enqueue(S2)
    p.record(S2, live[4])
    p.record(P1 if cfg2 & 0x40 else S3, live[7])
    p.enqueue(P1 if cfg2 & 0x40 else S3)
    for i in range(0, 12, 2):
        p.free(live[i])
    for i in (1, 4, 7):
        p.free(live[i])
    p.malloc(S3, 16 * MiB)  # defragmentation around deferred memory
    p.trim(0)
    p.close(hs[1])
    p.trim(2)
    p.advance(S2)
    p.close(hs[0])
    p.malloc(S1, 16 * MiB)
    p.complete_all()
    p.close(hs[2])
    p.trim(2)
    p.malloc(S4, 20 * MiB)
    p.inspect(0).inspect(1)
    return p.bytes()


def dev_grant_faults(cfg, cfg2=TWO):
    """A driver failure at each set_access of a grant over three mapped runs, with and without its
    undo (the revokes) failing too, lasting failures, any call's: each refused with nothing
    changed; then the grant that works, and growth whose set_access (naming the peer) fails."""
    p = Prog(cfg, cfg2)
    x = [p.malloc(S1, 4 * MiB) for _ in range(5)]
    for i in (1, 3):
        p.free(x[i])
    p.trim(0)
    for k in range(3):
        p.fault(0, SET_ACCESS, k, oom=k == 1)
        p.grant(PEER)
    p.fault(0, SET_ACCESS, 1, undo=True)
    p.grant(PEER)
    p.fault(0, SET_ACCESS, 2, undo=True)
    p.grant(PEER)
    p.fault(2, SET_ACCESS, 1)
    p.grant(PEER)
    for n in range(3):
        p.fault(1, n=n, undo=n == 2)
        p.grant(PEER)
    p.fault(1, n=3)
    p.grant(PEER)  # three runs, three calls: the fourth never comes
    p.fault(0, SET_ACCESS, 0)
    p.malloc(S2, 9 * MiB)  # growth's set_access names the peer: it fails as a whole
    p.malloc(S2, 9 * MiB)
    p.fault(2, STREAM_DEVICE, 0)
    y = p.malloc(P1, 2 * MiB)
    p.enqueue(P1)
    p.free(y)
    p.fault(0, STREAM_DEVICE, 0)
    p.malloc(S3, 2 * MiB)  # the marker of P1 needs its device: refused, nothing changed
    p.fault(0, EVENT_CREATE, 0)
    p.malloc(S3, 2 * MiB)
    p.malloc(S3, 2 * MiB)
    p.inspect(0).inspect(1)
    return p.bytes()

def ipc_faults(cfg, cfg2, rng):
    """Driver failures in exports (mem_export), opens (descriptors imported, reserved, mapped,
    granted) and closes (the device synchronised, unmapped, released): refused calls change
    neither pool and leak nothing; the next try works. Each open attempt has an export of its own
    (an open takes one share over, its close ends it), closed at once when it worked."""
    p = Prog(cfg, cfg2)
    x = p.malloc(S1, 5 * MiB)
    y = p.malloc(S2, 300 * KiB)
    for k in range(4):
        p.fault(0, MEM_EXPORT, k, oom=k == 1)
        p.export(x)
    p.export(y)

    def attempt(serial, arm):
        h = p.export(serial)
        arm()
        p.op(OPEN, (1, h), (1, 0))  # may fail: then the next attempt takes this share
        p.op(CLOSE, (1, 0))  # skipped when nothing is open

    for e in (MEM_IMPORT, VA_RESERVE, MEM_MAP, SET_ACCESS):
        for k in range(3):
            attempt(x, lambda: p.fault(0, e, k, oom=k == 2))
    for n in range(8):
        attempt(y, lambda: p.fault(1, n=n))
    attempt(x, lambda: p.fault(2, MEM_IMPORT, 1))
    for e in (SYNCHRONIZE, MEM_UNMAP, MEM_RELEASE, VA_FREE):
        for mode in (0, 2):
            h = p.export(x)
            p.op(OPEN, (1, h), (1, 0))
            p.fault(mode, e, 0)
            p.op(CLOSE, (1, 0))
            p.op(CLOSE, (1, 0))  # again, unarmed, if it failed
    h = p.export(y)
    p.op(OPEN, (1, h), (1, 0))
    p.free(x)
    p.fault(0, MEM_EXPORT, 0)
    p.export(y)
    p.free(y)
    p.trim(2)
    p.fault(1, n=rng.randrange(4))
    p.op(CLOSE, (1, 0)).op(CLOSE, (1, 0))
    p.trim(0)
    p.fault(3, n=rng.randrange(16))
    p.inspect(0).inspect(1)
    return p.bytes()

def write(out, name, data):
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)


# ---- inputs of earlier encodings -----------------------------------------------------------------

# Encoding 1 had no second config byte, stream operands s % 6 and opcode 22 as a MALLOC; per
# opcode, its operand bytes and where its stream operand is (for upgrade_v1()).
V1_OPERANDS = [6, 2, 7, 3, 1, 3, 1, 1, 2, 2, 1, 1, 3, 0, 2, 1, 7, 1, 3, 3, 2, 0]
V1_STREAM_AT = {MALLOC: 0, WORK: 0, STREAM_RELEASE: 0, CAPTURE_BEGIN: 0, CAPTURE_END: 0,
                EXT_BEGIN: 0, EXT_END: 0, CAPTURE_REGISTER: 0, CAPTURE_GP: 0, EXEC: 2}
# Encoding 2 added the second config byte and THREAD (22, one operand byte); 23-26 were MALLOC.
V2_OPERANDS = V1_OPERANDS + [1]


def upgrade_v1(data):
    """An input of encoding 1, rewritten to decode to the same operations in encoding 2: a zero
    second config byte (stream 0 legacy), each stream operand reduced mod 6, opcode 22 (then a
    MALLOC, now THREAD) written as 23 (a MALLOC). Truncated operands stay truncated."""
    if not data:
        return data
    out = bytearray(data[:1]) + b"\0"
    pos = 1
    while pos < len(data):
        raw = data[pos]
        pos += 1
        op = raw & 31
        if op >= 22:
            op = MALLOC if op < 27 else FREE
        if raw & 31 == 22:
            raw += 1
        out.append(raw)
        opnd = bytearray(data[pos:pos + V1_OPERANDS[op]])
        pos += V1_OPERANDS[op]
        if op in V1_STREAM_AT and V1_STREAM_AT[op] < len(opnd):
            opnd[V1_STREAM_AT[op]] %= 6
        out += opnd
    return bytes(out)


def upgrade_v2(data):
    """An input of encoding 2, rewritten to decode to the same operations in encoding 3: opcode 23
    (then a MALLOC, now RECORD_STREAM) written as 24 (a MALLOC, the upper three bits kept). Nothing
    else changed: operands, config bytes and truncated tails stay as they are."""
    if len(data) < 2:
        return data
    out = bytearray(data[:2])
    pos = 2
    while pos < len(data):
        raw = data[pos]
        pos += 1
        op = raw & 31
        if op >= 23:
            op = MALLOC if op < 27 else FREE
        if raw & 31 == 23:
            raw += 1
        out.append(raw)
        out += data[pos:pos + V2_OPERANDS[op]]
        pos += V2_OPERANDS[op]
    return bytes(out)


# Encoding 3 added RECORD_STREAM (23, eight operand bytes); 24-26 were MALLOC, 27-31 FREE, the
# second config byte's bits 6-7 were ignored, and FAULT's entry operand was taken mod 22 (the
# driver table's entries then; fuzz_ops.c read it mod VPMM_DRV_ENTRY_COUNT, which became 27 with
# the several-devices contract before the fourth encoding fixed it at 27).
V3_OPERANDS = V2_OPERANDS + [8]
V3_ENTRIES = 22


def upgrade_v3(data):
    """An input of encoding 3, rewritten to decode to the same operations in encoding 4: the second
    config byte's bits 6-7 cleared (now two devices, device 1 isolated), opcodes 24-30 (then
    MALLOC or FREE, now GRANT, EXPORT, OPEN, CLOSE, UNSHARE, MALLOC, MALLOC) written as 0 or 1 (the
    upper three bits kept; 31 is FREE in both), FAULT's kind bit 3 cleared (now: the undo fails
    too) and its entry byte reduced mod 22. Truncated operands stay truncated."""
    if len(data) < 2:
        return data
    out = bytearray(data[:1]) + bytes([data[1] & 0x3F])
    pos = 2
    while pos < len(data):
        raw = data[pos]
        pos += 1
        op = raw & 31
        if op >= 24:
            op = MALLOC if op < 27 else FREE
            raw = (raw & ~31) | op
        out.append(raw)
        opnd = bytearray(data[pos:pos + V3_OPERANDS[op]])
        pos += V3_OPERANDS[op]
        if op == FAULT and len(opnd) >= 1:
            opnd[0] &= ~0x08  # now: the undo (revoke_access) fails too
        if op == FAULT and len(opnd) >= 2:
            opnd[1] %= V3_ENTRIES
        out += opnd
    return bytes(out)


def upgrade(data, version=3):
    """An input of encoding `version` (1, 2 or 3), rewritten for the current one (4)."""
    if version == 1:
        data = upgrade_v1(data)
    if version <= 2:
        data = upgrade_v2(data)
    return upgrade_v3(data)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "corpus"))
    ap.add_argument("--upgrade", nargs="+", metavar="FILE",
                    help="rewrite inputs of an earlier encoding (--from) in place for the "
                         "current one, and write no corpus")
    ap.add_argument("--from", dest="version", type=int, choices=(1, 2, 3), default=3,
                    help="the encoding of the --upgrade inputs: 3 (before the device and IPC "
                         "operations, the default), 2 (before RECORD_STREAM) or 1 (before the "
                         "second config byte)")
    args = ap.parse_args()
    if args.upgrade:
        for path in args.upgrade:
            with open(path, "rb") as f:
                data = f.read()
            new = upgrade(data, args.version)
            write(os.path.dirname(path) or ".", os.path.basename(path), new)
            print("upgraded %s%s" % (path, "" if new != data else " (unchanged)"))
        return 0
    os.makedirs(args.out, exist_ok=True)
    for name in os.listdir(args.out):
        if name.startswith(("trace-", "hand-")):
            os.remove(os.path.join(args.out, name))
    n = trace_seeds(args.out)
    rng = random.Random(20261121)
    configs = [config(), config(1, 1, 1), config(2, 2, 2, prealloc=True), config(3, 3, 3, cap=True)]
    for i, cfg in enumerate(configs):
        write(args.out, "hand-graph-tree-%d" % i, graph_tree(cfg))
        write(args.out, "hand-graph-tree-faults-%d" % i, graph_tree(cfg, faults=True))
        write(args.out, "hand-external-capture-%d" % i, external_capture(cfg))
        write(args.out, "hand-external-capture-faults-%d" % i, external_capture(cfg, faults=True))
        write(args.out, "hand-invalidated-capture-%d" % i, invalidated_capture(cfg))
        write(args.out, "hand-bad-input-%d" % i, bad_input(cfg))
        write(args.out, "hand-oom-trim-%d" % i, oom_and_trim(cfg))
        write(args.out, "hand-defrag-streams-%d" % i, defrag_streams(cfg, rng))
        write(args.out, "hand-faults-%d" % i, fault_sweep(cfg, rng))
        write(args.out, "hand-ptds-threads-%d" % i,
              ptds_threads(cfg, config2(i == 3), random.Random(i)))
        write(args.out, "hand-ptds-captures-%d" % i, ptds_captures(cfg, config2(i == 2)))
        write(args.out, "hand-ptds-default-%d" % i, ptds_default(cfg))
        write(args.out, "hand-ptds-legacy-work-%d" % i, ptds_legacy_work(cfg))
        write(args.out, "hand-ptds-unseen-capture-%d" % i, ptds_unseen_capture(cfg))
        write(args.out, "hand-uses-basic-%d" % i, uses_basic(cfg))
        write(args.out, "hand-uses-captures-%d" % i, uses_captures(cfg))
        write(args.out, "hand-uses-ptds-%d" % i, uses_ptds(cfg, config2(i == 1)))
        write(args.out, "hand-uses-checkpoint-%d" % i, uses_checkpoint(cfg))
        write(args.out, "hand-uses-faults-%d" % i, uses_faults(cfg, random.Random(100 + i)))
        # The background worker (its passes between operations) and multi-page handles.
        write(args.out, "hand-worker-defrag-%d" % i,
              with_config2(defrag_streams(cfg, random.Random(300 + i)),
                           config2(worker=True, handle_pages_log2=i)))
        write(args.out, "hand-worker-faults-%d" % i,
              with_config2(fault_sweep(cfg, random.Random(400 + i)),
                           config2(worker=True, handle_pages_log2=3 - i)))
        write(args.out, "hand-worker-graph-tree-%d" % i,
              with_config2(graph_tree(cfg, faults=True), config2(worker=True)))
        # Size classes: each setting under defragmentation across streams and under faults.
        write(args.out, "hand-classes-defrag-%d" % i,
              with_config2(defrag_streams(cfg, random.Random(500 + i)), config2(classes=i)))
        write(args.out, "hand-classes-faults-%d" % i,
              with_config2(fault_sweep(cfg, random.Random(600 + i)), config2(classes=3 - i)))
        # Several devices (peer access, device 1's streams) and CUDA IPC with an importer.
        two_w = config2(devices=2, worker=i % 2 == 1, handle_pages_log2=i % 3)
        write(args.out, "hand-dev-grant-growth-%d" % i, dev_grant_growth(cfg, two_w))
        write(args.out, "hand-dev-grant-first-%d" % i, dev_grant_first(cfg, two_w))
        write(args.out, "hand-dev-grant-zombies-%d" % i, dev_grant_zombies(cfg, two_w))
        write(args.out, "hand-dev-isolated-%d" % i, dev_isolated(cfg))
        write(args.out, "hand-dev-peer-streams-%d" % i, dev_peer_streams(cfg))
        write(args.out, "hand-dev-grant-faults-%d" % i, dev_grant_faults(cfg, two_w))
        write(args.out, "hand-ipc-free-then-close-%d" % i,
              ipc_export_open_free_close(cfg, config2(worker=i == 2)))
        write(args.out, "hand-ipc-close-then-free-%d" % i, ipc_close_then_free(cfg))
        write(args.out, "hand-ipc-unshare-%d" % i, ipc_unshare(cfg))
        write(args.out, "hand-ipc-refusals-%d" % i, ipc_refusals(cfg))
        write(args.out, "hand-ipc-neighbours-%d" % i, ipc_neighbours(cfg, config2(classes=i)))
        write(args.out, "hand-ipc-streams-%d" % i,
              ipc_with_streams(cfg, config2(devices=1 + i % 2, handle_pages_log2=i)))
        write(args.out, "hand-ipc-faults-%d" % i,
              ipc_faults(cfg, config2(devices=1 + i % 2), random.Random(700 + i)))
        n += 37
    total = sum(os.path.getsize(os.path.join(args.out, f)) for f in os.listdir(args.out))
    print("%d seeds, %d bytes in %s" % (n, total, args.out))


if __name__ == "__main__":
    sys.exit(main())
