#!/usr/bin/env python3
"""train_and_graph.py — PyTorch on vpmm: train a transformers model, then capture and replay a
CUDA graph of an inference step; the same run on PyTorch's native caching allocator and on
expandable_segments for comparison.

One run (`--allocator vpmm|native|expandable`) does, in one process:
  1. picks the allocator before torch touches CUDA: vpmm through
     torch.cuda.memory.CUDAPluggableAllocator(libvpmm_torch.so, "vpmm_torch_alloc",
     "vpmm_torch_free") and change_current_allocator(); expandable by setting
     PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True before torch is imported; native with that
     variable removed;
  2. builds a GPT-2 from a GPT2Config with random weights (seeded; nothing is downloaded) and
     trains it for --steps AdamW steps on random token batches whose sequence length varies from
     step to step (seeded, the same in every run), timing every step between two
     torch.cuda.synchronize() calls;
  3. puts the model in eval mode, warms an inference step up on a side stream (as PyTorch's CUDA
     graph documentation asks), captures it with torch.cuda.graph on one static input shape,
     replays it --replays times with new input, and compares the replay's logits with an eager
     run of the same input (torch.allclose); then trains --train-after-capture more steps (the
     allocator keeps working around the captured graph's memory) and checks a replay again;
  4. samples torch.cuda.mem_get_info() after every step and around the capture and replays: the
     peak device memory used is the free memory before the model was built minus the least free
     memory seen (so the CUDA context is not counted; kernels loaded lazily are, equally for all);
  5. prints JSON lines on stdout (progress goes to stderr): {"kind": "result", ...} with the peak,
     the allocator's own peaks (torch.cuda.max_memory_reserved/_allocated, or vpmm's
     peak_mapped_bytes/peak_live_bytes: a pluggable allocator has no torch.cuda.memory_stats), the
     median step time, the eager and graph inference times and whether the outputs matched; with
     vpmm also {"kind": "vpmm_stats", ...} (the pool's statistics, through ctypes) and the graph
     pools vpmm created for the capture and returned after it.
transformers releases that read a device value to detect packed sequences even during a capture
get that check skipped while capturing (guard_packed_sequence_check; the result says whether).
Exit status: 0 when everything ran and matched, 1 on a mismatch or a failed check (the result line
says which), 2 when the run could not start (no GPU, no torch/transformers, no libvpmm_torch.so).

`--compare` runs the three allocators one after another, each in its own subprocess with the same
arguments, then prints their JSON lines and a markdown table (bench/RESULTS.md); `--out FILE`
also writes the JSON lines there.

The library is --lib, else $VPMM_TORCH_LIB, else build/integrations/libvpmm_torch.so under the
repository root (cmake --build build --target vpmm_torch). See integrations/pytorch/README.md.
"""
import argparse
import ctypes
import json
import os
import random
import statistics
import subprocess
import sys
import time

ALLOCATORS = ("vpmm", "native", "expandable")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_LIB = os.path.join(REPO, "build", "integrations", "libvpmm_torch.so")
MIB = 1 << 20

# The options a --compare run hands to each of its runs (dest -> flag).
FORWARDED = {
    "lib": "--lib", "device": "--device", "steps": "--steps", "warmup": "--warmup",
    "batch": "--batch", "min_len": "--min-len", "max_len": "--max-len", "layers": "--layers",
    "embd": "--embd", "heads": "--heads", "vocab": "--vocab", "positions": "--positions",
    "attn": "--attn", "dtype": "--dtype", "seed": "--seed", "graph_batch": "--graph-batch",
    "graph_len": "--graph-len", "replays": "--replays",
    "train_after_capture": "--train-after-capture", "rtol": "--rtol", "atol": "--atol",
}


class SetupError(Exception):
    """The run cannot start (exit status 2)."""


def log(msg):
    print(f"[train_and_graph] {msg}", file=sys.stderr, flush=True)


