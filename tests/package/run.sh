#!/usr/bin/env bash
# run.sh — the installable package, end to end (ctest: test_package; also runs on its own:
# `bash tests/package/run.sh`). In a fresh temporary directory it
#   1. builds the library alone (Release; tests, samples, benchmarks and GPU kernels off),
#   2. installs it with `cmake --install --prefix` and checks the tree holds exactly the header,
#      libvpmm.so (+ its SONAME links), libvpmm.a, the CMake package, vpmm.pc and the LICENSE,
#   3. checks libvpmm.so: its SONAME, and that it exports exactly the functions of vpmm.h,
#   4. builds tests/package (consumer.c) with find_package(vpmm): vpmm::vpmm and
#      vpmm::vpmm_static, and runs both,
#   5. builds consumer.c with pkg-config, shared and --static, and runs both,
# and checks that the header, the CMake package, pkg-config and the file names agree on the
# version. Exit status 0 when all of it holds; otherwise 1, keeping the directory for a look.
# Environment: CMAKE, CC, PKG_CONFIG (default cmake, cc, pkg-config); TMPDIR.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cmake=${CMAKE:-cmake}
cc=${CC:-cc}
pkg_config=${PKG_CONFIG:-pkg-config}
jobs=$(nproc 2>/dev/null || echo 2)

work=$(mktemp -d "${TMPDIR:-/tmp}/vpmm-package.XXXXXX")
prefix="$work/prefix"
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
step() { printf '\n== %s\n' "$*"; }
# Runs a command, echoing it; its output goes to a log that is shown only when it fails.
quiet() {
    local name=$1 log="$work/$1.log"
    shift
    echo "+ $*"
    "$@" >"$log" 2>&1 || { cat "$log" >&2; fail "$name failed (log: $log)"; }
}
# Runs a program with no LD_LIBRARY_PATH but the one given (may be empty), expecting its line.
run_consumer() {
    local ldpath=$1 exe=$2 out
    echo "+ ${ldpath:+LD_LIBRARY_PATH=$ldpath }$exe"
    out=$(env -u LD_LIBRARY_PATH ${ldpath:+LD_LIBRARY_PATH="$ldpath"} "$exe") ||
        fail "$exe exited with status $?"
    echo "  $out"
    case "$out" in
    *"vpmm $version, host backend, malloc/free/destroy ok"*) ;;
    *) fail "$exe printed something else than vpmm $version on the host backend" ;;
    esac
}
# libvpmm must be linked the expected way: "shared" (resolved to the installed file) or "static".
check_linkage() {
    local exe=$1 kind=$2 ldpath=${3:-} needed resolved
    needed=$(readelf -d "$exe" | sed -n 's/.*(NEEDED).*\[\(libvpmm[^]]*\)\].*/\1/p')
    if [ "$kind" = static ]; then
        [ -z "$needed" ] || fail "$exe needs $needed: it was to link libvpmm.a"
        echo "  $exe: libvpmm.a linked in (no libvpmm.so needed)"
        return
    fi
    [ "$needed" = "$soname" ] || fail "$exe needs '${needed}', not $soname"
    resolved=$(env -u LD_LIBRARY_PATH ${ldpath:+LD_LIBRARY_PATH="$ldpath"} ldd "$exe" |
        sed -n "s/^[[:space:]]*$soname => \([^ ]*\).*/\1/p")
    if [ -z "$resolved" ] || [ "$(realpath "$resolved")" != "$(realpath "$libdir/$soname")" ]; then
        fail "$exe finds $soname at '${resolved}', not $libdir/$soname"
    fi
    echo "  $exe: $soname => $resolved"
}

start=$SECONDS
header="$repo/include/vpmm.h"
macro() { sed -n "s/^#define VPMM_VERSION_$1 \([0-9][0-9]*\).*/\1/p" "$header"; }
major=$(macro MAJOR)
minor=$(macro MINOR)
patch=$(macro PATCH)
if [ -z "$major" ] || [ -z "$minor" ] || [ -z "$patch" ]; then
    fail "no VPMM_VERSION_* in $header"
fi
version="$major.$minor.$patch"
# 0.x: any minor release may break the ABI, so the SONAME carries the minor version.
if [ "$major" = 0 ]; then soversion="$major.$minor"; else soversion=$major; fi
soname="libvpmm.so.$soversion"
echo "run.sh: vpmm.h says $version; working in $work"

step "1. build the library alone (Release)"
quiet configure "$cmake" -S "$repo" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER="$cc" -DVPMM_BUILD_TESTS=OFF -DVPMM_BUILD_SAMPLES=OFF \
    -DVPMM_BUILD_BENCH=OFF -DVPMM_GPU_KERNELS=OFF
quiet build "$cmake" --build "$work/build" --parallel "$jobs"
echo "  built in $((SECONDS - start)) s"

