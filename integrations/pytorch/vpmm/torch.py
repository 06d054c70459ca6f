"""vpmm.torch — vpmm as PyTorch's CUDA allocator, in one line.

    import vpmm.torch
    vpmm.torch.enable()          # before anything initialises CUDA

From then on every CUDA tensor, cuBLAS workspace, CUDA graph capture and graph tree of the process
gets its memory from vpmm (one pool per device, created by the device's first allocation), and
PyTorch's own memory API works on it: torch.cuda.memory_stats(), memory_allocated(),
max_memory_reserved(), reset_peak_memory_stats(), empty_cache() (gives free pages back),
set_per_process_memory_fraction() (caps what vpmm maps), memory._snapshot(),
memory._record_memory_history(), torch.OutOfMemoryError with vpmm's report (also for a request
larger than vpmm's address range: "CUDA out of memory. Tried to allocate ... on device N"),
Tensor.record_stream, torch.cuda.graph(pool=...), graph_pool_handle(),
torch.compile(mode="reduce-overhead").

Several GPUs in one process work as with PyTorch's own allocator: copies between devices
(a.to("cuda:1"), copy_ of non-contiguous views — PyTorch's enablePeerAccess also gives the
copying device access to the other device's vpmm pool), a tensor freed while another device is
current, record_stream with a stream of another device, and every statistic, empty_cache, memory
fraction and OutOfMemoryError per device (the functions below take device=).

CUDA tensors travel between processes through torch.multiprocessing (CUDA IPC): the handle is
vpmm's (vpmm_ipc_export), the consumer maps the same memory (vpmm_ipc_open). Both processes must
run vpmm (enable() in each, or VPMM_TORCH_ENABLE=1 with autoenable/ on PYTHONPATH: the consumer
refuses handles of PyTorch's own allocator, naming their format). PyTorch's reference counts keep
a shared block allocated until every consumer has released it; its free then ends vpmm's shares
of it (also those of sends a consumer's cache absorbed), and the memory is reused at once.

With torch.distributed's NCCL backend and TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1, every
segment vpmm maps (one physical handle at its address) is registered with NCCL and deregistered
before it moves or goes; snapshots then list those segments (integrations/pytorch/INTERFACE.md
§10). NCCL does not use them for zero copy: enable() sets NCCL_LOCAL_REGISTER=0 and
NCCL_GRAPH_REGISTER=0 where the environment does not set them (NCCL then copies through its own
buffers, as it does for the native allocator's memory), because NCCL 2.28 registers a buffer only
inside one physical handle and a send/recv whose one side is registered and the other not never
completes (§10.3); VPMM_TORCH_NCCL_ZERO_COPY=1 leaves NCCL as it is configured. nccl_settings()
says what enable() set (in os.environ: child processes inherit it).

The allocator is libvpmm_torch_backend.so (integrations/pytorch/vpmm_cuda_allocator.cpp), built
against the installed PyTorch by `pip install --no-build-isolation ./integrations/pytorch`
(setup.py: next to this file) or by the repository's CMake. enable() looks for it, in order: its
`library` argument; $VPMM_TORCH_BACKEND; next to this file; the build tree of the repository this
file lives in (build/integrations/); the dynamic linker's search path (an installed vpmm). A
backend serves the PyTorch major.minor it was compiled against: importing this module with a
pip-built backend and another PyTorch raises ImportError, and enable() passes over a library
built for another PyTorch, saying so (backend_info() tells which PyTorch a backend is for).

The extras read or act on the pool of one device (default: the current one): stats(), trim(),
dump(), check(). VPMM_* environment variables configure the pools (the repository's README).
The pools run on vpmm's CUDA backend, its default (VPMM_BACKEND=host is for vpmm's own tests).
"""

import ctypes
import json
import os
import re
import sys

__all__ = ["enable", "is_enabled", "library_path", "backend_info", "nccl_settings", "stats",
           "trim", "dump", "check"]

_LIB_NAME = "libvpmm_torch_backend.so"
_ABI = 2  # vpmm_torch_backend_abi() of the backend this package drives
_lib = None
_lib_path = None
_nccl_set = {}

# NCCL's use of registered buffers for zero copy, off on vpmm's memory unless asked for
# (INTERFACE.md §10.3): eager collectives and send/recv (NCCL_LOCAL_REGISTER), and those captured
# in CUDA graphs (NCCL_GRAPH_REGISTER, which registers a buffer's first handle only).
_NCCL_ZERO_COPY_OFF = (("NCCL_LOCAL_REGISTER", "0"), ("NCCL_GRAPH_REGISTER", "0"))
_HOOK = "TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK"


def _nccl_zero_copy(environ):
    """Whether VPMM_TORCH_NCCL_ZERO_COPY asks to leave NCCL's registration alone (0 or 1; unset
    is 0). Raises ValueError, naming the variable, for any other value."""
    value = environ.get("VPMM_TORCH_NCCL_ZERO_COPY", "0")
    if value not in ("0", "1"):
        raise ValueError("VPMM_TORCH_NCCL_ZERO_COPY=%r: expected 0 (NCCL copies through its own "
                         "buffers on vpmm's memory, the default) or 1 (NCCL left as configured)"
                         % value)
    return value == "1"


