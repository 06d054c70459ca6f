#!/usr/bin/env bash
# build_torch_backend.sh — configures and builds libvpmm_torch_backend.so in build-gpu/ (Release)
# against the PyTorch of a given Python; shared by bench/run_multigpu.sh and
# integrations/pytorch/suite/run_multigpu.sh (device machine).
#
#   bash bench/build_torch_backend.sh PYTHON LOGFILE [BUILD_DIR]
#
# BUILD_DIR defaults to build-gpu (relative to the repository). Prints the library's absolute
# path on stdout. On failure: the log's last lines on stderr, exit 1.
# cmocka, when not installed (the device machine has no network), comes from the Debian packages
# in .deps/ as in scripts/gpu-check.sh; only the backend's target is built, so it is optional.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
py=$1 log=$2 dir=${3:-build-gpu}
prefix=()
if [ ! -f /usr/include/cmocka.h ] && compgen -G ".deps/*.deb" >/dev/null; then
  mkdir -p /tmp/cmocka
  for d in .deps/*.deb; do dpkg -x "$d" /tmp/cmocka; done
  prefix=(-DCMAKE_PREFIX_PATH=/tmp/cmocka/usr)
fi
if ! { cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DVPMM_PYTHON="$py" "${prefix[@]}" &&
  cmake --build "$dir" -j"$(nproc)" --target vpmm_torch_backend; } >"$log" 2>&1; then
  echo "build_torch_backend: the build failed; the end of $log:" >&2
  tail -n 40 "$log" >&2
  exit 1
fi
lib=$(cd "$dir" && pwd)/integrations/libvpmm_torch_backend.so
if [ ! -f "$lib" ]; then
  echo "build_torch_backend: $lib was not built (does $py import torch? see $log)" >&2
  exit 1
fi
echo "$lib"
