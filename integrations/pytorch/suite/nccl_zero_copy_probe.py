#!/usr/bin/env python3
"""nccl_zero_copy_probe.py — whether NCCL's zero-copy use of registered buffers is safe on an
allocator's memory, on two GPUs: the question behind the hang of test_c10d_ops_nccl.py's
test_alltoall_ops_with_cudafree_race on vpmm (integrations/pytorch/INTERFACE.md §10.3).

NCCL 2.28 uses a registered buffer of a send/recv for zero copy only if *both* sides registered
theirs ("We require users registering buffers on both sides", src/enqueue.cc): one side zero-copy
and the other not is a transfer that never completes. It registers a buffer only inside one
physical handle (cuMemGetAddressRange's mapping), so on memory made of several handles — vpmm's,
PyTorch's expandable segments — whether a slice is registered depends on where it falls, and two
ranks' layouts differ. And when a collective is captured in a CUDA graph, NCCL registers the
buffer's first handle only (NVIDIA/nccl#1820): the peer imports that handle, and the buffer's rest
lies outside the import.

Each scenario runs in two fresh spawned ranks (NCCL reads its settings once per process), with
NCCL's registration log (NCCL_DEBUG_SUBSYS=REG) counted afterwards:

  eager-a2a        all_to_all_single of 1 MiB chunks, TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1
                   (every segment registered), empty_cache() after each launch (as the PyTorch
                   test); the layouts are skewed on purpose: rank 1's chunks each lie inside one
                   2 MiB-aligned window, rank 0's inputs and outputs start 0.5 MiB into one, so
                   its chunk 1 crosses a window's end — each transfer has one registrable side;
  graph-a2a        all_to_all_single of 3 MiB chunks (each over two 2 MiB windows) captured in a
                   CUDA graph and replayed with new values (no hook: NCCL's graph registration);
  graph-allreduce  all_reduce of 9 MiB (five windows) captured and replayed with new values.

Every result is checked value by value. A scenario whose ranks say nothing within --timeout
seconds is a "hang" (both ranks are killed). One JSON line per scenario (--out FILE appends them
too), then a table.

    python3 integrations/pytorch/suite/nccl_zero_copy_probe.py --allocator vpmm
    python3 integrations/pytorch/suite/nccl_zero_copy_probe.py --allocator vpmm --zero-copy
    python3 integrations/pytorch/suite/nccl_zero_copy_probe.py --allocator expandable

--allocator vpmm: vpmm.torch.enable() in each rank (libvpmm_torch_backend.so from
$VPMM_TORCH_BACKEND or the build tree), with its NCCL settings (vpmm.torch.nccl_settings());
--zero-copy sets VPMM_TORCH_NCCL_ZERO_COPY=1 (NCCL left as it is configured). native: PyTorch's
caching allocator; expandable: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True. NVLink
multicast stays off. Exit status: 0 when every scenario passed, 1 when one did not, 2 when the
probe could not run (no PyTorch, fewer than two GPUs).
"""
import argparse
import json
import os
import queue
import shutil
import socket
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.abspath(os.path.join(HERE, os.pardir))
MiB = 1 << 20
WINDOW = 2 * MiB  # vpmm's handle (VPMM_HANDLE_PAGES=1), and the granule NCCL maps
SCENARIOS = ("eager-a2a", "graph-a2a", "graph-allreduce")
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                "NVSHMEM_DISABLE_NVLS": "1"}


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- one rank -----------------------------------------------------------------------------------


def windowed(torch, dev, nbytes, skew, keep):
    """A float32 view of nbytes starting skew bytes after a 2 MiB-aligned address, inside a
    tensor of its own (kept alive in keep)."""
    big = torch.empty(nbytes + 2 * WINDOW, dtype=torch.uint8, device=dev)
    keep.append(big)
    start = (-big.data_ptr()) % WINDOW + skew
    return big[start:start + nbytes].view(torch.float32)


def check_chunks(torch, out, world, n, want):
    for j in range(world):
        got = out[j * n:(j + 1) * n]
        if not bool((got == want(j)).all()):
            bad = got[got != want(j)]
            raise AssertionError("chunk %d: %d of %d values wrong (first %r, want %r)"
                                 % (j, bad.numel(), n, float(bad[0]), float(want(j))))


