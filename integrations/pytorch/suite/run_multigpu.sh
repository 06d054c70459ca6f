#!/usr/bin/env bash
# run_multigpu.sh — PyTorch's own multi-GPU tests with vpmm as the allocator of every test
# process, and the same tests on PyTorch's native allocator (2 GPUs; results in
# integrations/pytorch/suite/RESULTS.md, "Multi-GPU").
#
#   bash integrations/pytorch/suite/run_multigpu.sh [--out DIR] [--budget SECONDS]
#                                                   [--build-dir DIR] [--tests DIR]
#
# Needs the test files in .pytorch-tests/ (or --tests DIR; git-ignored: PyTorch's code, carried
# to the device machine; RESULTS.md says where each comes from) and expecttest in its deps/. Builds
# libvpmm_torch_backend.so (bench/build_torch_backend.sh, build-gpu/ by default), then runs, with
# vpmm enabled in every Python process by autoenable/sitecustomize.py (VPMM_TORCH_ENABLE=1) or
# without it:
#   multigpu  test_cuda_multigpu.py, whole (TestCudaMultiGPU, TestCudaComm): vpmm, then native,
#             one after the other (several tests read the driver's free memory);
#   ops       test_c10d_ops_nccl.py, whole (ProcessGroupNCCLOpTest: every collective, CUDA graphs
#             of collectives, test_tensor_register_hook);
#   c10d      test_c10d_nccl_extract.py (communicators created, split, destroyed and aborted;
#             collectives left in flight on freed tensors);
#   ops and c10d with TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1 (every communicator
#   registers the allocator's segments with NCCL, and every later SEGMENT_ALLOC / SEGMENT_FREE)
#   and NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=REG into one file per process; vpmm's and native's
#   runs at the same time (ops, then c10d, for each).
# Each pytest run gets a timeout (SIGINT: pytest still writes its JUnit report) cut to what
# --budget (default 540 s) has left. Writes into --out (default $OUT, else
# bench-out/suite-multigpu): suite-multigpu-summary.md (summarize_multigpu.py's tables, printed
# last), suite-multigpu.log (every pytest output) and suite-multigpu-raw.tgz (JUnit XML, logs,
# NCCL debug files). Exit status: summarize_multigpu.py's (1 when a test fails on vpmm only or a
# run left no report), 2 when the suite could not start.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
pkg=$(cd "$here/.." && pwd)
repo=$(cd "$here/../../.." && pwd)
cd "$repo" || exit 2

out=${OUT:-bench-out/suite-multigpu} budget=540 build=build-gpu tests=$repo/.pytorch-tests
while [ $# -gt 0 ]; do
  case $1 in
  --out) out=$2; shift 2 ;;
  --budget) budget=$2; shift 2 ;;
  --build-dir) build=$2; shift 2 ;;
  --tests) tests=$(cd "$2" && pwd) || exit 2; shift 2 ;;
  *) echo "run_multigpu: unknown argument $1 (see the head of $0)" >&2; exit 2 ;;
  esac
done
for f in test_cuda_multigpu.py test_c10d_ops_nccl.py test_c10d_nccl_extract.py \
  deps/expecttest/__init__.py; do
  if [ ! -f "$tests/$f" ]; then
    echo "run_multigpu: $tests/$f is missing: put the test files in .pytorch-tests/ and name" \
      ".pytorch-tests in the device call's carry (RESULTS.md, Multi-GPU)" >&2
    exit 2
  fi
done
start=$(date +%s)
py=${PYTHON:-}
if [ -z "$py" ]; then
  if [ -x /opt/torch/.venv/bin/python ]; then py=/opt/torch/.venv/bin/python; else py=python3; fi
fi
export PYTHONPATH=$tests/deps${PYTHONPATH:+:$PYTHONPATH}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
unset PYTORCH_CUDA_ALLOC_CONF PYTORCH_ALLOC_CONF VPMM_TORCH_ENABLE
mkdir -p "$out"
log=$out/suite-multigpu.log summary=$out/suite-multigpu-summary.md
tmp=$(mktemp -d)
: >"$log"
say() { echo "$*" | tee -a "$log"; }
elapsed() { echo $(($(date +%s) - start)); }

