#!/usr/bin/env python3
"""test_python_package.py — the Python package vpmm (integrations/pytorch/vpmm) where PyTorch is
not installed, as on the CI machine: `import vpmm` imports no torch; vpmm.torch's extras refuse
before enable(); enable() explains that PyTorch is missing; the NCCL settings enable() makes
(zero copy off where the environment does not set it; VPMM_TORCH_NCCL_ZERO_COPY); the library
search order ($VPMM_TORCH_BACKEND, the package's directory, the build tree, the linker's path);
the version matches the project's (include/vpmm.h); sitecustomize.py does nothing without
VPMM_TORCH_ENABLE=1 and stops the process with the reason when it cannot enable vpmm; the
one-command install: setup.py's source lists are the CMake files' (every C file of src/, graph/
and checkpoint/ in them), and a pip-built backend serves the PyTorch major.minor it was built for
only (a stand-in torch module: another is refused at import, naming both). (With PyTorch and a
GPU, integrations/pytorch/test_backend.py covers the backend itself, pip_check.sh the install.)
Run by ctest.
"""
import os
import re
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, os.pardir))
PKG = os.path.join(REPO, "integrations", "pytorch")
sys.path.insert(0, PKG)

import vpmm  # noqa: E402
import vpmm.torch as vt  # noqa: E402

try:
    import torch  # noqa: F401

    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False


def python(code, **env):
    e = dict(os.environ)
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True)


class Package(unittest.TestCase):
    def test_version_is_the_projects(self):
        # The project's version is written in include/vpmm.h (CMake reads it from there).
        with open(os.path.join(REPO, "include", "vpmm.h")) as f:
            header = f.read()
        parts = [re.search(r"#define VPMM_VERSION_%s (\d+)" % p, header).group(1)
                 for p in ("MAJOR", "MINOR", "PATCH")]
        version = ".".join(parts)
        self.assertEqual(vpmm.__version__, version)
        with open(os.path.join(PKG, "pyproject.toml")) as f:
            self.assertIn('version = "%s"' % version, f.read())

    def test_import_vpmm_imports_no_torch(self):
        r = python("import sys, vpmm, vpmm.torch; print('torch' in sys.modules)",
                   PYTHONPATH=PKG)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "False")

    def test_extras_refuse_before_enable(self):
        self.assertFalse(vt.is_enabled())
        self.assertIsNone(vt.library_path())
        for call in (vt.stats, vt.trim, vt.dump, vt.check):
            with self.assertRaisesRegex(RuntimeError, r"enable\(\) first"):
                call()

    @unittest.skipIf(HAVE_TORCH, "PyTorch is installed")
    def test_enable_without_torch(self):
        with self.assertRaisesRegex(ImportError, "needs PyTorch"):
            vt.enable()
        self.assertFalse(vt.is_enabled())

    def test_library_search_order(self):
        old = os.environ.pop("VPMM_TORCH_BACKEND", None)
        try:
            self.assertEqual(vt._candidates("/x/lib.so"), ["/x/lib.so"])
            default = vt._candidates(None)
            self.assertEqual(default[0], os.path.join(PKG, "vpmm", "libvpmm_torch_backend.so"))
            self.assertEqual(default[1], os.path.join(REPO, "build", "integrations",
                                                      "libvpmm_torch_backend.so"))
            self.assertEqual(default[2], "libvpmm_torch_backend.so")
            os.environ["VPMM_TORCH_BACKEND"] = "/y/lib.so"
            self.assertEqual(vt._candidates(None), ["/y/lib.so"])
        finally:
            os.environ.pop("VPMM_TORCH_BACKEND", None)
            if old is not None:
                os.environ["VPMM_TORCH_BACKEND"] = old

    def test_missing_library_is_explained(self):
        with self.assertRaisesRegex(RuntimeError, "cannot load libvpmm_torch_backend.so.*"
                                    "/nonexistent/libvpmm_torch_backend.so \\(no such file\\)"):
            vt._load("/nonexistent/libvpmm_torch_backend.so")

    def test_nccl_zero_copy_off_by_default(self):
        # enable() turns NCCL's zero copy off where the environment does not set it
        # (INTERFACE.md §10.3): both variables, once, and nothing the user set is changed.
        env = {}
        self.assertFalse(vt._nccl_zero_copy(env))
        self.assertEqual(vt._nccl_defaults(env, False),
                         {"NCCL_LOCAL_REGISTER": "0", "NCCL_GRAPH_REGISTER": "0"})
        self.assertEqual(env, {"NCCL_LOCAL_REGISTER": "0", "NCCL_GRAPH_REGISTER": "0"})
        self.assertEqual(vt._nccl_defaults(env, False), {})  # already set: nothing more
        env = {"NCCL_LOCAL_REGISTER": "1"}
        self.assertEqual(vt._nccl_defaults(env, False), {"NCCL_GRAPH_REGISTER": "0"})
        self.assertEqual(env["NCCL_LOCAL_REGISTER"], "1")
        self.assertEqual(vt.nccl_settings(), {})  # before enable(): nothing set

    def test_nccl_zero_copy_asked_for(self):
        env = {"VPMM_TORCH_NCCL_ZERO_COPY": "1"}
        self.assertTrue(vt._nccl_zero_copy(env))
        self.assertEqual(vt._nccl_defaults(env, True), {})
        self.assertEqual(env, {"VPMM_TORCH_NCCL_ZERO_COPY": "1"})
        self.assertFalse(vt._nccl_zero_copy({"VPMM_TORCH_NCCL_ZERO_COPY": "0"}))
        for bad in ("yes", "", "2", " 1"):
            with self.assertRaisesRegex(ValueError, "VPMM_TORCH_NCCL_ZERO_COPY=.*expected 0"):
                vt._nccl_zero_copy({"VPMM_TORCH_NCCL_ZERO_COPY": bad})

    def test_sitecustomize_off_by_default(self):
        path = os.path.join(PKG, "autoenable") + os.pathsep + PKG
        r = python("import sys; print('vpmm.torch' in sys.modules)", PYTHONPATH=path,
                   VPMM_TORCH_ENABLE="0")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "False")

    @unittest.skipIf(HAVE_TORCH, "PyTorch is installed")
    def test_sitecustomize_stops_a_process_it_cannot_enable(self):
        path = os.path.join(PKG, "autoenable") + os.pathsep + PKG
        r = python("print('ran')", PYTHONPATH=path, VPMM_TORCH_ENABLE="1")
        self.assertNotIn("ran", r.stdout)
        self.assertIn("needs PyTorch", r.stderr)


