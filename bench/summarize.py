#!/usr/bin/env python3
"""summarize.py — turns bench/run_all.sh's JSON lines into the tables of bench/RESULTS.md.

For timed rows the median over repetitions of each run's medians is shown, with the range. A replay
whose mallocs failed (vpmm-replay exit 4: "footprint" is null) has no footprint: its cell says so.
The PyTorch anchors (run tags torch#r and torchx#r: vpmm-replay --backend torch and
torch-expandable, PyTorch's caching allocator measured in the same run with the same timer) get
their own columns, and a table of their own with the ratios of vpmm's total allocator time to
theirs, only where the file has them: files without them give the tables they always gave. So
does the idealised floor (run tag "floor": bench/floor.py --json), a column of the footprint table.
"""
import json
import sys
from collections import defaultdict
from statistics import median


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def footprint(r, fmt="{:.3f}"):
    """The footprint cell of a replay row; a replay whose mallocs failed has none."""
    if r.get("footprint") is None:
        return f"— ({r['ooms']} mallocs failed)"
    return fmt.format(r["footprint"])


def rng(vals, fmt="{:.0f}"):
    vals = sorted(vals)
    m = median(vals)
    return fmt.format(m) if len(vals) == 1 else f"{fmt.format(m)} ({fmt.format(vals[0])}–{fmt.format(vals[-1])})"


# The PyTorch anchors' run tags (run_all.sh) and column names, in their order.
TORCH = (("torch", "PyTorch native"), ("torchx", "PyTorch expandable"))


def totals(by, t, k):
    """The total allocator times (ms) of a trace's runs of one kind."""
    return [r["alloc_ms_total"] for r in by.get((t, k), []) if "alloc_ms_total" in r]


def slow(rs):
    """Mallocs above 2 ms (median over runs); for vpmm, how many of them grew the pool by more than
    1 GiB (the single-call goal's exception) and what the slowest one asked for and did."""
    if not all("malloc_over_2ms" in r for r in rs):
        return "—"
    cell = f"{median(r['malloc_over_2ms'] for r in rs):.0f}"
    if all("malloc_over_2ms_big_growth" in r for r in rs):
        r = max(rs, key=lambda r: r["malloc_ns_max"])
        cell += (f" ({median(x['malloc_over_2ms_big_growth'] for x in rs):.0f} > 1 GiB growth; slowest:"
                 f" {r['malloc_max_size'] / 2**20:.0f} MiB, {r['malloc_max_pages_created']} pages"
                 f" created, {r['malloc_max_pages_remapped']} remapped)")
    return cell


def second_half(by, traces, torch):
    """The total allocator time of each trace's second half (operations nops/2 onwards: past a
    training program's warm-up, in which it grows its memory), every backend, and vpmm's ratio."""
    kinds = (("cuda", "vpmm (cuda)"), ("async", "cudaMallocAsync")) + tuple(torch)
    def half(t, k):
        return [r["alloc_ms_second_half"] for r in by.get((t, k), []) if "alloc_ms_second_half" in r]
    if not any(half(t, "cuda") for t in traces):
        return
    print("\n## The second half of each trace: total allocator time (ms)\n")
    print("| trace |" + "".join(f" {name} |" for _, name in kinds) +
          "".join(f" vpmm / {name} |" for _, name in torch))
    print("|---|" + "---|" * (len(kinds) + len(torch)))
    for t in traces:
        v = half(t, "cuda")
        cells = [rng(half(t, k), "{:.1f}") if half(t, k) else "—" for k, _ in kinds]
        for k, _ in torch:
            a = half(t, k)
            cells.append(f"{median(v) / median(a):.2f}" if v and a and median(a) > 0 else "—")
        print(f"| {t} | " + " | ".join(cells) + " |")


def handle_pages(by, traces):
    """VPMM_HANDLE_PAGES=N runs (run tags hpN#r): total (ms) / malloc p99 (µs) / footprint."""
    ns = sorted({int(k[2:]) for (_, k) in by if k.startswith("hp") and k[2:].isdigit()})
    if not ns:
        return
    print("\n## Handle size (VPMM_HANDLE_PAGES): total (ms) / malloc p99 (µs) / footprint\n")
    print("| trace | N = 1 (default) |" + "".join(f" N = {n} |" for n in ns))
    print("|---|---|" + "---|" * len(ns))
    for t in traces:
        cells = []
        for k in ["cuda"] + [f"hp{n}" for n in ns]:
            rs = [r for r in by.get((t, k), []) if "alloc_ms_total" in r]
            cells.append(f"{median(r['alloc_ms_total'] for r in rs):.1f} / "
                         f"{median(r['malloc_ns_p99'] for r in rs) / 1e3:.1f} / {footprint(rs[0])}"
                         if rs else "—")
        print(f"| {t} | " + " | ".join(cells) + " |")


