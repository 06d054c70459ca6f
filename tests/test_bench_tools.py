#!/usr/bin/env python3
"""test_bench_tools.py — the bench tools end to end, as a user runs them (host backend, no GPU).

  test_bench_tools.py VPMM_REPLAY VPMM_GROWTH VPMM_CHECKPOINT VPMM_NEARFULL VPMM_DRIVERCOST
                      [VPMM_SOAK]

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

The multi-GPU scripts' parts that need no GPU: bench/torch_multigpu.py without PyTorch (lengths,
statistics, arguments, the summary's tables, ratios and failures), and bench/run_multigpu.sh,
integrations/pytorch/suite/run_multigpu.sh and summarize_multigpu.py driven end to end with
stand-ins for cmake, nvidia-smi and the device machine's Python (the runs, the files left in
--out, the budget, the exit status). Those two classes need no tool:
    python3 -m unittest tests.test_bench_tools.TorchMultiGpuPure tests.test_bench_tools.MultiGpuScripts
(from the repository's root).
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
        # A timeline already there (an earlier run's) is left as it was, and no temporary file.
        self.write("t.svg", "an earlier timeline")
        r = self.replay("--svg", svg, self.write("neg.trace", "a 1000 -1 0\n"))
        self.assertEqual(r.returncode, 1)
        self.assertEqual(slurp(svg), "an earlier timeline")
        self.assertEqual([n for n in os.listdir(self.dir.name) if ".tmp-" in n], [])
        # A run that succeeds replaces it.
        r = self.replay("--svg", svg, self.write("ok.trace", trace_text(n=4)))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(slurp(svg).startswith("<svg"))

    def test_units_are_the_librarys(self):
        # Bytes in powers of 1024 (KiB, MiB, GiB), as vpmm's own messages, text and SVG alike.
        svg = self.path("u.svg")
        r = self.replay("--svg", svg, self.write("u.trace", trace_text(n=40)))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"peak live\s+[0-9.]+ MiB\n")
        self.assertRegex(r.stdout, r"peak device memory\s+[0-9.]+ MiB\n")
        labels = slurp(svg)
        self.assertIn(" MiB<", labels)
        for decimal in (" GB", " MB", " kB"):
            self.assertNotIn(decimal, r.stdout)
            self.assertNotIn(decimal + "<", labels)

    def test_unknown_backend_is_a_usage_error(self):
        for tool, args in (("replay", ["--backend", "gpu", "x.trace"]),
                           ("growth", ["--backend", "gpu"])):
            r = run(tool, *args)
            self.assertEqual(r.returncode, 1, (tool, r.stderr))
            self.assertIn("--backend: 'gpu' is not one of host, cuda", r.stderr)
        # A known backend this machine cannot open stays "unavailable" (2): the CUDA default of
        # vpmm-checkpoint, as of the other tools, on a machine without a GPU.
        r = run("checkpoint", "--regions", "10", "--reps", "1",
                env={"CUDA_VISIBLE_DEVICES": ""})
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--backend host runs on the host emulation", r.stderr)

    def test_trace_from_stdin_and_a_directory(self):
        text = trace_text(n=8)
        plain = self.write("s.trace", text)
        packed = self.path("s.trace.gz")
        with gzip.open(packed, "wt") as f:
            f.write(text)
        rows = []
        for path in (plain, packed):
            with open(path, "rb") as f:
                r = subprocess.run([TOOLS["replay"], "--backend", "host", "--json", "-"], stdin=f,
                                   capture_output=True, text=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stderr)
            rows.append(json.loads(r.stdout))
        self.assertGreater(rows[0]["ops"], 0)
        self.assertEqual(rows[1]["ops"], rows[0]["ops"])  # gzip on stdin is decompressed
        r = self.replay(self.dir.name)
        self.assertEqual(r.returncode, 1)
        self.assertIn("cannot open (Is a directory)", r.stderr)

    def test_stdout_write_errors(self):
        # Output that cannot be written (a full disk) is an error, whatever the tool.
        if not os.access("/dev/full", os.W_OK):
            self.skipTest("no /dev/full")
        trace = self.write("ok.trace", trace_text(n=4))
        cases = [("replay", ["--backend", "host", "--json", trace]),
                 ("growth", ["--backend", "host", "--gib", "1", "--json"]),
                 ("nearfull", ["--device-gib", "1", "--ops", "1000", "--json"])]
        for tool, args in cases:
            with open("/dev/full", "w") as full:
                r = subprocess.run([TOOLS[tool], *args], stdout=full, stderr=subprocess.PIPE,
                                   text=True, timeout=300)
            self.assertEqual(r.returncode, 1, (tool, r.stderr))
            self.assertIn("writing the standard output failed", r.stderr)

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
                ("nearfull", ["--device-gib", "0"], "--device-gib: '0' is not an integer in"),
                ("nearfull", ["--large-percent", "101"], "--large-percent: '101'"),
                ("nearfull", ["--large-handles", "2"], "--large-handles: '2'"),
                ("soak", ["--threads", "0"], "--threads: '0' is not an integer in 1..64"),
                ("soak", ["--seconds", "-1"], "--seconds: '-1'")):
            if tool not in TOOLS:
                continue
            r = run(tool, *args)
            self.assertEqual(r.returncode, 1, (tool, args, r.stderr))
            self.assertIn(msg, r.stderr)

    def test_where_the_time_goes(self):
        # A trace that grows: 40 blocks of 4 MiB, every other one freed (the allocator-time measures).
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
        # The single-call goal: the slowest malloc is named with what it did (vpmm: pages
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
        r = run("checkpoint", "--backend", "host", "--json", "--regions", "10", "--reps", "2")
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = [json.loads(l) for l in r.stdout.splitlines()]
        self.assertEqual(rows[0]["backend"], "vpmm/host")
        self.assertEqual(rows[-1]["bench"], "checkpoint-tree")

    def test_nearfull(self):
        # A 1 GiB device filled by mostly small blocks: refusals happen, none against the rule.
        r = run("nearfull", "--device-gib", "1", "--large-percent", "1", "--ops", "40000",
                "--json")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        row = json.loads(r.stdout)
        self.assertGreater(row["ooms"], 0)
        self.assertEqual(row["violations"], 0)
        self.assertEqual(row["violations_movable"], 0)
        self.assertGreater(row["peak_mapped_bytes"], 0.9 * (1 << 30))
        # A graph pool as large as the device: a usage error.
        r = run("nearfull", "--device-gib", "1", "--graph-gib", "1")
        self.assertEqual(r.returncode, 1)
        self.assertIn("--graph-gib must be less", r.stderr)

    def test_nearfull_without_large_handles(self):
        # Under a cap, with a graph pool: the default leaves refusals that only pages trapped in
        # large handles would serve (exit 5); without large handles the whole rule holds.
        args = ("--device-gib", "8", "--cap-gib", "6", "--graph-gib", "1", "--json")
        r = run("nearfull", *args)
        self.assertEqual(r.returncode, 5, r.stdout + r.stderr)
        row = json.loads(r.stdout)
        self.assertEqual(row["large_handles"], 1)
        self.assertGreater(row["violations"], 0)
        self.assertEqual(row["violations_movable"], 0)
        r = run("nearfull", *args, "--large-handles", "0")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        row = json.loads(r.stdout)
        self.assertEqual((row["large_handles"], row["violations"]), (0, 0))
        self.assertGreater(row["ooms"], 0)

    def test_summarize_without_large_handles(self):
        # bench/summarize.py: the VPMM_LARGE_HANDLES=0 rows get a table and growth columns of their
        # own, with the ratios to the default's and to PyTorch native's totals.
        def replay(run, total, fp):
            return {"run": run, "trace": "t.trace.gz", "alloc_ms_total": total, "footprint": fp,
                    "malloc_ns_p99": 5000, "malloc_ns_max": 9000, "peak_live_bytes": 10**9,
                    "pair_ns_median": 100}
        rows = [replay("cuda#1", 10.0, 1.05), replay("cuda#2", 12.0, 1.05),
                replay("nolarge#1", 30.0, 1.01), replay("nolarge#2", 33.0, 1.01),
                replay("torch#1", 5.0, 1.3), replay("torch#2", 6.0, 1.3)]
        rows += [{"run": f"growth{tag}#1", "pattern": "one", "backend": "vpmm/cuda", "ms": ms,
                  "handles_created": h} for tag, ms, h in (("", 1.0, 8), ("-nolarge", 110.0, 4096))]
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "bench.jsonl")
            with open(path, "w") as f:
                f.write("".join(json.dumps(x) + "\n" for x in rows))
            r = subprocess.run([sys.executable, os.path.join(SRC, "bench", "summarize.py"), path],
                               capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("| t | 11.0 / 5.0 / 1.050 | 31.5 / 5.0 / 1.010 | 2.86 | 5.73 |", r.stdout)
        self.assertIn("| one | 1.00 | 8 | — | — | 110.00 | 4096 |", r.stdout)



# ---- the multi-GPU scripts' parts that run without a GPU (bench/torch_multigpu.py,
# bench/run_multigpu.sh, integrations/pytorch/suite/run_multigpu.sh and summarize_multigpu.py) ----

def slurp(path):
    with open(path) as f:
        return f.read()


def load_torch_multigpu():
    import importlib.util
    sys.dont_write_bytecode = True  # no __pycache__ left in bench/
    spec = importlib.util.spec_from_file_location(
        "torch_multigpu", os.path.join(SRC, "bench", "torch_multigpu.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def fake_rank(tm, bench, alloc, world, rank, peak, median, losses):
    """A rank line as bench/torch_multigpu.py's train() writes it."""
    return {"kind": "rank", "bench": bench, "allocator": alloc, "world": world, "rank": rank,
            "gpu": "H100", "torch": "2.11.0", "model": "gpt2 8x768", "batch": 24,
            "len": [256, 1024], "warmup": 6, "steps": 3, "step_ms": tm.time_stats([median] * 3),
            "wall_ms": tm.time_stats([median, median, 2 * median]), "peak_used_mib": peak,
            "peak_over_start_mib": peak - 1000, "max_reserved_mib": peak - 1500,
            "max_allocated_mib": peak - 3000, "final_loss": losses[-1], "losses": losses,
            "ok": True, "problems": []}


