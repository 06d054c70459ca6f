#!/usr/bin/env bash
# run_isolated.sh — PyTorch test classes one test per process, on vpmm and on the native
# allocator side by side (a failed assertion in one test often leaves state behind — a memory
# fraction, live tensors, a capturing stream — that fails the tests after it in the same process;
# isolated, each outcome is the test's own).
#
#   bash integrations/pytorch/suite/run_isolated.sh OUTDIR FILE CLASS...
#
# Writes OUTDIR/isolated-{vpmm,native}.txt ("outcome test" per line) and prints a table of the
# tests whose outcomes differ. Same set-up as run.sh (autoenable/ for vpmm, PYTHONPATH for
# expecttest); VPMM_SUITE_TIMEOUT=seconds bounds each test (default 300).
set -u
out=$1 file=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
pkg=$(cd "$here/.." && pwd)
mkdir -p "$out"
ids=$(python3 -m pytest "$file" -p no:cacheprovider -q --collect-only -k "$(printf '%s or ' "$@" | sed 's/ or $//')" 2>/dev/null |
    grep '::')
one() { # allocator id
    local rc last env=()
    [ "$1" = vpmm ] && env=(VPMM_TORCH_ENABLE=1
        PYTHONPATH="$pkg/autoenable:$pkg${PYTHONPATH:+:$PYTHONPATH}")
    last=$(env "${env[@]}" timeout "${VPMM_SUITE_TIMEOUT:-300}" python3 -m pytest "$2" \
        -p no:cacheprovider -q 2>&1 | tail -n 1)
    rc=${PIPESTATUS[0]}
    case $last in
    *failed* | *error*) echo "failed $2" ;;
    *passed*) echo "passed $2" ;;
    *skipped*) echo "skipped $2" ;;
    *) echo "failed(rc=$rc) $2" ;;
    esac
}
for a in vpmm native; do
    (for id in $ids; do one $a "$id"; done >"$out/isolated-$a.txt") &
done
wait
for a in vpmm native; do
    echo "$a: $(grep -c '^passed' "$out/isolated-$a.txt") passed, $(grep -c '^failed' "$out/isolated-$a.txt") failed of $(wc -l <"$out/isolated-$a.txt")"
done
echo "differ:"
join -1 2 -2 2 <(sort -k2 "$out/isolated-vpmm.txt") <(sort -k2 "$out/isolated-native.txt") |
    awk '$2 != $3 { print "  " $1 ": vpmm " $2 ", native " $3 }'
