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
#   6. makes the Debian packages (`cpack -G DEB`; skipped without dpkg-deb and file) and checks
#      them: libvpmm holds the shared library and the LICENSE, libvpmm-dev the rest of the install
#      tree and depends on libvpmm of its version, the two together are exactly the install tree;
#      unpacked, consumer.c builds against them with find_package and pkg-config and runs,
# and checks that the header, the CMake package, pkg-config, the packages and the file names agree
# on the version. Exit status 0 when all of it holds; otherwise 1, keeping the directory for a look.
# Environment: CMAKE, CPACK, CC, PKG_CONFIG (default cmake, the cpack beside it, cc, pkg-config);
# TMPDIR.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cmake=${CMAKE:-cmake}
if [ -n "${CPACK:-}" ]; then
    cpack=$CPACK
elif [ "$cmake" != cmake ] && [ -x "$(dirname "$cmake")/cpack" ]; then
    cpack=$(dirname "$cmake")/cpack
else
    cpack=cpack
fi
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
# Where PyTorch is installed the build also makes the PyTorch backend, installed beside the library.
if [ -f "$work/build/integrations/libvpmm_torch_backend.so" ]; then
    echo "$lib/libvpmm_torch_backend.so" >>"$work/expected.txt"
    LC_ALL=C sort -o "$work/expected.txt" "$work/expected.txt"
fi
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

step "6. Debian packages (cpack -G DEB)"
# cpack's dependency list (dpkg-shlibdeps) needs `file`; scripts/setup.sh installs both.
debs="skipped (needs dpkg-deb, dpkg-shlibdeps and file)"
if command -v dpkg-deb >/dev/null && command -v dpkg-shlibdeps >/dev/null &&
    command -v file >/dev/null; then
    quiet cpack bash -c "cd '$work/build' && '$cpack' -G DEB"
    arch=$(dpkg --print-architecture)
    deb_rt="$work/build/libvpmm_${version}_$arch.deb"
    deb_dev="$work/build/libvpmm-dev_${version}_$arch.deb"
    if [ ! -f "$deb_rt" ] || [ ! -f "$deb_dev" ]; then
        fail "cpack made $(find "$work/build" -maxdepth 1 -name '*.deb' -printf '%f '), not" \
            "libvpmm_${version}_$arch.deb and libvpmm-dev_${version}_$arch.deb"
    fi
    # The files of a package (links too, not directories), as paths under the prefix /usr.
    deb_files() {
        dpkg-deb -c "$1" | awk '$1 !~ /^d/ { print $6 }' | sed 's|^\./usr/||' | LC_ALL=C sort
    }
    deb_files "$deb_rt" >"$work/deb-runtime.txt"
    deb_files "$deb_dev" >"$work/deb-dev.txt"
    echo "  $(basename "$deb_rt"):"
    sed 's/^/    /' "$work/deb-runtime.txt"
    echo "  $(basename "$deb_dev"):"
    sed 's/^/    /' "$work/deb-dev.txt"
    # Under /usr the library directory may differ from the --prefix install's (GNUInstallDirs).
    deb_lib=$(sed -n 's|/pkgconfig/vpmm.pc$||p' "$work/deb-dev.txt")
    [ -n "$deb_lib" ] || fail "libvpmm-dev holds no vpmm.pc"
    LC_ALL=C sort >"$work/deb-runtime-expected.txt" <<EOF
$deb_lib/libvpmm.so.$soversion
$deb_lib/libvpmm.so.$version
share/doc/vpmm/LICENSE
EOF
    diff -u "$work/deb-runtime-expected.txt" "$work/deb-runtime.txt" >&2 ||
        fail "libvpmm holds other files than the shared library and the LICENSE" \
            "(- expected, + packaged)"
    # The PyTorch backend (installed where PyTorch is) is a component of its own, not packaged.
    sed "s|^$lib/|$deb_lib/|" "$work/installed.txt" | grep -v '/libvpmm_torch_backend\.so$' |
        LC_ALL=C sort >"$work/deb-all-expected.txt"
    LC_ALL=C sort "$work/deb-runtime.txt" "$work/deb-dev.txt" >"$work/deb-all.txt"
    diff -u "$work/deb-all-expected.txt" "$work/deb-all.txt" >&2 ||
        fail "the two packages together are not the install tree (- installed, + packaged)"
    for deb in "$deb_rt" "$deb_dev"; do
        [ "$(dpkg-deb -f "$deb" Version)" = "$version" ] ||
            fail "$(basename "$deb") has version $(dpkg-deb -f "$deb" Version), not $version"
    done
    [ "$(dpkg-deb -f "$deb_rt" Package)" = libvpmm ] || fail "the runtime package is not libvpmm"
    [ "$(dpkg-deb -f "$deb_dev" Package)" = libvpmm-dev ] || fail "the dev package is not libvpmm-dev"
    dev_depends=$(dpkg-deb -f "$deb_dev" Depends)
    case ", $dev_depends," in
    *", libvpmm (= $version),"*) ;;
    *) fail "libvpmm-dev depends on '$dev_depends', not libvpmm (= $version)" ;;
    esac
    echo "  Depends: libvpmm-dev: $dev_depends; libvpmm: $(dpkg-deb -f "$deb_rt" Depends)"
    # Unpacked side by side under a root of our own, as dpkg would install them: consumers build.
    root="$work/debroot"
    dpkg-deb -x "$deb_rt" "$root"
    dpkg-deb -x "$deb_dev" "$root"
    libdir="$root/usr/$deb_lib" # what check_linkage resolves against
    quiet deb-consumer-configure "$cmake" -S "$here" -B "$work/deb-consumer" \
        -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER="$cc" -DCMAKE_PREFIX_PATH="$root/usr"
    quiet deb-consumer-build "$cmake" --build "$work/deb-consumer" --parallel "$jobs"
    check_linkage "$work/deb-consumer/consumer_shared" shared
    run_consumer "" "$work/deb-consumer/consumer_shared"
    deb_flags=$(PKG_CONFIG_PATH="$libdir/pkgconfig" "$pkg_config" --cflags --libs vpmm)
    # shellcheck disable=SC2086 # pkg-config output is a list of words
    quiet deb-pc-shared "$cc" "${strict[@]}" "$here/consumer.c" $deb_flags -o "$work/deb_pc"
    check_linkage "$work/deb_pc" shared "$libdir"
    run_consumer "$libdir" "$work/deb_pc"
    debs="libvpmm and libvpmm-dev"
fi

printf '\nrun.sh: PASS: vpmm %s installs; consumers build and run from its CMake package and\n' \
    "$version"
printf 'pkg-config, shared and static; Debian packages: %s (%d s)\n' "$debs" $((SECONDS - start))
