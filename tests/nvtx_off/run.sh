#!/usr/bin/env bash
# run.sh — NVTX compiles away: builds the library with -DVPMM_NVTX=OFF in a temporary directory
# and checks that it references no NVTX symbol at all, while the NVTX build given as $1 (the
# in-tree libvpmm.a) does. Registered with ctest as test_nvtx_off.
#
#   bash tests/nvtx_off/run.sh path/to/libvpmm.a
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
with=${1:?usage: run.sh path/to/libvpmm.a built with VPMM_NVTX=ON}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cmake -S "$src" -B "$work" -DCMAKE_BUILD_TYPE=Release -DVPMM_NVTX=OFF -DVPMM_BUILD_TESTS=OFF \
  -DVPMM_BUILD_SAMPLES=OFF -DVPMM_BUILD_BENCH=OFF >"$work/configure.log"
cmake --build "$work" -j2 --target vpmm >"$work/build.log"
without=$(find "$work" -name libvpmm.a | head -n 1)

count() { nm "$1" 2>/dev/null | grep -v ":$" | grep -ci nvtx || true; } # symbols, not member names
on=$(count "$with")
off=$(count "$without")
echo "NVTX symbols: $on with VPMM_NVTX=ON ($with), $off with VPMM_NVTX=OFF"
if [ "$on" -eq 0 ]; then
  echo "the VPMM_NVTX=ON library has no NVTX symbol: is the check looking at the right file?" >&2
  exit 1
fi
if [ "$off" -ne 0 ]; then
  echo "VPMM_NVTX=OFF left NVTX symbols in the library:" >&2
  nm "$without" | grep -v ":$" | grep -i nvtx >&2
  exit 1
fi
