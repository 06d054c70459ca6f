#!/usr/bin/env bash
# gpu-soak.sh — the reliability runs that need a real GPU (docs/SOAK.md), in two stages that
# each fit one 10-minute device call:
#   bash scripts/gpu-soak.sh check   build (RelWithDebInfo, build-gpu/) if needed, the whole
#                                      ctest suite with VPMM_TEST_REQUIRE_GPU=1, then short soaks
#                                      under compute-sanitizer memcheck and racecheck
#   bash scripts/gpu-soak.sh soak    the long soak: 10 M operations (stops at SOAK_SECONDS,
#                                      default 480, if the rate is lower), one JSON line + table
# Logs go to $OUT (default ./gpu-logs): at most 8 files, as the device tool brings back.
# cmocka: from .deps/*.deb when not installed (the device machine has no network).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-logs}
mkdir -p "$out"
stage=${1:-check}
soak=build-gpu/bin/vpmm-soak
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)

build() {
  local prefix=()
  if [ ! -f /usr/include/cmocka.h ] && compgen -G ".deps/*.deb" >/dev/null; then
    mkdir -p /tmp/cmocka
    for d in .deps/*.deb; do dpkg -x "$d" /tmp/cmocka; done
    prefix=(-DCMAKE_PREFIX_PATH=/tmp/cmocka/usr)
  fi
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=RelWithDebInfo "${prefix[@]}" >"$out/build.log" 2>&1 &&
    cmake --build build-gpu -j"$(nproc)" >>"$out/build.log" 2>&1 || {
    tail -n 40 "$out/build.log"
    exit 1
  }
}

case "$stage" in
check)
  t0=$(date +%s)
  [ -x "$soak" ] || build
  echo "build: $(($(date +%s) - t0)) s"
  VPMM_TEST_REQUIRE_GPU=1 ctest --test-dir build-gpu --output-on-failure -j8 >"$out/ctest.log" 2>&1
  echo "== ctest (rc $?)"
  grep -E "tests passed|tests failed|\*\*\*|Total Test" "$out/ctest.log" | tail -8
  timeout 150 "$sanitizer" --tool memcheck --leak-check full --nvtx no --error-exitcode 99 \
    "$soak" --light --seconds 20 --threads 2 >"$out/soak-memcheck.log" 2>&1
  echo "== memcheck (rc $?)"
  grep -E "ERROR SUMMARY|LEAK SUMMARY|=====.*(Error|error)|vpmm-soak:|ops" "$out/soak-memcheck.log" | tail -12
  timeout 200 "$sanitizer" --tool racecheck --nvtx no --error-exitcode 99 \
    "$soak" --light --seconds 20 --threads 2 >"$out/soak-racecheck.log" 2>&1
  echo "== racecheck (rc $?)"
  grep -E "RACECHECK SUMMARY|ERROR SUMMARY|hazard|vpmm-soak:|ops" "$out/soak-racecheck.log" | tail -12
  ;;
soak)
  { nvidia-smi; nvcc --version; "$sanitizer" --version; } >"$out/device.txt" 2>&1
  t0=$(date +%s)
  [ -x "$soak" ] || build
  echo "build: $(($(date +%s) - t0)) s"
  secs=${SOAK_SECONDS:-480}
  t0=$(date +%s)
  timeout $((secs + 90)) "$soak" --ops 10000000 --seconds "$secs" --json \
    >"$out/soak-10M.json" 2>"$out/soak-10M.log"
  rc=$?
  echo "== soak --ops 10000000 --seconds $secs (rc $rc, $(($(date +%s) - t0)) s wall)"
  tail -n 40 "$out/soak-10M.log"
  cat "$out/soak-10M.json"
  ;;
variations)
  # More threads and streams than the default; then sustained out-of-memory pressure.
  timeout 200 "$soak" --threads 8 --streams 4 --seconds 120 --json >"$out/soak-8x4.json" \
    2>"$out/soak-8x4.log"
  echo "== soak --threads 8 --streams 4 --seconds 120 (rc $?)"
  tail -n 18 "$out/soak-8x4.log"
  VPMM_MAX_BYTES=8G timeout 150 "$soak" --seconds 60 --json >"$out/soak-max8G.json" \
    2>"$out/soak-max8G.log"
  echo "== VPMM_MAX_BYTES=8G soak --seconds 60 (rc $?)"
  tail -n 18 "$out/soak-max8G.log"
  ;;
*)
  echo "usage: $0 check|soak|variations" >&2
  exit 1
  ;;
esac
