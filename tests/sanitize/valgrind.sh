#!/usr/bin/env bash
# tests/sanitize/valgrind.sh — every test executable of a plain build under valgrind memcheck
# (the goal: valgrind memcheck clean on the host-backend suite). Not part of CI (it takes
# ~10 minutes on 2 cores); run it after changes to memory ownership.
#
#   bash tests/sanitize/valgrind.sh            # uses build/ (configured and built if missing)
#   BUILD_DIR=build-x JOBS=2 CMAKE_ARGS=... bash tests/sanitize/valgrind.sh
#
# Each binary runs under memcheck with --leak-check=full and --errors-for-leak-kinds=definite,
# indirect; any error or definite/indirect leak fails it (valgrind's exit status 99). Settings
# that keep valgrind fast and able to run the tests:
#   VPMM_VA_SIZE=16G      valgrind refuses the default multi-TiB PROT_NONE reservations of the
#                         default pool (tests that make their own pools choose their own sizes)
#   VPMM_THREADS_OPS, VPMM_STRESS_OPS   fewer operations than the defaults (valgrind runs the
#                         threads one at a time and is ~30x slower)
#   CUDA_VISIBLE_DEVICES= the host backend everywhere: valgrind cannot follow the CUDA driver
#   VPMM_TEST_UNDER_VALGRIND=1  skips what needs more address space than valgrind gives: the
#                         default 8 TiB reservation (test_footprint, and test_options's
#                         test_create_env_page_6m_default_va) and test_threads (~100 GiB of
#                         fresh VA over a run; ASan and TSan cover it)
# The GPU tests (label gpu) and the tests that are scripts (test_package and test_nvtx_off around
# cmake and nm, the Python ones: no executable of their own in bin/) are left out. VALGRIND_ARGS adds options (e.g. --track-origins=yes, ~2x slower).
# Logs go to $BUILD_DIR/valgrind/<test>.log; a summary line per test and the list of failures are
# printed; the exit status is non-zero if any test failed.
set -uo pipefail
cd "$(dirname "$0")/../.."

build=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
command -v valgrind >/dev/null || {
  echo "valgrind.sh: valgrind not found (apt-get install -y valgrind)" >&2
  exit 2
}
if [ ! -x "$build/bin/test_pool" ]; then
  cmake -S . -B "$build" ${CMAKE_ARGS:-} >/dev/null && cmake --build "$build" -j"$jobs" >/dev/null || exit 1
fi
mkdir -p "$build/valgrind"

export CUDA_VISIBLE_DEVICES= VPMM_TEST_UNDER_VALGRIND=1 VPMM_VA_SIZE=16G VPMM_THREADS_OPS=${VPMM_THREADS_OPS:-100000}
export VPMM_STRESS_OPS=${VPMM_STRESS_OPS:-20000}

run_one() { # run_one <binary>: prints "<name> ok|FAILED (<seconds> s)"
  local bin=$1 name t0 rc
  name=$(basename "$bin")
  t0=$(date +%s)
  (cd "$build/tests" && valgrind --tool=memcheck --error-exitcode=99 --leak-check=full \
    --errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect \
    ${VALGRIND_ARGS:-} "$bin") >"$build/valgrind/$name.log" 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then
    echo "$name ok ($(($(date +%s) - t0)) s)"
  else
    echo "$name FAILED, exit $rc ($(($(date +%s) - t0)) s): $build/valgrind/$name.log"
  fi
}
export -f run_one
export build

# The tests ctest knows (not stray binaries), each one's executable.
ctest --test-dir "$build" -N -LE gpu | awk '/Test +#/ { print $3 }' | grep -v -E '^test_(package|nvtx_off|snapshot_to_trace|python_package|bench_tools)$' |
  sed "s|^|$build/bin/|" | xargs -P "$jobs" -I{} bash -c 'run_one "$(realpath {})"' | tee "$build/valgrind/summary.txt"
failed=$(grep -c FAILED "$build/valgrind/summary.txt")
echo "valgrind.sh: $(wc -l <"$build/valgrind/summary.txt") tests, $failed failed"
[ "$failed" -eq 0 ]
