#!/usr/bin/env bash
# Runs every test: sets up and builds, then all CTest suites in parallel, then the Python package's
# tests (tools/python-tests.sh: builds the wheel, installs it into a venv, pytest, with torch and
# without), then the portable wheel (tools/wheel-test.sh: the same wheel repaired and run with the
# CUDA Toolkit and system libraries hidden). GPU tests skip with a message where no CUDA device
# exists. Fails if any part fails.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${DFGNN_BUILD_DIR:-build}
tools/setup.sh "$build"
status=0
ctest --test-dir "$build" -j "$(nproc)" --output-on-failure --timeout 900 "$@" || status=$?
# The Python package, installed with pip into $build/python-venv, and its pytest suite.
DFGNN_BUILD_DIR="$build" tools/python-tests.sh || status=$?
# The wheel python-tests.sh built, repaired (manylinux) and tested where nothing of the build machine is.
DFGNN_BUILD_DIR="$build" tools/wheel-test.sh || status=$?
exit "$status"
