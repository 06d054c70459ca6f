#!/usr/bin/env python3
"""test_snapshot_to_trace.py — integrations/pytorch/snapshot_to_trace.py on hand-made snapshots.

A snapshot as torch.cuda.memory._dump_snapshot writes it (plain dicts and lists; no torch needed):
two devices, several streams, a free of a block allocated before the history started, segment
and OOM entries. Checks the exact trace lines, the stream numbering (0 stays 0, others in order of
first use), the dropped free and its completion, .gz output, the errors (not a snapshot, empty
history, an address allocated twice, a size that changed), and — given vpmm-replay's path as the
first argument — that the replay tool loads and replays the converted trace on the host backend.
Run by ctest (test_snapshot_to_trace).
"""
import gzip
import os
import pickle
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integrations", "pytorch"))
import snapshot_to_trace as s2t  # noqa: E402

REPLAY = None  # set from argv


def entry(action, addr, size, stream=0):
    return {"action": action, "addr": addr, "size": size, "stream": stream, "time_us": 0,
            "frames": []}


SNAPSHOT = {
    "segments": [],
    "device_traces": [
        [],  # device 0: no history
        [
            entry("free_requested", 0x7000, 512),      # allocated before the history: dropped
            entry("free_completed", 0x7000, 512),      # ... with its completion
            entry("segment_alloc", 0x10000, 2 << 20),
            entry("alloc", 0x10000, 1024),
            entry("alloc", 0x10400, 4096, stream=0x55aa),
            entry("alloc", 0x20000, 3 << 20, stream=0x66bb),
            entry("free_requested", 0x10000, 1024),
            entry("alloc", 0x10000, 512, stream=0x55aa),  # address reused after its free
            entry("free_completed", 0x10000, 1024),
            entry("oom", 0, 1 << 30),
            entry("free_requested", 0x10400, 4096, stream=0x55aa),
        ],
    ],
}

EXPECTED = [
    "a 10000 1024 0",
    "a 10400 4096 1",
    "a 20000 3145728 2",
    "f 10000 1024 0",
    "a 10000 512 1",
    "c 10000 1024 0",
    "f 10400 4096 1",
]


class Convert(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.snap = os.path.join(self.dir.name, "snapshot.pickle")
        with open(self.snap, "wb") as f:
            pickle.dump(SNAPSHOT, f)

    def tearDown(self):
        self.dir.cleanup()

    def lines(self, path):
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as f:
            return [l.strip() for l in f if not l.startswith("#")]

    def test_lines_and_streams(self):
        out = os.path.join(self.dir.name, "t.trace")
        self.assertEqual(s2t.main([self.snap, out]), 0)  # device 1: the first with history
        self.assertEqual(self.lines(out), EXPECTED)

    def test_gzip_and_device(self):
        out = os.path.join(self.dir.name, "t.trace.gz")
        self.assertEqual(s2t.main([self.snap, out, "--device", "1"]), 0)
        self.assertEqual(self.lines(out), EXPECTED)
        self.assertEqual(s2t.main([self.snap, out, "--device", "0"]), 0)  # empty: no lines
        self.assertEqual(self.lines(out), [])
        self.assertEqual(s2t.main([self.snap, out, "--device", "5"]), 1)

    def test_errors(self):
        out = os.path.join(self.dir.name, "t.trace")
        bad = os.path.join(self.dir.name, "bad.pickle")
        cases = [
            ({"segments": []}, 1),                                     # no history
            ({"device_traces": [[], []]}, 1),                          # empty history
            ({"device_traces": [[entry("alloc", 1, 8), entry("alloc", 1, 8)]]}, 1),
            ({"device_traces": [[entry("alloc", 1, 8), entry("free_requested", 1, 16)]]}, 1),
        ]
        for snap, rc in cases:
            with open(bad, "wb") as f:
                pickle.dump(snap, f)
            self.assertEqual(s2t.main([bad, out]), rc, snap)
        with open(bad, "wb") as f:
            f.write(b"not a pickle")
        self.assertEqual(s2t.main([bad, out]), 2)
        self.assertEqual(s2t.main([os.path.join(self.dir.name, "missing"), out]), 2)

    def test_replays(self):
        if REPLAY is None:
            self.skipTest("vpmm-replay's path not given")
        out = os.path.join(self.dir.name, "t.trace.gz")
        self.assertEqual(s2t.main([self.snap, out]), 0)
        r = subprocess.run([REPLAY, "--backend", "host", "--quiet", out], capture_output=True,
                           text=True, check=False)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        REPLAY = sys.argv.pop(1)
    unittest.main()