def eager_a2a(torch, dist, dev, rank, world):
    keep = []
    chunk = 1 * MiB
    skew = MiB // 2 if rank == 0 else 0
    inp = windowed(torch, dev, world * chunk, skew, keep)
    out = windowed(torch, dev, world * chunk, skew, keep)
    n = chunk // 4
    layout = []
    for j in range(world):
        a = inp[j * n:(j + 1) * n].data_ptr()
        layout.append(a // WINDOW == (a + chunk - 1) // WINDOW)
    for it in range(5):
        race = [torch.empty(10 ** (3 + i) // 4 * 4, dtype=torch.uint8, device=dev)
                for i in range(5)]
        for j in range(world):
            inp[j * n:(j + 1) * n].fill_(float(100 * it + 10 * rank + j))
        out.fill_(-1.0)
        del race
        work = dist.all_to_all_single(out, inp, async_op=True)
        torch.cuda.empty_cache()  # segments go while the transfer runs (the PyTorch test)
        work.wait()
        torch.cuda.synchronize(dev)
        check_chunks(torch, out, world, n, lambda j, it=it: float(100 * it + 10 * j + rank))
    return {"input_chunks_in_one_window": layout}


def captured(torch, dev, body):
    """body() warmed up on a side stream, then captured; returns the graph."""
    side = torch.cuda.Stream(dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):
        body()
    torch.cuda.current_stream(dev).wait_stream(side)
    torch.cuda.synchronize(dev)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        body()
    torch.cuda.synchronize(dev)
    return g


def graph_a2a(torch, dist, dev, rank, world):
    keep = []
    chunk = 3 * MiB
    inp = windowed(torch, dev, world * chunk, 0, keep)
    out = windowed(torch, dev, world * chunk, 0, keep)
    n = chunk // 4
    g = captured(torch, dev, lambda: dist.all_to_all_single(out, inp))
    for it in range(3):
        for j in range(world):
            inp[j * n:(j + 1) * n].fill_(float(100 * it + 10 * rank + j))
        out.fill_(-1.0)
        g.replay()
        torch.cuda.synchronize(dev)
        check_chunks(torch, out, world, n, lambda j, it=it: float(100 * it + 10 * j + rank))
    del g
    return {}


def graph_allreduce(torch, dist, dev, rank, world):
    keep = []
    x = windowed(torch, dev, 9 * MiB, 0, keep)
    g = captured(torch, dev, lambda: dist.all_reduce(x))
    for it in range(3):
        x.fill_(float(rank + 1 + it))
        g.replay()
        torch.cuda.synchronize(dev)
        want = float(sum(r + 1 + it for r in range(world)))
        if not bool((x == want).all()):
            bad = x[x != want]
            raise AssertionError("all_reduce: %d of %d values wrong (first %r, want %r)"
                                 % (bad.numel(), x.numel(), float(bad[0]), want))
    del g
    return {}


def rank_main(scenario, allocator, rank, world, port, outq):
    try:
        if allocator == "vpmm":
            sys.path.insert(0, PKG)
            import vpmm.torch as vt

            vt.enable()
        import datetime

        import torch
        import torch.distributed as dist

        if allocator == "vpmm" and torch.cuda.get_allocator_backend() != "vpmm":
            raise RuntimeError("this rank does not run vpmm")
        torch.cuda.set_device(rank)
        dev = torch.device("cuda", rank)
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                                world_size=world, device_id=dev,
                                timeout=datetime.timedelta(seconds=120))
        fn = {"eager-a2a": eager_a2a, "graph-a2a": graph_a2a,
              "graph-allreduce": graph_allreduce}[scenario]
        info = fn(torch, dist, dev, rank, world)
        if allocator == "vpmm":
            info["nccl_settings"] = vt.nccl_settings()
            info["check"] = vt.check(rank)
        dist.barrier()
        dist.destroy_process_group()
        outq.put(("ok", rank, info))
    except BaseException:  # noqa: BLE001 - reported to the parent
        outq.put(("error", rank, traceback.format_exc()[-3000:]))


# ---- the parent ---------------------------------------------------------------------------------


def scenario_env(args, scenario, logdir):
    env = dict(NO_MULTICAST)
    env.update({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "REG",
                "NCCL_DEBUG_FILE": os.path.join(logdir, "nccl.%h.%p.log")})
    if scenario == "eager-a2a":
        env["TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK"] = "1"
    if args.allocator == "expandable":
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    if args.allocator == "vpmm" and args.zero_copy:
        env["VPMM_TORCH_NCCL_ZERO_COPY"] = "1"
    return env


def count_log(logdir):
    counts = {"registered": 0, "skipped": 0, "ipc_registered": 0, "ipc_reused": 0,
              "ipc_failed": 0}
    for name in sorted(os.listdir(logdir)):
        with open(os.path.join(logdir, name), errors="replace") as f:
            for line in f:
                if "register comm" in line and " buffer " in line:
                    counts["registered"] += 1
                elif "Skipping registration for buffer" in line:  # NCCL_LOCAL_REGISTER=0
                    counts["skipped"] += 1
                elif "IPC register buffer" in line:
                    counts["ipc_registered"] += 1
                elif "IPC reuse buffer" in line:
                    counts["ipc_reused"] += 1
                elif "failed to IPC register" in line:
                    counts["ipc_failed"] += 1
    return counts


def run_scenario(args, scenario):
    import multiprocessing as mp

    logdir = tempfile.mkdtemp(prefix="vpmm-zc-")
    ctx = mp.get_context("spawn")
    outq = ctx.Queue()
    port = free_port()
    saved = dict(os.environ)
    for var in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "VPMM_TORCH_NCCL_ZERO_COPY",
                "TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK"):
        os.environ.pop(var, None)
    os.environ.update(scenario_env(args, scenario, logdir))
    try:
        procs = [ctx.Process(target=rank_main, args=(scenario, args.allocator, r, 2, port, outq))
                 for r in range(2)]
        for p in procs:
            p.start()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    t0 = time.monotonic()
    ranks, status = {}, "pass"
    while len(ranks) < 2:
        left = args.timeout - (time.monotonic() - t0)
        try:
            kind, rank, info = outq.get(timeout=max(left, 0.1))
        except queue.Empty:
            status = "hang"
            break
        ranks[rank] = info if kind == "ok" else {"error": info}
        if kind != "ok":
            status = "fail"
    for p in procs:
        p.join(5 if status == "pass" else 1)
        if p.is_alive():
            p.kill()
            p.join(5)
    row = {"kind": "nccl_zero_copy", "allocator": args.allocator,
           "zero_copy": bool(args.zero_copy) if args.allocator == "vpmm" else None,
           "scenario": scenario, "status": status,
           "seconds": round(time.monotonic() - t0, 1), "ranks": ranks}
    row.update(count_log(logdir))
    shutil.rmtree(logdir, ignore_errors=True)
    return row


