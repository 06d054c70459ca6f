#!/usr/bin/env python3
"""snapshot_to_trace.py — turns a PyTorch memory snapshot into an allocation trace for vpmm-replay.

PyTorch records its CUDA allocator's history when asked
(torch.cuda.memory._record_memory_history(max_entries=N)) and writes it with the snapshot
(torch.cuda.memory._dump_snapshot(path): a pickle of plain dicts and lists). This script reads that
pickle — it needs neither torch nor a GPU — and writes the device's history in the trace format of
docs/TRACE_FORMAT.md, so that a user's own workload can be replayed against every allocator:

    python3 integrations/pytorch/snapshot_to_trace.py snapshot.pickle my.trace.gz [--device N]
    ./build/bin/vpmm-replay my.trace.gz

Mapping: `alloc` -> `a`, `free_requested` -> `f`, `free_completed` -> `c` (only for a block whose
free was written); streams are numbered in order of first use, 0 (the default stream) staying 0;
sizes are the entries' sizes. The history is a ring buffer: a free of a block allocated before it
started is dropped (and counted), and so is its completion. Segment events (segment_alloc,
segment_free, segment_map, segment_unmap), snapshots and OOM entries are the recording
allocator's own business and are skipped. A summary goes to stderr; the exit status is 0, 1 for a
history that contradicts itself (an address allocated twice, a free whose size differs), 2 for
bad arguments or an unreadable file. Tested by tests/test_snapshot_to_trace.py.
"""
import argparse
import contextlib
import gzip
import pickle
import sys


class TraceError(Exception):
    """The history contradicts itself (the message names the entry)."""


def device_trace(snapshot, device):
    """The list of trace entries of `device` (None: the first device with any)."""
    traces = snapshot.get("device_traces") if isinstance(snapshot, dict) else None
    if not isinstance(traces, list):
        raise TraceError("not a PyTorch memory snapshot (no 'device_traces' list): was it "
                         "written by torch.cuda.memory._dump_snapshot with the history on?")
    if device is None:
        for d, entries in enumerate(traces):
            if entries:
                return d, entries
        raise TraceError("the snapshot's history is empty: call "
                         "torch.cuda.memory._record_memory_history() before the workload")
    if device < 0 or device >= len(traces):
        raise TraceError(f"device {device}: the snapshot has {len(traces)} device trace(s)")
    return device, traces[device]


def convert(entries, out):
    """Writes the trace lines of `entries` to the text stream `out`; returns a summary dict."""
    streams = {0: 0}
    live = {}          # addr -> (size, stream number)
    awaiting = {}      # addr -> (size, stream number): freed, completion not yet written
    stats = {"allocs": 0, "frees": 0, "completions": 0, "dropped_frees": 0, "skipped": 0,
             "peak_live": 0}
    live_bytes = 0

    def stream_no(raw):
        if raw not in streams:
            streams[raw] = len(streams)
        return streams[raw]

    for i, e in enumerate(entries):
        action = e.get("action")
        addr, size = e.get("addr"), e.get("size")
        if action == "alloc":
            if addr in live:
                raise TraceError(f"entry {i}: address {addr:#x} allocated twice")
            s = stream_no(e.get("stream", 0))
            live[addr] = (size, s)
            live_bytes += size
            stats["peak_live"] = max(stats["peak_live"], live_bytes)
            stats["allocs"] += 1
            out.write(f"a {addr:x} {size} {s}\n")
        elif action == "free_requested":
            if addr not in live:
                stats["dropped_frees"] += 1  # allocated before the history started
                continue
            asize, s = live.pop(addr)
            if size is not None and size != asize:
                raise TraceError(f"entry {i}: free of {addr:#x} with size {size}, "
                                 f"allocated with {asize}")
            live_bytes -= asize
            awaiting[addr] = (asize, s)
            stats["frees"] += 1
            out.write(f"f {addr:x} {asize} {s}\n")
        elif action == "free_completed":
            if addr in awaiting:
                asize, s = awaiting.pop(addr)
                stats["completions"] += 1
                out.write(f"c {addr:x} {asize} {s}\n")
        else:
            stats["skipped"] += 1
    stats["streams"] = len(streams)
    stats["live_at_end"] = len(live)
    return stats


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("snapshot", help="a pickle written by torch.cuda.memory._dump_snapshot")
    p.add_argument("trace", help="the trace to write ('.gz' compresses; '-' is stdout)")
    p.add_argument("--device", type=int, default=None,
                   help="which device's history (default: the first with any)")
    args = p.parse_args(argv)
    try:
        with open(args.snapshot, "rb") as f:
            snapshot = pickle.load(f)
    except (OSError, pickle.UnpicklingError, EOFError) as err:
        print(f"snapshot_to_trace: {args.snapshot}: {err}", file=sys.stderr)
        return 2
    try:
        device, entries = device_trace(snapshot, args.device)
        if args.trace == "-":
            out = contextlib.nullcontext(sys.stdout)
        elif args.trace.endswith(".gz"):
            out = gzip.open(args.trace, "wt")
        else:
            out = open(args.trace, "w")
        with out as out:
            out.write(f"# converted from {args.snapshot}, device {device}, by "
                      "integrations/pytorch/snapshot_to_trace.py (docs/TRACE_FORMAT.md)\n"
                      "# op addr size stream  (a=alloc f=free_requested c=free_completed)\n")
            stats = convert(entries, out)
    except TraceError as err:
        print(f"snapshot_to_trace: {args.snapshot}: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"snapshot_to_trace: {args.trace}: {err}", file=sys.stderr)
        return 2
    print(f"snapshot_to_trace: device {device}: {stats['allocs']} allocations, {stats['frees']} "
          f"frees, {stats['completions']} completions on {stats['streams']} stream(s); peak live "
          f"{stats['peak_live']} bytes; {stats['dropped_frees']} free(s) of blocks allocated "
          f"before the history dropped; {stats['skipped']} other entries skipped; "
          f"{stats['live_at_end']} block(s) live at the end", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
