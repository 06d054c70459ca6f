#!/usr/bin/env bash
# run.sh — vpmm as a subproject of another CMake project (ctest: test_subproject; also runs on its
# own: `bash tests/package/subproject/run.sh`). In a fresh temporary directory it configures the
# parent project of this directory (CMakeLists.txt: it checks, at configure time, that vpmm defined
# its library and nothing else and left the parent's build type alone)
#   1. with add_subdirectory(vpmm) and
#   2. with FetchContent (SOURCE_DIR: no download),
# and then, unless --configure-only,
#   3. builds the first (libvpmm as part of the parent's build), runs its two consumers (shared and
#      static) and checks that `cmake --install` of the parent installs nothing of vpmm.
# Exit status 0 when all of it holds; otherwise 1, keeping the directory for a look.
# Environment: CMAKE, CC (default cmake, cc); TMPDIR.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
cmake=${CMAKE:-cmake}
cc=${CC:-cc}
jobs=$(nproc 2>/dev/null || echo 2)
configure_only=0
[ "${1:-}" = --configure-only ] && configure_only=1

work=$(mktemp -d "${TMPDIR:-/tmp}/vpmm-subproject.XXXXXX")
cleanup() {
    local status=$?
    if [ "$status" -eq 0 ]; then
        rm -rf "$work"
    else
        echo "run.sh: FAILED; its files are kept in $work" >&2
    fi
}
trap cleanup EXIT

fail() {
    echo "run.sh: FAIL: $*" >&2
    exit 1
}
quiet() {
    local name=$1 log="$work/$1.log"
    shift
    echo "+ $*"
    "$@" >"$log" 2>&1 || { cat "$log" >&2; fail "$name failed (log: $log)"; }
}

start=$SECONDS
n=0
for how in add_subdirectory FetchContent; do
    n=$((n + 1))
    printf '\n== %d. a parent project with vpmm by %s\n' "$n" "$how"
    # No CMAKE_BUILD_TYPE and no VPMM_* option: what a parent that just adds vpmm gives it.
    quiet "configure-$how" "$cmake" -S "$here" -B "$work/$how" -DCMAKE_C_COMPILER="$cc" \
        -DVPMM_SOURCE_DIR="$repo" -DVPMM_HOW="$how"
    grep 'vpmm_parent:' "$work/configure-$how.log" | sed 's/^-- /  /'
done

if [ "$configure_only" = 0 ]; then
    printf '\n== 3. build the parent, run its consumers, install it\n'
    build="$work/add_subdirectory"
    quiet build "$cmake" --build "$build" --parallel "$jobs"
    for kind in shared static; do
        out=$("$build/consumer_$kind") || fail "consumer_$kind exited with status $?"
        echo "  $out"
        case "$out" in
        *"host backend, malloc/free/destroy ok"*) ;;
        *) fail "consumer_$kind printed something unexpected" ;;
        esac
    done
    quiet install "$cmake" --install "$build" --prefix "$work/prefix"
    if [ -d "$work/prefix" ] && [ -n "$(find "$work/prefix" ! -type d)" ]; then
        find "$work/prefix" ! -type d >&2
        fail "installing the parent installed vpmm's files (VPMM_INSTALL must be OFF)"
    fi
    echo "  cmake --install of the parent installs nothing of vpmm"
fi

printf '\nrun.sh: PASS: vpmm as a subproject builds its library only and leaves the parent alone '
printf '(%d s)\n' $((SECONDS - start))