def no_large(by, traces, torch):
    """VPMM_LARGE_HANDLES=0 runs (run tags nolarge#r) beside the default's: total (ms), malloc p99
    (µs), footprint, and the totals' ratio (also to PyTorch native's, where the file has it)."""
    if not any(by.get((t, "nolarge")) for t in traces):
        return
    native = any(k == "torch" for k, _ in torch)
    print("\n## Without large handles (VPMM_LARGE_HANDLES=0): total (ms) / malloc p99 (µs) / footprint\n")
    print("| trace | default | VPMM_LARGE_HANDLES=0 | total, 0 ÷ default |" +
          (" total, 0 ÷ PyTorch native |" if native else ""))
    print("|---|---|---|---|" + ("---|" if native else ""))
    for t in traces:
        cells, tot = [], {}
        for k in ("cuda", "nolarge"):
            rs = [r for r in by.get((t, k), []) if "alloc_ms_total" in r]
            tot[k] = median(r["alloc_ms_total"] for r in rs) if rs else None
            cells.append(f"{tot[k]:.1f} / {median(r['malloc_ns_p99'] for r in rs) / 1e3:.1f} / "
                         f"{footprint(rs[0])}" if rs else "—")
        cells.append(f"{tot['nolarge'] / tot['cuda']:.2f}" if tot["cuda"] and tot["nolarge"] else "—")
        if native:
            a = totals(by, t, "torch")
            cells.append(f"{tot['nolarge'] / median(a):.2f}" if tot["nolarge"] and a else "—")
        print(f"| {t} | " + " | ".join(cells) + " |")


def anchors(by, traces, torch):
    """vpmm against PyTorch's caching allocator: every backend's total, tails and footprint, then
    vpmm's total allocator time over each anchor's (below 1: vpmm spends less)."""
    kinds = (("cuda", "vpmm (cuda)"), ("async", "cudaMallocAsync"), ("malloc", "cudaMalloc")) + tuple(torch)
    print("\n## Against PyTorch's caching allocator: total allocator time (ms), p99 / max (µs), footprint\n")
    print("| trace | backend | malloc+free total | malloc p99 / max | free p99 / max | mallocs > 2 ms |"
          " footprint |")
    print("|---|---|---|---|---|---|---|")
    for t in traces:
        for k, name in kinds:
            rs = by.get((t, k))
            if not rs:
                continue
            tot = totals(by, t, k)
            def tail(field):
                if not all(f"{field}_ns_p99" in r and f"{field}_ns_max" in r for r in rs):
                    return "—"
                return (f"{median(r[f'{field}_ns_p99'] for r in rs) / 1e3:.1f} / "
                        f"{median(r[f'{field}_ns_max'] for r in rs) / 1e3:.0f}")
            print(f"| {t} | {name} | {rng(tot, '{:.1f}') if tot else '—'} | {tail('malloc')} | "
                  f"{tail('free')} | {slow(rs)} | {footprint(rs[0])} |")
    print("\n| trace |" + "".join(f" vpmm total / {name} total |" for _, name in torch))
    print("|---|" + "---|" * len(torch))
    for t in traces:
        v = totals(by, t, "cuda")
        cells = []
        for k, _ in torch:
            a = totals(by, t, k)
            cells.append(f"{median(v) / median(a):.2f}" if v and a and median(a) > 0 else "—")
        print(f"| {t} | " + " | ".join(cells) + " |")


