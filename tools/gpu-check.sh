#!/usr/bin/env bash
# Runs the GPU side of dfgnn on a machine with a CUDA device: builds, runs the GPU test label, the
# differential verification, compute-sanitizer, and the benchmarks, writing logs and reports to
# OUTDIR. Dev packages the machine lacks (sqlite3.h, Boost.Program_options, nlohmann-json,
# xxhash, zlib headers) are taken from DEBS (.deb files fetched on a Debian machine with
#   ../shared/tools/device-deps.sh .devdeps && (cd .devdeps && apt-get download nlohmann-json3-dev libxxhash-dev zlib1g-dev)
# ) and unpacked into a private prefix.
# Usage: tools/gpu-check.sh OUTDIR [quick|full] [DEBS=.devdeps] [DATASETS=.bench-data]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: tools/gpu-check.sh OUTDIR [quick|full]}
mode=${2:-quick}
debs=${3:-.devdeps}
datasets=${4:-.bench-data}
mkdir -p "$out"
prefix=/opt/dfgnn-deps
if [ -d "$debs" ]; then
  mkdir -p $prefix
  for f in "$debs"/*.deb; do dpkg -x "$f" $prefix; done
fi
export LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
step() { echo "=== $* ($(date +%T))"; }

step configure
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDFGNN_SANITIZE_TESTS=OFF \
  -DCMAKE_PREFIX_PATH=$prefix/usr -DSQLite3_INCLUDE_DIR=$prefix/usr/include \
  -DSQLite3_LIBRARY=$prefix/usr/lib/x86_64-linux-gnu/libsqlite3.so \
  -DCMAKE_CXX_FLAGS="-isystem $prefix/usr/include" > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
step build
cmake --build build-gpu -j "$(nproc)" --target dfgnn dfgnn_tests_gpu dfgnn-verify dfgnn-graph > "$out/build.log" 2>&1 \
  || { grep -E "error|Error" -A3 "$out/build.log" | head -40; exit 1; }
cmake --build build-gpu -j "$(nproc)" --target dfgnn-bench >> "$out/build.log" 2>&1 || echo "dfgnn-bench did not build (see build.log)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/device.txt" 2>&1

step "ctest -L gpu"
ctest --test-dir build-gpu -L gpu -j 4 --output-on-failure --timeout 900 > "$out/ctest-gpu.log" 2>&1
tail -5 "$out/ctest-gpu.log"; grep -E "Failed|\*\*\*" "$out/ctest-gpu.log" | head -20

step "compute-sanitizer (memcheck, racecheck) on the tiny corpus"
for tool in memcheck racecheck; do
  timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 build-gpu/tools/dfgnn-verify --tiny --repo . \
    --threads 16 > "$out/sanitizer-$tool.log" 2>&1
  echo "$tool exit $? : $(grep -E 'ERROR SUMMARY|cases:' "$out/sanitizer-$tool.log" | tr '\n' ' ')"
done

if [ "$mode" = full ]; then
  step "dfgnn-verify full"
  build-gpu/tools/dfgnn-verify --repo . --datasets "$datasets" --all-schedules --threads 16 \
    --report "$out/verify.md" > "$out/verify.log" 2>&1
  tail -3 "$out/verify.log"
fi
if [ -x build-gpu/tools/dfgnn-bench ] && [ -f bench/run-benchmarks.sh ]; then
  step benchmarks
  bash bench/run-benchmarks.sh build-gpu "$out" "$datasets" "$mode"
fi
step done
