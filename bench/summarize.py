#!/usr/bin/env python3
"""summarize.py — turns bench/run_all.sh's JSON lines into the tables of bench/RESULTS.md.

For timed rows the median over repetitions of each run's medians is shown, with the range. A replay
whose mallocs failed (vpmm-replay exit 4: "footprint" is null) has no footprint: its cell says so.
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


def main():
    rows = load(sys.argv[1])
    replays = [r for r in rows if "trace" in r]
    by = defaultdict(list)
    for r in replays:
        kind = r["run"].split("#")[0]
        by[(r["trace"].replace(".trace.gz", ""), kind)].append(r)
    traces = sorted({t for t, _ in by}, key=lambda t: (t.startswith("synthetic"), t))

    print("\n## Footprint (peak device memory / peak live bytes)\n")
    print("| trace | peak live | vpmm (host) | vpmm (cuda) | cudaMallocAsync | cudaMalloc |")
    print("|---|---|---|---|---|---|")
    for t in traces:
        cells = []
        for k in ("host", "cuda", "async", "malloc"):
            rs = by.get((t, k))
            cells.append(footprint(rs[0]) if rs else "—")
        live = by[(t, "host")][0]["peak_live_bytes"] / 1e9
        print(f"| {t} | {live:.3f} GB | " + " | ".join(cells) + " |")

    print("\n## Hot path: median malloc + median free (ns), H100 host\n")
    print("| trace | vpmm (cuda) | cudaMallocAsync | cudaMalloc | vpmm speed-up vs cudaMallocAsync |")
    print("|---|---|---|---|---|")
    for t in traces:
        v, a, m = by.get((t, "cuda")), by.get((t, "async")), by.get((t, "malloc"))
        if not v:
            continue
        vp = [r["pair_ns_median"] for r in v]
        ap = [r["pair_ns_median"] for r in a] if a else []
        mp = [r["pair_ns_median"] for r in m] if m else []
        ratio = f"{median(ap) / median(vp):.1f}x" if ap else "—"
        print(f"| {t} | {rng(vp)} | {rng(ap) if ap else '—'} | {rng(mp) if mp else '—'} | {ratio} |")

    if any("alloc_ms_total" in r for r in replays):
        # Issue 13: the sum of all malloc + free durations, the tail, and vpmm's driver time.
        print("\n## Total allocator time: sum of all malloc + free durations (ms); malloc p99 / max (µs)\n")
        print("| trace | vpmm (cuda) | vpmm driver | cudaMallocAsync | cudaMalloc | vpmm malloc p99 / max |")
        print("|---|---|---|---|---|---|")
        for t in traces:
            def tot(k):
                v = [r["alloc_ms_total"] for r in by.get((t, k), []) if "alloc_ms_total" in r]
                return rng(v, "{:.1f}") if v else "—"
            v = [r for r in by.get((t, "cuda"), []) if "alloc_ms_total" in r]
            # driver time from the counted run (run_all.sh's "cuda-driver": counting costs clock
            # reads, so the timed runs above go without it)
            drv = [r["driver_ms"] for r in by.get((t, "cuda-driver"), []) + v
                   if r.get("driver_ms") is not None]
            tail = (f"{median(r['malloc_ns_p99'] for r in v) / 1e3:.1f} / "
                    f"{median(r['malloc_ns_max'] for r in v) / 1e3:.0f}") if v else "—"
            print(f"| {t} | {tot('cuda')} | {rng(drv, '{:.1f}') if drv else '—'} | {tot('async')} | "
                  f"{tot('malloc')} | {tail} |")

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
        print("| pattern | vpmm (cuda) | handles | cudaMallocAsync | cudaMalloc |")
        print("|---|---|---|---|---|")
        pats = []
        for r in growth:
            if r["pattern"] not in pats:
                pats.append(r["pattern"])
        for p in pats:
            def ms(b):
                v = [r["ms"] for r in growth if r["pattern"] == p and r["backend"] == b]
                return rng(v, "{:.2f}") if v else "—"
            h = [r.get("handles_created") for r in growth if r["pattern"] == p and r["backend"] == "vpmm/cuda"]
            print(f"| {p} | {ms('vpmm/cuda')} | {h[0] if h else '—'} | {ms('cudaMallocAsync')} | {ms('cudaMalloc')} |")


if __name__ == "__main__":
    main()