def fake_run(tm, bench, alloc, world, peak, median, losses):
    rows = [fake_rank(tm, bench, alloc, world, r, peak + r, median, losses) for r in range(world)]
    return rows + [tm.summarize_ranks(rows)]


class TorchMultiGpuPure(unittest.TestCase):
    """bench/torch_multigpu.py without PyTorch: lengths, statistics, arguments, the tables."""

    @classmethod
    def setUpClass(cls):
        had_torch = "torch" in sys.modules
        cls.tm = load_torch_multigpu()
        if not had_torch:  # the allocator must be chosen before torch loads
            assert "torch" not in sys.modules, "importing torch_multigpu imported torch"

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def test_seq_lengths(self):
        tm = self.tm
        a = tm.seq_lengths(1234, 50, 256, 1024)
        self.assertEqual(a, tm.seq_lengths(1234, 50, 256, 1024))  # same seed, same lengths
        self.assertNotEqual(a, tm.seq_lengths(1235, 50, 256, 1024))
        self.assertEqual(len(a), 50)
        self.assertTrue(all(256 <= n <= 1024 and n % 8 == 0 for n in a), a)
        self.assertGreater(len(set(a)), 10)  # a new length (nearly) every step
        b = tm.seq_lengths(1, 200, 13, 30)  # ends that are not multiples: stays inside
        self.assertEqual(set(b), {16, 24})
        with self.assertRaises(ValueError):
            tm.seq_lengths(1, 3, 9, 15)

    def test_time_stats(self):
        st = self.tm.time_stats([5.0, 1.0, 3.0, 2.0, 4.0, 10.0, 6.0, 7.0, 8.0, 9.0])
        self.assertEqual((st["n"], st["median"], st["total"], st["max"], st["min"], st["p90"]),
                         (10, 5.5, 55.0, 10.0, 1.0, 9.0))
        self.assertEqual(self.tm.time_stats([])["median"], None)

    def test_arguments(self):
        pa = self.tm.parse_args
        ddp, fsdp2 = pa(["ddp"]), pa(["fsdp2", "--allocator", "expandable"])
        self.assertEqual((ddp.layers, ddp.embd, ddp.batch, ddp.warmup, ddp.steps, ddp.ctx),
                         (8, 768, 24, 6, 30, 1024))
        self.assertEqual((fsdp2.layers, fsdp2.allocator), (12, "expandable"))
        split = pa(["split"])
        self.assertEqual((split.embd, split.heads, split.max_len, split.batch), (512, 8, 384, 8))
        self.assertEqual(pa(["ipc"]).sends, 2000)
        sm = pa(["summary", "x.jsonl", "--expect", "ddp:2,fsdp2:4,split,ipc"])
        self.assertEqual(sm.expect, [("ddp", 2), ("fsdp2", 4), ("split", None), ("ipc", None)])
        for bad in (["ddp", "--min-len", "4"], ["ddp", "--max-len", "2048"],
                    ["ddp", "--embd", "100"], ["ddp", "--steps", "0"], ["split", "--layers", "1"],
                    ["ipc", "--sends", "0"], ["ddp", "--allocator", "cudamalloc"],
                    ["summary", "x", "--expect", "ddp"], ["summary", "x", "--expect", "zzz"],
                    ["summary", "x", "--allocators", "vpmm,other"]):
            with self.assertRaises(SystemExit, msg=bad):
                with open(os.devnull, "w") as null, contextlib_redirect_stderr(null):
                    pa(bad)

    def test_ddp_outside_torchrun_refused(self):
        env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "RANK",
                                                                "WORLD_SIZE")}
        out = os.path.join(self.dir.name, "r.jsonl")
        r = subprocess.run([sys.executable, os.path.join(SRC, "bench", "torch_multigpu.py"),
                            "ddp", "--out", out], capture_output=True, text=True, env=env,
                           timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("torchrun", r.stderr)
        line = json.loads(slurp(out))
        self.assertEqual((line["kind"], line["bench"]), ("error", "ddp"))

    def test_loss_gap(self):
        gap = self.tm.loss_gap
        self.assertAlmostEqual(gap([10.9, 10.8], [10.9, 10.75]), 0.05)
        self.assertEqual(gap([10.9, float("nan")], [10.9, 10.8]), float("inf"))  # NaN: a failure
        self.assertIsNone(gap([], [10.9]))

    def test_rank_rows_summary_and_table(self):
        tm = self.tm
        lines = fake_run(tm, "ddp", "vpmm", 2, 20000, 100.0, [10.9, 10.8, 10.7])
        s = lines[-1]
        self.assertEqual((s["kind"], s["peak_used_mib"], s["step_ms_median"], s["final_loss"]),
                         ("summary", 20001, 100.0, 10.7))
        self.assertEqual(s["peak_used_mib_per_rank"], [20000, 20001])
        self.assertTrue(s["ok"])
        table = tm.format_rank_table(lines[:-1], s)
        self.assertIn("| 1 | 20001 MiB |", table)
        self.assertTrue(table.endswith("OK"))
        bad = dict(lines[1], ok=False, problems=["loss nan at step 2"])
        s2 = tm.summarize_ranks([lines[0], bad])
        self.assertFalse(s2["ok"])
        self.assertEqual(s2["problems"], ["rank 1: loss nan at step 2"])

    def summary(self, lines, *args):
        path = os.path.join(self.dir.name, "all.jsonl")
        with open(path, "w") as f:
            f.write("".join(json.dumps(x) + "\n" for x in lines) + "a line that is no JSON\n")
        return subprocess.run([sys.executable, os.path.join(SRC, "bench", "torch_multigpu.py"),
                               "summary", path, *args], capture_output=True, text=True,
                              timeout=60)

    def all_runs(self, vpmm_loss_shift=0.001):
        tm, lines = self.tm, []
        for bench in ("ddp", "fsdp2"):
            for alloc, peak, med, d in (("vpmm", 20000, 100.0, vpmm_loss_shift),
                                        ("native", 30000, 99.0, 0.0),
                                        ("expandable", 21000, 102.0, 0.0005)):
                lines += fake_run(tm, bench, alloc, 2, peak, med, [x + d for x in (10.9, 10.8)])
        for alloc in ("vpmm", "native", "expandable"):
            lines.append({"kind": "check", "bench": "split", "allocator": alloc, "ok": True,
                          "problems": [], "loss_max_abs_diff": 0.0, "param_max_abs_diff": 0.0,
                          "logits_max_abs_diff": 1e-6, "copies": {"a": True},
                          "peer_kernels": {"b": True}})
            lines.append({"kind": "check", "bench": "ipc", "allocator": alloc, "ok": True,
                          "problems": [], "checks": {"x": True},
                          "loop": {"sends": 2000, "ms_per_send": 0.5, "parent_fd_growth": 0,
                                   "child_fd_growth": 1, "mem_growth_mib": 0.0}})
        return lines

    def test_summary_tables_and_ratios(self):
        r = self.summary(self.all_runs(), "--expect", "ddp:2,fsdp2:2,split,ipc")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        out = r.stdout
        self.assertIn("| ddp, 2 GPUs | vpmm | 20001 MiB | 19001 MiB | 0.667 | 0.952 |", out)
        self.assertIn("ddp on 2 GPUs: vpmm/native: peak 0.667, step median 1.010; "
                      "vpmm/expandable: peak 0.952, step median 0.980", out)
        self.assertIn("| ipc | native | pass |", out)
        self.assertIn("summary: ", out)
        self.assertNotIn("FAIL", out)
        # markdown tables: every row of the first table has as many cells as its header
        rows = [l for l in out.splitlines() if l.startswith("| ddp") or l.startswith("| run")]
        self.assertEqual(len({l.count("|") for l in rows}), 1, rows)

    def test_summary_failures(self):
        # losses apart, a failed check, an error line, a missing run: each named, exit 1
        lines = self.all_runs(vpmm_loss_shift=0.5)
        lines = [x for x in lines if not (x.get("bench") == "fsdp2" and
                                          x.get("allocator") == "expandable")]
        lines = [dict(x, ok=False, problems=["the child gained 40 descriptors"])
                 if x.get("bench") == "ipc" and x["allocator"] == "vpmm" else x for x in lines]
        lines.append({"kind": "error", "bench": "fsdp2", "allocator": "expandable", "world": 2,
                      "rank": 1, "error": "OutOfMemoryError: CUDA out of memory"})
        r = self.summary(lines, "--expect", "ddp:2,fsdp2:2,split,ipc")
        self.assertEqual(r.returncode, 1, r.stdout)
        fails = [l for l in r.stdout.splitlines() if l.startswith("FAIL: ")]
        text = "\n".join(fails)
        self.assertIn("ddp on 2 GPUs: vpmm's losses differ from native's by 0.5", text)
        self.assertIn("ipc, vpmm: the child gained 40 descriptors", text)
        self.assertIn("fsdp2, expandable, 2 GPUs, rank 1: OutOfMemoryError", text)
        self.assertIn("missing: fsdp2 on 2 GPUs for expandable", text)
        self.assertEqual(self.summary([], "--expect", "ddp:4").returncode, 1)


def contextlib_redirect_stderr(stream):
    import contextlib
    return contextlib.redirect_stderr(stream)


FAKE_PY = r"""#!/usr/bin/env python3
# A stand-in for the device machine's Python in MultiGpuScripts: answers the scripts' probes,
# plays torchrun, torch_multigpu.py's runs and pytest, and hands anything else to the real one.
import json, os, sys
real, repo = os.environ["FAKE_REAL_PY"], os.environ["FAKE_REPO"]
a = sys.argv[1:]
fail = os.environ.get("FAKE_FAIL", "")

def out(obj, path):
    print(json.dumps(obj))
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(obj) + "\n")

def env_problem():
    if os.environ.get("NCCL_NVLS_ENABLE") != "0" or \
            os.environ.get("TORCH_SYMM_MEM_DISABLE_MULTICAST") != "1":
        return "multicast not off"
    lib = os.environ.get("VPMM_TORCH_BACKEND", "")
    if not os.path.isfile(lib):
        return "VPMM_TORCH_BACKEND=%r is no file" % lib
    return None

if a[:1] == ["-c"]:
    print("PyTorch 2.11.0+fake NCCL 2.28.9" if "nccl" in a[1] else os.environ["FAKE_GPUS"])
    sys.exit(0)
if a[:2] == ["-m", "torch.distributed.run"]:
    sys.path.insert(0, os.path.join(repo, "bench"))
    sys.path.insert(0, os.path.join(repo, "tests"))
    import torch_multigpu as tm
    from test_bench_tools import fake_run
    world = int(a[a.index("--nproc_per_node") + 1])
    i = a.index("bench/torch_multigpu.py")
    bench, alloc, path = a[i + 1], a[a.index("--allocator") + 1], a[a.index("--out") + 1]
    problem = env_problem() or ("fake" if fail == bench + ":" + alloc else None)
    if problem:
        out({"kind": "error", "bench": bench, "allocator": alloc, "world": world, "rank": 0,
             "error": problem}, path)
        sys.exit(1)
    peak = {"vpmm": 20000, "native": 30000, "expandable": 21000}[alloc]
    for line in fake_run(tm, bench, alloc, world, peak, 100.0, [10.9, 10.8]):
        out(line, path)
    sys.exit(0)
if a[:2] == ["-m", "pytest"]:
    name = os.path.basename(a[2])
    xml = [x.split("=", 1)[1] for x in a if x.startswith("--junitxml=")][0]
    vpmm = os.environ.get("VPMM_TORCH_ENABLE") == "1"
    cases = ['<testcase classname="%s.T" name="test_one" time="0.1"/>' % name,
             '<testcase classname="%s.T" name="test_four_gpus" time="0.1">'
             '<skipped message="Need at least 4 CUDA devices"/></testcase>' % name]
    problem = None
    if vpmm and "autoenable" not in os.environ.get("PYTHONPATH", ""):
        problem = "autoenable not on PYTHONPATH"
    if "nccl" in name and os.environ.get("TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK") != "1":
        problem = "the register hook is off"
    problem = problem or env_problem()
    if vpmm and fail == name:
        problem = "AssertionError: fake"
    cases.append('<testcase classname="%s.T" name="test_two" time="0.1">%s</testcase>' % (
        name, '<failure message="%s">x</failure>' % problem if problem else ""))
    with open(xml, "w") as f:
        f.write('<?xml version="1.0"?><testsuites><testsuite name="pytest">%s</testsuite>'
                '</testsuites>' % "".join(cases))
    dbg = os.environ.get("NCCL_DEBUG_FILE")
    if dbg:
        with open(dbg.replace("%h", "host").replace("%p", str(os.getpid())), "w") as f:
            f.write("host:1:1 [0] NCCL INFO register comm 0x1 buffer 0x2 size 4096\n")
    print("%d passed, %d failed, 1 skipped" % (2 - bool(problem), bool(problem)))
    sys.exit(1 if problem else 0)
if a[:1] == ["bench/torch_multigpu.py"] and a[1] in ("split", "ipc"):
    alloc, path = a[a.index("--allocator") + 1], a[a.index("--out") + 1]
    problem = env_problem() or ("fake" if fail == a[1] + ":" + alloc else None)
    out({"kind": "check", "bench": a[1], "allocator": alloc, "ok": not problem,
         "problems": [problem] if problem else [], "checks": {"x": True}}, path)
    sys.exit(1 if problem else 0)
os.execv(real, [real] + a)
"""

FAKE_CMAKE = r"""#!/bin/sh
# A stand-in for cmake: "configures" nothing, "builds" an empty libvpmm_torch_backend.so.
case $1 in
--build) mkdir -p "$2/integrations" && : >"$2/integrations/libvpmm_torch_backend.so" ;;
esac
echo "fake cmake $*"
"""


class MultiGpuScripts(unittest.TestCase):
    """bench/run_multigpu.sh and integrations/pytorch/suite/run_multigpu.sh driven end to end
    with stand-ins for the GPU machine's tools (cmake, nvidia-smi, Python with PyTorch): the
    runs, the files left in --out, the summary, the exit status."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        d = self.dir.name
        self.bin = os.path.join(d, "bin")
        os.mkdir(self.bin)
        # The stand-in Python runs with -S: the real sitecustomize (autoenable/, on PYTHONPATH
        # for vpmm's runs) must not try to enable vpmm in it.
        for name, text in (("fake_python.py", FAKE_PY), ("cmake", FAKE_CMAKE),
                           ("python", '#!/bin/sh\nexec "$FAKE_REAL_PY" -S '
                                      '"$(dirname "$0")/fake_python.py" "$@"\n'),
                           ("nvidia-smi", "#!/bin/sh\necho 'NVIDIA H100 80GB HBM3, 580.00'\n")):
            path = os.path.join(self.bin, name)
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, 0o755)

    def tearDown(self):
        self.dir.cleanup()

    def script(self, rel, *args, gpus=2, fail=""):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("VPMM_", "NCCL_", "PYTORCH_", "TORCH_"))}
        env.update(PATH=self.bin + os.pathsep + env.get("PATH", ""),
                   PYTHON=os.path.join(self.bin, "python"), FAKE_REAL_PY=sys.executable,
                   FAKE_REPO=SRC, FAKE_GPUS=str(gpus), FAKE_FAIL=fail,
                   PYTHONDONTWRITEBYTECODE="1")
        env.pop("OUT", None)
        out = os.path.join(self.dir.name, "out")
        r = subprocess.run(["bash", os.path.join(SRC, rel), "--out", out, "--build-dir",
                            os.path.join(self.dir.name, "build"), *args], capture_output=True,
                           text=True, env=env, timeout=300)
        files = sorted(os.listdir(out)) if os.path.isdir(out) else []
        return r, out, files

    def test_bench_session_two_gpus(self):
        r, out, files = self.script("bench/run_multigpu.sh")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(files, ["multigpu-summary.md", "multigpu.jsonl", "multigpu.log"])
        summary = slurp(os.path.join(out, "multigpu-summary.md"))
        self.assertTrue(r.stdout.rstrip().endswith(summary.rstrip().splitlines()[-1]))
        for bench in ("ddp", "fsdp2"):
            for alloc in ("vpmm", "native", "expandable"):
                self.assertIn("| %s, 2 GPUs | %s |" % (bench, alloc), summary)
        self.assertIn("| split | expandable | pass |", summary)
        self.assertIn("| ipc | vpmm | pass |", summary)
        log = slurp(os.path.join(out, "multigpu.log"))
        self.assertIn("fake cmake --build", log)
        self.assertIn("== ipc native: exit 0", log)

    def test_bench_session_failure_is_loud(self):
        r, out, _ = self.script("bench/run_multigpu.sh", fail="fsdp2:native")
        self.assertEqual(r.returncode, 1)
        self.assertIn("fsdp2 native 2 GPUs (exit 1)", r.stdout)
        self.assertIn("FAIL: fsdp2, native, 2 GPUs, rank 0: fake", r.stdout)
        r, out, _ = self.script("bench/run_multigpu.sh", fail="split:vpmm")
        self.assertEqual(r.returncode, 1)
        self.assertIn("split vpmm (exit 1)", r.stdout)
        self.assertIn("| split | vpmm | **FAIL** |", r.stdout)

    def test_bench_session_four_gpus_and_budget(self):
        r, out, _ = self.script("bench/run_multigpu.sh", "--gpus", "4", gpus=4)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("| fsdp2, 4 GPUs | vpmm |", r.stdout)
        self.assertNotIn("split", r.stdout)
        r, out, _ = self.script("bench/run_multigpu.sh", "--gpus", "4", gpus=2)
        self.assertEqual(r.returncode, 2)  # too few GPUs: nothing run
        self.assertIn("needs 4 GPUs", r.stdout)
        r, out, _ = self.script("bench/run_multigpu.sh", "--budget", "60")
        self.assertEqual(r.returncode, 1)  # everything skipped: counted, named, missing
        self.assertIn("SKIPPED ddp vpmm 2 GPUs", r.stdout)
        self.assertIn("FAIL: missing: ipc for vpmm", r.stdout)

    def suite_tests(self):
        d = os.path.join(self.dir.name, "pytorch-tests")
        os.makedirs(os.path.join(d, "deps", "expecttest"))
        for f in ("test_cuda_multigpu.py", "test_c10d_ops_nccl.py", "test_c10d_nccl_extract.py",
                  os.path.join("deps", "expecttest", "__init__.py")):
            open(os.path.join(d, f), "w").close()
        return d

    def test_suite(self):
        rel = "integrations/pytorch/suite/run_multigpu.sh"
        tests = self.suite_tests()
        r, out, files = self.script(rel, "--tests", tests)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(files, ["suite-multigpu-raw.tgz", "suite-multigpu-summary.md",
                                 "suite-multigpu.log"])
        self.assertIn("| ops | vpmm | 2 | 0 | 0 | 1 | 3 |", r.stdout)
        self.assertIn("| registered (ncclCommRegister) | 2 | 2 |", r.stdout)
        self.assertIn("skipped on vpmm, by reason", r.stdout)
        r, out, _ = self.script(rel, "--tests", tests, fail="test_c10d_ops_nccl.py")
        self.assertEqual(r.returncode, 1)
        self.assertIn("FAIL: ops: test_c10d_ops_nccl.py.T::test_two failed on vpmm, passed on "
                      "native", r.stdout)
        os.remove(os.path.join(tests, "test_c10d_ops_nccl.py"))
        r, out, _ = self.script(rel, "--tests", tests)
        self.assertEqual(r.returncode, 2)
        self.assertIn("test_c10d_ops_nccl.py is missing", r.stderr)

    def test_summarize_multigpu_counts_and_missing_reports(self):
        d = self.dir.name
        xml = ('<?xml version="1.0"?><testsuites><testsuite name="pytest">%s</testsuite>'
               '</testsuites>')
        ok = '<testcase classname="m.T" name="test_a"/>'
        bad = '<testcase classname="m.T" name="test_a"><error message="boom">x</error></testcase>'
        for name, v, n in (("f", ok, ok), ("g", ok, bad)):
            with open(os.path.join(d, name + "-vpmm.xml"), "w") as f:
                f.write(xml % v)
            with open(os.path.join(d, name + "-native.xml"), "w") as f:
                f.write(xml % n)
        with open(os.path.join(d, "h-vpmm.xml"), "w") as f:
            f.write("<testsuites><testsu")  # a run killed while writing its report
        r = subprocess.run([sys.executable, os.path.join(SRC, "integrations", "pytorch", "suite",
                                                         "summarize_multigpu.py"), d, "f", "g",
                            "h"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 1)
        self.assertIn("- m.T::test_a: vpmm passed; native error (boom)", r.stdout)
        self.assertIn("FAIL: h on vpmm: no JUnit report", r.stdout)
        self.assertIn("FAIL: h on native: no JUnit report", r.stdout)
        self.assertNotIn("FAIL: g", r.stdout)  # failing on native only is no vpmm failure


if __name__ == "__main__":
    names = ("replay", "growth", "checkpoint", "nearfull", "drivercost", "soak")
    while len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        path = sys.argv.pop(1)
        TOOLS[names[len(TOOLS)]] = path
    if len(TOOLS) < 5:
        sys.exit("usage: test_bench_tools.py VPMM_REPLAY VPMM_GROWTH VPMM_CHECKPOINT "
                 "VPMM_NEARFULL VPMM_DRIVERCOST [VPMM_SOAK]")
    unittest.main()