def _nccl_defaults(environ, zero_copy):
    """Turns NCCL's zero copy off in environ where environ does not set it and zero_copy is
    false; returns {name: value} of what it set."""
    if zero_copy:
        return {}
    done = {}
    for name, value in _NCCL_ZERO_COPY_OFF:
        if name not in environ:
            environ[name] = value
            done[name] = value
    return done


def _release(version):
    """(major, minor) of a PyTorch version string ("2.11.0+cu130" -> (2, 11)), or None."""
    m = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def _torch_mismatch(built, running):
    """None when a backend compiled against PyTorch `built` serves PyTorch `running` (same
    major.minor), else the reason, with what to do."""
    if _release(built) is not None and _release(built) == _release(running):
        return None
    return ("built for PyTorch %s, and this is PyTorch %s: rebuild it with this PyTorch "
            "(pip install --no-build-isolation ./integrations/pytorch in vpmm's checkout)"
            % (built, running))


def _check_pip_backend():
    """A backend that `pip install` built next to this file serves the PyTorch it was built for
    only: ImportError, saying both versions, for any other."""
    try:
        from vpmm import _backend_info
    except ImportError:
        return  # no pip-built backend: a CMake build's is checked when enable() loads it
    import torch
    why = _torch_mismatch(_backend_info.TORCH_VERSION, torch.__version__)
    if why is not None:
        raise ImportError("vpmm.torch: the backend installed with this package (%s) was %s"
                          % (os.path.join(os.path.dirname(os.path.abspath(__file__)), _LIB_NAME),
                             why))


def _candidates(library):
    if library:
        return [library]
    env = os.environ.get("VPMM_TORCH_BACKEND")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.abspath(os.path.join(here, os.pardir, os.pardir, os.pardir))
    return [os.path.join(here, _LIB_NAME),
            os.path.join(repo, "build", "integrations", _LIB_NAME),
            _LIB_NAME]


def _load(library):
    tried = []
    for path in _candidates(library):
        if os.sep in path and not os.path.exists(path):
            tried.append(path + " (no such file)")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
            continue
        abi = getattr(lib, "vpmm_torch_backend_abi", None)
        if abi is None or abi() != _ABI:
            tried.append("%s (a build of the backend for another version of this package: "
                         "rebuild it)" % path)
            continue
        why = _torch_mismatch(_built_for(lib), _torch_version())
        if why is not None:
            tried.append("%s (%s)" % (path, why))
            continue
        lib.vpmm_torch_backend_install.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.vpmm_torch_backend_install.restype = ctypes.c_int
        lib.vpmm_torch_backend_trim.argtypes = [ctypes.c_int, ctypes.c_size_t]
        lib.vpmm_torch_backend_trim.restype = ctypes.c_longlong
        lib.vpmm_torch_backend_dump.argtypes = [ctypes.c_int, ctypes.c_char_p]
        lib.vpmm_torch_backend_dump.restype = ctypes.c_int
        lib.vpmm_torch_backend_check.argtypes = [ctypes.c_int]
        lib.vpmm_torch_backend_check.restype = ctypes.c_long
        lib.vpmm_torch_backend_stats_json.argtypes = [ctypes.c_int, ctypes.c_char_p,
                                                      ctypes.c_size_t]
        lib.vpmm_torch_backend_stats_json.restype = ctypes.c_long
        return lib, path
    raise RuntimeError(
        "vpmm.torch: cannot load %s; build it with cmake where PyTorch is installed "
        "(cmake -S . -B build && cmake --build build --target vpmm_torch_backend) or set "
        "VPMM_TORCH_BACKEND to its path. Tried: %s" % (_LIB_NAME, "; ".join(tried)))


def _built_for(lib):
    """The PyTorch version a loaded backend was compiled against ("?" for a build older than
    vpmm_torch_backend_torch_version)."""
    fn = getattr(lib, "vpmm_torch_backend_torch_version", None)
    if fn is None:
        return "?"
    fn.restype = ctypes.c_char_p
    return fn().decode()


def _torch_version():
    import torch
    return torch.__version__


def backend_info(library=None):
    """Which backend enable() uses (or would use) and the PyTorch it serves: a dict with
    `path`, `built_for` (the PyTorch version it was compiled against), `supports` ("2.11": that
    major.minor) and `torch` (this process's). Loads the library (not installed as the
    allocator); raises RuntimeError, as enable() would, when none fits."""
    running = _torch_version()  # torch's libraries first: the backend links them
    lib, path = (_lib, _lib_path) if _lib is not None else _load(library)
    built = _built_for(lib)
    rel = _release(built)
    return {"path": path, "built_for": built,
            "supports": "%d.%d" % rel if rel else "?", "torch": running}


