#!/usr/bin/env bash
# Builds the documentation (docs/, Sphinx) into $DFGNN_BUILD_DIR/docs with warnings as errors, then
# runs the tutorial's program (docs/tutorial_gat.py) on the CPU for a few epochs, so that the code
# the tutorial shows is checked against the current API. Called by tools/run-tests.sh after
# tools/python-tests.sh.
#
# It builds nothing of dfgnn itself: autodoc imports the package that tools/python-tests.sh
# installed into its venv ($DFGNN_BUILD_DIR/python-venv, or DFGNN_VENV), and the CLI pages run the
# --help of the tools the main build made ($DFGNN_BUILD_DIR/tools, or DFGNN_TOOLS_DIR). The pinned
# docs/requirements.txt is installed into that venv. Extra arguments go to sphinx-build.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${DFGNN_BUILD_DIR:-build}
venv=${DFGNN_VENV:-$build/python-venv}
python=$venv/bin/python
out=$build/docs

if ! [ -x "$python" ] || ! "$python" -c 'import dfgnn, dfgnn.torch' 2>/dev/null; then
  echo "docs: dfgnn with torch is not importable from $venv: run tools/python-tests.sh first (it installs both)" >&2
  exit 1
fi
start=$SECONDS
"$python" -m pip --disable-pip-version-check --quiet install -r docs/requirements.txt
echo "docs: requirements installed in $((SECONDS - start)) s"

start=$SECONDS
# -E: read every page again, since autodoc cannot tell that the installed package changed
DFGNN_TOOLS_DIR=${DFGNN_TOOLS_DIR:-$build/tools} "$python" -m sphinx -E -W --keep-going -q -b html docs "$out" "$@"
echo "docs: built $out/index.html in $((SECONDS - start)) s"

# The tutorial on the CPU (GPUs hidden, so tuning is skipped as on a machine without one), with a
# private tuning database so that no user's cache is touched.
start=$SECONDS
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
CUDA_VISIBLE_DEVICES= DFGNN_CACHE_DIR=$scratch DFGNN_SITE_DB= "$python" docs/tutorial_gat.py --epochs 3 \
  > "$scratch/tutorial.log" 2>&1 || { cat "$scratch/tutorial.log" >&2; echo "docs: the tutorial's program failed" >&2; exit 1; }
echo "docs: the tutorial's program ran on the CPU in $((SECONDS - start)) s ($(grep -m1 'epochs:' "$scratch/tutorial.log"))"
