#!/usr/bin/env bash
# The Python side of dfgnn on a GPU machine, in one call: installs the package, runs the Python tests,
# the Cora training example, the training, attention-memory and inference benchmarks, and the DDP
# example (when 2 GPUs are visible), writing every log and result under OUTDIR. Each step has a time
# limit, and the steps share a total budget (default 360 s) so the whole script ends in about six
# minutes on an H200; a step that would start with less than 15 s left is skipped and reported.
#
# Usage: bench/run-python-gpu.sh OUTDIR [DATASETS_DIR=.bench-data]
# Environment:
#   CMAKE_ARGS     CMake arguments for the package build (scikit-build-core reads them). When unset and
#                  .devdeps holds the dev packages (see tools/gpu-check.sh), they are unpacked into
#                  /opt/dfgnn-deps and the arguments gpu-check.sh uses are set.
#   PYTHON         the interpreter with torch, torch_geometric, numpy, pytest, matplotlib (python3)
#   DFGNN_WHEELS   wheel directory for the build requirements scikit-build-core and nanobind when the
#                  interpreter lacks them (default .whl); installed with --no-index
#   BUDGET         total seconds (360); per-step limits: T_INSTALL (150), T_PYTEST (150), T_CORA (45),
#                  T_TRAIN (120), T_MEMORY (90), T_EDGE (90), T_INFER (30), T_OVERHEAD (40), T_DDP (90)
#   SKIP_INSTALL   set: use the dfgnn already importable (e.g. a second run on a warm machine)
#   PYTEST_ARGS    what pytest runs (default tests/python), e.g. one file or test ids
#   STEPS          the steps after install, space-separated (default: all of pytest train_cora train_bench
#                  attention_memory edge_bench inference_bench op_overhead e2e wheel ddp); T_E2E (240) limits
#                  e2e, T_WHEEL (150) the wheel step (pip wheel here, a fresh venv beside torch, wheel-check.py
#                  --gpu with the toolkit visible and again with it hidden, so NVRTC comes from torch's wheel);
#                  not by default: ddp1gpu (bench/ddp-one-gpu.sh, 2 ranks on one GPU; T_DDP1GPU, 150), native_probe
#                  (bench/native_crash_probe.py on the tree's native ops source; T_PROBE, 120) and torch_library
#                  (bench/torch_library_compare.py; T_TORCHLIB, 150)
# The package is installed with pip --target into build-gpu-python/site (no venv, the system site stays
# untouched) and found through PYTHONPATH; its CMake build directory build-gpu-python/build persists, so
# a second run on a warm machine rebuilds only what changed. Exit status: 0 when every step passed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bench/run-python-gpu.sh OUTDIR [DATASETS_DIR]}
datasets=${2:-.bench-data}
mkdir -p "$out"
out=$(cd "$out" && pwd)
datasets=$(cd "$datasets" 2>/dev/null && pwd || echo "$datasets")
py=${PYTHON:-python3}
budget=${BUDGET:-360}
start=$SECONDS
status=0
summary="$out/summary.txt"
: > "$summary"
export PATH=/usr/local/cuda/bin:$PATH
export DFGNN_DATASETS="$datasets"
export PYTHONUNBUFFERED=1

# run NAME LIMIT LOG COMMAND...: runs a step under min(LIMIT, budget left), records status and time
run() {
  local name=$1 limit=$2 log=$3
  shift 3
  local left=$((budget - (SECONDS - start)))
  if [ "$left" -lt 15 ]; then
    echo "=== $name: skipped (${left} s of the budget left)" | tee -a "$summary"
    status=1
    return 1
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "=== $name (limit ${limit} s, $(date +%T))"
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" > "$log" 2>&1
  local rc=$?
  local what=passed
  [ "$rc" = 0 ] || what="FAILED (exit $rc)"
  { [ "$rc" = 124 ] || [ "$rc" = 137 ]; } && what="TIMED OUT after ${limit} s"
  echo "$name: $what in $((SECONDS - t0)) s (log: $(basename "$log"))" | tee -a "$summary"
  [ "$rc" = 0 ] || status=1
  return "$rc"
}

