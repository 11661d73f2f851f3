#!/usr/bin/env bash
# Runs every test: sets up and builds, then all CTest suites in parallel. GPU tests skip with a
# message where no CUDA device exists.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${DFGNN_BUILD_DIR:-build}
tools/setup.sh "$build"
ctest --test-dir "$build" -j "$(nproc)" --output-on-failure --timeout 900 "$@"
