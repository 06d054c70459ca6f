#!/usr/bin/env python3
"""test_bench_tools.py — the bench tools end to end, as a user runs them (host backend, no GPU).

  test_bench_tools.py VPMM_REPLAY VPMM_GROWTH VPMM_CHECKPOINT [VPMM_SOAK]

--version and --help on every tool (the project's version, from CMakeLists.txt); a trace named
`we"ird` or `a<b&c` leaves the JSON and the SVG well-formed; a truncated .gz and a negative size
are refused with a clear message and exit 1; a bad --svg path fails before the trace is even read,
and a failed run leaves no SVG behind; a replay whose mallocs failed (VPMM_MAX_BYTES) exits 4 and
reports no footprint; VPMM_VERBOSE under a cap prints ten reports, not hundreds; without PyTorch,
the anchors torch and torch-expandable are refused as unavailable (exit 2, saying why); the replay
reports where the time goes (totals, p99, max, driver calls by kind, background CPU) and the
numbers agree with each other; the slowest malloc is named with the pages it created and
remapped, and mallocs above 2 ms are counted with the 1 GiB growths among them; the timeline has
labelled x-axis ticks and the VA holes in a panel of their own; numbers are checked.
"""
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

TOOLS = {}
SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SVG = "{http://www.w3.org/2000/svg}"


def project_version():
    with open(os.path.join(SRC, "include", "vpmm.h")) as f:
        text = f.read()
    part = lambda name: re.search(r"#define VPMM_VERSION_%s +([0-9]+)" % name, text).group(1)
    return ".".join(part(n) for n in ("MAJOR", "MINOR", "PATCH"))


