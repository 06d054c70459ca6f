#!/usr/bin/env python3
"""check_layers.py — the product's include and call graph goes down only, and has no circle.

The layers of the library's sources (docs/ARCHITECTURE.md), top down; a folder may use its own
files and any folder of a lower layer, never one of its own layer (sideways) or of a higher one
(upward):

    src/api/ -> checkpoint/ -> graph/ -> src/core/ -> src/backends/{cuda,host,fault,count}/
      -> src/driver/ -> src/ds/ -> src/base/

graph/ and checkpoint/ are at the top level, a layer of their own above the core. The API floor
includes nothing of theirs: the one edge it has to graph/ is the link-time call of
vpmm_i_graph_hooks() (declared by the core, defined by graph/ or by src/api/graph_off.c), which
the ranking allows.

The backends are used by api/ only (its backend factory): the core and the layers above it reach
them through the driver table. include/vpmm.h, the public contract, is below everything: every folder may include it, and it
includes nothing of the product.

Edges come from two sources:
  includes  every #include "..." of src/ and include/, resolved as the compiler resolves it
            (the including file's folder, then the library's include directories);
  calls     with --objects (the library's object files, $<TARGET_OBJECTS:vpmm_objects>): each
            symbol an object leaves undefined (nm) and another object defines, a function call
            or a data reference from one source file to another.

Checked:
  1. no edge between folders goes up or sideways (so the folder graph has no circle);
  2. no circle of calls between the files of a folder — within a folder the calls go one way too
     (graph/: capture.c -> graph_pool.c; backends/host/: driver_host.c -> driver_host_graph.c ->
     driver_host_stream.c -> driver_host_base.c);
  2b. in a folder with sub-layers (SUBLAYERS: core/), every source file is in one, and no call
     goes to a higher sub-layer (calls within a sub-layer are allowed, and rule 2 keeps them
     acyclic); the headers of such a folder are shared by all its files and are not ranked;
  3. no circle between headers.
Exit status 0 when all hold, 1 otherwise, with every violation on stderr.

    scripts/check_layers.py [--root DIR] [--nm NM] [--objects OBJ...] [--graph FOLDER]

--graph FOLDER prints the call edges between FOLDER's files (with the symbols) and the circles
among them, then checks as usual: the measure to take before moving code between files.
"""
import argparse
import os
import re
import subprocess
import sys

# Folders of src/, top down; folders in one tuple share a layer (they may not use each other).
LAYERS = [
    ("src/api",),
    ("checkpoint",),
    ("graph",),
    ("src/core",),
    ("src/backends/cuda", "src/backends/host", "src/backends/fault", "src/backends/count"),
    ("src/driver",),
    ("src/ds",),
    ("src/base",),
    ("include",),
]
# Folders only some others may use, whatever their rank: the backends are reached through the
# driver table (driver/), and only the API floor's factory names them.
ONLY_FROM = {
    "src/backends/cuda": {"src/api"},
    "src/backends/host": {"src/api"},
    "src/backends/fault": {"src/api"},
    "src/backends/count": {"src/api"},
}
# Sub-layers inside a folder, top down (see 2b. above; docs/ARCHITECTURE.md, "The core's
# sub-layers"). Files in one tuple may call each other, without a circle.
SUBLAYERS = {
    "src/core": [
        ("pool.c",),  # the entry points: create, destroy, malloc's shared part, free
        # whole-pool passes: trim, stats, the OOM report, the validator, the sweep of every stream
        ("trim.c", "stats.c", "report.c", "check.c", "stream_sweep.c", "worker.c"),
        # other devices and processes: peer access, exports, imports (peer.c calls import.c)
        ("peer.c", "share.c", "import.c"),
        ("arena.c",),  # arenas: a graph pool's allocation and free, zombie revival
        ("defrag.c", "policy.c"),  # growth: the plan (policy.c) and its execution (defrag.c)
        ("uses.c", "stream.c"),  # streams: keys, markers, polls; cross-stream uses
        # the pool's data: regions, caches, VA, pages, the share slots other processes count in
        ("pages.c", "va.c", "cache.c", "region.c", "share_table.c", "segment.c"),
        # base: internal.h's accessors and the lock wrappers, a driver result as the pool's
        # status, options, trace recording, NVTX, the lock's slow paths, errors
        ("internal.c", "driver_error.c", "options.c", "record.c", "nvtx.c", "lock.c",
         "status.c"),
    ],
}

RANK = {folder: i for i, group in enumerate(LAYERS) for folder in group}
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def product_files(root):
    files = []
    for folder in RANK:
        top = os.path.join(root, folder)
        for dirpath, _, names in os.walk(top):
            for n in names:
                if n.endswith((".c", ".h")):
                    files.append(os.path.relpath(os.path.join(dirpath, n), root))
    return sorted(files)


def folder_of(rel):
    d = os.path.dirname(rel)
    while d and d not in RANK:
        d = os.path.dirname(d)
    return d or None


def include_edges(root, files):
    by_dir = {}
    for f in files:
        by_dir.setdefault(os.path.dirname(f), set()).add(os.path.basename(f))
    search = [f for f in RANK]  # the library's include directories (CMake: VPMM_INTERNAL_...)
    edges, unresolved = set(), []
    for f in files:
        with open(os.path.join(root, f), encoding="utf-8") as fh:
            text = fh.read()
        for name in INCLUDE_RE.findall(text):
            here = os.path.normpath(os.path.join(os.path.dirname(f), name))
            if here in files:
                target = here
            else:
                hits = [os.path.join(d, name) for d in search if os.path.join(d, name) in files]
                if not hits:
                    unresolved.append((f, name))  # a system or generated header: not ours
                    continue
                target = hits[0]
            if target != f:
                edges.add((f, target, "includes"))
    return edges, unresolved