class PipBuild(unittest.TestCase):
    """The one-command install (integrations/pytorch/setup.py) and the PyTorch version rule, where
    no PyTorch is installed: the rule and the refusal with a stand-in torch module."""

    def test_torch_version_rule(self):
        self.assertEqual(vt._release("2.11.0+cu130"), (2, 11))
        self.assertIsNone(vt._release("?"))
        self.assertIsNone(vt._torch_mismatch("2.11.0", "2.11.1+cu130"))
        why = vt._torch_mismatch("2.11.0", "2.10.2")
        self.assertIn("built for PyTorch 2.11.0, and this is PyTorch 2.10.2", why)
        self.assertIn("pip install --no-build-isolation ./integrations/pytorch", why)
        self.assertIsNotNone(vt._torch_mismatch("?", "2.11.0"))  # a build that cannot say

    def _package_copy(self, tmp, built_for):
        import shutil
        shutil.copytree(os.path.join(PKG, "vpmm"), os.path.join(tmp, "pkg", "vpmm"))
        with open(os.path.join(tmp, "pkg", "vpmm", "_backend_info.py"), "w") as f:
            f.write("TORCH_VERSION = %r\nCUDA_VERSION = '13.0'\n" % built_for)
        os.makedirs(os.path.join(tmp, "faketorch", "torch"))
        with open(os.path.join(tmp, "faketorch", "torch", "__init__.py"), "w") as f:
            f.write("__version__ = '2.11.0+cu130'\n")
        return os.pathsep.join([os.path.join(tmp, "pkg"), os.path.join(tmp, "faketorch")])

    def test_pip_backend_for_another_torch_refused_at_import(self):
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            path = self._package_copy(tmp, "2.10.0")
            r = python("import vpmm.torch", PYTHONPATH=path)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("ImportError: vpmm.torch: the backend installed with this package",
                          r.stderr)
            self.assertIn("built for PyTorch 2.10.0, and this is PyTorch 2.11.0+cu130", r.stderr)

    def test_pip_backend_for_this_torch_imports(self):
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            path = self._package_copy(tmp, "2.11.0")
            r = python("import vpmm.torch; print('ok')", PYTHONPATH=path)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout.strip(), "ok")

    def _setup_refusal(self, tmp, torch_src, env):
        """Runs setup.py's backend_build with the stand-in torch `torch_src` (None: no torch at
        all) and returns the finished process."""
        path = []
        if torch_src is not None:
            os.makedirs(os.path.join(tmp, "t", "torch", "utils"))
            with open(os.path.join(tmp, "t", "torch", "__init__.py"), "w") as f:
                f.write(torch_src)
            open(os.path.join(tmp, "t", "torch", "utils", "__init__.py"), "w").close()
            with open(os.path.join(tmp, "t", "torch", "utils", "cpp_extension.py"), "w") as f:
                f.write("BuildExtension = CppExtension = object\n")
            path.append(os.path.join(tmp, "t"))
        code = ("import importlib.util as u, sys; sys.modules.pop('torch', None); "
                "s = u.spec_from_file_location('vpmm_setup', %r); m = u.module_from_spec(s); "
                "s.loader.exec_module(m); m.backend_build()" % os.path.join(PKG, "setup.py"))
        env = dict(env, PYTHONPATH=os.pathsep.join(path))
        return python(code, **env)

    @unittest.skipIf(HAVE_TORCH, "PyTorch is installed")
    def test_setup_without_torch_says_so(self):
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            r = self._setup_refusal(tmp, None, {})
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("cannot import torch", r.stderr)
            self.assertIn("--no-build-isolation", r.stderr)
            self.assertIn("VPMM_TORCH_BACKEND_BUILD=0", r.stderr)

    def test_setup_refuses_a_cpu_torch_and_missing_cuda_headers(self):
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            r = self._setup_refusal(
                tmp, "__version__ = '2.11.0+cpu'\nclass version:\n    cuda = None\n", {})
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("(2.11.0+cpu) is not a CUDA build", r.stderr)
        with tempfile.TemporaryDirectory() as tmp:
            r = self._setup_refusal(
                tmp, "__version__ = '2.11.0'\nclass version:\n    cuda = '13.0'\n",
                {"CUDA_HOME": os.path.join(tmp, "no-cuda")})
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("no cuda.h in %s" % os.path.join(tmp, "no-cuda", "include"), r.stderr)
            self.assertIn("set CUDA_HOME", r.stderr)

    def test_setup_reads_the_cmake_source_lists(self):
        import importlib.util
        spec = importlib.util.spec_from_file_location("vpmm_setup", os.path.join(PKG, "setup.py"))
        setup_py = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(setup_py)  # defines; builds nothing (no __main__)
        top = os.path.join(REPO, "CMakeLists.txt")
        integ = os.path.join(REPO, "integrations", "CMakeLists.txt")
        core = setup_py.cmake_list(top, "VPMM_CORE_SOURCES")
        graph = setup_py.cmake_list(top, "VPMM_GRAPH_SOURCES")
        adapter = setup_py.cmake_target_sources(integ, "vpmm_torch_adapter")
        backend = setup_py.cmake_target_sources(integ, "vpmm_torch_backend")
        includes = setup_py.cmake_list(top, "VPMM_INTERNAL_INCLUDE_DIRS")
        for f in core + graph + adapter + backend:
            self.assertTrue(os.path.isfile(f), f)
        for d in includes:
            self.assertTrue(os.path.isdir(d), d)
        # Every C file of the library's directories is in the lists (none forgotten), but the
        # graphs-off stub, which replaces graph/ and checkpoint/ in a build without graphs.
        listed = set(map(os.path.realpath, core + graph))
        for sub in ("src", "graph", "checkpoint"):
            for root, _, files in os.walk(os.path.join(REPO, sub)):
                for name in files:
                    path = os.path.realpath(os.path.join(root, name))
                    if name.endswith(".c") and name != "graph_off.c":
                        self.assertIn(path, listed, "%s is not in CMakeLists.txt's lists" % path)
        self.assertEqual([os.path.basename(f) for f in backend],
                         ["vpmm_cuda_allocator.cpp", "vpmm_torch_backend.cpp"])


if __name__ == "__main__":
    unittest.main()
