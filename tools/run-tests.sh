#!/usr/bin/env bash
# Runs every test: sets up and builds, then all CTest suites in parallel, the fuzz targets for about a
# minute (DFGNN_FUZZ_SECONDS), the Python package's tests (tools/python-tests.sh: builds the wheel,
# installs it into a venv, pytest, with torch and without), the documentation (tools/docs.sh) and the
# portable wheel (tools/wheel-test.sh: the same wheel repaired and run with the CUDA Toolkit and system
# libraries hidden). GPU tests skip with a message where no CUDA device exists. Fails if any part fails.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${DFGNN_BUILD_DIR:-build}
tools/setup.sh "$build"
status=0
ctest --test-dir "$build" -j "$(nproc)" --output-on-failure --timeout 900 "$@" || status=$?
# The libFuzzer targets (tests/fuzz, tools/fuzz.sh): one clang build of their own, the regression inputs
# replayed, then DFGNN_FUZZ_SECONDS of fuzzing in all (default 60; 0 skips the step).
if [ "${DFGNN_FUZZ_SECONDS:-60}" != 0 ]; then
  DFGNN_FUZZ_TOTAL_SECONDS=${DFGNN_FUZZ_SECONDS:-60} DFGNN_FUZZ_BUILD_DIR="$build-fuzz" tools/fuzz.sh || status=$?
fi
# The Python package, installed with pip into $build/python-venv, and its pytest suite.
DFGNN_BUILD_DIR="$build" tools/python-tests.sh || status=$?
# The documentation (Sphinx, warnings as errors) from that venv's dfgnn and the built tools.
DFGNN_BUILD_DIR="$build" tools/docs.sh || status=$?
# The wheel python-tests.sh built, repaired (manylinux) and tested where nothing of the build machine is.
DFGNN_BUILD_DIR="$build" tools/wheel-test.sh || status=$?
exit "$status"