def main():
    rows = load(sys.argv[1])
    replays = [r for r in rows if "trace" in r]
    by = defaultdict(list)
    for r in replays:
        kind = r["run"].split("#")[0]
        by[(r["trace"].replace(".trace.gz", ""), kind)].append(r)
    traces = sorted({t for t, _ in by}, key=lambda t: (t.startswith("synthetic"), t))
    # Columns of the anchors only where some trace has them (old files: the old tables).
    torch = [(k, name) for k, name in TORCH if any(by.get((t, k)) for t in traces)]
    th = "".join(f" {name} |" for _, name in torch)
    tsep = "---|" * len(torch)

    # bench/floor.py's idealised footprint (run tag "floor"), where the file has it.
    floors = any(by.get((t, "floor")) for t in traces)
    print("\n## Footprint (peak device memory / peak live bytes)\n")
    print("| trace | peak live | vpmm (host) | vpmm (cuda) | cudaMallocAsync | cudaMalloc |" + th +
          (" idealised floor |" if floors else ""))
    print("|---|---|---|---|---|---|" + tsep + ("---|" if floors else ""))
    for t in traces:
        cells = []
        for k in ("host", "cuda", "async", "malloc") + tuple(k for k, _ in torch):
            rs = by.get((t, k))
            cells.append(footprint(rs[0]) if rs else "—")
        if floors:
            rs = by.get((t, "floor"))
            cells.append(f"{rs[0]['floor']:.3f}" if rs else "—")
        # peak live is the trace's own: any replay of it says the same
        live = next(rs for (tt, _), rs in by.items() if tt == t and rs)[0]["peak_live_bytes"] / 1e9
        print(f"| {t} | {live:.3f} GB | " + " | ".join(cells) + " |")

    print("\n## Hot path: median malloc + median free (ns), H100 host\n")
    print("| trace | vpmm (cuda) | cudaMallocAsync | cudaMalloc |" + th +
          " vpmm speed-up vs cudaMallocAsync |")
    print("|---|---|---|---|" + tsep + "---|")
    for t in traces:
        v, a, m = by.get((t, "cuda")), by.get((t, "async")), by.get((t, "malloc"))
        if not v:
            continue
        vp = [r["pair_ns_median"] for r in v]
        ap = [r["pair_ns_median"] for r in a] if a else []
        mp = [r["pair_ns_median"] for r in m] if m else []
        ratio = f"{median(ap) / median(vp):.1f}x" if ap else "—"
        tc = "".join(f" {rng([r['pair_ns_median'] for r in by[(t, k)]]) if by.get((t, k)) else '—'} |"
                     for k, _ in torch)
        print(f"| {t} | {rng(vp)} | {rng(ap) if ap else '—'} | {rng(mp) if mp else '—'} |{tc} {ratio} |")

    if any("alloc_ms_total" in r for r in replays):
        # The sum of all malloc + free durations, the tail, and vpmm's driver time.
        print("\n## Total allocator time: sum of all malloc + free durations (ms); malloc p99 / max (µs)\n")
        print("| trace | vpmm (cuda) | vpmm driver | cudaMallocAsync | cudaMalloc |" + th +
              " vpmm malloc p99 / max |")
        print("|---|---|---|---|---|" + tsep + "---|")
        for t in traces:
            def tot(k):
                v = totals(by, t, k)
                return rng(v, "{:.1f}") if v else "—"
            v = [r for r in by.get((t, "cuda"), []) if "alloc_ms_total" in r]
            # driver time from the counted run (run_all.sh's "cuda-driver": counting costs clock
            # reads, so the timed runs above go without it)
            drv = [r["driver_ms"] for r in by.get((t, "cuda-driver"), []) + v
                   if r.get("driver_ms") is not None]
            tail = (f"{median(r['malloc_ns_p99'] for r in v) / 1e3:.1f} / "
                    f"{median(r['malloc_ns_max'] for r in v) / 1e3:.0f}") if v else "—"
            tc = "".join(f" {tot(k)} |" for k, _ in torch)
            print(f"| {t} | {tot('cuda')} | {rng(drv, '{:.1f}') if drv else '—'} | {tot('async')} | "
                  f"{tot('malloc')} |{tc} {tail} |")

    if torch:
        anchors(by, traces, torch)
    second_half(by, traces, torch)
    handle_pages(by, traces)
    no_large(by, traces, torch)

    cache = [r for r in replays if r["run"].startswith("cache")]
    if cache:
        print("\n## The exact-size cache's cap (host backend): footprint and malloc+free median (ns)\n")
        print("| VPMM_CACHE_PERCENT | gpt2_train | bert_infer |")
        print("|---|---|---|")
        pcts = sorted({int(r["run"][5:]) for r in cache})
        for p in pcts:
            cells = []
            for t in ("gpt2_train", "bert_infer"):
                rs = [r for r in cache if r["run"] == f"cache{p}" and r["trace"].startswith(t)]
                cells.append(f"{footprint(rs[0], '{:.4f}')} / {rs[0]['pair_ns_median']} ns" if rs else "—")
            print(f"| {p} | " + " | ".join(cells) + " |")

    growth = [r for r in rows if "pattern" in r]
    if growth:
        print("\n## Growth from empty to 8 GiB (ms), H100\n")
        # VPMM_LARGE_HANDLES=0 (run tags growth-nolarge#r), a column pair where the file has it
        nolarge = any(r["run"].startswith("growth-nolarge") for r in growth)
        print("| pattern | vpmm (cuda) | handles | cudaMallocAsync | cudaMalloc |" +
              (" vpmm, VPMM_LARGE_HANDLES=0 | its handles |" if nolarge else ""))
        print("|---|---|---|---|---|" + ("---|---|" if nolarge else ""))
        pats = []
        for r in growth:
            if r["pattern"] not in pats:
                pats.append(r["pattern"])
        for p in pats:
            def rows_of(b, nol=False):
                return [r for r in growth if r["pattern"] == p and r["backend"] == b and
                        r["run"].startswith("growth-nolarge") == nol]
            def ms(b, nol=False):
                v = [r["ms"] for r in rows_of(b, nol)]
                return rng(v, "{:.2f}") if v else "—"
            def handles(nol=False):
                h = [r.get("handles_created") for r in rows_of("vpmm/cuda", nol)]
                return h[0] if h else "—"
            extra = f" {ms('vpmm/cuda', True)} | {handles(True)} |" if nolarge else ""
            print(f"| {p} | {ms('vpmm/cuda')} | {handles()} | {ms('cudaMallocAsync')} | "
                  f"{ms('cudaMalloc')} |{extra}")


if __name__ == "__main__":
    main()
