#!/usr/bin/env bash
# setup.sh — installs what building vpmm, running its demo and running its tests need, on Debian
# or Ubuntu, when any of it is missing. The README's two commands start with it, and .ci/run runs
# those commands, so a fresh machine with the CUDA toolkit needs nothing else.
#
#   bash scripts/setup.sh            # the build and the test suite
#   bash scripts/setup.sh --fuzzer   # also clang and its runtimes: the fuzzer (tests/fuzz/run_ci.sh)
#   bash scripts/setup.sh --lint     # also clang-format and the static analyzer (scripts/lint.sh)
#   bash scripts/setup.sh --check    # only say what is missing (exit 1 if anything is)
#
# What: build-essential (gcc, g++ for nvcc, make, dpkg-dev), cmake (>= 3.20), libcmocka-dev (the
# tests), pkg-config and file (test_package: the installed package and the Debian packages),
# python3 (the Python tests), zlib1g-dev (gzipped traces read in-process); with --fuzzer also clang
# and libclang-rt-dev; with --lint clang, clang-tools (scan-build) and clang-format. The sanitizer stages need nothing more: gcc brings ASan, UBSan and TSan.
# The CUDA toolkit (headers, nvcc) is not a Debian package of the right version: it is checked,
# not installed.
#
# Idempotent and fast when all is there: one dpkg-query per package, no apt-get, no network. When
# something is missing it runs `apt-get update` and `apt-get install` of just that, as root, or
# through sudo when run by another user; where it cannot (no apt-get, no root and no sudo) it says
# what to install and exits 1.
set -euo pipefail

packages=(build-essential cmake libcmocka-dev pkg-config file python3 zlib1g-dev)
check_only=0
for arg in "$@"; do
    case "$arg" in
    --fuzzer) packages+=(clang libclang-rt-dev) ;;
    --lint) packages+=(clang clang-tools clang-format) ;;
    --check) check_only=1 ;;
    -h | --help)
        sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "setup.sh: unknown argument '$arg' (--fuzzer, --lint, --check, --help)" >&2
        exit 2
        ;;
    esac
done

say() { echo "setup.sh: $*"; }

# The packages dpkg does not list as installed: the second letter of dpkg -l's status ("ii",
# or "hi" for a held package) is "i" for an installed one.
missing=()
if command -v dpkg-query >/dev/null; then
    for p in "${packages[@]}"; do
        status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)
        case "$status" in
        ?i*) ;;
        *) missing+=("$p") ;;
        esac
    done
else
    # Not Debian: check the commands, and leave the rest to CMake's own messages.
    for c in cc c++ make cmake pkg-config; do
        command -v "$c" >/dev/null || missing+=("$c")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        say "not a Debian system (no dpkg-query), and these are missing: ${missing[*]}."
        say "Install a C/C++ compiler, make, CMake >= 3.20, cmocka, pkg-config, file and python3."
        exit 1
    fi
fi

if [ ${#missing[@]} -eq 0 ]; then
    say "all ${#packages[@]} packages present (${packages[*]})"
elif [ "$check_only" = 1 ]; then
    say "missing: ${missing[*]}"
    exit 1
else
    if [ "$(id -u)" -eq 0 ]; then
        sudo=""
    elif command -v sudo >/dev/null; then
        sudo="sudo"
    else
        say "missing: ${missing[*]}, and this user is not root and has no sudo."
        say "As root, run: apt-get update && apt-get install -y ${missing[*]}"
        exit 1
    fi
    if ! command -v apt-get >/dev/null; then
        say "missing: ${missing[*]}, and there is no apt-get to install them with."
        exit 1
    fi
    say "installing ${missing[*]}${sudo:+ (with sudo)}"
    # No questions asked; sudo resets the environment, so the variable is given to sudo itself.
    as_root() {
        if [ -n "$sudo" ]; then
            "$sudo" DEBIAN_FRONTEND=noninteractive "$@"
        else
            DEBIAN_FRONTEND=noninteractive "$@"
        fi
    }
    if ! as_root apt-get update -q ||
        ! as_root apt-get install -y -q --no-install-recommends "${missing[@]}"; then
        say "could not install ${missing[*]} (see apt-get's message above)."
        say "Install them by hand: apt-get install -y ${missing[*]}"
        exit 1
    fi
fi

# CMake's own version check would stop the build; say why, and what to do, here.
if command -v cmake >/dev/null; then
    v=$(cmake --version | sed -n '1s/[^0-9]*\([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p')
    if [ -n "$v" ] && [ "$(printf '%s\n3.20\n' "$v" | sort -V | head -1)" != 3.20 ]; then
        say "cmake $v is older than 3.20, which vpmm needs: install a newer one" \
            "(e.g. from the distribution's backports, or \`pip install cmake\`)."
        exit 1
    fi
fi

# The CUDA toolkit: where the build looks for it (CMakeLists.txt: /usr/local/cuda, CUDA_HOME,
# CUDA_PATH, PATH). A warning only: a toolkit elsewhere can still be given to CMake.
nvcc=""
for d in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
    if [ -n "$d" ] && [ -x "$d/bin/nvcc" ]; then
        nvcc="$d/bin/nvcc"
        break
    fi
done
[ -n "$nvcc" ] || nvcc=$(command -v nvcc || true)
if [ -z "$nvcc" ]; then
    say "warning: no CUDA toolkit found (no nvcc in /usr/local/cuda/bin, \$CUDA_HOME, \$CUDA_PATH" \
        "or PATH). vpmm needs its headers to build: install the CUDA toolkit from NVIDIA" \
        "(https://developer.nvidia.com/cuda-downloads), or give CMake -DCUDAToolkit_ROOT=<dir>."
fi
