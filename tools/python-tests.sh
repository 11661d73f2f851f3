#!/usr/bin/env bash
# Tests of the Python package: installs dfgnn the README way (`pip install .`, into a virtual
# environment) and runs pytest on tests/python. Needs no GPU: the GPU tests skip with the reason.
# PyTorch and PyTorch Geometric are installed into the venv too (about a minute and 5 GiB from PyPI),
# so the torch ops and layers are tested on the CPU (float64 reference path) against PyG; set
# DFGNN_PYTHON_TORCH=0 to skip them (their tests then skip). Called by tools/run-tests.sh; extra
# arguments go to pytest.
# Environment: DFGNN_BUILD_DIR (default build): the venv is $DFGNN_BUILD_DIR/python-venv (or
# DFGNN_VENV) and the package's CMake build directory $DFGNN_BUILD_DIR/python, kept between runs so
# that a second install only rebuilds what changed; DFGNN_PYTHON (default python3) makes the venv.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${DFGNN_BUILD_DIR:-build}
venv=${DFGNN_VENV:-$build/python-venv}
export PATH=/usr/local/cuda/bin:$PATH

[ -x "$venv/bin/python" ] || "${DFGNN_PYTHON:-python3}" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check --quiet)
echo "python-tests: installing the build and test requirements into $venv"
"${pip[@]}" install "scikit-build-core>=0.10" "nanobind>=2.4" "numpy>=1.22" "pytest>=7"
if [ "${DFGNN_PYTHON_TORCH:-1}" != 0 ]; then
  echo "python-tests: installing torch and torch_geometric (DFGNN_PYTHON_TORCH=0 skips them)"
  start=$SECONDS
  "${pip[@]}" install "torch>=2.4" "torch_geometric>=2.8"
  echo "python-tests: torch installed in $((SECONDS - start)) s"
fi
# pip install . as in the README; the build tools come from the venv (installed above) rather than a
# fresh isolated environment, and the CMake build directory persists.
echo "python-tests: pip install . (scikit-build-core: libdfgnn and the nanobind extension, Release)"
start=$SECONDS
"${pip[@]}" install --no-build-isolation -C build-dir="$build/python" .
echo "python-tests: installed in $((SECONDS - start)) s"

# The pytest script (not python -m pytest) keeps the source tree off sys.path: the tests import
# the installed package. Skipped tests are listed with their reasons (-rs).
set +e
"$venv/bin/pytest" -p no:cacheprovider -q -rs tests/python "$@"
rc=$?
set -e
if [ "$rc" = 5 ]; then
  echo "python-tests: pytest collected no tests (exit 5): failing" >&2
  exit 1
fi
exit "$rc"
