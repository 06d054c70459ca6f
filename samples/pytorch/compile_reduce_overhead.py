#!/usr/bin/env python3
"""compile_reduce_overhead.py — vpmm as PyTorch's allocator, in a program a user can copy.

  1. vpmm.torch.enable() before anything touches CUDA: from here on every CUDA tensor, graph and
     graph tree of the process lives in vpmm's pool;
  2. trains a small transformer block a few steps (eager);
  3. compiles it with torch.compile(mode="reduce-overhead") — CUDA graph trees, whose graphs share
     one vpmm graph pool — runs it on three batch sizes, and checks every output against eager;
  4. prints what PyTorch's own memory API says about the pool (torch.cuda.memory_stats(),
     memory_summary()) and vpmm's own statistics (vpmm.torch.stats());
  5. writes a memory snapshot with the allocation history, for https://pytorch.org/memory_viz,
     and checks the pool's invariants.

Run from the repository after `cmake -S . -B build && cmake --build build` on a machine with
PyTorch and a GPU:

    PYTHONPATH=integrations/pytorch python3 samples/pytorch/compile_reduce_overhead.py \\
        --snapshot /tmp/vpmm_snapshot.pickle
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir,
                                "integrations", "pytorch"))

import vpmm.torch  # noqa: E402

vpmm.torch.enable()  # 1. before CUDA is initialised

import torch  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--snapshot", default="vpmm_snapshot.pickle",
                    help="where to write the memory snapshot (default %(default)s)")
    ap.add_argument("--width", type=int, default=1024)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.cuda.memory._record_memory_history(max_entries=100000)

    # 2. a few eager training steps
    block = torch.nn.TransformerEncoderLayer(args.width, nhead=16, batch_first=True,
                                             dropout=0.0).cuda()
    opt = torch.optim.AdamW(block.parameters(), lr=1e-4)
    for _ in range(5):
        x = torch.randn(8, 128, args.width, device="cuda")
        block(x).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    # 3. CUDA graph trees: one graph per batch size, one vpmm graph pool for the tree
    block.eval()
    fast = torch.compile(block, mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(4):
            for batch in (4, 8, 16):
                x = torch.randn(batch, 128, args.width, device="cuda")
                torch.testing.assert_close(fast(x).clone(), block(x), rtol=2e-3, atol=2e-3)
    print("reduce-overhead outputs equal eager on batch sizes 4, 8, 16")

    # 4. the pool, through PyTorch's API and vpmm's
    st = torch.cuda.memory_stats()
    print("allocator:", torch.cuda.get_allocator_backend())
    print("allocated now / peak: %.1f / %.1f MiB" % (st["allocated_bytes.all.current"] / 2**20,
                                                    st["allocated_bytes.all.peak"] / 2**20))
    print("reserved now / peak:  %.1f / %.1f MiB" % (st["reserved_bytes.all.current"] / 2**20,
                                                    st["reserved_bytes.all.peak"] / 2**20))
    print(torch.cuda.memory_summary(abbreviated=True))
    vs = vpmm.torch.stats()
    print("vpmm: mapped %.1f MiB (peak %.1f), live %.1f MiB, graph pools %d, defrags %d" % (
        vs["mapped_bytes"] / 2**20, vs["peak_mapped_bytes"] / 2**20, vs["live_bytes"] / 2**20,
        vs["graph_pools"], vs["defrags"]))

    # 5. the snapshot for the memory visualiser, and the invariants
    torch.cuda.memory._dump_snapshot(args.snapshot)
    torch.cuda.memory._record_memory_history(enabled=None)
    print("snapshot written to", args.snapshot)
    violations = vpmm.torch.check()
    print("vpmm invariants:", "ok" if violations == 0 else "%d violated" % violations)
    return 0 if violations == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
