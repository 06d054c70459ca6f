#!/usr/bin/env python3
"""floor.py — the idealised footprint of an allocation trace: what no page-based allocator beats.

The idealised allocator places every block by best fit, byte-granular (sizes rounded up to
VPMM_ALIGNMENT, 256 bytes), anywhere in one unbounded address space (a block that fits no free
range goes at the top), reuses memory the moment the program frees it (the `f` event: as if every
stream were done at once), and holds exactly the pages — 2 MiB by default — that contain at least
one live byte: a page is given back the moment its last byte is freed, and never moved. Its
footprint is the peak of those pages divided by the trace's peak live bytes, as `vpmm-replay`
divides (bench/RESULTS.md, "Footprint"). The footprint goal (bench/RESULTS.md) is stated against this floor:
at most 1.02 where the floor allows it, within 0.02 of the floor elsewhere.

    python3 bench/floor.py [--page BYTES] [--align BYTES] [--json] TRACE...

Reads the format of docs/TRACE_FORMAT.md (gzip or plain; `c` events are ignored). Prints one line
per trace, or with --json one JSON object per trace. Exit status 1 if a trace cannot be read.
"""
import argparse
import bisect
import gzip
import json
import sys

PAGE = 2 << 20
ALIGN = 256


class Ideal:
    """Best-fit placement in an unbounded address space, and the pages holding live bytes."""

    def __init__(self, page, align):
        self.page, self.align = page, align
        self.top = 0  # the lowest address never used
        self.by_size = []  # sorted (size, addr) of the free ranges below top
        self.start_of_end = {}  # end -> start of each free range
        self.end_of_start = {}  # start -> end
        self.page_live = {}  # page index -> live bytes in it
        self.pages = self.peak_pages = 0

    def _hole_add(self, start, end):
        # Coalesce with the free ranges on either side; a range that reaches top lowers it.
        if start in self.start_of_end:  # a range ends where this starts
            s = self.start_of_end.pop(start)
            self._hole_del(s, start)
            start = s
        if end in self.end_of_start:
            e = self.end_of_start[end]
            self._hole_del(end, e)
            end = e
        if end == self.top:
            self.top = start
            return
        self.start_of_end[end] = start
        self.end_of_start[start] = end
        bisect.insort(self.by_size, (end - start, start))

    def _hole_del(self, start, end):
        self.start_of_end.pop(end, None)
        self.end_of_start.pop(start, None)
        i = bisect.bisect_left(self.by_size, (end - start, start))
        del self.by_size[i]

    def _touch(self, addr, size, sign):
        first, last = addr // self.page, (addr + size - 1) // self.page
        for pg in range(first, last + 1):
            lo, hi = max(addr, pg * self.page), min(addr + size, (pg + 1) * self.page)
            before = self.page_live.get(pg, 0)
            after = before + sign * (hi - lo)
            if after:
                self.page_live[pg] = after
            else:
                del self.page_live[pg]
            self.pages += (after > 0) - (before > 0)
        self.peak_pages = max(self.peak_pages, self.pages)

    def alloc(self, size):
        size = -(-size // self.align) * self.align
        i = bisect.bisect_left(self.by_size, (size, -1))
        if i < len(self.by_size):
            hsize, start = self.by_size[i]
            self._hole_del(start, start + hsize)
            if hsize > size:
                self._hole_add(start + size, start + hsize)
            addr = start
        else:
            addr = self.top
            self.top += size
        self._touch(addr, size, +1)
        return addr, size

    def free(self, addr, size):
        self._touch(addr, size, -1)
        self._hole_add(addr, addr + size)


def floor_of(path, page=PAGE, align=ALIGN):
    """{'trace', 'peak_live_bytes', 'floor_peak_bytes', 'floor'} of one trace file."""
    opener = gzip.open if path.endswith(".gz") else open
    ideal = Ideal(page, align)
    live = {}  # recorded address -> (placed address, rounded size, size)
    live_bytes = peak_live = 0
    with opener(path, "rt") as f:
        for n, line in enumerate(f, 1):
            if not line.strip() or line.startswith("#"):
                continue
            parts = line.split()
            if len(parts) != 4 or parts[0] not in "afc":
                raise ValueError(f"{path}:{n}: not an event: {line.strip()!r}")
            op, key, size = parts[0], parts[1], int(parts[2])
            if op == "a":
                if key in live:
                    raise ValueError(f"{path}:{n}: allocation of a live address {key}")
                addr, rounded = ideal.alloc(size)
                live[key] = (addr, rounded, size)
                live_bytes += size
                peak_live = max(peak_live, live_bytes)
            elif op == "f":
                if key not in live:
                    raise ValueError(f"{path}:{n}: free of an address that is not live: {key}")
                addr, rounded, asked = live.pop(key)
                ideal.free(addr, rounded)
                live_bytes -= asked
    peak = ideal.peak_pages * page
    return {
        "trace": path.rsplit("/", 1)[-1],
        "peak_live_bytes": peak_live,
        "floor_peak_bytes": peak,
        "floor": round(peak / peak_live, 4) if peak_live else None,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", nargs="+", metavar="TRACE")
    ap.add_argument("--page", type=int, default=PAGE, help="page size in bytes (default 2 MiB)")
    ap.add_argument("--align", type=int, default=ALIGN, help="size rounding (default 256)")
    ap.add_argument("--json", action="store_true", help="one JSON object per trace")
    args = ap.parse_args(argv)
    if args.page <= 0 or args.align <= 0:
        ap.error("--page and --align must be positive")
    rc = 0
    for path in args.traces:
        try:
            r = floor_of(path, args.page, args.align)
        except (OSError, EOFError, ValueError) as e:
            print(f"floor.py: {path}: {e}", file=sys.stderr)
            rc = 1
            continue
        try:
            if args.json:
                print(json.dumps(r))
            else:
                print(f"{r['trace']:32} peak live {r['peak_live_bytes'] / 2**20:10.1f} MiB   "
                      f"idealised {r['floor_peak_bytes'] / 2**20:10.1f} MiB   floor {r['floor']}")
            sys.stdout.flush()
        except OSError as e:  # a standard output that cannot be written
            print(f"floor.py: cannot write the result: {e}", file=sys.stderr)
            return 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