step "2. cmake --install into a fresh prefix"
quiet install "$cmake" --install "$work/build" --prefix "$prefix"
pc=$(find "$prefix" -name vpmm.pc)
[ -n "$pc" ] || fail "no vpmm.pc installed"
libdir=$(dirname "$(dirname "$pc")")
lib=${libdir#"$prefix"/}
(cd "$prefix" && find . ! -type d | sed 's|^\./||' | LC_ALL=C sort) >"$work/installed.txt"
LC_ALL=C sort >"$work/expected.txt" <<EOF
include/vpmm.h
$lib/cmake/vpmm/vpmmConfig.cmake
$lib/cmake/vpmm/vpmmConfigVersion.cmake
$lib/cmake/vpmm/vpmmTargets-release.cmake
$lib/cmake/vpmm/vpmmTargets.cmake
$lib/libvpmm.a
$lib/libvpmm.so
$lib/libvpmm.so.$soversion
$lib/libvpmm.so.$version
$lib/pkgconfig/vpmm.pc
share/doc/vpmm/LICENSE
EOF
sed 's/^/  /' "$work/installed.txt"
diff -u "$work/expected.txt" "$work/installed.txt" >&2 ||
    fail "the install tree is not the expected one (- expected, + installed)"
cmp -s "$header" "$prefix/include/vpmm.h" || fail "the installed vpmm.h differs from $header"

step "3. libvpmm.so: SONAME and exported symbols"
so="$libdir/libvpmm.so.$version"
got_soname=$(readelf -d "$so" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')
[ "$got_soname" = "$soname" ] || fail "SONAME is '${got_soname}', expected $soname"
echo "  SONAME $got_soname"
# The public API: every function vpmm.h declares (preprocessed, so comments do not count).
"$cc" -E -P "$header" | grep -oE '\bvpmm_[a-z0-9_]+[[:space:]]*\(' | sed 's/[[:space:]]*($//' |
    LC_ALL=C sort -u >"$work/api.txt"
nm -D --defined-only "$so" | awk 'NF == 3 { print $3 }' | LC_ALL=C sort -u >"$work/exported.txt"
if ! diff -u "$work/api.txt" "$work/exported.txt" >&2; then
    fail "libvpmm.so must export exactly the functions of vpmm.h (- declared only, + exported" \
        "only): update src/vpmm.map"
fi
echo "  exports the $(wc -l <"$work/api.txt") functions of vpmm.h and nothing else"

step "4. a consumer built with find_package(vpmm)"
quiet consumer-configure "$cmake" -S "$here" -B "$work/consumer" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_PREFIX_PATH="$prefix"
grep -q "vpmm $version found in $libdir/cmake/vpmm" "$work/consumer-configure.log" ||
    fail "find_package did not find vpmm $version in $libdir/cmake/vpmm:" \
        "$(grep 'vpmm .* found' "$work/consumer-configure.log")"
echo "  found vpmm $version in $libdir/cmake/vpmm"
quiet consumer-build "$cmake" --build "$work/consumer" --parallel "$jobs"
check_linkage "$work/consumer/consumer_shared" shared # the RPATH CMake gives it
run_consumer "" "$work/consumer/consumer_shared"
check_linkage "$work/consumer/consumer_static" static
run_consumer "" "$work/consumer/consumer_static"

step "5. a consumer built with pkg-config"
export PKG_CONFIG_PATH="$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
pc_version=$("$pkg_config" --modversion vpmm)
[ "$pc_version" = "$version" ] || fail "pkg-config says vpmm $pc_version, vpmm.h $version"
pc() { "$pkg_config" "$@" vpmm | sed 's/[[:space:]]*$//'; }
cflags=$(pc --cflags)
libs=$(pc --libs)
static_libs=$(pc --static --libs)
echo "  --modversion: $pc_version"
echo "  --cflags: $cflags"
echo "  --libs: $libs"
echo "  --static --libs: $static_libs"
for l in -lpthread -ldl; do
    case " $static_libs " in
    *" $l "*) ;;
    *) fail "pkg-config --static --libs vpmm lacks $l" ;;
    esac
done
strict=(-std=c11 -Wall -Wextra -Wpedantic -Werror)
# shellcheck disable=SC2086 # pkg-config output is a list of words
quiet pc-shared "$cc" "${strict[@]}" "$here/consumer.c" $cflags $libs -o "$work/pc_shared"
check_linkage "$work/pc_shared" shared "$libdir"
run_consumer "$libdir" "$work/pc_shared"
# -lvpmm would pick libvpmm.so, which sits next to the archive: name the archive itself.
# shellcheck disable=SC2086
quiet pc-static "$cc" "${strict[@]}" "$here/consumer.c" $cflags ${static_libs/-lvpmm/-l:libvpmm.a} \
    -o "$work/pc_static"
check_linkage "$work/pc_static" static
run_consumer "" "$work/pc_static"

printf '\nrun.sh: PASS: vpmm %s installs; consumers build and run from its CMake package and\n' \
    "$version"
printf 'pkg-config, shared and static (%d s)\n' $((SECONDS - start))
