"""vpmm — a GPU memory allocator built on CUDA virtual memory, aware of CUDA graphs.

This package is vpmm's Python side; the allocator itself is C (the repository's src/). One
submodule, imported on its own so that `import vpmm` never imports PyTorch:

    import vpmm.torch
    vpmm.torch.enable()   # before CUDA is initialised: vpmm is PyTorch's CUDA allocator

See vpmm/torch.py and integrations/pytorch/README.md.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
