#!/usr/bin/env python3
"""test_env_names.py — the one list of vpmm's VPMM_* environment variables stays the truth.

vpmm_pool_create refuses any VPMM_* name that is not in vpmm_i_env_vars (src/core/options.c), so that a
misspelled knob never goes unnoticed; README.md's knob table documents the same names. This test
reads the sources and checks that:
  - the table in src/core/options.c and the README's knob table name the same variables;
  - the library's knobs (rows without a reader) are exactly the names the library reads
    (the "VPMM_..." string literals of src/, outside the table);
  - every VPMM_* variable a test, tool, sample or integration reads or sets (getenv, env_u64,
    os.environ, $VPMM_X / VPMM_X= in scripts; CMake's options, as -DVPMM_NVTX=OFF, are not
    environment variables) is in the table, and each row's reader file names it.
No build needed; run from anywhere: python3 tests/test_env_names.py
"""
import os
import re
import sys
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
NAME = r"VPMM_[A-Z0-9_]+"


def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def sources(exts):
    """Every file of the repository with one of exts, outside build trees and hidden folders."""
    for top, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith((".", "build"))]
        for f in files:
            if f.endswith(exts):
                path = os.path.join(top, f)
                yield os.path.relpath(path, ROOT), path


def table():
    """{name: reader or None} from vpmm_i_env_vars, and options.c without the table."""
    text = read("src/core/options.c")
    m = re.search(r"const vpmm_env_var_t vpmm_i_env_vars\[\] = \{(.*?)\n\};", text, re.S)
    assert m, "vpmm_i_env_vars not found in src/core/options.c"
    rows = {}
    for name, reader in re.findall(r'\{\s*"(%s)",\s*(NULL|"[^"]*")\s*\}' % NAME, m.group(1)):
        rows[name] = None if reader == "NULL" else reader.strip('"')
    return rows, text[:m.start()] + text[m.end():]


def readme_names():
    text = read("README.md")
    start = text.index("## Environment knobs")
    end = text.index("\n## ", start + 1)
    names = set()
    for line in text[start:end].splitlines():
        if line.startswith("| `VPMM_"):
            names.update(re.findall(NAME, line.split("|")[1]))
    return names


class EnvNames(unittest.TestCase):
    def setUp(self):
        self.rows, self.options_rest = table()

    def test_table_matches_readme(self):
        self.assertEqual(set(self.rows), readme_names(),
                         "src/core/options.c's vpmm_i_env_vars and README.md's knob table differ")

    def test_knobs_are_what_the_library_reads(self):
        read_by_lib = set()
        for rel, path in sources((".c", ".h")):
            if not rel.startswith(("src/", "graph/", "checkpoint/")):
                continue
            text = self.options_rest if rel == "src/core/options.c" else read(rel)
            read_by_lib.update(re.findall(r'(?:getenv|env_number)\(\s*"(%s)"' % NAME, text))
        knobs = {n for n, reader in self.rows.items() if reader is None}
        self.assertEqual(knobs, read_by_lib)

    def test_every_variable_used_is_in_the_table(self):
        patterns = {
            (".c", ".h", ".cpp"): [r'(?:getenv|env_u64)\(\s*"(%s)"' % NAME],
            (".py",): [r'environ(?:\.get|\.pop|\.setdefault)?\s*[\[(]\s*"(%s)"' % NAME,
                       r"\$\{?(%s)" % NAME],
            (".sh",): [r"\$\{?(%s)" % NAME, r"(?<![\w-])(?<!-D)(%s)=" % NAME],
        }
        cmake_options = set()  # -DVPMM_NVTX=OFF in a script is CMake's, not the environment's
        for rel, path in sources(("CMakeLists.txt", ".cmake")):
            cmake_options.update(re.findall(r"option\(\s*(%s)" % NAME, read(rel)))
            cmake_options.update(re.findall(r"set\(\s*(%s)\b[^)]*\bCACHE\b" % NAME, read(rel)))
        missing = {}
        for exts, pats in patterns.items():
            for rel, path in sources(exts):
                if rel == "tests/test_env_names.py":
                    continue
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for p in pats:
                    for name in re.findall(p, text):
                        if name not in self.rows and name not in cmake_options:
                            missing.setdefault(name, set()).add(rel)
        self.assertEqual(missing, {}, "VPMM_* variables missing from vpmm_i_env_vars "
                         "(src/core/options.c) and README.md's knob table")

    def test_readers_name_their_variables(self):
        for name, reader in self.rows.items():
            if reader is not None:
                self.assertIn(name, read(reader), "%s: its reader %s never names it"
                              % (name, reader))


if __name__ == "__main__":
    sys.exit(unittest.main())