def run(tool, *args, env=None):
    """Runs a tool with no VPMM_* variable of the caller's, plus env."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("VPMM_")}
    e.update(env or {})
    return subprocess.run([TOOLS[tool], *args], capture_output=True, text=True, env=e,
                          check=False, timeout=120)


def trace_text(n=40, size=4 << 20, free_every=2):
    """n allocations of size bytes, every free_every-th one freed right after the next."""
    lines = ["# op addr size stream"]
    for i in range(n):
        lines.append(f"a {0x100000 + i * 0x1000000:x} {size} 0")
        if i % free_every == 1:
            lines.append(f"f {0x100000 + (i - 1) * 0x1000000:x} {size} 0")
    return "\n".join(lines) + "\n"


class BenchTools(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def write(self, name, text):
        with open(self.path(name), "w") as f:
            f.write(text)
        return self.path(name)

    def replay(self, *args, env=None):
        return run("replay", "--backend", "host", "--quiet", *args, env=env)

    def test_version_and_help(self):
        want = project_version()
        for tool in TOOLS:
            r = run(tool, "--version")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout, f"vpmm-{tool} (vpmm) {want}\n")
            r = run(tool, "--help")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("--version", r.stdout)
            r = run(tool, "--no-such-option")
            self.assertEqual(r.returncode, 1)
            self.assertIn("usage:", r.stderr)

    def test_torch_anchors_unavailable_without_pytorch(self):
        # Built where PyTorch was found, --help lists them and they run (or find no GPU here):
        # the GPU machine's runs check those. Without, asking is "backend unavailable", said so.
        if "torch-expandable" in run("replay", "--help").stdout:
            self.skipTest("vpmm-replay has the PyTorch anchors")
        for name in ("torch", "torch-expandable"):
            r = run("replay", "--backend", name, "--quiet", self.write("t.trace", trace_text()))
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(f"backend {name}: built without PyTorch", r.stderr)
            self.assertEqual(r.stdout, "")

    def test_names_escaped_in_json_and_svg(self):
        for name in ('we"ird.trace', "a<b&c.trace", "tab\there 'q' \\.trace"):
            trace = self.write(name, trace_text())
            r = self.replay("--json", trace)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(json.loads(r.stdout)["trace"], name)
            svg = self.path("t.svg")
            r = self.replay("--svg", svg, trace)
            self.assertEqual(r.returncode, 0, r.stderr)
            title = ET.parse(svg).getroot().find(SVG + "text").text
            self.assertTrue(title.startswith(name + " on vpmm/host: footprint "), title)

    def test_svg_axes_and_panels(self):
        svg = self.path("t.svg")
        r = self.replay("--svg", svg, self.write("t.trace", trace_text(n=400)))
        self.assertEqual(r.returncode, 0, r.stderr)
        texts = [t.text for t in ET.parse(svg).getroot().iter(SVG + "text")]
        self.assertIn("operation (of 600)", texts)
        for tick in ("0", "100", "200", "300", "400", "500", "600"):
            self.assertIn(tick, texts)
        self.assertIn("physical memory: bytes on the device", texts)
        self.assertIn("virtual address space: VA holes (reserved, no memory)", texts)

    def test_truncated_gzip(self):
        trace = self.path("t.trace.gz")
        with gzip.open(trace, "wt") as f:
            f.write(trace_text(n=4000, size=1000))
        size = os.path.getsize(trace)
        for cut in (size // 2, size - 4):
            os.truncate(trace, cut)
            r = self.replay(trace)
            self.assertEqual(r.returncode, 1, r.stdout)
            self.assertIn("t.trace.gz: truncated", r.stderr)
            self.assertEqual(r.stdout, "")
            with gzip.open(trace, "wt") as f:
                f.write(trace_text(n=4000, size=1000))

    def test_negative_size(self):
        r = self.replay(self.write("neg.trace", "a 1000 512 0\na 2000 -512 0\n"))
        self.assertEqual(r.returncode, 1)
        self.assertIn("neg.trace:2: negative size -512", r.stderr)

    def test_bad_output_path_fails_first(self):
        # The trace does not exist either: only the --svg path may be named, so it was checked
        # before the trace was opened (and long before any replay).
        r = self.replay("--svg", "/nonexistent-dir/x.svg", self.path("missing.trace"))
        self.assertEqual(r.returncode, 1)
        self.assertIn("--svg /nonexistent-dir/x.svg: cannot create", r.stderr)
        self.assertNotIn("missing.trace", r.stderr)

    def test_svg_over_the_trace_refused(self):
        trace = self.write("t.trace", trace_text())
        r = self.replay("--svg", os.path.join(self.dir.name, ".", "t.trace"), trace)
        self.assertEqual(r.returncode, 1)
        self.assertIn("that is the input file", r.stderr)
        with open(trace) as f:
            self.assertEqual(f.read(), trace_text())

    def test_failed_run_leaves_no_svg(self):
        svg = self.path("t.svg")
        r = self.replay("--svg", svg, self.write("neg.trace", "a 1000 -1 0\n"))
        self.assertEqual(r.returncode, 1)
        self.assertFalse(os.path.exists(svg))

    def test_failed_mallocs_exit_4_without_footprint(self):
        trace = self.write("big.trace", trace_text(n=40, free_every=1000))  # 160 MiB live
        cap = {"VPMM_MAX_BYTES": "16M"}
        r = self.replay(trace, env=cap)
        self.assertEqual(r.returncode, 4, r.stdout + r.stderr)
        self.assertIn("footprint              not measured: ", r.stdout)
        self.assertIn("mallocs failed (out of memory)", r.stderr)
        r = self.replay("--json", trace, env=cap)
        self.assertEqual(r.returncode, 4)
        row = json.loads(r.stdout)
        self.assertIsNone(row["footprint"])
        self.assertGreater(row["ooms"], 0)
        svg = self.path("t.svg")
        r = self.replay("--svg", svg, trace, env=cap)
        self.assertEqual(r.returncode, 4)
        title = ET.parse(svg).getroot().find(SVG + "text").text
        self.assertIn("mallocs failed (out of memory)", title)
        # Without the cap the same trace replays.
        self.assertEqual(self.replay(trace).returncode, 0)

    def test_verbose_under_a_cap_is_short(self):
        trace = self.write("big.trace", trace_text(n=200, free_every=1000))
        r = self.replay(trace, env={"VPMM_MAX_BYTES": "16M", "VPMM_VERBOSE": "1"})
        self.assertEqual(r.returncode, 4)
        reports = [l for l in r.stderr.splitlines() if l.startswith("vpmm: vpmm_malloc(")]
        self.assertEqual(len(reports), 10, r.stderr)
        self.assertRegex(r.stderr, r"vpmm: pool destroyed after \d+ out-of-memory reports; "
                                   r"the last \d+ were not printed")

    def test_numbers_checked(self):
        for tool, args, msg in (
                ("growth", ["--gib", "0"], "--gib: '0' is not an integer in 1..1024"),
                ("growth", ["--gib", "-8"], "--gib: '-8'"),
                ("checkpoint", ["--reps", "-1"], "--reps: '-1'"),
                ("checkpoint", ["--regions", "1,x"], "--regions: '1,x'"),
                ("soak", ["--threads", "0"], "--threads: '0' is not an integer in 1..64"),
                ("soak", ["--seconds", "-1"], "--seconds: '-1'")):
            if tool not in TOOLS:
                continue
            r = run(tool, *args)
            self.assertEqual(r.returncode, 1, (tool, args, r.stderr))
            self.assertIn(msg, r.stderr)

    def test_where_the_time_goes(self):
        # A trace that grows: 40 blocks of 4 MiB, every other one freed (issue 13's measures).
        trace = self.write("grow.trace", trace_text(n=40))
        r = self.replay("--json", "--driver-stats", trace)
        self.assertEqual(r.returncode, 0, r.stderr)
        j = json.loads(r.stdout)
        for key in ("malloc_ns_total", "free_ns_total", "alloc_ms_total", "malloc_ns_max",
                    "free_ns_max", "malloc_ns_p99", "free_ns_p99", "replay_cpu_ms",
                    "background_cpu_ms", "remaps_per_page", "driver_calls", "driver_ms"):
            self.assertIn(key, j)
        for op in ("malloc", "free"):
            total, n = j[f"{op}_ns_total"], j[f"{op}s"]
            med, p99, mx = j[f"{op}_ns_median"], j[f"{op}_ns_p99"], j[f"{op}_ns_max"]
            self.assertGreaterEqual(mx, p99, op)
            self.assertGreaterEqual(p99, med, op)
            self.assertGreaterEqual(total, med * n / 2, op)
            self.assertGreaterEqual(total, mx, op)
        self.assertAlmostEqual(j["alloc_ms_total"],
                               (j["malloc_ns_total"] + j["free_ns_total"]) / 1e6, places=2)
        self.assertGreaterEqual(j["background_cpu_ms"], 0)
        self.assertGreater(j["replay_cpu_ms"], 0)
        d = j["driver"]
        self.assertGreater(d["mem_create"]["calls"], 0)
        self.assertGreater(d["mem_map"]["calls"], 0)
        self.assertGreater(d["set_access"]["calls"], 0)
        self.assertEqual(d["mem_create"]["calls"], j["pages_created"])
        self.assertEqual(sum(k["calls"] for k in d.values()), j["driver_calls"])
        self.assertEqual(d["capture_info"]["calls"], 0)  # the legacy stream is never queried
        # The table says the same; without --driver-stats the driver is left out.
        r = self.replay("--driver-stats", trace)
        self.assertIn("allocator time total", r.stdout)
        self.assertIn("mem_map", r.stdout)
        r = self.replay("--json", trace)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIsNone(json.loads(r.stdout)["driver"])

    def test_slowest_malloc_and_slow_calls(self):
        # Issue 13's single-call goal: the slowest malloc is named with what it did (vpmm: pages
        # created / remapped), and mallocs above 2 ms are counted, with those that grew the pool
        # by more than 1 GiB (the goal's exception) among them. Here the one malloc is the slowest,
        # whatever the machine's speed (no timing is asserted): 1536 pages of 2 MiB created.
        trace = self.write("big.trace", "a 1000 3221225472 0\nf 1000 3221225472 0\n")
        j = json.loads(self.replay("--json", trace).stdout)
        self.assertEqual(j["malloc_max_size"], 3 << 30)
        self.assertEqual(j["malloc_max_pages_created"], (3 << 30) // j["page_size"])
        self.assertEqual(j["malloc_max_pages_remapped"], 0)
        self.assertEqual(j["pages_created"], j["malloc_max_pages_created"])
        self.assertLessEqual(j["malloc_over_2ms"], 1)
        self.assertEqual(j["malloc_over_2ms_big_growth"], j["malloc_over_2ms"])  # a 3 GiB growth
        # The second half of this trace is its free: its time only, the growth left out.
        self.assertGreater(j["alloc_ms_second_half"], 0)
        self.assertLessEqual(j["alloc_ms_second_half"], j["free_ns_total"] / 1e6 + 1e-3)
        # A trace that remaps: the slowest call's figures stay within the replay's totals.
        j = json.loads(self.replay("--json", self.write("grow.trace", trace_text(n=40))).stdout)
        self.assertLessEqual(j["malloc_max_pages_created"], j["pages_created"])
        self.assertLessEqual(j["malloc_max_pages_remapped"], j["pages_remapped"])
        self.assertIn(j["malloc_max_size"], (4 << 20,))
        self.assertLessEqual(j["malloc_over_2ms"], j["mallocs"])
        r = self.replay(trace)
        self.assertIn("slowest malloc asked   3221225472 bytes (created 1536 pages, remapped 0)",
                      r.stdout)
        self.assertIn("mallocs above 2 ms", r.stdout)
        self.assertIn("of it, second half", r.stdout)
        self.assertNotIn('": ', r.stdout)  # the table carries no JSON

    def test_growth_and_checkpoint_json(self):
        r = run("growth", "--backend", "host", "--gib", "1", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = [json.loads(l) for l in r.stdout.splitlines()]
        self.assertEqual([x["pattern"] for x in rows], ["one", "2mib", "128mib"])
        r = run("checkpoint", "--json", "--regions", "10", "--reps", "2")
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = [json.loads(l) for l in r.stdout.splitlines()]
        self.assertEqual(rows[0]["backend"], "vpmm/host")
        self.assertEqual(rows[-1]["bench"], "checkpoint-tree")


if __name__ == "__main__":
    names = ("replay", "growth", "checkpoint", "soak")
    while len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        path = sys.argv.pop(1)
        TOOLS[names[len(TOOLS)]] = path
    if len(TOOLS) < 3:
        sys.exit("usage: test_bench_tools.py VPMM_REPLAY VPMM_GROWTH VPMM_CHECKPOINT [VPMM_SOAK]")
    unittest.main()
