#!/usr/bin/env python3
"""test_floor.py — bench/floor.py, the idealised footprint of a trace (the footprint goal's floor).

Hand-made traces whose idealised pages can be counted on paper: best fit reuses the smallest
free range that fits (lowest address among equals), a block that fits none goes at the top, a
free range that reaches the top lowers it, a page is held while one live byte is in it, sizes are
rounded to 256 bytes, `c` events change nothing; the CLI's text and JSON, a bad trace (exit 1,
the line named), gzip, a standard output that cannot be written (exit 1, said); and on a trace of the repository the floor never exceeds what vpmm
reaches (bert_infer: 1.0122, bench/RESULTS.md).
"""
import gzip
import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(SRC, "bench"))
import floor  # noqa: E402

MiB = 1 << 20
PAGE = 2 * MiB


def write(lines, gz=False):
    fd, path = tempfile.mkstemp(suffix=".trace.gz" if gz else ".trace")
    os.close(fd)
    text = "# op addr size stream\n" + "\n".join(lines) + "\n"
    if gz:
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        with open(path, "w") as f:
            f.write(text)
    return path


class Placement(unittest.TestCase):
    def test_best_fit_and_top(self):
        ideal = floor.Ideal(PAGE, 256)
        a, _ = ideal.alloc(3 * MiB)  # [0, 3)
        b, _ = ideal.alloc(1 * MiB)  # [3, 4)
        c, _ = ideal.alloc(2 * MiB)  # [4, 6)
        d, _ = ideal.alloc(1 * MiB)  # [6, 7)
        self.assertEqual((a, b, c, d), (0, 3 * MiB, 4 * MiB, 6 * MiB))
        ideal.free(a, 3 * MiB)
        ideal.free(c, 2 * MiB)
        # Free ranges: [0, 3) and [4, 6): 2 MiB goes to the smaller one that fits.
        self.assertEqual(ideal.alloc(2 * MiB)[0], 4 * MiB)
        # 4 MiB fits no free range: at the top (7 MiB).
        self.assertEqual(ideal.alloc(4 * MiB)[0], 7 * MiB)

    def test_free_range_at_the_top_lowers_it(self):
        ideal = floor.Ideal(PAGE, 256)
        a, _ = ideal.alloc(MiB)
        b, _ = ideal.alloc(MiB)
        ideal.free(b, MiB)
        self.assertEqual(ideal.top, MiB)
        ideal.free(a, MiB)
        self.assertEqual(ideal.top, 0)
        self.assertEqual(ideal.by_size, [])

    def test_coalescing_both_sides(self):
        ideal = floor.Ideal(PAGE, 256)
        blocks = [ideal.alloc(MiB)[0] for _ in range(4)]
        ideal.free(blocks[0], MiB)
        ideal.free(blocks[2], MiB)
        ideal.free(blocks[1], MiB)  # joins [0, 3)
        self.assertEqual(ideal.by_size, [(3 * MiB, 0)])
        self.assertEqual(ideal.alloc(3 * MiB)[0], 0)

    def test_pages_held_while_a_byte_lives(self):
        ideal = floor.Ideal(PAGE, 256)
        a, _ = ideal.alloc(3 * MiB)  # pages 0, 1
        b, _ = ideal.alloc(2 * MiB)  # [3, 5): pages 1, 2
        self.assertEqual(ideal.pages, 3)
        ideal.free(a, 3 * MiB)  # page 0 free, page 1 still holds b's first MiB
        self.assertEqual(ideal.pages, 2)
        self.assertEqual(ideal.peak_pages, 3)
        ideal.free(b, 2 * MiB)
        self.assertEqual(ideal.pages, 0)

    def test_sizes_rounded(self):
        ideal = floor.Ideal(PAGE, 256)
        self.assertEqual(ideal.alloc(1)[1], 256)
        self.assertEqual(ideal.alloc(257)[0], 256)
        self.assertEqual(ideal.alloc(1)[0], 768)


class Traces(unittest.TestCase):
    def test_floor_of_a_trace(self):
        # 3 MiB and 2 MiB live at once: 5 MiB of live bytes over 3 pages (6 MiB): 1.2. The `c`
        # event changes nothing; after the frees a 4 MiB block reuses [0, 4): still 3 pages.
        path = write(["a 1000 3145728 0", "a 2000 2097152 0", "f 1000 3145728 0",
                      "c 1000 3145728 0", "f 2000 2097152 0", "a 3000 4194304 0"])
        try:
            r = floor.floor_of(path)
        finally:
            os.unlink(path)
        self.assertEqual(r["peak_live_bytes"], 5 * MiB)
        self.assertEqual(r["floor_peak_bytes"], 3 * PAGE)
        self.assertEqual(r["floor"], 1.2)

    def test_cli_text_json_gzip_and_errors(self):
        good = write(["a 1000 2097152 0", "f 1000 2097152 0"], gz=True)
        bad = write(["a 1000 2097152 0", "f 5000 2097152 0"])
        try:
            out = io.StringIO()
            with redirect_stdout(out):
                self.assertEqual(floor.main(["--json", good]), 0)
            self.assertEqual(json.loads(out.getvalue())["floor"], 1.0)
            out, err = io.StringIO(), io.StringIO()
            with redirect_stdout(out), redirect_stderr(err):
                self.assertEqual(floor.main([good, bad]), 1)
            self.assertIn("floor 1.0", out.getvalue())
            self.assertIn(":3: free of an address that is not live", err.getvalue())
        finally:
            os.unlink(good)
            os.unlink(bad)

    def test_unwritable_output_is_an_error(self):
        import subprocess
        good = write(["a 1000 2097152 0", "f 1000 2097152 0"])
        try:
            with open("/dev/full", "w") as full:
                r = subprocess.run([sys.executable, os.path.join(SRC, "bench", "floor.py"), good],
                                   stdout=full, stderr=subprocess.PIPE, text=True, check=False)
        finally:
            os.unlink(good)
        self.assertEqual(r.returncode, 1)
        self.assertIn("cannot write the result", r.stderr)

    def test_never_above_vpmm_on_a_recorded_trace(self):
        r = floor.floor_of(os.path.join(SRC, "bench", "traces", "bert_infer.trace.gz"))
        self.assertEqual(r["peak_live_bytes"], 770719232)  # vpmm-replay's peak live
        self.assertGreaterEqual(r["floor"], 1.0)
        self.assertLessEqual(r["floor"], 1.0122)  # vpmm's footprint on it


if __name__ == "__main__":
    unittest.main()
