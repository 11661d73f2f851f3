#!/usr/bin/env bash
# Installs what dfgnn needs on a fresh Debian machine (when missing), then configures and builds.
# Usage: tools/setup.sh [build-dir]   (default: build). Idempotent: a second run only rebuilds.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}

packages=(cmake ninja-build g++ libgtest-dev libspdlog-dev libboost-program-options-dev nlohmann-json3-dev libxxhash-dev
          libsqlite3-dev zlib1g-dev python3-venv python3-dev clang libclang-rt-14-dev)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""; [ "$(id -u)" = 0 ] || sudo_cmd=sudo
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || {
  echo "setup: the CUDA Toolkit (12 or 13, with NVRTC) is required but was not found under /usr/local/cuda" >&2
  exit 1
}
export PATH=/usr/local/cuda/bin:$PATH

if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo ${DFGNN_CMAKE_ARGS:-} >/dev/null
fi
cmake --build "$build" -j "$(nproc)"
