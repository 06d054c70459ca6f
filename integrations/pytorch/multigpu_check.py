#!/usr/bin/env python3
"""multigpu_check.py — every point where several GPUs in one process meet the CUDA allocator, with
one PASS / FAIL / SKIP line each: run it on a machine with 2 GPUs or more, with vpmm and with
PyTorch's native allocator, and compare.

    PYTHONPATH=integrations/pytorch python3 integrations/pytorch/multigpu_check.py            # vpmm
    PYTHONPATH=integrations/pytorch python3 integrations/pytorch/multigpu_check.py --allocator native

The checks (devices 0 and 1):
  copy        .to("cuda:1") and back of contiguous and non-contiguous tensors, equal to the CPU's
  kernel      a copy kernel on one device writing the other's memory (non-contiguous copy_)
  growth      memory device 1 maps after the first copy, reached from device 0
  peers       vpmm only: each pool lists the device that copied into it (peer_devices)
  stream      record_stream with a stream of the other device holds the block until it is done
  free        a tensor of device 1 freed while device 0 is current: device 1's statistics fall
  stats       memory_allocated / memory_stats / max_memory_allocated / snapshot per device
  empty       empty_cache gives memory back on both devices
  fraction    set_per_process_memory_fraction on device 1 only: OOM there naming GPU 1, not on 0
  oom         torch.empty(1 << 46) on device 1: torch.OutOfMemoryError naming GPU 1, observer told
  ipc         a child process (spawn) writes a cuda:1 and a cuda:0 tensor the parent sees
  invariants  vpmm only: every pool's invariants hold at the end

Exit status: 0 if nothing failed, 1 if a check failed, 2 if it could not start (fewer than 2 GPUs,
no vpmm). With --allocator vpmm the child processes enable vpmm too (autoenable/sitecustomize.py).
"""
import argparse
import gc
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
MiB = 1 << 20


def child(task, inq, outq):
    """The IPC check's child: writes what it is sent, reports which allocator it ran."""
    try:
        import torch

        outq.put(("ready", torch.cuda.get_allocator_backend()))
        while True:
            x = inq.get()
            if x is None:
                break
            x.fill_(7)
            torch.cuda.synchronize(x.device)
            outq.put(("written", x.device.index))
            del x
        outq.put(("end", None))
    except BaseException:
        outq.put(("error", traceback.format_exc()))


class Checker:
    def __init__(self, allocator):
        self.allocator = allocator
        self.failed = 0
        self.passed = 0
        self.skipped = 0

    def run(self, name, fn):
        try:
            note = fn()
        except Skip as s:
            self.skipped += 1
            print("SKIP  %-10s %s" % (name, s), flush=True)
            return
        except Exception:
            self.failed += 1
            print("FAIL  %-10s %s" % (name, traceback.format_exc().strip().replace("\n", "\n      ")),
                  flush=True)
            return
        self.passed += 1
        print("PASS  %-10s %s" % (name, note or ""), flush=True)