def enable(library=None):
    """Makes vpmm PyTorch's CUDA allocator. Call it before anything initialises CUDA (a CUDA
    tensor, torch.cuda.set_device, torch.cuda.init): PyTorch cannot change the allocator of a
    process that has handed out CUDA memory, and this raises RuntimeError then. Calling it again
    does nothing. `library` is the path of libvpmm_torch_backend.so (default: searched)."""
    global _lib, _lib_path
    if _lib is not None:
        return
    try:
        import torch
    except ImportError as e:
        raise ImportError("vpmm.torch needs PyTorch: %s" % e) from e

    if torch.cuda.is_initialized():
        raise RuntimeError(
            "vpmm.torch.enable() must run before CUDA is initialised in this process (before "
            "the first CUDA tensor, torch.cuda.set_device or torch.cuda.init): PyTorch cannot "
            "swap the allocator of a process that has already allocated CUDA memory")
    try:
        zero_copy = _nccl_zero_copy(os.environ)
    except ValueError as e:
        raise RuntimeError("vpmm.torch.enable(): %s" % e) from None
    lib, path = _load(library)
    err = ctypes.create_string_buffer(2048)
    if lib.vpmm_torch_backend_install(err, len(err)) != 0:
        raise RuntimeError("vpmm.torch.enable(): " + err.value.decode(errors="replace"))
    _lib, _lib_path = lib, path
    # Before any communicator exists (NCCL reads its settings when the first one is made).
    _nccl_set.update(_nccl_defaults(os.environ, zero_copy))
    if "NCCL_LOCAL_REGISTER" in _nccl_set and os.environ.get(_HOOK, "0") not in ("", "0"):
        sys.stderr.write(
            "vpmm.torch: %s=1: NCCL registers vpmm's segments but copies through its own buffers "
            "(NCCL_LOCAL_REGISTER=0: a buffer over two of vpmm's handles cannot be registered, "
            "and a send/recv registered on one side only never completes); "
            "VPMM_TORCH_NCCL_ZERO_COPY=1 turns NCCL's zero copy back on\n" % _HOOK)


def is_enabled():
    """Whether enable() has made vpmm PyTorch's CUDA allocator in this process."""
    return _lib is not None


def library_path():
    """The path enable() loaded the backend from (None before enable())."""
    return _lib_path


def nccl_settings():
    """The NCCL environment variables enable() set ({name: value}; empty before enable(), with
    VPMM_TORCH_NCCL_ZERO_COPY=1, or where the environment set them itself)."""
    return dict(_nccl_set)


def _device(device):
    if _lib is None:
        raise RuntimeError("vpmm.torch: call vpmm.torch.enable() first")
    import torch

    if device is None:
        return torch.cuda.current_device()
    d = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    return d.index if d.index is not None else torch.cuda.current_device()


def _no_pool(device):
    return RuntimeError("vpmm.torch: device %d has no vpmm pool yet (nothing was allocated on "
                        "it)" % device)


def stats(device=None):
    """vpmm's own statistics of the device's pool (vpmm_stats_t's fields, as a dict): mapped and
    live bytes and their peaks, free and hole bytes, defragmentation counters, graph pools; the
    devices given access to it (peers, peer_devices, peer_grants); CUDA IPC (ipc_shared: blocks
    other processes may still map, ipc_exports, ipc_imports, ipc_imported_bytes; and the
    backend's ipc_open_calls, ipc_close_calls, ipc_open_now, ipc_exported_now, ipc_unshares:
    frees that ended an exported block's shares); memory_fraction; trace_trackers (allocator
    trace trackers attached: torch.distributed's NCCL registration) and snapshot_segments
    ("handles" or "runs": what memory_snapshot() lists)."""
    dev = _device(device)
    cap = 4096
    while True:
        buf = ctypes.create_string_buffer(cap)
        n = _lib.vpmm_torch_backend_stats_json(dev, buf, cap)
        if n < 0:
            raise _no_pool(dev)
        if n < cap:
            return json.loads(buf.value.decode())
        cap = n + 1


def trim(target_bytes=0, device=None):
    """Gives the device pool's free pages back to the driver until it maps at most target_bytes
    (0: every free page whose work is done). Returns the bytes given back.
    torch.cuda.empty_cache() does the same for every device."""
    dev = _device(device)
    n = _lib.vpmm_torch_backend_trim(dev, target_bytes)
    if n < 0:
        raise _no_pool(dev)
    return n


def dump(path=None, device=None):
    """Writes the device pool's regions, streams and graph pools as text to path (None:
    stderr)."""
    dev = _device(device)
    if _lib.vpmm_torch_backend_stats_json(dev, None, 0) < 0:
        raise _no_pool(dev)
    st = _lib.vpmm_torch_backend_dump(dev, os.fsencode(path) if path else None)
    if st < 0:
        raise OSError("vpmm.torch.dump: cannot write %s" % path)
    if st != 0:
        raise RuntimeError("vpmm.torch.dump failed (vpmm status %d)" % st)


def check(device=None):
    """Checks every invariant of the device's pool; returns how many are violated (0), each
    printed on stderr."""
    dev = _device(device)
    n = _lib.vpmm_torch_backend_check(dev)
    if n < 0:
        raise _no_pool(dev)
    return n


_check_pip_backend()