def emit(obj):
    print(json.dumps(obj, sort_keys=False), flush=True)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--allocator", choices=ALLOCATORS, default="vpmm",
                   help="allocator of this run (default vpmm)")
    p.add_argument("--compare", action="store_true",
                   help="run every allocator of --allocators in its own subprocess, print a table")
    p.add_argument("--allocators", default=",".join(ALLOCATORS),
                   help="for --compare: comma-separated list (default vpmm,native,expandable)")
    p.add_argument("--out", help="for --compare: also write the JSON lines to this file")
    p.add_argument("--lib", default=os.environ.get("VPMM_TORCH_LIB", DEFAULT_LIB),
                   help="path of libvpmm_torch.so (default $VPMM_TORCH_LIB, else %(default)s)")
    p.add_argument("--device", type=int, default=0, help="CUDA device ordinal (default 0)")
    p.add_argument("--steps", type=int, default=200, help="training steps (default 200)")
    p.add_argument("--warmup", type=int, default=10,
                   help="first steps left out of the step-time statistics (default 10)")
    p.add_argument("--batch", type=int, default=8, help="training batch size (default 8)")
    p.add_argument("--min-len", type=int, default=64, help="shortest sequence (default 64)")
    p.add_argument("--max-len", type=int, default=512, help="longest sequence (default 512)")
    p.add_argument("--layers", type=int, default=6, help="GPT-2 layers (default 6)")
    p.add_argument("--embd", type=int, default=512, help="GPT-2 width (default 512)")
    p.add_argument("--heads", type=int, default=8, help="attention heads (default 8)")
    p.add_argument("--vocab", type=int, default=50257, help="vocabulary size (default 50257)")
    p.add_argument("--positions", type=int, default=1024, help="context length (default 1024)")
    p.add_argument("--attn", choices=("auto", "sdpa", "eager"), default="auto",
                   help="transformers attention implementation (default: its own choice)")
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32",
                   help="fp32, or bf16 autocast for training and inference (default fp32)")
    p.add_argument("--seed", type=int, default=1234, help="seed of weights and data")
    p.add_argument("--graph-batch", type=int, default=8, help="batch of the captured step")
    p.add_argument("--graph-len", type=int, default=256,
                   help="sequence length of the captured step (default 256)")
    p.add_argument("--replays", type=int, default=100, help="graph replays timed (default 100)")
    p.add_argument("--train-after-capture", type=int, default=20,
                   help="training steps between the capture and the second replay check")
    p.add_argument("--rtol", type=float, default=None,
                   help="torch.allclose rtol (default 1e-3 for fp32, 2e-2 for bf16)")
    p.add_argument("--atol", type=float, default=None,
                   help="torch.allclose atol (default 1e-3 for fp32, 2e-2 for bf16)")
    p.add_argument("--dump", help="vpmm only: write vpmm's region table to this file at the end")
    args = p.parse_args(argv)
    if args.min_len < 2 or args.max_len < args.min_len or args.max_len > args.positions:
        p.error("need 2 <= --min-len <= --max-len <= --positions")
    if args.graph_len < 1 or args.graph_len > args.positions:
        p.error("need 1 <= --graph-len <= --positions")
    if args.steps < 1 or args.warmup < 0 or args.warmup >= args.steps:
        p.error("need --steps >= 1 and 0 <= --warmup < --steps")
    if args.replays < 1:
        p.error("need --replays >= 1")
    tol = 1e-3 if args.dtype == "fp32" else 2e-2
    args.rtol = tol if args.rtol is None else args.rtol
    args.atol = tol if args.atol is None else args.atol
    return args


# ---- one run ---------------------------------------------------------------------------------


def prepare_environment(allocator):
    """Sets the allocator's environment; must run before torch is imported."""
    if "torch" in sys.modules:
        raise SetupError("torch was imported before the allocator was chosen")
    for var in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        if var in os.environ:
            log(f"ignoring {var}={os.environ[var]!r}: this run sets its own allocator")
            del os.environ[var]
    if allocator == "expandable":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    # Nothing may be downloaded: the model is built from a config.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


