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

Needs PyTorch, a CUDA device and libvpmm_torch_backend.so (VPMM_TORCH_BACKEND or the build
tree); without them every test reports itself skipped. Run:

    PYTHONPATH=integrations/pytorch python3 integrations/pytorch/test_backend.py -v
"""
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

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


if __name__ == "__main__":
    unittest.main()
