#!/usr/bin/env bash
# run_multigpu.sh — the multi-GPU benchmark session in one command (device machine with 2 or 4
# GPUs): vpmm against PyTorch's native allocator and expandable segments, bench/torch_multigpu.py.
#
#   bash bench/run_multigpu.sh [--gpus 2|4] [--warmup N] [--steps N] [--batch N] [--sends N]
#                              [--out DIR] [--budget SECONDS] [--build-dir DIR]
#
#   --gpus 2 (default)  builds libvpmm_torch_backend.so (Release, build_torch_backend.sh), then
#                       ddp and fsdp2 under torchrun on 2 GPUs for vpmm, native and expandable
#                       (same seeds), then the correctness checks: split (the three allocators at
#                       once: nothing in it is timed) and ipc (one after another: it counts the
#                       device memory in use); about 6 minutes
#   --gpus 4            the build, then ddp and fsdp2 on 4 GPUs only; about 5 minutes
#   --warmup/--steps    untimed and timed training steps (default 6 and 30)
#   --batch             sequences per GPU and step (default: torch_multigpu.py's, 24)
#   --sends             tensors sent one by one in the ipc check (default 2000)
#   --budget            seconds the whole session may take (default 540: a device command has 600)
#   --build-dir         where CMake builds (default build-gpu)
#
# Writes into --out (default $OUT, else bench-out/multigpu), three files, as the device machine
# returns at most eight: multigpu.jsonl (every JSON line of every run), multigpu.log (everything
# printed, the build and nvidia-smi included) and multigpu-summary.md (the tables, printed last).
# Each run is bounded by `timeout`, and the session by --budget: a run that would not fit is
# skipped and counted as a failure. Exit status 0 when every run and every check passed, 1
# otherwise, 2 when the session could not start (too few GPUs, no PyTorch).
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
# NVSHMEM_DISABLE_NVLS=1): the GPU machines it was run on forbid it. The Python is $PYTHON, else
# /opt/torch/.venv/bin/python where it exists, else python3.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

gpus=2 warmup=6 steps=30 batch="" sends=2000 budget=540 build=build-gpu
out=${OUT:-bench-out/multigpu}
usage() { sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
  --gpus) gpus=$2; shift 2 ;;
  --warmup) warmup=$2; shift 2 ;;
  --steps) steps=$2; shift 2 ;;
  --batch) batch=$2; shift 2 ;;
  --sends) sends=$2; shift 2 ;;
  --out) out=$2; shift 2 ;;
  --budget) budget=$2; shift 2 ;;
  --build-dir) build=$2; shift 2 ;;
  -h | --help) usage ;;
  *) echo "run_multigpu: unknown argument $1" >&2; usage ;;
  esac
done
case $gpus in 2 | 4) ;; *) echo "run_multigpu: --gpus is 2 or 4" >&2; exit 2 ;; esac

start=$(date +%s)
py=${PYTHON:-}
if [ -z "$py" ]; then
  if [ -x /opt/torch/.venv/bin/python ]; then py=/opt/torch/.venv/bin/python; else py=python3; fi
fi
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
unset PYTORCH_CUDA_ALLOC_CONF PYTORCH_ALLOC_CONF VPMM_TORCH_ENABLE

mkdir -p "$out"
jsonl=$out/multigpu.jsonl log=$out/multigpu.log summary=$out/multigpu-summary.md
: >"$jsonl"
: >"$log"
say() { echo "$*" | tee -a "$log"; }
elapsed() { echo $(($(date +%s) - start)); }

say "== run_multigpu: $gpus GPUs, $warmup + $steps steps, $py, $(date -u +%Y-%m-%dT%H:%MZ)"
{ nvidia-smi; nvidia-smi topo -m; git log -1 --oneline; } >>"$log" 2>&1
visible=$("$py" -c 'import torch; print(torch.cuda.device_count())' 2>>"$log")
case $visible in '' | *[!0-9]*) visible=0 ;; esac
if [ "$visible" -lt "$gpus" ]; then
  say "run_multigpu: needs $gpus GPUs; $py sees $visible (is PyTorch there? multigpu.log says)"
  exit 2
fi
if ! lib=$(bash bench/build_torch_backend.sh "$py" "$out/build.log" "$build"); then
  cat "$out/build.log" >>"$log"
  rm -f "$out/build.log"
  say "run_multigpu: the build failed (multigpu.log has its output)"
  exit 1