class Vpmm:
    """libvpmm_torch.so: installs it as PyTorch's allocator, reads its statistics."""

    def __init__(self, torch, path, device):
        path = os.path.abspath(path)
        if not os.path.isfile(path):
            raise SetupError(
                f"{path} not found: build it with `cmake -S . -B build && cmake --build build "
                f"--target vpmm_torch` in the repository, or pass --lib / set VPMM_TORCH_LIB")
        self.device = device
        # The same path as CUDAPluggableAllocator's own CDLL: dlopen gives the same instance.
        self.lib = ctypes.CDLL(path)
        lib = self.lib
        lib.vpmm_torch_failures.restype = ctypes.c_ulonglong
        lib.vpmm_torch_failures.argtypes = []
        lib.vpmm_torch_first_error.restype = ctypes.c_char_p
        lib.vpmm_torch_first_error.argtypes = []
        lib.vpmm_torch_stats_json.restype = ctypes.c_long
        lib.vpmm_torch_stats_json.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
        lib.vpmm_torch_dump.restype = ctypes.c_int
        lib.vpmm_torch_dump.argtypes = [ctypes.c_int, ctypes.c_char_p]
        lib.vpmm_torch_check.restype = ctypes.c_long
        lib.vpmm_torch_check.argtypes = [ctypes.c_int]
        try:
            self.allocator = torch.cuda.memory.CUDAPluggableAllocator(
                path, "vpmm_torch_alloc", "vpmm_torch_free")
            torch.cuda.memory.change_current_allocator(self.allocator)
        except (RuntimeError, AttributeError, OSError) as e:
            raise SetupError(f"could not make vpmm PyTorch's allocator: {e}") from e
        self.path = path

    def stats(self):
        """vpmm's statistics of the device's pool (a dict), or None before its first allocation."""
        buf = ctypes.create_string_buffer(4096)
        n = self.lib.vpmm_torch_stats_json(self.device, buf, len(buf))
        if n < 0:
            return None
        if n >= len(buf):
            buf = ctypes.create_string_buffer(n + 1)
            n = self.lib.vpmm_torch_stats_json(self.device, buf, len(buf))
        return json.loads(buf.value.decode())

    def failures(self):
        return int(self.lib.vpmm_torch_failures())

    def first_error(self):
        return self.lib.vpmm_torch_first_error().decode(errors="replace")

    def raise_on_failure(self, where):
        if self.failures():
            raise RuntimeError(f"vpmm failed {self.failures()} time(s) by {where}; first: "
                               f"{self.first_error()}")

    def check(self):
        return int(self.lib.vpmm_torch_check(self.device))

    def dump(self, path):
        return self.lib.vpmm_torch_dump(self.device, path.encode())


class MemTracker:
    """The least free device memory seen (torch.cuda.mem_get_info), against a baseline."""

    def __init__(self, torch, device):
        self.torch, self.device = torch, device
        self.free0, self.total = torch.cuda.mem_get_info(device)
        self.min_free, self.min_at = self.free0, "baseline"

    def sample(self, where):
        free, _ = self.torch.cuda.mem_get_info(self.device)
        if free < self.min_free:
            self.min_free, self.min_at = free, where
        return self.free0 - free

    def peak(self):
        return self.free0 - self.min_free


def guard_packed_sequence_check(torch, transformers):
    """Keeps transformers from synchronising inside the capture; True if it had to.

    Some transformers releases test position_ids for packed sequences with a host read
    (`(mask[:, -1] == 0).all()` in masking_utils.find_packed_sequence_indices) and skip it only
    under torch.compile/jit, not during a CUDA stream capture, which that read would invalidate.
    Releases whose is_tracing() knows about captures (utils.import_utils.is_cuda_stream_capturing)
    need nothing. Otherwise the check answers "not packed" while a capture is in progress, which
    is true of every input here (plain positions 0..n-1).
    """
    import inspect
    try:
        from transformers.utils import import_utils
        if hasattr(import_utils, "is_cuda_stream_capturing"):
            return False
        from transformers import masking_utils
        original = masking_utils.find_packed_sequence_indices
        if ".all()" not in inspect.getsource(original):
            return False  # no host read: nothing to guard
    except (ImportError, AttributeError, OSError, TypeError):
        return False

    def find_packed_sequence_indices(position_ids):
        if torch.cuda.is_current_stream_capturing():
            return None
        return original(position_ids)

    masking_utils.find_packed_sequence_indices = find_packed_sequence_indices
    return True


