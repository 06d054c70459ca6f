#!/usr/bin/env python3
"""torch_graph_trees.py — CUDA graph trees (torch.compile mode="reduce-overhead") on vpmm and on
PyTorch's native caching allocator: device memory held and step time, outputs against eager.

One run (one allocator, one process):
  1. builds a GPT-2 from a GPT2Config (--layers x --embd, random weights: nothing is downloaded),
     fp32 with TF32 off, so compiled and eager outputs can be compared closely;
  2. inference: compiles the model with mode="reduce-overhead" (dynamic=False) and runs it on
     --infer-lens sequence lengths in turn — one graph per length, all branches of one CUDA graph
     tree sharing one private pool — --rounds times; every output is compared with the eager
     model's (torch.testing.assert_close);
  3. training: compiles a training model (forward and backward graphs of the tree) and runs
     --train-steps AdamW steps, cycling over --train-lens; the first step of each length is
     compared with an eager step on a copy of the model (loss and gradients);
  4. samples torch.cuda.mem_get_info() after every step: the peak device memory held is the most
     ever in use over the free memory before the model was built (what the allocator holds,
     whichever allocator it is), with torch.cuda.max_memory_reserved/_allocated beside it;
  5. times every step after its length's first --warmup calls (CUDA events; the graph trees
     record on the first calls), and reports the median and the total.

--compare runs each allocator of --allocators in its own process with the same arguments (vpmm
through vpmm.torch.enable(), native by default) and prints a markdown table with the ratios.
Needs PyTorch with CUDA, transformers, and for vpmm libvpmm_torch_backend.so (the build tree or
$VPMM_TORCH_BACKEND). bench/RESULTS.md ("PyTorch graph trees") has the numbers and the command.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, os.pardir, "integrations", "pytorch"))

ALLOCATORS = ("vpmm", "native")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--allocator", choices=ALLOCATORS, default="vpmm")
    p.add_argument("--compare", action="store_true",
                   help="run each of --allocators in its own process; print a table")
    p.add_argument("--allocators", default="vpmm,native")
    p.add_argument("--out", help="for --compare: also append the JSON lines to this file")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--embd", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--infer-lens", default="64,128,192,256,384",
                   help="inference sequence lengths: one branch of the tree each")
    p.add_argument("--train-lens", default="128,256", help="training sequence lengths")
    p.add_argument("--rounds", type=int, default=20, help="inference passes over all lengths")
    p.add_argument("--train-steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=3,
                   help="calls per length left out of the timing (recording)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--tol", type=float, default=2e-3, help="assert_close rtol and atol")
    return p.parse_args(argv)


def run_one(args):
    if args.allocator == "vpmm":
        import vpmm.torch as vt

        vt.enable()
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda", 0)
    torch.cuda.init()
    torch.cuda.synchronize()
    free0, total = torch.cuda.mem_get_info(dev)
    peak_used = [0]

    def sample():
        torch.cuda.synchronize()
        free, _ = torch.cuda.mem_get_info(dev)
        peak_used[0] = max(peak_used[0], free0 - free)

    torch.manual_seed(args.seed)
    cfg = GPT2Config(n_layer=args.layers, n_embd=args.embd, n_head=args.heads,
                     vocab_size=args.vocab, n_positions=1024, resid_pdrop=0.0, embd_pdrop=0.0,
                     attn_pdrop=0.0)
    model = GPT2LMHeadModel(cfg).to(dev).eval()
    sample()
    gen = torch.Generator(device="cpu").manual_seed(args.seed)

    def tokens(n):
        return torch.randint(0, args.vocab, (args.batch, n), generator=gen).to(dev)

    def logits_of(m, ids):
        return m(input_ids=ids, use_cache=False).logits

    # ---- inference: one graph per length, one tree -----------------------------------------
    infer_lens = [int(x) for x in args.infer_lens.split(",")]
    compiled = torch.compile(lambda ids: logits_of(model, ids), mode="reduce-overhead",
                             dynamic=False)
    times = []
    calls = {}
    mismatches = 0
    t_compile = time.time()
    with torch.no_grad():
        for r in range(args.rounds):
            for n in infer_lens:
                ids = tokens(n)
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                    enable_timing=True)
                start.record()
                out = compiled(ids)
                end.record()
                calls[n] = calls.get(n, 0) + 1
                if r < 2 or r == args.rounds - 1:
                    ref = logits_of(model, ids)
                    try:
                        torch.testing.assert_close(out, ref, rtol=args.tol, atol=args.tol)
                    except AssertionError as e:
                        mismatches += 1
                        print("inference mismatch at length %d: %s" % (n, str(e)[:300]),
                              file=sys.stderr)
                    del ref
                del out
                sample()
                if calls[n] > args.warmup:
                    end.synchronize()
                    times.append(start.elapsed_time(end))
    infer_wall = time.time() - t_compile
    stats_infer = {"peak_reserved": torch.cuda.max_memory_reserved(dev),
                   "peak_allocated": torch.cuda.max_memory_allocated(dev),
                   "peak_used": peak_used[0]}

    # ---- training: forward and backward graphs of a second tree ------------------------------
    import copy

    train_model = copy.deepcopy(model).train()
    ref_model = copy.deepcopy(model).train()
    del model, compiled
    opt = torch.optim.AdamW(train_model.parameters(), lr=1e-4)

    def loss_of(m, ids):
        return m(input_ids=ids, labels=ids, use_cache=False).loss

    ctrain = torch.compile(lambda ids: loss_of(train_model, ids), mode="reduce-overhead",
                           dynamic=False)
    train_lens = [int(x) for x in args.train_lens.split(",")]
    ttimes = []
    tcalls = {}
    for step in range(args.train_steps):
        n = train_lens[step % len(train_lens)]
        ids = tokens(n)
        check = n not in tcalls
        if check:  # same weights: the eager copy must give the same loss and gradients
            ref_model.load_state_dict(train_model.state_dict())
            ref_loss = loss_of(ref_model, ids)
            ref_loss.backward()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        loss = ctrain(ids)
        loss.backward()
        end.record()
        if check:
            try:
                torch.testing.assert_close(loss.detach(), ref_loss.detach(), rtol=args.tol,
                                           atol=args.tol)
                for (name, p), q in zip(train_model.named_parameters(), ref_model.parameters()):
                    torch.testing.assert_close(p.grad, q.grad, rtol=args.tol * 5,
                                               atol=args.tol * 5, msg=lambda m: name + ": " + m)
            except AssertionError as e:
                mismatches += 1
                print("training mismatch at length %d: %s" % (n, str(e)[:300]), file=sys.stderr)
            ref_model.zero_grad(set_to_none=True)
            del ref_loss
        opt.step()
        opt.zero_grad(set_to_none=True)
        del loss
        tcalls[n] = tcalls.get(n, 0) + 1
        sample()
        if tcalls[n] > args.warmup:
            end.synchronize()
            ttimes.append(start.elapsed_time(end))

    def summary(ts):
        ts = sorted(ts)
        return {"median_ms": ts[len(ts) // 2] if ts else None, "total_ms": sum(ts),
                "p99_ms": ts[min(len(ts) - 1, int(0.99 * len(ts)))] if ts else None,
                "max_ms": ts[-1] if ts else None, "n": len(ts)}

    res = {
        "allocator": args.allocator,
        "backend": torch.cuda.get_allocator_backend(),
        "gpu": torch.cuda.get_device_name(dev),
        "torch": torch.__version__,
        "model": "gpt2 %dx%d" % (args.layers, args.embd),
        "infer_lens": infer_lens, "train_lens": train_lens, "batch": args.batch,
        "mismatches": mismatches,
        "infer": summary(times), "train": summary(ttimes),
        "infer_phase": stats_infer,
        "peak_used": peak_used[0],
        "peak_reserved": torch.cuda.max_memory_reserved(dev),
        "peak_allocated": torch.cuda.max_memory_allocated(dev),
        "infer_wall_s": round(infer_wall, 1),
    }
    if args.allocator == "vpmm":
        import vpmm.torch as vt

        res["vpmm"] = {k: vt.stats()[k] for k in ("peak_mapped_bytes", "peak_live_bytes",
                                                 "graph_pools", "defrags", "pages_remapped")}
        res["vpmm_check"] = vt.check()
    print(json.dumps(res), flush=True)
    return 0 if mismatches == 0 and res.get("vpmm_check", 0) == 0 else 1


def compare(args, argv):
    rows = []
    rest = [a for a in argv if a != "--compare"]
    for alloc in args.allocators.split(","):
        cmd = [sys.executable, os.path.abspath(__file__), "--allocator", alloc] + rest
        p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        if p.returncode != 0 or not lines:
            print("%s failed (exit %d)" % (alloc, p.returncode), file=sys.stderr)
            if lines:
                print(lines[-1])
            return 1
        rows.append(json.loads(lines[-1]))
        print(lines[-1], flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(lines[-1] + "\n")
    base = next((r for r in rows if r["allocator"] == "native"), rows[-1])
    mib = 1 << 20
    print("\n| allocator | peak held (mem_get_info) | peak reserved | peak allocated | "
          "reserved / allocated | infer step median / total | train step median / total |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print("| %s | %.0f MiB (%.2fx) | %.0f MiB | %.0f MiB | %.2f | %.3f ms / %.0f ms (%.2fx) | "
              "%.2f ms / %.0f ms (%.2fx) |" % (
                  r["allocator"], r["peak_used"] / mib, r["peak_used"] / base["peak_used"],
                  r["peak_reserved"] / mib, r["peak_allocated"] / mib,
                  r["peak_reserved"] / r["peak_allocated"],
                  r["infer"]["median_ms"], r["infer"]["total_ms"],
                  r["infer"]["total_ms"] / base["infer"]["total_ms"],
                  r["train"]["median_ms"], r["train"]["total_ms"],
                  r["train"]["total_ms"] / base["train"]["total_ms"]))
    return 0


def main(argv):
    args = parse_args(argv)
    if args.compare:
        return compare(args, argv)
    return run_one(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
