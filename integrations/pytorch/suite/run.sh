#!/usr/bin/env bash
# run.sh — PyTorch's own test files with vpmm as the allocator of every test process, and the
# same tests on PyTorch's native allocator, side by side (the backend's proof; results in
# integrations/pytorch/suite/RESULTS.md).
#
#   bash integrations/pytorch/suite/run.sh OUTDIR NAME FILE [pytest args...]
#
# runs `python3 -m pytest FILE args` twice at once, in two process trees: once with
# VPMM_TORCH_ENABLE=1 and autoenable/ on PYTHONPATH (sitecustomize.py enables vpmm in every Python
# process before it can initialise CUDA, subprocesses included), once without. Writes
# OUTDIR/NAME-{vpmm,native}.{log,xml} (JUnit XML: every test's outcome) and prints the counts;
# summarize.py compares the two XML files test by test. Needs libvpmm_torch_backend.so in
# build/integrations (cmake --build build --target vpmm_torch_backend) and pytest.
# VPMM_SUITE_TIMEOUT=seconds interrupts both runs then (SIGINT: pytest still writes its report,
# with the tests run so far).
set -u
out=$1 name=$2 file=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
pkg=$(cd "$here/.." && pwd)
mkdir -p "$out"
limit=()
[ -n "${VPMM_SUITE_TIMEOUT:-}" ] && limit=(timeout -s INT -k 30 "$VPMM_SUITE_TIMEOUT")
VPMM_TORCH_ENABLE=1 PYTHONPATH="$pkg/autoenable:$pkg${PYTHONPATH:+:$PYTHONPATH}" \
  TORCHINDUCTOR_CACHE_DIR="${TMPDIR:-/tmp}/vpmm-suite-$name-vpmm" \
  "${limit[@]}" python3 -m pytest "$file" -p no:cacheprovider -q -rfE \
  --junitxml="$out/$name-vpmm.xml" "$@" \
  >"$out/$name-vpmm.log" 2>&1 &
vpmm_pid=$!
TORCHINDUCTOR_CACHE_DIR="${TMPDIR:-/tmp}/vpmm-suite-$name-native" \
  "${limit[@]}" python3 -m pytest "$file" -p no:cacheprovider -q -rfE \
  --junitxml="$out/$name-native.xml" "$@" \
  >"$out/$name-native.log" 2>&1 &
native_pid=$!
wait $vpmm_pid
echo "$name vpmm: exit $?; $(tail -n 1 "$out/$name-vpmm.log")"
wait $native_pid
echo "$name native: exit $?; $(tail -n 1 "$out/$name-native.log")"
