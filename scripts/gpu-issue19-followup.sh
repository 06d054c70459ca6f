#!/usr/bin/env bash
# gpu-issue19-followup.sh — the follow-up checks of issue 19 on a 2-GPU machine, in one command:
# test_gpu_multi, PyTorch's test_cuda_multigpu.py with vpmm and native (one after the other), and
# the two NCCL registration cases of test_c10d_ops_nccl.py with vpmm: test_tensor_register_hook
# alone, and test_alltoall_ops_with_cudafree_race, which hung on vpmm in the whole-file run; if it
# hangs again, the native stacks of its processes are dumped with cuda-gdb before it is killed.
# Logs under $OUT; a summary last. Needs the PyTorch test files in .pytorch-tests/ (carry it).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-logs}
mkdir -p "$out"
py=/opt/torch/.venv/bin/python
[ -x "$py" ] || py=python3
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
pkg=$PWD/integrations/pytorch
summary=()
note() { summary+=("$1"); echo "== $1"; }

OUT=$(mktemp -d) bash scripts/gpu-issue19.sh build >"$out/build.txt" 2>&1 || { tail -20 "$out/build.txt"; exit 1; }
export VPMM_TORCH_BACKEND=$PWD/build-gpu/integrations/libvpmm_torch_backend.so
VPMM_TEST_REQUIRE_GPU=1 VPMM_TEST_GPUS=2 ./build-gpu/bin/test_gpu_multi >"$out/gpu_multi.log" 2>&1
note "test_gpu_multi rc $?: $(grep -E 'PASSED|FAILED' "$out/gpu_multi.log" | head -2 | tr '\n' ' ')"

vpmm_env=(VPMM_TORCH_ENABLE=1 PYTHONPATH="$pkg/autoenable:$pkg:$PWD/.pytorch-tests/deps")
nat_env=(PYTHONPATH="$PWD/.pytorch-tests/deps")
for a in vpmm native; do
  if [ $a = vpmm ]; then env=("${vpmm_env[@]}"); else env=("${nat_env[@]}"); fi
  env "${env[@]}" timeout -s INT -k 20 170 "$py" -m pytest .pytorch-tests/test_cuda_multigpu.py \
    -p no:cacheprovider -q -rfEs >"$out/multigpu-$a.log" 2>&1
  note "test_cuda_multigpu $a rc $?: $(tail -n 1 "$out/multigpu-$a.log")"
done

reg=(TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=REG)
env "${vpmm_env[@]}" "${reg[@]}" NCCL_DEBUG_FILE="$out/nccl-hook-%p.txt" timeout -s INT -k 20 90 \
  "$py" -m pytest .pytorch-tests/test_c10d_ops_nccl.py -k test_tensor_register_hook -p no:cacheprovider \
  -q -rfEs >"$out/hook.log" 2>&1
note "test_tensor_register_hook vpmm rc $?: $(tail -n 1 "$out/hook.log")"

env "${vpmm_env[@]}" "${reg[@]}" NCCL_DEBUG_FILE="$out/nccl-race-%p.txt" "$py" -m pytest \
  .pytorch-tests/test_c10d_ops_nccl.py -k test_alltoall_ops_with_cudafree_race -p no:cacheprovider \
  -q -rfEs >"$out/race.log" 2>&1 &
runner=$!
for _ in $(seq 60); do kill -0 $runner 2>/dev/null || break; sleep 1; done
if kill -0 $runner 2>/dev/null; then
  note "cudafree_race vpmm: still running after 60 s: stacks dumped"
  # Every process of the test (the pytest runner and its spawned ranks): native stacks, each dump
  # bounded (cuda-gdb may be slow to attach); never wait on the runner itself.
  pids=$(pgrep -f 'test_c10d_ops_nccl|multiprocessing' | grep -vx "$$")
  dumpers=()
  for pid in $pids; do
    timeout -k 5 45 cuda-gdb -batch -p "$pid" -ex 'thread apply all bt 30' \
      >"$out/stack-$pid.txt" 2>&1 &
    dumpers+=($!)
  done
  [ ${#dumpers[@]} -gt 0 ] && wait "${dumpers[@]}"
  pkill -9 -f test_c10d_ops_nccl
  grep -hE '^#' "$out"/stack-*.txt 2>/dev/null |
    grep -iE 'vpmm|nccl|ncclComm|Dereg|Regist|Synchron|futex|mutex|cond_wait|poll' | sort | uniq -c |
    sort -rn | head -60 >"$out/stacks-short.txt"
else
  wait $runner
  note "cudafree_race vpmm rc $?: $(tail -n 1 "$out/race.log")"
fi
# At most eight files come back: the NCCL debug files and whole stacks go into one archive.
( cd "$out" && tar czf nccl-and-stacks.tgz $(ls nccl-*.txt stack-*.txt 2>/dev/null) 2>/dev/null )
rm -f "$out"/nccl-*.txt "$out"/stack-*.txt
echo; echo "== summary"; printf '%s\n' "${summary[@]}"
[ -f "$out/stacks-short.txt" ] && head -60 "$out/stacks-short.txt"
