#!/usr/bin/env bash
# The CI-built wheel on a GPU machine beside torch (issue 17): the manylinux wheel that
# tools/wheel-test.sh repaired (build for the GPU machine's Python, e.g.
#   DFGNN_BUILD_DIR=build312 DFGNN_PYTHON=python3.12 tools/wheel-test.sh
# then copy build312/wheelhouse/*.whl into WHEELS, a git-ignored folder named in the device tool's carry)
# is installed into a fresh venv that sees torch, checked on the GPU with the CUDA Toolkit visible and
# hidden (tools/wheel-check.py --gpu), then the native ops are built from the installed wheel, probed
# (bench/native_crash_probe.py) and tested (tests/python/test_native_ops.py).
# Usage: bench/wheel-carry-check.sh OUTDIR [WHEELS=.whl-carry]   (PYTHON: the interpreter with torch)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bench/wheel-carry-check.sh OUTDIR [WHEELS]}
wheels=${2:-.whl-carry}
py=${PYTHON:-python3}
mkdir -p "$out"
repo=$PWD
venv=/tmp/dfgnn-carried-venv
rm -rf "$venv"
"$py" -m venv --system-site-packages "$venv"
parent=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
own=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$parent" > "$own/dfgnn-parent-site.pth"   # $py may itself be a venv (torch lives there)
status=0
step() { echo "=== $1 ($(date +%T))"; }
step install
env -u PYTHONPATH "$venv/bin/python" -m pip install --disable-pip-version-check --no-index --no-deps \
  --force-reinstall "$wheels"/dfgnn-*.whl || exit 1
step "wheel-check --gpu"
env -u PYTHONPATH "$venv/bin/python" tools/wheel-check.py --gpu > "$out/wheel-check.log" 2>&1 || status=1
tail -3 "$out/wheel-check.log"
step "wheel-check --gpu, CUDA Toolkit hidden"
unshare -m bash -c 'mount --make-rprivate / && for d in /usr/local/cuda /usr/local/cuda-*; do [ -d "$d" ] && mount --bind "$(mktemp -d)" "$(readlink -f "$d")"; done; env -u PYTHONPATH '"$venv"'/bin/python tools/wheel-check.py --gpu' \
  > "$out/wheel-check-hidden.log" 2>&1 || status=1
tail -3 "$out/wheel-check-hidden.log"
step "native crash probe"
"${CXX:-c++}" --version | head -1
env -u PYTHONPATH DFGNN_TORCH_NATIVE=1 timeout 200 "$venv/bin/python" bench/native_crash_probe.py "$out/probe" \
  > "$out/probe.log" 2>&1 || status=1
cat "$out/probe.log" | grep -v "^build: 0" | tail -30
step "native ops tests from the wheel"
(cd /tmp && env -u PYTHONPATH timeout 200 "$venv/bin/python" -m pytest -p no:cacheprovider -q -rs \
  "$repo/tests/python/test_native_ops.py" > "$out/native-tests.log" 2>&1) || status=1
tail -4 "$out/native-tests.log"
exit $status
