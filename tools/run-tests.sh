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
failed=()
logs=$build/test-logs
mkdir -p "$logs"
# Each part's output is shown as it runs and kept in $logs/<part>.log; a failed part's tail is
# printed again at the end, since a CI report may show only the last lines of the run.
part() {
  local name=$1 rc=0
  shift
  "$@" 2>&1 | tee "$logs/$name.log" || rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || failed+=("$name")
}
# Tests labelled long (the exhaustive NVRTC compile: every reachable kernel specialisation; on a GPU,
# gpu.verify_quick's differential sweep) run with DFGNN_LONG_TESTS=1; by default CI compiles their
# sample (NvrtcSample) instead, and a GPU host runs gpu.verify_tiny.
long=(-LE long); [ "${DFGNN_LONG_TESTS:-0}" = 1 ] && long=()
part ctest ctest --test-dir "$build" -j "$(nproc)" --output-on-failure --timeout 900 "${long[@]}" "$@"
# The libFuzzer targets (tests/fuzz, tools/fuzz.sh): one clang build of their own, the regression inputs
# replayed, then DFGNN_FUZZ_SECONDS of fuzzing in all (default 60; 0 skips the step). The seed is fixed
# (DFGNN_FUZZ_SEED, default 1) so that a test run repeats the inputs its last run on this tree tried
# first; tools/fuzz.sh run alone seeds randomly and explores, and what it finds becomes a regression input.
if [ "${DFGNN_FUZZ_SECONDS:-60}" != 0 ]; then
  part fuzz env DFGNN_FUZZ_TOTAL_SECONDS="${DFGNN_FUZZ_SECONDS:-60}" DFGNN_FUZZ_SEED="${DFGNN_FUZZ_SEED:-1}" \
    DFGNN_FUZZ_BUILD_DIR="$build-fuzz" tools/fuzz.sh
fi
# The Python package, installed with pip into $build/python-venv, and its pytest suite.
part python-tests env DFGNN_BUILD_DIR="$build" tools/python-tests.sh
# The documentation (Sphinx, warnings as errors) from that venv's dfgnn and the built tools.
part docs env DFGNN_BUILD_DIR="$build" tools/docs.sh
# The wheel python-tests.sh built, repaired (manylinux) and tested where nothing of the build machine is.
part wheel-test env DFGNN_BUILD_DIR="$build" tools/wheel-test.sh
if ((${#failed[@]})); then
  for name in "${failed[@]}"; do
    echo "===== run-tests: $name failed; the end of its output ($logs/$name.log):"
    grep -E "FAILED|ERROR|Failed|\*\*\*|failed|error:" "$logs/$name.log" | tail -30 || true
    tail -25 "$logs/$name.log"
  done
  echo "run-tests: FAILED: ${failed[*]}"
  exit 1
fi
echo "run-tests: every part passed"