def capture_hint(msg):
    """What a capture failure usually means, for the error message."""
    if "createOrIncrefPool" in msg:
        return (" [this PyTorch's CUDAGraph::capture_begin creates its private pool through the "
                "allocator (c10::cuda::MemPool), which CUDAPluggableAllocator refuses; releases "
                "whose capture_begin takes MemPool::graph_pool_handle(false) do not]")
    if "capturing" in msg or ("capture" in msg and "invalidated" in msg):
        return (" [something synchronised or queried the device inside the capture: see the "
                "traceback for the model code that did]")
    return ""


def percentile(sorted_vals, q):
    i = min(len(sorted_vals) - 1, max(0, round(q * (len(sorted_vals) - 1))))
    return sorted_vals[i]


def run_one(args):
    result = {"kind": "result", "allocator": args.allocator, "ok": False}
    prepare_environment(args.allocator)
    result["alloc_conf"] = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    try:
        import torch
    except ImportError as e:
        raise SetupError(f"cannot import torch: {e}") from e

    vp = None
    if args.allocator == "vpmm":  # before anything initialises CUDA
        vp = Vpmm(torch, args.lib, args.device)
        result["lib"] = vp.path
    if not torch.cuda.is_available():
        raise SetupError("no CUDA device visible to PyTorch")
    torch.cuda.set_device(args.device)
    dev = torch.device("cuda", args.device)
    torch.cuda.init()
    mem = MemTracker(torch, args.device)
    try:
        import transformers
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError as e:
        raise SetupError(f"cannot import transformers: {e}") from e

    result.update({
        "gpu": torch.cuda.get_device_name(args.device), "torch": torch.__version__,
        "cuda": torch.version.cuda, "transformers": transformers.__version__,
        "total_bytes": mem.total, "baseline_free_bytes": mem.free0,
    })
    result["transformers_capture_guard"] = guard_packed_sequence_check(torch, transformers)
    try:
        result["allocator_backend"] = torch.cuda.get_allocator_backend()
    except Exception as e:  # noqa: BLE001 — informative only
        result["allocator_backend"] = f"? ({e})"
    try:
        _run(torch, GPT2Config, GPT2LMHeadModel, args, dev, mem, vp, result)
    except Exception as e:  # noqa: BLE001 — reported in the result line, exit status 1
        msg = f"{type(e).__name__}: {e}"
        if vp is not None and vp.failures():
            msg += f" [vpmm: {vp.failures()} failure(s); first: {vp.first_error()}]"
        result["error"] = msg
        log(f"FAILED: {msg}")
    result["peak_used_bytes"] = mem.peak()
    result["peak_used_mib"] = round(mem.peak() / MIB, 1)
    result["peak_seen_at"] = mem.min_at
    if vp is not None:
        st = vp.stats()
        if st is not None:
            emit({"kind": "vpmm_stats", **st})
    emit(result)
    return 0 if result["ok"] else 1


