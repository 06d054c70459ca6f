#!/usr/bin/env bash
# gpu-check.sh — everything that needs a real GPU (run on the device machine), in two stages that
# each fit one device call:
#   bash scripts/gpu-check.sh tests     configure and build in build-gpu/, run the whole ctest suite
#                                       with VPMM_TEST_REQUIRE_GPU=1 (GPU tests fail instead of
#                                       skipping without a device), the demo and the graph samples
#                                       on the GPU and on the host backend, and vpmm-checkpoint
#                                       (Release build, build-bench/)
#   bash scripts/gpu-check.sh memcheck  the GPU tests (test_gpu, test_gpu_graph, test_gpu_streams) under
#                                       compute-sanitizer memcheck (API errors are not reported: the
#                                       tests provoke some on purpose, e.g. cuMemCreate out of memory)
# Full logs go to $OUT (default ./gpu-logs); a summary is printed last. No argument: both.
#
# cmocka: when it is not installed (the device machine has no network), the Debian packages in
# .deps/ (apt-get download libcmocka0 libcmocka-dev) are unpacked into /tmp/cmocka and used.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-logs}
mkdir -p "$out"
prefix=()
if [ ! -f /usr/include/cmocka.h ] && compgen -G ".deps/*.deb" >/dev/null; then
  mkdir -p /tmp/cmocka
  for d in .deps/*.deb; do dpkg -x "$d" /tmp/cmocka; done
  prefix=(-DCMAKE_PREFIX_PATH=/tmp/cmocka/usr)
fi
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)

{ nvidia-smi; nvcc --version; } >"$out/device.txt" 2>&1
if ! cmake -S . -B build-gpu "${prefix[@]}" >"$out/configure.log" 2>&1 ||
   ! cmake --build build-gpu -j"$(nproc)" >"$out/build.log" 2>&1; then
  tail -n 40 "$out/configure.log" "$out/build.log"
  exit 1
fi
rm -f "$out/configure.log" "$out/build.log" # at most 8 files come back from the device
stage=${1:-all}
rc=0
if [ "$stage" = tests ] || [ "$stage" = all ]; then
  VPMM_TEST_REQUIRE_GPU=1 ctest --test-dir build-gpu --output-on-failure -V >"$out/ctest.log" 2>&1
  ctest_rc=$?
  ./build-gpu/bin/vpmm_demo >"$out/demo.log" 2>&1
  demo_rc=$?
  VPMM_BACKEND=host ./build-gpu/bin/vpmm_demo >"$out/demo-host.log" 2>&1
  demo_host_rc=$?
  { ./build-gpu/bin/vpmm_graph_inference 1000 && ./build-gpu/bin/vpmm_graph_tree 50; } \
    >"$out/samples.log" 2>&1
  samples_rc=$?
  { VPMM_BACKEND=host ./build-gpu/bin/vpmm_graph_inference 100 &&
    VPMM_BACKEND=host ./build-gpu/bin/vpmm_graph_tree 20; } >"$out/samples-host.log" 2>&1
  samples_host_rc=$?
  # Timings: a Release build, as for every figure of bench/RESULTS.md.
  { cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DVPMM_BUILD_TESTS=OFF >/dev/null &&
    cmake --build build-bench -j"$(nproc)" --target vpmm-checkpoint >/dev/null &&
    ./build-bench/bin/vpmm-checkpoint --backend cuda &&
    ./build-bench/bin/vpmm-checkpoint --backend cuda --json; } >"$out/checkpoint-bench.log" 2>&1
  bench_rc=$?
  echo "== device"; grep -E "Driver Version|H100|H200" "$out/device.txt" | head -3
  echo "== ctest (rc $ctest_rc)"; grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/ctest.log" | tail -8
  echo "== GPU test report lines"; grep -hE "^\[gpu|\[driver_cuda\]|NOTE" "$out/ctest.log" | head -70
  echo "== demo on GPU (rc $demo_rc)"; head -8 "$out/demo.log"
  echo "== demo on host (rc $demo_host_rc)"; head -2 "$out/demo-host.log"
  echo "== graph samples on GPU (rc $samples_rc)"; cat "$out/samples.log"
  echo "== graph samples on host (rc $samples_host_rc)"; grep -E "running|correct" "$out/samples-host.log"
  echo "== vpmm-checkpoint (rc $bench_rc)"; cat "$out/checkpoint-bench.log"
  for r in $ctest_rc $demo_rc $demo_host_rc $samples_rc $samples_host_rc $bench_rc; do
    [ "$r" -eq 0 ] || rc=1
  done
fi
if [ "$stage" = memcheck ] || [ "$stage" = all ]; then
  for t in test_gpu_graph test_gpu test_gpu_streams; do
    # --nvtx no: compute-sanitizer refuses NVTX heaps over VMM memory with a warning that counts
    # as an error (docs/OBSERVABILITY.md); it could not check inside them anyway.
    VPMM_TEST_REQUIRE_GPU=1 timeout 400 "$sanitizer" --tool memcheck --leak-check full --nvtx no \
      --report-api-errors no --error-exitcode 3 ./build-gpu/bin/$t >"$out/memcheck-$t.log" 2>&1
    m=$?
    echo "== memcheck $t (rc $m)"; tail -4 "$out/memcheck-$t.log"
    [ "$m" -eq 0 ] || rc=1
  done
fi
exit $rc