say "== suite run_multigpu: $py, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null)"
{ nvidia-smi; nvidia-smi topo -m; } >>"$log" 2>&1
visible=$("$py" -c 'import torch, pytest; print(torch.cuda.device_count())' 2>>"$log")
case $visible in '' | *[!0-9]*) visible=0 ;; esac
if [ "$visible" -lt 2 ]; then
  say "run_multigpu: needs 2 GPUs, PyTorch and pytest; $py sees $visible GPUs (log: $log)"
  exit 2
fi
if ! lib=$(bash bench/build_torch_backend.sh "$py" "$tmp/build.log" "$build"); then
  cat "$tmp/build.log" >>"$log"
  say "run_multigpu: the build failed ($log has its output)"
  exit 2
fi
export VPMM_TORCH_BACKEND=$lib
say "== built $lib ($(elapsed) s)"

# limit SECONDS: a run's timeout, cut to what the budget has left (0: no time left).
limit() {
  local left=$((budget - $(elapsed) - 40))
  if [ "$left" -lt 30 ]; then echo 0; elif [ "$1" -gt "$left" ]; then echo "$left"; else echo "$1"; fi
}
# pytest_run ALLOC NAME FILE SECONDS [VAR=VALUE...]: one pytest run into $tmp/NAME-ALLOC.{xml,log}.
pytest_run() {
  local alloc=$1 name=$2 file=$3 lim rc env=()
  lim=$(limit "$4")
  shift 4
  env=("$@" TORCHINDUCTOR_CACHE_DIR="$tmp/inductor-$alloc")
  if [ "$alloc" = vpmm ]; then
    env+=(VPMM_TORCH_ENABLE=1 PYTHONPATH="$pkg/autoenable:$pkg:$PYTHONPATH")
  fi
  if [ "$lim" -eq 0 ]; then
    echo "$name $alloc: not run, the budget (${budget} s) is spent" | tee "$tmp/$name-$alloc.log"
    return
  fi
  env "${env[@]}" timeout -s INT -k 30 "$lim" "$py" -m pytest "$file" -p no:cacheprovider -q \
    -rfEs --junitxml="$tmp/$name-$alloc.xml" >"$tmp/$name-$alloc.log" 2>&1
  rc=$?
  echo "$name $alloc: exit $rc (limit $lim s, at $(elapsed) s); $(tail -n 1 "$tmp/$name-$alloc.log")"
}

# 1. test_cuda_multigpu.py: one allocator after the other.
for alloc in vpmm native; do
  pytest_run "$alloc" multigpu "$tests/test_cuda_multigpu.py" 200 | tee -a "$log"
done
# 2. the NCCL files: both allocators at once, registration through the allocator's hooks.
for alloc in vpmm native; do
  (
    reg=(TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=REG
      NCCL_DEBUG_FILE="$tmp/nccl-$alloc-%h-%p.txt")
    pytest_run "$alloc" ops "$tests/test_c10d_ops_nccl.py" 150 "${reg[@]}"
    pytest_run "$alloc" c10d "$tests/test_c10d_nccl_extract.py" 360 "${reg[@]}"
  ) >"$tmp/nccl-runs-$alloc.txt" 2>&1 &
done
wait
cat "$tmp"/nccl-runs-*.txt | tee -a "$log"

for name in multigpu ops c10d; do
  for alloc in vpmm native; do
    { echo; echo "======== $name, $alloc"; cat "$tmp/$name-$alloc.log" 2>/dev/null; } >>"$log"
  done
done
{
  echo "# run_multigpu.sh (suite): $(nvidia-smi --query-gpu=name,driver_version \
    --format=csv,noheader 2>/dev/null | head -n 1) x $visible, $("$py" -c 'import torch
print("PyTorch", torch.__version__, "NCCL", ".".join(map(str, torch.cuda.nccl.version())))' \
    2>/dev/null), commit $(git rev-parse --short HEAD 2>/dev/null)"
  echo
  "$py" "$here/summarize_multigpu.py" "$tmp" multigpu ops c10d
} >"$summary" 2>&1
rc=$?
cat "$summary" >>"$log"
tar czf "$out/suite-multigpu-raw.tgz" -C "$tmp" --exclude='inductor-*' . 2>>"$log"
rm -rf "$tmp"
say "== suite run_multigpu: $(elapsed) s, summary exit $rc"
echo
cat "$summary"
exit "$rc"
