#!/usr/bin/env python3
"""test_backend.py — vpmm as PyTorch's complete CUDA allocator, on a GPU (unittest).

Runs in one process with vpmm enabled before CUDA is initialised (vpmm.torch.enable() at import),
so every test sees vpmm as the allocator: PyTorch's own memory API on vpmm's pool (memory_stats,
memory_allocated, max_memory_reserved, reset_peak_memory_stats, empty_cache,
set_per_process_memory_fraction, _snapshot with and without recorded history), an
OutOfMemoryError carrying vpmm's report with the OOM observer called, Tensor.record_stream
holding a block back until the other stream's work is done, torch.cuda.graph sharing one graph
pool through pool=, graph_pool_handle(), a MemPool with its own allocator (its memory from that
allocator, counted in the statistics and its snapshot), and torch.compile(mode="reduce-overhead")
— CUDA graph trees with several branches — equal to eager. vpmm's invariants are checked after every test.

A request larger than vpmm's address range (torch.empty(1 << 46)) is torch.OutOfMemoryError with
the observers called. With two GPUs or more (MultiGPU; skipped with fewer): .to("cuda:1") of
contiguous and non-contiguous tensors and back, a copy kernel of one device writing the other's
memory, memory mapped after the peer grant, record_stream with a stream of the other device, a
free while the other device is current, statistics, snapshots, empty_cache, memory fraction and
OutOfMemoryError per device. CUDA IPC (IPC; children started with spawn, vpmm enabled in them
through autoenable/sitecustomize.py): a tensor written by a child and seen by the parent, and
one sent back; the same tensor sent twice (its free ends the share of the send the child's cache
absorbed: the memory is reused at once); the producer dropping its tensor first and the
consumer first, the memory back in use once both are done (no share left); 1,200 sends with no
descriptor growth in either process; handles of PyTorch's own allocator, of an exited process
and of a pool with VPMM_IPC=0 refused with their reasons; a cuda:1 tensor shared (two GPUs).

NCCL buffer registration (NCCLRegistration; two GPUs and torch.distributed with NCCL): two spawned
ranks on vpmm, TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1 (or a MemPool registered with
register_mem_pool), all_reduce / all_gather of several sizes (some over several 2 MiB handles),
segments freed and mapped again between them; NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=REG to a file,
which must show ncclCommRegister of vpmm's 2 MiB segments and a buffer registered for zero copy,
and no failed registration; the snapshot's segments are the handles.

Needs PyTorch, a CUDA device and libvpmm_torch_backend.so (VPMM_TORCH_BACKEND or the build
tree); without them every test reports itself skipped. Run:

    PYTHONPATH=integrations/pytorch python3 integrations/pytorch/test_backend.py -v
"""
import ctypes
import gc
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import traceback
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

try:
    import torch
    import vpmm.torch as vt

    HAVE_GPU = torch.cuda.is_available()
    if HAVE_GPU:
        vt.enable()
except ImportError as e:  # no PyTorch: every test skips
    torch = None
    HAVE_GPU = False
    SKIP_WHY = str(e)
else:
    SKIP_WHY = "no CUDA device"

MiB = 1 << 20

# A MemPool's own allocator for test_mempool_with_its_own_allocator: device memory from the driver
# (libcuda.so.1, the one PyTorch uses; no second CUDA runtime in the process), calls counted.
EXT_ALLOCATOR_C = r"""
#include <dlfcn.h>
#include <stddef.h>
typedef int (*mem_alloc_t)(unsigned long long *, size_t);
typedef int (*mem_free_t)(unsigned long long);
int ext_allocs, ext_frees;
static mem_alloc_t mem_alloc;
static mem_free_t mem_free;
void *ext_alloc(size_t size, int device, void *stream)
{
    unsigned long long p = 0;
    (void)device, (void)stream;
    if (!mem_alloc) {
        void *h = dlopen("libcuda.so.1", RTLD_NOW);
        mem_alloc = (mem_alloc_t)dlsym(h, "cuMemAlloc_v2");
        mem_free = (mem_free_t)dlsym(h, "cuMemFree_v2");
    }
    if (mem_alloc(&p, size) != 0)
        return NULL;
    ext_allocs++;
    return (void *)p;
}
void ext_free(void *ptr, size_t size, int device, void *stream)
{
    (void)size, (void)device, (void)stream;
    mem_free((unsigned long long)ptr);
    ext_frees++;
}
"""


def build_ext_allocator(tmp):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise unittest.SkipTest("no C compiler to build the MemPool's allocator")
    src, lib = os.path.join(tmp, "ext.c"), os.path.join(tmp, "libext.so")
    with open(src, "w") as f:
        f.write(EXT_ALLOCATOR_C)
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", lib, src, "-ldl"], check=True)
    return lib


def child_env():
    """The environment of a child process with vpmm enabled as it starts (autoenable/)."""
    env = dict(os.environ)
    env["VPMM_TORCH_ENABLE"] = "1"
    path = [os.path.join(HERE, "autoenable"), HERE]
    if env.get("PYTHONPATH"):
        path.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(path)
    if os.environ.get("VPMM_TORCH_BACKEND") is None and vt.library_path():
        env["VPMM_TORCH_BACKEND"] = vt.library_path()
    for name in vt.nccl_settings():  # set by this process's enable(): each child decides itself
        env.pop(name, None)
    return env


