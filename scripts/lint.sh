#!/usr/bin/env bash
# lint.sh — CI's lint stage (.ci/run), also run by hand before sending a change:
#   1. format: every tracked C, C++ and CUDA file is as clang-format writes it (.clang-format);
#      a file that is not is listed with the command that fixes it;
#   2. the clang static analyzer (scan-build) over the library, built with its cheap assertions
#      on (VPMM_ASSERT_LEVEL=1: the invariants an assertion states are facts the analyzer may
#      use), in build-scan/; any finding fails the stage, its HTML report left in
#      build-scan/reports/.
# Needs clang-format and scan-build: `bash scripts/setup.sh --lint` installs them.
#   bash scripts/lint.sh [format|analyze]...     (default: both)
set -euo pipefail
cd "$(dirname "$0")/.."
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(format analyze)
for stage in "${stages[@]}"; do
  case $stage in
  format)
    mapfile -t files < <(git ls-files '*.c' '*.h' '*.cpp' '*.cu')
    bad=()
    for f in "${files[@]}"; do
      clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
    done
    if [ ${#bad[@]} -gt 0 ]; then
      echo "lint: not as clang-format writes them (fix: clang-format -i FILE...):" >&2
      printf '  %s\n' "${bad[@]}" >&2
      exit 1
    fi
    echo "lint: format: ${#files[@]} files as clang-format writes them"
    ;;
  analyze)
    rm -rf build-scan
    scan-build -o build-scan/reports cmake -S . -B build-scan -DVPMM_BUILD_TESTS=OFF \
      -DVPMM_BUILD_SAMPLES=OFF -DVPMM_BUILD_BENCH=OFF -DVPMM_BUILD_INTEGRATIONS=OFF \
      -DVPMM_GPU_KERNELS=OFF -DVPMM_ASSERT_LEVEL=1 >/dev/null
    if ! scan-build -o build-scan/reports --status-bugs cmake --build build-scan -j2; then
      echo "lint: the static analyzer found the above (reports in build-scan/reports/)" >&2
      exit 1
    fi
    echo "lint: analyze: no finding"
    ;;
  *)
    echo "lint: unknown stage $stage (format, analyze)" >&2
    exit 2
    ;;
  esac
done
