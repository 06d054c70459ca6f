#!/usr/bin/env bash
# tests/sanitize/run_ci.sh — the test suite under sanitizers, called by .ci/run after the
# plain build and tests:
#   1. build-asan: everything built with VPMM_SANITIZE=address,undefined and the whole ctest suite
#      run. Built with VPMM_GPU_KERNELS=OFF: nvcc's objects could not be instrumented anyway, and
#      CI has no GPU, so the GPU tests skip either way (saves a minute of nvcc). Any ASan, UBSan
#      or LeakSanitizer report fails the test that triggered it.
#   2. build-tsan: VPMM_SANITIZE=thread, and the tests that exercise threads: test_threads (8
#      threads sharing one pool; VPMM_THREADS_OPS operations, fewer than its default: TSan is
#      ~10x slower), test_lock (the futex pool lock), test_stream (per-thread streams: several
#      threads behind one handle), test_worker (the pool's background worker unmapping while
#      threads malloc and free) and test_driver_host_thread (the host backend's per-thread
#      streams, driven by concurrent threads).
# Needs nothing beyond the plain build's packages: GCC ships the sanitizer runtimes (libasan,
# libubsan, libtsan come with build-essential's gcc). Prints each stage's time; exits non-zero if
# any stage failed. Build directories are kept (incremental reruns); delete them to start over.
#
#   bash tests/sanitize/run_ci.sh            # from anywhere; 3-4 min on 2 cores
#   VPMM_TSAN_THREADS_OPS=1200000 bash tests/sanitize/run_ci.sh   # the full count under TSan too
set -euo pipefail
cd "$(dirname "$0")/../.."

jobs=$(nproc 2>/dev/null || echo 2)
tsan_ops=${VPMM_TSAN_THREADS_OPS:-300000}
build_type=RelWithDebInfo # -O2 -g: readable stacks, tests fast enough
t_start=$(date +%s)
timings=()
failed=()

stage() { # stage <name> <command...>: runs it, records its wall time and whether it failed
  local name=$1 t0 rc=0 note=""
  shift
  echo "run_ci.sh: == $name"
  t0=$(date +%s)
  "$@" || rc=$?
  if [ "$rc" -ne 0 ]; then
    note="  FAILED (exit $rc)"
    failed+=("$name")
  fi
  timings+=("$(printf '%-40s %4d s%s' "$name" $(($(date +%s) - t0)) "$note")")
  return "$rc"
}

# Every finding fails at once and says where; LSan checks for leaks at each test's exit.
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"

# Both halves run even if the first fails (one CI run reports everything); each stops at its own
# first failing step.
stage "asan+ubsan: configure" \
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=$build_type -DVPMM_SANITIZE=address,undefined \
  -DVPMM_GPU_KERNELS=OFF &&
  stage "asan+ubsan: build" cmake --build build-asan -j"$jobs" &&
  stage "asan+ubsan: ctest (whole suite)" \
    ctest --test-dir build-asan --output-on-failure --no-tests=error -j"$jobs" || true

stage "tsan: configure" \
  cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=$build_type -DVPMM_SANITIZE=thread \
  -DVPMM_GPU_KERNELS=OFF &&
  stage "tsan: build" cmake --build build-tsan -j"$jobs" --target test_threads test_lock \
    test_stream test_driver_host_thread test_worker &&
  stage "tsan: ctest (threads, lock, streams, worker)" \
    env VPMM_THREADS_OPS="$tsan_ops" \
    ctest --test-dir build-tsan --output-on-failure --no-tests=error \
    -R '^(test_threads|test_lock|test_stream|test_driver_host_thread|test_worker)$' || true

if [ ${#failed[@]} -eq 0 ]; then
  echo "run_ci.sh: all clean. Times (VPMM_THREADS_OPS=$tsan_ops under TSan):"
else
  echo "run_ci.sh: FAILED: ${failed[*]}. Times (VPMM_THREADS_OPS=$tsan_ops under TSan):"
fi
printf '  %s\n' "${timings[@]}"
printf '  %-40s %4d s\n' total $(($(date +%s) - t_start))
[ ${#failed[@]} -eq 0 ]