def start_in_env(env, *procs):
    """Starts spawned processes with exactly env as their environment (a spawned child copies
    os.environ at start(), so this process's own settings, such as the NCCL ones its enable()
    made, must not be there)."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        for p in procs:
            p.start()
    finally:
        os.environ.clear()
        os.environ.update(saved)


def fd_count():
    return len(os.listdir("/proc/self/fd"))


@unittest.skipUnless(HAVE_GPU, SKIP_WHY)
class Backend(unittest.TestCase):
    def tearDown(self):
        torch.cuda.synchronize()
        self.assertEqual(vt.check(), 0, "vpmm invariants violated")

    def test_is_the_allocator(self):
        self.assertTrue(vt.is_enabled())
        self.assertEqual(torch.cuda.get_allocator_backend(), "vpmm")
        x = torch.ones(1000, device="cuda")
        self.assertEqual(x.sum().item(), 1000)
        s = vt.stats()
        self.assertEqual(s["backend"], "cuda")
        self.assertGreaterEqual(s["live_bytes"], 4000)

    def test_memory_stats(self):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        x = torch.empty(10 * MiB, dtype=torch.uint8, device="cuda")
        self.assertEqual(torch.cuda.memory_allocated() - base, 10 * MiB)
        self.assertGreaterEqual(torch.cuda.memory_reserved(), torch.cuda.memory_allocated())
        st = torch.cuda.memory_stats()
        for key in ("allocated_bytes.all.current", "allocated_bytes.large_pool.current",
                    "reserved_bytes.all.current", "active_bytes.all.peak",
                    "requested_bytes.all.current", "num_alloc_retries", "num_ooms",
                    "num_device_alloc", "num_device_free", "allocation.all.current",
                    "segment.all.current", "inactive_split_bytes.all.current"):
            self.assertIn(key, st)
        self.assertEqual(st["allocated_bytes.all.current"], torch.cuda.memory_allocated())
        self.assertGreaterEqual(st["requested_bytes.all.current"], 10 * MiB)
        peak = torch.cuda.max_memory_allocated()
        self.assertGreaterEqual(peak, base + 10 * MiB)
        del x
        self.assertEqual(torch.cuda.memory_allocated(), base)
        self.assertEqual(torch.cuda.max_memory_allocated(), peak)
        torch.cuda.reset_peak_memory_stats()
        self.assertEqual(torch.cuda.max_memory_allocated(), base)
        self.assertGreater(torch.cuda.max_memory_reserved(), 0)
        summary = torch.cuda.memory_summary()
        self.assertIn("Allocated memory", summary)

    def test_empty_cache_gives_pages_back(self):
        xs = [torch.empty(64 * MiB, dtype=torch.uint8, device="cuda") for _ in range(4)]
        before = torch.cuda.memory_reserved()
        del xs
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        self.assertLessEqual(torch.cuda.memory_reserved(), before - 256 * MiB)
        self.assertEqual(vt.trim(), 0)  # nothing left to give

    def test_out_of_memory_error(self):
        seen = []
        torch._C._cuda_attach_out_of_memory_observer(
            lambda dev, alloc, total, free: seen.append((dev, alloc)))
        total = torch.cuda.get_device_properties(0).total_memory
        ooms = torch.cuda.memory_stats()["num_ooms"]
        with self.assertRaises(torch.OutOfMemoryError) as cm:
            torch.empty(2 * total, dtype=torch.uint8, device="cuda")
        self.assertIn("vpmm", str(cm.exception))
        self.assertEqual(torch.cuda.memory_stats()["num_ooms"], ooms + 1)
        self.assertEqual(seen[-1][1], 2 * total)
        torch.ones(10, device="cuda").sum().item()  # still usable

    def test_memory_fraction_caps_the_pool(self):
        total = torch.cuda.get_device_properties(0).total_memory
        try:
            torch.cuda.set_per_process_memory_fraction(0.25)
            self.assertEqual(vt.stats()["max_bytes"] // MiB, int(0.25 * total) // (2 * MiB) * 2)
            with self.assertRaises(torch.OutOfMemoryError):
                torch.empty(int(0.3 * total), dtype=torch.uint8, device="cuda")
        finally:
            torch.cuda.set_per_process_memory_fraction(1.0)
        self.assertEqual(vt.stats()["max_bytes"], 0)
        x = torch.empty(int(0.3 * total), dtype=torch.uint8, device="cuda")
        del x
        torch.cuda.empty_cache()

    def test_snapshot_and_history(self):
        torch.cuda.memory._record_memory_history(max_entries=1000)
        try:
            x = torch.empty(3 * MiB, dtype=torch.uint8, device="cuda")
            addr = x.data_ptr()
            snap = torch.cuda.memory._snapshot()
            del x
            snap2 = torch.cuda.memory._snapshot()
        finally:
            torch.cuda.memory._record_memory_history(enabled=None)
        blocks = [b for seg in snap["segments"] for b in seg["blocks"]]
        mine = [b for b in blocks if b["address"] == addr]
        self.assertEqual(len(mine), 1)
        self.assertEqual(mine[0]["state"], "active_allocated")
        self.assertTrue(mine[0]["frames"], "the block carries its allocation stack")
        for seg in snap["segments"]:
            self.assertEqual(sum(b["size"] for b in seg["blocks"]), seg["total_size"])
        trace = snap2["device_traces"][0]
        actions = [(e["action"], e["addr"]) for e in trace if e["addr"] == addr]
        self.assertIn(("alloc", addr), actions)
        self.assertIn(("free_requested", addr), actions)
        self.assertIn(("free_completed", addr), actions)
        alloc = next(e for e in trace if e["addr"] == addr and e["action"] == "alloc")
        self.assertEqual(alloc["size"], 3 * MiB)
        self.assertTrue(alloc["frames"])
        # the visualiser's input writes and loads
        path = os.path.join(os.environ.get("OUT", "/tmp"), "vpmm_snapshot.pickle")
        torch.cuda.memory._dump_snapshot(path)
        self.assertGreater(os.path.getsize(path), 0)

    def test_stacks_outlive_the_recording(self):
        # graph trees record while recording a graph, then turn the history off, and still name
        # the allocations the graph left behind
        torch.cuda.memory._record_memory_history(max_entries=100)
        x = torch.empty(5 * MiB, dtype=torch.uint8, device="cuda")
        torch.cuda.memory._record_memory_history(enabled=None)
        snap = torch.cuda.memory._snapshot()
        mine = [b for seg in snap["segments"] for b in seg["blocks"]
                if b["address"] == x.data_ptr()]
        self.assertEqual(len(mine), 1)
        self.assertTrue(mine[0]["frames"])
        self.assertFalse(snap["device_traces"][0], "no trace once the recording is off")
        del x

    def test_record_stream_holds_the_block(self):
        side = torch.cuda.Stream()
        x = torch.empty(8 * MiB, dtype=torch.uint8, device="cuda")
        addr = x.data_ptr()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(200_000_000)  # ~0.1 s of work on the side stream
            x.fill_(7)
        x.record_stream(side)
        del x
        y = torch.empty(8 * MiB, dtype=torch.uint8, device="cuda")
        self.assertNotEqual(y.data_ptr(), addr, "reused while the side stream still uses it")
        y.fill_(1)
        side.synchronize()
        torch.cuda.synchronize()
        self.assertEqual(int(y.sum().item()), 8 * MiB)

    def test_graph_pool_sharing(self):
        static_in = torch.randn(1024, 1024, device="cuda")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                (static_in @ static_in).relu()
        torch.cuda.current_stream().wait_stream(s)
        pool = torch.cuda.graph_pool_handle()
        g1, g2 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        pools_before = vt.stats()["graph_pools"]
        with torch.cuda.graph(g1, pool=pool):
            out1 = (static_in @ static_in).relu()
        with torch.cuda.graph(g2, pool=pool):
            out2 = (out1 * 2).sum(dim=0)
        self.assertEqual(vt.stats()["graph_pools"], pools_before + 1, "pool= shares one pool")
        for _ in range(3):
            static_in.copy_(torch.randn(1024, 1024, device="cuda"))
            g1.replay()
            g2.replay()
            ref1 = (static_in @ static_in).relu()
            torch.testing.assert_close(out1, ref1)
            torch.testing.assert_close(out2, (ref1 * 2).sum(dim=0))
        del g1, g2, out1, out2
        torch.cuda.synchronize()

    def test_mempool_with_its_own_allocator(self):
        with tempfile.TemporaryDirectory() as tmp:
            lib = build_ext_allocator(tmp)
            counters = ctypes.CDLL(lib)
            allocs = ctypes.c_int.in_dll(counters, "ext_allocs")
            frees = ctypes.c_int.in_dll(counters, "ext_frees")
            alloc = torch.cuda.memory.CUDAPluggableAllocator(lib, "ext_alloc", "ext_free")
            pool = torch.cuda.MemPool(alloc.allocator())
            self.assertEqual(pool.use_count(), 1)
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            base_reserved = torch.cuda.memory_reserved()
            with torch.cuda.use_mem_pool(pool):
                x = torch.full((MiB,), 3.0, device="cuda")  # 4 MiB from the pool's allocator
                self.assertEqual(pool.use_count(), 2)
            self.assertEqual(allocs.value, 1)
            self.assertEqual(torch.cuda.memory_allocated(), base + 4 * MiB)
            self.assertEqual(torch.cuda.memory_reserved(), base_reserved + 4 * MiB)
            segs = pool.snapshot()
            self.assertEqual(len(segs), 1)
            self.assertEqual(segs[0]["address"], x.data_ptr())
            self.assertEqual(segs[0]["total_size"], 4 * MiB)
            y = torch.ones(1000, device="cuda")  # outside the pool: vpmm's
            self.assertEqual(allocs.value, 1)
            self.assertEqual(x.sum().item(), 3.0 * MiB)
            self.assertEqual(y.sum().item(), 1000)
            del pool  # released while x lives: x keeps its allocator
            torch.cuda.synchronize()
            del x
            self.assertEqual(frees.value, 1)
            after = torch.cuda.memory_allocated() - base  # y alone, rounded up
            self.assertGreaterEqual(after, 4000)
            self.assertLess(after, 8192)
            del y

    def test_compile_reduce_overhead_tree(self):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(),
                                    torch.nn.Linear(512, 256)).cuda()
        compiled = torch.compile(model, mode="reduce-overhead", dynamic=False)
        with torch.no_grad():
            for _ in range(3):
                for n in (8, 16, 32):  # three graphs of one tree
                    x = torch.randn(n, 256, device="cuda")
                    torch.testing.assert_close(compiled(x).clone(), model(x), rtol=1e-4,
                                               atol=1e-4)
        # training through the tree, too
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for n in (8, 16):
            for _ in range(3):
                x = torch.randn(n, 256, device="cuda")
                loss = compiled(x).square().mean()
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
        self.assertGreaterEqual(vt.stats()["graph_pools"], 1)
        torch._dynamo.reset()


@unittest.skipUnless(HAVE_GPU, SKIP_WHY)
class OutOfMemory(unittest.TestCase):
    def setUp(self):
        # CUDA initialised and device 0's pool made, so that the class runs alone too
        # (memory_stats() is {} before CUDA is initialised)
        torch.ones(1, device="cuda").sum().item()

    def tearDown(self):
        torch.cuda.synchronize()
        self.assertEqual(vt.check(), 0, "vpmm invariants violated")

    def test_larger_than_the_address_range(self):
        # 256 TiB: more than vpmm reserves at once (VPMM_ERROR_SIZE_TOO_LARGE); native: "CUDA out
        # of memory" too, so programs catch torch.OutOfMemoryError either way
        seen = []
        torch._C._cuda_attach_out_of_memory_observer(
            lambda dev, alloc, total, free: seen.append((dev, alloc)))
        ooms = torch.cuda.memory_stats()["num_ooms"]
        with self.assertRaises(torch.OutOfMemoryError) as cm:
            torch.empty(1 << 46, device="cuda")
        msg = str(cm.exception)
        self.assertIn("CUDA out of memory. Tried to allocate 262144.00 GiB", msg)
        self.assertIn("on device 0. GPU 0 has a total capacity of", msg)
        self.assertIn("VPMM_VA_SIZE", msg)
        self.assertIsInstance(cm.exception, torch.cuda.OutOfMemoryError)
        self.assertEqual(torch.cuda.memory_stats()["num_ooms"], ooms + 1)
        self.assertEqual(seen[-1], (0, 4 << 46))
        torch.ones(10, device="cuda").sum().item()  # still usable


# ---- several devices -------------------------------------------------------------------------

HAVE_2_GPUS = HAVE_GPU and torch.cuda.device_count() >= 2


@unittest.skipUnless(HAVE_2_GPUS, "needs 2 CUDA devices" if HAVE_GPU else SKIP_WHY)
class MultiGPU(unittest.TestCase):
    def tearDown(self):
        for d in (0, 1):
            torch.cuda.synchronize(d)
            self.assertEqual(vt.check(d), 0, "vpmm invariants violated on device %d" % d)

    def test_to_the_other_device_and_back(self):
        torch.manual_seed(0)
        a = torch.randn(1000, 1000)
        a0 = a.to("cuda:0")
        for view, ref in ((a0, a), (a0.t(), a.t()), (a0[:, ::3], a[:, ::3]),
                          (a0[7:900:2, 5:], a[7:900:2, 5:])):
            v1 = view.to("cuda:1")
            self.assertEqual(v1.device, torch.device("cuda:1"))
            torch.testing.assert_close(v1.cpu(), ref, rtol=0, atol=0)
            back = v1.to("cuda:0")
            torch.testing.assert_close(back.cpu(), ref, rtol=0, atol=0)
        # memory mapped after the grant: device 1's pool grows, the copies still reach it
        big = [torch.empty(64 << 20, dtype=torch.uint8, device="cuda:1") for _ in range(4)]
        src = (torch.arange(64 << 20, device="cuda:0", dtype=torch.int64) % 251).to(torch.uint8)
        for b in big:
            b.copy_(src)
        for b in big:
            self.assertTrue(torch.equal(b.to("cuda:0"), src))
        del big

    def test_copy_kernel_writes_the_other_device(self):
        # a non-contiguous copy from cuda:0 to cuda:1 is a kernel on cuda:0 that writes cuda:1's
        # memory through the peer mapping (p2p), and the other way round
        torch.manual_seed(1)
        a0 = torch.randn(1024, 1024, device="cuda:0")
        b1 = torch.zeros(1024, 1024, device="cuda:1")
        b1[:, ::2].copy_(a0[:, ::2])
        got = b1.cpu()
        torch.testing.assert_close(got[:, ::2], a0.cpu()[:, ::2], rtol=0, atol=0)
        self.assertEqual(int(got[:, 1::2].count_nonzero()), 0)
        c0 = torch.zeros(1024, 1024, device="cuda:0")
        c0.t()[::2].copy_(b1.t()[::2])
        torch.testing.assert_close(c0.cpu().t()[::2], got.t()[::2], rtol=0, atol=0)
        if torch.cuda.can_device_access_peer(0, 1):
            self.assertIn(0, vt.stats(1)["peer_devices"], "device 0 reaches device 1's pool")
            self.assertIn(1, vt.stats(0)["peer_devices"], "device 1 reaches device 0's pool")

    def test_record_stream_of_the_other_device(self):
        x = torch.ones(8 << 20, dtype=torch.uint8, device="cuda:0")
        addr = x.data_ptr()
        s1 = torch.cuda.Stream(device=1)
        with torch.cuda.device(1), torch.cuda.stream(s1):
            torch.cuda._sleep(200_000_000)  # ~0.1 s of work on s1 (device 1)
        x.record_stream(s1)  # s1 "uses" x: x's memory waits for s1's work
        del x
        z = torch.empty(8 << 20, dtype=torch.uint8, device="cuda:0")
        self.assertNotEqual(z.data_ptr(), addr,
                            "reused while a stream of device 1 still had work before it")
        z.fill_(1)
        s1.synchronize()
        torch.cuda.synchronize(0)
        self.assertEqual(int(z.sum().item()), 8 << 20)
        # once s1 is done the memory is free again: given back at the next empty_cache
        before = torch.cuda.memory_reserved(0)
        del z
        torch.cuda.empty_cache()
        self.assertLess(torch.cuda.memory_reserved(0), before)

    def test_free_while_the_other_device_is_current(self):
        torch.cuda.synchronize(0)
        torch.cuda.synchronize(1)
        base0, base1 = torch.cuda.memory_allocated(0), torch.cuda.memory_allocated(1)
        x1 = torch.empty(64 << 20, dtype=torch.uint8, device="cuda:1")
        self.assertEqual(torch.cuda.memory_allocated(1), base1 + (64 << 20))
        with torch.cuda.device(0):
            del x1
        self.assertEqual(torch.cuda.memory_allocated(1), base1)
        self.assertEqual(torch.cuda.memory_allocated(0), base0)
        self.assertEqual(torch.cuda.current_device(), 0)

    def test_statistics_per_device(self):
        for d in (0, 1):
            torch.cuda.synchronize(d)
            torch.cuda.reset_peak_memory_stats(d)
        base = [torch.cuda.memory_allocated(d) for d in (0, 1)]
        x0 = torch.empty(10 << 20, dtype=torch.uint8, device="cuda:0")
        x1 = torch.empty(30 << 20, dtype=torch.uint8, device="cuda:1")
        self.assertEqual(torch.cuda.memory_allocated(0) - base[0], 10 << 20)
        self.assertEqual(torch.cuda.memory_allocated(1) - base[1], 30 << 20)
        self.assertEqual(torch.cuda.memory_stats(1)["allocated_bytes.all.current"],
                         torch.cuda.memory_allocated(1))
        self.assertGreaterEqual(torch.cuda.max_memory_allocated(1), base[1] + (30 << 20))
        self.assertGreaterEqual(torch.cuda.memory_reserved(1), 30 << 20)
        where = {}
        for seg in torch.cuda.memory._snapshot()["segments"]:
            at = seg["address"]
            for b in seg["blocks"]:
                where[at] = seg["device"]
                at += b["size"]
        self.assertEqual(where.get(x0.data_ptr()), 0)
        self.assertEqual(where.get(x1.data_ptr()), 1)
        self.assertEqual(vt.stats(1)["pool_device"], 1)
        reserved = [torch.cuda.memory_reserved(d) for d in (0, 1)]
        del x0, x1
        torch.cuda.empty_cache()  # every device's pool
        self.assertLess(torch.cuda.memory_reserved(0), reserved[0])
        self.assertLess(torch.cuda.memory_reserved(1), reserved[1])

    def test_memory_fraction_and_oom_per_device(self):
        total1 = torch.cuda.get_device_properties(1).total_memory
        total0 = torch.cuda.get_device_properties(0).total_memory
        seen = []
        torch._C._cuda_attach_out_of_memory_observer(
            lambda dev, alloc, allowed, free: seen.append((dev, alloc, allowed)))
        try:
            torch.cuda.set_per_process_memory_fraction(0.1, device=1)
            self.assertAlmostEqual(vt.stats(1)["memory_fraction"], 0.1, places=5)
            self.assertEqual(vt.stats(0)["memory_fraction"], 1.0)
            with self.assertRaises(torch.OutOfMemoryError) as cm:
                torch.empty(int(0.2 * total1), dtype=torch.uint8, device="cuda:1")
            msg = str(cm.exception)
            self.assertIn("on device 1. GPU 1 has a total capacity of", msg)
            self.assertIn("may use 0.1 of device 1's memory", msg)
            self.assertEqual(seen[-1][0], 1)
            self.assertLessEqual(seen[-1][2], int(0.1 * total1) + 1)
            x0 = torch.empty(int(0.2 * total0), dtype=torch.uint8, device="cuda:0")  # not capped
            del x0
        finally:
            torch.cuda.set_per_process_memory_fraction(1.0, device=1)
        x1 = torch.empty(int(0.2 * total1), dtype=torch.uint8, device="cuda:1")
        del x1
        with self.assertRaises(torch.OutOfMemoryError) as cm:
            torch.empty(1 << 46, device="cuda:1")
        self.assertIn("on device 1.", str(cm.exception))
        self.assertEqual(seen[-1][:2], (1, 4 << 46))
        torch.cuda.empty_cache()

    def test_ipc_of_a_device_1_tensor(self):
        x = torch.zeros(4096, device="cuda:1")
        with Child("write") as c:
            c.send(x)
            self.assertEqual(c.recv(), ("written", 1))
            torch.cuda.synchronize(1)
            self.assertEqual(float(x.sum()), 7.0 * 4096)
            c.recv()  # the child's statistics
            y = c.recv()  # the child's own tensor, on its device 0
            self.assertEqual(float(y.sum()), 5000.0)
            del y
            gc.collect()
            c.send("bye")


# ---- CUDA IPC (torch.multiprocessing, spawn) ----------------------------------------------------


def child_main(task, inq, outq):
    """A consumer (and producer) process with vpmm enabled as it started (autoenable)."""
    try:
        import torch
        import vpmm.torch as vtc

        if not vtc.is_enabled() or torch.cuda.get_allocator_backend() != "vpmm":
            raise RuntimeError("the child does not run vpmm")
        outq.put(("ready", os.getpid()))
        if task == "write":  # write the parent's tensor; send one back; wait until told
            x = inq.get()
            x.fill_(7)
            torch.cuda.synchronize(x.device)  # x may be on another device than the current one
            outq.put(("written", x.device.index))
            dev = x.device.index
            during = vtc.stats(dev)
            del x
            gc.collect()
            outq.put(("stats", during, vtc.stats(dev)))
            y = torch.full((1000,), 5.0, device="cuda:0")
            outq.put(y)
            assert inq.get() == "bye"
            del y
        elif task == "twice":  # the same tensor twice: the second is PyTorch's cache hit
            a = inq.get()
            b = inq.get()
            same = a.data_ptr() == b.data_ptr()
            b.add_(1)
            torch.cuda.synchronize()
            during = vtc.stats(0)
            del a, b
            gc.collect()
            outq.put(("twice", same, during, vtc.stats(0)))
        elif task == "hold":  # read, hold until told, then drop (the producer drops first)
            x = inq.get()
            outq.put(("sum", float(x.sum())))
            assert inq.get() == "drop"
            del x
            gc.collect()
            torch.cuda.synchronize()
            outq.put(("dropped", vtc.stats(0)["ipc_open_now"]))
        elif task == "read":  # read and drop at once (the consumer drops first)
            x = inq.get()
            outq.put(("sum", float(x.sum())))
            del x
            gc.collect()
            outq.put(("dropped", vtc.stats(0)["ipc_open_now"]))
        elif task == "many":  # receive n tensors one by one; descriptors after 100 and at the end
            n = inq.get()
            fds = []
            for i in range(n):
                t = inq.get()
                assert int(t[0].item()) == i % 1000
                del t
                if i == 99:
                    gc.collect()
                    fds.append(fd_count())
                outq.put(i)
            gc.collect()
            fds.append(fd_count())
            outq.put(("fds", fds, vtc.stats(0)))
        elif task == "export_and_exit":  # a handle whose producer is gone once it is read
            x = torch.ones(1024, device="cuda")
            outq.put(("handle", x.untyped_storage()._share_cuda_()[1]))
        outq.put(("end", None))
    except BaseException:
        outq.put(("error", traceback.format_exc()))


class Child:
    """A spawned child running child_main(task) with vpmm enabled from its start."""

    TIMEOUT = 300

    def __init__(self, task):
        import torch.multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.inq, self.outq = ctx.Queue(), ctx.Queue()
        self.proc = ctx.Process(target=child_main, args=(task, self.inq, self.outq))
        start_in_env(child_env(), self.proc)
        kind, _ = self.recv()
        assert kind == "ready", kind

    def send(self, obj):
        self.inq.put(obj)

    def recv(self):
        try:
            item = self.outq.get(timeout=self.TIMEOUT)
        except queue.Empty:
            raise AssertionError("the child said nothing for %d s" % self.TIMEOUT)
        if isinstance(item, tuple) and item and item[0] == "error":
            raise AssertionError("the child failed:\n" + item[1])
        return item

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            kind, _ = self.recv()
            assert kind == "end", kind
        self.proc.join(self.TIMEOUT)
        if self.proc.is_alive():
            self.proc.kill()
        return False


@unittest.skipUnless(HAVE_GPU, SKIP_WHY)
class IPC(unittest.TestCase):
    def tearDown(self):
        torch.cuda.synchronize()
        self.assertEqual(vt.check(), 0, "vpmm invariants violated")

    def settle(self):
        """After the children: PyTorch frees what consumers are done with, vpmm's deferred blocks
        are polled (empty_cache trims), so no share may be left."""
        gc.collect()
        torch.cuda.ipc_collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()

    def test_child_writes_the_parent_sees(self):
        x = torch.zeros(1 << 20, device="cuda")
        exports = vt.stats()["ipc_exports"]
        with Child("write") as c:
            c.send(x)
            self.assertEqual(c.recv(), ("written", 0))
            self.assertEqual(float(x.sum()), 7.0 * (1 << 20))
            self.assertEqual(vt.stats()["ipc_exports"], exports + 1)
            _, during, after = c.recv()
            self.assertEqual(during["ipc_open_now"], 1)
            self.assertEqual(during["ipc_imports"], 1)
            self.assertEqual(after["ipc_open_now"], 0)
            self.assertEqual(after["ipc_imports"], 0)
            self.assertEqual(after["ipc_close_calls"], after["ipc_open_calls"])
            y = c.recv()  # the child's tensor, mapped here
            self.assertEqual(float(y.sum()), 5000.0)
            self.assertEqual(vt.stats()["ipc_open_now"], 1)
            del y
            gc.collect()
            self.assertEqual(vt.stats()["ipc_open_now"], 0)
            c.send("bye")
        del x
        self.settle()
        self.assertEqual(vt.stats()["ipc_shared"], 0)

    def test_same_tensor_sent_twice(self):
        torch.cuda.synchronize()
        x = torch.zeros(1 << 16, device="cuda")
        ptr = x.data_ptr()
        unshares = vt.stats()["ipc_unshares"]
        with Child("twice") as c:
            c.send(x)
            c.send(x)
            _, same, during, after = c.recv()
            self.assertTrue(same, "the second receive is the first's storage (PyTorch's cache)")
            self.assertEqual(during["ipc_open_calls"], 1, "the cache hit opens nothing")
            self.assertEqual(after["ipc_open_now"], 0)
        torch.cuda.synchronize()
        self.assertEqual(float(x.sum()), float(1 << 16))
        self.assertEqual(vt.stats()["ipc_exported_now"], 1)
        del x
        gc.collect()
        torch.cuda.ipc_collect()  # PyTorch frees the block: the child is done with both sends
        stats = vt.stats()
        self.assertEqual(stats["ipc_unshares"], unshares + 1, "the free ended the shares left")
        self.assertEqual(stats["ipc_exported_now"], 0)
        self.assertEqual(stats["ipc_shared"], 0, "a share was left: the memory is held")
        y = torch.zeros(1 << 16, device="cuda")  # the memory is in use again at once
        self.assertEqual(y.data_ptr(), ptr)
        del y

    def test_producer_drops_first(self):
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        x = torch.full((1 << 18,), 2.0, device="cuda")
        with Child("hold") as c:
            c.send(x)
            self.assertEqual(c.recv(), ("sum", 2.0 * (1 << 18)))
            del x  # PyTorch keeps the block allocated (its limbo) while the child holds it
            gc.collect()
            torch.cuda.ipc_collect()
            self.assertGreater(torch.cuda.memory_allocated(), base)
            c.send("drop")
            self.assertEqual(c.recv(), ("dropped", 0))
        self.settle()
        self.assertEqual(torch.cuda.memory_allocated(), base)
        self.assertEqual(vt.stats()["ipc_shared"], 0)

    def test_consumer_drops_first(self):
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        x = torch.full((1 << 18,), 3.0, device="cuda")
        with Child("read") as c:
            c.send(x)
            self.assertEqual(c.recv(), ("sum", 3.0 * (1 << 18)))
            self.assertEqual(c.recv(), ("dropped", 0))
        del x
        self.settle()
        self.assertEqual(torch.cuda.memory_allocated(), base)
        self.assertEqual(vt.stats()["ipc_shared"], 0)

    def test_many_sends_no_descriptor_growth(self):
        n = 1200
        with Child("many") as c:
            c.send(n)
            fds = []
            for i in range(n):
                t = torch.full((256,), float(i % 1000), device="cuda")
                c.send(t)
                del t
                self.assertEqual(c.recv(), i)
                if i == 99:
                    gc.collect()
                    torch.cuda.ipc_collect()
                    fds.append(fd_count())
            gc.collect()
            torch.cuda.ipc_collect()
            fds.append(fd_count())
            _, child_fds, child_stats = c.recv()
        self.settle()
        print("\ndescriptors: producer %s, consumer %s" % (fds, child_fds), file=sys.stderr)
        self.assertLessEqual(fds[1] - fds[0], 4, "the producer's descriptors grew: %s" % fds)
        self.assertLessEqual(child_fds[1] - child_fds[0], 4,
                             "the consumer's descriptors grew: %s" % child_fds)
        self.assertEqual(child_stats["ipc_open_calls"], n)
        self.assertEqual(child_stats["ipc_open_now"], 0)
        self.assertEqual(vt.stats()["ipc_shared"], 0)

    def test_handles_vpmm_cannot_open(self):
        def open_handle(handle):
            torch.UntypedStorage._new_shared_cuda(0, handle, 16, 0, b"", 0, bytes(64), False)

        with self.assertRaisesRegex(RuntimeError, "native CUDA allocator.*type 'c'"):
            open_handle(b"\x02c" + bytes(64))
        with self.assertRaisesRegex(RuntimeError, "expandable_segments:True.*type 'e'"):
            open_handle(b"\x02e" + bytes(28))
        with self.assertRaisesRegex(RuntimeError, "bare 64-byte cudaIpcMemHandle_t"):
            open_handle(bytes(64))
        with self.assertRaisesRegex(RuntimeError, "neither vpmm's"):
            open_handle(b"garbage!")
        # a vpmm handle whose producer has exited
        with Child("export_and_exit") as c:
            kind, handle = c.recv()
            self.assertEqual(kind, "handle")
        with self.assertRaisesRegex(RuntimeError, "has exited"):
            open_handle(handle)
        self.assertEqual(vt.stats()["ipc_open_now"], 0)

    def test_export_refused_with_vpmm_ipc_0(self):
        env = child_env()
        env["VPMM_IPC"] = "0"
        code = ("import torch\n"
                "x = torch.ones(10, device='cuda')\n"
                "try:\n"
                "    x.untyped_storage()._share_cuda_()\n"
                "except RuntimeError as e:\n"
                "    print('REFUSED', e)\n")
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=300)
        self.assertIn("REFUSED", out.stdout, out.stderr)
        self.assertIn("VPMM_IPC=0", out.stdout)


# ---- NCCL buffer registration (torch.distributed, 2 processes, spawn) ---------------------------


def free_port():
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_handle(t, handle=2 * MiB):
    """Whether tensor t's bytes lie in one 2 MiB-aligned window (one vpmm handle: NCCL 2.28
    registers a buffer only inside one physical handle)."""
    a = t.data_ptr()
    return a // handle == (a + t.numel() * t.element_size() - 1) // handle


def skewed_all_to_all(torch, dist, dev, rank, world):
    """all_to_all_single of 1 MiB chunks whose send and receive sides NCCL would register
    differently (INTERFACE.md §10.3): rank 1's chunks each lie inside one 2 MiB handle, rank 0's
    buffers start 0.5 MiB into one, so its chunk 1 crosses a handle's end. With NCCL's zero copy
    on, such a transfer never completes; vpmm's defaults turn it off. empty_cache() runs while
    each transfer is in flight (PyTorch's test_alltoall_ops_with_cudafree_race)."""
    keep = []

    def windowed(nbytes, skew):
        big = torch.empty(nbytes + 4 * MiB, dtype=torch.uint8, device=dev)
        keep.append(big)
        start = (-big.data_ptr()) % (2 * MiB) + skew
        return big[start:start + nbytes].view(torch.float32)

    skew = MiB // 2 if rank == 0 else 0
    inp, out = windowed(world * MiB, skew), windowed(world * MiB, skew)
    n = MiB // 4
    for it in range(4):
        for j in range(world):
            inp[j * n:(j + 1) * n].fill_(float(100 * it + 10 * rank + j))
        out.fill_(-1.0)
        work = dist.all_to_all_single(out, inp, async_op=True)
        torch.cuda.empty_cache()
        work.wait()
        torch.cuda.synchronize(dev)
        for j in range(world):
            if not bool((out[j * n:(j + 1) * n] == 100 * it + 10 * j + rank).all()):
                raise AssertionError("skewed all_to_all, step %d: chunk %d wrong" % (it, j))


def nccl_worker(mode, rank, world, port, outq):
    """One rank: collectives of several sizes on vpmm memory registered with NCCL, segments
    coming and going between them. mode "hook": TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1
    (every segment registered), then a skewed all-to-all; "hook-zero-copy": the same with
    VPMM_TORCH_NCCL_ZERO_COPY=1, without the all-to-all (it would hang: §10.3); "pool": a MemPool
    registered with register_mem_pool, then the skewed all-to-all on the pool's memory."""
    try:
        import torch
        import torch.distributed as dist
        import vpmm.torch as vtc

        if not vtc.is_enabled() or torch.cuda.get_allocator_backend() != "vpmm":
            raise RuntimeError("this rank does not run vpmm")
        torch.cuda.set_device(rank)
        dev = torch.device("cuda", rank)
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                                world_size=world, device_id=dev)
        seen = {}

        def collectives(step, sizes, alloc=lambda n, v: torch.full((n,), v, device=dev)):
            for nbytes in sizes:
                n = nbytes // 4
                x = alloc(n, float(rank + 1 + step))
                dist.all_reduce(x)
                want = float(sum(r + 1 + step for r in range(world)))
                if not bool((x == want).all()):
                    raise AssertionError("all_reduce of %d bytes: wrong result" % nbytes)
                out = alloc(world * n, -1.0)  # out of place: NCCL registers its buffers
                inp = alloc(n, float(10 * rank + step))
                dist.all_gather_into_tensor(out, inp)
                parts = [alloc(n, -1.0) for _ in range(world)]
                dist.all_gather(parts, inp)
                for r in range(world):
                    if not bool((out[r * n:(r + 1) * n] == 10 * r + step).all()):
                        raise AssertionError("all_gather_into_tensor of %d bytes: wrong" % nbytes)
                    if not bool((parts[r] == 10 * r + step).all()):
                        raise AssertionError("all_gather of %d bytes: wrong" % nbytes)
                del x, out, inp, parts

        sizes = (4096, 256 * 1024, MiB, 3 * MiB, 9 * MiB + 4096, 33 * MiB)
        seen["nccl_settings"] = vtc.nccl_settings()
        if mode in ("hook", "hook-zero-copy"):
            for step in range(3):
                collectives(step, sizes)
                torch.cuda.synchronize()
                torch.cuda.empty_cache()  # segments go (SEGMENT_FREE: deregistered) ...
                big = torch.empty(70 * MiB, dtype=torch.uint8, device=dev)  # ... and come
                big.fill_(1)
                del big
            # A buffer inside one handle, for NCCL's zero copy (out of place, Simple protocol).
            cands = [torch.empty(256 * 1024, device=dev) for _ in range(8)]  # 1 MiB each
            out = next((c for c in cands if one_handle(c)), None)
            if out is None:
                raise AssertionError("no 1 MiB tensor inside one 2 MiB handle")
            inp = torch.full((out.numel() // world,), float(rank + 7), device=dev)
            dist.all_gather_into_tensor(out, inp)
            for r in range(world):
                half = out.numel() // world
                if not bool((out[r * half:(r + 1) * half] == r + 7).all()):
                    raise AssertionError("all_gather into one handle: wrong")
            del cands, out, inp
            # Its segment deregistered while both ranks' NCCL proxies are up (left to the
            # communicators' destruction, NCCL 2.28 warns "deregister IPC buffer ... peerRank
            # ... failed": each rank's proxy may be gone when the other asks it to unmap).
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            dist.barrier()
            if mode == "hook":
                skewed_all_to_all(torch, dist, dev, rank, world)
        else:  # a MemPool registered with the communicator (pool mode)
            backend = dist.distributed_c10d._get_default_group()._get_backend(dev)
            pool = torch.cuda.MemPool()
            backend.register_mem_pool(pool)

            def in_pool(n, v):
                with torch.cuda.use_mem_pool(pool):
                    return torch.full((n,), v, device=dev)

            collectives(0, sizes, in_pool)
            with torch.cuda.use_mem_pool(pool):
                cands = [torch.empty(256 * 1024, device=dev) for _ in range(8)]
            out = next((c for c in cands if one_handle(c)), None)
            if out is None:
                raise AssertionError("no 1 MiB pool tensor inside one 2 MiB handle")
            inp = torch.full((out.numel() // world,), float(rank + 7), device=dev)
            dist.all_gather_into_tensor(out, inp)
            del cands, out, inp
            with torch.cuda.use_mem_pool(pool):
                skewed_all_to_all(torch, dist, dev, rank, world)
            torch.cuda.synchronize()
            backend.deregister_mem_pool(pool)
            del pool
        torch.cuda.synchronize()
        stats = vtc.stats(rank)
        snap = torch.cuda.memory_snapshot()
        seen["segments"] = len(snap)
        seen["stat_segments"] = torch.cuda.memory_stats(rank)["segment.all.current"]
        dist.barrier()
        dist.destroy_process_group()
        torch.cuda.synchronize()
        seen["check"] = vtc.check(rank)
        outq.put(("ok", rank, stats, seen))
    except BaseException:
        outq.put(("error", rank, traceback.format_exc(), None))


@unittest.skipUnless(HAVE_2_GPUS, "needs 2 CUDA devices" if HAVE_GPU else SKIP_WHY)
class NCCLRegistration(unittest.TestCase):
    """torch.distributed's NCCL backend registering vpmm's segments (INTERFACE.md §10): two
    spawned ranks, vpmm in both, all_reduce / all_gather of several sizes (some over several 2 MiB
    handles), segments freed and mapped again between them; NCCL's REG log must show every
    segment handed to ncclCommRegister, a 2 MiB handle among them, and no failed registration.
    By default (vpmm.torch's NCCL settings: NCCL_LOCAL_REGISTER=0, zero copy off) NCCL logs each
    one as skipped and imports nothing, and an all-to-all whose two sides NCCL would register
    differently completes with the right values; with VPMM_TORCH_NCCL_ZERO_COPY=1 NCCL registers
    them ("register comm ... buffer") and imports a buffer inside one handle ("IPC register
    buffer")."""

    TIMEOUT = 300

    @classmethod
    def setUpClass(cls):
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_nccl_available()):
            raise unittest.SkipTest("torch.distributed has no NCCL backend")

    def run_ranks(self, mode, extra_env):
        import torch.multiprocessing as mp

        logdir = tempfile.mkdtemp(prefix="vpmm-nccl-")
        env = child_env()
        env.update({
            "NCCL_DEBUG": "INFO",
            "NCCL_DEBUG_SUBSYS": "REG",
            "NCCL_DEBUG_FILE": os.path.join(logdir, "nccl.%h.%p.log"),
            "NCCL_NVLS_ENABLE": "0",  # no multicast (forbidden on the machines it ran on)
            "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
            "NCCL_PROTO": "Simple",  # the protocol NCCL uses registered buffers with
        })
        env.update(extra_env)
        ctx = mp.get_context("spawn")
        outq = ctx.Queue()
        port = free_port()
        procs = [ctx.Process(target=nccl_worker, args=(mode, r, 2, port, outq)) for r in range(2)]
        start_in_env(env, *procs)
        results = {}
        try:
            for _ in range(2):
                kind, rank, a, b = outq.get(timeout=self.TIMEOUT)
                if kind == "error":
                    self.fail("rank %d failed:\n%s" % (rank, a))
                results[rank] = (a, b)
        except queue.Empty:
            self.fail("the ranks said nothing for %d s" % self.TIMEOUT)
        finally:
            for p in procs:
                p.join(60)
                if p.is_alive():
                    p.kill()
        lines = []
        for name in sorted(os.listdir(logdir)):
            with open(os.path.join(logdir, name), errors="replace") as f:
                lines.extend(f.read().splitlines())
        shutil.rmtree(logdir, ignore_errors=True)
        return results, lines

    def check(self, results, lines, zero_copy=False):
        for rank, (stats, seen) in results.items():
            self.assertEqual(seen["nccl_settings"], {} if zero_copy else
                             {"NCCL_LOCAL_REGISTER": "0", "NCCL_GRAPH_REGISTER": "0"},
                             "rank %d: vpmm.torch.nccl_settings()" % rank)
            self.assertGreaterEqual(stats["trace_trackers"], 2, "rank %d: no trackers" % rank)
            self.assertEqual(stats["snapshot_segments"], "handles")
            self.assertEqual(seen["segments"], seen["stat_segments"],
                             "rank %d: the snapshot's segments are not the handles" % rank)
            self.assertEqual(seen["check"], 0, "rank %d: vpmm invariants violated" % rank)
        # NCCL 2.28's REG lines: ncclCommRegister registers ("register comm ... buffer") or, with
        # NCCL_LOCAL_REGISTER=0 (vpmm's default), logs each buffer it is handed and skips it
        regs = [ln for ln in lines if "register comm" in ln and " buffer " in ln]
        skipped = [ln for ln in lines if "Skipping registration for buffer" in ln]
        ipc = [ln for ln in lines if "IPC register buffer" in ln or "IPC reuse buffer" in ln]
        bad = [ln for ln in lines if "failed" in ln.lower() and "regist" in ln.lower()]
        summary = "%d log lines, %d ncclCommRegister, %d skipped, %d IPC registrations" % (
            len(lines), len(regs), len(skipped), len(ipc))
        print("\nNCCL REG: " + summary, file=sys.stderr)
        handed = regs + skipped  # every segment the allocator reported reaches NCCL either way
        self.assertTrue(any(" size %d" % (2 * MiB) in ln for ln in handed),
                        "no 2 MiB segment (one vpmm handle) handed to NCCL (%s)" % summary)
        if zero_copy:
            self.assertTrue(regs, "no ncclCommRegister in NCCL's log (%s)" % summary)
            self.assertEqual(skipped, [], "registrations skipped with zero copy on")
            self.assertTrue(ipc, "no buffer registered for zero copy (%s)" % summary)
        else:
            self.assertTrue(all("LocalRegister=0" in ln for ln in skipped), skipped[:3])
            self.assertEqual(regs, [], "NCCL registered a buffer with zero copy off")
            self.assertEqual(ipc, [], "a buffer imported for zero copy with it off (%s)" % summary)
        self.assertEqual(bad, [], "registrations failed")

    def test_hook_registers_every_segment(self):
        results, lines = self.run_ranks(
            "hook", {"TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK": "1"})
        self.check(results, lines)

    def test_hook_zero_copy_asked_for(self):
        results, lines = self.run_ranks(
            "hook-zero-copy", {"TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK": "1",
                               "VPMM_TORCH_NCCL_ZERO_COPY": "1"})
        self.check(results, lines, zero_copy=True)

    def test_mempool_registered(self):
        results, lines = self.run_ranks("pool", {})
        self.check(results, lines)


if __name__ == "__main__":
    unittest.main()
