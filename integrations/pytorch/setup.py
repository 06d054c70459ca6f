"""setup.py — builds vpmm's PyTorch backend against the PyTorch of this Python, in one command:

    pip install --no-build-isolation ./integrations/pytorch     # from a checkout of vpmm

`--no-build-isolation` lets the build see the PyTorch that is installed (as PyTorch extensions
do); nothing is downloaded. What it needs is what building any PyTorch C++ extension needs: a C
and C++ compiler and the CUDA toolkit's headers (CUDA_HOME, else /usr/local/cuda; only headers:
nothing is linked from the toolkit). It compiles vpmm's C library (the source lists of the
repository's CMakeLists.txt and integrations/CMakeLists.txt, read from them so that the two
builds cannot drift apart) and the C++ backend into vpmm/libvpmm_torch_backend.so, installed next
to the Python package, and writes vpmm/_backend_info.py: the PyTorch version it was built for,
which `import vpmm.torch` compares with the PyTorch it finds (integrations/pytorch/README.md).

VPMM_TORCH_BACKEND_BUILD=0 installs the Python package alone (the backend then comes from a CMake
build: $VPMM_TORCH_BACKEND or the build tree). Without an importable torch the install fails and
says so, rather than installing a package that cannot enable vpmm.
"""

import os
import re
import sys

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, os.pardir, os.pardir))
LIB_NAME = "libvpmm_torch_backend.so"


def cmake_paths(path, command, name):
    """The paths listed by `COMMAND(NAME ...)` in a CMakeLists.txt (`set` with a variable, or
    `add_library` with a target and its kind), absolute; exits naming what moved."""
    with open(path) as f:
        text = f.read()
    kind = r"\w+\s+" if command == "add_library" else ""
    m = re.search(r"%s\(%s\s+%s(.*?)\)" % (command, re.escape(name), kind), text, re.S)
    if m is None:
        sys.exit("setup.py: %s has no %s(%s ...): the source lists moved" % (path, command, name))
    base = os.path.dirname(path)
    return [os.path.join(base, w.replace("${CMAKE_CURRENT_SOURCE_DIR}/", "").strip('"'))
            for w in m.group(1).split() if not w.startswith("#")]


def cmake_list(path, name):
    """The file names of `set(NAME ...)` in a CMakeLists.txt, absolute."""
    return cmake_paths(path, "set", name)


def cmake_target_sources(path, target):
    """The sources of `add_library(TARGET KIND a.c b.c ...)` in a CMakeLists.txt, absolute."""
    return cmake_paths(path, "add_library", target)


def cuda_include():
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    inc = os.path.join(home, "include")
    if not os.path.exists(os.path.join(inc, "cuda.h")):
        sys.exit("setup.py: no cuda.h in %s: set CUDA_HOME to the CUDA toolkit (its headers are "
                 "needed to build the backend, as for any PyTorch CUDA extension)" % inc)
    return inc


def backend_build():
    """(ext_modules, cmdclass) for the backend, or exits saying what is missing."""
    try:
        import torch
        from torch.utils.cpp_extension import BuildExtension, CppExtension
    except ImportError as e:
        sys.exit("setup.py: vpmm's PyTorch backend is built against the installed PyTorch, and "
                 "this Python cannot import torch (%s). Install PyTorch first and run pip with "
                 "--no-build-isolation, or set VPMM_TORCH_BACKEND_BUILD=0 for the Python package "
                 "alone." % e)
    if not torch.version.cuda:
        sys.exit("setup.py: this PyTorch (%s) is not a CUDA build: vpmm is a CUDA allocator"
                 % torch.__version__)
    top = os.path.join(REPO, "CMakeLists.txt")
    integ = os.path.join(REPO, "integrations", "CMakeLists.txt")
    cuda_inc = cuda_include()
    c_sources = (cmake_list(top, "VPMM_CORE_SOURCES") + cmake_list(top, "VPMM_GRAPH_SOURCES") +
                 cmake_target_sources(integ, "vpmm_torch_adapter"))
    includes = ([os.path.join(REPO, "include")] + cmake_list(top, "VPMM_INTERNAL_INCLUDE_DIRS") +
                [HERE, cuda_inc])
    macros = [("_GNU_SOURCE", None), ("VPMM_HAVE_GRAPHS", "1"), ("VPMM_ASSERT_LEVEL", "0")]
    if os.path.exists(os.path.join(cuda_inc, "nvtx3", "nvToolsExt.h")):
        macros.append(("VPMM_HAVE_NVTX", "1"))
    # The C++ sources relative to this file: setuptools refuses absolute paths in setup()'s
    # arguments (the C library's are outside it: BuildBackend compiles them itself).
    cpp_sources = [os.path.relpath(p, HERE)
                   for p in cmake_target_sources(integ, "vpmm_torch_backend")]
    version_script = os.path.join(HERE, "vpmm_torch_backend.map")
    ext = CppExtension(
        "vpmm.libvpmm_torch_backend",
        sources=cpp_sources,
        include_dirs=[HERE, os.path.join(REPO, "include"), cuda_inc],
        libraries=["c10_cuda", "torch_cuda", "dl", "pthread"],
        extra_compile_args={"cxx": ["-O2", "-fvisibility=hidden", "-fvisibility-inlines-hidden"]},
        # The CUDA runtime calls resolve at load time to the libcudart PyTorch loads (as in the
        # CMake build): linking the toolkit's would put two in one process.
        extra_link_args=["-Wl,--version-script=" + version_script])

    class BuildBackend(BuildExtension):
        """PyTorch's extension build, after vpmm's C library (compiled here as C11 with a plain C
        compiler: PyTorch's build would pass its C++ flags to .c files too), writing the library
        under the name vpmm.torch loads and recording which PyTorch it was built for."""

        def build_extensions(self):
            from distutils.ccompiler import new_compiler
            from distutils.sysconfig import customize_compiler

            cc = new_compiler(force=self.force)
            customize_compiler(cc)
            objects = cc.compile(c_sources, output_dir=os.path.join(self.build_temp, "vpmm_c"),
                                 macros=macros, include_dirs=includes, debug=self.debug,
                                 extra_postargs=["-std=c11", "-O2", "-fPIC",
                                                 "-fvisibility=hidden", "-Wall"])
            for e in self.extensions:
                e.extra_objects = objects + list(e.extra_objects or [])
            super().build_extensions()

        def get_ext_filename(self, fullname):
            # Asked with the full name and (get_ext_fullpath) with its last part alone.
            parts = fullname.split(".")
            if parts[-1] == "libvpmm_torch_backend":
                return os.path.join(*(parts[:-1] + [LIB_NAME]))
            return super().get_ext_filename(fullname)

        def run(self):
            super().run()
            info = os.path.join(self.build_lib, "vpmm", "_backend_info.py")
            with open(info, "w") as f:
                f.write('"""Written by setup.py: the PyTorch this backend was built for."""\n'
                        "TORCH_VERSION = %r\nCUDA_VERSION = %r\n"
                        % (torch.__version__, torch.version.cuda))
            if self.inplace:  # pip install -e: the package directory is the build
                with open(info) as src, open(os.path.join(HERE, "vpmm", "_backend_info.py"),
                                              "w") as dst:
                    dst.write(src.read())

    return [ext], {"build_ext": BuildBackend}


def main():
    if os.environ.get("VPMM_TORCH_BACKEND_BUILD", "1") == "0":
        setup()
    else:
        exts, cmds = backend_build()
        setup(ext_modules=exts, cmdclass=cmds)


if __name__ == "__main__":  # as pip's build backend runs it (tests import it for its lists)
    main()
