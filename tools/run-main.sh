#!/usr/bin/env bash
# The main job on the graph shipped with the repository (Cora): sets up and builds, then loads,
# validates and fingerprints the graph and runs every op on it.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${DFGNN_BUILD_DIR:-build}
tools/setup.sh "$build"
"$build/tools/dfgnn-graph" data/cora "$@"
