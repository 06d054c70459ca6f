#!/usr/bin/env python3
"""test_python_package.py — the Python package vpmm (integrations/pytorch/vpmm) where PyTorch is
not installed, as on the CI machine: `import vpmm` imports no torch; vpmm.torch's extras refuse
before enable(); enable() explains that PyTorch is missing; the NCCL settings enable() makes
(zero copy off where the environment does not set it; VPMM_TORCH_NCCL_ZERO_COPY); the library
search order ($VPMM_TORCH_BACKEND, the package's directory, the build tree, the linker's path);
the version matches the project's (include/vpmm.h); sitecustomize.py does nothing without
VPMM_TORCH_ENABLE=1 and stops the process with the reason when it cannot enable vpmm. (With PyTorch and a GPU,
integrations/pytorch/test_backend.py covers the backend itself.) Run by ctest.
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


if __name__ == "__main__":
    unittest.main()
