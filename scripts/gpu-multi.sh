#!/usr/bin/env bash
# gpu-multi.sh — the device-machine checks of several devices, peer access and CUDA IPC, in one
# command per lease; full logs under $OUT (default ./gpu-logs), a summary last.
#
#   bash scripts/gpu-multi.sh [STAGE...]     stages, in order (default: all that fit the GPUs)
#     build       configure and build build-gpu/ (tests, the PyTorch backend against $PYTHON)
#     tests       the whole ctest suite with VPMM_TEST_REQUIRE_GPU=1, and VPMM_TEST_GPUS=2 on a
#                 machine of two or more GPUs (test_gpu_multi's two-device cases must run)
#     torch       integrations/pytorch/test_backend.py (its multi-GPU classes need 2 GPUs), and
#                 multigpu_check.py with vpmm and with the native allocator (2 GPUs)
#     drivercost  vpmm-drivercost (section 3: exportable handles and a peer's access, per handle)
#
# cmocka: when not installed, the Debian packages in .deps/ are unpacked (as gpu-check.sh does).
# The Python is $PYTHON, else /opt/torch/.venv/bin/python where it exists, else python3.
# NVLink multicast stays off (the GPU machines it was run on forbid it).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-logs}
mkdir -p "$out"
py=${PYTHON:-}
[ -n "$py" ] || { [ -x /opt/torch/.venv/bin/python ] && py=/opt/torch/.venv/bin/python; } || py=python3
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(build tests torch drivercost)
summary=()
note() { summary+=("$1"); echo "== $1"; }

for stage in "${stages[@]}"; do
  t0=$(date +%s)
  case $stage in
  build)
    prefix=()
    if [ ! -f /usr/include/cmocka.h ] && compgen -G ".deps/*.deb" >/dev/null; then
      mkdir -p /tmp/cmocka
      for d in .deps/*.deb; do dpkg -x "$d" /tmp/cmocka; done
      prefix=(-DCMAKE_PREFIX_PATH=/tmp/cmocka/usr)
    fi
    { nvidia-smi; nvcc --version; "$py" -c 'import torch; print("torch", torch.__version__)'; } \
      >"$out/device.txt" 2>&1
    if cmake -S . -B build-gpu -DVPMM_PYTHON="$py" "${prefix[@]}" >"$out/build.log" 2>&1 &&
      cmake --build build-gpu -j"$(nproc)" >>"$out/build.log" 2>&1; then
      note "build: ok ($(($(date +%s) - t0)) s)"
    else
      grep -E 'error|Error' "$out/build.log" | head -30
      note "build: FAILED (see build.log)"
      break
    fi
    ;;
  tests)
    env=(VPMM_TEST_REQUIRE_GPU=1)
    [ "$ngpu" -ge 2 ] && env+=(VPMM_TEST_GPUS=2)
    env "${env[@]}" ctest --test-dir build-gpu --output-on-failure -j4 >"$out/ctest.log" 2>&1
    rc=$?
    grep -hE "^\[gpu|NOTE|\[driver_cuda\]" "$out/ctest.log" | head -40
    note "ctest rc $rc: $(grep -E 'tests passed|tests failed' "$out/ctest.log" | tail -1) ($(($(date +%s) - t0)) s)"
    grep -E '\*\*\*Failed|\(Failed\)|Timeout' "$out/ctest.log" | head -10
    ;;
  torch)
    lib=$PWD/build-gpu/integrations/libvpmm_torch_backend.so
    export VPMM_TORCH_BACKEND=$lib PYTHONPATH=$PWD/integrations/pytorch
    timeout 420 "$py" integrations/pytorch/test_backend.py -v >"$out/torch.log" 2>&1
    rc=$?
    note "test_backend.py rc $rc: $(grep -E '^(OK|FAILED)' "$out/torch.log" | tail -1) ($(($(date +%s) - t0)) s)"
    grep -E '^(FAIL|ERROR):' "$out/torch.log" | head -20
    if [ "$ngpu" -ge 2 ]; then
      for a in vpmm native; do
        timeout 240 "$py" integrations/pytorch/multigpu_check.py --allocator $a \
          >"$out/multigpu-$a.log" 2>&1
        note "multigpu_check $a rc $?: $(grep -c PASS "$out/multigpu-$a.log") PASS, $(grep -c FAIL "$out/multigpu-$a.log") FAIL"
        grep FAIL "$out/multigpu-$a.log" | head -10
      done
    fi
    ;;
  drivercost)
    timeout 240 ./build-gpu/bin/vpmm-drivercost >"$out/drivercost.log" 2>&1
    note "vpmm-drivercost rc $?"
    sed -n '/per-handle cycle/,$p' "$out/drivercost.log"
    ;;
  *) note "unknown stage $stage" ;;
  esac
done
echo
echo "== summary ($ngpu GPUs)"
printf '%s\n' "${summary[@]}"
