#!/usr/bin/env bash
# gpu-check.sh — everything that needs a real GPU, in one go (run on the device machine):
# configure and build in build-gpu/, run the whole ctest suite with VPMM_TEST_REQUIRE_GPU=1 (so the
# GPU tests fail instead of skipping when no device is found), run the demo on the GPU and on the
# host backend, and run the GPU test under compute-sanitizer memcheck (API errors are not reported:
# the tests provoke some on purpose, e.g. cuMemCreate running out of memory). Full logs go to $OUT
# (default ./gpu-logs); a summary is printed last.
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
VPMM_TEST_REQUIRE_GPU=1 ctest --test-dir build-gpu --output-on-failure -V >"$out/ctest.log" 2>&1
ctest_rc=$?
./build-gpu/bin/vpmm_demo >"$out/demo.log" 2>&1
demo_rc=$?
VPMM_BACKEND=host ./build-gpu/bin/vpmm_demo >"$out/demo-host.log" 2>&1
demo_host_rc=$?
timeout 400 "$sanitizer" --tool memcheck --leak-check full --report-api-errors no --error-exitcode 3 \
  ./build-gpu/bin/test_gpu >"$out/memcheck.log" 2>&1
memcheck_rc=$?

echo "== device"; grep -E "Driver Version|H100|H200" "$out/device.txt" | head -3
echo "== ctest (rc $ctest_rc)"; grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/ctest.log" | tail -8
echo "== GPU test report lines"; grep -hE "^\[gpu\]|\[driver_cuda\]|NOTE" "$out/ctest.log" | head -60
echo "== demo on GPU (rc $demo_rc)"; head -8 "$out/demo.log"
echo "== demo on host (rc $demo_host_rc)"; head -2 "$out/demo-host.log"
echo "== memcheck (rc $memcheck_rc)"; tail -4 "$out/memcheck.log"
[ $ctest_rc -eq 0 ] && [ $demo_rc -eq 0 ] && [ $demo_host_rc -eq 0 ] && [ $memcheck_rc -eq 0 ]