def main(argv=None):
    q = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    q.add_argument("--allocator", choices=("vpmm", "native", "expandable"), required=True)
    q.add_argument("--zero-copy", action="store_true",
                   help="vpmm: VPMM_TORCH_NCCL_ZERO_COPY=1 (NCCL's registration left on)")
    q.add_argument("--scenario", choices=SCENARIOS + ("all",), default="all")
    q.add_argument("--timeout", type=float, default=60.0,
                   help="seconds the ranks of a scenario get before it counts as a hang")
    q.add_argument("--out", help="also append the JSON lines to this file")
    args = q.parse_args(argv)
    try:
        import torch
    except ImportError as e:
        print("nccl_zero_copy_probe: PyTorch is not importable: %s" % e, file=sys.stderr)
        return 2
    if torch.cuda.device_count() < 2:
        print("nccl_zero_copy_probe: needs 2 GPUs (%d visible)" % torch.cuda.device_count(),
              file=sys.stderr)
        return 2
    rows = []
    for scenario in (SCENARIOS if args.scenario == "all" else (args.scenario,)):
        row = run_scenario(args, scenario)
        rows.append(row)
        line = json.dumps(row, sort_keys=True)
        print(line, flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(line + "\n")
    label = args.allocator + (" (zero copy)" if args.allocator == "vpmm" and args.zero_copy
                              else "")
    print("\n| allocator | scenario | result | s | registered | skipped | IPC registered "
          "| IPC reused | IPC failed |\n|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| %s | %s | %s | %.1f | %d | %d | %d | %d | %d |" % (
            label, r["scenario"], r["status"], r["seconds"], r["registered"], r["skipped"],
            r["ipc_registered"], r["ipc_reused"], r["ipc_failed"]))
    return 0 if all(r["status"] == "pass" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
