#!/usr/bin/env bash
# compare_builds.sh — the hot path of two source trees, replayed in one run: did a change slow
# vpmm down? Builds vpmm-replay (Release) from each tree, then replays every trace of
# bench/traces with each build in turn, REPS rounds (alternating, so that drift of the machine
# hits both alike), and prints per trace the median over the rounds of each build's malloc and
# free medians, malloc p99 and footprint, and the after/before ratio of the malloc median.
#
#   bash bench/compare_builds.sh BEFORE_SRC AFTER_SRC [REPS] [BACKEND]
#
# BEFORE_SRC, AFTER_SRC: source trees (e.g. `git worktree add /tmp/before <rev>` or an extracted
# `git archive`); REPS default 5; BACKEND default cuda (host: the emulation, for a dry run).
# TRACES (optional): the trace names to replay (e.g. "bert_infer synthetic_multistream"), for a
# rerun with more rounds of the traces whose ratio stood out; default every trace.
# Writes the raw JSON lines to ${OUT:-compare-out}/compare.jsonl.
set -uo pipefail
before=$1 after=$2 reps=${3:-5} backend=${4:-cuda}
here=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-compare-out}
mkdir -p "$out"
log="$out/compare.jsonl"
: >"$log"
for side in before after; do
    src=${!side}
    cmake -S "$src" -B "$out/build-$side" -DCMAKE_BUILD_TYPE=Release -DVPMM_BUILD_TESTS=OFF \
        -DVPMM_BUILD_SAMPLES=OFF -DVPMM_BUILD_INTEGRATIONS=OFF >"$out/configure-$side.log" 2>&1 &&
        cmake --build "$out/build-$side" -j"$(nproc)" --target vpmm-replay \
            >"$out/build-$side.log" 2>&1 ||
        { tail -n 30 "$out/configure-$side.log" "$out/build-$side.log"; exit 1; }
done
for r in $(seq "$reps"); do
    for t in "$here"/bench/traces/*.trace.gz; do
        name=$(basename "$t" .trace.gz)
        if [ -n "${TRACES:-}" ] && [[ " $TRACES " != *" $name "* ]]; then
            continue
        fi
        for side in before after; do
            line=$("$out/build-$side/bin/vpmm-replay" --backend "$backend" --json --quiet "$t") ||
                { echo "compare_builds.sh: $side failed on $t" >&2; exit 1; }
            echo "{\"side\": \"$side\", \"round\": $r, ${line#\{}" >>"$log"
        done
    done
done
python3 - "$log" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
traces = sorted({r["trace"] for r in rows})
med = lambda t, s, k: statistics.median(r[k] for r in rows if r["trace"] == t and r["side"] == s)
print("%-30s %-7s %12s %12s %12s %10s" % ("trace", "build", "malloc med", "free med", "malloc p99", "footprint"))
for t in traces:
    for s in ("before", "after"):
        print("%-30s %-7s %10.0f ns %10.0f ns %10.0f ns %10.4f" % (t.split("/")[-1], s,
              med(t, s, "malloc_ns_median"), med(t, s, "free_ns_median"), med(t, s, "malloc_ns_p99"),
              med(t, s, "footprint")))
    print("%-30s %-7s %12.3f" % ("", "ratio", med(t, "after", "malloc_ns_median") /
                                  med(t, "before", "malloc_ns_median")))
EOF
