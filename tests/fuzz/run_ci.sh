#!/usr/bin/env bash
# tests/fuzz/run_ci.sh — builds the libFuzzer target (clang, ASan + UBSan, Release) in build-fuzz
# and fuzzes for FUZZ_SECONDS (default 60) starting from a copy of tests/fuzz/corpus; exits
# non-zero on a finding (the crashing input is left in build-fuzz/findings/, to be copied into
# tests/fuzz/regressions/) and prints the number of operations executed.
#
#   FUZZ_SECONDS=600 FUZZ_JOBS=2 tests/fuzz/run_ci.sh
#
# Environment: CC (default clang), FUZZ_SECONDS, FUZZ_JOBS (parallel fuzzing processes, default
# 1), BUILD_DIR (default build-fuzz), FUZZ_ARGS (extra libFuzzer flags). Needs clang with
# libFuzzer (Debian: clang, libclang-rt-NN-dev), cmake, cmocka (the test tree is configured).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${BUILD_DIR:-$root/build-fuzz}"
seconds="${FUZZ_SECONDS:-60}"
jobs="${FUZZ_JOBS:-1}"
cc="${CC:-clang}"
san="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined"

mkdir -p "$build"
cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_FLAGS="$san -fno-omit-frame-pointer -g" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DVPMM_FUZZ=ON -DVPMM_BUILD_TESTS=ON -DVPMM_BUILD_SAMPLES=OFF -DVPMM_BUILD_BENCH=OFF \
    -DVPMM_BUILD_INTEGRATIONS=OFF -DVPMM_GPU_KERNELS=OFF -DVPMM_WERROR=OFF >"$build/configure.log" \
    || { cat "$build/configure.log"; exit 1; }
cmake --build "$build" --target fuzz_ops -j"$(nproc)"

work="$build/fuzz-run"
rm -rf "$work"
rm -rf "$build/findings"
mkdir -p "$work/corpus" "$build/findings"
cp "$root"/tests/fuzz/corpus/* "$work/corpus/"

# libFuzzer: -max_total_time bounds the run; each finding is written as crash-*/leak-*/timeout-*
# under findings/. With -jobs the workers log to fuzz-N.log, which are printed afterwards.
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}"
if ! command -v llvm-symbolizer >/dev/null; then # readable stacks without the llvm package
    for s in /usr/lib/llvm-*/bin/llvm-symbolizer; do
        [ -x "$s" ] && export ASAN_SYMBOLIZER_PATH="$s"
    done
fi
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
status=0
cd "$work"
if [ "$jobs" -gt 1 ]; then
    "$build/bin/fuzz_ops" -max_total_time="$seconds" -jobs="$jobs" -workers="$jobs" \
        -artifact_prefix="$build/findings/" -print_final_stats=1 ${FUZZ_ARGS:-} corpus \
        >"$work/driver.log" 2>&1 || status=$?
    cat "$work"/fuzz-*.log >"$work/all.log" 2>/dev/null || true
else
    "$build/bin/fuzz_ops" -max_total_time="$seconds" -artifact_prefix="$build/findings/" \
        -print_final_stats=1 ${FUZZ_ARGS:-} corpus >"$work/all.log" 2>&1 || status=$?
fi
grep -E "^#[0-9]+ +DONE|stat::|fuzz_ops: [0-9]+ operations in" "$work/all.log" || true
ops=$(awk '/^fuzz_ops: [0-9]+ operations in [0-9]+ inputs/ { n += $2 } END { print n + 0 }' "$work/all.log")
# slow-unit-* files are not findings (an input of thousands of checked operations is slow).
found=$(find "$build/findings" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
    -o -name 'oom-*' \) | head -n 1)
if [ -n "$found" ] || [ "$status" -ne 0 ] ||
    grep -q "FINDING\|ERROR: libFuzzer\|ERROR: AddressSanitizer\|runtime error" "$work/all.log"; then
    grep -B2 -A40 "FINDING\|ERROR: libFuzzer\|ERROR: AddressSanitizer\|runtime error" \
        "$work/all.log" | head -120 || true
    echo "fuzz_ops: FINDING after $ops operations; inputs in $build/findings/ (copy each into" \
        "tests/fuzz/regressions/)" >&2
    exit 1
fi
echo "fuzz_ops: $ops operations in ${seconds} s, $jobs process(es), no finding"
