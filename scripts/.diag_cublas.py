import os, sys
sys.path.insert(0, "integrations/pytorch")
import torch
use_vpmm = os.environ.get("DIAG_VPMM") == "1"
if use_vpmm:
    import vpmm.torch as vt
    vt.enable()
torch.backends.cuda.preferred_blas_library("cublas")
a = torch.rand((1024, 512), device="cuda"); b = torch.rand((512, 64), device="cuda")
torch.mm(a, b)
free0, total = torch.cuda.mem_get_info()
def show(i):
    free, _ = torch.cuda.mem_get_info()
    line = f"iter {i}: used +{(free0 - free) / 2**20:.0f} MiB, reserved {torch.cuda.memory_reserved() / 2**20:.0f} MiB, allocated {torch.cuda.memory_allocated() / 2**20:.1f} MiB"
    if use_vpmm:
        s = vt.stats()
        line += f", vpmm mapped {s['mapped_bytes'] / 2**20:.0f} MiB private {s.get('private_mapped_bytes', 0) / 2**20:.0f} MiB graph_pools {s.get('graph_pools')} live {s['live_bytes'] / 2**20:.1f} MiB"
    print(line, flush=True)
for i in range(100):
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        torch.mm(a, b)
    g.replay()
    if i % 20 == 0 or i == 99:
        show(i)
del g
torch.cuda.synchronize()
show("end")
