#!/usr/bin/env bash
# pip_check.sh — proves the one-command install of vpmm's PyTorch backend, as a PyTorch user
# would meet it (device machine: a GPU and a CUDA build of PyTorch):
#
#   bash integrations/pytorch/pip_check.sh [--python PY] [--out DIR] [--deb]
#
#   1. a fresh virtual environment (PY -m venv), which sees PY's PyTorch: offline machines have no
#      index to install torch from, so a .pth file puts PY's site-packages on the venv's path (with
#      an index, `pip install torch` in the venv does the same);
#   2. the one command: pip install --no-build-isolation ./integrations/pytorch (the build's log
#      in DIR/pip.log);
#   3. vpmm.torch.backend_info() names the library pip installed and the PyTorch it serves; then
#      enable() and a graph-tree run: torch.compile(mode="reduce-overhead") over new batch sizes
#      and back, outputs against eager, vpmm's pool checked (vpmm.torch.check());
#   4. the same package, told it was built for another PyTorch, refuses the import and says why;
#   5. with --deb: the CMake build against PY's PyTorch and `cpack -G DEB`: the libvpmm-torch
#      package and its files.
# PY defaults to /opt/torch/.venv/bin/python where it exists, else python3. Exit status 0 when
# every step passed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
py=/opt/torch/.venv/bin/python
[ -x "$py" ] || py=python3
out=${OUT:-pip-check} deb=0
while [ $# -gt 0 ]; do
  case $1 in
  --python) py=$2; shift 2 ;;
  --out) out=$2; shift 2 ;;
  --deb) deb=1; shift ;;
  *) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
  esac
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
fails=0
say() { echo "pip_check: $*"; }
step() { # step NAME RC
  if [ "$2" -eq 0 ]; then say "$1: ok"; else say "$1: FAILED (exit $2)"; fails=$((fails + 1)); fi
}

venv=$(mktemp -d)/venv
"$py" -m venv "$venv"
step "fresh venv ($("$venv/bin/python" -V 2>&1))" $?
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
torch_site=$("$py" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
echo "$torch_site" >"$site/zz_machine_torch.pth"
"$venv/bin/python" -c 'import torch; print("PyTorch", torch.__version__, "CUDA", torch.version.cuda)'
step "PyTorch visible in the venv" $?

t0=$(date +%s)
(cd "$repo" && "$venv/bin/python" -m pip install -v --no-build-isolation ./integrations/pytorch) \
  >"$out/pip.log" 2>&1
rc=$?
step "pip install --no-build-isolation ./integrations/pytorch ($(($(date +%s) - t0)) s)" $rc
[ $rc -eq 0 ] || tail -n 30 "$out/pip.log"

# Step 3, from a directory outside the checkout: the installed package, not the source tree.
cd "$(mktemp -d)" || exit 2
"$venv/bin/python" - "$site" <<'EOF'
import os, sys
import vpmm.torch
info = vpmm.torch.backend_info()
print("backend_info:", info)
assert info["path"].startswith(sys.argv[1]), "the backend is not the one pip installed"
vpmm.torch.enable()
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(),
                            torch.nn.Linear(1024, 512)).cuda().eval()
compiled = torch.compile(model, mode="reduce-overhead")
worst = 0.0
with torch.no_grad():
    for batch in (64, 128, 64, 32, 128):
        x = torch.randn(batch, 512, device="cuda")
        for _ in range(3):
            y = compiled(x).clone()
        worst = max(worst, (y - model(x)).abs().max().item())
torch.cuda.synchronize()
st = vpmm.torch.stats()
print("graph tree: max |compiled - eager| %.2e; vpmm mapped %.1f MiB, graph pools %s; "
      "torch.cuda.memory_reserved %.1f MiB" % (worst, st["mapped_bytes"] / 2**20,
                                               st.get("graph_pools"),
                                               torch.cuda.memory_reserved() / 2**20))
assert worst < 1e-3, "compiled outputs differ from eager"
assert vpmm.torch.check() == 0, "vpmm's pool violates an invariant"
print("PASS graph tree on vpmm installed by pip")
EOF
step "enable() and a graph-tree run from the installed package" $?

info="$site/vpmm/_backend_info.py"
cp "$info" "$info.saved"
sed -i 's/^TORCH_VERSION = .*/TORCH_VERSION = "2.10.0"/' "$info"
msg=$("$venv/bin/python" -c 'import vpmm.torch' 2>&1)
rc=$?
mv "$info.saved" "$info"
echo "$msg" | tail -n 1
if [ $rc -ne 0 ] && echo "$msg" | grep -q "ImportError: vpmm.torch: .*built for PyTorch 2.10.0"; then
  step "another PyTorch refused at import" 0
else
  step "another PyTorch refused at import" 1
fi

if [ $deb = 1 ]; then
  cd "$repo" || exit 2
  t0=$(date +%s)
  shlib=()
  command -v file >/dev/null && command -v dpkg-shlibdeps >/dev/null ||
    shlib=(-D CPACK_DEBIAN_RUNTIME_PACKAGE_SHLIBDEPS=OFF)
  { cmake -S . -B build-deb -DCMAKE_BUILD_TYPE=Release -DVPMM_BUILD_TESTS=OFF \
      -DVPMM_BUILD_SAMPLES=OFF -DVPMM_PYTHON="$py" &&
    cmake --build build-deb -j"$(nproc)" &&
    (cd build-deb && cpack -G DEB "${shlib[@]}"); } >"$out/deb.log" 2>&1
  rc=$?
  step "cmake + cpack -G DEB ($(($(date +%s) - t0)) s)" $rc
  for d in build-deb/libvpmm-torch_*.deb; do
    [ -f "$d" ] || { step "libvpmm-torch package made" 1; break; }
    dpkg-deb -I "$d" | sed -n '/Package:/,/Description:/p'
    dpkg-deb -c "$d" | awk '{print $6}' | grep -q 'libvpmm_torch_backend.so$'
    step "libvpmm-torch carries libvpmm_torch_backend.so ($(basename "$d"))" $?
  done
fi
say "$fails step(s) failed"
[ $fails -eq 0 ]
