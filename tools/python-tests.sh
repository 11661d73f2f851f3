#!/usr/bin/env bash
# Tests of the Python package: builds the wheel once (pip wheel ., into $DFGNN_BUILD_DIR/dist),
# installs it into a virtual environment and runs pytest on tests/python. Needs no GPU: the GPU
# tests skip with the reason. PyTorch and PyTorch Geometric are installed into the venv too (about
# a minute and 5 GiB from PyPI, or nothing where the venv sees them already), so the torch ops and
# layers are tested on the CPU (float64 reference path) against PyG; set DFGNN_PYTHON_TORCH=0 to
# skip them (their tests then skip). When the venv has torch, the suite runs a second time, from
# the same wheel, in a venv without it ($DFGNN_BUILD_DIR/python-venv-notorch: numpy and pytest
# only), which keeps the torch guards of the test files honest; DFGNN_PYTHON_NOTORCH=0 skips that.
# tools/wheel-test.sh then repairs and tests the same wheel. Called by tools/run-tests.sh; extra
# arguments go to pytest.
# Environment: DFGNN_BUILD_DIR (default build): the venv is $DFGNN_BUILD_DIR/python-venv (or
# DFGNN_VENV) and the package's CMake build directory $DFGNN_BUILD_DIR/python, kept between runs so
# that a second build only recompiles what changed; DFGNN_PYTHON (default python3) makes the venvs.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${DFGNN_BUILD_DIR:-build}
venv=${DFGNN_VENV:-$build/python-venv}
export PATH=/usr/local/cuda/bin:$PATH

[ -x "$venv/bin/python" ] || "${DFGNN_PYTHON:-python3}" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check --quiet)
echo "python-tests: installing the build and test requirements into $venv"
# scipy and pymetis: dfgnn.reorder's "rcm" and "metis" orders (their tests skip without them)
"${pip[@]}" install "scikit-build-core>=0.11" "nanobind>=2.4" "numpy>=1.22" "pytest>=7" "scipy>=1.8" "pymetis>=2025.2"
if [ "${DFGNN_PYTHON_TORCH:-1}" != 0 ]; then
  echo "python-tests: installing torch and torch_geometric (DFGNN_PYTHON_TORCH=0 skips them)"
  start=$SECONDS
  "${pip[@]}" install "torch>=2.4" "torch_geometric>=2.8"
  echo "python-tests: torch installed in $((SECONDS - start)) s"
fi
# The wheel, as `pip install .` would build it; the build tools come from the venv (installed above)
# rather than a fresh isolated environment, and the CMake build directory persists.
echo "python-tests: pip wheel . (scikit-build-core: libdfgnn, the nanobind extension and the CLIs, Release)"
start=$SECONDS
rm -rf "$build/dist"
"${pip[@]}" wheel --no-build-isolation --no-deps -C build-dir="$build/python" -w "$build/dist" .
wheel=$(echo "$build"/dist/dfgnn-*.whl)
[ -f "$wheel" ] || { echo "python-tests: pip wheel made no single dfgnn wheel in $build/dist" >&2; exit 1; }
"${pip[@]}" install --force-reinstall --no-deps "$wheel"
echo "python-tests: built and installed $(basename "$wheel") in $((SECONDS - start)) s"

# Isolated mode (-I) keeps the current directory, the source tree, off sys.path: the tests import
# the installed package (pytest itself may come from the system's site-packages, so the venv need
# not have its script). Skipped tests are listed with their reasons (-rs).
run_pytest() {
  local rc=0
  "$1/bin/python" -I -m pytest -p no:cacheprovider -q -rs tests/python "${@:2}" || rc=$?
  if [ "$rc" = 5 ]; then
    echo "python-tests: pytest collected no tests (exit 5): failing" >&2
    rc=1
  fi
  return "$rc"
}
status=0
run_pytest "$venv" "$@" || status=$?

has_torch=$("$venv/bin/python" -c 'import importlib.util as u; print(int(u.find_spec("torch") is not None))')
if [ "$has_torch" = 1 ] && [ "${DFGNN_PYTHON_NOTORCH:-1}" != 0 ]; then
  bare=$build/python-venv-notorch
  echo "python-tests: the suite again without torch, in $bare (the same wheel)"
  start=$SECONDS
  [ -x "$bare/bin/python" ] || "${DFGNN_PYTHON:-python3}" -m venv "$bare"
  bare_pip=("$bare/bin/python" -m pip --disable-pip-version-check --quiet)
  "${bare_pip[@]}" install "numpy>=1.22" "pytest>=7"
  "${bare_pip[@]}" install --force-reinstall --no-deps "$wheel"
  if "$bare/bin/python" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("torch") is not None)'; then
    run_pytest "$bare" "$@" || status=$?
  else
    echo "python-tests: $bare sees torch, so it cannot test the suite without it" >&2
    status=1
  fi
  echo "python-tests: the run without torch took $((SECONDS - start)) s"
fi
exit "$status"
