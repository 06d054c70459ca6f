#!/usr/bin/env python3
"""torch_multigpu.py — vpmm as PyTorch's allocator on several GPUs: data-parallel training (DDP,
FSDP2) measured against PyTorch's native allocator and expandable segments, a model split over
two GPUs and CUDA IPC between processes checked for correctness.

Subcommands (each run prints one JSON line per result, then a short table; --out FILE also
appends the JSON lines to FILE):

  ddp, fsdp2   under torchrun --nproc_per_node N: a GPT-2-style decoder written in plain PyTorch
               (random weights, nothing downloaded; 8 layers x 768 for ddp, 12 x 768 for fsdp2,
               context 1024, tied embeddings) trained with AdamW under bf16 autocast, wrapped in
               DistributedDataParallel over NCCL (ddp) or sharded with FSDP2's fully_shard per
               block and at the root (fsdp2). Every step has a new sequence length (seeded, the
               same on every rank and for every allocator: uniform in [--min-len, --max-len],
               rounded to 8) and new random tokens (seeded per step and rank), so the losses of two
               allocators are comparable step by step. --warmup steps, then --steps timed steps
               (CUDA events around the step and wall time to the loss on the host). Per rank: the
               device memory the driver saw in use at its peak (total - least free memory,
               torch.cuda.mem_get_info sampled by a thread every --sample-ms and after every step;
               "over start" subtracts what was in use after the process group came up), the
               allocator's max_memory_reserved / allocated, vpmm's own peaks and its invariant
               check, the losses. Rank 0 prints one line per rank and a summary line.
  split        one process, two GPUs: the same decoder (fp32, TF32 off, math attention) once whole
               on cuda:0 and once split in half (embeddings and the first blocks on cuda:0, the
               rest and the head on cuda:1, activations moved with .to()), with the same weights;
               SGD steps on both and an inference pass; losses, every parameter after training
               and the logits must agree (max abs diff reported). Then cross-device copies:
               contiguous and non-contiguous, both ways, with a dtype change; then a peer kernel
               (torch.cuda._compile_kernel) on each GPU reading the other GPU's memory.
  ipc          torch.multiprocessing (spawn): the parent sends CUDA tensors (a large one, a small
               one, a view at an offset, one on cuda:1) to a child through a pipe (pickled by
               torch.multiprocessing's reductions, as a Queue pickles them, but in the sending
               thread, so a failure to share shows there), the child writes them; the parent
               checks the values. The same tensor sent twice must alias in the child. The child
               sends a tensor it made; the parent checks and writes it; the child checks. Then
               --sends tensors sent one by one (three sizes), the child reading and writing each;
               open descriptors (/proc/self/fd) of both processes and the device memory in use
               are counted before and after: growth beyond --fd-slack descriptors or
               --mem-slack-mib MiB fails. The child picks the same allocator as the parent.
  summary      reads JSON lines (files) and prints the comparison tables: peak memory per GPU
               and step time per allocator with the ratios vpmm / native and vpmm /
               expandable, the losses compared, and the checks; exits 1 on any failure, any
               missing result named by --expect, or losses further apart than --loss-tol.

--allocator vpmm (vpmm.torch.enable() before CUDA starts; libvpmm_torch_backend.so from
$VPMM_TORCH_BACKEND or the build tree), native (PyTorch's caching allocator, defaults), or
expandable (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True). NVLink multicast stays off
(NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1 are forced).
Exit status: 0 when every check passed, 1 when one failed (the JSON line says which), 2 when
the run could not start (no PyTorch, too few GPUs, no vpmm backend, not under torchrun).

    torchrun --standalone --nproc_per_node 2 bench/torch_multigpu.py ddp --allocator vpmm
    python3 bench/torch_multigpu.py split --allocator native
    python3 bench/torch_multigpu.py summary results.jsonl

bench/run_multigpu.sh runs them all for the three allocators; bench/RESULTS.md ("Several GPUs")
has the numbers. Nothing at the top of this file imports torch: the allocator is chosen first,
and `summary` runs without PyTorch.
"""
import argparse
import gc
import json
import math
import os
import random
import statistics
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, os.pardir, "integrations", "pytorch"))

ALLOCATORS = ("vpmm", "native", "expandable")
BENCHES = ("ddp", "fsdp2")
CHECKS = ("split", "ipc")
MIB = 1 << 20
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                "NVSHMEM_DISABLE_NVLS": "1"}
VPMM_STAT_KEYS = ("device", "peak_mapped_bytes", "peak_live_bytes", "defrags",
                  "pages_remapped")  # and every ipc_* and peer* field


class SetupError(Exception):
    """The run cannot start (exit status 2)."""


def log(msg):
    print("[torch_multigpu] %s" % msg, file=sys.stderr, flush=True)


def emit(obj, out=None):
    """Prints one JSON line (and appends it to `out`)."""
    line = json.dumps(obj, sort_keys=False)
    print(line, flush=True)
    if out:
        with open(out, "a") as f:
            f.write(line + "\n")


# ---- pure helpers (no PyTorch): tested by tests/test_bench_tools.py --------------------------


