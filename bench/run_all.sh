#!/usr/bin/env bash
# run_all.sh — every figure in bench/RESULTS.md, in one run (on the device machine for the GPU
# rows; the host rows run anywhere). Builds build-bench/ (Release), then writes JSON lines to
# $OUT/bench.jsonl (default ./bench-out/) and prints the summary tables last. Where vpmm-replay
# was built with PyTorch (VPMM_PYTHON, default python3, imports torch) and runs its `torch`
# backend, every trace also gets the PyTorch anchors, two runs each: torch#r (PyTorch's caching
# allocator) and torchx#r (the same with expandable segments), in the same run as vpmm.
#
#   bash bench/run_all.sh            # everything the machine can do
#   REPS=5 bash bench/run_all.sh     # more repetitions of the timed vpmm/cuda replays
#   VPMM_PYTHON=/opt/torch/.venv/bin/python bash bench/run_all.sh   # the PyTorch of that Python
#   HANDLE_PAGES= bash bench/run_all.sh   # leave out the handle-size rows (default "4 8 16")
#   NO_LARGE=0 bash bench/run_all.sh      # leave out the VPMM_LARGE_HANDLES=0 rows
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-bench-out}
mkdir -p "$out"
log="$out/bench.jsonl"
: >"$log"
reps=${REPS:-3}

cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DVPMM_BUILD_TESTS=OFF \
  ${VPMM_PYTHON:+-DVPMM_PYTHON="$VPMM_PYTHON"} >"$out/configure.log" 2>&1 &&
  cmake --build build-bench -j"$(nproc)" --target vpmm-replay vpmm-growth vpmm-checkpoint \
    >"$out/build.log" 2>&1 ||
  { tail -n 30 "$out/build.log"; exit 1; }
replay=build-bench/bin/vpmm-replay
growth=build-bench/bin/vpmm-growth
gpu=0
if "$replay" --backend cuda --json bench/traces/synthetic_scattered.trace.gz >/dev/null 2>&1; then gpu=1; fi
torch=0
if [ $gpu = 1 ]; then
  if why=$("$replay" --backend torch --json bench/traces/synthetic_scattered.trace.gz 2>&1 >/dev/null); then
    torch=1
  else
    echo "run_all.sh: no PyTorch anchors: ${why##*$'\n'}" >&2
  fi
fi

emit() { # emit TAG JSON...
  local tag=$1; shift
  [ -n "$*" ] && echo "{\"run\": \"$tag\", ${*#\{}" >>"$log"
}
# vpmm-replay --json ...: its line, also when it exits 4 (mallocs failed: "footprint" is null,
# summarize.py marks the row); any non-zero exit is said on stderr.
replay_json() {
  local rc=0
  "$replay" --json --quiet "$@" || rc=$?
  [ $rc = 0 ] || echo "run_all.sh: vpmm-replay $* exited $rc" >&2
}

for t in bench/traces/*.trace.gz; do
  emit host "$(replay_json --backend host "$t")"
  if [ $gpu = 1 ]; then
    for r in $(seq "$reps"); do emit "cuda#$r" "$(replay_json --backend cuda "$t")"; done
    # Where vpmm's time goes (driver calls by kind): a run of its own, as counting costs clock reads.
    emit cuda-driver "$(replay_json --backend cuda --driver-stats "$t")"
    for r in 1 2; do emit "async#$r" "$(replay_json --backend cudaMallocAsync "$t")"; done
    emit malloc "$(replay_json --backend cudaMalloc "$t")"
    if [ $torch = 1 ]; then
      for r in 1 2; do emit "torch#$r" "$(replay_json --backend torch "$t")"; done
      for r in 1 2; do emit "torchx#$r" "$(replay_json --backend torch-expandable "$t")"; done
    fi
  fi
done
# Handle size against footprint (VPMM_HANDLE_PAGES; RESULTS.md "Handle size"): two runs each.
if [ $gpu = 1 ]; then
  for t in bench/traces/*.trace.gz; do
    for n in ${HANDLE_PAGES-4 8 16}; do
      for r in 1 2; do emit "hp$n#$r" "$(VPMM_HANDLE_PAGES=$n replay_json --backend cuda "$t")"; done
    done
  done
fi
# Without large handles (VPMM_LARGE_HANDLES=0: every growth exactly its pages, the near-full rule
# in full; RESULTS.md "The near-full rule in full, and its price"): two runs each.
if [ $gpu = 1 ] && [ "${NO_LARGE-1}" = 1 ]; then
  for t in bench/traces/*.trace.gz; do
    for r in 1 2; do emit "nolarge#$r" "$(VPMM_LARGE_HANDLES=0 replay_json --backend cuda "$t")"; done
  done
fi
# The idealised floor of every trace (bench/floor.py: the footprint goal is stated against it).
python3 bench/floor.py --json bench/traces/*.trace.gz | while read -r l; do emit floor "$l"; done
# The exact-size cache's cap: footprint against hot path (host backend, deterministic footprint).
for c in 0 2 5 10 20 50 100; do
  for t in bench/traces/gpt2_train.trace.gz bench/traces/bert_infer.trace.gz; do
    emit "cache$c" "$(VPMM_CACHE_PERCENT=$c replay_json --backend host "$t")"
  done
done
if [ $gpu = 1 ]; then
  for b in cuda cudaMallocAsync cudaMalloc; do
    for r in 1 2; do "$growth" --backend $b --json | while read -r l; do emit "growth#$r" "$l"; done; done
  done
  if [ "${NO_LARGE-1}" = 1 ]; then
    for r in 1 2; do
      VPMM_LARGE_HANDLES=0 "$growth" --backend cuda --json |
        while read -r l; do emit "growth-nolarge#$r" "$l"; done
    done
  fi
fi
# Checkpoint take/reapply time and graph-tree memory (its own tables: RESULTS.md, Checkpoints).
build-bench/bin/vpmm-checkpoint --backend "$([ $gpu = 1 ] && echo cuda || echo host)" \
  >"$out/checkpoint.txt" 2>&1 || echo "vpmm-checkpoint failed: see $out/checkpoint.txt"
"$replay" --backend "$([ $gpu = 1 ] && echo cuda || echo host)" --quiet \
  --svg "$out/gpt2_train.svg" bench/traces/gpt2_train.trace.gz >/dev/null
python3 bench/summarize.py "$log"