def _run(torch, GPT2Config, GPT2LMHeadModel, args, dev, mem, vp, result):
    import contextlib

    def autocast():
        if args.dtype == "bf16":  # cache off: the documented setting for CUDA graphs
            return torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False)
        return contextlib.nullcontext()

    if vp is not None:
        probe = torch.empty(1 << 20, dtype=torch.uint8, device=dev)
        st = vp.stats()
        del probe
        if st is None or st["mallocs"] < 1:
            raise RuntimeError("PyTorch's allocations do not reach vpmm "
                               "(was CUDA initialised before change_current_allocator?)")
        result["vpmm_backend"] = st["backend"]

    # ---- the model: random weights, the same in every run --------------------------------
    torch.manual_seed(args.seed)
    cfg_kw = dict(vocab_size=args.vocab, n_positions=args.positions, n_embd=args.embd,
                  n_layer=args.layers, n_head=args.heads)
    if args.attn != "auto":
        cfg_kw["attn_implementation"] = args.attn
    model = GPT2LMHeadModel(GPT2Config(**cfg_kw)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    result["model"] = {
        "name": "gpt2", "layers": args.layers, "embd": args.embd, "heads": args.heads,
        "vocab": args.vocab, "params": sum(p.numel() for p in model.parameters()),
        "attn": getattr(model.config, "_attn_implementation", args.attn), "dtype": args.dtype,
    }
    result["train"] = {"steps": args.steps, "batch": args.batch, "min_len": args.min_len,
                       "max_len": args.max_len, "warmup": args.warmup}
    mem.sample("model")

    rng = random.Random(args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    def batch_cpu(b, length):
        return torch.randint(0, args.vocab, (b, length), generator=gen)

    def train_steps(n, tag, times=None):
        model.train()
        for i in range(n):
            length = rng.randint(args.min_len, args.max_len)
            x_cpu = batch_cpu(args.batch, length)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            x = x_cpu.to(dev)
            with autocast():
                loss = model(input_ids=x, labels=x, use_cache=False).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            del x
            torch.cuda.synchronize()
            dt = (time.perf_counter() - t0) * 1e3
            used = mem.sample(f"{tag} step {i}")
            if vp is not None:
                vp.raise_on_failure(f"{tag} step {i}")
            if times is not None:
                times.append(dt)
            if i % 50 == 0 or i == n - 1:
                log(f"{args.allocator}: {tag} step {i}/{n} len {length} loss {loss.item():.3f} "
                    f"{dt:.1f} ms, device memory used {used / MIB:.0f} MiB")

    # ---- training on variable sequence lengths ---------------------------------------------
    times = []
    train_steps(args.steps, "train", times)
    timed = sorted(times[args.warmup:])
    result["train"].update({
        "median_step_ms": round(statistics.median(timed), 3),
        "p10_step_ms": round(percentile(timed, 0.10), 3),
        "p90_step_ms": round(percentile(timed, 0.90), 3),
        "mean_step_ms": round(statistics.fmean(timed), 3),
        "total_s": round(sum(times) / 1e3, 3),
    })
    result["peak_used_train_bytes"] = mem.peak()

    # ---- an inference step, eager, then captured and replayed ------------------------------
    model.eval()
    static_input = batch_cpu(args.graph_batch, args.graph_len).to(dev)
    inputs = [batch_cpu(args.graph_batch, args.graph_len).to(dev) for _ in range(2)]

    def infer(x):
        with autocast():
            return model(input_ids=x, use_cache=False).logits

    graph = {"batch": args.graph_batch, "len": args.graph_len, "replays": args.replays}
    result["graph"] = graph
    with torch.no_grad():
        # Warm-up on a side stream, as torch.cuda.graph's documentation asks.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                infer(static_input)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        # Eager inference time, the reference for the replay time.
        t0 = time.perf_counter()
        for _ in range(args.replays):
            infer(static_input)
        torch.cuda.synchronize()
        graph["eager_ms"] = round((time.perf_counter() - t0) * 1e3 / args.replays, 4)
        mem.sample("eager inference")

        before = vp.stats() if vp is not None else None
        g = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(g):
                static_out = infer(static_input)
            torch.cuda.synchronize()
        except RuntimeError as e:
            raise RuntimeError(f"torch.cuda.graph capture failed: {e}{capture_hint(str(e))}") from e
        mem.sample("capture")
        if vp is not None:
            vp.raise_on_failure("the capture")
            after = vp.stats()
            graph["vpmm_graph_pools_created"] = after["graph_pools"] - before["graph_pools"]
            graph["vpmm_graph_pool_mapped_bytes"] = after["private_mapped_bytes"]
            graph["vpmm_graph_pool_live_bytes"] = after["private_live_bytes"]
            if graph["vpmm_graph_pools_created"] < 1:
                raise RuntimeError("the capture was not served by a vpmm graph pool")

        def check(tag, x):
            static_input.copy_(x)
            g.replay()
            torch.cuda.synchronize()
            got = static_out.float().clone()
            want = infer(static_input).float()
            torch.cuda.synchronize()
            mem.sample(f"check {tag}")
            # The eager run's allocations must not have touched the graph's output either.
            kept = bool(torch.equal(static_out.float(), got))
            ok = bool(torch.allclose(got, want, rtol=args.rtol, atol=args.atol)) and kept
            diff = float((got - want).abs().max())
            log(f"{args.allocator}: graph output {tag}: {'matches' if ok else 'DIFFERS'} "
                f"(max abs diff {diff:.3g}, rtol {args.rtol}, atol {args.atol}"
                f"{'' if kept else '; CHANGED by the eager run'})")
            return ok, diff

        static_input.copy_(inputs[0])
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.replays):
            g.replay()
        torch.cuda.synchronize()
        graph["replay_ms"] = round((time.perf_counter() - t0) * 1e3 / args.replays, 4)
        mem.sample("replays")
        graph["match"], graph["max_abs_diff"] = check("after capture", inputs[0])

    # ---- more training around the captured graph, then the graph again ---------------------
    if args.train_after_capture > 0:
        train_steps(args.train_after_capture, "after capture")
        model.eval()
        with torch.no_grad():
            ok, diff = check("after more training", inputs[1])
        graph["match_after_training"], graph["max_abs_diff_after_training"] = ok, diff
    else:
        graph["match_after_training"] = None

    # ---- the allocator's own figures ------------------------------------------------------
    if vp is None:
        result["peak_reserved_bytes"] = torch.cuda.max_memory_reserved(dev)
        result["peak_allocated_bytes"] = torch.cuda.max_memory_allocated(dev)
        result["peak_source"] = "torch.cuda.max_memory_reserved / max_memory_allocated"
        try:
            segs = torch.cuda.memory_snapshot()
            result["expandable_segments_seen"] = any(s.get("is_expandable") for s in segs)
        except Exception:  # noqa: BLE001 — informative only
            pass
    else:
        st = vp.stats()
        result["peak_reserved_bytes"] = st["peak_mapped_bytes"]
        result["peak_allocated_bytes"] = st["peak_live_bytes"]
        result["peak_source"] = "vpmm peak_mapped_bytes / peak_live_bytes"
    result["peak_reserved_mib"] = round(result["peak_reserved_bytes"] / MIB, 1)
    result["peak_allocated_mib"] = round(result["peak_allocated_bytes"] / MIB, 1)

    # ---- the graph goes: vpmm's graph pool returns to the shared pool ----------------------
    del g, static_out
    torch.cuda.synchronize()
    ok = graph["match"] and graph["match_after_training"] is not False
    if vp is not None:
        t0 = time.perf_counter()
        pools = vp.stats()["graph_pools"]
        while pools > before["graph_pools"] and time.perf_counter() - t0 < 2.0:
            time.sleep(0.001)  # CUDA runs the graph's user-object destructor on its own thread
            pools = vp.stats()["graph_pools"]
        graph["vpmm_graph_pools_after_release"] = pools
        graph["vpmm_graph_pool_release_ms"] = round((time.perf_counter() - t0) * 1e3, 1)
        if pools > before["graph_pools"]:
            log("warning: vpmm's graph pool was not returned within 2 s of the graph's end")
        violations = vp.check()
        result["vpmm_invariant_violations"] = violations
        result["vpmm_failures"] = vp.failures()
        if args.dump:
            vp.dump(args.dump)
        if violations != 0:
            log(f"vpmm_pool_check found {violations} violated invariant(s) (listed above)")
            ok = False
        if vp.failures():
            ok = False
    result["ok"] = bool(ok)


# ---- --compare: the three allocators, one subprocess each, one table --------------------------


def fmt(v, nd=1):
    return "—" if v is None else f"{v:.{nd}f}"


def table(results):
    first = next((r for r in results if "gpu" in r), {})
    m = first.get("model", {})
    t = first.get("train", {})
    g = first.get("graph", {})
    lines = [
        f"GPU {first.get('gpu', '?')}, torch {first.get('torch', '?')} (CUDA "
        f"{first.get('cuda', '?')}), transformers {first.get('transformers', '?')}; GPT-2 "
        f"{m.get('layers')} layers × {m.get('embd')} ({m.get('params', 0) / 1e6:.1f} M params, "
        f"{m.get('attn')}, {m.get('dtype')}), AdamW, {t.get('steps')} steps of batch "
        f"{t.get('batch')} × {t.get('min_len')}–{t.get('max_len')} tokens; graph: inference "
        f"{g.get('batch')} × {g.get('len')}, {g.get('replays')} replays.",
        "",
        "| allocator | peak device memory used (MiB) | ÷ native | peak reserved / mapped (MiB) "
        "| peak allocated / live (MiB) | median step (ms) | p90 step (ms) | eager inference (ms) "
        "| graph replay (ms) | graph output matches |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    native = next((r.get("peak_used_mib") for r in results
                   if r.get("allocator") == "native" and r.get("ok")), None)
    for r in results:
        tr, gr = r.get("train", {}), r.get("graph", {})
        ratio = (f"{r['peak_used_mib'] / native:.3f}"
                 if native and r.get("peak_used_mib") and "train" in r else "—")
        match = gr.get("match")
        if match is not None and gr.get("match_after_training") is not None:
            match = match and gr["match_after_training"]
        status = ("yes" if match else "NO") if match is not None else "—"
        if r.get("error"):
            status = "error: " + r["error"][:80].replace("|", "\\|")
        name = r.get("allocator", "?")
        if name == "expandable":
            name = "expandable_segments"
        lines.append(
            f"| {name} | {fmt(r.get('peak_used_mib'))} | {ratio} | "
            f"{fmt(r.get('peak_reserved_mib'))} | {fmt(r.get('peak_allocated_mib'))} | "
            f"{fmt(tr.get('median_step_ms'), 2)} | {fmt(tr.get('p90_step_ms'), 2)} | "
            f"{fmt(gr.get('eager_ms'), 3)} | {fmt(gr.get('replay_ms'), 3)} | {status} |")
    vp = next((r for r in results if r.get("allocator") == "vpmm" and "graph" in r), None)
    if vp is not None and "vpmm_graph_pool_mapped_bytes" in vp["graph"]:
        gr = vp["graph"]
        lines += ["", f"vpmm: the capture was served by {gr['vpmm_graph_pools_created']} graph "
                  f"pool(s) mapping {gr['vpmm_graph_pool_mapped_bytes'] / MIB:.1f} MiB; after the "
                  f"graph was destroyed {gr.get('vpmm_graph_pools_after_release', '?')} remained "
                  f"({gr.get('vpmm_graph_pool_release_ms', '?')} ms); invariant violations: "
                  f"{vp.get('vpmm_invariant_violations', '?')}."]
    return "\n".join(lines)