def seq_lengths(seed, n, lo, hi, multiple=8):
    """n sequence lengths, uniform in [lo, hi] and rounded to a multiple of `multiple` that
    stays inside the range; the same list for the same arguments."""
    first = -(-lo // multiple) * multiple
    last = hi // multiple * multiple
    if first > last:
        raise ValueError("no multiple of %d in [%d, %d]" % (multiple, lo, hi))
    rng = random.Random(seed)
    return [rng.randint(first // multiple, last // multiple) * multiple for _ in range(n)]


def time_stats(ms):
    """median / total / max / min / p90 (ms) of a list of step times; Nones when empty."""
    if not ms:
        return {"n": 0, "median": None, "total": 0.0, "max": None, "min": None, "p90": None}
    s = sorted(ms)
    return {"n": len(s), "median": round(statistics.median(s), 3), "total": round(sum(s), 3),
            "max": round(s[-1], 3), "min": round(s[0], 3),
            "p90": round(s[min(len(s) - 1, int(math.ceil(0.9 * len(s))) - 1)], 3)}


def mib(n):
    return None if n is None else round(n / MIB, 1)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)

    def common(q):
        q.add_argument("--allocator", choices=ALLOCATORS, default="vpmm")
        q.add_argument("--seed", type=int, default=1234, help="seed of weights, lengths, data")
        q.add_argument("--out", help="also append the JSON lines to this file")

    def model(q, layers, batch):
        q.add_argument("--layers", type=int, default=layers)
        q.add_argument("--embd", type=int, default=768)
        q.add_argument("--heads", type=int, default=12)
        q.add_argument("--vocab", type=int, default=50257)
        q.add_argument("--ctx", type=int, default=1024, help="context (positions)")
        q.add_argument("--batch", type=int, default=batch, help="sequences per GPU and step")
        q.add_argument("--min-len", type=int, default=256)
        q.add_argument("--max-len", type=int, default=1024)

    for name, layers, helptext in (("ddp", 8, "DistributedDataParallel training (torchrun)"),
                                   ("fsdp2", 12, "FSDP2 fully_shard training (torchrun)")):
        q = sub.add_parser(name, help=helptext)
        common(q)
        model(q, layers, 24)
        q.add_argument("--warmup", type=int, default=6, help="steps left out of the timing")
        q.add_argument("--steps", type=int, default=30, help="timed steps")
        q.add_argument("--lr", type=float, default=3e-4)
        q.add_argument("--sample-ms", type=float, default=5.0,
                       help="memory sampling period of the sampler thread (0: after steps only)")
        q.add_argument("--nccl-timeout", type=int, default=180,
                       help="seconds before a stuck collective aborts the run")
    q = sub.add_parser("split", help="a model split over cuda:0 and cuda:1 against one GPU")
    common(q)
    model(q, 6, 8)
    q.set_defaults(embd=512, heads=8, min_len=64, max_len=384)
    q.add_argument("--steps", type=int, default=6, help="SGD steps compared")
    q.add_argument("--lr", type=float, default=1e-2)
    q.add_argument("--atol", type=float, default=1e-4, help="max abs diff allowed (fp32)")
    q = sub.add_parser("ipc", help="CUDA tensors shared with a spawned child process")
    common(q)
    q.add_argument("--sends", type=int, default=2000, help="tensors sent in the loop")
    q.add_argument("--fd-slack", type=int, default=16,
                   help="open descriptors a process may gain over the loop")
    q.add_argument("--mem-slack-mib", type=int, default=256,
                   help="device memory in use that may be gained over the loop")
    q.add_argument("--timeout", type=int, default=120, help="seconds to wait for the child")
    q = sub.add_parser("summary", help="compare the JSON lines of several runs")
    q.add_argument("files", nargs="+")
    q.add_argument("--expect", default="",
                   help="results that must be there, e.g. ddp:2,fsdp2:2,split,ipc")
    q.add_argument("--allocators", default=",".join(ALLOCATORS))
    q.add_argument("--loss-tol", type=float, default=0.02,
                   help="largest |loss difference| at a step between two allocators")
    args = p.parse_args(argv)
    if args.cmd in BENCHES + ("split",):
        if not 8 <= args.min_len <= args.max_len <= args.ctx:
            p.error("need 8 <= --min-len <= --max-len <= --ctx")
        if args.embd % args.heads:
            p.error("--embd must be a multiple of --heads")
        if args.batch < 1 or args.layers < 1 or (args.cmd == "split" and args.layers < 2):
            p.error("need --batch >= 1 and --layers >= 1 (>= 2 to split)")
    if args.cmd in BENCHES and (args.steps < 1 or args.warmup < 0):
        p.error("need --steps >= 1 and --warmup >= 0")
    if args.cmd == "split" and args.steps < 1:
        p.error("need --steps >= 1")
    if args.cmd == "ipc" and args.sends < 1:
        p.error("need --sends >= 1")
    if args.cmd == "summary":
        args.expect = parse_expect(args.expect, p.error)
        args.allocators = [a for a in args.allocators.split(",") if a]
        bad = [a for a in args.allocators if a not in ALLOCATORS]
        if bad:
            p.error("unknown allocator %s" % ",".join(bad))
    return args


def parse_expect(text, error):
    """'ddp:2,fsdp2:4,split,ipc' -> [("ddp", 2), ("fsdp2", 4), ("split", None), ("ipc", None)]."""
    out = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        name, _, world = item.partition(":")
        if name in BENCHES:
            if not world.isdigit() or int(world) < 1:
                error("--expect %s needs a GPU count (%s:2)" % (item, name))
            out.append((name, int(world)))
        elif name in CHECKS and not world:
            out.append((name, None))
        else:
            error("--expect: unknown item %r" % item)
    return out


# ---- the allocator and the model ---------------------------------------------------------------


def prepare_environment(allocator):
    """Sets the allocator's environment (and keeps NVLink multicast off); before torch loads."""
    if "torch" in sys.modules:
        raise SetupError("torch was imported before the allocator was chosen")
    for var in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        if var in os.environ:
            log("ignoring %s=%r: this run sets its own allocator" % (var, os.environ[var]))
            del os.environ[var]
    if allocator == "expandable":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    os.environ.update(NO_MULTICAST)


def load_torch(allocator):
    """Imports torch with the allocator chosen; vpmm is installed before CUDA initialises."""
    try:
        import torch
    except ImportError as e:
        raise SetupError("PyTorch is not importable: %s" % e) from e
    if allocator == "vpmm":
        try:
            import vpmm.torch as vt

            vt.enable()
        except Exception as e:  # noqa: BLE001 - any failure to enable stops the run
            raise SetupError("vpmm.torch.enable() failed: %s: %s" % (type(e).__name__, e)) from e
    if not torch.cuda.is_available():
        raise SetupError("no CUDA device")
    return torch


def allocator_info(torch, allocator):
    info = {"backend": torch.cuda.get_allocator_backend(),
            "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}
    if allocator == "vpmm":
        import vpmm.torch as vt

        info["vpmm_library"] = vt.library_path()
    return info


def vpmm_figures(allocator, device):
    """vpmm's own peaks and its invariant check for a device (None for other allocators)."""
    if allocator != "vpmm":
        return None, None
    import vpmm.torch as vt

    try:
        st = vt.stats(device)
    except RuntimeError:  # no pool on that device
        return None, None
    keep = {k: v for k, v in st.items()
            if k in VPMM_STAT_KEYS or k.startswith(("ipc_", "peer"))}
    return keep, vt.check(device)


def build_gpt(torch, layers, embd, heads, vocab, ctx, tie=True):
    """A GPT-2-style decoder in plain PyTorch (pre-norm blocks, causal SDPA, GELU MLP), with
    GPT-2's initialisation; built on the CPU from the current seed."""
    nn = torch.nn
    F = torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(embd)
            self.qkv = nn.Linear(embd, 3 * embd)
            self.attn_proj = nn.Linear(embd, embd)
            self.ln2 = nn.LayerNorm(embd)
            self.fc = nn.Linear(embd, 4 * embd)
            self.mlp_proj = nn.Linear(4 * embd, embd)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
            q, k, v = (z.view(b, t, heads, c // heads).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.attn_proj(y.transpose(1, 2).reshape(b, t, c))
            return x + self.mlp_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocab, embd)
            self.wpe = nn.Embedding(ctx, embd)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(embd)
            self.head = nn.Linear(embd, vocab, bias=False)
            for name, p in self.named_parameters():
                if name.endswith("bias"):
                    nn.init.zeros_(p)
                elif p.dim() >= 2:
                    std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
                    nn.init.normal_(p, mean=0.0, std=std)
            if tie:
                self.head.weight = self.wte.weight

        def forward(self, idx, targets=None):
            return gpt_forward(torch, self, idx, targets)

    return GPT()


def gpt_forward(torch, model, idx, targets=None, split_at=None, second=None):
    """The decoder's forward; with split_at, blocks from split_at on (and the head) run on the
    device `second`, the activations moved there with .to(). Returns the loss with targets,
    else the logits."""
    t = idx.shape[1]
    pos = torch.arange(t, device=idx.device)
    x = model.wte(idx) + model.wpe(pos)
    for i, block in enumerate(model.blocks):
        if split_at is not None and i == split_at:
            x = x.to(second)
        x = block(x)
    logits = model.head(model.ln_f(x))
    if targets is None:
        return logits
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                                             targets.to(logits.device).reshape(-1))


def tokens(torch, seed, rank, step, batch, length, vocab):
    """Random token ids (batch, length + 1), the same for the same (seed, rank, step)."""
    g = torch.Generator().manual_seed(seed * 1000003 + rank * 10007 + step)
    return torch.randint(0, vocab, (batch, length + 1), generator=g)


class MemorySampler:
    """The least free device memory seen (torch.cuda.mem_get_info), from a thread every
    period_ms and from sample() calls; what the driver sees, whichever allocator holds it."""

    def __init__(self, torch, device, period_ms):
        self.torch, self.device, self.period = torch, device, period_ms / 1000.0
        self.free0, self.total = torch.cuda.mem_get_info(device)
        self.min_free = self.free0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = None
        self.error = None

    def sample(self):
        free, _ = self.torch.cuda.mem_get_info(self.device)
        self.min_free = min(self.min_free, free)
        self.samples += 1

    def _run(self):
        try:
            while not self._stop.wait(self.period):
                self.sample()
        except Exception as e:  # noqa: BLE001 - reported with the result
            self.error = "%s: %s" % (type(e).__name__, e)

    def start(self):
        if self.period > 0:
            self._thread = threading.Thread(target=self._run, name="mem-sampler", daemon=True)
            self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def peak_used(self):
        return self.total - self.min_free

    def peak_over_start(self):
        return self.free0 - self.min_free


# ---- ddp / fsdp2 -----------------------------------------------------------------------------


def run_distributed(args):
    for var in ("LOCAL_RANK", "RANK", "WORLD_SIZE"):
        if var not in os.environ:
            raise SetupError("%s is not set: start this subcommand with torchrun "
                             "--nproc_per_node N" % var)
    prepare_environment(args.allocator)
    torch = load_torch(args.allocator)
    import datetime

    import torch.distributed as dist

    local_rank = int(os.environ["LOCAL_RANK"])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if torch.cuda.device_count() <= local_rank:
        raise SetupError("rank %d has no GPU (%d visible)" % (local_rank,
                                                             torch.cuda.device_count()))
    torch.cuda.set_device(local_rank)
    dev = torch.device("cuda", local_rank)
    dist.init_process_group("nccl", device_id=dev,
                            timeout=datetime.timedelta(seconds=args.nccl_timeout))
    try:
        row = train(args, torch, dist, dev, rank, world)
    except Exception as e:  # noqa: BLE001 - reported, then re-raised for torchrun
        emit({"kind": "error", "bench": args.cmd, "allocator": args.allocator, "world": world,
              "rank": rank, "error": "%s: %s" % (type(e).__name__, str(e)[:2000])}, args.out)
        traceback.print_exc()
        raise
    rows = [None] * world
    dist.all_gather_object(rows, row)
    ok = all(r["ok"] for r in rows)
    if rank == 0:
        for r in rows:
            emit(r, args.out)
        summary = summarize_ranks(rows)
        emit(summary, args.out)
        print(format_rank_table(rows, summary), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0 if ok else 1


def train(args, torch, dist, dev, rank, world):
    local = dev.index
    dist.barrier()
    torch.cuda.synchronize()
    sampler = MemorySampler(torch, dev, args.sample_ms).start()
    torch.manual_seed(args.seed)
    model = build_gpt(torch, args.layers, args.embd, args.heads, args.vocab, args.ctx).to(dev)
    params = sum(p.numel() for p in model.parameters())
    if args.cmd == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model, device_ids=[local])
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cuda", (world,))
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    lens = seq_lengths(args.seed, args.warmup + args.steps, args.min_len, args.max_len)
    ev_ms, wall_ms, losses = [], [], []
    problems = []
    t_start = time.perf_counter()
    for step, n in enumerate(lens):
        ids = tokens(torch, args.seed, rank, step, args.batch, n, args.vocab).to(dev)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        start.record()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(ids[:, :-1], ids[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        end.record()
        value = loss.detach().float().item()
        end.synchronize()
        t1 = time.perf_counter()
        del loss, ids
        sampler.sample()
        losses.append(round(value, 6) if math.isfinite(value) else value)
        if not math.isfinite(value) and not problems:  # every step still runs: the other
            problems.append("loss %r at step %d" % (value, step))  # ranks wait for this one
        if step >= args.warmup:
            ev_ms.append(start.elapsed_time(end))
            wall_ms.append((t1 - t0) * 1000.0)
    torch.cuda.synchronize()
    sampler.sample()
    sampler.stop()
    if sampler.error:
        problems.append("memory sampler: " + sampler.error)
    figures, check = vpmm_figures(args.allocator, local)
    if check:
        problems.append("vpmm_pool_check: %d violations" % check)
    return {
        "kind": "rank", "bench": args.cmd, "allocator": args.allocator, "world": world,
        "rank": rank, "gpu": torch.cuda.get_device_name(dev), "torch": torch.__version__,
        "nccl": ".".join(str(x) for x in torch.cuda.nccl.version()),
        **allocator_info(torch, args.allocator),
        "model": "gpt2 %dx%d" % (args.layers, args.embd), "params": params,
        "batch": args.batch, "len": [args.min_len, args.max_len], "seed": args.seed,
        "warmup": args.warmup, "steps": args.steps,
        "step_ms": time_stats(ev_ms), "wall_ms": time_stats(wall_ms),
        "run_s": round(time.perf_counter() - t_start, 2),
        "peak_used_mib": mib(sampler.peak_used()),
        "peak_over_start_mib": mib(sampler.peak_over_start()),
        "start_used_mib": mib(sampler.total - sampler.free0),
        "total_mib": mib(sampler.total), "mem_samples": sampler.samples,
        "max_reserved_mib": mib(torch.cuda.max_memory_reserved(dev)),
        "max_allocated_mib": mib(torch.cuda.max_memory_allocated(dev)),
        "vpmm": figures, "vpmm_check": check,
        "final_loss": losses[-1] if losses else None, "losses": losses,
        "ok": not problems, "problems": problems,
    }


def summarize_ranks(rows):
    """One summary line from the rank lines of a run (all ranks of one allocator)."""
    r0 = rows[0]
    steps = len(r0["losses"])
    mean_losses = [round(sum(r["losses"][i] for r in rows) / len(rows), 6)
                   for i in range(steps) if all(len(r["losses"]) > i for r in rows)]
    medians = [r["wall_ms"]["median"] for r in rows if r["wall_ms"]["median"] is not None]
    ev_medians = [r["step_ms"]["median"] for r in rows if r["step_ms"]["median"] is not None]
    return {
        "kind": "summary", "bench": r0["bench"], "allocator": r0["allocator"],
        "world": r0["world"], "gpu": r0["gpu"], "torch": r0["torch"], "model": r0["model"],
        "batch": r0["batch"], "len": r0["len"], "warmup": r0["warmup"], "steps": r0["steps"],
        "peak_used_mib": max(r["peak_used_mib"] for r in rows),
        "peak_used_mib_per_rank": [r["peak_used_mib"] for r in rows],
        "peak_over_start_mib": max(r["peak_over_start_mib"] for r in rows),
        "max_reserved_mib": max(r["max_reserved_mib"] for r in rows),
        "max_allocated_mib": max(r["max_allocated_mib"] for r in rows),
        "step_ms_median": max(medians) if medians else None,
        "step_ms_event_median": max(ev_medians) if ev_medians else None,
        "step_ms_max": max((r["wall_ms"]["max"] or 0) for r in rows),
        "step_ms_total": max(r["wall_ms"]["total"] for r in rows),
        "mean_losses": mean_losses,
        "final_loss": mean_losses[-1] if mean_losses else None,
        "ok": all(r["ok"] for r in rows),
        "problems": ["rank %d: %s" % (r["rank"], p) for r in rows for p in r["problems"]],
    }


def fmt(v, spec="%.1f"):
    return "-" if v is None else spec % v


def format_rank_table(rows, summary):
    s = summary
    lines = ["%s, %s, %d GPUs (%s), %s, batch %d, lengths %d-%d, %d + %d steps" % (
        s["bench"], s["allocator"], s["world"], s["gpu"], s["model"], s["batch"], s["len"][0],
        s["len"][1], s["warmup"], s["steps"]),
        "| rank | peak used (driver) | over start | max reserved | max allocated | "
        "step median / max (ms) | final loss |",
        "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| %d | %s MiB | %s MiB | %s MiB | %s MiB | %s / %s | %s |" % (
            r["rank"], fmt(r["peak_used_mib"], "%.0f"), fmt(r["peak_over_start_mib"], "%.0f"),
            fmt(r["max_reserved_mib"], "%.0f"), fmt(r["max_allocated_mib"], "%.0f"),
            fmt(r["wall_ms"]["median"], "%.2f"), fmt(r["wall_ms"]["max"], "%.2f"),
            fmt(r["final_loss"], "%.4f")))
    lines.append("%s%s" % ("OK" if s["ok"] else "FAILED: ", "; ".join(s["problems"])))
    return "\n".join(lines)


# ---- split -------------------------------------------------------------------------------------


def run_split(args):
    prepare_environment(args.allocator)
    torch = load_torch(args.allocator)
    if torch.cuda.device_count() < 2:
        raise SetupError("split needs 2 GPUs (%d visible)" % torch.cuda.device_count())
    import copy

    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    d0, d1 = torch.device("cuda", 0), torch.device("cuda", 1)
    res = {"kind": "check", "bench": "split", "allocator": args.allocator, "world": 2,
           "gpu": torch.cuda.get_device_name(d0), "torch": torch.__version__,
           **allocator_info(torch, args.allocator),
           "model": "gpt2 %dx%d" % (args.layers, args.embd), "steps": args.steps,
           "peer_access": [torch.cuda.can_device_access_peer(0, 1),
                           torch.cuda.can_device_access_peer(1, 0)]}
    problems = []
    # A tensor allocated on each GPU before any peer access is enabled: the peer kernels read
    # it later, so access granted afterwards must reach memory mapped before.
    early = [torch.arange(1 << 20, dtype=torch.float32, device=d) for d in (d0, d1)]

    torch.manual_seed(args.seed)
    ref = build_gpt(torch, args.layers, args.embd, args.heads, args.vocab, args.ctx, tie=False)
    split = copy.deepcopy(ref)
    ref.to(d0)
    half = args.layers // 2
    split.wte.to(d0)
    split.wpe.to(d0)
    for i, block in enumerate(split.blocks):
        block.to(d0 if i < half else d1)
    split.ln_f.to(d1)
    split.head.to(d1)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=args.lr)
    opt_split = torch.optim.SGD(split.parameters(), lr=args.lr)
    lens = seq_lengths(args.seed, args.steps, args.min_len, args.max_len)
    loss_diffs, losses = [], []
    with sdpa_kernel([SDPBackend.MATH]):
        for step, n in enumerate(lens):
            ids = tokens(torch, args.seed, 0, step, args.batch, n, args.vocab).to(d0)
            lr_ = gpt_forward(torch, ref, ids[:, :-1], ids[:, 1:])
            lr_.backward()
            opt_ref.step()
            opt_ref.zero_grad(set_to_none=True)
            ls = gpt_forward(torch, split, ids[:, :-1], ids[:, 1:], split_at=half, second=d1)
            ls.backward()
            opt_split.step()
            opt_split.zero_grad(set_to_none=True)
            a, b = lr_.item(), ls.item()
            losses.append([round(a, 6), round(b, 6)])
            loss_diffs.append(abs(a - b))
        param_diff = max(float((p.detach() - q.detach().to(p.device)).abs().max())
                         for p, q in zip(ref.parameters(), split.parameters()))
        ref.eval()
        split.eval()
        with torch.no_grad():
            ids = tokens(torch, args.seed, 0, 10**6, args.batch, args.max_len, args.vocab).to(d0)
            out_ref = gpt_forward(torch, ref, ids[:, :-1])
            out_split = gpt_forward(torch, split, ids[:, :-1], split_at=half, second=d1)
            logits_diff = float((out_ref - out_split.to(d0)).abs().max())
            del out_ref, out_split
    res.update({"losses": losses, "loss_max_abs_diff": max(loss_diffs),
                "param_max_abs_diff": param_diff, "logits_max_abs_diff": logits_diff})
    for name, v in (("loss", max(loss_diffs)), ("parameters", param_diff),
                    ("logits", logits_diff)):
        if not math.isfinite(v) or v > args.atol:
            problems.append("%s differ by %g (> %g)" % (name, v, args.atol))
    del ref, split, opt_ref, opt_split

    copies = cross_device_copies(torch, d0, d1)
    res["copies"] = copies
    problems += ["copy %s wrong" % k for k, ok in copies.items() if not ok]
    try:
        res["peer_kernels"] = peer_kernels(torch, d0, d1, early)
        problems += ["peer kernel %s wrong" % k for k, ok in res["peer_kernels"].items()
                     if not ok]
    except Exception as e:  # noqa: BLE001 - a check that cannot run is a failure
        res["peer_kernels"] = None
        problems.append("peer kernel check could not run: %s: %s" % (type(e).__name__, e))
    torch.cuda.synchronize(d0)
    torch.cuda.synchronize(d1)
    res["max_allocated_mib"] = [mib(torch.cuda.max_memory_allocated(d)) for d in (d0, d1)]
    checks = []
    for d in (0, 1):
        figures, check = vpmm_figures(args.allocator, d)
        res.setdefault("vpmm", []).append(figures)
        checks.append(check)
        if check:
            problems.append("vpmm_pool_check on cuda:%d: %d violations" % (d, check))
    res["vpmm_check"] = checks
    res["ok"], res["problems"] = not problems, problems
    emit(res, args.out)
    print(format_check(res), flush=True)
    return 0 if res["ok"] else 1


def cross_device_copies(torch, d0, d1):
    """Cross-device copy_ both ways: contiguous (memcpy), transposed source and strided
    destination (copy kernels through the peer mapping), with a dtype change; each checked
    on the host."""
    ok = {}
    g = torch.Generator().manual_seed(7)
    for src_dev, dst_dev in ((d0, d1), (d1, d0)):
        tag = "%d->%d" % (src_dev.index, dst_dev.index)
        host = torch.randn(1536, 1024, generator=g)
        a = host.to(src_dev)
        small = torch.randn(257, generator=g)
        b = torch.empty(1536, 1024, device=dst_dev)
        b.copy_(a)  # contiguous, 6 MiB
        c = torch.empty(257, device=dst_dev)
        c.copy_(small.to(src_dev))
        t = torch.empty(1024, 1536, device=dst_dev)
        t.copy_(a.t())  # non-contiguous source
        strided = torch.zeros(1536, 2048, device=dst_dev)[:, ::2]
        strided.copy_(a)  # non-contiguous destination
        half = torch.empty(1536, 1024, dtype=torch.float16, device=dst_dev)
        half.copy_(a)  # dtype change
        big = torch.empty(16 << 20, device=dst_dev)
        big_src = torch.arange(16 << 20, dtype=torch.float32, device=src_dev)
        big.copy_(big_src)  # 64 MiB
        torch.cuda.synchronize(src_dev)
        torch.cuda.synchronize(dst_dev)
        ok["contiguous " + tag] = torch.equal(b.cpu(), host)
        ok["small " + tag] = torch.equal(c.cpu(), small)
        ok["transposed source " + tag] = torch.equal(t.cpu(), host.t())
        ok["strided destination " + tag] = torch.equal(strided.cpu(), host)
        ok["to float16 " + tag] = torch.equal(half.cpu(), host.half())
        ok["64 MiB " + tag] = torch.equal(big.cpu(), torch.arange(16 << 20,
                                                                   dtype=torch.float32))
    return ok


PEER_KERNEL = r"""
extern "C" __global__ void peer_axpb(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i] + 1.0f;
}
"""


def peer_kernels(torch, d0, d1, early):
    """A kernel on each GPU reading the other GPU's memory (peer access, enabled by the
    copies before): a tensor allocated before peer access was enabled, and one after."""
    ok = {}
    for run_dev, peer_dev, old in ((d0, d1, early[1]), (d1, d0, early[0])):
        with torch.cuda.device(run_dev):
            kernel = torch.cuda._compile_kernel(PEER_KERNEL, "peer_axpb")
            for label, x in (("before", old), ("after", torch.randn(3 << 20, device=peer_dev))):
                n = x.numel()
                y = torch.empty(n, device=run_dev)
                torch.cuda.synchronize(peer_dev)
                kernel(grid=((n + 255) // 256, 1, 1), block=(256, 1, 1), args=[x, y, n])
                torch.cuda.synchronize(run_dev)
                ok["cuda:%d reads cuda:%d (allocated %s peer access)" % (
                    run_dev.index, peer_dev.index, label)] = torch.equal(
                    y.cpu(), 2.0 * x.cpu() + 1.0)
    return ok


def format_check(res):
    lines = ["%s, %s: %s" % (res["bench"], res["allocator"], "OK" if res["ok"] else "FAILED")]
    if res["bench"] == "split":
        lines.append("  max abs diff: loss %.3g, parameters %.3g, logits %.3g" % (
            res["loss_max_abs_diff"], res["param_max_abs_diff"], res["logits_max_abs_diff"]))
        for group in ("copies", "peer_kernels"):
            for k, v in (res.get(group) or {}).items():
                lines.append("  %-4s %s" % ("ok" if v else "BAD", k))
    else:
        for k, v in res.get("checks", {}).items():
            lines.append("  %-4s %s" % ("ok" if v else "BAD", k))
        lp = res.get("loop") or {}
        if lp:
            lines.append("  %d sends, %.3f ms each; descriptors parent %+d, child %+d; "
                         "device memory %+.0f MiB" % (lp.get("sends", 0), lp.get("ms_per_send", 0),
                                                      lp.get("parent_fd_growth", 0),
                                                      lp.get("child_fd_growth", 0),
                                                      lp.get("mem_growth_mib", 0)))
    for p in res["problems"]:
        lines.append("  problem: " + p)
    return "\n".join(lines)


# ---- ipc ---------------------------------------------------------------------------------------


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def ipc_child(allocator, conn):
    """The spawned child: picks the parent's allocator before CUDA starts, then serves the
    parent's requests until told to stop. Every failure is sent back, then exit 1."""
    try:
        torch = load_torch(allocator)
        import torch.multiprocessing  # noqa: F401 - registers the CUDA tensor reductions

        if allocator == "expandable" and "expandable_segments:True" not in os.environ.get(
                "PYTORCH_CUDA_ALLOC_CONF", ""):
            raise SetupError("the child did not inherit expandable_segments:True")
        state = {"held": [], "mine": []}
        conn.send(("ready", {"pid": os.getpid(), "fds": open_fds()}))
        while True:
            # One request at a time, in a function of its own: the tensors it received are
            # released when it returns, before the next request is read.
            if ipc_serve(torch, allocator, state, conn.recv(), conn):
                return
    except BaseException as e:  # noqa: BLE001 - reported to the parent, then exit 1
        try:
            conn.send(("error", "%s: %s\n%s" % (type(e).__name__, e, traceback.format_exc())))
        finally:
            sys.exit(1)


def ipc_serve(torch, allocator, state, msg, conn):
    """Serves one request of the parent; True after the last one ("exit")."""
    op = msg[0]
    if op == "write":  # write each tensor with its value
        for t, v in zip(msg[1], msg[2]):
            t.fill_(v)
        sync_all(torch)
        conn.send(("ok", None))
    elif op == "hold":  # the first of two sends of one tensor
        state["held"].append(msg[1])
        conn.send(("ok", None))
    elif op == "second":  # the second: must be the same memory
        first, second = state["held"].pop(), msg[1]
        first.fill_(3.0)
        sync_all(torch)
        alias = bool(second.eq(3.0).all().item())
        second.fill_(5.0)
        sync_all(torch)
        alias = alias and bool(first.eq(5.0).all().item())
        conn.send(("ok", {"alias": alias, "same_ptr": first.data_ptr() == second.data_ptr()}))
    elif op == "make":  # a tensor of the child's own, sent to the parent
        t = torch.full((msg[1],), msg[2], device=msg[3])
        sync_all(torch)
        state["mine"].append(t)
        conn.send(("tensor", t))
    elif op == "check_mine":
        sync_all(torch)
        conn.send(("ok", {"value_ok": bool(state["mine"][-1].eq(msg[1]).all().item())}))
    elif op == "drop_mine":
        state["mine"].clear()
        gc.collect()
        torch.cuda.ipc_collect()
        conn.send(("ok", None))
    elif op == "loop":  # read the first value, then add 1 to every element
        t = msg[2]
        v = t[0].item()
        t.add_(1.0)
        torch.cuda.current_stream(t.device).synchronize()
        conn.send(("ack", msg[1], v))
    elif op == "fds":
        gc.collect()
        torch.cuda.ipc_collect()
        conn.send(("fds", open_fds()))
    elif op == "exit":
        state["held"].clear()
        state["mine"].clear()
        gc.collect()
        torch.cuda.ipc_collect()
        figures = [vpmm_figures(allocator, d)[0] for d in range(torch.cuda.device_count())]
        conn.send(("bye", {"vpmm": figures}))
        return True
    else:
        raise ValueError("unknown request %r" % (op,))
    return False


def sync_all(torch):
    for d in range(torch.cuda.device_count()):
        torch.cuda.synchronize(d)


class ChildError(Exception):
    pass


def run_ipc(args):
    prepare_environment(args.allocator)
    torch = load_torch(args.allocator)
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    # A pipe, not a Queue: send() pickles (shares the CUDA memory) in the caller, so a tensor
    # that cannot be shared fails there and then instead of in a feeder thread.
    conn, child_conn = ctx.Pipe()
    child = ctx.Process(target=ipc_child, args=(args.allocator, child_conn), daemon=True)
    ngpu = torch.cuda.device_count()
    d0 = torch.device("cuda", 0)
    torch.zeros(1, device=d0)  # CUDA (and vpmm) up in the parent before the child starts
    child.start()

    def get(timeout=args.timeout):
        deadline = time.time() + timeout
        while not conn.poll(1.0):
            if not child.is_alive() and not conn.poll(0):
                raise ChildError("the child died (exit code %s)" % child.exitcode)
            if time.time() > deadline:
                raise ChildError("no answer from the child in %d s" % timeout)
        try:
            msg = conn.recv()
        except Exception as e:  # noqa: BLE001 - e.g. a shared tensor that cannot be opened
            raise ChildError("receiving from the child failed: %s: %s" % (
                type(e).__name__, e)) from e
        if msg[0] == "error":
            raise ChildError("the child failed: " + msg[1])
        return msg

    res = {"kind": "check", "bench": "ipc", "allocator": args.allocator, "world": 1,
           "gpus": ngpu, "gpu": torch.cuda.get_device_name(d0), "torch": torch.__version__,
           **allocator_info(torch, args.allocator), "checks": {}}
    checks, problems = res["checks"], []
    try:
        ready = get(timeout=max(args.timeout, 180))[1]
        res["child_pid"] = ready["pid"]
        ipc_basic_checks(torch, conn, get, ngpu, d0, checks, res)
        # 4. many sends, descriptors and device memory counted around them
        res["loop"] = ipc_loop(torch, args, conn, get, d0, checks)
        lp = res["loop"]
        if lp["parent_fd_growth"] > args.fd_slack:
            problems.append("the parent gained %d descriptors over %d sends (> %d)" % (
                lp["parent_fd_growth"], args.sends, args.fd_slack))
        if lp["child_fd_growth"] > args.fd_slack:
            problems.append("the child gained %d descriptors over %d sends (> %d)" % (
                lp["child_fd_growth"], args.sends, args.fd_slack))
        if lp["mem_growth_mib"] > args.mem_slack_mib:
            problems.append("device memory in use grew by %.0f MiB over %d sends (> %d)" % (
                lp["mem_growth_mib"], args.sends, args.mem_slack_mib))
        conn.send(("exit",))
        res["child_vpmm"] = get()[1]["vpmm"]
        child.join(60)
        if child.is_alive():
            problems.append("the child did not exit")
            child.kill()
        elif child.exitcode != 0:
            problems.append("the child exited with %s" % child.exitcode)
    except (ChildError, OSError) as e:  # OSError: the pipe broke (the child is gone)
        problems.append(str(e)[:4000])
        if child.is_alive():
            child.kill()
    problems += ["check failed: " + k for k, v in checks.items() if not v]
    gc.collect()
    torch.cuda.ipc_collect()
    figures, check = vpmm_figures(args.allocator, 0)
    res["vpmm"], res["vpmm_check"] = figures, check
    if check:
        problems.append("vpmm_pool_check: %d violations" % check)
    res["shm_files_left"] = len([f for f in os.listdir("/dev/shm")
                                 if f.startswith("torch_%d" % os.getpid())]) \
        if os.path.isdir("/dev/shm") else None
    res["ok"], res["problems"] = not problems, problems
    emit(res, args.out)
    print(format_check(res), flush=True)
    return 0 if res["ok"] else 1


def ipc_basic_checks(torch, conn, get, ngpu, d0, checks, res):
    """Steps 1-3 of `ipc`; its tensors are released when it returns."""
    # 1. the child writes tensors the parent made
    big = torch.zeros(1 << 20, device=d0)
    small = torch.zeros(1000, device=d0)
    base = torch.zeros(3 << 20, device=d0)
    view = base[1000:1000 + (1 << 20)]
    sent = [big, small, view]
    values = [1.5, 2.5, 3.5]
    if ngpu > 1:
        sent.append(torch.zeros(1 << 18, device=torch.device("cuda", 1)))
        values.append(4.5)
    conn.send(("write", sent, values))
    get()
    names = ["4 MiB tensor", "small tensor", "view at an offset", "tensor on cuda:1"]
    for name, t, v in zip(names, sent, values):
        checks["the child wrote the parent's " + name] = bool(t.eq(v).all().item())
    checks["memory around the view untouched"] = bool(
        base[:1000].eq(0).all().item() and base[1000 + (1 << 20):].eq(0).all().item())
    # 2. one tensor sent twice
    conn.send(("hold", big))
    get()
    conn.send(("second", big))
    info = get()[1]
    checks["a tensor sent twice is one memory in the child"] = info["alias"]
    res["sent_twice_same_ptr"] = info["same_ptr"]
    checks["the parent sees the child's last write"] = bool(big.eq(5.0).all().item())
    # 3. a tensor the child made
    conn.send(("make", 1 << 19, 7.0, "cuda:0"))
    theirs = get()[1]
    checks["the parent reads the child's tensor"] = bool(theirs.eq(7.0).all().item())
    theirs.add_(1.0)
    torch.cuda.synchronize()
    del theirs
    gc.collect()
    conn.send(("check_mine", 8.0))
    checks["the child sees the parent's write"] = get()[1]["value_ok"]
    conn.send(("drop_mine",))
    get()


def ipc_loop(torch, args, conn, get, d0, checks):
    sizes = (1024, 1 << 20, (3 << 20) + 1)  # 4 KiB, 4 MiB, 12 MiB + 4 bytes

    def settle():
        gc.collect()
        torch.cuda.ipc_collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        conn.send(("fds",))
        child_fds = get()[1]
        free, _ = torch.cuda.mem_get_info(d0)
        return open_fds(), child_fds, free

    for i in range(30):  # warm-up: the descriptor caches and the import paths come up
        t = torch.full((sizes[i % 3],), float(i), device=d0)
        conn.send(("loop", i, t))
        get()
        del t
    p0, c0, free0 = settle()
    bad_reads = bad_writes = 0
    t0 = time.perf_counter()
    for i in range(args.sends):
        t = torch.full((sizes[i % 3],), float(i), device=d0)
        conn.send(("loop", i, t))
        msg = get()
        if msg[1] != i or msg[2] != float(i):
            bad_reads += 1
        if i % 50 == 0:
            if not bool(t.eq(float(i) + 1.0).all().item()):
                bad_writes += 1
            torch.cuda.ipc_collect()
        del t
    elapsed = time.perf_counter() - t0
    p1, c1, free1 = settle()
    checks["the child read every sent tensor"] = bad_reads == 0
    checks["the parent saw the child's writes"] = bad_writes == 0
    return {"sends": args.sends, "seconds": round(elapsed, 2),
            "ms_per_send": round(elapsed * 1000.0 / args.sends, 3),
            "parent_fds": [p0, p1], "child_fds": [c0, c1],
            "parent_fd_growth": p1 - p0, "child_fd_growth": c1 - c0,
            "mem_growth_mib": round((free0 - free1) / MIB, 1)}


# ---- summary -----------------------------------------------------------------------------------


def read_records(paths):
    """Every JSON object line of the files (other lines skipped)."""
    recs = []
    for path in paths:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        recs.append(json.loads(line))
                    except ValueError:
                        continue
    return recs


def ratio(a, b):
    return None if a is None or not b else a / b


def summarize_records(recs, allocators=ALLOCATORS, expect=(), loss_tol=0.02):
    """The comparison tables (markdown) and the list of failures."""
    fails = []
    out = []
    summaries = {}
    for r in recs:
        if r.get("kind") == "summary":
            summaries[(r["bench"], r["world"], r["allocator"])] = r  # the last run counts
        elif r.get("kind") == "error":
            fails.append("%s, %s, %s GPUs, rank %s: %s" % (r.get("bench"), r.get("allocator"),
                                                         r.get("world"), r.get("rank"),
                                                         r.get("error", "")[:300]))
    runs = sorted({(b, w) for b, w, _ in summaries},
                  key=lambda k: (BENCHES.index(k[0]) if k[0] in BENCHES else 9, k[1]))
    if runs:
        out.append("| run | allocator | peak used per GPU (driver, max) | over start | ÷ native "
                   "| ÷ expandable | max reserved | max allocated | step median (ms) | ÷ native "
                   "| ÷ expandable | step max | total (ms) | final loss | max Δloss vs native |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for bench, world in runs:
        base = {a: summaries.get((bench, world, a)) for a in ("native", "expandable")}
        for alloc in allocators:
            s = summaries.get((bench, world, alloc))
            if s is None:
                continue
            dl = None
            if base["native"] is not None and alloc != "native":
                dl = loss_gap(s["mean_losses"], base["native"]["mean_losses"])
                if dl is None or dl > loss_tol:
                    fails.append("%s on %d GPUs: %s's losses differ from native's by %s "
                                 "(> %g)" % (bench, world, alloc, fmt(dl, "%.4g"), loss_tol))
            out.append("| %s, %d GPUs | %s | %s MiB | %s MiB | %s | %s | %s MiB | %s MiB | %s | "
                       "%s | %s | %s | %s | %s | %s |" % (
                           bench, world, alloc, fmt(s["peak_used_mib"], "%.0f"),
                           fmt(s["peak_over_start_mib"], "%.0f"),
                           fmt(ratio_of(s, base["native"], "peak_used_mib"), "%.3f"),
                           fmt(ratio_of(s, base["expandable"], "peak_used_mib"), "%.3f"),
                           fmt(s["max_reserved_mib"], "%.0f"), fmt(s["max_allocated_mib"], "%.0f"),
                           fmt(s["step_ms_median"], "%.2f"),
                           fmt(ratio_of(s, base["native"], "step_ms_median"), "%.3f"),
                           fmt(ratio_of(s, base["expandable"], "step_ms_median"), "%.3f"),
                           fmt(s["step_ms_max"], "%.2f"), fmt(s["step_ms_total"], "%.0f"),
                           fmt(s["final_loss"], "%.4f"), fmt(dl, "%.2g")))
            if not s["ok"]:
                fails.append("%s, %s, %d GPUs: %s" % (bench, alloc, world,
                                                      "; ".join(s["problems"])[:500]))
    for bench, world in runs:
        v = summaries.get((bench, world, "vpmm"))
        if v is None:
            continue
        parts = []
        for other in ("native", "expandable"):
            o = summaries.get((bench, world, other))
            if o is not None:
                parts.append("vpmm/%s: peak %s, step median %s" % (
                    other, fmt(ratio_of(v, o, "peak_used_mib"), "%.3f"),
                    fmt(ratio_of(v, o, "step_ms_median"), "%.3f")))
        if parts:
            out.append("%s on %d GPUs: %s" % (bench, world, "; ".join(parts)))
    checks = {}
    for r in recs:
        if r.get("kind") == "check":
            checks[(r["bench"], r["allocator"])] = r
    if checks:
        out.append("")
        out.append("| check | allocator | result | figures |")
        out.append("|---|---|---|---|")
        for bench in CHECKS:
            for alloc in allocators:
                r = checks.get((bench, alloc))
                if r is None:
                    continue
                out.append("| %s | %s | %s | %s |" % (bench, alloc, "pass" if r["ok"] else
                                                      "**FAIL**", check_figures(r)))
                if not r["ok"]:
                    fails.append("%s, %s: %s" % (bench, alloc, "; ".join(r["problems"])[:500]))
    for name, world in expect:
        for alloc in allocators:
            present = (summaries.get((name, world, alloc)) if world is not None
                       else checks.get((name, alloc)))
            if present is None:
                fails.append("missing: %s%s for %s" % (
                    name, "" if world is None else " on %d GPUs" % world, alloc))
    return "\n".join(out), fails


def ratio_of(s, base, key):
    return None if base is None else ratio(s.get(key), base.get(key))


def loss_gap(a, b):
    """Largest |a[i] - b[i]| over the steps both have (None when they share none)."""
    n = min(len(a or []), len(b or []))
    if n == 0:
        return None
    gaps = [abs(a[i] - b[i]) for i in range(n)]
    return float("inf") if any(not math.isfinite(g) for g in gaps) else max(gaps)


def check_figures(r):
    if r["bench"] == "split":
        return "max abs diff: loss %s, parameters %s, logits %s; %d copies, %d peer kernels" % (
            fmt(r.get("loss_max_abs_diff"), "%.2g"), fmt(r.get("param_max_abs_diff"), "%.2g"),
            fmt(r.get("logits_max_abs_diff"), "%.2g"), len(r.get("copies") or {}),
            len(r.get("peer_kernels") or {}))
    lp = r.get("loop") or {}
    return "%d/%d checks; %s sends at %s ms; descriptors parent %s, child %s; memory %s MiB" % (
        sum(1 for v in r.get("checks", {}).values() if v), len(r.get("checks", {})),
        lp.get("sends", "-"), fmt(lp.get("ms_per_send"), "%.3f"),
        fmt(lp.get("parent_fd_growth"), "%+d"), fmt(lp.get("child_fd_growth"), "%+d"),
        fmt(lp.get("mem_growth_mib"), "%+.0f"))


def run_summary(args):
    recs = read_records(args.files)
    text, fails = summarize_records(recs, args.allocators, args.expect, args.loss_tol)
    print(text if text else "(no results)")
    for f in fails:
        print("FAIL: " + f)
    print("summary: %d results, %d failures" % (len(recs), len(fails)))
    return 1 if fails else 0


def main(argv):
    args = parse_args(argv)
    run = {"ddp": run_distributed, "fsdp2": run_distributed, "split": run_split,
           "ipc": run_ipc, "summary": run_summary}[args.cmd]
    try:
        return run(args)
    except SetupError as e:
        log("cannot run: %s" % e)
        if args.cmd != "summary":
            emit({"kind": "error", "bench": args.cmd, "allocator": args.allocator,
                  "rank": os.environ.get("RANK"), "error": "setup: %s" % e}, args.out)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