class Skip(Exception):
    pass


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--allocator", choices=("vpmm", "native"), default="vpmm")
    ap.add_argument("--no-ipc", action="store_true", help="skip the child-process check")
    args = ap.parse_args()

    sys.path.insert(0, HERE)
    vt = None
    if args.allocator == "vpmm":
        try:
            import vpmm.torch as vt

            vt.enable()
        except Exception as e:
            print("cannot enable vpmm: %s" % e)
            return 2
    try:
        import torch
    except ImportError as e:
        print("needs PyTorch: %s" % e)
        return 2

    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        print("needs 2 CUDA devices (found %d)" % (torch.cuda.device_count()
                                                   if torch.cuda.is_available() else 0))
        return 2
    print("allocator %s (%s), torch %s, %d devices, peer access 0->1 %s, 1->0 %s" % (
        torch.cuda.get_allocator_backend(), args.allocator, torch.__version__,
        torch.cuda.device_count(), torch.cuda.can_device_access_peer(0, 1),
        torch.cuda.can_device_access_peer(1, 0)), flush=True)
    c = Checker(args.allocator)
    d0, d1 = torch.device("cuda:0"), torch.device("cuda:1")

    def copy():
        torch.manual_seed(0)
        a = torch.randn(1000, 1000)
        a0 = a.to(d0)
        for view, ref in ((a0, a), (a0.t(), a.t()), (a0[:, ::3], a[:, ::3]),
                          (a0[7:900:2, 5:], a[7:900:2, 5:])):
            v1 = view.to(d1)
            check(torch.equal(v1.cpu(), ref), "cuda:0 -> cuda:1 differs from the CPU's")
            check(torch.equal(v1.to(d0).cpu(), ref), "cuda:1 -> cuda:0 differs from the CPU's")
        return "4 layouts, both ways"

    def kernel():
        torch.manual_seed(1)
        a0 = torch.randn(1024, 1024, device=d0)
        b1 = torch.zeros(1024, 1024, device=d1)
        b1[:, ::2].copy_(a0[:, ::2])  # a kernel on cuda:0 writing cuda:1's memory
        got = b1.cpu()
        check(torch.equal(got[:, ::2], a0.cpu()[:, ::2]), "the strided copy 0 -> 1 is wrong")
        check(int(got[:, 1::2].count_nonzero()) == 0, "the copy wrote outside its view")
        c0 = torch.zeros(1024, 1024, device=d0)
        c0.t()[::2].copy_(b1.t()[::2])  # and on cuda:1 writing cuda:0's
        check(torch.equal(c0.cpu().t()[::2], got.t()[::2]), "the strided copy 1 -> 0 is wrong")

    def growth():
        big = [torch.empty(256 * MiB, dtype=torch.uint8, device=d1) for _ in range(4)]
        src = (torch.arange(256 * MiB, device=d0, dtype=torch.int32) % 251).to(torch.uint8)
        for b in big:
            b.copy_(src)
            b[1::7].copy_(src[1::7])  # a kernel too
        for b in big:
            check(torch.equal(b.to(d0), src), "a block mapped after the grant is wrong")
        return "4 x 256 MiB on cuda:1"

    def peers():
        if vt is None:
            raise Skip("vpmm only")
        if not torch.cuda.can_device_access_peer(0, 1):
            raise Skip("no peer access between the devices")
        p0, p1 = vt.stats(0)["peer_devices"], vt.stats(1)["peer_devices"]
        check(0 in p1 and 1 in p0, "peer grants: device 0's pool %s, device 1's %s" % (p0, p1))
        return "device 0's pool reached by %s, device 1's by %s" % (p0, p1)

    def stream():
        x = torch.ones(8 * MiB, dtype=torch.uint8, device=d0)
        addr = x.data_ptr()
        s1 = torch.cuda.Stream(device=1)
        with torch.cuda.device(1), torch.cuda.stream(s1):
            torch.cuda._sleep(200_000_000)
        x.record_stream(s1)
        del x
        z = torch.empty(8 * MiB, dtype=torch.uint8, device=d0)
        reused = z.data_ptr() == addr
        s1.synchronize()
        del z
        check(not reused, "the block was reused while a stream of device 1 had work before it")

    def free():
        torch.cuda.synchronize(d0)
        torch.cuda.synchronize(d1)
        b0, b1 = torch.cuda.memory_allocated(0), torch.cuda.memory_allocated(1)
        x1 = torch.empty(64 * MiB, dtype=torch.uint8, device=d1)
        check(torch.cuda.memory_allocated(1) == b1 + 64 * MiB, "device 1 did not count it")
        with torch.cuda.device(0):
            del x1
        check(torch.cuda.memory_allocated(1) == b1, "device 1 still counts the freed tensor")
        check(torch.cuda.memory_allocated(0) == b0, "device 0's statistics moved")

    def stats():
        for d in (0, 1):
            torch.cuda.reset_peak_memory_stats(d)
        base = [torch.cuda.memory_allocated(d) for d in (0, 1)]
        x0 = torch.empty(10 * MiB, dtype=torch.uint8, device=d0)
        x1 = torch.empty(30 * MiB, dtype=torch.uint8, device=d1)
        check(torch.cuda.memory_allocated(0) - base[0] == 10 * MiB, "device 0's allocated")
        check(torch.cuda.memory_allocated(1) - base[1] == 30 * MiB, "device 1's allocated")
        check(torch.cuda.memory_stats(1)["allocated_bytes.all.current"] ==
              torch.cuda.memory_allocated(1), "memory_stats(1)")
        check(torch.cuda.max_memory_allocated(1) >= base[1] + 30 * MiB, "device 1's peak")
        where = {}
        for seg in torch.cuda.memory._snapshot()["segments"]:
            at = seg["address"]
            for b in seg["blocks"]:
                where[at] = seg["device"]
                at += b["size"]
        check(where.get(x0.data_ptr()) == 0 and where.get(x1.data_ptr()) == 1,
              "the snapshot puts the blocks on the wrong devices")
        del x0, x1

    def empty():
        xs = [torch.empty(128 * MiB, dtype=torch.uint8, device=d) for d in (d0, d1)]
        before = [torch.cuda.memory_reserved(d) for d in (0, 1)]
        del xs
        torch.cuda.synchronize(d0)
        torch.cuda.synchronize(d1)
        torch.cuda.empty_cache()
        after = [torch.cuda.memory_reserved(d) for d in (0, 1)]
        check(after[0] < before[0] and after[1] < before[1],
              "reserved before %s, after %s" % (before, after))
        return "reserved %s -> %s MiB" % ([b // MiB for b in before], [a // MiB for a in after])

    def fraction():
        total = [torch.cuda.get_device_properties(d).total_memory for d in (0, 1)]
        try:
            torch.cuda.set_per_process_memory_fraction(0.1, device=1)
            try:
                torch.empty(int(0.2 * total[1]), dtype=torch.uint8, device=d1)
                raise AssertionError("device 1 allocated past its fraction")
            except torch.OutOfMemoryError as e:
                check("GPU 1" in str(e), "the message does not name GPU 1: %s" % e)
            x0 = torch.empty(int(0.2 * total[0]), dtype=torch.uint8, device=d0)
            del x0
        finally:
            torch.cuda.set_per_process_memory_fraction(1.0, device=1)
        x1 = torch.empty(int(0.2 * total[1]), dtype=torch.uint8, device=d1)
        del x1
        torch.cuda.empty_cache()

    def oom():
        seen = []
        torch._C._cuda_attach_out_of_memory_observer(
            lambda dev, alloc, allowed, free: seen.append((dev, alloc)))
        ooms = torch.cuda.memory_stats(1)["num_ooms"]
        try:
            torch.empty(1 << 46, device=d1)
            raise AssertionError("256 TiB were allocated")
        except torch.OutOfMemoryError as e:
            msg = str(e)
        check("out of memory" in msg and "GPU 1" in msg, "the message: %s" % msg)
        check(seen and seen[-1] == (1, 4 << 46), "the observer saw %s" % seen)
        check(torch.cuda.memory_stats(1)["num_ooms"] == ooms + 1, "num_ooms of device 1")
        return msg.split(". ")[0] + ". " + msg.split(". ")[1]

    def ipc():
        if args.no_ipc:
            raise Skip("--no-ipc")
        import torch.multiprocessing as mp

        ctx = mp.get_context("spawn")
        inq, outq = ctx.Queue(), ctx.Queue()
        saved = dict(os.environ)
        if vt is not None:
            os.environ["VPMM_TORCH_ENABLE"] = "1"
            os.environ["PYTHONPATH"] = os.pathsep.join(
                [os.path.join(HERE, "autoenable"), HERE] +
                ([saved["PYTHONPATH"]] if saved.get("PYTHONPATH") else []))
            if vt.library_path():
                os.environ.setdefault("VPMM_TORCH_BACKEND", vt.library_path())
        else:
            os.environ.pop("VPMM_TORCH_ENABLE", None)
        try:
            p = ctx.Process(target=child, args=("write", inq, outq))
            p.start()
        finally:
            os.environ.clear()
            os.environ.update(saved)
        try:
            kind, backend = outq.get(timeout=300)
            check(kind == "ready", "the child: %s" % backend)
            check(backend == torch.cuda.get_allocator_backend(),
                  "the child runs %s, this process %s" % (backend,
                                                          torch.cuda.get_allocator_backend()))
            xs = [torch.zeros(4096, device=d1), torch.zeros(4096, device=d0)]
            for x in xs:
                inq.put(x)
                kind, dev = outq.get(timeout=300)
                check(kind == "written", "the child: %s" % dev)
                torch.cuda.synchronize(x.device)
                check(float(x.sum()) == 7.0 * 4096, "cuda:%d: the child's writes are not seen"
                      % x.device.index)
            inq.put(None)
            check(outq.get(timeout=300)[0] == "end", "the child did not end well")
        finally:
            p.join(60)
            if p.is_alive():
                p.kill()
        del xs
        gc.collect()
        torch.cuda.ipc_collect()
        return "child on %s" % backend

    def invariants():
        if vt is None:
            raise Skip("vpmm only")
        torch.cuda.synchronize(d0)
        torch.cuda.synchronize(d1)
        bad = [vt.check(d) for d in (0, 1)]
        check(bad == [0, 0], "violations per device: %s" % bad)

    for name, fn in (("copy", copy), ("kernel", kernel), ("growth", growth), ("peers", peers),
                     ("stream", stream), ("free", free), ("stats", stats), ("empty", empty),
                     ("fraction", fraction), ("oom", oom), ("ipc", ipc),
                     ("invariants", invariants)):
        c.run(name, fn)
    print("%d passed, %d failed, %d skipped" % (c.passed, c.failed, c.skipped), flush=True)
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