# ---------------------------------------------------------------- install
prefix=/opt/dfgnn-deps
if [ -z "${SKIP_INSTALL:-}" ] && [ -z "${CMAKE_ARGS:-}" ] && [ -d .devdeps ]; then
  mkdir -p $prefix && for f in .devdeps/*.deb; do dpkg -x "$f" $prefix; done
  zlib=$(ls /usr/lib/x86_64-linux-gnu/libz.so.1 /lib/x86_64-linux-gnu/libz.so.1 2>/dev/null | head -1)
  export CMAKE_ARGS="-DCMAKE_PREFIX_PATH=$prefix/usr -DSQLite3_INCLUDE_DIR=$prefix/usr/include \
-DSQLite3_LIBRARY=$prefix/usr/lib/x86_64-linux-gnu/libsqlite3.so -DZLIB_INCLUDE_DIR=$prefix/usr/include \
-DZLIB_LIBRARY=$zlib -DBoost_DIR=$prefix/usr/lib/x86_64-linux-gnu/cmake/Boost-1.74.0 \
-DCMAKE_CXX_FLAGS=-isystem$prefix/usr/include"
fi
[ -d $prefix ] && export LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
site=$PWD/build-gpu-python/site
export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
export CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
{
  echo "python: $($py --version 2>&1); CMAKE_ARGS=${CMAKE_ARGS:-}"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1
  $py -c "import torch, torch_geometric; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'gpus', torch.cuda.device_count(), 'pyg', torch_geometric.__version__)" 2>&1
} | tee "$out/environment.txt"

install() {
  set -e
  wheels=${DFGNN_WHEELS:-.whl}
  if ! "$py" -c "import scikit_build_core, nanobind" 2>/dev/null; then
    echo "build requirements missing: installing scikit-build-core and nanobind from $wheels"
    "$py" -m pip install --disable-pip-version-check --no-index --find-links "$wheels" --target "$site" \
      scikit-build-core nanobind
  fi
  rm -rf "$site/dfgnn" "$site"/dfgnn-*.dist-info
  "$py" -m pip install --disable-pip-version-check --no-build-isolation --no-index --no-deps --target "$site" \
    --upgrade -C build-dir=build-gpu-python/build .
  cd /tmp && "$py" -c "import dfgnn, dfgnn.torch; print('dfgnn', dfgnn.__version__, dfgnn.has_device())"
  # dfgnn.torch's native ops, built now so that no step's timing includes their one-time build
  start=$SECONDS; "$py" -m dfgnn.torch._native && echo "native ops built or found in $((SECONDS - start)) s"
}
if [ -n "${SKIP_INSTALL:-}" ]; then
  echo "install: skipped (SKIP_INSTALL set): using $($py -c 'import dfgnn; print(dfgnn.__file__)' 2>&1)" \
    | tee -a "$summary"
elif ! run install "${T_INSTALL:-150}" "$out/install.log" \
    bash -c "$(declare -f install); py='$py' site='$site' install"; then
  tail -30 "$out/install.log"
  echo "install failed: nothing else can run" | tee -a "$summary"
  exit 1
else
  tail -1 "$out/install.log"
fi

steps=" ${STEPS:-pytest train_cora train_bench attention_memory edge_bench inference_bench op_overhead e2e wheel ddp} "
want() { [[ "$steps" == *" $1 "* ]]; }

# ---------------------------------------------------------------- the native ops' error probe
want native_probe && run native_probe "${T_PROBE:-120}" "$out/native_probe.log" \
  "$py" bench/native_crash_probe.py "$out/native_probe" --source python_bindings/dfgnn/torch/_native_ops.cpp
tail -40 "$out/native_probe.log"

# ---------------------------------------------------------------- tests
want pytest && run pytest "${T_PYTEST:-150}" "$out/pytest.log" \
  "$py" -m pytest -p no:cacheprovider -q -rs --durations=15 --junitxml="$out/pytest.xml" ${PYTEST_ARGS:-tests/python}
tail -4 "$out/pytest.log"

# ---------------------------------------------------------------- Cora training: dfgnn vs PyG
want train_cora && run train_cora "${T_CORA:-45}" "$out/train_cora.log" "$py" examples/train_cora.py --json "$out/train_cora.json"
tail -6 "$out/train_cora.log"

# ---------------------------------------------------------------- benchmarks
mkdir -p "$out/bench"
want train_bench && run train_bench "${T_TRAIN:-120}" "$out/bench/train.log" \
  "$py" bench/train_bench.py --what train --out "$out/bench" --datasets "$datasets"
grep -E "^\|" "$out/bench/train.md" 2>/dev/null
want attention_memory && run attention_memory "${T_MEMORY:-90}" "$out/bench/attention_memory.log" \
  "$py" bench/attention_memory.py --json "$out/attention_memory.json"
grep -E "^\|" "$out/bench/attention_memory.log" 2>/dev/null
want edge_bench && run edge_bench "${T_EDGE:-90}" "$out/bench/edge_bench.log" "$py" bench/edge_bench.py --json "$out/edge_bench.json"
grep -E "^\|" "$out/bench/edge_bench.log" 2>/dev/null
want inference_bench && run inference_bench "${T_INFER:-30}" "$out/bench/inference.log" \
  "$py" bench/train_bench.py --what inference --out "$out/bench" --datasets "$datasets"
grep -E "^\|" "$out/bench/inference.md" 2>/dev/null

want op_overhead && run op_overhead "${T_OVERHEAD:-90}" "$out/bench/op_overhead.log" "$py" bench/op_overhead.py "$out/op_overhead"
tail -30 "$out/bench/op_overhead.log"

# ---------------------------------------------------------------- C++ TORCH_LIBRARY op vs the nanobind path
want torch_library && run torch_library "${T_TORCHLIB:-150}" "$out/bench/torch_library.log" \
  "$py" bench/torch_library_compare.py "$out/torch_library"
tail -8 "$out/bench/torch_library.log"

# ---------------------------------------------------------------- end to end (bench/e2e.py)
if want e2e; then
  run e2e "${T_E2E:-240}" "$out/e2e.log" "$py" bench/e2e.py "$out/e2e" --datasets "$datasets" ${E2E_ARGS:-}
  tail -40 "$out/e2e.log"
fi

# ---------------------------------------------------------------- the wheel beside torch
wheel_check() {
  set -e
  rm -rf build-gpu-python/dist /tmp/dfgnn-wheel-venv
  "$py" -m pip wheel --disable-pip-version-check --no-build-isolation --no-index --no-deps -w build-gpu-python/dist \
    -C build-dir=build-gpu-python/build .
  "$py" -m venv --system-site-packages /tmp/dfgnn-wheel-venv
  # $py may itself be a venv (the H200's is): --system-site-packages then reaches the base interpreter's
  # packages, not its torch and numpy, so the new venv also reads $py's own site-packages.
  parent=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  own=$(/tmp/dfgnn-wheel-venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$parent" > "$own/dfgnn-parent-site.pth"
  # Without PYTHONPATH (it names the --target install of this script, which pip would take for an
  # installed dfgnn and skip the wheel: run b), and forced into the venv's own site-packages.
  env -u PYTHONPATH /tmp/dfgnn-wheel-venv/bin/python -m pip install --disable-pip-version-check --no-index --no-deps \
    --force-reinstall build-gpu-python/dist/dfgnn-*.whl
  env -u PYTHONPATH /tmp/dfgnn-wheel-venv/bin/python tools/wheel-check.py --gpu
  echo "=== again with the CUDA Toolkit hidden (NVRTC from torch's nvidia wheel)"
  unshare -m bash -c 'mount --make-rprivate / && for d in /usr/local/cuda /usr/local/cuda-*; do [ -d "$d" ] && mount --bind "$(mktemp -d)" "$(readlink -f "$d")"; done; env -u PYTHONPATH /tmp/dfgnn-wheel-venv/bin/python tools/wheel-check.py --gpu'
}
if want wheel; then
  run wheel "${T_WHEEL:-150}" "$out/wheel.log" bash -c "$(declare -f wheel_check); py='$py' wheel_check"
  grep -E "wheel-check|NVRTC|===|Error" "$out/wheel.log" | tail -30
fi

# ---------------------------------------------------------------- DDP (2 GPUs)
gpus=$("$py" -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
if want ddp && [ "${gpus:-0}" -ge 2 ]; then
  run ddp "${T_DDP:-90}" "$out/ddp.log" env NCCL_NVLS_ENABLE=0 \
    "$py" examples/ddp_train.py --nproc 2 --json "$out/ddp.json" --db "$out/ddp-tuning.db"
  grep -E "identical|accuracy" "$out/ddp.log"
else
  echo "ddp: skipped ($gpus GPU visible, 2 needed)" | tee -a "$summary"
fi

# ---------------------------------------------------------------- DDP, 2 processes on one GPU (STEPS=ddp1gpu)
if want ddp1gpu; then
  run ddp1gpu "${T_DDP1GPU:-150}" "$out/ddp1gpu.log" env PYTHON="$py" bash bench/ddp-one-gpu.sh "$out/ddp1gpu"
  tail -12 "$out/ddp1gpu.log"
fi

echo "=== done in $((SECONDS - start)) s (budget $budget s)" | tee -a "$summary"
exit $status
