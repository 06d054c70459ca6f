#!/usr/bin/env bash
# gpu-observability.sh — the GPU runs behind docs/OBSERVABILITY.md and bench/RESULTS.md (PyTorch), on
# the device machine, after `bash scripts/gpu-check.sh tests` has built build-gpu/:
#   bash scripts/gpu-observability.sh nvtx      vpmm_nvtx_oob under compute-sanitizer memcheck: with
#                                        vpmm's NVTX registrations, with --nvtx no, with a write
#                                        into unmapped pool VA (--hole), and a build with
#                                        -DVPMM_NVTX=OFF (build-nonvtx/)
#   bash scripts/gpu-observability.sh pytorch   samples/pytorch/train_and_graph.py --compare (vpmm vs
#                                        PyTorch's native allocator vs expandable_segments)
# Logs go to $OUT (default ./gpu-logs).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-logs}
mkdir -p "$out"
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
rc=0
case "${1:-}" in
nvtx)
  oob=./build-gpu/bin/vpmm_nvtx_oob
  "$sanitizer" --tool memcheck "$oob" >"$out/oob-nvtx-on.log" 2>&1
  echo "== memcheck, NVTX registrations on (rc $?)"; cat "$out/oob-nvtx-on.log"
  "$sanitizer" --tool memcheck --nvtx no "$oob" >"$out/oob-nvtx-no.log" 2>&1
  echo "== memcheck --nvtx no (rc $?)"; cat "$out/oob-nvtx-no.log"
  "$sanitizer" --tool memcheck "$oob" --hole >"$out/oob-hole.log" 2>&1
  echo "== memcheck, with a write into the pool's unmapped VA (rc $?)"
  grep -vE "^=========     (#|Host Frame|in )" "$out/oob-hole.log" | head -30
  prefix=()
  [ -d /tmp/cmocka/usr ] && prefix=(-DCMAKE_PREFIX_PATH=/tmp/cmocka/usr)
  if cmake -S . -B build-nonvtx -DVPMM_NVTX=OFF -DVPMM_BUILD_TESTS=OFF -DVPMM_BUILD_BENCH=OFF \
       -DVPMM_BUILD_INTEGRATIONS=OFF "${prefix[@]}" >/dev/null 2>&1 &&
     cmake --build build-nonvtx -j"$(nproc)" --target vpmm_nvtx_oob >/dev/null 2>&1; then
    "$sanitizer" --tool memcheck ./build-nonvtx/bin/vpmm_nvtx_oob >"$out/oob-nvtx-off-build.log" 2>&1
    echo "== memcheck, library built with VPMM_NVTX=OFF (rc $?)"; cat "$out/oob-nvtx-off-build.log"
  else
    echo "== the VPMM_NVTX=OFF build failed"; rc=1
  fi
  ;;
pytorch)
  lib=build-gpu/integrations/libvpmm_torch.so
  [ -f "$lib" ] || { echo "no $lib: run scripts/gpu-check.sh tests first"; exit 1; }
  PYTHONUNBUFFERED=1 VPMM_TORCH_LIB=$lib python3 samples/pytorch/train_and_graph.py --compare \
    --out "$out/pytorch.jsonl" 2>&1 | tee "$out/pytorch.log"
  rc=${PIPESTATUS[0]}
  ;;
*)
  echo "usage: $0 nvtx|pytorch" >&2
  exit 2
  ;;
esac
exit $rc