fi
cat "$out/build.log" >>"$log"
rm -f "$out/build.log"
export VPMM_TORCH_BACKEND=$lib
say "== built $lib ($(elapsed) s)"

failed=()
# limit NAME SECONDS: the seconds a run may take, cut to what the session's budget has left
# (0: skip it, it would not fit).
limit() {
  local left=$((budget - $(elapsed) - 40))
  if [ "$left" -lt 30 ]; then echo 0; elif [ "$2" -gt "$left" ]; then echo "$left"; else echo "$2"; fi
}
# run NAME SECONDS COMMAND...: runs a command into the log, bounded; counts its failure.
run() {
  local name=$1 lim rc t0
  lim=$(limit "$1" "$2")
  shift 2
  if [ "$lim" -eq 0 ]; then
    say "== SKIPPED $name: the session's budget (${budget} s) is spent"
    failed+=("$name (skipped)")
    return
  fi
  say "== $name (at most $lim s)"
  t0=$(date +%s)
  timeout -k 20 "$lim" "$@" >>"$log" 2>&1
  rc=$?
  say "== $name: exit $rc ($(($(date +%s) - t0)) s)"
  [ "$rc" -eq 0 ] || failed+=("$name (exit $rc)")
}

train=(--warmup "$warmup" --steps "$steps" --out "$jsonl")
[ -n "$batch" ] && train+=(--batch "$batch")
for bench in ddp fsdp2; do
  for alloc in vpmm native expandable; do
    run "$bench $alloc $gpus GPUs" 200 "$py" -m torch.distributed.run --standalone \
      --nproc_per_node "$gpus" bench/torch_multigpu.py "$bench" --allocator "$alloc" "${train[@]}"
  done
done

if [ "$gpus" = 2 ]; then
  tmp=$(mktemp -d)
  lim=$(limit split 150)
  if [ "$lim" -eq 0 ]; then
    say "== SKIPPED split: the session's budget (${budget} s) is spent"
    failed+=("split (skipped)")
  else
    say "== split, the three allocators at once (at most $lim s)"
    for alloc in vpmm native expandable; do
      (
        timeout -k 20 "$lim" "$py" bench/torch_multigpu.py split --allocator "$alloc" \
          --out "$tmp/split-$alloc.jsonl" >"$tmp/split-$alloc.log" 2>&1
        echo $? >"$tmp/split-$alloc.rc"
      ) &
    done
    wait
    for alloc in vpmm native expandable; do
      rc=$(cat "$tmp/split-$alloc.rc" 2>/dev/null || echo 99)
      { echo "== split $alloc: exit $rc"; cat "$tmp/split-$alloc.log"; } >>"$log"
      cat "$tmp/split-$alloc.jsonl" >>"$jsonl" 2>/dev/null
      say "== split $alloc: exit $rc"
      [ "$rc" = 0 ] || failed+=("split $alloc (exit $rc)")
    done
  fi
  rm -rf "$tmp"
  for alloc in vpmm native expandable; do
    run "ipc $alloc" 150 "$py" bench/torch_multigpu.py ipc --allocator "$alloc" \
      --sends "$sends" --out "$jsonl"
  done
  expect="ddp:2,fsdp2:2,split,ipc"
else
  expect="ddp:$gpus,fsdp2:$gpus"
fi

{
  echo "# run_multigpu.sh --gpus $gpus: $(nvidia-smi --query-gpu=name,driver_version \
    --format=csv,noheader 2>/dev/null | head -n 1), $("$py" -c 'import torch
print("PyTorch", torch.__version__, "NCCL", ".".join(map(str, torch.cuda.nccl.version())))' \
    2>/dev/null), commit $(git rev-parse --short HEAD 2>/dev/null), $warmup + $steps steps"
  echo
  "$py" bench/torch_multigpu.py summary --expect "$expect" "$jsonl"
} >"$summary" 2>&1
src=$?
[ "$src" -eq 0 ] || failed+=("summary (exit $src)")
cat "$summary" >>"$log"
say "== run_multigpu: $(elapsed) s; ${#failed[@]} failed${failed:+: ${failed[*]}}"
echo
cat "$summary"
[ "${#failed[@]}" -eq 0 ]
