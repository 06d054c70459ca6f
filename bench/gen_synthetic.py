#!/usr/bin/env python3
"""gen_synthetic.py — writes the synthetic allocation traces in bench/traces/ (format: docs/TRACE_FORMAT.md).

The two recorded traces are single-stream PyTorch programs; these scenarios stress what they do
not, so that no setting is tuned to two traces. Deterministic (fixed seeds): rerunning rewrites
identical files.

  synthetic_multistream   4 streams, each a loop of "layers" with its own size mix, freeing on
                          the same stream; sizes from 512 B to 48 MiB
  synthetic_scattered     small long-lived blocks (KiB) scattered among large short-lived ones
                          (MiB), then the large ones freed and larger ones asked for: the case
                          page-granular defragmentation exists for
  synthetic_kvcache       64 sequences whose KV-cache buffers grow by reallocation (allocate the
                          next size, then free the old one), sequences finishing and starting at
                          random, plus per-step activations

Usage: python3 bench/gen_synthetic.py [OUTDIR]   (default: the traces/ folder next to this file)
"""
import gzip
import os
import random
import sys

KiB, MiB = 1 << 10, 1 << 20


def round512(n):
    return (n + 511) // 512 * 512


class Trace:
    def __init__(self, title):
        self.lines = [f"# {title}", "# op addr size stream  (a=alloc f=free_requested c=free_completed)"]
        self.next_addr = 0x100000
        self.live = {}

    def alloc(self, size, stream=0):
        addr = self.next_addr
        self.next_addr += 0x1000
        size = round512(size)
        self.live[addr] = (size, stream)
        self.lines.append(f"a {addr:x} {size} {stream}")
        return addr

    def free(self, addr):
        size, stream = self.live.pop(addr)
        self.lines.append(f"f {addr:x} {size} {stream}")
        self.lines.append(f"c {addr:x} {size} {stream}")

    def write(self, path):
        with gzip.GzipFile(path, "wb", mtime=0) as f:
            f.write(("\n".join(self.lines) + "\n").encode())


def multistream():
    rng = random.Random(1)
    t = Trace("synthetic: 4 streams, a loop of layers each, own size mix")
    mixes = [
        [512, 4 * KiB, 64 * KiB],                       # stream 1: small
        [2 * MiB, 3 * MiB, 9 * MiB],                    # stream 2: medium
        [16 * MiB, 24 * MiB, 48 * MiB],                 # stream 3: large
        [1 * KiB, 1 * MiB, 12 * MiB, 30 * MiB],         # stream 4: mixed
    ]
    live = {s: [] for s in range(1, 5)}
    for step in range(400):
        s = 1 + step % 4
        mix = mixes[s - 1]
        # forward: a few layers of activations, scaled by a per-step "batch"
        scale = rng.choice([0.5, 0.75, 1.0, 1.25])
        for _ in range(rng.randint(4, 12)):
            live[s].append(t.alloc(int(rng.choice(mix) * scale), s))
        # backward-like: free most of this stream's blocks, newest first
        keep = rng.randint(0, 3)
        while len(live[s]) > keep:
            t.free(live[s].pop())
    for s in live:
        for a in live[s]:
            t.free(a)
    return t


def scattered():
    rng = random.Random(2)
    t = Trace("synthetic: small long-lived blocks scattered among large short-lived ones")
    small_live = []
    for round_ in range(30):
        big = []
        for _ in range(40):
            big.append(t.alloc(rng.choice([3, 5, 8]) * MiB))
            if rng.random() < 0.5:
                small_live.append(t.alloc(rng.choice([1, 2, 4, 16]) * KiB))
        for a in big:
            t.free(a)
        # larger requests after the large ones went away
        bigger = [t.alloc(rng.choice([24, 40, 64]) * MiB) for _ in range(6)]
        for a in bigger:
            t.free(a)
        # some long-lived smalls finally die
        rng.shuffle(small_live)
        for _ in range(len(small_live) // 4):
            t.free(small_live.pop())
    for a in small_live:
        t.free(a)
    return t


def kvcache():
    rng = random.Random(3)
    t = Trace("synthetic: 64 sequences with KV-cache buffers growing by reallocation")
    block = 256 * KiB                        # per-token-block KV size
    seqs = {}                                # id -> (addr, blocks)
    next_id = 0
    for step in range(3000):
        # start new sequences
        while len(seqs) < 64 and rng.random() < 0.3:
            seqs[next_id] = (t.alloc(block), 1)
            next_id += 1
        # grow some sequences: allocate the next size, then free the old buffer (torch.cat-like)
        for sid in list(seqs):
            addr, n = seqs[sid]
            if rng.random() < 0.2:
                new = t.alloc((n + 1) * block)
                t.free(addr)
                seqs[sid] = (new, n + 1)
        # per-step activations
        act = [t.alloc(rng.choice([1, 2, 4]) * MiB) for _ in range(3)]
        for a in act:
            t.free(a)
        # finish some sequences
        for sid in list(seqs):
            if rng.random() < 0.01 or seqs[sid][1] > 120:
                t.free(seqs.pop(sid)[0])
    for addr, _ in seqs.values():
        t.free(addr)
    return t


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "traces")
    for name, make in [("multistream", multistream), ("scattered", scattered), ("kvcache", kvcache)]:
        path = os.path.join(out, f"synthetic_{name}.trace.gz")
        make().write(path)
        print(path)


if __name__ == "__main__":
    main()
