"""sitecustomize.py — vpmm as PyTorch's allocator in every Python process of a run, for test
suites and launchers that start processes of their own (PyTorch's test files, torchrun).

With this directory and integrations/pytorch on PYTHONPATH and VPMM_TORCH_ENABLE=1, each Python
process runs vpmm.torch.enable() as it starts, before any user code can initialise CUDA:

    VPMM_TORCH_ENABLE=1 \\
    PYTHONPATH=integrations/pytorch/autoenable:integrations/pytorch python3 test_something.py

Without VPMM_TORCH_ENABLE=1 it does nothing (and imports nothing). A process that cannot enable
vpmm stops with the reason: a run that silently fell back to the native allocator would measure
the wrong thing. (Python imports the first sitecustomize on its path: this one shadows the
system's, if there is one.)
"""
import os

if os.environ.get("VPMM_TORCH_ENABLE") == "1":
    try:
        import vpmm.torch

        vpmm.torch.enable()
    except Exception as e:  # Python would print a line and go on: stop instead
        import sys

        sys.stderr.write("vpmm autoenable (VPMM_TORCH_ENABLE=1): %s: %s\n"
                         % (type(e).__name__, e))
        raise SystemExit(70)