def compare(args):
    names = [a.strip() for a in args.allocators.split(",") if a.strip()]
    bad = [a for a in names if a not in ALLOCATORS]
    if bad or not names:
        print(f"--allocators: unknown {bad}; choose from {', '.join(ALLOCATORS)}", file=sys.stderr)
        return 2
    fwd = []
    for dest, flag in FORWARDED.items():
        fwd += [flag, str(getattr(args, dest))]
    results, lines, status = [], [], 0
    for name in names:
        cmd = [sys.executable, os.path.abspath(__file__), "--allocator", name] + fwd
        if args.dump and name == "vpmm":
            cmd += ["--dump", args.dump]
        log(f"--- {name}: {' '.join(cmd)}")
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
        got = None
        for line in proc.stdout.splitlines():
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            lines.append(line)
            if obj.get("kind") == "result":
                got = obj
        if got is None:
            got = {"kind": "result", "allocator": name, "ok": False,
                   "error": f"exit status {proc.returncode}, no result line"}
            lines.append(json.dumps(got))
        status = max(status, proc.returncode or (0 if got.get("ok") else 1))
        results.append(got)
    for line in lines:
        print(line)
    print()
    print(table(results))
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    return status


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.compare:
        return compare(args)
    try:
        return run_one(args)
    except SetupError as e:
        log(f"cannot run: {e}")
        emit({"kind": "result", "allocator": args.allocator, "ok": False, "error": str(e)})
        return 2


if __name__ == "__main__":
    sys.exit(main())