def call_edges(root, nm, objects):
    defined, undefined = {}, {}
    for obj in objects:
        src = source_of(root, obj)
        if src is None:
            continue
        out = subprocess.run([nm, "-P", obj], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) < 2:
                continue
            sym, kind = parts[0], parts[1]
            if kind == "U":
                undefined.setdefault(src, set()).add(sym)
            elif kind in "TDBRCGSV":
                defined[sym] = src
    edges = set()
    for src, syms in undefined.items():
        for s in syms:
            dst = defined.get(s)
            if dst is not None and dst != src:
                edges.add((src, dst, "calls " + s))
    return edges


def source_of(root, obj):
    """src/core/pool.c for .../vpmm_objects.dir/src/core/pool.c.o."""
    norm = obj.replace(os.sep, "/")
    m = re.search(r"\.dir/(.+)\.o(bj)?$", norm)
    if not m:
        return None
    rel = m.group(1)
    return rel if os.path.exists(os.path.join(root, rel)) else None


def sccs(nodes, adj):
    """Tarjan's strongly connected components (iterative), those with more than one node."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(adj.get(start, ()))))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(adj.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def show_graph(folder, calls, adj):
    """Prints folder's call edges, file to file with the symbols, and its circles."""
    syms = {}
    for a, b, why in calls:
        if folder_of(a) == folder and folder_of(b) == folder:
            syms.setdefault((a, b), []).append(why.split(" ", 1)[1])
    for (a, b), names in sorted(syms.items()):
        print("%s -> %s: %s" % (os.path.basename(a), os.path.basename(b), " ".join(sorted(names))))
    inner = {a: {b for b in bs if folder_of(b) == folder}
             for a, bs in adj.items() if folder_of(a) == folder}
    comps = sccs(sorted(inner), inner)
    print("%s: %d call edges between files, %d circles%s" % (
        folder, len(syms), len(comps), "".join(
            "\n  circle: " + " ".join(os.path.basename(f) for f in c) for c in comps)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    ap.add_argument("--nm", default="nm")
    ap.add_argument("--objects", nargs="*", default=[])
    ap.add_argument("--graph", metavar="FOLDER", help="print FOLDER's file call graph and circles")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    files = product_files(root)
    inc, _ = include_edges(root, files)
    calls = call_edges(root, args.nm, args.objects) if args.objects else set()
    bad = []

    # 0. every file of the library is in a layer
    for a, b, _ in inc | calls:
        for f in (a, b):
            if folder_of(f) is None:
                bad.append("file outside the layers: %s (move it into a folder of LAYERS)" % f)
    bad = sorted(set(bad))

    # 1. folders: down only
    for a, b, why in sorted(inc | calls):
        fa, fb = folder_of(a), folder_of(b)
        if fa == fb or fa is None or fb is None:
            continue
        if RANK[fb] < RANK[fa]:
            bad.append("upward edge: %s -> %s (%s; %s is above %s)" % (a, b, why, fb, fa))
        elif RANK[fb] == RANK[fa]:
            bad.append("sideways edge: %s -> %s (%s; %s and %s share a layer)" % (a, b, why, fa, fb))
        elif fb in ONLY_FROM and fa not in ONLY_FROM[fb]:
            bad.append("edge past the driver table: %s -> %s (%s; only %s may use %s)"
                       % (a, b, why, ", ".join(sorted(ONLY_FROM[fb])), fb))

    # 2. files: no circle of calls within a folder (includes of .c files' own headers aside)
    adj = {}
    for a, b, _ in calls:
        if folder_of(a) == folder_of(b) and folder_of(a) is not None:
            adj.setdefault(a, set()).add(b)
    for comp in sccs(sorted(adj), adj):
        bad.append("circle of calls between files: " + " <-> ".join(comp))

    # 2b. sub-layers: every source file ranked, no call upward
    for folder, layers in SUBLAYERS.items():
        sub = {name: i for i, group in enumerate(layers) for name in group}
        for f in files:
            if folder_of(f) == folder and f.endswith(".c") and os.path.basename(f) not in sub:
                bad.append("file in no sub-layer of %s: %s (add it to SUBLAYERS)" % (folder, f))
        for a, b, why in sorted(calls):
            if folder_of(a) != folder or folder_of(b) != folder:
                continue
            ra, rb = sub.get(os.path.basename(a)), sub.get(os.path.basename(b))
            if ra is not None and rb is not None and rb < ra:
                bad.append("upward call inside %s: %s -> %s (%s; move the function down, or pass "
                           "it in)" % (folder, a, b, why))

    if args.graph:
        show_graph(args.graph.rstrip("/"), calls, adj)

    # 3. headers: no circle
    hadj = {}
    for a, b, _ in inc:
        if a.endswith(".h"):
            hadj.setdefault(a, set()).add(b)
    for comp in sccs(sorted(hadj), hadj):
        bad.append("circle of includes between headers: " + " <-> ".join(comp))

    if not args.objects:
        print("check_layers: includes only (pass --objects for the calls)", file=sys.stderr)
    for line in bad:
        print("check_layers: " + line, file=sys.stderr)
    nfolders = len({(folder_of(a), folder_of(b)) for a, b, _ in inc | calls})
    print("check_layers: %d files, %d include edges, %d call edges, %d folder pairs: %s"
          % (len(files), len(inc), len(calls), nfolders, "FAIL" if bad else "ok"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
