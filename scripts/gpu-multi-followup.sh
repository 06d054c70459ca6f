#!/usr/bin/env bash
# gpu-multi-followup.sh — the follow-up checks of several devices (NCCL registration, zero copy,
# PyTorch's multi-GPU tests) on a 2-GPU machine, by stage (each call of the device tool has 10
# minutes: run the stages over two calls if need be):
#
#   bash scripts/gpu-multi-followup.sh [STAGE...]     (default: every stage, in this order)
#     build         build-gpu/ (scripts/gpu-multi.sh build)
#     gpu_multi     test_gpu_multi on two devices
#     registration  integrations/pytorch/test_backend.py NCCLRegistration (vpmm's NCCL defaults:
#                   zero copy off, a skewed all-to-all completes; and zero copy asked for)
#     probe         integrations/pytorch/suite/nccl_zero_copy_probe.py for vpmm (its defaults),
#                   vpmm with VPMM_TORCH_NCCL_ZERO_COPY=1, expandable segments and native: which
#                   of the eager skewed all-to-all, the captured all-to-all and the captured
#                   all-reduce pass, fail or hang (60 s each), and NCCL's registration counts
#                   (PROBE_ALLOCATORS="vpmm;vpmm --zero-copy" runs a subset)
#     race          PyTorch's test_alltoall_ops_with_cudafree_race and test_tensor_register_hook
#                   on vpmm (its defaults; TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1); a
#                   hang (60 s) gets its processes' native stacks dumped with cuda-gdb
#     cuda_multigpu PyTorch's test_cuda_multigpu.py with vpmm, then native
#
# Logs under $OUT (at most eight files come back: NCCL's debug files and stacks go into
# nccl-and-stacks.tgz); a summary last. Needs the PyTorch test files in .pytorch-tests/ for race
# and cuda_multigpu (carry it, and .deps).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-gpu-logs}
mkdir -p "$out"
py=/opt/torch/.venv/bin/python
[ -x "$py" ] || py=python3
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export VPMM_TORCH_BACKEND=$PWD/build-gpu/integrations/libvpmm_torch_backend.so
pkg=$PWD/integrations/pytorch
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(build gpu_multi registration probe race cuda_multigpu)
summary=()
note() { summary+=("$1"); echo "== $1"; }
vpmm_env=(VPMM_TORCH_ENABLE=1 PYTHONPATH="$pkg/autoenable:$pkg:$PWD/.pytorch-tests/deps")
nat_env=(PYTHONPATH="$PWD/.pytorch-tests/deps")

# Runs a pytest selection of test_c10d_ops_nccl.py on vpmm in the background; after 60 s without
# an end, dumps the native stacks of its processes and kills them. $1: name, $2: -k expression.
race_case() {
  local name=$1 expr=$2 runner
  env "${vpmm_env[@]}" TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1 NCCL_DEBUG=INFO \
    NCCL_DEBUG_SUBSYS=REG NCCL_DEBUG_FILE="$out/nccl-$name-%p.txt" "$py" -m pytest \
    .pytorch-tests/test_c10d_ops_nccl.py -k "$expr" -p no:cacheprovider -q -rfEs \
    >"$out/$name.log" 2>&1 &
  runner=$!
  for _ in $(seq 60); do kill -0 $runner 2>/dev/null || break; sleep 1; done
  if kill -0 $runner 2>/dev/null; then
    note "$name vpmm: still running after 60 s: stacks dumped"
    local pids dumpers=()
    pids=$(pgrep -f 'test_c10d_ops_nccl|multiprocessing' | grep -vx "$$")
    for pid in $pids; do
      timeout -k 5 45 cuda-gdb -batch -p "$pid" -ex 'thread apply all bt 30' \
        >"$out/stack-$pid.txt" 2>&1 &
      dumpers+=($!)
    done
    [ ${#dumpers[@]} -gt 0 ] && wait "${dumpers[@]}"
    pkill -9 -f test_c10d_ops_nccl
    grep -hE '^#' "$out"/stack-*.txt 2>/dev/null |
      grep -iE 'vpmm|nccl|Dereg|Regist|Synchron|futex|mutex|cond_wait|poll' | sort | uniq -c |
      sort -rn | head -60 >"$out/stacks-short.txt"
  else
    wait $runner
    note "$name vpmm rc $?: $(tail -n 1 "$out/$name.log")"
  fi
}

for stage in "${stages[@]}"; do
  t0=$(date +%s)
  case $stage in
  build)
    OUT=$(mktemp -d) bash scripts/gpu-multi.sh build >"$out/build.txt" 2>&1 ||
      { tail -20 "$out/build.txt"; exit 1; }
    note "build: ok"
    ;;
  gpu_multi)
    VPMM_TEST_REQUIRE_GPU=1 VPMM_TEST_GPUS=2 ./build-gpu/bin/test_gpu_multi >"$out/gpu_multi.log" 2>&1
    note "test_gpu_multi rc $?: $(grep -E 'PASSED|FAILED' "$out/gpu_multi.log" | head -2 | tr '\n' ' ')"
    ;;
  registration)
    PYTHONPATH="$pkg" timeout -k 20 400 "$py" "$pkg/test_backend.py" -v NCCLRegistration \
      >"$out/registration.log" 2>&1
    note "test_backend NCCLRegistration rc $?: $(grep -E '^(OK|FAILED)|NCCL REG' "$out/registration.log" | tr '\n' ' ')"
    ;;
  probe)
    IFS=';' read -r -a allocators <<<"${PROBE_ALLOCATORS:-vpmm;vpmm --zero-copy;expandable;native}"
    for a in "${allocators[@]}"; do
      # shellcheck disable=SC2086 # $a is the allocator and its flag
      timeout -k 20 300 "$py" "$pkg/suite/nccl_zero_copy_probe.py" --allocator $a \
        --out "$out/probe.jsonl" >>"$out/probe.log" 2>&1
      note "probe $a rc $?"
    done
    grep -E '^\| ' "$out/probe.log" | sort -u >"$out/probe-table.md"
    ;;
  race)
    race_case race test_alltoall_ops_with_cudafree_race
    race_case hook test_tensor_register_hook
    ;;
  cuda_multigpu)
    for a in vpmm native; do
      if [ $a = vpmm ]; then env=("${vpmm_env[@]}"); else env=("${nat_env[@]}"); fi
      env "${env[@]}" timeout -s INT -k 20 170 "$py" -m pytest .pytorch-tests/test_cuda_multigpu.py \
        -p no:cacheprovider -q -rfEs >"$out/multigpu-$a.log" 2>&1
      note "test_cuda_multigpu $a rc $?: $(tail -n 1 "$out/multigpu-$a.log")"
    done
    ;;
  *)
    note "unknown stage $stage"
    ;;
  esac
  echo "   ($stage: $(($(date +%s) - t0)) s)"
done
( cd "$out" && shopt -s nullglob && files=(nccl-*.txt stack-*.txt) &&
  [ ${#files[@]} -gt 0 ] && tar czf nccl-and-stacks.tgz "${files[@]}" )
rm -f "$out"/nccl-*.txt "$out"/stack-*.txt
echo; echo "== summary"; printf '%s\n' "${summary[@]}"
[ -f "$out/probe-table.md" ] && cat "$out/probe-table.md"
[ -f "$out/stacks-short.txt" ] && head -60 "$out/stacks-short.txt"
exit 0
